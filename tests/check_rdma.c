/*
 * check_rdma.c - unit tests of the peer layer's RDMA transport (rdma.c)
 * against an injected-completion stand-in for libibverbs and librdmacm.
 *
 * The stand-in ("fk", below) is a second rdma_ops table that emulates one
 * RDMA device, "fk0" at 192.0.2.1, in this process: event channels and
 * completion channels are pipes (pollable, non-blocking, as the real ones
 * are), rdma_connect queues a CONNECT_REQUEST with the private data on the
 * listener's channel, rdma_accept connects the two queue pairs, and an
 * RDMA READ checks the local lkey and the remote rkey and bounds against
 * the live memory regions before it memcpy's, its completion going onto
 * the CQ and the completion channel exactly as the module polls them.
 * What the next READ gets can be injected: an error status, no completion
 * at all, a completion after a delay.  The stand-in counts every object
 * it hands out, so each test ends by checking that the module released
 * all of them (and all fds); the ASan build checks the memory.
 *
 * tests/test_rdma_vm.sh runs the same module over real verbs (soft-RoCE in
 * a VM).
 */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "rdma.h"

/* ======================================================================
 * The stand-in
 * ====================================================================== */

#define FK_ADDR "192.0.2.1"     /* the one address on the emulated device */

typedef struct fk_ev {
    struct rdma_cm_event ev;    /* first: the module holds &ev */
    uint8_t priv[56];
    struct fk_ev *next;
} fk_ev;

typedef struct fk_chan {
    struct rdma_event_channel ch;   /* first */
    int wfd;
    int signalled;              /* a byte sits in the pipe iff the queue is non-empty */
    fk_ev *head, *tail;
} fk_chan;

typedef struct fk_qp fk_qp;

typedef struct fk_id {
    struct rdma_cm_id id;       /* first */
    int listening;
    uint16_t port;
    struct fk_id *peer;         /* the other end once connecting */
    int connected;
} fk_id;

struct fk_qp {
    struct ibv_qp qp;           /* first */
    fk_id *owner;
    fk_qp *peer;
    int error;
    int pending;                /* a READ posted that has not completed (dropped) */
    int max_dest_rd;            /* responder resources rdma_accept gave it */
    uint64_t pending_wr;
};

typedef struct fk_cc {
    struct ibv_comp_channel cc; /* first */
    int wfd;
    int cqs;                    /* CQs attached */
    int events;                 /* events written, not yet read */
} fk_cc;

typedef struct fk_cq {
    struct ibv_cq cq;           /* first */
    struct ibv_wc q[64];
    int n;
    int armed;
    int qps;                    /* QPs attached */
    int unacked;
} fk_cq;

typedef struct fk_mr {
    struct ibv_mr mr;           /* first */
    int access;
    struct fk_mr *next;
} fk_mr;

enum fk_inject { FK_NORMAL, FK_STATUS, FK_DROP, FK_DELAY };

static struct {
    pthread_mutex_t mu;
    struct ibv_device dev;
    struct ibv_context ctx;
    int ndev;                   /* devices get_device_list reports */
    enum ibv_port_state port_state;
    fk_id *listeners[8];
    fk_mr *mrs;
    uint32_t next_key;
    /* live objects */
    int ids, qps, cqs, ccs, pds, mrs_live, chans, events_out, opens, lists;
    /* counters */
    int regs, deregs, cq_events, disconnects;
    /* injection for the next READ */
    enum fk_inject inject;
    enum ibv_wc_status inject_status;
    int inject_delay_ms;
    int corrupt_priv;           /* the next connect's private data loses its magic */
    int fail_create_qp;         /* the next rdma_create_qp fails */
    int fail_reg;               /* the next ibv_reg_mr fails */
    int post_fail;              /* ibv_post_send returns this */
    pthread_t delayer;
    int delayer_running;
    fk_id *last_child;          /* the server's end of the last connection accepted */
} fk = { .mu = PTHREAD_MUTEX_INITIALIZER, .ndev = 1, .port_state = IBV_PORT_ACTIVE,
         .next_key = 0x1000 };

static void fk_chan_sync(fk_chan *c)
{
    char b = 1;

    if (c->head && !c->signalled) {
        if (write(c->wfd, &b, 1) == 1)
            c->signalled = 1;
    } else if (!c->head && c->signalled) {
        if (read(c->ch.fd, &b, 1) == 1)
            c->signalled = 0;
    }
}

static void fk_queue(fk_id *id, enum rdma_cm_event_type type, int status,
                     const void *priv, size_t plen, uint8_t depth, fk_id *listen)
{
    fk_chan *c = (fk_chan *)id->id.channel;
    fk_ev *e = calloc(1, sizeof(*e));

    ck_assert_ptr_nonnull(e);
    e->ev.id = &id->id;
    e->ev.listen_id = listen ? &listen->id : NULL;
    e->ev.event = type;
    e->ev.status = status;
    if (priv) {
        memcpy(e->priv, priv, plen);
        e->ev.param.conn.private_data = e->priv;
        /* IB pads the REQ's private data: the module must accept >= 36. */
        e->ev.param.conn.private_data_len = sizeof(e->priv);
        /* As the kernel does, a connect request reports the remote's
         * values swapped, ready for rdma_accept: responder_resources is
         * the initiator depth the active side asked for. */
        e->ev.param.conn.responder_resources = depth;
        e->ev.param.conn.initiator_depth = 0;
    }
    if (c->tail)
        c->tail->next = e;
    else
        c->head = e;
    c->tail = e;
    fk_chan_sync(c);
}

static struct rdma_event_channel *fk_create_event_channel(void)
{
    fk_chan *c = calloc(1, sizeof(*c));
    int p[2];

    if (!c || pipe2(p, O_CLOEXEC) != 0) {
        free(c);
        return NULL;
    }
    c->ch.fd = p[0];
    c->wfd = p[1];
    pthread_mutex_lock(&fk.mu);
    fk.chans++;
    pthread_mutex_unlock(&fk.mu);
    return &c->ch;
}

static void fk_destroy_id_locked(fk_id *f);

static void fk_destroy_event_channel(struct rdma_event_channel *ch)
{
    fk_chan *c = (fk_chan *)ch;

    pthread_mutex_lock(&fk.mu);
    while (c->head) {           /* unreported events: connect requests' ids die too */
        fk_ev *e = c->head;

        c->head = e->next;
        if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST)
            fk_destroy_id_locked((fk_id *)e->ev.id);
        free(e);
    }
    fk.chans--;
    pthread_mutex_unlock(&fk.mu);
    close(c->ch.fd);
    close(c->wfd);
    free(c);
}

static int fk_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *context,
                        enum rdma_port_space ps)
{
    fk_id *f = calloc(1, sizeof(*f));

    if (!f) {
        errno = ENOMEM;
        return -1;
    }
    f->id.channel = ch;
    f->id.context = context;
    f->id.ps = ps;
    pthread_mutex_lock(&fk.mu);
    fk.ids++;
    pthread_mutex_unlock(&fk.mu);
    *id = &f->id;
    return 0;
}

