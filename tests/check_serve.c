/*
 * check_serve.c - the serving layer (daemon/serve/) against a real
 * granaryd, with raw packets where libgranary would not send them: a reply
 * that cannot be allocated fails the connection instead of hanging the
 * client; empty packets and surplus fds never leak descriptors (issue 21);
 * every refusal reaches the client with its reason; client-reported
 * counters (REPORT); ADMIN ANALYZE as PROTOCOL.md describes it.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "fdpass.h"
#include "granary.h"
#include "proto.h"
#include "testutil.h"
#include "usock.h"

/* Descriptors open in process pid. */
static int fd_count(pid_t pid)
{
    char path[64];
    struct dirent *de;
    DIR *d;
    int n = 0;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    d = opendir(path);
    if (!d)
        return -1;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A raw connection to the daemon, with a receive timeout. */
static int raw_connect(const tu_daemon *d)
{
    struct timeval tv = { 5, 0 };
    int fd = gr__unix_connect(d->sock, SOCK_SEQPACKET);

    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Send len bytes of buf with nfds fds; receive one reply into *m (rbuf
 * must outlive m).  The reply's length, or -errno. */
static ssize_t raw_call(int fd, const void *buf, size_t len, const int *fds, int nfds,
                        uint8_t *rbuf, size_t rcap, proto_msg *m)
{
    struct iovec iov = { (void *)buf, len };
    int got[4], ngot;
    size_t used;
    ssize_t n = gr__send_fds(fd, &iov, 1, fds, nfds, 0);

    if (n < 0)
        return n;
    n = gr__recv_fds(fd, rbuf, rcap, got, 4, &ngot, 0, NULL);
    gr__close_fds(got, ngot);
    if (n <= 0)
        return n < 0 ? n : -ECONNRESET;
    ck_assert_int_eq(proto_decode(rbuf, (size_t)n, m, &used), 0);
    return n;
}

/* A reply that cannot be built fails the connection: libgranary sees it
 * drop, reconnects and retries, instead of waiting for a reply that never
 * comes (the daemon used to drop such replies silently).  Every 5th reply
 * allocation fails here; each call must still succeed well within the
 * client's timeout. */
START_TEST(test_reply_alloc_failure)
{
    tu_daemon d;
    gr_client *c;
    char path[600], buf[1000];

    tu_daemon_init(&d, NULL);
    snprintf(path, sizeof(path), "%s/f", d.src);
    tu_write_pattern(path, 5, 100000);
    setenv("GRANARY_FAULTS", "reply_alloc=5", 1);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    unsetenv("GRANARY_FAULTS");
    setenv("GRANARY_TIMEOUT_MS", "3000", 1);
    setenv("GRANARY_RECONNECT_MS", "10000", 1);
    c = gr_connect(d.sock);
    /* HELLO may be the one that fails: connect again then. */
    if (!c)
        c = gr_connect(d.sock);
    ck_assert_ptr_nonnull(c);
    for (int i = 0; i < 40; i++) {
        gr_file *f = gr_open(c, path);
        ck_assert_msg(f != NULL, "open %d: %s", i, strerror(errno));
        ck_assert_int_eq(gr_pread(f, buf, sizeof(buf), 1000 * i), (ssize_t)sizeof(buf));
        ck_assert(tu_check_pattern(buf, 5, 1000 * (uint64_t)i, sizeof(buf)));
        gr_close(f);
    }
    gr_disconnect(c);
    unsetenv("GRANARY_TIMEOUT_MS");
    unsetenv("GRANARY_RECONNECT_MS");
    ck_assert_uint_gt(tu_stat(&d, "connections_failed"), 0);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* Empty packets carrying fds used to be taken for end of connection and
 * their fds never closed: 5,000 such connections filled the daemon's fd
 * table.  Now every fd that comes where none belongs is closed at once, an
 * empty packet gets an error reply, and the daemon's fd count returns to
 * where it was. */
START_TEST(test_empty_packets_with_fds)
{
    tu_daemon d;
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 64];
    char path[600];
    int base, after, fds[3], fd;
    proto_msg m;
    gr_client *c;
    gr_file *f;

    tu_daemon_init(&d, NULL);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    c = gr_connect(d.sock);             /* warm: lazily opened files exist */
    gr_disconnect(c);
    tu_sleep_ms(100);
    base = fd_count(d.pid);
    ck_assert_int_gt(base, 0);
    for (int i = 0; i < 3; i++)
        fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    /* 600 connections, each an empty packet with three fds, then gone. */
    for (int i = 0; i < 600; i++) {
        struct iovec iov = { rbuf, 0 };
        fd = gr__unix_connect(d.sock, SOCK_SEQPACKET);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(gr__send_fds(fd, &iov, 1, fds, 3, 0), 0);
        close(fd);
    }
    /* (Until the daemon has seen them go, they count against the limits.) */
    for (int i = 0; i < 100 && tu_stat(&d, "connections") > 1; i++)
        tu_sleep_ms(50);
    /* One that stays: its empty packet is answered (-EPROTO) and the
     * connection kept; a packet with fds but no bytes likewise. */
    fd = raw_connect(&d);
    {
        struct iovec iov = { rbuf, 0 };
        int got[2], ngot;
        size_t used;
        ssize_t n;
        ck_assert_int_eq(gr__send_fds(fd, &iov, 1, NULL, 0, 0), 0);
        n = gr__recv_fds(fd, rbuf, sizeof(rbuf), got, 2, &ngot, 0, NULL);
        ck_assert_int_gt(n, 0);
        ck_assert_int_eq(proto_decode(rbuf, (size_t)n, &m, &used), 0);
        ck_assert_int_eq(m.h.status, -EPROTO);
        ck_assert_int_eq(m.h.req_id, 0);
    }
    /* An OPEN with two fds: refused (-EPROTO), both closed. */
    {
        ssize_t len = proto_enc_open(req, sizeof(req), 7, "/x", 2);
        ck_assert_int_gt(raw_call(fd, req, (size_t)len, fds, 2, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_msg(m.h.status == -EPROTO, "status %d: %.*s", m.h.status, (int)m.u.error.len,
                      m.u.error.text);
        ck_assert_int_eq(m.h.req_id, 7);
    }
    /* A CLOSE with an fd attached: refused the same way. */
    {
        ssize_t len = proto_enc_close(req, sizeof(req), 8, 1);
        ck_assert_int_gt(raw_call(fd, req, (size_t)len, fds, 1, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_int_eq(m.h.status, -EPROTO);
        ck_assert_int_eq(m.h.req_id, 8);
    }
    close(fd);
    gr__close_fds(fds, 3);
    tu_sleep_ms(300);
    after = fd_count(d.pid);
    ck_assert_msg(after <= base, "daemon fds %d before, %d after", base, after);
    /* And it still opens an uncached file for everyone. */
    snprintf(path, sizeof(path), "%s/new", d.src);
    tu_write_pattern(path, 9, 5000);
    c = gr_connect(d.sock);
    ck_assert_ptr_nonnull(c);
    f = gr_open(c, path);
    ck_assert_ptr_nonnull(f);
    gr_close(f);
    gr_disconnect(c);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* A refused connection gets its reason, not ECONNRESET, even when the
 * client has already sent its HELLO (the daemon reads it before closing). */
START_TEST(test_refusal_reason)
{
    tu_daemon d;
    gr_client *c1, *c2;

    tu_daemon_init(&d, "[daemon]\nmax_clients = 1\n");
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    /* tu_daemon_start's own probe may still count as the one client. */
    for (int i = 0; i < 50 && !(c1 = gr_connect(d.sock)); i++)
        tu_sleep_ms(20);
    ck_assert_msg(c1 != NULL, "%s", gr_strerror_last(NULL));
    for (int i = 0; i < 20; i++) {
        errno = 0;
        c2 = gr_connect(d.sock);
        ck_assert_ptr_null(c2);
        ck_assert_msg(errno == EUSERS, "try %d: errno %d (%s)", i, errno, strerror(errno));
        ck_assert_msg(strstr(gr_strerror_last(NULL), "max_clients") != NULL, "%s",
                      gr_strerror_last(NULL));
    }
    gr_disconnect(c1);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* ADMIN takes typed fields and checks them: HEALTH takes none, EVICT needs
 * exactly one "path", unknown or mistyped fields are refused (-EINVAL);
 * replies are records.  CLOSE with NOREPLY closes without a reply; NOREPLY
 * on anything but CLOSE and RELEASE is refused. */
START_TEST(test_admin_fields_and_noreply)
{
    tu_daemon d;
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 512], recs[256];
    char path[600];
    proto_msg m;
    proto_rec r;
    size_t off;
    ssize_t len;
    int fd;

    tu_daemon_init(&d, NULL);
    snprintf(path, sizeof(path), "%s/f", d.src);
    tu_write_pattern(path, 3, 1000);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    fd = raw_connect(&d);
    /* HEALTH with an argument. */
    off = 0;
    ck_assert_int_eq(proto_rec_str(recs, sizeof(recs), &off, "path", "/x", 2), 0);
    len = proto_enc_admin(req, sizeof(req), 1, PROTO_ADMIN_HEALTH, recs, off);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EINVAL);
    /* HEALTH without: records, "healthy" first. */
    len = proto_enc_admin(req, sizeof(req), 2, PROTO_ADMIN_HEALTH, NULL, 0);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, 0);
    off = 0;
    ck_assert_int_eq(proto_rec_next(m.u.recs.p, m.u.recs.len, &off, &r), 1);
    ck_assert(proto_rec_is(&r, "healthy"));
    ck_assert_uint_eq(r.u64, 1);
    /* EVICT (root) with no path, a numeric path, an unknown field. */
    len = proto_enc_admin(req, sizeof(req), 3, PROTO_ADMIN_EVICT, NULL, 0);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EINVAL);
    off = 0;
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "path", 7), 0);
    len = proto_enc_admin(req, sizeof(req), 4, PROTO_ADMIN_EVICT, recs, off);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EINVAL);
    off = 0;
    ck_assert_int_eq(proto_rec_str(recs, sizeof(recs), &off, "path", path, strlen(path)), 0);
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "force", 1), 0);
    len = proto_enc_admin(req, sizeof(req), 5, PROTO_ADMIN_EVICT, recs, off);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EINVAL);
    /* A good EVICT: "files" 1. */
    off = 0;
    ck_assert_int_eq(proto_rec_str(recs, sizeof(recs), &off, "path", path, strlen(path)), 0);
    len = proto_enc_admin(req, sizeof(req), 6, PROTO_ADMIN_EVICT, recs, off);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, 0);
    off = 0;
    ck_assert_int_eq(proto_rec_next(m.u.recs.p, m.u.recs.len, &off, &r), 1);
    ck_assert(proto_rec_is(&r, "files") && r.u64 == 1);
    /* OPEN, then CLOSE with NOREPLY: no reply; the next request's reply
     * is the next thing received, and the handle is gone. */
    len = proto_enc_open(req, sizeof(req), 7, path, strlen(path));
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, 0);
    {
        uint32_t h = m.u.attr.handle;
        proto_read rd = { .handle = h, .len = 10, .off = 0 };
        struct iovec iov = { req, 0 };
        len = proto_enc_close(req, sizeof(req), 8, h);
        req[6] |= PROTO_F_NOREPLY;
        iov.iov_len = (size_t)len;
        ck_assert_int_eq(gr__send_fds(fd, &iov, 1, NULL, 0, 0), len);
        len = proto_enc_read(req, sizeof(req), 9, &rd);
        ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_uint_eq(m.h.req_id, 9);
        ck_assert_int_eq(m.h.status, -EBADF);
    }
    /* NOREPLY on an OPEN: refused. */
    len = proto_enc_open(req, sizeof(req), 10, path, strlen(path));
    req[6] |= PROTO_F_NOREPLY;
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_uint_eq(m.h.req_id, 10);
    ck_assert_int_eq(m.h.status, -EPROTO);
    close(fd);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* OPEN of path with fd `proof` passed beside it (-1: none), as
 * PROTOCOL.md's access proof: the reply's status; the size and the handle
 * it gives in *size and *handle (either may be NULL). */
