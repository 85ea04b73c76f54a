/*
 * store.c - the NVMe tier (see store.h): a RocksDB index with small chunks
 * inline, larger chunks in O_DIRECT slots of per-size-class data files, an
 * in-memory hash table and LRU, and byte accounting that keeps the whole
 * directory under its capacity at every moment.
 *
 * Layout under cfg->path:
 *   index/               RocksDB.  Keys: 'C'+key -> chunk record (below, +
 *                        the bytes when inline); 'A'+key -> u64 last access
 *                        written back at close; "M" -> format version.
 *   data-<bytes>.dat     slots of one size class; slot i at i * bytes.  Only
 *                        round_up(len, 4096) bytes of a slot are ever
 *                        allocated; the rest stays a hole.
 *
 * Chunk record (little-endian, ST_REC_HDR bytes): u8 version, u8 kind
 * (inline/slot), u16 0, u32 0, u64 class bytes, u64 slot, u64 length,
 * u64 XXH3-64 of the bytes, u64 access time (ns, strictly increasing).
 *
 * Space accounting.  used = slot_bytes + meta_live + garbage + reserve:
 *   slot_bytes  allocated slot bytes: live, dead but not yet punched, and
 *               reserved by puts in flight;
 *   meta_live   2 x the SST bytes of each live record (x2: a compaction
 *               holds its inputs and outputs at once);
 *   garbage     2 x the SST bytes of superseded records and tombstones that
 *               RocksDB still holds.  Only our own full compaction
 *               (flush + compact_range) is trusted to remove them: it
 *               subtracts what was garbage when it started;
 *   reserve     a fixed bound for everything else RocksDB writes: WAL (two
 *               memtables), MANIFEST, LOG files, OPTIONS, small files.
 * Every charge is taken before the bytes reach the disk and given back only
 * after they left it, so du(path) <= used <= capacity.  Preallocation is
 * off in RocksDB (allow_fallocate=false) so its files are no larger than
 * their contents.
 *
 * Locking: s->lock guards the table, LRU, free lists and counters; disk I/O
 * and RocksDB calls run outside it.  A put additionally holds the stripe
 * lock of its key across its RocksDB write and the table update, so two
 * puts of one key land in RocksDB and in memory in the same order.  Lock
 * order: stripe, then s->lock.
 *
 * Entry lifetime: the table holds one reference; each reader holds one.
 * Whoever removes an entry (delete, evict, replace, bad checksum) unlinks
 * it, marks it dead, writes the tombstone, then drops the table's
 * reference.  The last reference punches the slot and frees it, so a slot
 * is never reused while a reader copies out of it, nor before its index
 * entry is gone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <rocksdb/c.h>
#include <xxhash.h>

#include "log.h"
#include "store.h"

#define ST_REC_VERSION   1
#define ST_REC_HDR       48
#define ST_KIND_INLINE   0
#define ST_KIND_SLOT     1
#define ST_PFX_ATIME     'A'
#define ST_PFX_CHUNK     'C'
#define ST_META_KEY      "M"
#define ST_META_MAGIC    0x31545347u            /* "GST1" */
#define ST_DBKEY_LEN     (1 + STORE_KEY_LEN)
#define ST_INLINE        0xff                   /* st_entry.cls of an inline chunk */

/* SST bytes per entry beyond key and value: internal key trailer (8),
 * varints, restart array, the entry's share of the index block, block
 * trailers.  Measured after a full compaction: 15 B per entry with 1 KiB
 * values, 42 B with 64 KiB values (each its own block and index entry). */
#define ST_SST_OVERHEAD  64
#define ST_REC_BYTES(inl_len) ((uint64_t)ST_DBKEY_LEN + ST_REC_HDR + (inl_len) + ST_SST_OVERHEAD)
#define ST_AREC_BYTES    ((uint64_t)ST_DBKEY_LEN + 8 + ST_SST_OVERHEAD)
#define ST_TOMB_BYTES    ((uint64_t)ST_DBKEY_LEN + ST_SST_OVERHEAD)

/* RocksDB options that bound its own files (see st_reserve). */
#define ST_WRITE_BUFFER  (4u << 20)
#define ST_MANIFEST_MAX  (1u << 20)
#define ST_LOG_MAX       (512u << 10)  /* at WARN level RocksDB logs little */
#define ST_LOG_KEEP      2
#define ST_BATCH_MAX     (256u << 10)   /* largest WriteBatch we write */
#define ST_BATCH_KEYS    4096           /* keys per deletion batch (< ST_BATCH_MAX) */
#define ST_SMALL_FILES   (2u << 20)     /* OPTIONS, CURRENT, IDENTITY, LOCK, dirs, a new WAL */

#define ST_INLINE_LIMIT  (1u << 20)     /* largest inline_max accepted */
#define ST_CHUNK_LIMIT   (1u << 30)     /* largest max_chunk accepted (u32 lengths) */
#define ST_COMPACT_MIN   (4u << 20)     /* garbage worth a full compaction */
#define ST_EVICT_BATCH   32
#define ST_STRIPES       64

typedef struct st_entry {
    uint8_t key[STORE_KEY_LEN];
    struct st_entry *hnext;             /* hash chain */
    struct st_entry *newer, *older;     /* LRU links; NULL ends */
    uint64_t csum;                      /* XXH3-64 of the chunk bytes */
    uint64_t atime;                     /* last access, ns; orders the LRU */
    uint32_t len;                       /* chunk length */
    uint32_t slot;                      /* slot index in class cls */
    uint32_t refs;                      /* table (while live) + readers + remover */
    uint8_t cls;                        /* class index or ST_INLINE */
    uint8_t dead;                       /* unlinked from table and LRU */
    uint8_t touched;                    /* read since open: atime to write back */
    uint8_t has_arec;                   /* an 'A' record exists in RocksDB */
} st_entry;

typedef struct st_class {
    uint64_t size;                      /* bytes per slot, multiple of STORE_ALIGN */
    int fd;                             /* data-<size>.dat */
    uint32_t nslots;                    /* slots handed out so far (high-water) */
    uint32_t *free;                     /* min-heap of free slots < nslots */
    uint32_t nfree, cfree;
} st_class;

struct store {
    char *path;
    uint64_t capacity, inline_max, max_chunk;
    uint64_t reserve;                   /* fixed charge for RocksDB's own files */
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_readoptions_t *ropts;
    rocksdb_writeoptions_t *wopts;
    rocksdb_flushoptions_t *fopts;
    rocksdb_compactoptions_t *copts;
    st_class *cls;
    int ncls;
    int buffered;                       /* O_DIRECT refused: plain I/O */

    pthread_mutex_t stripes[ST_STRIPES];
    pthread_mutex_t lock;
    pthread_cond_t cv;                  /* broadcast when space comes back */
    /* Everything below is guarded by lock. */
    st_entry **tab;                     /* hash buckets, tabmask + 1 of them */
    size_t tabmask;
    uint64_t count;
    st_entry *mru, *lru;
    uint64_t slot_bytes, meta_live, garbage, garbage_settled, pending_free;
    uint64_t tick;
    int compacting;
    int inflight;                       /* puts holding a reservation, not linked yet */
    store_stats st;
};

/* ---- small helpers ---- */

static uint64_t st_round(uint64_t x)
{
    return (x + STORE_ALIGN - 1) & ~(uint64_t)(STORE_ALIGN - 1);
}

static void st_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t st_get64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void st_dbkey(uint8_t out[ST_DBKEY_LEN], char pfx, const uint8_t key[STORE_KEY_LEN])
{
    out[0] = (uint8_t)pfx;
    memcpy(out + 1, key, STORE_KEY_LEN);
}

