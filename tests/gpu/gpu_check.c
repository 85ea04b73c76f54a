/*
 * gpu_check.c - the device check's program (tests/gpu/run.sh): correctness
 * and throughput of gr_read_to_device against a running granaryd and
 * whatever CUDA driver libgranary loads (the real libcuda.so.1 on a GPU
 * machine; the stand-in when $GRANARY_LIBCUDA names it, to try the script
 * without a GPU: the figures are then memcpy's, not a GPU's).
 *
 *   gpu_check SOCKET SRCDIR SIZE_MIB
 *
 * Writes SRCDIR/gpu_check.bin (SIZE_MIB MiB of pseudo-random bytes), warms
 * it into the daemon's DRAM tier, then:
 *   1. correctness: random ranges (unaligned, across chunks, past the end)
 *      copied with gr_read_to_device_batch into device memory at the same
 *      offsets, copied back and compared with the bytes written, once
 *      through registered arena memory and once through the staging ring
 *      (GR_GPU_REGISTER 0); after every wait the daemon's leases_active is
 *      back to 0; the GPU tier serves a second pass device to device;
 *   2. throughput, median of ROUNDS: gr_read_to_device of the whole file
 *      (DRAM hits, registered), the same through the staging ring, GPU tier
 *      hits, and cuMemcpyHtoD of the same bytes from pinned memory
 *      (cuMemHostAlloc) and from pageable memory (malloc), in one run;
 *      ratios against the goals (>= 0.9x pinned, >= 2x pageable,
 *      ring >= 0.8x pinned) and the CPU bytes copied on the hit path (0).
 * Prints one "RESULT name GB/s" line per measurement and "GOAL ... met|MISSED"
 * lines.  Exit 0 when every check passed (goals too if GPU_STRICT=1), 1 on a
 * wrong byte or a failed call, 2 on a missed goal under GPU_STRICT=1.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "gpu_cuda.h"
#include "granary.h"

#define ROUNDS 5
#define RANGES 600

static const gr__cuda *cu;
static int failures;

#define FAIL(...)                                                   \
    do {                                                            \
        fprintf(stderr, "FAIL: " __VA_ARGS__);                      \
        fputc('\n', stderr);                                        \
        failures++;                                                 \
    } while (0)

#define CU(call)                                                            \
    do {                                                                    \
        CUresult r_ = (call);                                               \
        if (r_ != CUDA_SUCCESS) {                                           \
            char eb_[160];                                                  \
            fprintf(stderr, "FAIL: %s: %s\n", #call,                        \
                    gr__cuda_strerror(cu, r_, eb_, sizeof(eb_)));           \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

typedef struct stat_arg {
    const char *name;
    uint64_t v;
} stat_arg;

static int stat_cb(void *arg, const char *name, uint64_t value)
{
    stat_arg *a = arg;

    if (strcmp(name, a->name))
        return 0;
    a->v = value;
    return 1;
}

static uint64_t daemon_stat(const char *sock, const char *name)
{
    stat_arg a = { name, UINT64_MAX };
    gr_client *c = gr_connect(sock);

    if (c) {
        gr_stats(c, stat_cb, &a);
        gr_disconnect(c);
    }
    return a.v;
}

/* leases_active settles at 0 within 2 s (RELEASE has no reply). */
static void check_leases_back(const char *sock, const char *when)
{
    uint64_t v = 0;

    for (int i = 0; i < 200; i++) {
        v = daemon_stat(sock, "leases_active");
        if (v == 0)
            return;
        usleep(10000);
    }
    FAIL("%s: the daemon still counts %" PRIu64 " leases", when, v);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

/* Random ranges into dbuf at their own offsets: the bytes of every range
 * right, every other byte untouched (0xAA). */
static void check_ranges(gr_client *c, gr_file *f, const uint8_t *host, uint64_t size,
                         CUdeviceptr dbuf, const char *sock, const char *what)
{
    gr_dev_range r[64];
    uint8_t *back = malloc(size + 4096), *cover = calloc(size + 4096, 1);
    uint64_t bad = 0, stray = 0;
    int done = 0;

    if (!back || !cover) {
        FAIL("%s: out of host memory", what);
        free(back);
        free(cover);
        return;
    }
    CU(cu->cuMemsetD8(dbuf, 0xAA, size + 4096));
    while (done < RANGES) {
        int n = RANGES - done < 64 ? RANGES - done : 64;
        gr_dev_batch *b;
        for (int i = 0; i < n; i++) {
            uint64_t off = next_rand() % size, len = next_rand() % (9u << 20) + 1;
            if (done + i == 0)
                off = size - 100, len = 4096;   /* past the end: 100 bytes */
            else if (off + len > size)
                len = size - off;
            r[i] = (gr_dev_range){ f, off, len, (void *)(uintptr_t)(dbuf + off), 0 };
            memset(cover + off, 1, off + len < size ? len : size - off);
        }
        if (gr_read_to_device_batch(c, r, (size_t)n, NULL, &b) < 0) {
            FAIL("%s: gr_read_to_device_batch: %s (%s)", what, strerror(errno), gr_strerror_last(c));
            break;
        }
        if (gr_dev_wait(b) < 0)
            FAIL("%s: gr_dev_wait: %s", what, gr_strerror_last(c));
        for (int i = 0; i < n; i++) {
            uint64_t want = r[i].off >= size ? 0 : r[i].len < size - r[i].off ? r[i].len
                                                                                 : size - r[i].off;
            if (r[i].done != want)
                FAIL("%s: range %" PRIu64 "+%" PRIu64 ": %" PRIu64 " bytes queued, %" PRIu64
                     " expected", what, r[i].off, r[i].len, r[i].done, want);
        }
        check_leases_back(sock, what);
        done += n;
    }
    CU(cu->cuMemcpyDtoH(back, dbuf, size + 4096));
    for (uint64_t i = 0; i < size + 4096; i++) {
        if (cover[i])
            bad += back[i] != host[i];
        else
            stray += back[i] != 0xAA;
    }
    if (bad || stray)
        FAIL("%s: %" PRIu64 " bytes wrong, %" PRIu64 " bytes outside every range written", what,
             bad, stray);
    else
        printf("ok   %s: %d random ranges byte-exact, nothing else written (copied back and compared)\n",
               what, RANGES);
    free(back);
    free(cover);
}

/* Wall-clock GB/s of gr_read_to_device of the whole file, median. */
static double bench_granary(gr_client *c, gr_file *f, uint64_t size, CUdeviceptr dbuf,
                            CUstream s)
{
    double t[ROUNDS];

    for (int k = 0; k < ROUNDS; k++) {
        gr_dev_batch *b;
        double t0 = gr__now_s();
        if (gr_read_to_device(f, (void *)(uintptr_t)dbuf, size, 0, s, &b) != (ssize_t)size ||
            gr_dev_wait(b) < 0) {
            FAIL("bench: %s", gr_strerror_last(c));
            return 0;
        }
        t[k] = (double)size / (gr__now_s() - t0) / 1e9;
    }
    return median(t, ROUNDS);
}

/* GB/s of cuMemcpyHtoD from src (pinned or pageable), whole buffer. */
static double bench_htod(const void *src, uint64_t size, CUdeviceptr dbuf)
{
    double t[ROUNDS];

    for (int k = 0; k < ROUNDS; k++) {
        double t0 = gr__now_s();
        CU(cu->cuMemcpyHtoD(dbuf, src, size));
        CU(cu->cuCtxSynchronize());
        t[k] = (double)size / (gr__now_s() - t0) / 1e9;
    }
    return median(t, ROUNDS);
}

static int goal(const char *what, double ratio, double want)
{
    int met = ratio >= want;

    printf("GOAL %-44s %5.2fx (want >= %.1fx) %s\n", what, ratio, want, met ? "met" : "MISSED");
    return met;
}

int main(int argc, char **argv)
{
    const char *sock, *dir, *why;
    char path[4096], info[1024];
    uint64_t size, mib;
    uint8_t *host, *pinned;
    gr_client *c, *cring, *ctier;
    gr_file *f, *fr, *ft;
    CUdeviceptr dbuf;
    CUcontext ctx;
    CUstream s;
    gr_gpu_stats st;
    double g_reg, g_ring, g_tier, g_pinned, g_pageable;
    int fd, en, missed = 0;

    if (argc != 4) {
        fprintf(stderr, "usage: %s SOCKET SRCDIR SIZE_MIB\n", argv[0]);
        return 1;
    }
    sock = argv[1];
    dir = argv[2];
    mib = strtoull(argv[3], NULL, 10);
    size = mib << 20;
    cu = gr__cuda_load(&why, &en);
    if (!cu) {
        fprintf(stderr, "FAIL: no usable CUDA: %s\n", why);
        return 1;
    }
    CU(cu->cuDevicePrimaryCtxRetain(&ctx, 0));
    CU(cu->cuCtxSetCurrent(ctx));
    CU(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    /* The data: pseudo-random, written once, kept in host memory to compare. */
    host = malloc(size);
    if (!host) {
        fprintf(stderr, "FAIL: malloc %" PRIu64 " MiB\n", mib);
        return 1;
    }
    for (uint64_t i = 0; i < size; i += 8) {
        uint64_t v = next_rand();
        memcpy(host + i, &v, size - i < 8 ? size - i : 8);
    }
    snprintf(path, sizeof(path), "%s/gpu_check.bin", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    for (uint64_t off = 0; off < size;) {
        ssize_t n = write(fd, host + off, size - off < (64u << 20) ? size - off : (64u << 20));
        if (n <= 0) {
            perror("write");
            return 1;
        }
        off += (uint64_t)n;
    }
    close(fd);

    /* Leases a client keeps to serve later reads with no message (issue 14)
     * stay lent for client_lease_ttl by design; check_lcache owns those.  The
     * checks here count what the device path itself holds, so these clients
     * keep none: every lease is back once a wait returns. */
    setenv("GRANARY_LEASE_CACHE", "0", 1);
    c = gr_connect(sock);
    cring = gr_connect(sock);
    ctier = gr_connect(sock);
    if (!c || !cring || !ctier) {
        fprintf(stderr, "FAIL: connect %s: %s\n", sock, strerror(errno));
        return 1;
    }
    f = gr_open(c, path);
    fr = gr_open(cring, path);
    ft = gr_open(ctier, path);
    if (!f || !fr || !ft) {
        fprintf(stderr, "FAIL: open %s: %s\n", path, gr_strerror_last(c));
        return 1;
    }
    /* Warm the DRAM tier (a plain read), then note where the source stands. */
    {
        uint8_t *tmp = malloc(64u << 20);
        for (uint64_t off = 0; off < size; off += 64u << 20)
            if (gr_pread(f, tmp, 64u << 20, (off_t)off) < 0) {
                fprintf(stderr, "FAIL: warm: %s\n", gr_strerror_last(c));
                return 1;
            }
        free(tmp);
    }
    if (gr_gpu_info(c, info, sizeof(info)) < 0) {
        fprintf(stderr, "FAIL: GPU path: %s\n", info);
        return 1;
    }
    printf("gpu: %s\n", info);
    CU(cu->cuMemAlloc(&dbuf, size + 4096));

    /* 1. correctness */
    check_ranges(c, f, host, size, dbuf, sock, "registered arena");
    if (gr_gpu_set(cring, GR_GPU_REGISTER, 0) < 0)
        FAIL("gr_gpu_set: %s", gr_strerror_last(cring));
    check_ranges(cring, fr, host, size, dbuf, sock, "staging ring");
    gr_gpu_get_stats(cring, &st);
    if (st.direct_bytes || !st.staged_bytes)
        FAIL("staging ring: %" PRIu64 " direct bytes, %" PRIu64 " staged", st.direct_bytes,
             st.staged_bytes);
    gr_gpu_get_stats(c, &st);
    if (st.registration_failures)
        FAIL("the driver refused %" PRIu64 " segment registrations (see gpu: line)",
             st.registration_failures);

    /* 2. throughput (a first pass registers every segment: not timed) */
    {
        gr_dev_batch *b;
        if (gr_read_to_device(f, (void *)(uintptr_t)dbuf, size, 0, s, &b) != (ssize_t)size ||
            gr_dev_wait(b) < 0)
            FAIL("warm pass: %s", gr_strerror_last(c));
    }
    gr_gpu_get_stats(c, &st);
    {
        uint64_t staged0 = st.staged_bytes;
        g_reg = bench_granary(c, f, size, dbuf, s);
        gr_gpu_get_stats(c, &st);
        printf("RESULT granary_registered %.2f GB/s (CPU bytes copied on the hit path: %" PRIu64 ")\n",
               g_reg, st.staged_bytes - staged0);
        if (st.staged_bytes != staged0)
            FAIL("the hit path copied %" PRIu64 " bytes on the CPU", st.staged_bytes - staged0);
    }
    check_leases_back(sock, "throughput");
    g_ring = bench_granary(cring, fr, size, dbuf, s);
    printf("RESULT granary_staging_ring %.2f GB/s\n", g_ring);
    if (gr_gpu_set(ctier, GR_GPU_TIER_BYTES, size + (256u << 20)) < 0)
        FAIL("gr_gpu_set tier: %s", gr_strerror_last(ctier));
    {
        gr_dev_batch *b;
        if (gr_read_to_device(ft, (void *)(uintptr_t)dbuf, size, 0, s, &b) != (ssize_t)size ||
            gr_dev_wait(b) < 0)
            FAIL("tier fill: %s", gr_strerror_last(ctier));
    }
    g_tier = bench_granary(ctier, ft, size, dbuf, s);
    gr_gpu_get_stats(ctier, &st);
    printf("RESULT granary_gpu_tier %.2f GB/s (tier hits %" PRIu64 ", misses %" PRIu64 ")\n",
           g_tier, st.tier_hits, st.tier_misses);
    {
        uint8_t *back = malloc(size);
        CU(cu->cuMemcpyDtoH(back, dbuf, size));
        if (memcmp(back, host, size))
            FAIL("GPU tier: the bytes differ after copying back");
        else
            printf("ok   GPU tier: whole file byte-exact from device memory\n");
        free(back);
    }
    CU(cu->cuMemHostAlloc((void **)&pinned, size, CU_MEMHOSTALLOC_PORTABLE));
    memcpy(pinned, host, size);
    g_pinned = bench_htod(pinned, size, dbuf);
    printf("RESULT cuMemcpyHtoD_pinned %.2f GB/s\n", g_pinned);
    g_pageable = bench_htod(host, size, dbuf);
    printf("RESULT cuMemcpyHtoD_pageable %.2f GB/s\n", g_pageable);
    CU(cu->cuMemFreeHost(pinned));

    printf("\n| path | GB/s | vs pinned | vs pageable |\n|---|---:|---:|---:|\n");
    printf("| gr_read_to_device, DRAM hits (registered) | %.2f | %.2f | %.2f |\n", g_reg,
           g_reg / g_pinned, g_reg / g_pageable);
    printf("| gr_read_to_device, staging ring | %.2f | %.2f | %.2f |\n", g_ring, g_ring / g_pinned,
           g_ring / g_pageable);
    printf("| gr_read_to_device, GPU tier hits | %.2f | %.2f | %.2f |\n", g_tier, g_tier / g_pinned,
           g_tier / g_pageable);
    printf("| cuMemcpyHtoD from pinned memory | %.2f | 1.00 | %.2f |\n", g_pinned,
           g_pinned / g_pageable);
    printf("| cuMemcpyHtoD from pageable memory | %.2f | %.2f | 1.00 |\n\n", g_pageable,
           g_pageable / g_pinned);
    missed += !goal("DRAM hits vs pinned cuMemcpyHtoD", g_reg / g_pinned, 0.9);
    missed += !goal("DRAM hits vs pageable cuMemcpyHtoD", g_reg / g_pageable, 2.0);
    missed += !goal("staging ring vs pinned cuMemcpyHtoD", g_ring / g_pinned, 0.8);

    gr_close(f);
    gr_close(fr);
    gr_close(ft);
    gr_disconnect(c);
    gr_disconnect(cring);
    gr_disconnect(ctier);
    check_leases_back(sock, "disconnect");
    printf("daemon: gpu_bytes %" PRIu64 ", gpu_direct_bytes %" PRIu64 ", gpu_staged_bytes %" PRIu64
           ", gpu_tier_hits %" PRIu64 ", gpu_clients %" PRIu64 ", gpu_gds_clients %" PRIu64 "\n",
           daemon_stat(sock, "gpu_bytes"), daemon_stat(sock, "gpu_direct_bytes"),
           daemon_stat(sock, "gpu_staged_bytes"), daemon_stat(sock, "gpu_tier_hits"),
           daemon_stat(sock, "gpu_clients"), daemon_stat(sock, "gpu_gds_clients"));
    CU(cu->cuMemFree(dbuf));
    CU(cu->cuStreamDestroy(s));
    free(host);
    unlink(path);
    if (failures) {
        printf("gpu_check: %d FAILURES\n", failures);
        return 1;
    }
    if (missed && getenv("GPU_STRICT") && !strcmp(getenv("GPU_STRICT"), "1")) {
        printf("gpu_check: correct, %d goals missed (GPU_STRICT=1)\n", missed);
        return 2;
    }
    printf("gpu_check: correct%s\n", missed ? ", some goals missed (see GOAL lines)" : ", goals met");
    return 0;
}
