/*
 * faultinject.c - build/tests/libfaultinject.so, an LD_PRELOAD library that
 * makes file I/O fail on command, for the fault tests (tests/test_faults.sh).
 *
 *   FAULTINJECT_CONTROL=/path/to/rules LD_PRELOAD=build/tests/libfaultinject.so granaryd ...
 *
 * The control file holds one rule per line, "MODE SUBSTRING [ARG]"; it is
 * re-read whenever its mtime or size changes (write a new file and rename it
 * over, or truncate it to clear every rule).  A rule applies to the I/O
 * calls on descriptors whose path (/proc/self/fd/N) contains SUBSTRING:
 *   eio     read, pread: fail with EIO
 *   short   read, pread: return at most half the bytes asked (a legal short read)
 *   eof     read, pread: return 0 (the file looks shorter than its size)
 *   delay   read, pread: sleep ARG milliseconds first
 *   flip    read, pread: succeed, with the first byte inverted (a lying device)
 *   weio    write, pwrite, fallocate: fail with EIO
 *   wnospc  write, pwrite, fallocate: fail with ENOSPC
 *   wdelay  write, pwrite, fallocate: sleep ARG milliseconds first
 *   peercred  getsockopt(SO_PEERCRED) on a matching socket ("socket:"): EPERM
 *   clockstep clock_gettime(CLOCK_REALTIME): ARG seconds added (SUBSTRING
 *           is ignored: write "-"), as if the wall clock had been stepped
 * The first matching rule of each kind (read side, write side) wins.  Every
 * fault injected is counted in the file named by $FAULTINJECT_LOG (one line
 * "MODE PATH" per fault, appended), if set.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define FI_MAX_RULES 32

/* Read side, then write side (FI_WEIO..FI_WDELAY), then the others. */
enum { FI_NONE, FI_EIO, FI_SHORT, FI_EOF, FI_DELAY, FI_FLIP, FI_WEIO, FI_WNOSPC, FI_WDELAY, FI_PEERCRED,
       FI_CLOCKSTEP };

typedef struct fi_rule {
    int mode;
    long arg;
    char sub[256];
} fi_rule;

static pthread_mutex_t fi_lock = PTHREAD_MUTEX_INITIALIZER;
static fi_rule fi_rules[FI_MAX_RULES];
static int fi_nrules;
static struct timespec fi_mtime;
static off_t fi_size = -1;

static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_getsockopt)(int, int, int, void *, socklen_t *);
static int (*real_clock_gettime)(clockid_t, struct timespec *);

/* Exported symbols of this library (no header: LD_PRELOAD finds them). */
ssize_t read(int fd, void *buf, size_t n);
ssize_t pread(int fd, void *buf, size_t n, off_t off);
ssize_t pread64(int fd, void *buf, size_t n, off_t off);
ssize_t write(int fd, const void *buf, size_t n);
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off);
int fallocate(int fd, int mode, off_t off, off_t len);
int fallocate64(int fd, int mode, off_t off, off_t len);
int getsockopt(int fd, int level, int opt, void *val, socklen_t *len);
int clock_gettime(clockid_t id, struct timespec *ts);

