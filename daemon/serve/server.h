/*
 * server.h - the Unix socket front end: accepts clients, decodes their
 * requests, answers them from the fetch engine, and applies per-client
 * limits and back-pressure.
 *
 * Connections are SOCK_SEQPACKET, served by one raw libevent event each
 * (bufferevents would truncate messages and drop SCM_RIGHTS fds).  A client
 * that sends faster than it reads has its socket left unread until its
 * replies drain; a client that sends garbage gets an error reply and, if it
 * keeps the connection, keeps being served.  Nothing a client does blocks
 * the loop or the other clients.
 *
 * Threads: the loop thread only.
 */
#ifndef GR_SERVER_H
#define GR_SERVER_H

#include <event2/buffer.h>
#include <event2/event.h>

#include "dram.h"
#include "config.h"
#include "fetch.h"
#include "source.h"
#include "stats.h"
#include "nvme.h"
#include "prefetch.h"
#include "warmup.h"
#include "datasets.h"
#include "dirahead.h"
#include "judge.h"
#include "workers.h"
#include "ckpt.h"
#include "peer.h"

typedef struct server server;

typedef struct server_deps {
    struct event_base *base;
    const gr_config *cfg;
    source *src;
    fetcher *fx;
    sched *sc;                  /* the source slots */
    workers *w;
    dram *dram;
    nvme_tier *nvme;                /* NULL without an NVMe tier */
    prefetcher *pf;
    dirahead *dra;              /* read-ahead across a directory's files */
    proofs *pr;                 /* OPEN's access proofs, for hints */
    warmup *wu;
    judge *jg;                  /* access_check = judge: OPEN, STAT and READDIR judged here */
    datasets *ds;               /* registered datasets (manifests) */
    ckpts *ck;                  /* checkpoint staging; NULL when off */
    peers *peers;               /* the peer cache; NULL when off */
    gr_stats *stats;
} server_deps;

/*
 * Create the socket at cfg->socket (its directory made if missing, a stale
 * socket replaced, a live one refused), listen, and start serving.  deps
 * are borrowed and must outlive the server.  0 or -errno with a reason in
 * err.
 */
int server_start(const server_deps *deps, server **out, char *err, size_t errlen);

/* Stop accepting, remove the socket file, and disconnect every client.
 * Requests still in flight finish into the void as their jobs complete. */
void server_shutdown(server *s);

/* Free what is left; call after the workers have stopped.  NULL-safe. */
void server_free(server **s);

/*
 * The analysis' per-job series for the metrics page (metrics_extra_fn's
 * shape, arg a server **; nothing while it is NULL): for every job that has
 * read, granary_job_class{job,uid,pgid,class} 1 (the verdict as a label, so
 * that a dashboard sees a job's pattern change), granary_job_verdict_stable,
 * granary_job_requests_total and granary_job_verdict_changes_total.
 * 0 or -1.
 */
int server_metrics_jobs(void *arg, struct evbuffer *out);

/* Fill *out with counters and the tiers' gauges.  Loop thread: the
 * loop's CPU time is the calling thread's. */
void server_snapshot(server *s, gr_stats *out);

#endif
