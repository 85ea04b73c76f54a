/*
 * check_peer.c - the peer cache (daemon/peer/): membership and rendezvous
 * hashing (ranges, self, refusals; a member joining or leaving moves only
 * the chunks whose home it is or becomes), the frames (round trips, every
 * truncation and hostile length refused), the MACs, and two real daemons
 * sharing their caches: one copy read from the source, byte-exact reads,
 * a rewritten file never served stale, a killed peer costing no failed read.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "granary.h"
#include "members.h"
#include "testutil.h"
#include "wire.h"

/* ---- members ---- */

static int collect(void *arg, const char *name)
{
    char *out = arg;
    strcat(out, name);
    strcat(out, " ");
    return 0;
}

START_TEST(test_expand)
{
    char out[4096] = "";

    ck_assert_int_eq(members_expand("gpu[01-03,7]:70", collect, out), 0);
    ck_assert_str_eq(out, "gpu01:70 gpu02:70 gpu03:70 gpu7:70 ");
    out[0] = '\0';
    ck_assert_int_eq(members_expand("node9", collect, out), 0);
    ck_assert_str_eq(out, "node9 ");
    out[0] = '\0';
    ck_assert_int_eq(members_expand("[::1]:70", collect, out), 0);   /* an address, not a range */
    ck_assert_str_eq(out, "[::1]:70 ");
    ck_assert_int_eq(members_expand("gpu[3-1]", collect, out), -EINVAL);
    ck_assert_int_eq(members_expand("gpu[a]", collect, out), -EINVAL);
    ck_assert_int_eq(members_expand("gpu[1-2", collect, out), -EINVAL);
    ck_assert_int_eq(members_expand("gpu[]", collect, out), -EINVAL);
    ck_assert_int_eq(members_expand("gpu[1]x[2]", collect, out), -EINVAL);
    ck_assert_int_eq(members_expand("gpu[0-99999]", collect, out), -E2BIG);
}
END_TEST

