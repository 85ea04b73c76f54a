/*
 * check_metrics.c - tests of daemon/metrics.c and the latency histograms of
 * stats.h: the text rendering of a snapshot is well-formed Prometheus text
 * format 0.0.4 (every sample after its family's HELP and TYPE, families
 * contiguous and declared once, legal names, histogram buckets cumulative
 * and ending in +Inf == _count), every GR_STATS row appears with its value,
 * bucket boundaries, and the HTTP endpoint itself over TCP and a Unix
 * socket (200 / 404 / 405, content type, listen-address errors, a port or
 * socket already taken).
 *
 * The HTTP tests pump the event loop from the test's own thread while a
 * plain blocking-connect client waits for the reply.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "metrics.h"
#include "stats.h"
#include "testutil.h"

/* ---- helpers ---- */

/* A snapshot with every table field set to a distinct value (row i: 1000+i)
 * and latencies spread over the buckets, including both edges. */
static void fill_stats(gr_stats *st)
{
    unsigned i = 0;
    static const uint64_t ns[] = {
        0, 1, 9999, 10000, 10001, 24999, 25000, 300000, 1000000, 999999999,
        1000000000, 9999999999u, 10000000000u, 10000000001u, 3600000000000u,
    };

    memset(st, 0, sizeof(*st));
#define FILL(kind, name, help) st->name = 1000 + i++;
    GR_STATS(FILL)
#undef FILL
    for (unsigned k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
        gr_latency_record(&st->latency[GR_LAT_read], ns[k]);
    gr_latency_record(&st->latency[GR_LAT_open], 42000);
}

static char *render(const gr_stats *st)
{
    struct evbuffer *b = evbuffer_new();
    size_t n;
    char *s;

    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(metrics_render(st, b), 0);
    n = evbuffer_get_length(b);
    s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(evbuffer_remove(b, s, n), (int)n);
    s[n] = '\0';
    evbuffer_free(b);
    return s;
}

/* ^[a-zA-Z_:][a-zA-Z0-9_:]*$ (metric) or without ':' (label). */
static int name_ok(const char *s, size_t n, int colon)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (colon && c == ':');
        if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

#define MAXFAM 256

typedef struct family {
    char name[128];
    char type[16];
    int help, closed;
} family;

typedef struct hist_state {
    char op[32];
    double last_le, last_count;
    int buckets, inf;
    double inf_count;
} hist_state;

/* The value of the sample line "name value" (no labels) in text; -1 if absent. */
static double sample_value(const char *text, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return -1;
}

/*
 * Check text line by line; fails the test with the line on any breach.
 * Returns the number of samples.
 */
static int check_exposition(char *text)
{
    static family fam[MAXFAM];
    int nfam = 0, samples = 0, cur = -1;
    hist_state hs = { .last_le = -INFINITY };
    char *save = NULL;

    memset(fam, 0, sizeof(fam));
    ck_assert_msg(text[0] && text[strlen(text) - 1] == '\n', "page must end in a newline");
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0) {
            int is_help = line[2] == 'H';
            char *name = line + 7, *sp = strchr(name, ' ');
            int f;

            ck_assert_msg(sp && sp[1], "no text after the name: %s", line);
            ck_assert_msg(name_ok(name, (size_t)(sp - name), 1), "bad name: %s", line);
            for (f = 0; f < nfam; f++)
                if (strlen(fam[f].name) == (size_t)(sp - name) &&
                    strncmp(fam[f].name, name, (size_t)(sp - name)) == 0)
                    break;
            if (f == nfam) {
                ck_assert_int_lt(nfam, MAXFAM);
                memcpy(fam[f].name, name, (size_t)(sp - name));
                nfam++;
            }
            ck_assert_msg(!fam[f].closed, "family declared again after others: %s", line);
            if (cur >= 0 && cur != f)
                fam[cur].closed = 1;
            cur = f;
            if (is_help) {
                ck_assert_msg(!fam[f].help && !fam[f].type[0], "HELP twice or after TYPE: %s",
                              line);
                fam[f].help = 1;
            } else {
                const char *t = sp + 1;
                ck_assert_msg(!fam[f].type[0], "TYPE twice: %s", line);
                ck_assert_msg(strcmp(t, "counter") == 0 || strcmp(t, "gauge") == 0 ||
                              strcmp(t, "histogram") == 0, "bad type: %s", line);
                snprintf(fam[f].type, sizeof(fam[f].type), "%s", t);
                if (strcmp(t, "counter") == 0)
                    ck_assert_msg(strlen(fam[f].name) > 6 &&
                                  strcmp(fam[f].name + strlen(fam[f].name) - 6, "_total") == 0,
                                  "counter without _total: %s", line);
                else
                    ck_assert_msg(strstr(fam[f].name, "_total") == NULL,
                                  "non-counter with _total: %s", line);
            }
            continue;
        }
        ck_assert_msg(line[0] != '#', "unknown comment: %s", line);
        {
            /* A sample: name[{labels}] value */
            char *p = line, *end;
            size_t nl = strcspn(line, "{ ");
            char base[128], le[32] = "", op[32] = "";
            double v;
            const family *fm;

            ck_assert_msg(name_ok(line, nl, 1), "bad sample name: %s", line);
            ck_assert_int_lt(nl, sizeof(base));
            memcpy(base, line, nl);
            base[nl] = '\0';
            p = line + nl;
            if (*p == '{') {
                p++;
                while (*p != '}') {
                    size_t ln = strcspn(p, "=");
                    char *q, *val;

                    ck_assert_msg(name_ok(p, ln, 0) && p[ln] == '=' && p[ln + 1] == '"',
                                  "bad label: %s", line);
                    q = val = p + ln + 2;
                    while (*q && *q != '"')
                        q += *q == '\\' ? 2 : 1;
                    ck_assert_msg(*q == '"', "unterminated label value: %s", line);
                    if (ln == 2 && strncmp(p, "le", 2) == 0)
                        snprintf(le, sizeof(le), "%.*s", (int)(q - val), val);
                    if (ln == 2 && strncmp(p, "op", 2) == 0)
                        snprintf(op, sizeof(op), "%.*s", (int)(q - val), val);
                    p = q + 1;
                    if (*p == ',')
                        p++;
                    else
                        ck_assert_msg(*p == '}', "bad label list: %s", line);
                }
                p++;
            }
            ck_assert_msg(*p == ' ', "no value: %s", line);
            v = strtod(p + 1, &end);
            ck_assert_msg(end != p + 1 && *end == '\0', "bad value: %s", line);
            ck_assert_msg(v >= 0, "negative value: %s", line);
            ck_assert_msg(cur >= 0, "sample before any HELP/TYPE: %s", line);
            fm = &fam[cur];
            ck_assert_msg(fm->help && fm->type[0], "sample before HELP and TYPE: %s", line);
            if (strcmp(fm->type, "histogram") == 0) {
                size_t fl = strlen(fm->name);
                const char *sfx = base + fl;

                ck_assert_msg(strncmp(base, fm->name, fl) == 0 &&
                              (strcmp(sfx, "_bucket") == 0 || strcmp(sfx, "_sum") == 0 ||
                               strcmp(sfx, "_count") == 0),
                              "sample outside its family %s: %s", fm->name, line);
                ck_assert_msg(op[0], "histogram sample without op: %s", line);
                if (strcmp(op, hs.op) != 0) {
                    ck_assert_msg(hs.op[0] == '\0' || hs.inf == 2,
                                  "histogram %s incomplete before %s", hs.op, line);
                    memset(&hs, 0, sizeof(hs));
                    hs.last_le = -INFINITY;
                    snprintf(hs.op, sizeof(hs.op), "%s", op);
                }
                if (strcmp(sfx, "_bucket") == 0) {
                    double l = strcmp(le, "+Inf") == 0 ? INFINITY : strtod(le, &end);

                    ck_assert_msg(le[0] && !hs.inf, "bucket after +Inf or no le: %s", line);
                    ck_assert_msg(l > hs.last_le, "le not increasing: %s", line);
                    ck_assert_msg(v >= hs.last_count, "buckets not cumulative: %s", line);
                    hs.last_le = l;
                    hs.last_count = v;
                    hs.buckets++;
                    if (isinf(l)) {
                        hs.inf = 1;
                        hs.inf_count = v;
                    }
                } else if (strcmp(sfx, "_count") == 0) {
                    ck_assert_msg(hs.inf == 1, "_count before +Inf: %s", line);
                    ck_assert_msg(v == hs.inf_count, "+Inf (%g) != _count: %s", hs.inf_count,
                                  line);
                    hs.inf = 2;
                } else {
                    ck_assert_msg(hs.inf == 1, "_sum before +Inf: %s", line);
                }
            } else {
                ck_assert_msg(strcmp(base, fm->name) == 0, "sample %s under family %s", base,
                              fm->name);
            }
            samples++;
        }
    }
    ck_assert_msg(hs.op[0] == '\0' || hs.inf == 2, "last histogram incomplete");
    return samples;
}

