#!/bin/sh
# granaryctl against a real granaryd: cat is byte-identical to the file,
# stats --json is one JSON object with the contract keys, errors are one
# line with a non-zero exit.
cd "$(dirname "$0")/.."
NAME=cli
. tests/lib.sh

head -c 5000000 /dev/urandom > "$dir/src/big.bin"
printf 'x' > "$dir/src/one"
: > "$dir/src/empty"
write_conf
start_daemon

for f in big.bin one empty; do
    $CTL -s "$dir/sock" cat "$dir/src/$f" > "$dir/out"
    check "cat $f exit 0" test $? -eq 0
    check "cat $f identical" cmp -s "$dir/out" "$dir/src/$f"
done
GRANARY_SOCKET="$dir/sock" $CTL cat "$dir/src/big.bin" | cmp -s - "$dir/src/big.bin"
check "GRANARY_SOCKET is honoured" test $? -eq 0
$CTL -s "$dir/sock" cat "$dir/src/one" "$dir/src/big.bin" > "$dir/out"
cat "$dir/src/one" "$dir/src/big.bin" | cmp -s - "$dir/out"
check "cat of several files concatenates" test $? -eq 0

$CTL -s "$dir/sock" stats --json > "$dir/stats.json"
check "stats --json exit 0" test $? -eq 0
/usr/bin/python3 - "$dir/stats.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
need = ["hits_dram", "hits_nvme", "misses", "bytes_served", "source_bytes_read",
        "dram_used_bytes", "dram_capacity_bytes", "nvme_used_bytes", "nvme_capacity_bytes",
        "evictions_dram", "evictions_nvme"]
missing = [k for k in need if k not in s]
assert not missing, missing
assert s["source_bytes_read"] == 5000001, s["source_bytes_read"]
assert s["hits_dram"] >= 5, s
assert s["dram_capacity_bytes"] == 64 << 20
assert s["nvme_capacity_bytes"] == 64 << 20
PY
check "stats --json has the contract keys and true values" test $? -eq 0
$CTL -s "$dir/sock" stats | grep -q '^misses '
check "stats table" test $? -eq 0

$CTL -s "$dir/sock" cat "$dir/src/nope" > /dev/null 2> "$dir/err"
rc=$?
check "missing file: exit 1" test $rc -eq 1
check "missing file: one-line error" test "$(wc -l < "$dir/err")" -eq 1
grep -q "No such file" "$dir/err"
check "missing file: says why" test $? -eq 0
$CTL -s "$dir/sock" cat /etc/passwd > /dev/null 2> "$dir/err"
check "outside roots: exit 1" test $? -eq 1
grep -q "outside the source roots" "$dir/err"
check "outside roots: says why" test $? -eq 0
$CTL -s "$dir/nosuchsock" stats > /dev/null 2> "$dir/err"
check "no daemon: exit 3" test $? -eq 3
check "no daemon: one-line error" test "$(wc -l < "$dir/err")" -eq 1
grep -q "$dir/nosuchsock.*granaryd running" "$dir/err"
check "no daemon: names the socket tried" test $? -eq 0
# Relative paths are taken from the working directory (as the shim does).
top=$PWD
mkdir -p "$dir/src/rel/sub"
cp "$dir/src/one" "$dir/src/rel/r.bin"
(cd "$dir/src/rel/sub" && "$top/$CTL" -s "$dir/sock" cat ../r.bin ./../../one) > "$dir/out"
cat "$dir/src/rel/r.bin" "$dir/src/one" | cmp -s - "$dir/out"
check "cat of relative paths (../, ./)" test $? -eq 0
$CTL bogus > /dev/null 2>&1
check "unknown command: exit 2" test $? -eq 2
$CTL --help | grep -q "usage: granaryctl"
check "--help" test $? -eq 0

