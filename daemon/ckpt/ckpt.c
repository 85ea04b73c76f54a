/*
 * ckpt.c - checkpoint staging, journal and drains (see ckpt.h).
 *
 * Files in the staging directory, per checkpoint id N:
 *   N.data   the bytes (fallocated to their size first, fsynced);
 *   N.set/   for a set ("kind set" in its journal), the container of
 *            proto/ckset.h as a file per member (stage.h);
 *   N.ckpt   the journal entry: its state, owner, destination, size and
 *            XXH3 (a small text file, replaced whole by rename);
 * a staged copy without N.ckpt is a put that was never acknowledged
 * (deleted at start).  Up to [checkpoint] drains checkpoints drain at once, each in
 * slices of at most 16 MiB per I/O job, so a drain holds an I/O thread only
 * for a slice and reads are never queued behind a whole checkpoint.  The
 * slices of all drains together are paced on the loop by drain_bandwidth
 * (each books its bytes' time on one clock, k->bw_next).
 *
 * Order per destination: at most one drain per destination at a time, the
 * oldest (lowest id) ready one first, and when a checkpoint is published
 * every older one for the same destination not yet published is
 * superseded: never drained, its staged copy and temporary removed, its
 * journal entry saying so.  So a destination only ever moves to newer
 * bytes, even when an older checkpoint's drain failed and waits for its
 * retry while a newer one goes ahead.  A restart re-derives it from the
 * journal (an unpublished entry older than a published one for the same
 * destination is superseded at load).
 *
 * Writing as the client (asuser.h): on the I/O thread, every step that
 * touches the destination (walk from /, create the temporary file, write a
 * set's files, rename) runs with the peer's groups, gid and uid as the
 * thread's, and the kernel judges exactly as it would the peer's own
 * calls.  The staged copy itself is stage.h's.
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
#include <xxhash.h>

#include "asuser.h"
#include "ckpt.h"
#include "ckset.h"
#include "clock.h"
#include "fsio.h"
#include "list.h"
#include "log.h"
#include "proto.h"
#include "setpub.h"
#include "stage.h"

#define CKPT_SLICE      (16u << 20)     /* bytes one drain job copies */
#define CKPT_BUF        (4u << 20)      /* copy buffer */
#define CKPT_KEEP       256             /* published entries remembered */
#define CKPT_BACKOFF_MIN 1.0            /* seconds before the first retry */
#define CKPT_BACKOFF_MAX 30.0
/* The error of an early checkpoint whose copy failed after the ack (the
 * journal's and the list's alike): then the reason. */
#define CKPT_LOST_EARLY "lost before it was on the node's NVMe: "

typedef struct ck {
    uint64_t id;
    char *dest;                 /* normalised */
    int root;
    ckpt_cred cred;
    uint64_t size, hash;
    ckpt_state state;
    uint64_t drained;
    unsigned attempts;
    double retry_at;            /* gr__now_s() before which it waits */
    int draining;               /* a drainjob holds it */
    int set;                    /* a set container (proto/ckset.h), published by setpub */
    char **names;               /* a set staged by member (N.set/): its files' names, by index;
                                 * NULL for a single file or a set staged whole (N.data) */
    uint32_t nnames;
    int early;                  /* acknowledged while staged (journal "ack staged") */
    int mem_fd;                 /* early, acknowledged, not yet local: the put's memfd (its
                                 * putjob owns it), for reads before local; else -1 */
    uint64_t superseded_by;     /* CKPT_SUPERSEDED: the newer checkpoint published */
    char error[256];
    gr__list link;              /* k->all, by id */
} ck;

/* A put in flight (on an I/O thread, then its completion). */
typedef struct putjob {
    wq_job job;
    ckpts *k;
    ck *c;
    int fd;
    ckpt_put_cb cb;             /* NULL once called */
    void *arg;
    int early;                  /* acknowledge at the ack point, not at local */
    int sealed;                 /* fd is a memfd sealed against write, grow and shrink: its
                                 * bytes are fixed (a plain file is checked for changes) */
    struct event *ack_ev;       /* early: made active by put_run at the ack point */
    int past_ack;               /* put_run passed the ack point (read in put_done) */
    uint64_t hash;              /* put_run's XXH3 (c->hash is the loop's) */
    char **names;               /* a set's member names, for c (put_done moves them) */
    uint32_t nnames;
    int rc;
    char err[256];
} putjob;

/* A drain in flight: a slice at a time. */
typedef struct drainjob {
    wq_job job;
    ckpts *k;
    ck *c;
    gr__list alink;             /* k->active */
    struct event *timer;        /* its next slice's turn under drain_bandwidth */
    int job_pending;            /* its job is with the workers */
    int phase;                  /* 0 the replica, 1 the destination */
    stage *in;                  /* the staged copy */
    int out_fd, dir_fd;         /* the temporary target; its directory */
    char tmpname[300];
    uint64_t off;
    uint64_t moved;             /* bytes the last slice copied */
    uint64_t slice;             /* bytes per job: an eighth of a second's bandwidth, 1-16 MiB */
    XXH3_state_t *xs;
    int opened;                 /* this phase's target is open (drain_open) */
    setpub *sp;                 /* a set's destination phase */
    int already;                /* a set whose link already pointed at it (a kill after the rename) */
    int finished;               /* this phase's file is in place and journalled */
    int lost;                   /* the staged copy failed its checksum */
    int rc;
    char err[256];
} drainjob;

struct ckpts {
    struct event_base *base;
    workers *w;
    gr_stats *stats;
    ckpt_config cfg;
    char *dir, *replica_dir;
    int dir_fd;
    uint64_t next_id;
    uint64_t reserved;          /* bytes of checkpoints not yet published (nor superseded) */
    uint64_t mem_held;          /* bytes of early puts not yet local (cfg.memory bounds it) */
    gr__list all;               /* every checkpoint remembered, by id */
    unsigned ndone;             /* of them published or superseded */
    gr__list active;            /* drains in flight (drainjob.alink), at most cfg.drains */
    unsigned nactive;
    double bw_next;             /* gr__now_s() from which the next slice may start */
    struct event *timer;        /* the earliest back-off */
    int stopping;
};

const char *ckpt_state_name(ckpt_state s)
{
    static const char *const n[] = { "staged", "local", "replicated", "published", "failed",
                                     "superseded" };
    return (unsigned)s < sizeof(n) / sizeof(n[0]) ? n[s] : "?";
}

static void info_of(const ckpts *k, const ck *c, ckpt_info *i)
{
    i->id = c->id;
    i->dest = c->dest;
    i->state = c->state;
    i->size = c->size;
    i->drained = c->drained;
    i->hash = c->hash;
    i->uid = c->cred.uid;
    i->attempts = c->attempts;
    i->durable = c->state == CKPT_PUBLISHED ||
                 (c->state == CKPT_REPLICATED && k->replica_dir != NULL);
    i->superseded_by = c->superseded_by;
    i->set = c->set;
    i->error = c->error;
}

static void ck_free(ck **cp)
{
    ck *c = *cp;
    if (!c)
        return;
    free(c->dest);
    stage_names_free(&c->names, c->nnames);
    free(c);
    *cp = NULL;
}

/* ---- file helpers (I/O threads) ---- */

