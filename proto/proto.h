/*
 * proto.h - Granary's wire format: pure encode/decode of the messages that
 * travel over the daemon's Unix SOCK_SEQPACKET socket.
 *
 * No sockets, no allocation, no global state: the daemon, the client library
 * and the fuzzer all use this same code.  proto/PROTOCOL.md specifies the
 * format byte by byte; this header is the C view of it.
 *
 * Every message is a 24-byte little-endian header followed by body_len bytes
 * of body.  Decoders never trust a length: they check it against the bytes
 * present and against PROTO_MAX_BODY before looking at the body.
 */
#ifndef GR_PROTO_H
#define GR_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROTO_MAGIC     0x594e5247u     /* "GRNY" on the wire */
#define PROTO_VERSION   2
#define PROTO_HDR_LEN   24
#define PROTO_MAX_DATA  (128u * 1024)   /* most file bytes in one READ reply */
#define PROTO_MAX_PATH  4096            /* longest path, bytes, no NUL */
#define PROTO_MAX_ERRMSG 256            /* longest error text in a reply */
#define PROTO_MAX_READX (64u << 20)     /* most bytes one READX may ask for */
#define PROTO_MAX_EXTENTS 32            /* extents in one READX reply */
#define PROTO_MAX_RELEASE 1024          /* leases in one RELEASE */
#define PROTO_MAX_BODY  (PROTO_MAX_DATA + 1024)

#define PROTO_MAX_HINTS 4096            /* ranges in one HINT message */
#define PROTO_MAX_REPORT 64             /* counters (records) in one REPORT request */
#define PROTO_HINT_PREFIX 8             /* u32 flags, u32 count */
#define PROTO_HINT_ENT_FIXED 20         /* u64 off, u64 len, u32 path_len; then the path */
#define PROTO_HINT_CLEAR 0x1u           /* HINT flag: drop the list first */
#define PROTO_MAX_MSG   (PROTO_HDR_LEN + PROTO_MAX_BODY)

/* Decoder results besides 0 and -errno. */
#define PROTO_NEED_MORE 1               /* the buffer ends inside a message */

/* ADMIN commands (first body byte); their arguments and results are
 * records (below), named in PROTOCOL.md. */
typedef enum proto_admin_cmd {
    PROTO_ADMIN_EVICT = 1,      /* drop a file's cached chunks (admin only) */
    PROTO_ADMIN_INVALIDATE = 2, /* drop them and forget its attributes (admin only) */
    PROTO_ADMIN_PIN = 3,        /* never evict the file's chunks (admin only) */
    PROTO_ADMIN_UNPIN = 4,      /* undo PIN (admin only) */
    PROTO_ADMIN_HEALTH = 5,     /* healthy or not, and why (anyone) */
    PROTO_ADMIN_CONFIG = 6,     /* the running configuration, as INI text (anyone) */
    PROTO_ADMIN_WARMUP = 7,     /* start or extend a warmup job (admin only) */
    PROTO_ADMIN_WARMUP_STATUS = 8, /* every warmup job's progress (anyone) */
    PROTO_ADMIN_WARMUP_CANCEL = 9, /* stop a warmup job (admin only) */
    PROTO_ADMIN_DATASET_ADD = 10,   /* register a dataset and scan it (admin only) */
    PROTO_ADMIN_DATASET_LIST = 11,  /* the registered datasets (anyone) */
    PROTO_ADMIN_DATASET_REMOVE = 12, /* unregister one (admin only) */
    PROTO_ADMIN_DATASET_RESCAN = 13, /* scan one again now (admin only) */
    PROTO_ADMIN_ANALYZE = 14,   /* how each job reads, and what to set (anyone: own jobs) */
    PROTO_ADMIN_CKPT_LIST = 15,     /* checkpoints and their states (anyone: their own) */
    PROTO_ADMIN_PEERS = 16,         /* the peer cache's members and their state (anyone) */
    PROTO_ADMIN_MAX_
} proto_admin_cmd;

