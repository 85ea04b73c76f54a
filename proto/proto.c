/*
 * proto.c - encode and decode Granary's wire messages (see proto.h and
 * PROTOCOL.md).  Pure functions over caller buffers; all integers are
 * little-endian on the wire whatever the host order.
 */
#include <errno.h>
#include <string.h>

#include "le.h"
#include "proto.h"


static const char *const proto_op_names[PROTO_OP_MAX_] = {
    [PROTO_OP_HELLO] = "hello",
    [PROTO_OP_OPEN] = "open",
    [PROTO_OP_CLOSE] = "close",
    [PROTO_OP_READ] = "read",
    [PROTO_OP_STATS] = "stats",
    [PROTO_OP_READX] = "readx",
    [PROTO_OP_RELEASE] = "release",
    [PROTO_OP_ADMIN] = "admin",
    [PROTO_OP_HINT] = "hint",
    [PROTO_OP_REPORT] = "report",
    [PROTO_OP_OPENX] = "openx",
    [PROTO_OP_STAT] = "stat",
    [PROTO_OP_READDIR] = "readdir",
    [PROTO_OP_CKPT_PUT] = "ckpt_put",
};

const char *proto_op_name(unsigned op)
{
    return op > 0 && op < PROTO_OP_MAX_ ? proto_op_names[op] : "?";
}

void proto_encode_hdr(void *buf, uint8_t op, uint16_t flags, uint32_t req_id,
                      int32_t status, uint32_t body_len)
{
    uint8_t *p = buf;

    gr__le_put32(p, PROTO_MAGIC);
    p[4] = PROTO_VERSION;
    p[5] = op;
    gr__le_put16(p + 6, flags);
    gr__le_put32(p + 8, req_id);
    gr__le_put32(p + 12, body_len);
    gr__le_put32(p + 16, (uint32_t)status);
    gr__le_put32(p + 20, 0);
}

void proto_mark_staged(void *buf)
{
    uint8_t *p = buf;

    gr__le_put16(p + 6, (uint16_t)(gr__le_get16(p + 6) | PROTO_F_STAGED));
}

int proto_decode_hdr(const void *buf, size_t len, proto_hdr *h)
{
    const uint8_t *p = buf;

    if (len < PROTO_HDR_LEN)
        return PROTO_NEED_MORE;
    h->magic = gr__le_get32(p);
    h->version = p[4];
    h->op = p[5];
    h->flags = gr__le_get16(p + 6);
    h->req_id = gr__le_get32(p + 8);
    h->body_len = gr__le_get32(p + 12);
    h->status = (int32_t)gr__le_get32(p + 16);
    h->reserved = gr__le_get32(p + 20);
    if (h->magic != PROTO_MAGIC)
        return -EPROTO;
    if (h->version != PROTO_VERSION)
        return -EPROTONOSUPPORT;
    if ((h->flags & ~(PROTO_F_REPLY | PROTO_F_NOREPLY | PROTO_F_WHOLE | PROTO_F_STAGED)) ||
        h->reserved)
        return -EPROTO;
    if ((h->flags & PROTO_F_REPLY) && (h->flags & (PROTO_F_NOREPLY | PROTO_F_WHOLE)))
        return -EPROTO;
    if (h->op == 0 || h->op >= PROTO_OP_MAX_)
        return -EPROTO;
    /* STAGED: a successful OPEN or OPENX reply only. */
    if ((h->flags & PROTO_F_STAGED) &&
        (!(h->flags & PROTO_F_REPLY) || h->status != 0 ||
         (h->op != PROTO_OP_OPEN && h->op != PROTO_OP_OPENX)))
        return -EPROTO;
    if (!(h->flags & PROTO_F_REPLY) && h->status != 0)
        return -EPROTO;
    if (h->status > 0 || h->status < -4095)
        return -EPROTO;
    /* Last, so that -EMSGSIZE vouches for the rest of the header: the daemon
     * answers it with h->op and h->req_id, and an unknown op there would make
     * its error reply undecodable. */
    if (h->body_len > PROTO_MAX_BODY)
        return -EMSGSIZE;
    return 0;
}

static void dec_attr(const uint8_t *b, proto_attr *a)
{
    a->handle = gr__le_get32(b);
    a->chunk_size = gr__le_get32(b + 4);
    a->size = gr__le_get64(b + 8);
    a->ino = gr__le_get64(b + 16);
    a->dev = gr__le_get64(b + 24);
    a->mtime_sec = (int64_t)gr__le_get64(b + 32);
    a->mtime_nsec = gr__le_get32(b + 40);
    a->mode = gr__le_get32(b + 44);
    a->blksize = gr__le_get32(b + 48);
    a->uid = gr__le_get32(b + 52);
    a->gid = gr__le_get32(b + 56);
    a->nlink = gr__le_get32(b + 60);
}

static int dec_hello(const uint8_t *b, proto_hello *x)
{
    x->version = gr__le_get32(b);
    x->max_msg = gr__le_get32(b + 4);
    x->max_data = gr__le_get32(b + 8);
    x->chunk_size = gr__le_get32(b + 12);
    x->lease_cache = gr__le_get64(b + 16);
    x->lease_ttl_ms = gr__le_get32(b + 24);
    x->features = gr__le_get32(b + 28);
    return 0;
}

