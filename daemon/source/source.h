/*
 * source.h - the distributed filesystem side: which paths may be served,
 * what a file's identity is, and reading whole aligned chunks of it.
 *
 * Paths are judged twice.  Lexically: absolute, no "." or ".." component,
 * under one of [source] roots.  Then by the kernel: every open walks from the
 * root with openat2(RESOLVE_BENEATH), so no symlink, ".." or bind trick
 * swapped in between check and use can leave the root.
 *
 * A file's identity is (st_dev, st_ino, st_size, st_mtim) hashed to 128
 * bits; chunks are keyed by it, so a rewritten file never meets stale
 * chunks.  Attributes are cached for attr_ttl seconds (loop thread) so that
 * re-opening a hot small file costs the metadata server nothing.
 *
 * Threads: source_resolve and the srcfile/attr-cache functions are for the
 * loop thread; source_stat and source_read_chunk block and run on I/O
 * threads, touching only the immutable fields of a srcfile.
 */
#ifndef GR_SOURCE_H
#define GR_SOURCE_H

#include "ids.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "config.h"
#include "htab.h"
#include "list.h"


typedef struct source source;

typedef struct srcfile srcfile;
struct srcfile {
    unsigned refs;              /* loop thread only; the attr cache holds one */
    char *path;                 /* normalised absolute path (owned) */
    int root;                   /* index into the configured roots */
    uint8_t id[FILE_ID_LEN];  /* identity, see above */
    struct stat st;             /* attributes when identified */
    uint32_t chunk_size;        /* bytes per chunk for this file */
    double checked_at;          /* monotonic time of the stat */
    int cached;                 /* still the attr cache's current entry */
    int pinned;                 /* source_pinned: fd is the file, with or without a name */
    int kept_proof;             /* source_proof_file: ... with a name to open it again by,
                                 * and fd (while >= 0) in its half of fd_cache */
    gr__hnode hn;               /* attr cache: by path */
    gr__list age;               /* attr cache: oldest first */
    /* The file held open from its OPEN for the chunk reads, or -1 (see
     * source_install_fd).  Closed by the loop thread only, when the fd
     * cache needs room and nobody but the attr cache holds the srcfile, or
     * when the srcfile goes: an I/O thread reading through it holds a
     * reference, so the fd outlives every read. */
    int fd;
    struct source *src;         /* whose fd cache, when fd >= 0 */
    gr__list fdage;             /* the fd cache: least recently used first */
};

/* Build the source from the config (roots, chunk size, attr TTL, attribute
 * cache size).  0 or -errno.  Roots need not be mounted yet. */
int source_new(const gr_config *cfg, source **out);
void source_free(source **s);

/*
 * Lexical check of a client path (len bytes, not NUL-terminated): the root
 * itself or anything under it (opening a root fails with EISDIR, but admin
 * commands walk it).  On 0,
 * *norm is a malloc'd normalised copy (duplicate slashes and a trailing
 * slash removed) that the caller frees, and *root its root's index.
 * -EINVAL (empty, NUL byte, not absolute), -ENAMETOOLONG, -EACCES (a
 * "."/".." component, or under no root), with a reason in err.
 */
int source_resolve(source *s, const char *path, size_t len, char **norm, int *root,
                   char *err, size_t errlen);

/* I/O thread: open norm beneath its root and fstat it.  Regular files only.
 * 0 or -errno with a reason in err (-EACCES for an escape attempt). */
int source_stat(source *s, const char *norm, int root, struct stat *st,
                char *err, size_t errlen);
/* The same, keeping the open file: on 0, *fd is its read fd, for
 * source_install_fd (which owns it from then on) or to close. */
int source_stat_open(source *s, const char *norm, int root, struct stat *st, int *fd,
                     char *err, size_t errlen);
/* Close fd (any descriptor of a file under a root, a client's proof
 * included) on the source's closer thread, not the caller's: on a FUSE DFS
 * a close is a round trip, which the loop must not wait for. */
void source_close_later(source *s, int fd);

