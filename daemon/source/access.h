/*
 * access.h - judging a client's access from attributes and credentials, as
 * the kernel would: the owner/group/other mode bits, supplementary groups,
 * and POSIX ACLs (system.posix_acl_access), for read (R_OK) or search
 * (X_OK).
 *
 * Used where the daemon must decide without the client's own open(2): job
 * hints (before fetching anything, so a refused hint costs nothing) and the
 * daemon-judged access mode.  It covers discretionary access control only:
 * an LSM (SELinux, AppArmor) or a server-side rule of the filesystem
 * (NFSv4 ACLs, root squash) can refuse what it allows, so where the kernel
 * must have the last word (access_check = fd) it is a pre-filter, never
 * the final judge.  Whatever it cannot read it refuses: an ACL blob it does
 * not understand, NFSv4 ACLs, a peer whose supplementary groups were too
 * many to receive.
 *
 * Threads: any (pure functions).
 */
#ifndef GR_ACCESS_H
#define GR_ACCESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ACCESS_MAX_GROUPS 64
#define ACCESS_MAX_ACL    32    /* ACL entries kept per object; more: refused */

/* Who asks: from SO_PEERCRED and SO_PEERGROUPS. */
typedef struct access_cred {
    uid_t uid;
    gid_t gid;
    int ngroups;                /* -1: unknown (too many to receive): group classes refused */
    gid_t groups[ACCESS_MAX_GROUPS];
} access_cred;

/* One ACL entry (the kernel's posix_acl_xattr_entry, decoded). */
typedef struct access_ace {
    uint16_t tag;               /* ACCESS_ACL_* */
    uint16_t perm;              /* 4 read, 2 write, 1 execute */
    uint32_t id;                /* uid or gid for USER and GROUP */
} access_ace;

#define ACCESS_ACL_USER_OBJ  0x01
#define ACCESS_ACL_USER      0x02
#define ACCESS_ACL_GROUP_OBJ 0x04
#define ACCESS_ACL_GROUP     0x08
#define ACCESS_ACL_MASK      0x10
#define ACCESS_ACL_OTHER     0x20

/* What is judged: an object's owner, group, mode and ACL. */
typedef struct access_obj {
    uid_t uid;
    gid_t gid;
    mode_t mode;
    int nacl;                   /* 0: no ACL beyond the mode bits; -1: unreadable (refused) */
    access_ace acl[ACCESS_MAX_ACL];
} access_obj;

/*
 * Decode a system.posix_acl_access value (len bytes) into o->acl.  A
 * missing or empty value: pass len 0 (nacl 0).  0, or -EINVAL for a blob
 * that is not a valid version-2 POSIX ACL (o->nacl is then -1).
 */
int access_acl_decode(access_obj *o, const void *blob, size_t len);

/*
 * Whether cred may access o for want (a mask of 4 read, 1 search/execute):
 * 1 yes, 0 no.  uid 0 may read and search everything (CAP_DAC_OVERRIDE and
 * CAP_DAC_READ_SEARCH).  With an ACL the kernel's algorithm: owner entry;
 * named user entries (masked); the owning group and named group entries
 * (masked), any of which grants; other.
 */
int access_may(const access_cred *cred, const access_obj *o, int want);

/* Whether gid is the cred's primary or one of its supplementary groups:
 * 1, 0, or -1 when its groups are unknown. */
int access_in_group(const access_cred *cred, gid_t gid);

#endif