/* Drop queued events naming f (as rdma_destroy_id does). */
static void fk_drop_events_locked(fk_id *f)
{
    fk_chan *c = (fk_chan *)f->id.channel;
    fk_ev **pp = &c->head, *prev = NULL;

    while (*pp) {
        fk_ev *e = *pp;

        if (e->ev.id == &f->id) {
            *pp = e->next;
            free(e);
        } else {
            prev = e;
            pp = &e->next;
        }
    }
    c->tail = prev;
    fk_chan_sync(c);
}

static void fk_destroy_id_locked(fk_id *f)
{
    ck_assert_msg(f->id.qp == NULL, "rdma_destroy_id with a QP still on it");
    if (f->peer)
        f->peer->peer = NULL;
    for (int i = 0; i < 8; i++)
        if (fk.listeners[i] == f)
            fk.listeners[i] = NULL;
    fk_drop_events_locked(f);
    fk.ids--;
    free(f);
}

static int fk_destroy_id(struct rdma_cm_id *id)
{
    pthread_mutex_lock(&fk.mu);
    fk_destroy_id_locked((fk_id *)id);
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

static void fk_gid(struct rdma_cm_id *id)
{
    uint8_t *g = id->route.addr.addr.ibaddr.sgid.raw;

    memset(g, 0, 16);
    g[10] = g[11] = 0xff;
    inet_pton(AF_INET, FK_ADDR, g + 12);
}

static int fk_is_dev_addr(const struct sockaddr *sa)
{
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
    struct in_addr a;

    inet_pton(AF_INET, FK_ADDR, &a);
    return sa->sa_family == AF_INET && s4->sin_addr.s_addr == a.s_addr;
}

static int fk_bind_addr(struct rdma_cm_id *id, struct sockaddr *sa)
{
    fk_id *f = (fk_id *)id;
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
    int rc = 0;

    pthread_mutex_lock(&fk.mu);
    if (sa->sa_family != AF_INET) {
        errno = EAFNOSUPPORT;
        rc = -1;
    } else if (s4->sin_addr.s_addr != htonl(INADDR_ANY) && !fk_is_dev_addr(sa)) {
        errno = EADDRNOTAVAIL;
        rc = -1;
    } else {
        for (int i = 0; i < 8; i++)
            if (fk.listeners[i] && fk.listeners[i]->port == ntohs(s4->sin_port)) {
                errno = EADDRINUSE;
                rc = -1;
            }
    }
    if (rc == 0) {
        f->port = ntohs(s4->sin_port);
        memcpy(&id->route.addr.src_storage, sa, sizeof(*s4));
        if (fk_is_dev_addr(sa)) {
            id->verbs = &fk.ctx;
            id->port_num = 1;
            fk_gid(id);
        }
    }
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

static int fk_listen(struct rdma_cm_id *id, int backlog)
{
    fk_id *f = (fk_id *)id;

    pthread_mutex_lock(&fk.mu);
    for (int i = 0; i < 8; i++)
        if (!fk.listeners[i]) {
            fk.listeners[i] = f;
            f->listening = 1;
            break;
        }
    pthread_mutex_unlock(&fk.mu);
    return f->listening ? 0 : (errno = ENOMEM, -1);
}

static int fk_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
                           int timeout_ms)
{
    fk_id *f = (fk_id *)id;

    pthread_mutex_lock(&fk.mu);
    memcpy(&id->route.addr.dst_storage, dst, sizeof(struct sockaddr_in));
    if (fk_is_dev_addr(dst)) {
        struct sockaddr_in *s = &id->route.addr.src_sin;

        id->verbs = &fk.ctx;
        id->port_num = 1;
        fk_gid(id);
        s->sin_family = AF_INET;
        inet_pton(AF_INET, FK_ADDR, &s->sin_addr);
        s->sin_port = htons(40000);
        fk_queue(f, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0, 0, NULL);
    } else {
        fk_queue(f, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH, NULL, 0, 0, NULL);
    }
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

static int fk_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
    pthread_mutex_lock(&fk.mu);
    fk_queue((fk_id *)id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0, 0, NULL);
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

static int fk_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
    fk_id *f = (fk_id *)id, *l = NULL, *child;
    uint16_t port = ntohs(id->route.addr.dst_sin.sin_port);
    uint8_t priv[56] = { 0 };

    ck_assert_ptr_nonnull(id->qp);
    ck_assert_uint_le(p->private_data_len, 56);
    pthread_mutex_lock(&fk.mu);
    for (int i = 0; i < 8; i++)
        if (fk.listeners[i] && fk.listeners[i]->port == port)
            l = fk.listeners[i];
    if (!l) {
        fk_queue(f, RDMA_CM_EVENT_REJECTED, 28, NULL, 0, 0, NULL);
        pthread_mutex_unlock(&fk.mu);
        return 0;
    }
    child = calloc(1, sizeof(*child));
    ck_assert_ptr_nonnull(child);
    fk.ids++;
    child->id.channel = l->id.channel;
    child->id.context = l->id.context;
    child->id.verbs = l->id.verbs;
    child->id.port_num = 1;
    child->id.ps = l->id.ps;
    memcpy(&child->id.route.addr.dst_storage, &id->route.addr.src_storage,
           sizeof(struct sockaddr_in));
    child->peer = f;
    f->peer = child;
    memcpy(priv, p->private_data, p->private_data_len);
    if (fk.corrupt_priv) {
        fk.corrupt_priv = 0;
        priv[0] ^= 0xff;
    }
    fk_queue(l, RDMA_CM_EVENT_CONNECT_REQUEST, 0, priv, p->private_data_len,
             p->initiator_depth, l);
    /* The event names the child, on the listener's channel. */
    ((fk_chan *)l->id.channel)->tail->ev.id = &child->id;
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

static int fk_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
    fk_id *f = (fk_id *)id;

    pthread_mutex_lock(&fk.mu);
    ck_assert_ptr_nonnull(id->qp);
    ck_assert_ptr_nonnull(f->peer);
    ck_assert_ptr_nonnull(f->peer->id.qp);
    /* The responder must take as many READs as the initiator may have in
     * flight, or a real responder never answers them. */
    ((fk_qp *)id->qp)->max_dest_rd = p->responder_resources;
    ((fk_qp *)id->qp)->peer = (fk_qp *)f->peer->id.qp;
    ((fk_qp *)f->peer->id.qp)->peer = (fk_qp *)id->qp;
    f->connected = f->peer->connected = 1;
    fk.last_child = f;
    fk_queue(f, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0, 0, NULL);
    fk_queue(f->peer, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0, 0, NULL);
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

static int fk_reject(struct rdma_cm_id *id, const void *priv, uint8_t len)
{
    fk_id *f = (fk_id *)id;

    pthread_mutex_lock(&fk.mu);
    if (f->peer) {
        fk_queue(f->peer, RDMA_CM_EVENT_REJECTED, 28, NULL, 0, 0, NULL);
        f->peer->peer = NULL;
        f->peer = NULL;
    }
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

static void fk_cqe_locked(fk_cq *cq, uint64_t wr_id, enum ibv_wc_status st, uint32_t len,
                          uint32_t qpn)
{
    struct ibv_wc *wc;

    ck_assert_int_lt(cq->n, 64);
    wc = &cq->q[cq->n++];
    memset(wc, 0, sizeof(*wc));
    wc->wr_id = wr_id;
    wc->status = st;
    wc->opcode = IBV_WC_RDMA_READ;
    wc->byte_len = len;
    wc->qp_num = qpn;
    if (cq->armed && cq->cq.channel) {
        fk_cc *cc = (fk_cc *)cq->cq.channel;
        cq->armed = 0;
        /* the pipe carries the CQ's address: one event per write */
        if (write(cc->wfd, &cq, sizeof(cq)) == (ssize_t)sizeof(cq))
            cc->events++;
    }
}

/* The QP enters the error state: its outstanding READ is flushed. */
static void fk_qp_error_locked(fk_qp *q)
{
    if (!q)
        return;
    q->error = 1;
    if (q->pending) {
        q->pending = 0;
        fk_cqe_locked((fk_cq *)q->qp.send_cq, q->pending_wr, IBV_WC_WR_FLUSH_ERR, 0, q->qp.qp_num);
    }
}

static int fk_disconnect_locked(fk_id *f, int flush)
{
    fk.disconnects++;
    /* librdmacm moves the QP to error first, whatever the state. */
    fk_qp_error_locked((fk_qp *)f->id.qp);
    if (!f->connected) {
        errno = EINVAL;
        return -1;
    }
    f->connected = 0;
    fk_queue(f, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0, 0, NULL);
    if (f->peer && f->peer->connected) {
        f->peer->connected = 0;
        fk_queue(f->peer, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0, 0, NULL);
        if (flush)
            fk_qp_error_locked((fk_qp *)f->peer->id.qp);
    }
    return 0;
}

static int fk_disconnect(struct rdma_cm_id *id)
{
    int rc;

    pthread_mutex_lock(&fk.mu);
    rc = fk_disconnect_locked((fk_id *)id, 1);
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

static int fk_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
    fk_qp *q;

    pthread_mutex_lock(&fk.mu);
    if (fk.fail_create_qp) {
        fk.fail_create_qp = 0;
        pthread_mutex_unlock(&fk.mu);
        errno = ENOMEM;
        return -1;
    }
    ck_assert_int_eq(a->qp_type, IBV_QPT_RC);
    ck_assert_ptr_eq(pd->context, id->verbs);
    q = calloc(1, sizeof(*q));
    ck_assert_ptr_nonnull(q);
    q->qp.context = id->verbs;
    q->qp.pd = pd;
    q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq;
    q->qp.qp_type = a->qp_type;
    q->qp.qp_num = ++fk.next_key;
    q->owner = (fk_id *)id;
    ((fk_cq *)a->send_cq)->qps++;
    ((fk_cq *)a->recv_cq)->qps++;
    id->qp = &q->qp;
    fk.qps++;
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

static void fk_destroy_qp(struct rdma_cm_id *id)
{
    fk_qp *q = (fk_qp *)id->qp;

    pthread_mutex_lock(&fk.mu);
    if (q->peer)
        q->peer->peer = NULL;
    ((fk_cq *)q->qp.send_cq)->qps--;
    ((fk_cq *)q->qp.recv_cq)->qps--;
    id->qp = NULL;
    fk.qps--;
    free(q);
    pthread_mutex_unlock(&fk.mu);
}

static int fk_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **ev)
{
    fk_chan *c = (fk_chan *)ch;
    fk_ev *e;

    pthread_mutex_lock(&fk.mu);
    e = c->head;
    if (!e) {
        pthread_mutex_unlock(&fk.mu);
        errno = EAGAIN;
        return -1;
    }
    c->head = e->next;
    if (!c->head)
        c->tail = NULL;
    fk_chan_sync(c);
    fk.events_out++;
    pthread_mutex_unlock(&fk.mu);
    *ev = &e->ev;
    return 0;
}

static int fk_ack_cm_event(struct rdma_cm_event *ev)
{
    pthread_mutex_lock(&fk.mu);
    fk.events_out--;
    pthread_mutex_unlock(&fk.mu);
    free(ev);                   /* &fk_ev.ev is the allocation */
    return 0;
}

static const char *fk_event_str(enum rdma_cm_event_type t)
{
    static char b[8][32];
    static int i;
    char *s = b[i++ & 7];

    snprintf(s, 32, "EVENT_%d", (int)t);
    return s;
}

static struct ibv_device **fk_get_device_list(int *num)
{
    struct ibv_device **l = calloc(2, sizeof(*l));

    if (!l)
        return NULL;
    if (fk.ndev)
        l[0] = &fk.dev;
    *num = fk.ndev;
    __atomic_add_fetch(&fk.lists, 1, __ATOMIC_SEQ_CST);
    return l;
}

static void fk_free_device_list(struct ibv_device **l)
{
    __atomic_sub_fetch(&fk.lists, 1, __ATOMIC_SEQ_CST);
    free(l);
}

static const char *fk_get_device_name(struct ibv_device *d)
{
    return d->name;
}

static struct ibv_context *fk_open_device(struct ibv_device *d)
{
    __atomic_add_fetch(&fk.opens, 1, __ATOMIC_SEQ_CST);
    return &fk.ctx;
}

static int fk_close_device(struct ibv_context *c)
{
    __atomic_sub_fetch(&fk.opens, 1, __ATOMIC_SEQ_CST);
    return 0;
}

static int fk_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->phys_port_cnt = 1;
    return 0;
}

static int fk_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->state = fk.port_state;
    return 0;
}

static struct ibv_pd *fk_alloc_pd(struct ibv_context *ctx)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));

    ck_assert_ptr_eq(ctx, &fk.ctx);
    pd->context = ctx;
    pthread_mutex_lock(&fk.mu);
    fk.pds++;
    pthread_mutex_unlock(&fk.mu);
    return pd;
}

