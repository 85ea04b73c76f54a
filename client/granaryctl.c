/*
 * granaryctl.c - the admin CLI: read files through the daemon, show its
 * counters (once, or live with top), check its health and configuration,
 * and evict, invalidate, pin or unpin files.  Errors are one line on
 * stderr; exit codes: 0 success, 1 the operation failed (or: unhealthy),
 * 2 usage error, 3 the daemon cannot be reached, 4 not allowed (admin
 * commands are for root and the daemon's admin_group).
 */
#include <errno.h>
#include <getopt.h>
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
        fprintf(stderr, "granaryctl: cannot reach granaryd at %s: %s\n",
                socket_path ? socket_path : (getenv("GRANARY_SOCKET") ? getenv("GRANARY_SOCKET")
                                                                     : "the default socket"),
                strerror(errno));
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
    fprintf(stderr, "granaryctl: unknown command \"%s\" (try --help)\n", argv[0]);
    return EXIT_USAGE;
}
