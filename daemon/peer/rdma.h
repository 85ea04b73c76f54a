/*
 * rdma.h - the peer layer's RDMA transport: a node serves the chunks it
 * holds in its DRAM arena to other nodes by one-sided RDMA READ over RC
 * queue pairs (libibverbs + librdmacm), with no CPU of its own in the data
 * path.
 *
 * Division of labour with the peer layer (peer.c): the request, the lease
 * and the authentication travel over the authenticated TCP control
 * channel, which also hands out the 32-byte tokens that an RDMA connection
 * must present.  This module only (a) listens for rdma_cm connections and
 * accepts those whose token the caller's check() accepts, (b) registers
 * memory regions for remote read and tells their rkey, and (c) on the
 * requesting side connects and performs blocking READs of (address, rkey,
 * length) triples the control channel returned.
 *
 * Every ibverbs and rdma_cm call goes through one table of function
 * pointers (rdma_ops, rdma_ops.h), so the state machine here (connect,
 * register, read, completion errors, a peer dying mid-read) runs in
 * tests/check_rdma.c against a stand-in that emulates a connected pair in
 * one process and injects completions, on machines with no RDMA device.
 * rdma_ops_real is libibverbs and librdmacm themselves.
 *
 * The wire: the connect request's private data is "GRR1" followed by the
 * 32-byte token (36 bytes; rdma_cm allows 56).  Anything else is rejected.
 *
 * Threads: a server has a listener thread of its own (rdma_cm events:
 * connect requests, established, disconnects); rdma_srv_expose may be
 * called from any thread at the same time.  A client belongs to one thread
 * at a time (an I/O thread): one READ in flight per connection.
 */
#ifndef GR_RDMA_H
#define GR_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "rdma_ops.h"

#define RDMA_TOKEN_LEN 32
/* Connections one server holds at most; requests beyond are rejected. */
#define RDMA_SRV_MAX_CONNS 256

typedef struct rdma_srv rdma_srv;
typedef struct rdma_cli rdma_cli;

/* Whether an RDMA device with an ACTIVE port exists (what [peer] transport
 * = auto asks): 1 or 0.  Never fails: no device, no libibverbs provider or
 * an error opening one all read 0. */
int rdma_device_present(const rdma_ops *ops);

/* ---- server: the home node ---------------------------------------------- */

/*
 * Listen for RDMA connections on addr:port (a numeric address or a host
 * name, which must belong to an RDMA device's interface: the protection
 * domain that exposed memory is registered in is that device's, so a
 * wildcard address is refused) and start the listener thread.  A connect
 * request is accepted only if its private data carries a token for which
 * check(arg, tok) returns 1; check runs on the listener thread, so it must
 * be thread-safe with whatever hands tokens out.  Logs the device, port
 * and GID it listens on.
 * 0 and *out, or -errno (-ENODEV: no RDMA device has that address,
 * -EADDRINUSE, -EINVAL: a bad address) with err saying why.  ops must
 * outlive the server.
 */
int rdma_srv_new(const rdma_ops *ops, const char *addr, uint16_t port,
                 int (*check)(void *arg, const uint8_t tok[RDMA_TOKEN_LEN]), void *arg,
                 rdma_srv **out, char *err, size_t errlen);

/*
 * Make [base, base+len) readable by RDMA READ from accepted connections
 * and return its rkey (for the reply on the control channel).  Only remote
 * read is granted, never write.
 *
 * Registrations are cached by base: the same (base, len, gen) again costs
 * a hash lookup and returns the same rkey.  A new gen (or len) for a known
 * base registers anew and deregisters the old region, so a READ with the
 * old rkey completes in error from then on: the DRAM arena gives a segment
 * a fresh memfd at the same address when its owner changes (arena.h,
 * arena_segment_gen), and an existing region would keep reading the old,
 * pinned pages.
 * Cost: a registration pins every page of the range, which takes time in
 * proportion to len and commits memory the arena has not committed yet
 * (a sealed memfd's untouched pages get allocated), and the pages stay
 * pinned while registered.  So register a segment once it holds chunks,
 * not the whole arena at start-up, and not from the loop thread for the
 * first time if the segment is large.
 * 0, or -errno from the registration (-ENOMEM, -EINVAL, -EFAULT: not
 * mapped); on failure the old registration, if any, stays.
 * Threads: any (a mutex of the server's).
 */
