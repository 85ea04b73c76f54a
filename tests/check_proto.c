/*
 * check_proto.c - tests of proto/proto.c, the pure wire codec: round trips of
 * every message, every prefix of every message (PROTO_NEED_MORE), hostile
 * headers and bodies, encoder limits, the wire bytes against the layout in
 * proto/PROTOCOL.md, and a fixed-seed random-bytes loop.
 *
 * Every decode reads from a heap block of exactly the bytes given (see dec()),
 * so a run under ASan or valgrind proves that no decoder reads past its
 * length; every encode writes into a block of exactly cap bytes likewise.
 *
 * Needs nothing but proto.c (not testutil.c, which pulls in the client), so
 * it builds and runs while the rest of the tree is in flux.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckset.h"
#include "le.h"
#include "proto.h"

/* ck_assert_* records a mark point (a write to Check's channel) on every
 * success; hot loops use this instead, which costs nothing until it fails. */
#define QUICK_ASSERT(expr, ...)                                                \
    do {                                                                       \
        if (!(expr))                                                           \
            ck_abort_msg("Assertion '" #expr "' failed: " __VA_ARGS__);        \
    } while (0)

/* The last block handed to the codec; freed by the next dec() or teardown,
 * so pointers in a decoded proto_msg stay valid until then. */
static uint8_t *held;

static void teardown(void)
{
    free(held);
    held = NULL;
}

/* A heap copy of src[0..len) in a block of exactly len bytes. */
static uint8_t *dup_exact(const void *src, size_t len)
{
    uint8_t *p = malloc(len);

    ck_assert_msg(p != NULL || len == 0, "malloc(%zu)", len);
    if (len)
        memcpy(p, src, len);
    return p;
}

/* proto_decode on an exact-size heap copy of src[0..len). */
static int dec(const void *src, size_t len, proto_msg *m, size_t *used)
{
    free(held);
    held = dup_exact(src, len);
    return proto_decode(held, len, m, used);
}

/* Little-endian readers written independently of proto.c, from the layout
 * tables in PROTOCOL.md. */
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Byte i of a payload of n bytes: varies with both, so a shifted or
 * truncated body never compares equal by accident. */
static uint8_t pat(uint32_t n, uint32_t i)
{
    uint32_t x = (i + 1) * 0x9E3779B1u ^ n * 0x85EBCA77u;

    return (uint8_t)(x ^ x >> 15 ^ x >> 24);
}

/* Every strict prefix of a valid message is PROTO_NEED_MORE, read from a
 * block of exactly that size; the whole message decodes with used == len. */
static void check_prefixes(const uint8_t *msg, size_t len)
{
    proto_msg m;
    proto_hdr h;
    size_t used;

    for (size_t i = 0; i < len; i++) {
        QUICK_ASSERT(dec(msg, i, &m, &used) == PROTO_NEED_MORE, "prefix %zu of %zu", i, len);
        if (i < PROTO_HDR_LEN)
            QUICK_ASSERT(proto_decode_hdr(held, i, &h) == PROTO_NEED_MORE, "prefix %zu", i);
    }
    used = 0;
    ck_assert_int_eq(dec(msg, len, &m, &used), 0);
    ck_assert_uint_eq(used, len);
}

/* Encode into a block of exactly cap bytes; returns a malloc'd copy of the
 * message in *out (caller frees) when the result is positive. */
typedef ssize_t (*enc_fn)(void *buf, size_t cap, const void *arg);

static ssize_t enc_exact(enc_fn fn, const void *arg, size_t cap, uint8_t **out)
{
    uint8_t *b = malloc(cap ? cap : 1);
    ssize_t n;

    ck_assert_ptr_nonnull(b);
    memset(b, 0xA5, cap);
    n = fn(b, cap, arg);
    if (n < 0) {
        /* A refused encode writes nothing. */
        for (size_t i = 0; i < cap; i++)
            ck_assert_uint_eq(b[i], 0xA5);
    }
    if (n > 0 && out)
        *out = dup_exact(b, (size_t)n);
    free(b);
    return n;
}

/* A message of (op, flags, status) with a body of body_len zero bytes
 * (or given bytes), built with proto_encode_hdr.  Caller frees. */
static uint8_t *build(uint8_t op, uint16_t flags, uint32_t req_id, int32_t status,
                      uint32_t body_len, const void *body)
{
    uint8_t *b = calloc(1, PROTO_HDR_LEN + (size_t)body_len);

    ck_assert_ptr_nonnull(b);
    proto_encode_hdr(b, op, flags, req_id, status, body_len);
    if (body)
        memcpy(b + PROTO_HDR_LEN, body, body_len);
    return b;
}

/* proto_rec_next for a U64 record, in the shape the STATS tests use. */
static int stats_next(const uint8_t *body, size_t len, size_t *off, const char **name,
                      size_t *name_len, uint64_t *value)
{
    proto_rec r;
    int rc = proto_rec_next(body, len, off, &r);

    if (rc == 1) {
        *name = r.name;
        *name_len = r.name_len;
        *value = r.u64;
        ck_assert_uint_eq(r.kind, PROTO_REC_U64);
    }
    return rc;
}

/* ---- wire bytes ---------------------------------------------------------- */

START_TEST(test_hdr_wire_bytes)
{
    static const uint8_t want[PROTO_HDR_LEN] = {
        0x47, 0x52, 0x4e, 0x59,         /*  0 magic "GRNY" = 0x594e5247 LE */
        0x02,                           /*  4 version */
        0x04,                           /*  5 op READ */
        0x01, 0x00,                     /*  6 flags REPLY */
        0x01, 0x02, 0x03, 0x04,         /*  8 req_id 0x04030201 */
        0xcd, 0xab, 0x00, 0x00,         /* 12 body_len 0xabcd */
        0xfb, 0xff, 0xff, 0xff,         /* 16 status -5 */
        0x00, 0x00, 0x00, 0x00,         /* 20 reserved */
    };
    uint8_t b[PROTO_HDR_LEN];
    proto_hdr h;

    memset(b, 0xee, sizeof(b));
    proto_encode_hdr(b, PROTO_OP_READ, PROTO_F_REPLY, 0x04030201u, -5, 0xabcd);
    for (int i = 0; i < PROTO_HDR_LEN; i++)
        ck_assert_msg(b[i] == want[i], "header byte %d: %02x, want %02x", i, b[i], want[i]);
    ck_assert_int_eq(memcmp(b, "GRNY", 4), 0);
    ck_assert_int_eq(PROTO_HDR_LEN, 24);
    ck_assert_int_eq(proto_decode_hdr(want, sizeof(want), &h), 0);
    ck_assert_uint_eq(h.magic, PROTO_MAGIC);
    ck_assert_uint_eq(h.version, 2);
    ck_assert_uint_eq(h.op, PROTO_OP_READ);
    ck_assert_uint_eq(h.flags, PROTO_F_REPLY);
    ck_assert_uint_eq(h.req_id, 0x04030201u);
    ck_assert_uint_eq(h.body_len, 0xabcd);
    ck_assert_int_eq(h.status, -5);
    ck_assert_uint_eq(h.reserved, 0);
}
END_TEST

/* The worked example in PROTOCOL.md, byte for byte. */
START_TEST(test_open_example_bytes)
{
    static const uint8_t want[] = {
        0x47, 0x52, 0x4e, 0x59, 0x02, 0x02, 0x00, 0x00,
        0x07, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x2f, 0x64, 0x61, 0x74, 0x61, 0x2f, 0x61,
    };
    uint8_t b[64];

    ck_assert_int_eq(proto_enc_open(b, sizeof(b), 7, "/data/a", 7), (ssize_t)sizeof(want));
    ck_assert_int_eq(memcmp(b, want, sizeof(want)), 0);
}
END_TEST

/* Body layouts: each field at its documented offset. */
START_TEST(test_body_wire_offsets)
{
    proto_attr a = {
        .handle = 0x11111111u, .chunk_size = 0x22222222u, .size = 0x3333333333333333ull,
        .ino = 0x4444444444444444ull, .dev = 0x5555555555555555ull,
        .mtime_sec = 0x0666666666666666ll, .mtime_nsec = 0x77777777u, .mode = 0x88888888u,
        .blksize = 0x99999999u, .uid = 0xaaaaaaaau, .gid = 0xbbbbbbbbu, .nlink = 0xccccccccu,
    };
    proto_hello he = { 0x01020304u, 0x05060708u, 0x090a0b0cu, 0x0d0e0f10u, 0x1112131415161718ull,
                       0x191a1b1cu, 0 };
    proto_read r = { .handle = 0xdeadbeefu, .len = 0x1234, .off = 0x0102030405060708ull };
    uint8_t b[128];
    const uint8_t *p = b + PROTO_HDR_LEN;

    ck_assert_int_eq(proto_enc_attr(b, sizeof(b), 1, &a), PROTO_HDR_LEN + 64);
    ck_assert_uint_eq(PROTO_ATTR_LEN, 64);
    ck_assert_uint_eq(le32(p + 0), a.handle);
    ck_assert_uint_eq(le32(p + 4), a.chunk_size);
    ck_assert_uint_eq(le64(p + 8), a.size);
    ck_assert_uint_eq(le64(p + 16), a.ino);
    ck_assert_uint_eq(le64(p + 24), a.dev);
    ck_assert_uint_eq(le64(p + 32), (uint64_t)a.mtime_sec);
    ck_assert_uint_eq(le32(p + 40), a.mtime_nsec);
    ck_assert_uint_eq(le32(p + 44), a.mode);
    ck_assert_uint_eq(le32(p + 48), a.blksize);
    ck_assert_uint_eq(le32(p + 52), a.uid);
    ck_assert_uint_eq(le32(p + 56), a.gid);
    ck_assert_uint_eq(le32(p + 60), a.nlink);
    ck_assert_uint_eq(le32(b + 12), 64);
    ck_assert_uint_eq(b[5], PROTO_OP_OPEN);
    ck_assert_uint_eq(b[6], PROTO_F_REPLY);

    ck_assert_int_eq(proto_enc_hello(b, sizeof(b), 0, 1, &he), PROTO_HDR_LEN + 32);
    ck_assert_uint_eq(le32(p + 0), he.version);
    ck_assert_uint_eq(le32(p + 4), he.max_msg);
    ck_assert_uint_eq(le32(p + 8), he.max_data);
    ck_assert_uint_eq(le32(p + 12), he.chunk_size);
    ck_assert_uint_eq(le32(p + 16), (uint32_t)he.lease_cache);
    ck_assert_uint_eq(le32(p + 20), (uint32_t)(he.lease_cache >> 32));
    ck_assert_uint_eq(le32(p + 24), he.lease_ttl_ms);
    ck_assert_uint_eq(le32(p + 28), 0);

    ck_assert_int_eq(proto_enc_read(b, sizeof(b), 1, &r), PROTO_HDR_LEN + 16);
    ck_assert_uint_eq(le32(p + 0), r.handle);
    ck_assert_uint_eq(le32(p + 4), r.len);
    ck_assert_uint_eq(le64(p + 8), r.off);

    ck_assert_int_eq(proto_enc_close(b, sizeof(b), 1, 0xfeedf00du), PROTO_HDR_LEN + 4);
    ck_assert_uint_eq(le32(p), 0xfeedf00du);

    ck_assert_int_eq(proto_enc_error(b, sizeof(b), PROTO_OP_OPEN, 9, -ENOENT, "gone"),
                     PROTO_HDR_LEN + 4);
    ck_assert_uint_eq(le32(b + 16), (uint32_t)-ENOENT);
    ck_assert_uint_eq(le32(b + 12), 4);
    ck_assert_int_eq(memcmp(p, "gone", 4), 0);

    /* Records: u8 name_len, name, u8 kind, then a u64 LE, or a u32 LE
     * length and the bytes. */
    {
        size_t off = 0;
        ck_assert_int_eq(proto_rec_u64(b, sizeof(b), &off, "hits", 0x0102030405060708ull), 0);
        ck_assert_uint_eq(off, 1 + 4 + 1 + 8);
        ck_assert_uint_eq(b[0], 4);
        ck_assert_int_eq(memcmp(b + 1, "hits", 4), 0);
        ck_assert_uint_eq(b[5], PROTO_REC_U64);
        ck_assert_uint_eq(PROTO_REC_U64, 1);
        ck_assert_uint_eq(le64(b + 6), 0x0102030405060708ull);
        off = 0;
        ck_assert_int_eq(proto_rec_str(b, sizeof(b), &off, "path", "/d/x", 4), 0);
        ck_assert_uint_eq(off, 1 + 4 + 1 + 4 + 4);
        ck_assert_uint_eq(b[5], PROTO_REC_STR);
        ck_assert_uint_eq(PROTO_REC_STR, 2);
        ck_assert_uint_eq(le32(b + 6), 4);
        ck_assert_int_eq(memcmp(b + 10, "/d/x", 4), 0);
    }
}
END_TEST

/* ---- round trips --------------------------------------------------------- */

static void hello_rt(uint16_t flags, uint32_t id, proto_hello he)
{
    uint8_t b[PROTO_HDR_LEN + PROTO_HELLO_LEN];
    proto_msg m;
    size_t used;

    ck_assert_int_eq(proto_enc_hello(b, sizeof(b), flags, id, &he), sizeof(b));
    check_prefixes(b, sizeof(b));
    ck_assert_int_eq(dec(b, sizeof(b), &m, &used), 0);
    ck_assert_uint_eq(used, sizeof(b));
    ck_assert_uint_eq(m.h.magic, PROTO_MAGIC);
    ck_assert_uint_eq(m.h.version, PROTO_VERSION);
    ck_assert_uint_eq(m.h.op, PROTO_OP_HELLO);
    ck_assert_uint_eq(m.h.flags, flags & PROTO_F_REPLY);
    ck_assert_uint_eq(m.h.req_id, id);
    ck_assert_uint_eq(m.h.body_len, PROTO_HELLO_LEN);
    ck_assert_int_eq(m.h.status, 0);
    ck_assert_uint_eq(m.u.hello.version, he.version);
    ck_assert_uint_eq(m.u.hello.max_msg, he.max_msg);
    ck_assert_uint_eq(m.u.hello.max_data, he.max_data);
    ck_assert_uint_eq(m.u.hello.chunk_size, he.chunk_size);
}

START_TEST(test_hello)
{
    proto_hello req = { .version = PROTO_VERSION, .max_msg = PROTO_MAX_MSG };
    proto_hello rep = { PROTO_VERSION, PROTO_MAX_MSG, PROTO_MAX_DATA, 1u << 20, 32u << 20, 1000, 0 };
    proto_hello ext = { UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT64_MAX, UINT32_MAX, 0 };
    proto_hello zero = { 0 };

    hello_rt(0, 1, req);
    hello_rt(PROTO_F_REPLY, 1, rep);
    hello_rt(0, UINT32_MAX, ext);
    hello_rt(PROTO_F_REPLY, 0, zero);
    /* Flag bits other than REPLY are not the caller's to set: masked. */
    hello_rt(0xffff, 5, rep);
    hello_rt(0xfffe, 6, req);
    /* features: carried both ways, unknown bits included (the daemon
     * ignores what it does not know). */
    req.features = PROTO_FEAT_NOKEEP | 0x80000000u;
    hello_rt(0, 7, req);
    rep.features = PROTO_FEAT_NOKEEP;
    hello_rt(PROTO_F_REPLY, 8, rep);
}
END_TEST

static void open_rt(const char *path, size_t len, uint32_t id)
{
    size_t cap = PROTO_HDR_LEN + len;
    uint8_t *b = malloc(cap);
    proto_msg m;
    size_t used;

    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(proto_enc_open(b, cap, id, path, len), (ssize_t)cap);
    ck_assert_int_eq(dec(b, cap, &m, &used), 0);
    ck_assert_uint_eq(used, cap);
    ck_assert_uint_eq(m.h.op, PROTO_OP_OPEN);
    ck_assert_uint_eq(m.h.flags, 0);
    ck_assert_uint_eq(m.h.req_id, id);
    ck_assert_uint_eq(m.h.body_len, len);
    ck_assert_uint_eq(m.u.open.len, len);
    ck_assert_ptr_eq(m.u.open.path, (const char *)held + PROTO_HDR_LEN);
    ck_assert_int_eq(memcmp(m.u.open.path, path, len), 0);
    check_prefixes(b, cap);
    free(b);
}

START_TEST(test_open)
{
    char *big = malloc(PROTO_MAX_PATH);

    ck_assert_ptr_nonnull(big);
    for (size_t i = 0; i < PROTO_MAX_PATH; i++)
        big[i] = (char)('a' + i % 26);
    big[0] = '/';
    open_rt("/data/a", 7, 7);
    open_rt("/", 1, 0);
    open_rt("/x\xff\x01y", 5, UINT32_MAX);      /* bytes, not a C string */
    open_rt(big, PROTO_MAX_PATH, 42);
    free(big);
}
END_TEST

static void attr_rt(const proto_attr *a, uint32_t id)
{
    uint8_t b[PROTO_HDR_LEN + PROTO_ATTR_LEN];
    proto_msg m;
    size_t used;

    ck_assert_int_eq(proto_enc_attr(b, sizeof(b), id, a), sizeof(b));
    check_prefixes(b, sizeof(b));
    ck_assert_int_eq(dec(b, sizeof(b), &m, &used), 0);
    ck_assert_uint_eq(m.h.op, PROTO_OP_OPEN);
    ck_assert_uint_eq(m.h.flags, PROTO_F_REPLY);
    ck_assert_uint_eq(m.h.req_id, id);
    ck_assert_int_eq(m.h.status, 0);
    ck_assert_uint_eq(m.u.attr.handle, a->handle);
    ck_assert_uint_eq(m.u.attr.chunk_size, a->chunk_size);
    ck_assert_uint_eq(m.u.attr.size, a->size);
    ck_assert_uint_eq(m.u.attr.ino, a->ino);
    ck_assert_uint_eq(m.u.attr.dev, a->dev);
    ck_assert_int_eq(m.u.attr.mtime_sec, a->mtime_sec);
    ck_assert_uint_eq(m.u.attr.mtime_nsec, a->mtime_nsec);
    ck_assert_uint_eq(m.u.attr.mode, a->mode);
    ck_assert_uint_eq(m.u.attr.blksize, a->blksize);
    ck_assert_uint_eq(m.u.attr.uid, a->uid);
    ck_assert_uint_eq(m.u.attr.gid, a->gid);
    ck_assert_uint_eq(m.u.attr.nlink, a->nlink);
}

START_TEST(test_attr)
{
    proto_attr max = {
        UINT32_MAX, UINT32_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX, INT64_MAX,
        UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX,
    };
    proto_attr min = { .mtime_sec = INT64_MIN };
    proto_attr neg = { .handle = 1, .mtime_sec = -1, .mtime_nsec = 999999999, .mode = 0100644 };
    proto_attr zero = { 0 };
    proto_attr odd = {
        0x80000000u, 1, 1ull << 63, 0x8000000000000001ull, 0x00ff00ff00ff00ffull,
        (int64_t)0x8000000000000001ull, 0x80000000u, 0x7fffffffu, 4096, 0x10000u, 0x7ffffffeu, 1,
    };

    attr_rt(&max, UINT32_MAX);
    attr_rt(&min, 0);
    attr_rt(&neg, 3);
    attr_rt(&zero, 1);
    attr_rt(&odd, 0x80000000u);
}
END_TEST

START_TEST(test_close)
{
    static const uint32_t handles[] = { 0, 1, 0x80000000u, UINT32_MAX };
    uint8_t b[PROTO_HDR_LEN + 4];
    proto_msg m;
    size_t used;

    for (size_t i = 0; i < sizeof(handles) / sizeof(handles[0]); i++) {
        ck_assert_int_eq(proto_enc_close(b, sizeof(b), (uint32_t)i + 100, handles[i]), sizeof(b));
        check_prefixes(b, sizeof(b));
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), 0);
        ck_assert_uint_eq(m.h.op, PROTO_OP_CLOSE);
        ck_assert_uint_eq(m.h.flags, 0);
        ck_assert_uint_eq(m.h.req_id, i + 100);
        ck_assert_uint_eq(m.h.body_len, 4);
        ck_assert_uint_eq(m.u.handle, handles[i]);
    }
}
END_TEST

