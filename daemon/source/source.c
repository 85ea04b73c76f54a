/*
 * source.c - path checks, file identity, the attribute cache and chunk
 * reads from the distributed filesystem (see source.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "backend.h"
#include "clock.h"
#include "closer.h"
#include "fault.h"
#include "log.h"
#include "judge.h"
#include "source.h"

#define LARGE_BLKSIZE  (64 * 1024)      /* st_blksize from here up is a stripe hint */

/*
 * Lustre's stripe query, declared here so that no Lustre headers are needed
 * to build: LL_IOC_LOV_GETSTRIPE fills a lov_user_md whose first fields are
 * stable across versions (lustre_user.h).
 */
#define LL_SUPER_MAGIC        0x0BD00BD0
#define LL_IOC_LOV_GETSTRIPE  _IOW('f', 155, long)
struct gr_lov_user_md {
    uint32_t lmm_magic;
    uint32_t lmm_pattern;
    uint64_t lmm_oi[2];
    uint32_t lmm_stripe_size;
    uint16_t lmm_stripe_count;
    uint16_t lmm_stripe_offset;
    uint8_t room_for_objects[4096];     /* the kernel appends per-stripe objects */
};

#define CLOSER_MAX 1024                /* descriptors waiting to be closed, at most */
#define FS_SEEN_MAX 64                  /* distinct devices remembered */
#define ROOT_RECHECK_S 1.0              /* a root's fd is checked against its path this often */

/* A root's directory, held open so that an open beneath it is one
 * openat2 (not an open of the root, then the openat2, then two closes).
 * Checked against the root's path once a second, so that a root that is
 * remounted is followed within that; an fd replaced while I/O threads
 * still use it is closed by the last of them. */
typedef struct rootfd {
    int fd;                     /* -1: not open */
    dev_t dev;
    ino_t ino;
    uint64_t mnt_id;            /* the mount it is on (statx), 0 unknown */
    double checked;             /* gr__now_s() of the last check */
    unsigned users;             /* threads between root_get and root_put */
    int old_fd;                 /* a replaced fd still in use, or -1 */
    unsigned old_users;
} rootfd;

struct source {
    char roots[CONFIG_MAX_ROOTS][PATH_MAX];
    size_t rootlen[CONFIG_MAX_ROOTS];
    int nroots;
    uint64_t chunk_size;
    double attr_ttl;
    int have_openat2;                   /* cleared when the kernel lacks it */
    /* Which devices are Lustre, learnt once per device (statfs is a
     * round trip to the servers on a network filesystem): I/O threads. */
    pthread_mutex_t fs_lock;
    struct { dev_t dev; int lustre; } fs_seen[FS_SEEN_MAX];
    int nfs_seen;
    /* Attribute cache: path -> current srcfile (a table that grows in
     * steps, never all at once on the loop), and an age list, oldest
     * first, so that past attr_cache_max entries the oldest go. */
    gr__htab attrs;
    gr__list age;
    size_t attr_max;
    rootfd rfd[CONFIG_MAX_ROOTS];       /* under fs_lock */
    /* Open source fds kept from OPEN to the chunk reads (loop thread):
     * srcfiles holding one, least recently used first. */
    gr__list fd_lru;
    size_t nfds, fd_max;
    size_t nprivate;                    /* of nfds, clients' kept proofs (source_proof_file) */
    closer *cl;                         /* closes off the loop (closer.h) */
};

