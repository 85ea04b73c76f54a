/*
 * check_gpu.c - the GPU path (gr_read_to_device and friends, client/gpu.c)
 * against a real granaryd on a temporary socket and a CUDA driver.
 *
 * The driver is the stand-in (build/tests/cuda/libcuda.so.1, beside this
 * program, loaded through $GRANARY_LIBCUDA like any driver) unless
 * GR_TEST_REAL_CUDA=1, which tests/gpu/run.sh sets on a GPU machine: then
 * the same tests run against libcuda.so.1, and the steps that need the
 * stand-in's knobs (refuse registration, fail a copy, complete late) or its
 * counters are skipped with a SKIP line saying so.  On the stand-in, what
 * only a GPU shows (DMA from pinned pages, throughput) is skipped likewise:
 * tests/gpu/run.sh measures it.
 *
 * Checked: byte-exact copies of random ranges (and nothing outside them),
 * registration once per segment and read-only, undone at disconnect and
 * when a connection dies; the staging ring when registration is refused or
 * unsupported; leases held while a copy is queued and given back when it
 * completes (with or without a handle), across late copies; a copy refused
 * when queued and one that faults on the device; the next batch fetched
 * while the last one copies; batches over many files; the GPU tier (hits
 * device to device, no daemon lookups, a changed file missing, eviction)
 * and its counters reported to the daemon; errors without a driver or GPU.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "gpu_cuda.h"
#include "granary.h"
#include "testutil.h"

#define CHUNK (64 * 1024)

static tu_daemon d;
static const gr__cuda *cu;
static CUcontext ctx;
static uint64_t (*sa_counter)(const char *);    /* the stand-in's, NULL on a real driver */
static char standin[1024];

static int real_cuda(void)
{
    const char *v = getenv("GR_TEST_REAL_CUDA");

    return v && *v == '1';
}

static int forked(void)
{
    const char *v = getenv("CK_FORK");

    return !v || strcmp(v, "no") != 0;
}

/* build/tests/cuda/libcuda.so.1 beside this program (build/ or build/san/). */
static void find_standin(void)
{
    char exe[900];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char *slash;

    ck_assert_int_gt(n, 0);
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    ck_assert_ptr_nonnull(slash);
    *slash = '\0';
    snprintf(standin, sizeof(standin), "%s/cuda/libcuda.so.1", exe);
}

static void skip(const char *what)
{
    printf("SKIP: %s\n", what);
    fflush(stdout);
}

static void setup(void)
{
    if (!real_cuda()) {
        find_standin();
        setenv("GRANARY_LIBCUDA", standin, 1);
    }
    setenv("GRANARY_TIMEOUT_MS", "20000", 1);
    tu_daemon_init(&d, "[dram]\ncapacity = 64M\n");
    ck_assert_msg(tu_daemon_start(&d) == 0, "granaryd did not start (log: %s)", d.log);
}

static void teardown(void)
{
    if (d.pid > 0)
        ck_assert_int_eq(tu_daemon_stop(&d), 0);
    tu_daemon_fini(&d);
}

/* The driver table (the library's own loader) with a context current on
 * this thread, and the stand-in's counters when it is the driver. */
