/*
 * server.c - client connections and request handling (see server.h).
 *
 * Life of a READ: decode -> look the handle up -> one fetcher_get per chunk
 * the range touches -> when the last chunk arrives, queue one reply whose
 * iovec points into the chunks (no copy before sendmsg) -> send, or keep it
 * queued with the chunk references until the socket drains.
 *
 * A connection is refcounted: the loop's own reference plus one per request
 * in flight.  Closing marks it dead and closes the fd; completions for a
 * dead connection only drop their references.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "proto.h"
#include "server.h"

#define CONN_MAX_HANDLES   4096          /* open files per connection */
#define CONN_MAX_INFLIGHT  256           /* requests in flight per connection */
#define CONN_MAX_OUTQ      (16u << 20)   /* queued reply bytes before we stop reading */
#define CONN_READ_BATCH    64            /* messages taken per wake-up, for fairness */
#define READ_MAX_CHUNKS    PROTO_MAX_EXTENTS /* chunks one READ/READX may touch */
#define CONN_MAX_LEASES    65536         /* leases per connection, whatever their bytes */
#define SNDBUF_WANT        (4 << 20)

typedef struct outmsg outmsg;
struct outmsg {
    outmsg *next;
    size_t len;                 /* bytes in the message */
    int niov;
    struct iovec iov[1 + READ_MAX_CHUNKS];
    chunk *refs[READ_MAX_CHUNKS];
    int nrefs;
    int nfds;                   /* arena segment fds to pass (SCM_RIGHTS), borrowed */
    int fds[PROTO_MAX_EXTENTS];
    uint8_t buf[];              /* header, and a small body if any */
};

typedef struct conn conn;
struct conn {
    server *srv;
    int fd;
    struct event *ev;
    unsigned id;
    uid_t uid;
    gid_t gid;
    pid_t pid;
    int is_admin;               /* root, or in [daemon] admin_group (at connect) */
    unsigned refs;              /* the loop's + one per request in flight */
    int dead;
    int reading;                /* EV_READ armed */
    int writing;                /* EV_WRITE armed */
    srcfile **handles;          /* handle h is handles[h - 1] */
    ra_state *ra;               /* its read-ahead state is ra[h - 1] */
    uint32_t nhandles;          /* slots allocated */
    hint_list *hints;           /* made at the first HINT */
    unsigned inflight;
    uint64_t inflight_bytes;    /* chunk bytes of the READs and READXs in flight */
    chunk **leases;             /* lease L is leases[L - 1]; NULL when free */
    uint32_t *free_leases;      /* stack of free lease ids */
    uint32_t nleases, nfree;    /* slots allocated; ids on the stack */
    uint64_t leased_bytes;      /* arena bytes of the chunks leased */
    uint32_t *segs_sent;        /* per arena segment: the generation whose fd was sent, 0 none */
    outmsg *outq, *outq_tail;
    size_t outq_bytes;
    conn *prev, *next;
};

struct server {
    server_deps d;
    int lfd;
    int bound;                  /* the socket file is ours to remove */
    struct event *lev;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    conn *conns;
    unsigned nconns, next_id;
    gid_t admin_gid;            /* [daemon] admin_group, or (gid_t)-1 */
    uint8_t rbuf[PROTO_MAX_MSG + 1];    /* one past the maximum, to see oversize */
};

typedef struct readreq readreq;

/* The fetch_cb argument for one chunk of a READ. */
typedef struct readslot {
    readreq *r;
    unsigned i;
} readslot;

/* A READ in flight. */
struct readreq {
    conn *c;
    uint8_t op;                 /* PROTO_OP_READ or PROTO_OP_READX */
    uint32_t req_id;
    srcfile *f;
    uint64_t off;
    uint32_t len;
    uint64_t first;             /* index of the first chunk */
    unsigned n, waiting;
    int err;
    char errmsg[256];
    uint64_t budget;            /* bytes counted in c->inflight_bytes */
    uint64_t t0;                /* latency_now() when received */
    int stalled;                /* waited on a miss */
    chunk *chunks[READ_MAX_CHUNKS];
    readslot slots[READ_MAX_CHUNKS];
};

/* An OPEN whose attributes are being fetched. */
typedef struct openreq {
    wq_job job;
    conn *c;
    int proof;                  /* the client's fd of the file, or -1 */
    uint32_t req_id;
    char *norm;
    int root;
    struct stat st;
    int rc;
    char errmsg[256];
    uint64_t t0;                /* latency_now() when received */
} openreq;

static void conn_event(evutil_socket_t fd, short what, void *arg);
static void conn_close(conn *c);

/* CLOCK_MONOTONIC in nanoseconds (vDSO: tens of ns), for request latency. */
static uint64_t latency_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A request of class op (GR_LAT_*) received at t0 has just been answered. */
static void latency_note(conn *c, unsigned op, uint64_t t0)
{
    gr_latency_record(&c->srv->d.stats->latency[op], latency_now() - t0);
}

static conn *conn_ref(conn *c)
{
    c->refs++;
    return c;
}

static void conn_unref(conn **cp)
{
    conn *c = *cp;

    *cp = NULL;
    if (--c->refs)
        return;
    free(c->handles);
    free(c->ra);
    free(c->leases);
    free(c->free_leases);
    free(c->segs_sent);
    free(c);
}

/* Arm the event for what the connection needs now: reading unless it is
 * over its limits, writing while replies are queued. */
static void conn_update_events(conn *c)
{
    int want_read = c->inflight < CONN_MAX_INFLIGHT && c->outq_bytes < CONN_MAX_OUTQ;
    int want_write = c->outq != NULL;
    short what = (short)((want_read ? EV_READ : 0) | (want_write ? EV_WRITE : 0));

    if (want_read == c->reading && want_write == c->writing)
        return;
    event_del(c->ev);
    event_assign(c->ev, c->srv->d.base, c->fd, (short)(what | EV_PERSIST), conn_event, c);
    if (what)
        event_add(c->ev, NULL);
    c->reading = want_read;
    c->writing = want_write;
}

static void outmsg_free(outmsg *m)
{
    for (int i = 0; i < m->nrefs; i++)
        chunk_unref(&m->refs[i]);
    free(m);
}

/* Try to send the queue head-first.  Returns 0, or -1 if the connection
 * failed (and was closed). */
static int conn_flush(conn *c)
{
    while (c->outq) {
        outmsg *m = c->outq;
        struct msghdr mh = { .msg_iov = m->iov, .msg_iovlen = (size_t)m->niov };
        union {
            char buf[CMSG_SPACE(sizeof(int) * PROTO_MAX_EXTENTS)];
            struct cmsghdr align;
        } ctl;
        ssize_t n;

        if (m->nfds) {
            struct cmsghdr *cm;
            memset(&ctl, 0, sizeof(ctl));   /* CMSG_SPACE padding too */
            mh.msg_control = ctl.buf;
            mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)m->nfds);
            cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)m->nfds);
            memcpy(CMSG_DATA(cm), m->fds, sizeof(int) * (size_t)m->nfds);
        }
        n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n < 0) {
            log_debug("client %u: sendmsg: %s", c->id, strerror(errno));
            conn_close(c);
            return -1;
        }
        c->outq = m->next;
        if (!c->outq)
            c->outq_tail = NULL;
        c->outq_bytes -= m->len;
        outmsg_free(m);
    }
    conn_update_events(c);
    return 0;
}

