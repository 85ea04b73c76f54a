/*
 * op_admin.c - ADMIN: the operator's commands (evict, invalidate, pin,
 * unpin, warmup and its status and cancel, health, config, analyze), with
 * typed records both ways (proto.h; the names are in PROTOCOL.md).
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

#include "log.h"
#include "serve_int.h"

#define ADMIN_MAX_FILES (1u << 22)      /* files one command may cover */
#define ANALYZE_MAX_INFLIGHT 4          /* ANALYZE requests being built, daemon-wide */

/* Which commands are for root and [daemon] admin_group only. */
static int admin_only(uint8_t cmd)
{
    return cmd != PROTO_ADMIN_HEALTH && cmd != PROTO_ADMIN_CONFIG &&
           cmd != PROTO_ADMIN_WARMUP_STATUS && cmd != PROTO_ADMIN_DATASET_LIST &&
           cmd != PROTO_ADMIN_ANALYZE && cmd != PROTO_ADMIN_CKPT_LIST &&
           cmd != PROTO_ADMIN_PEERS;
}

/* An ADMIN path command or HEALTH in flight. */
typedef struct adminreq {
    wq_job job;
    conn *c;
    uint32_t req_id;
    uint8_t cmd;
    int phase;
    char *norm;
    int root;
    uint8_t (*ids)[FILE_ID_LEN];        /* identities of the files covered */
    size_t nids, cap;
    long dram_n, nvme_n;
    int rc;
    char text[1024];
} adminreq;

/* A reply of records being built, in an outmsg's body. */
typedef struct recbuf {
    outmsg *m;
    size_t off, cap;
    int rc;                     /* the first error of a put */
} recbuf;

static int rb_init(recbuf *rb, conn *c, size_t cap)
{
    rb->m = outmsg_new(cap);
    rb->off = 0;
    rb->cap = cap;
    rb->rc = 0;
    if (!rb->m) {
        conn_fail(c, "out of memory for an ADMIN reply");
        return -ENOMEM;
    }
    return 0;
}

static void rb_u64(recbuf *rb, const char *name, uint64_t v)
{
    if (rb->rc == 0)
        rb->rc = proto_rec_u64(rb->m->buf + PROTO_HDR_LEN, rb->cap, &rb->off, name, v);
}

static void rb_str(recbuf *rb, const char *name, const char *s, size_t len)
{
    if (rb->rc == 0)
        rb->rc = proto_rec_str(rb->m->buf + PROTO_HDR_LEN, rb->cap, &rb->off, name, s, len);
}

/* Send what was built (an error reply instead if it did not fit). */
static void rb_send(recbuf *rb, conn *c, uint32_t req_id)
{
    if (rb->rc < 0) {
        free(rb->m);
        reply_error(c, PROTO_OP_ADMIN, req_id, -EMSGSIZE, "the reply does not fit one message");
        return;
    }
    proto_enc_records(rb->m->buf, PROTO_HDR_LEN + rb->cap, PROTO_OP_ADMIN, req_id,
                      rb->m->buf + PROTO_HDR_LEN, rb->off);
    rb->m->len = PROTO_HDR_LEN + rb->off;
    rb->m->iov[0].iov_len = rb->m->len;
    conn_send(c, rb->m);
}

/* ---- arguments ---- */

/* The request's arguments, as the commands use them. */
typedef struct admin_args {
    const char *path;           /* "path" (the first; WARMUP has many) */
    uint32_t path_len;
    int has_job, has_seal, has_bw;
    uint64_t job, seal, bw;
    unsigned npaths;
    const char *stamp;          /* DATASET_ADD: "stamp", or NULL */
    uint32_t stamp_len;
    int has_recheck, has_id;
    uint64_t recheck, id;       /* DATASET_ADD "recheck" (seconds); REMOVE, RESCAN "id" */
} admin_args;

#define DATASET_RECHECK_DEFAULT 60      /* seconds between stamp checks */
#define DATASET_RECHECK_MAX     (7 * 86400)

/* Read the records of m: which names each command takes, their kinds.  0,
 * or -EINVAL with a reason in err. */
