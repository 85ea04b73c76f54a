/*
 * clock.c - see clock.h.
 */
#include <time.h>

#include "clock.h"

static uint64_t ts_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t gr__now_ns(void)
{
    return ts_ns(CLOCK_MONOTONIC);
}

uint64_t gr__now_ms(void)
{
    return ts_ns(CLOCK_MONOTONIC) / 1000000u;
}

double gr__now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t gr__wall_ns(void)
{
    return ts_ns(CLOCK_REALTIME);
}
