/*
 * util.c - see util.h.
 */
#include <stdlib.h>
#include <time.h>

#include "clock.h"
#include "size.h"
#include "util.h"

uint64_t now_ns(void)
{
    return gr__now_ns();
}

uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

size_t parse_size(const char *s)
{
    uint64_t v;

    return gr__size_parse(s, &v) == 0 ? (size_t)v : 0;
}
