/*
 * metrics.c - the Prometheus endpoint (see metrics.h): listen-address
 * parsing, the listening socket, the evhttp callback, and the text
 * rendering of a gr_stats snapshot.
 *
 * The socket is made here rather than by evhttp_bind_socket so that a bind
 * failure comes back with its errno (evhttp only logs it), and so that TCP
 * and Unix sockets take the same path into evhttp_accept_socket.
 *
 * A scrape costs one snapshot and a few KiB of text; nothing is kept
 * between scrapes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "log.h"
#include "metrics.h"
#include "usock.h"

#define METRICS_PREFIX     "granary_"
#define METRICS_BACKLOG    16
#define METRICS_TIMEOUT_S  10        /* idle or slow scrapers are dropped */
#define METRICS_MAX_HEADER 16384
#define METRICS_MAX_BODY   4096      /* a scrape has no body */

#define UNIX_PREFIX "unix:"
#define SUN_PATH_MAX sizeof(((struct sockaddr_un *)0)->sun_path)

struct metrics {
    struct evhttp *http;        /* owns the listening socket and scrapes */
    metrics_snapshot_fn snap;
    void *arg;
    metrics_extra_fn extra;
    void *extra_arg;
    char addr[SUN_PATH_MAX + 16];       /* metrics_address() */
    gr__listener lis;           /* unix: the socket file we made (its fd is evhttp's) */
};


/* ---- rendering ---------------------------------------------------------- */

void metrics_set_extra(metrics *m, metrics_extra_fn fn, void *arg)
{
    m->extra = fn;
    m->extra_arg = arg;
}

static int ends_with(const char *s, const char *sfx)
{
    size_t n = strlen(s), m = strlen(sfx);

    return n >= m && strcmp(s + n - m, sfx) == 0;
}

/* "# HELP name text" and "# TYPE name type"; HELP escapes '\' and newline
 * as the format requires. */
static int family(struct evbuffer *out, const char *name, const char *help, const char *type)
{
    int rc = 0;

    rc |= evbuffer_add_printf(out, "# HELP %s ", name);
    for (const char *p = help; *p;) {
        size_t n = strcspn(p, "\\\n");

        rc |= evbuffer_add(out, p, n);
        p += n;
        if (*p) {
            rc |= evbuffer_add(out, *p == '\\' ? "\\\\" : "\\n", 2);
            p++;
        }
    }
    rc |= evbuffer_add_printf(out, "\n# TYPE %s %s\n", name, type);
    return rc < 0 ? -1 : 0;
}

/* One table row: counters get "_total" unless the name has it already
 * (connections_total), so every counter ends in _total exactly once.  A
 * counter kept in microseconds (NAME_microseconds) is exported in the base
 * unit, as NAME_seconds_total. */
static int scalar(struct evbuffer *out, const char *kind, const char *name, const char *help,
                  uint64_t v)
{
    int counter = strcmp(kind, "counter") == 0;
    char full[128];

    if (counter && ends_with(name, "_microseconds")) {
        snprintf(full, sizeof(full), METRICS_PREFIX "%.*s_seconds_total",
                 (int)(strlen(name) - strlen("_microseconds")), name);
        if (family(out, full, help, "counter") < 0 ||
            evbuffer_add_printf(out, "%s %llu.%06llu\n", full, (unsigned long long)(v / 1000000),
                                (unsigned long long)(v % 1000000)) < 0)
            return -1;
        return 0;
    }

    snprintf(full, sizeof(full), METRICS_PREFIX "%s%s", name,
             counter && !ends_with(name, "_total") ? "_total" : "");
    if (family(out, full, help, counter ? "counter" : "gauge") < 0 ||
        evbuffer_add_printf(out, "%s %llu\n", full, (unsigned long long)v) < 0)
        return -1;
    return 0;
}

