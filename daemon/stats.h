/*
 * stats.h - the daemon's counters and gauges, declared once.
 *
 * The X-macro table below drives the struct, the STATS reply (and so
 * `granaryctl stats` and its JSON), and later the metrics endpoint.  Add a
 * line here and it appears everywhere.  Counters only grow; gauges are
 * filled from the tiers when a snapshot is taken.
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
    X(counter, request_errors,       "requests answered with an error") \
    X(counter, opens,                "files opened by clients") \
    X(counter, attr_cache_hits,      "opens answered from the attribute cache") \
    X(counter, source_reads,         "chunk reads from the source") \
    X(counter, source_bytes_read,    "bytes read from the source") \
    X(counter, source_errors,        "source reads or opens that failed") \
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
    X(counter, connections_total,    "client connections accepted") \
    X(counter, connections_refused,  "client connections refused (max_clients)") \
    X(gauge,   connections,          "client connections open") \
    X(gauge,   fetches_inflight,     "chunk fetches in flight") \
    X(gauge,   writeback_queue_bytes, "bytes queued for writing to the NVMe tier") \
    X(gauge,   leases_active,        "leases held by clients") \
    X(gauge,   leased_bytes,         "arena bytes pinned by client leases") \
    X(gauge,   dram_used_bytes,      "arena bytes in use: cached, leased or in flight") \
    X(gauge,   dram_cached_bytes,    "arena bytes of the chunks the DRAM tier holds") \
    X(gauge,   dram_capacity_bytes,  "capacity of the DRAM tier") \
    X(gauge,   dram_chunks,          "chunks held by the DRAM tier") \
    X(gauge,   nvme_used_bytes,      "bytes used on disk by the NVMe tier") \
    X(gauge,   nvme_capacity_bytes,  "capacity of the NVMe tier on disk") \
    X(gauge,   nvme_chunks,          "chunks held by the NVMe tier") \
    X(gauge,   nvme_not_admitted,    "chunks the NVMe tier's policy chose not to keep")

typedef struct gr_stats {
#define GR_STATS_FIELD(kind, name, help) uint64_t name;
    GR_STATS(GR_STATS_FIELD)
#undef GR_STATS_FIELD
} gr_stats;

#endif
