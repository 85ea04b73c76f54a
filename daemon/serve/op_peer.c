/*
 * op_peer.c - ADMIN PEERS: the peer cache's members as this node sees
 * them (daemon/peer/peer.h), one group of records per member.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "serve_int.h"

typedef struct peerbuf {
    uint8_t *body;
    size_t off, cap;
    int rc;
} peerbuf;

static int put_peer(void *arg, const peer_info *i)
{
    peerbuf *b = arg;

#define U(n, v) if (b->rc == 0) b->rc = proto_rec_u64(b->body, b->cap, &b->off, n, v)
#define S(n, v) if (b->rc == 0) b->rc = proto_rec_str(b->body, b->cap, &b->off, n, v, strlen(v))
    S("name", i->name);
    U("self", (uint64_t)i->self);
    S("state", i->state);
    S("transport", i->transport);
    U("down_ms", (uint64_t)(i->down_for * 1000));
    U("hits", i->hits);
    U("bytes", i->bytes);
    U("misses", i->misses);
    U("errors", i->errors);
    U("timeouts", i->timeouts);
    U("corrupt", i->corrupt);
    U("p50_us", i->lat_us[0]);
    U("p90_us", i->lat_us[1]);
    U("p99_us", i->lat_us[2]);
    U("served", i->served);
    U("served_bytes", i->served_bytes);
#undef U
#undef S
    return b->rc;
}

void op_peers(conn *c, const proto_msg *m)
{
    server *s = c->srv;
    peerbuf b = { .cap = PROTO_MAX_BODY };

    if (m->u.admin.len != 0) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EINVAL, "PEERS takes no fields");
        return;
    }
    if (!s->d.peers) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOTCONN,
                    "no peer cache on this node ([peer] listen is empty)");
        return;
    }
    if (!(b.body = malloc(b.cap))) {
        conn_fail(c, "out of memory for the peer list");
        return;
    }
    peers_each(s->d.peers, put_peer, &b);
    if (b.rc < 0)
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EMSGSIZE,
                    "the member list does not fit one message");
    else
        reply_body(c, PROTO_OP_ADMIN, m->h.req_id, b.body, b.off);
    free(b.body);
}
