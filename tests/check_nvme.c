/*
 * check_nvme.c - unit tests of the NVMe tier (daemon/nvme.c): round
 * trips at the size boundaries, warm restart with its LRU order, the hard
 * capacity limit measured on disk, corruption and malformed records,
 * concurrent use, prefix drops, the error returns, and the eviction
 * policies (every kind round-trips; epoch keeps a stable subset of a
 * cyclic scan where lru keeps nothing).
 *
 * Each test uses a fresh directory under $TMPDIR (or /tmp).
 * CHECK_STORE_SECONDS sets how long the concurrency test runs (1.5).  A chunk put
 * under (file, index) with length len always holds pat(file, index, len),
 * so any reader can check any bytes it gets back.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <rocksdb/c.h>
#include <xxhash.h>

#include "nvme.h"
#include "nvme_int.h"
#include "testutil.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

typedef struct fixture {
    char *dir;                  /* the temp dir */
    char path[512];             /* the store's directory inside it */
    nvme_config cfg;
    nvme_tier *s;
    uint8_t *buf, *out;         /* aligned, max_chunk rounded up */
} fixture;

static uint64_t rnd_up(uint64_t x)
{
    return (x + NVME_ALIGN - 1) & ~(uint64_t)(NVME_ALIGN - 1);
}

static void mkkey(uint8_t k[CHUNK_KEY_LEN], uint32_t file, uint64_t idx)
{
    for (int i = 0; i < 16; i++)
        k[i] = (uint8_t)(file >> (8 * (i % 4)));
    for (int i = 0; i < 8; i++)
        k[16 + i] = (uint8_t)(idx >> (56 - 8 * i));
}

/* The pattern of chunk (file, idx) at length len: a word generator fast
 * enough for hundreds of MiB under valgrind, differing in every word for
 * every (file, idx, len), so a torn or misplaced read never passes. */
static uint64_t pat_word(uint64_t seed, uint64_t i)
{
    uint64_t x = seed + (i + 1) * 0x9E3779B97F4A7C15ull;

    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t pat_seed(uint32_t file, uint64_t idx, size_t len)
{
    return ((uint64_t)file << 40) ^ (idx << 20) ^ (uint64_t)len ^ ((uint64_t)tu_byte(file, idx) << 56);
}

static void pat_fill(void *buf, uint32_t file, uint64_t idx, size_t len)
{
    uint64_t seed = pat_seed(file, idx, len), *w = buf;
    size_t n = (len + 7) / 8;

    for (size_t i = 0; i < n; i++)
        w[i] = pat_word(seed, i);
}

static int pat_ok(const void *buf, uint32_t file, uint64_t idx, size_t len)
{
    uint64_t seed = pat_seed(file, idx, len), w;
    const uint8_t *b = buf;
    size_t i;

    for (i = 0; i + 8 <= len; i += 8) {
        memcpy(&w, b + i, 8);
        if (w != pat_word(seed, i / 8))
            return 0;
    }
    if (i < len) {
        w = pat_word(seed, i / 8);
        if (memcmp(&w, b + i, len - i) != 0)
            return 0;
    }
    return 1;
}

static void fx_open(fixture *f)
{
    char err[256] = "";
    int rc = nvme_open(&f->cfg, &f->s, err, sizeof(err));

    ck_assert_msg(rc == 0, "store_open: %d %s", rc, err);
}

/* Open a fresh store under eviction policy pol (NULL: the default). */
static void fx_init_policy(fixture *f, uint64_t cap, uint64_t inline_max, uint64_t max_chunk,
                           const char *pol)
{
    memset(f, 0, sizeof(*f));
    f->cfg.policy = pol;
    f->dir = tu_mkdtemp();
    snprintf(f->path, sizeof(f->path), "%s/nvme", f->dir);
    f->cfg.path = f->path;
    f->cfg.capacity = cap;
    f->cfg.inline_max = inline_max;
    f->cfg.max_chunk = max_chunk;
    f->buf = aligned_alloc(NVME_ALIGN, rnd_up(max_chunk));
    f->out = aligned_alloc(NVME_ALIGN, rnd_up(max_chunk));
    ck_assert(f->buf && f->out);
    /* store_put writes the tail up to the 4 KiB boundary: keep it defined. */
    memset(f->buf, 0, rnd_up(max_chunk));
    fx_open(f);
}

static void fx_init(fixture *f, uint64_t cap, uint64_t inline_max, uint64_t max_chunk)
{
    fx_init_policy(f, cap, inline_max, max_chunk, NULL);
}

static void fx_reopen(fixture *f)
{
    nvme_close(&f->s);
    ck_assert_ptr_null(f->s);
    fx_open(f);
}

static void fx_done(fixture *f)
{
    nvme_close(&f->s);
    tu_rmrf(f->dir);
    free(f->dir);
    free(f->buf);
    free(f->out);
}

static int put(fixture *f, uint32_t file, uint64_t idx, size_t len)
{
    uint8_t k[CHUNK_KEY_LEN];

    mkkey(k, file, idx);
    pat_fill(f->buf, file, idx, len);
    return nvme_put(f->s, k, f->buf, len);
}

/* 0 when the chunk is there with the pattern of length want (any length
 * when want is SIZE_MAX), else the error. */
static int get_check(fixture *f, uint32_t file, uint64_t idx, size_t want)
{
    uint8_t k[CHUNK_KEY_LEN];
    size_t len = SIZE_MAX;
    int rc;

    mkkey(k, file, idx);
    rc = nvme_get(f->s, k, f->out, rnd_up(f->cfg.max_chunk), &len);
    if (rc < 0)
        return rc;
    ck_assert_msg(want == SIZE_MAX || len == want, "len %zu, want %zu", len, want);
    ck_assert_msg(pat_ok(f->out, file, idx, len), "bad bytes for %u/%llu len %zu",
                  file, (unsigned long long)idx, len);
    return 0;
}

static int has(fixture *f, uint32_t file, uint64_t idx)
{
    uint8_t k[CHUNK_KEY_LEN];

    mkkey(k, file, idx);
    return nvme_contains(f->s, k);
}

static nvme_stats stats(fixture *f)
{
    nvme_stats st;

    nvme_get_stats(f->s, &st);
    return st;
}

/* The hard limit, on disk and in the accounting, which must also cover
 * what is really on disk. */
static void assert_within(fixture *f)
{
    nvme_stats st = stats(f);
    int64_t du = nvme_disk_usage(f->path);

    ck_assert_int_ge(du, 0);
    ck_assert_msg((uint64_t)du <= f->cfg.capacity, "du %lld > capacity %llu",
                  (long long)du, (unsigned long long)f->cfg.capacity);
    ck_assert_msg(st.used_bytes <= f->cfg.capacity, "used %llu > capacity %llu",
                  (unsigned long long)st.used_bytes, (unsigned long long)f->cfg.capacity);
    ck_assert_msg((uint64_t)du <= st.used_bytes, "du %lld > used %llu",
                  (long long)du, (unsigned long long)st.used_bytes);
}

/* The data file holding most blocks (the tests put one class in it). */
static void biggest_data_file(fixture *f, char *out, size_t outlen)
{
    char pat[600];
    glob_t g;
    blkcnt_t best = -1;

    snprintf(pat, sizeof(pat), "%s/data-*.dat", f->path);
    ck_assert_int_eq(glob(pat, 0, NULL, &g), 0);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        struct stat st;
        ck_assert_int_eq(stat(g.gl_pathv[i], &st), 0);
        if (st.st_blocks > best) {
            best = st.st_blocks;
            snprintf(out, outlen, "%s", g.gl_pathv[i]);
        }
    }
    globfree(&g);
    ck_assert_int_gt(best, 0);
}

