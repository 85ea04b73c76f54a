/*
 * hotbench.c - the DRAM-tier benchmarks of issue 3: reads of bytes that are
 * already in memory, through granaryd (gr_pread, gr_read_ref), plain
 * pread(2) from the page cache, memcached and Redis, side by side.
 * bench/hot.sh starts the servers and drives this program.
 *
 *   hotbench load   --sys memcached|redis -s SOCK --file PATH --size BYTES [--count N]
 *   hotbench run    --sys SYS -s SOCK --file PATH --size BYTES
 *                   [--pattern seq|rand] [--procs N] [--secs S] [--count N] [--scenario NAME]
 *   hotbench report JSONL
 *
 * SYS for run: gr (gr_pread), ref (gr_read_ref, sum the bytes,
 * gr_ref_release), ref-notouch (the same without reading the bytes), pread
 * (the page cache), memcached, redis.
 *
 * Value i of a key-value server holds the file's bytes [i*size, (i+1)*size),
 * under the key "g<size>_<i>"; load stores the first count of them (default:
 * as many as fit in the file).  run reads whole pieces: in order (seq,
 * repeated passes) or at random (rand), from procs forked processes that
 * each connect on their own, for secs seconds after a common start.  Before
 * the clock starts each process reads a few pieces and compares them with
 * the file (seq: every piece once, which also fills granaryd's DRAM tier).
 * run prints one JSON line: aggregate ops/s and bytes/s, latency per
 * operation (p50/p99, merged over processes) and, for granary, the chunk
 * lookups that missed DRAM while the clock ran (0 when it measured DRAM).
 *
 * The memcached and Redis clients are minimal hand-written ones (text
 * protocol and RESP over a Unix stream socket): a value is received straight
 * into the caller's buffer after its header, as a good client would.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "granary.h"
#include "kv.h"
#include "util.h"

enum sys { SYS_GR, SYS_REF, SYS_REF_NOTOUCH, SYS_PREAD, SYS_MEMCACHED, SYS_REDIS };

static const char *const sys_names[] = {
    "gr", "ref", "ref-notouch", "pread", "memcached", "redis",
};

/* What the JSON lines and the tables call each system. */
static const char *const sys_labels[] = {
    "granary gr_pread", "granary gr_read_ref + sum", "granary gr_read_ref, bytes not touched",
    "pread, page cache", "memcached", "redis",
};

#define MAX_PROCS 64
#define MAX_SAMPLES (8u << 20)          /* latencies kept per process */

typedef struct opts {
    enum sys sys;
    const char *sock;
    const char *file;
    const char *scenario;
    size_t size;                        /* bytes per operation */
    uint64_t count;                     /* pieces addressed (0: all that fit) */
    int rand;                           /* random pieces, else in order */
    int procs;
    double secs;
    int round;                          /* only echoed in the JSON line */
} opts;

/* One process's results, in memory shared with the parent. */
typedef struct result {
    uint64_t ops;
    uint64_t bytes;
    uint64_t nsamples;
    double seconds;
    int err;                            /* 0, or why the process failed */
    char why[160];
} result;

static double now(void)
{
    return gr__now_s();
}

static void key_of(char *key, size_t len, size_t size, uint64_t i)
{
    snprintf(key, len, "g%zu_%" PRIu64, size, i);
}

/* ---- one measuring process ---- */

/* Everything a process reads through; set up before the clock starts. */
typedef struct reader {
    enum sys sys;
    size_t size;
    gr_client *c;
    gr_file *f;
    int fd;                             /* the file, for pread and checks */
    kv k;
    unsigned char *buf;
    volatile uint64_t sink;             /* keeps the sums alive */
} reader;

/* The sum of the 64-bit words of p: reads every byte.  Four accumulators,
 * since one serial chain of adds runs below memory bandwidth here (7 GB/s
 * against 9 for four, memcpy 8.5-9). */
static uint64_t sum64(const void *p, size_t n)
{
    const uint64_t *w = p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0, words = n / 8;

    for (; i + 4 <= words; i += 4) {
        a += w[i];
        b += w[i + 1];
        c += w[i + 2];
        d += w[i + 3];
    }
    for (; i < words; i++)
        a += w[i];
    return a + b + c + d;
}

