/*
 * fsio.h - small file helpers shared by the checkpoint code (daemon/ckpt/):
 * a whole pread and pwrite, and the fsync of a directory.
 *
 * Threads: any (no state).
 */
#ifndef GR_COMMON_FSIO_H
#define GR_COMMON_FSIO_H

#include <stddef.h>
#include <stdint.h>

/* Write all n bytes of p at off (EINTR retried): 0 or -errno. */
int gr__pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off);

/* Read exactly n bytes at off into p (EINTR retried; end of file before
 * n bytes is -EIO): 0 or -errno. */
int gr__pread_all(int fd, uint8_t *p, size_t n, uint64_t off);

/* fsync the directory name under dfd ("." for dfd itself; dfd may be
 * O_PATH): 0 or -errno. */
int gr__fsync_dirat(int dfd, const char *name);

#endif
