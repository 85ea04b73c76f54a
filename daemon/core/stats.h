/*
 * stats.h - the daemon's counters and gauges, declared once.
 *
 * The X-macro table below drives the struct, the STATS reply (and so
 * `granaryctl stats` and its JSON), and the metrics endpoint.  Add a
 * line here and it appears everywhere.  Counters only grow (Prometheus
 * rates them), gauges go up and down; some of both are kept by the tiers
 * and copied in when a snapshot is taken.
 */
#ifndef GR_STATS_H
#define GR_STATS_H

#include <stdint.h>

#define GR_STATS(X) \
    X(counter, hits_dram,            "chunk lookups served from the DRAM tier") \
    X(counter, hits_nvme,            "chunk lookups served from the NVMe tier") \
    X(counter, misses,               "chunk lookups that read the source") \
    X(counter, fetch_joins,          "lookups that joined a fetch already in flight (single-flight)") \
    X(counter, nvme_promotions,      "chunks copied from the NVMe tier up into DRAM") \
    X(counter, bytes_served,         "file bytes sent to clients") \
    X(counter, requests,             "requests received") \
    X(counter, dataset_lookups,      "paths looked up in a dataset's manifest (stat, readdir, open, hints)") \
    X(counter, dataset_scans,        "dataset scans finished (a new manifest each)") \
    X(counter, dataset_opens,        "opens answered from a dataset's manifest (no file system operation)") \
    X(counter, dataset_stamp_checks, "dataset stamps looked at (at most one per dataset per recheck)") \
    X(counter, read_requests,        "READ and READX requests (reads clients serve from kept leases never come)") \
    X(counter, request_errors,       "requests answered with an error") \
    X(counter, opens,                "files opened by clients") \
    X(counter, attr_cache_hits,      "opens answered from the attribute cache") \
    X(counter, attr_proof_revalidations, "of those, opens whose expired entry the client's access proof showed unchanged (no file system operation)") \
    X(counter, source_opens_spared,  "opens resolved without opening the file: the client's access proof kept as its descriptor") \
    X(counter, source_lookups_spared, "of those, with no lookup either: the proof's own name, on the root's mount, was the path") \
    X(counter, source_reads,         "chunk reads from the source") \
    X(counter, source_bytes_read,    "bytes read from the source") \
    X(counter, source_errors,        "source reads or opens that failed") \
    X(counter, peer_reads,           "chunks other nodes of the peer cache gave us") \
    X(counter, peer_bytes_read,      "bytes other nodes of the peer cache gave us") \
    X(counter, peer_served,          "chunks this node served to other nodes of the peer cache") \
    X(counter, peer_served_bytes,    "bytes this node served to other nodes of the peer cache") \
    X(counter, peer_refused,         "peer requests not served: not under the roots, another version here, a source error") \
    X(counter, peer_auth_failures,   "peer connections that did not authenticate (wrong key on either side, not a member, malformed, too slow)") \
    X(counter, nvme_writes,          "chunks written to the NVMe tier") \
    X(counter, nvme_write_errors,    "chunks the NVMe tier failed to store") \
    X(counter, nvme_writes_skipped,  "chunks not written because the write-behind queue was full") \
    X(counter, nvme_checksum_errors, "NVMe reads that failed their checksum (dropped, refetched)") \
    X(counter, evictions_dram,       "chunks evicted from the DRAM tier") \
    X(counter, dram_not_admitted,    "misses the DRAM tier's policy chose not to keep") \
    X(counter, dram_heap_fallbacks,  "chunks that found no free arena block (served by copy)") \
    X(counter, extents_served,       "bytes handed over as shared-memory extents") \
    X(counter, leases_granted,       "leases given to clients") \
    X(counter, lease_errors,         "releases of leases a client did not hold") \
    X(counter, evictions_nvme,       "chunks evicted from the NVMe tier") \
    X(counter, policy_switches,      "tier policy changes made by policy = auto (each one logged with its reason)") \
    X(counter, prefetch_issued,      "chunk fetches started ahead of demand (read-ahead, hints)") \
    X(counter, prefetch_used,        "prefetched chunks a client then asked for") \
    X(counter, prefetch_wasted,      "prefetched chunks evicted before anyone asked for them") \
    X(counter, readahead_chunks,     "chunks read ahead for sequential readers") \
    X(counter, hint_entries_added,   "chunks named by job hints") \
    X(counter, hint_errors,          "hinted ranges skipped: unresolvable, refused by the access judgement, or past EOF") \
    X(counter, dram_rehomed,         "quarantined chunks a proven reader claimed (copied into its own memory)") \
    X(counter, hint_skipped,         "hinted chunks dropped because the job read past them") \
    X(counter, dir_readahead_listings, "directories listed for read-ahead across their files") \
    X(counter, dir_readahead_streams, "connections found opening a directory's files in name order (read ahead across files)") \
    X(counter, dir_readahead_files,  "files hinted ahead of such connections (counted again in the hint counters)") \
    X(counter, stall_microseconds,   "microseconds clients waited on reads that missed DRAM") \
    X(counter, stalled_reads,        "reads that waited on a miss") \
    X(counter, warmup_files,         "files warmup has finished") \
    X(counter, warmup_bytes,         "bytes warmup read from the source") \
    X(counter, warmup_chunks_skipped, "chunks warmup found cached already") \
    X(counter, warmup_failed,        "files warmup could not cache") \
    X(counter, dram_segment_renewals, "arena segments given a fresh memfd as they passed to another uid") \
    X(counter, ckpt_puts,            "checkpoints staged on the node (fsynced and acknowledged)") \
    X(counter, ckpt_bytes_staged,    "bytes of checkpoints staged") \
    X(counter, ckpt_published,       "checkpoints published at their destination (renamed, directory fsynced)") \
    X(counter, ckpt_bytes_drained,   "bytes copied by checkpoint drains (replicas and destinations)") \
    X(counter, ckpt_drain_errors,    "checkpoint drain attempts that failed (the staged copy is kept and retried)") \
    X(counter, ckpt_staged_opens,    "opens of a checkpoint's destination served from its staged copy (before publish)") \
    X(counter, ckpt_superseded,      "checkpoints dropped unpublished: a newer one for the same destination was published first") \
    X(counter, ckpt_acked_staged,    "checkpoints acknowledged early, while the daemon held their sealed memfd only (CKPT_PUT ack staged)") \
    X(counter, ckpt_refused,         "checkpoints refused because staging was full (ENOSPC)") \
    X(counter, access_denied,        "opens refused: no or a wrong access proof (the client's own fd)") \
    X(counter, connections_total,    "client connections accepted") \
    X(counter, connections_refused,  "client connections refused (max_clients, max_clients_per_uid, unidentified peer)") \
    X(counter, connections_failed,   "connections the daemon dropped because a reply could not be built") \
    X(counter, loop_cpu_microseconds, "CPU time (user and system) of the event-loop thread, which takes every client's requests: a rate near 1,000,000 a second means it is the node's limit") \
    X(gauge,   connections,          "client connections open") \
    X(gauge,   fetches_inflight,     "chunk fetches in flight") \
    X(gauge,   source_running,       "tasks reading the source now ([source] max_inflight bounds it)") \
    X(gauge,   source_fds_cached,    "fds on the source held open: files kept to read without another open ([source] fd_cache bounds them) and the roots' directories") \
    X(gauge,   source_queued,        "tasks waiting for a source slot") \
    X(gauge,   readahead_window_max, "the current cap on a sequential reader's read-ahead, bytes") \
    X(gauge,   hint_entries,         "hinted chunks not yet read, over all hint lists") \
    X(gauge,   hint_window_bytes,    "bytes fetched or being fetched ahead for hints and not yet read") \
    X(gauge,   hint_memory_bytes,    "memory the hint lists' ranges hold, all users") \
    X(gauge,   access_proofs,        "(uid, file) access proofs remembered for hints") \
    X(gauge,   warmup_jobs_active,   "warmup jobs running or queued") \
    X(gauge,   writeback_queue_bytes, "bytes queued for writing to the NVMe tier") \
    X(gauge,   handles_open,         "files clients hold open (handles)") \
    X(gauge,   datasets_registered,  "registered datasets (granaryctl dataset)") \
    X(gauge,   dataset_entries,      "files and directories in the datasets' manifests") \
    X(gauge,   leases_active,        "leases held by clients") \
    X(gauge,   leased_bytes,         "arena bytes pinned by client leases") \
    X(gauge,   dram_used_bytes,      "arena bytes in use: cached, leased or in flight") \
    X(gauge,   dram_cached_bytes,    "arena bytes of the chunks the DRAM tier holds") \
    X(gauge,   dram_pinned_bytes,    "DRAM bytes of pinned chunks (never evicted)") \
    X(gauge,   nvme_pinned_bytes,    "NVMe bytes of pinned chunks (never evicted)") \
    X(gauge,   dram_capacity_bytes,  "capacity of the DRAM tier") \
    X(gauge,   dram_chunks,          "chunks held by the DRAM tier") \
    X(gauge,   dram_hugetlb_segments, "arena segments backed by hugetlb pages ([dram] huge_pages)") \
    X(gauge,   dram_thp_segments,    "arena segments advised for transparent huge pages ([dram] huge_pages)") \
    X(gauge,   nvme_used_bytes,      "bytes used on disk by the NVMe tier") \
    X(gauge,   nvme_capacity_bytes,  "capacity of the NVMe tier on disk") \
    X(gauge,   nvme_chunks,          "chunks held by the NVMe tier") \
    X(counter, nvme_not_admitted,    "chunks the NVMe tier's policy chose not to keep") \
    X(gauge,   nvme_state,           "NVMe tier device state: 0 ok, 1 full, 2 offline (nvme.h)") \
    X(counter, nvme_io_errors,       "NVMe reads or writes that failed with an I/O error") \
    X(counter, nvme_space_errors,    "NVMe writes the filesystem refused for want of space") \
    X(counter, nvme_offline_skips,   "NVMe gets and puts skipped while the device was offline or full") \
    GR_CLIENT_STATS(X)

