/*
 * proofs.h - which users have shown they may read which files: the access
 * proofs of their OPENs (the client's own fd of the file), remembered by
 * (uid, file id) so that a job's later hints for those files can be
 * fetched straight into that user's shared memory.  A hint for a file its
 * user has not proven goes to quarantine (arena.h) until an OPEN does.
 *
 * A proof is for a file's identity (a rewritten file is a new one) and is
 * kept until max proofs push it out, oldest first.  It never grants a read:
 * every read still goes through a handle of a proven OPEN.
 *
 * Threads: the loop thread only.
 */
#ifndef GR_PROOFS_H
#define GR_PROOFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ids.h"

typedef struct proofs proofs;

/* A set of at most max proofs.  0 or -ENOMEM. */
int proofs_new(size_t max, proofs **out);
void proofs_free(proofs **p);

/* uid proved it may read the file id (again: it becomes the newest). */
void proofs_add(proofs *p, uid_t uid, const uint8_t id[FILE_ID_LEN]);

/* Whether uid has proven the file id: 1 or 0. */
int proofs_has(proofs *p, uid_t uid, const uint8_t id[FILE_ID_LEN]);

/* Proofs held (for stats). */
size_t proofs_count(const proofs *p);

#endif
