/*
 * check_idset.c - the pinned-file id set against a brute-force reference:
 * random adds and deletes (deletion's backward shift is the subtle part),
 * growth, and the all-zero id being refused.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idset.h"

/* Ids that collide in their home slot often: a small hash space. */
static void mkid(uint8_t id[FILE_ID_LEN], uint32_t n)
{
    memset(id, 0, FILE_ID_LEN);
    id[0] = (uint8_t)(n % 61 + 1);          /* few homes: long probe runs */
    memcpy(id + 8, &n, sizeof(n));
}

START_TEST(test_against_reference)
{
    enum { N = 3000 };
    static uint8_t in[N];
    idset s = { NULL, 0, 0 };
    unsigned seed = 7;
    size_t count = 0;

    for (int step = 0; step < 60000; step++) {
        uint32_t n = (uint32_t)rand_r(&seed) % N;
        uint8_t id[FILE_ID_LEN];
        mkid(id, n);
        if (rand_r(&seed) % 3) {
            ck_assert_int_eq(idset_add(&s, id), !in[n]);
            count += !in[n];
            in[n] = 1;
        } else {
            ck_assert_int_eq(idset_del(&s, id), in[n]);
            count -= in[n];
            in[n] = 0;
        }
        ck_assert_uint_eq(s.count, count);
        if (step % 2000 == 0)
            for (uint32_t k = 0; k < N; k++) {
                mkid(id, k);
                ck_assert_int_eq(idset_has(&s, id), in[k]);
            }
    }
    idset_clear(&s);
    ck_assert_uint_eq(s.count, 0);
}
END_TEST

START_TEST(test_edges)
{
    idset s = { NULL, 0, 0 };
    uint8_t zero[FILE_ID_LEN] = { 0 }, id[FILE_ID_LEN], key[24];

    ck_assert_int_eq(idset_has(&s, zero), 0);
    ck_assert_int_eq(idset_del(&s, zero), 0);
    ck_assert_int_eq(idset_add(&s, zero), -EINVAL);
    mkid(id, 42);
    ck_assert_int_eq(idset_add(&s, id), 1);
    memcpy(key, id, FILE_ID_LEN);          /* a chunk key: id + index */
    memset(key + FILE_ID_LEN, 0xff, 8);
    ck_assert_int_eq(idset_has(&s, key), 1);
    idset_clear(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("idset");
    TCase *tc = tcase_create("idset");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_against_reference);
    tcase_add_test(tc, test_edges);
    suite_add_tcase(su, tc);
    sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
