#!/bin/sh
# The generation table of the arena's segments (HELLO feature GENS, what
# libgranary's soft entries rest on) as a client written from
# proto/PROTOCOL.md alone sees it (tests/gens_probe.py), against a real
# granaryd with no NVMe tier (no write-behind holding a chunk's block past
# its drop) on 4 KiB pages, THP and, where the machine has a hugetlb pool,
# hugetlb segments.  The daemon keeps serving afterwards.
cd "$(dirname "$0")/.."
NAME=gens
. tests/lib.sh
mkdir -p "$dir/src"
head -c $((3 * 65536 + 1000)) /dev/urandom > "$dir/src/f"
pool=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
for pages in off thp hugetlb; do
    if [ $pages = hugetlb ] && [ "$pool" -lt 4 ]; then
        echo "SKIP gens on hugetlb segments: vm.nr_hugepages is $pool (needs 4 free pages)"
        continue
    fi
    write_conf "[source]
chunk_size = 64K
[dram]
capacity = 4M
huge_pages = $pages
[nvme]
path ="
    start_daemon
    /usr/bin/python3 tests/gens_probe.py "$dir/sock" "$dir/src/f" > "$dir/probe" 2>&1
    rc=$?
    sed "s/^/  $pages: /" "$dir/probe"
    check "huge_pages = $pages: the table as the spec says (gens_probe.py)" test $rc -eq 0
    $CTL -s "$dir/sock" cat "$dir/src/f" | cmp -s - "$dir/src/f"
    check "huge_pages = $pages: the daemon still serves" test $? -eq 0
    kill "$pid"
    wait "$pid"
    pid=
    rm -f "$dir/sock"
done
[ $fails -eq 0 ]
