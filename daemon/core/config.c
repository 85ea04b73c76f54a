/*
 * config.c - granaryd's configuration keys, their INI parser, defaults,
 * validation, `--describe-config` output and the effective-config dump.
 *
 * Everything is driven by config_keys[] below: one row per key with its
 * section, name, type, limits, field in gr_config, default (as the text a
 * file would hold) and a one-line description.  Defaults are applied by
 * parsing the default text through the same setter as the file, so a default
 * that breaks its own limits fails the first config_defaults() call (assert)
 * and the config tests.  Adding a key is adding a row (and the field).
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config.h"
#include "ini.h"
#include "log.h"
#include "size.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

/* Upper bound of KT_SECONDS values: a bit over 31 years. */
#define CONFIG_SECONDS_MAX 1e9

/* Offending values are quoted in messages up to this many bytes. */
#define CONFIG_QUOTE_MAX 64

typedef enum {
    KT_PATH,     /* string that must fit the field; see flags */
    KT_SIZE,     /* config_parse_size(), min..max, optionally a power of two */
    KT_INT,      /* decimal int, min..max */
    KT_MODE,     /* octal permission bits, 0..max */
    KT_SECONDS,  /* double >= 0 */
    KT_LOGLEVEL, /* one of log_level_names[] */
    KT_CHOICE,   /* one of the row's choices[], stored as a string */
    KT_ROOTS,    /* colon-separated absolute paths into roots[]/nroots */
} config_type;

#define KF_EMPTY_OK 0x1 /* KT_PATH: "" is allowed (and means "off") */
#define KF_POW2     0x2 /* KT_SIZE: must be a power of two */

typedef struct config_key {
    const char *section;
    const char *name;
    config_type type;
    unsigned flags;             /* KF_* */
    size_t offset;              /* of the field in gr_config */
    size_t size;                /* of the field: bounds KT_PATH/KT_CHOICE */
    uint64_t min, max;          /* KT_SIZE, KT_INT, KT_MODE (max only) */
    const char *const *choices; /* KT_CHOICE: NULL-terminated */
    const char *def;            /* default, in file syntax */
    const char *desc;           /* one line for config_describe */
    config_hook hook;           /* what SIGHUP does with a change; omitted: CONFIG_RESTART */
} config_key;

static const char *const log_level_names[] = { "error", "warn", "info", "debug", NULL };
static const char *const access_checks[] = { "fd", "judge", "none", NULL };
static const char *const ckpt_priorities[] = { "background", "demand", NULL };
static const char *const peer_transports[] = { "tcp", "rdma", "auto", NULL };
static const char *const huge_pages_modes[] = { "auto", "hugetlb", "thp", "off", NULL };

/* Eviction policies each tier implements.  Add a name here when a tier
 * learns a new one; the parser, describe and dump follow. */
static const char *const dram_policies[] = { "lru", "lfu", "sieve", "s3fifo", "epoch", "auto", NULL };
static const char *const nvme_policies[] = { "lru", "lfu", "sieve", "s3fifo", "epoch", "auto", NULL };

#define FIELD(f) offsetof(gr_config, f), sizeof(((gr_config *)0)->f)

