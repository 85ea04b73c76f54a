/*
 * htab.h - one intrusive hash table for the daemon and the client, with
 * incremental growth.
 *
 * A table holds nodes embedded in the caller's structs (gr__hnode), each
 * with the 64-bit hash the caller computed; the caller compares keys (the
 * find callback), so one implementation serves chunk keys, paths and file
 * ids alike.  There is no fixed capacity: when the table holds more nodes
 * than buckets it allocates one twice as large and moves the old buckets
 * over a few at a time, on each later insert, find and remove (as Redis's
 * dict does), so no single call ever rehashes millions of entries on the
 * event loop.  Until the move is done both bucket arrays are searched.  If
 * the larger array cannot be allocated the table keeps working with longer
 * chains.
 *
 * The table never allocates nodes and never frees them: removing a node
 * only unlinks it.
 *
 * Threads: none of its own; callers serialise (the daemon's tables belong
 * to the loop thread, or sit under the owner's lock).
 */
#ifndef GR_COMMON_HTAB_H
#define GR_COMMON_HTAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct gr__hnode gr__hnode;
struct gr__hnode {
    gr__hnode *next;            /* bucket chain */
    uint64_t hash;              /* set by gr__htab_insert */
};

typedef struct gr__htab {
    gr__hnode **b[2];           /* b[0] the current array; b[1] the new one while moving */
    size_t nb[2];               /* buckets in each (powers of two; 0: none) */
    size_t moved;               /* while b[1]: buckets of b[0] below this index are moved */
    size_t count;               /* nodes held */
} gr__htab;

/* Compare a node's key with key: non-zero if equal. */
typedef int (*gr__htab_eq)(const gr__hnode *n, const void *key);

/* An empty table with room for about `hint` nodes before it first grows
 * (at least 16).  0 or -ENOMEM. */
int gr__htab_init(gr__htab *h, size_t hint);

/* Free the bucket arrays; the nodes are the caller's.  Safe on a zeroed or
 * already finished table. */
void gr__htab_fini(gr__htab *h);

/* Link n under hash.  The caller ensures no equal key is present if keys
 * must be unique. */
void gr__htab_insert(gr__htab *h, gr__hnode *n, uint64_t hash);

/* The first node under hash whose key eq says equals key, or NULL. */
gr__hnode *gr__htab_find(gr__htab *h, uint64_t hash, gr__htab_eq eq, const void *key);

/* Unlink n, which must be in h.  0, or -ENOENT if it is not.  The one
 * call allowed inside a gr__htab_walk callback (for its own node). */
int gr__htab_remove(gr__htab *h, gr__hnode *n);

/* Nodes held. */
static inline size_t gr__htab_count(const gr__htab *h)
{
    return h->count;
}

/*
 * Visit every node: cb(arg, n) for each, in no particular order.  cb may
 * remove n itself (gr__htab_remove, then free it), but must not insert,
 * find or remove anything else in h.  A non-zero cb result stops the walk and is returned; else 0.
 */
int gr__htab_walk(gr__htab *h, int (*cb)(void *arg, gr__hnode *n), void *arg);

/*
 * Iteration as a loop: for (n = gr__htab_first(h, &it); n; n = gr__htab_next(&it)).
 * The same rules as gr__htab_walk: the loop may remove the node it is at,
 * nothing else in h.
 */
typedef struct gr__htab_iter {
    gr__htab *h;
    int t;                      /* array */
    size_t i;                   /* bucket */
    gr__hnode *next;            /* the node after the current one */
} gr__htab_iter;

gr__hnode *gr__htab_first(gr__htab *h, gr__htab_iter *it);
gr__hnode *gr__htab_next(gr__htab_iter *it);

/* Whether a move to a larger array is under way (for tests). */
static inline int gr__htab_growing(const gr__htab *h)
{
    return h->b[1] != NULL;
}

/* The struct that embeds a node. */
#define gr__container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif
