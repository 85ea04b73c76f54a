/*
 * dirahead.c - read-ahead across the files of a directory (dirahead.h):
 * the listing cache, the per-connection streams and the jobs that list
 * and judge directories.
 *
 * A stream's life: reset by an open in another directory; rising with
 * each ascending open there; at two rising opens it asks for the
 * directory's listing (from the cache, else a job that lists it, unless
 * another reader's job lists it already: then at the next open; a job
 * that judges the user either way unless no judging is needed); with the
 * listing, each open's position is looked up, and two equal strides turn
 * it on; on, every open tops its hint list up to [prefetch] dir_readahead
 * files past the open.  Anything out of order turns it off (the list
 * cleared) and starts the count again.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "dirahead.h"
#include "grow.h"
#include "list.h"
#include "log.h"
#include "names.h"

/* A directory's regular files, sorted by name (strcmp). */
typedef struct dlisting {
    struct dirahead *d;         /* whose live_bytes it counts in (once counted) */
    size_t bytes;               /* counted there */
    gr__list link;              /* in d->cache, least recently made first */
    unsigned refs;              /* the cache's (while on it) and each stream's */
    int root;
    char *dir;                  /* normalised */
    double at;                  /* gr__now_s() when listed */
    char *names;                /* n NUL-terminated names back to back */
    size_t names_len, names_cap;
    uint32_t *off;              /* off[i]: where name i starts in names */
    size_t n, off_cap;
} dlisting;

struct dirahead {
    prefetcher *p;
    dram *dram;
    source *src;
    judge *jg;
    workers *w;
    gr_stats *stats;
    unsigned files;
    int trust_all;
    gr__list cache;             /* dlisting.link */
    unsigned ncache;
    gr__list listing;           /* dira_job.link: the jobs out that list */
    size_t live_bytes;          /* of every listing alive (cached or held by a stream) */
};

struct dira_stream {
    dirahead *d;
    access_cred cred;
    unsigned refs;              /* the connection's (until freed) and a job's */
    int dead;                   /* the connection let go */
    uint64_t gen;               /* bumped when the directory changes */
    char *dir;                  /* the directory of the last open, or NULL */
    int root;
    char last[NAME_MAX + 1];    /* the name of the last open */
    unsigned rising;            /* ascending opens in a row in dir */
    int busy;                   /* a job is out */
    int asked;                  /* a listing was asked for, for this dir */
    int denied;                 /* not listable by this user (or too big, or failed) */
    dlisting *ls;               /* dir's listing (a reference), once there */
    long pos;                   /* listing position of the last open, -1 none */
    long stride;                /* positions between the last two, 0 none */
    int on;                     /* two equal strides: hinting */
    size_t next;                /* the next position to hint */
    hint_list *hl;              /* made when first on */
};

typedef struct dira_job {
    wq_job job;
    gr__list link;              /* in d->listing while out, when list */
    dira_stream *s;             /* a reference */
    uint64_t gen;               /* s->gen when asked */
    char *dir;
    int root;
    access_cred cred;
    int judge;                  /* judge_list for cred first */
    int list;                   /* then list (no fresh listing was cached) */
    int rc;                     /* the judgement (or listing) failed: -errno */
    dlisting *ls;               /* list: the listing, or NULL (too big, failed) */
    char err[256];
} dira_job;

static void listing_unref(dlisting **lp)
{
    dlisting *l = *lp;

    *lp = NULL;
    if (!l || --l->refs > 0)
        return;
    if (l->d)
        l->d->live_bytes -= l->bytes;
    free(l->dir);
    free(l->names);
    free(l->off);
    free(l);
}

static int listing_fresh(const dlisting *l)
{
    return gr__now_s() - l->at <= DIRA_TTL;
}

/* The cache's fresh listing of dir beneath root, or NULL. */
static dlisting *cache_find(dirahead *d, const char *dir, int root)
{
    gr__list *it, *tmp;

    gr__list_foreach_safe(it, tmp, &d->cache) {
        dlisting *l = gr__list_entry(it, dlisting, link);
        if (l->root == root && !strcmp(l->dir, dir))
            return listing_fresh(l) ? l : NULL;
    }
    return NULL;
}

/* Put l (a new reference is taken) on the cache in place of any listing of
 * the same directory, the oldest going past DIRA_CACHE. */