static int parse_args(const proto_msg *m, admin_args *a, char *err, size_t errlen)
{
    uint8_t cmd = m->u.admin.cmd;
    int path_cmd = cmd <= PROTO_ADMIN_UNPIN || cmd == PROTO_ADMIN_DATASET_ADD;
    int is_warmup = cmd == PROTO_ADMIN_WARMUP, is_dsadd = cmd == PROTO_ADMIN_DATASET_ADD;
    int by_id = cmd == PROTO_ADMIN_DATASET_REMOVE || cmd == PROTO_ADMIN_DATASET_RESCAN;
    size_t off = 0;
    proto_rec r;

    memset(a, 0, sizeof(*a));
    while (proto_rec_next(m->u.admin.recs, m->u.admin.len, &off, &r) == 1) {
        if ((path_cmd || is_warmup) && proto_rec_is(&r, "path") && r.kind == PROTO_REC_STR) {
            if (path_cmd && a->npaths) {
                snprintf(err, errlen, "one \"path\" per command");
                return -EINVAL;
            }
            if (!a->npaths) {
                a->path = r.str;
                a->path_len = r.len;
            }
            a->npaths++;
        } else if ((is_warmup || cmd == PROTO_ADMIN_WARMUP_CANCEL || cmd == PROTO_ADMIN_ANALYZE) &&
                   proto_rec_is(&r, "job") &&
                   r.kind == PROTO_REC_U64 && !a->has_job) {
            a->has_job = 1;
            a->job = r.u64;
        } else if (is_warmup && proto_rec_is(&r, "seal") && r.kind == PROTO_REC_U64 && !a->has_seal) {
            a->has_seal = 1;
            a->seal = r.u64;
        } else if (is_warmup && proto_rec_is(&r, "bw") && r.kind == PROTO_REC_U64 && !a->has_bw) {
            a->has_bw = 1;
            a->bw = r.u64;
        } else if (is_dsadd && proto_rec_is(&r, "stamp") && r.kind == PROTO_REC_STR && !a->stamp) {
            a->stamp = r.str;
            a->stamp_len = r.len;
        } else if (is_dsadd && proto_rec_is(&r, "recheck") && r.kind == PROTO_REC_U64 &&
                   !a->has_recheck) {
            a->has_recheck = 1;
            a->recheck = r.u64;
        } else if (by_id && proto_rec_is(&r, "id") && r.kind == PROTO_REC_U64 && !a->has_id) {
            a->has_id = 1;
            a->id = r.u64;
        } else {
            snprintf(err, errlen, "unexpected field \"%.*s\" (or repeated, or of the wrong kind)",
                     (int)(r.name_len > 64 ? 64 : r.name_len), r.name);
            return -EINVAL;
        }
    }
    if (path_cmd && a->npaths != 1) {
        snprintf(err, errlen, "a \"path\" is required");
        return -EINVAL;
    }
    if (cmd == PROTO_ADMIN_WARMUP_CANCEL && (!a->has_job || a->job == 0 || a->job > UINT32_MAX)) {
        snprintf(err, errlen, "a \"job\" id is required");
        return -EINVAL;
    }
    if (by_id && (!a->has_id || a->id == 0 || a->id > UINT32_MAX)) {
        snprintf(err, errlen, "a dataset \"id\" is required");
        return -EINVAL;
    }
    if (is_dsadd && a->has_recheck && (a->recheck == 0 || a->recheck > DATASET_RECHECK_MAX)) {
        snprintf(err, errlen, "\"recheck\" must be 1 to %d seconds", DATASET_RECHECK_MAX);
        return -EINVAL;
    }
    if (is_warmup && (a->job > UINT32_MAX || a->seal > 1)) {
        snprintf(err, errlen, "\"job\" must fit 32 bits and \"seal\" be 0 or 1");
        return -EINVAL;
    }
    return 0;
}

/* ---- path commands and health (on I/O threads) ---- */

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
                    ? nvme_pin_files(s->d.nvme, (const uint8_t (*)[FILE_ID_LEN])a->ids, a->nids, pin)
                    : nvme_drop_files(s->d.nvme, (const uint8_t (*)[FILE_ID_LEN])a->ids, a->nids);
}

