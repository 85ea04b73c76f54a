#!/bin/sh
# granaryctl's operator commands against a real granaryd: health, config,
# top, evict, invalidate, pin, unpin, warmup; admin commands refused for a user who
# is neither root nor in admin_group, allowed for one in it.
cd "$(dirname "$0")/.."
NAME=admin
. tests/lib.sh
chmod 755 "$dir"
user=granary-test
group=granary-test-admin

head -c 3000000 /dev/urandom > "$dir/src/data.bin"
chmod 644 "$dir/src/data.bin"
write_conf "[daemon]
socket_mode = 0666
admin_group = $group"
# A second, unprivileged user, and an admin group (created once, kept).
getent group "$group" > /dev/null || groupadd "$group"
id "$user" > /dev/null 2>&1 || useradd -M -N -s /usr/sbin/nologin "$user"
start_daemon

out=$($CTL -s "$dir/sock" health)
check "health: exit 0" test $? -eq 0
echo "$out" | grep -q "^ok: 1 source roots readable"
check "health: says ok" test $? -eq 0
$CTL -s "$dir/sock" config | grep -q "^chunk_size = 1M"
check "config: the running configuration" test $? -eq 0
$CTL -s "$dir/sock" top -n 2 -i 0.1 > "$dir/top" 2>&1
check "top: two samples, not a tty" test "$(wc -l < "$dir/top")" -eq 3

$CTL -s "$dir/sock" cat "$dir/src/data.bin" > /dev/null
src1=$(stat_of source_bytes_read)
$CTL -s "$dir/sock" evict "$dir/src/data.bin" > "$dir/out"
check "evict: exit 0" test $? -eq 0
grep -q "evicted: 1 files, 3 chunks in dram" "$dir/out"
check "evict: says what it dropped" test $? -eq 0
check "evict: dram empty" test "$(stat_of dram_chunks)" -eq 0
$CTL -s "$dir/sock" cat "$dir/src/data.bin" | cmp -s - "$dir/src/data.bin"
check "after evict: bytes still right" test $? -eq 0
check "after evict: read from the source again" test "$(stat_of source_bytes_read)" -gt "$src1"

$CTL -s "$dir/sock" pin "$dir/src/data.bin" > "$dir/out"
check "pin: exit 0" test $? -eq 0
check "pin: pinned bytes counted" test "$(stat_of dram_pinned_bytes)" -gt 0
# Pinned chunks stay in DRAM while 1.5x the tier of other data goes through.
$CTL -s "$dir/sock" cat "$dir/src/data.bin" > /dev/null
head -c 100000000 /dev/urandom > "$dir/src/flood.bin"
$CTL -s "$dir/sock" cat "$dir/src/flood.bin" > /dev/null
src1=$(stat_of source_bytes_read)
nvme1=$(stat_of hits_nvme)
$CTL -s "$dir/sock" cat "$dir/src/data.bin" | cmp -s - "$dir/src/data.bin"
check "pinned file: right bytes after a flood" test $? -eq 0
check "pinned file: still in DRAM (no source read, no NVMe hit)" \
    test "$(stat_of source_bytes_read)" -eq "$src1" -a "$(stat_of hits_nvme)" -eq "$nvme1"
check "pinned file: the flood did evict other chunks" test "$(stat_of evictions_dram)" -gt 0
$CTL -s "$dir/sock" unpin "$dir/src/data.bin" > /dev/null
check "unpin: pinned bytes back to 0" test "$(stat_of dram_pinned_bytes)" -eq 0
$CTL -s "$dir/sock" invalidate "$dir/src/data.bin" > "$dir/out"
check "invalidate: exit 0" test $? -eq 0
grep -q "invalidated: 1 files, 3 chunks in dram" "$dir/out"
check "invalidate: dropped the file's 3 chunks" test $? -eq 0

# A directory: every file below it (a dataset).
mkdir -p "$dir/src/ds/sub"
for f in a b c; do head -c 100000 /dev/urandom > "$dir/src/ds/$f"; done
head -c 100000 /dev/urandom > "$dir/src/ds/sub/d"
ln -s /etc/passwd "$dir/src/ds/escape"
for f in a b c sub/d; do $CTL -s "$dir/sock" cat "$dir/src/ds/$f" > /dev/null; done
$CTL -s "$dir/sock" pin "$dir/src/ds" > "$dir/out"
grep -q "pinned: 4 files, 4 chunks in dram" "$dir/out"
check "pin of a directory: its 4 files, symlink not followed" test $? -eq 0
$CTL -s "$dir/sock" unpin "$dir/src/ds" > /dev/null
$CTL -s "$dir/sock" pin "$dir/src" > "$dir/out"
grep -q "pinned: [0-9]* files" "$dir/out"
check "pin of a whole source root" test $? -eq 0
$CTL -s "$dir/sock" unpin "$dir/src" > /dev/null
$CTL -s "$dir/sock" evict "$dir/src/ds" > "$dir/out"
grep -q "evicted: 4 files, 4 chunks in dram" "$dir/out"
check "evict of a directory: its 4 files" test $? -eq 0