/* A raw RocksDB handle on the store's index (the store must be closed). */
static rocksdb_t *raw_open(fixture *f, rocksdb_options_t **o)
{
    char dir[600], *err = NULL;
    rocksdb_t *db;

    snprintf(dir, sizeof(dir), "%s/index", f->path);
    *o = rocksdb_options_create();
    db = rocksdb_open(*o, dir, &err);
    ck_assert_msg(db != NULL, "raw open: %s", err ? err : "?");
    return db;
}

static void raw_close(rocksdb_t *db, rocksdb_options_t *o)
{
    rocksdb_close(db);
    rocksdb_options_destroy(o);
}

/* ---- tests ---- */

START_TEST(test_roundtrip_sizes)
{
    fixture f;
    const size_t im = 16 * KIB, mc = MIB;
    const size_t lens[] = { 0, 1, 7, 4095, 4096, 4097, im - 1, im, im + 1, 65536 + 3,
                            300000, mc - 1, mc };
    const size_t n = sizeof(lens) / sizeof(lens[0]);

    fx_init(&f, 48 * MIB, im, mc);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(put(&f, 1, i, lens[i]), 0);
    for (size_t i = 0; i < n; i++) {
        ck_assert(has(&f, 1, i));
        ck_assert_int_eq(get_check(&f, 1, i, lens[i]), 0);
    }
    ck_assert_uint_eq(stats(&f).chunks, n);
    ck_assert_uint_eq(stats(&f).hits, n);
    ck_assert_uint_eq(stats(&f).puts, n);
    assert_within(&f);
    fx_done(&f);
}
END_TEST

START_TEST(test_miss_and_errors)
{
    fixture f;
    uint8_t k[CHUNK_KEY_LEN];
    size_t len;

    fx_init(&f, 48 * MIB, 16 * KIB, MIB);
    ck_assert_int_eq(get_check(&f, 9, 9, SIZE_MAX), -ENOENT);
    mkkey(k, 9, 9);
    ck_assert_int_eq(nvme_delete(f.s, k), -ENOENT);
    ck_assert_int_eq(nvme_contains(f.s, k), 0);
    ck_assert_uint_eq(stats(&f).misses, 1);

    /* Too long for the tier. */
    ck_assert_int_eq(nvme_put(f.s, k, f.buf, MIB + 1), -E2BIG);
    ck_assert_uint_eq(stats(&f).put_errors, 1);
    ck_assert_int_eq(nvme_contains(f.s, k), 0);

    /* A buffer too small for the chunk. */
    ck_assert_int_eq(put(&f, 9, 9, 100000), 0);
    ck_assert_int_eq(nvme_get(f.s, k, f.out, 64 * KIB, &len), -ENOBUFS);
    ck_assert_int_eq(nvme_get(f.s, k, f.out, rnd_up(100000), &len), 0);
    ck_assert_uint_eq(len, 100000);

    /* Delete, then it is gone. */
    ck_assert_int_eq(nvme_delete(f.s, k), 0);
    ck_assert_int_eq(get_check(&f, 9, 9, SIZE_MAX), -ENOENT);
    ck_assert_uint_eq(stats(&f).chunks, 0);
    fx_done(&f);
}
END_TEST

START_TEST(test_open_errors)
{
    char *dir = tu_mkdtemp(), path[512], err[256] = "";
    nvme_config cfg = { .capacity = 4 * MIB, .inline_max = 16 * KIB, .max_chunk = MIB };
    nvme_tier *s = (nvme_tier *)&cfg;
    int rc;

    snprintf(path, sizeof(path), "%s/nvme", dir);
    cfg.path = path;
    rc = nvme_open(&cfg, &s, err, sizeof(err));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err, "too small") != NULL, "message: %s", err);

    cfg.capacity = 64 * MIB;
    cfg.max_chunk = 0;
    err[0] = 0;
    ck_assert_int_eq(nvme_open(&cfg, &s, err, sizeof(err)), -EINVAL);
    ck_assert(err[0] != 0);

    /* A second open of one directory fails (RocksDB's lock). */
    cfg.max_chunk = MIB;
    ck_assert_int_eq(nvme_open(&cfg, &s, err, sizeof(err)), 0);
    {
        nvme_tier *s2 = NULL;
        ck_assert_int_lt(nvme_open(&cfg, &s2, err, sizeof(err)), 0);
        ck_assert_ptr_null(s2);
    }
    nvme_close(&s);
    nvme_close(&s);            /* NULL-safe */

    /* An unknown eviction policy is refused, with the names that exist;
     * an empty name is the default. */
    cfg.policy = "fifo";
    err[0] = 0;
    s = (nvme_tier *)&cfg;
    ck_assert_int_eq(nvme_open(&cfg, &s, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err, "unknown eviction policy \"fifo\"") && strstr(err, "epoch"),
                  "message: %s", err);
    cfg.policy = "";
    ck_assert_int_eq(nvme_open(&cfg, &s, err, sizeof(err)), 0);
    nvme_close(&s);
    cfg.policy = NULL;

    /* Somebody else's RocksDB where the index would be is left alone. */
    {
        char idx[600], *e = NULL;
        rocksdb_options_t *o = rocksdb_options_create();
        rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
        rocksdb_t *db;

        snprintf(path, sizeof(path), "%s/other", dir);
        ck_assert_int_eq(mkdir(path, 0750), 0);
        snprintf(idx, sizeof(idx), "%s/index", path);
        rocksdb_options_set_create_if_missing(o, 1);
        db = rocksdb_open(o, idx, &e);
        ck_assert(db && !e);
        rocksdb_put(db, wo, "foo", 3, "bar", 3, &e);
        ck_assert(!e);
        rocksdb_close(db);
        ck_assert_int_eq(nvme_open(&cfg, &s, err, sizeof(err)), -EINVAL);
        ck_assert_msg(strstr(err, "not a granary store") != NULL, "message: %s", err);
        rocksdb_writeoptions_destroy(wo);
        rocksdb_options_destroy(o);
    }
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(test_replace)
{
    fixture f;
    nvme_stats st0, st;

    fx_init(&f, 48 * MIB, 16 * KIB, MIB);
    st0 = stats(&f);
    ck_assert_int_eq(put(&f, 2, 1, 1000), 0);           /* inline */
    ck_assert_int_eq(put(&f, 2, 1, 200000), 0);         /* -> slot */
    ck_assert_int_eq(get_check(&f, 2, 1, 200000), 0);
    ck_assert_int_eq(put(&f, 2, 1, 300000), 0);         /* -> another class */
    ck_assert_int_eq(get_check(&f, 2, 1, 300000), 0);
    ck_assert_int_eq(put(&f, 2, 1, 10), 0);             /* -> inline again */
    ck_assert_int_eq(get_check(&f, 2, 1, 10), 0);
    st = stats(&f);
    ck_assert_uint_eq(st.chunks, 1);
    /* The slots are back: only the inline record and garbage remain. */
    ck_assert_uint_lt(st.used_bytes - st0.used_bytes, 8 * KIB);
    fx_reopen(&f);
    ck_assert_int_eq(get_check(&f, 2, 1, 10), 0);
    ck_assert_uint_eq(stats(&f).chunks, 1);
    assert_within(&f);
    fx_done(&f);
}
END_TEST

