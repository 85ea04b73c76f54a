#!/bin/bash
# scripts/soak.sh - the load soak (make soak; tests/test_soak.sh runs a
# short form).  For SOAK_SECONDS, at once:
#   - SOAK_GOOD (4) well-behaved readers (torture_reader, every byte checked),
#   - a swarm of SOAK_THREADS (200) connections reading small ranges,
#   - SOAK_SLOW (50) connections that pipeline reads and never read a reply,
#   - badly behaved readers (torture_reader -z: refs never released,
#     connections dropped) SIGKILLed every fraction of a second, mid-request
#     and mid-lease.
# Samples the daemon's RSS and open fds; at the end (all clients gone) the
# daemon must hold no connection, lease or leased byte, its fd count must be
# back to where it started, its RSS bounded, and every good reader must have
# read right bytes with no single read slower than SOAK_MAX_READ_MS (10000).
set -u
cd "$(dirname "$0")/.." || exit 2
NAME=soak
. tests/lib.sh
SECS=${SOAK_SECONDS:-300}
NGOOD=${SOAK_GOOD:-4}
NTHREADS=${SOAK_THREADS:-200}
NSLOW=${SOAK_SLOW:-50}
MAXREAD=${SOAK_MAX_READ_MS:-10000}
RSS_LIMIT_KB=${SOAK_RSS_LIMIT_KB:-$((512 * 1024))}
kids=
soak_cleanup() {
    for k in $kids; do kill -9 "$k" 2>/dev/null; done
    cleanup
}
trap soak_cleanup EXIT INT TERM

files=
for i in $(seq 1 16); do
    head -c $(( (RANDOM % 4 + 1) * 1048576 + RANDOM )) /dev/urandom > "$dir/src/s$i"
    files="$files $dir/src/s$i"
done
write_conf "[dram]
capacity = 32M
[daemon]
max_clients = 2048"
start_daemon
sleep 0.3
# The daemon's fds other than the NVMe tier's files: RocksDB opens and
# closes SST, WAL and log files on its own schedule, which is no leak.
fds() {
    n=0
    for f in /proc/$pid/fd/*; do
        case "$(readlink "$f")" in "$dir"/nvme/*) ;; *) n=$((n + 1)) ;; esac
    done
    echo $n
}
fd0=$(fds)
rss() { awk '/^VmRSS/ {print $2}' /proc/$pid/status; }
rss0=$(rss)

export GRANARY_TIMEOUT_MS=30000
for i in $(seq 1 "$NGOOD"); do
    build/tests/torture_reader -s "$SECS" -m 1048576 "$dir/sock" $files > "$dir/good$i.out" 2>&1 &
    good="${good:-} $!"
done
build/tests/soak_swarm -t "$NTHREADS" -S "$NSLOW" -s "$SECS" "$dir/sock" $files > "$dir/swarm.out" 2>&1 &
swarm=$!
kids="$good $swarm"

end=$(( $(date +%s) + SECS ))
peak_rss=$rss0 peak_fd=$fd0 killed=0 peak_conns=0
while [ "$(date +%s)" -lt "$end" ]; do
    bad=
    for _ in 1 2 3 4 5; do
        build/tests/torture_reader -z -s 30 -m 4194304 "$dir/sock" $files >/dev/null 2>&1 &
        bad="$bad $!"
    done
    sleep "0.$((RANDOM % 8 + 1))"
    for b in $bad; do kill -9 "$b" 2>/dev/null; wait "$b" 2>/dev/null; killed=$((killed + 1)); done
    r=$(rss); f=$(ls /proc/$pid/fd | wc -l); c=$(stat_of connections)
    [ "$r" -gt "$peak_rss" ] && peak_rss=$r
    [ "$f" -gt "$peak_fd" ] && peak_fd=$f
    [ "${c:-0}" -gt "$peak_conns" ] && peak_conns=$c
done

good_fail=0 gbytes=0 gmax=0
for g in $good; do wait "$g" || good_fail=$((good_fail + 1)); done
wait "$swarm"; swarm_rc=$?
kids=
for i in $(seq 1 "$NGOOD"); do
    line=$(grep '^reads=' "$dir/good$i.out")
    echo "good reader $i: $line"
    b=$(echo "$line" | sed -n 's/.*bytes=\([0-9]*\).*/\1/p')
    m=$(echo "$line" | sed -n 's/.*max_ms=\([0-9]*\).*/\1/p')
    w=$(echo "$line" | sed -n 's/.*wrong=\([0-9]*\).*/\1/p')
    [ -z "$b" ] && good_fail=$((good_fail + 1)) && continue
    gbytes=$((gbytes + b))
    [ "$m" -gt "$gmax" ] && gmax=$m
    [ "$w" -eq 0 ] || good_fail=$((good_fail + 1))
done
cat "$dir/swarm.out"
# everything gone: the daemon must let go of it all
for _ in $(seq 1 100); do
    [ "$(stat_of connections)" = 1 ] && [ "$(stat_of leases_active)" = 0 ] && break
    sleep 0.1
done
sleep 0.5
fd1=$(fds)
cached_fd=$(stat_of source_fds_cached)
rss1=$(rss)
echo "soak: ${SECS}s, $NGOOD good readers ($gbytes bytes, $((gbytes / SECS / 1048576)) MiB/s together," \
     "slowest read ${gmax} ms), swarm of $NTHREADS + $NSLOW slow, $killed clients SIGKILLed," \
     "peak connections $peak_conns; daemon RSS ${rss0} kB at start, peak ${peak_rss} kB, ${rss1} kB at end;" \
     "fds $fd0 at start, peak $peak_fd, $fd1 at end (${cached_fd:-?} of them held on the source: [source] fd_cache and the roots)"
check "good readers: right bytes, all finished" [ "$good_fail" -eq 0 ]
check "swarm: right bytes" [ "$swarm_rc" -eq 0 ]
check "no read of a good reader took over $MAXREAD ms" [ "$gmax" -le "$MAXREAD" ]
check "no connection left (but the stats query itself)" [ "$(stat_of connections)" = 1 ]
check "no lease left" [ "$(stat_of leases_active)" = 0 ]
check "no leased byte left" [ "$(stat_of leased_bytes)" = 0 ]
check "fds back to the start but those held on the source ($fd0 + ${cached_fd:-?} -> $fd1)" \
      [ "$fd1" -le "$((fd0 + ${cached_fd:-0}))" ]
check "peak RSS under $RSS_LIMIT_KB kB" [ "$peak_rss" -le "$RSS_LIMIT_KB" ]
check "daemon alive" kill -0 "$pid"
[ $fails -eq 0 ]