static int32_t raw_open_fd(int fd, uint32_t id, const char *path, int proof, uint64_t *size,
                           uint32_t *handle)
{
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 4096];
    ssize_t len = proto_enc_open(req, sizeof(req), id, path, strlen(path));
    proto_msg m;

    ck_assert_int_gt(len, 0);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, &proof, proof >= 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_uint_eq(m.h.req_id, id);
    if (size)
        *size = m.h.status == 0 ? m.u.attr.size : 0;
    if (handle)
        *handle = m.h.status == 0 ? m.u.attr.handle : 0;
    return m.h.status;
}

static int32_t open_with_proof(int fd, uint32_t id, const char *path, int proof, uint64_t *size)
{
    return raw_open_fd(fd, id, path, proof, size, NULL);
}

/* Replace path by a new file (a new inode) of size bytes of pattern seed. */
static void replace_file(const char *path, uint32_t seed, uint64_t size)
{
    char tmp[600];

    snprintf(tmp, sizeof(tmp), "%s.new", path);
    tu_write_pattern(tmp, seed, size);
    ck_assert_int_eq(rename(tmp, path), 0);
}

/* The attribute cache and access proofs, from the spec (OPEN with the
 * client's own fd beside it; a proof sent is checked even from root):
 * - an entry past attr_ttl that the proof shows unchanged (device, inode,
 *   size, mtime, ctime) answers without the daemon opening the file again
 *   (attr_proof_revalidations; on MooseFS the daemon's lookup, open and
 *   close of each file every warm epoch);
 * - nothing else does: not a descriptor that is not open for reading, not
 *   a file whose ctime moved (a chmod: an inode number come round again on
 *   another file would show it too), not the file a replaced path used to
 *   name (refused, as before);
 * - a file replaced within attr_ttl is served as it now is (it was refused
 *   with EACCES until the entry expired).
 * Each open's size says which file the daemon took. */
