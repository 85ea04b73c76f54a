/*
 * nvme_int.h - private to the NVMe tier: what nvme.c (the running tier)
 * and nvme_load.c (opening it: rebuilding the index from disk) share.  The
 * on-disk constants, the structures, small inline helpers and the few
 * internal functions (nvme__*) one file calls in the other.  nvme.c's
 * header comment describes the design: layout, record format, accounting,
 * locking and entry lifetime.  Nothing outside these two files includes it.
 */
#ifndef GR_STORE_INT_H
#define GR_STORE_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rocksdb/c.h>
#include <xxhash.h>

#include "htab.h"
#include "le.h"
#include "policy.h"
#include "idset.h"
#include "nvme.h"

#define ST_REC_VERSION   1
#define ST_REC_HDR       48
#define ST_KIND_INLINE   0
#define ST_KIND_SLOT     1
#define ST_PFX_ATIME     'A'
#define ST_PFX_CHUNK     'C'
#define ST_PFX_DATA      'D'                    /* an inline chunk's bytes, beside its 'C' record */
#define ST_DBKEY_LEN     (1 + CHUNK_KEY_LEN)
#define ST_INLINE        0xff                   /* st_entry.cls of an inline chunk */

/* SST bytes per entry beyond key and value: internal key trailer (8),
 * varints, restart array, the entry's share of the index block, block
 * trailers.  Measured after a full compaction: 15 B per entry with 1 KiB
 * values, 42 B with 64 KiB values (each its own block and index entry). */
#define ST_SST_OVERHEAD  64
/* A chunk's records: its 'C' record and, for an inline chunk, the 'D' record
 * of its bytes (a second key). */
#define ST_REC_BYTES(inl_len) ((uint64_t)ST_DBKEY_LEN + ST_REC_HDR + (inl_len) + ST_SST_OVERHEAD + \
                               ((inl_len) ? (uint64_t)ST_DBKEY_LEN + ST_SST_OVERHEAD : 0))
#define ST_AREC_BYTES    ((uint64_t)ST_DBKEY_LEN + 8 + ST_SST_OVERHEAD)
#define ST_TOMB_BYTES    ((uint64_t)ST_DBKEY_LEN + ST_SST_OVERHEAD)
/* The tombstones removing a chunk's records leave: one per record. */
#define ST_CTOMB_BYTES(inl) (ST_TOMB_BYTES * ((inl) ? 2u : 1u))

#define ST_BATCH_MAX     (256u << 10)   /* largest WriteBatch we write */
#define ST_BATCH_KEYS    4096           /* keys per deletion/access-time batch (< ST_BATCH_MAX) */
#define ST_COMPACT_MIN   (4u << 20)     /* garbage worth a full compaction */
#define ST_STRIPES       64

typedef struct st_entry {
    uint8_t key[CHUNK_KEY_LEN];
    gr__hnode hn;                       /* s->table (the hash is kept: +8 bytes, no rehashing) */
    policy_node pn;                     /* in s->pol while in the table (after open) */
    uint64_t csum;                      /* XXH3-64 of the chunk bytes */
    uint64_t atime;                     /* last access, ns; the policy's order at open */
    uint32_t len;                       /* chunk length */
    uint32_t slot;                      /* slot index in class cls */
    uint32_t refs;                      /* table (while live) + readers + remover */
    uint8_t cls;                        /* class index or ST_INLINE */
    uint8_t dead;                       /* unlinked from table and policy */
    uint8_t touched;                    /* read since open: atime to write back */
    uint8_t has_arec;                   /* an 'A' record exists in RocksDB */
    uint8_t pinned;                     /* pinned in the policy (a pin prefix matches) */
    uint8_t legacy;                     /* inline, its bytes in its 'C' record (written before 'D') */
} st_entry;



typedef struct st_class {
    uint64_t size;                      /* bytes per slot, multiple of NVME_ALIGN */
    int fd;                             /* data-<size>.dat */
    uint32_t nslots;                    /* slots handed out so far (high-water) */
    uint32_t *free;                     /* min-heap of free slots < nslots */
    uint32_t nfree, cfree;
} st_class;

enum { ST_SIDE_READ, ST_SIDE_READ_DB, ST_SIDE_WRITE, ST_SIDES };

struct nvme_tier {
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
    gr__htab table;                     /* the index: key -> entry (grows in steps) */
    policy *pol;                        /* every entry in the table, + gpn */
    policy_node gpn;                    /* pinned pseudo-entry of gpn.size garbage bytes */
    idset pins;                         /* ids (key prefixes) of pinned files, not persisted */
    uint64_t pinned_bytes;              /* charge of the pinned entries */
    int gpn_in;                         /* gpn is inserted */
    uint64_t slot_bytes, meta_live, garbage, garbage_settled, pending_free;
    uint64_t tick;
    int compacting;
    int inflight;                       /* puts holding a reservation, not linked yet */
    nvme_stats st;
    /* Device health (nvme.c, st_usable_locked / st_note_locked): after
     * ST_FAIL_STREAK device errors in a row on one side (reads of the
     * data files, reads of RocksDB, or writes) the tier goes offline (gets miss, puts refused) or, on
     * ENOSPC, full (puts refused) until retry_ns, then lets one operation
     * probe the device; a success brings it back, a failure doubles the
     * back-off (up to ST_BACKOFF_MAX_NS).  The sides count apart: a device
     * whose reads all fail is broken however well its writes go, and the
     * write-behind of each chunk a failed read sent to the source would
     * otherwise reset the count every time.  Reads of small chunks kept
     * inside RocksDB count apart from reads of the data files: they may
     * come from RocksDB's block cache, and their successes, completing
     * between failing slot reads, kept a tier whose data files all fail
     * to read online. */
    int state;                          /* NVME_STATE_* */
    unsigned err_streak[ST_SIDES];             /* ST_SIDE_*: errors since that side's last success */
    uint64_t retry_ns, backoff_ns;
    /* The stats as of the last release of lock (nvme__unlock), for
     * nvme_get_stats without the lock: it runs on the event loop, which
     * must never wait while an I/O thread holds the lock over a scan of
     * the whole index.  A seqlock: odd while being written. */
    uint64_t pub_seq;
    uint64_t pub[(sizeof(nvme_stats) + 7) / 8];
};

