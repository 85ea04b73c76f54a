/*
 * fuzz_config.c - libFuzzer target for daemon/config.c: the INI parser that
 * reads granary.conf (and whatever an operator, or a hostile file, puts in
 * it).  Built and run by `make fuzz` and `make fuzz-regress`.
 *
 * One input is one config file.  Besides "no crash, no UB, no read outside
 * the input", the harness checks:
 *   - config_parse returns 0 or -EINVAL, and on -EINVAL a one-line,
 *     NUL-terminated message that starts with the file name;
 *   - a parsed config dumps (config_dump, into memory) to text that parses
 *     back, on fresh defaults, to the same struct (memcmp: the setters
 *     zero-fill strings so equal configs are equal bytes), and dumping that
 *     again gives the same text;
 *   - config_validate gives the same answer on both.
 * A failed check prints the line and aborts, which libFuzzer reports as a
 * crash with the input saved.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* Not assert(): the checks must hold whatever NDEBUG says. */
#define CHECK(expr)                                                              \
    do {                                                                         \
        if (!(expr)) {                                                           \
            fprintf(stderr, "fuzz_config.c:%d: check failed: %s\n", __LINE__, #expr); \
            abort();                                                             \
        }                                                                        \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* config_dump of c into a malloc'd NUL-terminated string; *len its length. */
static char *dump(const gr_config *c, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);

    CHECK(f != NULL);
    config_dump(c, f);
    CHECK(fclose(f) == 0);
    CHECK(text != NULL);
    return text;
}

/* An error message: set, one line, prefixed "name:". */
static void check_message(const char *err, size_t errlen, const char *name)
{
    CHECK(memchr(err, '\0', errlen) != NULL);
    CHECK(err[0] != '\0');
    CHECK(strchr(err, '\n') == NULL);
    CHECK(strncmp(err, name, strlen(name)) == 0 && err[strlen(name)] == ':');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* gr_config is ~74 KiB: on the heap, in blocks of exactly its size. */
    gr_config *c = malloc(sizeof(*c)), *d = malloc(sizeof(*d));
    char err[512], err2[512];
    char *text, *text2;
    size_t len = 0, len2 = 0;
    int rc, v1, v2;

    CHECK(c != NULL && d != NULL);
    config_defaults(c);
    memset(err, 0x5a, sizeof(err));
    rc = config_parse(c, (const char *)data, size, "fuzz.conf", err, sizeof(err));
    CHECK(rc == 0 || rc == -EINVAL);
    if (rc < 0) {
        check_message(err, sizeof(err), "fuzz.conf");
        goto out;
    }

    /* The dump reads back to the same configuration. */
    text = dump(c, &len);
    CHECK(strlen(text) == len);
    config_defaults(d);
    err2[0] = '\0';
    rc = config_parse(d, text, len, "dump", err2, sizeof(err2));
    if (rc != 0) {
        fprintf(stderr, "dump does not parse: %s\n--- dump ---\n%s", err2, text);
        CHECK(!"config_dump output refused by config_parse");
    }
    if (memcmp(c, d, sizeof(*c)) != 0) {
        fprintf(stderr, "--- dump ---\n%s", text);
        CHECK(!"config_dump output parses to a different config");
    }
    text2 = dump(d, &len2);
    CHECK(len2 == len && memcmp(text, text2, len) == 0);
    free(text2);
    free(text);

    /* Validation answers the same for both, with a message when it refuses. */
    memset(err, 0x5a, sizeof(err));
    v1 = config_validate(c, err, sizeof(err));
    v2 = config_validate(d, err2, sizeof(err2));
    CHECK(v1 == 0 || v1 == -EINVAL);
    CHECK(v1 == v2);
    if (v1 < 0) {
        CHECK(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0');
        CHECK(strchr(err, '\n') == NULL);
        CHECK(strcmp(err, err2) == 0);
    }
out:
    free(d);
    free(c);
    return 0;
}
