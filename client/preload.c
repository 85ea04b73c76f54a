/*
 * preload.c - libgranary_preload.so: unmodified programs read through
 * granaryd, with LD_PRELOAD.
 *
 *     LD_PRELOAD=/usr/lib/libgranary_preload.so \
 *     GRANARY_PRELOAD_ROOTS=/mnt/lustre/datasets  python3 train.py
 *
 * How it works.  open/open64/openat/openat64 (and their _FORTIFY_SOURCE
 * __open*_2 forms) call the real function first, so the descriptor, its
 * number, dup, fork, exec and the permission check are the kernel's as
 * always.  When the open was read-only, of a regular file, under one of the
 * roots, the shim also opens the file on the daemon (gr_open) and records
 * fd -> gr_file, provided the daemon's file is the kernel's (same device,
 * inode and size).  Then read, pread/pread64 (and __read_chk,
 * __pread*_chk), copy_file_range and sendfile on that descriptor are served
 * with gr_pread; read-only mmaps are made of the daemon's cached pages
 * (preload_mmap.c) and stdio streams read through the shim
 * (preload_stdio.c); everything else on it (readv, fstatat, ioctl ...)
 * goes to the real file, which holds the same bytes.
 *
 * Duplicates and inherited descriptors.  dup, dup2, dup3 and fcntl's
 * F_DUPFD/F_DUPFD_CLOEXEC are the real calls; when the old descriptor is
 * served, the new one is served by the same daemon handle (released with
 * the last of them), so `dd if=` (open, dup2 onto 0, close) is served.
 * Descriptors a process starts with (a shell redirect `cmd < file`, a
 * parent's descriptor kept across exec) are listed by a constructor when
 * they are read-only regular files, and offered to the daemon on their
 * first read, as if just opened.
 *
 * Offsets.  The kernel's file offset is the only offset: read() takes it
 * with lseek(fd, 0, SEEK_CUR), reads there through the daemon and moves it
 * with lseek(SEEK_SET).  So lseek is not intercepted, and a dup'ed or
 * inherited descriptor, readv, or a mix of served and unserved calls all
 * see one consistent position.  fstat/fstat64/__fxstat* are the real calls,
 * with st_size set to the size the daemon fixed at open (the bytes reads
 * will return; they differ only if the file changed since).
 *
 * Which files.  GRANARY_PRELOAD_ROOTS (absolute paths separated by ':'),
 * else "[source] roots" of $GRANARY_CONFIG or /etc/granary/granary.conf,
 * else every regular file is offered to the daemon (it refuses those
 * outside its roots, at the cost of one round trip per open).  The path
 * asked for is the kernel's name for the descriptor (/proc/self/fd), so
 * relative paths, openat and ".." work; a root given through a symlink is
 * matched by its resolved path too.  GRANARY_PRELOAD=0 turns the shim off;
 * it is always off inside granaryd.  The socket is libgranary's choice
 * ($GRANARY_SOCKET, the configuration, /run/granary/granary.sock).
 *
 * Fallback.  Whatever cannot be served goes to the real call: no daemon
 * (connection retried at most once a second), a file the daemon refuses, a
 * read that fails on the daemon's side (that descriptor is then read from
 * the file for the rest of its life), a connection that breaks (every
 * descriptor on it falls back; the next open reconnects).  Before each
 * served read the descriptor's device and inode are checked (statx, no
 * sync), so a descriptor closed behind the shim's back (fclose of an
 * fdopen'ed stream, close_range, a raw syscall) and reused is never served
 * from the wrong file.
 *
 * Staged checkpoints.  When the daemon answers an open with a checkpoint
 * not yet published (its reply is STAGED and brings a read-only fd of the
 * staged copy), the descriptor becomes a duplicate of that fd (dup3 over
 * the real one, which was the old file), so every call on it, served or
 * not, sees the new checkpoint's bytes.  A read-only open under a root that
 * the file system answers ENOENT asks the daemon too (one round trip), and
 * returns a descriptor of the staged copy if there is one.
 *
 * Metadata.  stat, lstat and fstatat of a registered dataset's files are
 * answered from the daemon's manifest (preload_meta.c); statx, readdir and
 * the opens themselves still go to the file system.
 *
 * Limits.  readv/preadv, io_uring, freopen'ed streams, writable mmaps and
 * programs that make raw system calls (Go) are not served: they read the
 * real file, which is the fallback.  All
 * served descriptors of a process share one connection, so reads by
 * several threads are serialised by libgranary, and at most 4096 are served
 * at once (the daemon's limit per connection; more fall through).  Paths
 * come from /proc/self/fd: without /proc nothing is served.  A served read
 * waits for the daemon up to $GRANARY_TIMEOUT_MS (then it falls back, and
 * so does every descriptor on that connection).  After fork() the child
 * drops the parent's connection without speaking on it (its open
 * descriptors fall back) and connects again on its next open.
 *
 * Threads and recursion.  pl.lock guards the descriptor table and the
 * connection list and is never held across a call to the daemon; each
 * served file has a pos_lock that makes read()'s lseek-pread-lseek one
 * step.  libgranary, linked into this object, calls close and fstat itself:
 * pl_busy (thread-local) sends every call made while inside libgranary
 * straight to the real function.
 */
#undef _FORTIFY_SOURCE                  /* it would turn open/read into inline wrappers */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "granary.h"
#include "granary_int.h"
#include "clock.h"
#include "ini.h"
#include "path.h"
#include "preload_int.h"

#define PL_MAX_ROOTS 16
#define PL_BOUNCE (1u << 20)            /* bytes per copy_file_range/sendfile call */
#define PL_RETRY_NS 1000000000LL        /* between connection attempts */
#define PL_MAX_FD (1 << 24)             /* larger descriptors are not tracked */
#define PL_MAX_PENDING 64               /* inherited descriptors looked at lazily */

/* glibc still exports these for binaries built before 2.33, but no longer
 * declares them. */
int __fxstat(int ver, int fd, struct stat *st);
int __fxstat64(int ver, int fd, struct stat64 *st);
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dfd, const char *path, int flags);
int __openat64_2(int dfd, const char *path, int flags);
ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t len, off_t off, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t len, off64_t off, size_t buflen);

