/*
 * sandbox_probe.c - run by tests/test_systemd_vm.sh as an ExecStartPre= of
 * granaryd.service, so inside the unit's own sandbox (its user, mount
 * namespace, capability set and system call filter), where nsenter from
 * outside cannot reach.  Checks that what a future tier needs still works
 * there (huge-page memfds, sealed) and that what the sandbox forbids fails
 * the way it should.  Prints one "sandbox-probe: NAME ok" or
 * "sandbox-probe: NAME FAIL (why)" line per probe, then
 * "sandbox-probe: done N failed"; always exits 0 (the daemon starts either
 * way, the test reads the lines from the journal).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static int failed;

static void report(const char *name, int ok, const char *why)
{
    if (ok)
        printf("sandbox-probe: %s ok\n", name);
    else
        printf("sandbox-probe: %s FAIL (%s)\n", name, why);
    failed += !ok;
}

/* A 2 MiB huge-page memfd, mapped, written and sealed: what the DRAM tier
 * would do with MFD_HUGETLB (the VM reserves a few pages first). */
static void probe_hugetlb(void)
{
    size_t len = 2u << 20;
    int fd = memfd_create("granary-probe", MFD_HUGETLB | MFD_ALLOW_SEALING | MFD_CLOEXEC);
    char *p;

    if (fd < 0) {
        report("hugetlb_memfd", 0, strerror(errno));
        return;
    }
    if (ftruncate(fd, (off_t)len) < 0) {
        report("hugetlb_memfd", 0, strerror(errno));
        close(fd);
        return;
    }
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        report("hugetlb_memfd", 0, strerror(errno));
        close(fd);
        return;
    }
    p[0] = 1;
    p[len - 1] = 2;
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
        report("hugetlb_memfd", 0, strerror(errno));
    else
        report("hugetlb_memfd", p[0] == 1 && p[len - 1] == 2, "bytes lost");
    munmap(p, len);
    close(fd);
}

/* Creating path must fail with EROFS: a read-only mount, not permissions. */
static void probe_readonly(const char *name, const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    char why[128];

    if (fd >= 0) {
        close(fd);
        unlink(path);
        report(name, 0, "created");
        return;
    }
    snprintf(why, sizeof(why), "%s, not EROFS", strerror(errno));
    report(name, errno == EROFS, why);
}

int main(void)
{
    int fd;

    setvbuf(stdout, NULL, _IOLBF, 0);
    probe_hugetlb();
    probe_readonly("etc_read_only", "/etc/.granary-probe");
    probe_readonly("run_read_only", "/run/.granary-probe");
    probe_readonly("run_lock_read_only", "/run/lock/.granary-probe");
    probe_readonly("dev_shm_read_only", "/dev/shm/.granary-probe");
    probe_readonly("source_read_only", "/mnt/dfs/.granary-probe");
    /* RestrictAddressFamilies=: no netlink, no packet sockets. */
    fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0);
    report("no_netlink_socket", fd < 0 && errno == EAFNOSUPPORT, fd < 0 ? strerror(errno) : "allowed");
    if (fd >= 0)
        close(fd);
    printf("sandbox-probe: done %d failed\n", failed);
    return 0;
}
