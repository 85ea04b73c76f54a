/*
 * arena.c - the DRAM tier's shared memory (see arena.h): sealed memfd
 * segments carved into power-of-two blocks by one buddy allocator per
 * segment.
 *
 * Metadata lives outside the segments: block memory is never written by
 * the allocator, so a page is committed only when its block's owner first
 * writes it.  Per 4 KiB page of a segment there is
 *   state[p]  0 for a page inside a block; at a block's first page
 *             ST_FREE or ST_USED, or'ed with the block's order;
 *   next[p], prev[p]
 *             the free list links of a free block's first page (page
 *             indexes in the segment, -1 ends a list).  Free lists are
 *             doubly linked so a buddy leaves its list in O(1) when it
 *             merges.
 * A block of order k is 2^k pages, starts at a page index that is a
 * multiple of 2^k, and its buddy starts at p ^ 2^k.
 *
 * The metadata arrays come from calloc and only the entries of block heads
 * are ever non-zero, so they too are committed as the arena fragments, not
 * up front.
 *
 * Finding a block: nfree[k] counts free blocks of order k in the whole
 * arena, so a full arena answers -ENOMEM after at most one look per order;
 * avail[k] is a bitmap of the segments whose order-k list is non-empty, so
 * finding one costs nsegs / 64 word tests.  The lowest such segment wins,
 * which packs live blocks into the first segments.
 *
 * Invariants (checked by arena_sane(), which tests can reach by building
 * with -DARENA_SANE):
 *   - every page belongs to exactly one block, free or used;
 *   - a free block's buddy of the same order is never also free (they
 *     would have merged);
 *   - bit s of avail[k] is set iff segment s's order-k list is non-empty,
 *     and nfree[k] is the sum of the lengths of those lists;
 *   - used_bytes is the sum of the sizes of the used blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arena.h"
#include "log.h"

#define ARENA_PAGE_SHIFT 12
#define ARENA_MAX_ORDER 30          /* 2^30 pages = 4 TiB: page indexes fit int32_t */
#define ARENA_ORDERS (ARENA_MAX_ORDER + 1)

#define ST_FREE 0x80
#define ST_USED 0x40
#define ST_ORDER 0x3f

#define ARENA_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)

typedef struct arena_seg {
    int fd;                     /* the sealed memfd, -1 before creation */
    uint8_t *base;              /* the daemon's read-write mapping, or NULL */
    uint8_t *state;             /* per page: 0, or ST_FREE/ST_USED | order at a block head */
    int32_t *next;              /* per page: free list links, valid at free heads */
    int32_t *prev;
    int32_t head[ARENA_ORDERS]; /* first free block of each order, -1 if none */
    int64_t owner;              /* uid whose blocks it holds, ARENA_NO_OWNER */
    uint32_t gen;               /* +1 per renewal */
    int kind;                   /* ARENA_PAGES_HUGETLB, _THP or _SMALL: what its memfd got */
} arena_seg;

struct arena {
    uint64_t seg_size;          /* bytes per segment, a power of two */
    uint64_t map_size;          /* seg_size and the generation table after it */
    uint32_t nsegs;
    uint32_t max_order;         /* log2(seg_size / ARENA_MIN_BLOCK) */
    uint32_t words;             /* uint64_t words in one avail bitmap */
    arena_seg *segs;
    uint64_t *avail;            /* ARENA_ORDERS bitmaps of `words` words each */
    uint64_t nfree[ARENA_ORDERS];
    uint64_t used_bytes;
    uint64_t alloc_failures;
    uint64_t renewals;
    int pages;                  /* arena_pages: what to try */
    uint32_t nkind[ARENA_PAGES_AUTO];   /* segments of each kind now */
    int thp_ok;                 /* shmem THP is enabled for madvised mappings */
};


static uint64_t *avail_map(arena *a, uint32_t order)
{
    return a->avail + (size_t)order * a->words;
}