static uint64_t pct(uint64_t used, uint64_t cap)
{
    return cap ? used * 100 / cap : 0;
}

/*
 * HEALTH's records: "healthy" (1/0), "reason" when not; "roots",
 * "dram_used_pct"; with an NVMe tier "nvme_used_pct", "nvme_state"
 * (ok|full|offline) and its error counts.  A failing or full device is
 * survivable (reads go to DRAM and the source) but makes the node
 * unhealthy: an operator must hear of it.
 */
static void admin_health_reply(adminreq *a)
{
    server *s = a->c->srv;
    dram_stats ds;
    nvme_stats ns = { 0 };
    char reason[1200] = "";
    recbuf rb;

    dram_get_stats(s->d.dram, &ds);
    if (s->d.nvme)
        nvme_get_stats(s->d.nvme, &ns);
    if (a->rc < 0)
        snprintf(reason, sizeof(reason), "%s", a->text);
    else if (s->d.nvme && ns.state != NVME_STATE_OK)
        snprintf(reason, sizeof(reason), "nvme tier %s (%llu I/O errors, %llu out-of-space errors); "
                 "serving from dram and the source", nvme_state_name(ns.state),
                 (unsigned long long)ns.io_errors, (unsigned long long)ns.space_errors);
    if (rb_init(&rb, a->c, 4096) < 0)
        return;
    rb_u64(&rb, "healthy", reason[0] == '\0');
    if (reason[0])
        rb_str(&rb, "reason", reason, strlen(reason));
    rb_u64(&rb, "roots", (uint64_t)s->d.cfg->nroots);
    rb_u64(&rb, "dram_used_pct", pct(ds.used_bytes, ds.capacity_bytes));
    if (s->d.nvme) {
        const char *st = nvme_state_name(ns.state);
        rb_u64(&rb, "nvme_used_pct", pct(ns.used_bytes, ns.capacity_bytes));
        rb_str(&rb, "nvme_state", st, strlen(st));
        rb_u64(&rb, "nvme_io_errors", ns.io_errors);
        rb_u64(&rb, "nvme_space_errors", ns.space_errors);
        rb_u64(&rb, "nvme_checksum_errors", ns.checksum_errors);
    }
    rb_send(&rb, a->c, a->req_id);
}

static void admin_done(wq_job *j)
{
    adminreq *a = (adminreq *)j;
    conn *c = a->c;
    server *s = c->srv;
    recbuf rb;

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
                        ? dram_pin_files(s->d.dram, (const uint8_t (*)[FILE_ID_LEN])a->ids, a->nids, pin)
                        : dram_drop_files(s->d.dram, (const uint8_t (*)[FILE_ID_LEN])a->ids, a->nids);
        a->phase = 1;
        workers_submit(s->d.w, &a->job, WQ_DEMAND);
        return;
    }
    if (rb_init(&rb, c, 256) == 0) {
        rb_u64(&rb, "files", a->nids);
        rb_u64(&rb, "dram_chunks", (uint64_t)(a->dram_n > 0 ? a->dram_n : 0));
        rb_u64(&rb, "nvme_chunks", (uint64_t)(a->nvme_n > 0 ? a->nvme_n : 0));
        rb_send(&rb, c, a->req_id);
    }
out:
    c->inflight--;
    if (!c->dead)
        conn_update_events(c);
    free(a->norm);
    free(a->ids);
    conn_unref(&a->c);
    free(a);
}

/* ---- warmup ---- */

/* WARMUP: every "path" must pass the roots or the batch is refused whole;
 * the reply names the job. */
