/*
 * check_policy.c - unit tests of the eviction policies (policy.c): short
 * hand-worked traces, byte capacities, pinning, removal of arbitrary nodes,
 * random operations checked step by step against O(n) reference models, and
 * hit ratios on generated traces against an offline Belady and the numbers
 * in docs (facts.md, "Eviction policies on training-like traces").
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

/* ---- helpers ---- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t n)
{
    return rng_next() % n;
}

static uint64_t key_hash(uint64_t k)
{
    uint64_t z = k * 0x9e3779b97f4a7c15ull + 12345;

    z = (z ^ (z >> 31)) * 0xd6e8feb86659fd93ull;
    return z ^ (z >> 32);
}

/* A tier of nkeys possible keys: node k is key k's entry. */
typedef struct tier {
    policy *p;
    policy_node *node;
    uint8_t *res;
    uint64_t nkeys;
} tier;

static void tier_new(tier *t, policy_kind kind, uint64_t capacity, uint64_t nkeys)
{
    ck_assert_int_eq(policy_new(kind, capacity, &t->p), 0);
    t->node = calloc(nkeys, sizeof(*t->node));
    t->res = calloc(nkeys, 1);
    ck_assert_ptr_nonnull(t->node);
    ck_assert_ptr_nonnull(t->res);
    t->nkeys = nkeys;
}

static void tier_free(tier *t)
{
    policy_free(&t->p);
    ck_assert_ptr_null(t->p);
    free(t->node);
    free(t->res);
}

static void tier_insert(tier *t, uint64_t k, uint64_t size)
{
    policy_node_init(&t->node[k], key_hash(k), size);
    policy_insert(t->p, &t->node[k]);
    t->res[k] = 1;
}

static uint64_t tier_evict(tier *t)
{
    policy_node *v = policy_victim(t->p);
    uint64_t k;

    ck_assert_ptr_nonnull(v);
    k = (uint64_t)(v - t->node);
    ck_assert_uint_lt(k, t->nkeys);
    ck_assert(t->res[k]);
    policy_remove(t->p, v);
    t->res[k] = 0;
    return k;
}

/* One access by the caller protocol of policy.h: 1 hit, 0 miss. */
static int tier_access(tier *t, uint64_t k, uint64_t size)
{
    uint64_t cap = policy_capacity(t->p);

    if (t->res[k]) {
        policy_hit(t->p, &t->node[k]);
        return 1;
    }
    if (!policy_admit(t->p, key_hash(k), size))
        return 0;
    while (policy_used(t->p) + size > cap) {
        policy_node *v = policy_victim(t->p);
        if (!v)
            break;
        policy_remove(t->p, v);
        t->res[v - t->node] = 0;
    }
    if (policy_used(t->p) + size <= cap)
        tier_insert(t, k, size);
    return 0;
}

/* ---- hand-worked traces ---- */

START_TEST(test_kind_names)
{
    policy_kind k;
    policy *p = NULL;

    for (int i = 0; i < POLICY_NKINDS; i++) {
        ck_assert_int_eq(policy_kind_parse(policy_kind_name((policy_kind)i), &k), 0);
        ck_assert_int_eq(k, i);
    }
    ck_assert_int_eq(policy_kind_parse("S3FIFO", &k), 0);
    ck_assert_int_eq(k, POLICY_S3FIFO);
    k = POLICY_LRU;
    ck_assert_int_eq(policy_kind_parse("arc", &k), -EINVAL);
    ck_assert_int_eq(policy_kind_parse("", &k), -EINVAL);
    ck_assert_int_eq(policy_kind_parse(NULL, &k), -EINVAL);
    ck_assert_int_eq(k, POLICY_LRU);
    ck_assert_str_eq(policy_kind_name(POLICY_NKINDS), "?");
    ck_assert_int_eq(policy_new(POLICY_NKINDS, 10, &p), -EINVAL);
    ck_assert_int_eq(policy_new(POLICY_LRU, 0, &p), -EINVAL);
    ck_assert_ptr_null(p);
    policy_free(&p);                                /* NULL-safe */
    policy_free(NULL);
}
END_TEST

enum { A, B, C, D, E, F, G, H };