/* The same without opening the file: the client's access proof (a read
 * descriptor it has just opened norm with) is kept instead, a duplicate of
 * it in *fd, when it is a plain O_RDONLY descriptor of a regular, linked
 * file that norm names: the proof's own name (/proc/self/fd) is norm on
 * the root's mount (returns 1: no file system operation at all), or norm,
 * resolved beneath its root with O_PATH, is that very file unchanged
 * (source_same_file; returns 0).  On a DFS that spares the metadata service
 * the daemon's open and close of every cold file, and mostly its lookup.
 * -EAGAIN: not so (a descriptor open for writing or O_DIRECT, another file,
 * a change meanwhile): call source_stat_open.  Other -errno: the path's
 * error, as source_stat_open would give it. */
int source_stat_proof(source *s, const char *norm, int root, int proof, struct stat *st,
                      int *fd, char *err, size_t errlen);
/* Loop thread, no file system operation: source_stat_proof's case 1 where
 * it can be told without one (the root's mount checked under a second ago,
 * the device known not to be Lustre).  1 with *st and *fd as there; 0: ask
 * source_stat_proof on an I/O thread. */
int source_proof_named(source *s, const char *norm, int root, int proof, struct stat *st,
                       int *fd);

/*
 * I/O thread: read chunk idx of f into buf (at least f->chunk_size bytes).
 * *len gets the chunk's length (short for the last chunk).  Through f's
 * own fd when it holds one (no open, no lookup: the fd is the inode f was
 * identified by); else the file is opened afresh beneath its root and must
 * still have f's identity before the read.  After the read it must still
 * have it (size, mtime), so that bytes of a file rewritten meanwhile are
 * never returned: -ESTALE (with reason) if it changed or shrank, -ENOENT if
 * it was removed, -errno otherwise.
 */
int source_read_chunk(source *s, const srcfile *f, uint64_t idx, void *buf, size_t *len,
                      char *err, size_t errlen);

/* The source as the last backend of the fetch engine (backend.h): get is
 * source_read_chunk, and its errors are final (BACKEND_FAIL).  s is
 * borrowed.  (Declared in backend.h's terms; source.h itself does not
 * depend on the engine.) */
struct backend;
void source_backend(source *s, struct backend *out);

/* Loop thread: the cached srcfile for norm if its attributes are younger
 * than attr_ttl at time now (monotonic seconds), with a new reference; else
 * NULL. */
srcfile *source_lookup(source *s, const char *norm, double now);

/* 1 when a and b are the same file unchanged: device, inode, size, mtime
 * and ctime (which no user can set, and which any change of owner, mode or
 * link count moves). */
int source_same_file(const struct stat *a, const struct stat *b);

/* Loop thread: the cached srcfile for norm, expired or not, with a new
 * reference, if st (a regular file, still linked) is that same file
 * (source_same_file); else NULL.  st is the fstat of a read descriptor a
 * client has just opened norm with, its access proof: the file as the
 * client's own open found it, so the caller may answer that client from
 * the entry with no operation on the file system.  The entry is not made
 * fresh for anyone else: a client that passes a descriptor of the file a
 * name used to have gets only the inode it holds open, and the next open
 * without such a proof resolves the name again. */
srcfile *source_lookup_proven(source *s, const char *norm, const struct stat *st);

/* Loop thread: make a srcfile for (norm, root, st) seen at time now, cache
 * it (replacing an older entry; an entry of the same file, unchanged
 * (source_same_file), stays, checked at now), and return it with a new
 * reference.  Takes
 * ownership of norm.  NULL only on out-of-memory (norm freed). */
srcfile *source_install(source *s, char *norm, int root, const struct stat *st, double now);
/* The same with the file's open fd from source_stat_open (or -1), which it
 * owns from then on: kept for the chunk reads while the fd cache ([source]
 * fd_cache fds) has room, making room by closing the least recently used
 * fd that nobody is reading through; else closed at once. */
srcfile *source_install_fd(source *s, char *norm, int root, const struct stat *st, int fd,
                           double now);
/* Loop thread: a srcfile for (norm, root, st) read through fd alone, kept
 * out of the attribute cache (an OPEN of norm never finds it) and holding
 * fd for its whole life (never closed to make room): the read path's view
 * of a file that is not, or not yet, at norm, such as a staged checkpoint
 * (its identity is fd's, so its chunks never meet those of the file at
 * norm).  Takes norm and fd; NULL only on out-of-memory (both freed). */
srcfile *source_pinned(source *s, char *norm, int root, const struct stat *st, int fd);
/* The same for a client's kept proof whose own name was norm (one client's
 * view: see op_file.c), read through fd; a read that fails through it is
 * repeated through the file opened again by name, which must still be the
 * file (source_same_file).  Such fds take at most half of [source] fd_cache;
 * past that fd is closed and the file opened by name at each chunk read. */