static void admin_warmup(conn *c, const proto_msg *m, const admin_args *args)
{
    server *s = c->srv;
    char **norms = NULL, err[320] = "";
    int *roots = NULL, rc = 0;
    size_t n = 0, off = 0;
    uint32_t jid = (uint32_t)args->job;
    proto_rec r;
    recbuf rb;

    if (args->npaths) {
        norms = calloc(args->npaths, sizeof(*norms));
        roots = calloc(args->npaths, sizeof(*roots));
        if (!norms || !roots)
            rc = -ENOMEM;
    }
    while (rc == 0 && proto_rec_next(m->u.admin.recs, m->u.admin.len, &off, &r) == 1) {
        if (!proto_rec_is(&r, "path"))
            continue;
        rc = source_resolve(s->d.src, r.str, r.len, &norms[n], &roots[n], err, sizeof(err));
        if (rc == 0)
            n++;
    }
    if (rc == 0)
        rc = warmup_add(s->d.wu, &jid, norms, roots, n, args->seal != 0, args->bw);
    for (size_t i = 0; i < n; i++)
        free(norms[i]);
    free(norms);
    free(roots);
    if (rc < 0) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc,
                    rc == -ENOENT ? "no such open warmup job" : rc == -ENOMEM ? NULL : err);
        return;
    }
    if (rb_init(&rb, c, 64) == 0) {
        rb_u64(&rb, "job", jid);
        rb_send(&rb, c, m->h.req_id);
    }
}

static int status_put(void *arg, const warmup_info *j)
{
    recbuf *rb = arg;

    rb_u64(rb, "job", j->id);
    rb_str(rb, "state", j->state, strlen(j->state));
    rb_u64(rb, "files", j->files);
    rb_u64(rb, "failed", j->failed);
    rb_u64(rb, "bytes", j->bytes);
    rb_u64(rb, "chunks_cached", j->chunks_cached);
    rb_u64(rb, "chunks_skipped", j->chunks_skipped);
    rb_u64(rb, "queued", j->queued);
    rb_u64(rb, "dirs", j->dirs);
    rb_u64(rb, "elapsed_ms", j->elapsed_ms);
    rb_u64(rb, "sealed", (uint64_t)j->sealed);
    if (j->error[0])
        rb_str(rb, "error", j->error, strlen(j->error));
    return rb->rc;
}

/* ---- analyze ---- */

/* ANALYZE in flight: copies of the jobs' records, reported on an I/O
 * thread (replaying each record through the policies takes milliseconds). */
typedef struct anreq {
    wq_job job;
    conn *c;
    uint32_t req_id;
    an_caps caps;
    size_t n;
    an_job *jobs;
    an_report *reps;
    int rc;
} anreq;

static void analyze_run(wq_job *j)
{
    anreq *q = (anreq *)j;

    for (size_t i = 0; i < q->n && q->rc == 0; i++)
        q->rc = analysis_report(&q->jobs[i], &q->caps, &q->reps[i]);
}

static uint64_t bp(double share)        /* basis points, 0..10000 */
{
    return share <= 0 ? 0 : share >= 1 ? 10000 : (uint64_t)(share * 10000 + 0.5);
}

static void rb_cstr(recbuf *rb, const char *name, const char *s)
{
    rb_str(rb, name, s, strlen(s));
}

