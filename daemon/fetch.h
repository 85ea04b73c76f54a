/*
 * fetch.h - the tiering engine: finds a chunk in DRAM, else NVMe, else the
 * source, and keeps the tiers filled.
 *
 * A lookup that misses DRAM starts one fetch per chunk; later lookups of the
 * same chunk join it (one source read however many clients ask).  The fetch
 * runs on an I/O thread: NVMe first, then the source.  Its result goes into
 * DRAM and, when it came from the source, is written to NVMe behind the
 * reader on a background job, never in its way.  A full write-behind queue
 * skips the NVMe copy (counted) rather than grow memory without bound.
 *
 * Threads: the loop thread only; the blocking parts run as worker jobs.
 */
#ifndef GR_FETCH_H
#define GR_FETCH_H

#include <stdio.h>

#include "cache.h"
#include "source.h"
#include "stats.h"
#include "store.h"
#include "workers.h"

typedef struct fetcher fetcher;

/*
 * Result of a lookup.  c is borrowed for the duration of the call (take a
 * reference to keep it) and NULL when err < 0; then errmsg says why in one
 * line.
 */
typedef void (*fetch_cb)(void *arg, chunk *c, int err, const char *errmsg);

/* The engine over its tiers; it borrows all of them (nvme may be NULL:
 * no NVMe tier) and updates *stats.  0 or -ENOMEM. */
int fetcher_new(dram *d, store *nvme, source *src, workers *w, gr_stats *stats,
                uint64_t writeback_max_bytes, fetcher **out);

/* Free; no fetch may be in flight (stop the workers first).  NULL-safe. */
void fetcher_free(fetcher **fx);

/*
 * Look up chunk idx of f.  cb runs exactly once: at once (before this
 * returns) on a DRAM hit, later otherwise.  f gets a reference for as long
 * as the fetch needs it.
 */
void fetcher_get(fetcher *fx, srcfile *f, uint64_t idx, fetch_cb cb, void *arg);

/* Record every lookup from now on as a "KEY SIZE" line on trace (borrowed,
 * NULL to stop): KEY is 16 hex digits of the chunk key's hash, SIZE the
 * chunk's length.  The simulator in bench/ replays such files. */
void fetcher_set_trace(fetcher *fx, FILE *trace);

/* Fetches in flight, and bytes queued for write-behind. */
unsigned fetcher_inflight(const fetcher *fx);
uint64_t fetcher_writeback_bytes(const fetcher *fx);

#endif