int source_new(const gr_config *cfg, source **out)
{
    source *s = calloc(1, sizeof(*s));
    struct rlimit rl;

    if (!s)
        return -ENOMEM;
    for (int i = 0; i < cfg->nroots; i++) {
        snprintf(s->roots[i], PATH_MAX, "%s", cfg->roots[i]);
        s->rootlen[i] = strlen(s->roots[i]);
    }
    s->nroots = cfg->nroots;
    s->chunk_size = cfg->chunk_size;
    s->attr_ttl = cfg->attr_ttl;
    s->have_openat2 = 1;
    s->attr_max = cfg->attr_cache_max;
    s->fd_max = (size_t)cfg->fd_cache;
    /* The rest of the fd limit is the clients', the arena's and RocksDB's. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        s->fd_max > rl.rlim_cur / 4) {
        s->fd_max = (size_t)(rl.rlim_cur / 4);
        log_info("[source] fd_cache %d is more than a quarter of RLIMIT_NOFILE (%llu): %zu",
                 cfg->fd_cache, (unsigned long long)rl.rlim_cur, s->fd_max);
    }
    gr__list_init(&s->age);
    gr__list_init(&s->fd_lru);
    for (int i = 0; i < CONFIG_MAX_ROOTS; i++)
        s->rfd[i].fd = s->rfd[i].old_fd = -1;
    if (gr__htab_init(&s->attrs, 1024) < 0) {
        free(s);
        return -ENOMEM;
    }
    if (closer_new(CLOSER_MAX, &s->cl) < 0) {
        gr__htab_fini(&s->attrs);
        free(s);
        return -ENOMEM;
    }
    pthread_mutex_init(&s->fs_lock, NULL);
    *out = s;
    return 0;
}

void source_close_later(source *s, int fd)
{
    closer_put(s ? s->cl : NULL, fd);
}

static void attr_unlink(source *s, srcfile *f);
void source_free(source **sp)
{
    source *s = *sp;

    if (!s)
        return;
    for (gr__list *n; (n = gr__list_first(&s->age));) {
        srcfile *f = gr__list_entry(n, srcfile, age);
        attr_unlink(s, f);
        srcfile_unref(&f);
    }
    gr__htab_fini(&s->attrs);
    for (int i = 0; i < CONFIG_MAX_ROOTS; i++) {
        if (s->rfd[i].fd >= 0)
            close(s->rfd[i].fd);
        if (s->rfd[i].old_fd >= 0)
            close(s->rfd[i].old_fd);
    }
    closer_free(&s->cl);
    pthread_mutex_destroy(&s->fs_lock);
    free(s);
    *sp = NULL;
}

int source_resolve(source *s, const char *path, size_t len, char **norm, int *root,
                   char *err, size_t errlen)
{
    char *n;
    size_t o = 0;

    if (len == 0 || memchr(path, '\0', len)) {
        snprintf(err, errlen, "invalid path");
        return -EINVAL;
    }
    if (path[0] != '/') {
        snprintf(err, errlen, "path must be absolute: %.*s", (int)(len > 200 ? 200 : len), path);
        return -EINVAL;
    }
    if (len >= PATH_MAX) {
        snprintf(err, errlen, "path too long (%zu bytes)", len);
        return -ENAMETOOLONG;
    }
    n = malloc(len + 1);
    if (!n)
        return -ENOMEM;
    /* Copy component by component, dropping empty ones and refusing "."
     * and ".." outright: a client has no reason to send them, and refusing
     * is simpler to reason about than resolving them. */
    for (size_t i = 0; i < len;) {
        size_t j;
        while (i < len && path[i] == '/')
            i++;
        if (i == len)
            break;
        j = i;
        while (j < len && path[j] != '/')
            j++;
        if ((j - i == 1 && path[i] == '.') || (j - i == 2 && path[i] == '.' && path[i + 1] == '.')) {
            snprintf(err, errlen, "path outside the source roots (\".\" or \"..\" component): %.*s",
                     (int)(len > 200 ? 200 : len), path);
            free(n);
            return -EACCES;
        }
        n[o++] = '/';
        memcpy(n + o, path + i, j - i);
        o += j - i;
        i = j;
    }
    if (o == 0)
        n[o++] = '/';
    n[o] = '\0';
    for (int r = 0; r < s->nroots; r++) {
        size_t rl = s->rootlen[r];
        /* "/" as a root matches everything; otherwise a whole-component prefix. */
        if (rl == 1 && s->roots[r][0] == '/') {
            *norm = n;
            *root = r;
            return 0;
        }
        if (o >= rl && memcmp(n, s->roots[r], rl) == 0 && (o == rl || n[rl] == '/')) {
            *norm = n;
            *root = r;
            return 0;
        }
    }
    snprintf(err, errlen, "path outside the source roots: %.200s", n);
    free(n);
    return -EACCES;
}

/* The root's directory fd for an open beneath it, or -errno (reason in
 * err); give it back with root_put.  Opened on first use and whenever the
 * root's path stops naming the directory the fd holds. */
/* The id of the mount fd is on (the VFS's, no file system operation), or
 * 0 when the kernel does not say. */
static uint64_t mount_id(int fd)
{
    struct statx x;

    if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_MNT_ID, &x) < 0 ||
        !(x.stx_mask & STATX_MNT_ID))
        return 0;
    return x.stx_mnt_id;
}

static int root_get(source *s, int root, char *err, size_t errlen)
{
    rootfd *r = &s->rfd[root];
    double now = gr__now_s();
    struct stat st;
    int fd, e;

    pthread_mutex_lock(&s->fs_lock);
    if (r->fd >= 0 && now - r->checked < ROOT_RECHECK_S) {
        r->users++;
        fd = r->fd;
        pthread_mutex_unlock(&s->fs_lock);
        return fd;
    }
    pthread_mutex_unlock(&s->fs_lock);
    /* Open (or check) outside the lock: a stalled mount must not hold up
     * the threads that still have a good fd. */
    fd = open(s->roots[root], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        e = errno;
        if (fd >= 0)
            close(fd);
        snprintf(err, errlen, "source root %s: %s", s->roots[root], strerror(e));
        return -e;
    }
    pthread_mutex_lock(&s->fs_lock);
    if (r->fd >= 0 && r->dev == st.st_dev && r->ino == st.st_ino) {
        close(fd);                      /* the same directory: keep the one held */
    } else if (r->fd < 0 || r->old_fd < 0 || r->old_users == 0) {
        if (r->fd >= 0) {
            if (r->old_fd >= 0)
                close(r->old_fd);
            r->old_fd = r->fd;          /* closed by its last user */
            r->old_users = r->users;
            if (r->old_users == 0) {
                close(r->old_fd);
                r->old_fd = -1;
            }
        }
        r->fd = fd;
        r->users = 0;
        r->dev = st.st_dev;
        r->ino = st.st_ino;
        r->mnt_id = mount_id(fd);
    } else {
        /* The fd replaced last is still in use: keep the current one a
         * little longer (until that use ends), and check again next time. */
        close(fd);
        r->users++;
        fd = r->fd;
        pthread_mutex_unlock(&s->fs_lock);
        return fd;
    }
    r->checked = now;
    r->users++;
    fd = r->fd;
    pthread_mutex_unlock(&s->fs_lock);
    return fd;
}

