/*
 * ini.c - see ini.h.  The lexer works line by line over a private
 * NUL-terminated copy of the text, so lines of any length need no buffer of
 * their own; keys seen are kept in a hash set to refuse repeats.
 */
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "htab.h"
#include "ini.h"

#define INI_FILE_MAX  (1024 * 1024)
#define INI_QUOTE_MAX 64

typedef struct seen_key {
    gr__hnode hn;
    size_t len;
    char sk[];                  /* "section\0key" */
} seen_key;

typedef struct lexer {
    const char *name;
    gr__ini_cb cb;
    void *arg;
    char *section;              /* into the private copy, or NULL */
    gr__htab seen;
} lexer;

static void msg_set(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msg_set(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (!msg || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}

static int is_blank(int ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* Trim blanks from both ends of s in place; returns the new start. */
static char *trim(char *s)
{
    char *e;

    while (is_blank((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && is_blank((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Cut an inline comment: '#' or ';' after a blank.  s points into a line
 * after its '=', so s[-1] is readable. */
static void cut_comment(char *s)
{
    for (char *p = s; *p; p++)
        if ((*p == '#' || *p == ';') && is_blank((unsigned char)p[-1])) {
            *p = '\0';
            return;
        }
}

/* The value part of a "key = value" line (s, after '='), in place.  NULL
 * with a message on error. */
static char *parse_value(char *s, char *msg, size_t msglen)
{
    char *o, *p;

    s = trim(s);
    if (*s != '"') {
        cut_comment(s);
        return trim(s);
    }
    for (o = s, p = s + 1; *p && *p != '"'; p++) {
        if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
            p++;
        *o++ = *p;
    }
    if (*p != '"') {
        msg_set(msg, msglen, "unterminated quoted value");
        return NULL;
    }
    *o = '\0';
    p = trim(p + 1);
    if (*p && *p != '#' && *p != ';') {
        msg_set(msg, msglen, "unexpected text after the closing quote");
        return NULL;
    }
    return s;
}

/* FNV-1a: config files are small and local; no hashing library needed. */
static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

static int seen_eq(const gr__hnode *n, const void *key)
{
    const seen_key *a = gr__container_of(n, seen_key, hn), *b = key;

    return a->len == b->len && memcmp(a->sk, b->sk, a->len) == 0;
}

static int seen_free(void *arg, gr__hnode *n)
{
    (void)arg;
    free(gr__container_of(n, seen_key, hn));
    return 0;
}

/* Record [section] key; -EEXIST if it was seen before. */
static int seen_add(lexer *lx, const char *key)
{
    size_t sl = strlen(lx->section), kl = strlen(key), len = sl + 1 + kl;
    seen_key *k = malloc(sizeof(*k) + len);
    uint64_t h;

    if (!k)
        return -ENOMEM;
    k->len = len;
    memcpy(k->sk, lx->section, sl + 1);
    memcpy(k->sk + sl + 1, key, kl);
    h = fnv1a(k->sk, len);
    if (gr__htab_find(&lx->seen, h, seen_eq, k)) {
        free(k);
        return -EEXIST;
    }
    gr__htab_insert(&lx->seen, &k->hn, h);
    return 0;
}

/* One line, NUL-terminated, no '\n'. */
static int parse_line(lexer *lx, char *line, char *msg, size_t msglen)
{
    char *s = trim(line), *eq, *key, *value;
    int rc;

    if (*s == '\0' || *s == '#' || *s == ';')
        return 0;
    if (*s == '[') {
        char *close = strchr(s, ']'), *rest;

        if (!close) {
            msg_set(msg, msglen, "expected \"[section]\"");
            return -EINVAL;
        }
        *close = '\0';
        rest = trim(close + 1);
        if (*rest && *rest != '#' && *rest != ';') {
            msg_set(msg, msglen, "expected \"[section]\"");
            return -EINVAL;
        }
        lx->section = trim(s + 1);
        return lx->cb(lx->arg, lx->section, NULL, NULL, msg, msglen);
    }
    eq = strchr(s, '=');
    if (!eq || eq == s) {
        msg_set(msg, msglen, "expected \"key = value\"");
        return -EINVAL;
    }
    if (!lx->section) {
        msg_set(msg, msglen, "key outside any section");
        return -EINVAL;
    }
    *eq = '\0';
    key = trim(s);
    value = parse_value(eq + 1, msg, msglen);
    if (!value)
        return -EINVAL;
    rc = seen_add(lx, key);
    if (rc == -EEXIST) {
        msg_set(msg, msglen, "\"%.*s%s\" is set twice in [%.*s]",
                (int)(strlen(key) > INI_QUOTE_MAX ? INI_QUOTE_MAX : strlen(key)), key,
                strlen(key) > INI_QUOTE_MAX ? "..." : "", INI_QUOTE_MAX, lx->section);
        return -EINVAL;
    }
    if (rc < 0) {
        msg_set(msg, msglen, "out of memory");
        return rc;
    }
    return lx->cb(lx->arg, lx->section, key, value, msg, msglen);
}

int gr__ini_parse(const char *text, size_t len, const char *name, gr__ini_cb cb, void *arg,
                  char *err, size_t errlen)
{
    lexer lx = { .name = name ? name : "config", .cb = cb, .arg = arg };
    char msg[512], *buf, *p, *end;
    unsigned line = 0;
    int rc = 0;

    buf = malloc(len + 1);
    if (!buf || gr__htab_init(&lx.seen, 64) < 0) {
        free(buf);
        msg_set(err, errlen, "%s: out of memory", lx.name);
        return -ENOMEM;
    }
    if (len)
        memcpy(buf, text, len);
    buf[len] = '\0';
    p = buf;
    end = buf + len;
    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
        p += 3;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *eol = nl ? nl : end;

        line++;
        *eol = '\0';
        if (strlen(p) != (size_t)(eol - p)) {
            msg_set(err, errlen, "%s:%u: NUL byte in line", lx.name, line);
            rc = -EINVAL;
            break;
        }
        if (eol > p && eol[-1] == '\r')
            eol[-1] = '\0';
        msg[0] = '\0';
        rc = parse_line(&lx, p, msg, sizeof(msg));
        if (rc < 0) {
            msg_set(err, errlen, "%s:%u: %s", lx.name, line, msg[0] ? msg : strerror(-rc));
            break;
        }
        p = eol + 1;
    }
    gr__htab_walk(&lx.seen, seen_free, NULL);
    gr__htab_fini(&lx.seen);
    free(buf);
    return rc;
}

int gr__ini_load(const char *path, gr__ini_cb cb, void *arg, char *err, size_t errlen)
{
    size_t cap = 64 * 1024, len = 0;
    char *buf = NULL;
    int fd, rc;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        msg_set(err, errlen, "%s: %s", path, strerror(errno));
        return rc;
    }
    buf = malloc(cap);
    if (!buf) {
        msg_set(err, errlen, "%s: out of memory", path);
        rc = -ENOMEM;
        goto out;
    }
    for (;;) {
        ssize_t n;

        if (len == cap) {
            char *nb;
            if (cap > INI_FILE_MAX) {
                msg_set(err, errlen, "%s: larger than %d bytes", path, INI_FILE_MAX);
                rc = -EFBIG;
                goto out;
            }
            nb = realloc(buf, cap * 2);
            if (!nb) {
                msg_set(err, errlen, "%s: out of memory", path);
                rc = -ENOMEM;
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            msg_set(err, errlen, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len > INI_FILE_MAX) {
        msg_set(err, errlen, "%s: larger than %d bytes", path, INI_FILE_MAX);
        rc = -EFBIG;
        goto out;
    }
    rc = gr__ini_parse(buf, len, path, cb, arg, err, errlen);
out:
    free(buf);
    close(fd);
    return rc;
}

typedef struct get_ctx {
    const char *section, *key;
    char *out;
    size_t outlen;
    int rc;                     /* -ENOENT until found */
} get_ctx;

static int get_cb(void *arg, const char *section, const char *key, const char *value, char *msg,
                  size_t msglen)
{
    get_ctx *g = arg;

    (void)msg;
    (void)msglen;
    if (!key || strcmp(section, g->section) || strcmp(key, g->key))
        return 0;
    if (strlen(value) >= g->outlen) {
        g->rc = -ENAMETOOLONG;
        return 0;
    }
    memcpy(g->out, value, strlen(value) + 1);
    g->rc = 0;
    return 0;
}

int gr__ini_get(const char *path, const char *section, const char *key, char *out,
                size_t outlen, char *err, size_t errlen)
{
    get_ctx g = { section, key, out, outlen, -ENOENT };
    int rc = gr__ini_load(path, get_cb, &g, err, errlen);

    if (rc < 0)
        return rc;
    if (g.rc == -ENOENT)
        msg_set(err, errlen, "%s: no \"%s\" in [%s]", path, key, section);
    else if (g.rc == -ENAMETOOLONG)
        msg_set(err, errlen, "%s: [%s] %s is too long", path, section, key);
    return g.rc;
}
