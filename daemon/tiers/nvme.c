/*
 * nvme.c - the NVMe tier (see nvme.h): a RocksDB index with small chunks
 * inline, larger chunks in O_DIRECT slots of per-size-class data files, an
 * in-memory hash table, an eviction policy (policy.h) that orders the
 * entries and admits new ones, and byte accounting that keeps the whole
 * directory under its capacity at every moment.
 *
 * Layout under cfg->path:
 *   index/               RocksDB.  Keys: 'C'+key -> chunk record (below;
 *                        records written before 'D' existed carry an inline
 *                        chunk's bytes after it); 'D'+key -> an inline chunk's
 *                        bytes (written and deleted with its 'C' record, so
 *                        an open, which skips the 'D' range, reads only the
 *                        small records); 'A'+key -> u64 last access written
 *                        back at close; "M" -> format version.
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
 * The policy.  Its capacity is capacity - reserve, the budget of everything
 * that is charged per entry; an entry's size there is its slot bytes plus
 * its metadata charge.  RocksDB garbage, which only a compaction gives
 * back, is charged to it as one pinned pseudo-entry (st_sync_garbage_locked)
 * so that "full" means the same to the policy as to the tier.  The policy
 * picks victims and admits new keys; the accounting above stays the
 * authority on whether a put fits (it also counts slots being read or
 * punched, puts in flight and garbage about to be compacted).
 *
 * Locking: s->lock guards the table, policy, free lists and counters; disk I/O
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
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <rocksdb/c.h>
#include <xxhash.h>

#include "clock.h"
#include "log.h"
#include "policy.h"
#include "nvme.h"
#include "nvme_int.h"

#define ST_EVICT_BATCH   32             /* evictions per unlock */

/* ---- small helpers ---- */

static void st_rec_encode(uint8_t out[ST_REC_HDR], const st_rec *r)
{
    memset(out, 0, 8);
    out[0] = ST_REC_VERSION;
    out[1] = (uint8_t)r->kind;
    gr__le_put64(out + 8, r->cls_bytes);
    gr__le_put64(out + 16, r->slot);
    gr__le_put64(out + 24, r->len);
    gr__le_put64(out + 32, r->csum);
    gr__le_put64(out + 40, r->atime);
}

/* 0, or -EINVAL when the value is not a well-formed record. */
int nvme__rec_decode(const uint8_t *v, size_t vlen, st_rec *r)
{
    if (vlen < ST_REC_HDR || v[0] != ST_REC_VERSION || v[1] > ST_KIND_SLOT)
        return -EINVAL;
    r->kind = v[1];
    r->cls_bytes = gr__le_get64(v + 8);
    r->slot = gr__le_get64(v + 16);
    r->len = gr__le_get64(v + 24);
    r->csum = gr__le_get64(v + 32);
    r->atime = gr__le_get64(v + 40);
    /* An inline chunk's bytes are in its 'D' record; records written
     * before those existed carry them here (read, and replaced when the
     * chunk is written again). */
    r->legacy = r->kind == ST_KIND_INLINE && r->len && vlen == ST_REC_HDR + r->len;
    if (vlen != ST_REC_HDR && !r->legacy)
        return -EINVAL;
    return 0;
}

/* A strictly increasing access time: wall-clock ns, so it means something
 * to a later policy, but never equal or backwards, so the access order
 * survives a restart exactly.  (The one use of the wall clock here:
 * intervals such as the device back-off run on the monotonic clock, which
 * no clock step can hold back.) */
static uint64_t st_tick_locked(nvme_tier *s)
{
    uint64_t now = gr__wall_ns();

    s->tick = now > s->tick ? now : s->tick + 1;
    return s->tick;
}

/* Smallest class whose slots hold alen bytes, or -1. */
int nvme__class_for(const nvme_tier *s, uint64_t alen)
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

/* ---- hash table and policy (all _locked) ---- */

static int st_key_eq(const gr__hnode *n, const void *key)
{
    return memcmp(gr__container_of(n, st_entry, hn)->key, key, CHUNK_KEY_LEN) == 0;
}

st_entry *nvme__find_locked(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN])
{
    gr__hnode *n = gr__htab_find(&s->table, st_hash(key), st_key_eq, key);

    return n ? gr__container_of(n, st_entry, hn) : NULL;
}

/* Link a new entry (key not present) into the table; the caller also
 * inserts it into the policy (at open, only once all are loaded). */
void nvme__link_locked(nvme_tier *s, st_entry *e)
{
    gr__htab_insert(&s->table, &e->hn, st_hash(e->key));
}

/* Take e out of the table (not out of the policy) and mark it dead. */
void nvme__unhash_locked(nvme_tier *s, st_entry *e)
{
    gr__htab_remove(&s->table, &e->hn);
    e->dead = 1;
}

/* Every entry of the table, in no particular order, into v (count + 1
 * slots).  Returns how many. */
size_t nvme__collect_locked(nvme_tier *s, st_entry **v)
{
    gr__htab_iter it;
    size_t n = 0;

    for (gr__hnode *x = gr__htab_first(&s->table, &it); x; x = gr__htab_next(&it))
        v[n++] = gr__container_of(x, st_entry, hn);
    return n;
}

