/*
 * check_lcache.c - one round trip per warm sample and reads served from
 * leases the client kept (issue 14), against a real granaryd: OPENX brings a
 * small file with its open, a kept lease serves later reads with no message
 * (the daemon's read_requests do not move), it expires under a reader that
 * still holds a gr_ref into it, an eviction racing a kept lease changes no
 * byte, and a CLOSE without reply followed by a daemon restart leaves
 * nothing behind.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "granary.h"
#include "testutil.h"

#define CHUNK (64 * 1024)

static tu_daemon d;

static void start(const char *extra)
{
    tu_daemon_init(&d, extra);
}

static void boot(void)
{
    ck_assert_msg(tu_daemon_start(&d) == 0, "granaryd did not start (log: %s)", d.log);
}

static void teardown(void)
{
    if (d.pid > 0)
        ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}

static char *src_path(const char *name)
{
    static char p[1024];

    snprintf(p, sizeof(p), "%s/%s", d.src, name);
    return p;
}

static void read_check(gr_file *f, uint32_t seed, uint64_t off, size_t len)
{
    char *buf = malloc(len);
    ssize_t n = gr_pread(f, buf, len, (off_t)off);

    ck_assert_msg(n == (ssize_t)len, "gr_pread: %zd (%s)", n, strerror(errno));
    ck_assert(tu_check_pattern(buf, seed, off, len));
    free(buf);
}

/* Open, read whole, close: a training loop's sample. */
static void sample(gr_client *c, const char *path, uint32_t seed, size_t size)
{
    gr_file *f = gr_open(c, path);

    ck_assert_msg(f != NULL, "open %s: %s", path, gr_strerror_last(c));
    read_check(f, seed, 0, size);
    ck_assert_int_eq(gr_close(f), 0);
}

/* A file of one chunk: its open brings its bytes, so a sample is one
 * round trip, cold (the source is read for the OPENX) and warm. */
START_TEST(test_small_file_one_round_trip)
{
    uint64_t reads0, opens0;
    gr_client *c;

    start(NULL);
    for (int i = 0; i < 20; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%02d", i);
        tu_write_pattern(src_path(name), 40 + (uint32_t)i, 40000);
    }
    boot();
    c = gr_connect(d.sock);
    ck_assert_ptr_nonnull(c);
    reads0 = tu_stat(&d, "read_requests");
    opens0 = tu_stat(&d, "opens");
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < 20; i++) {
            char name[32];
            snprintf(name, sizeof(name), "s%02d", i);
            sample(c, src_path(name), 40 + (uint32_t)i, 40000);
        }
    ck_assert_uint_eq(tu_stat(&d, "opens") - opens0, 60);
    ck_assert_uint_eq(tu_stat(&d, "read_requests") - reads0, 0);
    ck_assert_uint_eq(tu_stat(&d, "source_reads"), 20);
    gr_disconnect(c);
    /* The client reported what its kept leases served (at disconnect). */
    ck_assert_uint_ge(tu_stat(&d, "lease_cache_hits"), 40);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
}
END_TEST

/* 4 KiB reads walking a file: one READX per chunk, every other read from
 * the kept lease. */
START_TEST(test_small_reads_one_request_per_chunk)
{
    gr_client *c;
    gr_file *f;
    uint64_t reads0;

    start(NULL);
    tu_write_pattern(src_path("walk"), 9, 6 * CHUNK + 1000);
    boot();
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("walk"));
    ck_assert_ptr_nonnull(f);
    reads0 = tu_stat(&d, "read_requests");
    for (uint64_t off = 0; off < 6 * CHUNK + 1000; off += 4096) {
        size_t n = 6 * CHUNK + 1000 - off < 4096 ? (size_t)(6 * CHUNK + 1000 - off) : 4096;
        read_check(f, 9, off, n);
    }
    ck_assert_uint_eq(tu_stat(&d, "read_requests") - reads0, 7);
    /* Again: every chunk is kept (7 of the 8 this client may keep). */
    for (uint64_t off = 0; off < 6 * CHUNK; off += 4096)
        read_check(f, 9, off, 4096);
    ck_assert_uint_eq(tu_stat(&d, "read_requests") - reads0, 7);
    gr_close(f);
    gr_disconnect(c);
}
END_TEST

/* A kept lease expires at client_lease_ttl while a gr_ref still points
 * into it: the ref's bytes stay right, the next read asks the daemon, and
 * the old lease goes back only when the ref is released. */
