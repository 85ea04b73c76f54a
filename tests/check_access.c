/*
 * check_access.c - the daemon's own access judgement (access.h, judge.h)
 * against the kernel's: a matrix of directory and file modes, owners,
 * groups, supplementary groups and POSIX ACLs, each judged by judge_read
 * and by access(2) in a child running as that user.  They must agree on
 * every case.  Needs root (to make the files and switch users): skipped
 * with the reason otherwise, or where the filesystem has no ACLs.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "access.h"
#include "granary.h"
#include "judge.h"
#include "testutil.h"

#define U1 61001
#define U2 61002
#define U3 61003
#define G1 61010
#define G2 61011
#define G3 61012

/* ---- the pure evaluator, by hand ---- */

static access_cred cred_of(uid_t u, gid_t g, int n, const gid_t *groups)
{
    access_cred c = { .uid = u, .gid = g, .ngroups = n };

    for (int i = 0; i < n; i++)
        c.groups[i] = groups[i];
    return c;
}

START_TEST(test_mode_bits)
{
    access_obj o = { .uid = U1, .gid = G1, .mode = S_IFREG | 0640 };
    access_cred owner = cred_of(U1, G3, 0, NULL), member = cred_of(U2, G2, 1, (gid_t[]){ G1 });
    access_cred other = cred_of(U3, G3, 0, NULL), unknown = cred_of(U3, G3, -1, NULL);
    access_cred root = cred_of(0, 0, 0, NULL);

    ck_assert(access_may(&owner, &o, R_OK));
    ck_assert(access_may(&member, &o, R_OK));
    ck_assert(!access_may(&other, &o, R_OK));
    ck_assert(!access_may(&unknown, &o, R_OK));         /* groups unknown: refused */
    ck_assert(access_may(&root, &o, R_OK));
    o.mode = S_IFREG | 0044;                            /* the owner's bits rule the owner */
    ck_assert(!access_may(&owner, &o, R_OK));
    ck_assert(access_may(&other, &o, R_OK));
    o.mode = S_IFDIR | 0701;
    ck_assert(access_may(&other, &o, X_OK));
    ck_assert(!access_may(&member, &o, X_OK));          /* group bits 0, other's not used */
}
END_TEST

/* A version-2 ACL blob of n entries {tag, perm, id}. */
static size_t acl_blob(uint8_t *b, const uint32_t (*e)[3], int n)
{
    b[0] = 2;
    b[1] = b[2] = b[3] = 0;
    for (int i = 0; i < n; i++) {
        uint8_t *p = b + 4 + 8 * i;
        p[0] = (uint8_t)e[i][0];
        p[1] = (uint8_t)(e[i][0] >> 8);
        p[2] = (uint8_t)e[i][1];
        p[3] = 0;
        for (int k = 0; k < 4; k++)
            p[4 + k] = (uint8_t)(e[i][2] >> (8 * k));
    }
    return 4 + 8 * (size_t)n;
}

START_TEST(test_acl_decode)
{
    static const uint32_t good[][3] = {
        { ACCESS_ACL_USER_OBJ, 6, 0 }, { ACCESS_ACL_USER, 4, U2 }, { ACCESS_ACL_GROUP_OBJ, 4, 0 },
        { ACCESS_ACL_MASK, 4, 0 }, { ACCESS_ACL_OTHER, 0, 0 },
    };
    static const uint32_t unsorted[][3] = {
        { ACCESS_ACL_USER, 4, U2 }, { ACCESS_ACL_USER_OBJ, 6, 0 }, { ACCESS_ACL_GROUP_OBJ, 4, 0 },
        { ACCESS_ACL_MASK, 4, 0 }, { ACCESS_ACL_OTHER, 0, 0 },
    };
    static const uint32_t nomask[][3] = {
        { ACCESS_ACL_USER_OBJ, 6, 0 }, { ACCESS_ACL_USER, 4, U2 }, { ACCESS_ACL_GROUP_OBJ, 4, 0 },
        { ACCESS_ACL_OTHER, 0, 0 },
    };
    uint8_t b[512];
    access_obj o = { .uid = U1, .gid = G1, .mode = S_IFREG | 0640 };
    access_cred u2 = cred_of(U2, G2, 0, NULL);

    ck_assert_int_eq(access_acl_decode(&o, b, acl_blob(b, good, 5)), 0);
    ck_assert_int_eq(o.nacl, 5);
    ck_assert(access_may(&u2, &o, R_OK));
    ck_assert_int_eq(access_acl_decode(&o, b, acl_blob(b, unsorted, 5)), -EINVAL);
    ck_assert_int_eq(o.nacl, -1);
    ck_assert(!access_may(&u2, &o, R_OK));              /* unreadable: refused */
    ck_assert_int_eq(access_acl_decode(&o, b, acl_blob(b, nomask, 4)), -EINVAL);
    b[0] = 1;
    ck_assert_int_eq(access_acl_decode(&o, b, 4 + 8 * 5), -EINVAL);
    ck_assert_int_eq(access_acl_decode(&o, b, 7), -EINVAL);
    ck_assert_int_eq(access_acl_decode(&o, NULL, 0), 0);
    ck_assert_int_eq(o.nacl, 0);
}
END_TEST

