/*
 * granaryctl.c - the admin CLI: read files through the daemon, show its
 * counters (once, or live with top), check its health and configuration,
 * evict, invalidate, pin or unpin files, and warm the cache up.  Errors are one line on
 * stderr; exit codes: 0 success, 1 the operation failed (or: unhealthy),
 * 2 usage error, 3 the daemon cannot be reached, 4 not allowed (admin
 * commands are for root and the daemon's admin_group).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

#include "granary.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define EXIT_CONNECT 3
#define EXIT_DENIED 4
#define CAT_BUF (16u << 20)

static const char *socket_path;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: granaryctl [-s SOCKET] COMMAND [ARGS]\n"
            "commands:\n"
            "  cat PATH...        write the files' bytes, read through the daemon, to stdout\n"
            "  stats [--json]     the daemon's counters, as a table or one JSON object\n"
            "  top [-n N] [-i S]  live view: hit ratio, throughput, source bandwidth (N times, every S s)\n"
            "  health             \"ok: ...\" and exit 0, or the reason and exit 1\n"
            "  config             the daemon's running configuration\n"
            "  evict PATH...      drop the files' cached chunks (admin)\n"
            "  invalidate PATH... drop them and re-check the files on next open (admin)\n"
            "  pin PATH...        never evict the files' chunks, until unpin or restart (admin)\n"
            "  unpin PATH...      undo pin (admin)\n"
            "  warmup PATH... [--from-file LIST] [--wait] [--max-bandwidth RATE]\n"
            "                     read files and directories into the cache (admin)\n"
            "  warmup --status    list warmup jobs;  warmup --cancel ID  stop one (admin)\n"
            "options:\n"
            "  -s, --socket PATH  the daemon's socket (default: $GRANARY_SOCKET, else the\n"
            "                     [daemon] socket of /etc/granary/granary.conf)\n"
            "  -h, --help         this text; COMMAND --help for a command's\n"
            "exit status: 0 ok, 1 failed, 2 usage, 3 daemon unreachable, 4 not allowed\n");
}

static gr_client *connect_or_die(void)
{
    gr_client *c = gr_connect(socket_path);

    if (!c) {
        fprintf(stderr, "granaryctl: %s\n", gr_strerror_last(NULL));
        exit(EXIT_CONNECT);
    }
    return c;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int cmd_cat(int argc, char **argv)
{
    gr_client *c;
    char *buf;
    int rc = 0;

    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: granaryctl cat PATH...\n");
        return argc < 2 ? EXIT_USAGE : 0;
    }
    buf = malloc(CAT_BUF);
    if (!buf) {
        fprintf(stderr, "granaryctl: out of memory\n");
        return EXIT_FAIL;
    }
    c = connect_or_die();
    for (int i = 1; i < argc && rc == 0; i++) {
        gr_file *f = gr_open(c, argv[i]);
        off_t off = 0;
        if (!f) {
            fprintf(stderr, "granaryctl: %s: %s\n", argv[i],
                    *gr_strerror_last(c) ? gr_strerror_last(c) : strerror(errno));
            rc = EXIT_FAIL;
            break;
        }
        for (;;) {
            ssize_t n = gr_pread(f, buf, CAT_BUF, off);
            if (n < 0) {
                fprintf(stderr, "granaryctl: %s: %s\n", argv[i],
                        *gr_strerror_last(c) ? gr_strerror_last(c) : strerror(errno));
                rc = EXIT_FAIL;
                break;
            }
            if (n == 0)
                break;
            if (write_all(STDOUT_FILENO, buf, (size_t)n) < 0) {
                fprintf(stderr, "granaryctl: write: %s\n", strerror(errno));
                rc = EXIT_FAIL;
                break;
            }
            off += n;
        }
        gr_close(f);
    }
    gr_disconnect(c);
    free(buf);
    return rc;
}

typedef struct stats_out {
    int json;
    int n;
} stats_out;

static int print_stat(void *arg, const char *name, uint64_t value)
{
    stats_out *o = arg;

    if (o->json)
        printf("%s\"%s\": %llu", o->n ? ", " : "{", name, (unsigned long long)value);
    else
        printf("%-24s %20llu\n", name, (unsigned long long)value);
    o->n++;
    return 0;
}

static int cmd_stats(int argc, char **argv)
{
    stats_out o = { 0, 0 };
    gr_client *c;
    int rc = 0;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            o.json = 1;
        } else if (!strcmp(argv[i], "--help")) {
            printf("usage: granaryctl stats [--json]\n");
            return 0;
        } else {
            fprintf(stderr, "granaryctl: stats: unknown argument %s\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    c = connect_or_die();
    if (gr_stats(c, print_stat, &o) < 0) {
        fprintf(stderr, "granaryctl: stats: %s\n", gr_strerror_last(c));
        rc = EXIT_FAIL;
    } else if (o.json) {
        printf("%s}\n", o.n ? "" : "{");
    }
    gr_disconnect(c);
    return rc;
}

/* health, config: one call, the daemon's text on stdout. */
static int cmd_text(int argc, char **argv, int cmd)
{
    gr_client *c;
    char *text;
    int rc = 0;

    if (argc > 1) {
        if (strcmp(argv[1], "--help")) {
            fprintf(stderr, "granaryctl: %s takes no arguments\n", argv[0]);
            return EXIT_USAGE;
        }
        printf("usage: granaryctl %s\n", argv[0]);
        return 0;
    }
    c = connect_or_die();
    if (gr_admin(c, cmd, NULL, &text) < 0) {
        fprintf(stderr, "granaryctl: %s: %s\n", argv[0], gr_strerror_last(c));
        rc = EXIT_FAIL;
    } else {
        fputs(text, stdout);
        if (cmd == GR_ADMIN_HEALTH && strncmp(text, "ok", 2) != 0)
            rc = EXIT_FAIL;
        free(text);
    }
    gr_disconnect(c);
    return rc;
}

