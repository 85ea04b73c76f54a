/*
 * reload.h - SIGHUP: re-read the configuration and apply what can change
 * live.  Which keys those are is the key table's hook column (config.h,
 * config_hook), shown by `granaryd --describe-config` as RELOAD; this file
 * holds the one apply hook per kind of live key.
 *
 * Threads: the loop thread (the signal arrives as a libevent event).
 */
#ifndef GR_RELOAD_H
#define GR_RELOAD_H

#include "config.h"
#include "dram.h"
#include "sched.h"
#include "nvme.h"
#include "judge.h"
#include "prefetch.h"
#include "source.h"
#include "peer.h"
#include "dirahead.h"

typedef struct reload_ctx {
    const char *path;           /* the configuration file */
    gr_config *cfg;             /* the running configuration, updated in place */
    source *src;
    judge *jg;
    dram *dram;
    nvme_tier *nvme;            /* NULL without an NVMe tier */
    sched *sc;
    prefetcher *pf;
    peers *peers;               /* NULL without a peer cache */
    dirahead *dra;
} reload_ctx;

/*
 * Re-read r->path.  A file that does not parse or validate changes
 * nothing.  Otherwise every changed key with a hook is copied into
 * r->cfg and its hook runs (a hook that fails puts the old value back and
 * logs why); every other changed key is logged as taking effect after a
 * restart.  Each applied change is logged.
 */
void reload_config(reload_ctx *r);

/* The prefetcher's limits from a configuration (at start and on reload). */
void reload_prefetch_limits(const gr_config *cfg, prefetch_limits *lim);

#endif
