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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
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
    unsetenv("GRANARY_DIR_LOOKAHEAD");
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

/* Read all of path, n chunks of pattern seed, through a client of its
 * own: the source is read into the tier (reusing what it has freed). */
static void read_through_other(const char *path, uint32_t seed, int n)
{
    gr_client *o = gr_connect(d.sock);

    ck_assert_ptr_nonnull(o);
    sample(o, path, seed, (size_t)n * CHUNK);
    gr_disconnect(o);
}

/* Past the client's lease budget a kept lease goes back but its entry
 * stays soft: later reads are served from the mapping, with no message,
 * while the block's generation is the one it had under the lease; once
 * the daemon drops the chunks and reuses their blocks for another file,
 * the soft entries are found stale and the bytes asked for again: every
 * read is the file's, never the other file's in the reused blocks. */
START_TEST(test_soft_entries_revalidated)
{
    gr_field arg = { .name = "path", .is_text = 1 };
    gr_field *out;
    size_t nout;
    gr_client *c;
    gr_file *f;
    uint64_t reads0;

    start("[dram]\nclient_lease_cache = 128K\n");
    tu_write_pattern(src_path("s"), 41, 8 * CHUNK);
    tu_write_pattern(src_path("t"), 99, 8 * CHUNK);
    boot();
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("s"));
    ck_assert_ptr_nonnull(f);
    read_check(f, 41, 0, 8 * CHUNK);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 2);     /* the budget: 2 chunks */
    reads0 = tu_stat(&d, "read_requests");
    read_check(f, 41, 0, 8 * CHUNK);                        /* 6 soft, 2 kept */
    for (int i = 0; i < 8; i++)
        read_check(f, 41, (uint64_t)i * CHUNK + 777, 4096);
    ck_assert_uint_eq(tu_stat(&d, "read_requests"), reads0);
    /* The tier lets go of the chunks (the two leased stay in place), and
     * another file's chunks take the freed blocks. */
    arg.text = src_path("s");
    arg.len = strlen(arg.text);
    ck_assert_int_eq(gr_admin(c, GR_ADMIN_INVALIDATE, &arg, 1, &out, &nout), 0);
    free(out);
    read_through_other(src_path("t"), 99, 8);
    for (int i = 0; i < 8; i++)
        read_check(f, 41, (uint64_t)i * CHUNK + 777, 4096);
    read_check(f, 41, 0, 8 * CHUNK);
    ck_assert_uint_ge(tu_stat(&d, "read_requests"), reads0 + 6);
    gr_close(f);
    gr_disconnect(c);
    ck_assert_uint_ge(tu_stat(&d, "lease_cache_stale"), 6);
    ck_assert_uint_ge(tu_stat(&d, "lease_cache_unpinned_hits"), 6);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
}
END_TEST

/* An eviction racing reads served from soft entries: one process reads a
 * file in small and whole-chunk reads, its leases mostly given back, while
 * another reads far more than the tier holds, so that its chunks evict the
 * first file's and take their blocks.  Every byte is the file's; the
 * counters show both soft hits and stale entries. */
START_TEST(test_eviction_races_soft_reads)
{
    gr_client *c;
    gr_file *f;
    pid_t pid;
    int status;
    uint64_t deadline;
    unsigned seed = 7;
    char name[16];

    start("[dram]\nclient_lease_cache = 128K\n");
    tu_write_pattern(src_path("x"), 51, 16 * CHUNK);
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "y%d", i);
        tu_write_pattern(src_path(name), 60 + (uint32_t)i, 64 * CHUNK);
    }
    boot();
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        uint64_t until = gr__now_ms() + 2000;

        for (int i = 0; gr__now_ms() < until; i = (i + 1) % 4) {
            snprintf(name, sizeof(name), "y%d", i);
            read_through_other(src_path(name), 60 + (uint32_t)i, 64);
        }
        _exit(0);
    }
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("x"));
    ck_assert_ptr_nonnull(f);
    deadline = gr__now_ms() + 2000;
    while (gr__now_ms() < deadline) {
        uint64_t off = (uint64_t)rand_r(&seed) % (16 * CHUNK - 4096);

        read_check(f, 51, off, 4096);
        if (rand_r(&seed) % 16 == 0)
            read_check(f, 51, 0, 16 * CHUNK);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    gr_close(f);
    gr_disconnect(c);
    ck_assert_uint_gt(tu_stat(&d, "lease_cache_unpinned_hits"), 0);
    ck_assert_uint_gt(tu_stat(&d, "lease_cache_stale"), 0);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
}
END_TEST

