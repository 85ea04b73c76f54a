/*
 * simulate.c - replay an access trace through every eviction policy of
 * daemon/policy.c, plus a never-evict baseline and Belady's offline optimum,
 * at several cache sizes, and print the hit ratios side by side
 * (bench/SIMULATE.md has the trace format and measured results).
 *
 *   simulate [--sizes R,R,...] [--capacity BYTES,...] [--warmup-epochs E]
 *            [--warmup N] [--json] TRACE|-
 *
 * --sizes gives each cache as a ratio dataset / cache (D/C), where the
 * dataset D is the bytes of all distinct keys in the trace: 1.1 means a
 * cache of D / 1.1 bytes, 10 a cache of a tenth of the data.
 *
 * Bench programs link only with libgranary.a, so the policies are compiled
 * in here.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../daemon/tiers/policy.c"

#define SIM_MAX_SIZES 32
#define SIM_NO_NEXT UINT64_MAX

enum { SIM_STATIC = POLICY_NKINDS, SIM_BELADY, SIM_NROWS };

typedef struct sim_trace {
    uint32_t *key;              /* per access: key id */
    uint64_t n, cap;            /* accesses */
    uint64_t *ksize;            /* per key: bytes (first occurrence) */
    uint64_t *khash;            /* per key: hash of its name */
    uint64_t nkeys, kcap;
    uint64_t unique_bytes;
    uint64_t *epoch_at;         /* access index of each "# epoch" line */
    uint64_t nepochs, ecap;
    uint64_t size_mismatches;   /* later lines of a key with another size */
    /* key interning: open addressing on name hash -> key id + 1 */
    uint32_t *tab;
    uint64_t tcap;
    char **names;
} sim_trace;

typedef struct sim_result {
    uint64_t capacity;
    double ratio;               /* D / C */
    uint64_t hits[SIM_NROWS], hit_bytes[SIM_NROWS];
} sim_result;

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "simulate: out of memory\n");
        exit(1);
    }
    return p;
}

static uint64_t name_hash(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;     /* FNV-1a, then mixed */

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return mix64(h);
}

static void tab_grow(sim_trace *t)
{
    uint64_t ncap = t->tcap ? 2 * t->tcap : 1 << 16;
    uint32_t *nt = xrealloc(NULL, ncap * sizeof(*nt));

    memset(nt, 0, ncap * sizeof(*nt));
    for (uint64_t k = 0; k < t->nkeys; k++) {
        uint64_t i = t->khash[k] & (ncap - 1);
        while (nt[i])
            i = (i + 1) & (ncap - 1);
        nt[i] = (uint32_t)(k + 1);
    }
    free(t->tab);
    t->tab = nt;
    t->tcap = ncap;
}

/* The id of key name (len bytes), added with size if new. */
static uint32_t intern(sim_trace *t, const char *name, size_t len, uint64_t size)
{
    uint64_t h = name_hash(name, len), i;

    if (2 * (t->nkeys + 1) > t->tcap)
        tab_grow(t);
    for (i = h & (t->tcap - 1); t->tab[i]; i = (i + 1) & (t->tcap - 1)) {
        uint32_t k = t->tab[i] - 1;
        if (t->khash[k] == h && !strncmp(t->names[k], name, len) && !t->names[k][len]) {
            if (t->ksize[k] != size)
                t->size_mismatches++;
            return k;
        }
    }
    if (t->nkeys == t->kcap) {
        t->kcap = t->kcap ? 2 * t->kcap : 1 << 16;
        t->ksize = xrealloc(t->ksize, t->kcap * sizeof(*t->ksize));
        t->khash = xrealloc(t->khash, t->kcap * sizeof(*t->khash));
        t->names = xrealloc(t->names, t->kcap * sizeof(*t->names));
    }
    t->names[t->nkeys] = strndup(name, len);
    if (!t->names[t->nkeys]) {
        fprintf(stderr, "simulate: out of memory\n");
        exit(1);
    }
    t->ksize[t->nkeys] = size;
    t->khash[t->nkeys] = h;
    t->unique_bytes += size;
    t->tab[i] = (uint32_t)(t->nkeys + 1);
    return (uint32_t)t->nkeys++;
}

