/*
 * check_analysis.c - the IO-pattern classifier (daemon/analysis/): a
 * generated workload of each class is classified right within its first
 * 10,000 requests; a job that changes pattern changes verdict; memory
 * stays bounded (jobs, samples); hostile arguments are harmless; the
 * report's replay ranks the policies as a separate simulation does.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "policy.h"

#define MiB (1ull << 20)
#define LIMIT 10000

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A file key as the daemon makes it: a well-mixed hash of the identity. */
static uint64_t fkey(uint64_t i)
{
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull;

    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

typedef struct gen {
    analysis *an;
    an_ref ref;
    uint64_t now, n;
} gen;

static void gen_init(gen *g)
{
    ck_assert_int_eq(analysis_new(&g->an), 0);
    g->ref = analysis_attach(g->an, 1000, 4242, 0);
    ck_assert_uint_ne(g->ref.id, 0);
    g->now = 1000000000ull;
    g->n = 0;
}

static void rd(gen *g, uint64_t file, uint64_t size, uint64_t off, uint64_t len, int whole)
{
    g->now += 100000;                   /* 10k requests/s */
    analysis_read(g->an, g->ref, fkey(file), size, 4 * MiB, off, len, whole, g->now);
    g->n++;
}

static const an_job *job(gen *g)
{
    const an_job *j = analysis_job(g->an, g->ref.slot);

    ck_assert_ptr_nonnull(j);
    return j;
}

/* The verdict so far and the report's, both cls. */
static void expect(gen *g, an_class cls)
{
    an_caps caps = { .dram_capacity = 1ull << 30, .chunk_size = 4 * MiB, .dram_policy = 0,
                     .nvme_policy = -1 };
    an_report r;

    ck_assert_uint_le(g->n, LIMIT);
    ck_assert_msg(job(g)->verdict == cls, "verdict %s after %llu requests, wanted %s",
                  an_class_name(job(g)->verdict), (unsigned long long)g->n, an_class_name(cls));
    ck_assert_int_eq(analysis_report(job(g), &caps, &r), 0);
    ck_assert_msg(r.cls == cls, "report says %s, wanted %s", an_class_name(r.cls),
                  an_class_name(cls));
    ck_assert_int_gt(r.nrecs, 0);
    analysis_free(&g->an);
}

START_TEST(test_sequential_large)
{
    gen g;

    gen_init(&g);
    for (uint64_t f = 0; g.n < 3000; f++)
        for (uint64_t off = 0; off < 256 * MiB && g.n < 3000; off += MiB)
            rd(&g, f, 256 * MiB, off, MiB, 0);
    expect(&g, AN_SEQ_LARGE);
}
END_TEST

/* Small sequential steps inside big chunks, and a client asking again for
 * the rest of a short reply: continuations, and each chunk is one read in
 * the record (the reader still holds the chunk it is in). */
START_TEST(test_continuation_samples)
{
    gen g;

    gen_init(&g);
    for (uint64_t off = 0; off < 64 * MiB; off += 128 * 1024)
        rd(&g, 7, 64 * MiB, off, 128 * 1024, 0);
    /* 1 MiB asks whose replies come 128K short each time: the client asks
     * again for the rest, seven times */
    for (uint64_t p = 0; p < 64 * MiB; p += MiB)
        for (uint64_t k = 0; k < 8; k++)
            rd(&g, 8, 64 * MiB, p + k * 128 * 1024, MiB - k * 128 * 1024, 0);
    ck_assert_uint_ge(g.n, AN_EVAL);
    /* 16 chunks in each file, each read once in the record */
    ck_assert_uint_eq(job(&g)->ring_n, 32);
    expect(&g, AN_SEQ_LARGE);
}
END_TEST

START_TEST(test_random_small)
{
    gen g;

    gen_init(&g);
    while (g.n < 3000)
        rd(&g, rnd() % 4, 10ull << 30, (rnd() % ((10ull << 30) / 4096)) * 4096, 4096, 0);
    expect(&g, AN_RANDOM_SMALL);
}
END_TEST

/* Whole small files, a fresh shuffle each pass: the first pass alone (no
 * re-reads yet) and several passes both say shuffled-epoch; the report
 * tells the order apart. */
static void epoch_run(unsigned nfiles, unsigned passes, int shuffle, const char *order)
{
    unsigned *perm = malloc(nfiles * sizeof(*perm));
    an_caps caps = { .dram_capacity = 100 * MiB, .chunk_size = 4 * MiB, .nvme_policy = -1 };
    an_report r;
    gen g;

    gen_init(&g);
    for (unsigned i = 0; i < nfiles; i++)
        perm[i] = i;
    for (unsigned p = 0; p < passes && g.n < LIMIT; p++) {
        for (unsigned i = nfiles - 1; shuffle && i > 0; i--) {
            unsigned k = (unsigned)(rnd() % (i + 1)), t = perm[i];
            perm[i] = perm[k];
            perm[k] = t;
        }
        for (unsigned i = 0; i < nfiles && g.n < LIMIT; i++)
            rd(&g, perm[i], 100000, 0, 100000, 1);
    }
    ck_assert_msg(job(&g)->verdict == AN_SHUFFLED_EPOCH, "verdict %s",
                  an_class_name(job(&g)->verdict));
    ck_assert_int_eq(analysis_report(job(&g), &caps, &r), 0);
    ck_assert_int_eq(r.cls, AN_SHUFFLED_EPOCH);
    ck_assert_str_eq(r.order, order);
    /* more data than DRAM: the epoch policy (or static fill) wins, and
     * recency policies do worse than it */
    if (passes > 1) {
        ck_assert_int_eq(r.tiers[0].best, POLICY_EPOCH);
        ck_assert(r.tiers[0].hit[POLICY_LRU] < r.tiers[0].hit[POLICY_EPOCH] - 0.1);
    }
    free(perm);
    analysis_free(&g.an);
}

START_TEST(test_epoch_first_pass)
{
    epoch_run(20000, 1, 1, "-");
}
END_TEST

START_TEST(test_epoch_shuffled)
{
    epoch_run(2000, 5, 1, "shuffled");
}
END_TEST

START_TEST(test_epoch_same_order)
{
    epoch_run(2000, 5, 0, "same");
}
END_TEST

START_TEST(test_strided)
{
    gen g;

    gen_init(&g);
    for (uint64_t f = 0; g.n < 3000; f++)
        for (uint64_t off = 0; off < 1024 * MiB && g.n < 3000; off += MiB)
            rd(&g, f, 1024 * MiB, off, 65536, 0);
    expect(&g, AN_STRIDED);
}
END_TEST

/* Three bursts of 256 MiB in 4 MiB reads, 10 s apart. */
START_TEST(test_checkpoint_burst)
{
    gen g;

    gen_init(&g);
    for (int b = 0; b < 3; b++) {
        for (uint64_t f = 0; f < 4; f++)
            for (uint64_t off = 0; off < 256 * MiB; off += 4 * MiB)
                rd(&g, 100 * (uint64_t)b + f, 256 * MiB, off, 4 * MiB, 0);
        g.now += 10000000000ull;
    }
    /* one more request after the last pause */
    rd(&g, 999, 256 * MiB, 0, 4 * MiB, 0);
    while (g.n % AN_FIRST)
        rd(&g, 999, 256 * MiB, (g.n % 64) * 4 * MiB, 4 * MiB, 0);
    expect(&g, AN_CKPT_BURST);
}
END_TEST

/* A Zipf-like hot set of small files: random-small. */
START_TEST(test_hot_set)
{
    gen g;

    gen_init(&g);
    while (g.n < 5000) {
        /* 1/x-ish: a few files take most reads */
        uint64_t f = (uint64_t)(50000.0 / (1.0 + (double)(rnd() % 50000)));
        rd(&g, f, 80000, 0, 80000, 1);
    }
    expect(&g, AN_RANDOM_SMALL);
}
END_TEST

START_TEST(test_mixed)
{
    uint64_t pos = 0;
    gen g;

    gen_init(&g);
    while (g.n < 4000) {
        if (g.n % 2 == 0) {
            rd(&g, 1, 512 * MiB, pos, MiB, 0);
            pos = (pos + MiB) % (512 * MiB);
        } else {
            rd(&g, 2, 10ull << 30, (rnd() % ((10ull << 30) / 4096)) * 4096, 4096, 0);
        }
    }
    expect(&g, AN_MIXED);
}
END_TEST

/* A hot set read beside a scan of cold files: mixed. */
START_TEST(test_hot_and_scan)
{
    uint64_t scan = 1000;
    gen g;

    gen_init(&g);
    while (g.n < 8000) {
        if (rnd() % 2)
            rd(&g, rnd() % 500, 80000, 0, 80000, 1);
        else
            rd(&g, scan++, 80000, 0, 80000, 1);
    }
    expect(&g, AN_MIXED);
}
END_TEST

/* A job that turns from sequential to random changes verdict within the
 * decay window, and counts the switch. */
START_TEST(test_pattern_change)
{
    gen g;

    gen_init(&g);
    for (uint64_t off = 0; g.n < 4096; off += MiB)
        rd(&g, 1, 1ull << 40, off, MiB, 0);
    ck_assert_int_eq(job(&g)->verdict, AN_SEQ_LARGE);
    while (g.n < 4096 + 2 * AN_DECAY)
        rd(&g, 2, 10ull << 30, (rnd() % ((10ull << 30) / 4096)) * 4096, 4096, 0);
    ck_assert_int_eq(job(&g)->verdict, AN_RANDOM_SMALL);
    ck_assert_uint_ge(job(&g)->switches, 1);
    ck_assert_uint_ge(job(&g)->verdict_runs, AN_STABLE);
    analysis_free(&g.an);
}
END_TEST

/* Memory: a million chunk reads over a million files keep AN_RING samples
 * at a lower rate; 200 jobs share AN_MAX_JOBS records; a reference to a
 * replaced job is ignored. */
START_TEST(test_bounded)
{
    analysis *an;
    an_ref refs[200];
    const an_job *j;
    unsigned live = 0;
    gen g;

    gen_init(&g);
    for (uint64_t i = 0; i < 1000000; i++)
        rd(&g, i, 100000, 0, 100000, 1);
    j = job(&g);
    ck_assert_uint_le(j->ring_n, AN_RING);
    ck_assert_uint_ge(j->ring_n, AN_RING / 2);
    ck_assert_uint_lt(j->thresh, AN_RATE_ONE / 64);
    ck_assert_uint_ge(j->thresh, AN_RATE_ONE / AN_MIN_RATE_INV);
    analysis_free(&g.an);

    ck_assert_int_eq(analysis_new(&an), 0);
    for (unsigned i = 0; i < 200; i++) {
        refs[i] = analysis_attach(an, i, (int32_t)i, i);
        analysis_read(an, refs[i], fkey(i), 1000, 4096, 0, 1000, 1, i);
        if (i % 3)
            analysis_detach(an, refs[i]);
    }
    for (unsigned i = 0; i < AN_MAX_JOBS + 8; i++)
        live += analysis_job(an, i) != NULL;
    ck_assert_uint_eq(live, AN_MAX_JOBS);
    /* the first jobs were replaced: their references do nothing */
    analysis_read(an, refs[1], fkey(1), 1000, 4096, 0, 1000, 1, 500);
    analysis_wait(an, refs[1], 5);
    analysis_hinted(an, refs[1]);
    analysis_detach(an, refs[1]);
    analysis_detach(an, (an_ref){ 999, 1 });
    analysis_detach(an, (an_ref){ 0, 0 });
    analysis_free(&an);
    analysis_free(&an);         /* NULL-safe */
}
END_TEST

/* Hostile values: zero lengths, zero chunks, offsets past the end or near
 * 2^64, empty files.  Nothing breaks (the sanitizers watch) and the report
 * of such a job still builds. */
START_TEST(test_hostile)
{
    an_caps caps = { .dram_capacity = 1, .nvme_capacity = 1, .chunk_size = 4 * MiB,
                     .dram_policy = 99, .nvme_policy = -5 };
    an_report r;
    gen g;

    gen_init(&g);
    for (int i = 0; i < 3000; i++) {
        uint64_t off = rnd(), len = rnd() >> (rnd() % 64), size = rnd() >> (rnd() % 64);
        analysis_read(g.an, g.ref, rnd(), size, (uint32_t)(rnd() % 3 ? rnd() : 0), off, len,
                      (int)(rnd() & 1), g.now += rnd() % 3000000000ull);
        analysis_read(g.an, g.ref, rnd(), 0, 4096, 0, 4096, 1, g.now);
        analysis_read(g.an, g.ref, rnd(), UINT64_MAX, UINT32_MAX, UINT64_MAX - 10, 100, 1,
                      g.now);
        analysis_read(g.an, g.ref, 0, 100, 4096, 0, 0, 0, g.now - 5);  /* time going back */
        analysis_wait(g.an, g.ref, rnd());
    }
    ck_assert_int_eq(analysis_report(job(&g), &caps, &r), 0);
    ck_assert_int_lt((int)r.cls, AN_NCLASSES);
    analysis_free(&g.an);
}
END_TEST

START_TEST(test_quantiles)
{
    an_hist h;

    an_job *j = calloc(1, sizeof(*j));
    analysis *an;
    an_ref r;

    memset(&h, 0, sizeof(h));
    ck_assert_uint_eq(an_hist_quantile(&h, 0.5), 0);
    /* through the classifier: 90 reads of 4 KiB, 10 of 1 MiB, 1 of 100000 */
    ck_assert_int_eq(analysis_new(&an), 0);
    r = analysis_attach(an, 1, 1, 0);
    for (int i = 0; i < 90; i++)
        analysis_read(an, r, fkey(1), 1ull << 30, 4 * MiB, (uint64_t)i * 8192, 4096, 0, 1);
    for (int i = 0; i < 10; i++)
        analysis_read(an, r, fkey(2), 1ull << 30, 4 * MiB, (uint64_t)i * MiB, MiB, 0, 1);
    *j = *analysis_job(an, r.slot);
    ck_assert_uint_eq(an_hist_quantile(&j->req_size, 0.5), 4096);
    ck_assert_uint_eq(an_hist_quantile(&j->req_size, 0.9), 4096);
    ck_assert_uint_eq(an_hist_quantile(&j->req_size, 0.95), MiB);
    ck_assert_uint_eq(an_hist_quantile(&j->req_size, 1.0), MiB);
    analysis_read(an, r, fkey(3), 1ull << 30, 4 * MiB, 0, 100000, 0, 1);
    *j = *analysis_job(an, r.slot);
    ck_assert_uint_eq(an_hist_quantile(&j->req_size, 1.0), MiB);
    /* 100000 lies in [98304, 114688): at most 25% below */
    memset(&h, 0, sizeof(h));
    for (uint64_t v = 1; v < (1ull << 62); v = v * 3 + 1) {
        memset(&h, 0, sizeof(h));
        h.b[0] = 0;
        analysis_free(&an);
        ck_assert_int_eq(analysis_new(&an), 0);
        r = analysis_attach(an, 1, 1, 0);
        analysis_read(an, r, fkey(4), UINT64_MAX, 4 * MiB, 0, v, 0, 1);
        ck_assert_uint_le(an_hist_quantile(&analysis_job(an, r.slot)->req_size, 0.5), v);
        ck_assert_uint_ge(an_hist_quantile(&analysis_job(an, r.slot)->req_size, 0.5) * 5 / 4 + 1, v);
    }
    analysis_free(&an);
    free(j);
    ck_assert_str_eq(an_class_name(AN_SHUFFLED_EPOCH), "shuffled-epoch");
    ck_assert_str_eq(an_class_name((an_class)77), "?");
}
END_TEST

/* policy = auto's rule: the replay's best only past the margin; epoch for
 * an epoch job's first pass and for a mixed whole-file job the replay
 * cannot yet rank; nothing for unknown jobs or bad arguments. */
START_TEST(test_auto_choice)
{
    an_report r;

    memset(&r, 0, sizeof(r));
    r.cls = AN_RANDOM_SMALL;
    r.ntiers = 1;
    for (int i = 0; i < AN_SIM_ROWS; i++)
        r.tiers[0].hit[i] = 0.50;
    r.tiers[0].hit[POLICY_S3FIFO] = 0.505;
    r.tiers[0].best = POLICY_S3FIFO;
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_LRU), -1);          /* within the margin */
    r.tiers[0].hit[POLICY_S3FIFO] = 0.52;
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_LRU), POLICY_S3FIFO);
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_S3FIFO), -1);       /* there already */
    ck_assert_int_eq(an_auto_choice(&r, 1, POLICY_LRU), -1);          /* no such tier */
    ck_assert_int_eq(an_auto_choice(&r, 0, 99), -1);
    ck_assert_int_eq(an_auto_choice(&r, -1, POLICY_LRU), -1);
    r.cls = AN_UNKNOWN;
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_LRU), -1);
    /* an epoch job before any re-read: epoch, whatever the replay says */
    r.cls = AN_SHUFFLED_EPOCH;
    r.reuse_share = 0;
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_LRU), POLICY_EPOCH);
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_EPOCH), -1);
    /* later, the replay decides */
    r.reuse_share = 0.5;
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_LRU), POLICY_S3FIFO);
    /* mixed whole files: epoch unless the replay says it loses */
    r.cls = AN_MIXED;
    r.share[AN_V_WHOLE] = 0.9;
    r.tiers[0].hit[POLICY_S3FIFO] = 0.50;
    r.tiers[0].best = POLICY_LRU;
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_LRU), POLICY_EPOCH);
    r.tiers[0].hit[POLICY_EPOCH] = 0.40;
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_LRU), -1);
    r.share[AN_V_WHOLE] = 0.3;
    r.tiers[0].hit[POLICY_EPOCH] = 0.50;
    ck_assert_int_eq(an_auto_choice(&r, 0, POLICY_LRU), -1);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("analysis");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sequential_large);
    tcase_add_test(tc, test_continuation_samples);
    tcase_add_test(tc, test_random_small);
    tcase_add_test(tc, test_epoch_first_pass);
    tcase_add_test(tc, test_epoch_shuffled);
    tcase_add_test(tc, test_epoch_same_order);
    tcase_add_test(tc, test_strided);
    tcase_add_test(tc, test_checkpoint_burst);
    tcase_add_test(tc, test_hot_set);
    tcase_add_test(tc, test_mixed);
    tcase_add_test(tc, test_hot_and_scan);
    tcase_add_test(tc, test_pattern_change);
    tcase_add_test(tc, test_bounded);
    tcase_add_test(tc, test_hostile);
    tcase_add_test(tc, test_quantiles);
    tcase_add_test(tc, test_auto_choice);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    int nf;

    srunner_run_all(sr, CK_NORMAL);
    nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
