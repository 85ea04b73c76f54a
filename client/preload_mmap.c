/*
 * preload_mmap.c - the LD_PRELOAD shim's mmap part: read-only mappings of
 * served files (np.memmap, np.load(mmap_mode=), Python's mmap) made of
 * the daemon's cached chunks.
 *
 * How.  mmap(addr = NULL, len, PROT_READ, MAP_SHARED or MAP_PRIVATE, fd,
 * off) of a served descriptor reserves len bytes of address space, then
 * for each chunk of [off, off + len) takes a zero-copy lease
 * (gr_read_ref) and, when the chunk's bytes are page-aligned in the arena,
 * duplicates those pages into place with mremap(old_size = 0), which maps
 * the same shared-memory pages a second time: no copy, no extra memory.
 * The file's last partial page is copied into an anonymous page (so the
 * bytes past the end of the file read as zeros, as mmap promises), and so
 * is a chunk whose bytes came as a private copy.  The mapping is then
 * read-only.  The leases (and the served file, so its connection) are held
 * until the whole mapping is unmapped with munmap, so the daemon never
 * reuses pages a mapping shows.
 *
 * Fallback: the real mmap, whenever any of this cannot be done: a
 * writable, fixed or executable mapping, flags other than
 * MAP_SHARED/MAP_PRIVATE/MAP_POPULATE/MAP_NORESERVE, a mapping larger than
 * $GRANARY_PRELOAD_MMAP_MAX (a size, default 256M: the mapping is filled
 * when it is made, not page by page, and every chunk of it stays leased),
 * chunks whose bytes are not page-aligned, a lease refused, any failure.
 *
 * Differences from a mapping of the file, all on edges: pages wholly past
 * the end of the file fault with SIGSEGV, not SIGBUS; mprotect(PROT_WRITE)
 * on a MAP_PRIVATE mapping fails (the file's would copy on write); a
 * partial munmap keeps the leases until the rest goes; after fork the
 * child's munmap releases nothing (the leases are the parent's
 * connection's, as its descriptors are).
 *
 * Threads: pm.lock guards the list of mappings; never held across a call
 * to the daemon; made new in a child after fork.
 */
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "granary.h"
#include "preload_int.h"
#include "size.h"

#define PM_DEFAULT_MAX (256ull << 20)

/* One served mapping. */
typedef struct pm_map {
    uintptr_t base;                     /* page-aligned */
    size_t len;                         /* rounded up to pages */
    pid_t pid;                          /* the process whose connection holds refs */
    void *pf;                           /* the served file (pl__file_put) */
    gr_ref **refs;                      /* leases, nrefs of them */
    size_t nrefs;
    struct pm_map *next;
} pm_map;

static struct {
    pthread_mutex_t lock;
    pm_map *list;
    int n;                              /* entries (atomic reads outside the lock) */
} pm = { .lock = PTHREAD_MUTEX_INITIALIZER };

void pl__mmap_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

    pm.lock = fresh;
}

static void *pm_real(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

    if (!p) {
        p = dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    }
    return p;
}

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*munmap_fn)(void *, size_t);

static mmap_fn pm_real_mmap(const char *name)
{
    static void *s_mmap, *s_mmap64;

    return (mmap_fn)pm_real(strcmp(name, "mmap") ? &s_mmap64 : &s_mmap, name);
}

static munmap_fn pm_real_munmap(void)
{
    static void *s;

    return (munmap_fn)pm_real(&s, "munmap");
}

static uint64_t pm_max(void)
{
    const char *v = getenv("GRANARY_PRELOAD_MMAP_MAX");
    uint64_t b;

    if (v && *v && gr__size_parse(v, &b) == 0)
        return b;
    return PM_DEFAULT_MAX;
}

/* Release what m holds (leases: only in the process that took them). */
static void pm_free(pm_map *m)
{
    if (m->pid == getpid()) {
        for (size_t i = 0; i < m->nrefs; i++)
            gr_ref_release(m->refs[i]);
        pl__file_put(m->pf);
    }
    free(m->refs);
    free(m);
}

/*
 * Build the mapping of [off, off + len) of f (size bytes long) at a fresh
 * reservation; returns it (in the list) or NULL (nothing left behind).
 */
