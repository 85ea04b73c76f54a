#!/bin/sh
# test_ckpt.sh - checkpoints through a real daemon (issue 18): put and
# publish byte-exact (granaryctl put, and libgranary's gr_ckpt_* through
# build/tests/ckpt_writer); destinations the peer may not create refused, a
# permitted one written as the peer; a full staging area refusing up front
# (ENOSPC); hostile requests from the spec (tests/ckpt_probe.py); a replica
# before publishing; DFS-side faults (the directory removed, EIO on write)
# keeping the staged copy and retrying; and a SIGKILL torture: the daemon
# killed at random points of staging, drain and publish, the destination
# checked byte-exact after each kill (absent or one whole version), and the
# drains resumed at the end; about a third of those puts acknowledged early,
# each to end published, superseded or failed "lost" (never the
# destination's).  CKPT_KILLS sets the number of kills (30).
NAME=ckpt; . tests/lib.sh
W=build/tests/ckpt_writer
FI=build/tests/libfaultinject.so
KILLS=${CKPT_KILLS:-30}
user=granary-ck
id "$user" > /dev/null 2>&1 || useradd -M -N -s /usr/sbin/nologin "$user"
as_user() { setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups "$@"; }
chmod 0755 "$dir" "$dir/src"
export GRANARY_RECONNECT_MS=0

conf() {   # conf EXTRA: the test's configuration
    write_conf "[daemon]
socket_mode = 0666
[checkpoint]
capacity = 48M
$1"
}

start() {   # start [ENV...]: the daemon, waited for
    rm -f "$dir/sock"
    env "$@" $GRANARYD --config "$dir/g.conf" >> "$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do [ -S "$dir/sock" ] && return 0; sleep 0.05; done
    echo "daemon did not start"; cat "$dir/log"; return 1
}

stop() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=; }

state_of() {   # state_of ID: its state word
    $CTL -s "$dir/sock" ckpt status "$1" 2>/dev/null | cut -f2
}

wait_state() {   # wait_state ID STATE SECONDS
    i=0
    while [ $i -lt $(($3 * 10)) ]; do
        [ "$(state_of "$1")" = "$2" ] && return 0
        sleep 0.1; i=$((i + 1))
    done
    return 1
}

# ---- put and publish ----
conf ""
start || exit 1
mkdir -p "$dir/src/out" "$dir/src/rootonly" "$dir/src/closed/sub" "$dir/src/mine"
chmod 0755 "$dir/src/rootonly"; chmod 0700 "$dir/src/closed"; chown "$user" "$dir/src/mine"
head -c 5000001 /dev/urandom > "$dir/a.bin"
check "granaryctl put --wait publishes" $CTL -s "$dir/sock" put "$dir/a.bin" "$dir/src/out/a.ckpt" --wait
check "the published file is byte-exact" cmp -s "$dir/a.bin" "$dir/src/out/a.ckpt"
check "ckpt list says published and durable" sh -c "$CTL -s $dir/sock ckpt list | grep -q 'published	durable	5000001'"
check "the staged copy is gone once published" sh -c "! ls $dir/nvme/checkpoints/*.data 2>/dev/null | grep -q ."
check "no temporary is left beside the destination" sh -c "! ls -A $dir/src/out | grep -q granary"
out=$($W put "$dir/sock" "$dir/src/out/b.ckpt" 10485760 7 wait)
check "gr_ckpt_commit, then gr_ckpt_wait(PUBLISHED)" sh -c "echo '$out' | grep -q '^published'"
check "gr_ckpt_* bytes published byte-exact" $W check "$dir/src/out/b.ckpt" 10485760 7
$W put "$dir/sock" "$dir/src/out/b.ckpt" 3145728 8 wait > /dev/null
check "a new version replaces the old one whole" $W check "$dir/src/out/b.ckpt" 3145728 8
check "a put of an empty file publishes an empty file" sh -c ": > $dir/empty; $CTL -s $dir/sock put $dir/empty $dir/src/out/e --wait > /dev/null && [ -f $dir/src/out/e ] && [ ! -s $dir/src/out/e ]"
mkdir "$dir/src/out/isdir"
check "a destination that is a directory is refused (EISDIR)" sh -c "! $CTL -s $dir/sock put $dir/a.bin $dir/src/out/isdir 2> $dir/err && grep -q 'is a directory' $dir/err"

