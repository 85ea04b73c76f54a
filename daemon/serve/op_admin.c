/*
 * op_admin.c - ADMIN: the operator's commands (evict, invalidate, pin,
 * unpin, warmup and its status and cancel, health, config).
 *
 * A path command finds the file, or every file below a directory, and
 * their identities on an I/O thread (phase 0); acts on them in DRAM on the
 * loop; then in the NVMe tier on an I/O thread (phase 1); the loop answers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_int.h"

/* An ADMIN command in flight: phase 0 on an I/O thread finds the files
 * (one, or every file below a directory) and their identities; the loop
 * acts on DRAM; phase 1 on an I/O thread acts on the NVMe tier; the loop
 * answers. */
#define ADMIN_MAX_FILES (1u << 22)      /* files one command may cover */

typedef struct adminreq {
    wq_job job;
    conn *c;
    uint32_t req_id;
    uint8_t cmd;
    int phase;
    char *norm;
    int root;
    uint8_t (*ids)[FILE_ID_LEN];      /* identities of the files covered */
    size_t nids, cap;
    long dram_n, nvme_n;
    int rc;
    char text[1024];
} adminreq;

/* source_walk_cb: collect one file's identity. */
static int admin_collect(void *arg, const uint8_t id[FILE_ID_LEN])
{
    adminreq *a = arg;

    if (a->nids == a->cap) {
        size_t n = a->cap ? a->cap * 2 : 64;
        void *p;
        if (n > ADMIN_MAX_FILES)
            return -E2BIG;
        p = realloc(a->ids, n * FILE_ID_LEN);
        if (!p)
            return -ENOMEM;
        a->ids = p;
        a->cap = n;
    }
    memcpy(a->ids[a->nids++], id, FILE_ID_LEN);
    return 0;
}

/* Reply with status 0 and text as the body. */
static void reply_text(conn *c, uint8_t op, uint32_t req_id, const char *text, size_t len)
{
    reply_body(c, op, req_id, text, len > PROTO_MAX_BODY ? PROTO_MAX_BODY : len);
}

static void admin_run(wq_job *j)
{
    adminreq *a = (adminreq *)j;
    server *s = a->c->srv;
    int pin = a->cmd == PROTO_ADMIN_PIN;

    if (a->cmd == PROTO_ADMIN_HEALTH) {
        a->rc = source_check_roots(s->d.src, a->text, sizeof(a->text));
        return;
    }
    if (a->phase == 0) {
        a->rc = source_walk(s->d.src, a->norm, a->root, admin_collect, a, a->text,
                            sizeof(a->text));
        if (a->rc == -E2BIG)
            snprintf(a->text, sizeof(a->text), "more than %u files under %.200s", ADMIN_MAX_FILES,
                     a->norm);
        return;
    }
    if (!s->d.nvme)
        return;
    a->nvme_n = (pin || a->cmd == PROTO_ADMIN_UNPIN)
                    ? nvme_pin_files(s->d.nvme, (const uint8_t (*)[16])a->ids, a->nids, pin)
                    : nvme_drop_files(s->d.nvme, (const uint8_t (*)[16])a->ids, a->nids);
}