static int fk_dealloc_pd(struct ibv_pd *pd)
{
    pthread_mutex_lock(&fk.mu);
    for (fk_mr *m = fk.mrs; m; m = m->next)
        ck_assert_msg(m->mr.pd != pd, "ibv_dealloc_pd with a region still registered");
    fk.pds--;
    pthread_mutex_unlock(&fk.mu);
    free(pd);
    return 0;
}

static struct ibv_mr *fk_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    fk_mr *m;

    pthread_mutex_lock(&fk.mu);
    if (fk.fail_reg) {
        fk.fail_reg = 0;
        pthread_mutex_unlock(&fk.mu);
        errno = ENOMEM;
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    ck_assert_ptr_nonnull(m);
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = len;
    m->mr.lkey = (fk.next_key += 0x101);
    m->mr.rkey = m->mr.lkey ^ 0x5a5a0000u;
    m->access = access;
    m->next = fk.mrs;
    fk.mrs = m;
    fk.mrs_live++;
    fk.regs++;
    pthread_mutex_unlock(&fk.mu);
    return &m->mr;
}

static int fk_dereg_mr(struct ibv_mr *mr)
{
    pthread_mutex_lock(&fk.mu);
    for (fk_mr **pp = &fk.mrs; *pp; pp = &(*pp)->next)
        if (&(*pp)->mr == mr) {
            fk_mr *m = *pp;

            *pp = m->next;
            free(m);
            fk.mrs_live--;
            fk.deregs++;
            pthread_mutex_unlock(&fk.mu);
            return 0;
        }
    pthread_mutex_unlock(&fk.mu);
    ck_abort_msg("ibv_dereg_mr of an unknown region");
    return EINVAL;
}