static void root_put(source *s, int root, int fd)
{
    rootfd *r = &s->rfd[root];

    pthread_mutex_lock(&s->fs_lock);
    if (fd == r->fd && r->users > 0) {
        r->users--;
    } else if (fd == r->old_fd && r->old_users > 0 && --r->old_users == 0) {
        close(r->old_fd);
        r->old_fd = -1;
    }
    pthread_mutex_unlock(&s->fs_lock);
}

/* Open norm (oflags: O_RDONLY, or O_PATH to resolve it only), walking from
 * its root with the kernel refusing any escape.  Returns an fd or -errno.
 * Read-only opens are made without blocking, then made
 * blocking: a FIFO (any user can make one under a root) would otherwise hold
 * the I/O thread until a writer came, and eight such OPENs every thread;
 * callers refuse what is not a regular file or directory. */
static int open_beneath_how(source *s, const char *norm, int root, int oflags, char *err,
                            size_t errlen)
{
    const char *rel = norm + s->rootlen[root];
    int dfd, fd = -1;

    if (s->rootlen[root] == 1)
        rel = norm;                     /* root "/" */
    while (*rel == '/')
        rel++;
    if (!*rel)
        rel = ".";                      /* the root itself (a directory: admin walks) */
    dfd = root_get(s, root, err, errlen);
    if (dfd < 0)
        return dfd;
    /* openat2 refuses O_PATH with anything but O_CLOEXEC (and two more). */
    oflags |= O_CLOEXEC | (oflags & O_PATH ? 0 : O_NOCTTY | O_NONBLOCK);
    if (s->have_openat2) {
        struct open_how how = {
            .flags = (uint64_t)oflags,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof(how));
        if (fd < 0 && errno == ENOSYS) {
            log_warn("openat2 unavailable: paths are checked with realpath, which races with renames");
            s->have_openat2 = 0;
        }
    }
    if (!s->have_openat2) {
        char *real = realpath(norm, NULL);
        size_t rl = s->rootlen[root];
        if (!real) {
            fd = -1;
        } else if (rl > 1 && (strncmp(real, s->roots[root], rl) || (real[rl] && real[rl] != '/'))) {
            errno = EXDEV;
            fd = -1;
        } else {
            fd = open(real, oflags);
        }
        free(real);
    }
    if (fd < 0) {
        int e = errno;
        root_put(s, root, dfd);
        if (e == EXDEV || e == ELOOP) {
            snprintf(err, errlen, "path outside the source roots (through a link): %.200s", norm);
            return -EACCES;
        }
        snprintf(err, errlen, "open %.200s: %s", norm, strerror(e));
        return -e;
    }
    root_put(s, root, dfd);
    if (!(oflags & O_PATH))
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

static int open_beneath(source *s, const char *norm, int root, char *err, size_t errlen)
{
    return open_beneath_how(s, norm, root, O_RDONLY, err, errlen);
}

/* Whether the open file fd on device dev is on Lustre: fstatfs once per
 * device, remembered. */
static int on_lustre(source *s, int fd, dev_t dev)
{
    struct statfs sfs;
    int lustre = -1;

    pthread_mutex_lock(&s->fs_lock);
    for (int i = 0; i < s->nfs_seen; i++)
        if (s->fs_seen[i].dev == dev)
            lustre = s->fs_seen[i].lustre;
    pthread_mutex_unlock(&s->fs_lock);
    if (lustre >= 0)
        return lustre;
    if (fstatfs(fd, &sfs) < 0)
        return 0;                       /* not remembered: asked again next time */
    lustre = (unsigned long)sfs.f_type == LL_SUPER_MAGIC;
    pthread_mutex_lock(&s->fs_lock);
    if (s->nfs_seen < FS_SEEN_MAX) {
        s->fs_seen[s->nfs_seen].dev = dev;
        s->fs_seen[s->nfs_seen].lustre = lustre;
        s->nfs_seen++;
    }
    pthread_mutex_unlock(&s->fs_lock);
    return lustre;
}

/* The Lustre stripe size of an open file on device dev, or 0 (not Lustre,
 * or the query failed: then st_blksize, which Lustre sets to the stripe size
 * anyway). */
static uint32_t lustre_stripe(source *s, int fd, dev_t dev)
{
    struct gr_lov_user_md *lum;
    uint32_t stripe = 0;

    if (!on_lustre(s, fd, dev))
        return 0;
    lum = calloc(1, sizeof(*lum));
    if (!lum)
        return 0;
    lum->lmm_magic = 0x0BD10BD0;        /* LOV_USER_MAGIC_V1 */
    if (ioctl(fd, LL_IOC_LOV_GETSTRIPE, lum) == 0)
        stripe = lum->lmm_stripe_size;
    free(lum);
    return stripe;
}

int source_stat(source *s, const char *norm, int root, struct stat *st, char *err, size_t errlen)
{
    int fd, rc = source_stat_open(s, norm, root, st, &fd, err, errlen);

    if (rc == 0)
        close(fd);
    return rc;
}

/* fstat of fd, norm's: 0 for a regular file, else -errno (-EISDIR, -EINVAL
 * for anything else) with the reason in err. */
static int stat_regular(int fd, const char *norm, struct stat *st, char *err, size_t errlen)
{
    if (fstat(fd, st) < 0) {
        int e = errno;
        snprintf(err, errlen, "stat %.200s: %s", norm, strerror(e));
        return -e;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "not a regular file: %.200s", norm);
        return S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL;
    }
    return 0;
}