START_TEST(test_build)
{
    members ms;
    char err[256];

    ck_assert_int_eq(members_build("127.0.0.2:7070", "127.0.0.1, 127.0.0.2, 127.0.0.3:7071", NULL,
                                   &ms, err, sizeof(err)), 0);
    ck_assert_uint_eq(ms.n, 3);
    ck_assert_int_eq(ms.self, 1);
    ck_assert_str_eq(ms.m[0].name, "127.0.0.1:7070");   /* listen's port by default */
    ck_assert_str_eq(ms.m[2].port, "7071");
    members_free(&ms);
    /* Ranges, in the numeric-address form too. */
    ck_assert_int_eq(members_build("127.0.0.4:70", "127.0.0.[1-4]:70", NULL, &ms, err,
                                   sizeof(err)), 0);
    ck_assert_uint_eq(ms.n, 4);
    ck_assert_int_eq(ms.self, 3);
    members_free(&ms);
    /* Refusals, each with a reason. */
    ck_assert_int_eq(members_build("127.0.0.9:70", "127.0.0.1:70", NULL, &ms, err, sizeof(err)),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not one of the members"));
    ck_assert_int_eq(members_build("127.0.0.1:70", "127.0.0.1:70,127.0.0.1", NULL, &ms, err,
                                   sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "twice"));
    ck_assert_int_eq(members_build("127.0.0.1", "127.0.0.1:70", NULL, &ms, err, sizeof(err)),
                     -EINVAL);
    ck_assert_int_eq(members_build("127.0.0.1:99999", "127.0.0.1:70", NULL, &ms, err, sizeof(err)),
                     -EINVAL);
    ck_assert_int_eq(members_build("127.0.0.1:70", "no-such-host.invalid:70,127.0.0.1:70", NULL,
                                   &ms, err, sizeof(err)), -ENOENT);
    ck_assert_int_eq(members_build("127.0.0.1:70", "127.0.0.1:70", "/nonexistent/hosts", &ms,
                                   err, sizeof(err)), -ENOENT);
}
END_TEST

START_TEST(test_hostfile)
{
    char *dir = tu_mkdtemp(), path[512], err[256];
    members ms;
    FILE *f;

    snprintf(path, sizeof(path), "%s/hosts", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "# the job's nodes\n127.0.0.1\n127.0.0.2:7070   # this one\n\n127.0.0.[3-5]\n");
    fclose(f);
    ck_assert_int_eq(members_build("127.0.0.2:7070", "", path, &ms, err, sizeof(err)), 0);
    ck_assert_uint_eq(ms.n, 5);
    ck_assert_int_eq(ms.self, 1);
    members_free(&ms);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* n members 127.0.0.1..n on port 70, skipping the address skip (0: none). */
static void build_n(members *ms, unsigned n, unsigned skip)
{
    char spec[8192] = "", err[256], listen[32];
    unsigned first = skip == 1 ? 2 : 1;

    for (unsigned i = 1; i <= n; i++) {
        char one[32];
        if (i == skip)
            continue;
        snprintf(one, sizeof(one), "127.0.0.%u:70,", i);
        strcat(spec, one);
    }
    snprintf(listen, sizeof(listen), "127.0.0.%u:70", first);
    ck_assert_int_eq(members_build(listen, spec, NULL, ms, err, sizeof(err)), 0);
}

static const char *home_name(const members *ms, uint64_t key, int which)
{
    int o[2];
    members_owners(ms, key, o);
    return o[which] < 0 ? "" : ms->m[o[which]].name;
}

START_TEST(test_rendezvous)
{
    enum { N = 8, KEYS = 40000 };
    members all, less, more;
    unsigned count[N] = { 0 }, moved = 0, moved_more = 0;

    build_n(&all, N, 0);
    build_n(&less, N, 5);       /* 127.0.0.5 left */
    build_n(&more, N + 1, 0);   /* 127.0.0.9 joined */
    for (uint64_t k = 0; k < KEYS; k++) {
        uint64_t key = peer_chunk_key("/data/f", 7, k / 16, 1 << 20, 12345, k % 16);
        int o[2];

        members_owners(&all, key, o);
        ck_assert_int_ge(o[0], 0);
        ck_assert_int_ge(o[1], 0);
        ck_assert_int_ne(o[0], o[1]);
        count[o[0]]++;
        /* Leaving: only the leaver's chunks move, each to its second owner. */
        if (strcmp(home_name(&all, key, 0), home_name(&less, key, 0))) {
            moved++;
            ck_assert_str_eq(home_name(&all, key, 0), "127.0.0.5:70");
            ck_assert_str_eq(home_name(&less, key, 0), home_name(&all, key, 1));
        }
        /* Joining: only chunks that move to the newcomer move. */
        if (strcmp(home_name(&all, key, 0), home_name(&more, key, 0))) {
            moved_more++;
            ck_assert_str_eq(home_name(&more, key, 0), "127.0.0.9:70");
        }
    }
    for (unsigned i = 0; i < N; i++) {
        ck_assert_uint_gt(count[i], KEYS / N * 85 / 100);
        ck_assert_uint_lt(count[i], KEYS / N * 115 / 100);
    }
    ck_assert_uint_eq(moved, count[4]);
    ck_assert_uint_gt(moved_more, KEYS / (N + 1) * 85 / 100);
    ck_assert_uint_lt(moved_more, KEYS / (N + 1) * 115 / 100);
    /* One member: a home and no second owner. */
    {
        members one;
        char err[64];
        int o[2];
        ck_assert_int_eq(members_build("127.0.0.1:70", "127.0.0.1:70", NULL, &one, err,
                                       sizeof(err)), 0);
        members_owners(&one, 42, o);
        ck_assert_int_eq(o[0], 0);
        ck_assert_int_eq(o[1], -1);
        members_free(&one);
    }
    members_free(&all);
    members_free(&less);
    members_free(&more);
}
END_TEST

/* ---- frames ---- */

/* Every proper prefix of a frame's body is refused by dec, and so is the
 * body with a byte more. */
#define CHECK_TRUNCATIONS(buf, n, dec, out) do {                               \
        uint8_t big_[PEER_CTRL_MAX + 1];                                       \
        for (size_t l_ = 0; l_ < (size_t)(n) - PEER_HDR_LEN; l_++)             \
            ck_assert_int_eq(dec((buf) + PEER_HDR_LEN, l_, out), -EPROTO);     \
        memcpy(big_, (buf) + PEER_HDR_LEN, (size_t)(n) - PEER_HDR_LEN);        \
        big_[(size_t)(n) - PEER_HDR_LEN] = 0;                                  \
        ck_assert_int_eq(dec(big_, (size_t)(n) - PEER_HDR_LEN + 1, out), -EPROTO); \
    } while (0)

START_TEST(test_frames)
{
    uint8_t buf[PEER_CTRL_MAX], type;
    uint32_t blen;
    peer_hello h = { .flags = PEER_F_RDMA }, h2;
    peer_challenge c = { .nonce = { 1 }, .mac = { 2 } }, c2;
    peer_welcome w = { .flags = 1, .rdma_port = 7071, .token = { 9 } }, w2;
    peer_get g = { .req = 1, .idx = 2, .ino = 3, .size = 4, .mtime_ns = -5, .ctime_ns = 6,
                   .chunk_size = 65536,
                   .path = "/data/a", .path_len = 7 }, g2;
    uint8_t mac[PEER_MAC_LEN] = { 3 }, mac2[PEER_MAC_LEN];
    int n;

    memset(h.nonce, 7, sizeof(h.nonce));
    strcpy(h.name, "gpu01:7070");
    strcpy(c.name, "gpu02:7070");
    n = peer_enc_hello(buf, sizeof(buf), &h);
    ck_assert_int_gt(n, PEER_HDR_LEN);
    ck_assert_int_eq(peer_frame_peek(buf, PEER_CTRL_MAX, &type, &blen), 0);
    ck_assert_uint_eq(type, PEER_HELLO);
    ck_assert_uint_eq(blen + PEER_HDR_LEN, (unsigned)n);
    ck_assert_int_eq(peer_dec_hello(buf + PEER_HDR_LEN, blen, &h2), 0);
    ck_assert_str_eq(h2.name, h.name);
    ck_assert_uint_eq(h2.flags, PEER_F_RDMA);
    ck_assert_mem_eq(h2.nonce, h.nonce, PEER_NONCE_LEN);
    CHECK_TRUNCATIONS(buf, n, peer_dec_hello, &h2);
    buf[PEER_HDR_LEN] = 'X';        /* the magic */
    ck_assert_int_eq(peer_dec_hello(buf + PEER_HDR_LEN, blen, &h2), -EPROTO);

    n = peer_enc_challenge(buf, sizeof(buf), &c);
    ck_assert_int_eq(peer_dec_challenge(buf + PEER_HDR_LEN, (size_t)n - PEER_HDR_LEN, &c2), 0);
    ck_assert_str_eq(c2.name, "gpu02:7070");
    ck_assert_mem_eq(c2.mac, c.mac, PEER_MAC_LEN);
    CHECK_TRUNCATIONS(buf, n, peer_dec_challenge, &c2);

    n = peer_enc_auth(buf, sizeof(buf), mac);
    ck_assert_int_eq(peer_dec_auth(buf + PEER_HDR_LEN, (size_t)n - PEER_HDR_LEN, mac2), 0);
    ck_assert_mem_eq(mac, mac2, PEER_MAC_LEN);
    CHECK_TRUNCATIONS(buf, n, peer_dec_auth, mac2);

    n = peer_enc_welcome(buf, sizeof(buf), &w);
    ck_assert_int_eq(peer_dec_welcome(buf + PEER_HDR_LEN, (size_t)n - PEER_HDR_LEN, &w2), 0);
    ck_assert_uint_eq(w2.rdma_port, 7071);
    CHECK_TRUNCATIONS(buf, n, peer_dec_welcome, &w2);

    n = peer_enc_get(buf, sizeof(buf), &g);
    ck_assert_int_eq(peer_dec_get(buf + PEER_HDR_LEN, (size_t)n - PEER_HDR_LEN, &g2), 0);
    ck_assert_uint_eq(g2.path_len, 7);
    ck_assert_int_eq(memcmp(g2.path, "/data/a", 7), 0);
    ck_assert_int_eq(g2.mtime_ns, -5);
    ck_assert_int_eq(g2.ctime_ns, 6);
    ck_assert_uint_eq(g2.chunk_size, 65536);
    CHECK_TRUNCATIONS(buf, n, peer_dec_get, &g2);
    /* A NUL inside the path, and a path length that runs past the frame. */
    buf[n - 3] = '\0';
    ck_assert_int_eq(peer_dec_get(buf + PEER_HDR_LEN, (size_t)n - PEER_HDR_LEN, &g2), -EPROTO);
    g.path_len = 0;
    ck_assert_int_eq(peer_enc_get(buf, sizeof(buf), &g), -EMSGSIZE);
    g.path_len = PEER_PATH_MAX + 1;
    ck_assert_int_eq(peer_enc_get(buf, sizeof(buf), &g), -EMSGSIZE);

    /* Names: empty, over the limit, with a NUL. */
    strcpy(h.name, "");
    n = peer_enc_hello(buf, sizeof(buf), &h);
    ck_assert_int_eq(peer_dec_hello(buf + PEER_HDR_LEN, (size_t)n - PEER_HDR_LEN, &h2), -EPROTO);

    /* Frame lengths: 0, over the bound, the largest allowed. */
    memset(buf, 0, 8);
    ck_assert_int_eq(peer_frame_peek(buf, PEER_CTRL_MAX, &type, &blen), -EPROTO);
    memset(buf, 0xff, 4);
    ck_assert_int_eq(peer_frame_peek(buf, PEER_CTRL_MAX, &type, &blen), -EPROTO);
    buf[0] = (PEER_CTRL_MAX + 1) & 0xff;
    buf[1] = (PEER_CTRL_MAX + 1) >> 8;
    buf[2] = buf[3] = 0;
    ck_assert_int_eq(peer_frame_peek(buf, PEER_CTRL_MAX, &type, &blen), 0);
    ck_assert_uint_eq(blen, PEER_CTRL_MAX);
    buf[0]++;
    ck_assert_int_eq(peer_frame_peek(buf, PEER_CTRL_MAX, &type, &blen), -EPROTO);
}
END_TEST

START_TEST(test_data_frames)
{
    uint8_t buf[PEER_DATA_FIXED];
    peer_data d = { .req = 9, .status = 0, .len = 1000, .hash = 77 }, d2;
    uint8_t type;
    uint32_t blen;
    const uint32_t fixed = PEER_DATA_FIXED - PEER_HDR_LEN;
    int n = peer_enc_data(buf, sizeof(buf), &d);

    ck_assert_int_eq(n, PEER_DATA_FIXED);
    ck_assert_int_eq(peer_frame_peek(buf, UINT32_MAX - 1, &type, &blen), 0);
    ck_assert_uint_eq(blen, fixed + 1000);      /* the inline bytes are counted */
    ck_assert_int_eq(peer_dec_data(buf + PEER_HDR_LEN, fixed, blen, &d2), 0);
    ck_assert_uint_eq(d2.len, 1000);
    ck_assert_uint_eq(d2.hash, 77);
    /* A body length that does not match len, either way. */
    ck_assert_int_eq(peer_dec_data(buf + PEER_HDR_LEN, fixed, blen - 1, &d2), -EPROTO);
    ck_assert_int_eq(peer_dec_data(buf + PEER_HDR_LEN, fixed, blen + 1, &d2), -EPROTO);
    ck_assert_int_eq(peer_dec_data(buf + PEER_HDR_LEN, fixed - 1, blen, &d2), -EPROTO);
    /* An error carries no bytes; a positive status is malformed. */
    d.status = -ESTALE;
    n = peer_enc_data(buf, sizeof(buf), &d);
    ck_assert_int_eq(peer_frame_peek(buf, UINT32_MAX - 1, &type, &blen), 0);
    ck_assert_uint_eq(blen, fixed);
    ck_assert_int_eq(peer_dec_data(buf + PEER_HDR_LEN, fixed, blen, &d2), 0);
    ck_assert_int_eq(d2.status, -ESTALE);
    d.status = 5;
    n = peer_enc_data(buf, sizeof(buf), &d);
    ck_assert_int_eq(peer_dec_data(buf + PEER_HDR_LEN, fixed, fixed, &d2), -EPROTO);
    /* RDMA: no inline bytes. */
    d.status = 0;
    d.flags = PEER_F_RDMA;
    d.raddr = 0x1000;
    d.rkey = 5;
    n = peer_enc_data(buf, sizeof(buf), &d);
    ck_assert_int_eq(peer_frame_peek(buf, UINT32_MAX - 1, &type, &blen), 0);
    ck_assert_uint_eq(blen, fixed);
    ck_assert_int_eq(peer_dec_data(buf + PEER_HDR_LEN, fixed, blen, &d2), 0);
    ck_assert_uint_eq(d2.raddr, 0x1000);
    (void)n;
}
END_TEST

/* Random bytes into every decoder: refused or decoded, never a crash or a
 * read outside the buffer (ASan runs this too). */
START_TEST(test_garbage)
{
    uint8_t b[600];
    uint32_t seed = 12345;

    for (int it = 0; it < 200000; it++) {
        size_t len = (size_t)(seed % sizeof(b));
        peer_hello h;
        peer_challenge c;
        peer_welcome w;
        peer_get g;
        peer_data d;
        uint8_t mac[PEER_MAC_LEN];
        uint64_t lease;

        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245 + 12345;
            b[i] = (uint8_t)(seed >> 16);
        }
        /* Make some of them plausible: a short name or path length. */
        if (len > 46 && (it & 1)) {
            b[44] = (uint8_t)(seed & 31);
            b[45] = 0;
        }
        uint8_t *cp = malloc(len ? len : 1);    /* exactly len: ASan sees any overread */
        memcpy(cp, b, len);
        (void)peer_dec_hello(cp, len, &h);
        (void)peer_dec_challenge(cp, len, &c);
        (void)peer_dec_auth(cp, len, mac);
        (void)peer_dec_welcome(cp, len, &w);
        if (peer_dec_get(cp, len, &g) == 0)
            ck_assert(g.path >= (const char *)cp && g.path + g.path_len <= (const char *)cp + len);
        (void)peer_dec_data(cp, len, (uint32_t)len + (seed & 0xffff), &d);
        (void)peer_dec_done(cp, len, &lease);
        free(cp);
        seed = seed * 1103515245 + 12345;
    }
}
END_TEST