static struct ibv_comp_channel *fk_create_comp_channel(struct ibv_context *ctx)
{
    fk_cc *c = calloc(1, sizeof(*c));
    int p[2];

    if (!c || pipe2(p, O_CLOEXEC) != 0) {
        free(c);
        return NULL;
    }
    c->cc.context = ctx;
    c->cc.fd = p[0];
    c->wfd = p[1];
    pthread_mutex_lock(&fk.mu);
    fk.ccs++;
    pthread_mutex_unlock(&fk.mu);
    return &c->cc;
}

static int fk_destroy_comp_channel(struct ibv_comp_channel *cc)
{
    fk_cc *c = (fk_cc *)cc;

    ck_assert_msg(c->cqs == 0, "ibv_destroy_comp_channel with a CQ still on it");
    close(c->cc.fd);
    close(c->wfd);
    free(c);
    pthread_mutex_lock(&fk.mu);
    fk.ccs--;
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

static struct ibv_cq *fk_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                                   struct ibv_comp_channel *cc, int vec)
{
    fk_cq *q = calloc(1, sizeof(*q));

    q->cq.context = ctx;
    q->cq.channel = cc;
    q->cq.cq_context = cq_context;
    q->cq.cqe = cqe;
    pthread_mutex_lock(&fk.mu);
    if (cc)
        ((fk_cc *)cc)->cqs++;
    fk.cqs++;
    pthread_mutex_unlock(&fk.mu);
    return &q->cq;
}

static int fk_destroy_cq(struct ibv_cq *cq)
{
    fk_cq *q = (fk_cq *)cq;

    ck_assert_msg(q->qps == 0, "ibv_destroy_cq with a QP still on it");
    ck_assert_msg(q->unacked == 0, "ibv_destroy_cq with unacknowledged events");
    pthread_mutex_lock(&fk.mu);
    if (cq->channel)
        ((fk_cc *)cq->channel)->cqs--;
    fk.cqs--;
    pthread_mutex_unlock(&fk.mu);
    free(q);
    return 0;
}

static int fk_req_notify_cq(struct ibv_cq *cq, int sol)
{
    pthread_mutex_lock(&fk.mu);
    ((fk_cq *)cq)->armed = 1;
    pthread_mutex_unlock(&fk.mu);
    return 0;
}

static int fk_get_cq_event(struct ibv_comp_channel *cc, struct ibv_cq **cq, void **ctx)
{
    fk_cc *c = (fk_cc *)cc;
    fk_cq *q;
    ssize_t n = read(c->cc.fd, &q, sizeof(q));

    if (n != (ssize_t)sizeof(q)) {
        errno = n < 0 ? errno : EAGAIN;
        return -1;
    }
    pthread_mutex_lock(&fk.mu);
    c->events--;
    q->unacked++;
    fk.cq_events++;
    pthread_mutex_unlock(&fk.mu);
    *cq = &q->cq;
    *ctx = q->cq.cq_context;
    return 0;
}

static void fk_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
    pthread_mutex_lock(&fk.mu);
    ((fk_cq *)cq)->unacked -= (int)n;
    pthread_mutex_unlock(&fk.mu);
}

static int fk_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    fk_cq *q = (fk_cq *)cq;
    int got = 0;

    pthread_mutex_lock(&fk.mu);
    while (got < n && q->n > 0) {
        wc[got++] = q->q[0];
        memmove(q->q, q->q + 1, (size_t)(q->n - 1) * sizeof(q->q[0]));
        q->n--;
    }
    pthread_mutex_unlock(&fk.mu);
    return got;
}

static fk_mr *fk_find_mr_locked(uint32_t key, int remote, struct ibv_pd *pd)
{
    for (fk_mr *m = fk.mrs; m; m = m->next)
        if ((remote ? m->mr.rkey : m->mr.lkey) == key && m->mr.pd == pd)
            return m;
    return NULL;
}

/* Carry out a READ on q now: checks, copy, completion. */
static void fk_do_read_locked(fk_qp *q, uint64_t wr_id, const struct ibv_sge *sge,
                              uint64_t raddr, uint32_t rkey)
{
    fk_cq *cq = (fk_cq *)q->qp.send_cq;
    fk_mr *l = fk_find_mr_locked(sge->lkey, 0, q->qp.pd);
    fk_mr *r = q->peer ? fk_find_mr_locked(rkey, 1, q->peer->qp.pd) : NULL;

    if (q->error || !q->peer) {
        fk_cqe_locked(cq, wr_id, IBV_WC_WR_FLUSH_ERR, 0, q->qp.qp_num);
        return;
    }
    if (!l || !(l->access & IBV_ACCESS_LOCAL_WRITE) || sge->addr < (uintptr_t)l->mr.addr ||
        sge->addr + sge->length > (uintptr_t)l->mr.addr + l->mr.length) {
        fk_cqe_locked(cq, wr_id, IBV_WC_LOC_PROT_ERR, 0, q->qp.qp_num);
        return;
    }
    if (!r || !(r->access & IBV_ACCESS_REMOTE_READ) || raddr < (uintptr_t)r->mr.addr ||
        raddr + sge->length > (uintptr_t)r->mr.addr + r->mr.length) {
        fk_cqe_locked(cq, wr_id, IBV_WC_REM_ACCESS_ERR, 0, q->qp.qp_num);
        q->error = 1;           /* a responder error moves the requester's QP to error */
        return;
    }
    if (q->peer->max_dest_rd < 1) {  /* no responder resources: never answered */
        fk_cqe_locked(cq, wr_id, IBV_WC_RETRY_EXC_ERR, 0, q->qp.qp_num);
        q->error = 1;
        return;
    }
    memcpy((void *)(uintptr_t)sge->addr, (void *)(uintptr_t)raddr, sge->length);
    fk_cqe_locked(cq, wr_id, IBV_WC_SUCCESS, sge->length, q->qp.qp_num);
}

typedef struct fk_delayed {
    fk_qp *q;
    uint64_t wr_id;
    struct ibv_sge sge;
    uint64_t raddr;
    uint32_t rkey;
    int ms;
} fk_delayed;

static fk_delayed fk_dl;

static void *fk_delay_thread(void *arg)
{
    fk_delayed *d = arg;

    usleep((useconds_t)d->ms * 1000);
    pthread_mutex_lock(&fk.mu);
    if (d->q->pending) {        /* not flushed meanwhile */
        d->q->pending = 0;
        fk_do_read_locked(d->q, d->wr_id, &d->sge, d->raddr, d->rkey);
    }
    pthread_mutex_unlock(&fk.mu);
    return NULL;
}

