/*
 * backend.h - the tiers below DRAM, as the fetch engine sees them.
 *
 * A miss in DRAM walks a chain of backends in order (the NVMe tier, peers'
 * caches, then the source): each is asked to fill the chunk into the
 * fetch's buffer, on an I/O thread, and answers with one of three classes:
 *   BACKEND_OK    the buffer holds the chunk (the whole of it, verified);
 *   BACKEND_MISS  not here (absent, unusable, the backend offline or slow):
 *                 try the next one;
 *   BACKEND_FAIL  a final error for this chunk (the source says the file is
 *                 gone or changed): the fetch fails with it, nothing below
 *                 is asked.
 * A chunk found below a backend that keeps copies (put != NULL) is written
 * to it behind the reader (write-behind, on a background job, never in the
 * reader's way).  Adding a tier (peers, checkpoint staging) is one backend
 * and a place in the chain.
 *
 * Threads: get, put and drop run on I/O threads, concurrently; a backend
 * touches only its own state (its own locking) and the immutable fields of
 * the request's srcfile.
 */
#ifndef GR_BACKEND_H
#define GR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ids.h"
#include "source.h"

typedef enum backend_result {
    BACKEND_OK = 0,
    BACKEND_MISS = 1,
    BACKEND_FAIL = 2,
} backend_result;

/* What the stats count a backend's hits as. */
typedef enum backend_kind {
    BACKEND_NVME,
    BACKEND_PEER,
    BACKEND_SOURCE,
} backend_kind;

/* One chunk to fill. */
typedef struct backend_req {
    const uint8_t *key;         /* CHUNK_KEY_LEN bytes */
    const srcfile *f;           /* immutable fields only */
    uint64_t idx;               /* chunk index in f */
    uint64_t want;              /* the chunk's length (srcfile_chunk_len) */
    uint8_t *buf;               /* 4096-aligned, cap bytes */
    size_t cap;
    int local_only;             /* a peer asked: peers are not asked in turn */
} backend_req;

/* Why a get did not give the chunk, for counters and the caller. */
typedef struct backend_status {
    int err;                    /* BACKEND_FAIL: -errno the fetch fails with */
    int corrupt;                /* MISS: the backend had it but it failed its check (dropped) */
    char msg[256];              /* FAIL: one line for the client */
} backend_status;

typedef struct backend_ops {
    const char *name;           /* for logs: "nvme", "peer", "source" */
    backend_kind kind;
    /* Fill rq->buf with the chunk; *len gets its length (rq->want on OK). */
    backend_result (*get)(void *self, const backend_req *rq, size_t *len, backend_status *st);
    /* Keep a copy of len bytes (buf 4096-aligned, readable to len rounded
     * up).  0, or -errno (-ECANCELED: the backend chose not to keep it).
     * NULL: this backend keeps no copies. */
    int (*put)(void *self, const uint8_t *key, const void *buf, size_t len);
    /* Forget key (its copy turned out wrong).  May be NULL. */
    void (*drop)(void *self, const uint8_t *key);
} backend_ops;

typedef struct backend {
    const backend_ops *ops;
    void *self;
} backend;

#define BACKEND_MAX 4           /* backends in a chain */

#endif
