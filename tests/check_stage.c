/*
 * check_stage.c - a checkpoint's staged copy (daemon/ckpt/stage.c): a set
 * staged as a file per member reads back as its container across every
 * boundary (empty members included), each member is a descriptor of
 * exactly its bytes, a part of the wrong size or a header that does not
 * decode is refused, a set staged whole (an older daemon's N.data) still
 * reads, and removal leaves nothing.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckset.h"
#include "proto.h"
#include "stage.h"
#include "testutil.h"

#define NF 4

static const char *const names[NF] = { "model.pt", "empty", "optim.pt", "rng" };
static const uint64_t sizes[NF] = { 300001, 0, 1 << 20, 7 };

/* A container of the four files above: header then patterned bytes. */
static uint8_t *container(uint64_t *total, size_t *hlen)
{
    uint8_t hdr[4096];
    long h = proto_set_enc_hdr(hdr, sizeof(hdr), NF, names, sizes);
    uint64_t t = (uint64_t)h;
    uint8_t *c;

    ck_assert_int_gt(h, 0);
    for (int i = 0; i < NF; i++)
        t += sizes[i];
    c = malloc(t);
    ck_assert_ptr_nonnull(c);
    memcpy(c, hdr, (size_t)h);
    for (uint64_t i = (uint64_t)h; i < t; i++)
        c[i] = tu_byte(7, i);
    *total = t;
    *hlen = (size_t)h;
    return c;
}

static int dir_empty(const char *d)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "[ -z \"$(ls -A %s)\" ]", d);
    return system(cmd) == 0;
}

START_TEST(test_set_by_member)
{
    char *d = tu_mkdtemp(), err[256] = "", **nm = NULL;
    int dfd = open(d, O_RDONLY | O_DIRECTORY);
    uint64_t total, off = 0;
    size_t hlen;
    uint8_t *c = container(&total, &hlen), *back = malloc(total);
    uint32_t n = 0;
    stage *s = NULL;

    ck_assert_int_eq(stage_create(dfd, 5, 1, total, c, hlen, &s, &nm, &n, err, sizeof(err)),
                     0);
    ck_assert_uint_eq(n, NF);
    for (int i = 0; i < NF; i++)
        ck_assert_str_eq(nm[i], names[i]);
    stage_names_free(&nm, n);
    /* Odd pieces, so that writes straddle every part boundary. */
    while (off < total) {
        size_t m = total - off < 65537 ? (size_t)(total - off) : 65537;
        ck_assert_int_eq(stage_pwrite(s, c + off, m, off), 0);
        off += m;
    }
    ck_assert_int_eq(stage_pwrite(s, c, 1, total), -EIO);      /* past the end */
    ck_assert_int_eq(stage_sync(s), 0);
    stage_close(&s);

    ck_assert_int_eq(stage_open(dfd, 5, total, &s), 0);
    ck_assert_int_eq(stage_pread(s, back, (size_t)total, 0), 0);
    ck_assert_int_eq(memcmp(back, c, (size_t)total), 0);
    /* Reads from odd places, in no order. */
    for (uint64_t o = total - 3; o > 16; o = o * 2 / 3) {
        size_t m = (size_t)(total - o < 100000 ? total - o : 100000);
        memset(back, 0, m);
        ck_assert_int_eq(stage_pread(s, back, m, o), 0);
        ck_assert_int_eq(memcmp(back, c + o, m), 0);
    }
    ck_assert_int_eq(stage_pwrite(s, c, 1, 0), -EBADF);       /* read-only */
    stage_close(&s);

    /* Each member: a descriptor of exactly its bytes. */
    for (uint32_t i = 0, o = (uint32_t)hlen; i < NF; o += (uint32_t)sizes[i], i++) {
        int fd = stage_member_open(dfd, 5, i);
        struct stat st;
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstat(fd, &st), 0);
        ck_assert_uint_eq((uint64_t)st.st_size, sizes[i]);
        ck_assert_int_eq(pread(fd, back, (size_t)sizes[i] + 1, 0), (ssize_t)sizes[i]);
        ck_assert_int_eq(memcmp(back, c + o, (size_t)sizes[i]), 0);
        close(fd);
    }
    ck_assert_int_eq(stage_member_open(dfd, 5, NF), -ENOENT);
    ck_assert_int_eq(stage_names(dfd, 5, total, &nm, &n), 0);
    ck_assert_uint_eq(n, NF);
    ck_assert_str_eq(nm[2], "optim.pt");
    stage_names_free(&nm, n);
    ck_assert_int_eq(stage_names(dfd, 5, total + 1, &nm, &n), -EBADMSG);  /* sizes do not add up */

    /* A part of the wrong size is not the part the header says. */
    ck_assert_int_eq(truncate(strcat(strcpy((char *)back, d), "/5.set/2"), 10), 0);
    ck_assert_int_eq(stage_open(dfd, 5, total, &s), 0);
    ck_assert_int_eq(stage_pread(s, back, (size_t)total, 0), -EBADMSG);
    stage_close(&s);

    stage_remove(dfd, 5);
    ck_assert(dir_empty(d));
    ck_assert_int_eq(stage_open(dfd, 5, total, &s), -ENOENT);
    close(dfd);
    tu_rmrf(d);
    free(d);
    free(c);
    free(back);
}
END_TEST

