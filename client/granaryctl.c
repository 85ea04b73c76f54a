/*
 * granaryctl.c - the admin CLI: read files through the daemon, show its
 * counters (once, or live with top), check its health and configuration,
 * evict, invalidate, pin or unpin files, warm the cache up, and say how each
 * job reads and what to set (analyze).  Errors are one line on
 * stderr; exit codes: 0 success, 1 the operation failed (or: unhealthy),
 * 2 usage error, 3 the daemon cannot be reached, 4 not allowed (admin
 * commands are for root and the daemon's admin_group).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <time.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "granary.h"
#include "path.h"
#include "size.h"

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
            "  dataset add DIR [--stamp FILE] [--recheck SECONDS]\n"
            "                     keep DIR's tree and attributes in a manifest (admin)\n"
            "  dataset list       registered datasets;  dataset remove|rescan ID (admin)\n"
            "  stat PATH...       attributes as the daemon answers them (a manifest, else the file system)\n"
            "  ls [-l] DIR        a directory's entries, the same way\n"
            "  analyze [--job ID] [--json] [--plot OUTDIR]\n"
            "                     how each job reads (its class and figures) and what to set\n"
            "  analyze --tree DIR [--chunk SIZE] [--json] [--plot OUTDIR]\n"
            "                     the same for a directory tree, offline\n"
            "  put SRC DEST [--wait] [--timeout S]\n"
            "                     stage SRC as a checkpoint for DEST (returns once it is on the\n"
            "                     node's NVMe; --wait: once DEST is published)\n"
            "  put --set DEST SRC... [--wait] [--timeout S]\n"
            "                     files (or a directory's files) as one set, published together:\n"
            "                     DEST becomes a link to DEST.granary-gen-ID/\n"
            "  ckpt list          checkpoints and their states;  ckpt status ID  one of them\n"
            "  peers [--json]     the peer cache's members: state, transport, hits, latency\n"
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

/* The value of the number field name in f[0..n), 0 if absent. */
static uint64_t fnum(const gr_field *f, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!f[i].is_text && !strcmp(f[i].name, name))
            return f[i].num;
    return 0;
}

/* The text field name, NULL if absent. */
static const char *ftext(const gr_field *f, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (f[i].is_text && !strcmp(f[i].name, name))
            return f[i].text;
    return NULL;
}

static gr_field num_field(const char *name, uint64_t v)
{
    return (gr_field){ .name = name, .num = v };
}

static gr_field text_field(const char *name, const char *text)
{
    return (gr_field){ .name = name, .is_text = 1, .text = text, .len = strlen(text) };
}

/* HEALTH's fields as one line, like "ok: 1 source roots readable, dram 3% used". */
static void print_health(const gr_field *f, size_t n)
{
    const char *reason = ftext(f, n, "reason");
    const char *nvme = ftext(f, n, "nvme_state");

    if (!fnum(f, n, "healthy")) {
        printf("unhealthy: %s\n", reason ? reason : "(no reason given)");
        return;
    }
    printf("ok: %" PRIu64 " source roots readable, dram %" PRIu64 "%% used", fnum(f, n, "roots"),
           fnum(f, n, "dram_used_pct"));
    if (!nvme) {
        printf(", no nvme tier\n");
        return;
    }
    printf(", nvme %" PRIu64 "%% used", fnum(f, n, "nvme_used_pct"));
    if (fnum(f, n, "nvme_io_errors") || fnum(f, n, "nvme_checksum_errors"))
        printf(" (%" PRIu64 " I/O errors, %" PRIu64 " checksum errors so far)",
               fnum(f, n, "nvme_io_errors"), fnum(f, n, "nvme_checksum_errors"));
    printf("\n");
}

/* health, config: one call, the answer on stdout. */
static int cmd_text(int argc, char **argv, int cmd)
{
    gr_client *c;
    gr_field *f;
    size_t n;
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
    if (gr_admin(c, cmd, NULL, 0, &f, &n) < 0) {
        fprintf(stderr, "granaryctl: %s: %s\n", argv[0], gr_strerror_last(c));
        rc = EXIT_FAIL;
    } else {
        if (cmd == GR_ADMIN_HEALTH) {
            print_health(f, n);
            if (!fnum(f, n, "healthy"))
                rc = EXIT_FAIL;
        } else {
            const char *t = ftext(f, n, "config");
            fputs(t ? t : "", stdout);
        }
        free(f);
    }
    gr_disconnect(c);
    return rc;
}

/* evict, invalidate, pin, unpin: each PATH in turn; stops at the first
 * failure. */
static int cmd_path_admin(int argc, char **argv, int cmd)
{
    const char *verb = cmd == GR_ADMIN_PIN ? "pinned" : cmd == GR_ADMIN_UNPIN ? "unpinned"
                     : cmd == GR_ADMIN_EVICT ? "evicted" : "invalidated";
    gr_client *c;
    int rc = 0;

    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: granaryctl %s PATH...\n", argv[0]);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    c = connect_or_die();
    for (int i = 1; i < argc && rc == 0; i++) {
        char abs[8192];
        gr_field arg, *f;
        size_t n;
        int pe = gr__path_abs(argv[i], abs, sizeof(abs));   /* relative: from the cwd */
        if (pe < 0) {
            fprintf(stderr, "granaryctl: %s %s: %s\n", argv[0], argv[i], strerror(-pe));
            rc = EXIT_FAIL;
            break;
        }
        arg = text_field("path", abs);
        if (gr_admin(c, cmd, &arg, 1, &f, &n) < 0) {
            int e = errno;
            fprintf(stderr, "granaryctl: %s %s: %s\n", argv[0], argv[i], gr_strerror_last(c));
            rc = e == EPERM ? EXIT_DENIED : EXIT_FAIL;
        } else {
            printf("%s: %s: %" PRIu64 " files, %" PRIu64 " chunks in dram, %" PRIu64
                   " on nvme%s\n", argv[i], verb, fnum(f, n, "files"), fnum(f, n, "dram_chunks"),
                   fnum(f, n, "nvme_chunks"),
                   cmd == GR_ADMIN_PIN ? " (and their chunks cached from now on)" : "");
            free(f);
        }
    }
    gr_disconnect(c);
    return rc;
}

/* ---- datasets, stat, ls ---- */

static int dataset_usage(FILE *out, int rc)
{
    fprintf(out, "usage: granaryctl dataset add DIR [--stamp FILE] [--recheck SECONDS]\n"
                 "       granaryctl dataset list\n"
                 "       granaryctl dataset remove ID | rescan ID\n");
    return rc;
}

static void print_dataset(const gr_field *f, size_t n)
{
    const char *st = ftext(f, n, "state"), *err = ftext(f, n, "error"), *stamp = ftext(f, n, "stamp");

    printf("dataset %" PRIu64 " %s: %s, %" PRIu64 " files (%" PRIu64 " entries); stamp %s, checked "
           "every %" PRIu64 " s (%" PRIu64 " checks, %" PRIu64 " rescans); last scan %" PRIu64
           " dirs, %" PRIu64 " entries, %" PRIu64 " errors, %" PRIu64 " ms%s%s\n",
           fnum(f, n, "id"), ftext(f, n, "path") ? ftext(f, n, "path") : "?", st ? st : "?",
           fnum(f, n, "files"), fnum(f, n, "entries"), stamp && *stamp ? stamp : "(the top directory)",
           fnum(f, n, "recheck"), fnum(f, n, "checks"), fnum(f, n, "rescans"),
           fnum(f, n, "scan_dirs"), fnum(f, n, "scan_entries"), fnum(f, n, "scan_errors"),
           fnum(f, n, "scan_ms"), err ? "; error: " : "", err ? err : "");
}

