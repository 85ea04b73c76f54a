/*
 * judge.h - may this peer read this file?  Decided by the daemon from the
 * attributes of the file and of every directory on its path, the way the
 * kernel would decide the peer's own open(2) (access.h: mode bits,
 * supplementary groups, POSIX ACLs; search permission on each directory
 * from "/" down, read permission on the file).
 *
 * The walk opens each component with O_PATH | O_NOFOLLOW from its parent,
 * so what is judged is what is there; a symbolic link on the way is
 * refused (prove access with an fd instead).  Directories' attributes and
 * ACLs are cached for ttl seconds (changes to a directory's permissions take
 * effect within ttl); the file's own are read each time.
 *
 * It judges discretionary access only (see access.h): with access_check =
 * fd it is a pre-filter for job hints (a hint it refuses costs nothing, not
 * even a stat of the file), never the final word.
 *
 * Threads: judge_read runs on I/O threads, concurrently (the cache has its
 * own lock); the rest on the loop thread.
 */
#ifndef GR_JUDGE_H
#define GR_JUDGE_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/stat.h>

#include "access.h"

typedef struct judge judge;

/* A judge whose directory cache trusts attributes for ttl seconds and
 * holds at most max_dirs directories.  0 or -ENOMEM. */
int judge_new(double ttl, size_t max_dirs, judge **out);
void judge_free(judge **j);
void judge_set_ttl(judge *j, double ttl);

/*
 * Whether cred may read the regular file at norm (absolute, normalised).
 * 0 and *st (the file's attributes as the daemon sees them), or -EACCES
 * (not allowed, or not judgeable: a symlink, an unreadable ACL; err says
 * which), -ENOENT / -ENOTDIR / -EISDIR and friends for a path that is not
 * a readable regular file.  A directory the peer may not search gives
 * -EACCES whatever lies below it, so nothing is learnt about its contents.
 */
int judge_read(judge *j, const char *norm, const access_cred *cred, struct stat *st, char *err,
               size_t errlen);

/*
 * Whether cred may list the directory at norm (absolute, normalised):
 * search on every directory of the path and read and search on norm
 * itself, as the kernel would judge its opendir(3).  0, -EACCES (err
 * says why), -ENOENT / -ENOTDIR and friends.  Any thread.
 */
int judge_list(judge *j, const char *norm, const access_cred *cred, char *err, size_t errlen);

/* Any thread: the system.posix_acl_access value of path (not following a
 * final symlink) into blob: its length, 0 for none (or a file system
 * without ACLs), -EACCES for one that cannot be judged (unreadable, more
 * than JUDGE_ACL_MAX bytes, an NFSv4 ACL). */
#define JUDGE_ACL_MAX (4 + 8 * ACCESS_MAX_ACL)
ssize_t judge_acl_blob(const char *path, void *blob, size_t cap);

#endif
