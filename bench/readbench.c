/*
 * readbench.c - read files whole, through libgranary or with plain
 * pread(2), and print the throughput as one JSON line per file, so the
 * benchmark script can compare both in one run.
 *
 *   readbench [-s SOCKET] [--posix] [--buf BYTES] PATH...
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "granary.h"

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "socket", required_argument, NULL, 's' },
        { "posix", no_argument, NULL, 'p' },
        { "buf", required_argument, NULL, 'b' },
        { NULL, 0, NULL, 0 },
    };
    const char *sock = NULL;
    size_t bufsz = 8u << 20;
    int posix = 0, opt;
    gr_client *c = NULL;
    char *buf;

    while ((opt = getopt_long(argc, argv, "s:", opts, NULL)) != -1) {
        if (opt == 's')
            sock = optarg;
        else if (opt == 'p')
            posix = 1;
        else if (opt == 'b')
            bufsz = strtoul(optarg, NULL, 0);
        else
            return 2;
    }
    buf = malloc(bufsz);
    if (!buf || optind >= argc) {
        fprintf(stderr, "usage: readbench [-s SOCKET] [--posix] [--buf BYTES] PATH...\n");
        return 2;
    }
    if (!posix && !(c = gr_connect(sock))) {
        fprintf(stderr, "readbench: connect: %s\n", strerror(errno));
        return 1;
    }
    for (int i = optind; i < argc; i++) {
        double t0 = now(), dt;
        unsigned long long total = 0;
        ssize_t n;

        if (posix) {
            int fd = open(argv[i], O_RDONLY);
            if (fd < 0) {
                fprintf(stderr, "readbench: %s: %s\n", argv[i], strerror(errno));
                return 1;
            }
            while ((n = pread(fd, buf, bufsz, (off_t)total)) > 0)
                total += (unsigned long long)n;
            close(fd);
        } else {
            gr_file *f = gr_open(c, argv[i]);
            if (!f) {
                fprintf(stderr, "readbench: %s: %s\n", argv[i], gr_strerror_last(c));
                return 1;
            }
            while ((n = gr_pread(f, buf, bufsz, (off_t)total)) > 0)
                total += (unsigned long long)n;
            gr_close(f);
        }
        if (n < 0) {
            fprintf(stderr, "readbench: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        dt = now() - t0;
        printf("{\"path\": \"%s\", \"mode\": \"%s\", \"bytes\": %llu, \"seconds\": %.6f, "
               "\"gb_per_s\": %.3f}\n",
               argv[i], posix ? "posix" : "granary", total, dt, (double)total / dt / 1e9);
    }
    gr_disconnect(c);
    free(buf);
    return 0;
}
