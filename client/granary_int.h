/*
 * granary_int.h - what libgranary shares with the LD_PRELOAD shim
 * (client/preload.c) and nobody else: gr__ names are internal.
 */
#ifndef GRANARY_INT_H
#define GRANARY_INT_H

#include <stddef.h>

/*
 * The value of `key` in `[section]` of the INI file at path (the format of
 * config/granary.conf: whitespace trimmed, double quotes dropped, an inline
 * comment after a blank removed), its first occurrence.  0 with the value in out (outlen bytes), -1 if the file cannot be
 * read or has no such key, or the value does not fit.
 */
int gr__conf_get(const char *path, const char *section, const char *key, char *out,
                 size_t outlen);

#endif
