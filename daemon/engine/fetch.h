/*
 * fetch.h - the tiering engine: finds a chunk in DRAM, else down a chain of
 * backends (backend.h: the NVMe tier, then the source), and keeps the
 * tiers filled.
 *
 * A lookup that misses DRAM starts one fetch per chunk; later lookups of the
 * same chunk join it (one source read however many clients ask).  The fetch
 * is a task of the source slots (sched.h) and runs on an I/O thread: it asks
 * each backend in turn until one has the chunk.  The result goes into DRAM
 * and, when it came from below a backend that keeps copies, is written to
 * that backend behind the reader on a background job, never in its way.  A
 * full write-behind queue skips the copy (counted) rather than grow memory
 * without bound.
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

#include "backend.h"
#include "dram.h"
#include "sched.h"
#include "source.h"
#include "stats.h"
#include "workers.h"

typedef struct fetcher fetcher;

/*
 * Result of a lookup.  c is borrowed for the duration of the call (take a
 * reference to keep it) and NULL when err < 0; then errmsg says why in one
 * line.
 */
typedef void (*fetch_cb)(void *arg, chunk *c, int err, const char *errmsg);

/* The engine over DRAM and the chain of n backends (copied; their
 * selves borrowed), scheduling on sc and running on w; it updates *stats.
 * 0 or -ENOMEM (-EINVAL for more than BACKEND_MAX backends). */
int fetcher_new(dram *d, const backend *chain, unsigned n, sched *sc, workers *w,
                gr_stats *stats, uint64_t writeback_max_bytes, fetcher **out);

/* Free; no fetch may be in flight (drain the scheduler, then stop the
 * workers).  NULL-safe. */
void fetcher_free(fetcher **fx);

/*
 * Look up chunk idx of f for a client of uid owner (a miss's DRAM block
 * comes from owner's arena segments).  cb runs exactly once: at once
 * (before this returns) on a DRAM hit, later otherwise.  f gets a reference
 * for as long as the fetch needs it.
 */
void fetcher_get(fetcher *fx, srcfile *f, uint64_t idx, int64_t owner, fetch_cb cb, void *arg);

/*
 * Prefetch chunk idx of f for class cls (not SCHED_DEMAND): into DRAM,
 * unless it is there already.  cb (may be NULL) runs once like a lookup's:
 * at once if the chunk is in DRAM, else when the fetch ends.  Lookup stats
 * (hits, misses) are not counted for it.
 */
void fetcher_prefetch(fetcher *fx, srcfile *f, uint64_t idx, sched_class cls, int64_t owner,
                      fetch_cb cb, void *arg);

/*
 * Look up chunk idx of f for another node of the peer cache (peer.h): like
 * fetcher_get, but a miss is read from this node's own tiers and source
 * only (never from peers: no request loops between nodes), into quarantine
 * memory, and it is not counted as a client's lookup.
 */
void fetcher_get_for_peer(fetcher *fx, srcfile *f, uint64_t idx, fetch_cb cb, void *arg);

/* Run the fetches fetcher_get_for_peer starts in sc's slots (over their
 * own I/O threads) instead of the engine's.  A node's I/O threads block
 * while they ask other nodes; if the fetches that answer other nodes
 * needed those same threads, two nodes asking each other at full load
 * would each wait for the other until the timeout.  A lane of their own
 * keeps serving peers independent of asking them. */
void fetcher_set_peer_lane(fetcher *fx, sched *sc);

/* Call hook(arg, key) on every demand lookup, hit or miss (hint lists
 * follow their job's consumption with it).  NULL to stop. */
typedef void (*fetch_consume_hook)(void *arg, const uint8_t key[CHUNK_KEY_LEN]);
void fetcher_set_consume_hook(fetcher *fx, fetch_consume_hook hook, void *arg);

/* Record every lookup from now on as a "KEY SIZE" line on trace (borrowed,
 * NULL to stop): KEY is 16 hex digits of the chunk key's hash, SIZE the
 * chunk's length.  The simulator in bench/ replays such files. */
void fetcher_set_trace(fetcher *fx, FILE *trace);

/* Fetches in flight (queued or running), and bytes queued for
 * write-behind. */
unsigned fetcher_inflight(const fetcher *fx);
uint64_t fetcher_writeback_bytes(const fetcher *fx);

#endif
