/*
 * fetch.c - see fetch.h.
 *
 * State: a table of fetches in flight keyed by chunk key, each with the list
 * of lookups waiting on it.  A fetch owns a reference to its srcfile and to
 * the chunk it fills; the write-behind job owns its own chunk reference.
 * Source work waits for a slot in one queue per fetch_class (fx->q) and
 * runs on the I/O threads once dispatch() gives it one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fetch.h"
#include "log.h"

#define PENDING_BUCKETS 4096            /* fetches in flight are few */

typedef struct waiter waiter;
struct waiter {
    fetch_cb cb;
    void *arg;
    int demand;                 /* a client's lookup (counted in the lookup stats) */
    waiter *next;
};

typedef enum { FROM_NONE, FROM_NVME, FROM_SOURCE } fetch_from;

typedef struct pending pending;
struct pending {
    fetch_task task;            /* first: the task is the pending */
    fetcher *fx;
    fetch_class born;           /* the class that started it */
    uint8_t key[CHUNK_KEY_LEN];
    srcfile *f;
    uint64_t idx;
    chunk *c;
    waiter *waiters, **wtail;
    pending *hnext;
    /* Filled by the worker. */
    fetch_from from;
    int err;
    int nvme_bad;               /* the NVMe copy failed its checksum */
    char errmsg[256];
};

typedef struct writeback {
    wq_job job;
    fetcher *fx;
    chunk *c;
    int rc;
} writeback;

struct fetcher {
    dram *dram;
    nvme_tier *nvme;
    source *src;
    workers *w;
    gr_stats *stats;
    pending *buckets[PENDING_BUCKETS];
    unsigned inflight;
    uint64_t wb_bytes, wb_max;  /* write-behind bytes queued, and the bound */
    FILE *trace;                /* lookups are recorded here when set */
    /* Slots: running tasks, and tasks waiting per class (FIFO each). */
    unsigned max_inflight, running, queued;
    fetch_task *qhead[FETCH_NCLASSES], *qtail[FETCH_NCLASSES];
    unsigned rr;                /* position in the round robin (rr_order) */
    fetch_consume_hook consume;
    void *consume_arg;
};

/* Weighted round robin over the prefetch classes: read-ahead 2, hints 2,
 * warmup 1. */
static const fetch_class rr_order[] = {
    FETCH_READAHEAD, FETCH_HINT, FETCH_WARMUP, FETCH_HINT, FETCH_READAHEAD,
};
#define RR_LEN (sizeof(rr_order) / sizeof(rr_order[0]))

int fetcher_new(dram *d, nvme_tier *nvme, source *src, workers *w, gr_stats *stats,
                uint64_t writeback_max_bytes, unsigned max_inflight, fetcher **out)
{
    fetcher *fx = calloc(1, sizeof(*fx));

    if (!fx)
        return -ENOMEM;
    fx->dram = d;
    fx->nvme = nvme;
    fx->src = src;
    fx->w = w;
    fx->stats = stats;
    fx->wb_max = writeback_max_bytes;
    fx->max_inflight = max_inflight ? max_inflight : 1;
    *out = fx;
    return 0;
}

void fetcher_free(fetcher **fxp)
{
    free(*fxp);
    *fxp = NULL;
}

void fetcher_set_trace(fetcher *fx, FILE *trace)
{
    fx->trace = trace;
}

unsigned fetcher_inflight(const fetcher *fx)
{
    return fx->inflight;
}

unsigned fetcher_running(const fetcher *fx)
{
    return fx->running;
}

unsigned fetcher_queued(const fetcher *fx)
{
    return fx->queued;
}

void fetcher_set_consume_hook(fetcher *fx, fetch_consume_hook hook, void *arg)
{
    fx->consume = hook;
    fx->consume_arg = arg;
}

/* ---- slots ---- */

static void q_unlink(fetcher *fx, fetch_task *t)
{
    if (t->qprev)
        t->qprev->qnext = t->qnext;
    else
        fx->qhead[t->cls] = t->qnext;
    if (t->qnext)
        t->qnext->qprev = t->qprev;
    else
        fx->qtail[t->cls] = t->qprev;
    t->qprev = t->qnext = NULL;
    t->queued = 0;
    fx->queued--;
}