/* Queue m and try to send. */
static void conn_send(conn *c, outmsg *m)
{
    if (c->dead) {
        outmsg_free(m);
        return;
    }
    m->next = NULL;
    if (c->outq_tail)
        c->outq_tail->next = m;
    else
        c->outq = m;
    c->outq_tail = m;
    c->outq_bytes += m->len;
    conn_flush(c);
}

/* A message of hdr + body bytes copied from body (may be NULL when blen is
 * 0).  NULL on out-of-memory. */
static outmsg *outmsg_new(size_t blen)
{
    outmsg *m = calloc(1, sizeof(*m) + PROTO_HDR_LEN + blen);

    if (!m)
        return NULL;
    m->len = PROTO_HDR_LEN + blen;
    m->iov[0].iov_base = m->buf;
    m->iov[0].iov_len = PROTO_HDR_LEN + blen;
    m->niov = 1;
    return m;
}

static void reply_error(conn *c, uint8_t op, uint32_t req_id, int err, const char *text)
{
    outmsg *m = outmsg_new(PROTO_MAX_ERRMSG);

    c->srv->d.stats->request_errors++;
    if (!m)
        return;
    m->len = (size_t)proto_enc_error(m->buf, PROTO_HDR_LEN + PROTO_MAX_ERRMSG, op, req_id,
                                     err, text ? text : strerror(-err));
    m->iov[0].iov_len = m->len;
    conn_send(c, m);
}

/* Append a handle for f (the connection takes a reference).  Returns the
 * handle or -EMFILE / -ENOMEM. */
static int64_t conn_add_handle(conn *c, srcfile *f)
{
    uint32_t h;

    for (h = 0; h < c->nhandles; h++)
        if (!c->handles[h])
            break;
    if (h == c->nhandles) {
        uint32_t n = c->nhandles ? c->nhandles * 2 : 16;
        srcfile **nh;
        if (c->nhandles >= CONN_MAX_HANDLES)
            return -EMFILE;
        if (n > CONN_MAX_HANDLES)
            n = CONN_MAX_HANDLES;
        ra_state *nra;
        nh = realloc(c->handles, n * sizeof(*nh));
        if (!nh)
            return -ENOMEM;
        memset(nh + c->nhandles, 0, (n - c->nhandles) * sizeof(*nh));
        c->handles = nh;
        nra = realloc(c->ra, n * sizeof(*nra));
        if (!nra)
            return -ENOMEM;
        c->ra = nra;
        c->nhandles = n;
    }
    c->handles[h] = srcfile_ref(f);
    memset(&c->ra[h], 0, sizeof(c->ra[h]));
    return h + 1;
}

static srcfile *conn_handle(conn *c, uint32_t h)
{
    return h >= 1 && h <= c->nhandles ? c->handles[h - 1] : NULL;
}

/* Lease ch to the client: the chunk (and its arena block) stays put until
 * the client releases it or disconnects.  Returns the lease id, or -1 when
 * the client is at its lease limits (it gets a copy instead). */
static int64_t conn_add_lease(conn *c, chunk *ch)
{
    gr_stats *st = c->srv->d.stats;
    uint32_t id;

    if (c->leased_bytes + ch->cap > c->srv->d.cfg->dram_max_leased)
        return -1;
    if (c->nfree == 0) {
        uint32_t n = c->nleases ? c->nleases * 2 : 64;
        chunk **nl;
        uint32_t *nf;
        if (c->nleases >= CONN_MAX_LEASES)
            return -1;
        nl = realloc(c->leases, n * sizeof(*nl));
        if (!nl)
            return -1;
        c->leases = nl;
        nf = realloc(c->free_leases, n * sizeof(*nf));
        if (!nf)
            return -1;
        c->free_leases = nf;
        for (uint32_t i = n; i > c->nleases; i--) {
            c->leases[i - 1] = NULL;
            c->free_leases[c->nfree++] = i;     /* lowest ids on top */
        }
        c->nleases = n;
    }
    id = c->free_leases[--c->nfree];
    c->leases[id - 1] = chunk_ref(ch);
    c->leased_bytes += ch->cap;
    st->leases_active++;
    st->leased_bytes += ch->cap;
    st->leases_granted++;
    return id;
}

/* Give lease id back.  0, or -1 if the client did not hold it. */
static int conn_release_lease(conn *c, uint32_t id)
{
    gr_stats *st = c->srv->d.stats;
    chunk *ch;

    if (id == 0 || id > c->nleases || !c->leases[id - 1])
        return -1;
    ch = c->leases[id - 1];
    c->leases[id - 1] = NULL;
    c->free_leases[c->nfree++] = id;
    c->leased_bytes -= ch->cap;
    st->leases_active--;
    st->leased_bytes -= ch->cap;
    chunk_unref(&ch);
    return 0;
}

static void handle_release(conn *c, const proto_msg *m)
{
    for (uint32_t i = 0; i < m->u.release.count; i++)
        if (conn_release_lease(c, proto_release_at(m, i)) < 0)
            c->srv->d.stats->lease_errors++;
    if (!c->dead)
        conn_update_events(c);
}

/* Whether this client has been sent segment seg's fd; marks it sent. */
/* 1 if segment seg's fd (its current generation) must go to c with this
 * reply, 0 if c has it already, -1 on out-of-memory. */
static int conn_seg_first(conn *c, uint32_t seg)
{
    arena *ar = dram_arena(c->srv->d.dram);
    uint32_t gen = arena_segment_gen(ar, seg);

    if (!c->segs_sent) {
        c->segs_sent = calloc(arena_segments(ar), sizeof(*c->segs_sent));
        if (!c->segs_sent)
            return -1;
    }
    if (c->segs_sent[seg] == gen)
        return 0;
    c->segs_sent[seg] = gen;
    return 1;
}

static void reply_attr(conn *c, uint32_t req_id, srcfile *f)
{
    proto_attr a = { 0 };
    int64_t h = conn_add_handle(c, f);
    outmsg *m;

    if (h < 0) {
        reply_error(c, PROTO_OP_OPEN, req_id, (int)h,
                    h == -EMFILE ? "too many open files on this connection" : NULL);
        return;
    }
    a.handle = (uint32_t)h;
    a.chunk_size = f->chunk_size;
    a.size = (uint64_t)f->st.st_size;
    a.ino = (uint64_t)f->st.st_ino;
    a.dev = (uint64_t)f->st.st_dev;
    a.mtime_sec = f->st.st_mtim.tv_sec;
    a.mtime_nsec = (uint32_t)f->st.st_mtim.tv_nsec;
    a.mode = f->st.st_mode;
    a.blksize = (uint32_t)f->st.st_blksize;
    a.uid = f->st.st_uid;
    a.gid = f->st.st_gid;
    a.nlink = (uint32_t)f->st.st_nlink;
    m = outmsg_new(PROTO_ATTR_LEN);
    if (!m)
        return;
    proto_enc_attr(m->buf, m->len, req_id, &a);
    conn_send(c, m);
}

