/*
 * rdma.c - the peer layer's RDMA transport (rdma.h): an rdma_cm listener
 * that admits connections by token and registers memory for remote read,
 * and a blocking client that performs one-sided RDMA READs.
 *
 * Design.  The home node does no work per READ: the requester's NIC reads
 * the arena's pages directly.  So the server side is only connection
 * management (a thread of its own that owns every accepted rdma_cm_id)
 * and a registration cache keyed by segment base (any thread, under a
 * mutex).  The server posts nothing: its queue pairs are READ responders,
 * its one CQ stays empty.
 *
 * The client owns one RC queue pair, one CQ with a completion channel and
 * one bounce buffer of max_len bytes registered for local write.  A read
 * posts one signalled RDMA READ into the bounce buffer, spins briefly on
 * the CQ (a READ of a chunk on real hardware completes in microseconds),
 * then sleeps in poll(2) on the completion channel and the rdma_cm event
 * channel together, so that a DISCONNECTED event ends the wait as well as
 * a completion does.  Any failure kills the connection for good: the QP is
 * moved to the error state through rdma_disconnect, which flushes the
 * outstanding READ, so no late response can land in the bounce buffer
 * while a later read uses it.
 *
 * Every verbs call goes through c->ops / s->ops (rdma_ops.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "htab.h"
#include "list.h"
#include "log.h"
#include "rdma.h"

static const uint8_t rdma_magic[4] = { 'G', 'R', 'R', '1' };
#define RDMA_PRIV_LEN (sizeof(rdma_magic) + RDMA_TOKEN_LEN)

/* READs a client may have outstanding as initiator (it has one at most);
 * the server grants as many as the client asks for, up to this. */
#define RDMA_RD_ATOMIC 4
/* Spin on the CQ this long before arming the completion channel. */
#define RDMA_SPIN_NS 20000ull

/* ---- helpers ---------------------------------------------------------------- */

/* addr:port into *ss (the first address getaddrinfo gives).  0 or -EINVAL. */
static int resolve(const char *addr, uint16_t port, struct sockaddr_storage *ss, char *err,
                   size_t errlen)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV };
    struct addrinfo *res = NULL;
    char p[8];
    int gai;

    if (!addr || !addr[0]) {
        err_set(err, errlen, "rdma: an address is required");
        return -EINVAL;
    }
    snprintf(p, sizeof(p), "%u", (unsigned)port);
    gai = getaddrinfo(addr, p, &hints, &res);
    if (gai != 0 || !res) {
        err_set(err, errlen, "rdma: \"%s\": %s", addr,
                gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
        if (res)
            freeaddrinfo(res);
        return -EINVAL;
    }
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

/* "ADDR:PORT" / "[ADDR]:PORT" of sa. */
static void sa_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
        snprintf(buf, len, "[%s]:%u", a, (unsigned)ntohs(s6->sin6_port));
    } else if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
        snprintf(buf, len, "%s:%u", a, (unsigned)ntohs(s4->sin_port));
    } else {
        snprintf(buf, len, "(family %d)", sa->sa_family);
    }
}

