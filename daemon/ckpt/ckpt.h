/*
 * ckpt.h - checkpoint staging: the write path.  A client hands the daemon
 * a checkpoint's bytes (an fd: a sealed memfd libgranary filled, or a file
 * granaryctl opened), the daemon copies them into <[nvme] path>/checkpoints/
 * (fsynced: "local"), acknowledges, and drains them in the background on
 * the I/O threads: a second copy in [checkpoint] replica_dir when one is
 * configured ("replicated"), then the destination on the DFS, written as
 * the client (fsuid, fsgid and groups of the peer on the I/O thread) into
 * a temporary name beside it, fsynced, renamed into place, directory
 * fsynced ("published").  A reader of the DFS sees the old file or the new
 * one, never a torn one.  A set of files (a container, proto/ckset.h) is one
 * checkpoint here too; its destination phase is setpub.h's (a generation
 * directory and a link renamed over the destination).
 *
 * Every state change past "staged" is a journal file <id>.ckpt (written to
 * a temporary name, fsynced, renamed, directory fsynced), so a restart or
 * SIGKILL resumes each unpublished drain from its staged copy.  A drain
 * that fails (the destination gone, EIO, ENOSPC on the DFS) keeps the
 * staged copy and is retried with a back-off (1 s doubling to 30 s).
 * Up to [checkpoint] drains drain at once, within drain_bandwidth
 * together; per destination one at a time, oldest first, and a published
 * checkpoint supersedes the older ones for its destination not yet
 * published (dropped, never renamed over it): a destination only moves
 * to newer bytes.
 * Staging space is reserved up front ([checkpoint] capacity and an
 * fallocate of the whole size), so a full tier refuses a new checkpoint
 * with ENOSPC instead of losing one.
 *
 * Threads: every function here on the loop thread; the copies run on the
 * I/O threads (their own structs, the staged files, the DFS).
 */
#ifndef GR_CKPT_H
#define GR_CKPT_H

#include <event2/event.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "stats.h"
#include "workers.h"

#define CKPT_MAX_GROUPS 64

typedef enum ckpt_state {
    CKPT_STAGED = 0,            /* being copied onto the node: not acknowledged, or (a put
                                 * that asked for it) acknowledged while the daemon holds
                                 * the client's sealed memfd only */
    CKPT_LOCAL,                 /* on the node's NVMe, fsynced, journalled */
    CKPT_REPLICATED,            /* and a second copy in replica_dir, fsynced */
    CKPT_PUBLISHED,             /* at its destination, renamed, directory fsynced */
    CKPT_FAILED,                /* the staged copy is lost (its checksum failed): never published */
    CKPT_SUPERSEDED,            /* a newer one for its destination was published first: dropped */
} ckpt_state;

/* Name of a state ("staged", "local", ...). */
const char *ckpt_state_name(ckpt_state s);

/* Who the destination is written as: the peer's credentials. */
typedef struct ckpt_cred {
    uid_t uid;
    gid_t gid;
    int ngroups;                /* supplementary groups; -1 unknown (none used) */
    gid_t groups[CKPT_MAX_GROUPS];
} ckpt_cred;

typedef struct ckpt_config {
    const char *dir;            /* the staging directory (made if missing) */
    const char *replica_dir;    /* "" or NULL: no replica */
    uint64_t capacity;          /* bytes of checkpoints not yet published, at most */
    uint64_t memory;            /* bytes acknowledged while only in memory (ack staged), at most */
    uint64_t bandwidth;         /* drain bytes per second, all drains together; 0 unlimited */
    unsigned drains;            /* checkpoints draining at once, at most (0 taken as 1) */
    int demand;                 /* drains on the demand queue (else background) */
    const char (*roots)[PATH_MAX]; /* [source] roots, by index (borrowed) */
    int nroots;
    /* Called on the loop when a checkpoint is at its destination (the read
     * path forgets what it cached of the old file there), or NULL. */
    void (*published)(void *arg, const char *dest);
    void *published_arg;
} ckpt_config;

/* One checkpoint, as ckpt_each shows it.  Pointers live until the next
 * call into the module. */
typedef struct ckpt_info {
    uint64_t id;
    const char *dest;
    ckpt_state state;
    uint64_t size;
    uint64_t drained;           /* bytes of the current drain copied so far */
    uint64_t hash;              /* XXH3-64 of the bytes */
    uid_t uid;
    unsigned attempts;          /* drains that failed */
    int durable;                /* replicated (or published) */
    uint64_t superseded_by;     /* CKPT_SUPERSEDED: the newer checkpoint published; else 0 */
    int set;                    /* a set of files (published as a link to a generation) */
    const char *error;          /* the last drain's failure (or what superseded it), "" if none */
} ckpt_info;