static st_entry *st_entry_of(policy_node *n)
{
    return (st_entry *)((char *)n - offsetof(st_entry, pn));
}

/* An entry's size for the policy: all it holds of the capacity. */
static uint64_t st_charge(const st_entry *e)
{
    return (st_is_inline(e) ? 0 : st_round(e->len)) + st_meta_charge(e);
}

/* Pin or unpin e in the policy, keeping pinned_bytes. */
static void st_set_pinned_locked(nvme_tier *s, st_entry *e, int pinned)
{
    if (e->pinned == !!pinned)
        return;
    policy_pin(s->pol, &e->pn, pinned);
    e->pinned = (uint8_t)!!pinned;
    if (pinned)
        s->pinned_bytes += e->pn.size;
    else
        s->pinned_bytes -= e->pn.size;
}

/* Hand a linked entry to the policy as a new item (pinned if a pin covers
 * it). */
void nvme__policy_insert_locked(nvme_tier *s, st_entry *e)
{
    policy_node_init(&e->pn, st_hash(e->key), st_charge(e));
    policy_insert(s->pol, &e->pn);
    e->pinned = 0;
    if (idset_has(&s->pins, e->key))
        st_set_pinned_locked(s, e, 1);
}

/*
 * Resize the garbage pseudo-entry to s->garbage.  Pinned, it counts in
 * policy_used but is never a victim.  Without it a policy that admits
 * whatever fits (epoch, when not full) would see as free the bytes that
 * garbage holds, admit, and have the tier evict a resident for each
 * newcomer until the next compaction: the churn epoch exists to avoid.
 * Called before each admission, the one decision that reads how full the
 * policy is.  (A resize is an insert, which lfu counts towards its ageing.)
 */
static void st_sync_garbage_locked(nvme_tier *s)
{
    if (s->gpn_in && s->gpn.size == s->garbage)
        return;
    if (s->gpn_in)
        policy_remove(s->pol, &s->gpn);
    s->gpn_in = s->garbage > 0;
    if (!s->gpn_in)
        return;
    policy_node_init(&s->gpn, 0, s->garbage);
    policy_insert(s->pol, &s->gpn);
    policy_pin(s->pol, &s->gpn, 1);
}

/*
 * Remove a live entry whose records are about to be deleted from RocksDB:
 * its metadata charge (records and tombstones) becomes garbage, its slot
 * bytes become pending_free; used does not change.  The caller owns the
 * table's reference from now on and settles st_meta_charge(e) once the
 * tombstones are written.
 */
static void st_remove_locked(nvme_tier *s, st_entry *e)
{
    uint64_t c = st_meta_charge(e);

    nvme__unhash_locked(s, e);
    if (e->pinned)
        s->pinned_bytes -= e->pn.size;
    e->pinned = 0;
    policy_remove(s->pol, &e->pn);
    s->meta_live -= c;
    s->garbage += c;
    if (!st_is_inline(e))
        s->pending_free += st_round(e->len);
}

static void st_settle_locked(nvme_tier *s, uint64_t g)
{
    s->garbage_settled += g;
    pthread_cond_broadcast(&s->cv);
}

/* ---- free slot heaps ---- */

int nvme__heap_push(st_class *c, uint32_t slot)
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

/* ---- device health ---- */

const char *nvme_state_name(int state)
{
    return state == NVME_STATE_OK ? "ok" : state == NVME_STATE_FULL ? "full" : "offline";
}

/* Whether rc is the device's failure (not a bad entry, not our accounting). */
static int st_device_error(int rc)
{
    return rc == -EIO || rc == -ENOSPC || rc == -EDQUOT || rc == -EROFS || rc == -ENODEV ||
           rc == -ENXIO;
}

/*
 * Whether a get (put = 0) or put (put = 1) may touch the device now.  An
 * offline tier lets nothing through, a full one no puts, until retry_ns;
 * then exactly one caller probes (retry_ns moves on by the back-off, so
 * the others keep skipping meanwhile).
 */
static int st_usable_locked(nvme_tier *s, int put)
{
    uint64_t now;

    if (s->state == NVME_STATE_OK || (s->state == NVME_STATE_FULL && !put))
        return 1;
    now = gr__now_ns();
    if (now < s->retry_ns) {
        s->st.offline_skips++;
        return 0;
    }
    s->retry_ns = now + s->backoff_ns;
    return 1;
}

/* Whether a side other than side has failed ST_FAIL_STREAK times in a row. */
static int st_other_side_failing(const nvme_tier *s, int side)
{
    for (int i = 0; i < ST_SIDES; i++)
        if (i != side && s->err_streak[i] >= ST_FAIL_STREAK)
            return 1;
    return 0;
}

/*
 * Account the outcome of one device operation on side (ST_SIDE_*; rc 0 or
 * -errno).  A success brings the tier back only if no other side is
 * failing too: a write going through says nothing of reads that fail.
 */