static const config_key config_keys[] = {
    { "daemon", "socket", KT_PATH, 0, FIELD(socket), 0, 0, NULL,
      "/run/granary/granary.sock", "Unix socket clients connect to (under 108 bytes)", CONFIG_RESTART },
    { "daemon", "socket_mode", KT_MODE, 0, FIELD(socket_mode), 0, 0777, NULL,
      "0660", "permission bits of the socket (octal)", CONFIG_RESTART },
    { "daemon", "io_threads", KT_INT, 0, FIELD(io_threads), 1, 256, NULL,
      "16", "threads doing blocking source reads and RocksDB calls", CONFIG_RESTART },
    { "daemon", "log_level", KT_LOGLEVEL, 0, FIELD(log_level), 0, 0, log_level_names,
      "info", "least severe level logged to stderr", CONFIG_HOOK_LOG_LEVEL },
    { "daemon", "max_clients", KT_INT, 0, FIELD(max_clients), 1, 65536, NULL,
      "1024", "client connections accepted at once", CONFIG_LIVE },
    { "daemon", "max_clients_per_uid", KT_INT, 0, FIELD(max_clients_per_uid), 1, 65536, NULL,
      "512", "connections one user may hold, so that one user cannot lock out the others", CONFIG_LIVE },
    { "daemon", "access_check", KT_CHOICE, 0, FIELD(access_check), 0, 0, access_checks,
      "fd", "fd: serve a file only to a client that passes its own read fd of it; "
      "judge: the daemon judges the peer's uid, groups, mode bits and ACLs itself (no client open); "
      "none: anyone who can open the socket reads everything (single-user nodes)", CONFIG_RESTART },
    { "daemon", "admin_group", KT_PATH, KF_EMPTY_OK, FIELD(admin_group), 0, 0, NULL,
      "granary-admin", "group allowed evict, invalidate, pin and unpin besides root; empty: root only", CONFIG_RESTART },
    { "daemon", "trace_file", KT_PATH, KF_EMPTY_OK, FIELD(trace_file), 0, 0, NULL,
      "", "append every chunk lookup to this file (bench/SIMULATE.md format); empty: off", CONFIG_RESTART },
    { "source", "roots", KT_ROOTS, 0, FIELD(roots), 0, CONFIG_MAX_ROOTS, NULL,
      "/mnt", "colon-separated absolute directories clients may read", CONFIG_RESTART },
    { "source", "chunk_size", KT_SIZE, KF_POW2, FIELD(chunk_size), 64 * KIB, 256 * MIB, NULL,
      "4M", "unit of caching and of source reads", CONFIG_RESTART },
    { "source", "attr_ttl", KT_SECONDS, 0, FIELD(attr_ttl), 0, 0, NULL,
      "1", "seconds a file's attributes are trusted before re-checking", CONFIG_HOOK_ATTR_TTL },
    { "source", "attr_cache_max", KT_INT, 0, FIELD(attr_cache_max), 1024, 1 << 30, NULL,
      "1048576", "files whose attributes are kept in memory (about 300 bytes each); past it the "
      "oldest are forgotten", CONFIG_RESTART },
    { "source", "fd_cache", KT_INT, 0, FIELD(fd_cache), 0, 1 << 20, NULL,
      "4096", "source files held open from their OPEN to their chunk reads (one open per file, "
      "not one per chunk); 0 opens per chunk read", CONFIG_RESTART },
    { "source", "max_inflight", KT_INT, 0, FIELD(max_inflight), 1, 4096, NULL,
      "16", "source reads at once (demand first; prefetch gets at most three quarters)", CONFIG_HOOK_MAX_INFLIGHT },
    { "prefetch", "readahead_max", KT_SIZE, 0, FIELD(readahead_max), 0, 4096 * MIB, NULL,
      "64M", "largest read-ahead window of a sequential reader; 0 disables read-ahead", CONFIG_HOOK_PREFETCH },
    { "prefetch", "hint_window", KT_SIZE, 0, FIELD(hint_window), 0, UINT64_MAX, NULL,
      "1G", "bytes fetched ahead of a job's hint cursor (at most half of [dram] capacity)", CONFIG_HOOK_PREFETCH },
    { "prefetch", "dir_readahead", KT_INT, 0, FIELD(dir_readahead), 0, 1024, NULL,
      "16", "files hinted ahead of a connection that opens a directory's files in name order "
      "(every n-th name, for one of n readers); 0 disables it", CONFIG_HOOK_PREFETCH },
    { "prefetch", "hint_max_entries", KT_INT, 0, FIELD(hint_max_entries), 1, 1 << 30, NULL,
      "4194304", "chunks one user's hint lists may name together; more is refused (E2BIG)", CONFIG_HOOK_PREFETCH },
    { "prefetch", "hint_memory", KT_SIZE, 0, FIELD(hint_memory), MIB, UINT64_MAX, NULL,
      "64M", "memory one user's hint lists may hold (the ranges and their paths); more is refused (E2BIG)", CONFIG_HOOK_PREFETCH },
    { "prefetch", "hint_memory_total", KT_SIZE, 0, FIELD(hint_memory_total), MIB, UINT64_MAX, NULL,
      "256M", "memory all users' hint lists may hold together", CONFIG_HOOK_PREFETCH },
    { "dram", "capacity", KT_SIZE, 0, FIELD(dram_capacity), MIB, UINT64_MAX, NULL,
      "1G", "memory for cached chunks (at least one chunk)", CONFIG_RESTART },
    { "dram", "huge_pages", KT_CHOICE, 0, FIELD(dram_huge_pages), 0, 0, huge_pages_modes,
      "auto", "pages of the shared memory: auto (hugetlb where vm.nr_hugepages has them, else "
      "shmem transparent huge pages where allowed, else 4 KiB), hugetlb, thp, off", CONFIG_RESTART },
    { "dram", "policy", KT_CHOICE, 0, FIELD(dram_policy), 0, 0, dram_policies,
      "lru", "eviction policy of the DRAM tier; auto: chosen from the jobs' IO-pattern analysis "
      "(starts as lru)", CONFIG_HOOK_DRAM_POLICY },
    { "dram", "max_leased_per_client", KT_SIZE, 0, FIELD(dram_max_leased), 0, UINT64_MAX, NULL,
      "256M", "shared-memory bytes one client may hold leased; past it, bytes are copied", CONFIG_LIVE },
    { "dram", "client_lease_cache", KT_SIZE, 0, FIELD(dram_client_lease_cache), 0, UINT64_MAX, NULL,
      "32M", "leased bytes a client may keep to serve its later reads of them without asking "
      "(at most half of max_leased_per_client); 0 turns the clients' lease caches off", CONFIG_LIVE },
    { "dram", "client_lease_ttl", KT_SECONDS, 0, FIELD(dram_client_lease_ttl), 0, 0, NULL,
      "5", "seconds a client may serve reads from one kept lease", CONFIG_LIVE },
    { "nvme", "path", KT_PATH, KF_EMPTY_OK, FIELD(nvme_path), 0, 0, NULL,
      "/var/cache/granary", "directory of the NVMe tier; empty disables the tier", CONFIG_RESTART },
    { "nvme", "capacity", KT_SIZE, 0, FIELD(nvme_capacity), 0, UINT64_MAX, NULL,
      "10G", "disk space the NVMe tier may use (at least 16M when enabled)", CONFIG_RESTART },
    { "nvme", "policy", KT_CHOICE, 0, FIELD(nvme_policy), 0, 0, nvme_policies,
      "lru", "eviction policy of the NVMe tier; auto: chosen from the jobs' IO-pattern analysis "
      "(starts as lru)", CONFIG_HOOK_NVME_POLICY },
    { "nvme", "inline_max", KT_SIZE, 0, FIELD(nvme_inline_max), 0, MIB, NULL,
      "64K", "chunks up to this size are stored inside RocksDB", CONFIG_RESTART },
    { "dataset", "max_entries", KT_INT, 0, FIELD(dataset_max_entries), 16, 1 << 30, NULL,
      "16777216", "files and directories one registered dataset may hold (a scan holds about 100 "
      "bytes each in memory until its manifest is written); a bigger tree fails its scan", CONFIG_RESTART },
    { "checkpoint", "capacity", KT_SIZE, 0, FIELD(ckpt_capacity), 0, UINT64_MAX, NULL,
      "16G", "bytes of checkpoints staged under [nvme] path/checkpoints and not yet published; a "
      "checkpoint that does not fit is refused (ENOSPC); 0 turns checkpoints off", CONFIG_RESTART },
    { "checkpoint", "memory", KT_SIZE, 0, FIELD(ckpt_memory), 0, UINT64_MAX, NULL,
      "4G", "bytes of checkpoints acknowledged early, while the daemon holds only the client's sealed "
      "memfd (a put that asks for \"ack staged\"), at most; a put beyond it is acknowledged once "
      "local; 0: never early", CONFIG_RESTART },
    { "checkpoint", "drain_bandwidth", KT_SIZE, 0, FIELD(ckpt_bandwidth), 0, UINT64_MAX, NULL,
      "0", "bytes per second checkpoint drains write to the DFS (replica and destination), all "
      "drains together; 0: unlimited", CONFIG_RESTART },
    { "checkpoint", "drains", KT_INT, 0, FIELD(ckpt_drains), 1, 64, NULL,
      "1", "checkpoints drained at once, at most (per destination one at a time, oldest first)",
      CONFIG_RESTART },
    { "checkpoint", "drain_priority", KT_CHOICE, 0, FIELD(ckpt_priority), 0, 0, ckpt_priorities,
      "background", "I/O queue of the drains: background (behind every read) or demand", CONFIG_RESTART },
    { "checkpoint", "replica_dir", KT_PATH, KF_EMPTY_OK, FIELD(ckpt_replica_dir), 0, 0, NULL,
      "", "directory (another failure domain: a second DFS) that gets a copy of each checkpoint "
      "before it is published; a checkpoint is durable once replicated; empty: none", CONFIG_RESTART },
    { "metrics", "listen", KT_PATH, KF_EMPTY_OK, FIELD(metrics_listen), 0, 0, NULL,
      "127.0.0.1:9464", "Prometheus /metrics endpoint: HOST:PORT or unix:/PATH; empty: off", CONFIG_RESTART },
    { "peer", "listen", KT_PATH, KF_EMPTY_OK, FIELD(peer_listen), 0, 0, NULL,
      "", "this node's address for the peer cache, HOST:PORT (one of nodes); empty: no peer cache",
      CONFIG_RESTART },
    { "peer", "nodes", KT_PATH, KF_EMPTY_OK, FIELD(peer_nodes), 0, 0, NULL,
      "", "the peer cache's members, this node included: HOST[:PORT],... with Slurm-style ranges "
      "(gpu[001-016,20]:7070); the port defaults to listen's", CONFIG_LIVE },
    { "peer", "nodes_file", KT_PATH, KF_EMPTY_OK, FIELD(peer_nodes_file), 0, 0, NULL,
      "", "or a hostfile of the members, one HOST[:PORT] per line ('#' comments), read again on "
      "every reload; empty: nodes only", CONFIG_LIVE },
    { "peer", "key_file", KT_PATH, KF_EMPTY_OK, FIELD(peer_key_file), 0, 0, NULL,
      "", "shared secret (at least 16 bytes) every member holds; owned by root, mode 0600 or "
      "0400; required with listen", CONFIG_RESTART },
    { "peer", "transport", KT_CHOICE, 0, FIELD(peer_transport), 0, 0, peer_transports,
      "auto", "how chunks move between peers: tcp, rdma (RDMA READ, libibverbs), auto (rdma "
      "where a device exists, else tcp)", CONFIG_RESTART },
    { "peer", "timeout", KT_SECONDS, 0, FIELD(peer_timeout), 0, 0, NULL,
      "5", "seconds a peer may take to answer for one chunk; then the second owner or the "
      "source, and the peer is skipped for a back-off (1 s doubling to 30 s)", CONFIG_RESTART },
    { "peer", "connections", KT_INT, 0, FIELD(peer_connections), 1, 256, NULL,
      "8", "connections kept open to each peer (its concurrent requests from this node)",
      CONFIG_RESTART },
};

