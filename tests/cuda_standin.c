/*
 * cuda_standin.c - a stand-in for the CUDA driver (libcuda.so.1) on host
 * memory, built into build/tests/cuda/libcuda.so.1 for the GPU path's
 * tests on machines without a GPU.
 *
 * libgranary loads it through its ordinary path ($GRANARY_LIBCUDA, dlopen,
 * cuGetProcAddress_v2), so everything above the driver is the real code.
 * It implements the entry points of client/gpu_cuda.h with the semantics
 * that code relies on: streams run their work in order on a thread each
 * (so copies really are asynchronous and complete later), events record a
 * point in a stream and cuStreamWaitEvent captures the event's latest
 * record, host functions run on the stream's thread, a context must be
 * current for calls that need one, registration of a read-only mapping
 * needs CU_MEMHOSTREGISTER_READ_ONLY (checked against /proc/self/maps),
 * an asynchronous fault is sticky: every later call fails, like a real
 * context after an illegal address, and cuMemFree / cuMemFreeHost wait
 * for every queued copy first, as the real driver synchronises there.  "Device memory" is host memory it
 * allocates and tracks, so copies are checked against allocations.
 *
 * Knobs, read at each call (a test may change them between steps):
 *   GR_STANDIN_INIT_ERROR=N   cuInit returns N (100 no device, 35, 34 ...)
 *   GR_STANDIN_REGISTER=refuse  cuMemHostRegister returns NOT_SUPPORTED
 *   GR_STANDIN_READONLY=0     the device reports no read-only registration
 *   GR_STANDIN_DELAY_US=N     every copy waits N us when it runs (completes late)
 *   GR_STANDIN_FAIL_COPY=N    the Nth cuMemcpyHtoDAsync is refused when queued
 *   GR_STANDIN_FAIL_ASYNC=N   the Nth cuMemcpyHtoDAsync faults when it runs (sticky)
 *   GR_STANDIN_FAIL_RECORD=N  the Nth cuEventRecord (counter event_records)
 *                             finds the context faulted (sticky): an earlier
 *                             copy's fault surfacing in a later call, at a
 *                             point of the test's choosing
 *   GR_STANDIN_NO_PROC=NAME   cuGetProcAddress does not know NAME
 *   GR_STANDIN_NOCOPY=1       copies move no bytes (to time the path above the
 *                             driver alone; every byte check then fails)
 * Introspection for the tests: standin_counter(name) (see counters[]) and
 * standin_reset() (zeroes the counters, not the live-object counts).
 *
 * Self-contained on purpose (no common/ helpers): it plays a third-party
 * library loaded beside libgranary, and must not bring gr__ symbols of its
 * own into the process.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Our own declarations, not cuda.h: this file defines the exported
 * cuGetProcAddress (v1) and cuGetProcAddress_v2, which cuda.h renames. */
#define GR_NO_CUDA_H 1
#include "gpu_cuda.h"

#define SA_API __attribute__((visibility("default")))

/* ---- counters ---- */

#define SA_COUNTERS(X) \
    X(register_calls) X(registered) X(unregister_calls) X(register_readonly) X(register_denied) \
    X(htod_async) X(htod_registered) X(htod_pinned) X(htod_pageable) X(htod_sync) \
    X(htod_sync_pinned) X(htod_sync_pageable) X(dtod) X(dtoh) X(host_funcs) X(event_records) \
    X(use_after_unregister) X(streams) X(events) X(device_allocs) X(host_allocs) \
    X(bytes_htod) X(bytes_dtod)

static struct {
#define SA_FIELD(n) uint64_t n;
    SA_COUNTERS(SA_FIELD)
#undef SA_FIELD
} cnt;
static uint64_t htod_seq;               /* cuMemcpyHtoDAsync calls, for FAIL_COPY/FAIL_ASYNC */
static uint64_t copies_queued;          /* copies enqueued on any stream and not yet run (g_mu) */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static CUresult g_dead;                 /* sticky error, 0 while healthy */
static int g_inited;

SA_API uint64_t standin_counter(const char *name);
SA_API void standin_reset(void);

uint64_t standin_counter(const char *name)
{
    uint64_t v = UINT64_MAX;

    pthread_mutex_lock(&g_mu);
#define SA_GET(n) if (!strcmp(name, #n)) v = cnt.n;
    SA_COUNTERS(SA_GET)
#undef SA_GET
    pthread_mutex_unlock(&g_mu);
    return v;
}

