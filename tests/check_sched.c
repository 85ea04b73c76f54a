/*
 * check_sched.c - the source-slot scheduler (sched.h), with the real
 * fetcher, I/O workers, DRAM tier and source over a scratch file:
 * demand misses run first, a queued prefetch a client now waits on is
 * promoted, and the prefetch classes take turns.
 */
#include <check.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "dram.h"
#include "config.h"
#include "fetch.h"
#include "source.h"
#include "testutil.h"
#include "workers.h"

#define CHUNK (64 * 1024)

/* ---- the scheduler, in process ---- */

static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static int order[64], norder;           /* tags of tasks in the order they ran */

typedef struct ttask {
    sched_task t;                       /* first */
    sched *sc;
    int tag;
    int *done;
} ttask;

static void tt_run(wq_job *j)
{
    ttask *t = (ttask *)j;

    tu_sleep_ms(20);
    pthread_mutex_lock(&order_lock);
    order[norder++] = t->tag;
    pthread_mutex_unlock(&order_lock);
}

static void tt_done(wq_job *j)
{
    ttask *t = (ttask *)j;

    sched_finished(t->sc, &t->t);
    (*t->done)++;
    free(t);
}

static void tt_submit(sched *sc, sched_class cls, int tag, int *done)
{
    ttask *t = calloc(1, sizeof(*t));

    ck_assert_ptr_nonnull(t);
    t->t.job.run = tt_run;
    t->t.job.done = tt_done;
    t->sc = sc;
    t->tag = tag;
    t->done = done;
    sched_submit(sc, &t->t, cls);
}

typedef struct rig {
    char *dir;
    struct event_base *base;
    workers *w;
    sched *sc;
    source *src;
    dram *d;
    fetcher *fx;
    gr_stats stats;
    srcfile *f;
} rig;

static void rig_init(rig *s, unsigned max_inflight)
{
    gr_config cfg;
    char path[600], err[256];
    struct stat st;

    memset(s, 0, sizeof(*s));
    norder = 0;
    s->dir = tu_mkdtemp();
    snprintf(path, sizeof(path), "%s/f", s->dir);
    tu_write_pattern(path, 3, 8 * CHUNK);
    config_defaults(&cfg);
    snprintf(cfg.roots[0], sizeof(cfg.roots[0]), "%s", s->dir);
    cfg.nroots = 1;
    cfg.chunk_size = CHUNK;
    ck_assert_int_eq(evthread_use_pthreads(), 0);
    s->base = event_base_new();
    ck_assert_ptr_nonnull(s->base);
    ck_assert_int_eq(workers_start(s->base, 1, &s->w), 0);
    ck_assert_int_eq(source_new(&cfg, &s->src), 0);
    ck_assert_int_eq(dram_new(4u << 20, CHUNK, "lru", &s->d, err, sizeof(err)), 0);
    {
        backend chain[1];
        source_backend(s->src, &chain[0]);
        ck_assert_int_eq(sched_new(s->w, max_inflight, &s->sc), 0);
        ck_assert_int_eq(fetcher_new(s->d, chain, 1, s->sc, s->w, &s->stats, 1u << 20, &s->fx), 0);
    }
    ck_assert_int_eq(source_stat(s->src, path, 0, &st, err, sizeof(err)), 0);
    s->f = source_install(s->src, strdup(path), 0, &st, gr__now_s());
    ck_assert_ptr_nonnull(s->f);
}

static void rig_fini(rig *s)
{
    srcfile_unref(&s->f);
    sched_drain(s->sc);
    workers_stop(&s->w);
    fetcher_free(&s->fx);
    sched_free(&s->sc);
    dram_free(&s->d);
    source_free(&s->src);
    event_base_free(s->base);
    tu_rmrf(s->dir);
    free(s->dir);
}

/* Run the loop until *n reaches want (10 s at most). */
static void loop_until(rig *s, const int *n, int want)
{
    for (int i = 0; i < 10000 && *n < want; i++) {
        struct timeval tv = { 0, 1000 };
        event_base_loopexit(s->base, &tv);
        event_base_dispatch(s->base);
    }
    ck_assert_int_ge(*n, want);
}

/* A demand lookup's fetch_cb: how many tasks had run when it ended. */
typedef struct demand_probe {
    int ran_before;
    int err;
    int done;
    uint64_t idx;               /* the chunk asked for */
} demand_probe;