/* Soft entries go with their connection: after a daemon restart the
 * client's reads are asked of the new daemon (whose arena is new) and are
 * the file's bytes. */
START_TEST(test_soft_entries_dropped_at_reconnect)
{
    gr_client *c;
    gr_file *f;

    start("[dram]\nclient_lease_cache = 64K\n");
    tu_write_pattern(src_path("q"), 71, 6 * CHUNK);
    boot();
    setenv("GRANARY_TIMEOUT_MS", "10000", 1);
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("q"));
    read_check(f, 71, 0, 6 * CHUNK);
    kill(d.pid, SIGKILL);
    waitpid(d.pid, NULL, 0);
    d.pid = -1;
    tu_write_pattern(src_path("q2"), 72, 16 * CHUNK);
    boot();
    read_through_other(src_path("q2"), 72, 16);             /* the new arena's blocks */
    for (int i = 0; i < 6; i++)
        read_check(f, 71, (uint64_t)i * CHUNK + 5, 4096);   /* (old mappings: SIGSEGV) */
    gr_close(f);
    gr_disconnect(c);
    unsetenv("GRANARY_TIMEOUT_MS");
}
END_TEST

/* Kept leases past their time go soft and keep serving, also once none
 * of the client's entries holds a lease any more. */
START_TEST(test_soft_entries_after_ttl)
{
    gr_client *c;
    gr_file *f;
    uint64_t reads0;

    start("[dram]\nclient_lease_ttl = 0.3\n");
    tu_write_pattern(src_path("t"), 81, 4 * CHUNK);
    boot();
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("t"));
    ck_assert_ptr_nonnull(f);
    read_check(f, 81, 0, 4 * CHUNK);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 4);
    tu_sleep_ms(500);
    reads0 = tu_stat(&d, "read_requests");
    read_check(f, 81, 0, 4 * CHUNK);            /* every entry expires: soft */
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
    for (int i = 0; i < 4; i++)
        read_check(f, 81, (uint64_t)i * CHUNK + 99, 4096);
    read_check(f, 81, 0, 4 * CHUNK);
    ck_assert_uint_eq(tu_stat(&d, "read_requests"), reads0);
    gr_close(f);
    gr_disconnect(c);
}
END_TEST

/* This process's connection to the daemon (SOCK_SEQPACKET to d.sock). */
static int client_socket(void)
{
    for (int fd = 3; fd < 4096; fd++) {
        struct sockaddr_un a;
        socklen_t al = sizeof(a);
        int type = 0;
        socklen_t tl = sizeof(type);

        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET)
            continue;
        if (getpeername(fd, (struct sockaddr *)&a, &al) == 0 && a.sun_family == AF_UNIX &&
            strcmp(a.sun_path, d.sock) == 0)
            return fd;
    }
    return -1;
}

/* The daemon drops a connection (it does when out of memory for a reply;
 * here it sees the connection's write side shut) and with it every lease
 * it held, while the client, sending nothing, does not know:
 * its kept leases are checked by generation like soft entries, so once the
 * blocks hold another file's chunks the client asks again (and reconnects)
 * instead of serving them. */
START_TEST(test_kept_leases_of_a_dropped_connection)
{
    gr_field arg = { .name = "path", .is_text = 1 };
    gr_field *out;
    size_t nout;
    gr_client *c;
    gr_file *f;
    int fd;

    start(NULL);
    tu_write_pattern(src_path("k"), 91, 4 * CHUNK);
    tu_write_pattern(src_path("l"), 92, 8 * CHUNK);
    boot();
    setenv("GRANARY_TIMEOUT_MS", "10000", 1);
    c = gr_connect(d.sock);
    f = gr_open(c, src_path("k"));
    ck_assert_ptr_nonnull(f);
    read_check(f, 91, 0, 4 * CHUNK);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 4);
    fd = client_socket();
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    for (int i = 0; i < 100 && tu_stat(&d, "leases_active") > 0; i++)
        tu_sleep_ms(10);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
    arg.text = src_path("k");
    arg.len = strlen(arg.text);
    {
        gr_client *o = gr_connect(d.sock);
        ck_assert_int_eq(gr_admin(o, GR_ADMIN_INVALIDATE, &arg, 1, &out, &nout), 0);
        free(out);
        gr_disconnect(o);
    }
    read_through_other(src_path("l"), 92, 8);
    for (int i = 0; i < 4; i++)
        read_check(f, 91, (uint64_t)i * CHUNK + 5, 4096);
    read_check(f, 91, 0, 4 * CHUNK);
    gr_close(f);
    gr_disconnect(c);
    unsetenv("GRANARY_TIMEOUT_MS");
}
END_TEST