START_TEST(test_refusals_and_old_layout)
{
    char *d = tu_mkdtemp(), err[256] = "", path[512];
    int dfd = open(d, O_RDONLY | O_DIRECTORY), fd;
    uint64_t total;
    size_t hlen;
    uint8_t *c = container(&total, &hlen), *back = malloc(total);
    stage *s = NULL;

    /* A header that does not decode (sizes that do not add up): refused,
     * nothing left behind. */
    ck_assert_int_eq(stage_create(dfd, 6, 1, total + 5, c, hlen, &s, NULL, NULL, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_null(s);
    ck_assert(strstr(err, "malformed") != NULL);
    ck_assert(dir_empty(d));

    /* A single file: N.data, fallocated to its size at once. */
    ck_assert_int_eq(stage_create(dfd, 7, 0, 1000, NULL, 0, &s, NULL, NULL, err, sizeof(err)), 0);
    snprintf(path, sizeof(path), "%s/7.data", d);
    {
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_size, 1000);
    }
    ck_assert_int_eq(stage_pwrite(s, c, 1000, 0), 0);
    ck_assert_int_eq(stage_sync(s), 0);
    stage_close(&s);
    stage_remove(dfd, 7);
    ck_assert(dir_empty(d));

    /* A set staged whole, as a daemon before stage.c did: still the
     * container, but no member of its own. */
    snprintf(path, sizeof(path), "%s/8.data", d);
    fd = open(path, O_WRONLY | O_CREAT, 0600);
    ck_assert_int_eq(write(fd, c, (size_t)total), (ssize_t)total);
    close(fd);
    ck_assert_int_eq(stage_open(dfd, 8, total, &s), 0);
    ck_assert_int_eq(stage_pread(s, back, (size_t)total, 0), 0);
    ck_assert_int_eq(memcmp(back, c, (size_t)total), 0);
    stage_close(&s);
    ck_assert_int_eq(stage_member_open(dfd, 8, 0), -ENOENT);
    {
        char **nm = NULL;
        uint32_t n = 9;
        ck_assert_int_eq(stage_names(dfd, 8, total, &nm, &n), -ENOENT);
        ck_assert_ptr_null(nm);
        ck_assert_uint_eq(n, 0);
    }
    stage_remove(dfd, 8);
    ck_assert(dir_empty(d));
    close(dfd);
    tu_rmrf(d);
    free(d);
    free(c);
    free(back);
}
END_TEST

static Suite *stage_suite(void)
{
    Suite *s = suite_create("stage");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_set_by_member);
    tcase_add_test(tc, test_refusals_and_old_layout);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(stage_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
