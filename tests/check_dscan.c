/*
 * check_dscan.c - libgranary's directory scans (client/dscan.h), which feed
 * the look-ahead opens: the state machine on a real directory (name order
 * and the listing's own order name every later file once, in order; two
 * readers' strides; shuffled, reverse and broken orders name nothing, list
 * the directory once and turn a scan off; a directory change), and against a real granaryd: a scan in name order has its opens
 * answered before it asks, every byte checked, nothing left open;
 * GRANARY_DIR_LOOKAHEAD=0 and a caller's own gr_open_ahead list stand it
 * down; a file that vanishes after the listing costs nothing but its own
 * failed open.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dscan.h"
#include "granary.h"
#include "testutil.h"

#define NFILES 40
#define FSIZE  20000

static tu_daemon d;
static gr_client *uc;           /* the unit tests' lister (gr_opendir) */
static char dir[1024];
static char paths[NFILES][1100];

static void teardown(void)
{
    gr_disconnect(uc);
    uc = NULL;
    if (d.pid > 0)
        ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
    unsetenv("GRANARY_DIR_LOOKAHEAD");
}

/* d with NFILES files of FSIZE bytes (pattern 700 + i) in src/ds, named
 * f000.. in the order of i, plus a subdirectory (not a file: never named).
 * They are made out of name order (7 apart), so that a file system that
 * lists in the order of creation (or its reverse: tmpfs) lists them in
 * neither name order nor its reverse. */