# ---- access ----
check "a peer may not put where it may not write (exit 4, EACCES)" sh -c "as_user() { setpriv --reuid=$user --regid=\$(id -g $user) --clear-groups \"\$@\"; }; as_user $CTL -s $dir/sock put $dir/a.bin $dir/src/rootonly/x 2> $dir/err; [ \$? -eq 4 ] && grep -q 'may not create' $dir/err"
check "nothing was created in the refused directory" sh -c "[ -z \"\$(ls -A $dir/src/rootonly)\" ]"
check "a peer may not put below a directory it may not search" sh -c "setpriv --reuid=$user --regid=\$(id -g $user) --clear-groups $CTL -s $dir/sock put $dir/a.bin $dir/src/closed/sub/x 2>/dev/null; [ \$? -eq 4 ] && [ -z \"\$(ls -A $dir/src/closed/sub)\" ]"
check "a put outside the roots is refused" sh -c "! $CTL -s $dir/sock put $dir/a.bin /tmp/granary-ckpt-outside 2>/dev/null && [ ! -e /tmp/granary-ckpt-outside ]"
cp "$dir/a.bin" "$dir/user.bin"; chmod 0644 "$dir/user.bin"
check "a permitted put as the peer publishes" as_user $CTL -s "$dir/sock" put "$dir/user.bin" "$dir/src/mine/u.ckpt" --wait
check "the published file belongs to the peer (written as it)" sh -c "[ \"\$(stat -c %u $dir/src/mine/u.ckpt)\" = \"\$(id -u $user)\" ] && cmp -s $dir/a.bin $dir/src/mine/u.ckpt"
check "a peer lists only its own checkpoints" sh -c "[ \"\$(setpriv --reuid=$user --regid=\$(id -g $user) --clear-groups $CTL -s $dir/sock ckpt list | wc -l)\" = 1 ]"

# ---- staging space ----
head -c 52428800 /dev/zero > "$dir/big.bin"
check "a checkpoint larger than the free staging space is refused (ENOSPC)" sh -c "! $CTL -s $dir/sock put $dir/big.bin $dir/src/out/big 2> $dir/err && grep -q 'staging is full' $dir/err"
check "the refusal left nothing staged" sh -c "! ls $dir/nvme/checkpoints/ | grep -q data"

# ---- hostile requests ----
check "hostile CKPT_PUT and CKPT_LIST requests (ckpt_probe.py)" /usr/bin/python3 tests/ckpt_probe.py "$dir/sock" "$dir/src/out"
stop

# ---- a replica before publishing ----
mkdir -p "$dir/replica"
conf "replica_dir = $dir/replica"
start || exit 1
id=$($CTL -s "$dir/sock" put "$dir/a.bin" "$dir/src/out/r.ckpt" --wait | sed -n 's/^checkpoint \([0-9]*\): published.*/\1/p')
check "with a replica_dir the checkpoint publishes" cmp -s "$dir/a.bin" "$dir/src/out/r.ckpt"
check "the replica is byte-exact" sh -c "cmp -s $dir/a.bin $dir/replica/$id-r.ckpt"
stop

# ---- faults on the DFS side ----
conf "drain_bandwidth = 4M"
: > "$dir/faults"
start FAULTINJECT_CONTROL="$dir/faults" LD_PRELOAD="$FI" || exit 1
mkdir -p "$dir/src/gone"
out=$($W put "$dir/sock" "$dir/src/gone/x" 8388608 21)
id=$(echo "$out" | sed -n 's/^acked //p')
rm -rf "$dir/src/gone"
i=0; while [ $i -lt 100 ] && ! $CTL -s "$dir/sock" ckpt status "$id" | grep -q error; do sleep 0.1; i=$((i + 1)); done
check "a drain whose directory went away fails and says why" sh -c "$CTL -s $dir/sock ckpt status $id | grep -q 'local.*error: .*No such file'"
check "the staged copy is kept" test -s "$dir/nvme/checkpoints/$id.data"
mkdir "$dir/src/gone"
check "the retry publishes once the directory is back" wait_state "$id" published 30
check "the retried checkpoint is byte-exact" $W check "$dir/src/gone/x" 8388608 21
mkdir -p "$dir/src/eio"
echo "weio /src/eio/" > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
out=$($W put "$dir/sock" "$dir/src/eio/y" 2097152 22)
id=$(echo "$out" | sed -n 's/^acked //p')
i=0; while [ $i -lt 100 ] && ! $CTL -s "$dir/sock" ckpt status "$id" | grep -q error; do sleep 0.1; i=$((i + 1)); done
check "EIO writing the destination fails the drain, staged copy kept" sh -c "$CTL -s $dir/sock ckpt status $id | grep -q 'local.*Input/output error' && test -s $dir/nvme/checkpoints/$id.data"
check "the destination was never half there" test ! -e "$dir/src/eio/y"
: > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
check "the retry publishes once writes work" wait_state "$id" published 30
check "the retried checkpoint is byte-exact (EIO)" $W check "$dir/src/eio/y" 2097152 22
stop