static int cmd_dataset(int argc, char **argv)
{
    gr_field args[3], *f = NULL;
    size_t nargs = 0, n = 0;
    char dir[PATH_MAX], stamp[PATH_MAX];
    int cmd, rc = 0;
    gr_client *c;

    if (argc < 2)
        return dataset_usage(stderr, EXIT_USAGE);
    if (!strcmp(argv[1], "--help"))
        return dataset_usage(stdout, 0);
    if (!strcmp(argv[1], "add")) {
        cmd = GR_ADMIN_DATASET_ADD;
        if (argc < 3)
            return dataset_usage(stderr, EXIT_USAGE);
        if (!realpath(argv[2], dir)) {
            fprintf(stderr, "granaryctl: dataset add %s: %s\n", argv[2], strerror(errno));
            return EXIT_FAIL;
        }
        args[nargs++] = text_field("path", dir);
        for (int i = 3; i < argc; i++) {
            char *end;
            if (!strcmp(argv[i], "--stamp") && i + 1 < argc) {
                if (!realpath(argv[++i], stamp)) {
                    fprintf(stderr, "granaryctl: dataset add --stamp %s: %s\n", argv[i],
                            strerror(errno));
                    return EXIT_FAIL;
                }
                args[nargs++] = text_field("stamp", stamp);
            } else if (!strcmp(argv[i], "--recheck") && i + 1 < argc) {
                unsigned long long v = strtoull(argv[++i], &end, 10);
                if (*end || v == 0) {
                    fprintf(stderr, "granaryctl: dataset add: --recheck takes whole seconds\n");
                    return EXIT_USAGE;
                }
                args[nargs++] = (gr_field){ .name = "recheck", .num = v };
            } else {
                return dataset_usage(stderr, EXIT_USAGE);
            }
        }
    } else if (!strcmp(argv[1], "list") && argc == 2) {
        cmd = GR_ADMIN_DATASET_LIST;
    } else if ((!strcmp(argv[1], "remove") || !strcmp(argv[1], "rescan")) && argc == 3) {
        char *end;
        unsigned long long v = strtoull(argv[2], &end, 10);
        cmd = !strcmp(argv[1], "remove") ? GR_ADMIN_DATASET_REMOVE : GR_ADMIN_DATASET_RESCAN;
        if (*end || v == 0) {
            fprintf(stderr, "granaryctl: dataset %s: \"%s\" is not a dataset id\n", argv[1], argv[2]);
            return EXIT_USAGE;
        }
        args[nargs++] = (gr_field){ .name = "id", .num = v };
    } else {
        return dataset_usage(stderr, EXIT_USAGE);
    }
    c = connect_or_die();
    if (gr_admin(c, cmd, args, nargs, &f, &n) < 0) {
        int e = errno;
        fprintf(stderr, "granaryctl: dataset %s: %s\n", argv[1], gr_strerror_last(c));
        rc = e == EPERM ? EXIT_DENIED : EXIT_FAIL;
    } else if (cmd == GR_ADMIN_DATASET_LIST) {
        size_t start = 0;
        if (n == 0)
            printf("no registered datasets\n");
        /* Records run "id" first per dataset. */
        for (size_t i = 1; i <= n; i++) {
            if (i == n || !strcmp(f[i].name, "id")) {
                print_dataset(f + start, i - start);
                start = i;
            }
        }
    } else if (cmd == GR_ADMIN_DATASET_ADD) {
        printf("dataset %" PRIu64 " registered: %s (scanning; granaryctl dataset list)\n",
               fnum(f, n, "id"), dir);
    } else {
        printf("dataset %s: %s\n", argv[2], cmd == GR_ADMIN_DATASET_REMOVE ? "removed" : "rescanning");
    }
    free(f);
    gr_disconnect(c);
    return rc;
}

static void print_attr(const char *name, const struct stat *st)
{
    printf("%s %06o %u %u %" PRIu64 " %lld.%09ld %" PRIu64 " %s\n", S_ISDIR(st->st_mode) ? "d" : "f",
           (unsigned)(st->st_mode & 07777), (unsigned)st->st_uid, (unsigned)st->st_gid,
           (uint64_t)st->st_size, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
           (uint64_t)st->st_ino, name);
}

static int cmd_stat(int argc, char **argv)
{
    gr_client *c;
    int rc = 0;

    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: granaryctl stat PATH...\n"
                "prints: f|d MODE UID GID SIZE MTIME INODE PATH\n");
        return argc < 2 ? EXIT_USAGE : 0;
    }
    c = connect_or_die();
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (gr_stat(c, argv[i], &st) < 0) {
            fprintf(stderr, "granaryctl: stat %s: %s\n", argv[i],
                    *gr_strerror_last(c) ? gr_strerror_last(c) : strerror(errno));
            rc = EXIT_FAIL;
        } else {
            print_attr(argv[i], &st);
        }
    }
    gr_disconnect(c);
    return rc;
}

static int cmd_ls(int argc, char **argv)
{
    int lng = argc > 1 && !strcmp(argv[1], "-l");
    const char *path = argv[1 + lng];
    const gr_dirent *e;
    gr_client *c;
    gr_dir *d;
    int rc = 0;

    if (argc != 2 + lng || !strcmp(path, "--help")) {
        fprintf(argc != 2 + lng ? stderr : stdout, "usage: granaryctl ls [-l] DIR\n");
        return argc != 2 + lng ? EXIT_USAGE : 0;
    }
    c = connect_or_die();
    d = gr_opendir(c, path);
    if (!d) {
        fprintf(stderr, "granaryctl: ls %s: %s\n", path,
                *gr_strerror_last(c) ? gr_strerror_last(c) : strerror(errno));
        gr_disconnect(c);
        return EXIT_FAIL;
    }
    while ((e = gr_readdir(d))) {
        if (lng && e->has_stat)
            print_attr(e->name, &e->st);
        else
            printf("%s%s\n", e->name, e->type == DT_DIR ? "/" : "");
    }
    if (errno) {
        fprintf(stderr, "granaryctl: ls %s: %s\n", path, gr_strerror_last(c));
        rc = EXIT_FAIL;
    }
    gr_closedir(d);
    gr_disconnect(c);
    return rc;
}

/* ---- warmup ---- */

#define WARMUP_BATCH (120u << 10)       /* path bytes per message (a message is 128K) */

/* A rate: a size (common/size.h: 200M, 1GiB) with an optional "/s"; 0 if
 * malformed. */
static uint64_t parse_rate(const char *s)
{
    char buf[64];
    size_t n = strlen(s);
    uint64_t v;

    if (n >= 2 && !strcmp(s + n - 2, "/s"))
        n -= 2;
    if (n == 0 || n >= sizeof(buf))
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return gr__size_parse(buf, &v) == 0 ? v : 0;
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

/* The batch of paths being built for one WARMUP message. */
typedef struct wbatch {
    gr_client *c;
    uint64_t id;
    uint64_t bw;
    char **paths;
    size_t n, cap, bytes, npaths;
    int rc;
} wbatch;

static void wbatch_clear(wbatch *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->paths[i]);
    b->n = 0;
    b->bytes = 0;
}

static int wbatch_send(wbatch *b, int seal)
{
    gr_field *args = calloc(b->n + 3, sizeof(*args)), *f;
    size_t n;

    if (!args) {
        fprintf(stderr, "granaryctl: warmup: out of memory\n");
        return b->rc = EXIT_FAIL;
    }
    args[0] = num_field("job", b->id);
    args[1] = num_field("seal", (uint64_t)seal);
    args[2] = num_field("bw", b->bw);
    for (size_t i = 0; i < b->n; i++)
        args[3 + i] = text_field("path", b->paths[i]);
    if (gr_admin(b->c, GR_ADMIN_WARMUP, args, b->n + 3, &f, &n) < 0) {
        int e = errno;
        fprintf(stderr, "granaryctl: warmup: %s\n", gr_strerror_last(b->c));
        free(args);
        return b->rc = e == EPERM ? EXIT_DENIED : EXIT_FAIL;
    }
    free(args);
    b->id = fnum(f, n, "job");
    free(f);
    wbatch_clear(b);
    return 0;
}