/*
 * Access proof: a client gets a handle only if it shows it could open the
 * file itself, by passing its own read fd of it with the OPEN (libgranary
 * does); the file behind the fd must be the one the daemon resolved.  The
 * kernel has judged the client's credentials, ACLs and LSMs included, at
 * its open(2).  Root needs no proof (it may read everything), nor anyone
 * with [daemon] access_check = none; a proof sent is checked all the same.
 * 0; -ENOKEY when a proof is needed and none came (libgranary then sends
 * one); -EACCES when the proof is wrong.
 */
static int check_proof(const conn *c, int proof, const srcfile *f, char *err, size_t errlen)
{
    struct stat st;
    int fl;

    if (proof < 0) {
        if (c->uid == 0 || strcmp(c->srv->d.cfg->access_check, "none") == 0)
            return 0;
        snprintf(err, errlen, "access proof required: pass your own read fd of %.200s with "
                 "the OPEN (libgranary does)", f->path);
        return -ENOKEY;
    }
    fl = fcntl(proof, F_GETFL);
    if (fl < 0 || (fl & O_PATH) || ((fl & O_ACCMODE) != O_RDONLY && (fl & O_ACCMODE) != O_RDWR)) {
        snprintf(err, errlen, "access proof refused: the fd passed is not open for reading");
        return -EACCES;
    }
    if (fstat(proof, &st) < 0 || st.st_dev != f->st.st_dev || st.st_ino != f->st.st_ino) {
        snprintf(err, errlen, "access proof refused: the fd passed is not %.200s", f->path);
        return -EACCES;
    }
    return 0;
}

/* Answer an OPEN of f: a handle, or the proof's refusal. */
static void open_reply(conn *c, uint32_t req_id, int proof, srcfile *f)
{
    char err[320];
    int rc = check_proof(c, proof, f, err, sizeof(err));

    if (rc < 0) {
        if (rc == -EACCES)
            c->srv->d.stats->access_denied++;
        reply_error(c, PROTO_OP_OPEN, req_id, rc, err);
        return;
    }
    reply_attr(c, req_id, f);
}

static void open_run(wq_job *j)
{
    openreq *o = (openreq *)j;
    conn *c = o->c;

    o->rc = source_stat(c->srv->d.src, o->norm, o->root, &o->st, o->errmsg, sizeof(o->errmsg));
}

static void open_done(wq_job *j)
{
    openreq *o = (openreq *)j;
    conn *c = o->c;
    srcfile *f;

    c->inflight--;
    if (c->dead) {
        free(o->norm);
    } else if (o->rc < 0) {
        c->srv->d.stats->source_errors++;
        reply_error(c, PROTO_OP_OPEN, o->req_id, o->rc, o->errmsg);
        free(o->norm);
    } else {
        f = source_install(c->srv->d.src, o->norm, o->root, &o->st, source_now());
        if (f)
            open_reply(c, o->req_id, o->proof, f);
        else
            reply_error(c, PROTO_OP_OPEN, o->req_id, -ENOMEM, NULL);
        srcfile_unref(&f);
    }
    if (!c->dead) {
        latency_note(c, GR_LAT_open, o->t0);
        conn_update_events(c);
    }
    if (o->proof >= 0)
        close(o->proof);
    conn_unref(&o->c);
    free(o);
}

static void handle_open(conn *c, const proto_msg *m, int proof)
{
    server *s = c->srv;
    char err[256];
    char *norm;
    int root, rc;
    srcfile *f;
    openreq *o;
    uint64_t t0 = latency_now();

    s->d.stats->opens++;
    rc = source_resolve(s->d.src, m->u.open.path, m->u.open.len, &norm, &root, err, sizeof(err));
    if (rc < 0) {
        reply_error(c, PROTO_OP_OPEN, m->h.req_id, rc, err);
        latency_note(c, GR_LAT_open, t0);
        if (proof >= 0)
            close(proof);
        return;
    }
    f = source_lookup(s->d.src, norm, source_now());
    if (f) {
        s->d.stats->attr_cache_hits++;
        free(norm);
        open_reply(c, m->h.req_id, proof, f);
        srcfile_unref(&f);
        latency_note(c, GR_LAT_open, t0);
        if (proof >= 0)
            close(proof);
        return;
    }
    o = calloc(1, sizeof(*o));
    if (!o) {
        free(norm);
        reply_error(c, PROTO_OP_OPEN, m->h.req_id, -ENOMEM, NULL);
        if (proof >= 0)
            close(proof);
        return;
    }
    o->proof = proof;
    o->job.run = open_run;
    o->job.done = open_done;
    o->c = conn_ref(c);
    o->req_id = m->h.req_id;
    o->norm = norm;
    o->root = root;
    o->t0 = t0;
    c->inflight++;
    workers_submit(s->d.w, &o->job, WQ_DEMAND);
}

static void handle_close(conn *c, const proto_msg *m)
{
    srcfile *f = conn_handle(c, m->u.handle);
    outmsg *o;

    if (!f) {
        reply_error(c, PROTO_OP_CLOSE, m->h.req_id, -EBADF, "no such handle");
        return;
    }
    c->handles[m->u.handle - 1] = NULL;
    srcfile_unref(&f);
    o = outmsg_new(0);
    if (!o)
        return;
    proto_enc_ok(o->buf, o->len, PROTO_OP_CLOSE, m->h.req_id);
    conn_send(c, o);
}

/* READ: the bytes, inline.  The message's iovec points into the chunks
 * and keeps them alive until sent. */
static void read_reply(conn *c, readreq *r)
{
    uint64_t pos = r->off, end = r->off + r->len, cs = r->f->chunk_size;
    outmsg *m = outmsg_new(0);
    uint32_t body;

    if (!m) {
        reply_error(c, PROTO_OP_READ, r->req_id, -ENOMEM, NULL);
        return;
    }
    for (unsigned i = 0; i < r->n; i++) {
        chunk *ch = r->chunks[i];
        uint64_t cstart = (r->first + i) * cs;
        uint64_t from = pos - cstart;
        uint64_t to = end - cstart < ch->len ? end - cstart : ch->len;
        m->iov[m->niov].iov_base = ch->data + from;
        m->iov[m->niov].iov_len = (size_t)(to - from);
        m->niov++;
        m->refs[m->nrefs++] = chunk_ref(ch);
        pos = cstart + to;
    }
    /* Every chunk holds its full length (fetch guarantees it), so the
     * slices add up to r->len; the header states what is really sent. */
    body = (uint32_t)(pos - r->off);
    m->len = PROTO_HDR_LEN + body;
    proto_encode_hdr(m->buf, PROTO_OP_READ, PROTO_F_REPLY, r->req_id, 0, body);
    c->srv->d.stats->bytes_served += body;
    conn_send(c, m);
}

/*
 * READX: arena chunks go out as extents under a lease (no copy at all);
 * the first chunk that cannot (a heap chunk, or the client at its lease
 * limit) goes inline, up to PROTO_MAX_DATA, and ends the reply.  The reply
 * may so cover less than asked: the client asks again for the rest.
 */