/* Files ln0..ln{n-1} of 10000 bytes each (pattern 100 + i), hinted in
 * that order on c. */
static void hinted_files(gr_client *c, int n)
{
    gr_hint h[64];
    static char names[64][1024];

    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "%s/ln%d", d.src, i);
        tu_write_pattern(names[i], 100 + (uint32_t)i, 10000);
        h[i] = (gr_hint){ names[i], 0, 0 };
    }
    ck_assert_int_eq(gr_hint_append(c, h, (size_t)n), 0);
}

static void sample_ln(gr_client *c, int i)
{
    char name[32];

    snprintf(name, sizeof(name), "ln%d", i);
    sample(c, src_path(name), 100 + (uint32_t)i, 10000);
}

/* handles_open as c's own connection sees it: after everything c sent. */
static uint64_t handles_seen_by(gr_client *c)
{
    return tu_stat_on(c, "handles_open");
}

/* Opens in the hinted order: each one's OPENX went out with the open
 * before (look-ahead), so the daemon sees each file opened once, every
 * byte is the file's, and nothing is left open. */
START_TEST(test_lookahead_in_hint_order)
{
    gr_client *c;

    start(NULL);
    boot();
    c = gr_connect(d.sock);
    hinted_files(c, 20);
    for (int i = 0; i < 20; i++)
        sample_ln(c, i);
    ck_assert_uint_eq(tu_stat(&d, "opens"), 20);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat(&d, "lookahead_opens"), 19);
    ck_assert_uint_eq(tu_stat(&d, "lookahead_used"), 19);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
    ck_assert_uint_eq(tu_stat(&d, "request_errors"), 0);
}
END_TEST

/* A caller that strays from its hints: files skipped, taken out of order,
 * files never hinted in between, the hints cleared midway.  Every byte is
 * the right file's; the look-aheads given up are closed (none left open
 * after the clear), and the daemon saw no bad request. */
START_TEST(test_lookahead_out_of_order)
{
    static const int order[] = { 1, 0, 2, 5, 3, 9, 4, 6, 7 };
    gr_client *c;

    start(NULL);
    tu_write_pattern(src_path("z"), 7, 3000);
    boot();
    c = gr_connect(d.sock);
    hinted_files(c, 12);
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        sample_ln(c, order[i]);
        if (i % 3 == 1)
            sample(c, src_path("z"), 7, 3000);
    }
    ck_assert_int_eq(gr_hint_clear(c), 0);
    ck_assert_uint_eq(handles_seen_by(c), 0);
    sample_ln(c, 10);
    sample_ln(c, 11);
    ck_assert_uint_eq(handles_seen_by(c), 0);
    gr_disconnect(c);
    ck_assert_uint_gt(tu_stat(&d, "lookahead_used"), 0);
    ck_assert_uint_eq(tu_stat(&d, "request_errors"), 0);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
}
END_TEST

/* A caller that skips files of its hint list (a bad sample, a sampler
 * that drops some): the look-aheads of the skipped ones are closed (once
 * their replies are in: the next call's) and the look-ahead goes on with
 * the files after them. */
START_TEST(test_lookahead_skips)
{
    gr_client *c;

    start(NULL);
    boot();
    c = gr_connect(d.sock);
    hinted_files(c, 16);
    for (int i = 0; i < 16; i++)
        if (i != 3 && i != 4 && i != 9)
            sample_ln(c, i);
    sample(c, src_path("ln3"), 103, 10000);     /* (not the order: a plain open) */
    ck_assert_uint_eq(handles_seen_by(c), 0);
    gr_disconnect(c);
    ck_assert_uint_ge(tu_stat(&d, "lookahead_used"), 9);
    ck_assert_uint_eq(tu_stat(&d, "request_errors"), 0);
}
END_TEST

/* The daemon restarts in the middle of a hinted pass: the look-aheads die
 * with the connection, the rest of the pass is read right from the new
 * daemon (which the hints, lost with the connection, no longer drive). */
