/*
 * serve_int.h - what the files of the serving layer share (server.c,
 * conn.c, dispatch.c and the op_*.c opcode groups) and nobody else.
 *
 * The layer in three parts:
 *   - server.c: the listening socket, accept with the peer's credentials,
 *     per-uid connection limits, the stats snapshot;
 *   - conn.c: one client connection: its receive loop, output queue and
 *     back-pressure, handles, leases and the segment fds it was sent, and
 *     the reply helpers every opcode uses;
 *   - dispatch.c: decoding, the opcode table ({op, handler, admin-only,
 *     fds it may carry}) and routing; op_*.c: the handlers, one file per
 *     group of opcodes.
 * A new opcode is a handler in an op_*.c file and one row in dispatch.c.
 *
 * Every reply goes through conn_send(); when a reply cannot be built (out
 * of memory) the connection is failed (conn_fail), never left waiting: the
 * client sees the connection drop and libgranary reconnects.
 *
 * Threads: the loop thread only.
 */
#ifndef GR_SERVE_INT_H
#define GR_SERVE_INT_H

#include <event2/event.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "analysis.h"
#include "proto.h"
#include "server.h"
#include "list.h"
#include "usock.h"

#define CONN_MAX_HANDLES   4096          /* open files per connection */
#define CONN_MAX_INFLIGHT  256           /* requests in flight per connection */
#define CONN_MAX_OUTQ      (16u << 20)   /* queued reply bytes before we stop reading */
#define CONN_READ_BATCH    64            /* messages taken per wake-up, for fairness */
#define CONN_MAX_LEASES    65536         /* leases per connection, whatever their bytes */
#define CONN_MAX_GROUPS    64            /* supplementary groups kept per peer */
#define CONN_MAX_FDS       1             /* fds one request may carry (OPEN's proof, a checkpoint) */
#define READ_MAX_CHUNKS    PROTO_MAX_EXTENTS /* chunks one READ/READX may touch */

/* One reply waiting to be sent: a header (and small body) in buf, or an
 * iovec into chunks it holds references on. */
typedef struct outmsg outmsg;
struct outmsg {
    outmsg *next;
    size_t len;                 /* bytes in the message */
    int niov;
    struct iovec iov[1 + READ_MAX_CHUNKS];
    chunk *refs[READ_MAX_CHUNKS];
    int nrefs;
    int nfds;                   /* fds to pass (SCM_RIGHTS): arena segments, borrowed */
    int fds[PROTO_MAX_EXTENTS + 1];
    int own_last_fd;            /* fds[nfds - 1] is the message's own, closed with it */
    uint8_t buf[];              /* header, and a small body if any */
};

/* The peer at the other end, as the kernel told us at accept. */
typedef struct peer_cred {
    uid_t uid;
    gid_t gid;
    pid_t pid;
    int ngroups;                /* supplementary groups (SO_PEERGROUPS) */
    gid_t groups[CONN_MAX_GROUPS];
} peer_cred;

typedef struct conn conn;
struct conn {
    server *srv;
    int fd;
    struct event *ev;
    unsigned id;
    peer_cred cred;
    int is_admin;               /* root, or in [daemon] admin_group (at connect) */
    uint32_t features;          /* PROTO_FEAT_* agreed in HELLO */
    unsigned refs;              /* the loop's + one per request in flight */
    int dead;
    int reading;                /* EV_READ armed */
    int writing;                /* EV_WRITE armed */
    srcfile **handles;          /* handle h is handles[h - 1] */
    ra_state *ra;               /* its read-ahead state is ra[h - 1] */
    uint32_t nhandles;          /* slots allocated */
    hint_list *hints;           /* made at the first HINT */
    dira_stream *dira;          /* its opens in directory order (made at the first open) */
    unsigned inflight;
    uint64_t inflight_bytes;    /* chunk bytes of the READs and READXs in flight */
    chunk **leases;             /* lease L is leases[L - 1]; NULL when free */
    uint32_t *free_leases;      /* stack of free lease ids */
    uint32_t nleases, nfree;    /* slots allocated; ids on the stack */
    uint64_t leased_bytes;      /* arena bytes of the chunks leased */
    uint32_t *segs_sent;        /* per arena segment: the generation whose fd was sent, 0 none */
    int gpu_logged;             /* its GPU path was logged (first REPORT with gpu_clients) */
    an_ref job;                 /* its job (uid, process group) in srv->an */
    outmsg *outq, *outq_tail;
    size_t outq_bytes;
    gr__list link;              /* srv->conns */
};