static void readx_reply(conn *c, readreq *r)
{
    arena *ar = dram_arena(c->srv->d.dram);
    uint64_t pos = r->off, end = r->off + r->len, cs = r->f->chunk_size;
    proto_extent ext[PROTO_MAX_EXTENTS];
    size_t fixed = PROTO_READX_PREFIX + PROTO_MAX_EXTENTS * PROTO_EXTENT_LEN;
    outmsg *m = outmsg_new(fixed);
    uint32_t n = 0, inl = 0;
    ssize_t hlen;
    unsigned i;

    if (!m) {
        reply_error(c, PROTO_OP_READX, r->req_id, -ENOMEM, NULL);
        return;
    }
    for (i = 0; i < r->n; i++) {
        chunk *ch = r->chunks[i];
        uint64_t cstart = (r->first + i) * cs;
        uint64_t from = pos - cstart;
        uint64_t to = end - cstart < ch->len ? end - cstart : ch->len;
        int64_t lease;
        int first;

        /* Shared memory only from the client's own uid's segments: a
         * chunk another uid's read brought in goes inline (copied). */
        if (!ch->ar || arena_segment_owner(ar, ch->blk.seg) != (int64_t)c->uid ||
            (lease = conn_add_lease(c, ch)) < 0)
            break;
        first = conn_seg_first(c, ch->blk.seg);
        if (first < 0) {
            conn_release_lease(c, (uint32_t)lease);
            break;
        }
        ext[n].flags = 0;
        if (first) {
            m->fds[m->nfds++] = arena_segment_fd(ar, ch->blk.seg);
            arena_segment_exposed(ar, ch->blk.seg);
            ext[n].flags = PROTO_EXTENT_FD;
        }
        ext[n].seg = ch->blk.seg;
        ext[n].lease = (uint32_t)lease;
        ext[n].off = ch->blk.off + from;
        ext[n].len = (uint32_t)(to - from);
        n++;
        pos = cstart + to;
    }
    /* The rest goes inline, as much as one message carries. */
    for (; i < r->n && inl < PROTO_MAX_DATA; i++) {
        chunk *ch = r->chunks[i];
        uint64_t cstart = (r->first + i) * cs;
        uint64_t from = pos - cstart;
        uint64_t to = end - cstart < ch->len ? end - cstart : ch->len;
        if (to - from > PROTO_MAX_DATA - inl)
            to = from + PROTO_MAX_DATA - inl;
        m->iov[m->niov].iov_base = ch->data + from;
        m->iov[m->niov].iov_len = (size_t)(to - from);
        m->niov++;
        m->refs[m->nrefs++] = chunk_ref(ch);
        inl += (uint32_t)(to - from);
        pos += to - from;
    }
    hlen = proto_enc_readx_reply(m->buf, PROTO_HDR_LEN + fixed, r->req_id, ext, n, inl);
    m->iov[0].iov_len = (size_t)hlen;
    m->len = (size_t)hlen + inl;
    c->srv->d.stats->bytes_served += pos - r->off;
    c->srv->d.stats->extents_served += pos - r->off - inl;
    conn_send(c, m);
}

/* All chunks of r are in (or one failed): answer and free r. */
static void read_finish(readreq *r)
{
    conn *c = r->c;

    c->inflight--;
    c->inflight_bytes -= r->budget;
    if (r->stalled) {
        c->srv->d.stats->stalled_reads++;
        c->srv->d.stats->stall_microseconds += (latency_now() - r->t0) / 1000;
    }
    if (c->dead)
        ;
    else if (r->err < 0)
        reply_error(c, r->op, r->req_id, r->err, r->errmsg);
    else if (r->op == PROTO_OP_READX)
        readx_reply(c, r);
    else
        read_reply(c, r);
    for (unsigned i = 0; i < r->n; i++)
        chunk_unref(&r->chunks[i]);
    if (!c->dead) {
        latency_note(c, GR_LAT_read, r->t0);
        conn_update_events(c);
    }
    srcfile_unref(&r->f);
    conn_unref(&r->c);
    free(r);
}

/* fetch_cb for one chunk of a READ; the first error's message is kept. */
static void read_chunk_cb(void *arg, chunk *ch, int err, const char *errmsg)
{
    readslot *slot = arg;
    readreq *r = slot->r;
    unsigned i = slot->i;

    if (err < 0) {
        if (r->err == 0) {
            r->err = err;
            snprintf(r->errmsg, sizeof(r->errmsg), "%s", errmsg ? errmsg : strerror(-err));
        }
    } else {
        r->chunks[i] = chunk_ref(ch);
    }
    if (--r->waiting == 0)
        read_finish(r);
}

static void handle_read(conn *c, const proto_msg *m)
{
    uint8_t op = m->h.op;
    srcfile *f = conn_handle(c, m->u.read.handle);
    uint64_t size, off = m->u.read.off, len = m->u.read.len, cs;
    readreq *r;
    unsigned n;
    uint64_t t0 = latency_now();

    if (!f) {
        reply_error(c, op, m->h.req_id, -EBADF, "no such handle");
        latency_note(c, GR_LAT_read, t0);
        return;
    }
    size = (uint64_t)f->st.st_size;
    cs = f->chunk_size;
    if (off >= size || len == 0) {
        outmsg *o = outmsg_new(PROTO_READX_PREFIX);
        if (o) {
            ssize_t hl = op == PROTO_OP_READX
                             ? proto_enc_readx_reply(o->buf, o->len, m->h.req_id, NULL, 0, 0)
                             : proto_enc_ok(o->buf, o->len, PROTO_OP_READ, m->h.req_id);
            o->len = (size_t)hl;
            o->iov[0].iov_len = o->len;
            conn_send(c, o);
        }
        latency_note(c, GR_LAT_read, t0);
        return;
    }
    if (len > size - off)
        len = size - off;
    /* A READX may ask for many chunks; it gets the first READ_MAX_CHUNKS and
     * asks again.  (A READ is at most PROTO_MAX_DATA, a few chunks.) */
    n = (unsigned)((off + len - 1) / cs - off / cs + 1);
    if (n > READ_MAX_CHUNKS) {
        n = READ_MAX_CHUNKS;
        len = (off / cs + n) * cs - off;
    }
    /* A client may keep a quarter of the DRAM tier in flight or leased, and
     * always one chunk: asking for more than memory can hold would push chunks out to
     * the heap only to fetch them again when the client asks for the rest.
     * (READX only: a READ is small and must cover what it asks.) */
    if (op == PROTO_OP_READX) {
        dram_stats ds;
        uint64_t cap;
        dram_get_stats(c->srv->d.dram, &ds);
        cap = ds.capacity_bytes / 4;
        while (n > 1 && c->inflight_bytes + c->leased_bytes + (uint64_t)n * cs > cap)
            n--;
        if ((off / cs + n) * cs - off < len)
            len = (off / cs + n) * cs - off;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        reply_error(c, op, m->h.req_id, -ENOMEM, NULL);
        return;
    }
    r->op = op;
    r->t0 = t0;
    r->budget = (uint64_t)n * cs;
    c->inflight_bytes += r->budget;
    r->c = conn_ref(c);
    r->req_id = m->h.req_id;
    r->f = srcfile_ref(f);
    r->off = off;
    r->len = (uint32_t)len;
    r->first = off / cs;
    r->n = n;
    /* +1 so that callbacks running synchronously (DRAM hits) cannot finish
     * the request before every chunk has been asked for. */
    r->waiting = n + 1;
    c->inflight++;
    for (unsigned i = 0; i < n; i++) {
        r->slots[i].r = r;
        r->slots[i].i = i;
        fetcher_get(c->srv->d.fx, f, r->first + i, (int64_t)c->uid, read_chunk_cb, &r->slots[i]);
    }
    r->stalled = r->waiting > 1;        /* some chunk was not in DRAM */
    prefetch_readahead(c->srv->d.pf, &c->ra[m->u.read.handle - 1], f, off, len, (int64_t)c->uid);
    if (--r->waiting == 0)
        read_finish(r);
}

