/*
 * warmup.c - see warmup.h.
 *
 * A job has two queues: paths to read (files, or paths not yet known to be
 * files) and directories to list.  job_pump() turns them into tasks, at
 * most JOB_MAX_TASKS at once per job: a LIST task lists one directory; a
 * FILES task reads up to TASK_MAX_FILES paths, or one piece of a large file
 * (TASK_MAX_BYTES of its chunks; the remaining pieces are queued at the
 * front, so several tasks read one large file in parallel).  A path that
 * turns out to be a directory goes to the directory queue.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "warmup.h"

#define JOB_MAX_TASKS   8               /* tasks in flight per job */
#define TASK_MAX_FILES  32              /* small files per FILES task */
#define TASK_MAX_BYTES  (16u << 20)     /* chunk bytes per FILES task */
#define LIST_AHEAD      4096            /* list directories while fewer files are queued */
#define KEEP_FINISHED   16              /* finished jobs kept for --status */

enum { JOB_RUNNING, JOB_DONE, JOB_CANCELLED };
static const char *const state_names[] = { "running", "done", "cancelled" };

typedef struct wpath {
    char *norm;
    int root;
    uint64_t first;             /* first chunk (a piece of a large file) */
    uint64_t count;             /* chunks; 0: the whole file, kind unknown */
} wpath;

typedef struct wqueue {
    wpath *v;
    size_t head, n, cap;        /* ring: v[(head + i) % cap], i < n */
} wqueue;

typedef struct wjob wjob;
struct wjob {
    warmup *wu;
    uint32_t id;
    int state;
    int sealed;
    uint64_t bw;                /* bytes per second, 0: no limit */
    wqueue files, dirs;
    unsigned active;            /* tasks in flight */
    uint64_t files_done, failed, bytes, chunks_cached, chunks_skipped, dirs_done;
    double started, ended;
    char error[200];
    struct event *timer;        /* the bandwidth limit's wake-up */
    int throttled;
    wjob *next;
};

struct warmup {
    struct event_base *base;
    fetcher *fx;
    sched *sc;                  /* its tasks take source slots */
    nvme_tier *nvme;
    source *src;
    gr_stats *stats;
    char *dir;                  /* state directory, or NULL */
    size_t bufcap;              /* a FILES task's chunk buffer: chunk_size, page-rounded */
    wjob *jobs;                 /* oldest first */
    uint32_t next_id;
    int shutting;
};

typedef struct wres {
    int rc;                     /* < 0: failed; 1: a directory */
    uint64_t bytes;
    uint64_t cached, skipped;
    uint64_t nchunks;           /* the file's chunks (first piece) */
    uint64_t per_task;          /* chunks per piece */
    struct stat st;             /* no NVMe tier: for the DRAM prefetch */
} wres;

typedef struct wtask {
    sched_task task;            /* first */
    wjob *job;
    int list;                   /* a LIST task */
    uint64_t piece_bytes;       /* chunk bytes one piece of a large file covers */
    wpath *paths;
    size_t n;
    wres *res;
    wpath *found;               /* LIST: entries */
    uint8_t *found_dir;
    size_t nfound, capfound;
    int rc;                     /* LIST: the listing's result */
    char err[200];
} wtask;

/* ---- queues ---- */

static int q_reserve(wqueue *q)
{
    size_t cap = q->cap ? q->cap * 2 : 64;
    wpath *v;

    if (q->n < q->cap)
        return 0;
    v = malloc(cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < q->n; i++)
        v[i] = q->v[(q->head + i) % q->cap];
    free(q->v);
    q->v = v;
    q->head = 0;
    q->cap = cap;
    return 0;
}

/* Queue a path (taking norm) at the back, or the front. */
static int q_push(wqueue *q, wpath p, int front)
{
    if (q_reserve(q) < 0) {
        free(p.norm);
        return -ENOMEM;
    }
    if (front) {
        q->head = (q->head + q->cap - 1) % q->cap;
        q->v[q->head] = p;
    } else {
        q->v[(q->head + q->n) % q->cap] = p;
    }
    q->n++;
    return 0;
}

