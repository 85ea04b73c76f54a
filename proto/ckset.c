/*
 * ckset.c - the checkpoint set container's header (see ckset.h).
 */
#include <errno.h>
#include <string.h>

#include "ckset.h"
#include "le.h"
#include "proto.h"

int proto_set_name_ok(const char *name, size_t len)
{
    if (len == 0 || len > PROTO_SET_MAX_NAME)
        return -EINVAL;
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return -EINVAL;
    if (len == sizeof(PROTO_SET_MANIFEST) - 1 && !memcmp(name, PROTO_SET_MANIFEST, len))
        return -EINVAL;
    for (size_t i = 0; i < len; i++)
        if (name[i] == '/' || (unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return -EINVAL;
    return 0;
}

size_t proto_set_hdr_len(size_t n, const size_t *name_lens)
{
    size_t len = PROTO_SET_FIXED;

    for (size_t i = 0; i < n; i++)
        len += 10 + name_lens[i];
    return len;
}

long proto_set_enc_hdr(uint8_t *buf, size_t cap, size_t n, const char *const *names,
                       const uint64_t *sizes)
{
    size_t off = PROTO_SET_FIXED;

    if (n == 0 || n > PROTO_SET_MAX_FILES)
        return -EINVAL;
    if (cap < PROTO_SET_FIXED)
        return -ENOSPC;
    memcpy(buf, PROTO_SET_MAGIC, 8);
    gr__le_put32(buf + 8, (uint32_t)n);
    gr__le_put32(buf + 12, 0);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        if (proto_set_name_ok(names[i], l) < 0)
            return -EINVAL;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(names[i], names[j]))
                return -EINVAL;
        if (cap - off < 10 + l)
            return -ENOSPC;
        gr__le_put64(buf + off, sizes[i]);
        gr__le_put16(buf + off + 8, (uint16_t)l);
        memcpy(buf + off + 10, names[i], l);
        off += 10 + l;
    }
    return (long)off;
}

long proto_set_dec_hdr(const uint8_t *buf, size_t len, uint64_t total, uint32_t *nfiles,
                       proto_set_file *files, size_t max)
{
    uint64_t sum = 0;
    size_t off = PROTO_SET_FIXED;
    uint32_t n;

    if (len < PROTO_SET_FIXED)
        return total < PROTO_SET_FIXED ? -EINVAL : PROTO_NEED_MORE;
    if (memcmp(buf, PROTO_SET_MAGIC, 8) != 0 || gr__le_get32(buf + 12) != 0)
        return -EINVAL;
    n = gr__le_get32(buf + 8);
    if (n == 0 || n > PROTO_SET_MAX_FILES)
        return -EINVAL;
    *nfiles = n;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t size;
        uint16_t l;
        const char *name;
        if (len - off < 10)
            return (uint64_t)off + 10 > total ? -EINVAL : PROTO_NEED_MORE;
        size = gr__le_get64(buf + off);
        l = gr__le_get16(buf + off + 8);
        if (len - off - 10 < l)
            return (uint64_t)off + 10 + l > total ? -EINVAL : PROTO_NEED_MORE;
        name = (const char *)buf + off + 10;
        if (proto_set_name_ok(name, l) < 0)
            return -EINVAL;
        /* Repeats: against the earlier names, found again in buf. */
        for (size_t o = PROTO_SET_FIXED; o < off;) {
            uint16_t ol = gr__le_get16(buf + o + 8);
            if (ol == l && !memcmp(buf + o + 10, name, l))
                return -EINVAL;
            o += 10 + (size_t)ol;
        }
        if (size > total || sum > total - size)
            return -EINVAL;
        if (i < max) {
            files[i].size = size;
            files[i].off = sum;         /* relative for now: the header's length added below */
            files[i].name = name;
            files[i].name_len = l;
        }
        sum += size;
        off += 10 + (size_t)l;
    }
    if ((uint64_t)off + sum != total)
        return -EINVAL;
    for (uint32_t i = 0; i < n && i < max; i++)
        files[i].off += off;
    return (long)off;
}
