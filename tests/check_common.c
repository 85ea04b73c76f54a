/*
 * check_common.c - the helpers daemon and client share (common/): the hash
 * table against a reference (growth under way included), the INI reader,
 * sizes, the Unix listener's refusal to touch what is not its socket, and
 * fd passing that never leaks what a peer attaches.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "fdpass.h"
#include "htab.h"
#include "ini.h"
#include "list.h"
#include "path.h"
#include "size.h"
#include "testutil.h"
#include "usock.h"

/* ---- htab ---- */

typedef struct item {
    gr__hnode hn;
    uint32_t key;
} item;

static uint64_t ihash(uint32_t k)
{
    uint64_t x = k * 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

static int ieq(const gr__hnode *n, const void *key)
{
    return gr__container_of(n, item, hn)->key == *(const uint32_t *)key;
}

static item *ifind(gr__htab *h, uint32_t k)
{
    gr__hnode *n = gr__htab_find(h, ihash(k), ieq, &k);
    return n ? gr__container_of(n, item, hn) : NULL;
}

static int count_cb(void *arg, gr__hnode *n)
{
    (void)n;
    (*(size_t *)arg)++;
    return 0;
}

START_TEST(test_htab_reference)
{
    enum { N = 20000 };
    item *items = calloc(N, sizeof(*items));
    char *in = calloc(N, 1);
    gr__htab h;
    unsigned seed = 3;
    size_t count = 0, walked;
    int saw_growing = 0;

    ck_assert_int_eq(gr__htab_init(&h, 0), 0);
    for (uint32_t i = 0; i < N; i++)
        items[i].key = i;
    for (int step = 0; step < 200000; step++) {
        uint32_t k = (uint32_t)rand_r(&seed) % N;
        if (rand_r(&seed) % 4) {
            if (!in[k]) {
                gr__htab_insert(&h, &items[k].hn, ihash(k));
                in[k] = 1;
                count++;
            }
        } else if (in[k]) {
            ck_assert_int_eq(gr__htab_remove(&h, &items[k].hn), 0);
            in[k] = 0;
            count--;
        } else {
            ck_assert_int_eq(gr__htab_remove(&h, &items[k].hn), -ENOENT);
        }
        saw_growing |= gr__htab_growing(&h);
        ck_assert_uint_eq(gr__htab_count(&h), count);
        if (step % 10000 == 0 || (gr__htab_growing(&h) && step % 97 == 0)) {
            for (uint32_t j = 0; j < N; j++)
                ck_assert_ptr_eq(ifind(&h, j), in[j] ? &items[j] : NULL);
            walked = 0;
            gr__htab_walk(&h, count_cb, &walked);
            ck_assert_uint_eq(walked, count);
        }
    }
    /* Growth happened in steps, with lookups answered in between. */
    ck_assert(saw_growing);
    gr__htab_fini(&h);
    free(items);
    free(in);
}
END_TEST

/* The loop form visits every node once, and may remove the current one. */
START_TEST(test_htab_iter)
{
    enum { N = 3000 };
    item *items = calloc(N, sizeof(*items));
    char *seen = calloc(N, 1);
    gr__htab h;
    gr__htab_iter it;
    size_t n = 0;

    ck_assert_int_eq(gr__htab_init(&h, 16), 0);
    ck_assert_ptr_null(gr__htab_first(&h, &it));
    for (uint32_t i = 0; i < N; i++) {
        items[i].key = i;
        gr__htab_insert(&h, &items[i].hn, ihash(i));
    }
    for (gr__hnode *x = gr__htab_first(&h, &it); x; x = gr__htab_next(&it)) {
        item *e = gr__container_of(x, item, hn);
        ck_assert(!seen[e->key]);
        seen[e->key] = 1;
        n++;
        if (e->key % 3 == 0)
            gr__htab_remove(&h, x);
    }
    ck_assert_uint_eq(n, N);
    ck_assert_uint_eq(gr__htab_count(&h), N - (N + 2) / 3);
    gr__htab_fini(&h);
    free(items);
    free(seen);
}
END_TEST

static int remove_odd(void *arg, gr__hnode *n)
{
    item *it = gr__container_of(n, item, hn);

    if (it->key & 1)
        gr__htab_remove(arg, n);
    return 0;
}

/* A walk may remove the node it is at, also while the table is growing. */
START_TEST(test_htab_walk_remove)
{
    enum { N = 5000 };
    item *items = calloc(N, sizeof(*items));
    gr__htab h;
    size_t n = 0;

    ck_assert_int_eq(gr__htab_init(&h, 16), 0);
    for (uint32_t i = 0; i < N; i++) {
        items[i].key = i;
        gr__htab_insert(&h, &items[i].hn, ihash(i));
        if (i == N - 1)
            ck_assert(gr__htab_growing(&h) || gr__htab_count(&h) == N);
    }
    gr__htab_walk(&h, remove_odd, &h);
    ck_assert_uint_eq(gr__htab_count(&h), N / 2);
    gr__htab_walk(&h, count_cb, &n);
    ck_assert_uint_eq(n, N / 2);
    for (uint32_t i = 0; i < N; i++)
        ck_assert_ptr_eq(ifind(&h, i), i & 1 ? NULL : &items[i]);
    gr__htab_fini(&h);
    free(items);
}
END_TEST

/* No single insert moves more than a few buckets: a million inserts never
 * take one step as long as rehashing everything at once would. */
START_TEST(test_htab_incremental)
{
    enum { N = 1 << 20 };
    item *items = calloc(N, sizeof(*items));
    gr__htab h;
    uint64_t worst = 0;

    ck_assert_int_eq(gr__htab_init(&h, 16), 0);
    for (uint32_t i = 0; i < N; i++) {
        uint64_t t0 = gr__now_ns(), dt;
        items[i].key = i;
        gr__htab_insert(&h, &items[i].hn, ihash(i));
        dt = gr__now_ns() - t0;
        if (dt > worst)
            worst = dt;
    }
    /* Only reported: timings are not asserted (the machine is shared). */
    fprintf(stderr, "check_common: worst of %d inserts %.1f us\n", N, (double)worst / 1e3);
    ck_assert_uint_eq(gr__htab_count(&h), N);
    for (uint32_t i = 0; i < N; i += 4099)
        ck_assert_ptr_eq(ifind(&h, i), &items[i]);
    gr__htab_fini(&h);
    free(items);
}
END_TEST

/* ---- list ---- */

typedef struct litem {
    gr__list node;
    int v;
} litem;

START_TEST(test_list)
{
    gr__list head, *p, *t;
    litem a = { .v = 1 }, b = { .v = 2 }, c = { .v = 3 };
    int sum = 0;

    gr__list_init(&head);
    gr__list_init(&a.node);
    ck_assert(!gr__list_linked(&a.node));
    gr__list_push_back(&head, &a.node);
    gr__list_push_back(&head, &b.node);
    gr__list_push_front(&head, &c.node);
    ck_assert_int_eq(gr__list_entry(gr__list_first(&head), litem, node)->v, 3);
    ck_assert_int_eq(gr__list_entry(gr__list_last(&head), litem, node)->v, 2);
    gr__list_foreach_safe(p, t, &head) {
        litem *it = gr__list_entry(p, litem, node);
        sum += it->v;
        if (it->v == 1)
            gr__list_remove(p);
    }
    ck_assert_int_eq(sum, 6);
    ck_assert(!gr__list_linked(&a.node));
    gr__list_remove(&a.node);          /* twice: harmless */
    ck_assert_ptr_eq(gr__list_pop_front(&head), &c.node);
    ck_assert_ptr_eq(gr__list_pop_front(&head), &b.node);
    ck_assert_ptr_null(gr__list_pop_front(&head));
    ck_assert(gr__list_empty(&head));
}
END_TEST

/* ---- ini ---- */

typedef struct kv {
    char log[2048];
} kv;

static int kv_cb(void *arg, const char *section, const char *key, const char *value, char *msg,
                 size_t msglen)
{
    kv *k = arg;
    size_t n = strlen(k->log);

    (void)msg;
    (void)msglen;
    snprintf(k->log + n, sizeof(k->log) - n, key ? "%s.%s=%s;" : "[%s];", section, key, value);
    return 0;
}

START_TEST(test_ini)
{
    kv k = { "" };
    char err[256];
    const char *t = "\xef\xbb\xbf; c\n[ daemon ]\r\nsocket = /a b  # note\n"
                    "q = \"x # \\\"y\\\"\" ; c\n\n[source]\nroots=/r\n";

    ck_assert_int_eq(gr__ini_parse(t, strlen(t), "f", kv_cb, &k, err, sizeof(err)), 0);
    ck_assert_str_eq(k.log, "[daemon];daemon.socket=/a b;daemon.q=x # \"y\";[source];source.roots=/r;");

    /* Errors name the file and line. */
    ck_assert_int_eq(gr__ini_parse("[a]\nk=1\n[b]\n[a]\nk=2\n", 20, "f", kv_cb, &k, err,
                                   sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "f:5: \"k\" is set twice in [a]");
    ck_assert_int_eq(gr__ini_parse("k=1\n", 4, "f", kv_cb, &k, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "f:1: key outside any section");
    ck_assert_int_eq(gr__ini_parse("[a]\nk=\"x\n", 9, "f", kv_cb, &k, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "f:2: unterminated quoted value");
    ck_assert_int_eq(gr__ini_parse("[a]\nk=1\0\n", 8, "f", kv_cb, &k, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "f:2: NUL byte in line");
    ck_assert_int_eq(gr__ini_parse("[a\n", 3, "f", kv_cb, &k, err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(gr__ini_parse("[a]\njunk\n", 9, "f", kv_cb, &k, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "f:2: expected \"key = value\"");
}
END_TEST

START_TEST(test_ini_get)
{
    char *d = tu_mkdtemp(), path[512], out[64], err[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/g.conf", d);
    f = fopen(path, "w");
    fputs("[ daemon ]\nsocket = \"/run/x.sock\"\n[source]\nroots = /a\n", f);
    fclose(f);
    ck_assert_int_eq(gr__ini_get(path, "daemon", "socket", out, sizeof(out), err, sizeof(err)), 0);
    ck_assert_str_eq(out, "/run/x.sock");
    ck_assert_int_eq(gr__ini_get(path, "daemon", "nope", out, sizeof(out), err, sizeof(err)),
                     -ENOENT);
    ck_assert_int_eq(gr__ini_get(path, "source", "roots", out, 2, err, sizeof(err)), -ENAMETOOLONG);
    f = fopen(path, "a");
    fputs("[daemon]\nsocket = /run/y.sock\n", f);
    fclose(f);
    ck_assert_int_eq(gr__ini_get(path, "daemon", "socket", out, sizeof(out), err, sizeof(err)),
                     -EINVAL);
    ck_assert_msg(strstr(err, "set twice") != NULL, "%s", err);
    ck_assert_int_eq(gr__ini_get("/nonexistent/g.conf", "daemon", "socket", out, sizeof(out), err,
                                 sizeof(err)), -ENOENT);
    tu_rmrf(d);
    free(d);
}
END_TEST

/* ---- size ---- */

/* gr__path_abs against what os.path.abspath gives, from a known cwd. */
START_TEST(test_path_abs)
{
    static const struct { const char *in, *want; } cases[] = {
        { "x", "/tmp/x" }, { "./x/", "/tmp/x" }, { "a//b/./c", "/tmp/a/b/c" },
        { "../etc/passwd", "/etc/passwd" }, { "../../../..", "/" }, { ".", "/tmp" },
        { "a/../../b", "/b" }, { "..x/.y", "/tmp/..x/.y" },
        { "/abs/../kept", "/abs/../kept" },     /* absolute: the daemon judges it */
    };
    char out[64], cwd[4096], small[7];

    ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
    ck_assert_int_eq(chdir("/tmp"), 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_int_eq(gr__path_abs(cases[i].in, out, sizeof(out)), 0);
        ck_assert_str_eq(out, cases[i].want);
    }
    ck_assert_int_eq(gr__path_abs("", out, sizeof(out)), -EINVAL);
    ck_assert_int_eq(gr__path_abs(NULL, out, sizeof(out)), -EINVAL);
    ck_assert_int_eq(gr__path_abs("abc", small, sizeof(small)), -ENAMETOOLONG);   /* "/tmp/abc" */
    ck_assert_int_eq(gr__path_abs("/abcdef", small, sizeof(small)), -ENAMETOOLONG);
    ck_assert_int_eq(gr__path_abs("a", small, sizeof(small)), 0);
    ck_assert_str_eq(small, "/tmp/a");
    ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

START_TEST(test_size)
{
    static const struct { const char *s; uint64_t v; } good[] = {
        { "0", 0 }, { "4096", 4096 }, { "4k", 4096 }, { "4K", 4096 }, { "4KB", 4096 },
        { "4KiB", 4096 }, { "4MiB", 4u << 20 }, { "1g", 1u << 30 }, { "2T", 2ull << 40 },
        { "7b", 7 },
    };
    static const char *const bad[] = { "", "k", "-1", "1.5M", "4 M", "4MB ", "4Mi", "4X", "0x10" };
    uint64_t v;
    char buf[32];

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ck_assert_msg(gr__size_parse(good[i].s, &v) == 0, "%s", good[i].s);
        ck_assert_uint_eq(v, good[i].v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(gr__size_parse(bad[i], &v) == -EINVAL, "\"%s\" accepted", bad[i]);
    ck_assert_int_eq(gr__size_parse("18446744073709551616", &v), -ERANGE);
    ck_assert_int_eq(gr__size_parse("16777216T", &v), -ERANGE);
    gr__size_format(4u << 20, buf, sizeof(buf));
    ck_assert_str_eq(buf, "4M");
    gr__size_format(1000, buf, sizeof(buf));
    ck_assert_str_eq(buf, "1000");
}
END_TEST

/* ---- unix listener ---- */

START_TEST(test_listen_refuses_non_socket)
{
    char *d = tu_mkdtemp(), path[256], err[256], buf[8] = "";
    gr__listener l;
    int fd;

    /* A typo such as socket = /etc/granary/granary.conf must not delete it. */
    snprintf(path, sizeof(path), "%s/granary.conf", d);
    fd = open(path, O_WRONLY | O_CREAT, 0644);
    ck_assert_int_eq(write(fd, "keep", 4), 4);
    close(fd);
    ck_assert_int_eq(gr__unix_listen(&l, path, SOCK_SEQPACKET, 0660, 16, err, sizeof(err)), -EEXIST);
    ck_assert_msg(strstr(err, "not a socket") != NULL, "%s", err);
    fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(read(fd, buf, sizeof(buf)), 4);
    close(fd);
    /* Nor a symlink, nor a directory. */
    snprintf(path, sizeof(path), "%s/link", d);
    ck_assert_int_eq(symlink("/etc/passwd", path), 0);
    ck_assert_int_eq(gr__unix_listen(&l, path, SOCK_SEQPACKET, 0660, 16, err, sizeof(err)), -EEXIST);
    ck_assert_int_eq(access("/etc/passwd", F_OK), 0);
    ck_assert_int_eq(gr__unix_listen(&l, d, SOCK_SEQPACKET, 0660, 16, err, sizeof(err)), -EEXIST);
    tu_rmrf(d);
    free(d);
}
END_TEST

START_TEST(test_listen_stale_live_close)
{
    char *d = tu_mkdtemp(), path[256], err[256];
    gr__listener l, l2;
    struct stat st;
    int fd;

    snprintf(path, sizeof(path), "%s/sub/dir/sock", d);
    ck_assert_int_eq(gr__unix_listen(&l, path, SOCK_SEQPACKET, 0600, 16, err, sizeof(err)), 0);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 0777, 0600);
    /* A second listener on a live socket is refused. */
    ck_assert_int_eq(gr__unix_listen(&l2, path, SOCK_SEQPACKET, 0600, 16, err, sizeof(err)),
                     -EADDRINUSE);
    fd = gr__unix_connect(path, SOCK_SEQPACKET);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* A stale one (its listener gone without removing it) is replaced. */
    close(l.fd);
    l.fd = -1;
    ck_assert_int_eq(gr__unix_listen(&l2, path, SOCK_SEQPACKET, 0600, 16, err, sizeof(err)), 0);
    /* The first listener's close must not remove the second's socket. */
    gr__unix_close(&l);
    ck_assert_int_eq(stat(path, &st), 0);
    gr__unix_close(&l2);
    ck_assert_int_eq(stat(path, &st), -1);
    gr__unix_close(&l2);                /* idempotent */
    ck_assert_int_eq(gr__unix_connect("/nonexistent/sock", SOCK_SEQPACKET), -ENOENT);
    tu_rmrf(d);
    free(d);
}
END_TEST

/* ---- fd passing ---- */

static int open_fds(void)
{
    int n = 0;

    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

START_TEST(test_fdpass)
{
    int sv[2], fds[8], got[4], n, mf = 0, before;
    char buf[16];
    struct iovec iov = { "hi", 2 };

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    for (int i = 0; i < 8; i++)
        fds[i] = open("/dev/null", O_RDONLY);
    before = open_fds();
    /* Eight fds come, the receiver keeps two: six are closed at once. */
    ck_assert_int_eq(gr__send_fds(sv[0], &iov, 1, fds, 8, 0), 2);
    gr__close_fds(fds, 8);
    ck_assert_int_eq(gr__recv_fds(sv[1], buf, sizeof(buf), got, 2, &n, 0, &mf), 2);
    ck_assert_int_eq(n, 2);
    ck_assert(fcntl(got[0], F_GETFD) & FD_CLOEXEC);
    ck_assert_int_eq(open_fds(), before - 8 + 2);
    gr__close_fds(got, 2);
    /* An empty packet with fds: length 0, fds closed when not wanted. */
    for (int i = 0; i < 3; i++)
        fds[i] = open("/dev/null", O_RDONLY);
    before = open_fds();
    iov.iov_len = 0;
    ck_assert_int_eq(gr__send_fds(sv[0], &iov, 1, fds, 3, 0), 0);
    gr__close_fds(fds, 3);
    ck_assert_int_eq(gr__recv_fds(sv[1], buf, sizeof(buf), got, 0, &n, 0, &mf), 0);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(open_fds(), before - 3);
    /* A packet longer than the buffer says so. */
    iov.iov_base = "0123456789abcdefXYZ";
    iov.iov_len = 19;
    ck_assert_int_eq(gr__send_fds(sv[0], &iov, 1, NULL, 0, 0), 19);
    ck_assert_int_eq(gr__recv_fds(sv[1], buf, sizeof(buf), got, 4, &n, 0, &mf), 16);
    ck_assert(mf & MSG_TRUNC);
    ck_assert_int_eq(gr__send_fds(sv[0], &iov, 1, fds, GR_FDPASS_MAX + 1, 0), -EINVAL);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

static Suite *common_suite(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_htab_reference);
    tcase_add_test(tc, test_htab_walk_remove);
    tcase_add_test(tc, test_htab_iter);
    tcase_add_test(tc, test_htab_incremental);
    tcase_add_test(tc, test_list);
    tcase_add_test(tc, test_ini);
    tcase_add_test(tc, test_ini_get);
    tcase_add_test(tc, test_size);
    tcase_add_test(tc, test_path_abs);
    tcase_add_test(tc, test_listen_refuses_non_socket);
    tcase_add_test(tc, test_listen_stale_live_close);
    tcase_add_test(tc, test_fdpass);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(common_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
