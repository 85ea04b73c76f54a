/*
 * granaryctl.c - the admin CLI: read files through the daemon and show its
 * counters.  Errors are one line on stderr; exit codes: 0 success, 1 the
 * operation failed, 2 usage error, 3 the daemon cannot be reached.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "granary.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define EXIT_CONNECT 3
#define CAT_BUF (16u << 20)

static const char *socket_path;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: granaryctl [-s SOCKET] COMMAND [ARGS]\n"
            "commands:\n"
            "  cat PATH...        write the files' bytes, read through the daemon, to stdout\n"
            "  stats [--json]     the daemon's counters, as a table or one JSON object\n"
            "options:\n"
            "  -s, --socket PATH  the daemon's socket (default: $GRANARY_SOCKET, else the\n"
            "                     [daemon] socket of /etc/granary/granary.conf)\n"
            "  -h, --help         this text; COMMAND --help for a command's\n"
            "exit status: 0 ok, 1 failed, 2 usage, 3 daemon unreachable\n");
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
    fprintf(stderr, "granaryctl: unknown command \"%s\" (try --help)\n", argv[0]);
    return EXIT_USAGE;
}
