/*
 * sched.h - the source slots: who may read the DFS now.
 *
 * Every unit of work that reads the distributed filesystem (a chunk fetch
 * that may miss down to the source, a warmup task) is a sched_task that
 * needs one of max_inflight slots.  Tasks wait in one FIFO per class.
 * Demand takes any free slot and runs on the I/O threads' demand queue,
 * which they always serve first; prefetch classes share the slots left
 * after a quarter is kept for demand, in a weighted round robin
 * (read-ahead 2, hints 2, warmup 1), so that no class starves another.  A
 * task a client now waits on is promoted: to the front of the demand
 * queue, or ahead of background jobs on the I/O threads if it is queued
 * there already.
 *
 * Threads: the loop thread only; tasks run as worker jobs.
 */
#ifndef GR_SCHED_H
#define GR_SCHED_H

#include "list.h"
#include "workers.h"

/* Who asked, in scheduling order. */
typedef enum sched_class {
    SCHED_DEMAND,       /* a client waits */
    SCHED_READAHEAD,    /* a sequential reader's next chunks */
    SCHED_HINT,         /* a job's hint list */
    SCHED_WARMUP,       /* granaryctl warmup */
    SCHED_NCLASSES
} sched_class;

/*
 * A task, embedded first in its owner's struct.  job.done must call
 * sched_finished(); job.cancelled is set (and run never called) when the
 * scheduler drained the task at shutdown.
 */
typedef struct sched_task {
    wq_job job;                 /* first */
    sched_class cls;
    int queued;                 /* waiting for a slot */
    gr__list q;                 /* its class's queue while queued */
} sched_task;

typedef struct sched sched;

/* Slots over the workers w (borrowed); max_inflight >= 1.  0 or -ENOMEM. */
int sched_new(workers *w, unsigned max_inflight, sched **out);
/* Free; nothing may be queued (drain first).  NULL-safe. */
void sched_free(sched **s);

/* Queue t as class cls; it runs on an I/O thread when a slot is free. */
void sched_submit(sched *s, sched_task *t, sched_class cls);
/* t's done() calls this first: frees its slot for the next task. */
void sched_finished(sched *s, sched_task *t);
/* A client now waits on t (queued or running): make it demand. */
void sched_promote(sched *s, sched_task *t);

/* Change max_inflight (SIGHUP); running work above it finishes. */
void sched_set_max(sched *s, unsigned max_inflight);

/* Shutdown, before workers_stop: every queued task is cancelled (its done()
 * runs with job.cancelled set) and nothing new starts. */
void sched_drain(sched *s);

/* Tasks running, and tasks waiting for a slot. */
unsigned sched_running(const sched *s);
unsigned sched_queued(const sched *s);

#endif
