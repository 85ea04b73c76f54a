/*
 * fault.c - see fault.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"

static const char *const fault_names[FAULT_NPOINTS] = {
    [FAULT_REPLY_ALLOC] = "reply_alloc",
    [FAULT_SOURCE_SLOW] = "source_slow",
};

static unsigned long fault_every[FAULT_NPOINTS];   /* 0: off */
static unsigned long fault_calls[FAULT_NPOINTS];
static int fault_armed;

int fault_setup(const char *spec)
{
    unsigned long every[FAULT_NPOINTS] = { 0 };
    const char *p = spec;

    if (!spec || !*spec)
        return 0;
    while (*p) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        char *num_end;
        unsigned long n;
        int k;

        if (!end)
            end = p + strlen(p);
        if (!eq || eq > end)
            return -EINVAL;
        for (k = 0; k < FAULT_NPOINTS; k++)
            if (strlen(fault_names[k]) == (size_t)(eq - p) && !memcmp(p, fault_names[k], (size_t)(eq - p)))
                break;
        n = strtoul(eq + 1, &num_end, 10);
        if (k == FAULT_NPOINTS || num_end != end || n == 0)
            return -EINVAL;
        every[k] = n;
        p = *end ? end + 1 : end;
    }
    memcpy(fault_every, every, sizeof(every));
    fault_armed = 1;
    return 0;
}

int fault_hit(fault_point p)
{
    unsigned long n;

    if (!fault_armed || !fault_every[p])
        return 0;
    n = __atomic_add_fetch(&fault_calls[p], 1, __ATOMIC_RELAXED);
    return n % fault_every[p] == 0;
}
