/*
 * manifest.c - see manifest.h.
 *
 * Header (128 bytes):
 *    0 u32 magic "GMF1"        4 u32 version (2; 1 had no ctime)
 *    8 u32 entries            12 u32 index of the top
 *   16 u64 regular files below the top
 *   24 u64 st_dev of the file system
 *   32 i64 stamp mtime (ns)   40 i64 stamp ctime (ns)   48 u64 stamp inode
 *   56 u32 bytes of names     60 u32 ACL blobs
 *   64 u64 bytes of ACL blobs
 *   72 u32 length of the top's path (the names table starts with it)
 *   76..119 zero
 *  120 u64 XXH3-64 of every byte after the header
 * Entry (88 bytes):
 *    0 u32 parent (MF_NONE for "/")   4 u32 first child   8 u32 children
 *   12 u32 name offset   16 u16 name length   18 u8 kind (1 dir, 2 file)
 *   19 u8 flags (bit 0: a directory the scan could not list)
 *   20 u32 mode   24 u32 uid   28 u32 gid   32 u32 nlink   36 u32 mtime ns
 *   40 u64 size   48 u64 ino   56 i64 mtime s   64 u32 blksize
 *   68 u32 ACL (1-based index into the ACL table, 0 none)
 *   72 i64 ctime s   80 u32 ctime ns   84 u32 zero
 * Then the names, then the ACL table (u32 offset, u32 length from the start
 * of the blobs, per ACL), then the blobs.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "grow.h"
#include "le.h"
#include "manifest.h"

#define MF_MAGIC      0x31464d47u       /* "GMF1" */
#define MF_VERSION    2
#define MF_HDR        128
#define MF_ENT        88
#define MF_KIND_DIR   1
#define MF_KIND_FILE  2
#define MF_KIND_OTHER 3             /* a symbolic link or special file: named, never served */
#define MF_FLAG_UNLISTED 0x1
#define MF_MAX_NAME   255               /* NAME_MAX: a longer name is not a Linux name */


struct manifest {
    const uint8_t *map;
    size_t len;
    uint32_t n, top, nacl;
    uint64_t files;
    dev_t dev;
    mf_stamp stamp;
    const uint8_t *ents, *names, *acltab, *acls;
    uint32_t names_len;
    uint64_t acl_bytes;
    char *top_path;
};

