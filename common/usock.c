/*
 * usock.c - see usock.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "usock.h"

static void msg_set(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msg_set(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (!msg || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}

static int fill_addr(struct sockaddr_un *sa, const char *path)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa->sun_path))
        return -ENAMETOOLONG;
    memcpy(sa->sun_path, path, strlen(path) + 1);
    return 0;
}

/* mkdir -p of path's directory. */
static int make_parent_dirs(const char *path, char *err, size_t errlen)
{
    char tmp[GR_SUN_PATH_MAX];

    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST) {
            int e = errno;
            msg_set(err, errlen, "mkdir %s: %s", tmp, strerror(e));
            return -e;
        }
        *p = '/';
    }
    return 0;
}

int gr__unix_connect(const char *path, int type)
{
    struct sockaddr_un sa;
    int fd, rc;

    if (fill_addr(&sa, path) < 0)
        return -ENAMETOOLONG;
    fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    do
        rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* What is at path now: 0 nothing, 1 a socket nobody listens on (stale),
 * or -errno with err set (-EADDRINUSE: live; -EEXIST: not a socket). */
static int probe(const char *path, int type, char *err, size_t errlen)
{
    struct stat st;
    int fd;

    if (lstat(path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        msg_set(err, errlen, "%s: %s", path, strerror(errno));
        return -errno;
    }
    if (!S_ISSOCK(st.st_mode)) {
        msg_set(err, errlen, "%s exists and is not a socket: refusing to replace it "
                "(check the socket path in the configuration)", path);
        return -EEXIST;
    }
    fd = gr__unix_connect(path, type);
    if (fd >= 0 || fd == -EAGAIN) {
        if (fd >= 0)
            close(fd);
        msg_set(err, errlen, "%s: another daemon is already listening", path);
        return -EADDRINUSE;
    }
    return 1;
}

int gr__unix_listen(gr__listener *l, const char *path, int type, unsigned mode, int backlog,
                    char *err, size_t errlen)
{
    struct sockaddr_un sa;
    struct stat st;
    int rc;

    l->fd = -1;
    l->path[0] = '\0';
    if (fill_addr(&sa, path) < 0) {
        msg_set(err, errlen, "socket path too long (over %zu bytes): %s", GR_SUN_PATH_MAX - 1,
                path);
        return -ENAMETOOLONG;
    }
    rc = make_parent_dirs(path, err, errlen);
    if (rc < 0)
        return rc;
    rc = probe(path, type, err, errlen);
    if (rc < 0)
        return rc;
    /* A stale socket: replace it.  Another daemon starting at the same
     * moment may win the bind below; then we fail with EADDRINUSE. */
    if (rc == 1 && unlink(path) < 0 && errno != ENOENT) {
        rc = -errno;
        msg_set(err, errlen, "remove stale socket %s: %s", path, strerror(errno));
        return rc;
    }
    l->fd = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        rc = -errno;
        msg_set(err, errlen, "socket: %s", strerror(errno));
        return rc;
    }
    if (bind(l->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        rc = -errno;
        msg_set(err, errlen, "bind %s: %s", path, strerror(errno));
        goto fail;
    }
    /* Ours from here: a failure below removes it (chmod changes its ctime,
     * so the identity is taken again after it). */
    if (lstat(path, &st) == 0) {
        l->dev = st.st_dev;
        l->ino = st.st_ino;
        l->ctime = st.st_ctim;
        snprintf(l->path, sizeof(l->path), "%s", path);
    }
    if (chmod(path, mode) < 0 || listen(l->fd, backlog) < 0) {
        rc = -errno;
        msg_set(err, errlen, "listen on %s: %s", path, strerror(errno));
        goto fail;
    }
    if (lstat(path, &st) == 0)
        l->ctime = st.st_ctim;
    return 0;
fail:
    gr__unix_close(l);
    return rc;
}

void gr__unix_close(gr__listener *l)
{
    struct stat st;

    if (l->fd >= 0) {
        close(l->fd);
        l->fd = -1;
    }
    if (l->path[0] && lstat(l->path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == l->dev &&
        st.st_ino == l->ino && st.st_ctim.tv_sec == l->ctime.tv_sec &&
        st.st_ctim.tv_nsec == l->ctime.tv_nsec)
        unlink(l->path);
    l->path[0] = '\0';
}