#define NKEYS (sizeof(config_keys) / sizeof(config_keys[0]))

/* ---- small helpers ----------------------------------------------------- */


/* printf arguments for "%.*s%s": s cut to CONFIG_QUOTE_MAX bytes plus "...",
 * so a hostile 10,000-byte value does not flood the log. */
#define QV(s) (strlen(s) > CONFIG_QUOTE_MAX ? CONFIG_QUOTE_MAX : (int)strlen(s)), (s), \
              (strlen(s) > CONFIG_QUOTE_MAX ? "..." : "")

static void *field(gr_config *c, const config_key *k)
{
    return (char *)c + k->offset;
}

static const void *cfield(const gr_config *c, const config_key *k)
{
    return (const char *)c + k->offset;
}

static int is_blank(int ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* Shortest "%g" form that reads back as the same double. */
static void seconds_format(double v, char *buf, size_t len)
{
    snprintf(buf, len, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, len, "%.17g", v);
}

static const char *choice_find(const char *const *choices, const char *s)
{
    for (; *choices; choices++)
        if (strcasecmp(*choices, s) == 0)
            return *choices;
    return NULL;
}

/* "a|b|c" into buf. */
static void choices_format(const char *const *choices, char *buf, size_t len)
{
    size_t n = 0;

    buf[0] = '\0';
    for (; *choices && n < len; choices++) {
        int w = snprintf(buf + n, len - n, "%s%s", n ? "|" : "", *choices);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

/* ---- sizes and numbers ------------------------------------------------- */

/*
 * Parse a size (common/size.h syntax).  Returns 0 and *out, or -EINVAL
 * (*out untouched).
 */
int config_parse_size(const char *s, uint64_t *out)
{
    return gr__size_parse(s, out) < 0 ? -EINVAL : 0;
}

/* Name of a log level ("?" for values outside the enum). */
const char *config_log_level_name(log_level l)
{
    if ((unsigned)l >= sizeof(log_level_names) / sizeof(log_level_names[0]) - 1)
        return "?";
    return log_level_names[l];
}

/* Log level from its name, any case.  0, or -EINVAL (*out untouched). */
int config_log_level_parse(const char *s, log_level *out)
{
    for (int i = 0; log_level_names[i]; i++) {
        if (strcasecmp(log_level_names[i], s) == 0) {
            *out = (log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

/* ---- the setters, one per type ------------------------------------------ */

/* Copy s into a char[size] field, zero-filling the rest so that two configs
 * holding the same values compare equal with memcmp. */
static void str_store(char *dst, size_t size, const char *s)
{
    memset(dst, 0, size);
    memcpy(dst, s, strlen(s));
}

static int has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

/* Normalise one root (s, n bytes) into out[PATH_MAX]: absolute, runs of '/'
 * collapsed, no trailing '/' except for "/" itself. */
static int root_normalise(const config_key *k, const char *s, size_t n, char *out,
                          char *err, size_t errlen)
{
    size_t o = 0;

    if (n == 0) {
        err_set(err, errlen, "[%s] %s: empty path in the list", k->section, k->name);
        return -EINVAL;
    }
    if (s[0] != '/') {
        err_set(err, errlen, "[%s] %s: \"%.*s%s\" is not an absolute path", k->section, k->name,
               n > CONFIG_QUOTE_MAX ? CONFIG_QUOTE_MAX : (int)n, s,
               n > CONFIG_QUOTE_MAX ? "..." : "");
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '/' && o > 0 && out[o - 1] == '/')
            continue;
        if (o == PATH_MAX - 1) {
            err_set(err, errlen, "[%s] %s: a path is longer than %d bytes", k->section,
                   k->name, PATH_MAX - 1);
            return -EINVAL;
        }
        out[o++] = s[i];
    }
    if (o > 1 && out[o - 1] == '/')
        o--;
    out[o] = '\0';
    return 0;
}

/* Roots are checked completely before the field changes, so a bad list
 * leaves the old one in place. */
static int set_roots(gr_config *c, const config_key *k, const char *v, char *err, size_t errlen)
{
    char norm[PATH_MAX];
    int n = 0;

    if (!*v) {
        err_set(err, errlen, "[%s] %s: at least one root directory is needed", k->section,
               k->name);
        return -EINVAL;
    }
    for (int pass = 0; pass < 2; pass++) {
        const char *p = v;

        if (pass == 1) {
            memset(c->roots, 0, sizeof(c->roots));
            c->nroots = n;
            n = 0;
        }
        for (;;) {
            const char *e = strchr(p, ':');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            int rc = root_normalise(k, p, len, norm, err, errlen);

            if (rc < 0)
                return rc;
            if (pass == 0) {
                if (n == CONFIG_MAX_ROOTS) {
                    err_set(err, errlen, "[%s] %s: more than %d roots", k->section, k->name,
                           CONFIG_MAX_ROOTS);
                    return -EINVAL;
                }
                for (const char *q = v; q < p; q += strcspn(q, ":") + 1) {
                    char prev[PATH_MAX];
                    if (root_normalise(k, q, strcspn(q, ":"), prev, NULL, 0) == 0 &&
                        strcmp(prev, norm) == 0) {
                        err_set(err, errlen, "[%s] %s: \"%s\" is listed twice", k->section,
                               k->name, norm);
                        return -EINVAL;
                    }
                }
            } else {
                memcpy(c->roots[n], norm, strlen(norm) + 1);
            }
            n++;
            if (!e)
                break;
            p = e + 1;
        }
    }
    return 0;
}

static int key_set(gr_config *c, const config_key *k, const char *v, char *err, size_t errlen)
{
    char lo[32], hi[32];
    void *f = field(c, k);

    switch (k->type) {
    case KT_PATH:
        if (!*v && !(k->flags & KF_EMPTY_OK)) {
            err_set(err, errlen, "[%s] %s: must not be empty", k->section, k->name);
            return -EINVAL;
        }
        if (strlen(v) >= k->size) {
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" is longer than %zu bytes", k->section,
                   k->name, QV(v), k->size - 1);
            return -EINVAL;
        }
        if (has_control(v)) {
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" contains a control character",
                   k->section, k->name, QV(v));
            return -EINVAL;
        }
        str_store(f, k->size, v);
        return 0;

    case KT_SIZE: {
        uint64_t x;
        int rc = gr__size_parse(v, &x);

        if (rc == -ERANGE) {
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" is too large", k->section, k->name, QV(v));
            return -EINVAL;
        }
        if (rc < 0) {
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" is not a size (digits with an optional "
                   "K, M, G or T suffix)", k->section, k->name, QV(v));
            return -EINVAL;
        }
        gr__size_format(k->min, lo, sizeof(lo));
        gr__size_format(k->max, hi, sizeof(hi));
        if ((k->flags & KF_POW2) && (x < k->min || x > k->max || (x & (x - 1)) != 0)) {
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" is not a power of two between %s and %s",
                   k->section, k->name, QV(v), lo, hi);
            return -EINVAL;
        }
        if (x < k->min || x > k->max) {
            if (k->max == UINT64_MAX)
                err_set(err, errlen, "[%s] %s: \"%.*s%s\" is below the minimum %s", k->section,
                       k->name, QV(v), lo);
            else
                err_set(err, errlen, "[%s] %s: \"%.*s%s\" is not between %s and %s", k->section,
                       k->name, QV(v), lo, hi);
            return -EINVAL;
        }
        *(uint64_t *)f = x;
        return 0;
    }

    case KT_INT: {
        char *end;
        long long x;

        errno = 0;
        x = strtoll(v, &end, 10);
        if (!(isdigit((unsigned char)v[0]) || (v[0] == '-' && isdigit((unsigned char)v[1]))) ||
            *end != '\0' || errno != 0 || x < (long long)k->min || x > (long long)k->max) {
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" is not an integer between %llu and %llu",
                   k->section, k->name, QV(v), (unsigned long long)k->min,
                   (unsigned long long)k->max);
            return -EINVAL;
        }
        *(int *)f = (int)x;
        return 0;
    }

    case KT_MODE: {
        unsigned long x = 0;
        const char *p = v;

        for (; *p >= '0' && *p <= '7' && x <= k->max; p++)
            x = x * 8 + (unsigned)(*p - '0');
        if (p == v || *p != '\0' || x > k->max) {
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" is not an octal mode between 0 and %04llo",
                   k->section, k->name, QV(v), (unsigned long long)k->max);
            return -EINVAL;
        }
        *(unsigned *)f = (unsigned)x;
        return 0;
    }

    case KT_SECONDS: {
        char *end;
        double x;

        errno = 0;
        x = strtod(v, &end);
        /* Plain decimal only (strtod would also take hex, "inf" and
         * "nan"), and capped so that converting to a timespec in
         * nanoseconds cannot overflow. */
        if (!(isdigit((unsigned char)v[0]) || v[0] == '.') ||
            v[strspn(v, "0123456789.eE+-")] != '\0' || *end != '\0' || errno != 0 ||
            !(x >= 0 && x <= CONFIG_SECONDS_MAX)) {
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" is not a number of seconds between 0 "
                   "and %.0f (e.g. 1 or 0.5)", k->section, k->name, QV(v), CONFIG_SECONDS_MAX);
            return -EINVAL;
        }
        *(double *)f = x;
        return 0;
    }

    case KT_LOGLEVEL:
        if (config_log_level_parse(v, f) < 0) {
            choices_format(k->choices, lo, sizeof(lo));
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" is not one of %s", k->section, k->name,
                   QV(v), lo);
            return -EINVAL;
        }
        return 0;

    case KT_CHOICE: {
        const char *name = choice_find(k->choices, v);

        if (!name) {
            choices_format(k->choices, lo, sizeof(lo));
            err_set(err, errlen, "[%s] %s: \"%.*s%s\" is not one of %s", k->section, k->name,
                   QV(v), lo);
            return -EINVAL;
        }
        assert(strlen(name) < k->size);
        str_store(f, k->size, name);
        return 0;
    }

    case KT_ROOTS:
        return set_roots(c, k, v, err, errlen);
    }
    assert(0);
    return -EINVAL;
}

