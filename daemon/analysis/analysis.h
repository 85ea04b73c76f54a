/*
 * analysis.h - how each job reads: an always-on, constant-memory classifier
 * over the request stream, and the report `granaryctl analyze` prints.
 *
 * A job is a connection group: the connections of one (uid, process group)
 * pair, so that a training process and its forked data-loader workers are
 * one job.  For each job the daemon keeps, in a fixed-size record:
 *   - histograms (log-linear buckets) of request sizes, file sizes (at a file's
 *     first request), inter-arrival times and the wait of reads that
 *     missed DRAM (the await-like latency of the tiers below and the source);
 *   - a table of the last AN_STREAMS files it read, to tell a continuation
 *     (sequential), a constant stride, a whole-file read and a random read;
 *     each request votes for one of the four (votes are halved every
 *     AN_DECAY requests, so a change of pattern shows within that many);
 *   - a spatially sampled record of its chunk accesses (SHARDS: a chunk is
 *     sampled when its key hash falls below a threshold; AN_RING entries;
 *     when full the threshold halves and the record keeps the survivors,
 *     down to a rate of 1/AN_MIN_RATE_INV, after which the oldest go).  The
 *     record gives reuse distances and is replayed through the tiers'
 *     policies (policy.h) and Belady at the capacities scaled by the rate.
 * The first verdict comes after AN_FIRST requests, and is re-evaluated
 * every AN_FIRST requests up to AN_EVAL, then every AN_EVAL; it is *stable* once
 * the same verdict came AN_STABLE times in a row.
 *
 * Memory: AN_MAX_JOBS records of sizeof(an_job) (about 75 KiB), allocated
 * when a job first connects; a new job when the table is full replaces the
 * one idle the longest (its connections then go uncounted).
 *
 * Threads: analysis_* on the loop thread only; analysis_report works on a
 * copy (an_job) and may run on any thread.
 */
#ifndef GR_ANALYSIS_H
#define GR_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#define AN_MAX_JOBS     64
#define AN_STREAMS      16          /* files tracked per job for sequentiality */
#define AN_RING         4096        /* sampled chunk accesses kept per job */
#define AN_HB           252         /* log-linear histogram buckets (4 per power of two) */
#define AN_EVAL         1024        /* requests between verdicts */
#define AN_FIRST        256         /* requests before the first verdict (then every
                                       AN_FIRST up to AN_EVAL) */
#define AN_DECAY        8192        /* requests between halvings of the votes */
#define AN_STABLE       3           /* equal verdicts in a row for "stable" */
#define AN_MIN_RATE_INV 4096        /* lowest sampling rate: 1/4096 */
#define AN_RATE_ONE     (1u << 24)  /* threshold of a sampling rate of 1 */
#define AN_LONG_GAP_NS  1000000000ull   /* a pause between bursts: 1 s */

typedef enum an_class {
    AN_UNKNOWN,
    AN_SEQ_LARGE,               /* sequential reads of large files */
    AN_RANDOM_SMALL,            /* small reads at random places, or a hot set re-read */
    AN_SHUFFLED_EPOCH,          /* whole small files, each once per pass */
    AN_STRIDED,                 /* a constant stride through files */
    AN_CKPT_BURST,              /* large sequential bursts between long pauses */
    AN_MIXED,                   /* no one pattern covers most requests */
    AN_NCLASSES
} an_class;

/* "sequential-large", "random-small", ...; "unknown" below AN_FIRST requests. */
const char *an_class_name(an_class c);

/* Votes: how a request relates to the job's previous ones. */
enum { AN_V_SEQ, AN_V_STRIDE, AN_V_WHOLE, AN_V_RAND, AN_NV };

typedef struct an_hist {
    uint64_t b[AN_HB];          /* log-linear: 0..3, then 4 per power of two (analysis.c) */
    uint64_t n;
} an_hist;

typedef struct an_stream {
    uint64_t file;              /* file key, 0 = free */
    uint64_t prev_off;          /* the last request's offset */
    uint64_t next_off;          /* where a continuation starts */
    int64_t stride;             /* the last offset step, 0 none */
    uint64_t used;              /* request count at its last use (LRU) */
} an_stream;

typedef struct an_sample {
    uint64_t key;               /* chunk key hash */
    uint32_t size;              /* chunk bytes */
    uint32_t pad;
} an_sample;

/* One job's record.  Plain data: a copy is a snapshot. */
typedef struct an_job {
    uint32_t id;                /* 1.., never reused while the daemon runs; 0 = free slot */
    uint32_t uid;
    int32_t pgid;
    uint32_t conns;             /* connections attached now */
    uint64_t first_ns, last_ns; /* first and last request */
    uint64_t requests, bytes;
    uint64_t hinted;            /* HINT requests */
    double votes[AN_NV];        /* decayed */
    uint64_t long_gaps;         /* pauses >= AN_LONG_GAP_NS */
    uint64_t idle_ns;           /* their total */
    uint64_t files_seen, small_files;   /* first requests of a file; of files < a chunk */
    uint32_t chunk_size;        /* of the files it reads (the last request's) */
    an_hist req_size, file_size, gap_ns, wait_ns;
    an_stream streams[AN_STREAMS];
    uint32_t thresh;            /* sample a chunk when (hash >> 40) < thresh */
    uint32_t ring_n, ring_head; /* entries, index of the oldest */
    uint64_t sampled;           /* samples taken, all time */
    an_class verdict;           /* the last evaluated */
    uint32_t verdict_runs;      /* evaluations in a row with this verdict */
    uint64_t switches;          /* verdict changes */
    double hot, early;          /* last figures of the record (see analysis.c) */
    uint32_t last_stream;       /* streams[] index of the last request */
    an_sample ring[AN_RING];
} an_job;

