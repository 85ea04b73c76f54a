#!/bin/bash
# test_faults.sh - source and cache-device faults: granaryd runs with
# build/tests/libfaultinject.so preloaded (rules in $dir/faults, see
# tests/faultinject.c) and clients must get the right bytes or a clear
# error, never a wrong byte; nothing half-read is cached; other files keep
# being served; everything works again once the fault clears.  Also the
# source mount vanishing and coming back, and the NVMe filesystem filling
# up (tmpfs mounts: root only, else an injected ENOSPC).
set -u
cd "$(dirname "$0")/.." || exit 2
NAME=faults
. tests/lib.sh
FI=$PWD/build/tests/libfaultinject.so
mnt_src= mnt_nvme=
faults_cleanup() {
    [ -n "$mnt_src" ] && umount -l "$mnt_src" 2>/dev/null
    [ -n "$mnt_nvme" ] && umount -l "$mnt_nvme" 2>/dev/null
    cleanup
}
trap faults_cleanup EXIT INT TERM
export GRANARY_TIMEOUT_MS=20000 GRANARY_RECONNECT_MS=2000

fault() { echo "$*" > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"; }
nofault() { : > "$dir/faults.new"; mv "$dir/faults.new" "$dir/faults"; }
# gcat FILE: read FILE through the daemon into $dir/out; status of granaryctl
gcat() { $CTL -s "$dir/sock" cat "$1" > "$dir/out" 2> "$dir/err"; }
same() { cmp -s "$dir/out" "$1"; }
fails_clearly() {   # fails_clearly FILE PATTERN: the read fails, with PATTERN in its message
    ! gcat "$1" && grep -qiE "$2" "$dir/err"
}
health() { $CTL -s "$dir/sock" health 2>&1; }
wait_stat() {   # wait_stat NAME OP VALUE [SECONDS]: until the counter compares
    for _ in $(seq 1 $((${4:-10} * 20))); do
        v=$(stat_of "$1")
        [ -n "$v" ] && [ "$v" "$2" "$3" ] && return 0
        sleep 0.05
    done
    echo "    $1 = ${v:-?}, wanted $2 $3"
    return 1
}
mkfile() { head -c "$2" /dev/urandom > "$1"; }

boot() {   # boot: granaryd with the fault library, on $dir/g.conf
    rm -f "$dir/sock"
    FAULTINJECT_CONTROL="$dir/faults" FAULTINJECT_LOG="$dir/injected" LD_PRELOAD="$FI" \
        $GRANARYD --config "$dir/g.conf" 2>>"$dir/log" &
    pid=$!
    for _ in $(seq 1 500); do [ -S "$dir/sock" ] && break; sleep 0.02; done
    check "daemon started" test -S "$dir/sock"
}
halt() { kill "$pid"; wait "$pid" 2>/dev/null; pid=; }

for f in a b c d e f g h; do mkfile "$dir/src/$f" $((3 * 1048576 + 12345)); done
nofault
write_conf "[source]
attr_ttl = 0.1
[dram]
capacity = 16M"
boot

echo "== source faults"
fault "eio /src/a"
check "EIO on the source: a clear error" fails_clearly "$dir/src/a" "input/output"
check "another file is served meanwhile" sh -c "$CTL -s $dir/sock cat $dir/src/b | cmp -s - $dir/src/b"
nofault
gcat "$dir/src/a"; check "after the fault clears: correct bytes (nothing bad was cached)" same "$dir/src/a"

fault "short /src/c"
gcat "$dir/src/c"; check "short reads from the source: correct bytes" same "$dir/src/c"
nofault

fault "eof /src/d"
check "source file looks truncated: a clear error" fails_clearly "$dir/src/d" "shrank|stale"
nofault
gcat "$dir/src/d"; check "  then correct bytes" same "$dir/src/d"

# A file that changes size while its chunks are being read (slow reads).
fault "delay /src/e 150"
cp "$dir/src/e" "$dir/e.old"
gcat "$dir/src/e" & catpid=$!
sleep 0.2
head -c 70000 /dev/urandom >> "$dir/src/e"
wait $catpid; rc=$?
if [ $rc -eq 0 ]; then
    check "file grew mid-read: the old bytes whole" same "$dir/e.old"
else
    check "file grew mid-read: a clear error" grep -qiE "stale|changed" "$dir/err"
fi
nofault
gcat "$dir/src/e"; check "  a new read gets the new file" same "$dir/src/e"

# A file that vanishes mid-read.
fault "delay /src/f 150"
gcat "$dir/src/f" & catpid=$!
sleep 0.2
mv "$dir/src/f" "$dir/f.away"
wait $catpid; rc=$?
if [ $rc -eq 0 ]; then
    check "file vanished mid-read: its bytes whole (read before it went)" same "$dir/f.away"
else
    check "file vanished mid-read: a clear error (ENOENT or ESTALE)" grep -qiE "no such file|stale" "$dir/err"
fi
check "  gone: a clear error" fails_clearly "$dir/src/f" "no such file"
mv "$dir/f.away" "$dir/src/f"
nofault
sleep 0.2
gcat "$dir/src/f"; check "  back again: correct bytes" same "$dir/src/f"

# A slow file does not hold up the others.
fault "delay /src/g 400"
gcat "$dir/src/g" & catpid=$!
sleep 0.1
t0=$(date +%s%N)
$CTL -s "$dir/sock" cat "$dir/src/h" | cmp -s - "$dir/src/h"; ok=$?
t=$(( ($(date +%s%N) - t0) / 1000000 ))
check "a fast file is served while a slow one is read ($t ms)" test $ok -eq 0 -a $t -lt 1200
wait $catpid
check "  and the slow one arrives right" same "$dir/src/g"
nofault
check "source errors were counted" [ "$(stat_of source_errors)" -gt 0 ]

echo "== the source mount goes away and comes back"
if mkdir -p "$dir/src/mnt" && mount -t tmpfs -o size=32M tmpfs "$dir/src/mnt" 2>/dev/null; then
    mnt_src="$dir/src/mnt"
    mkfile "$dir/m1" 2200000
    mkfile "$dir/m2" 2200000
    cp -p "$dir/m1" "$dir/m2" "$mnt_src/"
    gcat "$mnt_src/m1"; check "file on the mount reads right" same "$dir/m1"
    umount -l "$mnt_src"
    sleep 0.2
    check "mount gone: a clear error for an uncached file" fails_clearly "$mnt_src/m2" "no such file"
    check "mount gone: a clear error for a cached one too (it is not there)" fails_clearly "$mnt_src/m1" "no such file"
    check "the daemon serves the rest" sh -c "$CTL -s $dir/sock cat $dir/src/a | cmp -s - $dir/src/a"
    mount -t tmpfs -o size=32M tmpfs "$mnt_src"
    cp -p "$dir/m1" "$dir/m2" "$mnt_src/"
    sleep 0.2
    gcat "$mnt_src/m1"; check "mount back: correct bytes" same "$dir/m1"
    gcat "$mnt_src/m2"; check "mount back: correct bytes (m2)" same "$dir/m2"
    umount -l "$mnt_src"; mnt_src=
else
    echo "skip mount tests (cannot mount tmpfs here)"
fi

echo "== NVMe tier: write errors"
wr0=$(stat_of nvme_writes)
for i in 1 2 3 4 5 6; do mkfile "$dir/src/w$i" 2097152; done   # whole chunks: all in slot files
fault "weio /nvme/data-"
for i in 1 2 3 4 5 6; do gcat "$dir/src/w$i"; same "$dir/src/w$i" || echo "    w$i wrong"; done
check "device write errors: bytes still right" same "$dir/src/w6"
check "  the tier goes offline (nvme_state 2)" wait_stat nvme_state -eq 2 5
check "  health says so" sh -c "$CTL -s $dir/sock health 2>&1 | grep -q 'nvme tier offline'"
check "  counted" [ "$(stat_of nvme_io_errors)" -gt 0 ]
nofault
i=0
while [ "$(stat_of nvme_state)" != 0 ] && [ $i -lt 100 ]; do
    mkfile "$dir/src/r$i" 70000; gcat "$dir/src/r$i"; sleep 0.1; i=$((i + 1))
done
check "device fine again: the tier comes back (state 0)" [ "$(stat_of nvme_state)" = 0 ]
check "  and stores chunks again" wait_stat nvme_writes -gt "$wr0" 5
check "  health ok" sh -c "$CTL -s $dir/sock health 2>&1 | grep -q '^ok'"

echo "== NVMe tier: a wall-clock step during the back-off (issue 13)"
# The back-off runs on the monotonic clock: with the wall clock stepped an
# hour back while the tier is offline, it still comes back within seconds.
wr1=$(stat_of nvme_writes)
for i in 1 2 3 4 5 6; do mkfile "$dir/src/s$i" 2097152; done
fault "weio /nvme/data-"
for i in 1 2 3 4 5 6; do gcat "$dir/src/s$i"; done
check "write errors again: offline" wait_stat nvme_state -eq 2 5
fault "clockstep - -3600"
i=0
while [ "$(stat_of nvme_state)" != 0 ] && [ $i -lt 100 ]; do
    mkfile "$dir/src/c$i" 70000; gcat "$dir/src/c$i"; sleep 0.1; i=$((i + 1))
done
check "clock stepped back an hour: the tier still comes back" [ "$(stat_of nvme_state)" = 0 ]
check "  and stores chunks again" wait_stat nvme_writes -gt "$wr1" 5
nofault

echo "== NVMe tier: read errors and lying reads"
# Files of whole chunks only: every NVMe read of them is a slot read of a
# data file, which the fault fails.  (a..d end in a 12345-byte chunk kept
# inside RocksDB, whose reads succeed and break the run of errors that
# takes the tier offline when one completes between them: that made this
# check depend on the order read-ahead's reads came back in.)
for f in r1 r2 r3 r4; do mkfile "$dir/src/$f" $((3 * 1048576)); done
for f in a b c d r1 r2 r3 r4; do gcat "$dir/src/$f"; done
sleep 1
halt
fault "eio /nvme/data-"
boot
n0=$(stat_of nvme_chunks)
for f in r1 r2 r3 r4; do gcat "$dir/src/$f"; same "$dir/src/$f" || echo "    $f wrong"; done
check "device read errors: bytes still right" same "$dir/src/r4"
check "  counted ($n0 chunks were on NVMe)" [ "$(stat_of nvme_io_errors)" -gt 0 ]
check "  the tier goes offline" [ "$(stat_of nvme_state)" = 2 ]
check "  health says so" sh -c "$CTL -s $dir/sock health 2>&1 | grep -q unhealthy"
halt
fault "flip /nvme/data-"
boot
for f in a b c d; do gcat "$dir/src/$f"; same "$dir/src/$f" || echo "    $f wrong"; done
check "NVMe returns wrong bytes: detected by checksum, bytes still right" same "$dir/src/d"
check "  checksum errors counted" [ "$(stat_of nvme_checksum_errors)" -gt 0 ]
nofault
halt

echo "== NVMe filesystem fills up"
rm -rf "$dir/nvme"
mkdir -p "$dir/nvme"
if mount -t tmpfs -o size=12M tmpfs "$dir/nvme" 2>/dev/null; then
    mnt_nvme="$dir/nvme"
else
    echo "(cannot mount tmpfs: injecting ENOSPC instead)"
fi
boot
[ -z "$mnt_nvme" ] && fault "wnospc /nvme/data-"
for i in $(seq 1 12); do mkfile "$dir/src/z$i" 2000000; done
bad=0
for i in $(seq 1 12); do gcat "$dir/src/z$i"; same "$dir/src/z$i" || bad=$((bad + 1)); done
check "filesystem full: every byte right" [ $bad -eq 0 ]
check "  the tier says full (nvme_state 1)" wait_stat nvme_state -eq 1 5
check "  out-of-space errors counted" [ "$(stat_of nvme_space_errors)" -gt 0 ]
check "  health says so" sh -c "$CTL -s $dir/sock health 2>&1 | grep -q 'nvme tier full'"
bad=0
for i in $(seq 1 12); do gcat "$dir/src/z$i"; same "$dir/src/z$i" || bad=$((bad + 1)); done
check "  cached chunks still served from it, bytes right" [ $bad -eq 0 ]
if [ -n "$mnt_nvme" ]; then
    mount -o remount,size=128M "$mnt_nvme"
else
    nofault
fi
i=0
while [ "$(stat_of nvme_state)" != 0 ] && [ $i -lt 100 ]; do
    mkfile "$dir/src/y$i" 1100000; gcat "$dir/src/y$i"; sleep 0.1; i=$((i + 1))
done
check "space again: the tier comes back" [ "$(stat_of nvme_state)" = 0 ]
halt
[ -n "$mnt_nvme" ] && { umount -l "$mnt_nvme"; mnt_nvme=; }

check "faults were really injected" test -s "$dir/injected"
[ $fails -eq 0 ]