START_TEST(test_ok_reply)
{
    uint8_t b[PROTO_HDR_LEN];
    proto_msg m;
    size_t used;

    ck_assert_int_eq(proto_enc_ok(b, sizeof(b), PROTO_OP_CLOSE, 77), PROTO_HDR_LEN);
    check_prefixes(b, sizeof(b));
    ck_assert_int_eq(dec(b, sizeof(b), &m, &used), 0);
    ck_assert_uint_eq(used, PROTO_HDR_LEN);
    ck_assert_uint_eq(m.h.op, PROTO_OP_CLOSE);
    ck_assert_uint_eq(m.h.flags, PROTO_F_REPLY);
    ck_assert_uint_eq(m.h.req_id, 77);
    ck_assert_uint_eq(m.h.body_len, 0);
    ck_assert_int_eq(m.h.status, 0);

    /* An empty success reply is also a valid empty READ or STATS reply... */
    ck_assert_int_eq(proto_enc_ok(b, sizeof(b), PROTO_OP_READ, 1), PROTO_HDR_LEN);
    ck_assert_int_eq(dec(b, sizeof(b), &m, &used), 0);
    ck_assert_uint_eq(m.u.data.len, 0);
    ck_assert_int_eq(proto_enc_ok(b, sizeof(b), PROTO_OP_STATS, 1), PROTO_HDR_LEN);
    ck_assert_int_eq(dec(b, sizeof(b), &m, &used), 0);
    ck_assert_uint_eq(m.u.data.len, 0);
    /* ...but not a HELLO or OPEN reply, whose bodies have fixed sizes. */
    ck_assert_int_eq(proto_enc_ok(b, sizeof(b), PROTO_OP_HELLO, 1), PROTO_HDR_LEN);
    ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTO);
    ck_assert_int_eq(proto_enc_ok(b, sizeof(b), PROTO_OP_OPEN, 1), PROTO_HDR_LEN);
    ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTO);
}
END_TEST

START_TEST(test_read_request)
{
    static const proto_read rs[] = {
        { 0, 0, 0 },
        { 1, 1, 1 },
        { UINT32_MAX, PROTO_MAX_DATA, UINT64_MAX },
        { 7, 4096, 1ull << 40 },
    };
    uint8_t b[PROTO_HDR_LEN + PROTO_READ_LEN];
    proto_msg m;
    size_t used;

    for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++) {
        ck_assert_int_eq(proto_enc_read(b, sizeof(b), (uint32_t)i, &rs[i]), sizeof(b));
        check_prefixes(b, sizeof(b));
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), 0);
        ck_assert_uint_eq(m.h.op, PROTO_OP_READ);
        ck_assert_uint_eq(m.h.flags, 0);
        ck_assert_uint_eq(m.h.req_id, i);
        ck_assert_uint_eq(m.u.read.handle, rs[i].handle);
        ck_assert_uint_eq(m.u.read.len, rs[i].len);
        ck_assert_uint_eq(m.u.read.off, rs[i].off);
    }
}
END_TEST