/* Per-tier series, each a pair of existing table fields. */
static const struct {
    const char *name, *type, *help;
    size_t dram, nvme;          /* offsets of the uint64_t fields in gr_stats */
} tier_series[] = {
    { "tier_used_bytes", "gauge",
      "bytes in use in the tier (DRAM: arena bytes cached, leased or in flight; NVMe: on disk)",
      offsetof(gr_stats, dram_used_bytes), offsetof(gr_stats, nvme_used_bytes) },
    { "tier_capacity_bytes", "gauge", "capacity of the tier (0: tier disabled)",
      offsetof(gr_stats, dram_capacity_bytes), offsetof(gr_stats, nvme_capacity_bytes) },
    { "tier_chunks", "gauge", "chunks held by the tier",
      offsetof(gr_stats, dram_chunks), offsetof(gr_stats, nvme_chunks) },
    { "tier_hits_total", "counter", "chunk lookups served from the tier",
      offsetof(gr_stats, hits_dram), offsetof(gr_stats, hits_nvme) },
    { "tier_evictions_total", "counter", "chunks evicted from the tier",
      offsetof(gr_stats, evictions_dram), offsetof(gr_stats, evictions_nvme) },
};

static uint64_t field_at(const gr_stats *st, size_t off)
{
    uint64_t v;

    memcpy(&v, (const char *)st + off, sizeof(v));
    return v;
}

static int tiers(const gr_stats *st, struct evbuffer *out)
{
    for (size_t i = 0; i < sizeof(tier_series) / sizeof(tier_series[0]); i++) {
        char full[64];

        snprintf(full, sizeof(full), METRICS_PREFIX "%s", tier_series[i].name);
        if (family(out, full, tier_series[i].help, tier_series[i].type) < 0 ||
            evbuffer_add_printf(out, "%s{tier=\"dram\"} %llu\n%s{tier=\"nvme\"} %llu\n", full,
                                (unsigned long long)field_at(st, tier_series[i].dram), full,
                                (unsigned long long)field_at(st, tier_series[i].nvme)) < 0)
            return -1;
    }
    return 0;
}

static const char *const latency_names[GR_LAT_NOPS] = {
#define GR_LATENCY_NAME(name, help) #name,
    GR_LATENCY_OPS(GR_LATENCY_NAME)
#undef GR_LATENCY_NAME
};

static int histograms(const gr_stats *st, struct evbuffer *out)
{
    static const char name[] = METRICS_PREFIX "request_duration_seconds";
    static const char help[] =
        "seconds from receiving a request to queuing its answer."
#define GR_LATENCY_HELP(op, text) " op=\"" #op "\": " text "."
        GR_LATENCY_OPS(GR_LATENCY_HELP)
#undef GR_LATENCY_HELP
        ;
    int rc = family(out, name, help, "histogram");

    /* evbuffer_add_printf returns a length or -1: OR-ing keeps the sign. */
    for (unsigned op = 0; op < GR_LAT_NOPS && rc >= 0; op++) {
        const gr_latency *h = &st->latency[op];
        uint64_t cum = 0;

        for (unsigned i = 0; i < GR_LATENCY_NBOUNDS; i++) {
            cum += h->buckets[i];
            rc |= evbuffer_add_printf(out, "%s_bucket{op=\"%s\",le=\"%g\"} %llu\n", name,
                                      latency_names[op], (double)gr_latency_bound_ns(i) / 1e9,
                                      (unsigned long long)cum);
        }
        /* +Inf is the count by definition: every observation went in
         * exactly one bucket. */
        rc |= evbuffer_add_printf(out, "%s_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", name,
                                  latency_names[op], (unsigned long long)h->count);
        rc |= evbuffer_add_printf(out, "%s_sum{op=\"%s\"} %llu.%09llu\n", name,
                                  latency_names[op],
                                  (unsigned long long)(h->sum_ns / 1000000000u),
                                  (unsigned long long)(h->sum_ns % 1000000000u));
        rc |= evbuffer_add_printf(out, "%s_count{op=\"%s\"} %llu\n", name, latency_names[op],
                                  (unsigned long long)h->count);
    }
    return rc < 0 ? -1 : 0;
}

