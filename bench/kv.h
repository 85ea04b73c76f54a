/*
 * kv.h - a minimal client for memcached (text protocol) and Redis (RESP)
 * over a Unix stream socket, for the benchmarks that put those servers in
 * front of the DFS as a chunk cache (bench/dfsbench.c).  Values are received
 * straight into the caller's buffer after their header, as a good client
 * would.  Every function returns 0 (or a length) on success, -errno on
 * failure; -EPROTO when the server answered something unexpected.
 */
#ifndef BENCH_KV_H
#define BENCH_KV_H

#include <stddef.h>
#include <stdint.h>

enum kv_kind { KV_MEMCACHED, KV_REDIS };

typedef struct kv {
    int fd;
    enum kv_kind kind;
    char buf[65536];
    size_t pos, len;                    /* unread bytes are buf[pos, len) */
} kv;

/* Connect k (caller-allocated) to the server at path.  kv_close releases it. */
int kv_connect(kv *k, const char *path, enum kv_kind kind);
void kv_close(kv *k);

/* Store val under key.  Returns 0, 1 when the server refused it for lack of
 * memory (memcached "SERVER_ERROR out of memory", Redis "-OOM"): a cache
 * that is full and cannot evict is not an error for a read-through cache,
 * or -errno. */
int kv_set(kv *k, const char *key, const void *val, size_t n);

/* GET key into dst (cap bytes).  Returns the value's length, -ENOENT when
 * the key is absent, or -errno. */
int64_t kv_get(kv *k, const char *key, void *dst, size_t cap);

#endif
