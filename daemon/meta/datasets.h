/*
 * datasets.h - registered datasets: directory trees whose attributes, tree
 * and ACLs the daemon keeps (a manifest each, manifest.h), so that stat,
 * readdir and open of their files cost the file system nothing after the
 * first scan.
 *
 * A dataset is registered by an operator (granaryctl dataset add) and is
 * declared unchanging between checks: its manifest is trusted until its
 * stamp changes.  The stamp is a file the operator names (touched when the
 * dataset is rewritten) or, without one, the top directory itself (its
 * mtime and ctime: a file added or removed directly in it changes them, a
 * file rewritten deeper down does not).  The stamp is looked at, at most,
 * once per `recheck` seconds, and only when the dataset is used; a changed
 * stamp starts a rescan while the old manifest keeps serving, and the new
 * manifest replaces it whole when the scan is done.  So a change is seen at
 * most recheck seconds plus one scan after the stamp changed; a file
 * rewritten without the stamp changing keeps its old attributes, and its
 * cached chunks (keyed by the old identity) keep being served; a chunk not
 * cached fails with ESTALE (its identity is checked against the file at
 * every source read), never with mixed bytes.
 *
 * Scans list directories on the I/O threads, several at once (background
 * priority, below demand), with each entry's attributes and POSIX ACL
 * (re-read until the entry is the same object before and after, so that an
 * ACL is never paired with another file's attributes).  A scan's entries
 * are held in memory (about 100 bytes each) until the manifest is written
 * (atomically: old or new after a crash).  The registry of datasets is a
 * file written the same way.  Both live in <nvme path>/datasets/, outside
 * the NVMe tier's capacity.
 *
 * Threads: loop thread; scans run as worker jobs.
 */
#ifndef GR_DATASETS_H
#define GR_DATASETS_H

#include <stdint.h>

#include "manifest.h"
#include "source.h"
#include "stats.h"
#include "workers.h"

typedef struct datasets datasets;

/* dir: where manifests and the registry live (created if missing), or NULL
 * (registering then fails with EROFS).  Registered datasets load their
 * manifests now (no scan when one is there and valid).  0 or -errno with a
 * reason in err; *out is set in every case. */
int datasets_new(source *src, workers *w, gr_stats *stats, const char *dir, uint64_t max_entries,
                 datasets **out, char *err, size_t errlen);
/* Stop scheduling scan work (before the workers stop). */
void datasets_shutdown(datasets *ds);
void datasets_free(datasets **ds);

/*
 * Register the directory norm (normalised, under root; a directory):
 * stamp (normalised path under a root, or NULL for the top directory
 * itself), recheck seconds.  A scan starts.  0 and *id, or -EEXIST (norm is
 * registered, or lies inside or around a registered dataset), -EROFS,
 * -ENOMEM.
 */
int datasets_add(datasets *ds, const char *norm, int root, const char *stamp, double recheck,
                 uint32_t *id);
/* Unregister dataset id (its manifest file goes).  0 or -ENOENT. */
int datasets_remove(datasets *ds, uint32_t id);
/* Scan dataset id again now.  0, -ENOENT, -EBUSY (a scan runs). */
int datasets_rescan(datasets *ds, uint32_t id);

typedef struct dataset_info {
    uint32_t id;
    const char *path, *stamp;       /* stamp "" for the top directory */
    double recheck;
    const char *state;              /* "scanning", "ready", "failed" */
    uint64_t entries, files;        /* of the manifest serving now (0 before the first) */
    uint64_t scan_dirs, scan_entries, scan_errors, scan_ms;   /* the last or current scan */
    uint64_t checks, rescans;       /* stamp checks done; rescans they started */
    const char *error;              /* the last failure, "" if none */
} dataset_info;
int datasets_each(datasets *ds, int (*cb)(void *arg, const dataset_info *i), void *arg);

/*
 * The dataset that holds norm, if its manifest is ready: the manifest (valid
 * until the next call into datasets: use it at once), the entry's index,
 * and in chain[0..*depth) the indices from "/" to it.  *valid_ms: how long
 * the answer may be trusted by a client (until the next stamp check can
 * change it).  Triggers the stamp check when it is due.  MF_NONE when norm
 * is in no ready dataset or not in its manifest (*in_dataset says which: 1
 * when norm lies in a ready dataset but is not in it, that is, it does not
 * exist as far as the manifest knows).
 */
uint32_t datasets_lookup(datasets *ds, const char *norm, const manifest **m, uint32_t *chain,
                         size_t max, size_t *depth, uint32_t *valid_ms, int *in_dataset);

/* Registered datasets. */
unsigned datasets_count(const datasets *ds);

#endif
