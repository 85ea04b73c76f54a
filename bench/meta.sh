#!/bin/bash
# bench/meta.sh - the DFS's metadata operations per epoch and the stat rate
# (issue 15), on the MooseFS set-up (scripts/dfs.sh), side by side in one run:
#   direct            the loader walks, stats and reads every file on the mount
#   granary (fd)      the same through granaryd as it was: access_check = fd,
#                     no dataset (the client opens each file for the proof)
#   granary dataset   access_check = judge and the tree registered
#                     (granaryctl dataset add): after the scan, stat, readdir
#                     and open come from the manifest
# Metadata operations are the FUSE mount's own counters (the mount's .stats:
# lookup, getattr, access, open, release, opendir, readdir, releasedir,
# statfs, getxattr, listxattr), read before and after each epoch; reading
# .stats itself costs a few, measured and subtracted.
#
#   bench/meta.sh [FILES] [SIZE]      default 20000 files of 4 KiB in 100 dirs
#
# Environment: DFS_DIR, DFS_NAME as for scripts/dfs.sh (brought up if down,
# left as found).  Prints a table; the last lines are KEY=VALUE for report.py.
set -eu
cd "$(dirname "$0")/.."
FILES=${1:-20000}
SIZE=${2:-4096}
export DFS_DIR=${DFS_DIR:-/tmp/granary-dfs} DFS_NAME=${DFS_NAME:-grdfs}
mnt=$DFS_DIR/mnt
work=$(mktemp -d /tmp/granary-meta-XXXXXX)
chmod 755 "$work"
started_dfs=
gpid=
cleanup() {
    [ -n "$gpid" ] && kill "$gpid" 2>/dev/null && wait "$gpid" 2>/dev/null
    rm -rf "$work"
    [ -n "$started_dfs" ] && scripts/dfs.sh down > /dev/null 2>&1
    return 0
}
trap cleanup EXIT INT TERM
if ! scripts/dfs.sh status > /dev/null 2>&1 || [ ! -e "$mnt/.stats" ]; then
    scripts/dfs.sh up > /dev/null
    started_dfs=1
fi
tree=$mnt/metabench-$FILES-$SIZE
if [ ! -e "$tree/.done" ]; then
    echo "meta: making $FILES files of $SIZE bytes under $tree (once)"
    rm -rf "$tree"
    mkdir -p "$tree"
    head -c "$SIZE" /dev/urandom > "$work/blob"
    d=0
    while [ $d -lt 100 ]; do
        mkdir -p "$tree/c$d"
        n=$(( FILES / 100 ))
        for i in $(seq 1 "$n"); do cp "$work/blob" "$tree/c$d/s$i"; done
        d=$((d + 1))
    done
    : > "$tree/.done"
fi
chmod -R a+rX "$tree"

meta_ops() {
    awk -F': ' '/^fuse_ops\.(lookup|getattr|access|open|release|opendir|readdir|releasedir|statfs|getxattr|listxattr): /{s+=$2} END{print s+0}' "$mnt/.stats"
}
a=$(meta_ops); b=$(meta_ops); probe=$((b - a))

ctl="build/granaryctl -s $work/sock"
start() {   # start ACCESS_CHECK
    cat > "$work/g.conf" <<CONF
[daemon]
socket = $work/sock
socket_mode = 0666
access_check = $1
[source]
roots = $mnt
chunk_size = 1M
[dram]
capacity = 1G
[nvme]
path = $work/nvme
capacity = 4G
[metrics]
listen =
CONF
    build/granaryd --config "$work/g.conf" 2>> "$work/log" &
    gpid=$!
    for _ in $(seq 1 500); do [ -S "$work/sock" ] && return 0; sleep 0.02; done
    echo "meta: granaryd did not start" >&2; cat "$work/log" >&2; exit 1
}
stop() { kill "$gpid"; wait "$gpid" 2>/dev/null || true; gpid=; rm -rf "$work/nvme"; }

# run LABEL CMD...: one epoch as a non-root user (root needs no access
# proof, and a training job is not root), FUSE metadata ops around it
declare -A OPS RATE
run() {
    label=$1; shift
    o0=$(meta_ops)
    line=$(su nobody -s /bin/sh -c "$*")
    o1=$(meta_ops)
    ops=$((o1 - o0 - probe))
    [ $ops -lt 0 ] && ops=0
    n=$(echo "$line" | awk '{print $2}'); r=$(echo "$line" | awk '{print $8}')
    OPS[$label]=$ops RATE[$label]=$r
    printf '%-34s %8s files %10s metadata ops (%6.2f per file) %10s files/s\n' "$label" "$n" "$ops" \
        "$(echo "$ops / $n" | bc -l)" "$r"
}
mb=build/bench/metabench
echo "meta: $FILES files of $SIZE bytes on MooseFS ($mnt), one run"
run "direct epoch" "$mb direct $tree"
run "direct epoch again" "$mb direct $tree"
run "direct stat of every file" "$mb stat-direct $tree"

start fd
run "granary (fd) epoch 1" "$mb granary $work/sock $tree"
run "granary (fd) epoch 2" "$mb granary $work/sock $tree"
stop

start judge
o0=$(meta_ops); t0=$(date +%s.%N)
$ctl dataset add "$tree" > /dev/null
until $ctl dataset list | grep -q ': ready,'; do sleep 0.05; done
t1=$(date +%s.%N); o1=$(meta_ops)
scan_ops=$((o1 - o0)); scan_s=$(echo "$t1 - $t0" | bc -l)
printf '%-34s %8s files %10s metadata ops, %.2f s (%.0f files/s)\n' "dataset scan (once)" "$FILES" \
    "$scan_ops" "$scan_s" "$(echo "$FILES / $scan_s" | bc -l)"
run "granary dataset epoch 1" "$mb granary $work/sock $tree"
run "granary dataset epoch 2" "$mb granary $work/sock $tree"
run "granary dataset stat of every file" "$mb stat-granary $work/sock $tree"
stop

ratio() { echo "scale=1; $1 / $2" | bc -l; }
echo
echo "meta: ratios (one run)"
echo "  metadata ops per epoch: direct ${OPS[direct epoch again]}, granary fd ${OPS[granary (fd) epoch 2]}, dataset ${OPS[granary dataset epoch 2]}"
echo "  stat rate: dataset / direct = $(ratio "${RATE[granary dataset stat of every file]}" "${RATE[direct stat of every file]}")x"
echo "  warm epoch files/s: dataset / direct = $(ratio "${RATE[granary dataset epoch 2]}" "${RATE[direct epoch again]}")x"
echo "META_FILES=$FILES"
echo "META_OPS_DIRECT=${OPS[direct epoch again]}"
echo "META_OPS_FD=${OPS[granary (fd) epoch 2]}"
echo "META_OPS_DATASET=${OPS[granary dataset epoch 2]}"
echo "META_STAT_RATIO=$(ratio "${RATE[granary dataset stat of every file]}" "${RATE[direct stat of every file]}")"
