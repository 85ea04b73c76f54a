/*
 * idset.h - a set of 16-byte file ids (open addressing, linear probing,
 * backward-shift deletion).  The ids are XXH3-128 digests, uniformly
 * random, so their first 8 bytes are the hash.  Used for pinned files,
 * which may number in the millions: lookups stay O(1) on every insert into
 * a tier.  Not thread-safe: callers lock.
 */
#ifndef GR_IDSET_H
#define GR_IDSET_H

#include "ids.h"

#include <stddef.h>
#include <stdint.h>


typedef struct idset {
    uint8_t (*slots)[FILE_ID_LEN];  /* all-zero = empty (no real id is all zero) */
    size_t cap;                      /* power of two, or 0 */
    size_t count;
} idset;

/* Add id.  1 added, 0 already there, -ENOMEM. */
int idset_add(idset *s, const uint8_t id[FILE_ID_LEN]);
/* Remove id.  1 removed, 0 was not there. */
int idset_del(idset *s, const uint8_t id[FILE_ID_LEN]);
/* 1 if id is in the set (key may be longer: its first 16 bytes count). */
int idset_has(const idset *s, const uint8_t *key);
/* Free the slots; the set is empty and reusable. */
void idset_clear(idset *s);

#endif
