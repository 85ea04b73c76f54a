/*
 * analysis.c - the per-job IO-pattern classifier and its report (see
 * analysis.h for what is kept and why it is bounded).
 *
 * The verdict, from the decayed vote shares and the sampled record:
 *   - fewer than AN_FIRST requests: unknown;
 *   - continuations >= 60%: sequential-large, or checkpoint-burst when the
 *     job paused (>= 1 s) at least twice and spent most of its life idle;
 *   - constant strides >= 50%: strided;
 *   - whole-file reads >= 60%: by the reuse in the record.  An epoch reads
 *     every item once per pass, so a re-read comes after about all of the
 *     data (shuffled: d is triangular on [0, 2D], 3% below D/4; same
 *     order: d = D).  "early" is the share of re-reads that come back
 *     within a quarter of the distinct data, "hot" the share of all reads
 *     that are such early re-reads.  early < 0.1 (or no re-reads yet) is an
 *     epoch (same-order too: the report says which order); otherwise hot
 *     >= 0.4 is a hot set (random-small), and below that a mix;
 *   - random reads >= 60%: random-small;
 *   - otherwise mixed.
 * Reuse distances (distinct chunks between two accesses of one chunk) come
 * from a Fenwick tree over the record, O(n log n); the record is scaled
 * back by the sampling rate (SHARDS: a capacity C is simulated as C * rate).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "policy.h"

#define AN_ROW_STATIC POLICY_NKINDS
#define AN_ROW_BELADY (POLICY_NKINDS + 1)

/* Scratch for the record's analysis: dense ids and reuse distances. */
typedef struct an_scratch {
    uint32_t n, nkeys;
    uint32_t id[AN_RING];           /* dense key id per access, oldest first */
    uint64_t khash[AN_RING];        /* per id */
    uint32_t ksize[AN_RING];        /* per id */
    int32_t last[AN_RING];          /* per id, during the scan */
    int32_t fen[AN_RING + 1];
    uint64_t next[AN_RING];         /* per access: the next access of its key, or n + i */
    uint32_t slot[AN_RING * 2];     /* key table: id, or UINT32_MAX */
} an_scratch;

struct analysis {
    an_job *jobs[AN_MAX_JOBS];
    uint32_t next_id;
    an_scratch *scr;                /* for verdicts on the loop */
};

static const char *const class_names[AN_NCLASSES] = {
    "unknown", "sequential-large", "random-small", "shuffled-epoch", "strided",
    "checkpoint-burst", "mixed",
};

const char *an_class_name(an_class c)
{
    return (unsigned)c < AN_NCLASSES ? class_names[c] : "?";
}

const char *an_row_name(int row)
{
    if (row < POLICY_NKINDS)
        return policy_kind_name((policy_kind)row);
    return row == AN_ROW_STATIC ? "static" : "belady";
}

/* Log-linear buckets, four per power of two: 0..3 exactly, then
 * [(4 + k) << (e - 2), (5 + k) << (e - 2)) for v's top bit e and the next
 * two bits k.  A bucket's lower bound is within 25% below any value in it. */
static unsigned hist_bucket(uint64_t v)
{
    unsigned e;

    if (v < 4)
        return (unsigned)v;
    e = 63 - (unsigned)__builtin_clzll(v);
    return 4 + (e - 2) * 4 + (unsigned)((v >> (e - 2)) & 3);
}

static uint64_t hist_lower(unsigned b)
{
    unsigned e;

    if (b < 4)
        return b;
    e = (b - 4) / 4 + 2;
    return (uint64_t)(4 + (b - 4) % 4) << (e - 2);
}

static void hist_add(an_hist *h, uint64_t v)
{
    h->b[hist_bucket(v)]++;
    h->n++;
}

uint64_t an_hist_quantile(const an_hist *h, double q)
{
    uint64_t want, acc = 0;

    if (!h->n)
        return 0;
    want = (uint64_t)ceil(q * (double)h->n);
    if (want == 0)
        want = 1;
    for (unsigned i = 0; i < AN_HB; i++) {
        acc += h->b[i];
        if (acc >= want)
            return hist_lower(i);
    }
    return hist_lower(AN_HB - 1);
}

