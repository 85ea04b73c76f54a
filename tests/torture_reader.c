/*
 * torture_reader.c - a reader for the crash torture (tests/test_torture.sh,
 * scripts/torture.sh) and the soak test: random reads of random files
 * through libgranary, every byte compared with the source file read
 * directly, while the daemon is being killed and restarted underneath.
 *
 *   torture_reader [-s SECONDS] [-r SEED] [-m MAXLEN] [-z] SOCKET FILE...
 *
 * Reads gr_pread (three in four) or gr_read_ref (one in four) of 1 byte to
 * MAXLEN (default 4 MiB) at random offsets; -z also drops some refs
 * unreleased and some connections mid-read (a badly behaved client).
 * A failed call is a "clear error" (counted by errno); a call that returns
 * bytes that differ from the source is a wrong byte.  At the end one line:
 *   reads=N bytes=N errors=N wrong=N max_ms=N errnos=E:N,...
 * (max_ms: the slowest single call, its verification included)
 * Exit status 0, or 1 if any byte was wrong, 2 on a usage or set-up error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "granary.h"

typedef struct tfile {
    const char *path;
    int fd;                     /* the source, read directly for comparison */
    uint64_t size;
    gr_file *gf;                /* NULL until opened (again) */
} tfile;

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;     /* xorshift64* */

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static double now_s(void)
{
    return gr__now_s();
}

static uint64_t errs_by[134];

static void count_err(int e)
{
    errs_by[e > 0 && e < 133 ? e : 133]++;
}

/* Compare got (n bytes at off) with the source; returns the wrong bytes. */
static uint64_t verify(tfile *t, const uint8_t *got, size_t n, uint64_t off, uint8_t *want)
{
    ssize_t r = pread(t->fd, want, n, (off_t)off);
    uint64_t wrong = 0;

    if (r != (ssize_t)n) {
        fprintf(stderr, "torture_reader: source pread %s: %zd\n", t->path, r);
        exit(2);
    }
    if (memcmp(got, want, n) == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            if (wrong == 0)
                fprintf(stderr, "WRONG BYTE %s off %llu: got %02x want %02x\n", t->path,
                        (unsigned long long)(off + i), got[i], want[i]);
            wrong++;
        }
    return wrong;
}

int main(int argc, char **argv)
{
    double secs = 10, end;
    size_t maxlen = 4u << 20;
    int opt, nf, bad = 0;
    tfile *tf;
    gr_client *c = NULL;
    uint8_t *buf, *want;
    uint64_t reads = 0, bytes = 0, errors = 0, wrong = 0;
    double t_read, max_read = 0;

    rng_state = (uint64_t)getpid() * 0x9E3779B97F4A7C15ULL | 1;
    while ((opt = getopt(argc, argv, "s:r:m:z")) != -1) {
        switch (opt) {
        case 's': secs = atof(optarg); break;
        case 'r': rng_state = strtoull(optarg, NULL, 0) | 1; break;
        case 'm': maxlen = strtoull(optarg, NULL, 0); break;
        case 'z': bad = 1; break;
        default: goto usage;
        }
    }
    if (argc - optind < 2 || maxlen == 0)
        goto usage;
    nf = argc - optind - 1;
    tf = calloc((size_t)nf, sizeof(*tf));
    buf = malloc(maxlen);
    want = malloc(maxlen);
    if (!tf || !buf || !want)
        return 2;
    for (int i = 0; i < nf; i++) {
        struct stat st;
        tf[i].path = argv[optind + 1 + i];
        tf[i].fd = open(tf[i].path, O_RDONLY | O_CLOEXEC);
        if (tf[i].fd < 0 || fstat(tf[i].fd, &st) < 0) {
            perror(tf[i].path);
            return 2;
        }
        tf[i].size = (uint64_t)st.st_size;
    }
    end = now_s() + secs;
    while (now_s() < end) {
        tfile *t = &tf[rnd() % (uint64_t)nf];
        uint64_t off, len;
        ssize_t n;

        if (!c) {
            /* gr_connect itself does not wait for a daemon: retry here. */
            c = gr_connect(argv[optind]);
            if (!c) {
                count_err(errno);
                errors++;
                usleep(20000);
                continue;
            }
        }
        if (!t->gf) {
            t->gf = gr_open(c, t->path);
            if (!t->gf) {
                count_err(errno);
                errors++;
                continue;
            }
        }
        off = t->size ? rnd() % t->size : 0;
        len = 1 + rnd() % maxlen;
        if (len > t->size - off)
            len = t->size - off;
        t_read = now_s();
        if (rnd() % 4) {
            n = gr_pread(t->gf, buf, len, (off_t)off);
            if (n >= 0 && (uint64_t)n != len) {
                fprintf(stderr, "SHORT READ %s off %llu: %zd of %llu\n", t->path,
                        (unsigned long long)off, n, (unsigned long long)len);
                wrong += len - (uint64_t)n;
            }
            if (n > 0)
                wrong += verify(t, buf, (size_t)n, off, want);
        } else {
            const void *data;
            gr_ref *ref;
            n = gr_read_ref(t->gf, (off_t)off, len, &data, &ref);
            if (n > 0)
                wrong += verify(t, data, (size_t)n, off, want);
            if (n >= 0 && !(bad && rnd() % 8 == 0))
                gr_ref_release(ref);    /* else leaked until disconnect */
        }
        reads++;
        t_read = now_s() - t_read;
        if (t_read > max_read)
            max_read = t_read;
        if (n < 0) {
            count_err(errno);
            errors++;
            if (errno == ESTALE) {
                gr_close(t->gf);
                t->gf = NULL;
            }
        } else {
            bytes += (uint64_t)n;
        }
        if (bad && rnd() % 64 == 0) {
            /* drop the connection with the leases it still holds */
            for (int i = 0; i < nf; i++) {
                gr_close(tf[i].gf);
                tf[i].gf = NULL;
            }
            gr_disconnect(c);
            c = NULL;
        }
    }
    printf("reads=%llu bytes=%llu errors=%llu wrong=%llu max_ms=%.0f errnos=", (unsigned long long)reads,
           (unsigned long long)bytes, (unsigned long long)errors, (unsigned long long)wrong,
           max_read * 1000);
    for (int e = 0; e < 134; e++)
        if (errs_by[e])
            printf("%s:%llu,", e == 133 ? "other" : strerrorname_np(e) ? strerrorname_np(e) : "?",
                   (unsigned long long)errs_by[e]);
    printf("\n");
    for (int i = 0; i < nf; i++) {
        if (tf[i].gf)
            gr_close(tf[i].gf);
        close(tf[i].fd);
    }
    gr_disconnect(c);
    free(tf);
    free(buf);
    free(want);
    return wrong ? 1 : 0;
usage:
    fprintf(stderr, "usage: torture_reader [-s SECONDS] [-r SEED] [-m MAXLEN] [-z] SOCKET FILE...\n");
    return 2;
}
