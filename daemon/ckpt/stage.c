/*
 * stage.c - a checkpoint's staged copy: N.data, or a set's N.set/ of parts
 * (stage.h).  Parts are opened one at a time (a set has up to 4096
 * members, more than a daemon should hold open per checkpoint), in the
 * order a copy reads or writes them.
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

#include "fsio.h"
#include "proto.h"
#include "stage.h"

#define STAGE_HDR_MAX (PROTO_SET_FIXED + PROTO_SET_MAX_FILES * (8 + 2 + PROTO_SET_MAX_NAME))

typedef struct part {
    uint64_t off, len;          /* its bytes in the container */
} part;

struct stage {
    int dir_fd;                 /* the staging directory (borrowed) */
    int set_fd;                 /* N.set/, or -1 (N.data: one part) */
    int writing;
    uint64_t id, total;
    uint32_t nparts;            /* a set: the header, then each member */
    part *parts;
    uint32_t cur;               /* the part fd is of */
    int fd;                     /* -1 */
};

static void part_name(const stage *s, uint32_t i, char *out, size_t len)
{
    if (s->set_fd < 0)
        snprintf(out, len, "%" PRIu64 ".data", s->id);
    else if (i == 0)
        snprintf(out, len, "hdr");
    else
        snprintf(out, len, "%" PRIu32, i - 1);
}

/* The parts of a set whose header decodes as files[0 .. n). */
static int parts_of_set(stage *s, size_t hdr_len, const proto_set_file *files, uint32_t n)
{
    s->parts = calloc((size_t)n + 1, sizeof(*s->parts));
    if (!s->parts)
        return -ENOMEM;
    s->nparts = n + 1;
    s->parts[0].len = hdr_len;
    for (uint32_t i = 0; i < n; i++) {
        s->parts[i + 1].off = files[i].off;
        s->parts[i + 1].len = files[i].size;
    }
    return 0;
}

/* The one part of a single file, N.data. */
static int parts_of_file(stage *s)
{
    s->parts = calloc(1, sizeof(*s->parts));
    if (!s->parts)
        return -ENOMEM;
    s->nparts = 1;
    s->parts[0].len = s->total;
    return 0;
}

/* Decode a set's header (buf, len bytes of the container's start): its
 * length and files (malloc'ed, *files), or -EBADMSG / -ENOMEM. */
static long decode(const uint8_t *buf, size_t len, uint64_t total, proto_set_file **files,
                   uint32_t *n)
{
    long h = proto_set_dec_hdr(buf, len, total, n, NULL, 0);

    if (h <= PROTO_NEED_MORE)
        return -EBADMSG;
    *files = calloc(*n ? *n : 1, sizeof(**files));
    if (!*files)
        return -ENOMEM;
    h = proto_set_dec_hdr(buf, len, total, n, *files, *n);
    if (h <= PROTO_NEED_MORE) {
        free(*files);
        *files = NULL;
        return -EBADMSG;
    }
    return h;
}