typedef struct st_rec {
    unsigned kind;
    uint64_t cls_bytes, slot, len, csum, atime;
} st_rec;

static void st_rec_encode(uint8_t out[ST_REC_HDR], const st_rec *r)
{
    memset(out, 0, 8);
    out[0] = ST_REC_VERSION;
    out[1] = (uint8_t)r->kind;
    st_put64(out + 8, r->cls_bytes);
    st_put64(out + 16, r->slot);
    st_put64(out + 24, r->len);
    st_put64(out + 32, r->csum);
    st_put64(out + 40, r->atime);
}

/* 0, or -EINVAL when the value is not a well-formed record. */
static int st_rec_decode(const uint8_t *v, size_t vlen, st_rec *r)
{
    if (vlen < ST_REC_HDR || v[0] != ST_REC_VERSION || v[1] > ST_KIND_SLOT)
        return -EINVAL;
    r->kind = v[1];
    r->cls_bytes = st_get64(v + 8);
    r->slot = st_get64(v + 16);
    r->len = st_get64(v + 24);
    r->csum = st_get64(v + 32);
    r->atime = st_get64(v + 40);
    if (r->kind == ST_KIND_INLINE ? vlen != ST_REC_HDR + r->len : vlen != ST_REC_HDR)
        return -EINVAL;
    return 0;
}

static uint64_t st_hash(const uint8_t key[STORE_KEY_LEN])
{
    return XXH3_64bits(key, STORE_KEY_LEN);
}

static uint64_t st_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A strictly increasing access time: wall-clock ns, so it means something
 * to a later policy, but never equal or backwards, so the LRU order
 * survives a restart exactly. */
static uint64_t st_tick_locked(store *s)
{
    uint64_t now = st_now_ns();

    s->tick = now > s->tick ? now : s->tick + 1;
    return s->tick;
}

/* Smallest class whose slots hold alen bytes, or -1. */
static int st_class_for(const store *s, uint64_t alen)
{
    int lo = 0, hi = s->ncls;

    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->cls[mid].size < alen)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->ncls ? lo : -1;
}

static int st_class_by_size(const store *s, uint64_t size)
{
    int c = st_class_for(s, size);

    return c >= 0 && s->cls[c].size == size ? c : -1;
}

static int st_is_inline(const st_entry *e)
{
    return e->cls == ST_INLINE;
}

/* What a live entry adds to meta_live: its records and, paid in advance,
 * their tombstones, so that removing it never needs room. */
static uint64_t st_meta_charge(const st_entry *e)
{
    return 2 * (ST_REC_BYTES(st_is_inline(e) ? e->len : 0) + ST_TOMB_BYTES) +
           (e->has_arec ? 2 * (ST_AREC_BYTES + ST_TOMB_BYTES) : 0);
}

static uint64_t st_used_locked(const store *s)
{
    return s->slot_bytes + s->meta_live + s->garbage + s->reserve;
}

/* Garbage above which a full compaction pays: half the live metadata (so
 * compaction rewrites at most ~3 bytes per garbage byte), at least
 * ST_COMPACT_MIN, at most a quarter of the space left after the reserve. */
static uint64_t st_compact_thr_locked(const store *s)
{
    uint64_t thr = s->meta_live / 2, cap = (s->capacity - s->reserve) / 4;

    if (thr < ST_COMPACT_MIN)
        thr = ST_COMPACT_MIN;
    return thr < cap ? thr : cap;
}

/* ---- hash table and LRU (all _locked) ---- */

static st_entry **st_bucket_locked(store *s, const uint8_t key[STORE_KEY_LEN])
{
    return &s->tab[st_hash(key) & s->tabmask];
}

static st_entry *st_find_locked(store *s, const uint8_t key[STORE_KEY_LEN])
{
    st_entry *e;

    for (e = *st_bucket_locked(s, key); e; e = e->hnext)
        if (memcmp(e->key, key, STORE_KEY_LEN) == 0)
            return e;
    return NULL;
}

/* Double the bucket array when the load passes 1.  Failure to grow only
 * makes chains longer. */
static void st_grow_locked(store *s)
{
    size_t n = (s->tabmask + 1) * 2;
    st_entry **t;

    if (s->count < s->tabmask + 1 || !(t = calloc(n, sizeof(*t))))
        return;
    for (size_t i = 0; i <= s->tabmask; i++) {
        st_entry *e = s->tab[i], *next;
        for (; e; e = next) {
            size_t b = st_hash(e->key) & (n - 1);
            next = e->hnext;
            e->hnext = t[b];
            t[b] = e;
        }
    }
    free(s->tab);
    s->tab = t;
    s->tabmask = n - 1;
}

static void st_lru_unlink_locked(store *s, st_entry *e)
{
    if (e->newer)
        e->newer->older = e->older;
    else
        s->mru = e->older;
    if (e->older)
        e->older->newer = e->newer;
    else
        s->lru = e->newer;
    e->newer = e->older = NULL;
}

static void st_lru_push_locked(store *s, st_entry *e)
{
    e->newer = NULL;
    e->older = s->mru;
    if (s->mru)
        s->mru->newer = e;
    else
        s->lru = e;
    s->mru = e;
}

/* Link a new entry (key not present) into the table as most recent. */
static void st_link_locked(store *s, st_entry *e)
{
    st_entry **b;

    st_grow_locked(s);
    b = st_bucket_locked(s, e->key);
    e->hnext = *b;
    *b = e;
    st_lru_push_locked(s, e);
    s->count++;
}

static void st_unhash_locked(store *s, st_entry *e)
{
    st_entry **p = st_bucket_locked(s, e->key);

    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    e->hnext = NULL;
    st_lru_unlink_locked(s, e);
    s->count--;
    e->dead = 1;
}

/*
 * Remove a live entry whose records are about to be deleted from RocksDB:
 * its metadata charge (records and tombstones) becomes garbage, its slot
 * bytes become pending_free; used does not change.  The caller owns the
 * table's reference from now on and settles st_meta_charge(e) once the
 * tombstones are written.
 */
static void st_remove_locked(store *s, st_entry *e)
{
    uint64_t c = st_meta_charge(e);

    st_unhash_locked(s, e);
    s->meta_live -= c;
    s->garbage += c;
    if (!st_is_inline(e))
        s->pending_free += st_round(e->len);
}

static void st_settle_locked(store *s, uint64_t g)
{
    s->garbage_settled += g;
    pthread_cond_broadcast(&s->cv);
}

/* ---- free slot heaps ---- */

static int st_heap_push(st_class *c, uint32_t slot)
{
    uint32_t i;

    if (c->nfree == c->cfree) {
        uint32_t n = c->cfree ? c->cfree * 2 : 64;
        uint32_t *f = realloc(c->free, n * sizeof(*f));
        if (!f)
            return -ENOMEM;
        c->free = f;
        c->cfree = n;
    }
    for (i = c->nfree++; i > 0 && c->free[(i - 1) / 2] > slot; i = (i - 1) / 2)
        c->free[i] = c->free[(i - 1) / 2];
    c->free[i] = slot;
    return 0;
}

static uint32_t st_heap_pop(st_class *c)
{
    uint32_t top = c->free[0], last = c->free[--c->nfree], i = 0;

    for (;;) {
        uint32_t k = 2 * i + 1;
        if (k >= c->nfree)
            break;
        if (k + 1 < c->nfree && c->free[k + 1] < c->free[k])
            k++;
        if (c->free[k] >= last)
            break;
        c->free[i] = c->free[k];
        i = k;
    }
    if (c->nfree)
        c->free[i] = last;
    return top;
}

