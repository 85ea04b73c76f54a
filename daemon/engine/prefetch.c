/*
 * prefetch.c - see prefetch.h.
 *
 * A hint list has two parts.  Ranges (what HINT messages named, in order)
 * live in a queue addressed by sequence number: range seq is at
 * rg[seq - rbase]; they are resolved in batches on I/O threads, a few dozen
 * ahead, and the head range is cut into entries (one per chunk) only while
 * fewer than EXPAND_AHEAD entries wait unfetched.  Entries live in an array
 * addressed by absolute position: entry pos is at ents[pos - base];
 * [cursor, ahead) is the part the list has started on; entries before
 * cursor are all done and get compacted away.  Every entry being fetched or
 * held has a node in the prefetcher's key map, which is how a demand lookup
 * (the fetcher's consume hook) finds the entries it consumes.
 *
 * Accounting: each user has a uacct with the chunks its lists name (a
 * range's estimate until it is resolved, then its exact count, then one per
 * entry until the entry is done) and the bytes its ranges hold; the HINT
 * limits are checked against them.
 *
 * A list is refcounted: its connection, each fetch in flight and each
 * resolution batch hold a reference, so a client that leaves mid-fetch
 * frees nothing that a completion still points at.  A CLEAR bumps the
 * list's generation: batches of an older one are void when they return.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "clock.h"
#include "htab.h"
#include "log.h"
#include "prefetch.h"

#define RA_MAX_CHUNKS    256             /* chunks one read may start ahead */
#define RA_MIN_CAP       (256u << 10)    /* the adaptive cap never drops below */
#define RA_ADAPT_EVERY   64              /* read-ahead chunks between adaptations */
#define SKIP_MIN_SLACK   64              /* entries a job may read out of order */
#define OWN_MIN_SLACK    2               /* the same for the daemon's own lists, in open order */
#define COMPACT_MIN      4096            /* done entries before compacting */
#define RESOLVE_BATCH    64              /* ranges one resolution job takes */
#define RESOLVE_AHEAD    128             /* ranges looked at for resolving, from the head */
#define EXPAND_AHEAD     1024            /* entries waiting unfetched before we stop cutting */
#define RANGE_BYTES(len) (sizeof(hint_range) + (len) + 1)

enum { HE_WAITING, HE_FETCHING, HE_HELD, HE_DONE };

typedef struct hint_ent {
    srcfile *f;                 /* reference, until done */
    uint64_t idx;
    chunk *held;                /* HE_HELD: a reference and a dram_hold */
    int64_t owner;              /* whose segments its chunk goes to */
    uint32_t len;               /* the chunk's bytes */
    uint8_t state;
} hint_ent;

typedef struct keynode {
    gr__hnode hn;
    uint8_t key[CHUNK_KEY_LEN];
    hint_list *l;
    uint64_t pos;
} keynode;

enum { RG_NEW, RG_RESOLVING, RG_READY };

typedef struct hint_range {
    char *norm;                 /* owned */
    int root;
    uint64_t off, len;          /* len 0: to the end of the file */
    uint32_t bytes;             /* accounted to the user */
    uint64_t chunks;            /* accounted to the user and not yet cut into entries */
    srcfile *f;                 /* RG_READY without error: a reference */
    int64_t owner;              /* RG_READY: the user's uid, or quarantine */
    uint64_t next, last;        /* RG_READY: chunks next..last still to cut (none if next > last) */
    uint8_t state;
} hint_range;

/* A user's share of the hint limits. */
typedef struct uacct {
    gr__hnode hn;
    uid_t uid;
    uint64_t chunks;            /* named by its lists, not yet done */
    uint64_t bytes;             /* of its ranges */
    unsigned lists;
    unsigned own_lists;         /* of those, the daemon's own (hint_list_new_own) */
} uacct;

struct hint_list {
    prefetcher *p;
    access_cred cred;
    uacct *acct;
    unsigned refs;
    int dead;
    int resolving;              /* a batch is in flight */
    int pumping, repump;        /* in pump(); pump asked for again meanwhile */
    int full;                   /* a range failed the chunk limit: E2BIG until it drains */
    int own;                    /* the daemon's own list (dirahead.h), not a client's */
    uint64_t gen;               /* bumped by CLEAR */
    /* Entries. */
    hint_ent *ents;
    uint64_t base, n, cap;      /* ents[0..n) are positions base.. */
    uint64_t cursor, ahead;
    uint64_t window_bytes;      /* fetching or held */
    uint64_t pending;           /* entries not done */
    /* Ranges: seqs [rbase, rbase + rn) at rg[0..rn). */
    hint_range *rg;
    uint64_t rbase, rn, rcap;
    uint64_t rchunks;           /* the chunks of the ranges (this list's part of acct) */
    /* For the status. */
    uint64_t ranges, errors, skipped, accepted;
    char last_error[256];
};

