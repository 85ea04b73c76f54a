/*
 * datasets.c - see datasets.h.
 *
 * Files in dir: "registry" (one line per dataset: id, recheck seconds,
 * stamp or "-", path; tab-separated, written whole to registry.tmp and
 * renamed), and "<id>.man", each dataset's manifest.
 *
 * A scan: an ancestors job first (the directories from "/" to the top and
 * the stamp, on an I/O thread), then directory jobs, at most SCAN_JOBS at
 * once, each listing one directory into a batch that the loop adds to the
 * builder (the builder is the loop's); subdirectories go on the scan's
 * queue.  When the queue is empty and no job runs, a write job writes and
 * reopens the manifest, and the loop swaps it in.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "grow.h"
#include "datasets.h"
#include "judge.h"
#include "list.h"
#include "log.h"

#define SCAN_JOBS        8              /* directories listed at once per scan */
#define DS_MAX_PATH      4096

typedef struct scan scan;

typedef struct dataset {
    gr__list link;
    datasets *ds;
    uint32_t id;
    char *top, *stamp;                  /* stamp NULL: the top directory */
    int root;
    double recheck;
    manifest *m;                        /* serving, or NULL */
    scan *sc;                           /* running, or NULL */
    int failed, dead;
    char error[256];
    double checked_at;                  /* gr__now_s() of the last stamp check (or load) */
    int checking;
    uint64_t checks, rescans;
    uint64_t last_dirs, last_entries, last_errors, last_ms;
    unsigned refs;                      /* the loop's, and one per job in flight */
} dataset;

struct datasets {
    source *src;
    workers *w;
    gr_stats *stats;
    char *dir;
    uint64_t max_entries;
    gr__list list;
    uint32_t next_id;
    int stopping;
};

/* A directory waiting to be listed. */
typedef struct pdir {
    struct pdir *next;
    int64_t handle;
    char path[];
} pdir;

struct scan {
    dataset *d;
    mf_builder *b;
    mf_stamp stamp;
    pdir *head, **tail;
    unsigned running;
    uint64_t dirs, errors, unstable;
    double t0;
    int failed;                         /* stop: the error is in d->error */
};

static void ds_unref(dataset *d)
{
    if (--d->refs)
        return;
    mf_close(&d->m);
    free(d->top);
    free(d->stamp);
    free(d);
}

static void man_path(const datasets *ds, uint32_t id, char *out, size_t len)
{
    snprintf(out, len, "%s/%" PRIu32 ".man", ds->dir, id);
}

/* ---- the registry ---- */

