/*
 * gpu_tier.c - the GPU tier: a per-client LRU of whole chunks in device
 * memory (see gpu_int.h for the rules it keeps).
 *
 * The common hash table (common/htab.h, incremental growth) over the live
 * entries, one LRU list and a graveyard list of evicted entries whose
 * memory a queued copy may still read (both common/list.h).  One cuMemAlloc
 * per entry: chunks of one dataset share a size, and entries are admitted
 * once and then hit for the whole job, so allocation is rare.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_int.h"

struct gr__tier {
    const gr__cuda *cu;
    uint64_t cap;
    uint64_t used;                      /* live + graveyard bytes */
    uint64_t grave_bytes;               /* of which in the graveyard */
    gr__htab table;                     /* live entries by key */
    gr__list lru;                       /* live entries, most recent first */
    gr__list grave;                     /* evicted, memory not yet freed */
    uint64_t evictions;
    uint64_t alloc_failures;
};

static int key_eq(const gr__hnode *n, const void *key)
{
    return gr__ckey_eq(&gr__container_of(n, gr__tier_ent, hnode)->key, key);
}

static gr__tier_ent *ent_of(gr__list *l)
{
    return gr__list_entry(l, gr__tier_ent, link);
}

int gr__tier_new(const gr__cuda *cu, uint64_t cap, gr__tier **out)
{
    gr__tier *t = calloc(1, sizeof(*t));

    *out = NULL;
    if (!t)
        return -ENOMEM;
    t->cu = cu;
    t->cap = cap;
    gr__list_init(&t->lru);
    gr__list_init(&t->grave);
    if (gr__htab_init(&t->table, 256) < 0) {
        free(t);
        return -ENOMEM;
    }
    *out = t;
    return 0;
}

/* Free e's device memory and event; e is on no list and in no table. */
static void ent_destroy(gr__tier *t, gr__tier_ent *e)
{
    t->cu->cuMemFree(e->dp);
    t->cu->cuEventDestroy(e->ready);
    t->used -= e->len;
    free(e);
}

void gr__tier_free(gr__tier **tp)
{
    gr__tier *t = tp ? *tp : NULL;
    gr__list *l;

    if (!t)
        return;
    while ((l = gr__list_pop_front(&t->lru))) {
        gr__htab_remove(&t->table, &ent_of(l)->hnode);
        ent_destroy(t, ent_of(l));
    }
    while ((l = gr__list_pop_front(&t->grave))) {
        t->grave_bytes -= ent_of(l)->len;
        ent_destroy(t, ent_of(l));
    }
    gr__htab_fini(&t->table);
    free(t);
    *tp = NULL;
}

gr__tier_ent *gr__tier_lookup(gr__tier *t, const gr__tier_key *k)
{
    gr__hnode *n = gr__htab_find(&t->table, gr__ckey_hash(k), key_eq, k);
    gr__tier_ent *e;

    if (!n)
        return NULL;
    e = gr__container_of(n, gr__tier_ent, hnode);
    gr__list_remove(&e->link);
    gr__list_push_front(&t->lru, &e->link);
    return e;
}

void gr__tier_drop(gr__tier *t, gr__tier_ent *e)
{
    if (e->dropped)
        return;                         /* evicted already */
    e->dropped = 1;
    gr__htab_remove(&t->table, &e->hnode);
    gr__list_remove(&e->link);
    gr__list_push_front(&t->grave, &e->link);
    t->grave_bytes += e->len;
}

/* Evict the LRU's tail: freed at once when no queued copy can read it any
 * more (its last reader is done), else to the graveyard. */
static void evict_tail(gr__tier *t, uint64_t done_seq)
{
    gr__tier_ent *e = ent_of(gr__list_last(&t->lru));

    gr__tier_drop(t, e);
    t->evictions++;
    if (e->last_seq <= done_seq) {
        gr__list_remove(&e->link);
        t->grave_bytes -= e->len;
        ent_destroy(t, e);
    }
}

/* Evict from the LRU's tail until need more bytes fit under the cap (or
 * nothing is left to evict).  Returns whether they fit. */
static int make_room(gr__tier *t, uint64_t need, uint64_t done_seq)
{
    gr__tier_collect(t, done_seq);
    if (t->grave_bytes + need > t->cap)
        return 0;                       /* evicting live entries would not help yet */
    while (t->used + need > t->cap && !gr__list_empty(&t->lru))
        evict_tail(t, done_seq);
    return t->used + need <= t->cap;
}

int gr__tier_admit(gr__tier *t, const gr__tier_key *k, uint64_t len, uint64_t done_seq,
                   gr__tier_ent **out)
{
    gr__tier_ent *e;
    CUresult r;

    *out = NULL;
    if (len == 0 || len > t->cap || !make_room(t, len, done_seq))
        return -ENOSPC;
    e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    r = t->cu->cuMemAlloc(&e->dp, len);
    if (r == CUDA_SUCCESS && (r = t->cu->cuEventCreate(&e->ready, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
        t->cu->cuMemFree(e->dp);
    if (r != CUDA_SUCCESS) {
        t->alloc_failures++;
        free(e);
        return -ENOMEM;
    }
    e->key = *k;
    e->len = len;
    t->used += len;
    gr__htab_insert(&t->table, &e->hnode, gr__ckey_hash(k));
    gr__list_init(&e->link);
    gr__list_push_front(&t->lru, &e->link);
    *out = e;
    return 0;
}

void gr__tier_collect(gr__tier *t, uint64_t done_seq)
{
    gr__list *l, *tmp;

    gr__list_foreach_safe(l, tmp, &t->grave) {
        gr__tier_ent *e = ent_of(l);
        if (e->last_seq <= done_seq) {
            gr__list_remove(l);
            t->grave_bytes -= e->len;
            ent_destroy(t, e);
        }
    }
}

void gr__tier_set_cap(gr__tier *t, uint64_t cap, uint64_t done_seq)
{
    t->cap = cap;
    while (t->used - t->grave_bytes > cap && !gr__list_empty(&t->lru))
        evict_tail(t, done_seq);
}

void gr__tier_get_stats(const gr__tier *t, gr__tier_stats *st)
{
    st->cap_bytes = t->cap;
    st->used_bytes = t->used;
    st->entries = gr__htab_count(&t->table);
    st->evictions = t->evictions;
    st->alloc_failures = t->alloc_failures;
}