void standin_reset(void)
{
    pthread_mutex_lock(&g_mu);
    /* keep the live counts */
    uint64_t s = cnt.streams, e = cnt.events, da = cnt.device_allocs, ha = cnt.host_allocs,
             reg = cnt.registered;
    memset(&cnt, 0, sizeof(cnt));
    cnt.streams = s;
    cnt.events = e;
    cnt.device_allocs = da;
    cnt.host_allocs = ha;
    cnt.registered = reg;
    pthread_mutex_unlock(&g_mu);
}

static long env_long(const char *name, long def)
{
    const char *v = getenv(name);

    return v && *v ? strtol(v, NULL, 10) : def;
}

/* ---- memory table ---- */

enum { M_DEV = 1, M_PINNED, M_REG };

typedef struct mem {
    struct mem *next;
    uintptr_t base;
    size_t size;
    int kind;
} mem;

static mem *mems;                       /* g_mu */

static mem *mem_find_locked(uintptr_t p, int kind)
{
    for (mem *m = mems; m; m = m->next)
        if (m->kind == kind && p >= m->base && p - m->base < m->size)
            return m;
    return NULL;
}

/* The range lies inside one allocation of kind. */
static int mem_covers_locked(uintptr_t p, size_t len, int kind)
{
    mem *m = mem_find_locked(p, kind);

    return m && len <= m->size - (p - m->base);
}

static void mem_add_locked(uintptr_t base, size_t size, int kind)
{
    mem *m = calloc(1, sizeof(*m));

    if (!m)
        abort();
    m->base = base;
    m->size = size;
    m->kind = kind;
    m->next = mems;
    mems = m;
}

static int mem_del_locked(uintptr_t base, int kind)
{
    for (mem **pp = &mems; *pp; pp = &(*pp)->next)
        if ((*pp)->kind == kind && (*pp)->base == base) {
            mem *m = *pp;
            *pp = m->next;
            free(m);
            return 1;
        }
    return 0;
}

/* ---- contexts ---- */

struct CUctx_st {
    int dev;
    int refs;
};
static struct CUctx_st ctxs[1];
static __thread CUcontext tls_ctx[16];
static __thread int tls_n;

static CUcontext current(void)
{
    return tls_n ? tls_ctx[tls_n - 1] : NULL;
}

/* 0 when a call may go ahead: initialised, healthy, a context current. */
static CUresult ready(int need_ctx)
{
    CUresult r;

    pthread_mutex_lock(&g_mu);
    r = !g_inited ? CUDA_ERROR_NOT_INITIALIZED : g_dead;
    pthread_mutex_unlock(&g_mu);
    if (r == CUDA_SUCCESS && need_ctx && !current())
        r = CUDA_ERROR_INVALID_CONTEXT;
    return r;
}

/* ---- events and streams ---- */

struct CUevent_st {
    uint64_t recorded, completed;       /* g_mu */
    struct timespec t;
};

enum { OP_HTOD = 1, OP_DTOD, OP_DTOH, OP_EVENT, OP_WAIT, OP_HOST, OP_STOP };

typedef struct op {
    struct op *next;
    int kind;
    void *dst;
    const void *src;
    size_t len;
    int src_reg;                        /* the source was registered when queued */
    int fail;                           /* fault when run */
    CUevent ev;
    uint64_t epoch;
    CUhostFn fn;
    void *arg;
} op;

struct CUstream_st {
    pthread_t th;
    CUcontext ctx;
    op *head, *tail;                    /* g_mu */
    uint64_t enq, done;                 /* g_mu */
};

static struct CUstream_st *default_stream;

