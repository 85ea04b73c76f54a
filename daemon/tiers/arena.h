/*
 * arena.h - the DRAM tier's shared memory: sealed memfd segments that
 * clients map read-only, carved into blocks by a buddy allocator.
 *
 * The arena is `capacity` bytes in segments of `segment_size` (a power of
 * two, at least the largest block ever asked for).  Each segment is a memfd
 * the daemon maps read-write once, then seals with F_SEAL_SHRINK |
 * F_SEAL_GROW | F_SEAL_FUTURE_WRITE: after that no one (a client given the
 * fd included) can write it, resize it, or map it writable, while the
 * daemon's own mapping keeps working.  A plain O_RDONLY reopen is not
 * enough (facts.md): a client could reopen it O_RDWR through /proc.
 *
 * Blocks are powers of two from ARENA_MIN_BLOCK to segment_size, aligned to
 * their size (so O_DIRECT reads can land in them).  Pages are committed by
 * the kernel on first write and are never returned (a sealed memfd cannot be
 * hole-punched), so the arena's resident size only grows, up to capacity:
 * that is the DRAM tier's hard limit.  Metadata costs 9 bytes per 4 KiB.
 *
 * Generations: after its segment_size bytes of blocks each memfd holds a
 * table of one uint32_t per 4 KiB page (4 bytes per 4 KiB, in whole pages:
 * 2 MiB where hugetlb segments are possible, committed only as entries
 * change).  arena_release adds one to the entry of every page of the block
 * before the block can be handed out again, so a client that keeps a
 * mapping of a block it no longer holds a lease on can tell whether the
 * bytes it sees are still those it was leased: it reads the entry before
 * and after copying and compares both with the value it read while it
 * held the lease (PROTOCOL.md, "Kept leases").  The table is sealed with
 * the rest: only the daemon writes it.  A renewed segment's table starts
 * at zero in the new memfd, while the old one's stays as it was, every
 * block of it released (and bumped) before the renewal.
 *
 * Tenancy: on a node shared by several users, a client must never map bytes
 * of a file it may not read, so segments have owners (uids, or
 * ARENA_QUARANTINE).  arena_alloc_for takes blocks only from the owner's
 * segments, or takes over a wholly free segment.  A segment that changes
 * owner always gets a fresh memfd first, mapped at the same address,
 * whether or not its fd was ever handed out: its freed blocks still hold
 * the previous owner's bytes, and the new owner's clients will map it.  The
 * old owner's clients keep their old mapping, which shows only what it held
 * while theirs, and never the new owner's bytes.  Each renewal bumps the
 * segment's generation, so the server knows to send the new fd.  (The old
 * memfd's pages live on while a client still maps them: at most one segment
 * per renewal per client, until that client disconnects.)
 *
 * Threads: the loop thread only (the daemon's I/O threads write into blocks
 * they were handed, never call these functions).
 */
#ifndef GR_ARENA_H
#define GR_ARENA_H

#include <stddef.h>
#include <stdint.h>

#define ARENA_MIN_BLOCK 4096
#define ARENA_NO_OWNER (-1)
/* The owner of chunks fetched for a client that has not yet shown it may
 * read them (a job's hints before its OPEN): no client is ever handed such
 * a segment, and a proven reader gets the chunk copied into its own. */
#define ARENA_QUARANTINE (-2)

typedef struct arena arena;

typedef struct arena_block {
    uint32_t seg;               /* segment index */
    uint64_t off;               /* byte offset in the segment, aligned to size */
    uint64_t size;              /* block size: a power of two >= the request */
    uint8_t *ptr;               /* the daemon's writable address of the block */
} arena_block;

typedef struct arena_stats {
    uint64_t capacity_bytes;    /* segments x segment_size */
    uint64_t used_bytes;        /* bytes in allocated blocks */
    uint64_t segments;
    uint64_t alloc_failures;    /* arena_alloc calls that found no block */
    uint64_t renewals;          /* segments given a fresh memfd on a change of owner */
    uint64_t hugetlb_segments;  /* segments backed by hugetlb pages now */
    uint64_t thp_segments;      /* segments advised for transparent huge pages */
} arena_stats;

/*
 * Create the arena: capacity rounded up to whole segments, segment_size a
 * power of two >= ARENA_MIN_BLOCK.  All segments are created, mapped and
 * sealed now (memory is committed only as blocks are written).  0 or
 * -errno; on failure err says why.  4 KiB pages.
 */
int arena_new(uint64_t capacity, uint64_t segment_size, arena **out, char *err, size_t errlen);

/*
 * The same with the pages to use: the first touch of a mapped page costs a
 * page-table entry in every process that maps it (1.5-2 us per 4 KiB page
 * on the VMs we measured, facts.md), so huge pages make a fresh client's
 * first pass over cached data as fast as its later ones.  ARENA_PAGES_AUTO:
 * hugetlb pages where the pool has them (vm.nr_hugepages; segments of a
 * multiple of 2 MiB), else shmem transparent huge pages where
 * shmem_enabled allows madvised mappings, else 4 KiB pages, per segment (a
 * renewal tries again).  _HUGETLB: the same (the daemon warns when it falls
 * back); _THP: no hugetlb; _SMALL: 4 KiB pages only.
 */
enum arena_pages { ARENA_PAGES_SMALL, ARENA_PAGES_THP, ARENA_PAGES_HUGETLB, ARENA_PAGES_AUTO };
int arena_new_pages(uint64_t capacity, uint64_t segment_size, int pages, arena **out, char *err,
                    size_t errlen);

/* Unmap and close every segment (clients' mappings stay valid: the kernel
 * keeps the memory until their last mapping goes).  NULL-safe. */
void arena_free(arena **a);

/* A block of at least size bytes (1..segment_size).  0, or -ENOMEM when no
 * segment has a free block that large, -EINVAL for a bad size. */
int arena_alloc(arena *a, uint64_t size, arena_block *out);

/* A block for owner (a uid, or ARENA_QUARANTINE): from a segment owner
 * holds, else from a wholly free segment that owner takes over (renewed if
 * it had another owner).  0, -ENOMEM, -EINVAL, or the error of a failed
 * renewal. */
int arena_alloc_for(arena *a, uint64_t size, int64_t owner, arena_block *out);

/* Segment seg's owner, ARENA_NO_OWNER if none. */
int64_t arena_segment_owner(const arena *a, uint32_t seg);

/* Segment seg's generation: 1 at creation, +1 per renewal. */
uint32_t arena_segment_gen(const arena *a, uint32_t seg);

/* Return a block from arena_alloc.  Buddies merge; the generation of each
 * of the block's pages goes up by one. */
void arena_release(arena *a, const arena_block *b);

/* The fd of segment seg (owned by the arena: dup it to keep it), or -1. */
int arena_segment_fd(const arena *a, uint32_t seg);

uint32_t arena_segments(const arena *a);
uint64_t arena_segment_size(const arena *a);
void arena_get_stats(const arena *a, arena_stats *out);

#endif
