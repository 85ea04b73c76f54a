/*
 * policy.c - eviction policies shared by the cache tiers (see policy.h).
 *
 * Every kind keeps its unpinned nodes in intrusive circular lists with a
 * sentinel (sentinel.next is the newest node, sentinel.prev the oldest) and
 * its pinned nodes in one more list, out of the victim's way.  All
 * operations are O(1), amortised where a loop moves or ages nodes:
 *
 * lru     one list, a hit moves the node to the head, the victim is the tail.
 *
 * lfu     one list per frequency 0..LFU_FMAX (a hit moves a node to the head
 *         of the next list, so each list is in recency order), the victim is
 *         the tail of the lowest non-empty list (ties go to the least
 *         recently used).  Ageing: once the hits and inserts since the last
 *         ageing reach LFU_AGE_K times the number of items, every frequency
 *         is halved (lists 2f and 2f+1 merge into f by last access), O(n)
 *         every O(n) operations.  A hot set that stops being read decays to
 *         frequency 0 in log2(LFU_FMAX) ageings and is then evicted before
 *         anything that is still read.
 *
 * sieve   SIEVE (Zhang et al., NSDI'24): new nodes at the head of one FIFO,
 *         a hit only sets a visited bit; the hand walks from the tail to the
 *         head (then wraps), clearing visited bits, and stops at the first
 *         unvisited node, which is the victim.  Survivors do not move.
 *
 * s3fifo  S3-FIFO (Yang et al., SOSP'23), by bytes: a small FIFO (10% of the
 *         capacity) that new nodes enter, a main FIFO, and a ghost FIFO of
 *         the key hashes evicted from the small one (as many bytes as main).
 *         A hit adds 1 to a counter capped at 3.  Eviction takes the small
 *         FIFO's tail when small holds at least its 10% (or main is empty):
 *         accessed there -> moved to main, else the victim (its hash goes to
 *         the ghost when the caller removes it); otherwise main's tail:
 *         counter > 0 -> decremented and reinserted, else the victim.  A
 *         newcomer whose hash is in the ghost goes straight to main.
 *
 * epoch   For datasets read once per epoch.  When a dataset D a little
 *         larger than the tier C is read over and over, every policy that
 *         always admits churns: each newcomer evicts an item that will be
 *         read before the newcomer is read again (LRU gets 0% when the order
 *         repeats).  Keeping any fixed subset instead hits C/D of the reads,
 *         the optimum.  So the order is LRU, but a full tier admits a
 *         newcomer only on evidence that it is worth more than the LRU tail.
 *         The clock counts accesses (policy_admit + policy_hit).  The hit
 *         age H is an EWMA of how long hit residents had been idle: the
 *         re-reference interval that residents achieve, about one epoch
 *         under epochs.  A resident is stale once idle for more than
 *         T = max(2 * items, 3 * H).  A ghost remembers the hashes of the
 *         last 4 * items refused keys and when each was refused.  Admit if
 *          1. the tail is stale and the newcomer was refused less than T
 *             ago: it is re-read more often than the tail.  LRU-like
 *             turnover for hot sets (Zipf) and drift; first sightings and
 *             one-pass scans are refused.
 *          2. or refused keys come back (ghost hits per ghost entry) more
 *             than twice as often as residents are hit (per resident) over
 *             the last one or two windows of max(H, items) accesses: the
 *             workload moved on (a new job's dataset gets in after about
 *             two of its epochs).
 *          3. or the tail has been idle for 4 T (abandoned) and the key is
 *             in a fixed 1/8 sample of hashes: the last resort when the
 *             new workload's re-reads are too far apart for the ghost.
 *         Under epochs no resident idles more than two epochs (shuffled) or
 *         one (same order), less than T, and refused keys come back at the
 *         same rate as residents, so nothing is admitted and the resident
 *         subset stays fixed: C/D of the reads hit.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "policy.h"

#define LFU_FMAX 255            /* frequencies saturate here */
#define LFU_AGE_K 8             /* halve after K * items hits + inserts */
#define S3_FREQ_MAX 3
#define S3_SMALL_PCT 10
#define GHOST_MIN 64            /* ghost ring entries at policy_new */
#define GHOST_DEAD UINT64_MAX   /* ring size of an entry taken back */
#define EPOCH_T_ITEMS 2         /* stale after at least 2 * items accesses */
#define EPOCH_T_HITS 3          /* ... and 3 * the mean hit age */
#define EPOCH_ABANDONED 4       /* tail idle > 4 T: residents abandoned... */
#define EPOCH_TRICKLE 8         /* ... so admit a fixed one key in 8 */
#define EPOCH_GHOST 4           /* remember 4x the items of refused keys */
#define EPOCH_RATE_X 2          /* refused keys' hit rate per key that beats residents' */
#define EPOCH_RATE_MIN 16       /* ... with at least this much evidence */
#define EPOCH_EWMA 64           /* weight 1/64 for the mean hit age */