/* Make part i the open one.  A written part left behind is fsynced. */
static int part_open(stage *s, uint32_t i)
{
    char name[32];
    struct stat st;
    int base = s->set_fd >= 0 ? s->set_fd : s->dir_fd;

    if (s->fd >= 0 && s->cur == i)
        return 0;
    if (s->fd >= 0) {
        int rc = s->writing && fsync(s->fd) < 0 ? -errno : 0;
        close(s->fd);
        s->fd = -1;
        if (rc < 0)
            return rc;
    }
    part_name(s, i, name, sizeof(name));
    s->fd = openat(base, name, (s->writing ? O_WRONLY : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
    if (s->fd < 0)
        return -errno;
    s->cur = i;
    if (fstat(s->fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != s->parts[i].len) {
        close(s->fd);
        s->fd = -1;
        return -EBADMSG;            /* not the part the header says */
    }
    return 0;
}

/* The part holding container offset pos (< total): the last one starting
 * at or before it (an empty member shares its start with the next). */
static uint32_t part_at(const stage *s, uint64_t pos)
{
    uint32_t lo = 0, hi = s->nparts;

    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->parts[mid].off <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

typedef int (*part_io)(int fd, uint8_t *p, size_t n, uint64_t off);

static int write_part(int fd, uint8_t *p, size_t n, uint64_t off)
{
    return gr__pwrite_all(fd, p, n, off);
}

static int stage_io(stage *s, uint8_t *p, size_t n, uint64_t off, part_io io)
{
    if (off > s->total || n > s->total - off)
        return -EIO;
    while (n) {
        uint32_t i = part_at(s, off);
        const part *pt = &s->parts[i];
        uint64_t in = off - pt->off;
        size_t m = pt->len - in < n ? (size_t)(pt->len - in) : n;
        int rc;
        if (off < pt->off || in >= pt->len)
            return -EIO;            /* cannot happen: the parts tile the container */
        if ((rc = part_open(s, i)) < 0 || (rc = io(s->fd, p, m, in)) < 0)
            return rc;
        p += m;
        n -= m;
        off += m;
    }
    return 0;
}

static stage *stage_alloc(int dir_fd, uint64_t id, uint64_t total)
{
    stage *s = calloc(1, sizeof(*s));

    if (!s)
        return NULL;
    s->dir_fd = dir_fd;
    s->set_fd = -1;
    s->fd = -1;
    s->id = id;
    s->total = total;
    return s;
}

static void set_dir_name(char *out, size_t len, uint64_t id)
{
    snprintf(out, len, "%" PRIu64 ".set", id);
}

void stage_remove(int dir_fd, uint64_t id)
{
    char name[64];
    DIR *dp;
    struct dirent *de;
    int fd;

    snprintf(name, sizeof(name), "%" PRIu64 ".data", id);
    unlinkat(dir_fd, name, 0);
    set_dir_name(name, sizeof(name), id);
    fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    if (!(dp = fdopendir(fd))) {
        close(fd);
        return;
    }
    while ((de = readdir(dp)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            unlinkat(dirfd(dp), de->d_name, 0);
    closedir(dp);
    unlinkat(dir_fd, name, AT_REMOVEDIR);
}

static int names_of(const proto_set_file *files, uint32_t n, char ***names);

int stage_create(int dir_fd, uint64_t id, int set, uint64_t total, const uint8_t *hdr,
                 size_t hdr_len, stage **out, char ***names, uint32_t *nnames, char *err,
                 size_t errlen)
{
    proto_set_file *files = NULL;
    char name[64];
    uint32_t n = 0;
    stage *s;
    long h = 0;
    int rc;

    *out = NULL;
    if (names) {
        *names = NULL;
        *nnames = 0;
    }
    err[0] = '\0';
    stage_remove(dir_fd, id);
    if (set && (h = decode(hdr, hdr_len, total, &files, &n)) < 0) {
        snprintf(err, errlen, "%s", h == -ENOMEM ? strerror(ENOMEM) :
                 "not a checkpoint set (its header is malformed: proto/PROTOCOL.md, "
                 "\"Checkpoint sets\")");
        return h == -ENOMEM ? -ENOMEM : -EINVAL;
    }
    s = stage_alloc(dir_fd, id, total);
    if (!s) {
        free(files);
        return -ENOMEM;
    }
    s->writing = 1;
    if (set) {
        rc = parts_of_set(s, (size_t)h, files, n);
        if (rc == 0 && names && (rc = names_of(files, n, names)) == 0)
            *nnames = n;
        free(files);
        if (rc < 0)
            goto fail;
        set_dir_name(name, sizeof(name), id);
        if (mkdirat(dir_fd, name, 0700) < 0 ||
            (s->set_fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                O_CLOEXEC)) < 0) {
            rc = -errno;
            snprintf(err, errlen, "staging directory %s: %s", name, strerror(-rc));
            goto fail;
        }
    } else if ((rc = parts_of_file(s)) < 0) {
        goto fail;
    }
    /* Every part made and its space taken before a byte is copied. */
    for (uint32_t i = 0; i < s->nparts; i++) {
        int fd;
        part_name(s, i, name, sizeof(name));
        fd = openat(s->set_fd >= 0 ? s->set_fd : dir_fd, name,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            rc = -errno;
            snprintf(err, errlen, "staging file %s: %s", name, strerror(-rc));
            goto fail;
        }
        rc = s->parts[i].len ? -posix_fallocate(fd, 0, (off_t)s->parts[i].len) : 0;
        close(fd);
        if (rc < 0) {
            snprintf(err, errlen, "staging %" PRIu64 " bytes: %s", total, strerror(-rc));
            goto fail;
        }
    }
    *out = s;
    return 0;
fail:
    stage_close(&s);
    stage_remove(dir_fd, id);
    if (names) {
        stage_names_free(names, *nnames);
        *nnames = 0;
    }
    if (!err[0] || rc == -ENOMEM)
        snprintf(err, errlen, "%s", strerror(-rc));
    return rc;
}

/* Read a set's header part whole: malloc'ed into *buf, its length. */
static long read_hdr(int set_fd, uint8_t **buf)
{
    struct stat st;
    long rc;
    int fd = openat(set_fd, "hdr", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    *buf = NULL;
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < PROTO_SET_FIXED ||
        st.st_size > STAGE_HDR_MAX) {
        close(fd);
        return -EBADMSG;
    }
    *buf = malloc((size_t)st.st_size);
    rc = *buf ? gr__pread_all(fd, *buf, (size_t)st.st_size, 0) : -ENOMEM;
    close(fd);
    if (rc < 0) {
        free(*buf);
        *buf = NULL;
        return rc;
    }
    return (long)st.st_size;
}

int stage_open(int dir_fd, uint64_t id, uint64_t total, stage **out)
{
    proto_set_file *files = NULL;
    uint8_t *hdr = NULL;
    char name[64];
    uint32_t n;
    stage *s = stage_alloc(dir_fd, id, total);
    long len, h;
    int rc;

    *out = NULL;
    if (!s)
        return -ENOMEM;
    set_dir_name(name, sizeof(name), id);
    s->set_fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s->set_fd < 0) {
        if (errno != ENOENT) {
            rc = -errno;
            goto fail;
        }
        if ((rc = parts_of_file(s)) < 0)
            goto fail;
        if ((rc = part_open(s, 0)) < 0)
            goto fail;              /* -ENOENT: no copy at all */
        *out = s;
        return 0;
    }
    if ((len = read_hdr(s->set_fd, &hdr)) < 0) {
        rc = (int)len;
        goto fail;
    }
    h = decode(hdr, (size_t)len, total, &files, &n);
    free(hdr);
    if (h < 0 || h != len) {
        rc = h < 0 ? (int)h : -EBADMSG;
        free(files);
        goto fail;
    }
    rc = parts_of_set(s, (size_t)h, files, n);
    free(files);
    if (rc < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    stage_close(&s);
    return rc;
}

int stage_pread(stage *s, uint8_t *p, size_t n, uint64_t off)
{
    return stage_io(s, p, n, off, gr__pread_all);
}

int stage_pwrite(stage *s, const uint8_t *p, size_t n, uint64_t off)
{
    if (!s->writing)
        return -EBADF;
    return stage_io(s, (uint8_t *)p, n, off, write_part);
}

int stage_sync(stage *s)
{
    if (s->fd >= 0 && s->writing && fsync(s->fd) < 0)
        return -errno;
    /* Parts never written (empty members) hold nothing to flush, but
     * their names are in N.set/: that directory's fsync makes them
     * durable. */
    if (s->set_fd >= 0 && fsync(s->set_fd) < 0)
        return -errno;
    return 0;
}

void stage_close(stage **sp)
{
    stage *s = *sp;

    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    if (s->set_fd >= 0)
        close(s->set_fd);
    free(s->parts);
    free(s);
    *sp = NULL;
}

int stage_member_open(int dir_fd, uint64_t id, uint32_t index)
{
    char name[96];
    int fd;

    snprintf(name, sizeof(name), "%" PRIu64 ".set/%" PRIu32, id, index);
    fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

static int names_of(const proto_set_file *files, uint32_t n, char ***names)
{
    char **v = calloc(n ? n : 1, sizeof(*v));

    *names = NULL;
    if (!v)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        v[i] = malloc((size_t)files[i].name_len + 1);
        if (!v[i]) {
            stage_names_free(&v, i);
            return -ENOMEM;
        }
        memcpy(v[i], files[i].name, files[i].name_len);
        v[i][files[i].name_len] = '\0';
    }
    *names = v;
    return 0;
}

int stage_names(int dir_fd, uint64_t id, uint64_t total, char ***names, uint32_t *n)
{
    proto_set_file *files = NULL;
    uint8_t *hdr = NULL;
    char name[64];
    long len, h;
    int fd, rc;

    *names = NULL;
    *n = 0;
    set_dir_name(name, sizeof(name), id);
    fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    len = read_hdr(fd, &hdr);
    close(fd);
    if (len < 0)
        return (int)len;
    h = decode(hdr, (size_t)len, total, &files, n);
    if (h >= 0 && h != len)
        h = -EBADMSG;
    rc = h < 0 ? (int)h : names_of(files, *n, names);
    if (rc < 0)
        *n = 0;
    free(files);
    free(hdr);                      /* after the names are copied out of it */
    return rc;
}

void stage_names_free(char ***names, uint32_t n)
{
    char **v = *names;

    if (!v)
        return;
    for (uint32_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
    *names = NULL;
}