/* Read "KEY SIZE" lines and "# ..." comments.  0, or -1 with a message. */
static int trace_load(sim_trace *t, const char *path)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    uint64_t lineno = 0;

    if (!f) {
        fprintf(stderr, "simulate: %s: %s\n", path, strerror(errno));
        return -1;
    }
    while ((len = getline(&line, &lcap, f)) >= 0) {
        char *s = line, *key, *end;
        size_t klen;
        unsigned long long size;

        lineno++;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '#') {
            s++;
            while (*s == ' ' || *s == '\t')
                s++;
            if (!strncmp(s, "epoch", 5) && (s[5] == ' ' || s[5] == '\n' || !s[5])) {
                if (t->nepochs && t->epoch_at[t->nepochs - 1] == t->n)
                    continue;           /* an empty epoch */
                if (t->nepochs + 2 > t->ecap) {
                    t->ecap = t->ecap ? 2 * t->ecap : 64;
                    t->epoch_at = xrealloc(t->epoch_at, t->ecap * sizeof(*t->epoch_at));
                }
                if (!t->nepochs && t->n)
                    t->epoch_at[t->nepochs++] = 0;  /* accesses before the first mark */
                t->epoch_at[t->nepochs++] = t->n;
            }
            continue;
        }
        if (*s == '\n' || *s == '\r' || !*s)
            continue;
        key = s;
        while (*s && *s != ' ' && *s != '\t' && *s != '\n')
            s++;
        klen = (size_t)(s - key);
        errno = 0;
        size = strtoull(s, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')
            end++;
        if (errno || end == s || *end) {
            fprintf(stderr, "simulate: %s:%" PRIu64 ": expected \"KEY SIZE\"\n", path, lineno);
            free(line);
            if (f != stdin)
                fclose(f);
            return -1;
        }
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 1 << 20;
            t->key = xrealloc(t->key, t->cap * sizeof(*t->key));
        }
        t->key[t->n++] = intern(t, key, klen, size);
    }
    free(line);
    if (f != stdin)
        fclose(f);
    if (!t->n) {
        fprintf(stderr, "simulate: %s: no accesses\n", path);
        return -1;
    }
    return 0;
}

static void trace_free(sim_trace *t)
{
    for (uint64_t k = 0; k < t->nkeys; k++)
        free(t->names[k]);
    free(t->names);
    free(t->key);
    free(t->ksize);
    free(t->khash);
    free(t->epoch_at);
    free(t->tab);
}

/* Replay through a policy, following the caller protocol of policy.h.
 * Counts hits from access warm on. */
static void run_policy(const sim_trace *t, policy_kind kind, uint64_t capacity, uint64_t warm,
                       uint64_t *hits, uint64_t *hit_bytes)
{
    policy_node *nodes = xrealloc(NULL, t->nkeys * sizeof(*nodes));
    uint8_t *res = xrealloc(NULL, t->nkeys);
    policy *p;

    memset(res, 0, t->nkeys);
    if (policy_new(kind, capacity, &p) < 0) {
        fprintf(stderr, "simulate: policy_new failed\n");
        exit(1);
    }
    *hits = *hit_bytes = 0;
    for (uint64_t i = 0; i < t->n; i++) {
        uint32_t k = t->key[i];
        uint64_t size = t->ksize[k];
        if (res[k]) {
            policy_hit(p, &nodes[k]);
            if (i >= warm) {
                (*hits)++;
                *hit_bytes += size;
            }
            continue;
        }
        if (!policy_admit(p, t->khash[k], size))
            continue;
        while (policy_used(p) + size > capacity) {
            policy_node *v = policy_victim(p);
            if (!v)
                break;
            policy_remove(p, v);
            res[v - nodes] = 0;
        }
        if (policy_used(p) + size <= capacity) {
            policy_node_init(&nodes[k], t->khash[k], size);
            policy_insert(p, &nodes[k]);
            res[k] = 1;
        }
    }
    policy_free(&p);
    free(nodes);
    free(res);
}