/* A READX body (of a READX reply, or the tail of an OPENX reply): n bytes. */
static int dec_readx_body(const uint8_t *b, uint32_t n, proto_readx *rx)
{
    uint32_t ne, il;

    if (n < PROTO_READX_PREFIX)
        return -EPROTO;
    ne = gr__le_get16(b);
    il = gr__le_get32(b + 4);
    if (gr__le_get16(b + 2) != 0)
        return -EPROTO;
    if (ne > PROTO_MAX_EXTENTS || il > PROTO_MAX_DATA)
        return -EMSGSIZE;
    if (n != PROTO_READX_PREFIX + ne * PROTO_EXTENT_LEN + il)
        return -EPROTO;
    /* Each extent's reserved word must be 0, like every reserved field:
     * a reply that re-encodes differently is not one the daemon sent
     * (found by tests/fuzz/fuzz_proto.c). */
    for (uint32_t i = 0; i < ne; i++)
        if (gr__le_get32(b + PROTO_READX_PREFIX + i * PROTO_EXTENT_LEN + 20) &
            ~(PROTO_EXTENT_FD | PROTO_EXTENT_NOKEEP))
            return -EPROTO;
    rx->nextents = ne;
    rx->extents = b + PROTO_READX_PREFIX;
    rx->inline_len = il;
    rx->inline_data = b + PROTO_READX_PREFIX + ne * PROTO_EXTENT_LEN;
    return 0;
}

/* The body of a READ or READX request, len at most max. */
static int dec_read(proto_msg *m, const uint8_t *b, uint32_t max)
{
    if (m->h.body_len != PROTO_READ_LEN)
        return -EPROTO;
    m->u.read.handle = gr__le_get32(b);
    m->u.read.len = gr__le_get32(b + 4);
    m->u.read.off = gr__le_get64(b + 8);
    return m->u.read.len > max ? -EMSGSIZE : 0;
}

/* A HINT request: the prefix, then exactly count well-formed ranges. */
static int dec_hint(proto_msg *m, const uint8_t *b)
{
    uint32_t n = m->h.body_len, flags, count;
    size_t off = PROTO_HINT_PREFIX;

    if (n < PROTO_HINT_PREFIX)
        return -EPROTO;
    flags = gr__le_get32(b);
    count = gr__le_get32(b + 4);
    if (flags & ~PROTO_HINT_CLEAR)
        return -EPROTO;
    if (count > PROTO_MAX_HINTS)
        return -EMSGSIZE;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t plen;
        if (n - off < PROTO_HINT_ENT_FIXED)
            return -EPROTO;
        plen = gr__le_get32(b + off + 16);
        if (plen == 0)
            return -EPROTO;
        if (plen > PROTO_MAX_PATH)
            return -EMSGSIZE;
        if (n - off - PROTO_HINT_ENT_FIXED < plen)
            return -EPROTO;
        off += PROTO_HINT_ENT_SIZE(plen);
    }
    if (off != n)
        return -EPROTO;
    m->u.hint.flags = flags;
    m->u.hint.count = count;
    m->u.hint.ents = b + PROTO_HINT_PREFIX;
    m->u.hint.len = n - PROTO_HINT_PREFIX;
    return 0;
}

/* Walk every record of body[0..n): 0, or -EPROTO at the first malformed. */
static int check_records(const uint8_t *b, size_t n)
{
    size_t off = 0;
    proto_rec r;
    int rc;

    while ((rc = proto_rec_next(b, n, &off, &r)) == 1)
        ;
    return rc;
}

/* A REPORT body: 0, -EPROTO (a malformed record or one that is not a
 * number), -EMSGSIZE (more than PROTO_MAX_REPORT records). */
static int check_report(const uint8_t *b, size_t n)
{
    size_t off = 0;
    uint32_t k = 0;
    proto_rec r;
    int rc;

    while ((rc = proto_rec_next(b, n, &off, &r)) == 1) {
        if (r.kind != PROTO_REC_U64)
            return -EPROTO;
        if (++k > PROTO_MAX_REPORT)
            return -EMSGSIZE;
    }
    return rc;
}

