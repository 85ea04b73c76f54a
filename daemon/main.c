/*
 * main.c - granaryd: parse arguments and configuration, set the modules up
 * in order, run the event loop, and tear everything down in reverse on
 * SIGTERM or SIGINT.
 *
 * Order of set-up: config -> log -> source -> NVMe store (index rebuilt:
 * the cache comes back warm) -> DRAM tier -> event base -> workers ->
 * fetcher -> metrics endpoint (a port already taken stops start-up) ->
 * server (the socket appears last, when everything behind it is ready).
 * Tear-down: metrics (its scrapes read the server) -> server (socket
 * removed, clients dropped) -> workers (queued NVMe writes dropped, demand
 * jobs finish, every completion runs) -> fetcher -> DRAM -> store (RocksDB
 * closed) -> source.
 */
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "dram.h"
#include "config.h"
#include "fault.h"
#include "fetch.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "prefetch.h"
#include "dirahead.h"
#include "reload.h"
#include "server.h"
#include "source.h"
#include "stats.h"
#include "nvme.h"
#include "warmup.h"
#include "datasets.h"
#include "workers.h"
#include "ckpt.h"
#include "peer.h"

#define DEFAULT_CONFIG "/etc/granary/granary.conf"
#define WRITEBACK_MAX (256ull << 20)    /* bytes queued for NVMe before skipping */
#define JUDGE_MAX_DIRS (1u << 16)       /* directories whose attributes the judge keeps */
#define PROOFS_MAX     (1u << 20)       /* (uid, file) access proofs remembered for hints */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: granaryd [--config FILE] [--check-config] [--describe-config] [--print-config]\n"
            "  -c, --config FILE     configuration file (default " DEFAULT_CONFIG ")\n"
            "      --check-config    validate the configuration and exit\n"
            "      --describe-config list every key with its type, default and meaning\n"
            "      --print-config    print the effective configuration and exit\n"
            "  -h, --help            this text\n"
            "Runs in the foreground; logs to stderr.  SIGTERM or SIGINT stop it cleanly;\n"
            "SIGHUP re-reads the configuration: the keys --describe-config marks live\n"
            "apply at once, other changes are logged as needing a restart.\n");
}

/* metrics_snapshot_fn: a scrape reads what `granaryctl stats` reads.  arg
 * is main's server pointer, set before the loop (and so any scrape) runs. */
static void metrics_snapshot(void *arg, gr_stats *out)
{
    server *srv = *(server **)arg;

    if (srv)
        server_snapshot(srv, out);
}

static void on_reload(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    reload_config(arg);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    log_info("signal %d: shutting down", (int)sig);
    event_base_loopbreak(arg);
}

static int huge_pages_mode(const char *name)
{
    if (!strcmp(name, "hugetlb"))
        return ARENA_PAGES_HUGETLB;
    if (!strcmp(name, "thp"))
        return ARENA_PAGES_THP;
    if (!strcmp(name, "off"))
        return ARENA_PAGES_SMALL;
    return ARENA_PAGES_AUTO;
}

/* Say what pages the arena got, and what an operator can do about it. */
static void log_pages(const dram *d, const char *mode)
{
    dram_stats ds;

    dram_get_stats(d, &ds);
    if (ds.hugetlb_segments == ds.segments) {
        log_info("dram: %llu segments on hugetlb pages (2 MiB)", (unsigned long long)ds.segments);
        return;
    }
    if (!strcmp(mode, "off"))
        return;
    if (ds.hugetlb_segments || ds.thp_segments)
        log_info("dram: of %llu segments, %llu on hugetlb pages, %llu advised for transparent huge "
                 "pages, the rest on 4 KiB pages", (unsigned long long)ds.segments,
                 (unsigned long long)ds.hugetlb_segments, (unsigned long long)ds.thp_segments);
    else
        log_info("dram: 4 KiB pages (clients pay a page-table entry per 4 KiB on first touch); for "
                 "huge pages reserve them (sysctl vm.nr_hugepages=N, 2 MiB each) or allow shmem "
                 "THP (echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled)");
    if (!strcmp(mode, "hugetlb") && ds.hugetlb_segments < ds.segments)
        log_warn("dram: [dram] huge_pages = hugetlb, but only %llu of %llu segments got hugetlb "
                 "pages (vm.nr_hugepages too small?)", (unsigned long long)ds.hugetlb_segments,
                 (unsigned long long)ds.segments);
}

