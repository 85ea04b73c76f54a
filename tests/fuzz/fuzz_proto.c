/*
 * fuzz_proto.c - libFuzzer target for proto/proto.c, the wire codec that
 * every byte a client (or a daemon, for the client library) sends reaches
 * first.  Built and run by `make fuzz` and `make fuzz-regress`.
 *
 * One input is one packet.  The harness checks, besides "no crash, no UB,
 * no read outside the input" (libFuzzer hands the input over in a heap block
 * of exactly its size, so ASan sees any over-read):
 *   - proto_decode_hdr and proto_decode agree, and a header they accept (or
 *     refuse only for its size) re-encodes to the same 24 bytes;
 *   - a decoded message's pointers and lengths lie inside its body, and
 *     every strict prefix of it (tried: the one a byte short) is
 *     PROTO_NEED_MORE, read from a block of exactly that size;
 *   - re-encoding the decoded message with the opcode's encoder gives the
 *     same bytes, into a block of exactly that size, and one byte less of
 *     room is refused with -EMSGSIZE without writing anything; the re-encoded
 *     bytes decode to the same message;
 *   - STATS records, READX extents and RELEASE ids are walked with their
 *     accessors and stay inside the body;
 *   - proto_enc_error on arbitrary text (the input minus 4 bytes of status)
 *     produces a decodable reply whose text is a prefix of the given one,
 *     cut before a straddling UTF-8 sequence.
 * A failed check prints the line and aborts, which libFuzzer reports as a
 * crash with the input saved.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            return memcmp(&a->u.hello, &b->u.hello, sizeof(a->u.hello)) == 0;
        case PROTO_OP_OPEN:
            return memcmp(&a->u.attr, &b->u.attr, sizeof(a->u.attr)) == 0;
        case PROTO_OP_CLOSE:
            return 1;
        case PROTO_OP_READX:
            return a->u.readx.nextents == b->u.readx.nextents &&
                   a->u.readx.inline_len == b->u.readx.inline_len &&
                   bytes_equal(a->u.readx.extents, b->u.readx.extents,
                               (size_t)a->u.readx.nextents * PROTO_EXTENT_LEN) &&
                   bytes_equal(a->u.readx.inline_data, b->u.readx.inline_data,
                               a->u.readx.inline_len);
        case PROTO_OP_READ:
        case PROTO_OP_STATS:
        case PROTO_OP_ADMIN:
            return a->u.data.len == b->u.data.len &&
                   bytes_equal(a->u.data.p, b->u.data.p, a->u.data.len);
        case PROTO_OP_HINT:
            return 1;
        default:
            return 0;
        }
    }
    switch (a->h.op) {
    case PROTO_OP_HELLO:
        return memcmp(&a->u.hello, &b->u.hello, sizeof(a->u.hello)) == 0;
    case PROTO_OP_OPEN:
        return a->u.open.len == b->u.open.len &&
               bytes_equal(a->u.open.path, b->u.open.path, a->u.open.len);
    case PROTO_OP_CLOSE:
        return a->u.handle == b->u.handle;
    case PROTO_OP_READ:
    case PROTO_OP_READX:
        return memcmp(&a->u.read, &b->u.read, sizeof(a->u.read)) == 0;
    case PROTO_OP_STATS:
        return 1;
    case PROTO_OP_RELEASE:
        return a->u.release.count == b->u.release.count &&
               bytes_equal(a->u.release.ids, b->u.release.ids, (size_t)a->u.release.count * 4);
    case PROTO_OP_ADMIN:
        return a->u.admin.cmd == b->u.admin.cmd && a->u.admin.len == b->u.admin.len &&
               bytes_equal(a->u.admin.arg, b->u.admin.arg, a->u.admin.len);
    case PROTO_OP_HINT:
        return a->u.hint.flags == b->u.hint.flags && a->u.hint.count == b->u.hint.count &&
               a->u.hint.len == b->u.hint.len &&
               bytes_equal(a->u.hint.ents, b->u.hint.ents, a->u.hint.len);
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

/* Walk a STATS body with proto_stats_next.  Returns 1 if every record is
 * well formed and, when body_out is given, re-encodes them with
 * proto_stats_put into body_out[cap] (0 if a name holds a NUL, which
 * proto_stats_put cannot take). */