static int fk_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    fk_qp *q = (fk_qp *)qp;
    int rc = 0;

    ck_assert_ptr_null(wr->next);
    ck_assert_int_eq(wr->opcode, IBV_WR_RDMA_READ);
    ck_assert_int_eq(wr->num_sge, 1);
    ck_assert(wr->send_flags & IBV_SEND_SIGNALED);
    pthread_mutex_lock(&fk.mu);
    ck_assert_msg(!q->pending, "a second READ posted while one is outstanding");
    if (fk.post_fail) {
        rc = fk.post_fail;
        fk.post_fail = 0;
        *bad = wr;
        goto out;
    }
    switch (fk.inject) {
    case FK_NORMAL:
        fk_do_read_locked(q, wr->wr_id, wr->sg_list, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey);
        break;
    case FK_STATUS:
        fk_cqe_locked((fk_cq *)qp->send_cq, wr->wr_id, fk.inject_status, 0, qp->qp_num);
        q->error = 1;
        break;
    case FK_DROP:               /* no completion until the QP is flushed */
        q->pending = 1;
        q->pending_wr = wr->wr_id;
        break;
    case FK_DELAY:
        q->pending = 1;
        q->pending_wr = wr->wr_id;
        fk_dl = (fk_delayed){ .q = q, .wr_id = wr->wr_id, .sge = *wr->sg_list,
                              .raddr = wr->wr.rdma.remote_addr, .rkey = wr->wr.rdma.rkey,
                              .ms = fk.inject_delay_ms };
        ck_assert_int_eq(pthread_create(&fk.delayer, NULL, fk_delay_thread, &fk_dl), 0);
        fk.delayer_running = 1;
        break;
    }
    fk.inject = FK_NORMAL;
out:
    pthread_mutex_unlock(&fk.mu);
    return rc;
}

static const char *fk_wc_status_str(enum ibv_wc_status s)
{
    return s == IBV_WC_SUCCESS ? "success" : s == IBV_WC_REM_ACCESS_ERR ? "remote access error"
         : s == IBV_WC_RETRY_EXC_ERR ? "transport retry counter exceeded"
         : s == IBV_WC_WR_FLUSH_ERR ? "Work Request Flushed Error" : "other error";
}

static const rdma_ops fk_ops = {
    .name = "stand-in",
    .create_event_channel = fk_create_event_channel,
    .destroy_event_channel = fk_destroy_event_channel,
    .create_id = fk_create_id,
    .destroy_id = fk_destroy_id,
    .bind_addr = fk_bind_addr,
    .listen = fk_listen,
    .resolve_addr = fk_resolve_addr,
    .resolve_route = fk_resolve_route,
    .connect = fk_connect,
    .accept = fk_accept,
    .reject = fk_reject,
    .disconnect = fk_disconnect,
    .create_qp = fk_create_qp,
    .destroy_qp = fk_destroy_qp,
    .get_cm_event = fk_get_cm_event,
    .ack_cm_event = fk_ack_cm_event,
    .event_str = fk_event_str,
    .get_device_list = fk_get_device_list,
    .free_device_list = fk_free_device_list,
    .get_device_name = fk_get_device_name,
    .open_device = fk_open_device,
    .close_device = fk_close_device,
    .query_device = fk_query_device,
    .query_port = fk_query_port,
    .alloc_pd = fk_alloc_pd,
    .dealloc_pd = fk_dealloc_pd,
    .reg_mr = fk_reg_mr,
    .dereg_mr = fk_dereg_mr,
    .create_comp_channel = fk_create_comp_channel,
    .destroy_comp_channel = fk_destroy_comp_channel,
    .create_cq = fk_create_cq,
    .destroy_cq = fk_destroy_cq,
    .req_notify_cq = fk_req_notify_cq,
    .get_cq_event = fk_get_cq_event,
    .ack_cq_events = fk_ack_cq_events,
    .poll_cq = fk_poll_cq,
    .post_send = fk_post_send,
    .wc_status_str = fk_wc_status_str,
};

/* ======================================================================
 * Helpers of the tests
 * ====================================================================== */

#define PORT 7471
#define MiB (1024u * 1024u)

static const uint8_t tok_good[RDMA_TOKEN_LEN] = "granary-test-token-0123456789ab";
static const uint8_t tok_bad[RDMA_TOKEN_LEN] = "granary-test-token-0123456789aX";
static int checks_called;

static int check_tok(void *arg, const uint8_t tok[RDMA_TOKEN_LEN])
{
    __atomic_add_fetch(&checks_called, 1, __ATOMIC_SEQ_CST);
    return memcmp(tok, arg, RDMA_TOKEN_LEN) == 0;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int fds_at_start;

static void setup(void)
{
    snprintf(fk.dev.name, sizeof(fk.dev.name), "fk0");
    fk.ctx.device = &fk.dev;
    log_set_level(LOG_DEBUG);
    fds_at_start = count_fds();
}

/* Everything the stand-in handed out has been given back. */
static void assert_clean(void)
{
    if (fk.delayer_running) {
        pthread_join(fk.delayer, NULL);
        fk.delayer_running = 0;
    }
    pthread_mutex_lock(&fk.mu);
    ck_assert_int_eq(fk.ids, 0);
    ck_assert_int_eq(fk.qps, 0);
    ck_assert_int_eq(fk.cqs, 0);
    ck_assert_int_eq(fk.ccs, 0);
    ck_assert_int_eq(fk.pds, 0);
    ck_assert_int_eq(fk.mrs_live, 0);
    ck_assert_int_eq(fk.chans, 0);
    ck_assert_int_eq(fk.events_out, 0);
    ck_assert_int_eq(fk.opens, 0);
    ck_assert_int_eq(fk.lists, 0);
    pthread_mutex_unlock(&fk.mu);
    ck_assert_int_eq(count_fds(), fds_at_start);
}

static rdma_srv *srv_up(void)
{
    char err[256] = "";
    rdma_srv *s = NULL;
    int rc = rdma_srv_new(&fk_ops, FK_ADDR, PORT, check_tok, (void *)tok_good, &s, err,
                          sizeof(err));

    ck_assert_msg(rc == 0, "rdma_srv_new: %d %s", rc, err);
    return s;
}

static rdma_cli *cli_up(const uint8_t *tok, size_t max_len)
{
    char err[256] = "";
    rdma_cli *c = NULL;
    int rc = rdma_cli_connect(&fk_ops, FK_ADDR, PORT, tok, max_len, 2000, &c, err, sizeof(err));

    ck_assert_msg(rc == 0, "rdma_cli_connect: %d %s", rc, err);
    ck_assert(rdma_cli_alive(c));
    return c;
}

static rdma_srv_stats stats(rdma_srv *s)
{
    rdma_srv_stats st;

    rdma_srv_get_stats(s, &st);
    return st;
}

/* Wait (2 s at most) until the server holds n established connections. */
static void wait_conns(rdma_srv *s, uint64_t n)
{
    for (int i = 0; i < 2000 && stats(s).conns != n; i++)
        usleep(1000);
    ck_assert_uint_eq(stats(s).conns, n);
}

static uint8_t *random_buf(size_t len, unsigned seed)
{
    uint8_t *b = malloc(len);

    ck_assert_ptr_nonnull(b);
    srandom(seed);
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)random();
    return b;
}

/* ======================================================================
 * Tests
 * ====================================================================== */

/* On this host (no RDMA device) the real table says so and the set-up
 * functions fail with a reason, leaking nothing. */
