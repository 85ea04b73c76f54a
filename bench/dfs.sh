#!/bin/bash
# bench/dfs.sh - the benchmarks on a real DFS: MooseFS from scripts/dfs.sh,
# bandwidth-capped to behave like a network filesystem, read by
# build/bench/dfsbench through each thing a user could put in front of it,
# side by side in one run:
#   dfs        straight from the mount (mfscachemode=DIRECT), same parallelism
#   staging    copy the dataset to local disk first (copy time counted), then read
#   page cache the default mount (kernel page cache), cold then warm
#   memcached  read-through chunk cache (same chunk size as granaryd), Unix socket
#   redis      the same with Redis
#   granary    granaryd with [source] roots on the DIRECT mount
# Scenarios: large sequential files, 100 KB samples, random ranges, the
# samples as a user (uid 65534, with access proofs) in a shuffled order,
# reader processes 1/2/4/8, shuffled epochs at cache sizes 0.5x/1.1x/2x the
# data, and a training loop's stall fraction.
#
# Appends JSON lines to $OUT/results.jsonl (one per measurement: the
# scenario, system, phase, dfsbench's figures, bytes the DFS sent, and
# granaryd's counters before and after).  bench/report.py turns them into
# summary.md and plots.  Sizes: BENCH_MODE=quick (default) or full.
# Needs root (namespaces, FUSE, drop_caches); installs what it needs.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
mode=${BENCH_MODE:-quick}
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)}
RATE=${BENCH_DFS_RATE:-1600mbit}
CHUNK=1M
PROCS=2                                 # the "same parallelism" of every scenario
case $mode in
quick) NLARGE=4 LARGE_MB=48 NSAMPLES=1500 NSHARDS=160 RAND_OPS=1500 READERS="1 2 4 8" EPOCHS=3 ;;
full) NLARGE=8 LARGE_MB=256 NSAMPLES=10000 NSHARDS=1024 RAND_OPS=10000 READERS="1 2 4 8 16" EPOCHS=4 ;;
*) echo "bench: BENCH_MODE is quick or full" >&2; exit 2 ;;
esac
SAMPLE_BYTES=100000
TRAIN_COMPUTE_US=${BENCH_COMPUTE_US:-1000}
POLICIES=${BENCH_POLICIES:-lru epoch}

export DFS_DIR=${DFS_DIR:-/tmp/granary-dfs} DFS_NAME=${DFS_NAME:-grdfs}
DFS=scripts/dfs.sh
mnt=$DFS_DIR/mnt
mntc=$DFS_DIR/mnt-cached
work=$top/build/bench-dfs
res=$OUT/results.jsonl
mkdir -p "$OUT" "$work"
DB=build/bench/dfsbench
CTL=build/granaryctl

log() { echo "bench: $*" >&2; }

# ---- what must be installed ----
need=
command -v memcached > /dev/null || need="$need memcached"
command -v redis-server > /dev/null || need="$need redis-server"
command -v gnuplot > /dev/null || need="$need gnuplot-nox"
if [ -n "$need" ]; then
    log "installing$need"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $need > /dev/null
fi
if ! why=$($DFS probe); then
    log "no DFS benchmarks: $why"
    echo "{\"scenario\": \"skipped\", \"why\": \"$why\"}" >> "$res"
    exit 0
fi

# ---- huge pages for the arena, as man granary.conf(5) tells operators ----
# A fresh process pays a page-table entry the first time it touches each
# page granaryd's arena shares with it (about 2.8 us per 4 KiB page on this
# VM: a fresh reader of warm 100 KB samples ran at 110 us a file, against
# 40 us once mapped).  [dram] huge_pages = auto takes transparent huge pages
# where shmem_enabled allows advised mappings, so the run sets "advise"
# (BENCH_THP=0 leaves the machine's setting) and puts it back on exit; only
# the arena's mappings ask, so no other system's row changes.
thp=/sys/kernel/mm/transparent_hugepage/shmem_enabled
old_thp=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp" 2> /dev/null || true)
if [ "${BENCH_THP:-1}" = 1 ] && [ -w "$thp" ]; then
    case $old_thp in never|deny) echo advise > "$thp" ;; esac
