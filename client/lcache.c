/*
 * lcache.c - see lcache.h.
 */
#include <errno.h>
#include <stdlib.h>

#include "clock.h"
#include "lcache.h"

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

uint64_t gr__ckey_hash(const gr__ckey *k)
{
    uint64_t h = 0;

    h = mix(h, k->dev);
    h = mix(h, k->ino);
    h = mix(h, k->size);
    h = mix(h, (uint64_t)k->mtime_sec);
    h = mix(h, k->mtime_nsec);
    h = mix(h, k->unit);
    return mix(h, k->index);
}

int gr__ckey_eq(const gr__ckey *a, const gr__ckey *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec && a->unit == b->unit &&
           a->index == b->index;
}

static int ent_eq(const gr__hnode *n, const void *key)
{
    return gr__ckey_eq(&gr__container_of(n, gr__lent, hn)->key, key);
}

int gr__lc_init(gr__lcache *lc, gr__lc_release release, void *arg)
{
    *lc = (gr__lcache){ .release = release, .arg = arg, .soft_max = GR_LC_SOFT_MAX };
    gr__list_init(&lc->lru);
    gr__list_init(&lc->soft_lru);
    return gr__htab_init(&lc->table, 64);
}

/* Take e out of the cache; free it (a hard one's lease released) unless a
 * user holds it. */
static void drop(gr__lcache *lc, gr__lent *e)
{
    gr__htab_remove(&lc->table, &e->hn);
    gr__list_remove(&e->lru);
    e->cached = 0;
    if (e->soft) {
        lc->soft_count--;
        free(e);                /* no users: a gr_ref never reads a soft entry */
        return;
    }
    if (lc->transient == e)
        lc->transient = NULL;
    lc->bytes -= e->len;
    lc->count--;
    if (e->users == 0) {
        lc->release(lc->arg, e);
        free(e);
    }
}

static void trim_soft(gr__lcache *lc)
{
    while (lc->soft_count > lc->soft_max)
        drop(lc, gr__list_entry(gr__list_first(&lc->soft_lru), gr__lent, lru));
}

/* Hard entry e goes over the bytes or the time: its lease goes back, and
 * it stays as a soft entry where its generation is known and nobody reads
 * it through a gr_ref; else it goes. */
static int softens(const gr__lcache *lc, const gr__lent *e)
{
    return e->genp && e->users == 0 && lc->soft_max > 0;
}

static void retire(gr__lcache *lc, gr__lent *e)
{
    if (!softens(lc, e)) {
        drop(lc, e);
        return;
    }
    if (lc->transient == e)
        lc->transient = NULL;
    gr__list_remove(&e->lru);
    lc->bytes -= e->len;
    lc->count--;
    lc->release(lc->arg, e);
    e->soft = 1;
    e->transient = 0;
    e->expires_ms = gr__now_ms() + GR_LC_SOFT_TTL_MS;
    gr__list_push_back(&lc->soft_lru, &e->lru);
    lc->soft_count++;
    trim_soft(lc);
}

static void trim(gr__lcache *lc, uint64_t room)
{
    while (lc->bytes + room > lc->max && !gr__list_empty(&lc->lru))
        retire(lc, gr__list_entry(gr__list_first(&lc->lru), gr__lent, lru));
}

void gr__lc_configure(gr__lcache *lc, uint64_t max, uint32_t ttl_ms)
{
    lc->max = max;
    lc->ttl_ms = ttl_ms;
    trim(lc, 0);
}

gr__lent *gr__lc_find(gr__lcache *lc, const gr__ckey *k, uint64_t now_ms)
{
    gr__hnode *n;
    gr__lent *e;

    if (lc->count == 0 && lc->soft_count == 0)
        return NULL;
    n = gr__htab_find(&lc->table, gr__ckey_hash(k), ent_eq, k);
    if (!n)
        return NULL;
    e = gr__container_of(n, gr__lent, hn);
    if (e->soft && now_ms >= e->expires_ms) {
        drop(lc, e);            /* (a generation could have come round) */
        return NULL;
    }
    if (!e->soft && now_ms >= e->expires_ms) {
        lc->expired++;
        if (!softens(lc, e)) {
            drop(lc, e);
            return NULL;
        }
        retire(lc, e);
    }
    gr__list_remove(&e->lru);
    gr__list_push_back(e->soft ? &lc->soft_lru : &lc->lru, &e->lru);
    return e;
}

