/*
 * op_meta.c - STAT and READDIR: a path's attributes and a directory's
 * entries from a registered dataset's manifest (datasets.h), with no
 * operation on the file system; and the manifest's part in OPEN and OPENX
 * (meta_open_lookup).
 *
 * Who may be answered: the daemon judges from the manifest's attributes
 * and ACLs and the peer's credentials (judge_chain: search on every
 * directory from "/" down, then what the operation needs of the last), the
 * way the kernel would judge the peer's own stat(2) or opendir(3).  That
 * is only the final word with [daemon] access_check = judge (or none, which
 * answers everyone, or for root); with access_check = fd the kernel judges
 * at the client's own open, and STAT and READDIR are refused (-ENOKEY) so
 * that libgranary asks the file system itself.
 *
 * A path the manifests cannot answer for (outside every ready dataset, or
 * below a directory its scan could not list) gets -ENODATA: ask the file
 * system.  A path a manifest says is not there gets -ENOENT once the peer
 * may search every directory down to where it stops (else -EACCES, so an
 * unsearchable directory's contents are not revealed).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_int.h"


int meta_may_judge(const conn *c)
{
    return c->cred.uid == 0 || strcmp(c->srv->d.cfg->access_check, "fd") != 0;
}

void meta_cred(const conn *c, access_cred *out)
{
    memset(out, 0, sizeof(*out));
    out->uid = c->cred.uid;
    out->gid = c->cred.gid;
    out->ngroups = c->cred.ngroups;
    if (out->ngroups > 0)
        memcpy(out->groups, c->cred.groups, (size_t)out->ngroups * sizeof(gid_t));
}

/* 0 if c may search chain[0..depth-1) and have want (ACCESS mask: 4 read, 1
 * search) on chain[depth-1]; -EACCES with err set if not.  access_check =
 * none trusts everyone. */
int meta_judge(const conn *c, const manifest *m, const uint32_t *chain, size_t depth, int want,
               char *err, size_t errlen)
{
    access_cred cred;

    if (strcmp(c->srv->d.cfg->access_check, "none") == 0 || c->cred.uid == 0)
        return 0;
    if (depth > META_CHAIN) {
        snprintf(err, errlen, "a path of more than %d components is not judged", META_CHAIN);
        return -EACCES;
    }
    meta_cred(c, &cred);
    for (size_t i = 0; i < depth; i++) {
        int need = i + 1 < depth ? 1 : want;
        access_obj o;
        mf_entry e;
        if (!need)
            continue;
        mf_get(m, chain[i], &e);
        if (mf_access_obj(&e, &o) < 0) {
            snprintf(err, errlen, "an ACL on the path cannot be judged");
            return -EACCES;
        }
        if (!access_may(&cred, &o, need)) {
            snprintf(err, errlen, "permission denied");
            return -EACCES;
        }
    }
    return 0;
}

void meta_fill_attr(const conn *c, const struct stat *st, proto_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->chunk_size = (uint32_t)source_chunk_size(c->srv->d.cfg->chunk_size, (uint64_t)st->st_blksize);
    a->size = (uint64_t)st->st_size;
    a->ino = (uint64_t)st->st_ino;
    a->dev = (uint64_t)st->st_dev;
    a->mtime_sec = st->st_mtim.tv_sec;
    a->mtime_nsec = (uint32_t)st->st_mtim.tv_nsec;
    a->mode = st->st_mode;
    a->blksize = (uint32_t)st->st_blksize;
    a->uid = st->st_uid;
    a->gid = st->st_gid;
    a->nlink = (uint32_t)st->st_nlink;
}

int meta_lookup(conn *c, const char *norm, meta_hit *h, char *err, size_t errlen)
{
    int in_ds = 0, rc;

    h->depth = 0;
    h->idx = datasets_lookup(c->srv->d.ds, norm, &h->m, h->chain, META_CHAIN, &h->depth,
                             &h->valid_ms, &in_ds);
    if (h->idx != MF_NONE) {
        if (h->depth > META_CHAIN) {
            snprintf(err, errlen, "a path of more than %d components is not judged", META_CHAIN);
            return -EACCES;
        }
        mf_get(h->m, h->idx, &h->e);
        return 0;
    }
    if (!in_ds) {
        snprintf(err, errlen, "not in a registered dataset: ask the file system");
        return -ENODATA;
    }
    /* Not there, as far as the manifest knows: say so only to a peer that
     * may search down to where the path stops. */
    if (h->depth > META_CHAIN)
        h->depth = META_CHAIN + 1;      /* refused by meta_judge */
    rc = meta_judge(c, h->m, h->chain, h->depth, 1, err, errlen);
    if (rc < 0)
        return rc;
    snprintf(err, errlen, "no such file or directory (as of the dataset's last scan)");
    return -ENOENT;
}

/* The path of a STAT or READDIR, normalised; or an error reply sent. */
static char *meta_path(conn *c, uint8_t op, uint32_t req_id, const char *path, size_t len)
{
    char err[320];
    char *norm;
    int root, rc;

    if (!meta_may_judge(c)) {
        reply_error(c, op, req_id, -ENOKEY,
                    "STAT and READDIR need [daemon] access_check = judge (with fd the kernel "
                    "judges at your own open: ask the file system)");
        return NULL;
    }
    rc = source_resolve(c->srv->d.src, path, len, &norm, &root, err, sizeof(err));
    if (rc < 0) {
        reply_error(c, op, req_id, rc, err);
        return NULL;
    }
    return norm;
}

