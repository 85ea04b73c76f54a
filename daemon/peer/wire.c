/*
 * wire.c - the peer protocol's frames.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <xxhash.h>

#include "le.h"
#include "wire.h"

/* A cursor over a buffer being written or read: any overrun sets bad and
 * stops moving. */
typedef struct cur {
    uint8_t *w;
    const uint8_t *r;
    size_t off, cap;
    int bad;
} cur;

static size_t advance(cur *c, size_t n)
{
    size_t at = c->off;

    if (c->bad || n > c->cap - c->off) {
        c->bad = 1;
        return SIZE_MAX;
    }
    c->off += n;
    return at;
}

/* Room for n bytes of a frame being written, NULL past the end. */
static uint8_t *wtake(cur *c, size_t n)
{
    size_t at = advance(c, n);
    return at == SIZE_MAX ? NULL : c->w + at;
}

/* The next n bytes of a body being read, NULL past the end. */
static const uint8_t *take(cur *c, size_t n)
{
    size_t at = advance(c, n);
    return at == SIZE_MAX ? NULL : c->r + at;
}

static void put8(cur *c, uint8_t v)
{
    uint8_t *p = wtake(c, 1);
    if (p)
        *p = v;
}

static void put16(cur *c, uint16_t v)
{
    uint8_t *p = wtake(c, 2);
    if (p)
        gr__le_put16(p, v);
}

static void put32(cur *c, uint32_t v)
{
    uint8_t *p = wtake(c, 4);
    if (p)
        gr__le_put32(p, v);
}

static void put64(cur *c, uint64_t v)
{
    uint8_t *p = wtake(c, 8);
    if (p)
        gr__le_put64(p, v);
}

static void putb(cur *c, const void *b, size_t n)
{
    uint8_t *p = wtake(c, n);
    if (p && n)
        memcpy(p, b, n);
}

static uint16_t get16(cur *c)
{
    const uint8_t *p = take(c, 2);
    return p ? gr__le_get16(p) : 0;
}

static uint32_t get32(cur *c)
{
    const uint8_t *p = take(c, 4);
    return p ? gr__le_get32(p) : 0;
}

static uint64_t get64(cur *c)
{
    const uint8_t *p = take(c, 8);
    return p ? gr__le_get64(p) : 0;
}

static void getb(cur *c, void *b, size_t n)
{
    const uint8_t *p = take(c, n);
    if (p)
        memcpy(b, p, n);
}

/* A name: u16 length, bytes (no NUL, none inside), into out. */
static void put_name(cur *c, const char *s)
{
    size_t n = strnlen(s, PEER_NAME_MAX);
    put16(c, (uint16_t)n);
    putb(c, s, n);
}

static void get_name(cur *c, char out[PEER_NAME_MAX])
{
    uint16_t n = get16(c);
    const uint8_t *p;

    if (n == 0 || n >= PEER_NAME_MAX) {
        c->bad = 1;
        return;
    }
    p = take(c, n);
    if (!p || memchr(p, '\0', n)) {
        c->bad = 1;
        return;
    }
    memcpy(out, p, n);
    out[n] = '\0';
}

static cur wcur(uint8_t *buf, size_t cap, uint8_t type)
{
    cur c = { .w = buf, .cap = cap };
    put32(&c, 0);               /* the length, once known */
    put8(&c, type);
    return c;
}

static int wdone(cur *c, uint32_t extra)
{
    if (c->bad || c->off > UINT32_MAX - extra)
        return -EMSGSIZE;
    gr__le_put32(c->w, (uint32_t)(c->off - 4 + extra));
    return (int)c->off;
}

/* Decoders end with every byte used. */
static int rdone(const cur *c)
{
    return c->bad || c->off != c->cap ? -EPROTO : 0;
}

int peer_frame_peek(const uint8_t *buf, uint32_t max, uint8_t *type, uint32_t *body_len)
{
    uint32_t len = gr__le_get32(buf);

    if (len == 0 || len - 1 > max)
        return -EPROTO;
    *type = buf[4];
    *body_len = len - 1;
    return 0;
}