static void fi_init(void)
{
    if (__atomic_load_n(&real_read, __ATOMIC_ACQUIRE))
        return;
    real_pread = (ssize_t (*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
    real_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    real_pwrite = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    real_fallocate = (int (*)(int, int, off_t, off_t))dlsym(RTLD_NEXT, "fallocate");
    real_getsockopt = (int (*)(int, int, int, void *, socklen_t *))dlsym(RTLD_NEXT, "getsockopt");
    real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    __atomic_store_n(&real_read, (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read"),
                     __ATOMIC_RELEASE);
}

static int fi_parse_mode(const char *m)
{
    static const char *names[] = { "", "eio", "short", "eof", "delay", "flip", "weio", "wnospc",
                                   "wdelay", "peercred", "clockstep" };

    for (int i = 1; i < (int)(sizeof(names) / sizeof(names[0])); i++)
        if (!strcmp(m, names[i]))
            return i;
    return FI_NONE;
}

/* Re-read the control file if it changed.  fi_lock held. */
static void fi_reload_locked(void)
{
    const char *path = getenv("FAULTINJECT_CONTROL");
    struct stat st;
    char buf[8192], *line, *save;
    ssize_t n;
    int fd;

    if (!path || stat(path, &st) < 0) {
        fi_nrules = 0;
        fi_size = -1;
        return;
    }
    if (st.st_size == fi_size && st.st_mtim.tv_sec == fi_mtime.tv_sec &&
        st.st_mtim.tv_nsec == fi_mtime.tv_nsec)
        return;
    fi_size = st.st_size;
    fi_mtime = st.st_mtim;
    fi_nrules = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    n = real_read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    for (line = strtok_r(buf, "\n", &save); line && fi_nrules < FI_MAX_RULES;
         line = strtok_r(NULL, "\n", &save)) {
        char mode[16], sub[256];
        long arg = 0;
        if (sscanf(line, "%15s %255s %ld", mode, sub, &arg) < 2)
            continue;
        fi_rules[fi_nrules].mode = fi_parse_mode(mode);
        fi_rules[fi_nrules].arg = arg;
        snprintf(fi_rules[fi_nrules].sub, sizeof(fi_rules[0].sub), "%s", sub);
        if (fi_rules[fi_nrules].mode != FI_NONE)
            fi_nrules++;
    }
}

static void fi_log(int mode, const char *path)
{
    static const char *names[] = { "", "eio", "short", "eof", "delay", "flip", "weio", "wnospc",
                                   "wdelay", "peercred", "clockstep" };
    const char *log = getenv("FAULTINJECT_LOG");
    char line[600];
    int fd, len;

    if (!log)
        return;
    fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    len = snprintf(line, sizeof(line), "%s %s\n", names[mode], path);
    real_write(fd, line, (size_t)len);
    close(fd);
}

/* The rule for fd on the read side (write = 0), the write side (1) or a
 * socket (2), FI_NONE if none; *arg gets its argument. */
static int fi_match(int fd, int write_side, long *arg)
{
    char link[64], path[512];
    ssize_t n;
    int mode = FI_NONE;

    fi_init();
    if (!getenv("FAULTINJECT_CONTROL"))
        return FI_NONE;
    pthread_mutex_lock(&fi_lock);
    fi_reload_locked();
    if (fi_nrules == 0) {
        pthread_mutex_unlock(&fi_lock);
        return FI_NONE;
    }
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof(path) - 1);
    if (n > 0) {
        path[n] = '\0';
        for (int i = 0; i < fi_nrules; i++) {
            int m = fi_rules[i].mode;
            int side = m >= FI_PEERCRED ? 2 : m >= FI_WEIO;
            if (side == write_side && strstr(path, fi_rules[i].sub)) {
                mode = fi_rules[i].mode;
                *arg = fi_rules[i].arg;
                break;
            }
        }
    }
    pthread_mutex_unlock(&fi_lock);
    if (mode != FI_NONE)
        fi_log(mode, path);
    return mode;
}

/* Apply a read-side rule; returns 1 if the call is answered (*ret set). */
static int fi_read_fault(int fd, size_t *n, ssize_t *ret, int *flip)
{
    long arg = 0;
    int mode = fi_match(fd, 0, &arg);

    *flip = 0;
    switch (mode) {
    case FI_EIO:
        errno = EIO;
        *ret = -1;
        return 1;
    case FI_EOF:
        *ret = 0;
        return 1;
    case FI_SHORT:
        if (*n > 1)
            *n /= 2;
        return 0;
    case FI_DELAY: {
        struct timespec ts = { arg / 1000, (arg % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        return 0;
    }
    case FI_FLIP:
        *flip = 1;
        return 0;
    default:
        return 0;
    }
}

static int fi_write_fault(int fd)
{
    long arg = 0;
    int mode = fi_match(fd, 1, &arg);

    if (mode == FI_WEIO || mode == FI_WNOSPC) {
        errno = mode == FI_WEIO ? EIO : ENOSPC;
        return 1;
    }
    if (mode == FI_WDELAY) {
        struct timespec ts = { arg / 1000, (arg % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    return 0;
}

ssize_t read(int fd, void *buf, size_t n)
{
    ssize_t ret;
    int flip;

    fi_init();
    if (fi_read_fault(fd, &n, &ret, &flip))
        return ret;
    ret = real_read(fd, buf, n);
    if (flip && ret > 0)
        ((unsigned char *)buf)[0] ^= 0xff;
    return ret;
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    ssize_t ret;
    int flip;

    fi_init();
    if (fi_read_fault(fd, &n, &ret, &flip))
        return ret;
    ret = real_pread(fd, buf, n, off);
    if (flip && ret > 0)
        ((unsigned char *)buf)[0] ^= 0xff;
    return ret;
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
    return pread(fd, buf, n, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    fi_init();
    if (fi_write_fault(fd))
        return -1;
    return real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    fi_init();
    if (fi_write_fault(fd))
        return -1;
    return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    fi_init();
    /* Punching holes frees space: let it through even on a "full" device. */
    if (!(mode & FALLOC_FL_PUNCH_HOLE) && fi_write_fault(fd))
        return -1;
    return real_fallocate(fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    return fallocate(fd, mode, off, len);
}

int getsockopt(int fd, int level, int opt, void *val, socklen_t *len)
{
    long arg = 0;

    fi_init();
    if (level == SOL_SOCKET && opt == SO_PEERCRED && fi_match(fd, 2, &arg) == FI_PEERCRED) {
        errno = EPERM;
        return -1;
    }
    return real_getsockopt(fd, level, opt, val, len);
}

/* The clockstep rule's seconds, 0 if none. */
static long fi_clockstep(void)
{
    long step = 0;

    if (!getenv("FAULTINJECT_CONTROL"))
        return 0;
    pthread_mutex_lock(&fi_lock);
    fi_reload_locked();
    for (int i = 0; i < fi_nrules; i++)
        if (fi_rules[i].mode == FI_CLOCKSTEP)
            step = fi_rules[i].arg;
    pthread_mutex_unlock(&fi_lock);
    return step;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc;

    fi_init();
    rc = real_clock_gettime(id, ts);
    if (rc == 0 && id == CLOCK_REALTIME)
        ts->tv_sec += fi_clockstep();
    return rc;
}
