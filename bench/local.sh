#!/bin/sh
# bench/local.sh (part of `make bench`, bench/run.sh): read throughput of one
# large file on the local disk, side by side in one run:
#   plain cat (page cache dropped = cold, then warm), granaryctl cat and
#   libgranary (bench/readbench.c) cold (empty cache, source cold), warm from
#   DRAM, and warm from NVMe after a daemon restart (DRAM empty).
# Writes bench/results/<date>/{local.jsonl,local.md} ($OUT overrides the
# directory) and prints local.md.
# BENCH_SIZE_MB (default 1024) sets the file size.  Needs root to drop the
# page cache; without it "cold" means "whatever the page cache holds" (noted).
set -eu
cd "$(dirname "$0")/.."
size_mb=${BENCH_SIZE_MB:-1024}
work=build/bench-work
out=${OUT:-bench/results/$(date +%Y-%m-%d)}
mkdir -p "$work/src" "$out"
rm -rf "$work/nvme" "$work/sock"
res="$out/local.jsonl"
: > "$res"
file="$(pwd)/$work/src/big.bin"
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -ne $((size_mb * 1048576)) ]; then
    echo "bench: writing a ${size_mb} MiB test file"
    head -c $((size_mb * 1048576)) /dev/urandom > "$file"
fi
can_drop=0
if [ "$(id -u)" -eq 0 ] && [ -w /proc/sys/vm/drop_caches ]; then can_drop=1; fi
drop() { sync; if [ $can_drop -eq 1 ]; then echo 3 > /proc/sys/vm/drop_caches; fi; }

cat > "$work/g.conf" <<CONF
[daemon]
socket = $(pwd)/$work/sock
io_threads = 4
log_level = warn
[source]
roots = $(pwd)/$work/src
chunk_size = 4M
[dram]
capacity = $((size_mb + size_mb / 2))M
[nvme]
path = $(pwd)/$work/nvme
capacity = $((size_mb * 2))M
[metrics]
listen =
CONF
pid=
start_daemon() {
    build/granaryd --config "$work/g.conf" 2>>"$work/granaryd.log" &
    pid=$!
    i=0
    while [ ! -S "$work/sock" ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i + 1)); done
}
stop_daemon() { kill "$pid"; wait "$pid" || true; pid=; }
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; true' EXIT INT TERM

now() { date +%s.%N; }
record() {   # record NAME SECONDS
    echo "{\"case\": \"$1\", \"bytes\": $((size_mb * 1048576)), \"seconds\": $2}" >> "$res"
    printf '%-34s %8.3f s  %7.2f GB/s\n' "$1" "$2" "$(echo "$size_mb * 1048576 / $2 / 1000000000" | bc -l)"
}
timeit() {   # timeit NAME COMMAND...  (stdout of the command is discarded)
    name=$1
    shift
    t0=$(now)
    "$@" > /dev/null
    t1=$(now)
    record "$name" "$(echo "$t1 - $t0" | bc -l)"
}
ctl="build/granaryctl -s $work/sock"
rb="build/bench/readbench -s $work/sock"

drop; timeit "cat, cold" cat "$file"
timeit "cat, page cache warm" cat "$file"

start_daemon
drop; timeit "granaryctl cat, cold" $ctl cat "$file"
timeit "granaryctl cat, DRAM warm" $ctl cat "$file"
timeit "libgranary, DRAM warm" $rb "$file"
# Wait for write-behind to finish before restarting.
for i in $(seq 1 600); do
    w=$($ctl stats --json | sed 's/.*"nvme_writes": \([0-9]*\).*/\1/')
    [ "$w" -ge "$((size_mb / 4))" ] && break
    sleep 0.1
done
stop_daemon
start_daemon
drop; timeit "granaryctl cat, NVMe warm" $ctl cat "$file"
stop_daemon
start_daemon
drop; timeit "libgranary, NVMe warm" $rb "$file"
stop_daemon
rm -rf "$work/nvme"
start_daemon
drop; timeit "libgranary, cold" $rb "$file"
stop_daemon

{
    echo "# Read throughput, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "Machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, $(uname -r)." \
         "File: ${size_mb} MiB on local disk (the source). Page cache dropped before cold runs: $([ $can_drop -eq 1 ] && echo yes || echo no)."
    echo
    echo "| case | seconds | GB/s | ratio to plain cat, cold |"
    echo "|---|---|---|---|"
    base=$(sed -n 's/.*"case": "cat, cold".*"seconds": \(.*\)}/\1/p' "$res")
    while IFS= read -r line; do
        c=$(echo "$line" | sed 's/.*"case": "\([^"]*\)".*/\1/')
        s=$(echo "$line" | sed 's/.*"seconds": \(.*\)}/\1/')
        printf '| %s | %.3f | %.2f | %.2fx |\n' "$c" "$s" \
            "$(echo "$size_mb * 1048576 / $s / 1000000000" | bc -l)" "$(echo "$base / $s" | bc -l)"
    done < "$res"
} > "$out/local.md"
echo
cat "$out/local.md"