struct server {
    server_deps d;
    gr__listener lis;
    struct event *lev;
    gr__list conns;             /* every live connection */
    unsigned nconns, next_id;
    gid_t admin_gid;            /* [daemon] admin_group, or (gid_t)-1 */
    analysis *an;               /* how each job reads (analysis.h) */
    unsigned analyze_inflight;  /* ANALYZE replies being built (op_admin.c) */
    /* policy = auto (auto.c) */
    struct event *auto_ev;      /* the tick */
    int auto_busy, auto_stopped;        /* a replay in flight; stopped */
    uint32_t auto_job;          /* what was decided on last: the job, its verdict, when */
    an_class auto_verdict;
    uint64_t auto_decided_req;  /* the job's requests then */
    uint32_t auto_last_id[AN_MAX_JOBS]; /* per slot: the job and its requests at the last tick */
    uint64_t auto_last_req[AN_MAX_JOBS];
    uint8_t rbuf[PROTO_MAX_MSG + 1];    /* one past the maximum, to see oversize */
};

/* ---- conn.c: connections ---- */

/* A connection for the accepted socket fd of a peer with cred: its event is
 * armed and it is on s's list.  NULL (fd closed) on failure. */
conn *conn_new(server *s, int fd, const peer_cred *cred, int is_admin);

conn *conn_ref(conn *c);
void conn_unref(conn **c);

/* Disconnect: drop handles, leases and queued replies, close the fd, and
 * drop the loop's reference.  In-flight requests hold the struct until
 * they end (they see c->dead).  Idempotent. */
void conn_close(conn *c);

/* Fail the connection because a reply could not be built (why: for the
 * log).  The client sees it drop and reconnects; nothing is left waiting. */
void conn_fail(conn *c, const char *why);

/* Re-arm the event for what the connection needs now: reading unless it is
 * over its limits, writing while replies are queued. */
void conn_update_events(conn *c);

/* A message of a header and blen bytes of body room, or NULL (the caller
 * then fails the connection). */
outmsg *outmsg_new(size_t blen);

/* Queue m (the connection owns it now) and try to send. */
void conn_send(conn *c, outmsg *m);

/* Replies: an error (text NULL: strerror), a bodiless success, a body of
 * len bytes copied from body.  On out-of-memory they fail the connection. */
void reply_error(conn *c, uint8_t op, uint32_t req_id, int err, const char *text);
void reply_ok(conn *c, uint8_t op, uint32_t req_id);
void reply_body(conn *c, uint8_t op, uint32_t req_id, const void *body, size_t len);

/* Latency of a request of class op (GR_LAT_*) received at t0 (gr__now_ns). */
void conn_latency(conn *c, unsigned op, uint64_t t0);

/* Handles: a new one for f (the connection takes a reference): the handle,
 * or -EMFILE / -ENOMEM.  conn_handle: the srcfile of handle h, borrowed,
 * or NULL.  conn_drop_handle: 0, or -EBADF. */
int64_t conn_add_handle(conn *c, srcfile *f);
srcfile *conn_handle(conn *c, uint32_t h);
int conn_drop_handle(conn *c, uint32_t h);

/* Lease ch to the client: the chunk (and its arena block) stays put until
 * the client releases it or disconnects.  The lease id, or -1 when the
 * client is at its lease limits (it gets a copy instead). */
int64_t conn_add_lease(conn *c, chunk *ch);
/* Give lease id back: 0, or -1 if the client did not hold it. */
int conn_release_lease(conn *c, uint32_t id);

/* 1 if segment seg's fd (its current generation) must go to c with this
 * reply (marked sent), 0 if c has it already, -1 on out-of-memory. */
int conn_seg_first(conn *c, uint32_t seg);

/* ---- op_read.c: reads, for READ, READX and OPENX ---- */

typedef struct read_args {
    uint8_t op;                 /* PROTO_OP_READ, _READX or _OPENX (the reply's kind) */
    uint32_t req_id;
    int whole;                  /* extents of whole chunks (READX WHOLE, OPENX) */
    ra_state *ra;               /* the handle's read-ahead state, or NULL */
    const proto_attr *attr;     /* OPENX: the attributes its reply carries */
    uint64_t t0;                /* gr__now_ns() when the request came */
} read_args;

/* Read [off, off+len) of f for c and answer as a->op.  f is borrowed (the
 * read takes its own reference). */
