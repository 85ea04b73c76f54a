#!/bin/sh
# bench/touch.sh - a fresh process's first pass over cached data against its
# second (issue 14): the first touch of each mapped page of the arena costs a
# page-table entry, so the arena's pages decide how fast a new DataLoader
# worker, cat or fio reads what is already cached.  For each [dram]
# huge_pages setting (off: 4 KiB pages; thp: shmem transparent huge pages,
# shmem_enabled set to advise for the run; hugetlb: vm.nr_hugepages reserved
# for the run) a fresh granaryd caches one file, then fresh processes read
# it twice each with gr_pread (readbench, 8 MiB reads); pread(2) from the
# page cache beside.  The system settings are put back at the end.  Needs
# root for thp and hugetlb (without it they are skipped, and say so).
# Writes $OUT/touch.md (default bench/results/<date>/) and prints it.
#   TOUCH_MB   file size (default 512)   TOUCH_RUNS  fresh processes (3)
set -eu
cd "$(dirname "$0")/.."
mb=${TOUCH_MB:-512}
runs=${TOUCH_RUNS:-3}
out=${OUT:-bench/results/$(date +%Y-%m-%d)}
work=$(pwd)/build/touch-work
thp=/sys/kernel/mm/transparent_hugepage/shmem_enabled
nr=/proc/sys/vm/nr_hugepages
mkdir -p "$out" "$work/src"
old_thp=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp" 2>/dev/null || echo)
old_nr=$(cat "$nr" 2>/dev/null || echo)
gpid=
cleanup() {
    [ -n "$gpid" ] && kill "$gpid" 2> /dev/null && wait "$gpid" 2> /dev/null
    [ -n "$old_thp" ] && echo "$old_thp" > "$thp" 2> /dev/null
    [ -n "$old_nr" ] && echo "$old_nr" > "$nr" 2> /dev/null
    true
}
trap cleanup EXIT INT TERM
f=$work/src/data
[ -f "$f" ] && [ "$(stat -c %s "$f")" -eq $((mb << 20)) ] || head -c $((mb << 20)) /dev/urandom > "$f"
load0=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# run MODE: rows "MODE first second" of GB/s medians, and the arena's pages.
run() {
    mode=$1
    rm -rf "$work/nvme" "$work/sock"
    cat > "$work/g.conf" <<EOF
[daemon]
socket = $work/sock
log_level = warn
[source]
roots = $work/src
chunk_size = 4M
[dram]
capacity = $((mb * 2))M
huge_pages = $mode
[nvme]
path =
[metrics]
listen =
EOF
    build/granaryd --config "$work/g.conf" 2>> "$work/granaryd.log" &
    gpid=$!
    for _ in $(seq 100); do [ -S "$work/sock" ] && break; sleep 0.05; done
    build/granaryctl -s "$work/sock" cat "$f" > /dev/null
    pages=$(build/granaryctl -s "$work/sock" stats --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("%d hugetlb, %d thp segments" % (s["dram_hugetlb_segments"], s["dram_thp_segments"]))')
    : > "$work/runs"
    for _ in $(seq "$runs"); do
        GRANARY_LEASE_CACHE=0 build/bench/readbench -s "$work/sock" "$f" "$f" |
            python3 -c 'import json, sys; print(" ".join(str(json.loads(l)["gb_per_s"]) for l in sys.stdin))' \
            >> "$work/runs"
    done
    first=$(cut -d' ' -f1 "$work/runs" | median)
    second=$(cut -d' ' -f2 "$work/runs" | median)
    echo "$mode $first $second $pages" >> "$work/rows"
    kill "$gpid"
    wait "$gpid" 2> /dev/null || true
    gpid=
}

: > "$work/rows"
run off
if echo advise > "$thp" 2> /dev/null; then
    run thp
    echo "$old_thp" > "$thp"
else
    echo "thp skipped (cannot write $thp)" >> "$work/rows.skip"
fi
need=$(( (mb * 2 * 15 / 16) / 2 + 16 ))   # the arena: fifteen sixteenths of [dram] capacity
if echo "$need" > "$nr" 2> /dev/null && [ "$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)" -ge $((need - 16)) ]; then
    run hugetlb
else
    echo "hugetlb skipped (could not reserve $need pages of 2 MiB)" >> "$work/rows.skip"
fi
echo "$old_nr" > "$nr" 2> /dev/null || true
: > "$work/pc"
for _ in $(seq "$runs"); do
    cat "$f" > /dev/null
    build/bench/readbench --posix "$f" | python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["gb_per_s"])' >> "$work/pc"
done
pc=$(median < "$work/pc")

{
    echo "## A fresh process's first pass over cached data (issue 14)"
    echo
    echo "One $mb MiB file in the DRAM tier; $runs fresh processes each read it twice with \`gr_pread\` (8 MiB reads, \`GRANARY_LEASE_CACHE=0\`), medians; \`pread(2)\` from the page cache beside: $pc GB/s. Load before: $load0. Command: \`bench/touch.sh\`."
    echo
    echo "| huge_pages | arena pages | first pass GB/s | second pass GB/s | first / second | first / page cache |"
    echo "|---|---|---|---|---|---|"
    while read -r mode first second pages; do
        awk -v m="$mode" -v p="$pages" -v a="$first" -v b="$second" -v c="$pc" \
            'BEGIN { printf "| %s | %s | %.2f | %.2f | **%.2fx** | %.2fx |\n", m, p, a, b, a / b, a / c }'
    done < "$work/rows"
    [ -f "$work/rows.skip" ] && sed 's/^/- /' "$work/rows.skip" && rm -f "$work/rows.skip"
} > "$out/touch.md"
cat "$out/touch.md"