enum { W_NONE, W_PINNED, W_Q0, W_Q1 };      /* policy_node.where */
enum { F_VISITED = 1, F_VICTIM = 2 };       /* policy_node.flags */

/* A ghost (S3-FIFO: keys evicted from the small FIFO; epoch: refused keys):
 * a ring of (hash, size, clock) in the order added, with an open-addressing
 * index hash -> ring sequence number.  Entries [tail, head) are in the ring;
 * one taken back is marked dead, skipped when it leaves and squeezed out
 * when the ring fills.  The index holds exactly the live entries. */
typedef struct ghost_slot {
    uint64_t hash;
    uint64_t seq;               /* 0: empty */
} ghost_slot;

typedef struct ghost {
    uint64_t *rhash, *rsize;    /* rcap entries, seq & (rcap - 1) */
    uint64_t *rstamp;           /* epoch: the access clock when added */
    uint64_t rcap;              /* power of two */
    uint64_t head, tail;        /* next sequence number, oldest in the ring */
    uint64_t bytes;             /* sizes of the live entries */
    uint64_t live;              /* live entries */
    ghost_slot *idx;            /* 2 * rcap slots, linear probing */
} ghost;

struct policy {
    policy_kind kind;
    uint64_t capacity;
    uint64_t used;              /* bytes of inserted nodes, pinned included */
    uint64_t count;             /* inserted nodes, pinned included */
    uint64_t tick;              /* lfu: unique, increasing stamps */
    uint64_t accesses;          /* epoch: admit + hit calls, the clock of ages */
    policy_link pinned;
    policy_link q[2];           /* lru/sieve/epoch: q[0]; s3fifo: small, main */
    uint64_t qbytes[2];
    uint64_t qcount[2];
    policy_node *hand;          /* sieve: next node to examine, NULL = the tail */
    policy_link *bucket;        /* lfu: LFU_FMAX + 1 lists */
    unsigned minf;              /* lfu: lowest non-empty bucket (when qcount[0]) */
    uint64_t since_age;         /* lfu: hits + inserts since the last ageing */
    uint64_t small_target;      /* s3fifo: bytes of the small FIFO */
    ghost ghost;                /* s3fifo, epoch */
    double hit_age;             /* epoch: EWMA of the ages at hits, 0 = no hit yet */
    uint64_t res_hits[2];       /* epoch: hits on residents, last window and this one */
    uint64_t ghost_hits[2];     /* epoch: misses on refused keys still in the ghost, ditto */
    uint64_t window_start;      /* epoch: clock at the start of this window */
};

static const char *const kind_names[POLICY_NKINDS] = {
    [POLICY_LRU] = "lru", [POLICY_LFU] = "lfu", [POLICY_SIEVE] = "sieve",
    [POLICY_S3FIFO] = "s3fifo", [POLICY_EPOCH] = "epoch",
};

/* ---- lists ---- */

static void pl_init(policy_link *l)
{
    gr__list_init(l);
}

static int pl_empty(const policy_link *l)
{
    return gr__list_empty(l);
}

static void pl_push_head(policy_link *l, policy_node *n)
{
    gr__list_push_front(l, &n->link);
}