/* Lowest free slot of class c, or a new one at the end.  -ENOSPC when the
 * class ran out of slot numbers. */
static int st_slot_alloc_locked(st_class *c, uint32_t *slot)
{
    if (c->nfree) {
        *slot = st_heap_pop(c);
        return 0;
    }
    if (c->nslots == UINT32_MAX)
        return -ENOSPC;
    *slot = c->nslots++;
    return 0;
}

/* ---- data file I/O ---- */

static int st_punch(st_class *c, uint64_t off, uint64_t len)
{
    if (len && fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                         (off_t)off, (off_t)len) < 0)
        return -errno;
    return 0;
}

static int st_pwrite_full(int fd, const void *buf, uint64_t len, uint64_t off)
{
    const uint8_t *p = buf;

    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        p += n;
        len -= (uint64_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

static int st_pread_full(int fd, void *buf, uint64_t len, uint64_t off)
{
    uint8_t *p = buf;

    while (len) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;  /* short file: the slot is gone */
        p += n;
        len -= (uint64_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* ---- releasing entries ---- */

/* Free a dead, unreferenced entry: punch its slot, then make the slot and
 * its bytes available.  A slot that cannot be punched stays charged and is
 * never reused, so the accounting stays true. */
static void st_release(store *s, st_entry *e)
{
    if (!st_is_inline(e)) {
        st_class *c = &s->cls[e->cls];
        uint64_t alen = st_round(e->len);
        int rc = st_punch(c, (uint64_t)e->slot * c->size, alen);

        pthread_mutex_lock(&s->lock);
        s->pending_free -= alen;
        if (rc < 0) {
            s->st.io_errors++;
        } else {
            s->slot_bytes -= alen;
            if (st_heap_push(c, e->slot) < 0)
                rc = -ENOMEM;           /* punched: only the slot number leaks */
        }
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->lock);
        if (rc < 0)
            log_error("store: free %s/data-%" PRIu64 ".dat slot %u: %s",
                      s->path, c->size, e->slot, strerror(-rc));
    }
    free(e);
}

/* Drop one reference; the last one releases a dead entry.  ctr, when not
 * NULL, is a counter to bump under the same lock hold. */
static void st_unref(store *s, st_entry *e, uint64_t *ctr)
{
    int last;

    pthread_mutex_lock(&s->lock);
    if (ctr)
        (*ctr)++;
    last = --e->refs == 0;
    pthread_mutex_unlock(&s->lock);
    if (last)
        st_release(s, e);
}

static pthread_mutex_t *st_stripe(store *s, const uint8_t key[STORE_KEY_LEN])
{
    return &s->stripes[st_hash(key) % ST_STRIPES];
}

/*
 * Write the tombstones of n removed entries ('C' and, where present, 'A'
 * records).  Under the stripe locks of their keys, so no put of the same key
 * is between its RocksDB write and its table update; a key that has been
 * put again meanwhile keeps its new 'C' record.  0 or -EIO (logged, counted).
 */
static int st_db_delete(store *s, st_entry *const *v, size_t n)
{
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    uint8_t k[ST_DBKEY_LEN];
    uint64_t mask = 0;
    char *err = NULL;

    for (size_t i = 0; i < n; i++)
        mask |= 1ull << (st_hash(v[i]->key) % ST_STRIPES);
    for (int i = 0; i < ST_STRIPES; i++)
        if (mask >> i & 1)
            pthread_mutex_lock(&s->stripes[i]);
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        st_dbkey(k, ST_PFX_CHUNK, v[i]->key);
        if (!st_find_locked(s, v[i]->key))
            rocksdb_writebatch_delete(b, (const char *)k, sizeof(k));
        if (v[i]->has_arec) {
            k[0] = ST_PFX_ATIME;
            rocksdb_writebatch_delete(b, (const char *)k, sizeof(k));
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (rocksdb_writebatch_count(b))
        rocksdb_write(s->db, s->wopts, b, &err);
    for (int i = 0; i < ST_STRIPES; i++)
        if (mask >> i & 1)
            pthread_mutex_unlock(&s->stripes[i]);
    rocksdb_writebatch_destroy(b);
    if (err) {
        log_error("store: rocksdb delete in %s: %s", s->path, err);
        rocksdb_free(err);
        pthread_mutex_lock(&s->lock);
        s->st.io_errors++;
        pthread_mutex_unlock(&s->lock);
        return -EIO;
    }
    return 0;
}

/* Remove the n entries (already st_remove_locked) from RocksDB, settle
 * their garbage and drop the table's references.  Without lock. */
static void st_finish_removal(store *s, st_entry *const *v, size_t n)
{
    uint64_t g = 0;

    for (size_t i = 0; i < n; i++)
        g += st_meta_charge(v[i]);
    /* On a RocksDB failure the records may survive; their slots are freed
     * anyway and a later reader of a stale record fails its checksum. */
    st_db_delete(s, v, n);
    pthread_mutex_lock(&s->lock);
    st_settle_locked(s, g);
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++)
        st_unref(s, v[i], NULL);
}

/* Drop e because its bytes are bad, unless someone already removed it. */
static void st_drop_bad(store *s, st_entry *e)
{
    pthread_mutex_lock(&s->lock);
    if (e->dead) {
        pthread_mutex_unlock(&s->lock);
        return;
    }
    st_remove_locked(s, e);
    pthread_mutex_unlock(&s->lock);
    st_finish_removal(s, &e, 1);
}

/* ---- compaction and making room ---- */

/*
 * Flush and fully compact RocksDB, then forget the garbage that was settled
 * before the flush: its superseded records and tombstones were all in the
 * compaction's input, and a forced bottommost compaction with no snapshot
 * or iterator open drops them.  Called with lock held and !s->compacting;
 * drops the lock meanwhile.
 */
static void st_compact_locked(store *s)
{
    uint64_t g0 = s->garbage_settled;
    char *err = NULL;

    s->compacting = 1;
    pthread_mutex_unlock(&s->lock);
    rocksdb_flush(s->db, s->fopts, &err);
    if (!err)
        rocksdb_compact_range_opt(s->db, s->copts, NULL, 0, NULL, 0);
    pthread_mutex_lock(&s->lock);
    s->compacting = 0;
    if (err) {
        s->st.io_errors++;
        pthread_mutex_unlock(&s->lock);
        log_error("store: rocksdb flush in %s: %s", s->path, err);
        rocksdb_free(err);
        pthread_mutex_lock(&s->lock);
    } else {
        s->garbage -= g0;
        s->garbage_settled -= g0;
    }
    pthread_cond_broadcast(&s->cv);
}

/* Compact when garbage has grown past the threshold. */
static void st_maybe_compact(store *s)
{
    pthread_mutex_lock(&s->lock);
    if (!s->compacting && s->garbage_settled >= st_compact_thr_locked(s))
        st_compact_locked(s);
    pthread_mutex_unlock(&s->lock);
}

/* Whether evicting more is needed: what is on its way back (pending slot
 * punches, and garbage once it is worth compacting) would not suffice. */
static int st_short_locked(const store *s, uint64_t need)
{
    uint64_t soon = s->pending_free;

    if (s->garbage >= st_compact_thr_locked(s))
        soon += s->garbage;
    return st_used_locked(s) - soon + need > s->capacity;
}

/*
 * Make used + need fit the capacity: evict from the LRU tail, wait for
 * slots still being read or punched, or compact away RocksDB's garbage.
 * Called and returns with lock held; drops it around I/O and waits.
 * 0, or -ENOSPC when nothing is left to free.
 */
static int st_make_room_locked(store *s, uint64_t need)
{
    st_entry *v[ST_EVICT_BATCH];

    while (st_used_locked(s) + need > s->capacity) {
        size_t n = 0;
        int can_compact;

        while (s->lru && n < ST_EVICT_BATCH && st_short_locked(s, need)) {
            v[n] = s->lru;
            st_remove_locked(s, v[n++]);
            s->st.evictions++;
        }
        if (n) {
            pthread_mutex_unlock(&s->lock);
            st_finish_removal(s, v, n);
            pthread_mutex_lock(&s->lock);
            continue;
        }
        can_compact = s->garbage_settled > 0 && !s->compacting;
        if (can_compact && (!s->lru || s->garbage >= st_compact_thr_locked(s)))
            st_compact_locked(s);
        else if (s->pending_free || s->garbage != s->garbage_settled || s->compacting ||
                 s->inflight)
            pthread_cond_wait(&s->cv, &s->lock);    /* space, or a put to evict, comes */
        else if (can_compact)
            st_compact_locked(s);
        else
            return -ENOSPC;
    }
    return 0;
}

/* ---- the public operations ---- */

/*
 * Read e (referenced by the caller) into buf.  0, -EBADMSG, -EIO, or
 * -EAGAIN when the inline record changed under us (the caller retries).
 */
static int st_read_entry(store *s, st_entry *e, void *buf)
{
    uint8_t k[ST_DBKEY_LEN];
    rocksdb_pinnableslice_t *ps;
    const uint8_t *v;
    char *err = NULL;
    size_t vlen;
    st_rec r;
    int rc;

    if (!st_is_inline(e)) {
        st_class *c = &s->cls[e->cls];

        rc = st_pread_full(c->fd, buf, st_round(e->len), (uint64_t)e->slot * c->size);
        if (rc < 0) {
            log_error("store: read %s/data-%" PRIu64 ".dat slot %u: %s",
                      s->path, c->size, e->slot, strerror(-rc));
            return -EIO;
        }
        return XXH3_64bits(buf, e->len) == e->csum ? 0 : -EBADMSG;
    }

    st_dbkey(k, ST_PFX_CHUNK, e->key);
    ps = rocksdb_get_pinned(s->db, s->ropts, (const char *)k, sizeof(k), &err);
    if (err) {
        rc = strncmp(err, "Corruption", 10) == 0 ? -EBADMSG : -EIO;
        log_error("store: rocksdb get in %s: %s", s->path, err);
        rocksdb_free(err);
        return rc;
    }
    if (!ps)
        return -EAGAIN;                 /* deleted meanwhile */
    v = (const uint8_t *)rocksdb_pinnableslice_value(ps, &vlen);
    if (st_rec_decode(v, vlen, &r) < 0) {
        rc = -EBADMSG;
    } else if (r.kind != ST_KIND_INLINE || r.len != e->len || r.csum != e->csum) {
        rc = -EAGAIN;                   /* replaced meanwhile */
    } else {
        memcpy(buf, v + ST_REC_HDR, e->len);
        rc = XXH3_64bits(buf, e->len) == e->csum ? 0 : -EBADMSG;
    }
    rocksdb_pinnableslice_destroy(ps);
    return rc;
}

int store_get(store *s, const uint8_t key[STORE_KEY_LEN], void *buf, size_t cap, size_t *len)
{
    if ((uintptr_t)buf % STORE_ALIGN)
        return -EINVAL;
    for (int attempt = 0;; attempt++) {
        st_entry *e;
        int rc;

        pthread_mutex_lock(&s->lock);
        if (attempt == 0)
            s->st.gets++;
        e = st_find_locked(s, key);
        if (!e || attempt == 3) {
            s->st.misses++;
            pthread_mutex_unlock(&s->lock);
            return -ENOENT;
        }
        if (cap < (st_is_inline(e) ? e->len : st_round(e->len))) {
            pthread_mutex_unlock(&s->lock);
            return -ENOBUFS;
        }
        e->refs++;
        st_lru_unlink_locked(s, e);
        st_lru_push_locked(s, e);
        e->atime = st_tick_locked(s);
        e->touched = 1;
        pthread_mutex_unlock(&s->lock);

        rc = st_read_entry(s, e, buf);
        if (rc == 0) {
            *len = e->len;
            st_unref(s, e, &s->st.hits);
            return 0;
        }
        if (rc == -EAGAIN) {
            st_unref(s, e, NULL);
            continue;
        }
        st_drop_bad(s, e);
        st_unref(s, e, rc == -EBADMSG ? &s->st.checksum_errors : &s->st.io_errors);
        return rc;
    }
}

/* Write the chunk's record; for an inline chunk the bytes follow it. */
static int st_db_put(store *s, const uint8_t key[STORE_KEY_LEN], const st_rec *r, const void *data)
{
    uint8_t k[ST_DBKEY_LEN], hdr[ST_REC_HDR];
    char *err = NULL;

    st_dbkey(k, ST_PFX_CHUNK, key);
    st_rec_encode(hdr, r);
    if (r->kind == ST_KIND_INLINE) {
        rocksdb_writebatch_t *b = rocksdb_writebatch_create();
        const char *kl[1] = { (const char *)k }, *vl[2] = { (const char *)hdr, data };
        size_t ks[1] = { sizeof(k) }, vs[2] = { sizeof(hdr), (size_t)r->len };

        rocksdb_writebatch_putv(b, 1, kl, ks, 2, vl, vs);
        rocksdb_write(s->db, s->wopts, b, &err);
        rocksdb_writebatch_destroy(b);
    } else {
        rocksdb_put(s->db, s->wopts, (const char *)k, sizeof(k), (const char *)hdr, sizeof(hdr), &err);
    }
    if (err) {
        log_error("store: rocksdb put in %s: %s", s->path, err);
        rocksdb_free(err);
        return -EIO;
    }
    return 0;
}

/* Write a chunk's bytes into its slot: allocate the blocks first, so a full
 * filesystem fails cleanly with ENOSPC before any byte is written. */
static int st_write_slot(store *s, st_class *c, uint32_t slot, const void *data, uint64_t alen)
{
    uint64_t off = (uint64_t)slot * c->size;
    int rc = 0;

    if (fallocate(c->fd, 0, (off_t)off, (off_t)alen) < 0 && errno != EOPNOTSUPP)
        rc = -errno;
    if (rc == 0)
        rc = st_pwrite_full(c->fd, data, alen, off);
    if (rc < 0 && rc != -ENOSPC)
        log_error("store: write %s/data-%" PRIu64 ".dat slot %u: %s",
                  s->path, c->size, slot, strerror(-rc));
    return rc;
}

int store_put(store *s, const uint8_t key[STORE_KEY_LEN], const void *data, size_t len)
{
    int inl = len <= s->inline_max, ci = -1, rc;
    uint64_t alen = inl ? 0 : st_round(len);
    uint64_t charge = 2 * (ST_REC_BYTES(inl ? len : 0) + ST_TOMB_BYTES);
    pthread_mutex_t *stripe = st_stripe(s, key);
    st_entry *e = NULL, *old;
    st_class *c = NULL;
    st_rec r;

    if ((uintptr_t)data % STORE_ALIGN) {
        rc = -EINVAL;
        goto out;
    }
    if (len > s->max_chunk || alen + charge > s->capacity - s->reserve) {
        rc = -E2BIG;
        goto out;
    }
    if (!inl) {
        ci = st_class_for(s, alen);
        c = &s->cls[ci];
    }
    if (!(e = calloc(1, sizeof(*e)))) {
        rc = -ENOMEM;
        goto out;
    }
    memcpy(e->key, key, STORE_KEY_LEN);
    e->len = (uint32_t)len;
    e->cls = inl ? ST_INLINE : (uint8_t)ci;
    e->csum = XXH3_64bits(data, len);
    e->refs = 1;

    pthread_mutex_lock(&s->lock);
    rc = st_make_room_locked(s, alen + charge);
    if (rc == 0 && c)
        rc = st_slot_alloc_locked(c, &e->slot);
    if (rc < 0) {
        pthread_mutex_unlock(&s->lock);
        goto out;
    }
    s->slot_bytes += alen;
    s->meta_live += charge;
    s->inflight++;
    e->atime = st_tick_locked(s);
    pthread_mutex_unlock(&s->lock);

    if (c && (rc = st_write_slot(s, c, e->slot, data, alen)) < 0)
        goto fail_unreserve;

    r.kind = inl ? ST_KIND_INLINE : ST_KIND_SLOT;
    r.cls_bytes = c ? c->size : 0;
    r.slot = e->slot;
    r.len = len;
    r.csum = e->csum;
    r.atime = e->atime;
    pthread_mutex_lock(stripe);
    if ((rc = st_db_put(s, key, &r, data)) < 0) {
        pthread_mutex_unlock(stripe);
        goto fail_unreserve;
    }
    pthread_mutex_lock(&s->lock);
    if ((old = st_find_locked(s, key))) {
        /* Its 'C' record was just overwritten (settled garbage) and needs
         * no tombstone; its 'A' record, if any, now belongs to the new
         * entry. */
        uint64_t g = 2 * ST_REC_BYTES(st_is_inline(old) ? old->len : 0);

        st_unhash_locked(s, old);
        s->meta_live -= g + 2 * ST_TOMB_BYTES;
        s->garbage += g;
        s->garbage_settled += g;
        if (!st_is_inline(old))
            s->pending_free += st_round(old->len);
        e->has_arec = old->has_arec;
        old->has_arec = 0;
    }
    st_link_locked(s, e);
    s->st.puts++;
    s->inflight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(stripe);
    if (old)
        st_unref(s, old, NULL);
    st_maybe_compact(s);
    return 0;

fail_unreserve:
    /* Nothing points at the slot: punch it and give everything back. */
    if (c && st_punch(c, (uint64_t)e->slot * c->size, alen) < 0)
        c = NULL;                       /* keep it charged, never reuse it */
    pthread_mutex_lock(&s->lock);
    s->meta_live -= charge;
    s->inflight--;
    if (c) {
        s->slot_bytes -= alen;
        if (st_heap_push(c, e->slot) < 0)
            log_warn("store: slot %u of %s/data-%" PRIu64 ".dat lost (out of memory)",
                     e->slot, s->path, c->size);
    }
    if (rc == -EIO)
        s->st.io_errors++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->lock);
out:
    free(e);
    pthread_mutex_lock(&s->lock);
    s->st.put_errors++;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int store_contains(store *s, const uint8_t key[STORE_KEY_LEN])
{
    int found;

    pthread_mutex_lock(&s->lock);
    found = st_find_locked(s, key) != NULL;
    pthread_mutex_unlock(&s->lock);
    return found;
}

int store_delete(store *s, const uint8_t key[STORE_KEY_LEN])
{
    st_entry *e;

    pthread_mutex_lock(&s->lock);
    if (!(e = st_find_locked(s, key))) {
        pthread_mutex_unlock(&s->lock);
        return -ENOENT;
    }
    st_remove_locked(s, e);
    pthread_mutex_unlock(&s->lock);
    st_finish_removal(s, &e, 1);
    st_maybe_compact(s);
    return 0;
}

/* Scans the in-memory table, not RocksDB: an open iterator would pin SST
 * files that compaction must be free to delete. */
long store_drop_prefix(store *s, const uint8_t *prefix, size_t plen)
{
    st_entry **v = NULL;
    size_t n = 0, cap = 0;
    long dropped = 0;

    if (plen > STORE_KEY_LEN)
        return 0;
    pthread_mutex_lock(&s->lock);
    for (st_entry *e = s->mru, *next; e; e = next) {
        next = e->older;
        if (plen && memcmp(e->key, prefix, plen) != 0)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            st_entry **nv = realloc(v, nc * sizeof(*nv));
            if (!nv)
                break;                  /* drop what we have; the caller may retry */
            v = nv;
            cap = nc;
        }
        st_remove_locked(s, e);
        v[n++] = e;
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i += ST_BATCH_KEYS / 2) {
        size_t k = n - i < ST_BATCH_KEYS / 2 ? n - i : ST_BATCH_KEYS / 2;
        st_finish_removal(s, v + i, k);
    }
    dropped = (long)n;
    free(v);
    st_maybe_compact(s);
    return dropped;
}

void store_get_stats(store *s, store_stats *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->st;
    out->capacity_bytes = s->capacity;
    out->used_bytes = st_used_locked(s);
    out->chunks = s->count;
    pthread_mutex_unlock(&s->lock);
}

/* ---- disk usage ---- */

/* Add the blocks of everything in the directory dfd (consumed) to *sum.
 * Files that vanish meanwhile (RocksDB deletes its own) are skipped. */
static int st_du_dir(int dfd, int64_t *sum)
{
    DIR *d = fdopendir(dfd);
    struct dirent *de;
    int rc = 0;

    if (!d) {
        close(dfd);
        return -errno;
    }
    while (rc == 0 && (de = readdir(d))) {
        struct stat st;
        int sub;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno != ENOENT)
                rc = -errno;
            continue;
        }
        *sum += (int64_t)st.st_blocks * 512;
        if (!S_ISDIR(st.st_mode))
            continue;
        sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sub < 0)
            rc = errno == ENOENT ? 0 : -errno;
        else
            rc = st_du_dir(sub, sum);
    }
    closedir(d);
    return rc;
}

