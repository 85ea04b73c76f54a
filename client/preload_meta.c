/*
 * preload_meta.c - the shim's stat family answered from the daemon's
 * manifests of registered datasets (issue 15): stat, lstat, fstatat (at
 * AT_FDCWD or with an absolute path) and their 64-bit and __xstat forms,
 * for paths in a registered, ready dataset under the shim's roots.
 *
 * Which paths.  Only those below a registered dataset's top, as the
 * daemon's dataset list says (asked at most once per PLM_LIST_S seconds,
 * by anyone: DATASET_LIST needs no privilege), so a stat of any other path
 * costs nothing more than a prefix compare; the shim's roots must be known
 * (GRANARY_PRELOAD_ROOTS or the configuration), as for opens.
 *
 * What comes back.  The daemon's answer from the manifest (or libgranary's
 * cache of its answers), as fresh as the dataset's stamp check: the
 * attributes of a file or directory (stat and lstat are the same for
 * those), or ENOENT when the manifest says the path is not there.
 * Everything else goes to the real call: a symbolic link or a path through
 * one (the daemon says ENODATA: the kernel resolves links), a daemon that
 * does not judge for this process (ENOKEY: access_check = fd and not root;
 * then the shim stops asking for the rest of the process), EACCES (the
 * kernel has the last word on a refusal), no daemon, any error.  The
 * attributes a manifest gives are the daemon's 64-byte record: no atime
 * or ctime of their own (both are the mtime), st_blocks from the size,
 * st_rdev 0.
 *
 * Not covered: statx (coreutils' stat and ls use it), access/faccessat,
 * opendir/readdir, and opens: those still ask the file system.
 *
 * Threads: any; the dataset list is cached under its own lock, never held
 * across a call to the daemon, and reset in a child after fork.
 */
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "granary.h"
#include "granary_int.h"
#include "preload_int.h"

#define PLM_LIST_S   5                  /* seconds the dataset list is trusted */
#define PLM_MAX_TOPS 64

int __xstat(int ver, const char *path, struct stat *st);
int __lxstat(int ver, const char *path, struct stat *st);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
int __xstat64(int ver, const char *path, struct stat64 *st);
int __lxstat64(int ver, const char *path, struct stat64 *st);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags);

static struct {
    pthread_mutex_t lock;
    double listed;                      /* gr__now_s() of the last list, 0: never */
    int off;                            /* the daemon does not judge for us (ENOKEY) */
    int ntops;
    char *tops[PLM_MAX_TOPS];           /* ready datasets' tops (the daemon's names) */
} plm = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* After fork the child has one thread: a lock some other thread of the
 * parent held is reset, never waited for. */
static void plm_atfork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

    plm.lock = fresh;
}

static pthread_once_t plm_once = PTHREAD_ONCE_INIT;

static void plm_init(void)
{
    pthread_atfork(NULL, NULL, plm_atfork_child);
}

/* Refresh the dataset list when it is old (c connected).  The round trip
 * is made without the lock held; the new list replaces the old whole. */
static void plm_list(gr_client *c, double now)
{
    char *tops[PLM_MAX_TOPS], *old[PLM_MAX_TOPS];
    gr_field *f = NULL;
    size_t n = 0;
    const char *path = NULL;
    int nt = 0, nold;

    pthread_mutex_lock(&plm.lock);
    if (plm.listed && now - plm.listed < PLM_LIST_S) {
        pthread_mutex_unlock(&plm.lock);
        return;
    }
    plm.listed = now;                   /* one thread lists; the others use the old list */
    pthread_mutex_unlock(&plm.lock);
    if (gr_admin(c, GR_ADMIN_DATASET_LIST, NULL, 0, &f, &n) < 0)
        n = 0;
    /* Records run "id" first per dataset; a dataset counts once ready. */
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(f[i].name, "id"))
            path = NULL;
        else if (!strcmp(f[i].name, "path") && f[i].is_text)
            path = f[i].text;
        else if (!strcmp(f[i].name, "state") && f[i].is_text && !strcmp(f[i].text, "ready") &&
                 path && nt < PLM_MAX_TOPS && (tops[nt] = strdup(path)))
            nt++;
    }
    free(f);
    pthread_mutex_lock(&plm.lock);
    nold = plm.ntops;
    memcpy(old, plm.tops, sizeof(old[0]) * (size_t)nold);
    memcpy(plm.tops, tops, sizeof(tops[0]) * (size_t)nt);
    plm.ntops = nt;
    pthread_mutex_unlock(&plm.lock);
    for (int i = 0; i < nold; i++)
        free(old[i]);
}

/* Whether daemon path d lies in a listed dataset (lock held). */
static int plm_in_dataset_locked(const char *d)
{
    for (int i = 0; i < plm.ntops; i++) {
        size_t l = strlen(plm.tops[i]);
        if (strncmp(d, plm.tops[i], l) == 0 && (d[l] == '/' || d[l] == '\0'))
            return 1;
    }
    return 0;
}

/* 1 with the answer in *st (rc 0) or *err (ENOENT) when the daemon's
 * manifest answers for path (relative: to the working directory), else 0
 * (make the real call). */
