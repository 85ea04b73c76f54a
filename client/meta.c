/*
 * meta.c - gr_stat and gr_opendir/gr_readdir/gr_closedir: attributes and
 * directory listings from the daemon's manifests of registered datasets
 * (STAT and READDIR), with the file system as the fallback, and the
 * client's cache of the attributes they brought.
 *
 * The cache maps an absolute path to its attributes until the daemon's
 * valid_ms for them runs out (the dataset's next stamp check), so a walk
 * that lists a directory with READDIR (PROTO_READDIR_PLUS) and then stats
 * each entry costs one round trip per 4096 entries, not one per file.  It
 * holds at most $GRANARY_ATTR_CACHE entries (default 262144, about 250
 * bytes each; 0: no cache); when full it is emptied and fills again.  Only
 * answers from manifests are cached: the file system's own are not.
 *
 * Threads: the cache has its own lock; calls on one gr_client may come
 * from several threads.  A gr_dir is one thread's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "granary_int.h"
#include "htab.h"
#include "proto.h"

#define META_CACHE_DEFAULT 262144

typedef struct ment {
    gr__hnode hn;
    uint64_t expires_ms;        /* gr__now_ms() past which it is not used */
    struct stat st;
    size_t len;
    char path[];                /* NUL-terminated */
} ment;

struct gr__meta {
    pthread_mutex_t lock;
    gr__htab t;
    size_t max;
};

