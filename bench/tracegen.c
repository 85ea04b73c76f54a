/*
 * tracegen.c - synthetic access traces for bench/simulate (bench/SIMULATE.md).
 *
 *   tracegen epochs  --items N --epochs E [--shuffle] [--size S] [--seed X]
 *   tracegen zipf    --items N --accesses A [--alpha 1.0] [--size S] [--seed X]
 *   tracegen scanmix --hot H --scan S --accesses A [--size S] [--seed X]
 *
 * Prints one access per line, "KEY SIZE", to stdout.  S is a byte count
 * (K/M/G suffixes) or a range MIN-MAX, each key drawing its size once,
 * uniformly.  epochs prints "# epoch N" before each pass, which simulate's
 * --warmup-epochs counts.  The same arguments always give the same trace.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tg_opts {
    const char *pattern;
    uint64_t items, epochs, accesses, hot, scan;
    uint64_t size_min, size_max;
    uint64_t seed;
    double alpha;
    int shuffle;
    uint64_t rng;               /* generator state, from the seed */
} tg_opts;

/* splitmix64: small, fast, good enough for traces. */
static uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static uint64_t rng_below(uint64_t *state, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(state) * n) >> 64);
}

/* Uniform in [0, 1). */
static double rng_unit(uint64_t *state)
{
    return (double)(rng_next(state) >> 11) * 0x1.0p-53;
}

/* Key i's size: fixed, or drawn once per key from its own stream. */
static uint64_t key_size(const tg_opts *o, uint64_t i)
{
    uint64_t z;

    if (o->size_min == o->size_max)
        return o->size_min;
    z = (o->seed ^ 0x5851f42d4c957f2dull) + (i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return o->size_min + z % (o->size_max - o->size_min + 1);
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -EINVAL;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_size(const char *s, tg_opts *o)
{
    char buf[64];
    char *dash;

    if (strlen(s) >= sizeof(buf))
        return -EINVAL;
    strcpy(buf, s);
    dash = strchr(buf, '-');
    if (dash)
        *dash = '\0';
    if (parse_u64(buf, &o->size_min) < 0)
        return -EINVAL;
    o->size_max = o->size_min;
    if (dash && parse_u64(dash + 1, &o->size_max) < 0)
        return -EINVAL;
    return o->size_min <= o->size_max ? 0 : -EINVAL;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tracegen epochs  --items N --epochs E [--shuffle] [--size S] [--seed X]\n"
            "       tracegen zipf    --items N --accesses A [--alpha 1.0] [--size S] [--seed X]\n"
            "       tracegen scanmix --hot H --scan S --accesses A [--size S] [--seed X]\n"
            "Prints \"KEY SIZE\" lines.  S: bytes (K/M/G suffixes) or MIN-MAX per key.\n"
            "scanmix: half the accesses go to H hot keys uniformly, half walk S keys in\n"
            "order, wrapping around.  Defaults: --size 1, --alpha 1.0, --seed 1.\n");
}

static void gen_epochs(tg_opts *o)
{
    uint64_t *order = malloc(o->items * sizeof(*order));

    if (!order) {
        perror("tracegen: malloc");
        exit(1);
    }
    for (uint64_t i = 0; i < o->items; i++)
        order[i] = i;
    for (uint64_t e = 0; e < o->epochs; e++) {
        if (o->shuffle)
            for (uint64_t i = o->items; i > 1; i--) {
                uint64_t j = rng_below(&o->rng, i), t = order[i - 1];
                order[i - 1] = order[j];
                order[j] = t;
            }
        printf("# epoch %" PRIu64 "\n", e);
        for (uint64_t i = 0; i < o->items; i++)
            printf("e%" PRIu64 " %" PRIu64 "\n", order[i], key_size(o, order[i]));
    }
    free(order);
}

static void gen_zipf(tg_opts *o)
{
    double *cdf = malloc(o->items * sizeof(*cdf)), sum = 0;

    if (!cdf) {
        perror("tracegen: malloc");
        exit(1);
    }
    for (uint64_t i = 0; i < o->items; i++)
        cdf[i] = (sum += pow((double)(i + 1), -o->alpha));
    for (uint64_t a = 0; a < o->accesses; a++) {
        double u = rng_unit(&o->rng) * sum;
        uint64_t lo = 0, hi = o->items - 1;
        while (lo < hi) {
            uint64_t mid = lo + (hi - lo) / 2;
            if (cdf[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        printf("z%" PRIu64 " %" PRIu64 "\n", lo, key_size(o, lo));
    }
    free(cdf);
}

static void gen_scanmix(tg_opts *o)
{
    uint64_t cursor = 0;

    for (uint64_t a = 0; a < o->accesses; a++) {
        if (rng_next(&o->rng) & 1) {
            uint64_t k = rng_below(&o->rng, o->hot);
            printf("h%" PRIu64 " %" PRIu64 "\n", k, key_size(o, k));
        } else {
            printf("s%" PRIu64 " %" PRIu64 "\n", cursor, key_size(o, o->hot + cursor));
            cursor = (cursor + 1) % o->scan;
        }
    }
}

int main(int argc, char **argv)
{
    tg_opts o = { .size_min = 1, .size_max = 1, .seed = 1, .alpha = 1.0 };

    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    o.pattern = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (!strcmp(a, "--shuffle")) {
            o.shuffle = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "tracegen: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--items"))
            rc = parse_u64(v, &o.items);
        else if (!strcmp(a, "--epochs"))
            rc = parse_u64(v, &o.epochs);
        else if (!strcmp(a, "--accesses"))
            rc = parse_u64(v, &o.accesses);
        else if (!strcmp(a, "--hot"))
            rc = parse_u64(v, &o.hot);
        else if (!strcmp(a, "--scan"))
            rc = parse_u64(v, &o.scan);
        else if (!strcmp(a, "--seed"))
            rc = parse_u64(v, &o.seed);
        else if (!strcmp(a, "--size"))
            rc = parse_size(v, &o);
        else if (!strcmp(a, "--alpha")) {
            char *end;
            o.alpha = strtod(v, &end);
            rc = *end || end == v || o.alpha < 0 ? -EINVAL : 0;
        } else {
            fprintf(stderr, "tracegen: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (rc < 0) {
            fprintf(stderr, "tracegen: bad value for %s: %s\n", a, v);
            return 2;
        }
    }
    o.rng = o.seed;
    if (!strcmp(o.pattern, "epochs") && o.items && o.epochs) {
        printf("# tracegen epochs --items %" PRIu64 " --epochs %" PRIu64 "%s --seed %" PRIu64 "\n",
               o.items, o.epochs, o.shuffle ? " --shuffle" : "", o.seed);
        gen_epochs(&o);
    } else if (!strcmp(o.pattern, "zipf") && o.items && o.accesses) {
        printf("# tracegen zipf --items %" PRIu64 " --accesses %" PRIu64 " --alpha %g --seed %" PRIu64 "\n",
               o.items, o.accesses, o.alpha, o.seed);
        gen_zipf(&o);
    } else if (!strcmp(o.pattern, "scanmix") && o.hot && o.scan && o.accesses) {
        printf("# tracegen scanmix --hot %" PRIu64 " --scan %" PRIu64 " --accesses %" PRIu64
               " --seed %" PRIu64 "\n", o.hot, o.scan, o.accesses, o.seed);
        gen_scanmix(&o);
    } else {
        fprintf(stderr, "tracegen: unknown pattern or missing counts\n");
        usage(stderr);
        return 2;
    }
    if (fflush(stdout) || ferror(stdout)) {
        perror("tracegen: write");
        return 1;
    }
    return 0;
}