START_TEST(test_macs)
{
    uint8_t nc[PEER_NONCE_LEN] = { 1 }, ns[PEER_NONCE_LEN] = { 2 };
    uint8_t a[PEER_MAC_LEN], b[PEER_MAC_LEN];
    const uint8_t *k1 = (const uint8_t *)"0123456789abcdef", *k2 = (const uint8_t *)"0123456789abcdeg";

    ck_assert_int_eq(peer_mac(k1, 16, 0, nc, ns, "a:1", "b:1", a), 0);
    ck_assert_int_eq(peer_mac(k1, 16, 0, nc, ns, "a:1", "b:1", b), 0);
    ck_assert(peer_mac_equal(a, b));
    /* Each input matters: key, role, either nonce, either name. */
    ck_assert_int_eq(peer_mac(k2, 16, 0, nc, ns, "a:1", "b:1", b), 0);
    ck_assert(!peer_mac_equal(a, b));
    ck_assert_int_eq(peer_mac(k1, 16, 1, nc, ns, "a:1", "b:1", b), 0);
    ck_assert(!peer_mac_equal(a, b));
    ck_assert_int_eq(peer_mac(k1, 16, 0, ns, nc, "a:1", "b:1", b), 0);
    ck_assert(!peer_mac_equal(a, b));
    ck_assert_int_eq(peer_mac(k1, 16, 0, nc, ns, "b:1", "a:1", b), 0);
    ck_assert(!peer_mac_equal(a, b));
    /* Names are length-prefixed: "a:1"+"1b:1" is not "a:11"+"b:1". */
    ck_assert_int_eq(peer_mac(k1, 16, 0, nc, ns, "a:11", "b:1", a), 0);
    ck_assert_int_eq(peer_mac(k1, 16, 0, nc, ns, "a:1", "1b:1", b), 0);
    ck_assert(!peer_mac_equal(a, b));
}
END_TEST