/* ---- ADMIN ---- */

/* An ADMIN command in flight: phase 0 on an I/O thread finds the files
 * (one, or every file below a directory) and their identities; the loop
 * acts on DRAM; phase 1 on an I/O thread acts on the NVMe tier; the loop
 * answers. */
#define ADMIN_MAX_FILES (1u << 22)      /* files one command may cover */

typedef struct adminreq {
    wq_job job;
    conn *c;
    uint32_t req_id;
    uint8_t cmd;
    int phase;
    char *norm;
    int root;
    uint8_t (*ids)[SOURCE_ID_LEN];      /* identities of the files covered */
    size_t nids, cap;
    long dram_n, nvme_n;
    int rc;
    char text[1024];
} adminreq;

/* source_walk_cb: collect one file's identity. */
static int admin_collect(void *arg, const uint8_t id[SOURCE_ID_LEN])
{
    adminreq *a = arg;

    if (a->nids == a->cap) {
        size_t n = a->cap ? a->cap * 2 : 64;
        void *p;
        if (n > ADMIN_MAX_FILES)
            return -E2BIG;
        p = realloc(a->ids, n * SOURCE_ID_LEN);
        if (!p)
            return -ENOMEM;
        a->ids = p;
        a->cap = n;
    }
    memcpy(a->ids[a->nids++], id, SOURCE_ID_LEN);
    return 0;
}

/* Reply with status 0 and text as the body. */
static void reply_text(conn *c, uint8_t op, uint32_t req_id, const char *text, size_t len)
{
    outmsg *m;

    if (len > PROTO_MAX_BODY)
        len = PROTO_MAX_BODY;
    m = outmsg_new(len);
    if (!m)
        return;
    proto_encode_hdr(m->buf, op, PROTO_F_REPLY, req_id, 0, (uint32_t)len);
    memcpy(m->buf + PROTO_HDR_LEN, text, len);
    conn_send(c, m);
}

/* Whether the peer on connection fd (uid, primary gid) may run admin
 * commands: root, or a member of admin_gid.  The supplementary groups come
 * from SO_PEERGROUPS, the kernel's record of the peer's credentials at
 * connect(2), like SO_PEERCRED: nothing to race with, and no need to read
 * the peer's /proc/PID/status, which the unit's ProtectProc=invisible hides
 * from the daemon's user.  Fails closed: no groups, no admin. */
static int peer_is_admin(const server *s, int fd, uid_t uid, gid_t gid)
{
    gid_t small[64], *groups = small;
    socklen_t len = sizeof(small);
    int ok = 0;

    if (uid == 0)
        return 1;
    if (s->admin_gid == (gid_t)-1)
        return 0;
    if (gid == s->admin_gid)
        return 1;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
        /* ERANGE: more than 64 groups; len is what they need. */
        if (errno != ERANGE || !(groups = malloc(len)) ||
            getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
            log_debug("SO_PEERGROUPS: %s", strerror(errno));
            if (groups != small)
                free(groups);
            return 0;
        }
    }
    for (size_t i = 0; i < len / sizeof(gid_t); i++)
        if (groups[i] == s->admin_gid)
            ok = 1;
    if (groups != small)
        free(groups);
    return ok;
}

static void admin_run(wq_job *j)
{
    adminreq *a = (adminreq *)j;
    server *s = a->c->srv;
    int pin = a->cmd == PROTO_ADMIN_PIN;

    if (a->cmd == PROTO_ADMIN_HEALTH) {
        a->rc = source_check_roots(s->d.src, a->text, sizeof(a->text));
        return;
    }
    if (a->phase == 0) {
        a->rc = source_walk(s->d.src, a->norm, a->root, admin_collect, a, a->text,
                            sizeof(a->text));
        if (a->rc == -E2BIG)
            snprintf(a->text, sizeof(a->text), "more than %u files under %.200s", ADMIN_MAX_FILES,
                     a->norm);
        return;
    }
    if (!s->d.nvme)
        return;
    a->nvme_n = (pin || a->cmd == PROTO_ADMIN_UNPIN)
                    ? store_pin_files(s->d.nvme, (const uint8_t (*)[16])a->ids, a->nids, pin)
                    : store_drop_files(s->d.nvme, (const uint8_t (*)[16])a->ids, a->nids);
}

static void admin_health_reply(adminreq *a)
{
    server *s = a->c->srv;
    char out[1024];
    dram_stats ds;
    int n;

    dram_get_stats(s->d.dram, &ds);
    if (a->rc < 0) {
        n = snprintf(out, sizeof(out), "unhealthy: %s\n", a->text);
    } else {
        n = snprintf(out, sizeof(out), "ok: %d source roots readable, dram %llu%% used",
                     s->d.cfg->nroots,
                     (unsigned long long)(ds.capacity_bytes ? ds.used_bytes * 100 / ds.capacity_bytes : 0));
        if (s->d.nvme) {
            store_stats ns;
            store_get_stats(s->d.nvme, &ns);
            n += snprintf(out + n, sizeof(out) - (size_t)n, ", nvme %llu%% used",
                          (unsigned long long)(ns.capacity_bytes ? ns.used_bytes * 100 / ns.capacity_bytes : 0));
            /* A failing or full device is survivable (reads go to DRAM and
             * the source) but an operator must hear of it. */
            if (ns.state != STORE_STATE_OK)
                n = snprintf(out, sizeof(out),
                             "unhealthy: nvme tier %s (%llu I/O errors, %llu out-of-space errors); "
                             "serving from dram and the source\n",
                             store_state_name(ns.state), (unsigned long long)ns.io_errors,
                             (unsigned long long)ns.space_errors);
            else if (ns.io_errors || ns.checksum_errors)
                n += snprintf(out + n, sizeof(out) - (size_t)n,
                              " (%llu I/O errors, %llu checksum errors so far)\n",
                              (unsigned long long)ns.io_errors,
                              (unsigned long long)ns.checksum_errors);
            else
                n += snprintf(out + n, sizeof(out) - (size_t)n, "\n");
        } else {
            n += snprintf(out + n, sizeof(out) - (size_t)n, ", no nvme tier\n");
        }
    }
    reply_text(a->c, PROTO_OP_ADMIN, a->req_id, out, (size_t)n);
}

