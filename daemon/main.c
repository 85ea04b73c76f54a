/*
 * main.c - granaryd: parse arguments and configuration, set the modules up
 * in order, run the event loop, and tear everything down in reverse on
 * SIGTERM or SIGINT.
 *
 * Order of set-up: config -> log -> source -> NVMe store (index rebuilt:
 * the cache comes back warm) -> DRAM tier -> event base -> workers ->
 * fetcher -> server (the socket appears last, when everything behind it is
 * ready).  Tear-down: server (socket removed, clients dropped) -> workers
 * (queued jobs finish, their completions run) -> fetcher -> DRAM -> store
 * (RocksDB closed) -> source.
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
#include "server.h"
#include "source.h"
#include "stats.h"
#include "store.h"
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
            "Runs in the foreground; logs to stderr.  SIGTERM or SIGINT stop it cleanly.\n");
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
    struct event *sigterm = NULL, *sigint = NULL;
    workers *w = NULL;
    fetcher *fx = NULL;
    server *srv = NULL;
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
                    &fx) < 0)
        goto fail;
    if (cfg.trace_file[0]) {
        trace = fopen(cfg.trace_file, "ae");
        if (!trace) {
            log_error("trace_file %s: %s", cfg.trace_file, strerror(errno));
            goto fail;
        }
        fetcher_set_trace(fx, trace);
        log_info("recording chunk lookups to %s", cfg.trace_file);
    }
    {
        server_deps deps = {
            .base = base, .cfg = &cfg, .src = src, .fx = fx, .w = w,
            .dram = d, .nvme = nvme, .stats = &stats,
        };
        if (server_start(&deps, &srv, err, sizeof(err)) < 0) {
            log_error("%s", err);
            goto fail;
        }
    }
    sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    sigint = evsignal_new(base, SIGINT, on_signal, base);
    if (!sigterm || !sigint || event_add(sigterm, NULL) < 0 || event_add(sigint, NULL) < 0)
        goto fail;
    log_info("serving %s on %s (%d roots, chunk %llu, dram %llu)", cfg.roots[0], cfg.socket,
             cfg.nroots, (unsigned long long)cfg.chunk_size,
             (unsigned long long)cfg.dram_capacity);
    event_base_dispatch(base);
    rc = 0;
fail:
    if (srv)
        server_shutdown(srv);
    workers_stop(&w);
    server_free(&srv);
    fetcher_free(&fx);
    if (trace)
        fclose(trace);
    if (sigterm)
        event_free(sigterm);
    if (sigint)
        event_free(sigint);
    if (base)
        event_base_free(base);
    dram_free(&d);
    store_close(&nvme);
    source_free(&src);
    if (rc == 0)
        log_info("stopped");
    return rc;
}
