#!/bin/sh
# bench/hot.sh - the DRAM-tier benchmarks of issue 3, side by side in one run:
#   1. one client reading 4 MiB at a time, bytes already in memory: granary
#      gr_pread, gr_read_ref (summing the bytes, and not touching them),
#      pread(2) from the page cache, memcached and Redis (4 MiB values);
#   2. 4 KiB and 64 KiB reads at random aligned offsets from 1 and 8
#      processes: granary, memcached, Redis (values of that size) and pread.
# Starts its own granaryd, memcached and Redis on Unix sockets under
# build/hot-work/, installs memcached and redis-server (Debian) if missing.
# Writes bench/results/<date>/{hot.jsonl,hot.md} ($HOT_OUT overrides the
# directory) and prints hot.md.
#   HOT_SIZE_MB  file size for scenario 1 (default 256)
#   HOT_SECS     seconds per case and round (default 1)
#   HOT_ROUNDS   rounds over all cases (default 3); the report gives medians
set -eu
cd "$(dirname "$0")/.."
size_mb=${HOT_SIZE_MB:-256}
secs=${HOT_SECS:-1}
rounds=${HOT_ROUNDS:-3}
out=${HOT_OUT:-bench/results/$(date +%Y-%m-%d)}
work=$(pwd)/build/hot-work
load0=$(cut -d' ' -f1-3 /proc/loadavg)

need=
command -v memcached > /dev/null || need="$need memcached"
command -v redis-server > /dev/null || need="$need redis-server"
if [ -n "$need" ]; then
    sudo=
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    echo "hot: installing$need"
    $sudo apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $need > /dev/null
fi
make -s build/granaryd build/bench/hotbench

mkdir -p "$work/src" "$out"
rm -f "$work"/*.sock "$work"/*.log
file=$work/src/hot.bin
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -ne $((size_mb * 1048576)) ]; then
    echo "hot: writing a ${size_mb} MiB test file"
    head -c $((size_mb * 1048576)) /dev/urandom > "$file"
fi
jsonl=$out/hot.jsonl
md=$out/hot.md
: > "$jsonl"

cat > "$work/g.conf" <<CONF
[daemon]
socket = $work/gr.sock
io_threads = 2
log_level = warn
max_clients = 64
[source]
roots = $work/src
chunk_size = 4M
[dram]
capacity = $((size_mb * 2 + 64))M
[nvme]
path =
[metrics]
listen =
CONF

gpid= mpid= rpid=
cleanup() {
    for p in $gpid $mpid $rpid; do kill "$p" 2>/dev/null || true; done
    for p in $gpid $mpid $rpid; do wait "$p" 2>/dev/null || true; done
    gpid= mpid= rpid=
}
trap cleanup EXIT
trap 'cleanup; exit 1' INT TERM
wait_sock() {   # wait_sock PATH PID NAME
    i=0
    while [ ! -S "$1" ]; do
        if ! kill -0 "$2" 2>/dev/null || [ $i -ge 500 ]; then
            echo "hot: $3 did not start (log: $work/$3.log)" >&2
            exit 1
        fi
        sleep 0.02
        i=$((i + 1))
    done
}

build/granaryd --config "$work/g.conf" 2> "$work/granaryd.log" &
gpid=$!
# 4 MiB values need an item limit above 4 MiB: the item header and key count too.
memcached -s "$work/mc.sock" -I 5m -m $((size_mb * 2 + 512)) -t 2 -u "$(id -un)" \
    > "$work/memcached.log" 2>&1 &
mpid=$!
redis-server --unixsocket "$work/redis.sock" --port 0 --save '' --appendonly no \
    --dir "$work" --logfile "$work/redis.log" > /dev/null 2>&1 &
rpid=$!
wait_sock "$work/gr.sock" "$gpid" granaryd
wait_sock "$work/mc.sock" "$mpid" memcached
wait_sock "$work/redis.sock" "$rpid" redis

hb=build/bench/hotbench
sock_of() {
    case $1 in
    memcached) echo "$work/mc.sock" ;;
    redis) echo "$work/redis.sock" ;;
    *) echo "$work/gr.sock" ;;
    esac
}
run() {   # run SYS SCENARIO ARGS...
    sys=$1
    scen=$2
    shift 2
    if ! line=$($hb run --sys "$sys" -s "$(sock_of "$sys")" --file "$file" --secs "$secs" \
        --scenario "$scen" "$@"); then
        for p in "granaryd $gpid" "memcached $mpid" "redis $rpid"; do
            set -- $p
            if ! kill -0 "$2" 2>/dev/null; then
                st=0
                wait "$2" || st=$?
                echo "hot: $1 died (wait status $st; log in $work)" >&2
            fi
        done
        exit 1
    fi
    echo "$line" >> "$jsonl"
    echo "$line" | sed 's/.*"label": "\([^"]*\)".*"size": \([0-9]*\), "procs": \([0-9]*\).*"ops_per_s": \([0-9.]*\), "GBps": \([0-9.]*\), "p50_us": \([0-9.]*\), "p99_us": \([0-9.]*\).*/  \1, \2 B x \3: \4 ops\/s, \5 GB\/s, p50 \6 us, p99 \7 us/'
}

