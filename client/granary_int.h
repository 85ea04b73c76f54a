/*
 * granary_int.h - what libgranary's core (client/granary.c) shares with the
 * GPU path (client/gpu.c) and nobody else: gr__ names are internal, never
 * exported from libgranary.so (the version script lists granary.h's
 * functions only; tests/test_build.sh checks).
 *
 * The GPU layer sees the connection only through these: a pipelined READX
 * that hands it each extent together with its lease (a gr_ref it owns from
 * then on), leases given back in batches, a hook run before any segment
 * mapping is unmapped, and its per-client state, finished first thing in
 * gr_disconnect.
 *
 * Lease ownership (the rule any reuse of leases, such as a client-side
 * lease cache, must keep): a gr_ref handed to a gr__ext_cb belongs to the
 * callback from that moment.  The GPU layer keeps it until the device copy
 * that reads its bytes has completed (an event on the caller's stream has
 * fired), then gives it back with gr__ref_release_n (or
 * gr__ref_release_held inside a callback).  Until then nobody else may
 * release the lease, hand its bytes to another reader as a reusable lease,
 * or unmap the mapping it points into: the DMA engine reads those bytes
 * asynchronously, with no CPU involved, for as long as the copy is queued.
 * granary.c keeps a connection's mappings while any gr_ref of its
 * generation is out (drop_conn, the retired list), which is what makes
 * holding a ref across a reconnect safe.  A cache that wants to serve
 * later reads from a lease held here must take its own reference on the
 * lease (and not count the GPU layer's ref as its own), so that the lease
 * goes back to the daemon only when both are done.
 *
 * Threads: every function takes the client's lock (c->lock) unless it says
 * it runs with it held.
 */
#ifndef GRANARY_INT_H
#define GRANARY_INT_H

#include <stddef.h>
#include <stdint.h>

#include "granary.h"

/* A chunk as the client names it: the file identity the daemon gave at
 * open (dev, ino, size, mtime), the chunk size and the chunk's index.  The
 * lease cache (lcache.c) and the GPU tier key their chunks by it. */
typedef struct gr__ckey {
    uint64_t dev, ino, size;
    int64_t mtime_sec;
    uint64_t mtime_nsec;
    uint64_t unit;              /* the chunk size */
    uint64_t index;
} gr__ckey;
uint64_t gr__ckey_hash(const gr__ckey *k);
int gr__ckey_eq(const gr__ckey *a, const gr__ckey *b);

/* One range to read: [off, off+len) of f, clipped by the caller to the
 * file's size at open. */
typedef struct gr__span {
    gr_file *f;
    uint64_t off;
    uint64_t len;
} gr__span;

/* Bytes of a span as they arrive.  Either leased bytes in a mapped arena
 * segment (ref != NULL; map/map_len: the whole mapping that holds them,
 * valid while ref is held) or inline bytes (ref NULL, map NULL; p valid
 * only during the callback). */
typedef struct gr__ext {
    size_t span;                /* index into the spans array */
    uint64_t file_off;          /* where p's bytes are in the file */
    const uint8_t *p;
    size_t len;
    const void *map;
    size_t map_len;
    gr_ref *ref;                /* the lease: the callback's to release from now on */
} gr__ext;

/* Called with the client's lock held, in reply order (not file order).
 * Returns 0 to go on; a negative errno stops the read.  Either way the
 * callback owns e->ref (also of the extent it refused): it releases it,
 * at once or once the copy that reads its bytes has completed.  It must not
 * call gr_ functions on the same client, except gr__ref_release_held. */
typedef int (*gr__ext_cb)(void *arg, const gr__ext *e);

/*
 * Read spans[0..n) (all of files of c, each within its file) with up to
 * GR_WINDOW READX requests in flight, calling cb for every extent and every
 * run of inline bytes.  Every byte of every span is delivered exactly once
 * when it returns 0, across reconnects too (a request lost with its
 * connection is sent again; bytes already delivered stay valid: their refs
 * hold the old mappings).  Returns 0, or -errno: the first error of a
 * reply (its text in gr_strerror_last), of the connection, or of cb (no
 * text set); then some bytes were delivered and others not, and the refs
 * of those delivered are still the callback's.  Leases of extents not
 * handed to cb are given back here.  Threads: takes c's lock for the whole
 * read.
 */
int gr__read_extents(gr_client *c, const gr__span *spans, size_t n, gr__ext_cb cb, void *arg);

/* gr_ref_release of n refs of one client (NULLs skipped) with one lock and
 * one RELEASE message.  Threads: takes the client's lock; never from a
 * gr__ext_cb. */
void gr__ref_release_n(gr_ref **refs, size_t n);

/* gr_ref_release from inside a gr__ext_cb (the client's lock is
 * held): the RELEASE goes out with the next one the read sends. */