fi
thp_now=$(sed 's/.*\[\(.*\)\].*/\1/' "$thp" 2> /dev/null || echo unknown)

# ---- processes this script starts, stopped on exit ----
gpid= mpid= rpid= dfs_up=0
stop_servers() {
    local p
    for p in $gpid $mpid $rpid; do kill "$p" 2> /dev/null || true; done
    for p in $gpid $mpid $rpid; do wait "$p" 2> /dev/null || true; done
    gpid= mpid= rpid=
}
cleanup() {
    stop_servers
    [ $dfs_up -eq 1 ] && $DFS down > /dev/null 2>&1
    dfs_up=0
    if [ -n "$old_thp" ] && [ "$old_thp" != "$thp_now" ]; then echo "$old_thp" > "$thp" 2> /dev/null; fi
    true
}
trap cleanup EXIT
trap 'exit 1' INT TERM

wait_sock() {   # wait_sock PATH PID NAME
    local i=0
    while [ ! -S "$1" ]; do
        if ! kill -0 "$2" 2> /dev/null || [ $i -ge 500 ]; then
            log "$3 did not start (log in $work)"
            exit 1
        fi
        sleep 0.02
        i=$((i + 1))
    done
}

# start_granary DRAM NVME [POLICY] [ACCESS_CHECK]: a fresh granaryd with an
# empty NVMe tier.
start_granary() {
    [ -n "$gpid" ] && { kill "$gpid"; wait "$gpid" || true; gpid=; }
    rm -rf "$work/nvme" "$work/gr.sock"
    cat > "$work/g.conf" <<EOF
[daemon]
socket = $work/gr.sock
socket_mode = 0666
access_check = ${4:-fd}
io_threads = 16
log_level = warn
max_clients = 256
[source]
roots = $mnt
chunk_size = $CHUNK
attr_ttl = 600
[dram]
capacity = $1
policy = ${3:-lru}
[nvme]
path = $work/nvme
capacity = $2
policy = ${3:-lru}
[metrics]
listen =
EOF
    build/granaryd --config "$work/g.conf" 2>> "$work/granaryd.log" &
    gpid=$!
    wait_sock "$work/gr.sock" "$gpid" granaryd
}

# start_kv MEGABYTES: fresh (empty) memcached and Redis of that memory limit.
start_kv() {
    [ -n "$mpid" ] && { kill "$mpid" "$rpid"; wait "$mpid" "$rpid" || true; mpid= rpid=; }
    rm -f "$work/mc.sock" "$work/redis.sock"
    # -I 2m: a 1 MiB chunk plus the item header must fit one item.
    memcached -s "$work/mc.sock" -m "$1" -I 2m -t 2 -u root > "$work/memcached.log" 2>&1 &
    mpid=$!
    redis-server --unixsocket "$work/redis.sock" --port 0 --save '' --appendonly no \
        --maxmemory "${1}mb" --maxmemory-policy allkeys-lru \
        --dir "$work" --logfile "$work/redis.log" > /dev/null 2>&1 &
    rpid=$!
    wait_sock "$work/mc.sock" "$mpid" memcached
    wait_sock "$work/redis.sock" "$rpid" redis
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
gr_stats() { if [ -n "$gpid" ]; then $CTL -s "$work/gr.sock" stats --json; else echo '{}'; fi; }

# measure SCENARIO SYSTEM PHASE EXTRA_JSON -- VERB DFSBENCH_OPTIONS...
# One dfsbench run; its JSON line, with the scenario, the system, the
# phase, the bytes the DFS sent meanwhile and granaryd's counters before and
# after, goes to results.jsonl.  EXTRA_JSON ("" or '"key": value, ...') is
# added as is.
measure() {
    local scen=$1 sys=$2 phase=$3 extra=$4 verb n0 n1 g0 g1 line
    shift 5
    verb=$1
    shift
    case $sys in
    granary*) set -- --sys granary -s "$work/gr.sock" "$@" ;;
    memcached|redis) set -- --sys "$sys" -s "$(kvsock "$sys")" "$@" ;;
    *) set -- --sys file "$@" ;;
    esac
    g0=$(gr_stats)
    n0=$($DFS netbytes)
    if ! line=$(${BENCH_AS:-} $DB "$verb" "$@"); then
        log "dfsbench failed: $scen, $sys, $phase"
        exit 1
    fi
    n1=$($DFS netbytes)
    g1=$(gr_stats)
    line="{\"scenario\": \"$scen\", \"system\": \"$sys\", \"phase\": \"$phase\", ${extra:+$extra, }\"dfs_bytes\": $((n1 - n0)), ${line#\{}"
    line="${line%\}}, \"gr_before\": $g0, \"gr_after\": $g1}"
    echo "$line" >> "$res"
    printf 'bench: %-8s %-16s %-8s %s\n' "$scen" "$sys" "$phase" \
        "$(echo "$line" | sed -n 's/.*"MBps": \([0-9.]*\).*"p50_us": \([0-9.]*\), "p99_us": \([0-9.]*\).*/\1 MB\/s, p50 \2 us, p99 \3 us/p')" >&2
}
kvsock() { if [ "$1" = redis ]; then echo "$work/redis.sock"; else echo "$work/mc.sock"; fi; }

