/*
 * server.c - the listening socket and accept (see server.h, and
 * serve_int.h for how the serving layer is cut): who the peer is
 * (SO_PEERCRED, SO_PEERGROUPS), whether it may connect (max_clients,
 * max_clients_per_uid), whether it is an admin; the stats snapshot.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fdpass.h"
#include "log.h"
#include "serve_int.h"

#define LISTEN_BACKLOG 512

/* Connections open for uid. */
static unsigned uid_conns(server *s, uid_t uid)
{
    unsigned n = 0;

    for (gr__list *l = gr__list_first(&s->conns); l; l = gr__list_next(&s->conns, l))
        n += gr__list_entry(l, conn, link)->cred.uid == uid;
    return n;
}

/*
 * The peer of fd: uid, gid and pid from SO_PEERCRED, supplementary groups
 * from SO_PEERGROUPS (the groups the peer had when it connected, from the
 * kernel: no race with pid reuse, unlike /proc/PID/status).  0, or -errno:
 * a peer we cannot identify is refused, never taken for root.
 */
static int peer_identify(int fd, peer_cred *out)
{
    struct ucred cred;
    socklen_t clen = sizeof(cred), glen = sizeof(out->groups);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0)
        return -errno;
    if (clen != sizeof(cred))
        return -EPROTO;
    out->uid = cred.uid;
    out->gid = cred.gid;
    out->pid = cred.pid;
    out->ngroups = 0;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, out->groups, &glen) == 0) {
        out->ngroups = (int)(glen / sizeof(gid_t));
    } else if (errno == ERANGE) {
        /* More groups than we keep: the first CONN_MAX_GROUPS are not
         * enough to judge membership, so judge as if none (fail closed). */
        out->ngroups = -1;
    } else {
        return -errno;
    }
    return 0;
}

/* Whether the peer may run admin commands: root, or a member of
 * admin_gid (primary or supplementary group). */
static int peer_is_admin(const server *s, const peer_cred *p)
{
    if (p->uid == 0)
        return 1;
    if (s->admin_gid == (gid_t)-1)
        return 0;
    if (p->gid == s->admin_gid)
        return 1;
    for (int i = 0; i < p->ngroups; i++)
        if (p->groups[i] == s->admin_gid)
            return 1;
    return 0;
}

/* Say why fd is refused and close it.  Requests the client already sent
 * are read and dropped first: closing a socket with unread data resets
 * the connection, and the client would see ECONNRESET instead of the
 * reason (a request sent after this drain can still do that). */
static void refuse(server *s, int fd, int err, const char *why)
{
    uint8_t buf[PROTO_HDR_LEN + PROTO_MAX_ERRMSG];
    ssize_t n = proto_enc_error(buf, sizeof(buf), PROTO_OP_HELLO, 0, err, why);
    struct iovec iov = { buf, (size_t)n };
    int fds[1], nfds;

    if (gr__send_fds(fd, &iov, 1, NULL, 0, MSG_DONTWAIT) < 0)
        log_debug("refused client: %s", strerror(errno));
    for (int i = 0; i < CONN_MAX_INFLIGHT; i++)
        if (gr__recv_fds_drop(fd, s->rbuf, sizeof(s->rbuf), fds, 0, &nfds, MSG_DONTWAIT, NULL,
                              close_later, s->d.src) <= 0)
            break;
    close(fd);
    s->d.stats->connections_refused++;
}

static void server_accept(evutil_socket_t lfd, short what, void *arg)
{
    server *s = arg;

    (void)what;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), rc;
        peer_cred cred = { 0 };
        conn *c;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                log_warn("accept: %s", strerror(errno));
            return;
        }
        rc = peer_identify(fd, &cred);
        if (rc < 0) {
            log_warn("refusing a client: cannot identify the peer: %s", strerror(-rc));
            refuse(s, fd, -EACCES, "the daemon could not identify this peer");
            continue;
        }
        if (s->nconns >= (unsigned)s->d.cfg->max_clients ||
            uid_conns(s, cred.uid) >= (unsigned)s->d.cfg->max_clients_per_uid) {
            refuse(s, fd, -EUSERS, s->nconns >= (unsigned)s->d.cfg->max_clients
                                       ? "too many clients (max_clients)"
                                       : "too many clients of this user (max_clients_per_uid)");
            continue;
        }
        c = conn_new(s, fd, &cred, peer_is_admin(s, &cred));
        if (c)
            log_debug("client %u connected: pid %d uid %u gid %u", c->id, (int)cred.pid,
                      (unsigned)cred.uid, (unsigned)cred.gid);
    }
}

int server_start(const server_deps *deps, server **out, char *err, size_t errlen)
{
    server *s = calloc(1, sizeof(*s));
    int rc;

    if (!s)
        return -ENOMEM;
    s->d = *deps;
    s->lis.fd = -1;
    if (analysis_new(&s->an) < 0) {
        free(s);
        return -ENOMEM;
    }
    gr__list_init(&s->conns);
    s->admin_gid = (gid_t)-1;
    if (deps->cfg->admin_group[0]) {
        struct group *g = getgrnam(deps->cfg->admin_group);
        if (g)
            s->admin_gid = g->gr_gid;
        else
            log_info("admin_group %s does not exist: admin commands are for root only",
                     deps->cfg->admin_group);
    }
    rc = gr__unix_listen(&s->lis, deps->cfg->socket, SOCK_SEQPACKET, deps->cfg->socket_mode,
                         LISTEN_BACKLOG, err, errlen);
    if (rc < 0)
        goto fail;
    s->lev = event_new(deps->base, s->lis.fd, EV_READ | EV_PERSIST, server_accept, s);
    if (!s->lev || event_add(s->lev, NULL) < 0) {
        rc = -ENOMEM;
        snprintf(err, errlen, "event_new failed");
        goto fail;
    }
    if (auto_start(s) < 0) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory for the auto policy timer");
        goto fail;
    }
    *out = s;
    return 0;