/* One connection to the daemon. */
typedef struct pl_conn {
    gr_client *c;
    int refs;                           /* pl.conn's + one per pl_file; under pl.lock */
    int broken;                         /* a call failed at the connection level (atomic) */
    struct pl_conn *next;               /* every live connection, for the child after fork */
} pl_conn;

/* A served descriptor.  Freed (and its gr_file closed) by the pl_put that
 * drops refs to 0. */
typedef struct pl_file {
    gr_file *f;
    pl_conn *conn;                      /* holds a reference */
    dev_t dev;                          /* identity of the file, checked before reads */
    ino_t ino;
    off_t size;                         /* fixed by the daemon at open */
    int refs;                           /* the table's + one per call in progress; pl.lock */
    pthread_mutex_t pos_lock;           /* read(): lseek, pread, lseek as one step */
} pl_file;

typedef struct pl_root {
    char lit[PATH_MAX];                 /* as configured: what the daemon is asked */
    char real[PATH_MAX];                /* resolved, as /proc/self/fd names files */
    size_t litlen, reallen;
} pl_root;

static struct {
    pthread_mutex_t lock;
    pl_file **files;                    /* by descriptor number, cap entries */
    int cap;
    int ntracked;                       /* non-NULL entries (atomic reads outside lock) */
    pl_conn *conn;                      /* the one new opens use; NULL: none yet */
    pl_conn *conns;                     /* list of all live connections */
    long long retry_at;                 /* no connection attempt before (CLOCK_MONOTONIC ns) */
    int forked;                         /* set in the child by the atfork handler */
    pthread_once_t once;
    int off;                            /* disabled (GRANARY_PRELOAD=0, inside granaryd) */
    int any;                            /* no roots known: offer every file */
    int nroots;
    pl_root roots[PL_MAX_ROOTS];
    int npending;                       /* entries in pending (atomic reads outside lock) */
    int pending[PL_MAX_PENDING];        /* inherited read-only regular files, not yet offered */
} pl = { .lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT };

/* Non-zero while this thread is inside libgranary or the shim's own
 * bookkeeping: every wrapped call goes straight to the real function. */
static __thread int pl_busy __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------ */
/* The real functions, found lazily with dlsym(RTLD_NEXT).             */

#define PL_SYMS(X) X(open) X(open64) X(openat) X(openat64) X(__open_2) X(__open64_2) \
    X(__openat_2) X(__openat64_2) X(read) X(pread) X(pread64) X(__read_chk)           \
    X(__pread_chk) X(__pread64_chk) X(close) X(dup2) X(dup3) X(fstat) X(fstat64)       \
    X(__fxstat) X(__fxstat64) X(copy_file_range) X(sendfile) X(sendfile64) X(lseek)  \
    X(dup) X(fcntl) X(fcntl64)

#define PL_SLOT(n) static void *pl_real_##n;
PL_SYMS(PL_SLOT)
#undef PL_SLOT

static void *pl_sym(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

    if (!p) {
        p = dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    }
    return p;
}

/* The real n, or NULL if libc lacks it (then the wrapper fails ENOSYS). */
#define REAL(n) ((__typeof__(n) *)pl_sym(&pl_real_##n, #n))
#define CALL_REAL(n, ...) (REAL(n) ? REAL(n)(__VA_ARGS__) : (errno = ENOSYS, -1))

/* ------------------------------------------------------------------ */
/* Set-up: roots, fork handling.                                       */


/* Add one root (absolute; trailing slashes dropped). */
static void pl_add_root(const char *p, size_t len)
{
    pl_root *r;
    char tmp[PATH_MAX];

    while (len > 1 && p[len - 1] == '/')
        len--;
    if (len == 0 || p[0] != '/' || len >= PATH_MAX || pl.nroots == PL_MAX_ROOTS)
        return;
    r = &pl.roots[pl.nroots++];
    memcpy(r->lit, p, len);
    r->lit[len] = '\0';
    r->litlen = len;
    if (realpath(r->lit, tmp) && strlen(tmp) < PATH_MAX)
        strcpy(r->real, tmp);
    else
        strcpy(r->real, r->lit);
    r->reallen = strlen(r->real);
}

static void pl_add_roots(const char *list)
{
    while (*list) {
        size_t n = strcspn(list, ":");
        pl_add_root(list, n);
        list += n;
        if (*list == ':')
            list++;
    }
}

/* "[source] roots = A:B" of a configuration file (the format of
 * config/granary.conf).  0 if found. */
static int pl_roots_from_config(const char *path)
{
    char roots[8192];

    if (gr__ini_get(path, "source", "roots", roots, sizeof(roots), NULL, 0) < 0)
        return -1;
    pl_add_roots(roots);
    return 0;
}

static void pl_init_once(void)
{
    const char *v = getenv("GRANARY_PRELOAD");
    const char *cfg;

    pl_busy++;
    if ((v && strcmp(v, "0") == 0) || strcmp(program_invocation_short_name, "granaryd") == 0) {
        pl.off = 1;                     /* the daemon must never ask itself */
        goto out;
    }
    v = getenv("GRANARY_PRELOAD_ROOTS");
    if (v && *v) {
        pl_add_roots(v);
    } else {
        cfg = getenv("GRANARY_CONFIG");
        pl_roots_from_config(cfg && *cfg ? cfg : "/etc/granary/granary.conf");
    }
    pl.any = pl.nroots == 0;
out:
    pl_busy--;
}

/* The child after fork: the parent's connections are shared with it, so
 * they are closed here without a word sent on them (gr_disconnect only
 * unmaps and closes), and the table is emptied: the child's descriptors
 * fall back to the real calls.  The gr_files are leaked (freeing one means
 * gr_close, which talks). */
static void pl_child_reset_locked(void)
{
    pl_conn *c, *next;

    pl_busy++;
    for (int i = 0; i < pl.cap; i++)
        if (pl.files[i]) {
            pthread_mutex_destroy(&pl.files[i]->pos_lock);
            free(pl.files[i]);
        }
    free(pl.files);
    pl.files = NULL;
    pl.cap = 0;
    __atomic_store_n(&pl.ntracked, 0, __ATOMIC_RELAXED);
    for (c = pl.conns; c; c = next) {
        next = c->next;
        gr_disconnect(c->c);
        free(c);
    }
    pl.conns = NULL;
    pl.conn = NULL;
    pl.retry_at = 0;
    pl.forked = 0;
    pl_busy--;
}