/* ---- two real daemons ---- */

static int port_base(void)
{
    return 20000 + (int)(getpid() % 20000);
}

static void write_key(const char *path, const char *key, mode_t mode)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n", key);
    fclose(f);
    ck_assert_int_eq(chmod(path, mode), 0);
}

/* Daemon n (1 or 2) of a pair on 127.0.0.n:port, sharing src (a symlink
 * would not do: the roots must be the same path), with the key at key. */
static void pair_init(tu_daemon *d, int n, const char *src, const char *key, int port,
                      int timeout, const char *more)
{
    char extra[2048];

    snprintf(extra, sizeof(extra),
             "[source]\nroots = %s\n[dram]\ncapacity = 32M\n[nvme]\npath =\n"
             "[peer]\nlisten = 127.0.0.%d:%d\nnodes = 127.0.0.1:%d,127.0.0.2:%d\n"
             "key_file = %s\ntimeout = %d\n%s",
             src, n, port, port, port, key, timeout, more ? more : "");
    tu_daemon_init(d, extra);
}

static ssize_t read_all(gr_client *c, const char *path, uint8_t *buf, size_t cap)
{
    gr_file *f = gr_open(c, path);
    ssize_t n;

    if (!f)
        return -1;
    n = gr_pread(f, buf, cap, 0);
    gr_close(f);
    return n;
}