/* The device name, port and source GID an rdma_cm_id is bound to. */
static void id_where(const rdma_ops *ops, const struct rdma_cm_id *id, char *buf, size_t len)
{
    char gid[INET6_ADDRSTRLEN] = "?";
    const char *dev = "?";

    if (id->verbs && id->verbs->device)
        dev = ops->get_device_name(id->verbs->device);
    inet_ntop(AF_INET6, id->route.addr.addr.ibaddr.sgid.raw, gid, sizeof(gid));
    snprintf(buf, len, "device %s port %u gid %s", dev ? dev : "?", (unsigned)id->port_num, gid);
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

/* errno after an rdma_cm call that returned -1; EIO if it left none. */
static int cm_errno(void)
{
    return errno ? errno : EIO;
}

int rdma_device_present(const rdma_ops *ops)
{
    struct ibv_device **list;
    int n = 0, found = 0;

    list = ops->get_device_list(&n);
    if (!list)
        return 0;
    for (int i = 0; i < n && !found; i++) {
        struct ibv_context *ctx = ops->open_device(list[i]);
        struct ibv_device_attr da;

        if (!ctx)
            continue;
        if (ops->query_device(ctx, &da) == 0) {
            for (unsigned p = 1; p <= da.phys_port_cnt && !found; p++) {
                struct ibv_port_attr pa;

                memset(&pa, 0, sizeof(pa));
                if (ops->query_port(ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
                    found = 1;
            }
        }
        ops->close_device(ctx);
    }
    ops->free_device_list(list);
    return found;
}

/* ---- server ------------------------------------------------------------------- */

/* One registered region. */
typedef struct srv_region {
    gr__hnode node;             /* in rdma_srv.regions, keyed by base */
    void *base;
    size_t len;
    uint64_t gen;
    struct ibv_mr *mr;
} srv_region;

/* One connection, from its connect request to its disconnect; the
 * listener thread's only. */
typedef struct srv_conn {
    gr__list link;              /* in rdma_srv.conns */
    struct rdma_cm_id *id;      /* id->context points back here */
    int established;
    char peer[64];
} srv_conn;

struct rdma_srv {
    const rdma_ops *ops;
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen;
    struct ibv_pd *pd;          /* the listening device's; every region is in it */
    struct ibv_cq *cq;          /* every accepted QP's send and receive CQ (stays empty) */
    int (*check)(void *arg, const uint8_t tok[RDMA_TOKEN_LEN]);
    void *check_arg;
    int wake[2];                /* pipe: rdma_srv_free wakes the listener thread */
    pthread_t thread;
    int thread_started;
    gr__list conns;             /* srv_conn, listener thread only */
    size_t nconns;              /* connections held (any state), listener thread only */
    char where[240];            /* "ADDR:PORT (device D port P gid G)" for logs */

    pthread_mutex_t mu;         /* guards regions and the counters below */
    gr__htab regions;           /* srv_region by base */
    rdma_srv_stats st;
};

static uint64_t base_hash(const void *base)
{
    uint64_t x = (uint64_t)(uintptr_t)base;

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static int region_eq(const gr__hnode *n, const void *key)
{
    return ((const srv_region *)n)->base == *(void *const *)key;
}

/* Tear one connection down: its QP, its id. */
static void conn_destroy(rdma_srv *s, srv_conn *c)
{
    if (c->id->qp)
        s->ops->destroy_qp(c->id);
    s->ops->destroy_id(c->id);
    gr__list_remove(&c->link);
    s->nconns--;
    if (c->established) {
        pthread_mutex_lock(&s->mu);
        s->st.conns--;
        pthread_mutex_unlock(&s->mu);
    }
    free(c);
}

static void count_refused(rdma_srv *s)
{
    pthread_mutex_lock(&s->mu);
    s->st.refused++;
    pthread_mutex_unlock(&s->mu);
}

/* A connect request on id (already acked): admit it or reject it. */
static void srv_on_request(rdma_srv *s, struct rdma_cm_id *id, const uint8_t *priv, size_t plen,
                           uint8_t their_depth)
{
    const rdma_ops *ops = s->ops;
    char peer[64];
    const char *why = NULL;
    srv_conn *c = NULL;

    sa_str(&id->route.addr.dst_addr, peer, sizeof(peer));
    if (plen < RDMA_PRIV_LEN || memcmp(priv, rdma_magic, sizeof(rdma_magic)) != 0)
        why = "no token in the request";
    else if (s->check(s->check_arg, priv + sizeof(rdma_magic)) != 1)
        why = "a token the control channel did not hand out";
    else if (id->verbs != s->listen->verbs)
        why = "another device";
    else if (s->nconns >= RDMA_SRV_MAX_CONNS)
        why = "too many connections";
    if (!why) {
        struct ibv_qp_init_attr qa = {
            .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
            .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
        };
        struct rdma_conn_param cp = {
            .responder_resources = their_depth < RDMA_RD_ATOMIC ? their_depth : RDMA_RD_ATOMIC,
            .initiator_depth = 0, .rnr_retry_count = 7,
        };

        c = calloc(1, sizeof(*c));
        if (!c) {
            why = "out of memory";
        } else if (ops->create_qp(id, s->pd, &qa) != 0) {
            log_warn("rdma: %s: rdma_create_qp for %s: %s", s->where, peer, strerror(cm_errno()));
            why = "no queue pair";
        } else if (ops->accept(id, &cp) != 0) {
            log_warn("rdma: %s: rdma_accept %s: %s", s->where, peer, strerror(cm_errno()));
            count_refused(s);
            ops->destroy_qp(id);
            ops->destroy_id(id);
            free(c);
            return;
        }
    }
    if (why) {
        log_warn("rdma: %s: refused a connection from %s: %s", s->where, peer, why);
        count_refused(s);
        if (c && id->qp)
            ops->destroy_qp(id);
        free(c);
        ops->reject(id, NULL, 0);
        ops->destroy_id(id);
        return;
    }
    c->id = id;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    id->context = c;
    gr__list_push_back(&s->conns, &c->link);
    s->nconns++;
}

/* Handle every pending rdma_cm event.  Returns 0, or -1 when the channel
 * failed (the thread then stops). */
static int srv_drain(rdma_srv *s)
{
    const rdma_ops *ops = s->ops;

    for (;;) {
        struct rdma_cm_event *ev = NULL;
        enum rdma_cm_event_type type;
        struct rdma_cm_id *id;
        uint8_t priv[64];
        size_t plen = 0;
        uint8_t depth = 0;
        int status;

        if (ops->get_cm_event(s->ch, &ev) != 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return 0;
            log_error("rdma: %s: rdma_get_cm_event: %s", s->where, strerror(cm_errno()));
            return -1;
        }
        type = ev->event;
        id = ev->id;
        status = ev->status;
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            plen = ev->param.conn.private_data_len;
            if (plen > sizeof(priv))
                plen = sizeof(priv);
            if (ev->param.conn.private_data)
                memcpy(priv, ev->param.conn.private_data, plen);
            else
                plen = 0;
            /* rdma_cm reports the remote's values swapped, ready for
             * rdma_accept: this is the initiator depth the client asked
             * for, the READs it may have in flight at us. */
            depth = ev->param.conn.responder_resources;
        }
        /* Acked before acting: rdma_destroy_id waits for its events' acks. */
        ops->ack_cm_event(ev);

        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            srv_on_request(s, id, priv, plen, depth);
            continue;
        }
        if (id == s->listen) {
            log_warn("rdma: %s: listener event %s (%d)", s->where, ops->event_str(type), status);
            continue;
        }
        srv_conn *c = id->context;
        if (!c)
            continue;
        switch (type) {
        case RDMA_CM_EVENT_ESTABLISHED:
            c->established = 1;
            pthread_mutex_lock(&s->mu);
            s->st.accepted++;
            s->st.conns++;
            pthread_mutex_unlock(&s->mu);
            log_info("rdma: %s: connection from %s established", s->where, c->peer);
            break;
        case RDMA_CM_EVENT_DISCONNECTED:
            log_info("rdma: %s: %s disconnected", s->where, c->peer);
            ops->disconnect(id);
            conn_destroy(s, c);
            break;
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            log_warn("rdma: %s: %s: %s (status %d)", s->where, c->peer, ops->event_str(type), status);
            conn_destroy(s, c);
            break;
        default:                /* TIMEWAIT_EXIT and the like */
            break;
        }
    }
}

static void *srv_thread(void *arg)
{
    rdma_srv *s = arg;

    for (;;) {
        struct pollfd p[2] = { { .fd = s->ch->fd, .events = POLLIN },
                               { .fd = s->wake[0], .events = POLLIN } };

        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            log_error("rdma: %s: poll: %s", s->where, strerror(errno));
            break;
        }
        if (p[1].revents)
            break;
        if (p[0].revents && srv_drain(s) < 0)
            break;
    }
    return NULL;
}

int rdma_srv_new(const rdma_ops *ops, const char *addr, uint16_t port,
                 int (*check)(void *arg, const uint8_t tok[RDMA_TOKEN_LEN]), void *arg,
                 rdma_srv **out, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    char where[160], name[64];
    rdma_srv *s;
    int rc;

    *out = NULL;
    if (!check) {
        err_set(err, errlen, "rdma: a token check is required");
        return -EINVAL;
    }
    rc = resolve(addr, port, &ss, err, errlen);
    if (rc < 0)
        return rc;
    s = calloc(1, sizeof(*s));
    if (!s) {
        err_set(err, errlen, "rdma: out of memory");
        return -ENOMEM;
    }
    s->ops = ops;
    s->check = check;
    s->check_arg = arg;
    s->wake[0] = s->wake[1] = -1;
    gr__list_init(&s->conns);
    pthread_mutex_init(&s->mu, NULL);
    sa_str((struct sockaddr *)&ss, name, sizeof(name));
    snprintf(s->where, sizeof(s->where), "%s", name);
    if (gr__htab_init(&s->regions, 64) != 0) {
        rc = -ENOMEM;
        err_set(err, errlen, "rdma: out of memory");
        goto fail;
    }
    errno = 0;
    s->ch = ops->create_event_channel();
    if (!s->ch) {
        rc = -(errno ? errno : ENODEV);
        err_set(err, errlen, "rdma: rdma_create_event_channel: %s (no rdma_cm here: is "
                "rdma_ucm loaded and /dev/infiniband/rdma_cm there?)", strerror(-rc));
        if (rc == -ENOENT)
            rc = -ENODEV;
        goto fail;
    }
    if ((rc = set_nonblock(s->ch->fd)) < 0) {
        err_set(err, errlen, "rdma: fcntl O_NONBLOCK: %s", strerror(-rc));
        goto fail;
    }
    if (ops->create_id(s->ch, &s->listen, s, RDMA_PS_TCP) != 0) {
        rc = -cm_errno();
        s->listen = NULL;
        err_set(err, errlen, "rdma: rdma_create_id: %s", strerror(-rc));
        goto fail;
    }
    if (ops->bind_addr(s->listen, (struct sockaddr *)&ss) != 0) {
        rc = -cm_errno();
        err_set(err, errlen, "rdma: bind %s: %s%s", name, strerror(-rc),
                rc == -EADDRNOTAVAIL || rc == -ENODEV ? " (not the address of an RDMA device)" : "");
        if (rc == -EADDRNOTAVAIL)
            rc = -ENODEV;
        goto fail;
    }
    if (!s->listen->verbs) {
        rc = -ENODEV;
        err_set(err, errlen, "rdma: %s is on no RDMA device (a wildcard address? listen on the "
                "address of the RDMA interface)", name);
        goto fail;
    }
    id_where(ops, s->listen, where, sizeof(where));
    snprintf(s->where, sizeof(s->where), "%s (%s)", name, where);
    s->pd = ops->alloc_pd(s->listen->verbs);
    if (!s->pd) {
        rc = -(errno ? errno : ENOMEM);
        err_set(err, errlen, "rdma: ibv_alloc_pd: %s", strerror(-rc));
        goto fail;
    }
    s->cq = ops->create_cq(s->listen->verbs, 16, NULL, NULL, 0);
    if (!s->cq) {
        rc = -(errno ? errno : ENOMEM);
        err_set(err, errlen, "rdma: ibv_create_cq: %s", strerror(-rc));
        goto fail;
    }
    if (ops->listen(s->listen, 64) != 0) {
        rc = -cm_errno();
        err_set(err, errlen, "rdma: listen on %s: %s", name, strerror(-rc));
        goto fail;
    }
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        rc = -errno;
        s->wake[0] = s->wake[1] = -1;
        err_set(err, errlen, "rdma: pipe: %s", strerror(-rc));
        goto fail;
    }
    rc = pthread_create(&s->thread, NULL, srv_thread, s);
    if (rc != 0) {
        rc = -rc;
        err_set(err, errlen, "rdma: pthread_create: %s", strerror(-rc));
        goto fail;
    }
    s->thread_started = 1;
    log_info("rdma: listening on %s, RC, one-sided READ (%s)", s->where, ops->name);
    *out = s;
    return 0;

fail:
    rdma_srv_free(&s);
    return rc;
}

