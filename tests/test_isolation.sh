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
rc = L.gr_hint_append(c, ctypes.byref(h), 1)
# Stay connected while the daemon judges the range: a list dropped at
# disconnect counts nothing (under load the judging can take a while).
import time; time.sleep(2)
sys.exit(rc)" "$dir/sock" "$dir/src/secret"
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

restart() { kill "$pid"; wait "$pid"; pid=; rm -f "$dir/sock"; start_daemon; }
rss_kb() { sed -n 's/^VmRSS: *\([0-9]*\).*/\1/p' "/proc/$pid/status"; }
nfds() { ls "/proc/$pid/fd" | wc -l; }

# ---- issue 21: the attacks of an independent client ----

# 1. A HINT for a 0644 file inside another user's 0700 directory: judged
#    before anything is read (B may not search the directory), so no byte
#    of it is fetched, let alone mapped; the refusal is reported to B.
mkdir "$dir/src/privA"
python3 -c "
import os, sys
n = sys.argv[1].encode()
blk = n + os.urandom(4096 - len(n))
sys.stdout.buffer.write(blk * 1024)" "$needle-2" > "$dir/src/privA/readable"
chmod 644 "$dir/src/privA/readable"
chown -R "$userA" "$dir/src/privA"
chmod 700 "$dir/src/privA"
restart
src0=$(stat_of source_bytes_read)
for k in 1 2 3 4 5 6; do head -c 300000 /dev/urandom > "$dir/src/pub$k"; chmod 644 "$dir/src/pub$k"; done
pubs="$dir/src/public $dir/src/pub1 $dir/src/pub2 $dir/src/pub3 $dir/src/pub4 $dir/src/pub5 $dir/src/pub6"
as "$userB" env PROBE_EXPECT_HINT_ERROR=1 $PROBE hint-scan "$dir/sock" "$dir/src/privA/readable" \
    "$needle-2" $pubs > "$dir/probe3"
rc=$?
sed 's/^/  B: /' "$dir/probe3"
check "21.1: B's hint into A's 0700 directory: no byte of it mapped, refusal reported" test $rc -eq 0
check "21.1: and nothing of it read from the source" \
    test $(( $(stat_of source_bytes_read) - src0 )) -lt 4194304

# A file B may read but has not opened: hinted into quarantine (never in
# B's mapping, before its OPEN), then claimed by B's read: right bytes.
python3 -c "
import os, sys
n = sys.argv[1].encode()
blk = n + os.urandom(4096 - len(n))
sys.stdout.buffer.write(blk * 512)" "$needle-3" > "$dir/src/hinted"
chmod 644 "$dir/src/hinted"
# (New public files: B's reads of them must allocate, and so map, every
# segment B owns, the one holding the hinted chunks among them.)
for k in 1 2 3 4 5 6; do head -c 300000 /dev/urandom > "$dir/src/qub$k"; chmod 644 "$dir/src/qub$k"; done
qubs="$dir/src/qub1 $dir/src/qub2 $dir/src/qub3 $dir/src/qub4 $dir/src/qub5 $dir/src/qub6"
as "$userB" $PROBE hint-scan "$dir/sock" "$dir/src/hinted" "$needle-3" $qubs > "$dir/probe4"
rc=$?
sed 's/^/  B: /' "$dir/probe4"
check "21.1: an unproven hint lands in quarantine, never in B's mapping" test $rc -eq 0
as "$userB" $CTL -s "$dir/sock" cat "$dir/src/hinted" | cmp -s - "$dir/src/hinted"
check "21.1: B's own read of it: right bytes" test $? -eq 0
check "21.1: claimed from quarantine by B's proven read (dram_rehomed)" test "$(stat_of dram_rehomed)" -ge 1

# 2. A reads its secret with plain READs only (no segment fd ever handed
#    out); root evicts it; B's reads take that segment over: renewed, and no
#    byte of the secret in anything B maps.
restart
as "$userA" $PROBE read-plain "$dir/sock" "$dir/src/secret" | sed 's/^/  A: /'
$CTL -s "$dir/sock" evict "$dir/src/secret" > /dev/null
ren0=$(stat_of dram_segment_renewals)
as "$userB" $PROBE "$dir/sock" "$dir/src/secret" "$dir/src/public" "$needle" > "$dir/probe5"
rc=$?
sed 's/^/  B: /' "$dir/probe5"
check "21.2: B after A's never-exposed segment was freed: all probes pass" test $rc -eq 0
check "21.2: the segment changed owner: renewed" test "$(stat_of dram_segment_renewals)" -gt "$ren0"

