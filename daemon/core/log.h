/*
 * log.h - leveled logging to stderr (journald picks it up under systemd).
 *
 * The macros test the level before evaluating their arguments, so a debug
 * line on a hot path costs one branch when debug logging is off.  Call sites
 * add the failing call and strerror themselves: log_warn("open %s: %s", p,
 * strerror(errno)).
 *
 * Under systemd (StandardError=journal, the default) each line carries its
 * priority as an sd-daemon(3) prefix, "<3>" error, "<4>" warn, "<6>" info,
 * "<7>" debug, so that journald files it at that PRIORITY=; anywhere else
 * lines are plain.  "Under systemd" means $JOURNAL_STREAM names the device
 * and inode of stderr, checked once, at the first line.
 */
#ifndef GR_LOG_H
#define GR_LOG_H

#include "config.h"

extern log_level log_current_level;

/* Set the level below which lines are dropped. */
void log_set_level(log_level l);

/* Write one line "granaryd LEVEL: message" to stderr, behind its priority
 * prefix when stderr is the journal's stream; thread-safe (one write(2)). */
void log_write(log_level l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether fd is the stream that journal_stream ($JOURNAL_STREAM,
 * "DEVICE:INODE" in decimal) names: 1 when its st_dev and st_ino match, 0
 * when they do not, when journal_stream is NULL, empty or malformed, or when
 * fd cannot be fstat'ed. */
int log_fd_is_journal(int fd, const char *journal_stream);

/* Format a one-line reason into a caller's err buffer of errlen bytes (the
 * "char *err, size_t errlen" convention of set-up functions).  NULL-safe. */
void err_set(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define log_at(l, ...) do { if ((l) <= log_current_level) log_write((l), __VA_ARGS__); } while (0)
#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_at(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)

#endif