/* The value of key k in c, in file syntax (unquoted), into buf. */
static void key_format(const gr_config *c, const config_key *k, char *buf, size_t len)
{
    const void *f = cfield(c, k);

    switch (k->type) {
    case KT_PATH:
    case KT_CHOICE:
        snprintf(buf, len, "%.*s", (int)k->size, (const char *)f);
        break;
    case KT_SIZE:
        gr__size_format(*(const uint64_t *)f, buf, len);
        break;
    case KT_INT:
        snprintf(buf, len, "%d", *(const int *)f);
        break;
    case KT_MODE:
        snprintf(buf, len, "%04o", *(const unsigned *)f);
        break;
    case KT_SECONDS:
        seconds_format(*(const double *)f, buf, len);
        break;
    case KT_LOGLEVEL:
        snprintf(buf, len, "%s", config_log_level_name(*(const log_level *)f));
        break;
    case KT_ROOTS: {
        size_t n = 0;

        buf[0] = '\0';
        for (int i = 0; i < c->nroots && i < CONFIG_MAX_ROOTS && n < len; i++) {
            int w = snprintf(buf + n, len - n, "%s%.*s", i ? ":" : "", PATH_MAX, c->roots[i]);
            if (w < 0)
                break;
            n += (size_t)w;
        }
        break;
    }
    }
}