static int stats_walk(const uint8_t *body, size_t len, uint8_t *body_out, size_t cap,
                      size_t *out_len)
{
    size_t off = 0, out = 0;
    int encodable = 1;

    for (;;) {
        const char *name = NULL;
        size_t name_len = 0, before = off;
        uint64_t value = 0;
        int rc = proto_stats_next(body, len, &off, &name, &name_len, &value);

        CHECK(rc == 1 || rc == 0 || rc == -EPROTO);
        if (rc == 0) {
            CHECK(off >= len);
            break;
        }
        if (rc < 0) {
            CHECK(off == before);
            return 0;
        }
        CHECK(off > before && off <= len);
        CHECK(name_len >= 1 && name_len <= 255);
        CHECK(inside(name, name_len, body, body + len));
        CHECK(off == before + 1 + name_len + 8);
        if (memchr(name, 0, name_len))
            encodable = 0;
        if (body_out && encodable) {
            char nm[256];

            memcpy(nm, name, name_len);
            nm[name_len] = '\0';
            CHECK(proto_stats_put(body_out, cap, &out, nm, value) == 0);
        }
    }
    if (out_len)
        *out_len = out;
    return encodable;
}

/* Check the decoded fields of m (from a block [msg, msg + used)) against
 * their documented limits and the body's bounds. */
static void check_fields(const proto_msg *m, const uint8_t *msg, size_t used)
{
    const uint8_t *body = msg + PROTO_HDR_LEN, *end = msg + used;
    uint32_t n = m->h.body_len;

    CHECK(used == PROTO_HDR_LEN + (size_t)n);
    if (m->h.flags & PROTO_F_REPLY) {
        if (m->h.status < 0) {
            CHECK(m->u.error.len == n && n <= PROTO_MAX_ERRMSG);
            CHECK(n == 0 || m->u.error.text == (const char *)body);
            return;
        }
        switch (m->h.op) {
        case PROTO_OP_HELLO:
            CHECK(n == PROTO_HELLO_LEN);
            break;
        case PROTO_OP_OPEN:
            CHECK(n == PROTO_ATTR_LEN);
            break;
        case PROTO_OP_CLOSE:
        case PROTO_OP_HINT:
            CHECK(n == 0);
            break;
        case PROTO_OP_READ:
            CHECK(n <= PROTO_MAX_DATA);
            /* fall through */
        case PROTO_OP_ADMIN:
        case PROTO_OP_STATS:
            CHECK(m->u.data.len == n && m->u.data.p == body);
            if (m->h.op == PROTO_OP_STATS)
                (void)stats_walk(m->u.data.p, m->u.data.len, NULL, 0, NULL);
            break;
        case PROTO_OP_READX: {
            uint32_t ne = m->u.readx.nextents;

            CHECK(ne <= PROTO_MAX_EXTENTS && m->u.readx.inline_len <= PROTO_MAX_DATA);
            CHECK(m->u.readx.extents == body + PROTO_READX_PREFIX);
            CHECK(inside(m->u.readx.extents, (size_t)ne * PROTO_EXTENT_LEN, body, end));
            CHECK(m->u.readx.inline_data ==
                  m->u.readx.extents + (size_t)ne * PROTO_EXTENT_LEN);
            CHECK(m->u.readx.inline_data + m->u.readx.inline_len == end);
            for (uint32_t i = 0; i < ne; i++) {
                proto_extent e;

                proto_extent_at(m, i, &e);
                (void)e;
            }
            break;
        }
        default:
            CHECK(0);
        }
        return;
    }
    CHECK(m->h.status == 0);
    switch (m->h.op) {
    case PROTO_OP_HELLO:
        CHECK(n == PROTO_HELLO_LEN);
        break;
    case PROTO_OP_OPEN:
        CHECK(n >= 1 && n <= PROTO_MAX_PATH);
        CHECK(m->u.open.len == n && m->u.open.path == (const char *)body);
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
        CHECK(m->u.admin.len == n - 1 && m->u.admin.arg == (const char *)body + 1);
        CHECK(m->u.admin.len <= (m->u.admin.cmd == PROTO_ADMIN_WARMUP ? PROTO_MAX_ADMIN_ARG
                                                                      : PROTO_MAX_PATH));
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
            k++;
        }
        CHECK(k == m->u.hint.count && off == m->u.hint.len);
        break;
    }
    default:
        CHECK(0);
    }
}