struct prefetcher {
    fetcher *fx;
    dram *d;
    source *src;
    judge *jg;
    proofs *pr;
    workers *w;
    gr_stats *stats;
    uint64_t ra_max, ra_cap;    /* configured cap, and the adaptive one */
    uint64_t ra_limit;          /* an eighth of the DRAM tier: no window beyond */
    uint64_t ra_mark, used_mark, wasted_mark;
    prefetch_limits lim;
    uint64_t window_total;      /* window_bytes over all lists */
    uint64_t chunks_total;      /* chunks named over all users */
    uint64_t bytes_total;       /* range bytes over all users */
    gr__htab keys;              /* keynode by chunk key */
    gr__htab accts;             /* uacct by uid */
};

static void consume_hook(void *arg, const uint8_t key[CHUNK_KEY_LEN]);

int prefetcher_new(fetcher *fx, dram *d, source *src, judge *jg, proofs *pr, workers *w,
                   gr_stats *stats, prefetcher **out)
{
    prefetcher *p = calloc(1, sizeof(*p));
    dram_stats ds;

    if (!p || gr__htab_init(&p->keys, 4096) < 0 || gr__htab_init(&p->accts, 16) < 0) {
        if (p)
            gr__htab_fini(&p->keys);
        free(p);
        return -ENOMEM;
    }
    p->fx = fx;
    p->d = d;
    p->src = src;
    p->jg = jg;
    p->pr = pr;
    p->w = w;
    p->stats = stats;
    p->ra_max = p->ra_cap = 64u << 20;
    dram_get_stats(d, &ds);
    p->ra_limit = ds.capacity_bytes / 8;
    p->lim.readahead_max = p->ra_max;
    p->lim.hint_window = 1ull << 30;
    p->lim.hint_max_entries = 1u << 22;
    p->lim.hint_memory = 64u << 20;
    p->lim.hint_memory_total = 256u << 20;
    fetcher_set_consume_hook(fx, consume_hook, p);
    *out = p;
    return 0;
}

static int free_node(void *arg, gr__hnode *n)
{
    (void)arg;
    free(gr__container_of(n, keynode, hn));
    return 0;
}

static int free_acct(void *arg, gr__hnode *n)
{
    (void)arg;
    free(gr__container_of(n, uacct, hn));
    return 0;
}

void prefetcher_free(prefetcher **pp)
{
    prefetcher *p = *pp;

    if (!p)
        return;
    fetcher_set_consume_hook(p->fx, NULL, NULL);
    gr__htab_walk(&p->keys, free_node, NULL);
    gr__htab_fini(&p->keys);
    gr__htab_walk(&p->accts, free_acct, NULL);
    gr__htab_fini(&p->accts);
    free(p);
    *pp = NULL;
}

void prefetcher_configure(prefetcher *p, const prefetch_limits *lim)
{
    p->lim = *lim;
    p->ra_max = lim->readahead_max;
    if (p->ra_cap > p->ra_max || p->ra_cap == 0)
        p->ra_cap = p->ra_max;
}

void prefetcher_snapshot(const prefetcher *p, gr_stats *out)
{
    out->readahead_window_max = p->ra_cap;
    out->hint_entries = p->chunks_total;
    out->hint_window_bytes = p->window_total;
    out->hint_memory_bytes = p->bytes_total;
    out->access_proofs = proofs_count(p->pr);
}

/* ---- read-ahead ---- */

/* Halve the cap while read-ahead is wasted, grow it back while it pays. */
static void ra_adapt(prefetcher *p)
{
    dram_stats ds;
    uint64_t used, wasted;

    if (p->stats->readahead_chunks - p->ra_mark < RA_ADAPT_EVERY)
        return;
    dram_get_stats(p->d, &ds);
    used = p->stats->prefetch_used - p->used_mark;
    wasted = ds.prefetch_wasted - p->wasted_mark;
    if (wasted * 4 > used + wasted) {
        p->ra_cap /= 2;
        if (p->ra_cap < RA_MIN_CAP)
            p->ra_cap = RA_MIN_CAP < p->ra_max ? RA_MIN_CAP : p->ra_max;
    } else if (wasted * 16 < used + wasted && p->ra_cap < p->ra_max) {
        p->ra_cap = p->ra_cap * 2 < p->ra_max ? p->ra_cap * 2 : p->ra_max;
    }
    p->ra_mark = p->stats->readahead_chunks;
    p->used_mark = p->stats->prefetch_used;
    p->wasted_mark = ds.prefetch_wasted;
}