static int wbatch_add(wbatch *b, const char *path)
{
    char abs[8192];
    size_t n;

    if (b->rc)
        return b->rc;
    if (path[0] != '/') {
        int pe = gr__path_abs(path, abs, sizeof(abs));
        if (pe < 0) {
            fprintf(stderr, "granaryctl: warmup: %s: %s\n", path, strerror(-pe));
            return b->rc = EXIT_FAIL;
        }
        path = abs;
    }
    n = strlen(path);
    if (b->bytes + n + 16 > WARMUP_BATCH && wbatch_send(b, 0))
        return b->rc;
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        char **np = realloc(b->paths, nc * sizeof(*np));
        if (!np)
            return b->rc = EXIT_FAIL;
        b->paths = np;
        b->cap = nc;
    }
    if (!(b->paths[b->n] = strdup(path)))
        return b->rc = EXIT_FAIL;
    b->n++;
    b->bytes += n + 16;
    b->npaths++;
    return 0;
}

/* One job of a WARMUP_STATUS reply. */
typedef struct jobinfo {
    uint64_t id, files, failed, bytes, cached, skipped, queued, elapsed_ms;
    char state[16];
    const char *error;
} jobinfo;

/* The jobs of a status reply's fields: each "job" starts one.  The
 * count, at most max filled into out (their error strings point into f). */
static size_t status_jobs(const gr_field *f, size_t n, jobinfo *out, size_t max)
{
    size_t k = 0;
    jobinfo *j = NULL;

    for (size_t i = 0; i < n; i++) {
        if (!strcmp(f[i].name, "job")) {
            j = k < max ? &out[k] : NULL;
            k++;
            if (j) {
                memset(j, 0, sizeof(*j));
                j->id = f[i].num;
            }
            continue;
        }
        if (!j)
            continue;
        if (!strcmp(f[i].name, "state") && f[i].is_text)
            snprintf(j->state, sizeof(j->state), "%s", f[i].text);
        else if (!strcmp(f[i].name, "error") && f[i].is_text)
            j->error = f[i].text;
        else if (!strcmp(f[i].name, "files"))
            j->files = f[i].num;
        else if (!strcmp(f[i].name, "failed"))
            j->failed = f[i].num;
        else if (!strcmp(f[i].name, "bytes"))
            j->bytes = f[i].num;
        else if (!strcmp(f[i].name, "chunks_cached"))
            j->cached = f[i].num;
        else if (!strcmp(f[i].name, "chunks_skipped"))
            j->skipped = f[i].num;
        else if (!strcmp(f[i].name, "queued"))
            j->queued = f[i].num;
        else if (!strcmp(f[i].name, "elapsed_ms"))
            j->elapsed_ms = f[i].num;
    }
    return k;
}

/* Job id's status into *out (error copied into errbuf): 1 found, 0 not,
 * -1 on error. */
static int job_status(gr_client *c, uint64_t id, jobinfo *out, char *errbuf, size_t errlen)
{
    jobinfo jobs[256];
    gr_field *f;
    size_t n, k;
    int found = 0;

    if (gr_admin(c, GR_ADMIN_WARMUP_STATUS, NULL, 0, &f, &n) < 0)
        return -1;
    k = status_jobs(f, n, jobs, 256);
    for (size_t i = 0; i < k && i < 256; i++)
        if (jobs[i].id == id) {
            *out = jobs[i];
            snprintf(errbuf, errlen, "%s", jobs[i].error ? jobs[i].error : "");
            out->error = errbuf[0] ? errbuf : NULL;
            found = 1;
        }
    free(f);
    return found;
}

static int warmup_wait(gr_client *c, uint64_t id)
{
    int tty = isatty(STDOUT_FILENO);
    double last_print = -10;
    char errbuf[1024];

    for (;;) {
        jobinfo j;
        double el;
        char b[32], r[32];
        int st = job_status(c, id, &j, errbuf, sizeof(errbuf));

        if (st <= 0) {
            fprintf(stderr, "granaryctl: warmup %" PRIu64 ": %s\n", id,
                    st < 0 ? gr_strerror_last(c) : "the job is gone (daemon restarted?)");
            return EXIT_FAIL;
        }
        el = (double)j.elapsed_ms / 1000;
        human(b, sizeof(b), (double)j.bytes);
        human(r, sizeof(r), el > 0 ? (double)j.bytes / el : 0);
        if (strcmp(j.state, "running")) {
            int done = !strcmp(j.state, "done");
            if (tty)
                printf("\r\033[K");
            printf("warmup %" PRIu64 " %s: %" PRIu64 " files, %s cached in %" PRIu64
                   " chunks, %" PRIu64 " chunks already cached (skipped), %" PRIu64
                   " failed, %.1f s\n", id, done ? "done" : "cancelled",
                   j.files, b, j.cached, j.skipped, j.failed, el);
            if (j.failed && j.error)
                printf("last error: %s\n", j.error);
            fflush(stdout);
            return j.failed || !done ? EXIT_FAIL : 0;
        }
        if (tty) {
            double frac = j.files + j.queued ? (double)j.files / (double)(j.files + j.queued) : 0;
            double eta = j.files && j.queued ? el / (double)j.files * (double)j.queued : 0;
            char bar[31];
            int k = (int)(frac * 30);
            for (int i = 0; i < 30; i++)
                bar[i] = i < k ? '=' : i == k ? '>' : ' ';
            bar[30] = '\0';
            printf("\r\033[K[%s] %" PRIu64 " files (%" PRIu64 " queued) %s %s/s ETA %s%d:%02d",
                   bar, j.files, j.queued, b, r, j.files ? "" : "~", (int)eta / 60, (int)eta % 60);
            fflush(stdout);
        } else if (el - last_print >= 2) {
            printf("warmup %" PRIu64 ": %" PRIu64 " files, %" PRIu64 " queued, %s, %s/s, %" PRIu64
                   " failed\n", id, j.files, j.queued, b, r, j.failed);
            fflush(stdout);
            last_print = el;
        }
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
                fprintf(stderr, "granaryctl: warmup: bad --max-bandwidth \"%s\" (e.g. 200M, 1GiB/s)\n",
                        optarg);
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
                   "line (- for stdin).  RATE is bytes per second, a size like the\n"
                   "configuration's (200M, 1GiB, optionally /s).  Jobs resume after a daemon\n"
                   "restart.  --wait shows progress and exits 1 if any file failed.\n");
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
        gr_field *f;
        size_t n;
        if (gr_admin(b.c, GR_ADMIN_WARMUP_STATUS, NULL, 0, &f, &n) < 0) {
            fprintf(stderr, "granaryctl: warmup: %s\n", gr_strerror_last(b.c));
            rc = EXIT_FAIL;
        } else {
            jobinfo jobs[1024];
            size_t k = status_jobs(f, n, jobs, 1024);
            printf("%-6s %-9s %10s %7s %10s %8s %10s %8s %9s\n", "ID", "STATE", "FILES",
                   "FAILED", "BYTES", "CHUNKS", "SKIPPED", "QUEUED", "ELAPSED");
            for (size_t i = 0; i < k && i < 1024; i++) {
                char hb[32];
                human(hb, sizeof(hb), (double)jobs[i].bytes);
                printf("%-6" PRIu64 " %-9s %10" PRIu64 " %7" PRIu64 " %10s %8" PRIu64 " %10" PRIu64
                       " %8" PRIu64 " %8.1fs\n", jobs[i].id, jobs[i].state, jobs[i].files,
                       jobs[i].failed, hb, jobs[i].cached, jobs[i].skipped, jobs[i].queued,
                       (double)jobs[i].elapsed_ms / 1000);
            }
            free(f);
        }
        gr_disconnect(b.c);
        return rc;
    }
    if (cancel) {
        char *end;
        unsigned long long id = strtoull(cancel, &end, 10);
        gr_field arg = num_field("job", id), *f;
        size_t n;
        if (*end || id == 0) {
            fprintf(stderr, "granaryctl: warmup --cancel: \"%s\" is not a job id\n", cancel);
            gr_disconnect(b.c);
            return EXIT_USAGE;
        }
        if (gr_admin(b.c, GR_ADMIN_WARMUP_CANCEL, &arg, 1, &f, &n) < 0) {
            int e = errno;
            fprintf(stderr, "granaryctl: warmup --cancel %s: %s\n", cancel, gr_strerror_last(b.c));
            rc = e == EPERM ? EXIT_DENIED : EXIT_FAIL;
        } else {
            printf("warmup %s: cancelled\n", cancel);
            free(f);
        }
        gr_disconnect(b.c);
        return rc;
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
    wbatch_clear(&b);
    free(b.paths);
    rc = b.rc;
    if (!rc && wait)
        rc = warmup_wait(b.c, b.id);
    else if (!rc)
        printf("warmup %" PRIu64 " started: %zu paths (granaryctl warmup --status)\n", b.id,
               b.npaths);
    gr_disconnect(b.c);
    return rc;
}

