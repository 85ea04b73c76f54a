/*
 * lcache.h - libgranary's lease cache: chunks a client keeps leased after
 * a read, so that its later reads of them are served from its own mapping
 * of the arena with no message at all (internal; never exported).
 *
 * A kept lease names a chunk of one file identity (the attributes the
 * daemon gave at open, the chunk size, the index: gr__ckey), so it serves
 * only reads of a gr_file with that identity: an open that finds the file
 * changed gets another identity and never meets the old bytes.  The daemon
 * says at HELLO how many bytes a client may keep and for how long
 * (lease_cache, lease_ttl_ms); past the bytes the least recently used lease
 * goes back, past the time a lease goes back at its next lookup.
 *
 * An entry a gr_ref still points into (users > 0) leaves the cache when it
 * is evicted or expires but lives until the last user lets go: only then is
 * its lease given back.  The daemon keeps a leased chunk's memory in place
 * whatever happens to the chunk in its tiers (eviction, invalidation), so
 * the bytes stay those of the identity until the release.
 *
 * Soft entries: where the daemon keeps generation tables (PROTO_FEAT_GENS),
 * an entry that goes over the bytes or the time is not forgotten but
 * softened: its lease goes back (the daemon may evict the chunk and reuse
 * its block) and the entry stays, on a second list bounded by count, with
 * the generation its block had while it was leased (bgen, read from genp
 * in the segment's table).  A read from a soft entry is good only if the
 * entry reads bgen before and after the copy (gr__lc_check_*); else the
 * entry is dropped and the caller asks the daemon.  (Hard entries are
 * checked the same way: a daemon that dropped the connection took their
 * leases with it.)  A soft entry lasts GR_LC_SOFT_TTL_MS at most.  A soft entry serves
 * copies only: a gr_ref needs a lease.  Soft entries cost the daemon
 * nothing and the client only the entry: the bytes are the daemon's.
 *
 * Threads: the owner's lock (the client's) serialises every call.
 */
#ifndef GR_LCACHE_H
#define GR_LCACHE_H

#include <stdint.h>

#include "granary_int.h"
#include "htab.h"
#include "list.h"

typedef struct gr__lent {
    gr__hnode hn;               /* the cache's table, while cached */
    gr__list lru;               /* least recently used first, while cached */
    gr__ckey key;
    uint32_t gen;               /* the connection whose lease it is */
    uint32_t lease;
    const uint8_t *p;           /* the chunk's bytes in the segment mapping */
    uint64_t len;               /* the chunk's length */
    uint64_t expires_ms;        /* gr__now_ms() past which it is not used */
    uint32_t users;             /* gr_refs pointing into it */
    int cached;                 /* in the table (else only its users hold it) */
    int transient;              /* the daemon said NOKEEP: the one such entry kept */
    int soft;                   /* lease given back: good while *genp == bgen */
    const uint32_t *genp;       /* its block's generation in the segment, or NULL */
    uint32_t bgen;              /* *genp while leased */
} gr__lent;

/* Give e's lease back (the cache frees e right after).  Called with the
 * owner's lock held. */
typedef void (*gr__lc_release)(void *arg, const gr__lent *e);

#define GR_LC_SOFT_MAX 65536       /* soft entries kept (about 150 bytes each) */
#define GR_LC_SOFT_TTL_MS 600000u   /* and each for at most 10 minutes: a block's
                                     * generation (32 bits) cannot come round in that
                                     * time (a release per chunk fetch) */

typedef struct gr__lcache {
    gr__htab table;             /* hard and soft entries */
    gr__list lru;               /* hard entries (holding a lease) */
    gr__list soft_lru;          /* soft entries, least recently used first */
    uint64_t bytes;             /* of the hard entries */
    uint64_t max;               /* 0: keep nothing */
    uint32_t ttl_ms;
    uint32_t count;             /* hard entries */
    uint32_t soft_count;
    uint32_t soft_max;          /* GR_LC_SOFT_MAX; tests set less */
    gr__lc_release release;
    void *arg;
    gr__lent *transient;        /* the cached NOKEEP entry, if any */
    /* Counters, for REPORT. */
    uint64_t hits, hit_bytes, kept, expired, unpinned_hits, stale;
} gr__lcache;

/* An empty cache that keeps nothing until configured.  0 or -ENOMEM. */
int gr__lc_init(gr__lcache *lc, gr__lc_release release, void *arg);
/* Drop every entry (released), free the table.  Entries with users stay
 * until gr__lc_unuse. */
void gr__lc_fini(gr__lcache *lc);

/* Keep at most max bytes, each lease at most ttl_ms; trims at once. */
void gr__lc_configure(gr__lcache *lc, uint64_t max, uint32_t ttl_ms);

/* The entry for k at time now_ms (gr__now_ms), hard or soft, made the most
 * recently used of its list; NULL if none (a hard one past its time is
 * softened or dropped first).  A soft entry's bytes are good only between
 * gr__lc_check_begin and a gr__lc_check_end that says so. */
gr__lent *gr__lc_find(gr__lcache *lc, const gr__ckey *k, uint64_t now_ms);

/* For a copy from e: 1 when its bytes may be read (its block has the
 * generation it had under the lease, or it has no table), 0 when e was
 * stale (dropped). */
int gr__lc_check_begin(gr__lcache *lc, gr__lent *e);
/* After the copy: 1 when the bytes copied are good, 0 when the block
 * changed under the copy (e dropped: the copy is garbage). */
int gr__lc_check_end(gr__lcache *lc, gr__lent *e);

/* Tell e where its block's generation is (a hard entry: the value there
 * now is the one its bytes have). */
void gr__lc_set_gen(gr__lent *e, const uint32_t *genp);

/* Keep the lease (gen, lease) of chunk k whose len bytes are at p:
 * the new entry, or NULL when the cache does not keep it (disabled, the
 * chunk alone is over the limit, k is kept already, out of memory): the
 * caller then gives the lease back itself.  A soft entry for k gives way. */
gr__lent *gr__lc_insert(gr__lcache *lc, const gr__ckey *k, uint32_t gen, uint32_t lease,
                        const uint8_t *p, uint64_t len, uint64_t now_ms);

/* The same for a lease the daemon marked NOKEEP (its tier holds the chunk
 * outside its policy): kept only until the next such lease comes, so that
 * a sequential pass of small reads over the chunk still needs no message,
 * while the client never holds more than one of the daemon's scarce
 * reserve blocks. */
gr__lent *gr__lc_insert_transient(gr__lcache *lc, const gr__ckey *k, uint32_t gen,
                                  uint32_t lease, const uint8_t *p, uint64_t len,
                                  uint64_t now_ms);

/* Give hard entry e's lease back now, as if it had gone over the bytes:
 * it stays as a soft entry where it can (a generation to check, no
 * gr_ref in it), else it is dropped (released when its last user lets
 * go). */
void gr__lc_retire(gr__lcache *lc, gr__lent *e);

/* A gr_ref's hold on hard entry e: take it, and let go (the entry goes,
 * lease released, when it left the cache and this was its last user). */
void gr__lc_use(gr__lent *e);
void gr__lc_unuse(gr__lcache *lc, gr__lent *e);

/* Drop every cached entry, hard ones released through the callback (the
 * connection they belong to is gone: a callback that sees an old gen only
 * forgets), soft ones with it (their mappings go with the connection). */
void gr__lc_clear(gr__lcache *lc);

#endif