/* evict, invalidate, pin, unpin: each PATH in turn; stops at the first
 * failure. */
static int cmd_path_admin(int argc, char **argv, int cmd)
{
    gr_client *c;
    int rc = 0;

    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: granaryctl %s PATH...\n", argv[0]);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    c = connect_or_die();
    for (int i = 1; i < argc && rc == 0; i++) {
        char *text;
        if (gr_admin(c, cmd, argv[i], &text) < 0) {
            int e = errno;
            fprintf(stderr, "granaryctl: %s %s: %s\n", argv[0], argv[i], gr_strerror_last(c));
            rc = e == EPERM ? EXIT_DENIED : EXIT_FAIL;
        } else {
            printf("%s: %s", argv[i], text);
            free(text);
        }
    }
    gr_disconnect(c);
    return rc;
}

/* ---- warmup ---- */

#define WARMUP_BATCH (120u << 10)       /* path bytes per message (the limit is 128K) */

/* A size with an optional K/M/G/T suffix (powers of 1024); 0 if malformed. */
static uint64_t parse_rate(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    int shift = 0;

    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (!strcmp(end, "/s"))
        end += 2;
    if (end == s || *end || v <= 0)
        return 0;
    return (uint64_t)(v * (double)(1ull << shift));
}

static void human(char *buf, size_t len, double bytes)
{
    static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int i = 0;

    while (bytes >= 1024 && i < 4) {
        bytes /= 1024;
        i++;
    }
    snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", bytes, u[i]);
}

/* The batch being built: "id=N seal=S bw=B\n" then paths. */
typedef struct wbatch {
    gr_client *c;
    unsigned long id;
    uint64_t bw;
    char *buf;
    size_t len, npaths;
    int rc;
} wbatch;

static int wbatch_send(wbatch *b, int seal)
{
    char head[96], *text;
    size_t hl = (size_t)snprintf(head, sizeof(head), "id=%lu seal=%d bw=%" PRIu64 "\n", b->id,
                                 seal, b->bw);
    char *msg = malloc(hl + b->len + 1);

    if (!msg) {
        fprintf(stderr, "granaryctl: warmup: out of memory\n");
        return b->rc = EXIT_FAIL;
    }
    memcpy(msg, head, hl);
    memcpy(msg + hl, b->buf, b->len);
    msg[hl + b->len] = '\0';
    if (gr_admin(b->c, GR_ADMIN_WARMUP, msg, &text) < 0) {
        int e = errno;
        fprintf(stderr, "granaryctl: warmup: %s\n", gr_strerror_last(b->c));
        free(msg);
        return b->rc = e == EPERM ? EXIT_DENIED : EXIT_FAIL;
    }
    free(msg);
    b->id = strtoul(text, NULL, 10);
    free(text);
    b->len = 0;
    return 0;
}