static wpath q_pop(wqueue *q)
{
    wpath p = q->v[q->head];

    q->head = (q->head + 1) % q->cap;
    q->n--;
    return p;
}

static void q_clear(wqueue *q)
{
    while (q->n) {
        wpath p = q_pop(q);
        free(p.norm);
    }
    free(q->v);
    memset(q, 0, sizeof(*q));
}

/* ---- job files ---- */

static void job_path(const warmup *wu, uint32_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%" PRIu32 ".job", wu->dir, id);
}

/* Append lines to the job's file (best effort: a job that cannot be saved
 * still runs; it just does not resume). */
static void job_save(wjob *j, char *const *norms, size_t n, int seal)
{
    char path[PATH_MAX + 32];
    FILE *f;

    if (!j->wu->dir)
        return;
    job_path(j->wu, j->id, path, sizeof(path));
    f = fopen(path, "ae");
    if (!f) {
        log_warn("warmup %" PRIu32 ": cannot save %s: %s", j->id, path, strerror(errno));
        return;
    }
    if (ftell(f) == 0)
        fprintf(f, "granary-warmup 1 bw=%" PRIu64 "\n", j->bw);
    for (size_t i = 0; i < n; i++)
        if (!strchr(norms[i], '\n'))
            fprintf(f, "path %s\n", norms[i]);
    if (seal)
        fputs("sealed\n", f);
    if (fclose(f) != 0)
        log_warn("warmup %" PRIu32 ": writing %s: %s", j->id, path, strerror(errno));
}

static void job_unsave(wjob *j)
{
    char path[PATH_MAX + 32];

    if (!j->wu->dir)
        return;
    job_path(j->wu, j->id, path, sizeof(path));
    if (unlink(path) < 0 && errno != ENOENT)
        log_warn("warmup %" PRIu32 ": removing %s: %s", j->id, path, strerror(errno));
}

/* ---- tasks ---- */

static int found_add(wtask *t, char *norm, int root, int is_dir)
{
    if (t->nfound == t->capfound) {
        size_t cap = t->capfound ? t->capfound * 2 : 256;
        wpath *f = realloc(t->found, cap * sizeof(*f));
        uint8_t *d;
        if (!f) {
            free(norm);
            return -ENOMEM;
        }
        t->found = f;
        d = realloc(t->found_dir, cap);
        if (!d) {
            free(norm);
            return -ENOMEM;
        }
        t->found_dir = d;
        t->capfound = cap;
    }
    t->found[t->nfound] = (wpath){ norm, root, 0, 0 };
    t->found_dir[t->nfound++] = (uint8_t)is_dir;
    return 0;
}

/* source_list_cb of a LIST task. */
static int list_entry(void *arg, const char *name, int is_dir)
{
    wtask *t = arg;
    const wpath *dir = &t->paths[0];
    size_t dl = strlen(dir->norm), nl = strlen(name);
    char *norm = malloc(dl + 1 + nl + 1);

    if (!norm)
        return -ENOMEM;
    memcpy(norm, dir->norm, dl);
    norm[dl] = '/';
    memcpy(norm + dl + 1, name, nl + 1);
    return found_add(t, norm, dir->root, is_dir);
}

