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
 * Hints: a hint_list per connection holds the ranges its job will read, in
 * order, as it sent them (a path and a byte range each): nothing is done per
 * chunk when a HINT arrives, so a one-line HINT of a huge file costs a few
 * dozen bytes, not an entry per chunk.  Ranges are resolved (the file found
 * and judged) on I/O threads a few dozen ahead of the list's cursor, and
 * cut into chunks only as the fetch window moves: the list is fetched ahead
 * of the job (class SCHED_HINT) until the fetched-but-unread bytes reach
 * the window (hint_window, and half of the DRAM tier over all lists); each
 * such chunk is held in DRAM (dram_hold) until a demand lookup of it, from
 * any connection, consumes it.  Entries the job has clearly passed (more
 * than half the started span, and at least 64 entries, behind the one it
 * just read) are dropped as skipped, so that chunks the job never reads
 * cannot stall the list.
 *
 * Hints and access (who may learn what): a hinted file is judged exactly as
 * far as the daemon can without the client's open (judge.h: search on every
 * directory of its path, read on the file, mode bits, groups, ACLs) before
 * anything of it is read; a refused range costs nothing and is reported to
 * its connection.  Its chunks are fetched into the hinting user's own
 * shared memory only if that user has proven it may read the file (an
 * OPEN with its fd proof, proofs.h), or is root, or access_check is none;
 * else into quarantine (arena.h), which no client maps, until a proven
 * reader claims them.
 *
 * Limits: every user's lists together may name at most hint_max_entries
 * chunks and hold hint_memory bytes of ranges; all users together
 * hint_memory_total.  A HINT that would pass them is refused with E2BIG.
 *
 * Threads: loop thread only; resolution runs as worker jobs.
 */
#ifndef GR_PREFETCH_H
#define GR_PREFETCH_H

#include <stdint.h>
#include <sys/types.h>

#include "access.h"
#include "dram.h"
#include "fetch.h"
#include "judge.h"
#include "proofs.h"
#include "proto.h"
#include "source.h"
#include "stats.h"
#include "workers.h"

typedef struct prefetcher prefetcher;

/* Over the engine, tiers, access judge and proofs (all borrowed).  Installs
 * itself as fx's consume hook.  0 or -ENOMEM. */
int prefetcher_new(fetcher *fx, dram *d, source *src, judge *jg, proofs *pr, workers *w,
                   gr_stats *stats, prefetcher **out);
/* Every hint list must be freed first.  NULL-safe. */
void prefetcher_free(prefetcher **p);

/* The [prefetch] keys, and whether access_check is none (then every hint
 * is fetched into its user's memory).  At start and on reload. */
typedef struct prefetch_limits {
    uint64_t readahead_max;
    uint64_t hint_window;
    uint64_t hint_max_entries;  /* chunks per uid */
    uint64_t hint_memory;       /* bytes of ranges per uid */
    uint64_t hint_memory_total; /* bytes of ranges over all uids */
    int trust_all;              /* access_check = none */
    int judge_final;            /* access_check = judge: a judged hint is as good as a proof */
} prefetch_limits;
void prefetcher_configure(prefetcher *p, const prefetch_limits *lim);

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

/* What a connection's list has come to (the HINT reply's records). */
typedef struct hint_status {
    uint64_t accepted;          /* ranges of the last HINT appended */
    uint64_t ranges;            /* ranges appended since the list began (or was cleared) */
    uint64_t pending;           /* chunks named and not yet read, skipped or failed */
    uint64_t errors;            /* ranges refused or failed (unresolvable, unreadable, ...) */
    uint64_t skipped;           /* chunks dropped because the job read past them */
    const char *last_error;     /* the latest failure's reason, "" if none */
} hint_status;

/* A list for a client with these credentials (copied).  NULL on
 * out-of-memory. */
hint_list *hint_list_new(prefetcher *p, const access_cred *cred);

/* Drop the list: holds released, fetches in flight forgotten.  NULL-safe. */
void hint_list_free(hint_list **l);

/*
 * Append the ranges of a decoded HINT request (m->u.hint; PROTO_HINT_CLEAR
 * clears first; a HINT of no ranges only asks for the status).  Paths are
 * checked lexically now (a bad one is counted as an error, the others go
 * on) and resolved later.  0, or -E2BIG (nothing appended: the user's lists
 * are at hint_max_entries chunks or hint_memory bytes, or all users' at
 * hint_memory_total), or -ENOMEM.  *st is filled in every case.
 */
int hint_list_append(hint_list *l, const proto_msg *m, hint_status *st);

/*
 * The daemon's own list (dirahead.h) for a user: a list like a client's
 * (its limits, judging, holds), whose entries more than 2 behind a read
 * are dropped (a client's may come up to 64 entries out of order).
 */
hint_list *hint_list_new_own(prefetcher *p, const access_cred *cred);

/* Whether the user has a client's hint list (a HINT was sent on one of its
 * live connections): its job says what it reads, so the daemon's guesses
 * stand down. */
int prefetch_user_hints(prefetcher *p, uid_t uid);

/*
 * Append [off, off + len) of norm (normalised, beneath root; taken, freed
 * on failure; len 0: to the end), as a HINT range would be: judged and
 * resolved later, fetched within the window, its chunks held until read.
 * For the daemon's own lists.  0, -E2BIG (the user's or all users'
 * limits, as for a HINT), or -ENOMEM.
 */
int hint_list_add(hint_list *l, char *norm, int root, uint64_t off, uint64_t len);

/* Empty the list as a HINT with PROTO_HINT_CLEAR would: holds released. */
void hint_list_clear(hint_list *l);

/* The list's status now (the strings live until the next call on l). */
void hint_list_status(const hint_list *l, hint_status *st);

#endif