static void cuda_up(void)
{
    const char *why;
    int en;

    cu = gr__cuda_load(&why, &en);
    ck_assert_msg(cu != NULL, "CUDA: %s", why);
    ck_assert_int_eq(cu->cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ck_assert_int_eq(cu->cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    sa_counter = NULL;
    if (!real_cuda()) {
        void *h = dlopen(standin, RTLD_NOW | RTLD_NOLOAD);
        ck_assert_msg(h != NULL, "the stand-in is not the loaded driver");
        sa_counter = (uint64_t (*)(const char *))dlsym(h, "standin_counter");
        ck_assert_ptr_nonnull(sa_counter);
        dlclose(h);
    }
}

static uint64_t sa(const char *name)
{
    uint64_t v = sa_counter ? sa_counter(name) : 0;

    ck_assert_msg(v != UINT64_MAX, "no stand-in counter %s", name);
    return v;
}

static CUdeviceptr dalloc(size_t n, int fill)
{
    CUdeviceptr p;
    void *h = malloc(n);

    ck_assert_int_eq(cu->cuMemAlloc(&p, n), CUDA_SUCCESS);
    memset(h, fill, n);
    ck_assert_int_eq(cu->cuMemcpyHtoD(p, h, n), CUDA_SUCCESS);
    free(h);
    return p;
}

static void *dtoh(CUdeviceptr p, size_t n)
{
    void *h = malloc(n);

    ck_assert_int_eq(cu->cuMemcpyDtoH(h, p, n), CUDA_SUCCESS);
    return h;
}

static char *src_path(const char *name)
{
    static char p[1024];

    snprintf(p, sizeof(p), "%s/%s", d.src, name);
    return p;
}

static gr_client *connect_ok(void)
{
    gr_client *c = gr_connect(d.sock);

    ck_assert_ptr_nonnull(c);
    return c;
}

static gr_file *open_ok(gr_client *c, const char *name)
{
    gr_file *f = gr_open(c, src_path(name));

    ck_assert_msg(f != NULL, "open %s: %s", name, gr_strerror_last(c));
    return f;
}

/* Copy [off, off+len) of f to dbuf+off and wait; returns the bytes. */
static ssize_t copy_wait(gr_file *f, CUdeviceptr dbuf, size_t len, off_t off)
{
    gr_dev_batch *b = NULL;
    ssize_t n = gr_read_to_device(f, (void *)(uintptr_t)(dbuf + (uint64_t)off), len, off, NULL, &b);

    if (n > 0) {
        ck_assert_ptr_nonnull(b);
        ck_assert_int_eq(gr_dev_wait(b), 0);
    }
    return n;
}

/* ---- errors without a usable driver ---- */

static void expect_no_gpu(int want_errno, const char *want_text)
{
    gr_client *c;
    gr_file *f;
    char info[512];
    ssize_t n;

    tu_write_pattern(src_path("a"), 1, CHUNK);
    c = connect_ok();
    f = open_ok(c, "a");
    errno = 0;
    n = gr_read_to_device(f, (void *)(uintptr_t)0x1000, 100, 0, NULL, NULL);
    ck_assert_int_eq(n, -1);
    ck_assert_int_eq(errno, want_errno);
    ck_assert_msg(strstr(gr_strerror_last(c), want_text), "reason: %s", gr_strerror_last(c));
    ck_assert_int_eq(gr_gpu_info(c, info, sizeof(info)), -1);
    ck_assert_int_eq(errno, want_errno);
    ck_assert_msg(strstr(info, want_text), "info: %s", info);
    /* the rest of the client is unaffected */
    {
        char buf[100];
        ck_assert_int_eq(gr_pread(f, buf, sizeof(buf), 0), 100);
        ck_assert(tu_check_pattern(buf, 1, 0, 100));
    }
    gr_close(f);
    gr_disconnect(c);
}

START_TEST(test_no_driver)
{
    if (!forked())
        return skip("no-driver test needs a fresh process per test (CK_FORK=no)");
    setenv("GRANARY_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    expect_no_gpu(ENODEV, "no CUDA driver");
}
END_TEST

START_TEST(test_no_device)
{
    if (real_cuda() || !forked())
        return skip("cuInit failures are made by the stand-in (GR_STANDIN_INIT_ERROR)");
    setenv("GR_STANDIN_INIT_ERROR", "100", 1);
    expect_no_gpu(ENODEV, "CUDA_ERROR_NO_DEVICE");
}
END_TEST

START_TEST(test_stub_library)
{
    if (real_cuda() || !forked())
        return skip("cuInit failures are made by the stand-in (GR_STANDIN_INIT_ERROR)");
    setenv("GR_STANDIN_INIT_ERROR", "34", 1);
    expect_no_gpu(ENODEV, "CUDA_ERROR_STUB_LIBRARY");
}
END_TEST

START_TEST(test_missing_entry_point)
{
    if (real_cuda() || !forked())
        return skip("a missing entry point is made by the stand-in (GR_STANDIN_NO_PROC)");
    setenv("GR_STANDIN_NO_PROC", "cuLaunchHostFunc", 1);
    expect_no_gpu(ENOSYS, "cuLaunchHostFunc");
}
END_TEST

/* ---- copies ---- */

/* Random ranges of a file into a device buffer at the same offsets: every
 * copied byte right, every other byte untouched. */
static void random_ranges(gr_client *c, const char *name, uint32_t seed, size_t size, int nranges,
                          int batched)
{
    gr_file *f = open_ok(c, name);
    CUdeviceptr dbuf = dalloc(size + 4096, 0xAA);
    uint8_t *cover = calloc(size + 4096, 1), *h;
    gr_dev_range *r = calloc((size_t)nranges, sizeof(*r));
    unsigned rs = seed * 7919u + 1;

    for (int i = 0; i < nranges; i++) {
        size_t off = (size_t)(rand_r(&rs) % (int)size), len = (size_t)(rand_r(&rs) % (3 * CHUNK)) + 1;
        if (i == 0) {
            off = 0;
            len = size;                 /* the whole file once */
        } else if (i == 1) {
            off = size - 10;
            len = 5000;                 /* past the end: 10 bytes */
        }
        r[i] = (gr_dev_range){ f, off, len, (void *)(uintptr_t)(dbuf + off), 0 };
        memset(cover + off, 1, (off + len < size ? off + len : size) - off);
    }
    if (batched) {
        gr_dev_batch *b;
        ck_assert_msg(gr_read_to_device_batch(c, r, (size_t)nranges, NULL, &b) == 0, "batch: %s",
                      gr_strerror_last(c));
        ck_assert_int_eq(gr_dev_wait(b), 0);
    } else {
        for (int i = 0; i < nranges; i++) {
            gr_dev_batch *b;
            ssize_t n = gr_read_to_device(f, r[i].dst, r[i].len, (off_t)r[i].off, NULL, &b);
            ck_assert_msg(n >= 0, "range %d: %s", i, gr_strerror_last(c));
            r[i].done = (uint64_t)n;
            ck_assert_int_eq(gr_dev_wait(b), 0);
        }
    }
    for (int i = 0; i < nranges; i++) {
        uint64_t want = r[i].off >= size ? 0 : r[i].len < size - r[i].off ? r[i].len : size - r[i].off;
        ck_assert_uint_eq(r[i].done, want);
    }
    h = dtoh(dbuf, size + 4096);
    /* (one assertion at the end: Check's are slow in a loop) */
    for (size_t k = 0; k < size + 4096; k++) {
        if (cover[k] && h[k] != tu_byte(seed, k))
            ck_abort_msg("byte %zu wrong", k);
        if (!cover[k] && h[k] != 0xAA)
            ck_abort_msg("byte %zu outside every range was written", k);
    }
    free(h);
    free(cover);
    free(r);
    cu->cuMemFree(dbuf);
    gr_close(f);
}

START_TEST(test_exact_ranges)
{
    gr_client *c;
    gr_gpu_stats st;

    cuda_up();
    tu_write_pattern(src_path("a"), 11, 20 * CHUNK + 123);
    c = connect_ok();
    random_ranges(c, "a", 11, 20 * CHUNK + 123, 40, 0);     /* misses, then hits */
    random_ranges(c, "a", 11, 20 * CHUNK + 123, 40, 1);     /* one batch, all hits */
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.copies, 80);
    ck_assert_uint_gt(st.direct_bytes, 0);
    ck_assert_uint_eq(st.direct_bytes + st.staged_bytes, st.bytes);
    ck_assert_uint_eq(st.staged_bytes, 0);  /* every byte came as a leased extent: no CPU copy */
    ck_assert_uint_gt(st.registered_segments, 0);
    ck_assert_uint_eq(st.registration_failures, 0);
    if (sa_counter) {
        ck_assert_uint_eq(sa("htod_pageable"), 0);
        ck_assert_uint_eq(sa("htod_pinned"), 0);
        ck_assert_uint_gt(sa("htod_registered"), 0);
        /* registered read-only, as the mapping is */
        ck_assert_uint_eq(sa("register_readonly"), sa("register_calls"));
        ck_assert_uint_eq(sa("register_denied"), 0);
        ck_assert_uint_eq(sa("use_after_unregister"), 0);
    }
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
    ck_assert_uint_eq(tu_stat(&d, "gpu_copies"), 80);
    ck_assert_uint_eq(tu_stat(&d, "gpu_clients"), 1);
}
END_TEST

/* One registration per segment mapping, kept across calls, undone at
 * disconnect; every driver object freed. */
START_TEST(test_registration_cache)
{
    gr_client *c;
    gr_file *f;
    CUdeviceptr dbuf;
    gr_gpu_stats st;
    uint64_t regs, calls;

    cuda_up();
    if (!sa_counter)
        return skip("counting registrations needs the stand-in's counters");
    tu_write_pattern(src_path("a"), 3, 32 * CHUNK);
    c = connect_ok();
    f = open_ok(c, "a");
    dbuf = dalloc(32 * CHUNK, 0);
    ck_assert_int_eq(copy_wait(f, dbuf, 32 * CHUNK, 0), 32 * CHUNK);
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    regs = st.registered_segments;
    calls = sa("register_calls");
    ck_assert_uint_gt(regs, 0);
    ck_assert_uint_eq(sa("registered"), regs);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(copy_wait(f, dbuf, 32 * CHUNK, 0), 32 * CHUNK);
    ck_assert_uint_eq(sa("register_calls"), calls);     /* cached, not asked again */
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.registered_segments, regs);
    gr_close(f);
    gr_disconnect(c);
    ck_assert_uint_eq(sa("registered"), 0);
    ck_assert_uint_eq(sa("unregister_calls"), calls);
    ck_assert_uint_eq(sa("streams"), 0);
    ck_assert_uint_eq(sa("events"), 0);
    ck_assert_uint_eq(sa("host_allocs"), 0);
    ck_assert_uint_eq(sa("device_allocs"), 1);          /* ours */
    cu->cuMemFree(dbuf);
}
END_TEST

/* The staging ring: registration refused by the driver, or the device
 * unable to register read-only memory: the same bytes, from pinned slots,
 * the slots reused (more bytes than the ring holds). */
static void ring_case(const char *knob, const char *value)
{
    gr_client *c;
    gr_gpu_stats st;
    char info[1024];

    setenv(knob, value, 1);
    cuda_up();
    tu_write_pattern(src_path("big"), 5, 200 * CHUNK + 17);    /* ~12.5 MiB, the ring 8 MiB */
    /* leases_active below counts the GPU path's leases only. */
    setenv("GRANARY_LEASE_CACHE", "0", 1);
    c = connect_ok();
    unsetenv("GRANARY_LEASE_CACHE");
    ck_assert_int_eq(gr_gpu_set(c, GR_GPU_RING_BYTES, 8u << 20), 0);
    random_ranges(c, "big", 5, 200 * CHUNK + 17, 12, 1);
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.direct_bytes, 0);
    ck_assert_uint_eq(st.staged_bytes, st.bytes);
    ck_assert_uint_gt(st.bytes, 200 * CHUNK);
    ck_assert_uint_eq(st.registered_segments, 0);
    ck_assert_uint_gt(st.registration_failures, 0);
    ck_assert_int_eq(gr_gpu_info(c, info, sizeof(info)), 0);
    ck_assert_msg(strstr(info, "staging ring used"), "info: %s", info);
    ck_assert_uint_eq(sa("htod_pageable"), 0);
    ck_assert_uint_eq(sa("htod_registered"), 0);
    ck_assert_uint_gt(sa("htod_pinned"), 0);
    /* Late DMA out of the slots: the wait covers it, and the leases were
     * given back once the bytes were in pinned memory, before the DMA. */
    {
        gr_file *f = open_ok(c, "big");
        CUdeviceptr dbuf = dalloc(6 * CHUNK, 0);
        gr_dev_batch *b;
        uint8_t *h;
        setenv("GR_STANDIN_DELAY_US", "50000", 1);
        ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)dbuf, 6 * CHUNK, 7, NULL, &b),
                         6 * CHUNK);
        ck_assert_uint_eq(tu_stat(&d, "leases_active"), 0);
        ck_assert_int_eq(gr_dev_wait(b), 0);
        unsetenv("GR_STANDIN_DELAY_US");
        h = dtoh(dbuf, 6 * CHUNK);
        ck_assert(tu_check_pattern(h, 5, 7, 6 * CHUNK));
        free(h);
        cu->cuMemFree(dbuf);
        gr_close(f);
    }
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
    ck_assert_uint_eq(sa("host_allocs"), 0);
    ck_assert_uint_eq(tu_stat(&d, "gpu_staged_bytes"), st.staged_bytes);
}