/* Read one file (or piece) into the NVMe tier. */
static void warm_file(wtask *t, const wpath *p, wres *r, uint8_t *buf, size_t bufcap)
{
    warmup *wu = t->job->wu;
    source_file sf = { .fd = -1 };
    uint64_t nchunks, first = p->first, last;
    int rc;

    rc = source_open_file(wu->src, p->norm, p->root, &sf, t->err, sizeof(t->err));
    if (rc == -EISDIR) {
        r->rc = 1;
        return;
    }
    if (rc < 0) {
        r->rc = rc;
        return;
    }
    r->st = sf.st;
    nchunks = ((uint64_t)sf.st.st_size + sf.chunk_size - 1) / sf.chunk_size;
    r->nchunks = nchunks;
    r->per_task = t->piece_bytes / sf.chunk_size ? t->piece_bytes / sf.chunk_size : 1;
    if (!wu->nvme || sf.chunk_size > bufcap) {
        /* No NVMe tier: the loop prefetches into DRAM from r->st. */
        source_file_close(&sf);
        if (sf.chunk_size > bufcap && wu->nvme) {
            r->rc = -EINVAL;
            snprintf(t->err, sizeof(t->err), "%.150s: chunk larger than expected", p->norm);
        }
        return;
    }
    last = p->count ? first + p->count : (nchunks < r->per_task ? nchunks : r->per_task);
    if (last > nchunks)
        last = nchunks;
    for (uint64_t i = first; i < last; i++) {
        uint8_t key[CHUNK_KEY_LEN];
        size_t len = 0;
        chunk_key(key, sf.id, i);
        if (nvme_contains(wu->nvme, key) == 1) {
            r->skipped++;
            continue;
        }
        rc = source_file_read(&sf, i, buf, &len, t->err, sizeof(t->err));
        if (rc == 0 && source_file_check(&sf) < 0) {
            rc = -ESTALE;
            snprintf(t->err, sizeof(t->err), "%.150s changed while being read", p->norm);
        }
        if (rc < 0) {
            r->rc = rc;
            break;
        }
        memset(buf + len, 0, bufcap - len);     /* O_DIRECT writes whole pages */
        rc = nvme_put(wu->nvme, key, buf, len);
        if (rc == -ECANCELED) {
            r->skipped++;                       /* the tier's policy declined it */
        } else if (rc < 0) {
            r->rc = rc;
            snprintf(t->err, sizeof(t->err), "%.150s: NVMe tier: %s", p->norm, strerror(-rc));
            break;
        } else {
            r->cached++;
            r->bytes += len;
        }
    }
    source_file_close(&sf);
}

/* I/O thread. */
static void task_run(wq_job *job)
{
    wtask *t = (wtask *)job;
    size_t cap = t->job->wu->bufcap;
    uint8_t *buf = NULL;

    if (t->list) {
        t->rc = source_list_dir(t->job->wu->src, t->paths[0].norm, t->paths[0].root, list_entry,
                                t, t->err, sizeof(t->err));
        return;
    }
    if (t->job->wu->nvme && posix_memalign((void **)&buf, 4096, cap) != 0) {
        for (size_t i = 0; i < t->n; i++)
            t->res[i].rc = -ENOMEM;
        return;
    }
    for (size_t i = 0; i < t->n; i++)
        warm_file(t, &t->paths[i], &t->res[i], buf, cap);
    free(buf);
}

static void job_pump(wjob *j);

static void job_fail(wjob *j, const char *what, int rc, const char *err)
{
    j->failed++;
    j->wu->stats->warmup_failed++;
    snprintf(j->error, sizeof(j->error), "%.100s: %.90s", what,
             err && *err ? err : strerror(rc < 0 ? -rc : EIO));
}

/* No NVMe tier: fetch the file's chunks into DRAM. */
static void warm_dram(wjob *j, const wpath *p, const wres *r)
{
    warmup *wu = j->wu;
    srcfile *f;
    char *norm = strdup(p->norm);

    if (!norm)
        return;
    f = source_install(wu->src, norm, p->root, &r->st, gr__now_s());
    if (!f)
        return;
    for (uint64_t i = 0; i < r->nchunks; i++) {
        fetcher_prefetch(wu->fx, f, i, SCHED_WARMUP, 0, NULL, NULL);   /* root's segments */
        j->chunks_cached++;
        j->bytes += srcfile_chunk_len(f, i);
        wu->stats->warmup_bytes += srcfile_chunk_len(f, i);
    }
    srcfile_unref(&f);
}