# ---- acknowledged early (gr_ckpt_commit_staged, CKPT_PUT ack staged) ----
# The copy to NVMe is slowed by a delay on the daemon's writes of N.data
# (faultinject wdelay; 600 ms per 4 MiB), so the window between the early
# acknowledgement and "local" is seconds long: reads of the destination
# through the daemon see the new bytes in it, a SIGKILL in it leaves the
# checkpoint failed ("lost") after the restart and the destination as it
# was, a read error on the memfd after the ack fails it the same way, and a
# put beyond [checkpoint] memory is acknowledged once local.
conf "memory = 24M"
: > "$dir/faults"
start FAULTINJECT_CONTROL="$dir/faults" LD_PRELOAD="$FI" || exit 1
mkdir -p "$dir/src/early"
out=$($W put "$dir/sock" "$dir/src/early/a" 6291456 61 staged-wait)
check "an early put is acknowledged staged and publishes" sh -c "echo '$out' | grep -q '^state staged' && echo '$out' | grep -q '^published'"
check "  byte-exact" $W check "$dir/src/early/a" 6291456 61
check "  counted (ckpt_acked_staged)" sh -c "$CTL -s $dir/sock stats | grep -q 'ckpt_acked_staged.* 1$'"
echo "wdelay .data 600" > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
out=$($W put "$dir/sock" "$dir/src/early/a" 16777216 62 staged-only)
id=$(echo "$out" | sed -n 's/^acked //p')
st=$(state_of "$id")
check "acknowledged before it is local (state $st)" sh -c "echo '$out' | grep -q '^state staged' && [ '$st' = staged ]"
cat > "$dir/hostile.py" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)      # under the shim: the daemon's staged copy (the memfd)
try:
    rw = os.open("/proc/self/fd/%d" % fd, os.O_RDWR)
except OSError as e:
    print("refused %d" % e.errno)
    sys.exit(0)
os.ftruncate(rw, int(sys.argv[2]))           # the bytes are sealed; the mtime is not
print("reopened writable")
PY
hres=$(as_user env LD_PRELOAD=build/libgranary_preload.so GRANARY_SOCKET="$dir/sock" GRANARY_PRELOAD_ROOTS="$dir/src" /usr/bin/python3 "$dir/hostile.py" "$dir/src/early/a" 16777216 2>&1)
check "  another uid handed the staged memfd cannot reopen it writable ($hres)" sh -c "echo '$hres' | grep -q '^refused'"
check "  read through the daemon meanwhile: the new bytes" $W read "$dir/sock" "$dir/src/early/a" 16777216 62
check "  still staged after that read (the window was real)" test "$(state_of "$id")" = staged
check "  then local and published" wait_state "$id" published 30
check "  byte-exact" $W check "$dir/src/early/a" 16777216 62
out=$($W put "$dir/sock" "$dir/src/early/b" 33554432 63 staged)
check "beyond [checkpoint] memory: acknowledged once local" sh -c "echo '$out' | grep -q '^state local'"
$W put "$dir/sock" "$dir/src/early/a" 16777216 64 staged-only > "$dir/e.out"
id=$(sed -n 's/^acked //p' "$dir/e.out")
kill -9 "$pid"; wait "$pid" 2>/dev/null; pid=
: > "$dir/faults"
start || exit 1
check "killed while staged after an early ack: failed after the restart ($(state_of "$id"))" test "$(state_of "$id")" = failed
check "  and says it was lost" sh -c "$CTL -s $dir/sock ckpt status $id | grep -q 'lost'"
check "  the destination keeps the previous checkpoint" $W check "$dir/src/early/a" 16777216 62
check "  no staged copy or temporary of it left" sh -c "[ ! -e $dir/nvme/checkpoints/$id.data ] && [ ! -e $dir/src/early/.a.granary-$id.tmp ]"
stop
: > "$dir/faults"
start FAULTINJECT_CONTROL="$dir/faults" LD_PRELOAD="$FI" || exit 1
echo "eio memfd:granary-checkpoint" > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
$W put "$dir/sock" "$dir/src/early/a" 4194304 65 staged > "$dir/e.out" 2> "$dir/e.err"; rc=$?
id=$(sed -n 's/^acked //p' "$dir/e.out")
: > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
check "a copy that fails after the early ack: waiting for local fails" sh -c "[ $rc -ne 0 ] && grep -q '^state staged' $dir/e.out && grep -q 'wait for local' $dir/e.err"
check "  the checkpoint is failed, with the reason ($(state_of "$id"))" sh -c "$CTL -s $dir/sock ckpt status $id | grep -q 'failed.*lost.*Input/output'"
check "  the destination keeps the previous checkpoint (EIO)" $W check "$dir/src/early/a" 16777216 62
check "  the daemon still stages checkpoints" sh -c "$W put $dir/sock $dir/src/early/c 1048576 66 staged-wait > /dev/null && $W check $dir/src/early/c 1048576 66"
stop
start || exit 1
check "  after a restart it still says lost, with the reason (journalled so)" sh -c "$CTL -s $dir/sock ckpt status $id | grep -q 'failed.*lost.*Input/output'"
stop

