/*
 * prefetch.c - see prefetch.h.
 *
 * A hint list is an array of entries (one per chunk) addressed by absolute
 * position: entry pos lives at ents[pos - base].  [cursor, ahead) is the
 * part the list has started on; entries before cursor are all done and get
 * compacted away.  Every entry being fetched or held has a node in the
 * prefetcher's key map, which is how a demand lookup (the fetcher's consume
 * hook) finds the entries it consumes.
 *
 * A list is refcounted: its connection, each fetch in flight and each batch
 * being resolved hold a reference, so a client that leaves mid-fetch frees
 * nothing that a completion still points at.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "clock.h"
#include "log.h"
#include "prefetch.h"

#define KEYMAP_BUCKETS   (1u << 16)
#define RA_MAX_CHUNKS    256             /* chunks one read may start ahead */
#define RA_MIN_CAP       (256u << 10)    /* the adaptive cap never drops below */
#define RA_ADAPT_EVERY   64              /* read-ahead chunks between adaptations */
#define SKIP_MIN_SLACK   64              /* entries a job may read out of order */
#define COMPACT_MIN      4096            /* done entries before compacting */

enum { HE_WAITING, HE_FETCHING, HE_HELD, HE_DONE };

typedef struct hint_ent {
    srcfile *f;                 /* reference, until done */
    uint64_t idx;
    chunk *held;                /* HE_HELD: a reference and a dram_hold */
    uint32_t len;               /* the chunk's bytes */
    uint8_t state;
} hint_ent;

typedef struct keynode keynode;
struct keynode {
    uint8_t key[CHUNK_KEY_LEN];
    hint_list *l;
    uint64_t pos;
    keynode *next;
};

/* One range of a HINT message, while it is resolved. */
typedef struct bitem {
    char *norm;                 /* owned until installed */
    int root;
    uint64_t off, len;
    srcfile *f;                 /* from the attr cache, or installed after the stat */
    struct stat st;
    int rc;                     /* < 0: skipped */
} bitem;

typedef struct hint_batch hint_batch;
struct hint_batch {
    wq_job job;                 /* first */
    hint_list *l;
    bitem *items;
    size_t n;
    int finished;
    hint_batch *next;
};

struct hint_list {
    prefetcher *p;
    uid_t uid;
    gid_t gid;
    unsigned refs;
    int dead;
    int pumping;
    hint_ent *ents;
    uint64_t base, n, cap;      /* ents[0..n) are positions base.. */
    uint64_t cursor, ahead;
    uint64_t window_bytes;      /* fetching or held */
    uint64_t pending;           /* entries not done */
    hint_batch *bhead, *btail;  /* batches in arrival order */
};

struct prefetcher {
    fetcher *fx;
    dram *d;
    source *src;
    workers *w;
    gr_stats *stats;
    uint64_t ra_max, ra_cap;    /* configured cap, and the adaptive one */
    uint64_t ra_limit;          /* an eighth of the DRAM tier: no window beyond */
    uint64_t ra_mark, used_mark, wasted_mark;
    uint64_t hint_window, hint_max;
    uint64_t window_total;      /* window_bytes over all lists */
    uint64_t entries_total;     /* pending over all lists */
    keynode *keys[KEYMAP_BUCKETS];
};

static void consume_hook(void *arg, const uint8_t key[CHUNK_KEY_LEN]);

int prefetcher_new(fetcher *fx, dram *d, source *src, workers *w, gr_stats *stats,
                   prefetcher **out)
{
    prefetcher *p = calloc(1, sizeof(*p));

    if (!p)
        return -ENOMEM;
    p->fx = fx;
    p->d = d;
    p->src = src;
    p->w = w;
    p->stats = stats;
    p->ra_max = p->ra_cap = 64u << 20;
    {
        dram_stats ds;
        dram_get_stats(d, &ds);
        p->ra_limit = ds.capacity_bytes / 8;
    }
    p->hint_window = 1ull << 30;
    p->hint_max = 1u << 22;
    fetcher_set_consume_hook(fx, consume_hook, p);
    *out = p;
    return 0;
}

void prefetcher_free(prefetcher **pp)
{
    prefetcher *p = *pp;

    if (!p)
        return;
    fetcher_set_consume_hook(p->fx, NULL, NULL);
    for (size_t b = 0; b < KEYMAP_BUCKETS; b++)
        while (p->keys[b]) {
            keynode *k = p->keys[b];
            p->keys[b] = k->next;
            free(k);
        }
    free(p);
    *pp = NULL;
}

void prefetcher_configure(prefetcher *p, uint64_t readahead_max, uint64_t hint_window,
                          uint64_t hint_max_entries)
{
    p->ra_max = readahead_max;
    if (p->ra_cap > readahead_max || p->ra_cap == 0)
        p->ra_cap = readahead_max;
    p->hint_window = hint_window;
    p->hint_max = hint_max_entries;
}

