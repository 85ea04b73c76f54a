/*
 * asuser.c - acting as a checkpoint's writer on the file system (asuser.h).
 *
 * On Linux the fsuid, fsgid and supplementary groups are per thread at the
 * system-call level; glibc's setfsuid is too, but its setgroups (and
 * setresuid) change every thread of the process, so the raw system calls
 * are used, and switched back after each step.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "asuser.h"
#include "log.h"

int asuser_enter(const ckpt_cred *cred, asuser_saved *sv, char *err, size_t errlen)
{
    uid_t me = geteuid();
    long n;

    sv->switched = 0;
    if (cred->uid == me)
        return 0;                   /* the daemon's own user (root included) */
    if (me != 0) {
        snprintf(err, errlen, "granaryd runs as uid %u without CAP_SETUID: it publishes checkpoints "
                 "for its own user only", (unsigned)me);
        return -EPERM;
    }
    n = syscall(SYS_getgroups, (int)(sizeof(sv->groups) / sizeof(sv->groups[0])), sv->groups);
    if (n < 0) {
        snprintf(err, errlen, "getgroups: %s", strerror(errno));
        return -EPERM;
    }
    sv->ngroups = (int)n;
    if (syscall(SYS_setgroups, cred->ngroups > 0 ? (size_t)cred->ngroups : 0, cred->groups) < 0) {
        snprintf(err, errlen, "setgroups: %s", strerror(errno));
        return -EPERM;
    }
    syscall(SYS_setfsgid, cred->gid);
    syscall(SYS_setfsuid, cred->uid);
    sv->switched = 1;
    if ((uid_t)syscall(SYS_setfsuid, (uid_t)-1) != cred->uid ||
        (gid_t)syscall(SYS_setfsgid, (gid_t)-1) != cred->gid) {
        snprintf(err, errlen, "could not act as uid %u gid %u", (unsigned)cred->uid,
                 (unsigned)cred->gid);
        return -EPERM;              /* the caller leaves (asuser_leave) at once */
    }
    return 0;
}

void asuser_leave(asuser_saved *sv)
{
    if (!sv->switched)
        return;
    syscall(SYS_setfsuid, geteuid());
    syscall(SYS_setfsgid, getegid());
    if (syscall(SYS_setgroups, (size_t)sv->ngroups, sv->groups) < 0)
        log_error("checkpoint: restoring this thread's groups: %s", strerror(errno));
    sv->switched = 0;
}

int asuser_open_parent(const char *root, const char *dest, const char **base, char *err,
                       size_t errlen)
{
    size_t rl = strlen(root);
    const char *rel = dest + rl + (rl > 1 ? 1 : 0);
    const char *slash = strrchr(dest, '/');
    char parent[PATH_MAX];
    struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
    int rfd, pfd;

    *base = slash + 1;
    rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0) {
        int e = errno;
        snprintf(err, errlen, "root %s: %s", root, strerror(e));
        return -e;
    }
    if (slash <= dest + rl) {
        return rfd;                 /* the destination lies in the root itself */
    }
    snprintf(parent, sizeof(parent), "%.*s", (int)(slash - rel), rel);
    pfd = (int)syscall(SYS_openat2, rfd, parent, &how, sizeof(how));
    if (pfd < 0) {
        int e = errno;
        close(rfd);
        snprintf(err, errlen, "destination directory %.*s: %s", (int)(slash - dest), dest,
                 e == EXDEV || e == ELOOP ? "a link leads out of the root" : strerror(e));
        return e == EXDEV || e == ELOOP ? -EACCES : -e;
    }
    close(rfd);
    return pfd;
}

void asuser_tmp_name(char *out, size_t len, const char *base, uint64_t id)
{
    snprintf(out, len, ".%.200s.granary-%" PRIu64 ".tmp", base, id);
}

int asuser_dest_check(const ckpt_cred *cred, const char *root, const char *dest, uint64_t id,
                      char *err, size_t errlen)
{
    asuser_saved sv;
    const char *base;
    char tmp[300];
    struct stat st;
    int pfd, fd, rc;

    rc = asuser_enter(cred, &sv, err, errlen);
    if (rc < 0) {
        asuser_leave(&sv);
        return rc;
    }
    pfd = asuser_open_parent(root, dest, &base, err, errlen);
    if (pfd < 0) {
        rc = pfd;
        goto out;
    }
    if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s is a directory", dest);
        rc = -EISDIR;
        goto out;
    }
    asuser_tmp_name(tmp, sizeof(tmp), base, id);
    fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "uid %u may not create %s: %s", (unsigned)cred->uid, dest,
                 strerror(-rc));
        goto out;
    }
    close(fd);
out:
    if (pfd >= 0)
        close(pfd);
    asuser_leave(&sv);
    return rc;
}

void asuser_unlink_tmp(const ckpt_cred *cred, const char *root, const char *dest, uint64_t id)
{
    asuser_saved sv;
    const char *base;
    char tmp[300], err[256];
    int pfd;

    if (asuser_enter(cred, &sv, err, sizeof(err)) == 0 &&
        (pfd = asuser_open_parent(root, dest, &base, err, sizeof(err))) >= 0) {
        asuser_tmp_name(tmp, sizeof(tmp), base, id);
        unlinkat(pfd, tmp, 0);
        close(pfd);
    }
    asuser_leave(&sv);
}
