/*
 * fetch.c - see fetch.h.
 *
 * State: a table of fetches in flight keyed by chunk key, each with the list
 * of lookups waiting on it.  A fetch owns a reference to its srcfile and to
 * the chunk it fills; the write-behind job owns its own chunk reference.
 * Fetches are tasks of the source slots (sched.h); the worker walks the
 * backend chain.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fetch.h"
#include "htab.h"
#include "log.h"

typedef struct waiter waiter;
struct waiter {
    fetch_cb cb;
    void *arg;
    int demand;                 /* a client's lookup (counted in the lookup stats) */
    /* To fetch again through its own file when the fetch it joined,
     * through another srcfile (another client's kept proof, say), fails. */
    srcfile *f;
    sched_class cls;
    int64_t owner;
    unsigned flags;
    waiter *next;
};

typedef struct pending pending;
struct pending {
    sched_task task;            /* first: the task is the pending */
    fetcher *fx;
    sched_class born;           /* the class that started it */
    uint8_t key[CHUNK_KEY_LEN];
    srcfile *f;
    uint64_t idx;
    chunk *c;
    chunk *copy_from;           /* a quarantined chunk a proven reader claims (no backend) */
    int local_only;             /* started for a peer: peers are not asked */
    sched *sc;                  /* the slots it runs in: fx->sc, or the peer lane */
    waiter *waiters, **wtail;
    gr__hnode hn;               /* fx->pending */
    /* Filled by the worker. */
    int from;                   /* index of the backend that had it, FROM_COPY, -1 none */
    unsigned corrupt;           /* bit i: backend i's copy failed its check */
    backend_status st;          /* the failing backend's, when from < 0 */
};

#define FROM_COPY (-2)              /* pending.from: copied from copy_from */

#define FJ_FOR_PEER 0x1             /* fetch_join: a peer's request (local only, not counted) */
#define FJ_RETRY 0x2                /* fetch_join: a waiter's second try (no third) */

static void fetch_join(fetcher *fx, srcfile *f, uint64_t idx, const uint8_t *key,
                       sched_class cls, int64_t owner, chunk *copy_from, unsigned flags,
                       fetch_cb cb, void *arg);

typedef struct writeback {
    wq_job job;
    fetcher *fx;
    chunk *c;
    unsigned upto;              /* put into the backends before this index */
    int rc;
} writeback;

struct fetcher {
    dram *dram;
    backend chain[BACKEND_MAX];
    unsigned nchain;
    sched *sc;
    sched *peer_sc;             /* fetches for peers' requests, when set */
    workers *w;
    gr_stats *stats;
    gr__htab pending;           /* fetches in flight, by key */
    unsigned inflight;
    uint64_t wb_bytes, wb_max;  /* write-behind bytes queued, and the bound */
    FILE *trace;                /* lookups are recorded here when set */
    fetch_consume_hook consume;
    void *consume_arg;
};

int fetcher_new(dram *d, const backend *chain, unsigned n, sched *sc, workers *w,
                gr_stats *stats, uint64_t writeback_max_bytes, fetcher **out)
{
    fetcher *fx;

    if (n > BACKEND_MAX)
        return -EINVAL;
    fx = calloc(1, sizeof(*fx));
    if (!fx || gr__htab_init(&fx->pending, 256) < 0) {
        free(fx);
        return -ENOMEM;
    }
    fx->dram = d;
    memcpy(fx->chain, chain, n * sizeof(*chain));
    fx->nchain = n;
    fx->sc = sc;
    fx->w = w;
    fx->stats = stats;
    fx->wb_max = writeback_max_bytes;
    *out = fx;
    return 0;
}

void fetcher_free(fetcher **fxp)
{
    fetcher *fx = *fxp;

    if (!fx)
        return;
    gr__htab_fini(&fx->pending);
    free(fx);
    *fxp = NULL;
}

