/*
 * fdpass.h - messages with file descriptors attached (SCM_RIGHTS), one
 * copy for the daemon, libgranary and the tests.
 *
 * Receiving always uses MSG_CMSG_CLOEXEC, keeps at most the number of fds
 * the caller asked for and closes every other fd that came (the kernel
 * itself drops those that did not fit the control buffer, with
 * MSG_CTRUNC), so a peer can never fill our fd table by attaching fds
 * where none belong.
 *
 * Threads: any.
 */
#ifndef GR_COMMON_FDPASS_H
#define GR_COMMON_FDPASS_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#define GR_FDPASS_MAX 64        /* fds one message may carry, either way */
#define GR_FDPASS_RECV_MAX 253  /* room when receiving: the kernel's SCM_MAX_FD, so that it
                                 * never drops (and closes, in our thread) any itself */

/*
 * sendmsg(iov, niov) with fds[0..nfds) attached (nfds 0..GR_FDPASS_MAX),
 * flags or'ed with MSG_NOSIGNAL; EINTR is retried.  Bytes sent, or -errno
 * (-EAGAIN on a full non-blocking socket).  The fds stay the caller's.
 */
ssize_t gr__send_fds(int sock, const struct iovec *iov, int niov, const int *fds, int nfds,
                     int flags);

/*
 * recvmsg into buf (len bytes) with flags (EINTR retried).  Up to maxfds
 * received fds are stored in fds (close-on-exec, now the caller's), their
 * number in *nfds; any beyond are closed.  *mflags (may be NULL) gets
 * msg_flags (MSG_TRUNC: the packet was longer than len; MSG_CTRUNC: fds were
 * dropped).  Bytes received (0: end of stream, or an empty packet on
 * SOCK_SEQPACKET/DGRAM; *nfds tells whether fds came with it), or -errno
 * (then no fd is left open).
 */
ssize_t gr__recv_fds(int sock, void *buf, size_t len, int *fds, int maxfds, int *nfds,
                     int flags, int *mflags);
/* The same, handing the fds beyond maxfds to drop(arg, fd) instead of
 * closing them (a close can block: a daemon closes elsewhere). */
ssize_t gr__recv_fds_drop(int sock, void *buf, size_t len, int *fds, int maxfds, int *nfds,
                          int flags, int *mflags, void (*drop)(void *arg, int fd), void *arg);

/* Close fds[0..n) that are >= 0 and set them to -1. */
void gr__close_fds(int *fds, int n);

#endif
