/*
 * check_arena.c - unit tests of the DRAM tier's shared memory (arena.c):
 * block sizes and alignment, buddy merging, a random stress run against a
 * page-owner reference, and the seals that keep clients from writing,
 * resizing or writably mapping a segment.
 *
 * Built with -DARENA_SANE (both files), the stress test also runs the
 * arena's internal invariant check.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "fdpass.h"

#ifdef ARENA_SANE
int arena_sane(const arena *a);     /* arena.c, only with -DARENA_SANE */
#endif

#define MiB (1024ull * 1024)

/* For hot loops: Check's ck_assert_* records every passing assertion with
 * a write to its results file, which would dominate the stress run. */
#define FAST_CHECK(c) do { \
        if (!(c)) \
            ck_abort_msg("%s:%d: assertion %s failed", __FILE__, __LINE__, #c); \
    } while (0)

static arena *mk(uint64_t capacity, uint64_t seg_size)
{
    char err[256] = "";
    arena *a = NULL;
    int rc = arena_new(capacity, seg_size, &a, err, sizeof(err));

    ck_assert_msg(rc == 0, "arena_new: %d %s", rc, err);
    ck_assert_ptr_nonnull(a);
    return a;
}

static uint64_t used(const arena *a)
{
    arena_stats st;

    arena_get_stats(a, &st);
    return st.used_bytes;
}

static uint64_t failures(const arena *a)
{
    arena_stats st;

    arena_get_stats(a, &st);
    return st.alloc_failures;
}

/* xorshift64*: deterministic, so a failure reproduces. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Hand fd across a socketpair with SCM_RIGHTS, as the daemon hands a
 * segment to a client; returns the received descriptor. */
static int pass_fd(int fd)
{
    int sv[2], got = -1, n = 0;
    char byte = 'x';
    struct iovec iov = { .iov_base = &byte, .iov_len = 1 };

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ck_assert_int_eq(gr__send_fds(sv[0], &iov, 1, &fd, 1, 0), 1);
    ck_assert_int_eq(gr__recv_fds(sv[1], &byte, 1, &got, 1, &n, 0, NULL), 1);
    ck_assert_int_eq(n, 1);
    close(sv[0]);
    close(sv[1]);
    ck_assert_int_ge(got, 0);
    return got;
}

START_TEST(test_new_args)
{
    char err[256];
    arena *sentinel = mk(0, 4096), *a = sentinel;  /* set to NULL on failure */
    arena_stats st;
    static const uint64_t bad[] = { 0, 2048, 4095, 6 * 4096, 1ull << 43, UINT64_MAX };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        ck_assert_int_eq(arena_new(1 * MiB, bad[i], &a, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_null(a);
        ck_assert(err[0] != 0);
    }
    arena_free(&sentinel);
    /* too many segments */
    ck_assert_int_eq(arena_new(UINT64_MAX, 4096, &a, NULL, 0), -EINVAL);
    ck_assert_ptr_null(a);

    a = mk(0, 64 * 1024);           /* at least one segment */
    ck_assert_uint_eq(arena_segments(a), 1);
    ck_assert_uint_eq(arena_segment_size(a), 64 * 1024);
    arena_free(&a);
    ck_assert_ptr_null(a);

    a = mk(3 * MiB + 1, MiB);       /* rounded up to whole segments */
    arena_get_stats(a, &st);
    ck_assert_uint_eq(st.segments, 4);
    ck_assert_uint_eq(st.capacity_bytes, 4 * MiB);
    ck_assert_uint_eq(st.used_bytes, 0);
    ck_assert_uint_eq(st.alloc_failures, 0);
    for (uint32_t i = 0; i < 4; i++) {
        ck_assert_int_ge(arena_segment_fd(a, i), 0);
        for (uint32_t j = 0; j < i; j++)
            ck_assert_int_ne(arena_segment_fd(a, i), arena_segment_fd(a, j));
    }
    ck_assert_int_eq(arena_segment_fd(a, 4), -1);
    ck_assert_int_eq(arena_segment_fd(a, UINT32_MAX), -1);
    arena_free(&a);

}
END_TEST

/* More segments than one bitmap word: one-page segments, order 0 only. */
START_TEST(test_many_segments)
{
    const uint32_t n = 130;
    arena *a = mk(n * 4096, 4096);
    arena_block b[130], x;

    ck_assert_uint_eq(arena_segments(a), n);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_int_eq(arena_alloc(a, 1 + i % 4096, &b[i]), 0);
        ck_assert_uint_eq(b[i].seg, i);             /* lowest segment first */
        ck_assert_uint_eq(b[i].off, 0);
        b[i].ptr[4095] = (uint8_t)i;
    }
    ck_assert_int_eq(arena_alloc(a, 4097, &x), -EINVAL);
    ck_assert_int_eq(arena_alloc(a, 1, &x), -ENOMEM);
    arena_release(a, &b[100]);
    arena_release(a, &b[70]);
    ck_assert_int_eq(arena_alloc(a, 4096, &x), 0);
    ck_assert_uint_eq(x.seg, 70);
    ck_assert_uint_eq(x.ptr[4095], 70);             /* same memory, not cleared */
    ck_assert_int_eq(arena_alloc(a, 4096, &x), 0);
    ck_assert_uint_eq(x.seg, 100);
    ck_assert_int_eq(arena_alloc(a, 1, &x), -ENOMEM);
    ck_assert_uint_eq(failures(a), 2);
    ck_assert_uint_eq(used(a), n * 4096ull);
    arena_free(&a);
}
END_TEST