START_TEST(test_real_verbs_without_device)
{
    char err[256] = "";
    rdma_srv *s = NULL;
    rdma_cli *c = NULL;
    int rc;

    if (rdma_device_present(&rdma_ops_real)) {
        fprintf(stderr, "SKIP test_real_verbs_without_device: this host has an RDMA device\n");
        return;
    }
    rc = rdma_srv_new(&rdma_ops_real, "127.0.0.1", PORT, check_tok, (void *)tok_good, &s, err,
                      sizeof(err));
    ck_assert_int_lt(rc, 0);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err, "rdma") != NULL, "err: %s", err);
    rc = rdma_cli_connect(&rdma_ops_real, "127.0.0.1", PORT, tok_good, 4096, 200, &c, err,
                          sizeof(err));
    ck_assert_int_lt(rc, 0);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(count_fds(), fds_at_start);
}
END_TEST

START_TEST(test_device_present)
{
    fk.ndev = 0;
    ck_assert_int_eq(rdma_device_present(&fk_ops), 0);
    fk.ndev = 1;
    fk.port_state = IBV_PORT_DOWN;
    ck_assert_int_eq(rdma_device_present(&fk_ops), 0);
    fk.port_state = IBV_PORT_ACTIVE;
    ck_assert_int_eq(rdma_device_present(&fk_ops), 1);
    assert_clean();
}
END_TEST

START_TEST(test_srv_bad_addresses)
{
    char err[256];
    rdma_srv *s = NULL, *s2 = NULL;

    err[0] = 0;
    ck_assert_int_eq(rdma_srv_new(&fk_ops, "10.9.9.9", PORT, check_tok, NULL, &s, err,
                                  sizeof(err)), -ENODEV);
    ck_assert_msg(strstr(err, "10.9.9.9") != NULL, "err: %s", err);
    err[0] = 0;
    ck_assert_int_eq(rdma_srv_new(&fk_ops, "0.0.0.0", PORT, check_tok, NULL, &s, err,
                                  sizeof(err)), -ENODEV);
    ck_assert_msg(strstr(err, "wildcard") != NULL, "err: %s", err);
    ck_assert_int_eq(rdma_srv_new(&fk_ops, "no such host.invalid", PORT, check_tok, NULL, &s,
                                  err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(rdma_srv_new(&fk_ops, FK_ADDR, PORT, NULL, NULL, &s, err, sizeof(err)),
                     -EINVAL);
    ck_assert_ptr_null(s);
    s = srv_up();
    ck_assert_int_eq(rdma_srv_new(&fk_ops, FK_ADDR, PORT, check_tok, NULL, &s2, err, sizeof(err)),
                     -EADDRINUSE);
    ck_assert_ptr_null(s2);
    rdma_srv_free(&s);
    ck_assert_ptr_null(s);
    rdma_srv_free(&s);          /* NULL-safe */
    rdma_srv_free(NULL);
    assert_clean();
}
END_TEST

START_TEST(test_connect_token)
{
    rdma_srv *s = srv_up();
    rdma_cli *c = NULL;
    char err[256] = "";
    int rc;

    c = cli_up(tok_good, 4096);
    wait_conns(s, 1);
    ck_assert_uint_eq(stats(s).accepted, 1);

    /* A wrong token: refused, nothing held on either side. */
    rdma_cli *c2 = NULL;
    rc = rdma_cli_connect(&fk_ops, FK_ADDR, PORT, tok_bad, 4096, 2000, &c2, err, sizeof(err));
    ck_assert_int_eq(rc, -ECONNREFUSED);
    ck_assert_ptr_null(c2);
    ck_assert_msg(strstr(err, "refused") != NULL, "err: %s", err);
    ck_assert_uint_eq(stats(s).refused, 1);

    /* The right token without the magic in front of it: refused too. */
    fk.corrupt_priv = 1;
    rc = rdma_cli_connect(&fk_ops, FK_ADDR, PORT, tok_good, 4096, 2000, &c2, err, sizeof(err));
    ck_assert_int_eq(rc, -ECONNREFUSED);
    ck_assert_uint_eq(stats(s).refused, 2);
    ck_assert_int_eq(checks_called, 2);     /* the malformed one never reached check() */

    /* The accepted one still works. */
    uint8_t *seg = random_buf(8192, 1), out[4096];
    uint32_t rkey;
    ck_assert_int_eq(rdma_srv_expose(s, seg, 8192, 1, &rkey), 0);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg + 100, rkey, 4096, out, 1000), 0);
    ck_assert_mem_eq(out, seg + 100, 4096);

    rdma_cli_free(&c);
    ck_assert_ptr_null(c);
    wait_conns(s, 0);
    rdma_srv_free(&s);
    free(seg);
    assert_clean();
}
END_TEST

START_TEST(test_connect_failures)
{
    char err[256] = "";
    rdma_cli *c = NULL;

    /* Nobody listening on the port. */
    ck_assert_int_eq(rdma_cli_connect(&fk_ops, FK_ADDR, PORT, tok_good, 4096, 500, &c, err,
                                      sizeof(err)), -ECONNREFUSED);
    /* No route over an RDMA device. */
    ck_assert_int_eq(rdma_cli_connect(&fk_ops, "10.1.1.1", PORT, tok_good, 4096, 500, &c, err,
                                      sizeof(err)), -EHOSTUNREACH);
    ck_assert_int_eq(rdma_cli_connect(&fk_ops, FK_ADDR, PORT, tok_good, 0, 500, &c, err,
                                      sizeof(err)), -EINVAL);
    ck_assert_int_eq(rdma_cli_connect(&fk_ops, FK_ADDR, PORT, tok_good, 4096, 0, &c, err,
                                      sizeof(err)), -EINVAL);
    /* The client's QP cannot be made; then the server's (refused). */
    rdma_srv *s = srv_up();
    fk.fail_create_qp = 1;
    ck_assert_int_lt(rdma_cli_connect(&fk_ops, FK_ADDR, PORT, tok_good, 4096, 500, &c, err,
                                      sizeof(err)), 0);
    fk.fail_reg = 1;
    ck_assert_int_lt(rdma_cli_connect(&fk_ops, FK_ADDR, PORT, tok_good, 4096, 500, &c, err,
                                      sizeof(err)), 0);
    ck_assert_ptr_null(c);
    {
        rdma_cli *ok = cli_up(tok_good, 4096);      /* the server still serves */
        rdma_cli_free(&ok);
    }
    rdma_srv_free(&s);
    assert_clean();
}
END_TEST

