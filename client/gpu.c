/*
 * gpu.c - libgranary's GPU path: gr_read_to_device, batches, the staging
 * ring, the per-segment registration cache (see granary.h, "GPU").
 *
 * How a batch runs (gr_read_to_device_batch):
 *  1. Plan: each range becomes spans to fetch (file range -> device
 *     address).  With the GPU tier on, a range is cut into whole chunks: a
 *     held chunk is one cuMemcpyDtoDAsync at once; a missing one is fetched
 *     whole into a fresh tier entry and copied device to device afterwards.
 *  2. Fetch: gr__read_extents (client/granary.c) pipelines READX requests
 *     and hands over each extent with its lease.  An extent in a segment
 *     mapping that is registered with the driver (registered on first use,
 *     read-only: the mapping is PROT_READ and sealed) is queued as
 *     cuMemcpyHtoDAsync on the caller's stream, no CPU copy, and its lease
 *     joins the open *group*.  Anything else (registration refused, inline
 *     bytes) is copied into a slot of the pinned staging ring (in parallel
 *     by copy threads where the CPU has cores to spare), queued from there on
 *     one of two ring streams, and its lease goes back at once.
 *  3. Completion: a group (16 MiB of leases, or the batch's end) is closed
 *     by recording an event on the caller's stream; a private callback
 *     stream waits for that event and runs a host function that marks the
 *     group fired.  The releaser thread (or the next extent callback, or
 *     gr_dev_wait/poll, whoever comes first) gives the group's leases back.
 *     So a lease lives exactly as long as its copy, plus a wake-up.  The
 *     callback stream runs host functions in submission order, which also
 *     gives the "batches completed" watermark (done_seq) the tier's
 *     graveyard needs.
 *
 * Locks, in order: dev->api (one GPU call at a time per client), the
 * client's lock (held by granary.c around gr__read_extents and the unmap
 * hook), dev->mu (groups, batches, the watermark; never held across a
 * driver call or a client call).  Host functions take only dev->mu and make
 * no driver calls.  The releaser thread makes no driver calls, except that
 * giving back the last lease of a dead connection unmaps its segments,
 * whose unmap hook unregisters them (under the client's lock, which no
 * host function needs, so it cannot deadlock against the driver).
 *
 * The registration cache lives under the client's lock: it is touched only
 * from the extent callback and the unmap hook (both run with it held) and
 * in fini.  A mapping is unmapped only when no lease of its connection
 * generation is out (granary.c), and leases are held until their copies
 * complete, so a registration is never undone under a running DMA.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "gpu_cuda.h"
#include "gpu_int.h"
#include "granary.h"
#include "granary_int.h"
#include "htab.h"
#include "size.h"

#define GPU_GROUP_BYTES (16u << 20)             /* leased bytes per completion group */
#define GPU_MAX_HELD_DEFAULT (128ull << 20)     /* GR_GPU_MAX_LEASED */
#define GPU_RING_DEFAULT (32ull << 20)          /* GR_GPU_RING_BYTES */
#define GPU_REPORT_MS 1000                      /* REPORT at most this often */

enum { REG_OK = 1, REG_REFUSED, REG_FOREIGN };

/* A segment mapping the driver was asked to register. */
typedef struct gpu_reg {
    gr__hnode hnode;                    /* in dev->regs, by mapping address */
    const void *p;
    size_t len;                         /* page-rounded */
    int state;                          /* REG_*; FOREIGN: registered by someone else */
} gpu_reg;

typedef struct gpu_dev gpu_dev;

/* Leases whose copies are queued on one event of the caller's stream. */
typedef struct gpu_group {
    struct gpu_group *next;             /* dev->groups, in submission order */
    gpu_dev *d;
    struct gr_dev_batch *b;
    CUevent ev;
    gr_ref **refs;
    size_t nrefs, cap;
    uint64_t bytes;                     /* leased bytes */
    uint64_t seq;                       /* its batch's */
    int final;                          /* the batch's last group */
    int fired;                          /* its host function ran (dev->mu) */
    int claimed;                        /* someone is giving its leases back (dev->mu) */
    int released;                       /* they are back (dev->mu) */
} gpu_group;

struct gr_dev_batch {
    gpu_dev *d;
    struct gr_dev_batch *next;          /* dev->batches */
    uint64_t seq;
    CUevent ev;                         /* the handle's completion event, NULL without one */
    unsigned pending;                   /* closed groups not yet released (dev->mu) */
    int handle;                         /* the caller (or the call making it) holds it (dev->mu) */
};

enum { ST_COPIES, ST_BYTES, ST_DIRECT, ST_STAGED, ST_TIER_HITS, ST_TIER_HIT_BYTES,
       ST_TIER_MISSES, ST_TIER_EVICTIONS, ST_N };
static const char *const st_names[ST_N] = {
    "gpu_copies", "gpu_bytes", "gpu_direct_bytes", "gpu_staged_bytes", "gpu_tier_hits",
    "gpu_tier_hit_bytes", "gpu_tier_misses", "gpu_tier_evictions",
};

struct gpu_dev {
    gr_client *c;
    const gr__cuda *cu;
    pthread_mutex_t api;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t releaser;
    int releaser_on;
    int stop;                           /* releaser: finish (mu) */
    CUcontext ctx;
    CUdevice dev;
    int retained;                       /* we retained dev's primary context */
    char name[128];
    int can_register;                   /* CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED */
    int ro_register;                    /* ..._READ_ONLY_HOST_REGISTER_SUPPORTED */
    int use_register;                   /* GR_GPU_REGISTER */
    CUstream cb_stream;                 /* host functions that fire groups */
    gr__ring *ring;                     /* made on first use */
    uint64_t ring_bytes;
    gr__htab regs;                      /* registration cache (client lock) */
    uint64_t nregs, reg_failures;       /* atomics: read by gr_gpu_stats */
    char reg_err[160];                  /* why the last registration was refused */
    gpu_group *groups;                  /* (mu) */
    struct gr_dev_batch *batches;       /* (mu) */
    CUevent *evpool;                    /* free events (mu) */
    size_t nev, evcap;
    uint64_t held_bytes, max_held;      /* (mu) leased bytes in closed groups */
    uint64_t seq;                       /* last batch started (api) */
    uint64_t done_seq;                  /* every batch up to it has completed (mu) */
    gr__tier *tier;
    int dead;                           /* atomic: a driver call failed for good */
    char dead_why[200];
    uint64_t st[ST_N], reported[ST_N];  /* (api) */
    uint64_t last_report_ms;
    int report_off;                     /* the daemon does not know REPORT */
    int report_started;                 /* gpu_clients was reported */
    int gds;
    const char *gds_what;
};