START_TEST(test_warm_restart)
{
    fixture f;
    const int n = 60;

    fx_init(&f, 64 * MIB, 16 * KIB, MIB);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(&f, 3, (uint64_t)i, (size_t)(i * 7919 * 3) % (400 * KIB) + 1), 0);
    for (int i = 0; i < n; i += 3)
        ck_assert_int_eq(get_check(&f, 3, (uint64_t)i, SIZE_MAX), 0);
    fx_reopen(&f);
    ck_assert_uint_eq(stats(&f).chunks, (uint64_t)n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(get_check(&f, 3, (uint64_t)i, (size_t)(i * 7919 * 3) % (400 * KIB) + 1), 0);
    /* And once more, after a session that wrote access times. */
    fx_reopen(&f);
    ck_assert_uint_eq(stats(&f).chunks, (uint64_t)n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(get_check(&f, 3, (uint64_t)i, SIZE_MAX), 0);
    assert_within(&f);
    fx_done(&f);
}
END_TEST

/* The stats never wait for the tier's lock (issue 13): the daemon reads
 * them on its event loop while an I/O thread may hold the lock over a scan
 * of the whole index.  Another thread holds the lock until nvme_get_stats
 * has returned; with a locking nvme_get_stats this never finishes (the
 * test times out). */
typedef struct holder {
    nvme_tier *s;
    int locked, done;
} holder;

static void *hold_lock(void *arg)
{
    holder *h = arg;

    pthread_mutex_lock(&h->s->lock);
    __atomic_store_n(&h->locked, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&h->done, __ATOMIC_ACQUIRE))
        tu_sleep_ms(1);
    pthread_mutex_unlock(&h->s->lock);
    return NULL;
}

