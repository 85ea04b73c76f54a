/*
 * workers.c - see workers.h.
 *
 * Locking: one mutex guards both job queues and the completion list; it is
 * never held while a job runs or a completion executes.  The loop is woken
 * by event_active() on a never-added event; activations coalesce, so the
 * callback drains the whole completion list each time.  A job's link is in
 * at most one of them; a job being run is in none.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "workers.h"

struct workers {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    gr__list q[WQ_NQUEUES];         /* waiting to run, per priority */
    gr__list done;                  /* finished, waiting for the loop */
    struct event *wake;             /* fires drain_completions on the loop */
    int stopping;
    int nthreads;
    pthread_t *threads;
};

static wq_job *job_of(gr__list *l)
{
    return gr__list_entry(l, wq_job, link);
}

/* Pop the highest-priority job, or NULL.  Caller holds w->lock. */
static wq_job *pop_locked(workers *w)
{
    for (int q = 0; q < WQ_NQUEUES; q++) {
        gr__list *l = gr__list_pop_front(&w->q[q]);
        if (l)
            return job_of(l);
    }
    return NULL;
}

static void *worker_main(void *arg)
{
    workers *w = arg;

    pthread_mutex_lock(&w->lock);
    for (;;) {
        wq_job *j = pop_locked(w);
        if (!j) {
            if (w->stopping)
                break;
            pthread_cond_wait(&w->cond, &w->lock);
            continue;
        }
        j->running = 1;
        pthread_mutex_unlock(&w->lock);
        j->run(j);
        pthread_mutex_lock(&w->lock);
        gr__list_push_back(&w->done, &j->link);
        event_active(w->wake, EV_READ, 0);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Loop thread: run every finished job's done(). */
static void drain_completions(evutil_socket_t fd, short what, void *arg)
{
    workers *w = arg;
    gr__list batch;

    (void)fd; (void)what;
    gr__list_init(&batch);
    pthread_mutex_lock(&w->lock);
    if (!gr__list_empty(&w->done)) {
        /* Take the whole list: splice it onto batch. */
        batch.next = w->done.next;
        batch.prev = w->done.prev;
        batch.next->prev = &batch;
        batch.prev->next = &batch;
        gr__list_init(&w->done);
    }
    pthread_mutex_unlock(&w->lock);
    for (gr__list *l; (l = gr__list_pop_front(&batch));) {
        wq_job *j = job_of(l);
        j->running = 0;
        j->done(j);
    }
}

int workers_start(struct event_base *base, int nthreads, workers **out)
{
    workers *w = calloc(1, sizeof(*w));
    int rc = -ENOMEM;

    if (!w)
        return -ENOMEM;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    for (int q = 0; q < WQ_NQUEUES; q++)
        gr__list_init(&w->q[q]);
    gr__list_init(&w->done);
    w->wake = event_new(base, -1, 0, drain_completions, w);
    w->threads = calloc((size_t)nthreads, sizeof(*w->threads));
    if (!w->wake || !w->threads)
        goto fail;
    for (w->nthreads = 0; w->nthreads < nthreads; w->nthreads++) {
        rc = -pthread_create(&w->threads[w->nthreads], NULL, worker_main, w);
        if (rc) {
            log_error("pthread_create: %s", strerror(-rc));
            goto fail;
        }
    }
    *out = w;
    return 0;
fail:
    workers_stop(&w);
    return rc;
}

void workers_submit(workers *w, wq_job *j, wq_prio prio)
{
    gr__list_init(&j->link);
    j->cancelled = 0;
    j->running = 0;
    j->prio = prio;
    pthread_mutex_lock(&w->lock);
    if (w->stopping) {
        /* A completion run by workers_stop queued more work (a fetch's
         * write-behind, say): cancelled, its done() runs in the drain. */
        j->cancelled = 1;
        gr__list_push_back(&w->done, &j->link);
        pthread_mutex_unlock(&w->lock);
        return;
    }
    gr__list_push_back(&w->q[prio], &j->link);
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

int workers_promote(workers *w, wq_job *j)
{
    int moved = 0;

    pthread_mutex_lock(&w->lock);
    /* Queued in the background queue: linked, not running, not done. */
    if (j->prio == WQ_BACKGROUND && !j->running && !j->cancelled && gr__list_linked(&j->link) &&
        !w->stopping) {
        gr__list_remove(&j->link);
        j->prio = WQ_DEMAND;
        gr__list_push_back(&w->q[WQ_DEMAND], &j->link);
        moved = 1;
    }
    pthread_mutex_unlock(&w->lock);
    return moved;
}

unsigned workers_pending(workers *w, wq_prio prio)
{
    unsigned n = 0;

    pthread_mutex_lock(&w->lock);
    for (gr__list *l = gr__list_first(&w->q[prio]); l; l = gr__list_next(&w->q[prio], l))
        n++;
    pthread_mutex_unlock(&w->lock);
    return n;
}

void workers_stop(workers **wp)
{
    workers *w = *wp;
    gr__list *l;

    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    /* Cache fills are not worth delaying an exit for. */
    while ((l = gr__list_pop_front(&w->q[WQ_BACKGROUND]))) {
        job_of(l)->cancelled = 1;
        gr__list_push_back(&w->done, l);
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < w->nthreads; i++)
        pthread_join(w->threads[i], NULL);
    /* Completions may submit (and so cancel) more jobs: drain to the end. */
    while (w->wake && !gr__list_empty(&w->done))
        drain_completions(-1, 0, w);
    if (w->wake)
        event_free(w->wake);
    free(w->threads);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
    *wp = NULL;
}