static void st_note_locked(nvme_tier *s, int side, int rc)
{
    if (rc == 0) {
        s->err_streak[side] = 0;
        if (s->state != NVME_STATE_OK && !st_other_side_failing(s, side)) {
            log_warn("nvme: %s is back (was %s)", s->path, nvme_state_name(s->state));
            s->state = NVME_STATE_OK;
            s->backoff_ns = ST_BACKOFF_MIN_NS;
        }
        return;
    }
    if (!st_device_error(rc))
        return;
    if (rc == -ENOSPC || rc == -EDQUOT)
        s->st.space_errors++;
    if (++s->err_streak[side] < ST_FAIL_STREAK && s->state == NVME_STATE_OK)
        return;
    if (s->state == NVME_STATE_OK) {
        s->backoff_ns = ST_BACKOFF_MIN_NS;
        log_error("nvme: %s: %s %s; the NVMe tier is %s, serving from DRAM and the source",
                  s->path, side == ST_SIDE_WRITE ? "writing" : "reading", strerror(-rc),
                  rc == -ENOSPC || rc == -EDQUOT ? "full" : "offline");
    } else if (s->backoff_ns < ST_BACKOFF_MAX_NS) {
        s->backoff_ns *= 2;             /* a failed probe */
    }
    /* Full only if the device still reads; an I/O error trumps it. */
    if (rc == -ENOSPC || rc == -EDQUOT) {
        if (s->state != NVME_STATE_OFFLINE)
            s->state = NVME_STATE_FULL;
    } else {
        s->state = NVME_STATE_OFFLINE;
    }
    s->retry_ns = gr__now_ns() + s->backoff_ns;
}

static void st_note(nvme_tier *s, int side, int rc)
{
    pthread_mutex_lock(&s->lock);
    st_note_locked(s, side, rc);
    nvme__unlock(s);
}

/* ---- data file I/O ---- */

int nvme__punch(st_class *c, uint64_t off, uint64_t len)
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
static void st_release(nvme_tier *s, st_entry *e)
{
    if (!st_is_inline(e)) {
        st_class *c = &s->cls[e->cls];
        uint64_t alen = st_round(e->len);
        int rc = nvme__punch(c, (uint64_t)e->slot * c->size, alen);

        pthread_mutex_lock(&s->lock);
        s->pending_free -= alen;
        if (rc < 0) {
            s->st.io_errors++;
        } else {
            s->slot_bytes -= alen;
            if (nvme__heap_push(c, e->slot) < 0)
                rc = -ENOMEM;           /* punched: only the slot number leaks */
        }
        pthread_cond_broadcast(&s->cv);
        nvme__unlock(s);
        if (rc < 0)
            log_error("nvme: free %s/data-%" PRIu64 ".dat slot %u: %s",
                      s->path, c->size, e->slot, strerror(-rc));
    }
    free(e);
}

/* Drop one reference; the last one releases a dead entry.  ctr, when not
 * NULL, is a counter to bump under the same lock hold. */
static void st_unref(nvme_tier *s, st_entry *e, uint64_t *ctr)
{
    int last;

    pthread_mutex_lock(&s->lock);
    if (ctr)
        (*ctr)++;
    last = --e->refs == 0;
    nvme__unlock(s);
    if (last)
        st_release(s, e);
}

static pthread_mutex_t *st_stripe(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN])
{
    return &s->stripes[st_hash(key) % ST_STRIPES];
}

/*
 * Write the tombstones of n removed entries ('C' and, where present, 'A'
 * records).  Under the stripe locks of their keys, so no put of the same key
 * is between its RocksDB write and its table update; a key that has been
 * put again meanwhile keeps its new 'C' record.  0 or -EIO (logged, counted).
 */
static int st_db_delete(nvme_tier *s, st_entry *const *v, size_t n)
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
        if (!nvme__find_locked(s, v[i]->key)) {
            rocksdb_writebatch_delete(b, (const char *)k, sizeof(k));
            if (st_is_inline(v[i]) && !v[i]->legacy) {
                k[0] = ST_PFX_DATA;
                rocksdb_writebatch_delete(b, (const char *)k, sizeof(k));
            }
        }
        if (v[i]->has_arec) {
            k[0] = ST_PFX_ATIME;
            rocksdb_writebatch_delete(b, (const char *)k, sizeof(k));
        }
    }
    nvme__unlock(s);
    if (rocksdb_writebatch_count(b))
        rocksdb_write(s->db, s->wopts, b, &err);
    for (int i = 0; i < ST_STRIPES; i++)
        if (mask >> i & 1)
            pthread_mutex_unlock(&s->stripes[i]);
    rocksdb_writebatch_destroy(b);
    if (err) {
        log_error("nvme: rocksdb delete in %s: %s", s->path, err);
        rocksdb_free(err);
        pthread_mutex_lock(&s->lock);
        s->st.io_errors++;
        nvme__unlock(s);
        return -EIO;
    }
    return 0;
}

/* Remove the n entries (already st_remove_locked) from RocksDB, settle
 * their garbage and drop the table's references.  Without lock. */
static void st_finish_removal(nvme_tier *s, st_entry *const *v, size_t n)
{
    uint64_t g = 0;

    for (size_t i = 0; i < n; i++)
        g += st_meta_charge(v[i]);
    /* On a RocksDB failure the records may survive; their slots are freed
     * anyway and a later reader of a stale record fails its checksum. */
    st_db_delete(s, v, n);
    pthread_mutex_lock(&s->lock);
    st_settle_locked(s, g);
    nvme__unlock(s);
    for (size_t i = 0; i < n; i++)
        st_unref(s, v[i], NULL);
}

