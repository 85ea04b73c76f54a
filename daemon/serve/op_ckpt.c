/*
 * op_ckpt.c - CKPT_PUT (stage a checkpoint from the fd it carries) and
 * ADMIN CKPT_LIST (checkpoints and their states), over daemon/ckpt/ckpt.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "serve_int.h"

/* A CKPT_PUT waiting for its acknowledgement (local, or staged early). */
typedef struct ckptreq {
    conn *c;
    uint32_t req_id;
} ckptreq;

static void put_reply(void *arg, int rc, const ckpt_info *i, const char *err)
{
    ckptreq *r = arg;
    conn *c = r->c;

    if (!c->dead) {
        if (rc < 0) {
            reply_error(c, PROTO_OP_CKPT_PUT, r->req_id, rc, err);
        } else {
            uint8_t body[256];
            size_t off = 0;
            const char *st = ckpt_state_name(i->state);
            proto_rec_u64(body, sizeof(body), &off, "id", i->id);
            proto_rec_str(body, sizeof(body), &off, "state", st, strlen(st));
            proto_rec_u64(body, sizeof(body), &off, "size", i->size);
            if (i->state != CKPT_STAGED)    /* an early one is not checksummed yet */
                proto_rec_u64(body, sizeof(body), &off, "xxh3", i->hash);
            reply_body(c, PROTO_OP_CKPT_PUT, r->req_id, body, off);
        }
    }
    c->inflight--;
    if (!c->dead)
        conn_update_events(c);
    conn_unref(&r->c);
    free(r);
}

void op_ckpt_put(conn *c, const proto_msg *m, int *fds, int nfds)
{
    server *s = c->srv;
    const char *dest = NULL;
    uint32_t dest_len = 0;
    int set = -1, early = -1;
    char err[320] = "", *norm = NULL;
    size_t off = 0;
    ckpt_cred cred;
    proto_rec r;
    ckptreq *req;
    int root, rc;

    while (proto_rec_next(m->u.recs.p, m->u.recs.len, &off, &r) == 1) {
        if (proto_rec_is(&r, "dest") && r.kind == PROTO_REC_STR && !dest) {
            dest = r.str;
            dest_len = r.len;
        } else if (proto_rec_is(&r, "set") && r.kind == PROTO_REC_U64 && set < 0 && r.u64 <= 1) {
            set = (int)r.u64;
        } else if (proto_rec_is(&r, "ack") && r.kind == PROTO_REC_STR && early < 0 &&
                   ((r.len == 6 && !memcmp(r.str, "staged", 6)) ||
                    (r.len == 5 && !memcmp(r.str, "local", 5)))) {
            early = r.len == 6;
        } else {
            snprintf(err, sizeof(err), "unexpected field \"%.*s\" (or repeated, or of the wrong kind)",
                     (int)(r.name_len > 64 ? 64 : r.name_len), r.name);
            reply_error(c, m->h.op, m->h.req_id, -EINVAL, err);
            return;
        }
    }
    if (!dest) {
        reply_error(c, m->h.op, m->h.req_id, -EINVAL, "a \"dest\" is required");
        return;
    }
    if (nfds != 1 || fds[0] < 0) {
        reply_error(c, m->h.op, m->h.req_id, -EINVAL,
                    "CKPT_PUT carries the checkpoint's bytes as one fd");
        return;
    }
    if (!s->d.ck) {
        reply_error(c, m->h.op, m->h.req_id, -EROFS, "checkpoints need the NVMe tier's directory "
                    "([nvme] path) and a [checkpoint] capacity");
        return;
    }
    rc = source_resolve(s->d.src, dest, dest_len, &norm, &root, err, sizeof(err));
    if (rc < 0) {
        reply_error(c, m->h.op, m->h.req_id, rc, err);
        return;
    }
    cred.uid = c->cred.uid;
    cred.gid = c->cred.gid;
    cred.ngroups = c->cred.ngroups < 0 ? 0 : c->cred.ngroups;
    if (cred.ngroups > CKPT_MAX_GROUPS)
        cred.ngroups = CKPT_MAX_GROUPS;
    memcpy(cred.groups, c->cred.groups, (size_t)cred.ngroups * sizeof(gid_t));
    req = calloc(1, sizeof(*req));
    if (!req) {
        free(norm);
        reply_error(c, m->h.op, m->h.req_id, -ENOMEM, NULL);
        return;
    }
    req->c = conn_ref(c);
    req->req_id = m->h.req_id;
    c->inflight++;
    rc = ckpt_put(s->d.ck, &cred, norm, root, fds[0], set > 0, early > 0, put_reply, req, err,
                  sizeof(err));
    if (rc < 0) {
        c->inflight--;
        conn_unref(&req->c);
        free(req);
        free(norm);
        reply_error(c, m->h.op, m->h.req_id, rc, err[0] ? err : NULL);
        return;
    }
    fds[0] = -1;                    /* the module's now */
}

/* A reply of records being built. */
typedef struct listbuf {
    uint8_t *body;
    size_t off, cap;
    int rc;
} listbuf;

static int list_put(void *arg, const ckpt_info *i)
{
    listbuf *b = arg;
    const char *st = ckpt_state_name(i->state);

#define U(n, v) if (b->rc == 0) b->rc = proto_rec_u64(b->body, b->cap, &b->off, n, v)
#define S(n, v) if (b->rc == 0) b->rc = proto_rec_str(b->body, b->cap, &b->off, n, v, strlen(v))
    U("id", i->id);
    S("dest", i->dest);
    S("state", st);
    U("size", i->size);
    U("drained", i->drained);
    U("uid", i->uid);
    U("attempts", i->attempts);
    U("durable", (uint64_t)i->durable);
    U("xxh3", i->hash);
    if (i->superseded_by)
        U("superseded_by", i->superseded_by);
    if (i->set)
        U("set", 1);
    if (i->error[0])
        S("error", i->error);
#undef U
#undef S
    return b->rc;
}

void op_ckpt_list(conn *c, const proto_msg *m)
{
    server *s = c->srv;
    uint64_t id = 0;
    int has_id = 0;
    size_t off = 0;
    proto_rec r;
    listbuf b;
    char err[128];

    while (proto_rec_next(m->u.admin.recs, m->u.admin.len, &off, &r) == 1) {
        if (proto_rec_is(&r, "id") && r.kind == PROTO_REC_U64 && !has_id) {
            has_id = 1;
            id = r.u64;
        } else {
            snprintf(err, sizeof(err), "unexpected field \"%.*s\" (or repeated, or of the wrong kind)",
                     (int)(r.name_len > 64 ? 64 : r.name_len), r.name);
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EINVAL, err);
            return;
        }
    }
    if (has_id && id == 0) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EINVAL, "checkpoint ids start at 1");
        return;
    }
    b.cap = PROTO_MAX_BODY;
    b.off = 0;
    b.rc = 0;
    b.body = malloc(b.cap);
    if (!b.body) {
        conn_fail(c, "out of memory for a checkpoint list");
        return;
    }
    /* Anyone sees their own; root and the admin group see everyone's. */
    if (s->d.ck)
        ckpt_each(s->d.ck, c->is_admin ? (uid_t)-1 : c->cred.uid, id, list_put, &b);
    if (has_id && b.off == 0)
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOENT, "no such checkpoint");
    else if (b.rc < 0)
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EMSGSIZE,
                    "the list does not fit one message: ask for one \"id\"");
    else
        reply_body(c, PROTO_OP_ADMIN, m->h.req_id, b.body, b.off);
    free(b.body);
}
