/*
 * analyze.c - the daemon's IO-pattern classifier (daemon/analysis/) over a
 * trace, offline, and its CPU cost.
 *
 *   analyze [--requests N] [--capacity BYTES | --ratio D/C] [--chunk BYTES]
 *           [--gap-us U] [--bench] [--auto] [--json] TRACE|-
 *
 * TRACE is bench/simulate's format (KEY SIZE per line, `# epoch N` marks;
 * the daemon's [daemon] trace_file writes it): each line is fed to the
 * classifier as one whole-file read of a file KEY of SIZE bytes, one every
 * U microseconds (default 100).  --requests: only the first N lines (to
 * ask "classified within N requests?").  --capacity: the DRAM capacity
 * the report replays at; --ratio: D/C instead, D the distinct bytes of the
 * lines used.  --bench: also the classifier's cost per request (the whole
 * trace fed 20 times, timed).  --auto: also policy = auto simulated: one
 * cache of that capacity, starting as lru, the classifier fed as the trace
 * is replayed, and every 1024 requests (once the verdict is stable, on a
 * new verdict or every AN_AUTO_RECHECK requests) the daemon's rule (an_auto_choice)
 * applied with policy_switch, against each fixed policy over the same
 * accesses: from the second `# epoch` mark, or the second half.
 * Prints the class and the report, or with --json one object: class, hot,
 * best_policy, hit ratios per row (and auto_* with --auto).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../daemon/tiers/policy.c"
#include "../daemon/analysis/analysis.c"

typedef struct tline {
    uint64_t key, size;
    uint32_t id;                /* dense key id (--auto) */
    uint32_t pos;
} tline;

static int cmp_pos(const void *x, const void *y)
{
    const tline *p = x, *q = y;

    return p->pos < q->pos ? -1 : p->pos > q->pos;
}

/* One cache of capacity cap replayed over t[0..n), policy kind k; with
 * an (policy = auto) the classifier is fed and the rule applied.  Hits
 * counted from warm on. */
static double replay(const tline *t, size_t n, uint32_t nkeys, policy_kind k, uint64_t cap,
                     uint64_t chunk, size_t warm, int autosim, int *switches, policy_kind *last)
{
    policy_node *nodes = calloc(nkeys, sizeof(*nodes));
    uint8_t *res = calloc(nkeys, 1);
    policy *p = NULL;
    analysis *an = NULL;
    an_ref ref = { 0, 0 };
    an_class decided = AN_UNKNOWN;
    size_t decided_at = 0;
    uint64_t hits = 0;

    if (!nodes || !res || policy_new(k, cap, &p) < 0)
        exit(1);
    if (autosim) {
        if (analysis_new(&an) < 0)
            exit(1);
        ref = analysis_attach(an, 0, 1, 0);
        *switches = 0;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t id = t[i].id;
        if (autosim) {
            analysis_read(an, ref, t[i].key, t[i].size,
                          (uint32_t)(t[i].size > chunk ? t[i].size : chunk), 0, t[i].size, 1,
                          (i + 1) * 100000);
            if ((i + 1) % 1024 == 0) {
                const an_job *j = analysis_job(an, ref.slot);
                if (j->verdict != AN_UNKNOWN && j->verdict_runs >= AN_STABLE &&
                    (j->verdict != decided || i - decided_at >= AN_AUTO_RECHECK)) {
                    an_caps caps = { .dram_capacity = cap, .chunk_size = chunk,
                                     .dram_policy = (int)policy_get_kind(p), .nvme_policy = -1 };
                    an_report r;
                    int c;
                    decided = j->verdict;
                    decided_at = i;
                    if (analysis_report(j, &caps, &r) == 0 &&
                        (c = an_auto_choice(&r, 0, (int)policy_get_kind(p))) >= 0 &&
                        policy_switch(&p, (policy_kind)c, NULL, 0) == 0)
                        (*switches)++;
                }
            }
        }
        if (res[id]) {
            hits += i >= warm;
            policy_hit(p, &nodes[id]);
            continue;
        }
        if (!policy_admit(p, t[i].key, t[i].size))
            continue;
        while (policy_used(p) + t[i].size > policy_capacity(p)) {
            policy_node *v = policy_victim(p);
            if (!v)
                break;
            policy_remove(p, v);
            res[v - nodes] = 0;
        }
        if (policy_used(p) + t[i].size <= policy_capacity(p)) {
            policy_node_init(&nodes[id], t[i].key, t[i].size);
            policy_insert(p, &nodes[id]);
            res[id] = 1;
        }
    }
    if (last)
        *last = policy_get_kind(p);
    policy_free(&p);
    analysis_free(&an);
    free(nodes);
    free(res);
    return n > warm ? (double)hits / (double)(n - warm) : 0;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;        /* FNV-1a, then mixed */

    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return an_mix64(h);
}