/* Drop e because its bytes are bad, unless someone already removed it. */
static void st_drop_bad(nvme_tier *s, st_entry *e)
{
    pthread_mutex_lock(&s->lock);
    if (e->dead) {
        nvme__unlock(s);
        return;
    }
    st_remove_locked(s, e);
    nvme__unlock(s);
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
void nvme__compact_locked(nvme_tier *s)
{
    uint64_t g0 = s->garbage_settled;
    char *err = NULL;

    s->compacting = 1;
    nvme__unlock(s);
    rocksdb_flush(s->db, s->fopts, &err);
    if (!err)
        rocksdb_compact_range_opt(s->db, s->copts, NULL, 0, NULL, 0);
    pthread_mutex_lock(&s->lock);
    s->compacting = 0;
    if (err) {
        s->st.io_errors++;
        nvme__unlock(s);
        log_error("nvme: rocksdb flush in %s: %s", s->path, err);
        rocksdb_free(err);
        pthread_mutex_lock(&s->lock);
    } else {
        s->garbage -= g0;
        s->garbage_settled -= g0;
    }
    pthread_cond_broadcast(&s->cv);
}

/* Compact when garbage has grown past the threshold. */
static void st_maybe_compact(nvme_tier *s)
{
    pthread_mutex_lock(&s->lock);
    if (!s->compacting && s->garbage_settled >= st_compact_thr_locked(s))
        nvme__compact_locked(s);
    nvme__unlock(s);
}

/* Whether evicting more is needed: what is on its way back (pending slot
 * punches, and garbage once it is worth compacting) would not suffice. */
static int st_short_locked(const nvme_tier *s, uint64_t need)
{
    uint64_t soon = s->pending_free;

    if (s->garbage >= st_compact_thr_locked(s))
        soon += s->garbage;
    return st_used_locked(s) - soon + need > s->capacity;
}

/*
 * Make used + need fit the capacity: evict the policy's victims, wait for
 * slots still being read or punched, or compact away RocksDB's garbage.
 * Called and returns with lock held; drops it around I/O and waits.
 * 0, or -ENOSPC when nothing is left to free.
 */
int nvme__make_room_locked(nvme_tier *s, uint64_t need)
{
    st_entry *v[ST_EVICT_BATCH];

    while (st_used_locked(s) + need > s->capacity) {
        size_t n = 0;
        int can_compact;
        policy_node *victim;

        while (n < ST_EVICT_BATCH && st_short_locked(s, need) &&
               (victim = policy_victim(s->pol))) {
            v[n] = st_entry_of(victim);
            st_remove_locked(s, v[n++]);
            s->st.evictions++;
        }
        if (n) {
            nvme__unlock(s);
            st_finish_removal(s, v, n);
            pthread_mutex_lock(&s->lock);
            continue;
        }
        can_compact = s->garbage_settled > 0 && !s->compacting;
        if (can_compact && (!gr__htab_count(&s->table) || s->garbage >= st_compact_thr_locked(s)))
            nvme__compact_locked(s);
        else if (s->pending_free || s->garbage != s->garbage_settled || s->compacting ||
                 s->inflight) {
            nvme__publish_locked(s);
            pthread_cond_wait(&s->cv, &s->lock);    /* space, or a put to evict, comes */
        } else if (can_compact)
            nvme__compact_locked(s);
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
static int st_read_entry(nvme_tier *s, st_entry *e, void *buf)
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
            log_error("nvme: read %s/data-%" PRIu64 ".dat slot %u: %s",
                      s->path, c->size, e->slot, strerror(-rc));
            return -EIO;
        }
        return XXH3_64bits(buf, e->len) == e->csum ? 0 : -EBADMSG;
    }

    st_dbkey(k, e->legacy ? ST_PFX_CHUNK : ST_PFX_DATA, e->key);
    ps = rocksdb_get_pinned(s->db, s->ropts, (const char *)k, sizeof(k), &err);
    if (err) {
        rc = strncmp(err, "Corruption", 10) == 0 ? -EBADMSG : -EIO;
        log_error("nvme: rocksdb get in %s: %s", s->path, err);
        rocksdb_free(err);
        return rc;
    }
    if (!ps)
        return -EAGAIN;                 /* deleted meanwhile */
    v = (const uint8_t *)rocksdb_pinnableslice_value(ps, &vlen);
    if (!e->legacy) {
        /* The 'D' record: the bytes alone, checked against the entry. */
        if (vlen == e->len) {
            memcpy(buf, v, e->len);
            rc = XXH3_64bits(buf, e->len) == e->csum ? 0 : -EBADMSG;
        } else {
            rc = -EBADMSG;
        }
        if (rc == -EBADMSG) {
            /* Or the key was put again with other bytes meanwhile: a put
             * holds the key's stripe from its write to its entry replacing
             * ours, so past the stripe the table says which. */
            pthread_mutex_t *stripe = st_stripe(s, e->key);
            pthread_mutex_lock(stripe);
            pthread_mutex_lock(&s->lock);
            if (nvme__find_locked(s, e->key) != e)
                rc = -EAGAIN;
            pthread_mutex_unlock(&s->lock);
            pthread_mutex_unlock(stripe);
        }
    } else if (nvme__rec_decode(v, vlen, &r) < 0) {
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

int nvme_get(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN], void *buf, size_t cap, size_t *len)
{
    if ((uintptr_t)buf % NVME_ALIGN)
        return -EINVAL;
    for (int attempt = 0;; attempt++) {
        st_entry *e;
        int rc;

        pthread_mutex_lock(&s->lock);
        if (attempt == 0)
            s->st.gets++;
        e = nvme__find_locked(s, key);
        if (e && !st_usable_locked(s, 0))
            e = NULL;                   /* offline: a miss, the caller reads the source */
        if (!e || attempt == 3) {
            s->st.misses++;
            nvme__unlock(s);
            return -ENOENT;
        }
        if (cap < (st_is_inline(e) ? e->len : st_round(e->len))) {
            nvme__unlock(s);
            return -ENOBUFS;
        }
        e->refs++;
        policy_hit(s->pol, &e->pn);
        e->atime = st_tick_locked(s);
        e->touched = 1;
        nvme__unlock(s);

        rc = st_read_entry(s, e, buf);
        st_note(s, st_is_inline(e) ? ST_SIDE_READ_DB : ST_SIDE_READ, rc);
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

/*
 * Write the chunk's record; an inline chunk's bytes go in a 'D' record
 * beside it, in the same batch (both or neither), so that opening the tier
 * reads the small 'C' records only, never the bytes.  drop_data: also
 * delete the 'D' record an inline chunk replaced by this one left.
 */
static int st_db_put(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN], const st_rec *r, const void *data,
                     int drop_data)
{
    uint8_t k[ST_DBKEY_LEN], dk[ST_DBKEY_LEN], hdr[ST_REC_HDR];
    char *err = NULL;

    st_dbkey(k, ST_PFX_CHUNK, key);
    st_dbkey(dk, ST_PFX_DATA, key);
    st_rec_encode(hdr, r);
    if (r->kind == ST_KIND_INLINE || drop_data) {
        rocksdb_writebatch_t *b = rocksdb_writebatch_create();

        if (r->kind == ST_KIND_INLINE)
            rocksdb_writebatch_put(b, (const char *)dk, sizeof(dk), data, (size_t)r->len);
        else
            rocksdb_writebatch_delete(b, (const char *)dk, sizeof(dk));
        rocksdb_writebatch_put(b, (const char *)k, sizeof(k), (const char *)hdr, sizeof(hdr));
        rocksdb_write(s->db, s->wopts, b, &err);
        rocksdb_writebatch_destroy(b);
    } else {
        rocksdb_put(s->db, s->wopts, (const char *)k, sizeof(k), (const char *)hdr, sizeof(hdr), &err);
    }
    if (err) {
        int rc = strstr(err, "No space left") ? -ENOSPC : -EIO;
        log_error("nvme: rocksdb put in %s: %s", s->path, err);
        rocksdb_free(err);
        return rc;
    }
    return 0;
}

/* Write a chunk's bytes into its slot: allocate the blocks first, so a full
 * filesystem fails cleanly with ENOSPC before any byte is written. */
static int st_write_slot(nvme_tier *s, st_class *c, uint32_t slot, const void *data, uint64_t alen)
{
    uint64_t off = (uint64_t)slot * c->size;
    int rc = 0;

    if (fallocate(c->fd, 0, (off_t)off, (off_t)alen) < 0 && errno != EOPNOTSUPP)
        rc = -errno;
    if (rc == 0)
        rc = st_pwrite_full(c->fd, data, alen, off);
    if (rc < 0 && rc != -ENOSPC)
        log_error("nvme: write %s/data-%" PRIu64 ".dat slot %u: %s",
                  s->path, c->size, slot, strerror(-rc));
    return rc;
}

int nvme_put(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN], const void *data, size_t len)
{
    int inl = len <= s->inline_max, ci = -1, rc;
    uint64_t alen = inl ? 0 : st_round(len);
    uint64_t charge = 2 * (ST_REC_BYTES(inl ? len : 0) + ST_CTOMB_BYTES(inl));
    pthread_mutex_t *stripe = st_stripe(s, key);
    st_entry *e = NULL, *old;
    st_class *c = NULL;
    st_rec r;

    if ((uintptr_t)data % NVME_ALIGN) {
        rc = -EINVAL;
        goto out;
    }
    if (len > s->max_chunk || alen + charge > s->capacity - s->reserve) {
        rc = -E2BIG;
        goto out;
    }
    if (!inl) {
        ci = nvme__class_for(s, alen);
        c = &s->cls[ci];
    }
    if (!(e = calloc(1, sizeof(*e)))) {
        rc = -ENOMEM;
        goto out;
    }
    memcpy(e->key, key, CHUNK_KEY_LEN);
    e->len = (uint32_t)len;
    e->cls = inl ? ST_INLINE : (uint8_t)ci;
    e->refs = 1;

    pthread_mutex_lock(&s->lock);
    if (!st_usable_locked(s, 1)) {
        nvme__unlock(s);
        rc = -ENODEV;
        goto out;
    }
    if (!nvme__find_locked(s, key)) {
        /* The miss that brought the key.  A replaced key is not asked
         * again: it was admitted once and is being refreshed. */
        st_sync_garbage_locked(s);
        if (!policy_admit(s->pol, st_hash(key), alen + charge)) {
            s->st.not_admitted++;
            nvme__unlock(s);
            free(e);
            return -ECANCELED;
        }
    }
    rc = nvme__make_room_locked(s, alen + charge);
    if (rc == 0 && c)
        rc = st_slot_alloc_locked(c, &e->slot);
    if (rc < 0) {
        nvme__unlock(s);
        goto out;
    }
    s->slot_bytes += alen;
    s->meta_live += charge;
    s->inflight++;
    e->atime = st_tick_locked(s);
    nvme__unlock(s);

    e->csum = XXH3_64bits(data, len);

    if (c && (rc = st_write_slot(s, c, e->slot, data, alen)) < 0) {
        st_note(s, ST_SIDE_WRITE, rc);
        goto fail_unreserve;
    }

    r.kind = inl ? ST_KIND_INLINE : ST_KIND_SLOT;
    r.cls_bytes = c ? c->size : 0;
    r.slot = e->slot;
    r.len = len;
    r.csum = e->csum;
    r.atime = e->atime;
    pthread_mutex_lock(stripe);
    {
        /* An inline chunk replaced by one in a slot (inline_max lowered
         * since) leaves a 'D' record: delete it in the same batch.  The
         * stripe keeps other puts of the key out meanwhile. */
        int drop_data;
        pthread_mutex_lock(&s->lock);
        old = nvme__find_locked(s, key);
        drop_data = !inl && old && st_is_inline(old) && !old->legacy;
        pthread_mutex_unlock(&s->lock);
        rc = st_db_put(s, key, &r, data, drop_data);
    }
    if (rc < 0) {
        pthread_mutex_unlock(stripe);
        st_note(s, ST_SIDE_WRITE, rc);
        goto fail_unreserve;
    }
    pthread_mutex_lock(&s->lock);
    st_note_locked(s, ST_SIDE_WRITE, 0);
    if ((old = nvme__find_locked(s, key))) {
        /* Its 'C' record was just overwritten (settled garbage) and needs
         * no tombstone; its 'A' record, if any, now belongs to the new
         * entry. */
        uint64_t g = 2 * ST_REC_BYTES(st_is_inline(old) ? old->len : 0);

        nvme__unhash_locked(s, old);
        if (old->pinned)
            s->pinned_bytes -= old->pn.size;
        old->pinned = 0;
        policy_remove(s->pol, &old->pn);
        s->meta_live -= g + 2 * ST_CTOMB_BYTES(st_is_inline(old));
        s->garbage += g;
        s->garbage_settled += g;
        if (!st_is_inline(old))
            s->pending_free += st_round(old->len);
        e->has_arec = old->has_arec;
        old->has_arec = 0;
    }
    nvme__link_locked(s, e);
    nvme__policy_insert_locked(s, e);
    s->st.puts++;
    s->inflight--;
    pthread_cond_broadcast(&s->cv);
    nvme__unlock(s);
    pthread_mutex_unlock(stripe);
    if (old)
        st_unref(s, old, NULL);
    st_maybe_compact(s);
    return 0;

fail_unreserve:
    /* Nothing points at the slot: punch it and give everything back. */
    if (c && nvme__punch(c, (uint64_t)e->slot * c->size, alen) < 0)
        c = NULL;                       /* keep it charged, never reuse it */
    pthread_mutex_lock(&s->lock);
    s->meta_live -= charge;
    s->inflight--;
    if (c) {
        s->slot_bytes -= alen;
        if (nvme__heap_push(c, e->slot) < 0)
            log_warn("nvme: slot %u of %s/data-%" PRIu64 ".dat lost (out of memory)",
                     e->slot, s->path, c->size);
    }
    if (rc == -EIO)
        s->st.io_errors++;
    pthread_cond_broadcast(&s->cv);
    nvme__unlock(s);
out:
    free(e);
    pthread_mutex_lock(&s->lock);
    s->st.put_errors++;
    nvme__unlock(s);
    return rc;
}

int nvme_contains(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN])
{
    int found;

    pthread_mutex_lock(&s->lock);
    found = nvme__find_locked(s, key) != NULL;
    nvme__unlock(s);
    return found;
}

