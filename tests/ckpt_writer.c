/*
 * ckpt_writer.c - build/tests/ckpt_writer: writes a checkpoint of a known
 * pattern, for tests/test_ckpt.sh and bench/ckpt.sh.
 *
 *   ckpt_writer put SOCKET DEST SIZE SEED [wait]   through libgranary's
 *       gr_ckpt_create/pwrite/commit (4 MiB writes); prints "acked ID" once
 *       the daemon has it local, "published ID" after wait; "blocked_s X":
 *       seconds from the first write to commit's return
 *   ckpt_writer direct PATH SIZE SEED               pwrite + fsync, the same
 *       bytes ("blocked_s X": first write to fsync's return)
 *   ckpt_writer check PATH SIZE SEED                exit 0 if PATH holds exactly them
 *   ckpt_writer read SOCKET PATH SIZE SEED          the same, read through libgranary
 *       (gr_open, gr_pread): a checkpoint not yet published is read from its
 *       staged copy
 * The pattern is xorshift64 of SEED, 8 bytes at a time: every seed gives
 * different bytes, so a file is one version, whole, or it is not.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "granary.h"

#define BUF (4u << 20)

static uint64_t st;

static void fill(uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 8 <= n; i += 8) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        memcpy(p + i, &st, 8);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    uint8_t *buf = malloc(BUF), *got = malloc(BUF);
    uint64_t size, seed;
    double t0;

    if (argc < 5 || !buf || !got) {
        fprintf(stderr, "usage: ckpt_writer put SOCKET DEST SIZE SEED [wait] | direct PATH SIZE SEED | "
                "check PATH SIZE SEED\n");
        return 2;
    }
    if (!strcmp(argv[1], "put")) {
        gr_client *c;
        gr_ckpt *k;
        if (argc < 6)
            return 2;
        size = strtoull(argv[4], NULL, 0);
        seed = strtoull(argv[5], NULL, 0);
        st = seed * 2654435761u + 1;
        c = gr_connect(argv[2]);
        if (!c) {
            fprintf(stderr, "ckpt_writer: %s\n", gr_strerror_last(NULL));
            return 3;
        }
        t0 = now();
        k = gr_ckpt_create(c, argv[3]);
        if (!k) {
            perror("gr_ckpt_create");
            return 1;
        }
        for (uint64_t off = 0; off < size; off += BUF) {
            size_t n = size - off < BUF ? (size_t)(size - off) : BUF;
            fill(buf, n);
            if (gr_ckpt_pwrite(k, buf, n, (off_t)off) != (ssize_t)n) {
                perror("gr_ckpt_pwrite");
                return 1;
            }
        }
        if (gr_ckpt_commit(k) < 0) {
            fprintf(stderr, "ckpt_writer: commit %s: %s (%s)\n", argv[3], gr_strerror_last(c),
                    strerror(errno));
            return errno == EACCES || errno == EPERM ? 4 : 1;
        }
        printf("acked %" PRIu64 "\nblocked_s %.3f\n", gr_ckpt_id(k), now() - t0);
        fflush(stdout);
        if (argc > 6 && !strcmp(argv[6], "wait")) {
            if (gr_ckpt_wait(c, gr_ckpt_id(k), GR_CKPT_PUBLISHED, 120000) < 0) {
                fprintf(stderr, "ckpt_writer: wait: %s\n", strerror(errno));
                return 1;
            }
            printf("published %" PRIu64 "\n", gr_ckpt_id(k));
        }
        gr_ckpt_free(&k);
        gr_disconnect(c);
        free(buf);
        free(got);
        return 0;
    }
    if (!strcmp(argv[1], "read")) {
        gr_client *c;
        gr_file *f;
        struct stat sb;
        if (argc < 6)
            return 2;
        size = strtoull(argv[4], NULL, 0);
        seed = strtoull(argv[5], NULL, 0);
        st = seed * 2654435761u + 1;
        c = gr_connect(argv[2]);
        if (!c) {
            fprintf(stderr, "ckpt_writer: %s\n", gr_strerror_last(NULL));
            return 3;
        }
        f = gr_open(c, argv[3]);
        if (!f) {
            fprintf(stderr, "ckpt_writer: open %s: %s\n", argv[3], gr_strerror_last(c));
            return errno == EACCES || errno == EPERM ? 4 : 1;
        }
        if (gr_fstat(f, &sb) < 0 || (uint64_t)sb.st_size != size) {
            fprintf(stderr, "ckpt_writer: %s: size %lld, not %" PRIu64 "\n", argv[3],
                    (long long)sb.st_size, size);
            return 1;
        }
        for (uint64_t off = 0; off < size; off += BUF) {
            size_t n = size - off < BUF ? (size_t)(size - off) : BUF;
            fill(buf, n);
            if (gr_pread(f, got, n, (off_t)off) != (ssize_t)n || memcmp(buf, got, n)) {
                fprintf(stderr, "ckpt_writer: %s differs at or after %" PRIu64 "\n", argv[3], off);
                return 1;
            }
        }
        gr_close(f);
        gr_disconnect(c);
        free(buf);
        free(got);
        return 0;
    }
    size = strtoull(argv[3], NULL, 0);
    seed = strtoull(argv[4], NULL, 0);
    st = seed * 2654435761u + 1;
    if (!strcmp(argv[1], "direct")) {
        int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            perror(argv[2]);
            return 1;
        }
        t0 = now();
        for (uint64_t off = 0; off < size; off += BUF) {
            size_t n = size - off < BUF ? (size_t)(size - off) : BUF;
            fill(buf, n);
            if (pwrite(fd, buf, n, (off_t)off) != (ssize_t)n) {
                perror("pwrite");
                return 1;
            }
        }
        if (fsync(fd) < 0) {
            perror("fsync");
            return 1;
        }
        printf("blocked_s %.3f\n", now() - t0);
        close(fd);
        free(buf);
        free(got);
        return 0;
    }
    if (!strcmp(argv[1], "check")) {
        int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) < 0 || (uint64_t)sb.st_size != size)
            return 1;
        for (uint64_t off = 0; off < size; off += BUF) {
            size_t n = size - off < BUF ? (size_t)(size - off) : BUF;
            fill(buf, n);
            if (pread(fd, got, n, (off_t)off) != (ssize_t)n || memcmp(buf, got, n))
                return 1;
        }
        close(fd);
        free(buf);
        free(got);
        return 0;
    }
    return 2;
}