fail:
    server_shutdown(s);
    analysis_free(&s->an);
    free(s);
    return rc;
}

void server_shutdown(server *s)
{
    auto_stop(s);
    if (s->lev) {
        event_free(s->lev);
        s->lev = NULL;
    }
    gr__unix_close(&s->lis);
    for (gr__list *l; (l = gr__list_first(&s->conns));)
        conn_close(gr__list_entry(l, conn, link));
}

void server_free(server **sp)
{
    server *s = *sp;

    if (!s)
        return;
    server_shutdown(s);
    analysis_free(&s->an);
    free(s);
    *sp = NULL;
}

int server_metrics_jobs(void *arg, struct evbuffer *out)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        { "job_class", "gauge", "the IO-pattern verdict of each job (uid and process group): "
                                "1, with the class as a label" },
        { "job_verdict_stable", "gauge", "1 when the job's verdict came out the same several "
                                         "evaluations in a row" },
        { "job_requests_total", "counter", "read requests of the job" },
        { "job_verdict_changes_total", "counter", "times the job's verdict changed" },
    };
    server *s = *(server **)arg;
    int rc = 0;

    if (!s)
        return 0;
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        rc |= evbuffer_add_printf(out, "# HELP granary_%s %s\n# TYPE granary_%s %s\n",
                                  fam[f].name, fam[f].help, fam[f].name, fam[f].type);
        for (unsigned i = 0; i < AN_MAX_JOBS; i++) {
            const an_job *j = analysis_job(s->an, i);
            char lab[96];
            if (!j || !j->requests)
                continue;
            snprintf(lab, sizeof(lab), "job=\"%u\",uid=\"%u\",pgid=\"%d\"", j->id, j->uid,
                     (int)j->pgid);
            if (f == 0)
                rc |= evbuffer_add_printf(out, "granary_%s{%s,class=\"%s\"} 1\n", fam[f].name,
                                          lab, an_class_name(j->verdict));
            else
                rc |= evbuffer_add_printf(out, "granary_%s{%s} %llu\n", fam[f].name, lab,
                                          (unsigned long long)(f == 1 ? j->verdict_runs >= AN_STABLE
                                                               : f == 2 ? j->requests
                                                                        : j->switches));
        }
    }
    if (s->d.peers && peers_metrics(s->d.peers, out) < 0)
        rc = -1;
    return rc < 0 ? -1 : 0;
}

void server_snapshot(server *s, gr_stats *out)
{
    dram_stats ds;
    struct timespec cpu;

    *out = *s->d.stats;
    dram_get_stats(s->d.dram, &ds);
    out->dram_used_bytes = ds.used_bytes;
    out->dram_cached_bytes = ds.cached_bytes;
    out->dram_heap_fallbacks = ds.heap_fallbacks;
    out->dram_segment_renewals = ds.segment_renewals;
    out->dram_hugetlb_segments = ds.hugetlb_segments;
    out->dram_thp_segments = ds.thp_segments;
    out->dram_not_admitted = ds.not_admitted;
    out->dram_pinned_bytes = ds.pinned_bytes;
    out->dram_capacity_bytes = ds.capacity_bytes;
    out->dram_chunks = ds.chunks;
    out->evictions_dram = ds.evictions;
    out->fetches_inflight = fetcher_inflight(s->d.fx);
    out->source_running = sched_running(s->d.sc);
    out->source_queued = sched_queued(s->d.sc);
    out->source_fds_cached = source_open_fds(s->d.src);
    out->prefetch_wasted = ds.prefetch_wasted;
    out->warmup_jobs_active = warmup_active(s->d.wu);
    prefetcher_snapshot(s->d.pf, out);
    out->writeback_queue_bytes = fetcher_writeback_bytes(s->d.fx);
    out->connections = s->nconns;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
        out->loop_cpu_microseconds = (uint64_t)cpu.tv_sec * 1000000u + (uint64_t)cpu.tv_nsec / 1000u;
    if (s->d.nvme) {
        nvme_stats ns;
        nvme_get_stats(s->d.nvme, &ns);
        out->nvme_used_bytes = ns.used_bytes;
        out->nvme_capacity_bytes = ns.capacity_bytes;
        out->nvme_chunks = ns.chunks;
        out->evictions_nvme = ns.evictions;
        out->nvme_not_admitted = ns.not_admitted;
        out->nvme_pinned_bytes = ns.pinned_bytes;
        out->nvme_state = (uint64_t)ns.state;
        out->nvme_io_errors = ns.io_errors;
        out->nvme_space_errors = ns.space_errors;
        out->nvme_offline_skips = ns.offline_skips;
    }
}
