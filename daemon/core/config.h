/*
 * config.h - granaryd's configuration: one table of keys drives parsing,
 * validation, defaults and `granaryd --describe-config`.
 *
 * The file format is INI: "[section]" lines, "key = value" lines, and
 * comments starting with '#' or ';' at the start of a line (after optional
 * blanks).  A '#' or ';' preceded by whitespace inside a value also starts a
 * comment, so "chunk_size = 4M   # note" means "4M".  Lines may be of any
 * length.  Unknown sections or keys, malformed values and lines that are
 * neither are errors reported as "FILE:LINE: message".
 *
 * Sizes take an optional K/M/G/T suffix (powers of 1024, case-insensitive,
 * an optional trailing 'B' or 'iB' is accepted: "4M", "4MiB", "4096").
 */
#ifndef GR_CONFIG_H
#define GR_CONFIG_H

#include <stdint.h>
#include <stdio.h>
#include <limits.h>

#define CONFIG_MAX_ROOTS 16

typedef enum { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG } log_level;

typedef struct gr_config {
    /* [daemon] */
    char socket[108];          /* Unix socket path (sun_path limit) */
    unsigned socket_mode;      /* permission bits of the socket, octal in the file */
    int io_threads;            /* threads for source reads and RocksDB calls, 1..256 */
    log_level log_level;       /* error | warn | info | debug */
    int max_clients;           /* connections accepted at once, 1..65536 */
    int max_clients_per_uid;   /* of them, from one uid */
    char access_check[8];      /* fd: OPEN needs the client's own fd; judge: the daemon judges; none: trust the socket */
    char trace_file[PATH_MAX]; /* chunk lookups are appended here; "" = off */
    char admin_group[64];      /* group whose members may run admin commands; "" = root only */
    /* [source] */
    char roots[CONFIG_MAX_ROOTS][PATH_MAX]; /* colon-separated in the file, absolute */
    int nroots;
    uint64_t chunk_size;       /* bytes; power of two, 64K..256M */
    double attr_ttl;           /* seconds an attribute lookup is trusted, >= 0 */
    int attr_cache_max;        /* files whose attributes are kept; beyond, the oldest go */
    int fd_cache;              /* source files held open between OPEN and chunk reads */
    int max_inflight;          /* source reads at once, demand and prefetch together */
    /* [prefetch] */
    uint64_t readahead_max;    /* largest read-ahead window of a sequential reader; 0 = off */
    uint64_t hint_window;      /* bytes fetched ahead of a hint list's consumption */
    int dir_readahead;         /* files hinted ahead of a reader of a directory in name order */
    int hint_max_entries;      /* chunks one user's hint lists may name */
    uint64_t hint_memory;      /* bytes of hint ranges one user may hold */
    uint64_t hint_memory_total; /* bytes of hint ranges all users may hold */
    /* [dram] */
    uint64_t dram_capacity;    /* bytes */
    char dram_policy[16];      /* lru (more with the DRAM tier issue) */
    uint64_t dram_max_leased;  /* arena bytes one client may hold leased */
    char dram_huge_pages[16];  /* auto, hugetlb, thp, off */
    uint64_t dram_client_lease_cache; /* of which it may keep to serve later reads */
    double dram_client_lease_ttl;     /* seconds it may keep one for that */
    /* [nvme] */
    char nvme_path[PATH_MAX];  /* directory of the NVMe tier; "" disables the tier */
    uint64_t nvme_capacity;    /* bytes, hard limit on disk */
    char nvme_policy[16];      /* lru */
    uint64_t nvme_inline_max;  /* chunks up to this size live inside RocksDB */
    /* [checkpoint] */
    uint64_t ckpt_capacity;    /* bytes of checkpoints staged and not yet published; 0 = off */
    uint64_t ckpt_memory;      /* bytes acknowledged early (only in memory), at most */
    uint64_t ckpt_bandwidth;   /* drain bytes per second, all drains together; 0 = unlimited */
    int ckpt_drains;           /* checkpoints draining at once, at most */
    char ckpt_priority[16];    /* background | demand: the I/O queue drains use */
    char ckpt_replica_dir[PATH_MAX]; /* second copy before publishing; "" = none */
    /* [metrics] */
    /* [dataset] */
    int dataset_max_entries;   /* entries one registered dataset's manifest may hold */
    char metrics_listen[128];  /* Prometheus endpoint: HOST:PORT or unix:/PATH; "" = off */
    /* [peer] */
    char peer_listen[300];     /* this node's peer address HOST:PORT; "" = no peer cache */
    char peer_nodes[8192];     /* HOST:PORT,... (ranges like gpu[01-16]:7070), self included */
    char peer_nodes_file[PATH_MAX]; /* or a hostfile: one HOST[:PORT] per line */
    char peer_key_file[PATH_MAX]; /* the shared secret peers authenticate with (root-only) */
    char peer_transport[8];    /* tcp | rdma | auto */
    double peer_timeout;       /* seconds a peer may take for one chunk before we go elsewhere */
    int peer_connections;      /* connections kept open to each peer (concurrent requests) */
} gr_config;

