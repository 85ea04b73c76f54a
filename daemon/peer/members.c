/*
 * members.c - the peer cache's membership and rendezvous hashing.
 */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "members.h"

__attribute__((format(printf, 3, 4)))
static void err_set(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int members_split(const char *hp, char *host, size_t hostlen, char *port, size_t portlen)
{
    const char *colon;
    size_t hl;

    if (hp[0] == '[') {
        const char *close = strchr(hp, ']');
        if (!close || close[1] != ':')
            return -EINVAL;
        hl = (size_t)(close - hp - 1);
        hp++;
        colon = close + 1;
    } else {
        colon = strrchr(hp, ':');
        if (!colon || strchr(hp, ':') != colon)
            return -EINVAL;
        hl = (size_t)(colon - hp);
    }
    if (hl == 0 || hl >= hostlen || strlen(colon + 1) == 0 || strlen(colon + 1) >= portlen)
        return -EINVAL;
    for (const char *p = colon + 1; *p; p++)
        if (!isdigit((unsigned char)*p))
            return -EINVAL;
    if (atoi(colon + 1) < 1 || atoi(colon + 1) > 65535)
        return -EINVAL;
    memcpy(host, hp, hl);
    host[hl] = '\0';
    snprintf(port, portlen, "%s", colon + 1);
    return 0;
}

int members_expand(const char *entry, int (*cb)(void *arg, const char *name), void *arg)
{
    const char *open = strchr(entry, '['), *close;
    char name[MEMBER_NAME_MAX];
    unsigned count = 0;

    /* "[v6]:port" is an address, not a range. */
    if (!open || open == entry)
        return strlen(entry) < sizeof(name) ? cb(arg, entry) : -EINVAL;
    close = strchr(open, ']');
    if (!close || strchr(close + 1, '[') || close == open + 1)
        return -EINVAL;
    for (const char *p = open + 1; p < close;) {
        const char *q = p;
        unsigned long lo, hi;
        int width;

        while (q < close && isdigit((unsigned char)*q))
            q++;
        if (q == p || q - p > 9)
            return -EINVAL;
        width = (int)(q - p);
        lo = strtoul(p, NULL, 10);
        hi = lo;
        if (*q == '-') {
            const char *r = ++q;
            while (q < close && isdigit((unsigned char)*q))
                q++;
            if (q == r || q - r > 9)
                return -EINVAL;
            hi = strtoul(r, NULL, 10);
        }
        if (hi < lo || (q < close && *q != ','))
            return -EINVAL;
        if (hi - lo >= MEMBERS_MAX || count + (hi - lo + 1) > MEMBERS_MAX)
            return -E2BIG;
        for (unsigned long v = lo; v <= hi; v++) {
            int n = snprintf(name, sizeof(name), "%.*s%0*lu%s", (int)(open - entry), entry, width,
                             v, close + 1);
            int rc;
            if (n < 0 || (size_t)n >= sizeof(name))
                return -EINVAL;
            if ((rc = cb(arg, name)) != 0)
                return rc;
            count++;
        }
        p = q < close ? q + 1 : q;
    }
    return 0;
}

typedef struct build_ctx {
    members *ms;
    unsigned cap;
    const char *defport;
    char *err;
    size_t errlen;
} build_ctx;

static int resolve(const char *host, const char *port, struct sockaddr_storage *ss,
                   socklen_t *len)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);

    if (rc != 0 || !ai)
        return -ENOENT;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
        return x->sin6_port == y->sin6_port &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return 0;
}

static int add_one(void *arg, const char *name)
{
    build_ctx *b = arg;
    members *ms = b->ms;
    member *m;
    char full[MEMBER_NAME_MAX];

    /* A bare host takes listen's port; "[v6]" likewise. */
    if (name[0] == '[' ? !strstr(name, "]:") : !strchr(name, ':')) {
        if (snprintf(full, sizeof(full), "%s:%s", name, b->defport) >= (int)sizeof(full)) {
            err_set(b->err, b->errlen, "[peer] nodes: \"%.64s\" is too long", name);
            return -EINVAL;
        }
    } else {
        snprintf(full, sizeof(full), "%s", name);
    }
    if (ms->n == MEMBERS_MAX) {
        err_set(b->err, b->errlen, "[peer] nodes: more than %d members", MEMBERS_MAX);
        return -E2BIG;
    }
    if (ms->n == b->cap) {
        unsigned cap = b->cap ? b->cap * 2 : 16;
        member *nm = realloc(ms->m, cap * sizeof(*nm));
        if (!nm)
            return -ENOMEM;
        ms->m = nm;
        b->cap = cap;
    }
    m = &ms->m[ms->n];
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", full);
    if (members_split(full, m->host, sizeof(m->host), m->port, sizeof(m->port)) < 0) {
        err_set(b->err, b->errlen, "[peer] nodes: \"%.64s\" is not HOST:PORT", full);
        return -EINVAL;
    }
    if (resolve(m->host, m->port, &m->addr, &m->addrlen) < 0) {
        err_set(b->err, b->errlen, "[peer] nodes: cannot resolve \"%.64s\"", m->host);
        return -ENOENT;
    }
    for (unsigned i = 0; i < ms->n; i++) {
        if (!strcmp(ms->m[i].name, m->name) || same_addr(&ms->m[i].addr, &m->addr)) {
            err_set(b->err, b->errlen, "[peer] nodes: \"%.64s\" is listed twice (as \"%.64s\")",
                    m->name, ms->m[i].name);
            return -EINVAL;
        }
    }
    m->hash = XXH3_64bits(m->name, strlen(m->name));
    ms->n++;
    return 0;
}

