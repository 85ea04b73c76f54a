/*
 * check_dirahead.c - read-ahead across the files of a directory
 * (daemon/engine/dirahead.h) against a real granaryd: a reader that opens
 * a directory's files in name order has the files after it fetched before
 * it asks, so do two readers that deal the files out; a warm pass hints
 * nothing; a shuffled reader and a reverse one start nothing; a reader
 * that breaks the order has its held chunks released; a user who may not
 * list the directory gets no read-ahead there (what is fetched would
 * follow from names it cannot read); and dir_readahead = 0 turns it off.
 * Every byte read is checked.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "granary.h"
#include "testutil.h"

#define NFILES 60
#define FSIZE  10000

static tu_daemon d;
static char paths[NFILES][1100];

static void teardown(void)
{
    if (d.pid > 0)
        ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}

/* d with NFILES files of FSIZE bytes in src/ds (pattern 500 + i), names
 * f000.. in the order of i, the directory of mode dmode. */
static void boot(const char *extra, mode_t dmode)
{
    char dir[1024];

    tu_daemon_init(&d, extra);
    chmod(d.dir, 0755);
    snprintf(dir, sizeof(dir), "%s/ds", d.src);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    for (int i = 0; i < NFILES; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/f%03d", dir, i);
        tu_write_pattern(paths[i], 500 + (uint32_t)i, FSIZE);
        chmod(paths[i], 0644);
    }
    ck_assert_int_eq(chmod(dir, dmode), 0);
    ck_assert_msg(tu_daemon_start(&d) == 0, "granaryd did not start (log: %s)", d.log);
}

/* Open, read whole and check, close file i; 0 or where it went wrong (for
 * children too). */
static int sample(gr_client *c, int i)
{
    static char buf[FSIZE];
    gr_file *f = gr_open(c, paths[i]);
    int rc = 0;

    if (!f)
        return 1;
    if (gr_pread(f, buf, FSIZE, 0) != FSIZE || !tu_check_pattern(buf, 500 + (uint32_t)i, 0, FSIZE))
        rc = 2;
    gr_close(f);
    return rc;
}

/* Read files first, first + step, ... below last on a new client, with ms
 * of "work" after each (time for the read-ahead to land). */
static void pass(int first, int step, int last, int ms)
{
    gr_client *c = gr_connect(d.sock);

    ck_assert_ptr_nonnull(c);
    for (int i = first; i < last; i += step) {
        ck_assert_int_eq(sample(c, i), 0);
        if (ms)
            tu_sleep_ms(ms);
    }
    gr_disconnect(c);
}

/* The source reads a pass over files [0, NFILES) cost that were not
 * fetched ahead: demand misses. */
static uint64_t demand_source_reads(void)
{
    return tu_stat(&d, "source_reads") - tu_stat(&d, "prefetch_used");
}

/* One reader in name order: after the first few files (three to ask for
 * the listing, two strides to agree), every file was fetched before it was
 * opened and read from DRAM. */
START_TEST(test_name_order)
{
    boot(NULL, 0755);
    pass(0, 1, NFILES, 5);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 1);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_listings"), 1);
    ck_assert_uint_ge(tu_stat(&d, "dir_readahead_files"), NFILES - 10);
    ck_assert_uint_ge(tu_stat(&d, "prefetch_used"), NFILES - 12);
    ck_assert_uint_le(demand_source_reads(), 12);
    ck_assert_uint_eq(tu_stat(&d, "hint_errors"), 0);
}
END_TEST

/* A second reader of a directory whose listing is cached (no judging for
 * root): the open that finds the listing counts, so five opens in name
 * order turn the stream on, where the first reader, which waited for a
 * job, needed six. */
START_TEST(test_cached_listing_starts_sooner)
{
    boot(NULL, 0755);
    pass(0, 1, 6, 5);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 1);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_listings"), 1);
    pass(30, 1, 35, 5);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_listings"), 1);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 2);
}
END_TEST

/* A second pass over the same files, warm in DRAM: the stream is on
 * again, but no file is hinted (nothing to fetch, nothing to hold). */