static void admin_done(wq_job *j)
{
    adminreq *a = (adminreq *)j;
    conn *c = a->c;
    server *s = c->srv;
    const char *verb;
    char out[512];
    int n;

    if (c->dead)
        goto out;
    if (a->cmd == PROTO_ADMIN_HEALTH) {
        admin_health_reply(a);
        goto out;
    }
    if (a->phase == 0) {
        int pin = a->cmd == PROTO_ADMIN_PIN;
        if (a->rc < 0) {
            reply_error(c, PROTO_OP_ADMIN, a->req_id, a->rc, a->text);
            goto out;
        }
        if (a->cmd == PROTO_ADMIN_INVALIDATE)
            source_forget(s->d.src, a->norm);   /* a file's; a directory's files age out */
        a->dram_n = (pin || a->cmd == PROTO_ADMIN_UNPIN)
                        ? dram_pin_files(s->d.dram, (const uint8_t (*)[16])a->ids, a->nids, pin)
                        : dram_drop_files(s->d.dram, (const uint8_t (*)[16])a->ids, a->nids);
        a->phase = 1;
        workers_submit(s->d.w, &a->job, WQ_DEMAND);
        return;
    }
    verb = a->cmd == PROTO_ADMIN_PIN ? "pinned" : a->cmd == PROTO_ADMIN_UNPIN ? "unpinned"
         : a->cmd == PROTO_ADMIN_EVICT ? "evicted" : "invalidated";
    n = snprintf(out, sizeof(out), "%s: %zu files, %ld chunks in dram, %ld on nvme%s\n", verb,
                 a->nids, a->dram_n, a->nvme_n,
                 a->cmd == PROTO_ADMIN_PIN ? " (and their chunks cached from now on)" : "");
    reply_text(c, PROTO_OP_ADMIN, a->req_id, out, (size_t)n);
out:
    c->inflight--;
    if (!c->dead)
        conn_update_events(c);
    free(a->norm);
    free(a->ids);
    conn_unref(&a->c);
    free(a);
}

/*
 * WARMUP: "id=N seal=0|1 bw=BYTES" on the first line, then one path per
 * line; every path must pass the roots or the batch is refused whole.
 * The reply is the job's id.  WARMUP_CANCEL: the id.
 */
static void handle_warmup(conn *c, const proto_msg *m)
{
    server *s = c->srv;
    char *arg = strndup(m->u.admin.arg, m->u.admin.len), *line, *save = NULL;
    char **norms = NULL, err[320], idtext[32];
    int *roots = NULL, rc = 0, seal = 0;
    unsigned long long id = 0, bw = 0;
    size_t n = 0, cap = 0;
    uint32_t jid;

    if (!arg) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOMEM, NULL);
        return;
    }
    if (m->u.admin.cmd == PROTO_ADMIN_WARMUP_CANCEL) {
        char *end;
        id = strtoull(arg, &end, 10);
        rc = *end || id == 0 || id > UINT32_MAX ? -EINVAL : warmup_cancel(s->d.wu, (uint32_t)id);
        free(arg);
        if (rc < 0)
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc,
                        rc == -EINVAL ? "usage: a warmup job id" : "no such running warmup job");
        else
            reply_text(c, PROTO_OP_ADMIN, m->h.req_id, "cancelled", 9);
        return;
    }
    line = strtok_r(arg, "\n", &save);
    if (!line || sscanf(line, "id=%llu seal=%d bw=%llu", &id, &seal, &bw) != 3 || id > UINT32_MAX) {
        free(arg);
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EINVAL,
                    "warmup: the first line must be \"id=N seal=0|1 bw=BYTES\"");
        return;
    }
    while ((line = strtok_r(NULL, "\n", &save))) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            void *p1 = realloc(norms, nc * sizeof(*norms)), *p2;
            if (!p1) {
                rc = -ENOMEM;
                break;
            }
            norms = p1;
            p2 = realloc(roots, nc * sizeof(*roots));
            if (!p2) {
                rc = -ENOMEM;
                break;
            }
            roots = p2;
            cap = nc;
        }
        rc = source_resolve(s->d.src, line, strlen(line), &norms[n], &roots[n], err, sizeof(err));
        if (rc < 0)
            break;
        n++;
    }
    jid = (uint32_t)id;
    if (rc == 0)
        rc = warmup_add(s->d.wu, &jid, norms, roots, n, seal != 0, bw);
    for (size_t i = 0; i < n; i++)
        free(norms[i]);
    free(norms);
    free(roots);
    free(arg);
    if (rc < 0) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc,
                    rc == -ENOENT ? "no such open warmup job" : rc == -ENOMEM ? NULL : err);
        return;
    }
    snprintf(idtext, sizeof(idtext), "%" PRIu32, jid);
    reply_text(c, PROTO_OP_ADMIN, m->h.req_id, idtext, strlen(idtext));
}

static void handle_admin(conn *c, const proto_msg *m)
{
    server *s = c->srv;
    uint8_t cmd = m->u.admin.cmd;
    char err[256];
    adminreq *a;

    if (cmd == PROTO_ADMIN_CONFIG) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) {
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOMEM, NULL);
            return;
        }
        config_dump(s->d.cfg, f);
        fclose(f);
        reply_text(c, PROTO_OP_ADMIN, m->h.req_id, text, len);
        free(text);
        return;
    }
    if (cmd == PROTO_ADMIN_WARMUP_STATUS) {
        char *text = warmup_status(s->d.wu);
        if (!text)
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOMEM, NULL);
        else
            reply_text(c, PROTO_OP_ADMIN, m->h.req_id, text, strlen(text));
        free(text);
        return;
    }
    if (cmd != PROTO_ADMIN_HEALTH && !c->is_admin) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EPERM,
                    "admin commands are for root and the [daemon] admin_group");
        return;
    }
    if (cmd == PROTO_ADMIN_WARMUP || cmd == PROTO_ADMIN_WARMUP_CANCEL) {
        handle_warmup(c, m);
        return;
    }
    a = calloc(1, sizeof(*a));
    if (!a) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOMEM, NULL);
        return;
    }
    a->cmd = cmd;
    if (cmd != PROTO_ADMIN_HEALTH) {
        int rc = source_resolve(s->d.src, m->u.admin.arg, m->u.admin.len, &a->norm, &a->root,
                                err, sizeof(err));
        if (rc < 0) {
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc, err);
            free(a);
            return;
        }
    }
    a->job.run = admin_run;
    a->job.done = admin_done;
    a->c = conn_ref(c);
    a->req_id = m->h.req_id;
    c->inflight++;
    workers_submit(s->d.w, &a->job, WQ_DEMAND);
}

