/*
 * gpu_ring.c - the GPU path's pinned staging ring (see gpu_int.h): where
 * bytes cannot be DMAed from where they are (the driver refused to
 * register their arena segment, or the daemon sent them inline), they are
 * copied by the CPU into a slot of pinned memory and DMAed from there.
 *
 * Slots of GR__RING_SLOT bytes alternate between two streams, so the CPU
 * copy into one slot overlaps the DMA out of the previous one; a slot is
 * reused once the event recorded after its last DMA has completed.  Both
 * streams first wait for an event recorded on the caller's stream, so
 * staged copies never overtake work queued there before them, and
 * gr__ring_join makes the caller's stream wait for them in turn.  One
 * core's memcpy (10-15 GB/s) is well below a PCIe 5 link, so large copies
 * are split across copy threads where the machine has cores for them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu_int.h"

#define RING_PAR_MIN (1u << 20)         /* smallest copy split across copy threads */
#define RING_MAX_THREADS 16

typedef struct ring_slot {
    void *host;                         /* GR__RING_SLOT bytes of pinned memory */
    CUevent ev;                         /* recorded after its last DMA */
    int busy;
} ring_slot;

/* Copy threads: one memcpy split into parts, the caller taking parts too. */
typedef struct copy_pool {
    pthread_t th[RING_MAX_THREADS];
    int nth;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;                       /* bumped per job */
    uint8_t *dst;
    const uint8_t *src;
    size_t len, part;
    int parts, next, left, stop;
} copy_pool;

struct gr__ring {
    const gr__cuda *cu;
    ring_slot *slots;
    unsigned nslots, next;
    CUstream stream[2];
    CUevent start_ev, join_ev[2];
    copy_pool *pool;
};

