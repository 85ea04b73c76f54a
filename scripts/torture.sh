#!/bin/bash
# scripts/torture.sh - the crash torture (make torture; tests/test_torture.sh
# runs a short form).  Several torture_reader processes read random ranges of
# a dataset through libgranary, checking every byte against the source,
# while granaryd is SIGKILLed at random moments (some during start-up, while
# the NVMe index loads) and restarted, for TORTURE_SECONDS.  After each
# restart, with the readers paused, the whole dataset is read once more with
# granaryctl cat and compared with the source, and the cache must be warm:
# the NVMe index kept what it had before the kill, and the chunks it holds
# are served from it, not the source.  On disk, the tier stays within its
# capacity (du) after every kill.
#
#   TORTURE_SECONDS (180)  how long to keep killing
#   TORTURE_READERS (4)    reader processes
#   GRANARYD               the daemon binary (build/granaryd)
# Prints one "torture: ..." line of figures; exits non-zero on any wrong
# byte, reader failure, cold restart or capacity overrun.
set -u
cd "$(dirname "$0")/.." || exit 2
NAME=torture
. tests/lib.sh
SECS=${TORTURE_SECONDS:-180}
NREADERS=${TORTURE_READERS:-4}
READER=build/tests/torture_reader
CAP=$((128 << 20))
readers=
torture_cleanup() {
    for r in $readers; do kill -CONT "$r" 2>/dev/null; kill "$r" 2>/dev/null; done
    cleanup
}
trap torture_cleanup EXIT INT TERM

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# The dataset: 14 files, ~40 MiB, sizes not multiples of the chunk.
files=
total_chunks=0
for i in $(seq 1 14); do
    size=$(( (RANDOM % 5 + 1) * 1048576 + RANDOM * 7 ))
    head -c "$size" /dev/urandom > "$dir/src/f$i"
    files="$files $dir/src/f$i"
    total_chunks=$((total_chunks + (size + 1048575) / 1048576))
done
# The NVMe tier holds the whole dataset (at most 14 x 6 chunks): the warm
# check below counts on it.  With a tier smaller than the dataset, the
# check's own cat would evict what it reads next (LRU over a cyclic scan)
# and read the source far more than the missing chunks.
write_conf "[nvme]
capacity = 128M
[dram]
capacity = 16M"

# start: the daemon in the background, its pid in $pid; returns when the
# socket answers (restart time in $rt_ms), or 1 after 30 s.
start() {
    t0=$(now_ms)
    $GRANARYD --config "$dir/g.conf" 2>>"$dir/log" &
    pid=$!
    for _ in $(seq 1 3000); do
        if $CTL -s "$dir/sock" stats >/dev/null 2>&1; then
            rt_ms=$(($(now_ms) - t0))
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.01
    done
    return 1
}

crash() {
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
}

start || { echo "FAIL daemon did not start"; tail "$dir/log"; exit 1; }
export GRANARY_TIMEOUT_MS=20000 GRANARY_RECONNECT_MS=30000
reader_secs=$((SECS + 15))
for i in $(seq 1 "$NREADERS"); do
    $READER -s "$reader_secs" -r "$((i * 7919 + $$))" "$dir/sock" $files > "$dir/reader$i.out" 2>&1 &
    readers="$readers $!"
done