static void err_set(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void err_set(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const uint8_t *ent_at(const manifest *m, uint32_t i)
{
    return m->ents + (size_t)i * MF_ENT;
}

/* Every structural rule a reader relies on, so that no lookup can step
 * outside the map or loop: parents come before children, children ranges
 * are in bounds, point back at their parent and are sorted by name. */
static int check_structure(const manifest *m)
{
    /* First every entry's own fields (its name in the table), so that the
     * second pass may compare siblings' names. */
    for (uint32_t i = 0; i < m->n; i++) {
        const uint8_t *e = ent_at(m, i);
        uint32_t noff = gr__le_get32(e + 12), nlen = gr__le_get16(e + 16);
        if (noff > m->names_len || nlen > m->names_len - noff || nlen > MF_MAX_NAME)
            return -1;
    }
    for (uint32_t i = 0; i < m->n; i++) {
        const uint8_t *e = ent_at(m, i);
        uint32_t parent = gr__le_get32(e), first = gr__le_get32(e + 4), nch = gr__le_get32(e + 8);
        uint32_t noff = gr__le_get32(e + 12), nlen = gr__le_get16(e + 16), acl = gr__le_get32(e + 68);
        uint8_t kind = e[18];

        if ((i == 0) != (parent == MF_NONE) || (i > 0 && parent >= i))
            return -1;
        if ((kind != MF_KIND_DIR && kind != MF_KIND_FILE && kind != MF_KIND_OTHER) ||
            (e[19] & ~MF_FLAG_UNLISTED) ||
            (e[19] && (kind != MF_KIND_DIR || nch)))
            return -1;
        if (noff > m->names_len || nlen > m->names_len - noff || nlen > MF_MAX_NAME)
            return -1;
        if ((i == 0) != (nlen == 0) || acl > m->nacl)
            return -1;
        if (kind != MF_KIND_DIR && nch != 0)
            return -1;
        if (nch && (first <= i || first > m->n || nch > m->n - first))
            return -1;
        for (uint32_t k = 0; k < nch; k++) {
            const uint8_t *c = ent_at(m, first + k);
            if (gr__le_get32(c) != i)
                return -1;
            if (k > 0) {
                const uint8_t *p = ent_at(m, first + k - 1);
                uint32_t pl = gr__le_get16(p + 16), cl = gr__le_get16(c + 16);
                int r = memcmp(m->names + gr__le_get32(p + 12), m->names + gr__le_get32(c + 12),
                               pl < cl ? pl : cl);
                if (r > 0 || (r == 0 && pl >= cl))
                    return -1;              /* not strictly increasing */
            }
        }
    }
    for (uint32_t a = 0; a < m->nacl; a++) {
        uint32_t off = gr__le_get32(m->acltab + 8 * (size_t)a), len = gr__le_get32(m->acltab + 8 * (size_t)a + 4);
        if (off > m->acl_bytes || len > m->acl_bytes - off)
            return -1;
    }
    /* The chain: "/" down to the top, one child each. */
    for (uint32_t i = 0; i < m->top; i++)
        if (gr__le_get32(ent_at(m, i) + 8) != 1 || gr__le_get32(ent_at(m, i) + 4) != i + 1)
            return -1;
    return m->top < m->n && ent_at(m, m->top)[18] == MF_KIND_DIR ? 0 : -1;
}

int mf_open(const char *path, manifest **out, char *err, size_t errlen)
{
    manifest *m = NULL;
    struct stat st;
    const uint8_t *h;
    uint64_t need;
    uint32_t tlen;
    int fd, rc = -EBADMSG;

    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        err_set(err, errlen, "open %s: %s", path, strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) < 0 || st.st_size < MF_HDR) {
        close(fd);
        err_set(err, errlen, "%s: not a manifest (too short)", path);
        return -EBADMSG;
    }
    m = calloc(1, sizeof(*m));
    if (!m) {
        close(fd);
        return -ENOMEM;
    }
    m->len = (size_t)st.st_size;
    m->map = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        rc = -errno;
        free(m);
        err_set(err, errlen, "mmap %s: %s", path, strerror(-rc));
        return rc;
    }
    h = m->map;
    if (gr__le_get32(h) != MF_MAGIC || gr__le_get32(h + 4) != MF_VERSION) {
        err_set(err, errlen, "%s: not a manifest of this version", path);
        goto fail;
    }
    if (XXH3_64bits(h + MF_HDR, m->len - MF_HDR) != gr__le_get64(h + 120)) {
        err_set(err, errlen, "%s: checksum mismatch (a torn or damaged manifest)", path);
        goto fail;
    }
    for (int i = 76; i < 120; i++)
        if (h[i])
            goto bad;
    m->n = gr__le_get32(h + 8);
    m->top = gr__le_get32(h + 12);
    m->files = gr__le_get64(h + 16);
    m->dev = (dev_t)gr__le_get64(h + 24);
    m->stamp.mtime_ns = (int64_t)gr__le_get64(h + 32);
    m->stamp.ctime_ns = (int64_t)gr__le_get64(h + 40);
    m->stamp.ino = gr__le_get64(h + 48);
    m->names_len = gr__le_get32(h + 56);
    m->nacl = gr__le_get32(h + 60);
    m->acl_bytes = gr__le_get64(h + 64);
    tlen = gr__le_get32(h + 72);
    need = MF_HDR + (uint64_t)m->n * MF_ENT + m->names_len + 8ull * m->nacl + m->acl_bytes;
    if (m->n == 0 || need != m->len || tlen == 0 || tlen > m->names_len || tlen >= PATH_MAX)
        goto bad;
    m->ents = h + MF_HDR;
    m->names = m->ents + (size_t)m->n * MF_ENT;
    m->acltab = m->names + m->names_len;
    m->acls = m->acltab + 8 * (size_t)m->nacl;
    if (check_structure(m) < 0)
        goto bad;
    m->top_path = strndup((const char *)m->names, tlen);
    if (!m->top_path || m->top_path[0] != '/' || strlen(m->top_path) != tlen) {
        rc = m->top_path ? -EBADMSG : -ENOMEM;
        goto bad;
    }
    *out = m;
    return 0;
bad:
    err_set(err, errlen, "%s: not a valid manifest (its structure is broken)", path);
fail:
    mf_close(&m);
    return rc;
}