START_TEST(test_ring_refused)
{
    if (real_cuda())
        return skip("refusing registration is the stand-in's (GR_STANDIN_REGISTER); "
                    "tests/gpu/run.sh checks the ring with GR_GPU_REGISTER 0");
    ring_case("GR_STANDIN_REGISTER", "refuse");
}
END_TEST

START_TEST(test_ring_no_readonly)
{
    if (real_cuda())
        return skip("a device without read-only registration is the stand-in's");
    ring_case("GR_STANDIN_READONLY", "0");
    ck_assert_uint_eq(sa("register_calls"), 0);     /* not even asked */
}
END_TEST

/* The ring on request (GR_GPU_REGISTER 0): works with any driver. */
START_TEST(test_ring_by_option)
{
    gr_client *c;
    gr_gpu_stats st;

    cuda_up();
    tu_write_pattern(src_path("a"), 9, 100 * CHUNK);
    c = connect_ok();
    ck_assert_int_eq(gr_gpu_set(c, GR_GPU_REGISTER, 0), 0);
    random_ranges(c, "a", 9, 100 * CHUNK, 30, 1);
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.direct_bytes, 0);
    ck_assert_uint_eq(st.staged_bytes, st.bytes);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
}
END_TEST

/* ---- lease lifetime across late copies ---- */