/* The counters top shows, by name. */
typedef struct top_sample {
    uint64_t hits_dram, hits_nvme, misses, bytes_served, source_bytes_read, requests;
    uint64_t dram_used, dram_cap, nvme_used, nvme_cap, connections, leased, loop_cpu_us;
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
        { "loop_cpu_microseconds", offsetof(top_sample, loop_cpu_us) },
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
        printf("%8s %8s %8s %10s %10s %9s %7s %7s %6s %6s\n", "hit%", "dram%", "nvme%", "served/s",
               "source/s", "req/s", "dramuse", "nvmeuse", "conns", "loop%");
    for (long n = 0; iterations < 0 || n < iterations; n++) {
        struct timespec ts = { (time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9) };
        uint64_t look, hits;
        double loop;
        nanosleep(&ts, NULL);
        memset(&cur, 0, sizeof(cur));
        if (gr_stats(c, top_cb, &cur) < 0)
            goto fail;
        hits = (cur.hits_dram - prev.hits_dram) + (cur.hits_nvme - prev.hits_nvme);
        look = hits + (cur.misses - prev.misses);
        /* The event loop's share of one core: near 100%, it is the limit. */
        loop = (double)(cur.loop_cpu_us - prev.loop_cpu_us) / (interval * 1e4);
        if (tty)
            printf("\033[H\033[2Jgranaryd: %llu connections, dram %.1f%% of %.1f GiB, nvme %.1f%% of %.1f GiB, "
                   "%.1f MiB leased\n\n"
                   "  hit ratio      %6.1f%%   (dram %.1f%%, nvme %.1f%%)\n"
                   "  served         %8.1f MB/s\n"
                   "  source read    %8.1f MB/s\n"
                   "  requests       %8.0f /s\n"
                   "  event loop     %8.1f%% of a core\n",
                   (unsigned long long)cur.connections, pct(cur.dram_used, cur.dram_cap),
                   (double)cur.dram_cap / (1 << 30), pct(cur.nvme_used, cur.nvme_cap),
                   (double)cur.nvme_cap / (1 << 30), (double)cur.leased / (1 << 20), pct(hits, look),
                   pct(cur.hits_dram - prev.hits_dram, look), pct(cur.hits_nvme - prev.hits_nvme, look),
                   (double)(cur.bytes_served - prev.bytes_served) / interval / 1e6,
                   (double)(cur.source_bytes_read - prev.source_bytes_read) / interval / 1e6,
                   (double)(cur.requests - prev.requests) / interval, loop);
        else
            printf("%7.1f%% %7.1f%% %7.1f%% %10.1f %10.1f %9.0f %6.1f%% %6.1f%% %6llu %5.1f%%\n", pct(hits, look),
                   pct(cur.hits_dram - prev.hits_dram, look), pct(cur.hits_nvme - prev.hits_nvme, look),
                   (double)(cur.bytes_served - prev.bytes_served) / interval / 1e6,
                   (double)(cur.source_bytes_read - prev.source_bytes_read) / interval / 1e6,
                   (double)(cur.requests - prev.requests) / interval, pct(cur.dram_used, cur.dram_cap),
                   pct(cur.nvme_used, cur.nvme_cap), (unsigned long long)cur.connections, loop);
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

/* ---- analyze ---- */

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* A quantile of the analysis: the lower bound of a log-linear bucket, so
 * "~": the true value is at most 25% above. */
static void hsize(char *buf, size_t len, uint64_t v)
{
    human(buf, len, (double)v);
}

static double bpv(const gr_field *f, size_t n, const char *name)
{
    return (double)fnum(f, n, name) / 100.0;
}

/* One job's fields f[0..n) ("job" first) as text. */
static void analyze_text(const gr_field *f, size_t n)
{
    char a[32], b[32], c2[32], d[32];
    size_t i;

    printf("job %" PRIu64 " (uid %" PRIu64 ", process group %" PRId64 ", %" PRIu64
           " connections): %s%s\n", fnum(f, n, "job"), fnum(f, n, "uid"),
           (int64_t)fnum(f, n, "pgid"), fnum(f, n, "conns"), ftext(f, n, "class"),
           fnum(f, n, "stable") ? " (stable)" : "");
    human(a, sizeof(a), (double)fnum(f, n, "bytes"));
    printf("  %" PRIu64 " requests, %s in %" PRIu64 " s; verdict changes: %" PRIu64 "\n",
           fnum(f, n, "requests"), a, fnum(f, n, "seconds"), fnum(f, n, "switches"));
    printf("  requests: %.0f%% sequential, %.0f%% strided, %.0f%% whole files, %.0f%% random\n",
           bpv(f, n, "seq_bp"), bpv(f, n, "stride_bp"), bpv(f, n, "whole_bp"),
           bpv(f, n, "random_bp"));
    hsize(a, sizeof(a), fnum(f, n, "req_p50"));
    hsize(b, sizeof(b), fnum(f, n, "req_p90"));
    hsize(c2, sizeof(c2), fnum(f, n, "file_p50"));
    hsize(d, sizeof(d), fnum(f, n, "file_p90"));
    printf("  request size p50 ~%s, p90 ~%s; %" PRIu64 " files, size p50 ~%s, p90 ~%s, "
           "%.0f%% below a chunk\n", a, b, fnum(f, n, "files"), c2, d, bpv(f, n, "small_files_bp"));
    printf("  inter-arrival p50 ~%" PRIu64 " us, p99 ~%" PRIu64 " us; idle %.0f%% of the time\n",
           fnum(f, n, "gap_p50_us"), fnum(f, n, "gap_p99_us"), bpv(f, n, "idle_bp"));
    printf("  reads that waited on a miss: %" PRIu64 ", wait p50 ~%" PRIu64 " us, p90 ~%" PRIu64
           " us, p99 ~%" PRIu64 " us\n", fnum(f, n, "waits"), fnum(f, n, "wait_p50_us"),
           fnum(f, n, "wait_p90_us"), fnum(f, n, "wait_p99_us"));
    hsize(a, sizeof(a), fnum(f, n, "reuse_p50_bytes"));
    hsize(b, sizeof(b), fnum(f, n, "reuse_p90_bytes"));
    human(c2, sizeof(c2), (double)fnum(f, n, "distinct_bytes"));
    printf("  reuse: %.0f%% of chunk reads are re-reads (%.0f%% soon), distance p50 ~%s, "
           "p90 ~%s; distinct data ~%s; order %s\n", bpv(f, n, "reuse_bp"),
           bpv(f, n, "hot_bp"), a, b, c2, ftext(f, n, "order") ? ftext(f, n, "order") : "-");
    printf("  (sampled: %" PRIu64 " chunk reads kept, rate %.4f)\n", fnum(f, n, "samples"),
           (double)fnum(f, n, "sample_ppm") / 1e6);
    for (i = 0; i < n; i++) {
        if (f[i].is_text && !strcmp(f[i].name, "tier")) {
            size_t k = i + 1;
            human(a, sizeof(a), k < n ? (double)f[k].num : 0);
            printf("  expected hit ratio, %s at %s:", f[i].text, a);
            for (k = i + 2; k < n && !f[k].is_text; k++)
                if (!strncmp(f[k].name, "hit_", 4)) {
                    int w = (int)(strlen(f[k].name) - 7);
                    printf(" %.*s %.2f", w, f[k].name + 4, (double)f[k].num / 10000.0);
                }
            printf("\n");
        }
    }
    printf("  recommendations:\n");
    for (i = 0; i < n; i++)
        if (f[i].is_text && !strcmp(f[i].name, "rec"))
            printf("    - %s\n", f[i].text);
}

/* One job's fields as a JSON object: numbers and texts by name, the tier
 * groups in "tiers", the recommendations in "recommendations". */
static void analyze_json(const gr_field *f, size_t n)
{
    int first = 1, intier = 0, ntier = 0, nrec = 0;

    printf("{");
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(f[i].name, "rec"))
            continue;
        if (f[i].is_text && !strcmp(f[i].name, "tier")) {
            printf("%s{\"tier\": ", intier ? "}, " : ntier ? "" : ", \"tiers\": [");
            if (!intier && ntier)
                printf(", ");
            json_str(f[i].text);
            intier = 1;
            ntier++;
            continue;
        }
        if (intier && (!strcmp(f[i].name, "capacity") || !strcmp(f[i].name, "best") ||
                       !strncmp(f[i].name, "hit_", 4))) {
            printf(", ");
        } else {
            if (intier) {
                printf("}]");
                intier = 0;
            }
            printf("%s", first ? "" : ", ");
        }
        first = 0;
        json_str(f[i].name);
        printf(": ");
        if (f[i].is_text)
            json_str(f[i].text);
        else
            printf("%" PRIu64, f[i].num);
    }
    if (intier)
        printf("}]");
    if (!ntier)
        printf(", \"tiers\": []");
    printf(", \"recommendations\": [");
    for (size_t i = 0; i < n; i++)
        if (f[i].is_text && !strcmp(f[i].name, "rec")) {
            printf("%s", nrec++ ? ", " : "");
            json_str(f[i].text);
        }
    printf("]}");
}

