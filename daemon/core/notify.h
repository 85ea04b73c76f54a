/*
 * notify.h - the systemd service notification protocol (sd_notify(3)),
 * without libsystemd: a datagram of "KEY=VALUE" lines sent to the Unix
 * socket named by $NOTIFY_SOCKET ("/path", or "@name" for the abstract
 * namespace).  granaryd sends READY=1 once its socket listens, STOPPING=1
 * when it begins to shut down, and WATCHDOG=1 from a timer on the event loop
 * while $WATCHDOG_USEC is set (Type=notify, WatchdogSec= in the unit), so a
 * loop that stops turning gets the daemon killed and restarted.
 *
 * Outside systemd ($NOTIFY_SOCKET unset) every call is a no-op returning 0.
 * The functions keep no state: each send opens, uses and closes its own
 * socket, so they are safe from any thread.  $NOTIFY_SOCKET is left set
 * (children of granaryd are not expected; none are started).
 */
#ifndef GR_NOTIFY_H
#define GR_NOTIFY_H

#include <stdint.h>

struct event;
struct event_base;

/*
 * Send state (one or more "KEY=VALUE" lines separated by '\n') as one
 * datagram to $NOTIFY_SOCKET.  Returns 1 when sent, 0 when $NOTIFY_SOCKET
 * is unset or empty (nothing to do), or -errno: -EINVAL for an address that
 * is neither absolute nor abstract, -ENAMETOOLONG for one longer than
 * sun_path, or the error of socket(2)/sendto(2) (-ECONNREFUSED, -ENOENT:
 * nobody listens, -EAGAIN: the manager's queue stayed full for a second).
 * Blocks at most one second (SO_SNDTIMEO): a full queue must not stall the
 * loop, but READY=1 should not be dropped at the first hiccup either.
 */
int notify_send(const char *state);

/* notify_send of a printf-formatted state; longer than 4 KiB: -EMSGSIZE. */
int notify_sendf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * The watchdog interval the service manager asked for: $WATCHDOG_USEC in
 * microseconds, or 0 when it is unset, not a positive number, or meant for
 * another process ($WATCHDOG_PID set and not our pid).
 */
uint64_t notify_watchdog_usec(void);

/*
 * Start the watchdog keep-alive: a persistent timer on base that sends
 * WATCHDOG=1 every notify_watchdog_usec()/2, from the loop thread, so pings
 * stop when the loop is stuck.  On success *ev is the timer, freed with
 * notify_watchdog_stop before base is freed.  Returns 1 when started, 0 when
 * no watchdog is asked for (*ev stays NULL), or -ENOMEM.
 */
int notify_watchdog_start(struct event_base *base, struct event **ev);

/* Delete and free the timer of notify_watchdog_start; sets *ev to NULL.
 * NULL-safe (ev or *ev). */
void notify_watchdog_stop(struct event **ev);

#endif
