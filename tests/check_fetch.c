/*
 * check_fetch.c - the fetch engine's backend chain (fetch.h, backend.h):
 * a miss walks the chain in order, a corrupt copy is skipped, a final error
 * stops the walk, and a chunk found below a backend that keeps copies is
 * written to it behind the reader.  The chain here is two in-memory
 * backends (the stand-in for a middle tier such as a peer cache) above the
 * real source, with the real fetcher, workers and DRAM tier.
 */
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "dram.h"
#include "fetch.h"
#include "source.h"
#include "testutil.h"
#include "workers.h"

#define CHUNK (64 * 1024)
#define NCHUNKS 6

/* An in-memory backend: chunk idx present[idx]; corrupt[idx] says it
 * fails its check; counts what it was asked. */
typedef struct membk {
    pthread_mutex_t lock;
    uint8_t *data[NCHUNKS];
    size_t len[NCHUNKS];
    int corrupt[NCHUNKS];
    int gets, puts, drops;
    int keeps;                  /* put != NULL */
} membk;

static uint64_t key_idx(const uint8_t *key)
{
    uint64_t v = 0;

    for (int i = 16; i < 24; i++)
        v = v << 8 | key[i];
    return v;
}

static backend_result mb_get(void *self, const backend_req *rq, size_t *len, backend_status *st)
{
    membk *m = self;
    backend_result r = BACKEND_MISS;

    pthread_mutex_lock(&m->lock);
    m->gets++;
    if (rq->idx < NCHUNKS && m->data[rq->idx]) {
        if (m->corrupt[rq->idx]) {
            st->corrupt = 1;
        } else {
            memcpy(rq->buf, m->data[rq->idx], m->len[rq->idx]);
            *len = m->len[rq->idx];
            r = BACKEND_OK;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return r;
}

static int mb_put(void *self, const uint8_t *key, const void *buf, size_t len)
{
    membk *m = self;
    uint64_t idx = key_idx(key);

    pthread_mutex_lock(&m->lock);
    m->puts++;
    if (idx < NCHUNKS) {
        free(m->data[idx]);
        m->data[idx] = malloc(len);
        memcpy(m->data[idx], buf, len);
        m->len[idx] = len;
        m->corrupt[idx] = 0;
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}

static const backend_ops keeps_ops = { "mem", BACKEND_PEER, mb_get, mb_put, NULL };
static const backend_ops reads_ops = { "mem-ro", BACKEND_PEER, mb_get, NULL, NULL };

typedef struct rig {
    char *dir;
    char path[600];
    struct event_base *base;
    workers *w;
    sched *sc;
    source *src;
    dram *d;
    fetcher *fx;
    gr_stats stats;
    srcfile *f;
    membk a, b;                 /* the chain: a (keeps copies), b (read only), source */
} rig;

static void rig_init(rig *r)
{
    gr_config cfg;
    char err[256];
    struct stat st;
    backend chain[3];

    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->a.lock, NULL);
    pthread_mutex_init(&r->b.lock, NULL);
    r->dir = tu_mkdtemp();
    snprintf(r->path, sizeof(r->path), "%s/f", r->dir);
    tu_write_pattern(r->path, 4, NCHUNKS * CHUNK - 1000);
    config_defaults(&cfg);
    snprintf(cfg.roots[0], sizeof(cfg.roots[0]), "%s", r->dir);
    cfg.nroots = 1;
    cfg.chunk_size = CHUNK;
    ck_assert_int_eq(evthread_use_pthreads(), 0);
    r->base = event_base_new();
    ck_assert_int_eq(workers_start(r->base, 2, &r->w), 0);
    ck_assert_int_eq(source_new(&cfg, &r->src), 0);
    ck_assert_int_eq(dram_new(8u << 20, CHUNK, "lru", &r->d, err, sizeof(err)), 0);
    ck_assert_int_eq(sched_new(r->w, 4, &r->sc), 0);
    chain[0] = (backend){ &keeps_ops, &r->a };
    chain[1] = (backend){ &reads_ops, &r->b };
    source_backend(r->src, &chain[2]);
    ck_assert_int_eq(fetcher_new(r->d, chain, 3, r->sc, r->w, &r->stats, 4u << 20, &r->fx), 0);
    ck_assert_int_eq(source_stat(r->src, r->path, 0, &st, err, sizeof(err)), 0);
    r->f = source_install(r->src, strdup(r->path), 0, &st, gr__now_s());
    ck_assert_ptr_nonnull(r->f);
}

static void rig_fini(rig *r)
{
    srcfile_unref(&r->f);
    sched_drain(r->sc);
    workers_stop(&r->w);
    fetcher_free(&r->fx);
    sched_free(&r->sc);
    dram_free(&r->d);
    source_free(&r->src);
    event_base_free(r->base);
    for (int i = 0; i < NCHUNKS; i++) {
        free(r->a.data[i]);
        free(r->b.data[i]);
    }
    tu_rmrf(r->dir);
    free(r->dir);
}

typedef struct got {
    int done, err;
    int ok;                     /* the bytes were right */
    uint64_t idx;
} got;

static void got_cb(void *arg, chunk *c, int err, const char *msg)
{
    got *g = arg;

    (void)msg;
    g->done = 1;
    g->err = err;
    if (c)
        g->ok = tu_check_pattern(c->data, 4, g->idx * CHUNK, c->len);
}

/* Look chunk idx up and run the loop until it is answered. */
static got lookup(rig *r, uint64_t idx)
{
    got g = { .idx = idx };

    fetcher_get(r->fx, r->f, idx, 0, got_cb, &g);
    for (int i = 0; i < 10000 && !g.done; i++) {
        struct timeval tv = { 0, 1000 };
        event_base_loopexit(r->base, &tv);
        event_base_dispatch(r->base);
    }
    ck_assert(g.done);
    return g;
}

/* Run the loop until the write-behind queue is empty. */
static void settle(rig *r)
{
    for (int i = 0; i < 2000 && fetcher_writeback_bytes(r->fx); i++) {
        struct timeval tv = { 0, 1000 };
        event_base_loopexit(r->base, &tv);
        event_base_dispatch(r->base);
    }
    ck_assert_uint_eq(fetcher_writeback_bytes(r->fx), 0);
}

/* A chunk only the source has: every backend asked in order, the source
 * read, the copy written to the backend that keeps copies only. */
START_TEST(test_chain_miss_to_source)
{
    rig r;
    got g;

    rig_init(&r);
    g = lookup(&r, 0);
    ck_assert_int_eq(g.err, 0);
    ck_assert(g.ok);
    ck_assert_int_eq(r.a.gets, 1);
    ck_assert_int_eq(r.b.gets, 1);
    ck_assert_uint_eq(r.stats.source_reads, 1);
    settle(&r);
    ck_assert_int_eq(r.a.puts, 1);
    ck_assert_ptr_nonnull(r.a.data[0]);
    ck_assert(tu_check_pattern(r.a.data[0], 4, 0, r.a.len[0]));
    rig_fini(&r);
}
END_TEST

/* A chunk the middle backend has: the source is not read, the copy goes up
 * to the first backend, not back into the one that had it. */
START_TEST(test_chain_middle_hit)
{
    rig r;
    got g;
    uint8_t buf[CHUNK];

    rig_init(&r);
    for (int i = 0; i < CHUNK; i++)
        buf[i] = tu_byte(4, CHUNK + (uint64_t)i);
    r.b.data[1] = malloc(CHUNK);
    memcpy(r.b.data[1], buf, CHUNK);
    r.b.len[1] = CHUNK;
    g = lookup(&r, 1);
    ck_assert_int_eq(g.err, 0);
    ck_assert(g.ok);
    ck_assert_uint_eq(r.stats.source_reads, 0);
    settle(&r);
    ck_assert_int_eq(r.a.puts, 1);
    ck_assert_int_eq(r.b.puts, 0);
    rig_fini(&r);
}
END_TEST

/* A corrupt copy is skipped (the next backend serves right bytes); a
 * final error from the source fails the lookup and caches nothing. */
START_TEST(test_chain_corrupt_and_fail)
{
    rig r;
    got g;

    rig_init(&r);
    r.b.data[2] = calloc(1, CHUNK);
    r.b.len[2] = CHUNK;
    r.b.corrupt[2] = 1;
    g = lookup(&r, 2);
    ck_assert_int_eq(g.err, 0);
    ck_assert(g.ok);
    ck_assert_uint_eq(r.stats.source_reads, 1);
    settle(&r);
    /* The file changes under the daemon: the source says ESTALE, final. */
    tu_write_pattern(r.path, 9, NCHUNKS * CHUNK - 1000);
    g = lookup(&r, 3);
    ck_assert_int_eq(g.err, -ESTALE);
    ck_assert_uint_eq(r.stats.source_errors, 1);
    settle(&r);
    ck_assert_ptr_null(r.a.data[3]);
    {
        uint8_t key[CHUNK_KEY_LEN];
        chunk_key(key, r.f->id, 3);
        ck_assert_ptr_null(dram_peek(r.d, key));
    }
    rig_fini(&r);
}
END_TEST

static Suite *fetch_suite(void)
{
    Suite *s = suite_create("fetch");
    TCase *tc = tcase_create("chain");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_chain_miss_to_source);
    tcase_add_test(tc, test_chain_middle_hit);
    tcase_add_test(tc, test_chain_corrupt_and_fail);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fetch_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