START_TEST(test_sizes_and_visibility)
{
    const uint64_t seg = 4 * MiB;
    arena *a = mk(2 * seg, seg);
    static const uint64_t req[] = { 1, 4096, 4097, 8191, 8192, 12289, 65536, 65537, 4 * MiB };
    static const uint64_t got[] = { 4096, 4096, 8192, 8192, 8192, 16384, 65536, 131072, 4 * MiB };
    arena_block b[sizeof(req) / sizeof(req[0])], x;
    uint8_t *ro[2];
    uint64_t sum = 0;

    ck_assert_int_eq(arena_alloc(a, 0, &x), -EINVAL);
    ck_assert_int_eq(arena_alloc(a, seg + 1, &x), -EINVAL);
    ck_assert_int_eq(arena_alloc(a, UINT64_MAX, &x), -EINVAL);
    ck_assert_uint_eq(failures(a), 0);      /* -EINVAL is not a failure */

    for (int s = 0; s < 2; s++) {
        ro[s] = mmap(NULL, seg, PROT_READ, MAP_SHARED, arena_segment_fd(a, (uint32_t)s), 0);
        ck_assert(ro[s] != MAP_FAILED);
    }
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
        ck_assert_int_eq(arena_alloc(a, req[i], &b[i]), 0);
        ck_assert_uint_eq(b[i].size, got[i]);
        ck_assert_uint_lt(b[i].seg, 2);
        ck_assert_uint_eq(b[i].off % b[i].size, 0);
        ck_assert_uint_le(b[i].off + b[i].size, seg);
        ck_assert_uint_eq((uintptr_t)b[i].ptr % 4096, 0);         /* O_DIRECT */
        sum += b[i].size;
        ck_assert_uint_eq(used(a), sum);
        /* the daemon writes through ptr; a read-only client mapping sees it */
        memset(b[i].ptr, (int)(0x10 + i), (size_t)b[i].size);
        ck_assert_uint_eq(ro[b[i].seg][b[i].off], 0x10 + i);
        ck_assert_uint_eq(ro[b[i].seg][b[i].off + b[i].size - 1], 0x10 + i);
    }
    /* nothing overwrote anything: blocks are disjoint */
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
        const uint8_t *p = ro[b[i].seg] + b[i].off;

        for (uint64_t j = 0; j < b[i].size; j += 509)
            ck_assert_uint_eq(p[j], 0x10 + i);
    }
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++)
        arena_release(a, &b[i]);
    ck_assert_uint_eq(used(a), 0);
    /* both segments whole again */
    ck_assert_int_eq(arena_alloc(a, seg, &b[0]), 0);
    ck_assert_int_eq(arena_alloc(a, seg, &b[1]), 0);
    ck_assert_uint_ne(b[0].seg, b[1].seg);
    ck_assert_uint_eq(b[0].off, 0);
    ck_assert_uint_eq(b[1].off, 0);
    ck_assert_int_eq(arena_alloc(a, 1, &x), -ENOMEM);
    ck_assert_uint_eq(failures(a), 1);
    ck_assert_uint_eq(used(a), 2 * seg);
    arena_release(a, &b[0]);
    arena_release(a, &b[1]);
    ck_assert_uint_eq(used(a), 0);
    munmap(ro[0], seg);
    munmap(ro[1], seg);
    arena_free(&a);
}
END_TEST