int analysis_new(analysis **out)
{
    analysis *a = calloc(1, sizeof(*a));

    if (!a || !(a->scr = malloc(sizeof(*a->scr)))) {
        free(a);
        return -ENOMEM;
    }
    a->next_id = 1;
    *out = a;
    return 0;
}

void analysis_free(analysis **ap)
{
    analysis *a = *ap;

    if (!a)
        return;
    for (unsigned i = 0; i < AN_MAX_JOBS; i++)
        free(a->jobs[i]);
    free(a->scr);
    free(a);
    *ap = NULL;
}

an_ref analysis_attach(analysis *a, uint32_t uid, int32_t pgid, uint64_t now_ns)
{
    an_ref r = { 0, 0 };
    int freeslot = -1, oldest = -1;
    an_job *j;

    for (unsigned i = 0; i < AN_MAX_JOBS; i++) {
        j = a->jobs[i];
        if (!j || !j->id) {
            if (freeslot < 0)
                freeslot = (int)i;
            continue;
        }
        if (j->uid == uid && j->pgid == pgid) {
            j->conns++;
            return (an_ref){ i, j->id };
        }
        if (oldest < 0 || (j->conns == 0 && a->jobs[oldest]->conns) ||
            ((j->conns == 0) == (a->jobs[oldest]->conns == 0) &&
             j->last_ns < a->jobs[oldest]->last_ns))
            oldest = (int)i;
    }
    if (freeslot < 0)
        freeslot = oldest;
    if (!a->jobs[freeslot] && !(a->jobs[freeslot] = malloc(sizeof(an_job))))
        return r;
    j = a->jobs[freeslot];
    memset(j, 0, offsetof(an_job, ring));   /* the ring is read only up to ring_n */
    j->id = a->next_id++;
    j->uid = uid;
    j->pgid = pgid;
    j->conns = 1;
    j->first_ns = j->last_ns = now_ns;
    j->thresh = AN_RATE_ONE;
    r.slot = (uint32_t)freeslot;
    r.id = j->id;
    return r;
}

static an_job *job_of(analysis *a, an_ref r)
{
    an_job *j;

    if (!r.id || r.slot >= AN_MAX_JOBS)
        return NULL;
    j = a->jobs[r.slot];
    return j && j->id == r.id ? j : NULL;
}

void analysis_detach(analysis *a, an_ref r)
{
    an_job *j = job_of(a, r);

    if (j && j->conns)
        j->conns--;
}

const an_job *analysis_job(const analysis *a, unsigned i)
{
    if (i >= AN_MAX_JOBS || !a->jobs[i] || !a->jobs[i]->id)
        return NULL;
    return a->jobs[i];
}

void analysis_wait(analysis *a, an_ref r, uint64_t wait_ns)
{
    an_job *j = job_of(a, r);

    if (j)
        hist_add(&j->wait_ns, wait_ns);
}

void analysis_hinted(analysis *a, an_ref r)
{
    an_job *j = job_of(a, r);

    if (j)
        j->hinted++;
}

/* splitmix64's finaliser: a chunk key hash from the file key and index. */
static uint64_t an_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Record one sampled chunk access (see analysis.h). */
static void sample(an_job *j, uint64_t key, uint32_t size)
{
    if ((key >> 40) >= j->thresh)
        return;
    if (j->ring_n == AN_RING && j->thresh > AN_RATE_ONE / AN_MIN_RATE_INV) {
        uint32_t m = 0;
        j->thresh /= 2;
        for (uint32_t i = 0; i < j->ring_n; i++) {
            an_sample s = j->ring[(j->ring_head + i) % AN_RING];
            if ((s.key >> 40) < j->thresh)
                j->ring[m++] = s;
        }
        j->ring_n = m;
        j->ring_head = 0;
        if ((key >> 40) >= j->thresh)
            return;
    }
    j->sampled++;
    if (j->ring_n < AN_RING) {
        j->ring[(j->ring_head + j->ring_n) % AN_RING] = (an_sample){ key, size, 0 };
        j->ring_n++;
    } else {
        j->ring[j->ring_head] = (an_sample){ key, size, 0 };
        j->ring_head = (j->ring_head + 1) % AN_RING;
    }
}

