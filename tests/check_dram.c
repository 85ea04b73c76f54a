/*
 * check_dram.c - unit tests of the DRAM tier and chunk references
 * (dram.c) over a real arena: LRU order, the arena as the hard capacity,
 * references that pin their block after eviction, heap fallback,
 * replacement and prefix drops.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dram.h"
#include "testutil.h"

static void key_for(uint8_t key[CHUNK_KEY_LEN], uint8_t file, uint64_t idx)
{
    uint8_t id[16];

    memset(id, file, sizeof(id));
    chunk_key(key, id, idx);
}

static dram *tier;

static dram *mkdram(uint64_t capacity, uint64_t max_chunk)
{
    char err[256];
    dram *d = NULL;

    ck_assert_msg(dram_new(capacity, max_chunk, "lru", &d, err, sizeof(err)) == 0, "%s", err);
    return d;
}

static chunk *mk(uint8_t file, uint64_t idx, size_t size)
{
    uint8_t key[CHUNK_KEY_LEN];
    chunk *c;

    key_for(key, file, idx);
    c = dram_chunk_new(tier, key, size, 0);
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq((uintptr_t)c->data % 4096, 0);
    c->len = (uint32_t)size;
    return c;
}

/* Allocate and cache one chunk. */
static void put(uint8_t file, uint64_t idx, size_t size)
{
    chunk *c = mk(file, idx, size);

    dram_put(tier, c);
    chunk_unref(&c);
}

static int has(dram *d, uint8_t file, uint64_t idx)
{
    uint8_t key[CHUNK_KEY_LEN];
    chunk *c;

    key_for(key, file, idx);
    c = dram_get(d, key);
    if (!c)
        return 0;
    chunk_unref(&c);
    return 1;
}

START_TEST(test_key_layout)
{
    uint8_t key[CHUNK_KEY_LEN], id[16];

    memset(id, 0xAB, sizeof(id));
    chunk_key(key, id, 0x0102030405060708ull);
    ck_assert_int_eq(memcmp(key, id, 16), 0);
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(key[16 + i], i + 1);   /* big-endian: chunks sort in order */
}
END_TEST

START_TEST(test_lru_capacity)
{
    dram_stats st;

    tier = mkdram(40 * 1024, 8192);         /* 4 arena blocks of 8K, 8K overflow */
    for (uint64_t i = 0; i < 4; i++)
        put(1, i, 8192);
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.capacity_bytes, 40 * 1024);    /* arena and overflow: all of it */
    ck_assert_uint_eq(st.used_bytes, 4 * 8192);
    ck_assert(has(tier, 1, 0));             /* 0 becomes most recent */
    put(1, 4, 8192);                        /* the arena is full: evicts 1, the least recent */
    ck_assert(!has(tier, 1, 1));
    ck_assert(has(tier, 1, 0) && has(tier, 1, 2) && has(tier, 1, 3) && has(tier, 1, 4));
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_uint_eq(st.chunks, 4);
    ck_assert_uint_le(st.used_bytes, st.capacity_bytes);
    /* Sizes round up to blocks: a 5000-byte chunk takes 8 KiB. */
    put(2, 0, 5000);
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.used_bytes, 4 * 8192);
    dram_free(&tier);
    ck_assert_ptr_null(tier);
}
END_TEST

START_TEST(test_ref_outlives_eviction)
{
    chunk *a, *held, *b;
    dram_stats st;

    tier = mkdram(10 * 1024, 8192);         /* one 8K block, an overflow too small to keep it */
    a = mk(1, 0, 8192);
    memset(a->data, 0x5A, 8192);
    dram_put(tier, a);
    held = chunk_ref(a);                    /* a lease, or a reply being sent */
    chunk_unref(&a);
    /* The arena's only block is pinned: the tier evicts a, but the block
     * stays a's, so the new chunk falls back to the heap. */
    b = mk(1, 1, 8192);
    ck_assert_ptr_null(b->ar);
    dram_put(tier, b);                      /* larger than the overflow: not kept */
    ck_assert(!has(tier, 1, 1));
    ck_assert(!has(tier, 1, 0));
    chunk_unref(&b);
    for (int i = 0; i < 8192; i++)
        ck_assert_uint_eq(held->data[i], 0x5A);
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.heap_fallbacks, 1);
    ck_assert_uint_eq(st.used_bytes, 8192);
    chunk_unref(&held);                     /* the block is free again */
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.used_bytes, 0);
    b = mk(1, 2, 8192);
    ck_assert_ptr_nonnull(b->ar);
    chunk_unref(&b);
    dram_free(&tier);
}
END_TEST