void gr__ref_release_held(gr_ref *ref);

/* The client f belongs to; the daemon's chunk size for f (0 if unknown).
 * No lock: fixed at open. */
gr_client *gr__file_client(const gr_file *f);
/* A read-only fd of the staged copy when f is a checkpoint not yet
 * published (the daemon's OPEN reply was STAGED), else -1.  f's: valid
 * until gr_close(f); dup it to keep it longer. */
int gr__file_staged_fd(const gr_file *f);
uint64_t gr__file_chunk_size(const gr_file *f);

/*
 * Per-client state of the GPU layer.  unmap(arg, p, len) runs, with the
 * client's lock held, before any segment mapping [p, p+len) is unmapped
 * (drop of a connection, last ref of a retired one, a renewed segment's old
 * mapping, gr_disconnect); it must not take the client's lock.  fini(arg)
 * runs first thing in gr_disconnect (no lock held) and must leave no ref
 * out.  gr__gpu_get returns arg, or NULL when none is set.  Threads: set
 * once, by the GPU layer, under its own creation lock.
 */
typedef struct gr__gpu_hooks {
    void (*unmap)(void *arg, const void *p, size_t len);
    void (*fini)(void *arg);
} gr__gpu_hooks;
void gr__gpu_set(gr_client *c, const gr__gpu_hooks *hooks, void *arg);
void *gr__gpu_get(gr_client *c);

/* Set errno to err and c's gr_strerror_last text (printf format).  Takes
 * the lock.  Returns -1. */
int gr__fail(gr_client *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Send a REPORT of n (at most PROTO_MAX_REPORT) client counters (names,
 * values: their growth since the last report) and wait for its answer, on
 * the current connection only (no reconnecting: -ENOTCONN).  0, or -errno
 * (-EPROTO or -EOPNOTSUPP from a daemon that predates REPORT; -EINVAL for a
 * name that is empty or over 255 bytes).  Threads: takes the lock.
 */
int gr__report(gr_client *c, const char *const *names, const uint64_t *values, size_t n);

/*
 * Send what the lease cache and the look-ahead counted since the last
 * report now (they go with reads at most every second, and at
 * gr_disconnect): for a process about to exit without disconnecting (the
 * shim's destructor).  Nothing when another thread holds c (no waiting at
 * exit) or c was inherited across fork.
 */
void gr__report_now(gr_client *c);

/*
 * One request and its reply, for the request kinds outside granary.c
 * (meta.c): enc(arg, buf, cap, id) encodes the request with id (its length,
 * or -errno); the reply must be op's, and dec(arg, m) (m: the decoded
 * proto_msg, valid during the call) takes what it needs (0, or -errno).
 * Reconnects as every call does.  0, or -1 with errno and
 * gr_strerror_last set (the daemon's error reply, the transport's, enc's or
 * dec's).  Threads: takes the lock; enc and dec run with it held.
 */
struct proto_msg;
typedef long (*gr__enc_fn)(void *arg, uint8_t *buf, size_t cap, uint32_t id);
typedef int (*gr__dec_fn)(void *arg, const struct proto_msg *m);
int gr__call(gr_client *c, uint8_t op, gr__enc_fn enc, gr__dec_fn dec, void *arg);
/* gr__call with fd (borrowed) passed along with the request (SCM_RIGHTS). */
int gr__call_fd(gr_client *c, uint8_t op, int fd, gr__enc_fn enc, gr__dec_fn dec, void *arg);

/* The client's attribute cache (meta.c): made at gr_connect, freed at
 * gr_disconnect. */
typedef struct gr__meta gr__meta;
gr__meta *gr__meta_new(void);
void gr__meta_free(gr__meta *m);
gr__meta *gr__meta_of(gr_client *c);

/* STAT of absolute path abs from the daemon's manifests (or the client's
 * cache of them), with no fallback to the file system: 0 and *st, or
 * -errno (-ENODATA / -ENOKEY: the daemon cannot answer; -ENOENT: not there
 * as of the dataset's last scan; connection errors).  Threads: takes the
 * lock. */
int gr__stat_manifest(gr_client *c, const char *abs, struct stat *st);

/* For the LD_PRELOAD shim, which shares descriptor numbers with the
 * program it runs in.  gr__client_fd: c's socket descriptor, -1 when not
 * connected (no lock taken).  gr__client_disown_fd: the program has taken
 * descriptor fd over (dup2 onto it, close): if it is c's socket, c forgets
 * it without closing it, so nothing of c's closes the program's
 * descriptor later; the connection then counts as lost (the next call
 * reconnects or fails).  lock: take c->lock (0 only in a child after fork,
 * where another thread of the parent may have held it). */
int gr__client_fd(gr_client *c);
void gr__client_disown_fd(gr_client *c, int fd, int lock);

#endif
