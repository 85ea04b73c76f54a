/*
 * conn.c - one client connection (see serve_int.h): receive loop, output
 * queue with back-pressure, handles, leases, segment fds, replies.
 *
 * A connection is refcounted: the loop's own reference plus one per
 * request in flight.  Closing marks it dead and closes the fd; completions
 * for a dead connection only drop their references.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "fault.h"
#include "fdpass.h"
#include "log.h"
#include "serve_int.h"

#define SNDBUF_WANT (4 << 20)

static void conn_event(evutil_socket_t fd, short what, void *arg);

conn *conn_ref(conn *c)
{
    c->refs++;
    return c;
}

void conn_unref(conn **cp)
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

/* The process group of pid, from /proc (readable for any process), or
 * -pid when it cannot be read: the connection is then a job of its own. */
static int32_t peer_pgid(pid_t pid)
{
    char path[64], buf[512], *p;
    int fd, pgid;
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -(int32_t)pid;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -(int32_t)pid;
    buf[n] = '\0';
    /* pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses */
    p = strrchr(buf, ')');
    if (!p || sscanf(p + 1, " %*c %*d %d", &pgid) != 1)
        return -(int32_t)pid;
    return pgid;
}

conn *conn_new(server *s, int fd, const peer_cred *cred, int is_admin)
{
    int sndbuf = SNDBUF_WANT;
    conn *c = calloc(1, sizeof(*c));

    if (!c) {
        close(fd);
        return NULL;
    }
    /* Larger send buffers let a whole READ reply go out in one call; the
     * kernel caps this at net.core.wmem_max. */
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    c->srv = s;
    c->fd = fd;
    c->id = ++s->next_id;
    c->cred = *cred;
    c->is_admin = is_admin;
    c->refs = 1;
    c->ev = event_new(s->d.base, fd, EV_READ | EV_PERSIST, conn_event, c);
    if (!c->ev || event_add(c->ev, NULL) < 0) {
        if (c->ev)
            event_free(c->ev);
        close(fd);
        free(c);
        return NULL;
    }
    c->reading = 1;
    c->job = analysis_attach(s->an, (uint32_t)cred->uid, peer_pgid(cred->pid), gr__now_ns());
    gr__list_push_front(&s->conns, &c->link);
    s->nconns++;
    s->d.stats->connections = s->nconns;
    s->d.stats->connections_total++;
    return c;
}

void conn_update_events(conn *c)
{
    int want_read = c->inflight < CONN_MAX_INFLIGHT && c->outq_bytes < CONN_MAX_OUTQ;
    int want_write = c->outq != NULL;
    short what = (short)((want_read ? EV_READ : 0) | (want_write ? EV_WRITE : 0));

    if (c->dead || (want_read == c->reading && want_write == c->writing))
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
    if (m->own_last_fd && m->nfds > 0)
        close(m->fds[m->nfds - 1]);
    free(m);
}

outmsg *outmsg_new(size_t blen)
{
    outmsg *m = fault_hit(FAULT_REPLY_ALLOC) ? NULL : calloc(1, sizeof(*m) + PROTO_HDR_LEN + blen);

    if (!m)
        return NULL;
    m->len = PROTO_HDR_LEN + blen;
    m->iov[0].iov_base = m->buf;
    m->iov[0].iov_len = PROTO_HDR_LEN + blen;
    m->niov = 1;
    return m;
}

/* Send the queue head first.  0, or -1 if the connection failed (and was
 * closed). */
