/*
 * check_log.c - unit tests of log.c's journald priorities: log_fd_is_journal
 * matches $JOURNAL_STREAM's "DEVICE:INODE" against an fd and refuses
 * anything malformed; log_write prefixes "<3>".."<7>" only while stderr is
 * the stream the variable names, and writes plain lines otherwise (no
 * variable, or stderr redirected elsewhere since).  log_write decides once
 * per process, so each case runs in a child of its own.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "testutil.h"

static char *dir;

static void setup(void)
{
    dir = tu_mkdtemp();
    unsetenv("JOURNAL_STREAM");
}

static void teardown(void)
{
    tu_rmrf(dir);
    free(dir);
}

/* "DEV:INO" of fd into buf. */
static void dev_ino(int fd, char *buf, size_t len)
{
    struct stat st;

    ck_assert_int_eq(fstat(fd, &st), 0);
    snprintf(buf, len, "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
}

/* Mode of run_child: what $JOURNAL_STREAM names. */
enum stream { NONE, STDERR, OTHER };

/* In a child: stderr to dir/out, $JOURNAL_STREAM per mode, one log_write
 * per level ("line N" with N the level); returns what the child wrote. */
static char *run_child(enum stream mode)
{
    static char got[4096];
    char out[600], other[600];
    pid_t pid;
    int status, fd;
    ssize_t n;

    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(other, sizeof(other), "%s/other", dir);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char v[64];
        int efd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int ofd = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        if (efd < 0 || ofd < 0 || dup2(efd, STDERR_FILENO) < 0)
            _exit(2);
        if (mode != NONE) {
            struct stat st;     /* no ck_assert here: not Check's process */
            if (fstat(mode == STDERR ? STDERR_FILENO : ofd, &st) < 0)
                _exit(3);
            snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev,
                     (unsigned long long)st.st_ino);
            setenv("JOURNAL_STREAM", v, 1);
        }
        log_set_level(LOG_DEBUG);
        for (int l = LOG_ERROR; l <= LOG_DEBUG; l++)
            log_write((log_level)l, "line %d", l);
        _exit(0);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    fd = open(out, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    n = read(fd, got, sizeof(got) - 1);
    close(fd);
    ck_assert_int_ge(n, 0);
    got[n] = '\0';
    return got;
}

START_TEST(test_prefixes_on_journal_stream)
{
    ck_assert_str_eq(run_child(STDERR),
                     "<3>granaryd error: line 0\n"
                     "<4>granaryd warn: line 1\n"
                     "<6>granaryd info: line 2\n"
                     "<7>granaryd debug: line 3\n");
}
END_TEST

START_TEST(test_plain_without_variable)
{
    ck_assert_str_eq(run_child(NONE),
                     "granaryd error: line 0\n"
                     "granaryd warn: line 1\n"
                     "granaryd info: line 2\n"
                     "granaryd debug: line 3\n");
}
END_TEST

/* The variable was inherited but stderr goes somewhere else now. */
START_TEST(test_plain_when_stderr_redirected)
{
    ck_assert_str_eq(run_child(OTHER),
                     "granaryd error: line 0\n"
                     "granaryd warn: line 1\n"
                     "granaryd info: line 2\n"
                     "granaryd debug: line 3\n");
}
END_TEST

START_TEST(test_fd_is_journal)
{
    char path[600], v[64], bad[96];
    struct stat st;
    int fd;

    snprintf(path, sizeof(path), "%s/f", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    dev_ino(fd, v, sizeof(v));
    ck_assert_int_eq(log_fd_is_journal(fd, v), 1);
    ck_assert_int_eq(fstat(fd, &st), 0);
    snprintf(bad, sizeof(bad), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino + 1);
    ck_assert_int_eq(log_fd_is_journal(fd, bad), 0);
    snprintf(bad, sizeof(bad), "%llu:%llu", (unsigned long long)st.st_dev + 1,
             (unsigned long long)st.st_ino);
    ck_assert_int_eq(log_fd_is_journal(fd, bad), 0);
    snprintf(bad, sizeof(bad), "%s ", v);
    ck_assert_int_eq(log_fd_is_journal(fd, bad), 0);
    ck_assert_int_eq(log_fd_is_journal(fd, NULL), 0);
    ck_assert_int_eq(log_fd_is_journal(fd, ""), 0);
    ck_assert_int_eq(log_fd_is_journal(fd, "12"), 0);
    ck_assert_int_eq(log_fd_is_journal(fd, "12:"), 0);
    ck_assert_int_eq(log_fd_is_journal(fd, ":12"), 0);
    ck_assert_int_eq(log_fd_is_journal(fd, "a:b"), 0);
    ck_assert_int_eq(log_fd_is_journal(fd, "99999999999999999999999:1"), 0);
    close(fd);
    ck_assert_int_eq(log_fd_is_journal(fd, v), 0);     /* closed: fstat fails */
}
END_TEST

static Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_prefixes_on_journal_stream);
    tcase_add_test(tc, test_plain_without_variable);
    tcase_add_test(tc, test_plain_when_stderr_redirected);
    tcase_add_test(tc, test_fd_is_journal);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(log_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