# ---- one destination, two checkpoints: never older bytes over newer ----
# The older checkpoint's drain fails (EIO on its own temporary only), the
# newer one publishes; once writes work again the older must not be renamed
# over it: it is superseded (its staged copy freed), also after a restart.
conf ""
: > "$dir/faults"
start FAULTINJECT_CONTROL="$dir/faults" LD_PRELOAD="$FI" || exit 1
mkdir -p "$dir/src/ord"
echo "weio /src/ord/" > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
$W put "$dir/sock" "$dir/src/ord/m.ckpt" 2097152 41 wait > "$dir/wa.out" 2> "$dir/wa.err" &
wapid=$!
i=0; while [ $i -lt 100 ] && ! grep -q '^acked' "$dir/wa.out"; do sleep 0.1; i=$((i + 1)); done
ida=$(sed -n 's/^acked //p' "$dir/wa.out")
i=0; while [ $i -lt 100 ] && ! $CTL -s "$dir/sock" ckpt status "$ida" | grep -q error; do sleep 0.1; i=$((i + 1)); done
echo "weio granary-$ida.tmp" > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
idb=$($W put "$dir/sock" "$dir/src/ord/m.ckpt" 1048576 42 | sed -n 's/^acked //p')
check "the newer checkpoint publishes while the older one fails" wait_state "$idb" published 20
: > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
i=0; while [ $i -lt 100 ] && [ "$(state_of "$ida")" = local ]; do sleep 0.1; i=$((i + 1)); done
check "the older one is superseded, not published (it was $(state_of "$ida"))" test "$(state_of "$ida")" = superseded
check "the destination holds the newer bytes" $W check "$dir/src/ord/m.ckpt" 1048576 42
check "ckpt list shows the older one superseded by the newer" sh -c "$CTL -s $dir/sock ckpt list | grep '^$ida	' | grep -q 'superseded.*by checkpoint $idb'"
check "the superseded checkpoint's staged copy is freed" test ! -e "$dir/nvme/checkpoints/$ida.data"
check "no temporary of it is left beside the destination" sh -c "! ls -A $dir/src/ord | grep -q granary"
wait $wapid; rc=$?
check "gr_ckpt_wait(PUBLISHED) of the superseded one fails with ESTALE" sh -c "[ $rc -ne 0 ] && grep -q 'Stale' $dir/wa.err"
stop
start || exit 1
check "after a restart it is still superseded" test "$(state_of "$ida")" = superseded
stop
# A kill between the publish and the supersession's journal: the older
# entry still says local, with its staged copy; the load supersedes it.
j="$dir/nvme/checkpoints/$ida.ckpt"
sed -e 's/^state superseded$/state local/' -e '/^superseded_by /d' "$j" > "$j.new" && mv "$j.new" "$j"
$W direct "$dir/nvme/checkpoints/$ida.data" 2097152 41 > /dev/null
start || exit 1
check "a journal with an unpublished entry older than a published one: superseded at load" test "$(state_of "$ida")" = superseded
sleep 1.5
check "... never drained over the newer bytes" $W check "$dir/src/ord/m.ckpt" 1048576 42
check "... and its staged copy removed" test ! -e "$dir/nvme/checkpoints/$ida.data"
stop

# ---- concurrent drains ----
# drains = 2 under a 2 MiB/s drain_bandwidth: four 2 MiB checkpoints, two
# of them for one destination.  A watcher (granary.ckpt.status, every 50 ms)
# sees at most two in progress at once, two at some point, never both of
# the same destination; all four take about 8 MiB / 2 MiB/s together; the
# shared destination ends with the newer bytes.
conf "drain_bandwidth = 2M
drains = 2"
start || exit 1
mkdir -p "$dir/src/conc"
t0=$(date +%s.%N)
ids=""
for n in 1 2 3; do
    ids="$ids $($W put "$dir/sock" "$dir/src/conc/d$n" 2097152 $((50 + n)) | sed -n 's/^acked //p')"
done
ids="$ids $($W put "$dir/sock" "$dir/src/conc/d1" 2097152 54 | sed -n 's/^acked //p')"
cat > "$dir/watch.py" <<'PY'
import sys, time
import granary.ckpt as gc
ids = [int(x) for x in sys.argv[1:]]
most, same, t_end = 0, 0, time.time() + 30
while time.time() < t_end:
    st = [gc.status(i) for i in ids]
    busy = [s for s in st if s["state"] in ("local", "replicated") and s["drained"] > 0]
    most = max(most, len(busy))
    dests = [s["dest"] for s in busy]
    same = max(same, len(dests) - len(set(dests)))
    if all(s["state"] == "published" for s in st):
        break
    time.sleep(0.05)
print("most %d same %d done %d" % (most, same, all(s["state"] == "published" for s in st)))
PY
w=$(GRANARY_SOCKET="$dir/sock" PYTHONPATH=python /usr/bin/python3 "$dir/watch.py" $ids)
t1=$(date +%s.%N)
echo "     (watcher: $w; $(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}') s for 8 MiB at 2 MiB/s)"
check "all four published" sh -c "echo '$w' | grep -q 'done 1'"
check "two drained at once, never more (drains = 2)" sh -c "echo '$w' | grep -q 'most 2 '"
check "never two drains of one destination at once" sh -c "echo '$w' | grep -q 'same 0 '"
check "together within drain_bandwidth (>= 3 s for 8 MiB at 2 MiB/s)" sh -c "echo $t0 $t1 | awk '{exit !(\$2 - \$1 >= 3.0)}'"
check "the shared destination holds the newer checkpoint" $W check "$dir/src/conc/d1" 2097152 54
check "the others are byte-exact" sh -c "$W check $dir/src/conc/d2 2097152 52 && $W check $dir/src/conc/d3 2097152 53"
stop