typedef struct ckpts ckpts;

/*
 * Open the staging directory, load its journal (orphaned partial copies of
 * puts never acknowledged are deleted), and queue every unpublished drain.
 * 0 or -errno with a reason in err.
 */
int ckpt_new(struct event_base *base, workers *w, gr_stats *stats, const ckpt_config *cfg,
             ckpts **out, char *err, size_t errlen);

/* A put's acknowledgement: rc 0 and info (state local, or staged for an
 * early one), or -errno and err. */
typedef void (*ckpt_put_cb)(void *arg, int rc, const ckpt_info *info, const char *err);

/*
 * Early acknowledgement (early 1): cb runs as soon as the put is journalled,
 * its destination checked and its space reserved, with state staged: the
 * daemon holds the client's sealed memfd, and the copy to NVMe goes on
 * behind.  Only for a sealed memfd within [checkpoint] memory (else cb runs
 * once local, as without).  From then on the checkpoint is the module's
 * even if the copy fails (state failed, never removed from the list
 * unannounced); a daemon killed before it is local finds it failed
 * ("lost") at the next start.
 *
 * Stage a checkpoint of fd (taken: closed by the module) for norm (a
 * lexically checked destination under root index root; taken), written
 * as cred; set 1: fd holds a set container (proto/ckset.h) published by
 * setpub.h (a generation directory and a link at norm), -EINVAL through cb
 * if its header is malformed.  cb runs on the loop when it is local or refused.  Refused at
 * once (-errno, err set, cb never runs, norm and fd still the caller's):
 * -EINVAL (not a readable regular file or memfd, a path with control
 * characters), -EBUSY (a memfd still mapped writable), -ENOSPC (staging
 * full), -EISDIR (the destination is a root).  Later, through cb: -EACCES
 * (the peer may not create the destination), -ENOENT (its directory is
 * missing), -EPERM (the daemon cannot act as the peer), -ENOSPC, -EIO.
 */
int ckpt_put(ckpts *k, const ckpt_cred *cred, char *norm, int root, int fd, int set,
             int early, ckpt_put_cb cb, void *arg, char *err, size_t errlen);

/* Call fn for each checkpoint (of uid only unless uid is (uid_t)-1; of id
 * only unless id is 0), oldest first, until it returns < 0 (returned). */
int ckpt_each(ckpts *k, uid_t uid, uint64_t id, int (*fn)(void *arg, const ckpt_info *i),
              void *arg);

/* A checkpoint acknowledged (local or replicated) and not yet published,
 * as the read path serves it before its drain ends. */
typedef struct ckpt_staged {
    uint64_t id;
    int member;                 /* a set's file: its index in the set; else -1 */
    int fd;                     /* -1, or (acknowledged early, not yet local) a read-only
                                 * fd of the sealed memfd, the caller's to close */
    uid_t uid;                  /* the writer */
    gid_t gid;
    char tmp[PATH_MAX];         /* the temporary beside the destination: the inode
                                 * that becomes the destination at publish */
} ckpt_staged;

/*
 * Whether the newest checkpoint for norm (a normalised destination; failed
 * ones skipped) is acknowledged and not yet published: 1 with *out filled,
 * else 0 (none, one still being staged, or the newest is published).  An
 * early-acknowledged one not yet local comes with out->fd (its memfd).
 * norm may also be DEST/NAME of a set for DEST: when the newest
 * checkpoint for DEST is a local or replicated set with a file NAME, that
 * file (out->member); a set acknowledged early is read once local.
 */
int ckpt_staged_find(const ckpts *k, const char *norm, ckpt_staged *out);

/* Any thread: a read-only fd of checkpoint id's staged copy (member >= 0:
 * of that file of a set, its own inode), or -errno (-ENOENT once it is
 * published and its copy removed).  The caller owns the fd; its bytes
 * never change (the copy is complete and fsynced from "local" on, and
 * removed, never rewritten, after publish). */
int ckpt_staged_open(const ckpts *k, uint64_t id, int member);

/* Stop draining (timers dropped); the job in flight ends with the
 * workers.  Then ckpt_free after workers_stop.  NULL-safe. */
void ckpt_shutdown(ckpts *k);
void ckpt_free(ckpts **k);

#endif
