/*
 * usock.h - Unix-domain sockets: the one listener (granaryd's client socket
 * and the metrics endpoint's unix: form) and the one dialer.
 *
 * Listening never destroys what is not ours: a path that holds anything but
 * a socket (a regular file, a directory, a symlink) is refused, a socket
 * that answers belongs to a running daemon and is refused, and only a
 * socket nobody listens on (left by a crash) is replaced.  Closing removes
 * the socket file only if it is still the one we bound.
 *
 * Threads: any.
 */
#ifndef GR_COMMON_USOCK_H
#define GR_COMMON_USOCK_H

#include <stddef.h>
#include <sys/types.h>
#include <time.h>
#include <sys/un.h>

#define GR_SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path))

typedef struct gr__listener {
    int fd;                     /* listening, non-blocking, close-on-exec; -1 when closed */
    char path[GR_SUN_PATH_MAX];
    dev_t dev;                  /* the socket file we bound, to remove only it: */
    ino_t ino;                  /* inode numbers are reused, so its change time */
    struct timespec ctime;      /* (nanoseconds) is compared too */
} gr__listener;

/*
 * Listen on path with a socket of type (SOCK_SEQPACKET, SOCK_STREAM),
 * permission bits mode, and backlog.  Missing parent directories are made
 * (0755: the socket's own mode guards it).  0, or -errno with a reason in
 * err: -EADDRINUSE (a daemon answers there), -EEXIST (not a socket: left
 * alone), -ENAMETOOLONG, or the failing call's error.
 */
int gr__unix_listen(gr__listener *l, const char *path, int type, unsigned mode, int backlog,
                    char *err, size_t errlen);

/* Close the listening fd and remove the socket file if it is still ours.
 * Idempotent. */
void gr__unix_close(gr__listener *l);

/* A connected, close-on-exec, blocking socket of type to path, or -errno
 * (-ENAMETOOLONG for a path over the sun_path limit). */
int gr__unix_connect(const char *path, int type);

#endif
