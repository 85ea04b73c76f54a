/*
 * closer.h - close(2) off the event loop.
 *
 * Closing a descriptor of a file on a FUSE file system (a DFS client) is a
 * round trip to it: FLUSH at every close, RELEASE at the last.  On MooseFS
 * a FLUSH waits for a read in flight on the same open file, so the loop
 * closing a client's access proof stalled 1.5 ms behind the I/O thread's
 * read of that file, with every other client waiting.  A closer is one
 * thread that does the closing; the loop hands it descriptors.
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

/* Close everything still waiting, stop the thread, free.  NULL-safe. */
void closer_free(closer **c);

#endif