START_TEST(test_stats_without_lock)
{
    fixture f;
    holder h = { 0 };
    pthread_t t;
    nvme_stats st;

    fx_init(&f, 64 * MIB, 16 * KIB, MIB);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(put(&f, 4, (uint64_t)i, 100 * KIB), 0);
    h.s = f.s;
    ck_assert_int_eq(pthread_create(&t, NULL, hold_lock, &h), 0);
    while (!__atomic_load_n(&h.locked, __ATOMIC_ACQUIRE))
        tu_sleep_ms(1);
    nvme_get_stats(f.s, &st);           /* the lock is held elsewhere */
    __atomic_store_n(&h.done, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    ck_assert_uint_eq(st.chunks, 10);
    ck_assert_uint_gt(st.used_bytes, 10 * 100 * KIB - 1);
    ck_assert_int_eq(st.state, NVME_STATE_OK);
    fx_done(&f);
}
END_TEST

/* The data file of the last size class holding chunks replaced by a
 * directory: its slot reads fail (pread: EISDIR, an I/O error). */
static void break_slot_reads(fixture *f)
{
    int dfd, cls = -1;

    for (int c = 0; c < f->s->ncls; c++)
        if (f->s->cls[c].nslots > 0)
            cls = c;
    ck_assert_int_ge(cls, 0);
    dfd = open(f->dir, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(dfd, 0);
    ck_assert_int_ge(dup2(dfd, f->s->cls[cls].fd), 0);
    close(dfd);
}

/*
 * A device whose reads fail while its writes go through goes offline: each
 * failed read sends its chunk to the source, whose write-behind is a
 * successful put, and that once reset the count of failures between any
 * two reads (test_faults.sh saw the tier stay "ok" now and then).  The
 * 100 KiB chunks' data file is replaced by a directory (pread: EISDIR), the
 * 400 KiB chunks' file stays good.
 */
START_TEST(test_read_errors_offline_despite_writes)
{
    fixture f;
    nvme_stats st;

    fx_init(&f, 64 * MIB, 16 * KIB, MIB);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(put(&f, 7, (uint64_t)i, 100 * KIB), 0);
    break_slot_reads(&f);
    for (int i = 0; i < ST_FAIL_STREAK; i++) {
        ck_assert_int_eq(get_check(&f, 7, (uint64_t)i, 100 * KIB), -EIO);
        if (i + 1 < ST_FAIL_STREAK)
            ck_assert_int_eq(put(&f, 8, (uint64_t)i, 400 * KIB), 0);
    }
    nvme_get_stats(f.s, &st);
    ck_assert_int_eq(st.state, NVME_STATE_OFFLINE);
    ck_assert_uint_ge(st.io_errors, ST_FAIL_STREAK);
    /* A write that goes through while reads still fail does not bring it
     * back: once the back-off is over, the put probes, goes through, and
     * the tier stays offline. */
    f.s->retry_ns = 0;
    ck_assert_int_eq(put(&f, 8, 10, 400 * KIB), 0);
    nvme_get_stats(f.s, &st);
    ck_assert_int_eq(st.state, NVME_STATE_OFFLINE);
    /* A read that works does. */
    f.s->retry_ns = 0;
    ck_assert_int_eq(get_check(&f, 8, 0, 400 * KIB), 0);
    nvme_get_stats(f.s, &st);
    ck_assert_int_eq(st.state, NVME_STATE_OK);
    fx_done(&f);
}
END_TEST

/*
 * Reads of small chunks kept inside RocksDB say nothing of the data files:
 * a tier whose slot reads all fail goes offline even though inline reads,
 * served by RocksDB (or its block cache), succeed between the failures
 * (test_faults.sh's read-error case stayed "ok" 3 times in 18 from that).
 * An inline read after the back-off does not bring it back either.
 */
START_TEST(test_read_errors_offline_despite_inline_reads)
{
    fixture f;
    nvme_stats st;

    fx_init(&f, 64 * MIB, 16 * KIB, MIB);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(put(&f, 7, (uint64_t)i, 100 * KIB), 0);
        ck_assert_int_eq(put(&f, 9, (uint64_t)i, 12345), 0);
    }
    break_slot_reads(&f);
    for (int i = 0; i < ST_FAIL_STREAK; i++) {
        ck_assert_int_eq(get_check(&f, 7, (uint64_t)i, 100 * KIB), -EIO);
        if (i + 1 < ST_FAIL_STREAK)
            ck_assert_int_eq(get_check(&f, 9, (uint64_t)i, 12345), 0);
    }
    nvme_get_stats(f.s, &st);
    ck_assert_int_eq(st.state, NVME_STATE_OFFLINE);
    f.s->retry_ns = 0;
    ck_assert_int_eq(get_check(&f, 9, 3, 12345), 0);
    nvme_get_stats(f.s, &st);
    ck_assert_int_eq(st.state, NVME_STATE_OFFLINE);
    fx_done(&f);
}
END_TEST

START_TEST(test_lru_order_survives_restart)
{
    fixture f;
    uint64_t i;

    fx_init(&f, 40 * MIB, 16 * KIB, MIB);
    /* Oldest first: B (1), C (2), then A (0) read after them. */
    ck_assert_int_eq(put(&f, 4, 0, 512 * KIB), 0);
    ck_assert_int_eq(put(&f, 4, 1, 512 * KIB), 0);
    ck_assert_int_eq(put(&f, 4, 2, 512 * KIB), 0);
    ck_assert_int_eq(get_check(&f, 4, 0, 512 * KIB), 0);
    fx_reopen(&f);
    for (i = 100; has(&f, 4, 1); i++) {
        ck_assert_uint_lt(i, 1000);
        ck_assert(has(&f, 4, 0) && has(&f, 4, 2));
        ck_assert_int_eq(put(&f, 5, i, 512 * KIB), 0);
    }
    ck_assert_uint_gt(stats(&f).evictions, 0);
    ck_assert(has(&f, 4, 0));
    for (; has(&f, 4, 2); i++) {
        ck_assert_uint_lt(i, 1000);
        ck_assert(has(&f, 4, 0));
        ck_assert_int_eq(put(&f, 5, i, 512 * KIB), 0);
    }
    /* The most recent puts are all there. */
    for (uint64_t j = i - 5; j < i; j++)
        ck_assert_int_eq(get_check(&f, 5, j, 512 * KIB), 0);
    assert_within(&f);
    fx_done(&f);
}
END_TEST

/* Put 3x the capacity; after every put the limit holds on disk and the most
 * recent chunks are all there. */
static void capacity_run(uint64_t cap, uint64_t inline_max, uint64_t max_chunk,
                         size_t (*len_of)(uint64_t))
{
    fixture f;
    uint64_t total = 0, i;

    fx_init(&f, cap, inline_max, max_chunk);
    for (i = 0; total < 3 * cap; i++) {
        size_t len = len_of(i);

        ck_assert_int_eq(put(&f, 6, i, len), 0);
        total += len;
        assert_within(&f);
        for (uint64_t j = i >= 3 ? i - 3 : 0; j <= i; j++)
            ck_assert_int_eq(get_check(&f, 6, j, len_of(j)), 0);
    }
    ck_assert_uint_gt(stats(&f).evictions, 0);
    fx_reopen(&f);
    assert_within(&f);
    for (uint64_t j = i - 4; j < i; j++)
        ck_assert_int_eq(get_check(&f, 6, j, len_of(j)), 0);
    fx_done(&f);
}

static size_t mixed_len(uint64_t i)
{
    uint64_t h = i * 0x9E3779B97F4A7C15ull >> 40;

    switch (i % 5) {
    case 0: return (size_t)(h % MIB) + 1;               /* any size */
    case 1: return MIB;                                 /* full chunk */
    case 2: return (size_t)(h % (16 * KIB)) + 1;        /* inline */
    case 3: return (size_t)(h % (128 * KIB)) + 16 * KIB + 1;
    default: return (size_t)(h % 4096) + 1;
    }
}

static size_t inline_len(uint64_t i)
{
    return (size_t)((i * 0x9E3779B97F4A7C15ull >> 40) % (64 * KIB)) + 1;
}

START_TEST(test_capacity_mixed)
{
    capacity_run(40 * MIB, 16 * KIB, MIB, mixed_len);
}
END_TEST

/* All inline: RocksDB's own garbage is what must be kept in bounds. */
START_TEST(test_capacity_inline)
{
    capacity_run(40 * MIB, 64 * KIB, 256 * KIB, inline_len);
}
END_TEST

START_TEST(test_lower_capacity_at_open)
{
    fixture f;
    const int n = 40;

    fx_init(&f, 64 * MIB, 16 * KIB, MIB);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(put(&f, 7, (uint64_t)i, MIB), 0);
    nvme_close(&f.s);
    f.cfg.capacity = 30 * MIB;
    fx_open(&f);
    assert_within(&f);
    ck_assert_uint_lt(stats(&f).chunks, (uint64_t)n);
    ck_assert_uint_gt(stats(&f).chunks, 5);
    /* The newest survived, the oldest went. */
    ck_assert_int_eq(get_check(&f, 7, n - 1, MIB), 0);
    ck_assert_int_eq(get_check(&f, 7, 0, MIB), -ENOENT);
    fx_done(&f);
}
END_TEST

START_TEST(test_corrupt_slot)
{
    fixture f;
    char file[600];
    int fd;

    fx_init(&f, 48 * MIB, 16 * KIB, MIB);
    ck_assert_int_eq(put(&f, 8, 1, 100000), 0);
    ck_assert_int_eq(put(&f, 8, 2, 100000), 0);
    biggest_data_file(&f, file, sizeof(file));
    fd = open(file, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, "garbage!", 8, 5000), 8);  /* inside slot 0 */
    close(fd);
    ck_assert_int_eq(get_check(&f, 8, 1, SIZE_MAX), -EBADMSG);
    ck_assert_uint_eq(stats(&f).checksum_errors, 1);
    ck_assert_int_eq(get_check(&f, 8, 1, SIZE_MAX), -ENOENT);
    ck_assert_int_eq(get_check(&f, 8, 2, 100000), 0);
    ck_assert_uint_eq(stats(&f).chunks, 1);
    /* The drop is persistent. */
    fx_reopen(&f);
    ck_assert_int_eq(get_check(&f, 8, 1, SIZE_MAX), -ENOENT);
    ck_assert_int_eq(get_check(&f, 8, 2, 100000), 0);
    fx_done(&f);
}
END_TEST

START_TEST(test_corrupt_inline)
{
    fixture f;
    rocksdb_options_t *o;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    uint8_t k[1 + CHUNK_KEY_LEN];
    char *err = NULL, *v;
    size_t vlen;
    rocksdb_t *db;

    fx_init(&f, 48 * MIB, 16 * KIB, MIB);
    ck_assert_int_eq(put(&f, 9, 1, 3000), 0);
    ck_assert_int_eq(put(&f, 9, 2, 3000), 0);
    nvme_close(&f.s);

    db = raw_open(&f, &o);
    k[0] = 'D';                                         /* the chunk's bytes */
    mkkey(k + 1, 9, 1);
    v = rocksdb_get(db, ro, (const char *)k, sizeof(k), &vlen, &err);
    ck_assert(v && !err && vlen == 3000);
    v[vlen - 1] ^= 0x55;                                /* the chunk's last byte */
    rocksdb_put(db, wo, (const char *)k, sizeof(k), v, vlen, &err);
    ck_assert(!err);
    rocksdb_free(v);
    raw_close(db, o);

    fx_open(&f);
    ck_assert_int_eq(get_check(&f, 9, 1, SIZE_MAX), -EBADMSG);
    ck_assert_uint_eq(stats(&f).checksum_errors, 1);
    ck_assert_int_eq(get_check(&f, 9, 1, SIZE_MAX), -ENOENT);
    ck_assert_int_eq(get_check(&f, 9, 2, 3000), 0);
    rocksdb_readoptions_destroy(ro);
    rocksdb_writeoptions_destroy(wo);
    fx_done(&f);
}
END_TEST

