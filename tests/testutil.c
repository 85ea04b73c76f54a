/*
 * testutil.c - see testutil.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "granary.h"
#include "ini.h"
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

void tu_sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
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

/* ---- daemon ---- */

/* A configuration as (section, key, value) triples, for merging. */
typedef struct tu_conf {
    char (*sec)[64], (*key)[64], (*val)[1024];
    int n;
} tu_conf;

static int tu_conf_cb(void *arg, const char *section, const char *key, const char *value,
                      char *msg, size_t msglen)
{
    tu_conf *c = arg;
    int i;

    (void)msg;
    (void)msglen;
    if (!key)
        return 0;
    for (i = 0; i < c->n; i++)
        if (!strcmp(c->sec[i], section) && !strcmp(c->key[i], key))
            break;
    if (i == c->n) {
        if (c->n == 256)
            abort();
        snprintf(c->sec[i], sizeof(c->sec[i]), "%s", section);
        snprintf(c->key[i], sizeof(c->key[i]), "%s", key);
        c->n++;
    }
    snprintf(c->val[i], sizeof(c->val[i]), "%s", value);
    return 0;
}

void tu_daemon_init(tu_daemon *d, const char *extra)
{
    static char sec[256][64], key[256][64], val[256][1024];
    tu_conf c = { sec, key, val, 0 };
    char base[4096], err[256];
    FILE *f;

    memset(d, 0, sizeof(*d));
    d->pid = -1;
    d->dir = tu_mkdtemp();
    snprintf(d->src, sizeof(d->src), "%s/src", d->dir);
    snprintf(d->nvme, sizeof(d->nvme), "%s/nvme", d->dir);
    snprintf(d->sock, sizeof(d->sock), "%s/sock", d->dir);
    snprintf(d->conf, sizeof(d->conf), "%s/granary.conf", d->dir);
    snprintf(d->log, sizeof(d->log), "%s/granaryd.log", d->dir);
    mkdir(d->src, 0755);
    snprintf(base, sizeof(base),
             "[daemon]\nsocket = %s\nlog_level = debug\nio_threads = 4\n"
             "[source]\nroots = %s\nchunk_size = 64K\nattr_ttl = 0.2\n"
             "[dram]\ncapacity = 8M\n"
             "[nvme]\npath = %s\ncapacity = 64M\ninline_max = 16K\n"
             "[metrics]\nlisten =\n",
             d->sock, d->src, d->nvme);
    /* The extra lines' keys replace the base's (granaryd refuses a key
     * set twice), through the daemon's own reader. */
    if (gr__ini_parse(base, strlen(base), "base", tu_conf_cb, &c, err, sizeof(err)) < 0 ||
        (extra && gr__ini_parse(extra, strlen(extra), "extra", tu_conf_cb, &c, err,
                                sizeof(err)) < 0)) {
        fprintf(stderr, "tu_daemon_init: %s\n", err);
        abort();
    }
    f = fopen(d->conf, "w");
    if (!f)
        abort();
    for (int i = 0; i < c.n; i++) {
        int first = 1;
        for (int j = 0; j < i; j++)
            first &= strcmp(c.sec[j], c.sec[i]) != 0;
        if (!first)
            continue;
        fprintf(f, "[%s]\n", c.sec[i]);
        for (int j = i; j < c.n; j++)
            if (!strcmp(c.sec[j], c.sec[i]))
                fprintf(f, "%s = \"%s\"\n", c.key[j], c.val[j]);
    }
    fclose(f);
}

static int sock_ready(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), ok;

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

int tu_daemon_start(tu_daemon *d)
{
    const char *bin = getenv("GRANARYD");
    struct timespec ts = { 0, 10 * 1000 * 1000 };

    if (!bin || !*bin)
        bin = "build/granaryd";
    d->pid = fork();
    if (d->pid < 0)
        return -1;
    if (d->pid == 0) {
        int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execl(bin, bin, "--config", d->conf, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 1000; i++) {
        int st;
        if (sock_ready(d->sock))
            return 0;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = -1;
            return -1;
        }
        nanosleep(&ts, NULL);
    }
    return -1;
}

