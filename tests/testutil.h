/*
 * testutil.h - helpers shared by the Check suites: scratch directories,
 * files with known bytes, and a real granaryd started on a temporary socket.
 */
#ifndef GR_TESTUTIL_H
#define GR_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Make a fresh directory under $TMPDIR (or /tmp) named granary-test-XXXXXX.
 * Returns a malloc'd path; aborts the test process on failure. */
char *tu_mkdtemp(void);

/* rm -rf path.  NULL-safe. */
void tu_rmrf(const char *path);

/* The deterministic test pattern: byte i of file "seed" is tu_byte(seed, i). */
uint8_t tu_byte(uint32_t seed, uint64_t i);

/* Write size bytes of pattern seed to path (created 0644, truncated). */
void tu_write_pattern(const char *path, uint32_t seed, uint64_t size);

/* Check that buf holds bytes [off, off+len) of pattern seed: 1 yes, 0 no. */
int tu_check_pattern(const void *buf, uint32_t seed, uint64_t off, size_t len);

#endif