START_TEST(test_lru_hand)
{
    tier t;

    tier_new(&t, POLICY_LRU, 3, 8);
    tier_access(&t, A, 1);
    tier_access(&t, B, 1);
    tier_access(&t, C, 1);
    ck_assert(tier_access(&t, A, 1));
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[B]);   /* A B C A D: victim B */
    ck_assert(!tier_access(&t, D, 1));
    ck_assert(!t.res[B] && t.res[A] && t.res[C] && t.res[D]);
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[C]);
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[C]);   /* stable until something changes */
    ck_assert_uint_eq(policy_used(t.p), 3);
    ck_assert_uint_eq(policy_count(t.p), 3);
    ck_assert_int_eq(policy_sane(t.p), 0);
    tier_free(&t);
}
END_TEST

START_TEST(test_lfu_hand)
{
    tier t;

    tier_new(&t, POLICY_LFU, 3, 8);
    tier_access(&t, A, 1);
    tier_access(&t, B, 1);
    tier_access(&t, C, 1);
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[A]);   /* all once: the least recent */
    tier_access(&t, A, 1);
    tier_access(&t, A, 1);
    tier_access(&t, B, 1);
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[C]);   /* A 3, B 2, C 1 */
    tier_access(&t, C, 1);
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[B]);   /* B 2 is older than C 2 */
    tier_access(&t, D, 1);
    ck_assert(!t.res[B]);
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[D]);   /* the newcomer is coldest */
    ck_assert_int_eq(policy_sane(t.p), 0);
    tier_free(&t);
}
END_TEST

/* Yesterday's hot set must not squat forever: ageing halves it away. */
START_TEST(test_lfu_ageing)
{
    tier t;
    uint64_t n = 10, rounds;

    tier_new(&t, POLICY_LFU, n, 4 * n);
    for (int r = 0; r < 50; r++)
        for (uint64_t k = 0; k < n; k++)
            tier_access(&t, k, 1);
    /* A new hot set of the same size, read round robin. */
    for (rounds = 0; rounds < 1000; rounds++) {
        uint64_t in = 0;
        for (uint64_t k = n; k < 2 * n; k++)
            tier_access(&t, k, 1);
        for (uint64_t k = n; k < 2 * n; k++)
            in += t.res[k];
        if (in == n)
            break;
        ck_assert_int_eq(policy_sane(t.p), 0);
    }
    ck_assert_uint_lt(rounds, 1000);
    for (uint64_t k = 0; k < n; k++)
        ck_assert(!t.res[k]);
    /* ... and it then stays: all hits. */
    for (uint64_t k = n; k < 2 * n; k++)
        ck_assert(tier_access(&t, k, 1));
    tier_free(&t);
}
END_TEST

START_TEST(test_sieve_hand)
{
    tier t;

    tier_new(&t, POLICY_SIEVE, 3, 8);
    tier_access(&t, A, 1);
    tier_access(&t, B, 1);
    tier_access(&t, C, 1);
    tier_access(&t, A, 1);                              /* A visited */
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[B]);   /* the hand passes A, clearing it */
    tier_access(&t, D, 1);
    /* The hand stays where B was: C is next, A (cleared, behind the hand)
     * survives although it is older. */
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[C]);
    tier_access(&t, D, 1);                              /* D visited */
    tier_access(&t, E, 1);                              /* evicts C */
    ck_assert(t.res[A] && !t.res[C] && t.res[D] && t.res[E]);
    /* The hand goes on towards the head: past D (cleared) to E, the
     * newest; A, behind the hand, waits for it to wrap. */
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[E]);
    tier_evict(&t);
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[A]); /* wrapped: A, then D */
    ck_assert_int_eq(policy_sane(t.p), 0);
    tier_free(&t);
}
END_TEST

START_TEST(test_s3fifo_hand)
{
    tier t;
    static const uint64_t want[] = { 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2 };

    tier_new(&t, POLICY_S3FIFO, 10, 16);               /* small FIFO: 1 byte */
    for (uint64_t k = 1; k <= 10; k++)
        tier_insert(&t, k, 1);
    tier_access(&t, 1, 1);                              /* 1 read while small */
    ck_assert_uint_eq(tier_evict(&t), 2);               /* 1 moved to main; 2 to the ghost */
    tier_insert(&t, 2, 1);                              /* a ghost hit: straight to main */
    tier_insert(&t, 11, 1);                             /* a stranger: small */
    /* Small drains first (3..10, 11), then main in FIFO order (1, 2). */
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_uint_eq(tier_evict(&t), want[i]);
    ck_assert_ptr_null(policy_victim(t.p));
    ck_assert_uint_eq(policy_used(t.p), 0);

    /* A delete is not an eviction: no ghost, so back into small, ahead of
     * a later stranger (from main it would come after). */
    tier_insert(&t, 1, 1);
    tier_insert(&t, 2, 1);
    policy_remove(t.p, &t.node[1]);
    t.res[1] = 0;
    tier_insert(&t, 1, 1);
    tier_insert(&t, 3, 1);
    ck_assert_uint_eq(tier_evict(&t), 2);
    ck_assert_uint_eq(tier_evict(&t), 1);
    ck_assert_uint_eq(tier_evict(&t), 3);
    ck_assert_int_eq(policy_sane(t.p), 0);
    tier_free(&t);
}
END_TEST