/* Dense ids for the record, oldest first, through an open-addressed table
 * of 2 * AN_RING slots (O(n), no sort: this runs on the loop every
 * AN_EVAL requests); then each access's next use, from a backward scan. */
static void scr_ids(const an_job *j, an_scratch *s)
{
    memset(s->slot, 0xff, sizeof(s->slot));
    s->n = j->ring_n;
    s->nkeys = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        an_sample x = j->ring[(j->ring_head + i) % AN_RING];
        uint32_t h = (uint32_t)(x.key >> 20) & (AN_RING * 2 - 1);
        while (s->slot[h] != UINT32_MAX && s->khash[s->slot[h]] != x.key)
            h = (h + 1) & (AN_RING * 2 - 1);
        if (s->slot[h] == UINT32_MAX) {
            s->slot[h] = s->nkeys;
            s->khash[s->nkeys] = x.key;
            s->ksize[s->nkeys] = x.size;
            s->nkeys++;
        }
        s->id[i] = s->slot[h];
    }
}

/* s->next[t]: the position of the next access of t's key, or n + t. */
static void scr_next(an_scratch *s)
{
    for (uint32_t k = 0; k < s->nkeys; k++)
        s->last[k] = -1;
    for (uint32_t t = s->n; t-- > 0;) {
        uint32_t k = s->id[t];
        s->next[t] = s->last[k] >= 0 ? (uint64_t)s->last[k] : (uint64_t)s->n + t;
        s->last[k] = (int32_t)t;
    }
}

static void fen_add(int32_t *f, uint32_t n, uint32_t i, int32_t v)
{
    for (i++; i <= n; i += i & -i)
        f[i] += v;
}

static int32_t fen_sum(const int32_t *f, uint32_t i)   /* positions [0, i) */
{
    int32_t s = 0;

    for (; i > 0; i -= i & -i)
        s += f[i];
    return s;
}

/* Reuse figures of the record: the hot share, the re-access share, the
 * coefficient of variation of the distances, and (if h) their histogram in
 * bytes scaled by the rate. */
typedef struct reuse_figs {
    double hot, early, reuse, cv;
} reuse_figs;

static reuse_figs scr_reuse(an_scratch *s, double rate, an_hist *h)
{
    reuse_figs r = { 0, 0, 0, 0 };
    uint64_t hot = 0, re = 0, bytes = 0;
    double sum = 0, sum2 = 0;
    uint32_t d4 = s->nkeys / 4;

    if (s->n == 0)
        return r;
    for (uint32_t k = 0; k < s->nkeys; k++) {
        s->last[k] = -1;
        bytes += s->ksize[k];
    }
    memset(s->fen, 0, sizeof(int32_t) * (s->n + 1));
    for (uint32_t t = 0; t < s->n; t++) {
        uint32_t k = s->id[t];
        if (s->last[k] >= 0) {
            int32_t d = fen_sum(s->fen, t) - fen_sum(s->fen, (uint32_t)s->last[k] + 1);
            re++;
            if ((uint32_t)d < d4)
                hot++;
            sum += d;
            sum2 += (double)d * d;
            if (h)
                hist_add(h, (uint64_t)((double)d * ((double)bytes / s->nkeys) / rate));
            fen_add(s->fen, s->n, (uint32_t)s->last[k], -1);
        }
        fen_add(s->fen, s->n, t, 1);
        s->last[k] = (int32_t)t;
    }
    r.hot = (double)hot / s->n;
    r.reuse = (double)re / s->n;
    r.early = re >= 32 ? (double)hot / re : 0;
    if (re > 1) {
        double mean = sum / re, var = sum2 / re - mean * mean;
        r.cv = mean > 0 ? sqrt(var > 0 ? var : 0) / mean : 0;
    }
    return r;
}