void mf_close(manifest **mp)
{
    manifest *m = *mp;

    if (!m)
        return;
    if (m->map && m->map != MAP_FAILED)
        munmap((void *)m->map, m->len);
    free(m->top_path);
    free(m);
    *mp = NULL;
}

uint32_t mf_count(const manifest *m) { return m->n; }
uint32_t mf_top(const manifest *m) { return m->top; }
const char *mf_top_path(const manifest *m) { return m->top_path; }
const mf_stamp *mf_stamp_of(const manifest *m) { return &m->stamp; }
uint64_t mf_files(const manifest *m) { return m->files; }

void mf_get(const manifest *m, uint32_t idx, mf_entry *out)
{
    const uint8_t *e = ent_at(m, idx);
    uint32_t acl = gr__le_get32(e + 68);

    memset(out, 0, sizeof(*out));
    out->idx = idx;
    out->parent = gr__le_get32(e);
    out->first_child = gr__le_get32(e + 4);
    out->nchildren = gr__le_get32(e + 8);
    out->name = (const char *)m->names + gr__le_get32(e + 12);
    out->name_len = gr__le_get16(e + 16);
    out->is_dir = e[18] == MF_KIND_DIR;
    out->is_other = e[18] == MF_KIND_OTHER;
    out->unlisted = (e[19] & MF_FLAG_UNLISTED) != 0;
    out->st.st_mode = (mode_t)gr__le_get32(e + 20);
    out->st.st_uid = (uid_t)gr__le_get32(e + 24);
    out->st.st_gid = (gid_t)gr__le_get32(e + 28);
    out->st.st_nlink = (nlink_t)gr__le_get32(e + 32);
    out->st.st_mtim.tv_nsec = (long)gr__le_get32(e + 36);
    out->st.st_size = (off_t)gr__le_get64(e + 40);
    out->st.st_ino = (ino_t)gr__le_get64(e + 48);
    out->st.st_mtim.tv_sec = (time_t)gr__le_get64(e + 56);
    out->st.st_blksize = (blksize_t)gr__le_get32(e + 64);
    out->st.st_ctim.tv_sec = (time_t)gr__le_get64(e + 72);
    out->st.st_ctim.tv_nsec = (long)gr__le_get32(e + 80);
    out->st.st_blocks = (blkcnt_t)((gr__le_get64(e + 40) + 511) / 512);
    out->st.st_dev = m->dev;
    if (acl) {
        out->acl = m->acls + gr__le_get32(m->acltab + 8 * (size_t)(acl - 1));
        out->acl_len = gr__le_get32(m->acltab + 8 * (size_t)(acl - 1) + 4);
    }
}

uint32_t mf_child(const manifest *m, uint32_t dir, const char *name, size_t len)
{
    const uint8_t *d = ent_at(m, dir);
    uint32_t lo = gr__le_get32(d + 4), hi = lo + gr__le_get32(d + 8);

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const uint8_t *e = ent_at(m, mid);
        uint32_t el = gr__le_get16(e + 16);
        int r = memcmp(m->names + gr__le_get32(e + 12), name, el < len ? el : len);
        if (r == 0)
            r = el < len ? -1 : el > len;
        if (r == 0)
            return mid;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return MF_NONE;
}