START_TEST(test_s3fifo_main_reinsert)
{
    tier t;

    tier_new(&t, POLICY_S3FIFO, 10, 16);
    for (uint64_t k = 1; k <= 3; k++) {                 /* through small, ghost, then main */
        tier_insert(&t, k, 1);
        tier_evict(&t);
        tier_insert(&t, k, 1);
    }
    tier_access(&t, 1, 1);
    tier_access(&t, 1, 1);                              /* 1: counter 2 */
    tier_access(&t, 2, 1);                              /* 2: counter 1 */
    ck_assert_uint_eq(tier_evict(&t), 3);
    ck_assert_uint_eq(tier_evict(&t), 2);               /* 1 2 go round once, 1 twice */
    ck_assert_uint_eq(tier_evict(&t), 1);
    tier_free(&t);
}
END_TEST

/* A dataset of 5 items read in order in a tier of 4: LRU never hits, epoch
 * keeps 4 of them.  Then the job moves to F G: the stale residents make way
 * for them (least recently used first), and the cache follows. */
START_TEST(test_epoch_hand)
{
    tier t, l;
    int hits = 0, lhits = 0, n;

    tier_new(&t, POLICY_EPOCH, 4, 8);
    tier_new(&l, POLICY_LRU, 4, 8);
    for (int e = 0; e < 10; e++)
        for (uint64_t k = A; k <= E; k++) {
            hits += tier_access(&t, k, 1);
            lhits += tier_access(&l, k, 1);
        }
    ck_assert_int_eq(lhits, 0);
    ck_assert_int_eq(hits, 9 * 4);
    ck_assert(t.res[A] && t.res[B] && t.res[C] && t.res[D] && !t.res[E]);
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[A]);   /* the order is LRU */

    for (n = 0; n < 200 && !(t.res[F] && t.res[G]); n++)
        tier_access(&t, n % 2 ? G : F, 1);
    ck_assert_int_lt(n, 200);
    ck_assert(!t.res[A] && !t.res[B] && t.res[C] && t.res[D]);
    ck_assert(tier_access(&t, F, 1) && tier_access(&t, G, 1));
    ck_assert(!policy_admit(t.p, key_hash(H), 5));     /* larger than the tier */
    ck_assert_int_eq(policy_sane(t.p), 0);
    tier_free(&t);
    tier_free(&l);
}
END_TEST

/* ---- every kind: bytes, pinning, removal ---- */

START_TEST(test_bytes)
{
    tier t;
    policy_kind k = (policy_kind)_i;

    tier_new(&t, k, 100, 8);
    tier_insert(&t, A, 30);
    tier_insert(&t, B, 30);
    tier_insert(&t, C, 30);
    ck_assert_uint_eq(policy_used(t.p), 90);
    /* 50 more bytes: two 30-byte victims, the oldest first (no hits yet). */
    ck_assert_uint_eq(tier_evict(&t), A);
    ck_assert_uint_eq(policy_used(t.p), 60);
    ck_assert_uint_eq(tier_evict(&t), B);
    tier_insert(&t, D, 50);
    ck_assert_uint_eq(policy_used(t.p), 80);
    ck_assert_uint_eq(policy_count(t.p), 2);
    ck_assert(!policy_admit(t.p, key_hash(E), 101));    /* never fits */
    ck_assert(policy_admit(t.p, key_hash(E), 20));      /* fits without eviction */
    tier_insert(&t, E, 20);
    ck_assert_uint_eq(policy_used(t.p), 100);
    ck_assert_int_eq(policy_sane(t.p), 0);
    /* Mixed sizes through the caller protocol stay within capacity. */
    for (int i = 0; i < 2000; i++) {
        uint64_t key = rng_below(8);
        tier_access(&t, key, 10 + key * 10);
        ck_assert_uint_le(policy_used(t.p), 100);
        ck_assert_int_eq(policy_sane(t.p), 0);
    }
    tier_free(&t);
}
END_TEST