void prefetch_readahead(prefetcher *p, ra_state *ra, srcfile *f, uint64_t off, uint64_t len,
                        int64_t owner)
{
    uint64_t cs = f->chunk_size, size = (uint64_t)f->st.st_size, end = off + len;
    uint64_t target, from, first, last;
    int seq;

    if (p->ra_cap == 0 || len == 0)
        return;
    seq = off == ra->next_off || (off < ra->next_off && end > ra->next_off) ||
          (off == 0 && ra->window == 0);
    ra->next_off = end;
    if (!seq) {
        ra->window = 0;
        ra->ra_end = 0;
        return;
    }
    if (ra->window)
        ra->window = ra->window * 2;
    else
        ra->window = 4 * len > 2 * cs ? 4 * len : 2 * cs;
    if (ra->window > p->ra_cap)
        ra->window = p->ra_cap;
    /* A window the tier cannot hold beside the readers' own chunks would
     * evict its own read-ahead before use and read the source twice. */
    if (ra->window > p->ra_limit)
        ra->window = p->ra_limit;
    target = end + ra->window < size ? end + ra->window : size;
    from = ra->ra_end > end ? ra->ra_end : end;
    if (from >= target)
        return;
    first = from / cs;
    last = (target - 1) / cs;
    if (last - first >= RA_MAX_CHUNKS)
        last = first + RA_MAX_CHUNKS - 1;
    for (uint64_t i = first; i <= last; i++) {
        fetcher_prefetch(p->fx, f, i, SCHED_READAHEAD, owner, NULL, NULL);
        p->stats->readahead_chunks++;
    }
    ra->ra_end = (last + 1) * cs < size ? (last + 1) * cs : size;
    ra_adapt(p);
}

/* ---- the key map ---- */

static uint64_t key_hash(const uint8_t *key)
{
    return XXH3_64bits(key, CHUNK_KEY_LEN);
}

static int key_eq(const gr__hnode *n, const void *key)
{
    return memcmp(gr__container_of(n, keynode, hn)->key, key, CHUNK_KEY_LEN) == 0;
}

static int keymap_add(prefetcher *p, const uint8_t *key, hint_list *l, uint64_t pos)
{
    keynode *k = malloc(sizeof(*k));

    if (!k)
        return -ENOMEM;
    memcpy(k->key, key, CHUNK_KEY_LEN);
    k->l = l;
    k->pos = pos;
    gr__htab_insert(&p->keys, &k->hn, key_hash(key));
    return 0;
}

/* The node of (key, l, pos): the first node with the key is not
 * necessarily ours (several lists may hint one chunk), so walk them. */
typedef struct knode_key {
    const uint8_t *key;
    const hint_list *l;
    uint64_t pos;
} knode_key;

static int knode_eq(const gr__hnode *n, const void *arg)
{
    const keynode *k = gr__container_of(n, keynode, hn);
    const knode_key *w = arg;

    return k->l == w->l && k->pos == w->pos && memcmp(k->key, w->key, CHUNK_KEY_LEN) == 0;
}

static void keymap_del(prefetcher *p, const uint8_t *key, const hint_list *l, uint64_t pos)
{
    knode_key w = { key, l, pos };
    gr__hnode *n = gr__htab_find(&p->keys, key_hash(key), knode_eq, &w);

    if (n) {
        gr__htab_remove(&p->keys, n);
        free(gr__container_of(n, keynode, hn));
    }
}

/* ---- accounting ---- */

static int acct_eq(const gr__hnode *n, const void *key)
{
    return gr__container_of(n, uacct, hn)->uid == *(const uid_t *)key;
}

static uacct *acct_get(prefetcher *p, uid_t uid)
{
    uint64_t h = XXH3_64bits(&uid, sizeof(uid));
    gr__hnode *n = gr__htab_find(&p->accts, h, acct_eq, &uid);
    uacct *a;

    if (n)
        return gr__container_of(n, uacct, hn);
    a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->uid = uid;
    gr__htab_insert(&p->accts, &a->hn, h);
    return a;
}

