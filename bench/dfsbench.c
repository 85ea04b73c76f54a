/*
 * dfsbench.c - the reader of the DFS benchmarks (bench/dfs.sh): reads a
 * list of files the way a training job would, through one of the systems a
 * user could put between the job and the distributed filesystem, from
 * several processes at once, and prints one JSON line of what it measured.
 *
 *   dfsbench read  --sys SYS [-s SOCK] --list FILE [--procs N] [--order list|shuffle]
 *                  [--seed X] [--pattern whole|rand] [--block BYTES] [--ops N]
 *                  [--chunk BYTES]
 *   dfsbench train --sys SYS [-s SOCK] --list FILE [--procs N] [--seed X]
 *                  --compute-us U [--hints] [--chunk BYTES]
 *
 * SYS:
 *   file       open/pread/close on the paths as listed (the DFS mount with or
 *              without its page cache, or a staged local copy: the caller
 *              lists those paths)
 *   granary    libgranary: gr_open, gr_pread, gr_close on socket SOCK
 *   memcached  a read-through chunk cache: GET each chunk of --chunk bytes
 *   redis      (key: hash of the path and the chunk number) from the server
 *              at SOCK; on a miss pread it from the listed path and SET it
 *
 * The list (one path a line) is cut among the processes round-robin after
 * an optional shuffle (--order shuffle, --seed): process p reads items p,
 * p+N, ...  Patterns for read: whole (each item read whole, in --block
 * pieces, default 4M; one operation per item) and rand (--ops reads of
 * --block bytes at block-aligned offsets of random items, spread over the
 * processes; handles are kept open across operations).  Latency is per
 * operation, merged over processes.
 *
 * train is the training-loop stall measurement: each process reads its
 * share of the (shuffled) items one after another, and after each one
 * "computes" for --compute-us microseconds (a sleep: the GPU's time, during
 * which a prefetching cache can work).  Stall fraction = the time a process
 * waited for data / its epoch time, averaged over processes.  With --hints
 * (granary only) each process first tells the daemon its whole order with
 * gr_hint_append; a failure to do so is reported in the JSON ("hints") and
 * the epoch runs without.
 *
 * Each process connects and opens what it needs, then all start together
 * (a pipe closed by the parent); the clock is the parent's, from the start
 * to the last process's exit.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "granary.h"
#include "kv.h"
#include "util.h"

/* Job hints are being added to libgranary as this is written: weak, so that
 * this program builds against a libgranary without them and reports
 * "hints": "failed" (ENOSYS) instead. */
#pragma weak gr_hint_append

enum sys { SYS_FILE, SYS_GRANARY, SYS_MEMCACHED, SYS_REDIS };
static const char *const sys_names[] = { "file", "granary", "memcached", "redis" };

#define MAX_PROCS 64

typedef struct opts {
    enum sys sys;
    const char *sock;
    const char *list;
    int procs;
    int shuffle;
    uint64_t seed;
    int rand;                           /* pattern rand, else whole */
    size_t block;
    uint64_t ops;                       /* rand: total operations */
    size_t chunk;                       /* memcached/redis value size */
    int train;
    long compute_us;
    int hints;
} opts;

typedef struct item {
    char *path;
    uint64_t size;
} item;

/* One process's results, in memory shared with the parent. */
typedef struct result {
    uint64_t ops, bytes, hits, misses;
    uint64_t stall_ns, wall_ns;
    int err;                            /* 0, or -errno of the failure */
    int hints_err;                      /* errno of gr_hint_append, 0 if fine */
    char why[200];
} result;

/* FNV-1a: the memcached key of a path must be short and without spaces. */
static uint64_t fnv64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325u;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3u;
    return h;
}

/* ---- one reading process ---- */

typedef struct reader {
    const opts *o;
    const item *items;
    size_t nitems;
    gr_client *c;
    kv k;
    gr_file **gf;                       /* rand: handles kept open, per item */
    int *fd;
    unsigned char *buf, *chunkbuf;
    result *res;
} reader;

static int fail(reader *r, int err, const char *what, const char *path)
{
    snprintf(r->res->why, sizeof(r->res->why), "%s %s: %s%s%s", what, path ? path : "",
             strerror(err), r->c ? " / " : "", r->c ? gr_strerror_last(r->c) : "");
    return -err;
}