/* Each blank- or comma-separated word of text, expanded. */
static int add_words(build_ctx *b, const char *text, const char *what)
{
    const char *p = text;
    char word[MEMBER_NAME_MAX];

    while (*p) {
        const char *q;
        int rc;
        size_t len;
        int depth = 0;

        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        if (*p == '#') {            /* a hostfile's comment, to the end of the line */
            while (*p && *p != '\n')
                p++;
            continue;
        }
        if (!*p)
            break;
        /* Commas inside a range's brackets belong to the range. */
        for (q = p; *q && !isspace((unsigned char)*q) && (depth || *q != ','); q++)
            depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
        len = (size_t)(q - p);
        if (len >= sizeof(word)) {
            err_set(b->err, b->errlen, "%s: an entry is too long (\"%.40s...\")", what, p);
            return -EINVAL;
        }
        memcpy(word, p, len);
        word[len] = '\0';
        rc = members_expand(word, add_one, b);
        if (rc == -EINVAL && b->err && !strstr(b->err, "[peer]"))
            err_set(b->err, b->errlen, "%s: malformed range in \"%.64s\"", what, word);
        if (rc == -E2BIG)
            err_set(b->err, b->errlen, "%s: more than 4096 members (\"%.64s\")", what, word);
        if (rc != 0)
            return rc;
        p = q;
    }
    return 0;
}

int members_build(const char *listen, const char *spec, const char *file, members *out,
                  char *err, size_t errlen)
{
    build_ctx b = { .ms = out, .err = err, .errlen = errlen };
    char host[256], port[8];
    struct sockaddr_storage self;
    socklen_t selflen;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    out->self = -1;
    if (err && errlen)
        err[0] = '\0';
    if (members_split(listen, host, sizeof(host), port, sizeof(port)) < 0) {
        err_set(err, errlen, "[peer] listen: \"%.64s\" is not HOST:PORT", listen);
        return -EINVAL;
    }
    if (resolve(host, port, &self, &selflen) < 0) {
        err_set(err, errlen, "[peer] listen: cannot resolve \"%.64s\"", host);
        return -ENOENT;
    }
    b.defport = port;
    if (spec && *spec)
        rc = add_words(&b, spec, "[peer] nodes");
    if (rc == 0 && file && *file) {
        FILE *f = fopen(file, "re");
        char *text = NULL;
        size_t cap = 0, len = 0;

        if (!f) {
            err_set(err, errlen, "[peer] nodes_file %.200s: %s", file, strerror(errno));
            rc = -ENOENT;
        } else {
            char line[1024];
            while (fgets(line, sizeof(line), f)) {
                size_t l = strlen(line);
                if (len + l + 2 > cap) {
                    char *nt = realloc(text, cap = (len + l + 2) * 2);
                    if (!nt) {
                        rc = -ENOMEM;
                        break;
                    }
                    text = nt;
                }
                memcpy(text + len, line, l);
                len += l;
                text[len] = '\0';
            }
            fclose(f);
            if (rc == 0 && text)
                rc = add_words(&b, text, "[peer] nodes_file");
            free(text);
        }
    }
    if (rc == 0) {
        for (unsigned i = 0; i < out->n; i++)
            if (same_addr(&out->m[i].addr, &self))
                out->self = (int)i;
        if (out->self < 0) {
            err_set(err, errlen, "[peer] listen %.64s is not one of the members in nodes (the node "
                    "finds itself by its listen address)", listen);
            rc = -EINVAL;
        }
    }
    if (rc != 0)
        members_free(out);
    return rc;
}

void members_free(members *ms)
{
    free(ms->m);
    ms->m = NULL;
    ms->n = 0;
    ms->self = -1;
}

/* splitmix64's finaliser: the weight of (key, member). */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

void members_owners(const members *ms, uint64_t key, int out[2])
{
    uint64_t best = 0, second = 0;

    out[0] = out[1] = -1;
    for (unsigned i = 0; i < ms->n; i++) {
        uint64_t w = mix(key ^ ms->m[i].hash);
        if (out[0] < 0 || w > best) {
            second = best;
            out[1] = out[0];
            best = w;
            out[0] = (int)i;
        } else if (out[1] < 0 || w > second) {
            second = w;
            out[1] = (int)i;
        }
    }
}