static uint64_t hash_path(const char *p, size_t len)
{
    uint64_t h = 1469598103934665603ull;        /* FNV-1a */

    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

typedef struct pkey {
    const char *p;
    size_t len;
} pkey;

static int ment_eq(const gr__hnode *n, const void *key)
{
    const ment *e = (const ment *)n;
    const pkey *k = key;

    return e->len == k->len && memcmp(e->path, k->p, k->len) == 0;
}

gr__meta *gr__meta_new(void)
{
    gr__meta *m = calloc(1, sizeof(*m));
    const char *v = getenv("GRANARY_ATTR_CACHE");

    if (!m)
        return NULL;
    m->max = META_CACHE_DEFAULT;
    if (v && *v) {
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        if (*end == '\0')
            m->max = (size_t)n;
    }
    if (gr__htab_init(&m->t, 1024) < 0) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

static int free_cb(void *arg, gr__hnode *n)
{
    (void)arg;
    free(n);
    return 0;
}

/* Empty the cache (lock held). */
static void meta_clear(gr__meta *m)
{
    gr__htab_iter it;
    gr__hnode *n = gr__htab_first(&m->t, &it);

    while (n) {
        gr__hnode *next = gr__htab_next(&it);
        gr__htab_remove(&m->t, n);
        free(n);
        n = next;
    }
}

void gr__meta_free(gr__meta *m)
{
    if (!m)
        return;
    gr__htab_walk(&m->t, free_cb, NULL);
    gr__htab_fini(&m->t);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static void st_of_attr(const proto_attr *a, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_size = (off_t)a->size;
    st->st_ino = (ino_t)a->ino;
    st->st_dev = (dev_t)a->dev;
    st->st_mode = (mode_t)a->mode;
    st->st_mtim.tv_sec = (time_t)a->mtime_sec;
    st->st_mtim.tv_nsec = (long)a->mtime_nsec;
    st->st_ctim = st->st_mtim;
    st->st_atim = st->st_mtim;
    st->st_blksize = (blksize_t)a->blksize;
    st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
    st->st_uid = a->uid;
    st->st_gid = a->gid;
    st->st_nlink = a->nlink;
}

static void meta_put(gr__meta *m, const char *path, size_t len, const struct stat *st,
                     uint32_t valid_ms)
{
    pkey k = { path, len };
    uint64_t h = hash_path(path, len);
    ment *e;

    if (m->max == 0 || valid_ms == 0)
        return;
    pthread_mutex_lock(&m->lock);
    e = (ment *)gr__htab_find(&m->t, h, ment_eq, &k);
    if (!e) {
        if (gr__htab_count(&m->t) >= m->max)
            meta_clear(m);
        e = malloc(sizeof(*e) + len + 1);
        if (!e) {
            pthread_mutex_unlock(&m->lock);
            return;
        }
        memcpy(e->path, path, len);
        e->path[len] = '\0';
        e->len = len;
        gr__htab_insert(&m->t, &e->hn, h);
    }
    e->st = *st;
    e->expires_ms = gr__now_ms() + valid_ms;
    pthread_mutex_unlock(&m->lock);
}

static int meta_get(gr__meta *m, const char *path, struct stat *st)
{
    pkey k = { path, strlen(path) };
    ment *e;
    int hit = 0;

    if (m->max == 0)
        return 0;
    pthread_mutex_lock(&m->lock);
    e = (ment *)gr__htab_find(&m->t, hash_path(k.p, k.len), ment_eq, &k);
    if (e && e->expires_ms > gr__now_ms()) {
        *st = e->st;
        hit = 1;
    }
    pthread_mutex_unlock(&m->lock);
    return hit;
}

/* path made absolute against the working directory, into buf. */
static int absolute(const char *path, char *buf, size_t cap)
{
    size_t n;

    if (!path || !*path)
        return -ENOENT;
    if (path[0] == '/') {
        n = strlen(path);
        if (n >= cap)
            return -ENAMETOOLONG;
        memcpy(buf, path, n + 1);
    } else {
        if (!getcwd(buf, cap))
            return -errno;
        n = strlen(buf);
        if (n + 1 + strlen(path) >= cap)
            return -ENAMETOOLONG;
        buf[n] = '/';
        strcpy(buf + n + 1, path);
        n += 1 + strlen(path);
    }
    while (n > 1 && buf[n - 1] == '/')  /* "d/" names d */
        buf[--n] = '\0';
    return 0;
}

/* Whether err means "the daemon cannot answer this from a manifest: ask
 * the file system". */
static int fallback_err(int err)
{
    return err == ENODATA || err == ENOKEY || err == EOPNOTSUPP || err == EPROTO;
}

/* ---- gr_stat ---- */

typedef struct stat_call {
    const char *path;
    struct stat *st;
    uint32_t valid_ms;
} stat_call;

static long stat_enc(void *arg, uint8_t *buf, size_t cap, uint32_t id)
{
    stat_call *s = arg;

    return proto_enc_stat(buf, cap, id, s->path, strlen(s->path));
}

static int stat_dec(void *arg, const struct proto_msg *m)
{
    stat_call *s = arg;

    st_of_attr(&m->u.stat.attr, s->st);
    s->valid_ms = m->u.stat.valid_ms;
    return 0;
}

int gr__stat_manifest(gr_client *c, const char *abs, struct stat *st)
{
    stat_call s = { abs, st, 0 };

    if (abs[0] != '/')
        return -EINVAL;
    if (meta_get(gr__meta_of(c), abs, st))
        return 0;
    if (gr__call(c, PROTO_OP_STAT, stat_enc, stat_dec, &s) < 0)
        return -errno;
    meta_put(gr__meta_of(c), abs, strlen(abs), st, s.valid_ms);
    return 0;
}

int gr_stat(gr_client *c, const char *path, struct stat *st)
{
    char abs[PATH_MAX];
    stat_call s;
    int rc = absolute(path, abs, sizeof(abs));

    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    if (meta_get(gr__meta_of(c), abs, st))
        return 0;
    s.path = abs;
    s.st = st;
    s.valid_ms = 0;
    if (gr__call(c, PROTO_OP_STAT, stat_enc, stat_dec, &s) == 0) {
        meta_put(gr__meta_of(c), abs, strlen(abs), st, s.valid_ms);
        return 0;
    }
    if (!fallback_err(errno))
        return -1;
    return stat(abs, st);
}

/* ---- gr_opendir, gr_readdir, gr_closedir ---- */

struct gr_dir {
    gr_client *c;
    char path[PATH_MAX];        /* absolute, no trailing '/' */
    size_t plen;
    DIR *fs;                    /* the file system's listing (the fallback), or NULL */
    uint64_t next;              /* the daemon's cookie for the next page; 0: none */
    int more;                   /* a page is still to be asked for */
    gr_dirent *ents;            /* the page */
    char *names;
    uint32_t n, pos;
    gr_dirent cur;              /* the fallback's entry */
};

typedef struct rd_call {
    gr_dir *d;
    uint64_t cookie;
} rd_call;

static long rd_enc(void *arg, uint8_t *buf, size_t cap, uint32_t id)
{
    rd_call *r = arg;

    return proto_enc_readdir(buf, cap, id, r->cookie, PROTO_MAX_DIRENTS, PROTO_READDIR_PLUS,
                             r->d->path, r->d->plen);
}

/* Copy the page out of the reply buffer (reused by the next call), and put
 * its attributes in the cache. */
static int rd_dec(void *arg, const struct proto_msg *m)
{
    gr_dir *d = ((rd_call *)arg)->d;
    gr__meta *mc = gr__meta_of(d->c);
    uint32_t n = m->u.dirents.count;
    size_t off = 0, noff = 0, nbytes = 0;
    char key[PATH_MAX];
    proto_dirent e;

    while (proto_dirent_next(m, &off, &e) == 1)
        nbytes += e.name_len + 1;
    free(d->ents);
    free(d->names);
    d->ents = calloc(n ? n : 1, sizeof(*d->ents));
    d->names = malloc(nbytes ? nbytes : 1);
    d->n = d->pos = 0;
    if (!d->ents || !d->names)
        return -ENOMEM;
    off = 0;
    while (d->n < n && proto_dirent_next(m, &off, &e) == 1) {
        gr_dirent *g = &d->ents[d->n++];
        memcpy(d->names + noff, e.name, e.name_len);
        d->names[noff + e.name_len] = '\0';
        g->name = d->names + noff;
        noff += e.name_len + 1;
        g->type = e.type;
        /* Attributes are stat's for files and directories only (a link's
         * are lstat's: stat would follow it). */
        if (e.has_attr && (e.type == PROTO_DIRENT_DIR || e.type == PROTO_DIRENT_REG)) {
            g->has_stat = 1;
            st_of_attr(&e.attr, &g->st);
            if (d->plen + 1 + e.name_len < sizeof(key)) {
                size_t kl = d->plen == 1 ? 0 : d->plen;     /* "/" + name */
                memcpy(key, d->path, kl);
                key[kl] = '/';
                memcpy(key + kl + 1, e.name, e.name_len);
                meta_put(mc, key, kl + 1 + e.name_len, &g->st, m->u.dirents.valid_ms);
            }
        }
    }
    d->next = m->u.dirents.next;
    d->more = d->next != 0;
    return 0;
}

static int rd_page(gr_dir *d)
{
    rd_call r = { d, d->next };

    return gr__call(d->c, PROTO_OP_READDIR, rd_enc, rd_dec, &r);
}

gr_dir *gr_opendir(gr_client *c, const char *path)
{
    gr_dir *d = calloc(1, sizeof(*d));
    int rc;

    if (!d) {
        errno = ENOMEM;
        return NULL;
    }
    d->c = c;
    rc = absolute(path, d->path, sizeof(d->path));
    if (rc < 0) {
        free(d);
        errno = -rc;
        return NULL;
    }
    d->plen = strlen(d->path);
    if (rd_page(d) == 0)
        return d;
    if (!fallback_err(errno)) {
        rc = errno;
        gr_closedir(d);
        errno = rc;
        return NULL;
    }
    d->fs = opendir(d->path);
    if (!d->fs) {
        rc = errno;
        gr_closedir(d);
        errno = rc;
        return NULL;
    }
    return d;
}

const gr_dirent *gr_readdir(gr_dir *d)
{
    struct dirent *de;

    errno = 0;
    if (d->fs) {
        while ((de = readdir(d->fs))) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            d->cur.name = de->d_name;
            d->cur.type = de->d_type;
            d->cur.has_stat = 0;
            return &d->cur;
        }
        return NULL;
    }
    while (d->pos == d->n) {
        if (!d->more)
            return NULL;
        if (rd_page(d) < 0)
            return NULL;
    }
    return &d->ents[d->pos++];
}

int gr_closedir(gr_dir *d)
{
    if (!d)
        return 0;
    if (d->fs)
        closedir(d->fs);
    free(d->ents);
    free(d->names);
    free(d);
    return 0;
}