START_TEST(test_proof_revalidates)
{
    tu_daemon d;
    char path[600];
    uint64_t size, rv0;
    int fd, p, old;

    tu_daemon_init(&d, "[source]\nattr_ttl = 0.2\n");
    snprintf(path, sizeof(path), "%s/x", d.src);
    tu_write_pattern(path, 1, 1000);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    fd = raw_connect(&d);
    rv0 = tu_stat(&d, "attr_proof_revalidations");

    old = open(path, O_RDONLY);
    /* The entry made by a resolution (an OPEN without a proof, as root: a
     * proof known by its own name answers its client alone and makes none). */
    ck_assert_int_eq(raw_open_fd(fd, 1, path, -1, &size, NULL), 0);
    ck_assert_uint_eq(size, 1000);
    usleep(300 * 1000);                                                 /* expired */
    ck_assert_int_eq(open_with_proof(fd, 2, path, old, &size), 0);
    ck_assert_uint_eq(size, 1000);
    ck_assert_uint_eq(tu_stat(&d, "attr_proof_revalidations"), rv0 + 1);

    /* Not for reading: refused, and it revalidates nothing. */
    usleep(300 * 1000);
    p = open(path, O_PATH);
    ck_assert_int_eq(open_with_proof(fd, 3, path, p, &size), -EACCES);
    close(p);
    ck_assert_uint_eq(tu_stat(&d, "attr_proof_revalidations"), rv0 + 1);
    /* The ctime moved: resolved again (and served). */
    ck_assert_int_eq(chmod(path, 0640), 0);
    usleep(300 * 1000);
    ck_assert_int_eq(open_with_proof(fd, 4, path, old, &size), 0);
    ck_assert_uint_eq(size, 1000);
    ck_assert_uint_eq(tu_stat(&d, "attr_proof_revalidations"), rv0 + 1);

    /* The path replaced after the entry expired: the old file's holder is
     * refused (the path does not name it), anyone opening it now gets the
     * new file. */
    usleep(300 * 1000);
    replace_file(path, 2, 2000);
    ck_assert_int_eq(open_with_proof(fd, 5, path, old, &size), -EACCES);
    close(old);
    p = open(path, O_RDONLY);
    ck_assert_int_eq(open_with_proof(fd, 6, path, p, &size), 0);
    ck_assert_uint_eq(size, 2000);
    close(p);

    /* Replaced while the entry is fresh: the new file, not EACCES. */
    replace_file(path, 3, 3000);
    p = open(path, O_RDONLY);
    ck_assert_int_eq(open_with_proof(fd, 7, path, p, &size), 0);
    ck_assert_uint_eq(size, 3000);
    close(p);
    ck_assert_uint_eq(tu_stat(&d, "attr_proof_revalidations"), rv0 + 1);

    close(fd);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* READ of len bytes at off on handle h: the reply's status; the bytes into
 * out. */
static int32_t raw_read(int fd, uint32_t id, uint32_t h, uint64_t off, uint32_t len, void *out)
{
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 64];
    proto_read rd = { .handle = h, .len = len, .off = off };
    ssize_t n = proto_enc_read(req, sizeof(req), id, &rd);
    proto_msg m;

    ck_assert_int_gt(n, 0);
    ck_assert_int_gt(raw_call(fd, req, (size_t)n, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_uint_eq(m.h.req_id, id);
    if (m.h.status == 0) {
        ck_assert_uint_eq(m.u.data.len, len);
        memcpy(out, m.u.data.p, len);
    }
    return m.h.status;
}

/* A cold OPEN whose proof names the path's file keeps the proof as the
 * file's descriptor (source_opens_spared: on a DFS no open and close of
 * the daemon's own; source_lookups_spared: where the proof's own name is
 * the path, no lookup either), and nothing its owner does to that descriptor later
 * costs anyone data: O_DIRECT switched on under the daemon (its reads of
 * an unaligned tail fail) or the descriptor closed, reads stay byte-exact.
 * A descriptor open for writing is not kept. */
START_TEST(test_kept_proof)
{
    enum { SIZE = 200000 };             /* 64K chunks: the last is 3392 bytes */
    tu_daemon d;
    static char buf[SIZE];
    char path[600], rw[600], lnk[600], other[600];
    uint64_t spared, looked, size;
    uint32_t h;
    int fd, p, q;

    tu_daemon_init(&d, NULL);
    snprintf(path, sizeof(path), "%s/x", d.src);
    snprintf(rw, sizeof(rw), "%s/rw", d.src);
    tu_write_pattern(path, 41, SIZE);
    snprintf(lnk, sizeof(lnk), "%s/link", d.src);
    snprintf(other, sizeof(other), "%s/other", d.src);
    tu_write_pattern(rw, 42, 1000);
    tu_write_pattern(other, 43, 1000);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    fd = raw_connect(&d);
    spared = tu_stat(&d, "source_opens_spared");
    looked = tu_stat(&d, "source_lookups_spared");

    p = open(path, O_RDONLY);
    ck_assert_int_ge(p, 0);
    ck_assert_int_eq(raw_open_fd(fd, 1, path, p, NULL, &h), 0);
    ck_assert_uint_eq(tu_stat(&d, "source_opens_spared"), spared + 1);
    ck_assert_uint_eq(tu_stat(&d, "source_lookups_spared"), looked + 1);  /* its name is the path */

    ck_assert_int_eq(fcntl(p, F_SETFL, O_DIRECT), 0);      /* the daemon's too */
    ck_assert_int_eq(raw_read(fd, 2, h, 150000, SIZE - 150000, buf), 0);
    ck_assert(tu_check_pattern(buf, 41, 150000, SIZE - 150000));
    close(p);
    ck_assert_int_eq(raw_read(fd, 3, h, 0, 100000, buf), 0);
    ck_assert(tu_check_pattern(buf, 41, 0, 100000));

    /* The next cold file: its name checked on the loop (the root's mount
     * known and the device not Lustre), no I/O thread involved. */
    q = open(other, O_RDONLY);
    ck_assert_int_eq(raw_open_fd(fd, 8, other, q, NULL, &h), 0);
    close(q);
    ck_assert_int_eq(raw_read(fd, 9, h, 0, 1000, buf), 0);
    ck_assert(tu_check_pattern(buf, 43, 0, 1000));
    ck_assert_uint_eq(tu_stat(&d, "source_opens_spared"), spared + 2);
    ck_assert_uint_eq(tu_stat(&d, "source_lookups_spared"), looked + 2);
    spared++;
    looked++;

    q = open(rw, O_RDWR);
    ck_assert_int_ge(q, 0);
    ck_assert_int_eq(open_with_proof(fd, 4, rw, q, &size), 0);
    ck_assert_uint_eq(size, 1000);
    close(q);
    ck_assert_uint_eq(tu_stat(&d, "source_opens_spared"), spared + 1);

    /* Through a link, its name is not the path: looked up (and kept). */
    ck_assert_int_eq(symlink("rw", lnk), 0);
    q = open(lnk, O_RDONLY);
    ck_assert_int_eq(open_with_proof(fd, 5, lnk, q, &size), 0);
    ck_assert_uint_eq(size, 1000);
    close(q);
    ck_assert_uint_eq(tu_stat(&d, "source_opens_spared"), spared + 2);
    ck_assert_uint_eq(tu_stat(&d, "source_lookups_spared"), looked + 1);
    /* ...for that client alone: its description (whose flags it may
     * change) is in no entry that an OPEN without a proof is answered from. */
    {
        uint64_t hits = tu_stat(&d, "attr_cache_hits");
        ck_assert_int_eq(raw_open_fd(fd, 10, lnk, -1, NULL, NULL), 0);
        ck_assert_uint_eq(tu_stat(&d, "attr_cache_hits"), hits);
    }
    /* The name of a removed link reads back as "NAME (deleted)": not a
     * name of the file (a review's finding), so that path is looked up
     * (and is not there). */
    {
        char a[700], gone[720];
        snprintf(a, sizeof(a), "%s/hard", d.src);
        snprintf(gone, sizeof(gone), "%s (deleted)", a);
        ck_assert_int_eq(link(rw, a), 0);
        q = open(a, O_RDONLY);
        ck_assert_int_eq(unlink(a), 0);
        ck_assert_int_eq(open_with_proof(fd, 7, gone, q, &size), -ENOENT);
        close(q);
    }
    /* A proof of another file than the path's: refused, as ever. */
    q = open(path, O_RDONLY);
    ck_assert_int_eq(open_with_proof(fd, 6, other, q, &size), -EACCES);
    close(q);
    ck_assert_uint_eq(tu_stat(&d, "source_opens_spared"), spared + 2);
    ck_assert_uint_eq(tu_stat(&d, "source_errors"), 1);                 /* "(deleted)": ENOENT */
    close(fd);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* A client that opens one file many times with the same proof, holding
 * every handle: each handle's file is its own (a proof known by its name
 * answers its client alone), and the descriptors kept for them stay within
 * half of [source] fd_cache.  A review found a single fd passed 8192 times
 * held 8192 descriptors in the daemon, past any limit.  Reads of every
 * handle stay byte-exact (past the bound, the file is opened by name). */
START_TEST(test_kept_proofs_bounded)
{
    enum { N = 40 };
    tu_daemon d;
    char path[600], buf[1000];
    uint32_t h[N];
    int fd, p;

    tu_daemon_init(&d, "[source]\nfd_cache = 8\n");
    snprintf(path, sizeof(path), "%s/x", d.src);
    tu_write_pattern(path, 17, sizeof(buf));
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    fd = raw_connect(&d);
    p = open(path, O_RDONLY);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(raw_open_fd(fd, (uint32_t)i + 1, path, p, NULL, &h[i]), 0);
    close(p);
    ck_assert_uint_le(tu_stat(&d, "source_fds_cached"), 8);
    for (int i = 0; i < N; i += 13) {
        ck_assert_int_eq(raw_read(fd, 100 + (uint32_t)i, h[i], 0, sizeof(buf), buf), 0);
        ck_assert(tu_check_pattern(buf, 17, 0, sizeof(buf)));
    }
    ck_assert_int_eq(raw_read(fd, 200, h[N - 1], 0, sizeof(buf), buf), 0);
    ck_assert(tu_check_pattern(buf, 17, 0, sizeof(buf)));
    close(fd);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* One client's fetch that fails fails no one else's read that joined it
 * through a file of its own.  Client A's kept proof has O_DIRECT set on it
 * and its directory renamed, so A's chunk read fails (EINVAL, then ENOENT
 * by name); client B, who opened the file before the rename through the
 * daemon's own descriptor, asks for the same chunk while A's read is under
 * way (every source read is made 300 ms slower: GRANARY_FAULTS
 * source_slow).  B used to get A's error (a review's finding); B now reads
 * through its own file. */
START_TEST(test_joined_fetch_failure)
{
    enum { SIZE = 5000 };
    tu_daemon d;
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 700];
    char dir[600], dir2[600], path[700], buf[SIZE];
    uint32_t ha, hb;
    proto_msg m;
    int fa, fb, p, ra;

    tu_daemon_init(&d, NULL);
    snprintf(dir, sizeof(dir), "%s/dir", d.src);
    snprintf(dir2, sizeof(dir2), "%s/dir2", d.src);
    snprintf(path, sizeof(path), "%s/x", dir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    tu_write_pattern(path, 23, SIZE);
    setenv("GRANARY_FAULTS", "source_slow=1", 1);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    unsetenv("GRANARY_FAULTS");
    fa = raw_connect(&d);
    fb = raw_connect(&d);
    p = open(path, O_RDONLY);
    ck_assert_int_eq(raw_open_fd(fa, 1, path, p, NULL, &ha), 0);
    ck_assert_uint_eq(tu_stat(&d, "source_opens_spared"), 1);              /* A's is kept */
    ck_assert_int_eq(raw_open_fd(fb, 2, path, -1, NULL, &hb), 0);          /* root, no proof */
    ck_assert_int_eq(fcntl(p, F_SETFL, O_DIRECT), 0);
    ck_assert_int_eq(rename(dir, dir2), 0);
    {
        proto_read rd = { .handle = ha, .len = SIZE, .off = 0 };
        struct iovec iov = { req, 0 };
        iov.iov_len = (size_t)proto_enc_read(req, sizeof(req), 3, &rd);
        ck_assert_int_gt(gr__send_fds(fa, &iov, 1, NULL, 0, 0), 0);        /* A's, not waited for */
    }
    usleep(100 * 1000);
    ck_assert_int_eq(raw_read(fb, 4, hb, 0, SIZE, buf), 0);
    ck_assert(tu_check_pattern(buf, 23, 0, SIZE));
    {
        int got[4], ngot;
        size_t used;
        ssize_t n = gr__recv_fds(fa, rbuf, sizeof(rbuf), got, 4, &ngot, 0, NULL);
        ck_assert_int_gt(n, 0);
        gr__close_fds(got, ngot);
        ck_assert_int_eq(proto_decode(rbuf, (size_t)n, &m, &used), 0);
        ra = m.h.status;
    }
    ck_assert_int_lt(ra, 0);                        /* A's own read fails: her doing */
    close(p);
    close(fa);
    close(fb);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* A TCP socket whose close blocks: SO_LINGER on, its unsent bytes stuck
 * (the peer, kept in *peer, never reads).  -1 if loopback TCP is missing. */
static int lingering_socket(int *peer, int secs)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof(a);
    struct linger lg = { 1, secs };
    int small = 4096, l = socket(AF_INET, SOCK_STREAM, 0), s = socket(AF_INET, SOCK_STREAM, 0);
    char junk[4096] = { 0 };

    *peer = -1;
    if (l < 0 || s < 0 || setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) < 0 ||
        bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) < 0 ||
        setsockopt(s, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) < 0 ||
        connect(s, (struct sockaddr *)&a, sizeof(a)) < 0 || (*peer = accept(l, NULL, NULL)) < 0) {
        if (l >= 0)
            close(l);
        if (s >= 0)
            close(s);
        return -1;
    }
    close(l);
    fcntl(s, F_SETFL, O_NONBLOCK);
    while (send(s, junk, sizeof(junk), MSG_NOSIGNAL) > 0)
        ;
    setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    return s;
}