static void pl_unlink(policy_node *n)
{
    gr__list_remove(&n->link);
}

static policy_node *node_of(policy_link *l)
{
    return (policy_node *)((char *)l - offsetof(policy_node, link));
}

static policy_node *pl_tail(policy_link *l)
{
    return pl_empty(l) ? NULL : node_of(l->prev);
}

/* splitmix64's finaliser: callers' hashes may be weak in the low bits. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- S3-FIFO's ghost ---- */

static int ghost_alloc(ghost *g, uint64_t rcap)
{
    g->rhash = malloc(rcap * sizeof(*g->rhash));
    g->rsize = malloc(rcap * sizeof(*g->rsize));
    g->rstamp = malloc(rcap * sizeof(*g->rstamp));
    g->idx = calloc(2 * rcap, sizeof(*g->idx));
    if (!g->rhash || !g->rsize || !g->rstamp || !g->idx) {
        free(g->rhash);
        free(g->rsize);
        free(g->rstamp);
        free(g->idx);
        return -ENOMEM;
    }
    g->rcap = rcap;
    return 0;
}

static void ghost_release(ghost *g)
{
    free(g->rhash);
    free(g->rsize);
    free(g->rstamp);
    free(g->idx);
    memset(g, 0, sizeof(*g));
}

/* Index slot holding hash h, or -1. */
static int64_t ghost_find(const ghost *g, uint64_t h)
{
    uint64_t mask = 2 * g->rcap - 1;

    for (uint64_t i = mix64(h) & mask; g->idx[i].seq; i = (i + 1) & mask)
        if (g->idx[i].hash == h)
            return (int64_t)i;
    return -1;
}

static void ghost_idx_put(ghost *g, uint64_t h, uint64_t seq)
{
    uint64_t mask = 2 * g->rcap - 1, i = mix64(h) & mask;

    while (g->idx[i].seq)
        i = (i + 1) & mask;
    g->idx[i].hash = h;
    g->idx[i].seq = seq;
}

/* Delete index slot i, shifting later members of its run back so that
 * lookups never stop at a hole. */
static void ghost_idx_del(ghost *g, uint64_t i)
{
    uint64_t mask = 2 * g->rcap - 1, j = i;

    for (;;) {
        j = (j + 1) & mask;
        if (!g->idx[j].seq)
            break;
        uint64_t k = mix64(g->idx[j].hash) & mask;
        /* Move j into the hole at i unless its home k lies in (i, j]. */
        if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
            g->idx[i] = g->idx[j];
            i = j;
        }
    }
    g->idx[i].seq = 0;
}

/* Forget the oldest ring entry. */
static void ghost_pop(ghost *g)
{
    uint64_t seq = g->tail++, r = seq & (g->rcap - 1);

    if (g->rsize[r] == GHOST_DEAD)
        return;
    int64_t i = ghost_find(g, g->rhash[r]);
    if (i >= 0 && g->idx[i].seq == seq)
        ghost_idx_del(g, (uint64_t)i);
    g->bytes -= g->rsize[r];
    g->live--;
}

/* Move the live entries, oldest first, into a ring of rcap entries (the
 * same size, to squeeze dead entries out, or larger).  -ENOMEM leaves g as
 * it was. */
static int ghost_rebuild(ghost *g, uint64_t rcap)
{
    ghost n;
    uint64_t seq = 1;

    memset(&n, 0, sizeof(n));
    if (ghost_alloc(&n, rcap) < 0)
        return -ENOMEM;
    for (uint64_t s = g->tail; s != g->head; s++) {
        uint64_t r = s & (g->rcap - 1), nr = seq & (n.rcap - 1);
        if (g->rsize[r] == GHOST_DEAD)
            continue;
        n.rhash[nr] = g->rhash[r];
        n.rsize[nr] = g->rsize[r];
        n.rstamp[nr] = g->rstamp[r];
        ghost_idx_put(&n, g->rhash[r], seq);
        seq++;
    }
    n.tail = 1;
    n.head = seq;
    n.bytes = g->bytes;
    n.live = g->live;
    ghost_release(g);
    *g = n;
    return 0;
}

