/*
 * workers.c - see workers.h.
 *
 * Locking: one mutex guards both job queues and the completion list; it is
 * never held while a job runs or a completion executes.  The loop is woken
 * by event_active() on a never-added event; activations coalesce, so the
 * callback drains the whole completion list each time.
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
    wq_job *head[WQ_NQUEUES], *tail[WQ_NQUEUES];
    wq_job *done_head, *done_tail;  /* finished, waiting for the loop */
    struct event *wake;             /* fires drain_completions on the loop */
    int stopping;
    int nthreads;
    pthread_t *threads;
};

/* Pop the highest-priority job, or NULL.  Caller holds w->lock. */
static wq_job *pop_locked(workers *w)
{
    for (int q = 0; q < WQ_NQUEUES; q++) {
        wq_job *j = w->head[q];
        if (j) {
            w->head[q] = j->next;
            if (!w->head[q])
                w->tail[q] = NULL;
            j->next = NULL;
            return j;
        }
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
        pthread_mutex_unlock(&w->lock);
        j->run(j);
        pthread_mutex_lock(&w->lock);
        if (w->done_tail)
            w->done_tail->next = j;
        else
            w->done_head = j;
        w->done_tail = j;
        event_active(w->wake, EV_READ, 0);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Loop thread: run every finished job's done(). */
static void drain_completions(evutil_socket_t fd, short what, void *arg)
{
    workers *w = arg;
    wq_job *j;

    (void)fd; (void)what;
    pthread_mutex_lock(&w->lock);
    j = w->done_head;
    w->done_head = w->done_tail = NULL;
    pthread_mutex_unlock(&w->lock);
    while (j) {
        wq_job *next = j->next;
        j->done(j);
        j = next;
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
    j->next = NULL;
    j->cancelled = 0;
    pthread_mutex_lock(&w->lock);
    if (w->stopping) {
        /* A completion run by workers_stop queued more work (a fetch's
         * write-behind, say): cancelled, its done() runs in the drain. */
        j->cancelled = 1;
        if (w->done_tail)
            w->done_tail->next = j;
        else
            w->done_head = j;
        w->done_tail = j;
        pthread_mutex_unlock(&w->lock);
        return;
    }
    if (w->tail[prio])
        w->tail[prio]->next = j;
    else
        w->head[prio] = j;
    w->tail[prio] = j;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

int workers_promote(workers *w, wq_job *j)
{
    wq_job **pp, *prev = NULL;
    int moved = 0;

    pthread_mutex_lock(&w->lock);
    for (pp = &w->head[WQ_BACKGROUND]; *pp; prev = *pp, pp = &(*pp)->next) {
        if (*pp != j)
            continue;
        *pp = j->next;
        if (w->tail[WQ_BACKGROUND] == j)
            w->tail[WQ_BACKGROUND] = prev;
        j->next = NULL;
        if (w->tail[WQ_DEMAND])
            w->tail[WQ_DEMAND]->next = j;
        else
            w->head[WQ_DEMAND] = j;
        w->tail[WQ_DEMAND] = j;
        moved = 1;
        break;
    }
    pthread_mutex_unlock(&w->lock);
    return moved;
}

unsigned workers_pending(workers *w, wq_prio prio)
{
    unsigned n = 0;

    pthread_mutex_lock(&w->lock);
    for (wq_job *j = w->head[prio]; j; j = j->next)
        n++;
    pthread_mutex_unlock(&w->lock);
    return n;
}

void workers_stop(workers **wp)
{
    workers *w = *wp;

    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    /* Cache fills are not worth delaying an exit for. */
    for (wq_job *j = w->head[WQ_BACKGROUND]; j; j = j->next)
        j->cancelled = 1;
    if (w->head[WQ_BACKGROUND]) {
        if (w->done_tail)
            w->done_tail->next = w->head[WQ_BACKGROUND];
        else
            w->done_head = w->head[WQ_BACKGROUND];
        w->done_tail = w->tail[WQ_BACKGROUND];
        w->head[WQ_BACKGROUND] = w->tail[WQ_BACKGROUND] = NULL;
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < w->nthreads; i++)
        pthread_join(w->threads[i], NULL);
    /* Completions may submit (and so cancel) more jobs: drain to the end. */
    while (w->wake && w->done_head)
        drain_completions(-1, 0, w);
    if (w->wake)
        event_free(w->wake);
    free(w->threads);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
    *wp = NULL;
}
