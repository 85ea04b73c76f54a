/*
 * rdma_pair.c - the RDMA transport (daemon/peer/rdma.c) over real verbs:
 * a server process and a client process, run by tests/test_rdma_vm.sh
 * inside a VM over soft-RoCE (rxe0).
 *
 *   rdma_pair server ADDR PORT TOKEN DIR
 *   rdma_pair client ADDR PORT TOKEN DIR
 *
 * The server exposes two 4 MiB "segments" as the DRAM arena makes them
 * (memfds mapped shared, then sealed against writes, shrinking and
 * growing) filled with pseudo-random bytes of known seeds; the client
 * regenerates the bytes and checks random-range READs byte for byte.  The
 * two processes step through the phases below by files in DIR (the
 * control channel's stand-in: it only carries addresses, rkeys and seeds):
 *   phase1    server: both segments exposed (gen 1)
 *             client: a wrong token is refused; random reads; a wrong rkey
 *             and a range past the end complete in error (-EIO), not bytes
 *   renew     client asks; server gives segment 1 a fresh memfd at the
 *             same address with new bytes (an owner change), not yet
 *             re-exposed -> "renewed"
 *             client: the old rkey still reads the OLD bytes (the region
 *             pins the old pages: why expose must re-register on a new
 *             gen) -> "stale_checked"
 *   phase2    server: segment 1 exposed with gen 2 (a new rkey)
 *             client: the old rkey now fails; the new one reads the new
 *             bytes; segment 0 is unchanged
 *   done      server frees itself with the client connected -> "srv_gone"
 *             client: its next read fails (-ENOTCONN or -EIO), no bytes
 * Each check prints "@@RESULT rdma_pair_NAME PASS|FAIL"; exit 0 if all
 * passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "rdma.h"

#define SEG_LEN (4u << 20)
#define MAX_READ (1u << 20)
#define WAIT_S 120

static const char *dir;
static int fails;

static void result(const char *name, int ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void result(const char *name, int ok, const char *fmt, ...)
{
    char msg[256] = "";
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    printf("@@RESULT rdma_pair_%s %s %s\n", name, ok ? "PASS" : "FAIL", msg);
    fflush(stdout);
    fails += !ok;
}

static void fill(uint8_t *b, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[i] = (uint8_t)(x >> 24);
    }
}

static void path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* Write DIR/name atomically. */
static void post(const char *name, const char *text)
{
    char p[512], t[520];
    FILE *f;

    path(p, sizeof(p), name);
    snprintf(t, sizeof(t), "%s.tmp", p);
    f = fopen(t, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(t, p) != 0) {
        perror(p);
        exit(2);
    }
}

/* Wait for DIR/name and return its contents (static buffer). */
static const char *await(const char *name)
{
    static char buf[1024];
    char p[512];
    uint64_t end = gr__now_ms() + WAIT_S * 1000ull;

    path(p, sizeof(p), name);
    for (;;) {
        FILE *f = fopen(p, "r");

        if (f) {
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            buf[n] = 0;
            fclose(f);
            return buf;
        }
        if (gr__now_ms() > end) {
            fprintf(stderr, "rdma_pair: no %s after %d s\n", p, WAIT_S);
            exit(2);
        }
        usleep(20000);
    }
}

static int parse_tok(const char *s, uint8_t tok[RDMA_TOKEN_LEN])
{
    memset(tok, 0, RDMA_TOKEN_LEN);
    snprintf((char *)tok, RDMA_TOKEN_LEN, "%s", s);
    return 0;
}

/* ---- server ---- */

static uint8_t token[RDMA_TOKEN_LEN];

static int check(void *arg, const uint8_t tok[RDMA_TOKEN_LEN])
{
    return memcmp(tok, token, RDMA_TOKEN_LEN) == 0;
}

/* A sealed memfd segment of seed's bytes at addr (NULL: anywhere). */
static uint8_t *segment(void *addr, uint64_t seed)
{
    int fd = memfd_create("rdma_pair", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    uint8_t *p;

    if (fd < 0 || ftruncate(fd, SEG_LEN) != 0) {
        perror("memfd");
        exit(2);
    }
    p = mmap(addr, SEG_LEN, PROT_READ | PROT_WRITE, MAP_SHARED | (addr ? MAP_FIXED : 0), fd, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    fill(p, SEG_LEN, seed);
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE) != 0)
        perror("F_ADD_SEALS (continuing)");
    close(fd);                  /* the mapping keeps the memory */
    return p;
}