static void acct_put(prefetcher *p, uacct *a)
{
    if (a->lists || a->chunks || a->bytes)
        return;
    gr__htab_remove(&p->accts, &a->hn);
    free(a);
}

static void charge_chunks(hint_list *l, int64_t d)
{
    l->acct->chunks = (uint64_t)((int64_t)l->acct->chunks + d);
    l->p->chunks_total = (uint64_t)((int64_t)l->p->chunks_total + d);
}

static void charge_bytes(hint_list *l, int64_t d)
{
    l->acct->bytes = (uint64_t)((int64_t)l->acct->bytes + d);
    l->p->bytes_total = (uint64_t)((int64_t)l->p->bytes_total + d);
}

static void note_error(hint_list *l, const char *norm, const char *why)
{
    l->errors++;
    l->p->stats->hint_errors++;
    snprintf(l->last_error, sizeof(l->last_error), "%.120s: %.120s", norm ? norm : "?", why);
    log_debug("hint: %s", l->last_error);
}

/* ---- entries ---- */

static hint_ent *ent(hint_list *l, uint64_t pos)
{
    return &l->ents[pos - l->base];
}

static void ent_key(const hint_ent *e, uint8_t key[CHUNK_KEY_LEN])
{
    chunk_key(key, e->f->id, e->idx);
}

/* Entry pos is done: consumed, skipped, failed or dropped.  keyed: its node
 * is still in the key map (the caller has not unlinked it). */
static void ent_finish(hint_list *l, uint64_t pos, int keyed)
{
    prefetcher *p = l->p;
    hint_ent *e = ent(l, pos);

    if (e->state == HE_DONE)
        return;
    if (e->state == HE_FETCHING || e->state == HE_HELD) {
        if (keyed) {
            uint8_t key[CHUNK_KEY_LEN];
            ent_key(e, key);
            keymap_del(p, key, l, pos);
        }
        l->window_bytes -= e->len;
        p->window_total -= e->len;
    }
    if (e->held) {
        dram_unhold(p->d, e->held);
        chunk_unref(&e->held);
    }
    srcfile_unref(&e->f);
    e->state = HE_DONE;
    l->pending--;
    charge_chunks(l, -1);
}

static void list_unref(hint_list *l)
{
    if (--l->refs)
        return;
    free(l->ents);
    free(l->rg);
    free(l);
}

/* Move the cursor over done entries; compact when many are behind it. */
static void advance(hint_list *l)
{
    uint64_t k;

    while (l->cursor < l->ahead && ent(l, l->cursor)->state == HE_DONE)
        l->cursor++;
    k = l->cursor - l->base;
    if (k >= COMPACT_MIN && k * 2 >= l->n) {
        memmove(l->ents, l->ents + k, (size_t)(l->n - k) * sizeof(*l->ents));
        l->n -= k;
        l->base = l->cursor;
    }
}

static int ents_reserve(hint_list *l, uint64_t more)
{
    uint64_t cap = l->cap ? l->cap : 256;
    hint_ent *e;

    if (l->n + more <= l->cap)
        return 0;
    while (cap < l->n + more)
        cap *= 2;
    e = realloc(l->ents, (size_t)cap * sizeof(*e));
    if (!e)
        return -ENOMEM;
    l->ents = e;
    l->cap = cap;
    return 0;
}

/* ---- ranges ---- */

static hint_range *range(hint_list *l, uint64_t seq)
{
    return &l->rg[seq - l->rbase];
}

/* Free the head range and give its accounting back. */
static void range_pop(hint_list *l)
{
    hint_range *r = &l->rg[0];

    charge_bytes(l, -(int64_t)r->bytes);
    charge_chunks(l, -(int64_t)r->chunks);
    l->rchunks -= r->chunks;
    free(r->norm);
    srcfile_unref(&r->f);
    memmove(l->rg, l->rg + 1, (size_t)(l->rn - 1) * sizeof(*l->rg));
    l->rn--;
    l->rbase++;
}

/* Cut the head ranges into entries while few entries wait unfetched.
 * Returns how many entries it added (0: nothing to cut now). */