/* ---- against the kernel ---- */

#define NPATHS 512

typedef struct tree {
    char *dir;
    char paths[NPATHS][512];
    int n;
    int acl_ok;                 /* the filesystem takes POSIX ACLs */
} tree;

static void set_acl(tree *t, const char *path, const uint32_t (*e)[3], int n)
{
    uint8_t b[512];
    size_t len = acl_blob(b, e, n);

    if (setxattr(path, "system.posix_acl_access", b, len, 0) < 0) {
        if (errno == ENOTSUP || errno == EOPNOTSUPP)
            t->acl_ok = 0;
        else
            ck_abort_msg("setxattr %s: %s", path, strerror(errno));
    }
}

/* Directories of several modes, owners and ACLs, each holding files of
 * several modes, owners and ACLs. */
static void build_tree_in(tree *t, char *dir);

static void build_tree(tree *t)
{
    build_tree_in(t, tu_mkdtemp());
}

static void build_tree_in(tree *t, char *dir)
{
    static const mode_t dmodes[] = { 0700, 0710, 0711, 0750, 0755, 0701, 0705 };
    static const mode_t fmodes[] = { 0600, 0640, 0644, 0604, 0440, 0004, 0000, 0460 };
    static const uid_t owners[] = { U1, U2 };
    static const gid_t groups[] = { G1, G2 };
    /* File ACLs: named user u2 r (mask r), named user u2 none, named group
     * g2 r (mask r), named group g2 r masked to none, group-owner none. */
    static const uint32_t acls[][5][3] = {
        { { 1, 6, 0 }, { 2, 4, U2 }, { 4, 0, 0 }, { 16, 4, 0 }, { 32, 0, 0 } },
        { { 1, 6, 0 }, { 2, 0, U2 }, { 4, 4, 0 }, { 16, 4, 0 }, { 32, 4, 0 } },
        { { 1, 6, 0 }, { 4, 0, 0 }, { 8, 4, G2 }, { 16, 4, 0 }, { 32, 0, 0 } },
        { { 1, 6, 0 }, { 4, 4, 0 }, { 8, 4, G2 }, { 16, 0, 0 }, { 32, 0, 0 } },
        { { 1, 6, 0 }, { 2, 4, U3 }, { 4, 0, 0 }, { 16, 4, 0 }, { 32, 4, 0 } },
    };
    /* A directory ACL: named user u2 search only. */
    static const uint32_t dacl[][3] = { { 1, 7, 0 }, { 2, 1, U2 }, { 4, 0, 0 }, { 16, 1, 0 },
                                        { 32, 0, 0 } };
    int di = 0;

    t->dir = dir;
    t->acl_ok = 1;
    chmod(t->dir, 0755);
    for (size_t a = 0; a < sizeof(dmodes) / sizeof(dmodes[0]); a++)
        for (size_t o = 0; o < 2; o++)
            for (int dacl_on = 0; dacl_on < 2; dacl_on++) {
                char d[256];
                snprintf(d, sizeof(d), "%s/d%d", t->dir, di++);
                ck_assert_int_eq(mkdir(d, 0700), 0);
                ck_assert_int_eq(chown(d, owners[o], groups[o]), 0);
                ck_assert_int_eq(chmod(d, dmodes[a]), 0);
                if (dacl_on)
                    set_acl(t, d, dacl, 5);
                for (size_t f = 0; f < sizeof(fmodes) / sizeof(fmodes[0]); f++)
                    for (int ac = -1; ac < 5; ac++) {
                        char *p;
                        int fd;
                        if (t->n == NPATHS)
                            return;
                        if (ac >= 0 && f % 3)
                            continue;       /* ACLs on a third of the modes suffice */
                        p = t->paths[t->n++];
                        snprintf(p, 512, "%s/f%zu_%d", d, f, ac);
                        fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
                        ck_assert_int_ge(fd, 0);
                        ck_assert_int_eq(write(fd, "x", 1), 1);
                        close(fd);
                        ck_assert_int_eq(chown(p, owners[(f + (size_t)ac + 1) % 2],
                                               groups[f % 2]), 0);
                        ck_assert_int_eq(chmod(p, fmodes[f]), 0);
                        if (ac >= 0)
                            set_acl(t, p, acls[ac], 5);
                    }
            }
}

