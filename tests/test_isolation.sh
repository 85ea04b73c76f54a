#!/bin/sh
# Multi-user isolation against a real granaryd: user A caches its 0600
# file; user B (another uid, no privileges) can neither open it through any
# call nor find one byte of it in the shared memory it is given, not even
# in an arena segment that held A's chunks before (renewed on the change of
# owner); B cannot write any segment; B's hints for it are refused; a
# world-readable file A cached reaches B with the right bytes; B opening
# thousands of connections cannot lock others out (max_clients_per_uid).
cd "$(dirname "$0")/.."
NAME=isolation
. tests/lib.sh
chmod 755 "$dir"
chmod 755 "$dir/src"
userA=granary-test2
userB=granary-test
PROBE=build/tests/isolation_probe
id "$userA" > /dev/null 2>&1 || useradd -M -N -s /usr/sbin/nologin "$userA"
id "$userB" > /dev/null 2>&1 || useradd -M -N -s /usr/sbin/nologin "$userB"
as() { u=$1; shift; setpriv --reuid="$u" --regid="$(id -g "$u")" --clear-groups "$@"; }

needle="GRANARY-SECRET-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
# 4 chunks of 1M, the needle every 4K.
python3 -c "
import os, sys
n = sys.argv[1].encode()
blk = n + os.urandom(4096 - len(n))
sys.stdout.buffer.write(blk * 1024)" "$needle" > "$dir/src/secret"
chown "$userA" "$dir/src/secret"
chmod 600 "$dir/src/secret"
head -c 1000000 /dev/urandom > "$dir/src/public"
head -c 1500000 /dev/urandom > "$dir/src/pubA"
chmod 644 "$dir/src/public" "$dir/src/pubA"
# 16M of DRAM: an arena of 3 segments of 4M.
write_conf "[daemon]
socket_mode = 0666
max_clients_per_uid = 64
[dram]
capacity = 16M
[nvme]
path =
[prefetch]
readahead_max = 0"
start_daemon

# A caches its secret (filling one segment), then it is evicted: that
# segment is wholly free, and was exposed to A.
as "$userA" $CTL -s "$dir/sock" cat "$dir/src/secret" | cmp -s - "$dir/src/secret"
check "A reads its own file" test $? -eq 0
$CTL -s "$dir/sock" evict "$dir/src/secret" > /dev/null
check "root evicts it" test $? -eq 0

# B's first reads claim that segment: it must come renewed.
as "$userB" $PROBE "$dir/sock" "$dir/src/secret" "$dir/src/public" "$needle" > "$dir/probe1"
rc=$?
sed 's/^/  B: /' "$dir/probe1"
check "B, after A's chunks were evicted: all probes pass" test $rc -eq 0
check "the segment changed owner: renewed" test "$(stat_of dram_segment_renewals)" -ge 1

# A caches the secret again and a world-readable file; B probes again.
as "$userA" $CTL -s "$dir/sock" cat "$dir/src/secret" > /dev/null
as "$userA" $CTL -s "$dir/sock" cat "$dir/src/pubA" > /dev/null
before=$(stat_of source_bytes_read)
as "$userB" $PROBE "$dir/sock" "$dir/src/secret" "$dir/src/pubA" "$needle" > "$dir/probe2"
rc=$?
sed 's/^/  B: /' "$dir/probe2"
check "B, while A has it cached: all probes pass" test $rc -eq 0
check "B's read of A's cached public file came from DRAM" \
    test "$(stat_of source_bytes_read)" -eq "$before"
check "refused opens counted" test "$(stat_of access_denied)" -ge 4

# Hints for a file B cannot read are skipped.
errs=$(stat_of hint_errors)
as "$userB" /usr/bin/python3 -c "
import ctypes, sys
L = ctypes.CDLL('build/libgranary.so')
class H(ctypes.Structure):
    _fields_ = [('path', ctypes.c_char_p), ('off', ctypes.c_uint64), ('len', ctypes.c_uint64)]
L.gr_connect.restype = ctypes.c_void_p
L.gr_hint_append.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
c = L.gr_connect(sys.argv[1].encode())
h = H(sys.argv[2].encode(), 0, 0)
sys.exit(L.gr_hint_append(c, ctypes.byref(h), 1))" "$dir/sock" "$dir/src/secret"
check "B's hint call itself succeeds" test $? -eq 0
i=0
while [ "$(stat_of hint_errors)" -le "$errs" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
check "B's hint for A's 0600 file is refused (hint_errors)" test "$(stat_of hint_errors)" -gt "$errs"

# B opens 2000 connections; the limit per uid holds them to 64, and root
# (another uid) still reads.
mkdir "$dir/b" && chmod 777 "$dir/b"
as "$userB" /usr/bin/python3 -c "
import socket, sys, time
socks = []
for i in range(2000):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(sys.argv[1])
    except OSError:
        pass
    socks.append(s)
open(sys.argv[2], 'w').write('held')
time.sleep(4)" "$dir/sock" "$dir/b/held" &
hog=$!
i=0
while [ ! -f "$dir/b/held" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
$CTL -s "$dir/sock" cat "$dir/src/public" | cmp -s - "$dir/src/public"
check "while B holds 2000 connections, another user reads" test $? -eq 0
check "B's connections over its limit were refused" test "$(stat_of connections_refused)" -ge 1900
check "B holds at most its share" test "$(stat_of connections)" -le 66
wait $hog
check "daemon alive" kill -0 "$pid"

# access_check = none (a single-user node): no proof asked, B reads.
kill "$pid"
wait "$pid"
pid=
echo "[daemon]
access_check = none" >> "$dir/g.conf"
start_daemon
as "$userB" $CTL -s "$dir/sock" cat "$dir/src/public" | cmp -s - "$dir/src/public"
check "access_check = none: B reads" test $? -eq 0

[ $fails -eq 0 ]
