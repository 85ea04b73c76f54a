/*
 * op_hint.c - HINT: a job's list of what it will read next.  The list
 * itself (resolution, fetching ahead, holds) is engine/prefetch.c's.
 */
#include <errno.h>

#include "serve_int.h"

void op_hint(conn *c, const proto_msg *m, int *fds, int nfds)
{
    int rc;

    (void)fds;
    (void)nfds;
    if (!c->hints && !(c->hints = hint_list_new(c->srv->d.pf, c->cred.uid, c->cred.gid))) {
        reply_error(c, PROTO_OP_HINT, m->h.req_id, -ENOMEM, NULL);
        return;
    }
    rc = hint_list_append(c->hints, m);
    if (rc < 0) {
        reply_error(c, PROTO_OP_HINT, m->h.req_id, rc,
                    rc == -E2BIG ? "the hint list would exceed [prefetch] hint_max_entries" : NULL);
        return;
    }
    reply_ok(c, PROTO_OP_HINT, m->h.req_id);
}