START_TEST(test_pinning)
{
    tier t;
    policy_kind k = (policy_kind)_i;

    tier_new(&t, k, 3, 8);
    tier_insert(&t, A, 1);
    tier_insert(&t, B, 1);
    tier_insert(&t, C, 1);
    policy_pin(t.p, &t.node[A], 1);
    policy_pin(t.p, &t.node[A], 1);                     /* twice: no change */
    ck_assert_int_eq(policy_sane(t.p), 0);
    policy_node *v = policy_victim(t.p);
    ck_assert(v == &t.node[B] || v == &t.node[C]);
    policy_pin(t.p, &t.node[B], 1);
    policy_pin(t.p, &t.node[C], 1);
    ck_assert_ptr_null(policy_victim(t.p));             /* full of pinned items */
    ck_assert(!tier_access(&t, D, 1));
    ck_assert(!t.res[D] && t.res[A] && t.res[B] && t.res[C]);
    ck_assert(tier_access(&t, B, 1));                   /* hits on pinned items are fine */
    ck_assert_uint_eq(policy_used(t.p), 3);
    ck_assert_int_eq(policy_sane(t.p), 0);

    policy_pin(t.p, &t.node[B], 0);
    policy_pin(t.p, &t.node[B], 0);
    ck_assert_ptr_eq(policy_victim(t.p), &t.node[B]);   /* the only unpinned one */
    policy_remove(t.p, &t.node[A]);                     /* removing a pinned node */
    t.res[A] = 0;
    ck_assert_uint_eq(policy_used(t.p), 2);
    ck_assert_int_eq(policy_sane(t.p), 0);
    ck_assert_uint_eq(tier_evict(&t), B);
    ck_assert_ptr_null(policy_victim(t.p));
    policy_pin(t.p, &t.node[C], 0);
    ck_assert_uint_eq(tier_evict(&t), C);
    ck_assert_uint_eq(policy_used(t.p), 0);
    ck_assert_uint_eq(policy_count(t.p), 0);
    ck_assert_ptr_null(policy_victim(t.p));
    ck_assert_int_eq(policy_sane(t.p), 0);
    tier_free(&t);
}
END_TEST

/* ---- reference models: the same policies in O(n), on arrays ---- */

#define RK 40                       /* keys */
#define RLFU_FMAX 255

typedef struct ref {
    policy_kind kind;
    uint64_t capacity, small_target, ctr, since_age;
    int res[RK], pinned[RK], q[RK], visited[RK], victim[RK];
    uint64_t size[RK], seq[RK], freq[RK];
    int hand;                       /* sieve: key, -1 = the tail */
    uint64_t ghost[4 * RK], gsize[4 * RK];  /* s3fifo: oldest first */
    int nghost;
} ref;

static uint64_t ref_count(const ref *r)
{
    uint64_t n = 0;

    for (int k = 0; k < RK; k++)
        n += r->res[k];
    return n;
}

/* The evictable key with the smallest seq in queue q (-1: any), or -1. */
static int ref_oldest(const ref *r, int q, uint64_t after)
{
    int best = -1;

    for (int k = 0; k < RK; k++)
        if (r->res[k] && !r->pinned[k] && (q < 0 || r->q[k] == q) && r->seq[k] > after &&
            (best < 0 || r->seq[k] < r->seq[best]))
            best = k;
    return best;
}

static void ref_age_lfu(ref *r)
{
    if (++r->since_age >= 8 * (ref_count(r) ? ref_count(r) : 1)) {
        for (int k = 0; k < RK; k++)
            r->freq[k] /= 2;
        r->since_age = 0;
    }
}

static void ref_insert(ref *r, int k, uint64_t size)
{
    r->res[k] = 1;
    r->pinned[k] = r->visited[k] = r->victim[k] = 0;
    r->size[k] = size;
    r->seq[k] = ++r->ctr;
    r->q[k] = 0;
    r->freq[k] = r->kind == POLICY_LFU;
    if (r->kind == POLICY_S3FIFO)
        for (int i = 0; i < r->nghost; i++)
            if (r->ghost[i] == key_hash((uint64_t)k)) {
                memmove(&r->ghost[i], &r->ghost[i + 1], (size_t)(r->nghost - i - 1) * sizeof(r->ghost[0]));
                memmove(&r->gsize[i], &r->gsize[i + 1], (size_t)(r->nghost - i - 1) * sizeof(r->gsize[0]));
                r->nghost--;
                r->q[k] = 1;
                break;
            }
    if (r->kind == POLICY_LFU)
        ref_age_lfu(r);
}

