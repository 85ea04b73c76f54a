/*
 * check_prefetch.c - read-ahead and job hints against a real granaryd:
 * fetched ahead in order, protected from eviction until read, bounded by
 * the window, consumed by reads from any connection, dropped on disconnect
 * or when the job has read past them; bad ranges and limits.  (The source
 * slot scheduler itself: check_sched.c.)
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "granary.h"
#include "testutil.h"

#define CHUNK (64 * 1024)

/* ---- against a real daemon ---- */

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

/* Wait (20 s at most) until no fetch is in flight and name stops moving. */
static void settle(void)
{
    uint64_t last = UINT64_MAX;

    for (int i = 0; i < 2000; i++) {
        uint64_t now = tu_stat(&d, "source_reads") + tu_stat(&d, "nvme_promotions");
        if (tu_stat(&d, "fetches_inflight") == 0 && now == last)
            return;
        last = now;
        tu_sleep_ms(10);
    }
    ck_abort_msg("fetches did not settle");
}

static void read_check(gr_client *c, const char *path, uint32_t seed, uint64_t off, size_t len)
{
    gr_file *f = gr_open(c, path);
    char *buf = malloc(len);

    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(gr_pread(f, buf, len, (off_t)off), (ssize_t)len);
    ck_assert(tu_check_pattern(buf, seed, off, len));
    free(buf);
    gr_close(f);
}

/* A sequential reader finds the chunks ahead of it in DRAM; a random
 * reader triggers no read-ahead. */
START_TEST(test_readahead)
{
    gr_client *c;
    uint64_t misses;

    start("[dram]\ncapacity = 8M\n[nvme]\npath =\n[prefetch]\nreadahead_max = 1M\n");
    tu_write_pattern(src_path("seq"), 5, 64 * CHUNK);
    tu_write_pattern(src_path("rnd"), 6, 64 * CHUNK);
    boot();
    c = gr_connect(d.sock);
    {
        gr_file *f = gr_open(c, src_path("seq"));
        char *buf = malloc(CHUNK);
        for (int i = 0; i < 4; i++) {
            ck_assert_int_eq(gr_pread(f, buf, CHUNK, (off_t)i * CHUNK), CHUNK);
            ck_assert(tu_check_pattern(buf, 5, (uint64_t)i * CHUNK, CHUNK));
        }
        ck_assert_uint_gt(tu_stat(&d, "readahead_chunks"), 0);
        settle();
        misses = tu_stat(&d, "misses");
        for (int i = 4; i < 12; i++) {  /* the window reached past chunk 12 */
            ck_assert_int_eq(gr_pread(f, buf, CHUNK, (off_t)i * CHUNK), CHUNK);
            ck_assert(tu_check_pattern(buf, 5, (uint64_t)i * CHUNK, CHUNK));
        }
        free(buf);
        gr_close(f);
    }
    ck_assert_uint_eq(tu_stat(&d, "misses"), misses);
    ck_assert_uint_ge(tu_stat(&d, "prefetch_used"), 8);
    ck_assert_uint_le(tu_stat(&d, "readahead_window_max"), 1u << 20);
    /* Random offsets, never continuing the last read: nothing read ahead
     * (one handle; read_check would reopen). */
    {
        uint64_t ra = tu_stat(&d, "readahead_chunks");
        static const int at[] = { 40, 7, 51, 22, 33, 60, 14 };
        gr_file *f = gr_open(c, src_path("rnd"));
        char *buf = malloc(CHUNK);
        for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
            ck_assert_int_eq(gr_pread(f, buf, 1000, (off_t)at[i] * CHUNK), 1000);
            ck_assert(tu_check_pattern(buf, 6, (uint64_t)at[i] * CHUNK, 1000));
        }
        ck_assert_uint_eq(tu_stat(&d, "readahead_chunks"), ra);
        free(buf);
        gr_close(f);
    }
    gr_disconnect(c);
}
END_TEST