/* Read piece i.  check: compare with the file.  Returns 0 or -errno. */
static int read_piece(reader *r, uint64_t i, int check, char *why, size_t whylen)
{
    off_t off = (off_t)(i * r->size);
    const void *data = r->buf;
    gr_ref *ref = NULL;
    ssize_t n;
    char key[64];
    int e = EIO;

    switch (r->sys) {
    case SYS_GR:
        n = gr_pread(r->f, r->buf, r->size, off);
        if (n < 0)
            snprintf(why, whylen, "gr_pread: %s (%s)", strerror(e = errno), gr_strerror_last(r->c));
        break;
    case SYS_REF:
    case SYS_REF_NOTOUCH:
        n = gr_read_ref(r->f, off, r->size, &data, &ref);
        if (n < 0)
            snprintf(why, whylen, "gr_read_ref: %s (%s)", strerror(e = errno), gr_strerror_last(r->c));
        else if (r->sys == SYS_REF)
            r->sink += sum64(data, (size_t)n);
        break;
    case SYS_PREAD:
        n = pread(r->fd, r->buf, r->size, off);
        if (n < 0)
            snprintf(why, whylen, "pread: %s", strerror(e = errno));
        break;
    default:
        key_of(key, sizeof(key), r->size, i);
        n = kv_get(&r->k, key, r->buf, r->size);
        if (n < 0) {
            e = (int)-n;
            snprintf(why, whylen, "GET %s: %s", key, strerror(e));
        }
        break;
    }
    if (n < 0)
        return -e;
    if (n != (ssize_t)r->size) {
        gr_ref_release(ref);
        snprintf(why, whylen, "piece %" PRIu64 ": %zd bytes, expected %zu", i, n, r->size);
        return -EIO;
    }
    if (check) {
        static unsigned char *want;
        if (!want && !(want = malloc(r->size)))
            return -ENOMEM;
        if (pread(r->fd, want, r->size, off) != (ssize_t)r->size || memcmp(want, data, r->size)) {
            gr_ref_release(ref);
            snprintf(why, whylen, "piece %" PRIu64 ": bytes differ from the file", i);
            return -EIO;
        }
    }
    gr_ref_release(ref);
    return 0;
}

static int reader_open(reader *r, const opts *o, char *why, size_t whylen)
{
    int rc;

    r->sys = o->sys;
    r->size = o->size;
    r->buf = aligned_alloc(4096, (o->size + 4095) & ~(size_t)4095);
    if (!r->buf)
        return -ENOMEM;
    memset(r->buf, 0, o->size);         /* fault the buffer in before the clock */
    r->fd = open(o->file, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        snprintf(why, whylen, "open %s: %s", o->file, strerror(errno));
        return -errno;
    }
    if (o->sys <= SYS_REF_NOTOUCH) {
        if (!(r->c = gr_connect(o->sock))) {
            snprintf(why, whylen, "gr_connect %s: %s", o->sock, strerror(errno));
            return -errno;
        }
        if (!(r->f = gr_open(r->c, o->file))) {
            snprintf(why, whylen, "gr_open %s: %s", o->file, gr_strerror_last(r->c));
            return -errno;
        }
    } else if (o->sys >= SYS_MEMCACHED) {
        if ((rc = kv_connect(&r->k, o->sock, o->sys == SYS_MEMCACHED ? KV_MEMCACHED : KV_REDIS)) < 0) {
            snprintf(why, whylen, "connect %s: %s", o->sock, strerror(-rc));
            return rc;
        }
    }
    return 0;
}

