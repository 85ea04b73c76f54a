/*
 * grow.h - growing a heap array by doubling: one helper for the arrays the
 * daemon builds up (a dataset scan's entries, names and ACLs, a manifest
 * under construction).
 *
 * Threads: any (the array is the caller's).
 */
#ifndef GR_COMMON_GROW_H
#define GR_COMMON_GROW_H

#include <stddef.h>

/* Make *p (of *cap elements of elem bytes) hold at least need elements,
 * doubling from 64: 0, or -ENOMEM with *p and *cap as they were. */
int gr__grow(void **p, size_t *cap, size_t need, size_t elem);

#endif