/* The type column of config_describe: "int 1..256", "size 64K..256M, 2^n". */
static void type_format(const config_key *k, char *buf, size_t len)
{
    char lo[24], hi[24], ch[64];

    gr__size_format(k->min, lo, sizeof(lo));
    gr__size_format(k->max, hi, sizeof(hi));
    switch (k->type) {
    case KT_PATH:
        snprintf(buf, len, "path");
        break;
    case KT_SIZE:
        if (k->flags & KF_POW2)
            snprintf(buf, len, "size 2^n %s..%s", lo, hi);
        else if (k->max != UINT64_MAX)
            snprintf(buf, len, "size %s..%s", lo, hi);
        else if (k->min)
            snprintf(buf, len, "size >= %s", lo);
        else
            snprintf(buf, len, "size");
        break;
    case KT_INT:
        snprintf(buf, len, "int %llu..%llu", (unsigned long long)k->min,
                 (unsigned long long)k->max);
        break;
    case KT_MODE:
        snprintf(buf, len, "octal mode");
        break;
    case KT_SECONDS:
        snprintf(buf, len, "seconds 0..%.0f", CONFIG_SECONDS_MAX);
        break;
    case KT_LOGLEVEL:
    case KT_CHOICE:
        choices_format(k->choices, ch, sizeof(ch));
        snprintf(buf, len, "enum %s", ch);
        break;
    case KT_ROOTS:
        snprintf(buf, len, "path list a:b, <= %llu", (unsigned long long)k->max);
        break;
    }
}

