/*
 * dram.c - chunks and the DRAM tier (see dram.h).
 *
 * A hash table keyed by the chunk key finds chunks (common/htab.h: it grows
 * in steps); the arena chunks the policy admitted are ordered by the tier's
 * eviction policy (policy.h), heap chunks by a plain LRU list of their own
 * (the overflow), and arena chunks the policy refused by another (the
 * spill: they live in the arena's reserve, see dram_new_pages).  Room is
 * made when a chunk is allocated, not when it is put: the arena is the
 * limit; the spill gives up its idle chunks first, then the policy is asked
 * for victims until a block frees up (a victim still leased frees nothing
 * yet).  The policy never holds more than its capacity: a chunk it refused
 * never enters it, whoever fetched it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "dram.h"

#define SEGMENT_MAX (64ull << 20)
/* Blocks of the largest chunk that the reserve keeps at least in an arena
 * of 16 chunks or more: a chunk in flight for each of two readers and a
 * refused chunk a client still reads (see dram_new_pages). */
#define RESERVE_MIN_CHUNKS 3

struct dram {
    arena *ar;
    policy *pol;                /* orders the arena chunks held */
    uint64_t oused, ocap;       /* bytes of the heap chunks held, and their cap */
    uint64_t sused;             /* bytes of the spill's arena blocks */
    uint64_t evictions, heap_fallbacks, not_admitted, prefetch_wasted;
    gr__htab table;             /* chunks held, arena and heap, by key */
    gr__list overflow;          /* the heap chunks held: head most recent */
    gr__list spill;             /* the arena chunks held the policy refused: head most recent */
    idset pins;                 /* ids of pinned files */
    uint64_t pinned_bytes;
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
    gr__list_init(&c->lru);
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

static uint64_t key_hash(const uint8_t *key)
{
    return XXH3_64bits(key, CHUNK_KEY_LEN);
}

static int key_eq(const gr__hnode *n, const void *key)
{
    return memcmp(gr__container_of(n, chunk, hn)->key, key, CHUNK_KEY_LEN) == 0;
}

int dram_new(uint64_t capacity, uint64_t max_chunk, const char *policy_name, dram **out,
             char *err, size_t errlen)
{
    return dram_new_pages(capacity, max_chunk, policy_name, ARENA_PAGES_SMALL, out, err, errlen);
}

int dram_new_pages(uint64_t capacity, uint64_t max_chunk, const char *policy_name, int pages,
                   dram **out, char *err, size_t errlen)
{
    dram *d = calloc(1, sizeof(*d));
    uint64_t seg = SEGMENT_MAX, acap, pcap, budget, rsv;
    policy_kind kind = POLICY_LRU;
    int rc;

    if (!d)
        return -ENOMEM;
    if (policy_name && *policy_name && policy_kind_parse(policy_name, &kind) < 0) {
        snprintf(err, errlen, "[dram] policy \"%s\" is not one of lru, lfu, sieve, s3fifo, epoch",
                 policy_name);
        free(d);
        return -EINVAL;
    }
    while (seg < max_chunk)
        seg *= 2;
    /* The policy orders seven eighths of the capacity, less a sixteenth of
     * that in a tier of at least 32 chunks: as much as before the reserve
     * below grew, so the subset epoch keeps is as large.  The arena is all
     * of the capacity but a sixteenth, in whole segments (up to 64 MiB, at
     * most an eighth of it, never smaller than a chunk, so rounding wastes
     * little); the heap overflow (see dram_put) is what is left.  What the
     * arena holds beyond the policy is the reserve: blocks for chunks in
     * flight, victims still leased, and chunks the policy refuses (the
     * spill), so that these too are handed out as leases, zero-copy, for
     * as long as a client reads them, instead of falling back to the heap
     * and 128 KiB inline replies.  A sequential reader under epoch holds
     * its read-ahead window (at most an eighth of the capacity) and its
     * kept leases (a sixteenth) of refused chunks there: with a reserve of
     * a sixteenth of the arena beside an overflow of an eighth, most
     * refused chunks went to the heap (epoch's warm passes at 0.3-0.6x
     * lru's, at a better hit ratio); with about an eighth in the reserve
     * and a sixteenth in the overflow, few do. */
    pcap = capacity - capacity / 8;
    if (pcap >= 32 * max_chunk)
        pcap -= pcap / 16;
    budget = capacity - capacity / 16;
    while (seg > budget / 8 && seg / 2 >= max_chunk && seg / 2 >= ARENA_MIN_BLOCK)
        seg /= 2;
    if (budget < seg) {
        snprintf(err, errlen, "[dram] capacity %llu is too small for chunks of %llu",
                 (unsigned long long)capacity, (unsigned long long)max_chunk);
        free(d);
        return -EINVAL;
    }
    acap = budget - budget % seg;
    d->ocap = capacity - acap;
    /* The reserve in whole chunks: in a tier of few chunks the fractions
     * above round it to less than one (a 20 MiB tier of 1 MiB chunks: the
     * policy's 17.5 MiB left one block of its 18), so every refused chunk
     * beyond the first in flight went to the heap (epoch at half the
     * dataset: 137 of 160 chunks an epoch, 0.3-0.45x lru's throughput).
     * In an arena of 16 chunks or more, at least RESERVE_MIN_CHUNKS
     * blocks of the largest chunk stay out of the policy (the fractions
     * give that anyway from about 40 chunks on); a smaller tier is a toy
     * (tests), where three blocks would be most of the policy's. */
    rsv = RESERVE_MIN_CHUNKS * max_chunk;
    if (acap >= 16 * max_chunk && pcap + rsv > acap)
        pcap = acap - rsv;
    if (pcap > acap)
        pcap = acap;
    rc = arena_new_pages(acap, seg, pages, &d->ar, err, errlen);
    if (rc == 0) {
        rc = policy_new(kind, pcap, &d->pol);
        if (rc < 0)
            snprintf(err, errlen, "[dram] policy: %s", strerror(-rc));
    }
    gr__list_init(&d->overflow);
    gr__list_init(&d->spill);
    if (rc == 0 && gr__htab_init(&d->table, 1024) < 0)
        rc = -ENOMEM;
    if (rc < 0) {
        dram_free(&d);
        return rc;
    }
    *out = d;
    return 0;
}

/* gr__htab_walk: the pinned arena chunks' policy nodes. */
static int collect_pinned(void *arg, gr__hnode *n)
{
    struct { policy_node **v; size_t n; } *acc = arg;
    chunk *c = gr__container_of(n, chunk, hn);

    if (c->ar && c->pinned)
        acc->v[acc->n++] = &c->pn;
    return 0;
}

int dram_set_policy(dram *d, const char *policy_name, char *err, size_t errlen)
{
    policy_kind kind;
    policy_node **pinned;
    size_t n = 0;
    int rc;

    if (policy_kind_parse(policy_name, &kind) < 0) {
        snprintf(err, errlen, "[dram] policy \"%s\" is not one of lru, lfu, sieve, s3fifo, epoch",
                 policy_name);
        return -EINVAL;
    }
    if (kind == policy_get_kind(d->pol))
        return 0;
    pinned = malloc((gr__htab_count(&d->table) + 1) * sizeof(*pinned));
    if (!pinned)
        return -ENOMEM;
    {
        struct { policy_node **v; size_t n; } acc = { pinned, 0 };
        gr__htab_walk(&d->table, collect_pinned, &acc);
        n = acc.n;
    }
    rc = policy_switch(&d->pol, kind, pinned, n);
    free(pinned);
    if (rc < 0)
        snprintf(err, errlen, "[dram] policy: %s", strerror(-rc));
    return rc;
}

policy_kind dram_policy_kind(const dram *d)
{
    return policy_get_kind(d->pol);
}

arena *dram_arena(dram *d)
{
    return d->ar;
}

/* Whether c, held by the tier, is ordered by the policy (an admitted arena
 * chunk) rather than kept in the overflow (heap) or the spill (refused). */
static int in_policy(const chunk *c)
{
    return c->ar && c->admitted;
}

/* Remove c from the tier and drop the tier's reference. */
static void dram_remove(dram *d, chunk *c)
{
    gr__htab_remove(&d->table, &c->hn);
    if (in_policy(c)) {
        if (c->pinned)
            d->pinned_bytes -= c->cap;
        c->pinned = 0;
        policy_remove(d->pol, &c->pn);
    } else {
        gr__list_remove(&c->lru);
        if (c->ar)
            d->sused -= c->cap;
        else
            d->oused -= c->cap;
    }
    c->in_tier = 0;
    chunk_unref(&c);
}

/* gr__htab_walk: remove every chunk (dram_free). */
static int remove_all(void *arg, gr__hnode *n)
{
    dram_remove(arg, gr__container_of(n, chunk, hn));
    return 0;
}

/* The chunk that embeds policy node n. */
static chunk *chunk_of(policy_node *n)
{
    return (chunk *)((char *)n - offsetof(chunk, pn));
}

void dram_free(dram **dp)
{
    dram *d = *dp;

    if (!d)
        return;
    if (d->table.b[0])
        gr__htab_walk(&d->table, remove_all, d);
    policy_free(&d->pol);
    arena_free(&d->ar);
    idset_clear(&d->pins);
    gr__htab_fini(&d->table);
    free(d);
    *dp = NULL;
}

static chunk *dram_find(dram *d, const uint8_t key[CHUNK_KEY_LEN])
{
    gr__hnode *n = gr__htab_find(&d->table, key_hash(key), key_eq, key);

    return n ? gr__container_of(n, chunk, hn) : NULL;
}

chunk *dram_get(dram *d, const uint8_t key[CHUNK_KEY_LEN])
{
    chunk *c = dram_find(d, key);

    if (!c)
        return NULL;
    if (in_policy(c)) {
        policy_hit(d->pol, &c->pn);
    } else {
        gr__list_remove(&c->lru);
        gr__list_push_front(c->ar ? &d->spill : &d->overflow, &c->lru);
    }
    return chunk_ref(c);
}

chunk *dram_peek(dram *d, const uint8_t key[CHUNK_KEY_LEN])
{
    return dram_find(d, key);
}

/* Block size arena_alloc would give for len bytes (for the policy). */
static uint64_t block_size(uint64_t len)
{
    uint64_t b = ARENA_MIN_BLOCK;

    while (b < len)
        b *= 2;
    return b;
}

static void set_pinned(dram *d, chunk *c, int pinned)
{
    if (c->pinned == !!pinned)
        return;
    policy_pin(d->pol, &c->pn, pinned);
    c->pinned = !!pinned;
    if (pinned)
        d->pinned_bytes += c->cap;
    else
        d->pinned_bytes -= c->cap;
}

/* Drop the least recent spilled chunk whose block that frees (the tier's is
 * its only reference: not leased, sent, fetched for a hint or written
 * behind), and with consumed_only, that someone asked for (not read ahead
 * and still unread).  0, or -1 when there is none. */
static int spill_drop(dram *d, int consumed_only)
{
    for (gr__list *n = d->spill.prev; n != &d->spill; n = n->prev) {
        chunk *c = gr__list_entry(n, chunk, lru);
        if (c->refs != 1 || (consumed_only && c->prefetched))
            continue;
        if (c->prefetched)
            d->prefetch_wasted++;
        dram_remove(d, c);
        return 0;
    }
    return -1;
}

/* Drop the policy's victim: 0, or -1 when there is none (all pinned). */
static int evict_one(dram *d)
{
    policy_node *v = policy_victim(d->pol);

    if (!v)
        return -1;
    if (chunk_of(v)->prefetched)
        d->prefetch_wasted++;
    dram_remove(d, chunk_of(v));
    d->evictions++;
    return 0;
}

chunk *dram_chunk_new(dram *d, const uint8_t key[CHUNK_KEY_LEN], size_t len, int64_t owner)
{
    arena_block blk;
    chunk *c;
    int admitted, rc;

    if (len == 0)
        len = 1;
    admitted = policy_admit(d->pol, key_hash(key), block_size(len));
    if (!admitted)
        d->not_admitted++;
    /* An admitted chunk keeps the policy within its capacity (the arena
     * less the reserve for refused chunks, see dram_new_pages)... */
    while (admitted && policy_used(d->pol) + block_size(len) > policy_capacity(d->pol) &&
           evict_one(d) == 0)
        ;
    /* ...and evicts until a block frees up: the spill's idle chunks first
     * (the policy refused them), then the policy's victims.  A victim still
     * leased or being sent frees nothing yet, and buddies may need several
     * victims to merge, so this can take more than one.  A refused chunk
     * displaces no resident: it takes a free block (the reserve), or one an
     * idle spilled chunk that was read gives up, or the heap. */
    while ((rc = arena_alloc_for(d->ar, len, owner, &blk)) == -ENOMEM &&
           (admitted ? spill_drop(d, 0) == 0 || evict_one(d) == 0 : spill_drop(d, 1) == 0))
        ;
    if (rc < 0) {
        d->heap_fallbacks++;
        c = chunk_new(key, len);
        if (c)
            c->admitted = admitted;
        return c;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        arena_release(d->ar, &blk);
        return NULL;
    }
    memcpy(c->key, key, CHUNK_KEY_LEN);
    c->refs = 1;
    gr__list_init(&c->lru);
    c->ar = d->ar;
    c->blk = blk;
    c->data = blk.ptr;
    c->cap = (uint32_t)blk.size;
    c->admitted = admitted;
    return c;
}

void dram_put(dram *d, chunk *c)
{
    chunk *old = dram_find(d, c->key);

    if (old == c)
        return;
    if (old)
        dram_remove(d, old);
    if (in_policy(c)) {
        /* Room was made when it was allocated, unless it was admitted
         * since (a warmup fetched it): the policy stays within capacity. */
        while (policy_used(d->pol) + c->cap > policy_capacity(d->pol) && evict_one(d) == 0)
            ;
        policy_node_init(&c->pn, key_hash(c->key), c->cap);
        policy_insert(d->pol, &c->pn);
        c->pinned = 0;
        if (c->holds || idset_has(&d->pins, c->key))
            set_pinned(d, c, 1);
    } else if (c->ar) {
        /* The spill keeps a refused chunk in the reserve while a client
         * reads it (a read-ahead chunk until it is read at all), for the
         * arena's other needs to take back as soon as it is idle. */
        d->sused += c->cap;
        gr__list_push_front(&d->spill, &c->lru);
    } else {
        /* The overflow keeps a heap chunk just long enough for the client
         * to come back for the rest of it: an inline reply carries at most
         * PROTO_MAX_DATA, and refetching from the source would multiply the
         * source's load exactly when the node is overloaded. */
        if (c->cap > d->ocap)
            return;
        while (d->oused + c->cap > d->ocap) {
            chunk *tail = gr__list_entry(gr__list_last(&d->overflow), chunk, lru);
            if (tail->prefetched)
                d->prefetch_wasted++;
            dram_remove(d, tail);
        }
        d->oused += c->cap;
        gr__list_push_front(&d->overflow, &c->lru);
    }
    gr__htab_insert(&d->table, &chunk_ref(c)->hn, key_hash(c->key));
    c->in_tier = 1;
}

/* A walk over the tier's chunks that drops or pins those a predicate picks. */
typedef struct tier_walk {
    dram *d;
    const uint8_t *prefix;      /* drop_prefix: plen bytes */
    size_t plen;
    idset *batch;               /* drop_files, pin_files: the file ids */
    int pin;                    /* pin_files: -1 drop, 0 unpin, 1 pin */
    long n;
} tier_walk;

static int walk_prefix(void *arg, gr__hnode *hn)
{
    tier_walk *w = arg;
    chunk *c = gr__container_of(hn, chunk, hn);

    if (memcmp(c->key, w->prefix, w->plen) == 0) {
        dram_remove(w->d, c);
        w->n++;
    }
    return 0;
}

static int walk_files(void *arg, gr__hnode *hn)
{
    tier_walk *w = arg;
    chunk *c = gr__container_of(hn, chunk, hn);

    if (!idset_has(w->batch, c->key))
        return 0;
    if (w->pin < 0)
        dram_remove(w->d, c);
    else if (in_policy(c) && !c->holds)
        set_pinned(w->d, c, w->pin);
    w->n++;
    return 0;
}

long dram_drop_prefix(dram *d, const uint8_t *prefix, size_t plen)
{
    tier_walk w = { .d = d, .prefix = prefix, .plen = plen };

    gr__htab_walk(&d->table, walk_prefix, &w);
    return w.n;
}

long dram_drop_files(dram *d, const uint8_t (*ids)[FILE_ID_LEN], size_t n)
{
    idset batch = { NULL, 0, 0 };
    tier_walk w = { .d = d, .batch = &batch, .pin = -1 };

    for (size_t i = 0; i < n; i++)
        if (idset_add(&batch, ids[i]) < 0) {
            idset_clear(&batch);
            return -ENOMEM;
        }
    gr__htab_walk(&d->table, walk_files, &w);
    idset_clear(&batch);
    return w.n;
}

long dram_pin_files(dram *d, const uint8_t (*ids)[FILE_ID_LEN], size_t n, int pinned)
{
    idset batch = { NULL, 0, 0 };
    tier_walk w = { .d = d, .batch = &batch, .pin = !!pinned };

    for (size_t i = 0; i < n; i++) {
        if (idset_add(&batch, ids[i]) < 0 || (pinned && idset_add(&d->pins, ids[i]) < 0)) {
            idset_clear(&batch);
            return -ENOMEM;
        }
        if (!pinned)
            idset_del(&d->pins, ids[i]);
    }
    gr__htab_walk(&d->table, walk_files, &w);
    idset_clear(&batch);
    return w.n;
}

void dram_hold(dram *d, chunk *c)
{
    if (c->holds++ == 0 && c->in_tier && in_policy(c))
        set_pinned(d, c, 1);
}

void dram_unhold(dram *d, chunk *c)
{
    if (--c->holds == 0 && c->in_tier && in_policy(c) && !idset_has(&d->pins, c->key))
        set_pinned(d, c, 0);
}

void dram_spill_profile(const dram *d, uint64_t *unread, uint64_t *busy)
{
    *unread = *busy = 0;
    for (const gr__list *n = d->spill.next; n != &d->spill; n = n->next) {
        const chunk *c = gr__list_entry(n, chunk, lru);
        if (c->prefetched)
            *unread += c->cap;
        else if (c->refs > 1)
            *busy += c->cap;
    }
}

void dram_get_stats(const dram *d, dram_stats *out)
{
    arena_stats as;

    arena_get_stats(d->ar, &as);
    out->capacity_bytes = as.capacity_bytes + d->ocap;
    out->used_bytes = as.used_bytes + d->oused;
    out->cached_bytes = policy_used(d->pol) + d->oused + d->sused;
    out->policy_bytes = policy_used(d->pol);
    out->policy_capacity = policy_capacity(d->pol);
    out->arena_bytes = as.capacity_bytes;
    out->arena_used_bytes = as.used_bytes;
    out->overflow_bytes = d->oused;
    out->spill_bytes = d->sused;
    out->chunks = gr__htab_count(&d->table);
    out->evictions = d->evictions;
    out->heap_fallbacks = d->heap_fallbacks;
    out->not_admitted = d->not_admitted;
    out->pinned_bytes = d->pinned_bytes;
    out->prefetch_wasted = d->prefetch_wasted;
    out->segment_renewals = as.renewals;
    out->hugetlb_segments = as.hugetlb_segments;
    out->thp_segments = as.thp_segments;
    out->segments = as.segments;
}