/* Take h back out of the ghost: 1 if it was there (and *stamp is the clock
 * it was added with, when stamp is not NULL), else 0. */
static int ghost_take(ghost *g, uint64_t h, uint64_t *stamp)
{
    int64_t i = ghost_find(g, h);

    if (i < 0)
        return 0;
    uint64_t r = g->idx[i].seq & (g->rcap - 1);
    if (stamp)
        *stamp = g->rstamp[r];
    g->bytes -= g->rsize[r];
    g->rsize[r] = GHOST_DEAD;
    ghost_idx_del(g, (uint64_t)i);
    g->live--;
    return 1;
}

/* Remember h (size bytes) at clock stamp, replacing any older entry.  The
 * ghost keeps at most max_bytes and grows its ring only while it has fewer
 * than max_entries. */
static void ghost_add(ghost *g, uint64_t h, uint64_t size, uint64_t stamp,
                      uint64_t max_bytes, uint64_t max_entries)
{
    ghost_take(g, h, NULL);
    if (g->head - g->tail == g->rcap) {
        /* Full: squeeze out taken-back entries if they are half the ring,
         * else grow up to max_entries, else forget the oldest.  Each
         * rebuild is paid for by rcap / 2 adds since the last one. */
        uint64_t cap = g->live < g->rcap / 2 ? g->rcap
                     : g->rcap < max_entries ? 2 * g->rcap : 0;
        if (!cap || ghost_rebuild(g, cap) < 0)
            ghost_pop(g);
    }
    uint64_t seq = g->head++, r = seq & (g->rcap - 1);
    g->rhash[r] = h;
    g->rsize[r] = size;
    g->rstamp[r] = stamp;
    g->bytes += size;
    g->live++;
    ghost_idx_put(g, h, seq);
    while (g->bytes > max_bytes && g->tail != g->head)
        ghost_pop(g);
}

/* ---- lfu ---- */

static void lfu_add(policy *p, policy_node *n)
{
    pl_push_head(&p->bucket[n->freq], n);
    if (!p->qcount[0]++ || n->freq < p->minf)
        p->minf = n->freq;
}

static void lfu_del(policy *p, policy_node *n)
{
    pl_unlink(n);
    if (--p->qcount[0] && n->freq == p->minf)
        while (pl_empty(&p->bucket[p->minf]))
            p->minf++;
}

/* Merge two recency-ordered lists into dst (empty), newest first. */
static void lfu_merge(policy_link *dst, policy_link *a, policy_link *b)
{
    /* Walk from the oldest end, pushing each at dst's head: the newest ends
     * up first. */
    for (;;) {
        policy_node *x = pl_tail(a), *y = pl_tail(b), *m;
        if (!x && !y)
            break;
        m = !y || (x && x->stamp < y->stamp) ? x : y;
        pl_unlink(m);
        pl_push_head(dst, m);
    }
}

static void lfu_age(policy *p)
{
    policy_link tmp;

    for (unsigned f = 0; f <= LFU_FMAX; f++)
        for (policy_link *l = p->bucket[f].next; l != &p->bucket[f]; l = l->next)
            node_of(l)->freq = f / 2;
    for (policy_link *l = p->pinned.next; l != &p->pinned; l = l->next)
        node_of(l)->freq /= 2;
    for (unsigned k = 0; k <= LFU_FMAX / 2; k++) {
        pl_init(&tmp);
        lfu_merge(&tmp, &p->bucket[2 * k], &p->bucket[2 * k + 1]);
        if (pl_empty(&tmp))
            continue;
        /* bucket[k] is empty: k < 2k was consumed at step k / 2 (k = 0 just now). */
        p->bucket[k].next = tmp.next;
        p->bucket[k].prev = tmp.prev;
        tmp.next->prev = &p->bucket[k];
        tmp.prev->next = &p->bucket[k];
    }
    p->since_age = 0;
    p->minf = 0;
    if (p->qcount[0])
        while (pl_empty(&p->bucket[p->minf]))
            p->minf++;
}