cat "$file" > /dev/null             # into the page cache
echo "hot: loading memcached and redis (4 MiB values, 4096 of 4 KiB, 4096 of 64 KiB)"
for s in memcached redis; do
    $hb load --sys $s -s "$(sock_of $s)" --file "$file" --size 4M
    for size in 4K 64K; do
        $hb load --sys $s -s "$(sock_of $s)" --file "$file" --size $size --count 4096
    done
done
# Rounds interleave the cases, so that load from elsewhere on the machine
# falls on every system alike; the report takes medians over rounds.
for round in $(seq 1 "$rounds"); do
    echo "hot: round $round of $rounds, scenario 1: 4 MiB reads, one client, ${secs} s each"
    for s in gr ref ref-notouch pread memcached redis; do
        run $s hot4m --size 4M --pattern seq --round "$round"
    done
    echo "hot: round $round of $rounds, scenario 2: small random reads, ${secs} s each"
    for size in 4K 64K; do
        for procs in 1 8; do
            for s in gr memcached redis pread; do
                run $s rand --size $size --pattern rand --procs $procs --count 4096 --round "$round"
            done
        done
    done
done
cleanup

{
    echo "# DRAM-tier reads, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "Machine: $(nproc) cores ($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1))," \
        "$(free -g | awk '/Mem:/ {print $2}') GiB RAM, Linux $(uname -r)." \
        "Granary $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo '+changes')," \
        "$(memcached -V), Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')." \
        "Load average (1/5/15 min) before the run: $load0, after: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Setup: everything on Unix sockets on this machine; granaryd chunk_size 4M, DRAM tier" \
        "$((size_mb * 2 + 64)) MiB, no NVMe tier, io_threads 2; memcached -I 5m -t 2; redis-server" \
        "--save '' --appendonly no. File ${size_mb} MiB of random bytes, in the page cache and in" \
        "granaryd's DRAM before each measurement (each process first reads and checks the bytes;" \
        "a row marked NOT ALL FROM DRAM saw granary misses). ${secs} s per case and round;" \
        "latency is per operation, p50/p99 over all operations of all processes of a round."
    echo "Key-value servers hold the same bytes: 4 MiB values for scenario 1, 4096 values of the" \
        "read size for scenario 2 (granary and pread read random aligned offsets of the first" \
        "4096 pieces too). Clients: hand-written (memcached text protocol, RESP), value received" \
        "straight into the caller's buffer. Command: bench/hot.sh (HOT_SIZE_MB=$size_mb HOT_SECS=$secs HOT_ROUNDS=$rounds)."
    echo
    $hb report "$jsonl"
    echo
    echo "Raw: hot.jsonl beside this file."
} > "$md"
echo
cat "$md"
