/*
 * path.c - relative paths made absolute against the working directory,
 * lexically (see path.h).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "path.h"

int gr__path_abs(const char *path, char *out, size_t outlen)
{
    char cwd[PATH_MAX];
    size_t len, o = 0;
    const char *parts[2], *p;

    if (!path || !*path)
        return -EINVAL;
    len = strlen(path);
    if (path[0] == '/') {
        if (len >= outlen)
            return -ENAMETOOLONG;
        memcpy(out, path, len + 1);
        return 0;
    }
    if (!getcwd(cwd, sizeof(cwd)))
        return errno == ERANGE ? -ENAMETOOLONG : -errno;
    if (outlen < 2)
        return -ENAMETOOLONG;
    parts[0] = cwd;
    parts[1] = path;
    for (int k = 0; k < 2; k++) {
        for (p = parts[k]; *p;) {
            size_t n;
            while (*p == '/')
                p++;
            n = strcspn(p, "/");
            if (n == 0)
                break;
            if (n == 1 && p[0] == '.') {
                /* nothing */
            } else if (n == 2 && p[0] == '.' && p[1] == '.') {
                while (o > 0 && out[o - 1] != '/')
                    o--;
                if (o > 0)
                    o--;                /* the slash before it */
            } else {
                if (o + 1 + n >= outlen)
                    return -ENAMETOOLONG;
                out[o++] = '/';
                memcpy(out + o, p, n);
                o += n;
            }
            p += n;
        }
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    return 0;
}