/* ---- rendering ---- */

START_TEST(test_render_wellformed)
{
    gr_stats st;
    char *text, *copy;
    int samples, rows = 0;

    fill_stats(&st);
    text = render(&st);
    copy = strdup(text);
    samples = check_exposition(copy);
    free(copy);
#define COUNT(kind, name, help) rows++;
    GR_STATS(COUNT)
#undef COUNT
    /* Table rows, 5 tier families x 2 tiers, (19 + 1 + 2) per op. */
    ck_assert_int_eq(samples, rows + 5 * 2 + GR_LAT_NOPS * (GR_LATENCY_NBOUNDS + 3));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE granary_request_duration_seconds histogram\n"));
    free(text);
}
END_TEST

/* Monotonic counts are counters, so Prometheus can rate them: every row
 * named like an error, skip, refusal or eviction count (the NVMe tier's
 * were exported as gauges). */
START_TEST(test_monotonic_counts_are_counters)
{
    static const char *const suffixes[] = { "_errors", "_skips", "_not_admitted", "_refused",
                                            "_failed", "_skipped" };
#define KIND(kind, field, help) \
    for (size_t k = 0; k < sizeof(suffixes) / sizeof(suffixes[0]); k++) { \
        size_t n = strlen(#field), m = strlen(suffixes[k]); \
        if ((n > m && strcmp(#field + n - m, suffixes[k]) == 0) || strncmp(#field, "evictions_", 10) == 0) \
            ck_assert_msg(strcmp(#kind, "counter") == 0, "%s is a %s", #field, #kind); \
    }
    GR_STATS(KIND)
#undef KIND
}
END_TEST

/* Every row of the table, by its name, kind and value: a counter added to
 * stats.h shows up with nothing else to change. */
START_TEST(test_render_every_row)
{
    gr_stats st;
    char *text, name[128], want[512];
    unsigned i = 0;

    fill_stats(&st);
    text = render(&st);
#define ROW(kind, field, help) \
    { \
        int counter = strcmp(#kind, "counter") == 0; \
        size_t n = strlen(#field); \
        int has_total = n > 6 && strcmp(#field + n - 6, "_total") == 0; \
        int usec = counter && n > 13 && strcmp(#field + n - 13, "_microseconds") == 0; \
        double v = 1000 + i; \
        if (usec) { /* exported in seconds */ \
            snprintf(name, sizeof(name), "granary_%.*s_seconds_total", (int)(n - 13), #field); \
            v /= 1e6; \
        } else { \
            snprintf(name, sizeof(name), "granary_%s%s", #field, counter && !has_total ? "_total" : ""); \
        } \
        ck_assert_msg(sample_value(text, name) == v, "%s missing or wrong", name); \
        snprintf(want, sizeof(want), "# HELP %s %s\n# TYPE %s %s\n", name, help, name, \
                 counter ? "counter" : "gauge"); \
        ck_assert_msg(strstr(text, want) != NULL, "no HELP/TYPE for %s", name); \
        i++; \
    }
    GR_STATS(ROW)
#undef ROW
    /* Tier series come from the tier fields. */
    snprintf(want, sizeof(want), "granary_tier_used_bytes{tier=\"dram\"} %llu\n",
             (unsigned long long)st.dram_used_bytes);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "granary_tier_capacity_bytes{tier=\"nvme\"} %llu\n",
             (unsigned long long)st.nvme_capacity_bytes);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "granary_tier_hits_total{tier=\"nvme\"} %llu\n",
             (unsigned long long)st.hits_nvme);
    ck_assert_ptr_nonnull(strstr(text, want));
    snprintf(want, sizeof(want), "granary_tier_evictions_total{tier=\"dram\"} %llu\n",
             (unsigned long long)st.evictions_dram);
    ck_assert_ptr_nonnull(strstr(text, want));
    /* connections_total is a counter already named _total: not doubled. */
    ck_assert_ptr_null(strstr(text, "_total_total"));
    free(text);
}
END_TEST

START_TEST(test_render_zero)
{
    gr_stats st;
    char *text;

    memset(&st, 0, sizeof(st));
    text = render(&st);
    ck_assert_ptr_nonnull(strstr(text, "granary_request_duration_seconds_bucket{op=\"open\","
                                       "le=\"+Inf\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "granary_request_duration_seconds_sum{op=\"open\"} "
                                       "0.000000000\n"));
    check_exposition(text);
    free(text);
}
END_TEST

/* le is an upper bound, inclusive: a value on a bound counts in it. */
START_TEST(test_histogram_buckets)
{
    gr_latency h;
    gr_stats st;
    char *text;

    memset(&h, 0, sizeof(h));
    for (unsigned i = 0; i < GR_LATENCY_NBOUNDS; i++) {
        ck_assert(i == 0 || gr_latency_bound_ns(i) > gr_latency_bound_ns(i - 1));
        gr_latency_record(&h, gr_latency_bound_ns(i));
        ck_assert_uint_eq(h.buckets[i], 1);
        gr_latency_record(&h, gr_latency_bound_ns(i) + 1);
        ck_assert_uint_eq(h.buckets[i + 1], 1);
        memset(&h, 0, sizeof(h));
    }
    ck_assert_uint_eq(gr_latency_bound_ns(0), 10000);                     /* 10 us */
    ck_assert_uint_eq(gr_latency_bound_ns(GR_LATENCY_NBOUNDS - 1), 10000000000u); /* 10 s */
    gr_latency_record(&h, UINT64_MAX / 4);
    ck_assert_uint_eq(h.buckets[GR_LATENCY_NBOUNDS], 1);
    ck_assert_uint_eq(h.count, 1);

    /* Rendered: three at 25 us, one just over 1 s; sum 1.001 s. */
    memset(&st, 0, sizeof(st));
    for (int k = 0; k < 3; k++)
        gr_latency_record(&st.latency[GR_LAT_read], 25000);
    gr_latency_record(&st.latency[GR_LAT_read], 1000000000 + 1000000 - 75000);
    text = render(&st);
    ck_assert_ptr_nonnull(strstr(text, "_bucket{op=\"read\",le=\"1e-05\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(text, "_bucket{op=\"read\",le=\"2.5e-05\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(text, "_bucket{op=\"read\",le=\"0.5\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(text, "_bucket{op=\"read\",le=\"1\"} 3\n"));
    ck_assert_ptr_nonnull(strstr(text, "_bucket{op=\"read\",le=\"2.5\"} 4\n"));
    ck_assert_ptr_nonnull(strstr(text, "_bucket{op=\"read\",le=\"10\"} 4\n"));
    ck_assert_ptr_nonnull(strstr(text, "_bucket{op=\"read\",le=\"+Inf\"} 4\n"));
    ck_assert_ptr_nonnull(strstr(text, "_sum{op=\"read\"} 1.001000000\n"));
    ck_assert_ptr_nonnull(strstr(text, "_count{op=\"read\"} 4\n"));
    free(text);
}
END_TEST

/* ---- HTTP ---- */

static int snaps;

static void fake_snapshot(void *arg, gr_stats *out)
{
    snaps++;
    fill_stats(out);
    out->misses = (uint64_t)(uintptr_t)arg;
}

/* Send req to the endpoint at addr (metrics_address form), pump base until
 * the server closes, return the whole response (malloc'd). */
static char *http(struct event_base *base, const char *addr, const char *req)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    int fd;
    struct timespec t0, t;

    memset(&ss, 0, sizeof(ss));
    if (strncmp(addr, "unix:", 5) == 0) {
        struct sockaddr_un *su = (struct sockaddr_un *)&ss;
        su->sun_family = AF_UNIX;
        snprintf(su->sun_path, sizeof(su->sun_path), "%s", addr + 5);
        sl = sizeof(*su);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    } else {
        struct sockaddr_in *si = (struct sockaddr_in *)&ss;
        const char *colon = strrchr(addr, ':');
        char host[64];

        ck_assert_ptr_nonnull(colon);
        snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
        si->sin_family = AF_INET;
        si->sin_port = htons((uint16_t)atoi(colon + 1));
        ck_assert_int_eq(inet_pton(AF_INET, host, &si->sin_addr), 1);
        sl = sizeof(*si);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    }
    ck_assert_int_ge(fd, 0);
    /* The kernel completes the connection from the backlog: no loop needed. */
    ck_assert_msg(connect(fd, (struct sockaddr *)&ss, sl) == 0, "connect %s: %s", addr,
                  strerror(errno));
    ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        ssize_t n;

        event_base_loop(base, EVLOOP_NONBLOCK);
        n = recv(fd, buf + len, cap - len - 1, MSG_DONTWAIT);
        if (n == 0)
            break;
        if (n > 0) {
            len += (size_t)n;
            ck_assert_uint_lt(len, cap - 1);
            continue;
        }
        ck_assert_msg(errno == EAGAIN || errno == EWOULDBLOCK, "recv: %s", strerror(errno));
        clock_gettime(CLOCK_MONOTONIC, &t);
        ck_assert_msg(t.tv_sec - t0.tv_sec < 3, "no complete response from %s", addr);
        usleep(1000);
    }
    close(fd);
    buf[len] = '\0';
    return buf;
}

/* The body of a response (after the blank line). */
static char *body_of(char *resp)
{
    char *b = strstr(resp, "\r\n\r\n");

    ck_assert_ptr_nonnull(b);
    return b + 4;
}

START_TEST(test_http_tcp)
{
    struct event_base *base = event_base_new();
    metrics *m = NULL;
    char err[256] = "", *r;
    const char *addr;

    ck_assert_ptr_nonnull(base);
    snaps = 0;
    ck_assert_msg(metrics_start(base, "127.0.0.1:0", fake_snapshot, (void *)(uintptr_t)77, &m,
                                err, sizeof(err)) == 0, "%s", err);
    addr = metrics_address(m);
    ck_assert_msg(strncmp(addr, "127.0.0.1:", 10) == 0 && atoi(addr + 10) > 0, "%s", addr);

    r = http(base, addr, "GET /metrics HTTP/1.0\r\n\r\n");
    ck_assert_msg(strncmp(r, "HTTP/1.0 200", 12) == 0 || strncmp(r, "HTTP/1.1 200", 12) == 0,
                  "%.200s", r);
    ck_assert_ptr_nonnull(strstr(r, "Content-Type: " METRICS_CONTENT_TYPE "\r\n"));
    ck_assert_ptr_nonnull(strstr(r, "\ngranary_misses_total 77\n"));
    ck_assert_int_eq(snaps, 1);
    check_exposition(body_of(r));
    free(r);

    /* A query string is still /metrics. */
    r = http(base, addr, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
    ck_assert_msg(strstr(r, " 200 ") != NULL, "%.200s", r);
    free(r);
    r = http(base, addr, "GET / HTTP/1.0\r\n\r\n");
    ck_assert_msg(strstr(r, " 404 ") != NULL, "%.200s", r);
    free(r);
    r = http(base, addr, "GET /metricsx HTTP/1.0\r\n\r\n");
    ck_assert_msg(strstr(r, " 404 ") != NULL, "%.200s", r);
    free(r);
    r = http(base, addr, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    ck_assert_msg(strstr(r, " 405 ") != NULL && strstr(r, "Allow: GET, HEAD"), "%.300s", r);
    free(r);
    r = http(base, addr, "garbage\r\n\r\n");
    ck_assert_msg(r[0] == '\0' || strstr(r, " 400 ") != NULL, "%.200s", r);
    free(r);
    ck_assert_int_eq(snaps, 2);

    metrics_stop(&m);
    ck_assert_ptr_null(m);
    metrics_stop(&m);               /* NULL-safe */
    event_base_free(base);
}
END_TEST

START_TEST(test_http_unix)
{
    struct event_base *base = event_base_new();
    char *dir = tu_mkdtemp(), spec[256], path[100], err[256] = "", *r;
    metrics *m = NULL, *m2 = NULL;
    struct stat st;
    int fd;

    ck_assert_ptr_nonnull(base);
    snprintf(path, sizeof(path), "%s/metrics.sock", dir);
    snprintf(spec, sizeof(spec), "unix:%s", path);

    /* A stale socket file (nobody listening) is replaced. */
    {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        close(fd);
    }
    ck_assert_msg(metrics_start(base, spec, fake_snapshot, (void *)(uintptr_t)5, &m, err,
                                sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(metrics_address(m), spec);
    r = http(base, spec, "GET /metrics HTTP/1.0\r\n\r\n");
    ck_assert_msg(strstr(r, " 200 ") != NULL, "%.200s", r);
    ck_assert_ptr_nonnull(strstr(r, "\ngranary_misses_total 5\n"));
    free(r);

    /* A live one is refused and left alone. */
    ck_assert_int_eq(metrics_start(base, spec, fake_snapshot, NULL, &m2, err, sizeof(err)),
                     -EADDRINUSE);
    ck_assert_ptr_null(m2);
    ck_assert_int_eq(stat(path, &st), 0);

    metrics_stop(&m);
    ck_assert_int_eq(stat(path, &st), -1);  /* removed at stop */

    /* Not a socket: refused, untouched. */
    fd = open(path, O_CREAT | O_WRONLY, 0644);
    close(fd);
    ck_assert_int_eq(metrics_start(base, spec, fake_snapshot, NULL, &m2, err, sizeof(err)),
                     -EEXIST);
    ck_assert_ptr_nonnull(strstr(err, "not a socket"));
    ck_assert_int_eq(stat(path, &st), 0);
    event_base_free(base);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(test_listen_errors)
{
    static const char *const bad[] = {
        "", "9464", "localhost", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:65536",
        "127.0.0.1:123456", "::1:9464", "[::1]9464", "[::1", "unix:", "unix:relative/path",
        "unix:/a/very/long/path/that/does/not/fit/in/sun_path/because/it/is/longer/than/"
        "one/hundred/and/eight/bytes/metrics.sock", "127.0.0.1:-1", "1.2.3.4.5:80",
    };
    struct event_base *base = event_base_new();
    metrics *m = NULL, *m2 = NULL;
    char err[512], spec[64];

    ck_assert_ptr_nonnull(base);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        ck_assert_msg(metrics_start(base, bad[i], fake_snapshot, NULL, &m, err, sizeof(err)) ==
                      -EINVAL, "\"%s\" accepted", bad[i]);
        ck_assert_ptr_null(m);
        ck_assert_msg(err[0] != '\0', "\"%s\": no message", bad[i]);
    }
    /* A port already taken: -EADDRINUSE, and the message says so. */
    ck_assert_msg(metrics_start(base, "127.0.0.1:0", fake_snapshot, NULL, &m, err,
                                sizeof(err)) == 0, "%s", err);
    snprintf(spec, sizeof(spec), "%s", metrics_address(m));
    ck_assert_int_eq(metrics_start(base, spec, fake_snapshot, NULL, &m2, err, sizeof(err)),
                     -EADDRINUSE);
    ck_assert_ptr_null(m2);
    ck_assert_msg(strstr(err, "Address already in use") && strstr(err, spec), "%s", err);
    metrics_stop(&m);
    /* Brackets for IPv6 parse (the address may be absent: any error but EINVAL). */
    {
        int rc = metrics_start(base, "[::1]:0", fake_snapshot, NULL, &m, err, sizeof(err));
        ck_assert_msg(rc == 0 || rc == -EADDRNOTAVAIL || rc == -EAFNOSUPPORT, "%d %s", rc, err);
        if (rc == 0)
            ck_assert_msg(strncmp(metrics_address(m), "[::1]:", 6) == 0, "%s",
                          metrics_address(m));
        metrics_stop(&m);
    }
    event_base_free(base);
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("render");
    TCase *net = tcase_create("http");

    tcase_add_test(tc, test_render_wellformed);
    tcase_add_test(tc, test_render_every_row);
    tcase_add_test(tc, test_monotonic_counts_are_counters);
    tcase_add_test(tc, test_render_zero);
    tcase_add_test(tc, test_histogram_buckets);
    suite_add_tcase(s, tc);
    tcase_set_timeout(net, 20);
    tcase_add_test(net, test_http_tcp);
    tcase_add_test(net, test_http_unix);
    tcase_add_test(net, test_listen_errors);
    suite_add_tcase(s, net);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(metrics_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
