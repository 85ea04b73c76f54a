/*
 * closer.c - see closer.h.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "closer.h"
#include "log.h"

#define CLOSER_BATCH 64
#define CLOSER_SIG (SIGRTMIN + 4)
#define CLOSE_PATIENCE_NS (250 * 1000000L)     /* then the close is interrupted */
#define STOP_PATIENCE_NS (10 * 1000000L)        /* the same while stopping */

struct closer {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int *ring;                  /* waiting descriptors, head..head+n-1 mod max */
    unsigned max, head, n;
    int stop;
};

static void closer_sig(int sig)
{
    (void)sig;                  /* only there to interrupt a blocked close */
}

/* A socket's lingering off: closed at once, its unsent bytes left to the
 * kernel in the background, rather than waited for (or never). */
static void no_linger(int fd)
{
    static const struct linger off = { 0, 0 };

    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));    /* ENOTSOCK: not one */
}

/*
 * Every close runs under a timer of this thread's own: past CLOSE_PATIENCE_NS
 * its signal interrupts it (a close always releases the descriptor).  A
 * client that turns lingering back on for a socket it passed us (it holds
 * its own copy, and ours is the last) thus costs this thread a quarter of a
 * second, not the linger time, and never the loop.  A FUSE FLUSH is only
 * told of the interruption (FUSE_INTERRUPT) and waited for still: a FUSE
 * server that never answers holds this thread (ARCHITECTURE.md, Known
 * limits).
 */
static void *closer_main(void *arg)
{
    closer *c = arg;
    struct sigevent sev = { .sigev_notify = SIGEV_THREAD_ID, .sigev_signo = CLOSER_SIG };
    int batch[CLOSER_BATCH];
    timer_t timer;
    int have_timer;
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, CLOSER_SIG);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    have_timer = timer_create(CLOCK_MONOTONIC, &sev, &timer) == 0;
    if (!have_timer)
        log_warn("closer: no timer (%s): a close that blocks holds this thread", strerror(errno));
    pthread_mutex_lock(&c->lock);
    for (;;) {
        unsigned k = 0;
        long patience;
        while (c->n == 0 && !c->stop)
            pthread_cond_wait(&c->cond, &c->lock);
        if (c->n == 0)
            break;                      /* stopping, and nothing left */
        while (c->n > 0 && k < CLOSER_BATCH) {
            batch[k++] = c->ring[c->head];
            c->head = (c->head + 1) % c->max;
            c->n--;
        }
        patience = c->stop ? STOP_PATIENCE_NS : CLOSE_PATIENCE_NS;
        pthread_mutex_unlock(&c->lock);
        for (unsigned i = 0; i < k; i++) {
            struct itimerspec on = { { 0, patience }, { 0, patience } }, off = { { 0, 0 }, { 0, 0 } };
            no_linger(batch[i]);
            if (have_timer)
                timer_settime(timer, 0, &on, NULL);
            close(batch[i]);
            if (have_timer)
                timer_settime(timer, 0, &off, NULL);
        }
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    if (have_timer)
        timer_delete(timer);
    return NULL;
}

int closer_new(unsigned max, closer **out)
{
    closer *c = calloc(1, sizeof(*c));
    struct sigaction sa;
    int rc;

    *out = NULL;
    if (!c || max == 0 || !(c->ring = calloc(max, sizeof(int)))) {
        free(c);
        return -ENOMEM;
    }
    /* No SA_RESTART: the signal is to end the close it lands in. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = closer_sig;
    sigemptyset(&sa.sa_mask);
    sigaction(CLOSER_SIG, &sa, NULL);
    c->max = max;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    rc = pthread_create(&c->thread, NULL, closer_main, c);
    if (rc != 0) {
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->lock);
        free(c->ring);
        free(c);
        return -rc;
    }
    *out = c;
    return 0;
}

void closer_put(closer *c, int fd)
{
    if (fd < 0)
        return;
    if (c) {
        pthread_mutex_lock(&c->lock);
        if (c->n < c->max && !c->stop) {
            c->ring[(c->head + c->n) % c->max] = fd;
            if (c->n++ == 0)
                pthread_cond_signal(&c->cond);
            pthread_mutex_unlock(&c->lock);
            return;
        }
        pthread_mutex_unlock(&c->lock);
    }
    no_linger(fd);
    close(fd);
}

void closer_free(closer **cp)
{
    closer *c = *cp;

    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c->ring);
    free(c);
    *cp = NULL;
}
