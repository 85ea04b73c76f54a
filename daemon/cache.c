/*
 * cache.c - chunks and the DRAM tier (see cache.h).  A chained hash table
 * keyed by the chunk key plus an intrusive LRU list; the table doubles when
 * it holds as many chunks as buckets.  Room is made when a chunk is
 * allocated, not when it is put: the arena is the limit.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "cache.h"

#define SEGMENT_MAX (64ull << 20)

/* An LRU list: head most recent. */
typedef struct lru_list {
    chunk *head, *tail;
} lru_list;

struct dram {
    arena *ar;
    uint64_t used;              /* bytes of the arena chunks held */
    uint64_t oused, ocap;       /* bytes of the heap chunks held, and their cap */
    uint64_t evictions, heap_fallbacks;
    size_t count;
    chunk **buckets;
    size_t nbuckets;            /* power of two */
    lru_list arena_lru;         /* chunks in arena blocks */
    lru_list heap_lru;          /* overflow: heap chunks made while the arena was pinned */
};

void chunk_key(uint8_t key[CHUNK_KEY_LEN], const uint8_t id[16], uint64_t idx)
{
    memcpy(key, id, 16);
    for (int i = 0; i < 8; i++)
        key[16 + i] = (uint8_t)(idx >> (56 - 8 * i));
}

chunk *chunk_new(const uint8_t key[CHUNK_KEY_LEN], size_t cap)
{
    chunk *c = calloc(1, sizeof(*c));
    size_t rounded = (cap + 4095) & ~(size_t)4095;

    if (!c)
        return NULL;
    if (rounded == 0)
        rounded = 4096;
    if (rounded > UINT32_MAX || posix_memalign((void **)&c->data, 4096, rounded)) {
        free(c);
        return NULL;
    }
    memcpy(c->key, key, CHUNK_KEY_LEN);
    c->cap = (uint32_t)rounded;
    c->refs = 1;
    return c;
}

chunk *chunk_ref(chunk *c)
{
    c->refs++;
    return c;
}

void chunk_unref(chunk **cp)
{
    chunk *c = *cp;

    if (!c)
        return;
    *cp = NULL;
    if (--c->refs == 0) {
        if (c->ar)
            arena_release(c->ar, &c->blk);
        else
            free(c->data);
        free(c);
    }
}

static size_t bucket_of(const dram *d, const uint8_t *key)
{
    return (size_t)XXH3_64bits(key, CHUNK_KEY_LEN) & (d->nbuckets - 1);
}

int dram_new(uint64_t capacity, uint64_t max_chunk, dram **out, char *err, size_t errlen)
{
    dram *d = calloc(1, sizeof(*d));
    uint64_t seg = SEGMENT_MAX;
    int rc;

    if (!d)
        return -ENOMEM;
    while (seg < max_chunk)
        seg *= 2;
    /* An eighth of the capacity is the heap overflow (see dram_put), the
     * rest the arena.  Segments are up to 64 MiB but at most a quarter of
     * the arena, so rounding the arena down to whole segments (the capacity
     * is never exceeded) wastes little; never smaller than a chunk. */
    d->ocap = capacity / 8;
    capacity -= d->ocap;
    while (seg > capacity / 4 && seg / 2 >= max_chunk && seg / 2 >= ARENA_MIN_BLOCK)
        seg /= 2;
    if (capacity < seg) {
        snprintf(err, errlen, "[dram] capacity %llu is too small for chunks of %llu",
                 (unsigned long long)(capacity + d->ocap), (unsigned long long)max_chunk);
        free(d);
        return -EINVAL;
    }
    rc = arena_new(capacity - capacity % seg, seg, &d->ar, err, errlen);
    if (rc < 0) {
        free(d);
        return rc;
    }
    d->nbuckets = 1024;
    d->buckets = calloc(d->nbuckets, sizeof(*d->buckets));
    if (!d->buckets) {
        arena_free(&d->ar);
        free(d);
        return -ENOMEM;
    }
    *out = d;
    return 0;
}

arena *dram_arena(dram *d)
{
    return d->ar;
}

static lru_list *list_of(dram *d, const chunk *c)
{
    return c->ar ? &d->arena_lru : &d->heap_lru;
}

static void lru_unlink(dram *d, chunk *c)
{
    lru_list *l = list_of(d, c);

    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
}

static void lru_push(dram *d, chunk *c)
{
    lru_list *l = list_of(d, c);

    c->next = l->head;
    c->prev = NULL;
    if (l->head)
        l->head->prev = c;
    else
        l->tail = c;
    l->head = c;
}