/* Header flags. */
#define PROTO_F_REPLY   0x0001u         /* set on every reply */
#define PROTO_F_NOREPLY 0x0002u         /* request: send no reply at all (CLOSE) */
#define PROTO_F_WHOLE   0x0004u         /* READX request: extents cover whole chunks */
#define PROTO_F_STAGED  0x0008u         /* OPEN/OPENX reply (status 0): the file is a staged
                                         * checkpoint, not yet at its path; the reply carries
                                         * a read-only fd of the staged copy, its last fd */

/* OPENX request flags. */
#define PROTO_OPENX_CLOSE  0x1u         /* read by path: keep no handle */
#define PROTO_OPENX_IFCHEAP 0x2u        /* read only what costs no source read of a chunk
                                         * the client may not want: a file of one chunk,
                                         * or chunks in DRAM already */
#define PROTO_OPENX_PREFIX 16           /* u64 off, u32 len, u32 flags; then the path */
#define PROTO_OPENX_FIXED  (PROTO_ATTR_LEN + 8)  /* reply: attr, i32 read_status, u32 0 */

/* STAT reply: attr, u32 valid_ms, u32 0.  READDIR request: u64 cookie,
 * u32 max entries, u32 flags, then the path; reply: u64 next cookie (0:
 * the end), u32 count, u32 valid_ms, u32 flags, u32 0, then the entries
 * (u8 type, u8 0, u16 name_len, name, and with PROTO_READDIR_PLUS the
 * 64-byte attributes). */
#define PROTO_STAT_LEN        (PROTO_ATTR_LEN + 8)
#define PROTO_READDIR_PREFIX  16
#define PROTO_READDIR_REPLY   24
#define PROTO_READDIR_PLUS    0x1u      /* entries with their attributes */
#define PROTO_MAX_DIRENTS     4096      /* entries one READDIR may ask for */
#define PROTO_DIRENT_DIR      4         /* DT_DIR */
#define PROTO_DIRENT_REG      8         /* DT_REG */
/* Also valid: the other kinds' DT_ values (1 FIFO, 2 CHR, 6 BLK, 10 LNK,
 * 12 SOCK): named and typed, never served (their attributes are lstat's). */
#define PROTO_DIRENT_VALID(t) ((t) == 1 || (t) == 2 || (t) == 4 || (t) == 6 || (t) == 8 || \
                               (t) == 10 || (t) == 12)

typedef enum proto_op {
    PROTO_OP_HELLO = 1,   /* version handshake and limits */
    PROTO_OP_OPEN  = 2,   /* path -> handle + attributes */
    PROTO_OP_CLOSE = 3,   /* drop a handle */
    PROTO_OP_READ  = 4,   /* bytes of an open handle */
    PROTO_OP_STATS = 5,   /* the daemon's counters */
    PROTO_OP_READX = 6,   /* bytes of an open handle, as shared-memory extents where possible */
    PROTO_OP_RELEASE = 7, /* give leases back; the one request without a reply */
    PROTO_OP_ADMIN = 8,   /* operator commands: evict, invalidate, pin, unpin, health, config, warmup */
    PROTO_OP_HINT  = 9,   /* append ranges to the connection's hint list (or clear it) */
    PROTO_OP_REPORT = 10, /* client-side counters (libgranary's GPU path), added to the daemon's */
    PROTO_OP_OPENX = 11,  /* open and read in one round trip (or read by path) */
    PROTO_OP_STAT  = 12,  /* a path's attributes, from a registered dataset's manifest */
    PROTO_OP_READDIR = 13, /* a directory's entries (and attributes), paged, from a manifest */
    PROTO_OP_CKPT_PUT = 14, /* stage a checkpoint from the fd it carries, for a destination */
    PROTO_OP_MAX_
} proto_op;

typedef struct proto_hdr {
    uint32_t magic;
    uint8_t version;
    uint8_t op;           /* proto_op */
    uint16_t flags;       /* PROTO_F_* */
    uint32_t req_id;      /* chosen by the client, echoed in the reply */
    uint32_t body_len;
    int32_t status;       /* replies: 0 or -errno; requests: 0 */
    uint32_t reserved;    /* 0 */
} proto_hdr;