static void probe_cb(void *arg, chunk *c, int err, const char *errmsg)
{
    demand_probe *p = arg;

    (void)errmsg;
    pthread_mutex_lock(&order_lock);
    p->ran_before = norder;
    pthread_mutex_unlock(&order_lock);
    p->err = err;
    if (err == 0)
        ck_assert(tu_check_pattern(c->data, 3, p->idx * CHUNK, c->len));
    p->done = 1;
}

/* With prefetch filling its slots and more queued, a demand miss runs
 * next, not after them: it takes a slot kept for it and the I/O threads
 * take demand jobs first. */
START_TEST(test_demand_first)
{
    rig s;
    demand_probe p = { -1, 0, 0, 0 };
    int done = 0;

    rig_init(&s, 4);                  /* prefetch may hold 3 slots */
    for (int i = 0; i < 9; i++)
        tt_submit(s.sc, i % 2 ? SCHED_HINT : SCHED_WARMUP, 100 + i, &done);
    ck_assert_uint_eq(sched_running(s.sc), 3);
    ck_assert_uint_eq(sched_queued(s.sc), 6);
    fetcher_get(s.fx, s.f, 0, 0, probe_cb, &p);
    ck_assert_uint_eq(sched_running(s.sc), 4);    /* dispatched at once */
    loop_until(&s, &p.done, 1);
    ck_assert_int_eq(p.err, 0);
    /* One task was running on the only thread when it arrived. */
    ck_assert_int_le(p.ran_before, 1);
    loop_until(&s, &done, 9);
    ck_assert_uint_eq(s.stats.misses, 1);
    rig_fini(&s);
}
END_TEST

/* A prefetch still waiting for a slot is promoted when a client asks for
 * the same chunk: it runs before the prefetch queued ahead of it, and the
 * source is read once. */
START_TEST(test_promote)
{
    rig s;
    demand_probe p = { -1, 0, 0, 2 };
    int done = 0;

    rig_init(&s, 4);
    for (int i = 0; i < 8; i++)
        tt_submit(s.sc, SCHED_WARMUP, 200 + i, &done);
    fetcher_prefetch(s.fx, s.f, 2, SCHED_READAHEAD, 0, NULL, NULL);
    ck_assert_uint_eq(sched_queued(s.sc), 6);     /* 5 warmup + the read-ahead */
    fetcher_get(s.fx, s.f, 2, 0, probe_cb, &p);
    ck_assert_uint_eq(sched_queued(s.sc), 5);     /* promoted out of the queue */
    loop_until(&s, &p.done, 1);
    ck_assert_int_eq(p.err, 0);
    ck_assert_int_le(p.ran_before, 1);
    loop_until(&s, &done, 8);
    ck_assert_uint_eq(s.stats.source_reads, 1);
    ck_assert_uint_eq(s.stats.fetch_joins, 1);
    ck_assert_uint_eq(s.stats.prefetch_issued, 1);
    ck_assert_uint_eq(s.stats.prefetch_used, 1);    /* a client waited on it */
    rig_fini(&s);
}
END_TEST

/* Prefetch classes take turns: warmup queued first does not starve
 * read-ahead, and read-ahead queued first does not starve warmup. */
START_TEST(test_round_robin)
{
    rig s;
    int done = 0, ra_in_first = 0, wu_in_first = 0;

    rig_init(&s, 1);                  /* one slot: the order is the scheduler's */
    for (int i = 0; i < 6; i++)
        tt_submit(s.sc, SCHED_WARMUP, 300 + i, &done);
    for (int i = 0; i < 6; i++)
        tt_submit(s.sc, SCHED_READAHEAD, 400 + i, &done);
    loop_until(&s, &done, 12);
    for (int i = 1; i < 6; i++) {       /* the first ran before the others were queued */
        ra_in_first += order[i] >= 400;
        wu_in_first += order[i] < 400;
    }
    ck_assert_int_ge(ra_in_first, 2);
    ck_assert_int_ge(wu_in_first, 1);
    rig_fini(&s);
}
END_TEST

static Suite *sched_suite(void)
{
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("scheduler");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_demand_first);
    tcase_add_test(tc, test_promote);
    tcase_add_test(tc, test_round_robin);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(sched_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