static int conn_flush(conn *c)
{
    while (c->outq) {
        outmsg *m = c->outq;
        ssize_t n = gr__send_fds(c->fd, m->iov, m->niov, m->fds, m->nfds, MSG_DONTWAIT);

        if (n == -EAGAIN || n == -EWOULDBLOCK)
            break;
        if (n < 0) {
            log_debug("client %u: sendmsg: %s", c->id, strerror((int)-n));
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

void conn_send(conn *c, outmsg *m)
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

void conn_fail(conn *c, const char *why)
{
    if (c->dead)
        return;
    c->srv->d.stats->connections_failed++;
    log_warn("client %u (pid %d uid %u): %s: disconnecting it", c->id, (int)c->cred.pid,
             (unsigned)c->cred.uid, why);
    conn_close(c);
}

void reply_error(conn *c, uint8_t op, uint32_t req_id, int err, const char *text)
{
    outmsg *m;

    c->srv->d.stats->request_errors++;
    if (c->dead)
        return;
    m = outmsg_new(PROTO_MAX_ERRMSG);
    if (!m) {
        conn_fail(c, "out of memory for an error reply");
        return;
    }
    m->len = (size_t)proto_enc_error(m->buf, PROTO_HDR_LEN + PROTO_MAX_ERRMSG, op, req_id,
                                     err, text ? text : strerror(-err));
    m->iov[0].iov_len = m->len;
    conn_send(c, m);
}

void reply_ok(conn *c, uint8_t op, uint32_t req_id)
{
    reply_body(c, op, req_id, NULL, 0);
}

void reply_body(conn *c, uint8_t op, uint32_t req_id, const void *body, size_t len)
{
    outmsg *m;

    if (c->dead)
        return;
    if (len > PROTO_MAX_BODY) {
        /* Only a bug can get here: every body is built within the limit. */
        log_error("client %u: a %s reply of %zu bytes exceeds the protocol's limit", c->id,
                  proto_op_name(op), len);
        conn_fail(c, "reply too large");
        return;
    }
    m = outmsg_new(len);
    if (!m) {
        conn_fail(c, "out of memory for a reply");
        return;
    }
    proto_encode_hdr(m->buf, op, PROTO_F_REPLY, req_id, 0, (uint32_t)len);
    if (len)
        memcpy(m->buf + PROTO_HDR_LEN, body, len);
    conn_send(c, m);
}

void conn_latency(conn *c, unsigned op, uint64_t t0)
{
    gr_latency_record(&c->srv->d.stats->latency[op], gr__now_ns() - t0);
}

/* ---- handles ---- */

int64_t conn_add_handle(conn *c, srcfile *f)
{
    uint32_t h;

    for (h = 0; h < c->nhandles; h++)
        if (!c->handles[h])
            break;
    if (h == c->nhandles) {
        uint32_t n = c->nhandles ? c->nhandles * 2 : 16;
        srcfile **nh;
        ra_state *nra;
        if (c->nhandles >= CONN_MAX_HANDLES)
            return -EMFILE;
        if (n > CONN_MAX_HANDLES)
            n = CONN_MAX_HANDLES;
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
    c->srv->d.stats->handles_open++;
    return h + 1;
}

srcfile *conn_handle(conn *c, uint32_t h)
{
    return h >= 1 && h <= c->nhandles ? c->handles[h - 1] : NULL;
}

int conn_drop_handle(conn *c, uint32_t h)
{
    if (!conn_handle(c, h))
        return -EBADF;
    srcfile_unref(&c->handles[h - 1]);
    c->srv->d.stats->handles_open--;
    return 0;
}

/* ---- leases ---- */

int64_t conn_add_lease(conn *c, chunk *ch)
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

int conn_release_lease(conn *c, uint32_t id)
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

int conn_seg_first(conn *c, uint32_t seg)
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

/* ---- receiving ---- */

/* recvmsg said 0: the peer closed, or sent an empty packet (SOCK_SEQPACKET
 * has both; the kernel sets RDHUP only for the first). */
static int peer_closed(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLRDHUP };
    int n = poll(&p, 1, 0);

    return n < 0 || (n == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

static void conn_readable(conn *c)
{
    server *s = c->srv;

    for (int i = 0; i < CONN_READ_BATCH && !c->dead; i++) {
        int fds[CONN_MAX_FDS + 1], nfds = 0, mflags = 0;
        ssize_t n;

        if (c->inflight >= CONN_MAX_INFLIGHT || c->outq_bytes >= CONN_MAX_OUTQ)
            break;                  /* back-pressure: leave the rest unread */
        /* One more fd than any request may carry, so that a request with
         * too many is seen (and refused); every other fd goes to the
         * closer (a client's fd may take its time to close). */
        n = gr__recv_fds_drop(c->fd, s->rbuf, sizeof(s->rbuf), fds, CONN_MAX_FDS + 1, &nfds,
                              MSG_DONTWAIT, &mflags, close_later, s->d.src);
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            break;
        if (n < 0) {
            log_debug("client %u: recvmsg: %s", c->id, strerror((int)-n));
            conn_close(c);
            return;
        }
        if (n == 0 && nfds == 0 && peer_closed(c->fd)) {
            conn_close(c);
            return;
        }
        /* An empty packet (with or without fds) is a malformed request:
         * dispatch answers it and closes its fds. */
        dispatch_packet(c, (size_t)n, (mflags & MSG_TRUNC) != 0, fds, nfds);
    }
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

void conn_close(conn *c)
{
    server *s = c->srv;

    if (c->dead)
        return;
    c->dead = 1;
    analysis_detach(s->an, c->job);
    log_debug("client %u (pid %d uid %u) disconnected", c->id, (int)c->cred.pid,
              (unsigned)c->cred.uid);
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
        if (c->handles[h]) {
            srcfile_unref(&c->handles[h]);
            s->d.stats->handles_open--;
        }
    hint_list_free(&c->hints);
    dira_stream_free(&c->dira);
    for (uint32_t l = 1; l <= c->nleases; l++)
        conn_release_lease(c, l);     /* a client that goes away releases everything */
    gr__list_remove(&c->link);
    s->nconns--;
    s->d.stats->connections = s->nconns;
    conn_unref(&c);
}