void read_start(conn *c, srcfile *f, uint64_t off, uint64_t len, const read_args *a);
/* An OPENX reply whose read did not happen (err: -EAGAIN when IFCHEAP
 * declined it, or the read's error; 0 at the end of the file): the
 * attributes and the status, no bytes. */
void openx_reply_status(conn *c, uint32_t req_id, const proto_attr *a, int err);

/* ---- auto.c: policy = auto ---- */

/* Start the controller's tick (it acts only for tiers whose policy is
 * auto, read at each tick: SIGHUP may change it).  0 or -ENOMEM. */
int auto_start(server *s);
/* Stop the tick; a replay in flight finishes into the void.  Idempotent. */
void auto_stop(server *s);

/* ---- dispatch.c ---- */

/*
 * Decode and act on one received packet of n bytes in c->srv->rbuf
 * (truncated: the kernel cut it), with the nfds fds that came with it
 * (owned: the handler that takes one sets its slot to -1; the rest are
 * closed here).
 */
void dispatch_packet(conn *c, size_t n, int truncated, int *fds, int nfds);

/* ---- the opcode groups (op_*.c): one handler per opcode ---- */

/* fds: the request's fds (at most the row's max); a handler that keeps one
 * sets its slot to -1. */
typedef void (*op_handler)(conn *c, const proto_msg *m, int *fds, int nfds);

void op_hello(conn *c, const proto_msg *m, int *fds, int nfds);    /* op_info.c */
void op_stats(conn *c, const proto_msg *m, int *fds, int nfds);
void op_report(conn *c, const proto_msg *m, int *fds, int nfds);
void op_open(conn *c, const proto_msg *m, int *fds, int nfds);     /* op_file.c */
void op_close(conn *c, const proto_msg *m, int *fds, int nfds);
void op_read(conn *c, const proto_msg *m, int *fds, int nfds);     /* op_read.c */
void op_openx(conn *c, const proto_msg *m, int *fds, int nfds);    /* op_file.c */
void op_release(conn *c, const proto_msg *m, int *fds, int nfds);
void op_hint(conn *c, const proto_msg *m, int *fds, int nfds);     /* op_hint.c */
void op_admin(conn *c, const proto_msg *m, int *fds, int nfds);    /* op_admin.c */
void op_stat(conn *c, const proto_msg *m, int *fds, int nfds);     /* op_meta.c */
void op_readdir(conn *c, const proto_msg *m, int *fds, int nfds);
void op_ckpt_put(conn *c, const proto_msg *m, int *fds, int nfds);  /* op_ckpt.c */
/* ADMIN CKPT_LIST (op_admin routes it here). */
void op_ckpt_list(conn *c, const proto_msg *m);
/* op_peer.c: ADMIN PEERS. */
void op_peers(conn *c, const proto_msg *m);

/* ---- op_meta.c: answers from the datasets' manifests ---- */

#define META_CHAIN 256              /* directories of a path kept for judging */

/* A path's entry in a ready manifest, with the chain from "/" to it. */
typedef struct meta_hit {
    const manifest *m;          /* valid until the next call into the datasets */
    uint32_t idx;
    mf_entry e;
    uint32_t chain[META_CHAIN];
    size_t depth;
    uint32_t valid_ms;          /* how long a client may trust the answer */
} meta_hit;

/* Whether the daemon's own judgement decides for c (access_check judge or
 * none, or root). */
int meta_may_judge(const conn *c);
void meta_cred(const conn *c, access_cred *out);
/* Look norm up in the manifests: 0 and *h; -ENODATA (no manifest can
 * answer: ask the file system), -ENOENT (the manifest says it is not there;
 * judged first), -EACCES; err says why. */
int meta_lookup(conn *c, const char *norm, meta_hit *h, char *err, size_t errlen);
/* 0 if c may search every directory of chain[0..depth-1) and have want (4
 * read, 1 search, 0 nothing) on the last; -EACCES with err set if not. */
int meta_judge(const conn *c, const manifest *m, const uint32_t *chain, size_t depth, int want,
               char *err, size_t errlen);
/* st as the attributes of a reply (handle 0). */
void meta_fill_attr(const conn *c, const struct stat *st, proto_attr *a);

/* ADMIN ANALYZE (op_analyze.c): the jobs' reports, built on an I/O thread.
 * job: 0 for every job the caller may see. */
void admin_analyze(conn *c, uint32_t req_id, uint64_t job);

/* gr__recv_fds_drop's drop: a client's surplus fd to the source's closer. */
static inline void close_later(void *src, int fd)
{
    source_close_later(src, fd);
}

#endif
