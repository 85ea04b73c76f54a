/*
 * setpub.h - publishing a checkpoint set on the DFS: the files of a set
 * container (proto/ckset.h) written into a generation directory beside the
 * destination, a checksummed manifest written last, then the destination,
 * a symbolic link, pointed at the new generation by rename(2) of a new
 * link over it.  A reader that resolves DEST once (opens the directory, or
 * readlink) sees the old set or the new one, whole: a generation's files
 * never change once written, and the one DEST pointed to before is kept
 * (one back) until the next publish.  No RENAME_EXCHANGE (a DFS may lack
 * it): only mkdir, create, write, fsync, symlink and rename.
 *
 *   DEST                     -> DEST.granary-gen-ID  (relative link)
 *   DEST.granary-gen-ID/     the files, then MANIFEST, all fsynced
 *   .DEST.granary-ID.tmp     the new link before its rename
 *
 * MANIFEST, text: "granary-set 1", "id ID", "files N", one line per file
 * "XXH3-16-hex SIZE NAME", then "xxh3 X" over every byte before that line.
 *
 * Threads: an I/O thread, as the peer (the caller enters its credentials
 * around each call; every call creates or renames something).
 */
#ifndef GR_SETPUB_H
#define GR_SETPUB_H

#include <stddef.h>
#include <stdint.h>

typedef struct setpub setpub;

/*
 * Start publishing set id (the container's first hdr_len bytes in hdr,
 * total bytes in all) as base in the directory pfd (an fd, O_PATH is
 * enough; borrowed).  Makes the generation directory, or empties it of the
 * set's own names if a drain before a kill left it.  *done is set when
 * DEST already points at this generation (a kill after the rename): there
 * is nothing left to write.  0 or -errno with err.
 */
int setpub_begin(int pfd, const char *base, uint64_t id, const uint8_t *hdr, size_t hdr_len,
                 uint64_t total, setpub **out, int *done, char *err, size_t errlen);

/* Container bytes [off, off + n), in order from 0 (header bytes are
 * skipped): written into the set's files, each fsynced and closed when
 * full.  0 or -errno with err. */
int setpub_write(setpub *s, uint64_t off, const uint8_t *p, size_t n, char *err, size_t errlen);

/* Every byte written: MANIFEST, fsync of the generation directory, the
 * new link renamed over DEST, the directory fsynced, and generations older
 * than the previous one removed.  0 or -errno with err. */
int setpub_finish(setpub *s, char *err, size_t errlen);

/* NULL-safe; a set not finished leaves its generation directory for the
 * retry (or the next publish's clean-up). */
void setpub_free(setpub **s);

#endif