static void read_reply_rt(uint32_t n, int prefixes)
{
    uint8_t *b = malloc(PROTO_HDR_LEN + (size_t)n);
    proto_msg m;
    size_t used;

    ck_assert_ptr_nonnull(b);
    proto_encode_hdr(b, PROTO_OP_READ, PROTO_F_REPLY, 0xabcdef01u, 0, n);
    for (uint32_t i = 0; i < n; i++)
        b[PROTO_HDR_LEN + i] = pat(n, i);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(used, PROTO_HDR_LEN + (size_t)n);
    ck_assert_uint_eq(m.h.op, PROTO_OP_READ);
    ck_assert_uint_eq(m.h.flags, PROTO_F_REPLY);
    ck_assert_uint_eq(m.h.req_id, 0xabcdef01u);
    ck_assert_uint_eq(m.u.data.len, n);
    ck_assert_ptr_eq(m.u.data.p, held + PROTO_HDR_LEN);
    for (uint32_t i = 0; i < n; i++)
        QUICK_ASSERT(m.u.data.p[i] == pat(n, i), "byte %u of %u", i, n);
    if (prefixes) {
        check_prefixes(b, PROTO_HDR_LEN + (size_t)n);
    } else {
        /* Header only, and all but the last byte. */
        ck_assert_int_eq(dec(b, PROTO_HDR_LEN, &m, &used), n ? PROTO_NEED_MORE : 0);
        if (n)
            ck_assert_int_eq(dec(b, PROTO_HDR_LEN + (size_t)n - 1, &m, &used), PROTO_NEED_MORE);
    }
    free(b);
}

START_TEST(test_read_reply)
{
    read_reply_rt(0, 1);
    read_reply_rt(1, 1);
    read_reply_rt(300, 1);
    read_reply_rt(PROTO_MAX_DATA - 1, 0);
    read_reply_rt(PROTO_MAX_DATA, 0);
}
END_TEST

START_TEST(test_stats)
{
    char n255[256];
    struct { const char *name; uint64_t v; } recs[] = {
        { "requests", 12345 },
        { "x", 0 },
        { "bytes_served", UINT64_MAX },
        { n255, 1ull << 63 },
        { "z", 1 },
    };
    size_t nrec = sizeof(recs) / sizeof(recs[0]);
    uint8_t body[1024], b[PROTO_HDR_LEN];
    uint8_t *msg;
    size_t off = 0, used, nl;
    const char *name;
    uint64_t v;
    proto_msg m;

    memset(n255, 'n', 255);
    n255[255] = '\0';

    /* The request: no body. */
    ck_assert_int_eq(proto_enc_stats_req(b, sizeof(b), 31), PROTO_HDR_LEN);
    check_prefixes(b, sizeof(b));
    ck_assert_int_eq(dec(b, sizeof(b), &m, &used), 0);
    ck_assert_uint_eq(m.h.op, PROTO_OP_STATS);
    ck_assert_uint_eq(m.h.flags, 0);
    ck_assert_uint_eq(m.h.req_id, 31);
    ck_assert_uint_eq(m.h.body_len, 0);

    /* The reply: records appended with proto_stats_put. */
    for (size_t i = 0; i < nrec; i++)
        ck_assert_int_eq(proto_rec_u64(body, sizeof(body), &off, recs[i].name, recs[i].v), 0);
    msg = build(PROTO_OP_STATS, PROTO_F_REPLY, 31, 0, (uint32_t)off, body);
    check_prefixes(msg, PROTO_HDR_LEN + off);
    ck_assert_int_eq(dec(msg, PROTO_HDR_LEN + off, &m, &used), 0);
    free(msg);
    ck_assert_uint_eq(m.u.recs.len, off);
    ck_assert_ptr_eq(m.u.recs.p, held + PROTO_HDR_LEN);

    /* Walked back with proto_rec_next. */
    off = 0;
    for (size_t i = 0; i < nrec; i++) {
        ck_assert_int_eq(stats_next(m.u.recs.p, m.u.recs.len, &off, &name, &nl, &v), 1);
        ck_assert_uint_eq(nl, strlen(recs[i].name));
        ck_assert_int_eq(memcmp(name, recs[i].name, nl), 0);
        ck_assert_uint_eq(v, recs[i].v);
    }
    ck_assert_uint_eq(off, m.u.recs.len);
    ck_assert_int_eq(stats_next(m.u.recs.p, m.u.recs.len, &off, &name, &nl, &v), 0);
    ck_assert_int_eq(stats_next(m.u.recs.p, m.u.recs.len, &off, &name, &nl, &v), 0);

    /* An empty body has no records. */
    off = 0;
    ck_assert_int_eq(stats_next(body, 0, &off, &name, &nl, &v), 0);
    /* An offset past the end reads as the end, without touching body. */
    off = 10;
    ck_assert_int_eq(stats_next(body, 5, &off, &name, &nl, &v), 0);
}
END_TEST

START_TEST(test_stats_put_limits)
{
    char n256[257];
    uint8_t *b;
    size_t off;

    memset(n256, 'q', 256);
    n256[256] = '\0';

    /* Exactly enough room: 1 + 3 + 1 + 8 = 13 bytes; written into 13 bytes. */
    b = malloc(13);
    ck_assert_ptr_nonnull(b);
    off = 0;
    ck_assert_int_eq(proto_rec_u64(b, 13, &off, "abc", 5), 0);
    ck_assert_uint_eq(off, 13);
    ck_assert_int_eq(proto_rec_u64(b, 13, &off, "a", 5), -EMSGSIZE);
    ck_assert_uint_eq(off, 13);
    free(b);

    /* One byte short. */
    b = malloc(12);
    ck_assert_ptr_nonnull(b);
    memset(b, 0xA5, 12);
    off = 0;
    ck_assert_int_eq(proto_rec_u64(b, 12, &off, "abc", 5), -EMSGSIZE);
    ck_assert_uint_eq(off, 0);
    for (int i = 0; i < 12; i++)
        ck_assert_uint_eq(b[i], 0xA5);
    free(b);

    b = malloc(300);
    ck_assert_ptr_nonnull(b);
    off = 0;
    ck_assert_int_eq(proto_rec_u64(b, 300, &off, "", 5), -EINVAL);
    ck_assert_int_eq(proto_rec_u64(b, 300, &off, n256, 5), -EINVAL);
    ck_assert_uint_eq(off, 0);
    n256[255] = '\0';
    ck_assert_int_eq(proto_rec_u64(b, 300, &off, n256, 5), 0);
    ck_assert_uint_eq(off, 1 + 255 + 1 + 8);
    /* An offset beyond cap is refused, not written at. */
    off = 301;
    ck_assert_int_eq(proto_rec_u64(b, 300, &off, "a", 5), -EMSGSIZE);
    ck_assert_uint_eq(off, 301);
    free(b);
}
END_TEST

/* A body cut at every byte: records wholly inside read back, then 0 at a
 * record boundary or -EPROTO inside one; never a read past the cut. */
START_TEST(test_stats_truncated)
{
    uint8_t body[256];
    size_t bounds[8], nb = 0, full = 0;
    const char *names[] = { "a", "hits", "misses_total", "zz" };

    bounds[nb++] = 0;
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(proto_rec_u64(body, sizeof(body), &full, names[i], i * 1000 + 1), 0);
        bounds[nb++] = full;
    }
    for (size_t cut = 0; cut <= full; cut++) {
        uint8_t *p = dup_exact(body, cut);
        size_t off = 0, nl, whole = 0, got = 0;
        const char *name;
        uint64_t v;
        int rc;

        while (whole + 1 < nb && bounds[whole + 1] <= cut)
            whole++;
        while ((rc = stats_next(p, cut, &off, &name, &nl, &v)) == 1) {
            ck_assert_uint_eq(nl, strlen(names[got]));
            ck_assert_int_eq(memcmp(name, names[got], nl), 0);
            ck_assert_uint_eq(v, got * 1000 + 1);
            got++;
        }
        ck_assert_uint_eq(got, whole);
        ck_assert_int_eq(rc, bounds[whole] == cut ? 0 : -EPROTO);
        free(p);
    }
}
END_TEST

START_TEST(test_stats_name_len_zero)
{
    uint8_t body[32] = { 0 };
    size_t off = 0, nl;
    const char *name;
    uint64_t v;

    /* A lone zero byte, and a zero name_len with room for a value after it. */
    ck_assert_int_eq(stats_next(body, 1, &off, &name, &nl, &v), -EPROTO);
    ck_assert_int_eq(stats_next(body, 9, &off, &name, &nl, &v), -EPROTO);
    ck_assert_int_eq(stats_next(body, sizeof(body), &off, &name, &nl, &v), -EPROTO);
    ck_assert_uint_eq(off, 0);
    /* After a good record. */
    ck_assert_int_eq(proto_rec_u64(body, sizeof(body), &off, "ab", 9), 0);
    body[off] = 0;
    off = 0;
    ck_assert_int_eq(stats_next(body, sizeof(body), &off, &name, &nl, &v), 1);
    ck_assert_int_eq(stats_next(body, sizeof(body), &off, &name, &nl, &v), -EPROTO);
    /* name_len claiming more than is left. */
    body[0] = 255;
    off = 0;
    ck_assert_int_eq(stats_next(body, sizeof(body), &off, &name, &nl, &v), -EPROTO);
}
END_TEST

static void error_rt(uint8_t op, uint32_t id, int32_t status, const char *text, size_t want_len)
{
    uint8_t *b = NULL;
    size_t cap = PROTO_HDR_LEN + PROTO_MAX_ERRMSG, used;
    uint8_t *buf = malloc(cap);
    ssize_t n;
    proto_msg m;

    ck_assert_ptr_nonnull(buf);
    n = proto_enc_error(buf, cap, op, id, status, text);
    ck_assert_int_eq(n, (ssize_t)(PROTO_HDR_LEN + want_len));
    b = dup_exact(buf, (size_t)n);
    free(buf);
    check_prefixes(b, (size_t)n);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(used, (size_t)n);
    ck_assert_uint_eq(m.h.op, op);
    ck_assert_uint_eq(m.h.flags, PROTO_F_REPLY);
    ck_assert_uint_eq(m.h.req_id, id);
    ck_assert_int_eq(m.h.status, status);
    ck_assert_uint_eq(m.u.error.len, want_len);
    if (want_len) {
        ck_assert_ptr_eq(m.u.error.text, (const char *)held + PROTO_HDR_LEN);
        ck_assert_int_eq(memcmp(m.u.error.text, text, want_len), 0);
    }
    free(b);
}

