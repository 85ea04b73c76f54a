/*
 * check_source.c - unit tests of source.c: the lexical path check, the
 * kernel-enforced walk beneath a root, stripe-aligned chunk sizes, chunk
 * reads with identity checks, and the attribute cache.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "source.h"
#include "testutil.h"

static char *dir;
static source *src;
static gr_config cfg;

static void setup(void)
{
    char p[1024];

    dir = tu_mkdtemp();
    config_defaults(&cfg);
    snprintf(cfg.roots[0], PATH_MAX, "%s/root", dir);
    snprintf(cfg.roots[1], PATH_MAX, "%s/other", dir);
    cfg.nroots = 2;
    cfg.chunk_size = 65536;
    cfg.attr_ttl = 1000;
    mkdir(cfg.roots[0], 0755);
    mkdir(cfg.roots[1], 0755);
    snprintf(p, sizeof(p), "%s/secret", dir);
    tu_write_pattern(p, 9, 100);
    ck_assert_int_eq(source_new(&cfg, &src), 0);
}

static void teardown(void)
{
    source_free(&src);
    ck_assert_ptr_null(src);
    tu_rmrf(dir);
    free(dir);
}

static int resolve(const char *path, char **norm, int *root)
{
    char err[256];
    int rc = source_resolve(src, path, strlen(path), norm, root, err, sizeof(err));

    if (rc < 0)
        ck_assert_msg(err[0] != '\0', "no reason given for %s", path);
    return rc;
}

START_TEST(test_resolve_lexical)
{
    char p[PATH_MAX + 64], *norm = NULL;
    int root = -1;

    snprintf(p, sizeof(p), "%s//a///b/", cfg.roots[0]);
    ck_assert_int_eq(resolve(p, &norm, &root), 0);
    ck_assert_int_eq(root, 0);
    snprintf(p, sizeof(p), "%s/a/b", cfg.roots[0]);
    ck_assert_str_eq(norm, p);
    free(norm);
    snprintf(p, sizeof(p), "%s/x", cfg.roots[1]);
    ck_assert_int_eq(resolve(p, &norm, &root), 0);
    ck_assert_int_eq(root, 1);
    free(norm);

    ck_assert_int_eq(resolve("/etc/passwd", &norm, &root), -EACCES);
    ck_assert_int_eq(resolve(cfg.roots[0], &norm, &root), 0);        /* the root itself */
    ck_assert_str_eq(norm, cfg.roots[0]);
    free(norm);
    snprintf(p, sizeof(p), "%s/../secret", cfg.roots[0]);
    ck_assert_int_eq(resolve(p, &norm, &root), -EACCES);
    snprintf(p, sizeof(p), "%s/./a", cfg.roots[0]);
    ck_assert_int_eq(resolve(p, &norm, &root), -EACCES);
    snprintf(p, sizeof(p), "%sX/a", cfg.roots[0]);
    ck_assert_int_eq(resolve(p, &norm, &root), -EACCES);
    ck_assert_int_eq(resolve("relative", &norm, &root), -EINVAL);
    ck_assert_int_eq(source_resolve(src, "/a\0b", 4, &norm, &root, p, 100), -EINVAL);
    ck_assert_int_eq(source_resolve(src, "", 0, &norm, &root, p, 100), -EINVAL);
    {
        char *longp = malloc(PATH_MAX + 10);
        memset(longp, 'a', PATH_MAX + 9);
        longp[0] = '/';
        longp[PATH_MAX + 9] = '\0';
        ck_assert_int_eq(resolve(longp, &norm, &root), -ENAMETOOLONG);
        free(longp);
    }
}
END_TEST

START_TEST(test_stat_beneath)
{
    char p[PATH_MAX + 64], t[PATH_MAX + 64], err[256];
    struct stat st;

    snprintf(p, sizeof(p), "%s/f", cfg.roots[0]);
    tu_write_pattern(p, 1, 1000);
    ck_assert_int_eq(source_stat(src, p, 0, &st, err, sizeof(err)), 0);
    ck_assert_int_eq(st.st_size, 1000);
    /* A link that escapes, swapped in under a name that passed the lexical
     * check: the kernel refuses it. */
    snprintf(p, sizeof(p), "%s/link", cfg.roots[0]);
    snprintf(t, sizeof(t), "%s/secret", dir);
    ck_assert_int_eq(symlink(t, p), 0);
    ck_assert_int_eq(source_stat(src, p, 0, &st, err, sizeof(err)), -EACCES);
    ck_assert_ptr_nonnull(strstr(err, "outside the source roots"));
    snprintf(p, sizeof(p), "%s/rel", cfg.roots[0]);
    ck_assert_int_eq(symlink("../secret", p), 0);
    ck_assert_int_eq(source_stat(src, p, 0, &st, err, sizeof(err)), -EACCES);
    /* A directory link into the other root is still outside this one. */
    snprintf(p, sizeof(p), "%s/dirlink", cfg.roots[0]);
    ck_assert_int_eq(symlink(cfg.roots[1], p), 0);
    snprintf(t, sizeof(t), "%s/g", cfg.roots[1]);
    tu_write_pattern(t, 2, 10);
    snprintf(p, sizeof(p), "%s/dirlink/g", cfg.roots[0]);
    ck_assert_int_eq(source_stat(src, p, 0, &st, err, sizeof(err)), -EACCES);
    snprintf(p, sizeof(p), "%s/none", cfg.roots[0]);
    ck_assert_int_eq(source_stat(src, p, 0, &st, err, sizeof(err)), -ENOENT);
    snprintf(p, sizeof(p), "%s/sub", cfg.roots[1]);
    mkdir(p, 0755);
    ck_assert_int_eq(source_stat(src, p, 1, &st, err, sizeof(err)), -EISDIR);
}
END_TEST

