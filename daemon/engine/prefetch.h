/*
 * prefetch.h - fetching before clients ask: read-ahead for sequential
 * readers, and job hint lists.
 *
 * Read-ahead: each open handle keeps a ra_state.  A read that starts where
 * the previous one ended (or at offset 0) is sequential: the window starts
 * at four times the read (at least two chunks), doubles with each further
 * sequential read, and chunks up to the window past the read are fetched
 * (class SCHED_READAHEAD).  The cap on the window adapts: halved while more
 * than a quarter of what was prefetched is evicted unused, doubled back (up
 * to [prefetch] readahead_max) while almost none is; and it never passes an
 * eighth of the DRAM tier.
 *
 * Hints: a hint_list per connection holds the chunks its job will read, in
 * order.  The list is fetched ahead of the job (class SCHED_HINT) until the
 * fetched-but-unread bytes reach the window (hint_window, and half of the
 * DRAM tier over all lists); each such chunk is held in DRAM (dram_hold)
 * until a demand lookup of it, from any connection, consumes it.  Entries
 * the job has clearly passed (more than half the started span, and at least
 * 64 entries, behind the one it just read) are dropped as skipped, so that
 * chunks the job never reads cannot stall the list.
 *
 * Threads: loop thread only; path resolution runs as worker jobs.
 */
#ifndef GR_PREFETCH_H
#define GR_PREFETCH_H

#include <stdint.h>
#include <sys/types.h>

#include "dram.h"
#include "fetch.h"
#include "proto.h"
#include "source.h"
#include "stats.h"
#include "workers.h"

typedef struct prefetcher prefetcher;

/* Over the engine and tiers (borrowed).  Installs itself as fx's consume
 * hook.  0 or -ENOMEM. */
int prefetcher_new(fetcher *fx, dram *d, source *src, workers *w, gr_stats *stats,
                   prefetcher **out);
/* Every hint list must be freed first.  NULL-safe. */
void prefetcher_free(prefetcher **p);

/* Limits ([prefetch] keys), at start and on reload. */
void prefetcher_configure(prefetcher *p, uint64_t readahead_max, uint64_t hint_window,
                          uint64_t hint_max_entries);

/* Gauges for a stats snapshot. */
void prefetcher_snapshot(const prefetcher *p, gr_stats *out);

/* ---- read-ahead ---- */

typedef struct ra_state {
    uint64_t next_off;          /* where a sequential read would start */
    uint64_t ra_end;            /* read ahead up to here already */
    uint64_t window;            /* current window, 0: not sequential */
} ra_state;

/* A client of uid owner read [off, off + len) of f through a handle with
 * state ra. */
void prefetch_readahead(prefetcher *p, ra_state *ra, srcfile *f, uint64_t off, uint64_t len,
                        int64_t owner);

/* ---- hints ---- */

typedef struct hint_list hint_list;

/* A list for a client with these credentials (ranges it may not read by the
 * file's mode bits are skipped).  NULL on out-of-memory. */
hint_list *hint_list_new(prefetcher *p, uid_t uid, gid_t gid);

/* Drop the list: holds released, fetches in flight forgotten.  NULL-safe. */
void hint_list_free(hint_list **l);

/*
 * Append the ranges of a decoded HINT request (m->u.hint; PROTO_HINT_CLEAR
 * clears first).  Paths are checked lexically now and resolved on an I/O
 * thread; batches are appended in the order they arrive.  0, or -E2BIG when
 * the list would exceed hint_max_entries, or -ENOMEM.
 */
int hint_list_append(hint_list *l, const proto_msg *m);

/* Entries not yet consumed or dropped. */
uint64_t hint_list_pending(const hint_list *l);

#endif