void prefetcher_snapshot(const prefetcher *p, gr_stats *out)
{
    out->readahead_window_max = p->ra_cap;
    out->hint_entries = p->entries_total;
    out->hint_window_bytes = p->window_total;
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

static size_t key_bucket(const uint8_t *key)
{
    return (size_t)XXH3_64bits(key, CHUNK_KEY_LEN) & (KEYMAP_BUCKETS - 1);
}

static int keymap_add(prefetcher *p, const uint8_t *key, hint_list *l, uint64_t pos)
{
    keynode *k = malloc(sizeof(*k));
    size_t b = key_bucket(key);

    if (!k)
        return -ENOMEM;
    memcpy(k->key, key, CHUNK_KEY_LEN);
    k->l = l;
    k->pos = pos;
    k->next = p->keys[b];
    p->keys[b] = k;
    return 0;
}

static void keymap_del(prefetcher *p, const uint8_t *key, const hint_list *l, uint64_t pos)
{
    for (keynode **kp = &p->keys[key_bucket(key)]; *kp; kp = &(*kp)->next) {
        keynode *k = *kp;
        if (k->l == l && k->pos == pos && memcmp(k->key, key, CHUNK_KEY_LEN) == 0) {
            *kp = k->next;
            free(k);
            return;
        }
    }
}

/* ---- hint lists ---- */

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
    p->entries_total--;
}

static void list_unref(hint_list *l)
{
    if (--l->refs)
        return;
    free(l->ents);
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
            l->p->stats->hint_errors++;
            log_debug("hint: %s", errmsg ? errmsg : strerror(-err));
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

/* Start fetching entries until the window is full. */
static void pump(hint_list *l)
{
    prefetcher *p = l->p;
    uint64_t limit, global;

    if (l->pumping || l->dead)
        return;
    l->pumping = 1;
    global = global_limit(p);
    limit = p->hint_window < global ? p->hint_window : global;
    while (l->ahead < l->base + l->n && l->window_bytes < limit && p->window_total < global) {
        uint8_t key[CHUNK_KEY_LEN];
        uint64_t pos = l->ahead;
        hint_ent *e = ent(l, pos);
        hint_req *r;

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
        fetcher_prefetch(p->fx, e->f, e->idx, SCHED_HINT, (int64_t)l->uid, hint_fetched, r);
    }
    l->pumping = 0;
}

/* The fetcher's consume hook: a demand lookup of key consumes the entries
 * fetched for it, and drops those its lists have clearly passed. */
static void consume_hook(void *arg, const uint8_t key[CHUNK_KEY_LEN])
{
    prefetcher *p = arg;
    keynode **kp = &p->keys[key_bucket(key)];

    while (*kp) {
        keynode *k = *kp;
        hint_list *l;
        uint64_t pos, slack;

        if (memcmp(k->key, key, CHUNK_KEY_LEN) != 0) {
            kp = &k->next;
            continue;
        }
        *kp = k->next;
        l = k->l;
        pos = k->pos;
        free(k);
        ent_finish(l, pos, 0);
        /* Readers reorder a little (DataLoader workers): entries up to half
         * the started span behind this one may still come. */
        slack = (l->ahead - l->cursor) / 2;
        if (slack < SKIP_MIN_SLACK)
            slack = SKIP_MIN_SLACK;
        while (l->cursor + slack < pos) {
            if (ent(l, l->cursor)->state != HE_DONE) {
                p->stats->hint_skipped++;
                ent_finish(l, l->cursor, 1);
            }
            l->cursor++;
        }
        advance(l);
        pump(l);
        kp = &p->keys[key_bucket(key)];   /* the chain may have changed */
    }
}

hint_list *hint_list_new(prefetcher *p, uid_t uid, gid_t gid)
{
    hint_list *l = calloc(1, sizeof(*l));

    if (!l)
        return NULL;
    l->p = p;
    l->uid = uid;
    l->gid = gid;
    l->refs = 1;
    return l;
}

/* Finish every entry (holds released). */
static void list_clear(hint_list *l)
{
    for (uint64_t pos = l->base; pos < l->base + l->n; pos++)
        ent_finish(l, pos, 1);
    l->base += l->n;
    l->n = 0;
    l->cursor = l->ahead = l->base;
}

static void batch_free(hint_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->items[i].norm);
        srcfile_unref(&b->items[i].f);
    }
    free(b->items);
    free(b);
}

void hint_list_free(hint_list **lp)
{
    hint_list *l = *lp;

    if (!l)
        return;
    list_clear(l);
    l->dead = 1;
    /* Batches still being resolved and fetches in flight hold references:
     * their completions see dead and free what is theirs. */
    *lp = NULL;
    list_unref(l);
}

uint64_t hint_list_pending(const hint_list *l)
{
    return l->pending;
}

/* The caller may read the file, by its mode bits (root may read all).
 * Supplementary groups are not consulted: a miss costs a hint, not data. */