/* Fill the cache with whatever comes first and never evict. */
static void run_static(const sim_trace *t, uint64_t capacity, uint64_t warm,
                       uint64_t *hits, uint64_t *hit_bytes)
{
    uint8_t *res = xrealloc(NULL, t->nkeys);
    uint64_t used = 0;

    memset(res, 0, t->nkeys);
    *hits = *hit_bytes = 0;
    for (uint64_t i = 0; i < t->n; i++) {
        uint32_t k = t->key[i];
        if (res[k]) {
            if (i >= warm) {
                (*hits)++;
                *hit_bytes += t->ksize[k];
            }
        } else if (used + t->ksize[k] <= capacity) {
            res[k] = 1;
            used += t->ksize[k];
        }
    }
    free(res);
}

typedef struct heap_ent {
    uint64_t next;              /* access index of the key's next use */
    uint32_t key;
} heap_ent;

static void heap_push(heap_ent *h, uint64_t *n, heap_ent e)
{
    uint64_t i = (*n)++;

    while (i) {
        uint64_t up = (i - 1) / 2;
        if (h[up].next >= e.next)
            break;
        h[i] = h[up];
        i = up;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, uint64_t *n)
{
    heap_ent top = h[0], last = h[--(*n)];
    uint64_t i = 0;

    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1].next > h[c].next)
            c++;
        if (h[c].next <= last.next)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* Belady's MIN, byte-aware approximation: every access is admitted, then the
 * resident keys used farthest in the future (the newcomer included, so it
 * may bypass) are evicted until the cache fits.  Exact for unit sizes.
 * next[i]: the next access of i's key.  A max-heap holds (next use, key),
 * stale entries being skipped when popped. */
static void run_belady(const sim_trace *t, const uint64_t *next, uint64_t capacity,
                       uint64_t warm, uint64_t *hits, uint64_t *hit_bytes)
{
    uint64_t *cur = xrealloc(NULL, t->nkeys * sizeof(*cur));
    uint8_t *res = xrealloc(NULL, t->nkeys);
    heap_ent *h = xrealloc(NULL, (t->n + 1) * sizeof(*h));
    uint64_t nh = 0, used = 0;

    memset(res, 0, t->nkeys);
    *hits = *hit_bytes = 0;
    for (uint64_t i = 0; i < t->n; i++) {
        uint32_t k = t->key[i];
        if (res[k]) {
            if (i >= warm) {
                (*hits)++;
                *hit_bytes += t->ksize[k];
            }
        } else {
            if (t->ksize[k] > capacity)
                continue;
            res[k] = 1;
            used += t->ksize[k];
        }
        cur[k] = next[i];
        heap_push(h, &nh, (heap_ent){ next[i], k });
        while (used > capacity) {
            heap_ent e = heap_pop(h, &nh);
            if (!res[e.key] || cur[e.key] != e.next)
                continue;
            res[e.key] = 0;
            used -= t->ksize[e.key];
        }
        if (nh > 2 * t->nkeys + 1024) {     /* drop stale entries, keep memory bounded */
            uint64_t m = 0;
            for (uint64_t j = 0; j < nh; j++)
                if (res[h[j].key] && cur[h[j].key] == h[j].next)
                    h[m++] = h[j];
            nh = 0;
            for (uint64_t j = 0; j < m; j++)
                heap_push(h, &nh, h[j]);
        }
    }
    free(cur);
    free(res);
    free(h);
}

static const char *row_name(int r)
{
    if (r < POLICY_NKINDS)
        return policy_kind_name((policy_kind)r);
    return r == SIM_STATIC ? "static" : "belady";
}

static int parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || v <= 0)
        return -EINVAL;
    switch (*end) {
    case 'k': case 'K': v *= 1024; end++; break;
    case 'm': case 'M': v *= 1024 * 1024; end++; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': v *= 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end || v < 1)
        return -EINVAL;
    *out = (uint64_t)v;
    return 0;
}