/* Over every member a's PEERS reply lists: the sum of number field name
 * (value NULL), or how many have text field name equal to value. */
static uint64_t peers_field(gr_client *c, const char *name, const char *value)
{
    gr_field *f = NULL;
    size_t n = 0;
    uint64_t sum = 0;

    ck_assert_int_eq(gr_admin(c, GR_ADMIN_PEERS, NULL, 0, &f, &n), 0);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(f[i].name, name) || f[i].is_text != (value != NULL))
            continue;
        sum += value ? (uint64_t)!strcmp(f[i].text, value) : f[i].num;
    }
    free(f);
    return sum;
}

START_TEST(test_two_daemons)
{
    char *dir = tu_mkdtemp(), src[512], key[512], path[600];
    tu_daemon a, b;
    int port = port_base();
    enum { FILES = 12, SIZE = 200000 };     /* 64K chunks: 4 per file */
    uint8_t *buf = malloc(SIZE + 1);
    gr_client *ca, *cb;
    uint64_t from_src;

    snprintf(src, sizeof(src), "%s/src", dir);
    snprintf(key, sizeof(key), "%s/key", dir);
    mkdir(src, 0755);
    write_key(key, "an example shared secret, 32 bytes", 0600);
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/f%02d", src, i);
        tu_write_pattern(path, (uint32_t)i, SIZE);
    }
    pair_init(&a, 1, src, key, port, 1, NULL);
    /* b trusts the attributes it has seen for a minute: it will hold an
     * old version's attributes when a sees a file rewritten. */
    pair_init(&b, 2, src, key, port, 1, "[source]\nattr_ttl = 60\n");
    ck_assert_int_eq(tu_daemon_start(&a), 0);
    ck_assert_int_eq(tu_daemon_start(&b), 0);
    ca = gr_connect(a.sock);
    cb = gr_connect(b.sock);
    ck_assert_ptr_nonnull(ca);
    ck_assert_ptr_nonnull(cb);
    /* Both read everything: the source is read once, the rest comes from
     * the other node, byte-exact. */
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/f%02d", src, i);
        ck_assert_int_eq(read_all(ca, path, buf, SIZE + 1), SIZE);
        ck_assert(tu_check_pattern(buf, (uint32_t)i, 0, SIZE));
    }
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/f%02d", src, i);
        ck_assert_int_eq(read_all(cb, path, buf, SIZE + 1), SIZE);
        ck_assert(tu_check_pattern(buf, (uint32_t)i, 0, SIZE));
    }
    from_src = tu_stat(&a, "source_bytes_read") + tu_stat(&b, "source_bytes_read");
    ck_assert_uint_eq(from_src, (uint64_t)FILES * SIZE);
    ck_assert_uint_gt(tu_stat(&a, "peer_reads"), 0);
    ck_assert_uint_gt(tu_stat(&b, "peer_reads"), 0);
    ck_assert_uint_eq(tu_stat(&a, "peer_bytes_read") + tu_stat(&b, "peer_bytes_read"),
                      (uint64_t)FILES * SIZE);
    ck_assert_uint_eq(tu_stat(&a, "peer_served_bytes"), tu_stat(&b, "peer_bytes_read"));

    /* Files rewritten on the source (same path, new bytes and size): a
     * sees the new version (attr_ttl 0.2 s), b still trusts the old one's
     * attributes, so b refuses to serve its chunks (ESTALE) and a reads
     * them from the source: new bytes, never b's old chunks. */
    ck_assert_uint_eq(tu_stat(&b, "peer_refused"), 0);
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/f%02d", src, i);
        tu_write_pattern(path, (uint32_t)(50 + i), SIZE - 1000);
    }
    tu_sleep_ms(300);                   /* past a's attr_ttl */
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/f%02d", src, i);
        ck_assert_int_eq(read_all(ca, path, buf, SIZE + 1), SIZE - 1000);
        ck_assert(tu_check_pattern(buf, (uint32_t)(50 + i), 0, SIZE - 1000));
    }
    ck_assert_uint_gt(tu_stat(&b, "peer_refused"), 0);

    /* b hung (SIGSTOP: connections open, no answers): a's first ask of
     * it costs [peer] timeout (1 s), then b is skipped for a back-off and
     * a reads the source; every read byte-exact. */
    kill(b.pid, SIGSTOP);
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/h%02d", src, i);
        tu_write_pattern(path, (uint32_t)(200 + i), SIZE);
        ck_assert_int_eq(read_all(ca, path, buf, SIZE + 1), SIZE);
        ck_assert(tu_check_pattern(buf, (uint32_t)(200 + i), 0, SIZE));
    }
    ck_assert_uint_ge(peers_field(ca, "timeouts", NULL), 1);
    kill(b.pid, SIGCONT);

    /* b killed: a's reads of chunks homed on b cost a timeout once, then
     * go to the source; none fails. */
    kill(b.pid, SIGKILL);
    waitpid(b.pid, NULL, 0);
    b.pid = -1;
    gr_disconnect(cb);
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/g%02d", src, i);
        tu_write_pattern(path, (uint32_t)(100 + i), SIZE);
        ck_assert_int_eq(read_all(ca, path, buf, SIZE + 1), SIZE);
        ck_assert(tu_check_pattern(buf, (uint32_t)(100 + i), 0, SIZE));
    }
    ck_assert_uint_eq(peers_field(ca, "state", "down"), 1);
    gr_disconnect(ca);
    ck_assert_int_eq(tu_daemon_stop(&a), 0);        /* a clean exit (sanitizers: no leak) */
    tu_daemon_fini(&a);
    tu_daemon_fini(&b);
    free(buf);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