START_TEST(test_leases_follow_copies)
{
    gr_client *c;
    gr_file *f;
    CUdeviceptr dbuf;
    gr_dev_batch *b;
    gr_gpu_stats st;
    double t0, t1;
    uint8_t *h;

    if (real_cuda())
        return skip("copies that complete late are the stand-in's (GR_STANDIN_DELAY_US)");
    cuda_up();
    tu_write_pattern(src_path("a"), 4, 4 * CHUNK);
    c = connect_ok();
    f = open_ok(c, "a");
    dbuf = dalloc(4 * CHUNK, 0);
    ck_assert_int_eq(copy_wait(f, dbuf, 4 * CHUNK, 0), 4 * CHUNK);     /* warm, registered */
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);

    setenv("GR_STANDIN_DELAY_US", "80000", 1);      /* each copy runs 80 ms late */
    t0 = gr__now_s();
    ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)dbuf, 4 * CHUNK, 0, NULL, &b),
                     4 * CHUNK);
    t1 = gr__now_s();
    ck_assert_msg(t1 - t0 < 0.3, "gr_read_to_device waited for the copies (%.3f s)", t1 - t0);
    ck_assert_int_eq(gr_dev_poll(b), 0);
    /* the four chunks stay leased while their copies are queued */
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 4);
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.leased_bytes, 4 * CHUNK);
    ck_assert_uint_eq(st.batches_inflight, 1);
    ck_assert_int_eq(gr_dev_wait(b), 0);
    ck_assert_msg(gr__now_s() - t0 >= 0.3, "the wait returned before the copies ran");
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.leased_bytes, 0);
    ck_assert_uint_eq(st.batches_inflight, 0);

    /* Without a handle: given back as the copies complete, no call needed. */
    ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)dbuf, 4 * CHUNK, 0, NULL, NULL),
                     4 * CHUNK);
    ck_assert_uint_eq(tu_stat(&d, "leases_active"), 4);
    tu_sleep_ms(400);
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
    unsetenv("GR_STANDIN_DELAY_US");
    h = dtoh(dbuf, 4 * CHUNK);
    ck_assert(tu_check_pattern(h, 4, 0, 4 * CHUNK));
    free(h);
    ck_assert_uint_eq(sa("use_after_unregister"), 0);
    gr_close(f);
    gr_disconnect(c);
    cu->cuMemFree(dbuf);
}
END_TEST

