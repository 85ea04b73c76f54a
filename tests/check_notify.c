/*
 * check_notify.c - unit tests of notify.c, the sd_notify protocol without
 * libsystemd: datagrams reach a socket named by $NOTIFY_SOCKET (a path or
 * an abstract "@name"), every call is a no-op without the variable, bad
 * addresses are refused, $WATCHDOG_USEC/$WATCHDOG_PID are parsed, and the
 * watchdog timer pings at half the interval from the event loop.
 */
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"
#include "testutil.h"

static char *dir;

static void setup(void)
{
    dir = tu_mkdtemp();
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
}

static void teardown(void)
{
    tu_rmrf(dir);
    free(dir);
}

/* A datagram socket bound at path (or, starting with '@', at that abstract
 * name), and $NOTIFY_SOCKET pointing at it. */
static int listen_at(const char *name)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t n = strlen(name);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    ck_assert_int_ge(fd, 0);
    ck_assert_uint_lt(n, sizeof(sa.sun_path));
    memcpy(sa.sun_path, name, n);
    if (name[0] == '@') {
        sa.sun_path[0] = '\0';
        len--;
    }
    ck_assert_msg(bind(fd, (struct sockaddr *)&sa, len) == 0, "bind %s: %s", name, strerror(errno));
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", name, 1), 0);
    return fd;
}

/* The next datagram on fd as a string, waiting up to ms; "" on timeout. */
static const char *next_msg(int fd, int ms)
{
    static char buf[8192];
    struct pollfd p = { .fd = fd, .events = POLLIN };
    ssize_t n;

    buf[0] = '\0';
    if (poll(&p, 1, ms) != 1)
        return buf;
    n = recv(fd, buf, sizeof(buf) - 1, 0);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    return buf;
}

START_TEST(test_path_socket)
{
    char path[512];
    int fd;

    snprintf(path, sizeof(path), "%s/notify", dir);
    fd = listen_at(path);
    ck_assert_int_eq(notify_send("READY=1"), 1);
    ck_assert_str_eq(next_msg(fd, 1000), "READY=1");
    ck_assert_int_eq(notify_sendf("READY=1\nSTATUS=serving %d roots", 3), 1);
    ck_assert_str_eq(next_msg(fd, 1000), "READY=1\nSTATUS=serving 3 roots");
    ck_assert_int_eq(notify_send("STOPPING=1"), 1);
    ck_assert_str_eq(next_msg(fd, 1000), "STOPPING=1");
    ck_assert_str_eq(next_msg(fd, 50), "");
    close(fd);
}
END_TEST

START_TEST(test_abstract_socket)
{
    char name[64];
    int fd;

    snprintf(name, sizeof(name), "@granary-check-notify-%d", (int)getpid());
    fd = listen_at(name);
    ck_assert_int_eq(notify_send("WATCHDOG=1"), 1);
    ck_assert_str_eq(next_msg(fd, 1000), "WATCHDOG=1");
    close(fd);
}
END_TEST

START_TEST(test_noop_without_variable)
{
    struct event_base *base = event_base_new();
    struct event *ev = (struct event *)&ev;

    ck_assert_int_eq(notify_send("READY=1"), 0);
    ck_assert_int_eq(notify_sendf("STATUS=%s", "x"), 0);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", "", 1), 0);
    ck_assert_int_eq(notify_send("READY=1"), 0);
    /* No watchdog asked for: no timer. */
    ck_assert_uint_eq(notify_watchdog_usec(), 0);
    ck_assert_int_eq(notify_watchdog_start(base, &ev), 0);
    ck_assert_ptr_null(ev);
    notify_watchdog_stop(&ev);
    notify_watchdog_stop(NULL);
    event_base_free(base);
}
END_TEST

START_TEST(test_bad_addresses)
{
    char path[512], longname[200];

    ck_assert_int_eq(setenv("NOTIFY_SOCKET", "relative/sock", 1), 0);
    ck_assert_int_eq(notify_send("READY=1"), -EINVAL);
    memset(longname, 'x', sizeof(longname) - 1);
    longname[0] = '/';
    longname[sizeof(longname) - 1] = '\0';
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", longname, 1), 0);
    ck_assert_int_eq(notify_send("READY=1"), -ENAMETOOLONG);
    /* Nobody listening: the error comes back, nothing hangs. */
    snprintf(path, sizeof(path), "%s/nobody", dir);
    ck_assert_int_eq(setenv("NOTIFY_SOCKET", path, 1), 0);
    ck_assert_int_eq(notify_send("READY=1"), -ENOENT);
    {
        char big[5000];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        ck_assert_int_eq(notify_sendf("STATUS=%s", big), -EMSGSIZE);
    }
}
END_TEST

START_TEST(test_watchdog_usec)
{
    char pid[32];

    ck_assert_int_eq(setenv("WATCHDOG_USEC", "30000000", 1), 0);
    ck_assert_uint_eq(notify_watchdog_usec(), 30000000u);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    ck_assert_int_eq(setenv("WATCHDOG_PID", pid, 1), 0);
    ck_assert_uint_eq(notify_watchdog_usec(), 30000000u);
    /* Meant for another process. */
    snprintf(pid, sizeof(pid), "%d", (int)getpid() + 1);
    ck_assert_int_eq(setenv("WATCHDOG_PID", pid, 1), 0);
    ck_assert_uint_eq(notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_PID");
    const char *bad[] = { "", "0", "-5", "12x", "abc", "99999999999999999999999" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(setenv("WATCHDOG_USEC", bad[i], 1), 0);
        ck_assert_msg(notify_watchdog_usec() == 0, "WATCHDOG_USEC=\"%s\" accepted", bad[i]);
    }
}
END_TEST

/* The loop runs 0.5 s with WATCHDOG_USEC = 0.2 s: pings every 0.1 s. */
START_TEST(test_watchdog_timer)
{
    struct event_base *base = event_base_new();
    struct event *ev = NULL;
    struct timeval run = { 0, 500000 };
    char path[512];
    int fd, pings = 0;
    const char *m;

    snprintf(path, sizeof(path), "%s/notify", dir);
    fd = listen_at(path);
    ck_assert_int_eq(setenv("WATCHDOG_USEC", "200000", 1), 0);
    ck_assert_int_eq(notify_watchdog_start(base, &ev), 1);
    ck_assert_ptr_nonnull(ev);
    event_base_loopexit(base, &run);
    event_base_dispatch(base);
    while (*(m = next_msg(fd, 0))) {
        ck_assert_str_eq(m, "WATCHDOG=1");
        pings++;
    }
    /* 5 expected; the machine is shared and noisy. */
    ck_assert_msg(pings >= 2 && pings <= 6, "%d pings in 0.5 s", pings);
    notify_watchdog_stop(&ev);
    ck_assert_ptr_null(ev);
    event_base_free(base);
    close(fd);
}
END_TEST

static Suite *notify_suite(void)
{
    Suite *s = suite_create("notify");
    TCase *tc = tcase_create("notify");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_path_socket);
    tcase_add_test(tc, test_abstract_socket);
    tcase_add_test(tc, test_noop_without_variable);
    tcase_add_test(tc, test_bad_addresses);
    tcase_add_test(tc, test_watchdog_usec);
    tcase_add_test(tc, test_watchdog_timer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(notify_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