# SIGHUP: live keys apply, others are named as needing a restart, a broken
# file changes nothing; the daemon keeps serving throughout.
cp "$dir/g.conf" "$dir/g.conf.orig"
printf '[daemon]\nlog_level = debug\nmax_clients = 99\nmax_clients_per_uid = 77\n[source]\nattr_ttl = 5\nchunk_size = 2M\nmax_inflight = 8\n[prefetch]\nreadahead_max = 32M\nhint_window = 512M\nhint_max_entries = 1000\nhint_memory = 32M\nhint_memory_total = 300M\ndir_readahead = 8\n[dram]\npolicy = epoch\nmax_leased_per_client = 128M\nclient_lease_cache = 16M\nclient_lease_ttl = 2\n[nvme]\npolicy = s3fifo\n[peer]\nnodes = 127.0.0.1:7070\nnodes_file = /dev/null\n' > "$dir/g.conf.add"
merge_conf "$dir/g.conf.orig" "$dir/g.conf.add" > "$dir/g.conf"
kill -HUP "$pid"
sleep 0.5
grep -q "reload: \[daemon\] log_level = debug" "$dir/log"
check "SIGHUP applies log_level" test $? -eq 0
grep -q "reload: \[source\] attr_ttl = 5" "$dir/log"
check "SIGHUP applies attr_ttl" test $? -eq 0
grep -q "reload: \[dram\] policy = epoch" "$dir/log" && grep -q "reload: \[nvme\] policy = s3fifo" "$dir/log"
check "SIGHUP switches both tiers' policies" test $? -eq 0
$CTL -s "$dir/sock" config | grep -q "^policy = epoch"
check "config shows the new policy" test $? -eq 0
grep -q "chunk_size = 2M: takes effect after a restart" "$dir/log"
check "SIGHUP names what needs a restart" test $? -eq 0
# Every key --describe-config marks live was applied, and logged as such.
$GRANARYD --describe-config | awk 'NR > 1 && $0 ~ / live / { print $1 }' > "$dir/live"
missing=
for k in $(cat "$dir/live"); do
    grep -q "reload: \[${k%%.*}\] ${k#*.} = " "$dir/log" || missing="$missing $k"
done
check "SIGHUP applies every live key (missing:${missing:- none})" test -z "$missing"
$CTL -s "$dir/sock" config | grep -q "^max_inflight = 8"
check "config shows a live key's new value" test $? -eq 0
$CTL -s "$dir/sock" cat "$dir/src/big.bin" | cmp -s - "$dir/src/big.bin"
check "cached bytes still served after the policy switch" test $? -eq 0
echo "bogus line" >> "$dir/g.conf"
kill -HUP "$pid"
sleep 0.5
grep -q "keeping the running configuration" "$dir/log"
check "SIGHUP with a broken file keeps the configuration" test $? -eq 0
$CTL -s "$dir/sock" cat "$dir/src/big.bin" | cmp -s - "$dir/src/big.bin"
check "still serving after reloads" test $? -eq 0

kill -TERM "$pid"
wait "$pid"
check "SIGTERM: clean exit" test $? -eq 0
pid=
check "socket removed" test ! -e "$dir/sock"
grep -q "^granaryd info: stopped" "$dir/log"
check "logged its stop" test $? -eq 0

# The socket path never destroys what is there (issue 13): a typo naming
# a regular file leaves it alone, and the daemon says why it won't start.
printf 'keep me\n' > "$dir/important"
sed "s|^socket = .*|socket = $dir/important|" "$dir/g.conf.orig" > "$dir/typo.conf"
timeout 10 $GRANARYD --config "$dir/typo.conf" 2>"$dir/typo.log"
check "socket = a regular file: refused" test $? -ne 0
check "socket = a regular file: left alone" grep -qx "keep me" "$dir/important"
check "socket = a regular file: reason given" grep -q "not a socket" "$dir/typo.log"

# Client and daemon read one configuration the same way (issue 13):
# "[ daemon ]" with blanks, the socket found through $GRANARY_CONFIG.
sed "s|^\[daemon\]|[ daemon ]|; s|^socket = .*|socket = $dir/sock2|" "$dir/g.conf.orig" \
    > "$dir/blank.conf"
$GRANARYD --config "$dir/blank.conf" 2>>"$dir/log" &
pid=$!
i=0
while [ ! -S "$dir/sock2" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
env -u GRANARY_SOCKET GRANARY_CONFIG="$dir/blank.conf" $CTL stats >/dev/null 2>&1
check "[ daemon ]: granaryctl finds the daemon's socket" test $? -eq 0
kill -TERM "$pid"
wait "$pid"
pid=
# A key set twice: the daemon refuses to start, and the client refuses to
# guess which line the daemon would have taken.
printf '[daemon]\nsocket = %s/sock3\n' "$dir" >> "$dir/blank.conf"
$GRANARYD --check-config --config "$dir/blank.conf" >/dev/null 2>"$dir/twice.log"
check "a key set twice: daemon refuses" test $? -ne 0
check "a key set twice: says so" grep -q "set twice" "$dir/twice.log"
env -u GRANARY_SOCKET GRANARY_CONFIG="$dir/blank.conf" $CTL stats >/dev/null 2>&1
check "a key set twice: granaryctl refuses too" test $? -ne 0
[ $fails -eq 0 ]