int peer_enc_hello(uint8_t *buf, size_t cap, const peer_hello *h)
{
    cur c = wcur(buf, cap, PEER_HELLO);
    putb(&c, PEER_MAGIC, 8);
    put32(&c, h->flags);
    putb(&c, h->nonce, PEER_NONCE_LEN);
    put_name(&c, h->name);
    return wdone(&c, 0);
}

int peer_dec_hello(const uint8_t *b, size_t len, peer_hello *h)
{
    cur c = { .r = b, .cap = len };
    char magic[8] = { 0 };

    getb(&c, magic, 8);
    if (!c.bad && memcmp(magic, PEER_MAGIC, 8) != 0)
        return -EPROTO;
    h->flags = get32(&c);
    getb(&c, h->nonce, PEER_NONCE_LEN);
    get_name(&c, h->name);
    return rdone(&c);
}

int peer_enc_challenge(uint8_t *buf, size_t cap, const peer_challenge *ch)
{
    cur c = wcur(buf, cap, PEER_CHALLENGE);
    putb(&c, ch->nonce, PEER_NONCE_LEN);
    putb(&c, ch->mac, PEER_MAC_LEN);
    put_name(&c, ch->name);
    return wdone(&c, 0);
}

int peer_dec_challenge(const uint8_t *b, size_t len, peer_challenge *ch)
{
    cur c = { .r = b, .cap = len };
    getb(&c, ch->nonce, PEER_NONCE_LEN);
    getb(&c, ch->mac, PEER_MAC_LEN);
    get_name(&c, ch->name);
    return rdone(&c);
}

int peer_enc_auth(uint8_t *buf, size_t cap, const uint8_t mac[PEER_MAC_LEN])
{
    cur c = wcur(buf, cap, PEER_AUTH);
    putb(&c, mac, PEER_MAC_LEN);
    return wdone(&c, 0);
}

int peer_dec_auth(const uint8_t *b, size_t len, uint8_t mac[PEER_MAC_LEN])
{
    cur c = { .r = b, .cap = len };
    getb(&c, mac, PEER_MAC_LEN);
    return rdone(&c);
}

int peer_enc_welcome(uint8_t *buf, size_t cap, const peer_welcome *w)
{
    cur c = wcur(buf, cap, PEER_WELCOME);
    put32(&c, w->flags);
    put16(&c, w->rdma_port);
    putb(&c, w->token, PEER_TOKEN_LEN);
    return wdone(&c, 0);
}

int peer_dec_welcome(const uint8_t *b, size_t len, peer_welcome *w)
{
    cur c = { .r = b, .cap = len };
    w->flags = get32(&c);
    w->rdma_port = get16(&c);
    getb(&c, w->token, PEER_TOKEN_LEN);
    return rdone(&c);
}

int peer_enc_get(uint8_t *buf, size_t cap, const peer_get *g)
{
    cur c = wcur(buf, cap, PEER_GET);

    if (g->path_len == 0 || g->path_len > PEER_PATH_MAX)
        return -EMSGSIZE;
    put64(&c, g->req);
    put64(&c, g->idx);
    put64(&c, g->ino);
    put64(&c, g->size);
    put64(&c, (uint64_t)g->mtime_ns);
    put64(&c, (uint64_t)g->ctime_ns);
    put32(&c, g->chunk_size);
    put32(&c, g->flags);
    put16(&c, g->path_len);
    putb(&c, g->path, g->path_len);
    return wdone(&c, 0);
}

int peer_dec_get(const uint8_t *b, size_t len, peer_get *g)
{
    cur c = { .r = b, .cap = len };
    const uint8_t *p;

    g->req = get64(&c);
    g->idx = get64(&c);
    g->ino = get64(&c);
    g->size = get64(&c);
    g->mtime_ns = (int64_t)get64(&c);
    g->ctime_ns = (int64_t)get64(&c);
    g->chunk_size = get32(&c);
    g->flags = get32(&c);
    g->path_len = get16(&c);
    if (c.bad || g->path_len == 0 || g->path_len > PEER_PATH_MAX)
        return -EPROTO;
    p = take(&c, g->path_len);
    if (!p || memchr(p, '\0', g->path_len))
        return -EPROTO;
    g->path = (const char *)p;
    return rdone(&c);
}