static void lfu_count_access(policy *p)
{
    if (++p->since_age >= LFU_AGE_K * (p->count ? p->count : 1))
        lfu_age(p);
}

/* ---- s3fifo ---- */

static void s3_add(policy *p, policy_node *n, int q)
{
    n->where = (uint8_t)(W_Q0 + q);
    pl_push_head(&p->q[q], n);
    p->qbytes[q] += n->size;
    p->qcount[q]++;
}

static void s3_del(policy *p, policy_node *n)
{
    int q = n->where - W_Q0;

    pl_unlink(n);
    p->qbytes[q] -= n->size;
    p->qcount[q]--;
}

static policy_node *s3_victim(policy *p)
{
    for (;;) {
        policy_node *t;
        if (p->qcount[0] && (p->qbytes[0] >= p->small_target || !p->qcount[1])) {
            t = pl_tail(&p->q[0]);
            if (t->freq) {                  /* read while small: promote */
                s3_del(p, t);
                t->freq = 0;
                s3_add(p, t, 1);
                continue;
            }
            t->flags |= F_VICTIM;
            return t;
        }
        t = pl_tail(&p->q[1]);
        if (!t)
            return NULL;
        if (t->freq) {                      /* read since it came round: again */
            t->freq--;
            pl_unlink(t);
            pl_push_head(&p->q[1], t);
            continue;
        }
        return t;
    }
}

/* ---- epoch ---- */

/* T: a resident idle for more accesses than this is stale. */
static uint64_t epoch_stale_after(const policy *p)
{
    uint64_t t = EPOCH_T_ITEMS * p->count;
    double h = EPOCH_T_HITS * p->hit_age;

    return h > (double)t ? (uint64_t)h : t;
}

/* Start a new counting window when this one has lasted about one
 * re-reference interval (the mean hit age), so that the last two windows
 * cover at least one epoch whatever its length. */
static void epoch_window(policy *p)
{
    uint64_t w = (uint64_t)p->hit_age > p->count ? (uint64_t)p->hit_age : p->count;
    uint64_t elapsed = p->accesses - p->window_start;

    if (elapsed < w)
        return;
    p->res_hits[0] = elapsed < 2 * w ? p->res_hits[1] : 0;
    p->ghost_hits[0] = elapsed < 2 * w ? p->ghost_hits[1] : 0;
    p->res_hits[1] = p->ghost_hits[1] = 0;
    p->window_start = p->accesses;
}

/* The epoch policy's admission of a newcomer into a full tier (the file
 * comment has the reasoning). */
static int epoch_admit(policy *p, uint64_t key_hash, uint64_t size)
{
    policy_node *t = pl_tail(&p->q[0]);
    uint64_t age, stale, seen = 0;
    int known;

    if (!t)
        return 0;                   /* full of pinned items */
    stale = epoch_stale_after(p);
    epoch_window(p);
    age = p->accesses - t->stamp;
    known = ghost_take(&p->ghost, key_hash, &seen);
    if (known)
        p->ghost_hits[1]++;
    if (known && age > stale && p->accesses - seen <= stale)
        return 1;                   /* the tail is stale, the newcomer is not */
    uint64_t rh = p->res_hits[0] + p->res_hits[1], gh = p->ghost_hits[0] + p->ghost_hits[1];
    if (known && gh >= EPOCH_RATE_MIN && gh * p->count > EPOCH_RATE_X * rh * (p->ghost.live + 1))
        return 1;                   /* refused keys come back more than residents do */
    if (age > EPOCH_ABANDONED * stale && !(mix64(key_hash) % EPOCH_TRICKLE))
        return 1;                   /* residents abandoned: let a fixed 1/8 of keys in */
    ghost_add(&p->ghost, key_hash, size, p->accesses, EPOCH_GHOST * p->capacity,
              EPOCH_GHOST * (p->count > GHOST_MIN ? p->count : GHOST_MIN));
    return 0;
}

