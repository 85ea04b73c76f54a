/*
 * dscan.h - libgranary's directory scans: a process that opens the files
 * of one directory in name order or in the order the directory lists them
 * (readdir(3)'s: tar, find, an unsorted os.listdir), a steady stride apart
 * (1 for a plain scan: md5sum of a glob, a validation pass; n for one of n
 * readers dealing the files out), is told the files it opens next, for the
 * look-ahead opens (granary.c) to send before it asks (internal; never
 * exported).
 *
 * The client-side twin of the daemon's read-ahead across files
 * (daemon/engine/dirahead.h): that one fetches a cold file's first chunk
 * before the open; this one takes the open's round trip out of the
 * reader's way for a warm file.  The rules: three opens in a row in one
 * directory ask for its listing (which the caller makes with gr__ds_list
 * outside its lock: a registered dataset's manifest, else opendir(3) as
 * this process, so only what the process may list; regular files, links
 * and entries of unknown type; at most GR_DS_MAX_NAMES names or
 * GR_DS_MAX_BYTES of them, else no scan there).  The listing is kept while
 * the process opens files there, so a shuffled reader lists a directory
 * once.  Two equal strides (at most GR_DS_MAX_STRIDE) between the
 * positions of later opens in one of the two orders turn a scan on (name
 * order first where both would), from a listing at most GR_DS_TTL_MS old
 * (an older one is listed again first, so a scan sees the files of now);
 * an open out of that order, or in another directory, turns it off.  On,
 * each open names the files of the stride up to GR_DS_AHEAD past it that
 * were not named before; a link or an entry of unknown type only if
 * stat(2) says it is a regular file (a look-ahead may carry the process's
 * own open(2) of what it names, and that must never be a device or a
 * FIFO).
 *
 * A registered dataset is listed from its manifest, in the manifest's
 * order, which a reader whose readdir(3) is the file system's own need not
 * follow: its name-order scans are the ones that profit.
 *
 * Threads: the owner's lock (the client's) serialises every call but
 * gr__ds_list, which touches no scan.
 */
#ifndef GR_DSCAN_H
#define GR_DSCAN_H

#include <stddef.h>
#include <stdint.h>

#include "granary.h"

#define GR_DS_AHEAD      8              /* files named ahead of the last open */
#define GR_DS_MAX_STRIDE 64
#define GR_DS_MAX_NAMES  65536
#define GR_DS_MAX_BYTES  (2u << 20)
#define GR_DS_TTL_MS     30000

/* A directory's listing (gr__ds_list). */
typedef struct gr__dlist {
    char *names;                /* n entries back to back: a d_type byte (DT_REG,
                                 * DT_LNK, DT_UNKNOWN), the name, a NUL */
    uint32_t *off;              /* where each name starts, sorted by name */
    uint32_t *loff;             /* where each name starts, in the listing's order */
    uint32_t *lpos;             /* lpos[i]: where off[i]'s name stands in the listing */
    size_t n;
} gr__dlist;

/* The orders a scan may follow: by name (a sorted glob, ImageFolder, a
 * sorted list), or the listing's own (readdir(3)'s: tar, find, an unsorted
 * os.listdir). */
enum { GR_DS_BY_NAME, GR_DS_BY_LISTING, GR_DS_ORDERS };

typedef struct gr__dscan {
    char *dir;                  /* of the last open (absolute), or NULL */
    char last[256];             /* the name of the last open */
    unsigned run;               /* opens in a row in dir, after the first */
    int unlisted;               /* dir could not be listed (or too big): no scan */
    int want_list;              /* asks the caller for dir's listing */
    int listed;                 /* ls is dir's listing */
    gr__dlist ls;
    uint64_t listed_ms;
    long pos[GR_DS_ORDERS];     /* position of the last open in each order, -1 none */
    long stride[GR_DS_ORDERS];  /* between the last two, 0 none */
    int on;
    int order;                  /* the order that is on (GR_DS_BY_*) */
    size_t next;                /* the next position to name, in that order */
    uint64_t listings;          /* counters */
} gr__dscan;

void gr__ds_init(gr__dscan *s);
void gr__ds_fini(gr__dscan *s);

/*
 * The process opened path (absolute).  Returns how many paths of the files
 * it opens next were put in out[0..cap) (malloc'd: the caller's), 0 when
 * none, and sets *off when a scan that was on is off now (the caller
 * forgets what this scan named before).  When s->want_list is set after
 * it, the caller lists s->dir (gr__ds_list) and gives the result to
 * gr__ds_listed.  Out of memory is a scan that stops: nothing named, never
 * a failure.
 */
size_t gr__ds_opened(gr__dscan *s, const char *path, char **out, size_t cap, int *off);

/* List directory dir into *l (in both orders) with gr_opendir on c: from a
 * registered dataset's manifest where the daemon has one (no operation on
 * the file system), else opendir(3) as this process.  0, or -1 (cannot,
 * too big, out of memory: l empty).  Takes c's lock (gr_opendir's calls):
 * call it without; it touches no scan. */
int gr__ds_list(gr_client *c, const char *dir, gr__dlist *l);
void gr__ds_list_free(gr__dlist *l);

/* The listing of dir asked for (rc: gr__ds_list's), *l taken (emptied):
 * used if s still scans dir and wants it, else freed. */
void gr__ds_listed(gr__dscan *s, const char *dir, int rc, gr__dlist *l);

/* Forget the scan (the caller's look-ahead has another source now). */
void gr__ds_reset(gr__dscan *s);

#endif