START_TEST(test_replace_and_drop_prefix)
{
    dram_stats st;
    uint8_t id[16];

    tier = mkdram(1 << 20, 8192);
    for (uint64_t i = 0; i < 10; i++) {
        put(1, i, 4096);
        put(2, i, 4096);
    }
    put(1, 3, 8192);                        /* same key, new bytes */
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.chunks, 20);
    ck_assert_uint_eq(st.cached_bytes, 19 * 4096 + 8192);
    ck_assert_uint_eq(st.used_bytes, 19 * 4096 + 8192);
    memset(id, 1, sizeof(id));
    dram_drop_prefix(tier, id, sizeof(id));
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.chunks, 10);
    ck_assert_uint_eq(st.used_bytes, 10 * 4096);
    ck_assert(!has(tier, 1, 3));
    ck_assert(has(tier, 2, 3));
    dram_free(&tier);
}
END_TEST

START_TEST(test_many_chunks_grow)
{
    dram_stats st;

    tier = mkdram(64ull << 20, 4 << 20);
    for (uint64_t i = 0; i < 5000; i++)
        put(3, i, 1);
    for (uint64_t i = 0; i < 5000; i += 97)
        ck_assert(has(tier, 3, i));
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.chunks, 5000);
    ck_assert_uint_eq(st.used_bytes, 5000 * 4096);  /* counted as allocated */
    dram_free(&tier);
}
END_TEST

/* Heap chunks made while the arena is pinned stay in the overflow, within
 * its cap, so a client coming back for the rest finds them. */
START_TEST(test_heap_overflow)
{
    uint8_t key[CHUNK_KEY_LEN];
    chunk *leased[8], *h[3], *fl;
    dram_stats st;

    /* 9 arena blocks of 8K (the policy's 8, a reserve of one), 8K overflow. */
    tier = mkdram(80 * 1024, 8192);
    for (uint64_t i = 0; i < 8; i++)
        put(9, i, 8192);
    /* Lease every cached chunk: the arena is pinned. */
    for (uint64_t i = 0; i < 8; i++) {
        key_for(key, 9, i);
        leased[i] = dram_get(tier, key);
        ck_assert_ptr_nonnull(leased[i]);
    }
    fl = mk(9, 8, 8192);                    /* in flight: it takes the reserve */
    ck_assert_ptr_nonnull(fl->ar);
    for (int k = 0; k < 3; k++) {
        h[k] = mk(7, (uint64_t)k, 4096);
        ck_assert_ptr_null(h[k]->ar);       /* heap fallback */
        dram_put(tier, h[k]);
    }
    /* The overflow holds 8K: two 4K heap chunks; the oldest went. */
    ck_assert(!has(tier, 7, 0));
    ck_assert(has(tier, 7, 1) && has(tier, 7, 2));
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.used_bytes, 9 * 8192 + 2 * 4096);
    ck_assert_uint_le(st.used_bytes, st.capacity_bytes);
    ck_assert_uint_eq(st.heap_fallbacks, 3);
    for (int k = 0; k < 3; k++)
        chunk_unref(&h[k]);
    chunk_unref(&fl);
    for (uint64_t i = 0; i < 8; i++)
        chunk_unref(&leased[i]);
    dram_free(&tier);
}
END_TEST

/* The DRAM tier follows its policy: on a cyclic scan over a dataset a bit
 * larger than the tier, lru keeps nothing useful while epoch keeps a stable
 * subset (facts.md: 0.00 against 0.91). */
static double cyclic_hit_ratio(const char *policy_name)
{
    char err[256];
    uint64_t hits = 0, total = 0;

    ck_assert_msg(dram_new(750000, 8192, policy_name, &tier, err, sizeof(err)) == 0,
                  "%s", err);           /* 5 segments of 128K: 80 arena blocks of 8K */
    for (int pass = 0; pass < 8; pass++) {
        for (uint64_t i = 0; i < 88; i++) {   /* dataset = 1.1 x the tier */
            uint8_t key[CHUNK_KEY_LEN];
            chunk *c;
            key_for(key, 5, i);
            c = dram_get(tier, key);
            if (pass >= 4)
                total++;
            if (c) {
                hits += pass >= 4;
                chunk_unref(&c);
                continue;
            }
            c = dram_chunk_new(tier, key, 8192, 0);
            ck_assert_ptr_nonnull(c);
            dram_put(tier, c);
            chunk_unref(&c);
        }
    }
    dram_free(&tier);
    return (double)hits / (double)total;
}

