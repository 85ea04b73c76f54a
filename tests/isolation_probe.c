/*
 * isolation_probe.c - run as an unprivileged user by tests/test_isolation.sh:
 * tries every way to the bytes of a file it may not read, through a real
 * granaryd that another user has cached that file in.
 *
 *   isolation_probe SOCKET SECRET_PATH PUBLIC_PATH NEEDLE
 *   isolation_probe hint-scan SOCKET SECRET_PATH NEEDLE PUBLIC_PATH...
 *   isolation_probe read-plain SOCKET PATH
 *   isolation_probe open-status SOCKET PATH
 *   isolation_probe hint-bomb SOCKET PATH NCONN HOLD_MS
 *   isolation_probe stale-name SOCKET PATH DELAY_MS
 *
 * SECRET_PATH is another user's 0600 file whose bytes contain NEEDLE;
 * PUBLIC_PATH a file this user may read.  Each check prints "ok   what" or
 * "FAIL what"; the exit status is the number of failures (0: isolated).
 * Checks: gr_open of the secret fails (EACCES); raw OPENs of it with no
 * proof, with an fd of another file and with an O_PATH fd are refused; the
 * public file reads right; every shared-memory segment this process was
 * given (its mappings of the daemon's arena) holds no NEEDLE; none can be
 * made writable, reopened writable, or written through its fd.
 *
 * The other modes (issue 21's attacks): hint-scan hints SECRET_PATH (no
 * OPEN), reads the PUBLIC_PATHs in turn before and after, so that it maps
 * every segment it owns, and checks none of them ever holds NEEDLE; read-plain reads
 * PATH whole with plain READs (inline bytes: no segment fd is ever handed
 * out); open-status prints the status of a raw OPEN of PATH without a
 * proof; hint-bomb opens NCONN connections that each hint all of PATH (a
 * large sparse file), prints how many HINTs were accepted and refused
 * (E2BIG), and holds the connections HOLD_MS; stale-name opens PATH, waits
 * DELAY_MS and sends a raw OPEN of PATH with that descriptor as the proof
 * (tests/test_dfs.sh renames PATH away on another mount meanwhile).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "granary.h"
#include "fdpass.h"
#include "proto.h"

static int failures;

static void check(const char *what, int ok)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok)
        failures++;
}

/* A raw connection, HELLO done: the fd, or -1. */
static int raw_connect(const char *sock)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    uint8_t buf[PROTO_HDR_LEN + PROTO_HELLO_LEN];
    proto_hello h = { .version = PROTO_VERSION, .max_msg = PROTO_MAX_MSG };
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ssize_t n;

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    n = proto_enc_hello(buf, sizeof(buf), 0, 1, &h);
    if (send(fd, buf, (size_t)n, 0) != n || recv(fd, buf, sizeof(buf), 0) <= 0)
        return -1;
    return fd;
}

/* Send OPEN path with fd proof (-1: none) and return the reply's status
 * (0 for a handle). */
static int raw_open(int s, const char *path, int proof)
{
    static uint8_t buf[PROTO_MAX_MSG];
    struct iovec iov = { buf, 0 };
    proto_msg m;
    size_t used;
    ssize_t n = proto_enc_open(buf, sizeof(buf), 2, path, strlen(path));

    iov.iov_len = (size_t)n;
    if (gr__send_fds(s, &iov, 1, &proof, proof >= 0, 0) != n)
        return -EIO;
    n = recv(s, buf, sizeof(buf), 0);
    if (n <= 0 || proto_decode(buf, (size_t)n, &m, &used) != 0)
        return -EIO;
    return m.h.status;
}

/* READX the first bytes of handle 1 on s; fds passed with the reply land
 * in fds (up to 8).  Returns how many. */
static int raw_readx_fds(int s, uint32_t handle, int *fds)
{
    static uint8_t buf[PROTO_MAX_MSG];
    proto_read r = { handle, 1 << 20, 0 };
    ssize_t n = proto_enc_readx(buf, sizeof(buf), 3, &r);
    int nf = 0;

    if (send(s, buf, (size_t)n, 0) != n ||
        gr__recv_fds(s, buf, sizeof(buf), fds, 8, &nf, 0, NULL) <= 0)
        return 0;
    return nf;
}