typedef struct reader {
    gr_client *c;
    const char *src;
    const char *prefix;
    int n, size, ok;
} reader;

static void *read_files(void *arg)
{
    reader *r = arg;
    uint8_t *buf = malloc((size_t)r->size + 1);
    char path[600];

    r->ok = 1;
    for (int i = 0; i < r->n; i++) {
        snprintf(path, sizeof(path), "%s/%s%02d", r->src, r->prefix, i);
        if (read_all(r->c, path, buf, (size_t)r->size + 1) != r->size ||
            !tu_check_pattern(buf, (uint32_t)(r->prefix[0] * 100 + i), 0, (size_t)r->size))
            r->ok = 0;
    }
    free(buf);
    return NULL;
}

/* Two nodes with one I/O thread and one source slot each, both reading at
 * once, each asking the other: the fetches that answer a peer run in a
 * lane of their own, so neither waits for the other's timeout (without
 * it, each node's one thread waits on the other's, which waits on it). */
START_TEST(test_no_deadlock)
{
    char *dir = tu_mkdtemp(), src[512], key[512], path[600];
    tu_daemon a, b;
    int port = port_base() + 3;
    enum { FILES = 16, SIZE = 200000 };
    const char *one = "[daemon]\nio_threads = 1\n[source]\nmax_inflight = 1\n";
    reader ra, rb;
    pthread_t ta, tb;

    snprintf(src, sizeof(src), "%s/src", dir);
    snprintf(key, sizeof(key), "%s/key", dir);
    mkdir(src, 0755);
    write_key(key, "an example shared secret, 32 bytes", 0600);
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/a%02d", src, i);
        tu_write_pattern(path, (uint32_t)('a' * 100 + i), SIZE);
        snprintf(path, sizeof(path), "%s/b%02d", src, i);
        tu_write_pattern(path, (uint32_t)('b' * 100 + i), SIZE);
    }
    pair_init(&a, 1, src, key, port, 3, one);
    pair_init(&b, 2, src, key, port, 3, one);
    ck_assert_int_eq(tu_daemon_start(&a), 0);
    ck_assert_int_eq(tu_daemon_start(&b), 0);
    ra = (reader){ gr_connect(a.sock), src, "a", FILES, SIZE, 0 };
    rb = (reader){ gr_connect(b.sock), src, "b", FILES, SIZE, 0 };
    ck_assert_ptr_nonnull(ra.c);
    ck_assert_ptr_nonnull(rb.c);
    /* Each reads the other's set at once, twice: the second pass asks the
     * other node for what it now holds. */
    for (int pass = 0; pass < 2; pass++) {
        ra.prefix = pass ? "b" : "a";
        rb.prefix = pass ? "a" : "b";
        pthread_create(&ta, NULL, read_files, &ra);
        pthread_create(&tb, NULL, read_files, &rb);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        ck_assert(ra.ok);
        ck_assert(rb.ok);
    }
    ck_assert_uint_eq(peers_field(ra.c, "timeouts", NULL) + peers_field(rb.c, "timeouts", NULL), 0);
    ck_assert_uint_eq(tu_stat(&a, "source_bytes_read") + tu_stat(&b, "source_bytes_read"),
                      (uint64_t)2 * FILES * SIZE);
    gr_disconnect(ra.c);
    gr_disconnect(rb.c);
    tu_daemon_fini(&a);
    tu_daemon_fini(&b);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Rewrite the [peer] nodes line of d's configuration to nodes and SIGHUP. */
