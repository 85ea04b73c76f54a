/*
 * path.h - a path as the daemon takes it: absolute, without "." or ".."
 * components.  Clients (libgranary's gr_open and hints, granaryctl) turn a
 * relative path into one against the caller's working directory, as the
 * LD_PRELOAD shim (the kernel's name of a descriptor) and Python's
 * os.path.abspath already do.
 *
 * Threads: any (reads the working directory).
 */
#ifndef GR_COMMON_PATH_H
#define GR_COMMON_PATH_H

#include <stddef.h>

/*
 * path as an absolute path into out (outlen bytes).  An absolute path is
 * copied unchanged (the daemon judges it).  A relative one is joined to
 * getcwd() and normalised lexically, as os.path.abspath does: repeated
 * slashes and "." dropped, ".." removes the component before it (not past
 * "/"), no trailing slash.  Symlinks are not resolved.  Returns 0, or
 * -EINVAL (empty path), -ENAMETOOLONG, or getcwd's -errno.
 */
int gr__path_abs(const char *path, char *out, size_t outlen);

#endif