static void q_push(fetcher *fx, fetch_task *t, int front)
{
    fetch_class k = t->cls;

    t->queued = 1;
    fx->queued++;
    if (front) {
        t->qprev = NULL;
        t->qnext = fx->qhead[k];
        if (t->qnext)
            t->qnext->qprev = t;
        else
            fx->qtail[k] = t;
        fx->qhead[k] = t;
    } else {
        t->qnext = NULL;
        t->qprev = fx->qtail[k];
        if (t->qprev)
            t->qprev->qnext = t;
        else
            fx->qhead[k] = t;
        fx->qtail[k] = t;
    }
}

/* Slots prefetch may use: a quarter (at least one) stays free for demand. */
static unsigned prefetch_slots(const fetcher *fx)
{
    unsigned keep = fx->max_inflight / 4;

    if (keep == 0)
        keep = fx->max_inflight > 1 ? 1 : 0;
    return fx->max_inflight - keep;
}

static fetch_task *next_prefetch(fetcher *fx)
{
    for (unsigned i = 0; i < RR_LEN; i++) {
        fetch_class k = rr_order[(fx->rr + i) % RR_LEN];
        if (fx->qhead[k]) {
            fx->rr = (unsigned)((fx->rr + i + 1) % RR_LEN);
            return fx->qhead[k];
        }
    }
    return NULL;
}

static void dispatch(fetcher *fx)
{
    for (;;) {
        fetch_task *t = NULL;
        if (fx->running < fx->max_inflight && fx->qhead[FETCH_DEMAND])
            t = fx->qhead[FETCH_DEMAND];
        else if (fx->running < prefetch_slots(fx))
            t = next_prefetch(fx);
        if (!t)
            return;
        q_unlink(fx, t);
        fx->running++;
        workers_submit(fx->w, &t->job, t->cls == FETCH_DEMAND ? WQ_DEMAND : WQ_BACKGROUND);
    }
}

void fetcher_task_submit(fetcher *fx, fetch_task *t, fetch_class cls)
{
    t->cls = cls;
    q_push(fx, t, 0);
    dispatch(fx);
}

void fetcher_task_finished(fetcher *fx, fetch_task *t)
{
    if (!t->job.cancelled)
        fx->running--;
    dispatch(fx);
}

void fetcher_set_max_inflight(fetcher *fx, unsigned max_inflight)
{
    fx->max_inflight = max_inflight ? max_inflight : 1;
    dispatch(fx);
}

void fetcher_drain(fetcher *fx)
{
    /* Nothing new starts: done() of a cancelled task must not dispatch. */
    fx->max_inflight = 0;
    for (int k = 0; k < FETCH_NCLASSES; k++)
        while (fx->qhead[k]) {
            fetch_task *t = fx->qhead[k];
            q_unlink(fx, t);
            t->job.cancelled = 1;
            t->job.done(&t->job);
        }
}

/* A client now waits on t: to the front of the demand queue, or ahead of
 * the background jobs if it is queued on the I/O threads already. */
static void promote(fetcher *fx, fetch_task *t)
{
    if (t->cls == FETCH_DEMAND)
        return;
    if (t->queued) {
        q_unlink(fx, t);
        t->cls = FETCH_DEMAND;
        q_push(fx, t, 1);
        dispatch(fx);
        return;
    }
    t->cls = FETCH_DEMAND;
    workers_promote(fx->w, &t->job);
}

uint64_t fetcher_writeback_bytes(const fetcher *fx)
{
    return fx->wb_bytes;
}

static size_t pending_bucket(const uint8_t *key)
{
    return (size_t)XXH3_64bits(key, CHUNK_KEY_LEN) & (PENDING_BUCKETS - 1);
}

/* Worker thread: NVMe, then the source.  Touches only p and the immutable
 * parts of p->f. */
