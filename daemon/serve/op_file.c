/*
 * op_file.c - OPEN (a path to a handle, behind the access proof), OPENX
 * (the same and a read, in one round trip) and CLOSE.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "serve_int.h"

/* What an OPENX asks besides the open. */
typedef struct openx_args {
    uint8_t op;                 /* PROTO_OP_OPEN or PROTO_OP_OPENX */
    uint64_t off;
    uint32_t len;
    uint32_t flags;             /* PROTO_OPENX_* */
} openx_args;

/* An OPEN whose attributes are being fetched. */
typedef struct openreq {
    wq_job job;
    conn *c;
    int proof;                  /* the client's fd of the file, or -1 */
    int judge;                  /* access_check = judge: judge the peer before the open */
    access_cred cred;           /* its credentials, for that */
    int fd;                     /* the daemon's, for the chunk reads, or -1 */
    int kept_proof;             /* fd is a duplicate of the proof (source_stat_proof) */
    int named_proof;            /* ... and the proof's own name was the path: no lookup */
    uint32_t req_id;
    char *norm;
    int root;
    struct stat st;
    int rc;
    char errmsg[256];
    uint64_t t0;                /* gr__now_ns() when received */
    openx_args x;               /* op OPEN or OPENX, and the OPENX's read */
} openreq;

static void fill_attr(proto_attr *a, const srcfile *f)
{
    a->chunk_size = f->chunk_size;
    a->size = (uint64_t)f->st.st_size;
    a->ino = (uint64_t)f->st.st_ino;
    a->dev = (uint64_t)f->st.st_dev;
    a->mtime_sec = f->st.st_mtim.tv_sec;
    a->mtime_nsec = (uint32_t)f->st.st_mtim.tv_nsec;
    a->mode = f->st.st_mode;
    a->blksize = (uint32_t)f->st.st_blksize;
    a->uid = f->st.st_uid;
    a->gid = f->st.st_gid;
    a->nlink = (uint32_t)f->st.st_nlink;
}

/* Whether OPENX's IFCHEAP read of [off, off+len) of f costs nothing the
 * client may not want: the file is one chunk (a small file is read whole
 * after its open), or every chunk of the range is in DRAM already. */
static int cheap_read(conn *c, const srcfile *f, uint64_t off, uint64_t len)
{
    uint64_t size = (uint64_t)f->st.st_size, cs = f->chunk_size;
    uint8_t key[CHUNK_KEY_LEN];

    if (size <= cs)
        return 1;
    if (off >= size || len == 0)
        return 1;
    if (len > size - off)
        len = size - off;
    for (uint64_t i = off / cs; i <= (off + len - 1) / cs; i++) {
        chunk_key(key, f->id, i);
        if (!dram_peek(c->srv->d.dram, key))
            return 0;
    }
    return 1;
}

/* The handle (or, for OPENX with CLOSE, none) and the answer: the
 * attributes, or with OPENX the attributes and the read. */
static void reply_attr(conn *c, uint32_t req_id, srcfile *f, const openx_args *x)
{
    proto_attr a = { 0 };
    int64_t h = 0;
    outmsg *m;

    if (!(x->op == PROTO_OP_OPENX && (x->flags & PROTO_OPENX_CLOSE)))
        h = conn_add_handle(c, f);
    if (h < 0) {
        reply_error(c, x->op, req_id, (int)h,
                    h == -EMFILE ? "too many open files on this connection" : NULL);
        return;
    }
    a.handle = (uint32_t)h;
    fill_attr(&a, f);
    if (x->op == PROTO_OP_OPENX) {
        read_args ra = {
            .op = PROTO_OP_OPENX,
            .req_id = req_id,
            .whole = 1,
            .ra = h > 0 ? &c->ra[h - 1] : NULL,
            .attr = &a,
            .t0 = gr__now_ns(),
        };
        if ((x->flags & PROTO_OPENX_IFCHEAP) && !cheap_read(c, f, x->off, x->len)) {
            openx_reply_status(c, req_id, &a, -EAGAIN);     /* the attributes, nothing read */
            return;
        }
        read_start(c, f, x->off, x->len, &ra);
        return;
    }
    m = outmsg_new(PROTO_ATTR_LEN);
    if (!m) {
        conn_drop_handle(c, (uint32_t)h);
        conn_fail(c, "out of memory for an OPEN reply");
        return;
    }
    proto_enc_attr(m->buf, m->len, req_id, &a);
    conn_send(c, m);
}

