/*
 * preload_int.h - what the LD_PRELOAD shim's two files share: preload.c
 * (descriptors: open, read, dup ...) and preload_stdio.c (FILE streams).
 * Internal to libgranary_preload.so; no other part includes it.
 */
#ifndef GRANARY_PRELOAD_INT_H
#define GRANARY_PRELOAD_INT_H

#define PL_HIDDEN __attribute__((visibility("hidden")))

/* 1 when fd is served through the daemon now (an inherited descriptor is
 * offered to it first), else 0.  Any thread; keeps errno. */
PL_HIDDEN int pl__served(int fd);

/* 1 when fd is a read-only regular file under the shim's roots (it would
 * be offered to the daemon), else 0.  Asks no daemon.  Keeps errno. */
PL_HIDDEN int pl__candidate(int fd);

/* Called once from the shim's constructor, after the inherited
 * descriptors were listed: puts a served stream in place of stdin when
 * descriptor 0 is a candidate (preload_stdio.c). */
PL_HIDDEN void pl__stdio_setup(void);

/* In the child after fork (the shim's atfork handler): the lock of the
 * served mappings (preload_mmap.c) and of the cookie streams
 * (preload_stdio.c), which another thread of the parent may have held,
 * are made new, never waited for: the child has one thread. */
PL_HIDDEN void pl__mmap_fork_child(void);
PL_HIDDEN void pl__stdio_fork_child(void);

/* The served file of fd with a reference for the caller (dropped with
 * pl__file_put, which may close it on the daemon), its gr_file in *f and
 * its size (fixed at open) in *size; NULL when fd is not served. */
struct gr_file;
PL_HIDDEN void *pl__file_get(int fd, struct gr_file **f, long long *size);
PL_HIDDEN void pl__file_put(void *pf);

/* Mark this thread inside libgranary (every wrapper then calls the real
 * function) and back; they nest. */
PL_HIDDEN void pl__busy_enter(void);
PL_HIDDEN void pl__busy_leave(void);

/* Non-zero while this thread is inside libgranary or the shim's own
 * bookkeeping (then every wrapper calls the real function). */
PL_HIDDEN int pl__busy(void);

/* For preload_meta.c: 1 and the daemon's name of absolute path in out when
 * it lies under the shim's roots (known roots only: with none, 0), else 0.
 * Keeps errno. */
PL_HIDDEN int pl__meta_path(const char *path, char *out, size_t outlen);

/* The shim's connection to the daemon (*c; NULL when it cannot be
 * reached) with a reference, given back by pl__conn_put (broken: a call
 * on it failed at the connection level, so the next one reconnects). */
struct gr_client;
PL_HIDDEN void *pl__conn(struct gr_client **c);
PL_HIDDEN void pl__conn_put(void *ref, int broken);

#endif