/* ---- kind dispatch: attach/detach a node to the unpinned structure ---- */

/* Put n (not inserted, or just taken off the pinned list) among the
 * evictable nodes.  fresh: a new insert rather than an unpin. */
static void attach(policy *p, policy_node *n, int fresh)
{
    switch (p->kind) {
    case POLICY_LRU:
    case POLICY_EPOCH:
        n->stamp = p->accesses;
        n->where = W_Q0;
        pl_push_head(&p->q[0], n);
        p->qcount[0]++;
        break;
    case POLICY_SIEVE:
        n->flags = fresh ? 0 : F_VISITED;
        n->where = W_Q0;
        pl_push_head(&p->q[0], n);
        p->qcount[0]++;
        break;
    case POLICY_LFU:
        if (fresh)
            n->freq = 1;
        n->stamp = ++p->tick;
        n->where = W_Q0;
        lfu_add(p, n);
        break;
    case POLICY_S3FIFO:
        if (fresh) {
            n->freq = 0;
            s3_add(p, n, ghost_take(&p->ghost, n->key_hash, NULL));
        } else {
            s3_add(p, n, 1);
        }
        break;
    default:
        break;
    }
}

/* Take n off the evictable nodes. */
static void detach(policy *p, policy_node *n)
{
    switch (p->kind) {
    case POLICY_SIEVE:
        if (p->hand == n)
            p->hand = n->link.prev == &p->q[0] ? NULL : node_of(n->link.prev);
        /* fall through */
    case POLICY_LRU:
    case POLICY_EPOCH:
        pl_unlink(n);
        p->qcount[0]--;
        break;
    case POLICY_LFU:
        lfu_del(p, n);
        break;
    case POLICY_S3FIFO:
        s3_del(p, n);
        break;
    default:
        break;
    }
    n->flags &= (uint8_t)~F_VICTIM;
}

/* ---- public ---- */

int policy_kind_parse(const char *name, policy_kind *out)
{
    for (int k = 0; k < POLICY_NKINDS; k++)
        if (name && !strcasecmp(name, kind_names[k])) {
            *out = (policy_kind)k;
            return 0;
        }
    return -EINVAL;
}

const char *policy_kind_name(policy_kind k)
{
    return (unsigned)k < POLICY_NKINDS ? kind_names[k] : "?";
}

int policy_new(policy_kind k, uint64_t capacity, policy **out)
{
    policy *p;

    if ((unsigned)k >= POLICY_NKINDS || !capacity)
        return -EINVAL;
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->kind = k;
    p->capacity = capacity;
    pl_init(&p->pinned);
    pl_init(&p->q[0]);
    pl_init(&p->q[1]);
    if (k == POLICY_LFU) {
        p->bucket = malloc((LFU_FMAX + 1) * sizeof(*p->bucket));
        if (!p->bucket)
            goto fail;
        for (unsigned f = 0; f <= LFU_FMAX; f++)
            pl_init(&p->bucket[f]);
    }
    if (k == POLICY_S3FIFO)
        p->small_target = capacity / 100 * S3_SMALL_PCT +
                          capacity % 100 * S3_SMALL_PCT / 100;
    if (k == POLICY_S3FIFO || k == POLICY_EPOCH) {
        if (ghost_alloc(&p->ghost, GHOST_MIN) < 0)
            goto fail;
        p->ghost.head = p->ghost.tail = 1;
    }
    *out = p;
    return 0;
fail:
    free(p->bucket);
    free(p);
    return -ENOMEM;
}

void policy_free(policy **pp)
{
    policy *p = pp ? *pp : NULL;

    if (!p)
        return;
    free(p->bucket);
    if (p->kind == POLICY_S3FIFO || p->kind == POLICY_EPOCH)
        ghost_release(&p->ghost);
    free(p);
    *pp = NULL;
}

void policy_node_init(policy_node *n, uint64_t key_hash, uint64_t size)
{
    memset(n, 0, sizeof(*n));
    n->key_hash = key_hash;
    n->size = size;
}