START_TEST(test_lookahead_across_a_restart)
{
    gr_client *c;

    start(NULL);
    boot();
    setenv("GRANARY_TIMEOUT_MS", "10000", 1);
    c = gr_connect(d.sock);
    hinted_files(c, 10);
    for (int i = 0; i < 4; i++)
        sample_ln(c, i);
    kill(d.pid, SIGKILL);
    waitpid(d.pid, NULL, 0);
    d.pid = -1;
    boot();
    for (int i = 4; i < 10; i++)
        sample_ln(c, i);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
    ck_assert_uint_eq(tu_stat(&d, "request_errors"), 0);
    gr_disconnect(c);
    unsetenv("GRANARY_TIMEOUT_MS");
}
END_TEST

/* gr_open_ahead: a reader that names its next files without hinting the
 * daemon (a DataLoader worker's batch) has them opened ahead, the first at
 * once; a later list replaces the one before (its look-aheads closed), a
 * file skipped is closed, bad paths are refused, and the daemon was given
 * no hints. */
START_TEST(test_open_ahead)
{
    char p[12][1024];
    const char *first[6], *second[6], *third[2];
    gr_client *c;

    /* (The daemon's own read-ahead across a directory's files would hint
     * these: off, so that any hint seen here is the client's; and so is
     * the client's scan of a directory, whose look-aheads would be counted
     * with the list's.) */
    start("[prefetch]\ndir_readahead = 0\n");
    setenv("GRANARY_DIR_LOOKAHEAD", "0", 1);
    for (int i = 0; i < 12; i++) {
        snprintf(p[i], sizeof(p[i]), "%s/ln%d", d.src, i);
        tu_write_pattern(p[i], 100 + (uint32_t)i, 10000);
        if (i < 6)
            first[i] = p[i];
        else
            second[i - 6] = p[i];
    }
    third[0] = p[0];
    third[1] = p[1];
    boot();
    /* Warm, so that replies come in the order asked (a cold file's would
     * come after a later warm one's, and its handle be closed later). */
    c = gr_connect(d.sock);
    for (int i = 0; i < 12; i++)
        sample_ln(c, i);
    gr_disconnect(c);
    c = gr_connect(d.sock);
    ck_assert_int_eq(gr_open_ahead(c, first, 6), 0);
    for (int i = 0; i < 6; i++)
        sample_ln(c, i);
    ck_assert_int_eq(gr_open_ahead(c, second, 6), 0);
    sample_ln(c, 6);
    sample_ln(c, 8);                            /* ln7 skipped */
    ck_assert_int_eq(gr_open_ahead(c, third, 2), 0);   /* ln9, ln10 out: given up */
    sample_ln(c, 0);
    sample_ln(c, 1);
    ck_assert_uint_eq(handles_seen_by(c), 0);
    ck_assert_int_eq(gr_open_ahead(c, NULL, 0), 0);
    third[1] = "";
    errno = 0;
    ck_assert_int_eq(gr_open_ahead(c, third, 2), -1);
    ck_assert_int_eq(errno, EINVAL);
    sample_ln(c, 11);                           /* a plain open after all that */
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat(&d, "lookahead_used"), 10);
    ck_assert_uint_eq(tu_stat(&d, "lookahead_opens"), 13);
    ck_assert_uint_eq(tu_stat(&d, "opens"), 12 + 14);
    ck_assert_uint_eq(tu_stat(&d, "hint_entries_added"), 0);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
    ck_assert_uint_eq(tu_stat(&d, "request_errors"), 0);
}
END_TEST

/* In a child as uid 65534 (the daemon's default access_check = fd wants
 * proofs from it): hint ln0..ln19 and read them in order, ln7 being a file
 * it may not open.  Each look-ahead carries the child's own open of its
 * file; ln7's cannot be made, so it is not sent, and the child's open of
 * it fails as a plain open would (EACCES).  0, or where it went wrong. */
static int proof_pass(void)
{
    gr_client *c;
    gr_hint h[20];
    static char names[20][1024];
    char *buf = malloc(10000);

    if (!buf || setgid(65534) < 0 || setuid(65534) < 0)
        return 3;
    if (!(c = gr_connect(d.sock)))
        return 4;
    for (int i = 0; i < 20; i++) {
        snprintf(names[i], sizeof(names[i]), "%s/ln%d", d.src, i);
        h[i] = (gr_hint){ names[i], 0, 0 };
    }
    if (gr_hint_append(c, h, 20) != 0)
        return 5;
    for (int i = 0; i < 20; i++) {
        gr_file *f = gr_open(c, names[i]);
        if (i == 7) {
            if (f || errno != EACCES)
                return 6;
            continue;
        }
        if (!f) {
            fprintf(stderr, "open ln%d: %s\n", i, gr_strerror_last(c));
            return 7;
        }
        if (gr_pread(f, buf, 10000, 0) != 10000 || !tu_check_pattern(buf, 100 + (uint32_t)i, 0, 10000))
            return 8;
        gr_close(f);
    }
    if (handles_seen_by(c) != 0)
        return 9;
    gr_disconnect(c);
    free(buf);
    return 0;
}