/* ---- analyze --tree: a directory tree, offline ---- */

#define TREE_HB 252                     /* log-linear, as the daemon's analysis */

static struct tree_walk {
    uint64_t files, dirs, bytes, other, errors;
    uint64_t below_chunk, below_eighth, chunk;
    uint64_t nfiles[TREE_HB], nbytes[TREE_HB];
} tw;

static unsigned tree_bucket(uint64_t v)
{
    unsigned e;

    if (v < 4)
        return (unsigned)v;
    e = 63 - (unsigned)__builtin_clzll(v);
    return 4 + (e - 2) * 4 + (unsigned)((v >> (e - 2)) & 3);
}

static uint64_t tree_lower(unsigned b)
{
    unsigned e;

    if (b < 4)
        return b;
    e = (b - 4) / 4 + 2;
    return (uint64_t)(4 + (b - 4) % 4) << (e - 2);
}

static int tree_visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)path;
    (void)ftw;
    if (type == FTW_D) {
        tw.dirs++;
    } else if (type == FTW_F && S_ISREG(st->st_mode)) {
        uint64_t sz = (uint64_t)st->st_size;
        unsigned b = tree_bucket(sz);
        tw.files++;
        tw.bytes += sz;
        tw.nfiles[b]++;
        tw.nbytes[b] += sz;
        tw.below_chunk += sz < tw.chunk;
        tw.below_eighth += sz <= tw.chunk / 8;
    } else if (type == FTW_DNR || type == FTW_NS) {
        tw.errors++;
    } else {
        tw.other++;                     /* symlinks (not followed), devices, sockets */
    }
    return 0;
}

static uint64_t tree_quantile(double q)
{
    uint64_t want = (uint64_t)(q * (double)tw.files + 0.999999), acc = 0;

    for (unsigned i = 0; i < TREE_HB; i++) {
        acc += tw.nfiles[i];
        if (acc >= want && acc)
            return tree_lower(i);
    }
    return 0;
}

/* gnuplot SCRIPT into OUTDIR/NAME.png; 0, or -1 with the reason on stderr. */
static int plot(const char *outdir, const char *name, const char *data, const char *script)
{
    char dat[4096], cmd[4200];
    FILE *f, *g;
    int rc;

    snprintf(dat, sizeof(dat), "%s/%s.dat", outdir, name);
    if (!(f = fopen(dat, "w"))) {
        fprintf(stderr, "granaryctl: analyze: %s: %s\n", dat, strerror(errno));
        return -1;
    }
    fputs(data, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "gnuplot");
    if (!(g = popen(cmd, "w"))) {
        fprintf(stderr, "granaryctl: analyze: gnuplot: %s\n", strerror(errno));
        return -1;
    }
    fprintf(g, "set terminal pngcairo size 900,500 font ',10'\nset output '%s/%s.png'\n"
            "set grid\nset key outside right\n%s\n", outdir, name, script);
    fprintf(g, "quit\n");
    rc = pclose(g);
    if (rc != 0) {
        fprintf(stderr, "granaryctl: analyze: gnuplot failed for %s/%s.png (exit %d; is "
                "gnuplot installed?)\n", outdir, name, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
        return -1;
    }
    fprintf(stderr, "wrote %s/%s.png\n", outdir, name);
    return 0;
}

static int cmd_analyze_tree(const char *dir, uint64_t chunk, int json, const char *plotdir)
{
    char a[32], b[32], c2[32], d[32], e[32];
    double small;

    memset(&tw, 0, sizeof(tw));
    tw.chunk = chunk;
    if (nftw(dir, tree_visit, 64, FTW_PHYS) < 0) {
        fprintf(stderr, "granaryctl: analyze --tree %s: %s\n", dir, strerror(errno));
        return EXIT_FAIL;
    }
    small = tw.files ? (double)tw.below_chunk / (double)tw.files : 0;
    if (json) {
        printf("{\"tree\": ");
        json_str(dir);
        printf(", \"files\": %" PRIu64 ", \"dirs\": %" PRIu64 ", \"bytes\": %" PRIu64
               ", \"other\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"chunk_size\": %" PRIu64
               ", \"file_p50\": %" PRIu64 ", \"file_p90\": %" PRIu64 ", \"file_p99\": %" PRIu64
               ", \"below_chunk\": %" PRIu64 ", \"below_eighth_chunk\": %" PRIu64
               ", \"epoch_metadata_ops\": %" PRIu64 ", \"sizes\": [",
               tw.files, tw.dirs, tw.bytes, tw.other, tw.errors, chunk, tree_quantile(0.5),
               tree_quantile(0.9), tree_quantile(0.99), tw.below_chunk, tw.below_eighth,
               2 * tw.files + tw.dirs);
        for (unsigned i = 0, k = 0; i < TREE_HB; i++)
            if (tw.nfiles[i])
                printf("%s{\"from\": %" PRIu64 ", \"files\": %" PRIu64 ", \"bytes\": %" PRIu64 "}",
                       k++ ? ", " : "", tree_lower(i), tw.nfiles[i], tw.nbytes[i]);
        printf("]}\n");
    } else {
        human(a, sizeof(a), (double)tw.bytes);
        human(b, sizeof(b), (double)tree_quantile(0.5));
        human(c2, sizeof(c2), (double)tree_quantile(0.9));
        human(d, sizeof(d), (double)tree_quantile(0.99));
        human(e, sizeof(e), (double)chunk);
        printf("%s: %" PRIu64 " files in %" PRIu64 " directories, %s", dir, tw.files, tw.dirs, a);
        if (tw.other || tw.errors)
            printf(" (%" PRIu64 " other entries not followed, %" PRIu64 " unreadable)", tw.other,
                   tw.errors);
        printf("\n  file size p50 ~%s, p90 ~%s, p99 ~%s; %.0f%% below a %s chunk, %.0f%% at or "
               "below an eighth of one\n", b, c2, d, 100.0 * small, e,
               tw.files ? 100.0 * (double)tw.below_eighth / (double)tw.files : 0.0);
        printf("  an epoch over it: %" PRIu64 " file opens and about %" PRIu64 " metadata "
               "operations at the file system (a lookup and a getattr per file, a listing per "
               "directory); through granaryd one attribute check per file once [source] attr_ttl "
               "has passed, none for a dataset registered with `granaryctl dataset add`\n",
               tw.files, 2 * tw.files + tw.dirs);
        printf("  recommendations:\n");
        if (tw.files >= 1000 && small >= 0.5 && tree_quantile(0.5) <= chunk / 8)
            printf("    - packing: %.0f%% of the files are smaller than a chunk (p50 ~%s): packed "
                   "into shards of about %s (tar, WebDataset, TFRecord), each source read fetches "
                   "a whole chunk of samples and an epoch opens %" PRIu64 " shards, not %" PRIu64
                   " files\n", 100.0 * small, b, e, tw.bytes / (chunk ? chunk : 1) + 1, tw.files);
        if (tw.files >= 1000)
            printf("    - metadata: `granaryctl dataset add %s` keeps the tree and attributes on "
                   "the node, so epochs cost the metadata server nothing\n", dir);
        if (tree_quantile(0.5) >= 4 * chunk)
            printf("    - chunk size: most files span many %s chunks; sequential readers are served "
                   "by read-ahead, and a larger [source] chunk_size (a multiple of the stripe) "
                   "means fewer, larger source reads\n", e);
        if (tw.files < 1000 || (small < 0.5 && tree_quantile(0.5) < 4 * chunk))
            printf("    - nothing to change for the layout: %s chunks suit these files\n", e);
    }
    if (plotdir) {
        char *data = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&data, &len);
        int prc;
        if (!m)
            return EXIT_FAIL;
        for (unsigned i = 0; i < TREE_HB; i++)
            if (tw.nfiles[i])
                fprintf(m, "%" PRIu64 " %" PRIu64 " %" PRIu64 "\n", tree_lower(i) ? tree_lower(i) : 1,
                        tw.nfiles[i], tw.nbytes[i]);
        fclose(m);
        {
            char script[2048];
            snprintf(script, sizeof(script),
                     "set title 'file sizes under %s'\nset logscale x 2\nset xlabel 'file size "
                     "(log scale; four buckets per power of two)'\nset format x '%%.0b%%BB'\n"
                     "set ylabel 'files'\nset y2label 'bytes'\nset y2tics\nset format y2 '%%.0b%%BB'\n"
                     "set style fill solid 0.5\nset boxwidth 1 absolute\n"
                     "plot '%s/tree_sizes.dat' using ($1*1.125):2:($1*0.25) with boxes title "
                     "'files', '' using ($1*1.125):3 axes x1y2 with points pt 7 title 'bytes'",
                     dir, plotdir);
            prc = plot(plotdir, "tree_sizes", data, script);
        }
        free(data);
        if (prc < 0)
            return EXIT_FAIL;
    }
    return 0;
}

