/*
 * ckset.h - the checkpoint set container: the bytes a CKPT_PUT carries when
 * its "set" record is 1 (proto/PROTOCOL.md, "Checkpoint sets"), a set of
 * files the daemon publishes together.  Pure, like proto.h: no I/O, no
 * allocation; libgranary encodes, the daemon decodes.
 *
 *   offset 0   "GRSET001"                       8 bytes
 *          8   u32 nfiles (1 .. PROTO_SET_MAX_FILES)
 *         12   u32 0
 *         16   nfiles x { u64 size, u16 name_len, name_len bytes of name }
 *   header's end: the files' bytes, in table order, back to back
 *
 * Little-endian.  The container is exactly the header plus the sizes long.
 * A name is 1 to PROTO_SET_MAX_NAME bytes, no '/', no byte below 0x20 nor
 * 0x7f, not "." or "..", not PROTO_SET_MANIFEST (the daemon writes that
 * one), and unique within the set.
 */
#ifndef GR_PROTO_CKSET_H
#define GR_PROTO_CKSET_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_SET_MAGIC     "GRSET001"
#define PROTO_SET_MAX_FILES 4096
#define PROTO_SET_MAX_NAME  255
#define PROTO_SET_MANIFEST  "MANIFEST"
#define PROTO_SET_FIXED     16          /* magic, nfiles, reserved */

/* One file of a decoded header; name points into the decoded buffer. */
typedef struct proto_set_file {
    uint64_t size;
    uint64_t off;                       /* its first byte in the container */
    const char *name;                   /* not NUL-terminated */
    uint16_t name_len;
} proto_set_file;

/* Whether name (len bytes) may name a file of a set: 0 or -EINVAL. */
int proto_set_name_ok(const char *name, size_t len);

/* Bytes of the header of n files whose names are name_lens[i] long. */
size_t proto_set_hdr_len(size_t n, const size_t *name_lens);

/* Encode the header of n files (names[i], NUL-terminated, sizes[i]) into
 * buf: its length, or -ENOSPC (cap too small), -EINVAL (a bad or repeated
 * name, n out of range). */
long proto_set_enc_hdr(uint8_t *buf, size_t cap, size_t n, const char *const *names,
                       const uint64_t *sizes);

/*
 * Decode the header at the start of a container total bytes long, of which
 * buf holds the first len.  On success the header's length (> 0), with
 * *nfiles set and files[0 .. min(*nfiles, max)) filled (call with max 0 to
 * learn nfiles first).  PROTO_NEED_MORE (from proto.h: 1) if buf ends
 * inside the header; -EINVAL if it is malformed: bad magic or reserved
 * word, nfiles out of range, a bad or repeated name, sizes that do not add
 * up to total.  The repeated-name check compares every pair (n^2 over at
 * most PROTO_SET_MAX_FILES names).
 */
long proto_set_dec_hdr(const uint8_t *buf, size_t len, uint64_t total, uint32_t *nfiles,
                       proto_set_file *files, size_t max);

#endif