/* Check and decode a request body for its opcode. */
static int dec_request(proto_msg *m, const uint8_t *b)
{
    uint32_t n = m->h.body_len;

    /* WHOLE means something to READX only. */
    if ((m->h.flags & PROTO_F_WHOLE) && m->h.op != PROTO_OP_READX)
        return -EPROTO;
    switch (m->h.op) {
    case PROTO_OP_HELLO:
        if (n != PROTO_HELLO_LEN)
            return -EPROTO;
        return dec_hello(b, &m->u.hello);
    case PROTO_OP_OPENX:
        if (n <= PROTO_OPENX_PREFIX)
            return -EPROTO;
        if (n - PROTO_OPENX_PREFIX > PROTO_MAX_PATH)
            return -EMSGSIZE;
        m->u.openx.off = gr__le_get64(b);
        m->u.openx.len = gr__le_get32(b + 8);
        m->u.openx.flags = gr__le_get32(b + 12);
        m->u.openx.path = (const char *)b + PROTO_OPENX_PREFIX;
        m->u.openx.path_len = n - PROTO_OPENX_PREFIX;
        if (m->u.openx.flags & ~(PROTO_OPENX_CLOSE | PROTO_OPENX_IFCHEAP))
            return -EPROTO;
        return m->u.openx.len > PROTO_MAX_READX ? -EMSGSIZE : 0;
    case PROTO_OP_OPEN:
    case PROTO_OP_STAT:
        if (n == 0)
            return -EPROTO;
        if (n > PROTO_MAX_PATH)
            return -EMSGSIZE;
        m->u.open.path = (const char *)b;
        m->u.open.len = n;
        return 0;
    case PROTO_OP_READDIR:
        if (n <= PROTO_READDIR_PREFIX)
            return -EPROTO;
        if (n - PROTO_READDIR_PREFIX > PROTO_MAX_PATH)
            return -EMSGSIZE;
        m->u.readdir.cookie = gr__le_get64(b);
        m->u.readdir.max = gr__le_get32(b + 8);
        m->u.readdir.flags = gr__le_get32(b + 12);
        m->u.readdir.path = (const char *)b + PROTO_READDIR_PREFIX;
        m->u.readdir.path_len = n - PROTO_READDIR_PREFIX;
        if (m->u.readdir.flags & ~PROTO_READDIR_PLUS)
            return -EPROTO;
        if (m->u.readdir.max == 0)
            return -EPROTO;
        return m->u.readdir.max > PROTO_MAX_DIRENTS ? -EMSGSIZE : 0;
    case PROTO_OP_CLOSE:
        if (n != 4)
            return -EPROTO;
        m->u.handle = gr__le_get32(b);
        return 0;
    case PROTO_OP_READ:
        return dec_read(m, b, PROTO_MAX_DATA);
    case PROTO_OP_STATS:
        return n == 0 ? 0 : -EPROTO;
    case PROTO_OP_READX:
        return dec_read(m, b, PROTO_MAX_READX);
    case PROTO_OP_ADMIN:
        if (n == 0 || b[0] == 0 || b[0] >= PROTO_ADMIN_MAX_)
            return -EPROTO;
        if (check_records(b + 1, n - 1) < 0)
            return -EPROTO;
        m->u.admin.cmd = b[0];
        m->u.admin.recs = b + 1;
        m->u.admin.len = n - 1;
        return 0;
    case PROTO_OP_HINT:
        return dec_hint(m, b);
    case PROTO_OP_REPORT: {
        int rc = check_report(b, n);
        if (rc < 0)
            return rc;
        m->u.recs.p = b;
        m->u.recs.len = n;
        return 0;
    }
    case PROTO_OP_CKPT_PUT:
        if (n == 0 || check_records(b, n) < 0)
            return -EPROTO;
        m->u.recs.p = b;
        m->u.recs.len = n;
        return 0;
    case PROTO_OP_RELEASE:
        if (n == 0 || n % 4)
            return -EPROTO;
        if (n / 4 > PROTO_MAX_RELEASE)
            return -EMSGSIZE;
        m->u.release.count = n / 4;
        m->u.release.ids = b;
        return 0;
    default:
        return -EPROTO;
    }
}

/* Check and decode a reply body for its opcode. */
static int dec_reply(proto_msg *m, const uint8_t *b)
{
    uint32_t n = m->h.body_len;

    if (m->h.status < 0) {
        if (n > PROTO_MAX_ERRMSG)
            return -EMSGSIZE;
        m->u.error.text = (const char *)b;
        m->u.error.len = n;
        return 0;
    }
    switch (m->h.op) {
    case PROTO_OP_HELLO:
        if (n != PROTO_HELLO_LEN)
            return -EPROTO;
        return dec_hello(b, &m->u.hello);
    case PROTO_OP_OPEN:
        if (n != PROTO_ATTR_LEN)
            return -EPROTO;
        dec_attr(b, &m->u.attr);
        return 0;
    case PROTO_OP_OPENX: {
        int32_t rs;
        int rc;
        if (n < PROTO_OPENX_FIXED)
            return -EPROTO;
        dec_attr(b, &m->u.openx_reply.attr);
        rs = (int32_t)gr__le_get32(b + PROTO_ATTR_LEN);
        if (rs > 0 || rs < -4095 || gr__le_get32(b + PROTO_ATTR_LEN + 4) != 0)
            return -EPROTO;
        m->u.openx_reply.read_status = rs;
        rc = dec_readx_body(b + PROTO_OPENX_FIXED, n - PROTO_OPENX_FIXED, &m->u.openx_reply.rx);
        if (rc < 0)
            return rc;
        /* A read that failed carries no bytes. */
        if (rs < 0 && (m->u.openx_reply.rx.nextents || m->u.openx_reply.rx.inline_len))
            return -EPROTO;
        return 0;
    }
    case PROTO_OP_CLOSE:
        return n == 0 ? 0 : -EPROTO;
    case PROTO_OP_STAT:
        if (n != PROTO_STAT_LEN || gr__le_get32(b + PROTO_ATTR_LEN + 4) != 0)
            return -EPROTO;
        dec_attr(b, &m->u.stat.attr);
        m->u.stat.valid_ms = gr__le_get32(b + PROTO_ATTR_LEN);
        return 0;
    case PROTO_OP_READDIR: {
        uint32_t count, flags, k = 0;
        size_t off = PROTO_READDIR_REPLY;
        if (n < PROTO_READDIR_REPLY || gr__le_get32(b + 20) != 0)
            return -EPROTO;
        count = gr__le_get32(b + 8);
        flags = gr__le_get32(b + 16);
        if (flags & ~PROTO_READDIR_PLUS)
            return -EPROTO;
        if (count > PROTO_MAX_DIRENTS)
            return -EMSGSIZE;
        for (; k < count; k++) {
            uint32_t nl;
            if (n - off < 4)
                return -EPROTO;
            nl = gr__le_get16(b + off + 2);
            if (!PROTO_DIRENT_VALID(b[off]) || b[off + 1] != 0 ||
                nl == 0 || nl > 255 || n - off < PROTO_DIRENT_SIZE(nl, flags & PROTO_READDIR_PLUS))
                return -EPROTO;
            if (memchr(b + off + 4, '/', nl) || memchr(b + off + 4, '\0', nl))
                return -EPROTO;
            off += PROTO_DIRENT_SIZE(nl, flags & PROTO_READDIR_PLUS);
        }
        if (off != n)
            return -EPROTO;
        m->u.dirents.next = gr__le_get64(b);
        m->u.dirents.count = count;
        m->u.dirents.valid_ms = gr__le_get32(b + 12);
        m->u.dirents.flags = flags;
        m->u.dirents.ents = b + PROTO_READDIR_REPLY;
        m->u.dirents.len = n - PROTO_READDIR_REPLY;
        return 0;
    }
    case PROTO_OP_STATS:
    case PROTO_OP_ADMIN:
    case PROTO_OP_HINT:
    case PROTO_OP_REPORT:
    case PROTO_OP_CKPT_PUT:
        if (check_records(b, n) < 0)
            return -EPROTO;
        m->u.recs.p = b;
        m->u.recs.len = n;
        return 0;
    case PROTO_OP_READX:
        return dec_readx_body(b, n, &m->u.readx);
    case PROTO_OP_READ:
        if (n > PROTO_MAX_DATA)
            return -EMSGSIZE;
        m->u.data.p = b;
        m->u.data.len = n;
        return 0;
    default:
        return -EPROTO;
    }
}