uint32_t mf_lookup(const manifest *m, const char *norm, uint32_t *chain, size_t max,
                   size_t *depth, int *absent)
{
    size_t tl = strlen(m->top_path), d = 0;
    uint32_t cur = 0, next;
    const char *p = norm;

    if (absent)
        *absent = 0;
    /* In the dataset: the top itself or below it, at a component boundary. */
    if (strncmp(norm, m->top_path, tl) != 0 ||
        (norm[tl] && norm[tl] != '/' && !(tl == 1 && m->top_path[0] == '/')))
        return MF_NONE;
    if (chain && d < max)
        chain[d] = 0;
    d++;
    for (;;) {
        const char *e;
        while (*p == '/')
            p++;
        if (!*p)
            break;
        e = strchr(p, '/');
        if (!e)
            e = p + strlen(p);
        next = mf_child(m, cur, p, (size_t)(e - p));
        if (next == MF_NONE) {
            /* Below the top, in a directory the scan listed: not there. */
            const uint8_t *c = ent_at(m, cur);
            if (absent)
                *absent = d > m->top && c[18] == MF_KIND_DIR && !(c[19] & MF_FLAG_UNLISTED);
            if (depth)
                *depth = d;
            return MF_NONE;
        }
        cur = next;
        if (chain && d < max)
            chain[d] = cur;
        d++;
        p = e;
    }
    if (depth)
        *depth = d;
    return cur;
}

int mf_access_obj(const mf_entry *e, access_obj *o)
{
    memset(o, 0, sizeof(*o));
    o->uid = e->st.st_uid;
    o->gid = e->st.st_gid;
    o->mode = e->st.st_mode;
    return access_acl_decode(o, e->acl, e->acl ? e->acl_len : 0);
}

/* ---- building ---- */

typedef struct bnode {
    int64_t parent;             /* -1 for "/" */
    uint32_t name_off, name_len;
    int is_dir;
    uint32_t mode, uid, gid, nlink, mtime_nsec, ctime_nsec, blksize;
    uint64_t size, ino;
    int64_t mtime_sec, ctime_sec;
    uint32_t acl;               /* 1-based index into acls, 0 none */
    int unlisted;
    uint32_t out;               /* its index in the manifest (at write) */
} bnode;

struct mf_builder {
    char *top;
    dev_t dev;
    mf_stamp stamp;
    bnode *nodes;
    size_t n, cap;
    char *names;
    size_t names_len, names_cap;
    uint8_t *acls;
    size_t acl_bytes, acl_cap;
    struct { uint32_t off, len; } *acl_tab;
    size_t nacl, nacl_cap;
    size_t nchain;              /* ancestors added ("/" .. top) */
    size_t depth;               /* components of top, plus one for "/" */
    uint64_t files;
};

#define MF_MAX_ENTRIES (UINT32_MAX - 1)

int mf_build_new(const char *top, dev_t dev, const mf_stamp *stamp, mf_builder **out)
{
    mf_builder *b = calloc(1, sizeof(*b));
    const char *p;

    if (!b || !(b->top = strdup(top))) {
        free(b);
        return -ENOMEM;
    }
    b->dev = dev;
    b->stamp = *stamp;
    b->depth = 1;
    for (p = top; *p; p++)
        if (*p == '/' && p[1] && p[1] != '/')
            b->depth++;
    /* The names table starts with the top's path (the header points at it). */
    b->names_cap = strlen(top) + 4096;
    b->names = malloc(b->names_cap);
    if (!b->names) {
        mf_build_free(&b);
        return -ENOMEM;
    }
    memcpy(b->names, top, strlen(top));
    b->names_len = strlen(top);
    *out = b;
    return 0;
}

