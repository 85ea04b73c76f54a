/*
 * cache.c - chunks and the DRAM tier (see cache.h).  A chained hash table
 * keyed by the chunk key plus an intrusive LRU list; the table doubles when
 * it holds as many chunks as buckets.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "cache.h"

struct dram {
    uint64_t capacity, used, evictions;
    size_t count;
    chunk **buckets;
    size_t nbuckets;            /* power of two */
    chunk *head, *tail;         /* LRU: head most recent */
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
        free(c->data);
        free(c);
    }
}

static size_t bucket_of(const dram *d, const uint8_t *key)
{
    return (size_t)XXH3_64bits(key, CHUNK_KEY_LEN) & (d->nbuckets - 1);
}

int dram_new(uint64_t capacity, dram **out)
{
    dram *d = calloc(1, sizeof(*d));

    if (!d)
        return -ENOMEM;
    d->capacity = capacity;
    d->nbuckets = 1024;
    d->buckets = calloc(d->nbuckets, sizeof(*d->buckets));
    if (!d->buckets) {
        free(d);
        return -ENOMEM;
    }
    *out = d;
    return 0;
}

static void lru_unlink(dram *d, chunk *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        d->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        d->tail = c->prev;
    c->prev = c->next = NULL;
}

static void lru_push(dram *d, chunk *c)
{
    c->next = d->head;
    c->prev = NULL;
    if (d->head)
        d->head->prev = c;
    else
        d->tail = c;
    d->head = c;
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
    d->used -= c->cap;
    d->count--;
    chunk_unref(&c);
}

void dram_free(dram **dp)
{
    dram *d = *dp;

    if (!d)
        return;
    while (d->head)
        dram_remove(d, d->head);
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

void dram_put(dram *d, chunk *c)
{
    chunk *old = dram_find(d, c->key);
    size_t k;

    if (old == c)
        return;
    if (old)
        dram_remove(d, old);
    if (c->cap > d->capacity)
        return;
    while (d->used + c->cap > d->capacity && d->tail) {
        dram_remove(d, d->tail);
        d->evictions++;
    }
    if (d->count >= d->nbuckets)
        dram_grow(d);
    k = bucket_of(d, c->key);
    c->hnext = d->buckets[k];
    d->buckets[k] = chunk_ref(c);
    lru_push(d, c);
    c->in_tier = 1;
    d->used += c->cap;
    d->count++;
}

void dram_drop_prefix(dram *d, const uint8_t *prefix, size_t plen)
{
    chunk *c = d->head;

    while (c) {
        chunk *next = c->next;
        if (memcmp(c->key, prefix, plen) == 0)
            dram_remove(d, c);
        c = next;
    }
}

void dram_get_stats(const dram *d, dram_stats *out)
{
    out->capacity_bytes = d->capacity;
    out->used_bytes = d->used;
    out->chunks = d->count;
    out->evictions = d->evictions;
}