static void handle_hello(conn *c, const proto_msg *m)
{
    proto_hello h = {
        .version = PROTO_VERSION,
        .max_msg = PROTO_MAX_MSG,
        .max_data = PROTO_MAX_DATA,
        .chunk_size = (uint32_t)c->srv->d.cfg->chunk_size,
    };
    outmsg *o;

    if (m->u.hello.version != PROTO_VERSION) {
        reply_error(c, PROTO_OP_HELLO, m->h.req_id, -EPROTONOSUPPORT,
                    "protocol version not supported");
        return;
    }
    o = outmsg_new(PROTO_HELLO_LEN);
    if (!o)
        return;
    proto_enc_hello(o->buf, o->len, PROTO_F_REPLY, m->h.req_id, &h);
    conn_send(c, o);
}

static void handle_stats(conn *c, const proto_msg *m)
{
    gr_stats st;
    size_t off = 0, cap = PROTO_MAX_BODY;
    outmsg *o = outmsg_new(cap);
    int rc = 0;

    if (!o)
        return;
    server_snapshot(c->srv, &st);
#define GR_STATS_PUT(kind, name, help) \
    rc |= proto_stats_put(o->buf + PROTO_HDR_LEN, cap, &off, #name, st.name);
    GR_STATS(GR_STATS_PUT)
#undef GR_STATS_PUT
    if (rc < 0)                     /* only if the table outgrew a message */
        log_error("stats reply truncated");
    proto_encode_hdr(o->buf, PROTO_OP_STATS, PROTO_F_REPLY, m->h.req_id, 0, (uint32_t)off);
    o->len = PROTO_HDR_LEN + off;
    o->iov[0].iov_len = o->len;
    conn_send(c, o);
}

static void handle_hint(conn *c, const proto_msg *m)
{
    outmsg *o;
    int rc;

    if (!c->hints && !(c->hints = hint_list_new(c->srv->d.pf, c->uid, c->gid))) {
        reply_error(c, PROTO_OP_HINT, m->h.req_id, -ENOMEM, NULL);
        return;
    }
    rc = hint_list_append(c->hints, m);
    if (rc < 0) {
        reply_error(c, PROTO_OP_HINT, m->h.req_id, rc,
                    rc == -E2BIG ? "the hint list would exceed [prefetch] hint_max_entries" : NULL);
        return;
    }
    o = outmsg_new(0);
    if (!o)
        return;
    proto_enc_ok(o->buf, o->len, PROTO_OP_HINT, m->h.req_id);
    conn_send(c, o);
}

/* Decode and act on one received message of n bytes in s->rbuf. */
static void conn_dispatch(conn *c, size_t n, int truncated, int proof)
{
    server *s = c->srv;
    proto_msg m;
    size_t used;
    int rc;

    s->d.stats->requests++;
    rc = truncated ? -EMSGSIZE : proto_decode(s->rbuf, n, &m, &used);
    if (rc == 0 && used != n)
        rc = -EPROTO;               /* one message per packet, nothing after it */
    if (rc == PROTO_NEED_MORE)
        rc = -EPROTO;               /* a packet is a whole message */
    if (rc == 0 && (m.h.flags & PROTO_F_REPLY))
        rc = -EPROTO;
    if (rc < 0) {
        proto_hdr h;
        /* Answer with the request id when the header was readable, so the
         * client can match the error; otherwise id 0. */
        int hrc = proto_decode_hdr(s->rbuf, n, &h);
        uint32_t id = (hrc == 0 || hrc == -EMSGSIZE) ? h.req_id : 0;
        uint8_t op = (hrc == 0 || hrc == -EMSGSIZE) ? h.op : 0;
        char text[128];
        snprintf(text, sizeof(text), "malformed request (%s)", strerror(-rc));
        log_debug("client %u: %s", c->id, text);
        reply_error(c, op ? op : PROTO_OP_HELLO, id, rc, text);
        if (proof >= 0)
            close(proof);
        return;
    }
    switch (m.h.op) {
    case PROTO_OP_HELLO:
        handle_hello(c, &m);
        break;
    case PROTO_OP_OPEN:
        handle_open(c, &m, proof);
        proof = -1;
        break;
    case PROTO_OP_CLOSE:
        handle_close(c, &m);
        break;
    case PROTO_OP_READ:
    case PROTO_OP_READX:
        handle_read(c, &m);
        break;
    case PROTO_OP_RELEASE:
        handle_release(c, &m);
        break;
    case PROTO_OP_ADMIN:
        handle_admin(c, &m);
        break;
    case PROTO_OP_STATS:
        handle_stats(c, &m);
        break;
    case PROTO_OP_HINT:
        handle_hint(c, &m);
        break;
    default:
        reply_error(c, m.h.op, m.h.req_id, -EOPNOTSUPP, "unknown operation");
        break;
    }
    if (proof >= 0)
        close(proof);             /* only an OPEN takes one */
}

static void conn_readable(conn *c)
{
    server *s = c->srv;

    for (int i = 0; i < CONN_READ_BATCH && !c->dead; i++) {
        union {
            char buf[CMSG_SPACE(sizeof(int) * 4)];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = { s->rbuf, sizeof(s->rbuf) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                             .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
        int proof = -1;
        ssize_t n;

        if (c->inflight >= CONN_MAX_INFLIGHT || c->outq_bytes >= CONN_MAX_OUTQ)
            break;                  /* back-pressure: leave the rest unread */
        n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            if (n < 0)
                log_debug("client %u: recvmsg: %s", c->id, strerror(errno));
            conn_close(c);
            return;
        }
        /* An OPEN may carry the client's own fd of the file (its access
         * proof); keep the first fd passed, close any other. */
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                continue;
            for (size_t k = 0; k < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
                if (proof < 0)
                    proof = fd;
                else
                    close(fd);
            }
        }
        conn_dispatch(c, (size_t)n, (mh.msg_flags & MSG_TRUNC) != 0, proof);
    }
    if (!c->dead)
        conn_update_events(c);
}

static void conn_event(evutil_socket_t fd, short what, void *arg)
{
    conn *c = arg;

    (void)fd;
    conn_ref(c);
    if ((what & EV_WRITE) && !c->dead)
        conn_flush(c);
    if ((what & EV_READ) && !c->dead)
        conn_readable(c);
    conn_unref(&c);
}

/* Disconnect: drop handles and queued replies, close the fd, and drop the
 * loop's reference.  In-flight requests hold the struct until they end. */
static void conn_close(conn *c)
{
    server *s = c->srv;

    if (c->dead)
        return;
    c->dead = 1;
    log_debug("client %u (pid %d uid %u) disconnected", c->id, (int)c->pid, (unsigned)c->uid);
    event_free(c->ev);
    c->ev = NULL;
    close(c->fd);
    c->fd = -1;
    while (c->outq) {
        outmsg *m = c->outq;
        c->outq = m->next;
        outmsg_free(m);
    }
    c->outq_tail = NULL;
    c->outq_bytes = 0;
    for (uint32_t h = 0; h < c->nhandles; h++)
        srcfile_unref(&c->handles[h]);
    hint_list_free(&c->hints);
    for (uint32_t l = 1; l <= c->nleases; l++)
        conn_release_lease(c, l);     /* a client that goes away releases everything */
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
    s->d.stats->connections = s->nconns;
    conn_unref(&c);
}

/* Connections open for uid. */
static unsigned uid_conns(const server *s, uid_t uid)
{
    unsigned n = 0;

    for (const conn *c = s->conns; c; c = c->next)
        n += c->uid == uid;
    return n;
}

static void server_accept(evutil_socket_t lfd, short what, void *arg)
{
    server *s = arg;

    (void)what;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        struct ucred cred = { 0 };
        socklen_t clen = sizeof(cred);
        int sndbuf = SNDBUF_WANT;
        conn *c;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_warn("accept: %s", strerror(errno));
            return;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0)
            log_warn("SO_PEERCRED: %s", strerror(errno));
        if (s->nconns >= (unsigned)s->d.cfg->max_clients ||
            uid_conns(s, cred.uid) >= (unsigned)s->d.cfg->max_clients_per_uid) {
            uint8_t buf[PROTO_HDR_LEN + PROTO_MAX_ERRMSG];
            ssize_t n = proto_enc_error(buf, sizeof(buf), PROTO_OP_HELLO, 0, -EUSERS,
                                        s->nconns >= (unsigned)s->d.cfg->max_clients
                                            ? "too many clients (max_clients)"
                                            : "too many clients of this user (max_clients_per_uid)");
            if (send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
                log_debug("refused client: %s", strerror(errno));
            close(fd);
            s->d.stats->connections_refused++;
            continue;
        }
        c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        /* Larger send buffers let a whole READ reply go out in one call;
         * the kernel caps this at net.core.wmem_max. */
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
        c->srv = s;
        c->fd = fd;
        c->id = ++s->next_id;
        c->uid = cred.uid;
        c->gid = cred.gid;
        c->pid = cred.pid;
        c->is_admin = peer_is_admin(s, fd, cred.uid, cred.gid);
        c->refs = 1;
        c->ev = event_new(s->d.base, fd, EV_READ | EV_PERSIST, conn_event, c);
        if (!c->ev || event_add(c->ev, NULL) < 0) {
            if (c->ev)
                event_free(c->ev);
            close(fd);
            free(c);
            continue;
        }
        c->reading = 1;
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
        s->nconns++;
        s->d.stats->connections = s->nconns;
        s->d.stats->connections_total++;
        log_debug("client %u connected: pid %d uid %u gid %u", c->id, (int)c->pid,
                  (unsigned)c->uid, (unsigned)c->gid);
    }
}

