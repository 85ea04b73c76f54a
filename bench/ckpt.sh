#!/bin/sh
# bench/ckpt.sh - time a training job is blocked writing a checkpoint:
# through Granary (gr_ckpt_create/pwrite/commit: returns once the bytes are
# fsynced on the node's NVMe; the drain to the DFS goes on behind), and
# acknowledged early (gr_ckpt_commit_staged: returns once the daemon holds
# the sealed memfd), beside writing it to the destination directly
# (pwrite + fsync).
#
#   bench/ckpt.sh DESTDIR [SIZES]     SIZES in bytes, default "1073741824"
#   bench/ckpt.sh dfs [SIZES]         on a MooseFS of its own (scripts/dfs.sh
#                                     up $CKPT_DFS_RATE, default 1600mbit),
#                                     taken down afterwards
#
# DESTDIR is where the checkpoint goes (the bandwidth-capped MooseFS mount of
# scripts/dfs.sh, or a local directory); the NVMe tier is a directory under
# $CKPT_NVME (default: a scratch directory under /tmp).  Prints one line per
# size: direct seconds, Granary blocked seconds, their ratio, and the time
# until Granary's copy was published at DESTDIR; then the same acknowledged
# early (with the seconds until it was local).  Never fails on timings.
#
# CKPT_BURST=N (2-4, say) instead puts N checkpoints of each size back to
# back, each to its own destination, and prints the job's blocked seconds
# (all N puts together) and the seconds from the first put until all N are
# published; CKPT_DRAINS sets [checkpoint] drains (unset: the daemon's
# default, 2) and CKPT_BW drain_bandwidth (default 0: unlimited), to compare
# drains = 1 and more; GRANARYD another daemon binary (an older build).
set -u
dest=${1:?usage: bench/ckpt.sh DESTDIR|dfs [SIZES]}
sizes=${2:-1073741824}
if [ "$dest" = dfs ]; then
    export DFS_DIR=${DFS_DIR:-/tmp/granary-dfs-ckpt} DFS_NAME=${DFS_NAME:-grckpt}
    scripts/dfs.sh probe || exit 0
    scripts/dfs.sh up "${CKPT_DFS_RATE:-1600mbit}" > /dev/null || exit 1
    mkdir -p "$DFS_DIR/mnt/ckptbench"
    echo "MooseFS at ${CKPT_DFS_RATE:-1600mbit} (scripts/dfs.sh), staging on $(df --output=source /tmp | tail -1)"
    sh "$0" "$DFS_DIR/mnt/ckptbench" "$sizes"
    rc=$?
    DFS_PURGE=1 scripts/dfs.sh down > /dev/null
    exit $rc
fi
W=build/tests/ckpt_writer
scratch=$(mktemp -d /tmp/granary-ckptbench-XXXXXX)
nvme=${CKPT_NVME:-$scratch/nvme}
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$scratch"' EXIT INT TERM
cat > "$scratch/g.conf" <<CONF
[daemon]
socket = $scratch/sock
[source]
roots = $dest
[dram]
capacity = 64M
[nvme]
path = $nvme
capacity = 64M
[checkpoint]
capacity = 32G
memory = ${CKPT_MEMORY:-8G}
${CKPT_DRAINS:+drains = $CKPT_DRAINS}
drain_bandwidth = ${CKPT_BW:-0}
[metrics]
listen =
CONF
${GRANARYD:-build/granaryd} --config "$scratch/g.conf" > "$scratch/log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$scratch/sock" ] && break; sleep 0.05; done
if [ -n "${CKPT_BURST:-}" ]; then
    printf '%-12s %6s %6s %10s %12s\n' bytes burst drains blocked_s published_s
    for s in $sizes; do
        sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
        t0=$(date +%s.%N); b=0; i=0
        while [ $i -lt "$CKPT_BURST" ]; do
            i=$((i + 1))
            g=$($W put "$scratch/sock" "$dest/ckptbench-burst.$s.$i" "$s" $((10 + i)) | sed -n 's/^blocked_s //p')
            b=$(echo "$b $g" | awk '{printf "%.3f", $1 + $2}')
        done
        while build/granaryctl -s "$scratch/sock" ckpt list | grep -Eq '	(staged|local|replicated)	'; do
            sleep 0.05
        done
        t1=$(date +%s.%N)
        ok=yes; i=0
        while [ $i -lt "$CKPT_BURST" ]; do
            i=$((i + 1))
            $W check "$dest/ckptbench-burst.$s.$i" "$s" $((10 + i)) || ok=NO
            rm -f "$dest/ckptbench-burst.$s.$i"
        done
        printf '%-12s %6s %6s %10s %12s  byte-exact: %s\n' "$s" "$CKPT_BURST" "${CKPT_DRAINS:-dflt}" "$b" \
            "$(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}')" "$ok"
    done
    exit 0
fi
printf '%-12s %10s %10s %8s %12s %10s %8s %9s %12s\n' bytes direct_s local_s ratio published_s \
    staged_s ratio tolocal_s published_s
for s in $sizes; do
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
    d=$($W direct "$dest/ckptbench-direct.$s" "$s" 1 | sed -n 's/^blocked_s //p')
    rm -f "$dest/ckptbench-direct.$s"
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
    t0=$(date +%s.%N)
    out=$($W put "$scratch/sock" "$dest/ckptbench-granary.$s" "$s" 2 wait)
    t1=$(date +%s.%N)
    g=$(echo "$out" | sed -n 's/^blocked_s //p')
    ok=$($W check "$dest/ckptbench-granary.$s" "$s" 2 && echo yes || echo NO)
    rm -f "$dest/ckptbench-granary.$s"
    # Acknowledged early (gr_ckpt_commit_staged): blocked until the daemon
    # holds the memfd; then until local and until published.
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
    t3=$(date +%s.%N)
    out=$($W put "$scratch/sock" "$dest/ckptbench-early.$s" "$s" 3 staged-wait)
    t2=$(date +%s.%N)
    e=$(echo "$out" | sed -n 's/^blocked_s //p')
    el=$(echo "$out" | sed -n 's/^local_s //p')
    echo "$out" | grep -q '^state staged' || e="$e(local)"
    $W check "$dest/ckptbench-early.$s" "$s" 3 || ok=NO
    rm -f "$dest/ckptbench-early.$s"
    printf '%-12s %10s %10s %8s %12s %10s %8s %9s %12s  byte-exact: %s\n' "$s" "$d" "$g" \
        "$(echo "$g $d" | awk '{printf "%.3f", $1 / $2}')" \
        "$(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}')" "$e" \
        "$(echo "$e $d" | awk '{printf "%.3f", $1 / $2}')" "$el" \
        "$(echo "$t3 $t2" | awk '{printf "%.2f", $2 - $1}')" "$ok"
done
