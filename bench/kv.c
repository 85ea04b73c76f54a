/*
 * kv.c - memcached and Redis clients for the benchmarks (see kv.h).  The
 * socket is blocking; replies are parsed from a 64 KiB buffer, and value
 * bytes beyond what is buffered are received straight into the caller's
 * buffer.
 */
#include "kv.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

int kv_connect(kv *k, const char *path, enum kv_kind kind)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };

    k->kind = kind;
    k->pos = k->len = 0;
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    k->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (k->fd < 0)
        return -errno;
    if (connect(k->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(k->fd);
        k->fd = -1;
        return -e;
    }
    return 0;
}

void kv_close(kv *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
}

static int kv_sendv(kv *k, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t w = writev(k->fd, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static int kv_fill(kv *k)
{
    ssize_t r;

    if (k->pos > 0) {
        memmove(k->buf, k->buf + k->pos, k->len - k->pos);
        k->len -= k->pos;
        k->pos = 0;
    }
    if (k->len == sizeof(k->buf))
        return -EPROTO;                 /* a line longer than the buffer */
    do
        r = recv(k->fd, k->buf + k->len, sizeof(k->buf) - k->len, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -errno;
    if (r == 0)
        return -ECONNRESET;
    k->len += (size_t)r;
    return 0;
}

/* The next line, without its "\r\n", NUL-terminated in place; valid until
 * the next call on k. */
static int kv_line(kv *k, char **line)
{
    for (;;) {
        char *nl = memchr(k->buf + k->pos, '\n', k->len - k->pos);
        if (nl && nl > k->buf + k->pos && nl[-1] == '\r') {
            nl[-1] = '\0';
            *line = k->buf + k->pos;
            k->pos = (size_t)(nl + 1 - k->buf);
            return 0;
        }
        int rc = kv_fill(k);
        if (rc < 0)
            return rc;
    }
}

/* n bytes into dst: what is buffered, then straight from the socket. */
static int kv_bytes(kv *k, void *dst, size_t n)
{
    size_t have = k->len - k->pos, got;

    if (have > n)
        have = n;
    memcpy(dst, k->buf + k->pos, have);
    k->pos += have;
    got = have;
    while (got < n) {
        ssize_t r = recv(k->fd, (char *)dst + got, n - got, MSG_WAITALL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ECONNRESET;
        got += (size_t)r;
    }
    return 0;
}

static int kv_expect(kv *k, const char *want)
{
    char *line;
    int rc = kv_line(k, &line);

    if (rc < 0)
        return rc;
    return strcmp(line, want) == 0 ? 0 : -EPROTO;
}

int kv_set(kv *k, const char *key, const void *val, size_t n)
{
    char hdr[320], *line;
    int h, rc;

    if (k->kind == KV_MEMCACHED)
        h = snprintf(hdr, sizeof(hdr), "set %s 0 0 %zu\r\n", key, n);
    else
        h = snprintf(hdr, sizeof(hdr), "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n",
                     strlen(key), key, n);
    struct iovec iov[3] = {
        { hdr, (size_t)h }, { (void *)val, n }, { (void *)"\r\n", 2 },
    };
    if ((rc = kv_sendv(k, iov, 3)) < 0 || (rc = kv_line(k, &line)) < 0)
        return rc;
    if (strcmp(line, k->kind == KV_MEMCACHED ? "STORED" : "+OK") == 0)
        return 0;
    if (strstr(line, "out of memory") || strncmp(line, "-OOM", 4) == 0)
        return 1;
    fprintf(stderr, "kv: SET answered \"%.100s\"\n", line);
    return -EPROTO;
}

int64_t kv_get(kv *k, const char *key, void *dst, size_t cap)
{
    char req[320], *line;
    int rc, h;
    unsigned long long n;

    if (k->kind == KV_MEMCACHED)
        h = snprintf(req, sizeof(req), "get %s\r\n", key);
    else
        h = snprintf(req, sizeof(req), "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key), key);
    struct iovec iov = { req, (size_t)h };
    if ((rc = kv_sendv(k, &iov, 1)) < 0 || (rc = kv_line(k, &line)) < 0)
        return rc;
    if (k->kind == KV_MEMCACHED) {
        unsigned flags;
        char name[251];
        if (strcmp(line, "END") == 0)
            return -ENOENT;
        if (sscanf(line, "VALUE %250s %u %llu", name, &flags, &n) != 3)
            return -EPROTO;
    } else {
        if (strcmp(line, "$-1") == 0)
            return -ENOENT;
        if (line[0] != '$' || sscanf(line + 1, "%llu", &n) != 1)
            return -EPROTO;
    }
    if (n > cap)
        return -EMSGSIZE;
    if ((rc = kv_bytes(k, dst, (size_t)n)) < 0)
        return rc;
    if ((rc = kv_expect(k, "")) < 0)
        return rc;
    if (k->kind == KV_MEMCACHED && (rc = kv_expect(k, "END")) < 0)
        return rc;
    return (int64_t)n;
}