static an_class classify(const an_job *j, const reuse_figs *rf)
{
    double tot = 0, sh[AN_NV];
    uint64_t life = j->last_ns - j->first_ns;

    if (j->requests < AN_FIRST)
        return AN_UNKNOWN;
    for (int v = 0; v < AN_NV; v++)
        tot += j->votes[v];
    if (tot <= 0)
        return AN_UNKNOWN;
    for (int v = 0; v < AN_NV; v++)
        sh[v] = j->votes[v] / tot;
    if (sh[AN_V_SEQ] >= 0.6) {
        if (j->long_gaps >= 2 && life && (double)j->idle_ns / (double)life >= 0.5)
            return AN_CKPT_BURST;
        return AN_SEQ_LARGE;
    }
    if (sh[AN_V_STRIDE] >= 0.5)
        return AN_STRIDED;
    if (sh[AN_V_WHOLE] >= 0.6)
        return rf->early < 0.1 ? AN_SHUFFLED_EPOCH : rf->hot >= 0.4 ? AN_RANDOM_SMALL : AN_MIXED;
    if (sh[AN_V_RAND] >= 0.6)
        return AN_RANDOM_SMALL;
    return AN_MIXED;
}

static void evaluate(analysis *a, an_job *j)
{
    double tot = 0;
    an_class c;
    reuse_figs rf = { 0, 0, 0, 0 };

    /* The record's figures only decide among whole-file readers: spare the
     * O(n log n) otherwise, and once the verdict is stable recompute them
     * every 4 * AN_EVAL requests only (reuse changes over passes, not
     * requests); in between the last hot share stands. */
    for (int v = 0; v < AN_NV; v++)
        tot += j->votes[v];
    if (tot > 0 && j->votes[AN_V_WHOLE] / tot >= 0.6 &&
        (j->requests <= AN_EVAL || j->requests % (4 * AN_EVAL) == 0 || j->verdict == AN_UNKNOWN ||
         j->verdict_runs < AN_STABLE)) {
        scr_ids(j, a->scr);
        rf = scr_reuse(a->scr, 1.0, NULL);
        j->hot = rf.hot;
        j->early = rf.early;
    } else {
        rf.hot = j->hot;
        rf.early = j->early;
    }
    c = classify(j, &rf);
    if (c == j->verdict) {
        j->verdict_runs++;
    } else {
        if (j->verdict != AN_UNKNOWN)
            j->switches++;
        j->verdict = c;
        j->verdict_runs = 1;
    }
}