int nvme_delete(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN])
{
    st_entry *e;

    pthread_mutex_lock(&s->lock);
    if (!(e = nvme__find_locked(s, key))) {
        nvme__unlock(s);
        return -ENOENT;
    }
    st_remove_locked(s, e);
    nvme__unlock(s);
    st_finish_removal(s, &e, 1);
    st_maybe_compact(s);
    return 0;
}

/* Scans the in-memory table, not RocksDB: an open iterator would pin SST
 * files that compaction must be free to delete. */
/* What a drop keeps: entries for which match(e, arg) is 0. */
typedef int (*st_match_fn)(const st_entry *e, const void *arg);

/* Drop every entry that matches.  Returns how many. */
static long st_drop_matching(nvme_tier *s, st_match_fn match, const void *arg)
{
    st_entry **v = NULL;
    size_t n = 0, cap = 0;
    long dropped = 0;

    pthread_mutex_lock(&s->lock);
    {
        gr__htab_iter it;
        for (gr__hnode *x = gr__htab_first(&s->table, &it); x; x = gr__htab_next(&it)) {
            st_entry *e = gr__container_of(x, st_entry, hn);
            if (!match(e, arg))
                continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                st_entry **nv = realloc(v, nc * sizeof(*nv));
                if (!nv)
                    goto unlock;        /* drop what we have; the caller may retry */
                v = nv;
                cap = nc;
            }
            st_remove_locked(s, e);
            v[n++] = e;
        }
    }