static int plm_stat(const char *path, struct stat *st, int *err)
{
    char abs[PATH_MAX], d[PATH_MAX];
    gr_client *c;
    void *ref;
    int rc, mine = 0, e = errno;

    if (!path || !*path || pl__busy() || __atomic_load_n(&plm.off, __ATOMIC_RELAXED))
        return 0;
    if (path[0] == '/') {
        if (strlen(path) >= sizeof(abs))
            return 0;
        strcpy(abs, path);
    } else {
        size_t n;
        if (!getcwd(abs, sizeof(abs)))
            return errno = e, 0;
        n = strlen(abs);
        if (n + 1 + strlen(path) >= sizeof(abs))
            return 0;
        abs[n] = '/';
        strcpy(abs + n + 1, path);
    }
    if (strstr(abs, "/./") || strstr(abs, "/../") || !pl__meta_path(abs, d, sizeof(d)))
        return errno = e, 0;            /* "." and ".." are the kernel's to resolve */
    pl__busy_enter();
    ref = pl__conn(&c);
    if (c) {
        pthread_once(&plm_once, plm_init);
        plm_list(c, gr__now_s());
        pthread_mutex_lock(&plm.lock);
        mine = plm_in_dataset_locked(d);
        pthread_mutex_unlock(&plm.lock);
    }
    rc = mine ? gr__stat_manifest(c, d, st) : -ENODATA;
    pl__conn_put(ref, rc == -ECONNRESET || rc == -EPIPE || rc == -ETIMEDOUT);
    pl__busy_leave();
    if (rc == -ENOKEY)
        __atomic_store_n(&plm.off, 1, __ATOMIC_RELAXED);
    errno = e;
    if (rc == 0 || rc == -ENOENT) {
        *err = -rc;
        return 1;
    }
    return 0;
}

#define PLM_REAL(name, type) ((type)dlsym(RTLD_NEXT, name))

/* fstatat's path names what plm_stat can look up: at the working
 * directory, or absolute (a NULL path goes to the real call). */
static int plm_at(int dirfd, const char *path)
{
    return path && (dirfd == AT_FDCWD || path[0] == '/');
}

static int plm_answer(int err)
{
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

int stat(const char *path, struct stat *st)
{
    static int (*real)(const char *, struct stat *);
    int err;

    if (plm_stat(path, st, &err))
        return plm_answer(err);
    if (!real)
        real = PLM_REAL("stat", int (*)(const char *, struct stat *));
    return real ? real(path, st) : (errno = ENOSYS, -1);
}

int lstat(const char *path, struct stat *st)
{
    static int (*real)(const char *, struct stat *);
    int err;

    if (plm_stat(path, st, &err))
        return plm_answer(err);
    if (!real)
        real = PLM_REAL("lstat", int (*)(const char *, struct stat *));
    return real ? real(path, st) : (errno = ENOSYS, -1);
}

int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
    static int (*real)(int, const char *, struct stat *, int);
    int err;

    if (plm_at(dirfd, path) && !(flags & ~AT_SYMLINK_NOFOLLOW) &&
        plm_stat(path, st, &err))
        return plm_answer(err);
    if (!real)
        real = PLM_REAL("fstatat", int (*)(int, const char *, struct stat *, int));
    return real ? real(dirfd, path, st, flags) : (errno = ENOSYS, -1);
}

/* On 64-bit glibc struct stat64 is struct stat. */
_Static_assert(sizeof(struct stat64) == sizeof(struct stat), "stat64 differs from stat");

int stat64(const char *path, struct stat64 *st)
{
    return stat(path, (struct stat *)st);
}

int lstat64(const char *path, struct stat64 *st)
{
    return lstat(path, (struct stat *)st);
}

int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
    return fstatat(dirfd, path, (struct stat *)st, flags);
}

/* The forms programs built against glibc before 2.33 call. */
int __xstat(int ver, const char *path, struct stat *st)
{
    static int (*real)(int, const char *, struct stat *);
    int err;

    if (plm_stat(path, st, &err))
        return plm_answer(err);
    if (!real)
        real = PLM_REAL("__xstat", int (*)(int, const char *, struct stat *));
    return real ? real(ver, path, st) : stat(path, st);
}

int __lxstat(int ver, const char *path, struct stat *st)
{
    static int (*real)(int, const char *, struct stat *);
    int err;

    if (plm_stat(path, st, &err))
        return plm_answer(err);
    if (!real)
        real = PLM_REAL("__lxstat", int (*)(int, const char *, struct stat *));
    return real ? real(ver, path, st) : lstat(path, st);
}

int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
    static int (*real)(int, int, const char *, struct stat *, int);
    int err;

    if (plm_at(dirfd, path) && !(flags & ~AT_SYMLINK_NOFOLLOW) &&
        plm_stat(path, st, &err))
        return plm_answer(err);
    if (!real)
        real = PLM_REAL("__fxstatat", int (*)(int, int, const char *, struct stat *, int));
    return real ? real(ver, dirfd, path, st, flags) : fstatat(dirfd, path, st, flags);
}

int __xstat64(int ver, const char *path, struct stat64 *st)
{
    return __xstat(ver, path, (struct stat *)st);
}

int __lxstat64(int ver, const char *path, struct stat64 *st)
{
    return __lxstat(ver, path, (struct stat *)st);
}

int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags)
{
    return __fxstatat(ver, dirfd, path, (struct stat *)st, flags);
}
