/*
 * fetch.c - see fetch.h.
 *
 * State: a table of fetches in flight keyed by chunk key, each with the list
 * of lookups waiting on it.  A fetch owns a reference to its srcfile and to
 * the chunk it fills; the write-behind job owns its own chunk reference.
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
    waiter *next;
};

typedef enum { FROM_NONE, FROM_NVME, FROM_SOURCE } fetch_from;

typedef struct pending pending;
struct pending {
    wq_job job;                 /* first: the job is the pending */
    fetcher *fx;
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
    store *nvme;
    source *src;
    workers *w;
    gr_stats *stats;
    pending *buckets[PENDING_BUCKETS];
    unsigned inflight;
    uint64_t wb_bytes, wb_max;  /* write-behind bytes queued, and the bound */
    FILE *trace;                /* lookups are recorded here when set */
};

int fetcher_new(dram *d, store *nvme, source *src, workers *w, gr_stats *stats,
                uint64_t writeback_max_bytes, fetcher **out)
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
        rc = store_get(p->fx->nvme, p->key, p->c->data, p->c->cap, &len);
        if (rc == 0 && len == want) {
            p->c->len = (uint32_t)len;
            p->from = FROM_NVME;
            return;
        }
        if (rc == 0)                    /* cannot happen with a sane store */
            store_delete(p->fx->nvme, p->key);
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

    wb->rc = store_put(wb->fx->nvme, wb->c->key, wb->c->data, wb->c->len);
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
    waiter *wt;

    while (*pp != p)
        pp = &(*pp)->hnext;
    *pp = p->hnext;
    fx->inflight--;
    if (p->nvme_bad)
        fx->stats->nvme_checksum_errors++;
    if (p->from == FROM_NVME) {
        fx->stats->nvme_promotions++;
    } else if (p->from == FROM_SOURCE) {
        fx->stats->source_reads++;
        fx->stats->source_bytes_read += p->c->len;
    } else if (p->from == FROM_NONE) {
        fx->stats->source_errors++;
        log_debug("fetch failed: %s", p->errmsg);
    }
    if (p->from != FROM_NONE)
        dram_put(fx->dram, p->c);
    for (wt = p->waiters; wt;) {
        waiter *next = wt->next;
        if (p->from == FROM_NVME)
            fx->stats->hits_nvme++;
        else
            fx->stats->misses++;
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

void fetcher_get(fetcher *fx, srcfile *f, uint64_t idx, fetch_cb cb, void *arg)
{
    uint8_t key[CHUNK_KEY_LEN];
    chunk *c;
    pending *p;
    waiter *wt;
    size_t b;

    chunk_key(key, f->id, idx);
    if (fx->trace)
        fprintf(fx->trace, "%016llx %llu\n", (unsigned long long)XXH3_64bits(key, CHUNK_KEY_LEN),
                (unsigned long long)srcfile_chunk_len(f, idx));
    c = dram_get(fx->dram, key);
    if (c) {
        fx->stats->hits_dram++;
        cb(arg, c, 0, NULL);
        chunk_unref(&c);
        return;
    }
    wt = calloc(1, sizeof(*wt));
    if (!wt) {
        cb(arg, NULL, -ENOMEM, "out of memory");
        return;
    }
    wt->cb = cb;
    wt->arg = arg;
    b = pending_bucket(key);
    for (p = fx->buckets[b]; p; p = p->hnext)
        if (memcmp(p->key, key, CHUNK_KEY_LEN) == 0)
            break;
    if (p) {
        fx->stats->fetch_joins++;
        *p->wtail = wt;
        p->wtail = &wt->next;
        return;
    }
    p = calloc(1, sizeof(*p));
    if (p)    /* sized to the chunk: a 100 KB file takes 128 KB, not a whole chunk */
        p->c = dram_chunk_new(fx->dram, key, srcfile_chunk_len(f, idx));
    if (!p || !p->c) {
        free(p);
        free(wt);
        cb(arg, NULL, -ENOMEM, "out of memory");
        return;
    }
    p->job.run = fetch_run;
    p->job.done = fetch_done;
    p->fx = fx;
    memcpy(p->key, key, CHUNK_KEY_LEN);
    p->f = srcfile_ref(f);
    p->idx = idx;
    p->waiters = wt;
    p->wtail = &wt->next;
    p->hnext = fx->buckets[b];
    fx->buckets[b] = p;
    fx->inflight++;
    workers_submit(fx->w, &p->job, WQ_DEMAND);
}