static const config_key *key_find(const char *section, const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(config_keys[i].section, section) == 0 && strcmp(config_keys[i].name, name) == 0)
            return &config_keys[i];
    return NULL;
}

static int section_known(const char *section)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(config_keys[i].section, section) == 0)
            return 1;
    return 0;
}

/* ---- public API --------------------------------------------------------- */

/* Every default goes through its key's setter; a default that fails its own
 * checks is a bug in config_keys[], caught by assert and by check_config. */
size_t config_nkeys(void)
{
    return NKEYS;
}

const char *config_key_section(size_t i)
{
    return config_keys[i].section;
}

const char *config_key_name(size_t i)
{
    return config_keys[i].name;
}

config_hook config_key_hook(size_t i)
{
    return config_keys[i].hook;
}

/* Fields are compared and copied as bytes: str_store zero-fills strings,
 * so equal values are equal bytes.  (The roots' count lives beside the
 * roots and goes with them.) */
int config_key_differs(const gr_config *a, const gr_config *b, size_t i)
{
    const config_key *k = &config_keys[i];

    return memcmp(cfield(a, k), cfield(b, k), k->size) != 0 ||
           (k->type == KT_ROOTS && a->nroots != b->nroots);
}

void config_key_copy(gr_config *dst, const gr_config *src, size_t i)
{
    const config_key *k = &config_keys[i];

    memcpy(field(dst, k), cfield(src, k), k->size);
    if (k->type == KT_ROOTS)
        dst->nroots = src->nroots;
}

