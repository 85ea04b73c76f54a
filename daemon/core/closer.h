/*
 * closer.h - close(2) off the event loop.
 *
 * Closing a descriptor of a file on a FUSE file system (a DFS client) is a
 * round trip to it: FLUSH at every close, RELEASE at the last.  On the
 * MooseFS set-up a close of a file being read waits for the read (1.0-1.1
 * ms against 0.08, measured from Python), so the loop closing a client's
 * access proof right after starting its first chunk read stalled every
 * client for that long; and a client can send a descriptor whose close
 * blocks for seconds (a TCP socket lingering over unsent bytes).  A closer
 * is one thread that does the closing; the loop hands it descriptors.  A
 * socket loses its lingering first; a close that still takes over 250 ms
 * is interrupted by a timer signal of the thread's own (SIGRTMIN + 4), so
 * that a client who turns lingering back on in the meantime costs the
 * thread that much, not the linger time.  (A FUSE FLUSH that its server
 * never answers is waited for all the same.)
 */
#ifndef GR_CLOSER_H
#define GR_CLOSER_H


typedef struct closer closer;

/* Start the thread, which keeps at most max descriptors waiting (past that
 * closer_put closes in the caller: back-pressure, never an unbounded
 * number of open files).  0 or -errno. */
int closer_new(unsigned max, closer **out);

/* Close fd (>= 0) soon, on the closer's thread; c NULL closes it now.
 * Any thread. */
void closer_put(closer *c, int fd);

/* Close everything still waiting (each given 10 ms), stop the thread,
 * free.  NULL-safe. */
void closer_free(closer **c);

#endif