static void fetch_run(wq_job *j)
{
    pending *p = (pending *)j;
    uint64_t want = srcfile_chunk_len(p->f, p->idx);
    size_t len = 0;
    int rc;

    if (p->fx->nvme) {
        rc = nvme_get(p->fx->nvme, p->key, p->c->data, p->c->cap, &len);
        if (rc == 0 && len == want) {
            p->c->len = (uint32_t)len;
            p->from = FROM_NVME;
            return;
        }
        if (rc == 0)                    /* cannot happen with a sane nvme_tier */
            nvme_delete(p->fx->nvme, p->key);
        p->nvme_bad = rc == -EBADMSG;
    }
    rc = source_read_chunk(p->fx->src, p->f, p->idx, p->c->data, &len, p->errmsg,
                           sizeof(p->errmsg));
    if (rc < 0) {
        p->err = rc;
        return;
    }
    /* Zero the tail so that an O_DIRECT write of the rounded length never
     * carries stale heap bytes to disk. */
    memset(p->c->data + len, 0, p->c->cap - len);
    p->c->len = (uint32_t)len;
    p->from = FROM_SOURCE;
}

static void writeback_run(wq_job *j)
{
    writeback *wb = (writeback *)j;

    wb->rc = nvme_put(wb->fx->nvme, wb->c->key, wb->c->data, wb->c->len);
}

static void writeback_done(wq_job *j)
{
    writeback *wb = (writeback *)j;
    fetcher *fx = wb->fx;

    if (j->cancelled) {
        fx->stats->nvme_writes_skipped++;
    } else if (wb->rc == -ECANCELED) {
        /* The tier's policy chose not to keep it: counted by the store. */
    } else if (wb->rc == 0) {
        fx->stats->nvme_writes++;
    } else {
        fx->stats->nvme_write_errors++;
        log_debug("nvme put: %s", strerror(-wb->rc));
    }
    fx->wb_bytes -= wb->c->cap;
    chunk_unref(&wb->c);
    free(wb);
}

static void writeback_start(fetcher *fx, chunk *c)
{
    writeback *wb;

    if (fx->wb_bytes + c->cap > fx->wb_max || !(wb = calloc(1, sizeof(*wb)))) {
        fx->stats->nvme_writes_skipped++;
        return;
    }
    wb->job.run = writeback_run;
    wb->job.done = writeback_done;
    wb->fx = fx;
    wb->c = chunk_ref(c);
    fx->wb_bytes += c->cap;
    workers_submit(fx->w, &wb->job, WQ_BACKGROUND);
}

static void fetch_done(wq_job *j)
{
    pending *p = (pending *)j;
    fetcher *fx = p->fx;
    pending **pp = &fx->buckets[pending_bucket(p->key)];
    int demand = 0;
    waiter *wt;

    fetcher_task_finished(fx, &p->task);
    while (*pp != p)
        pp = &(*pp)->hnext;
    *pp = p->hnext;
    fx->inflight--;
    if (j->cancelled) {
        p->from = FROM_NONE;
        p->err = -ECANCELED;
        snprintf(p->errmsg, sizeof(p->errmsg), "the daemon is shutting down");
    }
    if (p->nvme_bad)
        fx->stats->nvme_checksum_errors++;
    if (p->from == FROM_NVME) {
        fx->stats->nvme_promotions++;
    } else if (p->from == FROM_SOURCE) {
        fx->stats->source_reads++;
        fx->stats->source_bytes_read += p->c->len;
    } else if (!j->cancelled) {
        fx->stats->source_errors++;
        log_debug("fetch failed: %s", p->errmsg);
    }
    for (wt = p->waiters; wt; wt = wt->next)
        demand |= wt->demand;
    if (p->from != FROM_NONE) {
        if (p->born != FETCH_DEMAND) {
            /* Fetched ahead: kept even if the policy would not have
             * admitted it (someone said it will be read), and marked until
             * it is. */
            p->c->admitted = 1;
            if (demand)
                fx->stats->prefetch_used++;
            else
                p->c->prefetched = 1;
        }
        dram_put(fx->dram, p->c);
    }
    for (wt = p->waiters; wt;) {
        waiter *next = wt->next;
        if (wt->demand) {
            if (p->from == FROM_NVME)
                fx->stats->hits_nvme++;
            else
                fx->stats->misses++;
        }
        if (p->from == FROM_NONE)
            wt->cb(wt->arg, NULL, p->err, p->errmsg);
        else
            wt->cb(wt->arg, p->c, 0, NULL);
        free(wt);
        wt = next;
    }
    if (p->from == FROM_SOURCE && fx->nvme)
        writeback_start(fx, p->c);
    chunk_unref(&p->c);
    srcfile_unref(&p->f);
    free(p);
}