/* Scan every mapping of the daemon's arena in this process for needle. */
static int scan_mappings(const char *needle, int *nmaps)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    size_t nl = strlen(needle);
    int found = 0;

    *nmaps = 0;
    while (f && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (!strstr(line, "granary-arena") || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
            continue;
        (*nmaps)++;
        if (memmem((void *)lo, hi - lo, needle, nl))
            found = 1;
    }
    if (f)
        fclose(f);
    return found;
}

/* One HINT of all of path on s; its status. */
static int raw_hint(int s, const char *path, uint32_t id)
{
    static uint8_t buf[PROTO_MAX_MSG];
    proto_hint_ent e = { 0, 0, path, (uint32_t)strlen(path) };
    proto_msg m;
    size_t used;
    ssize_t n = proto_enc_hint(buf, sizeof(buf), id, 0, &e, 1);

    if (n < 0 || send(s, buf, (size_t)n, 0) != n)
        return -EIO;
    n = recv(s, buf, sizeof(buf), 0);
    if (n <= 0 || proto_decode(buf, (size_t)n, &m, &used) != 0)
        return -EIO;
    return m.h.status;
}

/* The pending chunks of s's hint list (a HINT of no ranges asks), or 0. */
static uint64_t raw_hint_pending(int s)
{
    static uint8_t buf[PROTO_MAX_MSG];
    proto_msg m;
    proto_rec r;
    size_t used, off = 0;
    ssize_t n = proto_enc_hint(buf, sizeof(buf), 99, 0, NULL, 0);

    if (n < 0 || send(s, buf, (size_t)n, 0) != n)
        return 0;
    n = recv(s, buf, sizeof(buf), 0);
    if (n <= 0 || proto_decode(buf, (size_t)n, &m, &used) != 0 || m.h.status < 0)
        return 0;
    while (proto_rec_next(m.u.recs.p, m.u.recs.len, &off, &r) == 1)
        if (proto_rec_is(&r, "pending"))
            return r.u64;
    return 0;
}

/* Read all of path through libgranary (mapping this uid's segments). */
static void read_all(gr_client *c, const char *path)
{
    static char buf[1 << 20];
    gr_file *f = gr_open(c, path);

    for (off_t off = 0; f; off += (off_t)sizeof(buf))
        if (gr_pread(f, buf, sizeof(buf), off) <= 0)
            break;
    gr_close(f);
}

static int mode_hint_scan(int argc, char **argv)
{
    gr_client *c;
    gr_hint h;
    int nmaps, found = 0;

    if (argc < 6)
        return 100;
    c = gr_connect(argv[2]);
    if (!c)
        return 100;
    read_all(c, argv[5]);
    h.path = argv[3];
    h.off = 0;
    h.len = 0;
    check("the hint call returns", gr_hint_append(c, &h, 1) == 0);
    /* The daemon fetches hints in the background: look several times, each
     * after reading another of the public files (new chunks of this user's,
     * so that every segment it owns gets mapped here). */
    for (int i = 0; i < 20 && !found; i++) {
        usleep(100000);
        read_all(c, argv[5 + i % (argc - 5)]);
        found = scan_mappings(argv[4], &nmaps);
    }
    check("no mapping ever holds the hinted secret's bytes", !found);
    printf("     (%d arena mappings scanned)\n", nmaps);
    {
        gr_hint_state st;
        check("hint status", gr_hint_status(c, &st) == 0);
        printf("     (hint list: %llu ranges, %llu errors: %s)\n", (unsigned long long)st.ranges,
               (unsigned long long)st.errors, st.last_error);
        if (getenv("PROBE_EXPECT_HINT_ERROR"))
            check("the refused hint is reported to the client", st.errors >= 1);
    }
    gr_disconnect(c);
    return failures;
}

