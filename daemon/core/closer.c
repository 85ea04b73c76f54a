/*
 * closer.c - see closer.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "closer.h"

#define CLOSER_BATCH 64

struct closer {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int *ring;                  /* waiting descriptors, head..head+n-1 mod max */
    unsigned max, head, n;
    int stop;
};

static void *closer_main(void *arg)
{
    closer *c = arg;
    int batch[CLOSER_BATCH];

    pthread_mutex_lock(&c->lock);
    for (;;) {
        unsigned k = 0;
        while (c->n == 0 && !c->stop)
            pthread_cond_wait(&c->cond, &c->lock);
        if (c->n == 0)
            break;                      /* stopping, and nothing left */
        while (c->n > 0 && k < CLOSER_BATCH) {
            batch[k++] = c->ring[c->head];
            c->head = (c->head + 1) % c->max;
            c->n--;
        }
        pthread_mutex_unlock(&c->lock);
        for (unsigned i = 0; i < k; i++)
            close(batch[i]);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int closer_new(unsigned max, closer **out)
{
    closer *c = calloc(1, sizeof(*c));
    int rc;

    *out = NULL;
    if (!c || max == 0 || !(c->ring = calloc(max, sizeof(int)))) {
        free(c);
        return -ENOMEM;
    }
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
    static const struct linger off = { 0, 0 };

    if (fd < 0)
        return;
    /* A socket sent to us (as a proof, say) closes at once in the
     * background rather than lingering over unsent bytes: jammed with such
     * closes, the queue would fill and the caller close inline.  (On
     * anything else ENOTSOCK, with no file system involved.) */
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
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
