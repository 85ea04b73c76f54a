#!/bin/sh
# bench/peer.sh - the peer cache (issue 17): epoch time and DFS bytes of a
# shuffled multi-epoch read on a bandwidth-capped MooseFS (scripts/dfs.sh up
# $PEER_DFS_RATE, default 400mbit, about 48 MB/s), three ways:
#   1 node             one granaryd reads the whole dataset each epoch
#   3 nodes, peer      three granaryd, each in its own network namespace
#                      (scripts/peernet.sh), one [peer] cache; each epoch
#                      every node reads a third of a fresh shuffle, the
#                      three at once
#   3 nodes, alone     the same three with the peer cache off: each node
#                      reads the DFS for whatever its own DRAM lacks
# Readers are md5sum under the LD_PRELOAD shim, checked byte-exact against
# sums of the DFS read directly.  DFS bytes are the daemons'
# source_bytes_read; the DFS's network counter (dfs.sh netbytes) beside it.
# Each way starts with fresh daemons (empty DRAM, no NVMe tier).
#
#   bench/peer.sh            BENCH_MODE=quick: ~100 MB, 3 epochs; full: ~400 MB, 4
#
# Writes $OUT/peer.md (the table) and $OUT/peer.jsonl (one line per epoch) when
# OUT is set (bench/run.sh sets it), else prints the table.  Needs root; says
# why and writes a one-line section where it cannot run.
set -u
cd "$(dirname "$0")/.."
mode=${BENCH_MODE:-quick}
case $mode in
quick) nbig=32 nsmall=400 epochs=3 ;;
full) nbig=128 nsmall=1600 epochs=4 ;;
*) echo "bench/peer.sh: BENCH_MODE is quick or full" >&2; exit 2 ;;
esac
RATE=${PEER_DFS_RATE:-400mbit}
CTL=build/granaryctl
GRANARYD=build/granaryd
PRE=$PWD/build/libgranary_preload.so
work=$(mktemp -d /tmp/granary-peerbench-XXXXXX)
export DFS_DIR=$work/dfs DFS_NAME="grpb$(($$ % 10000))"
PNET="gpb$(($$ % 100000))"
out_md=${OUT:+$OUT/peer.md}
out_js=${OUT:+$OUT/peer.jsonl}
pids=""
dfs_up=0
net_up=0
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    for p in $pids; do wait "$p" 2>/dev/null; done
    [ $net_up -eq 1 ] && PEER_NET=$PNET scripts/peernet.sh down 3
    [ $dfs_up -eq 1 ] && scripts/dfs.sh down > /dev/null 2>&1
    [ -n "${PEER_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
say() { if [ -n "$out_md" ]; then cat > "$out_md"; else cat; fi; }

if ! why=$(scripts/dfs.sh probe); then
    printf '## Peer cache: 1 vs 3 nodes (bench/peer.sh)\n\nskipped: %s\n' "$why" | say
    exit 0
fi
dfs_up=1
scripts/dfs.sh up > /dev/null || exit 1
net_up=1
PEER_NET=$PNET scripts/peernet.sh up 3 || exit 1
mnt=$DFS_DIR/mnt
mkdir -p "$mnt/ds"
awk -v nb="$nbig" -v ns="$nsmall" 'BEGIN { srand(17);
    for (i = 0; i < nb; i++) printf "b%04d %d\n", i, 1200000 + int(rand() * 2500000);
    for (i = 0; i < ns; i++) printf "s%04d %d\n", i, 2000 + int(rand() * 118000) }' |
while read -r f n; do head -c "$n" /dev/urandom > "$mnt/ds/$f"; done
ls "$mnt/ds" | sed "s|^|$mnt/ds/|" > "$work/paths"
xargs md5sum < "$work/paths" > "$work/truth"
D=$(xargs cat < "$work/paths" | wc -c)
nfiles=$(wc -l < "$work/paths")
scripts/dfs.sh shape "$RATE"

