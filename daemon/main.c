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

#include "cache.h"
#include "config.h"
#include "fetch.h"
#include "log.h"
#include "metrics.h"
#include "notify.h"
#include "prefetch.h"
#include "server.h"
#include "source.h"
#include "stats.h"
#include "store.h"
#include "warmup.h"
#include "workers.h"

#define DEFAULT_CONFIG "/etc/granary/granary.conf"
#define WRITEBACK_MAX (256ull << 20)    /* bytes queued for NVMe before skipping */

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
            "SIGHUP re-reads the configuration: log_level, max_clients, attr_ttl,\n"
            "max_inflight, the policies, max_leased_per_client and the [prefetch] keys\n"
            "apply live, other changes are logged as needing a restart.\n");
}

/* metrics_snapshot_fn: a scrape reads what `granaryctl stats` reads.  arg
 * is main's server pointer, set before the loop (and so any scrape) runs. */
static void metrics_snapshot(void *arg, gr_stats *out)
{
    server *srv = *(server **)arg;

    if (srv)
        server_snapshot(srv, out);
}

/* What SIGHUP needs: where the configuration came from, and the running
 * one (the server reads it through a pointer, so keys it consults per
 * request change live). */
typedef struct reload_ctx {
    const char *path;
    gr_config *cfg;
    source *src;
    dram *dram;
    store *nvme;                /* NULL without an NVMe tier */
    fetcher *fx;
    prefetcher *pf;
} reload_ctx;

/* Log every line of the dump of b that differs from a's: keys whose new
 * value needs a restart.  Both dumps list the same keys in the same order. */