/* --plot for the jobs: per job, the expected hit ratio of each row at each
 * tier's capacity (a bar chart). */
static int plot_job(const char *plotdir, const gr_field *f, size_t n)
{
    char *data = NULL, name[64], script[2048];
    size_t len = 0;
    FILE *m = open_memstream(&data, &len);
    int ntiers = 0, rc;
    const char *tiers[2] = { "dram", "nvme" };

    if (!m)
        return -1;
    /* rows: policy, then the hit ratio per tier */
    static const char *const rows[] = { "lru", "lfu", "sieve", "s3fifo", "epoch", "static", "belady" };
    double hit[2][7] = { { 0 } };
    for (size_t i = 0; i < n; i++) {
        if (f[i].is_text && !strcmp(f[i].name, "tier") && ntiers < 2) {
            tiers[ntiers] = f[i].text;
            ntiers++;
        } else if (ntiers && !f[i].is_text && !strncmp(f[i].name, "hit_", 4)) {
            for (int r = 0; r < 7; r++) {
                char want[32];
                snprintf(want, sizeof(want), "hit_%s_bp", rows[r]);
                if (!strcmp(f[i].name, want))
                    hit[ntiers - 1][r] = (double)f[i].num / 10000.0;
            }
        }
    }
    for (int r = 0; r < 7; r++)
        fprintf(m, "%s %.4f %.4f\n", rows[r], hit[0][r], hit[1][r]);
    fclose(m);
    snprintf(name, sizeof(name), "job%" PRIu64 "_hit_ratio", fnum(f, n, "job"));
    snprintf(script, sizeof(script),
             "set title 'job %" PRIu64 " (%s): expected hit ratio by policy at the tier capacity'\n"
             "set yrange [0:1]\nset ylabel 'hit ratio'\nset style data histograms\n"
             "set style histogram clustered\nset style fill solid 0.7\n"
             "plot '%s/%s.dat' using 2:xtic(1) title '%s'%s%s%s",
             fnum(f, n, "job"), ftext(f, n, "class") ? ftext(f, n, "class") : "?", plotdir, name,
             tiers[0], ntiers > 1 ? ", '' using 3 title '" : "", ntiers > 1 ? tiers[1] : "",
             ntiers > 1 ? "'" : "");
    rc = ntiers ? plot(plotdir, name, data, script) : 0;
    free(data);
    return rc;
}

static int cmd_analyze(int argc, char **argv)
{
    int json = 0, rc = 0, njobs = 0;
    const char *tree = NULL, *plotdir = NULL;
    uint64_t chunk = 4u << 20;
    uint64_t job = 0;
    gr_field arg, *f;
    gr_client *c;
    size_t n, start = SIZE_MAX;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: granaryctl analyze [--job ID] [--json] [--plot OUTDIR]\n"
                   "       granaryctl analyze --tree DIR [--chunk SIZE] [--json] [--plot OUTDIR]\n");
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--tree") && i + 1 < argc) {
            tree = argv[++i];
        } else if (!strcmp(argv[i], "--plot") && i + 1 < argc) {
            plotdir = argv[++i];
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) {
            if (gr__size_parse(argv[++i], &chunk) < 0 || chunk == 0) {
                fprintf(stderr, "granaryctl: analyze: --chunk wants a size (4M), not \"%s\"\n",
                        argv[i]);
                return EXIT_USAGE;
            }
        } else if (!strcmp(argv[i], "--job") && i + 1 < argc) {
            char *end;
            job = strtoull(argv[++i], &end, 10);
            if (*end || job == 0) {
                fprintf(stderr, "granaryctl: analyze: --job wants a job number, not \"%s\"\n",
                        argv[i]);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "granaryctl: analyze: unknown argument %s\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (tree && job) {
        fprintf(stderr, "granaryctl: analyze: --tree and --job do not go together\n");
        return EXIT_USAGE;
    }
    if (plotdir) {
        struct stat st;
        if (stat(plotdir, &st) < 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "granaryctl: analyze: --plot %s: not a directory\n", plotdir);
            return EXIT_USAGE;
        }
    }
    if (tree)
        return cmd_analyze_tree(tree, chunk, json, plotdir);
    c = connect_or_die();
    arg = num_field("job", job);
    if (gr_admin(c, GR_ADMIN_ANALYZE, &arg, job ? 1 : 0, &f, &n) < 0) {
        int e = errno;
        fprintf(stderr, "granaryctl: analyze: %s\n", gr_strerror_last(c));
        gr_disconnect(c);
        return e == EPERM ? EXIT_DENIED : EXIT_FAIL;
    }
    if (json)
        printf("{\"jobs\": [");
    /* the jobs: each from its "job" field to the next */
    for (size_t i = 0; i <= n; i++) {
        int omitted = i < n && !f[i].is_text && !strcmp(f[i].name, "omitted");
        if (i < n && !omitted && (f[i].is_text || strcmp(f[i].name, "job")))
            continue;
        if (start != SIZE_MAX) {
            if (json) {
                printf("%s", njobs ? ", " : "");
                analyze_json(f + start, i - start);
            } else {
                printf("%s", njobs ? "\n" : "");
                analyze_text(f + start, i - start);
            }
            njobs++;
            if (plotdir && plot_job(plotdir, f + start, i - start) < 0)
                rc = EXIT_FAIL;
        }
        start = omitted ? SIZE_MAX : i;
    }
    if (json)
        printf("], \"omitted\": %" PRIu64 "}\n", fnum(f, n, "omitted"));
    else if (!njobs)
        printf("no jobs have read through the daemon yet\n");
    else if (fnum(f, n, "omitted"))
        printf("\n(%" PRIu64 " more jobs did not fit one reply: ask with --job ID)\n",
               fnum(f, n, "omitted"));
    free(f);
    gr_disconnect(c);
    return rc;
}

