/*
 * preload_stdio.c - the LD_PRELOAD shim's stdio part: FILE streams of
 * served files read through granaryd (sha256sum, numpy.fromfile, fgets
 * loops ...).
 *
 * Why a stream of its own.  glibc's stdio reads with its internal __read,
 * which no preloaded library can interpose, and its FILE vtables are
 * checked, so a stream cannot be redirected in place.  Instead fopen,
 * fopen64 and fdopen of a served descriptor return a glibc stream made
 * with fopencookie whose read is read(fd) (the shim's, so served through
 * the daemon, falling back to the file), seek is lseek(fd) and close is
 * close(fd).  The kernel's file offset stays the only offset, as with a
 * plain stream: a stream's buffer runs ahead of it exactly as glibc's
 * does, and fseek/ftell/fflush, a dup'ed descriptor or lseek behind the
 * stream's back behave as they do on a plain stream.  Everything else is
 * glibc's own code on a glibc FILE: fread, fgets, getc, getline, fscanf,
 * ungetc, setvbuf, the locking, fclose.  fileno and fileno_unlocked are
 * interposed to give the real descriptor (a cookie stream has none in
 * glibc's eyes), so fstat(fileno(fp)) and posix_fadvise work.  The buffer
 * is PL_STDIO_BUF bytes (glibc gives a cookie stream 8 KiB).
 *
 * Which streams.  fopen/fopen64 in a plain read mode ("r", with any of
 * b, e, m, t, c; not "+", not ",ccs=") open the file with the shim's open;
 * when the daemon serves it the stream is a cookie stream, otherwise
 * glibc's own fdopen of that descriptor (the same stream glibc's fopen
 * would have made).  Other modes are glibc's fopen.  fdopen of a served
 * descriptor in a read mode gives a cookie stream, anything else glibc's.
 * stdin: when descriptor 0 at start-up is a read-only regular file under
 * the roots (`sha256sum < file`), stdin is replaced by a cookie stream on
 * descriptor 0 before main (glibc lets programs assign stdin).  freopen is
 * not interposed (its stream reads the file, unserved).
 *
 * Threads.  ps.lock guards the list of cookie streams, looked up only by
 * fileno (made new in a child after fork); the streams themselves are
 * locked by glibc as usual.
 */
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload_int.h"

#define PL_STDIO_BUF (128u << 10)

/* One cookie stream. */
typedef struct pl_stream {
    FILE *fp;                           /* the glibc stream (NULL until made) */
    int fd;                             /* the descriptor it reads, closed with it */
    char *buf;                          /* its stdio buffer, freed at close */
    struct pl_stream *next;             /* ps.list, under ps.lock */
} pl_stream;

static struct {
    pthread_mutex_t lock;
    pl_stream *list;
    int n;                              /* entries (atomic reads outside the lock) */
} ps = { .lock = PTHREAD_MUTEX_INITIALIZER };

void pl__stdio_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

    ps.lock = fresh;
}

/* ------------------------------------------------------------------ */
/* The cookie functions.                                               */

static ssize_t ps_read(void *cookie, char *buf, size_t len)
{
    pl_stream *s = cookie;
    ssize_t n;

    do
        n = read(s->fd, buf, len);      /* the shim's read: served, or the file */
    while (n < 0 && errno == EINTR);
    return n;
}

static int ps_seek(void *cookie, off64_t *pos, int whence)
{
    pl_stream *s = cookie;
    off64_t r = lseek64(s->fd, *pos, whence);

    if (r < 0)
        return -1;
    *pos = r;
    return 0;
}

static int ps_close(void *cookie)
{
    pl_stream *s = cookie;
    pl_stream **pp;
    int r;

    pthread_mutex_lock(&ps.lock);
    for (pp = &ps.list; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            __atomic_store_n(&ps.n, ps.n - 1, __ATOMIC_RELAXED);
            break;
        }
    pthread_mutex_unlock(&ps.lock);
    r = close(s->fd);                   /* the shim's: releases the daemon's handle */
    free(s->buf);                       /* glibc does not touch it after this */
    free(s);
    return r;
}

/* A cookie stream reading fd ("r"), or NULL with errno (fd untouched). */
static FILE *ps_make(int fd)
{
    cookie_io_functions_t io = { .read = ps_read, .write = NULL, .seek = ps_seek,
                                 .close = ps_close };
    pl_stream *s = calloc(1, sizeof(*s));
    FILE *fp;

    if (!s)
        return NULL;
    s->fd = fd;
    s->buf = malloc(PL_STDIO_BUF);
    fp = fopencookie(s, "r", io);
    if (!fp) {
        free(s->buf);
        free(s);
        return NULL;
    }
    if (s->buf)
        setvbuf(fp, s->buf, _IOFBF, PL_STDIO_BUF);
    s->fp = fp;
    pthread_mutex_lock(&ps.lock);
    s->next = ps.list;
    ps.list = s;
    __atomic_store_n(&ps.n, ps.n + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&ps.lock);
    return fp;
}

