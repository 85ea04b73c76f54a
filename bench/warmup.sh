#!/bin/bash
# bench/warmup.sh - warmup speed on many small files, on the real DFS, each
# from cold (caches dropped, the DFS's chunkservers included: they share this
# kernel) into an empty NVMe tier, beside a parallel cat of the same files
# with the same parallelism (xargs -P):
#   cat of the list, and `granaryctl warmup --from-file` of the same list;
#   `granaryctl warmup DIR` (walking the tree itself) beside `find | xargs cat`;
#   the warmup again with everything cached (the cost of the skip path).
# Files: WARMUP_FILES (default 100000) of WARMUP_BYTES (default 4096), kept
# in the DFS between runs (created once).  Parallelism: WARMUP_PAR (8).
# Appends JSON lines to $OUT/warmup.jsonl and writes $OUT/warmup.md.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)}
N=${WARMUP_FILES:-100000}
SIZE=${WARMUP_BYTES:-4096}
PAR=${WARMUP_PAR:-8}
RATE=${BENCH_DFS_RATE:-1600mbit}
export DFS_DIR=${DFS_DIR:-/tmp/granary-dfs}
DFS=scripts/dfs.sh
work=$top/build/bench-warmup
mkdir -p "$OUT" "$work"
log() { echo "bench/warmup: $*" >&2; }

if ! why=$($DFS probe); then
    log "skipped: $why"
    echo "no DFS here: $why" > "$OUT/warmup.md"
    exit 0
fi
gpid= up=0
cleanup() {
    [ -n "$gpid" ] && { kill "$gpid" 2> /dev/null; wait "$gpid" 2> /dev/null || true; }
    [ $up -eq 1 ] && $DFS down > /dev/null 2>&1
    true
}
trap cleanup EXIT
trap 'exit 1' INT TERM
$DFS up "$RATE" > /dev/null
up=1
mnt=$DFS_DIR/mnt
ds=$mnt/warmup-$N-$SIZE
if [ ! -f "$ds/.complete" ]; then
    log "creating $N files of $SIZE bytes in $ds (once)"
    mkdir -p "$ds"
    python3 - "$ds" "$N" "$SIZE" <<'EOF'
import os, sys
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per = 1000
for i in range(n):
    sub = os.path.join(d, "d%03d" % (i // per))
    if i % per == 0:
        os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%06d" % i), "wb") as f:
        f.write(os.urandom(size))
EOF
    touch "$ds/.complete"
fi
find "$ds" -type f -name 'f*' > "$work/list"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }

# A parallel cat, cold: of the list, and with the walk (find) included.
drop
t0=$(now)
xargs -a "$work/list" -P "$PAR" -n 64 cat > /dev/null
t_cat=$(echo "$(now) - $t0" | bc -l)
drop
t0=$(now)
find "$ds" -type f -name 'f*' | xargs -P "$PAR" -n 64 cat > /dev/null
t_catw=$(echo "$(now) - $t0" | bc -l)

cat > "$work/g.conf" << EOF
[daemon]
socket = $work/sock
log_level = warn
io_threads = $((PAR + 2))
[source]
roots = $mnt
chunk_size = 1M
attr_ttl = 600
max_inflight = $((PAR + PAR / 3 + 1))
[dram]
capacity = 256M
[nvme]
path = $work/nvme
capacity = 4G
[metrics]
listen =
EOF
fresh() {   # a granaryd with an empty NVMe tier
    [ -n "$gpid" ] && { kill "$gpid"; wait "$gpid" || true; gpid=; }
    rm -rf "$work/nvme" "$work/sock"
    build/granaryd --config "$work/g.conf" 2>> "$work/granaryd.log" &
    gpid=$!
    i=0
    while [ ! -S "$work/sock" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
}
fresh
drop
t0=$(now)
build/granaryctl -s "$work/sock" warmup --from-file "$work/list" --wait > "$work/wu0.out"
t_wul=$(echo "$(now) - $t0" | bc -l)
fresh
drop
t0=$(now)
build/granaryctl -s "$work/sock" warmup "$ds" --wait > "$work/wu1.out"
t_wu=$(echo "$(now) - $t0" | bc -l)
t0=$(now)
build/granaryctl -s "$work/sock" warmup "$ds" --wait > "$work/wu2.out"
t_wu2=$(echo "$(now) - $t0" | bc -l)
tail -1 "$work/wu1.out" >&2
tail -1 "$work/wu2.out" >&2
files=$(sed -n 's/.* done: \([0-9]*\) files.*/\1/p' "$work/wu1.out")

rate() { echo "$N / $1" | bc -l; }
r_cat=$(rate "$t_cat")
r_catw=$(rate "$t_catw")
r_wul=$(rate "$t_wul")
r_wu=$(rate "$t_wu")
r_wu2=$(rate "$t_wu2")
{
    echo "{\"scenario\": \"warmup\", \"system\": \"parallel cat of the list\", \"files\": $N, \"bytes\": $SIZE, \"par\": $PAR, \"seconds\": $t_cat}"
    echo "{\"scenario\": \"warmup\", \"system\": \"find | parallel cat\", \"files\": $N, \"bytes\": $SIZE, \"par\": $PAR, \"seconds\": $t_catw}"
    echo "{\"scenario\": \"warmup\", \"system\": \"granaryctl warmup --from-file, cold\", \"files\": $N, \"bytes\": $SIZE, \"par\": $PAR, \"seconds\": $t_wul}"
    echo "{\"scenario\": \"warmup\", \"system\": \"granaryctl warmup, cold\", \"files\": ${files:-0}, \"bytes\": $SIZE, \"par\": $PAR, \"seconds\": $t_wu}"
    echo "{\"scenario\": \"warmup\", \"system\": \"granaryctl warmup, again (all cached)\", \"files\": $N, \"bytes\": $SIZE, \"par\": $PAR, \"seconds\": $t_wu2}"
} >> "$OUT/warmup.jsonl"
{
    echo "## Warmup of $N files of $SIZE bytes on MooseFS ($RATE), parallelism $PAR"
    echo
    echo "From cold (page caches dropped, the chunkservers' included). Command: \`bench/warmup.sh\`."
    echo
    echo "| system | seconds | files/s | warmup / cat |"
    echo "|---|---|---|---|"
    printf '| parallel cat of the list (xargs -P %s) | %.1f | %.0f | |\n' "$PAR" "$t_cat" "$r_cat"
    printf '| granaryctl warmup --from-file (the same list), cold | %.1f | %.0f | **%.2fx** |\n' "$t_wul" "$r_wul" "$(echo "$r_wul / $r_cat" | bc -l)"
    printf '| find + parallel cat (walk included) | %.1f | %.0f | |\n' "$t_catw" "$r_catw"
    printf '| granaryctl warmup DIR (walks it), cold | %.1f | %.0f | **%.2fx** |\n' "$t_wu" "$r_wu" "$(echo "$r_wu / $r_catw" | bc -l)"
    printf '| granaryctl warmup DIR again (all cached: skipped) | %.1f | %.0f | |\n' "$t_wu2" "$r_wu2"
    echo
    echo "Warmup cached ${files:-?} files; the daemon's final line: \`$(tail -1 "$work/wu1.out")\`."
} > "$OUT/warmup.md"
cat "$OUT/warmup.md"