static void setup_files(void)
{
    char sub[1100];

    /* (The daemon's own read-ahead across files is off: what is counted
     * here is the client's.) */
    tu_daemon_init(&d, "[prefetch]\ndir_readahead = 0\n");
    snprintf(dir, sizeof(dir), "%s/ds", d.src);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    for (int i = 0; i < NFILES; i++)
        snprintf(paths[i], sizeof(paths[i]), "%s/f%03d", dir, i);
    for (int i = 0; i < NFILES; i++) {
        int f = i * 7 % NFILES;
        tu_write_pattern(paths[f], 700 + (uint32_t)f, FSIZE);
    }
    snprintf(sub, sizeof(sub), "%s/f010a", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
}

/* One open of path as libgranary reports it: the listing asked for made
 * and given back as gr_open does (unlocked, there). */
static size_t opened(gr__dscan *s, const char *path, char **out, int *off)
{
    size_t k = gr__ds_opened(s, path, out, GR_DS_AHEAD, off);

    if (s->want_list) {
        gr__dlist l;
        char *dn = strdup(s->dir);
        int rc;
        if (!uc) {
            ck_assert_int_eq(tu_daemon_start(&d), 0);
            ck_assert_ptr_nonnull(uc = gr_connect(d.sock));
        }
        rc = gr__ds_list(uc, dn, &l);
        gr__ds_listed(s, dn, rc, &l);
        free(dn);
    }
    return k;
}

/* Feed opens of files first, first + step, ... below last to s; check that
 * what it names is only files of that stride past the open, each once and
 * in order; the count named. */
static size_t feed(gr__dscan *s, int first, int step, int last)
{
    size_t named = 0;
    int expect = -1;

    for (int i = first; i < last; i += step) {
        char *out[GR_DS_AHEAD];
        int off;
        size_t k = opened(s, paths[i], out, &off);
        ck_assert_int_eq(off, 0);
        for (size_t j = 0; j < k; j++) {
            int at = -1;
            for (int f = 0; f < NFILES; f++)
                if (!strcmp(out[j], paths[f]))
                    at = f;
            ck_assert_msg(at > i, "named %s at the open of %d", out[j], i);
            if (expect >= 0)
                ck_assert_int_eq(at, expect);
            expect = at + step;
            free(out[j]);
            named++;
        }
    }
    return named;
}

/* The files in the order readdir(3) lists dir, read here (not by the
 * code under test): lorder[k] is the k-th file listed; lpos[f] where file
 * f stands among them. */
static void listing_order(int lorder[NFILES], int lpos[NFILES])
{
    DIR *dd = opendir(dir);
    struct dirent *e;
    int n = 0;

    ck_assert_ptr_nonnull(dd);
    while ((e = readdir(dd))) {
        int f;
        char end;
        if (strlen(e->d_name) != 4 || sscanf(e->d_name, "f%3d%c", &f, &end) != 1)
            continue;
        ck_assert_int_lt(n, NFILES);
        lpos[f] = n;
        lorder[n++] = f;
    }
    closedir(dd);
    ck_assert_int_eq(n, NFILES);
}

/* seq[0..n) with the files left out that would make three opens in a row
 * a steady forward stride in name order or in the listing's (by chance:
 * the listing's order is the file system's); the count kept. */
static size_t unordered(int *seq, size_t n)
{
    int lorder[NFILES], lpos[NFILES];
    size_t k = 0;

    listing_order(lorder, lpos);
    for (size_t i = 0; i < n; i++) {
        int f = seq[i];
        if (k >= 2) {
            int a = seq[k - 2], b = seq[k - 1];
            if ((f - b == b - a && f > b) || (lpos[f] - lpos[b] == lpos[b] - lpos[a] && lpos[f] > lpos[b]))
                continue;
        }
        seq[k++] = f;
    }
    return k;
}

/* Feed opens of the files of the listing's order from the first of
 * positions first, first + step, ... at which name order, which a scan
 * follows where both would turn on, does not by chance (the sixth open
 * turns one on), step apart; what is named is the files of that stride past the open, in
 * the listing's order, each once, and every file after the sixth open;
 * the count named. */
static size_t feed_listing(gr__dscan *s, int first, int step)
{
    int lorder[NFILES], lpos[NFILES], expect = -1;
    size_t named = 0, opens = 0;

    listing_order(lorder, lpos);
    for (;; first += step) {
        int a = lorder[first + 3 * step], b = lorder[first + 4 * step], c = lorder[first + 5 * step];
        ck_assert_int_lt(first + 5 * step, NFILES / 2);
        if (!(c > b && c - b == b - a))
            break;
    }
    for (int k = first; k < NFILES; k += step) {
        char *out[GR_DS_AHEAD];
        int off;
        size_t m = opened(s, paths[lorder[k]], out, &off);
        opens++;
        ck_assert_int_eq(off, 0);
        for (size_t j = 0; j < m; j++) {
            int at = -1;
            for (int f = 0; f < NFILES; f++)
                if (!strcmp(out[j], paths[f]))
                    at = lpos[f];
            ck_assert_msg(at > k, "named %s at the open of listing position %d", out[j], k);
            if (expect >= 0)
                ck_assert_int_eq(at, expect);
            expect = at + step;
            free(out[j]);
            named++;
        }
    }
    ck_assert_uint_eq(named, opens - 6);
    return named;
}

/* Name order: listed once after the third open, on at the sixth, and from
 * then every later file named once (f006..f039); the subdirectory never. */
START_TEST(test_scan_name_order)
{
    gr__dscan s;

    setup_files();
    gr__ds_init(&s);
    ck_assert_uint_eq(feed(&s, 0, 1, NFILES), NFILES - 6);
    ck_assert_uint_eq(s.listings, 1);
    ck_assert_uint_eq(s.ls.n, NFILES);
    gr__ds_fini(&s);
}
END_TEST

/* One of two readers dealing the files out: the odd files after its sixth. */
START_TEST(test_scan_stride)
{
    gr__dscan s;

    setup_files();
    gr__ds_init(&s);
    ck_assert_uint_eq(feed(&s, 1, 2, NFILES), NFILES / 2 - 6);
    gr__ds_fini(&s);
}
END_TEST

/* The order the directory lists its files in (tar, find, an unsorted
 * os.listdir): listed once after the third open, on at the sixth, every
 * later file named once in that order; one of two readers dealing them
 * out the same. */
START_TEST(test_scan_listing_order)
{
    gr__dscan s;

    setup_files();
    gr__ds_init(&s);
    ck_assert_uint_ge(feed_listing(&s, 0, 1), NFILES / 2);
    ck_assert_int_eq(s.order, GR_DS_BY_LISTING);
    ck_assert_uint_eq(s.listings, 1);
    gr__ds_fini(&s);
    gr__ds_init(&s);
    ck_assert_uint_ge(feed_listing(&s, 1, 2), NFILES / 4);
    gr__ds_fini(&s);
}
END_TEST

/* Shuffled and reverse orders (fitting neither order) name nothing, and
 * the directory is listed once for all of them. */
START_TEST(test_scan_shuffled_and_reverse)
{
    int order[] = { 7, 3, 21, 30, 2, 15, 16, 9, 38, 1, 0, 27, 26, 33, 5, 12,
                    39, 8, 22, 4, 31, 11, 19, 36, 6, 25, 14, 34, 10, 29, 17, 24 };
    int rev[NFILES];
    gr__dscan s;
    int off;
    char *out[GR_DS_AHEAD];
    size_t n, nr;

    setup_files();
    n = unordered(order, sizeof(order) / sizeof(order[0]));
    for (int i = 0; i < NFILES; i++)
        rev[i] = NFILES - 1 - i;
    nr = unordered(rev, NFILES);
    ck_assert_uint_ge(n, 20);
    ck_assert_uint_ge(nr, 20);
    gr__ds_init(&s);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(opened(&s, paths[order[i]], out, &off), 0);
    for (size_t i = 0; i < nr; i++)
        ck_assert_uint_eq(opened(&s, paths[rev[i]], out, &off), 0);
    ck_assert_uint_eq(s.listings, 1);
    gr__ds_fini(&s);
}
END_TEST

/* A scan that is on turns off (off set, nothing named) at a step back, at
 * a skip of more than its stride, and at an open in another directory. */
START_TEST(test_scan_breaks)
{
    gr__dscan s;
    char *out[GR_DS_AHEAD], other[1100];
    int off;
    size_t k;

    setup_files();
    gr__ds_init(&s);
    ck_assert_uint_gt(feed(&s, 0, 1, 10), 0);
    ck_assert_uint_eq(opened(&s, paths[3], out, &off), 0);
    ck_assert_int_eq(off, 1);
    ck_assert_uint_eq(feed(&s, 4, 1, 6), 0);                  /* counted afresh */
    ck_assert_uint_gt(feed(&s, 6, 1, 12), 0);                 /* on again */
    k = opened(&s, paths[15], out, &off);                     /* skips three */
    ck_assert_uint_eq(k, 0);
    ck_assert_int_eq(off, 1);
    ck_assert_uint_gt(feed(&s, 16, 1, 24), 0);
    snprintf(other, sizeof(other), "%s/elsewhere", d.src);
    ck_assert_uint_eq(opened(&s, other, out, &off), 0);
    ck_assert_int_eq(off, 1);
    ck_assert_uint_eq(s.listings, 1);           /* one listing served the three runs */
    gr__ds_fini(&s);
}
END_TEST

/* What is named past a link or an entry of unknown type is a regular file
 * by stat(2): a link to a FIFO or to a directory is passed over (a
 * look-ahead's proof would open it), a link to a file is named. */
START_TEST(test_scan_names_regular_only)
{
    char p[12][1100], fifo[1100], *out[GR_DS_AHEAD];
    gr__dscan s;
    int off, seen[12] = { 0 };

    setup_files();
    snprintf(fifo, sizeof(fifo), "%s/fifo", d.src);
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);
    for (int i = 0; i < 12; i++) {
        snprintf(p[i], sizeof(p[i]), "%s/g%02d", d.src, i);
        if (i == 7)
            ck_assert_int_eq(symlink(fifo, p[i]), 0);
        else if (i == 8)
            ck_assert_int_eq(symlink(d.src, p[i]), 0);
        else if (i == 9)
            ck_assert_int_eq(symlink(paths[0], p[i]), 0);
        else
            tu_write_pattern(p[i], 1, 10);
    }
    gr__ds_init(&s);
    for (int i = 0; i < 6; i++) {
        size_t k = opened(&s, p[i], out, &off);
        for (size_t j = 0; j < k; j++) {
            for (int f = 0; f < 12; f++)
                seen[f] += !strcmp(out[j], p[f]);
            free(out[j]);
        }
    }
    ck_assert_int_eq(seen[6], 1);
    ck_assert_int_eq(seen[7], 0);                   /* -> a FIFO */
    ck_assert_int_eq(seen[8], 0);                   /* -> a directory */
    ck_assert_int_eq(seen[9], 1);                   /* -> a file */
    ck_assert_int_eq(seen[10], 1);
    gr__ds_fini(&s);
}
END_TEST

