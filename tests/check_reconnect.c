/*
 * check_reconnect.c - libgranary across a daemon restart: a gr_client and
 * its gr_files keep working when granaryd is stopped or SIGKILLed and
 * started again (the library reconnects and re-opens), a file that changed
 * meanwhile fails with ESTALE, a zero-copy reference from the old
 * connection stays readable, and a daemon that stays away gives a clear
 * errno within the reconnect window ($GRANARY_RECONNECT_MS), never a hang.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "granary.h"
#include "granary_int.h"
#include "testutil.h"

#define FSIZE (1u << 20)        /* 16 chunks of the test daemon's 64K */

static tu_daemon d;

static void setup(void)
{
    tu_daemon_init(&d, NULL);
    ck_assert_msg(tu_daemon_start(&d) == 0, "granaryd did not start (log: %s)", d.log);
    unsetenv("GRANARY_RECONNECT_MS");
    setenv("GRANARY_TIMEOUT_MS", "10000", 1);
}

static void teardown(void)
{
    if (d.pid > 0)
        tu_daemon_stop(&d);
    tu_daemon_fini(&d);
    unsetenv("GRANARY_RECONNECT_MS");
}

static char *src_path(const char *name)
{
    static char p[1024];

    snprintf(p, sizeof(p), "%s/%s", d.src, name);
    return p;
}

static double now_s(void)
{
    return gr__now_s();
}

/* SIGKILL the daemon (no clean shutdown: the socket file stays). */
static void crash(void)
{
    kill(d.pid, SIGKILL);
    waitpid(d.pid, NULL, 0);
    d.pid = -1;
}

static void restart(void)
{
    ck_assert_msg(tu_daemon_start(&d) == 0, "granaryd did not restart (log: %s)", d.log);
}

static void read_check(gr_file *f, uint32_t seed, off_t off, size_t len)
{
    char *buf = malloc(len);
    ssize_t n = gr_pread(f, buf, len, off);

    ck_assert_msg(n == (ssize_t)len, "gr_pread: %zd (%s)", n, strerror(errno));
    ck_assert(tu_check_pattern(buf, seed, (uint64_t)off, len));
    free(buf);
}

static void survive(int hard)
{
    gr_client *c;
    gr_file *f;
    gr_ref *ref;
    const void *data;
    ssize_t n;

    tu_write_pattern(src_path("a"), 7, FSIZE);
    c = gr_connect(d.sock);
    ck_assert_ptr_nonnull(c);
    f = gr_open(c, src_path("a"));
    ck_assert_ptr_nonnull(f);
    read_check(f, 7, 0, FSIZE);
    n = gr_read_ref(f, 65536, 65536, &data, &ref);
    ck_assert_int_eq(n, 65536);
    if (hard)
        crash();
    else
        ck_assert_int_eq(tu_daemon_stop(&d), 0);
    restart();
    /* the old connection's mapping is still there and still right */
    ck_assert(tu_check_pattern(data, 7, 65536, 65536));
    read_check(f, 7, 12345, FSIZE - 12345);
    ck_assert(tu_check_pattern(data, 7, 65536, 65536));
    gr_ref_release(ref);                /* to a dead connection: dropped */
    ck_assert_uint_ne(tu_stat(&d, "requests"), UINT64_MAX);
    ck_assert_int_eq(gr_close(f), 0);
    /* a new open and stats on the same client */
    f = gr_open(c, src_path("a"));
    ck_assert_ptr_nonnull(f);
    read_check(f, 7, 0, 4096);
    ck_assert_int_eq(gr_close(f), 0);
    ck_assert_uint_eq(tu_stat(&d, "lease_errors"), 0);
    gr_disconnect(c);
}

START_TEST(test_survives_clean_restart)
{
    survive(0);
}
END_TEST

START_TEST(test_survives_sigkill)
{
    survive(1);
}
END_TEST

/* A file rewritten while the daemon was away: the re-open sees another
 * identity, and the old gr_file fails with ESTALE (a new open works).
 * Bytes it kept leases on are still those of its identity at open, and
 * are served without the daemon (gr_open's contract: these bytes or
 * ESTALE, never a mix). */
START_TEST(test_changed_across_restart_estale)
{
    gr_client *c;
    gr_file *f;
    char buf[4096];

    tu_write_pattern(src_path("b"), 1, FSIZE);
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("b"));
    ck_assert_ptr_nonnull(f);
    read_check(f, 1, 0, 4096);
    crash();
    tu_write_pattern(src_path("b"), 2, FSIZE + 4096);
    restart();
    read_check(f, 1, 0, 4096);                                  /* a kept lease */
    errno = 0;
    ck_assert_int_eq(gr_pread(f, buf, sizeof(buf), 8 * 65536), -1);
    ck_assert_int_eq(errno, ESTALE);
    ck_assert_int_eq(gr_pread(f, buf, sizeof(buf), 0), -1);      /* for good */
    ck_assert_int_eq(errno, ESTALE);
    ck_assert_int_eq(gr_close(f), 0);
    f = gr_open(c, src_path("b"));
    ck_assert_ptr_nonnull(f);
    read_check(f, 2, 0, FSIZE + 4096);
    gr_close(f);
    gr_disconnect(c);
}
END_TEST

