#!/bin/sh
# examples/compare.sh - samples/s of examples/train_loop.py without Granary,
# through Granary (GranaryDataset, with and without the HintingSampler) and
# through the LD_PRELOAD shim, on a bandwidth-limited DFS; prints a table.
#
#   examples/compare.sh                  # root: MooseFS via scripts/dfs.sh
#   RATE=400mbit SAMPLES=1500 SIZE=112640 EPOCHS=3 STEP_MS=20 WORKERS=2 examples/compare.sh
#
# The DFS is scripts/dfs.sh's MooseFS (its own namespaces DFS_NAME=grex,
# state under a scratch directory), capped at RATE with TBF, read through its
# mfscachemode=DIRECT mount, so that every read of the plain loop crosses the
# capped network, as on a cluster whose dataset is larger than the node's
# page cache.  Each mode gets a fresh granaryd (empty DRAM and NVMe tiers,
# [source] roots on that mount), so its epoch 1 is cold; epochs 2 and later
# show the warm cache.  "DFS MB" is what crossed the DFS's network during the
# mode (dfs.sh netbytes).  Where scripts/dfs.sh probe fails (not root, no
# FUSE or network namespaces) it says why and, with LOCAL=1, runs on a local
# directory instead (no bandwidth cap: the table then shows the overheads of
# the paths, not the cache's benefit).  Needs `make` first.
cd "$(dirname "$0")/.."
set -u
RATE=${RATE:-400mbit}
SAMPLES=${SAMPLES:-1500}
SIZE=${SIZE:-112640}
EPOCHS=${EPOCHS:-3}
STEP_MS=${STEP_MS:-20}
WORKERS=${WORKERS:-2}
BATCH=${BATCH:-32}
MODES=${MODES:-plain granary nohints preload}
PY=/usr/bin/python3
DFS=scripts/dfs.sh

dir=$(mktemp -d /tmp/granary-compare-XXXXXX)
export DFS_DIR="$dir/dfs" DFS_NAME=grex
pid=
dfs_up=0
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    [ $dfs_up -eq 1 ] && $DFS down > /dev/null 2>&1
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

[ -x build/granaryd ] && [ -f build/libgranary.so ] || { echo "compare: run make first" >&2; exit 1; }

if why=$($DFS probe); then
    echo "compare: starting MooseFS (scripts/dfs.sh up $RATE)"
    dfs_up=1
    $DFS up "$RATE" > "$dir/dfs-up.log" 2>&1 || { cat "$dir/dfs-up.log" >&2; exit 1; }
    root=$DFS_DIR/mnt
    source="MooseFS via scripts/dfs.sh, DIRECT mount, capped at $RATE"
    netbytes() { $DFS netbytes; }
elif [ "${LOCAL:-0}" = 1 ]; then
    echo "compare: no DFS here ($why); LOCAL=1: a local directory, no bandwidth cap"
    root=$dir/local
    mkdir -p "$root"
    source="local directory $root (no cap: $why)"
    netbytes() { echo 0; }
else
    echo "compare: no DFS here: $why (LOCAL=1 runs on a local directory instead)" >&2
    exit 1
fi

data=$root/train
echo "compare: writing $SAMPLES files of $SIZE bytes to $data"
$PY -c 'import sys; sys.path.insert(0, "examples"); import train_loop
train_loop.make_folder(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))' "$data" "$SAMPLES" "$SIZE" || exit 1

start_daemon() {   # a fresh daemon: empty tiers
    rm -rf "$dir/nvme" "$dir/sock"
    cat > "$dir/g.conf" <<CONF
[daemon]
socket = $dir/sock
[source]
roots = $root
attr_ttl = 60
[dram]
capacity = 1G
[nvme]
path = $dir/nvme
capacity = 2G
[metrics]
listen =
CONF
    build/granaryd --config "$dir/g.conf" 2>>"$dir/granaryd.log" &
    pid=$!
    i=0
    while [ ! -S "$dir/sock" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
    [ -S "$dir/sock" ] || { echo "compare: granaryd did not start" >&2; cat "$dir/granaryd.log" >&2; exit 1; }
}
stop_daemon() { kill "$pid"; wait "$pid"; pid=; }

: > "$dir/results"
for mode in $MODES; do
    start_daemon
    n0=$(netbytes)
    GRANARY_SOCKET=$dir/sock PYTHONPATH=python $PY examples/train_loop.py --data "$data" \
        --mode "$mode" --epochs "$EPOCHS" --workers "$WORKERS" --batch "$BATCH" \
        --step-ms "$STEP_MS" > "$dir/$mode.log" 2>&1
    rc=$?
    n1=$(netbytes)
    grep -v '^RESULT' "$dir/$mode.log" | sed 's/^/    /'
    [ $rc -eq 0 ] || { echo "compare: $mode failed (exit $rc)" >&2; exit 1; }
    grep '^RESULT' "$dir/$mode.log" | awk -v net=$((n1 - n0)) '{ print $0, net }' >> "$dir/results"
    # The daemon's view of the whole mode (all epochs).
    build/granaryctl -s "$dir/sock" stats --json | tr -d '{}" ' | tr ',' '\n' | awk -F: '
        $1 ~ /^(misses|hits_dram|prefetch_issued|prefetch_used|hint_entries_added|hint_skipped|stall_microseconds|stalled_reads)$/ {
            printf "%s%s=%s", sep, $1, $2; sep = " " } END { print "" }' | sed 's/^/    granaryd: /'
    stop_daemon
done

echo
echo "examples/train_loop.py, $SAMPLES files of $SIZE bytes, batch $BATCH, $WORKERS workers, step $STEP_MS ms/batch"
echo "source: $source"
awk -v epochs="$EPOCHS" '
    BEGIN { label["plain"] = "plain open()"; label["granary"] = "granary + HintingSampler"
            label["nohints"] = "granary, no hints"; label["preload"] = "LD_PRELOAD shim, open()" }
    { if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 }
      sps[$2, $3] = $6; net[$2] = $8 }
    END {
        printf "| %-26s |", "mode"
        for (e = 1; e <= epochs; e++) printf " epoch %d samples/s |", e
        printf " DFS MB |\n|%s|", "----------------------------"
        for (e = 1; e <= epochs; e++) printf "%s|", "-------------------"
        printf "--------|\n"
        for (i = 1; i <= n; i++) {
            m = order[i]
            printf "| %-26s |", label[m]
            for (e = 1; e <= epochs; e++) printf " %17.0f |", sps[m, e]
            printf " %6.0f |\n", net[m] / 1e6
        }
    }' "$dir/results"