START_TEST(test_error_reply)
{
    char t[PROTO_MAX_ERRMSG + 64];

    /* Every opcode can carry an error, whatever its success body. */
    for (uint8_t op = PROTO_OP_HELLO; op < PROTO_OP_MAX_; op++) {
        error_rt(op, op, -ENOENT, "no such file", 12);
        error_rt(op, op, -EIO, NULL, 0);
    }
    error_rt(PROTO_OP_OPEN, 1, -1, "", 0);
    error_rt(PROTO_OP_OPEN, UINT32_MAX, -4095, "x", 1);

    /* Cut at PROTO_MAX_ERRMSG bytes. */
    memset(t, 'e', sizeof(t) - 1);
    t[sizeof(t) - 1] = '\0';
    error_rt(PROTO_OP_READ, 2, -EIO, t, PROTO_MAX_ERRMSG);
    t[PROTO_MAX_ERRMSG] = '\0';
    error_rt(PROTO_OP_READ, 2, -EIO, t, PROTO_MAX_ERRMSG);
    t[PROTO_MAX_ERRMSG - 1] = '\0';
    error_rt(PROTO_OP_READ, 2, -EIO, t, PROTO_MAX_ERRMSG - 1);

    /* ...but never inside a UTF-8 sequence. */
    memset(t, 'e', sizeof(t) - 1);
    memcpy(t + PROTO_MAX_ERRMSG - 1, "\xc3\xa9", 2);            /* 2 bytes over the cut */
    error_rt(PROTO_OP_OPEN, 3, -EACCES, t, PROTO_MAX_ERRMSG - 1);
    memset(t, 'e', sizeof(t) - 1);
    memcpy(t + PROTO_MAX_ERRMSG - 2, "\xe2\x82\xac", 3);        /* 3 bytes, 1 over */
    error_rt(PROTO_OP_OPEN, 3, -EACCES, t, PROTO_MAX_ERRMSG - 2);
    memset(t, 'e', sizeof(t) - 1);
    memcpy(t + PROTO_MAX_ERRMSG - 1, "\xe2\x82\xac", 3);        /* 3 bytes, 2 over */
    error_rt(PROTO_OP_OPEN, 3, -EACCES, t, PROTO_MAX_ERRMSG - 1);
    memset(t, 'e', sizeof(t) - 1);
    memcpy(t + PROTO_MAX_ERRMSG - 3, "\xf0\x9f\x98\x80", 4);    /* 4 bytes, 1 over */
    error_rt(PROTO_OP_OPEN, 3, -EACCES, t, PROTO_MAX_ERRMSG - 3);
    memset(t, 'e', sizeof(t) - 1);
    memcpy(t + PROTO_MAX_ERRMSG - 2, "\xc3\xa9", 2);            /* ends at the cut */
    error_rt(PROTO_OP_OPEN, 3, -EACCES, t, PROTO_MAX_ERRMSG);
    memset(t, 'e', sizeof(t) - 1);
    memcpy(t + PROTO_MAX_ERRMSG - 4, "\xf0\x9f\x98\x80", 4);    /* ends at the cut */
    error_rt(PROTO_OP_OPEN, 3, -EACCES, t, PROTO_MAX_ERRMSG);
    /* A lead byte with one continuation byte too many: not UTF-8, and the
     * lead lies 4 bytes back, too far to be the straddling sequence's. */
    memset(t, 'e', sizeof(t) - 1);
    memcpy(t + PROTO_MAX_ERRMSG - 4, "\xf0\x9f\x98\x80\x80", 5);
    error_rt(PROTO_OP_OPEN, 3, -EACCES, t, PROTO_MAX_ERRMSG);
    /* Not UTF-8 at all (a run of continuation bytes): a plain byte cut. */
    memset(t, 0x80, sizeof(t) - 1);
    error_rt(PROTO_OP_OPEN, 3, -EACCES, t, PROTO_MAX_ERRMSG);
}
END_TEST

START_TEST(test_error_status_limits)
{
    uint8_t b[PROTO_HDR_LEN + PROTO_MAX_ERRMSG];

    ck_assert_int_eq(proto_enc_error(b, sizeof(b), PROTO_OP_OPEN, 1, 0, "x"), -EINVAL);
    ck_assert_int_eq(proto_enc_error(b, sizeof(b), PROTO_OP_OPEN, 1, 1, "x"), -EINVAL);
    ck_assert_int_eq(proto_enc_error(b, sizeof(b), PROTO_OP_OPEN, 1, -4096, "x"), -EINVAL);
    ck_assert_int_eq(proto_enc_error(b, sizeof(b), PROTO_OP_OPEN, 1, INT32_MIN, "x"), -EINVAL);
    ck_assert_int_eq(proto_enc_error(b, sizeof(b), PROTO_OP_OPEN, 1, INT32_MAX, "x"), -EINVAL);
}
END_TEST

/* Several messages back to back in one buffer decode one after another. */
START_TEST(test_sequence)
{
    uint8_t b[512];
    size_t len = 0, used, off = 0;
    proto_read r = { 3, 100, 200 };
    proto_hello he = { 1, 2, 3, 4, 5, 6, 0 };
    proto_msg m;
    ssize_t n;

    n = proto_enc_hello(b + len, sizeof(b) - len, 0, 1, &he);
    ck_assert_int_gt(n, 0);
    len += (size_t)n;
    n = proto_enc_open(b + len, sizeof(b) - len, 2, "/p", 2);
    ck_assert_int_gt(n, 0);
    len += (size_t)n;
    n = proto_enc_read(b + len, sizeof(b) - len, 3, &r);
    ck_assert_int_gt(n, 0);
    len += (size_t)n;
    n = proto_enc_error(b + len, sizeof(b) - len, PROTO_OP_CLOSE, 4, -EBADF, "bad");
    ck_assert_int_gt(n, 0);
    len += (size_t)n;
    for (uint32_t id = 1; id <= 4; id++) {
        ck_assert_int_eq(proto_decode(b + off, len - off, &m, &used), 0);
        ck_assert_uint_eq(m.h.req_id, id);
        ck_assert_uint_le(used, len - off);
        off += used;
    }
    ck_assert_uint_eq(off, len);
    ck_assert_int_eq(proto_decode(b + off, len - off, &m, &used), PROTO_NEED_MORE);
}
END_TEST

/* ---- hostile input ------------------------------------------------------- */

/* Decode a mutated copy of a valid CLOSE request or reply. */
static int dec_mutated(uint16_t flags, int32_t status, int at, const uint8_t *bytes, int nbytes)
{
    uint8_t b[PROTO_HDR_LEN + 4] = { 0 };
    proto_msg m;
    size_t used;

    proto_encode_hdr(b, PROTO_OP_CLOSE, flags, 0x5eed, status, flags ? 0 : 4);
    memcpy(b + at, bytes, (size_t)nbytes);
    return dec(b, flags ? PROTO_HDR_LEN : sizeof(b), &m, &used);
}

/* STAGED: only on a successful OPEN or OPENX reply. */
START_TEST(test_staged_flag)
{
    uint8_t b[PROTO_HDR_LEN + PROTO_OPENX_FIXED + PROTO_READX_PREFIX];
    proto_attr a = { .handle = 3, .chunk_size = 1u << 20, .size = 10, .mode = 0100644 };
    proto_msg m;
    size_t used;
    ssize_t n;

    n = proto_enc_attr(b, sizeof(b), 7, &a);
    ck_assert_int_gt(n, 0);
    proto_mark_staged(b);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.h.flags, PROTO_F_REPLY | PROTO_F_STAGED);
    ck_assert_uint_eq(m.u.attr.size, 10);
    n = proto_enc_openx_reply(b, sizeof(b), 8, &a, -EAGAIN, NULL, 0, 0);
    ck_assert_int_gt(n, 0);
    proto_mark_staged(b);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.h.flags, PROTO_F_REPLY | PROTO_F_STAGED);
    /* A request, an error reply, another opcode's reply: refused. */
    {
        static const uint8_t open_op = PROTO_OP_OPEN;
        ck_assert_int_eq(dec_mutated(PROTO_F_STAGED, 0, 5, &open_op, 1), -EPROTO);
        ck_assert_int_eq(dec_mutated(PROTO_F_REPLY | PROTO_F_STAGED, 0, 5, &open_op, 1) == 0, 0);
        ck_assert_int_eq(dec_mutated(PROTO_F_REPLY | PROTO_F_STAGED, 0, 0, &open_op, 0), -EPROTO);
    }
    n = proto_enc_error(b, sizeof(b), PROTO_OP_OPEN, 9, -ENOENT, NULL);
    ck_assert_int_gt(n, 0);
    proto_mark_staged(b);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), -EPROTO);
}
END_TEST

START_TEST(test_bad_magic)
{
    for (int i = 0; i < 4; i++) {
        uint8_t b[PROTO_HDR_LEN + 4];
        proto_msg m;
        proto_hdr h;
        size_t used;

        ck_assert_int_eq(proto_enc_close(b, sizeof(b), 9, 1), sizeof(b));
        b[i] ^= 0x20;                               /* "GRNY" -> "gRNY" ... */
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTO);
        ck_assert_int_eq(proto_decode_hdr(b, PROTO_HDR_LEN, &h), -EPROTO);
        /* The header was readable: filled for an error reply. */
        ck_assert_uint_eq(m.h.req_id, 9);
        ck_assert_uint_eq(h.req_id, 9);
    }
    {
        uint8_t z[PROTO_HDR_LEN] = { 0 };
        proto_msg m;
        size_t used;
        ck_assert_int_eq(dec(z, sizeof(z), &m, &used), -EPROTO);
    }
}
END_TEST

START_TEST(test_bad_version)
{
    static const uint8_t vs[] = { 0, 1, 3, 0x82, 255 };   /* 1: the first wave's */

    for (size_t i = 0; i < sizeof(vs); i++) {
        ck_assert_int_eq(dec_mutated(0, 0, 4, &vs[i], 1), -EPROTONOSUPPORT);
        ck_assert_int_eq(dec_mutated(PROTO_F_REPLY, 0, 4, &vs[i], 1), -EPROTONOSUPPORT);
    }
}
END_TEST

START_TEST(test_body_len_over_max)
{
    static const uint32_t lens[] = { PROTO_MAX_BODY + 1, PROTO_MAX_BODY + 2, 0x80000000u,
                                     0xFFFFFFFFu };
    uint8_t b[PROTO_HDR_LEN];
    proto_msg m;
    proto_hdr h;
    size_t used;

    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        for (uint8_t op = PROTO_OP_HELLO; op < PROTO_OP_MAX_; op++) {
            for (int rep = 0; rep < 2; rep++) {
                /* Decided from the 24 header bytes alone, no body present. */
                proto_encode_hdr(b, op, rep ? PROTO_F_REPLY : 0, 0x1234, 0, lens[i]);
                ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EMSGSIZE);
                ck_assert_int_eq(proto_decode_hdr(b, sizeof(b), &h), -EMSGSIZE);
                /* -EMSGSIZE vouches for the rest of the header. */
                ck_assert_uint_eq(m.h.req_id, 0x1234);
                ck_assert_uint_eq(m.h.op, op);
                ck_assert_uint_eq(h.body_len, lens[i]);
            }
        }
        /* Other header faults win over the size, so -EMSGSIZE never comes
         * with an op the sender could not echo. */
        proto_encode_hdr(b, 200, 0, 1, 0, lens[i]);
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTO);
        proto_encode_hdr(b, 0, 0, 1, 0, lens[i]);
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTO);
        proto_encode_hdr(b, PROTO_OP_READ, 0x8000, 1, 0, lens[i]);
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTO);
        proto_encode_hdr(b, PROTO_OP_READ, 0, 1, -5, lens[i]);
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTO);
        proto_encode_hdr(b, PROTO_OP_READ, 0, 1, 0, lens[i]);
        b[4] = 1;
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTONOSUPPORT);
        b[0] = 0;
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTO);
    }
    /* PROTO_MAX_BODY itself is allowed (a STATS reply may be that long). */
    proto_encode_hdr(b, PROTO_OP_STATS, PROTO_F_REPLY, 1, 0, PROTO_MAX_BODY);
    ck_assert_int_eq(dec(b, sizeof(b), &m, &used), PROTO_NEED_MORE);
    {
        /* One text record that fills the body exactly: 1 + 1 + 1 + 4 + len. */
        static uint8_t body[PROTO_MAX_BODY], text[PROTO_MAX_BODY];
        size_t off = 0;
        uint8_t *big;
        ck_assert_int_eq(proto_rec_str(body, sizeof(body), &off, "x", text, PROTO_MAX_BODY - 7), 0);
        ck_assert_uint_eq(off, PROTO_MAX_BODY);
        big = build(PROTO_OP_STATS, PROTO_F_REPLY, 1, 0, PROTO_MAX_BODY, body);
        ck_assert_int_eq(dec(big, PROTO_HDR_LEN + PROTO_MAX_BODY, &m, &used), 0);
        ck_assert_uint_eq(used, PROTO_MAX_MSG);
        ck_assert_uint_eq(m.u.recs.len, PROTO_MAX_BODY);
        free(big);
    }
}
END_TEST

/* HINT: ranges round-trip in order, byte-exact per PROTOCOL.md; malformed
 * bodies (short, a zero or oversize path length, a count that disagrees,
 * unknown flags, too many ranges) are refused. */