srcfile *source_proof_file(source *s, char *norm, int root, const struct stat *st, int fd);
/* Loop thread: fds the source holds open now: the fd cache's files and the
 * roots' directories. */
size_t source_open_fds(source *s);

/*
 * I/O thread: call cb(arg, id) with the identity of norm if it is a regular
 * file, or of every regular file below it if it is a directory (symlinks
 * inside are not followed; unreadable entries are skipped).  Opened beneath
 * its root like every source access.  Returns 0, the first non-zero value
 * cb returned, or -errno with a reason in err.
 */
typedef int (*source_walk_cb)(void *arg, const uint8_t id[FILE_ID_LEN]);
int source_walk(source *s, const char *norm, int root, source_walk_cb cb, void *arg,
                char *err, size_t errlen);

/*
 * I/O thread: a source file held open for reading chunk after chunk
 * (warmup).  source_open_file opens norm beneath its root: a regular file
 * fills *out (identity and chunk size as source_install computes them);
 * a directory gives -EISDIR; anything else -EINVAL.  source_file_read reads
 * chunk idx whole into buf; source_file_check says whether the file still
 * has the identity it was opened with (-ESTALE if not): call it after the
 * reads, before trusting their bytes.
 */
typedef struct source_file {
    int fd;
    struct stat st;
    uint8_t id[FILE_ID_LEN];
    uint32_t chunk_size;
} source_file;
int source_open_file(source *s, const char *norm, int root, source_file *out, char *err,
                     size_t errlen);
int source_file_read(const source_file *sf, uint64_t idx, void *buf, size_t *len, char *err,
                     size_t errlen);
int source_file_check(const source_file *sf);
void source_file_close(source_file *sf);

/*
 * I/O thread: call cb(arg, name, is_dir) for each regular file and
 * directory directly in directory norm (symlinks and others skipped).
 * Returns 0, the first non-zero cb result, or -errno with a reason in err.
 */
typedef int (*source_list_cb)(void *arg, const char *name, int is_dir);
int source_list_dir(source *s, const char *norm, int root, source_list_cb cb, void *arg,
                    char *err, size_t errlen);

/*
 * I/O thread: call cb(arg, name, st, acl, acl_len) for each entry
 * directly in directory norm (opened beneath its root), with its
 * attributes (not following links: a symbolic link or special file comes
 * with its lstat and no ACL) and, for regular files and directories, its
 * POSIX ACL (acl NULL: none; acl_len SOURCE_ACL_UNREADABLE: one that cannot
 * be judged).  An entry that changes between its attributes and its ACL
 * (another inode, or a new ctime) is read again, and given up on (skipped,
 * counted in *unstable) after a few tries.  Returns 0, the first non-zero
 * cb result, or -errno with a reason in err.  *dirst gets norm's own
 * attributes.
 */
#define SOURCE_ACL_UNREADABLE ((size_t)-1)
typedef int (*source_scan_cb)(void *arg, const char *name, const struct stat *st,
                              const void *acl, size_t acl_len);
int source_scan_dir(source *s, const char *norm, int root, struct stat *dirst,
                    source_scan_cb cb, void *arg, unsigned *unstable, char *err, size_t errlen);

/* Loop thread: change attr_ttl (SIGHUP). */
void source_set_attr_ttl(source *s, double attr_ttl);

/* Loop thread: forget the cached attributes of norm, so that the next open
 * looks at the file again.  1 if there were any, else 0. */
int source_forget(source *s, const char *norm);

/* I/O thread: whether every root can be opened; 0, or -errno with the
 * first failing root and why in err. */
int source_check_roots(source *s, char *err, size_t errlen);

/* Loop thread: take and drop references. */
srcfile *srcfile_ref(srcfile *f);
void srcfile_unref(srcfile **f);

/* Number of bytes in chunk idx of f (0 past the end). */
uint64_t srcfile_chunk_len(const srcfile *f, uint64_t idx);

/* The chunk size for a file whose stripe (st_blksize, or Lustre's stripe
 * size) is blksize, given the configured chunk_size: the largest multiple of
 * a stripe of 64K or more that fits chunk_size, else chunk_size.  Pure. */
uint64_t source_chunk_size(uint64_t chunk_size, uint64_t blksize);


#endif