int peer_enc_data(uint8_t *buf, size_t cap, const peer_data *d)
{
    cur c = wcur(buf, cap, PEER_DATA);
    int inline_bytes = !(d->flags & PEER_F_RDMA) && d->status == 0;

    put64(&c, d->req);
    put32(&c, (uint32_t)d->status);
    put32(&c, d->len);
    put64(&c, d->hash);
    put32(&c, d->flags);
    put64(&c, d->raddr);
    put32(&c, d->rkey);
    put64(&c, d->lease);
    return wdone(&c, inline_bytes ? d->len : 0);
}

int peer_dec_data(const uint8_t *b, size_t len, uint32_t body_len, peer_data *d)
{
    cur c = { .r = b, .cap = len };
    uint32_t fixed = PEER_DATA_FIXED - PEER_HDR_LEN;

    if (len != fixed || body_len < fixed)
        return -EPROTO;
    d->req = get64(&c);
    d->status = (int32_t)get32(&c);
    d->len = get32(&c);
    d->hash = get64(&c);
    d->flags = get32(&c);
    d->raddr = get64(&c);
    d->rkey = get32(&c);
    d->lease = get64(&c);
    if (c.bad || d->status > 0)
        return -EPROTO;
    /* Inline bytes follow exactly when a chunk is served by TCP. */
    if (body_len - fixed != (d->status == 0 && !(d->flags & PEER_F_RDMA) ? d->len : 0))
        return -EPROTO;
    return rdone(&c);
}

int peer_enc_done(uint8_t *buf, size_t cap, uint64_t lease)
{
    cur c = wcur(buf, cap, PEER_DONE);
    put64(&c, lease);
    return wdone(&c, 0);
}

int peer_dec_done(const uint8_t *b, size_t len, uint64_t *lease)
{
    cur c = { .r = b, .cap = len };
    *lease = get64(&c);
    return rdone(&c);
}

int peer_mac(const uint8_t *key, size_t keylen, int role, const uint8_t nc[PEER_NONCE_LEN],
             const uint8_t ns[PEER_NONCE_LEN], const char *cname, const char *sname,
             uint8_t out[PEER_MAC_LEN])
{
    /* label | nc | ns | len(cname) cname | len(sname) sname */
    uint8_t msg[32 + 2 * PEER_NONCE_LEN + 4 + 2 * PEER_NAME_MAX];
    cur c = { .w = msg, .cap = sizeof(msg) };
    unsigned int outlen = 0;
    const char *label = role == 0 ? "granary-peer server proof" : "granary-peer client proof";

    putb(&c, label, strlen(label) + 1);
    putb(&c, nc, PEER_NONCE_LEN);
    putb(&c, ns, PEER_NONCE_LEN);
    put_name(&c, cname);
    put_name(&c, sname);
    if (c.bad || keylen > INT32_MAX)
        return -EIO;
    if (!HMAC(EVP_sha256(), key, (int)keylen, msg, c.off, out, &outlen) || outlen != PEER_MAC_LEN)
        return -EIO;
    return 0;
}

int peer_mac_equal(const uint8_t a[PEER_MAC_LEN], const uint8_t b[PEER_MAC_LEN])
{
    return CRYPTO_memcmp(a, b, PEER_MAC_LEN) == 0;
}

uint64_t peer_chunk_key(const char *path, size_t path_len, uint64_t ino, uint64_t size,
                        int64_t mtime_ns, uint64_t idx)
{
    uint8_t tail[32];

    gr__le_put64(tail, ino);
    gr__le_put64(tail + 8, size);
    gr__le_put64(tail + 16, (uint64_t)mtime_ns);
    gr__le_put64(tail + 24, idx);
    return XXH3_64bits_withSeed(tail, sizeof(tail), XXH3_64bits(path, path_len));
}
