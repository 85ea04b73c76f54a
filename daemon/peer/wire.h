/*
 * wire.h - the peer protocol's frames (proto/PROTOCOL.md, "Peer protocol").
 *
 * A frame is a u32 length (of what follows it), a u8 type and the type's
 * fields, little-endian.  A connection starts with the mutual
 * authentication (HELLO, CHALLENGE, AUTH, WELCOME: an HMAC-SHA256
 * challenge-response over both nonces and both names with the shared key,
 * so each side proves it holds the key before anything else is read),
 * then carries GET requests, each answered by one DATA frame (the chunk's
 * bytes inline, or for RDMA where to read them) before the next.
 *
 * Everything here is pure: encoders write into a caller's buffer,
 * decoders check every length against the bytes they were given.
 */
#ifndef GR_PEER_WIRE_H
#define GR_PEER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PEER_MAGIC "GRPEER02"       /* 8 bytes, HELLO's first (02: GET has the ctime) */
#define PEER_NONCE_LEN 32
#define PEER_MAC_LEN 32
#define PEER_TOKEN_LEN 32
#define PEER_NAME_MAX 300
#define PEER_PATH_MAX 4096
#define PEER_CTRL_MAX 8192          /* largest frame that is not DATA */
#define PEER_HDR_LEN 5              /* u32 length + u8 type */

typedef enum peer_type {
    PEER_HELLO = 1,             /* client: magic, flags, nonce, its name */
    PEER_CHALLENGE = 2,         /* server: nonce, MAC proving the key, its name */
    PEER_AUTH = 3,              /* client: MAC proving the key */
    PEER_WELCOME = 4,           /* server: transport offered (RDMA port, token) */
    PEER_GET = 5,               /* client: one chunk of a file */
    PEER_DATA = 6,              /* server: its answer */
    PEER_DONE = 7,              /* client (RDMA): the read is over, unpin */
} peer_type;

#define PEER_F_RDMA 0x1             /* HELLO: can read by RDMA; WELCOME: may */

typedef struct peer_hello {
    uint32_t flags;
    uint8_t nonce[PEER_NONCE_LEN];
    char name[PEER_NAME_MAX];   /* the sender's member name, "HOST:PORT" */
} peer_hello;

typedef struct peer_challenge {
    uint8_t nonce[PEER_NONCE_LEN];
    uint8_t mac[PEER_MAC_LEN];
    char name[PEER_NAME_MAX];
} peer_challenge;

typedef struct peer_welcome {
    uint32_t flags;             /* PEER_F_RDMA: rdma_port and token are valid */
    uint16_t rdma_port;
    uint8_t token[PEER_TOKEN_LEN];
} peer_welcome;

/* A chunk of a file, named as every member sees it: the path (the members
 * mount the DFS at the same place), and the attributes the asker saw, so
 * that the home serves the same version or none. */
typedef struct peer_get {
    uint64_t req;
    uint64_t idx;
    uint64_t ino;
    uint64_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;
    uint32_t chunk_size;
    uint32_t flags;
    uint16_t path_len;
    const char *path;           /* decode: points into the frame */
} peer_get;

typedef struct peer_data {
    uint64_t req;
    int32_t status;             /* 0, or -errno: not served (ESTALE: another version there) */
    uint32_t len;               /* bytes of the chunk */
    uint64_t hash;              /* XXH3-64 of them */
    uint32_t flags;             /* PEER_F_RDMA: (raddr, rkey, lease) instead of inline bytes */
    uint64_t raddr;
    uint32_t rkey;
    uint64_t lease;
} peer_data;

/* The fixed part of a DATA frame before inline bytes (header included). */
#define PEER_DATA_FIXED (PEER_HDR_LEN + 8 + 4 + 4 + 8 + 4 + 8 + 4 + 8)

/* A frame's header: 0 and *type, *body_len (bytes after the header); or
 * -EPROTO (length 0 or over max).  buf holds at least PEER_HDR_LEN bytes. */
int peer_frame_peek(const uint8_t *buf, uint32_t max, uint8_t *type, uint32_t *body_len);

/* Encoders: the whole frame into buf (cap bytes); its length, or -EMSGSIZE. */
int peer_enc_hello(uint8_t *buf, size_t cap, const peer_hello *h);
int peer_enc_challenge(uint8_t *buf, size_t cap, const peer_challenge *c);
int peer_enc_auth(uint8_t *buf, size_t cap, const uint8_t mac[PEER_MAC_LEN]);
int peer_enc_welcome(uint8_t *buf, size_t cap, const peer_welcome *w);
int peer_enc_get(uint8_t *buf, size_t cap, const peer_get *g);
/* DATA's fixed part; the frame's length counts d->len inline bytes after it
 * unless d->flags has PEER_F_RDMA. */
int peer_enc_data(uint8_t *buf, size_t cap, const peer_data *d);
int peer_enc_done(uint8_t *buf, size_t cap, uint64_t lease);

/* Decoders of a frame's body (after the header): 0 or -EPROTO. */
int peer_dec_hello(const uint8_t *b, size_t len, peer_hello *h);
int peer_dec_challenge(const uint8_t *b, size_t len, peer_challenge *c);
int peer_dec_auth(const uint8_t *b, size_t len, uint8_t mac[PEER_MAC_LEN]);
int peer_dec_welcome(const uint8_t *b, size_t len, peer_welcome *w);
int peer_dec_get(const uint8_t *b, size_t len, peer_get *g);
/* DATA's fixed fields from the first PEER_DATA_FIXED - PEER_HDR_LEN bytes
 * of the body; body_len is the whole body's, checked against d->len. */
int peer_dec_data(const uint8_t *b, size_t len, uint32_t body_len, peer_data *d);
int peer_dec_done(const uint8_t *b, size_t len, uint64_t *lease);

/* The MACs: HMAC-SHA256 with key over a label, both nonces and both names
 * (client's first).  role 0: the server's proof, 1: the client's.  0 or
 * -EIO (the crypto library failed). */
int peer_mac(const uint8_t *key, size_t keylen, int role, const uint8_t nc[PEER_NONCE_LEN],
             const uint8_t ns[PEER_NONCE_LEN], const char *cname, const char *sname,
             uint8_t out[PEER_MAC_LEN]);
/* Constant-time comparison of two MACs: 1 equal. */
int peer_mac_equal(const uint8_t a[PEER_MAC_LEN], const uint8_t b[PEER_MAC_LEN]);

/* The cluster-wide key of a chunk (what rendezvous hashing places), the
 * same on every member: from the path and the attributes. */
uint64_t peer_chunk_key(const char *path, size_t path_len, uint64_t ino, uint64_t size,
                        int64_t mtime_ns, uint64_t idx);

#endif