static void child(const opts *o, int idx, uint64_t npieces, int ready_fd, int start_fd,
                  result *res, uint32_t *lat)
{
    reader r = { 0 };
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(idx + 1), i = 0, ops = 0;
    double t0, deadline;
    char c = 0;
    int rc;

    if ((rc = reader_open(&r, o, res->why, sizeof(res->why))) < 0)
        goto out;
    /* Check the bytes before measuring.  Every piece once, in order, for
     * the sequential pattern and for granary: that brings them into
     * granaryd's DRAM and maps their pages into this process, as a
     * long-running reader would have them (a first touch costs a page fault
     * per 4 KiB).  A key-value server or the page cache keeps no such state
     * per process, so a few random pieces check those. */
    int full = !o->rand || o->sys <= SYS_REF_NOTOUCH;
    for (uint64_t k = 0; k < (full ? npieces : 64); k++) {
        uint64_t p = full ? k : xorshift(&seed) % npieces;
        if ((rc = read_piece(&r, p, 1, res->why, sizeof(res->why))) < 0)
            goto out;
    }
    if (write(ready_fd, &c, 1) != 1 || read(start_fd, &c, 1) != 0) {
        rc = -EPIPE;
        snprintf(res->why, sizeof(res->why), "start barrier broken");
        goto out;
    }
    t0 = now();
    deadline = t0 + o->secs;
    do {
        uint64_t p = o->rand ? xorshift(&seed) % npieces : i++ % npieces;
        uint64_t a = now_ns();
        if ((rc = read_piece(&r, p, 0, res->why, sizeof(res->why))) < 0)
            goto out;
        uint64_t d = now_ns() - a;
        if (ops < MAX_SAMPLES)
            lat[ops] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
        ops++;
    } while (now() < deadline);
    res->seconds = now() - t0;
    res->ops = ops;
    res->bytes = ops * o->size;
    res->nsamples = ops < MAX_SAMPLES ? ops : MAX_SAMPLES;
    rc = 0;
out:
    res->err = -rc;
    if (r.f)
        gr_close(r.f);
    gr_disconnect(r.c);
    _exit(rc ? 1 : 0);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

static int stat_cb(void *arg, const char *name, uint64_t value)
{
    uint64_t *v = arg;

    if (strcmp(name, "misses") == 0)
        v[0] = value;
    else if (strcmp(name, "hits_nvme") == 0)
        v[1] = value;
    return 0;
}

/* Chunk lookups that did not hit DRAM so far, or -1 if unknown. */
static int64_t gr_not_dram(const char *sock)
{
    gr_client *c = gr_connect(sock);
    uint64_t v[2] = { 0, 0 };
    int rc;

    if (!c)
        return -1;
    rc = gr_stats(c, stat_cb, v);
    gr_disconnect(c);
    return rc < 0 ? -1 : (int64_t)(v[0] + v[1]);
}

static int cmd_run(const opts *o)
{
    struct stat st;
    uint64_t npieces, total_ops = 0, total_bytes = 0, nlat = 0;
    size_t lat_len = (size_t)o->procs * MAX_SAMPLES * sizeof(uint32_t);
    result *res;
    uint32_t *lat;
    pid_t pids[MAX_PROCS];
    int ready[2], start[2], failed = 0;
    double secs = 0;
    int64_t miss0 = -1, miss1 = -1;

    if (stat(o->file, &st) < 0) {
        fprintf(stderr, "hotbench: %s: %s\n", o->file, strerror(errno));
        return 1;
    }
    npieces = (uint64_t)st.st_size / o->size;
    if (o->count && o->count < npieces)
        npieces = o->count;
    if (npieces == 0) {
        fprintf(stderr, "hotbench: %s is smaller than one piece\n", o->file);
        return 1;
    }
    res = mmap(NULL, sizeof(result) * (size_t)o->procs, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    lat = mmap(NULL, lat_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
               -1, 0);
    if (res == MAP_FAILED || lat == MAP_FAILED || pipe(ready) < 0 || pipe(start) < 0) {
        fprintf(stderr, "hotbench: set-up: %s\n", strerror(errno));
        return 1;
    }
    memset(res, 0, sizeof(result) * (size_t)o->procs);
    fflush(stdout);
    for (int p = 0; p < o->procs; p++) {
        pids[p] = fork();
        if (pids[p] < 0) {
            fprintf(stderr, "hotbench: fork: %s\n", strerror(errno));
            return 1;
        }
        if (pids[p] == 0) {
            close(ready[0]);
            close(start[1]);
            child(o, p, npieces, ready[1], start[0], &res[p], lat + (size_t)p * MAX_SAMPLES);
        }
    }
    close(ready[1]);
    close(start[0]);
    for (int p = 0; p < o->procs; p++) {
        char c;
        if (read(ready[0], &c, 1) != 1)
            break;                      /* a child died: its result says why */
    }
    if (o->sys <= SYS_REF_NOTOUCH)
        miss0 = gr_not_dram(o->sock);
    close(start[1]);                    /* go */
    for (int p = 0; p < o->procs; p++) {
        int status;
        while (waitpid(pids[p], &status, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || res[p].err) {
            fprintf(stderr, "hotbench: %s process %d failed: %s\n", sys_names[o->sys], p,
                    res[p].why[0] ? res[p].why : "killed");
            failed = 1;
        }
    }
    if (failed)
        return 1;
    if (o->sys <= SYS_REF_NOTOUCH)
        miss1 = gr_not_dram(o->sock);
    /* Gather every process's latencies at the front of the array. */
    for (int p = 0; p < o->procs; p++) {
        memmove(lat + nlat, lat + (size_t)p * MAX_SAMPLES, res[p].nsamples * sizeof(uint32_t));
        nlat += res[p].nsamples;
        total_ops += res[p].ops;
        total_bytes += res[p].bytes;
        if (res[p].seconds > secs)
            secs = res[p].seconds;
    }
    qsort(lat, nlat, sizeof(uint32_t), cmp_u32);
    printf("{\"scenario\": \"%s\", \"system\": \"%s\", \"label\": \"%s\", \"pattern\": \"%s\", "
           "\"size\": %zu, \"procs\": %d, \"pieces\": %" PRIu64 ", \"ops\": %" PRIu64 ", "
           "\"seconds\": %.4f, \"ops_per_s\": %.1f, \"GBps\": %.4f, "
           "\"p50_us\": %.2f, \"p99_us\": %.2f",
           o->scenario, sys_names[o->sys], sys_labels[o->sys], o->rand ? "rand" : "seq", o->size,
           o->procs, npieces, total_ops, secs, (double)total_ops / secs,
           (double)total_bytes / secs / 1e9, lat[nlat / 2] / 1e3,
           lat[(size_t)((double)nlat * 0.99)] / 1e3);
    if (miss0 >= 0 && miss1 >= 0)
        printf(", \"not_from_dram\": %" PRId64, miss1 - miss0);
    {
        /* Other work on the machine skews every number: say how much. */
        double load1 = -1;
        FILE *la = fopen("/proc/loadavg", "r");
        if (la) {
            if (fscanf(la, "%lf", &load1) != 1)
                load1 = -1;
            fclose(la);
        }
        printf(", \"round\": %d, \"load1\": %.2f}\n", o->round, load1);
    }
    munmap(lat, lat_len);
    munmap(res, sizeof(result) * (size_t)o->procs);
    return 0;
}

static int cmd_load(const opts *o)
{
    struct stat st;
    uint64_t n;
    unsigned char *buf = malloc(o->size);
    char key[64];
    int fd, rc;
    kv *k = malloc(sizeof(*k));

    if (!buf || !k || (fd = open(o->file, O_RDONLY)) < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "hotbench: %s: %s\n", o->file, strerror(errno));
        return 1;
    }
    n = (uint64_t)st.st_size / o->size;
    if (o->count && o->count < n)
        n = o->count;
    if ((rc = kv_connect(k, o->sock, o->sys == SYS_MEMCACHED ? KV_MEMCACHED : KV_REDIS)) < 0) {
        fprintf(stderr, "hotbench: connect %s: %s\n", o->sock, strerror(-rc));
        return 1;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (pread(fd, buf, o->size, (off_t)(i * o->size)) != (ssize_t)o->size) {
            fprintf(stderr, "hotbench: short read of %s\n", o->file);
            return 1;
        }
        key_of(key, sizeof(key), o->size, i);
        if ((rc = kv_set(k, key, buf, o->size)) != 0) {
            fprintf(stderr, "hotbench: %s SET %s (%zu bytes): %s\n", sys_names[o->sys], key,
                    o->size, rc > 0 ? "out of memory" : strerror(-rc));
            return 1;
        }
    }
    kv_close(k);
    close(fd);
    free(k);
    free(buf);
    return 0;
}

/* ---- report: Markdown tables and ratio lines from the JSON lines ---- */

#define MAX_ROUNDS 16

/* One case (scenario, system, size, procs), over the rounds it ran. */
typedef struct row {
    char scenario[32], system[32], label[64];
    size_t size;
    int procs;
    int n;                              /* rounds seen */
    int round[MAX_ROUNDS];
    double ops[MAX_ROUNDS], gbps[MAX_ROUNDS], p50[MAX_ROUNDS], p99[MAX_ROUNDS];
    double load1;                       /* the highest seen */
    long long not_dram;                 /* summed over rounds */
} row;

static int jstr(const char *line, const char *key, char *out, size_t len)
{
    char pat[64];
    const char *p, *e;

    snprintf(pat, sizeof(pat), "\"%s\": \"", key);
    if (!(p = strstr(line, pat)))
        return -1;
    p += strlen(pat);
    if (!(e = strchr(p, '"')) || (size_t)(e - p) >= len)
        return -1;
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = '\0';
    return 0;
}

static double jnum(const char *line, const char *key, double dflt)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    if (!(p = strstr(line, pat)))
        return dflt;
    return strtod(p + strlen(pat), NULL);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The median of v[0..n) (n > 0); v is sorted in place. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double med_of(const double *v, int n)
{
    double t[MAX_ROUNDS];

    memcpy(t, v, sizeof(double) * (size_t)n);
    return median(t, n);
}

static void range_of(const double *v, int n, double *lo, double *hi)
{
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) {
        if (v[i] < *lo)
            *lo = v[i];
        if (v[i] > *hi)
            *hi = v[i];
    }
}

static row *find(row *rows, int n, const char *scenario, const char *system, size_t size, int procs)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].scenario, scenario) && !strcmp(rows[i].system, system) &&
            (!size || rows[i].size == size) && (!procs || rows[i].procs == procs))
            return &rows[i];
    return NULL;
}

