/*
 * op_info.c - HELLO (the version handshake) and STATS (the counters).
 */
#include <errno.h>
#include <string.h>

#include "log.h"
#include "serve_int.h"

void op_hello(conn *c, const proto_msg *m, int *fds, int nfds)
{
    proto_hello h = {
        .version = PROTO_VERSION,
        .max_msg = PROTO_MAX_MSG,
        .max_data = PROTO_MAX_DATA,
        .chunk_size = (uint32_t)c->srv->d.cfg->chunk_size,
    };
    outmsg *o;

    (void)fds;
    (void)nfds;
    if (m->u.hello.version != PROTO_VERSION) {
        reply_error(c, PROTO_OP_HELLO, m->h.req_id, -EPROTONOSUPPORT,
                    "protocol version not supported");
        return;
    }
    /* Replies may be up to PROTO_MAX_MSG: a client that cannot take that
     * would see messages cut short, so it is told now. */
    if (m->u.hello.max_msg < PROTO_MAX_MSG) {
        reply_error(c, PROTO_OP_HELLO, m->h.req_id, -EMSGSIZE,
                    "max_msg below the daemon's largest reply (PROTO_MAX_MSG)");
        return;
    }
    o = outmsg_new(PROTO_HELLO_LEN);
    if (!o) {
        conn_fail(c, "out of memory for a HELLO reply");
        return;
    }
    proto_enc_hello(o->buf, o->len, PROTO_F_REPLY, m->h.req_id, &h);
    conn_send(c, o);
}

void op_stats(conn *c, const proto_msg *m, int *fds, int nfds)
{
    gr_stats st;
    size_t off = 0, cap = PROTO_MAX_BODY;
    outmsg *o = outmsg_new(cap);
    int rc = 0;

    (void)fds;
    (void)nfds;
    if (!o) {
        conn_fail(c, "out of memory for a STATS reply");
        return;
    }
    server_snapshot(c->srv, &st);
#define GR_STATS_PUT(kind, name, help) \
    rc |= proto_rec_u64(o->buf + PROTO_HDR_LEN, cap, &off, #name, st.name);
    GR_STATS(GR_STATS_PUT)
#undef GR_STATS_PUT
    if (rc < 0)                     /* only if the table outgrew a message */
        log_error("stats reply truncated");
    proto_enc_records(o->buf, PROTO_HDR_LEN + cap, PROTO_OP_STATS, m->h.req_id,
                      o->buf + PROTO_HDR_LEN, off);
    o->len = PROTO_HDR_LEN + off;
    o->iov[0].iov_len = o->len;
    conn_send(c, o);
}