/* Open, read whole and check, close file i. */
static void sample(gr_client *c, int i)
{
    static char buf[FSIZE];
    gr_file *f = gr_open(c, paths[i]);

    ck_assert_msg(f != NULL, "%s: %s", paths[i], strerror(errno));
    ck_assert_int_eq(gr_pread(f, buf, FSIZE, 0), FSIZE);
    ck_assert(tu_check_pattern(buf, 700 + (uint32_t)i, 0, FSIZE));
    ck_assert_int_eq(gr_close(f), 0);
}

/* A warm pass in name order on a fresh client: the look-ahead opens of
 * what the scan named; the daemon's look-ahead counters after it. */
static void warm_pass(uint64_t *sent, uint64_t *used)
{
    uint64_t s0 = tu_stat(&d, "lookahead_opens"), u0 = tu_stat(&d, "lookahead_used");
    gr_client *c = gr_connect(d.sock);

    ck_assert_ptr_nonnull(c);
    for (int i = 0; i < NFILES; i++)
        sample(c, i);
    gr_disconnect(c);
    *sent = tu_stat(&d, "lookahead_opens") - s0;
    *used = tu_stat(&d, "lookahead_used") - u0;
}

/* Against granaryd: a warm scan in name order has every file after the
 * sixth opened ahead and used, each file opened once, nothing left open;
 * with GRANARY_DIR_LOOKAHEAD=0 nothing is opened ahead. */