static int save_registry(datasets *ds)
{
    char tmp[DS_MAX_PATH + 32], path[DS_MAX_PATH + 32];
    FILE *f;
    int rc = 0;

    snprintf(tmp, sizeof(tmp), "%s/registry.tmp", ds->dir);
    snprintf(path, sizeof(path), "%s/registry", ds->dir);
    f = fopen(tmp, "w");
    if (!f)
        return -errno;
    for (gr__list *n = gr__list_first(&ds->list); n; n = gr__list_next(&ds->list, n)) {
        dataset *d = gr__list_entry(n, dataset, link);
        fprintf(f, "%" PRIu32 "\t%.3f\t%s\t%s\n", d->id, d->recheck, d->stamp ? d->stamp : "-",
                d->top);
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        rc = -errno;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc == 0) {
        int dfd = open(ds->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    } else {
        log_error("datasets: cannot save %s: %s", path, strerror(-rc));
    }
    return rc;
}

/* ---- scans ---- */

static void scan_pump(scan *sc);

static void scan_free(scan **scp)
{
    scan *sc = *scp;

    if (!sc)
        return;
    while (sc->head) {
        pdir *p = sc->head;
        sc->head = p->next;
        free(p);
    }
    mf_build_free(&sc->b);
    free(sc);
    *scp = NULL;
}

/* The scan of d ended (failed: d->error says why); d keeps serving what it
 * had. */
static void scan_end(dataset *d, int ok)
{
    scan *sc = d->sc;

    d->last_dirs = sc->dirs;
    d->last_entries = sc->b ? mf_build_count(sc->b) : 0;    /* no builder: failed before one */
    d->last_errors = sc->errors;
    d->last_ms = (uint64_t)((gr__now_s() - sc->t0) * 1000);
    d->failed = !ok;
    if (!ok)
        log_warn("dataset %s: scan failed: %s", d->top, d->error);
    scan_free(&d->sc);
}

static void scan_fail(scan *sc, const char *what, const char *path, int err)
{
    if (!sc->failed)
        snprintf(sc->d->error, sizeof(sc->d->error), "%s %.200s: %s", what, path, strerror(-err));
    sc->failed = 1;
}

/* A job of d's scan ended: 1 if the scan goes on (d is live), else 0 (the
 * scan is freed once its last job is back). */
static int scan_job_back(dataset *d)
{
    scan *sc = d->sc;

    if (!sc)
        return 0;
    sc->running--;
    if (!d->dead)
        return 1;
    if (sc->running == 0)
        scan_free(&d->sc);
    return 0;
}

/* The write job: the builder's manifest to its file, and opened back. */
typedef struct wjob {
    wq_job job;
    dataset *d;
    int rc;
    manifest *m;
    char err[256];
} wjob;

static void write_run(wq_job *j)
{
    wjob *w = (wjob *)j;
    char path[DS_MAX_PATH + 32];

    man_path(w->d->ds, w->d->id, path, sizeof(path));
    w->rc = mf_build_write(w->d->sc->b, path, w->err, sizeof(w->err));
    if (w->rc == 0)
        w->rc = mf_open(path, &w->m, w->err, sizeof(w->err));
}

static void write_done(wq_job *j)
{
    wjob *w = (wjob *)j;
    dataset *d = w->d;
    gr_stats *st = d->ds->stats;

    if (!scan_job_back(d)) {
        mf_close(&w->m);
    } else if (w->rc < 0 || j->cancelled) {
        snprintf(d->error, sizeof(d->error), "%s", j->cancelled ? "cancelled" : w->err);
        mf_close(&w->m);
        scan_end(d, 0);
    } else {
        if (d->m)
            st->dataset_entries -= mf_count(d->m);
        mf_close(&d->m);
        d->m = w->m;
        st->dataset_entries += mf_count(d->m);
        st->dataset_scans++;
        d->error[0] = '\0';
        d->checked_at = gr__now_s();
        log_info("dataset %s: %" PRIu64 " files and %" PRIu64 " directories in the manifest "
                 "(%.1f s)", d->top, mf_files(d->m), (uint64_t)mf_count(d->m) - mf_files(d->m),
                 gr__now_s() - d->sc->t0);
        scan_end(d, 1);
    }
    ds_unref(d);
    free(w);
}

/* One directory listed into a batch for the loop. */
typedef struct bent {
    uint32_t name_off;
    struct stat st;
    uint32_t acl_off, acl_len;          /* acl_len SOURCE_ACL_UNREADABLE: refused */
} bent;

typedef struct djob {
    wq_job job;
    dataset *d;
    int64_t handle;
    int rc;
    char err[256];
    bent *ents;
    size_t n, cap;
    char *names;
    size_t nlen, ncap;
    uint8_t *acls;
    size_t alen, acap;
    unsigned unstable;
    char path[];
} djob;

static int collect(void *arg, const char *name, const struct stat *st, const void *acl,
                   size_t acl_len)
{
    djob *j = arg;
    size_t nl = strlen(name) + 1;
    size_t al = acl_len == SOURCE_ACL_UNREADABLE ? 0 : acl_len;
    bent *e;

    if (gr__grow((void **)&j->ents, &j->cap, j->n + 1, sizeof(*j->ents)) < 0 ||
        gr__grow((void **)&j->names, &j->ncap, j->nlen + nl, 1) < 0 ||
        (al && gr__grow((void **)&j->acls, &j->acap, j->alen + al, 1) < 0))
        return -ENOMEM;
    e = &j->ents[j->n++];
    e->name_off = (uint32_t)j->nlen;
    memcpy(j->names + j->nlen, name, nl);
    j->nlen += nl;
    e->st = *st;
    e->acl_off = (uint32_t)j->alen;
    e->acl_len = acl ? (uint32_t)(acl_len == SOURCE_ACL_UNREADABLE ? UINT32_MAX : acl_len) : 0;
    if (al) {
        memcpy(j->acls + j->alen, acl, al);
        j->alen += al;
    }
    return 0;
}

static void dir_run(wq_job *wj)
{
    djob *j = (djob *)wj;
    struct stat st;

    j->rc = source_scan_dir(j->d->ds->src, j->path, j->d->root, &st, collect, j, &j->unstable,
                            j->err, sizeof(j->err));
}

/* An unreadable ACL is kept as a blob no decoder takes: judged, refused. */
static const uint8_t acl_refused[1] = { 0xff };

static void dir_done(wq_job *wj)
{
    djob *j = (djob *)wj;
    dataset *d = j->d;
    scan *sc = d->sc;

    if (scan_job_back(d)) {
        sc->dirs++;
        sc->unstable += j->unstable;
        if (j->rc < 0 || wj->cancelled) {
            /* Its contents are unknown: lookups below it go to the file
             * system, nothing is claimed absent. */
            sc->errors++;
            mf_build_unlisted(sc->b, j->handle);
            if (sc->errors <= 3)
                log_warn("dataset %s: %s", d->top, wj->cancelled ? "cancelled" : j->err);
        }
        for (size_t i = 0; i < j->n && !sc->failed && j->rc == 0; i++) {
            const bent *e = &j->ents[i];
            const char *name = j->names + e->name_off;
            const void *acl = e->acl_len == UINT32_MAX ? acl_refused : j->acls + e->acl_off;
            size_t al = e->acl_len == UINT32_MAX ? sizeof(acl_refused) : e->acl_len;
            int64_t h;
            if (mf_build_count(sc->b) >= d->ds->max_entries) {
                scan_fail(sc, "more than [dataset] max_entries entries under", d->top, -E2BIG);
                break;
            }
            h = mf_build_add(sc->b, j->handle, name, &e->st, al ? acl : NULL, al);
            if (h < 0) {
                scan_fail(sc, "cannot add an entry of", j->path, (int)h);
                break;
            }
            if (S_ISDIR(e->st.st_mode)) {
                size_t pl = strlen(j->path) + 1 + strlen(name) + 1;
                pdir *p = pl <= DS_MAX_PATH ? malloc(sizeof(*p) + pl) : NULL;
                if (!p) {
                    scan_fail(sc, "cannot queue a directory of", j->path, -ENOMEM);
                    break;
                }
                memcpy(p->path, j->path, strlen(j->path));
                p->path[strlen(j->path)] = '/';
                memcpy(p->path + strlen(j->path) + 1, name, strlen(name) + 1);
                p->handle = h;
                p->next = NULL;
                *sc->tail = p;
                sc->tail = &p->next;
            }
        }
        scan_pump(sc);
    }
    ds_unref(d);
    free(j->ents);
    free(j->names);
    free(j->acls);
    free(j);
}

/* Start directory jobs up to SCAN_JOBS; when all is listed, the write. */
static void scan_pump(scan *sc)
{
    dataset *d = sc->d;
    datasets *ds = d->ds;

    if (ds->stopping) {
        if (sc->running == 0)
            scan_end(d, 0);
        return;
    }
    while (!sc->failed && sc->head && sc->running < SCAN_JOBS) {
        pdir *p = sc->head;
        djob *j = calloc(1, sizeof(*j) + strlen(p->path) + 1);
        if (!j)
            break;
        sc->head = p->next;
        if (!sc->head)
            sc->tail = &sc->head;
        strcpy(j->path, p->path);
        j->handle = p->handle;
        free(p);
        j->d = d;
        d->refs++;
        j->job.run = dir_run;
        j->job.done = dir_done;
        sc->running++;
        workers_submit(ds->w, &j->job, WQ_BACKGROUND);
    }
    if (sc->running)
        return;
    if (sc->failed) {
        scan_end(d, 0);
        return;
    }
    if (!sc->head) {
        wjob *w = calloc(1, sizeof(*w));
        if (!w) {
            snprintf(d->error, sizeof(d->error), "out of memory writing the manifest");
            scan_end(d, 0);
            return;
        }
        w->d = d;
        d->refs++;
        w->job.run = write_run;
        w->job.done = write_done;
        sc->running = 1;                /* the write, so nothing else starts */
        workers_submit(ds->w, &w->job, WQ_BACKGROUND);
    }
}

/* The first job: the stamp, and the directories from "/" to the top. */
typedef struct ajob {
    wq_job job;
    dataset *d;
    int rc;
    char err[256];
    mf_stamp stamp;
    dev_t dev;
    size_t n;
    struct stat st[256];
    int acl_len[256];
    uint8_t acl[256][JUDGE_ACL_MAX];
} ajob;

static int stamp_of(dataset *d, mf_stamp *out, char *err, size_t errlen)
{
    const char *p = d->stamp ? d->stamp : d->top;
    struct stat st;

    if (lstat(p, &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "stamp %.200s: %s", p, strerror(e));
        return -e;
    }
    out->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    out->ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    out->ino = (uint64_t)st.st_ino;
    return 0;
}

static void anc_run(wq_job *wj)
{
    ajob *j = (ajob *)wj;
    const char *top = j->d->top;
    char path[DS_MAX_PATH];
    size_t len = strlen(top);

    j->rc = stamp_of(j->d, &j->stamp, j->err, sizeof(j->err));
    /* "/" and each prefix of top that ends before a '/', then top. */
    for (size_t p = 0; j->rc == 0 && p <= len; p++) {
        ssize_t n;
        if (p < len && top[p] != '/')
            continue;
        if (p == 0) {
            strcpy(path, "/");
        } else {
            memcpy(path, top, p);
            path[p] = '\0';
        }
        if (j->n >= sizeof(j->st) / sizeof(j->st[0])) {
            snprintf(j->err, sizeof(j->err), "%.200s: too deep", top);
            j->rc = -ENAMETOOLONG;
            break;
        }
        if (lstat(path, &j->st[j->n]) < 0) {
            j->rc = -errno;
            snprintf(j->err, sizeof(j->err), "%.200s: %s", path, strerror(-j->rc));
            break;
        }
        if (S_ISLNK(j->st[j->n].st_mode)) {
            j->rc = -ELOOP;
            snprintf(j->err, sizeof(j->err), "%.160s is a symbolic link (datasets are judged "
                     "along real directories)", path);
            break;
        }
        if (!S_ISDIR(j->st[j->n].st_mode)) {
            j->rc = -ENOTDIR;
            snprintf(j->err, sizeof(j->err), "%.200s is not a directory", path);
            break;
        }
        n = judge_acl_blob(path, j->acl[j->n], JUDGE_ACL_MAX);
        j->acl_len[j->n] = n < 0 ? -1 : (int)n;
        j->dev = j->st[j->n].st_dev;
        j->n++;
    }
}

static void anc_done(wq_job *wj)
{
    ajob *j = (ajob *)wj;
    dataset *d = j->d;
    scan *sc = d->sc;

    if (scan_job_back(d)) {
        if (j->rc < 0 || wj->cancelled) {
            snprintf(d->error, sizeof(d->error), "%s", wj->cancelled ? "cancelled" : j->err);
            scan_end(d, 0);
        } else if (mf_build_new(d->top, j->dev, &j->stamp, &sc->b) < 0) {
            snprintf(d->error, sizeof(d->error), "out of memory");
            scan_end(d, 0);
        } else {
            for (size_t i = 0; i < j->n; i++) {
                const void *acl = j->acl_len[i] < 0 ? acl_refused : j->acl[i];
                size_t al = j->acl_len[i] < 0 ? sizeof(acl_refused) : (size_t)j->acl_len[i];
                mf_build_ancestor(sc->b, &j->st[i], al ? acl : NULL, al);
            }
            sc->stamp = j->stamp;
            sc->head = malloc(sizeof(pdir) + strlen(d->top) + 1);
            if (!sc->head || mf_build_top(sc->b) < 0) {
                free(sc->head);
                sc->head = NULL;
                snprintf(d->error, sizeof(d->error), "cannot start listing %s", d->top);
                scan_end(d, 0);
            } else {
                strcpy(sc->head->path, d->top);
                sc->head->handle = mf_build_top(sc->b);
                sc->head->next = NULL;
                sc->tail = &sc->head->next;
                scan_pump(sc);
            }
        }
    }
    ds_unref(d);
    free(j);
}

static int scan_start(dataset *d)
{
    scan *sc;
    ajob *j;

    if (d->sc)
        return -EBUSY;
    sc = calloc(1, sizeof(*sc));
    j = calloc(1, sizeof(*j));
    if (!sc || !j) {
        free(sc);
        free(j);
        return -ENOMEM;
    }
    sc->d = d;
    sc->t0 = gr__now_s();
    sc->tail = &sc->head;
    sc->running = 1;
    d->sc = sc;
    d->error[0] = '\0';
    j->d = d;
    d->refs++;
    j->job.run = anc_run;
    j->job.done = anc_done;
    workers_submit(d->ds->w, &j->job, WQ_BACKGROUND);
    return 0;
}

/* ---- stamp checks ---- */

typedef struct cjob {
    wq_job job;
    dataset *d;
    int rc;
    mf_stamp stamp;
    char err[256];
} cjob;

static void check_run(wq_job *wj)
{
    cjob *j = (cjob *)wj;

    j->rc = stamp_of(j->d, &j->stamp, j->err, sizeof(j->err));
}

static void check_done(wq_job *wj)
{
    cjob *j = (cjob *)wj;
    dataset *d = j->d;

    d->checking = 0;
    if (!d->dead && !wj->cancelled) {
        const mf_stamp *had = d->m ? mf_stamp_of(d->m) : NULL;
        d->checked_at = gr__now_s();
        d->checks++;
        d->ds->stats->dataset_stamp_checks++;
        if (had && (j->rc < 0 || had->mtime_ns != j->stamp.mtime_ns ||
                    had->ctime_ns != j->stamp.ctime_ns || had->ino != j->stamp.ino) && !d->sc) {
            log_info("dataset %s: its stamp changed: scanning it again", d->top);
            d->rescans++;
            scan_start(d);
        }
    }
    ds_unref(d);
    free(j);
}

static void maybe_check(dataset *d, double now)
{
    cjob *j;

    if (d->checking || d->sc || d->ds->stopping || now - d->checked_at < d->recheck)
        return;
    j = calloc(1, sizeof(*j));
    if (!j)
        return;
    j->d = d;
    d->refs++;
    d->checking = 1;
    j->job.run = check_run;
    j->job.done = check_done;
    workers_submit(d->ds->w, &j->job, WQ_BACKGROUND);
}

/* ---- the set ---- */

static dataset *ds_make(datasets *ds, uint32_t id, const char *top, int root, const char *stamp,
                        double recheck)
{
    dataset *d = calloc(1, sizeof(*d));

    if (!d)
        return NULL;
    d->ds = ds;
    d->id = id;
    d->top = strdup(top);
    d->stamp = stamp ? strdup(stamp) : NULL;
    d->root = root;
    d->recheck = recheck;
    d->refs = 1;
    gr__list_init(&d->link);
    if (!d->top || (stamp && !d->stamp)) {
        free(d->top);
        free(d->stamp);
        free(d);
        return NULL;
    }
    return d;
}

int datasets_new(source *src, workers *w, gr_stats *stats, const char *dir, uint64_t max_entries,
                 datasets **out, char *err, size_t errlen)
{
    datasets *ds = calloc(1, sizeof(*ds));
    char path[DS_MAX_PATH + 32], line[DS_MAX_PATH * 2 + 64];
    FILE *f;

    *out = ds;
    if (!ds)
        return -ENOMEM;
    ds->src = src;
    ds->w = w;
    ds->stats = stats;
    ds->max_entries = max_entries;
    ds->next_id = 1;
    gr__list_init(&ds->list);
    if (!dir)
        return 0;
    ds->dir = strdup(dir);
    if (!ds->dir)
        return -ENOMEM;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        snprintf(err, errlen, "datasets directory %s: %s", dir, strerror(e));
        free(ds->dir);
        ds->dir = NULL;
        return -e;
    }
    snprintf(path, sizeof(path), "%s/registry.tmp", dir);
    unlink(path);                       /* a registry write the last run did not finish */
    snprintf(path, sizeof(path), "%s/registry", dir);
    f = fopen(path, "r");
    while (f && fgets(line, sizeof(line), f)) {
        char *idp = strtok(line, "\t"), *rp = strtok(NULL, "\t"), *sp = strtok(NULL, "\t");
        char *tp = strtok(NULL, "\n"), *norm = NULL, *snorm = NULL, e2[256];
        char mpath[DS_MAX_PATH + 32];
        int root = -1, sroot = -1;  /* (a stamp's root: only that it has one) */
        dataset *d;
        if (!idp || !rp || !sp || !tp ||
            source_resolve(src, tp, strlen(tp), &norm, &root, e2, sizeof(e2)) < 0 ||
            (strcmp(sp, "-") && source_resolve(src, sp, strlen(sp), &snorm, &sroot, e2,
                                               sizeof(e2)) < 0)) {
            log_warn("datasets: %s: skipping a line that is not a dataset under the roots", path);
            free(norm);
            continue;
        }
        d = ds_make(ds, (uint32_t)strtoul(idp, NULL, 10), norm, root, snorm, atof(rp));
        free(norm);
        free(snorm);
        if (!d)
            continue;
        if (d->id >= ds->next_id)
            ds->next_id = d->id + 1;
        gr__list_push_back(&ds->list, &d->link);
        stats->datasets_registered++;
        man_path(ds, d->id, mpath, sizeof(mpath));
        snprintf(mpath + strlen(mpath), sizeof(mpath) - strlen(mpath), ".tmp");
        unlink(mpath);                  /* a scan the last run did not finish */
        man_path(ds, d->id, mpath, sizeof(mpath));
        if (mf_open(mpath, &d->m, e2, sizeof(e2)) == 0) {
            stats->dataset_entries += mf_count(d->m);
            d->checked_at = 0;          /* checked at first use */
        } else {
            log_warn("dataset %s: %s: scanning it", d->top, e2);
            scan_start(d);
        }
    }
    if (f)
        fclose(f);
    return 0;
}