START_TEST(test_expiry_under_a_held_ref)
{
    gr_client *c;
    gr_file *f;
    gr_ref *ref;
    const void *p;
    uint64_t reads0;

    start("[dram]\nclient_lease_ttl = 0.3\n");
    tu_write_pattern(src_path("e"), 17, 3 * CHUNK);
    boot();
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("e"));
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(gr_read_ref(f, 100, 1000, &p, &ref), 1000);
    ck_assert(tu_check_pattern(p, 17, 100, 1000));
    reads0 = tu_stat(&d, "read_requests");
    read_check(f, 17, 5000, 4096);                          /* from the kept lease */
    ck_assert_uint_eq(tu_stat(&d, "read_requests"), reads0);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 1);
    tu_sleep_ms(500);
    read_check(f, 17, 5000, 4096);                          /* expired: asked again */
    ck_assert_uint_eq(tu_stat(&d, "read_requests"), reads0 + 1);
    ck_assert(tu_check_pattern(p, 17, 100, 1000));          /* the ref still holds it */
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 2);     /* the held one, the new one */
    gr_ref_release(ref);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 1);
    gr_close(f);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
}
END_TEST

/* An eviction (and an invalidation) of chunks a client keeps leases on:
 * the kept bytes are still the file's (the lease holds the memory), a
 * rewritten file opened again is read anew, never from the old lease. */
START_TEST(test_evict_races_kept_lease)
{
    struct timespec t[2] = { { 0, UTIME_OMIT }, { 1000000000, 0 } };
    gr_field arg = { .name = "path", .is_text = 1 };
    gr_client *c;
    gr_file *f;
    gr_field *out;
    size_t nout;
    uint64_t reads0;

    start(NULL);
    tu_write_pattern(src_path("v"), 23, 2 * CHUNK);
    boot();
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("v"));
    read_check(f, 23, 0, 2 * CHUNK);
    arg.text = src_path("v");
    arg.len = strlen(arg.text);
    ck_assert_int_eq(gr_admin(c, GR_ADMIN_INVALIDATE, &arg, 1, &out, &nout), 0);
    for (size_t i = 0; i < nout; i++)
        if (strcmp(out[i].name, "dram_chunks") == 0)
            ck_assert_uint_eq(out[i].num, 2);           /* both dropped from the tier */
    free(out);
    reads0 = tu_stat(&d, "read_requests");
    read_check(f, 23, 0, 2 * CHUNK);                        /* both chunks kept */
    ck_assert_uint_eq(tu_stat(&d, "read_requests"), reads0);
    /* Rewritten in place: a new open has a new identity and new bytes. */
    tu_write_pattern(src_path("v"), 24, 2 * CHUNK);
    utimensat(AT_FDCWD, src_path("v"), t, 0);
    tu_sleep_ms(300);                                       /* past attr_ttl */
    sample(c, src_path("v"), 24, 2 * CHUNK);
    read_check(f, 23, 0, 2 * CHUNK);    /* the old gr_file: its identity's bytes, kept */
    gr_close(f);
    gr_disconnect(c);
}
END_TEST

/* CLOSE goes without a reply; a daemon restart right after many of them
 * loses nothing and confuses no later call: every close was a close of a
 * handle the daemon had (no request_errors), and the next calls work. */
START_TEST(test_close_without_reply_then_restart)
{
    gr_client *c;

    start(NULL);
    tu_write_pattern(src_path("r"), 31, 3 * CHUNK);
    boot();
    setenv("GRANARY_TIMEOUT_MS", "10000", 1);
    c = gr_connect(d.sock);
    for (int i = 0; i < 50; i++)
        sample(c, src_path("r"), 31, 3 * CHUNK);
    ck_assert_uint_eq(tu_stat(&d, "request_errors"), 0);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
    kill(d.pid, SIGKILL);
    waitpid(d.pid, NULL, 0);
    d.pid = -1;
    boot();
    for (int i = 0; i < 5; i++)
        sample(c, src_path("r"), 31, 3 * CHUNK);
    ck_assert_uint_eq(tu_stat(&d, "request_errors"), 0);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
    unsetenv("GRANARY_TIMEOUT_MS");
}
END_TEST

/* client_lease_cache = 0 turns kept leases off: every read is a request. */
START_TEST(test_lease_cache_off)
{
    gr_client *c;
    gr_file *f;
    uint64_t reads0;

    start("[dram]\nclient_lease_cache = 0\n");
    tu_write_pattern(src_path("o"), 3, CHUNK);
    boot();
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("o"));
    reads0 = tu_stat(&d, "read_requests");
    for (int i = 0; i < 5; i++)
        read_check(f, 3, 0, 4096);
    ck_assert_uint_eq(tu_stat(&d, "read_requests") - reads0, 5);
    gr_close(f);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
    gr_disconnect(c);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("lcache");
    TCase *tc = tcase_create("daemon");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_small_file_one_round_trip);
    tcase_add_test(tc, test_small_reads_one_request_per_chunk);
    tcase_add_test(tc, test_expiry_under_a_held_ref);
    tcase_add_test(tc, test_evict_races_kept_lease);
    tcase_add_test(tc, test_close_without_reply_then_restart);
    tcase_add_test(tc, test_lease_cache_off);
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
