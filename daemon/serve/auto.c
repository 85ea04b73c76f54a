/*
 * auto.c - `policy = auto` for either tier: the eviction policy chosen from
 * the jobs' IO-pattern analysis (analysis.h).
 *
 * Every AUTO_TICK_MS the job that made the most requests since the last
 * tick is the one the tiers serve most.  When its verdict is stable and it
 * is not what was decided on last (another job, another verdict, or
 * AN_AUTO_RECHECK more requests since), its record is replayed on an I/O thread
 * (analysis_report: every policy at the tiers' capacities), and each tier
 * whose [tier] policy is auto switches to the replay's best policy if that
 * beats the tier's current one by AN_AUTO_MARGIN (an_auto_choice: so
 * near-ties never flap).
 * Each switch is logged with its reason and counted (policy_switches); the
 * switch keeps every chunk and pin (dram_set_policy, nvme_set_policy).
 *
 * Threads: the loop thread, but for the replay (on a copy).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "serve_int.h"

#define AUTO_TICK_MS   1000

typedef struct autoreq {
    wq_job job;
    server *s;
    an_caps caps;
    an_job j;
    an_report r;
    int rc;
} autoreq;

static int tier_is_auto(const server *s, int t)
{
    return !strcmp(t == 0 ? s->d.cfg->dram_policy : s->d.cfg->nvme_policy, "auto");
}

static void auto_run(wq_job *w)
{
    autoreq *q = (autoreq *)w;

    q->rc = analysis_report(&q->j, &q->caps, &q->r);
}

/* Apply the replay to tier t (0 dram, 1 nvme). */
static void auto_apply(server *s, const autoreq *q, int t)
{
    const an_tier_sim *ts;
    int cur, best, rc;
    char err[256] = "";

    if (t >= q->r.ntiers || !tier_is_auto(s, t) || (t == 1 && !s->d.nvme))
        return;
    ts = &q->r.tiers[t];
    if (ts->hit[0] < 0)
        return;                 /* too few samples to replay */
    cur = t == 0 ? (int)dram_policy_kind(s->d.dram) : nvme_policy_kind(s->d.nvme);
    best = an_auto_choice(&q->r, t, cur);
    if (best < 0) {
        log_debug("auto policy: [%s] stays %s for job %u (%s)", ts->tier,
                  policy_kind_name((policy_kind)cur), q->j.id, an_class_name(q->r.cls));
        return;
    }
    if (t == 0)
        rc = dram_set_policy(s->d.dram, policy_kind_name((policy_kind)best), err, sizeof(err));
    else
        rc = nvme_set_policy(s->d.nvme, policy_kind_name((policy_kind)best));
    if (rc < 0) {
        log_warn("auto policy: [%s] %s -> %s failed: %s", ts->tier,
                 policy_kind_name((policy_kind)cur), policy_kind_name((policy_kind)best),
                 err[0] ? err : strerror(-rc));
        return;
    }
    s->d.stats->policy_switches++;
    if (q->r.cls == AN_SHUFFLED_EPOCH && q->r.reuse_share < 0.05) {
        log_info("auto policy: [%s] %s -> %s: job %u (uid %u, process group %d) reads %s, each "
                 "item once per pass (its first pass: nothing re-read yet to replay); recency "
                 "and frequency policies churn on epochs, epoch keeps a stable subset", ts->tier,
                 policy_kind_name((policy_kind)cur), policy_kind_name((policy_kind)best), q->j.id,
                 q->j.uid, (int)q->j.pgid, an_class_name(q->r.cls));
        return;
    }
    log_info("auto policy: [%s] %s -> %s: job %u (uid %u, process group %d) reads %s; its "
             "sampled reads replayed at %llu bytes hit %.2f with %s, %.2f with %s (Belady's MIN "
             "%.2f)", ts->tier, policy_kind_name((policy_kind)cur),
             policy_kind_name((policy_kind)best), q->j.id, q->j.uid, (int)q->j.pgid,
             an_class_name(q->r.cls), (unsigned long long)ts->capacity, ts->hit[best],
             policy_kind_name((policy_kind)best), ts->hit[cur], policy_kind_name((policy_kind)cur),
             ts->hit[AN_SIM_ROWS - 1]);
}

static void auto_done(wq_job *w)
{
    autoreq *q = (autoreq *)w;
    server *s = q->s;

    s->auto_busy = 0;
    if (!s->auto_stopped && !w->cancelled && q->rc == 0) {
        auto_apply(s, q, 0);
        auto_apply(s, q, 1);
    }
    free(q);
}

static void auto_tick(evutil_socket_t fd, short what, void *arg)
{
    server *s = arg;
    const an_job *pick = NULL;
    uint64_t most = 0;
    autoreq *q;

    (void)fd;
    (void)what;
    for (unsigned i = 0; i < AN_MAX_JOBS; i++) {
        const an_job *j = analysis_job(s->an, i);
        uint64_t d;
        if (!j)
            continue;
        d = s->auto_last_id[i] == j->id ? j->requests - s->auto_last_req[i] : j->requests;
        s->auto_last_id[i] = j->id;
        s->auto_last_req[i] = j->requests;
        if (d > most) {
            most = d;
            pick = j;
        }
    }
    if (s->auto_busy || !pick || (!tier_is_auto(s, 0) && !(s->d.nvme && tier_is_auto(s, 1))))
        return;
    if (pick->verdict == AN_UNKNOWN || pick->verdict_runs < AN_STABLE)
        return;
    if (pick->id == s->auto_job && pick->verdict == s->auto_verdict &&
        pick->requests - s->auto_decided_req < AN_AUTO_RECHECK)
        return;
    q = calloc(1, sizeof(*q));
    if (!q)
        return;
    q->s = s;
    q->j = *pick;
    q->caps.dram_capacity = s->d.cfg->dram_capacity;
    q->caps.nvme_capacity = s->d.nvme ? s->d.cfg->nvme_capacity : 0;
    q->caps.chunk_size = s->d.cfg->chunk_size;
    q->caps.dram_policy = (int)dram_policy_kind(s->d.dram);
    q->caps.nvme_policy = s->d.nvme ? nvme_policy_kind(s->d.nvme) : -1;
    q->job.run = auto_run;
    q->job.done = auto_done;
    s->auto_busy = 1;
    s->auto_job = pick->id;
    s->auto_verdict = pick->verdict;
    s->auto_decided_req = pick->requests;
    workers_submit(s->d.w, &q->job, WQ_BACKGROUND);
}

int auto_start(server *s)
{
    struct timeval tv = { AUTO_TICK_MS / 1000, (AUTO_TICK_MS % 1000) * 1000 };

    s->auto_ev = event_new(s->d.base, -1, EV_PERSIST, auto_tick, s);
    if (!s->auto_ev || event_add(s->auto_ev, &tv) < 0)
        return -ENOMEM;
    return 0;
}

void auto_stop(server *s)
{
    s->auto_stopped = 1;
    if (s->auto_ev) {
        event_free(s->auto_ev);
        s->auto_ev = NULL;
    }
}