void fetcher_set_peer_lane(fetcher *fx, sched *sc)
{
    fx->peer_sc = sc;
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

void fetcher_set_consume_hook(fetcher *fx, fetch_consume_hook hook, void *arg)
{
    fx->consume = hook;
    fx->consume_arg = arg;
}

static uint64_t key_hash(const uint8_t *key)
{
    return XXH3_64bits(key, CHUNK_KEY_LEN);
}

static int pending_eq(const gr__hnode *n, const void *key)
{
    return memcmp(gr__container_of(n, pending, hn)->key, key, CHUNK_KEY_LEN) == 0;
}

/*
 * Zero c's bytes from len to len rounded up to 4096 (NVME_ALIGN): an
 * O_DIRECT write of the rounded length then never carries stale bytes to
 * disk.  Not the rest of the block: the buddy block of a 100 KB file is
 * 128 KiB, and zeroing all of it wrote a third more than the file on every
 * cold fetch (4.7% of the daemon's CPU on a cold pass of 100 KB files)
 * and committed arena pages nothing uses.  What a block held before is its
 * owner's (a segment that changes owner is renewed: arena.h), so nothing
 * past len needs clearing for isolation.
 */
static void zero_tail(chunk *c, size_t len)
{
    size_t end = (len + 4095) & ~(size_t)4095;

    if (end > c->cap)
        end = c->cap;
    if (end > len)
        memset(c->data + len, 0, end - len);
}

/* Worker thread: each backend in turn until one has the chunk.  Touches
 * only p and the immutable parts of p->f. */
static void fetch_run(wq_job *j)
{
    pending *p = (pending *)j;
    fetcher *fx = p->fx;
    backend_req rq = {
        .key = p->key, .f = p->f, .idx = p->idx, .want = srcfile_chunk_len(p->f, p->idx),
        .buf = p->c->data, .cap = p->c->cap, .local_only = p->local_only,
    };

    p->from = -1;
    if (p->copy_from) {
        /* The claim of a quarantined chunk: its bytes are verified and
         * whole; only their memory changes owner. */
        memcpy(p->c->data, p->copy_from->data, p->copy_from->len);
        zero_tail(p->c, p->copy_from->len);
        p->c->len = p->copy_from->len;
        p->from = FROM_COPY;
        return;
    }
    for (unsigned i = 0; i < fx->nchain; i++) {
        const backend *b = &fx->chain[i];
        backend_status st = { 0 };
        size_t len = 0;
        backend_result r = b->ops->get(b->self, &rq, &len, &st);

        if (r == BACKEND_OK && len != rq.want) {
            /* Cannot happen with a sane backend: drop its copy, go on. */
            if (b->ops->drop)
                b->ops->drop(b->self, p->key);
            r = BACKEND_MISS;
        }
        if (r == BACKEND_OK) {
            zero_tail(p->c, len);
            p->c->len = (uint32_t)len;
            p->from = (int)i;
            return;
        }
        if (st.corrupt)
            p->corrupt |= 1u << i;
        if (r == BACKEND_FAIL) {
            p->st = st;
            return;
        }
    }
    if (p->st.err == 0) {
        p->st.err = -ENOENT;
        snprintf(p->st.msg, sizeof(p->st.msg), "no tier has the chunk");
    }
}

static void writeback_run(wq_job *j)
{
    writeback *wb = (writeback *)j;
    fetcher *fx = wb->fx;

    /* rc: the first real error, else -ECANCELED if a backend chose not to
     * keep it, else 0. */
    wb->rc = 0;
    for (unsigned i = 0; i < wb->upto; i++) {
        const backend *b = &fx->chain[i];
        int rc;
        if (!b->ops->put)
            continue;
        rc = b->ops->put(b->self, wb->c->key, wb->c->data, wb->c->len);
        if (rc < 0 && (wb->rc == 0 || (wb->rc == -ECANCELED && rc != -ECANCELED)))
            wb->rc = rc;
    }
}

static void writeback_done(wq_job *j)
{
    writeback *wb = (writeback *)j;
    fetcher *fx = wb->fx;

    if (j->cancelled) {
        fx->stats->nvme_writes_skipped++;
    } else if (wb->rc == -ECANCELED) {
        /* The tier's policy chose not to keep it: counted by the tier. */
    } else if (wb->rc == 0) {
        fx->stats->nvme_writes++;
    } else {
        fx->stats->nvme_write_errors++;
        log_debug("write-behind: %s", strerror(-wb->rc));
    }
    fx->wb_bytes -= wb->c->cap;
    chunk_unref(&wb->c);
    free(wb);
}

/* Copy c into the backends above the one that had it (index from). */
static void writeback_start(fetcher *fx, chunk *c, unsigned from)
{
    writeback *wb;
    int any = 0;

    for (unsigned i = 0; i < from; i++)
        any |= fx->chain[i].ops->put != NULL;
    if (!any)
        return;
    if (fx->wb_bytes + c->cap > fx->wb_max || !(wb = calloc(1, sizeof(*wb)))) {
        fx->stats->nvme_writes_skipped++;
        return;
    }
    wb->job.run = writeback_run;
    wb->job.done = writeback_done;
    wb->fx = fx;
    wb->c = chunk_ref(c);
    wb->upto = from;
    fx->wb_bytes += c->cap;
    workers_submit(fx->w, &wb->job, WQ_BACKGROUND);
}

/* The stats of a chunk that backend kind k provided. */
static void count_fetch(fetcher *fx, backend_kind k, const chunk *c)
{
    switch (k) {
    case BACKEND_NVME:
        fx->stats->nvme_promotions++;
        break;
    case BACKEND_SOURCE:
        fx->stats->source_reads++;
        fx->stats->source_bytes_read += c->len;
        break;
    case BACKEND_PEER:
        fx->stats->peer_reads++;
        fx->stats->peer_bytes_read += c->len;
        break;
    }
}

static void count_lookup(fetcher *fx, int found, backend_kind k)
{
    if (found && k == BACKEND_NVME)
        fx->stats->hits_nvme++;
    else
        fx->stats->misses++;
}

static void fetch_done(wq_job *j)
{
    pending *p = (pending *)j;
    fetcher *fx = p->fx;
    int demand = 0, found;
    backend_kind kind = BACKEND_SOURCE;
    waiter *wt;

    sched_finished(p->sc, &p->task);
    gr__htab_remove(&fx->pending, &p->hn);
    fx->inflight--;
    if (j->cancelled) {
        p->from = -1;
        p->st.err = -ECANCELED;
        snprintf(p->st.msg, sizeof(p->st.msg), "the daemon is shutting down");
    }
    for (unsigned i = 0; i < fx->nchain; i++)
        if ((p->corrupt & (1u << i)) && fx->chain[i].ops->kind == BACKEND_NVME)
            fx->stats->nvme_checksum_errors++;
    found = p->from >= 0 || p->from == FROM_COPY;
    if (p->from == FROM_COPY) {
        fx->stats->dram_rehomed++;
    } else if (found) {
        kind = fx->chain[p->from].ops->kind;
        count_fetch(fx, kind, p->c);
    } else if (!j->cancelled) {
        fx->stats->source_errors++;
        log_debug("fetch failed: %s", p->st.msg);
    }
    for (wt = p->waiters; wt; wt = wt->next)
        demand |= wt->demand;
    if (p->from == FROM_COPY)
        p->c->admitted = 1;     /* it was hinted: someone said it will be read */
    if (found) {
        if (p->born != SCHED_DEMAND) {
            /* Fetched ahead: marked until it is read, and kept until then
             * even if the policy refused it (in the spill, dram_put; a
             * hinted one is held as well).  Only a warmup, an operator's
             * order to cache it, overrides the policy; read-ahead and hints
             * used to as well, and each refused chunk they fetched then
             * stayed in the policy beyond its capacity, in the arena's
             * reserve for refused chunks, until no refused chunk found a
             * block there and all of them went to the heap and 128 KiB
             * copies (epoch's warm passes at 0.3-0.6x lru's). */
            if (p->born == SCHED_WARMUP)
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
        /* A waiter that joined this fetch through a file of its own gets
         * its own try when this one failed: what one client's descriptor
         * did (O_DIRECT set on it, its directory renamed) fails no one
         * else's read. */
        if (!found && !j->cancelled && p->from != FROM_COPY && wt->f != p->f &&
            !(wt->flags & FJ_RETRY)) {
            fetch_join(fx, wt->f, p->idx, p->key, wt->cls, wt->owner, NULL,
                       wt->flags | FJ_RETRY, wt->cb, wt->arg);
            srcfile_unref(&wt->f);
            free(wt);
            wt = next;
            continue;
        }
        if (wt->demand && p->from == FROM_COPY)
            fx->stats->hits_dram++;
        else if (wt->demand)
            count_lookup(fx, found, kind);
        if (!found)
            wt->cb(wt->arg, NULL, p->st.err, p->st.msg);
        else
            wt->cb(wt->arg, p->c, 0, NULL);
        srcfile_unref(&wt->f);
        free(wt);
        wt = next;
    }
    if (found && p->from >= 0)
        writeback_start(fx, p->c, (unsigned)p->from);
    chunk_unref(&p->copy_from);
    chunk_unref(&p->c);
    srcfile_unref(&p->f);
    free(p);
}

/* gr__htab_walk: the arena bytes of the fetches in flight. */
static int sum_inflight(void *arg, gr__hnode *n)
{
    pending *p = gr__container_of(n, pending, hn);

    if (p->c->ar)
        *(uint64_t *)arg += p->c->cap;
    return 0;
}

/* Debug: where the arena's blocks were when chunk c got none (a profile of
 * heap fallbacks).  Blocks outside the tier and not being fetched are held
 * by leases, replies being sent or write-behind jobs. */
static void log_heap_fallback(fetcher *fx, const chunk *c)
{
    dram_stats ds;
    uint64_t fetching = 0, kept, outside, unread, busy;

    dram_get_stats(fx->dram, &ds);
    dram_spill_profile(fx->dram, &unread, &busy);
    gr__htab_walk(&fx->pending, sum_inflight, &fetching);
    kept = ds.cached_bytes - ds.overflow_bytes;     /* arena chunks in the tier */
    outside = ds.arena_used_bytes > kept ? ds.arena_used_bytes - kept : 0;
    log_debug("heap fallback (%s, %u bytes): arena %llu of %llu KiB used: policy %llu (of its "
              "%llu), spill %llu (read ahead, unread %llu; leased or being sent %llu), fetching "
              "%llu, out of the tier but leased or being sent %llu; heap overflow %llu KiB",
              c->admitted ? "admitted" : "refused", c->cap,
              (unsigned long long)ds.arena_used_bytes >> 10,
              (unsigned long long)ds.arena_bytes >> 10,
              (unsigned long long)ds.policy_bytes >> 10,
              (unsigned long long)ds.policy_capacity >> 10,
              (unsigned long long)ds.spill_bytes >> 10, (unsigned long long)unread >> 10,
              (unsigned long long)busy >> 10, (unsigned long long)fetching >> 10,
              (unsigned long long)(outside > fetching ? outside - fetching : 0) >> 10,
              (unsigned long long)ds.overflow_bytes >> 10);
}

/* Add a waiter to the fetch of key, starting one for class cls if none is
 * in flight.  cb runs later, or at once with -ENOMEM. */
static void fetch_join(fetcher *fx, srcfile *f, uint64_t idx, const uint8_t *key,
                       sched_class cls, int64_t owner, chunk *copy_from, unsigned flags,
                       fetch_cb cb, void *arg)
{
    uint64_t h = key_hash(key);
    waiter *wt = NULL;
    gr__hnode *n;
    pending *p;

    if (cb && !(wt = calloc(1, sizeof(*wt)))) {
        cb(arg, NULL, -ENOMEM, "out of memory");
        return;
    }
    if (wt) {
        wt->cb = cb;
        wt->arg = arg;
        wt->demand = cls == SCHED_DEMAND && !(flags & FJ_FOR_PEER);
        wt->f = srcfile_ref(f);
        wt->cls = cls;
        wt->owner = owner;
        wt->flags = flags;
    }
    n = gr__htab_find(&fx->pending, h, pending_eq, key);
    if (n) {
        p = gr__container_of(n, pending, hn);
        if (cls == SCHED_DEMAND) {
            if (!(flags & FJ_FOR_PEER))
                fx->stats->fetch_joins++;
            sched_promote(p->sc, &p->task);
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
        if (wt)
            srcfile_unref(&wt->f);
        free(wt);
        if (cb)
            cb(arg, NULL, -ENOMEM, "out of memory");
        return;
    }
    if (!p->c->ar && log_current_level >= LOG_DEBUG)
        log_heap_fallback(fx, p->c);
    p->task.job.run = fetch_run;
    p->task.job.done = fetch_done;
    p->fx = fx;
    p->born = cls;
    memcpy(p->key, key, CHUNK_KEY_LEN);
    p->f = srcfile_ref(f);
    p->idx = idx;
    p->copy_from = copy_from ? chunk_ref(copy_from) : NULL;
    p->local_only = (flags & FJ_FOR_PEER) != 0;
    p->sc = p->local_only && fx->peer_sc ? fx->peer_sc : fx->sc;
    p->waiters = wt;
    p->wtail = wt ? &wt->next : &p->waiters;
    gr__htab_insert(&fx->pending, &p->hn, h);
    fx->inflight++;
    if (cls != SCHED_DEMAND)
        fx->stats->prefetch_issued++;
    sched_submit(p->sc, &p->task, cls);
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
    if (c && owner >= 0 && c->ar && arena_segment_owner(c->ar, c->blk.seg) == ARENA_QUARANTINE) {
        /* Fetched for a hint before its user proved access: this reader has
         * (it holds a handle), so the chunk moves into its user's memory, by
         * a copy on an I/O thread, single-flight like a fetch. */
        if (c->prefetched) {
            c->prefetched = 0;
            fx->stats->prefetch_used++;
        }
        fetch_join(fx, f, idx, key, SCHED_DEMAND, owner, c, 0, cb, arg);
        chunk_unref(&c);
        return;
    }
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
    fetch_join(fx, f, idx, key, SCHED_DEMAND, owner, NULL, 0, cb, arg);
}

void fetcher_prefetch(fetcher *fx, srcfile *f, uint64_t idx, sched_class cls, int64_t owner,
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
    fetch_join(fx, f, idx, key, cls, owner, NULL, 0, cb, arg);
}

void fetcher_get_for_peer(fetcher *fx, srcfile *f, uint64_t idx, fetch_cb cb, void *arg)
{
    uint8_t key[CHUNK_KEY_LEN];
    chunk *c;

    chunk_key(key, f->id, idx);
    c = dram_get(fx->dram, key);
    if (c) {
        cb(arg, c, 0, NULL);
        chunk_unref(&c);
        return;
    }
    fetch_join(fx, f, idx, key, SCHED_DEMAND, ARENA_QUARANTINE, NULL, FJ_FOR_PEER, cb, arg);
}