int proto_decode(const void *buf, size_t len, proto_msg *m, size_t *used)
{
    const uint8_t *p = buf;
    int rc;

    memset(m, 0, sizeof(*m));
    rc = proto_decode_hdr(p, len, &m->h);
    if (rc != 0)
        return rc;
    if (len - PROTO_HDR_LEN < m->h.body_len)
        return PROTO_NEED_MORE;
    rc = (m->h.flags & PROTO_F_REPLY) ? dec_reply(m, p + PROTO_HDR_LEN)
                                      : dec_request(m, p + PROTO_HDR_LEN);
    if (rc != 0)
        return rc;
    *used = PROTO_HDR_LEN + m->h.body_len;
    return 0;
}

/* Reserve room for a message of body_len bytes and write its header.
 * Returns the body pointer, or NULL if it does not fit. */
static uint8_t *enc_begin(void *buf, size_t cap, uint8_t op, uint16_t flags,
                          uint32_t req_id, int32_t status, size_t body_len)
{
    if (body_len > PROTO_MAX_BODY || cap < PROTO_HDR_LEN + body_len)
        return NULL;
    proto_encode_hdr(buf, op, flags, req_id, status, (uint32_t)body_len);
    return (uint8_t *)buf + PROTO_HDR_LEN;
}

ssize_t proto_enc_hello(void *buf, size_t cap, uint16_t flags, uint32_t req_id,
                        const proto_hello *hello)
{
    uint8_t *b = enc_begin(buf, cap, PROTO_OP_HELLO, flags & PROTO_F_REPLY, req_id, 0,
                           PROTO_HELLO_LEN);

    if (!b)
        return -EMSGSIZE;
    gr__le_put32(b, hello->version);
    gr__le_put32(b + 4, hello->max_msg);
    gr__le_put32(b + 8, hello->max_data);
    gr__le_put32(b + 12, hello->chunk_size);
    gr__le_put64(b + 16, hello->lease_cache);
    gr__le_put32(b + 24, hello->lease_ttl_ms);
    gr__le_put32(b + 28, hello->features);
    return PROTO_HDR_LEN + PROTO_HELLO_LEN;
}

ssize_t proto_enc_open(void *buf, size_t cap, uint32_t req_id, const char *path, size_t len)
{
    uint8_t *b;

    if (len == 0 || len > PROTO_MAX_PATH)
        return -EMSGSIZE;
    b = enc_begin(buf, cap, PROTO_OP_OPEN, 0, req_id, 0, len);
    if (!b)
        return -EMSGSIZE;
    memcpy(b, path, len);
    return (ssize_t)(PROTO_HDR_LEN + len);
}

static void put_attr(uint8_t *b, const proto_attr *a)
{
    gr__le_put32(b, a->handle);
    gr__le_put32(b + 4, a->chunk_size);
    gr__le_put64(b + 8, a->size);
    gr__le_put64(b + 16, a->ino);
    gr__le_put64(b + 24, a->dev);
    gr__le_put64(b + 32, (uint64_t)a->mtime_sec);
    gr__le_put32(b + 40, a->mtime_nsec);
    gr__le_put32(b + 44, a->mode);
    gr__le_put32(b + 48, a->blksize);
    gr__le_put32(b + 52, a->uid);
    gr__le_put32(b + 56, a->gid);
    gr__le_put32(b + 60, a->nlink);
}