START_TEST(test_expose_read)
{
    rdma_srv *s = srv_up();
    const size_t seglen = 4 * MiB, max = 256 * 1024;
    uint8_t *seg[2] = { random_buf(seglen, 11), random_buf(seglen, 12) };
    uint32_t rkey[2];
    uint8_t *out = malloc(max);
    rdma_cli *c = cli_up(tok_good, max);

    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(rdma_srv_expose(s, seg[i], seglen, 1, &rkey[i]), 0);
    ck_assert_uint_ne(rkey[0], rkey[1]);
    ck_assert_uint_eq(stats(s).regions, 2);
    srandom(99);
    for (int i = 0; i < 400; i++) {
        int k = (int)(random() & 1);
        size_t len = 1 + (size_t)random() % max;
        size_t off = (size_t)random() % (seglen - len + 1);

        memset(out, 0xee, max);
        int rc = rdma_cli_read(c, (uintptr_t)seg[k] + off, rkey[k], len, out, 1000);
        if (rc != 0 || memcmp(out, seg[k] + off, len) != 0)
            ck_abort_msg("read %d: seg %d off %zu len %zu: rc %d, bytes %s", i, k, off, len, rc,
                         rc ? "-" : "differ");
    }
    /* The last byte, exactly; and a zero-length read. */
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg[1] + seglen - 1, rkey[1], 1, out, 1000), 0);
    ck_assert_uint_eq(out[0], seg[1][seglen - 1]);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg[1], rkey[1], 0, out, 1000), 0);

    /* Longer than the bounce buffer: refused, and the connection lives on. */
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg[0], rkey[0], max + 1, out, 1000), -EINVAL);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg[0], rkey[0], 16, out, 0), -EINVAL);
    ck_assert(rdma_cli_alive(c));
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg[0], rkey[0], max, out, 1000), 0);
    ck_assert_mem_eq(out, seg[0], max);

    /* One byte past the region: a remote access error, never bytes. */
    memset(out, 0xee, 16);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg[0] + seglen - 15, rkey[0], 16, out, 1000),
                     -EIO);
    ck_assert_uint_eq(out[0], 0xee);
    ck_assert(!rdma_cli_alive(c));
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg[0], rkey[0], 16, out, 1000), -ENOTCONN);
    rdma_cli_free(&c);

    /* A wrong rkey on a fresh connection: the same. */
    c = cli_up(tok_good, max);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg[0], rkey[0] ^ 0x40, 16, out, 1000), -EIO);
    rdma_cli_free(&c);

    ck_assert_int_eq(rdma_srv_unexpose(s, seg[0]), 0);
    ck_assert_int_eq(rdma_srv_unexpose(s, seg[0]), -ENOENT);
    ck_assert_uint_eq(stats(s).regions, 1);
    ck_assert_int_eq(rdma_srv_expose(s, NULL, 10, 1, &rkey[0]), -EINVAL);
    ck_assert_int_eq(rdma_srv_expose(s, seg[0], 0, 1, &rkey[0]), -EINVAL);
    rdma_srv_free(&s);          /* deregisters seg[1] */
    free(seg[0]);
    free(seg[1]);
    free(out);
    assert_clean();
}
END_TEST

START_TEST(test_reexpose_gen)
{
    rdma_srv *s = srv_up();
    const size_t seglen = 1 * MiB;
    uint8_t *seg = random_buf(seglen, 21), out[4096];
    uint32_t k1, k1b, k2, k3;
    rdma_cli *c = cli_up(tok_good, sizeof(out));

    ck_assert_int_eq(rdma_srv_expose(s, seg, seglen, 1, &k1), 0);
    ck_assert_int_eq(fk.regs, 2);                   /* the client's bounce buffer + seg */
    /* The same generation again: cached, no new registration. */
    ck_assert_int_eq(rdma_srv_expose(s, seg, seglen, 1, &k1b), 0);
    ck_assert_uint_eq(k1b, k1);
    ck_assert_int_eq(fk.regs, 2);
    ck_assert_uint_eq(stats(s).registrations, 1);

    /* The segment's owner changes: new contents, new generation. */
    uint8_t *fresh = random_buf(seglen, 22);
    memcpy(seg, fresh, seglen);
    ck_assert_int_eq(rdma_srv_expose(s, seg, seglen, 2, &k2), 0);
    ck_assert_uint_ne(k2, k1);
    ck_assert_int_eq(fk.regs, 3);
    ck_assert_int_eq(fk.deregs, 1);                 /* the old region is gone */
    ck_assert_int_eq(fk.mrs_live, 2);
    ck_assert_uint_eq(stats(s).regions, 1);
    ck_assert_uint_eq(stats(s).registrations, 2);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg + 1000, k2, sizeof(out), out, 1000), 0);
    ck_assert_mem_eq(out, fresh + 1000, sizeof(out));

    /* A registration that fails keeps the old one. */
    fk.fail_reg = 1;
    ck_assert_int_eq(rdma_srv_expose(s, seg, seglen, 3, &k3), -ENOMEM);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, k2, sizeof(out), out, 1000), 0);
    ck_assert_mem_eq(out, fresh, sizeof(out));

    /* A shorter length for the same base registers anew too. */
    ck_assert_int_eq(rdma_srv_expose(s, seg, seglen / 2, 2, &k3), 0);
    ck_assert_uint_ne(k3, k2);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg + seglen / 2, k3, 16, out, 1000), -EIO);
    rdma_cli_free(&c);

    /* The old generation's rkey reads nothing any more. */
    c = cli_up(tok_good, sizeof(out));
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, k1, sizeof(out), out, 1000), -EIO);
    rdma_cli_free(&c);
    rdma_srv_free(&s);
    free(seg);
    free(fresh);
    assert_clean();
}
END_TEST

/* Completion errors: -EIO, and the connection is dead from then on. */
static void completion_error(enum ibv_wc_status st)
{
    rdma_srv *s = srv_up();
    uint8_t *seg = random_buf(65536, 31), out[4096];
    uint32_t rkey;
    rdma_cli *c = cli_up(tok_good, sizeof(out));

    ck_assert_int_eq(rdma_srv_expose(s, seg, 65536, 1, &rkey), 0);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, rkey, sizeof(out), out, 1000), 0);
    fk.inject = FK_STATUS;
    fk.inject_status = st;
    memset(out, 0xee, sizeof(out));
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, rkey, sizeof(out), out, 1000), -EIO);
    ck_assert_uint_eq(out[0], 0xee);
    ck_assert(!rdma_cli_alive(c));
    /* Nothing is posted on a dead connection. */
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, rkey, sizeof(out), out, 1000), -ENOTCONN);
    rdma_cli_free(&c);
    rdma_srv_free(&s);
    free(seg);
    assert_clean();
}

START_TEST(test_remote_access_error)
{
    completion_error(IBV_WC_REM_ACCESS_ERR);
}
END_TEST

START_TEST(test_retry_exceeded)
{
    completion_error(IBV_WC_RETRY_EXC_ERR);
}
END_TEST

START_TEST(test_flushed)
{
    completion_error(IBV_WC_WR_FLUSH_ERR);
}
END_TEST

START_TEST(test_post_fails)
{
    rdma_srv *s = srv_up();
    uint8_t seg[4096], out[64];
    uint32_t rkey;
    rdma_cli *c = cli_up(tok_good, sizeof(out));

    ck_assert_int_eq(rdma_srv_expose(s, seg, sizeof(seg), 1, &rkey), 0);
    fk.post_fail = EINVAL;
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, rkey, sizeof(out), out, 1000), -EIO);
    ck_assert(!rdma_cli_alive(c));
    rdma_cli_free(&c);
    rdma_srv_free(&s);
    assert_clean();
}
END_TEST

/* A completion that never comes: -ETIMEDOUT within the timeout, and the
 * READ is flushed (its QP moved to error) before the call returns. */
