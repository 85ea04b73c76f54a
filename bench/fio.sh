#!/bin/bash
# bench/fio.sh (part of `make bench`, bench/run.sh): fio, a client nobody on
# the project wrote, reading one file with --ioengine=psync --bs=4k (random
# and sequential), warm, side by side in one run:
#   page cache     fio on the local file, the page cache warm
#   shim           the same fio under LD_PRELOAD=libgranary_preload.so,
#                  served from granaryd's DRAM tier (warm: read once first),
#                  with the default [dram] client_lease_cache (32M: past
#                  it the leases go back and their entries stay soft,
#                  served while the blocks' generations are unchanged, so
#                  random 4 KiB reads of a bigger file cost a round trip
#                  only on a chunk's first read)
#   shim, lease cache = the file   client_lease_cache raised to hold the
#                  file (with the caps it is bound by: max_leased_per_client,
#                  a sixteenth of the tier), so reads are served from leases
#                  the client keeps, with no message
# Each for FIO_SECONDS (default 5), iodepth 1, one job; the bytes are checked
# by tests/test_preload.sh, not here.  FIO_SIZE_MB (default 256) sets the
# file.  Writes $OUT/fio.md and prints it.
set -eu
cd "$(dirname "$0")/.."
size_mb=${FIO_SIZE_MB:-256}
secs=${FIO_SECONDS:-5}
out=${OUT:-bench/results/$(date +%Y-%m-%d)}
work=$(mktemp -d /tmp/granary-fio-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT INT TERM
mkdir -p "$work/src" "$out"
if ! command -v fio > /dev/null; then
    echo "fio: not installed (Debian: fio)" > "$out/fio.md"
    cat "$out/fio.md"
    exit 0
fi
file="$work/src/fio.bin"
head -c $((size_mb * 1048576)) /dev/urandom > "$file"

start() {   # start DRAM_LINES: granaryd on a fresh config, the file warm in DRAM
    if [ -n "$pid" ]; then kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; fi
    cat > "$work/g.conf" <<CONF
[daemon]
socket = $work/sock
log_level = warn
[source]
roots = $work/src
chunk_size = 4M
[dram]
$1
[nvme]
path =
[metrics]
listen =
CONF
    rm -f "$work/sock"
    build/granaryd --config "$work/g.conf" 2>> "$work/log" &
    pid=$!
    i=0
    while [ ! -S "$work/sock" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
    build/granaryctl -s "$work/sock" cat "$file" > /dev/null
}
stat_of() { build/granaryctl -s "$work/sock" stats --json | sed -n "s/.*\"$1\": *\([0-9]*\).*/\1/p"; }

# run LABEL RW [ENV=VALUE...]: "LABEL RW IOPS MiB/s"
run() {
    label=$1 rw=$2
    shift 2
    env "$@" fio --name=b --filename="$file" --rw="$rw" --bs=4k --ioengine=psync --iodepth=1 \
        --numjobs=1 --time_based --runtime="$secs" --size="${size_mb}M" --invalidate=0 \
        --output-format=terse --terse-version=3 2> "$work/fio.err" |
        awk -F';' -v l="$label" -v r="$rw" '{printf "%s %s %d %.1f\n", l, r, $8, $7 / 1024}'
}

cat "$file" > /dev/null
start "capacity = $((size_mb * 2))M"
shim="LD_PRELOAD=$(pwd)/build/libgranary_preload.so"
sock="GRANARY_SOCKET=$work/sock"
: > "$work/res"
run page-cache randread >> "$work/res"
run page-cache read >> "$work/res"
r0=$(stat_of read_requests)
run shim randread "$shim" "$sock" >> "$work/res"
run shim read "$shim" "$sock" >> "$work/res"
r1=$(stat_of read_requests)
sleep 1.2                                   # the clients' last REPORT
soft=$(stat_of lease_cache_unpinned_hits) stale=$(stat_of lease_cache_stale)
start "capacity = $((size_mb * 20))M
max_leased_per_client = $((size_mb * 2))M
client_lease_cache = $((size_mb + 64))M
client_lease_ttl = 600"
run shim-kept randread "$shim" "$sock" >> "$work/res"
run shim-kept read "$shim" "$sock" >> "$work/res"
sleep 1.2                                   # the clients' last REPORT
kept=$(stat_of lease_cache_hits)
get() { awk -v l="$1" -v r="$2" '$1 == l && $2 == r {print $3}' "$work/res"; }
{
    echo "## fio --ioengine=psync --bs=4k, warm, one job (bench/fio.sh, ${size_mb} MiB file, ${secs} s each)"
    echo
    echo "| pattern | page cache IOPS | shim, default lease cache | ratio | shim, lease cache = the file | ratio |"
    echo "|---|---:|---:|---:|---:|---:|"
    for rw in randread read; do
        pc=$(get page-cache $rw) sh=$(get shim $rw) sk=$(get shim-kept $rw)
        printf '| %s | %s | %s | %.2fx | %s | %.2fx |\n' "$rw" "$pc" "$sh" \
            "$(echo "$sh / $pc" | bc -l)" "$sk" "$(echo "$sk / $pc" | bc -l)"
    done
    echo
    echo "Default runs: $((r1 - r0)) READX round trips to the daemon, $soft reads served from"
    echo "released leases whose blocks were unchanged (lease_cache_unpinned_hits), $stale found"
    echo "stale; lease-cache runs: $kept reads served from leases the client kept (lease_cache_hits),"
    echo "with no message."
} > "$out/fio.md"
cat "$out/fio.md"