/* Closing what a client sent is not the loop's to wait for: a descriptor
 * passed as an access proof whose close blocks (here a lingering TCP
 * socket, 3 s; on a FUSE DFS every close is a round trip, and one of a
 * file being read waits for the read) is closed on the closer's thread.
 * The daemon closed it on the loop, and nobody was answered for 3 s. */
START_TEST(test_blocking_close_off_loop)
{
    /* The lingering socket as the one proof, as the third of three fds
     * (one more than a request may carry, which the receive itself used to
     * close) and as the 70th of 70 (past the 64 the control buffer held:
     * the kernel closed those, in the loop's recvmsg).  A review found the
     * last two after the first was fixed. */
    static const int counts[] = { 1, 3, 70 };
    tu_daemon d;
    char path[600];
    int fd, fd2, nul;

    tu_daemon_init(&d, NULL);
    snprintf(path, sizeof(path), "%s/x", d.src);
    tu_write_pattern(path, 9, 1000);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    nul = open("/dev/null", O_RDONLY);
    fd = raw_connect(&d);
    fd2 = raw_connect(&d);
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        int n = counts[k], peer, s = lingering_socket(&peer, 3), many[70];
        uint8_t req[PROTO_HDR_LEN + 700], rbuf[PROTO_MAX_MSG];
        union { char b[CMSG_SPACE(sizeof(many))]; struct cmsghdr a; } ctl;
        struct iovec iov = { req, 0 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                             .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n) };
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        uint64_t t0;

        if (s < 0) {
            fprintf(stderr, "SKIP test_blocking_close_off_loop: no loopback TCP here\n");
            break;
        }
        /* Sent with an OPEN of x, and ours closed: the daemon's close is
         * the last, the one that lingers. */
        for (int i = 0; i < n - 1; i++)
            many[i] = nul;
        many[n - 1] = s;
        iov.iov_len = (size_t)proto_enc_open(req, sizeof(req), 1, path, strlen(path));
        memset(&ctl, 0, sizeof(ctl));
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
        memcpy(CMSG_DATA(cm), many, sizeof(int) * (size_t)n);
        ck_assert_int_eq(sendmsg(fd, &mh, 0), (ssize_t)iov.iov_len);
        close(s);
        usleep(100 * 1000);
        t0 = gr__now_ns();
        ck_assert_int_eq(raw_open_fd(fd2, 2, path, -1, NULL, NULL), 0);  /* root: no proof */
        ck_assert_msg(gr__now_ns() - t0 < 1000000000ull,
                      "%d fds: the loop waited %.2f s for a close", counts[k],
                      (double)(gr__now_ns() - t0) / 1e9);
        ck_assert_int_gt(gr__recv_fds(fd, rbuf, sizeof(rbuf), many, 0, &n, 0, NULL), 0);
        close(peer);
    }
    close(nul);
    close(fd);
    close(fd2);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* The attack a review found on 2026-12-07, as an outsider makes it: root's
 * file, readable by root alone, is cached and removed; nobody gets its
 * inode number back on a file of her own (ext4 hands a freed inode to the
 * next create), sets its size and mtime to the victim's and reads it
 * through libgranary.  She must get her own bytes (zeros): a chunk's
 * identity has the ctime, which no user can set.  Without it she got the
 * victim's.  Child exit codes: 0 own bytes, 7 the victim's, 9 no inode came
 * back (the file system does not reuse them: skipped, said so). */
static int forge_reused_inode(const char *sock, const char *dir, const struct stat *vst)
{
    char path[700], buf[1000];
    int fd = -1;

    if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
        return 3;
    for (int i = 0; i < 64; i++) {
        struct stat st;
        snprintf(path, sizeof(path), "%s/w%d", dir, i);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || fstat(fd, &st) < 0)
            return 4;
        if (st.st_ino == vst->st_ino)
            break;
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        return 9;
    struct timespec ts[2] = { vst->st_atim, vst->st_mtim };
    if (ftruncate(fd, vst->st_size) < 0 || futimens(fd, ts) < 0)
        return 5;
    close(fd);
    gr_client *c = gr_connect(sock);
    gr_file *f = c ? gr_open(c, path) : NULL;
    if (!f || gr_pread(f, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf)) {
        fprintf(stderr, "forger: %s: %s\n", c ? "open or read" : "connect", strerror(errno));
        return 6;
    }
    gr_close(f);
    gr_disconnect(c);
    for (size_t i = 0; i < sizeof(buf); i++)
        if (buf[i])
            return 7;
    return 0;
}