static int reader_open(reader *r)
{
    const opts *o = r->o;
    int rc;

    if (o->sys == SYS_GRANARY) {
        r->c = gr_connect(o->sock);
        if (!r->c)
            return fail(r, errno, "gr_connect", o->sock);
    } else if (o->sys == SYS_MEMCACHED || o->sys == SYS_REDIS) {
        rc = kv_connect(&r->k, o->sock, o->sys == SYS_MEMCACHED ? KV_MEMCACHED : KV_REDIS);
        if (rc < 0)
            return fail(r, -rc, "connect", o->sock);
    }
    r->gf = calloc(r->nitems, sizeof(*r->gf));
    r->fd = malloc(r->nitems * sizeof(*r->fd));
    r->buf = aligned_alloc(4096, o->block);
    r->chunkbuf = aligned_alloc(4096, o->chunk);
    if (!r->gf || !r->fd || !r->buf || !r->chunkbuf)
        return fail(r, ENOMEM, "malloc", NULL);
    for (size_t i = 0; i < r->nitems; i++)
        r->fd[i] = -1;
    return 0;
}

/* The file descriptor of item i (kept open when keep). */
static int item_fd(reader *r, size_t i, int keep)
{
    if (r->fd[i] >= 0)
        return r->fd[i];
    int fd = open(r->items[i].path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(r, errno, "open", r->items[i].path);
    if (keep)
        r->fd[i] = fd;
    return fd;
}

static void item_done(reader *r, size_t i, int fd)
{
    if (fd >= 0 && r->fd[i] != fd)
        close(fd);
}

/* Bytes [off, off+len) of item i into r->buf through the key-value server;
 * len fits r->buf.  Chunk by chunk: GET, else pread from the DFS and SET. */
static ssize_t kv_read(reader *r, size_t i, uint64_t off, size_t len, int keep)
{
    const item *it = &r->items[i];
    size_t chunk = r->o->chunk, done = 0;
    uint64_t h = fnv64(it->path);
    int fd = -1;

    while (done < len) {
        uint64_t cno = (off + done) / chunk, cstart = cno * chunk;
        size_t clen = (size_t)(it->size - cstart < chunk ? it->size - cstart : chunk);
        char key[64];
        int64_t got;

        snprintf(key, sizeof(key), "c%016" PRIx64 "_%" PRIu64, h, cno);
        got = kv_get(&r->k, key, r->chunkbuf, chunk);
        if (got == -ENOENT) {
            r->res->misses++;
            if (fd < 0 && (fd = item_fd(r, i, keep)) < 0)
                return fd;
            size_t have = 0;
            while (have < clen) {
                ssize_t n = pread(fd, r->chunkbuf + have, clen - have, (off_t)(cstart + have));
                if (n <= 0) {
                    item_done(r, i, fd);
                    return fail(r, n < 0 ? errno : EIO, "pread", it->path);
                }
                have += (size_t)n;
            }
            int rc = kv_set(&r->k, key, r->chunkbuf, clen);
            if (rc < 0) {
                item_done(r, i, fd);
                return fail(r, -rc, "set", key);
            }
            got = (int64_t)clen;
        } else if (got < 0) {
            item_done(r, i, fd);
            return fail(r, (int)-got, "get", key);
        } else {
            r->res->hits++;
        }
        size_t from = (size_t)(off + done - cstart);
        size_t n = (size_t)got - from < len - done ? (size_t)got - from : len - done;
        memcpy(r->buf + done, r->chunkbuf + from, n);
        done += n;
    }
    item_done(r, i, fd);
    return (ssize_t)done;
}

/* Read bytes [off, off+len) of item i (len <= block) into r->buf. */
static ssize_t read_range(reader *r, size_t i, uint64_t off, size_t len, int keep)
{
    const item *it = &r->items[i];
    ssize_t n;

    switch (r->o->sys) {
    case SYS_GRANARY:
        if (!r->gf[i]) {
            r->gf[i] = gr_open(r->c, it->path);
            if (!r->gf[i])
                return fail(r, errno, "gr_open", it->path);
        }
        n = gr_pread(r->gf[i], r->buf, len, (off_t)off);
        if (n < 0)
            return fail(r, errno, "gr_pread", it->path);
        return n;
    case SYS_FILE: {
        int fd = item_fd(r, i, keep);
        if (fd < 0)
            return fd;
        n = pread(fd, r->buf, len, (off_t)off);
        if (n < 0)
            n = fail(r, errno, "pread", it->path);
        item_done(r, i, fd);
        return n;
    }
    default:
        return kv_read(r, i, off, len, keep);
    }
}

/* Read item i whole, block by block; returns its bytes or -errno.  The
 * handle is opened for the item and closed after it. */
static int64_t read_whole(reader *r, size_t i)
{
    const item *it = &r->items[i];
    uint64_t off = 0;
    int fd = -1;

    if (r->o->sys == SYS_FILE && (fd = item_fd(r, i, 1)) < 0)
        return fd;
    while (off < it->size) {
        size_t len = it->size - off < r->o->block ? (size_t)(it->size - off) : r->o->block;
        ssize_t n = read_range(r, i, off, len, 1);
        if (n <= 0) {
            if (n == 0)
                n = fail(r, EIO, "short read of", it->path);
            return n;
        }
        off += (uint64_t)n;
    }
    if (r->o->sys == SYS_GRANARY && r->gf[i]) {
        gr_close(r->gf[i]);
        r->gf[i] = NULL;
    }
    (void)fd;
    if (r->fd[i] >= 0) {                /* file, or a memcached/redis miss */
        close(r->fd[i]);
        r->fd[i] = -1;
    }
    return (int64_t)off;
}

static int hint_order(reader *r, const size_t *mine, size_t n)
{
    gr_hint *h;

    if (!gr_hint_append) {
        snprintf(r->res->why, sizeof(r->res->why), "gr_hint_append: not in this libgranary");
        return ENOSYS;
    }
    h = calloc(n ? n : 1, sizeof(*h));
    if (!h)
        return ENOMEM;
    for (size_t j = 0; j < n; j++)
        h[j] = (gr_hint){ .path = r->items[mine[j]].path, .off = 0, .len = 0 };
    int rc = gr_hint_append(r->c, h, n) < 0 ? errno : 0;
    if (rc)
        snprintf(r->res->why, sizeof(r->res->why), "gr_hint_append: %s / %s", strerror(rc),
                 gr_strerror_last(r->c));
    free(h);
    return rc;
}

/* One process: set up, say ready, wait for the start, read its share. */
static void child(const opts *o, const item *items, size_t nitems, const size_t *perm,
                  int p, result *res, uint64_t *lat, int ready_fd, int start_fd)
{
    reader r = { .o = o, .items = items, .nitems = nitems, .res = res };
    size_t *mine = malloc((nitems / (size_t)o->procs + 1) * sizeof(*mine)), n = 0;
    uint64_t seed = o->seed * 1000003u + (uint64_t)p + 1, t0, t;
    char c = 1;

    if (!mine) {
        res->err = -ENOMEM;
        _exit(1);
    }
    for (size_t j = (size_t)p; j < nitems; j += (size_t)o->procs)
        mine[n++] = perm[j];
    if ((res->err = reader_open(&r)) < 0)
        _exit(1);
    if (o->train && o->hints && o->sys == SYS_GRANARY)
        res->hints_err = hint_order(&r, mine, n);
    if (write(ready_fd, &c, 1) != 1 || read(start_fd, &c, 1) != 0)
        _exit(1);
    t0 = now_ns();
    if (o->rand) {
        uint64_t ops = o->ops / (uint64_t)o->procs;
        for (uint64_t k = 0; k < ops; k++) {
            size_t i = (size_t)(xorshift(&seed) % nitems);
            uint64_t blocks = (items[i].size + o->block - 1) / o->block;
            uint64_t off = (xorshift(&seed) % blocks) * o->block;
            size_t len = items[i].size - off < o->block ? (size_t)(items[i].size - off) : o->block;
            t = now_ns();
            ssize_t got = read_range(&r, i, off, len, 1);
            if (got < 0) {
                res->err = (int)got;
                _exit(1);
            }
            lat[res->ops++] = now_ns() - t;
            res->bytes += (uint64_t)got;
        }
    } else {
        struct timespec compute = { o->compute_us / 1000000, (o->compute_us % 1000000) * 1000 };
        for (size_t j = 0; j < n; j++) {
            t = now_ns();
            int64_t got = read_whole(&r, mine[j]);
            if (got < 0) {
                res->err = (int)got;
                _exit(1);
            }
            uint64_t d = now_ns() - t;
            lat[res->ops++] = d;
            res->bytes += (uint64_t)got;
            res->stall_ns += d;
            if (o->train && o->compute_us > 0)
                nanosleep(&compute, NULL);
        }
    }
    res->wall_ns = now_ns() - t0;
    _exit(0);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static item *load_list(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    item *v = NULL;
    size_t cap = 0;
    char line[4096];
    struct stat st;

    *n = 0;
    if (!f) {
        fprintf(stderr, "dfsbench: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!line[0])
            continue;
        if (stat(line, &st) < 0) {
            fprintf(stderr, "dfsbench: %s: %s\n", line, strerror(errno));
            exit(1);
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 1024;
            v = realloc(v, cap * sizeof(*v));
            if (!v)
                exit(1);
        }
        v[*n].path = strdup(line);
        v[*n].size = (uint64_t)st.st_size;
        (*n)++;
    }
    fclose(f);
    return v;
}

static int run(const opts *o)
{
    size_t nitems, nlat;
    item *items = load_list(o->list, &nitems);
    int ready[2], start[2], status, failed = 0;
    pid_t pids[MAX_PROCS];
    uint64_t t0, wall, ops = 0, bytes = 0, hits = 0, misses = 0;
    double stall = 0;

    if (!items || nitems == 0) {
        fprintf(stderr, "dfsbench: no items in %s\n", o->list);
        return 1;
    }
    /* Latency slots: process p writes from offset p * per. */
    size_t per = (o->rand ? (size_t)o->ops : nitems) / (size_t)o->procs + 1;
    nlat = per * (size_t)o->procs;
    size_t *perm = malloc(nitems * sizeof(*perm));
    result *res = mmap(NULL, sizeof(result) * MAX_PROCS, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    uint64_t *lat = mmap(NULL, nlat * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!perm || res == MAP_FAILED || lat == MAP_FAILED || pipe(ready) < 0 || pipe(start) < 0) {
        perror("dfsbench: setup");
        return 1;
    }
    memset(res, 0, sizeof(result) * MAX_PROCS);
    for (size_t i = 0; i < nitems; i++)
        perm[i] = i;
    if (o->shuffle) {
        uint64_t s = o->seed * 2654435761u + 7;
        for (size_t i = nitems - 1; i > 0; i--) {
            size_t j = (size_t)(xorshift(&s) % (i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    for (int p = 0; p < o->procs; p++) {
        pids[p] = fork();
        if (pids[p] < 0) {
            perror("dfsbench: fork");
            return 1;
        }
        if (pids[p] == 0) {
            close(ready[0]);
            close(start[1]);
            child(o, items, nitems, perm, p, &res[p], lat + (size_t)p * per, ready[1], start[0]);
        }
    }
    close(ready[1]);
    close(start[0]);
    for (int p = 0; p < o->procs; p++) {
        char c;
        if (read(ready[0], &c, 1) != 1)
            break;                      /* a process failed to set up */
    }
    t0 = now_ns();
    close(start[1]);
    for (int p = 0; p < o->procs; p++) {
        if (waitpid(pids[p], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed = 1;
    }
    wall = now_ns() - t0;
    for (int p = 0; p < o->procs; p++) {
        if (res[p].err) {
            fprintf(stderr, "dfsbench: process %d: %s\n", p, res[p].why);
            failed = 1;
        }
    }
    if (failed)
        return 1;

    /* Merge the latencies of all processes. */
    size_t nl = 0;
    for (int p = 0; p < o->procs; p++) {
        memmove(lat + nl, lat + (size_t)p * per, res[p].ops * sizeof(uint64_t));
        nl += res[p].ops;
        ops += res[p].ops;
        bytes += res[p].bytes;
        hits += res[p].hits;
        misses += res[p].misses;
        if (res[p].wall_ns)
            stall += (double)res[p].stall_ns / (double)res[p].wall_ns;
    }
    qsort(lat, nl, sizeof(uint64_t), cmp_u64);
    double secs = (double)wall * 1e-9;
    printf("{\"sys\": \"%s\", \"mode\": \"%s\", \"pattern\": \"%s\", \"procs\": %d, "
           "\"items\": %zu, \"ops\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"seconds\": %.4f, "
           "\"MBps\": %.1f, \"ops_per_s\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f",
           sys_names[o->sys], o->train ? "train" : "read", o->rand ? "rand" : "whole", o->procs,
           nitems, ops, bytes, secs, (double)bytes / secs / 1e6, (double)ops / secs,
           nl ? (double)lat[nl / 2] / 1e3 : 0.0, nl ? (double)lat[nl * 99 / 100] / 1e3 : 0.0);
    if (o->sys == SYS_MEMCACHED || o->sys == SYS_REDIS)
        printf(", \"kv_hits\": %" PRIu64 ", \"kv_misses\": %" PRIu64 ", \"hit_ratio\": %.4f", hits,
               misses, hits + misses ? (double)hits / (double)(hits + misses) : 0.0);
    if (o->train) {
        printf(", \"compute_us\": %ld, \"stall_frac\": %.4f, \"epoch_s\": %.4f", o->compute_us,
               stall / o->procs, secs);
        if (o->hints)
            printf(", \"hints\": \"%s\"", res[0].hints_err ? "failed" : "ok");
        if (o->hints && res[0].hints_err)
            printf(", \"hints_error\": \"%s\"", strerror(res[0].hints_err));
    }
    printf("}\n");
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: dfsbench read|train --sys file|granary|memcached|redis [-s SOCK] --list FILE\n"
            "       [--procs N] [--order list|shuffle] [--seed X] [--pattern whole|rand]\n"
            "       [--block BYTES] [--ops N] [--chunk BYTES] [--compute-us U] [--hints]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        { "sys", 1, 0, 'y' }, { "socket", 1, 0, 's' }, { "list", 1, 0, 'l' },
        { "procs", 1, 0, 'p' }, { "order", 1, 0, 'O' }, { "seed", 1, 0, 'S' },
        { "pattern", 1, 0, 'P' }, { "block", 1, 0, 'b' }, { "ops", 1, 0, 'n' },
        { "chunk", 1, 0, 'c' }, { "compute-us", 1, 0, 'u' }, { "hints", 0, 0, 'H' },
        { 0, 0, 0, 0 },
    };
    opts o = { .sys = SYS_FILE, .procs = 1, .block = 4u << 20, .ops = 1000, .chunk = 1u << 20 };
    int ch;

    if (argc < 2)
        usage();
    if (strcmp(argv[1], "train") == 0)
        o.train = 1;
    else if (strcmp(argv[1], "read") != 0)
        usage();
    optind = 2;
    while ((ch = getopt_long(argc, argv, "s:", lo, NULL)) != -1) {
        switch (ch) {
        case 'y':
            for (o.sys = 0; o.sys <= SYS_REDIS && strcmp(optarg, sys_names[o.sys]) != 0; o.sys++)
                ;
            if (o.sys > SYS_REDIS)
                usage();
            break;
        case 's': o.sock = optarg; break;
        case 'l': o.list = optarg; break;
        case 'p': o.procs = atoi(optarg); break;
        case 'O': o.shuffle = strcmp(optarg, "shuffle") == 0; break;
        case 'S': o.seed = strtoull(optarg, NULL, 0); break;
        case 'P': o.rand = strcmp(optarg, "rand") == 0; break;
        case 'b': o.block = parse_size(optarg); break;
        case 'n': o.ops = strtoull(optarg, NULL, 0); break;
        case 'c': o.chunk = parse_size(optarg); break;
        case 'u': o.compute_us = atol(optarg); break;
        case 'H': o.hints = 1; break;
        default: usage();
        }
    }
    if (!o.list || o.procs < 1 || o.procs > MAX_PROCS || o.block == 0 || o.chunk == 0 ||
        (o.sys != SYS_FILE && !o.sock && o.sys != SYS_GRANARY) || (o.train && o.rand))
        usage();
    return run(&o);
}
