/*
 * fdpass.c - see fdpass.h.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdpass.h"

typedef union {
    char buf[CMSG_SPACE(sizeof(int) * GR_FDPASS_MAX)];
    struct cmsghdr align;
} fd_ctl;

typedef union {
    char buf[CMSG_SPACE(sizeof(int) * GR_FDPASS_RECV_MAX)];
    struct cmsghdr align;
} fd_rctl;

ssize_t gr__send_fds(int sock, const struct iovec *iov, int niov, const int *fds, int nfds,
                     int flags)
{
    struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)niov };
    fd_ctl ctl;
    ssize_t n;

    if (nfds < 0 || nfds > GR_FDPASS_MAX)
        return -EINVAL;
    if (nfds > 0) {
        struct cmsghdr *cm;
        memset(&ctl, 0, sizeof(ctl));           /* CMSG_SPACE padding too */
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    do
        n = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

ssize_t gr__recv_fds(int sock, void *buf, size_t len, int *fds, int maxfds, int *nfds,
                     int flags, int *mflags)
{
    return gr__recv_fds_drop(sock, buf, len, fds, maxfds, nfds, flags, mflags, NULL, NULL);
}

ssize_t gr__recv_fds_drop(int sock, void *buf, size_t len, int *fds, int maxfds, int *nfds,
                          int flags, int *mflags, void (*drop)(void *arg, int fd), void *arg)
{
    struct iovec iov = { buf, len };
    fd_rctl ctl;
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
    ssize_t n;
    int kept = 0;

    *nfds = 0;
    do
        n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        size_t cnt;
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        cnt = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t k = 0; k < cnt; k++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
            if (kept < maxfds)
                fds[kept++] = fd;
            else if (drop)
                drop(arg, fd);
            else
                close(fd);
        }
    }
    *nfds = kept;
    if (mflags)
        *mflags = mh.msg_flags;
    return n;
}

void gr__close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
}