static void run_op(op *o)
{
    long delay = env_long("GR_STANDIN_DELAY_US", 0);

    switch (o->kind) {
    case OP_HTOD:
    case OP_DTOD:
    case OP_DTOH:
        if (delay > 0)
            usleep((useconds_t)delay);
        pthread_mutex_lock(&g_mu);
        if (o->kind == OP_HTOD && o->src_reg &&
            !mem_covers_locked((uintptr_t)o->src, o->len, M_REG)) {
            cnt.use_after_unregister++;
            o->fail = 1;
        }
        if (o->fail && !g_dead)
            g_dead = CUDA_ERROR_ILLEGAL_ADDRESS;
        if (g_dead) {
            pthread_mutex_unlock(&g_mu);
            return;
        }
        pthread_mutex_unlock(&g_mu);
        if (!env_long("GR_STANDIN_NOCOPY", 0))
            memcpy(o->dst, o->src, o->len);
        return;
    case OP_EVENT:
        pthread_mutex_lock(&g_mu);
        if (o->epoch > o->ev->completed)
            o->ev->completed = o->epoch;
        clock_gettime(CLOCK_MONOTONIC, &o->ev->t);
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
        return;
    case OP_WAIT:
        pthread_mutex_lock(&g_mu);
        while (!g_dead && o->ev->completed < o->epoch)
            pthread_cond_wait(&g_cv, &g_mu);
        pthread_mutex_unlock(&g_mu);
        return;
    case OP_HOST:
        pthread_mutex_lock(&g_mu);
        if (g_dead) {                   /* a dead context runs nothing */
            pthread_mutex_unlock(&g_mu);
            return;
        }
        cnt.host_funcs++;
        pthread_mutex_unlock(&g_mu);
        o->fn(o->arg);
        return;
    default:
        return;
    }
}

static void *stream_main(void *arg)
{
    struct CUstream_st *s = arg;

    for (;;) {
        op *o;
        int stop;
        pthread_mutex_lock(&g_mu);
        while (!s->head)
            pthread_cond_wait(&g_cv, &g_mu);
        o = s->head;
        pthread_mutex_unlock(&g_mu);
        run_op(o);
        pthread_mutex_lock(&g_mu);
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        s->done++;
        if (o->kind == OP_HTOD || o->kind == OP_DTOD || o->kind == OP_DTOH)
            copies_queued--;
        stop = o->kind == OP_STOP;
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
        free(o);
        if (stop)
            return NULL;
    }
}

static struct CUstream_st *stream_new(CUcontext ctx)
{
    struct CUstream_st *s = calloc(1, sizeof(*s));