static int mode_read_plain(int argc, char **argv)
{
    static uint8_t buf[PROTO_MAX_MSG];
    int s, fd, rc;
    uint64_t off = 0;

    if (argc != 4)
        return 100;
    s = raw_connect(argv[2]);
    fd = open(argv[3], O_RDONLY | O_CLOEXEC);
    rc = s >= 0 && fd >= 0 ? raw_open(s, argv[3], fd) : -EIO;
    check("raw OPEN with a proof", rc == 0);
    for (;;) {
        proto_read r = { 1, PROTO_MAX_DATA, off };
        proto_msg m;
        size_t used;
        ssize_t n = proto_enc_read(buf, sizeof(buf), 4, &r);
        int nf = 0, fds[4];
        if (send(s, buf, (size_t)n, 0) != n)
            break;
        n = gr__recv_fds(s, buf, sizeof(buf), fds, 4, &nf, 0, NULL);
        gr__close_fds(fds, nf);
        if (nf) {
            check("plain READ never hands out an fd", 0);
            break;
        }
        if (n <= 0 || proto_decode(buf, (size_t)n, &m, &used) != 0 || m.h.status < 0 ||
            m.u.data.len == 0)
            break;
        off += m.u.data.len;
    }
    printf("     (%llu bytes read inline)\n", (unsigned long long)off);
    check("read the file whole", off > 0);
    return failures;
}

static int mode_open_status(int argc, char **argv)
{
    int s;

    if (argc != 4)
        return 100;
    s = raw_connect(argv[2]);
    if (s < 0)
        return 100;
    printf("%d\n", raw_open(s, argv[3], -1));
    return 0;
}

/* Open PATH, wait DELAY_MS (someone renames things meanwhile), then a raw
 * OPEN of PATH with that old descriptor as the proof: prints its status. */
static int mode_stale_name(int argc, char **argv)
{
    int s, fd;

    if (argc != 5)
        return 100;
    s = raw_connect(argv[2]);
    fd = open(argv[3], O_RDONLY | O_CLOEXEC);
    if (s < 0 || fd < 0)
        return 100;
    usleep((useconds_t)atoi(argv[4]) * 1000);
    printf("%d\n", raw_open(s, argv[3], fd));
    return 0;
}

static int mode_hint_bomb(int argc, char **argv)
{
    int n, ok = 0, big = 0, other = 0, *socks;

    if (argc != 6)
        return 100;
    n = atoi(argv[4]);
    socks = calloc((size_t)n, sizeof(*socks));
    for (int i = 0; i < n; i++) {
        int rc;
        socks[i] = raw_connect(argv[2]);
        if (socks[i] < 0)
            continue;
        /* Twice on each: the second must be refused once the list is full. */
        for (int k = 0; k < 2; k++) {
            rc = raw_hint(socks[i], argv[3], 10 + (uint32_t)k);
            if (rc == 0)
                ok++;
            else if (rc == -E2BIG)
                big++;
            else
                other++;
            /* The first one: wait until the daemon has resolved it (the
             * file's size is known only then), so that what follows meets
             * a full budget, deterministically. */
            if (i == 0 && k == 0 && rc == 0)
                for (int t = 0; t < 200 && raw_hint_pending(socks[i]) <= 1; t++)
                    usleep(10000);
        }
    }
    printf("accepted %d refused_e2big %d other %d\n", ok, big, other);
    fflush(stdout);
    usleep((useconds_t)atoi(argv[5]) * 1000);
    for (int i = 0; i < n; i++)
        if (socks[i] >= 0)
            close(socks[i]);
    free(socks);
    return 0;
}

