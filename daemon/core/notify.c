/*
 * notify.c - see notify.h.  The protocol is small enough that linking
 * libsystemd for it is not worth the dependency: the manager listens on a
 * datagram socket and reads the sender's pid from SCM_CREDENTIALS, which the
 * kernel attaches on its own because the manager set SO_PASSCRED; the
 * message itself is plain text.
 */
#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"

#define NOTIFY_MAX_STATE 4096

/* Fill *sa from $NOTIFY_SOCKET.  Returns the address length, 0 when the
 * variable is unset or empty, or -EINVAL / -ENAMETOOLONG. */
static int notify_addr(struct sockaddr_un *sa)
{
    const char *e = getenv("NOTIFY_SOCKET");
    size_t n;

    if (!e || !*e)
        return 0;
    /* "vsock:CID:PORT" (systemd 253+, for VMs) is not supported: granaryd
     * runs on the host. */
    if (e[0] != '/' && e[0] != '@')
        return -EINVAL;
    n = strlen(e);
    if (n > sizeof(sa->sun_path) - (e[0] == '/'))
        return -ENAMETOOLONG;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, e, n);
    if (e[0] == '@') {
        /* Abstract namespace: a leading NUL, and the length counts exactly
         * the name's bytes (no terminator: it would be part of the name). */
        sa->sun_path[0] = '\0';
        return (int)(offsetof(struct sockaddr_un, sun_path) + n);
    }
    return (int)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

int notify_send(const char *state)
{
    struct sockaddr_un sa;
    struct timeval tmo = { 1, 0 };
    int len = notify_addr(&sa), fd, rc = 1;
    ssize_t w;

    if (len <= 0)
        return len;
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* Best effort: without the timeout the send is merely unbounded. */
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tmo, sizeof(tmo));
    do
        w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                   (socklen_t)len);
    while (w < 0 && errno == EINTR);
    if (w < 0)
        rc = errno == EWOULDBLOCK ? -EAGAIN : -errno;
    close(fd);
    return rc;
}

int notify_sendf(const char *fmt, ...)
{
    char buf[NOTIFY_MAX_STATE];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof(buf))
        return -EMSGSIZE;
    return notify_send(buf);
}

uint64_t notify_watchdog_usec(void)
{
    const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    unsigned long long v;
    char *end;

    if (!us || !*us)
        return 0;
    /* Set for another process (e.g. inherited by a child): not ours. */
    if (pid && *pid) {
        errno = 0;
        v = strtoull(pid, &end, 10);
        if (errno || *end || v != (unsigned long long)getpid())
            return 0;
    }
    errno = 0;
    v = strtoull(us, &end, 10);
    if (errno || *end || us[0] == '-' || v == 0)
        return 0;
    return (uint64_t)v;
}

static void notify_watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    /* A lost ping is retried at the next tick; the manager's interval is
     * twice ours, so one miss does not kill the daemon. */
    (void)notify_send("WATCHDOG=1");
}

int notify_watchdog_start(struct event_base *base, struct event **ev)
{
    uint64_t usec = notify_watchdog_usec(), half = usec / 2 ? usec / 2 : 1;
    struct timeval tv;

    *ev = NULL;
    if (!usec)
        return 0;
    tv.tv_sec = (time_t)(half / 1000000);
    tv.tv_usec = (suseconds_t)(half % 1000000);
    *ev = event_new(base, -1, EV_PERSIST, notify_watchdog_cb, NULL);
    if (!*ev || event_add(*ev, &tv) < 0) {
        notify_watchdog_stop(ev);
        return -ENOMEM;
    }
    return 1;
}

void notify_watchdog_stop(struct event **ev)
{
    if (!ev || !*ev)
        return;
    event_free(*ev);
    *ev = NULL;
}