ssize_t proto_enc_attr(void *buf, size_t cap, uint32_t req_id, const proto_attr *a)
{
    uint8_t *b = enc_begin(buf, cap, PROTO_OP_OPEN, PROTO_F_REPLY, req_id, 0, PROTO_ATTR_LEN);

    if (!b)
        return -EMSGSIZE;
    put_attr(b, a);
    return PROTO_HDR_LEN + PROTO_ATTR_LEN;
}

ssize_t proto_enc_stat(void *buf, size_t cap, uint32_t req_id, const char *path, size_t len)
{
    uint8_t *b;

    if (len == 0 || len > PROTO_MAX_PATH)
        return -EMSGSIZE;
    b = enc_begin(buf, cap, PROTO_OP_STAT, 0, req_id, 0, len);
    if (!b)
        return -EMSGSIZE;
    memcpy(b, path, len);
    return (ssize_t)(PROTO_HDR_LEN + len);
}

ssize_t proto_enc_stat_reply(void *buf, size_t cap, uint32_t req_id, const proto_attr *a,
                             uint32_t valid_ms)
{
    uint8_t *b = enc_begin(buf, cap, PROTO_OP_STAT, PROTO_F_REPLY, req_id, 0, PROTO_STAT_LEN);

    if (!b)
        return -EMSGSIZE;
    put_attr(b, a);
    gr__le_put32(b + PROTO_ATTR_LEN, valid_ms);
    gr__le_put32(b + PROTO_ATTR_LEN + 4, 0);
    return PROTO_HDR_LEN + PROTO_STAT_LEN;
}

ssize_t proto_enc_readdir(void *buf, size_t cap, uint32_t req_id, uint64_t cookie, uint32_t max,
                          uint32_t flags, const char *path, size_t len)
{
    uint8_t *b;

    if (len == 0 || len > PROTO_MAX_PATH || max == 0 || max > PROTO_MAX_DIRENTS ||
        (flags & ~PROTO_READDIR_PLUS))
        return -EMSGSIZE;
    b = enc_begin(buf, cap, PROTO_OP_READDIR, 0, req_id, 0, PROTO_READDIR_PREFIX + len);
    if (!b)
        return -EMSGSIZE;
    gr__le_put64(b, cookie);
    gr__le_put32(b + 8, max);
    gr__le_put32(b + 12, flags);
    memcpy(b + PROTO_READDIR_PREFIX, path, len);
    return (ssize_t)(PROTO_HDR_LEN + PROTO_READDIR_PREFIX + len);
}

ssize_t proto_enc_readdir_reply(void *buf, size_t cap, uint32_t req_id, uint64_t next,
                                uint32_t valid_ms, uint32_t flags, const proto_dirent *ents,
                                uint32_t n)
{
    size_t body = PROTO_READDIR_REPLY;
    int plus = (flags & PROTO_READDIR_PLUS) != 0;
    uint8_t *b, *p;

    if (n > PROTO_MAX_DIRENTS || (flags & ~PROTO_READDIR_PLUS))
        return -EMSGSIZE;
    for (uint32_t i = 0; i < n; i++) {
        if (ents[i].name_len == 0 || ents[i].name_len > 255 ||
            !PROTO_DIRENT_VALID(ents[i].type) ||
            memchr(ents[i].name, '/', ents[i].name_len) ||
            memchr(ents[i].name, '\0', ents[i].name_len))
            return -EMSGSIZE;
        body += PROTO_DIRENT_SIZE(ents[i].name_len, plus);
    }
    b = enc_begin(buf, cap, PROTO_OP_READDIR, PROTO_F_REPLY, req_id, 0, body);
    if (!b)
        return -EMSGSIZE;
    gr__le_put64(b, next);
    gr__le_put32(b + 8, n);
    gr__le_put32(b + 12, valid_ms);
    gr__le_put32(b + 16, flags);
    gr__le_put32(b + 20, 0);
    p = b + PROTO_READDIR_REPLY;
    for (uint32_t i = 0; i < n; i++) {
        p[0] = ents[i].type;
        p[1] = 0;
        gr__le_put16(p + 2, (uint16_t)ents[i].name_len);
        memcpy(p + 4, ents[i].name, ents[i].name_len);
        p += 4 + ents[i].name_len;
        if (plus) {
            put_attr(p, &ents[i].attr);
            p += PROTO_ATTR_LEN;
        }
    }
    return (ssize_t)(PROTO_HDR_LEN + body);
}

int proto_dirent_next(const proto_msg *m, size_t *off, proto_dirent *out)
{
    const uint8_t *p;
    int plus = (m->u.dirents.flags & PROTO_READDIR_PLUS) != 0;

    if (*off >= m->u.dirents.len)
        return 0;
    p = m->u.dirents.ents + *off;
    memset(out, 0, sizeof(*out));
    out->type = p[0];
    out->name_len = gr__le_get16(p + 2);
    out->name = (const char *)p + 4;
    if (plus) {
        dec_attr(p + 4 + out->name_len, &out->attr);
        out->has_attr = 1;
    }
    *off += PROTO_DIRENT_SIZE(out->name_len, plus);
    return 1;
}

