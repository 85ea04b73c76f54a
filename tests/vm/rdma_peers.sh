#!/usr/bin/busybox sh
# rdma_peers.sh - the peer cache over RDMA, run inside tests/test_rdma_vm.sh's
# VM (busybox, rxe0 on the dummy interface rxenet0 at 192.0.2.1) after
# rdma_pair, in the same boot.  Three real granaryd processes, members
# 192.0.2.1:7070 (A), 192.0.2.2:7070 (B) and 192.0.2.3:7070 (C) on three
# addresses of rxenet0 (so three GIDs of rxe0), [peer] transport = rdma,
# chunk_size 1M, no NVMe tier, a source of files of 1 byte to 5.2 MB
# (chunk-aligned and not) made here:
#   1. A's client reads every file (granaryctl cat), then B's: byte-exact
#      (cmp), B got chunks from A (peer_reads), every one by RDMA READ (its
#      log never says "serving us over tcp"; `granaryctl peers` shows A's
#      transport rdma), A's RDMA listener accepted B, and the source was
#      read once: source_bytes_read over A and B is one copy.  C is down
#      meanwhile (its chunks go to their second owner).
#   2. C starts with a different key_file (and transport = auto, which
#      finds rxe0 and serves by RDMA READ too): it reads every file byte-exact
#      from the source, no chunk from a peer, and A and B count the
#      connections that did not prove the key (peer_auth_failures).
#   3. A is killed (SIGKILL); B drops its copies and reads every file again:
#      byte-exact, all from the source (A dead, C refused), counting A failing.
#   4. B and C stop on SIGTERM and exit 0.
# Prints "@@RESULT NAME PASS|FAIL" and "@@INFO ..." lines.
#
# $1, a negative control (each must make the run FAIL):
#   tcp   B's transport is tcp: A serves it inline, not by RDMA
#   key   C holds the right key: it gets chunks from A and B
# shellcheck disable=SC3043  # busybox sh has local
FAULT=${1:-}
N=0
res() { echo "@@RESULT $1 $2${3:+ $3}"; }
info() { echo "@@INFO $*"; }
check() {   # check NAME DETAIL COMMAND...: PASS when COMMAND succeeds
    local n="$1" d="$2"
    shift 2
    if "$@"; then res "$n" PASS "$d"; else res "$n" FAIL "$d"; N=$((N + 1)); fi
}
up() { cut -d' ' -f1 /proc/uptime; }
ctl() { local n="$1"; shift; timeout 60 granaryctl -s "/tmp/$n/sock" "$@"; }
stat_of() { ctl "$1" stats --json | sed -n "s/.*\"$2\": *\([0-9]*\).*/\1/p"; }
# The row of member $2 in node $1's `granaryctl peers`: STATE VIA HITS
peer_row() { ctl "$1" peers | awk -v m="$2" '$1 == m { print $2, $3, $4 }'; }
ip4() { case $1 in a) echo 192.0.2.1 ;; b) echo 192.0.2.2 ;; c) echo 192.0.2.3 ;; esac; }

IP=/usr/sbin/ip
$IP addr add 192.0.2.2/24 dev rxenet0
$IP addr add 192.0.2.3/24 dev rxenet0
# rxe adds a RoCE GID per address of its netdev: wait for both.
i=0
while [ $i -lt 50 ]; do
    g=$(cat /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null)
    case $g in *ffff:c000:0202*) case $g in *ffff:c000:0203*) break ;; esac ;; esac
    sleep 0.2
    i=$((i + 1))
