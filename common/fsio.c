/*
 * fsio.c - whole reads and writes, durable directories (fsio.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "fsio.h"

int gr__pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

int gr__pread_all(int fd, uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EIO;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int gr__fsync_dirat(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        rc = -errno;
    close(fd);
    return rc;
}