# 5. Existence and activity: in a directory B may not search, a proofless
#    OPEN answers the same for a cached file and a missing one, and moves
#    no counter.
mkdir "$dir/src/privA2"
echo hello > "$dir/src/privA2/exists"
chmod 644 "$dir/src/privA2/exists"
chown -R "$userA" "$dir/src/privA2"
chmod 700 "$dir/src/privA2"
as "$userA" $CTL -s "$dir/sock" cat "$dir/src/privA2/exists" > /dev/null
hits0=$(stat_of attr_cache_hits)
s1=$(as "$userB" $PROBE open-status "$dir/sock" "$dir/src/privA2/exists")
s2=$(as "$userB" $PROBE open-status "$dir/sock" "$dir/src/privA2/missing")
check "21.5: an OPEN cannot tell a cached file from a missing one ($s1 vs $s2)" test "$s1" = "$s2"
check "21.5: and moves no per-path counter" test "$(stat_of attr_cache_hits)" -eq "$hits0"
as "$userB" $CTL -s "$dir/sock" cat "$dir/src/privA2/exists" > "$dir/out5" 2>&1
as "$userB" $CTL -s "$dir/sock" cat "$dir/src/privA2/missing" > "$dir/out6" 2>&1
check "21.5: granaryctl says the same (permission denied) for both" \
    sh -c "grep -q 'Permission denied' '$dir/out5' && grep -q 'Permission denied' '$dir/out6'"

# 4. Hint memory: one-range HINTs of a 4 TiB sparse file on 16 connections
#    of one user.  A range costs its bytes, not an entry per chunk; the user's
#    chunk budget takes the first and refuses the rest (E2BIG), and the
#    daemon's memory and descriptors stay where they were.
truncate -s 4T "$dir/src/sparse"
chmod 644 "$dir/src/sparse"
rss0=$(rss_kb)
fd0=$(nfds)
as "$userB" $PROBE hint-bomb "$dir/sock" "$dir/src/sparse" 16 1500 > "$dir/bomb" &
bomb=$!
sleep 1
rss1=$(rss_kb)
wait $bomb
sed 's/^/  B: /' "$dir/bomb"
check "21.4: the first HINT is taken, the other 31 refused (E2BIG)" \
    grep -q "accepted 1 refused_e2big 31 other 0" "$dir/bomb"
check "21.4: the daemon's memory meanwhile: +$(( (rss1 - rss0) / 1024 )) MiB (under 32)" \
    test $((rss1 - rss0)) -lt 32768
sleep 0.5
check "21.4: descriptors back to where they were ($fd0 -> $(nfds))" test "$(nfds)" -le "$fd0"
check "21.4: no hint memory left" test "$(stat_of hint_memory_bytes)" -eq 0
$CTL -s "$dir/sock" cat "$dir/src/public" | cmp -s - "$dir/src/public"
check "21.4: the daemon serves everyone after it" test $? -eq 0

# access_check = judge: the daemon judges B itself, with no proof.  What B
# may not read stays refused; what it may read it reads; and a judged hint
# goes straight into B's own memory (the judge is the final word: no
# quarantine, nothing to rehome).
kill "$pid"
wait "$pid"
pid=
echo "[daemon]
access_check = judge" >> "$dir/g.conf"
start_daemon
check "judge: B cannot read A's 0700 directory's file" \
      sh -c "! setpriv --reuid=$userB --regid=$(id -g "$userB") --clear-groups $CTL -s $dir/sock cat $dir/src/privA/readable > /dev/null 2>&1"
check "judge: B cannot read A's 0600 secret" \
      sh -c "! setpriv --reuid=$userB --regid=$(id -g "$userB") --clear-groups $CTL -s $dir/sock cat $dir/src/secret > /dev/null 2>&1"
as "$userB" $CTL -s "$dir/sock" cat "$dir/src/public" | cmp -s - "$dir/src/public"
check "judge: B reads what it may" test $? -eq 0
head -c 3000000 /dev/urandom > "$dir/src/jhinted"
chmod 644 "$dir/src/jhinted"
re0=$(stat_of dram_rehomed)
as "$userB" env PYTHONPATH=python GRANARY_LIB=build/libgranary.so /usr/bin/python3 -c "
import sys, time, granary
c = granary.Client(sys.argv[1])
c.hint([sys.argv[2]])
for _ in range(500):
    st = c.stats()
    if st.get('prefetch_issued', 0) >= 3:
        break
    time.sleep(0.01)
time.sleep(0.3)
data = c.open(sys.argv[2]).read()
sys.stdout.buffer.write(data)" "$dir/sock" "$dir/src/jhinted" > "$dir/jh.out" 2> "$dir/jh.err"
check "judge: B's hinted file read back right" cmp -s "$dir/jh.out" "$dir/src/jhinted"
check "judge: the judged hint went to B's memory, not quarantine (dram_rehomed $re0 -> $(stat_of dram_rehomed))" \
      test "$(stat_of dram_rehomed)" -eq "$re0"
check "judge: and was fetched by the hint (prefetch_issued > 0)" test "$(stat_of prefetch_issued)" -gt 0
sed -i 's/^access_check = judge$//' "$dir/g.conf"

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