static void set_nodes(tu_daemon *d, const char *nodes)
{
    ck_assert_int_eq(tu_conf_reload(d, "nodes", nodes), 0);
}

static unsigned members_of(gr_client *c)
{
    gr_field *f = NULL;
    size_t n = 0;
    unsigned k = 0;

    ck_assert_int_eq(gr_admin(c, GR_ADMIN_PEERS, NULL, 0, &f, &n), 0);
    for (size_t i = 0; i < n; i++)
        k += f[i].is_text && !strcmp(f[i].name, "name");
    free(f);
    return k;
}

/* SIGHUP takes a new membership: a node alone reads everything from the
 * source; once the other is a member it asks it, and a list without this
 * node in it is refused (the old one kept). */
START_TEST(test_reload_members)
{
    char *dir = tu_mkdtemp(), src[512], key[512], path[600], nodes[128];
    tu_daemon a, b;
    int port = port_base() + 4;
    enum { FILES = 8, SIZE = 300000 };
    uint8_t *buf = malloc(SIZE + 1);
    gr_client *ca, *cb;

    snprintf(src, sizeof(src), "%s/src", dir);
    snprintf(key, sizeof(key), "%s/key", dir);
    mkdir(src, 0755);
    write_key(key, "an example shared secret, 32 bytes", 0600);
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/f%02d", src, i);
        tu_write_pattern(path, (uint32_t)i, SIZE);
    }
    pair_init(&a, 1, src, key, port, 1, NULL);
    pair_init(&b, 2, src, key, port, 1, NULL);
    ck_assert_int_eq(tu_daemon_start(&a), 0);
    ck_assert_int_eq(tu_daemon_start(&b), 0);
    ca = gr_connect(a.sock);
    cb = gr_connect(b.sock);
    /* a alone: nothing asked of b. */
    snprintf(nodes, sizeof(nodes), "127.0.0.1:%d", port);
    set_nodes(&a, nodes);
    for (int i = 0; i < 100 && members_of(ca) != 1; i++)
        tu_sleep_ms(20);
    ck_assert_uint_eq(members_of(ca), 1);
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/f%02d", src, i);
        ck_assert_int_eq(read_all(cb, path, buf, SIZE + 1), SIZE);
    }
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/f%02d", src, i);
        ck_assert_int_eq(read_all(ca, path, buf, SIZE + 1), SIZE);
        ck_assert(tu_check_pattern(buf, (uint32_t)i, 0, SIZE));
    }
    ck_assert_uint_eq(tu_stat(&a, "peer_reads"), 0);
    ck_assert_uint_eq(tu_stat(&a, "source_bytes_read"), (uint64_t)FILES * SIZE);
    /* A list without a is refused: a keeps its one member. */
    snprintf(nodes, sizeof(nodes), "127.0.0.2:%d", port);
    set_nodes(&a, nodes);
    tu_sleep_ms(300);
    ck_assert_uint_eq(members_of(ca), 1);
    /* Both again: a asks b for the chunks homed there (b has them all). */
    snprintf(nodes, sizeof(nodes), "127.0.0.1:%d,127.0.0.2:%d", port, port);
    set_nodes(&a, nodes);
    for (int i = 0; i < 100 && members_of(ca) != 2; i++)
        tu_sleep_ms(20);
    ck_assert_uint_eq(members_of(ca), 2);
    {
        /* a's own copies dropped, so that its reads miss again. */
        gr_field arg = { .name = "path", .is_text = 1, .text = src, .len = strlen(src) }, *out = NULL;
        size_t nout = 0;
        ck_assert_int_eq(gr_admin(ca, GR_ADMIN_INVALIDATE, &arg, 1, &out, &nout), 0);
        free(out);
    }
    for (int i = 0; i < FILES; i++) {
        snprintf(path, sizeof(path), "%s/f%02d", src, i);
        ck_assert_int_eq(read_all(ca, path, buf, SIZE + 1), SIZE);
        ck_assert(tu_check_pattern(buf, (uint32_t)i, 0, SIZE));
    }
    ck_assert_uint_gt(tu_stat(&a, "peer_reads"), 0);
    gr_disconnect(ca);
    gr_disconnect(cb);
    ck_assert_int_eq(tu_daemon_stop(&a), 0);
    tu_daemon_fini(&a);
    tu_daemon_fini(&b);
    free(buf);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* A member with another key: neither side takes a byte from the other, and
 * each still serves its own clients. */