START_TEST(test_policy_epoch_vs_lru)
{
    double lru = cyclic_hit_ratio("lru"), epoch = cyclic_hit_ratio("epoch");

    ck_assert_msg(lru < 0.05, "lru %.3f", lru);
    ck_assert_msg(epoch > 0.85, "epoch %.3f", epoch);     /* optimum 80/88 = 0.909 */
    {
        char err[256];
        dram *d = NULL;
        ck_assert_int_eq(dram_new(1 << 20, 8192, "mru", &d, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "mru"));
    }
}
END_TEST

/* Pinned chunks are never evicted, held now or cached later; unpin lets
 * them go again. */
START_TEST(test_pin_prefix)
{
    uint8_t id[16];
    dram_stats st;

    tier = mkdram(40 * 1024, 8192);         /* 4 arena blocks of 8K */
    put(1, 0, 8192);
    memset(id, 1, sizeof(id));
    ck_assert_int_eq(dram_pin_files(tier, (const uint8_t (*)[16])id, 1, 1), 1);
    put(1, 1, 8192);                        /* pinned on arrival */
    for (uint64_t i = 0; i < 10; i++)
        put(2, i, 8192);                    /* churn through the other two blocks */
    ck_assert(has(tier, 1, 0) && has(tier, 1, 1));
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.pinned_bytes, 2 * 8192);
    ck_assert_int_eq(dram_pin_files(tier, (const uint8_t (*)[16])id, 1, 0), 2);
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.pinned_bytes, 0);
    for (uint64_t i = 10; i < 14; i++)
        put(2, i, 8192);
    ck_assert(!has(tier, 1, 0) && !has(tier, 1, 1));
    dram_free(&tier);
}
END_TEST

/* Switching the policy live keeps every chunk, the pins, and the byte
 * count; the tier keeps working under the new policy. */
START_TEST(test_set_policy)
{
    uint8_t id[16];
    dram_stats st;
    char err[256];

    tier = mkdram(80 * 1024, 8192);         /* 8 arena blocks of 8K */
    for (uint64_t i = 0; i < 6; i++)
        put(3, i, 8192);
    put(4, 0, 8192);
    memset(id, 4, sizeof(id));
    ck_assert_int_eq(dram_pin_files(tier, (const uint8_t (*)[16])id, 1, 1), 1);
    ck_assert_int_eq(dram_set_policy(tier, "epoch", err, sizeof(err)), 0);
    ck_assert_int_eq(dram_set_policy(tier, "bogus", err, sizeof(err)), -EINVAL);
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.chunks, 7);
    ck_assert_uint_eq(st.cached_bytes, 7 * 8192);
    ck_assert_uint_eq(st.pinned_bytes, 8192);
    for (uint64_t i = 0; i < 6; i++)
        ck_assert(has(tier, 3, i));
    ck_assert_int_eq(dram_set_policy(tier, "lru", err, sizeof(err)), 0);
    for (uint64_t i = 10; i < 30; i++)      /* churn: the pinned chunk stays */
        put(3, i, 8192);
    ck_assert(has(tier, 4, 0));
    dram_free(&tier);
}
END_TEST

/* Chunks the policy refuses stay out of it: they live in the reserve (the
 * spill), are found there while someone reads them, and give their blocks
 * back to the next refused chunk once read and idle; the policy never holds
 * more than its capacity. */