/* Write n files of size bytes named h0.., seeds 100.. */
static void hint_files(int n, uint64_t size, gr_hint *h, char names[][600])
{
    for (int i = 0; i < n; i++) {
        snprintf(names[i], 600, "%s/h%d", d.src, i);
        tu_write_pattern(names[i], 100 + (uint32_t)i, size);
        h[i] = (gr_hint){ names[i], 0, 0 };
    }
}

/* Hinted files are fetched before they are read, each chunk once, and
 * every read of them is a DRAM hit; reading them consumes the list. */
START_TEST(test_hints_fetch_ahead)
{
    static char names[20][600];
    gr_hint h[20];
    gr_client *c, *reader;

    start("[dram]\ncapacity = 8M\n[nvme]\npath =\n[prefetch]\nreadahead_max = 0\n");
    hint_files(20, 100000, h, names);   /* 2 chunks each */
    boot();
    c = gr_connect(d.sock);
    ck_assert_int_eq(gr_hint_append(c, h, 20), 0);
    settle();
    ck_assert_uint_eq(tu_stat(&d, "hint_entries_added"), 40);
    ck_assert_uint_eq(tu_stat(&d, "source_reads"), 40);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 40);
    ck_assert_uint_eq(tu_stat(&d, "hint_window_bytes"), 20 * 100000);
    /* Another connection reads them (a DataLoader worker): all hits. */
    reader = gr_connect(d.sock);
    for (int i = 0; i < 20; i++)
        read_check(reader, names[i], 100 + (uint32_t)i, 0, 100000);
    ck_assert_uint_eq(tu_stat(&d, "misses"), 0);
    ck_assert_uint_eq(tu_stat(&d, "source_reads"), 40);
    ck_assert_uint_eq(tu_stat(&d, "prefetch_used"), 40);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 0);
    ck_assert_uint_eq(tu_stat(&d, "hint_window_bytes"), 0);
    ck_assert_uint_eq(tu_stat(&d, "dram_pinned_bytes"), 0);
    ck_assert_uint_eq(tu_stat(&d, "stalled_reads"), 0);
    gr_disconnect(reader);
    gr_disconnect(c);
}
END_TEST

/* Hinted chunks not yet read survive a scan that churns the whole DRAM
 * tier several times; the first read of each is still a hit. */
START_TEST(test_hints_protected)
{
    static char names[8][600];
    gr_hint h[8];
    gr_client *c;
    uint64_t src_before, misses_before;

    start("[dram]\ncapacity = 4M\n[nvme]\npath =\n[prefetch]\nreadahead_max = 0\n");
    hint_files(8, 2 * CHUNK, h, names);         /* 1 MiB hinted, under half the tier */
    tu_write_pattern(src_path("scan"), 77, 256 * CHUNK);    /* 16 MiB */
    boot();
    c = gr_connect(d.sock);
    ck_assert_int_eq(gr_hint_append(c, h, 8), 0);
    settle();
    ck_assert_uint_eq(tu_stat(&d, "source_reads"), 16);
    ck_assert_uint_ge(tu_stat(&d, "dram_pinned_bytes"), 16 * CHUNK);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 256; i += 16)
            read_check(c, src_path("scan"), 77, (uint64_t)i * CHUNK, 16 * CHUNK);
    ck_assert_uint_gt(tu_stat(&d, "evictions_dram"), 64);
    src_before = tu_stat(&d, "source_reads");
    misses_before = tu_stat(&d, "misses");
    for (int i = 0; i < 8; i++)
        read_check(c, names[i], 100 + (uint32_t)i, 0, 2 * CHUNK);
    ck_assert_uint_eq(tu_stat(&d, "source_reads"), src_before);
    ck_assert_uint_eq(tu_stat(&d, "misses"), misses_before);
    ck_assert_uint_eq(tu_stat(&d, "prefetch_wasted"), 0);
    gr_disconnect(c);
}
END_TEST