static int may_read(const hint_list *l, const struct stat *st)
{
    if (l->uid == 0)
        return 1;
    if (st->st_uid == l->uid)
        return (st->st_mode & S_IRUSR) != 0;
    if (st->st_gid == l->gid)
        return (st->st_mode & S_IRGRP) != 0;
    return (st->st_mode & S_IROTH) != 0;
}

static int ents_reserve(hint_list *l, uint64_t more)
{
    uint64_t cap = l->cap ? l->cap : 1024;
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

/* Expand one resolved range into entries. */
static void append_item(hint_list *l, bitem *it)
{
    prefetcher *p = l->p;
    srcfile *f = it->f;
    uint64_t size, end, first, last;

    if (it->rc < 0 || !f) {
        p->stats->hint_errors++;
        return;
    }
    size = (uint64_t)f->st.st_size;
    if (!may_read(l, &f->st) || (it->off >= size && size > 0)) {
        p->stats->hint_errors++;
        return;
    }
    if (size == 0)
        return;
    end = it->len && it->len < size - it->off ? it->off + it->len : size;
    first = it->off / f->chunk_size;
    last = (end - 1) / f->chunk_size;
    if (l->pending + (last - first + 1) > p->hint_max || ents_reserve(l, last - first + 1) < 0) {
        p->stats->hint_errors++;
        return;
    }
    for (uint64_t i = first; i <= last; i++) {
        hint_ent *e = &l->ents[l->n++];
        memset(e, 0, sizeof(*e));
        e->f = srcfile_ref(f);
        e->idx = i;
        e->len = (uint32_t)srcfile_chunk_len(f, i);
        e->state = HE_WAITING;
        l->pending++;
        p->entries_total++;
    }
    p->stats->hint_entries_added += last - first + 1;
}

/* Append the finished batches at the head, in order. */
static void batches_drain(hint_list *l)
{
    while (l->bhead && l->bhead->finished) {
        hint_batch *b = l->bhead;
        l->bhead = b->next;
        if (!l->bhead)
            l->btail = NULL;
        if (!l->dead)
            for (size_t i = 0; i < b->n; i++)
                append_item(l, &b->items[i]);
        batch_free(b);
        list_unref(l);
    }
    if (!l->dead)
        pump(l);
}

/* I/O thread: stat the ranges the attr cache did not know. */
static void batch_run(wq_job *j)
{
    hint_batch *b = (hint_batch *)j;
    char err[256];

    for (size_t i = 0; i < b->n; i++) {
        bitem *it = &b->items[i];
        if (it->rc == 0 && !it->f)
            it->rc = source_stat(b->l->p->src, it->norm, it->root, &it->st, err, sizeof(err));
    }
}

static void batch_done(wq_job *j)
{
    hint_batch *b = (hint_batch *)j;
    hint_list *l = b->l;
    double now = gr__now_s();

    for (size_t i = 0; i < b->n; i++) {
        bitem *it = &b->items[i];
        if (it->rc == 0 && !it->f && j->cancelled)
            it->rc = -ECANCELED;
        if (it->rc == 0 && !it->f) {
            it->f = source_install(l->p->src, it->norm, it->root, &it->st, now);
            it->norm = NULL;
            if (!it->f)
                it->rc = -ENOMEM;
        }
    }
    b->finished = 1;
    /* Holds a reference until drained, so l is alive here. */
    l->refs++;
    batches_drain(l);
    list_unref(l);
}

int hint_list_append(hint_list *l, const proto_msg *m)
{
    prefetcher *p = l->p;
    proto_hint_ent he;
    hint_batch *b;
    size_t off = 0, i = 0;
    int need_stat = 0;
    double now = gr__now_s();

    if (m->u.hint.flags & PROTO_HINT_CLEAR)
        list_clear(l);
    if (m->u.hint.count == 0)
        return 0;
    if (l->pending + m->u.hint.count > p->hint_max)
        return -E2BIG;
    b = calloc(1, sizeof(*b));
    if (b)
        b->items = calloc(m->u.hint.count, sizeof(*b->items));
    if (!b || !b->items) {
        free(b);
        return -ENOMEM;
    }
    b->n = m->u.hint.count;
    while (i < b->n && proto_hint_next(m, &off, &he) == 1) {
        bitem *it = &b->items[i++];
        char err[256];
        it->off = he.off;
        it->len = he.len;
        it->rc = source_resolve(p->src, he.path, he.path_len, &it->norm, &it->root, err,
                                sizeof(err));
        if (it->rc < 0)
            continue;
        it->f = source_lookup(p->src, it->norm, now);
        if (it->f) {
            free(it->norm);
            it->norm = NULL;
        } else {
            need_stat = 1;
        }
    }
    b->job.run = batch_run;
    b->job.done = batch_done;
    b->l = l;
    l->refs++;                  /* the batch's, dropped when drained */
    if (l->btail)
        l->btail->next = b;
    else
        l->bhead = b;
    l->btail = b;
    if (need_stat) {
        workers_submit(p->w, &b->job, WQ_BACKGROUND);
    } else {
        b->finished = 1;
        batches_drain(l);
    }
    return 0;
}