/* The kernel's verdicts for cred: a child takes the identity and asks
 * access(2) for each path. */
static void kernel_verdicts(const tree *t, const access_cred *cred, char *out)
{
    int pfd[2];
    pid_t pid;

    ck_assert_int_eq(pipe(pfd), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char v[NPATHS];
        close(pfd[0]);
        if (setgroups((size_t)(cred->ngroups > 0 ? cred->ngroups : 0), cred->groups) < 0 ||
            setgid(cred->gid) < 0 || setuid(cred->uid) < 0)
            _exit(3);
        for (int i = 0; i < t->n; i++)
            v[i] = access(t->paths[i], R_OK) == 0;
        if (write(pfd[1], v, (size_t)t->n) != t->n)
            _exit(4);
        _exit(0);
    }
    close(pfd[1]);
    ck_assert_int_eq(read(pfd[0], out, (size_t)t->n), t->n);
    close(pfd[0]);
    {
        int st;
        waitpid(pid, &st, 0);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

START_TEST(test_against_the_kernel)
{
    static const gid_t g1[] = { G1 }, g12[] = { G1, G2 };
    access_cred creds[] = {
        cred_of(U1, G1, 0, NULL), cred_of(U2, G2, 0, NULL), cred_of(U2, G1, 0, NULL),
        cred_of(U2, G2, 1, g1), cred_of(U3, G3, 2, g12), cred_of(U3, G3, 0, NULL),
        cred_of(0, 0, 0, NULL),
    };
    static tree t;
    judge *j;
    int checks = 0, allowed = 0;

    if (geteuid() != 0) {
        fprintf(stderr, "check_access: SKIP the kernel comparison: needs root\n");
        return;
    }
    memset(&t, 0, sizeof(t));
    build_tree(&t);
    if (!t.acl_ok)
        fprintf(stderr, "check_access: the filesystem of %s takes no ACLs: mode bits only\n",
                t.dir);
    ck_assert_int_eq(judge_new(60, 1024, &j), 0);
    for (size_t c = 0; c < sizeof(creds) / sizeof(creds[0]); c++) {
        char k[NPATHS];
        kernel_verdicts(&t, &creds[c], k);
        for (int i = 0; i < t.n; i++) {
            struct stat st;
            char err[256] = "";
            int rc = judge_read(j, t.paths[i], &creds[c], &st, err, sizeof(err));
            ck_assert_msg((rc == 0) == (k[i] != 0), "uid %u gid %u (+%d groups) %s: kernel %s, "
                          "judge %d (%s)", (unsigned)creds[c].uid, (unsigned)creds[c].gid,
                          creds[c].ngroups, t.paths[i], k[i] ? "allows" : "refuses", rc, err);
            ck_assert(rc == 0 || rc == -EACCES);
            checks++;
            allowed += rc == 0;
        }
    }
    fprintf(stderr, "check_access: %d verdicts agree with the kernel (%d allowed)\n", checks,
            allowed);
    ck_assert_int_gt(allowed, checks / 10);
    ck_assert_int_lt(allowed, checks - checks / 10);
    judge_free(&j);
    tu_rmrf(t.dir);
    free(t.dir);
}
END_TEST

/* ---- the daemon's verdicts (access_check = judge) against the kernel's ---- */

/* In a child as cred: for each path, the kernel's verdicts (access(2) R_OK,
 * stat(2)) and the daemon's over its socket (gr_open, gr_stat) as the
 * daemon sees this peer (SO_PEERCRED, SO_PEERGROUPS).  out[i]: bit 0
 * kernel read, 1 daemon read, 2 kernel stat, 3 daemon stat; the child
 * fails if a daemon answer is neither a success nor EACCES/ENOENT. */
static void daemon_verdicts(const tree *t, const access_cred *cred, const char *sock, char *out)
{
    int pfd[2];
    pid_t pid;

    ck_assert_int_eq(pipe(pfd), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char v[NPATHS];
        gr_client *c;
        close(pfd[0]);
        if (setgroups((size_t)(cred->ngroups > 0 ? cred->ngroups : 0), cred->groups) < 0 ||
            setgid(cred->gid) < 0 || setuid(cred->uid) < 0)
            _exit(3);
        c = gr_connect(sock);
        if (!c) {
            fprintf(stderr, "as uid %u: %s\n", (unsigned)cred->uid, gr_strerror_last(NULL));
            _exit(5);
        }
        for (int i = 0; i < t->n; i++) {
            struct stat st;
            gr_file *f = gr_open(c, t->paths[i]);
            int open_err = errno;
            v[i] = (char)((access(t->paths[i], R_OK) == 0) | (f != NULL) << 1 |
                          (stat(t->paths[i], &st) == 0) << 2 | (gr_stat(c, t->paths[i], &st) == 0) << 3);
            if (!f && open_err != EACCES) {
                fprintf(stderr, "gr_open %s as uid %u: %s\n", t->paths[i], (unsigned)cred->uid,
                        gr_strerror_last(c));
                _exit(6);
            }
            gr_close(f);
        }
        gr_disconnect(c);
        if (write(pfd[1], v, (size_t)t->n) != t->n)
            _exit(4);
        _exit(0);
    }
    close(pfd[1]);
    {
        ssize_t n = read(pfd[0], out, (size_t)t->n);
        int st;
        close(pfd[0]);
        waitpid(pid, &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child as uid %u failed (%d)",
                      (unsigned)cred->uid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        ck_assert_int_eq(n, t->n);
    }
}

/* Register dir as a dataset and wait for its manifest. */
static void register_dataset(const tu_daemon *d, const char *dir)
{
    char err[600];

    ck_assert_msg(tu_register_dataset(d, dir, err, sizeof(err)) == 0, "%s", err);
}

/*
 * The matrix again, as an outsider sees the daemon: real users connect to a
 * real granaryd with access_check = judge and open and stat each file, once
 * judged on the file system (judge_read) and once from a registered
 * dataset's manifest; every answer must be the kernel's for that user.
 */
START_TEST(test_daemon_judges_as_the_kernel)
{
    static const gid_t g1[] = { G1 }, g12[] = { G1, G2 };
    access_cred creds[] = {
        cred_of(U1, G1, 0, NULL), cred_of(U2, G2, 0, NULL), cred_of(U2, G1, 0, NULL),
        cred_of(U2, G2, 1, g1), cred_of(U3, G3, 2, g12), cred_of(U3, G3, 0, NULL),
    };
    static tree t;
    tu_daemon d;
    char top[600];
    int checks = 0, allowed = 0, stat_allowed = 0;

    if (geteuid() != 0) {
        fprintf(stderr, "check_access: SKIP the daemon against the kernel: needs root\n");
        return;
    }
    tu_daemon_init(&d, "[daemon]\naccess_check = judge\nsocket_mode = 0666\n");
    chmod(d.dir, 0755);
    chmod(d.src, 0755);
    snprintf(top, sizeof(top), "%s/tree", d.src);
    ck_assert_int_eq(mkdir(top, 0755), 0);
    memset(&t, 0, sizeof(t));
    build_tree_in(&t, strdup(top));
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    for (int pass = 0; pass < 2; pass++) {
        uint64_t lookups0 = tu_stat(&d, "dataset_lookups");
        if (pass == 1)
            register_dataset(&d, top);
        for (size_t c = 0; c < sizeof(creds) / sizeof(creds[0]); c++) {
            char v[NPATHS];
            daemon_verdicts(&t, &creds[c], d.sock, v);
            for (int i = 0; i < t.n; i++) {
                int kr = v[i] & 1, dr = (v[i] >> 1) & 1, ks = (v[i] >> 2) & 1, ds = (v[i] >> 3) & 1;
                ck_assert_msg(kr == dr, "%s: uid %u gid %u (+%d groups) %s: kernel %s reading, "
                              "the daemon %s", pass ? "manifest" : "file system",
                              (unsigned)creds[c].uid, (unsigned)creds[c].gid, creds[c].ngroups,
                              t.paths[i], kr ? "allows" : "refuses", dr ? "allows" : "refuses");
                ck_assert_msg(ks == ds, "%s: uid %u %s: kernel %s stat, the daemon %s",
                              pass ? "manifest" : "file system", (unsigned)creds[c].uid,
                              t.paths[i], ks ? "allows" : "refuses", ds ? "allows" : "refuses");
                checks += 2;
                allowed += kr;
                stat_allowed += ks;
            }
        }
        /* The second pass was the manifest's: every open and stat looked
         * it up (else gr_stat's fallback to stat(2) would agree by itself). */
        if (pass == 1)
            ck_assert_uint_ge(tu_stat(&d, "dataset_lookups") - lookups0,
                              2 * (uint64_t)t.n * (sizeof(creds) / sizeof(creds[0])));
    }
    fprintf(stderr, "check_access: the daemon agrees with the kernel on %d verdicts (%d reads and "
            "%d stats allowed), judged on the file system and from a manifest\n", checks, allowed,
            stat_allowed);
    ck_assert_int_gt(allowed, checks / 20);
    ck_assert_int_lt(allowed, checks / 2 - checks / 20);
    ck_assert_int_lt(stat_allowed, checks / 2);
    ck_assert_uint_gt(tu_stat(&d, "access_denied"), 0);
    tu_daemon_fini(&d);
    free(t.dir);
}
END_TEST

/* A symbolic link on the way is refused, whatever it points to; a missing
 * file below a directory the peer may not search is EACCES, not ENOENT. */
START_TEST(test_links_and_hidden)
{
    char *d = tu_mkdtemp(), p[512], q[512], err[256];
    access_cred u2 = cred_of(U2, G2, 0, NULL);
    struct stat st;
    judge *j;

    if (geteuid() != 0) {
        fprintf(stderr, "check_access: SKIP links and hidden paths: needs root\n");
        tu_rmrf(d);
        free(d);
        return;
    }
    chmod(d, 0755);
    ck_assert_int_eq(judge_new(60, 64, &j), 0);
    snprintf(p, sizeof(p), "%s/real", d);
    tu_write_pattern(p, 1, 10);
    chmod(p, 0644);
    snprintf(q, sizeof(q), "%s/link", d);
    ck_assert_int_eq(symlink(p, q), 0);
    ck_assert_int_eq(judge_read(j, p, &u2, &st, err, sizeof(err)), 0);
    ck_assert_int_eq(judge_read(j, q, &u2, &st, err, sizeof(err)), -EACCES);
    snprintf(p, sizeof(p), "%s/priv", d);
    mkdir(p, 0700);
    snprintf(q, sizeof(q), "%s/priv/exists", d);
    tu_write_pattern(q, 1, 10);
    chmod(q, 0644);
    ck_assert_int_eq(judge_read(j, q, &u2, &st, err, sizeof(err)), -EACCES);
    snprintf(q, sizeof(q), "%s/priv/missing", d);
    ck_assert_int_eq(judge_read(j, q, &u2, &st, err, sizeof(err)), -EACCES);
    snprintf(q, sizeof(q), "%s/nothere", d);
    ck_assert_int_eq(judge_read(j, q, &u2, &st, err, sizeof(err)), -ENOENT);
    judge_free(&j);
    tu_rmrf(d);
    free(d);
}
END_TEST

static Suite *access_suite(void)
{
    Suite *s = suite_create("access");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_mode_bits);
    tcase_add_test(tc, test_acl_decode);
    tcase_add_test(tc, test_against_the_kernel);
    tcase_add_test(tc, test_links_and_hidden);
    tcase_add_test(tc, test_daemon_judges_as_the_kernel);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr;
    int failed;

    /* The daemon's verdicts, each asked for: libgranary's directory scan
     * lists with READDIR PLUS, whose attributes would answer later stats
     * from the client's cache (judged the same, but not counted here). */
    setenv("GRANARY_DIR_LOOKAHEAD", "0", 1);
    sr = srunner_create(access_suite());

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