static void task_done(wq_job *job)
{
    wtask *t = (wtask *)job;
    wjob *j = t->job;
    warmup *wu = j->wu;

    sched_finished(wu->sc, &t->task);
    j->active--;
    if (j->state == JOB_RUNNING && !job->cancelled) {
        if (t->list) {
            if (t->rc < 0) {
                job_fail(j, t->paths[0].norm, t->rc, t->err);
            } else {
                j->dirs_done++;
                for (size_t i = 0; i < t->nfound; i++) {
                    q_push(t->found_dir[i] ? &j->dirs : &j->files, t->found[i], 0);
                    t->found[i].norm = NULL;
                }
            }
        } else {
            for (size_t i = 0; i < t->n; i++) {
                wpath *p = &t->paths[i];
                wres *r = &t->res[i];
                if (r->rc == 1) {
                    q_push(&j->dirs, *p, 0);
                    p->norm = NULL;
                    continue;
                }
                j->bytes += r->bytes;
                j->chunks_cached += r->cached;
                j->chunks_skipped += r->skipped;
                wu->stats->warmup_bytes += r->bytes;
                wu->stats->warmup_chunks_skipped += r->skipped;
                if (r->rc < 0) {
                    job_fail(j, p->norm, r->rc, t->err);
                    continue;
                }
                if (p->count)
                    continue;                   /* a later piece: counted at the first */
                j->files_done++;
                wu->stats->warmup_files++;
                if (!wu->nvme) {
                    warm_dram(j, p, r);
                    continue;
                }
                /* Queue the rest of a large file as pieces, first piece first. */
                for (uint64_t k = r->nchunks; k > r->per_task;) {
                    uint64_t start = r->per_task + ((k - r->per_task - 1) / r->per_task) * r->per_task;
                    char *norm = strdup(p->norm);
                    if (!norm || q_push(&j->files, (wpath){ norm, p->root, start, k - start }, 1) < 0)
                        break;
                    k = start;
                }
            }
        }
    }
    for (size_t i = 0; i < t->n; i++)
        free(t->paths[i].norm);
    for (size_t i = 0; i < t->nfound; i++)
        free(t->found[i].norm);
    free(t->paths);
    free(t->res);
    free(t->found);
    free(t->found_dir);
    free(t);
    if (!wu->shutting)
        job_pump(j);
}

static int task_start(wjob *j, int list)
{
    wtask *t = calloc(1, sizeof(*t));
    size_t want = list ? 1 : (j->files.n < TASK_MAX_FILES ? j->files.n : TASK_MAX_FILES);

    if (!t)
        return -ENOMEM;
    t->paths = calloc(want, sizeof(*t->paths));
    t->res = calloc(want, sizeof(*t->res));
    if (!t->paths || !t->res) {
        free(t->paths);
        free(t->res);
        free(t);
        return -ENOMEM;
    }
    t->job = j;
    t->list = list;
    /* Paced jobs go in small pieces, so that the pace holds within a file. */
    t->piece_bytes = j->bw && j->bw / 4 < TASK_MAX_BYTES ? j->bw / 4 : TASK_MAX_BYTES;
    if (list) {
        t->paths[t->n++] = q_pop(&j->dirs);
    } else {
        /* A piece of a large file goes alone; small files go together. */
        while (t->n < want && j->files.n) {
            if (t->n > 0 && j->files.v[j->files.head].count)
                break;
            t->paths[t->n++] = q_pop(&j->files);
            if (t->paths[t->n - 1].count)
                break;
        }
    }
    t->task.job.run = task_run;
    t->task.job.done = task_done;
    j->active++;
    sched_submit(j->wu->sc, &t->task, SCHED_WARMUP);
    return 0;
}

static void job_timer(evutil_socket_t fd, short what, void *arg)
{
    wjob *j = arg;

    (void)fd; (void)what;
    j->throttled = 0;
    job_pump(j);
}

static void job_finish(wjob *j, int state)
{
    j->state = state;
    j->ended = gr__now_s();
    q_clear(&j->files);
    q_clear(&j->dirs);
    if (j->timer)
        event_del(j->timer);
    job_unsave(j);
    log_info("warmup %" PRIu32 " %s: %" PRIu64 " files, %" PRIu64 " bytes cached, %" PRIu64
             " chunks skipped, %" PRIu64 " failed", j->id, state_names[state], j->files_done,
             j->bytes, j->chunks_skipped, j->failed);
}

