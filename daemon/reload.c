/*
 * reload.c - see reload.h.  A new kind of live key is a config_hook value,
 * its column in the key table, and one function in hooks[] below.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "reload.h"

/* Apply the new value already copied into r->cfg.  0, or -errno with a
 * reason in err (the caller restores the old value). */
typedef int (*reload_hook)(reload_ctx *r, char *err, size_t errlen);

static int hook_log_level(reload_ctx *r, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    log_set_level(r->cfg->log_level);
    return 0;
}

static int hook_attr_ttl(reload_ctx *r, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    source_set_attr_ttl(r->src, r->cfg->attr_ttl);
    judge_set_ttl(r->jg, r->cfg->attr_ttl);
    return 0;
}

static int hook_max_inflight(reload_ctx *r, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    sched_set_max(r->sc, (unsigned)r->cfg->max_inflight);
    return 0;
}

static int hook_prefetch(reload_ctx *r, char *err, size_t errlen)
{
    prefetch_limits lim;

    (void)err;
    (void)errlen;
    reload_prefetch_limits(r->cfg, &lim);
    prefetcher_configure(r->pf, &lim);
    dirahead_set_files(r->dra, (unsigned)r->cfg->dir_readahead);
    return 0;
}

void reload_prefetch_limits(const gr_config *cfg, prefetch_limits *lim)
{
    lim->readahead_max = cfg->readahead_max;
    lim->hint_window = cfg->hint_window;
    lim->hint_max_entries = (uint64_t)cfg->hint_max_entries;
    lim->hint_memory = cfg->hint_memory;
    lim->hint_memory_total = cfg->hint_memory_total;
    lim->trust_all = strcmp(cfg->access_check, "none") == 0;
    lim->judge_final = strcmp(cfg->access_check, "judge") == 0;
}

/* Every chunk and pin is carried over, in the old policy's eviction order. */
static int hook_dram_policy(reload_ctx *r, char *err, size_t errlen)
{
    if (!strcmp(r->cfg->dram_policy, "auto"))
        return 0;               /* the auto controller (serve/auto.c) decides from now on */
    return dram_set_policy(r->dram, r->cfg->dram_policy, err, errlen);
}

static int hook_nvme_policy(reload_ctx *r, char *err, size_t errlen)
{
    int rc;

    if (!r->nvme || !strcmp(r->cfg->nvme_policy, "auto"))
        return 0;
    rc = nvme_set_policy(r->nvme, r->cfg->nvme_policy);
    if (rc < 0)
        snprintf(err, errlen, "%s", strerror(-rc));
    return rc;
}

static const reload_hook hooks[CONFIG_NHOOKS] = {
    [CONFIG_HOOK_LOG_LEVEL] = hook_log_level,
    [CONFIG_HOOK_ATTR_TTL] = hook_attr_ttl,
    [CONFIG_HOOK_MAX_INFLIGHT] = hook_max_inflight,
    [CONFIG_HOOK_PREFETCH] = hook_prefetch,
    [CONFIG_HOOK_DRAM_POLICY] = hook_dram_policy,
    [CONFIG_HOOK_NVME_POLICY] = hook_nvme_policy,
};

void reload_config(reload_ctx *r)
{
    static char oldv[CONFIG_MAX_ROOTS * PATH_MAX + 16], newv[CONFIG_MAX_ROOTS * PATH_MAX + 16];
    gr_config next, old = *r->cfg;
    char err[512];

    config_defaults(&next);
    if (config_load(&next, r->path, err, sizeof(err)) < 0 ||
        config_validate(&next, err, sizeof(err)) < 0) {
        log_error("reload: %s; keeping the running configuration", err);
        return;
    }
    for (size_t i = 0; i < config_nkeys(); i++) {
        config_hook h = config_key_hook(i);

        if (!config_key_differs(r->cfg, &next, i))
            continue;
        config_key_value(&next, i, newv, sizeof(newv));
        if (h == CONFIG_RESTART) {
            log_warn("reload: [%s] %s = %s: takes effect after a restart", config_key_section(i),
                     config_key_name(i), newv);
            continue;
        }
        config_key_copy(r->cfg, &next, i);
        if (h != CONFIG_LIVE && hooks[h] && hooks[h](r, err, sizeof(err)) < 0) {
            config_key_value(&old, i, oldv, sizeof(oldv));
            config_key_copy(r->cfg, &old, i);
            log_error("reload: [%s] %s = %s: %s; keeping %s", config_key_section(i),
                      config_key_name(i), newv, err, oldv);
            continue;
        }
        log_info("reload: [%s] %s = %s", config_key_section(i), config_key_name(i), newv);
    }
    /* The peer cache's members: nodes_file is read again even when its
     * name did not change (a job's prolog rewrites it). */
    if (r->peers)
        (void)peers_reload(r->peers, r->cfg);
    log_info("reload: done");
}