START_TEST(test_hint)
{
    static uint8_t buf[PROTO_HDR_LEN + PROTO_MAX_BODY];
    static proto_hint_ent many[PROTO_MAX_HINTS + 1];
    proto_hint_ent in[3] = {
        { 0, 0, "/data/a", 7 },
        { 4096, 1u << 20, "/data/bb", 8 },
        { UINT64_MAX - 1, 1, "/x", 2 },
    }, out;
    proto_msg m;
    size_t used, off = 0;
    ssize_t n = proto_enc_hint(buf, sizeof(buf), 77, 0, in, 3);
    uint8_t *b = buf + PROTO_HDR_LEN;

    ck_assert_int_eq(n, PROTO_HDR_LEN + 8 + 3 * 20 + 7 + 8 + 2);
    ck_assert_uint_eq(le32(b), 0);
    ck_assert_uint_eq(le32(b + 4), 3);
    ck_assert_uint_eq(le32(b + 8 + 16), 7);             /* path_len after off, len */
    ck_assert_int_eq(memcmp(b + 8 + 20, "/data/a", 7), 0);
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(used, (size_t)n);
    ck_assert_uint_eq(m.h.op, PROTO_OP_HINT);
    ck_assert_uint_eq(m.u.hint.count, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(proto_hint_next(&m, &off, &out), 1);
        ck_assert_uint_eq(out.off, in[i].off);
        ck_assert_uint_eq(out.len, in[i].len);
        ck_assert_uint_eq(out.path_len, in[i].path_len);
        ck_assert_int_eq(memcmp(out.path, in[i].path, out.path_len), 0);
    }
    ck_assert_int_eq(proto_hint_next(&m, &off, &out), 0);
    /* CLEAR with no ranges. */
    n = proto_enc_hint(buf, sizeof(buf), 78, PROTO_HINT_CLEAR, NULL, 0);
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.u.hint.flags, PROTO_HINT_CLEAR);
    ck_assert_uint_eq(m.u.hint.count, 0);
    /* Malformed. */
    n = proto_enc_hint(buf, sizeof(buf), 79, 0, in, 3);
    b[4] = 4;                                           /* count 4, three present */
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), -EPROTO);
    b[4] = 2;                                           /* count 2, bytes left over */
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), -EPROTO);
    b[4] = 3;
    b[0] = 2;                                           /* unknown flag */
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), -EPROTO);
    b[0] = 0;
    b[8 + 16] = 0;                                      /* empty path */
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), -EPROTO);
    b[8 + 16] = 200;                                    /* runs past the body */
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), -EPROTO);
    b[8 + 16] = 0;
    b[8 + 18] = 1;                                      /* 65536 > PROTO_MAX_PATH */
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), -EMSGSIZE);
    b[8 + 18] = 0;
    b[8 + 16] = 7;
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), 0);
    b[4] = (PROTO_MAX_HINTS + 1) & 0xff;
    b[5] = (PROTO_MAX_HINTS + 1) >> 8;
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), -EMSGSIZE);
    ck_assert_int_eq(proto_enc_hint(buf, PROTO_HDR_LEN + 4, 1, 0, in, 1), -EMSGSIZE);
    for (size_t i = 0; i <= PROTO_MAX_HINTS; i++)
        many[i] = in[2];
    ck_assert_int_eq(proto_enc_hint(buf, sizeof(buf), 1, 0, many, PROTO_MAX_HINTS + 1), -EMSGSIZE);
    ck_assert_int_gt(proto_enc_hint(buf, sizeof(buf), 1, 0, many, PROTO_MAX_HINTS), 0);
    ck_assert_int_eq(proto_enc_hint(buf, sizeof(buf), 1, 4, in, 1), -EMSGSIZE);
    /* A reply is bodiless. */
    n = proto_enc_ok(buf, sizeof(buf), PROTO_OP_HINT, 5);
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), 0);
    ck_assert_str_eq(proto_op_name(PROTO_OP_HINT), "hint");
}
END_TEST

/* ADMIN WARMUP carries many "path" records, up to a whole body; one byte
 * more is refused by the encoder. */
START_TEST(test_admin_warmup_arg)
{
    static uint8_t buf[PROTO_HDR_LEN + PROTO_MAX_BODY], recs[PROTO_MAX_BODY];
    static char path[PROTO_MAX_PATH];
    proto_msg m;
    size_t used, off = 0, n1;
    ssize_t n;
    int np = 0;

    memset(path, 'a', sizeof(path));
    path[0] = '/';
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "job", 0), 0);
    while (proto_rec_str(recs, sizeof(recs) - 1, &off, "path", path, 1000) == 0)
        np++;
    n = proto_enc_admin(buf, sizeof(buf), 1, PROTO_ADMIN_WARMUP, recs, off);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.u.admin.len, off);
    n1 = off;
    ck_assert_int_gt(np, 100);
    /* A body one past the limit. */
    {
        size_t o2 = 0;
        static uint8_t big[PROTO_MAX_BODY], text[PROTO_MAX_BODY];
        ck_assert_int_eq(proto_rec_str(big, sizeof(big), &o2, "path", text, PROTO_MAX_BODY - 10), 0);
        ck_assert_uint_eq(o2, PROTO_MAX_BODY - 10 + 10);
        ck_assert_int_eq(proto_enc_admin(buf, sizeof(buf), 1, PROTO_ADMIN_WARMUP, big, o2), -EMSGSIZE);
    }
    /* A record list that does not parse is refused both ways. */
    recs[n1 - 1000 - 5] = 9;            /* the last record's kind: unknown */
    ck_assert_int_eq(proto_enc_admin(buf, sizeof(buf), 1, PROTO_ADMIN_WARMUP, recs, n1), -EMSGSIZE);
    buf[PROTO_HDR_LEN + 1 + n1 - 1000 - 5] = 9;
    ck_assert_int_eq(dec(buf, (size_t)n, &m, &used), -EPROTO);
}
END_TEST

START_TEST(test_bad_opcode)
{
    static const uint8_t ops[] = { 0, PROTO_OP_MAX_, PROTO_OP_MAX_ + 1, 200, 255 };
    uint8_t b[PROTO_HDR_LEN];
    proto_msg m;
    size_t used;

    for (size_t i = 0; i < sizeof(ops); i++) {
        ck_assert_int_eq(dec_mutated(0, 0, 5, &ops[i], 1), -EPROTO);
        ck_assert_int_eq(dec_mutated(PROTO_F_REPLY, 0, 5, &ops[i], 1), -EPROTO);
        proto_encode_hdr(b, ops[i], PROTO_F_REPLY, 1, -EIO, 0);
        ck_assert_int_eq(dec(b, sizeof(b), &m, &used), -EPROTO);
        ck_assert_str_eq(proto_op_name(ops[i]), "?");
    }
    ck_assert_str_eq(proto_op_name(PROTO_OP_HELLO), "hello");
    ck_assert_str_eq(proto_op_name(PROTO_OP_OPEN), "open");
    ck_assert_str_eq(proto_op_name(PROTO_OP_CLOSE), "close");
    ck_assert_str_eq(proto_op_name(PROTO_OP_READ), "read");
    ck_assert_str_eq(proto_op_name(PROTO_OP_STATS), "stats");
    ck_assert_str_eq(proto_op_name(UINT_MAX), "?");
}
END_TEST

START_TEST(test_reserved_and_flags)
{
    for (int i = 0; i < 4; i++) {
        uint8_t one = 1, ff = 0xff;
        ck_assert_int_eq(dec_mutated(0, 0, 20 + i, &one, 1), -EPROTO);
        ck_assert_int_eq(dec_mutated(PROTO_F_REPLY, 0, 20 + i, &ff, 1), -EPROTO);
    }
    /* Bit 1 is NOREPLY: allowed on a request, never on a reply. */
    for (int bit = 1; bit < 16; bit++) {
        uint8_t f[2];
        f[0] = (uint8_t)(1u << bit);
        f[1] = (uint8_t)((1u << bit) >> 8);
        ck_assert_int_eq(dec_mutated(0, 0, 6, f, 2), bit == 1 ? 0 : -EPROTO);
        f[0] |= 1;
        ck_assert_int_eq(dec_mutated(PROTO_F_REPLY, 0, 6, f, 2), -EPROTO);
    }
    ck_assert_uint_eq(PROTO_F_NOREPLY, 2);
}
END_TEST

START_TEST(test_bad_status)
{
    static const int32_t req_bad[] = { -1, 1, -4095, INT32_MIN, INT32_MAX };
    static const int32_t rep_bad[] = { 1, 2, INT32_MAX, -4096, -65536, INT32_MIN };
    static const int32_t rep_ok[] = { 0, -1, -EPROTO, -4095 };

    for (size_t i = 0; i < sizeof(req_bad) / sizeof(req_bad[0]); i++) {
        uint8_t s[4];
        wr32(s, (uint32_t)req_bad[i]);
        ck_assert_int_eq(dec_mutated(0, 0, 16, s, 4), -EPROTO);
    }
    for (size_t i = 0; i < sizeof(rep_bad) / sizeof(rep_bad[0]); i++) {
        uint8_t s[4];
        wr32(s, (uint32_t)rep_bad[i]);
        ck_assert_int_eq(dec_mutated(PROTO_F_REPLY, 0, 16, s, 4), -EPROTO);
    }
    for (size_t i = 0; i < sizeof(rep_ok) / sizeof(rep_ok[0]); i++) {
        uint8_t s[4];
        wr32(s, (uint32_t)rep_ok[i]);
        ck_assert_int_eq(dec_mutated(PROTO_F_REPLY, 0, 16, s, 4), 0);
    }
}
END_TEST

/* Fixed-size bodies one byte short and one byte long. */
START_TEST(test_body_sizes)
{
    static const struct { uint8_t op; uint16_t flags; uint32_t len; } fixed[] = {
        { PROTO_OP_HELLO, 0, PROTO_HELLO_LEN },
        { PROTO_OP_HELLO, PROTO_F_REPLY, PROTO_HELLO_LEN },
        { PROTO_OP_OPEN, PROTO_F_REPLY, PROTO_ATTR_LEN },
        { PROTO_OP_CLOSE, 0, 4 },
        { PROTO_OP_CLOSE, PROTO_F_REPLY, 0 },
        { PROTO_OP_READ, 0, PROTO_READ_LEN },
        { PROTO_OP_STATS, 0, 0 },
    };

    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        for (int d = -1; d <= 1; d++) {
            uint32_t n;
            uint8_t *b;
            proto_msg m;
            size_t used;

            if (d < 0 && fixed[i].len == 0)
                continue;
            n = fixed[i].len + (uint32_t)d;
            b = build(fixed[i].op, fixed[i].flags, 1, 0, n, NULL);
            ck_assert_msg(dec(b, PROTO_HDR_LEN + n, &m, &used) == (d ? -EPROTO : 0),
                          "op %u flags %u body %u", fixed[i].op, fixed[i].flags, n);
            free(b);
        }
    }
}
END_TEST