    if (!s)
        return NULL;
    s->ctx = ctx;
    if (pthread_create(&s->th, NULL, stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* The stream a handle means: NULL and the special handles are the default
 * stream (no implicit synchronisation with other streams is modelled). */
static struct CUstream_st *stream_of(CUstream h)
{
    if (h && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD)
        return h;
    pthread_mutex_lock(&g_mu);
    if (!default_stream)
        default_stream = stream_new(&ctxs[0]);
    pthread_mutex_unlock(&g_mu);
    return default_stream;
}

static CUresult enqueue(CUstream h, op *o)
{
    struct CUstream_st *s = stream_of(h);

    if (!s) {
        free(o);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&g_mu);
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    s->enq++;
    if (o->kind == OP_HTOD || o->kind == OP_DTOD || o->kind == OP_DTOH)
        copies_queued++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

static op *op_new(int kind)
{
    op *o = calloc(1, sizeof(*o));

    if (!o)
        abort();
    o->kind = kind;
    return o;
}

static CUresult stream_sync(struct CUstream_st *s)
{
    CUresult r;

    pthread_mutex_lock(&g_mu);
    while (!g_dead && s->done < s->enq)
        pthread_cond_wait(&g_cv, &g_mu);
    r = g_dead;
    pthread_mutex_unlock(&g_mu);
    return r;
}

/* ---- the entry points ---- */

static CUresult sa_cuInit(unsigned int flags)
{
    long e = env_long("GR_STANDIN_INIT_ERROR", 0);

    (void)flags;
    if (e)
        return (CUresult)e;
    pthread_mutex_lock(&g_mu);
    g_inited = 1;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

static CUresult sa_cuDriverGetVersion(int *v)
{
    *v = 13000;
    return CUDA_SUCCESS;
}

static CUresult sa_cuDeviceGet(CUdevice *dev, int ordinal)
{
    CUresult r = ready(0);

    if (r)
        return r;
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = 0;
    return CUDA_SUCCESS;
}

static CUresult sa_cuDeviceGetCount(int *n)
{
    CUresult r = ready(0);

    if (r)
        return r;
    *n = 1;
    return CUDA_SUCCESS;
}

static CUresult sa_cuDeviceGetAttribute(int *pi, CUdevice_attribute a, CUdevice dev)
{
    CUresult r = ready(0);

    if (r)
        return r;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    switch ((int)a) {
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        *pi = 1;
        break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
        *pi = (int)env_long("GR_STANDIN_READONLY", 1);
        break;
    default:
        *pi = 0;
    }
    return CUDA_SUCCESS;
}

static CUresult sa_cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = ready(0);

    if (r)
        return r;
    (void)dev;
    snprintf(name, (size_t)len, "Granary CUDA stand-in (host memory)");
    return CUDA_SUCCESS;
}

static CUresult sa_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = ready(0);

    if (r)
        return r;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_mu);
    ctxs[0].refs++;
    pthread_mutex_unlock(&g_mu);
    *pctx = &ctxs[0];
    return CUDA_SUCCESS;
}

static CUresult sa_cuDevicePrimaryCtxRelease(CUdevice dev)
{
    (void)dev;
    pthread_mutex_lock(&g_mu);
    ctxs[0].refs--;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

static CUresult sa_cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult r = ready(0);

    if (r)
        return r;
    *pctx = current();
    return CUDA_SUCCESS;
}

static CUresult sa_cuCtxSetCurrent(CUcontext ctx)
{
    if (tls_n)
        tls_ctx[tls_n - 1] = ctx;
    else if (ctx)
        tls_ctx[tls_n++] = ctx;
    return CUDA_SUCCESS;
}

static CUresult sa_cuCtxPushCurrent(CUcontext ctx)
{
    if (!ctx || tls_n == 16)
        return CUDA_ERROR_INVALID_VALUE;
    tls_ctx[tls_n++] = ctx;
    return CUDA_SUCCESS;
}

static CUresult sa_cuCtxPopCurrent(CUcontext *pctx)
{
    if (!tls_n)
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_n--;
    if (pctx)
        *pctx = tls_ctx[tls_n];
    return CUDA_SUCCESS;
}

static CUresult sa_cuCtxGetDevice(CUdevice *dev)
{
    CUresult r = ready(1);

    if (r)
        return r;
    *dev = current()->dev;
    return CUDA_SUCCESS;
}

static CUresult sa_cuCtxSynchronize(void)
{
    CUresult r = ready(1);

    if (r)
        return r;
    return stream_sync(stream_of(NULL));
}

static CUresult sa_cuStreamCreate(CUstream *ps, unsigned int flags)
{
    CUresult r = ready(1);
    struct CUstream_st *s;

    (void)flags;
    if (r)
        return r;
    s = stream_new(current());
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_mu);
    cnt.streams++;
    pthread_mutex_unlock(&g_mu);
    *ps = s;
    return CUDA_SUCCESS;
}

static CUresult sa_cuStreamDestroy(CUstream h)
{
    struct CUstream_st *s = h;

    if (!s || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Work still queued completes first (or is skipped on a dead context). */
    enqueue(s, op_new(OP_STOP));
    pthread_join(s->th, NULL);
    pthread_mutex_lock(&g_mu);
    cnt.streams--;
    pthread_mutex_unlock(&g_mu);
    free(s);
    return CUDA_SUCCESS;
}

static CUresult sa_cuStreamSynchronize(CUstream h)
{
    CUresult r = ready(0);

    if (r)
        return r;
    return stream_sync(stream_of(h));
}

static CUresult sa_cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags)
{
    CUresult r = ready(0);
    op *o;

    (void)flags;
    if (r)
        return r;
    o = op_new(OP_WAIT);
    o->ev = ev;
    pthread_mutex_lock(&g_mu);
    o->epoch = ev->recorded;            /* the latest record, as of now */
    pthread_mutex_unlock(&g_mu);
    return enqueue(h, o);
}

static CUresult sa_cuStreamGetCtx(CUstream h, CUcontext *pctx)
{
    CUresult r = ready(0);

    if (r)
        return r;
    *pctx = stream_of(h)->ctx;
    return CUDA_SUCCESS;
}

static CUresult sa_cuEventCreate(CUevent *pev, unsigned int flags)
{
    CUresult r = ready(1);

    (void)flags;
    if (r)
        return r;
    *pev = calloc(1, sizeof(**pev));
    if (!*pev)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_mu);
    cnt.events++;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

static CUresult sa_cuEventDestroy(CUevent ev)
{
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_mu);
    cnt.events--;
    pthread_mutex_unlock(&g_mu);
    free(ev);
    return CUDA_SUCCESS;
}