/* Whether descriptor fd is open for reading (an access proof's first test). */
static int proof_readable(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    return fl >= 0 && !(fl & O_PATH) &&
           ((fl & O_ACCMODE) == O_RDONLY || (fl & O_ACCMODE) == O_RDWR);
}

/*
 * Access proof: a client gets a handle only if it shows it could open the
 * file itself, by passing its own read fd of it with the OPEN (libgranary
 * does); the file behind the fd must be the one the daemon resolved.  The
 * kernel has judged the client's credentials, ACLs and LSMs included, at
 * its open(2).  Root needs no proof (it may read everything), nor anyone
 * with [daemon] access_check = none; a proof sent is checked all the same,
 * unless judged says access is established already (the judge's verdict,
 * or proof_vs_cache's check of this proof against f).  0; -ENOKEY when a
 * proof is needed and none came (libgranary then sends one); -EACCES when
 * the proof is wrong.
 */
static int check_proof(const conn *c, int proof, int judged, const srcfile *f, char *err,
                       size_t errlen)
{
    struct stat st;

    if (judged)
        return 0;                   /* judged, or a proof already checked against f */
    if (proof < 0) {
        if (c->cred.uid == 0 || strcmp(c->srv->d.cfg->access_check, "none") == 0)
            return 0;
        snprintf(err, errlen, "access proof required: pass your own read fd of %.200s with "
                 "the OPEN (libgranary does)", f->path);
        return -ENOKEY;
    }
    if (!proof_readable(proof)) {
        snprintf(err, errlen, "access proof refused: the fd passed is not open for reading");
        return -EACCES;
    }
    if (fstat(proof, &st) < 0 || st.st_dev != f->st.st_dev || st.st_ino != f->st.st_ino) {
        snprintf(err, errlen, "access proof refused: the fd passed is not %.200s", f->path);
        return -EACCES;
    }
    return 0;
}

/* Answer an OPEN or OPENX of f: a handle, or the proof's refusal.
 * judged: the peer's access to f is established already, so no proof is
 * looked at (access_check = judge has judged it, or proof_vs_cache has
 * checked its proof against f);
 * dataset: f is a registered dataset's (from its manifest), whose
 * directories get no read-ahead across files: its resolutions and
 * judgements would ask the file system what the manifest spares it. */
static void open_reply(conn *c, uint32_t req_id, int proof, int judged, srcfile *f,
                       const openx_args *x, int dataset)
{
    char err[320];
    int rc = check_proof(c, proof, judged, f, err, sizeof(err));

    if (rc < 0) {
        if (rc == -EACCES)
            c->srv->d.stats->access_denied++;
        reply_error(c, x->op, req_id, rc, err);
        return;
    }
    /* The user's hints for this file may fetch into its memory from now on. */
    if ((proof >= 0 || judged) && c->cred.uid != 0)
        proofs_add(c->srv->d.pr, c->cred.uid, f->id);
    reply_attr(c, req_id, f, x);
    if (!c->dira && !c->dead) {
        access_cred cred;
        meta_cred(c, &cred);
        c->dira = dira_stream_new(c->srv->d.dra, &cred);
    }
    if (dataset)
        dira_elsewhere(c->dira);
    else
        dira_opened(c->dira, f->path, f->root);
}