/*
 * Encode m again with its opcode's encoder into buf[cap].  Returns the
 * length, -EMSGSIZE (does not fit), or RE_SKIP (no encoder takes it: error
 * text with a NUL byte).  Replies whose body the caller sends from its own
 * buffers (READ and STATS data, READX inline bytes) get proto_encode_hdr or
 * the encoder's fixed part and a copy of the bytes, as the daemon does.
 */
static ssize_t reencode(const proto_msg *m, uint8_t *buf, size_t cap)
{
    uint32_t n = m->h.body_len;

    if (m->h.flags & PROTO_F_REPLY) {
        if (m->h.status < 0) {
            char text[PROTO_MAX_ERRMSG + 1];

            if (memchr(m->u.error.text, 0, m->u.error.len))
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
        case PROTO_OP_CLOSE:
        case PROTO_OP_HINT:
            return proto_enc_ok(buf, cap, m->h.op, m->h.req_id);
        case PROTO_OP_ADMIN:
        case PROTO_OP_READ:
            if (n == 0)
                return proto_enc_ok(buf, cap, m->h.op, m->h.req_id);
            if (cap < PROTO_HDR_LEN + (size_t)n)
                return -EMSGSIZE;
            proto_encode_hdr(buf, m->h.op, PROTO_F_REPLY, m->h.req_id, 0, n);
            memcpy(buf + PROTO_HDR_LEN, m->u.data.p, n);
            return PROTO_HDR_LEN + (ssize_t)n;
        case PROTO_OP_STATS: {
            size_t blen = 0;

            if (n == 0)
                return proto_enc_ok(buf, cap, PROTO_OP_STATS, m->h.req_id);
            if (cap < PROTO_HDR_LEN + (size_t)n)
                return -EMSGSIZE;
            if (!stats_walk(m->u.data.p, n, buf + PROTO_HDR_LEN, cap - PROTO_HDR_LEN, &blen)) {
                /* Malformed records: the daemon never writes them, but the
                 * codec carries them as raw bytes. */
                memcpy(buf + PROTO_HDR_LEN, m->u.data.p, n);
                blen = n;
            }
            CHECK(blen == n);
            proto_encode_hdr(buf, PROTO_OP_STATS, PROTO_F_REPLY, m->h.req_id, 0, n);
            return PROTO_HDR_LEN + (ssize_t)n;
        }
        case PROTO_OP_READX: {
            proto_extent ext[PROTO_MAX_EXTENTS];
            uint32_t ne = m->u.readx.nextents, il = m->u.readx.inline_len;
            ssize_t r;

            for (uint32_t i = 0; i < ne; i++)
                proto_extent_at(m, i, &ext[i]);
            /* The inline bytes follow in the caller's next iovec: the
             * encoder gets the room left once they are set aside. */
            if (cap < il)
                return -EMSGSIZE;
            r = proto_enc_readx_reply(buf, cap - il, m->h.req_id, ext, ne, il);
            if (r < 0)
                return r;
            CHECK((size_t)r == PROTO_HDR_LEN + PROTO_READX_PREFIX +
                                   (size_t)ne * PROTO_EXTENT_LEN);
            if (il)
                memcpy(buf + r, m->u.readx.inline_data, il);
            return r + (ssize_t)il;
        }
        default:
            CHECK(0);
        }
    }
    switch (m->h.op) {
    case PROTO_OP_HELLO:
        return proto_enc_hello(buf, cap, 0, m->h.req_id, &m->u.hello);
    case PROTO_OP_OPEN:
        return proto_enc_open(buf, cap, m->h.req_id, m->u.open.path, m->u.open.len);
    case PROTO_OP_CLOSE:
        return proto_enc_close(buf, cap, m->h.req_id, m->u.handle);
    case PROTO_OP_READ:
        return proto_enc_read(buf, cap, m->h.req_id, &m->u.read);
    case PROTO_OP_STATS:
        return proto_enc_stats_req(buf, cap, m->h.req_id);
    case PROTO_OP_READX:
        return proto_enc_readx(buf, cap, m->h.req_id, &m->u.read);
    case PROTO_OP_RELEASE: {
        static uint32_t ids[PROTO_MAX_RELEASE];

        for (uint32_t i = 0; i < m->u.release.count; i++)
            ids[i] = proto_release_at(m, i);
        return proto_enc_release(buf, cap, m->h.req_id, ids, m->u.release.count);
    }
    case PROTO_OP_ADMIN:
        return proto_enc_admin(buf, cap, m->h.req_id, m->u.admin.cmd, m->u.admin.arg,
                               m->u.admin.len);
    case PROTO_OP_HINT: {
        static proto_hint_ent ents[PROTO_MAX_HINTS];
        size_t off = 0;
        uint32_t k = 0;

        while (k < PROTO_MAX_HINTS && proto_hint_next(m, &off, &ents[k]) == 1)
            k++;
        return proto_enc_hint(buf, cap, m->h.req_id, m->u.hint.flags, ents, k);
    }
    default:
        CHECK(0);
    }
    return -EINVAL;
}

