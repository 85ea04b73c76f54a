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
 * only frees them locally (the old daemon's leases died with it).  Reads
 * served from kept leases (below) need no daemon: they go on across a
 * restart, with the bytes of the file's identity at open, until they need
 * the daemon.  No call
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
 * daemon has max_clients connections already).  The client's one lasting
 * descriptor, its socket (close-on-exec), is kept at 512 or above (half
 * the descriptor limit if that is lower), out of the numbers programs pick
 * for themselves.
 */
gr_client *gr_connect(const char *socket_path);

/* Close the connection and free c.  Files still open on c must not be used
 * afterwards (their handles die with the connection); free them with
 * gr_close first.  NULL-safe.  In a child of fork(), the inherited c is
 * only unmapped and freed: nothing is sent on the parent's connection. */
void gr_disconnect(gr_client *c);

/*
 * Open path (under the daemon's roots; a relative path is taken from the
 * working directory at this call, lexically, like os.path.abspath) for
 * reading.  The file's
 * identity and size are fixed at this moment: reads return these bytes or
 * fail with ESTALE, never a mix.  Returns a file the caller frees with
 * gr_close, or NULL with errno set.
 *
 * One round trip (OPENX): when it costs the file system nothing the caller
 * may not want (the file is one chunk long, or its first chunk is in the
 * daemon's memory) the first chunk comes with the open, so that opening,
 * reading and closing a small file is one round trip in all.
 *
 * Kept leases: the chunks this client reads are handed over in shared
 * memory under leases; the client keeps the most recently used of them (as
 * many bytes as the daemon allows, [dram] client_lease_cache, and at most
 * $GRANARY_LEASE_CACHE, a size; 0 keeps none) for [dram] client_lease_ttl
 * seconds, and serves later reads of those chunks of the same file identity
 * from them without any message.  Past that, a lease goes back but the
 * client goes on reading the chunk from its mapping as long as the daemon's
 * generation table says the block was not reused (checked around every
 * copy).  Kept bytes are always those of the identity the gr_file was
 * opened with.
 *
 * Look-ahead: a client that hinted files (gr_hint_append, ranges from
 * offset 0) and opens them in that order has the next ones opened ahead,
 * $GRANARY_LOOKAHEAD of them (default 2, 0 turns it off, at most 8), their
 * replies waiting on the socket when it opens them.  Where the daemon wants
 * access proofs, each look-ahead carries the process's own open(2) of its
 * file, made when it is sent.  A file opened ahead has the identity it had
 * then.
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

/* Release the file's handle in the daemon (a message that needs no reply)
 * and free f.  0 (nothing can fail that the caller could act on; the
 * int is kept for POSIX's shape).  NULL-safe. */
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
 * malformed range (an empty path); the connection's errors).  gr_hint_status says which
 * ranges failed later.
 */
typedef struct gr_hint {
    const char *path;   /* under the daemon's roots; relative: from the working directory */
    uint64_t off;       /* first byte */
    uint64_t len;       /* bytes from off; 0 means to the end of the file */
} gr_hint;
int gr_hint_append(gr_client *c, const gr_hint *h, size_t n);

/*
 * The caller will open paths[0..n) next, in this order: open them ahead,
 * as the look-ahead above does for hinted files (the first ones at once),
 * without hinting the daemon (no prefetch, no hint list).  For a reader
 * that knows its next few files but not the job's order: a DataLoader
 * worker's batch, say.  It replaces the look-ahead's list, hinted files
 * included; files opened out of that order, or never, are served and
 * closed as there; 0 files, or $GRANARY_LOOKAHEAD=0, only clears it.  At
 * most 262144 paths are kept.  0, or -1 with errno (EINVAL: an empty or
 * NULL path; ENAMETOOLONG; ENOMEM); nothing is sent that could fail
 * here: a failed look-ahead is the later gr_open's own open.
 */