/* Replace dir/name with text, atomically and durably. */
static int write_atomic(int dfd, const char *name, const char *text, size_t len)
{
    char tmp[128];
    int fd, rc;

    snprintf(tmp, sizeof(tmp), "%s.tmp", name);
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    rc = gr__pwrite_all(fd, (const uint8_t *)text, len, 0);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    close(fd);
    if (rc == 0 && renameat(dfd, tmp, dfd, name) < 0)
        rc = -errno;
    if (rc == 0)
        rc = gr__fsync_dirat(dfd, ".");
    if (rc < 0)
        unlinkat(dfd, tmp, 0);
    return rc;
}

/* The journal entry of c in state st, with hash as its XXH3 (put_run's,
 * before the loop has c->hash: only fields the loop does not write while
 * the put runs are read). */
static int journal_write_hash(ckpts *k, const ck *c, uint64_t hash, ckpt_state st,
                              const char *why)
{
    char name[64], text[PATH_MAX + 1024];
    size_t n;

    n = (size_t)snprintf(text, sizeof(text),
                         "granary-checkpoint 1\nid %" PRIu64 "\nstate %s\nuid %u\ngid %u\n"
                         "size %" PRIu64 "\nxxh3 %016" PRIx64 "\nroot %d\ngroups",
                         c->id, ckpt_state_name(st), (unsigned)c->cred.uid,
                         (unsigned)c->cred.gid, c->size, hash, c->root);
    for (int i = 0; i < c->cred.ngroups && n < sizeof(text) - 32; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n, " %u", (unsigned)c->cred.groups[i]);
    if (c->set && n < sizeof(text))
        n += (size_t)snprintf(text + n, sizeof(text) - n, "\nkind set");
    if (c->superseded_by && n < sizeof(text))
        n += (size_t)snprintf(text + n, sizeof(text) - n, "\nsuperseded_by %" PRIu64,
                              c->superseded_by);
    if (c->early && n < sizeof(text))
        n += (size_t)snprintf(text + n, sizeof(text) - n, "\nack staged");
    if (why && n < sizeof(text))
        n += (size_t)snprintf(text + n, sizeof(text) - n, "\nerror %.200s", why);
    if (n < sizeof(text))
        n += (size_t)snprintf(text + n, sizeof(text) - n, "\ndest %s\n", c->dest);
    if (n >= sizeof(text))
        return -ENAMETOOLONG;
    snprintf(name, sizeof(name), "%" PRIu64 ".ckpt", c->id);
    return write_atomic(k->dir_fd, name, text, n);
}

/* The journal entry of c in state st (loop, or a job on its own copy). */
static int journal_write(ckpts *k, const ck *c, ckpt_state st, const char *why)
{
    return journal_write_hash(k, c, c->hash, st, why);
}

/* ---- put (I/O thread, then loop) ---- */

/* As c's writer: remove its temporary beside the destination. */
static void dest_unlink_tmp(ckpts *k, const ck *c)
{
    asuser_unlink_tmp(&c->cred, k->cfg.roots[c->root], c->dest, c->id);
}

static void put_run(wq_job *j)
{
    putjob *p = (putjob *)j;
    ckpts *k = p->k;
    ck *c = p->c;
    char name[64];
    struct stat st0, st1;
    uint8_t *buf = NULL;
    XXH3_state_t *xs = NULL;
    stage *out = NULL;
    size_t hn = 0;
    int rc, checked = 0, journalled = 0;

    /* Journalled as staged first, so that a restart knows which temporary
     * beside the destination to remove if the put never finished (and,
     * "ack staged", that an early one was acknowledged: lost, not
     * silently gone). */
    rc = journal_write(k, c, CKPT_STAGED, NULL);
    if (rc < 0) {
        snprintf(p->err, sizeof(p->err), "journal in %s: %s", k->dir, strerror(-rc));
        goto fail;
    }
    journalled = 1;
    rc = asuser_dest_check(&c->cred, k->cfg.roots[c->root], c->dest, c->id, p->err,
                           sizeof(p->err));
    if (rc < 0)
        goto fail;
    checked = 1;
    buf = malloc(CKPT_BUF);
    xs = XXH3_createState();
    if (!buf || !xs) {
        rc = -ENOMEM;
        goto fail;
    }
    XXH3_64bits_reset(xs);
    if (fstat(p->fd, &st0) < 0) {
        rc = -errno;
        goto fail;
    }
    /* A set's header, checked before a byte is copied (a header is at
     * most about 1 MiB: within the first buffer). */
    if (c->set) {
        hn = c->size < CKPT_BUF ? (size_t)c->size : CKPT_BUF;
        if ((rc = gr__pread_all(p->fd, buf, hn, 0)) < 0) {
            snprintf(p->err, sizeof(p->err), "reading the checkpoint set's header: %s",
                     strerror(-rc));
            goto fail;
        }
    }
    /* The staged copy (a set's by member), its space reserved before a
     * byte is copied: a full disk says so now. */
    rc = stage_create(k->dir_fd, c->id, c->set, c->size, buf, hn, &out, &p->names, &p->nnames,
                      p->err, sizeof(p->err));
    if (rc < 0) {
        if (rc != -EINVAL)          /* a set's malformed header says so as it is */
            snprintf(p->err, sizeof(p->err), "staging %" PRIu64 " bytes in %s: %s", c->size,
                     k->dir, strerror(-rc));
        goto fail;
    }
    /* The ack point of an early put: journalled, the destination created
     * as the peer, the space taken.  What fails from here is a checkpoint
     * lost after its acknowledgement (state failed, journalled so). */
    if (p->early) {
        p->past_ack = 1;
        event_active(p->ack_ev, EV_TIMEOUT, 0);
    }
    for (uint64_t off = 0; off < c->size;) {
        size_t n = c->size - off < CKPT_BUF ? (size_t)(c->size - off) : CKPT_BUF;
        if ((rc = gr__pread_all(p->fd, buf, n, off)) < 0) {
            snprintf(p->err, sizeof(p->err), "reading the checkpoint: %s", strerror(-rc));
            goto fail;
        }
        if ((rc = stage_pwrite(out, buf, n, off)) < 0) {
            snprintf(p->err, sizeof(p->err), "writing checkpoint %" PRIu64 " into %s: %s", c->id,
                     k->dir, strerror(-rc));
            goto fail;
        }
        XXH3_64bits_update(xs, buf, n);
        off += n;
    }
    /* A plain file's bytes could have changed under the copy: its size and
     * mtime say.  A sealed memfd's cannot, and its mtime is not the
     * writer's alone to touch (a reader handed it may ftruncate it to its
     * own size), so it is not asked. */
    if (!p->sealed && (fstat(p->fd, &st1) < 0 || st1.st_size != st0.st_size ||
                       st1.st_mtim.tv_sec != st0.st_mtim.tv_sec ||
                       st1.st_mtim.tv_nsec != st0.st_mtim.tv_nsec)) {
        rc = -ESTALE;
        snprintf(p->err, sizeof(p->err), "the checkpoint's source changed while it was staged");
        goto fail;
    }
    if ((rc = stage_sync(out)) < 0) {
        snprintf(p->err, sizeof(p->err), "fsync of checkpoint %" PRIu64 " in %s: %s", c->id,
                 k->dir, strerror(-rc));
        goto fail;
    }
    p->hash = XXH3_64bits_digest(xs);
    rc = journal_write_hash(k, c, p->hash, CKPT_LOCAL, NULL);   /* c->hash is the loop's */
    if (rc < 0) {
        snprintf(p->err, sizeof(p->err), "journal of checkpoint %" PRIu64 ": %s", c->id,
                 strerror(-rc));
        goto fail;
    }
    p->rc = 0;
    goto out;
fail:
    p->rc = rc;
    if (!p->err[0])
        snprintf(p->err, sizeof(p->err), "%s", strerror(-rc));
    stage_close(&out);
    stage_remove(k->dir_fd, c->id);
    stage_names_free(&p->names, p->nnames);
    p->nnames = 0;
    if (checked)
        dest_unlink_tmp(k, c);
    if (journalled && p->past_ack) {
        /* Acknowledged: it stays in the journal, failed, with the reason
         * (if even that cannot be written, "staged" with "ack staged" is
         * read as lost at the next start). */
        char why[256];
        snprintf(why, sizeof(why), CKPT_LOST_EARLY "%.200s", p->err);
        journal_write(k, c, CKPT_FAILED, why);
    } else if (journalled) {
        snprintf(name, sizeof(name), "%" PRIu64 ".ckpt", c->id);
        unlinkat(k->dir_fd, name, 0);
    }
out:
    stage_close(&out);
    XXH3_freeState(xs);
    free(buf);
}