void mf_build_free(mf_builder **bp)
{
    mf_builder *b = *bp;

    if (!b)
        return;
    free(b->top);
    free(b->nodes);
    free(b->names);
    free(b->acls);
    free(b->acl_tab);
    free(b);
    *bp = NULL;
}

static int64_t add_node(mf_builder *b, int64_t parent, const char *name, size_t len,
                        const struct stat *st, const void *acl, size_t acl_len)
{
    bnode *n;

    if (b->n >= MF_MAX_ENTRIES || len > MF_MAX_NAME || b->names_len + len > UINT32_MAX ||
        b->acl_bytes + acl_len > UINT32_MAX)
        return -E2BIG;
    if (gr__grow((void **)&b->nodes, &b->cap, b->n + 1, sizeof(*b->nodes)) < 0 ||
        gr__grow((void **)&b->names, &b->names_cap, b->names_len + len, 1) < 0)
        return -ENOMEM;
    n = &b->nodes[b->n];
    memset(n, 0, sizeof(*n));
    n->parent = parent;
    n->name_off = (uint32_t)b->names_len;
    n->name_len = (uint32_t)len;
    memcpy(b->names + b->names_len, name, len);
    b->names_len += len;
    n->is_dir = S_ISDIR(st->st_mode);
    n->mode = (uint32_t)st->st_mode;
    n->uid = (uint32_t)st->st_uid;
    n->gid = (uint32_t)st->st_gid;
    n->nlink = (uint32_t)st->st_nlink;
    n->mtime_sec = (int64_t)st->st_mtim.tv_sec;
    n->mtime_nsec = (uint32_t)st->st_mtim.tv_nsec;
    n->ctime_sec = (int64_t)st->st_ctim.tv_sec;
    n->ctime_nsec = (uint32_t)st->st_ctim.tv_nsec;
    n->blksize = (uint32_t)st->st_blksize;
    n->size = (uint64_t)st->st_size;
    n->ino = (uint64_t)st->st_ino;
    if (acl && acl_len) {
        if (gr__grow((void **)&b->acls, &b->acl_cap, b->acl_bytes + acl_len, 1) < 0 ||
            gr__grow((void **)&b->acl_tab, &b->nacl_cap, b->nacl + 1, sizeof(*b->acl_tab)) < 0)
            return -ENOMEM;
        memcpy(b->acls + b->acl_bytes, acl, acl_len);
        b->acl_tab[b->nacl].off = (uint32_t)b->acl_bytes;
        b->acl_tab[b->nacl].len = (uint32_t)acl_len;
        b->acl_bytes += acl_len;
        n->acl = (uint32_t)++b->nacl;
    }
    if (S_ISREG(st->st_mode))
        b->files++;
    return (int64_t)b->n++;
}

int mf_build_ancestor(mf_builder *b, const struct stat *st, const void *acl, size_t acl_len)
{
    const char *p = b->top, *e;
    size_t k;
    int64_t h;

    if (b->nchain >= b->depth || !S_ISDIR(st->st_mode))
        return -EINVAL;
    /* The name of component nchain of top (component 0 is "/", no name). */
    for (k = 1; k < b->nchain; k++) {
        while (*p == '/')
            p++;
        e = strchr(p, '/');
        p = e ? e : p + strlen(p);
    }
    while (*p == '/')
        p++;
    e = strchr(p, '/');
    if (!e)
        e = p + strlen(p);
    h = add_node(b, b->nchain ? (int64_t)b->nchain - 1 : -1, p, b->nchain ? (size_t)(e - p) : 0,
                 st, acl, acl_len);
    if (h < 0)
        return (int)h;
    b->nchain++;
    return 0;
}

int64_t mf_build_top(mf_builder *b)
{
    return b->nchain == b->depth ? (int64_t)b->nchain - 1 : -EINVAL;
}