static void ref_hit(ref *r, int k)
{
    r->victim[k] = 0;
    switch (r->kind) {
    case POLICY_LRU:
    case POLICY_EPOCH:
        if (!r->pinned[k])
            r->seq[k] = ++r->ctr;
        break;
    case POLICY_LFU:
        if (r->freq[k] < RLFU_FMAX)
            r->freq[k]++;
        if (!r->pinned[k])
            r->seq[k] = ++r->ctr;
        ref_age_lfu(r);
        break;
    case POLICY_SIEVE:
        r->visited[k] = 1;
        break;
    case POLICY_S3FIFO:
        if (r->freq[k] < 3)
            r->freq[k]++;
        break;
    default:
        break;
    }
}

/* Sieve's hand leaves k (removed or pinned) for the next newer node. */
static void ref_leave(ref *r, int k)
{
    if (r->kind == POLICY_SIEVE && r->hand == k) {
        r->pinned[k] = 1;
        r->hand = ref_oldest(r, -1, r->seq[k]);
        r->pinned[k] = 0;
    }
    r->victim[k] = 0;
}

static void ref_remove(ref *r, int k)
{
    uint64_t main_bytes = r->capacity - r->small_target;

    if (r->kind == POLICY_S3FIFO && !r->pinned[k] && r->q[k] == 0 && r->victim[k]) {
        r->ghost[r->nghost] = key_hash((uint64_t)k);
        r->gsize[r->nghost++] = r->size[k];
        for (;;) {
            uint64_t bytes = 0;
            for (int i = 0; i < r->nghost; i++)
                bytes += r->gsize[i];
            if (bytes <= main_bytes)
                break;
            memmove(&r->ghost[0], &r->ghost[1], (size_t)(r->nghost - 1) * sizeof(r->ghost[0]));
            memmove(&r->gsize[0], &r->gsize[1], (size_t)(r->nghost - 1) * sizeof(r->gsize[0]));
            r->nghost--;
        }
    }
    if (!r->pinned[k])
        ref_leave(r, k);
    r->res[k] = r->pinned[k] = 0;
}

static void ref_pin(ref *r, int k, int pin)
{
    if (pin == r->pinned[k])
        return;
    if (pin) {
        ref_leave(r, k);
        r->pinned[k] = 1;
        return;
    }
    r->pinned[k] = 0;
    r->seq[k] = ++r->ctr;
    if (r->kind == POLICY_SIEVE)
        r->visited[k] = 1;
    if (r->kind == POLICY_S3FIFO)
        r->q[k] = 1;
}

static int ref_victim(ref *r)
{
    int k;

    switch (r->kind) {
    case POLICY_LRU:
    case POLICY_EPOCH:
        return ref_oldest(r, -1, 0);
    case POLICY_LFU: {
        int best = -1;
        for (k = 0; k < RK; k++)
            if (r->res[k] && !r->pinned[k] &&
                (best < 0 || r->freq[k] < r->freq[best] ||
                 (r->freq[k] == r->freq[best] && r->seq[k] < r->seq[best])))
                best = k;
        return best;
    }
    case POLICY_SIEVE:
        k = r->hand >= 0 ? r->hand : ref_oldest(r, -1, 0);
        if (k < 0)
            return -1;
        while (r->visited[k]) {
            r->visited[k] = 0;
            int nx = ref_oldest(r, -1, r->seq[k]);
            k = nx >= 0 ? nx : ref_oldest(r, -1, 0);
        }
        r->hand = k;
        return k;
    case POLICY_S3FIFO:
        for (;;) {
            uint64_t small = 0;
            int anymain = ref_oldest(r, 1, 0) >= 0;
            for (k = 0; k < RK; k++)
                if (r->res[k] && !r->pinned[k] && r->q[k] == 0)
                    small += r->size[k];
            k = ref_oldest(r, 0, 0);
            if (k >= 0 && (small >= r->small_target || !anymain)) {
                if (r->freq[k]) {
                    r->freq[k] = 0;
                    r->q[k] = 1;
                    r->seq[k] = ++r->ctr;
                    continue;
                }
                r->victim[k] = 1;
                return k;
            }
            k = ref_oldest(r, 1, 0);
            if (k < 0)
                return -1;
            if (r->freq[k]) {
                r->freq[k]--;
                r->seq[k] = ++r->ctr;
                continue;
            }
            return k;
        }
    default:
        return -1;
    }
}

/* Random accesses (by the caller protocol), deletes, pins and unpins, with
 * the victim checked against the reference at every step. */
