/*
 * size.h - byte sizes as people write them: "4M", "4MiB", "512k", "1G".
 * One parser for the configuration, granaryctl and the benchmarks.
 *
 * Syntax: decimal digits, then an optional K, M, G or T (powers of 1024,
 * any case), then an optional "B" or (after a suffix) "iB".  No sign,
 * fraction or blanks.
 *
 * Threads: any (pure).
 */
#ifndef GR_COMMON_SIZE_H
#define GR_COMMON_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Parse s.  0 and *out; -EINVAL (bad syntax) or -ERANGE (over 2^64 - 1),
 * *out untouched. */
int gr__size_parse(const char *s, uint64_t *out);

/* v with the largest suffix that keeps it exact ("4M", "64K", "1000"),
 * into buf of len bytes. */
void gr__size_format(uint64_t v, char *buf, size_t len);

#endif
