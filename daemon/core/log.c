/*
 * log.c - see log.h.  Lines go out in one write(2) each so that lines from
 * the event loop and the I/O threads never interleave mid-line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"

log_level log_current_level = LOG_INFO;

static const char *const log_tags[] = { "error", "warn", "info", "debug" };

void log_set_level(log_level l)
{
    log_current_level = l;
}

void log_write(log_level l, const char *fmt, ...)
{
    char line[1024];
    int n = snprintf(line, sizeof(line), "granaryd %s: ", log_tags[l]);
    va_list ap;

    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* Nothing useful to do if stderr is gone. */
    if (write(STDERR_FILENO, line, (size_t)n) < 0)
        return;
}

void err_set(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
