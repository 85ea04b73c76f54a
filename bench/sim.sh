#!/bin/sh
# The policy simulator's table for the shipped patterns (bench/SIMULATE.md):
# shuffled and same-order epochs at dataset = 0.5x, 1.1x and 2x the cache, a
# Zipf hot set, and a scan mixed with a hot set; then the IO-pattern
# classifier over the same traces and its CPU cost per request.  Writes
# bench/results/<date>/sim.md ($OUT overrides the directory) and prints it.
set -eu
cd "$(dirname "$0")/.."
B=build/bench
out=${OUT:-bench/results/$(date +%Y-%m-%d)}
tmp=build/bench-work/traces
mkdir -p "$out" "$tmp"
$B/tracegen epochs --items 50000 --epochs 4 --seed 1 > "$tmp/same.txt"
$B/tracegen epochs --items 50000 --epochs 4 --shuffle --seed 1 > "$tmp/shuf.txt"
$B/tracegen zipf --items 50000 --accesses 500000 --alpha 1.0 --seed 1 > "$tmp/zipf.txt"
$B/tracegen scanmix --hot 2000 --scan 18000 --accesses 500000 --seed 1 > "$tmp/scan.txt"
{
    echo "# Eviction policies, simulated ($(date -u +%Y-%m-%dT%H:%MZ))"
    echo
    echo "Hit ratios; epoch traces per epoch after the first; sizes are dataset/cache (D/C)."
    echo "Commands: bench/sim.sh (tracegen + simulate, see bench/SIMULATE.md)."
    echo
    echo "## Same-order epochs, 50k items"
    echo '```'
    $B/simulate --sizes 0.5,1.1,2 "$tmp/same.txt"
    echo '```'
    echo "## Shuffled epochs, 50k items"
    echo '```'
    $B/simulate --sizes 0.5,1.1,2 "$tmp/shuf.txt"
    echo '```'
    echo "## Zipf a=1.0 (embedding table), C = D/10"
    echo '```'
    $B/simulate --sizes 10 --warmup 50000 "$tmp/zipf.txt"
    echo '```'
    echo "## 50% hot set + 50% scan, C = D/5"
    echo '```'
    $B/simulate --sizes 5 --warmup 50000 "$tmp/scan.txt"
    echo '```'
    echo "## The IO-pattern classifier on these traces (bench/analyze: verdict, replay, CPU cost)"
    echo
    echo "Cost per request of daemon/analysis/ on one core (whole-file reads: its dearest case);"
    echo "compare with the daemon's own CPU per request (about 9 us for a 4 KiB DRAM hit, one client)."
    echo '```'
    for t in same shuf zipf scan; do
        echo "# $t"
        $B/analyze --ratio 10 --bench "$tmp/$t.txt"
    done
    echo '```'
} > "$out/sim.md"
cat "$out/sim.md"