static void open_run(wq_job *j)
{
    openreq *o = (openreq *)j;
    conn *c = o->c;

    struct stat jst;

    /* Judged before the file is opened, so a refused open costs no open
     * and tells nothing of what lies below a directory the peer may not
     * search; then the file opened must be the file judged. */
    if (o->judge) {
        o->rc = judge_read(c->srv->d.jg, o->norm, &o->cred, &jst, o->errmsg, sizeof(o->errmsg));
        if (o->rc < 0)
            return;
    }
    /* A proof that is the file the path names is kept as the file's
     * descriptor: no open of the daemon's own (on a DFS, an open and a
     * close on the metadata service per cold file). */
    o->rc = o->proof >= 0 ? source_stat_proof(c->srv->d.src, o->norm, o->root, o->proof, &o->st,
                                              &o->fd, o->errmsg, sizeof(o->errmsg))
                          : -EAGAIN;
    o->kept_proof = o->rc >= 0;
    o->named_proof = o->rc == 1;
    if (o->rc > 0)
        o->rc = 0;
    if (o->rc == -EAGAIN)
        o->rc = source_stat_open(c->srv->d.src, o->norm, o->root, &o->st, &o->fd, o->errmsg,
                                 sizeof(o->errmsg));
    if (o->rc == 0 && o->judge && (jst.st_dev != o->st.st_dev || jst.st_ino != o->st.st_ino)) {
        close(o->fd);
        o->fd = -1;
        snprintf(o->errmsg, sizeof(o->errmsg), "changed while being judged");
        o->rc = -ESTALE;
    }
}

static void open_done(wq_job *j)
{
    openreq *o = (openreq *)j;
    conn *c = o->c;
    srcfile *f;

    c->inflight--;
    if (c->dead) {
        free(o->norm);
        if (o->rc == 0)
            source_close_later(c->srv->d.src, o->fd);
    } else if (o->rc < 0) {
        if (o->rc == -EACCES && o->judge)
            c->srv->d.stats->access_denied++;
        else
            c->srv->d.stats->source_errors++;
        reply_error(c, o->x.op, o->req_id, o->rc, o->errmsg);
        free(o->norm);
    } else {
        /* A kept proof answers this client alone.  Known by its own name,
         * the name is the dentry's as this node last saw it, which on a DFS
         * another node may have renamed since; and whichever way, it is
         * the client's open file description, whose flags (F_SETFL) its
         * owner may change under every reader's feet.  So it goes into no
         * attribute-cache entry that others are answered from. */
        if (o->kept_proof)
            f = source_proof_file(c->srv->d.src, o->norm, o->root, &o->st, o->fd);
        else
            f = source_install_fd(c->srv->d.src, o->norm, o->root, &o->st, o->fd, gr__now_s());
        o->fd = -1;
        if (o->kept_proof)
            c->srv->d.stats->source_opens_spared++;
        if (o->named_proof)
            c->srv->d.stats->source_lookups_spared++;
        /* A kept proof was checked against the file: nothing to judge. */
        if (f)
            open_reply(c, o->req_id, o->proof, o->judge || o->kept_proof, f, &o->x, 0);
        else
            reply_error(c, o->x.op, o->req_id, -ENOMEM, NULL);
        srcfile_unref(&f);
    }
    if (!c->dead) {
        conn_latency(c, GR_LAT_open, o->t0);
        conn_update_events(c);
    }
    source_close_later(c->srv->d.src, o->proof);   /* a FUSE round trip: not here */
    conn_unref(&o->c);
    free(o);
}

/*
 * OPEN of a file in a ready dataset's manifest, with no operation on the
 * file system: the attributes are the manifest's (or the attribute cache's,
 * which are fresher), and the file is opened at its first chunk read (whose
 * identity check refuses a file changed since, with ESTALE).  With
 * access_check = judge and no proof the peer is judged from the manifest.
 * 1 when answered; 0 to go the file system's way (not in a manifest, or a
 * proof to check against the file as it is); norm is consumed when 1.
 */