typedef struct analysis analysis;

/* What the report replays the record against. */
typedef struct an_caps {
    uint64_t dram_capacity;
    uint64_t nvme_capacity;     /* 0: no NVMe tier */
    uint64_t chunk_size;        /* [source] chunk_size */
    int dram_policy, nvme_policy;   /* the tiers' policy_kind now */
} an_caps;

/* A new table.  0 or -ENOMEM. */
int analysis_new(analysis **out);
void analysis_free(analysis **a);

/* A handle on a job for one connection: slot and id (0: none). */
typedef struct an_ref {
    uint32_t slot, id;
} an_ref;

/* The job of (uid, pgid), made if new (see the header on a full table).
 * Counts a connection until analysis_detach. */
an_ref analysis_attach(analysis *a, uint32_t uid, int32_t pgid, uint64_t now_ns);
void analysis_detach(analysis *a, an_ref r);

/* One read request of job r: [off, off+len) of a file (file_key: any
 * well-mixed 64-bit hash of its identity) of file_size bytes cut in chunks
 * of chunk_size; whole: the reply covers whole chunks (the client comes
 * back at the next chunk).  O(AN_STREAMS + chunks touched), plus a verdict
 * every AN_EVAL requests (O(AN_RING log AN_RING)). */
void analysis_read(analysis *a, an_ref r, uint64_t file_key, uint64_t file_size,
                   uint32_t chunk_size, uint64_t off, uint64_t len, int whole, uint64_t now_ns);
/* A read of job r that waited wait_ns on a miss. */
void analysis_wait(analysis *a, an_ref r, uint64_t wait_ns);
/* Job r sent a HINT. */
void analysis_hinted(analysis *a, an_ref r);

/* The job in slot i (0..AN_MAX_JOBS-1), NULL if free.  Borrowed until the
 * next call on a. */
const an_job *analysis_job(const analysis *a, unsigned i);

/* ---- the report (any thread, on a copy) ---- */

#define AN_SIM_ROWS (5 + 2)         /* the policy kinds, then static and belady */
#define AN_MAX_RECS 8

typedef struct an_tier_sim {
    const char *tier;           /* "dram" or "nvme" */
    uint64_t capacity;
    double hit[AN_SIM_ROWS];    /* hit ratio per row, -1 when not simulated */
    int best;                   /* row of the best policy (not static nor belady) */
} an_tier_sim;

typedef struct an_report {
    an_class cls;
    int stable;
    double share[AN_NV];        /* vote shares */
    double hot;                 /* reads that re-read within a quarter of the distinct data */
    double early;               /* of the re-reads, those */
    double reuse_share;         /* sampled accesses that re-access a key */
    const char *order;          /* "same", "shuffled" or "-" (epochs' order) */
    uint64_t req_p50, req_p90, file_p50, file_p90;      /* bytes (bucket lower bounds) */
    uint64_t gap_p50_ns, gap_p99_ns, wait_p50_ns, wait_p90_ns, wait_p99_ns;
    uint64_t reuse_p50_bytes, reuse_p90_bytes;          /* reuse distance, in distinct bytes */
    double small_file_share;
    double idle_share;          /* long pauses over the job's lifetime */
    uint64_t distinct_bytes;    /* estimated bytes of distinct chunks it read */
    double rate;                /* sampling rate */
    uint32_t samples;
    int ntiers;
    an_tier_sim tiers[2];
    int nrecs;
    char recs[AN_MAX_RECS][320];
} an_report;

/* Analyse a copy of a job against caps: figures, replay, recommendations.
 * Allocates scratch (O(AN_RING)) and frees it.  0 or -ENOMEM. */
int analysis_report(const an_job *j, const an_caps *caps, an_report *out);

/* policy = auto's rule: the policy kind tier t (0 dram, 1 nvme) of report r
 * should switch to from cur, or -1 to stay: the replay's best, when it
 * beats cur by AN_AUTO_MARGIN (near-ties never flap) and there were
 * samples to replay; for a shuffled-epoch job whose record holds almost no
 * re-reads yet (its first pass), epoch at once: no recency or frequency
 * policy gets near the optimum on epochs (facts.md), and switching before
 * the tier fills is what lets the epoch policy keep a stable subset; for a
 * mixed job of whole files (a hot set beside a scan), epoch too unless the
 * replay says it loses.
 * Re-apply it on a new verdict, or after AN_AUTO_RECHECK more requests. */
#define AN_AUTO_MARGIN  0.01
#define AN_AUTO_RECHECK 4096
int an_auto_choice(const an_report *r, int t, int cur);

/* The row name of the report's hit table: policy_kind_name, "static", "belady". */
const char *an_row_name(int row);

/* The value below which share q (0..1) of h lies: the lower bound of its
 * bucket, within 25% below the true quantile. */
uint64_t an_hist_quantile(const an_hist *h, double q);

#endif