$CTL -s "$dir/sock" evict "$dir/src/none" > /dev/null 2> "$dir/err"
check "evict of a missing file: exit 1" test $? -eq 1
grep -q "No such file" "$dir/err"
check "evict of a missing file: says why" test $? -eq 0
$CTL -s "$dir/sock" evict /etc/passwd > /dev/null 2> "$dir/err"
check "evict outside the roots: exit 1" test $? -eq 1
$CTL -s "$dir/sock" evict > /dev/null 2>&1
check "evict without a path: exit 2" test $? -eq 2
for c in top health config evict invalidate pin unpin; do
    $CTL $c --help | grep -q "usage: granaryctl $c"
    check "$c --help" test $? -eq 0
done

# The unprivileged user: reads and stats yes, admin commands no.
as_user() { setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups "$@"; }
as_admin() { setpriv --reuid="$user" --regid="$(id -g "$user")" --groups="$(getent group "$group" | cut -d: -f3)" "$@"; }
as_user $CTL -s "$dir/sock" health > /dev/null
check "non-admin: health allowed" test $? -eq 0
as_user $CTL -s "$dir/sock" evict "$dir/src/data.bin" > /dev/null 2> "$dir/err"
check "non-admin: evict refused with exit 4" test $? -eq 4
grep -q "admin commands are for root" "$dir/err"
check "non-admin: says why" test $? -eq 0
as_user $CTL -s "$dir/sock" pin "$dir/src/data.bin" > /dev/null 2>&1
check "non-admin: pin refused" test $? -eq 4
as_user $CTL -s "$dir/sock" warmup "$dir/src/data.bin" --wait > /dev/null 2>&1
check "non-admin: warmup refused with exit 4" test $? -eq 4
as_user $CTL -s "$dir/sock" warmup --cancel 1 > /dev/null 2>&1
check "non-admin: warmup --cancel refused" test $? -eq 4
as_user $CTL -s "$dir/sock" warmup --status > /dev/null
check "non-admin: warmup --status allowed" test $? -eq 0
as_admin $CTL -s "$dir/sock" evict "$dir/src/data.bin" > /dev/null 2> "$dir/err"
check "admin_group member: evict allowed" test $? -eq 0
as_admin $CTL -s "$dir/sock" warmup "$dir/src/data.bin" --wait > /dev/null 2>&1
check "admin_group member: warmup allowed" test $? -eq 0

# Health reports a vanished source root.
mv "$dir/src" "$dir/src.gone"
$CTL -s "$dir/sock" health > "$dir/out"
check "health: unhealthy root gives exit 1" test $? -eq 1
grep -q "unhealthy: source root" "$dir/out"
check "health: names the root" test $? -eq 0
mv "$dir/src.gone" "$dir/src"

kill -TERM "$pid"
wait "$pid"
check "SIGTERM: clean exit" test $? -eq 0
pid=

# A peer the daemon cannot identify (SO_PEERCRED fails) is refused, never
# taken for root (issue 13): here an unprivileged user's evict.
echo "peercred socket:" > "$dir/faults"
rm -f "$dir/sock"
FAULTINJECT_CONTROL="$dir/faults" LD_PRELOAD=build/tests/libfaultinject.so \
    $GRANARYD --config "$dir/g.conf" 2>>"$dir/log" &
pid=$!
i=0
while [ ! -S "$dir/sock" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
as_user $CTL -s "$dir/sock" evict "$dir/src/data.bin" > /dev/null 2> "$dir/err"
check "SO_PEERCRED fails: an unprivileged evict is refused" test $? -ne 0
check "  with the reason" grep -q "could not identify" "$dir/err"
: > "$dir/faults"
as_user $CTL -s "$dir/sock" cat "$dir/src/data.bin" | cmp -s - "$dir/src/data.bin"
check "  and the next client is served" test $? -eq 0
kill -TERM "$pid"
wait "$pid"
pid=
[ $fails -eq 0 ]