/*
 * Inline chunks keep their bytes in 'D' records, so that an open reads the
 * small 'C' records only.  A tier written before that (bytes inside the 'C'
 * record) still opens and serves; a put rewrites such a chunk in the new
 * form; lowering inline_max moves chunks to slots without leaving 'D'
 * records behind; and an open does not read the bytes (a 'D' record made
 * unreadable does not stop it).
 */
START_TEST(test_inline_records)
{
    fixture f;
    rocksdb_options_t *o;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    uint8_t k[1 + CHUNK_KEY_LEN], rec[ST_REC_HDR + 2000];
    char *err = NULL, *v;
    size_t vlen;
    rocksdb_t *db;
    int ndata = 0, nbig = 0;

    fx_init(&f, 48 * MIB, 16 * KIB, MIB);
    ck_assert_int_eq(put(&f, 11, 1, 3000), 0);
    nvme_close(&f.s);

    /* A chunk in the old form: the bytes after the 48-byte header. */
    db = raw_open(&f, &o);
    pat_fill(f.buf, 11, 2, 2000);
    memset(rec, 0, ST_REC_HDR);
    rec[0] = ST_REC_VERSION;
    rec[1] = ST_KIND_INLINE;
    gr__le_put64(rec + 24, 2000);
    gr__le_put64(rec + 32, XXH3_64bits(f.buf, 2000));
    gr__le_put64(rec + 40, 1);
    memcpy(rec + ST_REC_HDR, f.buf, 2000);
    k[0] = 'C';
    mkkey(k + 1, 11, 2);
    rocksdb_put(db, wo, (const char *)k, sizeof(k), (const char *)rec, sizeof(rec), &err);
    ck_assert(!err);
    raw_close(db, o);

    fx_open(&f);
    ck_assert_uint_eq(stats(&f).chunks, 2);
    ck_assert_int_eq(get_check(&f, 11, 2, 2000), 0);     /* the old form serves */
    ck_assert_int_eq(get_check(&f, 11, 1, 3000), 0);
    ck_assert_int_eq(put(&f, 11, 2, 2000), 0);           /* rewritten in the new form */
    ck_assert_int_eq(get_check(&f, 11, 2, 2000), 0);
    nvme_close(&f.s);

    db = raw_open(&f, &o);
    {
        rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
        for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
            size_t kl, vl;
            const char *kk = rocksdb_iter_key(it, &kl);
            rocksdb_iter_value(it, &vl);
            ndata += kk[0] == 'D';
            nbig += kk[0] == 'C' && vl > ST_REC_HDR;
        }
        rocksdb_iter_destroy(it);
    }
    ck_assert_int_eq(ndata, 2);
    ck_assert_int_eq(nbig, 0);
    /* An open never reads the bytes: make one 'D' record garbage of the
     * wrong length; the open still finds both chunks, and only the read of
     * that one fails (and drops it). */
    k[0] = 'D';
    mkkey(k + 1, 11, 1);
    rocksdb_put(db, wo, (const char *)k, sizeof(k), "x", 1, &err);
    ck_assert(!err);
    raw_close(db, o);
    fx_open(&f);
    ck_assert_uint_eq(stats(&f).chunks, 2);
    ck_assert_int_lt(get_check(&f, 11, 1, SIZE_MAX), 0);
    ck_assert_int_eq(get_check(&f, 11, 2, 2000), 0);
    nvme_close(&f.s);

    /* inline_max lowered: the chunk put again goes to a slot, and its 'D'
     * record goes with the same write. */
    f.cfg.inline_max = 1024;
    fx_open(&f);
    ck_assert_int_eq(put(&f, 11, 2, 2000), 0);
    ck_assert_int_eq(get_check(&f, 11, 2, 2000), 0);
    nvme_close(&f.s);
    db = raw_open(&f, &o);
    v = rocksdb_get(db, ro, (const char *)k, sizeof(k), &vlen, &err);   /* 11/1: dropped */
    ck_assert(!err && !v);
    mkkey(k + 1, 11, 2);
    v = rocksdb_get(db, ro, (const char *)k, sizeof(k), &vlen, &err);
    ck_assert_msg(!err && !v, "the 'D' record of a chunk moved to a slot is left");
    raw_close(db, o);
    rocksdb_readoptions_destroy(ro);
    rocksdb_writeoptions_destroy(wo);
    fx_done(&f);
}
END_TEST

/* Malformed records, unknown keys, a record pointing past its file and an
 * interrupted write at the end of a data file are all cleaned up at open. */
START_TEST(test_open_repairs)
{
    fixture f;
    rocksdb_options_t *o;
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    uint8_t k[1 + CHUNK_KEY_LEN];
    char file[600], *err = NULL;
    struct stat st0, st1;
    long long cls;
    rocksdb_t *db;
    int fd;

    fx_init(&f, 48 * MIB, 16 * KIB, MIB);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(put(&f, 10, (uint64_t)i, 200000), 0);
    ck_assert_int_eq(put(&f, 10, 9, 500), 0);
    biggest_data_file(&f, file, sizeof(file));
    ck_assert_int_eq(sscanf(strrchr(file, '/'), "/data-%lld.dat", &cls), 1);
    ck_assert_int_ge(cls, 200704);
    nvme_close(&f.s);

    /* A garbage value, a short key, an unknown prefix. */
    db = raw_open(&f, &o);
    k[0] = 'C';
    mkkey(k + 1, 10, 7);
    rocksdb_put(db, wo, (const char *)k, sizeof(k), "junk", 4, &err);
    ck_assert(!err);
    rocksdb_put(db, wo, "Cshort", 6, "x", 1, &err);
    ck_assert(!err);
    k[0] = 'Z';
    rocksdb_put(db, wo, (const char *)k, sizeof(k), "x", 1, &err);
    ck_assert(!err);
    raw_close(db, o);

    /* Cut the data file inside slot 3. */
    ck_assert_int_eq(truncate(file, 3 * cls + 4096), 0);
    fx_open(&f);
    ck_assert_uint_eq(stats(&f).chunks, 4);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(get_check(&f, 10, (uint64_t)i, 200000), 0);
    ck_assert_int_eq(get_check(&f, 10, 3, SIZE_MAX), -ENOENT);
    ck_assert_int_eq(get_check(&f, 10, 7, SIZE_MAX), -ENOENT);
    ck_assert_int_eq(get_check(&f, 10, 9, 500), 0);
    nvme_close(&f.s);

    /* An interrupted write past the last slot leaks nothing. */
    ck_assert_int_eq(stat(file, &st0), 0);
    fd = open(file, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    pat_fill(f.buf, 1, 1, MIB);
    ck_assert_int_eq(pwrite(fd, f.buf, MIB, 8 * MIB), (ssize_t)MIB);
    ck_assert_int_eq(pwrite(fd, f.buf, 8192, 3 * cls + 8192), 8192);
    close(fd);
    fx_open(&f);
    ck_assert_uint_eq(stats(&f).chunks, 4);
    ck_assert_int_eq(stat(file, &st1), 0);
    ck_assert_int_le(st1.st_size, 3 * cls);
    ck_assert_int_le(st1.st_blocks, st0.st_blocks);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(get_check(&f, 10, (uint64_t)i, 200000), 0);
    nvme_close(&f.s);

    /* The junk is gone from RocksDB too. */
    db = raw_open(&f, &o);
    {
        rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
        rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
        int n = 0;

        for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
            size_t kl;
            const char *kk = rocksdb_iter_key(it, &kl);
            ck_assert_msg(kl == 1 || (kl == 25 && (kk[0] == 'C' || kk[0] == 'A' || kk[0] == 'D')),
                          "stray key of %zu bytes", kl);
            n += kk[0] == 'C';
        }
        ck_assert_int_eq(n, 4);
        rocksdb_iter_destroy(it);
        rocksdb_readoptions_destroy(ro);
    }
    raw_close(db, o);
    rocksdb_writeoptions_destroy(wo);
    fx_open(&f);
    fx_done(&f);
}
END_TEST