int source_stat_open(source *s, const char *norm, int root, struct stat *st, int *fdp,
                     char *err, size_t errlen)
{
    int fd = open_beneath(s, norm, root, err, errlen);
    int rc;

    if (fd < 0)
        return fd;
    rc = stat_regular(fd, norm, st, err, errlen);
    if (rc == 0) {
        uint32_t stripe = lustre_stripe(s, fd, st->st_dev);
        if (stripe)
            st->st_blksize = (blksize_t)stripe;
    }
    if (rc < 0)
        close(fd);
    else
        *fdp = fd;
    return rc;
}

/* Whether the proof's own name, as the kernel keeps it for the open file
 * (/proc/self/fd), is norm on the very mount the root is on: then norm
 * names the proof's file, as of the client's open a moment ago, with no
 * lookup.  A name through a link, a file renamed or removed since, another
 * mount (a submount under the root, or another namespace's): no, and the
 * caller looks the path up.  may_block 0 (the loop): the root's mount as
 * last checked, if that was under ROOT_RECHECK_S ago, else no; 1: the
 * root checked again when due (an open of its path). */
static int proof_named(source *s, int root, int proof, const char *norm, int may_block)
{
    size_t len = strlen(norm);
    char link[40], err[8], *buf;
    uint64_t mnt = 0;
    ssize_t n;
    int named;

    if (may_block) {
        int dfd = root_get(s, root, err, sizeof(err));
        if (dfd >= 0) {
            pthread_mutex_lock(&s->fs_lock);
            if (dfd == s->rfd[root].fd)
                mnt = s->rfd[root].mnt_id;
            pthread_mutex_unlock(&s->fs_lock);
            root_put(s, root, dfd);
        }
    } else {
        pthread_mutex_lock(&s->fs_lock);
        if (s->rfd[root].fd >= 0 && gr__now_s() - s->rfd[root].checked < ROOT_RECHECK_S)
            mnt = s->rfd[root].mnt_id;
        pthread_mutex_unlock(&s->fs_lock);
    }
    if (!mnt || mount_id(proof) != mnt || len >= PATH_MAX || !(buf = malloc(PATH_MAX)))
        return 0;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", proof);
    n = readlink(link, buf, PATH_MAX);
    /* The kernel adds " (deleted)" to the name of a removed file (one with
     * another link left has nlink > 0): a path that ends so is looked up. */
    named = n == (ssize_t)len && memcmp(buf, norm, len) == 0 &&
            !(len >= 10 && memcmp(norm + len - 10, " (deleted)", 10) == 0);
    free(buf);
    return named;
}

/* A proof the daemon may keep: a plain read-only descriptor (one open for
 * writing would keep the file open for writing after its owner closed it:
 * ETXTBSY for exec, write delegations; O_DIRECT reads want aligned
 * buffers) of a regular, linked file, whose attributes go to *pst. */
static int proof_keepable(int proof, struct stat *pst)
{
    int fl = fcntl(proof, F_GETFL);

    return fl >= 0 && (fl & O_ACCMODE) == O_RDONLY && !(fl & (O_PATH | O_DIRECT)) &&
           fstat(proof, pst) == 0 && S_ISREG(pst->st_mode) && pst->st_nlink > 0;
}

