/*
 * nvme.h - the NVMe tier: chunks kept on local disk across daemon restarts.
 *
 * A RocksDB database under the tier's directory holds the chunk index (key ->
 * where the bytes are, length, XXH3 checksum, last access) and small chunks
 * inline.  Larger chunks live in slots of preallocated data files beside it,
 * written and read with O_DIRECT (buffered I/O where the filesystem refuses
 * O_DIRECT, e.g. tmpfs).  Slots come in size classes; a freed slot has its
 * blocks punched out at once, so the bytes on disk never exceed the
 * configured capacity.  What to evict, and whether a new chunk is worth
 * caching at all, is decided by an eviction policy (policy.h) chosen at
 * open: lru by default, or lfu, sieve, s3fifo, epoch.
 *
 * Keys are 24 opaque bytes (granary uses file id (16) + big-endian chunk
 * index (8), so a file's chunks sort together; store_drop_prefix relies on
 * that only as a byte prefix).
 *
 * Every function is thread-safe: the daemon calls them from its I/O threads
 * concurrently.  None may be called from the event loop thread (they block),
 * except nvme_get_stats, which never waits.
 */
#ifndef GR_STORE_H
#define GR_STORE_H

#include "backend.h"
#include "ids.h"

#include <stddef.h>
#include <stdint.h>

#define NVME_ALIGN 4096        /* buffer alignment for store_get/store_put */

typedef struct nvme_tier nvme_tier;

typedef struct nvme_config {
    const char *path;           /* directory; created (mode 0750) if missing */
    uint64_t capacity;          /* hard limit of bytes on disk, all files included */
    uint64_t inline_max;        /* chunks of at most this many bytes go inline in RocksDB */
    uint64_t max_chunk;         /* largest chunk ever put (the daemon's chunk size) */
    const char *policy;         /* eviction policy, a policy_kind_parse name; NULL or "" = lru.
                                 * Only the access order persists across a restart. */
} nvme_config;

typedef struct nvme_stats {
    uint64_t capacity_bytes;    /* configured capacity */
    uint64_t used_bytes;        /* bytes accounted on disk now (slots + inline + metadata reserve) */
    uint64_t chunks;            /* chunks held */
    uint64_t gets, hits, misses;
    uint64_t puts, put_errors;
    uint64_t evictions;         /* chunks evicted for space */
    uint64_t not_admitted;      /* puts of new keys the policy refused (-ECANCELED) */
    uint64_t pinned_bytes;      /* bytes of pinned chunks (never evicted) */
    uint64_t checksum_errors;   /* reads whose bytes did not match their checksum (dropped) */
    uint64_t io_errors;         /* reads or writes that failed with an I/O error */
    uint64_t space_errors;      /* writes the filesystem refused for want of space (ENOSPC) */
    uint64_t offline_skips;     /* gets and puts not tried because the device was offline or full */
    int state;                  /* NVME_STATE_* now */
} nvme_stats;

/*
 * Device health.  A tier whose device fails (ST_FAIL_STREAK I/O errors in
 * a row) goes OFFLINE: store_get answers -ENOENT (a miss: the caller reads
 * the source) and store_put -ENODEV, without touching the device.  One
 * that fills up (the filesystem says ENOSPC although the tier is within
 * its capacity: the disk is shared, or smaller than configured) goes FULL:
 * gets work, puts answer -ENODEV.  Either way, after a back-off (0.5 s,
 * doubling to 30 s) one operation probes the device again, and the first
 * success brings the tier back to OK.  Nothing blocks: a failing device
 * costs one error per back-off period.
 */
#define NVME_STATE_OK      0
#define NVME_STATE_FULL    1
#define NVME_STATE_OFFLINE 2

/* "ok", "full", "offline". */
const char *nvme_state_name(int state);

/*
 * Open (or create) the tier at cfg->path and rebuild the in-memory index
 * from RocksDB, so a restarted daemon serves its cache warm.  Chunks whose
 * slot lies beyond its data file, or that no longer fit the capacity (it was
 * lowered), are dropped.  Chunks enter the policy oldest access first, so
 * lru and the other recency-ordered policies restart with the order they
 * had; lfu frequencies, s3fifo queues and epoch's statistics start afresh.
 * On success *out owns the tier; free it with store_close.  Returns 0 or
 * -errno with a one-line reason in err (-EINVAL for an unknown policy name,
 * a capacity too small, or bad sizes).
 */