START_TEST(test_reused_inode_forgery)
{
    tu_daemon d;
    char secret[600], victim[700], pub[600], buf[1000];
    struct stat vst;
    gr_client *c;
    gr_file *f;
    pid_t pid;
    int status;

    /* No held fds: the daemon keeps no victim inode alive. */
    tu_daemon_init(&d, "[daemon]\nsocket_mode = 0666\n[source]\nfd_cache = 0\n");
    snprintf(secret, sizeof(secret), "%s/secret", d.src);
    snprintf(victim, sizeof(victim), "%s/v", secret);
    snprintf(pub, sizeof(pub), "%s/pub", d.src);
    ck_assert_int_eq(chmod(d.dir, 0755), 0);
    ck_assert_int_eq(mkdir(secret, 0700), 0);
    ck_assert_int_eq(mkdir(pub, 0777), 0);
    ck_assert_int_eq(chmod(pub, 0777), 0);
    tu_write_pattern(victim, 77, sizeof(buf));
    ck_assert_int_eq(chmod(victim, 0600), 0);
    ck_assert_int_eq(stat(victim, &vst), 0);
    ck_assert_int_eq(tu_daemon_start(&d), 0);

    c = gr_connect(d.sock);                 /* root reads it: cached */
    ck_assert_ptr_nonnull(c);
    f = gr_open(c, victim);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(gr_pread(f, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
    ck_assert(tu_check_pattern(buf, 77, 0, sizeof(buf)));
    gr_close(f);
    gr_disconnect(c);
    ck_assert_int_eq(unlink(victim), 0);

    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(forge_reused_inode(d.sock, pub, &vst));
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    if (WEXITSTATUS(status) == 9)
        fprintf(stderr, "SKIP test_reused_inode_forgery: %s hands out no freed inode "
                        "again (64 creates), the attack cannot be staged here\n", pub);
    else
        ck_assert_msg(WEXITSTATUS(status) == 0, "forger's child: %d (7: served the victim's "
                      "cached bytes)", WEXITSTATUS(status));
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* A FIFO under a root, opened as a file (any user can mkfifo): it is
 * refused, and meanwhile everyone else is served.  The daemon used to open
 * it for reading, which blocks until a writer comes: eight such OPENs held
 * every I/O thread, and no file could be opened or read by anyone. */
static size_t raw_req(uint8_t *b, uint8_t op, uint32_t id, const void *prefix, size_t plen,
                      const char *path, size_t pathlen);

START_TEST(test_fifo_open_refused)
{
    enum { N = 8 };
    tu_daemon d;
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 700];
    char fifo[600], file[600];
    int fds[N], fd, w, st_file = 1, st_fifo[N];
    proto_msg m;
    size_t len;
    ssize_t n;

    tu_daemon_init(&d, NULL);
    snprintf(fifo, sizeof(fifo), "%s/pipe", d.src);
    snprintf(file, sizeof(file), "%s/f", d.src);
    ck_assert_int_eq(mkfifo(fifo, 0666), 0);
    tu_write_pattern(file, 3, 5000);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    for (int i = 0; i < N; i++) {               /* root: no proof needed */
        struct iovec iov = { req, 0 };
        fds[i] = raw_connect(&d);
        iov.iov_len = raw_req(req, PROTO_OP_OPEN, (uint32_t)i + 1, NULL, 0, fifo, strlen(fifo));
        ck_assert_int_gt(gr__send_fds(fds[i], &iov, 1, NULL, 0, 0), 0);
    }
    usleep(200 * 1000);
    fd = raw_connect(&d);
    len = raw_req(req, PROTO_OP_OPEN, 100, NULL, 0, file, strlen(file));
    n = raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m);
    if (n > 0)
        st_file = m.h.status;
    for (int i = 0; i < N; i++) {
        st_fifo[i] = 1;
        if (i == 0 && n <= 0) {
            /* Blocked: a writer lets the daemon go (and stop). */
            w = open(fifo, O_WRONLY | O_NONBLOCK);
            if (w >= 0)
                close(w);
        }
        int got[4], ngot;
        size_t used;
        ssize_t r = gr__recv_fds(fds[i], rbuf, sizeof(rbuf), got, 4, &ngot, 0, NULL);
        if (r > 0) {
            gr__close_fds(got, ngot);
            if (proto_decode(rbuf, (size_t)r, &m, &used) == 0)
                st_fifo[i] = m.h.status;
        }
        close(fds[i]);
    }
    close(fd);
    ck_assert_msg(n > 0, "the daemon did not answer an OPEN of a plain file: %zd", n);
    ck_assert_int_eq(st_file, 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(st_fifo[i], -EINVAL);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* Received fds kept: like raw_call, the fds into got (at most 4). */
static ssize_t raw_call_fds(int fd, const void *buf, size_t len, uint8_t *rbuf, size_t rcap,
                            proto_msg *m, int *got, int *ngot)
{
    struct iovec iov = { (void *)buf, len };
    size_t used;
    ssize_t n = gr__send_fds(fd, &iov, 1, NULL, 0, 0);

    if (n < 0)
        return n;
    n = gr__recv_fds(fd, rbuf, rcap, got, 4, ngot, 0, NULL);
    if (n <= 0)
        return n < 0 ? n : -ECONNRESET;
    ck_assert_int_eq(proto_decode(rbuf, (size_t)n, m, &used), 0);
    return n;
}

static void le32w(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t le32r(const uint8_t *p)
{
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* An OPENX request built byte by byte from PROTOCOL.md (not proto.c):
 * header, u64 off, u32 len, u32 flags, path.  hflags: header flags. */
static size_t openx_bytes(uint8_t *b, uint32_t id, uint16_t hflags, uint64_t off, uint32_t len,
                          uint32_t flags, const char *path)
{
    size_t pl = strlen(path);

    memset(b, 0, PROTO_HDR_LEN + 16);
    le32w(b, 0x594e5247u);
    b[4] = 2;
    b[5] = 11;
    b[6] = (uint8_t)hflags;
    b[7] = (uint8_t)(hflags >> 8);
    le32w(b + 8, id);
    le32w(b + 12, (uint32_t)(16 + pl));
    le32w(b + 24, (uint32_t)off);
    le32w(b + 28, (uint32_t)(off >> 32));
    le32w(b + 32, len);
    le32w(b + 36, flags);
    memcpy(b + 40, path, pl);
    return 40 + pl;
}

/* A request of op with a body of prefix (plen bytes) then path, by hand. */
static size_t raw_req(uint8_t *b, uint8_t op, uint32_t id, const void *prefix, size_t plen,
                      const char *path, size_t pathlen)
{
    memset(b, 0, PROTO_HDR_LEN);
    le32w(b, 0x594e5247u);
    b[4] = 2;
    b[5] = op;
    le32w(b + 8, id);
    le32w(b + 12, (uint32_t)(plen + pathlen));
    if (plen)
        memcpy(b + PROTO_HDR_LEN, prefix, plen);
    memcpy(b + PROTO_HDR_LEN + plen, path, pathlen);
    return PROTO_HDR_LEN + plen + pathlen;
}

static size_t readdir_req(uint8_t *b, uint32_t id, uint64_t cookie, uint32_t max, uint32_t flags,
                          const char *path)
{
    uint8_t pre[16];

    le32w(pre, (uint32_t)cookie);
    le32w(pre + 4, (uint32_t)(cookie >> 32));
    le32w(pre + 8, max);
    le32w(pre + 12, flags);
    return raw_req(b, 13, id, pre, sizeof(pre), path, strlen(path));
}

/*
 * STAT and READDIR as a client written from PROTOCOL.md sees them: a
 * registered dataset's attributes byte by byte, a directory of 4100 entries
 * paged to the end by cookies (sorted, each once), and hostile requests
 * (empty and overlong paths, max 0 and 4097, unknown flags, a cookie past
 * the end, a file listed, an fd attached, paths outside the roots or the
 * dataset) refused with the right errno and the connection kept; a peer
 * the daemon does not judge for (access_check = fd, not root) gets ENOKEY.
 */
START_TEST(test_stat_readdir_from_the_spec)
{
    tu_daemon d;
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 16 + PROTO_MAX_PATH + 8];
    char top[600], p[700], long_path[PROTO_MAX_PATH + 2];
    char err[600];
    struct stat st;
    size_t len;
    proto_msg m;
    int fd;

    tu_daemon_init(&d, "[daemon]\nsocket_mode = 0666\n");
    chmod(d.dir, 0755);
    snprintf(top, sizeof(top), "%s/ds", d.src);
    ck_assert_int_eq(mkdir(top, 0755), 0);
    snprintf(p, sizeof(p), "%s/many", top);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    for (int i = 0; i < 4100; i++) {
        snprintf(p, sizeof(p), "%s/many/n%05d", top, i);
        close(open(p, O_CREAT | O_WRONLY, 0644));
    }
    snprintf(p, sizeof(p), "%s/file", top);
    tu_write_pattern(p, 9, 12345);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    ck_assert_msg(tu_register_dataset(&d, top, err, sizeof(err)) == 0, "%s", err);
    fd = raw_connect(&d);

    /* STAT of the file: 72 bytes, attributes at 0, valid_ms, reserved 0. */
    len = raw_req(req, 12, 1, NULL, 0, p, strlen(p));
    ck_assert_int_eq(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), PROTO_HDR_LEN + 72);
    ck_assert_uint_eq(rbuf[5], 12);
    ck_assert_uint_eq(rbuf[6] & 1, 1);                              /* REPLY */
    ck_assert_int_eq((int32_t)le32r(rbuf + 16), 0);
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_uint_eq(le32r(rbuf + 24), 0);                         /* handle 0 */
    ck_assert_uint_eq(le32r(rbuf + 24 + 8), 12345);                 /* size */
    ck_assert_uint_eq(le32r(rbuf + 24 + 16), (uint32_t)st.st_ino);
    ck_assert_uint_eq(le32r(rbuf + 24 + 44), st.st_mode);
    ck_assert_uint_gt(le32r(rbuf + 24 + 64), 0);                    /* valid_ms */
    ck_assert_uint_le(le32r(rbuf + 24 + 64), 60000);                /* the default recheck */
    ck_assert_uint_eq(le32r(rbuf + 24 + 68), 0);

    /* STAT errors, each on the same connection. */
    snprintf(p, sizeof(p), "%s/nope", top);
    len = raw_req(req, 12, 2, NULL, 0, p, strlen(p));
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -ENOENT);
    snprintf(p, sizeof(p), "%s/elsewhere", d.src);                 /* under the root, no dataset */
    len = raw_req(req, 12, 3, NULL, 0, p, strlen(p));
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -ENODATA);
    len = raw_req(req, 12, 4, NULL, 0, "/etc/passwd", 11);          /* outside the roots */
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_lt(m.h.status, 0);
    ck_assert_int_ne(m.h.status, -ENODATA);
    len = raw_req(req, 12, 5, NULL, 0, "", 0);                      /* no path */
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EPROTO);
    memset(long_path, 'a', sizeof(long_path) - 1);
    long_path[0] = '/';
    long_path[sizeof(long_path) - 1] = '\0';
    len = raw_req(req, 12, 6, NULL, 0, long_path, PROTO_MAX_PATH + 1);
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EMSGSIZE);
    {
        int devnull = open("/dev/null", O_RDONLY);
        snprintf(p, sizeof(p), "%s/file", top);
        len = raw_req(req, 12, 7, NULL, 0, p, strlen(p));
        ck_assert_int_gt(raw_call(fd, req, len, &devnull, 1, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_int_lt(m.h.status, 0);                            /* STAT carries no fd */
        close(devnull);
    }

    /* READDIR PLUS of 4100 entries, page by page to next == 0. */
    {
        uint64_t cookie = 0;
        int total = 0, pages = 0;
        char last[300] = "";
        snprintf(p, sizeof(p), "%s/many", top);
        do {
            size_t off = 0;
            proto_dirent e;
            len = readdir_req(req, 100 + (uint32_t)pages, cookie, 4096, 1, p);
            ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
            ck_assert_int_eq(m.h.status, 0);
            ck_assert_uint_eq(m.u.dirents.flags, 1);
            ck_assert_uint_gt(m.u.dirents.count, 0);
            while (proto_dirent_next(&m, &off, &e) == 1) {
                char name[300];
                snprintf(name, sizeof(name), "%.*s", (int)e.name_len, e.name);
                ck_assert_uint_eq(e.type, 8);
                ck_assert(e.has_attr && e.attr.size == 0 && (e.attr.mode & 0777) == 0644);
                ck_assert_msg(strcmp(last, name) < 0, "%s after %s", name, last);
                strcpy(last, name);
                total++;
            }
            cookie = m.u.dirents.next;
            pages++;
        } while (cookie && pages < 100);
        ck_assert_int_eq(total, 4100);
        ck_assert_int_gt(pages, 1);                                 /* it did page */
        ck_assert_str_eq(last, "n04099");
    }
    /* READDIR refusals, the connection kept. */
    len = readdir_req(req, 200, 0, 0, 0, p);
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EPROTO);                          /* max 0 */
    len = readdir_req(req, 201, 0, 4097, 0, p);
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EMSGSIZE);                        /* max over 4096 */
    len = readdir_req(req, 202, 0, 10, 2, p);
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EPROTO);                          /* unknown flag */
    len = readdir_req(req, 203, 999999, 10, 0, p);
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EINVAL);                          /* cookie past the end */
    snprintf(p, sizeof(p), "%s/file", top);
    len = readdir_req(req, 204, 0, 10, 0, p);
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -ENOTDIR);
    len = raw_req(req, 13, 205, "\0\0\0", 3, "", 0);               /* shorter than its prefix */
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EPROTO);
    /* Still served after all that. */
    snprintf(p, sizeof(p), "%s/many/n00007", top);
    len = raw_req(req, 12, 206, NULL, 0, p, strlen(p));
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, 0);
    close(fd);

    /* Not root, access_check = fd: the daemon does not judge: ENOKEY. */
    {
        pid_t pid = fork();
        int status;
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            int cfd;
            proto_msg cm;
            if (setgid(65534) < 0 || setuid(65534) < 0)
                _exit(3);
            cfd = gr__unix_connect(d.sock, SOCK_SEQPACKET);
            if (cfd < 0)
                _exit(4);
            len = raw_req(req, 12, 1, NULL, 0, p, strlen(p));
            if (raw_call(cfd, req, len, NULL, 0, rbuf, sizeof(rbuf), &cm) <= 0)
                _exit(5);
            _exit(cm.h.status == -ENOKEY ? 0 : 6);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %d",
                      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    tu_daemon_fini(&d);
}
END_TEST

