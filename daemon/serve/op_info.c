/*
 * op_info.c - HELLO (the version handshake), STATS (the counters) and
 * REPORT (counters only clients can keep, added to ours).
 */
#include <errno.h>
#include <string.h>

#include "log.h"
#include "serve_int.h"

void op_hello(conn *c, const proto_msg *m, int *fds, int nfds)
{
    const gr_config *cfg = c->srv->d.cfg;
    uint64_t keep = cfg->dram_client_lease_cache;
    double ttl_ms = cfg->dram_client_lease_ttl * 1000.0;
    proto_hello h = {
        .version = PROTO_VERSION,
        .max_msg = PROTO_MAX_MSG,
        .max_data = PROTO_MAX_DATA,
        .chunk_size = (uint32_t)cfg->chunk_size,
    };

    /* A client keeps at most half of what it may lease, so that its reads
     * still get leases while its cache is full, and a sixteenth of the DRAM
     * tier, so that kept leases never pin the tier a policy must manage. */
    if (keep > cfg->dram_max_leased / 2)
        keep = cfg->dram_max_leased / 2;
    if (keep > cfg->dram_capacity / 16)
        keep = cfg->dram_capacity / 16;
    h.lease_cache = keep;
    h.lease_ttl_ms = ttl_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ttl_ms;
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
    /* What it understands and we do: the rest is ignored. */
    c->features = m->u.hello.features & (PROTO_FEAT_NOKEEP | PROTO_FEAT_GENS);
    h.features = c->features;
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

/*
 * REPORT: add the client's counter growth (the GR_CLIENT_STATS names only,
 * others ignored; saturating) and answer with an empty success.  The first
 * report of a GPU path on a connection is logged, with whether GPUDirect
 * Storage is there.  The decoder has checked that every record is a number.
 */
void op_report(conn *c, const proto_msg *m, int *fds, int nfds)
{
    gr_stats *st = c->srv->d.stats;
    size_t off = 0;
    uint64_t gpu = 0, gds = 0;
    proto_rec r;

    (void)fds;
    (void)nfds;
    while (proto_rec_next(m->u.recs.p, m->u.recs.len, &off, &r) == 1) {
        if (proto_rec_is(&r, "gpu_clients"))
            gpu += r.u64;
        else if (proto_rec_is(&r, "gpu_gds_clients"))
            gds += r.u64;
#define GR_REPORT_ADD(kind, field, help)                                                    \
        if (proto_rec_is(&r, #field)) {                                                     \
            st->field = st->field > UINT64_MAX - r.u64 ? UINT64_MAX : st->field + r.u64;    \
            continue;                                                                       \
        }
        GR_CLIENT_STATS(GR_REPORT_ADD)
#undef GR_REPORT_ADD
    }
    if (gpu && !c->gpu_logged) {
        c->gpu_logged = 1;
        log_info("client %u (pid %ld, uid %ld) copies into GPU memory; GPUDirect Storage %s",
                 c->id, (long)c->cred.pid, (long)c->cred.uid,
                 gds ? "found in the client, not used: chunks reach the GPU through the arena"
                     : "not available there (no libcufile): chunks reach the GPU through the arena");
    }
    if (!(m->h.flags & PROTO_F_NOREPLY))
        reply_ok(c, PROTO_OP_REPORT, m->h.req_id);
}