static void admin_health_reply(adminreq *a)
{
    server *s = a->c->srv;
    char out[1024];
    dram_stats ds;
    int n;

    dram_get_stats(s->d.dram, &ds);
    if (a->rc < 0) {
        n = snprintf(out, sizeof(out), "unhealthy: %s\n", a->text);
    } else {
        n = snprintf(out, sizeof(out), "ok: %d source roots readable, dram %llu%% used",
                     s->d.cfg->nroots,
                     (unsigned long long)(ds.capacity_bytes ? ds.used_bytes * 100 / ds.capacity_bytes : 0));
        if (s->d.nvme) {
            nvme_stats ns;
            nvme_get_stats(s->d.nvme, &ns);
            n += snprintf(out + n, sizeof(out) - (size_t)n, ", nvme %llu%% used",
                          (unsigned long long)(ns.capacity_bytes ? ns.used_bytes * 100 / ns.capacity_bytes : 0));
            /* A failing or full device is survivable (reads go to DRAM and
             * the source) but an operator must hear of it. */
            if (ns.state != NVME_STATE_OK)
                n = snprintf(out, sizeof(out),
                             "unhealthy: nvme tier %s (%llu I/O errors, %llu out-of-space errors); "
                             "serving from dram and the source\n",
                             nvme_state_name(ns.state), (unsigned long long)ns.io_errors,
                             (unsigned long long)ns.space_errors);
            else if (ns.io_errors || ns.checksum_errors)
                n += snprintf(out + n, sizeof(out) - (size_t)n,
                              " (%llu I/O errors, %llu checksum errors so far)\n",
                              (unsigned long long)ns.io_errors,
                              (unsigned long long)ns.checksum_errors);
            else
                n += snprintf(out + n, sizeof(out) - (size_t)n, "\n");
        } else {
            n += snprintf(out + n, sizeof(out) - (size_t)n, ", no nvme tier\n");
        }
    }
    reply_text(a->c, PROTO_OP_ADMIN, a->req_id, out, (size_t)n);
}

static void admin_done(wq_job *j)
{
    adminreq *a = (adminreq *)j;
    conn *c = a->c;
    server *s = c->srv;
    const char *verb;
    char out[512];
    int n;

    if (c->dead)
        goto out;
    if (a->cmd == PROTO_ADMIN_HEALTH) {
        admin_health_reply(a);
        goto out;
    }
    if (a->phase == 0) {
        int pin = a->cmd == PROTO_ADMIN_PIN;
        if (a->rc < 0) {
            reply_error(c, PROTO_OP_ADMIN, a->req_id, a->rc, a->text);
            goto out;
        }
        if (a->cmd == PROTO_ADMIN_INVALIDATE)
            source_forget(s->d.src, a->norm);   /* a file's; a directory's files age out */
        a->dram_n = (pin || a->cmd == PROTO_ADMIN_UNPIN)
                        ? dram_pin_files(s->d.dram, (const uint8_t (*)[16])a->ids, a->nids, pin)
                        : dram_drop_files(s->d.dram, (const uint8_t (*)[16])a->ids, a->nids);
        a->phase = 1;
        workers_submit(s->d.w, &a->job, WQ_DEMAND);
        return;
    }
    verb = a->cmd == PROTO_ADMIN_PIN ? "pinned" : a->cmd == PROTO_ADMIN_UNPIN ? "unpinned"
         : a->cmd == PROTO_ADMIN_EVICT ? "evicted" : "invalidated";
    n = snprintf(out, sizeof(out), "%s: %zu files, %ld chunks in dram, %ld on nvme%s\n", verb,
                 a->nids, a->dram_n, a->nvme_n,
                 a->cmd == PROTO_ADMIN_PIN ? " (and their chunks cached from now on)" : "");
    reply_text(c, PROTO_OP_ADMIN, a->req_id, out, (size_t)n);
out:
    c->inflight--;
    if (!c->dead)
        conn_update_events(c);
    free(a->norm);
    free(a->ids);
    conn_unref(&a->c);
    free(a);
}

/*
 * WARMUP: "id=N seal=0|1 bw=BYTES" on the first line, then one path per
 * line; every path must pass the roots or the batch is refused whole.
 * The reply is the job's id.  WARMUP_CANCEL: the id.
 */