static int open_manifest(conn *c, uint32_t req_id, int proof, char **norm, int root,
                         const openx_args *x)
{
    server *s = c->srv;
    int judged = proof < 0 && c->cred.uid != 0 && strcmp(s->d.cfg->access_check, "judge") == 0;
    char err[320];
    meta_hit *h;
    srcfile *f;
    int rc;

    if (!datasets_count(s->d.ds))
        return 0;
    h = malloc(sizeof(*h));
    if (!h)
        return 0;
    rc = meta_lookup(c, *norm, h, err, sizeof(err));
    if (rc == 0 && h->e.is_dir) {
        snprintf(err, sizeof(err), "is a directory");
        rc = -EISDIR;
    }
    if (rc == 0 && h->e.is_other)
        rc = -ENODATA;          /* a link: the file system resolves it (or refuses it) */
    if (rc == 0 && judged)
        rc = meta_judge(c, h->m, h->chain, h->depth, 4, err, sizeof(err));
    if (rc == -ENODATA || (rc < 0 && !judged)) {
        free(h);
        return 0;               /* the file system answers (a proof is the kernel's word) */
    }
    if (rc < 0) {
        free(h);
        if (rc == -EACCES)
            s->d.stats->access_denied++;
        reply_error(c, x->op, req_id, rc, err);
        free(*norm);
        *norm = NULL;
        return 1;
    }
    f = source_lookup(s->d.src, *norm, gr__now_s());
    if (f) {
        s->d.stats->attr_cache_hits++;
        free(*norm);
    } else {
        f = source_install(s->d.src, *norm, root, &h->e.st, gr__now_s());
    }
    *norm = NULL;
    free(h);
    if (!f) {
        reply_error(c, x->op, req_id, -ENOMEM, NULL);
        return 1;
    }
    s->d.stats->dataset_opens++;
    open_reply(c, req_id, proof, judged, f, x, 1);
    srcfile_unref(&f);
    return 1;
}

/* ---- staged checkpoints: read before they are published ---- */

static void open_fs(conn *c, uint32_t req_id, int *proof_slot, char *norm, int root,
                    const openx_args *x, uint64_t t0);

/* An OPEN of a staged checkpoint's destination, judged and opened on an
 * I/O thread. */
typedef struct stagedreq {
    wq_job job;
    conn *c;
    uint32_t req_id;
    int proof;                  /* the client's, kept for the file system's turn */
    char *norm;
    int root;
    openx_args x;
    uint64_t t0;
    ckpt_staged ks;
    int judge;                  /* not the writer, not root: judge the temporary */
    access_cred cred;
    int fd;                     /* the staged copy, read-only */
    struct stat st, jst;
    int rc;
    char errmsg[256];
} stagedreq;

static void staged_run(wq_job *j)
{
    stagedreq *r = (stagedreq *)j;
    server *s = r->c->srv;

    r->fd = -1;
    if (r->judge) {
        r->rc = judge_read(s->d.jg, r->ks.tmp, &r->cred, &r->jst, r->errmsg, sizeof(r->errmsg));
        if (r->rc < 0)
            return;             /* ks.fd closed in staged_done */
    }
    /* Acknowledged early and not yet local: its memfd, opened on the loop. */
    r->fd = r->ks.fd >= 0 ? r->ks.fd : ckpt_staged_open(s->d.ck, r->ks.id, r->ks.member);
    r->ks.fd = -1;
    if (r->fd < 0) {
        r->rc = r->fd;              /* published (and removed) meanwhile */
        return;
    }
    if (fstat(r->fd, &r->st) < 0 || !S_ISREG(r->st.st_mode)) {
        r->rc = -EIO;
        close(r->fd);
        r->fd = -1;
        return;
    }
    r->rc = 0;
}

/* The handle (none for OPENX with CLOSE) and the attributes, flagged
 * STAGED, carrying a read-only fd of the staged copy (for a client that
 * needs a descriptor of the file, as the preload shim does).  An OPENX
 * reads nothing here (read status -EAGAIN: read with READX). */