/* File attributes, as the daemon saw them when the file was opened. */
typedef struct proto_attr {
    uint32_t handle;      /* per-connection handle for READ and CLOSE */
    uint32_t chunk_size;  /* the daemon's chunk size for this file */
    uint64_t size;
    uint64_t ino;
    uint64_t dev;
    int64_t mtime_sec;
    uint32_t mtime_nsec;
    uint32_t mode;
    uint32_t blksize;
    uint32_t uid;
    uint32_t gid;
    uint32_t nlink;
} proto_attr;
#define PROTO_ATTR_LEN 64

typedef struct proto_hello {
    uint32_t version;     /* highest protocol version the sender speaks */
    uint32_t max_msg;     /* largest message the sender accepts */
    uint32_t max_data;    /* largest READ reply payload (reply only) */
    uint32_t chunk_size;  /* daemon's default chunk size (reply only) */
    uint64_t lease_cache; /* bytes of leases the client may keep to serve later
                           * reads without asking (reply only; 0: none) */
    uint32_t lease_ttl_ms; /* how long it may serve reads from one (reply only) */
    uint32_t features;    /* request: PROTO_FEAT_* the client understands (others
                           * ignored); reply: those the daemon will use */
} proto_hello;
#define PROTO_FEAT_NOKEEP 0x1u  /* extents may carry PROTO_EXTENT_NOKEEP */
#define PROTO_FEAT_GENS 0x2u    /* segments carry a generation table after their blocks
                                 * (PROTOCOL.md, "Kept leases"): a client may keep
                                 * serving reads of a released lease while it holds */
#define PROTO_HELLO_LEN 32

typedef struct proto_read {
    uint32_t handle;
    uint32_t len;         /* 0..PROTO_MAX_DATA (0 gets an empty reply) */
    uint64_t off;
} proto_read;
#define PROTO_READ_LEN 16

/* One extent of a READX reply: len bytes at off in arena segment seg,
 * held for the client under lease until it sends RELEASE.  flags
 * PROTO_EXTENT_FD: the reply carries (SCM_RIGHTS, in extent order) an fd for
 * seg that replaces any the client had for it. */
typedef struct proto_extent {
    uint32_t seg;
    uint32_t lease;
    uint64_t off;
    uint32_t len;
    uint32_t flags;
} proto_extent;
#define PROTO_EXTENT_FD 0x1u
/* Do not keep this lease to serve later reads: the tier holds the chunk
 * outside its policy (refused: in the small spill reserve), so a kept lease
 * would pin a block the next refused chunk needs.  Only to clients that
 * asked for PROTO_FEAT_NOKEEP in HELLO. */
#define PROTO_EXTENT_NOKEEP 0x2u
#define PROTO_EXTENT_LEN 24
#define PROTO_READX_PREFIX 8  /* u16 nextents, u16 reserved, u32 inline_len */

/* The body of a READX reply (also the tail of an OPENX reply). */
typedef struct proto_readx {
    uint32_t nextents;
    const uint8_t *extents;        /* nextents x PROTO_EXTENT_LEN, see proto_extent_at */
    uint32_t inline_len;
    const uint8_t *inline_data;    /* the bytes after the extents' bytes */
} proto_readx;

/* A decoded message.  Pointers point into the decoded buffer and live as
 * long as it does. */