/* mkdir -p of the socket's directory (0755: the socket's own mode guards it). */
static int make_parent_dirs(const char *path, char *err, size_t errlen)
{
    char tmp[sizeof(((struct sockaddr_un *)0)->sun_path)];

    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST) {
            int e = errno;
            snprintf(err, errlen, "mkdir %s: %s", tmp, strerror(e));
            return -e;
        }
        *p = '/';
    }
    return 0;
}

int server_start(const server_deps *deps, server **out, char *err, size_t errlen)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    server *s = calloc(1, sizeof(*s));
    int rc;

    if (!s)
        return -ENOMEM;
    s->d = *deps;
    s->lfd = -1;
    s->admin_gid = (gid_t)-1;
    if (deps->cfg->admin_group[0]) {
        struct group *g = getgrnam(deps->cfg->admin_group);
        if (g)
            s->admin_gid = g->gr_gid;
        else
            log_info("admin_group %s does not exist: admin commands are for root only",
                     deps->cfg->admin_group);
    }
    snprintf(s->path, sizeof(s->path), "%s", deps->cfg->socket);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->path);
    rc = make_parent_dirs(s->path, err, errlen);
    if (rc < 0)
        goto fail;
    s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0) {
        rc = -errno;
        snprintf(err, errlen, "socket: %s", strerror(errno));
        goto fail;
    }
    /* A socket file left by a crash is replaced; one that answers belongs
     * to a running daemon and is not. */
    if (connect(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN) {
        snprintf(err, errlen, "%s: another granaryd is already listening", s->path);
        rc = -EADDRINUSE;
        goto fail;
    }
    close(s->lfd);
    s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0) {
        rc = -errno;
        snprintf(err, errlen, "socket: %s", strerror(errno));
        goto fail;
    }
    unlink(s->path);
    if (bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
        s->bound = 1;
    if (!s->bound || chmod(s->path, deps->cfg->socket_mode) < 0 || listen(s->lfd, 512) < 0) {
        rc = -errno;
        snprintf(err, errlen, "listen on %s: %s", s->path, strerror(errno));
        goto fail;
    }
    s->lev = event_new(deps->base, s->lfd, EV_READ | EV_PERSIST, server_accept, s);
    if (!s->lev || event_add(s->lev, NULL) < 0) {
        rc = -ENOMEM;
        snprintf(err, errlen, "event_new failed");
        goto fail;
    }
    *out = s;
    return 0;
fail:
    server_shutdown(s);
    free(s);
    return rc;
}

void server_shutdown(server *s)
{
    if (s->lev) {
        event_free(s->lev);
        s->lev = NULL;
    }
    if (s->lfd >= 0) {
        close(s->lfd);
        s->lfd = -1;
    }
    if (s->bound) {
        unlink(s->path);
        s->bound = 0;
    }
    while (s->conns)
        conn_close(s->conns);
}

void server_free(server **sp)
{
    server *s = *sp;

    if (!s)
        return;
    server_shutdown(s);
    free(s);
    *sp = NULL;
}

void server_snapshot(server *s, gr_stats *out)
{
    dram_stats ds;

    *out = *s->d.stats;
    dram_get_stats(s->d.dram, &ds);
    out->dram_used_bytes = ds.used_bytes;
    out->dram_cached_bytes = ds.cached_bytes;
    out->dram_heap_fallbacks = ds.heap_fallbacks;
    out->dram_segment_renewals = ds.segment_renewals;
    out->dram_not_admitted = ds.not_admitted;
    out->dram_pinned_bytes = ds.pinned_bytes;
    out->dram_capacity_bytes = ds.capacity_bytes;
    out->dram_chunks = ds.chunks;
    out->evictions_dram = ds.evictions;
    out->fetches_inflight = fetcher_inflight(s->d.fx);
    out->source_running = fetcher_running(s->d.fx);
    out->source_queued = fetcher_queued(s->d.fx);
    out->prefetch_wasted = ds.prefetch_wasted;
    out->warmup_jobs_active = warmup_active(s->d.wu);
    prefetcher_snapshot(s->d.pf, out);
    out->writeback_queue_bytes = fetcher_writeback_bytes(s->d.fx);
    out->connections = s->nconns;
    if (s->d.nvme) {
        store_stats ns;
        store_get_stats(s->d.nvme, &ns);
        out->nvme_used_bytes = ns.used_bytes;
        out->nvme_capacity_bytes = ns.capacity_bytes;
        out->nvme_chunks = ns.chunks;
        out->evictions_nvme = ns.evictions;
        out->nvme_not_admitted = ns.not_admitted;
        out->nvme_pinned_bytes = ns.pinned_bytes;
        out->nvme_state = (uint64_t)ns.state;
        out->nvme_io_errors = ns.io_errors;
        out->nvme_space_errors = ns.space_errors;
        out->nvme_offline_skips = ns.offline_skips;
    }
}