/* Both checks cover a hard entry too: its lease holds the block, so the
 * generation cannot change, unless the daemon dropped the connection (and
 * every lease of it) while this client sent nothing. */
int gr__lc_check_begin(gr__lcache *lc, gr__lent *e)
{
    if (!e->genp)
        return 1;
    if (__atomic_load_n(e->genp, __ATOMIC_ACQUIRE) == e->bgen)
        return 1;
    lc->stale++;
    drop(lc, e);
    return 0;
}

int gr__lc_check_end(gr__lcache *lc, gr__lent *e)
{
    if (!e->genp)
        return 1;
    /* The copy's loads come before the second look (a seqlock's read
     * side): a block handed out again is bumped before it is written. */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(e->genp, __ATOMIC_RELAXED) == e->bgen)
        return 1;
    lc->stale++;
    drop(lc, e);
    return 0;
}

void gr__lc_set_gen(gr__lent *e, const uint32_t *genp)
{
    e->genp = genp;
    e->bgen = __atomic_load_n(genp, __ATOMIC_ACQUIRE);
}

gr__lent *gr__lc_insert(gr__lcache *lc, const gr__ckey *k, uint32_t gen, uint32_t lease,
                        const uint8_t *p, uint64_t len, uint64_t now_ms)
{
    gr__hnode *n;
    gr__lent *e;

    if (len == 0 || len > lc->max || lc->ttl_ms == 0)
        return NULL;
    n = gr__htab_find(&lc->table, gr__ckey_hash(k), ent_eq, k);
    if (n) {
        e = gr__container_of(n, gr__lent, hn);
        if (!e->soft)
            return NULL;
        drop(lc, e);            /* the lease it lost comes back */
    }
    e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    trim(lc, len);
    e->key = *k;
    e->gen = gen;
    e->lease = lease;
    e->p = p;
    e->len = len;
    e->expires_ms = now_ms + lc->ttl_ms;
    e->cached = 1;
    gr__htab_insert(&lc->table, &e->hn, gr__ckey_hash(k));
    gr__list_push_back(&lc->lru, &e->lru);
    lc->bytes += len;
    lc->count++;
    lc->kept++;
    return e;
}

gr__lent *gr__lc_insert_transient(gr__lcache *lc, const gr__ckey *k, uint32_t gen,
                                  uint32_t lease, const uint8_t *p, uint64_t len,
                                  uint64_t now_ms)
{
    gr__lent *e;

    if (lc->transient)
        retire(lc, lc->transient);
    e = gr__lc_insert(lc, k, gen, lease, p, len, now_ms);
    if (e) {
        e->transient = 1;
        lc->transient = e;
    }
    return e;
}

void gr__lc_retire(gr__lcache *lc, gr__lent *e)
{
    if (e->cached && !e->soft)
        retire(lc, e);
}

void gr__lc_use(gr__lent *e)
{
    e->users++;
}

void gr__lc_unuse(gr__lcache *lc, gr__lent *e)
{
    if (--e->users == 0 && !e->cached) {
        lc->release(lc->arg, e);
        free(e);
    }
}

void gr__lc_clear(gr__lcache *lc)
{
    while (!gr__list_empty(&lc->lru))
        drop(lc, gr__list_entry(gr__list_first(&lc->lru), gr__lent, lru));
    while (!gr__list_empty(&lc->soft_lru))
        drop(lc, gr__list_entry(gr__list_first(&lc->soft_lru), gr__lent, lru));
}

void gr__lc_fini(gr__lcache *lc)
{
    gr__lc_clear(lc);
    gr__htab_fini(&lc->table);
}
