/*
 * peer.c - the peer cache: asking other nodes (the backend, I/O threads)
 * and serving them (the listener, loop thread).  See peer.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "arena.h"
#include "clock.h"
#include "log.h"
#include "members.h"
#include "peer.h"
#include "rdma.h"
#include "wire.h"

#define KEY_MIN 16
#define KEY_MAX 4096
#define POOL_MAX 256                /* idle connections kept per member, at most */
#define SERVE_MAX_CONNS 4096        /* serving connections at once */
#define AUTH_TIMEOUT_S 10           /* a connection must authenticate within this */
#define BACKOFF_MIN_S 1.0
#define BACKOFF_MAX_S 30.0
#define LAT_BUCKETS 32              /* bucket b: [2^b, 2^(b+1)) microseconds */

/* A member as this node sees it: the asking side's state (I/O threads,
 * under mu) and what the serving side counted (loop thread). */
/* One authenticated connection to a member: the TCP control channel and,
 * when both sides can, its RDMA connection for the bytes. */
typedef struct pcl {
    int fd;
    rdma_cli *rc;               /* NULL: the bytes come inline over fd */
} pcl;

typedef struct pnode {
    pthread_mutex_t mu;
    pcl idle[POOL_MAX];         /* authenticated connections not in use */
    unsigned nidle;
    int asked;                  /* ever asked */
    int connected_once;         /* logged its transport */
    int via_rdma;               /* its last chunk came by RDMA READ */
    double down_until;          /* monotonic; skipped until then */
    double backoff;
    uint64_t hits, bytes, misses, errors, timeouts, corrupt;
    uint64_t lat[LAT_BUCKETS];
    uint64_t lat_sum_us;
    /* loop thread */
    uint64_t served, served_bytes;
} pnode;

/* One membership and this node's state for each member. */
typedef struct pview {
    members ms;
    pnode *nodes;
    unsigned refs;              /* under peers.view_mu */
} pview;

struct peers {
    struct event_base *base;
    source *src;
    fetcher *fx;
    workers *w;
    gr_stats *stats;
    /* The membership, swapped whole on reload: I/O threads hold a
     * reference to the view they work with (view_mu). */
    pthread_mutex_t view_mu;
    pview *view;
    uint8_t key[KEY_MAX];
    size_t keylen;
    double timeout;
    unsigned pool;              /* idle connections kept per member */
    struct evconnlistener *lis;
    /* RDMA (rdma.h): the transport wanted, the listener serving ours, and
     * the tokens of the authenticated connections it may accept. */
    const rdma_ops *rops;       /* NULL: TCP only */
    int rdma_strict;            /* transport = rdma: no silent fall-back to TCP */
    rdma_srv *rsrv;
    uint16_t rdma_port;
    size_t max_chunk;           /* an RDMA connection's bounce buffer */
    pthread_mutex_t tok_mu;
    gr__list tokens;            /* pconns that were handed a token */
    uint64_t next_lease;
    gr__list conns;             /* serving connections */
    unsigned nconns;
    double last_auth_warn;
};

/* ---- the key ------------------------------------------------------------ */

static int read_key(peers *p, const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    ssize_t n;

    if (fd < 0) {
        snprintf(err, errlen, "[peer] key_file %s: %s", path, strerror(errno));
        return -errno;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "[peer] key_file %s: not a regular file", path);
        close(fd);
        return -EINVAL;
    }
    if ((st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 077)) {
        snprintf(err, errlen, "[peer] key_file %s: must be owned by root (or us) and readable "
                 "by its owner only (chmod 600): it is the secret every member proves it holds", path);
        close(fd);
        return -EPERM;
    }
    n = read(fd, p->key, sizeof(p->key));
    close(fd);
    while (n > 0 && (p->key[n - 1] == '\n' || p->key[n - 1] == '\r' || p->key[n - 1] == ' '))
        n--;
    if (n < KEY_MIN) {
        snprintf(err, errlen, "[peer] key_file %s: the key is shorter than %d bytes "
                 "(make one with: head -c 32 /dev/urandom | base64 > FILE)", path, KEY_MIN);
        return -EINVAL;
    }
    p->keylen = (size_t)n;
    return 0;
}

/* ---- blocking I/O with a deadline (the asking side) ---------------------- */

