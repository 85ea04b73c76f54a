/*
 * warmup.h - operator-driven cache filling (granaryctl warmup).
 *
 * A job is a list of paths (files, or directories walked recursively, no
 * symlinks followed) whose chunks are read from the source into the NVMe
 * tier (into DRAM when there is no NVMe tier).  Chunks the NVMe tier holds
 * already are skipped, so running a job twice costs one lookup per chunk.
 * Work goes out as fetch tasks of class SCHED_WARMUP: the lowest share of
 * the source slots, never one kept for demand.  Directory listing and file
 * reading are separate tasks that run in parallel, so listing stays ahead
 * of reading; small files are read in batches per task.
 *
 * Jobs persist in <nvme path>/warmup/<id>.job (their paths and options):
 * after a restart they start again, and what they had cached is skipped.
 * A job's file is removed when it finishes or is cancelled.
 *
 * Threads: loop thread; tasks run on the I/O threads.
 */
#ifndef GR_WARMUP_H
#define GR_WARMUP_H

#include <event2/event.h>
#include <stdint.h>

#include "dram.h"
#include "fetch.h"
#include "source.h"
#include "stats.h"
#include "nvme.h"

typedef struct warmup warmup;

/* nvme may be NULL (then state_dir is NULL too: jobs do not persist).
 * chunk_size: [source] chunk_size, the largest chunk.  Jobs found in
 * state_dir resume.  0 or -errno with a reason in err; *out is set even
 * then (free it). */
int warmup_new(struct event_base *base, fetcher *fx, sched *sc, nvme_tier *nvme, source *src,
               gr_stats *stats, uint64_t chunk_size, const char *state_dir, warmup **out, char *err,
               size_t errlen);

/* Cancel every task not yet started; the job files stay, so jobs resume
 * at the next start.  Call before the workers stop. */
void warmup_shutdown(warmup *wu);

/* Free (after the workers stopped).  NULL-safe. */
void warmup_free(warmup **wu);

/*
 * Add paths to job *id (0: a new job, whose id is stored in *id), each
 * path normalised and checked against the roots already (norms[i], roots[i];
 * the strings are copied).  seal: no more paths will come; a job finishes
 * only once sealed.  max_bw: bytes per second, 0 for no limit (a new job's
 * only).  0, or -ENOENT (no such running job), -ENOMEM.
 */
int warmup_add(warmup *wu, uint32_t *id, char *const *norms, const int *roots, size_t n,
               int seal, uint64_t max_bw);

/* Cancel job id.  0, or -ENOENT. */
int warmup_cancel(warmup *wu, uint32_t id);

/* One job's progress, for status replies. */
typedef struct warmup_info {
    uint32_t id;
    const char *state;          /* "running", "done", "cancelled" */
    uint64_t files, failed, bytes, chunks_cached, chunks_skipped;
    uint64_t queued;            /* paths not yet started */
    uint64_t dirs;              /* directories listed */
    uint64_t elapsed_ms;
    int sealed;                 /* no more paths will come */
    const char *error;          /* the last failure, "" if none */
} warmup_info;

/* Call cb for each job, oldest first (the info lives during the call);
 * stops at cb's first non-zero result and returns it, else 0. */
int warmup_each(warmup *wu, int (*cb)(void *arg, const warmup_info *j), void *arg);

/* Jobs not finished. */
unsigned warmup_active(const warmup *wu);

#endif