unlock:
    nvme__unlock(s);
    for (size_t i = 0; i < n; i += ST_BATCH_KEYS / 2) {
        size_t k = n - i < ST_BATCH_KEYS / 2 ? n - i : ST_BATCH_KEYS / 2;
        st_finish_removal(s, v + i, k);
    }
    dropped = (long)n;
    free(v);
    st_maybe_compact(s);
    return dropped;
}

typedef struct st_prefix {
    const uint8_t *p;
    size_t len;
} st_prefix;

static int st_match_prefix(const st_entry *e, const void *arg)
{
    const st_prefix *pf = arg;

    return memcmp(e->key, pf->p, pf->len) == 0;
}

static int st_match_ids(const st_entry *e, const void *arg)
{
    return idset_has(arg, e->key);
}

long nvme_drop_prefix(nvme_tier *s, const uint8_t *prefix, size_t plen)
{
    st_prefix pf = { prefix, plen };

    if (plen > CHUNK_KEY_LEN)
        return 0;
    return st_drop_matching(s, st_match_prefix, &pf);
}

long nvme_drop_files(nvme_tier *s, const uint8_t (*ids)[16], size_t n)
{
    idset batch = { NULL, 0, 0 };
    long dropped;

    for (size_t i = 0; i < n; i++)
        if (idset_add(&batch, ids[i]) < 0) {
            idset_clear(&batch);
            return -ENOMEM;
        }
    dropped = st_drop_matching(s, st_match_ids, &batch);
    idset_clear(&batch);
    return dropped;
}