int64_t store_disk_usage(const char *path)
{
    int64_t sum = 0;
    struct stat st;
    int fd, rc;

    if (lstat(path, &st) < 0)
        return -errno;
    sum = (int64_t)st.st_blocks * 512;
    if (!S_ISDIR(st.st_mode))
        return sum;
    if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return -errno;
    rc = st_du_dir(fd, &sum);
    return rc < 0 ? rc : sum;
}

/* ---- open ---- */

/*
 * The fixed charge for RocksDB's own files, from the options st_open_db
 * sets: two WAL files (the active memtable's and the one being flushed;
 * max_write_buffer_number 2 stalls writes beyond that), each up to a write
 * buffer plus the arena block RocksDB may overshoot by (1/8) plus the
 * largest single write; two MANIFESTs during a roll-over; the current LOG
 * and ST_LOG_KEEP old ones; and ST_SMALL_FILES for OPTIONS, CURRENT,
 * IDENTITY, LOCK, the "M" record, directories, block tails of SST and data
 * files, and a WAL started while an obsolete one awaits deletion.  SST
 * contents are charged per record instead.  This is 15.1 MiB for any
 * inline_max up to ~200 KiB (16.6 MiB at 1 MiB); measured peaks under
 * inline churn: WAL 7.5 MiB, MANIFEST 0.1 MiB, LOG 0.02 MiB.
 */