START_TEST(test_drop_prefix)
{
    fixture f;
    uint8_t k[CHUNK_KEY_LEN];

    fx_init(&f, 48 * MIB, 16 * KIB, MIB);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(put(&f, 11, (uint64_t)i, (size_t)(i % 2 ? 100 : 50000)), 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(put(&f, 12, (uint64_t)i, 5000), 0);
    mkkey(k, 11, 0);
    ck_assert_int_eq(nvme_drop_files(f.s, (const uint8_t (*)[16])k, 1), 10);
    ck_assert_int_eq(nvme_drop_prefix(f.s, k, 16), 0);
    for (int i = 0; i < 10; i++)
        ck_assert(!has(&f, 11, (uint64_t)i));
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(get_check(&f, 12, (uint64_t)i, 5000), 0);
    ck_assert_uint_eq(stats(&f).chunks, 5);
    fx_reopen(&f);
    ck_assert_uint_eq(stats(&f).chunks, 5);
    ck_assert(!has(&f, 11, 1));
    /* An empty prefix drops everything. */
    ck_assert_int_eq(nvme_drop_prefix(f.s, k, 0), 5);
    ck_assert_uint_eq(stats(&f).chunks, 0);
    fx_done(&f);
}
END_TEST

/* Pinned chunks survive eviction (held now and put later); unpinned, they
 * go like the rest. */
START_TEST(test_pin_prefix)
{
    fixture f;
    uint8_t k[CHUNK_KEY_LEN];

    fx_init(&f, 24 * MIB, 16 * KIB, MIB);
    ck_assert_int_eq(put(&f, 21, 0, MIB), 0);
    mkkey(k, 21, 0);
    ck_assert_int_eq(nvme_pin_files(f.s, (const uint8_t (*)[16])k, 1, 1), 1);
    ck_assert_int_eq(put(&f, 21, 1, MIB), 0);         /* pinned on arrival */
    ck_assert_uint_ge(stats(&f).pinned_bytes, 2 * MIB);
    /* A live policy switch keeps chunks and pins. */
    ck_assert_int_eq(nvme_set_policy(f.s, "bogus"), -EINVAL);
    ck_assert_int_eq(nvme_set_policy(f.s, "s3fifo"), 0);
    ck_assert_uint_eq(stats(&f).chunks, 2);
    ck_assert_int_eq(nvme_set_policy(f.s, "lru"), 0);
    for (int i = 0; i < 40; i++)                      /* several times the capacity */
        ck_assert_int_eq(put(&f, 22, (uint64_t)i, MIB), 0);
    ck_assert_int_eq(get_check(&f, 21, 0, MIB), 0);
    ck_assert_int_eq(get_check(&f, 21, 1, MIB), 0);
    ck_assert_int_eq(nvme_pin_files(f.s, (const uint8_t (*)[16])k, 1, 0), 2);
    ck_assert_uint_eq(stats(&f).pinned_bytes, 0);
    for (int i = 40; i < 80; i++)
        ck_assert_int_eq(put(&f, 22, (uint64_t)i, MIB), 0);
    ck_assert(!has(&f, 21, 0));
    ck_assert(nvme_disk_usage(f.path) <= (int64_t)(24 * MIB));
    fx_done(&f);
}
END_TEST

/* ---- eviction policies ---- */

static const char *const policies[] = { "lru", "lfu", "sieve", "s3fifo", "epoch" };

/* Every kind: round trips of inline and slot chunks, eviction past the
 * capacity within the hard limit, replace, delete, prefix drop, restart.
 * epoch may refuse newcomers once full (-ECANCELED); nothing else may. */
START_TEST(test_policy_kinds)
{
    const char *pol = policies[_i];
    int epoch = strcmp(pol, "epoch") == 0;
    uint64_t refused = 0, i, n = 0;
    nvme_stats st;
    fixture f;

    fx_init_policy(&f, 24 * MIB, 16 * KIB, 256 * KIB, pol);
    for (i = 0; i < 120; i++) {
        size_t len = i % 3 ? 256 * KIB : (size_t)(i * 977 % (16 * KIB)) + 1;
        int rc = put(&f, 17, i, len);

        ck_assert_msg(rc == 0 || (epoch && rc == -ECANCELED), "%s: put %llu: %d", pol,
                      (unsigned long long)i, rc);
        refused += rc == -ECANCELED;
        if (rc == 0)
            ck_assert_int_eq(get_check(&f, 17, i, len), 0);
        assert_within(&f);
    }
    st = stats(&f);
    ck_assert_msg(st.evictions > 0 || (epoch && refused > 0), "%s: no eviction", pol);
    ck_assert_uint_eq(st.not_admitted, refused);
    ck_assert_uint_eq(st.put_errors, 0);
    /* What is there reads back, before and after a restart. */
    for (int pass = 0; pass < 2; pass++) {
        uint64_t found = 0;
        for (i = 0; i < 120; i++) {
            int rc = get_check(&f, 17, i, i % 3 ? 256 * KIB : (size_t)(i * 977 % (16 * KIB)) + 1);
            ck_assert_msg(rc == 0 || rc == -ENOENT, "%s: get %llu: %d", pol,
                          (unsigned long long)i, rc);
            found += rc == 0;
        }
        ck_assert_uint_eq(found, stats(&f).chunks);
        ck_assert_uint_gt(found, 20);
        n = found;
        if (pass == 0)
            fx_reopen(&f);
    }
    /* Replacing a present key is never refused (making room for its new
     * record may evict one other); delete and drop work. */
    for (i = 0; i < 120 && !has(&f, 17, i); i++)
        ;
    ck_assert_uint_lt(i, 120);
    ck_assert_int_eq(put(&f, 17, i, 100), 0);
    ck_assert_int_eq(get_check(&f, 17, i, 100), 0);
    ck_assert_uint_le(stats(&f).chunks, n);
    ck_assert_uint_ge(stats(&f).chunks, n - 1);
    n = stats(&f).chunks;
    {
        uint8_t k[CHUNK_KEY_LEN];

        mkkey(k, 17, i);
        ck_assert_int_eq(nvme_delete(f.s, k), 0);
        ck_assert_int_eq(nvme_drop_prefix(f.s, k, 16), (long)n - 1);
    }
    ck_assert_uint_eq(stats(&f).chunks, 0);
    ck_assert_int_eq(put(&f, 17, 500, 256 * KIB), 0);   /* empty: admitted */
    ck_assert_int_eq(get_check(&f, 17, 500, 256 * KIB), 0);
    assert_within(&f);
    fx_done(&f);
}
END_TEST

/*
 * A dataset of about 1.1 times what the tier holds, read in the same order
 * three times; a miss puts the chunk (as the daemon's write-behind does).
 * Returns the hit ratio of each pass in ratio[3].  replace: re-put that
 * many resident chunks after the first pass, which leaves RocksDB garbage
 * that the policy must count as space in use.
 */
static void scan_run(const char *pol, size_t len, int replace, double ratio[3])
{
    const uint64_t inline_max = 16 * KIB;
    uint64_t items, hits;
    fixture f;

    fx_init_policy(&f, 32 * MIB, inline_max, 64 * KIB, pol);
    /* An empty tier uses only its reserve: the rest is what chunks get.
     * Per chunk: its bytes (inline: twice, as RocksDB data) and ~0.5 KiB
     * of index. */
    items = (f.cfg.capacity - stats(&f).used_bytes) /
            (len <= inline_max ? 2 * len + 512 : rnd_up(len) + 512);
    items = items * 11 / 10;
    for (int pass = 0; pass < 3; pass++) {
        hits = 0;
        for (uint64_t i = 0; i < items; i++) {
            int rc = get_check(&f, 18, i, len);

            if (rc == 0) {
                hits++;
                continue;
            }
            ck_assert_int_eq(rc, -ENOENT);
            rc = put(&f, 18, i, len);
            ck_assert_msg(rc == 0 || rc == -ECANCELED, "put: %d", rc);
        }
        ratio[pass] = (double)hits / (double)items;
        if (pass == 0) {
            for (uint64_t i = 0, n = 0; i < items && n < (uint64_t)replace; i++)
                if (has(&f, 18, i)) {
                    ck_assert_int_eq(put(&f, 18, i, len), 0);
                    n++;
                }
        }
        assert_within(&f);
    }
    fprintf(stderr, "check_nvme: %s, %llu chunks of %zu bytes, %llu held%s: hit ratio %.3f %.3f\n",
            pol, (unsigned long long)items, len, (unsigned long long)stats(&f).chunks,
            replace ? ", garbage" : "", ratio[1], ratio[2]);
    fx_done(&f);
}

START_TEST(test_epoch_cyclic_scan)
{
    double lru[3], epoch[3];

    /* Slot chunks: lru evicts each chunk just before it is read again. */
    scan_run("lru", 64 * KIB, 0, lru);
    scan_run("epoch", 64 * KIB, 0, epoch);
    ck_assert_double_lt(lru[1], 0.05);
    ck_assert_double_lt(lru[2], 0.05);
    ck_assert_double_gt(epoch[1], 0.8);
    ck_assert_double_gt(epoch[2], 0.8);

    /* Inline chunks, and a few replaced after the first pass.  Evicting an
     * inline chunk only turns its record into RocksDB garbage, so the
     * first replace in the full tier evicts a burst (a quarter of it, until
     * the garbage is worth a compaction): the second pass misses those.
     * Garbage left after that is space newcomers cannot have: epoch must
     * count it as used, or it admits scan keys into it, each evicting a
     * resident, until the next burst (0.46 on the second pass). */
    scan_run("lru", 8 * KIB, 8, lru);
    scan_run("epoch", 8 * KIB, 8, epoch);
    ck_assert_double_lt(lru[2], 0.05);
    ck_assert_double_gt(epoch[1], 0.6);
    ck_assert_double_gt(epoch[2], 0.85);
}
END_TEST

/* ---- concurrency ---- */

#define CC_THREADS 4
#define CC_KEYS 300

typedef struct cc_arg {
    fixture *f;
    unsigned seed;
    int *stop;                  /* read and written atomically */
    long ops, hits, bad;
} cc_arg;

static size_t cc_len(unsigned r)
{
    switch (r % 10) {
    case 0: return r / 10 % MIB + 1;
    case 1: case 2: case 3: case 4: return r / 10 % (128 * KIB) + 1;
    default: return r / 10 % (16 * KIB) + 1;
    }
}

static void *cc_worker(void *p)
{
    cc_arg *a = p;
    fixture *f = a->f;
    uint8_t *buf = aligned_alloc(NVME_ALIGN, MIB), *out = aligned_alloc(NVME_ALIGN, MIB);

    ck_assert(buf && out);
    memset(buf, 0, MIB);

    while (!__atomic_load_n(a->stop, __ATOMIC_RELAXED)) {
        unsigned r = (unsigned)rand_r(&a->seed);
        uint64_t idx = (unsigned)rand_r(&a->seed) % CC_KEYS;
        uint8_t k[CHUNK_KEY_LEN];
        size_t len;
        int rc;

        mkkey(k, 13, idx);
        if (r % 100 < 45) {
            rc = nvme_get(f->s, k, out, MIB, &len);
            if (rc == 0) {
                a->hits++;
                if (!pat_ok(out, 13, idx, len))
                    a->bad++;
            } else if (rc != -ENOENT) {
                a->bad++;
            }
        } else if (r % 100 < 88) {
            len = cc_len((unsigned)rand_r(&a->seed));
            pat_fill(buf, 13, idx, len);
            if (nvme_put(f->s, k, buf, len) != 0)
                a->bad++;
        } else if (r % 100 < 96) {
            rc = nvme_delete(f->s, k);
            if (rc != 0 && rc != -ENOENT)
                a->bad++;
        } else {
            mkkey(k, 13, idx);
            nvme_contains(f->s, k);
            if (r % 1000 == 999)
                nvme_drop_prefix(f->s, k, CHUNK_KEY_LEN);
        }
        a->ops++;
    }
    free(buf);
    free(out);
    return NULL;
}

START_TEST(test_concurrency)
{
    fixture f;
    pthread_t t[CC_THREADS];
    cc_arg a[CC_THREADS];
    int stop = 0;
    const char *secs = getenv("CHECK_STORE_SECONDS");
    long ms = secs ? (long)(atof(secs) * 1000) : 1500;
    struct timespec t0, now;
    long ops = 0, hits = 0;
    int64_t maxdu = 0;
    nvme_stats st;

    fx_init(&f, 40 * MIB, 16 * KIB, MIB);
    for (int i = 0; i < CC_THREADS; i++) {
        a[i] = (cc_arg){ .f = &f, .seed = 1234u + (unsigned)i, .stop = &stop };
        ck_assert_int_eq(pthread_create(&t[i], NULL, cc_worker, &a[i]), 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        int64_t du = nvme_disk_usage(f.path);
        ck_assert_msg(du >= 0 && (uint64_t)du <= f.cfg.capacity, "du %lld", (long long)du);
        ck_assert_uint_le(stats(&f).used_bytes, f.cfg.capacity);
        if (du > maxdu)
            maxdu = du;
        usleep(2000);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 < ms);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < CC_THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(a[i].bad, 0);
        ops += a[i].ops;
        hits += a[i].hits;
    }
    st = stats(&f);
    fprintf(stderr, "check_nvme: concurrency: %ld ops, %ld hits, %llu evictions, max du %.1f MiB "
            "of %.0f\n", ops, hits, (unsigned long long)st.evictions, (double)maxdu / MIB,
            (double)f.cfg.capacity / MIB);
    ck_assert_uint_eq(st.checksum_errors, 0);
    ck_assert_uint_eq(st.io_errors, 0);
    ck_assert_uint_eq(st.gets, st.hits + st.misses);
    assert_within(&f);
    /* Everything still indexed reads back right after a restart. */
    fx_reopen(&f);
    for (uint64_t i = 0; i < CC_KEYS; i++) {
        int rc = get_check(&f, 13, i, SIZE_MAX);
        ck_assert(rc == 0 || rc == -ENOENT);
    }
    ck_assert_uint_eq(stats(&f).checksum_errors, 0);
    assert_within(&f);
    fx_done(&f);
}
END_TEST

/* At the smallest capacity store_open accepts (the reserve plus one chunk),
 * concurrent puts of full chunks wait for each other instead of failing. */
typedef struct tiny_arg {
    fixture *f;
    int id, fails;
} tiny_arg;

static void *tiny_worker(void *p)
{
    tiny_arg *a = p;
    uint8_t *buf = aligned_alloc(NVME_ALIGN, MIB);

    ck_assert(buf != NULL);
    for (uint64_t i = 0; i < 25; i++) {
        uint8_t k[CHUNK_KEY_LEN];

        mkkey(k, 16, (uint64_t)a->id << 32 | i);
        pat_fill(buf, 16, (uint64_t)a->id << 32 | i, MIB);
        if (nvme_put(a->f->s, k, buf, MIB) != 0)
            a->fails++;
    }
    free(buf);
    return NULL;
}

START_TEST(test_minimum_capacity)
{
    fixture f;
    char err[256] = "";
    const char *at;
    unsigned long long min = 0;
    pthread_t t[4];
    tiny_arg a[4];

    fx_init(&f, 48 * MIB, 16 * KIB, MIB);
    nvme_close(&f.s);
    f.cfg.capacity = MIB;
    ck_assert_int_eq(nvme_open(&f.cfg, &f.s, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(at = strstr(err, "at least "));
    ck_assert_int_eq(sscanf(at, "at least %llu", &min), 1);
    f.cfg.capacity = min - 1;
    ck_assert_int_eq(nvme_open(&f.cfg, &f.s, err, sizeof(err)), -EINVAL);
    f.cfg.capacity = min;
    fx_open(&f);
    for (int i = 0; i < 4; i++) {
        a[i] = (tiny_arg){ .f = &f, .id = i };
        ck_assert_int_eq(pthread_create(&t[i], NULL, tiny_worker, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(a[i].fails, 0);
    }
    assert_within(&f);
    ck_assert_uint_eq(stats(&f).chunks, 1);
    fx_done(&f);
}
END_TEST

/* Not a test of correctness: prints the put/get rates on this disk. */
START_TEST(test_throughput)
{
    fixture f;
    struct timespec t0, t1;
    const int n = 48;
    double put_s, get_s;

    fx_init(&f, 96 * MIB, 16 * KIB, MIB);
    pat_fill(f.buf, 1, 1, MIB);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        uint8_t k[CHUNK_KEY_LEN];
        mkkey(k, 14, (uint64_t)i);
        ck_assert_int_eq(nvme_put(f.s, k, f.buf, MIB), 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    put_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    for (int i = 0; i < 4 * n; i++) {
        uint8_t k[CHUNK_KEY_LEN];
        size_t len;
        mkkey(k, 14, (uint64_t)(i % n));
        ck_assert_int_eq(nvme_get(f.s, k, f.out, MIB, &len), 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    get_s = (double)(t0.tv_sec - t1.tv_sec) + (double)(t0.tv_nsec - t1.tv_nsec) / 1e9;
    fprintf(stderr, "check_nvme: 1 MiB chunks: put %.0f MB/s, get %.0f MB/s (%s)\n",
            n * (double)MIB / 1e6 / put_s, 4 * n * (double)MIB / 1e6 / get_s,
            getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 4000; i++) {
        uint8_t k[CHUNK_KEY_LEN];
        mkkey(k, 15, (uint64_t)i);
        ck_assert_int_eq(nvme_put(f.s, k, f.buf, 4000), 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    put_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    for (int i = 0; i < 4000; i++) {
        uint8_t k[CHUNK_KEY_LEN];
        size_t len;
        mkkey(k, 15, (uint64_t)i);
        ck_assert_int_eq(nvme_get(f.s, k, f.out, MIB, &len), 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    get_s = (double)(t0.tv_sec - t1.tv_sec) + (double)(t0.tv_nsec - t1.tv_nsec) / 1e9;
    fprintf(stderr, "check_nvme: 4000-byte inline chunks: put %.0f/s, get %.0f/s\n",
            4000 / put_s, 4000 / get_s);
    assert_within(&f);
    fx_done(&f);
}
END_TEST

static Suite *nvme_suite(void)
{
    Suite *s = suite_create("nvme");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_roundtrip_sizes);
    tcase_add_test(tc, test_miss_and_errors);
    tcase_add_test(tc, test_read_errors_offline_despite_writes);
    tcase_add_test(tc, test_read_errors_offline_despite_inline_reads);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_replace);
    tcase_add_test(tc, test_warm_restart);
    tcase_add_test(tc, test_lru_order_survives_restart);
    tcase_add_test(tc, test_capacity_mixed);
    tcase_add_test(tc, test_capacity_inline);
    tcase_add_test(tc, test_lower_capacity_at_open);
    tcase_add_test(tc, test_corrupt_slot);
    tcase_add_test(tc, test_corrupt_inline);
    tcase_add_test(tc, test_inline_records);
    tcase_add_test(tc, test_open_repairs);
    tcase_add_test(tc, test_pin_prefix);
    tcase_add_test(tc, test_drop_prefix);
    tcase_add_loop_test(tc, test_policy_kinds, 0, (int)(sizeof(policies) / sizeof(policies[0])));
    tcase_add_test(tc, test_epoch_cyclic_scan);
    tcase_add_test(tc, test_concurrency);
    tcase_add_test(tc, test_stats_without_lock);
    tcase_add_test(tc, test_minimum_capacity);
    tcase_add_test(tc, test_throughput);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(nvme_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
