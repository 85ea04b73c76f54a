/*
 * sched.c - see sched.h.
 */
#include <errno.h>
#include <stdlib.h>

#include "sched.h"

struct sched {
    workers *w;
    unsigned max_inflight, running, queued;
    gr__list q[SCHED_NCLASSES];
    unsigned rr;                /* position in rr_order */
};

/* Weighted round robin over the prefetch classes: read-ahead 2, hints 2,
 * warmup 1. */
static const sched_class rr_order[] = {
    SCHED_READAHEAD, SCHED_HINT, SCHED_WARMUP, SCHED_HINT, SCHED_READAHEAD,
};
#define RR_LEN (sizeof(rr_order) / sizeof(rr_order[0]))

int sched_new(workers *w, unsigned max_inflight, sched **out)
{
    sched *s = calloc(1, sizeof(*s));

    if (!s)
        return -ENOMEM;
    s->w = w;
    s->max_inflight = max_inflight ? max_inflight : 1;
    for (int k = 0; k < SCHED_NCLASSES; k++)
        gr__list_init(&s->q[k]);
    *out = s;
    return 0;
}

void sched_free(sched **sp)
{
    free(*sp);
    *sp = NULL;
}

unsigned sched_running(const sched *s)
{
    return s->running;
}

unsigned sched_queued(const sched *s)
{
    return s->queued;
}

static void q_unlink(sched *s, sched_task *t)
{
    gr__list_remove(&t->q);
    t->queued = 0;
    s->queued--;
}

static void q_push(sched *s, sched_task *t, int front)
{
    t->queued = 1;
    s->queued++;
    if (front)
        gr__list_push_front(&s->q[t->cls], &t->q);
    else
        gr__list_push_back(&s->q[t->cls], &t->q);
}

static sched_task *q_head(sched *s, sched_class k)
{
    gr__list *n = gr__list_first(&s->q[k]);

    return n ? gr__list_entry(n, sched_task, q) : NULL;
}

/* Slots prefetch may use: a quarter (at least one) stays free for demand. */
static unsigned prefetch_slots(const sched *s)
{
    unsigned keep = s->max_inflight / 4;

    if (keep == 0)
        keep = s->max_inflight > 1 ? 1 : 0;
    return s->max_inflight - keep;
}

static sched_task *next_prefetch(sched *s)
{
    for (unsigned i = 0; i < RR_LEN; i++) {
        sched_class k = rr_order[(s->rr + i) % RR_LEN];
        sched_task *t = q_head(s, k);
        if (t) {
            s->rr = (unsigned)((s->rr + i + 1) % RR_LEN);
            return t;
        }
    }
    return NULL;
}

static void dispatch(sched *s)
{
    for (;;) {
        sched_task *t = NULL;
        if (s->running < s->max_inflight)
            t = q_head(s, SCHED_DEMAND);
        if (!t && s->running < prefetch_slots(s))
            t = next_prefetch(s);
        if (!t)
            return;
        q_unlink(s, t);
        s->running++;
        workers_submit(s->w, &t->job, t->cls == SCHED_DEMAND ? WQ_DEMAND : WQ_BACKGROUND);
    }
}

void sched_submit(sched *s, sched_task *t, sched_class cls)
{
    t->cls = cls;
    gr__list_init(&t->q);
    q_push(s, t, 0);
    dispatch(s);
}

void sched_finished(sched *s, sched_task *t)
{
    if (!t->job.cancelled)
        s->running--;
    dispatch(s);
}

void sched_set_max(sched *s, unsigned max_inflight)
{
    s->max_inflight = max_inflight ? max_inflight : 1;
    dispatch(s);
}

void sched_drain(sched *s)
{
    /* Nothing new starts: done() of a cancelled task must not dispatch. */
    s->max_inflight = 0;
    for (int k = 0; k < SCHED_NCLASSES; k++) {
        sched_task *t;
        while ((t = q_head(s, (sched_class)k))) {
            q_unlink(s, t);
            t->job.cancelled = 1;
            t->job.done(&t->job);
        }
    }
}

void sched_promote(sched *s, sched_task *t)
{
    if (t->cls == SCHED_DEMAND)
        return;
    if (t->queued) {
        q_unlink(s, t);
        t->cls = SCHED_DEMAND;
        q_push(s, t, 1);
        dispatch(s);
        return;
    }
    t->cls = SCHED_DEMAND;
    workers_promote(s->w, &t->job);
}
