/*
 * policy.h - eviction policies shared by the cache tiers.
 *
 * A policy orders the items of one tier and picks what to evict so that the
 * tier stays within its byte capacity.  It is intrusive: the tier embeds a
 * policy_node in each entry and keeps owning the entry, its memory and its
 * lookup (hash table); the policy only links nodes and keeps per-node
 * metadata (recency, frequency, bits).  Nothing is allocated per operation,
 * except that the ghost tables of s3fifo (key hashes recently evicted) and
 * epoch (key hashes recently refused) grow geometrically with the number of
 * items: 56 bytes per entry, at most 4 (s3fifo) or 8 (epoch) entries per
 * item inserted (about 2 and 4 in steady state).
 *
 * Kinds (see policy.c for each algorithm and its reason):
 *   lru     least recently used.
 *   lfu     least frequently used, frequencies halved as accesses accumulate
 *           so that yesterday's hot set does not squat forever; ties by LRU.
 *   sieve   SIEVE (NSDI'24): one FIFO, a visited bit and a moving hand.
 *   s3fifo  S3-FIFO (SOSP'23): small FIFO (10%), main FIFO, ghost FIFO.
 *   epoch   for training epochs: LRU order, but a full tier admits a
 *           newcomer only on evidence that it is worth more than the LRU
 *           tail (the tail went stale and the newcomer is warm, or refused
 *           keys come back more often than residents are hit).  Keeps a
 *           stable subset, C/D of the reads, when a dataset D larger than
 *           the tier C is read once per epoch, same order or shuffled.
 *
 * Caller protocol, for an access to key k of size bytes:
 *
 *     hit:   policy_hit(p, &e->pn);
 *     miss:  if (policy_admit(p, hash(k), size)) {
 *                while (policy_used(p) + size > policy_capacity(p)) {
 *                    policy_node *v = policy_victim(p);
 *                    if (!v)
 *                        break;                 (everything left is pinned)
 *                    policy_remove(p, v);
 *                    ...drop the entry that embeds v from the tier...
 *                }
 *                if (policy_used(p) + size <= policy_capacity(p)) {
 *                    policy_node_init(&e->pn, hash(k), size);
 *                    policy_insert(p, &e->pn);
 *                }
 *            }
 *
 * policy_admit counts the miss (some policies keep a clock of accesses), so
 * call it once per miss even when there is room.  A node may be inserted
 * without policy_admit (warmup, a tier reloading its index).
 *
 * Threads: none.  A policy is used under its tier's lock (or on one thread);
 * no function blocks.
 */
#ifndef GR_POLICY_H
#define GR_POLICY_H

#include <stdint.h>

#include "list.h"

typedef enum policy_kind {
    POLICY_LRU,
    POLICY_LFU,
    POLICY_SIEVE,
    POLICY_S3FIFO,
    POLICY_EPOCH,
    POLICY_NKINDS
} policy_kind;

typedef struct policy policy;

/* The policies' queues, buckets and pinned list: the common list. */
typedef gr__list policy_link;

/*
 * Embedded in each tier entry.  The caller sets key_hash and size (with
 * policy_node_init) before policy_insert and leaves every field alone while
 * the node is inserted; the other fields belong to the policy.
 */
typedef struct policy_node {
    uint64_t key_hash;          /* any well-mixed hash of the key (S3-FIFO's ghost uses it) */
    uint64_t size;              /* bytes charged against the capacity; constant while inserted */
    policy_link link;           /* queue, bucket or pinned list */
    uint64_t stamp;             /* last access: a tick (lfu), an access count (epoch) */
    uint32_t freq;              /* lfu: frequency; s3fifo: 0..3 */
    uint8_t where;              /* which list, 0 when not inserted */
    uint8_t flags;              /* visited (sieve), chosen victim (s3fifo) */
} policy_node;

/* Parse "lru", "lfu", "sieve", "s3fifo" or "epoch" (case-insensitive).
 * 0, or -EINVAL for anything else (*out untouched). */
int policy_kind_parse(const char *name, policy_kind *out);

/* The name policy_kind_parse accepts for k, or "?" for an invalid kind.
 * Static storage. */
const char *policy_kind_name(policy_kind k);

/* A new, empty policy of kind k for a tier of capacity bytes.  On success
 * *out owns it (free with policy_free).  0, -EINVAL (bad kind, capacity 0)
 * or -ENOMEM. */
int policy_new(policy_kind k, uint64_t capacity, policy **out);

/* Free the policy, set *p NULL.  NULL-safe.  Nodes still inserted are simply
 * forgotten: they belong to the caller, who may free them before or after. */
void policy_free(policy **p);

/* Set a node up before policy_insert: zeroes the policy's fields. */
void policy_node_init(policy_node *n, uint64_t key_hash, uint64_t size);

/* A miss on a key of size bytes.  1: insert it (after evicting to make
 * room); 0: do not cache it.  Every kind refuses an item larger than the
 * capacity; epoch also refuses newcomers that would displace items that are
 * not stale, and everything when the tier is full of pinned items. */
int policy_admit(policy *p, uint64_t key_hash, uint64_t size);

/* n (initialised, not inserted) is now in the tier.  The caller made room;
 * the policy does not check the capacity.  n must stay at the same address
 * until policy_remove. */
void policy_insert(policy *p, policy_node *n);

/* An inserted node (pinned or not) was accessed. */
void policy_hit(policy *p, policy_node *n);

/* An inserted node leaves the tier (evicted after policy_victim, deleted,
 * invalidated; pinned or not).  The caller may free it on return. */
void policy_remove(policy *p, policy_node *n);

/* The node to evict next, still inserted (remove it with policy_remove), or
 * NULL when no unpinned node is left.  Calling it again without changes in
 * between returns the same node.  Valid until the next call on p. */
policy_node *policy_victim(policy *p);

/* Pin (pinned != 0) or unpin an inserted node.  A pinned node still counts in
 * policy_used but is never a victim.  An unpinned node re-enters as if it had
 * just been accessed.  Pinning a pinned node (or unpinning an unpinned one)
 * does nothing. */
void policy_pin(policy *p, policy_node *n, int pinned);

/* Bytes of inserted nodes (pinned included). */
uint64_t policy_used(const policy *p);
/* Inserted nodes (pinned included). */
uint64_t policy_count(const policy *p);
uint64_t policy_capacity(const policy *p);
policy_kind policy_get_kind(const policy *p);

/*
 * Replace *p by a new policy of kind k (same capacity) holding the same
 * nodes: unpinned ones in the order the old policy would have evicted them
 * (so that LRU-like kinds keep the recency order), pinned ones pinned.
 * pinned_nodes lists the pinned nodes (npinned of them; the policy cannot
 * enumerate them).  0, or -ENOMEM / -EINVAL with *p unchanged.
 */
int policy_switch(policy **p, policy_kind k, policy_node **pinned_nodes, size_t npinned);

/* Check the policy's internal invariants (O(n)): 0 if they hold, else a
 * negative number naming the first broken one.  For tests and asserts. */
int policy_sane(const policy *p);

#endif