static void cache_put(dirahead *d, dlisting *l)
{
    gr__list *it, *tmp;

    gr__list_foreach_safe(it, tmp, &d->cache) {
        dlisting *o = gr__list_entry(it, dlisting, link);
        if (o->root == l->root && !strcmp(o->dir, l->dir)) {
            gr__list_remove(&o->link);
            d->ncache--;
            listing_unref(&o);
        }
    }
    l->refs++;
    gr__list_push_back(&d->cache, &l->link);
    d->ncache++;
    while (d->ncache > DIRA_CACHE) {
        dlisting *o = gr__list_entry(gr__list_pop_front(&d->cache), dlisting, link);
        d->ncache--;
        listing_unref(&o);
    }
}

/* I/O thread: collect a regular file's name (1 stops: too many). */
static int list_cb(void *arg, const char *name, int is_dir)
{
    dlisting *l = arg;
    size_t len = strlen(name) + 1;

    if (is_dir)
        return 0;
    if (l->n >= DIRA_MAX_NAMES || l->names_len + len > DIRA_MAX_BYTES)
        return 1;
    if (gr__grow((void **)&l->names, &l->names_cap, l->names_len + len, 1) < 0 ||
        gr__grow((void **)&l->off, &l->off_cap, l->n + 1, sizeof(*l->off)) < 0)
        return -ENOMEM;
    memcpy(l->names + l->names_len, name, len);
    l->off[l->n++] = (uint32_t)l->names_len;
    l->names_len += len;
    return 0;
}

/* I/O thread. */
static void job_run(wq_job *wj)
{
    dira_job *j = gr__container_of(wj, dira_job, job);
    dirahead *d = j->s->d;
    int rc;

    if (j->judge && (j->rc = judge_list(d->jg, j->dir, &j->cred, j->err, sizeof(j->err))) < 0)
        return;
    if (!j->list)
        return;
    j->ls = calloc(1, sizeof(*j->ls));
    if (!j->ls || !(j->ls->dir = strdup(j->dir))) {
        j->rc = -ENOMEM;
        return;
    }
    j->ls->refs = 1;
    j->ls->root = j->root;
    j->ls->at = gr__now_s();
    rc = source_list_dir(d->src, j->dir, j->root, list_cb, j->ls, j->err, sizeof(j->err));
    if (rc != 0) {
        j->rc = rc > 0 ? -EFBIG : rc;
        if (rc > 0)
            snprintf(j->err, sizeof(j->err), "more than %d files or %u bytes of names",
                     DIRA_MAX_NAMES, DIRA_MAX_BYTES);
        return;
    }
    gr__names_sort(j->ls->names, j->ls->off, j->ls->n);
}

static void stream_unref(dira_stream **sp);

/* Loop thread. */
static void job_done(wq_job *wj)
{
    dira_job *j = gr__container_of(wj, dira_job, job);
    dira_stream *s = j->s;
    dirahead *d = s->d;

    s->busy = 0;
    if (j->list)
        gr__list_remove(&j->link);
    if (j->job.cancelled && j->rc == 0 && !j->ls)
        j->rc = -ECANCELED;
    if (j->ls && j->rc == 0) {
        /* Every listing alive together stays within DIRA_LIVE_MAX. */
        size_t b = j->ls->names_cap + j->ls->off_cap * sizeof(*j->ls->off) + sizeof(*j->ls);
        if (d->live_bytes + b > DIRA_LIVE_MAX) {
            j->rc = -ENOMEM;
            snprintf(j->err, sizeof(j->err), "listings over %u bytes", DIRA_LIVE_MAX);
        } else {
            j->ls->d = d;
            j->ls->bytes = b;
            d->live_bytes += b;
        }
    }
    if (j->list && j->ls && j->rc == 0) {
        d->stats->dir_readahead_listings++;
        cache_put(d, j->ls);
    }
    if (!s->dead && j->gen == s->gen && !s->ls) {
        if (j->rc < 0) {
            log_debug("dir read-ahead: %s: %s", j->dir, j->err[0] ? j->err : strerror(-j->rc));
            s->denied = 1;
        } else if (j->ls) {
            s->ls = j->ls;
            s->ls->refs++;
        } else if (!(s->ls = cache_find(d, s->dir, s->root))) {
            s->asked = 0;               /* (gone from the cache meanwhile: ask again) */
        } else {
            s->ls->refs++;
        }
    }
    listing_unref(&j->ls);
    free(j->dir);
    free(j);
    stream_unref(&s);
}

