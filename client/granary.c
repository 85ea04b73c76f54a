/*
 * granary.c - libgranary (see granary.h): a blocking client over the
 * daemon's SOCK_SEQPACKET socket, using the shared proto/ codec.
 *
 * Reads are split into pieces of the daemon's largest reply and pipelined:
 * up to GR_WINDOW pieces are in flight, and each reply's bytes are received
 * straight into the caller's buffer (the header is peeked first to learn
 * where they go), so file bytes are copied once, socket to user buffer.
 *
 * Request ids only grow, so a reply to a call that timed out is recognised
 * as stale and discarded by the next call.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "granary.h"
#include "proto.h"

#define GR_WINDOW 128                   /* READ pieces in flight: 16 MiB */
#define GR_DEFAULT_SOCKET "/run/granary/granary.sock"
#define GR_DEFAULT_CONFIG "/etc/granary/granary.conf"

struct gr_client {
    int fd;
    pthread_mutex_t lock;
    uint32_t next_id;
    uint32_t max_data;                  /* from HELLO */
    char errtext[PROTO_MAX_ERRMSG + 1];
    uint8_t rbuf[PROTO_MAX_MSG];        /* replies that do not go to a user buffer */
};

struct gr_file {
    gr_client *c;
    proto_attr a;
};

static void set_err(gr_client *c, int err, const char *text, size_t len)
{
    if (!text) {
        text = strerror(err);
        len = strlen(text);
    }
    if (len > PROTO_MAX_ERRMSG)
        len = PROTO_MAX_ERRMSG;
    memcpy(c->errtext, text, len);
    c->errtext[len] = '\0';
    errno = err;
}

/* The next request id; 0 is skipped on wrap (it means "unknown" in
 * replies). */
static uint32_t take_id(gr_client *c)
{
    if (c->next_id == 0)
        c->next_id = 1;
    return c->next_id++;
}

const char *gr_strerror_last(gr_client *c)
{
    return c->errtext;
}

/* "[daemon] socket = X" from a config file, into out.  0 if found. */
static int socket_from_config(const char *path, char *out, size_t outlen)
{
    FILE *f = fopen(path, "re");
    char line[4096], section[64] = "";
    int found = -1;

    if (!f)
        return -1;
    while (found < 0 && fgets(line, sizeof(line), f)) {
        char *p = line, *e;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '[') {
            e = strchr(p, ']');
            if (e && (size_t)(e - p - 1) < sizeof(section)) {
                memcpy(section, p + 1, (size_t)(e - p - 1));
                section[e - p - 1] = '\0';
            }
            continue;
        }
        if (strcmp(section, "daemon") || strncmp(p, "socket", 6))
            continue;
        p += 6;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p++ != '=')
            continue;
        while (*p == ' ' || *p == '\t' || *p == '"')
            p++;
        e = p + strcspn(p, "\"\r\n");
        /* an inline comment starts at whitespace + '#' or ';' */
        for (char *q = p; q < e; q++)
            if ((*q == '#' || *q == ';') && q > p && (q[-1] == ' ' || q[-1] == '\t')) {
                e = q;
                break;
            }
        while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > p && (size_t)(e - p) < outlen) {
            memcpy(out, p, (size_t)(e - p));
            out[e - p] = '\0';
            found = 0;
        }
    }
    fclose(f);
    return found;
}

static int timeout_ms(void)
{
    const char *t = getenv("GRANARY_TIMEOUT_MS");
    long v = t ? strtol(t, NULL, 10) : 0;

    return v > 0 && v < 86400000 ? (int)v : 120000;
}

/* Receive one whole message into c->rbuf and decode it. */
static int recv_msg(gr_client *c, proto_msg *m)
{
    size_t used;
    ssize_t n;
    int rc;

    do
        n = recv(c->fd, c->rbuf, sizeof(c->rbuf), 0);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return -ETIMEDOUT;
    if (n < 0)
        return -errno;
    if (n == 0)
        return -ECONNRESET;
    rc = proto_decode(c->rbuf, (size_t)n, m, &used);
    if (rc != 0 || !(m->h.flags & PROTO_F_REPLY))
        return -EPROTO;
    return 0;
}