void analysis_read(analysis *a, an_ref r, uint64_t file_key, uint64_t file_size,
                   uint32_t chunk_size, uint64_t off, uint64_t len, int whole, uint64_t now_ns)
{
    an_job *j = job_of(a, r);
    an_stream *st = NULL, *lru = NULL;
    uint64_t end, first, last, seen;
    int vote;

    if (!j || chunk_size == 0 || len == 0)
        return;
    file_key |= 1;                      /* 0 marks a free stream */
    if (j->requests) {
        uint64_t gap = now_ns > j->last_ns ? now_ns - j->last_ns : 0;
        hist_add(&j->gap_ns, gap);
        if (gap >= AN_LONG_GAP_NS) {
            j->long_gaps++;
            j->idle_ns += gap;
        }
    } else {
        j->first_ns = now_ns;
    }
    j->last_ns = now_ns;
    j->requests++;
    j->bytes += len;
    j->chunk_size = chunk_size;
    hist_add(&j->req_size, len);

    end = off + len;
    if (whole) {
        end = (end + chunk_size - 1) / chunk_size * chunk_size;
        if (end > file_size)
            end = file_size;
    }
    if (j->streams[j->last_stream].file == file_key)
        st = &j->streams[j->last_stream];
    for (unsigned i = 0; !st && i < AN_STREAMS; i++) {
        an_stream *s = &j->streams[i];
        if (s->file == file_key) {
            st = s;
            break;
        }
        if (!lru || s->used < lru->used)
            lru = s;
    }
    if (!st) {
        /* a file's first request (as far as the table remembers) */
        st = lru;
        st->file = file_key;
        st->stride = 0;
        j->files_seen++;
        if (file_size < chunk_size)
            j->small_files++;
        hist_add(&j->file_size, file_size);
        if (off == 0 && end >= file_size)
            vote = AN_V_WHOLE;
        else if (off == 0)
            vote = AN_V_SEQ;            /* the start of a longer read */
        else
            vote = AN_V_RAND;
    } else {
        int64_t step = (int64_t)(off - st->prev_off);
        /* A continuation starts within or at the end of the last read and
         * goes no shorter: also a client asking again for the rest of a
         * reply that came short (inline bytes when a chunk had no arena
         * block). */
        if (off >= st->prev_off && off <= st->next_off && end >= st->next_off &&
            (off > st->prev_off || end > st->next_off))
            vote = AN_V_SEQ;
        else if (st->stride && step == st->stride && off > st->next_off)
            vote = AN_V_STRIDE;
        else if (off == 0 && end >= file_size)
            vote = AN_V_WHOLE;
        else
            vote = AN_V_RAND;
        st->stride = step;
    }
    /* A continuation's first chunk may be the one the last read ended in:
     * the reader still holds it, so it is not a re-read for the record. */
    seen = vote == AN_V_SEQ && st->next_off > 0 ? (st->next_off - 1) / chunk_size : UINT64_MAX;
    st->prev_off = off;
    st->next_off = end;
    st->used = j->requests;
    j->last_stream = (uint32_t)(st - j->streams);
    j->votes[vote] += 1;
    if (j->requests % AN_DECAY == 0)
        for (int v = 0; v < AN_NV; v++)
            j->votes[v] /= 2;

    /* the chunks it touches, sampled */
    first = off / chunk_size;
    last = (end - 1) / chunk_size;
    if (seen != UINT64_MAX && first <= seen)
        first = seen + 1;
    if (first <= last && last - first > 64)     /* a READX covers at most a few chunks */
        last = first + 64;
    for (uint64_t c = first; c <= last; c++) {
        uint64_t clen = file_size - c * chunk_size;
        if (c * chunk_size >= file_size)
            break;
        sample(j, an_mix64(file_key ^ (c * 0x9e3779b97f4a7c15ull)),
               (uint32_t)(clen < chunk_size ? clen : chunk_size));
    }
    if (j->requests % AN_EVAL == 0 || (j->requests < AN_EVAL && j->requests % AN_FIRST == 0))
        evaluate(a, j);
}

/* ---- the report ---- */

/* Replay the record through one policy kind at capacity cap (scaled);
 * hits counted from access warm on. */
static double sim_policy(const an_scratch *s, policy_kind k, uint64_t cap, uint32_t warm)
{
    policy_node *nodes = calloc(s->nkeys, sizeof(*nodes));
    uint8_t *res = calloc(s->nkeys, 1);
    policy *p = NULL;
    uint64_t hits = 0;
    double hr = -1;

    if (!nodes || !res || policy_new(k, cap, &p) < 0)
        goto out;
    for (uint32_t t = 0; t < s->n; t++) {
        uint32_t id = s->id[t];
        uint64_t size = s->ksize[id];
        if (res[id]) {
            if (t >= warm)
                hits++;
            policy_hit(p, &nodes[id]);
            continue;
        }
        if (!policy_admit(p, s->khash[id], size))
            continue;
        while (policy_used(p) + size > policy_capacity(p)) {
            policy_node *v = policy_victim(p);
            if (!v)
                break;
            policy_remove(p, v);
            res[v - nodes] = 0;
        }
        if (policy_used(p) + size <= policy_capacity(p)) {
            policy_node_init(&nodes[id], s->khash[id], size);
            policy_insert(p, &nodes[id]);
            res[id] = 1;
        }
    }
    hr = s->n > warm ? (double)hits / (s->n - warm) : 0;
out:
    policy_free(&p);
    free(nodes);
    free(res);
    return hr;
}

static double sim_static(const an_scratch *s, uint64_t cap, uint32_t warm)
{
    uint8_t *res = calloc(s->nkeys ? s->nkeys : 1, 1);
    uint64_t used = 0, hits = 0;

    if (!res)
        return -1;
    for (uint32_t t = 0; t < s->n; t++) {
        uint32_t id = s->id[t];
        if (res[id]) {
            hits += t >= warm;
        } else if (used + s->ksize[id] <= cap) {
            res[id] = 1;
            used += s->ksize[id];
        }
    }
    free(res);
    return s->n > warm ? (double)hits / (s->n - warm) : 0;
}