int64_t mf_build_add(mf_builder *b, int64_t dir, const char *name, const struct stat *st,
                     const void *acl, size_t acl_len)
{
    size_t len = strlen(name);

    if (b->nchain != b->depth || dir < 0 || (size_t)dir >= b->n || !b->nodes[dir].is_dir ||
        len == 0)
        return -EINVAL;
    return add_node(b, dir, name, len, st, acl, acl_len);
}

int mf_build_unlisted(mf_builder *b, int64_t h)
{
    if (h < 0 || (size_t)h >= b->n || !b->nodes[h].is_dir)
        return -EINVAL;
    b->nodes[h].unlisted = 1;
    return 0;
}

uint64_t mf_build_count(const mf_builder *b)
{
    return b->n;
}

static int by_name(const void *x, const void *y, void *arg)
{
    const mf_builder *b = arg;
    const bnode *a = &b->nodes[*(const uint32_t *)x], *c = &b->nodes[*(const uint32_t *)y];
    int r = memcmp(b->names + a->name_off, b->names + c->name_off,
                   a->name_len < c->name_len ? a->name_len : c->name_len);

    return r ? r : (a->name_len > c->name_len) - (a->name_len < c->name_len);
}

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *q = p;

    while (n) {
        ssize_t w = write(fd, q, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        q += w;
        n -= (size_t)w;
    }
    return 0;
}