done
check peers_gids "rxe0 has GIDs for 192.0.2.2 and .3 at up $(up) s" \
    sh -c 'cat /sys/class/infiniband/rxe0/ports/1/gids/* | grep -q ffff:c000:0202 &&
           cat /sys/class/infiniband/rxe0/ports/1/gids/* | grep -q ffff:c000:0203'

# ---- the source, the keys, the configurations --------------------------------
S=/tmp/src
mkdir -p $S
t0=$(up)
total=0
for spec in f0:3500000 f1:1048576 f2:100000 f3:2600000 f4:1 f5:5200000 f6:2097153; do
    f=${spec%%:*} sz=${spec#*:}
    head -c "$sz" /dev/urandom > "$S/$f"
    total=$((total + sz))
done
info "source: $(find $S -type f | wc -l) files, $total bytes, made in $(awk "BEGIN{print $(up)-$t0}") s"
umask 077
echo "granary vm peers: the shared secret 4c1d" > /tmp/key
echo "granary vm peers: some other secret 9e07" > /tmp/wrongkey
umask 022
KC=/tmp/wrongkey
[ "$FAULT" = key ] && KC=/tmp/key
for n in a b c; do
    mkdir -p /tmp/$n/out
    tr=rdma
    [ $n = c ] && tr=auto
    [ "$FAULT" = tcp ] && [ $n = b ] && tr=tcp
    key=/tmp/key
    [ $n = c ] && key=$KC
    cat > /tmp/$n/conf <<EOF
[daemon]
socket = /tmp/$n/sock
io_threads = 2
log_level = info
[source]
roots = $S
chunk_size = 1M
attr_ttl = 1
[dram]
capacity = 32M
[nvme]
path =
[metrics]
listen =
[peer]
listen = $(ip4 $n):7070
nodes = 192.0.2.1:7070,192.0.2.2:7070,192.0.2.3:7070
key_file = $key
transport = $tr
timeout = 10
EOF
done

start() {   # start NODE: granaryd in the background, ready when it answers
    local n="$1" i=0
    granaryd --config "/tmp/$n/conf" 2>"/tmp/$n/log" &
    echo $! > "/tmp/$n/pid"
    while [ $i -lt 150 ]; do
        ctl "$n" health >/dev/null 2>&1 && return 0
        kill -0 "$(cat "/tmp/$n/pid")" 2>/dev/null || return 1
        sleep 0.2
        i=$((i + 1))
    done
    return 1
}
read_all() {   # read_all NODE [FILE...]: the files (all of the source) through NODE's daemon, compared
    local n="$1" p f bad=0
    shift
    [ $# -gt 0 ] || set -- "$S"/*
    for p in "$@"; do
        f=${p##*/}
        ctl "$n" cat "$p" > "/tmp/$n/out/$f" || { echo "@@INFO     $n: cat $f failed"; bad=1; continue; }
        cmp -s "$p" "/tmp/$n/out/$f" || { echo "@@INFO     $n: $f differs"; bad=1; }
        rm -f "/tmp/$n/out/$f"
    done
    return $bad
}
gt0() { [ "${1:-0}" -gt 0 ]; }
eq() { [ "${1:-x}" = "$2" ]; }

# ---- 1. A and B, by RDMA ------------------------------------------------------
t0=$(up)
check peers_a_start "granaryd A on 192.0.2.1" start a
check peers_b_start "granaryd B on 192.0.2.2" start b
info "A and B ready in $(awk "BEGIN{print $(up)-$t0}") s"
t0=$(up)
check peers_a_reads_exact "A read every file byte-exact" read_all a
info "A read $total bytes in $(awk "BEGIN{print $(up)-$t0}") s"
t0=$(up)
check peers_b_reads_exact "B read every file byte-exact" read_all b
info "B read $total bytes in $(awk "BEGIN{print $(up)-$t0}") s"
t0=$(up)
asrc=$(stat_of a source_bytes_read) apr=$(stat_of a peer_reads)
apb=$(stat_of a peer_bytes_read) asv=$(stat_of a peer_served)
bsrc=$(stat_of b source_bytes_read) bpr=$(stat_of b peer_reads)
bpb=$(stat_of b peer_bytes_read) bsv=$(stat_of b peer_served)
info "A: source_bytes_read $asrc peer_reads $apr ($apb bytes) peer_served $asv"
info "B: source_bytes_read $bsrc peer_reads $bpr ($bpb bytes) peer_served $bsv"
check peers_one_copy "source_bytes_read A $asrc + B $bsrc = $((asrc + bsrc)), one copy $total" \
    eq "$((asrc + bsrc))" "$total"
check peers_bytes "peer_bytes_read A $apb + B $bpb = $((apb + bpb)), one copy $total" \
    eq "$((apb + bpb))" "$total"
check peers_b_peer_reads "B peer_reads $bpr" gt0 "$bpr"
check peers_a_peer_reads "A peer_reads $apr (chunks homed at B)" gt0 "$apr"
check peers_served "A served $asv = B's peer_reads $bpr" eq "$asv" "$bpr"
row=$(peer_row b 192.0.2.1:7070)
check peers_b_sees_a_rdma "B's peers: A: $row" eq "$(echo "$row" | cut -d' ' -f2)" rdma
row=$(peer_row a 192.0.2.2:7070)
check peers_a_sees_b_rdma "A's peers: B: $row" eq "$(echo "$row" | cut -d' ' -f2)" rdma
check peers_b_log_rdma "B's log: peer 192.0.2.1:7070: serving us over rdma (RDMA READ)" \
    grep -q 'peer 192.0.2.1:7070: serving us over rdma (RDMA READ)' /tmp/b/log
# The line comes at every change of transport: none means no chunk came inline.
check peers_b_never_tcp "B's log never says a peer serves it over tcp" \
    sh -c '! grep -q "serving us over tcp" /tmp/b/log'