void datasets_shutdown(datasets *ds)
{
    if (ds)
        ds->stopping = 1;
}

void datasets_free(datasets **dsp)
{
    datasets *ds = *dsp;

    if (!ds)
        return;
    for (gr__list *n; (n = gr__list_first(&ds->list));) {
        dataset *d = gr__list_entry(n, dataset, link);
        gr__list_remove(&d->link);
        d->dead = 1;
        scan_free(&d->sc);
        ds_unref(d);
    }
    free(ds->dir);
    free(ds);
    *dsp = NULL;
}

/* Whether a and b are the same directory or one holds the other. */
static int nested(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), l = la < lb ? la : lb;

    return strncmp(a, b, l) == 0 && (la == lb || (la > lb ? a[lb] : b[la]) == '/');
}

int datasets_add(datasets *ds, const char *norm, int root, const char *stamp, double recheck,
                 uint32_t *id)
{
    dataset *d;

    if (!ds->dir)
        return -EROFS;
    if (strpbrk(norm, "\t\n") || (stamp && strpbrk(stamp, "\t\n")))
        return -EINVAL;
    for (gr__list *n = gr__list_first(&ds->list); n; n = gr__list_next(&ds->list, n))
        if (nested(gr__list_entry(n, dataset, link)->top, norm))
            return -EEXIST;
    d = ds_make(ds, ds->next_id, norm, root, stamp, recheck);
    if (!d)
        return -ENOMEM;
    gr__list_push_back(&ds->list, &d->link);
    if (save_registry(ds) < 0) {
        gr__list_remove(&d->link);
        ds_unref(d);
        return -EIO;
    }
    ds->next_id++;
    ds->stats->datasets_registered++;
    *id = d->id;
    scan_start(d);
    return 0;
}