# ---- checkpoint sets ----
# Several files published together: DEST becomes a link to a generation
# directory DEST.granary-gen-ID (the files, then MANIFEST), the previous
# generation kept; a reader that resolved DEST once keeps a whole set.
conf ""
start || exit 1
mkdir -p "$dir/src/sets" "$dir/setin"
for i in 0 1 2; do head -c $((300000 + i)) /dev/urandom > "$dir/setin/shard$i"; done
: > "$dir/setin/empty"
out=$($CTL -s "$dir/sock" put --set "$dir/src/sets/step" "$dir/setin" --wait)
sid=$(echo "$out" | sed -n 's/^checkpoint \([0-9]*\): published.*/\1/p')
check "granaryctl put --set DEST DIR --wait publishes" test -n "$sid"
check "DEST is a link to its generation directory" test "$(readlink "$dir/src/sets/step")" = "step.granary-gen-$sid"
check "the set's files are byte-exact (the empty one too)" sh -c "cmp -s $dir/setin/shard0 $dir/src/sets/step/shard0 && cmp -s $dir/setin/shard2 $dir/src/sets/step/shard2 && [ -f $dir/src/sets/step/empty ] && [ ! -s $dir/src/sets/step/empty ]"
check "MANIFEST lists the four files" test "$(grep -c '^[0-9a-f]\{16\} [0-9]* ' "$dir/src/sets/step/MANIFEST")" = 4
check "granaryctl put --set DEST FILE... publishes those" sh -c "$CTL -s $dir/sock put --set $dir/src/sets/two $dir/setin/shard0 $dir/setin/shard1 --wait > /dev/null && cmp -s $dir/setin/shard1 $dir/src/sets/two/shard1 && [ ! -e $dir/src/sets/two/shard2 ]"
mkdir -p "$dir/src/sets/realdir"
check "a DEST that is a directory (not a set's link) is refused" sh -c "! $CTL -s $dir/sock put --set $dir/src/sets/realdir $dir/setin 2> $dir/err && grep -q 'is a directory' $dir/err"
sd="$dir/src/sets/m"
for v in 7 8 9; do $W setput "$dir/sock" "$sd" 3 1048576 $v wait > /dev/null; done
check "gr_ckpt_set_*: MANIFEST checksums and bytes verified (ckpt_writer setcheck)" $W setcheck "$sd" 3 1048576 9
check "the generation before is kept, older ones removed" test "$(ls -d "$sd".granary-gen-* | wc -l)" = 2
check "no temporary link is left" sh -c "! ls -A $dir/src/sets | grep -q '^\.m\.granary'"
cat > "$dir/hold.py" <<'PY'
import os, subprocess, sys
w, sock, d = sys.argv[1:4]
fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)        # resolved once
subprocess.run([w, "setput", sock, d, "3", "1048576", "10", "wait"], check=True,
               stdout=subprocess.DEVNULL)
old = subprocess.run([w, "setcheck", "/proc/%d/fd/%d" % (os.getpid(), fd), "3", "1048576", "9"]).returncode
new = subprocess.run([w, "setcheck", d, "3", "1048576", "10"]).returncode
print("old %d new %d" % (old, new))
PY
check "a reader that resolved DEST before a publish still reads the whole old set; DEST the new one" sh -c "[ \"\$(/usr/bin/python3 $dir/hold.py $W $dir/sock $sd)\" = 'old 0 new 0' ]"
stop

