/*
 * nvme_load.c - opening the NVMe tier (see nvme.h, and nvme.c for the
 * design): validate the configuration, create the eviction policy, open
 * RocksDB with options that bound its own files (the reserve), open the
 * data files, then rebuild the in-memory state from what is on disk: the
 * table from the 'C' and 'A' records, the free-slot heaps and holes from
 * the slots in use, the policy in access-time order, the accounting, and
 * the garbage RocksDB holds.  Whatever cannot be trusted (malformed
 * records, slots past a file's end, two records on one slot, stray keys) is
 * deleted, and if the capacity was lowered the policy's victims go until
 * the tier fits.  Runs on one thread before the store is shared.
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
#include <unistd.h>

#include <rocksdb/c.h>

#include "log.h"
#include "policy.h"
#include "nvme.h"
#include "nvme_int.h"

#define ST_META_KEY      "M"
#define ST_META_MAGIC    0x31545347u            /* "GST1" */

/* RocksDB options that bound its own files (see st_reserve). */
#define ST_WRITE_BUFFER  (4u << 20)
#define ST_MANIFEST_MAX  (1u << 20)
#define ST_LOG_MAX       (512u << 10)  /* at WARN level RocksDB logs little */
#define ST_LOG_KEEP      2
#define ST_SMALL_FILES   (2u << 20)     /* OPTIONS, CURRENT, IDENTITY, LOCK, dirs, a new WAL */

#define ST_INLINE_LIMIT  (1u << 20)     /* largest inline_max accepted */
#define ST_CHUNK_LIMIT   (1u << 30)     /* largest max_chunk accepted (u32 lengths) */

static int st_class_by_size(const nvme_tier *s, uint64_t size)
{
    int c = nvme__class_for(s, size);

    return c >= 0 && s->cls[c].size == size ? c : -1;
}

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
static int st_make_classes(nvme_tier *s)
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