static uint64_t st_reserve(uint64_t inline_max)
{
    uint64_t write = inline_max + ST_REC_HDR + 256;

    if (write < ST_BATCH_MAX)
        write = ST_BATCH_MAX;
    return 2 * (ST_WRITE_BUFFER + ST_WRITE_BUFFER / 8 + write) + 2 * (ST_MANIFEST_MAX + 65536) +
           (ST_LOG_KEEP + 1) * (uint64_t)ST_LOG_MAX + ST_SMALL_FILES;
}

/* Classes from round_up(inline_max + 1) growing by ~1.25 to round_up(max_chunk). */
static int st_make_classes(store *s)
{
    uint64_t last = st_round(s->max_chunk), size;
    int n = 0;

    if (s->max_chunk <= s->inline_max)
        return 0;
    for (size = st_round(s->inline_max + 1); size < last; size = st_round(size + size / 4))
        n++;
    if (!(s->cls = calloc((size_t)n + 1, sizeof(*s->cls))))
        return -ENOMEM;
    n = 0;
    for (size = st_round(s->inline_max + 1); size < last; size = st_round(size + size / 4))
        s->cls[n++].size = size;
    s->cls[n++].size = last;
    for (int i = 0; i < n; i++)
        s->cls[i].fd = -1;
    s->ncls = n;
    return 0;
}

