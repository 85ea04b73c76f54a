/*
 * names.c - sorted listings of names (names.h).
 */
#include <stdlib.h>
#include <string.h>

#include "names.h"

static int name_cmp(const void *a, const void *b, void *arg)
{
    const char *names = arg;

    return strcmp(names + *(const uint32_t *)a, names + *(const uint32_t *)b);
}

void gr__names_sort(const char *names, uint32_t *off, size_t n)
{
    if (n > 1)
        qsort_r(off, n, sizeof(*off), name_cmp, (void *)names);
}

long gr__names_find(const char *names, const uint32_t *off, size_t n, const char *name)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(names + off[mid], name);
        if (c == 0)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}