warm_src=0 warm_nvme=0 kills=0 startup_kills=0 warm_checks=0 cold=0 cat_bad=0 du_max=0 du_over=0
rts=""
end=$(( $(date +%s) + SECS ))
before_chunks=0
while [ "$(date +%s)" -lt "$end" ]; do
    sleep "$((RANDOM % 20 / 10)).$((RANDOM % 10))"
    # the NVMe index a moment before the kill
    before_chunks=$(stat_of nvme_chunks)
    sleep "0.$((RANDOM % 5))"
    crash
    kills=$((kills + 1))
    du=$(( $(du -sk "$dir/nvme" | cut -f1) * 1024 ))
    [ "$du" -gt "$du_max" ] && du_max=$du
    if [ "$du" -gt "$CAP" ]; then
        echo "FAIL nvme on disk $du > capacity $CAP after kill $kills"
        du_over=$((du_over + 1))
    fi
    if [ $((RANDOM % 4)) -eq 0 ]; then
        # kill it again while it loads its index
        $GRANARYD --config "$dir/g.conf" 2>>"$dir/log" &
        pid=$!
        sleep "0.0$((RANDOM % 10))"
        crash
        kills=$((kills + 1))
        startup_kills=$((startup_kills + 1))
    fi
    if ! start; then
        echo "FAIL daemon did not restart after kill $kills"
        tail -n 20 "$dir/log"
        exit 1
    fi
    rts="$rts $rt_ms"
    # Warm check, readers paused: the index kept its chunks, and they are
    # served from NVMe.
    for r in $readers; do kill -STOP "$r"; done
    after_chunks=$(stat_of nvme_chunks)
    h0=$(stat_of hits_nvme)
    s0=$(stat_of source_reads)
    for f in $files; do
        if ! $CTL -s "$dir/sock" cat "$f" | cmp -s - "$f"; then
            echo "FAIL granaryctl cat $f differs from the source after kill $kills"
            cat_bad=$((cat_bad + 1))
        fi
    done
    h1=$(stat_of hits_nvme)
    s1=$(stat_of source_reads)
    for r in $readers; do kill -CONT "$r"; done
    warm_checks=$((warm_checks + 1))
    # Chunks written after the snapshot may add to after_chunks; none may
    # go missing beyond a few in flight at the kill.  The cat reads from
    # the source only what NVMe does not hold (the readers, between the
    # restart and their pause, may have brought some into DRAM already).
    if [ "$after_chunks" -lt $((before_chunks * 9 / 10)) ] ||
       [ $((s1 - s0)) -gt $((total_chunks - after_chunks + 2)) ]; then
        echo "FAIL cold after kill $kills: nvme chunks $before_chunks before, $after_chunks after;" \
             "the cat read $((s1 - s0)) of $total_chunks chunks from the source"
        cold=$((cold + 1))
    fi
    warm_src=$((warm_src + s1 - s0))
    warm_nvme=$((warm_nvme + h1 - h0))
    last_warm="$before_chunks->$after_chunks chunks kept, $((h1 - h0)) nvme hits, $((s1 - s0)) source reads"
done

reader_fail=0 reads=0 bytes=0 errors=0 wrong=0
for r in $readers; do
    wait "$r" || reader_fail=$((reader_fail + 1))
done
readers=
for i in $(seq 1 "$NREADERS"); do
    line=$(grep '^reads=' "$dir/reader$i.out")
    [ -n "$line" ] || { echo "FAIL reader $i printed no summary:"; cat "$dir/reader$i.out"; reader_fail=$((reader_fail + 1)); continue; }
    eval "$(echo "$line" | sed 's/errnos=.*//; s/\([a-z]*\)=\([0-9]*\)/r_\1=\2;/g')"
    reads=$((reads + r_reads)) bytes=$((bytes + r_bytes)) errors=$((errors + r_errors)) wrong=$((wrong + r_wrong))
    echo "reader $i: $line"
    grep -m3 'WRONG\|SHORT' "$dir/reader$i.out"
done
sorted=$(echo $rts | tr ' ' '\n' | sort -n)
n=$(echo "$sorted" | wc -l)
p50=$(echo "$sorted" | sed -n "$(( (n + 1) / 2 ))p")
max=$(echo "$sorted" | tail -n 1)
csum=$(stat_of nvme_checksum_errors)
echo "torture: ${SECS}s, $kills kills ($startup_kills during start-up), $NREADERS readers," \
     "$reads reads, $bytes bytes verified, wrong bytes $wrong, reader errors $errors," \
     "warm checks $((warm_checks - cold))/$warm_checks (last: $last_warm; over all: $warm_nvme nvme hits," \
     "$warm_src source reads for $((warm_checks * total_chunks)) chunks), cat mismatches $cat_bad," \
     "nvme du max $du_max of $CAP, restart p50 ${p50}ms max ${max}ms" \
     "(~$total_chunks chunks, 1 MiB each), checksum errors since last start $csum"
[ "$wrong" -eq 0 ] && [ "$reader_fail" -eq 0 ] && [ "$cold" -eq 0 ] && [ "$cat_bad" -eq 0 ] &&
    [ "$du_over" -eq 0 ] && [ "$kills" -ge 3 ]