/* Send one request and wait for its reply (stale replies are skipped).
 * Returns 0 with *m filled (m->h.status may be < 0), or -errno. */
static int call(gr_client *c, const void *req, size_t len, uint32_t id, proto_msg *m)
{
    ssize_t n;
    int rc;

    do
        n = send(c->fd, req, len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN ? -ETIMEDOUT : errno == EPIPE ? -ECONNRESET : -errno;
    for (;;) {
        rc = recv_msg(c, m);
        if (rc < 0)
            return rc;
        /* Id 0 is never ours: the daemon could not read our request's
         * header, and this error is the answer to it. */
        if (m->h.req_id == id || (m->h.req_id == 0 && m->h.status < 0))
            return 0;
    }
}

/* Turn an error reply into errno + text; returns -1. */
static int fail_reply(gr_client *c, const proto_msg *m)
{
    set_err(c, -m->h.status, m->u.error.len ? m->u.error.text : NULL, m->u.error.len);
    return -1;
}

static int fail(gr_client *c, int rc)
{
    set_err(c, -rc, NULL, 0);
    return -1;
}

gr_client *gr_connect(const char *socket_path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    char path[sizeof(sa.sun_path)];
    int ms = timeout_ms();
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    gr_client *c;
    uint8_t req[PROTO_HDR_LEN + PROTO_HELLO_LEN];
    proto_hello hello = { .version = PROTO_VERSION, .max_msg = PROTO_MAX_MSG };
    proto_msg m;
    uint32_t id;
    int rc, e;

    if (!socket_path || !*socket_path)
        socket_path = getenv("GRANARY_SOCKET");
    if (!socket_path || !*socket_path) {
        const char *cfg = getenv("GRANARY_CONFIG");
        if (socket_from_config(cfg && *cfg ? cfg : GR_DEFAULT_CONFIG, path, sizeof(path)) == 0)
            socket_path = path;
        else
            socket_path = GR_DEFAULT_SOCKET;
    }
    if (strlen(socket_path) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    strcpy(sa.sun_path, socket_path);
    c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->next_id = 1;
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        goto fail;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    id = take_id(c);
    proto_enc_hello(req, sizeof(req), 0, id, &hello);
    rc = call(c, req, sizeof(req), id, &m);
    if (rc < 0) {
        errno = -rc;
        goto fail;
    }
    if (m.h.status < 0) {
        errno = -m.h.status;
        goto fail;
    }
    if (m.h.op != PROTO_OP_HELLO || m.u.hello.version != PROTO_VERSION) {
        errno = EPROTONOSUPPORT;
        goto fail;
    }
    c->max_data = m.u.hello.max_data < PROTO_MAX_DATA ? m.u.hello.max_data : PROTO_MAX_DATA;
    if (c->max_data == 0) {
        errno = EPROTO;
        goto fail;
    }
    return c;
fail:
    e = errno;
    if (c->fd >= 0)
        close(c->fd);
    pthread_mutex_destroy(&c->lock);
    free(c);
    errno = e;
    return NULL;
}

void gr_disconnect(gr_client *c)
{
    if (!c)
        return;
    close(c->fd);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

gr_file *gr_open(gr_client *c, const char *path)
{
    uint8_t req[PROTO_HDR_LEN + PROTO_MAX_PATH];
    size_t len = path ? strlen(path) : 0;
    gr_file *f = NULL;
    proto_msg m;
    uint32_t id;
    ssize_t n;
    int rc;

    pthread_mutex_lock(&c->lock);
    id = take_id(c);
    n = proto_enc_open(req, sizeof(req), id, path, len);
    if (n < 0) {
        fail(c, len == 0 ? -EINVAL : -ENAMETOOLONG);
        goto out;
    }
    rc = call(c, req, (size_t)n, id, &m);
    if (rc < 0) {
        fail(c, rc);
        goto out;
    }
    if (m.h.status < 0) {
        fail_reply(c, &m);
        goto out;
    }
    if (m.h.op != PROTO_OP_OPEN) {
        fail(c, -EPROTO);
        goto out;
    }
    f = calloc(1, sizeof(*f));
    if (!f) {
        fail(c, -ENOMEM);
        goto out;
    }
    f->c = c;
    f->a = m.u.attr;
    c->errtext[0] = '\0';
out:
    pthread_mutex_unlock(&c->lock);
    return f;
}

int gr_fstat(gr_file *f, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_size = (off_t)f->a.size;
    st->st_ino = (ino_t)f->a.ino;
    st->st_dev = (dev_t)f->a.dev;
    st->st_mode = (mode_t)f->a.mode;
    st->st_mtim.tv_sec = (time_t)f->a.mtime_sec;
    st->st_mtim.tv_nsec = (long)f->a.mtime_nsec;
    st->st_blksize = (blksize_t)f->a.blksize;
    st->st_blocks = (blkcnt_t)((f->a.size + 511) / 512);
    st->st_uid = f->a.uid;
    st->st_gid = f->a.gid;
    st->st_nlink = f->a.nlink;
    return 0;
}

int gr_close(gr_file *f)
{
    gr_client *c;
    uint8_t req[PROTO_HDR_LEN + 4];
    proto_msg m;
    uint32_t id;
    int rc, ret = 0;

    if (!f)
        return 0;
    c = f->c;
    pthread_mutex_lock(&c->lock);
    id = take_id(c);
    proto_enc_close(req, sizeof(req), id, f->a.handle);
    rc = call(c, req, sizeof(req), id, &m);
    if (rc < 0)
        ret = fail(c, rc);
    else if (m.h.status < 0)
        ret = fail_reply(c, &m);
    pthread_mutex_unlock(&c->lock);
    free(f);
    return ret;
}

/* Send the READ for piece i of a pipelined read. */
static int send_piece(gr_client *c, const gr_file *f, uint32_t id, uint64_t off, uint32_t len)
{
    uint8_t req[PROTO_HDR_LEN + PROTO_READ_LEN];
    proto_read r = { .handle = f->a.handle, .len = len, .off = off };
    ssize_t n;

    proto_enc_read(req, sizeof(req), id, &r);
    do
        n = send(c->fd, req, sizeof(req), MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN ? -ETIMEDOUT : errno == EPIPE ? -ECONNRESET : -errno;
    return 0;
}

/*
 * Receive one reply of a pipelined read whose pieces have ids
 * [base, base + npieces).  A successful READ reply goes straight into its
 * piece of buf; *piece and *got say which and how much.  Returns 0, -errno,
 * or 1 for a stale reply (skipped).
 */
static int recv_piece(gr_client *c, uint32_t base, uint32_t npieces, char *buf, size_t len,
                      uint32_t *piece, uint32_t *got, proto_msg *err)
{
    uint8_t hdr[PROTO_HDR_LEN];
    proto_hdr h;
    ssize_t n;
    uint32_t i;
    size_t poff, plen;
    int rc;

    do
        n = recv(c->fd, hdr, sizeof(hdr), MSG_PEEK);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
    if (n == 0)
        return -ECONNRESET;
    if (proto_decode_hdr(hdr, (size_t)n, &h) != 0 || !(h.flags & PROTO_F_REPLY)) {
        recv(c->fd, hdr, sizeof(hdr), 0);       /* drop it */
        return -EPROTO;
    }
    i = h.req_id - base;
    if (h.req_id == 0 && h.status < 0) {
        rc = recv_msg(c, err);      /* our request was unreadable */
        *piece = 0;
        return rc < 0 ? rc : 0;
    }
    if (i >= npieces) {
        proto_msg m;
        rc = recv_msg(c, &m);
        return rc < 0 ? rc : 1;
    }
    poff = (size_t)i * c->max_data;
    plen = len - poff < c->max_data ? len - poff : c->max_data;
    if (h.op != PROTO_OP_READ || h.status < 0 || h.body_len > plen) {
        rc = recv_msg(c, err);
        if (rc < 0)
            return rc;
        if (err->h.status == 0)
            return -EPROTO;
        *piece = i;
        return 0;
    }
    {
        struct iovec iov[2] = { { hdr, sizeof(hdr) }, { buf + poff, plen } };
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
        do
            n = recvmsg(c->fd, &mh, 0);
        while (n < 0 && errno == EINTR);
        if (n < 0)
            return -errno;
        if ((size_t)n != PROTO_HDR_LEN + h.body_len)
            return -EPROTO;
    }
    err->h.status = 0;
    *piece = i;
    *got = h.body_len;
    return 0;
}

ssize_t gr_pread(gr_file *f, void *buf, size_t len, off_t off)
{
    gr_client *c = f->c;
    uint64_t size = f->a.size;
    uint32_t npieces, sent = 0, done = 0, base, shortest = UINT32_MAX;
    ssize_t total = -1;
    int rc = 0, err = 0;
    proto_msg em;

    if (off < 0) {
        errno = EINVAL;
        return -1;
    }
    if ((uint64_t)off >= size || len == 0)
        return 0;
    if (len > size - (uint64_t)off)
        len = (size_t)(size - (uint64_t)off);
    if (len > SSIZE_MAX)
        len = SSIZE_MAX;
    npieces = (uint32_t)((len + c->max_data - 1) / c->max_data);

    pthread_mutex_lock(&c->lock);
    if (c->next_id == 0 || c->next_id + npieces < c->next_id)
        c->next_id = 1;             /* wrap, skipping 0 (the daemon's "unknown") */
    base = c->next_id;
    c->next_id += npieces;
    while (done < npieces) {
        uint32_t piece = 0, got = 0;
        while (sent < npieces && sent - done < GR_WINDOW && !err) {
            size_t poff = (size_t)sent * c->max_data;
            size_t plen = len - poff < c->max_data ? len - poff : c->max_data;
            rc = send_piece(c, f, base + sent, (uint64_t)off + poff, (uint32_t)plen);
            if (rc < 0)
                goto out;
            sent++;
        }
        rc = recv_piece(c, base, npieces, buf, len, &piece, &got, &em);
        if (rc < 0)
            goto out;
        if (rc == 1)
            continue;
        done++;
        if (em.h.status < 0) {
            if (!err) {
                err = -em.h.status;
                set_err(c, err, em.u.error.len ? em.u.error.text : NULL, em.u.error.len);
            }
        } else if (got < c->max_data && piece < shortest && (size_t)piece * c->max_data + got < len) {
            shortest = piece;   /* a short piece ends the read (EOF moved) */
        }
        if (err && done == sent)
            break;              /* stop asking; what was sent is drained */
    }
    if (err) {
        errno = err;
        goto unlock;
    }
    if (shortest != UINT32_MAX)
        len = (size_t)shortest * c->max_data;  /* conservative: up to the short piece */
    total = (ssize_t)len;
    c->errtext[0] = '\0';
    goto unlock;
out:
    fail(c, rc);
unlock:
    pthread_mutex_unlock(&c->lock);
    return total;
}

int gr_stats(gr_client *c, int (*cb)(void *arg, const char *name, uint64_t value), void *arg)
{
    uint8_t req[PROTO_HDR_LEN];
    proto_msg m;
    uint32_t id;
    size_t off = 0;
    int rc, ret = 0;

    pthread_mutex_lock(&c->lock);
    id = take_id(c);
    proto_enc_stats_req(req, sizeof(req), id);
    rc = call(c, req, sizeof(req), id, &m);
    if (rc < 0) {
        ret = fail(c, rc);
        goto out;
    }
    if (m.h.status < 0) {
        ret = fail_reply(c, &m);
        goto out;
    }
    for (;;) {
        const char *name;
        size_t nlen;
        uint64_t v;
        char nbuf[256];
        rc = proto_stats_next(m.u.data.p, m.u.data.len, &off, &name, &nlen, &v);
        if (rc < 0) {
            ret = fail(c, rc);
            break;
        }
        if (rc == 0)
            break;
        memcpy(nbuf, name, nlen);
        nbuf[nlen] = '\0';
        if (cb(arg, nbuf, v))
            break;
    }
out:
    pthread_mutex_unlock(&c->lock);
    return ret;
}