/* Add a waiter to the fetch of key, starting one for class cls if none is
 * in flight.  cb runs later, or at once with -ENOMEM. */
static void fetch_join(fetcher *fx, srcfile *f, uint64_t idx, const uint8_t *key,
                       fetch_class cls, int64_t owner, fetch_cb cb, void *arg)
{
    size_t b = pending_bucket(key);
    waiter *wt = NULL;
    pending *p;

    if (cb && !(wt = calloc(1, sizeof(*wt)))) {
        cb(arg, NULL, -ENOMEM, "out of memory");
        return;
    }
    if (wt) {
        wt->cb = cb;
        wt->arg = arg;
        wt->demand = cls == FETCH_DEMAND;
    }
    for (p = fx->buckets[b]; p; p = p->hnext)
        if (memcmp(p->key, key, CHUNK_KEY_LEN) == 0)
            break;
    if (p) {
        if (cls == FETCH_DEMAND) {
            fx->stats->fetch_joins++;
            promote(fx, &p->task);
        }
        if (wt) {
            *p->wtail = wt;
            p->wtail = &wt->next;
        }
        return;
    }
    p = calloc(1, sizeof(*p));
    if (p)    /* sized to the chunk: a 100 KB file takes 128 KB, not a whole chunk */
        p->c = dram_chunk_new(fx->dram, key, srcfile_chunk_len(f, idx), owner);
    if (!p || !p->c) {
        free(p);
        free(wt);
        if (cb)
            cb(arg, NULL, -ENOMEM, "out of memory");
        return;
    }
    p->task.job.run = fetch_run;
    p->task.job.done = fetch_done;
    p->fx = fx;
    p->born = cls;
    memcpy(p->key, key, CHUNK_KEY_LEN);
    p->f = srcfile_ref(f);
    p->idx = idx;
    p->waiters = wt;
    p->wtail = wt ? &wt->next : &p->waiters;
    p->hnext = fx->buckets[b];
    fx->buckets[b] = p;
    fx->inflight++;
    if (cls != FETCH_DEMAND)
        fx->stats->prefetch_issued++;
    fetcher_task_submit(fx, &p->task, cls);
}

void fetcher_get(fetcher *fx, srcfile *f, uint64_t idx, int64_t owner, fetch_cb cb, void *arg)
{
    uint8_t key[CHUNK_KEY_LEN];
    chunk *c;

    chunk_key(key, f->id, idx);
    if (fx->trace)
        fprintf(fx->trace, "%016llx %llu\n", (unsigned long long)XXH3_64bits(key, CHUNK_KEY_LEN),
                (unsigned long long)srcfile_chunk_len(f, idx));
    if (fx->consume)
        fx->consume(fx->consume_arg, key);
    c = dram_get(fx->dram, key);
    if (c) {
        fx->stats->hits_dram++;
        if (c->prefetched) {
            c->prefetched = 0;
            fx->stats->prefetch_used++;
        }
        cb(arg, c, 0, NULL);
        chunk_unref(&c);
        return;
    }
    fetch_join(fx, f, idx, key, FETCH_DEMAND, owner, cb, arg);
}

void fetcher_prefetch(fetcher *fx, srcfile *f, uint64_t idx, fetch_class cls, int64_t owner,
                      fetch_cb cb, void *arg)
{
    uint8_t key[CHUNK_KEY_LEN];
    chunk *c;

    if (idx * f->chunk_size >= (uint64_t)f->st.st_size && !(idx == 0 && f->st.st_size == 0)) {
        if (cb)
            cb(arg, NULL, -EINVAL, "past the end of the file");
        return;
    }
    chunk_key(key, f->id, idx);
    c = dram_peek(fx->dram, key);
    if (c) {
        if (cb)
            cb(arg, c, 0, NULL);
        return;
    }
    fetch_join(fx, f, idx, key, cls, owner, cb, arg);
}