static int st_open_db(store *s, char *err, size_t errlen)
{
    rocksdb_options_t *base = rocksdb_options_create();
    char *dir = NULL, *e = NULL;
    int rc = -EIO;

    s->opts = rocksdb_options_create();
    /* Preallocated blocks would count on disk beyond the files' contents. */
    rocksdb_get_options_from_string(base, "allow_fallocate=false", s->opts, &e);
    rocksdb_options_destroy(base);
    if (e)
        goto fail;
    rocksdb_options_set_create_if_missing(s->opts, 1);
    rocksdb_options_set_write_buffer_size(s->opts, ST_WRITE_BUFFER);
    rocksdb_options_set_max_write_buffer_number(s->opts, 2);
    rocksdb_options_set_max_total_wal_size(s->opts, 2 * ST_WRITE_BUFFER);
    rocksdb_options_set_keep_log_file_num(s->opts, ST_LOG_KEEP);
    rocksdb_options_set_max_log_file_size(s->opts, ST_LOG_MAX);
    rocksdb_options_set_info_log_level(s->opts, 2 /* WARN */);
    rocksdb_options_set_max_manifest_file_size(s->opts, ST_MANIFEST_MAX);
    rocksdb_options_set_manifest_preallocation_size(s->opts, 65536);
    rocksdb_options_set_compression(s->opts, rocksdb_no_compression);
    rocksdb_options_set_skip_stats_update_on_db_open(s->opts, 1);
    s->ropts = rocksdb_readoptions_create();
    s->wopts = rocksdb_writeoptions_create();
    s->fopts = rocksdb_flushoptions_create();
    rocksdb_flushoptions_set_wait(s->fopts, 1);
    s->copts = rocksdb_compactoptions_create();
    rocksdb_compactoptions_set_bottommost_level_compaction(s->copts, 2 /* kForce */);
    if (asprintf(&dir, "%s/index", s->path) < 0) {
        dir = NULL;
        rc = -ENOMEM;
        goto fail;
    }
    s->db = rocksdb_open(s->opts, dir, &e);
    if (!s->db)
        goto fail;
    free(dir);
    return 0;

fail:
    snprintf(err, errlen, "rocksdb in %s: %s", s->path, e ? e : strerror(-rc));
    if (e)
        rocksdb_free(e);
    free(dir);
    return rc;
}

/* Whether the database holds no key at all. */
static int st_db_empty(store *s)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator(s->db, s->ropts);
    int empty;

    rocksdb_iter_seek_to_first(it);
    empty = !rocksdb_iter_valid(it);
    rocksdb_iter_destroy(it);
    return empty;
}

/* Check the format record, or write it into a new, empty database (a
 * foreign one would otherwise lose its keys as "unknown" at load). */
static int st_check_meta(store *s, char *err, size_t errlen)
{
    uint8_t v[8];
    char *e = NULL, *got;
    size_t vlen = 0;

    got = rocksdb_get(s->db, s->ropts, ST_META_KEY, 1, &vlen, &e);
    if (!e && !got && !st_db_empty(s)) {
        snprintf(err, errlen, "%s/index: a RocksDB database that is not a granary store", s->path);
        return -EINVAL;
    }
    if (!e && got && (vlen != 8 || st_get64((uint8_t *)got) != ((uint64_t)ST_REC_VERSION << 32 | ST_META_MAGIC))) {
        snprintf(err, errlen, "%s: not a granary store of format %d", s->path, ST_REC_VERSION);
        rocksdb_free(got);
        return -EINVAL;
    }
    if (!e && !got) {
        st_put64(v, (uint64_t)ST_REC_VERSION << 32 | ST_META_MAGIC);
        rocksdb_put(s->db, s->wopts, ST_META_KEY, 1, (const char *)v, sizeof(v), &e);
    }
    rocksdb_free(got);
    if (e) {
        snprintf(err, errlen, "rocksdb in %s: %s", s->path, e);
        rocksdb_free(e);
        return -EIO;
    }
    return 0;
}

/* Open every class's data file (O_DIRECT where the filesystem takes it),
 * remove data files of classes no longer configured, and check that holes
 * can be punched: without that the capacity could not be kept. */
static int st_open_files(store *s, char *err, size_t errlen)
{
    DIR *d = opendir(s->path);
    struct dirent *de;
    struct stat st;
    int rc = 0;

    if (!d) {
        rc = -errno;
        snprintf(err, errlen, "opendir %s: %s", s->path, strerror(-rc));
        return rc;
    }
    for (int i = 0; i < s->ncls && rc == 0; i++) {
        int flags = O_RDWR | O_CREAT | O_CLOEXEC;
        char name[48];

        snprintf(name, sizeof(name), "data-%" PRIu64 ".dat", s->cls[i].size);
        s->cls[i].fd = s->buffered ? -1 : openat(dirfd(d), name, flags | O_DIRECT, 0640);
        if (s->cls[i].fd < 0 && (s->buffered || errno == EINVAL)) {
            s->buffered = 1;
            s->cls[i].fd = openat(dirfd(d), name, flags, 0640);
        }
        if (s->cls[i].fd < 0) {
            rc = -errno;
            snprintf(err, errlen, "open %s/%s: %s", s->path, name, strerror(-rc));
        }
    }
    while (rc == 0 && (de = readdir(d))) {
        unsigned long long size;
        char tail[8];

        if (sscanf(de->d_name, "data-%llu.%7s", &size, tail) == 2 && strcmp(tail, "dat") == 0 &&
            st_class_by_size(s, size) < 0 && unlinkat(dirfd(d), de->d_name, 0) < 0)
            log_warn("store: unlink %s/%s: %s", s->path, de->d_name, strerror(errno));
    }
    closedir(d);
    if (rc < 0)
        return rc;
    if (s->buffered)
        log_warn("store: %s refuses O_DIRECT, using buffered I/O", s->path);
    /* Probe past the end of the file, where no data can be lost. */
    if (s->ncls && (fstat(s->cls[0].fd, &st) < 0 ||
                    (rc = st_punch(&s->cls[0], st_round((uint64_t)st.st_size) + STORE_ALIGN,
                                   STORE_ALIGN)) < 0)) {
        rc = rc ? rc : -errno;
        snprintf(err, errlen, "%s: cannot punch holes (%s), so the capacity could not be kept",
                 s->path, strerror(-rc));
        return rc;
    }
    return 0;
}

/* Keys to delete at open, written in batches of ST_BATCH_KEYS. */
typedef struct st_dels {
    rocksdb_writebatch_t *b;
    uint64_t n;                         /* keys deleted in all */
    int err;
} st_dels;

static void st_dels_flush(store *s, st_dels *d)
{
    char *e = NULL;

    if (!rocksdb_writebatch_count(d->b))
        return;
    rocksdb_write(s->db, s->wopts, d->b, &e);
    rocksdb_writebatch_clear(d->b);
    if (e) {
        log_error("store: rocksdb delete in %s: %s", s->path, e);
        rocksdb_free(e);
        d->err = -EIO;
    }
}

