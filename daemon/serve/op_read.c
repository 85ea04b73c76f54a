/*
 * op_read.c - READ (inline bytes), READX (shared-memory extents under
 * leases) and RELEASE.
 *
 * Life of a read: look the handle up -> one fetcher_get per chunk the range
 * touches -> when the last chunk arrives, one reply whose iovec points into
 * the chunks (no copy before sendmsg), or extents into the arena -> send,
 * or keep it queued with the chunk references until the socket drains.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "serve_int.h"

typedef struct readreq readreq;

/* The fetch_cb argument for one chunk of a read. */
typedef struct readslot {
    readreq *r;
    unsigned i;
} readslot;

/* A READ, READX or OPENX in flight. */
struct readreq {
    conn *c;
    uint8_t op;                 /* PROTO_OP_READ, PROTO_OP_READX or PROTO_OP_OPENX */
    int whole;                  /* extents cover whole chunks (READX WHOLE, OPENX) */
    proto_attr attr;            /* OPENX: the reply's attributes */
    uint32_t req_id;
    srcfile *f;
    uint64_t off;
    uint32_t len;
    uint64_t first;             /* index of the first chunk */
    unsigned n, waiting;
    int err;
    char errmsg[256];
    uint64_t budget;            /* bytes counted in c->inflight_bytes */
    uint64_t t0;                /* gr__now_ns() when received */
    int stalled;                /* waited on a miss */
    chunk *chunks[READ_MAX_CHUNKS];
    readslot slots[READ_MAX_CHUNKS];
};

/* READ: the bytes, inline.  The message's iovec points into the chunks
 * and keeps them alive until sent. */