/* One job's records, "job" first (PROTOCOL.md lists them). */
static void analyze_put(recbuf *rb, const an_job *j, const an_report *r)
{
    rb_u64(rb, "job", j->id);
    rb_u64(rb, "uid", j->uid);
    rb_u64(rb, "pgid", (uint64_t)(int64_t)j->pgid);
    rb_u64(rb, "conns", j->conns);
    rb_cstr(rb, "class", an_class_name(r->cls));
    rb_u64(rb, "stable", (uint64_t)r->stable);
    rb_u64(rb, "switches", j->switches);
    rb_u64(rb, "requests", j->requests);
    rb_u64(rb, "bytes", j->bytes);
    rb_u64(rb, "seconds", (j->last_ns - j->first_ns) / 1000000000ull);
    rb_u64(rb, "seq_bp", bp(r->share[AN_V_SEQ]));
    rb_u64(rb, "stride_bp", bp(r->share[AN_V_STRIDE]));
    rb_u64(rb, "whole_bp", bp(r->share[AN_V_WHOLE]));
    rb_u64(rb, "random_bp", bp(r->share[AN_V_RAND]));
    rb_u64(rb, "hot_bp", bp(r->hot));
    rb_u64(rb, "reuse_bp", bp(r->reuse_share));
    rb_cstr(rb, "order", r->order);
    rb_u64(rb, "req_p50", r->req_p50);
    rb_u64(rb, "req_p90", r->req_p90);
    rb_u64(rb, "files", j->files_seen);
    rb_u64(rb, "file_p50", r->file_p50);
    rb_u64(rb, "file_p90", r->file_p90);
    rb_u64(rb, "small_files_bp", bp(r->small_file_share));
    rb_u64(rb, "gap_p50_us", r->gap_p50_ns / 1000);
    rb_u64(rb, "gap_p99_us", r->gap_p99_ns / 1000);
    rb_u64(rb, "idle_bp", bp(r->idle_share));
    rb_u64(rb, "waits", j->wait_ns.n);
    rb_u64(rb, "wait_p50_us", r->wait_p50_ns / 1000);
    rb_u64(rb, "wait_p90_us", r->wait_p90_ns / 1000);
    rb_u64(rb, "wait_p99_us", r->wait_p99_ns / 1000);
    rb_u64(rb, "reuse_p50_bytes", r->reuse_p50_bytes);
    rb_u64(rb, "reuse_p90_bytes", r->reuse_p90_bytes);
    rb_u64(rb, "distinct_bytes", r->distinct_bytes);
    rb_u64(rb, "samples", r->samples);
    rb_u64(rb, "sample_ppm", (uint64_t)(r->rate * 1e6 + 0.5));
    rb_u64(rb, "hinted", j->hinted);
    for (int t = 0; t < r->ntiers; t++) {
        const an_tier_sim *ts = &r->tiers[t];
        if (ts->hit[0] < 0)
            continue;
        rb_cstr(rb, "tier", ts->tier);
        rb_u64(rb, "capacity", ts->capacity);
        for (int row = 0; row < AN_SIM_ROWS; row++) {
            char name[32];
            snprintf(name, sizeof(name), "hit_%s_bp", an_row_name(row));
            rb_u64(rb, name, bp(ts->hit[row]));
        }
        rb_cstr(rb, "best", an_row_name(ts->best));
    }
    for (int i = 0; i < r->nrecs; i++)
        rb_cstr(rb, "rec", r->recs[i]);
}

static void analyze_done(wq_job *j)
{
    anreq *q = (anreq *)j;
    conn *c = q->c;
    recbuf rb;

    c->srv->analyze_inflight--;
    if (c->dead)
        goto out;
    if (q->rc < 0) {
        reply_error(c, PROTO_OP_ADMIN, q->req_id, q->rc, NULL);
        goto out;
    }
    if (rb_init(&rb, c, PROTO_MAX_BODY) == 0) {
        rb_u64(&rb, "jobs", q->n);
        for (size_t i = 0; i < q->n; i++) {
            /* a job takes at most ~5 KiB; the rest are counted, not sent */
            if (rb.cap - rb.off < 8192) {
                rb_u64(&rb, "omitted", q->n - i);
                break;
            }
            analyze_put(&rb, &q->jobs[i], &q->reps[i]);
        }
        rb_send(&rb, c, q->req_id);
    }
out:
    c->inflight--;
    if (!c->dead)
        conn_update_events(c);
    free(q->jobs);
    free(q->reps);
    conn_unref(&q->c);
    free(q);
}

/* Whether the caller may see job j and asked for it.  Anyone may ask;
 * only root and the admin group see other uids' jobs. */
static int analyze_wants(const conn *c, const an_job *j, uint64_t jobid)
{
    if (!j || (jobid && j->id != jobid) || (!c->is_admin && j->uid != (uint32_t)c->cred.uid))
        return 0;
    return jobid || j->requests > 0;    /* (granaryctl's own connection, for one) */
}