long nvme_pin_files(nvme_tier *s, const uint8_t (*ids)[FILE_ID_LEN], size_t n, int pinned)
{
    idset batch = { NULL, 0, 0 };
    long held = 0;

    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        if (idset_add(&batch, ids[i]) < 0 || (pinned && idset_add(&s->pins, ids[i]) < 0)) {
            held = -ENOMEM;
            goto out;
        }
        if (!pinned)
            idset_del(&s->pins, ids[i]);
    }
    {
        gr__htab_iter it;
        for (gr__hnode *x = gr__htab_first(&s->table, &it); x; x = gr__htab_next(&it)) {
            st_entry *e = gr__container_of(x, st_entry, hn);
            if (idset_has(&batch, e->key)) {
                st_set_pinned_locked(s, e, pinned);
                held++;
            }
        }
    }
out:
    nvme__unlock(s);
    idset_clear(&batch);
    return held;
}

int nvme_set_policy(nvme_tier *s, const char *policy_name)
{
    policy_kind kind;
    policy_node **pinned;
    size_t n = 0;
    int rc = 0;

    if (policy_kind_parse(policy_name, &kind) < 0)
        return -EINVAL;
    pthread_mutex_lock(&s->lock);
    if (kind == policy_get_kind(s->pol))
        goto out;
    pinned = malloc((gr__htab_count(&s->table) + 2) * sizeof(*pinned));
    if (!pinned) {
        rc = -ENOMEM;
        goto out;
    }
    {
        gr__htab_iter it;
        for (gr__hnode *x = gr__htab_first(&s->table, &it); x; x = gr__htab_next(&it)) {
            st_entry *e = gr__container_of(x, st_entry, hn);
            if (e->pinned)
                pinned[n++] = &e->pn;
        }
    }
    if (s->gpn_in)
        pinned[n++] = &s->gpn;          /* the garbage pseudo-entry stays pinned */
    rc = policy_switch(&s->pol, kind, pinned, n);
    free(pinned);
out:
    nvme__unlock(s);
    return rc;
}

int nvme_policy_kind(nvme_tier *s)
{
    int k;

    pthread_mutex_lock(&s->lock);
    k = (int)policy_get_kind(s->pol);
    nvme__unlock(s);
    return k;
}

