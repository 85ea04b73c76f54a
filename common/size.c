/*
 * size.c - see size.h.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>

#include "size.h"

int gr__size_parse(const char *s, uint64_t *out)
{
    uint64_t v = 0, mul = 1;
    const char *p = s;

    if (!s || !isdigit((unsigned char)*p))
        return -EINVAL;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    switch (tolower((unsigned char)*p)) {
    case 'k': mul = 1ull << 10; p++; break;
    case 'm': mul = 1ull << 20; p++; break;
    case 'g': mul = 1ull << 30; p++; break;
    case 't': mul = 1ull << 40; p++; break;
    default: break;
    }
    if (mul != 1 && tolower((unsigned char)p[0]) == 'i' && tolower((unsigned char)p[1]) == 'b')
        p += 2;
    else if (tolower((unsigned char)*p) == 'b')
        p++;
    if (*p != '\0')
        return -EINVAL;
    if (v > UINT64_MAX / mul)
        return -ERANGE;
    *out = v * mul;
    return 0;
}

void gr__size_format(uint64_t v, char *buf, size_t len)
{
    static const char sfx[] = "KMGT";
    int i = -1;

    while (v != 0 && i < 3 && (v & 1023) == 0) {
        v >>= 10;
        i++;
    }
    if (i < 0)
        snprintf(buf, len, "%llu", (unsigned long long)v);
    else
        snprintf(buf, len, "%llu%c", (unsigned long long)v, sfx[i]);
}