START_TEST(test_timeout)
{
    rdma_srv *s = srv_up();
    uint8_t seg[4096], out[64];
    uint32_t rkey;
    rdma_cli *c = cli_up(tok_good, sizeof(out));
    uint64_t t0;
    double ms;

    ck_assert_int_eq(rdma_srv_expose(s, seg, sizeof(seg), 1, &rkey), 0);
    fk.inject = FK_DROP;
    t0 = gr__now_ns();
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, rkey, sizeof(out), out, 300), -ETIMEDOUT);
    ms = (double)(gr__now_ns() - t0) / 1e6;
    ck_assert_msg(ms >= 299 && ms < 300 + 250, "timed out after %.1f ms (timeout 300)", ms);
    ck_assert(!rdma_cli_alive(c));
    ck_assert_int_ge(fk.disconnects, 1);            /* the QP went to error: flushed */
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, rkey, sizeof(out), out, 300), -ENOTCONN);
    rdma_cli_free(&c);
    rdma_srv_free(&s);
    assert_clean();
}
END_TEST

/* A completion after 80 ms: found through the completion channel. */
START_TEST(test_slow_completion)
{
    rdma_srv *s = srv_up();
    uint8_t *seg = random_buf(65536, 41), out[8192];
    uint32_t rkey;
    rdma_cli *c = cli_up(tok_good, sizeof(out));
    uint64_t t0;

    ck_assert_int_eq(rdma_srv_expose(s, seg, 65536, 1, &rkey), 0);
    fk.inject = FK_DELAY;
    fk.inject_delay_ms = 80;
    t0 = gr__now_ns();
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg + 512, rkey, sizeof(out), out, 2000), 0);
    ck_assert_uint_ge(gr__now_ns() - t0, 79000000ull);
    ck_assert_mem_eq(out, seg + 512, sizeof(out));
    ck_assert_int_ge(fk.cq_events, 1);
    ck_assert(rdma_cli_alive(c));
    /* and the next read is fine */
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, rkey, 100, out, 2000), 0);
    ck_assert_mem_eq(out, seg, 100);
    rdma_cli_free(&c);
    rdma_srv_free(&s);
    free(seg);
    assert_clean();
}
END_TEST

typedef struct later {
    int ms;
    rdma_srv **srv;             /* rdma_srv_free it */
} later;

static void *do_later(void *arg)
{
    later *l = arg;

    usleep((useconds_t)l->ms * 1000);
    rdma_srv_free(l->srv);
    return NULL;
}

/* The peer goes away while a READ is outstanding. */
START_TEST(test_peer_dies_mid_read)
{
    rdma_srv *s = srv_up();
    uint8_t seg[4096], out[64];
    uint32_t rkey;
    rdma_cli *c = cli_up(tok_good, sizeof(out));
    later l = { .ms = 100, .srv = &s };
    pthread_t t;
    uint64_t t0;
    int rc;

    wait_conns(s, 1);
    ck_assert_int_eq(rdma_srv_expose(s, seg, sizeof(seg), 1, &rkey), 0);
    fk.inject = FK_DROP;
    t0 = gr__now_ns();
    pthread_create(&t, NULL, do_later, &l);
    rc = rdma_cli_read(c, (uintptr_t)seg, rkey, sizeof(out), out, 5000);
    pthread_join(t, NULL);
    ck_assert_msg(rc == -ENOTCONN || rc == -EIO, "rc %d", rc);
    ck_assert_msg(gr__now_ns() - t0 < 2000000000ull, "the read waited for its timeout");
    ck_assert(!rdma_cli_alive(c));
    ck_assert_ptr_null(s);
    rdma_cli_free(&c);
    assert_clean();
}
END_TEST

/* Only the DISCONNECTED event, no flushed completion (the server's end
 * disconnects; the client's QP is not moved to error by it): -ENOTCONN,
 * and the client's own disconnect then flushes its READ. */
static void *disconnect_later(void *arg)
{
    usleep(100 * 1000);
    pthread_mutex_lock(&fk.mu);
    fk_disconnect_locked(fk.last_child, 0);
    pthread_mutex_unlock(&fk.mu);
    return NULL;
}

START_TEST(test_disconnect_event_mid_read)
{
    rdma_srv *s = srv_up();
    uint8_t seg[4096], out[64];
    uint32_t rkey;
    rdma_cli *c = cli_up(tok_good, sizeof(out));
    pthread_t t;
    uint64_t t0;

    wait_conns(s, 1);
    ck_assert_int_eq(rdma_srv_expose(s, seg, sizeof(seg), 1, &rkey), 0);
    fk.inject = FK_DROP;
    t0 = gr__now_ns();
    pthread_create(&t, NULL, disconnect_later, NULL);
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, rkey, sizeof(out), out, 5000), -ENOTCONN);
    pthread_join(t, NULL);
    ck_assert_msg(gr__now_ns() - t0 < 2000000000ull, "the read waited for its timeout");
    ck_assert(!rdma_cli_alive(c));
    ck_assert_int_eq(rdma_cli_read(c, (uintptr_t)seg, rkey, sizeof(out), out, 5000), -ENOTCONN);
    wait_conns(s, 0);           /* the server saw it too and let the connection go */
    rdma_cli_free(&c);
    rdma_srv_free(&s);
    assert_clean();
}
END_TEST

START_TEST(test_too_many_conns)
{
    rdma_srv *s = srv_up();
    rdma_cli **c = calloc(RDMA_SRV_MAX_CONNS + 1, sizeof(*c));
    char err[256];

    for (int i = 0; i < RDMA_SRV_MAX_CONNS; i++)
        c[i] = cli_up(tok_good, 64);
    wait_conns(s, RDMA_SRV_MAX_CONNS);
    ck_assert_int_eq(rdma_cli_connect(&fk_ops, FK_ADDR, PORT, tok_good, 64, 2000,
                                      &c[RDMA_SRV_MAX_CONNS], err, sizeof(err)), -ECONNREFUSED);
    for (int i = 0; i < RDMA_SRV_MAX_CONNS; i++)
        rdma_cli_free(&c[i]);
    wait_conns(s, 0);
    /* room again */
    c[0] = cli_up(tok_good, 64);
    rdma_cli_free(&c[0]);
    rdma_srv_free(&s);
    free(c);
    assert_clean();
}
END_TEST

static Suite *rdma_suite(void)
{
    Suite *s = suite_create("rdma");
    TCase *tc = tcase_create("standin");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_real_verbs_without_device);
    tcase_add_test(tc, test_device_present);
    tcase_add_test(tc, test_srv_bad_addresses);
    tcase_add_test(tc, test_connect_token);
    tcase_add_test(tc, test_connect_failures);
    tcase_add_test(tc, test_expose_read);
    tcase_add_test(tc, test_reexpose_gen);
    tcase_add_test(tc, test_remote_access_error);
    tcase_add_test(tc, test_retry_exceeded);
    tcase_add_test(tc, test_flushed);
    tcase_add_test(tc, test_post_fails);
    tcase_add_test(tc, test_timeout);
    tcase_add_test(tc, test_slow_completion);
    tcase_add_test(tc, test_peer_dies_mid_read);
    tcase_add_test(tc, test_disconnect_event_mid_read);
    tcase_add_test(tc, test_too_many_conns);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(rdma_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