/* The next batch is fetched (a miss: the source is read) while the
 * previous one's copies are still queued. */
START_TEST(test_overlap)
{
    gr_client *c;
    gr_file *fa, *fb;
    CUdeviceptr da, db;
    gr_dev_batch *ba, *bb;
    uint64_t misses;
    uint8_t *h;

    if (real_cuda())
        return skip("holding copies back is the stand-in's (GR_STANDIN_DELAY_US)");
    cuda_up();
    tu_write_pattern(src_path("a"), 21, 8 * CHUNK);
    tu_write_pattern(src_path("b"), 22, 8 * CHUNK);
    c = connect_ok();
    fa = open_ok(c, "a");
    fb = open_ok(c, "b");
    da = dalloc(8 * CHUNK, 0);
    db = dalloc(8 * CHUNK, 0);
    ck_assert_int_eq(copy_wait(fa, da, 8 * CHUNK, 0), 8 * CHUNK);      /* a is warm */
    misses = tu_stat(&d, "misses");
    setenv("GR_STANDIN_DELAY_US", "40000", 1);
    ck_assert_int_eq(gr_read_to_device(fa, (void *)(uintptr_t)da, 8 * CHUNK, 0, NULL, &ba),
                     8 * CHUNK);
    ck_assert_int_eq(gr_read_to_device(fb, (void *)(uintptr_t)db, 8 * CHUNK, 0, NULL, &bb),
                     8 * CHUNK);
    /* b was read from the source while a's copies had not run yet */
    ck_assert_int_eq(gr_dev_poll(ba), 0);
    ck_assert_uint_eq(tu_stat(&d, "misses"), misses + 8);
    ck_assert_int_eq(gr_dev_wait(ba), 0);
    ck_assert_int_eq(gr_dev_wait(bb), 0);
    unsetenv("GR_STANDIN_DELAY_US");
    h = dtoh(db, 8 * CHUNK);
    ck_assert(tu_check_pattern(h, 22, 0, 8 * CHUNK));
    free(h);
    h = dtoh(da, 8 * CHUNK);
    ck_assert(tu_check_pattern(h, 21, 0, 8 * CHUNK));
    free(h);
    gr_close(fa);
    gr_close(fb);
    gr_disconnect(c);
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
    cu->cuMemFree(da);
    cu->cuMemFree(db);
}
END_TEST

/* ---- failures ---- */

START_TEST(test_copy_refused)
{
    gr_client *c;
    gr_file *f;
    CUdeviceptr dbuf;
    gr_dev_batch *b = (gr_dev_batch *)1;
    uint8_t *h;

    if (real_cuda())
        return skip("a refused copy is the stand-in's (GR_STANDIN_FAIL_COPY)");
    cuda_up();
    tu_write_pattern(src_path("a"), 6, 8 * CHUNK);
    c = connect_ok();
    f = open_ok(c, "a");
    dbuf = dalloc(8 * CHUNK, 0);
    setenv("GR_STANDIN_DELAY_US", "50000", 1);
    setenv("GR_STANDIN_FAIL_COPY", "3", 1);     /* the third chunk's copy */
    ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)dbuf, 8 * CHUNK, 0, NULL, &b), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(gr_strerror_last(c), "cuMemcpyHtoDAsync: CUDA_ERROR_INVALID_VALUE"),
                  "reason: %s", gr_strerror_last(c));
    /* the two copies queued before it still hold their leases, then not */
    ck_assert_uint_ge(tu_stat(&d, "leases_active"), 1);
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
    unsetenv("GR_STANDIN_FAIL_COPY");
    unsetenv("GR_STANDIN_DELAY_US");
    /* not fatal: the next call works */
    ck_assert_int_eq(copy_wait(f, dbuf, 8 * CHUNK, 0), 8 * CHUNK);
    h = dtoh(dbuf, 8 * CHUNK);
    ck_assert(tu_check_pattern(h, 6, 0, 8 * CHUNK));
    free(h);
    gr_close(f);
    gr_disconnect(c);
    cu->cuMemFree(dbuf);
}
END_TEST

START_TEST(test_copy_faults)
{
    gr_client *c;
    gr_file *f;
    CUdeviceptr dbuf;
    gr_dev_batch *b;

    if (real_cuda())
        return skip("a faulting copy is the stand-in's (GR_STANDIN_FAIL_ASYNC)");
    cuda_up();
    tu_write_pattern(src_path("a"), 8, 8 * CHUNK);
    /* leases_active below counts the GPU path's leases only (a kept lease
     * stays for client_lease_ttl by design; check_lcache tests those). */
    setenv("GRANARY_LEASE_CACHE", "0", 1);
    c = connect_ok();
    unsetenv("GRANARY_LEASE_CACHE");
    f = open_ok(c, "a");
    dbuf = dalloc(8 * CHUNK, 0);
    setenv("GR_STANDIN_FAIL_ASYNC", "2", 1);
    /* The fault shows in the wait, or already in the call when it comes
     * while later copies are being queued. */
    if (gr_read_to_device(f, (void *)(uintptr_t)dbuf, 8 * CHUNK, 0, NULL, &b) == 8 * CHUNK)
        ck_assert_int_eq(gr_dev_wait(b), -1);
    else
        ck_assert_ptr_null(b);
    ck_assert_int_eq(errno, EIO);
    ck_assert_msg(strstr(gr_strerror_last(c), "CUDA_ERROR_ILLEGAL_ADDRESS"), "reason: %s",
                  gr_strerror_last(c));
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
    /* the context is gone for good: a clear error, no hang */
    ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)dbuf, 100, 0, NULL, NULL), -1);
    ck_assert_int_eq(errno, EIO);
    ck_assert_msg(strstr(gr_strerror_last(c), "unusable"), "reason: %s", gr_strerror_last(c));
    /* plain reads still work */
    {
        char buf[64];
        ck_assert_int_eq(gr_pread(f, buf, sizeof(buf), 5), 64);
        ck_assert(tu_check_pattern(buf, 8, 5, 64));
    }
    gr_close(f);
    gr_disconnect(c);
}
END_TEST