# node_start I PEER(0|1): granaryd of node I in namespace I, fresh.
node_start() {
    mkdir -p "$work/n$1"
    rm -f "$work/n$1/sock"
    pconf=""
    [ "$2" = 1 ] && pconf="[peer]
listen = 10.78.0.$1:7070
nodes = 10.78.0.[1-3]:7070
key_file = $work/key"
    cat > "$work/n$1/g.conf" <<CONF
[daemon]
socket = $work/n$1/sock
io_threads = 8
[source]
roots = $mnt
chunk_size = 1M
attr_ttl = 600
[dram]
capacity = $((D * 2 / 1048576 + 64))M
[nvme]
path =
[metrics]
listen =
$pconf
CONF
    nsenter --net="/run/netns/$PNET-$1" "$GRANARYD" --config "$work/n$1/g.conf" \
        2>> "$work/n$1/log" &
    pids="$pids $!"
    eval "pid_$1=$!"
    i=0
    while [ ! -S "$work/n$1/sock" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
}
node_stop() {
    eval "kill \$pid_$1; wait \$pid_$1"
}
src_of() {
    s=0
    for k in "$@"; do
        s=$((s + $($CTL -s "$work/n$k/sock" stats --json |
                   sed -n 's/.*"source_bytes_read": *\([0-9]*\).*/\1/p')))
    done
    echo $s
}
now_ms() { date +%s%3N; }
head -c 32 /dev/urandom | base64 > "$work/key"
chmod 600 "$work/key"

# run WAY NODES PEER: $epochs shuffled epochs; one jsonl line per epoch.
bad=0
run() {
    way=$1 n=$2 peer=$3
    k=1
    while [ $k -le "$n" ]; do node_start $k "$peer"; k=$((k + 1)); done
    e=1
    while [ $e -le "$epochs" ]; do
        shuf "$work/paths" > "$work/e"
        s0=$(src_of $(seq "$n"))
        n0=$(scripts/dfs.sh netbytes)
        t0=$(now_ms)
        k=1
        while [ $k -le "$n" ]; do
            awk -v k=$k -v n="$n" 'NR % n == k % n' "$work/e" > "$work/e.$k"
            env LD_PRELOAD="$PRE" GRANARY_SOCKET="$work/n$k/sock" GRANARY_PRELOAD_ROOTS="$mnt" \
                xargs md5sum < "$work/e.$k" > "$work/e.$k.out" &
            eval "r_$k=$!"
            k=$((k + 1))
        done
        k=1
        while [ $k -le "$n" ]; do eval "wait \$r_$k" || bad=$((bad + 1)); k=$((k + 1)); done
        t1=$(now_ms)
        s1=$(src_of $(seq "$n"))
        n1=$(scripts/dfs.sh netbytes)
        cat "$work"/e.*.out | sort -k2 | cmp -s - "$work/truth" || bad=$((bad + 1))
        rm -f "$work"/e.*
        printf '{"way":"%s","nodes":%d,"peer":%d,"epoch":%d,"seconds":%.3f,"source_bytes":%d,"net_bytes":%d,"dataset_bytes":%d}\n' \
            "$way" "$n" "$peer" "$e" "$(echo "$t0 $t1" | awk '{print ($2 - $1) / 1000}')" \
            $((s1 - s0)) $((n1 - n0)) "$D" >> "$work/jsonl"
        e=$((e + 1))
    done
    k=1
    while [ $k -le "$n" ]; do node_stop $k; k=$((k + 1)); done
}
: > "$work/jsonl"
run "1 node" 1 0
run "3 nodes, peer cache" 3 1
run "3 nodes, alone" 3 0
[ -n "$out_js" ] && cp "$work/jsonl" "$out_js"

# The table: per way, the first epoch, the mean of the later ones, and all
# epochs together; DFS bytes as multiples of one copy of the dataset; times
# and bytes also as ratios to the 1-node way.
awk -v D="$D" -v nf="$nfiles" -v rate="$RATE" -v ep="$epochs" -v bad="$bad" -v mode="$mode" '
function num(k,   m) { m = $0; sub(".*\"" k "\":", "", m); sub("[,}].*", "", m); return m }
{ w = $0; sub(/^[{]"way":"/, "", w); sub(/".*/, "", w); e = num("epoch") + 0; t = num("seconds") + 0; s = num("source_bytes") + 0
  nb = num("net_bytes") + 0
  if (!(w in seen)) { seen[w] = 1; order[++nw] = w }
  T[w] += t; S[w] += s; N[w] += nb
  if (e == 1) { T1[w] = t; S1[w] = s } else { TL[w] += t; SL[w] += s } }
END {
  printf "## Peer cache: 1 vs 3 nodes (bench/peer.sh, %s)\n\n", mode
  printf "MooseFS capped at %s; %d files, %.1f MB (1M chunks, some files of 2-4 chunks, most under 120 KB); %d shuffled epochs; each way on fresh daemons (DRAM only). DFS bytes are the daemons'"'"' source_bytes_read in copies of the dataset; \"net\" is the DFS network counter over all epochs. Readers: md5sum under the LD_PRELOAD shim; every epoch byte-exact: %s.\n\n", rate, nf, D / 1e6, ep, bad ? "NO (" bad " failures)" : "yes"
  printf "| way | epoch 1 s | later epochs s (mean) | all epochs s | DFS copies, epoch 1 | DFS copies per later epoch | DFS copies, all | net copies, all | time vs 1 node | DFS bytes vs 1 node |\n"
  printf "|---|---|---|---|---|---|---|---|---|---|\n"
  b = order[1]
  for (i = 1; i <= nw; i++) {
    w = order[i]
    printf "| %s | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f | %.2fx | %.2fx |\n", w, T1[w],
      (ep > 1 ? TL[w] / (ep - 1) : 0), T[w], S1[w] / D, (ep > 1 ? SL[w] / (ep - 1) / D : 0),
      S[w] / D, N[w] / D, T[w] / T[b], (S[b] ? S[w] / S[b] : 0)
  }
}' "$work/jsonl" | say
[ -z "$out_md" ] || cat "$out_md"
[ $bad -eq 0 ]
