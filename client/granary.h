/*
 * granary.h - libgranary, the client library of the Granary cache daemon.
 *
 * A training process connects to the granaryd of its node and reads files
 * of the distributed filesystem through it: the daemon serves chunks from
 * its DRAM and NVMe tiers and reads the filesystem only on a miss.
 *
 *     gr_client *c = gr_connect(NULL);            // $GRANARY_SOCKET or the config
 *     gr_file *f = gr_open(c, "/mnt/lustre/ds/shard-0001.tar");
 *     ssize_t n = gr_pread(f, buf, sizeof(buf), 0);
 *     gr_close(f);
 *     gr_disconnect(c);
 *
 * Errors: functions return -1 (or NULL) and set errno, like their POSIX
 * namesakes; gr_strerror_last() gives the daemon's one-line reason.
 *   ENOENT, EACCES, EISDIR ...  from the source filesystem
 *   EACCES        the path lies outside the daemon's [source] roots
 *   ESTALE        the file changed on the source since it was opened
 *   ETIMEDOUT     no answer within the timeout ($GRANARY_TIMEOUT_MS, default 120000)
 *   ECONNRESET    the daemon went away and did not come back within the
 *                 reconnect window (below); a later call tries again
 *   EPROTO        the daemon answered something this library does not understand
 *
 * Daemon restarts: when the connection breaks (granaryd crashed, was
 * restarted or upgraded), gr_open, gr_pread, gr_read_ref, gr_stats,
 * gr_admin and gr_close reconnect to the same socket and send their request
 * again, for up to $GRANARY_RECONNECT_MS milliseconds (default 30000; 0
 * disables: the call fails with ECONNRESET at once), retrying every 10 to
 * 250 ms.  Files opened before are re-opened by path on the new connection
 * before their next read; if the file's identity (dev, ino, size, mtime)
 * changed meanwhile the gr_file fails with ESTALE from then on (open it
 * again).  A read interrupted by the break is read again in full, so the
 * caller sees the file's bytes or an error, never a mix.  gr_ref bytes of
 * the old connection stay mapped and valid until gr_ref_release, which then
 * only frees them locally (the old daemon's leases died with it).  No call
 * waits longer than the reconnect window plus the per-request timeout
 * ($GRANARY_TIMEOUT_MS; a daemon that accepts but never answers gives
 * ETIMEDOUT, which is not retried).
 *
 * Threads: a gr_client may be shared by threads (calls are serialised by a
 * lock); for parallel reads give each thread its own gr_client.  A
 * gr_client must not be used across fork(): connect again in the child.
 */
#ifndef GRANARY_H
#define GRANARY_H

#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gr_client gr_client;
typedef struct gr_file gr_file;

/*
 * Connect to the daemon.  socket_path NULL or "" means: $GRANARY_SOCKET,
 * else "[daemon] socket" of $GRANARY_CONFIG or /etc/granary/granary.conf,
 * else /run/granary/granary.sock.  Returns a client the caller frees with
 * gr_disconnect, or NULL with errno set (ENOENT / ECONNREFUSED: no daemon;
 * EPROTONOSUPPORT: the daemon speaks another protocol version; EUSERS: the
 * daemon has max_clients connections already).
 */
gr_client *gr_connect(const char *socket_path);

/* Close the connection and free c.  Files still open on c must not be used
 * afterwards (their handles die with the connection); free them with
 * gr_close first.  NULL-safe. */
void gr_disconnect(gr_client *c);

/*
 * Open path (absolute, under the daemon's roots) for reading.  The file's
 * identity and size are fixed at this moment: reads return these bytes or
 * fail with ESTALE, never a mix.  Returns a file the caller frees with
 * gr_close, or NULL with errno set.
 */
gr_file *gr_open(gr_client *c, const char *path);

/*
 * Read up to len bytes at offset off into buf, like pread(2): returns the
 * number of bytes read, fewer than len only at the end of the file, 0 at or
 * past it, or -1 with errno set.  Large reads are pipelined; cached bytes
 * are copied once, from the daemon's shared memory into buf.
 */
ssize_t gr_pread(gr_file *f, void *buf, size_t len, off_t off);

/* The file's attributes as of gr_open (size, mode, mtime, ino, dev,
 * blksize, uid, gid, nlink).  0, or -1 with errno. */
int gr_fstat(gr_file *f, struct stat *st);

/* Release the file's handle in the daemon and free f.  0, or -1 with errno
 * (f is freed in every case).  NULL-safe. */
int gr_close(gr_file *f);

/*
 * Zero-copy read: up to len bytes at off, in place.  *data points at them
 * (read-only: the daemon's shared memory, mapped into this process) until
 * gr_ref_release(*ref); the daemon will not reuse that memory before.
 * Returns the number of bytes at *data: at most len, and never past the end
 * of the chunk that holds off (call again for the rest); 0 at or past the
 * end of the file (then *ref is NULL); -1 with errno set.  When the bytes
 * cannot be leased (this client already holds [dram]
 * max_leased_per_client, or the daemon's memory is exhausted) they are
 * copied into a private buffer instead; the call works the same.
 */
typedef struct gr_ref gr_ref;
ssize_t gr_read_ref(gr_file *f, off_t off, size_t len, const void **data, gr_ref **ref);

