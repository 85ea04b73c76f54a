/*
 * dram.h - chunks in memory and the DRAM tier that keeps them.
 *
 * A chunk is one aligned piece of a source file, refcounted: the DRAM tier
 * holds a reference while the chunk is cached; every request that serves
 * from it, every lease a client holds on it and every job that writes it to
 * NVMe hold their own.  Eviction drops only the tier's reference, so bytes
 * being sent or leased stay valid (and their memory unreused) until the last
 * reference goes.
 *
 * The tier's memory is the shared arena (arena.h): a chunk's bytes live in
 * an arena block that clients map read-only, so a hit is handed over as
 * (segment, offset, length) without a copy.  When no block can be had, even
 * after evicting (everything is leased or in flight), a chunk falls back to
 * the heap and is served by copy; the tier keeps such chunks in a small
 * overflow (a sixteenth of the capacity) so that a client coming back for the
 * rest of one does not make the daemon read the source again.  Arena plus
 * overflow never exceed the capacity, leased and in-flight blocks
 * included.
 *
 * Threads: everything here runs on the loop thread.  An I/O thread may read
 * or fill a chunk's bytes while a job it runs holds a reference, but never
 * touches refs or links.
 */
#ifndef GR_CACHE_H
#define GR_CACHE_H

#include "ids.h"

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "htab.h"
#include "list.h"
#include "idset.h"
#include "policy.h"


typedef struct chunk chunk;
struct chunk {
    uint8_t key[CHUNK_KEY_LEN];
    unsigned refs;
    uint32_t len;           /* valid bytes */
    uint32_t cap;           /* bytes allocated at data, a multiple of 4096 */
    uint8_t *data;          /* 4096-aligned, so O_DIRECT can use it */
    arena *ar;              /* the arena of blk, NULL for a heap chunk */
    arena_block blk;        /* where data lives when ar is set */
    gr__hnode hn;           /* the tier's table */
    policy_node pn;         /* the tier's eviction policy (arena chunks) */
    gr__list lru;           /* the overflow's (heap) or the spill's (refused) LRU list, head most recent */
    int in_tier;
    int admitted;           /* the policy wants it kept (set by dram_chunk_new) */
    int pinned;             /* pinned in the policy: never evicted */
    unsigned holds;         /* prefetch holds (dram_hold): pinned while any */
    int prefetched;         /* fetched ahead and not yet asked for */
};

/* Build a key from a file id and a chunk index. */
void chunk_key(uint8_t key[CHUNK_KEY_LEN], const uint8_t id[16], uint64_t idx);

/* A new heap chunk with room for cap bytes (rounded up to 4096) and
 * refs = 1.  NULL on out-of-memory. */
chunk *chunk_new(const uint8_t key[CHUNK_KEY_LEN], size_t cap);
chunk *chunk_ref(chunk *c);
/* Drop a reference, free at zero, set *c NULL.  NULL-safe. */
void chunk_unref(chunk **c);

typedef struct dram dram;

typedef struct dram_stats {
    uint64_t not_admitted;      /* misses the policy chose not to cache */
    uint64_t pinned_bytes;      /* bytes of pinned chunks */
    uint64_t capacity_bytes;    /* the arena's size */
    uint64_t used_bytes;        /* arena bytes allocated: cached, leased or in flight */
    uint64_t cached_bytes;      /* bytes of the blocks of the chunks the tier holds */
    uint64_t policy_bytes;      /* arena bytes the policy orders (of cached_bytes) */
    uint64_t policy_capacity;   /* what the policy may order: the arena less the reserve */
    uint64_t arena_bytes;       /* the arena's size (of capacity_bytes) */
    uint64_t arena_used_bytes;  /* arena bytes allocated (of used_bytes) */
    uint64_t overflow_bytes;    /* heap bytes the overflow holds (of used_bytes) */
    uint64_t spill_bytes;       /* arena bytes of the refused chunks the tier holds (of cached_bytes) */
    uint64_t chunks;
    uint64_t evictions;
    uint64_t heap_fallbacks;    /* chunks that got no arena block */
    uint64_t prefetch_wasted;   /* prefetched chunks evicted before anyone asked */
    uint64_t segment_renewals;  /* arena segments renewed on a change of owner */
    uint64_t segments;          /* arena segments */
    uint64_t hugetlb_segments;  /* of which backed by hugetlb pages now */
    uint64_t thp_segments;      /* of which advised for transparent huge pages */
} dram_stats;