/* "- what: R x": the median over rounds of a's value / b's value within the
 * same round (the cases of a round ran minutes apart at most, so load from
 * elsewhere on the machine cancels better than in a ratio of medians), with
 * the range over rounds and both medians. */
static void ratio(const row *a, const row *b, const char *what, int gbps)
{
    double r[MAX_ROUNDS], lo, hi;
    int n = 0;

    if (!a || !b)
        return;
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++)
            if (a->round[i] == b->round[j])
                r[n++] = gbps ? a->gbps[i] / b->gbps[j] : a->ops[i] / b->ops[j];
    if (n == 0)
        return;
    range_of(r, n, &lo, &hi);
    printf("- %s: **%.2fx** (rounds %.2f-%.2f; medians %.*f vs %.*f %s)\n", what, median(r, n), lo,
           hi, gbps ? 2 : 0, gbps ? med_of(a->gbps, a->n) : med_of(a->ops, a->n), gbps ? 2 : 0,
           gbps ? med_of(b->gbps, b->n) : med_of(b->ops, b->n), gbps ? "GB/s" : "ops/s");
}

static void size_name(char *out, size_t len, size_t size)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0)
        snprintf(out, len, "%zu MiB", size >> 20);
    else
        snprintf(out, len, "%zu KiB", size >> 10);
}