static void staged_reply(conn *c, uint32_t req_id, srcfile *f, const openx_args *x)
{
    proto_attr a = { 0 };
    int64_t h = 0;
    outmsg *m;
    int fd;

    if (!(x->op == PROTO_OP_OPENX && (x->flags & PROTO_OPENX_CLOSE)))
        h = conn_add_handle(c, f);
    if (h < 0) {
        reply_error(c, x->op, req_id, (int)h,
                    h == -EMFILE ? "too many open files on this connection" : NULL);
        return;
    }
    a.handle = (uint32_t)h;
    fill_attr(&a, f);
    m = outmsg_new(x->op == PROTO_OP_OPENX ? PROTO_OPENX_FIXED + PROTO_READX_PREFIX
                                           : PROTO_ATTR_LEN);
    fd = m ? fcntl(f->fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (!m || fd < 0) {
        free(m);
        if (h > 0)
            conn_drop_handle(c, (uint32_t)h);
        conn_fail(c, "out of memory (or fds) for an OPEN reply");
        return;
    }
    if (x->op == PROTO_OP_OPENX)
        m->len = (size_t)proto_enc_openx_reply(m->buf, m->len, req_id, &a, -EAGAIN, NULL, 0, 0);
    else
        proto_enc_attr(m->buf, m->len, req_id, &a);
    m->iov[0].iov_len = m->len;
    proto_mark_staged(m->buf);
    m->fds[m->nfds++] = fd;
    m->own_last_fd = 1;
    conn_send(c, m);
}

static void staged_done(wq_job *j)
{
    stagedreq *r = (stagedreq *)j;
    conn *c = r->c;
    server *s = c->srv;
    srcfile *f;

    c->inflight--;
    if (r->ks.fd >= 0)
        close(r->ks.fd);            /* not taken by staged_run (refused, or cancelled) */
    if (c->dead || j->cancelled) {
        if (r->fd >= 0)
            close(r->fd);
        free(r->norm);
    } else if (r->rc < 0) {
        /* Refused, or published meanwhile: the file system answers, as it
         * would have without a checkpoint (so a refused peer learns
         * nothing it could not learn there). */
        if (r->rc == -EACCES)
            s->d.stats->access_denied++;
        open_fs(c, r->req_id, &r->proof, r->norm, r->root, &r->x, r->t0);
    } else {
        /* The staged copy's identity (device, inode, size, mtime: never a
         * published file's, so no chunk of it is ever taken for one); the
         * owner and mode the destination will have. */
        r->st.st_uid = r->ks.uid;
        r->st.st_gid = r->ks.gid;
        r->st.st_mode = S_IFREG | (r->judge ? (r->jst.st_mode & 07777) : 0644);
        f = source_pinned(s->d.src, r->norm, r->root, &r->st, r->fd);
        if (f) {
            s->d.stats->ckpt_staged_opens++;
            if (c->cred.uid != 0)
                proofs_add(s->d.pr, c->cred.uid, f->id);
            staged_reply(c, r->req_id, f, &r->x);
        } else {
            reply_error(c, r->x.op, r->req_id, -ENOMEM, NULL);
        }
        srcfile_unref(&f);
        conn_latency(c, GR_LAT_open, r->t0);
    }
    if (!c->dead)
        conn_update_events(c);
    source_close_later(c->srv->d.src, r->proof);
    conn_unref(&r->c);
    free(r);
}

/*
 * If norm is the destination of a checkpoint acknowledged and not yet
 * published, serve its staged copy: to root and the writer at once, to
 * any other peer if the daemon's judge (search on every directory from
 * "/", read on the file: mode bits, groups, ACLs) lets it read the
 * checkpoint's temporary beside the destination, the very inode the
 * publish renames into place.  1 when the request was taken (norm and,
 * via *proof set to -1, the proof with it); 0 to go on as usual.
 */
static int open_staged(conn *c, uint32_t req_id, int *proof, char **norm, int root,
                       const openx_args *x, uint64_t t0)
{
    server *s = c->srv;
    stagedreq *r;

    if (!s->d.ck)
        return 0;
    r = calloc(1, sizeof(*r));
    if (!r)
        return 0;
    if (!ckpt_staged_find(s->d.ck, *norm, &r->ks)) {
        free(r);
        return 0;
    }
    r->judge = c->cred.uid != 0 && c->cred.uid != r->ks.uid;
    if (r->judge)
        meta_cred(c, &r->cred);
    r->c = conn_ref(c);
    r->req_id = req_id;
    r->proof = *proof;
    *proof = -1;
    r->norm = *norm;
    *norm = NULL;
    r->root = root;
    r->x = *x;
    r->t0 = t0;
    r->fd = -1;
    r->job.run = staged_run;
    r->job.done = staged_done;
    c->inflight++;
    workers_submit(s->d.w, &r->job, WQ_DEMAND);
    return 1;
}

/*
 * The file system's (or a manifest's) answer to an OPEN of norm (taken),
 * with the proof in *proof (-1: none; set to -1 when the request keeps
 * it, else it stays the caller's to close).
 */
/*
 * The attribute cache's answer for norm (f: its fresh entry, or NULL)
 * weighed against the client's access proof, a read descriptor it has just
 * opened norm with.  An expired entry of the proof's very file, unchanged
 * (source_lookup_proven), answers this client without the file system:
 * its open was the re-check attr_ttl calls for, and on a DFS that spares
 * the metadata service the daemon's own lookup, open and close of every
 * file each warm epoch (MooseFS, 2000 small files: 6.8 metadata operations
 * a file, against 4.0 reading them directly, and 4.0 now).  The entry is
 * not renewed for others.  A fresh entry the proof does not show unchanged
 * is not trusted either way: the path is resolved again, then check_proof
 * judges, so a file replaced within attr_ttl is served as it now is (it
 * was refused until the entry expired), and an inode number come round
 * again on another file matches no entry (nor chunk: identities have the
 * ctime).  A descriptor not open for
 * reading is left to check_proof to refuse.  Returns the srcfile to answer
 * from (one reference), or NULL to resolve norm; *proven is 1 when the
 * proof was checked against it here (check_proof would pass: no second
 * fstat of a descriptor on the DFS).
 */
static srcfile *proof_vs_cache(conn *c, const char *norm, int proof, srcfile *f, int *proven)
{
    server *s = c->srv;
    struct stat st;

    *proven = 0;
    if (!proof_readable(proof) || fstat(proof, &st) < 0)
        return f;                   /* check_proof refuses it */
    if (f && !source_same_file(&st, &f->st))
        srcfile_unref(&f);
    else if (!f && (f = source_lookup_proven(s->d.src, norm, &st)))
        s->d.stats->attr_proof_revalidations++;
    *proven = f != NULL;
    return f;
}

static void open_fs(conn *c, uint32_t req_id, int *proof_slot, char *norm, int root,
                    const openx_args *x, uint64_t t0)
{
    server *s = c->srv;
    int proof = *proof_slot;
    srcfile *f;
    openreq *o;
    int judged = proof < 0 && c->cred.uid != 0 && strcmp(s->d.cfg->access_check, "judge") == 0;
    int proven = 0;

    /* With access_check = fd a proof is asked for before the file is
     * looked at: the answer is the same whether the file exists, is cached
     * or lies in a directory this peer may not search, so an OPEN without
     * one tells nothing.  (A staged checkpoint was looked for first, and a
     * peer it refused gets this same answer.) */
    if (proof < 0 && c->cred.uid != 0 && strcmp(s->d.cfg->access_check, "fd") == 0) {
        free(norm);
        reply_error(c, x->op, req_id, -ENOKEY,
                    "access proof required: pass your own read fd of the file with the OPEN "
                    "(libgranary does)");
        conn_latency(c, GR_LAT_open, t0);
        return;
    }
    if (open_manifest(c, req_id, proof, &norm, root, x)) {
        conn_latency(c, GR_LAT_open, t0);
        return;
    }
    /* A judged peer is judged on the file system, on an I/O thread. */
    f = judged ? NULL : source_lookup(s->d.src, norm, gr__now_s());
    if (proof >= 0)
        f = proof_vs_cache(c, norm, proof, f, &proven);
    if (f) {
        s->d.stats->attr_cache_hits++;
        free(norm);
        open_reply(c, req_id, proof, proven, f, x, 0);
        srcfile_unref(&f);
        conn_latency(c, GR_LAT_open, t0);
        return;
    }
    /* A proof whose own name is the path, told here without the file
     * system: kept, and answered with no I/O thread's round trip, from a
     * srcfile of this client's (see open_done). */
    if (proof >= 0) {
        struct stat st;
        int kfd;
        if (source_proof_named(s->d.src, norm, root, proof, &st, &kfd)) {
            f = source_proof_file(s->d.src, norm, root, &st, kfd);  /* this client's alone */
            s->d.stats->source_opens_spared++;
            s->d.stats->source_lookups_spared++;
            if (f)
                open_reply(c, req_id, proof, 1, f, x, 0);
            else
                reply_error(c, x->op, req_id, -ENOMEM, NULL);
            srcfile_unref(&f);
            conn_latency(c, GR_LAT_open, t0);
            return;
        }
    }
    o = calloc(1, sizeof(*o));
    if (!o) {
        free(norm);
        reply_error(c, x->op, req_id, -ENOMEM, NULL);
        return;
    }
    *proof_slot = -1;               /* the request keeps the proof until it ends */
    o->proof = proof;
    o->judge = judged;
    if (judged)
        meta_cred(c, &o->cred);
    o->fd = -1;
    o->job.run = open_run;
    o->job.done = open_done;
    o->c = conn_ref(c);
    o->req_id = req_id;
    o->norm = norm;
    o->root = root;
    o->t0 = t0;
    o->x = *x;
    c->inflight++;
    workers_submit(s->d.w, &o->job, WQ_DEMAND);
}

/* OPEN and OPENX: path (len bytes) for c, with the proof in fds[0] if any. */
static void open_path(conn *c, uint32_t req_id, const char *path, size_t len, int *fds, int nfds,
                      const openx_args *x)
{
    server *s = c->srv;
    int proof = nfds > 0 ? fds[0] : -1;
    char err[256];
    char *norm;
    int root, rc;
    uint64_t t0 = gr__now_ns();

    s->d.stats->opens++;
    rc = source_resolve(s->d.src, path, len, &norm, &root, err, sizeof(err));
    if (rc < 0) {
        reply_error(c, x->op, req_id, rc, err);
        conn_latency(c, GR_LAT_open, t0);
        return;
    }
    if (open_staged(c, req_id, &proof, &norm, root, x, t0)) {
        if (nfds > 0)
            fds[0] = proof;
        return;
    }
    open_fs(c, req_id, &proof, norm, root, x, t0);
    if (nfds > 0)
        fds[0] = proof;
}

void op_open(conn *c, const proto_msg *m, int *fds, int nfds)
{
    openx_args x = { .op = PROTO_OP_OPEN };

    open_path(c, m->h.req_id, m->u.open.path, m->u.open.len, fds, nfds, &x);
}

void op_openx(conn *c, const proto_msg *m, int *fds, int nfds)
{
    openx_args x = {
        .op = PROTO_OP_OPENX,
        .off = m->u.openx.off,
        .len = m->u.openx.len,
        .flags = m->u.openx.flags,
    };

    open_path(c, m->h.req_id, m->u.openx.path, m->u.openx.path_len, fds, nfds, &x);
}

/* With PROTO_F_NOREPLY nothing is sent, success or failure (a close of an
 * unknown handle is only counted): the client does not wait for it. */
void op_close(conn *c, const proto_msg *m, int *fds, int nfds)
{
    int quiet = (m->h.flags & PROTO_F_NOREPLY) != 0;

    (void)fds;
    (void)nfds;
    if (conn_drop_handle(c, m->u.handle) < 0) {
        if (quiet)
            c->srv->d.stats->request_errors++;
        else
            reply_error(c, PROTO_OP_CLOSE, m->h.req_id, -EBADF, "no such handle");
        return;
    }
    if (!quiet)
        reply_ok(c, PROTO_OP_CLOSE, m->h.req_id);
}
