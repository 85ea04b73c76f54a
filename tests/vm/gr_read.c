/*
 * gr_read.c - a training job's reader, for tests/test_systemd_vm.sh: reads
 * PATH through the running granaryd with libgranary (gr_connect(NULL):
 * $GRANARY_SOCKET, else the config's socket) in 64 KiB gr_pread calls, and
 * compares every byte with a plain read(2) of the same file.  Built in the
 * test against the installed header and library through pkg-config.
 *
 * Exit status: 0 the bytes match (and the file is not empty), 1 a mismatch
 * or a libgranary error (printed on stderr with errno), 2 usage or the file
 * cannot be read directly.
 */
#include <errno.h>
#include <fcntl.h>
#include <granary.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEP 65536

int main(int argc, char **argv)
{
    static char a[STEP], b[STEP];
    gr_client *c;
    gr_file *f;
    struct stat st;
    off_t off = 0;
    int fd;

    if (argc != 2) {
        fprintf(stderr, "usage: gr_read PATH\n");
        return 2;
    }
    fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "gr_read: open %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    c = gr_connect(NULL);
    if (!c) {
        fprintf(stderr, "gr_read: gr_connect: %s\n", strerror(errno));
        return 1;
    }
    f = gr_open(c, argv[1]);
    if (!f) {
        fprintf(stderr, "gr_read: gr_open %s: %s\n", argv[1], strerror(errno));
        gr_disconnect(c);
        return 1;
    }
    if (gr_fstat(f, &st) < 0 || st.st_size <= 0) {
        fprintf(stderr, "gr_read: gr_fstat: %s\n", strerror(errno));
        return 1;
    }
    while (off < st.st_size) {
        ssize_t n = gr_pread(f, a, STEP, off), m = pread(fd, b, STEP, off);

        if (n < 0) {
            fprintf(stderr, "gr_read: gr_pread at %lld: %s\n", (long long)off, strerror(errno));
            return 1;
        }
        if (n != m || n == 0 || memcmp(a, b, (size_t)n)) {
            fprintf(stderr, "gr_read: bytes differ at %lld (%zd vs %zd)\n", (long long)off, n, m);
            return 1;
        }
        off += n;
    }
    gr_close(f);
    gr_disconnect(c);
    close(fd);
    printf("gr_read: %s: %lld bytes match\n", argv[1], (long long)off);
    return 0;
}