START_TEST(test_refused_spill)
{
    char err[256];
    uint8_t key[CHUNK_KEY_LEN];
    chunk *r[16], *c, *held;
    dram_stats st;

    /* 15 segments of 64K, 120 blocks of 8K: the policy's 105, a reserve of 15. */
    ck_assert_msg(dram_new(1 << 20, 8192, "epoch", &tier, err, sizeof(err)) == 0, "%s", err);
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.arena_bytes, 120 * 8192);
    ck_assert_uint_eq(st.policy_capacity, 105 * 8192);
    ck_assert_uint_eq(st.arena_bytes + st.overflow_bytes + 65536, st.capacity_bytes);
    for (uint64_t i = 0; i < 105; i++)
        put(1, i, 8192);
    /* Full: first sightings are refused, and read ahead (marked unread). */
    for (int k = 0; k < 15; k++) {
        r[k] = mk(2, (uint64_t)k, 8192);
        ck_assert(!r[k]->admitted);
        ck_assert_ptr_nonnull(r[k]->ar);    /* a block of the reserve */
        r[k]->prefetched = 1;
        dram_put(tier, r[k]);
        chunk_unref(&r[k]);
    }
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.policy_bytes, 105 * 8192);
    ck_assert_uint_eq(st.spill_bytes, 15 * 8192);
    ck_assert_uint_eq(st.arena_used_bytes, st.arena_bytes);
    ck_assert(has(tier, 2, 0) && has(tier, 2, 14));
    /* The reserve holds unread chunks only: the next refused one takes the
     * heap rather than drop one of them. */
    c = mk(2, 15, 8192);
    ck_assert_ptr_null(c->ar);
    chunk_unref(&c);
    /* Read them (a client holds the newest); the next refused chunk takes
     * the block of the least recent idle one. */
    for (int k = 0; k < 15; k++) {
        key_for(key, 2, (uint64_t)k);
        c = dram_peek(tier, key);
        c->prefetched = 0;
    }
    key_for(key, 2, 0);
    held = dram_get(tier, key);             /* now the most recent, and leased */
    c = mk(2, 16, 8192);
    ck_assert_ptr_nonnull(c->ar);
    ck_assert(!has(tier, 2, 1));            /* the least recent idle one went */
    ck_assert(has(tier, 2, 0));
    dram_put(tier, c);
    chunk_unref(&c);
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.policy_bytes, 105 * 8192);
    ck_assert_uint_eq(st.spill_bytes, 15 * 8192);
    ck_assert_uint_eq(st.evictions, 0);     /* no resident displaced */
    ck_assert_uint_eq(st.heap_fallbacks, 1);
    chunk_unref(&held);
    dram_free(&tier);
}
END_TEST

/* A tier of few chunks keeps its reserve in whole chunks: the fractions
 * that size it (an eighth, the segment rounding) used to leave less than
 * one block beside the policy (20 MiB of 1 MiB chunks: a policy of 17.5 in
 * an arena of 18), so with the policy full a second refused chunk in
 * flight or read went to the heap (make bench's epoch policy at half the
 * dataset: 137 of 160 chunks an epoch). */
START_TEST(test_reserve_whole_chunks)
{
    const uint64_t ck = 1 << 20;
    char err[256];
    chunk *r[3], *c;
    dram_stats st;

    ck_assert_msg(dram_new(20 * ck, ck, "epoch", &tier, err, sizeof(err)) == 0, "%s", err);
    dram_get_stats(tier, &st);
    ck_assert_uint_ge(st.arena_bytes, st.policy_capacity + 3 * ck);
    for (uint64_t i = 0; i < st.policy_capacity / ck; i++)
        put(1, i, ck);
    /* Full: three refused chunks read at once (two readers' fetches and a
     * chunk still being sent) all get blocks of the reserve... */
    for (int k = 0; k < 3; k++) {
        r[k] = mk(2, (uint64_t)k, ck);
        ck_assert(!r[k]->admitted);
        ck_assert_ptr_nonnull(r[k]->ar);
    }
    dram_get_stats(tier, &st);
    ck_assert_uint_eq(st.heap_fallbacks, 0);
    ck_assert_uint_eq(st.evictions, 0);
    /* ...and once they are idle the next one reuses a block. */
    for (int k = 0; k < 3; k++) {
        dram_put(tier, r[k]);
        chunk_unref(&r[k]);
    }
    c = mk(2, 3, ck);
    ck_assert_ptr_nonnull(c->ar);
    chunk_unref(&c);
    dram_free(&tier);
}
END_TEST

START_TEST(test_too_small)
{
    char err[256];
    dram *d = NULL;

    ck_assert_int_eq(dram_new(1 << 20, 4 << 20, "lru", &d, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "too small"));
    ck_assert_ptr_null(d);
}
END_TEST

static Suite *cache_suite(void)
{
    Suite *s = suite_create("dram");
    TCase *tc = tcase_create("dram");

    tcase_add_test(tc, test_key_layout);
    tcase_add_test(tc, test_lru_capacity);
    tcase_add_test(tc, test_reserve_whole_chunks);
    tcase_add_test(tc, test_ref_outlives_eviction);
    tcase_add_test(tc, test_replace_and_drop_prefix);
    tcase_add_test(tc, test_many_chunks_grow);
    tcase_add_test(tc, test_heap_overflow);
    tcase_add_test(tc, test_policy_epoch_vs_lru);
    tcase_add_test(tc, test_pin_prefix);
    tcase_add_test(tc, test_set_policy);
    tcase_add_test(tc, test_refused_spill);
    tcase_add_test(tc, test_too_small);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(cache_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
