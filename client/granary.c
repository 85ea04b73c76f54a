/*
 * granary.c - libgranary (see granary.h): a blocking client over the
 * daemon's SOCK_SEQPACKET socket, using the shared proto/ codec.
 *
 * Reads use READX: the daemon answers with extents of its shared-memory
 * arena (a segment's fd arrives with the first reply that names it; the
 * client maps it read-only once and keeps it) under leases, and the client
 * copies the bytes out and releases the leases in batches: one copy from
 * the cache to the caller's buffer, no socket copy.  Bytes the daemon cannot
 * lease come inline.  Reads are cut into chunk-aligned pieces and up to
 * GR_WINDOW are in flight; a reply that covers less than its piece is
 * followed by a request for the rest.
 *
 * Request ids only grow, so a reply to a call that timed out is recognised
 * as stale and discarded by the next call (its leases released).
 *
 * Reconnection: when the connection fails (the daemon died or restarted),
 * an idempotent call dials the same socket again for up to
 * $GRANARY_RECONNECT_MS and sends its request anew.  Each connection has a
 * generation number; a gr_file opened under an older one is re-opened by
 * path before its next use and must keep its identity (else ESTALE), a
 * gr_ref of an older one is released locally only, and the older
 * connection's segment mappings stay mapped (a gr_ref may point into them)
 * until no gr_ref of that generation is left, or gr_disconnect.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "granary.h"
#include "granary_int.h"
#include "clock.h"
#include "fdpass.h"
#include "ini.h"
#include "dscan.h"
#include "lcache.h"
#include "path.h"
#include "proto.h"
#include "size.h"
#include "usock.h"

_Static_assert(GR_ADMIN_EVICT == PROTO_ADMIN_EVICT && GR_ADMIN_INVALIDATE == PROTO_ADMIN_INVALIDATE &&
                   GR_ADMIN_PIN == PROTO_ADMIN_PIN && GR_ADMIN_UNPIN == PROTO_ADMIN_UNPIN &&
                   GR_ADMIN_HEALTH == PROTO_ADMIN_HEALTH && GR_ADMIN_CONFIG == PROTO_ADMIN_CONFIG,
               "granary.h and proto.h disagree on admin commands");

#define GR_WINDOW 8                     /* READX pieces in flight */
#define GR_PIECE_MIN (1u << 20)         /* pieces are whole chunks, at least this big */
#define GR_MAX_SEGS (1u << 20)          /* arena segments a reply may name (64 TiB of 64 MiB) */
#define GR_RELEASE_BATCH 1              /* leases held before a RELEASE goes out:
                                         * at once, since held leases pin the
                                         * daemon's memory (one send per reply) */
#define GR_DEFAULT_SOCKET "/run/granary/granary.sock"
#define GR_RECONNECT_DEFAULT_MS 30000   /* $GRANARY_RECONNECT_MS unset */
#define GR_DEFAULT_CONFIG "/etc/granary/granary.conf"
#define GR_REPORT_MS 1000               /* lease-cache counters go to the daemon this often */
#define GR_LC_COUNTERS 8                /* of them (and the look-ahead's) */
#define GR_AHEAD_DEFAULT 2              /* look-ahead opens in flight ($GRANARY_LOOKAHEAD) */
#define GR_AHEAD_MAX 8
#define GR_AHEAD_QMAX 262144            /* hinted paths kept for the look-ahead */
#define GR_AHEAD_AGE_MS 1000            /* a look-ahead older than this is not used */
#define GR_GEN_PAGE 4096u               /* bytes per generation-table entry (PROTOCOL.md) */

typedef struct gr_seg {
    const uint8_t *p;                   /* read-only mapping, NULL until received */
    size_t len;                         /* of the mapping */
    size_t dlen;                        /* of its blocks (len less the table) */
    const uint32_t *gens;               /* its generation table (PROTO_FEAT_GENS), or NULL */
} gr_seg;

/* A segment mapping replaced by a renewed segment's (the daemon gave the
 * segment to another uid and back): gr_refs may still point into it, so it
 * stays until gr_disconnect. */
typedef struct gr_stale {
    struct gr_stale *next;
    gr_seg seg;
} gr_stale;

/* The segment mappings of a connection that died while gr_refs pointed
 * into them. */
typedef struct gr_retired {
    struct gr_retired *next;
    gr_seg *segs;
    uint32_t nsegs;
    uint32_t gen;
    uint32_t nrefs;                     /* gr_refs still pointing in; unmapped at 0 */
} gr_retired;

/* A look-ahead open: an OPENX sent for the next hinted path before the
 * caller opens it (ahead_* below). */
typedef struct gr_ahead {
    char *path;
    uint32_t id;                        /* its req_id */
    uint32_t want;                      /* the first chunk's bytes asked for */
    uint64_t sent_ms;                   /* gr__now_ms() when it went out */
    int done;                           /* the reply came: f, or NULL if it failed */
    struct gr_file *f;
} gr_ahead;

struct gr_client {
    int fd;                             /* -1 after a failed reconnect */
    pthread_mutex_t lock;
    char path[108];                     /* the socket, for reconnecting */
    uint32_t gen;                       /* connection generation, from 1 */
    uint32_t nrefs;                     /* gr_refs holding a lease of this generation */
    gr_retired *retired;                /* older generations' mappings still referenced */
    gr_stale *stale;                    /* replaced segment mappings */
    int proof_fd;                       /* sent with the next request (an OPEN's access proof) */
    int need_proof;                     /* the daemon wants proofs: send them from the start */
    int staged_fd;                      /* the fd of the last STAGED reply, until taken, or -1 */
    uint32_t next_id;
    uint32_t max_data;                  /* from HELLO */
    uint32_t features;                  /* PROTO_FEAT_*, from HELLO */
    gr_seg *segs;                       /* arena segments by index */
    uint32_t nsegs;
    uint32_t rel[PROTO_MAX_RELEASE];    /* leases to give back */
    uint32_t nrel;
    pid_t pid;                          /* the process that connected (see gr_disconnect) */
    char errtext[PROTO_MAX_ERRMSG + 1];
    const gr__gpu_hooks *gpu_hooks;     /* the GPU layer (client/gpu.c), or NULL */
    void *gpu_arg;
    uint32_t chunk_size;                /* the daemon's default, from HELLO */
    gr__lcache lc;                      /* leases kept to serve later reads (lcache.h) */
    uint64_t lc_env_max;                /* $GRANARY_LEASE_CACHE, UINT64_MAX unset */
    uint64_t lc_reported[GR_LC_COUNTERS]; /* lease-cache counters as last reported */
    uint64_t report_ms;                 /* gr__now_ms() of the last report */
    gr__meta *meta;                     /* attributes from the daemon's manifests (meta.c) */
    /* Look-ahead opens along the hint list (ahead_* below). */
    char **aq;                          /* hinted paths not asked for yet, from aq_head */
    size_t aq_head, aq_len, aq_cap;
    gr_ahead ahead[GR_AHEAD_MAX];       /* asked for, in hint order */
    uint32_t nahead;
    uint32_t ahead_depth;               /* $GRANARY_LOOKAHEAD, 0: none */
    uint32_t ahead_misses;              /* opens in a row the look-ahead did not foresee */
    int ahead_on;                       /* the last open was the next hinted one */
    int ahead_user;                     /* the queue is the caller's (hints, gr_open_ahead) */
    int hinted;                         /* gr_hint_append since the last gr_hint_clear */
    int ds_listing;                     /* a gr_open lists ds.dir (unlocked) */
    int ds_on;                          /* directory scans feed the look-ahead ($GRANARY_DIR_LOOKAHEAD) */
    gr__dscan ds;                       /* this process's opens in directory order (dscan.h) */
    uint64_t ahead_sent, ahead_used;    /* counters, for REPORT */
    uint8_t rbuf[PROTO_MAX_MSG];        /* replies that do not go to a user buffer */
};

struct gr_file {
    gr_client *c;
    proto_attr a;                       /* a.handle is valid in connection generation gen */
    uint32_t gen;
    int stale;                          /* the re-opened file had another identity: ESTALE */
    char *path;                         /* for re-opening after a reconnect */
    uint8_t *head;                      /* bytes the OPENX brought inline (no lease), or NULL */
    uint32_t head_len;                  /* from offset 0 */
    int staged_fd;                      /* a staged checkpoint's copy (read-only), or -1 */
};

struct gr_ref {
    gr_client *c;
    uint32_t lease;                     /* 0 when the bytes were copied to heap or are ent's */
    uint32_t gen;                       /* the connection the lease belongs to */
    void *heap;
    gr__lent *ent;                      /* a kept lease it reads from, or NULL */
};

static void set_err(gr_client *c, int err, const char *text, size_t len)
{
    if (!text) {
        text = strerror(err);
        len = strlen(text);
    }
    if (len > PROTO_MAX_ERRMSG)
        len = PROTO_MAX_ERRMSG;
    memcpy(c->errtext, text, len);
    c->errtext[len] = '\0';
    errno = err;
}

/* The next request id; 0 is skipped on wrap (it means "unknown" in
 * replies). */
static uint32_t take_id(gr_client *c)
{
    if (c->next_id == 0)
        c->next_id = 1;
    return c->next_id++;
}

/* Why the calling thread's last gr_connect failed. */
static __thread char connect_err[PROTO_MAX_ERRMSG + 192];

const char *gr_strerror_last(gr_client *c)
{
    return c ? c->errtext : connect_err;
}

static int timeout_ms(void)
{
    const char *t = getenv("GRANARY_TIMEOUT_MS");
    long v = t ? strtol(t, NULL, 10) : 0;

    return v > 0 && v < 86400000 ? (int)v : 120000;
}

/* $GRANARY_RECONNECT_MS: how long a call keeps redialling a daemon that
 * went away; 0 disables reconnecting. */
static long reconnect_ms(void)
{
    const char *t = getenv("GRANARY_RECONNECT_MS");
    char *e;
    long v;

    if (!t || !*t)
        return GR_RECONNECT_DEFAULT_MS;
    v = strtol(t, &e, 10);
    return *e || v < 0 ? GR_RECONNECT_DEFAULT_MS : v > 86400000 ? 86400000 : v;
}

/* Send the pending releases (a RELEASE has no reply).  A failure here is
 * not the caller's problem: the daemon releases everything at disconnect. */