/* A fault that surfaces after the batch's last group was closed (its host
 * function queued, never to run on a dead context) but before the batch's
 * own event was recorded: the call fails, no batch comes back, and the
 * leases of the queued copies are still given back. */
START_TEST(test_fault_after_last_group)
{
    gr_client *c;
    gr_file *f;
    CUdeviceptr dbuf;
    gr_dev_batch *b = (gr_dev_batch *)1;
    uint64_t r0, per_call;
    char fail_at[32];

    if (real_cuda())
        return skip("a fault at a chosen cuEventRecord is the stand-in's (GR_STANDIN_FAIL_RECORD)");
    cuda_up();
    tu_write_pattern(src_path("a"), 9, 8 * CHUNK);
    setenv("GRANARY_LEASE_CACHE", "0", 1);      /* leases_active: the GPU path's only */
    c = connect_ok();
    unsetenv("GRANARY_LEASE_CACHE");
    f = open_ok(c, "a");
    dbuf = dalloc(8 * CHUNK, 0);
    ck_assert_int_eq(copy_wait(f, dbuf, 8 * CHUNK, 0), 8 * CHUNK);     /* warm, registered */
    r0 = sa("event_records");
    ck_assert_int_eq(copy_wait(f, dbuf, 8 * CHUNK, 0), 8 * CHUNK);
    per_call = sa("event_records") - r0;
    ck_assert_uint_ge(per_call, 2);     /* the last group's event, then the batch's */
    snprintf(fail_at, sizeof(fail_at), "%" PRIu64, sa("event_records") + per_call);
    setenv("GR_STANDIN_FAIL_RECORD", fail_at, 1);
    ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)dbuf, 8 * CHUNK, 0, NULL, &b), -1);
    unsetenv("GR_STANDIN_FAIL_RECORD");
    ck_assert_int_eq(errno, EIO);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(gr_strerror_last(c), "CUDA_ERROR_ILLEGAL_ADDRESS"), "reason: %s",
                  gr_strerror_last(c));
    ck_assert_uint_eq(tu_stat_settles(&d, "leases_active", 0), 0);
    gr_close(f);
    gr_disconnect(c);
}
END_TEST

START_TEST(test_bad_destination)
{
    gr_client *c;
    gr_file *f;
    CUdeviceptr dbuf;
    char host[256];

    cuda_up();
    tu_write_pattern(src_path("a"), 2, CHUNK);
    c = connect_ok();
    f = open_ok(c, "a");
    dbuf = dalloc(4096, 0);
    ck_assert_int_eq(gr_read_to_device(f, host, sizeof(host), 0, NULL, NULL), -1);
    ck_assert_int_eq(errno, EFAULT);
    ck_assert_msg(strstr(gr_strerror_last(c), "not device memory"), "%s", gr_strerror_last(c));
    /* overflowing the allocation */
    ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)(dbuf + 100), 4096, 0, NULL, NULL), -1);
    ck_assert_int_eq(errno, EFAULT);
    ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)dbuf, 10, -1, NULL, NULL), -1);
    ck_assert_int_eq(errno, EINVAL);
    /* at the end of the file: nothing to do, no batch */
    {
        gr_dev_batch *b = (gr_dev_batch *)1;
        ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)dbuf, 10, CHUNK, NULL, &b), 0);
        ck_assert_ptr_null(b);
        ck_assert_int_eq(gr_dev_wait(b), 0);
    }
    ck_assert_int_eq(gr_gpu_set(c, 99, 1), -1);
    ck_assert_int_eq(errno, EINVAL);
    gr_close(f);
    gr_disconnect(c);
    cu->cuMemFree(dbuf);
}
END_TEST

/* ---- batches, streams ---- */