/* Put the free block at page p of segment si on the order-k list. */
static void list_push(arena *a, uint32_t si, int32_t p, uint32_t k)
{
    arena_seg *s = &a->segs[si];
    int32_t h = s->head[k];

    s->state[p] = (uint8_t)(ST_FREE | k);
    s->next[p] = h;
    s->prev[p] = -1;
    if (h >= 0)
        s->prev[h] = p;
    else
        avail_map(a, k)[si / 64] |= 1ull << (si % 64);
    s->head[k] = p;
    a->nfree[k]++;
}

/* Take the free block at page p of segment si off the order-k list; its
 * state is the caller's to set. */
static void list_remove(arena *a, uint32_t si, int32_t p, uint32_t k)
{
    arena_seg *s = &a->segs[si];
    int32_t n = s->next[p], pr = s->prev[p];

    if (pr >= 0)
        s->next[pr] = n;
    else
        s->head[k] = n;
    if (n >= 0)
        s->prev[n] = pr;
    if (s->head[k] < 0)
        avail_map(a, k)[si / 64] &= ~(1ull << (si % 64));
    s->state[p] = 0;
    s->next[p] = s->prev[p] = 0;
    a->nfree[k]--;
}

/* The lowest segment with a free block of order k; nfree[k] > 0. */
static uint32_t seg_with(arena *a, uint32_t k)
{
    const uint64_t *m = avail_map(a, k);

    for (uint32_t w = 0; w < a->words; w++)
        if (m[w])
            return w * 64 + (uint32_t)__builtin_ctzll(m[w]);
    abort();                    /* nfree[k] and avail[k] disagree */
}

/* The order of the smallest block holding size bytes (1..seg_size). */
static uint32_t order_for(uint64_t size)
{
    uint64_t pages = (size + ARENA_MIN_BLOCK - 1) >> ARENA_PAGE_SHIFT;

    return pages <= 1 ? 0 : 64 - (uint32_t)__builtin_clzll(pages - 1);
}

#ifdef ARENA_SANE
/* Walk all metadata and check the invariants in the header comment.
 * O(pages): for tests only. */
int arena_sane(const arena *a);

int arena_sane(const arena *a)
{
    uint64_t pages = a->seg_size >> ARENA_PAGE_SHIFT, used = 0;
    uint64_t nfree[ARENA_ORDERS] = {0};

    for (uint32_t si = 0; si < a->nsegs; si++) {
        const arena_seg *s = &a->segs[si];

        for (uint64_t p = 0; p < pages;) {
            uint8_t st = s->state[p];
            uint32_t k = st & ST_ORDER;

            if (!(st & (ST_FREE | ST_USED)) || k > a->max_order || (p & ((1ull << k) - 1)))
                return 0;
            for (uint64_t q = p + 1; q < p + (1ull << k); q++)
                if (s->state[q])
                    return 0;
            if (st & ST_USED)
                used += (uint64_t)ARENA_MIN_BLOCK << k;
            else if (k < a->max_order && s->state[p ^ (1ull << k)] == (ST_FREE | k))
                return 0;
            p += 1ull << k;
        }
        for (uint32_t k = 0; k <= a->max_order; k++) {
            int set = !!(a->avail[(size_t)k * a->words + si / 64] & (1ull << (si % 64)));
            int32_t prev = -1;

            if (set != (s->head[k] >= 0))
                return 0;
            for (int32_t p = s->head[k]; p >= 0; prev = p, p = s->next[p]) {
                if (s->state[p] != (ST_FREE | k) || s->prev[p] != prev)
                    return 0;
                nfree[k]++;
            }
        }
    }
    for (uint32_t k = 0; k < ARENA_ORDERS; k++)
        if (nfree[k] != a->nfree[k])
            return 0;
    return used == a->used_bytes;
}
#endif

#define HUGE_2M (2u << 20)

/* The generation table's bytes after a segment of seg_size (arena.h): one
 * uint32_t per 4 KiB page, in whole pages of any kind the arena may back
 * a segment with (2 MiB where hugetlb segments are possible: a renewal may
 * change a segment's kind, and the daemon's mapping keeps its size).  At
 * most seg_size, so a client finds the data size as the largest power of
 * two below the memfd's size. */