/* Whether a job out lists dir beneath root (another reader of it: its
 * listing is the cache's soon, so one listing serves them both). */
static int listing_out(const dirahead *d, const char *dir, int root)
{
    const gr__list *it;

    for (it = d->listing.next; it != &d->listing; it = it->next) {
        const dira_job *j = gr__list_entry(it, dira_job, link);
        if (j->root == root && !strcmp(j->dir, dir))
            return 1;
    }
    return 0;
}

/* Ask for s's directory: its listing, and the user judged, as needed
 * (nothing yet while another job lists it: the next open asks again). */
static void ask(dira_stream *s)
{
    dirahead *d = s->d;
    int need_judge = !d->trust_all && s->cred.uid != 0;
    dlisting *l = cache_find(d, s->dir, s->root);
    dira_job *j;

    if (!l && listing_out(d, s->dir, s->root))
        return;
    s->asked = 1;
    if (l && !need_judge) {
        s->ls = l;
        l->refs++;
        return;
    }
    j = calloc(1, sizeof(*j));
    if (!j || !(j->dir = strdup(s->dir))) {
        free(j);
        s->denied = 1;                  /* fail closed: no read-ahead here */
        return;
    }
    j->job.run = job_run;
    j->job.done = job_done;
    j->s = s;
    s->refs++;
    s->busy = 1;
    j->gen = s->gen;
    j->root = s->root;
    j->cred = s->cred;
    j->judge = need_judge;
    j->list = l == NULL;
    if (j->list)
        gr__list_push_back(&d->listing, &j->link);
    workers_submit(d->w, &j->job, WQ_BACKGROUND);
}

/* The position of name in l, or -1. */
static long find(const dlisting *l, const char *name)
{
    return gr__names_find(l->names, l->off, l->n, name);
}

/* Off: hints cleared (holds released), the order counted again. */
static void stream_off(dira_stream *s)
{
    if (s->on && s->hl)
        hint_list_clear(s->hl);
    s->on = 0;
    s->rising = 0;
    s->pos = -1;
    s->stride = 0;
}

/* Whether the first chunk of norm is in DRAM, as far as the attribute
 * cache knows the file (a file it does not know is taken as not). */
static int in_dram(dirahead *d, const char *norm)
{
    srcfile *f = source_lookup(d->src, norm, gr__now_s());
    uint8_t key[CHUNK_KEY_LEN];
    int hit;

    if (!f)
        return 0;
    chunk_key(key, f->id, 0);
    hit = dram_peek(d->dram, key) != NULL;
    srcfile_unref(&f);
    return hit;
}

/* Hint the first chunk of the files of s's stride up to d->files past
 * position p (the reader's own read-ahead takes a file's later chunks). */
static void topup(dira_stream *s, size_t p)
{
    dirahead *d = s->d;
    size_t dlen = strlen(s->dir), end = p + (size_t)s->stride * d->files;
    hint_status st;

    if (!s->hl && !(s->hl = hint_list_new_own(d->p, &s->cred))) {
        stream_off(s);
        return;
    }
    /* Files hinted after the reader opened them (it outran their
     * resolution: warm files, say) are never read through this list; past
     * twice the window of them, start it again from here. */
    hint_list_status(s->hl, &st);
    if (st.pending > 2 * (uint64_t)d->files) {
        hint_list_clear(s->hl);
        s->next = 0;
    }
    if (s->next <= p)
        s->next = p + (size_t)s->stride;
    for (; s->next <= end && s->next < s->ls->n; s->next += (size_t)s->stride) {
        const char *name = s->ls->names + s->ls->off[s->next];
        size_t nlen = strlen(name);
        char *path = malloc(dlen + nlen + 2);
        if (!path)
            return;
        memcpy(path, s->dir, dlen);
        path[dlen] = '/';
        memcpy(path + dlen + 1, name, nlen + 1);
        if (in_dram(d, path)) {
            free(path);                 /* warm: nothing to fetch, nothing to hold */
            continue;
        }
        if (hint_list_add(s->hl, path, s->root, 0, 1) < 0)
            return;                     /* (the user's hint limits: later, maybe) */
        d->stats->dir_readahead_files++;
    }
}