static CUresult sa_cuEventRecord(CUevent ev, CUstream h)
{
    CUresult r = ready(0);
    long fail_at = env_long("GR_STANDIN_FAIL_RECORD", 0);
    op *o;

    if (r)
        return r;
    pthread_mutex_lock(&g_mu);
    if (++cnt.event_records == (uint64_t)fail_at && fail_at > 0) {
        g_dead = r = CUDA_ERROR_ILLEGAL_ADDRESS;
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
        return r;
    }
    pthread_mutex_unlock(&g_mu);
    o = op_new(OP_EVENT);
    o->ev = ev;
    pthread_mutex_lock(&g_mu);
    o->epoch = ++ev->recorded;
    pthread_mutex_unlock(&g_mu);
    return enqueue(h, o);
}

static CUresult sa_cuEventQuery(CUevent ev)
{
    CUresult r;

    pthread_mutex_lock(&g_mu);
    r = g_dead ? g_dead : ev->completed >= ev->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&g_mu);
    return r;
}

static CUresult sa_cuEventSynchronize(CUevent ev)
{
    CUresult r;
    uint64_t want;

    pthread_mutex_lock(&g_mu);
    want = ev->recorded;
    while (!g_dead && ev->completed < want)
        pthread_cond_wait(&g_cv, &g_mu);
    r = g_dead;
    pthread_mutex_unlock(&g_mu);
    return r;
}

static CUresult sa_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    CUresult r = ready(0);

    if (r)
        return r;
    *ms = (float)((double)(b->t.tv_sec - a->t.tv_sec) * 1e3 +
                  (double)(b->t.tv_nsec - a->t.tv_nsec) / 1e6);
    return CUDA_SUCCESS;
}

static CUresult sa_cuLaunchHostFunc(CUstream h, CUhostFn fn, void *arg)
{
    CUresult r = ready(0);
    op *o;

    if (r)
        return r;
    o = op_new(OP_HOST);
    o->fn = fn;
    o->arg = arg;
    return enqueue(h, o);
}

/* Whether every page of [p, p+len) is mapped writable (/proc/self/maps). */
static int range_writable(uintptr_t p, size_t len)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    uintptr_t at = p, end = p + len;

    if (!f)
        return 1;
    while (at < end && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char perm[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perm) != 3)
            continue;
        if (at >= lo && at < hi) {
            if (perm[1] != 'w') {
                fclose(f);
                return 0;
            }
            at = hi;
        }
    }
    fclose(f);
    return 1;
}