static void drain_kick(ckpts *k);
static void prune(ckpts *k);

/* ---- superseding (loop, then an I/O job) ---- */

/* The clean-up of a superseded checkpoint: its own copy of the entry (the
 * loop may forget the original meanwhile). */
typedef struct cleanjob {
    wq_job job;
    ckpts *k;
    ck c;
} cleanjob;

static void clean_run(wq_job *j)
{
    cleanjob *cj = (cleanjob *)j;
    int rc;

    /* Journal first: a kill before the unlinks leaves a superseded (or
     * failed) entry whose leftovers the next load removes. */
    rc = journal_write(cj->k, &cj->c, cj->c.state,
                       cj->c.state == CKPT_FAILED ? cj->c.error : NULL);
    if (rc < 0)
        log_warn("checkpoint %" PRIu64 ": journal of it %s: %s (said again at the next start)",
                 cj->c.id, ckpt_state_name(cj->c.state), strerror(-rc));
    stage_remove(cj->k->dir_fd, cj->c.id);
    dest_unlink_tmp(cj->k, &cj->c);
}

static void clean_done(wq_job *j)
{
    cleanjob *cj = (cleanjob *)j;

    free(cj->c.dest);
    free(cj);
}

/*
 * c (local or replicated, not draining) will never be published: checkpoint
 * by, newer and for the same destination, is.  Its space is free at once;
 * an I/O job journals it and removes its staged copy and its temporary
 * beside the destination (a replica in replica_dir is kept, as a published
 * checkpoint's is).
 */
static void clean_submit(ckpts *k, const ck *c);

static void supersede(ckpts *k, ck *c, uint64_t by)
{
    c->state = CKPT_SUPERSEDED;
    c->superseded_by = by;
    c->drained = 0;
    snprintf(c->error, sizeof(c->error), "superseded by checkpoint %" PRIu64
             ", newer and published first", by);
    k->reserved -= c->size;
    k->ndone++;
    k->stats->ckpt_superseded++;
    stage_names_free(&c->names, c->nnames);
    c->nnames = 0;
    log_info("checkpoint %" PRIu64 " for %s superseded by %" PRIu64 " (published): dropped",
             c->id, c->dest, by);
    clean_submit(k, c);
}

/*
 * c is superseded or failed (state and error set): an I/O job journals it
 * so and removes its staged copy and its temporary beside the destination
 * (a replica in replica_dir is kept, as a published checkpoint's is).
 */
static void clean_submit(ckpts *k, const ck *c)
{
    cleanjob *cj = calloc(1, sizeof(*cj));

    if (cj) {
        cj->c = *c;
        cj->c.names = NULL;         /* c's, and not needed here */
        cj->c.nnames = 0;
        cj->c.dest = strdup(c->dest);
    }
    if (!cj || !cj->c.dest) {
        /* Its journal still says local: the next load finds it again. */
        log_warn("checkpoint %" PRIu64 ": out of memory removing its staged copy", c->id);
        free(cj);
        return;
    }
    cj->k = k;
    cj->job.run = clean_run;
    cj->job.done = clean_done;
    workers_submit(k->w, &cj->job, WQ_BACKGROUND);
}

/* The newest published checkpoint for c's destination newer than c, or 0. */
static uint64_t newer_published(const ckpts *k, const ck *c)
{
    for (const gr__list *pos = k->all.prev; pos != &k->all; pos = pos->prev) {
        const ck *o = gr__list_entry(pos, ck, link);
        if (o->id <= c->id)
            break;
        if (o->state == CKPT_PUBLISHED && !strcmp(o->dest, c->dest))
            return o->id;
    }
    return 0;
}

/* by is published: every older checkpoint for its destination waiting to
 * drain is superseded (none drains: one drain per destination at a time). */
static void supersede_older(ckpts *k, const ck *by)
{
    gr__list *pos, *tmp;

    gr__list_foreach_safe(pos, tmp, &k->all) {
        ck *o = gr__list_entry(pos, ck, link);
        if (o->id >= by->id)
            break;
        if ((o->state == CKPT_LOCAL || o->state == CKPT_REPLICATED) && !o->draining &&
            !strcmp(o->dest, by->dest))
            supersede(k, o, by->id);
    }
}

/* An early put's acknowledgement (loop): put_run passed the ack point. */
static void on_put_ack(evutil_socket_t fd, short what, void *arg)
{
    putjob *p = arg;
    ckpt_info info;

    (void)fd;
    (void)what;
    if (!p->cb)
        return;
    p->c->mem_fd = p->fd;
    p->k->stats->ckpt_acked_staged++;
    info_of(p->k, p->c, &info);
    p->cb(p->arg, 0, &info, NULL);
    p->cb = NULL;
}

static void put_done(wq_job *j)
{
    putjob *p = (putjob *)j;
    ckpts *k = p->k;
    ck *c = p->c;
    ckpt_info info;

    if (p->ack_ev) {
        event_free(p->ack_ev);      /* its callback, if not run yet, never runs */
        k->mem_held -= c->size;
    }
    c->mem_fd = -1;
    close(p->fd);
    if (j->cancelled) {
        p->rc = -ECANCELED;
        snprintf(p->err, sizeof(p->err), "the daemon is stopping");
    }
    if (p->rc < 0 && p->past_ack) {
        /* Acknowledged (or about to be: then the client is told now) and
         * lost: it stays, failed, so that its writer learns it. */
        log_error("checkpoint %" PRIu64 " for %s, acknowledged while staged, is lost: %s", c->id,
                  c->dest, p->err);
        c->state = CKPT_FAILED;
        snprintf(c->error, sizeof(c->error), CKPT_LOST_EARLY "%.200s", p->err);
        k->reserved -= c->size;
        k->ndone++;
        if (p->cb)
            p->cb(p->arg, p->rc, NULL, p->err);
        prune(k);
    } else if (p->rc < 0) {
        k->reserved -= c->size;
        gr__list_remove(&c->link);
        p->cb(p->arg, p->rc, NULL, p->err);
        ck_free(&c);
    } else {
        uint64_t by;
        c->state = CKPT_LOCAL;
        c->hash = p->hash;
        c->names = p->names;        /* a set's members, readable by name from now */
        c->nnames = p->nnames;
        p->names = NULL;
        k->stats->ckpt_puts++;
        k->stats->ckpt_bytes_staged += c->size;
        /* A newer one for the same destination was acknowledged after this
         * one was created and is published already. */
        if ((by = newer_published(k, c)))
            supersede(k, c, by);
        info_of(k, c, &info);
        log_info("checkpoint %" PRIu64 " local: %" PRIu64 " bytes for %s (uid %u)%s", c->id,
                 c->size, c->dest, (unsigned)c->cred.uid, p->cb ? "" : ", acknowledged staged");
        if (p->cb)
            p->cb(p->arg, 0, &info, NULL);
        drain_kick(k);
    }
    stage_names_free(&p->names, p->nnames);
    free(p);
}