int policy_admit(policy *p, uint64_t key_hash, uint64_t size)
{
    p->accesses++;
    if (size > p->capacity)
        return 0;
    if (p->kind != POLICY_EPOCH || p->used + size <= p->capacity)
        return 1;
    return epoch_admit(p, key_hash, size);
}

void policy_insert(policy *p, policy_node *n)
{
    p->used += n->size;
    p->count++;
    attach(p, n, 1);
    if (p->kind == POLICY_LFU)
        lfu_count_access(p);
}

void policy_hit(policy *p, policy_node *n)
{
    int pinned = n->where == W_PINNED;

    n->flags &= (uint8_t)~F_VICTIM;
    switch (p->kind) {
    case POLICY_EPOCH: {
        double age = (double)(++p->accesses - n->stamp);
        n->stamp = p->accesses;
        if (!pinned) {      /* a pinned item's hits say nothing about eviction */
            p->hit_age = p->hit_age > 0 ? p->hit_age + (age - p->hit_age) / EPOCH_EWMA : age;
            epoch_window(p);
            p->res_hits[1]++;
            pl_unlink(n);
            pl_push_head(&p->q[0], n);
        }
        break;
    }
    case POLICY_LRU:
        p->accesses++;
        if (!pinned) {
            pl_unlink(n);
            pl_push_head(&p->q[0], n);
        }
        break;
    case POLICY_SIEVE:
        n->flags |= F_VISITED;
        break;
    case POLICY_LFU:
        if (pinned) {
            if (n->freq < LFU_FMAX)
                n->freq++;
        } else {
            lfu_del(p, n);
            if (n->freq < LFU_FMAX)
                n->freq++;
            n->stamp = ++p->tick;
            lfu_add(p, n);
        }
        lfu_count_access(p);
        break;
    case POLICY_S3FIFO:
        if (n->freq < S3_FREQ_MAX)
            n->freq++;
        break;
    default:
        break;
    }
}

void policy_remove(policy *p, policy_node *n)
{
    if (n->where == W_PINNED) {
        pl_unlink(n);
    } else {
        int ghosted = p->kind == POLICY_S3FIFO && n->where == W_Q0 && (n->flags & F_VICTIM);
        detach(p, n);
        if (ghosted) {
            uint64_t main_bytes = p->capacity - p->small_target;
            uint64_t entries = 2 * (p->count > GHOST_MIN ? p->count : GHOST_MIN);
            ghost_add(&p->ghost, n->key_hash, n->size, 0, main_bytes, entries);
        }
    }
    n->where = W_NONE;
    p->used -= n->size;
    p->count--;
}

policy_node *policy_victim(policy *p)
{
    policy_node *n;

    switch (p->kind) {
    case POLICY_LRU:
    case POLICY_EPOCH:
        return pl_tail(&p->q[0]);
    case POLICY_LFU:
        return p->qcount[0] ? pl_tail(&p->bucket[p->minf]) : NULL;
    case POLICY_S3FIFO:
        return s3_victim(p);
    case POLICY_SIEVE:
        if (!p->qcount[0])
            return NULL;
        n = p->hand ? p->hand : pl_tail(&p->q[0]);
        while (n->flags & F_VISITED) {
            n->flags &= (uint8_t)~F_VISITED;
            policy_link *l = n->link.prev == &p->q[0] ? p->q[0].prev : n->link.prev;
            n = node_of(l);
        }
        p->hand = n;
        return n;
    default:
        return NULL;
    }
}

void policy_pin(policy *p, policy_node *n, int pinned)
{
    if (!pinned == (n->where != W_PINNED))
        return;
    if (pinned) {
        detach(p, n);
        n->where = W_PINNED;
        pl_push_head(&p->pinned, n);
    } else {
        pl_unlink(n);
        attach(p, n, 0);
    }
}

uint64_t policy_used(const policy *p)
{
    return p->used;
}

uint64_t policy_count(const policy *p)
{
    return p->count;
}

uint64_t policy_capacity(const policy *p)
{
    return p->capacity;
}

policy_kind policy_get_kind(const policy *p)
{
    return p->kind;
}

