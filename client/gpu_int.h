/*
 * gpu_int.h - what the GPU layer's files share: client/gpu.c (the copy
 * path), client/gpu_tier.c (the GPU tier, gr__tier_) and client/gpu_ring.c
 * (the staging ring, gr__ring_).  Internal names.  (What the GPU layer
 * shares with libgranary's core is client/granary_int.h.)
 *
 * The GPU tier is a per-client LRU of whole chunks in device memory, with
 * a byte cap.  An entry is filled once (a host-to-device copy on some
 * stream, then its `ready` event is recorded there) and read by
 * device-to-device copies on any stream, which wait for `ready` when they
 * run on another stream than the fill.  Eviction cannot free device memory
 * that a queued copy may still read: an evicted entry goes to a graveyard
 * and its memory is freed once every batch up to its last reader
 * (`last_seq`) has completed (gr__tier_collect with the completed
 * watermark).  Graveyard bytes count against the cap.
 *
 * Threads: the caller serialises all calls (the GPU layer's per-client
 * lock), with the tier's CUDA context current.
 */
#ifndef GR_GPU_INT_H
#define GR_GPU_INT_H

#include <stdint.h>

#include "gpu_cuda.h"
#include "granary_int.h"
#include "htab.h"
#include "list.h"

/* A chunk's identity: the file as it was opened (dev, ino, size, mtime) and
 * the chunk (unit bytes from offset index * unit), so a changed file never
 * hits an old entry. */
typedef gr__ckey gr__tier_key;     /* the file identity and chunk (granary_int.h) */

typedef struct gr__tier_ent {
    gr__hnode hnode;                    /* in the tier's table while live */
    gr__list link;                      /* the LRU (most recent first), or the graveyard */
    gr__tier_key key;
    CUdeviceptr dp;                     /* len bytes of device memory */
    uint64_t len;
    CUevent ready;                      /* recorded after the fill */
    CUstream fill_stream;               /* where the fill ran */
    int filled;                         /* the fill is queued and ready is recorded */
    int dropped;                        /* out of the tier, in the graveyard */
    uint64_t last_seq;                  /* the last batch that reads (or fills) it */
} gr__tier_ent;

typedef struct gr__tier_stats {
    uint64_t cap_bytes;
    uint64_t used_bytes;                /* live entries and graveyard */
    uint64_t entries;
    uint64_t evictions;
    uint64_t alloc_failures;            /* cuMemAlloc refused an admission */
} gr__tier_stats;

typedef struct gr__tier gr__tier;

/* A tier of cap bytes (> 0) using the driver table cu.  0 or -ENOMEM. */
int gr__tier_new(const gr__cuda *cu, uint64_t cap, gr__tier **out);

/* Free every entry's memory and event, graveyard included, then the tier.
 * The caller has made sure no copy that touches the tier is queued.
 * NULL-safe; *t is NULLed. */
void gr__tier_free(gr__tier **t);

/* The entry for k, moved to the front of the LRU, or NULL. */
gr__tier_ent *gr__tier_lookup(gr__tier *t, const gr__tier_key *k);

/*
 * A new entry of len bytes for k (not in the tier), at the front of the
 * LRU, not yet filled.  Evicts least-recently-used entries to make room:
 * one whose last reader is done (last_seq <= done_seq, every batch up to
 * done_seq has completed) is freed at once, others wait in the graveyard.
 * 0 with *out, -ENOSPC when len does not fit beside the graveyard (nothing
 * is admitted then), -ENOMEM when cuMemAlloc or cuEventCreate fails.
 */
int gr__tier_admit(gr__tier *t, const gr__tier_key *k, uint64_t len, uint64_t done_seq,
                   gr__tier_ent **out);

/* Take e out of the tier (its fill failed, or the cap shrank): to the
 * graveyard. */
void gr__tier_drop(gr__tier *t, gr__tier_ent *e);

/* Free graveyard entries whose last reader is done (last_seq <= done_seq). */
void gr__tier_collect(gr__tier *t, uint64_t done_seq);

/* Change the cap: entries beyond it are evicted (as in gr__tier_admit). */
void gr__tier_set_cap(gr__tier *t, uint64_t cap, uint64_t done_seq);

void gr__tier_get_stats(const gr__tier *t, gr__tier_stats *st);

/*
 * The staging ring (gpu_ring.c): bytes that cannot be DMAed from where they
 * are go through pinned slots.  Driver calls return their CUresult, with
 * *what naming the failing call; the caller's context is current.
 */
#define GR__RING_SLOT (4ull << 20)      /* bytes per pinned slot */

typedef struct gr__ring gr__ring;

/* One batch's use of the ring on one caller's stream (zeroed to start). */
typedef struct gr__ring_use {
    int started;                        /* the start event is recorded on the stream */
    int waited[2];                      /* ring stream i waits for it */
    int used[2];                        /* ring stream i has copies of this batch */
} gr__ring_use;

/* A ring of bytes / GR__RING_SLOT slots (at least 2), two streams, and
 * `threads` copiers (the caller counts as one; fewer than 2: plain memcpy). */
CUresult gr__ring_new(const gr__cuda *cu, uint64_t bytes, unsigned threads, gr__ring **out,
                      const char **what);

/* Free it; no copy of it may be queued (the caller synchronised).  NULL-safe. */
void gr__ring_free(gr__ring **r);

/* Copy len bytes at src to dst through the ring, ordered after the work
 * queued on s before the batch's first staged copy.  src may be reused
 * (its lease given back) as soon as this returns. */
CUresult gr__ring_copy(gr__ring *r, gr__ring_use *u, CUstream s, CUdeviceptr dst,
                       const uint8_t *src, size_t len, const char **what);

/* Make s wait for the batch's staged copies (before anything that reads
 * what they wrote, and before the batch's completion is recorded). */
CUresult gr__ring_join(gr__ring *r, gr__ring_use *u, CUstream s, const char **what);

/* Copiers in use (1: the caller alone). */
unsigned gr__ring_copiers(const gr__ring *r);

#endif
