/* grow.c - see grow.h. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "grow.h"

int gr__grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t nc = *cap ? *cap : 64;
    void *q;

    if (need <= *cap)
        return 0;
    while (nc < need) {
        if (nc > SIZE_MAX / 2)
            return -ENOMEM;
        nc *= 2;
    }
    if (elem && nc > SIZE_MAX / elem)
        return -ENOMEM;
    q = realloc(*p, nc * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = nc;
    return 0;
}