typedef struct proto_msg {
    proto_hdr h;
    union {
        proto_hello hello;                 /* HELLO request and reply */
        struct {
            const char *path;              /* not NUL-terminated */
            uint32_t len;
        } open;                            /* OPEN request */
        proto_attr attr;                   /* OPEN reply */
        uint32_t handle;                   /* CLOSE request */
        proto_read read;                   /* READ and READX requests */
        proto_readx readx;                 /* READX reply */
        struct {
            uint64_t off;
            uint32_t len;                  /* 0..PROTO_MAX_READX */
            uint32_t flags;                /* PROTO_OPENX_* */
            const char *path;              /* not NUL-terminated */
            uint32_t path_len;
        } openx;                           /* OPENX request */
        struct {
            proto_attr attr;               /* handle 0 */
            uint32_t valid_ms;             /* how long the client may trust it */
        } stat;                            /* STAT reply */
        struct {
            uint64_t cookie;               /* 0: from the start */
            uint32_t max;                  /* 1..PROTO_MAX_DIRENTS */
            uint32_t flags;                /* PROTO_READDIR_* */
            const char *path;
            uint32_t path_len;
        } readdir;                         /* READDIR request */
        struct {
            uint64_t next;                 /* 0: no more */
            uint32_t count, valid_ms, flags;
            const uint8_t *ents;           /* see proto_dirent_next */
            uint32_t len;
        } dirents;                         /* READDIR reply */
        struct {
            proto_attr attr;               /* handle 0 with PROTO_OPENX_CLOSE */
            int32_t read_status;           /* 0: rx holds the bytes; -EAGAIN: not read
                                            * (IFCHEAP); else the read's error */
            proto_readx rx;
        } openx_reply;                     /* OPENX reply */
        struct {
            uint32_t count;
            const uint8_t *ids;            /* count x u32, see proto_release_at */
        } release;                         /* RELEASE request */
        struct {
            uint8_t cmd;                   /* proto_admin_cmd */
            const uint8_t *recs;           /* its arguments: records, see proto_rec_next */
            uint32_t len;
        } admin;                           /* ADMIN request */
        struct {
            const uint8_t *p;              /* records, checked: see proto_rec_next */
            uint32_t len;
        } recs;                            /* STATS, ADMIN, HINT, REPORT and CKPT_PUT
                                            * replies; REPORT request (all PROTO_REC_U64);
                                            * CKPT_PUT request */
        struct {
            uint32_t flags;                /* PROTO_HINT_* */
            uint32_t count;
            const uint8_t *ents;           /* see proto_hint_next */
            uint32_t len;                  /* bytes at ents */
        } hint;                            /* HINT request */
        struct {
            const uint8_t *p;
            uint32_t len;
        } data;                            /* READ reply */
        struct {
            const char *text;              /* may be empty, not NUL-terminated */
            uint32_t len;
        } error;                           /* any reply with status < 0 */
    } u;
} proto_msg;

/*
 * Decode one message from buf[0..len).  On 0, *m is filled and *used is the
 * message's length.  Returns PROTO_NEED_MORE if buf holds only part of a
 * message (nothing in *m is valid then), or a negative error:
 *   -EPROTO           bad magic, reserved bits set, unknown opcode,
 *                     malformed body (wrong length for its opcode)
 *   -EPROTONOSUPPORT  other protocol version
 *   -EMSGSIZE         body_len above PROTO_MAX_BODY, or a field above its limit
 * A decode error on a request lets the caller answer with an error reply:
 * whenever the header itself was readable, m->h is filled.
 */
int proto_decode(const void *buf, size_t len, proto_msg *m, size_t *used);

/* Decode only the header (PROTO_HDR_LEN bytes).  Same results as above;
 * *h is filled whenever len >= PROTO_HDR_LEN.  body_len is checked last, so
 * -EMSGSIZE means the rest of the header (op, flags, status) is valid. */
int proto_decode_hdr(const void *buf, size_t len, proto_hdr *h);

/* Write a header for (op, flags, req_id, status, body_len) into
 * buf[PROTO_HDR_LEN].  Used with an iovec when the body lives elsewhere. */
void proto_encode_hdr(void *buf, uint8_t op, uint16_t flags, uint32_t req_id,
                      int32_t status, uint32_t body_len);
/* Set PROTO_F_STAGED in an encoded OPEN or OPENX reply's header. */
void proto_mark_staged(void *buf);

/*
 * Encoders: write a whole message into buf (cap bytes) and return its
 * length, or -EMSGSIZE if it does not fit or a field is over its limit.
 */
ssize_t proto_enc_hello(void *buf, size_t cap, uint16_t flags, uint32_t req_id,
                        const proto_hello *hello);
ssize_t proto_enc_open(void *buf, size_t cap, uint32_t req_id, const char *path, size_t len);
ssize_t proto_enc_attr(void *buf, size_t cap, uint32_t req_id, const proto_attr *a);
ssize_t proto_enc_close(void *buf, size_t cap, uint32_t req_id, uint32_t handle);
ssize_t proto_enc_read(void *buf, size_t cap, uint32_t req_id, const proto_read *r);
ssize_t proto_enc_stats_req(void *buf, size_t cap, uint32_t req_id);
/* READX request: like READ, but len may be up to PROTO_MAX_READX.  flags:
 * 0 or PROTO_F_WHOLE. */