int tu_daemon_stop(tu_daemon *d)
{
    struct timespec ts = { 0, 10 * 1000 * 1000 };
    int st;

    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    for (int i = 0; i < 3000; i++) {
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = -1;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        nanosleep(&ts, NULL);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, &st, 0);
    d->pid = -1;
    return -1;
}

void tu_daemon_fini(tu_daemon *d)
{
    if (d->pid > 0)
        tu_daemon_stop(d);
    if (getenv("TU_KEEP")) {
        fprintf(stderr, "kept %s\n", d->dir);
    } else {
        tu_rmrf(d->dir);
    }
    free(d->dir);
    d->dir = NULL;
}

typedef struct tu_stat_arg {
    const char *name;
    uint64_t v;
} tu_stat_arg;

static int tu_stat_cb(void *arg, const char *name, uint64_t value)
{
    tu_stat_arg *a = arg;

    if (strcmp(name, a->name))
        return 0;
    a->v = value;
    return 1;
}

uint64_t tu_stat(const tu_daemon *d, const char *name)
{
    tu_stat_arg a = { name, UINT64_MAX };
    gr_client *c = gr_connect(d->sock);

    if (!c)
        return UINT64_MAX;
    gr_stats(c, tu_stat_cb, &a);
    gr_disconnect(c);
    return a.v;
}

uint64_t tu_stat_on(gr_client *c, const char *name)
{
    tu_stat_arg a = { name, UINT64_MAX };

    if (gr_stats(c, tu_stat_cb, &a) < 0)
        return UINT64_MAX;
    return a.v;
}

uint64_t tu_stat_settles(const tu_daemon *d, const char *name, uint64_t want)
{
    uint64_t v = 0;

    for (int i = 0; i < 200; i++) {
        v = tu_stat(d, name);
        if (v == want)
            break;
        tu_sleep_ms(10);
    }
    return v;
}

int tu_register_dataset(const tu_daemon *d, const char *dir, char *err, size_t errlen)
{
    gr_client *c = gr_connect(d->sock);
    gr_field arg = { .name = "path", .is_text = 1, .text = dir, .len = strlen(dir) }, *out;
    size_t n;
    int ready = 0;

    if (!c) {
        snprintf(err, errlen, "connect: %s", strerror(errno));
        return -1;
    }
    if (gr_admin(c, GR_ADMIN_DATASET_ADD, &arg, 1, &out, &n) < 0) {
        snprintf(err, errlen, "dataset add: %s", gr_strerror_last(c));
        gr_disconnect(c);
        return -1;
    }
    free(out);
    for (int i = 0; i < 500 && !ready; i++) {
        if (gr_admin(c, GR_ADMIN_DATASET_LIST, NULL, 0, &out, &n) < 0)
            break;
        for (size_t k = 0; k < n; k++)
            ready |= !strcmp(out[k].name, "state") && out[k].is_text && !strcmp(out[k].text, "ready");
        free(out);
        if (!ready)
            tu_sleep_ms(20);
    }
    gr_disconnect(c);
    if (!ready)
        snprintf(err, errlen, "the dataset's scan did not finish");
    return ready ? 0 : -1;
}

int tu_conf_reload(tu_daemon *d, const char *key, const char *value)
{
    char *text = NULL, line[4096];
    size_t len = 0, klen = strlen(key);
    FILE *in = fopen(d->conf, "r"), *out;
    int found = 0;

    if (!in)
        return -1;
    if (!(out = open_memstream(&text, &len))) {
        fclose(in);
        return -1;
    }
    while (fgets(line, sizeof(line), in)) {
        if (!strncmp(line, key, klen) && !strncmp(line + klen, " = ", 3)) {
            fprintf(out, "%s = \"%s\"\n", key, value);
            found = 1;
        } else {
            fputs(line, out);
        }
    }
    fclose(in);
    fclose(out);
    if (found && (in = fopen(d->conf, "w"))) {
        found = fputs(text, in) >= 0;
        found &= fclose(in) == 0;
    } else {
        found = 0;
    }
    free(text);
    if (!found)
        return -1;
    return kill(d->pid, SIGHUP);
}