static void ref_run(policy_kind kind, uint64_t capacity, uint64_t maxsize, int steps)
{
    tier t;
    ref r;

    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.capacity = capacity;
    r.small_target = capacity / 100 * 10 + capacity % 100 * 10 / 100;
    r.hand = -1;
    tier_new(&t, kind, capacity, RK);
    for (int s = 0; s < steps; s++) {
        uint64_t op = rng_below(100);
        int k = (int)(rng_below(RK) * rng_below(RK) / RK);      /* skewed to low keys */
        uint64_t size = 1 + (uint64_t)k % maxsize;
        if (op < 80) {
            if (t.res[k]) {
                policy_hit(t.p, &t.node[k]);
                ref_hit(&r, k);
            } else if (policy_admit(t.p, key_hash((uint64_t)k), size)) {
                while (policy_used(t.p) + size > capacity) {
                    int rv = ref_victim(&r);
                    policy_node *v = policy_victim(t.p);
                    ck_assert_int_eq(v ? (int)(v - t.node) : -1, rv);
                    if (!v)
                        break;
                    policy_remove(t.p, v);
                    t.res[rv] = 0;
                    ref_remove(&r, rv);
                }
                if (policy_used(t.p) + size <= capacity) {
                    tier_insert(&t, (uint64_t)k, size);
                    ref_insert(&r, k, size);
                }
            }
        } else if (op < 88 && t.res[k]) {
            policy_remove(t.p, &t.node[k]);
            t.res[k] = 0;
            ref_remove(&r, k);
        } else if (op < 98 && t.res[k]) {
            int pin = (int)rng_below(3) == 0;       /* few pinned at a time */
            policy_pin(t.p, &t.node[k], pin);
            ref_pin(&r, k, pin);
        } else {
            int rv = ref_victim(&r);
            policy_node *v = policy_victim(t.p);
            ck_assert_int_eq(v ? (int)(v - t.node) : -1, rv);
        }
        ck_assert_int_eq(policy_sane(t.p), 0);
        ck_assert_uint_eq(policy_count(t.p), ref_count(&r));
        uint64_t used = 0;
        for (int i = 0; i < RK; i++)
            used += r.res[i] ? r.size[i] : 0;
        ck_assert_uint_eq(policy_used(t.p), used);
        ck_assert_uint_le(used, capacity);
    }
    tier_free(&t);
}

START_TEST(test_reference_unit)
{
    rng_state = 1000 + (uint64_t)_i;
    ref_run((policy_kind)_i, 20, 1, 6000);
}
END_TEST

START_TEST(test_reference_bytes)
{
    rng_state = 2000 + (uint64_t)_i;
    ref_run((policy_kind)_i, 47, 6, 6000);
}
END_TEST

/* ---- hit ratios on generated traces ---- */

typedef struct trace {
    uint64_t *key;
    uint64_t n, warm;           /* accesses; hits count from access warm on */
    uint64_t nkeys;
} trace;

static void trace_epochs(trace *t, uint64_t items, int epochs, int shuffle)
{
    uint64_t *order = malloc(items * sizeof(*order));

    t->n = items * (uint64_t)epochs;
    t->key = malloc(t->n * sizeof(*t->key));
    ck_assert_ptr_nonnull(order);
    ck_assert_ptr_nonnull(t->key);
    t->nkeys = items;
    t->warm = items;                                    /* per epoch after the first */
    for (uint64_t i = 0; i < items; i++)
        order[i] = i;
    for (int e = 0; e < epochs; e++) {
        if (shuffle)
            for (uint64_t i = items; i > 1; i--) {
                uint64_t j = rng_below(i), x = order[i - 1];
                order[i - 1] = order[j];
                order[j] = x;
            }
        memcpy(&t->key[(uint64_t)e * items], order, items * sizeof(*order));
    }
    free(order);
}