int ckpt_put(ckpts *k, const ckpt_cred *cred, char *norm, int root, int fd, int set,
             int early, ckpt_put_cb cb, void *arg, char *err, size_t errlen)
{
    struct stat st;
    int flags, seals, sealed;
    putjob *p;
    ck *c;

    for (const char *s = norm; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) {
            snprintf(err, errlen, "a checkpoint's destination may not hold control characters");
            return -EINVAL;
        }
    if (root < 0 || root >= k->cfg.nroots || strcmp(norm, k->cfg.roots[root]) == 0) {
        snprintf(err, errlen, "%s is a root, not a file under it", norm);
        return -EISDIR;
    }
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || (flags & O_PATH) || (flags & O_ACCMODE) == O_WRONLY || fstat(fd, &st) < 0 ||
        !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "a checkpoint comes as a readable fd of a regular file or memfd");
        return -EINVAL;
    }
    /* A memfd is sealed so that its bytes cannot change under the copy (a
     * plain file is checked for changes instead). */
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK) < 0) {
        seals = fcntl(fd, F_GET_SEALS);
        if (errno == EBUSY) {
            snprintf(err, errlen, "the checkpoint's memfd is still mapped writable (munmap it first)");
            return -EBUSY;
        }
        if (seals >= 0 && !(seals & F_SEAL_WRITE)) {
            snprintf(err, errlen, "the checkpoint's memfd cannot be sealed against writes");
            return -EINVAL;
        }
    }
    if (fstat(fd, &st) < 0)
        return -errno;
    if ((uint64_t)st.st_size > k->cfg.capacity - k->reserved || k->reserved > k->cfg.capacity) {
        snprintf(err, errlen, "checkpoint staging is full: %" PRIu64 " bytes asked, %" PRIu64
                 " of %" PRIu64 " held by checkpoints not yet published", (uint64_t)st.st_size,
                 k->reserved, k->cfg.capacity);
        k->stats->ckpt_refused++;
        return -ENOSPC;
    }
    /* Early only for bytes that cannot change (a sealed memfd: a plain
     * file could, and is checked only once copied) and within the memory
     * bound; else acknowledged once local, as if not asked. */
    seals = fcntl(fd, F_GET_SEALS);
    sealed = seals >= 0 && (seals & F_SEAL_WRITE) && (seals & F_SEAL_SHRINK) &&
             (seals & F_SEAL_GROW);
    if (early && (!sealed || k->cfg.memory == 0 ||
                  (uint64_t)st.st_size > k->cfg.memory - k->mem_held || k->mem_held > k->cfg.memory))
        early = 0;
    /* Readers before local are handed this memfd: a memfd's inode is mode
     * 0777 whoever made it, so any of them could reopen it writable
     * through /proc and, the bytes sealed, still change its mtime.  0400
     * leaves that to its owner; the copy does not look at the mtime of a
     * sealed memfd anyway (put_run). */
    if (sealed)
        (void)fchmod(fd, 0400);
    p = calloc(1, sizeof(*p));
    c = calloc(1, sizeof(*c));
    if (!p || !c) {
        free(p);
        free(c);
        return -ENOMEM;
    }
    if (early && !(p->ack_ev = event_new(k->base, -1, 0, on_put_ack, p))) {
        free(p);
        free(c);
        return -ENOMEM;
    }
    c->id = k->next_id++;
    c->dest = norm;
    c->root = root;
    c->cred = *cred;
    c->size = (uint64_t)st.st_size;
    c->set = set != 0;
    c->state = CKPT_STAGED;
    c->early = early != 0;
    c->mem_fd = -1;
    gr__list_push_back(&k->all, &c->link);
    k->reserved += c->size;
    if (early)
        k->mem_held += c->size;
    p->k = k;
    p->c = c;
    p->fd = fd;
    p->cb = cb;
    p->arg = arg;
    p->early = early != 0;
    p->sealed = sealed;
    p->job.run = put_run;
    p->job.done = put_done;
    workers_submit(k->w, &p->job, WQ_DEMAND);   /* a client waits on it */
    return 0;
}

/* ---- drains ---- */

static void drain_close(drainjob *d)
{
    stage_close(&d->in);
    if (d->out_fd >= 0)
        close(d->out_fd);
    setpub_free(&d->sp);
    if (d->dir_fd >= 0)
        close(d->dir_fd);
    d->out_fd = d->dir_fd = -1;
    d->opened = 0;
}

/* As the peer, in the destination's directory (d->dir_fd): a set's
 * generation begun from the header of its staged copy. */
static int drain_open_set(drainjob *d, const char *base)
{
    ck *c = d->c;
    size_t n = c->size < (2u << 20) ? (size_t)c->size : (2u << 20);
    uint8_t *hdr = malloc(n ? n : 1);
    uint32_t nf;
    long h;
    int rc;

    if (!hdr)
        return -ENOMEM;
    rc = stage_pread(d->in, hdr, n, 0);
    if (rc < 0) {
        snprintf(d->err, sizeof(d->err), "reading the staged set: %s", strerror(-rc));
    } else if ((h = proto_set_dec_hdr(hdr, n, c->size, &nf, NULL, 0)) <= PROTO_NEED_MORE) {
        snprintf(d->err, sizeof(d->err), "the staged set's header is malformed");
        d->lost = 1;
        rc = -EIO;
    } else {
        rc = setpub_begin(d->dir_fd, base, c->id, hdr, (size_t)h, c->size, &d->sp, &d->already,
                          d->err, sizeof(d->err));
    }
    free(hdr);
    return rc;
}