START_TEST(test_warm_pass_hints_nothing)
{
    uint64_t files, reads;

    boot("[source]\nattr_ttl = 60\n", 0755);
    pass(0, 1, NFILES, 2);
    files = tu_stat(&d, "dir_readahead_files");
    reads = tu_stat(&d, "source_reads");
    ck_assert_uint_ge(files, NFILES - 10);
    pass(0, 1, NFILES, 0);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 2);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_files"), files);
    ck_assert_uint_eq(tu_stat(&d, "source_reads"), reads);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 0);
}
END_TEST

/* Two readers dealing the files out (even and odd, as dfsbench or a
 * DistributedSampler without shuffling would): a stream of stride 2 each,
 * and every file but the first few of each was read ahead. */
START_TEST(test_two_readers_deal_the_files)
{
    pid_t pid;
    int st;

    boot(NULL, 0755);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        gr_client *c = gr_connect(d.sock);
        int rc = c ? 0 : 9;
        for (int i = 1; i < NFILES && rc == 0; i += 2) {
            rc = sample(c, i);
            tu_sleep_ms(5);
        }
        gr_disconnect(c);
        _exit(rc);
    }
    pass(0, 2, NFILES, 5);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 2);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_listings"), 1);     /* one for both */
    ck_assert_uint_ge(tu_stat(&d, "prefetch_used"), NFILES - 24);
    ck_assert_uint_le(demand_source_reads(), 24);
}
END_TEST

/* A shuffled reader and a reverse one start no stream and fetch nothing
 * ahead (the listing may be asked for: ascending runs happen by chance). */
START_TEST(test_shuffled_and_reverse_start_nothing)
{
    int order[NFILES];
    gr_client *c;

    boot(NULL, 0755);
    for (int i = 0; i < NFILES; i++)
        order[i] = i;
    srand(7);
    for (int i = NFILES - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    c = gr_connect(d.sock);
    for (int i = 0; i < NFILES; i++)
        ck_assert_int_eq(sample(c, order[i]), 0);
    for (int i = NFILES - 1; i >= 0; i--)
        ck_assert_int_eq(sample(c, i), 0);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 0);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_files"), 0);
    ck_assert_uint_eq(tu_stat(&d, "prefetch_issued"), 0);
}
END_TEST

/* A reader that leaves the order mid-way: what was fetched for it and not
 * read is released at once (no hold left, no hint window in use), and it
 * reads right where it went. */
START_TEST(test_break_releases_holds)
{
    gr_client *c;

    boot(NULL, 0755);
    c = gr_connect(d.sock);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(sample(c, i), 0);
    for (int k = 0; k < 200 && tu_stat(&d, "fetches_inflight"); k++)
        tu_sleep_ms(10);
    ck_assert_uint_gt(tu_stat(&d, "hint_window_bytes"), 0);
    ck_assert_int_eq(sample(c, 5), 0);                  /* back: the order is broken */
    ck_assert_uint_eq(tu_stat(&d, "hint_window_bytes"), 0);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 0);
    gr_disconnect(c);
}
END_TEST

/* A user who may search the directory but not list it (mode 0711) opens
 * its files in order, each with its own proof: no stream, no listing, and
 * nothing fetched but what it asked for.  The same user on a listable
 * directory gets its stream, each file judged and fetched for it. */
static int user_pass(void)
{
    gr_client *c;

    if (setgid(65534) < 0 || setuid(65534) < 0)
        return 8;
    if (!(c = gr_connect(d.sock)))
        return 9;
    for (int i = 0; i < NFILES; i++) {
        int rc = sample(c, i);
        if (rc)
            return rc;
        tu_sleep_ms(5);
    }
    gr_disconnect(c);
    return 0;
}

static void as_user(void)
{
    pid_t pid = fork();
    int st;

    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(user_pass());
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %d",
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

START_TEST(test_unlistable_directory)
{
    boot("[daemon]\nsocket_mode = 0666\n", 0711);
    as_user();
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 0);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_listings"), 0);
    ck_assert_uint_eq(tu_stat(&d, "prefetch_issued"), 0);
}
END_TEST