/* DEST as an absolute path: relative ones are taken from the current
 * directory (resolved: the daemon does not resolve ".." or links). */
static int abs_dest(const char *d, char *out, size_t len)
{
    char parent[PATH_MAX], rp[PATH_MAX];
    const char *slash = strrchr(d, '/'), *base = slash ? slash + 1 : d;

    if (!*base)
        return -EISDIR;
    if (slash == d)
        snprintf(parent, sizeof(parent), "/");
    else
        snprintf(parent, sizeof(parent), "%.*s", slash ? (int)(slash - d) : 1, slash ? d : ".");
    if (!realpath(parent, rp)) {
        /* An absolute path goes as it is: the daemon judges it. */
        if (d[0] != '/')
            return -errno;
        if (strlen(d) >= len)
            return -ENAMETOOLONG;
        strcpy(out, d);
        return 0;
    }
    if ((size_t)snprintf(out, len, "%s/%s", strcmp(rp, "/") ? rp : "", base) >= len)
        return -ENAMETOOLONG;
    return 0;
}

static void print_ckpt(const gr_ckpt_info *i)
{
    printf("%" PRIu64 "\t%s\t%s\t%" PRIu64 "\t%u\t%s%s%s\n", i->id,
           gr_ckpt_state_name(i->state),
           i->durable ? "durable" : "not-durable", i->size, i->attempts, i->dest,
           i->error[0] ? "\terror: " : "", i->error);
}

/* Add SRC to the set: a regular file by its base name, or a directory's
 * regular files (not below).  0, or an exit code (said on stderr). */
static int set_add_path(gr_ckpt_set *s, const char *src)
{
    struct stat st;
    int fd = open(src, O_RDONLY | O_CLOEXEC), rc = 0;

    if (fd < 0 || fstat(fd, &st) < 0) {
        fprintf(stderr, "granaryctl: put --set: %s: %s\n", src, strerror(errno));
        if (fd >= 0)
            close(fd);
        return EXIT_FAIL;
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *dp = fdopendir(fd);
        struct dirent *de;
        if (!dp) {
            close(fd);
            return EXIT_FAIL;
        }
        while (rc == 0 && (de = readdir(dp))) {
            int f;
            if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
                continue;
            f = openat(dirfd(dp), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (f < 0 || fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
                if (f >= 0)
                    close(f);
                continue;           /* not a regular file: not part of the set */
            }
            if (gr_ckpt_set_add_fd(s, de->d_name, f) < 0) {
                fprintf(stderr, "granaryctl: put --set: %s/%s: %s\n", src, de->d_name,
                        strerror(errno));
                rc = EXIT_FAIL;
            }
            close(f);
        }
        closedir(dp);
        return rc;
    }
    {
        const char *base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
        if (gr_ckpt_set_add_fd(s, base, fd) < 0) {
            fprintf(stderr, "granaryctl: put --set: %s: %s\n", src,
                    errno == EEXIST ? "a file of that name is in the set already" : strerror(errno));
            rc = EXIT_FAIL;
        }
    }
    close(fd);
    return rc;
}

static int cmd_put(int argc, char **argv)
{
    int wait = 0, fd, rc = 0;
    uint64_t id;
    long timeout_ms = -1;
    char dest[PATH_MAX];
    const char *src = NULL, *dst = NULL;
    gr_ckpt *k;
    gr_client *c;
    gr_ckpt_info info;

    int set = 0, nsrc = 0;
    const char *srcs[256];

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--wait")) {
            wait = 1;
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc && !set) {
            set = 1;
            dst = argv[++i];
        } else if (set && argv[i][0] != '-') {
            if (nsrc == (int)(sizeof(srcs) / sizeof(srcs[0]))) {
                fprintf(stderr, "granaryctl: put --set: at most 256 sources (name a directory)\n");
                return EXIT_USAGE;
            }
            srcs[nsrc++] = argv[i];
        } else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
            char *end;
            double v = strtod(argv[++i], &end);
            if (*end || v < 0) {
                fprintf(stderr, "granaryctl: put: --timeout takes seconds\n");
                return EXIT_USAGE;
            }
            timeout_ms = (long)(v * 1000);
        } else if (!strcmp(argv[i], "--help")) {
            printf("usage: granaryctl put SRC DEST [--wait] [--timeout SECONDS]\n"
                   "       granaryctl put --set DEST SRC... [--wait] [--timeout SECONDS]\n");
            return 0;
        } else if (!src) {
            src = argv[i];
        } else if (!dst) {
            dst = argv[i];
        } else {
            src = NULL;
            break;
        }
    }
    if ((set && (!dst || nsrc == 0 || src)) || (!set && (!src || !dst))) {
        fprintf(stderr, "usage: granaryctl put SRC DEST [--wait] [--timeout SECONDS]\n"
                "       granaryctl put --set DEST SRC... [--wait] [--timeout SECONDS]\n");
        return EXIT_USAGE;
    }
    if ((rc = abs_dest(dst, dest, sizeof(dest))) < 0) {
        fprintf(stderr, "granaryctl: put: %s: %s\n", dst, strerror(-rc));
        return EXIT_FAIL;
    }
    if (set) {
        gr_ckpt_set *s;
        c = connect_or_die();
        s = gr_ckpt_set_create(c, dest);
        if (!s) {
            fprintf(stderr, "granaryctl: put --set %s: %s\n", dest, strerror(errno));
            gr_disconnect(c);
            return EXIT_FAIL;
        }
        for (int i = 0; i < nsrc && rc == 0; i++)
            rc = set_add_path(s, srcs[i]);
        if (rc == 0 && gr_ckpt_set_commit(s) < 0) {
            int e = errno;
            fprintf(stderr, "granaryctl: put --set %s: %s\n", dest, gr_strerror_last(c));
            rc = e == EPERM || e == EACCES ? EXIT_DENIED : EXIT_FAIL;
        }
        id = gr_ckpt_set_id(s);
        gr_ckpt_set_free(&s);
        if (rc) {
            gr_disconnect(c);
            return rc;
        }
    } else {
        fd = open(src, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "granaryctl: put: %s: %s\n", src, strerror(errno));
            return EXIT_FAIL;
        }
        c = connect_or_die();
        k = gr_ckpt_put_fd(c, fd, dest);
        close(fd);
        if (!k) {
            int e = errno;
            fprintf(stderr, "granaryctl: put %s: %s\n", dest, gr_strerror_last(c));
            gr_disconnect(c);
            return e == EPERM || e == EACCES ? EXIT_DENIED : EXIT_FAIL;
        }
        id = gr_ckpt_id(k);
        gr_ckpt_free(&k);
    }
    printf("checkpoint %" PRIu64 ": local (on the node's NVMe) for %s%s\n", id, dest,
           set ? " (a set)" : "");
    if (wait) {
        if (gr_ckpt_wait(c, id, GR_CKPT_PUBLISHED, (int)timeout_ms) < 0) {
            int e = errno;
            if (gr_ckpt_status(c, id, &info) == 0 && info.error[0])
                fprintf(stderr, "granaryctl: put %s: not published yet (%s): %s\n", dest,
                        strerror(e), info.error);
            else
                fprintf(stderr, "granaryctl: put %s: %s\n", dest,
                        e == ETIMEDOUT ? "not published before the timeout" : gr_strerror_last(c));
            rc = EXIT_FAIL;
        } else {
            printf("checkpoint %" PRIu64 ": published %s\n", id, dest);
        }
    }
    gr_disconnect(c);
    return rc;
}