void admin_analyze(conn *c, uint32_t req_id, uint64_t jobid)
{
    server *s = c->srv;
    const gr_config *cfg = s->d.cfg;
    size_t want = 0;
    anreq *q;

    /* Each one copies up to AN_MAX_JOBS records (about 5 MiB) and replays
     * them: a few at a time for the whole daemon, whoever asks. */
    if (s->analyze_inflight >= ANALYZE_MAX_INFLIGHT) {
        reply_error(c, PROTO_OP_ADMIN, req_id, -EBUSY,
                    "analyses are running already; ask again when they end");
        return;
    }
    for (unsigned i = 0; i < AN_MAX_JOBS; i++)
        want += analyze_wants(c, analysis_job(s->an, i), jobid);
    if (jobid && want == 0) {
        reply_error(c, PROTO_OP_ADMIN, req_id, -ENOENT, "no such job (or not one of yours)");
        return;
    }
    q = calloc(1, sizeof(*q));
    if (!q || !(q->jobs = malloc((want + 1) * sizeof(an_job))) ||
        !(q->reps = calloc(want + 1, sizeof(an_report)))) {
        if (q)
            free(q->jobs);
        free(q);
        reply_error(c, PROTO_OP_ADMIN, req_id, -ENOMEM, NULL);
        return;
    }
    for (unsigned i = 0; i < AN_MAX_JOBS && q->n < want; i++) {
        const an_job *j = analysis_job(s->an, i);
        if (analyze_wants(c, j, jobid))
            q->jobs[q->n++] = *j;
    }
    s->analyze_inflight++;
    q->caps.dram_capacity = cfg->dram_capacity;
    q->caps.nvme_capacity = s->d.nvme ? cfg->nvme_capacity : 0;
    q->caps.chunk_size = cfg->chunk_size;
    /* the tiers' policies now (with policy = auto, what it chose) */
    q->caps.dram_policy = (int)dram_policy_kind(s->d.dram);
    q->caps.nvme_policy = s->d.nvme ? nvme_policy_kind(s->d.nvme) : -1;
    q->job.run = analyze_run;
    q->job.done = analyze_done;
    q->c = conn_ref(c);
    q->req_id = req_id;
    c->inflight++;
    workers_submit(s->d.w, &q->job, WQ_DEMAND);
}

/* ---- datasets ---- */

/* DATASET_ADD: "path" (a directory under a root), "stamp" (a file under a
 * root whose change means the dataset changed; default the top directory),
 * "recheck" (seconds between looks at the stamp).  The reply names the id;
 * the scan runs in the background (DATASET_LIST shows it). */
static void admin_dataset_add(conn *c, const proto_msg *m, const admin_args *args)
{
    server *s = c->srv;
    char err[320] = "", *norm = NULL, *stamp = NULL;
    int root, sroot, rc;
    uint32_t id = 0;
    recbuf rb;

    rc = source_resolve(s->d.src, args->path, args->path_len, &norm, &root, err, sizeof(err));
    if (rc == 0 && args->stamp)
        rc = source_resolve(s->d.src, args->stamp, args->stamp_len, &stamp, &sroot, err,
                            sizeof(err));
    if (rc == 0) {
        rc = datasets_add(s->d.ds, norm, root, stamp,
                          args->has_recheck ? (double)args->recheck : DATASET_RECHECK_DEFAULT, &id);
        if (rc == -EEXIST)
            snprintf(err, sizeof(err), "%.200s is registered, or lies inside or around a "
                     "registered dataset", norm);
        else if (rc == -EROFS)
            snprintf(err, sizeof(err), "datasets need the NVMe tier's directory ([nvme] path)");
        else if (rc < 0)
            snprintf(err, sizeof(err), "%s", strerror(-rc));
    }
    free(norm);
    free(stamp);
    if (rc < 0) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc, err);
        return;
    }
    log_info("dataset %u registered by uid %u: %.*s", id, (unsigned)c->cred.uid,
             (int)args->path_len, args->path);
    if (rb_init(&rb, c, 64) == 0) {
        rb_u64(&rb, "id", id);
        rb_send(&rb, c, m->h.req_id);
    }
}

static int dataset_put(void *arg, const dataset_info *i)
{
    recbuf *rb = arg;

    rb_u64(rb, "id", i->id);
    rb_str(rb, "path", i->path, strlen(i->path));
    rb_str(rb, "stamp", i->stamp, strlen(i->stamp));
    rb_u64(rb, "recheck", (uint64_t)i->recheck);
    rb_str(rb, "state", i->state, strlen(i->state));
    rb_u64(rb, "entries", i->entries);
    rb_u64(rb, "files", i->files);
    rb_u64(rb, "scan_dirs", i->scan_dirs);
    rb_u64(rb, "scan_entries", i->scan_entries);
    rb_u64(rb, "scan_errors", i->scan_errors);
    rb_u64(rb, "scan_ms", i->scan_ms);
    rb_u64(rb, "checks", i->checks);
    rb_u64(rb, "rescans", i->rescans);
    if (i->error[0])
        rb_str(rb, "error", i->error, strlen(i->error));
    return rb->rc;
}