int nvme_open(const nvme_config *cfg, nvme_tier **out, char *err, size_t errlen);

/* Persist what is cheap to persist (access order), close RocksDB and the
 * data files, free everything, set *s to NULL.  NULL-safe. */
void nvme_close(nvme_tier **s);

/*
 * Look up key.  On a hit the chunk's bytes are copied into buf, which must be
 * NVME_ALIGN-aligned and cap bytes long, cap >= the chunk length rounded up
 * to NVME_ALIGN (max_chunk rounded up always suffices); *len gets the chunk
 * length, and the checksum has been verified.  Returns:
 *   0        hit
 *   -ENOENT  not cached
 *   -EBADMSG the stored bytes failed their checksum; the entry was dropped
 *            (counted), the caller should refetch from the source
 *   -EIO     the device failed; the entry was dropped
 *   -ENOBUFS cap too small
 * While the tier is offline (NVME_STATE_OFFLINE) every key is -ENOENT.
 * A hit counts as an access for the eviction policy (for lru: the chunk
 * becomes the most recently used).  A miss does not: the policy sees it
 * when the caller puts the key.
 */
int nvme_get(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN], void *buf, size_t cap, size_t *len);

/*
 * Store len bytes under key, replacing any previous value.  A key not
 * cached is first offered to the policy (policy_admit: the miss that
 * brought it); if admitted, the policy's victims are evicted until it fits.
 * A replaced key is not offered again: its new value enters as a fresh
 * item.  data must be NVME_ALIGN-aligned and readable up to len rounded up
 * to NVME_ALIGN (the tail past len is written to disk but never returned).
 * Returns 0, -ECANCELED (not admitted: the policy judged the chunk worth
 * less than what it would displace; nothing was written, not an error,
 * counted in not_admitted), -E2BIG (len > max_chunk or larger than the
 * capacity allows), -ENOSPC / -EIO from the device (nothing is
 * half-stored: the index never points at unwritten bytes), -ENODEV (the
 * tier is offline or full, see NVME_STATE_*: nothing was tried).
 */
int nvme_put(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN], const void *data, size_t len);

/* Whether key is cached, without touching its recency.  1, 0. */
int nvme_contains(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN]);

/* Drop key.  0, or -ENOENT if it was not cached. */
int nvme_delete(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN]);

/* Drop every chunk whose key starts with the plen bytes of prefix.
 * Returns the number dropped. */
long nvme_drop_prefix(nvme_tier *s, const uint8_t *prefix, size_t plen);

/* Drop every chunk of the n files ids (16-byte key prefixes), in one pass
 * over the index.  Returns how many, or -ENOMEM. */
long nvme_drop_files(nvme_tier *s, const uint8_t (*ids)[16], size_t n);

/*
 * Pin (pinned != 0) or unpin the chunks of the n files ids (16-byte key
 * prefixes), held now and stored later: pinned chunks are never evicted (a
 * put that cannot fit around them fails with -E2BIG).  Pins last until
 * store_close (they are not persisted).  One pass over the index.  Returns
 * the number of chunks of those files held now, or -ENOMEM.
 */
long nvme_pin_files(nvme_tier *s, const uint8_t (*ids)[16], size_t n, int pinned);

/* Switch the tier's eviction policy (SIGHUP), keeping every chunk and pin.
 * 0, -EINVAL (unknown name), -ENOMEM. */
int nvme_set_policy(nvme_tier *s, const char *policy_name);
/* The tier's policy kind now (policy_kind's value). */
int nvme_policy_kind(nvme_tier *s);

/* The tier as a backend of the fetch engine (backend.h): get is nvme_get
 * (a checksum failure is a corrupt miss, the entry dropped), put is
 * nvme_put.  s is borrowed. */
backend nvme_backend(nvme_tier *s);

/* Snapshot of the counters and gauges, as of the tier's last operation.
 * Never waits for the tier's lock, so the event loop may call it (the one
 * exception to "none may be called from the loop" above). */
void nvme_get_stats(nvme_tier *s, nvme_stats *out);

/* Bytes the tier's directory really occupies on disk (st_blocks of every
 * file under it), for tests and health checks.  -errno on failure. */
int64_t nvme_disk_usage(const char *path);

#endif