static uint64_t gen_table_size(uint64_t seg_size, int pages)
{
    uint64_t t = seg_size / ARENA_MIN_BLOCK * sizeof(uint32_t), unit = ARENA_MIN_BLOCK;

    if ((pages == ARENA_PAGES_AUTO || pages == ARENA_PAGES_HUGETLB) && seg_size % HUGE_2M == 0)
        unit = HUGE_2M;
    return (t + unit - 1) / unit * unit;
}

/* An unsealed memfd of seg_size bytes mapped read-write at *base (anywhere,
 * 2 MiB aligned, when *base is NULL; else replacing the mapping there):
 * backed by hugetlb pages (flag MFD_HUGETLB) or by shmem.  The fd, or
 * -errno with err set; *base is untouched on failure. */
static int seg_map(const arena *a, unsigned flags, uint8_t **base, char *err, size_t errlen)
{
    int fd = memfd_create("granary-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags), rc;
    void *p;

    if (fd < 0) {
        rc = -errno;
        err_set(err, errlen, "memfd_create: %s", strerror(errno));
        return rc;
    }
    if (ftruncate(fd, (off_t)a->map_size) < 0) {
        rc = -errno;
        err_set(err, errlen, "ftruncate memfd to %" PRIu64 " bytes: %s", a->map_size,
               strerror(errno));
        close(fd);
        return rc;
    }
    /* Mapped away from *base first: a hugetlb mapping reserves its pages
     * here, and one that cannot must not have unmapped the old segment.
     * Then moved into place in one step (mremap replaces what is there). */
    p = mmap(NULL, a->map_size + (*base || (flags & MFD_HUGETLB) ? 0 : HUGE_2M),
             PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = -errno;
        err_set(err, errlen, "mmap %" PRIu64 " bytes: %s", a->map_size, strerror(errno));
        close(fd);
        return rc;
    }
    if (*base) {
        void *q = mremap(p, a->map_size, a->map_size, MREMAP_MAYMOVE | MREMAP_FIXED, *base);
        if (q == MAP_FAILED) {
            rc = -errno;
            err_set(err, errlen, "mremap a new segment into place: %s", strerror(errno));
            munmap(p, a->map_size);
            close(fd);
            return rc;
        }
    } else if (!(flags & MFD_HUGETLB)) {
        /* 2 MiB alignment, so that huge pages can back it later (THP now,
         * a hugetlb memfd at a renewal): map again at the aligned address
         * inside the first mapping, and drop the first. */
        uintptr_t al = ((uintptr_t)p + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1);
        void *q = mmap((void *)al, a->map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                       fd, 0);
        if (q == MAP_FAILED) {
            rc = -errno;
            err_set(err, errlen, "mmap %" PRIu64 " bytes: %s", a->map_size, strerror(errno));
            munmap(p, a->map_size + HUGE_2M);
            close(fd);
            return rc;
        }
        if (al > (uintptr_t)p)
            munmap(p, al - (uintptr_t)p);
        if ((uintptr_t)p + a->map_size + HUGE_2M > al + a->map_size)
            munmap((void *)(al + a->map_size),
                   (uintptr_t)p + a->map_size + HUGE_2M - (al + a->map_size));
        p = q;
    }
    /* (A hugetlb mapping is aligned to its pages already.) */
    if (!*base)
        *base = p;
    return fd;
}

/* A sealed memfd of seg_size bytes mapped read-write at *base (see
 * seg_map), with the best pages the arena may use: hugetlb (2 MiB pages:
 * one page-table entry per 2 MiB in every client that maps it), else shmem
 * advised for transparent huge pages, else 4 KiB pages.  *kind says which.
 * The fd, or -errno with err set. */
static int seg_memfd(const arena *a, uint8_t **base, int *kind, char *err, size_t errlen)
{
    int fd = -1, rc;

    if ((a->pages == ARENA_PAGES_AUTO || a->pages == ARENA_PAGES_HUGETLB) &&
        a->seg_size % HUGE_2M == 0) {
        char herr[160];
        fd = seg_map(a, MFD_HUGETLB, base, herr, sizeof(herr));
        if (fd >= 0)
            *kind = ARENA_PAGES_HUGETLB;
    }
    if (fd < 0) {
        fd = seg_map(a, 0, base, err, errlen);
        if (fd < 0)
            return fd;
        *kind = ARENA_PAGES_SMALL;
        if (a->thp_ok && a->pages != ARENA_PAGES_SMALL &&
            madvise(*base, a->seg_size, MADV_HUGEPAGE) == 0)
            *kind = ARENA_PAGES_THP;
    }
    /* Fail closed: a kernel without F_SEAL_FUTURE_WRITE (before 5.1) says
     * EINVAL, and handing out an unsealed segment is not an option. */
    if (fcntl(fd, F_ADD_SEALS, ARENA_SEALS) < 0) {
        rc = -errno;
        err_set(err, errlen, "fcntl F_ADD_SEALS: %s", strerror(errno));
        close(fd);
        return rc;
    }
    return fd;
}

/* Create, size, map and seal segment si. */
static int seg_setup(arena *a, uint32_t si, char *err, size_t errlen)
{
    arena_seg *s = &a->segs[si];

    s->fd = seg_memfd(a, &s->base, &s->kind, err, errlen);
    if (s->fd < 0)
        return s->fd;
    a->nkind[s->kind]++;
    s->owner = ARENA_NO_OWNER;
    s->gen = 1;
    s->state = calloc(a->seg_size >> ARENA_PAGE_SHIFT, 1);
    s->next = calloc(a->seg_size >> ARENA_PAGE_SHIFT, sizeof(int32_t));
    s->prev = calloc(a->seg_size >> ARENA_PAGE_SHIFT, sizeof(int32_t));
    if (!s->state || !s->next || !s->prev) {
        err_set(err, errlen, "out of memory for the arena's metadata");
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < ARENA_ORDERS; k++)
        s->head[k] = -1;
    list_push(a, si, 0, a->max_order);
    return 0;
}

int arena_new(uint64_t capacity, uint64_t segment_size, arena **out, char *err, size_t errlen)
{
    return arena_new_pages(capacity, segment_size, ARENA_PAGES_SMALL, out, err, errlen);
}

/* Whether shmem transparent huge pages serve a mapping advised with
 * MADV_HUGEPAGE: /sys/kernel/mm/transparent_hugepage/shmem_enabled is
 * "always", "within_size" or "advise" (the bracketed word). */
static int shmem_thp_enabled(void)
{
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
    char *l, *r;

    if (!f)
        return 0;
    if (!fgets(buf, sizeof(buf), f))
        buf[0] = '\0';
    fclose(f);
    l = strchr(buf, '[');
    r = l ? strchr(l, ']') : NULL;
    if (!r)
        return 0;
    *r = '\0';
    return !strcmp(l + 1, "always") || !strcmp(l + 1, "within_size") || !strcmp(l + 1, "advise");
}

int arena_new_pages(uint64_t capacity, uint64_t segment_size, int pages, arena **out, char *err,
                    size_t errlen)
{
    arena *a = NULL;
    uint64_t nsegs;
    int rc;

    *out = NULL;
    if (segment_size < ARENA_MIN_BLOCK || (segment_size & (segment_size - 1)) ||
        segment_size > ((uint64_t)ARENA_MIN_BLOCK << ARENA_MAX_ORDER)) {
        err_set(err, errlen, "segment size %" PRIu64 " is not a power of two between %d and "
               "%" PRIu64, segment_size, ARENA_MIN_BLOCK,
               (uint64_t)ARENA_MIN_BLOCK << ARENA_MAX_ORDER);
        return -EINVAL;
    }
    nsegs = capacity / segment_size + (capacity % segment_size != 0);
    if (nsegs == 0)
        nsegs = 1;
    if (nsegs > UINT32_MAX - 63) {
        err_set(err, errlen, "capacity %" PRIu64 " needs too many segments of %" PRIu64 " bytes",
               capacity, segment_size);
        return -EINVAL;
    }
    a = calloc(1, sizeof(*a));
    if (!a) {
        err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    a->seg_size = segment_size;
    a->map_size = segment_size + gen_table_size(segment_size, pages);
    a->pages = pages;
    a->thp_ok = pages != ARENA_PAGES_SMALL && shmem_thp_enabled();
    a->nsegs = (uint32_t)nsegs;
    a->max_order = order_for(segment_size);
    a->words = (a->nsegs + 63) / 64;
    a->segs = calloc(a->nsegs, sizeof(*a->segs));
    a->avail = calloc((size_t)ARENA_ORDERS * a->words, sizeof(uint64_t));
    if (!a->segs || !a->avail) {
        err_set(err, errlen, "out of memory");
        rc = -ENOMEM;
        goto fail;
    }
    for (uint32_t si = 0; si < a->nsegs; si++)
        a->segs[si].fd = -1;
    for (uint32_t si = 0; si < a->nsegs; si++) {
        rc = seg_setup(a, si, err, errlen);
        if (rc < 0)
            goto fail;
    }
    *out = a;
    return 0;

fail:
    arena_free(&a);
    return rc;
}

void arena_free(arena **ap)
{
    arena *a = ap ? *ap : NULL;

    if (!a)
        return;
    for (uint32_t si = 0; a->segs && si < a->nsegs; si++) {
        arena_seg *s = &a->segs[si];

        if (s->base && munmap(s->base, a->map_size) < 0)
            log_warn("arena: munmap segment %" PRIu32 ": %s", si, strerror(errno));
        if (s->fd >= 0)
            close(s->fd);
        free(s->state);
        free(s->next);
        free(s->prev);
    }
    free(a->segs);
    free(a->avail);
    free(a);
    *ap = NULL;
}

static void take(arena *a, uint32_t si, uint32_t k, uint32_t want, arena_block *out);

int arena_alloc(arena *a, uint64_t size, arena_block *out)
{
    uint32_t want, k, si;

    if (size == 0 || size > a->seg_size)
        return -EINVAL;
    want = order_for(size);
    for (k = want; k <= a->max_order && a->nfree[k] == 0; k++)
        ;
    if (k > a->max_order) {
        a->alloc_failures++;
        return -ENOMEM;
    }
    si = seg_with(a, k);
    take(a, si, k, want, out);
    return 0;
}

void arena_release(arena *a, const arena_block *b)
{
    uint32_t si = b->seg, k, *gens;
    arena_seg *s;
    int32_t p;

    /* A block that is not a live block of ours (a double release, a forged
     * or corrupted handle) would corrupt the free lists: refuse it. */
    if (si >= a->nsegs || b->size < ARENA_MIN_BLOCK || b->size > a->seg_size ||
        (b->size & (b->size - 1)) || b->off >= a->seg_size || (b->off & (b->size - 1))) {
        log_error("arena: release of a bad block (seg %" PRIu32 ", off %" PRIu64 ", size %"
                  PRIu64 ")", si, b->off, b->size);
        return;
    }
    s = &a->segs[si];
    k = order_for(b->size);
    p = (int32_t)(b->off >> ARENA_PAGE_SHIFT);
    if (s->state[p] != (ST_USED | k)) {
        log_error("arena: release of a block that is not allocated (seg %" PRIu32 ", off %"
                  PRIu64 ", size %" PRIu64 ")", si, b->off, b->size);
        return;
    }
    s->state[p] = 0;
    a->used_bytes -= b->size;
    /* A client that kept a mapping of the block without a lease sees the
     * change before any of its bytes can change: every page's entry goes
     * up (an extent may start inside the block), the block is written
     * again only after this returns (and, from an I/O thread, after the
     * hand-off's own barrier), and the fence orders it on weaker
     * machines. */
    gens = (uint32_t *)(s->base + a->seg_size) + p;
    for (uint64_t i = 0; i < b->size >> ARENA_PAGE_SHIFT; i++)
        __atomic_store_n(&gens[i], gens[i] + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (; k < a->max_order; k++) {
        int32_t buddy = p ^ (int32_t)(1u << k);

        if (s->state[buddy] != (ST_FREE | k))
            break;
        list_remove(a, si, buddy, k);
        if (buddy < p)
            p = buddy;
    }
    list_push(a, si, p, k);
}

/* Take block of order want out of the free order-k block at the head of
 * segment si's list. */
static void take(arena *a, uint32_t si, uint32_t k, uint32_t want, arena_block *out)
{
    int32_t p = a->segs[si].head[k];

    list_remove(a, si, p, k);
    while (k > want) {          /* split, keeping the lower half */
        k--;
        list_push(a, si, p + (int32_t)(1u << k), k);
    }
    a->segs[si].state[p] = (uint8_t)(ST_USED | want);
    a->used_bytes += (uint64_t)ARENA_MIN_BLOCK << want;
    out->seg = si;
    out->off = (uint64_t)p << ARENA_PAGE_SHIFT;
    out->size = (uint64_t)ARENA_MIN_BLOCK << want;
    out->ptr = a->segs[si].base + out->off;
}

/* Give the wholly free segment si to owner, renewing its memfd if it had
 * another owner: its free blocks hold that owner's bytes. */
static int seg_claim(arena *a, uint32_t si, int64_t owner)
{
    arena_seg *s = &a->segs[si];
    char err[128];
    int fd, kind;

    if (s->owner != owner && s->owner != ARENA_NO_OWNER) {
        fd = seg_memfd(a, &s->base, &kind, err, sizeof(err));
        if (fd < 0) {
            log_error("arena: renewing segment %" PRIu32 ": %s", si, err);
            return fd;
        }
        a->nkind[s->kind]--;
        a->nkind[kind]++;
        s->kind = kind;
        close(s->fd);
        s->fd = fd;
        s->gen++;
        a->renewals++;
    }
    s->owner = owner;
    return 0;
}

int arena_alloc_for(arena *a, uint64_t size, int64_t owner, arena_block *out)
{
    uint32_t want;

    if (size == 0 || size > a->seg_size)
        return -EINVAL;
    want = order_for(size);
    for (uint32_t k = want; k <= a->max_order; k++) {
        const uint64_t *m = avail_map(a, k);
        if (!a->nfree[k])
            continue;
        for (uint32_t w = 0; w < a->words; w++)
            for (uint64_t bits = m[w]; bits; bits &= bits - 1) {
                uint32_t si = w * 64 + (uint32_t)__builtin_ctzll(bits);
                if (a->segs[si].owner == owner) {
                    take(a, si, k, want, out);
                    return 0;
                }
            }
    }
    /* A free block of the top order is a whole free segment. */
    if (a->nfree[a->max_order]) {
        const uint64_t *m = avail_map(a, a->max_order);
        for (uint32_t w = 0; w < a->words; w++)
            for (uint64_t bits = m[w]; bits; bits &= bits - 1) {
                uint32_t si = w * 64 + (uint32_t)__builtin_ctzll(bits);
                if (seg_claim(a, si, owner) == 0) {
                    take(a, si, a->max_order, want, out);
                    return 0;
                }
            }
    }
    a->alloc_failures++;
    return -ENOMEM;
}

int64_t arena_segment_owner(const arena *a, uint32_t seg)
{
    return seg < a->nsegs ? a->segs[seg].owner : ARENA_NO_OWNER;
}

uint32_t arena_segment_gen(const arena *a, uint32_t seg)
{
    return seg < a->nsegs ? a->segs[seg].gen : 0;
}

int arena_segment_fd(const arena *a, uint32_t seg)
{
    return seg < a->nsegs ? a->segs[seg].fd : -1;
}

uint32_t arena_segments(const arena *a)
{
    return a->nsegs;
}

uint64_t arena_segment_size(const arena *a)
{
    return a->seg_size;
}

void arena_get_stats(const arena *a, arena_stats *out)
{
    out->capacity_bytes = (uint64_t)a->nsegs * a->seg_size;
    out->used_bytes = a->used_bytes;
    out->segments = a->nsegs;
    out->alloc_failures = a->alloc_failures;
    out->renewals = a->renewals;
    out->hugetlb_segments = a->nkind[ARENA_PAGES_HUGETLB];
    out->thp_segments = a->nkind[ARENA_PAGES_THP];
}
