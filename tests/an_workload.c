/*
 * an_workload.c - real reads of one IO pattern through a real granaryd
 * (libgranary), for tests/test_analyze.sh: each pattern the classifier
 * (daemon/analysis/) must recognise.
 *
 *   an_workload SOCKET seq    FILE...           each file front to back, 1 MiB reads
 *   an_workload SOCKET random FILE COUNT        COUNT 4 KiB reads at random offsets
 *   an_workload SOCKET epoch  EPOCHS FILE...    EPOCHS passes, each a fresh shuffle,
 *                                               each file read whole
 *   an_workload SOCKET strided FILE STRIDE LEN  LEN bytes every STRIDE bytes, to the end
 *   an_workload SOCKET ckpt   BURSTS GAP_MS FILE...  BURSTS times: every file read
 *                                               front to back in 1 MiB reads, then a pause
 *   an_workload SOCKET mixed  FILE1 FILE2 COUNT  COUNT requests, alternating:
 *                                               sequential 1 MiB reads of FILE1 (round
 *                                               and round), 4 KiB random reads of FILE2
 * Prints the requests made; exit 0, or 1 on a failed read (with the reason).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "granary.h"

static gr_client *cl;
static char *buf;
static unsigned long nreq;
static unsigned long long rng = 88172645463325252ull;

static unsigned long long rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static gr_file *open_or_die(const char *path)
{
    gr_file *f = gr_open(cl, path);

    if (!f) {
        fprintf(stderr, "an_workload: open %s: %s\n", path, gr_strerror_last(cl));
        exit(1);
    }
    return f;
}

static off_t size_of(gr_file *f)
{
    struct stat st;

    if (gr_fstat(f, &st) < 0) {
        fprintf(stderr, "an_workload: fstat: %s\n", gr_strerror_last(cl));
        exit(1);
    }
    return st.st_size;
}

static void rd(gr_file *f, size_t len, off_t off)
{
    if (gr_pread(f, buf, len, off) < 0) {
        fprintf(stderr, "an_workload: pread: %s\n", gr_strerror_last(cl));
        exit(1);
    }
    nreq++;
}

static void read_through(const char *path, size_t step)
{
    gr_file *f = open_or_die(path);
    off_t size = size_of(f);

    for (off_t off = 0; off < size; off += (off_t)step)
        rd(f, step, off);
    gr_close(f);
}

int main(int argc, char **argv)
{
    const char *mode;

    if (argc < 4) {
        fprintf(stderr, "usage: an_workload SOCKET MODE ARGS... (see the source)\n");
        return 2;
    }
    cl = gr_connect(argv[1]);
    buf = malloc(4u << 20);
    if (!cl || !buf) {
        fprintf(stderr, "an_workload: connect %s: %s\n", argv[1], gr_strerror_last(NULL));
        return 1;
    }
    mode = argv[2];
    if (!strcmp(mode, "seq")) {
        for (int i = 3; i < argc; i++)
            read_through(argv[i], 1u << 20);
    } else if (!strcmp(mode, "random") && argc == 5) {
        gr_file *f = open_or_die(argv[3]);
        off_t size = size_of(f);
        long n = atol(argv[4]);
        for (long i = 0; i < n; i++)
            rd(f, 4096, (off_t)(rnd() % (unsigned long long)(size / 4096)) * 4096);
        gr_close(f);
    } else if (!strcmp(mode, "epoch") && argc >= 5) {
        int epochs = atoi(argv[3]), n = argc - 4;
        int *order = malloc(sizeof(int) * (size_t)n);
        for (int i = 0; i < n; i++)
            order[i] = 4 + i;
        for (int e = 0; e < epochs; e++) {
            for (int i = n - 1; i > 0; i--) {
                int k = (int)(rnd() % (unsigned long long)(i + 1)), t = order[i];
                order[i] = order[k];
                order[k] = t;
            }
            for (int i = 0; i < n; i++) {
                gr_file *f = open_or_die(argv[order[i]]);
                rd(f, (size_t)size_of(f), 0);
                gr_close(f);
            }
        }
        free(order);
    } else if (!strcmp(mode, "strided") && argc == 6) {
        gr_file *f = open_or_die(argv[3]);
        off_t size = size_of(f), stride = atol(argv[4]);
        size_t len = (size_t)atol(argv[5]);
        for (off_t off = 0; off < size; off += stride)
            rd(f, len, off);
        gr_close(f);
    } else if (!strcmp(mode, "ckpt") && argc >= 6) {
        int bursts = atoi(argv[3]);
        long gap = atol(argv[4]);
        for (int b = 0; b < bursts; b++) {
            for (int i = 5; i < argc; i++)
                read_through(argv[i], 1u << 20);
            if (b + 1 < bursts) {
                struct timespec ts = { gap / 1000, (gap % 1000) * 1000000 };
                nanosleep(&ts, NULL);
            }
        }
    } else if (!strcmp(mode, "mixed") && argc == 6) {
        gr_file *f = open_or_die(argv[3]), *g = open_or_die(argv[4]);
        off_t size = size_of(f), gsize = size_of(g), pos = 0;
        long n = atol(argv[5]);
        for (long i = 0; i < n; i++) {
            if (i % 2 == 0) {
                rd(f, 1u << 20, pos);
                pos = (pos + (1 << 20)) % size;
            } else {
                rd(g, 4096, (off_t)(rnd() % (unsigned long long)(gsize / 4096)) * 4096);
            }
        }
        gr_close(f);
        gr_close(g);
    } else {
        fprintf(stderr, "an_workload: bad mode or arguments: %s\n", mode);
        return 2;
    }
    printf("%lu requests\n", nreq);
    gr_disconnect(cl);
    free(buf);
    return 0;
}