static uint64_t expand(hint_list *l)
{
    uint64_t added = 0;

    while (l->rn && l->base + l->n - l->ahead < EXPAND_AHEAD) {
        hint_range *r = &l->rg[0];
        hint_ent *e;

        if (r->state != RG_READY)
            break;              /* the head is being resolved: wait for it */
        if (r->next > r->last) {
            range_pop(l);
            continue;
        }
        if (ents_reserve(l, 1) < 0)
            break;
        e = &l->ents[l->n++];
        memset(e, 0, sizeof(*e));
        e->f = srcfile_ref(r->f);
        e->idx = r->next++;
        e->len = (uint32_t)srcfile_chunk_len(r->f, e->idx);
        e->owner = r->owner;
        e->state = HE_WAITING;
        /* The chunk moves from the range to its entry: the user's count is
         * unchanged. */
        r->chunks--;
        l->rchunks--;
        l->pending++;
        l->p->stats->hint_entries_added++;
        added++;
    }
    return added;
}

static void start_resolve(hint_list *l);

/* Bytes all lists together may have fetched ahead: half the DRAM tier. */
static uint64_t global_limit(const prefetcher *p)
{
    dram_stats ds;

    dram_get_stats(p->d, &ds);
    return ds.capacity_bytes / 2;
}

typedef struct hint_req {
    hint_list *l;
    uint64_t pos;
} hint_req;

static void pump(hint_list *l);

/* fetch_cb of a hinted chunk. */
static void hint_fetched(void *arg, chunk *c, int err, const char *errmsg)
{
    hint_req *r = arg;
    hint_list *l = r->l;
    uint64_t pos = r->pos;

    free(r);
    if (!l->dead && pos >= l->base && pos < l->base + l->n &&
        ent(l, pos)->state == HE_FETCHING) {
        hint_ent *e = ent(l, pos);
        if (err < 0 || !c) {
            note_error(l, e->f->path, errmsg ? errmsg : strerror(-err));
            ent_finish(l, pos, 1);
        } else {
            e->held = chunk_ref(c);
            dram_hold(l->p->d, c);
            e->state = HE_HELD;
        }
    }
    if (!l->dead) {
        advance(l);
        pump(l);
    }
    list_unref(l);
}

/* Start fetching entries until the window is full, cutting ranges into
 * entries and resolving ranges as the list moves on. */
static void pump(hint_list *l)
{
    prefetcher *p = l->p;
    uint64_t limit, global;

    if (l->dead)
        return;
    if (l->pumping) {
        /* Called from inside: a resolution that finished at once (every
         * range in the attribute cache).  The outer pump goes round again. */
        l->repump = 1;
        return;
    }
    l->pumping = 1;
again:
    l->repump = 0;
    global = global_limit(p);
    limit = p->lim.hint_window < global ? p->lim.hint_window : global;
    while (l->window_bytes < limit && p->window_total < global) {
        uint8_t key[CHUNK_KEY_LEN];
        uint64_t pos;
        hint_ent *e;
        hint_req *r;

        if (l->ahead == l->base + l->n && !expand(l))
            break;
        pos = l->ahead;
        e = ent(l, pos);
        l->ahead++;
        if (e->state != HE_WAITING)
            continue;
        r = malloc(sizeof(*r));
        ent_key(e, key);
        if (!r || keymap_add(p, key, l, pos) < 0) {
            free(r);
            l->ahead--;
            break;
        }
        e->state = HE_FETCHING;
        l->window_bytes += e->len;
        p->window_total += e->len;
        r->l = l;
        r->pos = pos;
        l->refs++;
        fetcher_prefetch(p->fx, e->f, e->idx, SCHED_HINT, e->owner, hint_fetched, r);
    }
    expand(l);
    start_resolve(l);
    if (l->repump && !l->dead)
        goto again;
    l->pumping = 0;
}

/* ---- resolution (I/O threads) ---- */

typedef struct ritem {
    uint64_t seq;
    char *norm;                 /* a copy: the range may go meanwhile */
    int root;
    srcfile *cached;            /* the attribute cache had it (root, trust_all: no job needed) */
    struct stat st;
    int rc;
    char err[200];
} ritem;

typedef struct rbatch {
    wq_job job;                 /* first */
    hint_list *l;
    uint64_t gen;
    int judge;                  /* judge access (not root, not trust_all) */
    size_t n;
    ritem items[];
} rbatch;