START_TEST(test_wrong_key)
{
    char *dir = tu_mkdtemp(), src[512], k1[512], k2[512], path[600];
    tu_daemon a, b;
    int port = port_base() + 1;
    uint8_t *buf = malloc(300001);
    gr_client *ca, *cb;

    snprintf(src, sizeof(src), "%s/src", dir);
    snprintf(k1, sizeof(k1), "%s/key1", dir);
    snprintf(k2, sizeof(k2), "%s/key2", dir);
    mkdir(src, 0755);
    write_key(k1, "the right shared secret for this test", 0600);
    write_key(k2, "a wrong shared secret for this test!!", 0400);
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof(path), "%s/f%d", src, i);
        tu_write_pattern(path, (uint32_t)i, 300000);
    }
    pair_init(&a, 1, src, k1, port, 1, NULL);
    pair_init(&b, 2, src, k2, port, 1, NULL);
    ck_assert_int_eq(tu_daemon_start(&a), 0);
    ck_assert_int_eq(tu_daemon_start(&b), 0);
    ca = gr_connect(a.sock);
    cb = gr_connect(b.sock);
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof(path), "%s/f%d", src, i);
        ck_assert_int_eq(read_all(ca, path, buf, 300001), 300000);
        ck_assert(tu_check_pattern(buf, (uint32_t)i, 0, 300000));
        ck_assert_int_eq(read_all(cb, path, buf, 300001), 300000);
        ck_assert(tu_check_pattern(buf, (uint32_t)i, 0, 300000));
    }
    ck_assert_uint_eq(tu_stat(&a, "peer_reads"), 0);
    ck_assert_uint_eq(tu_stat(&b, "peer_reads"), 0);
    ck_assert_uint_eq(tu_stat(&a, "peer_served"), 0);
    ck_assert_uint_eq(tu_stat(&b, "peer_served"), 0);
    ck_assert_uint_gt(tu_stat(&a, "peer_auth_failures") + tu_stat(&b, "peer_auth_failures"), 0);
    ck_assert_uint_eq(tu_stat(&a, "source_bytes_read"), 8 * 300000);
    ck_assert_uint_eq(tu_stat(&b, "source_bytes_read"), 8 * 300000);
    gr_disconnect(ca);
    gr_disconnect(cb);
    ck_assert_int_eq(tu_daemon_stop(&a), 0);
    ck_assert_int_eq(tu_daemon_stop(&b), 0);
    tu_daemon_fini(&a);
    tu_daemon_fini(&b);
    free(buf);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* granaryd refuses a key anyone else may read, or a short one. */
START_TEST(test_key_file_checked)
{
    char *dir = tu_mkdtemp(), src[512], key[512];
    tu_daemon a;
    char log[4096] = "";
    FILE *f;

    snprintf(src, sizeof(src), "%s/src", dir);
    snprintf(key, sizeof(key), "%s/key", dir);
    mkdir(src, 0755);
    write_key(key, "a long enough secret, but world-readable", 0644);
    pair_init(&a, 1, src, key, port_base() + 2, 1, NULL);
    ck_assert_int_ne(tu_daemon_start(&a), 0);
    f = fopen(a.log, "r");
    ck_assert_ptr_nonnull(f);
    (void)!fread(log, 1, sizeof(log) - 1, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(log, "chmod 600"));
    tu_daemon_fini(&a);
    write_key(key, "too short", 0600);
    pair_init(&a, 1, src, key, port_base() + 2, 1, NULL);
    ck_assert_int_ne(tu_daemon_start(&a), 0);
    tu_daemon_fini(&a);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("peer");
    TCase *tm = tcase_create("members");
    TCase *tw = tcase_create("wire");
    TCase *td = tcase_create("daemons");

    tcase_add_test(tm, test_expand);
    tcase_add_test(tm, test_build);
    tcase_add_test(tm, test_hostfile);
    tcase_add_test(tm, test_rendezvous);
    tcase_add_test(tw, test_frames);
    tcase_add_test(tw, test_data_frames);
    tcase_add_test(tw, test_garbage);
    tcase_add_test(tw, test_macs);
    tcase_set_timeout(tw, 60);
    tcase_add_test(td, test_two_daemons);
    tcase_add_test(td, test_no_deadlock);
    tcase_add_test(td, test_reload_members);
    tcase_add_test(td, test_wrong_key);
    tcase_add_test(td, test_key_file_checked);
    tcase_set_timeout(td, 90);
    suite_add_tcase(s, tm);
    suite_add_tcase(s, tw);
    suite_add_tcase(s, td);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
