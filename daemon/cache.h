/*
 * cache.h - chunks in memory and the DRAM tier that keeps them.
 *
 * A chunk is one aligned piece of a source file, refcounted: the DRAM tier
 * holds a reference while the chunk is cached, every request that serves
 * from it and every job that writes it to NVMe hold their own.  Eviction
 * drops only the tier's reference, so bytes being sent stay valid until the
 * send finishes.  The tier evicts least-recently-used chunks to stay within
 * its byte capacity, counted over the chunks it holds.
 *
 * Threads: everything here runs on the loop thread.  An I/O thread may read
 * or fill a chunk's bytes while a job it runs holds a reference, but never
 * touches refs or links.
 */
#ifndef GR_CACHE_H
#define GR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define CHUNK_KEY_LEN 24    /* file id (16) + big-endian chunk index (8) */

typedef struct chunk chunk;
struct chunk {
    uint8_t key[CHUNK_KEY_LEN];
    unsigned refs;
    uint32_t len;           /* valid bytes */
    uint32_t cap;           /* bytes allocated at data, a multiple of 4096 */
    uint8_t *data;          /* 4096-aligned, so O_DIRECT can use it */
    chunk *hnext;           /* tier hash chain */
    chunk *prev, *next;     /* tier LRU list, most recent at the head */
    int in_tier;
};

/* Build a key from a file id and a chunk index. */
void chunk_key(uint8_t key[CHUNK_KEY_LEN], const uint8_t id[16], uint64_t idx);

/* A new chunk with room for cap bytes (rounded up to 4096) and refs = 1.
 * NULL on out-of-memory. */
chunk *chunk_new(const uint8_t key[CHUNK_KEY_LEN], size_t cap);
chunk *chunk_ref(chunk *c);
/* Drop a reference, free at zero, set *c NULL.  NULL-safe. */
void chunk_unref(chunk **c);

typedef struct dram dram;

typedef struct dram_stats {
    uint64_t capacity_bytes;
    uint64_t used_bytes;        /* bytes of the chunks held */
    uint64_t chunks;
    uint64_t evictions;
} dram_stats;

/* 0 or -ENOMEM. */
int dram_new(uint64_t capacity, dram **out);
/* Drop every chunk's tier reference, free, set *d NULL.  NULL-safe. */
void dram_free(dram **d);

/* The chunk for key with a new reference (most recently used now), or NULL. */
chunk *dram_get(dram *d, const uint8_t key[CHUNK_KEY_LEN]);

/* Keep c (the tier takes its own reference), replacing any chunk with the
 * same key, evicting least-recently-used chunks to fit.  A chunk larger than
 * the whole capacity is not kept. */
void dram_put(dram *d, chunk *c);

/* Drop every chunk whose key starts with the plen bytes of prefix. */
void dram_drop_prefix(dram *d, const uint8_t *prefix, size_t plen);

void dram_get_stats(const dram *d, dram_stats *out);

#endif