/* ------------------------------------------------------------------ */
/* Modes.                                                              */

/* 1 when mode is a plain read mode ("r" and b/e/m/t/c flags); *cloexec
 * tells 'e'. */
static int ps_read_mode(const char *mode, int *cloexec)
{
    *cloexec = 0;
    if (!mode || mode[0] != 'r')
        return 0;
    for (const char *m = mode + 1; *m; m++) {
        if (*m == 'e')
            *cloexec = 1;
        else if (!strchr("bmtc", *m))
            return 0;                   /* '+', 'x', ",ccs=" ...: glibc's */
    }
    return 1;
}

/* The next definition of name (glibc's), looked up once. */
static void *ps_real(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

    if (!p) {
        p = dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    }
    return p;
}

#define REAL_FN(type, name) ({ static void *slot_; (type)ps_real(&slot_, name); })

static FILE *ps_fopen(const char *name, const char *path, const char *mode)
{
    FILE *(*real)(const char *, const char *) = REAL_FN(FILE *(*)(const char *, const char *), name);
    FILE *(*real_fdopen)(int, const char *) = REAL_FN(FILE *(*)(int, const char *), "fdopen");
    FILE *fp;
    int cloexec, fd, e;

    if (pl__busy() || !ps_read_mode(mode, &cloexec) || !real_fdopen) {
        if (!real) {
            errno = ENOSYS;
            return NULL;
        }
        return real(path, mode);
    }
    fd = open(path, O_RDONLY | (cloexec ? O_CLOEXEC : 0));   /* the shim's open */
    if (fd < 0)
        return NULL;
    fp = pl__served(fd) ? ps_make(fd) : NULL;
    if (!fp)
        fp = real_fdopen(fd, mode);     /* glibc's stream, as its fopen makes */
    if (!fp) {
        e = errno;
        close(fd);
        errno = e;
    }
    return fp;
}

/* fopen/fopen64: a cookie stream when the file is served (see the top). */
FILE *fopen(const char *path, const char *mode)
{
    return ps_fopen("fopen", path, mode);
}

FILE *fopen64(const char *path, const char *mode)
{
    return ps_fopen("fopen64", path, mode);
}

/* fdopen: a cookie stream on a served descriptor in a read mode. */
FILE *fdopen(int fd, const char *mode)
{
    FILE *(*real)(int, const char *) = REAL_FN(FILE *(*)(int, const char *), "fdopen");
    int cloexec;

    if (!pl__busy() && ps_read_mode(mode, &cloexec) && pl__served(fd)) {
        FILE *fp = ps_make(fd);
        if (fp)
            return fp;
    }
    if (!real) {
        errno = ENOSYS;
        return NULL;
    }
    return real(fd, mode);
}

/* The descriptor of one of our streams, or -1. */
static int ps_fd(FILE *fp)
{
    int fd = -1;

    if (__atomic_load_n(&ps.n, __ATOMIC_RELAXED) == 0)
        return -1;
    pthread_mutex_lock(&ps.lock);
    for (pl_stream *s = ps.list; s; s = s->next)
        if (s->fp == fp) {
            fd = s->fd;
            break;
        }
    pthread_mutex_unlock(&ps.lock);
    return fd;
}

/* fileno/fileno_unlocked: a cookie stream's descriptor, else glibc's. */
int fileno(FILE *fp)
{
    int (*real)(FILE *) = REAL_FN(int (*)(FILE *), "fileno");
    int fd = ps_fd(fp);

    if (fd >= 0)
        return fd;
    return real ? real(fp) : (errno = ENOSYS, -1);
}

int fileno_unlocked(FILE *fp)
{
    int (*real)(FILE *) = REAL_FN(int (*)(FILE *), "fileno_unlocked");
    int fd = ps_fd(fp);

    if (fd >= 0)
        return fd;
    return real ? real(fp) : (errno = ENOSYS, -1);
}

void pl__stdio_setup(void)
{
    FILE *fp;

    if (!pl__candidate(0))
        return;
    fp = ps_make(0);
    if (fp)
        stdin = fp;                     /* glibc's own stdin stream stays, unused */
}