# mread|mtrain SCENARIO SYSTEM PHASE EXTRA_JSON -- DFSBENCH_OPTIONS...
mread() { local s=$1 y=$2 p=$3 e=$4; shift 5; measure "$s" "$y" "$p" "$e" -- read "$@"; }
mtrain() { local s=$1 y=$2 p=$3 e=$4; shift 5; measure "$s" "$y" "$p" "$e" -- train "$@"; }

# ---- the DFS and the dataset ----
$DFS up
dfs_up=1
$DFS shape off
ds=$mnt/granary-bench
mkdir -p "$ds/large" "$ds/samples" "$ds/shards"
gen() {   # gen DIR COUNT BYTES: random files f00000..., kept from an earlier run if the same
    local d=$1 n=$2 b=$3 i f
    for i in $(seq 0 $((n - 1))); do
        f=$(printf '%s/f%05d' "$d" "$i")
        [ -f "$f" ] && [ "$(stat -c %s "$f")" -eq "$b" ] && continue
        head -c "$b" /dev/urandom > "$f"
    done
}
log "dataset on the DFS ($mode): $NLARGE x ${LARGE_MB} MiB, $NSAMPLES x 100 KB, $NSHARDS x 1 MiB"
gen "$ds/large" "$NLARGE" $((LARGE_MB << 20))
gen "$ds/samples" "$NSAMPLES" $SAMPLE_BYTES
gen "$ds/shards" "$NSHARDS" $((1 << 20))
sync
$DFS shape "$RATE"

# Lists of paths: the DIRECT mount, the cached mount, a staged local copy.
for set in large samples shards; do
    n=$(ls "$ds/$set" | wc -l)
    ls "$ds/$set" | sed "s|^|$ds/$set/|" | head -n "$n" > "$work/$set.dfs"
    sed "s|^$mnt/|$mntc/|" "$work/$set.dfs" > "$work/$set.cached"
    sed "s|^$mnt/|$work/stage/|" "$work/$set.dfs" > "$work/$set.staged"
done
large_bytes=$((NLARGE * (LARGE_MB << 20)))
samples_bytes=$((NSAMPLES * SAMPLE_BYTES))
shards_bytes=$((NSHARDS << 20))
echo "{\"scenario\": \"setup\", \"mode\": \"$mode\", \"rate\": \"$RATE\", \"chunk\": \"$CHUNK\", \"procs\": $PROCS, \"large\": \"$NLARGE x ${LARGE_MB} MiB\", \"samples\": \"$NSAMPLES x $SAMPLE_BYTES B\", \"shards\": \"$NSHARDS x 1 MiB\", \"compute_us\": $TRAIN_COMPUTE_US, \"shmem_thp\": \"$thp_now\", \"moosefs\": \"$(dpkg-query -W -f='${Version}' moosefs-master)\", \"memcached\": \"$(memcached -V)\", \"redis\": \"$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')\"}" >> "$res"