int gr_open_ahead(gr_client *c, const char *const *paths, size_t n);

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
 *   ANALYZE                         ["job"] -> "jobs", then per job "job",
 *                                   "class", figures, "tier" groups, "rec"s
 *                                   (PROTOCOL.md; anyone: one's own jobs)
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
#define GR_ADMIN_ANALYZE       14

#define GR_ADMIN_DATASET_ADD    10  /* "path", "stamp" (a file), "recheck" (s) -> "id" */
#define GR_ADMIN_DATASET_LIST   11  /* none -> per dataset "id", "path", "state", ... */
#define GR_ADMIN_DATASET_REMOVE 12  /* "id" -> "id" */
#define GR_ADMIN_DATASET_RESCAN 13  /* "id" -> "id" */

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

/* ---- metadata from registered datasets ----
 *
 * For a directory tree an operator registered (granaryctl dataset add), the
 * daemon keeps every file's attributes and the tree in a manifest, and
 * answers stat and readdir from it with no operation on the file system,
 * judging access itself (the daemon's [daemon] access_check = judge; with
 * fd it leaves those to the file system, and so do these calls).  What the
 * daemon cannot answer (a path in no registered dataset, access_check =
 * fd, a daemon without STAT) these calls ask the file system, as the
 * calling process.  Answers from manifests are as fresh as the dataset's
 * stamp check (granaryctl(8), "dataset"), and the client keeps them for
 * as long ($GRANARY_ATTR_CACHE entries, default 262144; 0: none).  A
 * relative path is taken against the working directory.  Manifests list
 * regular files and directories only.
 */

/* path's attributes (of the file itself: a manifest holds no links).  0, or
 * -1 with errno (ENOENT: not there, as of the dataset's last scan). */
int gr_stat(gr_client *c, const char *path, struct stat *st);

typedef struct gr_dirent {
    const char *name;           /* NUL-terminated; valid until the next gr_readdir */
    unsigned char type;         /* DT_REG or DT_DIR (from the file system: its d_type) */
    int has_stat;               /* st holds the entry's attributes (from a manifest) */
    struct stat st;
} gr_dirent;
typedef struct gr_dir gr_dir;

/* List directory path: in the manifest's order (sorted by name), 4096
 * entries per round trip, without "." and "..".  NULL with errno on
 * failure. */
gr_dir *gr_opendir(gr_client *c, const char *path);
/* The next entry, or NULL at the end (errno 0) or on failure (errno set). */
const gr_dirent *gr_readdir(gr_dir *d);
int gr_closedir(gr_dir *d);

/* ---- GPU: cached bytes straight into device memory ----
 *
 * gr_read_to_device copies a range of a file into CUDA device memory on the
 * caller's stream and returns once the copies are queued.  A DRAM-tier hit
 * is copied by the GPU's DMA engine straight out of the daemon's shared
 * memory: libgranary registers each arena segment it maps with the driver
 * once (cuMemHostRegister, read-only) and keeps the chunks' leases until
 * the copy has completed on the device (then gives them back at once, from
 * a helper thread woken by the driver).  Where the driver refuses the
 * registration, and for bytes the daemon sends inline, the bytes go through
 * a pinned staging ring (one CPU copy, pipelined over two streams).  A
 * miss is fetched by the daemon as for gr_pread; the pieces of a call are
 * pipelined, so fetching the later ones overlaps copying the first, and the
 * next call overlaps the copies of this one.
 *
 * CUDA is loaded when first needed (dlopen of libcuda.so.1, or
 * $GRANARY_LIBCUDA; libgranary has no link-time dependency on CUDA), in
 * the CUDA context of the first stream passed (or the thread's current
 * context, or device $GRANARY_GPU_DEVICE's primary context, default 0); a
 * gr_client serves one context.  `stream` is a CUstream / cudaStream_t
 * (NULL: the legacy default stream); `dst` a device address of that
 * context (cudaMalloc, cuMemAlloc, torch.Tensor.data_ptr()).
 *
 * Errors (-1 and errno; gr_strerror_last says which driver call and why):
 *   ENODEV   no CUDA driver, no GPU, or cuInit failed (CUDA error 100, 35,
 *            34 ...); ENOSYS: the driver lacks an entry point
 *   EFAULT   dst .. dst+len is not device memory of one allocation
 *   EXDEV    the stream belongs to another context than this client's
 *   EIO      a driver call or an earlier queued copy failed; the client's GPU
 *            path is then unusable (connect again)
 *   ENOMEM   host or device memory (staging ring, GPU tier) ran out
 *   and the errors of gr_pread (ENOENT, ESTALE, ECONNRESET ...)
 * On failure some copies may have been queued already: dst's contents are
 * undefined, and leases of queued copies are still given back when those
 * complete.
 *
 * Completion: copies are ordered on `stream` like any other work, so
 * kernels queued there afterwards see the bytes without waiting on the
 * host.  To wait on the host, ask for a batch handle (*batch non-NULL) and
 * call gr_dev_wait (or poll with gr_dev_poll).  Passing batch NULL is fine:
 * the leases are still given back when the copies complete.
 *
 * GPU tier (opt-in per client: gr_gpu_set(c, GR_GPU_TIER_BYTES, cap) or
 * $GRANARY_GPU_TIER=SIZE): an LRU of whole chunks in device memory
 * (cuMemAlloc, at most cap bytes) for data every step reads.  A miss
 * fetches the whole chunk into the tier, then copies the wanted bytes
 * device to device; a hit is a device-to-device copy only.  Entries belong
 * to one file identity (dev, ino, size, mtime), so a changed file is never
 * served old bytes.
 *
 * Counters: gr_gpu_get_stats for this client; libgranary also reports them to
 * the daemon (about once a second and at disconnect), where `granaryctl
 * stats` shows them summed over clients as gpu_*.
 *
 * GPUDirect Storage: where libcufile is present it is detected and named
 * in gr_gpu_info and the daemon's log, but not used: chunks from the NVMe
 * tier reach the GPU through the DRAM arena.
 *
 * Threads: GPU calls on one gr_client are serialised; gr_dev_wait and
 * gr_dev_poll may be called from any thread.  Every batch must be waited
 * for (or the client disconnected) before its memory is reused by the
 * caller; gr_disconnect waits for every queued copy, gives back every
 * lease, unregisters the segments, and frees batches not yet waited for
 * (their handles are invalid afterwards).  The CUDA context must outlive
 * the client's GPU use (gr_disconnect before cudaDeviceReset or exit of the
 * CUDA runtime).
 */
typedef struct gr_dev_batch gr_dev_batch;

/* One range of a batched copy. */
typedef struct gr_dev_range {
    gr_file *f;         /* a file of the gr_client the batch is for */
    uint64_t off;       /* first byte in the file */
    uint64_t len;       /* bytes wanted */
    void *dst;          /* device address for byte off */
    uint64_t done;      /* out: bytes queued, fewer than len only at the end of the file */
} gr_dev_range;

/*
 * Copy up to len bytes at off of f into device memory at dst, on stream.
 * Returns the bytes queued (fewer than len only at the end of the file, 0
 * at or past it), or -1 with errno.  *batch (if batch is not NULL) gets a
 * handle to wait on, which the caller frees with gr_dev_wait; it is NULL
 * when nothing was queued or on failure.
 */
ssize_t gr_read_to_device(gr_file *f, void *dst, size_t len, off_t off, void *stream,
                          gr_dev_batch **batch);

/*
 * Copy n ranges (of files of c, in any order, overlapping or not) into
 * device memory on stream, with one pipeline for all of them.  Sets each
 * r[i].done.  Returns 0 when everything is queued, or -1 with errno (then
 * r[i].done is not meaningful).  *batch as for gr_read_to_device.
 */
int gr_read_to_device_batch(gr_client *c, gr_dev_range *r, size_t n, void *stream,
                            gr_dev_batch **batch);

/* Block until the batch's copies have completed on the device and its
 * leases are back, then free b.  0, or -1 with errno EIO (a copy failed:
 * the reason in gr_strerror_last of the client).  NULL-safe (returns 0). */
int gr_dev_wait(gr_dev_batch *b);

/* 1 when the batch's copies have completed and its leases are back, 0
 * when not yet, -1 with errno EIO when a copy failed.  Does not free b. */
int gr_dev_poll(gr_dev_batch *b);

/* Options of c's GPU path (loads CUDA if needed; -1 with errno as above,
 * or EINVAL for an unknown opt, EBUSY for a ring size once the ring is
 * allocated).  Defaults from the environment in parentheses. */
#define GR_GPU_TIER_BYTES  1    /* GPU tier cap in bytes, 0 off ($GRANARY_GPU_TIER, default 0) */
#define GR_GPU_REGISTER    2    /* 1 register arena segments; 0 staging ring only
                                 * ($GRANARY_GPU_REGISTER, default 1) */
#define GR_GPU_RING_BYTES  3    /* staging ring size ($GRANARY_GPU_RING, default 32M) */
#define GR_GPU_MAX_LEASED  4    /* arena bytes held for queued copies before a call waits for
                                 * the oldest ($GRANARY_GPU_MAX_LEASED, default 128M) */
int gr_gpu_set(gr_client *c, int opt, uint64_t value);

/* This client's GPU counters since it connected. */
typedef struct gr_gpu_stats {
    uint64_t copies;                /* ranges queued */
    uint64_t bytes;                 /* bytes queued for device memory */
    uint64_t direct_bytes;          /* of which straight from registered arena memory (no CPU copy) */
    uint64_t staged_bytes;          /* of which through the staging ring (one CPU copy) */
    uint64_t tier_hits;             /* chunk lookups the GPU tier served */
    uint64_t tier_hit_bytes;        /* bytes it served (device to device) */
    uint64_t tier_misses;           /* chunk lookups it did not hold */
    uint64_t tier_evictions;
    uint64_t tier_used_bytes;
    uint64_t tier_cap_bytes;        /* 0: the tier is off */
    uint64_t registered_segments;   /* arena mappings registered with the driver now */
    uint64_t registration_failures; /* mappings the driver refused (served through the ring) */
    uint64_t leased_bytes;          /* arena bytes leased for copies not yet complete */
    uint64_t batches_inflight;      /* batches whose leases are not all back */
    int gds_available;              /* libcufile found (detected only, see above) */
} gr_gpu_stats;
int gr_gpu_get_stats(gr_client *c, gr_gpu_stats *st);

/* One line about c's GPU path into buf (len bytes): the device, the
 * driver, registration, the ring, the tier, GPUDirect Storage.  0, or -1
 * with errno (ENODEV ...) and the reason in buf. */
int gr_gpu_info(gr_client *c, char *buf, size_t len);

/* ---- checkpoints: staged on the node, published atomically ----
 *
 * A checkpoint is written at local speed into a memfd this library makes
 * (no socket traffic per write), then committed: the memfd travels to the
 * daemon (SCM_RIGHTS), which seals it against writes, copies it onto the
 * node's NVMe under <[nvme] path>/checkpoints/, fsyncs it and answers
 * ("local").  The daemon then drains it in the background: a second copy
 * in its [checkpoint] replica_dir if one is configured ("replicated"),
 * then the destination, written as the calling user (the kernel judges
 * the peer's uid, gid and groups), into a temporary name beside it,
 * fsynced, renamed into place, its directory fsynced ("published").  A
 * reader sees the old destination or the new one, never a torn one.
 * Drains survive a daemon restart.  The destination must lie under one of
 * the daemon's roots and the caller must be allowed to create it.  From
 * "local" on, gr_open of the destination (and an open under the preload
 * shim) reads the new checkpoint from its staged copy, for the writer and
 * for whoever could read the published file (docs/ARCHITECTURE.md).
 */
#define GR_CKPT_STAGED     0   /* on the node, not yet acknowledged (or, committed with
                                * gr_ckpt_commit_staged, in the daemon's memory only) */
#define GR_CKPT_LOCAL      1   /* on the node's NVMe, fsynced */
#define GR_CKPT_REPLICATED 2   /* and in the second failure domain (replica_dir) */
#define GR_CKPT_PUBLISHED  3   /* at its destination */
#define GR_CKPT_FAILED     4   /* lost (the staged copy failed its checksum) */
#define GR_CKPT_SUPERSEDED 5   /* dropped unpublished: a newer checkpoint for the same
                                * destination was published first (error says which) */

typedef struct gr_ckpt gr_ckpt;

/* One checkpoint's state, as the daemon tells it. */
typedef struct gr_ckpt_info {
    uint64_t id;
    int state;                      /* GR_CKPT_* */
    int durable;                    /* replicated (with a replica_dir) or published */
    uint64_t size;
    uint64_t drained;               /* bytes of the current drain copied */
    unsigned attempts;              /* drains that failed (each is retried) */
    unsigned uid;
    char dest[4096];
    char error[256];                /* the last drain failure, "" if none */
} gr_ckpt_info;

/* A new, empty checkpoint for dest (nothing is sent yet).  NULL with
 * errno (EINVAL: dest not absolute or too long; ENOMEM, EMFILE). */
gr_ckpt *gr_ckpt_create(gr_client *c, const char *dest);
/* Write len bytes at off (any order; holes read as zeros).  Like pwrite:
 * the bytes written, or -1 with errno (EBADF after commit). */
ssize_t gr_ckpt_pwrite(gr_ckpt *k, const void *buf, size_t len, off_t off);
/* The memfd behind k, for writers that want a file descriptor (write(2),
 * or open("/proc/self/fd/N")); owned by k, valid until commit.  Unmap any
 * writable mapping of it before gr_ckpt_commit (EBUSY otherwise). */
int gr_ckpt_fd(gr_ckpt *k);
/*
 * Hand the bytes to the daemon and return once they are local (fsynced on
 * the node); the memfd is closed.  0, or -1 with errno and
 * gr_strerror_last: EACCES (dest under no root, or the caller may not
 * create it), ENOENT (its directory is missing), EISDIR, ENOSPC (staging
 * full: nothing was lost, nothing was staged), EBUSY, EPERM (the daemon
 * cannot write as the caller), EROFS (checkpoints off).  After a failure k
 * may be committed again (once the daemon has seen the memfd it is sealed:
 * further writes fail with EPERM).
 */
int gr_ckpt_commit(gr_ckpt *k);
/*
 * As gr_ckpt_commit, but return as soon as the daemon holds the bytes:
 * it has sealed the memfd, checked and created the destination's
 * temporary as the caller, and reserved the space on NVMe; the copy to
 * NVMe, the drain and the publish go on behind.  Returns the state
 * acknowledged: GR_CKPT_STAGED, or GR_CKPT_LOCAL when the daemon's
 * [checkpoint] memory was taken by other early puts (it then answered once
 * local); -1 with errno as gr_ckpt_commit.  Until the checkpoint is local
 * it lives in the daemon's memory only: a daemon killed meanwhile loses it
 * (gr_ckpt_status then says failed, "lost"), as does an NVMe copy that
 * fails.  gr_ckpt_wait(c, id, GR_CKPT_LOCAL, ...) waits for it to survive
 * the daemon.  Reads of dest through the daemon see the new bytes at once.
 */
int gr_ckpt_commit_staged(gr_ckpt *k);
/* Stage the bytes of fd (a readable regular file; borrowed) for dest, as
 * commit does: a committed handle, or NULL with errno.  granaryctl put. */
gr_ckpt *gr_ckpt_put_fd(gr_client *c, int fd, const char *dest);
/* The daemon's id of a committed checkpoint (0 before commit). */
uint64_t gr_ckpt_id(const gr_ckpt *k);
/* Free k (committed or not: a committed checkpoint drains on).  NULL-safe. */
void gr_ckpt_free(gr_ckpt **k);

/* Checkpoint id's state.  0, or -1 with errno (ENOENT: no such checkpoint
 * of the caller's; root and the admin group see everyone's). */
int gr_ckpt_status(gr_client *c, uint64_t id, gr_ckpt_info *out);
/* Wait until checkpoint id reaches state (GR_CKPT_LOCAL ... PUBLISHED) or
 * timeout_ms passes (< 0: forever).  0, or -1 with errno: ETIMEDOUT, EIO
 * (it failed), ESTALE (superseded: a newer checkpoint for its destination
 * was published instead, so this one never will be), or gr_ckpt_status's.
 * Polls every 10 to 100 ms. */
int gr_ckpt_wait(gr_client *c, uint64_t id, int state, int timeout_ms);
/* The name of a GR_CKPT_* state ("staged", ... "superseded"), "?" for
 * others: a static string. */
const char *gr_ckpt_state_name(int state);

/*
 * Checkpoint sets: several files (the shards of one step) published
 * together, so that a reader sees the old set or the new one, never a mix.
 * The daemon stages them as one checkpoint and publishes them into a new
 * directory DEST.granary-gen-ID beside dest (every file fsynced, then a
 * checksummed MANIFEST), then makes dest a symbolic link to it by renaming
 * a new link over it; the previous generation is kept until the next
 * publish.  A reader resolves dest once (opens the directory, then the
 * files under that fd, or realpath) to see one whole set.  dest must be
 * absent, a file, or a link (a set published before); a directory is
 * refused (EISDIR).  State, wait and status as for one file, by
 * gr_ckpt_set_id.  Sets are not readable through the daemon before they
 * are published.
 */
typedef struct gr_ckpt_set gr_ckpt_set;
/* A new, empty set for dest (nothing is sent yet): NULL with errno
 * (EINVAL, ENAMETOOLONG, ENOMEM, EMFILE). */
gr_ckpt_set *gr_ckpt_set_create(gr_client *c, const char *dest);
/* Add a file name (1-255 bytes, no '/', no control characters, not "." or
 * "..", not "MANIFEST") with the len bytes at buf, copied now (memory
 * speed, into a memfd of the set's).  0, or -1 with errno: EINVAL (the
 * name), EEXIST (a name already added), EBADF (after commit), ENOMEM. */
int gr_ckpt_set_add(gr_ckpt_set *s, const char *name, const void *buf, size_t len);
/* The same with the bytes of fd (borrowed), from offset 0 to its end. */
int gr_ckpt_set_add_fd(gr_ckpt_set *s, const char *name, int fd);
/* Hand the set to the daemon: returns once it is local, as gr_ckpt_commit
 * (and with its errors; EINVAL for a set of no files).  The set's memory
 * is released as it is sent, so after a failure it cannot be committed
 * again (EBADF): build it anew. */
int gr_ckpt_set_commit(gr_ckpt_set *s);
/* The same, acknowledged early as gr_ckpt_commit_staged: GR_CKPT_STAGED or
 * GR_CKPT_LOCAL, or -1 with errno. */
int gr_ckpt_set_commit_staged(gr_ckpt_set *s);
/* The daemon's id of a committed set (0 before). */
uint64_t gr_ckpt_set_id(const gr_ckpt_set *s);
/* Free s, committed or not.  NULL-safe. */
void gr_ckpt_set_free(gr_ckpt_set **s);

#define GR_ADMIN_CKPT_LIST 15      /* "id" (optional) -> per checkpoint "id", "dest", "state", ... */
#define GR_ADMIN_PEERS 16          /* none -> per peer-cache member "name", "state", "transport", ... */

#ifdef __cplusplus
}
#endif

#endif
