/*
 * check_manifest.c - the dataset manifest file (daemon/meta/manifest.c):
 * what is built is what is read back (names, attributes, ACLs, the chain to
 * "/", children sorted for lookup), lookups inside and outside the dataset,
 * and a reader that refuses every damaged file: torn, truncated, flipped
 * bits, and a structure that would loop or step outside the map even with
 * a valid checksum.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "manifest.h"
#include "testutil.h"

static char *dir;

static void setup(void)
{
    dir = tu_mkdtemp();
}

static void teardown(void)
{
    tu_rmrf(dir);
    free(dir);
}

static struct stat mkst(mode_t mode, uint64_t size, uint64_t ino)
{
    struct stat st;

    memset(&st, 0, sizeof(st));
    st.st_mode = mode;
    st.st_size = (off_t)size;
    st.st_ino = (ino_t)ino;
    st.st_uid = 1000 + (uid_t)(ino % 3);
    st.st_gid = 2000;
    st.st_nlink = 1;
    st.st_mtim.tv_sec = 1700000000 + (time_t)ino;
    st.st_mtim.tv_nsec = (long)ino * 7;
    st.st_ctim.tv_sec = 1800000000 + (time_t)ino;       /* part of a chunk's identity */
    st.st_ctim.tv_nsec = (long)ino * 11;
    st.st_blksize = 65536;
    return st;
}

/* /data/set with dirs a (files f0..f{n-1}) and b (one file with an ACL),
 * written to dir/m.man. */
static void build(const char *path, int n)
{
    mf_stamp stamp = { 111, 222, 333 };
    struct stat d = mkst(S_IFDIR | 0755, 0, 1);
    /* user::rw- user:1234:r-- group::r-- mask::r-- other::--- */
    static const uint8_t acl[] = {
        2, 0, 0, 0,
        0x01, 0, 6, 0, 0xff, 0xff, 0xff, 0xff,
        0x02, 0, 4, 0, 0xd2, 0x04, 0, 0,
        0x04, 0, 4, 0, 0xff, 0xff, 0xff, 0xff,
        0x10, 0, 4, 0, 0xff, 0xff, 0xff, 0xff,
        0x20, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
    };
    mf_builder *b;
    int64_t top, a, bb;
    char name[32];
    char err[256];

    ck_assert_int_eq(mf_build_new("/data/set", 42, &stamp, &b), 0);
    ck_assert_int_eq(mf_build_ancestor(b, &d, NULL, 0), 0);     /* "/" */
    ck_assert_int_eq(mf_build_ancestor(b, &d, NULL, 0), 0);     /* /data */
    ck_assert_int_lt(mf_build_top(b), 0);                       /* the chain is not done */
    ck_assert_int_eq(mf_build_ancestor(b, &d, NULL, 0), 0);     /* /data/set */
    top = mf_build_top(b);
    ck_assert_int_ge(top, 0);
    /* Added in reverse order: the writer sorts. */
    bb = mf_build_add(b, top, "b", &d, NULL, 0);
    a = mf_build_add(b, top, "a", &d, NULL, 0);
    ck_assert_int_ge(a, 0);
    for (int i = n - 1; i >= 0; i--) {
        struct stat f = mkst(S_IFREG | 0644, 1000 + (uint64_t)i, 100 + (uint64_t)i);
        snprintf(name, sizeof(name), "f%05d", i);
        ck_assert_int_ge(mf_build_add(b, a, name, &f, NULL, 0), 0);
    }
    {
        struct stat f = mkst(S_IFREG | 0640, 5, 99);
        ck_assert_int_ge(mf_build_add(b, bb, "with-acl", &f, acl, sizeof(acl)), 0);
    }
    {
        struct stat l = mkst(S_IFLNK | 0777, 5, 98);
        int64_t u = mf_build_add(b, top, "unlisted", &d, NULL, 0);
        ck_assert_int_ge(mf_build_add(b, bb, "link", &l, NULL, 0), 0);   /* named, never served */
        ck_assert_int_eq(mf_build_unlisted(b, u), 0);
        ck_assert_int_eq(mf_build_unlisted(b, (int64_t)mf_build_count(b) - 3), -EINVAL);  /* a file */
        ck_assert_int_eq(mf_build_unlisted(b, (int64_t)mf_build_count(b) - 1), -EINVAL);  /* a link */
    }
    ck_assert_int_eq(mf_build_write(b, path, err, sizeof(err)), 0);
    mf_build_free(&b);
}

static char *path_in(const char *name)
{
    static char p[1024];

    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return p;
}

