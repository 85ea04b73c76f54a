/*
 * testutil.h - helpers shared by the Check suites: scratch directories,
 * files with known bytes, and a real granaryd started on a temporary socket.
 */
#ifndef GR_TESTUTIL_H
#define GR_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct gr_client gr_client;     /* granary.h */

/* Make a fresh directory under $TMPDIR (or /tmp) named granary-test-XXXXXX.
 * Returns a malloc'd path; aborts the test process on failure. */
char *tu_mkdtemp(void);

/* rm -rf path.  NULL-safe. */
void tu_rmrf(const char *path);

/* Sleep ms milliseconds. */
void tu_sleep_ms(long ms);

/* The deterministic test pattern: byte i of file "seed" is tu_byte(seed, i). */
uint8_t tu_byte(uint32_t seed, uint64_t i);

/* Write size bytes of pattern seed to path (created 0644, truncated). */
void tu_write_pattern(const char *path, uint32_t seed, uint64_t size);

/* Check that buf holds bytes [off, off+len) of pattern seed: 1 yes, 0 no. */
int tu_check_pattern(const void *buf, uint32_t seed, uint64_t off, size_t len);

#endif

/* ---- a real granaryd on a temporary socket ---- */

typedef struct tu_daemon {
    pid_t pid;
    char *dir;                  /* scratch directory holding everything below */
    char src[512];              /* the source root: dir/src */
    char nvme[512];             /* the NVMe tier: dir/nvme */
    char sock[108];             /* dir/sock */
    char conf[512];             /* dir/granary.conf */
    char log[512];              /* dir/granaryd.log: the daemon's stderr */
} tu_daemon;

/*
 * Make the scratch tree and write a config: roots = src, nvme path, socket,
 * chunk_size 64K, attr_ttl 0.2, dram 8M, nvme 64M (inline_max 16K), no metrics
 * endpoint (tests run side by side), log_level debug; then
 * the lines of extra (may be NULL), which override by section ("[dram]\n
 * capacity = 2M\n").  Does not start the daemon.
 */
void tu_daemon_init(tu_daemon *d, const char *extra);

/* Start $GRANARYD (default build/granaryd) on d's config and wait until its
 * socket accepts connections (10 s at most).  Returns 0 or -1. */
int tu_daemon_start(tu_daemon *d);

/* SIGTERM, wait for exit.  Returns the exit status (0 clean), or -1 if it
 * had to be killed.  The socket file must be gone afterwards. */
int tu_daemon_stop(tu_daemon *d);

/* Stop if running and remove the scratch tree. */
void tu_daemon_fini(tu_daemon *d);

/* A stats counter by name via libgranary on d's socket; UINT64_MAX on error. */
uint64_t tu_stat(const tu_daemon *d, const char *name);

/* The counter as c's own connection sees it: after everything sent on that
 * connection, by this process or another holding it.  UINT64_MAX on error. */
uint64_t tu_stat_on(gr_client *c, const char *name);

/* tu_stat, once it settles at want (RELEASE has no reply, so another
 * connection's STATS may overtake it): 2 s at most.  The last value. */
uint64_t tu_stat_settles(const tu_daemon *d, const char *name, uint64_t want);

/* Register dir as a dataset on d (GR_ADMIN_DATASET_ADD) and wait up to 10 s
 * for its manifest to be ready: 0, or -1 with the reason in err. */
int tu_register_dataset(const tu_daemon *d, const char *dir, char *err, size_t errlen);

/* Rewrite the line of key in d's configuration to key = "value" (every
 * section's: keys are unique here) and SIGHUP the daemon; the caller waits
 * for what the reload changes.  0, or -1 (the file could not be rewritten,
 * or no such line). */
int tu_conf_reload(tu_daemon *d, const char *key, const char *value);