void op_stat(conn *c, const proto_msg *m, int *fds, int nfds)
{
    char err[320];
    char *norm = meta_path(c, PROTO_OP_STAT, m->h.req_id, m->u.open.path, m->u.open.len);
    meta_hit h;
    proto_attr a;
    outmsg *out;
    int rc;

    (void)fds;
    (void)nfds;
    if (!norm)
        return;
    rc = meta_lookup(c, norm, &h, err, sizeof(err));
    free(norm);
    if (rc == 0 && h.e.is_other) {
        /* stat follows a link the manifest does not: the file system says */
        snprintf(err, sizeof(err), "a symbolic link or special file: ask the file system");
        rc = -ENODATA;
    }
    if (rc == 0)
        rc = meta_judge(c, h.m, h.chain, h.depth, 0, err, sizeof(err));
    if (rc < 0) {
        if (rc == -EACCES)
            c->srv->d.stats->access_denied++;
        reply_error(c, PROTO_OP_STAT, m->h.req_id, rc, err);
        return;
    }
    meta_fill_attr(c, &h.e.st, &a);
    out = outmsg_new(PROTO_STAT_LEN);
    if (!out) {
        conn_fail(c, "out of memory for a STAT reply");
        return;
    }
    proto_enc_stat_reply(out->buf, out->len, m->h.req_id, &a, h.valid_ms);
    conn_send(c, out);
}

/*
 * READDIR: up to max entries of the directory's children (sorted by name)
 * from position cookie (0: the first), with their attributes with
 * PROTO_READDIR_PLUS, as many as fit one message; next is the position to
 * ask from, 0 after the last.  Positions are the manifest's: a rescan
 * between two pages may repeat or skip entries, as readdir(3) of a
 * directory changing under it may.
 */
void op_readdir(conn *c, const proto_msg *m, int *fds, int nfds)
{
    uint32_t req_id = m->h.req_id, max = m->u.readdir.max;
    int plus = (m->u.readdir.flags & PROTO_READDIR_PLUS) != 0;
    char err[320];
    char *norm = meta_path(c, PROTO_OP_READDIR, req_id, m->u.readdir.path, m->u.readdir.path_len);
    proto_dirent *ents = NULL;
    uint64_t pos = m->u.readdir.cookie, next = 0;
    size_t body = PROTO_READDIR_REPLY;
    uint32_t n = 0;
    meta_hit h;
    outmsg *out;
    ssize_t len;
    int rc;

    (void)fds;
    (void)nfds;
    if (!norm)
        return;
    rc = meta_lookup(c, norm, &h, err, sizeof(err));
    free(norm);
    if (rc == 0 && !h.e.is_dir) {
        snprintf(err, sizeof(err), "not a directory");
        rc = -ENOTDIR;
    }
    if (rc == 0 && h.e.unlisted) {
        snprintf(err, sizeof(err), "the dataset's scan could not list it: ask the file system");
        rc = -ENODATA;
    }
    /* Listing needs read permission; the entries' attributes also search. */
    if (rc == 0)
        rc = meta_judge(c, h.m, h.chain, h.depth, plus ? 4 | 1 : 4, err, sizeof(err));
    if (rc == 0 && pos > h.e.nchildren) {
        snprintf(err, sizeof(err), "a cookie past the directory's end");
        rc = -EINVAL;
    }
    if (rc == 0 && !(ents = calloc(max, sizeof(*ents))))
        rc = -ENOMEM;
    if (rc < 0) {
        if (rc == -EACCES)
            c->srv->d.stats->access_denied++;
        reply_error(c, PROTO_OP_READDIR, req_id, rc, rc == -ENOMEM ? NULL : err);
        return;
    }
    for (; pos < h.e.nchildren && n < max; pos++) {
        mf_entry e;
        mf_get(h.m, h.e.first_child + (uint32_t)pos, &e);
        if (body + PROTO_DIRENT_SIZE(e.name_len, plus) > PROTO_MAX_BODY)
            break;
        body += PROTO_DIRENT_SIZE(e.name_len, plus);
        ents[n].type = e.is_dir ? PROTO_DIRENT_DIR : !e.is_other ? PROTO_DIRENT_REG
                                                  : (uint8_t)IFTODT(e.st.st_mode);
        ents[n].name = e.name;
        ents[n].name_len = e.name_len;
        if (plus)
            meta_fill_attr(c, &e.st, &ents[n].attr);
        n++;
    }
    next = pos < h.e.nchildren ? pos : 0;
    out = outmsg_new(body);
    if (!out) {
        free(ents);
        conn_fail(c, "out of memory for a READDIR reply");
        return;
    }
    len = proto_enc_readdir_reply(out->buf, out->len, req_id, next, h.valid_ms,
                                  plus ? PROTO_READDIR_PLUS : 0, ents, n);
    free(ents);
    if (len < 0) {                  /* a name the codec refuses: the manifest's checks missed it */
        free(out);
        reply_error(c, PROTO_OP_READDIR, req_id, -EIO, "a directory entry could not be encoded");
        return;
    }
    conn_send(c, out);
}