START_TEST(test_listable_directory_as_user)
{
    boot("[daemon]\nsocket_mode = 0666\n", 0755);
    as_user();
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 1);
    ck_assert_uint_ge(tu_stat(&d, "prefetch_used"), NFILES - 12);
    ck_assert_uint_eq(tu_stat(&d, "hint_errors"), 0);
}
END_TEST

/* Register src/ds as a dataset and wait for its manifest. */
static void register_ds(void)
{
    char ds[1024], err[600];

    snprintf(ds, sizeof(ds), "%s/ds", d.src);
    ck_assert_msg(tu_register_dataset(&d, ds, err, sizeof(err)) == 0, "%s", err);
}

/* A registered dataset's directory gets no read-ahead across its files: its
 * opens are answered from the manifest, and resolving and judging hinted
 * files would ask the file system what the manifest spares it (make
 * bench's metadata run: 4.0 metadata operations per file of a cold epoch
 * became 12.8, 0 of a warm one 1.0). */
START_TEST(test_dataset_directory_not_followed)
{
    boot(NULL, 0755);
    register_ds();
    pass(0, 1, NFILES, 2);
    ck_assert_uint_ge(tu_stat(&d, "dataset_opens"), NFILES);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 0);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_listings"), 0);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries_added"), 0);
}
END_TEST

/* How many reloads d's log says are done. */
static int reloads_done(void)
{
    char line[4096];
    FILE *f = fopen(d.log, "r");
    int n = 0;

    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, "reload: done") != NULL;
    if (f)
        fclose(f);
    return n;
}

/* Set dir_readahead to n by SIGHUP; wait for the reload. */
static void set_files(int n)
{
    char v[16];
    int r0 = reloads_done();

    snprintf(v, sizeof(v), "%d", n);
    ck_assert_int_eq(tu_conf_reload(&d, "dir_readahead", v), 0);
    for (int i = 0; i < 500 && reloads_done() == r0; i++)
        tu_sleep_ms(10);
    ck_assert_int_gt(reloads_done(), r0);
}

/* dir_readahead = 0: nothing listed, nothing fetched ahead; a reload to 16
 * turns it on for a connection made before, and back to 0 ends a stream
 * at its next open with its holds released. */
START_TEST(test_off)
{
    gr_client *c;

    boot("[prefetch]\ndir_readahead = 0\n", 0755);
    c = gr_connect(d.sock);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(sample(c, 0), 0);
    pass(0, 1, 20, 0);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_listings"), 0);
    ck_assert_uint_eq(tu_stat(&d, "prefetch_issued"), 0);

    set_files(16);
    for (int i = 20; i < 30; i++)
        ck_assert_int_eq(sample(c, i), 0);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 1);
    ck_assert_uint_gt(tu_stat(&d, "hint_entries"), 0);

    set_files(0);
    ck_assert_int_eq(sample(c, 30), 0);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 0);
    for (int i = 31; i < 40; i++)
        ck_assert_int_eq(sample(c, i), 0);
    ck_assert_uint_eq(tu_stat(&d, "dir_readahead_streams"), 1);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries"), 0);
    gr_disconnect(c);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dirahead");
    TCase *tc = tcase_create("daemon");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_name_order);
    tcase_add_test(tc, test_cached_listing_starts_sooner);
    tcase_add_test(tc, test_warm_pass_hints_nothing);
    tcase_add_test(tc, test_two_readers_deal_the_files);
    tcase_add_test(tc, test_shuffled_and_reverse_start_nothing);
    tcase_add_test(tc, test_break_releases_holds);
    tcase_add_test(tc, test_unlistable_directory);
    tcase_add_test(tc, test_listable_directory_as_user);
    tcase_add_test(tc, test_off);
    tcase_add_test(tc, test_dataset_directory_not_followed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr;
    int failed;

    /* The daemon's read-ahead on its own: libgranary's scan of a directory
     * (check_dscan) would open files ahead, and the daemon see those opens. */
    setenv("GRANARY_DIR_LOOKAHEAD", "0", 1);
    sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