START_TEST(test_field_limits)
{
    uint8_t *b;
    proto_msg m;
    size_t used;
    uint8_t body[PROTO_READ_LEN] = { 0 };

    /* OPEN: empty path, and one byte over PROTO_MAX_PATH. */
    b = build(PROTO_OP_OPEN, 0, 1, 0, 0, NULL);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN, &m, &used), -EPROTO);
    free(b);
    b = build(PROTO_OP_OPEN, 0, 1, 0, PROTO_MAX_PATH + 1, NULL);
    b[PROTO_HDR_LEN] = '/';
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + PROTO_MAX_PATH + 1, &m, &used), -EMSGSIZE);
    ck_assert_uint_eq(m.h.req_id, 1);
    free(b);

    /* READ request: len one over PROTO_MAX_DATA, and all ones. */
    wr32(body + 4, PROTO_MAX_DATA + 1);
    b = build(PROTO_OP_READ, 0, 2, 0, PROTO_READ_LEN, body);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + PROTO_READ_LEN, &m, &used), -EMSGSIZE);
    free(b);
    wr32(body + 4, UINT32_MAX);
    b = build(PROTO_OP_READ, 0, 2, 0, PROTO_READ_LEN, body);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + PROTO_READ_LEN, &m, &used), -EMSGSIZE);
    free(b);

    /* READ reply: payload one over PROTO_MAX_DATA. */
    b = build(PROTO_OP_READ, PROTO_F_REPLY, 3, 0, PROTO_MAX_DATA + 1, NULL);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + PROTO_MAX_DATA + 1, &m, &used), -EMSGSIZE);
    free(b);

    /* Error text one over PROTO_MAX_ERRMSG; exactly PROTO_MAX_ERRMSG is fine. */
    b = build(PROTO_OP_OPEN, PROTO_F_REPLY, 4, -ENOENT, PROTO_MAX_ERRMSG + 1, NULL);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + PROTO_MAX_ERRMSG + 1, &m, &used), -EMSGSIZE);
    free(b);
    b = build(PROTO_OP_OPEN, PROTO_F_REPLY, 4, -ENOENT, PROTO_MAX_ERRMSG, NULL);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + PROTO_MAX_ERRMSG, &m, &used), 0);
    free(b);
}
END_TEST

/* ---- encoder limits ------------------------------------------------------ */

static const proto_hello enc_hello_v = { 1, 2, 3, 4, 5, 6, 0 };
static const proto_attr enc_attr_v = { .handle = 1, .size = 2 };
static const proto_read enc_read_v = { 1, PROTO_MAX_DATA, 3 };
static const proto_read enc_read_big = { 1, PROTO_MAX_DATA + 1, 3 };

static ssize_t e_hello(void *b, size_t cap, const void *a)
{
    return proto_enc_hello(b, cap, PROTO_F_REPLY, 1, a);
}
static ssize_t e_open(void *b, size_t cap, const void *a)
{
    return proto_enc_open(b, cap, 1, a, strlen(a));
}
static ssize_t e_attr(void *b, size_t cap, const void *a)
{
    return proto_enc_attr(b, cap, 1, a);
}
static ssize_t e_close(void *b, size_t cap, const void *a)
{
    return proto_enc_close(b, cap, 1, 5);
}
static ssize_t e_read(void *b, size_t cap, const void *a)
{
    return proto_enc_read(b, cap, 1, a);
}
static ssize_t e_stats(void *b, size_t cap, const void *a)
{
    return proto_enc_stats_req(b, cap, 1);
}
static ssize_t e_ok(void *b, size_t cap, const void *a)
{
    return proto_enc_ok(b, cap, PROTO_OP_CLOSE, 1);
}
static ssize_t e_error(void *b, size_t cap, const void *a)
{
    return proto_enc_error(b, cap, PROTO_OP_OPEN, 1, -ENOENT, a);
}

START_TEST(test_encoder_caps)
{
    char longtext[PROTO_MAX_ERRMSG + 20];
    static const struct { enc_fn fn; const void *arg; size_t len; } encs[] = {
        { e_hello, &enc_hello_v, PROTO_HDR_LEN + PROTO_HELLO_LEN },
        { e_open, "/data/a", PROTO_HDR_LEN + 7 },
        { e_attr, &enc_attr_v, PROTO_HDR_LEN + PROTO_ATTR_LEN },
        { e_close, NULL, PROTO_HDR_LEN + 4 },
        { e_read, &enc_read_v, PROTO_HDR_LEN + PROTO_READ_LEN },
        { e_stats, NULL, PROTO_HDR_LEN },
        { e_ok, NULL, PROTO_HDR_LEN },
        { e_error, "not found", PROTO_HDR_LEN + 9 },
        { e_error, NULL, PROTO_HDR_LEN },
    };

    for (size_t i = 0; i < sizeof(encs) / sizeof(encs[0]); i++) {
        uint8_t *msg = NULL;
        proto_msg m;
        size_t used;

        /* Exactly enough room: encoded, and decodes whole. */
        ck_assert_int_eq(enc_exact(encs[i].fn, encs[i].arg, encs[i].len, &msg),
                         (ssize_t)encs[i].len);
        ck_assert_int_eq(dec(msg, encs[i].len, &m, &used), 0);
        ck_assert_uint_eq(used, encs[i].len);
        free(msg);
        /* One byte short, no room at all, a header's worth only. */
        ck_assert_int_eq(enc_exact(encs[i].fn, encs[i].arg, encs[i].len - 1, NULL), -EMSGSIZE);
        ck_assert_int_eq(enc_exact(encs[i].fn, encs[i].arg, 0, NULL), -EMSGSIZE);
        if (encs[i].len > PROTO_HDR_LEN)
            ck_assert_int_eq(enc_exact(encs[i].fn, encs[i].arg, PROTO_HDR_LEN, NULL),
                             -EMSGSIZE);
    }

    /* An error text cut to PROTO_MAX_ERRMSG needs only that much room. */
    memset(longtext, 'w', sizeof(longtext) - 1);
    longtext[sizeof(longtext) - 1] = '\0';
    ck_assert_int_eq(enc_exact(e_error, longtext, PROTO_HDR_LEN + PROTO_MAX_ERRMSG, NULL),
                     PROTO_HDR_LEN + PROTO_MAX_ERRMSG);
    ck_assert_int_eq(enc_exact(e_error, longtext, PROTO_HDR_LEN + PROTO_MAX_ERRMSG - 1, NULL),
                     -EMSGSIZE);
}
END_TEST

START_TEST(test_encoder_field_limits)
{
    size_t cap = PROTO_HDR_LEN + PROTO_MAX_PATH + 16;
    uint8_t *b = malloc(cap);
    char *path = malloc(PROTO_MAX_PATH + 1);

    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(path);
    memset(path, 'p', PROTO_MAX_PATH + 1);
    ck_assert_int_eq(proto_enc_open(b, cap, 1, path, 0), -EMSGSIZE);
    ck_assert_int_eq(proto_enc_open(b, cap, 1, path, PROTO_MAX_PATH + 1), -EMSGSIZE);
    ck_assert_int_eq(proto_enc_open(b, cap, 1, path, SIZE_MAX), -EMSGSIZE);
    ck_assert_int_eq(proto_enc_open(b, cap, 1, path, PROTO_MAX_PATH),
                     PROTO_HDR_LEN + PROTO_MAX_PATH);
    ck_assert_int_eq(proto_enc_open(b, PROTO_HDR_LEN + PROTO_MAX_PATH - 1, 1, path,
                                    PROTO_MAX_PATH), -EMSGSIZE);
    ck_assert_int_eq(enc_exact(e_read, &enc_read_big, 64, NULL), -EMSGSIZE);
    free(b);
    free(path);
}
END_TEST

/* ---- random bytes -------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t xorshift(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* 200k random buffers of 0..300 bytes, half of them with a plausible header
 * so that the body decoders are reached too.  Only 0, PROTO_NEED_MORE or a
 * known -errno may come back, with *used within the buffer on 0. */
START_TEST(test_random_bytes)
{
    uint8_t src[300];
    unsigned counts[5] = { 0 };     /* ok, need more, EPROTO, EPROTONOSUPPORT, EMSGSIZE */

    for (int it = 0; it < 200000; it++) {
        size_t len = (size_t)(xorshift() % 301), used = SIZE_MAX;
        proto_msg m;
        int rc;

        for (size_t i = 0; i < len; i++)
            src[i] = (uint8_t)xorshift();
        if (len >= PROTO_HDR_LEN && (xorshift() & 1)) {
            uint64_t r = xorshift();
            uint16_t flags = (r & 0xf) == 0 ? (uint16_t)(r >> 8) : (uint16_t)((r >> 4) & 1);
            uint32_t blen = (r >> 24 & 7) == 0 ? (uint32_t)(r >> 32)
                                               : (uint32_t)((r >> 32) % (len - PROTO_HDR_LEN + 9));
            int32_t status = 0;
            uint8_t op = (uint8_t)((r >> 40) % 8);

            if ((r >> 50 & 3) == 0)
                status = (int32_t)(uint32_t)xorshift();
            else if ((flags & PROTO_F_REPLY) && (r >> 52 & 1))
                status = -(int32_t)(xorshift() % 4200);
            uint64_t r2 = xorshift();

            proto_encode_hdr(src, op, flags, (uint32_t)r, status, blen);
            if ((r2 & 15) == 0)                         /* reserved */
                src[20 + (r2 >> 4 & 3)] = (uint8_t)(r2 >> 8 | 1);
            if ((r2 >> 16 & 15) == 0)                   /* version */
                src[4] = (uint8_t)(r2 >> 20);
            if (op == PROTO_OP_READ && !(flags & PROTO_F_REPLY) && (r2 >> 32 & 1) &&
                len >= PROTO_HDR_LEN + 8)               /* READ len near its limit */
                wr32(src + PROTO_HDR_LEN + 4, (uint32_t)(r2 >> 33) % (PROTO_MAX_DATA + 2));
        }
        rc = dec(src, len, &m, &used);
        if (rc == 0) {
            counts[0]++;
            QUICK_ASSERT(len >= PROTO_HDR_LEN, "iteration %d", it);
            QUICK_ASSERT(used <= len, "iteration %d: used %zu len %zu", it, used, len);
            QUICK_ASSERT(used == PROTO_HDR_LEN + (size_t)m.h.body_len, "iteration %d", it);
            QUICK_ASSERT(proto_decode_hdr(held, len, &m.h) == 0, "iteration %d", it);
            if (m.h.op == PROTO_OP_STATS && (m.h.flags & PROTO_F_REPLY) && m.h.status == 0) {
                size_t off = 0, nl;
                const char *name;
                uint64_t v;
                int s;
                while ((s = stats_next(m.u.recs.p, m.u.recs.len, &off, &name, &nl, &v)) == 1)
                    QUICK_ASSERT(off <= m.u.recs.len, "iteration %d", it);
                QUICK_ASSERT(s == 0 || s == -EPROTO, "iteration %d: %d", it, s);
            }
        } else if (rc == PROTO_NEED_MORE) {
            counts[1]++;
        } else {
            QUICK_ASSERT(rc == -EPROTO || rc == -EPROTONOSUPPORT || rc == -EMSGSIZE,
                         "iteration %d: rc %d", it, rc);
            counts[rc == -EPROTO ? 2 : rc == -EPROTONOSUPPORT ? 3 : 4]++;
            if (len >= PROTO_HDR_LEN) {
                /* A header fault is the same fault through either entry. */
                proto_hdr h;
                int hrc = proto_decode_hdr(held, len, &h);
                QUICK_ASSERT(hrc == 0 || hrc == rc, "iteration %d: %d %d", it, hrc, rc);
            }
        }
    }
    /* The planted headers reach every outcome (the sequence is fixed). */
    for (int i = 0; i < 5; i++)
        ck_assert_msg(counts[i] > 100, "outcome %d seen %u times", i, counts[i]);
}
END_TEST

