/*
 * ckpt.c - libgranary's checkpoint calls (granary.h, "checkpoints"): a
 * memfd the caller fills at memory speed, committed by passing it to the
 * daemon (CKPT_PUT, SCM_RIGHTS), and the state of a checkpoint (ADMIN
 * CKPT_LIST).
 *
 * Why a memfd and not a staging file of the daemon's or bytes over the
 * socket: the writer pays one memory copy and no round trip per write; the
 * daemon seals the memfd (F_SEAL_WRITE) before reading it, so the bytes it
 * stages and checksums cannot change under it, and the client never gets a
 * writable fd into the daemon's cache directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ckset.h"
#include "granary.h"
#include "granary_int.h"
#include "proto.h"

struct gr_ckpt {
    gr_client *c;
    int fd;                     /* the memfd; -1 after commit */
    uint64_t id;
    char dest[PROTO_MAX_PATH + 1];
};

gr_ckpt *gr_ckpt_create(gr_client *c, const char *dest)
{
    size_t len = dest ? strlen(dest) : 0;
    gr_ckpt *k;

    if (!c || len == 0 || dest[0] != '/' || len > PROTO_MAX_PATH) {
        errno = len > PROTO_MAX_PATH ? ENAMETOOLONG : EINVAL;
        return NULL;
    }
    k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->c = c;
    memcpy(k->dest, dest, len + 1);
    k->fd = memfd_create("granary-checkpoint", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (k->fd < 0) {
        int e = errno;
        free(k);
        errno = e;
        return NULL;
    }
    return k;
}

ssize_t gr_ckpt_pwrite(gr_ckpt *k, const void *buf, size_t len, off_t off)
{
    const char *p = buf;
    size_t done = 0;

    if (!k || k->fd < 0) {
        errno = EBADF;
        return -1;
    }
    while (done < len) {
        ssize_t w = pwrite(k->fd, p + done, len - done, off + (off_t)done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return done ? (ssize_t)done : -1;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

int gr_ckpt_fd(gr_ckpt *k)
{
    if (!k || k->fd < 0) {
        errno = EBADF;
        return -1;
    }
    return k->fd;
}

typedef struct put_arg {
    const char *dest;
    int set;                    /* the fd holds a set container */
    int early;                  /* ask for "ack staged" */
    uint64_t id;
    int state;                  /* the reply's: GR_CKPT_STAGED or GR_CKPT_LOCAL */
} put_arg;

static int state_of(const char *s);

static long put_enc(void *arg, uint8_t *buf, size_t cap, uint32_t id)
{
    put_arg *a = arg;
    size_t off = 0;
    int rc;

    rc = proto_rec_str(buf + PROTO_HDR_LEN, cap - PROTO_HDR_LEN, &off, "dest", a->dest,
                       strlen(a->dest));
    if (rc == 0 && a->set)
        rc = proto_rec_u64(buf + PROTO_HDR_LEN, cap - PROTO_HDR_LEN, &off, "set", 1);
    if (rc == 0 && a->early)
        rc = proto_rec_str(buf + PROTO_HDR_LEN, cap - PROTO_HDR_LEN, &off, "ack", "staged", 6);
    if (rc < 0)
        return rc;
    return proto_enc_ckpt_put(buf, cap, id, buf + PROTO_HDR_LEN, off);
}

static int put_dec(void *arg, const proto_msg *m)
{
    put_arg *a = arg;
    size_t off = 0;
    proto_rec r;

    a->state = GR_CKPT_LOCAL;
    while (proto_rec_next(m->u.recs.p, m->u.recs.len, &off, &r) == 1) {
        if (proto_rec_is(&r, "id") && r.kind == PROTO_REC_U64) {
            a->id = r.u64;
        } else if (proto_rec_is(&r, "state") && r.kind == PROTO_REC_STR && r.len < 16) {
            char st[16];
            memcpy(st, r.str, r.len);
            st[r.len] = '\0';
            a->state = state_of(st);
        }
    }
    return a->id && (a->state == GR_CKPT_STAGED || a->state == GR_CKPT_LOCAL) ? 0 : -EPROTO;
}

/* The state acknowledged (GR_CKPT_STAGED only when early), or -1. */
static int put(gr_client *c, int fd, const char *dest, int set, int early, uint64_t *id)
{
    put_arg a = { dest, set, early, 0, GR_CKPT_LOCAL };

    if (gr__call_fd(c, PROTO_OP_CKPT_PUT, fd, put_enc, put_dec, &a) < 0)
        return -1;
    *id = a.id;
    return a.state;
}

static int commit(gr_ckpt *k, int early)
{
    int st;

    if (!k || k->fd < 0) {
        errno = EBADF;
        return -1;
    }
    if ((st = put(k->c, k->fd, k->dest, 0, early, &k->id)) < 0)
        return -1;
    close(k->fd);
    k->fd = -1;
    return st;
}

int gr_ckpt_commit(gr_ckpt *k)
{
    return commit(k, 0) < 0 ? -1 : 0;
}

int gr_ckpt_commit_staged(gr_ckpt *k)
{
    return commit(k, 1);
}

gr_ckpt *gr_ckpt_put_fd(gr_client *c, int fd, const char *dest)
{
    gr_ckpt *k;
    size_t len = dest ? strlen(dest) : 0;

    if (!c || fd < 0 || len == 0 || len > PROTO_MAX_PATH) {
        errno = len > PROTO_MAX_PATH ? ENAMETOOLONG : EINVAL;
        return NULL;
    }
    k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->c = c;
    k->fd = -1;
    memcpy(k->dest, dest, len + 1);
    if (put(c, fd, dest, 0, 0, &k->id) < 0) {
        int e = errno;
        free(k);
        errno = e;
        return NULL;
    }
    return k;
}

uint64_t gr_ckpt_id(const gr_ckpt *k)
{
    return k ? k->id : 0;
}

void gr_ckpt_free(gr_ckpt **kp)
{
    gr_ckpt *k = kp ? *kp : NULL;

    if (!k)
        return;
    if (k->fd >= 0)
        close(k->fd);
    free(k);
    *kp = NULL;
}

const char *gr_ckpt_state_name(int state)
{
    static const char *const n[] = { "staged", "local", "replicated", "published", "failed",
                                     "superseded" };
    return state >= 0 && (size_t)state < sizeof(n) / sizeof(n[0]) ? n[state] : "?";
}

static int state_of(const char *s)
{
    for (int i = GR_CKPT_STAGED; i <= GR_CKPT_SUPERSEDED; i++)
        if (!strcmp(s, gr_ckpt_state_name(i)))
            return i;
    return GR_CKPT_STAGED;
}

static void copy_text(char *dst, size_t cap, const gr_field *f)
{
    size_t n = f->len < cap - 1 ? f->len : cap - 1;
    memcpy(dst, f->text, n);
    dst[n] = '\0';
}

int gr_ckpt_status(gr_client *c, uint64_t id, gr_ckpt_info *out)
{
    gr_field arg = { .name = "id", .num = id }, *f = NULL;
    size_t n = 0;
    int found = 0;

    if (!c || !out || id == 0) {
        errno = EINVAL;
        return -1;
    }
    if (gr_admin(c, GR_ADMIN_CKPT_LIST, &arg, 1, &f, &n) < 0)
        return -1;
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < n; i++) {
        const gr_field *x = &f[i];
        if (!strcmp(x->name, "id")) {
            if (found)
                break;
            found = x->num == id;
            out->id = x->num;
        } else if (!found) {
            continue;
        } else if (!strcmp(x->name, "state") && x->is_text) {
            out->state = state_of(x->text);
        } else if (!strcmp(x->name, "dest") && x->is_text) {
            copy_text(out->dest, sizeof(out->dest), x);
        } else if (!strcmp(x->name, "error") && x->is_text) {
            copy_text(out->error, sizeof(out->error), x);
        } else if (!strcmp(x->name, "size")) {
            out->size = x->num;
        } else if (!strcmp(x->name, "drained")) {
            out->drained = x->num;
        } else if (!strcmp(x->name, "attempts")) {
            out->attempts = (unsigned)x->num;
        } else if (!strcmp(x->name, "uid")) {
            out->uid = (unsigned)x->num;
        } else if (!strcmp(x->name, "durable")) {
            out->durable = x->num != 0;
        }
    }
    free(f);
    if (!found) {
        errno = ENOENT;
        return -1;
    }
    return 0;
}

int gr_ckpt_wait(gr_client *c, uint64_t id, int state, int timeout_ms)
{
    struct timespec t0, now;
    long sleep_ms = 10;
    gr_ckpt_info info;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (gr_ckpt_status(c, id, &info) < 0)
            return -1;
        if (info.state == GR_CKPT_FAILED) {
            errno = EIO;
            return -1;
        }
        if (info.state == GR_CKPT_SUPERSEDED) {
            errno = ESTALE;
            return -1;
        }
        if (info.state >= state)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (timeout_ms >= 0 && (now.tv_sec - t0.tv_sec) * 1000 +
                                   (now.tv_nsec - t0.tv_nsec) / 1000000 >= timeout_ms) {
            errno = ETIMEDOUT;
            return -1;
        }
        {
            struct timespec ts = { 0, sleep_ms * 1000000 };
            nanosleep(&ts, NULL);
        }
        if (sleep_ms < 100)
            sleep_ms *= 2;
    }
}

/* ---- sets ---- */

struct gr_ckpt_set {
    gr_client *c;
    int data;                   /* memfd: the files' bytes, back to back; -1 after commit */
    uint64_t len;               /* bytes in data */
    size_t n, cap;
    char **names;
    uint64_t *sizes;
    uint64_t id;
    char dest[PROTO_MAX_PATH + 1];
};

gr_ckpt_set *gr_ckpt_set_create(gr_client *c, const char *dest)
{
    size_t len = dest ? strlen(dest) : 0;
    gr_ckpt_set *s;

    if (!c || len == 0 || dest[0] != '/' || len > PROTO_MAX_PATH) {
        errno = len > PROTO_MAX_PATH ? ENAMETOOLONG : EINVAL;
        return NULL;
    }
    s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->c = c;
    memcpy(s->dest, dest, len + 1);
    s->data = memfd_create("granary-checkpoint-set", MFD_CLOEXEC);
    if (s->data < 0) {
        int e = errno;
        free(s);
        errno = e;
        return NULL;
    }
    return s;
}

/* A new file entry (its bytes appended by the caller): 0 or -1 with errno. */
static int set_entry(gr_ckpt_set *s, const char *name)
{
    if (!s || s->data < 0) {
        errno = EBADF;
        return -1;
    }
    if (!name || proto_set_name_ok(name, strlen(name)) < 0 || s->n >= PROTO_SET_MAX_FILES) {
        errno = EINVAL;
        return -1;
    }
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            errno = EEXIST;
            return -1;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **nn = realloc(s->names, cap * sizeof(*nn));
        uint64_t *ns;
        if (!nn)
            return -1;
        s->names = nn;
        ns = realloc(s->sizes, cap * sizeof(*ns));
        if (!ns)
            return -1;
        s->sizes = ns;
        s->cap = cap;
    }
    if (!(s->names[s->n] = strdup(name)))
        return -1;
    s->sizes[s->n] = 0;
    return 0;
}

static int write_at(int fd, const void *buf, size_t len, uint64_t off)
{
    const char *p = buf;

    while (len) {
        ssize_t w = pwrite(fd, p, len, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

int gr_ckpt_set_add(gr_ckpt_set *s, const char *name, const void *buf, size_t len)
{
    if (set_entry(s, name) < 0)
        return -1;
    if (write_at(s->data, buf, len, s->len) < 0) {
        free(s->names[s->n]);
        return -1;
    }
    s->sizes[s->n++] = len;
    s->len += len;
    return 0;
}

int gr_ckpt_set_add_fd(gr_ckpt_set *s, const char *name, int fd)
{
    char *buf;
    uint64_t got = 0;
    off_t pos = 0;

    if (set_entry(s, name) < 0)
        return -1;
    buf = malloc(1u << 20);
    if (!buf) {
        free(s->names[s->n]);
        return -1;
    }
    for (;;) {
        ssize_t r = pread(fd, buf, 1u << 20, pos);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || (r > 0 && write_at(s->data, buf, (size_t)r, s->len + got) < 0)) {
            int e = errno;
            free(buf);
            free(s->names[s->n]);
            errno = e;
            return -1;
        }
        if (r == 0)
            break;
        got += (uint64_t)r;
        pos += r;
    }
    free(buf);
    s->sizes[s->n++] = got;
    s->len += got;
    return 0;
}

static int set_commit(gr_ckpt_set *s, int early)
{
    size_t *lens = NULL, hl;
    uint8_t *hdr = NULL, *buf = NULL;
    int out = -1, rc = -1, e = 0;
    long h;

    if (!s || s->data < 0) {
        errno = EBADF;
        return -1;
    }
    if (s->n == 0) {
        errno = EINVAL;             /* a set of no files */
        return -1;
    }
    lens = malloc(s->n * sizeof(*lens));
    if (!lens)
        return -1;
    for (size_t i = 0; i < s->n; i++)
        lens[i] = strlen(s->names[i]);
    hl = proto_set_hdr_len(s->n, lens);
    hdr = malloc(hl);
    buf = malloc(4u << 20);
    out = memfd_create("granary-checkpoint-set", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (!hdr || !buf || out < 0)
        goto done;
    h = proto_set_enc_hdr(hdr, hl, s->n, (const char *const *)s->names, s->sizes);
    if (h != (long)hl) {
        errno = EINVAL;
        goto done;
    }
    if (write_at(out, hdr, hl, 0) < 0)
        goto done;
    /* The files' bytes after the header, each range of data freed once
     * copied, so that the set is held about once, not twice. */
    for (uint64_t off = 0; off < s->len;) {
        size_t n = s->len - off < (4u << 20) ? (size_t)(s->len - off) : (4u << 20);
        ssize_t r = pread(s->data, buf, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            goto done;
        }
        if (write_at(out, buf, (size_t)r, hl + off) < 0)
            goto done;
        fallocate(s->data, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, r);
        off += (uint64_t)r;
    }
    if ((rc = put(s->c, out, s->dest, 1, early, &s->id)) < 0)
        goto done;
    close(s->data);
    s->data = -1;
done:
    e = errno;
    if (rc < 0 && s->data >= 0 && s->len) {
        close(s->data);             /* its bytes are (partly) given away: spent */
        s->data = -1;
    }
    if (out >= 0)
        close(out);
    free(lens);
    free(hdr);
    free(buf);
    errno = e;
    return rc;
}

int gr_ckpt_set_commit(gr_ckpt_set *s)
{
    return set_commit(s, 0) < 0 ? -1 : 0;
}

int gr_ckpt_set_commit_staged(gr_ckpt_set *s)
{
    return set_commit(s, 1);
}

uint64_t gr_ckpt_set_id(const gr_ckpt_set *s)
{
    return s ? s->id : 0;
}

void gr_ckpt_set_free(gr_ckpt_set **sp)
{
    gr_ckpt_set *s = sp ? *sp : NULL;

    if (!s)
        return;
    if (s->data >= 0)
        close(s->data);
    for (size_t i = 0; i < s->n; i++)
        free(s->names[i]);
    free(s->names);
    free(s->sizes);
    free(s);
    *sp = NULL;
}