/*
 * Counters that clients report (REPORT, proto/PROTOCOL.md): libgranary's
 * GPU path and its lease cache run in the client, so only the client can
 * count its device copies, GPU-tier hits and reads served from kept leases.  Each REPORT adds deltas; the daemon takes
 * exactly these names (others are ignored) and does not verify them: they
 * are what clients say, summed over all clients since start.  A client can
 * only inflate them, never affect the cache.
 */
#define GR_CLIENT_STATS(X) \
    X(counter, gpu_clients,          "clients that started libgranary's GPU path (reported)") \
    X(counter, gpu_gds_clients,      "of those, clients where GPUDirect Storage (libcufile) was found (reported)") \
    X(counter, gpu_copies,           "ranges copied into GPU memory by clients (reported)") \
    X(counter, gpu_bytes,            "bytes copied into GPU memory by clients (reported)") \
    X(counter, gpu_direct_bytes,     "of those, bytes copied straight from the registered arena, no CPU copy (reported)") \
    X(counter, gpu_staged_bytes,     "of those, bytes that went through a client's pinned staging ring (reported)") \
    X(counter, gpu_tier_hits,        "chunk lookups served from a client's GPU tier (reported)") \
    X(counter, gpu_tier_hit_bytes,   "bytes served from clients' GPU tiers, device to device (reported)") \
    X(counter, gpu_tier_misses,      "chunk lookups a client's GPU tier did not hold (reported)") \
    X(counter, gpu_tier_evictions,   "chunks evicted from clients' GPU tiers (reported)") \
    X(counter, lease_cache_hits,     "reads clients served wholly from leases they kept, with no message (reported)") \
    X(counter, lease_cache_hit_bytes, "bytes clients served from leases they kept (reported)") \
    X(counter, lease_cache_kept,     "leases clients kept after a read to serve later reads (reported)") \
    X(counter, lease_cache_expired,  "kept leases clients gave back at client_lease_ttl (reported)") \
    X(counter, lease_cache_unpinned_hits, "of the hits, reads served from released leases whose block generation had not changed (reported)") \
    X(counter, lease_cache_stale,    "released leases clients found reused (generation changed) and dropped (reported)") \
    X(counter, lookahead_opens,      "opens clients sent ahead of use along their hint lists (reported)") \
    X(counter, lookahead_used,       "of those, opens the client's caller then made, answered with no wait (reported)")