int mf_build_write(mf_builder *b, const char *path, char *err, size_t errlen)
{
    uint32_t *start = NULL, *kids = NULL, *order = NULL, *first = NULL;
    uint8_t hdr[MF_HDR] = { 0 }, *ents = NULL, *atab = NULL;
    char tmp[PATH_MAX], dirbuf[PATH_MAX];
    size_t n = b->n, qh = 0, qt = 0;
    XXH3_state_t *xs = NULL;
    int fd = -1, rc = -ENOMEM;

    if (b->nchain != b->depth) {
        err_set(err, errlen, "manifest of %s: the chain to the top is incomplete", b->top);
        return -EINVAL;
    }
    start = calloc(n + 1, sizeof(*start));
    kids = malloc(n * sizeof(*kids));
    order = malloc(n * sizeof(*order));
    first = calloc(n, sizeof(*first));
    ents = calloc(n, MF_ENT);
    atab = calloc(b->nacl ? b->nacl : 1, 8);
    xs = XXH3_createState();
    if (!start || !kids || !order || !first || !ents || !atab || !xs)
        goto out;
    /* Children of each node, contiguous (a counting sort by parent), each
     * directory's sorted by name. */
    for (size_t i = 1; i < n; i++)
        start[b->nodes[i].parent + 1]++;
    for (size_t i = 1; i <= n; i++)
        start[i] += start[i - 1];
    {
        uint32_t *fill = calloc(n, sizeof(*fill));
        if (!fill)
            goto out;
        for (size_t i = 1; i < n; i++) {
            int64_t p = b->nodes[i].parent;
            kids[start[p] + fill[p]++] = (uint32_t)i;
        }
        free(fill);
    }
    for (size_t i = 0; i < n; i++)
        if (start[i + 1] - start[i] > 1)
            qsort_r(kids + start[i], start[i + 1] - start[i], sizeof(*kids), by_name, b);
    /* Breadth first: "/" first, each node's children next to each other. */
    order[qt++] = 0;
    b->nodes[0].out = 0;
    while (qh < qt) {
        uint32_t v = order[qh++];
        first[v] = (uint32_t)qt;
        for (uint32_t k = start[v]; k < start[v + 1]; k++) {
            b->nodes[kids[k]].out = (uint32_t)qt;
            order[qt++] = kids[k];
        }
    }
    for (size_t o = 0; o < n; o++) {
        const bnode *v = &b->nodes[order[o]];
        uint8_t *e = ents + o * MF_ENT;
        uint32_t nch = start[order[o] + 1] - start[order[o]];
        gr__le_put32(e, v->parent < 0 ? MF_NONE : b->nodes[v->parent].out);
        gr__le_put32(e + 4, nch ? first[order[o]] : 0);
        gr__le_put32(e + 8, nch);
        gr__le_put32(e + 12, v->name_off);
        gr__le_put16(e + 16, (uint16_t)v->name_len);
        e[18] = v->is_dir ? MF_KIND_DIR : S_ISREG(v->mode) ? MF_KIND_FILE : MF_KIND_OTHER;
        e[19] = v->unlisted ? MF_FLAG_UNLISTED : 0;
        gr__le_put32(e + 20, v->mode);
        gr__le_put32(e + 24, v->uid);
        gr__le_put32(e + 28, v->gid);
        gr__le_put32(e + 32, v->nlink);
        gr__le_put32(e + 36, v->mtime_nsec);
        gr__le_put64(e + 40, v->size);
        gr__le_put64(e + 48, v->ino);
        gr__le_put64(e + 56, (uint64_t)v->mtime_sec);
        gr__le_put32(e + 64, v->blksize);
        gr__le_put32(e + 68, v->acl);
        gr__le_put64(e + 72, (uint64_t)v->ctime_sec);
        gr__le_put32(e + 80, v->ctime_nsec);
    }
    for (size_t a = 0; a < b->nacl; a++) {
        gr__le_put32(atab + 8 * a, b->acl_tab[a].off);
        gr__le_put32(atab + 8 * a + 4, b->acl_tab[a].len);
    }
    gr__le_put32(hdr, MF_MAGIC);
    gr__le_put32(hdr + 4, MF_VERSION);
    gr__le_put32(hdr + 8, (uint32_t)n);
    gr__le_put32(hdr + 12, b->nodes[b->nchain - 1].out);
    gr__le_put64(hdr + 16, b->files);
    gr__le_put64(hdr + 24, (uint64_t)b->dev);
    gr__le_put64(hdr + 32, (uint64_t)b->stamp.mtime_ns);
    gr__le_put64(hdr + 40, (uint64_t)b->stamp.ctime_ns);
    gr__le_put64(hdr + 48, b->stamp.ino);
    gr__le_put32(hdr + 56, (uint32_t)b->names_len);
    gr__le_put32(hdr + 60, (uint32_t)b->nacl);
    gr__le_put64(hdr + 64, b->acl_bytes);
    gr__le_put32(hdr + 72, (uint32_t)strlen(b->top));
    XXH3_64bits_reset(xs);
    XXH3_64bits_update(xs, ents, n * MF_ENT);
    XXH3_64bits_update(xs, b->names, b->names_len);
    XXH3_64bits_update(xs, atab, 8 * b->nacl);
    XXH3_64bits_update(xs, b->acls ? b->acls : (const uint8_t *)"", b->acl_bytes);
    gr__le_put64(hdr + 120, XXH3_64bits_digest(xs));

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write_all(fd, hdr, sizeof(hdr)) < 0 || write_all(fd, ents, n * MF_ENT) < 0 ||
        write_all(fd, b->names, b->names_len) < 0 || write_all(fd, atab, 8 * b->nacl) < 0 ||
        (b->acl_bytes && write_all(fd, b->acls, b->acl_bytes) < 0) || fsync(fd) < 0) {
        rc = -errno;
        err_set(err, errlen, "write %s: %s", tmp, strerror(-rc));
        goto out;
    }
    close(fd);
    fd = -1;
    if (rename(tmp, path) < 0) {
        rc = -errno;
        err_set(err, errlen, "rename to %s: %s", path, strerror(-rc));
        goto out;
    }
    snprintf(dirbuf, sizeof(dirbuf), "%s", path);
    fd = open(dirname(dirbuf), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) < 0) {
        rc = -errno;
        err_set(err, errlen, "fsync the directory of %s: %s", path, strerror(-rc));
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (rc < 0 && rc != -ENOMEM)
        unlink(tmp);
    XXH3_freeState(xs);
    free(start);
    free(kids);
    free(order);
    free(first);
    free(ents);
    free(atab);
    return rc;
}