typedef struct hent {
    uint64_t next;
    uint32_t key;
} hent;

static void hpush(hent *h, uint32_t *n, hent e)
{
    uint32_t i = (*n)++;

    while (i) {
        uint32_t up = (i - 1) / 2;
        if (h[up].next >= e.next)
            break;
        h[i] = h[up];
        i = up;
    }
    h[i] = e;
}

static hent hpop(hent *h, uint32_t *n)
{
    hent top = h[0], last = h[--(*n)];
    uint32_t i = 0;

    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1].next > h[c].next)
            c++;
        if (h[c].next <= last.next)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* Belady's MIN (admit, then evict the farthest next use, the newcomer
 * included), as bench/simulate.c runs it. */
static double sim_belady(const an_scratch *s, uint64_t cap, uint32_t warm)
{
    uint64_t *cur = calloc(s->nkeys ? s->nkeys : 1, sizeof(*cur));
    uint8_t *res = calloc(s->nkeys ? s->nkeys : 1, 1);
    hent *h = malloc((s->n + 1) * sizeof(*h));
    uint32_t nh = 0;
    uint64_t used = 0, hits = 0;
    double hr = -1;

    if (!cur || !res || !h)
        goto out;
    for (uint32_t t = 0; t < s->n; t++) {
        uint32_t k = s->id[t];
        if (res[k]) {
            hits += t >= warm;
        } else {
            if (s->ksize[k] > cap)
                continue;
            res[k] = 1;
            used += s->ksize[k];
        }
        cur[k] = s->next[t];
        hpush(h, &nh, (hent){ s->next[t], k });
        while (used > cap && nh) {
            hent e = hpop(h, &nh);
            if (!res[e.key] || cur[e.key] != e.next)
                continue;
            res[e.key] = 0;
            used -= s->ksize[e.key];
        }
    }
    hr = s->n > warm ? (double)hits / (s->n - warm) : 0;
out:
    free(cur);
    free(res);
    free(h);
    return hr;
}

static void sim_tier(const an_scratch *s, const char *name, uint64_t capacity, double rate,
                     an_tier_sim *t)
{
    uint64_t cap = (uint64_t)((double)capacity * rate);
    uint32_t warm = s->n / 3;

    t->tier = name;
    t->capacity = capacity;
    t->best = 0;
    for (int r = 0; r < AN_SIM_ROWS; r++)
        t->hit[r] = -1;
    if (cap == 0 || s->n < 16)
        return;
    for (int k = 0; k < POLICY_NKINDS; k++) {
        t->hit[k] = sim_policy(s, (policy_kind)k, cap, warm);
        if (t->hit[k] > t->hit[t->best] + 1e-9)
            t->best = k;
    }
    t->hit[AN_ROW_STATIC] = sim_static(s, cap, warm);
    t->hit[AN_ROW_BELADY] = sim_belady(s, cap, warm);
}