void dira_opened(dira_stream *s, const char *norm, int root)
{
    const char *slash = norm ? strrchr(norm, '/') : NULL;
    const char *name;
    size_t dlen;
    long p;

    if (!s || !slash || slash == norm || strlen(slash + 1) > NAME_MAX)
        return;
    name = slash + 1;
    dlen = (size_t)(slash - norm);
    if (!s->dir || s->root != root || strlen(s->dir) != dlen || memcmp(s->dir, norm, dlen) != 0) {
        char *dir = strndup(norm, dlen);
        stream_off(s);
        listing_unref(&s->ls);
        free(s->dir);
        s->dir = dir;                   /* (NULL: out of memory; the next open tries again) */
        s->root = root;
        s->gen++;
        s->asked = s->denied = 0;
        snprintf(s->last, sizeof(s->last), "%s", name);
        return;
    }
    if (strcmp(name, s->last) <= 0) {
        stream_off(s);
        snprintf(s->last, sizeof(s->last), "%s", name);
        return;
    }
    snprintf(s->last, sizeof(s->last), "%s", name);
    s->rising++;
    if (s->ls && !listing_fresh(s->ls) && !s->busy) {
        stream_off(s);                  /* listed and judged too long ago: again */
        listing_unref(&s->ls);
        s->asked = s->denied = 0;
        s->rising = 2;
    }
    if (s->denied || s->d->files == 0 || prefetch_user_hints(s->d->p, s->cred.uid)) {
        stream_off(s);                  /* (its job hints: it knows better) */
        return;
    }
    if (!s->ls) {
        if (s->rising >= 2 && !s->asked && !s->busy)
            ask(s);
        if (!s->ls)
            return;                     /* (a job is out; else the cache's: counts now) */
    }
    if ((p = find(s->ls, name)) < 0)
        return;
    if (s->pos >= 0) {
        long st = p - s->pos;
        if (st < 1 || st > DIRA_MAX_STRIDE) {
            stream_off(s);              /* (not the listing's order: counted afresh) */
            s->rising = 1;
        } else if (s->on && st != s->stride) {
            stream_off(s);              /* another stride: a candidate */
            s->rising = 1;
            s->stride = st;
        } else if (!s->on && st == s->stride) {
            s->on = 1;
            s->next = 0;
            s->d->stats->dir_readahead_streams++;
        } else {
            s->stride = st;
        }
    }
    s->pos = p;
    if (s->on)
        topup(s, (size_t)p);
}

void dira_elsewhere(dira_stream *s)
{
    if (!s || !s->dir)
        return;
    stream_off(s);
    listing_unref(&s->ls);
    free(s->dir);
    s->dir = NULL;
    s->gen++;                           /* (a job out for it finds another directory) */
    s->asked = s->denied = 0;
}

dira_stream *dira_stream_new(dirahead *d, const access_cred *cred)
{
    dira_stream *s;

    if (!d || d->files == 0 || !(s = calloc(1, sizeof(*s))))
        return NULL;
    s->d = d;
    s->cred = *cred;
    s->refs = 1;
    s->pos = -1;
    return s;
}

static void stream_unref(dira_stream **sp)
{
    dira_stream *s = *sp;

    *sp = NULL;
    if (!s || --s->refs > 0)
        return;
    listing_unref(&s->ls);
    free(s->dir);
    free(s);
}

void dira_stream_free(dira_stream **sp)
{
    dira_stream *s = *sp;

    if (!s)
        return;
    hint_list_free(&s->hl);
    listing_unref(&s->ls);
    s->dead = 1;
    stream_unref(sp);
}

int dirahead_new(prefetcher *p, dram *dr, source *src, judge *jg, workers *w, gr_stats *stats,
                 unsigned files, int trust_all, dirahead **out)
{
    dirahead *d = calloc(1, sizeof(*d));

    *out = NULL;
    if (!d)
        return -ENOMEM;
    d->p = p;
    d->dram = dr;
    d->src = src;
    d->jg = jg;
    d->w = w;
    d->stats = stats;
    d->files = files;
    d->trust_all = trust_all;
    gr__list_init(&d->cache);
    gr__list_init(&d->listing);
    *out = d;
    return 0;
}

void dirahead_set_files(dirahead *d, unsigned files)
{
    if (d)
        d->files = files;
}

void dirahead_free(dirahead **dp)
{
    dirahead *d = *dp;

    if (!d)
        return;
    while (d->ncache) {
        dlisting *l = gr__list_entry(gr__list_pop_front(&d->cache), dlisting, link);
        d->ncache--;
        listing_unref(&l);
    }
    free(d);
    *dp = NULL;
}