# (Before C starts: the connection's source address is the interface's
# first, 192.0.2.1, whichever node dials.)
check peers_a_served_rdma "A's log: RDMA READ served on 192.0.2.1 port 7071, a connection accepted" \
    sh -c 'grep -q "serving chunks by RDMA READ on 192.0.2.1 port 7071" /tmp/a/log &&
           grep -q "rdma: 192.0.2.1:7071 .*: connection from .* established" /tmp/a/log'
check peers_no_inline_fallback "no segment registration failed (no chunk served inline instead)" \
    sh -c '! grep -q "cannot register arena segment" /tmp/a/log /tmp/b/log'

info "stats and checks in $(awk "BEGIN{print $(up)-$t0}") s"

# ---- 2. C, with another key ------------------------------------------------
t0=$(up)
afail0=$(stat_of a peer_auth_failures)
bfail0=$(stat_of b peer_auth_failures)
check peers_c_start "granaryd C on 192.0.2.3 (key_file $KC)" start c
check peers_c_auto_rdma "C's log: transport auto: serving chunks by RDMA READ" \
    grep -q 'transport auto: serving chunks by RDMA READ on 192.0.2.3 port 7071' /tmp/c/log
info "C ready in $(awk "BEGIN{print $(up)-$t0}") s"
t0=$(up)
check peers_c_reads_exact "C read every file byte-exact" read_all c
info "C read $total bytes in $(awk "BEGIN{print $(up)-$t0}") s"
cpr=$(stat_of c peer_reads)
csrc=$(stat_of c source_bytes_read)
afail=$(stat_of a peer_auth_failures)
bfail=$(stat_of b peer_auth_failures)
check peers_c_no_peer_reads "C peer_reads $cpr" eq "$cpr" 0
check peers_c_from_source "C source_bytes_read $csrc = $total" eq "$csrc" "$total"
check peers_a_refused_c "A peer_auth_failures $afail0 -> $afail" gt0 "$((afail - afail0))"
check peers_b_refused_c "B peer_auth_failures $bfail0 -> $bfail" gt0 "$((bfail - bfail0))"
check peers_c_log_key "C's log: a peer did not prove the shared key" \
    grep -q 'did not prove the shared key' /tmp/c/log

# ---- 3. A killed (SIGKILL), B reads again what it got from A -------------------
# B drops its copies (evict) and reads every file again: the chunks homed
# at A (phase 1 got some from A) find A dead, on B's pooled TCP and RDMA
# connections first; B's reads go on, byte-exact, from the source.
t0=$(up)
bsrc0=$(stat_of b source_bytes_read)
bpr0=$(stat_of b peer_reads)
kill -KILL "$(cat /tmp/a/pid)"
wait "$(cat /tmp/a/pid)" 2>/dev/null
rm -f /tmp/a/pid
check peers_b_evict "B evicted every file" ctl b evict "$S"/*
check peers_b_reads_after_kill "B read every file again byte-exact, A killed" read_all b
berr=$(ctl b peers --json | tr '{' '\n' | grep '"name": "192.0.2.1:7070"' |
       sed -n 's/.*"errors": \([0-9]*\).*"timeouts": \([0-9]*\).*/\1 \2/p')
bsrc=$(stat_of b source_bytes_read)
bpr=$(stat_of b peer_reads)
info "B read every file again in $(awk "BEGIN{print $(up)-$t0}") s with A killed:" \
    "source_bytes_read +$((bsrc - bsrc0)), peer_reads +$((bpr - bpr0))," \
    "A's errors and timeouts in B's peers: ${berr:-?}"
check peers_b_saw_a_fail "B counted A failing (errors timeouts: ${berr:-?})" \
    gt0 "$(( ${berr%% *} + ${berr##* } ))"
# A dead, C refused: all of it from the source.
check peers_b_refetched "B source_bytes_read +$((bsrc - bsrc0)) = $total, peer_reads +$((bpr - bpr0))" \
    eq "$((bsrc - bsrc0)) $((bpr - bpr0))" "$total 0"

# ---- 4. a clean stop -----------------------------------------------------------
t0=$(up)
for n in b c; do
    p=$(cat /tmp/$n/pid 2>/dev/null)
    [ -n "$p" ] || continue
    kill -TERM "$p" 2>/dev/null
    i=0
    while kill -0 "$p" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$p" 2>/dev/null
    wait "$p"
    rc=$?
    check peers_${n}_exit "granaryd ${n} exit status $rc after SIGTERM" eq "$rc" 0
done
info "stopped in $(awk "BEGIN{print $(up)-$t0}") s"
for n in a b c; do
    echo "--- granaryd $n"
    grep -E 'peer|rdma|error' /tmp/$n/log | head -n 30
done
info "rdma_peers: $N failed"