/* ---- the command ---- */

void op_admin(conn *c, const proto_msg *m, int *fds, int nfds)
{
    server *s = c->srv;
    uint8_t cmd = m->u.admin.cmd;
    char err[256];
    admin_args args;
    adminreq *a;
    recbuf rb;
    int rc;

    (void)fds;
    (void)nfds;
    if (cmd == PROTO_ADMIN_CKPT_LIST) {    /* its own arguments */
        op_ckpt_list(c, m);
        return;
    }
    if (cmd == PROTO_ADMIN_PEERS) {
        op_peers(c, m);
        return;
    }
    if (admin_only(cmd) && !c->is_admin) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -EPERM,
                    "admin commands are for root and the [daemon] admin_group");
        return;
    }
    rc = parse_args(m, &args, err, sizeof(err));
    if (rc < 0) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc, err);
        return;
    }
    switch (cmd) {
    case PROTO_ADMIN_CONFIG: {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) {
            conn_fail(c, "out of memory for the configuration");
            return;
        }
        config_dump(s->d.cfg, f);
        fclose(f);
        if (rb_init(&rb, c, len + 64) == 0) {
            rb_str(&rb, "config", text, len);
            rb_send(&rb, c, m->h.req_id);
        }
        free(text);
        return;
    }
    case PROTO_ADMIN_WARMUP_STATUS:
        if (rb_init(&rb, c, PROTO_MAX_BODY) == 0) {
            warmup_each(s->d.wu, status_put, &rb);
            rb_send(&rb, c, m->h.req_id);
        }
        return;
    case PROTO_ADMIN_WARMUP:
        admin_warmup(c, m, &args);
        return;
    case PROTO_ADMIN_ANALYZE:
        admin_analyze(c, m->h.req_id, args.has_job ? args.job : 0);
        return;
    case PROTO_ADMIN_DATASET_ADD:
        admin_dataset_add(c, m, &args);
        return;
    case PROTO_ADMIN_DATASET_LIST:
        if (rb_init(&rb, c, PROTO_MAX_BODY) == 0) {
            datasets_each(s->d.ds, dataset_put, &rb);
            rb_send(&rb, c, m->h.req_id);
        }
        return;
    case PROTO_ADMIN_DATASET_REMOVE:
    case PROTO_ADMIN_DATASET_RESCAN:
        rc = cmd == PROTO_ADMIN_DATASET_REMOVE ? datasets_remove(s->d.ds, (uint32_t)args.id)
                                               : datasets_rescan(s->d.ds, (uint32_t)args.id);
        if (rc < 0) {
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, rc,
                        rc == -ENOENT ? "no such dataset" : rc == -EBUSY ? "a scan of it runs" : NULL);
        } else if (rb_init(&rb, c, 64) == 0) {
            rb_u64(&rb, "id", args.id);
            rb_send(&rb, c, m->h.req_id);
        }
        return;
    case PROTO_ADMIN_WARMUP_CANCEL:
        if (warmup_cancel(s->d.wu, (uint32_t)args.job) < 0) {
            reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOENT, "no such running warmup job");
        } else if (rb_init(&rb, c, 64) == 0) {
            rb_u64(&rb, "job", args.job);
            rb_send(&rb, c, m->h.req_id);
        }
        return;
    default:
        break;
    }
    a = calloc(1, sizeof(*a));
    if (!a) {
        reply_error(c, PROTO_OP_ADMIN, m->h.req_id, -ENOMEM, NULL);
        return;
    }
    a->cmd = cmd;
    if (cmd != PROTO_ADMIN_HEALTH) {
        rc = source_resolve(s->d.src, args.path, args.path_len, &a->norm, &a->root, err,
                            sizeof(err));
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
