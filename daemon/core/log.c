/*
 * log.c - see log.h.  Lines go out in one write(2) each so that lines from
 * the event loop and the I/O threads never interleave mid-line.  Under
 * systemd, when stderr is still the journal's stream, each line starts with
 * its syslog priority ("<3>" ... "<7>", sd-daemon(3)), which journald
 * strips and stores as PRIORITY=, so `journalctl -p warning` works.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

log_level log_current_level = LOG_INFO;

static const char *const log_tags[] = { "error", "warn", "info", "debug" };
/* sd-daemon(3) prefixes of LOG_ERROR..LOG_DEBUG: SD_ERR, SD_WARNING,
 * SD_INFO, SD_DEBUG (syslog priorities 3, 4, 6, 7). */
static const char *const log_prefixes[] = { "<3>", "<4>", "<6>", "<7>" };

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_to_journal;      /* set once, by log_detect: stderr is journald's */

int log_fd_is_journal(int fd, const char *journal_stream)
{
    unsigned long long dev, ino;
    struct stat st;
    char *end;

    if (!journal_stream || !*journal_stream)
        return 0;
    errno = 0;
    dev = strtoull(journal_stream, &end, 10);
    if (errno || end == journal_stream || *end != ':')
        return 0;
    journal_stream = end + 1;
    ino = strtoull(journal_stream, &end, 10);
    if (errno || end == journal_stream || *end)
        return 0;
    if (fstat(fd, &st) < 0)
        return 0;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/* Decide once per process, at the first line: the variable is inherited
 * and stderr may have been redirected since (systemd.exec(5)), so only a
 * stderr that is still that very stream gets prefixes. */
static void log_detect(void)
{
    log_to_journal = log_fd_is_journal(STDERR_FILENO, getenv("JOURNAL_STREAM"));
}

void log_set_level(log_level l)
{
    log_current_level = l;
}

void log_write(log_level l, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    pthread_once(&log_once, log_detect);
    n = snprintf(line, sizeof(line), "%sgranaryd %s: ", log_to_journal ? log_prefixes[l] : "",
                 log_tags[l]);
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
