#!/bin/sh
# bench/run.sh - `make bench`: every benchmark in one go, into one report.
#   1. bench/dfs.sh    Granary on a real DFS (MooseFS, bandwidth-capped) beside
#                      the direct mount, staging to local disk, the page cache,
#                      memcached and Redis: large files, 100 KB samples, random
#                      ranges, reader processes, shuffled epochs at three cache
#                      sizes, a training loop's stall fraction
#   2. the eviction-policy curve for shuffled epochs (bench/simulate), for
#      the hit-ratio plot
#   3. bench/local.sh  one large local file: cat, granaryctl cat, libgranary
#   4. bench/hot.sh    DRAM-tier reads beside the page cache, memcached, Redis
#   5. bench/sim.sh    the policy simulator's table
#   6. bench/warmup.sh granaryctl warmup of many small files on the DFS beside
#                      a parallel cat of them
#   7. bench/isolation.sh  what multi-user isolation costs on hot reads
#   8. bench/fio.sh    fio psync 4 KiB reads, page cache beside the shim
#      bench/touch.sh  a fresh process's first pass over cached data against
#                      its second, per [dram] huge_pages setting
#   9. bench/meta.sh   the DFS's metadata operations per epoch (direct, Granary
#                      with access proofs, Granary with a registered dataset)
#                      and the stat rate, on MooseFS
#  10. bench/imagefolder.sh  samples/s of an ImageFolder epoch (JPEG decode
#                      included): torchvision plain, under the shim, and
#                      granary.torch.GranaryImageFolder, cold and warm, on MooseFS
#  10. bench/ckpt.sh   time a job is blocked writing a 1 GiB and a 4 GiB checkpoint
#                      through Granary beside writing it to MooseFS directly
#  11. bench/peer.sh   the peer cache: epoch time and DFS bytes of shuffled
#                      epochs, 1 node beside 3 nodes (own network namespaces)
#                      with the peer cache and 3 each reading the DFS alone
# BENCH_MODE=quick (default: small datasets, about 4 minutes on 2 cores) or
# full (larger datasets, more rounds).  Writes bench/results/<date>/:
# summary.md (every table), results.jsonl (the DFS runs, raw), *.png plots,
# and the raw files of each part.  Needs root for the DFS part (namespaces,
# FUSE, drop_caches); without it that part says why and is skipped.
set -eu
cd "$(dirname "$0")/.."
mode=${BENCH_MODE:-quick}
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)}
export BENCH_MODE=$mode OUT
case $mode in
quick) local_mb=256 hot_mb=128 hot_rounds=2 warm_files=20000 meta_files=20000 imgf=1000 ;;
full) local_mb=1024 hot_mb=256 hot_rounds=3 warm_files=100000 meta_files=100000 imgf=10000 ;;
*) echo "bench: BENCH_MODE is quick or full" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
rm -f "$OUT/results.jsonl"
t0=$(date +%s)

bench/dfs.sh

# The policy curve: hit ratio after the first epoch of shuffled epochs, for
# caches from a tenth of the dataset to twice it.
tmp=build/bench-work/traces
mkdir -p "$tmp"
build/bench/tracegen epochs --items 2000 --epochs 3 --shuffle --seed 1 > "$tmp/curve.txt"
build/bench/simulate --sizes 10,5,3.333,2.5,2,1.667,1.429,1.25,1.111,1,0.909,0.667,0.5 --json \
    "$tmp/curve.txt" > "$OUT/sim-curve.json"
python3 bench/report.py "$OUT"

BENCH_SIZE_MB=$local_mb bench/local.sh
HOT_OUT=$OUT HOT_SIZE_MB=$hot_mb HOT_ROUNDS=$hot_rounds bench/hot.sh > /dev/null
bench/sim.sh > /dev/null
WARMUP_FILES=$warm_files bench/warmup.sh > /dev/null
bench/isolation.sh > /dev/null
bench/fio.sh > /dev/null
TOUCH_MB=256 TOUCH_RUNS=2 bench/touch.sh > /dev/null
{ echo "## Metadata operations per epoch (bench/meta.sh $meta_files)"; echo; echo '```';
  bench/meta.sh "$meta_files" | grep -v '^META_'; echo '```'; } > "$OUT/meta.md" 2>&1 ||
    echo "meta: failed (see $OUT/meta.md)" >> "$OUT/meta.md"
{ echo "## ImageFolder epochs (bench/imagefolder.sh $imgf)"; echo;
  bench/imagefolder.sh "$imgf" | grep -v '^IMGF_'; } > "$OUT/imagefolder.md" 2>&1 ||
    echo "imagefolder: failed (see $OUT/imagefolder.md)" >> "$OUT/imagefolder.md"

{ echo "## Checkpoint writes: blocked time (bench/ckpt.sh dfs)"; echo; echo '```';
  bench/ckpt.sh dfs "1073741824 4294967296"; echo '```'; } > "$OUT/ckpt.md" 2>&1 ||
    echo "ckpt: failed (see $OUT/ckpt.md)" >> "$OUT/ckpt.md"
bench/peer.sh > /dev/null || echo "peer: failed (a reader failed or was not byte-exact)" >> "$OUT/peer.md"

{
    cat "$OUT/dfs.md"
    for part in local hot sim warmup isolation fio touch meta imagefolder ckpt peer; do
        echo
        cat "$OUT/$part.md"
    done
    echo
    echo "The whole run (BENCH_MODE=$mode) took $(( $(date +%s) - t0 )) s."
} > "$OUT/summary.md"
echo
cat "$OUT/dfs.md"
echo "bench: report in $OUT/summary.md"
