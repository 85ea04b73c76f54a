/*
 * util.h - small helpers every benchmark program shares (linked into each
 * of them with bench/kv.c, see the Makefile).
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_ns(void);

/* The next value of a xorshift64 generator whose state is *s (not 0). */
uint64_t xorshift(uint64_t *s);

/* A byte count with an optional K, M or G suffix (powers of 1024). */
size_t parse_size(const char *s);

#endif
