/*
 * stage.h - a checkpoint's staged copy in the staging directory, as one
 * stream of bytes.  A single file is N.data.  A set (a container of
 * proto/ckset.h) is a directory N.set/ holding "hdr" (the container's
 * header) and one file per member named by its index ("0", "1", ...), so
 * that each member has an inode of its own: the read path hands a reader a
 * descriptor of exactly that file's bytes before the set is published (a
 * byte range of one container file could not be a descriptor).  Read
 * through stage_pread, either layout is the container: the header, then
 * the members back to back.  A set staged by an older daemon (N.data with
 * "kind set" in its journal) is read as one file.
 *
 * Every file is fallocated to its size at creation, so a full disk says
 * so before a byte is copied.
 *
 * Threads: I/O threads (each stage is one thread's at a time); no state
 * outside the handle.
 */
#ifndef GR_CKPT_STAGE_H
#define GR_CKPT_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "ckset.h"

typedef struct stage stage;

/*
 * Create checkpoint id's staged copy in the directory dir_fd (borrowed),
 * total bytes, every part fallocated, open for writing.  set 0: N.data
 * (hdr ignored).  set 1: hdr holds at least the container's whole header
 * (hdr_len bytes of it read; proto_set_dec_hdr must accept it), and N.set/
 * is made with its parts; with names not NULL, *names and *nnames get the
 * members' names as stage_names gives them (NULL and 0 for a single
 * file).  An existing copy of id is replaced.  0 and *out (stage_close
 * it), or -errno with a reason in err (-EINVAL: a malformed header) and
 * nothing left behind.
 */
int stage_create(int dir_fd, uint64_t id, int set, uint64_t total, const uint8_t *hdr,
                 size_t hdr_len, stage **out, char ***names, uint32_t *nnames, char *err,
                 size_t errlen);

/*
 * Open checkpoint id's staged copy of total bytes for reading: N.set/ if
 * there is one (its header decoded against total: -EBADMSG if it does
 * not decode; each part's size is checked when first read: -EBADMSG if
 * it differs), else N.data.  0 and *out, or -errno (-ENOENT: no copy;
 * -ENOENT and -EBADMSG mean the copy is lost, anything else may pass).
 */
int stage_open(int dir_fd, uint64_t id, uint64_t total, stage **out);

/* Exactly n bytes at container offset off (EINTR retried; a short file
 * is -EIO, a set's part of the wrong size -EBADMSG).  0 or -errno. */
int stage_pread(stage *s, uint8_t *p, size_t n, uint64_t off);

/* Write n bytes at container offset off (a stage from stage_create; the
 * header's bytes go to N.set/hdr like any others).  A part is fsynced
 * when a write moves past it, so stage_sync has only the last to do.
 * 0 or -errno. */
int stage_pwrite(stage *s, const uint8_t *p, size_t n, uint64_t off);

/* fsync every part, and N.set/ itself.  The entry of N.data or N.set in
 * dir_fd is the caller's to make durable (the journal's rename fsyncs the
 * directory).  0 or -errno. */
int stage_sync(stage *s);

/* NULL-safe. */
void stage_close(stage **s);

/* Remove checkpoint id's staged copy, either layout; a missing one is
 * fine. */
void stage_remove(int dir_fd, uint64_t id);

/* A read-only descriptor of member index of set id's copy (N.set/INDEX),
 * or -errno (-ENOENT: no such member, or a set staged as one N.data). */
int stage_member_open(int dir_fd, uint64_t id, uint32_t index);

/*
 * The member names of set id, total bytes (from N.set/hdr, decoded):
 * *names is a malloc'ed array of *n malloc'ed NUL-terminated strings
 * (stage_names_free).  0, or -errno (-ENOENT: a set staged as one N.data,
 * or none; -EBADMSG: a header that does not decode).
 */
int stage_names(int dir_fd, uint64_t id, uint64_t total, char ***names, uint32_t *n);

void stage_names_free(char ***names, uint32_t n);

#endif