static int cmp_srt_tline(const void *x, const void *y)
{
    const tline *p = x, *q = y;

    return p->key < q->key ? -1 : p->key > q->key;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    uint64_t limit = UINT64_MAX, capacity = 0, chunk = 4u << 20, gap = 100000;
    double ratio = 0;
    int json = 0, bench = 0, autosim = 0, marks = 0;
    size_t warm = SIZE_MAX;
    const char *path = NULL;
    FILE *f;
    char line[4096];
    tline *t = NULL;
    size_t n = 0, cap = 0;
    analysis *an;
    an_ref ref;
    an_report rep;
    an_caps caps;
    const an_job *j;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            limit = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--capacity") && i + 1 < argc)
            capacity = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--ratio") && i + 1 < argc)
            ratio = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc)
            chunk = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--gap-us") && i + 1 < argc)
            gap = strtoull(argv[++i], NULL, 0) * 1000;
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--bench"))
            bench = 1;
        else if (!strcmp(argv[i], "--auto"))
            autosim = 1;
        else if (argv[i][0] == '-' && argv[i][1])
            goto usage;
        else
            path = argv[i];
    }
    if (!path || chunk == 0)
        goto usage;
    f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        fprintf(stderr, "analyze: %s: %s\n", path, strerror(errno));
        return 1;
    }
    while (n < limit && fgets(line, sizeof(line), f)) {
        char key[2048];
        unsigned long long size;
        if (line[0] == '#') {
            if (!strncmp(line, "# epoch", 7) && ++marks == 2)
                warm = n;
            continue;
        }
        if (line[0] == '\n')
            continue;
        if (sscanf(line, "%2047s %llu", key, &size) != 2) {
            fprintf(stderr, "analyze: %s: malformed line: %s", path, line);
            return 1;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            t = realloc(t, cap * sizeof(*t));
            if (!t)
                return 1;
        }
        t[n] = (tline){ hash_str(key), size ? size : 1, 0, (uint32_t)n };
        n++;
    }
    if (f != stdin)
        fclose(f);
    if (analysis_new(&an) < 0)
        return 1;
    ref = analysis_attach(an, 0, 1, 0);
    for (size_t i = 0; i < n; i++)
        analysis_read(an, ref, t[i].key, t[i].size, (uint32_t)(t[i].size > chunk ? t[i].size : chunk),
                      0, t[i].size, 1, (i + 1) * gap);
    j = analysis_job(an, ref.slot);
    if (ratio > 0) {
        /* D: distinct bytes of the lines used (sort a copy by key) */
        tline *c = malloc(n * sizeof(*c) + 1);
        uint64_t d = 0;
        memcpy(c, t, n * sizeof(*c));
        qsort(c, n, sizeof(*c), cmp_srt_tline);
        for (size_t i = 0; i < n; i++)
            if (i == 0 || c[i].key != c[i - 1].key)
                d += c[i].size;
        free(c);
        capacity = (uint64_t)((double)d / ratio);
    }
    if (!capacity)
        capacity = 1ull << 30;
    if (warm == SIZE_MAX)
        warm = n / 2;
    caps = (an_caps){ .dram_capacity = capacity, .chunk_size = chunk, .dram_policy = POLICY_LRU,
                      .nvme_policy = -1 };
    if (analysis_report(j, &caps, &rep) < 0)
        return 1;
    if (json) {
        printf("{\"requests\": %zu, \"class\": \"%s\", \"stable\": %d, \"hot\": %.4f, "
               "\"reuse\": %.4f, \"order\": \"%s\", \"capacity\": %" PRIu64 ", \"best_policy\": \"%s\"",
               n, an_class_name(rep.cls), rep.stable, rep.hot, rep.reuse_share, rep.order, capacity,
               an_row_name(rep.tiers[0].best));
        for (int r = 0; r < AN_SIM_ROWS; r++)
            printf(", \"hit_%s\": %.4f", an_row_name(r), rep.tiers[0].hit[r]);
        printf("}\n");
    } else {
        printf("class %s%s after %zu requests (hot %.2f, early %.2f, reuse %.2f, order %s, sampled %u at "
               "rate %.4f)\n", an_class_name(rep.cls), rep.stable ? " (stable)" : "", n, rep.hot, rep.early,
               rep.reuse_share, rep.order, rep.samples, rep.rate);
        printf("hit ratio at %" PRIu64 " bytes:", capacity);
        for (int r = 0; r < AN_SIM_ROWS; r++)
            printf(" %s %.3f", an_row_name(r), rep.tiers[0].hit[r]);
        printf("\n");
        for (int i = 0; i < rep.nrecs; i++)
            printf("  - %s\n", rep.recs[i]);
    }
    if (autosim) {
        /* dense ids: sort by key, number, back to trace order */
        uint32_t nkeys = 0;
        double fixed[POLICY_NKINDS], best = -1, a;
        int sw = 0, bk = 0;
        policy_kind last;
        qsort(t, n, sizeof(*t), cmp_srt_tline);
        for (size_t i = 0; i < n; i++) {
            if (i && t[i].key != t[i - 1].key)
                nkeys++;
            t[i].id = nkeys;
        }
        nkeys++;
        qsort(t, n, sizeof(*t), cmp_pos);
        for (int k = 0; k < POLICY_NKINDS; k++) {
            fixed[k] = replay(t, n, nkeys, (policy_kind)k, capacity, chunk, warm, 0, NULL, NULL);
            if (fixed[k] > best) {
                best = fixed[k];
                bk = k;
            }
        }
        a = replay(t, n, nkeys, POLICY_LRU, capacity, chunk, warm, 1, &sw, &last);
        if (json) {
            printf("{\"auto_hit\": %.4f, \"auto_switches\": %d, \"auto_final\": \"%s\", "
                   "\"best_fixed\": \"%s\", \"best_fixed_hit\": %.4f", a, sw,
                   policy_kind_name(last), policy_kind_name((policy_kind)bk), best);
            for (int k = 0; k < POLICY_NKINDS; k++)
                printf(", \"fixed_%s\": %.4f", policy_kind_name((policy_kind)k), fixed[k]);
            printf("}\n");
        } else {
            printf("policy = auto: hit ratio %.3f (%d switches, ends as %s); best fixed %s %.3f;",
                   a, sw, policy_kind_name(last), policy_kind_name((policy_kind)bk), best);
            for (int k = 0; k < POLICY_NKINDS; k++)
                printf(" %s %.3f", policy_kind_name((policy_kind)k), fixed[k]);
            printf("\n");
        }
    }
    if (bench) {
        analysis *b;
        an_ref br;
        uint64_t t0, t1, reqs = 0;
        if (analysis_new(&b) < 0)
            return 1;
        br = analysis_attach(b, 0, 1, 0);
        t0 = now_ns();
        for (int rep_i = 0; rep_i < 20; rep_i++)
            for (size_t i = 0; i < n; i++, reqs++)
                analysis_read(b, br, t[i].key, t[i].size,
                              (uint32_t)(t[i].size > chunk ? t[i].size : chunk), 0, t[i].size, 1,
                              (reqs + 1) * gap);
        t1 = now_ns();
        printf("classifier cost: %.1f ns per request (%" PRIu64 " requests, %.3f s)\n",
               (double)(t1 - t0) / (double)reqs, reqs, (double)(t1 - t0) / 1e9);
        analysis_free(&b);
    }
    analysis_free(&an);
    free(t);
    return 0;
usage:
    fprintf(stderr, "usage: analyze [--requests N] [--capacity BYTES | --ratio D/C] "
            "[--chunk BYTES] [--gap-us U] [--bench] [--json] TRACE|-\n");
    return 2;
}