ssize_t proto_enc_openx(void *buf, size_t cap, uint32_t req_id, uint64_t off, uint32_t len,
                        uint32_t flags, const char *path, size_t path_len)
{
    uint8_t *b;

    if (path_len == 0 || path_len > PROTO_MAX_PATH || len > PROTO_MAX_READX ||
        (flags & ~(PROTO_OPENX_CLOSE | PROTO_OPENX_IFCHEAP)))
        return -EMSGSIZE;
    b = enc_begin(buf, cap, PROTO_OP_OPENX, 0, req_id, 0, PROTO_OPENX_PREFIX + path_len);
    if (!b)
        return -EMSGSIZE;
    gr__le_put64(b, off);
    gr__le_put32(b + 8, len);
    gr__le_put32(b + 12, flags);
    memcpy(b + PROTO_OPENX_PREFIX, path, path_len);
    return (ssize_t)(PROTO_HDR_LEN + PROTO_OPENX_PREFIX + path_len);
}

ssize_t proto_enc_close(void *buf, size_t cap, uint32_t req_id, uint32_t handle)
{
    uint8_t *b = enc_begin(buf, cap, PROTO_OP_CLOSE, 0, req_id, 0, 4);

    if (!b)
        return -EMSGSIZE;
    gr__le_put32(b, handle);
    return PROTO_HDR_LEN + 4;
}

/* READ and READX requests share a layout; only the opcode and the limit on
 * len differ. */
static ssize_t enc_read_op(void *buf, size_t cap, uint8_t op, uint16_t flags, uint32_t max,
                           uint32_t req_id, const proto_read *r)
{
    uint8_t *b;

    if (r->len > max)
        return -EMSGSIZE;
    b = enc_begin(buf, cap, op, flags, req_id, 0, PROTO_READ_LEN);
    if (!b)
        return -EMSGSIZE;
    gr__le_put32(b, r->handle);
    gr__le_put32(b + 4, r->len);
    gr__le_put64(b + 8, r->off);
    return PROTO_HDR_LEN + PROTO_READ_LEN;
}

ssize_t proto_enc_read(void *buf, size_t cap, uint32_t req_id, const proto_read *r)
{
    return enc_read_op(buf, cap, PROTO_OP_READ, 0, PROTO_MAX_DATA, req_id, r);
}

ssize_t proto_enc_stats_req(void *buf, size_t cap, uint32_t req_id)
{
    return enc_begin(buf, cap, PROTO_OP_STATS, 0, req_id, 0, 0) ? PROTO_HDR_LEN : -EMSGSIZE;
}

ssize_t proto_enc_ok(void *buf, size_t cap, uint8_t op, uint32_t req_id)
{
    return enc_begin(buf, cap, op, PROTO_F_REPLY, req_id, 0, 0) ? PROTO_HDR_LEN : -EMSGSIZE;
}

ssize_t proto_enc_error(void *buf, size_t cap, uint8_t op, uint32_t req_id,
                        int32_t status, const char *text)
{
    size_t n = text ? strnlen(text, PROTO_MAX_ERRMSG) : 0;
    uint8_t *b;

    if (status >= 0 || status < -4095)
        return -EINVAL;
    /* The body is UTF-8: never cut inside a multi-byte sequence.  text[n] is
     * readable here (it is the NUL or the first byte past the cut); a
     * sequence that straddles the cut starts at most 3 bytes before it. */
    if (n == PROTO_MAX_ERRMSG) {
        size_t k = n;
        while (k > n - 3 && ((unsigned char)text[k] & 0xC0) == 0x80)
            k--;
        if (k < n && ((unsigned char)text[k] & 0xC0) == 0xC0)
            n = k;
    }
    b = enc_begin(buf, cap, op, PROTO_F_REPLY, req_id, status, n);
    if (!b)
        return -EMSGSIZE;
    if (n)
        memcpy(b, text, n);
    return (ssize_t)(PROTO_HDR_LEN + n);
}

/* Append the record header (name, kind) at *off; the value's room too. */
static uint8_t *rec_begin(void *body, size_t cap, size_t *off, const char *name, uint8_t kind,
                          size_t vlen, int *rc)
{
    size_t n = strlen(name);
    uint8_t *b;

    *rc = 0;
    if (n == 0 || n > 255) {
        *rc = -EINVAL;
        return NULL;
    }
    if (*off > cap || cap - *off < 2 + n + vlen) {
        *rc = -EMSGSIZE;
        return NULL;
    }
    b = (uint8_t *)body + *off;
    b[0] = (uint8_t)n;
    memcpy(b + 1, name, n);
    b[1 + n] = kind;
    *off += 2 + n + vlen;
    return b + 2 + n;
}

int proto_rec_u64(void *body, size_t cap, size_t *off, const char *name, uint64_t v)
{
    int rc;
    uint8_t *p = rec_begin(body, cap, off, name, PROTO_REC_U64, 8, &rc);

    if (p)
        gr__le_put64(p, v);
    return rc;
}

int proto_rec_str(void *body, size_t cap, size_t *off, const char *name, const void *str,
                  size_t len)
{
    int rc;
    uint8_t *p;

    if (len > PROTO_MAX_BODY)
        return -EMSGSIZE;
    p = rec_begin(body, cap, off, name, PROTO_REC_STR, 4 + len, &rc);
    if (p) {
        gr__le_put32(p, (uint32_t)len);
        if (len)
            memcpy(p + 4, str, len);
    }
    return rc;
}