static void st_dels_add(store *s, st_dels *d, const void *k, size_t klen)
{
    rocksdb_writebatch_delete(d->b, k, klen);
    d->n++;
    if (rocksdb_writebatch_count(d->b) >= ST_BATCH_KEYS)
        st_dels_flush(s, d);
}

/* One 'C' record at open: the entry, or NULL when the record is malformed,
 * too long, of an unknown class, or points beyond its data file. */
static st_entry *st_load_record(store *s, const uint8_t *k, const uint8_t *v, size_t vlen,
                                const uint64_t *fsize)
{
    st_entry *e;
    st_rec r;
    int ci = -1;

    if (st_rec_decode(v, vlen, &r) < 0 || r.len > s->max_chunk)
        return NULL;
    if (r.kind == ST_KIND_SLOT) {
        ci = st_class_by_size(s, r.cls_bytes);
        if (ci < 0 || st_round(r.len) > r.cls_bytes || r.slot >= UINT32_MAX ||
            r.slot * r.cls_bytes + st_round(r.len) > fsize[ci])
            return NULL;
    }
    if (!(e = calloc(1, sizeof(*e))))
        return NULL;
    memcpy(e->key, k + 1, STORE_KEY_LEN);
    e->cls = ci < 0 ? ST_INLINE : (uint8_t)ci;
    e->slot = (uint32_t)r.slot;
    e->len = (uint32_t)r.len;
    e->csum = r.csum;
    e->atime = r.atime;
    e->refs = 1;
    return e;
}

typedef struct st_arec_time {
    uint8_t key[STORE_KEY_LEN];
    uint64_t atime;
} st_arec_time;

/*
 * Build the table from RocksDB: 'C' records become entries, 'A' records
 * raise their access times; malformed records, orphan 'A' records and
 * unknown keys are deleted (they would take space nobody accounts for).
 */
static int st_load_index(store *s, st_dels *d, char *err, size_t errlen)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = NULL;
    st_arec_time *at = NULL;
    size_t nat = 0, cat = 0;
    uint64_t *fsize = calloc((size_t)s->ncls + 1, sizeof(*fsize));
    char *e = NULL;
    int rc = -ENOMEM;

    if (!fsize)
        goto fail;
    for (int i = 0; i < s->ncls; i++) {
        struct stat st;
        if (fstat(s->cls[i].fd, &st) < 0) {
            rc = -errno;
            goto fail;
        }
        fsize[i] = (uint64_t)st.st_size;
    }
    rocksdb_readoptions_set_fill_cache(ro, 0);
    it = rocksdb_create_iterator(s->db, ro);
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &klen);
        const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vlen);
        st_entry *ent;

        if (klen == 1 && k[0] == ST_META_KEY[0])
            continue;
        if (klen == ST_DBKEY_LEN && k[0] == ST_PFX_ATIME && vlen == 8) {
            if (nat == cat) {
                size_t nc = cat ? cat * 2 : 1024;
                st_arec_time *na = realloc(at, nc * sizeof(*na));
                if (!na)
                    goto fail;
                at = na;
                cat = nc;
            }
            memcpy(at[nat].key, k + 1, STORE_KEY_LEN);
            at[nat++].atime = st_get64(v);
            continue;
        }
        if (klen == ST_DBKEY_LEN && k[0] == ST_PFX_CHUNK &&
            (ent = st_load_record(s, k, v, vlen, fsize))) {
            st_link_locked(s, ent);
            continue;
        }
        st_dels_add(s, d, k, klen);
    }
    rocksdb_iter_get_error(it, &e);
    if (e) {
        rc = -EIO;
        goto fail;
    }
    for (size_t i = 0; i < nat; i++) {
        st_entry *ent = st_find_locked(s, at[i].key);
        if (ent) {
            ent->has_arec = 1;
            if (at[i].atime > ent->atime)
                ent->atime = at[i].atime;
        } else {
            uint8_t k[ST_DBKEY_LEN];
            st_dbkey(k, ST_PFX_ATIME, at[i].key);
            st_dels_add(s, d, k, sizeof(k));
        }
    }
    rc = 0;

fail:
    if (rc < 0)
        snprintf(err, errlen, "reading the index in %s: %s", s->path, e ? e : strerror(-rc));
    if (it)
        rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    if (e)
        rocksdb_free(e);
    free(at);
    free(fsize);
    return rc;
}