/* The window bounds what is fetched ahead; reading moves it on, in the
 * hinted order. */
START_TEST(test_hints_window)
{
    static char names[32][600];
    gr_hint h[32];
    gr_client *c;
    uint64_t reads;

    start("[dram]\ncapacity = 8M\n[nvme]\npath =\n[prefetch]\nreadahead_max = 0\n"
          "hint_window = 256K\n");
    hint_files(32, CHUNK, h, names);
    boot();
    /* The daemon's window alone: libgranary's look-ahead opens (which read
     * a one-chunk file with its open) would add two files to it. */
    setenv("GRANARY_LOOKAHEAD", "0", 1);
    c = gr_connect(d.sock);
    unsetenv("GRANARY_LOOKAHEAD");
    ck_assert_int_eq(gr_hint_append(c, h, 32), 0);
    settle();
    ck_assert_uint_eq(tu_stat(&d, "source_reads"), 4);      /* 256K of 64K chunks */
    ck_assert_uint_le(tu_stat(&d, "hint_window_bytes"), 256 * 1024);
    for (int i = 0; i < 32; i++) {
        reads = tu_stat(&d, "misses");
        read_check(c, names[i], 100 + (uint32_t)i, 0, CHUNK);
        ck_assert_uint_eq(tu_stat(&d, "misses"), reads);    /* always fetched ahead */
        settle();
        ck_assert_uint_le(tu_stat(&d, "source_reads"), (uint64_t)i + 1 + 4);
    }
    ck_assert_uint_eq(tu_stat(&d, "source_reads"), 32);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 0);
    gr_disconnect(c);
}
END_TEST

/* A job that reads past hinted entries it skips does not stall its list:
 * those entries are dropped and the window moves on. */
START_TEST(test_hints_skip)
{
    static char names[300][600];
    static gr_hint h[300];
    gr_client *c;

    start("[dram]\ncapacity = 32M\n[nvme]\npath =\n[prefetch]\nreadahead_max = 0\n"
          "hint_window = 1M\n");
    hint_files(300, 4096, h, names);
    boot();
    c = gr_connect(d.sock);
    ck_assert_int_eq(gr_hint_append(c, h, 300), 0);
    settle();
    /* Read every other one of the second half only. */
    for (int i = 150; i < 300; i += 2) {
        read_check(c, names[i], 100 + (uint32_t)i, 0, 4096);
        settle();
    }
    ck_assert_uint_gt(tu_stat(&d, "hint_skipped"), 100);
    ck_assert_uint_le(tu_stat(&d, "hint_entries"), 80);
    gr_disconnect(c);
}
END_TEST

/* A client that leaves drops its list and its holds; clear does too. */
START_TEST(test_hints_disconnect_and_clear)
{
    static char names[10][600];
    gr_hint h[10];
    gr_client *c;

    start("[dram]\ncapacity = 8M\n[nvme]\npath =\n[prefetch]\nreadahead_max = 0\n");
    hint_files(10, CHUNK, h, names);
    boot();
    c = gr_connect(d.sock);
    ck_assert_int_eq(gr_hint_append(c, h, 10), 0);
    settle();
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 10);
    ck_assert_uint_eq(tu_stat(&d, "dram_pinned_bytes"), 10 * CHUNK);
    ck_assert_int_eq(gr_hint_clear(c), 0);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 0);
    ck_assert_uint_eq(tu_stat(&d, "dram_pinned_bytes"), 0);
    ck_assert_int_eq(gr_hint_append(c, h, 10), 0);
    settle();
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 10);
    gr_disconnect(c);
    for (int i = 0; i < 500 && tu_stat(&d, "hint_entries"); i++)
        tu_sleep_ms(10);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 0);
    ck_assert_uint_eq(tu_stat(&d, "dram_pinned_bytes"), 0);
    ck_assert_uint_eq(tu_stat(&d, "hint_window_bytes"), 0);
}
END_TEST