int rdma_srv_expose(rdma_srv *s, void *base, size_t len, uint64_t gen, uint32_t *rkey);

/* Deregister the region at base (a segment going away).  0, or -ENOENT if
 * none is registered there.  Threads: any. */
int rdma_srv_unexpose(rdma_srv *s, void *base);

typedef struct rdma_srv_stats {
    uint64_t accepted;          /* connections accepted (a valid token) */
    uint64_t refused;           /* connect requests rejected: bad token, malformed, too many */
    uint64_t conns;             /* connections established now */
    uint64_t regions;           /* memory regions registered now */
    uint64_t registrations;     /* ibv_reg_mr calls that succeeded, ever */
} rdma_srv_stats;

/* A snapshot of the counters.  Threads: any. */
void rdma_srv_get_stats(rdma_srv *s, rdma_srv_stats *out);

/* Stop the listener thread, disconnect every connection (their clients'
 * reads fail with -ENOTCONN or -EIO), deregister every region and release
 * the device.  NULL-safe; *s is NULL afterwards.  Not while another thread
 * is inside rdma_srv_expose. */
void rdma_srv_free(rdma_srv **s);

/* ---- client: the requester ----------------------------------------------- */

/*
 * Connect to the server at addr:port presenting tok, with a registered
 * bounce buffer of max_len bytes (the largest READ this connection will
 * make: a chunk), waiting at most timeout_ms for address and route
 * resolution and the connection.  Logs the device, port and GID used.
 * 0 and *out, or -errno with err saying why: -ECONNREFUSED (rejected: a
 * wrong token, or no listener), -ETIMEDOUT, -EHOSTUNREACH (no route over
 * an RDMA device), -ENODEV (no RDMA device or rdma_cm here), -EINVAL
 * (max_len 0, timeout_ms <= 0, a bad address), -ENOMEM.
 */
int rdma_cli_connect(const rdma_ops *ops, const char *addr, uint16_t port,
                     const uint8_t tok[RDMA_TOKEN_LEN], size_t max_len, int timeout_ms,
                     rdma_cli **out, char *err, size_t errlen);

/*
 * RDMA READ len bytes at the server's address raddr under rkey into dst,
 * through the bounce buffer, waiting at most timeout_ms for the completion
 * (a short spin, then the completion channel).  dst is written only on
 * success.
 *   0          the bytes are in dst;
 *   -EINVAL    len > max_len or timeout_ms <= 0 (the connection stays usable);
 *   -ETIMEDOUT no completion in time;
 *   -EIO       a completion error (a wrong rkey or range: remote access
 *              error; the peer gone: retry exceeded; flushed);
 *   -ENOTCONN  the peer disconnected, or the connection was already dead.
 * After -ETIMEDOUT, -EIO or -ENOTCONN the connection is dead: the queue
 * pair is moved to the error state (a late READ response must never land
 * in the bounce buffer under a later read) and every later call returns
 * -ENOTCONN.  Free it and connect again.  len 0 returns 0.
 * Threads: the connection's one user at a time.
 */
int rdma_cli_read(rdma_cli *c, uint64_t raddr, uint32_t rkey, size_t len, void *dst,
                  int timeout_ms);

/* Whether c is still usable (no read has failed it): 1 or 0. */
int rdma_cli_alive(const rdma_cli *c);

/* Disconnect and release everything.  NULL-safe; *c is NULL afterwards. */
void rdma_cli_free(rdma_cli **c);

#endif