ssize_t proto_enc_readx(void *buf, size_t cap, uint32_t req_id, const proto_read *r);
ssize_t proto_enc_readx_flags(void *buf, size_t cap, uint32_t req_id, uint16_t flags,
                              const proto_read *r);
/* OPENX request: open path and read len bytes at off in one round trip
 * (flags PROTO_OPENX_*). */
ssize_t proto_enc_openx(void *buf, size_t cap, uint32_t req_id, uint64_t off, uint32_t len,
                        uint32_t flags, const char *path, size_t path_len);
/* OPENX reply, except its inline bytes (as proto_enc_readx_reply): the
 * attributes, the read's status, then the READX body. */
ssize_t proto_enc_openx_reply(void *buf, size_t cap, uint32_t req_id, const proto_attr *a,
                              int32_t read_status, const proto_extent *ext, uint32_t n,
                              uint32_t inline_len);
/*
 * READX reply, except its inline bytes: header, prefix and n extents, with
 * body_len counting inline_len more bytes that the caller sends right after
 * (an iovec).  The reply covers the extents' bytes, then the inline bytes,
 * contiguous in the file from the request's offset; it may cover less than
 * was asked (the client asks again for the rest).
 */
ssize_t proto_enc_readx_reply(void *buf, size_t cap, uint32_t req_id, const proto_extent *ext,
                              uint32_t n, uint32_t inline_len);
/* ADMIN request: cmd and its arguments, len bytes of records built with
 * proto_rec_u64/proto_rec_str (checked). */
ssize_t proto_enc_admin(void *buf, size_t cap, uint32_t req_id, uint8_t cmd, const void *recs,
                        size_t len);
/* REPORT request: len bytes of records built with proto_rec_u64, each a
 * counter's growth since the sender's previous REPORT (checked: every
 * record PROTO_REC_U64, at most PROTO_MAX_REPORT of them). */
ssize_t proto_enc_report(void *buf, size_t cap, uint32_t req_id, const void *recs, size_t len);
/* CKPT_PUT request: len bytes of records ("dest" STR), checked, at least
 * one.  The checkpoint's bytes travel as the message's one fd. */
ssize_t proto_enc_ckpt_put(void *buf, size_t cap, uint32_t req_id, const void *recs, size_t len);
/* A reply of op (STATS, ADMIN, HINT, REPORT, CKPT_PUT) whose body is len bytes of
 * records (checked), status 0. */
ssize_t proto_enc_records(void *buf, size_t cap, uint8_t op, uint32_t req_id, const void *recs,
                          size_t len);
/* RELEASE request of n lease ids (1..PROTO_MAX_RELEASE). */
ssize_t proto_enc_release(void *buf, size_t cap, uint32_t req_id, const uint32_t *leases, uint32_t n);
/* One range of a HINT request. */
typedef struct proto_hint_ent {
    uint64_t off;
    uint64_t len;          /* 0: to the end of the file */
    const char *path;      /* not NUL-terminated */
    uint32_t path_len;     /* 1..PROTO_MAX_PATH */
} proto_hint_ent;

/* Bytes one range takes in a HINT body. */
#define PROTO_HINT_ENT_SIZE(path_len) (PROTO_HINT_ENT_FIXED + (size_t)(path_len))

/* HINT request with n ranges (0..PROTO_MAX_HINTS; 0 with PROTO_HINT_CLEAR
 * clears the list). */
ssize_t proto_enc_hint(void *buf, size_t cap, uint32_t req_id, uint32_t flags,
                       const proto_hint_ent *ents, uint32_t n);
/* The range at *off (start at 0) of a decoded HINT request, advancing *off:
 * 1 when one was read, 0 at the end.  The decoder has checked them all. */
int proto_hint_next(const proto_msg *m, size_t *off, proto_hint_ent *out);