static void log_unapplied(const gr_config *a, const gr_config *b)
{
    char *da = NULL, *db = NULL, section[64] = "";
    size_t la = 0, lb = 0;
    FILE *fa = open_memstream(&da, &la), *fb = open_memstream(&db, &lb);

    if (fa && fb) {
        config_dump(a, fa);
        config_dump(b, fb);
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    for (char *pa = da, *pb = db; pa && pb && *pa && *pb;) {
        char *ea = strchr(pa, '\n'), *eb = strchr(pb, '\n');
        size_t na = ea ? (size_t)(ea - pa) : strlen(pa), nb = eb ? (size_t)(eb - pb) : strlen(pb);
        if (pb[0] == '[' && nb < sizeof(section))
            snprintf(section, sizeof(section), "%.*s", (int)nb, pb);
        else if (na != nb || memcmp(pa, pb, na))
            log_warn("reload: %s %.*s: takes effect after a restart", section, (int)nb, pb);
        pa += na + (ea != NULL);
        pb += nb + (eb != NULL);
    }
    free(da);
    free(db);
}

/*
 * SIGHUP: re-read the configuration; apply what can change live, log each
 * other change as needing a restart.  A file that does not parse changes
 * nothing.  Live: log_level, max_clients, attr_ttl, both tiers' policies
 * (every chunk and pin kept), max_leased_per_client, [source] max_inflight
 * and the [prefetch] keys.  Not live: the
 * capacities (the DRAM arena is sealed memfds sized at start; a lowered NVMe
 * capacity is applied when the tier opens, by evicting down to it), paths,
 * the socket, chunk_size, io_threads.
 */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
    reload_ctx *r = arg;
    gr_config next, *cur = r->cfg;
    char err[512];

    (void)sig;
    (void)what;
    config_defaults(&next);
    if (config_load(&next, r->path, err, sizeof(err)) < 0 ||
        config_validate(&next, err, sizeof(err)) < 0) {
        log_error("reload: %s; keeping the running configuration", err);
        return;
    }
    if (next.log_level != cur->log_level) {
        cur->log_level = next.log_level;
        log_set_level(next.log_level);
        log_info("reload: log_level = %s", config_log_level_name(next.log_level));
    }
    if (next.max_clients != cur->max_clients) {
        cur->max_clients = next.max_clients;
        log_info("reload: max_clients = %d", next.max_clients);
    }
    if (next.max_clients_per_uid != cur->max_clients_per_uid) {
        cur->max_clients_per_uid = next.max_clients_per_uid;
        log_info("reload: max_clients_per_uid = %d", next.max_clients_per_uid);
    }
    if (next.attr_ttl != cur->attr_ttl) {
        cur->attr_ttl = next.attr_ttl;
        source_set_attr_ttl(r->src, next.attr_ttl);
        log_info("reload: attr_ttl = %g", next.attr_ttl);
    }
    if (next.dram_max_leased != cur->dram_max_leased) {
        cur->dram_max_leased = next.dram_max_leased;
        log_info("reload: [dram] max_leased_per_client = %llu",
                 (unsigned long long)next.dram_max_leased);
    }
    if (strcmp(next.dram_policy, cur->dram_policy)) {
        if (dram_set_policy(r->dram, next.dram_policy, err, sizeof(err)) < 0) {
            log_error("reload: %s", err);
        } else {
            snprintf(cur->dram_policy, sizeof(cur->dram_policy), "%s", next.dram_policy);
            log_info("reload: [dram] policy = %s", next.dram_policy);
        }
    }
    if (r->nvme && strcmp(next.nvme_policy, cur->nvme_policy)) {
        int rc = store_set_policy(r->nvme, next.nvme_policy);
        if (rc < 0) {
            log_error("reload: [nvme] policy %s: %s", next.nvme_policy, strerror(-rc));
        } else {
            snprintf(cur->nvme_policy, sizeof(cur->nvme_policy), "%s", next.nvme_policy);
            log_info("reload: [nvme] policy = %s", next.nvme_policy);
        }
    }
    if (next.max_inflight != cur->max_inflight) {
        cur->max_inflight = next.max_inflight;
        fetcher_set_max_inflight(r->fx, (unsigned)next.max_inflight);
        log_info("reload: [source] max_inflight = %d", next.max_inflight);
    }
    if (next.readahead_max != cur->readahead_max || next.hint_window != cur->hint_window ||
        next.hint_max_entries != cur->hint_max_entries) {
        cur->readahead_max = next.readahead_max;
        cur->hint_window = next.hint_window;
        cur->hint_max_entries = next.hint_max_entries;
        prefetcher_configure(r->pf, cur->readahead_max, cur->hint_window,
                             (uint64_t)cur->hint_max_entries);
        log_info("reload: [prefetch] readahead_max = %llu, hint_window = %llu, "
                 "hint_max_entries = %d", (unsigned long long)cur->readahead_max,
                 (unsigned long long)cur->hint_window, cur->hint_max_entries);
    }
    log_unapplied(cur, &next);
    log_info("reload: done");
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    log_info("signal %d: shutting down", (int)sig);
    event_base_loopbreak(arg);
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
    store *nvme = NULL;
    dram *d = NULL;
    struct event_base *base = NULL;
    struct event *sigterm = NULL, *sigint = NULL, *sighup = NULL;
    reload_ctx reload = { 0 };
    struct event *watchdog = NULL;  /* systemd WatchdogSec= keep-alive, see notify.h */
    workers *w = NULL;
    fetcher *fx = NULL;
    prefetcher *pf = NULL;
    warmup *wu = NULL;
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
        usage(stderr);
        return 2;
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
        store_config sc = {
            .path = cfg.nvme_path,
            .capacity = cfg.nvme_capacity,
            .inline_max = cfg.nvme_inline_max,
            .max_chunk = cfg.chunk_size,
            .policy = cfg.nvme_policy,
        };
        if (store_open(&sc, &nvme, err, sizeof(err)) < 0) {
            log_error("nvme tier: %s", err);
            goto fail;
        }
        {
            store_stats ss;
            store_get_stats(nvme, &ss);
            log_info("nvme tier %s: %llu chunks, %llu of %llu bytes", cfg.nvme_path,
                     (unsigned long long)ss.chunks, (unsigned long long)ss.used_bytes,
                     (unsigned long long)ss.capacity_bytes);
        }
    } else {
        log_info("nvme tier disabled ([nvme] path is empty)");
    }
    if (dram_new(cfg.dram_capacity, cfg.chunk_size, cfg.dram_policy, &d, err, sizeof(err)) < 0) {
        log_error("dram tier: %s", err);
        goto fail;
    }
    if (evthread_use_pthreads() < 0 || !(base = event_base_new())) {
        log_error("libevent initialisation failed");
        goto fail;
    }
    if (workers_start(base, cfg.io_threads, &w) < 0)
        goto fail;
    /* Write-behind pins its chunks' DRAM blocks until written: at most a
     * quarter of the tier, so that readers always find room. */
    if (fetcher_new(d, nvme, src, w, &stats,
                    cfg.dram_capacity / 4 < WRITEBACK_MAX ? cfg.dram_capacity / 4 : WRITEBACK_MAX,
                    (unsigned)cfg.max_inflight, &fx) < 0)
        goto fail;
    if (prefetcher_new(fx, d, src, w, &stats, &pf) < 0)
        goto fail;
    prefetcher_configure(pf, cfg.readahead_max, cfg.hint_window, (uint64_t)cfg.hint_max_entries);
    {
        char dir[PATH_MAX + 16];
        snprintf(dir, sizeof(dir), "%s/warmup", cfg.nvme_path);
        if (warmup_new(base, fx, nvme, src, &stats, cfg.chunk_size, nvme ? dir : NULL, &wu, err,
                       sizeof(err)) < 0) {
            log_error("%s", err);
            goto fail;
        }
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
        if (strncmp(metrics_address(met), "unix:", 5) == 0)
            log_info("metrics on %s (GET /metrics)", metrics_address(met));
        else
            log_info("metrics on http://%s/metrics", metrics_address(met));
    } else {
        log_info("metrics endpoint off ([metrics] listen is empty)");
    }
    {
        server_deps deps = {
            .base = base, .cfg = &cfg, .src = src, .fx = fx, .w = w,
            .dram = d, .nvme = nvme, .pf = pf, .wu = wu, .stats = &stats,
        };
        if (server_start(&deps, &srv, err, sizeof(err)) < 0) {
            log_error("%s", err);
            goto fail;
        }
    }
    sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    sigint = evsignal_new(base, SIGINT, on_signal, base);
    reload.src = src;
    reload.dram = d;
    reload.nvme = nvme;
    reload.fx = fx;
    reload.pf = pf;
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
            store_stats ss;
            store_get_stats(nvme, &ss);
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
    if (fx)
        fetcher_drain(fx);
    workers_stop(&w);
    server_free(&srv);
    warmup_free(&wu);
    prefetcher_free(&pf);
    fetcher_free(&fx);
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
    store_close(&nvme);
    source_free(&src);
    if (rc == 0)
        log_info("stopped");
    return rc;
}
