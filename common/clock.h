/*
 * clock.h - the clocks of daemon and client, one copy.
 *
 * Intervals, deadlines, back-offs and latencies use the monotonic clock, so
 * that a step of the wall clock (NTP, an operator's `date -s`) never holds a
 * timer back or fires it early.  The wall clock is only for values that must
 * mean something across a restart (the NVMe tier's access order).
 *
 * Threads: any.
 */
#ifndef GR_COMMON_CLOCK_H
#define GR_COMMON_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds (a vDSO call: tens of ns). */
uint64_t gr__now_ns(void);

/* CLOCK_MONOTONIC in milliseconds. */
uint64_t gr__now_ms(void);

/* CLOCK_MONOTONIC in seconds. */
double gr__now_s(void);

/* CLOCK_REALTIME in nanoseconds since the epoch: only for timestamps that
 * are kept across restarts, never for intervals. */
uint64_t gr__wall_ns(void);

#endif