/* STAT request (the path) and reply. */
ssize_t proto_enc_stat(void *buf, size_t cap, uint32_t req_id, const char *path, size_t len);
ssize_t proto_enc_stat_reply(void *buf, size_t cap, uint32_t req_id, const proto_attr *a,
                             uint32_t valid_ms);
/* READDIR request. */
ssize_t proto_enc_readdir(void *buf, size_t cap, uint32_t req_id, uint64_t cookie, uint32_t max,
                          uint32_t flags, const char *path, size_t len);
/* One READDIR reply entry. */
typedef struct proto_dirent {
    uint8_t type;                  /* a DT_ value: PROTO_DIRENT_VALID */
    const char *name;              /* not NUL-terminated */
    uint32_t name_len;             /* 1..255 */
    int has_attr;
    proto_attr attr;
} proto_dirent;
/* READDIR reply: n entries (each with attr when flags has PLUS). */
ssize_t proto_enc_readdir_reply(void *buf, size_t cap, uint32_t req_id, uint64_t next,
                                uint32_t valid_ms, uint32_t flags, const proto_dirent *ents,
                                uint32_t n);
/* Bytes one entry takes in a READDIR reply. */
#define PROTO_DIRENT_SIZE(name_len, plus) (4 + (size_t)(name_len) + ((plus) ? PROTO_ATTR_LEN : 0))
/* The entry at *off (start at 0) of a decoded READDIR reply, advancing *off:
 * 1, or 0 at the end.  The decoder has checked them all. */
int proto_dirent_next(const proto_msg *m, size_t *off, proto_dirent *out);

/* A bodiless success reply (CLOSE, HINT, REPORT). */
ssize_t proto_enc_ok(void *buf, size_t cap, uint8_t op, uint32_t req_id);
/* An error reply: status is -errno (-4095..-1, else -EINVAL); text (may be
 * NULL) is cut to PROTO_MAX_ERRMSG bytes, before any UTF-8 sequence that
 * would straddle the cut. */
ssize_t proto_enc_error(void *buf, size_t cap, uint8_t op, uint32_t req_id,
                        int32_t status, const char *text);

/*
 * Records: the typed fields of STATS, ADMIN, HINT and REPORT messages, back to back
 * until the body ends: {u8 name_len (1..255), name, u8 kind, value}; kind
 * PROTO_REC_U64: a u64; kind PROTO_REC_STR: u32 len, then len bytes (UTF-8
 * text, no NUL).  proto_rec_u64 and proto_rec_str append one at *off of a
 * body of cap bytes (-EMSGSIZE when it does not fit, -EINVAL for a bad
 * name); proto_rec_next reads the one at *off, advancing it: 1 when one was
 * read, 0 at the end, -EPROTO if malformed.  Decoded messages have had
 * every record checked.
 */
#define PROTO_REC_U64 1
#define PROTO_REC_STR 2

typedef struct proto_rec {
    const char *name;      /* not NUL-terminated */
    uint32_t name_len;
    uint8_t kind;          /* PROTO_REC_* */
    uint64_t u64;          /* PROTO_REC_U64 */
    const char *str;       /* PROTO_REC_STR, not NUL-terminated */
    uint32_t len;
} proto_rec;

int proto_rec_u64(void *body, size_t cap, size_t *off, const char *name, uint64_t v);
int proto_rec_str(void *body, size_t cap, size_t *off, const char *name, const void *s,
                  size_t len);
int proto_rec_next(const uint8_t *body, size_t len, size_t *off, proto_rec *out);
/* Whether r is named name (NUL-terminated). */
int proto_rec_is(const proto_rec *r, const char *name);

/* Extent i of a decoded READX or OPENX reply, lease i of a decoded
 * RELEASE.  The READX body of a decoded READX or OPENX reply (NULL for
 * other messages). */
void proto_extent_at(const proto_msg *m, uint32_t i, proto_extent *out);
const proto_readx *proto_msg_readx(const proto_msg *m);
uint32_t proto_release_at(const proto_msg *m, uint32_t i);

/* Name of an opcode, "?" if unknown. */
const char *proto_op_name(unsigned op);

#endif
