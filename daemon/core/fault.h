/*
 * fault.h - failure points for tests: code paths that real failures reach
 * too rarely to test (an allocation failing mid-reply) are made to fail on
 * request, so that their handling is exercised against the real daemon.
 *
 * $GRANARY_FAULTS, read once at start, is a comma-separated list of
 * "NAME=N": the N-th call of fault_hit(NAME) and every N-th after it
 * return 1.  Unset (every deployment): fault_hit is one load and a branch.
 *
 * Threads: fault_setup before any thread starts; fault_hit from any thread.
 */
#ifndef GR_FAULT_H
#define GR_FAULT_H

typedef enum fault_point {
    FAULT_REPLY_ALLOC,          /* "reply_alloc": a reply's memory (conn.c outmsg_new) */
    FAULT_SOURCE_SLOW,          /* "source_slow": a chunk read from the source takes 300 ms more */
    FAULT_NPOINTS
} fault_point;

/* Parse spec ($GRANARY_FAULTS; NULL or "" for none).  0, or -EINVAL for
 * an unknown name or a bad count (nothing is armed then). */
int fault_setup(const char *spec);

/* 1 if this call at point p must fail. */
int fault_hit(fault_point p);

#endif