/* Give the bytes of gr_read_ref back.  NULL-safe.  The gr_client must not
 * have been freed (gr_disconnect); a reference from before a reconnect is
 * released locally. */
void gr_ref_release(gr_ref *ref);

/*
 * Job hints: tell the daemon what this job will read next, in order, so
 * that it is in DRAM before it is asked for.  Each gr_hint_append adds n
 * ranges to the end of this connection's hint list (thousands per call are
 * fine; the library splits them into messages).  The daemon fetches ahead of
 * the job's consumption (reads of hinted chunks, from any connection) within
 * its [prefetch] hint_window bytes, keeps the chunks it fetched safe from
 * eviction until they are read, and drops the list when c disconnects or
 * gr_hint_clear is called.  A range the daemon cannot resolve (outside the
 * roots, vanished, unreadable by the caller) is skipped and counted
 * (hint_errors), never fatal: hints are advice.
 *
 * Returns 0, or -1 with errno (E2BIG: the caller's lists are at [prefetch]
 * hint_max_entries chunks or hint_memory bytes; ENAMETOOLONG, EINVAL: a
 * malformed range; the connection's errors).  gr_hint_status says which
 * ranges failed later.
 */
typedef struct gr_hint {
    const char *path;   /* absolute, under the daemon's roots */
    uint64_t off;       /* first byte */
    uint64_t len;       /* bytes from off; 0 means to the end of the file */
} gr_hint;
int gr_hint_append(gr_client *c, const gr_hint *h, size_t n);

/* Drop this connection's hint list (before a new epoch's order, say).
 * 0, or -1 with errno. */
int gr_hint_clear(gr_client *c);

/*
 * This connection's hint list now: ranges appended (since it began or was
 * cleared), chunks named and not yet read, ranges refused or failed (outside
 * the roots, gone, not readable by the caller as the daemon judges it, past
 * the end, over the limits), chunks dropped because the job read past them,
 * and the latest failure's reason ("" if none).  Ranges are resolved as the
 * daemon reaches them, so failures show up over time.  0, or -1 with errno.
 */
typedef struct gr_hint_state {
    uint64_t ranges;
    uint64_t pending;
    uint64_t errors;
    uint64_t skipped;
    char last_error[256];
} gr_hint_state;
int gr_hint_status(gr_client *c, gr_hint_state *st);

/*
 * The daemon's counters: cb(arg, name, value) is called for each, in the
 * daemon's order; a non-zero return from cb stops the walk.  0, or -1 with
 * errno.
 */
int gr_stats(gr_client *c, int (*cb)(void *arg, const char *name, uint64_t value), void *arg);

/*
 * Operator commands (what granaryctl uses), with typed fields both ways:
 * args (nargs of them, may be NULL when 0) are the request's, *out gets
 * the reply's (*nout of them, in the daemon's order; a malloc'd array,
 * its strings NUL-terminated and inside it: free it with free()).  The
 * fields of each command are in proto/PROTOCOL.md (ADMIN); in short:
 *   EVICT, INVALIDATE, PIN, UNPIN   "path" -> "files", "dram_chunks", "nvme_chunks"
 *   HEALTH                          none -> "healthy" (1/0), "reason" if not, figures
 *   CONFIG                          none -> "config": the running configuration, INI
 *   WARMUP          "job" (0: a new one), "seal" (1: no more paths will come),
 *                   "bw" (bytes/s, 0: unlimited), "path"... -> "job"
 *   WARMUP_STATUS                   none -> per job "job", "state", "files", ...
 *   WARMUP_CANCEL                   "job" -> "job"
 * Returns 0, or -1 with errno: EPERM when the caller is neither root nor in
 * the daemon's [daemon] admin_group (every command but HEALTH, CONFIG and
 * WARMUP_STATUS), E2BIG when the arguments do not fit one message, or the
 * file's error; gr_strerror_last says why.
 */
#define GR_ADMIN_EVICT      1   /* drop the file's cached chunks */
#define GR_ADMIN_INVALIDATE 2   /* drop them and forget its attributes */
#define GR_ADMIN_PIN        3   /* never evict its chunks (until unpin or restart) */
#define GR_ADMIN_UNPIN      4
#define GR_ADMIN_HEALTH     5
#define GR_ADMIN_CONFIG     6
#define GR_ADMIN_WARMUP        7
#define GR_ADMIN_WARMUP_STATUS 8
#define GR_ADMIN_WARMUP_CANCEL 9

typedef struct gr_field {
    const char *name;           /* NUL-terminated */
    int is_text;                /* 0: num holds the value; 1: text (len bytes + NUL) */
    uint64_t num;
    const char *text;
    size_t len;
} gr_field;

int gr_admin(gr_client *c, int cmd, const gr_field *args, size_t nargs, gr_field **out,
             size_t *nout);

/* The one-line reason for the last failed call on c ("" if none).  The
 * string lives until the next call on c.  With c NULL: why the calling
 * thread's last gr_connect failed (the socket tried and where its path came
 * from, or the daemon's refusal), until its next gr_connect. */
const char *gr_strerror_last(gr_client *c);

#ifdef __cplusplus
}
#endif

#endif