/* A client that must prove its access (not root, access_check = fd) still
 * gets its look-aheads, each with its proof: every file but the first is
 * taken from a look-ahead, the daemon refused no proof and saw no bad
 * request, and the one file the client may not read is refused as
 * without look-ahead. */
START_TEST(test_lookahead_with_proofs)
{
    int st;
    pid_t pid;

    start("[daemon]\nsocket_mode = 0666\n");
    chmod(d.dir, 0755);
    for (int i = 0; i < 20; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ln%d", i);
        tu_write_pattern(src_path(name), 100 + (uint32_t)i, 10000);
        chmod(src_path(name), i == 7 ? 0600 : 0644);
    }
    boot();
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(proof_pass());
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %d",
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    ck_assert_uint_eq(tu_stat(&d, "lookahead_opens"), 18);
    ck_assert_uint_eq(tu_stat(&d, "lookahead_used"), 18);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
    /* Two ENOKEYs: the first open's (sent without a proof, as every
     * client's first is) and ln7's (no proof could be made). */
    ck_assert_uint_eq(tu_stat(&d, "request_errors"), 2);
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

/* A forked child that frees the client it inherited (the shim and the
 * Python package do, at the child's first call; a C program may release
 * its references and close its files first, as gr_disconnect asks) says
 * nothing on the parent's connection: the parent keeps its leases and
 * handles, and its own releases later name leases the daemon still knows. */
START_TEST(test_forked_child_lets_go_silently)
{
    gr_client *c;
    gr_file *f, *g;
    gr_ref *r;
    const void *p;
    uint64_t leases, handles, errors, reads;
    pid_t pid;
    int status;

    start(NULL);
    tu_write_pattern(src_path("fk"), 11, CHUNK);
    tu_write_pattern(src_path("fk2"), 12, CHUNK);
    boot();
    c = gr_connect(d.sock);
    ck_assert_ptr_nonnull(c);
    f = gr_open(c, src_path("fk"));
    ck_assert_ptr_nonnull(f);
    read_check(f, 11, 0, CHUNK);        /* its lease is kept */
    ck_assert_int_eq(gr_read_ref(f, 0, 100, &p, &r), 100);
    leases = tu_stat_on(c, "leases_active");
    handles = tu_stat_on(c, "handles_open");
    errors = tu_stat_on(c, "lease_errors");
    ck_assert_uint_ge(leases, 1);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* as libgranary(3) asks: references and files first */
        gr_ref_release(r);
        gr_close(f);
        gr_disconnect(c);
        _exit(0);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_uint_eq(tu_stat_on(c, "leases_active"), leases);
    ck_assert_uint_eq(tu_stat_on(c, "handles_open"), handles);
    ck_assert(tu_check_pattern(p, 11, 0, 100));
    gr_ref_release(r);
    reads = tu_stat_on(c, "read_requests");
    read_check(f, 11, 0, CHUNK);        /* still served from the kept lease */
    ck_assert_uint_eq(tu_stat_on(c, "read_requests"), reads);
    g = gr_open(c, src_path("fk2"));    /* takes the lowest free handle number */
    ck_assert_ptr_nonnull(g);
    read_check(g, 12, 0, CHUNK);
    read_check(f, 11, 0, CHUNK);
    gr_close(g);
    gr_close(f);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
    ck_assert_uint_eq(tu_stat(&d, "lease_errors"), errors);
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
    tcase_add_test(tc, test_soft_entries_revalidated);
    tcase_add_test(tc, test_eviction_races_soft_reads);
    tcase_add_test(tc, test_soft_entries_dropped_at_reconnect);
    tcase_add_test(tc, test_soft_entries_after_ttl);
    tcase_add_test(tc, test_kept_leases_of_a_dropped_connection);
    tcase_add_test(tc, test_lookahead_in_hint_order);
    tcase_add_test(tc, test_lookahead_out_of_order);
    tcase_add_test(tc, test_lookahead_skips);
    tcase_add_test(tc, test_lookahead_across_a_restart);
    tcase_add_test(tc, test_lookahead_with_proofs);
    tcase_add_test(tc, test_open_ahead);
    tcase_add_test(tc, test_forked_child_lets_go_silently);
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
