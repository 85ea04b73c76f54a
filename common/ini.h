/*
 * ini.h - the one reader of Granary's INI files (config/granary.conf), used
 * by granaryd's configuration and by libgranary to find the socket, so the
 * two can never read the same file differently.
 *
 * Format: "[section]" lines (blanks inside the brackets are trimmed, so
 * "[ daemon ]" is section "daemon"), "key = value" lines, and comments:
 * a line whose first non-blank is '#' or ';', or a '#' or ';' preceded by a
 * blank inside a bare value ("4M   # note" is "4M").  A value may be
 * double-quoted ("a # b", with \" and \\ escapes), followed only by a
 * comment.  Lines end in "\n" or "\r\n" and may be of any length; a leading
 * UTF-8 byte order mark is skipped.  A key given twice in one section (the
 * section may be split over several headers) is an error: a reader taking
 * the first and another the last is how client and daemon came to use
 * different sockets.  So are a NUL byte, a key outside any section, an
 * unterminated quote, and a line that is none of the above.
 *
 * Threads: any (no globals).
 */
#ifndef GR_COMMON_INI_H
#define GR_COMMON_INI_H

#include <stddef.h>

/*
 * Called for each section header (key and value NULL) and each key line.
 * The strings are valid during the call only.  Return 0 to go on, or a
 * negative errno with a one-line message in msg (msglen bytes) to stop: the
 * parse then fails with "NAME:LINE: message".
 */
typedef int (*gr__ini_cb)(void *arg, const char *section, const char *key, const char *value,
                          char *msg, size_t msglen);

/*
 * Parse len bytes of text (need not be NUL-terminated).  name prefixes
 * error messages ("name:line: ..."; NULL: "config").  Returns 0, the
 * callback's error (with its message), -EINVAL for a syntax error, or
 * -ENOMEM; err (errlen bytes) says why.
 */
int gr__ini_parse(const char *text, size_t len, const char *name, gr__ini_cb cb, void *arg,
                  char *err, size_t errlen);

/*
 * Read the file at path (at most 1 MiB; any kind of file, so /dev/stdin
 * works) and parse it.  -errno with the reason in err when it cannot be
 * read, else as gr__ini_parse.
 */
int gr__ini_load(const char *path, gr__ini_cb cb, void *arg, char *err, size_t errlen);

/*
 * The value of [section] key in the file at path, as gr__ini_load reads
 * it, into out (outlen bytes).  0; -ENOENT (no such key), -ENAMETOOLONG
 * (it does not fit), or the load's error, with the reason in err (may be
 * NULL).  The whole file must parse: a broken file is an error, not a
 * missing key.
 */
int gr__ini_get(const char *path, const char *section, const char *key, char *out,
                size_t outlen, char *err, size_t errlen);

#endif
