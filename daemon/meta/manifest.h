/*
 * manifest.h - a registered dataset's tree and attributes in one file: what
 * lets the daemon answer stat, open and readdir for a dataset of millions of
 * small files without asking the file system's metadata server.
 *
 * A manifest is a snapshot of one directory tree under a source root, taken
 * by a scan: every entry below it with its attributes (symbolic links and
 * special files by name, kind and lstat only: the daemon never serves
 * them, and their presence keeps a lookup through or of them from being
 * answered "not there"), with the POSIX ACL of files and directories, and the directories from "/" down to the
 * dataset's top (for judging search permission on the whole path).  It is
 * written once, to a temporary name, fsynced, and renamed into place, so a
 * crash leaves the old manifest or the new one; it is read with mmap after
 * its checksum is verified, so loading it costs one sequential read whatever
 * its size (the page cache keeps it, and can drop it).
 *
 * Layout (all little-endian; see manifest.c for the byte offsets):
 *   a 128-byte header: magic, version, counts, the file system's st_dev, the
 *   stamp the scan saw (validation), the XXH3-64 of everything after it;
 *   the entries, 64 bytes each, in breadth-first order so that every
 *   directory's children are contiguous and sorted by name (binary search),
 *   entry 0 being "/" and the chain down to the dataset's top first;
 *   the names; the ACL blobs.
 *
 * Threads: a manifest is immutable once open and may be read from any
 * thread; the builder is one thread's.
 */
#ifndef GR_MANIFEST_H
#define GR_MANIFEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "access.h"

#define MF_NONE UINT32_MAX          /* no entry */

typedef struct manifest manifest;

/* One entry as read from a manifest (a view: name points into it). */
typedef struct mf_entry {
    uint32_t idx;
    uint32_t parent;                /* MF_NONE for "/" */
    uint32_t first_child, nchildren;/* directories: children idx first_child.. */
    const char *name;               /* not NUL-terminated ("" for "/") */
    uint32_t name_len;
    int is_dir;
    int is_other;                   /* a symbolic link or special file (its lstat; no ACL) */
    int unlisted;                   /* a directory the scan could not list (its contents unknown) */
    struct stat st;                 /* mode, uid, gid, nlink, size, ino, mtime, ctime, dev, blksize */
    const uint8_t *acl;             /* system.posix_acl_access, or NULL */
    uint32_t acl_len;
} mf_entry;

/* What the scan saw of the stamp that validates the dataset: a stamp file's
 * (or the top directory's) mtime and ctime, and its inode. */
typedef struct mf_stamp {
    int64_t mtime_ns, ctime_ns;
    uint64_t ino;
} mf_stamp;

/* ---- reading ---- */

/* Open the manifest file at path: mapped, its checksum and structure
 * checked.  0, or -errno with a reason in err (-EBADMSG for a file that is
 * not a whole, valid manifest). */
int mf_open(const char *path, manifest **out, char *err, size_t errlen);
void mf_close(manifest **m);

uint32_t mf_count(const manifest *m);          /* entries, ancestors included */
uint32_t mf_top(const manifest *m);            /* the dataset's top directory */
const char *mf_top_path(const manifest *m);    /* its absolute path, NUL-terminated */
const mf_stamp *mf_stamp_of(const manifest *m);
uint64_t mf_files(const manifest *m);          /* regular files below the top */

/* Entry idx (< mf_count). */
void mf_get(const manifest *m, uint32_t idx, mf_entry *out);

/* The child of directory dir named name (len bytes), or MF_NONE. */
uint32_t mf_child(const manifest *m, uint32_t dir, const char *name, size_t len);

/*
 * The entry of absolute normalised path norm if it lies in the dataset (the
 * top or below it): its index, and in chain[0..*depth) the indices of every
 * entry from "/" down to it (chain may be NULL; at most max entries are
 * stored).  MF_NONE when norm is not in the dataset, or not in the
 * manifest: then *absent (may be NULL) is 1 when the manifest says there is
 * no such entry, 0 when it cannot say (outside the dataset, or below a
 * directory the scan could not list, or below a file); when absent, chain
 * holds the path's deepest entry the manifest has (a directory) and its
 * ancestors, *depth of them.
 */
uint32_t mf_lookup(const manifest *m, const char *norm, uint32_t *chain, size_t max,
                   size_t *depth, int *absent);

/* Entry e as an access_obj (owner, group, mode, ACL), for access.h.  0, or
 * -EINVAL for an ACL that does not decode (the object is then refused). */
int mf_access_obj(const mf_entry *e, access_obj *o);

/* ---- building (a scan) ---- */

typedef struct mf_builder mf_builder;

/*
 * A builder for the dataset at top (absolute, normalised): the chain of
 * directories from "/" to top must be added first with mf_build_ancestor,
 * outermost first (st of each, and its ACL), then the tree below top with
 * mf_build_add.  0 or -ENOMEM.
 */
int mf_build_new(const char *top, dev_t dev, const mf_stamp *stamp, mf_builder **out);
void mf_build_free(mf_builder **b);
int mf_build_ancestor(mf_builder *b, const struct stat *st, const void *acl, size_t acl_len);

/* Add a child named name under directory dir (a handle from an earlier
 * add, or mf_build_top for the top): its handle, or -ENOMEM / -E2BIG (more
 * than max_entries, or names too long).  Handles are the builder's, not
 * manifest indices. */
int64_t mf_build_top(mf_builder *b);
int64_t mf_build_add(mf_builder *b, int64_t dir, const char *name, const struct stat *st,
                     const void *acl, size_t acl_len);
/* Mark directory handle h as not listed (its contents unknown: lookups
 * below it are not answered from the manifest).  0 or -EINVAL. */
int mf_build_unlisted(mf_builder *b, int64_t h);

/* Entries so far (the chain from "/" included). */
uint64_t mf_build_count(const mf_builder *b);

/* Write the manifest to path atomically: path.tmp, fsync, rename, fsync of
 * the directory.  0 or -errno with err set. */
int mf_build_write(mf_builder *b, const char *path, char *err, size_t errlen);

#endif