static dataset *find_id(datasets *ds, uint32_t id)
{
    for (gr__list *n = gr__list_first(&ds->list); n; n = gr__list_next(&ds->list, n)) {
        dataset *d = gr__list_entry(n, dataset, link);
        if (d->id == id)
            return d;
    }
    return NULL;
}

int datasets_remove(datasets *ds, uint32_t id)
{
    dataset *d = find_id(ds, id);
    char path[DS_MAX_PATH + 32];

    if (!d)
        return -ENOENT;
    gr__list_remove(&d->link);
    save_registry(ds);
    man_path(ds, id, path, sizeof(path));
    unlink(path);
    if (d->m)
        ds->stats->dataset_entries -= mf_count(d->m);
    ds->stats->datasets_registered--;
    d->dead = 1;
    if (d->sc && d->sc->running == 0)
        scan_free(&d->sc);          /* else its last job frees it */
    ds_unref(d);
    return 0;
}

int datasets_rescan(datasets *ds, uint32_t id)
{
    dataset *d = find_id(ds, id);

    if (!d)
        return -ENOENT;
    d->rescans++;
    return scan_start(d);
}

int datasets_each(datasets *ds, int (*cb)(void *arg, const dataset_info *i), void *arg)
{
    for (gr__list *n = gr__list_first(&ds->list); n; n = gr__list_next(&ds->list, n)) {
        dataset *d = gr__list_entry(n, dataset, link);
        dataset_info i = {
            .id = d->id, .path = d->top, .stamp = d->stamp ? d->stamp : "",
            .recheck = d->recheck,
            .state = d->sc ? "scanning" : d->m ? "ready" : "failed",
            .entries = d->m ? mf_count(d->m) : 0, .files = d->m ? mf_files(d->m) : 0,
            .scan_dirs = d->sc ? d->sc->dirs : d->last_dirs,
            .scan_entries = d->sc ? (d->sc->b ? mf_build_count(d->sc->b) : 0) : d->last_entries,
            .scan_errors = d->sc ? d->sc->errors : d->last_errors,
            .scan_ms = d->sc ? (uint64_t)((gr__now_s() - d->sc->t0) * 1000) : d->last_ms,
            .checks = d->checks, .rescans = d->rescans, .error = d->error,
        };
        int rc = cb(arg, &i);
        if (rc)
            return rc;
    }
    return 0;
}