START_TEST(test_round_trip)
{
    char path[1024], err[256];
    manifest *m;
    mf_entry e;
    uint32_t chain[8], i, prev = MF_NONE;
    size_t depth;
    access_obj o;

    snprintf(path, sizeof(path), "%s", path_in("m.man"));
    build(path, 300);
    ck_assert_int_eq(mf_open(path, &m, err, sizeof(err)), 0);
    ck_assert_uint_eq(mf_count(m), 3 + 3 + 300 + 1 + 1);   /* the link too */
    ck_assert_uint_eq(mf_files(m), 301);
    ck_assert_str_eq(mf_top_path(m), "/data/set");
    ck_assert_int_eq(mf_stamp_of(m)->ctime_ns, 222);
    /* Every file of a, by path, with its attributes; in name order. */
    for (int k = 0; k < 300; k++) {
        char p[64];
        snprintf(p, sizeof(p), "/data/set/a/f%05d", k);
        i = mf_lookup(m, p, chain, 8, &depth, NULL);
        ck_assert_uint_ne(i, MF_NONE);
        ck_assert_uint_eq(depth, 5);
        ck_assert_uint_eq(chain[0], 0);
        ck_assert_uint_eq(chain[4], i);
        mf_get(m, i, &e);
        ck_assert(!e.is_dir);
        ck_assert_uint_eq(e.st.st_size, 1000 + k);
        ck_assert_uint_eq(e.st.st_ino, 100 + k);
        ck_assert_int_eq(e.st.st_mtim.tv_nsec, (100 + k) * 7);
        ck_assert_int_eq(e.st.st_ctim.tv_sec, 1800000000 + 100 + k);
        ck_assert_int_eq(e.st.st_ctim.tv_nsec, (100 + k) * 11);
        ck_assert_uint_eq(e.st.st_dev, 42);
        ck_assert_uint_eq(e.st.st_blksize, 65536);
        if (prev != MF_NONE)
            ck_assert_uint_eq(i, prev + 1);      /* siblings contiguous, sorted */
        prev = i;
    }
    mf_get(m, mf_lookup(m, "/data/set/a", NULL, 0, NULL, NULL), &e);
    ck_assert(e.is_dir);
    ck_assert_uint_eq(e.nchildren, 300);
    /* Normalisation is the caller's; slashes are forgiven. */
    ck_assert_uint_eq(mf_lookup(m, "/data/set//a/f00007", NULL, 0, NULL, NULL),
                      mf_lookup(m, "/data/set/a/f00007", NULL, 0, NULL, NULL));
    /* Outside the dataset, or not in it. */
    ck_assert_uint_eq(mf_lookup(m, "/data/other", NULL, 0, NULL, NULL), MF_NONE);
    ck_assert_uint_eq(mf_lookup(m, "/data/settle/a", NULL, 0, NULL, NULL), MF_NONE);
    ck_assert_uint_eq(mf_lookup(m, "/data", NULL, 0, NULL, NULL), MF_NONE);
    ck_assert_uint_eq(mf_lookup(m, "/data/set/a/f00300", NULL, 0, NULL, NULL), MF_NONE);
    /* A link is there (so nothing says it is not), as a link: never a file. */
    {
        int absent = -1;
        mf_get(m, mf_lookup(m, "/data/set/b/link", NULL, 0, NULL, NULL), &e);
        ck_assert(e.is_other && !e.is_dir && S_ISLNK(e.st.st_mode));
        ck_assert_uint_eq(mf_lookup(m, "/data/set/b/link/below", NULL, 0, NULL, &absent), MF_NONE);
        ck_assert_int_eq(absent, 0);            /* through a link: the manifest cannot say */
    }
    ck_assert_uint_eq(mf_lookup(m, "/data/set/a/f00001/x", NULL, 0, NULL, NULL), MF_NONE);
    ck_assert_uint_eq(mf_lookup(m, "/data/set", NULL, 0, NULL, NULL), mf_top(m));
    /* What the manifest can say is absent, and what it cannot. */
    {
        int absent = -1;
        ck_assert_uint_eq(mf_lookup(m, "/data/set/a/nope", NULL, 0, NULL, &absent), MF_NONE);
        ck_assert_int_eq(absent, 1);
        ck_assert_uint_eq(mf_lookup(m, "/data/set/nope/deeper", NULL, 0, NULL, &absent), MF_NONE);
        ck_assert_int_eq(absent, 1);
        ck_assert_uint_eq(mf_lookup(m, "/data/set/unlisted/x", NULL, 0, NULL, &absent), MF_NONE);
        ck_assert_int_eq(absent, 0);
        ck_assert_uint_eq(mf_lookup(m, "/data/set/a/f00001/x", NULL, 0, NULL, &absent), MF_NONE);
        ck_assert_int_eq(absent, 0);
        ck_assert_uint_eq(mf_lookup(m, "/elsewhere", NULL, 0, NULL, &absent), MF_NONE);
        ck_assert_int_eq(absent, 0);
        mf_get(m, mf_lookup(m, "/data/set/unlisted", NULL, 0, NULL, NULL), &e);
        ck_assert(e.unlisted && e.is_dir);
    }
    /* The ACL comes back and decodes. */
    mf_get(m, mf_lookup(m, "/data/set/b/with-acl", NULL, 0, NULL, NULL), &e);
    ck_assert_uint_eq(e.acl_len, 44);
    ck_assert_int_eq(mf_access_obj(&e, &o), 0);
    ck_assert_int_eq(o.nacl, 5);
    ck_assert_uint_eq(o.acl[1].tag, ACCESS_ACL_USER);
    ck_assert_uint_eq(o.acl[1].id, 1234);
    mf_close(&m);
    ck_assert_ptr_null(m);
}
END_TEST