/* The table drives the first part: one family per row. */
int metrics_render(const gr_stats *st, struct evbuffer *out)
{
    int rc = 0;

#define GR_STATS_RENDER(kind, name, help) \
    if (rc == 0) \
        rc = scalar(out, #kind, #name, help, st->name);
    GR_STATS(GR_STATS_RENDER)
#undef GR_STATS_RENDER
    if (rc == 0)
        rc = tiers(st, out);
    if (rc == 0)
        rc = histograms(st, out);
    return rc < 0 ? -ENOMEM : 0;
}

/* ---- HTTP --------------------------------------------------------------- */

static void metrics_request(struct evhttp_request *req, void *arg)
{
    metrics *m = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    struct evkeyvalq *hdrs = evhttp_request_get_output_headers(req);
    struct evbuffer *body;
    gr_stats st;

    if (!path || strcmp(path, "/metrics") != 0) {
        evhttp_send_error(req, HTTP_NOTFOUND, NULL);
        return;
    }
    body = evbuffer_new();
    if (!body) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        /* Not evhttp_send_error: it drops the headers, Allow included. */
        evhttp_add_header(hdrs, "Allow", "GET, HEAD");
        evhttp_add_header(hdrs, "Content-Type", "text/plain; charset=utf-8");
        evbuffer_add_printf(body, "only GET and HEAD\n");
        evhttp_send_reply(req, HTTP_BADMETHOD, "Method Not Allowed", body);
        evbuffer_free(body);
        return;
    }
    memset(&st, 0, sizeof(st));
    m->snap(m->arg, &st);
    if (metrics_render(&st, body) < 0 || (m->extra && m->extra(m->extra_arg, body) < 0)) {
        evbuffer_free(body);
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    evhttp_add_header(hdrs, "Content-Type", METRICS_CONTENT_TYPE);
    evhttp_add_header(hdrs, "Cache-Control", "no-store");
    evhttp_send_reply(req, HTTP_OK, "OK", body);
    evbuffer_free(body);
}

/* ---- the listening socket ------------------------------------------------ */

/* Split "HOST:PORT" / "[V6]:PORT" / ":PORT" into host (possibly "") and
 * port (digits, at most 65535). */
static int split_hostport(const char *s, char *host, size_t hostlen, char *port,
                          size_t portlen, char *err, size_t errlen)
{
    const char *h = s, *colon;
    size_t hl;
    unsigned long v = 0;

    if (*s == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':') {
            err_set(err, errlen, "\"%s\": expected [IPV6ADDRESS]:PORT", s);
            return -EINVAL;
        }
        h = s + 1;
        hl = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) {
            err_set(err, errlen, "\"%s\": expected HOST:PORT or unix:/PATH", s);
            return -EINVAL;
        }
        hl = (size_t)(colon - s);
        if (memchr(s, ':', hl)) {
            err_set(err, errlen, "\"%s\": write an IPv6 address in brackets: [ADDRESS]:PORT", s);
            return -EINVAL;
        }
    }
    if (hl >= hostlen) {
        err_set(err, errlen, "\"%s\": host name too long", s);
        return -EINVAL;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    if (!colon[1] || strlen(colon + 1) > 5 || strlen(colon + 1) >= portlen) {
        err_set(err, errlen, "\"%s\": expected a port number 0..65535 after the ':'", s);
        return -EINVAL;
    }
    for (const char *p = colon + 1; *p; p++) {
        if (*p < '0' || *p > '9') {
            err_set(err, errlen, "\"%s\": expected a port number 0..65535 after the ':'", s);
            return -EINVAL;
        }
        v = v * 10 + (unsigned long)(*p - '0');
    }
    if (v > 65535) {
        err_set(err, errlen, "\"%s\": port %lu is above 65535", s, v);
        return -EINVAL;
    }
    snprintf(port, portlen, "%lu", v);
    return 0;
}

/* "ADDR:PORT" or "[ADDR]:PORT" of a bound socket. */
static void format_inet(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN] = "?";

    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
        snprintf(buf, len, "[%s]:%u", a, (unsigned)ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
        snprintf(buf, len, "%s:%u", a, (unsigned)ntohs(s4->sin_port));
    }
}

