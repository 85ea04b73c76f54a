/*
 * ckpt_writer.c - build/tests/ckpt_writer: writes a checkpoint of a known
 * pattern, for tests/test_ckpt.sh and bench/ckpt.sh.
 *
 *   ckpt_writer put SOCKET DEST SIZE SEED [wait|staged|staged-wait|staged-only]   through
 *       libgranary's gr_ckpt_create/pwrite/commit (4 MiB writes); prints
 *       "acked ID" once the daemon has it local (staged: gr_ckpt_commit_staged,
 *       once it holds the bytes; then "state S", the state acknowledged, and
 *       "local_s X", seconds until it was local, unless staged-only), "published
 *       ID" after wait;
 *       "blocked_s X": seconds from the first write to commit's return
 *   ckpt_writer direct PATH SIZE SEED               pwrite + fsync, the same
 *       bytes ("blocked_s X": first write to fsync's return)
 *   ckpt_writer check PATH SIZE SEED                exit 0 if PATH holds exactly them
 *   ckpt_writer read SOCKET PATH SIZE SEED          the same, read through libgranary
 *       (gr_open, gr_pread): a checkpoint not yet published is read from its
 *       staged copy
 *   ckpt_writer setput SOCKET DEST NFILES SIZE SEED [wait]   a set (gr_ckpt_set_*) of
 *       NFILES files shard0.. of SIZE bytes each, shard i of seed SEED*1000+i
 *   ckpt_writer setcheck DEST NFILES SIZE SEED      exit 0 if DEST, resolved once
 *       (opened as a directory), holds exactly that set: MANIFEST's own XXH3,
 *       one line per file matching the file's size and XXH3, and the bytes;
 *       3 if DEST is absent, 1 otherwise (what is wrong on stderr)
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

#include <xxhash.h>

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

/* setcheck: 0 whole and as expected, 1 not, 3 absent. */
static int set_check(const char *dest, unsigned n, uint64_t size, uint64_t seed, uint8_t *buf,
                     uint8_t *got)
{
    int dfd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd;
    char text[65536], *line, *save = NULL, *last;
    unsigned lines = 0;
    ssize_t len;

    if (dfd < 0)
        return errno == ENOENT ? 3 : 1;
    fd = openat(dfd, "MANIFEST", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || (len = read(fd, text, sizeof(text) - 1)) <= 0) {
        fprintf(stderr, "setcheck %s: no MANIFEST\n", dest);
        return 1;
    }
    close(fd);
    text[len] = '\0';
    last = strstr(text, "\nxxh3 ");
    if (!last || strtoull(last + 6, NULL, 16) != XXH3_64bits(text, (size_t)(last + 1 - text))) {
        fprintf(stderr, "setcheck %s: MANIFEST fails its own checksum\n", dest);
        return 1;
    }
    last[1] = '\0';
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[300];
        unsigned long long h, sz;
        unsigned i;
        XXH3_state_t *xs;
        if (sscanf(line, "%16llx %llu %299s", &h, &sz, name) != 3)
            continue;                   /* the head lines */
        lines++;
        if (sscanf(name, "shard%u", &i) != 1 || i >= n || sz != size) {
            fprintf(stderr, "setcheck %s: unexpected %s\n", dest, line);
            return 1;
        }
        fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 1;
        xs = XXH3_createState();
        XXH3_64bits_reset(xs);
        st = (seed * 1000 + i) * 2654435761u + 1;
        for (uint64_t off = 0; off < size; off += BUF) {
            size_t k = size - off < BUF ? (size_t)(size - off) : BUF;
            fill(buf, k);
            if (pread(fd, got, k, (off_t)off) != (ssize_t)k || memcmp(buf, got, k)) {
                XXH3_freeState(xs);
                close(fd);
                return 1;               /* another version's bytes: not this set */
            }
            XXH3_64bits_update(xs, got, k);
        }
        if (pread(fd, got, 1, (off_t)size) != 0 || XXH3_64bits_digest(xs) != h) {
            fprintf(stderr, "setcheck %s: %s is longer, or its XXH3 is not the manifest's\n",
                    dest, name);
            XXH3_freeState(xs);
            close(fd);
            return 1;
        }
        XXH3_freeState(xs);
        close(fd);
    }
    close(dfd);
    if (lines != n) {
        fprintf(stderr, "setcheck %s: %u files in MANIFEST, not %u\n", dest, lines, n);
        return 1;
    }
    return 0;
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
        const char *how = argc > 6 ? argv[6] : "";
        int early = strstr(how, "staged") != NULL, acked;
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
        acked = early ? gr_ckpt_commit_staged(k) : gr_ckpt_commit(k);
        if (acked < 0) {
            fprintf(stderr, "ckpt_writer: commit %s: %s (%s)\n", argv[3], gr_strerror_last(c),
                    strerror(errno));
            return errno == EACCES || errno == EPERM ? 4 : 1;
        }
        printf("acked %" PRIu64 "\nblocked_s %.3f\n", gr_ckpt_id(k), now() - t0);
        fflush(stdout);
        if (early)
            printf("state %s\n", gr_ckpt_state_name(acked));
        if (early && !strstr(how, "only")) {
            if (gr_ckpt_wait(c, gr_ckpt_id(k), GR_CKPT_LOCAL, 120000) < 0) {
                fprintf(stderr, "ckpt_writer: wait for local: %s\n", strerror(errno));
                return 1;
            }
            printf("local_s %.3f\n", now() - t0);
            fflush(stdout);
        }
        if (strstr(how, "wait")) {
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
    if (!strcmp(argv[1], "setput") || !strcmp(argv[1], "setcheck")) {
        int put = !strcmp(argv[1], "setput"), a = put ? 3 : 2;
        unsigned n;
        gr_client *c;
        gr_ckpt_set *s;
        if (argc < a + 4)
            return 2;
        n = (unsigned)strtoul(argv[a + 1], NULL, 0);
        size = strtoull(argv[a + 2], NULL, 0);
        seed = strtoull(argv[a + 3], NULL, 0);
        if (!put) {
            int rc = set_check(argv[a], n, size, seed, buf, got);
            free(buf);
            free(got);
            return rc;
        }
        c = gr_connect(argv[2]);
        if (!c) {
            fprintf(stderr, "ckpt_writer: %s\n", gr_strerror_last(NULL));
            return 3;
        }
        t0 = now();
        s = gr_ckpt_set_create(c, argv[3]);
        if (!s) {
            perror("gr_ckpt_set_create");
            return 1;
        }
        for (unsigned i = 0; i < n; i++) {
            char name[32];
            uint8_t *all = malloc(size ? size : 1);
            if (!all)
                return 1;
            st = (seed * 1000 + i) * 2654435761u + 1;
            for (uint64_t off = 0; off < size; off += BUF)
                fill(all + off, size - off < BUF ? (size_t)(size - off) : BUF);
            snprintf(name, sizeof(name), "shard%u", i);
            if (gr_ckpt_set_add(s, name, all, size) < 0) {
                perror("gr_ckpt_set_add");
                return 1;
            }
            free(all);
        }
        if (gr_ckpt_set_commit(s) < 0) {
            fprintf(stderr, "ckpt_writer: set commit %s: %s (%s)\n", argv[3], gr_strerror_last(c),
                    strerror(errno));
            return errno == EACCES || errno == EPERM ? 4 : 1;
        }
        printf("acked %" PRIu64 "\nblocked_s %.3f\n", gr_ckpt_set_id(s), now() - t0);
        fflush(stdout);
        if (argc > a + 4 && !strcmp(argv[a + 4], "wait") &&
            gr_ckpt_wait(c, gr_ckpt_set_id(s), GR_CKPT_PUBLISHED, 120000) < 0) {
            fprintf(stderr, "ckpt_writer: wait: %s\n", strerror(errno));
            return 1;
        }
        gr_ckpt_set_free(&s);
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