unsigned datasets_count(const datasets *ds)
{
    unsigned n = 0;

    for (gr__list *l = gr__list_first(&ds->list); l; l = gr__list_next(&ds->list, l))
        n++;
    return n;
}

uint32_t datasets_lookup(datasets *ds, const char *norm, const manifest **m, uint32_t *chain,
                         size_t max, size_t *depth, uint32_t *valid_ms, int *in_dataset)
{
    double now;

    *in_dataset = 0;
    if (gr__list_empty(&ds->list))
        return MF_NONE;
    now = gr__now_s();
    for (gr__list *n = gr__list_first(&ds->list); n; n = gr__list_next(&ds->list, n)) {
        dataset *d = gr__list_entry(n, dataset, link);
        uint32_t idx;
        int absent;
        double left;
        if (!d->m || !nested(d->top, norm) || strlen(norm) < strlen(d->top))
            continue;
        maybe_check(d, now);
        idx = mf_lookup(d->m, norm, chain, max, depth, &absent);
        *in_dataset = absent;
        left = d->checked_at + d->recheck - now;
        *valid_ms = d->sc || left <= 0 ? 0 : left * 1000 > UINT32_MAX ? UINT32_MAX
                                                                     : (uint32_t)(left * 1000);
        *m = d->m;
        ds->stats->dataset_lookups++;
        return idx;
    }
    return MF_NONE;
}