START_TEST(test_batch_many_files)
{
    enum { NF = 24 };
    gr_client *c;
    gr_file *f[NF];
    gr_dev_range r[NF * 2];
    CUdeviceptr dbuf;
    CUstream s;
    gr_dev_batch *b;
    size_t at = 0, want[NF * 2];
    uint8_t *h;

    cuda_up();
    c = connect_ok();
    for (int i = 0; i < NF; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%02d", i);
        tu_write_pattern(src_path(name), 100 + (uint32_t)i, 3000 + (uint64_t)i * 7919);
        f[i] = open_ok(c, name);
    }
    dbuf = dalloc(8u << 20, 0);
    for (int i = 0; i < NF * 2; i++) {          /* each file whole, then a slice of it */
        int k = i % NF;
        uint64_t size = 3000 + (uint64_t)k * 7919, off = i < NF ? 0 : size / 3;
        r[i] = (gr_dev_range){ f[k], off, size - off, (void *)(uintptr_t)(dbuf + at), 0 };
        want[i] = at;
        at += size - off + 13;
    }
    ck_assert_int_eq(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ck_assert_msg(gr_read_to_device_batch(c, r, NF * 2, s, &b) == 0, "%s", gr_strerror_last(c));
    ck_assert_int_eq(gr_dev_wait(b), 0);
    h = dtoh(dbuf, at);
    for (int i = 0; i < NF * 2; i++) {
        ck_assert_uint_eq(r[i].done, r[i].len);
        ck_assert(tu_check_pattern(h + want[i], 100 + (uint32_t)(i % NF), r[i].off, r[i].len));
    }
    free(h);
    ck_assert_int_eq(cu->cuStreamDestroy(s), CUDA_SUCCESS);
    /* a file of another client is refused */
    {
        gr_client *c2 = connect_ok();
        gr_dev_range x = { f[0], 0, 10, (void *)(uintptr_t)dbuf, 0 };
        ck_assert_int_eq(gr_read_to_device_batch(c2, &x, 1, NULL, NULL), -1);
        ck_assert_int_eq(errno, EINVAL);
        gr_disconnect(c2);
    }
    for (int i = 0; i < NF; i++)
        gr_close(f[i]);
    gr_disconnect(c);
    cu->cuMemFree(dbuf);
}
END_TEST

/* ---- the GPU tier ---- */

START_TEST(test_tier)
{
    gr_client *c;
    gr_file *f;
    CUdeviceptr dbuf;
    gr_gpu_stats st;
    uint64_t dram_hits, dtod;
    uint8_t *h;
    char info[1024];

    cuda_up();
    tu_write_pattern(src_path("emb"), 31, 8 * CHUNK);
    c = connect_ok();
    ck_assert_int_eq(gr_gpu_set(c, GR_GPU_TIER_BYTES, 12 * CHUNK), 0);
    f = open_ok(c, "emb");
    dbuf = dalloc(8 * CHUNK, 0);
    ck_assert_int_eq(copy_wait(f, dbuf, 8 * CHUNK, 0), 8 * CHUNK);     /* fills the tier */
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.tier_misses, 8);
    ck_assert_uint_eq(st.tier_hits, 0);
    ck_assert_uint_eq(st.tier_used_bytes, 8 * CHUNK);
    dram_hits = tu_stat(&d, "hits_dram") + tu_stat(&d, "misses");
    dtod = sa_counter ? sa("dtod") : 0;
    /* unaligned ranges, all from the tier: device to device, no lookups */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(copy_wait(f, dbuf, 8 * CHUNK - 1000 * (size_t)i, 333 * i),
                         8 * CHUNK - 1000 * i);
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.tier_hits, 24);
    ck_assert_uint_eq(tu_stat(&d, "hits_dram") + tu_stat(&d, "misses"), dram_hits);
    if (sa_counter)
        ck_assert_uint_eq(sa("dtod"), dtod + 24);
    h = dtoh(dbuf, 8 * CHUNK);
    ck_assert(tu_check_pattern(h, 31, 0, 8 * CHUNK));
    free(h);
    ck_assert_int_eq(gr_gpu_info(c, info, sizeof(info)), 0);
    ck_assert_msg(strstr(info, "GPU tier: 0.8 MiB cap") || strstr(info, "GPU tier: 0.7 MiB cap"),
                  "%s", info);
    gr_close(f);

    /* a rewritten file is another identity: misses, the new bytes */
    tu_sleep_ms(300);                   /* past attr_ttl, and a new mtime */
    tu_write_pattern(src_path("emb"), 32, 8 * CHUNK);
    f = open_ok(c, "emb");
    ck_assert_int_eq(copy_wait(f, dbuf, 8 * CHUNK, 0), 8 * CHUNK);
    h = dtoh(dbuf, 8 * CHUNK);
    ck_assert(tu_check_pattern(h, 32, 0, 8 * CHUNK));
    free(h);
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.tier_misses, 16);
    ck_assert_uint_eq(st.tier_evictions, 4);            /* 16 chunks met a 12-chunk cap ... */
    ck_assert_uint_eq(st.tier_used_bytes, 12 * CHUNK);  /* ... and stayed at it */
    /* and again: hits on the new entries */
    ck_assert_int_eq(copy_wait(f, dbuf, 8 * CHUNK, 0), 8 * CHUNK);
    h = dtoh(dbuf, 8 * CHUNK);
    ck_assert(tu_check_pattern(h, 32, 0, 8 * CHUNK));
    free(h);
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    ck_assert_uint_eq(st.tier_hits, 32);
    gr_close(f);
    gr_disconnect(c);
    /* reported to the daemon at disconnect, and logged */
    ck_assert_uint_eq(tu_stat(&d, "gpu_tier_hits"), 32);
    ck_assert_uint_eq(tu_stat(&d, "gpu_tier_misses"), 16);
    ck_assert_uint_eq(tu_stat(&d, "gpu_clients"), 1);
    ck_assert_uint_eq(tu_stat(&d, "gpu_gds_clients"), 0);
    if (sa_counter)
        ck_assert_uint_eq(sa("device_allocs"), 1);      /* the tier's memory is freed */
    {
        FILE *lf = fopen(d.log, "r");
        char line[1024];
        int seen = 0;
        ck_assert_ptr_nonnull(lf);
        while (fgets(line, sizeof(line), lf))
            seen |= strstr(line, "GPUDirect Storage not available") != NULL;
        fclose(lf);
        ck_assert_msg(seen, "the daemon did not log the GPU path");
    }
    cu->cuMemFree(dbuf);
}
END_TEST