/* Rewrite the checksum of the file at path after a change, so that only
 * the structure checks stand between the reader and the damage. */
static void reseal(const char *path)
{
    FILE *f = fopen(path, "r+b");
    long len;
    uint8_t *buf;
    uint64_t h;

    fseek(f, 0, SEEK_END);
    len = ftell(f);
    buf = malloc((size_t)len);
    fseek(f, 0, SEEK_SET);
    ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    h = XXH3_64bits(buf + 128, (size_t)len - 128);
    for (int i = 0; i < 8; i++)
        buf[120 + i] = (uint8_t)(h >> (8 * i));
    fseek(f, 0, SEEK_SET);
    fwrite(buf, 1, (size_t)len, f);
    fclose(f);
    free(buf);
}

static void poke(const char *path, long off, uint8_t v)
{
    FILE *f = fopen(path, "r+b");

    fseek(f, off, SEEK_SET);
    fputc(v, f);
    fclose(f);
}

START_TEST(test_damaged_files_refused)
{
    char path[1024], err[256];
    manifest *m;
    struct stat st;

    snprintf(path, sizeof(path), "%s", path_in("d.man"));
    /* Flipped bits anywhere: the checksum. */
    build(path, 20);
    poke(path, 128 + 88 * 5 + 41, 0x77);
    ck_assert_int_eq(mf_open(path, &m, err, sizeof(err)), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(err, "checksum"));
    /* Torn: cut short. */
    build(path, 20);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size - 3), 0);
    ck_assert_int_eq(mf_open(path, &m, err, sizeof(err)), -EBADMSG);
    ck_assert_int_eq(truncate(path, 50), 0);
    ck_assert_int_eq(mf_open(path, &m, err, sizeof(err)), -EBADMSG);
    /* A valid checksum over a broken structure: a child pointing to itself
     * as parent, children out of bounds, an unsorted directory, a name out
     * of the table. */
    static const struct { long off; uint8_t v; } breaks[] = {
        { 128 + 88 * 6 + 0, 6 },            /* an entry its own parent */
        { 128 + 88 * 3 + 8, 0xff },         /* children past the end */
        { 128 + 88 * 7 + 12, 0x01 },        /* a name out of order */
        { 128 + 88 * 7 + 15, 0x7f },        /* a name past the table */
        { 128 + 88 * 7 + 18, 9 },           /* an unknown kind */
        { 128 + 88 * 7 + 68, 5 },           /* an ACL that does not exist */
        { 8, 0xff },                        /* entries: more than the file holds */
        { 90, 1 },                          /* reserved bytes */
    };
    for (size_t k = 0; k < sizeof(breaks) / sizeof(breaks[0]); k++) {
        build(path, 20);
        poke(path, breaks[k].off, breaks[k].v);
        reseal(path);
        ck_assert_msg(mf_open(path, &m, err, sizeof(err)) == -EBADMSG, "break %zu accepted", k);
    }
    ck_assert_int_eq(mf_open(path_in("nothing"), &m, err, sizeof(err)), -ENOENT);
}
END_TEST

/* The write is atomic: a crash before the rename leaves the old file (and a
 * .tmp that the next write replaces); after it, the new one. */
START_TEST(test_atomic_write)
{
    char path[1024], tmp[1100], err[256];
    manifest *m;
    FILE *f;

    snprintf(path, sizeof(path), "%s", path_in("a.man"));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    build(path, 10);
    f = fopen(tmp, "w");
    fputs("half a manifest", f);
    fclose(f);
    ck_assert_int_eq(mf_open(path, &m, err, sizeof(err)), 0);
    ck_assert_uint_eq(mf_files(m), 11);
    mf_close(&m);
    build(path, 30);
    ck_assert_int_eq(access(tmp, F_OK), -1);
    ck_assert_int_eq(mf_open(path, &m, err, sizeof(err)), 0);
    ck_assert_uint_eq(mf_files(m), 31);
    mf_close(&m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("manifest");
    TCase *tc = tcase_create("file");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_damaged_files_refused);
    tcase_add_test(tc, test_atomic_write);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