#define ST_FAIL_STREAK      3
#define ST_BACKOFF_MIN_NS   (500ull * 1000 * 1000)
#define ST_BACKOFF_MAX_NS   (30ull * 1000 * 1000 * 1000)

/* ---- small helpers ---- */

static inline uint64_t st_round(uint64_t x)
{
    return (x + NVME_ALIGN - 1) & ~(uint64_t)(NVME_ALIGN - 1);
}

static inline void st_dbkey(uint8_t out[ST_DBKEY_LEN], char pfx, const uint8_t key[CHUNK_KEY_LEN])
{
    out[0] = (uint8_t)pfx;
    memcpy(out + 1, key, CHUNK_KEY_LEN);
}

static inline uint64_t st_hash(const uint8_t key[CHUNK_KEY_LEN])
{
    return XXH3_64bits(key, CHUNK_KEY_LEN);
}

static inline int st_is_inline(const st_entry *e)
{
    return e->cls == ST_INLINE;
}

/* What a live entry adds to meta_live: its records and, paid in advance,
 * their tombstones, so that removing it never needs room. */
static inline uint64_t st_meta_charge(const st_entry *e)
{
    return 2 * (ST_REC_BYTES(st_is_inline(e) ? e->len : 0) + ST_CTOMB_BYTES(st_is_inline(e))) +
           (e->has_arec ? 2 * (ST_AREC_BYTES + ST_TOMB_BYTES) : 0);
}

static inline uint64_t st_used_locked(const nvme_tier *s)
{
    return s->slot_bytes + s->meta_live + s->garbage + s->reserve;
}

/* Copy the stats to the published snapshot; lock held. */
void nvme__publish_locked(nvme_tier *s);

/* Publish, then release lock: every unlock of the tier goes through here. */
static inline void nvme__unlock(nvme_tier *s)
{
    nvme__publish_locked(s);
    pthread_mutex_unlock(&s->lock);
}

/* Garbage above which a full compaction pays: half the live metadata (so
 * compaction rewrites at most ~3 bytes per garbage byte), at least
 * ST_COMPACT_MIN, at most a quarter of the space left after the reserve. */
static inline uint64_t st_compact_thr_locked(const nvme_tier *s)
{
    uint64_t thr = s->meta_live / 2, cap = (s->capacity - s->reserve) / 4;

    if (thr < ST_COMPACT_MIN)
        thr = ST_COMPACT_MIN;
    return thr < cap ? thr : cap;
}

typedef struct st_rec {
    unsigned kind;
    uint64_t cls_bytes, slot, len, csum, atime;
    int legacy;                 /* inline with its bytes in the record (else in 'D') */
} st_rec;

/* ---- in nvme.c, used by nvme_load.c ---- */

/* Decode a 'C' record.  0, or -EINVAL when v is not a well-formed one. */
int nvme__rec_decode(const uint8_t *v, size_t vlen, st_rec *r);

/* Smallest class whose slots hold alen bytes, or -1. */
int nvme__class_for(const nvme_tier *s, uint64_t alen);

/* The live entry of key, or NULL.  Valid while the lock is held. */
st_entry *nvme__find_locked(nvme_tier *s, const uint8_t key[CHUNK_KEY_LEN]);

/* Link a new entry (key not present) into the table, without the policy:
 * store_put inserts it there at once, store_open once all are loaded
 * (nvme__policy_insert_locked). */
void nvme__link_locked(nvme_tier *s, st_entry *e);

/* Take e out of the table (not out of the policy) and mark it dead. */
void nvme__unhash_locked(nvme_tier *s, st_entry *e);

/* Every entry of the table, in no particular order, into v (count
 * slots at least).  Returns how many. */
size_t nvme__collect_locked(nvme_tier *s, st_entry **v);

/* Hand a linked entry to the policy as a new item, sized by all it holds
 * of the capacity. */
void nvme__policy_insert_locked(nvme_tier *s, st_entry *e);

/* Add slot to class c's free heap.  0 or -ENOMEM. */
int nvme__heap_push(st_class *c, uint32_t slot);

/* Punch [off, off + len) out of class c's file.  0 or -errno. */
int nvme__punch(st_class *c, uint64_t off, uint64_t len);

/* Flush and fully compact RocksDB, then forget the garbage settled before.
 * Called with the lock held and !s->compacting; drops it meanwhile. */
void nvme__compact_locked(nvme_tier *s);

/* Make used + need fit the capacity (evicting the policy's victims,
 * waiting, compacting).  Lock held; dropped around I/O and waits.  0 or
 * -ENOSPC. */
int nvme__make_room_locked(nvme_tier *s, uint64_t need);

#endif
