#!/bin/bash
# scripts/restart_time.sh - how long granaryd takes to come back with a warm
# NVMe tier (part of make torture).  Fills a tier with tests/store_fill
# (RESTART_GIB GiB of 4 MiB chunks in slot files; RESTART_CHUNKS 4 KiB chunks
# inline in RocksDB), SIGKILLs a daemon started on it (a crash, so no clean
# close), and times the next start until its socket answers.  Prints
# seconds per cached GiB and per million chunks.
set -u
cd "$(dirname "$0")/.." || exit 2
NAME=restart
. tests/lib.sh
GIB=${RESTART_GIB:-1}
NCHUNKS=${RESTART_CHUNKS:-200000}
FILL=build/tests/store_fill

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# measure CHUNK INLINE_MAX CAPACITY: prints the restart time in ms
measure() {
    rm -f "$dir/sock"
    write_conf "[source]
chunk_size = $1
[nvme]
capacity = $3
inline_max = $2
[dram]
capacity = 64M"
    $GRANARYD --config "$dir/g.conf" 2>>"$dir/log" &
    pid=$!
    while ! $CTL -s "$dir/sock" stats >/dev/null 2>&1; do sleep 0.01; done
    kill -9 "$pid"; wait "$pid" 2>/dev/null
    t0=$(now_ms)
    $GRANARYD --config "$dir/g.conf" 2>>"$dir/log" &
    pid=$!
    while ! $CTL -s "$dir/sock" stats >/dev/null 2>&1; do sleep 0.005; done
    t1=$(now_ms)
    echo "chunks in the index: $(stat_of nvme_chunks)" >&2
    kill "$pid"; wait "$pid" 2>/dev/null
    pid=
    echo $((t1 - t0))
}

n=$((GIB * 256))
echo "filling $n chunks of 4 MiB ($GIB GiB) ..."
$FILL "$dir/nvme" $(( (GIB + 1) << 30 )) $((4 << 20)) 65536 "$n" || exit 1
big_ms=$(measure 4M 64K $(( (GIB + 1) << 30 )))
rm -rf "$dir/nvme"
echo "filling $NCHUNKS chunks of 4 KiB (inline) ..."
$FILL "$dir/nvme" $(( NCHUNKS * 12288 + (256 << 20) )) 4096 4096 "$NCHUNKS" || exit 1
small_ms=$(measure 64K 4K $(( NCHUNKS * 12288 + (256 << 20) )))
rm -rf "$dir/nvme"
awk -v g="$GIB" -v b="$big_ms" -v c="$NCHUNKS" -v s="$small_ms" 'BEGIN {
    printf "restart: %d GiB of 4 MiB chunks in %d ms = %.3f s per cached GiB; ", g, b, b / 1000 / g
    printf "%d chunks of 4 KiB in %d ms = %.2f s per million chunks\n", c, s, s / 1000 * 1e6 / c }'