/*
 * What a changed key needs to take effect on SIGHUP, one value per key in
 * the key table (config.c).  CONFIG_RESTART: only a restart applies it
 * (it is logged as such).  CONFIG_LIVE: the daemon reads the field where
 * it uses it, so the new value applies as soon as it is copied in.  The
 * others name the apply hook the daemon runs after copying it (reload.c).
 */
typedef enum config_hook {
    CONFIG_RESTART = 0,
    CONFIG_LIVE,
    CONFIG_HOOK_LOG_LEVEL,
    CONFIG_HOOK_ATTR_TTL,
    CONFIG_HOOK_MAX_INFLIGHT,
    CONFIG_HOOK_PREFETCH,
    CONFIG_HOOK_DRAM_POLICY,
    CONFIG_HOOK_NVME_POLICY,
    CONFIG_NHOOKS
} config_hook;

/* The keys, in table order: how many, and key i's section, name and
 * hook.  For walking the table (reload, docs). */
size_t config_nkeys(void);
const char *config_key_section(size_t i);
const char *config_key_name(size_t i);
config_hook config_key_hook(size_t i);

/* Whether key i has different values in a and b; copy its value from src
 * into dst; its value in c as the file would spell it (into buf, len
 * bytes). */
int config_key_differs(const gr_config *a, const gr_config *b, size_t i);
void config_key_copy(gr_config *dst, const gr_config *src, size_t i);
void config_key_value(const gr_config *c, size_t i, char *buf, size_t len);

/* Fill *c with every key's default.  Never fails. */
void config_defaults(gr_config *c);

/*
 * Parse the INI text (len bytes, need not be NUL-terminated) on top of *c.
 * name is used in error messages ("name:line: ...").
 * Returns 0, or -EINVAL with a one-line message in err (errlen bytes).
 * On error *c may be partly updated: parse into a copy if that matters.
 */
int config_parse(gr_config *c, const char *text, size_t len, const char *name,
                 char *err, size_t errlen);

/* Read the file at path and config_parse it.  -errno (message in err) when
 * the file cannot be read. */
int config_load(gr_config *c, const char *path, char *err, size_t errlen);

/* Set one key from its string form, as the file would.  Returns 0 or
 * -EINVAL / -ENOENT (unknown key) with a message in err. */
int config_set(gr_config *c, const char *section, const char *key,
               const char *value, char *err, size_t errlen);

/* Checks across keys (e.g. roots present) after all parsing.  0 or -EINVAL. */
int config_validate(const gr_config *c, char *err, size_t errlen);

/* Print every key: section, name, type, default and description. */
void config_describe(FILE *out);

/* Print the effective configuration as an INI file. */
void config_dump(const gr_config *c, FILE *out);

/* Parse a size ("4M", "512", "1GiB").  0 or -EINVAL (bad syntax, overflow). */
int config_parse_size(const char *s, uint64_t *out);

/* Name of a log level, and the reverse (-EINVAL if unknown). */
const char *config_log_level_name(log_level l);
int config_log_level_parse(const char *s, log_level *out);

#endif