# ---- SIGKILL torture of sets ----
# Kills during the set's staging, drain and publish: after each, DEST is
# absent or one whole set (MANIFEST and bytes verified), never a mix.
conf "drain_bandwidth = 16M"
sd="$dir/src/sets/tort"
v=0; set_acked=0; set_torn=0; set_in_drain=0
while [ $v -lt "${CKPT_SET_KILLS:-15}" ]; do
    v=$((v + 1))
    start || break
    $W setput "$dir/sock" "$sd" 4 1048576 $v > "$dir/w.out" 2>/dev/null &
    wpid=$!
    sleep "0.$(od -An -N2 -tu2 /dev/urandom | awk '{printf "%03d", $1 % 700}')"
    kill -9 "$pid"; wait "$pid" 2>/dev/null; pid=
    wait "$wpid" 2>/dev/null
    grep -q '^acked' "$dir/w.out" && set_acked=$v
    grep -lEq '^state (local|replicated)' "$dir"/nvme/checkpoints/*.ckpt 2>/dev/null && set_in_drain=$((set_in_drain + 1))
    if [ -e "$sd" ] || [ -L "$sd" ]; then
        ok=0; u=1
        while [ $u -le $v ]; do $W setcheck "$sd" 4 1048576 $u 2>/dev/null && { ok=1; break; }; u=$((u + 1)); done
        [ $ok -eq 1 ] || { set_torn=$((set_torn + 1)); echo "not one whole set after kill $v"; }
    fi
done
echo "     ($set_in_drain of $v kills left a set's drain to resume)"
check "$v kills: DEST was always absent or one whole set" test $set_torn -eq 0
start || exit 1
i=0
while [ $i -lt 300 ] && $CTL -s "$dir/sock" ckpt list | grep -Eq '	(staged|local|replicated)	'; do sleep 0.1; i=$((i + 1)); done
final=0; u=$set_acked
while [ $u -le $v ] && [ $set_acked -gt 0 ]; do $W setcheck "$sd" 4 1048576 $u 2>/dev/null && { final=$u; break; }; u=$((u + 1)); done
check "after the last restart the set is the last acknowledged or a later one (acked $set_acked, found $final)" test $final -ge $set_acked -a $set_acked -gt 0
check "at most two generations are left (the published one and the one before)" test "$(ls -d "$sd".granary-gen-* 2>/dev/null | wc -l)" -le 2
check "no temporary left beside the set" sh -c "! ls -A $dir/src/sets | grep -q '^\.tort\.granary'"
check "no staged copy left once the sets are published" sh -c "! ls $dir/nvme/checkpoints/ | grep -Eq '\.(data|set)\$'"
stop

# ---- staged checkpoints read before they are published ----
# The drain is held back by EIO on writes below /src/held (faultinject):
# the checkpoints stay local, and an open of their destinations, through
# libgranary and through the LD_PRELOAD shim (cmp, a real program), gets
# the new bytes from the staged copy.  Another uid gets them only where it
# could read the published file (the checkpoint's temporary, judged).
conf "drain_bandwidth = 4M"
: > "$dir/faults"
start FAULTINJECT_CONTROL="$dir/faults" LD_PRELOAD="$FI" || exit 1
PRE="env LD_PRELOAD=build/libgranary_preload.so GRANARY_SOCKET=$dir/sock GRANARY_PRELOAD_ROOTS=$dir/src"
mkdir -p "$dir/src/held" "$dir/src/heldp"; chmod 0755 "$dir/src/held"; chmod 0700 "$dir/src/heldp"
sz=3145728
$W direct "$dir/src/held/old.ckpt" $sz 30 > /dev/null
$W direct "$dir/exp31" $sz 31 > /dev/null; $W direct "$dir/exp32" $sz 32 > /dev/null
check "the old file reads through the daemon before the put" $W read "$dir/sock" "$dir/src/held/old.ckpt" $sz 30
ss=262144
$W setput "$dir/sock" "$dir/src/held/set" 3 $ss 40 wait > /dev/null
$W direct "$dir/exps1" $ss 41001 > /dev/null; $W direct "$dir/exps2" $ss 42000 > /dev/null
echo "weio /src/held" > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
sid1=$($W setput "$dir/sock" "$dir/src/held/set" 3 $ss 41 | sed -n 's/^acked //p')
sid2=$($W setput "$dir/sock" "$dir/src/held/set2" 2 $ss 42 | sed -n 's/^acked //p')
idl=$($W put "$dir/sock" "$dir/src/held/lost.ckpt" 1048576 43 | sed -n 's/^acked //p')
printf 'X' | dd of="$dir/nvme/checkpoints/$idl.data" bs=1 seek=1000 conv=notrunc 2> /dev/null
n0=$(stat_of ckpt_staged_opens)
id1=$($W put "$dir/sock" "$dir/src/held/new.ckpt" $sz 31 | sed -n 's/^acked //p')
id2=$($W put "$dir/sock" "$dir/src/held/old.ckpt" $sz 32 | sed -n 's/^acked //p')
id3=$($W put "$dir/sock" "$dir/src/heldp/p.ckpt" $sz 33 | sed -n 's/^acked //p')
sleep 0.3
check "the drains are held back (local, not published)" sh -c "[ \"\$($CTL -s $dir/sock ckpt status $id1 | cut -f2)\" = local ] && [ \"\$($CTL -s $dir/sock ckpt status $id2 | cut -f2)\" = local ] && [ ! -e $dir/src/held/new.ckpt ]"
check "libgranary reads a new destination from its staged copy, byte-exact" $W read "$dir/sock" "$dir/src/held/new.ckpt" $sz 31
check "libgranary reads the new checkpoint over the old file, byte-exact" $W read "$dir/sock" "$dir/src/held/old.ckpt" $sz 32
check "cmp under the shim: a destination absent on the DFS" $PRE cmp "$dir/exp31" "$dir/src/held/new.ckpt"
check "cmp under the shim: the new checkpoint, not the old file" $PRE cmp "$dir/exp32" "$dir/src/held/old.ckpt"
check "the staged opens were counted" test "$(stat_of ckpt_staged_opens)" -ge $((n0 + 4))
check "the sets are held back too (local)" sh -c "[ \"\$($CTL -s $dir/sock ckpt status $sid1 | cut -f2)\" = local ] && [ \"\$($CTL -s $dir/sock ckpt status $sid2 | cut -f2)\" = local ]"
check "libgranary reads a file of a new set over the old set, byte-exact" $W read "$dir/sock" "$dir/src/held/set/shard1" $ss 41001
check "libgranary reads a file of a set whose DEST does not exist yet" $W read "$dir/sock" "$dir/src/held/set2/shard0" $ss 42000
check "cmp under the shim: a file of the new set through the old set's link" $PRE cmp "$dir/exps1" "$dir/src/held/set/shard1"
check "cmp under the shim: a file of a set not on the DFS yet" $PRE cmp "$dir/exps2" "$dir/src/held/set2/shard0"
check "a reader of the old generation by its own name still reads the old set" $W read "$dir/sock" "$dir/src/held/$(readlink $dir/src/held/set)/shard1" $ss 40001
check "another uid that could read the published set reads the staged file" as_user $W read "$dir/sock" "$dir/src/held/set/shard2" $ss 41002
check "another uid that could read the published file reads the staged one" as_user $W read "$dir/sock" "$dir/src/held/new.ckpt" $sz 31
check "another uid that could read the published file: cmp under the shim" as_user $PRE cmp "$dir/exp31" "$dir/src/held/new.ckpt"
check "the writer reads its checkpoint in a directory closed to others" $W read "$dir/sock" "$dir/src/heldp/p.ckpt" $sz 33
check "another uid is refused where it could not read the published file" sh -c "as_user() { setpriv --reuid=$user --regid=\$(id -g $user) --clear-groups \"\$@\"; }; ! as_user $W read $dir/sock $dir/src/heldp/p.ckpt $sz 33 2> $dir/err && ! grep -q differs $dir/err"
check "... and cmp under the shim gets nothing from the daemon" sh -c "as_user() { setpriv --reuid=$user --regid=\$(id -g $user) --clear-groups \"\$@\"; }; $W direct $dir/exp33 $sz 33 > /dev/null; chmod 0644 $dir/exp33; ! as_user $PRE cmp $dir/exp33 $dir/src/heldp/p.ckpt 2>/dev/null"
: > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"
wait_state "$id1" published 40 && wait_state "$id2" published 40 && wait_state "$id3" published 40
check "... all three published" sh -c "[ \"\$($CTL -s $dir/sock ckpt status $id2 | cut -f2)\" = published ] && [ \"\$($CTL -s $dir/sock ckpt status $id3 | cut -f2)\" = published ]"
check "after publish libgranary reads the published file (new bytes)" $W read "$dir/sock" "$dir/src/held/old.ckpt" $sz 32
check "after publish the file on the DFS is byte-exact" $W check "$dir/src/held/old.ckpt" $sz 32
check "after publish cmp under the shim still matches" $PRE cmp "$dir/exp32" "$dir/src/held/old.ckpt"
wait_state "$sid1" published 40 && wait_state "$sid2" published 40
check "a staged copy that fails its checksum in the drain is failed ($(state_of "$idl"))" wait_state "$idl" failed 20
check "  journalled failed, its staged copy and temporary removed" sh -c "grep -q '^state failed' $dir/nvme/checkpoints/$idl.ckpt && [ ! -e $dir/nvme/checkpoints/$idl.data ] && ! ls -A $dir/src/held | grep -q 'lost.ckpt.granary' && [ ! -e $dir/src/held/lost.ckpt ]"
check "the sets published after the hold, whole" sh -c "$W setcheck $dir/src/held/set 3 $ss 41 && $W setcheck $dir/src/held/set2 2 $ss 42"
check "after publish the set's file is read from the DFS (new bytes)" sh -c "$W read $dir/sock $dir/src/held/set/shard1 $ss 41001 && $PRE cmp $dir/exps1 $dir/src/held/set/shard1"
check "no staged set left once published" sh -c "! ls $dir/nvme/checkpoints/ | grep -q '\.set\$'"
stop

# ---- SIGKILL torture ----
# About a third of the puts, chosen at random, are acknowledged early
# (ckpt_writer put ... staged: acked while staged, then it waits for local);
# for those the daemon runs under faultinject with its writes of N.data
# delayed (wdelay, 150 ms each: fallocate and the 4 MiB pieces), so that
# some kills land between the early ack and "local".  Such a checkpoint
# must come back failed, "lost", and never be the destination's content;
# an early put that saw local counts as acknowledged local.
conf "drain_bandwidth = 12M"
mkdir -p "$dir/src/tort"
dest="$dir/src/tort/model.ckpt"
size=6291456
v=0; last_acked=0; torn=0; in_drain=0; n_early=0; seen=" "
: > "$dir/early.lst"
while [ $v -lt "$KILLS" ]; do
    v=$((v + 1))
    if [ $(($(od -An -N1 -tu1 /dev/urandom) % 3)) -eq 0 ]; then
        n_early=$((n_early + 1))
        echo "wdelay .data 150" > "$dir/faults"
        start FAULTINJECT_CONTROL="$dir/faults" LD_PRELOAD="$FI" || break
        $W put "$dir/sock" "$dest" $size $v staged > "$dir/w.out" 2>/dev/null &
    else
        start || break
        $W put "$dir/sock" "$dest" $size $v > "$dir/w.out" 2>/dev/null &
    fi
    wpid=$!
    sleep "0.$(od -An -N2 -tu2 /dev/urandom | awk '{printf "%03d", $1 % 800}')"
    kill -9 "$pid"; wait "$pid" 2>/dev/null; pid=
    wait "$wpid" 2>/dev/null
    if grep -q '^state staged' "$dir/w.out"; then
        # acked early: "v id local" if it then saw local, "v id -" if not
        echo "$v $(sed -n 's/^acked //p' "$dir/w.out") $(grep -q '^local_s' "$dir/w.out" && echo local || echo -)" >> "$dir/early.lst"
        grep -q '^local_s' "$dir/w.out" && last_acked=$v
    elif grep -q '^acked' "$dir/w.out"; then
        last_acked=$v
    fi
    grep -lEq '^state (local|replicated)' "$dir"/nvme/checkpoints/*.ckpt 2>/dev/null && in_drain=$((in_drain + 1))
    if [ -e "$dest" ]; then
        ok=0; u=1
        while [ $u -le $v ]; do $W check "$dest" $size $u && { ok=1; break; }; u=$((u + 1)); done
        [ $ok -eq 1 ] && seen="$seen$u "
        [ $ok -eq 1 ] || { torn=$((torn + 1)); echo "torn destination after kill $v"; }
    fi
done
echo "     ($in_drain of $KILLS kills left a drain to resume; $n_early puts early, $(wc -l < "$dir/early.lst") of them acknowledged staged)"
check "$KILLS kills: the destination was always absent or one whole version" test $torn -eq 0
check "some kills landed in a drain" test $in_drain -gt 0
start || exit 1
i=0
while [ $i -lt 600 ] && $CTL -s "$dir/sock" ckpt list | grep -Eq '	(staged|local|replicated)	'; do sleep 0.1; i=$((i + 1)); done
check "after the last restart every drain resumed and published (nothing staged, local or replicated)" sh -c "! $CTL -s $dir/sock ckpt list | grep -Eq '	(staged|local|replicated)	'"
final=0; u=1
while [ $u -le $v ]; do $W check "$dest" $size $u && { final=$u; break; }; u=$((u + 1)); done
check "the destination is the last acknowledged version or a later one (acked $last_acked, found $final)" test $final -ge $last_acked -a $last_acked -gt 0
seen="$seen$final "
# Each early-acknowledged put's end: published, superseded by a later one,
# or failed "lost" (only if it never saw local), never the destination's.
lost=0; pub=0; sup=0; bad=0
while read -r ev eid elocal; do
    line=$($CTL -s "$dir/sock" ckpt status "$eid" 2>&1)
    case $(echo "$line" | cut -f2) in
    published) pub=$((pub + 1)) ;;
    superseded) sup=$((sup + 1)) ;;
    failed)
        lost=$((lost + 1))
        echo "$line" | grep -q '	error: .*lost' || { bad=$((bad + 1)); echo "early v$ev (checkpoint $eid) failed without \"lost\": $line"; }
        [ "$elocal" = - ] || { bad=$((bad + 1)); echo "early v$ev (checkpoint $eid) saw local, then failed: $line"; }
        case $seen in *" $ev "*) bad=$((bad + 1)); echo "early v$ev (checkpoint $eid) is lost but was the destination's content" ;; esac ;;
    *) bad=$((bad + 1)); echo "early v$ev (checkpoint $eid): $line" ;;
    esac
done < "$dir/early.lst"
echo "     (early puts acknowledged staged: $lost lost, $pub published, $sup superseded)"
check "every early put ended published, superseded or failed \"lost\" (never the destination's)" test $bad -eq 0
$CTL -s "$dir/sock" ckpt list | awk -F '\t' -v d="$dest" '$2 == "failed" && $6 == d && $7 !~ /lost/' > "$dir/notlost"
check "every failed checkpoint of the destination says it was lost" test ! -s "$dir/notlost"
[ -s "$dir/notlost" ] && cat "$dir/notlost"
check "no staged copy left once all are published" sh -c "! ls $dir/nvme/checkpoints/ | grep -q data"
check "no temporary left beside the destination" sh -c "! ls -A $dir/src/tort | grep -q granary"
stop
check "the daemon's log has no sanitizer report" sh -c "! grep -Eq 'AddressSanitizer|LeakSanitizer|runtime error' $dir/log"
[ $fails -eq 0 ] || { echo "--- daemon log"; tail -30 "$dir/log"; }
[ $fails -eq 0 ]