# Big enough for every throughput scenario: nothing is evicted there.
big_mb=$(( (large_bytes + samples_bytes + shards_bytes) / 1048576 + 256 ))

# stage SET: copy the set from the DIRECT mount to local disk, timed (a
# measurement of its own: phase "copy"), then reading it is "staged".
stage() {
    local set=$1 t0 t1 n0 n1 bytes
    rm -rf "$work/stage"
    mkdir -p "$work/stage/granary-bench"
    drop_caches
    n0=$($DFS netbytes)
    t0=$(date +%s.%N)
    cp -r "$ds/$set" "$work/stage/granary-bench/"
    sync
    t1=$(date +%s.%N)
    n1=$($DFS netbytes)
    bytes=$(du -sb "$work/stage/granary-bench/$set" | cut -f1)
    echo "{\"scenario\": \"$2\", \"system\": \"staging\", \"phase\": \"copy\", \"dfs_bytes\": $((n1 - n0)), \"bytes\": $bytes, \"seconds\": $(echo "$t1 - $t0" | bc -l), \"procs\": 1}" >> "$res"
}

# scenario SCEN SET ARGS...: every system on one set, cold then warm.
scenario() {
    local scen=$1 set=$2
    shift 2
    log "scenario $scen"
    drop_caches
    mread "$scen" dfs cold "" -- --list "$work/$set.dfs" "$@"
    stage "$set" "$scen"
    mread "$scen" staging read "" -- --list "$work/$set.staged" "$@"
    drop_caches
    mread "$scen" "page cache" cold "" -- --list "$work/$set.cached" "$@"
    mread "$scen" "page cache" warm "" -- --list "$work/$set.cached" "$@"
    start_kv "$big_mb"
    for kvs in memcached redis; do
        drop_caches
        mread "$scen" $kvs cold "" -- --list "$work/$set.dfs" --chunk $CHUNK "$@"
        mread "$scen" $kvs warm "" -- --list "$work/$set.dfs" --chunk $CHUNK "$@"
    done
    start_granary "${big_mb}M" "$((big_mb * 2))M"
    drop_caches
    mread "$scen" granary cold "" -- --list "$work/$set.dfs" "$@"
    mread "$scen" granary warm "" -- --list "$work/$set.dfs" "$@"
    stop_servers
}

scenario large large --procs $PROCS --pattern whole --block 4M
scenario samples samples --procs $PROCS --pattern whole --block 4M
scenario random large --procs $PROCS --pattern rand --block 64K --ops "$RAND_OPS" --seed 7

# ---- the samples as a user would read them: not root (so with access
# proofs, the default access_check = fd), in a shuffled order (no
# read-ahead across files can guess it), cold then warm ----
if runuser -u nobody -- test -x "$DB" -a -r "$work/samples.dfs" 2> /dev/null; then
    log "scenario user"
    chmod -R a+rX "$ds/samples"
    drop_caches
    BENCH_AS="runuser -u nobody --" mread user dfs cold "" -- --list "$work/samples.dfs" \
        --procs $PROCS --order shuffle --seed 5
    start_granary "${big_mb}M" "$((big_mb * 2))M"
    drop_caches
    for ph in cold warm; do
        BENCH_AS="runuser -u nobody --" mread user granary $ph "" -- --list "$work/samples.dfs" \
            --procs $PROCS --order shuffle --seed 5
    done
    # What an operator can do for them: register the directory (a manifest,
    # access_check = judge), so that no open asks the DFS for a proof.
    start_granary "${big_mb}M" "$((big_mb * 2))M" lru judge
    $CTL -s "$work/gr.sock" dataset add "$ds/samples" > /dev/null
    until $CTL -s "$work/gr.sock" dataset list | grep -q ': ready,'; do sleep 0.05; done
    drop_caches
    for ph in cold warm; do
        BENCH_AS="runuser -u nobody --" mread user "granary dataset" $ph "" -- \
            --list "$work/samples.dfs" --procs $PROCS --order shuffle --seed 5
    done
    stop_servers