static void human(char *buf, size_t len, double v)
{
    static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    int i = 0;

    while (v >= 1024 && i < 5) {
        v /= 1024;
        i++;
    }
    snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static void rec(an_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rec(an_report *r, const char *fmt, ...)
{
    va_list ap;

    if (r->nrecs >= AN_MAX_RECS)
        return;
    va_start(ap, fmt);
    vsnprintf(r->recs[r->nrecs++], sizeof(r->recs[0]), fmt, ap);
    va_end(ap);
}

int an_auto_choice(const an_report *r, int t, int cur)
{
    const an_tier_sim *ts;

    if (t < 0 || t >= r->ntiers || cur < 0 || cur >= POLICY_NKINDS || r->cls == AN_UNKNOWN)
        return -1;
    if (r->cls == AN_SHUFFLED_EPOCH && r->reuse_share < 0.05)
        return cur == POLICY_EPOCH ? -1 : POLICY_EPOCH;
    ts = &r->tiers[t];
    if (ts->hit[0] >= 0 && ts->best != cur && ts->hit[ts->best] >= ts->hit[cur] + AN_AUTO_MARGIN)
        return ts->best;
    /* Whole files, a hot set beside reads that do not come back soon (a
     * scan): until the replay can tell, the scan-resistant epoch policy,
     * before the scan's tail fills the tier (switched later, it keeps a
     * worse subset: bench/analyze --auto on tracegen scanmix). */
    if (r->cls == AN_MIXED && r->share[AN_V_WHOLE] >= 0.6 && cur != POLICY_EPOCH &&
        (ts->hit[0] < 0 || ts->hit[POLICY_EPOCH] >= ts->hit[cur] - AN_AUTO_MARGIN))
        return POLICY_EPOCH;
    return -1;
}

int analysis_report(const an_job *j, const an_caps *caps, an_report *r)
{
    an_scratch *s = malloc(sizeof(*s));
    an_hist reuse = { { 0 }, 0 };
    double tot = 0, rate;
    uint64_t bytes = 0, chunk;
    reuse_figs rf;
    char a[32], b[32], c[32];

    memset(r, 0, sizeof(*r));
    if (!s)
        return -ENOMEM;
    rate = (double)j->thresh / AN_RATE_ONE;
    r->rate = rate;
    r->samples = j->ring_n;
    scr_ids(j, s);
    scr_next(s);
    rf = scr_reuse(s, rate, &reuse);
    r->hot = rf.hot;
    r->reuse_share = rf.reuse;
    r->early = rf.early;
    r->cls = classify(j, &rf);
    r->stable = r->cls == j->verdict && j->verdict_runs >= AN_STABLE;
    for (int v = 0; v < AN_NV; v++)
        tot += j->votes[v];
    for (int v = 0; v < AN_NV; v++)
        r->share[v] = tot > 0 ? j->votes[v] / tot : 0;
    r->order = r->cls != AN_SHUFFLED_EPOCH || rf.reuse < 0.05 ? "-"
             : rf.cv < 0.1 ? "same" : "shuffled";
    r->req_p50 = an_hist_quantile(&j->req_size, 0.5);
    r->req_p90 = an_hist_quantile(&j->req_size, 0.9);
    r->file_p50 = an_hist_quantile(&j->file_size, 0.5);
    r->file_p90 = an_hist_quantile(&j->file_size, 0.9);
    r->gap_p50_ns = an_hist_quantile(&j->gap_ns, 0.5);
    r->gap_p99_ns = an_hist_quantile(&j->gap_ns, 0.99);
    r->wait_p50_ns = an_hist_quantile(&j->wait_ns, 0.5);
    r->wait_p90_ns = an_hist_quantile(&j->wait_ns, 0.9);
    r->wait_p99_ns = an_hist_quantile(&j->wait_ns, 0.99);
    r->reuse_p50_bytes = an_hist_quantile(&reuse, 0.5);
    r->reuse_p90_bytes = an_hist_quantile(&reuse, 0.9);
    r->small_file_share = j->files_seen ? (double)j->small_files / j->files_seen : 0;
    r->idle_share = j->last_ns > j->first_ns
                        ? (double)j->idle_ns / (double)(j->last_ns - j->first_ns) : 0;
    for (uint32_t k = 0; k < s->nkeys; k++)
        bytes += s->ksize[k];
    r->distinct_bytes = rate > 0 ? (uint64_t)((double)bytes / rate) : 0;
    sim_tier(s, "dram", caps->dram_capacity, rate, &r->tiers[r->ntiers++]);
    if (caps->nvme_capacity)
        sim_tier(s, "nvme", caps->nvme_capacity, rate, &r->tiers[r->ntiers++]);
    free(s);

    /* recommendations */
    if (r->cls == AN_UNKNOWN) {
        rec(r, "too few requests yet (%llu of %u) for a verdict",
            (unsigned long long)j->requests, AN_FIRST);
        return 0;
    }
    for (int t = 0; t < r->ntiers; t++) {
        const an_tier_sim *ts = &r->tiers[t];
        int cur = t == 0 ? caps->dram_policy : caps->nvme_policy;
        if (ts->hit[0] < 0)
            continue;
        human(a, sizeof(a), (double)ts->capacity);
        if (cur >= 0 && cur < POLICY_NKINDS && ts->best != cur &&
            ts->hit[ts->best] < ts->hit[cur] + AN_AUTO_MARGIN) {
            rec(r, "[%s] policy = %s (as now): expected hit ratio %.2f at %s, within %.2f of the "
                "best (%s %.2f; static %.2f; Belady's MIN %.2f)", ts->tier,
                an_row_name(cur), ts->hit[cur], a, AN_AUTO_MARGIN, an_row_name(ts->best),
                ts->hit[ts->best], ts->hit[AN_ROW_STATIC], ts->hit[AN_ROW_BELADY]);
            continue;
        }
        rec(r, "[%s] policy = %s: expected hit ratio %.2f at %s (now %s: %.2f; static %.2f; "
            "Belady's MIN %.2f)", ts->tier, an_row_name(ts->best), ts->hit[ts->best], a,
            an_row_name(cur), cur >= 0 && cur < POLICY_NKINDS ? ts->hit[cur] : -1.0,
            ts->hit[AN_ROW_STATIC], ts->hit[AN_ROW_BELADY]);
    }
    chunk = j->chunk_size ? j->chunk_size : caps->chunk_size;
    human(a, sizeof(a), (double)chunk);
    human(b, sizeof(b), (double)r->req_p50);
    human(c, sizeof(c), (double)r->req_p90);
    if ((r->cls == AN_SEQ_LARGE || r->cls == AN_CKPT_BURST) && r->req_p50 >= 2 * chunk)
        rec(r, "chunk size: requests (p50 %s) span several %s chunks; a larger [source] "
            "chunk_size (a multiple of the stripe, up to the request size) halves the per-chunk "
            "work", b, a);
    else if ((r->cls == AN_RANDOM_SMALL || r->cls == AN_STRIDED) && r->share[AN_V_RAND] +
             r->share[AN_V_STRIDE] > 0.5 && r->req_p90 * 8 <= chunk)
        rec(r, "chunk size: most requests (p90 %s) read a small part of each %s chunk, so a "
            "miss reads up to %.0fx what was asked from the source; a smaller [source] "
            "chunk_size (a multiple of the stripe, near the request size) reads less per miss",
            c, a, (double)chunk / (double)(r->req_p90 ? r->req_p90 : 1));
    else
        rec(r, "chunk size: %s chunks fit the requests (p50 %s, p90 %s)", a, b, c);
    human(b, sizeof(b), (double)r->distinct_bytes);
    if (r->cls == AN_SHUFFLED_EPOCH) {
        double bel = r->tiers[0].hit[AN_ROW_BELADY];
        if (r->distinct_bytes <= caps->dram_capacity)
            rec(r, "warmup: the data read so far (~%s) fits in DRAM; `granaryctl warmup` of the "
                "dataset before the job makes every epoch hit (expected hit ratio ~1.00)", b);
        else if (!j->hinted)
            rec(r, "hints: the job reads each item once per pass (~%s, more than DRAM); sending "
                "the sampler's order (gr_hint) lets the prefetcher read ahead of it and evict by "
                "that order, up to Belady's %.2f", b, bel);
        else
            rec(r, "hints: the job sends hints (%llu); keep them ahead of its cursor",
                (unsigned long long)j->hinted);
    } else if (r->cls == AN_SEQ_LARGE || r->cls == AN_CKPT_BURST) {
        rec(r, "read-ahead: sequential readers are served by the read-ahead window; warmup pays "
            "only for data read again (%.0f%% of the sampled chunk reads were re-reads)",
            100.0 * rf.reuse);
    } else if (r->cls == AN_RANDOM_SMALL && rf.hot >= 0.4) {
        rec(r, "a hot set: %.0f%% of the reads come back soon; the policy lines above rank which "
            "policy keeps it best at this capacity", 100.0 * rf.hot);
    }
    if (j->files_seen >= 64 && r->small_file_share >= 0.5 && r->file_p50 <= chunk / 8) {
        human(c, sizeof(c), (double)r->file_p50);
        rec(r, "packing: %.0f%% of the files are smaller than a chunk (p50 %s); packed into "
            "shards of about %s (tar, WebDataset, TFRecord) each miss reads a whole chunk of "
            "samples and the metadata server sees one open per shard, not per file",
            100.0 * r->small_file_share, c, a);
    }
    return 0;
}