void config_key_value(const gr_config *c, size_t i, char *buf, size_t len)
{
    key_format(c, &config_keys[i], buf, len);
}

void config_defaults(gr_config *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < NKEYS; i++) {
        int rc = key_set(c, &config_keys[i], config_keys[i].def, NULL, 0);
        assert(rc == 0);
        (void)rc;
    }
}

/* Set one key from its file form.  0, -ENOENT (unknown section or key) or
 * -EINVAL, with a message in err.  On error *c is unchanged. */
int config_set(gr_config *c, const char *section, const char *key, const char *value,
               char *err, size_t errlen)
{
    const config_key *k;

    if (!section_known(section)) {
        err_set(err, errlen, "unknown section [%.*s%s]", QV(section));
        return -ENOENT;
    }
    k = key_find(section, key);
    if (!k) {
        err_set(err, errlen, "unknown key \"%.*s%s\" in [%s]", QV(key), section);
        return -ENOENT;
    }
    return key_set(c, k, value, err, errlen);
}

/* gr__ini_cb: sections must be known, keys are set as config_set does. */
static int parse_cb(void *arg, const char *section, const char *key, const char *value,
                    char *msg, size_t msglen)
{
    gr_config *c = arg;

    if (!key) {
        if (!section_known(section)) {
            err_set(msg, msglen, "unknown section [%.*s%s]", QV(section));
            return -EINVAL;
        }
        return 0;
    }
    return config_set(c, section, key, value, msg, msglen) < 0 ? -EINVAL : 0;
}

/* The format is common/ini.h's, read by the one reader libgranary uses
 * too, so daemon and clients can never disagree about a file. */
int config_parse(gr_config *c, const char *text, size_t len, const char *name,
                 char *err, size_t errlen)
{
    return gr__ini_parse(text, len, name, parse_cb, c, err, errlen);
}

int config_load(gr_config *c, const char *path, char *err, size_t errlen)
{
    return gr__ini_load(path, parse_cb, c, err, errlen);
}