START_TEST(test_chunk_size)
{
    ck_assert_uint_eq(source_chunk_size(4 << 20, 4096), 4 << 20);         /* local disk */
    ck_assert_uint_eq(source_chunk_size(4 << 20, 65536), 4 << 20);        /* MooseFS */
    ck_assert_uint_eq(source_chunk_size(4 << 20, 1 << 20), 4 << 20);      /* 1M stripes */
    ck_assert_uint_eq(source_chunk_size(4 << 20, 3 << 20), 3 << 20);      /* 3M stripes */
    ck_assert_uint_eq(source_chunk_size(4 << 20, 1536 << 10), 3 << 20);   /* 1.5M stripes */
    ck_assert_uint_eq(source_chunk_size(4 << 20, 8 << 20), 4 << 20);      /* too large */
    ck_assert_uint_eq(source_chunk_size(4 << 20, 0), 4 << 20);
}
END_TEST

START_TEST(test_read_chunks_and_identity)
{
    char p[PATH_MAX + 64], err[256], *norm;
    uint8_t *buf = malloc(65536);
    struct stat st;
    srcfile *f;
    size_t len;
    int root;

    snprintf(p, sizeof(p), "%s/data", cfg.roots[0]);
    tu_write_pattern(p, 5, 65536 * 2 + 10);
    ck_assert_int_eq(resolve(p, &norm, &root), 0);
    ck_assert_int_eq(source_stat(src, norm, root, &st, err, sizeof(err)), 0);
    f = source_install(src, norm, root, &st, gr__now_s());
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(f->chunk_size, 65536);
    ck_assert_uint_eq(srcfile_chunk_len(f, 0), 65536);
    ck_assert_uint_eq(srcfile_chunk_len(f, 2), 10);
    ck_assert_uint_eq(srcfile_chunk_len(f, 3), 0);
    ck_assert_int_eq(source_read_chunk(src, f, 1, buf, &len, err, sizeof(err)), 0);
    ck_assert_uint_eq(len, 65536);
    ck_assert(tu_check_pattern(buf, 5, 65536, len));
    ck_assert_int_eq(source_read_chunk(src, f, 2, buf, &len, err, sizeof(err)), 0);
    ck_assert_uint_eq(len, 10);
    ck_assert(tu_check_pattern(buf, 5, 131072, len));
    /* Rewritten (new size): the old identity is refused, never mixed. */
    tu_write_pattern(p, 6, 65536 * 2 + 11);
    ck_assert_int_eq(source_read_chunk(src, f, 0, buf, &len, err, sizeof(err)), -ESTALE);
    /* Vanished. */
    unlink(p);
    ck_assert_int_eq(source_read_chunk(src, f, 0, buf, &len, err, sizeof(err)), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "No such file"));
    srcfile_unref(&f);
    free(buf);
}
END_TEST

START_TEST(test_attr_cache)
{
    char p[PATH_MAX + 64], err[256], *norm;
    struct stat st;
    srcfile *f, *g, *h;
    int root;
    double t = 100.0;

    snprintf(p, sizeof(p), "%s/a", cfg.roots[0]);
    tu_write_pattern(p, 1, 10);
    ck_assert_ptr_null(source_lookup(src, p, t));
    ck_assert_int_eq(resolve(p, &norm, &root), 0);
    ck_assert_int_eq(source_stat(src, norm, root, &st, err, sizeof(err)), 0);
    f = source_install(src, norm, root, &st, t);
    g = source_lookup(src, p, t + 999);
    ck_assert_ptr_eq(f, g);
    ck_assert_uint_eq(f->refs, 3);          /* cache + f + g */
    ck_assert_ptr_null(source_lookup(src, p, t + 1001));    /* past attr_ttl */
    /* Installing the same file unchanged renews the entry (and keeps the
     * fd it may hold)... */
    h = source_install(src, strdup(p), root, &st, t + 2000);
    ck_assert_ptr_eq(h, f);
    srcfile_unref(&h);
    h = source_lookup(src, p, t + 2999);
    ck_assert_ptr_eq(h, f);
    srcfile_unref(&h);
    /* ...a changed one replaces it; holders of the old one keep it. */
    tu_write_pattern(p, 2, 20);
    ck_assert_int_eq(source_stat(src, p, root, &st, err, sizeof(err)), 0);
    h = source_install(src, strdup(p), root, &st, t + 3000);
    ck_assert_ptr_ne(h, f);
    ck_assert_uint_eq(f->refs, 2);
    ck_assert_int_eq(f->cached, 0);
    srcfile_unref(&f);
    srcfile_unref(&g);
    ck_assert_ptr_null(g);
    srcfile_unref(&h);
}
END_TEST

static Suite *source_suite(void)
{
    Suite *s = suite_create("source");
    TCase *tc = tcase_create("source");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_resolve_lexical);
    tcase_add_test(tc, test_stat_beneath);
    tcase_add_test(tc, test_chunk_size);
    tcase_add_test(tc, test_read_chunks_and_identity);
    tcase_add_test(tc, test_attr_cache);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(source_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