static void *pm_build(void *pf, gr_file *f, off_t size, size_t len, off_t off)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), L = (len + pg - 1) & ~(pg - 1), cap = 0;
    munmap_fn unmap = pm_real_munmap();
    uint8_t *base;
    pm_map *m;
    off_t cur = off, end = off + (off_t)len < size ? off + (off_t)len : size;

    if (!unmap)
        return NULL;
    base = pm_real_mmap("mmap")(NULL, L, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    m = calloc(1, sizeof(*m));
    if (!m)
        goto fail;
    m->base = (uintptr_t)base;
    m->len = L;
    m->pid = getpid();
    while (cur < end) {
        const void *data;
        gr_ref *ref;
        uint8_t *at = base + (cur - off);
        ssize_t n = gr_read_ref(f, cur, (size_t)(end - cur), &data, &ref);
        size_t full;

        if (n <= 0)
            goto fail;
        if (m->nrefs == cap) {
            size_t nc = cap ? cap * 2 : 16;
            gr_ref **nr = realloc(m->refs, nc * sizeof(*nr));
            if (!nr) {
                gr_ref_release(ref);
                goto fail;
            }
            m->refs = nr;
            cap = nc;
        }
        m->refs[m->nrefs++] = ref;
        full = ((uintptr_t)data & (pg - 1)) == 0 ? (size_t)n & ~(pg - 1) : 0;
        if (full > 0 &&
            mremap((void *)data, 0, full, MREMAP_MAYMOVE | MREMAP_FIXED, at) != (void *)at)
            goto fail;
        if (full < (size_t)n) {
            /* A partial page: the file's last one, or bytes that came as a
             * private copy: copied into anonymous memory, zeros after. */
            size_t rest = (size_t)n - full, span = (rest + pg - 1) & ~(pg - 1);
            if (cur + n != end && (rest & (pg - 1)))
                goto fail;              /* a chunk that ends inside a page */
            if (mprotect(at + full, span, PROT_READ | PROT_WRITE) < 0)
                goto fail;
            memcpy(at + full, (const uint8_t *)data + full, rest);
            if (mprotect(at + full, span, PROT_READ) < 0)
                goto fail;
        }
        cur += n;
    }
    m->pf = pf;
    pthread_mutex_lock(&pm.lock);
    m->next = pm.list;
    pm.list = m;
    __atomic_store_n(&pm.n, pm.n + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pm.lock);
    return base;
fail:
    unmap(base, L);
    if (m) {
        m->pf = NULL;
        for (size_t i = 0; i < m->nrefs; i++)
            gr_ref_release(m->refs[i]);
        free(m->refs);
        free(m);
    }
    return NULL;
}

static void *pm_mmap(const char *name, void *addr, size_t len, int prot, int flags, int fd,
                     off_t off)
{
    mmap_fn real = pm_real_mmap(name);
    int type = flags & MAP_TYPE, other = flags & ~(MAP_TYPE | MAP_POPULATE | MAP_NORESERVE);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    gr_file *f;
    long long size;
    void *pf, *p;
    int e = errno;

    if (!real) {
        errno = ENOSYS;
        return MAP_FAILED;
    }
    if (fd < 0 || addr || prot != PROT_READ || other || len == 0 || off < 0 ||
        ((size_t)off & (pg - 1)) || (type != MAP_SHARED && type != MAP_PRIVATE) ||
        len > pm_max() || pl__busy())
        return real(addr, len, prot, flags, fd, off);
    pf = pl__file_get(fd, &f, &size);
    if (!pf)
        return real(addr, len, prot, flags, fd, off);
    if (off >= size) {
        pl__file_put(pf);
        return real(addr, len, prot, flags, fd, off);
    }
    pl__busy_enter();
    p = pm_build(pf, f, (off_t)size, len, off);
    pl__busy_leave();
    if (!p) {
        pl__file_put(pf);
        errno = e;
        return real(addr, len, prot, flags, fd, off);
    }
    errno = e;
    return p;
}

/* mmap/mmap64: see the top of the file. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return pm_mmap("mmap", addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
    return pm_mmap("mmap64", addr, len, prot, flags, fd, (off_t)off);
}

/* munmap: the real call; a served mapping wholly unmapped gives its
 * leases back. */
int munmap(void *addr, size_t len)
{
    munmap_fn real = pm_real_munmap();
    uintptr_t a = (uintptr_t)addr;
    pm_map **pp, *gone = NULL;
    int r, e;

    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    r = real(addr, len);
    if (r != 0 || __atomic_load_n(&pm.n, __ATOMIC_RELAXED) == 0)
        return r;
    e = errno;
    len = (len + (size_t)sysconf(_SC_PAGESIZE) - 1) & ~((size_t)sysconf(_SC_PAGESIZE) - 1);
    pthread_mutex_lock(&pm.lock);       /* the kernel unmapped whole pages */
    for (pp = &pm.list; *pp;) {
        pm_map *m = *pp;
        if (m->base >= a && m->base + m->len <= a + len) {
            *pp = m->next;
            m->next = gone;
            gone = m;
            __atomic_store_n(&pm.n, pm.n - 1, __ATOMIC_RELAXED);
        } else {
            pp = &m->next;
        }
    }
    pthread_mutex_unlock(&pm.lock);
    pl__busy_enter();
    while (gone) {
        pm_map *m = gone;
        gone = m->next;
        pm_free(m);
    }
    pl__busy_leave();
    errno = e;
    return r;
}