static int st_cmp_slot(const void *a, const void *b)
{
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;

    if (x->cls != y->cls)
        return x->cls < y->cls ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static int st_cmp_atime(const void *a, const void *b)
{
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;

    return x->atime < y->atime ? -1 : x->atime > y->atime;
}

/* Delete an entry found at open (no accounting yet). */
static void st_drop_at_open(store *s, st_dels *d, st_entry *e)
{
    uint8_t k[ST_DBKEY_LEN];

    st_unhash_locked(s, e);
    st_dbkey(k, ST_PFX_CHUNK, e->key);
    st_dels_add(s, d, k, sizeof(k));
    if (e->has_arec) {
        k[0] = ST_PFX_ATIME;
        st_dels_add(s, d, k, sizeof(k));
    }
    free(e);
}

/*
 * With the table built: drop entries that share a slot, mark every other
 * slot free, punch everything between used regions and cut each file after
 * its last one (an interrupted write leaks nothing), order the LRU by
 * access time, and add up the accounting.
 */
static int st_rebuild(store *s, st_dels *d, char *err, size_t errlen)
{
    st_entry **v = malloc((s->count + 1) * sizeof(*v)), *e;
    size_t n = 0, i = 0;

    if (!v) {
        snprintf(err, errlen, "%s: out of memory", s->path);
        return -ENOMEM;
    }
    for (e = s->mru; e; e = e->older)
        if (!st_is_inline(e))
            v[n++] = e;
    qsort(v, n, sizeof(*v), st_cmp_slot);
    for (int ci = 0; ci < s->ncls; ci++) {
        st_class *c = &s->cls[ci];
        uint64_t end = 0;
        int rc = 0;

        for (; i < n && v[i]->cls == ci; i++) {
            uint64_t off = (uint64_t)v[i]->slot * c->size;
            if (c->nslots && v[i]->slot < c->nslots) {
                st_drop_at_open(s, d, v[i]);        /* second owner of one slot */
                continue;
            }
            for (uint32_t f = c->nslots; f < v[i]->slot && rc == 0; f++)
                rc = st_heap_push(c, f);
            if (rc == 0 && off > end)
                rc = st_punch(c, end, off - end);
            end = off + st_round(v[i]->len);
            c->nslots = v[i]->slot + 1;
        }
        if (rc == 0 && ftruncate(c->fd, (off_t)end) < 0)
            rc = -errno;
        if (rc < 0) {
            snprintf(err, errlen, "%s/data-%" PRIu64 ".dat: %s", s->path, c->size, strerror(-rc));
            free(v);
            return rc;
        }
    }

    n = 0;
    for (e = s->mru; e; e = e->older)
        v[n++] = e;
    qsort(v, n, sizeof(*v), st_cmp_atime);
    s->mru = s->lru = NULL;
    for (i = 0; i < n; i++) {
        st_lru_push_locked(s, v[i]);
        s->meta_live += st_meta_charge(v[i]);
        if (!st_is_inline(v[i]))
            s->slot_bytes += st_round(v[i]->len);
        if (v[i]->atime > s->tick)
            s->tick = v[i]->atime;
    }
    free(v);
    return 0;
}

/* What RocksDB's SST files hold beyond the live records is garbage (from
 * before a crash, or from the access times written at close). */
static void st_measure_garbage(store *s, uint64_t tombs)
{
    uint64_t sst = 0, live = 0;

    for (st_entry *e = s->mru; e; e = e->older)
        live += ST_REC_BYTES(st_is_inline(e) ? e->len : 0) + (e->has_arec ? ST_AREC_BYTES : 0);

    if (rocksdb_property_int(s->db, "rocksdb.total-sst-files-size", &sst) != 0)
        sst = 0;
    s->garbage = (sst > live ? 2 * (sst - live) : 0) + 2 * ST_TOMB_BYTES * tombs;
    s->garbage_settled = s->garbage;
}

int store_open(const store_config *cfg, store **out, char *err, size_t errlen)
{
    store *s = NULL;
    st_dels d = { NULL, 0, 0 };
    uint64_t min;
    int rc = -EINVAL;

    *out = NULL;
    if (!cfg || !cfg->path || !*cfg->path || !cfg->max_chunk || cfg->max_chunk > ST_CHUNK_LIMIT ||
        cfg->inline_max > ST_INLINE_LIMIT) {
        snprintf(err, errlen, "store: need a path, 0 < max_chunk <= %u and inline_max <= %u",
                 ST_CHUNK_LIMIT, ST_INLINE_LIMIT);
        return -EINVAL;
    }
    if (!(s = calloc(1, sizeof(*s))) || !(s->path = strdup(cfg->path)) ||
        !(s->tab = calloc(1024, sizeof(*s->tab)))) {
        rc = -ENOMEM;
        snprintf(err, errlen, "store: out of memory");
        goto fail;
    }
    s->tabmask = 1023;
    s->capacity = cfg->capacity;
    s->inline_max = cfg->inline_max;
    s->max_chunk = cfg->max_chunk;
    s->reserve = st_reserve(cfg->inline_max);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (int i = 0; i < ST_STRIPES; i++)
        pthread_mutex_init(&s->stripes[i], NULL);
    if ((rc = st_make_classes(s)) < 0) {
        snprintf(err, errlen, "store: out of memory");
        goto fail;
    }
    min = s->reserve + (s->max_chunk > s->inline_max ? st_round(s->max_chunk) : 0) +
          2 * (ST_REC_BYTES(s->max_chunk > s->inline_max ? 0 : s->max_chunk) + ST_TOMB_BYTES);
    if (s->capacity < min) {
        rc = -EINVAL;
        snprintf(err, errlen, "store %s: capacity %" PRIu64 " too small: the index needs a "
                 "%" PRIu64 "-byte reserve plus one %" PRIu64 "-byte chunk, at least %" PRIu64,
                 s->path, s->capacity, s->reserve, s->max_chunk, min);
        goto fail;
    }
    if (mkdir(s->path, 0750) < 0 && errno != EEXIST) {
        rc = -errno;
        snprintf(err, errlen, "mkdir %s: %s", s->path, strerror(errno));
        goto fail;
    }
    if ((rc = st_open_db(s, err, errlen)) < 0 || (rc = st_check_meta(s, err, errlen)) < 0 ||
        (rc = st_open_files(s, err, errlen)) < 0)
        goto fail;
    d.b = rocksdb_writebatch_create();
    if ((rc = st_load_index(s, &d, err, errlen)) < 0 || (rc = st_rebuild(s, &d, err, errlen)) < 0)
        goto fail;
    st_dels_flush(s, &d);
    st_measure_garbage(s, d.n);

    /* The capacity may have been lowered, or garbage left behind: compact
     * first (cheap at this size, and it keeps chunks), then evict. */
    pthread_mutex_lock(&s->lock);
    if (s->garbage && (s->garbage >= st_compact_thr_locked(s) ||
                       st_used_locked(s) > s->capacity)) {
        st_compact_locked(s);
        st_measure_garbage(s, 0);
    }
    rc = st_make_room_locked(s, 0);
    pthread_mutex_unlock(&s->lock);
    if (rc < 0) {
        snprintf(err, errlen, "store %s: cannot fit the capacity", s->path);
        goto fail;
    }
    rocksdb_writebatch_destroy(d.b);
    *out = s;
    return 0;

fail:
    if (d.b)
        rocksdb_writebatch_destroy(d.b);
    store_close(&s);
    return rc;
}

/* ---- close ---- */

/*
 * Write the access times of entries read since open as 'A' records, in
 * batches (one WriteBatch for all would make a WAL the reserve does not
 * cover).  Charged like any write; if it cannot fit even after a
 * compaction the rest is skipped: the order is a hint, the bytes are safe.
 */
static void st_writeback_atimes(store *s)
{
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    uint64_t g = 0;
    int n = 0;

    pthread_mutex_lock(&s->lock);
    for (st_entry *e = s->lru; e; e = e->newer) {
        uint8_t k[ST_DBKEY_LEN], v[8];
        uint64_t add = e->has_arec ? 2 * ST_AREC_BYTES : 2 * (ST_AREC_BYTES + ST_TOMB_BYTES);

        if (!e->touched)
            continue;
        if (st_used_locked(s) + add > s->capacity) {
            if (n || !s->garbage_settled)
                break;
            st_compact_locked(s);
            if (st_used_locked(s) + add > s->capacity)
                break;
        }
        st_dbkey(k, ST_PFX_ATIME, e->key);
        st_put64(v, e->atime);
        rocksdb_writebatch_put(b, (const char *)k, sizeof(k), (const char *)v, sizeof(v));
        if (e->has_arec) {
            s->garbage += add;                  /* the old one */
            g += add;
        } else {
            s->meta_live += add;
            e->has_arec = 1;
        }
        e->touched = 0;
        if (++n == ST_BATCH_KEYS || !e->newer) {
            char *err = NULL;

            pthread_mutex_unlock(&s->lock);
            rocksdb_write(s->db, s->wopts, b, &err);
            rocksdb_writebatch_clear(b);
            if (err) {
                log_warn("store: writing access times in %s: %s", s->path, err);
                rocksdb_free(err);
            }
            pthread_mutex_lock(&s->lock);
            st_settle_locked(s, g);
            g = 0;
            n = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (n) {
        char *err = NULL;

        rocksdb_write(s->db, s->wopts, b, &err);
        if (err) {
            log_warn("store: writing access times in %s: %s", s->path, err);
            rocksdb_free(err);
        }
    }
    rocksdb_writebatch_destroy(b);
}

void store_close(store **sp)
{
    store *s = sp ? *sp : NULL;

    if (!s)
        return;
    if (s->db) {
        st_writeback_atimes(s);
        rocksdb_close(s->db);
    }
    if (s->opts)
        rocksdb_options_destroy(s->opts);
    if (s->ropts)
        rocksdb_readoptions_destroy(s->ropts);
    if (s->wopts)
        rocksdb_writeoptions_destroy(s->wopts);
    if (s->fopts)
        rocksdb_flushoptions_destroy(s->fopts);
    if (s->copts)
        rocksdb_compactoptions_destroy(s->copts);
    for (int i = 0; i < s->ncls; i++) {
        if (s->cls[i].fd >= 0)
            close(s->cls[i].fd);
        free(s->cls[i].free);
    }
    free(s->cls);
    if (s->tab) {
        for (size_t i = 0; i <= s->tabmask; i++) {
            for (st_entry *e = s->tab[i], *next; e; e = next) {
                next = e->hnext;
                free(e);
            }
        }
        free(s->tab);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cv);
        for (int i = 0; i < ST_STRIPES; i++)
            pthread_mutex_destroy(&s->stripes[i]);
    }
    free(s->path);
    free(s);
    *sp = NULL;
}
