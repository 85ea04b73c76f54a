/*
 * analyze.c - the daemon's IO-pattern classifier (daemon/analysis/) over a
 * trace, offline, and its CPU cost.
 *
 *   analyze [--requests N] [--capacity BYTES | --ratio D/C] [--chunk BYTES]
 *           [--gap-us U] [--bench] [--json] TRACE|-
 *
 * TRACE is bench/simulate's format (KEY SIZE per line, `# epoch N` marks;
 * the daemon's [daemon] trace_file writes it): each line is fed to the
 * classifier as one whole-file read of a file KEY of SIZE bytes, one every
 * U microseconds (default 100).  --requests: only the first N lines (to
 * ask "classified within N requests?").  --capacity: the DRAM capacity
 * the report replays at; --ratio: D/C instead, D the distinct bytes of the
 * lines used.  --bench: also the classifier's cost per request (the whole
 * trace fed 20 times, timed).  Prints the class and the report, or with
 * --json one object: class, hot, best_policy, hit ratios per row.
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
} tline;

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
    int json = 0, bench = 0;
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
        if (line[0] == '#' || line[0] == '\n')
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
        t[n++] = (tline){ hash_str(key), size ? size : 1 };
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