static void flush_releases(gr_client *c)
{
    uint8_t req[PROTO_HDR_LEN + 4 * PROTO_MAX_RELEASE];
    ssize_t n;

    if (c->fd < 0)
        c->nrel = 0;                    /* the leases died with the connection */
    if (c->nrel == 0)
        return;
    n = proto_enc_release(req, sizeof(req), take_id(c), c->rel, c->nrel);
    c->nrel = 0;
    while (send(c->fd, req, (size_t)n, MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

static void queue_release(gr_client *c, uint32_t lease)
{
    if (c->nrel == PROTO_MAX_RELEASE)
        flush_releases(c);
    c->rel[c->nrel++] = lease;
}

/* The lease cache lets go of e: its lease goes back if it is of this
 * connection (an older one's died with it). */
static void lc_release(void *arg, const gr__lent *e)
{
    gr_client *c = arg;

    if (e->gen == c->gen)
        queue_release(c, e->lease);
}

/* Tell the daemon how the lease cache did since the last time (REPORT
 * with NOREPLY: nothing to wait for): at most every GR_REPORT_MS, and at
 * disconnect (force).  Lock held. */
static void report_lc(gr_client *c, int force)
{
    static const char *const names[GR_LC_COUNTERS] = {
        "lease_cache_hits",    "lease_cache_hit_bytes",     "lease_cache_kept",
        "lease_cache_expired", "lease_cache_unpinned_hits", "lease_cache_stale",
        "lookahead_opens",     "lookahead_used",
    };
    uint64_t now = gr__now_ms();
    uint64_t cur[GR_LC_COUNTERS] = { c->lc.hits,    c->lc.hit_bytes,     c->lc.kept,
                                     c->lc.expired, c->lc.unpinned_hits, c->lc.stale,
                                     c->ahead_sent, c->ahead_used };
    uint8_t req[PROTO_HDR_LEN + GR_LC_COUNTERS * (2 + 32 + 8)];
    size_t off = 0;
    ssize_t n;
    uint32_t id;
    int any = 0;

    if (c->fd < 0 || (!force && now - c->report_ms < GR_REPORT_MS))
        return;
    c->report_ms = now;
    for (int i = 0; i < GR_LC_COUNTERS; i++) {
        if (cur[i] == c->lc_reported[i])
            continue;
        if (proto_rec_u64(req + PROTO_HDR_LEN, sizeof(req) - PROTO_HDR_LEN, &off, names[i],
                          cur[i] - c->lc_reported[i]) < 0)
            return;
        any = 1;
    }
    if (!any)
        return;
    id = take_id(c);
    n = proto_enc_report(req, sizeof(req), id, req + PROTO_HDR_LEN, off);
    if (n < 0)
        return;
    proto_encode_hdr(req, PROTO_OP_REPORT, PROTO_F_NOREPLY, id, 0,
                     (uint32_t)((size_t)n - PROTO_HDR_LEN));
    while ((n = send(c->fd, req, (size_t)n, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    if (n > 0)
        memcpy(c->lc_reported, cur, sizeof(cur));
}

void gr__report_now(gr_client *c)
{
    if (!c || c->pid != getpid() || pthread_mutex_trylock(&c->lock) != 0)
        return;
    report_lc(c, 1);
    pthread_mutex_unlock(&c->lock);
}

/* Release every lease of a READX reply nobody will read. */
static void drop_readx(gr_client *c, const proto_msg *m)
{
    const proto_readx *rx = proto_msg_readx(m);
    proto_extent e;

    for (uint32_t i = 0; rx && i < rx->nextents; i++) {
        proto_extent_at(m, i, &e);
        queue_release(c, e.lease);
    }
}

static void close_unused(gr_client *c, uint32_t handle);

/* A reply nobody waits for any more (its request timed out, a look-ahead
 * given up): its leases go back, an open's handle is closed. */
static void drop_stale(gr_client *c, const proto_msg *m)
{
    if (proto_msg_readx(m))
        drop_readx(c, m);
    if (m->h.status == 0 && m->h.op == PROTO_OP_OPENX && c->fd >= 0)
        close_unused(c, m->u.openx_reply.attr.handle);
    if ((m->h.flags & PROTO_F_STAGED) && c->staged_fd >= 0) {
        close(c->staged_fd);
        c->staged_fd = -1;
    }
}

/* Segment mapping p of len bytes: with PROTO_FEAT_GENS its blocks are the
 * largest power of two below len and the generation table follows them
 * (PROTOCOL.md, "Kept leases"); a table too small for them is not used. */
static void seg_layout(const gr_client *c, gr_seg *s, const uint8_t *p, size_t len)
{
    size_t d = 1;

    s->p = p;
    s->len = s->dlen = len;
    s->gens = NULL;
    if (!(c->features & PROTO_FEAT_GENS) || len < 2)
        return;
    while (d < len / 2 + len % 2)
        d <<= 1;                        /* d: the least power of two >= len/2 */
    if (d >= len || (len - d) / sizeof(uint32_t) < d / GR_GEN_PAGE)
        return;
    s->dlen = d;
    s->gens = (const uint32_t *)(p + d);
}

/* Keep the lease of whole chunk k, extent e of a reply, in the lease cache
 * (NOKEEP: the daemon's tier holds the chunk outside its policy, so at most
 * one such lease is kept, lcache.h), with its block's generation where the
 * segment has a table: the entry, or NULL when the cache does not keep it
 * (the caller then gives the lease back). */
static gr__lent *lc_keep(gr_client *c, const gr__ckey *k, const proto_extent *e, uint64_t now)
{
    const gr_seg *s = &c->segs[e->seg];
    gr__lent *ent = ((e->flags & PROTO_EXTENT_NOKEEP) ? gr__lc_insert_transient :
                     gr__lc_insert)(&c->lc, k, c->gen, e->lease, s->p + e->off, e->len, now);

    if (ent && s->gens)
        gr__lc_set_gen(ent, s->gens + e->off / GR_GEN_PAGE);
    return ent;
}

/* lc_keep for a chunk that one read has just copied whole: a NOKEEP lease
 * is given back at once (soft where the segment has a generation table),
 * since a reader that takes a whole chunk at a time is not about to make
 * small reads over it, and the daemon's reserve block the lease holds is
 * what the next refused chunk needs: two whole-file readers each keeping
 * their last one left no block of a small tier's reserve for a third, and
 * it went to the heap.  (A chunk that came with an OPENX is kept until a
 * read takes it whole from the cache: serve_local.)  Other leases are kept
 * as lc_keep does.  1 when the lease is taken care of, 0 when the caller
 * gives it back itself. */
static int lc_keep_read(gr_client *c, const gr__ckey *k, const proto_extent *e, uint64_t now)
{
    gr__lent *ent = lc_keep(c, k, e, now);
    int kept = ent != NULL;

    if (ent && ent->transient) {
        gr__lc_retire(&c->lc, ent);
        c->lc.kept--;                   /* not kept after all (REPORT) */
    }
    return kept;
}

/* Map the segments a READX reply names for the first time, from the fds
 * that came with it (in the order of first mention).  Unused fds are
 * closed.  0 or -EPROTO (an extent outside its segment, a segment never
 * received). */
static int map_segments(gr_client *c, const proto_msg *m, const int *fds, int nfds)
{
    const proto_readx *rx = proto_msg_readx(m);
    int next = 0, rc = 0;
    proto_extent e;

    for (uint32_t i = 0; i < rx->nextents && rc == 0; i++) {
        proto_extent_at(m, i, &e);
        if (e.seg >= GR_MAX_SEGS) {
            rc = -EPROTO;               /* no arena is that large: a bogus reply */
            break;
        }
        if (e.seg >= c->nsegs) {
            gr_seg *ns = realloc(c->segs, (e.seg + 1) * sizeof(*ns));
            if (!ns) {
                rc = -ENOMEM;
                break;
            }
            memset(ns + c->nsegs, 0, (e.seg + 1 - c->nsegs) * sizeof(*ns));
            c->segs = ns;
            c->nsegs = e.seg + 1;
        }
        if (e.flags & PROTO_EXTENT_FD) {
            struct stat st;
            void *p;
            if (next >= nfds || fstat(fds[next], &st) < 0) {
                rc = -EPROTO;
                break;
            }
            p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fds[next], 0);
            if (p == MAP_FAILED) {
                rc = -errno;
                break;
            }
            /* A segment the daemon advised for transparent huge pages is
             * mapped with 2 MiB entries here too only if this mapping asks
             * (shmem_enabled = advise); hugetlb segments are huge anyway,
             * and a plain one ignores it. */
            if (c->segs[e.seg].p) {     /* a renewed segment: keep the old mapping */
                gr_stale *o = malloc(sizeof(*o));
                if (!o) {
                    munmap(p, (size_t)st.st_size);
                    rc = -ENOMEM;
                    break;
                }
                o->seg = c->segs[e.seg];
                o->next = c->stale;
                c->stale = o;
            }
            seg_layout(c, &c->segs[e.seg], p, (size_t)st.st_size);
            madvise(p, c->segs[e.seg].dlen, MADV_HUGEPAGE);
            close(fds[next++]);         /* the mapping holds the memfd */
        } else if (!c->segs[e.seg].p) {
            rc = -EPROTO;               /* a segment we were never given */
            break;
        }
        if (e.off > c->segs[e.seg].dlen || e.len > c->segs[e.seg].dlen - e.off)
            rc = -EPROTO;
    }
    for (int i = next; i < nfds; i++)
        close(fds[i]);
    return rc;
}

/* Receive one whole message into c->rbuf and decode it; a READX reply's
 * segments are mapped before it is returned. */
static int recv_one(gr_client *c, proto_msg *m)
{
    int fds[PROTO_MAX_EXTENTS], nfds = 0;
    size_t used;
    ssize_t n;
    int rc;

    n = gr__recv_fds(c->fd, c->rbuf, sizeof(c->rbuf), fds, PROTO_MAX_EXTENTS, &nfds, 0, NULL);
    if (n == -EAGAIN || n == -EWOULDBLOCK)
        return -ETIMEDOUT;
    if (n < 0)
        return (int)n;
    if (n == 0) {
        gr__close_fds(fds, nfds);
        return -ECONNRESET;
    }
    rc = proto_decode(c->rbuf, (size_t)n, m, &used);
    if (rc == 0 && !(m->h.flags & PROTO_F_REPLY))
        rc = -EPROTO;
    /* A staged checkpoint's OPEN: its copy's fd comes last. */
    if (rc == 0 && (m->h.flags & PROTO_F_STAGED)) {
        if (nfds == 0)
            return -EPROTO;
        if (c->staged_fd >= 0)
            close(c->staged_fd);
        c->staged_fd = fds[--nfds];
    }
    if (rc == 0 && proto_msg_readx(m))
        return map_segments(c, m, fds, nfds);
    gr__close_fds(fds, nfds);
    return rc != 0 ? -EPROTO : 0;
}

static int ahead_claim(gr_client *c, proto_msg *m);
static void ahead_reset(gr_client *c, int queue);

/* recv_one, the replies to look-ahead opens taken aside (ahead_claim). */
static int recv_msg(gr_client *c, proto_msg *m)
{
    int rc;

    while ((rc = recv_one(c, m)) == 0 && c->nahead && ahead_claim(c, m))
        ;
    return rc;
}

/* Send one request and wait for its reply (stale replies are skipped).
 * Returns 0 with *m filled (m->h.status may be < 0), or -errno. */
static int call(gr_client *c, const void *req, size_t len, uint32_t id, proto_msg *m)
{
    struct iovec iov = { (void *)req, len };
    ssize_t n;
    int rc;

    n = gr__send_fds(c->fd, &iov, 1, &c->proof_fd, c->proof_fd >= 0, 0);
    if (n == -EPIPE || n == -ECONNRESET) {
        /* The daemon may have refused us (max_clients, an unidentified
         * peer) and closed before our request went out: its reason is
         * waiting in our receive queue. */
        int fds[1], nfds;
        ssize_t r = gr__recv_fds(c->fd, c->rbuf, sizeof(c->rbuf), fds, 0, &nfds, MSG_DONTWAIT,
                                 NULL);
        size_t used;
        if (r > 0 && proto_decode(c->rbuf, (size_t)r, m, &used) == 0 && m->h.req_id == 0 &&
            m->h.status < 0)
            return 0;
    }
    if (n < 0)
        return n == -EAGAIN ? -ETIMEDOUT : n == -EPIPE ? -ECONNRESET : (int)n;
    for (;;) {
        rc = recv_msg(c, m);
        if (rc < 0)
            return rc;
        /* Id 0 is never ours: the daemon could not read our request's
         * header, and this error is the answer to it. */
        if (m->h.req_id == id || (m->h.req_id == 0 && m->h.status < 0))
            return 0;
        drop_stale(c, m);
    }
}

/* Turn an error reply into errno + text; returns -1. */
static int fail_reply(gr_client *c, const proto_msg *m)
{
    set_err(c, -m->h.status, m->u.error.len ? m->u.error.text : NULL, m->u.error.len);
    return -1;
}

static int fail(gr_client *c, int rc)
{
    set_err(c, -rc, NULL, 0);
    return -1;
}

static int call_re(gr_client *c, const void *req, size_t len, uint32_t id, proto_msg *m);

/* call() for a request whose success reply must carry opcode op: 0 with *m
 * filled, or -1 with errno and the reason set (transport failure, the
 * daemon's error reply, or a reply of another kind). */
static int call_ok(gr_client *c, const void *req, size_t len, uint32_t id, uint8_t op,
                   proto_msg *m)
{
    int rc = call_re(c, req, len, id, m);

    if (rc < 0)
        return fail(c, rc);
    if (m->h.status < 0)
        return fail_reply(c, m);
    if (m->h.op != op)
        return fail(c, -EPROTO);
    return 0;
}

/* Open a connection to c->path and say HELLO: c->fd and c->max_data set,
 * 0; or -errno with c->fd closed (-1). */
/*
 * The connection's socket lives at descriptor GR_FD_FLOOR or above (half
 * the descriptor limit when that is lower), not at the lowest free number:
 * programs pick small numbers for themselves (a shell's `exec 4<file`
 * dup2s onto 4 whatever is there), and a library descriptor in that range
 * gets clobbered.  Returns the descriptor to use (fd itself if it cannot
 * be moved).
 */
#define GR_FD_FLOOR 512
static int fd_high(int fd)
{
    struct rlimit rl;
    int floor = GR_FD_FLOOR, n;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)floor * 2)
        floor = (int)(rl.rlim_cur / 2);
    if (fd < 0 || fd >= floor)
        return fd;
    n = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (n < 0)
        return fd;
    close(fd);
    return n;
}

static void drop_conn(gr_client *c);

/* Whether c was inherited across fork: its connection, leases and handles
 * are the parent's, and nothing may be sent on them from here. */
static int inherited(const gr_client *c)
{
    return c->pid != getpid();
}

int gr__client_fd(gr_client *c)
{
    return __atomic_load_n(&c->fd, __ATOMIC_RELAXED);
}

void gr__client_disown_fd(gr_client *c, int fd, int lock)
{
    if (lock)
        pthread_mutex_lock(&c->lock);
    if (c->fd == fd) {
        __atomic_store_n(&c->fd, -1, __ATOMIC_RELAXED);
        /* The connection is lost as if it broke: its handles, leases and
         * look-aheads go with it (the next call reconnects on a new
         * generation, re-opening files by path).  Not in a forked child
         * (lock 0), whose copy of the client is only freed. */
        if (lock)
            drop_conn(c);
    }
    if (lock)
        pthread_mutex_unlock(&c->lock);
}

static int dial(gr_client *c)
{
    int ms = timeout_ms();
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    uint8_t req[PROTO_HDR_LEN + PROTO_HELLO_LEN];
    proto_hello hello = { .version = PROTO_VERSION, .max_msg = PROTO_MAX_MSG,
                          .features = PROTO_FEAT_NOKEEP | PROTO_FEAT_GENS };
    proto_msg m;
    uint32_t id;
    int rc;

    c->fd = fd_high(gr__unix_connect(c->path, SOCK_SEQPACKET));
    if (c->fd < 0) {
        rc = c->fd;
        goto fail;
    }
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    id = take_id(c);
    proto_enc_hello(req, sizeof(req), 0, id, &hello);
    rc = call(c, req, sizeof(req), id, &m);
    if (rc < 0)
        goto fail;
    rc = m.h.status;
    if (rc < 0) {
        fail_reply(c, &m);          /* the daemon's reason, for gr_strerror_last */
        goto fail;
    }
    rc = -EPROTONOSUPPORT;
    if (m.h.op != PROTO_OP_HELLO || m.u.hello.version != PROTO_VERSION)
        goto fail;
    c->max_data = m.u.hello.max_data < PROTO_MAX_DATA ? m.u.hello.max_data : PROTO_MAX_DATA;
    rc = -EPROTO;
    if (c->max_data == 0)
        goto fail;
    c->chunk_size = m.u.hello.chunk_size;
    c->features = m.u.hello.features;
    gr__lc_configure(&c->lc,
                     m.u.hello.lease_cache < c->lc_env_max ? m.u.hello.lease_cache : c->lc_env_max,
                     m.u.hello.lease_ttl_ms);
    return 0;
fail:
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    return rc;
}

/* munmap one segment mapping, telling the GPU layer first (it may have
 * registered the mapping with the CUDA driver). */
static void unmap_one(gr_client *c, const gr_seg *seg)
{
    if (c->gpu_hooks)
        c->gpu_hooks->unmap(c->gpu_arg, seg->p, seg->len);
    munmap((void *)seg->p, seg->len);
}

static void unmap_segs(gr_client *c, gr_seg *segs, uint32_t nsegs)
{
    for (uint32_t i = 0; i < nsegs; i++)
        if (segs[i].p)
            unmap_one(c, &segs[i]);
    free(segs);
}

/* Forget the current connection (its handles, leases and pending
 * releases die with it).  Its mappings are unmapped, or kept on the
 * retired list while gr_refs of its generation are out. */
static void drop_conn(gr_client *c)
{
    gr_retired *r;

    /* Kept leases die with the connection; entries a gr_ref still reads
     * stay with it (its generation's mappings are retired below). */
    gr__lc_clear(&c->lc);
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    ahead_reset(c, 0);          /* (their handles died with the connection) */
    c->nrel = 0;
    if (c->nrefs && (r = calloc(1, sizeof(*r)))) {
        r->segs = c->segs;
        r->nsegs = c->nsegs;
        r->gen = c->gen;
        r->nrefs = c->nrefs;
        r->next = c->retired;
        c->retired = r;
    } else {
        /* Out of memory with refs out: leak the mappings rather than
         * pull them from under a gr_ref. */
        if (!c->nrefs)
            unmap_segs(c, c->segs, c->nsegs);
    }
    c->segs = NULL;
    c->nsegs = 0;
    c->nrefs = 0;
    c->gen++;
}

/* Whether rc says the connection (not the request) failed. */
static int conn_lost(int rc)
{
    return rc == -ECONNRESET || rc == -EPIPE || rc == -ENOTCONN || rc == -ECONNREFUSED ||
           rc == -ENOENT || rc == -ECONNABORTED;
}

/*
 * After a call failed with rc: if the connection is lost (or was lost
 * before) and reconnecting is enabled, drop it and dial again until
 * *deadline (set on the first failure of this call, 0 before), sleeping
 * between tries.  Returns 1 when connected again (retry the request), 0
 * when the caller should fail with rc.  Lock held.
 */
static int reconnect(gr_client *c, int rc, uint64_t *deadline)
{
    long window = reconnect_ms();
    unsigned nap = 10;

    if (!conn_lost(rc) || window == 0)
        return 0;
    if (*deadline == 0)
        *deadline = gr__now_ms() + (uint64_t)window;
    if (c->fd >= 0)
        drop_conn(c);
    for (;;) {
        struct timespec ts;
        if (dial(c) == 0)
            return 1;
        if (gr__now_ms() >= *deadline)
            return 0;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)nap * 1000000;
        nanosleep(&ts, NULL);
        if (nap < 250)
            nap *= 2;
    }
}

/* Make sure c has a live connection before a request: 0, or -errno (the
 * daemon is away and did not come back within the reconnect window). */
static int ensure_conn(gr_client *c, uint64_t *deadline)
{
    if (c->fd >= 0)
        return 0;
    return reconnect(c, -ENOTCONN, deadline) ? 0 : -ENOTCONN;
}

/* call() with reconnection: the same request bytes are sent again on a
 * new connection (ids only grow, so they cannot be confused).  Only for
 * requests that carry no connection state (no file handle). */
static int call_re(gr_client *c, const void *req, size_t len, uint32_t id, proto_msg *m)
{
    uint64_t deadline = 0;
    int rc = ensure_conn(c, &deadline);

    if (rc < 0)
        return -ECONNRESET;
    for (;;) {
        rc = call(c, req, len, id, m);
        if (rc == 0 || !reconnect(c, rc, &deadline))
            return conn_lost(rc) ? -ECONNRESET : rc;
    }
}

gr_client *gr_connect(const char *socket_path)
{
    char path[GR_SUN_PATH_MAX], cfgerr[256] = "";
    const char *cfg = NULL, *from = "the argument";
    gr_client *c;
    int rc;

    connect_err[0] = '\0';
    if (socket_path && *socket_path) {
        from = "the argument";
    } else if ((socket_path = getenv("GRANARY_SOCKET")) && *socket_path) {
        from = "$GRANARY_SOCKET";
    } else {
        /* The daemon's own reader (common/ini.h): both see the same file
         * the same way.  No file (or one we may not read) or no key: the
         * default socket.  A file the daemon would refuse: an error, not a
         * guess. */
        cfg = getenv("GRANARY_CONFIG");
        cfg = cfg && *cfg ? cfg : GR_DEFAULT_CONFIG;
        rc = gr__ini_get(cfg, "daemon", "socket", path, sizeof(path), cfgerr, sizeof(cfgerr));
        if (rc == 0) {
            socket_path = path;
            from = "[daemon] socket of the configuration";
        } else if (rc == -ENOENT || rc == -EACCES) {
            socket_path = GR_DEFAULT_SOCKET;
            from = "the default";
        } else {
            snprintf(connect_err, sizeof(connect_err), "cannot read the socket path: %s", cfgerr);
            errno = -rc;
            return NULL;
        }
    }
    if (strlen(socket_path) >= GR_SUN_PATH_MAX) {
        snprintf(connect_err, sizeof(connect_err), "socket path too long: %.200s", socket_path);
        errno = ENAMETOOLONG;
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    strcpy(c->path, socket_path);
    pthread_mutex_init(&c->lock, NULL);
    c->next_id = 1;
    c->gen = 1;
    c->pid = getpid();
    c->proof_fd = -1;
    c->staged_fd = -1;
    c->lc_env_max = UINT64_MAX;
    c->ahead_depth = GR_AHEAD_DEFAULT;
    {
        const char *v = getenv("GRANARY_LOOKAHEAD");
        if (v && *v) {
            long d = strtol(v, NULL, 10);
            c->ahead_depth = d <= 0 ? 0 : d > GR_AHEAD_MAX ? GR_AHEAD_MAX : (uint32_t)d;
        }
    }
    {
        const char *v = getenv("GRANARY_DIR_LOOKAHEAD");
        c->ds_on = !(v && *v && strtol(v, NULL, 10) <= 0);
        gr__ds_init(&c->ds);
    }
    {
        const char *v = getenv("GRANARY_LEASE_CACHE");
        uint64_t b;
        if (v && *v && gr__size_parse(v, &b) == 0)
            c->lc_env_max = b;
    }
    if (gr__lc_init(&c->lc, lc_release, c) < 0 || !(c->meta = gr__meta_new())) {
        if (c->meta)
            gr__meta_free(c->meta);
        pthread_mutex_destroy(&c->lock);
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    rc = dial(c);
    if (rc < 0) {
        if (c->errtext[0])
            snprintf(connect_err, sizeof(connect_err), "granaryd at %.108s refused: %s", c->path,
                     c->errtext);
        else
            snprintf(connect_err, sizeof(connect_err), "cannot reach granaryd at %.108s (%s): %s%s",
                     c->path, from, strerror(-rc),
                     rc == -ENOENT || rc == -ECONNREFUSED ? " (is granaryd running?)" : "");
        gr_disconnect(c);
        errno = -rc;
        return NULL;
    }
    return c;
}

void gr_disconnect(gr_client *c)
{
    if (!c)
        return;
    if (inherited(c)) {
        /* Inherited across fork (the shim and the Python package free the
         * parent's client at the child's first call): the connection, its
         * leases and its CUDA state are the parent's.  Our copy of the
         * socket closes without a word on it: a RELEASE or REPORT from here
         * would give back leases the parent reads from, and lease ids the
         * daemon hands out again.  The GPU state is left as it is (CUDA
         * does not work in a forked child). */
        if (c->fd >= 0)
            close(c->fd);
        c->fd = -1;
        c->gpu_hooks = NULL;
    }
    if (c->gpu_hooks)
        c->gpu_hooks->fini(c->gpu_arg);     /* waits for its copies, releases its refs */
    c->gpu_hooks = NULL;
    report_lc(c, 1);
    gr__lc_fini(&c->lc);
    flush_releases(c);
    unmap_segs(c, c->segs, c->nsegs);
    while (c->stale) {
        gr_stale *o = c->stale;
        c->stale = o->next;
        unmap_one(c, &o->seg);
        free(o);
    }
    while (c->retired) {
        gr_retired *r = c->retired;
        c->retired = r->next;
        unmap_segs(c, r->segs, r->nsegs);
        free(r);
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    ahead_reset(c, 1);                      /* (no CLOSE: the connection is gone) */
    gr__ds_fini(&c->ds);
    if (c->staged_fd >= 0)
        close(c->staged_fd);
    gr__meta_free(c->meta);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Open path for reading as this process, the access proof an OPEN
 * carries: the daemon hands out a file's bytes only to a client that could
 * read it itself.  The fd, or -errno. */
static int open_proof(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

    return fd >= 0 ? fd : -errno;
}

/* The daemon refused an OPEN we could not prove (proof_err < 0): say why
 * in the caller's terms. */
static void proof_failed(gr_client *c, const char *path, int proof_err)
{
    char text[PROTO_MAX_ERRMSG];

    snprintf(text, sizeof(text), "open %.200s: %s (the daemon serves only files you can open)",
             path, strerror(-proof_err));
    set_err(c, -proof_err, text, strlen(text));
}

static void close_unused(gr_client *c, uint32_t handle);
static int open_finish(gr_client *c, const char *path, proto_msg *m, uint32_t want,
                       gr_file **fp);
static void file_free(gr_file *f);
static void ahead_topup(gr_client *c);
static gr_file *ahead_take(gr_client *c, const char *path);
static void ahead_queue(gr_client *c, const gr_hint *h, char *const *abs, size_t n);
static void ahead_scan(gr_client *c, const char *path);
static void scan_list_unlock(gr_client *c);

/* Chunk idx of f, as the lease cache names it. */
static gr__ckey chunk_of(const gr_file *f, uint64_t idx)
{
    return (gr__ckey){ f->a.dev, f->a.ino, f->a.size, f->a.mtime_sec, f->a.mtime_nsec,
                       f->a.chunk_size, idx };
}

/*
 * memcpy in pieces of at most 256 KiB, for copies of cached bytes out to
 * the caller.  glibc's memcpy switches to non-temporal stores above about
 * three quarters of a thread's share of the L3 (a few MiB here), which
 * bypass the cache: a 4 MiB chunk copied whole into a buffer the caller
 * reads next ran at 0.55-0.6x the same copy in pieces (17 against 30 GB/s
 * into a reused buffer, 16.5 against 18.3 into fresh memory, on this
 * machine), and below the kernel's page-cache pread, which copies with
 * ordinary stores.  Pieces keep every copy under the threshold.
 */
static void copy_out(void *dst, const void *src, size_t n)
{
    const size_t piece = 256u << 10;
    uint8_t *d = dst;
    const uint8_t *s = src;

    while (n > piece) {
        memcpy(d, s, piece);
        d += piece;
        s += piece;
        n -= piece;
    }
    memcpy(d, s, n);
}

/*
 * The bytes of a whole-chunk reply (READX with WHOLE, or OPENX) to a
 * request for [poff, poff+plen) of f.  Its extents are whole chunks, the
 * first the one holding poff: each is kept in the lease cache where it fits
 * (else its lease is queued for release), and its overlap with the range is
 * copied to dst (dst[0] is the byte at poff; dst NULL copies nothing).
 * Inline bytes follow the extents, or start at poff when there are none.
 * Returns how many bytes of the range from poff the reply covered, or
 * -EPROTO for a reply that breaks these rules (every lease of it released).
 * Lock held.
 */
static int64_t take_whole(gr_client *c, const gr_file *f, const proto_msg *m, uint64_t poff,
                          uint64_t plen, uint8_t *dst)
{
    const proto_readx *rx = proto_msg_readx(m);
    uint64_t cs = f->a.chunk_size, size = f->a.size, pend = poff + plen, now = gr__now_ms();
    uint64_t pos = rx->nextents && cs ? poff / cs * cs : poff;
    proto_extent e;
    uint32_t i;

    for (i = 0; i < rx->nextents; i++) {
        uint64_t want, from, to;
        const uint8_t *p;
        gr__ckey k;
        int kept;
        proto_extent_at(m, i, &e);
        want = pos < size ? (size - pos < cs ? size - pos : cs) : 0;
        if (cs == 0 || want == 0 || e.len != want || (i > 0 && pos >= pend))
            break;
        p = c->segs[e.seg].p + e.off;
        from = pos > poff ? pos : poff;
        to = pos + e.len < pend ? pos + e.len : pend;
        if (dst && to > from)
            copy_out(dst + (from - poff), p + (from - pos), to - from);
        k = chunk_of(f, pos / cs);
        kept = dst && from == pos && to == pos + e.len ? lc_keep_read(c, &k, &e, now)
                                                         : lc_keep(c, &k, &e, now) != NULL;
        if (!kept)
            queue_release(c, e.lease);
        pos += e.len;
    }
    if (i < rx->nextents) {
        for (; i < rx->nextents; i++) {
            proto_extent_at(m, i, &e);
            queue_release(c, e.lease);
        }
        return -EPROTO;
    }
    if (rx->inline_len) {
        if (pos < poff || pos >= pend || rx->inline_len > pend - pos)
            return -EPROTO;
        if (dst)
            memcpy(dst + (pos - poff), rx->inline_data, rx->inline_len);
        pos += rx->inline_len;
    }
    return (int64_t)((pos < pend ? pos : pend) - poff);
}

/* Whether reads ask for whole chunks to keep (the daemon lets us). */
static int lc_on(const gr_client *c)
{
    return c->lc.max > 0;
}

gr_file *gr_open(gr_client *c, const char *path)
{
    uint8_t req[PROTO_HDR_LEN + PROTO_OPENX_PREFIX + PROTO_MAX_PATH];
    char abs[PROTO_MAX_PATH + 1];
    size_t len;
    gr_file *f = NULL;
    proto_msg m;
    uint32_t id, want;
    ssize_t n;
    int rc, proof;

    pthread_mutex_lock(&c->lock);
    if (path && *path && *path != '/') {
        /* Relative: against this process's working directory, now. */
        rc = gr__path_abs(path, abs, sizeof(abs));
        if (rc < 0) {
            fail(c, rc);
            goto out;
        }
        path = abs;
    }
    len = path ? strlen(path) : 0;
    if (len && (c->nahead || c->aq_head < c->aq_len) && (f = ahead_take(c, path))) {
        ahead_topup(c);
        ahead_scan(c, path);
        c->errtext[0] = '\0';
        goto out;
    }
    /* One round trip: the open and, where it costs no source read the
     * caller may not want (a file of one chunk, or chunks in DRAM), the
     * first chunk, kept as a lease for the reads that follow. */
    want = lc_on(c) ? c->chunk_size : 0;
    id = take_id(c);
    n = proto_enc_openx(req, sizeof(req), id, 0, want, PROTO_OPENX_IFCHEAP, path, len);
    if (n < 0) {
        fail(c, len == 0 ? -EINVAL : -ENAMETOOLONG);
        goto out;
    }
    /* The first OPEN goes without a proof: a daemon that wants one (the
     * caller is not root, [daemon] access_check = fd) says ENOKEY, and from
     * then on every OPEN on this client carries one.  A daemon that does
     * not costs no open(2) on the file system here. */
    proof = 0;
    for (;;) {
        if (c->need_proof) {
            proof = open_proof(path);
            c->proof_fd = proof >= 0 ? proof : -1;
        }
        rc = call_ok(c, req, (size_t)n, id, PROTO_OP_OPENX, &m);
        if (c->proof_fd >= 0)
            close(c->proof_fd);
        c->proof_fd = -1;
        if (rc < 0 && errno == ENOKEY && !c->need_proof) {
            c->need_proof = 1;
            ahead_reset(c, 0);                  /* (those out went without one) */
            id = take_id(c);
            n = proto_enc_openx(req, sizeof(req), id, 0, want, PROTO_OPENX_IFCHEAP, path, len);
            continue;
        }
        break;
    }
    if (rc < 0) {
        if (errno == ENOKEY)                    /* we could not open it ourselves */
            proof_failed(c, path, proof < 0 ? proof : -EACCES);
        goto out;
    }
    rc = open_finish(c, path, &m, want, &f);
    if (rc < 0) {
        fail(c, rc);
        goto out;
    }
    if (c->ahead_on)
        ahead_topup(c);
    ahead_scan(c, path);
    c->errtext[0] = '\0';
out:
    if (c->staged_fd >= 0) {            /* a reply we did not keep */
        close(c->staged_fd);
        c->staged_fd = -1;
    }
    scan_list_unlock(c);
    return f;
}

/* Unlock c; first, where the directory scan asked for its listing, list
 * the directory with the lock let go (a slow file system's readdir must
 * not hold up the client's other threads), then give it the listing. */
static void scan_list_unlock(gr_client *c)
{
    char *dir = NULL;
    gr__dlist l;
    int rc, err = errno;

    if (c->ds.want_list && !c->ds_listing && c->ds.dir && (dir = strdup(c->ds.dir)))
        c->ds_listing = 1;
    pthread_mutex_unlock(&c->lock);
    if (!dir)
        return;
    rc = gr__ds_list(c, dir, &l);
    pthread_mutex_lock(&c->lock);
    c->ds_listing = 0;
    gr__ds_listed(&c->ds, dir, rc, &l);
    pthread_mutex_unlock(&c->lock);
    free(dir);
    errno = err;
}

/* The gr_file of path from m, a successful OPENX reply to a request that
 * asked for want bytes of the first chunk: *fp, 0; or -errno with the
 * reply's handle closed and its leases released.  Lock held. */
static int open_finish(gr_client *c, const char *path, proto_msg *m, uint32_t want,
                       gr_file **fp)
{
    gr_file *f = calloc(1, sizeof(*f));

    *fp = NULL;
    if (!f || !(f->path = strdup(path))) {
        drop_readx(c, m);
        close_unused(c, m->u.openx_reply.attr.handle);
        free(f);
        return -ENOMEM;
    }
    f->c = c;
    f->a = m->u.openx_reply.attr;
    f->gen = c->gen;
    f->staged_fd = -1;
    if (m->h.flags & PROTO_F_STAGED) {
        f->staged_fd = c->staged_fd;
        c->staged_fd = -1;
    }
    if (m->u.openx_reply.read_status == 0) {
        const proto_readx *rx = &m->u.openx_reply.rx;
        uint64_t plen = want < f->a.size ? want : f->a.size;
        /* Bytes that came inline (another uid's chunk, no arena block) are
         * kept too: the read that follows needs no round trip either. */
        if (rx->nextents == 0 && rx->inline_len && (f->head = malloc(rx->inline_len))) {
            memcpy(f->head, rx->inline_data, rx->inline_len);
            f->head_len = rx->inline_len;
        } else if (take_whole(c, f, m, 0, plen, NULL) < 0) {
            close_unused(c, f->a.handle);
            file_free(f);
            return -EPROTO;
        }
        flush_releases(c);
    }
    *fp = f;
    return 0;
}

/* Free f's memory (its handle is the caller's business). */
static void file_free(gr_file *f)
{
    free(f->head);
    if (f->staged_fd >= 0)
        close(f->staged_fd);
    free(f->path);
    free(f);
}

/*
 * Look-ahead opens (issue 14).  A job that hinted its order (gr_hint_append)
 * opens its files in that order; each open is a round trip, paid while the
 * training loop waits.  So the hinted paths (ranges from offset 0) are kept
 * here, and each open sends the OPENX of the next GR_AHEAD_DEFAULT of them
 * without waiting ($GRANARY_LOOKAHEAD, 0..8): their replies arrive while the
 * caller works on this file, and the open of the next one takes its reply
 * (with its first chunk, kept in the lease cache) from the socket at once.
 * The caller may open other files in between, or skip some: a look-ahead
 * passed over is given up (its handle closed once its reply is in); after
 * 2 x GR_AHEAD_MAX opens in a row that it did not foresee it stops until the
 * next gr_hint_append.  Where the daemon wants access proofs, each
 * look-ahead carries one: the caller's own open(2) of that file, made when
 * its OPENX goes out (the open the caller's gr_open would make anyway, done
 * one or two files early); a path this process cannot open is not sent,
 * and the caller's own open of it says why.  Lock held throughout.
 */

/* Give up look-ahead a (the slot is the caller's to drop): a file that
 * came is closed, a reply still out is closed when it comes. */
static void ahead_give_up(gr_client *c, gr_ahead *a)
{
    if (a->done && a->f) {
        if (c->fd >= 0)
            close_unused(c, a->f->a.handle);
        file_free(a->f);
    }
    free(a->path);              /* (a reply still out is dropped when it comes) */
}

/* Drop look-aheads [0, k) and shift the rest down. */
static void ahead_shift(gr_client *c, uint32_t k)
{
    memmove(c->ahead, c->ahead + k, (c->nahead - k) * sizeof(c->ahead[0]));
    c->nahead -= k;
}

/* Give up every look-ahead; with queue, forget the hinted paths too. */
static void ahead_reset(gr_client *c, int queue)
{
    for (uint32_t i = 0; i < c->nahead; i++)
        ahead_give_up(c, &c->ahead[i]);
    c->nahead = 0;
    c->ahead_misses = 0;
    if (!queue)
        return;
    c->ahead_on = 0;
    c->ahead_user = 0;
    for (size_t i = c->aq_head; i < c->aq_len; i++)
        free(c->aq[i]);
    free(c->aq);
    c->aq = NULL;
    c->aq_head = c->aq_len = c->aq_cap = 0;
}

/* Put path p (taken) at the end of the look-ahead's queue: 0, or -1 when
 * it is full (GR_AHEAD_QMAX not yet asked for) or memory is short (p freed). */
static int ahead_push(gr_client *c, char *p)
{
    if (c->aq_head > 0 && c->aq_head * 2 >= c->aq_len) {    /* reclaim the front */
        memmove(c->aq, c->aq + c->aq_head, (c->aq_len - c->aq_head) * sizeof(*c->aq));
        c->aq_len -= c->aq_head;
        c->aq_head = 0;
    }
    if (c->aq_len - c->aq_head >= GR_AHEAD_QMAX) {
        free(p);
        return -1;
    }
    if (c->aq_len == c->aq_cap) {
        size_t nc = c->aq_cap ? c->aq_cap * 2 : 256;
        char **na = realloc(c->aq, nc * sizeof(*na));
        if (!na) {
            free(p);
            return -1;
        }
        c->aq = na;
        c->aq_cap = nc;
    }
    c->aq[c->aq_len++] = p;
    return 0;
}

/* Keep the hinted paths of h[0..n) that start at offset 0, for the
 * look-ahead: the caller's queue from now on (no directory scan). */
static void ahead_queue(gr_client *c, const gr_hint *h, char *const *abs, size_t n)
{
    size_t k = 0;

    if (c->ahead_depth == 0)
        return;
    while (k < n && h[k].off != 0)
        k++;
    if (k == n)
        return;                             /* (nothing to open ahead) */
    if (!c->ahead_user) {
        ahead_reset(c, 1);                  /* (a directory scan's: the caller knows better) */
        gr__ds_reset(&c->ds);
    }
    c->ahead_user = 1;
    c->ahead_misses = 0;
    for (; k < n; k++) {
        char *p;
        if (h[k].off != 0)
            continue;
        if (!(p = strdup(abs && abs[k] ? abs[k] : h[k].path)) || ahead_push(c, p) < 0)
            return;
    }
}

/* After the open of path (absolute): where this process scans a directory
 * in order, the files it opens next go to the look-ahead (dscan.h), unless
 * the caller gave it a list of its own (a queue, or hints to the daemon). */
static void ahead_scan(gr_client *c, const char *path)
{
    char *next[GR_DS_AHEAD];
    size_t k, i;
    int off;

    if (!c->ds_on || c->ahead_depth == 0 || c->ahead_user || c->hinted)
        return;
    k = gr__ds_opened(&c->ds, path, next, GR_DS_AHEAD, &off);
    if (off)
        ahead_reset(c, 1);                  /* out of order: what it named goes */
    for (i = 0; i < k && ahead_push(c, next[i]) == 0; i++)
        ;
    if (i < k) {
        while (i + 1 < k)
            free(next[++i]);                /* (the queue is full: the rest go, */
        gr__ds_reset(&c->ds);               /* and the scan starts again later) */
    }
    if (k) {
        c->ahead_on = 1;
        ahead_topup(c);
    }
}

/* Send the OPENX of the next hinted paths until depth are out. */
static void ahead_topup(gr_client *c)
{
    uint8_t req[PROTO_HDR_LEN + PROTO_OPENX_PREFIX + PROTO_MAX_PATH];
    uint32_t want = lc_on(c) ? c->chunk_size : 0;

    if (c->fd < 0)
        return;
    while (c->nahead < c->ahead_depth && c->aq_head < c->aq_len) {
        char *path = c->aq[c->aq_head];
        uint32_t id = take_id(c);
        ssize_t n = proto_enc_openx(req, sizeof(req), id, 0, want, PROTO_OPENX_IFCHEAP, path,
                                    strlen(path));
        int proof = c->need_proof ? open_proof(path) : -1;
        struct iovec iov = { req, n > 0 ? (size_t)n : 0 };
        ssize_t sent;

        c->aq[c->aq_head++] = NULL;
        if (c->need_proof && proof < 0) {
            /* Not ours to open: a slot with no file, so the caller's own
             * open of it (which fails the same way) keeps the order. */
            c->ahead[c->nahead++] = (gr_ahead){ .path = path, .done = 1,
                                                .sent_ms = gr__now_ms() };
            continue;
        }
        sent = n < 0 ? -EINVAL : gr__send_fds(c->fd, &iov, 1, &proof, proof >= 0, 0);
        if (proof >= 0)
            close(proof);                       /* (the daemon has its own copy) */
        if (sent != n) {
            free(path);                 /* the next call sees what went wrong */
            return;
        }
        c->ahead[c->nahead++] = (gr_ahead){ .path = path, .id = id, .want = want,
                                            .sent_ms = gr__now_ms() };
        c->ahead_sent++;
    }
}

/* m is a reply: if to a look-ahead, take it (1), else leave it (0). */
static int ahead_claim(gr_client *c, proto_msg *m)
{
    int ok = m->h.status == 0 && m->h.op == PROTO_OP_OPENX;

    for (uint32_t i = 0; i < c->nahead; i++) {
        gr_ahead *a = &c->ahead[i];
        if (a->done || a->id != m->h.req_id)
            continue;
        a->done = 1;
        if (ok)
            open_finish(c, a->path, m, a->want, &a->f);
        else if (proto_msg_readx(m))
            drop_readx(c, m);
        return 1;
    }
    return 0;
}

/* The file of path if a look-ahead opened it (waiting for its reply if it
 * is still out), else NULL: the caller opens it itself. */
static gr_file *ahead_take(gr_client *c, const char *path)
{
    gr_file *f;
    uint32_t k;
    proto_msg m;

    for (k = 0; k < c->nahead && strcmp(c->ahead[k].path, path) != 0; k++)
        ;
    c->ahead_on = 0;
    if (k == c->nahead) {
        if (c->aq_head < c->aq_len && strcmp(c->aq[c->aq_head], path) == 0) {
            free(c->aq[c->aq_head]);            /* the next hinted: opened now, */
            c->aq[c->aq_head++] = NULL;
            c->ahead_misses = 0;
            c->ahead_on = 1;
            ahead_reset(c, 0);                  /* those before it skipped */
        } else if (++c->ahead_misses > 2 * GR_AHEAD_MAX) {
            ahead_reset(c, 1);                  /* not the order hinted: stop */
        }
        return NULL;
    }
    c->ahead_misses = 0;
    c->ahead_on = 1;
    for (uint32_t i = 0; i < k; i++)
        ahead_give_up(c, &c->ahead[i]);
    ahead_shift(c, k);
    while (!c->ahead[0].done) {
        if (recv_one(c, &m) < 0)
            break;                              /* the open of its own finds out */
        if (!ahead_claim(c, &m))
            drop_stale(c, &m);
    }
    f = c->ahead[0].done ? c->ahead[0].f : NULL;
    if (!c->ahead[0].done || gr__now_ms() - c->ahead[0].sent_ms > GR_AHEAD_AGE_MS) {
        ahead_give_up(c, &c->ahead[0]);         /* (an old one: the file may have changed) */
        f = NULL;
    } else {
        free(c->ahead[0].path);
    }
    ahead_shift(c, 1);
    c->ahead_used += f != NULL;
    return f;
}

int gr_fstat(gr_file *f, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_size = (off_t)f->a.size;
    st->st_ino = (ino_t)f->a.ino;
    st->st_dev = (dev_t)f->a.dev;
    st->st_mode = (mode_t)f->a.mode;
    st->st_mtim.tv_sec = (time_t)f->a.mtime_sec;
    st->st_mtim.tv_nsec = (long)f->a.mtime_nsec;
    st->st_blksize = (blksize_t)f->a.blksize;
    st->st_blocks = (blkcnt_t)((f->a.size + 511) / 512);
    st->st_uid = f->a.uid;
    st->st_gid = f->a.gid;
    st->st_nlink = f->a.nlink;
    return 0;
}

int gr_close(gr_file *f)
{
    gr_client *c;

    if (!f)
        return 0;
    c = f->c;
    if (inherited(c))
        goto free_f;                    /* the handle is the parent's: no CLOSE */
    pthread_mutex_lock(&c->lock);
    /* A handle of a connection that is gone died with it: nothing to do.
     * Else a CLOSE that wants no reply: nothing can fail that the caller
     * could act on (the handle is ours), so there is nothing to wait for. */
    if (f->gen == c->gen && c->fd >= 0)
        close_unused(c, f->a.handle);
    flush_releases(c);
    report_lc(c, 0);
    pthread_mutex_unlock(&c->lock);
free_f:
    free(f->head);
    if (f->staged_fd >= 0)
        close(f->staged_fd);
    free(f->path);
    free(f);
    return 0;
}

/* Close a handle nobody will use: a CLOSE with NOREPLY. */
static void close_unused(gr_client *c, uint32_t handle)
{
    uint8_t req[PROTO_HDR_LEN + 4];
    ssize_t n;

    uint32_t id = take_id(c);

    proto_enc_close(req, sizeof(req), id, handle);
    proto_encode_hdr(req, PROTO_OP_CLOSE, PROTO_F_NOREPLY, id, 0, 4);
    do
        n = send(c->fd, req, sizeof(req), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
}

/*
 * Before a request on f: make sure c is connected and f's handle belongs
 * to this connection, re-opening f by path if it was opened on an earlier
 * one.  The re-opened file must have the identity of the first open (dev,
 * ino, size, mtime), else f is stale for good.  0, or -errno (-ESTALE, the
 * OPEN's error, -ECONNRESET when the daemon stayed away).  Lock held.
 */
static int file_ready(gr_file *f, uint64_t *deadline)
{
    gr_client *c = f->c;
    uint8_t req[PROTO_HDR_LEN + PROTO_MAX_PATH];
    proto_msg m;
    uint32_t id;
    ssize_t n;
    int rc;

    if (f->stale)
        return -ESTALE;
    if (ensure_conn(c, deadline) < 0)
        return -ECONNRESET;
    while (f->gen != c->gen) {
        id = take_id(c);
        n = proto_enc_open(req, sizeof(req), id, f->path, strlen(f->path));
        if (n < 0)
            return -EINVAL;
        c->proof_fd = c->need_proof ? open_proof(f->path) : -1;
        if (c->proof_fd < 0)
            c->proof_fd = -1;
        rc = call(c, req, (size_t)n, id, &m);
        if (c->proof_fd >= 0)
            close(c->proof_fd);
        c->proof_fd = -1;
        if (c->staged_fd >= 0) {        /* f keeps the fd of its first open */
            close(c->staged_fd);
            c->staged_fd = -1;
        }
        if (rc == 0 && m.h.status == -ENOKEY && !c->need_proof) {
            c->need_proof = 1;              /* ask again, with a proof */
            continue;
        }
        if (rc < 0) {
            if (reconnect(c, rc, deadline))
                continue;
            return conn_lost(rc) ? -ECONNRESET : rc;
        }
        if (m.h.status == -ENOKEY) {    /* we could not open it ourselves any more */
            set_err(c, EACCES, NULL, 0);
            return -EACCES;
        }
        if (m.h.status < 0) {
            /* vanished or unreadable now: as stale as it gets */
            set_err(c, -m.h.status, m.u.error.len ? m.u.error.text : NULL, m.u.error.len);
            f->stale = m.h.status == -ENOENT;
            return f->stale ? -ESTALE : m.h.status;
        }
        if (m.h.op != PROTO_OP_OPEN)
            return -EPROTO;
        if (m.u.attr.dev != f->a.dev || m.u.attr.ino != f->a.ino || m.u.attr.size != f->a.size ||
            m.u.attr.mtime_sec != f->a.mtime_sec || m.u.attr.mtime_nsec != f->a.mtime_nsec) {
            close_unused(c, m.u.attr.handle);
            f->stale = 1;
            return -ESTALE;
        }
        f->a = m.u.attr;
        f->gen = c->gen;
    }
    return 0;
}

/* Send a READX for len bytes at off (flags: 0, or PROTO_F_WHOLE for
 * whole chunks to keep). */
static int send_readx(gr_client *c, const gr_file *f, uint32_t id, uint64_t off, uint32_t len,
                      uint16_t flags)
{
    uint8_t req[PROTO_HDR_LEN + PROTO_READ_LEN];
    proto_read r = { .handle = f->a.handle, .len = len, .off = off };
    ssize_t n;

    proto_enc_readx_flags(req, sizeof(req), id, flags, &r);
    do
        n = send(c->fd, req, sizeof(req), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN ? -ETIMEDOUT : errno == EPIPE ? -ECONNRESET : -errno;
    return 0;
}

/* Copy a READX reply's bytes to dst (at most cap) and queue its leases.
 * Returns the bytes covered, or -EPROTO if they exceed cap. */
static int64_t copy_readx(gr_client *c, const proto_msg *m, uint8_t *dst, uint64_t cap)
{
    uint64_t got = 0;
    proto_extent e;

    for (uint32_t i = 0; i < m->u.readx.nextents; i++) {
        proto_extent_at(m, i, &e);
        if (e.len > cap - got) {
            drop_readx(c, m);
            return -EPROTO;
        }
        copy_out(dst + got, c->segs[e.seg].p + e.off, e.len);
        got += e.len;
        queue_release(c, e.lease);
    }
    if (m->u.readx.inline_len > cap - got)
        return -EPROTO;
    memcpy(dst + got, m->u.readx.inline_data, m->u.readx.inline_len);
    return (int64_t)(got + m->u.readx.inline_len);
}

/* Clip *len to the file size fixed at open (and to SSIZE_MAX).  Returns 1
 * if there is something to read, 0 at or past the end (or len 0), -1 with
 * errno EINVAL for a negative offset. */
static int clip_range(const gr_file *f, off_t off, size_t *len)
{
    uint64_t size = f->a.size;

    if (off < 0) {
        errno = EINVAL;
        return -1;
    }
    if ((uint64_t)off >= size || *len == 0)
        return 0;
    if (*len > size - (uint64_t)off)
        *len = (size_t)(size - (uint64_t)off);
    if (*len > SSIZE_MAX)
        *len = SSIZE_MAX;
    return 1;
}

typedef struct piece {
    uint32_t id;
    uint64_t off;
    uint64_t len;
} piece;

/*
 * Copy what this client holds of [off, end) of f to buf (buf[0] is the
 * byte at off), from the start: bytes its OPENX brought inline, then
 * chunks of leases it kept.  Returns the first offset it does not hold
 * (end when it held all).  Lock held.
 */
static uint64_t serve_local(gr_client *c, gr_file *f, uint8_t *buf, uint64_t off, uint64_t end)
{
    uint64_t pos = off, cs = f->a.chunk_size, now = 0, from_lc = 0;
    int soft = 0;

    while (pos < end) {
        uint64_t cstart, n;
        gr__lent *e;
        gr__ckey k;
        if (f->head && pos < f->head_len) {
            n = (end < f->head_len ? end : f->head_len) - pos;
            memcpy(buf + (pos - off), f->head + pos, n);
            pos += n;
            continue;
        }
        if ((c->lc.count == 0 && c->lc.soft_count == 0) || cs == 0)
            break;
        if (!now)
            now = gr__now_ms();
        k = chunk_of(f, pos / cs);
        e = gr__lc_find(&c->lc, &k, now);
        if (!e || !gr__lc_check_begin(&c->lc, e))
            break;
        cstart = pos / cs * cs;
        n = (end < cstart + e->len ? end : cstart + e->len) - pos;
        soft |= e->soft;
        copy_out(buf + (pos - off), e->p + (pos - cstart), n);
        /* A soft entry whose block changed under the copy: the bytes are
         * asked for again (and overwritten) from pos. */
        if (!gr__lc_check_end(&c->lc, e))
            break;
        /* A read that took a NOKEEP chunk whole gives its lease back (see
         * lc_keep_read); e may be gone after this. */
        if (e->transient && pos == cstart && n == e->len)
            gr__lc_retire(&c->lc, e);
        pos += n;
        from_lc += n;
    }
    c->lc.hit_bytes += from_lc;
    if (pos == end && from_lc) {
        c->lc.hits++;
        c->lc.unpinned_hits += (uint64_t)soft;
    }
    return pos;
}

ssize_t gr_pread(gr_file *f, void *buf, size_t len, off_t off)
{
    gr_client *c = f->c;
    uint64_t next, end, unit, deadline = 0;
    piece pend[GR_WINDOW];
    int npend, rc = 0, err;
    uint16_t whole;
    proto_msg m;

    if (clip_range(f, off, &len) <= 0)
        return off < 0 ? -1 : 0;
    end = (uint64_t)off + len;

    pthread_mutex_lock(&c->lock);
retry:
    /* After a reconnect the whole range is read again: the file's identity
     * is checked on re-open, so the bytes already copied are the same. */
    rc = file_ready(f, &deadline);
    if (rc < 0)
        goto out;
    unit = f->a.chunk_size ? f->a.chunk_size : GR_PIECE_MIN;
    unit *= (GR_PIECE_MIN + unit - 1) / unit;       /* whole chunks, >= 1 MiB */
    /* What the client holds needs no message; the rest is asked for. */
    next = serve_local(c, f, buf, (uint64_t)off, end);
    whole = lc_on(c) ? PROTO_F_WHOLE : 0;
    npend = 0;
    err = 0;
    for (;;) {
        int i;
        int64_t got;
        while (npend < GR_WINDOW && next < end && !err) {
            uint64_t plen = (next / unit + 1) * unit - next;
            if (plen > end - next)
                plen = end - next;
            pend[npend] = (piece){ take_id(c), next, plen };
            rc = send_readx(c, f, pend[npend].id, next, (uint32_t)plen, whole);
            if (rc < 0)
                goto out;
            npend++;
            next += plen;
        }
        if (npend == 0)
            break;
        rc = recv_msg(c, &m);
        if (rc < 0)
            goto out;
        for (i = 0; i < npend && pend[i].id != m.h.req_id; i++)
            ;
        if (i == npend) {
            if (m.h.req_id == 0 && m.h.status < 0) {
                rc = m.h.status;        /* a request of ours was unreadable */
                goto out;
            }
            drop_stale(c, &m);
            continue;
        }
        {
            piece p = pend[i];
            pend[i] = pend[--npend];
            if (m.h.status < 0) {
                if (!err) {
                    err = -m.h.status;
                    set_err(c, err, m.u.error.len ? m.u.error.text : NULL, m.u.error.len);
                }
                continue;
            }
            if (m.h.op != PROTO_OP_READX) {
                rc = -EPROTO;
                goto out;
            }
            if (whole)
                got = take_whole(c, f, &m, p.off, p.len, (uint8_t *)buf + (p.off - (uint64_t)off));
            else
                got = copy_readx(c, &m, (uint8_t *)buf + (p.off - (uint64_t)off), p.len);
            if (got < 0 || (got == 0 && p.len > 0)) {
                rc = -EPROTO;           /* no progress would loop forever */
                goto out;
            }
            if ((uint64_t)got < p.len && npend < GR_WINDOW && !err) {
                /* The daemon covered a prefix; ask for the rest now. */
                pend[npend] = (piece){ take_id(c), p.off + (uint64_t)got, p.len - (uint64_t)got };
                rc = send_readx(c, f, pend[npend].id, pend[npend].off, (uint32_t)pend[npend].len,
                                whole);
                if (rc < 0)
                    goto out;
                npend++;
            }
        }
        if (c->nrel >= GR_RELEASE_BATCH)
            flush_releases(c);
    }
    flush_releases(c);
    report_lc(c, 0);
    pthread_mutex_unlock(&c->lock);
    if (err) {
        errno = err;
        return -1;
    }
    c->errtext[0] = '\0';
    return (ssize_t)len;
out:
    if (reconnect(c, rc, &deadline))
        goto retry;
    flush_releases(c);
    fail(c, conn_lost(rc) ? -ECONNRESET : rc);
    pthread_mutex_unlock(&c->lock);
    return -1;
}

/* A gr_ref on kept lease e for the bytes at off: *data and the length up
 * to off's chunk end (at most len).  Lock held. */
static size_t ref_on_kept(gr_client *c, const gr_file *f, gr__lent *e, gr_ref *r, uint64_t off,
                          size_t len, const void **data)
{
    uint64_t cstart = off / f->a.chunk_size * f->a.chunk_size;

    gr__lc_use(e);
    r->ent = e;
    r->gen = e->gen;
    c->nrefs++;
    *data = e->p + (off - cstart);
    return len < cstart + e->len - off ? len : (size_t)(cstart + e->len - off);
}

ssize_t gr_read_ref(gr_file *f, off_t off, size_t len, const void **data, gr_ref **ref)
{
    gr_client *c = f->c;
    uint64_t cs = f->a.chunk_size ? f->a.chunk_size : GR_PIECE_MIN;
    gr_ref *r;
    gr__lent *e;
    gr__ckey k;
    proto_msg m;
    uint32_t id;
    uint64_t deadline = 0;
    int rc;

    *data = NULL;
    *ref = NULL;
    if (clip_range(f, off, &len) <= 0)
        return off < 0 ? -1 : 0;
    if (len > ((uint64_t)off / cs + 1) * cs - (uint64_t)off)
        len = (size_t)(((uint64_t)off / cs + 1) * cs - (uint64_t)off);     /* one chunk */
    r = calloc(1, sizeof(*r));
    if (!r) {
        errno = ENOMEM;
        return -1;
    }
    r->c = c;
    pthread_mutex_lock(&c->lock);
retry:
    rc = file_ready(f, &deadline);
    k = chunk_of(f, (uint64_t)off / cs);
    /* (A soft entry serves copies only: this asks for a lease, and the
     * entry gives way to the one that comes.  A kept entry whose block has
     * a new generation lost its lease unseen, to a connection the daemon
     * dropped: it is dropped, and a READX asks.) */
    if (rc == 0 && f->a.chunk_size && (e = gr__lc_find(&c->lc, &k, gr__now_ms())) &&
        !e->soft && gr__lc_check_begin(&c->lc, e)) {
        len = ref_on_kept(c, f, e, r, (uint64_t)off, len, data);
        c->lc.hits++;
        c->lc.hit_bytes += len;
        goto done;
    }
    id = take_id(c);
    if (rc == 0)
        rc = send_readx(c, f, id, (uint64_t)off, (uint32_t)len, lc_on(c) ? PROTO_F_WHOLE : 0);
    if (rc == 0) {
        for (;;) {
            rc = recv_msg(c, &m);
            if (rc < 0 || m.h.req_id == id || (m.h.req_id == 0 && m.h.status < 0))
                break;
            drop_stale(c, &m);
        }
    }
    if (rc < 0 && reconnect(c, rc, &deadline))
        goto retry;
    if (conn_lost(rc))
        rc = -ECONNRESET;
    if (rc == 0 && m.h.status < 0) {
        fail_reply(c, &m);
        goto fail;
    }
    if (rc == 0 && (m.h.op != PROTO_OP_READX || m.u.readx.nextents > 1 ||
                    (m.u.readx.nextents == 1 && m.u.readx.inline_len))) {
        if (m.h.op == PROTO_OP_READX)
            drop_readx(c, &m);
        rc = -EPROTO;
    }
    if (rc == 0 && m.u.readx.nextents == 1 && lc_on(c)) {
        /* A whole chunk: kept if the cache has room (this ref then reads
         * from the kept lease), else a plain lease of the whole chunk. */
        uint64_t cstart = (uint64_t)off / cs * cs;
        uint64_t want = f->a.size - cstart < cs ? f->a.size - cstart : cs;
        proto_extent e1;
        const uint8_t *p;
        proto_extent_at(&m, 0, &e1);
        if (e1.len != want) {
            drop_readx(c, &m);
            fail(c, -EPROTO);
            goto fail;
        }
        p = c->segs[e1.seg].p + e1.off;
        e = lc_keep(c, &k, &e1, gr__now_ms());
        if (e) {
            len = ref_on_kept(c, f, e, r, (uint64_t)off, len, data);
        } else {
            r->lease = e1.lease;
            r->gen = c->gen;
            c->nrefs++;
            *data = p + ((uint64_t)off - cstart);
        }
        goto done;
    }
    if (rc < 0) {
        fail(c, rc);
        goto fail;
    }
    if (m.u.readx.nextents == 1) {
        proto_extent e1;
        proto_extent_at(&m, 0, &e1);
        r->lease = e1.lease;
        r->gen = c->gen;
        c->nrefs++;
        *data = c->segs[e1.seg].p + e1.off;
        len = e1.len;
    } else {
        /* Not leasable (the client is at its lease limit, or the daemon had
         * no arena block): a private copy stands in. */
        len = m.u.readx.inline_len;
        r->heap = malloc(len ? len : 1);
        if (!r->heap) {
            fail(c, -ENOMEM);
            goto fail;
        }
        memcpy(r->heap, m.u.readx.inline_data, len);
        *data = r->heap;
    }
done:
    c->errtext[0] = '\0';
    pthread_mutex_unlock(&c->lock);
    *ref = r;
    return (ssize_t)len;
fail:
    pthread_mutex_unlock(&c->lock);
    free(r);
    return -1;
}

/* Give r's lease back (queued, not flushed) or, for a lease of an older
 * connection, drop its hold on that connection's mappings; then free r.
 * Lock held (or r holds no lease). */
static void ref_release_locked(gr_client *c, gr_ref *r)
{
    if (r->lease || r->ent) {
        if (r->gen == c->gen) {
            if (r->lease)
                queue_release(c, r->lease);
            c->nrefs--;
        } else {
            /* The lease died with its connection; unmap that connection's
             * segments once no gr_ref points into them. */
            for (gr_retired **pp = &c->retired; *pp; pp = &(*pp)->next) {
                gr_retired *old = *pp;
                if (old->gen != r->gen)
                    continue;
                if (--old->nrefs == 0) {
                    *pp = old->next;
                    unmap_segs(c, old->segs, old->nsegs);
                    free(old);
                }
                break;
            }
        }
    }
    if (r->ent)
        gr__lc_unuse(&c->lc, r->ent);
    free(r->heap);
    free(r);
}

void gr_ref_release(gr_ref *r)
{
    gr_client *c;

    if (!r)
        return;
    c = r->c;
    if (!r->lease && !r->ent) {
        ref_release_locked(c, r);       /* a private copy: no lock needed */
        return;
    }
    if (inherited(c)) {                 /* the lease is the parent's: kept */
        free(r->heap);
        free(r);
        return;
    }
    pthread_mutex_lock(&c->lock);
    ref_release_locked(c, r);
    flush_releases(c);
    pthread_mutex_unlock(&c->lock);
}

int gr_admin(gr_client *c, int cmd, const gr_field *args, size_t nargs, gr_field **out,
             size_t *nout)
{
    size_t cap = PROTO_MAX_BODY, off = 0, nf = 0, strbytes = 0, namebytes = 0;
    uint8_t *body = malloc(cap), *req = malloc(PROTO_MAX_MSG);
    proto_msg m;
    proto_rec r;
    gr_field *f;
    char *sp;
    uint32_t id;
    ssize_t n;
    int ret = -1, rc = 0;

    *out = NULL;
    *nout = 0;
    if (!body || !req) {
        free(body);
        free(req);
        errno = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < nargs && rc == 0; i++)
        rc = args[i].is_text
                 ? proto_rec_str(body, cap - 1, &off, args[i].name, args[i].text, args[i].len)
                 : proto_rec_u64(body, cap - 1, &off, args[i].name, args[i].num);
    pthread_mutex_lock(&c->lock);
    if (rc < 0) {
        fail(c, rc == -EMSGSIZE ? -E2BIG : -EINVAL);
        goto out;
    }
    id = take_id(c);
    n = proto_enc_admin(req, PROTO_MAX_MSG, id, (uint8_t)cmd, body, off);
    if (n < 0) {
        fail(c, -EINVAL);
        goto out;
    }
    if (call_ok(c, req, (size_t)n, id, PROTO_OP_ADMIN, &m) < 0)
        goto out;
    /* One block: the fields, then their names and texts NUL-terminated. */
    off = 0;
    while (proto_rec_next(m.u.recs.p, m.u.recs.len, &off, &r) == 1) {
        nf++;
        namebytes += r.name_len + 1;
        strbytes += r.kind == PROTO_REC_STR ? r.len + 1 : 0;
    }
    f = malloc(nf * sizeof(*f) + namebytes + strbytes + 1);
    if (!f) {
        fail(c, -ENOMEM);
        goto out;
    }
    sp = (char *)(f + nf);
    off = 0;
    for (size_t i = 0; proto_rec_next(m.u.recs.p, m.u.recs.len, &off, &r) == 1; i++) {
        memcpy(sp, r.name, r.name_len);
        sp[r.name_len] = '\0';
        f[i].name = sp;
        sp += r.name_len + 1;
        f[i].is_text = r.kind == PROTO_REC_STR;
        f[i].num = r.u64;
        f[i].text = NULL;
        f[i].len = 0;
        if (f[i].is_text) {
            memcpy(sp, r.str, r.len);
            sp[r.len] = '\0';
            f[i].text = sp;
            f[i].len = r.len;
            sp += r.len + 1;
        }
    }
    *out = f;
    *nout = nf;
    c->errtext[0] = '\0';
    ret = 0;
out:
    pthread_mutex_unlock(&c->lock);
    free(body);
    free(req);
    return ret;
}

/* Send one HINT message of ents[0..n) (n may be 0 with flags CLEAR). */
static int send_hints(gr_client *c, uint8_t *buf, size_t cap, uint32_t flags,
                      const proto_hint_ent *ents, uint32_t n)
{
    proto_msg m;
    uint32_t id = take_id(c);
    ssize_t len = proto_enc_hint(buf, cap, id, flags, ents, n);

    if (len < 0)
        return fail(c, -EINVAL);
    return call_ok(c, buf, (size_t)len, id, PROTO_OP_HINT, &m);
}

/* The absolute form of each relative path of h (NULL where a path is
 * absolute), into *abs_out (caller frees with free_abs); 0, or -errno. */
static int hint_abs(const gr_hint *h, size_t n, char ***abs_out)
{
    char **abs = NULL, tmp[PROTO_MAX_PATH + 1];
    int rc;

    *abs_out = NULL;
    for (size_t k = 0; k < n; k++) {
        if (!h[k].path || !h[k].path[0] || h[k].path[0] == '/')
            continue;
        if (!abs && !(abs = calloc(n, sizeof(*abs))))
            return -ENOMEM;
        rc = gr__path_abs(h[k].path, tmp, sizeof(tmp));
        if (rc < 0 || !(abs[k] = strdup(tmp))) {
            for (size_t j = 0; j < n; j++)
                free(abs[j]);
            free(abs);
            return rc < 0 ? rc : -ENOMEM;
        }
    }
    *abs_out = abs;
    return 0;
}

static void free_abs(char **abs, size_t n)
{
    if (!abs)
        return;
    for (size_t k = 0; k < n; k++)
        free(abs[k]);
    free(abs);
}

int gr_hint_append(gr_client *c, const gr_hint *h, size_t n)
{
    static const size_t cap = PROTO_HDR_LEN + PROTO_MAX_BODY;
    uint8_t *buf = malloc(cap);
    proto_hint_ent *ents = malloc(PROTO_MAX_HINTS * sizeof(*ents));
    char **abs = NULL;
    size_t i = 0, body;
    int ret = 0, rc;

#define HINT_PATH(k) (abs && abs[k] ? abs[k] : h[k].path)
    if (!buf || !ents) {
        free(buf);
        free(ents);
        errno = ENOMEM;
        return -1;
    }
    rc = hint_abs(h, n, &abs);          /* relative: from the working directory */
    if (rc < 0) {
        free(buf);
        free(ents);
        errno = -rc;
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        size_t pl = h[k].path ? strlen(HINT_PATH(k)) : 0;
        if (pl == 0 || pl > PROTO_MAX_PATH) {
            free(buf);
            free(ents);
            free_abs(abs, n);
            errno = pl == 0 ? EINVAL : ENAMETOOLONG;
            return -1;
        }
    }
    pthread_mutex_lock(&c->lock);
    while (i < n && ret == 0) {
        uint32_t k = 0;
        body = PROTO_HINT_PREFIX;
        while (i < n && k < PROTO_MAX_HINTS) {
            const char *p = HINT_PATH(i);
            size_t pl = strlen(p);
            if (body + PROTO_HINT_ENT_SIZE(pl) > PROTO_MAX_BODY)
                break;
            ents[k] = (proto_hint_ent){ h[i].off, h[i].len, p, (uint32_t)pl };
            body += PROTO_HINT_ENT_SIZE(pl);
            k++;
            i++;
        }
        ret = send_hints(c, buf, cap, 0, ents, k);
    }
#undef HINT_PATH
    if (ret == 0) {
        c->hinted |= n > 0;                 /* (no directory scan beside the job's order) */
        ahead_queue(c, h, abs, n);
        c->errtext[0] = '\0';
    }
    pthread_mutex_unlock(&c->lock);
    free(buf);
    free(ents);
    free_abs(abs, n);
    return ret;
}

int gr_open_ahead(gr_client *c, const char *const *paths, size_t n)
{
    gr_hint *h = calloc(n ? n : 1, sizeof(*h));
    char **abs = NULL;
    int rc;

    if (!h) {
        errno = ENOMEM;
        return -1;
    }
    for (size_t k = 0; k < n; k++)
        h[k] = (gr_hint){ paths[k], 0, 0 };
    rc = hint_abs(h, n, &abs);          /* relative: from the working directory */
    for (size_t k = 0; k < n && rc == 0; k++) {
        size_t pl = paths[k] ? strlen(abs && abs[k] ? abs[k] : paths[k]) : 0;
        if (pl == 0 || pl > PROTO_MAX_PATH)
            rc = pl == 0 ? -EINVAL : -ENAMETOOLONG;
    }
    if (rc == 0) {
        pthread_mutex_lock(&c->lock);
        ahead_reset(c, 1);
        ahead_queue(c, h, abs, n);
        c->ahead_on = c->aq_head < c->aq_len;   /* the caller's word: start now */
        if (c->ahead_on)
            ahead_topup(c);
        pthread_mutex_unlock(&c->lock);
    }
    free_abs(abs, n);
    free(h);
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    return 0;
}

int gr_hint_clear(gr_client *c)
{
    uint8_t buf[PROTO_HDR_LEN + PROTO_HINT_PREFIX];
    int ret;

    pthread_mutex_lock(&c->lock);
    ahead_reset(c, 1);
    c->hinted = 0;
    ret = send_hints(c, buf, sizeof(buf), PROTO_HINT_CLEAR, NULL, 0);
    if (ret == 0)
        c->errtext[0] = '\0';
    pthread_mutex_unlock(&c->lock);
    return ret;
}

int gr_hint_status(gr_client *c, gr_hint_state *st)
{
    uint8_t buf[PROTO_HDR_LEN + PROTO_HINT_PREFIX];
    uint32_t id;
    ssize_t len;
    proto_msg m;
    proto_rec r;
    size_t off = 0;
    int ret;

    memset(st, 0, sizeof(*st));
    pthread_mutex_lock(&c->lock);
    id = take_id(c);
    len = proto_enc_hint(buf, sizeof(buf), id, 0, NULL, 0);
    ret = call_ok(c, buf, (size_t)len, id, PROTO_OP_HINT, &m);
    while (ret == 0 && proto_rec_next(m.u.recs.p, m.u.recs.len, &off, &r) == 1) {
        if (proto_rec_is(&r, "ranges"))
            st->ranges = r.u64;
        else if (proto_rec_is(&r, "pending"))
            st->pending = r.u64;
        else if (proto_rec_is(&r, "errors"))
            st->errors = r.u64;
        else if (proto_rec_is(&r, "skipped"))
            st->skipped = r.u64;
        else if (proto_rec_is(&r, "last_error") && r.kind == PROTO_REC_STR)
            snprintf(st->last_error, sizeof(st->last_error), "%.*s", (int)r.len, r.str);
    }
    if (ret == 0)
        c->errtext[0] = '\0';
    pthread_mutex_unlock(&c->lock);
    return ret;
}

int gr_stats(gr_client *c, int (*cb)(void *arg, const char *name, uint64_t value), void *arg)
{
    uint8_t req[PROTO_HDR_LEN];
    proto_msg m;
    uint32_t id;
    size_t off = 0;
    int rc, ret = 0;

    pthread_mutex_lock(&c->lock);
    id = take_id(c);
    proto_enc_stats_req(req, sizeof(req), id);
    ret = call_ok(c, req, sizeof(req), id, PROTO_OP_STATS, &m);
    if (ret < 0)
        goto out;
    for (;;) {
        proto_rec r;
        char nbuf[256];
        rc = proto_rec_next(m.u.recs.p, m.u.recs.len, &off, &r);
        if (rc < 0) {
            ret = fail(c, rc);
            break;
        }
        if (rc == 0)
            break;
        if (r.kind != PROTO_REC_U64)
            continue;           /* counters are numbers; skip what we do not know */
        memcpy(nbuf, r.name, r.name_len);
        nbuf[r.name_len] = '\0';
        if (cb(arg, nbuf, r.u64))
            break;
    }
out:
    pthread_mutex_unlock(&c->lock);
    return ret;
}

/* ---- for the GPU path (client/gpu.c): see granary_int.h ----
 *
 * gr__read_extents is gr_pread's pipeline without the copy: each extent is
 * handed to a callback together with its lease, which the GPU layer keeps
 * until the device has copied the bytes.  Pieces are tracked one by one, so
 * after a reconnect only the pieces whose replies were lost are asked for
 * again and no byte is delivered twice.
 */

typedef struct xpiece {
    uint32_t id;                        /* request id; 0: not (or no longer) sent */
    size_t span;
    uint64_t off;
    uint64_t len;
} xpiece;

/* Hand the extents and inline bytes of READX reply m for piece p to cb.
 * *got: the bytes covered.  Returns 0, or -errno with *cb_err set when the
 * error is cb's (the leases of extents not handed over are queued for
 * release either way). */
static int deliver_readx(gr_client *c, const proto_msg *m, const xpiece *p, gr__ext_cb cb,
                         void *arg, uint64_t *got, int *cb_err)
{
    proto_extent e;
    uint32_t i = 0;
    int rc = 0;

    *got = 0;
    *cb_err = 0;
    for (; i < m->u.readx.nextents; i++) {
        gr__ext x;
        gr_ref *r;
        proto_extent_at(m, i, &e);
        if (e.len > p->len - *got) {
            rc = -EPROTO;
            goto drop;
        }
        r = calloc(1, sizeof(*r));
        if (!r) {
            rc = -ENOMEM;
            goto drop;
        }
        r->c = c;
        r->lease = e.lease;
        r->gen = c->gen;
        c->nrefs++;
        x = (gr__ext){ p->span, p->off + *got, c->segs[e.seg].p + e.off, e.len,
                       c->segs[e.seg].p, c->segs[e.seg].len, r };
        *got += e.len;
        rc = cb(arg, &x);
        if (rc < 0) {
            *cb_err = 1;
            i++;
            goto drop;
        }
    }
    if (m->u.readx.inline_len > p->len - *got)
        return -EPROTO;
    if (m->u.readx.inline_len) {
        gr__ext x = { p->span, p->off + *got, m->u.readx.inline_data, m->u.readx.inline_len,
                      NULL, 0, NULL };
        *got += m->u.readx.inline_len;
        rc = cb(arg, &x);
        *cb_err = rc < 0;
    }
    return rc;
drop:
    for (; i < m->u.readx.nextents; i++) {
        proto_extent_at(m, i, &e);
        queue_release(c, e.lease);
    }
    return rc;
}

/* Send piece pend[i], its file made ready on this connection first.
 * Where that re-open reconnected (file_ready), the other pieces' replies
 * died with the old connection: they go out again (id 0).  0, or -errno
 * (the file's error, or the connection's). */
static int send_xpiece(gr_client *c, const gr__span *sp, xpiece *pend, int npend, int i,
                       uint64_t *deadline)
{
    xpiece *p = &pend[i];
    uint32_t gen = c->gen;
    int rc = file_ready(sp[p->span].f, deadline);

    if (rc < 0)
        return rc;
    if (c->gen != gen)
        for (int j = 0; j < npend; j++)
            pend[j].id = 0;
    p->id = take_id(c);
    return send_readx(c, sp[p->span].f, p->id, p->off, (uint32_t)p->len, 0);
}

int gr__read_extents(gr_client *c, const gr__span *sp, size_t n, gr__ext_cb cb, void *arg)
{
    xpiece pend[GR_WINDOW];
    size_t si = 0;                      /* the next bytes never asked for: span si ... */
    uint64_t soff = n ? sp[0].off : 0;  /* ... at offset soff */
    uint64_t deadline = 0;
    int npend = 0, err = 0, rc = 0;
    proto_msg m;

    pthread_mutex_lock(&c->lock);
    for (;;) {
        int i;
        /* Pieces whose connection was lost go out again first. */
        for (i = 0; i < npend && !err; i++) {
            if (pend[i].id)
                continue;
            rc = send_xpiece(c, sp, pend, npend, i, &deadline);
            if (rc < 0 && conn_lost(rc))
                goto lost;
            if (rc < 0) {
                err = -rc;
                if (rc == -ESTALE)
                    set_err(c, ESTALE, NULL, 0);
                pend[i--] = pend[--npend];
            }
        }
        while (npend < GR_WINDOW && !err && si < n) {
            uint64_t end = sp[si].off + sp[si].len, unit, plen;
            if (soff >= end) {
                if (++si < n)
                    soff = sp[si].off;
                continue;
            }
            unit = gr__file_chunk_size(sp[si].f);
            unit = unit ? unit : GR_PIECE_MIN;
            unit *= (GR_PIECE_MIN + unit - 1) / unit;   /* whole chunks, >= 1 MiB */
            plen = (soff / unit + 1) * unit - soff;
            if (plen > end - soff)
                plen = end - soff;
            pend[npend++] = (xpiece){ 0, si, soff, plen };
            soff += plen;
            rc = send_xpiece(c, sp, pend, npend, npend - 1, &deadline);
            if (rc < 0 && conn_lost(rc))
                goto lost;
            if (rc < 0) {
                err = -rc;
                if (rc == -ESTALE)
                    set_err(c, ESTALE, NULL, 0);
                npend--;
            }
        }
        if (npend == 0)
            break;
        rc = recv_msg(c, &m);
        if (rc < 0)
            goto lost;
        for (i = 0; i < npend && (pend[i].id == 0 || pend[i].id != m.h.req_id); i++)
            ;
        if (i == npend) {
            if (m.h.req_id == 0 && m.h.status < 0) {
                rc = m.h.status;        /* a request of ours was unreadable */
                goto out;
            }
            drop_stale(c, &m);
            continue;
        }
        {
            xpiece p = pend[i];
            uint64_t got;
            int cb_err;
            pend[i] = pend[--npend];
            if (m.h.status < 0) {
                if (!err) {
                    err = -m.h.status;
                    set_err(c, err, m.u.error.len ? m.u.error.text : NULL, m.u.error.len);
                }
                continue;
            }
            if (m.h.op != PROTO_OP_READX) {
                rc = -EPROTO;
                goto out;
            }
            if (err) {
                drop_readx(c, &m);      /* draining after an error */
                continue;
            }
            rc = deliver_readx(c, &m, &p, cb, arg, &got, &cb_err);
            if (rc < 0 && !cb_err)
                goto out;
            if (rc < 0) {
                err = -rc;
                continue;
            }
            if (got == 0 && p.len > 0) {
                rc = -EPROTO;           /* no progress would loop forever */
                goto out;
            }
            if (got < p.len)            /* the daemon covered a prefix: ask for the rest */
                pend[npend++] = (xpiece){ 0, p.span, p.off + got, p.len - got };
        }
        if (c->nrel >= GR_RELEASE_BATCH)
            flush_releases(c);
        continue;
lost:
        if (!reconnect(c, rc, &deadline))
            goto out;
        for (i = 0; i < npend; i++)
            pend[i].id = 0;             /* their replies died with the connection */
    }
    flush_releases(c);
    if (!err)
        c->errtext[0] = '\0';
    pthread_mutex_unlock(&c->lock);
    return -err;
out:
    flush_releases(c);
    if (conn_lost(rc))
        rc = -ECONNRESET;
    set_err(c, -rc, NULL, 0);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void gr__ref_release_n(gr_ref **refs, size_t n)
{
    gr_client *c = NULL;
    size_t i;

    for (i = 0; i < n && !c; i++)
        if (refs[i])
            c = refs[i]->c;
    if (!c)
        return;
    if (inherited(c)) {                 /* the leases are the parent's: kept */
        for (i = 0; i < n; i++)
            if (refs[i]) {
                free(refs[i]->heap);
                free(refs[i]);
            }
        return;
    }
    pthread_mutex_lock(&c->lock);
    for (i = 0; i < n; i++)
        if (refs[i])
            ref_release_locked(c, refs[i]);
    flush_releases(c);
    pthread_mutex_unlock(&c->lock);
}

void gr__ref_release_held(gr_ref *ref)
{
    if (ref)
        ref_release_locked(ref->c, ref);
}

int gr__file_staged_fd(const gr_file *f)
{
    return f->staged_fd;
}

gr_client *gr__file_client(const gr_file *f)
{
    return f->c;
}

uint64_t gr__file_chunk_size(const gr_file *f)
{
    return f->a.chunk_size;
}

void gr__gpu_set(gr_client *c, const gr__gpu_hooks *hooks, void *arg)
{
    pthread_mutex_lock(&c->lock);
    c->gpu_hooks = hooks;
    c->gpu_arg = arg;
    pthread_mutex_unlock(&c->lock);
}

void *gr__gpu_get(gr_client *c)
{
    void *arg;

    pthread_mutex_lock(&c->lock);
    arg = c->gpu_hooks ? c->gpu_arg : NULL;
    pthread_mutex_unlock(&c->lock);
    return arg;
}

int gr__fail(gr_client *c, int err, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&c->lock);
    va_start(ap, fmt);
    vsnprintf(c->errtext, sizeof(c->errtext), fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&c->lock);
    errno = err;
    return -1;
}

gr__meta *gr__meta_of(gr_client *c)
{
    return c->meta;
}

int gr__call(gr_client *c, uint8_t op, gr__enc_fn enc, gr__dec_fn dec, void *arg)
{
    return gr__call_fd(c, op, -1, enc, dec, arg);
}

int gr__call_fd(gr_client *c, uint8_t op, int fd, gr__enc_fn enc, gr__dec_fn dec, void *arg)
{
    uint8_t req[PROTO_HDR_LEN + PROTO_READDIR_PREFIX + PROTO_MAX_PATH];
    proto_msg m;
    uint32_t id;
    ssize_t len;
    int rc;

    pthread_mutex_lock(&c->lock);
    id = take_id(c);
    len = enc(arg, req, sizeof(req), id);
    if (len < 0) {
        rc = fail(c, (int)len);
    } else {
        c->proof_fd = fd;           /* borrowed, or -1: sent with this request only */
        rc = call_ok(c, req, (size_t)len, id, op, &m);
        c->proof_fd = -1;
        if (rc == 0) {
            c->errtext[0] = '\0';
            rc = dec(arg, &m);
            if (rc < 0)
                rc = fail(c, rc);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int gr__report(gr_client *c, const char *const *names, const uint64_t *values, size_t n)
{
    /* Header and at most PROTO_MAX_REPORT records of the longest name. */
    uint8_t req[PROTO_HDR_LEN + PROTO_MAX_REPORT * (2 + 255 + 8)];
    size_t off = 0;
    proto_msg m;
    uint32_t id;
    ssize_t len = 0;
    int rc = 0;

    if (n > PROTO_MAX_REPORT)
        return -EMSGSIZE;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = proto_rec_u64(req + PROTO_HDR_LEN, sizeof(req) - PROTO_HDR_LEN, &off, names[i],
                           values[i]);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&c->lock);
    id = take_id(c);
    len = proto_enc_report(req, sizeof(req), id, req + PROTO_HDR_LEN, off);
    /* No reconnecting for a report: it is advice, and gr_disconnect sends
     * the last one. */
    rc = len < 0 ? (int)len : c->fd < 0 ? -ENOTCONN : call(c, req, (size_t)len, id, &m);
    if (rc == 0 && m.h.status < 0)
        rc = m.h.status;
    else if (rc == 0 && m.h.op != PROTO_OP_REPORT)
        rc = -EPROTO;
    pthread_mutex_unlock(&c->lock);
    return rc;
}
