/*
 * fuzz_proto.c - libFuzzer target for proto/proto.c, the wire codec that
 * every byte a client (or a daemon, for the client library) sends reaches
 * first.  Built and run by `make fuzz` and `make fuzz-regress`.
 *
 * One input is one packet (protocol version 2, proto/PROTOCOL.md), decoded
 * message after message while messages decode.  The harness checks, besides
 * "no crash, no UB, no read outside the input" (libFuzzer hands the input
 * over in a heap block of exactly its size, so ASan sees any over-read):
 *   - proto_decode_hdr and proto_decode agree, and a header they accept (or
 *     refuse only for its size) has only valid flags (REPLY alone or with
 *     STAGED on a successful OPEN or OPENX reply, or NOREPLY and WHOLE on a
 *     request) and re-encodes to the same 24 bytes;
 *     WHOLE on anything but a READX request is -EPROTO;
 *   - a decoded message's pointers and lengths lie inside its body, and its
 *     fields within their documented limits, for every opcode: HELLO (32
 *     bytes, reserved 0), OPEN and STAT paths, OPENX requests (off, len,
 *     the CLOSE and IFCHEAP flags, path) and replies (attributes,
 *     read_status, the READX body; no bytes with a failed read), READ and
 *     READX requests (WHOLE), CLOSE, RELEASE ids, ADMIN commands and their
 *     records, HINT ranges (walked with proto_hint_next), REPORT records
 *     (numbers only, at most PROTO_MAX_REPORT), READDIR requests (cookie,
 *     max, PLUS) and replies (entries walked with proto_dirent_next), STAT
 *     replies, READX extents (proto_extent_at, proto_msg_readx), and the
 *     records of STATS, ADMIN, HINT and REPORT replies (proto_rec_next,
 *     proto_rec_is; rebuilt with proto_rec_u64/proto_rec_str to the same
 *     bytes);
 *   - every strict prefix of a decoded message (tried: none, the header
 *     short a byte, the header alone, the message short a byte) is
 *     PROTO_NEED_MORE, read from a block of exactly that size;
 *   - re-encoding the decoded message with the opcode's encoder gives the
 *     same bytes, into a block of exactly that size, and one byte less of
 *     room is refused with -EMSGSIZE without writing anything; the re-encoded
 *     bytes decode to the same message.  Header flags the encoders do not
 *     take (NOREPLY) are set with proto_encode_hdr, as libgranary does;
 *   - proto_rec_next on the raw input keeps to its contract (1, 0 or
 *     -EPROTO; *off unchanged on an error; records inside the bytes);
 *   - the encoders, driven by the input as a source of field values (its
 *     last byte picks one): what an encoder accepts decodes to the values
 *     it was given (and passes the checks above), and what it refuses is
 *     exactly what its documented limits say;
 *   - proto_enc_error on arbitrary text (the input minus 5 bytes of status
 *     and op) produces a decodable reply whose text is a prefix of the given
 *     one, cut before a straddling UTF-8 sequence.
 * A failed check prints the line and aborts, which libFuzzer reports as a
 * crash with the input saved.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckset.h"
#include "proto.h"

/* Not assert(): the checks must hold whatever NDEBUG says. */
#define CHECK(expr)                                                             \
    do {                                                                        \
        if (!(expr)) {                                                          \
            fprintf(stderr, "fuzz_proto.c:%d: check failed: %s\n", __LINE__, #expr); \
            abort();                                                            \
        }                                                                       \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RE_SKIP (-1000) /* the message has no encoder form (error text with a NUL) */
#define MAX_MSGS 16     /* messages decoded from one input, at most */

/* A heap block of exactly n bytes (at least 1 allocated), a copy of src. */
static uint8_t *dup_exact(const uint8_t *src, size_t n)
{
    uint8_t *p = malloc(n ? n : 1);

    CHECK(p != NULL);
    if (n)
        memcpy(p, src, n);
    return p;
}

static int is_decode_result(int rc)
{
    return rc == 0 || rc == PROTO_NEED_MORE || rc == -EPROTO || rc == -EPROTONOSUPPORT ||
           rc == -EMSGSIZE;
}

static int hdr_equal(const proto_hdr *a, const proto_hdr *b)
{
    return a->magic == b->magic && a->version == b->version && a->op == b->op &&
           a->flags == b->flags && a->req_id == b->req_id && a->body_len == b->body_len &&
           a->status == b->status && a->reserved == b->reserved;
}

static int bytes_equal(const void *a, const void *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

static int attr_equal(const proto_attr *a, const proto_attr *b)
{
    return a->handle == b->handle && a->chunk_size == b->chunk_size && a->size == b->size &&
           a->ino == b->ino && a->dev == b->dev && a->mtime_sec == b->mtime_sec &&
           a->mtime_nsec == b->mtime_nsec && a->mode == b->mode && a->blksize == b->blksize &&
           a->uid == b->uid && a->gid == b->gid && a->nlink == b->nlink;
}

static int hello_equal(const proto_hello *a, const proto_hello *b)
{
    return a->version == b->version && a->max_msg == b->max_msg &&
           a->max_data == b->max_data && a->chunk_size == b->chunk_size &&
           a->lease_cache == b->lease_cache && a->lease_ttl_ms == b->lease_ttl_ms &&
           a->features == b->features;
}

static int readx_equal(const proto_readx *a, const proto_readx *b)
{
    return a->nextents == b->nextents && a->inline_len == b->inline_len &&
           bytes_equal(a->extents, b->extents, (size_t)a->nextents * PROTO_EXTENT_LEN) &&
           bytes_equal(a->inline_data, b->inline_data, a->inline_len);
}

/* Two decoded messages carry the same values (pointers compared by the bytes
 * they point at, not by address). */
static int msg_equal(const proto_msg *a, const proto_msg *b)
{
    if (!hdr_equal(&a->h, &b->h))
        return 0;
    if (a->h.flags & PROTO_F_REPLY) {
        if (a->h.status < 0)
            return a->u.error.len == b->u.error.len &&
                   bytes_equal(a->u.error.text, b->u.error.text, a->u.error.len);
        switch (a->h.op) {
        case PROTO_OP_HELLO:
            return hello_equal(&a->u.hello, &b->u.hello);
        case PROTO_OP_OPEN:
            return attr_equal(&a->u.attr, &b->u.attr);
        case PROTO_OP_CLOSE:
            return 1;
        case PROTO_OP_READX:
            return readx_equal(&a->u.readx, &b->u.readx);
        case PROTO_OP_OPENX:
            return attr_equal(&a->u.openx_reply.attr, &b->u.openx_reply.attr) &&
                   a->u.openx_reply.read_status == b->u.openx_reply.read_status &&
                   readx_equal(&a->u.openx_reply.rx, &b->u.openx_reply.rx);
        case PROTO_OP_READ:
            return a->u.data.len == b->u.data.len &&
                   bytes_equal(a->u.data.p, b->u.data.p, a->u.data.len);
        case PROTO_OP_STATS:
        case PROTO_OP_ADMIN:
        case PROTO_OP_HINT:
        case PROTO_OP_REPORT:
        case PROTO_OP_CKPT_PUT:
            return a->u.recs.len == b->u.recs.len &&
                   bytes_equal(a->u.recs.p, b->u.recs.p, a->u.recs.len);
        case PROTO_OP_STAT:
            return attr_equal(&a->u.stat.attr, &b->u.stat.attr) &&
                   a->u.stat.valid_ms == b->u.stat.valid_ms;
        case PROTO_OP_READDIR:
            return a->u.dirents.next == b->u.dirents.next &&
                   a->u.dirents.count == b->u.dirents.count &&
                   a->u.dirents.valid_ms == b->u.dirents.valid_ms &&
                   a->u.dirents.flags == b->u.dirents.flags &&
                   a->u.dirents.len == b->u.dirents.len &&
                   bytes_equal(a->u.dirents.ents, b->u.dirents.ents, a->u.dirents.len);
        default:
            return 0;
        }
    }
    switch (a->h.op) {
    case PROTO_OP_HELLO:
        return hello_equal(&a->u.hello, &b->u.hello);
    case PROTO_OP_OPEN:
    case PROTO_OP_STAT:
        return a->u.open.len == b->u.open.len &&
               bytes_equal(a->u.open.path, b->u.open.path, a->u.open.len);
    case PROTO_OP_OPENX:
        return a->u.openx.off == b->u.openx.off && a->u.openx.len == b->u.openx.len &&
               a->u.openx.flags == b->u.openx.flags &&
               a->u.openx.path_len == b->u.openx.path_len &&
               bytes_equal(a->u.openx.path, b->u.openx.path, a->u.openx.path_len);
    case PROTO_OP_READDIR:
        return a->u.readdir.cookie == b->u.readdir.cookie &&
               a->u.readdir.max == b->u.readdir.max &&
               a->u.readdir.flags == b->u.readdir.flags &&
               a->u.readdir.path_len == b->u.readdir.path_len &&
               bytes_equal(a->u.readdir.path, b->u.readdir.path, a->u.readdir.path_len);
    case PROTO_OP_CLOSE:
        return a->u.handle == b->u.handle;
    case PROTO_OP_READ:
    case PROTO_OP_READX:
        return a->u.read.handle == b->u.read.handle && a->u.read.len == b->u.read.len &&
               a->u.read.off == b->u.read.off;
    case PROTO_OP_STATS:
        return 1;
    case PROTO_OP_RELEASE:
        return a->u.release.count == b->u.release.count &&
               bytes_equal(a->u.release.ids, b->u.release.ids, (size_t)a->u.release.count * 4);
    case PROTO_OP_ADMIN:
        return a->u.admin.cmd == b->u.admin.cmd && a->u.admin.len == b->u.admin.len &&
               bytes_equal(a->u.admin.recs, b->u.admin.recs, a->u.admin.len);
    case PROTO_OP_HINT:
        return a->u.hint.flags == b->u.hint.flags && a->u.hint.count == b->u.hint.count &&
               a->u.hint.len == b->u.hint.len &&
               bytes_equal(a->u.hint.ents, b->u.hint.ents, a->u.hint.len);
    case PROTO_OP_REPORT:
    case PROTO_OP_CKPT_PUT:
        return a->u.recs.len == b->u.recs.len &&
               bytes_equal(a->u.recs.p, b->u.recs.p, a->u.recs.len);
    default:
        return 0;
    }
}

/* p[0..n) lies inside [lo, hi). */
static int inside(const void *p, size_t n, const uint8_t *lo, const uint8_t *hi)
{
    const uint8_t *q = p;

    return q >= lo && q <= hi && n <= (size_t)(hi - q);
}

/*
 * Walk the records of body[0..len) with proto_rec_next, checking its
 * contract at each step.  Returns the number of records read before the end
 * (0) or the first malformed one (-EPROTO; *bad set).  *all_u64: every
 * record read was a number.  When rebuild is set and the walk reached the
 * end, the records are appended again with proto_rec_u64/proto_rec_str into
 * a block of exactly len bytes (unless a name holds a NUL, which those take
 * as its end) and must come out as the same bytes.
 */
static uint32_t rec_walk(const uint8_t *body, size_t len, int rebuild, int *bad, int *all_u64)
{
    size_t off = 0, out = 0;
    uint32_t k = 0;
    int nul_name = 0;
    uint8_t *copy = rebuild ? malloc(len ? len : 1) : NULL;

    CHECK(!rebuild || copy != NULL);
    *bad = 0;
    *all_u64 = 1;
    for (;;) {
        proto_rec r;
        size_t before = off;
        int rc = proto_rec_next(body, len, &off, &r);

        CHECK(rc == 1 || rc == 0 || rc == -EPROTO);
        if (rc == 0) {
            CHECK(off == before && off >= len);
            break;
        }
        if (rc < 0) {
            CHECK(off == before);
            *bad = 1;
            break;
        }
        k++;
        CHECK(off > before && off <= len);
        CHECK(r.name_len >= 1 && r.name_len <= 255);
        CHECK(r.name == (const char *)body + before + 1);
        CHECK(inside(r.name, r.name_len, body, body + len));
        CHECK((uint8_t)body[before] == r.name_len);
        if (r.kind == PROTO_REC_U64) {
            CHECK(off == before + 2 + r.name_len + 8);
            CHECK(r.str == NULL && r.len == 0);
        } else {
            CHECK(r.kind == PROTO_REC_STR);
            *all_u64 = 0;
            CHECK(r.str == (const char *)body + before + 2 + r.name_len + 4);
            CHECK(inside(r.str, r.len, body, body + len));
            CHECK(off == before + 2 + r.name_len + 4 + (size_t)r.len);
            CHECK(r.u64 == 0);
        }
        if (memchr(r.name, 0, r.name_len)) {
            nul_name = 1;
        } else {
            char nm[257];

            memcpy(nm, r.name, r.name_len);
            nm[r.name_len] = '\0';
            CHECK(proto_rec_is(&r, nm));
            nm[r.name_len] = 'x';
            nm[r.name_len + 1] = '\0';
            CHECK(!proto_rec_is(&r, nm));
            if (rebuild && !nul_name) {
                nm[r.name_len] = '\0';
                if (r.kind == PROTO_REC_U64)
                    CHECK(proto_rec_u64(copy, len, &out, nm, r.u64) == 0);
                else
                    CHECK(proto_rec_str(copy, len, &out, nm, r.str, r.len) == 0);
                CHECK(out == off);
            }
        }
    }
    if (rebuild && !*bad && !nul_name) {
        CHECK(out == len);
        CHECK(bytes_equal(copy, body, len));
    }
    free(copy);
    return k;
}

/* A READX body decoded at [at, end) (a READX reply's body, or an OPENX
 * reply's after its fixed part). */
static void check_readx(const proto_msg *m, const proto_readx *rx, const uint8_t *at,
                        const uint8_t *end)
{
    uint32_t ne = rx->nextents;

    CHECK(proto_msg_readx(m) == rx);
    CHECK(ne <= PROTO_MAX_EXTENTS && rx->inline_len <= PROTO_MAX_DATA);
    CHECK(rx->extents == at + PROTO_READX_PREFIX);
    CHECK(inside(rx->extents, (size_t)ne * PROTO_EXTENT_LEN, at, end));
    CHECK(rx->inline_data == rx->extents + (size_t)ne * PROTO_EXTENT_LEN);
    CHECK(rx->inline_data + rx->inline_len == end);
    for (uint32_t i = 0; i < ne; i++) {
        proto_extent e;

        proto_extent_at(m, i, &e);
        CHECK((e.flags & ~(PROTO_EXTENT_FD | PROTO_EXTENT_NOKEEP)) == 0);
    }
}

/* Check the decoded fields of m (from a block [msg, msg + used)) against
 * their documented limits and the body's bounds. */
static void check_fields(const proto_msg *m, const uint8_t *msg, size_t used)
{
    const uint8_t *body = msg + PROTO_HDR_LEN, *end = msg + used;
    uint32_t n = m->h.body_len;
    int bad, all_u64;

    CHECK(used == PROTO_HDR_LEN + (size_t)n);
    if (m->h.flags & PROTO_F_REPLY) {
        CHECK((m->h.flags & (PROTO_F_NOREPLY | PROTO_F_WHOLE)) == 0);
        if (m->h.status < 0) {
            CHECK(m->h.status >= -4095);
            CHECK(m->u.error.len == n && n <= PROTO_MAX_ERRMSG);
            CHECK(n == 0 || m->u.error.text == (const char *)body);
            CHECK(proto_msg_readx(m) == NULL);
            return;
        }
        if (m->h.op != PROTO_OP_READX && m->h.op != PROTO_OP_OPENX)
            CHECK(proto_msg_readx(m) == NULL);
        switch (m->h.op) {
        case PROTO_OP_HELLO:
            CHECK(n == PROTO_HELLO_LEN);
            break;
        case PROTO_OP_OPEN:
            CHECK(n == PROTO_ATTR_LEN);
            break;
        case PROTO_OP_CLOSE:
            CHECK(n == 0);
            break;
        case PROTO_OP_READ:
            CHECK(n <= PROTO_MAX_DATA);
            CHECK(m->u.data.len == n && (n == 0 || m->u.data.p == body));
            break;
        case PROTO_OP_STATS:
        case PROTO_OP_ADMIN:
        case PROTO_OP_HINT:
        case PROTO_OP_REPORT:
        case PROTO_OP_CKPT_PUT:
            CHECK(m->u.recs.len == n && (n == 0 || m->u.recs.p == body));
            (void)rec_walk(m->u.recs.p, m->u.recs.len, 1, &bad, &all_u64);
            CHECK(!bad);
            break;
        case PROTO_OP_READX:
            check_readx(m, &m->u.readx, body, end);
            break;
        case PROTO_OP_OPENX: {
            int32_t rs = m->u.openx_reply.read_status;

            CHECK(n >= PROTO_OPENX_FIXED + PROTO_READX_PREFIX);
            CHECK(rs <= 0 && rs >= -4095);
            check_readx(m, &m->u.openx_reply.rx, body + PROTO_OPENX_FIXED, end);
            if (rs < 0)
                CHECK(m->u.openx_reply.rx.nextents == 0 && m->u.openx_reply.rx.inline_len == 0);
            break;
        }
        case PROTO_OP_STAT:
            CHECK(n == PROTO_STAT_LEN);
            break;
        case PROTO_OP_READDIR: {
            int plus = (m->u.dirents.flags & PROTO_READDIR_PLUS) != 0;
            proto_dirent d;
            size_t off = 0;
            uint32_t k = 0;

            CHECK(n >= PROTO_READDIR_REPLY);
            CHECK((m->u.dirents.flags & ~PROTO_READDIR_PLUS) == 0);
            CHECK(m->u.dirents.count <= PROTO_MAX_DIRENTS);
            CHECK(m->u.dirents.ents == body + PROTO_READDIR_REPLY);
            CHECK(m->u.dirents.len == n - PROTO_READDIR_REPLY);
            while (proto_dirent_next(m, &off, &d) == 1) {
                CHECK(PROTO_DIRENT_VALID(d.type));
                CHECK(d.name_len >= 1 && d.name_len <= 255);
                CHECK(inside(d.name, d.name_len, body, end));
                CHECK(!memchr(d.name, '/', d.name_len) && !memchr(d.name, 0, d.name_len));
                CHECK(d.has_attr == plus);
                CHECK(off <= m->u.dirents.len);
                k++;
                CHECK(k <= m->u.dirents.count);
            }
            CHECK(k == m->u.dirents.count && off == m->u.dirents.len);
            break;
        }
        default:
            CHECK(0);
        }
        return;
    }
    CHECK(m->h.status == 0);
    CHECK(proto_msg_readx(m) == NULL);
    if (m->h.flags & PROTO_F_WHOLE)
        CHECK(m->h.op == PROTO_OP_READX);
    switch (m->h.op) {
    case PROTO_OP_HELLO:
        CHECK(n == PROTO_HELLO_LEN);
        break;
    case PROTO_OP_OPEN:
    case PROTO_OP_STAT:
        CHECK(n >= 1 && n <= PROTO_MAX_PATH);
        CHECK(m->u.open.len == n && m->u.open.path == (const char *)body);
        break;
    case PROTO_OP_OPENX:
        CHECK(n > PROTO_OPENX_PREFIX);
        CHECK(m->u.openx.path_len >= 1 && m->u.openx.path_len <= PROTO_MAX_PATH);
        CHECK(m->u.openx.path == (const char *)body + PROTO_OPENX_PREFIX);
        CHECK(m->u.openx.path_len == n - PROTO_OPENX_PREFIX);
        CHECK(m->u.openx.len <= PROTO_MAX_READX);
        CHECK((m->u.openx.flags & ~(PROTO_OPENX_CLOSE | PROTO_OPENX_IFCHEAP)) == 0);
        break;
    case PROTO_OP_READDIR:
        CHECK(n > PROTO_READDIR_PREFIX);
        CHECK(m->u.readdir.path_len >= 1 && m->u.readdir.path_len <= PROTO_MAX_PATH);
        CHECK(m->u.readdir.path == (const char *)body + PROTO_READDIR_PREFIX);
        CHECK(m->u.readdir.path_len == n - PROTO_READDIR_PREFIX);
        CHECK(m->u.readdir.max >= 1 && m->u.readdir.max <= PROTO_MAX_DIRENTS);
        CHECK((m->u.readdir.flags & ~PROTO_READDIR_PLUS) == 0);
        break;
    case PROTO_OP_CLOSE:
        CHECK(n == 4);
        break;
    case PROTO_OP_READ:
        CHECK(n == PROTO_READ_LEN && m->u.read.len <= PROTO_MAX_DATA);
        break;
    case PROTO_OP_STATS:
        CHECK(n == 0);
        break;
    case PROTO_OP_READX:
        CHECK(n == PROTO_READ_LEN && m->u.read.len <= PROTO_MAX_READX);
        break;
    case PROTO_OP_RELEASE:
        CHECK(m->u.release.count >= 1 && m->u.release.count <= PROTO_MAX_RELEASE);
        CHECK(m->u.release.ids == body && (size_t)m->u.release.count * 4 == n);
        for (uint32_t i = 0; i < m->u.release.count; i++)
            (void)proto_release_at(m, i);
        break;
    case PROTO_OP_ADMIN:
        CHECK(n >= 1 && m->u.admin.cmd >= 1 && m->u.admin.cmd < PROTO_ADMIN_MAX_);
        CHECK(m->u.admin.cmd == body[0]);
        CHECK(m->u.admin.len == n - 1 && m->u.admin.recs == body + 1);
        (void)rec_walk(m->u.admin.recs, m->u.admin.len, 1, &bad, &all_u64);
        CHECK(!bad);
        break;
    case PROTO_OP_HINT: {
        proto_hint_ent e;
        size_t off = 0;
        uint32_t k = 0;

        CHECK(m->u.hint.count <= PROTO_MAX_HINTS && (m->u.hint.flags & ~PROTO_HINT_CLEAR) == 0);
        CHECK(m->u.hint.ents == body + PROTO_HINT_PREFIX && m->u.hint.len == n - PROTO_HINT_PREFIX);
        while (proto_hint_next(m, &off, &e) == 1) {
            CHECK(e.path_len >= 1 && e.path_len <= PROTO_MAX_PATH);
            CHECK(inside(e.path, e.path_len, body, end));
            CHECK(off <= m->u.hint.len);
            k++;
            CHECK(k <= m->u.hint.count);
        }
        CHECK(k == m->u.hint.count && off == m->u.hint.len);
        break;
    }
    case PROTO_OP_REPORT: {
        uint32_t k;

        CHECK(m->u.recs.len == n && (n == 0 || m->u.recs.p == body));
        k = rec_walk(m->u.recs.p, m->u.recs.len, 1, &bad, &all_u64);
        CHECK(!bad && all_u64 && k <= PROTO_MAX_REPORT);
        break;
    }
    case PROTO_OP_CKPT_PUT:
        /* Records (at least one), carried with the checkpoint's fd. */
        CHECK(n > 0 && m->u.recs.len == n && m->u.recs.p == body);
        (void)rec_walk(m->u.recs.p, m->u.recs.len, 1, &bad, &all_u64);
        CHECK(!bad);
        break;
    default:
        CHECK(0);
    }
}

/* Extents of a decoded READX or OPENX reply, into ext. */
static uint32_t get_extents(const proto_msg *m, proto_extent *ext)
{
    const proto_readx *rx = proto_msg_readx(m);

    CHECK(rx != NULL);
    for (uint32_t i = 0; i < rx->nextents; i++)
        proto_extent_at(m, i, &ext[i]);
    return rx->nextents;
}

/* Set the header flags an encoder does not take (a request's NOREPLY), as
 * libgranary does with proto_encode_hdr. */
static ssize_t with_flags(ssize_t r, uint8_t *buf, const proto_msg *m)
{
    if (r > 0 && (m->h.flags & PROTO_F_NOREPLY))
        proto_encode_hdr(buf, m->h.op, m->h.flags, m->h.req_id, 0,
                         (uint32_t)(r - PROTO_HDR_LEN));
    return r;
}

/*
 * Encode m again with its opcode's encoder into buf[cap].  Returns the
 * length, -EMSGSIZE (does not fit), or RE_SKIP (no encoder takes it: error
 * text with a NUL byte).  Replies whose body the caller sends from its own
 * buffers (READ data, READX and OPENX inline bytes) get proto_encode_hdr or
 * the encoder's fixed part and a copy of the bytes, as the daemon does.
 */
static ssize_t reencode_raw(const proto_msg *m, uint8_t *buf, size_t cap)
{
    uint32_t n = m->h.body_len;

    if (m->h.flags & PROTO_F_REPLY) {
        if (m->h.status < 0) {
            char text[PROTO_MAX_ERRMSG + 1];

            if (m->u.error.len && memchr(m->u.error.text, 0, m->u.error.len))
                return RE_SKIP;
            if (m->u.error.len)
                memcpy(text, m->u.error.text, m->u.error.len);
            text[m->u.error.len] = '\0';
            return proto_enc_error(buf, cap, m->h.op, m->h.req_id, m->h.status, text);
        }
        switch (m->h.op) {
        case PROTO_OP_HELLO:
            return proto_enc_hello(buf, cap, PROTO_F_REPLY, m->h.req_id, &m->u.hello);
        case PROTO_OP_OPEN:
            return proto_enc_attr(buf, cap, m->h.req_id, &m->u.attr);
        case PROTO_OP_STAT:
            return proto_enc_stat_reply(buf, cap, m->h.req_id, &m->u.stat.attr,
                                        m->u.stat.valid_ms);
        case PROTO_OP_CLOSE:
            return proto_enc_ok(buf, cap, m->h.op, m->h.req_id);
        case PROTO_OP_STATS:
        case PROTO_OP_ADMIN:
        case PROTO_OP_HINT:
        case PROTO_OP_REPORT:
        case PROTO_OP_CKPT_PUT: {
            ssize_t r = proto_enc_records(buf, cap, m->h.op, m->h.req_id, m->u.recs.p,
                                          m->u.recs.len);

            if (r > 0 && n == 0) {
                /* An empty records body is the bodiless success. */
                uint8_t ok[PROTO_HDR_LEN];

                CHECK(proto_enc_ok(ok, sizeof(ok), m->h.op, m->h.req_id) == PROTO_HDR_LEN);
                CHECK(r == PROTO_HDR_LEN && memcmp(ok, buf, PROTO_HDR_LEN) == 0);
            }
            return r;
        }
        case PROTO_OP_READ:
            if (n == 0)
                return proto_enc_ok(buf, cap, m->h.op, m->h.req_id);
            if (cap < PROTO_HDR_LEN + (size_t)n)
                return -EMSGSIZE;
            proto_encode_hdr(buf, m->h.op, PROTO_F_REPLY, m->h.req_id, 0, n);
            memcpy(buf + PROTO_HDR_LEN, m->u.data.p, n);
            return PROTO_HDR_LEN + (ssize_t)n;
        case PROTO_OP_READX:
        case PROTO_OP_OPENX: {
            static proto_extent ext[PROTO_MAX_EXTENTS];
            const proto_readx *rx = proto_msg_readx(m);
            uint32_t ne = get_extents(m, ext), il = rx->inline_len;
            size_t fixed = PROTO_HDR_LEN + PROTO_READX_PREFIX + (size_t)ne * PROTO_EXTENT_LEN;
            ssize_t r;

            /* The inline bytes follow in the caller's next iovec: the
             * encoder gets the room left once they are set aside. */
            if (cap < il)
                return -EMSGSIZE;
            if (m->h.op == PROTO_OP_READX) {
                r = proto_enc_readx_reply(buf, cap - il, m->h.req_id, ext, ne, il);
            } else {
                r = proto_enc_openx_reply(buf, cap - il, m->h.req_id, &m->u.openx_reply.attr,
                                          m->u.openx_reply.read_status, ext, ne, il);
                fixed += PROTO_OPENX_FIXED;
            }
            if (r < 0)
                return r;
            CHECK((size_t)r == fixed);
            if (il)
                memcpy(buf + r, rx->inline_data, il);
            return r + (ssize_t)il;
        }
        case PROTO_OP_READDIR: {
            static proto_dirent ents[PROTO_MAX_DIRENTS];
            size_t off = 0;
            uint32_t k = 0;

            while (k < PROTO_MAX_DIRENTS && proto_dirent_next(m, &off, &ents[k]) == 1)
                k++;
            return proto_enc_readdir_reply(buf, cap, m->h.req_id, m->u.dirents.next,
                                           m->u.dirents.valid_ms, m->u.dirents.flags, ents, k);
        }
        default:
            CHECK(0);
        }
    }
    switch (m->h.op) {
    case PROTO_OP_HELLO:
        return with_flags(proto_enc_hello(buf, cap, 0, m->h.req_id, &m->u.hello), buf, m);
    case PROTO_OP_OPEN:
        return with_flags(proto_enc_open(buf, cap, m->h.req_id, m->u.open.path, m->u.open.len),
                          buf, m);
    case PROTO_OP_STAT:
        return with_flags(proto_enc_stat(buf, cap, m->h.req_id, m->u.open.path, m->u.open.len),
                          buf, m);
    case PROTO_OP_OPENX:
        return with_flags(proto_enc_openx(buf, cap, m->h.req_id, m->u.openx.off, m->u.openx.len,
                                          m->u.openx.flags, m->u.openx.path,
                                          m->u.openx.path_len),
                          buf, m);
    case PROTO_OP_READDIR:
        return with_flags(proto_enc_readdir(buf, cap, m->h.req_id, m->u.readdir.cookie,
                                            m->u.readdir.max, m->u.readdir.flags,
                                            m->u.readdir.path, m->u.readdir.path_len),
                          buf, m);
    case PROTO_OP_CLOSE:
        return with_flags(proto_enc_close(buf, cap, m->h.req_id, m->u.handle), buf, m);
    case PROTO_OP_READ:
        return with_flags(proto_enc_read(buf, cap, m->h.req_id, &m->u.read), buf, m);
    case PROTO_OP_STATS:
        return with_flags(proto_enc_stats_req(buf, cap, m->h.req_id), buf, m);
    case PROTO_OP_READX:
        if (m->h.flags & PROTO_F_WHOLE)
            return with_flags(proto_enc_readx_flags(buf, cap, m->h.req_id, PROTO_F_WHOLE,
                                                    &m->u.read),
                              buf, m);
        return with_flags(proto_enc_readx(buf, cap, m->h.req_id, &m->u.read), buf, m);
    case PROTO_OP_RELEASE: {
        static uint32_t ids[PROTO_MAX_RELEASE];

        for (uint32_t i = 0; i < m->u.release.count; i++)
            ids[i] = proto_release_at(m, i);
        return with_flags(proto_enc_release(buf, cap, m->h.req_id, ids, m->u.release.count),
                          buf, m);
    }
    case PROTO_OP_ADMIN:
        return with_flags(proto_enc_admin(buf, cap, m->h.req_id, m->u.admin.cmd,
                                          m->u.admin.recs, m->u.admin.len),
                          buf, m);
    case PROTO_OP_HINT: {
        static proto_hint_ent ents[PROTO_MAX_HINTS];
        size_t off = 0;
        uint32_t k = 0;

        while (k < PROTO_MAX_HINTS && proto_hint_next(m, &off, &ents[k]) == 1)
            k++;
        return with_flags(proto_enc_hint(buf, cap, m->h.req_id, m->u.hint.flags, ents, k),
                          buf, m);
    }
    case PROTO_OP_REPORT:
        return with_flags(proto_enc_report(buf, cap, m->h.req_id, m->u.recs.p, m->u.recs.len),
                          buf, m);
    case PROTO_OP_CKPT_PUT:
        return with_flags(proto_enc_ckpt_put(buf, cap, m->h.req_id, m->u.recs.p, m->u.recs.len),
                          buf, m);
    default:
        CHECK(0);
    }
    return -EINVAL;
}

/* reencode_raw, with the STAGED flag set as the daemon sets it. */
static ssize_t reencode(const proto_msg *m, uint8_t *buf, size_t cap)
{
    ssize_t r = reencode_raw(m, buf, cap);

    if (r > 0 && (m->h.flags & PROTO_F_STAGED))
        proto_mark_staged(buf);
    return r;
}

/* proto_decode of a block of exactly n bytes copied from src is rc. */
static void check_prefix(const uint8_t *src, size_t n, int rc)
{
    uint8_t *copy = dup_exact(src, n);
    proto_msg m2;
    size_t used2 = (size_t)-1;

    CHECK(proto_decode(copy, n, &m2, &used2) == rc);
    CHECK(used2 == (size_t)-1);
    free(copy);
}

/* A decoded message msg[0..used): prefixes, fields, and the round trip. */
static void check_decoded(const proto_msg *m, const uint8_t *msg, size_t used)
{
    uint8_t *out;
    proto_msg m2;
    size_t used2 = 0;
    ssize_t r;

    check_fields(m, msg, used);

    /* Strict prefixes are "need more", read from blocks of their size. */
    check_prefix(msg, 0, PROTO_NEED_MORE);
    check_prefix(msg, PROTO_HDR_LEN - 1, PROTO_NEED_MORE);
    if (used > PROTO_HDR_LEN)
        check_prefix(msg, PROTO_HDR_LEN, PROTO_NEED_MORE);
    check_prefix(msg, used - 1, PROTO_NEED_MORE);

    /* Re-encode into exactly used bytes: the same bytes, decoding to the
     * same message. */
    out = malloc(used);
    CHECK(out != NULL);
    r = reencode(m, out, used);
    if (r != RE_SKIP) {
        if (r != (ssize_t)used || memcmp(out, msg, used) != 0) {
            fprintf(stderr, "round trip of op %u flags %u status %d body_len %u: "
                    "re-encoded %zd bytes, decoded %zu\n", m->h.op, m->h.flags, m->h.status,
                    m->h.body_len, r, used);
            CHECK(!"re-encoded message differs from the decoded one");
        }
        used2 = 0;
        CHECK(proto_decode(out, used, &m2, &used2) == 0 && used2 == used);
        CHECK(msg_equal(m, &m2));
    }
    free(out);

    /* One byte less room: refused, nothing written. */
    if (r != RE_SKIP) {
        out = malloc(used - 1);
        CHECK(out != NULL);
        memset(out, 0xA5, used - 1);
        r = reencode(m, out, used - 1);
        CHECK(r == -EMSGSIZE);
        for (size_t i = 0; i < used - 1; i++)
            CHECK(out[i] == 0xA5);
        free(out);
    }
}

/* One message from data[0..size): the header and whole-message decoders
 * agree, and what decodes passes check_decoded.  Returns the bytes it used,
 * 0 when it did not decode. */
static size_t check_message(const uint8_t *data, size_t size)
{
    proto_hdr h;
    proto_msg m;
    size_t used = (size_t)-1;
    int rh, rc;

    memset(&h, 0, sizeof(h));
    rh = proto_decode_hdr(data, size, &h);
    CHECK(is_decode_result(rh));
    CHECK((rh == PROTO_NEED_MORE) == (size < PROTO_HDR_LEN));
    if (rh == 0 || rh == -EMSGSIZE) {
        uint8_t hb[PROTO_HDR_LEN];

        /* Every field valid (only the size may be over): the header
         * encoder gives back the same bytes. */
        CHECK(h.magic == PROTO_MAGIC && h.version == PROTO_VERSION);
        CHECK(h.op >= 1 && h.op < PROTO_OP_MAX_);
        CHECK((h.flags & ~(PROTO_F_REPLY | PROTO_F_NOREPLY | PROTO_F_WHOLE | PROTO_F_STAGED)) == 0);
        CHECK(!(h.flags & PROTO_F_REPLY) || (h.flags & ~(PROTO_F_REPLY | PROTO_F_STAGED)) == 0);
        CHECK(!(h.flags & PROTO_F_STAGED) ||
              ((h.flags & PROTO_F_REPLY) && h.status == 0 &&
               (h.op == PROTO_OP_OPEN || h.op == PROTO_OP_OPENX)));
        CHECK(h.status <= 0 && h.status >= -4095 && h.reserved == 0);
        CHECK((h.flags & PROTO_F_REPLY) || h.status == 0);
        CHECK((rh == -EMSGSIZE) == (h.body_len > PROTO_MAX_BODY));
        CHECK(strcmp(proto_op_name(h.op), "?") != 0);
        proto_encode_hdr(hb, h.op, h.flags, h.req_id, h.status, h.body_len);
        CHECK(memcmp(hb, data, PROTO_HDR_LEN) == 0);
    }

    rc = proto_decode(data, size, &m, &used);
    CHECK(is_decode_result(rc));
    if (rh != 0) {
        /* The header decides alone; m->h is what proto_decode_hdr saw. */
        CHECK(rc == rh);
        if (size >= PROTO_HDR_LEN)
            CHECK(hdr_equal(&m.h, &h));
    } else {
        CHECK(hdr_equal(&m.h, &h));
        CHECK((rc == PROTO_NEED_MORE) == (size - PROTO_HDR_LEN < h.body_len));
        CHECK(rc != -EPROTONOSUPPORT);
        /* WHOLE means something to a READX request only. */
        if (rc != PROTO_NEED_MORE && (h.flags & PROTO_F_WHOLE) && h.op != PROTO_OP_READX)
            CHECK(rc == -EPROTO);
        /* RELEASE has no reply. */
        if (rc != PROTO_NEED_MORE && h.op == PROTO_OP_RELEASE && (h.flags & PROTO_F_REPLY) &&
            h.status == 0)
            CHECK(rc == -EPROTO);
    }
    if (rc != 0) {
        CHECK(used == (size_t)-1);
        return 0;
    }
    CHECK(used == PROTO_HDR_LEN + (size_t)h.body_len && used <= size);
    check_decoded(&m, data, used);
    return used;
}

/* ---- The encoders, driven by the input as a source of field values. ---- */

/* Field values read from the input; zeros once it runs out. */
typedef struct src {
    const uint8_t *p;
    size_t n, at;
} src;

static uint64_t take(src *s, unsigned bytes)
{
    uint64_t v = 0;

    for (unsigned i = 0; i < bytes; i++) {
        uint64_t b = s->at < s->n ? s->p[s->at++] : 0;
        v |= b << (8 * i);
    }
    return v;
}

/* n bytes into dst; 'x' once the input runs out (so that long runs of
 * names and paths stay well formed). */
static void take_bytes(src *s, uint8_t *dst, size_t n)
{
    size_t k = s->n - s->at < n ? s->n - s->at : n;

    if (k)
        memcpy(dst, s->p + s->at, k);
    s->at += k;
    memset(dst + k, 'x', n - k);
}

/* A pool of bytes that paths and names point into: an offset and a length
 * up to max_len + 1 (one over the limit) are taken for each. */
#define POOL_LEN (2 * PROTO_MAX_PATH + 2)
static uint8_t pool[POOL_LEN];

static const char *take_str(src *s, uint32_t max_len, uint32_t *len)
{
    uint32_t off = (uint32_t)(take(s, 2) % (PROTO_MAX_PATH + 1));

    *len = (uint32_t)(take(s, 2) % (max_len + 2));
    return (const char *)pool + off;
}

static void take_attr(src *s, proto_attr *a)
{
    a->handle = (uint32_t)take(s, 4);
    a->chunk_size = (uint32_t)take(s, 4);
    a->size = take(s, 8);
    a->ino = take(s, 8);
    a->dev = take(s, 8);
    a->mtime_sec = (int64_t)take(s, 8);
    a->mtime_nsec = (uint32_t)take(s, 4);
    a->mode = (uint32_t)take(s, 4);
    a->blksize = (uint32_t)take(s, 4);
    a->uid = (uint32_t)take(s, 4);
    a->gid = (uint32_t)take(s, 4);
    a->nlink = (uint32_t)take(s, 4);
}

/* A u32 that is often one of the values limits are made of. */
static uint32_t take_u32(src *s, uint32_t limit)
{
    switch (take(s, 1) % 6) {
    case 0:
        return 0;
    case 1:
        return limit;
    case 2:
        return limit + 1;
    case 3:
        return (uint32_t)take(s, 1);
    default:
        return (uint32_t)take(s, 4);
    }
}

/* A status: 0, -EAGAIN, an errno, or anything. */
static int32_t take_status(src *s)
{
    switch (take(s, 1) % 4) {
    case 0:
        return 0;
    case 1:
        return -EAGAIN;
    case 2:
        return -(int32_t)(take(s, 2) % 4097);
    default:
        return (int32_t)take(s, 4);
    }
}

/* An encoder's output buf[0..r): r is expect_len when it was expected to
 * take the message (expect_len > 0), else -EMSGSIZE.  A taken message is
 * decoded from a block of exactly its size into *m (the block, to free
 * once m is no longer used, is returned) and passes check_decoded. */
static uint8_t *check_encoded(const uint8_t *buf, ssize_t r, size_t expect_len, proto_msg *m)
{
    uint8_t *copy;
    size_t used = 0;

    if (!expect_len) {
        CHECK(r == -EMSGSIZE);
        return NULL;
    }
    CHECK(r == (ssize_t)expect_len);
    copy = dup_exact(buf, (size_t)r);
    CHECK(proto_decode(copy, (size_t)r, m, &used) == 0 && used == (size_t)r);
    CHECK(m->h.magic == PROTO_MAGIC && m->h.version == PROTO_VERSION && m->h.reserved == 0);
    CHECK(m->h.body_len == (size_t)r - PROTO_HDR_LEN);
    check_decoded(m, copy, used);
    return copy;
}

static int path_ok(uint32_t len)
{
    return len >= 1 && len <= PROTO_MAX_PATH;
}

enum {
    E_HELLO,
    E_PATH,         /* OPEN, STAT */
    E_OPENX,
    E_READDIR,
    E_READ,         /* READ, READX, READX with flags */
    E_SMALL,        /* CLOSE, STATS request, bodiless replies */
    E_ATTR,         /* OPEN and STAT replies */
    E_READX_REPLY,  /* READX and OPENX replies */
    E_DIRENTS,      /* READDIR reply */
    E_HINT,
    E_RELEASE,
    E_RECORDS,      /* records; ADMIN, REPORT requests; records replies */
    E_COUNT_
};

/* Build a records body from s into body[cap] with proto_rec_u64 and
 * proto_rec_str, checking each append's result.  Returns its length;
 * *count records, *all_u64 whether all are numbers. */
static size_t build_records(src *s, uint8_t *body, size_t cap, uint32_t *count, int *all_u64)
{
    uint32_t k = (uint32_t)(take(s, 1) % 80);
    size_t off = 0;

    *count = 0;
    *all_u64 = 1;
    /* A value longer than any body is refused before it is read. */
    CHECK(proto_rec_str(body, cap, &off, "v", pool, PROTO_MAX_BODY + 1) == -EMSGSIZE && off == 0);
    for (uint32_t i = 0; i < k; i++) {
        char name[258];
        uint32_t nlen, slen = 0;
        const char *str = NULL;
        const char *np = take_str(s, 256, &nlen);
        int is_str = (int)(take(s, 1) & 1);
        uint64_t v = 0;
        size_t before = off, namelen, need;
        int rc;

        memcpy(name, np, nlen);
        name[nlen] = '\0';
        namelen = strlen(name);
        if (is_str)
            str = take_str(s, PROTO_MAX_PATH, &slen);
        else
            v = take(s, 8);
        need = 2 + namelen + (is_str ? 4 + (size_t)slen : 8);
        rc = is_str ? proto_rec_str(body, cap, &off, name, str, slen)
                    : proto_rec_u64(body, cap, &off, name, v);
        if (namelen == 0 || namelen > 255) {
            CHECK(rc == -EINVAL && off == before);
        } else if (cap - before < need) {
            CHECK(rc == -EMSGSIZE && off == before);
        } else {
            proto_rec r;
            size_t at = before;

            CHECK(rc == 0 && off == before + need);
            CHECK(proto_rec_next(body, off, &at, &r) == 1 && at == off);
            CHECK(proto_rec_is(&r, name));
            CHECK(r.kind == (is_str ? PROTO_REC_STR : PROTO_REC_U64));
            if (is_str)
                CHECK(r.len == slen && bytes_equal(r.str, str, slen));
            else
                CHECK(r.u64 == v);
            (*count)++;
            if (is_str)
                *all_u64 = 0;
        }
    }
    return off;
}

static void check_encoders(const uint8_t *data, size_t size)
{
    static uint8_t buf[PROTO_MAX_MSG];
    src s = { data, size ? size - 1 : 0, 0 };
    uint32_t req_id;
    uint8_t *copy = NULL;
    proto_msg m;
    ssize_t r;

    if (size == 0)
        return;
    req_id = (uint32_t)take(&s, 4);
    take_bytes(&s, pool, 64);   /* the rest of the pool is 'x' */
    memset(pool + 64, 'x', POOL_LEN - 64);
    switch (data[size - 1] % E_COUNT_) {
    case E_HELLO: {
        proto_hello h;
        uint16_t flags = (uint16_t)take(&s, 2);

        h.version = (uint32_t)take(&s, 4);
        h.max_msg = (uint32_t)take(&s, 4);
        h.max_data = (uint32_t)take(&s, 4);
        h.chunk_size = (uint32_t)take(&s, 4);
        h.lease_cache = take(&s, 8);
        h.lease_ttl_ms = (uint32_t)take(&s, 4);
        h.features = (uint32_t)take(&s, 4);       /* any bits: unknown ones are ignored */
        r = proto_enc_hello(buf, sizeof(buf), flags, req_id, &h);
        copy = check_encoded(buf, r, PROTO_HDR_LEN + PROTO_HELLO_LEN, &m);
        CHECK(m.h.op == PROTO_OP_HELLO && m.h.flags == (flags & PROTO_F_REPLY));
        CHECK(m.h.req_id == req_id && hello_equal(&m.u.hello, &h));
        break;
    }
    case E_PATH: {
        int stat = (int)(take(&s, 1) & 1);
        uint32_t len;
        const char *path = take_str(&s, PROTO_MAX_PATH, &len);

        r = stat ? proto_enc_stat(buf, sizeof(buf), req_id, path, len)
                 : proto_enc_open(buf, sizeof(buf), req_id, path, len);
        copy = check_encoded(buf, r, path_ok(len) ? PROTO_HDR_LEN + len : 0, &m);
        if (copy) {
            CHECK(m.h.op == (stat ? PROTO_OP_STAT : PROTO_OP_OPEN) && m.h.req_id == req_id);
            CHECK(m.u.open.len == len && bytes_equal(m.u.open.path, path, len));
        }
        break;
    }
    case E_OPENX: {
        uint64_t off = take(&s, 8);
        uint32_t len = take_u32(&s, PROTO_MAX_READX), flags = take_u32(&s, 3), plen;
        const char *path = take_str(&s, PROTO_MAX_PATH, &plen);
        int ok = path_ok(plen) && len <= PROTO_MAX_READX &&
                 !(flags & ~(PROTO_OPENX_CLOSE | PROTO_OPENX_IFCHEAP));

        r = proto_enc_openx(buf, sizeof(buf), req_id, off, len, flags, path, plen);
        copy = check_encoded(buf, r, ok ? PROTO_HDR_LEN + PROTO_OPENX_PREFIX + plen : 0, &m);
        if (copy) {
            CHECK(m.h.op == PROTO_OP_OPENX && m.h.flags == 0 && m.h.req_id == req_id);
            CHECK(m.u.openx.off == off && m.u.openx.len == len && m.u.openx.flags == flags);
            CHECK(m.u.openx.path_len == plen && bytes_equal(m.u.openx.path, path, plen));
        }
        break;
    }
    case E_READDIR: {
        uint64_t cookie = take(&s, 8);
        uint32_t max = take_u32(&s, PROTO_MAX_DIRENTS), flags = take_u32(&s, 1), plen;
        const char *path = take_str(&s, PROTO_MAX_PATH, &plen);
        int ok = path_ok(plen) && max >= 1 && max <= PROTO_MAX_DIRENTS &&
                 !(flags & ~PROTO_READDIR_PLUS);

        r = proto_enc_readdir(buf, sizeof(buf), req_id, cookie, max, flags, path, plen);
        copy = check_encoded(buf, r, ok ? PROTO_HDR_LEN + PROTO_READDIR_PREFIX + plen : 0, &m);
        if (copy) {
            CHECK(m.h.op == PROTO_OP_READDIR && m.h.req_id == req_id);
            CHECK(m.u.readdir.cookie == cookie && m.u.readdir.max == max);
            CHECK(m.u.readdir.flags == flags && m.u.readdir.path_len == plen);
            CHECK(bytes_equal(m.u.readdir.path, path, plen));
        }
        break;
    }
    case E_READ: {
        unsigned which = (unsigned)(take(&s, 1) % 3);
        uint16_t flags = (uint16_t)take_u32(&s, PROTO_F_WHOLE);
        uint32_t max = which == 0 ? PROTO_MAX_DATA : PROTO_MAX_READX;
        proto_read rd;

        rd.handle = (uint32_t)take(&s, 4);
        rd.len = take_u32(&s, max);
        rd.off = take(&s, 8);
        if (which == 0)
            r = proto_enc_read(buf, sizeof(buf), req_id, &rd);
        else if (which == 1)
            r = proto_enc_readx(buf, sizeof(buf), req_id, &rd);
        else
            r = proto_enc_readx_flags(buf, sizeof(buf), req_id, flags, &rd);
        if (which != 2)
            flags = 0;
        if (flags & ~PROTO_F_WHOLE) {
            CHECK(r == -EINVAL);
            break;
        }
        copy = check_encoded(buf, r, rd.len <= max ? PROTO_HDR_LEN + PROTO_READ_LEN : 0, &m);
        if (copy) {
            CHECK(m.h.op == (which == 0 ? PROTO_OP_READ : PROTO_OP_READX));
            CHECK(m.h.flags == flags && m.h.req_id == req_id);
            CHECK(m.u.read.handle == rd.handle && m.u.read.len == rd.len &&
                  m.u.read.off == rd.off);
        }
        break;
    }
    case E_SMALL: {
        unsigned which = (unsigned)(take(&s, 1) % 3);
        uint8_t op = (uint8_t)(1 + take(&s, 1) % (PROTO_OP_MAX_ - 1));
        uint32_t handle = (uint32_t)take(&s, 4);

        if (which == 0) {
            r = proto_enc_close(buf, sizeof(buf), req_id, handle);
            copy = check_encoded(buf, r, PROTO_HDR_LEN + 4, &m);
            CHECK(m.h.op == PROTO_OP_CLOSE && m.u.handle == handle);
        } else if (which == 1) {
            r = proto_enc_stats_req(buf, sizeof(buf), req_id);
            copy = check_encoded(buf, r, PROTO_HDR_LEN, &m);
            CHECK(m.h.op == PROTO_OP_STATS && !(m.h.flags & PROTO_F_REPLY));
        } else {
            /* A bodiless success decodes for the replies that may be
             * empty, and for no other. */
            int empty_ok = op == PROTO_OP_CLOSE || op == PROTO_OP_READ || op == PROTO_OP_STATS ||
                           op == PROTO_OP_ADMIN || op == PROTO_OP_HINT || op == PROTO_OP_REPORT ||
                           op == PROTO_OP_CKPT_PUT;   /* its reply is records, possibly none */
            size_t used = 0;
            int rc;

            r = proto_enc_ok(buf, sizeof(buf), op, req_id);
            CHECK(r == PROTO_HDR_LEN);
            rc = proto_decode(buf, (size_t)r, &m, &used);
            CHECK(rc == (empty_ok ? 0 : -EPROTO));
            if (rc == 0) {
                copy = check_encoded(buf, r, PROTO_HDR_LEN, &m);
                CHECK(m.h.op == op && m.h.flags == PROTO_F_REPLY && m.h.status == 0);
            }
        }
        if (copy)
            CHECK(m.h.req_id == req_id);
        break;
    }
    case E_ATTR: {
        proto_attr a;
        int stat = (int)(take(&s, 1) & 1);
        uint32_t valid_ms = (uint32_t)take(&s, 4);

        take_attr(&s, &a);
        if (stat) {
            r = proto_enc_stat_reply(buf, sizeof(buf), req_id, &a, valid_ms);
            copy = check_encoded(buf, r, PROTO_HDR_LEN + PROTO_STAT_LEN, &m);
            CHECK(m.h.op == PROTO_OP_STAT && attr_equal(&m.u.stat.attr, &a));
            CHECK(m.u.stat.valid_ms == valid_ms);
        } else {
            r = proto_enc_attr(buf, sizeof(buf), req_id, &a);
            copy = check_encoded(buf, r, PROTO_HDR_LEN + PROTO_ATTR_LEN, &m);
            CHECK(m.h.op == PROTO_OP_OPEN && attr_equal(&m.u.attr, &a));
        }
        CHECK(m.h.req_id == req_id && m.h.flags == PROTO_F_REPLY);
        break;
    }
    case E_READX_REPLY: {
        static proto_extent ext[PROTO_MAX_EXTENTS + 1];
        int openx = (int)(take(&s, 1) & 1);
        uint32_t ne = (uint32_t)(take(&s, 1) % (PROTO_MAX_EXTENTS + 2));
        uint32_t il = take_u32(&s, PROTO_MAX_DATA);
        int32_t rs = openx ? take_status(&s) : 0;
        size_t fixed = PROTO_HDR_LEN + (openx ? PROTO_OPENX_FIXED : 0) + PROTO_READX_PREFIX +
                       (size_t)ne * PROTO_EXTENT_LEN;
        int ok = ne <= PROTO_MAX_EXTENTS && il <= PROTO_MAX_DATA &&
                 (!openx || (rs <= 0 && rs >= -4095 && !(rs < 0 && (ne || il))));
        const proto_readx *rx;
        proto_attr a;

        take_attr(&s, &a);
        for (uint32_t i = 0; i < ne; i++) {
            ext[i].seg = (uint32_t)take(&s, 4);
            ext[i].lease = (uint32_t)take(&s, 4);
            ext[i].off = take(&s, 8);
            ext[i].len = (uint32_t)take(&s, 4);
            ext[i].flags = (uint32_t)take(&s, 1) | (uint32_t)take(&s, 1) << 24;
        }
        /* The fixed part into a block of exactly its size; the inline
         * bytes (from the pool, 'x' past it) follow in a copy. */
        if (!ok) {
            r = openx ? proto_enc_openx_reply(buf, sizeof(buf), req_id, &a, rs, ext, ne, il)
                      : proto_enc_readx_reply(buf, sizeof(buf), req_id, ext, ne, il);
            CHECK(r == -EMSGSIZE);
            break;
        }
        {
            uint8_t *fx = malloc(fixed);

            CHECK(fx != NULL);
            r = openx ? proto_enc_openx_reply(fx, fixed, req_id, &a, rs, ext, ne, il)
                      : proto_enc_readx_reply(fx, fixed, req_id, ext, ne, il);
            CHECK(r == (ssize_t)fixed);
            memcpy(buf, fx, fixed);
            free(fx);
        }
        for (uint32_t i = 0; i < il; i++)
            buf[fixed + i] = pool[i % POOL_LEN];
        copy = check_encoded(buf, (ssize_t)(fixed + il), fixed + il, &m);
        CHECK(m.h.op == (openx ? PROTO_OP_OPENX : PROTO_OP_READX) && m.h.req_id == req_id);
        rx = proto_msg_readx(&m);
        CHECK(rx == (openx ? &m.u.openx_reply.rx : &m.u.readx));
        CHECK(rx->nextents == ne && rx->inline_len == il);
        if (openx)
            CHECK(attr_equal(&m.u.openx_reply.attr, &a) && m.u.openx_reply.read_status == rs);
        for (uint32_t i = 0; i < ne; i++) {
            proto_extent e;

            proto_extent_at(&m, i, &e);
            CHECK(e.seg == ext[i].seg && e.lease == ext[i].lease && e.off == ext[i].off &&
                  e.len == ext[i].len && e.flags == (ext[i].flags & (PROTO_EXTENT_FD | PROTO_EXTENT_NOKEEP)));
        }
        for (uint32_t i = 0; i < il; i++)
            CHECK(rx->inline_data[i] == pool[i % POOL_LEN]);
        break;
    }
    case E_DIRENTS: {
        static proto_dirent ents[PROTO_MAX_DIRENTS + 1];
        uint64_t next = take(&s, 8);
        uint32_t valid_ms = (uint32_t)take(&s, 4), flags = take_u32(&s, 1);
        uint32_t n = (uint32_t)(take(&s, 2) % (PROTO_MAX_DIRENTS + 2));
        int plus = (flags & PROTO_READDIR_PLUS) != 0;
        int ok = n <= PROTO_MAX_DIRENTS && !(flags & ~PROTO_READDIR_PLUS);
        size_t body = PROTO_READDIR_REPLY, off = 0;
        proto_dirent d;

        for (uint32_t i = 0; i < n; i++) {
            unsigned t = (unsigned)(take(&s, 1) % 3);

            memset(&ents[i], 0, sizeof(ents[i]));
            ents[i].type = t == 0 ? PROTO_DIRENT_DIR : t == 1 ? PROTO_DIRENT_REG
                                                              : (uint8_t)take(&s, 1);
            ents[i].name = take_str(&s, 256, &ents[i].name_len);
            if (plus)
                take_attr(&s, &ents[i].attr);
            if (ents[i].name_len == 0 || ents[i].name_len > 255 ||
                !PROTO_DIRENT_VALID(ents[i].type) ||
                memchr(ents[i].name, '/', ents[i].name_len) ||
                memchr(ents[i].name, 0, ents[i].name_len))
                ok = 0;
            body += PROTO_DIRENT_SIZE(ents[i].name_len, plus);
        }
        if (body > PROTO_MAX_BODY)
            ok = 0;
        r = proto_enc_readdir_reply(buf, sizeof(buf), req_id, next, valid_ms, flags, ents, n);
        copy = check_encoded(buf, r, ok ? PROTO_HDR_LEN + body : 0, &m);
        if (!copy)
            break;
        CHECK(m.h.op == PROTO_OP_READDIR && m.h.req_id == req_id);
        CHECK(m.u.dirents.next == next && m.u.dirents.valid_ms == valid_ms);
        CHECK(m.u.dirents.flags == flags && m.u.dirents.count == n);
        for (uint32_t i = 0; i < n; i++) {
            CHECK(proto_dirent_next(&m, &off, &d) == 1);
            CHECK(d.type == ents[i].type && d.name_len == ents[i].name_len);
            CHECK(bytes_equal(d.name, ents[i].name, d.name_len));
            CHECK(d.has_attr == plus && (!plus || attr_equal(&d.attr, &ents[i].attr)));
        }
        CHECK(proto_dirent_next(&m, &off, &d) == 0);
        break;
    }
    case E_HINT: {
        static proto_hint_ent ents[PROTO_MAX_HINTS + 1];
        uint32_t flags = take_u32(&s, PROTO_HINT_CLEAR);
        uint32_t n = (uint32_t)(take(&s, 2) % (PROTO_MAX_HINTS + 2));
        int ok = n <= PROTO_MAX_HINTS && !(flags & ~PROTO_HINT_CLEAR);
        size_t body = PROTO_HINT_PREFIX, off = 0;
        proto_hint_ent e;

        for (uint32_t i = 0; i < n; i++) {
            ents[i].off = take(&s, 8);
            ents[i].len = take(&s, 8);
            ents[i].path = take_str(&s, PROTO_MAX_PATH, &ents[i].path_len);
            if (!path_ok(ents[i].path_len))
                ok = 0;
            body += PROTO_HINT_ENT_SIZE(ents[i].path_len);
        }
        if (body > PROTO_MAX_BODY)
            ok = 0;
        r = proto_enc_hint(buf, sizeof(buf), req_id, flags, ents, n);
        copy = check_encoded(buf, r, ok ? PROTO_HDR_LEN + body : 0, &m);
        if (!copy)
            break;
        CHECK(m.h.op == PROTO_OP_HINT && m.h.req_id == req_id);
        CHECK(m.u.hint.flags == flags && m.u.hint.count == n);
        for (uint32_t i = 0; i < n; i++) {
            CHECK(proto_hint_next(&m, &off, &e) == 1);
            CHECK(e.off == ents[i].off && e.len == ents[i].len);
            CHECK(e.path_len == ents[i].path_len && bytes_equal(e.path, ents[i].path, e.path_len));
        }
        CHECK(proto_hint_next(&m, &off, &e) == 0);
        break;
    }
    case E_RELEASE: {
        static uint32_t ids[PROTO_MAX_RELEASE + 1];
        uint32_t n = (uint32_t)(take(&s, 2) % (PROTO_MAX_RELEASE + 2));
        int ok = n >= 1 && n <= PROTO_MAX_RELEASE;

        for (uint32_t i = 0; i < n; i++)
            ids[i] = (uint32_t)take(&s, 4);
        r = proto_enc_release(buf, sizeof(buf), req_id, ids, n);
        copy = check_encoded(buf, r, ok ? PROTO_HDR_LEN + (size_t)n * 4 : 0, &m);
        if (!copy)
            break;
        CHECK(m.h.op == PROTO_OP_RELEASE && m.u.release.count == n);
        for (uint32_t i = 0; i < n; i++)
            CHECK(proto_release_at(&m, i) == ids[i]);
        break;
    }
    case E_RECORDS: {
        static uint8_t body[PROTO_MAX_BODY];
        unsigned which = (unsigned)(take(&s, 1) % 3);
        uint8_t op = (uint8_t)take(&s, 1), cmd = (uint8_t)take(&s, 1);
        size_t cap = take(&s, 1) & 1 ? (size_t)take(&s, 2) : sizeof(body), len;
        uint32_t count;
        int all_u64, ok;

        if (cap > sizeof(body))
            cap = sizeof(body);
        len = build_records(&s, body, cap, &count, &all_u64);
        if (which == 0) {
            /* A reply of records: STATS, ADMIN, HINT, REPORT and CKPT_PUT only. */
            op = (uint8_t)(op % (PROTO_OP_MAX_ + 1));
            ok = op == PROTO_OP_STATS || op == PROTO_OP_ADMIN || op == PROTO_OP_HINT ||
                 op == PROTO_OP_REPORT || op == PROTO_OP_CKPT_PUT;
            r = proto_enc_records(buf, sizeof(buf), op, req_id, body, len);
            copy = check_encoded(buf, r, ok ? PROTO_HDR_LEN + len : 0, &m);
            if (copy)
                CHECK(m.h.op == op && m.h.flags == PROTO_F_REPLY && m.u.recs.len == len);
        } else if (which == 1) {
            cmd = (uint8_t)(cmd % (PROTO_ADMIN_MAX_ + 1));
            ok = cmd >= 1 && cmd < PROTO_ADMIN_MAX_ && len + 1 <= PROTO_MAX_BODY;
            r = proto_enc_admin(buf, sizeof(buf), req_id, cmd, body, len);
            copy = check_encoded(buf, r, ok ? PROTO_HDR_LEN + 1 + len : 0, &m);
            if (copy)
                CHECK(m.h.op == PROTO_OP_ADMIN && m.u.admin.cmd == cmd && m.u.admin.len == len);
        } else {
            ok = all_u64 && count <= PROTO_MAX_REPORT;
            r = proto_enc_report(buf, sizeof(buf), req_id, body, len);
            copy = check_encoded(buf, r, ok ? PROTO_HDR_LEN + len : 0, &m);
            if (copy)
                CHECK(m.h.op == PROTO_OP_REPORT && m.u.recs.len == len);
        }
        if (copy) {
            CHECK(m.h.req_id == req_id);
            CHECK(bytes_equal(copy + PROTO_HDR_LEN + (which == 1), body, len));
        }
        break;
    }
    default:
        CHECK(0);
    }
    free(copy);
}

/* Structurally valid UTF-8: each lead byte followed by its continuation
 * bytes (overlong forms and surrogates are not the cut's concern). */
static int utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        uint8_t c = s[i];
        size_t k;

        if (c < 0x80)
            k = 0;
        else if ((c & 0xE0) == 0xC0)
            k = 1;
        else if ((c & 0xF0) == 0xE0)
            k = 2;
        else if ((c & 0xF8) == 0xF0)
            k = 3;
        else
            return 0;
        if (n - i - 1 < k)
            return 0;
        for (size_t j = 1; j <= k; j++)
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
        i += 1 + k;
    }
    return 1;
}

/* proto_enc_error on the input as text: status from the first 4 bytes
 * (0..-4096, both ends invalid), op 1..PROTO_OP_MAX_-1 from the fifth. */
static void check_error_encoder(const uint8_t *data, size_t size)
{
    uint8_t buf[PROTO_HDR_LEN + PROTO_MAX_ERRMSG];
    uint32_t s;
    int32_t status;
    uint8_t op;
    char *text;
    size_t tlen;
    ssize_t r;
    proto_msg m;
    size_t used = 0;

    if (size < 5)
        return;
    s = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
        (uint32_t)data[3] << 24;
    status = -(int32_t)(s % 4097);
    op = (uint8_t)(1 + data[4] % (PROTO_OP_MAX_ - 1));
    text = malloc(size - 5 + 1);
    CHECK(text != NULL);
    memcpy(text, data + 5, size - 5);
    text[size - 5] = '\0';
    tlen = strlen(text);

    r = proto_enc_error(buf, sizeof(buf), op, 42, status, text);
    if (status == 0 || status < -4095) {
        CHECK(r == -EINVAL);
        free(text);
        return;
    }
    CHECK(r >= PROTO_HDR_LEN && r <= (ssize_t)sizeof(buf));
    CHECK(proto_decode(buf, (size_t)r, &m, &used) == 0 && used == (size_t)r);
    CHECK(m.h.op == op && m.h.req_id == 42 && m.h.status == status);
    CHECK(m.h.flags == PROTO_F_REPLY);
    CHECK(m.u.error.len <= PROTO_MAX_ERRMSG && m.u.error.len <= tlen);
    CHECK(bytes_equal(m.u.error.text, text, m.u.error.len));
    if (tlen <= PROTO_MAX_ERRMSG)
        CHECK(m.u.error.len == tlen);
    else
        CHECK(m.u.error.len >= PROTO_MAX_ERRMSG - 3);
    if (utf8_ok((const uint8_t *)text, tlen))
        CHECK(utf8_ok((const uint8_t *)m.u.error.text, m.u.error.len));
    free(text);
}


/* The input as a checkpoint set container (proto/ckset.h): a header that
 * decodes re-encodes to the same bytes, and every prefix of it is "need
 * more" (never a different answer). */
static void fuzz_set(const uint8_t *data, size_t size)
{
    static proto_set_file f[PROTO_SET_MAX_FILES];
    static char names[PROTO_SET_MAX_FILES][PROTO_SET_MAX_NAME + 1];
    static const char *np[PROTO_SET_MAX_FILES];
    static uint64_t sizes[PROTO_SET_MAX_FILES];
    uint8_t *again;
    uint32_t n = 0;
    long h = proto_set_dec_hdr(data, size, size, &n, f, PROTO_SET_MAX_FILES), h2;

    if (h <= PROTO_NEED_MORE) {
        CHECK(h == -EINVAL || h == PROTO_NEED_MORE);
        return;
    }
    CHECK(n >= 1 && n <= PROTO_SET_MAX_FILES && (size_t)h <= size);
    for (uint32_t i = 0; i < n; i++) {
        memcpy(names[i], f[i].name, f[i].name_len);
        names[i][f[i].name_len] = '\0';
        np[i] = names[i];
        sizes[i] = f[i].size;
        CHECK(f[i].off >= (uint64_t)h && f[i].off + f[i].size <= size);
    }
    again = malloc((size_t)h);
    CHECK(again != NULL);
    h2 = proto_set_enc_hdr(again, (size_t)h, n, np, sizes);
    CHECK(h2 == h && memcmp(again, data, (size_t)h) == 0);
    free(again);
    for (size_t cut = 0; cut < (size_t)h; cut += 1 + cut / 8)
        CHECK(proto_set_dec_hdr(data, cut, size, &n, NULL, 0) == PROTO_NEED_MORE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t at = 0;
    int bad, all_u64;

    for (unsigned op = 0; op <= PROTO_OP_MAX_; op++)
        CHECK((strcmp(proto_op_name(op), "?") != 0) == (op >= 1 && op < PROTO_OP_MAX_));
    if (size > 5)
        CHECK(proto_op_name(data[5]) != NULL);
    fuzz_set(data, size);

    /* Message after message, as long as they decode (pipelined requests
     * in one buffer); the last one may be cut short. */
    for (unsigned k = 0; k < MAX_MSGS; k++) {
        size_t used = check_message(data + at, size - at);

        if (used == 0)
            break;
        at += used;
    }

    (void)rec_walk(data, size, 0, &bad, &all_u64);
    check_encoders(data, size);
    check_error_encoder(data, size);
    return 0;
}