/* Open this phase's source and target (a fresh temporary file). */
static int drain_open(drainjob *d)
{
    ckpts *k = d->k;
    ck *c = d->c;
    int rc = stage_open(k->dir_fd, c->id, c->size, &d->in);

    if (rc < 0) {
        snprintf(d->err, sizeof(d->err), "staged copy of checkpoint %" PRIu64 " in %s: %s", c->id,
                 k->dir, strerror(-rc));
        d->lost = rc == -ENOENT || rc == -EBADMSG;
        return rc;
    }
    if (d->phase == 0) {
        d->dir_fd = open(k->replica_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (d->dir_fd < 0) {
            rc = -errno;
            snprintf(d->err, sizeof(d->err), "replica_dir %s: %s", k->replica_dir, strerror(-rc));
            return rc;
        }
        snprintf(d->tmpname, sizeof(d->tmpname), ".%" PRIu64 ".tmp", c->id);
        d->out_fd = openat(d->dir_fd, d->tmpname, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (d->out_fd < 0) {
            rc = -errno;
            snprintf(d->err, sizeof(d->err), "replica %.150s/%.40s: %s", k->replica_dir, d->tmpname,
                     strerror(-rc));
        }
    } else {
        asuser_saved sv;
        const char *base;
        rc = asuser_enter(&c->cred, &sv, d->err, sizeof(d->err));
        if (rc == 0)
            d->dir_fd = rc = asuser_open_parent(k->cfg.roots[c->root], c->dest, &base, d->err,
                                                   sizeof(d->err));
        if (rc >= 0 && c->set) {
            rc = drain_open_set(d, base);
        } else if (rc >= 0) {
            rc = 0;
            asuser_tmp_name(d->tmpname, sizeof(d->tmpname), base, c->id);
            d->out_fd = openat(d->dir_fd, d->tmpname,
                               O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (d->out_fd < 0) {
                rc = -errno;
                snprintf(d->err, sizeof(d->err), "%.150s (temporary %.60s): %s", c->dest, d->tmpname,
                         strerror(-rc));
            }
        } else {
            d->dir_fd = -1;
        }
        asuser_leave(&sv);
    }
    if (rc == 0) {
        d->off = 0;
        d->opened = 1;
        XXH3_64bits_reset(d->xs);
    }
    return rc;
}

/* Every byte of a set is in its generation directory: checked, then (as
 * the peer) its manifest, the link renamed over the destination, the old
 * generations cleared; journal; the staged copy removed. */
static int drain_finish_set(drainjob *d)
{
    ckpts *k = d->k;
    ck *c = d->c;
    asuser_saved sv;
    int rc;

    if (!d->already && XXH3_64bits_digest(d->xs) != c->hash) {
        snprintf(d->err, sizeof(d->err), "the staged copy of checkpoint set %" PRIu64
                 " fails its checksum", c->id);
        d->lost = 1;
        return -EIO;
    }
    rc = asuser_enter(&c->cred, &sv, d->err, sizeof(d->err));
    if (rc == 0 && !d->already)
        rc = setpub_finish(d->sp, d->err, sizeof(d->err));
    asuser_leave(&sv);
    if (rc < 0)
        return rc;
    rc = journal_write(k, c, CKPT_PUBLISHED, NULL);
    if (rc < 0) {
        snprintf(d->err, sizeof(d->err), "journal: %s", strerror(-rc));
        return rc;
    }
    stage_remove(k->dir_fd, c->id);
    d->finished = 1;
    return 0;
}

/* The whole file is in the temporary: check, fsync, rename into place,
 * fsync the directory, journal. */
static int drain_finish(drainjob *d)
{
    ckpts *k = d->k;
    ck *c = d->c;
    char final[320];
    int rc = 0;

    if (d->sp && d->phase == 1)
        return drain_finish_set(d);
    if (XXH3_64bits_digest(d->xs) != c->hash) {
        snprintf(d->err, sizeof(d->err), "the staged copy of checkpoint %" PRIu64
                 " fails its checksum", c->id);
        d->lost = 1;
        return -EIO;
    }
    if (fsync(d->out_fd) < 0) {
        rc = -errno;
        snprintf(d->err, sizeof(d->err), "fsync of %s: %s", d->phase ? c->dest : "the replica",
                 strerror(-rc));
        return rc;
    }
    close(d->out_fd);
    d->out_fd = -1;
    if (d->phase == 0) {
        const char *base = strrchr(c->dest, '/') + 1;
        snprintf(final, sizeof(final), "%" PRIu64 "-%.200s", c->id, base);
        if (renameat(d->dir_fd, d->tmpname, d->dir_fd, final) < 0)
            rc = -errno;
    } else {
        asuser_saved sv;
        const char *base = strrchr(c->dest, '/') + 1;
        rc = asuser_enter(&c->cred, &sv, d->err, sizeof(d->err));
        if (rc == 0 && renameat(d->dir_fd, d->tmpname, d->dir_fd, base) < 0)
            rc = -errno;
        asuser_leave(&sv);
    }
    if (rc == 0)
        rc = gr__fsync_dirat(d->dir_fd, ".");
    if (rc < 0) {
        if (!d->err[0])
            snprintf(d->err, sizeof(d->err), "publishing %s: %s", c->dest, strerror(-rc));
        return rc;
    }
    rc = journal_write(k, c, d->phase == 0 ? CKPT_REPLICATED : CKPT_PUBLISHED, NULL);
    if (rc < 0) {
        snprintf(d->err, sizeof(d->err), "journal: %s", strerror(-rc));
        return rc;
    }
    if (d->phase == 1)
        stage_remove(k->dir_fd, c->id);
    d->finished = 1;
    return 0;
}

static void drain_run(wq_job *j)
{
    drainjob *d = (drainjob *)j;
    ck *c = d->c;
    uint8_t *buf = NULL;
    uint64_t end;
    asuser_saved sv;
    int rc = 0, set;

    d->rc = 0;
    d->moved = 0;
    d->err[0] = '\0';
    if (!d->opened && (rc = drain_open(d)) < 0)
        goto out;
    if (d->already) {
        d->off = c->size;
        rc = drain_finish(d);
        goto out;
    }
    set = d->sp != NULL && d->phase == 1;
    buf = malloc(CKPT_BUF);
    if (!buf) {
        rc = -ENOMEM;
        goto out;
    }
    /* A set's files are created in the slice that reaches them: as the peer. */
    if (set && (rc = asuser_enter(&c->cred, &sv, d->err, sizeof(d->err))) < 0) {
        asuser_leave(&sv);
        goto out;
    }
    end = c->size - d->off < d->slice ? c->size : d->off + d->slice;
    while (d->off < end) {
        size_t n = end - d->off < CKPT_BUF ? (size_t)(end - d->off) : CKPT_BUF;
        if ((rc = stage_pread(d->in, buf, n, d->off)) < 0) {
            snprintf(d->err, sizeof(d->err), "reading the staged copy: %s", strerror(-rc));
            d->lost = rc == -EBADMSG;   /* a set's part is not the size its header says */
            break;
        }
        if (set)
            rc = setpub_write(d->sp, d->off, buf, n, d->err, sizeof(d->err));
        else if ((rc = gr__pwrite_all(d->out_fd, buf, n, d->off)) < 0)
            snprintf(d->err, sizeof(d->err), "writing %s: %s",
                     d->phase ? c->dest : "the replica", strerror(-rc));
        if (rc < 0)
            break;
        XXH3_64bits_update(d->xs, buf, n);
        d->off += n;
        d->moved += n;
    }
    if (set)
        asuser_leave(&sv);
    if (rc == 0 && d->off == c->size)
        rc = drain_finish(d);
out:
    free(buf);
    if (rc < 0) {
        d->rc = rc;
        if (d->out_fd >= 0 && d->dir_fd >= 0) {
            close(d->out_fd);
            d->out_fd = -1;
            if (d->phase == 0)
                unlinkat(d->dir_fd, d->tmpname, 0);
            /* A destination's temporary is left: it is the peer's, and the
             * retry truncates it. */
        }
        drain_close(d);
    }
}

static void drain_submit(drainjob *d)
{
    d->job_pending = 1;
    d->job.run = drain_run;
    workers_submit(d->k->w, &d->job, d->k->cfg.demand ? WQ_DEMAND : WQ_BACKGROUND);
}

static void arm_timer(struct event *ev, double secs)
{
    struct timeval tv;

    if (secs < 0)
        secs = 0;
    tv.tv_sec = (time_t)secs;
    tv.tv_usec = (suseconds_t)((secs - (double)(time_t)secs) * 1e6);
    evtimer_add(ev, &tv);
}

/* d's next slice, now or at its turn: every slice of every drain books
 * its bytes' time at drain_bandwidth on one clock, so that the drains
 * together stay within it (and an idle spell earns no burst). */
static void drain_next(drainjob *d)
{
    ckpts *k = d->k;
    uint64_t bw = k->cfg.bandwidth, n;
    double now, start;

    if (bw) {
        n = d->c->size - d->off < d->slice ? d->c->size - d->off : d->slice;
        now = gr__now_s();
        start = k->bw_next > now ? k->bw_next : now;
        k->bw_next = start + (double)n / (double)bw;
        if (start > now) {
            arm_timer(d->timer, start - now);
            return;
        }
    }
    drain_submit(d);
}

static void on_slice_timer(evutil_socket_t fd, short what, void *arg)
{
    drainjob *d = arg;

    (void)fd;
    (void)what;
    if (!d->k->stopping)
        drain_submit(d);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    drain_kick(arg);
}

/* Forget the oldest published or superseded entries past CKPT_KEEP (their
 * journal too). */
static void prune(ckpts *k)
{
    gr__list *pos, *tmp;

    gr__list_foreach_safe(pos, tmp, &k->all) {
        ck *c = gr__list_entry(pos, ck, link);
        char name[64];
        if (k->ndone <= CKPT_KEEP)
            break;
        if (c->state != CKPT_PUBLISHED && c->state != CKPT_SUPERSEDED && c->state != CKPT_FAILED)
            continue;
        snprintf(name, sizeof(name), "%" PRIu64 ".ckpt", c->id);
        unlinkat(k->dir_fd, name, 0);
        gr__list_remove(&c->link);
        ck_free(&c);
        k->ndone--;
    }
}

/* A drain over (no job out, no timer needed): its checkpoint is free to
 * drain again or be superseded. */
static void drain_free(drainjob **dp)
{
    drainjob *d = *dp;

    drain_close(d);
    if (d->timer)
        event_free(d->timer);
    XXH3_freeState(d->xs);
    gr__list_remove(&d->alink);
    d->k->nactive--;
    d->c->draining = 0;
    free(d);
    *dp = NULL;
}

static void drain_done(wq_job *j)
{
    drainjob *d = (drainjob *)j;
    ckpts *k = d->k;
    ck *c = d->c;

    d->job_pending = 0;
    if (j->cancelled || k->stopping) {
        drain_free(&d);
        return;
    }
    if (d->rc < 0) {
        double back = CKPT_BACKOFF_MIN;
        c->attempts++;
        k->stats->ckpt_drain_errors++;
        snprintf(c->error, sizeof(c->error), "%s", d->err);
        for (unsigned i = 1; i < c->attempts && back < CKPT_BACKOFF_MAX; i++)
            back *= 2;
        if (back > CKPT_BACKOFF_MAX)
            back = CKPT_BACKOFF_MAX;
        c->drained = 0;
        if (d->lost) {
            log_error("checkpoint %" PRIu64 " for %s is lost: %s", c->id, c->dest, d->err);
            c->state = CKPT_FAILED;
            k->reserved -= c->size;
            k->ndone++;
            stage_names_free(&c->names, c->nnames);
            c->nnames = 0;
            /* Journalled failed, its copy and temporary removed: once
             * pruned from the list nothing of it is left behind. */
            clean_submit(k, c);
        } else {
            log_warn("checkpoint %" PRIu64 " for %s: drain failed (attempt %u, retry in %.0f s): "
                     "%s", c->id, c->dest, c->attempts, back, d->err);
            c->retry_at = gr__now_s() + back;
        }
        drain_free(&d);
        drain_kick(k);
        return;
    }
    c->drained = d->off;
    k->stats->ckpt_bytes_drained += d->moved;
    if (d->finished) {
        c->error[0] = '\0';
        c->drained = 0;
        if (d->phase == 0) {
            c->state = CKPT_REPLICATED;
            d->phase = 1;
            d->finished = 0;
            d->off = 0;
            drain_close(d);
            drain_next(d);
            return;
        }
        c->state = CKPT_PUBLISHED;
        k->reserved -= c->size;
        k->stats->ckpt_published++;
        k->ndone++;
        log_info("checkpoint %" PRIu64 " published: %s", c->id, c->dest);
        if (k->cfg.published)
            k->cfg.published(k->cfg.published_arg, c->dest);
        supersede_older(k, c);
        drain_free(&d);
        prune(k);
        drain_kick(k);
        return;
    }
    drain_next(d);
}

/* Whether a drain for dest is in flight. */
static int dest_draining(const ckpts *k, const char *dest)
{
    for (const gr__list *pos = k->active.next; pos != &k->active; pos = pos->next)
        if (!strcmp(gr__list_entry(pos, drainjob, alink)->c->dest, dest))
            return 1;
    return 0;
}

/* A drain for c, its first slice submitted: 0 or -ENOMEM. */
static int drain_start(ckpts *k, ck *c)
{
    drainjob *d = calloc(1, sizeof(*d));

    if (!d || !(d->xs = XXH3_createState()) || !(d->timer = evtimer_new(k->base, on_slice_timer, d))) {
        if (d)
            XXH3_freeState(d->xs);
        free(d);
        return -ENOMEM;
    }
    d->k = k;
    d->c = c;
    d->out_fd = d->dir_fd = -1;
    d->phase = (k->replica_dir && c->state < CKPT_REPLICATED) ? 0 : 1;
    d->slice = k->cfg.bandwidth ? k->cfg.bandwidth / 8 : CKPT_SLICE;
    if (d->slice > CKPT_SLICE)
        d->slice = CKPT_SLICE;
    if (d->slice < (1u << 20))
        d->slice = 1u << 20;
    d->job.done = drain_done;
    c->draining = 1;
    gr__list_push_back(&k->active, &d->alink);
    k->nactive++;
    drain_next(d);
    return 0;
}

/* Start drains while fewer than [checkpoint] drains run: in id order, each
 * checkpoint waiting to drain whose back-off has passed and whose
 * destination has no drain in flight (so per destination the oldest ready
 * one goes first); else a timer for the earliest back-off. */
static void drain_kick(ckpts *k)
{
    double now = gr__now_s(), soonest = 0;
    gr__list *pos, *tmp;

    if (k->stopping)
        return;
    gr__list_foreach_safe(pos, tmp, &k->all) {
        ck *c = gr__list_entry(pos, ck, link);
        if (k->nactive >= k->cfg.drains)
            return;                 /* a drain's end kicks again */
        if ((c->state != CKPT_LOCAL && c->state != CKPT_REPLICATED) || c->draining)
            continue;
        if (c->retry_at > now) {
            if (!soonest || c->retry_at < soonest)
                soonest = c->retry_at;
            continue;
        }
        if (dest_draining(k, c->dest))
            continue;
        if (drain_start(k, c) < 0) {
            arm_timer(k->timer, 1.0);
            return;
        }
    }
    if (soonest)
        arm_timer(k->timer, soonest - now);
}

/* ---- set-up: the journal ---- */

/* A state's number, or -1 for a word this daemon does not know. */
static int state_parse(const char *s)
{
    for (int i = CKPT_STAGED; i <= CKPT_SUPERSEDED; i++)
        if (!strcmp(s, ckpt_state_name((ckpt_state)i)))
            return i;
    return -1;
}

/* Read one journal entry: a ck, or NULL (logged). */
static ck *journal_load(ckpts *k, const char *name)
{
    char text[PATH_MAX + 1024], *line, *save = NULL, st[32] = "";
    int fd = openat(k->dir_fd, name, O_RDONLY | O_CLOEXEC), ok = 0;
    ssize_t n;
    ck *c;

    if (fd < 0)
        return NULL;
    n = read(fd, text, sizeof(text) - 1);
    close(fd);
    c = calloc(1, sizeof(*c));
    if (n <= 0 || !c) {
        free(c);
        return NULL;
    }
    text[n] = '\0';
    c->root = -1;
    c->mem_fd = -1;
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        unsigned u;
        if (!strcmp(line, "granary-checkpoint 1"))
            ok |= 1;
        else if (sscanf(line, "id %" SCNu64, &c->id) == 1)
            ok |= 2;
        else if (sscanf(line, "state %31s", st) == 1)
            ok |= 4;
        else if (sscanf(line, "uid %u", &u) == 1)
            c->cred.uid = u;
        else if (sscanf(line, "gid %u", &u) == 1)
            c->cred.gid = u;
        else if (sscanf(line, "size %" SCNu64, &c->size) == 1)
            ok |= 8;
        else if (sscanf(line, "xxh3 %" SCNx64, &c->hash) == 1)
            ok |= 16;
        else if (sscanf(line, "root %d", &c->root) == 1)
            ;
        else if (sscanf(line, "superseded_by %" SCNu64, &c->superseded_by) == 1)
            ;
        else if (!strcmp(line, "kind set"))
            c->set = 1;
        else if (!strcmp(line, "ack staged"))
            c->early = 1;
        else if (!strncmp(line, "error ", 6))
            snprintf(c->error, sizeof(c->error), "%s", line + 6);
        else if (!strncmp(line, "groups", 6)) {
            char *p = line + 6, *e;
            while (*p && c->cred.ngroups < CKPT_MAX_GROUPS) {
                unsigned long g = strtoul(p, &e, 10);
                if (e == p)
                    break;
                c->cred.groups[c->cred.ngroups++] = (gid_t)g;
                p = e;
            }
        } else if (!strncmp(line, "dest ", 5) && line[5] == '/') {
            free(c->dest);
            c->dest = strdup(line + 5);
            ok |= 32;
        }
    }
    /* An unknown state (a newer daemon's) is not taken for "staged", which
     * would remove the checkpoint. */
    if (ok != 63 || !c->dest || c->root < 0 || c->root >= k->cfg.nroots ||
        strncmp(c->dest, k->cfg.roots[c->root], strlen(k->cfg.roots[c->root])) != 0 ||
        state_parse(st) < 0) {
        log_warn("checkpoint journal %s/%s: unreadable, in a state unknown here, or its "
                 "destination is under no root now; left alone", k->dir, name);
        ck_free(&c);
        return NULL;
    }
    c->state = (ckpt_state)state_parse(st);
    return c;
}

static int by_id(const void *a, const void *b)
{
    const ck *x = *(ck *const *)a, *y = *(ck *const *)b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int load(ckpts *k, char *err, size_t errlen)
{
    DIR *dp;
    struct dirent *de;
    ck **v = NULL;
    size_t nv = 0, cap = 0, ndrain = 0;
    int dfd = dup(k->dir_fd);

    if (dfd < 0 || !(dp = fdopendir(dfd))) {
        if (dfd >= 0)
            close(dfd);
        snprintf(err, errlen, "checkpoints %s: %s", k->dir, strerror(errno));
        return -errno;
    }
    while ((de = readdir(dp))) {
        uint64_t id;
        char suf[16];
        if (sscanf(de->d_name, "%" SCNu64 ".%15s", &id, suf) != 2)
            continue;
        if (id >= k->next_id)
            k->next_id = id + 1;
        if (!strcmp(suf, "ckpt")) {
            ck *c = journal_load(k, de->d_name);
            if (!c)
                continue;
            if (nv == cap) {
                void *p = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof(*v));
                if (!p) {
                    ck_free(&c);
                    break;
                }
                v = p;
            }
            v[nv++] = c;
        } else if (!strcmp(suf, "ckpt.tmp")) {
            unlinkat(k->dir_fd, de->d_name, 0);
        }
    }
    closedir(dp);
    /* A staged copy without a journal entry was never acknowledged. */
    dfd = dup(k->dir_fd);
    if (dfd >= 0 && (dp = fdopendir(dfd))) {
        while ((de = readdir(dp))) {
            uint64_t id;
            char suf[16], jn[64];
            struct stat st;
            if (sscanf(de->d_name, "%" SCNu64 ".%15s", &id, suf) != 2 ||
                (strcmp(suf, "data") && strcmp(suf, "set")))
                continue;
            snprintf(jn, sizeof(jn), "%" PRIu64 ".ckpt", id);
            if (fstatat(k->dir_fd, jn, &st, 0) < 0 && errno == ENOENT) {
                log_info("checkpoint %" PRIu64 ": staging never finished; its partial copy removed",
                         id);
                stage_remove(k->dir_fd, id);
            }
        }
        closedir(dp);
    } else if (dfd >= 0) {
        close(dfd);
    }
    if (nv)
        qsort(v, nv, sizeof(*v), by_id);
    for (size_t i = 0; i < nv; i++) {
        ck *c = v[i];
        char name[64];
        if (c->state == CKPT_STAGED && c->early) {
            /* Acknowledged while only in memory, and the daemon stopped
             * before it was local: lost, and said so to its writer. */
            log_error("checkpoint %" PRIu64 " for %s was acknowledged while staged and the daemon "
                      "stopped before it was on NVMe: lost", c->id, c->dest);
            snprintf(c->error, sizeof(c->error), "lost: the daemon stopped before it was on the "
                     "node's NVMe (asked to be acknowledged staged; the writer may not have "
                     "been told yet)");
            dest_unlink_tmp(k, c);
            stage_remove(k->dir_fd, c->id);
            c->state = CKPT_FAILED;
            if (journal_write(k, c, CKPT_FAILED, c->error) < 0)
                log_warn("checkpoint %" PRIu64 ": journal of its loss failed (said again at the "
                         "next start)", c->id);
        }
        if (c->state == CKPT_STAGED) {
            /* Never acknowledged: its temporary, data and entry go. */
            log_info("checkpoint %" PRIu64 ": staging never finished; removed", c->id);
            dest_unlink_tmp(k, c);
            stage_remove(k->dir_fd, c->id);
            snprintf(name, sizeof(name), "%" PRIu64 ".ckpt", c->id);
            unlinkat(k->dir_fd, name, 0);
            ck_free(&c);
            continue;
        }
        gr__list_push_back(&k->all, &c->link);
        if (c->state == CKPT_FAILED) {
            /* Its leftovers, if a kill came between its journal and
             * their removal. */
            stage_remove(k->dir_fd, c->id);
            dest_unlink_tmp(k, c);
            k->ndone++;
        } else if (c->state == CKPT_PUBLISHED || c->state == CKPT_SUPERSEDED) {
            stage_remove(k->dir_fd, c->id);     /* a kill between journal and removal */
            if (c->state == CKPT_SUPERSEDED) {
                dest_unlink_tmp(k, c);
                snprintf(c->error, sizeof(c->error), "superseded by checkpoint %" PRIu64
                         ", newer and published first", c->superseded_by);
            }
            k->ndone++;
        } else if (c->state == CKPT_LOCAL || c->state == CKPT_REPLICATED) {
            k->reserved += c->size;
            ndrain++;
            /* A set staged by member: its names, for reads before publish
             * (-ENOENT: staged whole by an older daemon, read once
             * published; -EBADMSG: its drain finds it lost). */
            if (c->set && stage_names(k->dir_fd, c->id, c->size, &c->names, &c->nnames) < 0)
                c->nnames = 0;
        }
    }
    /* A kill between a publish and the journal of what it superseded. */
    for (gr__list *pos = k->all.next; pos != &k->all; pos = pos->next) {
        ck *c = gr__list_entry(pos, ck, link);
        uint64_t by;
        if ((c->state == CKPT_LOCAL || c->state == CKPT_REPLICATED) &&
            (by = newer_published(k, c))) {
            supersede(k, c, by);
            ndrain--;
        }
    }
    if (nv)
        log_info("checkpoints: %zu in the journal, %zu to drain (resumed)", nv, ndrain);
    free(v);
    prune(k);
    return 0;
}

int ckpt_new(struct event_base *base, workers *w, gr_stats *stats, const ckpt_config *cfg,
             ckpts **out, char *err, size_t errlen)
{
    ckpts *k = calloc(1, sizeof(*k));
    int rc;

    *out = NULL;
    if (!k)
        return -ENOMEM;
    k->base = base;
    k->w = w;
    k->stats = stats;
    k->cfg = *cfg;
    k->dir_fd = -1;
    k->next_id = 1;
    gr__list_init(&k->all);
    gr__list_init(&k->active);
    if (k->cfg.drains < 1)
        k->cfg.drains = 1;
    k->dir = strdup(cfg->dir);
    k->replica_dir = cfg->replica_dir && cfg->replica_dir[0] ? strdup(cfg->replica_dir) : NULL;
    k->timer = evtimer_new(base, on_timer, k);
    if (!k->dir || !k->timer || (cfg->replica_dir && cfg->replica_dir[0] && !k->replica_dir)) {
        rc = -ENOMEM;
        goto fail;
    }
    if (mkdir(k->dir, 0700) < 0 && errno != EEXIST) {
        rc = -errno;
        snprintf(err, errlen, "checkpoints: mkdir %s: %s", k->dir, strerror(-rc));
        goto fail;
    }
    k->dir_fd = open(k->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (k->dir_fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "checkpoints: %s: %s", k->dir, strerror(-rc));
        goto fail;
    }
    rc = load(k, err, errlen);
    if (rc < 0)
        goto fail;
    drain_kick(k);
    *out = k;
    return 0;
fail:
    ckpt_free(&k);
    return rc;
}

int ckpt_each(ckpts *k, uid_t uid, uint64_t id, int (*fn)(void *arg, const ckpt_info *i),
              void *arg)
{
    gr__list *pos, *tmp;
    ckpt_info info;
    int rc;

    gr__list_foreach_safe(pos, tmp, &k->all) {
        ck *c = gr__list_entry(pos, ck, link);
        if ((uid != (uid_t)-1 && c->cred.uid != uid) || (id && c->id != id))
            continue;
        info_of(k, c, &info);
        if ((rc = fn(arg, &info)) < 0)
            return rc;
    }
    return 0;
}

/* Whether norm is DEST/NAME for set c (DEST its destination): 1, else 0. */
static int in_set(const ck *c, const char *norm)
{
    size_t dl = strlen(c->dest);

    return c->set && strncmp(norm, c->dest, dl) == 0 && norm[dl] == '/' && norm[dl + 1] &&
           !strchr(norm + dl + 1, '/');
}

int ckpt_staged_find(const ckpts *k, const char *norm, ckpt_staged *out)
{
    const gr__list *pos;
    const char *slash;

    /* Newest first: an older checkpoint still draining is not what a
     * reader of the destination would see once everything is published. */
    for (pos = k->all.prev; pos != &k->all; pos = pos->prev) {
        const ck *c = gr__list_entry(pos, ck, link);
        if (c->state == CKPT_FAILED || c->state == CKPT_SUPERSEDED)
            continue;
        out->member = -1;
        if (in_set(c, norm)) {
            /* A file of the newest set for its directory: the member of
             * that name, or (not in this set: gone once it is published;
             * the set early and not yet local; staged whole by an older
             * daemon) the file system's until the publish. */
            const char *name = norm + strlen(c->dest) + 1;
            if (c->state != CKPT_LOCAL && c->state != CKPT_REPLICATED)
                return 0;
            for (uint32_t i = 0; i < c->nnames && out->member < 0; i++)
                if (!strcmp(c->names[i], name))
                    out->member = (int)i;
            if (out->member < 0)
                return 0;
        } else if (strcmp(c->dest, norm) != 0) {
            continue;
        } else if (c->set) {
            return 0;               /* the set's link: a directory, not a file */
        }
        out->fd = -1;
        if (c->state == CKPT_STAGED && c->mem_fd >= 0) {
            char fdp[64];       /* acknowledged early: its memfd, sealed, opened read-only */
            snprintf(fdp, sizeof(fdp), "/proc/self/fd/%d", c->mem_fd);
            if ((out->fd = open(fdp, O_RDONLY | O_CLOEXEC)) < 0)
                return 0;
        } else if (c->state != CKPT_LOCAL && c->state != CKPT_REPLICATED) {
            return 0;
        }
        out->id = c->id;
        out->uid = c->cred.uid;
        out->gid = c->cred.gid;
        slash = strrchr(c->dest, '/');
        snprintf(out->tmp, sizeof(out->tmp), "%.*s/", (int)(slash - c->dest), c->dest);
        asuser_tmp_name(out->tmp + strlen(out->tmp), sizeof(out->tmp) - strlen(out->tmp), slash + 1,
                 c->id);
        return 1;
    }
    return 0;
}

int ckpt_staged_open(const ckpts *k, uint64_t id, int member)
{
    char name[64];
    int fd;

    if (member >= 0)
        return stage_member_open(k->dir_fd, id, (uint32_t)member);
    snprintf(name, sizeof(name), "%" PRIu64 ".data", id);
    fd = openat(k->dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

void ckpt_shutdown(ckpts *k)
{
    gr__list *pos, *tmp;

    if (!k)
        return;
    k->stopping = 1;
    if (k->timer)
        evtimer_del(k->timer);
    /* A drain waiting on its timer has no job out: freed now (the others
     * when their job is done or cancelled). */
    gr__list_foreach_safe(pos, tmp, &k->active) {
        drainjob *d = gr__list_entry(pos, drainjob, alink);
        if (!d->job_pending)
            drain_free(&d);
    }
}

void ckpt_free(ckpts **kp)
{
    ckpts *k = *kp;
    gr__list *pos, *tmp;

    if (!k)
        return;
    ckpt_shutdown(k);
    gr__list_foreach_safe(pos, tmp, &k->active) {   /* none after workers_stop */
        drainjob *d = gr__list_entry(pos, drainjob, alink);
        drain_free(&d);
    }
    gr__list_foreach_safe(pos, tmp, &k->all) {
        ck *c = gr__list_entry(pos, ck, link);
        gr__list_remove(&c->link);
        ck_free(&c);
    }
    if (k->timer)
        event_free(k->timer);
    if (k->dir_fd >= 0)
        close(k->dir_fd);
    free(k->dir);
    free(k->replica_dir);
    free(k);
    *kp = NULL;
}
