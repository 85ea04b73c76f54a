/*
 * judge.c - see judge.h.
 *
 * Each component of the path is looked at with lstat (never following a
 * link), so a symbolic link anywhere on the way is seen and refused.  What
 * is judged is bound to the file's identity (the st it returns): the
 * daemon's later open of the path checks it is the same inode, so a
 * component swapped after the judgement makes that open fail (ESTALE)
 * rather than serve another file.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <xxhash.h>

#include "clock.h"
#include "htab.h"
#include "judge.h"
#include "list.h"

#define ACL_XATTR   "system.posix_acl_access"
#define NFS4_XATTR  "system.nfs4_acl"

typedef struct jdir {
    gr__hnode hn;
    gr__list age;
    double at;                  /* gr__now_s() when read */
    access_obj obj;
    size_t len;
    char path[];
} jdir;

struct judge {
    pthread_mutex_t lock;
    gr__htab dirs;
    gr__list age;               /* oldest first */
    size_t max;
    double ttl;
};

int judge_new(double ttl, size_t max_dirs, judge **out)
{
    judge *j = calloc(1, sizeof(*j));

    if (!j || gr__htab_init(&j->dirs, 256) < 0) {
        free(j);
        return -ENOMEM;
    }
    pthread_mutex_init(&j->lock, NULL);
    gr__list_init(&j->age);
    j->ttl = ttl;
    j->max = max_dirs ? max_dirs : 1;
    *out = j;
    return 0;
}

void judge_free(judge **jp)
{
    judge *j = *jp;

    if (!j)
        return;
    for (gr__list *l; (l = gr__list_pop_front(&j->age));)
        free(gr__list_entry(l, jdir, age));
    gr__htab_fini(&j->dirs);
    pthread_mutex_destroy(&j->lock);
    free(j);
    *jp = NULL;
}

void judge_set_ttl(judge *j, double ttl)
{
    pthread_mutex_lock(&j->lock);
    j->ttl = ttl;
    pthread_mutex_unlock(&j->lock);
}

ssize_t judge_acl_blob(const char *path, void *blob, size_t cap)
{
    ssize_t n = lgetxattr(path, ACL_XATTR, blob, cap);

    if (n >= 0)
        return n;
    if (errno != ENODATA && errno != ENOTSUP && errno != EOPNOTSUPP)
        return -EACCES;             /* ERANGE (too many entries), EIO, EACCES: fail closed */
    /* The kernel's NFS client shows NFSv4 ACLs here; we cannot evaluate them. */
    n = lgetxattr(path, NFS4_XATTR, NULL, 0);
    if (n >= 0 || (errno != ENODATA && errno != ENOTSUP && errno != EOPNOTSUPP))
        return -EACCES;
    return 0;
}

/* The ACL of path (not following a link) into o.  No ACL, or a filesystem
 * without ACLs: none.  An NFSv4 ACL, or one we cannot read: unreadable
 * (refused). */
static void read_acl(const char *path, access_obj *o)
{
    uint8_t blob[JUDGE_ACL_MAX];
    ssize_t n = judge_acl_blob(path, blob, sizeof(blob));

    if (n < 0)
        o->nacl = -1;
    else
        access_acl_decode(o, blob, (size_t)n);
}

static void obj_of(const struct stat *st, access_obj *o)
{
    o->uid = st->st_uid;
    o->gid = st->st_gid;
    o->mode = st->st_mode;
}

static int dir_eq(const gr__hnode *n, const void *key)
{
    const jdir *d = gr__container_of(n, jdir, hn);
    const char *k = key;

    return strlen(k) == d->len && memcmp(d->path, k, d->len) == 0;
}

/* Directory path's attributes, from the cache if younger than ttl, else
 * read (and cached).  0, or -errno (-ENOTDIR for a non-directory,
 * -EACCES for a symlink, with err set). */