/* A batch being planned and fetched (on the caller's stack). */
typedef struct gpu_job {
    gpu_dev *d;
    CUstream s;
    gr__span *spans;
    CUdeviceptr *dps;                   /* device address of each span's first byte */
    size_t nspans, capspans;
    struct gr_dev_batch *b;
    gpu_group *g;                       /* the open group, or NULL */
    gr__tier_ent **fills;               /* tier entries this batch fills */
    size_t nfills, capfills;
    struct post { CUdeviceptr dst, src; uint64_t len; } *post;   /* DtoD after the fills */
    size_t npost, cappost;
    uint64_t done_seq;                  /* batches completed when this one started */
    gr__ring_use ru;                    /* this batch's use of the staging ring */
    CUresult cu_err;                    /* the driver call that failed, if any */
    const char *cu_what;
} gpu_job;

static pthread_mutex_t dev_create_lock = PTHREAD_MUTEX_INITIALIZER;

/* A number or size from the environment (common/size.h: "4M", "512k",
 * plain digits); def when unset or malformed. */
static uint64_t env_size(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    uint64_t n;

    return v && *v && gr__size_parse(v, &n) == 0 ? n : def;
}

static int special_stream(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* Mark the GPU path unusable after a driver failure (first reason kept). */
static void set_dead(gpu_dev *d, const char *what, CUresult r)
{
    char eb[160];

    pthread_mutex_lock(&d->mu);
    if (!__atomic_load_n(&d->dead, __ATOMIC_ACQUIRE)) {
        snprintf(d->dead_why, sizeof(d->dead_why), "%s: %s", what,
                 gr__cuda_strerror(d->cu, r, eb, sizeof(eb)));
        __atomic_store_n(&d->dead, 1, __ATOMIC_RELEASE);
    }
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static int is_dead(gpu_dev *d)
{
    return __atomic_load_n(&d->dead, __ATOMIC_ACQUIRE);
}

/* A refused argument or a lack of memory leaves the context usable;
 * anything else (a fault of an earlier copy shows up in later calls too)
 * does not. */
static int cuda_fatal(CUresult r)
{
    int e = gr__cuda_errno(r);

    return e != EINVAL && e != ENOMEM && e != ENOTSUP;
}

/* ---- events ---- */

/* An event from the pool, or a new one.  0 or the driver's error. */
static CUresult ev_get(gpu_dev *d, CUevent *ev)
{
    pthread_mutex_lock(&d->mu);
    if (d->nev) {
        *ev = d->evpool[--d->nev];
        pthread_mutex_unlock(&d->mu);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&d->mu);
    return d->cu->cuEventCreate(ev, CU_EVENT_DISABLE_TIMING);
}

/* Back to the pool (mu held).  An event that does not fit is leaked: the
 * pool grows with the groups in flight, so only allocation failure gets
 * here, and destroying needs a driver call, which mu forbids. */
static void ev_put_locked(gpu_dev *d, CUevent ev)
{
    if (!ev)
        return;
    if (d->nev == d->evcap) {
        size_t ncap = d->evcap ? d->evcap * 2 : 16;
        CUevent *np = realloc(d->evpool, ncap * sizeof(*np));
        if (!np)
            return;
        d->evpool = np;
        d->evcap = ncap;
    }
    d->evpool[d->nev++] = ev;
}

/* ---- groups and batches ---- */

/* Free every group that has fired and been released, and every batch
 * without a handle whose groups are all released.  mu held. */
static void reap_locked(gpu_dev *d)
{
    gpu_group **gp = &d->groups;
    struct gr_dev_batch **bp = &d->batches;

    while (*gp) {
        gpu_group *g = *gp;
        if (g->fired && g->released) {
            *gp = g->next;
            ev_put_locked(d, g->ev);
            free(g->refs);
            free(g);
        } else {
            gp = &g->next;
        }
    }
    while (*bp) {
        struct gr_dev_batch *b = *bp;
        if (!b->handle && b->pending == 0) {
            *bp = b->next;
            free(b);
        } else {
            bp = &b->next;
        }
    }
}

/* The host function a group's completion runs on the callback stream. */
static void group_fired(void *arg)
{
    gpu_group *g = arg;
    gpu_dev *d = g->d;

    pthread_mutex_lock(&d->mu);
    g->fired = 1;
    if (g->final && g->seq > d->done_seq)
        d->done_seq = g->seq;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* Take g's refs for giving back (mu held); *n gets their count. */
static gr_ref **claim_locked(gpu_group *g, size_t *n)
{
    gr_ref **refs = g->refs;

    g->claimed = 1;
    *n = g->nrefs;
    g->refs = NULL;
    g->nrefs = g->cap = 0;
    return refs;
}

/* The leases of claimed group g are back.  mu held. */
static void released_locked(gpu_dev *d, gpu_group *g)
{
    g->released = 1;
    d->held_bytes -= g->bytes;
    g->b->pending--;
    reap_locked(d);
    pthread_cond_broadcast(&d->cv);
}

/* Give back the leases of every fired group not claimed yet.  held: the
 * client's lock is held (from an extent callback).  Returns how many groups. */
static int release_fired(gpu_dev *d, int held)
{
    gpu_group *todo[16];
    gr_ref **refs[16];
    size_t nrefs[16];
    int k = 0;

    pthread_mutex_lock(&d->mu);
    for (gpu_group *g = d->groups; g && k < 16; g = g->next)
        if (g->fired && !g->claimed) {
            todo[k] = g;
            refs[k] = claim_locked(g, &nrefs[k]);
            k++;
        }
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < k; i++) {
        if (held) {
            for (size_t j = 0; j < nrefs[i]; j++)
                gr__ref_release_held(refs[i][j]);
        } else {
            gr__ref_release_n(refs[i], nrefs[i]);
        }
        free(refs[i]);
    }
    if (k) {
        pthread_mutex_lock(&d->mu);
        for (int i = 0; i < k; i++)
            released_locked(d, todo[i]);
        pthread_mutex_unlock(&d->mu);
    }
    return k;
}

/* The releaser thread: gives back the leases of fired groups as soon as
 * their host function ran. */
static void *releaser_main(void *arg)
{
    gpu_dev *d = arg;

    pthread_mutex_lock(&d->mu);
    for (;;) {
        gpu_group *g;
        for (g = d->groups; g && !(g->fired && !g->claimed); g = g->next)
            ;
        if (!g) {
            if (d->stop)
                break;
            pthread_cond_wait(&d->cv, &d->mu);
            continue;
        }
        pthread_mutex_unlock(&d->mu);
        release_fired(d, 0);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static gpu_group *group_new(gpu_job *j)
{
    gpu_group *g = calloc(1, sizeof(*g));

    if (g) {
        g->d = j->d;
        g->b = j->b;
        g->seq = j->b->seq;
    }
    return g;
}

/* Synchronise with the caller's stream and give g's refs back ourselves:
 * for a group whose completion cannot be signalled.  held as above. */
static void group_drain_now(gpu_job *j, gpu_group *g, int held)
{
    gpu_dev *d = j->d;
    gr_ref **refs;
    size_t n;

    d->cu->cuStreamSynchronize(j->s);
    pthread_mutex_lock(&d->mu);
    refs = claim_locked(g, &n);
    pthread_mutex_unlock(&d->mu);
    if (held) {
        for (size_t i = 0; i < n; i++)
            gr__ref_release_held(refs[i]);
    } else {
        gr__ref_release_n(refs, n);
    }
    free(refs);
    pthread_mutex_lock(&d->mu);
    g->fired = 1;                       /* no host function will come */
    if (g->final && g->seq > d->done_seq)
        d->done_seq = g->seq;
    released_locked(d, g);
    pthread_mutex_unlock(&d->mu);
}

/*
 * Close the open group (a new empty one when final and none is open): an
 * event on the caller's stream after its copies, and a host function on
 * the callback stream behind it.  Every batch ends with a final group, so
 * that done_seq passes it.  0, or -errno when the driver refused (the
 * group's leases are then given back after synchronising the stream, and
 * the GPU path is marked dead).
 */
static int group_close(gpu_job *j, int final, int held)
{
    gpu_dev *d = j->d;
    const gr__cuda *cu = d->cu;
    gpu_group *g = j->g;
    const char *what = "cuEventCreate";
    CUresult r;

    if (!g && !final)
        return 0;
    if (!g && !(g = group_new(j)))
        return -ENOMEM;
    j->g = NULL;
    g->final = final;
    r = ev_get(d, &g->ev);
    pthread_mutex_lock(&d->mu);
    g->next = NULL;
    {
        gpu_group **pp = &d->groups;
        while (*pp)
            pp = &(*pp)->next;
        *pp = g;
    }
    g->b->pending++;
    d->held_bytes += g->bytes;
    pthread_mutex_unlock(&d->mu);
    if (r == CUDA_SUCCESS && (r = cu->cuEventRecord(g->ev, j->s)) != CUDA_SUCCESS)
        what = "cuEventRecord";
    if (r == CUDA_SUCCESS && (r = cu->cuStreamWaitEvent(d->cb_stream, g->ev, 0)) != CUDA_SUCCESS)
        what = "cuStreamWaitEvent";
    if (r == CUDA_SUCCESS && (r = cu->cuLaunchHostFunc(d->cb_stream, group_fired, g)) != CUDA_SUCCESS)
        what = "cuLaunchHostFunc";
    if (r != CUDA_SUCCESS) {
        set_dead(d, what, r);
        if (!j->cu_err) {
            j->cu_err = r;
            j->cu_what = what;
        }
        group_drain_now(j, g, held);
        return -gr__cuda_errno(r);
    }
    return 0;
}

/* Keep the leases held for queued copies under max_held: wait for the
 * oldest groups (that nobody else is releasing) to complete and give their
 * leases back.  From an extent callback (client lock held). */
static void backpressure(gpu_job *j)
{
    gpu_dev *d = j->d;

    for (;;) {
        gpu_group *g;
        gr_ref **refs;
        size_t n;
        CUresult r;
        pthread_mutex_lock(&d->mu);
        if (d->held_bytes <= d->max_held) {
            pthread_mutex_unlock(&d->mu);
            return;
        }
        for (g = d->groups; g && g->claimed; g = g->next)
            ;
        if (!g) {
            pthread_mutex_unlock(&d->mu);
            return;                     /* all being released already */
        }
        refs = claim_locked(g, &n);
        pthread_mutex_unlock(&d->mu);
        r = d->cu->cuEventSynchronize(g->ev);
        if (r != CUDA_SUCCESS)
            set_dead(d, "cuEventSynchronize", r);   /* the copies are over either way */
        for (size_t i = 0; i < n; i++)
            gr__ref_release_held(refs[i]);
        free(refs);
        pthread_mutex_lock(&d->mu);
        released_locked(d, g);
        pthread_mutex_unlock(&d->mu);
    }
}

/* Add a lease whose copy is queued to the open group.  Out of memory,
 * the copy is waited for (the stream synchronised) and the lease given
 * back here, so it is never lost nor released under a running DMA. */
static int group_add(gpu_job *j, gr_ref *ref, uint64_t len)
{
    gpu_group *g = j->g;

    if (!g && !(g = j->g = group_new(j)))
        goto nomem;
    if (g->nrefs == g->cap) {
        size_t ncap = g->cap ? g->cap * 2 : 32;
        gr_ref **np = realloc(g->refs, ncap * sizeof(*np));
        if (!np)
            goto nomem;
        g->refs = np;
        g->cap = ncap;
    }
    g->refs[g->nrefs++] = ref;
    g->bytes += len;
    if (g->bytes >= GPU_GROUP_BYTES) {
        int rc = group_close(j, 0, 1);
        if (rc < 0)
            return rc;
    }
    release_fired(j->d, 1);
    backpressure(j);
    return 0;
nomem:
    j->d->cu->cuStreamSynchronize(j->s);
    gr__ref_release_held(ref);
    return -ENOMEM;
}

/* ---- registration cache (client lock held) ---- */

static uint64_t reg_hash(const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;

    return h ^ (h >> 32);
}

static int reg_eq(const gr__hnode *n, const void *key)
{
    return gr__container_of(n, gpu_reg, hnode)->p == key;
}

static gpu_reg *reg_find(gpu_dev *d, const void *p)
{
    gr__hnode *n = gr__htab_find(&d->regs, reg_hash(p), reg_eq, p);

    return n ? gr__container_of(n, gpu_reg, hnode) : NULL;
}

/* Whether the mapping [p, p+len) can be copied from by DMA: registered now
 * or before, or refused (then the ring is used).  Registers on first use. */
static int reg_usable(gpu_dev *d, const void *p, size_t len)
{
    gpu_reg *r = reg_find(d, p);
    long pg = sysconf(_SC_PAGESIZE);
    unsigned flags = CU_MEMHOSTREGISTER_PORTABLE;
    CUresult cr;

    if (r)
        return r->state != REG_REFUSED;
    r = calloc(1, sizeof(*r));
    if (!r)
        return 0;                       /* not cached: the ring serves it, we ask again later */
    r->p = p;
    r->len = (len + (size_t)pg - 1) & ~((size_t)pg - 1);
    if (!d->can_register || !d->ro_register) {
        r->state = REG_REFUSED;
        snprintf(d->reg_err, sizeof(d->reg_err), "%s",
                 !d->can_register ? "the device does not support host registration"
                                  : "the device cannot register read-only memory "
                                    "(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED 0)");
    } else {
        flags |= CU_MEMHOSTREGISTER_READ_ONLY;
        cr = d->cu->cuMemHostRegister((void *)p, r->len, flags);
        if (cr == CUDA_SUCCESS) {
            r->state = REG_OK;
            __atomic_add_fetch(&d->nregs, 1, __ATOMIC_RELAXED);
        } else if (cr == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
            r->state = REG_FOREIGN;
        } else {
            char eb[120];
            r->state = REG_REFUSED;
            snprintf(d->reg_err, sizeof(d->reg_err), "cuMemHostRegister: %s",
                     gr__cuda_strerror(d->cu, cr, eb, sizeof(eb)));
        }
    }
    if (r->state == REG_REFUSED)
        __atomic_add_fetch(&d->reg_failures, 1, __ATOMIC_RELAXED);
    gr__htab_insert(&d->regs, &r->hnode, reg_hash(p));
    return r->state != REG_REFUSED;
}

/* Undo one registration (if it is ours) and forget it. */
static void reg_undo(gpu_dev *d, gpu_reg *r)
{
    if (r->state == REG_OK) {
        if (!is_dead(d))
            d->cu->cuMemHostUnregister((void *)r->p);
        __atomic_sub_fetch(&d->nregs, 1, __ATOMIC_RELAXED);
    }
    free(r);
}

/* The unmap hook (granary.c, client lock held): a segment mapping goes. */
static void hook_unmap(void *arg, const void *p, size_t len)
{
    gpu_dev *d = arg;
    gpu_reg *r = reg_find(d, p);
    CUcontext old;

    (void)len;
    if (r) {
        gr__htab_remove(&d->regs, &r->hnode);
        d->cu->cuCtxPushCurrent(d->ctx);
        reg_undo(d, r);
        d->cu->cuCtxPopCurrent(&old);
    }
}

/* ---- the staging ring (gpu_ring.c) ---- */

/* The copiers the ring gets: $GRANARY_GPU_COPY_THREADS, else half the CPUs
 * up to 8 (one on a small machine). */
static unsigned ring_threads(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t want = ncpu > 1 ? (uint64_t)ncpu / 2 : 1;

    if (want > 8)
        want = 8;
    return (unsigned)env_size("GRANARY_GPU_COPY_THREADS", want);
}

/* Copy through the ring (made on first use).  0 or -errno. */
static int ring_copy(gpu_job *j, CUdeviceptr dst, const uint8_t *src, size_t len)
{
    gpu_dev *d = j->d;
    const char *what = "";
    CUresult r = CUDA_SUCCESS;

    if (!d->ring)
        r = gr__ring_new(d->cu, d->ring_bytes, ring_threads(), &d->ring, &what);
    if (r == CUDA_SUCCESS)
        r = gr__ring_copy(d->ring, &j->ru, j->s, dst, src, len, &what);
    if (r != CUDA_SUCCESS) {
        if (!j->cu_err) {
            j->cu_err = r;
            j->cu_what = what;
        }
        return -gr__cuda_errno(r);
    }
    return 0;
}

/* The caller's stream waits for this batch's staged copies. */
static int ring_join(gpu_job *j)
{
    const char *what = "";
    CUresult r;

    if (!j->d->ring || !j->ru.started)
        return 0;
    r = gr__ring_join(j->d->ring, &j->ru, j->s, &what);
    if (r != CUDA_SUCCESS) {
        if (!j->cu_err) {
            j->cu_err = r;
            j->cu_what = what;
        }
        return -gr__cuda_errno(r);
    }
    return 0;
}

/* ---- the extent callback (client lock held) ---- */

static int on_extent(void *arg, const gr__ext *e)
{
    gpu_job *j = arg;
    gpu_dev *d = j->d;
    CUdeviceptr dst = j->dps[e->span] + (e->file_off - j->spans[e->span].off);
    int rc;

    if (e->ref && d->use_register && reg_usable(d, e->map, e->map_len)) {
        CUresult r = d->cu->cuMemcpyHtoDAsync(dst, e->p, e->len, j->s);
        if (r != CUDA_SUCCESS) {
            gr__ref_release_held(e->ref);
            j->cu_err = r;
            j->cu_what = "cuMemcpyHtoDAsync";
            return -gr__cuda_errno(r);
        }
        d->st[ST_DIRECT] += e->len;
        return group_add(j, e->ref, e->len);
    }
    rc = ring_copy(j, dst, e->p, e->len);
    gr__ref_release_held(e->ref);       /* the bytes are in pinned memory (or not at all) */
    if (rc == 0)
        d->st[ST_STAGED] += e->len;
    return rc;
}

/* ---- planning ---- */

static int add_span(gpu_job *j, gr_file *f, uint64_t off, uint64_t len, CUdeviceptr dp)
{
    if (j->nspans == j->capspans) {
        size_t ncap = j->capspans ? j->capspans * 2 : 16;
        gr__span *ns = realloc(j->spans, ncap * sizeof(*ns));
        CUdeviceptr *nd;
        if (!ns)
            return -ENOMEM;
        j->spans = ns;
        nd = realloc(j->dps, ncap * sizeof(*nd));
        if (!nd)
            return -ENOMEM;
        j->dps = nd;
        j->capspans = ncap;
    }
    j->spans[j->nspans] = (gr__span){ f, off, len };
    j->dps[j->nspans++] = dp;
    return 0;
}

static int add_post(gpu_job *j, CUdeviceptr dst, CUdeviceptr src, uint64_t len)
{
    if (j->npost == j->cappost) {
        size_t ncap = j->cappost ? j->cappost * 2 : 16;
        struct post *np = realloc(j->post, ncap * sizeof(*np));
        if (!np)
            return -ENOMEM;
        j->post = np;
        j->cappost = ncap;
    }
    j->post[j->npost++] = (struct post){ dst, src, len };
    return 0;
}

static int add_fill(gpu_job *j, gr__tier_ent *e)
{
    if (j->nfills == j->capfills) {
        size_t ncap = j->capfills ? j->capfills * 2 : 16;
        gr__tier_ent **nf = realloc(j->fills, ncap * sizeof(*nf));
        if (!nf)
            return -ENOMEM;
        j->fills = nf;
        j->capfills = ncap;
    }
    j->fills[j->nfills++] = e;
    return 0;
}

/* Plan range r (already clipped, len > 0) of file f with attributes st
 * through the GPU tier: hits are queued now, misses become spans. */
static int plan_tiered(gpu_job *j, const gr_dev_range *r, const struct stat *st, uint64_t unit)
{
    gpu_dev *d = j->d;
    const gr__cuda *cu = d->cu;
    gr__tier_key k = { (uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
                       (int64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec, unit, 0 };
    uint64_t end = r->off + r->done;
    gr__tier_stats ts;

    gr__tier_get_stats(d->tier, &ts);
    for (uint64_t u = r->off / unit; u * unit < end; u++) {
        uint64_t us = u * unit, ue = us + unit < k.size ? us + unit : k.size;
        uint64_t os = r->off > us ? r->off : us, oe = end < ue ? end : ue;
        CUdeviceptr dst = (CUdeviceptr)(uintptr_t)r->dst + (os - r->off);
        gr__tier_ent *e;
        int rc;
        k.index = u;
        e = gr__tier_lookup(d->tier, &k);
        if (e && e->filled) {
            CUresult cr = CUDA_SUCCESS;
            if (e->fill_stream != j->s)
                cr = cu->cuStreamWaitEvent(j->s, e->ready, 0);
            if (cr == CUDA_SUCCESS)
                cr = cu->cuMemcpyDtoDAsync(dst, e->dp + (os - us), oe - os, j->s);
            if (cr != CUDA_SUCCESS) {
                j->cu_err = cr;
                j->cu_what = "cuMemcpyDtoDAsync (GPU tier)";
                return -gr__cuda_errno(cr);
            }
            e->last_seq = j->b->seq;
            d->st[ST_TIER_HITS]++;
            d->st[ST_TIER_HIT_BYTES] += oe - os;
            continue;
        }
        if (e) {                        /* being filled by this batch */
            e->last_seq = j->b->seq;
            rc = add_post(j, dst, e->dp + (os - us), oe - os);
            if (rc < 0)
                return rc;
            continue;
        }
        d->st[ST_TIER_MISSES]++;
        if (ue - us <= ts.cap_bytes / 4 &&
            gr__tier_admit(d->tier, &k, ue - us, j->done_seq, &e) == 0) {
            e->last_seq = j->b->seq;
            if ((rc = add_fill(j, e)) < 0 || (rc = add_span(j, r->f, us, ue - us, e->dp)) < 0 ||
                (rc = add_post(j, dst, e->dp + (os - us), oe - os)) < 0) {
                gr__tier_drop(d->tier, e);
                if (j->nfills && j->fills[j->nfills - 1] == e)
                    j->nfills--;
                return rc;
            }
            continue;
        }
        rc = add_span(j, r->f, os, oe - os, dst);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- the per-client state ---- */

static void dev_fini(void *arg);

static const gr__gpu_hooks gpu_hooks = { hook_unmap, dev_fini };

/* Report the counters' growth to the daemon (at most once a second unless
 * force).  A daemon without REPORT turns reporting off for this client. */
static void maybe_report(gpu_dev *d, int force)
{
    const char *names[ST_N + 2];
    uint64_t vals[ST_N + 2], t = gr__now_ms();
    size_t n = 0;
    int rc;

    if (d->report_off || (!force && t - d->last_report_ms < GPU_REPORT_MS))
        return;
    d->last_report_ms = t;
    if (!d->report_started) {
        names[n] = "gpu_clients";
        vals[n++] = 1;
        names[n] = "gpu_gds_clients";
        vals[n++] = (uint64_t)d->gds;
    }
    for (int i = 0; i < ST_N; i++)
        if (d->st[i] != d->reported[i]) {
            names[n] = st_names[i];
            vals[n++] = d->st[i] - d->reported[i];
        }
    if (n == 0)
        return;
    rc = gr__report(d->c, names, vals, n);
    if (rc == -EPROTO || rc == -EOPNOTSUPP) {
        d->report_off = 1;
    } else if (rc == 0) {
        memcpy(d->reported, d->st, sizeof(d->st));
        d->report_started = 1;
    }
}

/* Free everything (the state may be half made).  Context pushed by the
 * caller when d->ctx is set. */
static void dev_destroy(gpu_dev *d)
{
    const gr__cuda *cu = d->cu;

    gr__ring_free(&d->ring);
    gr__tier_free(&d->tier);
    for (size_t i = 0; i < d->nev; i++)
        cu->cuEventDestroy(d->evpool[i]);
    free(d->evpool);
    {
        gr__htab_iter it;
        for (gr__hnode *n = gr__htab_first(&d->regs, &it); n; n = gr__htab_next(&it)) {
            gr__htab_remove(&d->regs, n);
            reg_undo(d, gr__container_of(n, gpu_reg, hnode));
        }
        gr__htab_fini(&d->regs);
    }
    if (d->cb_stream)
        cu->cuStreamDestroy(d->cb_stream);
    pthread_mutex_destroy(&d->api);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

/*
 * The fini hook (first thing in gr_disconnect): wait for every copy queued
 * (through the callback stream, which runs behind all of them), give back
 * every lease, report the last counters, then undo the registrations and
 * free device and pinned memory.
 */
static void dev_fini(void *arg)
{
    gpu_dev *d = arg;
    const gr__cuda *cu = d->cu;
    CUcontext old;
    CUdevice dev = d->dev;
    int retained = d->retained;

    pthread_mutex_lock(&d->api);
    cu->cuCtxPushCurrent(d->ctx);
    if (!is_dead(d))
        cu->cuStreamSynchronize(d->cb_stream);      /* every host function has run */
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    if (d->releaser_on)
        pthread_join(d->releaser, NULL);
    /* What is left was never fired (a dead context): nothing runs any more. */
    pthread_mutex_lock(&d->mu);
    for (gpu_group *g = d->groups; g; g = g->next)
        g->fired = 1;
    pthread_mutex_unlock(&d->mu);
    while (release_fired(d, 0))
        ;
    pthread_mutex_lock(&d->mu);
    for (struct gr_dev_batch *b = d->batches; b; b = b->next) {
        if (b->ev)
            ev_put_locked(d, b->ev);
        b->ev = NULL;
        b->handle = 0;                  /* handles die with the client */
    }
    reap_locked(d);
    pthread_mutex_unlock(&d->mu);
    maybe_report(d, 1);
    pthread_mutex_unlock(&d->api);
    dev_destroy(d);
    cu->cuCtxPopCurrent(&old);
    if (retained)
        cu->cuDevicePrimaryCtxRelease(dev);
}

/* Make the state of c: load the driver, pick the context (the stream's,
 * the current one, or a primary context), streams, options.  0 or -1 with
 * errno and c's reason set. */
static int dev_new(gr_client *c, CUstream s, gpu_dev **out)
{
    const char *why, *what = "";
    int errnum;
    const gr__cuda *cu = gr__cuda_load(&why, &errnum);
    gpu_dev *d;
    CUresult r = CUDA_SUCCESS;
    CUcontext old;
    char eb[160];
    int ord, v;

    *out = NULL;
    if (!cu)
        return gr__fail(c, errnum, "GPU path: %s", why);
    d = calloc(1, sizeof(*d));
    if (!d)
        return gr__fail(c, ENOMEM, "GPU path: out of memory");
    d->c = c;
    d->cu = cu;
    pthread_mutex_init(&d->api, NULL);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (gr__htab_init(&d->regs, 1024) < 0) {
        dev_destroy(d);
        return gr__fail(c, ENOMEM, "GPU path: out of memory");
    }
    if (!special_stream(s)) {
        what = "cuStreamGetCtx";
        r = cu->cuStreamGetCtx(s, &d->ctx);
    } else {
        what = "cuCtxGetCurrent";
        r = cu->cuCtxGetCurrent(&d->ctx);
    }
    if (r == CUDA_SUCCESS && !d->ctx) {
        ord = (int)env_size("GRANARY_GPU_DEVICE", 0);
        what = "cuDeviceGet";
        r = cu->cuDeviceGet(&d->dev, ord);
        if (r == CUDA_SUCCESS) {
            what = "cuDevicePrimaryCtxRetain";
            r = cu->cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
            d->retained = r == CUDA_SUCCESS;
        }
    }
    if (r != CUDA_SUCCESS) {
        if (d->retained)
            cu->cuDevicePrimaryCtxRelease(d->dev);
        dev_destroy(d);
        return gr__fail(c, gr__cuda_errno(r), "GPU path: %s: %s", what,
                        gr__cuda_strerror(cu, r, eb, sizeof(eb)));
    }
    cu->cuCtxPushCurrent(d->ctx);
    what = "cuCtxGetDevice";
    r = cu->cuCtxGetDevice(&d->dev);
    if (r == CUDA_SUCCESS) {
        what = "cuDeviceGetAttribute";
        v = 0;
        r = cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, d->dev);
        d->can_register = v;
        v = 0;
        if (r == CUDA_SUCCESS)
            r = cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
                                         d->dev);
        d->ro_register = v;
    }
    if (r == CUDA_SUCCESS && cu->cuDeviceGetName(d->name, sizeof(d->name), d->dev) != CUDA_SUCCESS)
        snprintf(d->name, sizeof(d->name), "?");
    if (r == CUDA_SUCCESS) {
        what = "cuStreamCreate";
        r = cu->cuStreamCreate(&d->cb_stream, CU_STREAM_NON_BLOCKING);
    }
    d->use_register = env_size("GRANARY_GPU_REGISTER", 1) != 0;
    d->ring_bytes = env_size("GRANARY_GPU_RING", GPU_RING_DEFAULT);
    d->max_held = env_size("GRANARY_GPU_MAX_LEASED", GPU_MAX_HELD_DEFAULT);
    if (r == CUDA_SUCCESS) {
        uint64_t cap = env_size("GRANARY_GPU_TIER", 0);
        if (cap && gr__tier_new(cu, cap, &d->tier) < 0) {
            what = "GPU tier";
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (r == CUDA_SUCCESS) {
        d->gds = gr__cufile_probe(&d->gds_what);
        if (pthread_create(&d->releaser, NULL, releaser_main, d) != 0) {
            what = "pthread_create";
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            d->releaser_on = 1;
        }
    }
    if (r != CUDA_SUCCESS) {
        int retained = d->retained;
        CUdevice dev = d->dev;
        dev_destroy(d);
        cu->cuCtxPopCurrent(&old);
        if (retained)
            cu->cuDevicePrimaryCtxRelease(dev);
        return gr__fail(c, gr__cuda_errno(r), "GPU path: %s: %s", what,
                        gr__cuda_strerror(cu, r, eb, sizeof(eb)));
    }
    cu->cuCtxPopCurrent(&old);
    d->last_report_ms = gr__now_ms();
    *out = d;
    return 0;
}

/* c's GPU state, made on first use.  NULL with errno and reason on failure. */
static gpu_dev *dev_get(gr_client *c, CUstream s)
{
    gpu_dev *d;

    pthread_mutex_lock(&dev_create_lock);
    d = gr__gpu_get(c);
    if (!d && dev_new(c, s, &d) == 0)
        gr__gpu_set(c, &gpu_hooks, d);
    pthread_mutex_unlock(&dev_create_lock);
    return d;
}

/* Lock the state and make its context current.  0, or -1 with errno (the
 * path is dead) and nothing held. */
static int dev_enter(gpu_dev *d)
{
    pthread_mutex_lock(&d->api);
    if (is_dead(d)) {
        pthread_mutex_unlock(&d->api);
        return gr__fail(d->c, EIO, "GPU path unusable after an earlier failure: %s (connect again)",
                        d->dead_why);
    }
    d->cu->cuCtxPushCurrent(d->ctx);
    return 0;
}

static void dev_leave(gpu_dev *d)
{
    CUcontext old;

    d->cu->cuCtxPopCurrent(&old);
    pthread_mutex_unlock(&d->api);
}

/* Free what the last batches no longer need: the tier's graveyard up to the
 * completed watermark, which it returns.  api held. */
static uint64_t housekeep(gpu_dev *d)
{
    uint64_t done;

    pthread_mutex_lock(&d->mu);
    done = d->done_seq;
    pthread_mutex_unlock(&d->mu);
    if (d->tier)
        gr__tier_collect(d->tier, done);
    return done;
}

/* Check dst .. dst+len: device memory of one allocation.  0 or -EFAULT. */
static int check_dst(gpu_dev *d, const void *dst, uint64_t len)
{
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)dst, base = 0;
    size_t size = 0;
    unsigned type = 0;

    if (!dst)
        return -EFAULT;
    if (d->cu->cuMemGetAddressRange(&base, &size, p) == CUDA_SUCCESS)
        return p - base <= size && len <= size - (p - base) ? 0 : -EFAULT;
    /* Not from cuMemAlloc (a virtual-memory mapping, say): accept device
     * memory without a range check. */
    if (d->cu->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) == CUDA_SUCCESS &&
        (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED))
        return 0;
    return -EFAULT;
}

/* Give back the leases of b's groups: fired ones, or every closed one when
 * the context is dead (no host function will come), waiting for the
 * releaser where it already claimed some.  No lock held. */
static void retire(gpu_dev *d, struct gr_dev_batch *b)
{
    pthread_mutex_lock(&d->mu);
    while (b->pending) {
        gpu_group *g;
        gr_ref **refs;
        size_t n;
        int dead = is_dead(d);
        for (g = d->groups; g; g = g->next)
            if (g->b == b && !g->claimed && (g->fired || dead))
                break;
        if (!g) {
            pthread_cond_wait(&d->cv, &d->mu);
            continue;
        }
        refs = claim_locked(g, &n);
        pthread_mutex_unlock(&d->mu);
        gr__ref_release_n(refs, n);
        free(refs);
        pthread_mutex_lock(&d->mu);
        released_locked(d, g);
    }
    pthread_mutex_unlock(&d->mu);
}

int gr_read_to_device_batch(gr_client *c, gr_dev_range *rg, size_t n, void *stream,
                            gr_dev_batch **out)
{
    CUstream s = stream;
    gpu_job j;
    gpu_dev *d;
    uint64_t total = 0;
    int rc = 0, rc2;
    char eb[160];

    if (out)
        *out = NULL;
    if (n && !rg)
        return gr__fail(c, EINVAL, "no ranges");
    d = dev_get(c, s);
    if (!d || dev_enter(d) < 0)
        return -1;
    memset(&j, 0, sizeof(j));
    j.d = d;
    j.s = s;
    if (!special_stream(s)) {
        CUcontext sc = NULL;
        CUresult r = d->cu->cuStreamGetCtx(s, &sc);
        if (r != CUDA_SUCCESS || sc != d->ctx) {
            dev_leave(d);
            return gr__fail(c, r != CUDA_SUCCESS ? EINVAL : EXDEV, "%s",
                            r != CUDA_SUCCESS ? "not a CUDA stream"
                                              : "the stream belongs to another CUDA context than "
                                                "this client's (one context per gr_client)");
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (!rg[i].f || gr__file_client(rg[i].f) != c || gr_fstat(rg[i].f, &st) < 0) {
            dev_leave(d);
            return gr__fail(c, EINVAL, "range %zu: not a file of this client", i);
        }
        rg[i].done = rg[i].off >= (uint64_t)st.st_size ? 0
                     : rg[i].len < (uint64_t)st.st_size - rg[i].off
                         ? rg[i].len : (uint64_t)st.st_size - rg[i].off;
        if (rg[i].done && check_dst(d, rg[i].dst, rg[i].done) < 0) {
            dev_leave(d);
            return gr__fail(c, EFAULT, "range %zu: dst %p + %" PRIu64 " bytes is not device memory "
                            "of one allocation in this client's CUDA context", i, rg[i].dst,
                            rg[i].done);
        }
        total += rg[i].done;
    }
    j.done_seq = housekeep(d);
    j.b = calloc(1, sizeof(*j.b));
    if (!j.b) {
        dev_leave(d);
        return gr__fail(c, ENOMEM, "out of memory");
    }
    j.b->d = d;
    j.b->seq = ++d->seq;
    j.b->handle = 1;                    /* ours until we return: not reaped under us */
    pthread_mutex_lock(&d->mu);
    j.b->next = d->batches;
    d->batches = j.b;
    pthread_mutex_unlock(&d->mu);

    for (size_t i = 0; i < n && rc == 0; i++) {
        uint64_t unit = gr__file_chunk_size(rg[i].f);
        struct stat st;
        if (!rg[i].done)
            continue;
        gr_fstat(rg[i].f, &st);
        if (d->tier && unit)
            rc = plan_tiered(&j, &rg[i], &st, unit);
        else
            rc = add_span(&j, rg[i].f, rg[i].off, rg[i].done, (CUdeviceptr)(uintptr_t)rg[i].dst);
    }
    if (rc == 0 && j.nspans)
        rc = gr__read_extents(c, j.spans, j.nspans, on_extent, &j);
    if (rc == 0)
        rc = ring_join(&j);
    for (size_t i = 0; i < j.nfills; i++) {
        gr__tier_ent *e = j.fills[i];
        CUresult r = rc == 0 ? d->cu->cuEventRecord(e->ready, s) : CUDA_SUCCESS;
        if (rc == 0 && r != CUDA_SUCCESS) {
            j.cu_err = r;
            j.cu_what = "cuEventRecord (GPU tier)";
            rc = -gr__cuda_errno(r);
        }
        if (rc == 0) {
            e->filled = 1;
            e->fill_stream = s;
        } else if (!e->filled) {
            gr__tier_drop(d->tier, e);  /* never half-filled in the tier */
        }
    }
    for (size_t i = 0; i < j.npost && rc == 0; i++) {
        CUresult r = d->cu->cuMemcpyDtoDAsync(j.post[i].dst, j.post[i].src, j.post[i].len, s);
        if (r != CUDA_SUCCESS) {
            j.cu_err = r;
            j.cu_what = "cuMemcpyDtoDAsync (GPU tier)";
            rc = -gr__cuda_errno(r);
        }
    }
    if (rc < 0)
        ring_join(&j);                  /* the final event must cover the ring's copies */
    rc2 = group_close(&j, 1, 0);        /* the leases of what was queued come back either way */
    if (rc == 0)
        rc = rc2;
    if (rc == 0 && out) {
        CUresult r = ev_get(d, &j.b->ev);
        if (r == CUDA_SUCCESS)
            r = d->cu->cuEventRecord(j.b->ev, s);
        if (r != CUDA_SUCCESS) {
            j.cu_err = r;
            j.cu_what = "cuEventRecord";
            rc = -gr__cuda_errno(r);
        }
    }
    if (rc < 0 && j.cu_err && cuda_fatal(j.cu_err))
        set_dead(d, j.cu_what, j.cu_err);
    if (rc < 0 && is_dead(d))
        retire(d, j.b);                 /* no host function will run for what was queued */
    pthread_mutex_lock(&d->mu);
    if (rc == 0 && out) {
        *out = j.b;                     /* the handle passes to the caller */
    } else {
        j.b->handle = 0;
        ev_put_locked(d, j.b->ev);
        j.b->ev = NULL;
    }
    reap_locked(d);                     /* j.b may be gone from here on */
    pthread_mutex_unlock(&d->mu);
    if (rc == 0) {
        d->st[ST_COPIES] += n;
        d->st[ST_BYTES] += total;
    }
    if (d->tier) {
        gr__tier_stats ts;
        gr__tier_get_stats(d->tier, &ts);
        d->st[ST_TIER_EVICTIONS] = ts.evictions;
    }
    free(j.spans);
    free(j.dps);
    free(j.fills);
    free(j.post);
    maybe_report(d, 0);
    dev_leave(d);
    if (rc < 0) {
        if (j.cu_err) {
            int e = cuda_fatal(j.cu_err) ? EIO : gr__cuda_errno(j.cu_err);
            return gr__fail(c, e, "%s: %s", j.cu_what,
                            gr__cuda_strerror(d->cu, j.cu_err, eb, sizeof(eb)));
        }
        errno = -rc;                    /* the reason is the read's (gr__read_extents) */
        return -1;
    }
    return 0;
}

ssize_t gr_read_to_device(gr_file *f, void *dst, size_t len, off_t off, void *stream,
                          gr_dev_batch **batch)
{
    gr_dev_range r = { f, (uint64_t)off, len, dst, 0 };
    struct stat st;

    if (batch)
        *batch = NULL;
    if (off < 0) {
        errno = EINVAL;
        return -1;
    }
    if (len == 0 || (gr_fstat(f, &st) == 0 && (uint64_t)off >= (uint64_t)st.st_size))
        return 0;                       /* nothing to queue: no batch */
    if (gr_read_to_device_batch(gr__file_client(f), &r, 1, stream, batch) < 0)
        return -1;
    return (ssize_t)r.done;
}

int gr_dev_wait(gr_dev_batch *b)
{
    gpu_dev *d;
    CUcontext old;
    CUresult r;
    char eb[160];

    if (!b)
        return 0;
    d = b->d;
    d->cu->cuCtxPushCurrent(d->ctx);
    r = d->cu->cuEventSynchronize(b->ev);
    d->cu->cuCtxPopCurrent(&old);
    if (r != CUDA_SUCCESS)
        set_dead(d, "copy to the device (cuEventSynchronize)", r);
    retire(d, b);
    pthread_mutex_lock(&d->mu);
    ev_put_locked(d, b->ev);
    b->ev = NULL;
    b->handle = 0;
    reap_locked(d);
    pthread_mutex_unlock(&d->mu);
    if (r != CUDA_SUCCESS)
        return gr__fail(d->c, EIO, "copy to the device failed: %s",
                        gr__cuda_strerror(d->cu, r, eb, sizeof(eb)));
    return 0;
}

int gr_dev_poll(gr_dev_batch *b)
{
    gpu_dev *d = b->d;
    CUcontext old;
    CUresult r;
    char eb[160];
    unsigned pending;

    d->cu->cuCtxPushCurrent(d->ctx);
    r = d->cu->cuEventQuery(b->ev);
    d->cu->cuCtxPopCurrent(&old);
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    if (r != CUDA_SUCCESS) {
        set_dead(d, "copy to the device (cuEventQuery)", r);
        retire(d, b);
        return gr__fail(d->c, EIO, "copy to the device failed: %s",
                        gr__cuda_strerror(d->cu, r, eb, sizeof(eb)));
    }
    release_fired(d, 0);
    pthread_mutex_lock(&d->mu);
    pending = b->pending;
    pthread_mutex_unlock(&d->mu);
    return pending == 0;
}

int gr_gpu_set(gr_client *c, int opt, uint64_t value)
{
    gpu_dev *d = dev_get(c, NULL);
    int rc = 0;

    if (!d || dev_enter(d) < 0)
        return -1;
    switch (opt) {
    case GR_GPU_TIER_BYTES:
        if (!d->tier && value) {
            rc = gr__tier_new(d->cu, value, &d->tier);
        } else if (d->tier) {
            gr__tier_set_cap(d->tier, value, housekeep(d));     /* 0: empty (off) */
        }
        break;
    case GR_GPU_REGISTER:
        d->use_register = value != 0;
        break;
    case GR_GPU_RING_BYTES:
        if (d->ring)
            rc = -EBUSY;
        else
            d->ring_bytes = value;
        break;
    case GR_GPU_MAX_LEASED:
        pthread_mutex_lock(&d->mu);
        d->max_held = value;
        pthread_mutex_unlock(&d->mu);
        break;
    default:
        rc = -EINVAL;
    }
    dev_leave(d);
    if (rc < 0)
        return gr__fail(c, -rc, "gr_gpu_set: %s", strerror(-rc));
    return 0;
}

int gr_gpu_get_stats(gr_client *c, gr_gpu_stats *st)
{
    gpu_dev *d = dev_get(c, NULL);

    memset(st, 0, sizeof(*st));
    if (!d)
        return -1;
    pthread_mutex_lock(&d->api);
    st->copies = d->st[ST_COPIES];
    st->bytes = d->st[ST_BYTES];
    st->direct_bytes = d->st[ST_DIRECT];
    st->staged_bytes = d->st[ST_STAGED];
    st->tier_hits = d->st[ST_TIER_HITS];
    st->tier_hit_bytes = d->st[ST_TIER_HIT_BYTES];
    st->tier_misses = d->st[ST_TIER_MISSES];
    if (d->tier) {
        gr__tier_stats ts;
        gr__tier_get_stats(d->tier, &ts);
        st->tier_evictions = ts.evictions;
        st->tier_used_bytes = ts.used_bytes;
        st->tier_cap_bytes = ts.cap_bytes;
    }
    st->registered_segments = __atomic_load_n(&d->nregs, __ATOMIC_RELAXED);
    st->registration_failures = __atomic_load_n(&d->reg_failures, __ATOMIC_RELAXED);
    st->gds_available = d->gds;
    pthread_mutex_lock(&d->mu);
    st->leased_bytes = d->held_bytes;
    for (struct gr_dev_batch *b = d->batches; b; b = b->next)
        st->batches_inflight += b->pending != 0;
    pthread_mutex_unlock(&d->mu);
    pthread_mutex_unlock(&d->api);
    return 0;
}

int gr_gpu_info(gr_client *c, char *buf, size_t len)
{
    gpu_dev *d = dev_get(c, NULL);
    char reg[200], tier[96];

    if (!d) {
        int e = errno;
        snprintf(buf, len, "%s", gr_strerror_last(c));
        errno = e;
        return -1;
    }
    pthread_mutex_lock(&d->api);
    if (!d->use_register)
        snprintf(reg, sizeof(reg), "off (GR_GPU_REGISTER 0: staging ring only)");
    else if (__atomic_load_n(&d->reg_failures, __ATOMIC_RELAXED) && d->reg_err[0])
        snprintf(reg, sizeof(reg), "refused, staging ring used (%s)", d->reg_err);
    else if (!d->can_register || !d->ro_register)
        snprintf(reg, sizeof(reg), "unsupported by the device, staging ring used");
    else
        snprintf(reg, sizeof(reg), "read-only, %" PRIu64 " segments",
                 __atomic_load_n(&d->nregs, __ATOMIC_RELAXED));
    if (d->tier) {
        gr__tier_stats ts;
        gr__tier_get_stats(d->tier, &ts);
        snprintf(tier, sizeof(tier), "%.1f MiB cap, %.1f MiB used, %" PRIu64 " chunks",
                 (double)ts.cap_bytes / 1048576, (double)ts.used_bytes / 1048576, ts.entries);
    } else {
        snprintf(tier, sizeof(tier), "off");
    }
    snprintf(buf, len, "device %d (%s), CUDA driver %d.%d (%s); arena registration: %s; "
             "staging ring %" PRIu64 " MiB, %d copiers; GPU tier: %s; "
             "GPUDirect Storage: %s%s%s",
             (int)d->dev, d->name, d->cu->driver_version / 1000, d->cu->driver_version % 1000 / 10,
             d->cu->path, reg, d->ring_bytes >> 20,
             d->ring ? (int)gr__ring_copiers(d->ring) : (int)(ring_threads() > 1 ? ring_threads() : 1), tier,
             d->gds_what, is_dead(d) ? "; UNUSABLE: " : "", is_dead(d) ? d->dead_why : "");
    pthread_mutex_unlock(&d->api);
    return 0;
}