/* OPENX and READX's WHOLE as a client written from PROTOCOL.md sees them,
 * hostile inputs included: the reply's layout byte by byte, whole chunks
 * from the boundary below off, bytes right through the segment fd, CLOSE
 * keeping no handle, IFCHEAP declining a cold multi-chunk file, and every
 * malformed request refused with the connection kept. */
START_TEST(test_openx_from_the_spec)
{
    enum { CH = 64 * 1024 };
    tu_daemon d;
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 64 + 4096];
    char small[600], big[600];
    int got[4], ngot = 0, fd;
    proto_msg m;
    proto_extent e;
    size_t len;
    ssize_t n;

    tu_daemon_init(&d, NULL);
    snprintf(small, sizeof(small), "%s/small", d.src);
    snprintf(big, sizeof(big), "%s/big", d.src);
    tu_write_pattern(small, 61, 40000);
    tu_write_pattern(big, 62, 3 * CH + 5);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    fd = raw_connect(&d);

    /* A small file, read by path: attributes, read_status 0, one whole
     * chunk (40000 bytes) with the segment's fd; no handle kept. */
    len = openx_bytes(req, 1, 0, 100, 1000, 0x1, small);
    n = raw_call_fds(fd, req, len, rbuf, sizeof(rbuf), &m, got, &ngot);
    ck_assert_int_gt(n, 0);
    ck_assert_uint_eq(rbuf[5], 11);
    ck_assert_int_eq((int32_t)le32r(rbuf + 16), 0);                 /* status */
    ck_assert_uint_eq(le32r(rbuf + 24), 0);                         /* handle: none */
    ck_assert_uint_eq(le32r(rbuf + 24 + 8), 40000);                 /* size */
    ck_assert_int_eq((int32_t)le32r(rbuf + 24 + 64), 0);            /* read_status */
    ck_assert_uint_eq(le32r(rbuf + 24 + 68), 0);
    ck_assert_uint_eq(rbuf[24 + 72] | rbuf[24 + 73] << 8, 1);       /* one extent */
    ck_assert_int_eq(ngot, 1);
    proto_extent_at(&m, 0, &e);
    ck_assert_uint_eq(e.len, 40000);                                /* the whole chunk */
    ck_assert_uint_eq(e.flags, PROTO_EXTENT_FD);
    {
        struct stat st;
        const uint8_t *map;
        ck_assert_int_eq(fstat(got[0], &st), 0);
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, got[0], 0);
        ck_assert(map != MAP_FAILED);
        ck_assert(tu_check_pattern(map + e.off, 61, 0, 40000));
        /* Writable mappings are refused (sealed). */
        ck_assert(mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, got[0], 0) ==
                  MAP_FAILED);
        munmap((void *)map, (size_t)st.st_size);
    }
    gr__close_fds(got, ngot);
    ck_assert_uint_eq(tu_stat(&d, "handles_open"), 0);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 1);

    /* A cold file of several chunks with IFCHEAP: opened (a handle), not
     * read: -EAGAIN and no bytes.  The second chunk read by READX WHOLE
     * from its middle comes whole, from its boundary. */
    len = openx_bytes(req, 2, 0, 0, CH, 0x2, big);
    ck_assert_int_gt(raw_call_fds(fd, req, len, rbuf, sizeof(rbuf), &m, got, &ngot), 0);
    gr__close_fds(got, ngot);
    ck_assert_int_eq(m.h.status, 0);
    ck_assert_int_eq(m.u.openx_reply.read_status, -EAGAIN);
    ck_assert_uint_eq(m.u.openx_reply.rx.nextents + m.u.openx_reply.rx.inline_len, 0);
    ck_assert_uint_ne(m.u.openx_reply.attr.handle, 0);
    {
        proto_read rd = { .handle = m.u.openx_reply.attr.handle, .len = 100, .off = CH + 500 };
        len = (size_t)proto_enc_readx_flags(req, sizeof(req), 3, PROTO_F_WHOLE, &rd);
        ck_assert_int_gt(raw_call_fds(fd, req, len, rbuf, sizeof(rbuf), &m, got, &ngot), 0);
        gr__close_fds(got, ngot);
        ck_assert_int_eq(m.h.status, 0);
        ck_assert_uint_eq(m.u.readx.nextents, 1);
        proto_extent_at(&m, 0, &e);
        ck_assert_uint_eq(e.len, CH);
        /* READ with WHOLE: malformed (WHOLE is READX's). */
        len = (size_t)proto_enc_read(req, sizeof(req), 4, &rd);
        req[6] |= PROTO_F_WHOLE;
        ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_uint_eq(m.h.req_id, 4);
        ck_assert_int_eq(m.h.status, -EPROTO);
    }
    /* Hostile OPENX: unknown flags, len over PROTO_MAX_READX, no path, a
     * path outside the roots, WHOLE in its header, two fds: each refused,
     * the connection kept. */
    len = openx_bytes(req, 5, 0, 0, 10, 0x4, small);
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EPROTO);
    len = openx_bytes(req, 6, 0, 0, PROTO_MAX_READX + 1, 0, small);
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EMSGSIZE);
    len = openx_bytes(req, 7, 0, 0, 10, 0, "");
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EPROTO);
    len = openx_bytes(req, 8, 0, 0, 10, 0, "/etc/passwd");
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_uint_eq(m.h.op, 11);
    ck_assert_int_eq(m.h.status, -EACCES);
    len = openx_bytes(req, 9, PROTO_F_WHOLE, 0, 10, 0, small);
    ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EPROTO);
    {
        int two[2] = { open(small, O_RDONLY), open(small, O_RDONLY) };
        len = openx_bytes(req, 10, 0, 0, 10, 0, small);
        ck_assert_int_gt(raw_call(fd, req, len, two, 2, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_int_eq(m.h.status, -EPROTO);
        close(two[0]);
        close(two[1]);
    }
    /* REPORT with NOREPLY: no answer; the next request's is next. */
    {
        uint8_t recs[64];
        size_t off = 0;
        struct iovec iov = { req, 0 };
        ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "lease_cache_hits", 5), 0);
        len = (size_t)proto_enc_report(req, sizeof(req), 11, recs, off);
        req[6] |= PROTO_F_NOREPLY;
        iov.iov_len = len;
        ck_assert_int_eq(gr__send_fds(fd, &iov, 1, NULL, 0, 0), (ssize_t)len);
        len = openx_bytes(req, 12, 0, 0, 0, 0x1, small);
        ck_assert_int_gt(raw_call(fd, req, len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_uint_eq(m.h.req_id, 12);
        ck_assert_int_eq(m.h.status, 0);
        ck_assert_uint_eq(tu_stat(&d, "lease_cache_hits"), 5);
    }
    close(fd);
    for (int i = 0; i < 200 && tu_stat(&d, "leases_active"); i++)
        tu_sleep_ms(10);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);     /* gone with the connection */
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* A HELLO request asking for features, byte by byte from PROTOCOL.md; the
 * features the daemon echoes. */
static uint32_t hello_raw(int fd, uint32_t features)
{
    uint8_t b[PROTO_HDR_LEN + PROTO_HELLO_LEN], rbuf[PROTO_MAX_MSG];
    proto_msg m;

    memset(b, 0, sizeof(b));
    le32w(b, 0x594e5247u);
    b[4] = 2;
    b[5] = 1;
    le32w(b + 8, 1);
    le32w(b + 12, PROTO_HELLO_LEN);
    le32w(b + 24, 2);                           /* version */
    le32w(b + 28, PROTO_MAX_MSG);               /* max_msg */
    le32w(b + 24 + 28, features);
    ck_assert_int_gt(raw_call(fd, b, sizeof(b), NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, 0);
    return le32r(rbuf + 24 + 28);
}

/* The flags of the first extent of an OPENX by path of chunk i of path
 * (the segment's first extent on a fresh connection: it brings the fd);
 * with release, its lease given back (RELEASE, no reply) at once. */
static uint32_t openx_chunk_flags(int fd, uint32_t id, const char *path, uint64_t i, int release)
{
    enum { CH = 64 * 1024 };
    uint8_t req[PROTO_HDR_LEN + 64 + 4096], rbuf[PROTO_MAX_MSG];
    int got[4], ngot = 0;
    proto_msg m;
    proto_extent e;
    size_t len = openx_bytes(req, id, 0, i * CH, CH, 0x1, path);

    ck_assert_int_gt(raw_call_fds(fd, req, len, rbuf, sizeof(rbuf), &m, got, &ngot), 0);
    gr__close_fds(got, ngot);
    ck_assert_int_eq(m.h.status, 0);
    ck_assert_int_eq(m.u.openx_reply.read_status, 0);
    ck_assert_msg(m.u.openx_reply.rx.nextents == 1, "chunk %llu: %u extents, %u inline",
                  (unsigned long long)i, m.u.openx_reply.rx.nextents,
                  m.u.openx_reply.rx.inline_len);
    proto_extent_at(&m, 0, &e);
    ck_assert_uint_eq(e.len, CH);
    if (release) {
        struct iovec iov = { req, 0 };
        ssize_t n = proto_enc_release(req, sizeof(req), id + 1000000, &e.lease, 1);
        ck_assert_int_gt(n, 0);
        iov.iov_len = (size_t)n;
        ck_assert_int_eq(gr__send_fds(fd, &iov, 1, NULL, 0, 0), n);
    }
    return e.flags;
}

/* NOKEEP as a client written from PROTOCOL.md sees it: under the epoch
 * policy with a dataset three times the tier, a refused chunk's extent
 * carries NOKEEP beside FD when it is the first of its segment (FD once
 * overwrote it), an admitted one's does not, and a client that did not ask
 * for the feature never sees the bit. */
START_TEST(test_nokeep_from_the_spec)
{
    enum { CH = 64 * 1024, CHUNKS = 48 };
    tu_daemon d;
    char big[600];
    int fd;

    tu_daemon_init(&d, "[dram]\ncapacity = 1M\npolicy = epoch\n[nvme]\npath =\n");
    snprintf(big, sizeof(big), "%s/big", d.src);
    tu_write_pattern(big, 64, CHUNKS * CH);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    /* A cold pass fills the tier; the policy refuses the rest. */
    fd = raw_connect(&d);
    for (uint32_t i = 0; i < CHUNKS; i++)
        (void)openx_chunk_flags(fd, 100 + i, big, i, 1);
    close(fd);
    for (int i = 0; i < 200 && tu_stat(&d, "leases_active"); i++)
        tu_sleep_ms(10);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
    ck_assert_uint_gt(tu_stat(&d, "dram_not_admitted"), 0);

    /* An unknown feature bit is not echoed. */
    fd = raw_connect(&d);
    ck_assert_uint_eq(hello_raw(fd, PROTO_FEAT_NOKEEP | 0x80000000u) &
                      (PROTO_FEAT_NOKEEP | 0x80000000u), PROTO_FEAT_NOKEEP);
    ck_assert_uint_eq(openx_chunk_flags(fd, 1, big, CHUNKS - 1, 0),
                      PROTO_EXTENT_FD | PROTO_EXTENT_NOKEEP);
    ck_assert_uint_eq(openx_chunk_flags(fd, 2, big, 0, 0) & PROTO_EXTENT_NOKEEP, 0);
    close(fd);

    fd = raw_connect(&d);
    ck_assert_uint_eq(hello_raw(fd, 0), 0);
    ck_assert_uint_eq(openx_chunk_flags(fd, 1, big, CHUNKS - 1, 0), PROTO_EXTENT_FD);
    close(fd);
    fd = raw_connect(&d);                       /* no HELLO at all */
    ck_assert_uint_eq(openx_chunk_flags(fd, 1, big, CHUNKS - 1, 0), PROTO_EXTENT_FD);
    close(fd);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* The value of the first record called name in a reply, as a number (the
 * text's length for a text record, UINT64_MAX when absent); *text set for
 * text records. */
static uint64_t rec_find(const proto_msg *m, const char *name, const char **text, uint32_t *tlen)
{
    size_t off = 0;
    proto_rec r;

    while (proto_rec_next(m->u.recs.p, m->u.recs.len, &off, &r) == 1) {
        if (!proto_rec_is(&r, name))
            continue;
        if (r.kind == PROTO_REC_STR) {
            if (text)
                *text = r.str;
            if (tlen)
                *tlen = r.len;
            return r.len;
        }
        return r.u64;
    }
    return UINT64_MAX;
}

/* ANALYZE (ADMIN 14) built from PROTOCOL.md: no fields, or one numeric
 * "job"; a text "job", an unknown field or job 0 of nobody is refused with
 * -EINVAL / -ENOENT and the connection kept; ADMIN 15 is refused by the
 * decoder (-EPROTO), the connection kept; after 600 4 KiB reads at random offsets the reply
 * starts with "jobs", then "job", and names this process group's job
 * random-small, with hit ratios in basis points and recommendations. */
START_TEST(test_analyze_from_the_spec)
{
    tu_daemon d;
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 512], recs[256];
    char path[600];
    const char *txt = NULL;
    uint32_t tlen = 0, h;
    proto_msg m;
    proto_rec r;
    size_t off;
    ssize_t len;
    uint64_t seed = 7;
    int fd;

    tu_daemon_init(&d, NULL);
    snprintf(path, sizeof(path), "%s/f", d.src);
    tu_write_pattern(path, 3, 4u << 20);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    fd = raw_connect(&d);
    /* refusals, the connection kept */
    off = 0;
    ck_assert_int_eq(proto_rec_str(recs, sizeof(recs), &off, "job", "1", 1), 0);
    len = proto_enc_admin(req, sizeof(req), 1, PROTO_ADMIN_ANALYZE, recs, off);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EINVAL);
    off = 0;
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "path", 1), 0);
    len = proto_enc_admin(req, sizeof(req), 2, PROTO_ADMIN_ANALYZE, recs, off);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EINVAL);
    off = 0;
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "job", 123456789), 0);
    len = proto_enc_admin(req, sizeof(req), 3, PROTO_ADMIN_ANALYZE, recs, off);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -ENOENT);
    /* the command after the last (CKPT_LIST, 15) does not exist: the decoder refuses it */
    len = proto_enc_admin(req, sizeof(req), 4, PROTO_ADMIN_ANALYZE, NULL, 0);
    req[PROTO_HDR_LEN] = PROTO_ADMIN_MAX_;
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, -EPROTO);
    /* 600 random 4 KiB READs */
    len = proto_enc_open(req, sizeof(req), 5, path, strlen(path));
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, 0);
    h = m.u.attr.handle;
    for (int i = 0; i < 600; i++) {
        proto_read rd = { .handle = h, .len = 4096 };
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        rd.off = (seed >> 33) % ((4u << 20) / 4096) * 4096;
        len = proto_enc_read(req, sizeof(req), 100 + (uint32_t)i, &rd);
        ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_int_eq(m.h.status, 0);
    }
    len = proto_enc_admin(req, sizeof(req), 6, PROTO_ADMIN_ANALYZE, NULL, 0);
    ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_int_eq(m.h.status, 0);
    off = 0;
    ck_assert_int_eq(proto_rec_next(m.u.recs.p, m.u.recs.len, &off, &r), 1);
    ck_assert(proto_rec_is(&r, "jobs") && r.kind == PROTO_REC_U64 && r.u64 == 1);
    ck_assert_int_eq(proto_rec_next(m.u.recs.p, m.u.recs.len, &off, &r), 1);
    ck_assert(proto_rec_is(&r, "job") && r.kind == PROTO_REC_U64 && r.u64 >= 1);
    ck_assert_uint_eq(rec_find(&m, "pgid", NULL, NULL), (uint64_t)getpgrp());
    ck_assert_uint_eq(rec_find(&m, "uid", NULL, NULL), (uint64_t)getuid());
    ck_assert_uint_eq(rec_find(&m, "requests", NULL, NULL), 600);
    ck_assert_uint_eq(rec_find(&m, "class", &txt, &tlen), strlen("random-small"));
    ck_assert(memcmp(txt, "random-small", tlen) == 0);
    ck_assert_uint_ge(rec_find(&m, "random_bp", NULL, NULL), 9000);
    ck_assert_uint_le(rec_find(&m, "hit_lru_bp", NULL, NULL), 10000);
    ck_assert_uint_le(rec_find(&m, "hit_belady_bp", NULL, NULL), 10000);
    ck_assert_uint_ne(rec_find(&m, "rec", NULL, NULL), UINT64_MAX);
    ck_assert_uint_eq(rec_find(&m, "tier", &txt, &tlen), 4);
    ck_assert(memcmp(txt, "dram", 4) == 0);
    /* by job id: the same job */
    {
        uint64_t id = rec_find(&m, "job", NULL, NULL);
        off = 0;
        ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "job", id), 0);
        len = proto_enc_admin(req, sizeof(req), 7, PROTO_ADMIN_ANALYZE, recs, off);
        ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_int_eq(m.h.status, 0);
        ck_assert_uint_eq(rec_find(&m, "job", NULL, NULL), id);
    }
    /* 16 pipelined: each answered, with the report or -EBUSY (at most a
     * few are built at a time), and the connection kept */
    {
        struct iovec iov = { req, 0 };
        int ok = 0, busy = 0, got[4], ngot;
        len = proto_enc_admin(req, sizeof(req), 50, PROTO_ADMIN_ANALYZE, NULL, 0);
        iov.iov_len = (size_t)len;
        for (int i = 0; i < 16; i++)
            ck_assert_int_eq(gr__send_fds(fd, &iov, 1, NULL, 0, 0), len);
        for (int i = 0; i < 16; i++) {
            size_t used;
            ssize_t n = gr__recv_fds(fd, rbuf, sizeof(rbuf), got, 4, &ngot, 0, NULL);
            ck_assert_int_gt(n, 0);
            ck_assert_int_eq(proto_decode(rbuf, (size_t)n, &m, &used), 0);
            ok += m.h.status == 0;
            busy += m.h.status == -EBUSY;
        }
        ck_assert_int_eq(ok + busy, 16);
        ck_assert_int_ge(ok, 1);
        len = proto_enc_admin(req, sizeof(req), 51, PROTO_ADMIN_HEALTH, NULL, 0);
        ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_int_eq(m.h.status, 0);
    }
    close(fd);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}