/* Walk one list: links consistent, every node where it should be; adds its
 * nodes and bytes.  0 or -1. */
static int list_sane(const policy_link *l, uint8_t where, uint64_t *n, uint64_t *bytes)
{
    for (const policy_link *x = l->next, *prev = l; ; prev = x, x = x->next) {
        if (x->prev != prev)
            return -1;
        if (x == l)
            return 0;
        const policy_node *nd = (const policy_node *)((const char *)x - offsetof(policy_node, link));
        if (nd->where != where)
            return -1;
        (*n)++;
        *bytes += nd->size;
    }
}

int policy_sane(const policy *p)
{
    uint64_t n = 0, bytes = 0, qn[2] = {0, 0}, qb[2] = {0, 0};

    if (list_sane(&p->pinned, W_PINNED, &n, &bytes))
        return -1;
    if (p->kind == POLICY_LFU) {
        for (unsigned f = 0; f <= LFU_FMAX; f++) {
            uint64_t before = qn[0];
            if (list_sane(&p->bucket[f], W_Q0, &qn[0], &qb[0]))
                return -2;
            if (qn[0] > before && f < p->minf)
                return -3;                  /* minf is not the minimum */
            for (const policy_link *x = p->bucket[f].next; x != &p->bucket[f]; x = x->next) {
                const policy_node *a = (const policy_node *)((const char *)x - offsetof(policy_node, link));
                if (a->freq != f)
                    return -4;
                if (x->next != &p->bucket[f] &&
                    a->stamp < ((const policy_node *)((const char *)x->next -
                                offsetof(policy_node, link)))->stamp)
                    return -5;              /* not in recency order */
            }
        }
        if (qn[0] && pl_empty(&p->bucket[p->minf]))
            return -3;
    } else {
        for (int q = 0; q < 2; q++)
            if (list_sane(&p->q[q], (uint8_t)(W_Q0 + q), &qn[q], &qb[q]))
                return -2;
    }
    if (qn[0] != p->qcount[0] || qn[1] != p->qcount[1])
        return -6;
    if (p->kind == POLICY_S3FIFO && (qb[0] != p->qbytes[0] || qb[1] != p->qbytes[1]))
        return -7;
    if (n + qn[0] + qn[1] != p->count || bytes + qb[0] + qb[1] != p->used)
        return -8;
    if (p->kind == POLICY_SIEVE && p->hand && p->hand->where != W_Q0)
        return -9;
    if (p->kind == POLICY_S3FIFO || p->kind == POLICY_EPOCH) {
        const ghost *g = &p->ghost;
        uint64_t live = 0, gb = 0, slots = 0;
        for (uint64_t s = g->tail; s != g->head; s++) {
            uint64_t r = s & (g->rcap - 1);
            if (g->rsize[r] == GHOST_DEAD)
                continue;
            live++;
            gb += g->rsize[r];
            int64_t i = ghost_find(g, g->rhash[r]);
            if (i < 0 || g->idx[i].seq != s)
                return -10;
        }
        for (uint64_t i = 0; i < 2 * g->rcap; i++)
            slots += g->idx[i].seq != 0;
        if (slots != live || gb != g->bytes || g->head - g->tail > g->rcap)
            return -11;
    }
    return 0;
}

int policy_switch(policy **pp, policy_kind k, policy_node **pinned_nodes, size_t npinned)
{
    policy *old = *pp, *np;
    policy_node *v;
    int rc = policy_new(k, policy_capacity(old), &np);

    if (rc < 0)
        return rc;
    while ((v = policy_victim(old))) {
        policy_remove(old, v);
        policy_node_init(v, v->key_hash, v->size);
        policy_insert(np, v);
    }
    for (size_t i = 0; i < npinned; i++) {
        v = pinned_nodes[i];
        policy_remove(old, v);
        policy_node_init(v, v->key_hash, v->size);
        policy_insert(np, v);
        policy_pin(np, v, 1);
    }
    policy_free(&old);
    *pp = np;
    return 0;
}