/* Bad ranges are skipped and counted, never fatal; a list past
 * hint_max_entries is refused with E2BIG; a malformed range is EINVAL. */
START_TEST(test_hints_errors_and_limits)
{
    static char names[4][600];
    gr_hint h[4], bad[4];
    gr_hint many[20];
    gr_client *c;

    start("[dram]\ncapacity = 8M\n[nvme]\npath =\n[prefetch]\nreadahead_max = 0\n"
          "hint_max_entries = 16\n");
    hint_files(4, CHUNK, h, names);
    boot();
    c = gr_connect(d.sock);
    bad[0] = (gr_hint){ "/etc/passwd", 0, 0 };              /* outside the roots */
    bad[1] = (gr_hint){ src_path("nope"), 0, 0 };           /* vanished */
    bad[2] = (gr_hint){ names[0], 10 * CHUNK, 0 };          /* past the end */
    bad[3] = (gr_hint){ names[1], 0, 0 };                   /* fine */
    ck_assert_int_eq(gr_hint_append(c, bad, 4), 0);
    settle();
    for (int i = 0; i < 200 && tu_stat(&d, "hint_errors") < 3; i++)
        tu_sleep_ms(10);
    ck_assert_uint_eq(tu_stat(&d, "hint_errors"), 3);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries_added"), 1);
    for (int i = 0; i < 20; i++)
        many[i] = h[i % 4];
    errno = 0;
    ck_assert_int_eq(gr_hint_append(c, many, 20), -1);
    ck_assert_int_eq(errno, E2BIG);
    bad[0] = (gr_hint){ "", 0, 0 };
    ck_assert_int_eq(gr_hint_append(c, bad, 1), -1);
    ck_assert_int_eq(errno, EINVAL);
    /* Relative: from the working directory, here outside the roots, so
     * skipped and counted like any range the daemon cannot resolve. */
    bad[0] = (gr_hint){ "relative/path", 0, 0 };
    ck_assert_int_eq(gr_hint_append(c, bad, 1), 0);
    for (int i = 0; i < 200 && tu_stat(&d, "hint_errors") < 4; i++)
        tu_sleep_ms(10);
    ck_assert_uint_eq(tu_stat(&d, "hint_errors"), 4);
    /* The connection still serves. */
    read_check(c, names[2], 102, 0, CHUNK);
    gr_disconnect(c);
}
END_TEST

/* Reads that wait on the source are counted as stalls; hits are not. */
START_TEST(test_stall_stats)
{
    gr_client *c;

    start("[nvme]\npath =\n[prefetch]\nreadahead_max = 0\n");
    tu_write_pattern(src_path("s"), 9, 4 * CHUNK);
    boot();
    c = gr_connect(d.sock);
    read_check(c, src_path("s"), 9, 0, 4 * CHUNK);
    ck_assert_uint_ge(tu_stat(&d, "stalled_reads"), 1);
    {
        uint64_t stalls = tu_stat(&d, "stalled_reads");
        read_check(c, src_path("s"), 9, 0, 4 * CHUNK);
        ck_assert_uint_eq(tu_stat(&d, "stalled_reads"), stalls);
    }
    gr_disconnect(c);
}
END_TEST

static Suite *prefetch_suite(void)
{
    Suite *s = suite_create("prefetch");
    TCase *ti = tcase_create("daemon");

    tcase_add_checked_fixture(ti, NULL, teardown);
    tcase_set_timeout(ti, 120);
    tcase_add_test(ti, test_readahead);
    tcase_add_test(ti, test_hints_fetch_ahead);
    tcase_add_test(ti, test_hints_protected);
    tcase_add_test(ti, test_hints_window);
    tcase_add_test(ti, test_hints_skip);
    tcase_add_test(ti, test_hints_disconnect_and_clear);
    tcase_add_test(ti, test_hints_errors_and_limits);
    tcase_add_test(ti, test_stall_stats);
    suite_add_tcase(s, ti);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(prefetch_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