int proto_rec_next(const uint8_t *body, size_t len, size_t *off, proto_rec *out)
{
    size_t n, at = *off;

    if (at >= len)
        return 0;
    n = body[at];
    if (n == 0 || len - at < 2 + n)
        return -EPROTO;
    out->name = (const char *)body + at + 1;
    out->name_len = (uint32_t)n;
    out->kind = body[at + 1 + n];
    at += 2 + n;
    switch (out->kind) {
    case PROTO_REC_U64:
        if (len - at < 8)
            return -EPROTO;
        out->u64 = gr__le_get64(body + at);
        out->str = NULL;
        out->len = 0;
        at += 8;
        break;
    case PROTO_REC_STR:
        if (len - at < 4 || len - at - 4 < gr__le_get32(body + at))
            return -EPROTO;
        out->len = gr__le_get32(body + at);
        out->str = (const char *)body + at + 4;
        out->u64 = 0;
        at += 4 + out->len;
        break;
    default:
        return -EPROTO;
    }
    *off = at;
    return 1;
}

int proto_rec_is(const proto_rec *r, const char *name)
{
    return strlen(name) == r->name_len && memcmp(r->name, name, r->name_len) == 0;
}

ssize_t proto_enc_readx(void *buf, size_t cap, uint32_t req_id, const proto_read *r)
{
    return enc_read_op(buf, cap, PROTO_OP_READX, 0, PROTO_MAX_READX, req_id, r);
}

ssize_t proto_enc_readx_flags(void *buf, size_t cap, uint32_t req_id, uint16_t flags,
                              const proto_read *r)
{
    if (flags & ~PROTO_F_WHOLE)
        return -EINVAL;
    return enc_read_op(buf, cap, PROTO_OP_READX, flags, PROTO_MAX_READX, req_id, r);
}

/* The READX body's fixed part (prefix and n extents) at b. */
static void put_readx(uint8_t *b, const proto_extent *ext, uint32_t n, uint32_t inline_len)
{
    gr__le_put16(b, (uint16_t)n);
    gr__le_put16(b + 2, 0);
    gr__le_put32(b + 4, inline_len);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = b + PROTO_READX_PREFIX + i * PROTO_EXTENT_LEN;
        gr__le_put32(e, ext[i].seg);
        gr__le_put32(e + 4, ext[i].lease);
        gr__le_put64(e + 8, ext[i].off);
        gr__le_put32(e + 16, ext[i].len);
        gr__le_put32(e + 20, ext[i].flags & (PROTO_EXTENT_FD | PROTO_EXTENT_NOKEEP));
    }
}

ssize_t proto_enc_readx_reply(void *buf, size_t cap, uint32_t req_id, const proto_extent *ext,
                              uint32_t n, uint32_t inline_len)
{
    size_t fixed = PROTO_READX_PREFIX + (size_t)n * PROTO_EXTENT_LEN;

    if (n > PROTO_MAX_EXTENTS || inline_len > PROTO_MAX_DATA)
        return -EMSGSIZE;
    if (cap < PROTO_HDR_LEN + fixed)
        return -EMSGSIZE;
    proto_encode_hdr(buf, PROTO_OP_READX, PROTO_F_REPLY, req_id, 0, (uint32_t)(fixed + inline_len));
    put_readx((uint8_t *)buf + PROTO_HDR_LEN, ext, n, inline_len);
    return (ssize_t)(PROTO_HDR_LEN + fixed);
}

ssize_t proto_enc_openx_reply(void *buf, size_t cap, uint32_t req_id, const proto_attr *a,
                              int32_t read_status, const proto_extent *ext, uint32_t n,
                              uint32_t inline_len)
{
    size_t fixed = PROTO_OPENX_FIXED + PROTO_READX_PREFIX + (size_t)n * PROTO_EXTENT_LEN;
    uint8_t *b;

    if (n > PROTO_MAX_EXTENTS || inline_len > PROTO_MAX_DATA || read_status > 0 ||
        read_status < -4095 || (read_status < 0 && (n || inline_len)))
        return -EMSGSIZE;
    if (cap < PROTO_HDR_LEN + fixed)
        return -EMSGSIZE;
    proto_encode_hdr(buf, PROTO_OP_OPENX, PROTO_F_REPLY, req_id, 0, (uint32_t)(fixed + inline_len));
    b = (uint8_t *)buf + PROTO_HDR_LEN;
    put_attr(b, a);
    gr__le_put32(b + PROTO_ATTR_LEN, (uint32_t)read_status);
    gr__le_put32(b + PROTO_ATTR_LEN + 4, 0);
    put_readx(b + PROTO_OPENX_FIXED, ext, n, inline_len);
    return (ssize_t)(PROTO_HDR_LEN + fixed);
}

ssize_t proto_enc_admin(void *buf, size_t cap, uint32_t req_id, uint8_t cmd, const void *recs,
                        size_t len)
{
    uint8_t *b;

    if (cmd == 0 || cmd >= PROTO_ADMIN_MAX_ || len + 1 > PROTO_MAX_BODY ||
        (len && check_records(recs, len) < 0))
        return -EMSGSIZE;
    b = enc_begin(buf, cap, PROTO_OP_ADMIN, 0, req_id, 0, 1 + len);
    if (!b)
        return -EMSGSIZE;
    b[0] = cmd;
    if (len)
        memcpy(b + 1, recs, len);
    return (ssize_t)(PROTO_HDR_LEN + 1 + len);
}