/* The daemon stays away longer than the window: a clear ECONNRESET within
 * about the window; and the same client works once it is back. */
START_TEST(test_gone_longer_than_window)
{
    gr_client *c;
    gr_file *f;
    char buf[4096];
    double t0, t;

    setenv("GRANARY_RECONNECT_MS", "700", 1);
    tu_write_pattern(src_path("c"), 3, FSIZE);
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("c"));
    ck_assert_ptr_nonnull(f);
    crash();
    t0 = now_s();
    errno = 0;
    ck_assert_int_eq(gr_pread(f, buf, sizeof(buf), 0), -1);
    t = now_s() - t0;
    ck_assert_int_eq(errno, ECONNRESET);
    ck_assert_msg(t >= 0.6 && t < 3.0, "failed after %.2f s", t);
    ck_assert_ptr_null(gr_open(c, src_path("c")));
    ck_assert_int_eq(errno, ECONNRESET);
    ck_assert_int_eq(gr_stats(c, NULL, NULL), -1);
    restart();
    read_check(f, 3, 0, FSIZE);
    gr_close(f);
    gr_disconnect(c);
}
END_TEST

START_TEST(test_reconnect_disabled)
{
    gr_client *c;
    gr_file *f;
    char buf[4096];
    double t0;

    setenv("GRANARY_RECONNECT_MS", "0", 1);
    tu_write_pattern(src_path("d"), 4, FSIZE);
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("d"));
    ck_assert_ptr_nonnull(f);
    crash();
    restart();
    t0 = now_s();
    ck_assert_int_eq(gr_pread(f, buf, sizeof(buf), 0), -1);
    ck_assert_int_eq(errno, ECONNRESET);
    ck_assert(now_s() - t0 < 1.0);
    ck_assert_int_eq(gr_close(f), 0);
    gr_disconnect(c);
}
END_TEST

static void *restart_later(void *arg)
{
    struct timespec ts = { 0, 400 * 1000 * 1000 };

    nanosleep(&ts, NULL);
    *(int *)arg = tu_daemon_start(&d);
    return NULL;
}

/* A read issued while the daemon is down waits for it to come back. */
START_TEST(test_read_waits_for_restart)
{
    gr_client *c;
    gr_file *f;
    pthread_t t;
    int rc = -1;

    tu_write_pattern(src_path("e"), 5, FSIZE);
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("e"));
    ck_assert_ptr_nonnull(f);
    crash();
    pthread_create(&t, NULL, restart_later, &rc);
    read_check(f, 5, 100, FSIZE - 100);
    pthread_join(t, NULL);
    ck_assert_int_eq(rc, 0);
    gr_close(f);
    gr_disconnect(c);
}
END_TEST

/* The program took the client's descriptor number over (what the shim
 * does for a close or dup2 onto it): the connection counts as lost, so
 * the next call reconnects on a new generation.  Files re-open by path
 * (an old handle number never names a file of the new connection), and a
 * look-ahead sent on the old socket is not waited for. */
START_TEST(test_disowned_socket)
{
    gr_client *c;
    gr_file *a, *b;
    const char *ahead[1];
    int fd;
    double t0;

    tu_write_pattern(src_path("a"), 31, FSIZE);
    tu_write_pattern(src_path("b"), 32, FSIZE);
    c = gr_connect(d.sock);
    ck_assert_ptr_nonnull(c);
    a = gr_open(c, src_path("a"));
    ck_assert_ptr_nonnull(a);
    read_check(a, 31, 0, 4096);
    ahead[0] = src_path("b");
    ck_assert_int_eq(gr_open_ahead(c, ahead, 1), 0);
    fd = gr__client_fd(c);
    ck_assert_int_ge(fd, 0);
    gr__client_disown_fd(c, fd, 1);
    close(fd);
    t0 = now_s();
    b = gr_open(c, src_path("b"));      /* reconnects */
    ck_assert_msg(b != NULL, "open b: %s", gr_strerror_last(c));
    ck_assert_msg(now_s() - t0 < 5, "the open waited %.1f s for the old socket", now_s() - t0);
    read_check(b, 32, 0, 4096);
    read_check(a, 31, 3 * 65536, 4096); /* a's bytes, not b's */
    read_check(a, 31, 0, FSIZE);
    ck_assert_int_eq(gr_close(a), 0);
    read_check(b, 32, 0, FSIZE);        /* a's close closed nothing of b's */
    ck_assert_int_eq(gr_close(b), 0);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat_settles(&d, "handles_open", 0), 0);
}
END_TEST

static Suite *reconnect_suite(void)
{
    Suite *s = suite_create("reconnect");
    TCase *tc = tcase_create("restart");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_survives_clean_restart);
    tcase_add_test(tc, test_survives_sigkill);
    tcase_add_test(tc, test_changed_across_restart_estale);
    tcase_add_test(tc, test_gone_longer_than_window);
    tcase_add_test(tc, test_reconnect_disabled);
    tcase_add_test(tc, test_read_waits_for_restart);
    tcase_add_test(tc, test_disowned_socket);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(reconnect_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