static int cmd_ckpt(int argc, char **argv)
{
    gr_field arg, *f = NULL;
    size_t n = 0;
    gr_client *c;
    int rc = 0;

    if (argc == 3 && !strcmp(argv[1], "status")) {
        char *end;
        unsigned long long id = strtoull(argv[2], &end, 10);
        gr_ckpt_info info;
        if (*end || id == 0) {
            fprintf(stderr, "granaryctl: ckpt status: \"%s\" is not a checkpoint id\n", argv[2]);
            return EXIT_USAGE;
        }
        c = connect_or_die();
        if (gr_ckpt_status(c, id, &info) < 0) {
            fprintf(stderr, "granaryctl: ckpt status %llu: %s\n", id,
                    errno == ENOENT ? "no such checkpoint" : gr_strerror_last(c));
            rc = EXIT_FAIL;
        } else {
            print_ckpt(&info);
        }
        gr_disconnect(c);
        return rc;
    }
    if (argc != 2 || strcmp(argv[1], "list")) {
        fprintf(argc == 2 && !strcmp(argv[1], "--help") ? stdout : stderr,
                "usage: granaryctl ckpt list | ckpt status ID\n"
                "  one line per checkpoint: ID STATE DURABLE SIZE FAILED-DRAINS DEST [error: ...]\n");
        return argc == 2 && !strcmp(argv[1], "--help") ? 0 : EXIT_USAGE;
    }
    (void)arg;
    c = connect_or_die();
    if (gr_admin(c, GR_ADMIN_CKPT_LIST, NULL, 0, &f, &n) < 0) {
        fprintf(stderr, "granaryctl: ckpt list: %s\n", gr_strerror_last(c));
        rc = EXIT_FAIL;
    } else {
        gr_ckpt_info info;
        int have = 0;
        for (size_t i = 0; i <= n; i++) {
            if (i == n || !strcmp(f[i].name, "id")) {
                if (have)
                    print_ckpt(&info);
                if (i == n)
                    break;
                memset(&info, 0, sizeof(info));
                info.id = f[i].num;
                have = 1;
                continue;
            }
            if (!strcmp(f[i].name, "state") && f[i].is_text) {
                for (int s = GR_CKPT_STAGED; s <= GR_CKPT_SUPERSEDED; s++)
                    if (!strcmp(f[i].text, gr_ckpt_state_name(s)))
                        info.state = s;
            } else if (!strcmp(f[i].name, "dest") && f[i].is_text) {
                snprintf(info.dest, sizeof(info.dest), "%s", f[i].text);
            } else if (!strcmp(f[i].name, "error") && f[i].is_text) {
                snprintf(info.error, sizeof(info.error), "%s", f[i].text);
            } else if (!strcmp(f[i].name, "size")) {
                info.size = f[i].num;
            } else if (!strcmp(f[i].name, "attempts")) {
                info.attempts = (unsigned)f[i].num;
            } else if (!strcmp(f[i].name, "durable")) {
                info.durable = f[i].num != 0;
            }
        }
        if (n == 0)
            printf("no checkpoints\n");
    }
    free(f);
    gr_disconnect(c);
    return rc;
}

/* ---- peers ---- */

/* A text field for printing: "" if absent. */
static const char *ftext_or_empty(const gr_field *f, size_t n, const char *name)
{
    const char *t = ftext(f, n, name);
    return t ? t : "";
}

/* One member's records (from its "name" to the next) as a table row or a
 * JSON object. */
static void print_peer(const gr_field *f, size_t n, int json, int first)
{
    char b1[32], b2[32];

    if (json) {
        printf("%s{", first ? "" : ", ");
        for (size_t i = 0; i < n; i++) {
            printf("%s", i ? ", " : "");
            json_str(f[i].name);
            printf(": ");
            if (f[i].is_text)
                json_str(f[i].text);
            else
                printf("%" PRIu64, f[i].num);
        }
        printf("}");
        return;
    }
    gr__size_format(fnum(f, n, "bytes"), b1, sizeof(b1));
    gr__size_format(fnum(f, n, "served_bytes"), b2, sizeof(b2));
    printf("%-24s %-7s %-5s %8" PRIu64 " %9s %6" PRIu64 " %6" PRIu64 " %8" PRIu64 " %7" PRIu64
           " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %9s\n",
           ftext_or_empty(f, n, "name"), ftext_or_empty(f, n, "state"), ftext_or_empty(f, n, "transport"),
           fnum(f, n, "hits"), b1, fnum(f, n, "misses"), fnum(f, n, "errors"),
           fnum(f, n, "timeouts"), fnum(f, n, "corrupt"), fnum(f, n, "p50_us"),
           fnum(f, n, "p99_us"), fnum(f, n, "served"), b2);
}

static int cmd_peers(int argc, char **argv)
{
    int json = 0, rc = 0, first = 1;
    gr_field *f = NULL;
    size_t n = 0, start = 0;
    gr_client *c;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            fprintf(!strcmp(argv[i], "--help") ? stdout : stderr,
                    "usage: granaryctl peers [--json]\n"
                    "  one line per member of the peer cache: NAME STATE (self, up, down, unknown)\n"
                    "  TRANSPORT, chunks and bytes it gave us, its misses, errors, timeouts and\n"
                    "  corrupt chunks, p50/p99 latency (us), chunks and bytes we served it\n");
            return !strcmp(argv[i], "--help") ? 0 : EXIT_USAGE;
        }
    }
    c = connect_or_die();
    if (gr_admin(c, GR_ADMIN_PEERS, NULL, 0, &f, &n) < 0) {
        fprintf(stderr, "granaryctl: peers: %s\n", gr_strerror_last(c));
        gr_disconnect(c);
        return EXIT_FAIL;
    }
    if (json)
        printf("[");
    else
        printf("%-24s %-7s %-5s %8s %9s %6s %6s %8s %7s %8s %8s %8s %9s\n", "NAME", "STATE",
               "VIA", "HITS", "BYTES", "MISSES", "ERRORS", "TIMEOUTS", "CORRUPT", "P50_US",
               "P99_US", "SERVED", "SERVED_B");
    for (size_t i = 1; i <= n; i++) {
        if (i == n || !strcmp(f[i].name, "name")) {
            print_peer(f + start, i - start, json, first);
            first = 0;
            start = i;
        }
    }
    if (json)
        printf("]\n");
    free(f);
    gr_disconnect(c);
    return rc;
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
    if (!strcmp(argv[0], "dataset"))
        return cmd_dataset(argc, argv);
    if (!strcmp(argv[0], "stat"))
        return cmd_stat(argc, argv);
    if (!strcmp(argv[0], "ls"))
        return cmd_ls(argc, argv);
    if (!strcmp(argv[0], "put"))
        return cmd_put(argc, argv);
    if (!strcmp(argv[0], "ckpt"))
        return cmd_ckpt(argc, argv);
    if (!strcmp(argv[0], "peers"))
        return cmd_peers(argc, argv);
    if (!strcmp(argv[0], "analyze"))
        return cmd_analyze(argc, argv);
    fprintf(stderr, "granaryctl: unknown command \"%s\" (try --help)\n", argv[0]);
    return EXIT_USAGE;
}