/* A decoded message msg[0..used): prefixes, fields, and the round trip. */
static void check_decoded(const proto_msg *m, const uint8_t *msg, size_t used)
{
    uint8_t *short_copy, *out;
    proto_msg m2;
    size_t used2 = 0;
    ssize_t r;

    check_fields(m, msg, used);

    /* One byte short is "need more", read from a block of that size. */
    short_copy = dup_exact(msg, used - 1);
    CHECK(proto_decode(short_copy, used - 1, &m2, &used2) == PROTO_NEED_MORE);
    free(short_copy);

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
        out = malloc(used - 1 ? used - 1 : 1);
        CHECK(out != NULL);
        memset(out, 0xA5, used - 1);
        r = reencode(m, out, used - 1);
        CHECK(r == -EMSGSIZE);
        for (size_t i = 0; i < used - 1; i++)
            CHECK(out[i] == 0xA5);
        free(out);
    }
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
 * (0..-4096, both ends invalid), op 1..7 from the fifth. */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    proto_hdr h;
    proto_msg m;
    size_t used = (size_t)-1;
    int rh, rc;

    if (size > 5)
        CHECK(proto_op_name(data[5]) != NULL);

    memset(&h, 0, sizeof(h));
    rh = proto_decode_hdr(data, size, &h);
    CHECK(is_decode_result(rh));
    CHECK((rh == PROTO_NEED_MORE) == (size < PROTO_HDR_LEN));
    if (rh == 0 || rh == -EMSGSIZE) {
        uint8_t hb[PROTO_HDR_LEN];

        /* Every field valid (only the size may be over): the header
         * encoder gives back the same bytes. */
        CHECK(h.op >= 1 && h.op < PROTO_OP_MAX_ && (h.flags & ~PROTO_F_REPLY) == 0);
        CHECK(h.status <= 0 && h.status >= -4095 && h.reserved == 0);
        CHECK((h.flags & PROTO_F_REPLY) || h.status == 0);
        CHECK((rh == -EMSGSIZE) == (h.body_len > PROTO_MAX_BODY));
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
    }
    if (rc == 0) {
        CHECK(used == PROTO_HDR_LEN + (size_t)h.body_len && used <= size);
        check_decoded(&m, data, used);
    } else {
        CHECK(used == (size_t)-1);
    }

    check_error_encoder(data, size);
    return 0;
}