START_TEST(test_scan_feeds_lookahead)
{
    uint64_t sent, used, opens;

    setup_files();
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    setenv("GRANARY_DIR_LOOKAHEAD", "0", 1);
    warm_pass(&sent, &used);                    /* (fills the tier) */
    ck_assert_uint_eq(sent, 0);
    unsetenv("GRANARY_DIR_LOOKAHEAD");
    opens = tu_stat(&d, "opens");
    warm_pass(&sent, &used);
    ck_assert_uint_eq(sent, NFILES - 6);
    ck_assert_uint_eq(used, NFILES - 6);
    ck_assert_uint_eq(tu_stat(&d, "opens") - opens, NFILES);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
    /* One: the listing's READDIR, refused for a directory in no registered
     * dataset (ENODATA), so the process listed it itself. */
    ck_assert_uint_eq(tu_stat(&d, "request_errors"), 1);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries_added"), 0);
}
END_TEST

/* A caller's own list (gr_open_ahead) stands the scan down: only what it
 * named is opened ahead, though the opens after it go on in name order
 * (until 16 of them in a row it did not foresee end the list). */
START_TEST(test_scan_yields_to_open_ahead)
{
    const char *mine[8];
    uint64_t s0, u0;
    gr_client *c;

    setup_files();
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    for (int i = 0; i < 8; i++)
        mine[i] = paths[i];
    s0 = tu_stat(&d, "lookahead_opens");
    u0 = tu_stat(&d, "lookahead_used");
    c = gr_connect(d.sock);
    ck_assert_int_eq(gr_open_ahead(c, mine, 8), 0);
    for (int i = 0; i < 20; i++)
        sample(c, i);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat(&d, "lookahead_opens") - s0, 8);
    ck_assert_uint_eq(tu_stat(&d, "lookahead_used") - u0, 8);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
}
END_TEST

/* Files removed after the listing: their look-aheads fail (ENOENT) and the
 * reader's own opens fail the same way; the files after them are still
 * read byte-exact, and nothing is left open. */
START_TEST(test_scan_vanished_files)
{
    gr_client *c;

    setup_files();
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    c = gr_connect(d.sock);
    ck_assert_ptr_nonnull(c);
    for (int i = 0; i < 8; i++)
        sample(c, i);
    ck_assert_int_eq(unlink(paths[12]), 0);
    ck_assert_int_eq(unlink(paths[13]), 0);
    for (int i = 8; i < NFILES; i++) {
        if (i == 12 || i == 13) {
            errno = 0;
            ck_assert_ptr_null(gr_open(c, paths[i]));
            ck_assert_int_eq(errno, ENOENT);
            continue;
        }
        sample(c, i);
    }
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dscan");
    TCase *tc = tcase_create("scan");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_scan_name_order);
    tcase_add_test(tc, test_scan_stride);
    tcase_add_test(tc, test_scan_listing_order);
    tcase_add_test(tc, test_scan_shuffled_and_reverse);
    tcase_add_test(tc, test_scan_breaks);
    tcase_add_test(tc, test_scan_names_regular_only);
    tcase_add_test(tc, test_scan_feeds_lookahead);
    tcase_add_test(tc, test_scan_yields_to_open_ahead);
    tcase_add_test(tc, test_scan_vanished_files);
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