static void rbatch_run(wq_job *j)
{
    rbatch *b = (rbatch *)j;
    prefetcher *p = b->l->p;

    for (size_t i = 0; i < b->n; i++) {
        ritem *it = &b->items[i];
        struct stat jst;

        if (it->cached)
            continue;
        /* Judged before the file is even opened: a refused hint costs
         * nothing and says nothing about what lies below a directory its
         * user may not search. */
        if (b->judge) {
            it->rc = judge_read(p->jg, it->norm, &b->l->cred, &jst, it->err, sizeof(it->err));
            if (it->rc < 0)
                continue;
        }
        it->rc = source_stat(p->src, it->norm, it->root, &it->st, it->err, sizeof(it->err));
        if (it->rc == 0 && b->judge &&
            (jst.st_dev != it->st.st_dev || jst.st_ino != it->st.st_ino)) {
            snprintf(it->err, sizeof(it->err), "changed while being judged");
            it->rc = -ESTALE;
        }
    }
}

/* A resolved range: its chunks, exactly, against the user's limit. */
static void range_ready(hint_list *l, hint_range *r, srcfile *f)
{
    prefetcher *p = l->p;
    uint64_t size = (uint64_t)f->st.st_size, end, first, last, n;

    r->state = RG_READY;
    r->next = 1;
    r->last = 0;                /* nothing to cut, unless below */
    if (size == 0 || (r->off >= size)) {
        if (size && r->off >= size)
            note_error(l, r->norm, "the range starts past the end of the file");
        goto drop_estimate;
    }
    end = r->len && r->len < size - r->off ? r->off + r->len : size;
    first = r->off / f->chunk_size;
    last = (end - 1) / f->chunk_size;
    n = last - first + 1;
    if (l->acct->chunks - r->chunks + n > p->lim.hint_max_entries) {
        note_error(l, r->norm, "over [prefetch] hint_max_entries (the user's hinted chunks)");
        l->full = 1;
        goto drop_estimate;
    }
    charge_chunks(l, (int64_t)n - (int64_t)r->chunks);
    l->rchunks = l->rchunks - r->chunks + n;
    r->chunks = n;
    r->f = srcfile_ref(f);
    r->next = first;
    r->last = last;
    /* Into the user's own shared memory only once it has proven it may read
     * the file (or needs no proof, or the judge that judged this range is
     * the final word); else quarantine until a proven read. */
    r->owner = l->cred.uid == 0 || p->lim.trust_all || p->lim.judge_final ||
                       proofs_has(p->pr, l->cred.uid, f->id)
                   ? (int64_t)l->cred.uid
                   : ARENA_QUARANTINE;
    return;
drop_estimate:
    charge_chunks(l, -(int64_t)r->chunks);
    l->rchunks -= r->chunks;
    r->chunks = 0;
}

static void rbatch_done(wq_job *j)
{
    rbatch *b = (rbatch *)j;
    hint_list *l = b->l;
    double now = gr__now_s();

    if (!l->dead && b->gen == l->gen)
        l->resolving = 0;
    for (size_t i = 0; i < b->n; i++) {
        ritem *it = &b->items[i];
        srcfile *f = it->cached;

        if (l->dead || b->gen != l->gen || it->seq < l->rbase) {
            free(it->norm);
            srcfile_unref(&it->cached);
            continue;
        }
        if (!f && it->rc == 0 && j->cancelled)
            it->rc = -ECANCELED;
        if (!f && it->rc == 0) {
            f = source_install(l->p->src, it->norm, it->root, &it->st, now);
            it->norm = NULL;
            if (!f)
                it->rc = -ENOMEM;
        }
        if (it->rc < 0) {
            hint_range *r = range(l, it->seq);
            note_error(l, r->norm, it->err[0] ? it->err : strerror(-it->rc));
            r->state = RG_READY;
            r->next = 1;
            r->last = 0;
            charge_chunks(l, -(int64_t)r->chunks);
            l->rchunks -= r->chunks;
            r->chunks = 0;
        } else {
            range_ready(l, range(l, it->seq), f);
        }
        srcfile_unref(&f);
        free(it->norm);
    }
    if (!l->dead)
        pump(l);
    list_unref(l);
    free(b);
}

/* Resolve the next new ranges near the head, in one batch: by the attribute
 * cache where no judging is needed, else on an I/O thread. */