static int dir_obj(judge *j, const char *path, access_obj *o, char *err, size_t errlen)
{
    uint64_t h = XXH3_64bits(path, strlen(path));
    double now = gr__now_s();
    struct stat st;
    gr__hnode *n;
    jdir *d;

    pthread_mutex_lock(&j->lock);
    n = gr__htab_find(&j->dirs, h, dir_eq, path);
    if (n) {
        d = gr__container_of(n, jdir, hn);
        if (now - d->at <= j->ttl) {
            *o = d->obj;
            pthread_mutex_unlock(&j->lock);
            return 0;
        }
        gr__htab_remove(&j->dirs, &d->hn);
        gr__list_remove(&d->age);
        free(d);
    }
    pthread_mutex_unlock(&j->lock);

    if (lstat(path, &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "%.200s: %s", path, strerror(e));
        return -e;
    }
    if (S_ISLNK(st.st_mode)) {
        snprintf(err, errlen, "%.200s is a symbolic link: access through it is judged by the "
                 "client's own open (an fd proof)", path);
        return -EACCES;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%.200s is not a directory", path);
        return -ENOTDIR;
    }
    obj_of(&st, o);
    read_acl(path, o);

    d = malloc(sizeof(*d) + strlen(path) + 1);
    if (!d)
        return 0;                   /* judged all the same, just not cached */
    d->at = now;
    d->obj = *o;
    d->len = strlen(path);
    memcpy(d->path, path, d->len + 1);
    pthread_mutex_lock(&j->lock);
    if (!gr__htab_find(&j->dirs, h, dir_eq, path)) {
        gr__htab_insert(&j->dirs, &d->hn, h);
        gr__list_push_back(&j->age, &d->age);
        while (gr__htab_count(&j->dirs) > j->max) {
            jdir *old = gr__list_entry(gr__list_pop_front(&j->age), jdir, age);
            gr__htab_remove(&j->dirs, &old->hn);
            free(old);
        }
        d = NULL;
    }
    pthread_mutex_unlock(&j->lock);
    free(d);
    return 0;
}

/* Search permission on "/" and on every directory below it on the way to
 * the last component of norm (len bytes, absolute): the prefixes that end
 * before each '/'.  0 or -errno with err. */
static int judge_search(judge *j, const char *norm, size_t len, const access_cred *cred,
                        char *err, size_t errlen)
{
    char *path;
    access_obj o;
    int rc = 0;

    if (len == 0 || norm[0] != '/') {
        snprintf(err, errlen, "not an absolute path");
        return -EINVAL;
    }
    path = malloc(len + 2);
    if (!path)
        return -ENOMEM;
    for (size_t p = 0; rc == 0 && p < len; p++) {
        if (norm[p] != '/')
            continue;
        if (p == 0) {
            path[0] = '/';
            path[1] = '\0';
        } else {
            memcpy(path, norm, p);
            path[p] = '\0';
        }
        rc = dir_obj(j, path, &o, err, errlen);
        if (rc == 0 && !access_may(cred, &o, X_OK)) {
            snprintf(err, errlen, "%.200s: search permission denied", path);
            rc = -EACCES;
        }
    }
    free(path);
    return rc;
}

int judge_list(judge *j, const char *norm, const access_cred *cred, char *err, size_t errlen)
{
    size_t len = strlen(norm);
    access_obj o;
    int rc = judge_search(j, norm, len, cred, err, errlen);

    if (rc < 0)
        return rc;
    rc = dir_obj(j, norm, &o, err, errlen);
    if (rc == 0 && !access_may(cred, &o, R_OK | X_OK)) {
        snprintf(err, errlen, "%.200s: read permission denied", norm);
        rc = -EACCES;
    }
    return rc;
}

int judge_read(judge *j, const char *norm, const access_cred *cred, struct stat *st, char *err,
               size_t errlen)
{
    access_obj o;
    int rc = judge_search(j, norm, strlen(norm), cred, err, errlen);

    if (rc < 0)
        return rc;
    /* The file itself: never cached (its attributes are the srcfile's). */
    if (lstat(norm, st) < 0) {
        rc = -errno;
        snprintf(err, errlen, "%.200s: %s", norm, strerror(-rc));
        return rc;
    }
    if (S_ISLNK(st->st_mode)) {
        snprintf(err, errlen, "%.200s is a symbolic link: access through it is judged by the "
                 "client's own open (an fd proof)", norm);
        return -EACCES;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "not a regular file: %.200s", norm);
        return S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL;
    }
    obj_of(st, &o);
    read_acl(norm, &o);
    if (!access_may(cred, &o, R_OK)) {
        snprintf(err, errlen, "%.200s: read permission denied", norm);
        return -EACCES;
    }
    return 0;
}