static int cmd_report(const char *path)
{
    FILE *fp = fopen(path, "r");
    static row rows[128];
    char line[1024], sz[32];
    int n = 0, rounds = 0;
    double lo, hi, maxload = 0;
    row *gr, *x;

    if (!fp) {
        fprintf(stderr, "hotbench: %s: %s\n", path, strerror(errno));
        return 1;
    }
    while (fgets(line, sizeof(line), fp)) {
        row t = { .n = 0 }, *r;
        if (jstr(line, "scenario", t.scenario, sizeof(t.scenario)) < 0 ||
            jstr(line, "system", t.system, sizeof(t.system)) < 0 ||
            jstr(line, "label", t.label, sizeof(t.label)) < 0)
            continue;
        t.size = (size_t)jnum(line, "size", 0);
        t.procs = (int)jnum(line, "procs", 1);
        if (!(r = find(rows, n, t.scenario, t.system, t.size, t.procs))) {
            if (n == 128)
                continue;
            r = &rows[n++];
            *r = t;
        }
        if (r->n == MAX_ROUNDS)
            continue;
        r->round[r->n] = (int)jnum(line, "round", 0);
        r->ops[r->n] = jnum(line, "ops_per_s", 0);
        r->gbps[r->n] = jnum(line, "GBps", 0);
        r->p50[r->n] = jnum(line, "p50_us", 0);
        r->p99[r->n] = jnum(line, "p99_us", 0);
        r->not_dram += (long long)jnum(line, "not_from_dram", 0);
        if (jnum(line, "load1", 0) > r->load1)
            r->load1 = jnum(line, "load1", 0);
        if (r->load1 > maxload)
            maxload = r->load1;
        r->n++;
        if (r->n > rounds)
            rounds = r->n;
    }
    fclose(fp);
    printf("Medians over %d rounds (the cases interleaved within each round); ranges are the lowest "
           "and highest round. Highest 1-minute load average seen after a case: %.2f.\n\n",
           rounds, maxload);

    printf("## 1. Hot reads, one client, 4 MiB reads of bytes held in memory\n\n");
    printf("| system | GB/s | range | reads/s | p50 us | p99 us |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const row *r = &rows[i];
        if (strcmp(r->scenario, "hot4m"))
            continue;
        range_of(r->gbps, r->n, &lo, &hi);
        printf("| %s%s | %.2f | %.2f-%.2f | %.0f | %.0f | %.0f |\n", r->label,
               r->not_dram > 0 ? " (NOT ALL FROM DRAM)" : "", med_of(r->gbps, r->n), lo, hi,
               med_of(r->ops, r->n), med_of(r->p50, r->n), med_of(r->p99, r->n));
    }
    printf("\n");
    gr = find(rows, n, "hot4m", "gr", 0, 0);
    x = find(rows, n, "hot4m", "pread", 0, 0);
    ratio(gr, x, "gr_pread / page-cache pread", 1);
    ratio(find(rows, n, "hot4m", "ref", 0, 0), x, "zero-copy (gr_read_ref + sum) / page-cache pread", 1);
    ratio(find(rows, n, "hot4m", "ref-notouch", 0, 0), x,
          "zero-copy, bytes not touched / page-cache pread", 1);
    ratio(gr, find(rows, n, "hot4m", "memcached", 0, 0), "gr_pread / memcached", 1);
    ratio(gr, find(rows, n, "hot4m", "redis", 0, 0), "gr_pread / redis", 1);

    printf("\n## 2. Small random reads at aligned offsets, bytes held in memory\n\n");
    printf("| size | procs | system | ops/s | range | MB/s | p50 us | p99 us |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const row *r = &rows[i];
        if (strcmp(r->scenario, "rand"))
            continue;
        size_name(sz, sizeof(sz), r->size);
        range_of(r->ops, r->n, &lo, &hi);
        printf("| %s | %d | %s%s | %.0f | %.0f-%.0f | %.0f | %.1f | %.1f |\n", sz, r->procs,
               r->label, r->not_dram > 0 ? " (NOT ALL FROM DRAM)" : "", med_of(r->ops, r->n), lo,
               hi, med_of(r->gbps, r->n) * 1e3, med_of(r->p50, r->n), med_of(r->p99, r->n));
    }
    printf("\n");
    for (int i = 0; i < n; i++) {
        const row *r = &rows[i];
        char what[128];
        if (strcmp(r->scenario, "rand") || strcmp(r->system, "gr"))
            continue;
        size_name(sz, sizeof(sz), r->size);
        x = find(rows, n, "rand", "memcached", r->size, r->procs);
        snprintf(what, sizeof(what), "%s x %d procs, gr_pread / memcached", sz, r->procs);
        ratio(r, x, what, 0);
        if (x)
            printf("  - p50 %.1f vs %.1f us, p99 %.1f vs %.1f us\n", med_of(r->p50, r->n),
                   med_of(x->p50, x->n), med_of(r->p99, r->n), med_of(x->p99, x->n));
        snprintf(what, sizeof(what), "%s x %d procs, gr_pread / redis", sz, r->procs);
        ratio(r, find(rows, n, "rand", "redis", r->size, r->procs), what, 0);
        snprintf(what, sizeof(what), "%s x %d procs, gr_pread / page-cache pread", sz, r->procs);
        ratio(r, find(rows, n, "rand", "pread", r->size, r->procs), what, 0);
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: hotbench load --sys memcached|redis -s SOCK --file PATH --size BYTES [--count N]\n"
            "       hotbench run --sys gr|ref|ref-notouch|pread|memcached|redis [-s SOCK] --file PATH\n"
            "                    --size BYTES [--pattern seq|rand] [--procs N] [--secs S] [--count N]\n"
            "                    [--scenario NAME] [--round N]\n"
            "       hotbench report JSONL\n");
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        { "sys", required_argument, NULL, 'y' },
        { "socket", required_argument, NULL, 's' },
        { "file", required_argument, NULL, 'f' },
        { "size", required_argument, NULL, 'z' },
        { "count", required_argument, NULL, 'n' },
        { "pattern", required_argument, NULL, 'p' },
        { "procs", required_argument, NULL, 'j' },
        { "secs", required_argument, NULL, 't' },
        { "scenario", required_argument, NULL, 'c' },
        { "round", required_argument, NULL, 'r' },
        { NULL, 0, NULL, 0 },
    };
    opts o = { .sys = SYS_GR, .size = 4u << 20, .procs = 1, .secs = 3, .scenario = "" };
    const char *cmd;
    int opt, have_sys = 0;

    if (argc < 2) {
        usage();
        return 2;
    }
    cmd = argv[1];
    optind = 2;
    while ((opt = getopt_long(argc, argv, "s:", lopts, NULL)) != -1) {
        switch (opt) {
        case 'y':
            have_sys = 0;
            for (size_t i = 0; i < sizeof(sys_names) / sizeof(sys_names[0]); i++)
                if (!strcmp(optarg, sys_names[i])) {
                    o.sys = (enum sys)i;
                    have_sys = 1;
                }
            if (!have_sys) {
                fprintf(stderr, "hotbench: unknown system %s\n", optarg);
                return 2;
            }
            break;
        case 's': o.sock = optarg; break;
        case 'f': o.file = optarg; break;
        case 'z': o.size = parse_size(optarg); break;
        case 'n': o.count = strtoull(optarg, NULL, 0); break;
        case 'p': o.rand = !strcmp(optarg, "rand"); break;
        case 'j': o.procs = atoi(optarg); break;
        case 't': o.secs = strtod(optarg, NULL); break;
        case 'c': o.scenario = optarg; break;
        case 'r': o.round = atoi(optarg); break;
        default: usage(); return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (!strcmp(cmd, "report") && optind < argc)
        return cmd_report(argv[optind]);
    if (!o.file || o.size == 0 || o.size % 8 || o.procs < 1 || o.procs > MAX_PROCS ||
        o.secs <= 0 || (o.sys >= SYS_MEMCACHED && !o.sock)) {
        usage();
        return 2;
    }
    /* granaryd takes absolute paths only. */
    char *abs = realpath(o.file, NULL);
    if (!abs) {
        fprintf(stderr, "hotbench: %s: %s\n", o.file, strerror(errno));
        return 1;
    }
    o.file = abs;
    if (!strcmp(cmd, "load") && o.sys >= SYS_MEMCACHED)
        return cmd_load(&o);
    if (!strcmp(cmd, "run"))
        return cmd_run(&o);
    usage();
    return 2;
}