/* Checks that span keys; single values were checked when they were set. */
int config_validate(const gr_config *c, char *err, size_t errlen)
{
    char a[32], b[32];

    if (c->nroots < 1 || c->nroots > CONFIG_MAX_ROOTS) {
        err_set(err, errlen, "[source] roots: at least one root directory is needed");
        return -EINVAL;
    }
    if (c->dram_capacity < c->chunk_size) {
        gr__size_format(c->dram_capacity, a, sizeof(a));
        gr__size_format(c->chunk_size, b, sizeof(b));
        err_set(err, errlen, "[dram] capacity (%s) is smaller than [source] chunk_size (%s)", a, b);
        return -EINVAL;
    }
    if (c->peer_listen[0] && !c->peer_key_file[0]) {
        err_set(err, errlen, "[peer] listen is set but key_file is not: peers must authenticate");
        return -EINVAL;
    }
    if (c->peer_listen[0] && !c->peer_nodes[0] && !c->peer_nodes_file[0]) {
        err_set(err, errlen, "[peer] listen is set but neither nodes nor nodes_file is");
        return -EINVAL;
    }
    if (c->nvme_path[0] && c->nvme_capacity < 16 * MIB) {
        gr__size_format(c->nvme_capacity, a, sizeof(a));
        err_set(err, errlen, "[nvme] capacity (%s) is below 16M; set path = \"\" to disable "
               "the NVMe tier", a);
        return -EINVAL;
    }
    return 0;
}

void config_describe(FILE *out)
{
    char name[64], type[128];
    int wname = (int)strlen("KEY"), wtype = (int)strlen("TYPE"), wdef = (int)strlen("DEFAULT");

    for (size_t i = 0; i < NKEYS; i++) {
        const config_key *k = &config_keys[i];
        int n = snprintf(name, sizeof(name), "%s.%s", k->section, k->name);
        int d = *k->def ? (int)strlen(k->def) : 2;

        type_format(k, type, sizeof(type));
        wname = n > wname ? n : wname;
        wtype = (int)strlen(type) > wtype ? (int)strlen(type) : wtype;
        wdef = d > wdef ? d : wdef;
    }
    /* RELOAD: "live" keys apply on SIGHUP, "restart" ones need a restart
     * (the key table's hook: the one place that says which). */
    fprintf(out, "%-*s  %-*s  %-*s  %-7s  %s\n", wname, "KEY", wtype, "TYPE", wdef, "DEFAULT",
            "RELOAD", "DESCRIPTION");
    for (size_t i = 0; i < NKEYS; i++) {
        const config_key *k = &config_keys[i];

        snprintf(name, sizeof(name), "%s.%s", k->section, k->name);
        type_format(k, type, sizeof(type));
        fprintf(out, "%-*s  %-*s  %-*s  %-7s  %s\n", wname, name, wtype, type, wdef,
                *k->def ? k->def : "\"\"", k->hook == CONFIG_RESTART ? "restart" : "live",
                k->desc);
    }
}

/* A value needs quotes when bare text would not read back the same. */
static int needs_quotes(const char *v)
{
    if (!*v || is_blank((unsigned char)v[0]) || is_blank((unsigned char)v[strlen(v) - 1]) ||
        v[0] == '"')
        return 1;
    for (const char *p = v; *p; p++)
        if (*p == '#' || *p == ';')
            return 1;
    return 0;
}

/* Output reads back through config_parse to the same values. */
void config_dump(const gr_config *c, FILE *out)
{
    /* Big enough for CONFIG_MAX_ROOTS full-length roots and their colons. */
    static const size_t vlen = CONFIG_MAX_ROOTS * PATH_MAX + 16;
    const char *section = NULL;
    char *v = malloc(vlen);

    if (!v) {
        fprintf(out, "# out of memory\n");
        return;
    }
    fprintf(out, "# granaryd effective configuration\n");
    for (size_t i = 0; i < NKEYS; i++) {
        const config_key *k = &config_keys[i];

        if (!section || strcmp(section, k->section) != 0) {
            fprintf(out, "%s[%s]\n", section ? "\n" : "", k->section);
            section = k->section;
        }
        key_format(c, k, v, vlen);
        if (!needs_quotes(v)) {
            fprintf(out, "%s = %s\n", k->name, v);
            continue;
        }
        fprintf(out, "%s = \"", k->name);
        for (const char *p = v; *p; p++) {
            if (*p == '"' || *p == '\\')
                fputc('\\', out);
            fputc(*p, out);
        }
        fputs("\"\n", out);
    }
    free(v);
}