static int server(const char *addr, uint16_t port)
{
    char err[256] = "", text[512];
    rdma_srv *s = NULL;
    uint8_t *seg[2];
    uint32_t rkey[2], again, rkey2;
    rdma_srv_stats st;
    int rc;

    seg[0] = segment(NULL, 1);
    seg[1] = segment(NULL, 2);
    rc = rdma_srv_new(&rdma_ops_real, addr, port, check, NULL, &s, err, sizeof(err));
    result("srv_new", rc == 0, "rc %d %s", rc, err);
    if (rc)
        return 1;
    for (int i = 0; i < 2; i++) {
        rc = rdma_srv_expose(s, seg[i], SEG_LEN, 1, &rkey[i]);
        result("expose", rc == 0, "segment %d rc %d rkey 0x%x", i, rc, rkey[i]);
    }
    rc = rdma_srv_expose(s, seg[0], SEG_LEN, 1, &again);
    result("expose_cached", rc == 0 && again == rkey[0], "the same gen: rkey 0x%x, was 0x%x",
           again, rkey[0]);
    snprintf(text, sizeof(text), "%" PRIxPTR " %x %d\n%" PRIxPTR " %x %d\n",
             (uintptr_t)seg[0], rkey[0], 1, (uintptr_t)seg[1], rkey[1], 2);
    post("phase1", text);

    await("renew");
    if (segment(seg[1], 3) != seg[1]) {
        result("renew_same_address", 0, "MAP_FIXED moved");
        return 1;
    }
    post("renewed", "3\n");
    await("stale_checked");
    rc = rdma_srv_expose(s, seg[1], SEG_LEN, 2, &rkey2);
    result("reexpose_new_gen", rc == 0 && rkey2 != rkey[1], "rc %d rkey 0x%x (gen 1: 0x%x)", rc,
           rkey2, rkey[1]);
    rdma_srv_get_stats(s, &st);
    result("srv_stats", st.regions == 2 && st.registrations == 3 && st.refused >= 1 &&
           st.accepted >= 1, "regions %" PRIu64 " registrations %" PRIu64 " accepted %" PRIu64
           " refused %" PRIu64, st.regions, st.registrations, st.accepted, st.refused);
    snprintf(text, sizeof(text), "%" PRIxPTR " %x %d\n%" PRIxPTR " %x %d\n",
             (uintptr_t)seg[0], rkey[0], 1, (uintptr_t)seg[1], rkey2, 3);
    post("phase2", text);

    await("done");
    rdma_srv_free(&s);
    post("srv_gone", "\n");
    munmap(seg[0], SEG_LEN);
    munmap(seg[1], SEG_LEN);
    printf("rdma_pair server: %s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}

/* ---- client ---- */

typedef struct rseg {
    uint64_t base;
    uint32_t rkey;
    int seed;
    uint8_t *want;              /* the bytes it should hold */
} rseg;

static void parse_segs(const char *text, rseg s[2])
{
    for (int i = 0; i < 2; i++) {
        int n = 0;

        if (sscanf(text, "%" SCNx64 " %" SCNx32 " %d\n%n", &s[i].base, &s[i].rkey, &s[i].seed,
                   &n) != 3) {
            fprintf(stderr, "rdma_pair: bad segment line: %s\n", text);
            exit(2);
        }
        text += n;
        if (!s[i].want)
            s[i].want = malloc(SEG_LEN);
        fill(s[i].want, SEG_LEN, (uint64_t)s[i].seed);
    }
}

static rdma_cli *connect_ok(const char *addr, uint16_t port, const char *what)
{
    char err[256] = "";
    rdma_cli *c = NULL;
    int rc = rdma_cli_connect(&rdma_ops_real, addr, port, token, MAX_READ, 10000, &c, err,
                              sizeof(err));

    result(what, rc == 0, "rc %d %s", rc, err);
    if (rc)
        exit(1);
    return c;
}

/* n random reads over both segments, byte-exact.  Returns the failures. */
static int random_reads(rdma_cli *c, rseg s[2], int n, uint8_t *out, double *mbps)
{
    uint64_t bytes = 0, t0 = gr__now_ns();
    int bad = 0;

    for (int i = 0; i < n; i++) {
        int k = (int)(random() & 1);
        size_t len = 1 + (size_t)random() % MAX_READ;
        size_t off = (size_t)random() % (SEG_LEN - len + 1);
        int rc;

        memset(out, 0xa5, len);
        rc = rdma_cli_read(c, s[k].base + off, s[k].rkey, len, out, 10000);
        if (rc != 0 || memcmp(out, s[k].want + off, len) != 0) {
            if (bad++ < 5)
                fprintf(stderr, "read %d: segment %d off %zu len %zu: rc %d%s\n", i, k, off, len,
                        rc, rc ? "" : ", bytes differ");
        }
        bytes += len;
    }
    *mbps = (double)bytes / ((double)(gr__now_ns() - t0) / 1e9) / 1e6;
    return bad;
}

static int client(const char *addr, uint16_t port)
{
    char err[256] = "";
    uint8_t badtok[RDMA_TOKEN_LEN], *out = malloc(MAX_READ);
    rseg s[2] = { { 0 } };
    rdma_cli *c = NULL;
    double mbps;
    int rc, bad;

    parse_segs(await("phase1"), s);
    srandom(4242);

    memcpy(badtok, token, sizeof(badtok));
    badtok[0] ^= 0x55;
    uint64_t t0 = gr__now_ms();
    rc = rdma_cli_connect(&rdma_ops_real, addr, port, badtok, MAX_READ, 10000, &c, err,
                          sizeof(err));
    result("wrong_token_refused", rc == -ECONNREFUSED && !c, "rc %d after %" PRIu64 " ms: %s", rc,
           gr__now_ms() - t0, err);
    rdma_cli_free(&c);

    t0 = gr__now_ms();
    c = connect_ok(addr, port, "connect");
    printf("connected in %" PRIu64 " ms\n", gr__now_ms() - t0);
    bad = random_reads(c, s, 200, out, &mbps);
    result("random_reads", bad == 0, "200 reads of 1 B..1 MiB, %d wrong; %.1f MB/s", bad, mbps);

    memset(out, 0xa5, 4096);
    rc = rdma_cli_read(c, s[0].base, s[0].rkey ^ 0x5a00, 4096, out, 10000);
    result("wrong_rkey_eio", rc == -EIO && out[0] == 0xa5 && out[4095] == 0xa5, "rc %d", rc);
    rc = rdma_cli_read(c, s[0].base, s[0].rkey, 4096, out, 10000);
    result("dead_after_error", rc == -ENOTCONN, "rc %d", rc);
    rdma_cli_free(&c);

    c = connect_ok(addr, port, "reconnect");
    rc = rdma_cli_read(c, s[0].base + SEG_LEN - 100, s[0].rkey, 200, out, 10000);
    result("past_end_eio", rc == -EIO, "rc %d", rc);
    rdma_cli_free(&c);

    /* The owner change: a fresh memfd at the same address. */
    c = connect_ok(addr, port, "reconnect2");
    post("renew", "\n");
    await("renewed");
    rc = rdma_cli_read(c, s[1].base, s[1].rkey, MAX_READ, out, 10000);
    result("old_region_pins_old_pages", rc == 0 && memcmp(out, s[1].want, MAX_READ) == 0,
           "rc %d: the gen-1 rkey %s", rc,
           rc ? "failed" : memcmp(out, s[1].want, MAX_READ) == 0 ? "still reads the old bytes"
                                                                 : "reads other bytes");
    post("stale_checked", "\n");
    rseg old1 = s[1];
    s[1].want = NULL;
    parse_segs(await("phase2"), s);
    rc = rdma_cli_read(c, old1.base, old1.rkey, 4096, out, 10000);
    result("old_gen_rkey_fails", rc == -EIO, "rc %d", rc);
    free(old1.want);
    rdma_cli_free(&c);
    c = connect_ok(addr, port, "reconnect3");
    bad = random_reads(c, s, 100, out, &mbps);
    result("reads_after_reexpose", bad == 0, "100 reads, segment 1 holding its new bytes: %d wrong",
           bad);

    /* The server goes away under a connected client. */
    post("done", "\n");
    await("srv_gone");
    t0 = gr__now_ms();
    memset(out, 0xa5, 4096);
    rc = rdma_cli_read(c, s[0].base, s[0].rkey, 4096, out, 10000);
    result("server_gone", (rc == -ENOTCONN || rc == -EIO || rc == -ETIMEDOUT) && out[0] == 0xa5,
           "rc %d after %" PRIu64 " ms", rc, gr__now_ms() - t0);
    rdma_cli_free(&c);
    free(s[0].want);
    free(s[1].want);
    free(out);
    printf("rdma_pair client: %s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc != 6 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
        fprintf(stderr, "usage: rdma_pair server|client ADDR PORT TOKEN DIR\n");
        return 2;
    }
    parse_tok(argv[4], token);
    dir = argv[5];
    if (!strcmp(argv[1], "server"))
        return server(argv[2], (uint16_t)atoi(argv[3]));
    return client(argv[2], (uint16_t)atoi(argv[3]));
}