static void read_reply(conn *c, readreq *r)
{
    uint64_t pos = r->off, end = r->off + r->len, cs = r->f->chunk_size;
    outmsg *m = outmsg_new(0);
    uint32_t body;

    if (!m) {
        conn_fail(c, "out of memory for a READ reply");
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
 * the first chunk that cannot (a heap chunk, another uid's segment, or the
 * client at its lease limit) goes inline, up to PROTO_MAX_DATA, and ends
 * the reply.  The reply may so cover less than asked: the client asks
 * again for the rest.
 */
static void readx_reply(conn *c, readreq *r)
{
    arena *ar = dram_arena(c->srv->d.dram);
    uint64_t pos = r->off, end = r->off + r->len, cs = r->f->chunk_size, start = r->off;
    proto_extent ext[PROTO_MAX_EXTENTS];
    size_t fixed = PROTO_OPENX_FIXED + PROTO_READX_PREFIX + PROTO_MAX_EXTENTS * PROTO_EXTENT_LEN;
    outmsg *m = outmsg_new(fixed);
    uint32_t n = 0, inl = 0;
    uint64_t leased = 0;
    ssize_t hlen;
    unsigned i;

    if (!m) {
        conn_fail(c, "out of memory for a READX reply");
        return;
    }
    for (i = 0; i < r->n; i++) {
        chunk *ch = r->chunks[i];
        uint64_t cstart = (r->first + i) * cs;
        uint64_t from = pos - cstart;
        uint64_t to = end - cstart < ch->len ? end - cstart : ch->len;
        int64_t lease;
        int first;

        /* Whole chunks: the client keeps the lease to serve its later
         * reads of the chunk without asking. */
        if (r->whole) {
            from = 0;
            to = ch->len;
        }
        /* Shared memory only from the client's own uid's segments: a
         * chunk another uid's read brought in goes inline (copied). */
        if (!ch->ar || arena_segment_owner(ar, ch->blk.seg) != (int64_t)c->cred.uid ||
            (lease = conn_add_lease(c, ch)) < 0)
            break;
        first = conn_seg_first(c, ch->blk.seg);
        if (first < 0) {
            conn_release_lease(c, (uint32_t)lease);
            break;
        }
        ext[n].flags = 0;
        /* A chunk the tier holds outside its policy (refused, in the
         * spill) or not at all: a lease the client kept would pin a
         * reserve block the next refused chunk needs. */
        if ((c->features & PROTO_FEAT_NOKEEP) && (!ch->in_tier || !ch->admitted))
            ext[n].flags |= PROTO_EXTENT_NOKEEP;
        if (first) {
            m->fds[m->nfds++] = arena_segment_fd(ar, ch->blk.seg);
            ext[n].flags |= PROTO_EXTENT_FD;
        }
        ext[n].seg = ch->blk.seg;
        ext[n].lease = (uint32_t)lease;
        ext[n].off = ch->blk.off + from;
        ext[n].len = (uint32_t)(to - from);
        if (n == 0)
            start = cstart + from;
        n++;
        leased += to - from;
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
    if (r->op == PROTO_OP_OPENX)
        hlen = proto_enc_openx_reply(m->buf, PROTO_HDR_LEN + fixed, r->req_id, &r->attr, 0, ext,
                                     n, inl);
    else
        hlen = proto_enc_readx_reply(m->buf, PROTO_HDR_LEN + fixed, r->req_id, ext, n, inl);
    m->iov[0].iov_len = (size_t)hlen;
    m->len = (size_t)hlen + inl;
    c->srv->d.stats->bytes_served += pos - start;
    c->srv->d.stats->extents_served += leased;
    conn_send(c, m);
}

void openx_reply_status(conn *c, uint32_t req_id, const proto_attr *a, int err)
{
    outmsg *o = outmsg_new(PROTO_OPENX_FIXED + PROTO_READX_PREFIX);

    if (!o) {
        conn_fail(c, "out of memory for an OPENX reply");
        return;
    }
    o->len = (size_t)proto_enc_openx_reply(o->buf, o->len, req_id, a, err, NULL, 0, 0);
    o->iov[0].iov_len = o->len;
    conn_send(c, o);
}

/* All chunks of r are in (or one failed): answer and free r. */
static void read_finish(readreq *r)
{
    conn *c = r->c;

    c->inflight--;
    c->inflight_bytes -= r->budget;
    if (r->stalled) {
        uint64_t wait = gr__now_ns() - r->t0;
        c->srv->d.stats->stalled_reads++;
        c->srv->d.stats->stall_microseconds += wait / 1000;
        if (!c->dead)
            analysis_wait(c->srv->an, c->job, wait);
    }
    if (c->dead)
        ;
    else if (r->err < 0 && r->op == PROTO_OP_OPENX)
        openx_reply_status(c, r->req_id, &r->attr, r->err < -4095 ? -EIO : r->err);
    else if (r->err < 0)
        reply_error(c, r->op, r->req_id, r->err, r->errmsg);
    else if (r->op == PROTO_OP_READX || r->op == PROTO_OP_OPENX)
        readx_reply(c, r);
    else
        read_reply(c, r);
    for (unsigned i = 0; i < r->n; i++)
        chunk_unref(&r->chunks[i]);
    if (!c->dead) {
        conn_latency(c, GR_LAT_read, r->t0);
        conn_update_events(c);
    }
    srcfile_unref(&r->f);
    conn_unref(&r->c);
    free(r);
}

/* fetch_cb for one chunk of a read; the first error's message is kept. */
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

/* An empty success reply of op (READ or READX): end of file. */
static void reply_eof(conn *c, uint8_t op, uint32_t req_id, const proto_attr *a)
{
    outmsg *o;
    ssize_t hl;

    if (op == PROTO_OP_OPENX) {
        openx_reply_status(c, req_id, a, 0);
        return;
    }
    o = outmsg_new(PROTO_READX_PREFIX);
    if (!o) {
        conn_fail(c, "out of memory for a read reply");
        return;
    }
    hl = op == PROTO_OP_READX ? proto_enc_readx_reply(o->buf, o->len, req_id, NULL, 0, 0)
                              : proto_enc_ok(o->buf, o->len, PROTO_OP_READ, req_id);
    o->len = (size_t)hl;
    o->iov[0].iov_len = o->len;
    conn_send(c, o);
}

void read_start(conn *c, srcfile *f, uint64_t off, uint64_t len, const read_args *a)
{
    uint8_t op = a->op;
    uint64_t size = (uint64_t)f->st.st_size, cs = f->chunk_size;
    readreq *r;
    unsigned n;
    uint64_t t0 = a->t0;

    if (off >= size || len == 0) {
        reply_eof(c, op, a->req_id, a->attr);
        conn_latency(c, GR_LAT_read, t0);
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
     * always one chunk: asking for more than memory can hold would push
     * chunks out to the heap only to fetch them again when the client asks
     * for the rest.  (READX only: a READ is small and must cover what it
     * asks.) */
    if (op != PROTO_OP_READ) {
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
        reply_error(c, op, a->req_id, -ENOMEM, NULL);
        return;
    }
    r->op = op;
    r->whole = a->whole;
    if (a->attr)
        r->attr = *a->attr;
    r->t0 = t0;
    r->budget = (uint64_t)n * cs;
    c->inflight_bytes += r->budget;
    r->c = conn_ref(c);
    r->req_id = a->req_id;
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
        fetcher_get(c->srv->d.fx, f, r->first + i, (int64_t)c->cred.uid, read_chunk_cb,
                    &r->slots[i]);
    }
    r->stalled = r->waiting > 1;        /* some chunk was not in DRAM */
    {
        uint64_t fkey;
        memcpy(&fkey, f->id, sizeof(fkey));     /* the identity is a hash already */
        analysis_read(c->srv->an, c->job, fkey, size, (uint32_t)cs, off, len, a->whole, t0);
    }
    /* Whole-chunk readers come back only at the next chunk: read-ahead
     * sees the chunks they now hold, not the bytes they asked for. */
    if (a->ra) {
        uint64_t ra_off = off, ra_len = len;
        if (a->whole) {
            ra_off = off / cs * cs;
            ra_len = (off / cs + n) * cs - ra_off;
            if (ra_len > size - ra_off)
                ra_len = size - ra_off;
        }
        prefetch_readahead(c->srv->d.pf, a->ra, f, ra_off, ra_len, (int64_t)c->cred.uid);
    }
    if (--r->waiting == 0)
        read_finish(r);
}

void op_read(conn *c, const proto_msg *m, int *fds, int nfds)
{
    srcfile *f = conn_handle(c, m->u.read.handle);
    read_args a = {
        .op = m->h.op,
        .req_id = m->h.req_id,
        .whole = (m->h.flags & PROTO_F_WHOLE) != 0,
        .t0 = gr__now_ns(),
    };

    (void)fds;
    (void)nfds;
    c->srv->d.stats->read_requests++;
    if (!f) {
        reply_error(c, a.op, a.req_id, -EBADF, "no such handle");
        conn_latency(c, GR_LAT_read, a.t0);
        return;
    }
    a.ra = &c->ra[m->u.read.handle - 1];
    read_start(c, f, m->u.read.off, m->u.read.len, &a);
}

void op_release(conn *c, const proto_msg *m, int *fds, int nfds)
{
    (void)fds;
    (void)nfds;
    for (uint32_t i = 0; i < m->u.release.count; i++)
        if (conn_release_lease(c, proto_release_at(m, i)) < 0)
            c->srv->d.stats->lease_errors++;
}