static int wait_fd(int fd, short ev, double deadline)
{
    for (;;) {
        double left = deadline - gr__now_s();
        struct pollfd pfd = { .fd = fd, .events = ev };
        int rc;

        if (left <= 0)
            return -ETIMEDOUT;
        rc = poll(&pfd, 1, (int)ceil(left * 1000));
        if (rc > 0)
            return 0;
        if (rc == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

static int send_all(int fd, const void *buf, size_t len, double deadline)
{
    const uint8_t *b = buf;

    while (len) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        if (n > 0) {
            b += n;
            len -= (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc < 0)
                return rc;
        } else {
            return n < 0 ? -errno : -EPIPE;
        }
    }
    return 0;
}

static int recv_all(int fd, void *buf, size_t len, double deadline)
{
    uint8_t *b = buf;

    while (len) {
        ssize_t n = recv(fd, b, len, 0);
        if (n > 0) {
            b += n;
            len -= (size_t)n;
        } else if (n == 0) {
            return -ECONNRESET;
        } else if (errno == EAGAIN || errno == EINTR) {
            int rc = wait_fd(fd, POLLIN, deadline);
            if (rc < 0)
                return rc;
        } else {
            return -errno;
        }
    }
    return 0;
}

/* One control frame of the expected type into buf: its body length, or
 * -errno (-EPROTO: another type or a bad length). */
static int recv_frame(int fd, uint8_t type, uint8_t *buf, size_t cap, double deadline)
{
    uint8_t hdr[PEER_HDR_LEN], t;
    uint32_t blen;
    int rc = recv_all(fd, hdr, sizeof(hdr), deadline);

    if (rc < 0)
        return rc;
    if (peer_frame_peek(hdr, (uint32_t)cap, &t, &blen) < 0 || t != type)
        return -EPROTO;
    rc = recv_all(fd, buf, blen, deadline);
    return rc < 0 ? rc : (int)blen;
}

/* Connect to member i and authenticate both ways: the fd, or -errno
 * (-EACCES: the other side does not prove the key).  *wl gets the
 * server's WELCOME (the RDMA it offers). */
static int dial_tcp(peers *p, pview *v, unsigned i, double deadline, peer_welcome *welcome, char *why,
                    size_t whylen)
{
    const member *m = &v->ms.m[i];
    uint8_t buf[PEER_CTRL_MAX];
    peer_hello h = { .flags = p->rops ? PEER_F_RDMA : 0 };
    peer_challenge ch;
    peer_welcome wl;
    uint8_t mac[PEER_MAC_LEN];
    int fd, rc, one = 1, len;
    socklen_t sl = sizeof(rc);

    fd = socket(m->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    if (connect(fd, (const struct sockaddr *)&m->addr, m->addrlen) < 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
            snprintf(why, whylen, "connect: %s", strerror(-rc));
            goto fail;
        }
        if ((rc = wait_fd(fd, POLLOUT, deadline)) < 0) {
            snprintf(why, whylen, "connect: %s", strerror(-rc));
            goto fail;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &rc, &sl) < 0 || rc != 0) {
            rc = rc ? -rc : -errno;
            snprintf(why, whylen, "connect: %s", strerror(-rc));
            goto fail;
        }
    }
    if (getrandom(h.nonce, sizeof(h.nonce), 0) != (ssize_t)sizeof(h.nonce)) {
        rc = -EIO;
        snprintf(why, whylen, "getrandom failed");
        goto fail;
    }
    snprintf(h.name, sizeof(h.name), "%s", v->ms.m[v->ms.self].name);
    len = peer_enc_hello(buf, sizeof(buf), &h);
    if ((rc = len < 0 ? len : send_all(fd, buf, (size_t)len, deadline)) < 0 ||
        (rc = recv_frame(fd, PEER_CHALLENGE, buf, sizeof(buf), deadline)) < 0 ||
        (rc = peer_dec_challenge(buf, (size_t)rc, &ch)) < 0) {
        snprintf(why, whylen, "handshake: %s", rc == -ECONNRESET ? "the peer closed the connection "
                 "(it refused us: a different key_file, or we are not in its nodes)" : strerror(-rc));
        goto fail;
    }
    /* The server proves the key first; we say nothing that depends on it
     * before we have checked. */
    if (strcmp(ch.name, m->name) != 0 ||
        peer_mac(p->key, p->keylen, 0, h.nonce, ch.nonce, h.name, m->name, mac) < 0 ||
        !peer_mac_equal(mac, ch.mac)) {
        rc = -EACCES;
        snprintf(why, whylen, "it did not prove the shared key (a different key_file?)");
        goto fail;
    }
    if (peer_mac(p->key, p->keylen, 1, h.nonce, ch.nonce, h.name, m->name, mac) < 0) {
        rc = -EIO;
        goto fail;
    }
    len = peer_enc_auth(buf, sizeof(buf), mac);
    if ((rc = len < 0 ? len : send_all(fd, buf, (size_t)len, deadline)) < 0 ||
        (rc = recv_frame(fd, PEER_WELCOME, buf, sizeof(buf), deadline)) < 0 ||
        (rc = peer_dec_welcome(buf, (size_t)rc, &wl)) < 0) {
        snprintf(why, whylen, "handshake: %s", rc == -ECONNRESET ? "the peer refused our proof "
                 "(a different key_file?)" : strerror(-rc));
        goto fail;
    }
    *welcome = wl;
    return fd;
fail:
    close(fd);
    return rc < 0 ? rc : -EIO;
}

/* A connection to member i: TCP, then RDMA where both sides can (with
 * transport = rdma a peer that cannot is a failure; with auto, TCP).
 * 0, or -errno with why. */
static int dial(peers *p, pview *v, unsigned i, double deadline, pcl *out, char *why, size_t whylen)
{
    const member *m = &v->ms.m[i];
    peer_welcome wl;
    int rc;

    out->rc = NULL;
    out->fd = dial_tcp(p, v, i, deadline, &wl, why, whylen);
    if (out->fd < 0)
        return out->fd;
    if (!p->rops)
        return 0;
    if (!(wl.flags & PEER_F_RDMA)) {
        if (!p->rdma_strict)
            return 0;
        snprintf(why, whylen, "it offers no RDMA (its transport is tcp, or it has no device) and "
                 "ours is rdma");
        rc = -EPROTONOSUPPORT;
    } else {
        int ms = (int)((deadline - gr__now_s()) * 1000);
        char err[160];
        rc = rdma_cli_connect(p->rops, m->host, wl.rdma_port, wl.token, p->max_chunk,
                              ms > 0 ? ms : 1, &out->rc, err, sizeof(err));
        if (rc == 0)
            return 0;
        snprintf(why, whylen, "RDMA connect to port %u: %s", wl.rdma_port, err);
        if (!p->rdma_strict) {
            log_warn("peer %s: %s; using tcp for this connection", m->name, why);
            return 0;
        }
    }
    close(out->fd);
    out->fd = -1;
    return rc;
}

static void pcl_close(pcl *c)
{
    rdma_cli_free(&c->rc);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* ---- asking (the backend) ---------------------------------------------- */

typedef enum ask_result {
    ASK_OK,                     /* the chunk is in the buffer, verified */
    ASK_NOT_THERE,              /* the home answered that it will not serve it */
    ASK_FAILED,                 /* the peer failed us: try the next owner */
} ask_result;

static void node_failed(peers *p, pview *v, unsigned i, int timeout, const char *why)
{
    pnode *n = &v->nodes[i];
    double now = gr__now_s();
    int log_it;

    pthread_mutex_lock(&n->mu);
    if (timeout)
        n->timeouts++;
    else
        n->errors++;
    log_it = n->down_until <= now;
    n->backoff = n->backoff < BACKOFF_MIN_S ? BACKOFF_MIN_S : n->backoff * 2;
    if (n->backoff > BACKOFF_MAX_S)
        n->backoff = BACKOFF_MAX_S;
    n->down_until = now + n->backoff;
    /* Its idle connections are suspect too. */
    while (n->nidle)
        pcl_close(&n->idle[--n->nidle]);
    pthread_mutex_unlock(&n->mu);
    if (log_it)
        log_warn("peer %s: %s; skipped for %.0f s (second owner or the source meanwhile)",
                 v->ms.m[i].name, why, n->backoff);
}

/* An idle connection to member i into *c (c->fd -1: none). */
static void take_conn(peers *p, pview *v, unsigned i, pcl *c, int *down)
{
    pnode *n = &v->nodes[i];

    c->fd = -1;
    c->rc = NULL;
    pthread_mutex_lock(&n->mu);
    n->asked = 1;
    *down = n->down_until > gr__now_s();
    if (!*down && n->nidle)
        *c = n->idle[--n->nidle];
    pthread_mutex_unlock(&n->mu);
}

static void give_conn(peers *p, pview *v, unsigned i, pcl *c)
{
    pnode *n = &v->nodes[i];

    pthread_mutex_lock(&n->mu);
    if (n->nidle < p->pool && n->down_until <= gr__now_s() && (!c->rc || rdma_cli_alive(c->rc))) {
        n->idle[n->nidle++] = *c;
        c->fd = -1;
        c->rc = NULL;
    }
    pthread_mutex_unlock(&n->mu);
    pcl_close(c);
}

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static int64_t ctime_ns(const struct stat *st)
{
    return (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

/* One GET on c and its answer: 0 with *d (and the bytes in rq->buf when
 * d->status is 0: inline, or read by RDMA and the lease given back), or
 * -errno: the connection is unusable. */
static int exchange(const peers *p, pcl *c, const peer_get *g0, const backend_req *rq, peer_data *d,
                    double deadline)
{
    uint8_t buf[PEER_CTRL_MAX], hdr[PEER_DATA_FIXED], t;
    uint32_t blen;
    peer_get g1 = *g0, *g = &g1;
    int fd = c->fd, len, rc;

    /* By RDMA when this connection has it and the chunk fits its bounce
     * buffer; the home may still answer inline (a chunk outside its arena). */
    if (c->rc && rq->want <= p->max_chunk)
        g1.flags |= PEER_F_RDMA;
    len = peer_enc_get(buf, sizeof(buf), g);
    rc = len < 0 ? len : send_all(fd, buf, (size_t)len, deadline);

    if (rc == 0)
        rc = recv_all(fd, hdr, sizeof(hdr), deadline);
    if (rc < 0)
        return rc;
    if (peer_frame_peek(hdr, PEER_DATA_FIXED - PEER_HDR_LEN + (uint32_t)rq->cap, &t, &blen) < 0 ||
        t != PEER_DATA ||
        peer_dec_data(hdr + PEER_HDR_LEN, sizeof(hdr) - PEER_HDR_LEN, blen, d) < 0 ||
        d->req != g->req)
        return -EPROTO;
    if (d->status < 0)
        return 0;
    if (d->len != rq->want || d->len > rq->cap)
        return -EPROTO;
    if (d->flags & PEER_F_RDMA) {
        int ms = (int)((deadline - gr__now_s()) * 1000);
        if (!(g->flags & PEER_F_RDMA))
            return -EPROTO;         /* not asked for */
        rc = rdma_cli_read(c->rc, d->raddr, d->rkey, d->len, rq->buf, ms > 0 ? ms : 1);
        /* The lease is given back whatever the read did (no answer). */
        len = peer_enc_done(buf, sizeof(buf), d->lease);
        if (rc == 0)
            rc = send_all(fd, buf, (size_t)len, deadline);
        return rc;
    }
    return recv_all(fd, rq->buf, d->len, deadline);
}

static ask_result ask(peers *p, pview *v, unsigned i, const backend_req *rq, size_t *got)
{
    const srcfile *f = rq->f;
    pnode *n = &v->nodes[i];
    double t0 = gr__now_s(), deadline = t0 + p->timeout;
    peer_get g = {
        .idx = rq->idx, .ino = (uint64_t)f->st.st_ino, .size = (uint64_t)f->st.st_size,
        .mtime_ns = mtime_ns(&f->st), .ctime_ns = ctime_ns(&f->st), .chunk_size = f->chunk_size,
        .path_len = (uint16_t)strlen(f->path), .path = f->path,
    };
    peer_data d;
    char why[192] = "";
    pcl c;
    int down, rc;

    if (strlen(f->path) > PEER_PATH_MAX)
        return ASK_NOT_THERE;
    if (getrandom(&g.req, sizeof(g.req), 0) != (ssize_t)sizeof(g.req))
        g.req = (uint64_t)(t0 * 1e9);
    take_conn(p, v, i, &c, &down);
    if (down)
        return ASK_FAILED;
    rc = c.fd < 0 ? -ECONNRESET : exchange(p, &c, &g, rq, &d, deadline);
    if (rc == -ECONNRESET || rc == -EPIPE) {
        /* No idle connection, or one the peer closed meanwhile (it
         * restarted): not the peer failing; on a new one. */
        pcl_close(&c);
        rc = dial(p, v, i, deadline, &c, why, sizeof(why));
        if (rc < 0) {
            node_failed(p, v, i, rc == -ETIMEDOUT, why);
            return ASK_FAILED;
        }
        rc = exchange(p, &c, &g, rq, &d, deadline);
    }
    if (rc < 0) {
        pcl_close(&c);
        snprintf(why, sizeof(why), "%s", rc == -ETIMEDOUT ? "no answer within [peer] timeout" :
                 rc == -EPROTO ? "a malformed answer" : strerror(-rc));
        node_failed(p, v, i, rc == -ETIMEDOUT, why);
        return ASK_FAILED;
    }
    if (d.status < 0) {
        give_conn(p, v, i, &c);
        pthread_mutex_lock(&n->mu);
        n->misses++;
        pthread_mutex_unlock(&n->mu);
        return ASK_NOT_THERE;
    }
    if (XXH3_64bits(rq->buf, d.len) != d.hash) {
        pcl_close(&c);
        pthread_mutex_lock(&n->mu);
        n->corrupt++;
        pthread_mutex_unlock(&n->mu);
        log_warn("peer %s: chunk %llu of %s failed its checksum; not used", v->ms.m[i].name,
                 (unsigned long long)rq->idx, f->path);
        return ASK_FAILED;
    }
    give_conn(p, v, i, &c);
    {
        int rdma = (d.flags & PEER_F_RDMA) != 0;
        uint64_t us = (uint64_t)((gr__now_s() - t0) * 1e6);
        unsigned b = 0;
        int first;
        while (b + 1 < LAT_BUCKETS && (UINT64_C(2) << b) <= us)
            b++;
        pthread_mutex_lock(&n->mu);
        n->hits++;
        n->bytes += d.len;
        n->lat[b]++;
        n->lat_sum_us += us;
        n->backoff = 0;
        first = !n->connected_once || n->via_rdma != rdma;
        n->connected_once = 1;
        n->via_rdma = rdma;
        pthread_mutex_unlock(&n->mu);
        if (first)
            log_info("peer %s: serving us over %s", v->ms.m[i].name, rdma ? "rdma (RDMA READ)" : "tcp");
    }
    *got = d.len;
    return ASK_OK;
}

static pview *view_get(peers *p)
{
    pview *v;

    pthread_mutex_lock(&p->view_mu);
    v = p->view;
    v->refs++;
    pthread_mutex_unlock(&p->view_mu);
    return v;
}

static void view_free(pview *v)
{
    if (v->nodes) {
        for (unsigned i = 0; i < v->ms.n; i++) {
            while (v->nodes[i].nidle)
                pcl_close(&v->nodes[i].idle[--v->nodes[i].nidle]);
            pthread_mutex_destroy(&v->nodes[i].mu);
        }
        free(v->nodes);
    }
    members_free(&v->ms);
    free(v);
}

static void view_put(peers *p, pview *v)
{
    int last;

    pthread_mutex_lock(&p->view_mu);
    last = --v->refs == 0;
    pthread_mutex_unlock(&p->view_mu);
    if (last)
        view_free(v);
}

static backend_result peer_backend_get(void *self, const backend_req *rq, size_t *len,
                                       backend_status *st)
{
    peers *p = self;
    const srcfile *f = rq->f;
    backend_result r = BACKEND_MISS;
    pview *v;
    int own[2];

    (void)st;
    if (rq->local_only)
        return BACKEND_MISS;
    v = view_get(p);
    members_owners(&v->ms, peer_chunk_key(f->path, strlen(f->path), (uint64_t)f->st.st_ino,
                                          (uint64_t)f->st.st_size, mtime_ns(&f->st), rq->idx),
                   own);
    for (int k = 0; k < 2; k++) {
        ask_result a;
        /* We are its home (or, the home failing, its second owner): the
         * source is ours to read. */
        if (own[k] < 0 || own[k] == v->ms.self)
            break;
        a = ask(p, v, (unsigned)own[k], rq, len);
        if (a == ASK_OK)
            r = BACKEND_OK;
        if (a != ASK_FAILED)
            break;
    }
    view_put(p, v);
    return r;
}

static const backend_ops peer_ops = {
    .name = "peer",
    .kind = BACKEND_PEER,
    .get = peer_backend_get,
};

void peers_backend(peers *p, backend *out)
{
    out->ops = &peer_ops;
    out->self = p;
}

/* ---- serving (loop thread) --------------------------------------------- */

typedef enum { PC_HELLO, PC_AUTH, PC_READY } pc_state;

typedef struct pconn {
    peers *p;
    struct bufferevent *bev;
    gr__list link;
    unsigned refs;
    int dead;
    pc_state state;
    int member;                 /* who it claims to be (index in the view of its HELLO) */
    char name[MEMBER_NAME_MAX]; /* that member's name */
    uint8_t nc[PEER_NONCE_LEN], ns[PEER_NONCE_LEN];
    int busy;                   /* a GET is being answered */
    int wants_rdma;             /* its HELLO said it can read by RDMA */
    uint8_t token[PEER_TOKEN_LEN]; /* handed out in WELCOME; on p->tokens while set */
    int has_token;
    gr__list toklink;
    chunk *leased;              /* the chunk its last RDMA answer named, until DONE */
    uint64_t lease;
    char addr[64];
} pconn;

typedef struct preq {
    wq_job job;
    pconn *pc;
    uint64_t req, idx, ino, size;
    int64_t mtime_ns, ctime_ns;
    uint32_t chunk_size;
    int rdma;                   /* the GET asked for RDMA */
    char *norm;
    int root;
    struct stat st;
    int fd;
    int rc;
    char err[160];
} preq;

static void pconn_unref(pconn **pcp)
{
    pconn *pc = *pcp;

    *pcp = NULL;
    if (pc && --pc->refs == 0)
        free(pc);
}

static void drop_lease(pconn *pc)
{
    chunk_unref(&pc->leased);
    pc->lease = 0;
}

static void pconn_close(pconn *pc)
{
    if (pc->dead)
        return;
    pc->dead = 1;
    if (pc->has_token) {
        pthread_mutex_lock(&pc->p->tok_mu);
        gr__list_remove(&pc->toklink);
        pc->has_token = 0;
        pthread_mutex_unlock(&pc->p->tok_mu);
    }
    drop_lease(pc);
    gr__list_remove(&pc->link);
    pc->p->nconns--;
    bufferevent_free(pc->bev);
    pc->bev = NULL;
    pconn_unref(&pc);
}

static void auth_failed(pconn *pc, const char *why)
{
    peers *p = pc->p;
    double now = gr__now_s();

    p->stats->peer_auth_failures++;
    if (now - p->last_auth_warn > 10) {
        p->last_auth_warn = now;
        log_warn("peer connection from %s refused: %s", pc->addr, why);
    }
    pconn_close(pc);
}

static void send_frame(pconn *pc, const uint8_t *buf, int len)
{
    if (len > 0)
        bufferevent_write(pc->bev, buf, (size_t)len);
}

static void reply_status(pconn *pc, uint64_t req, int status)
{
    uint8_t buf[PEER_DATA_FIXED];
    peer_data d = { .req = req, .status = status };

    pc->p->stats->peer_refused++;
    send_frame(pc, buf, peer_enc_data(buf, sizeof(buf), &d));
}

static int find_member(const peers *p, const char *name);

/* What we served a member, by name (the view may have changed since its
 * HELLO). */
static void count_served(peers *p, const pconn *pc, uint32_t len)
{
    int i = pc->member >= 0 ? find_member(p, pc->name) : -1;

    if (i >= 0) {
        p->view->nodes[i].served++;
        p->view->nodes[i].served_bytes += len;
    }
}

static void chunk_ref_done(const void *data, size_t len, void *extra)
{
    chunk *c = extra;
    (void)data;
    (void)len;
    chunk_unref(&c);
}

static void answer_done(pconn *pc)
{
    pc->busy = 0;
    if (!pc->dead)
        bufferevent_enable(pc->bev, EV_READ);
}

/* Answer r with where to RDMA READ chunk c: its arena segment exposed
 * (registered once per segment generation), the chunk held as the
 * connection's lease until DONE.  0 if it cannot (a heap chunk, the
 * registration failed): the caller answers inline. */
static int serve_rdma(pconn *pc, preq *r, chunk *c)
{
    peers *p = pc->p;
    uint8_t buf[PEER_DATA_FIXED];
    peer_data d = { .req = r->req, .len = c->len, .flags = PEER_F_RDMA };
    uint32_t rkey;
    int rc;

    if (!p->rsrv || !pc->has_token || !c->ar || !c->len)
        return 0;
    rc = rdma_srv_expose(p->rsrv, c->blk.ptr - c->blk.off, arena_segment_size(c->ar),
                         arena_segment_gen(c->ar, c->blk.seg), &rkey);
    if (rc < 0) {
        log_warn("peer cache: cannot register arena segment %u for RDMA (%s); serving inline",
                 c->blk.seg, strerror(-rc));
        return 0;
    }
    drop_lease(pc);
    pc->leased = chunk_ref(c);
    pc->lease = ++p->next_lease;
    d.hash = XXH3_64bits(c->data, c->len);
    d.raddr = (uint64_t)(uintptr_t)c->data;
    d.rkey = rkey;
    d.lease = pc->lease;
    send_frame(pc, buf, peer_enc_data(buf, sizeof(buf), &d));
    return 1;
}

static void fetched(void *arg, chunk *c, int err, const char *errmsg)
{
    preq *r = arg;
    pconn *pc = r->pc;
    peers *p = pc->p;

    if (!pc->dead) {
        if (err < 0 || !c) {
            log_debug("peer %s: chunk %llu of %s: %s", pc->addr, (unsigned long long)r->idx,
                      r->norm, errmsg ? errmsg : strerror(-err));
            reply_status(pc, r->req, err < 0 ? err : -EIO);
        } else if (r->rdma && serve_rdma(pc, r, c)) {
            p->stats->peer_served++;
            p->stats->peer_served_bytes += c->len;
            count_served(p, pc, c->len);
        } else {
            uint8_t buf[PEER_DATA_FIXED];
            peer_data d = { .req = r->req, .len = c->len, .hash = XXH3_64bits(c->data, c->len) };
            struct evbuffer *out = bufferevent_get_output(pc->bev);
            chunk *ref = chunk_ref(c);

            send_frame(pc, buf, peer_enc_data(buf, sizeof(buf), &d));
            if (c->len && evbuffer_add_reference(out, c->data, c->len, chunk_ref_done, ref) < 0) {
                chunk_unref(&ref);
                pconn_close(pc);
            } else {
                if (!c->len)
                    chunk_unref(&ref);
                p->stats->peer_served++;
                p->stats->peer_served_bytes += c->len;
                count_served(p, pc, c->len);
            }
        }
        answer_done(pc);
    }
    free(r->norm);
    pconn_unref(&r->pc);
    free(r);
}

/* The file is known (f): the same version the asker saw?  Then fetch. */
static void serve_file(preq *r, srcfile *f)
{
    peers *p = r->pc->p;

    if ((uint64_t)f->st.st_ino != r->ino || (uint64_t)f->st.st_size != r->size ||
        mtime_ns(&f->st) != r->mtime_ns || ctime_ns(&f->st) != r->ctime_ns ||
        f->chunk_size != r->chunk_size) {
        reply_status(r->pc, r->req, -ESTALE);
    } else if (r->idx >= (r->size + r->chunk_size - 1) / r->chunk_size && !(r->idx == 0 && r->size == 0)) {
        reply_status(r->pc, r->req, -EINVAL);
    } else {
        fetcher_get_for_peer(p->fx, f, r->idx, fetched, r);
        return;
    }
    answer_done(r->pc);
    free(r->norm);
    pconn_unref(&r->pc);
    free(r);
}

static void stat_run(wq_job *j)
{
    preq *r = (preq *)j;
    r->rc = source_stat_open(r->pc->p->src, r->norm, r->root, &r->st, &r->fd, r->err,
                             sizeof(r->err));
}

static void stat_done(wq_job *j)
{
    preq *r = (preq *)j;
    pconn *pc = r->pc;
    srcfile *f;

    if (pc->dead || j->cancelled || r->rc < 0) {
        if (r->rc == 0 && !j->cancelled)
            close(r->fd);
        if (!pc->dead)
            reply_status(pc, r->req, j->cancelled ? -ECANCELED : r->rc);
        answer_done(pc);
        free(r->norm);
        pconn_unref(&r->pc);
        free(r);
        return;
    }
    f = source_install_fd(pc->p->src, r->norm, r->root, &r->st, r->fd, gr__now_s());
    r->norm = f ? strdup(f->path) : NULL;
    if (!f || !r->norm) {
        reply_status(pc, r->req, -ENOMEM);
        answer_done(pc);
        srcfile_unref(&f);
        free(r->norm);
        pconn_unref(&r->pc);
        free(r);
        return;
    }
    serve_file(r, f);
    srcfile_unref(&f);
}

static void on_get(pconn *pc, const uint8_t *b, size_t len)
{
    peers *p = pc->p;
    peer_get g;
    preq *r;
    srcfile *f;
    char err[160];

    if (peer_dec_get(b, len, &g) < 0) {
        log_warn("peer %s: malformed GET; connection closed", pc->addr);
        pconn_close(pc);
        return;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        pconn_close(pc);
        return;
    }
    r->req = g.req;
    r->idx = g.idx;
    r->ino = g.ino;
    r->size = g.size;
    r->mtime_ns = g.mtime_ns;
    r->ctime_ns = g.ctime_ns;
    r->chunk_size = g.chunk_size;
    r->rdma = (g.flags & PEER_F_RDMA) != 0;
    r->fd = -1;
    r->pc = pc;
    pc->refs++;
    pc->busy = 1;
    bufferevent_disable(pc->bev, EV_READ);      /* one request at a time */
    if (g.chunk_size == 0 ||
        source_resolve(p->src, g.path, g.path_len, &r->norm, &r->root, err, sizeof(err)) < 0) {
        reply_status(pc, r->req, g.chunk_size == 0 ? -EINVAL : -EACCES);
        answer_done(pc);
        pconn_unref(&r->pc);
        free(r);
        return;
    }
    f = source_lookup(p->src, r->norm, gr__now_s());
    if (f) {
        serve_file(r, f);
        srcfile_unref(&f);
        return;
    }
    r->job.run = stat_run;
    r->job.done = stat_done;
    workers_submit(p->w, &r->job, WQ_DEMAND);
}

static int find_member(const peers *p, const char *name)
{
    for (unsigned i = 0; i < p->view->ms.n; i++)
        if (!strcmp(p->view->ms.m[i].name, name))
            return (int)i;
    return -1;
}

static void on_frame(pconn *pc, uint8_t type, const uint8_t *b, size_t len)
{
    peers *p = pc->p;
    uint8_t buf[PEER_CTRL_MAX];
    const char *self = p->view->ms.m[p->view->ms.self].name;

    switch (pc->state) {
    case PC_HELLO: {
        peer_hello h;
        peer_challenge ch;
        if (type != PEER_HELLO || peer_dec_hello(b, len, &h) < 0) {
            auth_failed(pc, "not a peer's HELLO");
            return;
        }
        pc->member = find_member(p, h.name);
        snprintf(pc->name, sizeof(pc->name), "%s", h.name);
        if (pc->member < 0 || pc->member == p->view->ms.self) {
            auth_failed(pc, "it names itself as no other member of [peer] nodes");
            return;
        }
        memcpy(pc->nc, h.nonce, sizeof(pc->nc));
        pc->wants_rdma = (h.flags & PEER_F_RDMA) != 0;
        if (getrandom(pc->ns, sizeof(pc->ns), 0) != (ssize_t)sizeof(pc->ns) ||
            peer_mac(p->key, p->keylen, 0, pc->nc, pc->ns, h.name, self, ch.mac) < 0) {
            pconn_close(pc);
            return;
        }
        memcpy(ch.nonce, pc->ns, sizeof(ch.nonce));
        snprintf(ch.name, sizeof(ch.name), "%s", self);
        send_frame(pc, buf, peer_enc_challenge(buf, sizeof(buf), &ch));
        pc->state = PC_AUTH;
        return;
    }
    case PC_AUTH: {
        uint8_t mac[PEER_MAC_LEN], want[PEER_MAC_LEN];
        peer_welcome w = { .flags = 0 };
        if (type != PEER_AUTH || peer_dec_auth(b, len, mac) < 0 ||
            peer_mac(p->key, p->keylen, 1, pc->nc, pc->ns, pc->name, self,
                     want) < 0 || !peer_mac_equal(mac, want)) {
            auth_failed(pc, "it did not prove the shared key (a different key_file?)");
            return;
        }
        pc->state = PC_READY;
        bufferevent_set_timeouts(pc->bev, NULL, NULL);
        /* RDMA is offered with a token only this connection knows: the
         * RDMA listener accepts no connection without one. */
        if (pc->wants_rdma && p->rsrv &&
            getrandom(pc->token, sizeof(pc->token), 0) == (ssize_t)sizeof(pc->token)) {
            pthread_mutex_lock(&p->tok_mu);
            gr__list_push_back(&p->tokens, &pc->toklink);
            pc->has_token = 1;
            pthread_mutex_unlock(&p->tok_mu);
            w.flags = PEER_F_RDMA;
            w.rdma_port = p->rdma_port;
            memcpy(w.token, pc->token, sizeof(w.token));
        }
        send_frame(pc, buf, peer_enc_welcome(buf, sizeof(buf), &w));
        log_debug("peer %s (%s) authenticated", pc->name, pc->addr);
        return;
    }
    case PC_READY:
        if (type == PEER_GET) {
            on_get(pc, b, len);
            return;
        }
        if (type == PEER_DONE) {
            uint64_t lease;
            if (peer_dec_done(b, len, &lease) < 0) {
                pconn_close(pc);
                return;
            }
            if (lease == pc->lease)
                drop_lease(pc);
            return;
        }
        log_warn("peer %s: unexpected frame type %u; connection closed", pc->addr, type);
        pconn_close(pc);
        return;
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    pconn *pc = arg;
    struct evbuffer *in = bufferevent_get_input(bev);

    pc->refs++;
    while (!pc->dead && !pc->busy) {
        uint8_t hdr[PEER_HDR_LEN], body[PEER_CTRL_MAX], type;
        uint32_t blen;

        if (evbuffer_get_length(in) < PEER_HDR_LEN)
            break;
        evbuffer_copyout(in, hdr, sizeof(hdr));
        if (peer_frame_peek(hdr, PEER_CTRL_MAX, &type, &blen) < 0) {
            if (pc->state != PC_READY)
                auth_failed(pc, "a malformed frame");
            else
                pconn_close(pc);
            break;
        }
        if (evbuffer_get_length(in) < PEER_HDR_LEN + (size_t)blen)
            break;
        evbuffer_drain(in, PEER_HDR_LEN);
        evbuffer_remove(in, body, blen);
        on_frame(pc, type, body, blen);
    }
    pconn_unref(&pc);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    pconn *pc = arg;
    (void)bev;

    if (pc->state == PC_READY)
        pconn_close(pc);
    else if (what & BEV_EVENT_TIMEOUT)
        auth_failed(pc, "it did not authenticate in time");
    else if (pc->state == PC_AUTH)
        auth_failed(pc, "it left after our proof (it holds a different key_file?)");
    else
        auth_failed(pc, "it left before saying who it is");
}

static void on_accept(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    peers *p = arg;
    pconn *pc;
    struct timeval tv = { AUTH_TIMEOUT_S, 0 };
    int one = 1;
    (void)lis;

    if (p->nconns >= SERVE_MAX_CONNS || !(pc = calloc(1, sizeof(*pc)))) {
        close(fd);
        return;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    pc->p = p;
    pc->refs = 1;
    pc->member = -1;
    if (evutil_inet_ntop(sa->sa_family, sa->sa_family == AF_INET ?
                         (void *)&((struct sockaddr_in *)sa)->sin_addr :
                         (void *)&((struct sockaddr_in6 *)sa)->sin6_addr,
                         pc->addr, sizeof(pc->addr)) == NULL)
        snprintf(pc->addr, sizeof(pc->addr), "?");
    (void)salen;
    pc->bev = bufferevent_socket_new(p->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!pc->bev) {
        close(fd);
        free(pc);
        return;
    }
    /* libevent writes 16 KiB per turn of the loop by default: a chunk
     * would take dozens of turns. */
    bufferevent_set_max_single_write(pc->bev, 4 << 20);
    gr__list_push_back(&p->conns, &pc->link);
    p->nconns++;
    bufferevent_setcb(pc->bev, on_read, NULL, on_event, pc);
    bufferevent_set_timeouts(pc->bev, &tv, &tv);
    bufferevent_enable(pc->bev, EV_READ | EV_WRITE);
}

/* The RDMA listener's thread: is tok one a connection was handed? */
static int token_ok(void *arg, const uint8_t tok[RDMA_TOKEN_LEN])
{
    peers *p = arg;
    int ok = 0;

    pthread_mutex_lock(&p->tok_mu);
    for (gr__list *l = gr__list_first(&p->tokens); l && !ok; l = gr__list_next(&p->tokens, l))
        ok = peer_mac_equal(gr__container_of(l, pconn, toklink)->token, tok);
    pthread_mutex_unlock(&p->tok_mu);
    return ok;
}

/* transport = rdma or auto: the RDMA side, where a device exists.  0, or
 * -errno with err (rdma only: auto falls back to TCP, saying so). */
static int start_rdma(peers *p, const gr_config *cfg, char *err, size_t errlen)
{
    const member *self = &p->view->ms.m[p->view->ms.self];
    int strict = !strcmp(cfg->peer_transport, "rdma"), rc;
    char why[256];

    p->rdma_strict = strict;
    if (!strcmp(cfg->peer_transport, "tcp")) {
        log_info("peer cache: transport tcp");
        return 0;
    }
    if (!rdma_device_present(&rdma_ops_real)) {
        if (strict) {
            snprintf(err, errlen, "[peer] transport = rdma, but no RDMA device with an active "
                     "port is here (use auto or tcp)");
            return -ENODEV;
        }
        log_info("peer cache: transport tcp (auto: no RDMA device with an active port)");
        return 0;
    }
    p->rops = &rdma_ops_real;
    p->max_chunk = cfg->chunk_size;
    p->rdma_port = (uint16_t)(atoi(self->port) + 1);
    rc = rdma_srv_new(&rdma_ops_real, self->host, p->rdma_port, token_ok, p, &p->rsrv, why,
                      sizeof(why));
    if (rc < 0) {
        if (strict) {
            snprintf(err, errlen, "[peer] transport = rdma: RDMA listener on %s port %u: %s",
                     self->host, p->rdma_port, why);
            return rc;
        }
        log_warn("peer cache: RDMA listener on %s port %u: %s; serving by tcp (reading "
                 "by RDMA from peers that offer it)", self->host, p->rdma_port, why);
        return 0;
    }
    log_info("peer cache: transport %s: serving chunks by RDMA READ on %s port %u (control "
             "on tcp %s)", cfg->peer_transport, self->host, p->rdma_port, self->name);
    return 0;
}

/* ---- the rest ------------------------------------------------------------ */

/* A view of the membership cfg names, each member's state fresh. */
static int view_build(const gr_config *cfg, pview **out, char *err, size_t errlen)
{
    pview *v = calloc(1, sizeof(*v));
    int rc;

    if (!v)
        return -ENOMEM;
    v->refs = 1;                /* the peers' own */
    rc = members_build(cfg->peer_listen, cfg->peer_nodes, cfg->peer_nodes_file, &v->ms, err,
                       errlen);
    if (rc == 0 && !(v->nodes = calloc(v->ms.n, sizeof(*v->nodes))))
        rc = -ENOMEM;
    if (rc < 0) {
        members_free(&v->ms);
        free(v);
        return rc;
    }
    for (unsigned i = 0; i < v->ms.n; i++)
        pthread_mutex_init(&v->nodes[i].mu, NULL);
    *out = v;
    return 0;
}

int peers_reload(peers *p, const gr_config *cfg)
{
    pview *old = p->view, *v;
    char err[256];
    int same;

    if (view_build(cfg, &v, err, sizeof(err)) < 0) {
        log_error("reload: peer cache membership: %s; keeping the %u members it has", err,
                  old->ms.n);
        return -EINVAL;
    }
    same = v->ms.n == old->ms.n;
    for (unsigned i = 0; same && i < v->ms.n; i++)
        same = !strcmp(v->ms.m[i].name, old->ms.m[i].name);
    if (same) {
        view_free(v);
        return 0;
    }
    /* Members that stay keep their counters and back-off (not their idle
     * connections, which the old view closes when its last user is done). */
    for (unsigned i = 0; i < v->ms.n; i++) {
        for (unsigned j = 0; j < old->ms.n; j++) {
            pnode *n = &v->nodes[i], *o = &old->nodes[j];
            if (strcmp(v->ms.m[i].name, old->ms.m[j].name))
                continue;
            pthread_mutex_lock(&o->mu);
            n->asked = o->asked;
            n->connected_once = o->connected_once;
            n->via_rdma = o->via_rdma;
            n->down_until = o->down_until;
            n->backoff = o->backoff;
            n->hits = o->hits;
            n->bytes = o->bytes;
            n->misses = o->misses;
            n->errors = o->errors;
            n->timeouts = o->timeouts;
            n->corrupt = o->corrupt;
            memcpy(n->lat, o->lat, sizeof(n->lat));
            n->lat_sum_us = o->lat_sum_us;
            pthread_mutex_unlock(&o->mu);
            n->served = o->served;
            n->served_bytes = o->served_bytes;
        }
    }
    pthread_mutex_lock(&p->view_mu);
    p->view = v;
    pthread_mutex_unlock(&p->view_mu);
    log_info("reload: peer cache: %u members (was %u); chunks move only where their home "
             "changed", v->ms.n, old->ms.n);
    view_put(p, old);
    return 0;
}

int peers_new(struct event_base *base, const gr_config *cfg, source *src, workers *w,
              gr_stats *stats, peers **out, char *err, size_t errlen)
{
    peers *p = calloc(1, sizeof(*p));
    const member *self;
    int rc;

    if (!p)
        return -ENOMEM;
    gr__list_init(&p->conns);
    gr__list_init(&p->tokens);
    pthread_mutex_init(&p->tok_mu, NULL);
    p->base = base;
    p->src = src;
    p->w = w;
    p->stats = stats;
    p->timeout = cfg->peer_timeout > 0 ? cfg->peer_timeout : 0.001;
    p->pool = (unsigned)cfg->peer_connections;
    pthread_mutex_init(&p->view_mu, NULL);
    if ((rc = view_build(cfg, &p->view, err, errlen)) < 0 ||
        (rc = read_key(p, cfg->peer_key_file, err, errlen)) < 0)
        goto fail;
    self = &p->view->ms.m[p->view->ms.self];
    p->lis = evconnlistener_new_bind(base, on_accept, p,
                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
                                     LEV_OPT_CLOSE_ON_EXEC, 128,
                                     (const struct sockaddr *)&self->addr, (int)self->addrlen);
    if (!p->lis) {
        rc = -errno ? -errno : -EADDRINUSE;
        snprintf(err, errlen, "[peer] listen %s: %s", self->name, strerror(-rc));
        goto fail;
    }
    if ((rc = start_rdma(p, cfg, err, errlen)) < 0)
        goto fail;
    log_info("peer cache: %u members, this node is %s", p->view->ms.n, self->name);
    *out = p;
    return 0;
fail:
    peers_free(&p);
    return rc;
}

void peers_set_fetcher(peers *p, fetcher *fx)
{
    p->fx = fx;
}

void peers_shutdown(peers *p)
{
    if (!p)
        return;
    if (p->lis) {
        evconnlistener_free(p->lis);
        p->lis = NULL;
    }
    while (!gr__list_empty(&p->conns))
        pconn_close(gr__container_of(gr__list_first(&p->conns), pconn, link));
}

void peers_free(peers **pp)
{
    peers *p = *pp;

    if (!p)
        return;
    peers_shutdown(p);
    rdma_srv_free(&p->rsrv);
    if (p->view)
        view_put(p, p->view);   /* the I/O threads are stopped: the last reference */
    explicit_bzero(p->key, sizeof(p->key));
    pthread_mutex_destroy(&p->tok_mu);
    pthread_mutex_destroy(&p->view_mu);
    free(p);
    *pp = NULL;
}

static uint64_t lat_quantile(const uint64_t *lat, double q)
{
    uint64_t total = 0, acc = 0;

    for (unsigned b = 0; b < LAT_BUCKETS; b++)
        total += lat[b];
    if (!total)
        return 0;
    for (unsigned b = 0; b < LAT_BUCKETS; b++) {
        acc += lat[b];
        if ((double)acc >= q * (double)total)
            return UINT64_C(2) << b;    /* the bucket's upper bound */
    }
    return UINT64_C(2) << (LAT_BUCKETS - 1);
}

int peers_each(peers *p, int (*cb)(void *arg, const peer_info *i), void *arg)
{
    double now = gr__now_s();

    for (unsigned i = 0; i < p->view->ms.n; i++) {
        pnode *n = &p->view->nodes[i];
        peer_info in = { .name = p->view->ms.m[i].name, .self = (int)i == p->view->ms.self };
        int rc;

        pthread_mutex_lock(&n->mu);
        in.state = in.self ? "self" : n->down_until > now ? "down" : n->asked ? "up" : "unknown";
        /* Ours: how we serve; a peer's: how its last chunk came. */
        in.transport = (in.self ? p->rsrv != NULL : n->via_rdma) ? "rdma" : "tcp";
        in.down_for = n->down_until > now ? n->down_until - now : 0;
        in.hits = n->hits;
        in.bytes = n->bytes;
        in.misses = n->misses;
        in.errors = n->errors;
        in.timeouts = n->timeouts;
        in.corrupt = n->corrupt;
        in.lat_us[0] = lat_quantile(n->lat, 0.5);
        in.lat_us[1] = lat_quantile(n->lat, 0.9);
        in.lat_us[2] = lat_quantile(n->lat, 0.99);
        pthread_mutex_unlock(&n->mu);
        in.served = n->served;
        in.served_bytes = n->served_bytes;
        if ((rc = cb(arg, &in)) != 0)
            return rc;
    }
    return 0;
}

int peers_metrics(peers *p, struct evbuffer *out)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        { "peer_up", "gauge", "1 when the peer is not in a back-off after a failure" },
        { "peer_hits_total", "counter", "chunks the peer served us" },
        { "peer_bytes_total", "counter", "bytes the peer served us" },
        { "peer_misses_total", "counter", "requests the peer answered it would not serve" },
        { "peer_errors_total", "counter", "connects, I/O and protocol errors with the peer" },
        { "peer_timeouts_total", "counter", "requests the peer did not answer within [peer] timeout" },
        { "peer_corrupt_total", "counter", "chunks from the peer that failed their checksum" },
        { "peer_served_total", "counter", "chunks this node served the peer" },
        { "peer_served_bytes_total", "counter", "bytes this node served the peer" },
        { "peer_latency_seconds", "histogram", "time to get a chunk from the peer (hits)" },
    };
    double now = gr__now_s();
    int rc = 0;

    if (!p)
        return 0;
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        rc |= evbuffer_add_printf(out, "# HELP granary_%s %s\n# TYPE granary_%s %s\n",
                                  fam[f].name, fam[f].help, fam[f].name, fam[f].type);
        for (unsigned i = 0; i < p->view->ms.n; i++) {
            pnode *n = &p->view->nodes[i];
            const char *nm = p->view->ms.m[i].name;
            uint64_t v = 0;

            if ((int)i == p->view->ms.self)
                continue;
            pthread_mutex_lock(&n->mu);
            switch (f) {
            case 0: v = n->down_until <= now; break;
            case 1: v = n->hits; break;
            case 2: v = n->bytes; break;
            case 3: v = n->misses; break;
            case 4: v = n->errors; break;
            case 5: v = n->timeouts; break;
            case 6: v = n->corrupt; break;
            case 7: v = n->served; break;
            case 8: v = n->served_bytes; break;
            default: {
                uint64_t acc = 0;
                for (unsigned b = 0; b < LAT_BUCKETS; b++) {
                    acc += n->lat[b];
                    rc |= evbuffer_add_printf(out, "granary_%s_bucket{peer=\"%s\",le=\"%g\"} %llu\n",
                                              fam[f].name, nm, (double)(UINT64_C(2) << b) / 1e6,
                                              (unsigned long long)acc);
                }
                rc |= evbuffer_add_printf(out, "granary_%s_bucket{peer=\"%s\",le=\"+Inf\"} %llu\n"
                                          "granary_%s_sum{peer=\"%s\"} %.6f\n"
                                          "granary_%s_count{peer=\"%s\"} %llu\n",
                                          fam[f].name, nm, (unsigned long long)acc, fam[f].name,
                                          nm, (double)n->lat_sum_us / 1e6, fam[f].name, nm,
                                          (unsigned long long)acc);
                break;
            }
            }
            pthread_mutex_unlock(&n->mu);
            if (f < 9)
                rc |= evbuffer_add_printf(out, "granary_%s{peer=\"%s\"} %llu\n", fam[f].name, nm,
                                          (unsigned long long)v);
        }
    }
    return rc < 0 ? -1 : 0;
}