static void job_pump(wjob *j)
{
    warmup *wu = j->wu;

    if (j->state != JOB_RUNNING || j->throttled || wu->shutting)
        return;
    while (j->active < JOB_MAX_TASKS && (j->files.n || j->dirs.n)) {
        int list;
        if (j->bw) {
            double ahead = (double)j->bytes / (double)j->bw - (gr__now_s() - j->started);
            if (ahead > 0) {
                struct timeval tv = { (time_t)ahead, (suseconds_t)((ahead - (double)(time_t)ahead) * 1e6) };
                if (!j->timer)
                    j->timer = evtimer_new(wu->base, job_timer, j);
                if (j->timer && evtimer_add(j->timer, &tv) == 0) {
                    j->throttled = 1;
                    return;
                }
            }
        }
        list = j->dirs.n && (j->files.n < LIST_AHEAD || !j->files.n);
        if (task_start(j, list) < 0)
            break;
    }
    if (!j->active && !j->files.n && !j->dirs.n && j->sealed)
        job_finish(j, JOB_DONE);
}

/* ---- jobs ---- */

static wjob *job_find(warmup *wu, uint32_t id)
{
    for (wjob *j = wu->jobs; j; j = j->next)
        if (j->id == id)
            return j;
    return NULL;
}

static void job_free(wjob *j)
{
    q_clear(&j->files);
    q_clear(&j->dirs);
    if (j->timer)
        event_free(j->timer);
    free(j);
}

/* Forget the oldest finished jobs beyond KEEP_FINISHED (idle ones only). */
static void jobs_trim(warmup *wu)
{
    unsigned finished = 0;

    for (wjob *j = wu->jobs; j; j = j->next)
        finished += j->state != JOB_RUNNING;
    for (wjob **jp = &wu->jobs; *jp && finished > KEEP_FINISHED;) {
        wjob *j = *jp;
        if (j->state != JOB_RUNNING && !j->active) {
            *jp = j->next;
            job_free(j);
            finished--;
        } else {
            jp = &j->next;
        }
    }
}

static wjob *job_new(warmup *wu, uint32_t id, uint64_t bw)
{
    wjob *j = calloc(1, sizeof(*j)), **jp;

    if (!j)
        return NULL;
    j->wu = wu;
    j->id = id;
    j->bw = bw;
    j->started = gr__now_s();
    for (jp = &wu->jobs; *jp; jp = &(*jp)->next)
        ;
    *jp = j;
    if (id >= wu->next_id)
        wu->next_id = id + 1;
    jobs_trim(wu);
    return j;
}

int warmup_add(warmup *wu, uint32_t *id, char *const *norms, const int *roots, size_t n,
               int seal, uint64_t max_bw)
{
    wjob *j;

    if (*id == 0) {
        j = job_new(wu, wu->next_id, max_bw);
        if (!j)
            return -ENOMEM;
        *id = j->id;
    } else {
        j = job_find(wu, *id);
        if (!j || j->state != JOB_RUNNING || j->sealed)
            return -ENOENT;
    }
    for (size_t i = 0; i < n; i++) {
        char *norm = strdup(norms[i]);
        if (!norm || q_push(&j->files, (wpath){ norm, roots[i], 0, 0 }, 0) < 0)
            return -ENOMEM;
    }
    job_save(j, norms, n, seal);
    j->sealed = seal;
    job_pump(j);
    return 0;
}

int warmup_cancel(warmup *wu, uint32_t id)
{
    wjob *j = job_find(wu, id);

    if (!j || j->state != JOB_RUNNING)
        return -ENOENT;
    job_finish(j, JOB_CANCELLED);
    return 0;
}

unsigned warmup_active(const warmup *wu)
{
    unsigned n = 0;

    for (const wjob *j = wu->jobs; j; j = j->next)
        n += j->state == JOB_RUNNING;
    return n;
}