static void pl_atfork_prepare(void)
{
    pthread_mutex_lock(&pl.lock);
}

static void pl_atfork_parent(void)
{
    pthread_mutex_unlock(&pl.lock);
}

static void pl_atfork_child(void)
{
    pl__mmap_fork_child();
    pl__stdio_fork_child();
    pl.forked = 1;
    pthread_mutex_unlock(&pl.lock);
}

/*
 * The descriptors this process was started with (a shell redirect,
 * `cmd 3<file`, a parent's open file across exec): those that are
 * read-only regular files go on pl.pending, and the first read of one
 * offers it to the daemon (pl_adopt), so a process that never reads them
 * never connects.  Nothing else is done here: no daemon, no roots yet.
 */
static void pl_scan_inherited(void)
{
    DIR *d;
    struct dirent *de;
    struct stat st;
    int self, fd, fl;
    char *end;

    pl_busy++;
    d = opendir("/proc/self/fd");
    if (!d)
        goto out;
    self = dirfd(d);
    while ((de = readdir(d)) != NULL && pl.npending < PL_MAX_PENDING) {
        long v = strtol(de->d_name, &end, 10);
        if (*end || end == de->d_name || v < 0 || v >= PL_MAX_FD || (int)v == self)
            continue;
        fd = (int)v;
        fl = REAL(fcntl) ? REAL(fcntl)(fd, F_GETFL) : -1;
        if (fl < 0 || (fl & O_ACCMODE) != O_RDONLY || (fl & O_PATH))
            continue;
        if (CALL_REAL(fstat, fd, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        pl.pending[pl.npending++] = fd;
    }
    closedir(d);
out:
    pl_busy--;
}

__attribute__((constructor)) static void pl_setup(void)
{
#define PL_RESOLVE(n) (void)pl_sym(&pl_real_##n, #n);
    PL_SYMS(PL_RESOLVE)
#undef PL_RESOLVE
    pthread_atfork(pl_atfork_prepare, pl_atfork_parent, pl_atfork_child);
    pl_scan_inherited();
    pl__stdio_setup();
}

/* At exit: the connections' last counters (a process that exits seldom
 * disconnects), unless another thread holds the table. */
__attribute__((destructor)) static void pl_teardown(void)
{
    if (pl.forked || pthread_mutex_trylock(&pl.lock) != 0)
        return;
    pl_busy++;
    for (pl_conn *c = pl.conns; c; c = c->next)
        gr__report_now(c->c);
    pl_busy--;
    pthread_mutex_unlock(&pl.lock);
}

/* ------------------------------------------------------------------ */
/* Connections and the descriptor table.                               */

/* Drop one reference to c; returns c if it must now be disconnected
 * (outside the lock, by pl_conn_free), else NULL. */
static pl_conn *pl_conn_unref_locked(pl_conn *c)
{
    pl_conn **pp;

    if (!c || --c->refs > 0)
        return NULL;
    for (pp = &pl.conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    return c;
}

static void pl_conn_free(pl_conn *c)
{
    if (!c)
        return;
    pl_busy++;
    gr_disconnect(c->c);
    pl_busy--;
    free(c);
}

/* A connection for a new open, with a reference for the caller (dropped
 * with pl_conn_unref_locked), or NULL when the daemon cannot be reached (then
 * no attempt for PL_RETRY_NS). */
static pl_conn *pl_conn_get(void)
{
    pl_conn *c, *dead = NULL, *mine;
    gr_client *gc;

    pthread_mutex_lock(&pl.lock);
    if (pl.forked)
        pl_child_reset_locked();
    if (pl.conn && __atomic_load_n(&pl.conn->broken, __ATOMIC_RELAXED)) {
        dead = pl_conn_unref_locked(pl.conn);
        pl.conn = NULL;
    }
    c = pl.conn;
    if (c)
        c->refs++;
    pthread_mutex_unlock(&pl.lock);
    pl_conn_free(dead);
    if (c || (long long)gr__now_ns() < pl.retry_at)
        return c;

    pl_busy++;
    gc = gr_connect(NULL);
    pl_busy--;
    mine = gc ? calloc(1, sizeof(*mine)) : NULL;
    if (!mine) {
        pl_busy++;
        gr_disconnect(gc);
        pl_busy--;
        pthread_mutex_lock(&pl.lock);
        pl.retry_at = (long long)gr__now_ns() + PL_RETRY_NS;
        pthread_mutex_unlock(&pl.lock);
        return NULL;
    }
    mine->c = gc;
    pthread_mutex_lock(&pl.lock);
    if (pl.conn) {                      /* another thread connected meanwhile */
        c = pl.conn;
        c->refs++;
    } else {
        mine->refs = 2;                 /* pl.conn's and the caller's */
        mine->next = pl.conns;
        pl.conns = mine;
        pl.conn = c = mine;
        mine = NULL;
    }
    pthread_mutex_unlock(&pl.lock);
    if (mine) {
        pl_busy++;
        gr_disconnect(mine->c);
        pl_busy--;
        free(mine);
    }
    return c;
}

static void pl_track(int fd, int flags, const char *given, int dfd, const char *asked);

/* Drop fd from pl.pending; 1 if it was there.  Caller holds pl.lock. */
static int pl_unpend_locked(int fd)
{
    for (int i = 0; i < pl.npending; i++)
        if (pl.pending[i] == fd) {
            pl.pending[i] = pl.pending[pl.npending - 1];
            __atomic_store_n(&pl.npending, pl.npending - 1, __ATOMIC_RELAXED);
            return 1;
        }
    return 0;
}

/* An inherited descriptor's first use: offer it to the daemon once (it
 * is served from now on if pl_track accepts it, else never looked at
 * again).  pl_track checks what fd is now, so a number reused since the
 * scan is judged afresh. */
static void pl_adopt(int fd)
{
    int was, fl, e = errno;

    if (fd < 0 || pl_busy || __atomic_load_n(&pl.npending, __ATOMIC_RELAXED) == 0)
        return;
    pthread_mutex_lock(&pl.lock);
    was = pl_unpend_locked(fd);
    pthread_mutex_unlock(&pl.lock);
    if (!was)
        return;
    pl_busy++;
    fl = REAL(fcntl) ? REAL(fcntl)(fd, F_GETFL) : -1;
    if (fl >= 0)
        pl_track(fd, fl, NULL, AT_FDCWD, NULL);
    pl_busy--;
    errno = e;
}

/* The served file of fd with a reference for the caller (pl_put), or
 * NULL.  Cheap when nothing is served.  An inherited descriptor is
 * offered to the daemon on its first pl_get (pl_adopt). */
static pl_file *pl_peek(int fd);

static pl_file *pl_get(int fd)
{
    pl_adopt(fd);
    return pl_peek(fd);
}

/* pl_get without adopting: for fstat, which must not cost a daemon open. */
static pl_file *pl_peek(int fd)
{
    pl_file *pf = NULL;

    if (fd < 0 || pl_busy || __atomic_load_n(&pl.ntracked, __ATOMIC_RELAXED) == 0)
        return NULL;
    pthread_mutex_lock(&pl.lock);
    if (pl.forked)
        pl_child_reset_locked();
    else if (fd < pl.cap && (pf = pl.files[fd]) != NULL)
        pf->refs++;
    pthread_mutex_unlock(&pl.lock);
    return pf;
}

/* Drop a reference; the last one closes the file on the daemon.  Keeps
 * errno. */
static void pl_put(pl_file *pf)
{
    pl_conn *dead = NULL;
    int last, e = errno;

    if (!pf)
        return;
    pthread_mutex_lock(&pl.lock);
    last = --pf->refs == 0;
    if (last)
        dead = pl_conn_unref_locked(pf->conn);
    pthread_mutex_unlock(&pl.lock);
    if (last) {
        pl_busy++;
        gr_close(pf->f);
        pl_busy--;
        pl_conn_free(dead);
        pthread_mutex_destroy(&pf->pos_lock);
        free(pf);
    }
    errno = e;
}

/* Take fd out of the table; the table's reference goes to the caller, who
 * drops it with pl_put.  only: detach only if the entry is this one. */
static pl_file *pl_detach(int fd, pl_file *only)
{
    pl_file *pf = NULL;

    if (fd < 0 || pl_busy)
        return NULL;
    if (!only && __atomic_load_n(&pl.npending, __ATOMIC_RELAXED) > 0) {
        pthread_mutex_lock(&pl.lock);   /* the number is about to mean another file */
        pl_unpend_locked(fd);
        pthread_mutex_unlock(&pl.lock);
    }
    if (__atomic_load_n(&pl.ntracked, __ATOMIC_RELAXED) == 0)
        return NULL;
    pthread_mutex_lock(&pl.lock);
    if (pl.forked)
        pl_child_reset_locked();
    else if (fd < pl.cap && (pf = pl.files[fd]) != NULL && (!only || pf == only)) {
        pl.files[fd] = NULL;
        __atomic_store_n(&pl.ntracked, pl.ntracked - 1, __ATOMIC_RELAXED);
    } else {
        pf = NULL;
    }
    pthread_mutex_unlock(&pl.lock);
    return pf;
}

/* Stop serving fd (when it is still pf): its reads go to the file. */
static void pl_untrack(int fd, pl_file *pf)
{
    pl_put(pl_detach(fd, pf));
}

/* Put pf in the table at fd (taking over the caller's reference); an entry
 * already there is stale (its descriptor was closed behind the shim) and is
 * released. */
static void pl_insert(int fd, pl_file *pf)
{
    pl_file *old = NULL;

    pthread_mutex_lock(&pl.lock);
    if (fd >= pl.cap) {
        int ncap = pl.cap ? pl.cap : 64;
        pl_file **nf;
        while (ncap <= fd)
            ncap *= 2;
        nf = realloc(pl.files, (size_t)ncap * sizeof(*nf));
        if (!nf) {
            pthread_mutex_unlock(&pl.lock);
            pl_put(pf);
            return;
        }
        memset(nf + pl.cap, 0, (size_t)(ncap - pl.cap) * sizeof(*nf));
        pl.files = nf;
        pl.cap = ncap;
    }
    old = pl.files[fd];
    pl.files[fd] = pf;
    if (!old)
        __atomic_store_n(&pl.ntracked, pl.ntracked + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pl.lock);
    pl_put(old);
}

/* ------------------------------------------------------------------ */
/* Opening.                                                            */

/* The daemon's name for the file at path (the kernel's name of a
 * descriptor), into out.  1 if it lies under a root, else 0. */
static int pl_map_path(const char *path, char *out, size_t outlen)
{
    size_t len = strlen(path);

    if (pl.any) {
        if (len >= outlen)
            return 0;
        memcpy(out, path, len + 1);
        return 1;
    }
    for (int i = 0; i < pl.nroots; i++) {
        const pl_root *r = &pl.roots[i];
        const char *rest;
        if (r->reallen == 1)                             /* root "/" */
            rest = path;
        else if (strncmp(path, r->real, r->reallen) == 0 &&
                 (path[r->reallen] == '/' || path[r->reallen] == '\0'))
            rest = path + r->reallen;
        else if (strncmp(path, r->lit, r->litlen) == 0 &&
                 (path[r->litlen] == '/' || path[r->litlen] == '\0'))
            rest = path + r->litlen;
        else
            continue;
        if (r->reallen == 1) {
            if (len >= outlen)
                return 0;
            memcpy(out, path, len + 1);
        } else {
            if (r->litlen + strlen(rest) >= outlen)
                return 0;
            memcpy(out, r->lit, r->litlen);
            strcpy(out + r->litlen, rest);
        }
        return 1;
    }
    return 0;
}

/* An error that means the connection, not the file, failed. */
static int pl_conn_error(int e)
{
    return e == ECONNRESET || e == EPIPE || e == ETIMEDOUT || e == EPROTO || e == ENOTCONN;
}

/* The absolute path of (dfd, path), lexically (no link resolved), into
 * abs: 0, or -1 (too long, no /proc, a relative dfd unnamed). */
static int pl_abs(int dfd, const char *path, char *abs, size_t len)
{
    char link[64];
    ssize_t n;

    if (path[0] == '/' || dfd == AT_FDCWD)
        return gr__path_abs(path, abs, len) < 0 ? -1 : 0;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", dfd);
    n = readlink(link, abs, len - 1);
    if (n <= 0 || abs[0] != '/' || (size_t)n + 1 + strlen(path) >= len)
        return -1;
    abs[n] = '/';
    strcpy(abs + n + 1, path);
    return 0;
}

/* Whether path's directory is a generation of a checkpoint set
 * ("DIR/BASE.granary-gen-ID/NAME"): a file reached through a set's link. */
static int pl_in_set_gen(const char *path)
{
    const char *slash = strrchr(path, '/'), *p;

    if (!slash || slash == path)
        return 0;
    for (p = slash; p > path && p[-1] != '/'; p--)
        ;
    for (const char *q = p; q + 13 <= slash; q++)
        if (!strncmp(q, ".granary-gen-", 13)) {
            const char *d = q + 13;
            if (d == slash)
                return 0;
            while (d < slash && *d >= '0' && *d <= '9')
                d++;
            if (d == slash)
                return 1;
        }
    return 0;
}

/* After a successful real open of fd with flags: serve it if it is a
 * read-only regular file under a root and the daemon opens the same file.
 * given: the daemon's name for it (a staged checkpoint's copy, whose own
 * name is not under a root), else NULL (the kernel's name, mapped).
 * (dfd, asked): the name the program opened, or asked NULL; asked is sent
 * instead of the kernel's name where that lies in a checkpoint set's
 * generation (reached through the set's link DEST), so that the daemon
 * sees DEST/NAME and can answer with a newer set not yet published.  When
 * the daemon answers with a checkpoint not yet published (its OPEN reply
 * says STAGED and brings the staged copy's fd), fd becomes a descriptor of
 * that copy (dup3 over it, close-on-exec kept): its bytes are the ones the
 * destination will hold once the drain ends. */
static void pl_track(int fd, int flags, const char *given, int dfd, const char *asked)
{
    struct stat st, gst;
    char link[64], path[PATH_MAX], dpath[PATH_MAX], abs[PATH_MAX];
    pl_conn *conn, *dead;
    pl_file *pf;
    gr_file *f;
    ssize_t n;
    int e;

    if (fd < 0 || fd >= PL_MAX_FD || (flags & O_ACCMODE) != O_RDONLY ||
        (flags & (O_PATH | O_DIRECTORY | O_CREAT | O_TRUNC)))
        return;
    pthread_once(&pl.once, pl_init_once);
    if (pl.off)
        return;
    if (CALL_REAL(fstat, fd, &st) < 0 || !S_ISREG(st.st_mode))
        return;
    if (given) {
        if (strlen(given) >= sizeof(dpath))
            return;
        strcpy(dpath, given);
    } else {
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        n = readlink(link, path, sizeof(path) - 1);
        if (n <= 0 || path[0] != '/')
            return;
        path[n] = '\0';
        if (n > 10 && strcmp(path + n - 10, " (deleted)") == 0)
            return;
        if (!pl_map_path(path, dpath, sizeof(dpath)))
            return;
        /* A wrong guess costs nothing: the daemon opens the lexical name
         * and the identity check below refuses a different file. */
        if (asked && *asked && pl_in_set_gen(dpath) && pl_abs(dfd, asked, abs, sizeof(abs)) == 0 &&
            !pl_in_set_gen(abs))
            pl_map_path(abs, dpath, sizeof(dpath));
    }
    conn = pl_conn_get();
    if (!conn)
        return;
    pl_busy++;
    f = gr_open(conn->c, dpath);
    e = errno;
    pl_busy--;
    if (f && gr__file_staged_fd(f) >= 0) {
        int fdfl = CALL_REAL(fcntl, fd, F_GETFD);
        if (fdfl < 0 ||
            CALL_REAL(dup3, gr__file_staged_fd(f), fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0 ||
            CALL_REAL(fstat, fd, &st) < 0) {
            pl_busy++;
            gr_close(f);
            pl_busy--;
            f = NULL;
            e = EIO;
        }
    }
    if (f && (gr_fstat(f, &gst) < 0 || gst.st_ino != st.st_ino || gst.st_dev != st.st_dev ||
              gst.st_size != st.st_size)) {
        pl_busy++;                      /* not the file the kernel opened (a race) */
        gr_close(f);
        pl_busy--;
        f = NULL;
        e = ESTALE;
    }
    pf = f ? calloc(1, sizeof(*pf)) : NULL;
    if (!pf) {
        if (f) {
            pl_busy++;
            gr_close(f);
            pl_busy--;
        }
        if (pl_conn_error(e))
            __atomic_store_n(&conn->broken, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&pl.lock);
        dead = pl_conn_unref_locked(conn);
        pthread_mutex_unlock(&pl.lock);
        pl_conn_free(dead);
        return;
    }
    pf->f = f;
    pf->conn = conn;                    /* the reference from pl_conn_get */
    pf->dev = st.st_dev;
    pf->ino = st.st_ino;
    pf->size = gst.st_size;
    pf->refs = 1;                       /* the table's */
    pthread_mutex_init(&pf->pos_lock, NULL);
    pl_insert(fd, pf);
}

/*
 * A read-only open of (dfd, path) that the file system answered ENOENT:
 * the daemon may hold a checkpoint for it that is not published yet.  A
 * descriptor of its staged copy (served like any other), or -1 (errno
 * untouched).  One round trip to the daemon per such open under a root.
 */
static int pl_open_staged(int dfd, const char *path, int flags)
{
    char abs[PATH_MAX], dpath[PATH_MAX];
    pl_conn *conn, *dead;
    gr_file *f;
    int fd = -1;

    if (!path || !*path || (flags & O_ACCMODE) != O_RDONLY ||
        (flags & (O_PATH | O_DIRECTORY | O_CREAT | O_TRUNC)))
        return -1;
    pthread_once(&pl.once, pl_init_once);
    if (pl.off)
        return -1;
    if (pl_abs(dfd, path, abs, sizeof(abs)) < 0 || !pl_map_path(abs, dpath, sizeof(dpath)))
        return -1;
    conn = pl_conn_get();
    if (!conn)
        return -1;
    f = gr_open(conn->c, dpath);
    if (f && gr__file_staged_fd(f) >= 0)
        fd = CALL_REAL(fcntl, gr__file_staged_fd(f), (flags & O_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD,
                       0);
    if (f)
        gr_close(f);
    pthread_mutex_lock(&pl.lock);
    dead = pl_conn_unref_locked(conn);
    pthread_mutex_unlock(&pl.lock);
    pl_conn_free(dead);
    if (fd >= 0)
        pl_track(fd, flags, dpath, AT_FDCWD, NULL);     /* served, by the name asked for */
    return fd;
}

/* The common tail of the open wrappers: fd is the real call's result,
 * for (dfd, path) (AT_FDCWD for the plain opens). */
static int pl_opened(int fd, int flags, int dfd, const char *path)
{
    int e = errno;

    if (fd >= 0 && !pl_busy) {
        pl_busy++;
        pl_track(fd, flags, NULL, dfd, path);
        pl_busy--;
        errno = e;
    } else if (fd < 0 && e == ENOENT && !pl_busy) {
        int sfd;
        pl_busy++;
        sfd = pl_open_staged(dfd, path, flags);
        pl_busy--;
        errno = e;
        if (sfd >= 0)
            return sfd;
    }
    return fd;
}

static mode_t pl_mode(int flags, va_list ap)
{
    return (flags & (O_CREAT | __O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

/* open/open64/openat/openat64: the real call, then fd is served when it
 * qualifies (see the top of the file).  errno is the real call's. */
int open(const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    va_start(ap, flags);
    mode = pl_mode(flags, ap);
    va_end(ap);
    return pl_opened(CALL_REAL(open, path, flags, mode), flags, AT_FDCWD, path);
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    va_start(ap, flags);
    mode = pl_mode(flags, ap);
    va_end(ap);
    return pl_opened(CALL_REAL(open64, path, flags, mode), flags, AT_FDCWD, path);
}

int openat(int dfd, const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    va_start(ap, flags);
    mode = pl_mode(flags, ap);
    va_end(ap);
    return pl_opened(CALL_REAL(openat, dfd, path, flags, mode), flags, dfd, path);
}

int openat64(int dfd, const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    va_start(ap, flags);
    mode = pl_mode(flags, ap);
    va_end(ap);
    return pl_opened(CALL_REAL(openat64, dfd, path, flags, mode), flags, dfd, path);
}

/* The _FORTIFY_SOURCE entry points (flags not known at compile time). */
int __open_2(const char *path, int flags)
{
    return pl_opened(CALL_REAL(__open_2, path, flags), flags, AT_FDCWD, path);
}

int __open64_2(const char *path, int flags)
{
    return pl_opened(CALL_REAL(__open64_2, path, flags), flags, AT_FDCWD, path);
}

int __openat_2(int dfd, const char *path, int flags)
{
    return pl_opened(CALL_REAL(__openat_2, dfd, path, flags), flags, dfd, path);
}

int __openat64_2(int dfd, const char *path, int flags)
{
    return pl_opened(CALL_REAL(__openat64_2, dfd, path, flags), flags, dfd, path);
}

/* ------------------------------------------------------------------ */
/* Reading.                                                            */

#define PL_FALLBACK (-2)                /* serve with the real call */

/* Is fd still the file pf was opened for?  A cheap statx that does not
 * ask a network filesystem's server. */
static int pl_same_file(int fd, const pl_file *pf)
{
    struct statx sx;

    if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO, &sx) < 0)
        return 0;
    return makedev(sx.stx_dev_major, sx.stx_dev_minor) == pf->dev && sx.stx_ino == pf->ino;
}

/*
 * Read up to len bytes of fd through the daemon at off, or at (and
 * advancing) the file offset when off < 0.  Returns bytes read, or
 * PL_FALLBACK with errno unchanged when the real call must do it: the
 * descriptor is not the file any more, or the daemon failed (then fd is
 * no longer served; a connection failure also marks the connection).
 */
static ssize_t pl_pread(int fd, pl_file *pf, void *buf, size_t len, off_t off)
{
    int e = errno, gerr;
    off_t cur = off;
    ssize_t n;

    if (__atomic_load_n(&pf->conn->broken, __ATOMIC_RELAXED) || !pl_same_file(fd, pf)) {
        pl_untrack(fd, pf);
        errno = e;
        return PL_FALLBACK;
    }
    if (off < 0) {
        pthread_mutex_lock(&pf->pos_lock);
        cur = CALL_REAL(lseek, fd, 0, SEEK_CUR);
        if (cur < 0) {
            pthread_mutex_unlock(&pf->pos_lock);
            errno = e;
            return PL_FALLBACK;
        }
    }
    pl_busy++;
    n = gr_pread(pf->f, buf, len, cur);
    gerr = errno;
    pl_busy--;
    if (n >= 0 && off < 0)
        CALL_REAL(lseek, fd, cur + n, SEEK_SET);
    if (off < 0)
        pthread_mutex_unlock(&pf->pos_lock);
    if (n < 0) {
        if (pl_conn_error(gerr))
            __atomic_store_n(&pf->conn->broken, 1, __ATOMIC_RELAXED);
        pl_untrack(fd, pf);
        errno = e;
        return PL_FALLBACK;
    }
    errno = e;
    return n;
}

/* read/pread/pread64: served through the daemon when fd is served (the
 * real call otherwise, or when serving fails); read advances the file
 * offset exactly as the real call would. */
ssize_t read(int fd, void *buf, size_t len)
{
    pl_file *pf = pl_get(fd);
    ssize_t n;

    if (!pf)
        return CALL_REAL(read, fd, buf, len);
    n = pl_pread(fd, pf, buf, len, -1);
    pl_put(pf);
    return n == PL_FALLBACK ? CALL_REAL(read, fd, buf, len) : n;
}

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
    pl_file *pf = off >= 0 ? pl_get(fd) : NULL;
    ssize_t n;

    if (!pf)
        return CALL_REAL(pread, fd, buf, len, off);
    n = pl_pread(fd, pf, buf, len, off);
    pl_put(pf);
    return n == PL_FALLBACK ? CALL_REAL(pread, fd, buf, len, off) : n;
}

ssize_t pread64(int fd, void *buf, size_t len, off64_t off)
{
    pl_file *pf = off >= 0 ? pl_get(fd) : NULL;
    ssize_t n;

    if (!pf)
        return CALL_REAL(pread64, fd, buf, len, off);
    n = pl_pread(fd, pf, buf, len, (off_t)off);
    pl_put(pf);
    return n == PL_FALLBACK ? CALL_REAL(pread64, fd, buf, len, off) : n;
}

/* _FORTIFY_SOURCE forms: the real one aborts on an overflow. */
ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
    if (len > buflen)
        return CALL_REAL(__read_chk, fd, buf, len, buflen);
    return read(fd, buf, len);
}

ssize_t __pread_chk(int fd, void *buf, size_t len, off_t off, size_t buflen)
{
    if (len > buflen)
        return CALL_REAL(__pread_chk, fd, buf, len, off, buflen);
    return pread(fd, buf, len, off);
}

ssize_t __pread64_chk(int fd, void *buf, size_t len, off64_t off, size_t buflen)
{
    if (len > buflen)
        return CALL_REAL(__pread64_chk, fd, buf, len, off, buflen);
    return pread64(fd, buf, len, off);
}

/*
 * copy_file_range/sendfile from a served descriptor: read through the
 * daemon into a bounce buffer, write it out (cat uses copy_file_range).
 * in_off NULL means the file offset (advanced by what was written).
 * Returns bytes written, -1 with errno (nothing written), or PL_FALLBACK.
 */
static ssize_t pl_copy(int in, pl_file *pf, off_t *in_off, int out, off_t *out_off, size_t len)
{
    size_t done = 0;
    off_t at;
    ssize_t n, w;
    char *buf;
    int e = errno, locked = 0, werr = 0;

    if (len == 0)
        return 0;
    if (len > PL_BOUNCE)
        len = PL_BOUNCE;
    if (in_off && *in_off < 0)
        return PL_FALLBACK;             /* the real call says EINVAL */
    buf = malloc(len);
    if (!buf)
        return PL_FALLBACK;
    if (!in_off) {
        /* Hold the position for the whole copy, as the kernel would. */
        pthread_mutex_lock(&pf->pos_lock);
        locked = 1;
        at = CALL_REAL(lseek, in, 0, SEEK_CUR);
        if (at < 0) {
            n = PL_FALLBACK;
            goto out;
        }
    } else {
        at = *in_off;
    }
    n = pl_pread(in, pf, buf, len, at);
    if (n <= 0)
        goto out;                       /* 0: end of file; or PL_FALLBACK */
    while (done < (size_t)n) {
        w = out_off ? pwrite(out, buf + done, (size_t)n - done, *out_off + (off_t)done)
                    : write(out, buf + done, (size_t)n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            werr = w < 0 ? errno : EIO;
            break;
        }
        done += (size_t)w;
    }
    if (done == 0) {
        n = -1;
        e = werr;
        goto out;
    }
    n = (ssize_t)done;
    if (in_off)
        *in_off += n;
    else
        CALL_REAL(lseek, in, at + n, SEEK_SET);
    if (out_off)
        *out_off += n;
out:
    if (locked)
        pthread_mutex_unlock(&pf->pos_lock);
    free(buf);
    errno = e;
    return n;
}

/* copy_file_range/sendfile/sendfile64 from a served descriptor: through
 * the daemon, at most PL_BOUNCE bytes a call (callers loop); the real call
 * otherwise. */
ssize_t copy_file_range(int in, off64_t *in_off, int out, off64_t *out_off, size_t len,
                        unsigned int flags)
{
    pl_file *pf = flags == 0 ? pl_get(in) : NULL;
    ssize_t n;

    if (!pf)
        return CALL_REAL(copy_file_range, in, in_off, out, out_off, len, flags);
    n = pl_copy(in, pf, (off_t *)in_off, out, (off_t *)out_off, len);
    pl_put(pf);
    return n == PL_FALLBACK ? CALL_REAL(copy_file_range, in, in_off, out, out_off, len, flags) : n;
}

ssize_t sendfile(int out, int in, off_t *off, size_t len)
{
    pl_file *pf = pl_get(in);
    ssize_t n;

    if (!pf)
        return CALL_REAL(sendfile, out, in, off, len);
    n = pl_copy(in, pf, off, out, NULL, len);
    pl_put(pf);
    return n == PL_FALLBACK ? CALL_REAL(sendfile, out, in, off, len) : n;
}

ssize_t sendfile64(int out, int in, off64_t *off, size_t len)
{
    pl_file *pf = pl_get(in);
    ssize_t n;

    if (!pf)
        return CALL_REAL(sendfile64, out, in, off, len);
    n = pl_copy(in, pf, (off_t *)off, out, NULL, len);
    pl_put(pf);
    return n == PL_FALLBACK ? CALL_REAL(sendfile64, out, in, off, len) : n;
}

/* ------------------------------------------------------------------ */
/* Closing, duplicating onto, stat.                                    */

/* newfd was just made a duplicate of oldfd (dup, dup2, dup3, F_DUPFD):
 * when oldfd is served, newfd is served by the same pl_file (one daemon
 * handle, one pos_lock, as the two share one file offset); released when
 * the last of them is closed. */
static void pl_dup_track(int oldfd, int newfd)
{
    pl_file *pf;
    int e = errno;

    if (newfd < 0 || newfd == oldfd || newfd >= PL_MAX_FD || pl_busy)
        return;
    pf = pl_get(oldfd);                 /* an inherited oldfd is adopted first */
    if (pf)
        pl_insert(newfd, pf);           /* takes over the reference */
    errno = e;
}

/*
 * The program is about to make descriptor number fd its own (close, or
 * dup2/dup3 onto it).  If that is a connection's socket (libgranary keeps
 * it at 512 or above, so this is rare: `exec 600<file`, a loop closing
 * every descriptor), the connection forgets it without closing it, so
 * nothing of the shim's closes the program's descriptor later (a child
 * after fork drops its connections by closing them), and is broken: its
 * files fall back to the real calls.  Before anything that may drop
 * connections (pl_detach in a child).
 */
static void pl_disown(int fd)
{
    if (fd < 0 || pl_busy || !__atomic_load_n(&pl.conns, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&pl.lock);
    for (pl_conn *c = pl.conns; c; c = c->next)
        if (gr__client_fd(c->c) == fd) {
            gr__client_disown_fd(c->c, fd, !pl.forked);
            __atomic_store_n(&c->broken, 1, __ATOMIC_RELAXED);
        }
    pthread_mutex_unlock(&pl.lock);
}

/* close: the real call; a served descriptor that is closed stops being
 * served and the last one of a file releases its daemon handle. */
int close(int fd)
{
    pl_file *pf;

    pl_disown(fd);
    pf = pl_detach(fd, NULL);
    int r = CALL_REAL(close, fd);

    pl_put(pf);
    return r;
}

/* dup/dup2/dup3: the real call; the new descriptor is served when the old
 * one is (and what newfd was before is no longer served). */
int dup(int oldfd)
{
    int r = CALL_REAL(dup, oldfd);

    if (r >= 0) {
        pl_put(pl_detach(r, NULL));     /* a stale entry for a number closed behind us */
        pl_dup_track(oldfd, r);
    }
    return r;
}

int dup2(int oldfd, int newfd)
{
    int r;

    if (oldfd != newfd)
        pl_disown(newfd);
    r = CALL_REAL(dup2, oldfd, newfd);

    if (r >= 0 && oldfd != newfd) {
        pl_put(pl_detach(newfd, NULL)); /* newfd was closed by the call */
        pl_dup_track(oldfd, newfd);
    }
    return r;
}

int dup3(int oldfd, int newfd, int flags)
{
    int r;

    if (oldfd != newfd)
        pl_disown(newfd);
    r = CALL_REAL(dup3, oldfd, newfd, flags);

    if (r >= 0) {
        pl_put(pl_detach(newfd, NULL));
        pl_dup_track(oldfd, newfd);
    }
    return r;
}

/* fcntl/fcntl64: the real call (the argument passed on as glibc itself
 * does, one word); F_DUPFD and F_DUPFD_CLOEXEC duplicate as dup does. */
static int pl_fcntl(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
    int r;

    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    r = real(fd, cmd, arg);
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) {
        pl_put(pl_detach(r, NULL));
        pl_dup_track(fd, r);
    }
    return r;
}

int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    void *arg;

    va_start(ap, cmd);
    arg = va_arg(ap, void *);
    va_end(ap);
    return pl_fcntl(REAL(fcntl), fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    void *arg;

    va_start(ap, cmd);
    arg = va_arg(ap, void *);
    va_end(ap);
    return pl_fcntl(REAL(fcntl64), fd, cmd, arg);
}

/* A served descriptor's size is the one the daemon fixed at open. */
static void pl_fix_size(int fd, dev_t dev, ino_t ino, off_t *size)
{
    pl_file *pf = pl_peek(fd);

    if (pf && pf->dev == dev && pf->ino == ino)
        *size = pf->size;
    pl_put(pf);
}

/* fstat/fstat64/__fxstat/__fxstat64: the real call; st_size of a served
 * descriptor is the size the daemon fixed at open. */
int fstat(int fd, struct stat *st)
{
    int r = CALL_REAL(fstat, fd, st);

    if (r == 0)
        pl_fix_size(fd, st->st_dev, st->st_ino, &st->st_size);
    return r;
}

int fstat64(int fd, struct stat64 *st)
{
    int r = CALL_REAL(fstat64, fd, st);

    if (r == 0)
        pl_fix_size(fd, st->st_dev, st->st_ino, &st->st_size);
    return r;
}

int __fxstat(int ver, int fd, struct stat *st)
{
    int r = CALL_REAL(__fxstat, ver, fd, st);

    if (r == 0)
        pl_fix_size(fd, st->st_dev, st->st_ino, &st->st_size);
    return r;
}

int __fxstat64(int ver, int fd, struct stat64 *st)
{
    int r = CALL_REAL(__fxstat64, ver, fd, st);

    if (r == 0)
        pl_fix_size(fd, st->st_dev, st->st_ino, &st->st_size);
    return r;
}

/* ------------------------------------------------------------------ */
/* For preload_stdio.c (contracts in preload_int.h).                   */

int pl__busy(void)
{
    return pl_busy;
}

int pl__served(int fd)
{
    pl_file *pf = pl_get(fd);

    pl_put(pf);
    return pf != NULL;
}

int pl__candidate(int fd)
{
    struct stat st;
    char link[64], path[PATH_MAX], dpath[PATH_MAX];
    ssize_t n;
    int fl, ok = 0, e = errno;

    if (fd < 0 || pl_busy)
        return 0;
    pl_busy++;
    pthread_once(&pl.once, pl_init_once);
    fl = REAL(fcntl) ? REAL(fcntl)(fd, F_GETFL) : -1;
    if (pl.off || fl < 0 || (fl & O_ACCMODE) != O_RDONLY || (fl & O_PATH) ||
        CALL_REAL(fstat, fd, &st) < 0 || !S_ISREG(st.st_mode))
        goto out;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0 || path[0] != '/')
        goto out;
    path[n] = '\0';
    ok = pl_map_path(path, dpath, sizeof(dpath));
out:
    pl_busy--;
    errno = e;
    return ok;
}

void *pl__file_get(int fd, gr_file **f, long long *size)
{
    pl_file *pf = pl_get(fd);

    if (pf) {
        *f = pf->f;
        *size = (long long)pf->size;
    }
    return pf;
}

void pl__file_put(void *pf)
{
    pl_put(pf);
}

void pl__busy_enter(void)
{
    pl_busy++;
}

int pl__meta_path(const char *path, char *out, size_t outlen)
{
    int ok;

    pl_busy++;
    pthread_once(&pl.once, pl_init_once);
    ok = !pl.off && !pl.any && pl_map_path(path, out, outlen);
    pl_busy--;
    return ok;
}

void *pl__conn(struct gr_client **c)
{
    pl_conn *pc = pl_conn_get();

    *c = pc ? pc->c : NULL;
    return pc;
}

void pl__conn_put(void *ref, int broken)
{
    pl_conn *pc = ref, *dead;

    if (!pc)
        return;
    if (broken)
        __atomic_store_n(&pc->broken, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&pl.lock);
    dead = pl_conn_unref_locked(pc);
    pthread_mutex_unlock(&pl.lock);
    pl_conn_free(dead);
}

void pl__busy_leave(void)
{
    pl_busy--;
}
