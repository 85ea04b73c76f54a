/*
 * dispatch.c - from a received packet to its handler: decode, check the
 * packet against the opcode's row (admin only?  how many fds may it
 * carry?), route.  The table below is the list of what the daemon serves.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fdpass.h"
#include "log.h"
#include "serve_int.h"

typedef struct op_row {
    uint8_t op;
    op_handler handler;
    int admin_only;             /* refused with -EPERM unless root or admin_group */
    int max_fds;                /* fds the request may carry: more is -EPROTO */
    int noreply_ok;             /* PROTO_F_NOREPLY allowed (else -EPROTO) */
} op_row;

/* ADMIN is open to everyone here: which of its commands are admin-only is
 * op_admin's table. */
static const op_row op_table[] = {
    { PROTO_OP_HELLO,   op_hello,   0, 0, 0 },
    { PROTO_OP_OPEN,    op_open,    0, 1, 0 },   /* the access proof */
    { PROTO_OP_CLOSE,   op_close,   0, 0, 1 },
    { PROTO_OP_READ,    op_read,    0, 0, 0 },
    { PROTO_OP_STATS,   op_stats,   0, 0, 0 },
    { PROTO_OP_READX,   op_read,    0, 0, 0 },
    { PROTO_OP_RELEASE, op_release, 0, 0, 1 },   /* never has a reply */
    { PROTO_OP_ADMIN,   op_admin,   0, 0, 0 },
    { PROTO_OP_HINT,    op_hint,    0, 0, 0 },
    { PROTO_OP_REPORT,  op_report,  0, 0, 1 },   /* libgranary's lease counters: no reply */
    { PROTO_OP_OPENX,   op_openx,   0, 1, 0 },   /* the access proof */
    { PROTO_OP_STAT,    op_stat,    0, 0, 0 },   /* from a manifest, judged */
    { PROTO_OP_READDIR, op_readdir, 0, 0, 0 },
    { PROTO_OP_CKPT_PUT, op_ckpt_put, 0, 1, 0 }, /* the checkpoint's bytes */
};

static const op_row *row_of(uint8_t op)
{
    for (size_t i = 0; i < sizeof(op_table) / sizeof(op_table[0]); i++)
        if (op_table[i].op == op)
            return &op_table[i];
    return NULL;
}

/* Answer a packet that is not a valid request with the decoder's error,
 * quoting the request id when its header was readable. */
static void refuse(conn *c, size_t n, int rc, const char *why)
{
    proto_hdr h;
    int hrc = proto_decode_hdr(c->srv->rbuf, n, &h);
    uint32_t id = (hrc == 0 || hrc == -EMSGSIZE) ? h.req_id : 0;
    uint8_t op = (hrc == 0 || hrc == -EMSGSIZE) ? h.op : 0;
    char text[128];

    snprintf(text, sizeof(text), "malformed request (%s)", why ? why : strerror(-rc));
    log_debug("client %u: %s", c->id, text);
    reply_error(c, op ? op : PROTO_OP_HELLO, id, rc, text);
}

void dispatch_packet(conn *c, size_t n, int truncated, int *fds, int nfds)
{
    server *s = c->srv;
    const op_row *row;
    proto_msg m;
    size_t used;
    int rc;

    s->d.stats->requests++;
    if (n == 0) {
        refuse(c, n, -EPROTO, "empty packet");
        goto out;
    }
    rc = truncated ? -EMSGSIZE : proto_decode(s->rbuf, n, &m, &used);
    if (rc == 0 && used != n)
        rc = -EPROTO;               /* one message per packet, nothing after it */
    if (rc == PROTO_NEED_MORE)
        rc = -EPROTO;               /* a packet is a whole message */
    if (rc == 0 && (m.h.flags & PROTO_F_REPLY))
        rc = -EPROTO;
    if (rc < 0) {
        refuse(c, n, rc, NULL);
        goto out;
    }
    row = row_of(m.h.op);
    if (!row) {                     /* the codec knows it, this daemon does not serve it */
        reply_error(c, m.h.op, m.h.req_id, -EOPNOTSUPP, "operation not supported");
        goto out;
    }
    if (nfds > row->max_fds) {
        char text[96];
        snprintf(text, sizeof(text), "%s carries at most %d file descriptor%s",
                 proto_op_name(m.h.op), row->max_fds, row->max_fds == 1 ? "" : "s");
        reply_error(c, m.h.op, m.h.req_id, -EPROTO, text);
        goto out;
    }
    if ((m.h.flags & PROTO_F_NOREPLY) && !row->noreply_ok) {
        reply_error(c, m.h.op, m.h.req_id, -EPROTO, "NOREPLY is for CLOSE and RELEASE only");
        goto out;
    }
    if (row->admin_only && !c->is_admin) {
        reply_error(c, m.h.op, m.h.req_id, -EPERM,
                    "admin commands are for root and the [daemon] admin_group");
        goto out;
    }
    row->handler(c, &m, fds, nfds);
out:
    /* What no handler took, access proofs mostly: closing a descriptor of
     * a FUSE file is a round trip, so not on the loop. */
    for (int i = 0; i < nfds; i++)
        source_close_later(c->srv->d.src, fds[i]);
}