/* A listening TCP socket for spec; fd or -errno. */
static int listen_inet(metrics *m, const char *spec, char *err, size_t errlen)
{
    struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                              .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[256], port[8];
    int rc, fd = -1, one = 1, gai;

    rc = split_hostport(spec, host, sizeof(host), port, sizeof(port), err, errlen);
    if (rc < 0)
        return rc;
    gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (gai != 0) {
        err_set(err, errlen, "\"%s\": %s", spec,
               gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
        return -EINVAL;
    }
    rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            rc = -errno;
            err_set(err, errlen, "\"%s\": socket: %s", spec, strerror(errno));
            continue;
        }
        /* Restart at once despite TIME_WAIT connections of old scrapes. */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, METRICS_BACKLOG) == 0)
            break;
        rc = -errno;
        err_set(err, errlen, "\"%s\": bind: %s%s", spec, strerror(errno),
               errno == EADDRINUSE ? " (another granaryd or exporter on this port? set "
                                     "[metrics] listen to a free port, or empty for off)" : "");
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return rc;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        format_inet(&ss, m->addr, sizeof(m->addr));
    else
        snprintf(m->addr, sizeof(m->addr), "%s", spec);
    return fd;
}

/* A listening Unix socket at path (common/usock.h: only a stale socket is
 * ever replaced); fd or -errno.  The metrics keep the listener's identity
 * to remove the socket file at stop. */
static int listen_unix(metrics *m, const char *path, char *err, size_t errlen)
{
    char why[256];
    int rc;

    if (path[0] != '/') {
        err_set(err, errlen, "\"unix:%s\": need an absolute path", path);
        return -EINVAL;
    }
    rc = gr__unix_listen(&m->lis, path, SOCK_STREAM, 0660, METRICS_BACKLOG, why, sizeof(why));
    if (rc < 0) {
        err_set(err, errlen, "\"unix:%s\": %s", path, why);
        return rc == -ENAMETOOLONG ? -EINVAL : rc;   /* a bad address, like the others */
    }
    snprintf(m->addr, sizeof(m->addr), UNIX_PREFIX "%s", path);
    rc = m->lis.fd;
    m->lis.fd = -1;             /* evhttp owns it from here */
    return rc;
}

int metrics_start(struct event_base *base, const char *spec, metrics_snapshot_fn snap,
                  void *arg, metrics **out, char *err, size_t errlen)
{
    metrics *m;
    int fd, rc;

    *out = NULL;
    if (!spec || !*spec) {
        err_set(err, errlen, "no listen address");
        return -EINVAL;
    }
    m = calloc(1, sizeof(*m));
    if (!m) {
        err_set(err, errlen, "out of memory");
        return -ENOMEM;
    }
    m->snap = snap;
    m->arg = arg;
    if (strncmp(spec, UNIX_PREFIX, strlen(UNIX_PREFIX)) == 0)
        fd = listen_unix(m, spec + strlen(UNIX_PREFIX), err, errlen);
    else
        fd = listen_inet(m, spec, err, errlen);
    if (fd < 0) {
        rc = fd;
        goto fail;
    }
    m->http = evhttp_new(base);
    if (!m->http) {
        close(fd);
        err_set(err, errlen, "evhttp_new failed");
        rc = -ENOMEM;
        goto fail;
    }
    evhttp_set_timeout(m->http, METRICS_TIMEOUT_S);
    evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADER);
    evhttp_set_max_body_size(m->http, METRICS_MAX_BODY);
    evhttp_set_gencb(m->http, metrics_request, m);
    /* From here the listener owns fd (closed by evhttp_free). */
    if (!evhttp_accept_socket_with_handle(m->http, fd)) {
        close(fd);
        err_set(err, errlen, "%s: cannot serve HTTP on the socket", m->addr);
        rc = -ENOMEM;
        goto fail;
    }
    *out = m;
    return 0;
fail:
    metrics_stop(&m);
    return rc;
}

const char *metrics_address(const metrics *m)
{
    return m->addr;
}

void metrics_stop(metrics **mp)
{
    metrics *m = *mp;

    if (!m)
        return;
    if (m->http)
        evhttp_free(m->http);
    gr__unix_close(&m->lis);   /* its fd went with evhttp_free */
    free(m);
    *mp = NULL;
}
