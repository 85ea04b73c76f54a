/*
 * setpub.c - a checkpoint set's generation directory and link (setpub.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckset.h"
#include "fsio.h"
#include "proto.h"
#include "setpub.h"

struct setpub {
    int pfd;                    /* the destination's directory (borrowed) */
    int gfd;                    /* the generation directory */
    char base[256];
    char gen[320];              /* "BASE.granary-gen-ID" */
    char old[320];              /* what DEST pointed to before, "" if not a generation */
    uint64_t id, total;
    uint8_t *hdr;               /* the header (the names point into it) */
    uint32_t n, cur;            /* files; the one being written */
    proto_set_file *files;
    uint64_t *hash;             /* each file's XXH3, once closed */
    XXH3_state_t *xs;           /* the current file's */
    int fd;                     /* the current file, -1 */
};

/* A file's name, NUL-terminated. */
static void name_of(const setpub *s, uint32_t i, char *out)
{
    memcpy(out, s->files[i].name, s->files[i].name_len);
    out[s->files[i].name_len] = '\0';
}

static int open_file(setpub *s, char *err, size_t errlen)
{
    char name[PROTO_SET_MAX_NAME + 1];

    name_of(s, s->cur, name);
    s->fd = openat(s->gfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (s->fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%.100s/%.100s: %s", s->gen, name, strerror(e));
        return -e;
    }
    XXH3_64bits_reset(s->xs);
    return 0;
}

/* Close every file that ends at or before container offset pos (creating
 * the empty ones on the way). */
static int advance(setpub *s, uint64_t pos, char *err, size_t errlen)
{
    int rc;

    while (s->cur < s->n && s->files[s->cur].off + s->files[s->cur].size <= pos) {
        if (s->fd < 0 && (rc = open_file(s, err, errlen)) < 0)
            return rc;
        if (fsync(s->fd) < 0) {
            rc = -errno;
            snprintf(err, errlen, "fsync in %.200s: %s", s->gen, strerror(-rc));
            return rc;
        }
        close(s->fd);
        s->fd = -1;
        s->hash[s->cur] = XXH3_64bits_digest(s->xs);
        s->cur++;
    }
    return 0;
}

void setpub_free(setpub **sp)
{
    setpub *s = *sp;

    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    if (s->gfd >= 0)
        close(s->gfd);
    XXH3_freeState(s->xs);
    free(s->hdr);
    free(s->files);
    free(s->hash);
    free(s);
    *sp = NULL;
}

int setpub_begin(int pfd, const char *base, uint64_t id, const uint8_t *hdr, size_t hdr_len,
                 uint64_t total, setpub **out, int *done, char *err, size_t errlen)
{
    setpub *s = calloc(1, sizeof(*s));
    char link[320], name[PROTO_SET_MAX_NAME + 1];
    ssize_t ll;
    long h;
    int rc;

    *out = NULL;
    *done = 0;
    if (!s)
        return -ENOMEM;
    s->pfd = pfd;
    s->gfd = s->fd = -1;
    s->id = id;
    s->total = total;
    snprintf(s->base, sizeof(s->base), "%s", base);
    snprintf(s->gen, sizeof(s->gen), "%.250s.granary-gen-%" PRIu64, base, id);
    s->hdr = malloc(hdr_len);
    s->xs = XXH3_createState();
    if (!s->hdr || !s->xs) {
        rc = -ENOMEM;
        goto fail;
    }
    memcpy(s->hdr, hdr, hdr_len);
    h = proto_set_dec_hdr(s->hdr, hdr_len, total, &s->n, NULL, 0);
    if (h != (long)hdr_len) {
        snprintf(err, errlen, "the set's header is malformed");
        rc = -EINVAL;
        goto fail;
    }
    s->files = calloc(s->n, sizeof(*s->files));
    s->hash = calloc(s->n, sizeof(*s->hash));
    if (!s->files || !s->hash) {
        rc = -ENOMEM;
        goto fail;
    }
    proto_set_dec_hdr(s->hdr, hdr_len, total, &s->n, s->files, s->n);
    ll = readlinkat(pfd, base, link, sizeof(link) - 1);
    if (ll > 0) {
        link[ll] = '\0';
        if (!strcmp(link, s->gen)) {
            *done = 1;              /* renamed before a kill: published */
            *out = s;
            return 0;
        }
        if (!strncmp(link, s->base, strlen(s->base)) &&
            !strncmp(link + strlen(s->base), ".granary-gen-", 13))
            snprintf(s->old, sizeof(s->old), "%s", link);
    }
    if (mkdirat(pfd, s->gen, 0755) < 0 && errno != EEXIST) {
        rc = -errno;
        snprintf(err, errlen, "mkdir %.200s: %s", s->gen, strerror(-rc));
        goto fail;
    }
    s->gfd = openat(pfd, s->gen, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s->gfd < 0) {
        rc = -errno;
        snprintf(err, errlen, "%.200s: %s", s->gen, strerror(-rc));
        goto fail;
    }
    /* A drain before a kill may have left some: the manifest first, so
     * that the directory never looks complete with a file missing. */
    unlinkat(s->gfd, PROTO_SET_MANIFEST, 0);
    for (uint32_t i = 0; i < s->n; i++) {
        name_of(s, i, name);
        unlinkat(s->gfd, name, 0);
    }
    *out = s;
    return 0;
fail:
    setpub_free(&s);
    return rc;
}

int setpub_write(setpub *s, uint64_t off, const uint8_t *p, size_t n, char *err, size_t errlen)
{
    uint64_t end = off + n;
    int rc;

    while (off < end) {
        uint64_t fend;
        size_t k;
        if ((rc = advance(s, off, err, errlen)) < 0)
            return rc;
        if (s->cur >= s->n || off < s->files[s->cur].off) {
            /* header bytes (or none of a file's) */
            uint64_t skip = s->cur < s->n ? s->files[s->cur].off : end;
            if (skip > end)
                skip = end;
            p += skip - off;
            off = skip;
            continue;
        }
        if (s->fd < 0 && (rc = open_file(s, err, errlen)) < 0)
            return rc;
        fend = s->files[s->cur].off + s->files[s->cur].size;
        k = (size_t)((fend < end ? fend : end) - off);
        if ((rc = gr__pwrite_all(s->fd, p, k, off - s->files[s->cur].off)) < 0) {
            snprintf(err, errlen, "writing in %.200s: %s", s->gen, strerror(-rc));
            return rc;
        }
        XXH3_64bits_update(s->xs, p, k);
        p += k;
        off += k;
    }
    return advance(s, end, err, errlen);
}

/* Remove generation directory name (its files, then itself). */
static void remove_gen(int pfd, const char *name)
{
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *dp;
    struct dirent *de;

    if (fd < 0)
        return;
    dp = fdopendir(fd);
    if (!dp) {
        close(fd);
        return;
    }
    while ((de = readdir(dp)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            unlinkat(fd, de->d_name, 0);
    closedir(dp);
    unlinkat(pfd, name, AT_REMOVEDIR);
}

/* Generations of base older than s's, but the one DEST pointed to before. */
static void collect(setpub *s)
{
    int fd = openat(s->pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    size_t bl = strlen(s->base);
    DIR *dp;
    struct dirent *de;

    if (fd < 0)
        return;
    dp = fdopendir(fd);
    if (!dp) {
        close(fd);
        return;
    }
    while ((de = readdir(dp))) {
        uint64_t g;
        char tail;
        if (strncmp(de->d_name, s->base, bl) || strncmp(de->d_name + bl, ".granary-gen-", 13) ||
            sscanf(de->d_name + bl + 13, "%" SCNu64 "%c", &g, &tail) != 1)
            continue;
        if (g < s->id && strcmp(de->d_name, s->old))
            remove_gen(s->pfd, de->d_name);
    }
    closedir(dp);
}

int setpub_finish(setpub *s, char *err, size_t errlen)
{
    char tmp[320], name[PROTO_SET_MAX_NAME + 1];
    size_t cap = 128 + (size_t)s->n * (PROTO_SET_MAX_NAME + 48), len;
    char *text = NULL;
    int fd = -1, rc;

    if ((rc = advance(s, s->total, err, errlen)) < 0)
        return rc;
    text = malloc(cap);
    if (!text)
        return -ENOMEM;
    len = (size_t)snprintf(text, cap, "granary-set 1\nid %" PRIu64 "\nfiles %u\n", s->id, s->n);
    for (uint32_t i = 0; i < s->n; i++) {
        name_of(s, i, name);
        len += (size_t)snprintf(text + len, cap - len, "%016" PRIx64 " %" PRIu64 " %s\n",
                                s->hash[i], s->files[i].size, name);
    }
    len += (size_t)snprintf(text + len, cap - len, "xxh3 %016" PRIx64 "\n",
                            XXH3_64bits(text, len));
    fd = openat(s->gfd, PROTO_SET_MANIFEST, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                0644);
    if (fd < 0 || (rc = gr__pwrite_all(fd, (const uint8_t *)text, len, 0)) < 0 || fsync(fd) < 0) {
        rc = rc < 0 ? rc : -errno;
        snprintf(err, errlen, "%.200s/%s: %s", s->gen, PROTO_SET_MANIFEST, strerror(-rc));
        goto out;
    }
    close(fd);
    fd = -1;
    if ((rc = gr__fsync_dirat(s->pfd, s->gen)) < 0) {
        snprintf(err, errlen, "fsync %.200s: %s", s->gen, strerror(-rc));
        goto out;
    }
    snprintf(tmp, sizeof(tmp), ".%.200s.granary-%" PRIu64 ".tmp", s->base, s->id);
    unlinkat(s->pfd, tmp, 0);
    if (symlinkat(s->gen, s->pfd, tmp) < 0 || renameat(s->pfd, tmp, s->pfd, s->base) < 0) {
        rc = -errno;
        snprintf(err, errlen, "linking %.200s to %.60s: %s", s->base, s->gen, strerror(-rc));
        unlinkat(s->pfd, tmp, 0);
        goto out;
    }
    if ((rc = gr__fsync_dirat(s->pfd, ".")) < 0) {
        snprintf(err, errlen, "fsync of %.200s's directory: %s", s->base, strerror(-rc));
        goto out;
    }
    collect(s);
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    free(text);
    return rc;
}