/* A checkpoint is at its destination: the next open looks at the file
 * there, not at attributes cached from the old one. */
static void ckpt_published(void *arg, const char *dest)
{
    source_forget(arg, dest);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "check-config", no_argument, NULL, 'C' },
        { "describe-config", no_argument, NULL, 'D' },
        { "print-config", no_argument, NULL, 'P' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cfg_path = DEFAULT_CONFIG;
    int check_only = 0, print = 0, opt, rc = 1;
    char err[512];
    gr_config cfg;
    gr_stats stats = { 0 };
    source *src = NULL;
    nvme_tier *nvme = NULL;
    dram *d = NULL;
    struct event_base *base = NULL;
    struct event *sigterm = NULL, *sigint = NULL, *sighup = NULL;
    reload_ctx reload = { 0 };
    struct event *watchdog = NULL;  /* systemd WatchdogSec= keep-alive, see notify.h */
    workers *w = NULL, *pw = NULL;     /* pw: the peer lane's I/O threads */
    sched *sc = NULL, *psc = NULL;
    backend chain[BACKEND_MAX];
    unsigned nchain = 0;
    fetcher *fx = NULL;
    prefetcher *pf = NULL;
    dirahead *dra = NULL;
    judge *jg = NULL;
    proofs *pr = NULL;
    warmup *wu = NULL;
    datasets *dsets = NULL;
    ckpts *ck = NULL;
    peers *prs = NULL;
    server *srv = NULL;
    metrics *met = NULL;
    FILE *trace = NULL;

    while ((opt = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            cfg_path = optarg;
            break;
        case 'C':
            check_only = 1;
            break;
        case 'D':
            config_describe(stdout);
            return 0;
        case 'P':
            print = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "granaryd: unexpected argument \"%s\" (the configuration file goes "
                "after --config)\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (fault_setup(getenv("GRANARY_FAULTS")) < 0) {
        fprintf(stderr, "granaryd: $GRANARY_FAULTS: expected NAME=N[,NAME=N...] (fault.h)\n");
        return 1;
    }
    config_defaults(&cfg);
    if (config_load(&cfg, cfg_path, err, sizeof(err)) < 0 ||
        config_validate(&cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "granaryd: %s\n", err);
        return 1;
    }
    if (check_only) {
        printf("%s: OK\n", cfg_path);
        return 0;
    }
    if (print) {
        config_dump(&cfg, stdout);
        return 0;
    }
    log_set_level(cfg.log_level);
    reload.path = cfg_path;
    reload.cfg = &cfg;
    signal(SIGPIPE, SIG_IGN);

    if (source_new(&cfg, &src) < 0)
        goto fail;
    if (cfg.nvme_path[0]) {
        nvme_config nc = {
            .path = cfg.nvme_path,
            .capacity = cfg.nvme_capacity,
            .inline_max = cfg.nvme_inline_max,
            .max_chunk = cfg.chunk_size,
            .policy = strcmp(cfg.nvme_policy, "auto") ? cfg.nvme_policy : "lru",
        };
        if (nvme_open(&nc, &nvme, err, sizeof(err)) < 0) {
            log_error("nvme tier: %s", err);
            goto fail;
        }
        {
            nvme_stats ss;
            nvme_get_stats(nvme, &ss);
            log_info("nvme tier %s: %llu chunks, %llu of %llu bytes", cfg.nvme_path,
                     (unsigned long long)ss.chunks, (unsigned long long)ss.used_bytes,
                     (unsigned long long)ss.capacity_bytes);
        }
    } else {
        log_info("nvme tier disabled ([nvme] path is empty)");
    }
    /* policy = auto starts as lru; the server's auto controller (auto.c)
     * switches it when a job's verdict is stable. */
    if (dram_new_pages(cfg.dram_capacity, cfg.chunk_size,
                       strcmp(cfg.dram_policy, "auto") ? cfg.dram_policy : "lru",
                       huge_pages_mode(cfg.dram_huge_pages), &d, err, sizeof(err)) < 0) {
        log_error("dram tier: %s", err);
        goto fail;
    }
    log_pages(d, cfg.dram_huge_pages);
    if (evthread_use_pthreads() < 0 || !(base = event_base_new())) {
        log_error("libevent initialisation failed");
        goto fail;
    }
    if (workers_start(base, cfg.io_threads, &w) < 0)
        goto fail;
    /* Write-behind pins its chunks' DRAM blocks until written: at most a
     * quarter of the tier, so that readers always find room. */
    if (sched_new(w, (unsigned)cfg.max_inflight, &sc) < 0)
        goto fail;
    /* The chain below DRAM: the NVMe tier (if any), the peer cache (if
     * any), then the source. */
    if (nvme)
        chain[nchain++] = nvme_backend(nvme);
    if (cfg.peer_listen[0]) {
        /* What serves other nodes runs on threads of its own (fetch.h,
         * fetcher_set_peer_lane): a quarter of io_threads, at least 2. */
        int lane = cfg.io_threads / 4 > 2 ? cfg.io_threads / 4 : 2;
        if (workers_start(base, lane, &pw) < 0 || sched_new(pw, (unsigned)lane, &psc) < 0)
            goto fail;
        if (peers_new(base, &cfg, src, pw, &stats, &prs, err, sizeof(err)) < 0) {
            log_error("%s", err);
            goto fail;
        }
        peers_backend(prs, &chain[nchain++]);
    }
    source_backend(src, &chain[nchain++]);
    if (fetcher_new(d, chain, nchain, sc, w, &stats,
                    cfg.dram_capacity / 4 < WRITEBACK_MAX ? cfg.dram_capacity / 4 : WRITEBACK_MAX,
                    &fx) < 0)
        goto fail;
    if (prs) {
        peers_set_fetcher(prs, fx);
        fetcher_set_peer_lane(fx, psc);
    }
    if (judge_new(cfg.attr_ttl, JUDGE_MAX_DIRS, &jg) < 0 || proofs_new(PROOFS_MAX, &pr) < 0 ||
        prefetcher_new(fx, d, src, jg, pr, w, &stats, &pf) < 0)
        goto fail;
    {
        prefetch_limits lim;
        reload_prefetch_limits(&cfg, &lim);
        prefetcher_configure(pf, &lim);
        if (dirahead_new(pf, d, src, jg, w, &stats, (unsigned)cfg.dir_readahead, lim.trust_all,
                         &dra) < 0)
            goto fail;
    }
    {
        char dir[PATH_MAX + 16];
        snprintf(dir, sizeof(dir), "%s/warmup", cfg.nvme_path);
        if (warmup_new(base, fx, sc, nvme, src, &stats, cfg.chunk_size, nvme ? dir : NULL, &wu, err,
                       sizeof(err)) < 0) {
            log_error("%s", err);
            goto fail;
        }
    }
    {
        char dir[PATH_MAX + 16];
        snprintf(dir, sizeof(dir), "%s/datasets", cfg.nvme_path);
        if (datasets_new(src, w, &stats, cfg.nvme_path[0] ? dir : NULL,
                         (uint64_t)cfg.dataset_max_entries, &dsets, err, sizeof(err)) < 0) {
            log_error("%s", err);
            goto fail;
        }
        if (datasets_count(dsets))
            log_info("%u registered datasets", datasets_count(dsets));
    }
    if (cfg.nvme_path[0] && cfg.ckpt_capacity) {
        char dir[PATH_MAX + 16];
        ckpt_config kc = {
            .dir = dir, .replica_dir = cfg.ckpt_replica_dir, .capacity = cfg.ckpt_capacity,
            .memory = cfg.ckpt_memory,
            .bandwidth = cfg.ckpt_bandwidth, .drains = (unsigned)cfg.ckpt_drains,
            .demand = !strcmp(cfg.ckpt_priority, "demand"),
            .roots = (const char (*)[PATH_MAX])cfg.roots, .nroots = cfg.nroots,
            .published = ckpt_published, .published_arg = src,
        };
        snprintf(dir, sizeof(dir), "%s/checkpoints", cfg.nvme_path);
        if (ckpt_new(base, w, &stats, &kc, &ck, err, sizeof(err)) < 0) {
            log_error("%s", err);
            goto fail;
        }
    } else {
        log_info("checkpoints off (they need [nvme] path and [checkpoint] capacity)");
    }
    if (cfg.trace_file[0]) {
        trace = fopen(cfg.trace_file, "ae");
        if (!trace) {
            log_error("trace_file %s: %s", cfg.trace_file, strerror(errno));
            goto fail;
        }
        fetcher_set_trace(fx, trace);
        log_info("recording chunk lookups to %s", cfg.trace_file);
    }
    /* Before the server, so that a metrics port already taken stops us
     * before the socket appears; scrapes only start with the loop, when
     * srv is set. */
    if (cfg.metrics_listen[0]) {
        if (metrics_start(base, cfg.metrics_listen, metrics_snapshot, &srv, &met, err,
                          sizeof(err)) < 0) {
            log_error("[metrics] listen %s", err);
            goto fail;
        }
        metrics_set_extra(met, server_metrics_jobs, &srv);
        if (strncmp(metrics_address(met), "unix:", 5) == 0)
            log_info("metrics on %s (GET /metrics)", metrics_address(met));
        else
            log_info("metrics on http://%s/metrics", metrics_address(met));
    } else {
        log_info("metrics endpoint off ([metrics] listen is empty)");
    }
    {
        server_deps deps = {
            .base = base, .cfg = &cfg, .src = src, .fx = fx, .sc = sc, .w = w, .pr = pr,
            .dram = d, .nvme = nvme, .pf = pf, .dra = dra, .wu = wu, .stats = &stats, .jg = jg, .ds = dsets,
            .ck = ck, .peers = prs,
        };
        if (server_start(&deps, &srv, err, sizeof(err)) < 0) {
            log_error("%s", err);
            goto fail;
        }
    }
    sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    sigint = evsignal_new(base, SIGINT, on_signal, base);
    reload.src = src;
    reload.jg = jg;
    reload.dram = d;
    reload.nvme = nvme;
    reload.sc = sc;
    reload.pf = pf;
    reload.dra = dra;
    reload.peers = prs;
    sighup = evsignal_new(base, SIGHUP, on_reload, &reload);
    if (!sigterm || !sigint || !sighup || event_add(sigterm, NULL) < 0 ||
        event_add(sigint, NULL) < 0 || event_add(sighup, NULL) < 0)
        goto fail;
    log_info("serving %s on %s (%d roots, chunk %llu, dram %llu)", cfg.roots[0], cfg.socket,
             cfg.nroots, (unsigned long long)cfg.chunk_size,
             (unsigned long long)cfg.dram_capacity);
    /* systemd (Type=notify): ready now that the socket listens; no-ops
     * outside systemd.  A failed notification is logged, not fatal: the
     * manager's own timeouts handle a daemon it never hears from. */
    if (notify_watchdog_start(base, &watchdog) < 0) {
        log_error("watchdog timer: out of memory");
        goto fail;
    }
    {
        /* STATUS= (systemctl status) says what start-up loaded, so that
         * READY=1 visibly comes after the NVMe index. */
        char tier[64] = "NVMe tier off";
        int nrc;
        if (nvme) {
            nvme_stats ss;
            nvme_get_stats(nvme, &ss);
            snprintf(tier, sizeof(tier), "NVMe index loaded: %llu chunks",
                     (unsigned long long)ss.chunks);
        }
        nrc = notify_sendf("READY=1\nSTATUS=serving %d roots; %s", cfg.nroots, tier);
        if (nrc < 0)
            log_warn("sd_notify READY=1 to $NOTIFY_SOCKET: %s", strerror(-nrc));
    }
    event_base_dispatch(base);
    (void)notify_send("STOPPING=1");
    rc = 0;
fail:
    metrics_stop(&met);         /* its scrapes read the server */
    if (srv)
        server_shutdown(srv);
    warmup_shutdown(wu);
    if (dsets)
        datasets_shutdown(dsets);
    ckpt_shutdown(ck);
    peers_shutdown(prs);
    if (sc)
        sched_drain(sc);
    if (psc)
        sched_drain(psc);
    workers_stop(&w);
    workers_stop(&pw);
    ckpt_free(&ck);
    server_free(&srv);
    dirahead_free(&dra);
    peers_free(&prs);
    warmup_free(&wu);
    datasets_free(&dsets);
    prefetcher_free(&pf);
    proofs_free(&pr);
    judge_free(&jg);
    fetcher_free(&fx);
    sched_free(&sc);
    sched_free(&psc);
    if (trace)
        fclose(trace);
    if (sigterm)
        event_free(sigterm);
    if (sigint)
        event_free(sigint);
    if (sighup)
        event_free(sighup);
    notify_watchdog_stop(&watchdog);
    if (base)
        event_base_free(base);
    dram_free(&d);
    nvme_close(&nvme);
    source_free(&src);
    if (rc == 0)
        log_info("stopped");
    return rc;
}