START_TEST(test_merge)
{
    const uint64_t seg = 4 * MiB, n = seg / 4096;
    arena *a = mk(seg, seg);
    arena_block *b = calloc(n, sizeof(*b)), big, x;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    uint8_t *seen = calloc(n, 1);

    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(seen);
    for (int round = 0; round < 3; round++) {
        for (uint64_t i = 0; i < n; i++) {
            FAST_CHECK(arena_alloc(a, 1 + rnd(&s) % 4096, &b[i]) == 0);
            FAST_CHECK(b[i].size == 4096);
            FAST_CHECK(!seen[b[i].off / 4096]);
            seen[b[i].off / 4096] = 1;
        }
        FAST_CHECK(used(a) == seg);
        FAST_CHECK(arena_alloc(a, 1, &x) == -ENOMEM);
        FAST_CHECK(arena_alloc(a, seg, &x) == -ENOMEM);
        for (uint64_t i = n - 1; i > 0; i--) {      /* Fisher-Yates */
            uint64_t j = rnd(&s) % (i + 1);
            arena_block t = b[i];

            b[i] = b[j];
            b[j] = t;
        }
        for (uint64_t i = 0; i < n; i++) {
            arena_release(a, &b[i]);
            seen[b[i].off / 4096] = 0;
        }
        FAST_CHECK(used(a) == 0);
        FAST_CHECK(arena_alloc(a, seg, &big) == 0);
        FAST_CHECK(big.off == 0);
        FAST_CHECK(big.size == seg);
        arena_release(a, &big);
    }
    FAST_CHECK(failures(a) == 6);
    free(b);
    free(seen);
    arena_free(&a);
}
END_TEST

/* The reference for the stress test: which live block owns each page. */
typedef struct ref {
    uint32_t nsegs;
    uint64_t pages;             /* per segment */
    int32_t *owner;             /* nsegs * pages: live index + 1, or 0 */
} ref;

/* Is there an aligned run of 2^k free pages anywhere?  With full buddy
 * merging that holds exactly when a free block of order >= k exists. */
static int ref_has_free(const ref *r, uint32_t k)
{
    uint64_t run = 1ull << k;

    for (uint64_t i = 0; i < (uint64_t)r->nsegs * r->pages; i += run) {
        uint64_t j = 0;

        while (j < run && r->owner[i + j] == 0)
            j++;
        if (j == run)
            return 1;
    }
    return 0;
}

START_TEST(test_stress)
{
    const uint64_t seg = MiB;
    const uint32_t nsegs = 4, ops = 200000, max_live = 4096;
    arena *a = mk(nsegs * seg, seg);
    ref r = { .nsegs = nsegs, .pages = seg / 4096 };
    arena_block *live = calloc(max_live, sizeof(*live));
    uint8_t *base[4];
    uint64_t s = 12345, sum = 0, nfail = 0, nalloc = 0;
    uint32_t nlive = 0;

    r.owner = calloc(nsegs * r.pages, sizeof(int32_t));
    ck_assert_ptr_nonnull(live);
    ck_assert_ptr_nonnull(r.owner);
    for (uint32_t i = 0; i < nsegs; i++)
        base[i] = NULL;
    for (uint32_t op = 0; op < ops; op++) {
        /* drift between a nearly empty and a full arena, so both
         * splitting and failures get exercised */
        int alloc_bias = (op / 20000) % 2 ? 40 : 65;

        if (nlive < max_live && (nlive == 0 || (int)(rnd(&s) % 100) < alloc_bias)) {
            /* sizes skewed small: order 0..8 uniformly, size uniform in it */
            uint32_t k = (uint32_t)(rnd(&s) % 9);
            uint64_t lo = k ? (4096ull << (k - 1)) + 1 : 1, hi = 4096ull << k;
            uint64_t size = lo + rnd(&s) % (hi - lo + 1);
            arena_block b;
            int rc = arena_alloc(a, size, &b);

            if (rc == -ENOMEM) {
                nfail++;
                FAST_CHECK(failures(a) == nfail);
                /* brute force: one pass over the page owners */
                if (ref_has_free(&r, k))
                    ck_abort_msg("op %u: -ENOMEM for order %u but a free aligned run exists",
                                 op, k);
                continue;
            }
            FAST_CHECK(rc == 0);
            nalloc++;
            FAST_CHECK(b.size == hi);
            FAST_CHECK(b.seg < nsegs);
            FAST_CHECK(b.off % b.size == 0);
            FAST_CHECK(b.off + b.size <= seg);
            if (!base[b.seg])
                base[b.seg] = b.ptr - b.off;
            FAST_CHECK(b.ptr == base[b.seg] + b.off);
            for (uint64_t p = 0; p < b.size / 4096; p++) {
                int32_t *o = &r.owner[b.seg * r.pages + b.off / 4096 + p];

                if (*o != 0)
                    ck_abort_msg("op %u: block overlaps live block %d", op, *o - 1);
                *o = (int32_t)nlive + 1;
            }
            /* mark the block's ends (commits at most 2 pages per block) */
            b.ptr[0] = (uint8_t)nlive;
            b.ptr[b.size - 1] = (uint8_t)(nlive >> 8);
            live[nlive++] = b;
            sum += b.size;
        } else {
            uint32_t i = (uint32_t)(rnd(&s) % nlive);
            arena_block b = live[i];

            FAST_CHECK(b.ptr[0] == (uint8_t)i);
            FAST_CHECK(b.ptr[b.size - 1] == (uint8_t)(i >> 8));
            for (uint64_t p = 0; p < b.size / 4096; p++)
                r.owner[b.seg * r.pages + b.off / 4096 + p] = 0;
            arena_release(a, &b);
            sum -= b.size;
            /* move the last live block into slot i */
            if (i != --nlive) {
                arena_block m = live[nlive];

                live[i] = m;
                for (uint64_t p = 0; p < m.size / 4096; p++)
                    r.owner[m.seg * r.pages + m.off / 4096 + p] = (int32_t)i + 1;
                m.ptr[0] = (uint8_t)i;
                m.ptr[m.size - 1] = (uint8_t)(i >> 8);
            }
        }
        FAST_CHECK(used(a) == sum);
#ifdef ARENA_SANE
        if (op % 997 == 0)
            FAST_CHECK(arena_sane(a));
#endif
    }
    /* the run did exercise both sides */
    ck_assert_uint_gt(nfail, 1000);
    ck_assert_uint_gt(nalloc, 50000);
    while (nlive > 0)
        arena_release(a, &live[--nlive]);
    FAST_CHECK(used(a) == 0);
#ifdef ARENA_SANE
    FAST_CHECK(arena_sane(a));
#endif
    for (uint32_t i = 0; i < nsegs; i++) {
        arena_block b;

        FAST_CHECK(arena_alloc(a, seg, &b) == 0);
    }
    free(live);
    free(r.owner);
    arena_free(&a);
}
END_TEST