END_TEST

/* REPORT adds the client-kept counters (GR_CLIENT_STATS) to the daemon's,
 * saturating, ignores other names, answers with an empty success, refuses
 * text records; the first report of a GPU path is logged once. */
START_TEST(test_report)
{
    tu_daemon d;
    uint8_t rbuf[PROTO_MAX_MSG], req[PROTO_HDR_LEN + 512], recs[256];
    proto_msg m;
    size_t off;
    ssize_t len;
    FILE *lf;
    char line[512];
    int fd, logged = 0;

    tu_daemon_init(&d, NULL);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    fd = raw_connect(&d);
    for (uint32_t id = 1; id <= 2; id++) {
        off = 0;
        ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "gpu_clients", 1), 0);
        ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "gpu_bytes", 1000), 0);
        ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "gpu_tier_hits", UINT64_MAX), 0);
        ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "hits_dram", 5), 0);
        ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "no_such_counter", 5), 0);
        len = proto_enc_report(req, sizeof(req), id, recs, off);
        ck_assert_int_gt(len, 0);
        ck_assert_int_gt(raw_call(fd, req, (size_t)len, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
        ck_assert_uint_eq(m.h.op, PROTO_OP_REPORT);
        ck_assert_uint_eq(m.h.req_id, id);
        ck_assert_int_eq(m.h.status, 0);
        ck_assert_uint_eq(m.u.recs.len, 0);
    }
    /* A text record: the decoder refuses it. */
    off = 0;
    ck_assert_int_eq(proto_rec_str(recs, sizeof(recs), &off, "gpu_bytes", "1", 1), 0);
    proto_encode_hdr(req, PROTO_OP_REPORT, 0, 3, 0, (uint32_t)off);
    memcpy(req + PROTO_HDR_LEN, recs, off);
    ck_assert_int_gt(raw_call(fd, req, PROTO_HDR_LEN + off, NULL, 0, rbuf, sizeof(rbuf), &m), 0);
    ck_assert_uint_eq(m.h.req_id, 3);
    ck_assert_int_eq(m.h.status, -EPROTO);
    close(fd);
    ck_assert_uint_eq(tu_stat(&d, "gpu_clients"), 2);
    ck_assert_uint_eq(tu_stat(&d, "gpu_bytes"), 2000);
    ck_assert_uint_eq(tu_stat(&d, "gpu_tier_hits"), UINT64_MAX);   /* saturated */
    ck_assert_uint_eq(tu_stat(&d, "hits_dram"), 0);                 /* not a client's to add */
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    lf = fopen(d.log, "r");
    ck_assert_ptr_nonnull(lf);
    while (fgets(line, sizeof(line), lf))
        logged += strstr(line, "copies into GPU memory") != NULL;
    fclose(lf);
    ck_assert_int_eq(logged, 1);
    tu_daemon_fini(&d);
}
END_TEST

static Suite *serve_suite(void)
{
    Suite *s = suite_create("serve");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reply_alloc_failure);
    tcase_add_test(tc, test_empty_packets_with_fds);
    tcase_add_test(tc, test_refusal_reason);
    tcase_add_test(tc, test_admin_fields_and_noreply);
    tcase_add_test(tc, test_openx_from_the_spec);
    tcase_add_test(tc, test_proof_revalidates);
    tcase_add_test(tc, test_reused_inode_forgery);
    tcase_add_test(tc, test_kept_proof);
    tcase_add_test(tc, test_kept_proofs_bounded);
    tcase_add_test(tc, test_joined_fetch_failure);
    tcase_add_test(tc, test_blocking_close_off_loop);
    tcase_add_test(tc, test_fifo_open_refused);
    tcase_add_test(tc, test_nokeep_from_the_spec);
    tcase_add_test(tc, test_stat_readdir_from_the_spec);
    tcase_add_test(tc, test_report);
    tcase_add_test(tc, test_analyze_from_the_spec);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(serve_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
