/*
 * check_cache.c - unit tests of the DRAM tier and chunk references
 * (cache.c): LRU order, the byte capacity, references that outlive
 * eviction, replacement and prefix drops.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "testutil.h"

static void key_for(uint8_t key[CHUNK_KEY_LEN], uint8_t file, uint64_t idx)
{
    uint8_t id[16];

    memset(id, file, sizeof(id));
    chunk_key(key, id, idx);
}

static chunk *mk(uint8_t file, uint64_t idx, size_t size)
{
    uint8_t key[CHUNK_KEY_LEN];
    chunk *c;

    key_for(key, file, idx);
    c = chunk_new(key, size);
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq((uintptr_t)c->data % 4096, 0);
    c->len = (uint32_t)size;
    return c;
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
    dram *d;
    dram_stats st;

    ck_assert_int_eq(dram_new(4 * 8192, &d), 0);
    for (uint64_t i = 0; i < 4; i++) {
        chunk *c = mk(1, i, 8192);
        dram_put(d, c);
        chunk_unref(&c);
    }
    dram_get_stats(d, &st);
    ck_assert_uint_eq(st.used_bytes, 4 * 8192);
    ck_assert(has(d, 1, 0));                /* 0 becomes most recent */
    {
        chunk *c = mk(1, 4, 8192);          /* evicts 1, the least recent */
        dram_put(d, c);
        chunk_unref(&c);
    }
    ck_assert(!has(d, 1, 1));
    ck_assert(has(d, 1, 0) && has(d, 1, 2) && has(d, 1, 3) && has(d, 1, 4));
    dram_get_stats(d, &st);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_uint_le(st.used_bytes, st.capacity_bytes);
    {
        chunk *big = mk(2, 0, 5 * 8192);    /* larger than the tier: not kept */
        dram_put(d, big);
        ck_assert_int_eq(big->in_tier, 0);
        chunk_unref(&big);
    }
    dram_get_stats(d, &st);
    ck_assert_uint_eq(st.chunks, 4);
    dram_free(&d);
    ck_assert_ptr_null(d);
}
END_TEST

START_TEST(test_ref_outlives_eviction)
{
    dram *d;
    chunk *a = mk(1, 0, 4096), *held;

    ck_assert_int_eq(dram_new(4096, &d), 0);
    memset(a->data, 0x5A, 4096);
    dram_put(d, a);
    held = chunk_ref(a);                    /* a reply being sent */
    chunk_unref(&a);
    {
        chunk *b = mk(1, 1, 4096);
        dram_put(d, b);                     /* evicts a */
        chunk_unref(&b);
    }
    ck_assert(!has(d, 1, 0));
    ck_assert_uint_eq(held->refs, 1);
    for (int i = 0; i < 4096; i++)
        ck_assert_uint_eq(held->data[i], 0x5A);
    chunk_unref(&held);                     /* ASan/valgrind: freed exactly once */
    dram_free(&d);
}
END_TEST

START_TEST(test_replace_and_drop_prefix)
{
    dram *d;
    dram_stats st;
    uint8_t id[16];

    ck_assert_int_eq(dram_new(1 << 20, &d), 0);
    for (uint64_t i = 0; i < 10; i++) {
        chunk *c = mk(1, i, 4096), *e = mk(2, i, 4096);
        dram_put(d, c);
        dram_put(d, e);
        chunk_unref(&c);
        chunk_unref(&e);
    }
    {
        chunk *c = mk(1, 3, 8192);          /* same key, new bytes */
        dram_put(d, c);
        chunk_unref(&c);
    }
    dram_get_stats(d, &st);
    ck_assert_uint_eq(st.chunks, 20);
    ck_assert_uint_eq(st.used_bytes, 19 * 4096 + 8192);
    memset(id, 1, sizeof(id));
    dram_drop_prefix(d, id, sizeof(id));
    dram_get_stats(d, &st);
    ck_assert_uint_eq(st.chunks, 10);
    ck_assert(!has(d, 1, 3));
    ck_assert(has(d, 2, 3));
    dram_free(&d);
}
END_TEST

START_TEST(test_many_chunks_grow)
{
    dram *d;
    dram_stats st;

    ck_assert_int_eq(dram_new(1ull << 30, &d), 0);
    for (uint64_t i = 0; i < 5000; i++) {
        chunk *c = mk(3, i, 1);
        dram_put(d, c);
        chunk_unref(&c);
    }
    for (uint64_t i = 0; i < 5000; i += 97)
        ck_assert(has(d, 3, i));
    dram_get_stats(d, &st);
    ck_assert_uint_eq(st.chunks, 5000);
    ck_assert_uint_eq(st.used_bytes, 5000 * 4096);  /* counted as allocated */
    dram_free(&d);
}
END_TEST

static Suite *cache_suite(void)
{
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("dram");

    tcase_add_test(tc, test_key_layout);
    tcase_add_test(tc, test_lru_capacity);
    tcase_add_test(tc, test_ref_outlives_eviction);
    tcase_add_test(tc, test_replace_and_drop_prefix);
    tcase_add_test(tc, test_many_chunks_grow);
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