/*
 * The tier: capacity bytes, fifteen sixteenths an arena (rounded down to
 * whole segments of up to 64 MiB, each at least max_chunk) and the rest the
 * heap overflow; the policy orders about 82% of the capacity, the rest of the
 * arena is the reserve for chunks in flight and chunks the policy refuses
 * (see dram_new_pages), evicting by the named policy (policy.h: lru, lfu, sieve,
 * s3fifo, epoch).  0 or -errno with a reason in err.
 */
int dram_new(uint64_t capacity, uint64_t max_chunk, const char *policy_name, dram **out,
             char *err, size_t errlen);
/* The same with the arena's pages (arena.h: ARENA_PAGES_*); dram_new uses
 * 4 KiB pages. */
int dram_new_pages(uint64_t capacity, uint64_t max_chunk, const char *policy_name, int pages,
                   dram **out, char *err, size_t errlen);
/* Drop every chunk's tier reference and free the arena; every other chunk
 * reference must be gone.  Sets *d NULL.  NULL-safe. */
void dram_free(dram **d);

/* A new chunk (refs = 1) for len bytes, after a miss by a client of uid
 * owner: its block comes from owner's arena segments (arena.h, tenancy),
 * so that only owner's clients are ever handed it in shared memory.  The
 * policy decides whether it is worth keeping (c->admitted); if so, victims
 * are evicted until an arena block can be had.  A chunk the policy refuses
 * gets a block only if one is free.  Without a block the chunk lives on the
 * heap.  NULL only on out-of-memory. */
chunk *dram_chunk_new(dram *d, const uint8_t key[CHUNK_KEY_LEN], size_t len, int64_t owner);

/* Switch the tier's eviction policy (SIGHUP), keeping every chunk and pin.
 * 0 or -errno with a reason in err. */
int dram_set_policy(dram *d, const char *policy_name, char *err, size_t errlen);
/* The tier's policy kind now. */
policy_kind dram_policy_kind(const dram *d);

/* The arena, for handing segments to clients. */
arena *dram_arena(dram *d);

/* The chunk for key with a new reference (most recently used now), or NULL. */
chunk *dram_get(dram *d, const uint8_t key[CHUNK_KEY_LEN]);

/* The chunk for key, borrowed (no reference, no change to its recency), or
 * NULL: for asking whether it is cached. */
chunk *dram_peek(dram *d, const uint8_t key[CHUNK_KEY_LEN]);

/* For a profile (O(spilled chunks)): the bytes of the spill's chunks read
 * ahead and not yet read, and of the others held beyond the tier (leased,
 * being sent, written behind). */
void dram_spill_profile(const dram *d, uint64_t *unread, uint64_t *busy);

/* Keep c (the tier takes its own reference), replacing any chunk with the
 * same key: an admitted arena chunk under the policy (evicting first if it
 * was admitted after its allocation made room); a heap chunk in the
 * overflow, evicting its oldest (one larger than the overflow is not kept);
 * an arena chunk the policy refused in the spill, which gives its block back
 * to the next allocation that needs one once nobody else holds it (and, for
 * a refused chunk's allocation, once it was asked for). */
void dram_put(dram *d, chunk *c);

/* Drop every chunk whose key starts with the plen bytes of prefix.
 * Returns how many. */
long dram_drop_prefix(dram *d, const uint8_t *prefix, size_t plen);

/* Drop every chunk of the n files ids (16-byte file ids, the keys'
 * prefix).  One pass over the tier.  Returns how many chunks. */
long dram_drop_files(dram *d, const uint8_t (*ids)[FILE_ID_LEN], size_t n);

/* Pin (pinned != 0) or unpin the chunks of the n files ids, those held now
 * and those cached later: pinned chunks are never evicted.  Pins last until
 * dram_free.  One pass over the tier.  Returns the number of chunks held
 * now of those files, or -ENOMEM. */
long dram_pin_files(dram *d, const uint8_t (*ids)[FILE_ID_LEN], size_t n, int pinned);

/*
 * Hold c in the tier (a hinted chunk not yet read): pinned while it has a
 * hold, as if its file were pinned.  dram_unhold drops one hold.  Holds on a
 * chunk outside the tier only count (they pin it if it is put back).
 */
void dram_hold(dram *d, chunk *c);
void dram_unhold(dram *d, chunk *c);

void dram_get_stats(const dram *d, dram_stats *out);

#endif