ssize_t proto_enc_report(void *buf, size_t cap, uint32_t req_id, const void *recs, size_t len)
{
    uint8_t *b;

    if (len > PROTO_MAX_BODY || (len && check_report(recs, len) < 0))
        return -EMSGSIZE;
    b = enc_begin(buf, cap, PROTO_OP_REPORT, 0, req_id, 0, len);
    if (!b)
        return -EMSGSIZE;
    if (len && b != recs)
        memmove(b, recs, len);
    return (ssize_t)(PROTO_HDR_LEN + len);
}

ssize_t proto_enc_ckpt_put(void *buf, size_t cap, uint32_t req_id, const void *recs, size_t len)
{
    uint8_t *b;

    if (len == 0 || len > PROTO_MAX_BODY || check_records(recs, len) < 0)
        return -EMSGSIZE;
    b = enc_begin(buf, cap, PROTO_OP_CKPT_PUT, 0, req_id, 0, len);
    if (!b)
        return -EMSGSIZE;
    if (b != recs)
        memmove(b, recs, len);
    return (ssize_t)(PROTO_HDR_LEN + len);
}

ssize_t proto_enc_records(void *buf, size_t cap, uint8_t op, uint32_t req_id, const void *recs,
                          size_t len)
{
    uint8_t *b;

    if ((op != PROTO_OP_STATS && op != PROTO_OP_ADMIN && op != PROTO_OP_HINT &&
         op != PROTO_OP_REPORT && op != PROTO_OP_CKPT_PUT) ||
        (len && check_records(recs, len) < 0))
        return -EMSGSIZE;
    b = enc_begin(buf, cap, op, PROTO_F_REPLY, req_id, 0, len);
    if (!b)
        return -EMSGSIZE;
    if (len && b != recs)
        memmove(b, recs, len);
    return (ssize_t)(PROTO_HDR_LEN + len);
}

ssize_t proto_enc_release(void *buf, size_t cap, uint32_t req_id, const uint32_t *leases, uint32_t n)
{
    uint8_t *b;

    if (n == 0 || n > PROTO_MAX_RELEASE)
        return -EMSGSIZE;
    b = enc_begin(buf, cap, PROTO_OP_RELEASE, 0, req_id, 0, (size_t)n * 4);
    if (!b)
        return -EMSGSIZE;
    for (uint32_t i = 0; i < n; i++)
        gr__le_put32(b + 4 * i, leases[i]);
    return (ssize_t)(PROTO_HDR_LEN + (size_t)n * 4);
}

ssize_t proto_enc_hint(void *buf, size_t cap, uint32_t req_id, uint32_t flags,
                       const proto_hint_ent *ents, uint32_t n)
{
    size_t body = PROTO_HINT_PREFIX, off;
    uint8_t *b;

    if (n > PROTO_MAX_HINTS || (flags & ~PROTO_HINT_CLEAR))
        return -EMSGSIZE;
    for (uint32_t i = 0; i < n; i++) {
        if (ents[i].path_len == 0 || ents[i].path_len > PROTO_MAX_PATH)
            return -EMSGSIZE;
        body += PROTO_HINT_ENT_SIZE(ents[i].path_len);
    }
    if (body > PROTO_MAX_BODY)
        return -EMSGSIZE;
    b = enc_begin(buf, cap, PROTO_OP_HINT, 0, req_id, 0, body);
    if (!b)
        return -EMSGSIZE;
    gr__le_put32(b, flags);
    gr__le_put32(b + 4, n);
    off = PROTO_HINT_PREFIX;
    for (uint32_t i = 0; i < n; i++) {
        gr__le_put64(b + off, ents[i].off);
        gr__le_put64(b + off + 8, ents[i].len);
        gr__le_put32(b + off + 16, ents[i].path_len);
        memcpy(b + off + PROTO_HINT_ENT_FIXED, ents[i].path, ents[i].path_len);
        off += PROTO_HINT_ENT_SIZE(ents[i].path_len);
    }
    return (ssize_t)(PROTO_HDR_LEN + body);
}

int proto_hint_next(const proto_msg *m, size_t *off, proto_hint_ent *out)
{
    const uint8_t *e = m->u.hint.ents + *off;

    if (*off >= m->u.hint.len)
        return 0;
    out->off = gr__le_get64(e);
    out->len = gr__le_get64(e + 8);
    out->path_len = gr__le_get32(e + 16);
    out->path = (const char *)e + PROTO_HINT_ENT_FIXED;
    *off += PROTO_HINT_ENT_SIZE(out->path_len);
    return 1;
}

const proto_readx *proto_msg_readx(const proto_msg *m)
{
    if (!(m->h.flags & PROTO_F_REPLY) || m->h.status < 0)
        return NULL;
    if (m->h.op == PROTO_OP_READX)
        return &m->u.readx;
    if (m->h.op == PROTO_OP_OPENX)
        return &m->u.openx_reply.rx;
    return NULL;
}

void proto_extent_at(const proto_msg *m, uint32_t i, proto_extent *out)
{
    const proto_readx *rx = proto_msg_readx(m);
    const uint8_t *e = rx->extents + (size_t)i * PROTO_EXTENT_LEN;

    out->seg = gr__le_get32(e);
    out->lease = gr__le_get32(e + 4);
    out->off = gr__le_get64(e + 8);
    out->len = gr__le_get32(e + 16);
    out->flags = gr__le_get32(e + 20);
}

uint32_t proto_release_at(const proto_msg *m, uint32_t i)
{
    return gr__le_get32(m->u.release.ids + (size_t)i * 4);
}
