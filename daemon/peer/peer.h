/*
 * peer.h - the peer cache: the nodes of a job share what their DRAM tiers
 * hold, so a dataset is read from the DFS once, not once per node.
 *
 * Each chunk has a home among the members (members.h, rendezvous hashing
 * over the file's path and attributes and the chunk's index).  A miss in
 * this node's DRAM and NVMe asks the home before the source (a backend in
 * the fetch chain, backend.h); the home finds the chunk in its own tiers or
 * reads it from the source once, through its own single-flight fetch, keeps
 * it, and serves it to every member that asks.  The home's copy lives in
 * quarantine memory (arena.h): no client of the home maps it until one of
 * them proves its own access and claims it by copy.
 *
 * Transport: a TCP connection per request in flight (a pool per member),
 * authenticated both ways with the shared key ([peer] key_file) before any
 * other frame is read (wire.h); chunks travel inline, with their XXH3-64,
 * which the asker verifies before using a byte.
 *
 * Access: a node asks only for chunks of files it resolved and checked for
 * its own client (the fetch engine only fetches those); the home checks
 * that the path is under its roots and still has the attributes the asker
 * saw, and answers ESTALE otherwise (the asker then reads the source).
 *
 * Failure: a peer that does not answer within [peer] timeout, or answers
 * wrongly, costs that timeout once: the request goes to the second owner
 * or the source, and the peer is skipped for a back-off (1 s doubling to
 * 30 s) before it is tried again.
 *
 * Threads: peers_new, peers_shutdown, peers_free, peers_each and the
 * serving side run on the loop thread; the backend's get on I/O threads
 * (blocking, bounded by the timeout).
 */
#ifndef GR_PEER_H
#define GR_PEER_H

#include <event2/event.h>
#include <event2/buffer.h>

#include "backend.h"
#include "config.h"
#include "fetch.h"
#include "source.h"
#include "stats.h"
#include "workers.h"

typedef struct peers peers;

/* Membership from cfg's [peer] keys, the key read (it must be a regular
 * file owned by root or by us, mode 0600 or 0400, at least 16 bytes), and
 * the listener bound.  w: the I/O threads of the peer lane (fetch.h,
 * fetcher_set_peer_lane), where serving peers' requests runs its file
 * lookups.  0 or -errno with the reason in err. */
int peers_new(struct event_base *base, const gr_config *cfg, source *src, workers *w,
              gr_stats *stats, peers **out, char *err, size_t errlen);

/* The peer cache as a backend of the fetch chain (after NVMe, before the
 * source). */
void peers_backend(peers *p, backend *out);

/* The engine that serves peers' requests (made after the chain, so set
 * here, before the loop runs). */
void peers_set_fetcher(peers *p, fetcher *fx);

/* SIGHUP: the membership again from cfg's nodes and nodes_file (the file
 * re-read); listen, key_file and transport stay as started.  Requests in
 * flight finish with the membership they started with.  0, or -EINVAL
 * (logged) keeping the old membership. */
int peers_reload(peers *p, const gr_config *cfg);

/* Stop listening and drop the serving connections (before the workers
 * stop).  NULL-safe. */
void peers_shutdown(peers *p);
void peers_free(peers **p);

/* One member as `granaryctl peers` shows it. */
typedef struct peer_info {
    const char *name;           /* "HOST:PORT" */
    int self;
    const char *state;          /* "self", "up", "down", "unknown" (never asked) */
    const char *transport;      /* "tcp", "rdma" */
    double down_for;            /* seconds left of its back-off, when down */
    uint64_t hits, bytes;       /* chunks and bytes it served us */
    uint64_t misses;            /* answers "not here" (ESTALE, ENOENT, ...) */
    uint64_t errors;            /* connects, I/O errors, protocol errors */
    uint64_t timeouts;
    uint64_t corrupt;           /* chunks whose checksum failed */
    uint64_t lat_us[3];         /* p50, p90, p99 of hits, microseconds (bucket bounds) */
    uint64_t served, served_bytes; /* this node served it (requests that got a chunk) */
} peer_info;

/* cb for each member in order; stops at its first non-zero return, which it
 * returns. */
int peers_each(peers *p, int (*cb)(void *arg, const peer_info *i), void *arg);

/* Prometheus families of the peers (granary_peer_*{peer="HOST:PORT"}). */
int peers_metrics(peers *p, struct evbuffer *out);

#endif