else
    log "scenario user skipped: nobody cannot run $DB or read $work/samples.dfs"
fi

# ---- reader processes: the samples, warm where a cache is warm ----
log "scenario readers"
stage samples readers
start_kv "$big_mb"
start_granary "${big_mb}M" "$((big_mb * 2))M"
xargs cat < "$work/samples.cached" > /dev/null      # the page cache, warm
for sys in memcached redis; do                       # every cache filled once
    $DB read --sys $sys -s "$(kvsock $sys)" --list "$work/samples.dfs" --chunk $CHUNK --procs 4 > /dev/null
done
$DB read --sys granary -s "$work/gr.sock" --list "$work/samples.dfs" --procs 4 > /dev/null
for n in $READERS; do
    for sys in dfs staging "page cache" memcached redis granary; do
        case $sys in
        dfs) l=$work/samples.dfs ;;
        staging) l=$work/samples.staged ;;
        "page cache") l=$work/samples.cached ;;
        *) l=$work/samples.dfs ;;
        esac
        mread readers "$sys" warm "" -- --list "$l" --procs "$n" --chunk $CHUNK --order shuffle --seed "$n"
    done
done
stop_servers

# ---- shuffled epochs at cache sizes of 0.5x, 1.1x and 2x the data ----
log "scenario epochs"
shards_mb=$((shards_bytes / 1048576))
drop_caches
mread epochs dfs "epoch 1" '"cache_x": 0' -- --list "$work/shards.dfs" --procs $PROCS --order shuffle --seed 1
for x in 0.5 1.1 2; do
    c_mb=$(echo "$shards_mb * $x / 1" | bc)
    start_kv "$c_mb"
    for kvs in memcached redis; do
        for e in $(seq 1 "$EPOCHS"); do
            mread epochs $kvs "epoch $e" "\"cache_x\": $x, \"cache_mb\": $c_mb, \"epoch\": $e" -- \
                --list "$work/shards.dfs" --procs $PROCS --order shuffle --seed "$e" --chunk $CHUNK
        done
    done
    for pol in $POLICIES; do
        # The tiers are inclusive (every chunk is written behind to NVMe), so
        # the bytes held are the NVMe capacity; DRAM holds a quarter of it.
        start_granary "$((c_mb / 4 > 16 ? c_mb / 4 : 16))M" "${c_mb}M" "$pol"
        for e in $(seq 1 "$EPOCHS"); do
            mread epochs "granary $pol" "epoch $e" "\"cache_x\": $x, \"cache_mb\": $c_mb, \"epoch\": $e, \"policy\": \"$pol\"" -- \
                --list "$work/shards.dfs" --procs $PROCS --order shuffle --seed "$e"
        done
    done
    stop_servers
done
rm -rf "$work/nvme"

# ---- the training loop: stall fraction per epoch ----
log "scenario train (compute ${TRAIN_COMPUTE_US} us per sample)"
train_sys() {   # train_sys SYSTEM LIST [--hints]
    local sys=$1 l=$2 e
    shift 2
    for e in $(seq 1 "$EPOCHS"); do
        mtrain train "$sys" "epoch $e" "\"epoch\": $e" -- --list "$l" --procs $PROCS \
            --order shuffle --seed "$e" --compute-us "$TRAIN_COMPUTE_US" "$@"
    done
}
drop_caches
train_sys dfs "$work/samples.dfs"
drop_caches
train_sys "page cache" "$work/samples.cached"
start_granary "${big_mb}M" "$((big_mb * 2))M"
drop_caches
train_sys "granary" "$work/samples.dfs"
start_granary "${big_mb}M" "$((big_mb * 2))M"
drop_caches
train_sys "granary + hints" "$work/samples.dfs" --hints
stop_servers

rm -rf "$work/stage"
cleanup
log "DFS benchmarks done: $res"
