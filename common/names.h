/*
 * names.h - a listing of names kept as one buffer of NUL-terminated names
 * and an array of where each starts, sorted by strcmp: the directory
 * listings of the daemon's read-ahead across files (daemon/engine/
 * dirahead.c) and of libgranary's directory scans (client/dscan.c).
 *
 * Threads: any (pure functions of their arguments).
 */
#ifndef GR_COMMON_NAMES_H
#define GR_COMMON_NAMES_H

#include <stddef.h>
#include <stdint.h>

/* Sort off[0..n) by the names at names + off[i]. */
void gr__names_sort(const char *names, uint32_t *off, size_t n);

/* The position of name among the sorted off[0..n), or -1. */
long gr__names_find(const char *names, const uint32_t *off, size_t n, const char *name);

#endif
