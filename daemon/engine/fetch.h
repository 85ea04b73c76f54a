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
 * Source concurrency: at most max_inflight fetches (and warmup tasks) run
 * at once.  Demand misses take any free slot and are dispatched first;
 * prefetch classes (read-ahead, hints, warmup) share the slots left after
 * a quarter is kept for demand, in a weighted round robin (read-ahead 2,
 * hints 2, warmup 1) so that no class starves another.  A demand lookup
 * that joins a queued prefetch promotes it to the front.
 *
 * Prefetched chunks are marked until a demand lookup takes them (counted
 * as prefetch_used) or the tier evicts them (prefetch_wasted, counted by
 * the tier).
 *
 * Threads: the loop thread only; the blocking parts run as worker jobs.
 */
#ifndef GR_FETCH_H
#define GR_FETCH_H

#include <stdio.h>

#include "dram.h"
#include "source.h"
#include "stats.h"
#include "nvme.h"
#include "workers.h"

typedef struct fetcher fetcher;

/* Who asked for a fetch, in scheduling order. */
typedef enum fetch_class {
    FETCH_DEMAND,       /* a client waits */
    FETCH_READAHEAD,    /* a sequential reader's next chunks */
    FETCH_HINT,         /* a job's hint list */
    FETCH_WARMUP,       /* granaryctl warmup */
    FETCH_NCLASSES
} fetch_class;

/*
 * A unit of source work that takes one of the max_inflight slots: every
 * chunk fetch is one, and warmup embeds its own.  job.done must call
 * fetcher_task_finished(); job.cancelled is set (and run never called) when
 * the fetcher drained the task at shutdown.
 */
typedef struct fetch_task fetch_task;
struct fetch_task {
    wq_job job;                 /* first */
    fetch_class cls;
    int queued;                 /* waiting for a slot */
    fetch_task *qprev, *qnext;
};

/*
 * Result of a lookup.  c is borrowed for the duration of the call (take a
 * reference to keep it) and NULL when err < 0; then errmsg says why in one
 * line.
 */
typedef void (*fetch_cb)(void *arg, chunk *c, int err, const char *errmsg);

/* The engine over its tiers; it borrows all of them (nvme may be NULL:
 * no NVMe tier) and updates *stats.  max_inflight >= 1 bounds the source
 * work running at once.  0 or -ENOMEM. */
int fetcher_new(dram *d, nvme_tier *nvme, source *src, workers *w, gr_stats *stats,
                uint64_t writeback_max_bytes, unsigned max_inflight, fetcher **out);

/* Shutdown, before workers_stop: every task still waiting for a slot is
 * cancelled (its done() runs with job.cancelled set; a fetch's waiters get
 * -ECANCELED). */
void fetcher_drain(fetcher *fx);

/* Free; no fetch may be in flight (drain, then stop the workers).  NULL-safe. */
void fetcher_free(fetcher **fx);

/*
 * Look up chunk idx of f for a client of uid owner (a miss's DRAM block
 * comes from owner's arena segments).  cb runs exactly once: at once
 * (before this returns) on a DRAM hit, later otherwise.  f gets a reference
 * for as long as the fetch needs it.
 */
void fetcher_get(fetcher *fx, srcfile *f, uint64_t idx, int64_t owner, fetch_cb cb, void *arg);

/*
 * Prefetch chunk idx of f for class cls (not FETCH_DEMAND): into DRAM,
 * unless it is there already.  cb (may be NULL) runs once like a lookup's:
 * at once if the chunk is in DRAM, else when the fetch ends.  Lookup stats
 * (hits, misses) are not counted for it.
 */
void fetcher_prefetch(fetcher *fx, srcfile *f, uint64_t idx, fetch_class cls, int64_t owner,
                      fetch_cb cb, void *arg);

/* Queue a task of class cls for a slot; its job runs on an I/O thread when
 * one is free. */
void fetcher_task_submit(fetcher *fx, fetch_task *t, fetch_class cls);

/* A task's done() calls this first: frees its slot for the next. */
void fetcher_task_finished(fetcher *fx, fetch_task *t);

/* Call hook(arg, key) on every demand lookup, hit or miss (hint lists
 * follow their job's consumption with it).  NULL to stop. */
typedef void (*fetch_consume_hook)(void *arg, const uint8_t key[CHUNK_KEY_LEN]);
void fetcher_set_consume_hook(fetcher *fx, fetch_consume_hook hook, void *arg);

/* Change max_inflight (SIGHUP); running work above it finishes. */
void fetcher_set_max_inflight(fetcher *fx, unsigned max_inflight);

/* Record every lookup from now on as a "KEY SIZE" line on trace (borrowed,
 * NULL to stop): KEY is 16 hex digits of the chunk key's hash, SIZE the
 * chunk's length.  The simulator in bench/ replays such files. */
void fetcher_set_trace(fetcher *fx, FILE *trace);

/* Fetches in flight (queued or running), and bytes queued for
 * write-behind. */
unsigned fetcher_inflight(const fetcher *fx);
/* Tasks running against the source, and tasks waiting for a slot. */
unsigned fetcher_running(const fetcher *fx);
unsigned fetcher_queued(const fetcher *fx);
uint64_t fetcher_writeback_bytes(const fetcher *fx);

#endif