/* Parse a comma-separated list of D/C ratios (or of byte counts when
 * as_bytes).  Returns the count, or -1. */
static int parse_list(const char *s, double *ratios, uint64_t *caps, int as_bytes)
{
    char buf[1024], *save = NULL, *tok;
    int n = 0;

    if (strlen(s) >= sizeof(buf))
        return -1;
    strcpy(buf, s);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == SIM_MAX_SIZES)
            return -1;
        if (as_bytes) {
            if (parse_bytes(tok, &caps[n]) < 0)
                return -1;
        } else {
            char *end;
            ratios[n] = strtod(tok, &end);
            if (*end || end == tok || !(ratios[n] > 0))
                return -1;
        }
        n++;
    }
    return n ? n : -1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: simulate [--sizes R,...] [--capacity BYTES,...] [--warmup-epochs E]\n"
            "                [--warmup N] [--json] TRACE|-\n"
            "Replays TRACE (\"KEY SIZE\" lines, '#' comments) through every policy, a\n"
            "never-evict baseline (static) and Belady's optimum.\n"
            "  --sizes R,...       caches as dataset/cache ratios D/C, D = bytes of the\n"
            "                      distinct keys (default 0.5,1.1,2,5,10)\n"
            "  --capacity B,...    caches in bytes instead (K/M/G/T suffixes)\n"
            "  --warmup-epochs E   count hits only after the first E \"# epoch\" lines'\n"
            "                      epochs (default 1; ignored without such lines)\n"
            "  --warmup N          count hits only from access N on (overrides)\n"
            "  --json              one JSON object instead of tables\n");
}