static int wbatch_add(wbatch *b, const char *path)
{
    char abs[8192];
    size_t n;

    if (b->rc)
        return b->rc;
    if (strchr(path, '\n')) {
        fprintf(stderr, "granaryctl: warmup: a path with a newline cannot be warmed: %s\n", path);
        return b->rc = EXIT_FAIL;
    }
    if (path[0] != '/') {
        char cwd[4096];
        if (!getcwd(cwd, sizeof(cwd)) ||
            (size_t)snprintf(abs, sizeof(abs), "%s/%s", cwd, path) >= sizeof(abs)) {
            fprintf(stderr, "granaryctl: warmup: %s: %s\n", path, strerror(ENAMETOOLONG));
            return b->rc = EXIT_FAIL;
        }
        path = abs;
    }
    n = strlen(path);
    if (b->len + n + 1 > WARMUP_BATCH && wbatch_send(b, 0))
        return b->rc;
    memcpy(b->buf + b->len, path, n);
    b->buf[b->len + n] = '\n';
    b->len += n + 1;
    b->npaths++;
    return 0;
}

/* The value of key in a status line ("key=value ..."), 0 if absent. */
static uint64_t field_u64(const char *line, const char *key)
{
    size_t kl = strlen(key);

    for (const char *p = line; p && *p; p = strchr(p, ' ')) {
        while (*p == ' ')
            p++;
        if (!strncmp(p, key, kl) && p[kl] == '=')
            return strtoull(p + kl + 1, NULL, 10);
    }
    return 0;
}

static double field_f(const char *line, const char *key)
{
    const char *p = strstr(line, key);

    return p ? strtod(p + strlen(key) + 1, NULL) : 0.0;
}

/* Job id's status line, malloc'd, or NULL (no such job, or an error). */
static char *job_line(gr_client *c, unsigned long id)
{
    char *text, *line, *save = NULL, *found = NULL, want[32];

    if (gr_admin(c, GR_ADMIN_WARMUP_STATUS, NULL, &text) < 0)
        return NULL;
    snprintf(want, sizeof(want), "id=%lu ", id);
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (!strncmp(line, want, strlen(want)))
            found = strdup(line);
    free(text);
    return found;
}

static int warmup_wait(gr_client *c, unsigned long id)
{
    int tty = isatty(STDOUT_FILENO);
    double last_print = -10;
    char *line;

    for (;;) {
        uint64_t files, queued, bytes, failed;
        double el;
        char b[32], r[32];
        int running;

        line = job_line(c, id);
        if (!line) {
            fprintf(stderr, "granaryctl: warmup %lu: %s\n", id,
                    errno ? gr_strerror_last(c) : "the job is gone (daemon restarted?)");
            return EXIT_FAIL;
        }
        files = field_u64(line, "files");
        queued = field_u64(line, "queued");
        bytes = field_u64(line, "bytes");
        failed = field_u64(line, "failed");
        el = field_f(line, "elapsed");
        running = strstr(line, "state=running") != NULL;
        human(b, sizeof(b), (double)bytes);
        human(r, sizeof(r), el > 0 ? (double)bytes / el : 0);
        if (!running) {
            int done = strstr(line, "state=done") != NULL;
            if (tty)
                printf("\r\033[K");
            printf("warmup %lu %s: %" PRIu64 " files, %s cached in %" PRIu64
                   " chunks, %" PRIu64 " chunks already cached (skipped), %" PRIu64
                   " failed, %.1f s\n", id, done ? "done" : "cancelled",
                   files, b, field_u64(line, "chunks_cached"), field_u64(line, "chunks_skipped"),
                   failed, el);
            if (failed && strstr(line, " error="))
                printf("last error: %s\n", strstr(line, " error=") + 7);
            fflush(stdout);
            free(line);
            return failed || !done ? EXIT_FAIL : 0;
        }
        if (tty) {
            double frac = files + queued ? (double)files / (double)(files + queued) : 0;
            double eta = files && queued ? el / (double)files * (double)queued : 0;
            char bar[31];
            int k = (int)(frac * 30);
            for (int i = 0; i < 30; i++)
                bar[i] = i < k ? '=' : i == k ? '>' : ' ';
            bar[30] = '\0';
            printf("\r\033[K[%s] %" PRIu64 " files (%" PRIu64 " queued) %s %s/s ETA %s%d:%02d",
                   bar, files, queued, b, r, files ? "" : "~", (int)eta / 60, (int)eta % 60);
            fflush(stdout);
        } else if (el - last_print >= 2) {
            printf("warmup %lu: %" PRIu64 " files, %" PRIu64 " queued, %s, %s/s, %" PRIu64
                   " failed\n", id, files, queued, b, r, failed);
            fflush(stdout);
            last_print = el;
        }
        free(line);
        usleep(tty ? 200000 : 250000);
    }
}

