/*
 * testutil.c - see testutil.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char *p;

    if (!base || !*base)
        base = "/tmp";
    if (asprintf(&p, "%s/granary-test-XXXXXX", base) < 0 || !mkdtemp(p)) {
        perror("tu_mkdtemp");
        abort();
    }
    return p;
}

static int tu_rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(p) < 0 && errno != ENOENT ? -1 : 0;
}

void tu_rmrf(const char *path)
{
    if (path)
        nftw(path, tu_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

uint8_t tu_byte(uint32_t seed, uint64_t i)
{
    /* A cheap mix so that every offset and seed gives a different byte and
     * a shifted or truncated read never passes by accident. */
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32 | seed);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint8_t)x;
}

void tu_write_pattern(const char *path, uint32_t seed, uint64_t size)
{
    static uint8_t buf[1 << 16];
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    uint64_t off = 0;

    if (fd < 0) {
        perror(path);
        abort();
    }
    while (off < size) {
        size_t n = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = tu_byte(seed, off + i);
        if (write(fd, buf, n) != (ssize_t)n) {
            perror("write");
            abort();
        }
        off += n;
    }
    close(fd);
}

int tu_check_pattern(const void *buf, uint32_t seed, uint64_t off, size_t len)
{
    const uint8_t *b = buf;

    for (size_t i = 0; i < len; i++)
        if (b[i] != tu_byte(seed, off + i))
            return 0;
    return 1;
}
