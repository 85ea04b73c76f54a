/*
 * asuser.h - acting as a checkpoint's writer on the file system: the
 * calling thread takes the peer's uid, gid and groups as its fsuid, fsgid
 * and groups, so that the kernel judges every step on the destination
 * (walk, create, rename) exactly as it would the peer's own calls: mode
 * bits, ACLs, sticky directories, LSMs, an NFS server's root squash.  A
 * daemon that is not root can only be itself.
 *
 * Threads: I/O threads; each call changes the calling thread only, and
 * asuser_leave restores it.
 */
#ifndef GR_CKPT_ASUSER_H
#define GR_CKPT_ASUSER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt.h"

/* The thread's own identity while it acts as another. */
typedef struct asuser_saved {
    int switched;
    int ngroups;
    gid_t groups[CKPT_MAX_GROUPS * 4];
} asuser_saved;

/*
 * Act as cred on this thread (nothing to do for the daemon's own uid).
 * 0, or -EPERM with err (a daemon without CAP_SETUID asked for another
 * uid, or the switch did not take).  Call asuser_leave(sv) in every case,
 * failure included.
 */
int asuser_enter(const ckpt_cred *cred, asuser_saved *sv, char *err, size_t errlen);

/* Back to the thread's own identity (a no-op if nothing was switched). */
void asuser_leave(asuser_saved *sv);

/*
 * As the peer (entered): the directory of dest (a normalised path under
 * root), walked from "/" to root and beneath it without leaving it
 * (openat2 RESOLVE_BENEATH: a link out of the root is -EACCES): an O_PATH
 * fd (the caller's to close), and dest's last component in *base
 * (pointing into dest).  -errno with err.
 */
int asuser_open_parent(const char *root, const char *dest, const char **base, char *err,
                       size_t errlen);

/* The temporary name beside a destination whose last component is base,
 * for checkpoint id: ".BASE.granary-ID.tmp" (base cut to 200 bytes). */
void asuser_tmp_name(char *out, size_t len, const char *base, uint64_t id);

/*
 * As cred (entered and left here): check it may create dest, which is not
 * a directory, by creating the temporary file beside it that the drain
 * will fill (mode 0644, its umask and the directory's default ACL
 * applying).  The kernel judges.  0, or -errno with err (-EISDIR,
 * -EACCES, -ENOENT, -EPERM).
 */
int asuser_dest_check(const ckpt_cred *cred, const char *root, const char *dest, uint64_t id,
                      char *err, size_t errlen);

/* As cred: remove the temporary asuser_dest_check made; errors ignored
 * (a put that failed, a checkpoint dropped). */
void asuser_unlink_tmp(const ckpt_cred *cred, const char *root, const char *dest, uint64_t id);

#endif
