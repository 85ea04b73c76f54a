/*
 * dirahead.h - read-ahead across the files of a directory.  A connection
 * that opens the files of one directory in ascending name order, a steady
 * number of names apart (1 for a lone reader, n for one of n readers that
 * deal the files out between them), has the next files of that stride
 * hinted on a list of its own (prefetch.h), as if it had sent them itself:
 * resolved and judged on I/O threads, fetched within the hint window, held
 * in DRAM until read.  For the jobs that read a dataset of small files in
 * directory order without hints (a validation pass, a preprocessing
 * script, cp -r, tar): each file is one DFS round trip for them, and this
 * keeps several in flight.
 *
 * Detection, per connection: three ascending opens in one directory ask
 * for its listing (the names of its regular files, sorted, read on an I/O
 * thread; a cache of DIRA_CACHE listings, each at most DIRA_MAX_NAMES
 * names in DIRA_MAX_BYTES, trusted for DIRA_TTL seconds, a stream's own
 * too: it lists and judges again after that; all listings alive together
 * at most DIRA_LIVE_MAX bytes, past which a stream goes without); once two strides between the
 * listing positions of later opens are equal (and at most
 * DIRA_MAX_STRIDE), the stream is on and keeps [prefetch] dir_readahead
 * files of its stride hinted past the last open, less those whose first
 * chunk is in DRAM already (as far as the attribute cache knows them).  An open out of that
 * order (another directory, a name that sorts before the last, another
 * stride) ends it: its list is cleared and its holds released.  A file
 * the listing does not have (created since) only goes unhinted.
 *
 * Access: what is fetched follows from names, so a stream starts only
 * where its user may list the directory (judge_list: search on the path,
 * read and search on the directory), unless the user is root or
 * access_check is none; each hinted file is then judged as any hint is,
 * and fetched into quarantine until its user proves it may read it.
 *
 * Threads: loop thread only; listings and judging run as worker jobs.
 */
#ifndef GR_DIRAHEAD_H
#define GR_DIRAHEAD_H

#include "access.h"
#include "dram.h"
#include "judge.h"
#include "prefetch.h"
#include "source.h"
#include "stats.h"
#include "workers.h"

#define DIRA_CACHE      16      /* directory listings kept */
#define DIRA_MAX_NAMES  65536   /* a larger directory is not read ahead */
#define DIRA_MAX_BYTES  (2u << 20)      /* nor one whose names take more */
#define DIRA_LIVE_MAX   (64u << 20)     /* every listing alive, cached or held, together */
#define DIRA_TTL        30.0    /* seconds a listing is trusted */
#define DIRA_MAX_STRIDE 64      /* names between a stream's opens, at most */

typedef struct dirahead dirahead;
typedef struct dira_stream dira_stream;

/* Over the prefetcher, DRAM tier, source, judge and workers (all borrowed;
 * they must outlive it).  files: how many files a stream keeps hinted ahead (0: off);
 * trust_all: access_check = none (no judging).  0 or -ENOMEM. */
int dirahead_new(prefetcher *p, dram *dr, source *src, judge *jg, workers *w, gr_stats *stats,
                 unsigned files, int trust_all, dirahead **out);
/* Reload: keep files ahead from now on; 0 turns every stream off at its
 * next open (its hints cleared) and makes no new ones.  NULL-safe. */
void dirahead_set_files(dirahead *d, unsigned files);
/* After every stream is freed and the workers are stopped.  NULL-safe. */
void dirahead_free(dirahead **d);

/* A connection's stream, for a peer with these credentials (copied); NULL
 * when read-ahead across files is off or memory is short (the connection
 * then goes without).  Freed with dira_stream_free (NULL-safe), which
 * clears its hints at once; a job still out frees the rest when it ends. */
dira_stream *dira_stream_new(dirahead *d, const access_cred *cred);
/* An open the stream does not follow (a registered dataset's file): off,
 * its hints cleared, the order counted afresh.  NULL-safe. */
void dira_elsewhere(dira_stream *s);
void dira_stream_free(dira_stream **s);

/* The connection opened the file norm (normalised, beneath root) and was
 * answered with a handle.  NULL-safe. */
void dira_opened(dira_stream *s, const char *norm, int root);

#endif