static void handle_warmup(conn *c, const proto_msg *m)
{
    server *s = c->srv;
    char *arg = strndup(m->u.admin.arg, m->u.admin.len), *line, *save = NULL;
    char **norms = NULL, err[320], idtext[32];
    int *roots = NULL, rc = 0, seal = 0;
    unsigned long long id = 0, bw = 0;
    size_t n = 0, cap = 0;
    uint32_t jid;

    if (!arg) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOMEM, NULL);
        return;
    }
    if (m->u.admin.cmd == PROTO_ADMIN_WARMUP_CANCEL) {
        char *end;
        id = strtoull(arg, &end, 10);
        rc = *end || id == 0 || id > UINT32_MAX ? -EINVAL : warmup_cancel(s->d.wu, (uint32_t)id);
        free(arg);
        if (rc < 0)
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc,
                        rc == -EINVAL ? "usage: a warmup job id" : "no such running warmup job");
        else
            reply_text(c, PROTO_OP_ADMIN, m->h.req_id, "cancelled", 9);
        return;
    }
    line = strtok_r(arg, "\n", &save);
    if (!line || sscanf(line, "id=%llu seal=%d bw=%llu", &id, &seal, &bw) != 3 || id > UINT32_MAX) {
        free(arg);
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EINVAL,
                    "warmup: the first line must be \"id=N seal=0|1 bw=BYTES\"");
        return;
    }
    while ((line = strtok_r(NULL, "\n", &save))) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            void *p1 = realloc(norms, nc * sizeof(*norms)), *p2;
            if (!p1) {
                rc = -ENOMEM;
                break;
            }
            norms = p1;
            p2 = realloc(roots, nc * sizeof(*roots));
            if (!p2) {
                rc = -ENOMEM;
                break;
            }
            roots = p2;
            cap = nc;
        }
        rc = source_resolve(s->d.src, line, strlen(line), &norms[n], &roots[n], err, sizeof(err));
        if (rc < 0)
            break;
        n++;
    }
    jid = (uint32_t)id;
    if (rc == 0)
        rc = warmup_add(s->d.wu, &jid, norms, roots, n, seal != 0, bw);
    for (size_t i = 0; i < n; i++)
        free(norms[i]);
    free(norms);
    free(roots);
    free(arg);
    if (rc < 0) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc,
                    rc == -ENOENT ? "no such open warmup job" : rc == -ENOMEM ? NULL : err);
        return;
    }
    snprintf(idtext, sizeof(idtext), "%" PRIu32, jid);
    reply_text(c, PROTO_OP_ADMIN, m->h.req_id, idtext, strlen(idtext));
}

void op_admin(conn *c, const proto_msg *m, int *fds, int nfds)
{
    server *s = c->srv;
    uint8_t cmd = m->u.admin.cmd;
    char err[256];
    adminreq *a;

    (void)fds;
    (void)nfds;
    if (cmd == PROTO_ADMIN_CONFIG) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) {
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOMEM, NULL);
            return;
        }
        config_dump(s->d.cfg, f);
        fclose(f);
        reply_text(c, PROTO_OP_ADMIN, m->h.req_id, text, len);
        free(text);
        return;
    }
    if (cmd == PROTO_ADMIN_WARMUP_STATUS) {
        char *text = warmup_status(s->d.wu);
        if (!text)
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOMEM, NULL);
        else
            reply_text(c, PROTO_OP_ADMIN, m->h.req_id, text, strlen(text));
        free(text);
        return;
    }
    if (cmd != PROTO_ADMIN_HEALTH && !c->is_admin) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EPERM,
                    "admin commands are for root and the [daemon] admin_group");
        return;
    }
    if (cmd == PROTO_ADMIN_WARMUP || cmd == PROTO_ADMIN_WARMUP_CANCEL) {
        handle_warmup(c, m);
        return;
    }
    a = calloc(1, sizeof(*a));
    if (!a) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOMEM, NULL);
        return;
    }
    a->cmd = cmd;
    if (cmd != PROTO_ADMIN_HEALTH) {
        int rc = source_resolve(s->d.src, m->u.admin.arg, m->u.admin.len, &a->norm, &a->root,
                                err, sizeof(err));
        if (rc < 0) {
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc, err);
            free(a);
            return;
        }
    }
    a->job.run = admin_run;
    a->job.done = admin_done;
    a->c = conn_ref(c);
    a->req_id = m->h.req_id;
    c->inflight++;
    workers_submit(s->d.w, &a->job, WQ_DEMAND);
}