static int st_open_db(nvme_tier *s, char *err, size_t errlen)
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
static int st_db_empty(nvme_tier *s)
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
static int st_check_meta(nvme_tier *s, char *err, size_t errlen)
{
    uint8_t v[8];
    char *e = NULL, *got;
    size_t vlen = 0;

    got = rocksdb_get(s->db, s->ropts, ST_META_KEY, 1, &vlen, &e);
    if (!e && !got && !st_db_empty(s)) {
        snprintf(err, errlen, "%s/index: a RocksDB database that is not a granary store", s->path);
        return -EINVAL;
    }
    if (!e && got && (vlen != 8 || gr__le_get64((uint8_t *)got) != ((uint64_t)ST_REC_VERSION << 32 | ST_META_MAGIC))) {
        snprintf(err, errlen, "%s: not a granary store of format %d", s->path, ST_REC_VERSION);
        rocksdb_free(got);
        return -EINVAL;
    }
    if (!e && !got) {
        gr__le_put64(v, (uint64_t)ST_REC_VERSION << 32 | ST_META_MAGIC);
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
static int st_open_files(nvme_tier *s, char *err, size_t errlen)
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
            log_warn("nvme: unlink %s/%s: %s", s->path, de->d_name, strerror(errno));
    }
    closedir(d);
    if (rc < 0)
        return rc;
    if (s->buffered)
        log_warn("nvme: %s refuses O_DIRECT, using buffered I/O", s->path);
    /* Probe past the end of the file, where no data can be lost. */
    if (s->ncls && (fstat(s->cls[0].fd, &st) < 0 ||
                    (rc = nvme__punch(&s->cls[0], st_round((uint64_t)st.st_size) + NVME_ALIGN,
                                   NVME_ALIGN)) < 0)) {
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

static void st_dels_flush(nvme_tier *s, st_dels *d)
{
    char *e = NULL;

    if (!rocksdb_writebatch_count(d->b))
        return;
    rocksdb_write(s->db, s->wopts, d->b, &e);
    rocksdb_writebatch_clear(d->b);
    if (e) {
        log_error("nvme: rocksdb delete in %s: %s", s->path, e);
        rocksdb_free(e);
        d->err = -EIO;
    }
}

static void st_dels_add(nvme_tier *s, st_dels *d, const void *k, size_t klen)
{
    rocksdb_writebatch_delete(d->b, k, klen);
    d->n++;
    if (rocksdb_writebatch_count(d->b) >= ST_BATCH_KEYS)
        st_dels_flush(s, d);
}

/* One 'C' record at open: the entry, or NULL when the record is malformed,
 * too long, of an unknown class, or points beyond its data file. */
static st_entry *st_load_record(nvme_tier *s, const uint8_t *k, const uint8_t *v, size_t vlen,
                                const uint64_t *fsize)
{
    st_entry *e;
    st_rec r;
    int ci = -1;

    if (nvme__rec_decode(v, vlen, &r) < 0 || r.len > s->max_chunk)
        return NULL;
    if (r.kind == ST_KIND_SLOT) {
        ci = st_class_by_size(s, r.cls_bytes);
        if (ci < 0 || st_round(r.len) > r.cls_bytes || r.slot >= UINT32_MAX ||
            r.slot * r.cls_bytes + st_round(r.len) > fsize[ci])
            return NULL;
    }
    if (!(e = calloc(1, sizeof(*e))))
        return NULL;
    memcpy(e->key, k + 1, CHUNK_KEY_LEN);
    e->cls = ci < 0 ? ST_INLINE : (uint8_t)ci;
    e->slot = (uint32_t)r.slot;
    e->len = (uint32_t)r.len;
    e->csum = r.csum;
    e->atime = r.atime;
    e->legacy = (uint8_t)r.legacy;
    e->refs = 1;
    return e;
}

typedef struct st_arec_time {
    uint8_t key[CHUNK_KEY_LEN];
    uint64_t atime;
} st_arec_time;

/*
 * Build the table from RocksDB: 'C' records become entries, 'A' records
 * raise their access times; malformed records, orphan 'A' records and
 * unknown keys are deleted (they would take space nobody accounts for).
 */
static int st_load_index(nvme_tier *s, st_dels *d, char *err, size_t errlen)
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
    /* Every key but the 'D' records (the inline chunks' bytes, nearly all
     * of the index's size): the iterator jumps from the first 'D' key to
     * the first key after them, so opening reads the small records only.
     * A 'D' record is written and deleted in one batch with its 'C'
     * record, so none is an orphan. */
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &klen);
        const uint8_t *v;
        st_entry *ent;

        if (klen >= 1 && k[0] == ST_PFX_DATA) {
            const char after[1] = { ST_PFX_DATA + 1 };
            rocksdb_iter_seek(it, after, 1);
            if (!rocksdb_iter_valid(it))
                break;
            k = (const uint8_t *)rocksdb_iter_key(it, &klen);
        }
        v = (const uint8_t *)rocksdb_iter_value(it, &vlen);

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
            memcpy(at[nat].key, k + 1, CHUNK_KEY_LEN);
            at[nat++].atime = gr__le_get64(v);
            continue;
        }
        if (klen == ST_DBKEY_LEN && k[0] == ST_PFX_CHUNK &&
            (ent = st_load_record(s, k, v, vlen, fsize))) {
            nvme__link_locked(s, ent);
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
        st_entry *ent = nvme__find_locked(s, at[i].key);
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

/* Entries sorted by a key held beside the pointer (no pointer chasing in
 * the comparisons: an open sorts millions). */
typedef struct st_sortent {
    uint64_t k;
    st_entry *e;
    size_t vi;                  /* its index in the collected array */
} st_sortent;

static int st_cmp_sortent(const void *a, const void *b)
{
    uint64_t x = ((const st_sortent *)a)->k, y = ((const st_sortent *)b)->k;

    return x < y ? -1 : x > y;
}

/* Delete an entry found at open (no accounting yet). */
static void st_drop_at_open(nvme_tier *s, st_dels *d, st_entry *e)
{
    uint8_t k[ST_DBKEY_LEN];

    nvme__unhash_locked(s, e);
    st_dbkey(k, ST_PFX_CHUNK, e->key);
    st_dels_add(s, d, k, sizeof(k));
    if (st_is_inline(e) && !e->legacy) {
        k[0] = ST_PFX_DATA;
        st_dels_add(s, d, k, sizeof(k));
    }
    if (e->has_arec) {
        k[0] = ST_PFX_ATIME;
        st_dels_add(s, d, k, sizeof(k));
    }
    free(e);
}

/*
 * With the table built: drop entries that share a slot, mark every other
 * slot free, punch everything between used regions and cut each file after
 * its last one (an interrupted write leaks nothing), hand the entries to
 * the policy oldest access first, and add up the accounting.
 */
static int st_rebuild(nvme_tier *s, st_dels *d, char *err, size_t errlen)
{
    size_t cap = gr__htab_count(&s->table) + 1, n = 0, i = 0, all;
    st_entry **v = malloc(cap * sizeof(*v));
    st_sortent *se = malloc(cap * sizeof(*se));

    if (!v || !se) {
        free(v);
        free(se);
        snprintf(err, errlen, "%s: out of memory", s->path);
        return -ENOMEM;
    }
    all = nvme__collect_locked(s, v);
    for (size_t j = 0; j < all; j++)
        if (!st_is_inline(v[j]))
            se[n++] = (st_sortent){ (uint64_t)v[j]->cls << 32 | v[j]->slot, v[j], j };
    qsort(se, n, sizeof(*se), st_cmp_sortent);
    for (int ci = 0; ci < s->ncls; ci++) {
        st_class *c = &s->cls[ci];
        uint64_t end = 0;
        int rc = 0;

        for (; i < n && se[i].e->cls == ci; i++) {
            st_entry *e = se[i].e;
            uint64_t off = (uint64_t)e->slot * c->size;
            if (c->nslots && e->slot < c->nslots) {
                v[se[i].vi] = NULL;
                st_drop_at_open(s, d, e);           /* second owner of one slot */
                continue;
            }
            for (uint32_t f = c->nslots; f < e->slot && rc == 0; f++)
                rc = nvme__heap_push(c, f);
            if (rc == 0 && off > end)
                rc = nvme__punch(c, end, off - end);
            end = off + st_round(e->len);
            c->nslots = e->slot + 1;
        }
        if (rc == 0 && ftruncate(c->fd, (off_t)end) < 0)
            rc = -errno;
        if (rc < 0) {
            snprintf(err, errlen, "%s/data-%" PRIu64 ".dat: %s", s->path, c->size, strerror(-rc));
            free(v);
            free(se);
            return rc;
        }
    }

    /* Oldest first, so that recency-ordered policies (lru, epoch, sieve's
     * FIFO) restart in the order they had.  Only the access time persists:
     * lfu's frequencies, s3fifo's queues and ghost, and epoch's hit age and
     * ghost are rebuilt by the traffic after a restart. */
    for (n = 0, i = 0; i < all; i++)
        if (v[i])
            se[n++] = (st_sortent){ v[i]->atime, v[i], i };
    qsort(se, n, sizeof(*se), st_cmp_sortent);
    for (i = 0; i < n; i++) {
        st_entry *e = se[i].e;
        nvme__policy_insert_locked(s, e);
        s->meta_live += st_meta_charge(e);
        if (!st_is_inline(e))
            s->slot_bytes += st_round(e->len);
        if (e->atime > s->tick)
            s->tick = e->atime;
    }
    free(v);
    free(se);
    return 0;
}

/* What RocksDB's SST files hold beyond the live records is garbage (from
 * before a crash, or from the access times written at close). */
static void st_measure_garbage(nvme_tier *s, uint64_t tombs)
{
    uint64_t sst = 0, live = 0;

    {
        gr__htab_iter it;
        for (gr__hnode *x = gr__htab_first(&s->table, &it); x; x = gr__htab_next(&it)) {
            st_entry *e = gr__container_of(x, st_entry, hn);
            live += ST_REC_BYTES(st_is_inline(e) ? e->len : 0) + (e->has_arec ? ST_AREC_BYTES : 0);
        }
    }

    if (rocksdb_property_int(s->db, "rocksdb.total-sst-files-size", &sst) != 0)
        sst = 0;
    s->garbage = (sst > live ? 2 * (sst - live) : 0) + 2 * ST_TOMB_BYTES * tombs;
    s->garbage_settled = s->garbage;
}

/* The message for an unknown policy name, with the names known. */
static void st_policy_names(char *err, size_t errlen, const char *name)
{
    int n = snprintf(err, errlen, "nvme: unknown eviction policy \"%s\" (known:", name);

    for (int k = 0; k < POLICY_NKINDS && n >= 0 && (size_t)n < errlen; k++)
        n += snprintf(err + n, errlen - (size_t)n, " %s", policy_kind_name((policy_kind)k));
    if (n >= 0 && (size_t)n < errlen)
        snprintf(err + n, errlen - (size_t)n, ")");
}

int nvme_open(const nvme_config *cfg, nvme_tier **out, char *err, size_t errlen)
{
    nvme_tier *s = NULL;
    st_dels d = { NULL, 0, 0 };
    policy_kind kind = POLICY_LRU;
    uint64_t min;
    int rc = -EINVAL;

    *out = NULL;
    if (!cfg || !cfg->path || !*cfg->path || !cfg->max_chunk || cfg->max_chunk > ST_CHUNK_LIMIT ||
        cfg->inline_max > ST_INLINE_LIMIT) {
        snprintf(err, errlen, "nvme: need a path, 0 < max_chunk <= %u and inline_max <= %u",
                 ST_CHUNK_LIMIT, ST_INLINE_LIMIT);
        return -EINVAL;
    }
    if (cfg->policy && *cfg->policy && policy_kind_parse(cfg->policy, &kind) < 0) {
        st_policy_names(err, errlen, cfg->policy);
        return -EINVAL;
    }
    if (!(s = calloc(1, sizeof(*s))) || !(s->path = strdup(cfg->path)) ||
        gr__htab_init(&s->table, 1024) < 0) {
        rc = -ENOMEM;
        snprintf(err, errlen, "nvme: out of memory");
        goto fail;
    }
    s->capacity = cfg->capacity;
    s->inline_max = cfg->inline_max;
    s->max_chunk = cfg->max_chunk;
    s->reserve = st_reserve(cfg->inline_max);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cv, NULL);
    for (int i = 0; i < ST_STRIPES; i++)
        pthread_mutex_init(&s->stripes[i], NULL);
    if ((rc = st_make_classes(s)) < 0) {
        snprintf(err, errlen, "nvme: out of memory");
        goto fail;
    }
    min = s->reserve + (s->max_chunk > s->inline_max ? st_round(s->max_chunk) : 0) +
          2 * (ST_REC_BYTES(s->max_chunk > s->inline_max ? 0 : s->max_chunk) +
               ST_CTOMB_BYTES(s->max_chunk <= s->inline_max));
    if (s->capacity < min) {
        rc = -EINVAL;
        snprintf(err, errlen, "nvme %s: capacity %" PRIu64 " too small: the index needs a "
                 "%" PRIu64 "-byte reserve plus one %" PRIu64 "-byte chunk, at least %" PRIu64,
                 s->path, s->capacity, s->reserve, s->max_chunk, min);
        goto fail;
    }
    if ((rc = policy_new(kind, s->capacity - s->reserve, &s->pol)) < 0) {
        snprintf(err, errlen, "nvme: out of memory");
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
    {
        /* Size the table for what the index holds (the estimate counts
         * 'C', 'D' and 'A' records, and is rough: take all of it), so
         * loading does not grow it step by step. */
        uint64_t keys = 0;
        if (rocksdb_property_int(s->db, "rocksdb.estimate-num-keys", &keys) == 0 && keys > 2048 &&
            gr__htab_count(&s->table) == 0) {
            gr__htab t;
            if (gr__htab_init(&t, (size_t)(keys < (1u << 30) ? keys : (1u << 30))) == 0) {
                gr__htab_fini(&s->table);
                s->table = t;
            }
        }
    }
    if ((rc = st_load_index(s, &d, err, errlen)) < 0 || (rc = st_rebuild(s, &d, err, errlen)) < 0)
        goto fail;
    st_dels_flush(s, &d);
    st_measure_garbage(s, d.n);

    /* The capacity may have been lowered, or garbage left behind: compact
     * first (cheap at this size, and it keeps chunks), then evict. */
    pthread_mutex_lock(&s->lock);
    if (s->garbage && (s->garbage >= st_compact_thr_locked(s) ||
                       st_used_locked(s) > s->capacity)) {
        nvme__compact_locked(s);
        st_measure_garbage(s, 0);
    }
    rc = nvme__make_room_locked(s, 0);
    nvme__unlock(s);
    if (rc < 0) {
        snprintf(err, errlen, "nvme %s: cannot fit the capacity", s->path);
        goto fail;
    }
    rocksdb_writebatch_destroy(d.b);
    pthread_mutex_lock(&s->lock);
    nvme__unlock(s);            /* the stats as loaded, for nvme_get_stats */
    *out = s;
    return 0;

fail:
    if (d.b)
        rocksdb_writebatch_destroy(d.b);
    nvme_close(&s);
    return rc;
}