static CUresult sa_cuMemHostRegister(void *p, size_t len, unsigned int flags)
{
    CUresult r = ready(1);
    long pg = sysconf(_SC_PAGESIZE);
    const char *refuse = getenv("GR_STANDIN_REGISTER");
    uintptr_t a = (uintptr_t)p;

    if (r)
        return r;
    pthread_mutex_lock(&g_mu);
    cnt.register_calls++;
    pthread_mutex_unlock(&g_mu);
    if (refuse && !strcmp(refuse, "refuse"))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!p || !len || a % (uintptr_t)pg || len % (size_t)pg)
        return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_MEMHOSTREGISTER_READ_ONLY) && !env_long("GR_STANDIN_READONLY", 1))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!(flags & CU_MEMHOSTREGISTER_READ_ONLY) && !range_writable(a, len)) {
        /* the driver pins for writing: a read-only mapping fails */
        pthread_mutex_lock(&g_mu);
        cnt.register_denied++;
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* Touch every page, as pinning faults them in. */
    for (size_t off = 0; off < len; off += (size_t)pg)
        (void)*(volatile const char *)(a + off);
    pthread_mutex_lock(&g_mu);
    for (mem *m = mems; m; m = m->next)
        if (m->kind == M_REG && a < m->base + m->size && m->base < a + len) {
            pthread_mutex_unlock(&g_mu);
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    mem_add_locked(a, len, M_REG);
    cnt.registered++;
    if (flags & CU_MEMHOSTREGISTER_READ_ONLY)
        cnt.register_readonly++;
    pthread_mutex_unlock(&g_mu);
    return CUDA_SUCCESS;
}

static CUresult sa_cuMemHostUnregister(void *p)
{
    CUresult r = ready(1);
    int ok;

    if (r)
        return r;
    pthread_mutex_lock(&g_mu);
    cnt.unregister_calls++;
    ok = mem_del_locked((uintptr_t)p, M_REG);
    if (ok)
        cnt.registered--;
    pthread_mutex_unlock(&g_mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

static CUresult sa_cuMemHostAlloc(void **pp, size_t len, unsigned int flags)
{
    CUresult r = ready(1);
    void *p;

    (void)flags;
    if (r)
        return r;
    p = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_mu);
    mem_add_locked((uintptr_t)p, len, M_PINNED);
    cnt.host_allocs++;
    pthread_mutex_unlock(&g_mu);
    *pp = p;
    return CUDA_SUCCESS;
}

/* Wait until no copy queued on any stream is left to run (g_mu held): the
 * real cuMemFree and cuMemFreeHost synchronise with the device before
 * memory goes, so a copy queued into a buffer that is then freed completes
 * first instead of writing into freed memory. */
static void copies_drain_locked(void)
{
    while (copies_queued)
        pthread_cond_wait(&g_cv, &g_mu);
}

static CUresult sa_cuMemFreeHost(void *p)
{
    int ok;

    pthread_mutex_lock(&g_mu);
    copies_drain_locked();
    ok = mem_del_locked((uintptr_t)p, M_PINNED);
    if (ok)
        cnt.host_allocs--;
    pthread_mutex_unlock(&g_mu);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}

static CUresult sa_cuMemAlloc(CUdeviceptr *dp, size_t len)
{
    CUresult r = ready(1);
    void *p;

    if (r)
        return r;
    if (len == 0)
        return CUDA_ERROR_INVALID_VALUE;
    p = aligned_alloc(256, (len + 255) & ~(size_t)255);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_mu);
    mem_add_locked((uintptr_t)p, len, M_DEV);
    cnt.device_allocs++;
    pthread_mutex_unlock(&g_mu);
    *dp = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult sa_cuMemFree(CUdeviceptr dp)
{
    int ok;

    pthread_mutex_lock(&g_mu);
    copies_drain_locked();
    ok = mem_del_locked((uintptr_t)dp, M_DEV);
    if (ok)
        cnt.device_allocs--;
    pthread_mutex_unlock(&g_mu);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    free((void *)(uintptr_t)dp);
    return CUDA_SUCCESS;
}

static CUresult sa_cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr dp)
{
    CUresult r = ready(1);
    mem *m;

    if (r)
        return r;
    pthread_mutex_lock(&g_mu);
    m = mem_find_locked((uintptr_t)dp, M_DEV);
    if (m) {
        if (base)
            *base = (CUdeviceptr)m->base;
        if (size)
            *size = m->size;
    }
    pthread_mutex_unlock(&g_mu);
    return m ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

static CUresult sa_cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr dp)
{
    CUresult r = ready(1);
    int kind = 0;

    if (r)
        return r;
    if ((int)attr != CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mu);
    kind = mem_find_locked((uintptr_t)dp, M_DEV) ? CU_MEMORYTYPE_DEVICE
           : mem_find_locked((uintptr_t)dp, M_PINNED) || mem_find_locked((uintptr_t)dp, M_REG)
               ? CU_MEMORYTYPE_HOST : 0;
    pthread_mutex_unlock(&g_mu);
    if (!kind)
        return CUDA_ERROR_INVALID_VALUE;
    *(unsigned *)data = (unsigned)kind;
    return CUDA_SUCCESS;
}

/* Classify a host source (g_mu held): 2 registered, 1 pinned, 0 pageable. */
static int src_kind_locked(const void *src, size_t len)
{
    if (mem_covers_locked((uintptr_t)src, len, M_REG))
        return 2;
    if (mem_covers_locked((uintptr_t)src, len, M_PINNED))
        return 1;
    return 0;
}

static CUresult sa_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t len, CUstream h)
{
    CUresult r = ready(1);
    long fail_at = env_long("GR_STANDIN_FAIL_COPY", 0), async_at = env_long("GR_STANDIN_FAIL_ASYNC", 0);
    op *o;
    int k;
    uint64_t seq;

    if (r)
        return r;
    pthread_mutex_lock(&g_mu);
    seq = ++htod_seq;
    if (!mem_covers_locked((uintptr_t)dst, len, M_DEV) || (fail_at > 0 && seq == (uint64_t)fail_at)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    k = src_kind_locked(src, len);
    cnt.htod_async++;
    cnt.bytes_htod += len;
    if (k == 2)
        cnt.htod_registered++;
    else if (k == 1)
        cnt.htod_pinned++;
    else
        cnt.htod_pageable++;
    pthread_mutex_unlock(&g_mu);
    o = op_new(OP_HTOD);
    o->dst = (void *)(uintptr_t)dst;
    o->src = src;
    o->len = len;
    o->src_reg = k == 2;
    o->fail = async_at > 0 && seq == (uint64_t)async_at;
    return enqueue(h, o);
}

static CUresult sa_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream h)
{
    CUresult r = ready(1);
    op *o;

    if (r)
        return r;
    pthread_mutex_lock(&g_mu);
    if (!mem_covers_locked((uintptr_t)dst, len, M_DEV) ||
        !mem_covers_locked((uintptr_t)src, len, M_DEV)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    cnt.dtod++;
    cnt.bytes_dtod += len;
    pthread_mutex_unlock(&g_mu);
    o = op_new(OP_DTOD);
    o->dst = (void *)(uintptr_t)dst;
    o->src = (const void *)(uintptr_t)src;
    o->len = len;
    return enqueue(h, o);
}

/* The synchronous copies run on the default stream and wait for it. */
static CUresult sync_copy(int kind, void *dst, const void *src, size_t len)
{
    CUresult r = ready(1);
    op *o;

    if (r)
        return r;
    o = op_new(kind);
    o->dst = dst;
    o->src = src;
    o->len = len;
    r = enqueue(NULL, o);
    return r ? r : stream_sync(stream_of(NULL));
}

static CUresult sa_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t len)
{
    int k;

    pthread_mutex_lock(&g_mu);
    if (!mem_covers_locked((uintptr_t)dst, len, M_DEV)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    k = src_kind_locked(src, len);
    cnt.htod_sync++;
    if (k)
        cnt.htod_sync_pinned++;
    else
        cnt.htod_sync_pageable++;
    pthread_mutex_unlock(&g_mu);
    return sync_copy(OP_HTOD, (void *)(uintptr_t)dst, src, len);
}

static CUresult sa_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t len)
{
    pthread_mutex_lock(&g_mu);
    if (!mem_covers_locked((uintptr_t)src, len, M_DEV)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    cnt.dtoh++;
    pthread_mutex_unlock(&g_mu);
    return sync_copy(OP_DTOH, dst, (const void *)(uintptr_t)src, len);
}

static CUresult sa_cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t len)
{
    CUresult r = ready(1);

    if (r)
        return r;
    pthread_mutex_lock(&g_mu);
    if (!mem_covers_locked((uintptr_t)dst, len, M_DEV)) {
        pthread_mutex_unlock(&g_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&g_mu);
    r = stream_sync(stream_of(NULL));
    if (r == CUDA_SUCCESS)
        memset((void *)(uintptr_t)dst, v, len);
    return r;
}

static const struct { int code; const char *name, *text; } errs[] = {
    { CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
    { CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
    { CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
    { CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
    { CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library" },
    { CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
      "CUDA-capable device(s) is/are busy or unavailable" },
    { CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
    { CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
    { CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
    { CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
    { CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready" },
    { CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
      "an illegal memory access was encountered" },
    { CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
      "part or all of the requested memory range is already mapped" },
    { CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
      "pointer does not correspond to a registered memory region" },
    { CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
};

static CUresult sa_cuGetErrorName(CUresult e, const char **s)
{
    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
        if (errs[i].code == (int)e) {
            *s = errs[i].name;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult sa_cuGetErrorString(CUresult e, const char **s)
{
    for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
        if (errs[i].code == (int)e) {
            *s = errs[i].text;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- the entry point table, by base name ---- */

static const struct { const char *name; void *fn; } procs[] = {
#define SA_PROC(name, args) { #name, (void *)sa_##name },
    GR_CUDA_FUNCS(SA_PROC)
#undef SA_PROC
};

SA_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status);
SA_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
SA_API CUresult cuDriverGetVersion(int *v);

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    const char *hide = getenv("GR_STANDIN_NO_PROC");

    (void)flags;
    *pfn = NULL;
    if (version > 13000)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++)
        if (!strcmp(procs[i].name, symbol) && !(hide && !strcmp(hide, symbol))) {
            *pfn = procs[i].fn;
            if (status)
                *status = 0;
            return CUDA_SUCCESS;
        }
    if (status)
        *status = 1;                    /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

CUresult cuDriverGetVersion(int *v)
{
    return sa_cuDriverGetVersion(v);
}