START_TEST(test_sealing)
{
    const uint64_t seg = MiB;
    arena *a = mk(seg, seg);
    arena_block b;
    int fd, rw, rdonly;
    char path[64], c = 'Z';
    uint8_t *ro, *p;
    struct stat st;
    off_t size;

    ck_assert_int_eq(arena_alloc(a, 8192, &b), 0);
    memset(b.ptr, 0xA5, 8192);
    fd = pass_fd(arena_segment_fd(a, 0));
    ck_assert_int_eq(fstat(fd, &st), 0);
    size = st.st_size;                  /* the blocks and the generation table */
    ck_assert_int_gt(size, (off_t)seg);

    ck_assert_int_eq(fcntl(fd, F_GET_SEALS),
                     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
    /* seals cannot be added (F_SEAL_SEAL) nor ever removed */
    errno = 0;
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
    ck_assert_int_eq(errno, EPERM);

    /* writable shared mappings */
    errno = 0;
    ck_assert(mmap(NULL, seg, PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
    ck_assert_int_eq(errno, EPERM);
    errno = 0;
    ck_assert(mmap(NULL, seg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
    ck_assert_int_eq(errno, EPERM);

    /* write, resize, allocate, punch */
    errno = 0;
    ck_assert_int_eq(write(fd, &c, 1), -1);
    ck_assert_int_eq(errno, EPERM);
    errno = 0;
    ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)b.off), -1);
    ck_assert_int_eq(errno, EPERM);
    errno = 0;
    ck_assert_int_eq(ftruncate(fd, (off_t)seg / 2), -1);
    ck_assert_int_eq(errno, EPERM);
    errno = 0;
    ck_assert_int_eq(ftruncate(fd, (off_t)seg * 2), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_eq(ftruncate(fd, 0), -1);
    errno = 0;
    ck_assert_int_eq(fallocate(fd, 0, size, 4096), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_eq(fallocate(fd, FALLOC_FL_KEEP_SIZE, size, 4096), -1);
    errno = 0;
    ck_assert_int_eq(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)b.off, 8192), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_eq(fallocate(fd, FALLOC_FL_ZERO_RANGE, (off_t)b.off, 8192), -1);
    /* fallocate(mode 0) inside the file may succeed on this O_RDWR
     * description: it only allocates pages and must leave data alone */
    (void)fallocate(fd, 0, 0, (off_t)seg);

    /* a reopen through /proc, read-write, is no better */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    rw = open(path, O_RDWR | O_CLOEXEC);
    ck_assert_int_ge(rw, 0);
    errno = 0;
    ck_assert(mmap(NULL, seg, PROT_WRITE, MAP_SHARED, rw, 0) == MAP_FAILED);
    ck_assert_int_eq(errno, EPERM);
    errno = 0;
    ck_assert_int_eq(write(rw, &c, 1), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_eq(ftruncate(rw, (off_t)seg / 2), -1);
    ck_assert_int_eq(fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), -1);
    rdonly = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(rdonly, 0);
    ck_assert(mmap(NULL, seg, PROT_WRITE, MAP_SHARED, rdonly, 0) == MAP_FAILED);
    ck_assert_int_eq(write(rdonly, &c, 1), -1);

    /* read-only shared mappings work, see the daemon's writes (past and
     * future), and cannot be made writable */
    ro = mmap(NULL, seg, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert(ro != MAP_FAILED);
    for (uint64_t i = 0; i < 8192; i++)
        ck_assert_uint_eq(ro[b.off + i], 0xA5);
    b.ptr[100] = 0x5A;
    ck_assert_uint_eq(ro[b.off + 100], 0x5A);
    errno = 0;
    ck_assert_int_eq(mprotect(ro, seg, PROT_READ | PROT_WRITE), -1);
    ck_assert_int_eq(errno, EACCES);
    ck_assert_int_eq(mprotect(ro, 4096, PROT_WRITE), -1);
    p = mmap(NULL, seg, PROT_READ, MAP_SHARED, rw, 0);
    ck_assert(p != MAP_FAILED);
    ck_assert_int_eq(mprotect(p, seg, PROT_READ | PROT_WRITE), -1);
    ck_assert_uint_eq(p[b.off + 100], 0x5A);
    munmap(p, seg);

    /* a private writable mapping is a copy: the daemon's bytes stay */
    p = mmap(NULL, seg, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ck_assert(p != MAP_FAILED);
    memset(p + b.off, 0xEE, 8192);
    munmap(p, seg);
    ck_assert_uint_eq(b.ptr[0], 0xA5);
    ck_assert_uint_eq(ro[b.off + 8191], 0xA5);

    /* none of the above changed the segment's size or the daemon's view */
    ck_assert_int_eq(lseek(fd, 0, SEEK_END), size);
    ck_assert_uint_eq(b.ptr[100], 0x5A);
    ck_assert_uint_eq(b.ptr[101], 0xA5);
    b.ptr[8191] = 1;                    /* the daemon's mapping still writes */
    ck_assert_uint_eq(ro[b.off + 8191], 1);

    /* a client's mapping outlives the arena */
    arena_free(&a);
    ck_assert_uint_eq(ro[b.off + 100], 0x5A);
    munmap(ro, seg);
    close(rw);
    close(rdonly);
    close(fd);
}
END_TEST

START_TEST(test_bad_release)
{
    arena *a = mk(2 * MiB, MiB);
    arena_block b, c, bad;

    ck_assert_int_eq(arena_alloc(a, 8192, &b), 0);
    ck_assert_int_eq(arena_alloc(a, 4096, &c), 0);
    arena_release(a, &b);
    ck_assert_uint_eq(used(a), 4096);
    /* the lines these log ("ERROR arena: release ...") are expected */
    arena_release(a, &b);                       /* double release */
    bad = c;
    bad.size = 8192;                            /* wrong size */
    arena_release(a, &bad);
    bad = c;
    bad.off += 1;                               /* misaligned */
    arena_release(a, &bad);
    bad = c;
    bad.seg = 7;                                /* no such segment */
    arena_release(a, &bad);
    bad = c;
    bad.off = MiB;                              /* past the end */
    arena_release(a, &bad);
    ck_assert_uint_eq(used(a), 4096);
    arena_release(a, &c);
    ck_assert_uint_eq(used(a), 0);
#ifdef ARENA_SANE
    ck_assert(arena_sane(a));
#endif
    ck_assert_int_eq(arena_alloc(a, MiB, &b), 0);
    ck_assert_int_eq(arena_alloc(a, MiB, &c), 0);
    arena_free(&a);
}
END_TEST

/* A segment that passes to another owner comes renewed, whether or not its
 * fd was ever handed out (issue 21: a user who read with plain READs left
 * its bytes in freed blocks, and the next owner was handed the segment as
 * it was).  The new owner's block reads zeros; the same owner reuses its
 * segment without renewal; quarantine is an owner like the others. */
START_TEST(test_owner_change_renews)
{
    arena *a = mk(2 * MiB, MiB);
    arena_block b;
    arena_stats st;
    uint32_t gen;

    ck_assert_int_eq(arena_alloc_for(a, 64 * 1024, 1001, &b), 0);
    memset(b.ptr, 0x5a, 64 * 1024);
    gen = arena_segment_gen(a, b.seg);
    arena_release(a, &b);
    /* Same owner again: same segment, not renewed, its old bytes (its own). */
    ck_assert_int_eq(arena_alloc_for(a, 64 * 1024, 1001, &b), 0);
    ck_assert_uint_eq(arena_segment_gen(a, b.seg), gen);
    arena_release(a, &b);
    /* Another owner: it takes the lowest wholly free segment, the one that
     * held 1001's bytes (its fd was never handed out): renewed, zeros. */
    ck_assert_int_eq(arena_alloc_for(a, 64 * 1024, 1002, &b), 0);
    ck_assert_uint_eq(b.seg, 0);
    ck_assert_uint_eq(arena_segment_owner(a, b.seg), 1002);
    ck_assert_uint_eq(arena_segment_gen(a, b.seg), gen + 1);
    for (int i = 0; i < 64 * 1024; i++)
        ck_assert_msg(b.ptr[i] == 0, "byte %d of the new owner's block is %02x", i, b.ptr[i]);
    arena_release(a, &b);
    arena_get_stats(a, &st);
    ck_assert_uint_eq(st.renewals, 1);
    /* Quarantine takes a segment over the same way. */
    ck_assert_int_eq(arena_alloc_for(a, 2 * MiB / 2, ARENA_QUARANTINE, &b), 0);
    ck_assert_int_eq(arena_segment_owner(a, b.seg), ARENA_QUARANTINE);
    arena_release(a, &b);
    arena_free(&a);
}
END_TEST

/* What a client sees of a segment: the memfd mapped read-only, the data
 * size the largest power of two below its size, the generation table
 * after it (PROTOCOL.md, "Kept leases"). */
static const uint32_t *client_table(int fd, uint64_t *data, uint64_t *len)
{
    struct stat st;
    uint64_t s = 1;
    void *p;

    ck_assert_int_eq(fstat(fd, &st), 0);
    while (s * 2 < (uint64_t)st.st_size)
        s *= 2;
    ck_assert_uint_ge((uint64_t)st.st_size - s, s / 1024);
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert(p != MAP_FAILED);
    *data = s;
    *len = (uint64_t)st.st_size;
    return (const uint32_t *)((const uint8_t *)p + s);
}

START_TEST(test_generations)
{
    arena *a = mk(2 * MiB, MiB);
    arena_block b, c, d;
    uint64_t data, len, data2, len2;
    const uint32_t *t, *t2;
    uint32_t g;
    int fd, fd2;

    ck_assert_int_eq(arena_alloc_for(a, 64 * 1024, 1001, &b), 0);
    fd = pass_fd(arena_segment_fd(a, b.seg));
    t = client_table(fd, &data, &len);
    ck_assert_uint_eq(data, MiB);
    ck_assert_uint_eq(len, MiB + 4096);     /* 256 entries: one page */
    g = t[b.off / 4096];
    /* Allocating changes nothing, releasing bumps every page of the block
     * (an extent may start inside it) before anyone can have it again,
     * and no page outside it. */
    ck_assert_int_eq(arena_alloc_for(a, 4096, 1001, &c), 0);
    ck_assert_uint_eq(t[b.off / 4096], g);
    arena_release(a, &b);
    for (uint64_t pg = b.off / 4096; pg < (b.off + b.size) / 4096; pg++)
        ck_assert_uint_eq(t[pg], g + 1);
    ck_assert_uint_eq(t[c.off / 4096], 0);
    /* Reused by a block that starts elsewhere and covers it: the pages of
     * the old block go up again when the new one goes. */
    arena_release(a, &c);
    ck_assert_int_eq(arena_alloc_for(a, 512 * 1024, 1001, &d), 0);
    ck_assert_uint_le(d.off, b.off);
    ck_assert_uint_gt(d.off + d.size, b.off);
    ck_assert_uint_eq(t[b.off / 4096], g + 1);
    arena_release(a, &d);
    ck_assert_uint_eq(t[b.off / 4096], g + 2);
    ck_assert_uint_eq(t[(b.off + b.size) / 4096 - 1], g + 2);
    /* The table is sealed with the data: no writable mapping of it. */
    errno = 0;
    ck_assert(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)MiB) ==
              MAP_FAILED);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_eq(mprotect((void *)((uintptr_t)t & ~(uintptr_t)4095), 4096,
                              PROT_READ | PROT_WRITE), -1);
    /* A change of owner renews the memfd: the new table starts at zero,
     * the old one keeps the bumps its clients compare with. */
    g = t[0];
    ck_assert_int_eq(arena_alloc_for(a, 64 * 1024, 1002, &b), 0);
    ck_assert_uint_eq(b.seg, 0);
    fd2 = pass_fd(arena_segment_fd(a, 0));
    t2 = client_table(fd2, &data2, &len2);
    ck_assert_uint_eq(t2[0], 0);
    ck_assert_uint_eq(t[0], g);
    ck_assert_uint_ne(g, 0);
    arena_release(a, &b);
    ck_assert_uint_eq(t2[0], 1);
    ck_assert_uint_eq(t[0], g);
    munmap((void *)((const uint8_t *)t - data), len);
    munmap((void *)((const uint8_t *)t2 - data2), len2);
    close(fd);
    close(fd2);
    arena_free(&a);
}
END_TEST

START_TEST(test_free_null)
{
    arena *a = NULL;

    arena_free(NULL);
    arena_free(&a);
    ck_assert_ptr_null(a);
    a = mk(8 * MiB, 2 * MiB);
    arena_free(&a);
    ck_assert_ptr_null(a);
}
END_TEST

/* ---- huge pages ---- */

/* A small sysctl-like file: read its first number, write one. */
static long read_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;

    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static int write_str(const char *path, const char *v)
{
    FILE *f = fopen(path, "w");
    int ok;

    if (!f)
        return -1;
    ok = fputs(v, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The system settings the huge-page tests change, put back after each
 * test whatever its outcome (a fixture's teardown). */
static long saved_nr = -1;
static char saved_thp[32];

static void restore_pages(void)
{
    char v[32];

    if (saved_nr >= 0) {
        snprintf(v, sizeof(v), "%ld", saved_nr);
        write_str("/proc/sys/vm/nr_hugepages", v);
        saved_nr = -1;
    }
    if (saved_thp[0]) {
        write_str("/sys/kernel/mm/transparent_hugepage/shmem_enabled", saved_thp);
        saved_thp[0] = '\0';
    }
}

static long meminfo_hp(const char *name)
{
    char line[256];
    size_t n = strlen(name);
    long v = -1;
    FILE *f = fopen("/proc/meminfo", "r");

    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, name, n) && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

/* kB of field name in /proc/self/smaps for the mapping that starts at p. */
static long smaps_field(const void *p, const char *name)
{
    char line[256], start[32];
    size_t n = strlen(name), sl;
    long v = -1;
    int in = 0;
    FILE *f = fopen("/proc/self/smaps", "r");

    snprintf(start, sizeof(start), "%lx-", (unsigned long)(uintptr_t)p);
    sl = strlen(start);
    while (f && fgets(line, sizeof(line), f)) {
        if (strchr(line, '-') && strchr(line, '-') < strchr(line, ' ') && line[0] != ' ')
            in = !strncmp(line, start, sl);
        else if (in && !strncmp(line, name, n) && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    }
    if (f)
        fclose(f);
    return v;
}

/* With hugetlb pages in the pool, every segment gets them: the bytes are
 * right through a client's read-only mapping, the seals hold, a renewal
 * keeps hugetlb pages, and with the pool spent a new arena falls back to
 * 4 KiB pages (cleanly: same bytes, same seals).  Needs root (the pool is
 * set up here and given back). */
START_TEST(test_hugetlb_segments)
{
    const char *nr = "/proc/sys/vm/nr_hugepages";
    long before = read_long(nr), used_now;
    char v[32], err[256] = "";
    arena *a = NULL, *b = NULL;
    arena_block blk;
    arena_stats st;
    const uint8_t *map;

    if (before < 0 || geteuid() != 0) {
        fprintf(stderr, "SKIP test_hugetlb_segments: needs root and %s\n", nr);
        return;
    }
    /* Exactly 20 free pages: 8 segments of 2 MiB, each with a page of
     * generation table after it, and 4 for a renewal. */
    saved_nr = before;
    used_now = before - meminfo_hp("HugePages_Free");
    snprintf(v, sizeof(v), "%ld", used_now + 20);
    if (write_str(nr, v) < 0 || meminfo_hp("HugePages_Free") != 20) {
        fprintf(stderr, "SKIP test_hugetlb_segments: the kernel gave no hugetlb pages\n");
        return;
    }
    ck_assert_int_eq(arena_new_pages(16 * MiB, 2 * MiB, ARENA_PAGES_AUTO, &a, err, sizeof(err)), 0);
    arena_get_stats(a, &st);
    ck_assert_uint_eq(st.segments, 8);
    ck_assert_uint_eq(st.hugetlb_segments, 8);
    ck_assert_int_eq(arena_alloc_for(a, 1 * MiB, 1000, &blk), 0);
    memset(blk.ptr, 0x5a, 1 * MiB);
    map = mmap(NULL, 2 * MiB, PROT_READ, MAP_SHARED, arena_segment_fd(a, blk.seg), 0);
    ck_assert(map != MAP_FAILED);
    ck_assert_uint_eq(map[blk.off], 0x5a);
    ck_assert_uint_eq(map[blk.off + 1 * MiB - 1], 0x5a);
    ck_assert(mmap(NULL, 2 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, arena_segment_fd(a, blk.seg),
                   0) == MAP_FAILED);
    munmap((void *)map, 2 * MiB);
    /* Another owner: a renewal, still on hugetlb pages (the spare ones). */
    arena_release(a, &blk);
    ck_assert_int_eq(arena_alloc_for(a, 2 * MiB, 1001, &blk), 0);
    arena_get_stats(a, &st);
    ck_assert_uint_eq(st.renewals, 1);
    ck_assert_uint_eq(st.hugetlb_segments, 8);
    memset(blk.ptr, 0x33, 2 * MiB);
    arena_release(a, &blk);
    /* The pool spent: 4 KiB pages, and they work the same. */
    ck_assert_int_eq(arena_new_pages(16 * MiB, 2 * MiB, ARENA_PAGES_AUTO, &b, err, sizeof(err)), 0);
    arena_get_stats(b, &st);
    ck_assert_uint_lt(st.hugetlb_segments, 8);
    ck_assert_int_eq(arena_alloc_for(b, 64 * 1024, 1000, &blk), 0);
    memset(blk.ptr, 0x11, 64 * 1024);
    ck_assert(mmap(NULL, 2 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, arena_segment_fd(b, blk.seg),
                   0) == MAP_FAILED);
    arena_release(b, &blk);
    arena_free(&b);
    arena_free(&a);
}
END_TEST

/* With shmem transparent huge pages allowed for advised mappings, the
 * segments are advised and a client that advises its mapping too gets the
 * bytes through 2 MiB entries (ShmemPmdMapped grows). */
START_TEST(test_thp_segments)
{
    const char *knob = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
    char old[128] = "", *l, *r, err[256] = "";
    FILE *f = fopen(knob, "r");
    arena *a = NULL;
    arena_block blk;
    arena_stats st;
    long pmd;
    uint8_t *map;
    volatile uint8_t sum = 0;

    if (!f || !fgets(old, sizeof(old), f) || geteuid() != 0) {
        if (f)
            fclose(f);
        fprintf(stderr, "SKIP test_thp_segments: needs root and %s\n", knob);
        return;
    }
    fclose(f);
    l = strchr(old, '[');
    r = l ? strchr(l, ']') : NULL;
    ck_assert_ptr_nonnull(r);
    *r = '\0';
    snprintf(saved_thp, sizeof(saved_thp), "%s", l + 1);
    if (write_str(knob, "advise") < 0) {
        fprintf(stderr, "SKIP test_thp_segments: cannot set %s\n", knob);
        return;
    }
    ck_assert_int_eq(arena_new_pages(8 * MiB, 4 * MiB, ARENA_PAGES_THP, &a, err, sizeof(err)), 0);
    arena_get_stats(a, &st);
    ck_assert_uint_eq(st.thp_segments, 2);
    ck_assert_uint_eq(st.hugetlb_segments, 0);
    ck_assert_int_eq(arena_alloc_for(a, 4 * MiB, 1000, &blk), 0);
    memset(blk.ptr, 0x7e, 4 * MiB);
    map = mmap(NULL, 4 * MiB, PROT_READ, MAP_SHARED, arena_segment_fd(a, blk.seg), 0);
    ck_assert(map != MAP_FAILED);
    ck_assert_int_eq(madvise(map, 4 * MiB, MADV_HUGEPAGE), 0);
    for (size_t i = 0; i < 4 * MiB; i += 4096)
        sum = (uint8_t)(sum + map[i]);
    pmd = smaps_field(map, "ShmemPmdMapped");
    ck_assert_uint_eq(map[4 * MiB - 1], 0x7e);
    munmap(map, 4 * MiB);
    arena_release(a, &blk);
    arena_free(&a);
    ck_assert_msg(pmd == 4096, "the client's mapping: ShmemPmdMapped %ld kB", pmd);
}
END_TEST

static Suite *arena_suite(void)
{
    Suite *s = suite_create("arena");
    TCase *tc = tcase_create("arena");

    tcase_set_timeout(tc, 60);          /* valgrind */
    tcase_add_test(tc, test_new_args);
    tcase_add_test(tc, test_many_segments);
    tcase_add_test(tc, test_sizes_and_visibility);
    tcase_add_test(tc, test_merge);
    tcase_add_test(tc, test_stress);
    tcase_add_test(tc, test_sealing);
    tcase_add_test(tc, test_bad_release);
    tcase_add_test(tc, test_owner_change_renews);
    tcase_add_test(tc, test_generations);
    tcase_add_test(tc, test_free_null);
    suite_add_tcase(s, tc);
    tc = tcase_create("huge pages");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, NULL, restore_pages);
    tcase_add_test(tc, test_hugetlb_segments);
    tcase_add_test(tc, test_thp_segments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(arena_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