int source_proof_named(source *s, const char *norm, int root, int proof, struct stat *st,
                       int *fdp)
{
    int lustre = -1, fd;

    if (!proof_keepable(proof, st))
        return 0;
    pthread_mutex_lock(&s->fs_lock);
    for (int i = 0; i < s->nfs_seen; i++)
        if (s->fs_seen[i].dev == st->st_dev)
            lustre = s->fs_seen[i].lustre;
    pthread_mutex_unlock(&s->fs_lock);
    /* Not knowing (a statfs) or Lustre (an ioctl for the stripe) is for an
     * I/O thread. */
    if (lustre != 0 || !proof_named(s, root, proof, norm, 0))
        return 0;
    fd = fcntl(proof, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return 0;
    *fdp = fd;
    return 1;
}

int source_stat_proof(source *s, const char *norm, int root, int proof, struct stat *st,
                      int *fdp, char *err, size_t errlen)
{
    int fd, rc = 0, named;
    struct stat pst;

    if (!proof_keepable(proof, &pst))
        return -EAGAIN;
    /* The path must name the proof's file: the proof's own name says so,
     * or the path is resolved beneath the root as source_stat_open does,
     * with nothing opened (O_PATH: a lookup, and the attributes it
     * brought). */
    named = proof_named(s, root, proof, norm, 1);
    if (named) {
        *st = pst;
    } else {
        fd = open_beneath_how(s, norm, root, O_PATH, err, errlen);
        if (fd < 0)
            return fd;
        rc = stat_regular(fd, norm, st, err, errlen);
        if (rc == 0 && !source_same_file(st, &pst))
            rc = -EAGAIN;       /* another file, or changed since: opened the usual way */
        close(fd);
        if (rc < 0)
            return rc;
    }
    fd = fcntl(proof, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -EAGAIN;
    uint32_t stripe = lustre_stripe(s, fd, st->st_dev);
    if (stripe)
        st->st_blksize = (blksize_t)stripe;
    *fdp = fd;
    return named;
}

/* The chunk size is part of the identity: chunk i of a file means other
 * bytes after chunk_size changes, so such chunks must never be found.  So
 * is the ctime, the one attribute no user can set: a user who gets a freed
 * inode number back on a file of her own can set its size and mtime to a
 * removed file's, whose chunks may still be cached, but not its ctime. */
static void file_id(const struct stat *st, uint64_t chunk_size, uint8_t id[FILE_ID_LEN])
{
    uint64_t v[8] = {
        (uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
        (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec,
        (uint64_t)st->st_ctim.tv_sec, (uint64_t)st->st_ctim.tv_nsec, chunk_size,
    };
    XXH128_hash_t h = XXH3_128bits(v, sizeof(v));
    XXH128_canonical_t c;

    XXH128_canonicalFromHash(&c, h);
    memcpy(id, c.digest, FILE_ID_LEN);
}

/* What a change of a file's bytes moves: its size and mtime (a held
 * descriptor is the file itself, and a chmod since changed no byte).  A file
 * opened by name must also match the ctime (source_same_file). */
static int same_content(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

uint64_t srcfile_chunk_len(const srcfile *f, uint64_t idx)
{
    uint64_t size = (uint64_t)f->st.st_size, start = idx * f->chunk_size;

    if (start >= size)
        return 0;
    return size - start < f->chunk_size ? size - start : f->chunk_size;
}

int source_read_chunk(source *s, const srcfile *f, uint64_t idx, void *buf, size_t *len,
                      char *err, size_t errlen)
{
    uint64_t want = srcfile_chunk_len(f, idx), got = 0;
    off_t off = (off_t)(idx * f->chunk_size);
    struct stat st;
    int fd = f->fd, rc = 0;
    /* A held descriptor that fails a read is given one more chance, opened
     * afresh: it may be a client's kept proof whose flags its owner changed
     * since (O_DIRECT, which wants aligned reads), which must cost work,
     * never other readers' data. */
    int again = fd >= 0 && (!f->pinned || f->kept_proof);

    if (fault_hit(FAULT_SOURCE_SLOW))
        usleep(300 * 1000);             /* tests: a fetch that others can join */
reopen:
    if (fd < 0) {
        fd = open_beneath(s, f->path, f->root, err, errlen);
        if (fd < 0)
            return fd;
        /* Opened by name: the file must be the one the identity names,
         * ctime and all (another file can have all the rest). */
        if (fstat(fd, &st) < 0 || !source_same_file(&st, &f->st)) {
            snprintf(err, errlen, "%.200s changed since it was opened", f->path);
            rc = -ESTALE;
            goto out;
        }
    }
    while (got < want) {
        ssize_t n = pread(fd, (char *)buf + got, want - got, off + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && again) {
            log_debug("read %s through its held fd: %s; opened again", f->path, strerror(errno));
            again = 0;
            fd = -1;
            got = 0;
            goto reopen;
        }
        if (n < 0) {
            rc = -errno;
            snprintf(err, errlen, "read %.200s: %s", f->path, strerror(errno));
            goto out;
        }
        if (n == 0) {
            snprintf(err, errlen, "%.200s shrank while being read", f->path);
            rc = -ESTALE;
            goto out;
        }
        got += (uint64_t)n;
    }
    /* A file rewritten in place keeps its inode: catch it by its mtime and
     * size afterwards, so torn bytes are never cached.  (Through a held fd
     * this one check also covers changes since the OPEN.)  A file removed
     * since is gone for its readers too, as with a fresh open; not a pinned
     * one, whose fd is the file (a staged copy unlinked at its publish, an
     * early checkpoint's memfd, which never had a name). */
    if (fstat(fd, &st) < 0 || !same_content(&st, &f->st)) {
        snprintf(err, errlen, "%.200s changed while being read", f->path);
        rc = -ESTALE;
        goto out;
    }
    if (st.st_nlink == 0 && !f->pinned) {
        snprintf(err, errlen, "%.200s: %s (removed)", f->path, strerror(ENOENT));
        rc = -ENOENT;
        goto out;
    }
    *len = (size_t)got;
out:
    if (fd != f->fd)
        close(fd);
    return rc;
}

uint64_t source_chunk_size(uint64_t chunk_size, uint64_t blksize)
{
    /* A large st_blksize (or Lustre's stripe, put there by source_stat) is
     * the filesystem's stripe: chunks are the largest multiple of it that
     * fits chunk_size, so every source read covers whole stripes, also for
     * stripes that are not powers of two (Lustre allows any multiple of
     * 64K).  A stripe larger than chunk_size cannot be honoured without
     * bigger chunks, which the operator must configure. */
    if (blksize >= LARGE_BLKSIZE && blksize <= chunk_size)
        return chunk_size - chunk_size % blksize;
    return chunk_size;
}

/* ---- attribute cache (loop thread) ---- */

static uint64_t path_hash(const char *p)
{
    return XXH3_64bits(p, strlen(p));
}

static int path_eq(const gr__hnode *n, const void *key)
{
    return strcmp(gr__container_of(n, srcfile, hn)->path, key) == 0;
}

static void attr_unlink(source *s, srcfile *f)
{
    gr__htab_remove(&s->attrs, &f->hn);
    gr__list_remove(&f->age);
    f->cached = 0;
}

static srcfile *attr_find(source *s, const char *norm)
{
    gr__hnode *n = gr__htab_find(&s->attrs, path_hash(norm), path_eq, norm);

    return n ? gr__container_of(n, srcfile, hn) : NULL;
}

/* f was used: the last of the fd cache's files to lose its fd. */
static void fd_touch(source *s, srcfile *f)
{
    if (f->fd >= 0) {
        gr__list_remove(&f->fdage);
        gr__list_push_back(&s->fd_lru, &f->fdage);
    }
}

srcfile *source_lookup(source *s, const char *norm, double now)
{
    srcfile *f = attr_find(s, norm);

    if (!f || now - f->checked_at > s->attr_ttl)
        return NULL;
    fd_touch(s, f);
    return srcfile_ref(f);
}

int source_same_file(const struct stat *a, const struct stat *b)
{
    return same_content(a, b) && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
           a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

srcfile *source_lookup_proven(source *s, const char *norm, const struct stat *st)
{
    srcfile *f = attr_find(s, norm);

    if (!f || !S_ISREG(st->st_mode) || st->st_nlink == 0 || !source_same_file(st, &f->st))
        return NULL;
    fd_touch(s, f);
    return srcfile_ref(f);
}

/* Close the fd of f (loop thread; nobody reads through it). */
static void fd_drop(srcfile *f)
{
    if (f->fd < 0)
        return;
    closer_put(f->src->cl, f->fd);
    f->fd = -1;
    gr__list_remove(&f->fdage);
    f->src->nfds--;
    f->src->nprivate -= (size_t)f->kept_proof;       /* counted while it held its fd */
}

/* Keep fd for f if the fd cache has, or can make, room; else close it. */
static void fd_keep(source *s, srcfile *f, int fd)
{
    unsigned looked = 0;

    /* Make room: the least recently used fds that only the attr cache's
     * reference holds (a reference more may be a read in flight on an I/O
     * thread).  A few busy ones are skipped; past that, fd is not kept. */
    for (gr__list *n = gr__list_first(&s->fd_lru); n && s->nfds >= s->fd_max && looked < 8;) {
        srcfile *v = gr__list_entry(n, srcfile, fdage);
        n = gr__list_next(&s->fd_lru, n);
        looked++;
        if (v->refs <= (unsigned)v->cached)
            fd_drop(v);
    }
    if (s->nfds >= s->fd_max) {
        closer_put(s->cl, fd);
        return;
    }
    f->fd = fd;
    f->src = s;
    gr__list_push_back(&s->fd_lru, &f->fdage);
    s->nfds++;
}

size_t source_open_fds(source *s)
{
    size_t n = s->nfds;

    pthread_mutex_lock(&s->fs_lock);
    for (int i = 0; i < s->nroots; i++)
        n += (s->rfd[i].fd >= 0) + (s->rfd[i].old_fd >= 0);
    pthread_mutex_unlock(&s->fs_lock);
    return n;
}

srcfile *source_install(source *s, char *norm, int root, const struct stat *st, double now)
{
    return source_install_fd(s, norm, root, st, -1, now);
}

srcfile *source_install_fd(source *s, char *norm, int root, const struct stat *st, int fd,
                           double now)
{
    srcfile *f = calloc(1, sizeof(*f)), *old;
    uint64_t cs = s->chunk_size;

    if (!f) {
        free(norm);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    f->refs = 1;
    f->fd = -1;
    gr__list_init(&f->age);
    gr__list_init(&f->fdage);
    f->path = norm;
    f->root = root;
    f->st = *st;
    f->checked_at = now;
    cs = source_chunk_size(cs, (uint64_t)st->st_blksize);   /* as identify() does */
    if (st->st_blksize > 0 && (uint64_t)st->st_blksize > cs)
        log_debug("%s: stripe %ld exceeds chunk_size %llu", norm, (long)st->st_blksize,
                  (unsigned long long)cs);
    f->chunk_size = (uint32_t)cs;
    file_id(st, cs, f->id);

    old = attr_find(s, norm);
    if (old && memcmp(old->id, f->id, FILE_ID_LEN) == 0 && source_same_file(&old->st, st)) {
        /* The same file, unchanged: the entry (and the fd it may hold,
         * which reads in flight use; its attributes are theirs to read, so
         * they are not rewritten) stays, checked now.  Re-resolving a path
         * over and over (a proof that disagrees with the entry) churns
         * neither the table nor the fd cache. */
        old->checked_at = now;
        gr__list_remove(&old->age);
        gr__list_push_back(&s->age, &old->age);
        /* Its fd is set only while no read can be looking at it (I/O
         * threads read a srcfile they hold a reference to). */
        if (fd >= 0 && old->fd < 0 && old->refs == (unsigned)old->cached)
            fd_keep(s, old, fd);
        else
            closer_put(s->cl, fd);
        free(f->path);
        free(f);
        return srcfile_ref(old);
    }
    if (old) {
        attr_unlink(s, old);
        srcfile_unref(&old);
    }
    while (gr__htab_count(&s->attrs) >= s->attr_max && !gr__list_empty(&s->age)) {
        srcfile *victim = gr__list_entry(gr__list_first(&s->age), srcfile, age);
        attr_unlink(s, victim);
        srcfile_unref(&victim);
    }
    gr__htab_insert(&s->attrs, &f->hn, path_hash(norm));
    gr__list_push_back(&s->age, &f->age);
    f->cached = 1;
    if (fd >= 0)
        fd_keep(s, f, fd);
    return srcfile_ref(f);
}

srcfile *source_proof_file(source *s, char *norm, int root, const struct stat *st, int fd)
{
    srcfile *f;

    /* At most half the fd cache: a client opening and holding many handles
     * (each a srcfile of its own) must not take the descriptors of files
     * everyone reads, nor the daemon's fd limit.  Past it the file is
     * opened by name at each chunk read, as with fd_cache = 0. */
    if (fd >= 0 && s->nprivate >= s->fd_max / 2) {
        closer_put(s->cl, fd);
        fd = -1;
    }
    f = source_pinned(s, norm, root, st, fd);
    if (f) {
        f->kept_proof = 1;
        s->nprivate += fd >= 0;
    }
    return f;
}

srcfile *source_pinned(source *s, char *norm, int root, const struct stat *st, int fd)
{
    srcfile *f = calloc(1, sizeof(*f));

    if (!f) {
        free(norm);
        closer_put(s->cl, fd);
        return NULL;
    }
    f->refs = 1;
    gr__list_init(&f->age);
    gr__list_init(&f->fdage);           /* on no fd list: fd_keep never drops it */
    f->path = norm;
    f->root = root;
    f->st = *st;
    f->checked_at = 0;
    f->chunk_size = (uint32_t)source_chunk_size(s->chunk_size, (uint64_t)st->st_blksize);
    file_id(st, f->chunk_size, f->id);
    f->fd = fd;
    f->src = s;
    f->pinned = 1;
    if (fd >= 0)
        s->nfds++;                      /* fd_drop's count, at the last unref */
    return f;
}

/* The identity of an open regular file fd (st filled), as source_install
 * would compute it. */
static void identify(source *s, int fd, struct stat *st, uint8_t id[FILE_ID_LEN])
{
    uint32_t stripe = lustre_stripe(s, fd, st->st_dev);

    if (stripe)
        st->st_blksize = (blksize_t)stripe;
    file_id(st, source_chunk_size(s->chunk_size, (uint64_t)st->st_blksize), id);
}

/* Walk the directory dfd (consumed), calling cb on each regular file below
 * it; symlinks are not followed.  Returns 0, the first non-zero cb result,
 * or -ELOOP past WALK_MAX_DEPTH. */
#define WALK_MAX_DEPTH 64
static int walk_dir(source *s, int dfd, int depth, source_walk_cb cb, void *arg)
{
    DIR *d = fdopendir(dfd);
    struct dirent *de;
    int rc = 0;

    if (!d) {
        rc = -errno;
        close(dfd);
        return rc;
    }
    if (depth > WALK_MAX_DEPTH) {
        closedir(d);
        return -ELOOP;
    }
    while (rc == 0 && (de = readdir(d))) {
        struct stat st;
        uint8_t id[FILE_ID_LEN];
        int fd;

        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            continue;                   /* symlinks, vanished and unreadable entries */
        if (fstat(fd, &st) < 0) {
            close(fd);
        } else if (S_ISDIR(st.st_mode)) {
            rc = walk_dir(s, fd, depth + 1, cb, arg);
        } else {
            if (S_ISREG(st.st_mode)) {
                identify(s, fd, &st, id);
                rc = cb(arg, id);
            }
            close(fd);
        }
    }
    closedir(d);
    return rc;
}

int source_walk(source *s, const char *norm, int root, source_walk_cb cb, void *arg,
                char *err, size_t errlen)
{
    int fd = open_beneath(s, norm, root, err, errlen);
    struct stat st;
    uint8_t id[FILE_ID_LEN];
    int rc;

    if (fd < 0)
        return fd;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        snprintf(err, errlen, "stat %.200s: %s", norm, strerror(errno));
        close(fd);
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = walk_dir(s, fd, 0, cb, arg);
        if (rc < 0)
            snprintf(err, errlen, "walk %.200s: %s", norm, strerror(-rc));
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "not a regular file or directory: %.200s", norm);
        return -EINVAL;
    }
    identify(s, fd, &st, id);
    close(fd);
    return cb(arg, id);
}

int source_open_file(source *s, const char *norm, int root, source_file *out, char *err,
                     size_t errlen)
{
    int fd = open_beneath(s, norm, root, err, errlen);

    if (fd < 0)
        return fd;
    if (fstat(fd, &out->st) < 0) {
        int e = errno;
        snprintf(err, errlen, "stat %.200s: %s", norm, strerror(e));
        close(fd);
        return -e;
    }
    if (!S_ISREG(out->st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "not a regular file: %.200s", norm);
        return S_ISDIR(out->st.st_mode) ? -EISDIR : -EINVAL;
    }
    identify(s, fd, &out->st, out->id);
    out->chunk_size = (uint32_t)source_chunk_size(s->chunk_size, (uint64_t)out->st.st_blksize);
    out->fd = fd;
    return 0;
}

int source_file_read(const source_file *sf, uint64_t idx, void *buf, size_t *len, char *err,
                     size_t errlen)
{
    uint64_t size = (uint64_t)sf->st.st_size, start = idx * sf->chunk_size, want, got = 0;

    want = start >= size ? 0 : size - start < sf->chunk_size ? size - start : sf->chunk_size;
    while (got < want) {
        ssize_t n = pread(sf->fd, (char *)buf + got, want - got, (off_t)(start + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            snprintf(err, errlen, "read: %s", strerror(e));
            return -e;
        }
        if (n == 0) {
            snprintf(err, errlen, "the file shrank while being read");
            return -ESTALE;
        }
        got += (uint64_t)n;
    }
    *len = (size_t)got;
    return 0;
}

int source_file_check(const source_file *sf)
{
    struct stat st;

    return fstat(sf->fd, &st) == 0 && same_content(&st, &sf->st) ? 0 : -ESTALE;
}

void source_file_close(source_file *sf)
{
    if (sf->fd >= 0)
        close(sf->fd);
    sf->fd = -1;
}

int source_list_dir(source *s, const char *norm, int root, source_list_cb cb, void *arg,
                    char *err, size_t errlen)
{
    int fd = open_beneath(s, norm, root, err, errlen);
    struct dirent *de;
    DIR *d;
    int rc = 0;

    if (fd < 0)
        return fd;
    d = fdopendir(fd);
    if (!d) {
        rc = -errno;
        snprintf(err, errlen, "%.200s: %s", norm, strerror(-rc));
        close(fd);
        return rc;
    }
    while (rc == 0 && (de = readdir(d))) {
        unsigned char t = de->d_type;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (t == DT_UNKNOWN) {
            struct stat st;
            if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            t = S_ISREG(st.st_mode) ? DT_REG : S_ISDIR(st.st_mode) ? DT_DIR : DT_UNKNOWN;
        }
        if (t == DT_REG || t == DT_DIR)
            rc = cb(arg, de->d_name, t == DT_DIR);
    }
    closedir(d);
    return rc;
}

int source_scan_dir(source *s, const char *norm, int root, struct stat *dirst,
                    source_scan_cb cb, void *arg, unsigned *unstable, char *err, size_t errlen)
{
    int fd = open_beneath(s, norm, root, err, errlen);
    uint8_t acl[JUDGE_ACL_MAX];
    char xpath[64 + NAME_MAX];
    struct dirent *de;
    DIR *d;
    int rc = 0;

    if (fd < 0)
        return fd;
    if (fstat(fd, dirst) < 0 || !S_ISDIR(dirst->st_mode)) {
        rc = S_ISDIR(dirst->st_mode) ? -errno : -ENOTDIR;
        snprintf(err, errlen, "%.200s: %s", norm, strerror(-rc));
        close(fd);
        return rc;
    }
    d = fdopendir(fd);
    if (!d) {
        rc = -errno;
        snprintf(err, errlen, "%.200s: %s", norm, strerror(-rc));
        close(fd);
        return rc;
    }
    while (rc == 0 && (errno = 0, de = readdir(d))) {
        struct stat st, st2;
        ssize_t n = 0;
        int tries = 0, same = 0;

        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        /* The entry's ACL by the directory's fd (/proc/self/fd: no path
         * above it is walked again), between two stats that must agree. */
        snprintf(xpath, sizeof(xpath), "/proc/self/fd/%d/%s", dirfd(d), de->d_name);
        while (!same && tries++ < 3) {
            if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                break;
            if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
                same = 1;               /* a link or special file: its name and kind only */
                n = 0;
                break;
            }
            n = judge_acl_blob(xpath, acl, sizeof(acl));
            same = fstatat(dirfd(d), de->d_name, &st2, AT_SYMLINK_NOFOLLOW) == 0 &&
                   st2.st_ino == st.st_ino && st2.st_dev == st.st_dev &&
                   st2.st_ctim.tv_sec == st.st_ctim.tv_sec &&
                   st2.st_ctim.tv_nsec == st.st_ctim.tv_nsec;
        }
        if (!same) {
            if (tries > 1 && unstable)
                (*unstable)++;
            continue;
        }
        rc = cb(arg, de->d_name, &st, n > 0 ? acl : n < 0 ? acl : NULL,
                n < 0 ? SOURCE_ACL_UNREADABLE : (size_t)n);
    }
    if (rc == 0 && errno) {
        rc = -errno;
        snprintf(err, errlen, "reading directory %.200s: %s", norm, strerror(-rc));
    }
    closedir(d);
    return rc;
}

void source_set_attr_ttl(source *s, double attr_ttl)
{
    s->attr_ttl = attr_ttl;
}

int source_forget(source *s, const char *norm)
{
    srcfile *f = attr_find(s, norm);

    if (!f)
        return 0;
    attr_unlink(s, f);
    srcfile_unref(&f);
    return 1;
}

int source_check_roots(source *s, char *err, size_t errlen)
{
    for (int r = 0; r < s->nroots; r++) {
        int fd = open(s->roots[r], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            snprintf(err, errlen, "source root %s: %s", s->roots[r], strerror(e));
            return -e;
        }
        close(fd);
    }
    return 0;
}

srcfile *srcfile_ref(srcfile *f)
{
    f->refs++;
    return f;
}

void srcfile_unref(srcfile **fp)
{
    srcfile *f = *fp;

    if (!f)
        return;
    *fp = NULL;
    if (--f->refs == 0) {
        fd_drop(f);
        free(f->path);
        free(f);
    }
}

/* ---- as the last backend of the fetch engine ---- */

static backend_result sb_get(void *self, const backend_req *rq, size_t *len, backend_status *st)
{
    int rc = source_read_chunk(self, rq->f, rq->idx, rq->buf, len, st->msg, sizeof(st->msg));

    if (rc < 0) {
        st->err = rc;
        return BACKEND_FAIL;        /* nothing below the source */
    }
    return BACKEND_OK;
}

static const backend_ops source_backend_ops = {
    .name = "source", .kind = BACKEND_SOURCE, .get = sb_get,
};

void source_backend(source *s, backend *out)
{
    out->ops = &source_backend_ops;
    out->self = s;
}