/* READX and RELEASE: round trips, prefixes, and hostile counts. */
START_TEST(test_readx_release)
{
    uint8_t b[PROTO_HDR_LEN + PROTO_READX_PREFIX + PROTO_MAX_EXTENTS * PROTO_EXTENT_LEN + 64];
    proto_extent ext[PROTO_MAX_EXTENTS], got;
    proto_read r = { .handle = 3, .len = PROTO_MAX_READX, .off = 1ull << 40 };
    uint32_t ids[PROTO_MAX_RELEASE + 1];
    proto_msg m;
    size_t used;
    ssize_t n;

    n = proto_enc_readx(b, sizeof(b), 9, &r);
    ck_assert_int_eq(n, PROTO_HDR_LEN + PROTO_READ_LEN);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.h.op, PROTO_OP_READX);
    ck_assert_uint_eq(m.u.read.len, PROTO_MAX_READX);
    ck_assert_uint_eq(m.u.read.off, 1ull << 40);
    r.len = PROTO_MAX_READX + 1;
    ck_assert_int_eq(proto_enc_readx(b, sizeof(b), 9, &r), -EMSGSIZE);
    /* A hand-made READX asking for too much is refused by the decoder. */
    proto_encode_hdr(b, PROTO_OP_READX, 0, 9, 0, PROTO_READ_LEN);
    memset(b + PROTO_HDR_LEN, 0xff, PROTO_READ_LEN);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + PROTO_READ_LEN, &m, &used), -EMSGSIZE);

    for (uint32_t i = 0; i < PROTO_MAX_EXTENTS; i++)
        ext[i] = (proto_extent){ i, 1000 + i, (uint64_t)i << 33, 4096 * (i + 1), i & 3 };
    n = proto_enc_readx_reply(b, sizeof(b), 11, ext, PROTO_MAX_EXTENTS, 5);
    ck_assert_int_eq(n, PROTO_HDR_LEN + PROTO_READX_PREFIX + PROTO_MAX_EXTENTS * PROTO_EXTENT_LEN);
    memcpy(b + n, "hello", 5);
    ck_assert_int_eq(dec(b, (size_t)n + 5, &m, &used), 0);
    ck_assert_uint_eq(used, (size_t)n + 5);
    ck_assert_uint_eq(m.u.readx.nextents, PROTO_MAX_EXTENTS);
    ck_assert_uint_eq(m.u.readx.inline_len, 5);
    ck_assert_int_eq(memcmp(m.u.readx.inline_data, "hello", 5), 0);
    for (uint32_t i = 0; i < PROTO_MAX_EXTENTS; i++) {
        proto_extent_at(&m, i, &got);
        ck_assert_uint_eq(got.seg, i);
        ck_assert_uint_eq(got.lease, 1000 + i);
        ck_assert_uint_eq(got.off, (uint64_t)i << 33);
        ck_assert_uint_eq(got.len, 4096 * (i + 1));
        ck_assert_uint_eq(got.flags, i & 3);    /* FD and NOKEEP */
    }
    /* An extent flag beyond FD and NOKEEP is malformed. */
    b[PROTO_HDR_LEN + PROTO_READX_PREFIX + 20] = 4;
    ck_assert_int_eq(dec(b, (size_t)n + 5, &m, &used), -EPROTO);
    b[PROTO_HDR_LEN + PROTO_READX_PREFIX + 20] = 0;
    /* Every prefix is "need more"; a count that disagrees with the length is
     * malformed; too many extents is refused. */
    for (size_t k = 0; k < (size_t)n + 5; k++)
        ck_assert_int_eq(dec(b, k, &m, &used), PROTO_NEED_MORE);
    b[PROTO_HDR_LEN] = 3;
    ck_assert_int_eq(dec(b, (size_t)n + 5, &m, &used), -EPROTO);
    b[PROTO_HDR_LEN] = PROTO_MAX_EXTENTS + 1;
    ck_assert_int_eq(dec(b, (size_t)n + 5, &m, &used), -EMSGSIZE);
    ck_assert_int_eq(proto_enc_readx_reply(b, sizeof(b), 1, ext, PROTO_MAX_EXTENTS + 1, 0),
                     -EMSGSIZE);
    ck_assert_int_eq(proto_enc_readx_reply(b, sizeof(b), 1, ext, 0, PROTO_MAX_DATA + 1),
                     -EMSGSIZE);
    n = proto_enc_readx_reply(b, sizeof(b), 12, NULL, 0, 0);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.u.readx.nextents + m.u.readx.inline_len, 0);

    for (uint32_t i = 0; i <= PROTO_MAX_RELEASE; i++)
        ids[i] = i * 7;
    {
        static uint8_t rb[PROTO_HDR_LEN + 4 * (PROTO_MAX_RELEASE + 1)];
        n = proto_enc_release(rb, sizeof(rb), 13, ids, PROTO_MAX_RELEASE);
        ck_assert_int_eq(n, PROTO_HDR_LEN + 4 * PROTO_MAX_RELEASE);
        ck_assert_int_eq(dec(rb, (size_t)n, &m, &used), 0);
        ck_assert_uint_eq(m.u.release.count, PROTO_MAX_RELEASE);
        ck_assert_uint_eq(proto_release_at(&m, PROTO_MAX_RELEASE - 1), (PROTO_MAX_RELEASE - 1) * 7);
        ck_assert_int_eq(proto_enc_release(rb, sizeof(rb), 13, ids, 0), -EMSGSIZE);
        ck_assert_int_eq(proto_enc_release(rb, sizeof(rb), 13, ids, PROTO_MAX_RELEASE + 1),
                         -EMSGSIZE);
        proto_encode_hdr(rb, PROTO_OP_RELEASE, 0, 1, 0, 4 * (PROTO_MAX_RELEASE + 1));
        ck_assert_int_eq(dec(rb, sizeof(rb), &m, &used), -EMSGSIZE);
        proto_encode_hdr(rb, PROTO_OP_RELEASE, 0, 1, 0, 6);
        ck_assert_int_eq(dec(rb, PROTO_HDR_LEN + 6, &m, &used), -EPROTO);
    }
}
END_TEST

/* ADMIN: round trip of typed arguments, an empty or unknown command,
 * malformed records; replies are records too. */
START_TEST(test_admin)
{
    static uint8_t b[PROTO_HDR_LEN + PROTO_MAX_BODY], recs[256];
    proto_msg m;
    proto_rec r;
    size_t used, off = 0, ro = 0;
    ssize_t n;

    ck_assert_int_eq(proto_rec_str(recs, sizeof(recs), &off, "path", "/data/x", 7), 0);
    n = proto_enc_admin(b, sizeof(b), 5, PROTO_ADMIN_PIN, recs, off);
    ck_assert_int_eq(n, (ssize_t)(PROTO_HDR_LEN + 1 + off));
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.h.op, PROTO_OP_ADMIN);
    ck_assert_uint_eq(m.u.admin.cmd, PROTO_ADMIN_PIN);
    ck_assert_uint_eq(m.u.admin.len, off);
    ck_assert_int_eq(proto_rec_next(m.u.admin.recs, m.u.admin.len, &ro, &r), 1);
    ck_assert(proto_rec_is(&r, "path"));
    ck_assert(!proto_rec_is(&r, "pat"));
    ck_assert_uint_eq(r.kind, PROTO_REC_STR);
    ck_assert_uint_eq(r.len, 7);
    ck_assert_int_eq(memcmp(r.str, "/data/x", 7), 0);
    ck_assert_int_eq(proto_rec_next(m.u.admin.recs, m.u.admin.len, &ro, &r), 0);
    n = proto_enc_admin(b, sizeof(b), 6, PROTO_ADMIN_HEALTH, NULL, 0);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.u.admin.len, 0);
    for (size_t k = 0; k < (size_t)n; k++)
        ck_assert_int_eq(dec(b, k, &m, &used), PROTO_NEED_MORE);
    ck_assert_int_eq(proto_enc_admin(b, sizeof(b), 1, 0, NULL, 0), -EMSGSIZE);
    ck_assert_int_eq(proto_enc_admin(b, sizeof(b), 1, PROTO_ADMIN_MAX_, NULL, 0), -EMSGSIZE);
    proto_encode_hdr(b, PROTO_OP_ADMIN, 0, 1, 0, 0);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN, &m, &used), -EPROTO);          /* no command */
    proto_encode_hdr(b, PROTO_OP_ADMIN, 0, 1, 0, 1);
    b[PROTO_HDR_LEN] = PROTO_ADMIN_MAX_;
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + 1, &m, &used), -EPROTO);      /* unknown command */
    /* Malformed records: a zero name length, an unknown kind, a text
     * length past the body, a record cut short. */
    {
        static const uint8_t bad[][12] = {
            { 0, 1, 1, 2, 3, 4, 5, 6, 7, 8 },
            { 1, 'a', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0 },
            { 1, 'a', 2, 100, 0, 0, 0, 'x' },
            { 1, 'a', 1, 0, 0, 0 },
        };
        static const size_t len[] = { 10, 11, 8, 6 };
        for (size_t i = 0; i < 4; i++) {
            proto_encode_hdr(b, PROTO_OP_ADMIN, 0, 1, 0, (uint32_t)(1 + len[i]));
            b[PROTO_HDR_LEN] = PROTO_ADMIN_EVICT;
            memcpy(b + PROTO_HDR_LEN + 1, bad[i], len[i]);
            ck_assert_msg(dec(b, PROTO_HDR_LEN + 1 + len[i], &m, &used) == -EPROTO, "bad %zu", i);
        }
    }
    /* A reply: records. */
    off = 0;
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "files", 3), 0);
    n = proto_enc_records(b, sizeof(b), PROTO_OP_ADMIN, 9, recs, off);
    ck_assert_int_eq(n, (ssize_t)(PROTO_HDR_LEN + off));
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.u.recs.len, off);
    ck_assert_int_eq(proto_enc_records(b, sizeof(b), PROTO_OP_OPEN, 9, recs, off), -EMSGSIZE);
    proto_encode_hdr(b, PROTO_OP_ADMIN, PROTO_F_REPLY, 9, 0, 3);
    memcpy(b + PROTO_HDR_LEN, "ok\n", 3);                 /* text is not records */
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + 3, &m, &used), -EPROTO);
}
END_TEST

/* REPORT (client counters): a round trip of number records, every prefix
 * "need more", the PROTO_MAX_REPORT limit both ways, text records and
 * malformed ones refused; the reply is an empty records body. */
/* CKPT_PUT (PROTOCOL.md): records both ways, at least one in a request;
 * partial input, a hostile record length, an empty body. */
START_TEST(test_ckpt_put)
{
    static uint8_t b[PROTO_HDR_LEN + PROTO_MAX_BODY], recs[8192];
    proto_msg m;
    proto_rec r;
    size_t used, off = 0, ro = 0;
    ssize_t n;

    ck_assert_int_eq(proto_rec_str(recs, sizeof(recs), &off, "dest", "/data/ck/m.pt", 13), 0);
    n = proto_enc_ckpt_put(b, sizeof(b), 9, recs, off);
    ck_assert_int_eq(n, PROTO_HDR_LEN + 1 + 4 + 1 + 4 + 13);
    ck_assert_uint_eq(b[5], 14);                        /* the opcode's number on the wire */
    check_prefixes(b, (size_t)n);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.h.op, PROTO_OP_CKPT_PUT);
    ck_assert_uint_eq(m.h.req_id, 9);
    ck_assert_int_eq(proto_rec_next(m.u.recs.p, m.u.recs.len, &ro, &r), 1);
    ck_assert(proto_rec_is(&r, "dest"));
    ck_assert_uint_eq(r.kind, PROTO_REC_STR);
    ck_assert_int_eq(memcmp(r.str, "/data/ck/m.pt", 13), 0);
    ck_assert_str_eq(proto_op_name(PROTO_OP_CKPT_PUT), "ckpt_put");
    /* no records: refused by the encoder and the decoder */
    ck_assert_int_eq(proto_enc_ckpt_put(b, sizeof(b), 1, NULL, 0), -EMSGSIZE);
    proto_encode_hdr(b, PROTO_OP_CKPT_PUT, 0, 1, 0, 0);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN, &m, &used), -EPROTO);
    /* a record whose length runs past the body */
    n = proto_enc_ckpt_put(b, sizeof(b), 2, recs, off);
    b[PROTO_HDR_LEN + 6] = 0xff;                        /* the STR length's low byte */
    b[PROTO_HDR_LEN + 9] = 0x7f;                        /* and its high byte */
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), -EPROTO);
    /* the reply: records */
    off = 0;
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "id", 3), 0);
    ck_assert_int_eq(proto_rec_str(recs, sizeof(recs), &off, "state", "local", 5), 0);
    n = proto_enc_records(b, sizeof(b), PROTO_OP_CKPT_PUT, 9, recs, off);
    ck_assert_int_gt(n, 0);
    check_prefixes(b, (size_t)n);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.h.flags, PROTO_F_REPLY);
    ro = 0;
    ck_assert_int_eq(proto_rec_next(m.u.recs.p, m.u.recs.len, &ro, &r), 1);
    ck_assert(proto_rec_is(&r, "id"));
    ck_assert_uint_eq(r.u64, 3);
    /* ADMIN CKPT_LIST is command 15, PEERS 16, and 17 is no command */
    ck_assert_uint_eq(PROTO_ADMIN_CKPT_LIST, 15);
    n = proto_enc_admin(b, sizeof(b), 5, PROTO_ADMIN_CKPT_LIST, NULL, 0);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.u.admin.cmd, 15);
    ck_assert_uint_eq(PROTO_ADMIN_PEERS, 16);
    b[PROTO_HDR_LEN] = 16;
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    b[PROTO_HDR_LEN] = PROTO_ADMIN_MAX_;
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), -EPROTO);
}
END_TEST

