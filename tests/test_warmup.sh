#!/bin/sh
# granaryctl warmup against a real granaryd: a directory tree and a list
# file go to the NVMe tier (then reads cost the source nothing, even after a
# restart); a second run skips everything; a failure is reported and exits
# 1; --max-bandwidth paces a job; --cancel stops one; a job interrupted by a
# daemon stop resumes at the next start; --status lists jobs; bad usage is
# exit 2.
cd "$(dirname "$0")/.."
NAME=warmup
. tests/lib.sh
S="-s $dir/sock"

mkdir -p "$dir/src/ds/a/b" "$dir/src/big"
i=0
while [ $i -lt 200 ]; do
    head -c $((20000 + i * 37)) /dev/urandom > "$dir/src/ds/a/s$i"
    i=$((i + 1))
done
head -c 5000000 /dev/urandom > "$dir/src/ds/a/b/large"     # 5 chunks of 1M
head -c 300000 /dev/urandom > "$dir/src/listed1"
head -c 300000 /dev/urandom > "$dir/src/listed2"
head -c 24000000 /dev/urandom > "$dir/src/big/slow"         # 24 chunks
mkdir -p "$dir/src/big2"
head -c 24000000 /dev/urandom > "$dir/src/big2/slow2"
printf '%s\n# a comment\n\n%s\n' "$dir/src/listed1" "$dir/src/listed2" > "$dir/list"
write_conf "[nvme]
capacity = 256M"
start_daemon

out=$($CTL $S warmup "$dir/src/ds" --from-file "$dir/list" --wait)
rc=$?
echo "$out" | tail -1
check "warmup --wait: exit 0" test $rc -eq 0
echo "$out" | tail -1 | grep -q "done: 203 files, .* in 207 chunks, 0 chunks already cached (skipped), 0 failed"
check "warmup: 203 files, 207 chunks, final line says so" test $? -eq 0
check "warmup: counted in stats" test "$(stat_of warmup_files)" -eq 203
check "warmup: chunks on NVMe" test "$(stat_of nvme_chunks)" -ge 207
check "warmup: nothing in DRAM from it" test "$(stat_of dram_chunks)" -eq 0

out=$($CTL $S warmup "$dir/src/ds" --from-file "$dir/list" --wait)
check "second run: exit 0" test $? -eq 0
echo "$out" | tail -1 | grep -q "0 B cached in 0 chunks, 207 chunks already cached (skipped)"
check "second run: everything skipped" test $? -eq 0

before=$(stat_of source_bytes_read)
$CTL $S cat "$dir/src/ds/a/s17" | cmp -s - "$dir/src/ds/a/s17"
check "read after warmup: right bytes" test $? -eq 0
$CTL $S cat "$dir/src/ds/a/b/large" | cmp -s - "$dir/src/ds/a/b/large"
check "read after warmup: large file right" test $? -eq 0
check "read after warmup: no source read" test "$(stat_of source_bytes_read)" -eq "$before"

out=$($CTL $S warmup "$dir/src/nope" "$dir/src/listed1" --wait 2>&1)
check "a missing path: exit 1" test $? -eq 1
echo "$out" | grep -q "1 failed" && echo "$out" | grep -q "last error: .*nope.*No such file"
check "a missing path: failure and reason reported" test $? -eq 0
$CTL $S warmup /etc --wait > "$dir/out" 2>&1
check "outside the roots: exit 1" test $? -eq 1
grep -q "outside the source roots" "$dir/out"
check "outside the roots: says so" test $? -eq 0

# Paced at 4M/s, 24M takes about 6 s: cancel it on the way.
start_bytes=$(stat_of warmup_bytes)
out=$($CTL $S warmup "$dir/src/big" --max-bandwidth 4M)
check "background job: exit 0" test $? -eq 0
id=$(echo "$out" | sed -n 's/^warmup \([0-9]*\) started.*/\1/p')
check "background job: has an id" test -n "$id"
sleep 1
$CTL $S warmup --status | grep -q "^$id  *running"
check "status: the job is running" test $? -eq 0
$CTL $S warmup --cancel "$id" > /dev/null
check "cancel: exit 0" test $? -eq 0
sleep 0.3
$CTL $S warmup --status | grep -q "^$id  *cancelled"
check "status: cancelled" test $? -eq 0
cached=$(stat_of warmup_bytes)
sleep 1
check "cancelled: no more bytes" test "$(stat_of warmup_bytes)" -eq "$cached"
check "paced: about 4M/s, not all 24M in 1.3 s" test $((cached - start_bytes)) -le 12000000
$CTL $S warmup --cancel "$id" > /dev/null 2>&1
check "cancel twice: exit 1" test $? -eq 1

# Interrupted by a stop, resumed at the next start.
out=$($CTL $S warmup "$dir/src/big2" --max-bandwidth 4M)
id=$(echo "$out" | sed -n 's/^warmup \([0-9]*\) started.*/\1/p')
sleep 1
kill "$pid"
wait "$pid"
pid=
check "job file kept across the stop" test -f "$dir/nvme/warmup/$id.job"
start_daemon
grep -q "warmup $id: resuming" "$dir/log"
check "resumed at start" test $? -eq 0
i=0
while [ $i -lt 400 ] && ! $CTL $S warmup --status | grep -q "^$id  *done"; do
    sleep 0.1
    i=$((i + 1))
done
check "resumed job finishes" test $i -lt 400
check "resumed job's file removed" test ! -f "$dir/nvme/warmup/$id.job"
before=$(stat_of source_bytes_read)
$CTL $S cat "$dir/src/big2/slow2" | cmp -s - "$dir/src/big2/slow2"
check "resumed: whole file cached, right bytes" test $? -eq 0
check "resumed: read cost no source bytes" test "$(stat_of source_bytes_read)" -eq "$before"

$CTL $S warmup > /dev/null 2>&1
check "usage: no path is exit 2" test $? -eq 2
$CTL $S warmup --max-bandwidth fast x > /dev/null 2>&1
check "usage: bad rate is exit 2" test $? -eq 2

[ $fails -eq 0 ]