/* Remove c from the tier and drop the tier's reference. */
static void dram_remove(dram *d, chunk *c)
{
    chunk **pp = &d->buckets[bucket_of(d, c->key)];

    while (*pp != c)
        pp = &(*pp)->hnext;
    *pp = c->hnext;
    c->hnext = NULL;
    lru_unlink(d, c);
    c->in_tier = 0;
    if (c->ar)
        d->used -= c->cap;
    else
        d->oused -= c->cap;
    d->count--;
    chunk_unref(&c);
}

void dram_free(dram **dp)
{
    dram *d = *dp;

    if (!d)
        return;
    while (d->arena_lru.head)
        dram_remove(d, d->arena_lru.head);
    while (d->heap_lru.head)
        dram_remove(d, d->heap_lru.head);
    arena_free(&d->ar);
    free(d->buckets);
    free(d);
    *dp = NULL;
}

static chunk *dram_find(const dram *d, const uint8_t key[CHUNK_KEY_LEN])
{
    for (chunk *c = d->buckets[bucket_of(d, key)]; c; c = c->hnext)
        if (memcmp(c->key, key, CHUNK_KEY_LEN) == 0)
            return c;
    return NULL;
}

chunk *dram_get(dram *d, const uint8_t key[CHUNK_KEY_LEN])
{
    chunk *c = dram_find(d, key);

    if (!c)
        return NULL;
    lru_unlink(d, c);
    lru_push(d, c);
    return chunk_ref(c);
}

static void dram_grow(dram *d)
{
    size_t nb = d->nbuckets * 2;
    chunk **b = calloc(nb, sizeof(*b));

    if (!b)
        return;                         /* longer chains, still correct */
    for (size_t i = 0; i < d->nbuckets; i++) {
        chunk *c = d->buckets[i];
        while (c) {
            chunk *next = c->hnext;
            size_t k = (size_t)XXH3_64bits(c->key, CHUNK_KEY_LEN) & (nb - 1);
            c->hnext = b[k];
            b[k] = c;
            c = next;
        }
    }
    free(d->buckets);
    d->buckets = b;
    d->nbuckets = nb;
}

chunk *dram_chunk_new(dram *d, const uint8_t key[CHUNK_KEY_LEN], size_t len)
{
    arena_block blk;
    chunk *c;

    if (len == 0)
        len = 1;
    /* Evict until a block frees up.  A victim still leased or being sent
     * frees nothing yet, and buddies may need several victims to merge, so
     * this can take more than one. */
    while (arena_alloc(d->ar, len, &blk) == -ENOMEM) {
        if (!d->arena_lru.tail) {
            d->heap_fallbacks++;
            return chunk_new(key, len);
        }
        dram_remove(d, d->arena_lru.tail);
        d->evictions++;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        arena_release(d->ar, &blk);
        return NULL;
    }
    memcpy(c->key, key, CHUNK_KEY_LEN);
    c->refs = 1;
    c->ar = d->ar;
    c->blk = blk;
    c->data = blk.ptr;
    c->cap = (uint32_t)blk.size;
    return c;
}

void dram_put(dram *d, chunk *c)
{
    chunk *old = dram_find(d, c->key);
    size_t k;

    if (old == c)
        return;
    if (old)
        dram_remove(d, old);
    if (!c->ar) {
        /* The overflow keeps a heap chunk just long enough for the client
         * to come back for the rest of it: an inline reply carries at most
         * PROTO_MAX_DATA, and refetching from the source would multiply the
         * source's load exactly when the node is overloaded. */
        if (c->cap > d->ocap)
            return;
        while (d->oused + c->cap > d->ocap)
            dram_remove(d, d->heap_lru.tail);
        d->oused += c->cap;
    } else {
        d->used += c->cap;
    }
    if (d->count >= d->nbuckets)
        dram_grow(d);
    k = bucket_of(d, c->key);
    c->hnext = d->buckets[k];
    d->buckets[k] = chunk_ref(c);
    lru_push(d, c);
    c->in_tier = 1;
    d->count++;
}

static void drop_prefix_list(dram *d, lru_list *l, const uint8_t *prefix, size_t plen)
{
    chunk *c = l->head;

    while (c) {
        chunk *next = c->next;
        if (memcmp(c->key, prefix, plen) == 0)
            dram_remove(d, c);
        c = next;
    }
}

void dram_drop_prefix(dram *d, const uint8_t *prefix, size_t plen)
{
    drop_prefix_list(d, &d->arena_lru, prefix, plen);
    drop_prefix_list(d, &d->heap_lru, prefix, plen);
}

void dram_get_stats(const dram *d, dram_stats *out)
{
    arena_stats as;

    arena_get_stats(d->ar, &as);
    out->capacity_bytes = as.capacity_bytes + d->ocap;
    out->used_bytes = as.used_bytes + d->oused;
    out->cached_bytes = d->used + d->oused;
    out->chunks = d->count;
    out->evictions = d->evictions;
    out->heap_fallbacks = d->heap_fallbacks;
}