START_TEST(test_report)
{
    static uint8_t b[PROTO_HDR_LEN + PROTO_MAX_BODY], recs[4096];
    proto_msg m;
    proto_rec r;
    size_t used, off = 0, ro = 0;
    ssize_t n;

    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "gpu_tier_hits", 7), 0);
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "gpu_bytes", UINT64_MAX), 0);
    n = proto_enc_report(b, sizeof(b), 42, recs, off);
    ck_assert_int_eq(n, PROTO_HDR_LEN + (2 + 13 + 8) + (2 + 9 + 8));
    check_prefixes(b, (size_t)n);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.h.op, PROTO_OP_REPORT);
    ck_assert_uint_eq(m.h.flags, 0);
    ck_assert_uint_eq(m.h.req_id, 42);
    ck_assert_uint_eq(m.u.recs.len, off);
    ck_assert_int_eq(proto_rec_next(m.u.recs.p, m.u.recs.len, &ro, &r), 1);
    ck_assert(proto_rec_is(&r, "gpu_tier_hits"));
    ck_assert_uint_eq(r.kind, PROTO_REC_U64);
    ck_assert_uint_eq(r.u64, 7);
    ck_assert_int_eq(proto_rec_next(m.u.recs.p, m.u.recs.len, &ro, &r), 1);
    ck_assert(proto_rec_is(&r, "gpu_bytes"));
    ck_assert_uint_eq(r.u64, UINT64_MAX);
    ck_assert_int_eq(proto_rec_next(m.u.recs.p, m.u.recs.len, &ro, &r), 0);
    ck_assert_str_eq(proto_op_name(PROTO_OP_REPORT), "report");

    /* No records is a valid (empty) report. */
    n = proto_enc_report(b, sizeof(b), 1, NULL, 0);
    ck_assert_int_eq(n, PROTO_HDR_LEN);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.u.recs.len, 0);

    /* At most PROTO_MAX_REPORT records, both ways. */
    off = 0;
    for (int i = 0; i < PROTO_MAX_REPORT; i++)
        ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "c", (uint64_t)i), 0);
    n = proto_enc_report(b, sizeof(b), 1, recs, off);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "c", 1), 0);
    ck_assert_int_eq(proto_enc_report(b, sizeof(b), 1, recs, off), -EMSGSIZE);
    proto_encode_hdr(b, PROTO_OP_REPORT, 0, 1, 0, (uint32_t)off);
    memcpy(b + PROTO_HDR_LEN, recs, off);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + off, &m, &used), -EMSGSIZE);

    /* A text record is not a counter: refused by encoder and decoder. */
    off = 0;
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "gpu_copies", 1), 0);
    ck_assert_int_eq(proto_rec_str(recs, sizeof(recs), &off, "name", "x", 1), 0);
    ck_assert_int_eq(proto_enc_report(b, sizeof(b), 1, recs, off), -EMSGSIZE);
    proto_encode_hdr(b, PROTO_OP_REPORT, 0, 1, 0, (uint32_t)off);
    memcpy(b + PROTO_HDR_LEN, recs, off);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + off, &m, &used), -EPROTO);

    /* A record cut short, or with name_len 0, is malformed. */
    off = 0;
    ck_assert_int_eq(proto_rec_u64(recs, sizeof(recs), &off, "gpu_copies", 1), 0);
    proto_encode_hdr(b, PROTO_OP_REPORT, 0, 3, 0, (uint32_t)off - 1);
    memcpy(b + PROTO_HDR_LEN, recs, off - 1);
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + off - 1, &m, &used), -EPROTO);
    proto_encode_hdr(b, PROTO_OP_REPORT, 0, 3, 0, (uint32_t)off);
    memcpy(b + PROTO_HDR_LEN, recs, off);
    b[PROTO_HDR_LEN] = 0;
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + off, &m, &used), -EPROTO);

    /* The reply: an empty success (proto_enc_ok or an empty records body);
     * what is not records is refused. */
    n = proto_enc_ok(b, sizeof(b), PROTO_OP_REPORT, 9);
    ck_assert_int_eq(n, PROTO_HDR_LEN);
    ck_assert_int_eq(dec(b, (size_t)n, &m, &used), 0);
    ck_assert_uint_eq(m.h.flags, PROTO_F_REPLY);
    ck_assert_uint_eq(m.u.recs.len, 0);
    ck_assert_int_eq(proto_enc_records(b, sizeof(b), PROTO_OP_REPORT, 9, NULL, 0), PROTO_HDR_LEN);
    proto_encode_hdr(b, PROTO_OP_REPORT, PROTO_F_REPLY, 9, 0, 1);
    b[PROTO_HDR_LEN] = 0;
    ck_assert_int_eq(dec(b, PROTO_HDR_LEN + 1, &m, &used), -EPROTO);
}
END_TEST


/* The checkpoint set container's header: round trip, every prefix "need
 * more", hostile counts and lengths, bad names. */
START_TEST(test_ckpt_set_header)
{
    const char *names[] = { "shard0", "b", "model.pt" };
    uint64_t sizes[] = { 10, 0, 7 };
    size_t lens[] = { 6, 1, 8 };
    uint8_t b[512];
    proto_set_file f[3];
    uint32_t n = 0;
    long h, r;

    h = proto_set_enc_hdr(b, sizeof(b), 3, names, sizes);
    ck_assert_int_eq(h, (long)proto_set_hdr_len(3, lens));
    r = proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 17, &n, f, 3);
    ck_assert_int_eq(r, h);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(f[0].off, (uint64_t)h);
    ck_assert_uint_eq(f[2].off, (uint64_t)h + 10);
    ck_assert_uint_eq(f[2].size, 7);
    ck_assert(f[2].name_len == 8 && !memcmp(f[2].name, "model.pt", 8));
    /* max 0: the count only */
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 17, &n, NULL, 0), h);
    for (long cut = 0; cut < h; cut++)
        ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)cut, (uint64_t)h + 17, &n, f, 3),
                         PROTO_NEED_MORE);
    /* totals that do not match the sizes */
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 16, &n, f, 3), -EINVAL);
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 18, &n, f, 3), -EINVAL);
    ck_assert_int_eq(proto_set_dec_hdr(b, 4, 4, &n, f, 3), -EINVAL);
    /* a size that would wrap the sum */
    gr__le_put64(b + 16, UINT64_MAX - 3);
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 17, &n, f, 3), -EINVAL);
    gr__le_put64(b + 16, 10);
    /* counts: 0, past the maximum, more than the bytes can hold */
    gr__le_put32(b + 8, 0);
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 17, &n, f, 3), -EINVAL);
    gr__le_put32(b + 8, PROTO_SET_MAX_FILES + 1);
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 17, &n, f, 3), -EINVAL);
    gr__le_put32(b + 8, 4);     /* a fourth entry: in bytes not read yet, or past the end */
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 17, &n, f, 3), PROTO_NEED_MORE);
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 5, &n, f, 3), -EINVAL);
    gr__le_put32(b + 8, 3);
    /* a name length past the end, then the reserved word */
    gr__le_put16(b + 16 + 8, 400);
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 17, &n, f, 3), -EINVAL);
    gr__le_put16(b + 16 + 8, 6);
    gr__le_put32(b + 12, 1);
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 17, &n, f, 3), -EINVAL);
    gr__le_put32(b + 12, 0);
    ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h + 17, &n, f, 3), h);
    /* names */
    ck_assert_int_eq(proto_set_name_ok("a", 1), 0);
    ck_assert_int_eq(proto_set_name_ok("", 0), -EINVAL);
    ck_assert_int_eq(proto_set_name_ok(".", 1), -EINVAL);
    ck_assert_int_eq(proto_set_name_ok("..", 2), -EINVAL);
    ck_assert_int_eq(proto_set_name_ok("...", 3), 0);
    ck_assert_int_eq(proto_set_name_ok("a/b", 3), -EINVAL);
    ck_assert_int_eq(proto_set_name_ok("a\tb", 3), -EINVAL);
    ck_assert_int_eq(proto_set_name_ok("MANIFEST", 8), -EINVAL);
    {
        const char *dup[] = { "x", "x" };
        uint64_t z[] = { 0, 0 };
        ck_assert_int_eq(proto_set_enc_hdr(b, sizeof(b), 2, dup, z), -EINVAL);
        ck_assert_int_eq(proto_set_enc_hdr(b, sizeof(b), 0, dup, z), -EINVAL);
        ck_assert_int_eq(proto_set_enc_hdr(b, 20, 1, dup, z), -ENOSPC);
    }
    /* a repeated name on the wire */
    {
        const char *two[] = { "x", "y" };
        uint64_t z[] = { 0, 0 };
        h = proto_set_enc_hdr(b, sizeof(b), 2, two, z);
        b[16 + 10 + 1 + 10] = 'x';
        ck_assert_int_eq(proto_set_dec_hdr(b, (size_t)h, (uint64_t)h, &n, f, 2), -EINVAL);
    }
}
END_TEST
static Suite *proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *tc = tcase_create("proto");

    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_hdr_wire_bytes);
    tcase_add_test(tc, test_staged_flag);
    tcase_add_test(tc, test_open_example_bytes);
    tcase_add_test(tc, test_body_wire_offsets);
    tcase_add_test(tc, test_hello);
    tcase_add_test(tc, test_open);
    tcase_add_test(tc, test_attr);
    tcase_add_test(tc, test_close);
    tcase_add_test(tc, test_ok_reply);
    tcase_add_test(tc, test_read_request);
    tcase_add_test(tc, test_read_reply);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_stats_put_limits);
    tcase_add_test(tc, test_stats_truncated);
    tcase_add_test(tc, test_stats_name_len_zero);
    tcase_add_test(tc, test_error_reply);
    tcase_add_test(tc, test_error_status_limits);
    tcase_add_test(tc, test_sequence);
    tcase_add_test(tc, test_bad_magic);
    tcase_add_test(tc, test_bad_version);
    tcase_add_test(tc, test_body_len_over_max);
    tcase_add_test(tc, test_bad_opcode);
    tcase_add_test(tc, test_hint);
    tcase_add_test(tc, test_admin_warmup_arg);
    tcase_add_test(tc, test_reserved_and_flags);
    tcase_add_test(tc, test_bad_status);
    tcase_add_test(tc, test_body_sizes);
    tcase_add_test(tc, test_field_limits);
    tcase_add_test(tc, test_encoder_caps);
    tcase_add_test(tc, test_encoder_field_limits);
    tcase_add_test(tc, test_random_bytes);
    tcase_add_test(tc, test_readx_release);
    tcase_add_test(tc, test_admin);
    tcase_add_test(tc, test_report);
    tcase_add_test(tc, test_ckpt_put);
    tcase_add_test(tc, test_ckpt_set_header);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(proto_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