int warmup_each(warmup *wu, int (*cb)(void *arg, const warmup_info *j), void *arg)
{
    double now = gr__now_s();

    for (wjob *j = wu->jobs; j; j = j->next) {
        warmup_info in = {
            .id = j->id,
            .state = state_names[j->state],
            .files = j->files_done,
            .failed = j->failed,
            .bytes = j->bytes,
            .chunks_cached = j->chunks_cached,
            .chunks_skipped = j->chunks_skipped,
            .queued = (uint64_t)(j->files.n + j->dirs.n),
            .dirs = j->dirs_done,
            .elapsed_ms = (uint64_t)(((j->state == JOB_RUNNING ? now : j->ended) - j->started) * 1000),
            .sealed = j->sealed,
            .error = j->error,
        };
        int rc = cb(arg, &in);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- start and stop ---- */

/* Load one job file: its paths, resolved again against today's roots. */
static void job_load(warmup *wu, uint32_t id, const char *path)
{
    FILE *f = fopen(path, "re");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    uint64_t bw = 0;
    wjob *j;

    if (!f)
        return;
    if ((n = getline(&line, &cap, f)) <= 0 || sscanf(line, "granary-warmup 1 bw=%" SCNu64, &bw) != 1) {
        log_warn("warmup: %s is not a job file; ignored", path);
        goto out;
    }
    j = job_new(wu, id, bw);
    if (!j)
        goto out;
    j->sealed = 1;              /* whoever was adding paths is gone */
    while ((n = getline(&line, &cap, f)) > 0) {
        char err[256], *norm;
        int root;
        if (line[n - 1] == '\n')
            line[--n] = '\0';
        if (strncmp(line, "path ", 5) != 0)
            continue;
        if (source_resolve(wu->src, line + 5, (size_t)n - 5, &norm, &root, err, sizeof(err)) < 0) {
            job_fail(j, line + 5, -EACCES, err);
            continue;
        }
        q_push(&j->files, (wpath){ norm, root, 0, 0 }, 0);
    }
    log_info("warmup %" PRIu32 ": resuming (%zu paths)", id, j->files.n);
    job_pump(j);
out:
    free(line);
    fclose(f);
}

int warmup_new(struct event_base *base, fetcher *fx, sched *sc, nvme_tier *nvme, source *src,
               gr_stats *stats, uint64_t chunk_size, const char *state_dir, warmup **out, char *err,
               size_t errlen)
{
    warmup *wu = calloc(1, sizeof(*wu));
    DIR *d;
    struct dirent *de;

    if (!wu)
        return -ENOMEM;
    wu->base = base;
    wu->fx = fx;
    wu->sc = sc;
    wu->nvme = nvme;
    wu->src = src;
    wu->stats = stats;
    wu->next_id = 1;
    wu->bufcap = (size_t)((chunk_size + 4095) & ~(uint64_t)4095);
    *out = wu;
    if (!state_dir)
        return 0;
    wu->dir = strdup(state_dir);
    if (!wu->dir)
        return -ENOMEM;
    if (mkdir(state_dir, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        snprintf(err, errlen, "warmup state directory %s: %s", state_dir, strerror(e));
        return -e;
    }
    d = opendir(state_dir);
    if (!d) {
        int e = errno;
        snprintf(err, errlen, "warmup state directory %s: %s", state_dir, strerror(e));
        return -e;
    }
    while ((de = readdir(d))) {
        char path[PATH_MAX + 32], *end;
        unsigned long id = strtoul(de->d_name, &end, 10);
        if (id == 0 || id > UINT32_MAX || strcmp(end, ".job") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", state_dir, de->d_name);
        job_load(wu, (uint32_t)id, path);
    }
    closedir(d);
    return 0;
}

void warmup_shutdown(warmup *wu)
{
    if (wu)
        wu->shutting = 1;
}

void warmup_free(warmup **wup)
{
    warmup *wu = *wup;

    if (!wu)
        return;
    while (wu->jobs) {
        wjob *j = wu->jobs;
        wu->jobs = j->next;
        job_free(j);
    }
    free(wu->dir);
    free(wu);
    *wup = NULL;
}