/*
 * Request latency histograms, one per class of request: the time from
 * decoding a request to queuing its answer (requests of clients that left
 * meanwhile are not counted).  Fixed upper bounds, 1-2.5-5 per decade from
 * 10 us to 10 s, then +Inf.  The metrics endpoint renders them; the STATS
 * reply does not carry them.  Loop thread only, like the counters.
 */
#define GR_LATENCY_OPS(X) \
    X(read, "READ and READX requests") \
    X(open, "OPEN requests")

enum {
#define GR_LATENCY_ENUM(name, help) GR_LAT_##name,
    GR_LATENCY_OPS(GR_LATENCY_ENUM)
#undef GR_LATENCY_ENUM
    GR_LAT_NOPS
};

#define GR_LATENCY_NBOUNDS 19

typedef struct gr_latency {
    uint64_t count;             /* observations */
    uint64_t sum_ns;            /* their total, nanoseconds */
    /* buckets[i]: observations above bound i-1 and at most bound i (not
     * cumulative); buckets[GR_LATENCY_NBOUNDS]: above the last bound. */
    uint64_t buckets[GR_LATENCY_NBOUNDS + 1];
} gr_latency;

/* Upper bound of bucket i < GR_LATENCY_NBOUNDS, in nanoseconds. */
static inline uint64_t gr_latency_bound_ns(unsigned i)
{
    static const uint64_t b[GR_LATENCY_NBOUNDS] = {
        10000, 25000, 50000,                    /* 10 us .. */
        100000, 250000, 500000,
        1000000, 2500000, 5000000,              /* 1 ms .. */
        10000000, 25000000, 50000000,
        100000000, 250000000, 500000000,
        1000000000, 2500000000u, 5000000000u,   /* 1 s .. */
        10000000000u,
    };
    return b[i];
}

/* Count one observation of ns nanoseconds: a short scan, no division. */
static inline void gr_latency_record(gr_latency *h, uint64_t ns)
{
    unsigned i = 0;

    while (i < GR_LATENCY_NBOUNDS && ns > gr_latency_bound_ns(i))
        i++;
    h->buckets[i]++;
    h->count++;
    h->sum_ns += ns;
}

typedef struct gr_stats {
#define GR_STATS_FIELD(kind, name, help) uint64_t name;
    GR_STATS(GR_STATS_FIELD)
#undef GR_STATS_FIELD
    gr_latency latency[GR_LAT_NOPS];    /* indexed by GR_LAT_* */
} gr_stats;

#endif