int rdma_srv_expose(rdma_srv *s, void *base, size_t len, uint64_t gen, uint32_t *rkey)
{
    srv_region *r;
    struct ibv_mr *mr, *old = NULL;
    uint64_t h = base_hash(base);
    int rc = 0;

    if (!base || len == 0)
        return -EINVAL;
    pthread_mutex_lock(&s->mu);
    r = (srv_region *)gr__htab_find(&s->regions, h, region_eq, &base);
    if (r && r->gen == gen && r->len == len) {
        *rkey = r->mr->rkey;
        goto out;
    }
    errno = 0;
    mr = s->ops->reg_mr(s->pd, base, len, IBV_ACCESS_REMOTE_READ);
    if (!mr) {
        rc = -(errno ? errno : ENOMEM);
        log_warn("rdma: %s: ibv_reg_mr %p+%zu: %s", s->where, base, len, strerror(-rc));
        goto out;
    }
    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r) {
            s->ops->dereg_mr(mr);
            rc = -ENOMEM;
            goto out;
        }
        r->base = base;
        gr__htab_insert(&s->regions, &r->node, h);
        s->st.regions++;
    } else {
        old = r->mr;
    }
    r->len = len;
    r->gen = gen;
    r->mr = mr;
    s->st.registrations++;
    *rkey = mr->rkey;
    if (old) {
        int drc = s->ops->dereg_mr(old);

        if (drc != 0)
            log_warn("rdma: %s: ibv_dereg_mr %p: %s", s->where, base, strerror(drc));
    }
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int rdma_srv_unexpose(rdma_srv *s, void *base)
{
    srv_region *r;
    int rc = 0;

    pthread_mutex_lock(&s->mu);
    r = (srv_region *)gr__htab_find(&s->regions, base_hash(base), region_eq, &base);
    if (!r) {
        rc = -ENOENT;
    } else {
        gr__htab_remove(&s->regions, &r->node);
        s->st.regions--;
        s->ops->dereg_mr(r->mr);
        free(r);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void rdma_srv_get_stats(rdma_srv *s, rdma_srv_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

static int region_free_cb(void *arg, gr__hnode *n)
{
    rdma_srv *s = arg;
    srv_region *r = (srv_region *)n;

    gr__htab_remove(&s->regions, n);
    s->ops->dereg_mr(r->mr);
    free(r);
    return 0;
}

void rdma_srv_free(rdma_srv **sp)
{
    rdma_srv *s = sp ? *sp : NULL;
    gr__list *l;

    if (!s)
        return;
    if (s->thread_started) {
        ssize_t w = write(s->wake[1], "x", 1);

        (void)w;
        pthread_join(s->thread, NULL);
    }
    /* The thread is gone: its connections are ours now. */
    while ((l = gr__list_first(&s->conns)) != NULL) {
        srv_conn *c = (srv_conn *)((char *)l - offsetof(srv_conn, link));

        s->ops->disconnect(c->id);
        conn_destroy(s, c);
    }
    if (s->listen)
        s->ops->destroy_id(s->listen);
    gr__htab_walk(&s->regions, region_free_cb, s);
    gr__htab_fini(&s->regions);
    if (s->cq)
        s->ops->destroy_cq(s->cq);
    if (s->pd)
        s->ops->dealloc_pd(s->pd);
    if (s->ch)
        s->ops->destroy_event_channel(s->ch);
    if (s->wake[0] >= 0)
        close(s->wake[0]);
    if (s->wake[1] >= 0)
        close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    free(s);
    *sp = NULL;
}

/* ---- client ------------------------------------------------------------------- */

struct rdma_cli {
    const rdma_ops *ops;
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_mr *mr;          /* over buf */
    uint8_t *buf;               /* the bounce buffer: max_len bytes */
    size_t max_len;
    uint64_t seq;               /* wr_id of the last READ posted */
    int connected;              /* ESTABLISHED seen, not yet disconnected by us */
    int dead;                   /* 0, or the -errno that ended the connection */
    char peer[64];
};

/* Wait up to the deadline for the next rdma_cm event on c's channel.
 * Returns 0 with *type and *status, or -ETIMEDOUT / -errno. */
static int cli_next_event(rdma_cli *c, uint64_t deadline_ms, enum rdma_cm_event_type *type,
                          int *status)
{
    for (;;) {
        struct rdma_cm_event *ev = NULL;
        struct pollfd p = { .fd = c->ch->fd, .events = POLLIN };
        uint64_t now = gr__now_ms();
        int n;

        if (c->ops->get_cm_event(c->ch, &ev) == 0) {
            *type = ev->event;
            *status = ev->status;
            c->ops->ack_cm_event(ev);
            return 0;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -cm_errno();
        if (now >= deadline_ms)
            return -ETIMEDOUT;
        n = poll(&p, 1, (int)(deadline_ms - now));
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* Wait for the event `want`; any other ends the connect attempt. */
static int cli_expect(rdma_cli *c, enum rdma_cm_event_type want, uint64_t deadline_ms,
                      char *err, size_t errlen)
{
    enum rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
    int status = 0, rc;

    rc = cli_next_event(c, deadline_ms, &type, &status);
    if (rc < 0) {
        err_set(err, errlen, "rdma: %s: waiting for %s: %s", c->peer, c->ops->event_str(want),
                strerror(-rc));
        return rc;
    }
    if (type == want)
        return 0;
    switch (type) {
    case RDMA_CM_EVENT_REJECTED:
        rc = -ECONNREFUSED;
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
        rc = -EHOSTUNREACH;
        break;
    default:
        rc = -ECONNABORTED;
        break;
    }
    err_set(err, errlen, "rdma: %s: %s (status %d) instead of %s%s", c->peer,
            c->ops->event_str(type), status, c->ops->event_str(want),
            rc == -ECONNREFUSED ? ": refused (a wrong token, or nothing listening)" : "");
    return rc;
}

int rdma_cli_connect(const rdma_ops *ops, const char *addr, uint16_t port,
                     const uint8_t tok[RDMA_TOKEN_LEN], size_t max_len, int timeout_ms,
                     rdma_cli **out, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    uint8_t priv[RDMA_PRIV_LEN];
    char where[128];
    uint64_t deadline;
    rdma_cli *c;
    int rc;

    *out = NULL;
    if (max_len == 0 || timeout_ms <= 0) {
        err_set(err, errlen, "rdma: max_len and timeout_ms must be positive");
        return -EINVAL;
    }
    rc = resolve(addr, port, &ss, err, errlen);
    if (rc < 0)
        return rc;
    deadline = gr__now_ms() + (uint64_t)timeout_ms;
    c = calloc(1, sizeof(*c));
    if (!c) {
        err_set(err, errlen, "rdma: out of memory");
        return -ENOMEM;
    }
    c->ops = ops;
    c->max_len = max_len;
    sa_str((struct sockaddr *)&ss, c->peer, sizeof(c->peer));
    errno = 0;
    c->ch = ops->create_event_channel();
    if (!c->ch) {
        rc = -(errno ? errno : ENODEV);
        err_set(err, errlen, "rdma: rdma_create_event_channel: %s (no rdma_cm here)", strerror(-rc));
        if (rc == -ENOENT)
            rc = -ENODEV;
        goto fail;
    }
    if ((rc = set_nonblock(c->ch->fd)) < 0) {
        err_set(err, errlen, "rdma: fcntl O_NONBLOCK: %s", strerror(-rc));
        goto fail;
    }
    if (ops->create_id(c->ch, &c->id, c, RDMA_PS_TCP) != 0) {
        rc = -cm_errno();
        c->id = NULL;
        err_set(err, errlen, "rdma: rdma_create_id: %s", strerror(-rc));
        goto fail;
    }
    if (ops->resolve_addr(c->id, NULL, (struct sockaddr *)&ss, timeout_ms) != 0) {
        rc = -cm_errno();
        err_set(err, errlen, "rdma: rdma_resolve_addr %s: %s", c->peer, strerror(-rc));
        goto fail;
    }
    if ((rc = cli_expect(c, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, err, errlen)) < 0)
        goto fail;
    if (ops->resolve_route(c->id, timeout_ms) != 0) {
        rc = -cm_errno();
        err_set(err, errlen, "rdma: rdma_resolve_route %s: %s", c->peer, strerror(-rc));
        goto fail;
    }
    if ((rc = cli_expect(c, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, err, errlen)) < 0)
        goto fail;

    errno = 0;
    if (!(c->pd = ops->alloc_pd(c->id->verbs))) {
        rc = -(errno ? errno : ENOMEM);
        err_set(err, errlen, "rdma: ibv_alloc_pd: %s", strerror(-rc));
        goto fail;
    }
    if (!(c->cc = ops->create_comp_channel(c->id->verbs))) {
        rc = -(errno ? errno : ENOMEM);
        err_set(err, errlen, "rdma: ibv_create_comp_channel: %s", strerror(-rc));
        goto fail;
    }
    if ((rc = set_nonblock(c->cc->fd)) < 0) {
        err_set(err, errlen, "rdma: fcntl O_NONBLOCK: %s", strerror(-rc));
        goto fail;
    }
    if (!(c->cq = ops->create_cq(c->id->verbs, 4, c, c->cc, 0))) {
        rc = -(errno ? errno : ENOMEM);
        err_set(err, errlen, "rdma: ibv_create_cq: %s", strerror(-rc));
        goto fail;
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
        .cap = { .max_send_wr = 2, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
    };
    if (ops->create_qp(c->id, c->pd, &qa) != 0) {
        rc = -cm_errno();
        err_set(err, errlen, "rdma: rdma_create_qp: %s", strerror(-rc));
        goto fail;
    }
    rc = posix_memalign((void **)&c->buf, 4096, max_len);
    if (rc != 0) {
        c->buf = NULL;
        rc = -rc;
        err_set(err, errlen, "rdma: a bounce buffer of %zu bytes: %s", max_len, strerror(-rc));
        goto fail;
    }
    if (!(c->mr = ops->reg_mr(c->pd, c->buf, max_len, IBV_ACCESS_LOCAL_WRITE))) {
        rc = -(errno ? errno : ENOMEM);
        err_set(err, errlen, "rdma: ibv_reg_mr of the %zu-byte bounce buffer: %s", max_len,
                strerror(-rc));
        goto fail;
    }

    memcpy(priv, rdma_magic, sizeof(rdma_magic));
    memcpy(priv + sizeof(rdma_magic), tok, RDMA_TOKEN_LEN);
    struct rdma_conn_param cp = {
        .private_data = priv, .private_data_len = sizeof(priv),
        .initiator_depth = 1, .responder_resources = 0,
        .retry_count = 7, .rnr_retry_count = 7,
    };
    if (ops->connect(c->id, &cp) != 0) {
        rc = -cm_errno();
        err_set(err, errlen, "rdma: rdma_connect %s: %s", c->peer, strerror(-rc));
        goto fail;
    }
    if ((rc = cli_expect(c, RDMA_CM_EVENT_ESTABLISHED, deadline, err, errlen)) < 0)
        goto fail;
    c->connected = 1;
    id_where(ops, c->id, where, sizeof(where));
    log_info("rdma: connected to %s over %s, RC, reads up to %zu bytes (%s)", c->peer, where,
             max_len, ops->name);
    *out = c;
    return 0;

fail:
    rdma_cli_free(&c);
    return rc;
}

/* End the connection for good with reason rc (negative); returns rc.  The
 * disconnect moves the QP to the error state, flushing any READ still
 * outstanding, so the bounce buffer is ours again. */
static int cli_kill(rdma_cli *c, int rc)
{
    if (!c->dead)
        c->dead = rc;
    if (c->connected) {
        c->ops->disconnect(c->id);
        c->connected = 0;
    }
    return rc;
}

/* Handle pending rdma_cm events without waiting: 1 if the peer has
 * disconnected, else 0. */
static int cli_peer_gone(rdma_cli *c)
{
    for (;;) {
        struct rdma_cm_event *ev = NULL;
        enum rdma_cm_event_type type;

        if (c->ops->get_cm_event(c->ch, &ev) != 0)
            return 0;
        type = ev->event;
        c->ops->ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            log_warn("rdma: %s: %s", c->peer, c->ops->event_str(type));
            return 1;
        }
    }
}

int rdma_cli_read(rdma_cli *c, uint64_t raddr, uint32_t rkey, size_t len, void *dst,
                  int timeout_ms)
{
    const rdma_ops *ops = c->ops;
    struct ibv_send_wr *bad = NULL;
    uint64_t start, deadline, spin_end;
    int armed = 0, rc;

    if (len > c->max_len || timeout_ms <= 0)
        return -EINVAL;
    if (c->dead)
        return -ENOTCONN;
    if (len == 0)
        return 0;
    if (cli_peer_gone(c))
        return cli_kill(c, -ENOTCONN);

    struct ibv_sge sge = { .addr = (uintptr_t)c->buf, .length = (uint32_t)len, .lkey = c->mr->lkey };
    struct ibv_send_wr wr = {
        .wr_id = ++c->seq, .sg_list = &sge, .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = { .remote_addr = raddr, .rkey = rkey },
    };
    rc = ops->post_send(c->id->qp, &wr, &bad);
    if (rc != 0) {
        log_warn("rdma: %s: ibv_post_send: %s", c->peer, strerror(rc));
        return cli_kill(c, -EIO);
    }
    start = gr__now_ns();
    spin_end = start + RDMA_SPIN_NS;
    deadline = start + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        struct ibv_wc wc;
        int n = ops->poll_cq(c->cq, 1, &wc);

        if (n < 0) {
            log_warn("rdma: %s: ibv_poll_cq failed", c->peer);
            return cli_kill(c, -EIO);
        }
        if (n == 1) {
            if (wc.status != IBV_WC_SUCCESS) {
                log_warn("rdma: %s: READ of %zu bytes at 0x%llx (rkey 0x%x): %s", c->peer, len,
                         (unsigned long long)raddr, rkey, ops->wc_status_str(wc.status));
                return cli_kill(c, -EIO);
            }
            if (wc.wr_id != c->seq || wc.opcode != IBV_WC_RDMA_READ) {
                log_warn("rdma: %s: a completion for wr %llu opcode %d, not READ %llu",
                         c->peer, (unsigned long long)wc.wr_id, (int)wc.opcode,
                         (unsigned long long)c->seq);
                return cli_kill(c, -EIO);
            }
            memcpy(dst, c->buf, len);
            return 0;
        }
        uint64_t now = gr__now_ns();
        if (now < spin_end)
            continue;
        if (!armed) {
            /* Arm, then look again: a completion between the last poll
             * and the arming raises no event. */
            rc = ops->req_notify_cq(c->cq, 0);
            if (rc != 0) {
                log_warn("rdma: %s: ibv_req_notify_cq: %s", c->peer, strerror(rc));
                return cli_kill(c, -EIO);
            }
            armed = 1;
            continue;
        }
        if (now >= deadline) {
            log_warn("rdma: %s: READ of %zu bytes: no completion in %d ms", c->peer, len,
                     timeout_ms);
            return cli_kill(c, -ETIMEDOUT);
        }
        struct pollfd p[2] = { { .fd = c->cc->fd, .events = POLLIN },
                               { .fd = c->ch->fd, .events = POLLIN } };
        int ms = (int)((deadline - now + 999999) / 1000000);
        if (poll(p, 2, ms) < 0 && errno != EINTR)
            return cli_kill(c, -EIO);
        if (p[1].revents && cli_peer_gone(c))
            return cli_kill(c, -ENOTCONN);
        if (p[0].revents) {
            struct ibv_cq *ecq;
            void *ectx;

            if (ops->get_cq_event(c->cc, &ecq, &ectx) == 0) {
                ops->ack_cq_events(ecq, 1);
                armed = 0;
            }
        }
    }
}

int rdma_cli_alive(const rdma_cli *c)
{
    return c && !c->dead;
}

void rdma_cli_free(rdma_cli **cp)
{
    rdma_cli *c = cp ? *cp : NULL;
    const rdma_ops *ops;

    if (!c)
        return;
    ops = c->ops;
    if (c->connected)
        ops->disconnect(c->id);
    if (c->id && c->id->qp)
        ops->destroy_qp(c->id);
    if (c->mr)
        ops->dereg_mr(c->mr);
    free(c->buf);
    if (c->cq)
        ops->destroy_cq(c->cq);
    if (c->cc)
        ops->destroy_comp_channel(c->cc);
    if (c->pd)
        ops->dealloc_pd(c->pd);
    if (c->id)
        ops->destroy_id(c->id);
    if (c->ch)
        ops->destroy_event_channel(c->ch);
    free(c);
    *cp = NULL;
}
