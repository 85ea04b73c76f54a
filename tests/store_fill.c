/*
 * store_fill.c - fill an NVMe tier directory with chunks, for measuring how
 * long granaryd takes to come back with a large warm cache
 * (scripts/restart_time.sh).  Writes COUNT chunks of CHUNK bytes (random
 * bytes, keys of the daemon's shape: a random 16-byte file id per 1024
 * chunks + big-endian index; chunks under 64 KiB stand for small files of a
 * 64 KiB chunk_size) straight through the store API, then closes
 * and reopens the tier and prints the time the reopen took:
 *
 *   store_fill DIR CAPACITY CHUNK INLINE_MAX COUNT
 *   -> chunks=N bytes=N fill_s=F open_s=F
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "nvme.h"

static double now_s(void)
{
    return gr__now_s();
}

int main(int argc, char **argv)
{
    nvme_config cfg = { 0 };
    nvme_tier *s = NULL;
    nvme_stats st;
    char err[256];
    uint8_t key[CHUNK_KEY_LEN];
    uint64_t chunk, count;
    void *buf;
    double t0, t1;

    if (argc != 6) {
        fprintf(stderr, "usage: store_fill DIR CAPACITY CHUNK INLINE_MAX COUNT\n");
        return 2;
    }
    cfg.path = argv[1];
    cfg.capacity = strtoull(argv[2], NULL, 0);
    chunk = strtoull(argv[3], NULL, 0);
    cfg.max_chunk = chunk < 65536 ? 65536 : chunk;     /* the daemon's smallest chunk_size */
    cfg.inline_max = strtoull(argv[4], NULL, 0);
    count = strtoull(argv[5], NULL, 0);
    if (nvme_open(&cfg, &s, err, sizeof(err)) < 0) {
        fprintf(stderr, "store_open: %s\n", err);
        return 1;
    }
    if (posix_memalign(&buf, NVME_ALIGN, (chunk + NVME_ALIGN - 1) & ~(uint64_t)(NVME_ALIGN - 1)))
        return 1;
    srandom(42);
    for (uint64_t i = 0; i < (chunk + 3) / 4; i++)
        ((uint32_t *)buf)[i] = (uint32_t)random();
    t0 = now_s();
    for (uint64_t i = 0; i < count; i++) {
        int rc;
        if (i % 1024 == 0)
            for (int k = 0; k < 16; k++)
                key[k] = (uint8_t)random();
        for (int k = 0; k < 8; k++)
            key[16 + k] = (uint8_t)((i % 1024) >> (8 * (7 - k)));
        ((uint64_t *)buf)[0] = i;               /* distinct bytes per chunk */
        rc = nvme_put(s, key, buf, chunk);
        if (rc < 0 && rc != -ECANCELED) {
            fprintf(stderr, "store_put %llu: %d\n", (unsigned long long)i, rc);
            return 1;
        }
    }
    t1 = now_s();
    nvme_close(&s);
    t0 = t1 - t0;
    t1 = now_s();
    if (nvme_open(&cfg, &s, err, sizeof(err)) < 0) {
        fprintf(stderr, "store_open again: %s\n", err);
        return 1;
    }
    t1 = now_s() - t1;
    nvme_get_stats(s, &st);
    printf("chunks=%llu bytes=%llu fill_s=%.2f open_s=%.3f\n", (unsigned long long)st.chunks,
           (unsigned long long)(st.chunks * chunk), t0, t1);
    nvme_close(&s);
    free(buf);
    return 0;
}