int main(int argc, char **argv)
{
    const char *sock, *secret, *public, *needle;
    gr_client *c;
    gr_file *f;
    char *buf;
    int s, fd, rc, nmaps, fds[8], nf;

    if (argc > 1 && !strcmp(argv[1], "hint-scan"))
        return mode_hint_scan(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "read-plain"))
        return mode_read_plain(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "open-status"))
        return mode_open_status(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "hint-bomb"))
        return mode_hint_bomb(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "stale-name"))
        return mode_stale_name(argc, argv);
    if (argc != 5) {
        fprintf(stderr, "usage: isolation_probe SOCKET SECRET PUBLIC NEEDLE (or a mode, see the file)\n");
        return 100;
    }
    sock = argv[1];
    secret = argv[2];
    public = argv[3];
    needle = argv[4];
    buf = malloc(8 << 20);
    c = gr_connect(sock);
    if (!c || !buf) {
        fprintf(stderr, "isolation_probe: cannot connect to %s: %s\n", sock, strerror(errno));
        return 100;
    }

    errno = 0;
    f = gr_open(c, secret);
    check("gr_open of another user's 0600 file fails", f == NULL && errno == EACCES);
    gr_close(f);

    s = raw_connect(sock);
    check("raw connection", s >= 0);
    rc = raw_open(s, secret, -1);
    check("raw OPEN without a proof refused (ENOKEY: proof required)", rc == -ENOKEY);
    fd = open(public, O_RDONLY | O_CLOEXEC);
    rc = raw_open(s, secret, fd);
    check("raw OPEN with an fd of another file refused", rc == -EACCES);
    close(fd);
    fd = open(secret, O_PATH | O_CLOEXEC);
    rc = fd >= 0 ? raw_open(s, secret, fd) : -EACCES;
    check("raw OPEN with an O_PATH fd refused", rc == -EACCES);
    if (fd >= 0)
        close(fd);

    /* The public file, through the library (mapping segments) and raw. */
    f = gr_open(c, public);
    check("gr_open of a readable file", f != NULL);
    if (f) {
        struct stat st;
        int pfd = open(public, O_RDONLY | O_CLOEXEC);
        char *want = malloc(8 << 20);
        ssize_t n = gr_pread(f, buf, 8 << 20, 0), m = pread(pfd, want, 8 << 20, 0);
        const void *p;
        gr_ref *ref;
        check("readable file: bytes right", n > 0 && n == m && memcmp(buf, want, (size_t)n) == 0);
        check("gr_read_ref works", gr_read_ref(f, 0, 4096, &p, &ref) > 0 &&
                                       memcmp(p, want, 4096) == 0);
        gr_ref_release(ref);
        fstat(pfd, &st);
        close(pfd);
        free(want);
        gr_close(f);
    }
    check("no mapping holds the secret's bytes", !scan_mappings(needle, &nmaps));
    printf("     (%d arena mappings scanned)\n", nmaps);

    /* Raw: receive segment fds and try to write through them. */
    fd = open(public, O_RDONLY | O_CLOEXEC);
    nf = 0;
    if (raw_open(s, public, fd) == 0)
        nf = raw_readx_fds(s, 1, fds);
    close(fd);
    printf("     (%d segment fds received raw)\n", nf);
    for (int i = 0; i < nf; i++) {
        char proc[64];
        struct stat st;
        void *p;
        int w;

        fstat(fds[i], &st);
        p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
        check("segment cannot be mapped writable", p == MAP_FAILED);
        p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fds[i], 0);
        check("segment maps read-only", p != MAP_FAILED);
        if (p != MAP_FAILED) {
            check("read-only mapping cannot be made writable",
                  mprotect(p, (size_t)st.st_size, PROT_READ | PROT_WRITE) < 0);
            check("segment holds no secret", !memmem(p, (size_t)st.st_size, needle, strlen(needle)));
            munmap(p, (size_t)st.st_size);
        }
        check("segment cannot be written", pwrite(fds[i], "x", 1, 0) < 0);
        check("segment cannot be resized", ftruncate(fds[i], 0) < 0);
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fds[i]);
        w = open(proc, O_RDWR | O_CLOEXEC);
        check("segment reopened read-write cannot be written",
              w < 0 || pwrite(w, "x", 1, 0) < 0);
        if (w >= 0)
            close(w);
        close(fds[i]);
    }
    check("no mapping holds the secret's bytes (after raw reads)", !scan_mappings(needle, &nmaps));
    if (s >= 0)
        close(s);
    gr_disconnect(c);
    free(buf);
    return failures;
}
