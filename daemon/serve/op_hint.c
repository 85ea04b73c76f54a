/*
 * op_hint.c - HINT: a job's list of what it will read next.  The list
 * itself (resolution, judging, fetching ahead, holds) is
 * engine/prefetch.c's.  Every reply carries the list's status as records,
 * so a client learns of ranges that failed (a HINT of no ranges only asks
 * for it).
 */
#include <errno.h>
#include <string.h>

#include "serve_int.h"

static void reply_status(conn *c, uint32_t req_id, int rc, const hint_status *st)
{
    uint8_t body[512];
    size_t off = 0;
    const char *why = rc == -E2BIG ? "the user's hint lists are at their limits "
                                     "([prefetch] hint_max_entries, hint_memory)" : NULL;

    if (rc < 0) {
        reply_error(c, PROTO_OP_HINT, req_id, rc, why);
        return;
    }
    proto_rec_u64(body, sizeof(body), &off, "accepted", st->accepted);
    proto_rec_u64(body, sizeof(body), &off, "ranges", st->ranges);
    proto_rec_u64(body, sizeof(body), &off, "pending", st->pending);
    proto_rec_u64(body, sizeof(body), &off, "errors", st->errors);
    proto_rec_u64(body, sizeof(body), &off, "skipped", st->skipped);
    if (st->last_error && st->last_error[0])
        proto_rec_str(body, sizeof(body), &off, "last_error", st->last_error,
                      strlen(st->last_error));
    reply_body(c, PROTO_OP_HINT, req_id, body, off);
}

void op_hint(conn *c, const proto_msg *m, int *fds, int nfds)
{
    hint_status st = { 0 };
    int rc;

    (void)fds;
    (void)nfds;
    analysis_hinted(c->srv->an, c->job);
    if (!c->hints) {
        access_cred cred;
        meta_cred(c, &cred);
        c->hints = hint_list_new(c->srv->d.pf, &cred);
        if (!c->hints) {
            reply_error(c, PROTO_OP_HINT, m->h.req_id, -ENOMEM, NULL);
            return;
        }
    }
    rc = hint_list_append(c->hints, m, &st);
    reply_status(c, m->h.req_id, rc, &st);
}
