/*
 * members.h - who is in the peer cache, and which of them is a chunk's
 * home.
 *
 * Membership is static: the configured list ([peer] nodes, Slurm-style
 * ranges expanded, or a hostfile) of HOST:PORT entries, this node's own
 * listen address among them.  Every member computes the same owners for a
 * chunk by rendezvous (highest-random-weight) hashing over the entries'
 * names: the home is the member with the highest weight, the second owner
 * the next.  Adding or removing a member moves only the chunks whose home
 * was or becomes that member (about 1/n of them), never the others.
 *
 * Threads: built on the loop thread before the I/O threads start; read
 * only after that, from any thread.
 */
#ifndef GR_MEMBERS_H
#define GR_MEMBERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define MEMBERS_MAX 4096        /* members in one peer cache */
#define MEMBER_NAME_MAX 300     /* "HOST:PORT" */

typedef struct member {
    char name[MEMBER_NAME_MAX]; /* as configured, "HOST:PORT": what the hashing uses */
    char host[256];
    char port[8];
    uint64_t hash;              /* of name */
    struct sockaddr_storage addr; /* resolved when built (IPv4 or IPv6) */
    socklen_t addrlen;
} member;

typedef struct members {
    member *m;
    unsigned n;
    int self;                   /* index of this node */
} members;

/*
 * Build the list from spec (comma- or blank-separated HOST[:PORT] entries,
 * HOST may hold one Slurm-style range "pre[01-04,7]post"), and the lines of
 * the hostfile at file ("" or NULL: none), the port defaulting to that of
 * listen ("HOST:PORT", "[V6]:PORT").  Every host is resolved; this node is
 * the entry whose address equals listen's.  Duplicates are refused.  0, or
 * -EINVAL/-ENOENT/-E2BIG with the reason in err.
 */
int members_build(const char *listen, const char *spec, const char *file, members *out,
                  char *err, size_t errlen);
void members_free(members *ms);

/* The home (out[0]) and the second owner (out[1], -1 with one member) of
 * the chunk whose cluster-wide key is key. */
void members_owners(const members *ms, uint64_t key, int out[2]);

/* Split "HOST:PORT" / "[V6]:PORT" into host and port (host without the
 * brackets).  0 or -EINVAL. */
int members_split(const char *hp, char *host, size_t hostlen, char *port, size_t portlen);

/* Expand one entry's Slurm-style range into cb(arg, expanded) calls:
 * "gpu[01-03,7]:70" gives gpu01:70, gpu02:70, gpu03:70, gpu7:70 (the
 * width of the lower bound is kept).  At most one bracket.  Returns 0, the
 * first non-zero cb result, or -EINVAL (malformed) / -E2BIG (over
 * MEMBERS_MAX names). */
int members_expand(const char *entry, int (*cb)(void *arg, const char *name), void *arg);

#endif
