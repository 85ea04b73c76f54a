/*
 * workers.h - the I/O thread pool.  Blocking work (source reads, RocksDB
 * and extent I/O) runs here; each job's completion runs back on the event
 * loop thread.
 *
 * A job is caller-allocated and embedded in the caller's own struct
 * (container_of style).  run() executes on a worker thread and must touch
 * only what no other thread changes meanwhile; done() then executes on the
 * loop thread, where the caller may free the job.  Two queues: demand jobs
 * are always taken before background jobs (write-behind, later prefetch), so
 * a client's miss never waits behind cache maintenance.
 */
#ifndef GR_WORKERS_H
#define GR_WORKERS_H

#include <event2/event.h>

#include "list.h"

typedef enum { WQ_DEMAND = 0, WQ_BACKGROUND = 1, WQ_NQUEUES } wq_prio;

typedef struct wq_job wq_job;
struct wq_job {
    void (*run)(wq_job *j);     /* worker thread */
    void (*done)(wq_job *j);    /* loop thread, after run (or instead of it, see cancelled) */
    gr__list link;              /* queue link, owned by the pool */
    int cancelled;              /* set when workers_stop dropped the job before it ran */
    int running;                /* the pool's: taken by a thread, done() not yet run */
    int prio;                   /* the pool's: the queue it was submitted to */
};

typedef struct workers workers;

/* Start nthreads workers whose completions are delivered on base.
 * evthread_use_pthreads() must have been called before base was made.
 * Returns 0 or -errno. */
int workers_start(struct event_base *base, int nthreads, workers **out);

/* Queue a job (loop thread).  Never fails: the job is caller memory. */
void workers_submit(workers *w, wq_job *j, wq_prio prio);

/* Move j, queued as WQ_BACKGROUND and not yet started, to the end of the
 * demand queue (a client now waits on it), in O(1).  1 if moved, 0 if it
 * had started or finished already. */
int workers_promote(workers *w, wq_job *j);

/* Jobs queued and not yet started, per queue (for stats). */
unsigned workers_pending(workers *w, wq_prio prio);

/* Stop: background jobs not yet started are cancelled (their done() runs
 * with j->cancelled set and run() never called), demand jobs already queued
 * still run; then the threads are joined, every outstanding done() runs on
 * the calling (loop) thread, and *w is freed and set NULL.  A job submitted
 * from one of those done()s is cancelled the same way.  NULL-safe. */
void workers_stop(workers **w);

#endif