static void start_resolve(hint_list *l)
{
    prefetcher *p = l->p;
    uint64_t from = 0, to;
    size_t n = 0;
    int must_judge = l->cred.uid != 0 && !p->lim.trust_all, need_job = 0;
    double now = gr__now_s();
    rbatch *b;

    if (l->resolving || l->dead)
        return;
    for (from = l->rbase; from < l->rbase + l->rn && from < l->rbase + RESOLVE_AHEAD; from++)
        if (range(l, from)->state == RG_NEW)
            break;
    if (from >= l->rbase + l->rn || from >= l->rbase + RESOLVE_AHEAD)
        return;
    for (to = from; to < l->rbase + l->rn && to - from < RESOLVE_BATCH; to++)
        if (range(l, to)->state != RG_NEW)
            break;
    b = calloc(1, sizeof(*b) + (size_t)(to - from) * sizeof(ritem));
    if (!b)
        return;                 /* tried again at the next pump */
    b->job.run = rbatch_run;
    b->job.done = rbatch_done;
    b->l = l;
    b->gen = l->gen;
    b->judge = must_judge;
    for (uint64_t s = from; s < to; s++) {
        hint_range *r = range(l, s);
        ritem *it = &b->items[n++];
        it->seq = s;
        it->root = r->root;
        it->norm = strdup(r->norm);
        if (!it->norm) {
            it->rc = -ENOMEM;
            continue;
        }
        if (!must_judge)
            it->cached = source_lookup(p->src, r->norm, now);
        need_job |= !it->cached;
        r->state = RG_RESOLVING;
    }
    b->n = n;
    l->refs++;
    l->resolving = 1;
    if (need_job)
        workers_submit(p->w, &b->job, WQ_BACKGROUND);
    else
        rbatch_done(&b->job);
}

/* ---- consumption ---- */

/* The fetcher's consume hook: a demand lookup of key consumes the entries
 * fetched for it, and drops those its lists have clearly passed. */
static void consume_hook(void *arg, const uint8_t key[CHUNK_KEY_LEN])
{
    prefetcher *p = arg;
    uint64_t h = key_hash(key);
    gr__hnode *n;

    while ((n = gr__htab_find(&p->keys, h, key_eq, key))) {
        keynode *k = gr__container_of(n, keynode, hn);
        hint_list *l = k->l;
        uint64_t pos = k->pos, slack;

        gr__htab_remove(&p->keys, n);
        free(k);
        ent_finish(l, pos, 0);
        /* Readers reorder a little (DataLoader workers): entries up to half
         * the started span behind this one may still come. */
        slack = (l->ahead - l->cursor) / 2;
        if (l->own)
            slack = OWN_MIN_SLACK;
        else if (slack < SKIP_MIN_SLACK)
            slack = SKIP_MIN_SLACK;
        while (l->cursor + slack < pos) {
            if (ent(l, l->cursor)->state != HE_DONE) {
                p->stats->hint_skipped++;
                l->skipped++;
                ent_finish(l, l->cursor, 1);
            }
            l->cursor++;
        }
        advance(l);
        pump(l);
    }
}

/* ---- lists ---- */

hint_list *hint_list_new(prefetcher *p, const access_cred *cred)
{
    hint_list *l = calloc(1, sizeof(*l));

    if (!l)
        return NULL;
    l->acct = acct_get(p, cred->uid);
    if (!l->acct) {
        free(l);
        return NULL;
    }
    l->acct->lists++;
    l->p = p;
    l->cred = *cred;
    l->refs = 1;
    return l;
}

/* Finish every entry (holds released) and drop every range. */
static void list_clear(hint_list *l)
{
    for (uint64_t pos = l->base; pos < l->base + l->n; pos++)
        ent_finish(l, pos, 1);
    l->base += l->n;
    l->n = 0;
    l->cursor = l->ahead = l->base;
    while (l->rn)
        range_pop(l);
    l->gen++;
    l->resolving = 0;           /* a batch in flight is void now */
    l->full = 0;
}

hint_list *hint_list_new_own(prefetcher *p, const access_cred *cred)
{
    hint_list *l = hint_list_new(p, cred);

    if (l) {
        l->own = 1;
        l->acct->own_lists++;
    }
    return l;
}

int prefetch_user_hints(prefetcher *p, uid_t uid)
{
    gr__hnode *n = gr__htab_find(&p->accts, XXH3_64bits(&uid, sizeof(uid)), acct_eq, &uid);
    const uacct *a = n ? gr__container_of(n, uacct, hn) : NULL;

    return a && a->lists > a->own_lists;
}