static void *copy_main(void *arg)
{
    copy_pool *p = arg;
    uint64_t seen = 0;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        while (p->next < p->parts) {
            int k = p->next++;
            size_t off = (size_t)k * p->part;
            size_t n = p->len - off < p->part ? p->len - off : p->part;
            pthread_mutex_unlock(&p->mu);
            memcpy(p->dst + off, p->src + off, n);
            pthread_mutex_lock(&p->mu);
            if (--p->left == 0)
                pthread_cond_signal(&p->done);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* memcpy, split over the copy threads when there are some and n is large. */
static void par_memcpy(copy_pool *p, void *dst, const void *src, size_t n)
{
    if (!p || n < RING_PAR_MIN) {
        memcpy(dst, src, n);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->dst = dst;
    p->src = src;
    p->len = n;
    p->part = (n / (size_t)(p->nth + 1) + 4095) & ~(size_t)4095;
    p->parts = (int)((n + p->part - 1) / p->part);
    p->next = 0;
    p->left = p->parts;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    while (p->next < p->parts) {
        int k = p->next++;
        size_t off = (size_t)k * p->part;
        size_t len = n - off < p->part ? n - off : p->part;
        pthread_mutex_unlock(&p->mu);
        memcpy((uint8_t *)dst + off, (const uint8_t *)src + off, len);
        pthread_mutex_lock(&p->mu);
        p->left--;
    }
    while (p->left)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void pool_free(copy_pool **pp)
{
    copy_pool *p = *pp;

    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nth; i++)
        pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p);
    *pp = NULL;
}

/* want copiers in all (the caller included); none below 2. */
static copy_pool *pool_start(unsigned want)
{
    copy_pool *p;

    if (want > RING_MAX_THREADS + 1)
        want = RING_MAX_THREADS + 1;
    if (want <= 1 || !(p = calloc(1, sizeof(*p))))
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    for (unsigned i = 0; i + 1 < want; i++) {
        if (pthread_create(&p->th[p->nth], NULL, copy_main, p) != 0)
            break;
        p->nth++;
    }
    if (p->nth == 0)
        pool_free(&p);
    return p;
}

void gr__ring_free(gr__ring **rp)
{
    gr__ring *r = rp ? *rp : NULL;

    if (!r)
        return;
    pool_free(&r->pool);
    for (unsigned i = 0; i < r->nslots; i++) {
        if (r->slots[i].host)
            r->cu->cuMemFreeHost(r->slots[i].host);
        if (r->slots[i].ev)
            r->cu->cuEventDestroy(r->slots[i].ev);
    }
    free(r->slots);
    for (int i = 0; i < 2; i++) {
        if (r->stream[i])
            r->cu->cuStreamDestroy(r->stream[i]);
        if (r->join_ev[i])
            r->cu->cuEventDestroy(r->join_ev[i]);
    }
    if (r->start_ev)
        r->cu->cuEventDestroy(r->start_ev);
    free(r);
    *rp = NULL;
}

CUresult gr__ring_new(const gr__cuda *cu, uint64_t bytes, unsigned threads, gr__ring **out,
                      const char **what)
{
    gr__ring *r = calloc(1, sizeof(*r));
    unsigned n = (unsigned)(bytes / GR__RING_SLOT);
    CUresult cr = CUDA_SUCCESS;

    *out = NULL;
    *what = "calloc";
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r->cu = cu;
    r->nslots = n < 2 ? 2 : n;
    r->slots = calloc(r->nslots, sizeof(*r->slots));
    if (!r->slots) {
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *what = "cuStreamCreate (staging ring)";
    for (int i = 0; i < 2 && cr == CUDA_SUCCESS; i++) {
        cr = cu->cuStreamCreate(&r->stream[i], CU_STREAM_NON_BLOCKING);
        if (cr == CUDA_SUCCESS)
            cr = cu->cuEventCreate(&r->join_ev[i], CU_EVENT_DISABLE_TIMING);
    }
    if (cr == CUDA_SUCCESS)
        cr = cu->cuEventCreate(&r->start_ev, CU_EVENT_DISABLE_TIMING);
    if (cr == CUDA_SUCCESS)
        *what = "cuMemHostAlloc (staging ring)";
    for (unsigned i = 0; i < r->nslots && cr == CUDA_SUCCESS; i++) {
        cr = cu->cuMemHostAlloc(&r->slots[i].host, GR__RING_SLOT, CU_MEMHOSTALLOC_PORTABLE);
        if (cr == CUDA_SUCCESS)
            cr = cu->cuEventCreate(&r->slots[i].ev, CU_EVENT_DISABLE_TIMING);
    }
    if (cr != CUDA_SUCCESS) {
        gr__ring_free(&r);
        return cr;
    }
    r->pool = pool_start(threads);
    *out = r;
    return CUDA_SUCCESS;
}

unsigned gr__ring_copiers(const gr__ring *r)
{
    return r && r->pool ? (unsigned)r->pool->nth + 1 : 1;
}

CUresult gr__ring_copy(gr__ring *r, gr__ring_use *u, CUstream s, CUdeviceptr dst,
                       const uint8_t *src, size_t len, const char **what)
{
    const gr__cuda *cu = r->cu;
    CUresult cr;

    if (!u->started) {
        *what = "cuEventRecord (staging ring)";
        if ((cr = cu->cuEventRecord(r->start_ev, s)) != CUDA_SUCCESS)
            return cr;
        u->started = 1;
        u->waited[0] = u->waited[1] = 0;
    }
    /* Fault the source in with one call, not a fault per page. */
    madvise((void *)((uintptr_t)src & ~(uintptr_t)4095), len + ((uintptr_t)src & 4095),
            MADV_POPULATE_READ);
    while (len) {
        unsigned i = r->next;
        ring_slot *sl = &r->slots[i];
        int si = (int)(i & 1);
        size_t n = len < GR__RING_SLOT ? len : GR__RING_SLOT;
        r->next = (i + 1) % r->nslots;
        *what = "cuEventSynchronize (staging slot)";
        if (sl->busy && (cr = cu->cuEventSynchronize(sl->ev)) != CUDA_SUCCESS)
            return cr;
        sl->busy = 0;
        if (!u->waited[si]) {
            *what = "cuStreamWaitEvent (staging ring)";
            if ((cr = cu->cuStreamWaitEvent(r->stream[si], r->start_ev, 0)) != CUDA_SUCCESS)
                return cr;
            u->waited[si] = 1;
        }
        par_memcpy(r->pool, sl->host, src, n);
        *what = "cuMemcpyHtoDAsync (staging ring)";
        if ((cr = cu->cuMemcpyHtoDAsync(dst, sl->host, n, r->stream[si])) != CUDA_SUCCESS)
            return cr;
        *what = "cuEventRecord (staging ring)";
        if ((cr = cu->cuEventRecord(sl->ev, r->stream[si])) != CUDA_SUCCESS)
            return cr;
        sl->busy = 1;
        u->used[si] = 1;
        dst += n;
        src += n;
        len -= n;
    }
    return CUDA_SUCCESS;
}

CUresult gr__ring_join(gr__ring *r, gr__ring_use *u, CUstream s, const char **what)
{
    CUresult cr = CUDA_SUCCESS;

    *what = "cuStreamWaitEvent (staging ring)";
    for (int si = 0; si < 2 && cr == CUDA_SUCCESS; si++) {
        if (!u->used[si])
            continue;
        cr = r->cu->cuEventRecord(r->join_ev[si], r->stream[si]);
        if (cr == CUDA_SUCCESS)
            cr = r->cu->cuStreamWaitEvent(s, r->join_ev[si], 0);
        u->used[si] = 0;
    }
    u->started = 0;
    return cr;
}