void nvme__publish_locked(nvme_tier *s)
{
    nvme_stats st = s->st;
    uint64_t w[sizeof(s->pub) / 8] = { 0 };
    uint64_t seq = s->pub_seq;

    st.capacity_bytes = s->capacity;
    st.used_bytes = st_used_locked(s);
    st.chunks = gr__htab_count(&s->table);
    st.pinned_bytes = s->pinned_bytes;
    st.state = s->state;
    memcpy(w, &st, sizeof(st));
    __atomic_store_n(&s->pub_seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (size_t i = 0; i < sizeof(w) / 8; i++)
        __atomic_store_n(&s->pub[i], w[i], __ATOMIC_RELAXED);
    __atomic_store_n(&s->pub_seq, seq + 2, __ATOMIC_RELEASE);
}

/* Lock-free: the copy the last unlock published (see nvme__unlock). */
void nvme_get_stats(nvme_tier *s, nvme_stats *out)
{
    uint64_t w[sizeof(s->pub) / 8], s1, s2;

    do {
        s1 = __atomic_load_n(&s->pub_seq, __ATOMIC_ACQUIRE);
        for (size_t i = 0; i < sizeof(w) / 8; i++)
            w[i] = __atomic_load_n(&s->pub[i], __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        s2 = __atomic_load_n(&s->pub_seq, __ATOMIC_RELAXED);
    } while ((s1 & 1) || s1 != s2);
    memcpy(out, w, sizeof(*out));
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

int64_t nvme_disk_usage(const char *path)
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

/* ---- close ---- */

/* Write a batch of access times with the lock dropped, then settle the
 * garbage g it made. */
static void st_write_atimes_locked(nvme_tier *s, rocksdb_writebatch_t *b, uint64_t g)
{
    char *err = NULL;

    nvme__unlock(s);
    rocksdb_write(s->db, s->wopts, b, &err);
    rocksdb_writebatch_clear(b);
    if (err) {
        log_warn("nvme: writing access times in %s: %s", s->path, err);
        rocksdb_free(err);
    }
    pthread_mutex_lock(&s->lock);
    st_settle_locked(s, g);
}

/*
 * Write the access times of entries read since open as 'A' records, in
 * batches (one WriteBatch for all would make a WAL the reserve does not
 * cover).  Charged like any write; if it cannot fit even after a
 * compaction the rest is skipped: the order is a hint, the bytes are safe.
 * Nobody else uses the store any more, so the table may be walked with the
 * lock dropped.  The policy's own state (frequencies, ghosts) is not
 * persisted: the access times are what a restart orders the policy by.
 */
static void st_writeback_atimes(nvme_tier *s)
{
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    uint64_t g = 0;
    int n = 0;

    pthread_mutex_lock(&s->lock);
    {
        gr__htab_iter it;
        for (gr__hnode *x = gr__htab_first(&s->table, &it); x; x = gr__htab_next(&it)) {
            st_entry *e = gr__container_of(x, st_entry, hn);
            uint8_t k[ST_DBKEY_LEN], v[8];
            uint64_t add = e->has_arec ? 2 * ST_AREC_BYTES : 2 * (ST_AREC_BYTES + ST_TOMB_BYTES);

            if (!e->touched)
                continue;
            if (st_used_locked(s) + add > s->capacity) {
                if (n || !s->garbage_settled)
                    goto done;
                nvme__compact_locked(s);
                if (st_used_locked(s) + add > s->capacity)
                    goto done;
            }
            st_dbkey(k, ST_PFX_ATIME, e->key);
            gr__le_put64(v, e->atime);
            rocksdb_writebatch_put(b, (const char *)k, sizeof(k), (const char *)v, sizeof(v));
            if (e->has_arec) {
                s->garbage += add;              /* the old one */
                g += add;
            } else {
                s->meta_live += add;
                e->has_arec = 1;
            }
            e->touched = 0;
            if (++n == ST_BATCH_KEYS) {
                st_write_atimes_locked(s, b, g);
                g = 0;
                n = 0;
            }
        }
    }
done:
    if (n)
        st_write_atimes_locked(s, b, g);
    nvme__unlock(s);
    rocksdb_writebatch_destroy(b);
}

void nvme_close(nvme_tier **sp)
{
    nvme_tier *s = sp ? *sp : NULL;

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
    policy_free(&s->pol);
    idset_clear(&s->pins);
    if (s->table.b[0]) {
        gr__htab_iter it;
        for (gr__hnode *x = gr__htab_first(&s->table, &it); x; x = gr__htab_next(&it))
            free(gr__container_of(x, st_entry, hn));
        gr__htab_fini(&s->table);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cv);
        for (int i = 0; i < ST_STRIPES; i++)
            pthread_mutex_destroy(&s->stripes[i]);
    }
    free(s->path);
    free(s);
    *sp = NULL;
}

/* ---- as a backend of the fetch engine ---- */

static backend_result nb_get(void *self, const backend_req *rq, size_t *len, backend_status *st)
{
    int rc = nvme_get(self, rq->key, rq->buf, rq->cap, len);

    if (rc == 0)
        return BACKEND_OK;
    st->corrupt = rc == -EBADMSG;   /* dropped by nvme_get; counted by the fetcher */
    return BACKEND_MISS;            /* absent, corrupt, the device failing: the next tier */
}

static int nb_put(void *self, const uint8_t *key, const void *buf, size_t len)
{
    return nvme_put(self, key, buf, len);
}

static void nb_drop(void *self, const uint8_t *key)
{
    nvme_delete(self, key);
}

static const backend_ops nvme_backend_ops = {
    .name = "nvme", .kind = BACKEND_NVME, .get = nb_get, .put = nb_put, .drop = nb_drop,
};

backend nvme_backend(nvme_tier *s)
{
    return (backend){ &nvme_backend_ops, s };
}