void hint_list_free(hint_list **lp)
{
    hint_list *l = *lp;
    prefetcher *p;

    if (!l)
        return;
    p = l->p;
    list_clear(l);
    l->dead = 1;
    l->acct->lists--;
    l->acct->own_lists -= l->own;
    acct_put(p, l->acct);
    l->acct = NULL;
    /* Batches being resolved and fetches in flight hold references: their
     * completions see dead and free what is theirs. */
    *lp = NULL;
    list_unref(l);
}

void hint_list_status(const hint_list *l, hint_status *st)
{
    st->accepted = l->accepted;
    st->ranges = l->ranges;
    st->pending = l->pending + l->rchunks;
    st->errors = l->errors;
    st->skipped = l->skipped;
    st->last_error = l->last_error;
}

/* Room for more ranges in l->rg: 0 or -ENOMEM. */
static int ranges_reserve(hint_list *l, uint64_t more)
{
    uint64_t cap = l->rcap ? l->rcap : 64;
    hint_range *rg;

    if (l->rn + more <= l->rcap)
        return 0;
    while (cap < l->rn + more)
        cap *= 2;
    rg = realloc(l->rg, (size_t)cap * sizeof(*rg));
    if (!rg)
        return -ENOMEM;
    l->rg = rg;
    l->rcap = cap;
    return 0;
}

/* Append the range [off, off + len) of norm (taken) beneath root; room
 * was reserved. */
static void range_push(hint_list *l, char *norm, int root, uint64_t off, uint64_t len)
{
    hint_range *r = &l->rg[l->rn];

    memset(r, 0, sizeof(*r));
    r->norm = norm;
    r->root = root;
    r->off = off;
    r->len = len;
    r->bytes = (uint32_t)RANGE_BYTES(strlen(norm));
    r->chunks = 1;          /* until resolved */
    r->state = RG_NEW;
    charge_bytes(l, r->bytes);
    charge_chunks(l, 1);
    l->rchunks++;
    l->rn++;
    l->ranges++;
    l->accepted++;
}

int hint_list_add(hint_list *l, char *norm, int root, uint64_t off, uint64_t len)
{
    prefetcher *p = l->p;
    uint64_t bytes = RANGE_BYTES(strlen(norm));

    if (l->acct->chunks + 1 > p->lim.hint_max_entries || l->acct->bytes + bytes > p->lim.hint_memory ||
        p->bytes_total + bytes > p->lim.hint_memory_total) {
        free(norm);
        return -E2BIG;
    }
    if (ranges_reserve(l, 1) < 0) {
        free(norm);
        return -ENOMEM;
    }
    range_push(l, norm, root, off, len);
    pump(l);
    return 0;
}

void hint_list_clear(hint_list *l)
{
    list_clear(l);
}

int hint_list_append(hint_list *l, const proto_msg *m, hint_status *st)
{
    prefetcher *p = l->p;
    proto_hint_ent he;
    uint64_t est = 0, bytes = 0;
    size_t off = 0;

    if (m->u.hint.flags & PROTO_HINT_CLEAR)
        list_clear(l);
    l->accepted = 0;
    /* The message's cost, before anything is appended: ranges (and their
     * paths), and chunks as far as known (a whole file counts one until it
     * is resolved). */
    while (proto_hint_next(m, &off, &he) == 1) {
        bytes += RANGE_BYTES(he.path_len);
        est += he.len ? he.len / 65536 + 2 : 1;
    }
    if (m->u.hint.count &&
        ((l->full && l->acct->chunks >= p->lim.hint_max_entries) ||
         l->acct->chunks + (est < m->u.hint.count ? est : m->u.hint.count) > p->lim.hint_max_entries ||
         l->acct->bytes + bytes > p->lim.hint_memory ||
         p->bytes_total + bytes > p->lim.hint_memory_total)) {
        hint_list_status(l, st);
        return -E2BIG;
    }
    l->full = 0;
    if (ranges_reserve(l, m->u.hint.count) < 0) {
        hint_list_status(l, st);
        return -ENOMEM;
    }
    off = 0;
    while (proto_hint_next(m, &off, &he) == 1) {
        char err[256];
        char *norm;
        int root;

        if (source_resolve(p->src, he.path, he.path_len, &norm, &root, err, sizeof(err)) < 0) {
            note_error(l, NULL, err);
            continue;
        }
        range_push(l, norm, root, he.off, he.len);
    }
    pump(l);
    hint_list_status(l, st);
    return 0;
}