static int cmd_warmup(int argc, char **argv)
{
    static const struct option opts[] = {
        { "from-file", required_argument, NULL, 'f' },
        { "wait", no_argument, NULL, 'w' },
        { "max-bandwidth", required_argument, NULL, 'b' },
        { "status", no_argument, NULL, 'S' },
        { "cancel", required_argument, NULL, 'C' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *list = NULL, *cancel = NULL;
    int wait = 0, status = 0, opt, rc = 0;
    wbatch b = { 0 };

    optind = 0;                 /* glibc: reinitialise (the first parse stopped at the command) */
    while ((opt = getopt_long(argc, argv, "f:wb:SC:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'f': list = optarg; break;
        case 'w': wait = 1; break;
        case 'b':
            b.bw = parse_rate(optarg);
            if (!b.bw) {
                fprintf(stderr, "granaryctl: warmup: bad --max-bandwidth \"%s\" (e.g. 200M)\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'S': status = 1; break;
        case 'C': cancel = optarg; break;
        case 'h':
            printf("usage: granaryctl warmup PATH... [--from-file LIST] [--wait] [--max-bandwidth RATE]\n"
                   "       granaryctl warmup --status | --cancel ID\n"
                   "Reads files, and directories recursively, into the cache (NVMe tier) at the\n"
                   "lowest priority; chunks already cached are skipped.  LIST has one path per\n"
                   "line (- for stdin).  RATE is bytes per second (K, M, G suffixes).  Jobs\n"
                   "resume after a daemon restart.  --wait shows progress and exits 1 if any\n"
                   "file failed.\n");
            return 0;
        default:
            return EXIT_USAGE;
        }
    }
    if (status + !!cancel + (optind < argc || list) != 1) {
        fprintf(stderr, "granaryctl: warmup: give PATHs (or --from-file), or --status, or --cancel ID\n");
        return EXIT_USAGE;
    }
    b.c = connect_or_die();
    if (status) {
        char *text;
        if (gr_admin(b.c, GR_ADMIN_WARMUP_STATUS, NULL, &text) < 0) {
            fprintf(stderr, "granaryctl: warmup: %s\n", gr_strerror_last(b.c));
            rc = EXIT_FAIL;
        } else {
            printf("%-6s %-9s %10s %7s %10s %8s %10s %8s %9s\n", "ID", "STATE", "FILES",
                   "FAILED", "BYTES", "CHUNKS", "SKIPPED", "QUEUED", "ELAPSED");
            for (char *save = NULL, *l = strtok_r(text, "\n", &save); l;
                 l = strtok_r(NULL, "\n", &save)) {
                char st[16] = "?", hb[32];
                const char *p = strstr(l, "state=");
                if (p)
                    sscanf(p + 6, "%15s", st);
                human(hb, sizeof(hb), (double)field_u64(l, "bytes"));
                printf("%-6" PRIu64 " %-9s %10" PRIu64 " %7" PRIu64 " %10s %8" PRIu64 " %10" PRIu64
                       " %8" PRIu64 " %8.1fs\n", field_u64(l, "id"), st, field_u64(l, "files"),
                       field_u64(l, "failed"), hb, field_u64(l, "chunks_cached"),
                       field_u64(l, "chunks_skipped"), field_u64(l, "queued"),
                       field_f(l, "elapsed"));
            }
            free(text);
        }
        gr_disconnect(b.c);
        return rc;
    }
    if (cancel) {
        char *text;
        if (gr_admin(b.c, GR_ADMIN_WARMUP_CANCEL, cancel, &text) < 0) {
            int e = errno;
            fprintf(stderr, "granaryctl: warmup --cancel %s: %s\n", cancel, gr_strerror_last(b.c));
            rc = e == EPERM ? EXIT_DENIED : EXIT_FAIL;
        } else {
            printf("warmup %s: %s\n", cancel, text);
            free(text);
        }
        gr_disconnect(b.c);
        return rc;
    }
    b.buf = malloc(WARMUP_BATCH + 8192);
    if (!b.buf) {
        gr_disconnect(b.c);
        return EXIT_FAIL;
    }
    for (int i = optind; i < argc && !b.rc; i++)
        wbatch_add(&b, argv[i]);
    if (list && !b.rc) {
        FILE *f = strcmp(list, "-") ? fopen(list, "re") : stdin;
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        if (!f) {
            fprintf(stderr, "granaryctl: warmup: %s: %s\n", list, strerror(errno));
            b.rc = EXIT_FAIL;
        }
        while (f && !b.rc && (n = getline(&line, &cap, f)) > 0) {
            if (line[n - 1] == '\n')
                line[--n] = '\0';
            if (n > 0 && line[0] != '#')
                wbatch_add(&b, line);
        }
        free(line);
        if (f && f != stdin)
            fclose(f);
    }
    if (!b.rc)
        wbatch_send(&b, 1);
    free(b.buf);
    rc = b.rc;
    if (!rc && wait)
        rc = warmup_wait(b.c, b.id);
    else if (!rc)
        printf("warmup %lu started: %zu paths (granaryctl warmup --status)\n", b.id, b.npaths);
    gr_disconnect(b.c);
    return rc;
}

/* The counters top shows, by name. */
typedef struct top_sample {
    uint64_t hits_dram, hits_nvme, misses, bytes_served, source_bytes_read, requests;
    uint64_t dram_used, dram_cap, nvme_used, nvme_cap, connections, leased;
} top_sample;

static int top_cb(void *arg, const char *name, uint64_t v)
{
    top_sample *t = arg;
    static const struct {
        const char *name;
        size_t off;
    } map[] = {
        { "hits_dram", offsetof(top_sample, hits_dram) },
        { "hits_nvme", offsetof(top_sample, hits_nvme) },
        { "misses", offsetof(top_sample, misses) },
        { "bytes_served", offsetof(top_sample, bytes_served) },
        { "source_bytes_read", offsetof(top_sample, source_bytes_read) },
        { "requests", offsetof(top_sample, requests) },
        { "dram_used_bytes", offsetof(top_sample, dram_used) },
        { "dram_capacity_bytes", offsetof(top_sample, dram_cap) },
        { "nvme_used_bytes", offsetof(top_sample, nvme_used) },
        { "nvme_capacity_bytes", offsetof(top_sample, nvme_cap) },
        { "connections", offsetof(top_sample, connections) },
        { "leased_bytes", offsetof(top_sample, leased) },
    };

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(name, map[i].name))
            *(uint64_t *)((char *)t + map[i].off) = v;
    return 0;
}

static double pct(uint64_t a, uint64_t b)
{
    return b ? 100.0 * (double)a / (double)b : 0.0;
}

/* Live view: every interval, the rates since the last sample.  On a
 * terminal the screen is redrawn; otherwise one line per sample. */
static int cmd_top(int argc, char **argv)
{
    double interval = 1.0;
    long iterations = -1;
    int tty = isatty(STDOUT_FILENO);
    top_sample prev = { 0 }, cur;
    gr_client *c;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: granaryctl top [-n ITERATIONS] [-i SECONDS]\n");
            return 0;
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            iterations = strtol(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "-i") && i + 1 < argc) {
            interval = strtod(argv[++i], NULL);
        } else {
            fprintf(stderr, "granaryctl: top: unknown argument %s\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (interval < 0.05 || iterations == 0) {
        fprintf(stderr, "granaryctl: top: -i must be >= 0.05 and -n positive\n");
        return EXIT_USAGE;
    }
    c = connect_or_die();
    if (gr_stats(c, top_cb, &prev) < 0)
        goto fail;
    if (!tty)
        printf("%8s %8s %8s %10s %10s %9s %7s %7s %6s\n", "hit%", "dram%", "nvme%", "served/s",
               "source/s", "req/s", "dramuse", "nvmeuse", "conns");
    for (long n = 0; iterations < 0 || n < iterations; n++) {
        struct timespec ts = { (time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9) };
        uint64_t look, hits;
        nanosleep(&ts, NULL);
        memset(&cur, 0, sizeof(cur));
        if (gr_stats(c, top_cb, &cur) < 0)
            goto fail;
        hits = (cur.hits_dram - prev.hits_dram) + (cur.hits_nvme - prev.hits_nvme);
        look = hits + (cur.misses - prev.misses);
        if (tty)
            printf("\033[H\033[2Jgranaryd: %llu connections, dram %.1f%% of %.1f GiB, nvme %.1f%% of %.1f GiB, "
                   "%.1f MiB leased\n\n"
                   "  hit ratio      %6.1f%%   (dram %.1f%%, nvme %.1f%%)\n"
                   "  served         %8.1f MB/s\n"
                   "  source read    %8.1f MB/s\n"
                   "  requests       %8.0f /s\n",
                   (unsigned long long)cur.connections, pct(cur.dram_used, cur.dram_cap),
                   (double)cur.dram_cap / (1 << 30), pct(cur.nvme_used, cur.nvme_cap),
                   (double)cur.nvme_cap / (1 << 30), (double)cur.leased / (1 << 20), pct(hits, look),
                   pct(cur.hits_dram - prev.hits_dram, look), pct(cur.hits_nvme - prev.hits_nvme, look),
                   (double)(cur.bytes_served - prev.bytes_served) / interval / 1e6,
                   (double)(cur.source_bytes_read - prev.source_bytes_read) / interval / 1e6,
                   (double)(cur.requests - prev.requests) / interval);
        else
            printf("%7.1f%% %7.1f%% %7.1f%% %10.1f %10.1f %9.0f %6.1f%% %6.1f%% %6llu\n", pct(hits, look),
                   pct(cur.hits_dram - prev.hits_dram, look), pct(cur.hits_nvme - prev.hits_nvme, look),
                   (double)(cur.bytes_served - prev.bytes_served) / interval / 1e6,
                   (double)(cur.source_bytes_read - prev.source_bytes_read) / interval / 1e6,
                   (double)(cur.requests - prev.requests) / interval, pct(cur.dram_used, cur.dram_cap),
                   pct(cur.nvme_used, cur.nvme_cap), (unsigned long long)cur.connections);
        fflush(stdout);
        prev = cur;
    }
    gr_disconnect(c);
    return 0;
fail:
    fprintf(stderr, "granaryctl: top: %s\n", gr_strerror_last(c));
    gr_disconnect(c);
    return EXIT_FAIL;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int opt;

    /* Stop at the command: its own options are its business. */
    while ((opt = getopt_long(argc, argv, "+s:h", opts, NULL)) != -1) {
        switch (opt) {
        case 's':
            socket_path = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    argc -= optind;
    argv += optind;
    if (!strcmp(argv[0], "cat"))
        return cmd_cat(argc, argv);
    if (!strcmp(argv[0], "stats"))
        return cmd_stats(argc, argv);
    if (!strcmp(argv[0], "top"))
        return cmd_top(argc, argv);
    if (!strcmp(argv[0], "health"))
        return cmd_text(argc, argv, GR_ADMIN_HEALTH);
    if (!strcmp(argv[0], "config"))
        return cmd_text(argc, argv, GR_ADMIN_CONFIG);
    if (!strcmp(argv[0], "evict"))
        return cmd_path_admin(argc, argv, GR_ADMIN_EVICT);
    if (!strcmp(argv[0], "invalidate"))
        return cmd_path_admin(argc, argv, GR_ADMIN_INVALIDATE);
    if (!strcmp(argv[0], "pin"))
        return cmd_path_admin(argc, argv, GR_ADMIN_PIN);
    if (!strcmp(argv[0], "unpin"))
        return cmd_path_admin(argc, argv, GR_ADMIN_UNPIN);
    if (!strcmp(argv[0], "warmup"))
        return cmd_warmup(argc, argv);
    fprintf(stderr, "granaryctl: unknown command \"%s\" (try --help)\n", argv[0]);
    return EXIT_USAGE;
}