int main(int argc, char **argv)
{
    double ratios[SIM_MAX_SIZES] = { 0.5, 1.1, 2, 5, 10 };
    uint64_t caps[SIM_MAX_SIZES];
    int nsizes = 5, by_bytes = 0, json = 0;
    uint64_t warmup_epochs = 1, warm = 0, measured, measured_bytes = 0;
    int have_warmup = 0;
    const char *path = NULL;
    sim_trace t;
    sim_result res[SIM_MAX_SIZES];
    uint64_t *next, *last;
    struct timespec t0, t1;

    memset(&t, 0, sizeof(t));
    memset(res, 0, sizeof(res));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--sizes") && i + 1 < argc) {
            nsizes = parse_list(argv[++i], ratios, caps, 0);
            by_bytes = 0;
        } else if (!strcmp(a, "--capacity") && i + 1 < argc) {
            nsizes = parse_list(argv[++i], ratios, caps, 1);
            by_bytes = 1;
        } else if (!strcmp(a, "--warmup-epochs") && i + 1 < argc) {
            char *end;
            warmup_epochs = strtoull(argv[++i], &end, 10);
            if (*end)
                nsizes = -1;
        } else if (!strcmp(a, "--warmup") && i + 1 < argc) {
            char *end;
            warm = strtoull(argv[++i], &end, 10);
            have_warmup = 1;
            if (*end)
                nsizes = -1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "simulate: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            usage(stderr);
            return 2;
        }
        if (nsizes < 0) {
            fprintf(stderr, "simulate: bad value for %s\n", a);
            return 2;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (trace_load(&t, path) < 0)
        return 1;
    if (!have_warmup)
        warm = warmup_epochs && warmup_epochs < t.nepochs ? t.epoch_at[warmup_epochs]
             : warmup_epochs && t.nepochs ? t.n : 0;
    if (warm > t.n)
        warm = t.n;
    measured = t.n - warm;
    for (uint64_t i = warm; i < t.n; i++)
        measured_bytes += t.ksize[t.key[i]];

    next = xrealloc(NULL, t.n * sizeof(*next));
    last = xrealloc(NULL, t.nkeys * sizeof(*last));
    for (uint64_t k = 0; k < t.nkeys; k++)
        last[k] = SIM_NO_NEXT;
    for (uint64_t i = t.n; i-- > 0;) {
        next[i] = last[t.key[i]];
        last[t.key[i]] = i;
    }
    free(last);

    for (int s = 0; s < nsizes; s++) {
        sim_result *r = &res[s];
        if (by_bytes) {
            r->capacity = caps[s];
        } else {
            double c = (double)t.unique_bytes / ratios[s];
            r->capacity = c < 1 ? 1 : (uint64_t)llround(c);
        }
        r->ratio = (double)t.unique_bytes / (double)r->capacity;
        for (int k = 0; k < POLICY_NKINDS; k++)
            run_policy(&t, (policy_kind)k, r->capacity, warm, &r->hits[k], &r->hit_bytes[k]);
        run_static(&t, r->capacity, warm, &r->hits[SIM_STATIC], &r->hit_bytes[SIM_STATIC]);
        run_belady(&t, next, r->capacity, warm, &r->hits[SIM_BELADY], &r->hit_bytes[SIM_BELADY]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

    if (json) {
        printf("{\"trace\":\"");
        for (const char *c = path; *c; c++) {
            if (*c == '"' || *c == '\\')
                putchar('\\');
            putchar((unsigned char)*c < 0x20 ? '?' : *c);
        }
        printf("\",\"accesses\":%" PRIu64 ",\"measured_accesses\":%" PRIu64
               ",\"warmup_accesses\":%" PRIu64 ",\"unique_keys\":%" PRIu64
               ",\"unique_bytes\":%" PRIu64 ",\"epochs\":%" PRIu64 ",\"seconds\":%.3f,\"results\":[",
               t.n, measured, warm, t.nkeys, t.unique_bytes, t.nepochs, secs);
        int first = 1;
        for (int s = 0; s < nsizes; s++)
            for (int r = 0; r < SIM_NROWS; r++) {
                printf("%s{\"policy\":\"%s\",\"capacity\":%" PRIu64 ",\"dataset_over_cache\":%.4f,"
                       "\"hits\":%" PRIu64 ",\"hit_ratio\":%.4f,\"byte_hit_ratio\":%.4f}",
                       first ? "" : ",", row_name(r), res[s].capacity, res[s].ratio, res[s].hits[r],
                       measured ? (double)res[s].hits[r] / (double)measured : 0.0,
                       measured_bytes ? (double)res[s].hit_bytes[r] / (double)measured_bytes : 0.0);
                first = 0;
            }
        printf("]}\n");
    } else {
        printf("trace %s: %" PRIu64 " accesses (%" PRIu64 " measured, after %" PRIu64
               " warm-up), %" PRIu64 " keys, %" PRIu64 " bytes (D)\n",
               path, t.n, measured, warm, t.nkeys, t.unique_bytes);
        if (!measured)
            printf("note: every access is in the warm-up; nothing measured\n");
        if (t.size_mismatches)
            printf("note: %" PRIu64 " lines gave a key another size than its first; ignored\n",
                   t.size_mismatches);
        for (int pass = 0; pass < 2; pass++) {
            printf(pass ? "\nbyte hit ratio\n" : "hit ratio\n");
            printf("%-8s", "policy");
            for (int s = 0; s < nsizes; s++) {
                char col[32];
                snprintf(col, sizeof(col), "D/C=%.3g", res[s].ratio);
                printf(" %12s", col);
            }
            printf("\n%-8s", "capacity");
            for (int s = 0; s < nsizes; s++)
                printf(" %12" PRIu64, res[s].capacity);
            printf("\n");
            for (int r = 0; r < SIM_NROWS; r++) {
                printf("%-8s", row_name(r));
                for (int s = 0; s < nsizes; s++) {
                    double v = pass ? (measured_bytes ? (double)res[s].hit_bytes[r] / (double)measured_bytes : 0)
                                    : (measured ? (double)res[s].hits[r] / (double)measured : 0);
                    printf(" %12.3f", v);
                }
                printf("\n");
            }
        }
        printf("\n%.2f s\n", secs);
    }
    free(next);
    trace_free(&t);
    return 0;
}