/* Zipf(alpha = 1) over items keys, by inverting the CDF. */
static void trace_zipf(trace *t, uint64_t items, uint64_t n)
{
    double *cdf = malloc(items * sizeof(*cdf)), sum = 0;

    ck_assert_ptr_nonnull(cdf);
    t->n = n;
    t->key = malloc(n * sizeof(*t->key));
    ck_assert_ptr_nonnull(t->key);
    t->nkeys = items;
    t->warm = n / 10;
    for (uint64_t i = 0; i < items; i++)
        cdf[i] = (sum += 1.0 / (double)(i + 1));
    for (uint64_t a = 0; a < n; a++) {
        double u = (double)(rng_next() >> 11) * 0x1.0p-53 * sum;
        uint64_t lo = 0, hi = items - 1;
        while (lo < hi) {
            uint64_t mid = (lo + hi) / 2;
            if (cdf[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        t->key[a] = lo;
    }
    free(cdf);
}

/* Half the accesses to hot keys (uniform), half a sequential scan. */
static void trace_scanmix(trace *t, uint64_t hot, uint64_t scan, uint64_t n)
{
    uint64_t cursor = 0;

    t->n = n;
    t->key = malloc(n * sizeof(*t->key));
    ck_assert_ptr_nonnull(t->key);
    t->nkeys = hot + scan;
    t->warm = n / 10;
    for (uint64_t a = 0; a < n; a++) {
        if (rng_next() & 1) {
            t->key[a] = rng_below(hot);
        } else {
            t->key[a] = hot + cursor;
            cursor = (cursor + 1) % scan;
        }
    }
}

static double hit_ratio(const trace *tr, policy_kind kind, uint64_t capacity)
{
    tier t;
    uint64_t hits = 0;

    tier_new(&t, kind, capacity, tr->nkeys);
    for (uint64_t i = 0; i < tr->n; i++) {
        int hit = tier_access(&t, tr->key[i], 1);
        if (i >= tr->warm)
            hits += (uint64_t)hit;
    }
    ck_assert_int_eq(policy_sane(t.p), 0);
    tier_free(&t);
    return (double)hits / (double)(tr->n - tr->warm);
}

/* Belady's MIN, unit sizes, offline: on a miss in a full cache, evict the
 * resident (or bypass the newcomer) whose next use is farthest. */
static double belady(const trace *tr, uint64_t capacity)
{
    uint64_t *next = malloc(tr->n * sizeof(*next)), *last = malloc(tr->nkeys * sizeof(*last));
    uint64_t *nextuse = calloc(tr->nkeys, sizeof(*nextuse));
    uint64_t *resident = malloc((capacity + 1) * sizeof(*resident));
    uint8_t *res = calloc(tr->nkeys, 1);
    uint64_t nres = 0, hits = 0;

    ck_assert(next && last && nextuse && resident && res);
    for (uint64_t k = 0; k < tr->nkeys; k++)
        last[k] = UINT64_MAX;
    for (uint64_t i = tr->n; i-- > 0;) {
        next[i] = last[tr->key[i]];
        last[tr->key[i]] = i;
    }
    for (uint64_t i = 0; i < tr->n; i++) {
        uint64_t k = tr->key[i];
        if (res[k]) {
            hits += i >= tr->warm;
        } else {
            res[k] = 1;
            resident[nres++] = k;
        }
        nextuse[k] = next[i];
        if (nres > capacity) {
            uint64_t far = 0;
            for (uint64_t j = 1; j < nres; j++)
                if (nextuse[resident[j]] > nextuse[resident[far]])
                    far = j;
            res[resident[far]] = 0;
            resident[far] = resident[--nres];
        }
    }
    free(next);
    free(last);
    free(nextuse);
    free(resident);
    free(res);
    return (double)hits / (double)(tr->n - tr->warm);
}

START_TEST(test_ratio_same_order)
{
    trace tr;
    uint64_t cap = 1000;

    rng_state = 1;
    trace_epochs(&tr, 1100, 6, 0);                      /* D = 1.1 C */
    ck_assert_double_ge(belady(&tr, cap), 0.90);
    ck_assert_double_eq(hit_ratio(&tr, POLICY_LRU, cap), 0.0);
    ck_assert_double_eq(hit_ratio(&tr, POLICY_LFU, cap), 0.0);
    ck_assert_double_eq(hit_ratio(&tr, POLICY_SIEVE, cap), 0.0);
    ck_assert_double_ge(hit_ratio(&tr, POLICY_EPOCH, cap), 0.90);
    free(tr.key);
    trace_epochs(&tr, 2000, 6, 0);                      /* D = 2 C */
    ck_assert_double_eq(hit_ratio(&tr, POLICY_LRU, cap), 0.0);
    ck_assert_double_ge(hit_ratio(&tr, POLICY_EPOCH, cap), 0.49);
    free(tr.key);
    trace_epochs(&tr, 5000, 4, 0);                      /* D = 5 C: no hit yet when full */
    ck_assert_double_ge(hit_ratio(&tr, POLICY_EPOCH, cap), 0.19);
    free(tr.key);
}
END_TEST

START_TEST(test_ratio_shuffled)
{
    trace tr;
    uint64_t cap = 1000;
    double bel, ep;

    rng_state = 2;
    trace_epochs(&tr, 1100, 6, 1);                      /* D = 1.1 C */
    bel = belady(&tr, cap);
    ep = hit_ratio(&tr, POLICY_EPOCH, cap);
    ck_assert_double_ge(bel, 0.90);
    ck_assert_double_ge(ep, 0.85);
    ck_assert_double_le(ep, bel + 1e-9);
    ck_assert_double_le(hit_ratio(&tr, POLICY_LRU, cap), 0.75);    /* facts.md: 0.68 */
    free(tr.key);
    trace_epochs(&tr, 2000, 6, 1);                      /* D = 2 C */
    ck_assert_double_ge(belady(&tr, cap), 0.49);
    ck_assert_double_ge(hit_ratio(&tr, POLICY_EPOCH, cap), 0.45);
    ck_assert_double_le(hit_ratio(&tr, POLICY_LRU, cap), 0.25);    /* facts.md: 0.17 */
    free(tr.key);
}
END_TEST

/* Recency-friendly and mixed workloads: nobody beats Belady, epoch is no
 * worse than LRU, the scan-resistant ones beat LRU on the scan mix. */
START_TEST(test_ratio_zipf_scan)
{
    trace tr;
    double lru, bel, r;

    rng_state = 3;
    trace_zipf(&tr, 10000, 100000);
    lru = hit_ratio(&tr, POLICY_LRU, 1000);
    bel = belady(&tr, 1000);
    for (int k = 0; k < POLICY_NKINDS; k++) {
        r = hit_ratio(&tr, (policy_kind)k, 1000);
        ck_assert_double_le(r, bel + 1e-9);
        ck_assert_double_ge(r, lru - 0.01);
    }
    ck_assert_double_ge(lru, 0.55);
    free(tr.key);

    trace_scanmix(&tr, 200, 1800, 100000);              /* C = D / 5 */
    lru = hit_ratio(&tr, POLICY_LRU, 400);
    bel = belady(&tr, 400);
    for (int k = 0; k < POLICY_NKINDS; k++) {
        r = hit_ratio(&tr, (policy_kind)k, 400);
        ck_assert_double_le(r, bel + 1e-9);
        if (k != POLICY_LRU)
            ck_assert_double_ge(r, lru + 0.03);
    }
    free(tr.key);
}
END_TEST

/* A new job's dataset replaces the old one within a few of its epochs. */
START_TEST(test_epoch_switch)
{
    trace a, b;
    tier t;
    uint64_t hits = 0;

    rng_state = 4;
    trace_epochs(&a, 1100, 3, 1);
    trace_epochs(&b, 1100, 6, 1);
    tier_new(&t, POLICY_EPOCH, 1000, 2200);
    for (uint64_t i = 0; i < a.n; i++)
        tier_access(&t, a.key[i], 1);
    for (uint64_t i = 0; i < b.n; i++) {
        int hit = tier_access(&t, 1100 + b.key[i], 1);
        if (i >= 4 * 1100)                              /* the last 2 of 6 epochs */
            hits += (uint64_t)hit;
    }
    ck_assert_double_ge((double)hits / (2 * 1100), 0.85);
    tier_free(&t);
    free(a.key);
    free(b.key);
}
END_TEST

static Suite *policy_suite(void)
{
    Suite *s = suite_create("policy");
    TCase *tc = tcase_create("hand");
    TCase *all = tcase_create("all kinds");
    TCase *ratio = tcase_create("hit ratios");

    tcase_add_test(tc, test_kind_names);
    tcase_add_test(tc, test_lru_hand);
    tcase_add_test(tc, test_lfu_hand);
    tcase_add_test(tc, test_lfu_ageing);
    tcase_add_test(tc, test_sieve_hand);
    tcase_add_test(tc, test_s3fifo_hand);
    tcase_add_test(tc, test_s3fifo_main_reinsert);
    tcase_add_test(tc, test_epoch_hand);
    suite_add_tcase(s, tc);

    tcase_add_loop_test(all, test_bytes, 0, POLICY_NKINDS);
    tcase_add_loop_test(all, test_pinning, 0, POLICY_NKINDS);
    tcase_add_loop_test(all, test_reference_unit, 0, POLICY_NKINDS);
    tcase_add_loop_test(all, test_reference_bytes, 0, POLICY_NKINDS);
    suite_add_tcase(s, all);

    tcase_set_timeout(ratio, 60);
    tcase_add_test(ratio, test_ratio_same_order);
    tcase_add_test(ratio, test_ratio_shuffled);
    tcase_add_test(ratio, test_ratio_zipf_scan);
    tcase_add_test(ratio, test_epoch_switch);
    suite_add_tcase(s, ratio);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(policy_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