/* ---- a connection that dies ---- */

START_TEST(test_restart_unregisters)
{
    gr_client *c;
    gr_file *f;
    CUdeviceptr dbuf;
    gr_dev_batch *b;
    gr_gpu_stats st;
    uint8_t *h;

    cuda_up();
    tu_write_pattern(src_path("a"), 13, 16 * CHUNK);
    c = connect_ok();
    f = open_ok(c, "a");
    dbuf = dalloc(16 * CHUNK, 0);
    ck_assert_int_eq(copy_wait(f, dbuf, 16 * CHUNK, 0), 16 * CHUNK);
    if (sa_counter)
        setenv("GR_STANDIN_DELAY_US", "30000", 1);
    /* copies queued from the old connection's mappings while it dies */
    ck_assert_int_eq(gr_read_to_device(f, (void *)(uintptr_t)dbuf, 16 * CHUNK, 0, NULL, &b),
                     16 * CHUNK);
    ck_assert_int_eq(tu_daemon_stop(&d), 0);
    ck_assert_int_eq(tu_daemon_start(&d), 0);
    ck_assert_int_eq(gr_dev_wait(b), 0);
    unsetenv("GR_STANDIN_DELAY_US");
    /* the next copy reconnects; the old mappings went and were unregistered */
    ck_assert_int_eq(copy_wait(f, dbuf, 16 * CHUNK, 0), 16 * CHUNK);
    h = dtoh(dbuf, 16 * CHUNK);
    ck_assert(tu_check_pattern(h, 13, 0, 16 * CHUNK));
    free(h);
    ck_assert_int_eq(gr_gpu_get_stats(c, &st), 0);
    if (sa_counter) {
        ck_assert_uint_eq(sa("registered"), st.registered_segments);
        ck_assert_uint_gt(sa("unregister_calls"), 0);
        ck_assert_uint_eq(sa("use_after_unregister"), 0);
    }
    gr_close(f);
    gr_disconnect(c);
    if (sa_counter)
        ck_assert_uint_eq(sa("registered"), 0);
    cu->cuMemFree(dbuf);
}
END_TEST

START_TEST(test_gpu_only)
{
    if (real_cuda())
        return;
    skip("DMA from registered pages into real device memory, and throughput against "
         "cuMemcpyHtoD from pageable and pinned memory, need a GPU: tests/gpu/run.sh");
}
END_TEST

/* libgranary.so needs no CUDA library at link time. */
START_TEST(test_no_cuda_dependency)
{
    char exe[900], cmd[2048], line[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    int seen_libc = 0;
    FILE *p;

    ck_assert_int_gt(n, 0);
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';             /* build/tests or build/san/tests */
    *strrchr(exe, '/') = '\0';
    snprintf(cmd, sizeof(cmd), "ldd %s/libgranary.so 2>&1; readelf -d %s/libgranary.so 2>&1", exe, exe);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    while (fgets(line, sizeof(line), p)) {
        ck_assert_msg(!strstr(line, "libcuda") && !strstr(line, "libcudart") &&
                      !strstr(line, "libcufile"), "libgranary.so depends on CUDA: %s", line);
        seen_libc |= strstr(line, "libc.so") != NULL;
    }
    ck_assert_int_eq(pclose(p), 0);
    ck_assert(seen_libc);
}
END_TEST

static Suite *gpu_suite(void)
{
    Suite *s = suite_create("gpu");
    TCase *tc = tcase_create("gpu");

    const char *only = getenv("GR_TEST_ONLY");     /* one test by name, for debugging */

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
#define ADD(t) if (!only || !strcmp(only, #t)) tcase_add_test(tc, t)
    ADD(test_no_driver);
    ADD(test_no_device);
    ADD(test_stub_library);
    ADD(test_missing_entry_point);
    ADD(test_exact_ranges);
    ADD(test_registration_cache);
    ADD(test_ring_refused);
    ADD(test_ring_no_readonly);
    ADD(test_ring_by_option);
    ADD(test_leases_follow_copies);
    ADD(test_overlap);
    ADD(test_copy_refused);
    ADD(test_copy_faults);
    ADD(test_fault_after_last_group);
    ADD(test_bad_destination);
    ADD(test_batch_many_files);
    ADD(test_tier);
    ADD(test_restart_unregisters);
    ADD(test_gpu_only);
    ADD(test_no_cuda_dependency);
#undef ADD
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(gpu_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
