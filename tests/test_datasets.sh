#!/bin/sh
# tests/test_datasets.sh - registered datasets (issue 15) as an operator and a
# user meet them: granaryctl dataset add/list/remove/rescan, stat and ls
# answered from the manifest and checked against coreutils' own stat and ls,
# READDIR paging over a directory of 5000 entries, the staleness rules
# (changed, removed and added files within the stamp window and past it),
# a restart that loads the manifest instead of scanning, a SIGKILL in the
# middle of a scan leaving the old manifest or the new one, and hostile
# registrations refused with the daemon still serving.
NAME=datasets
. tests/lib.sh
C="$CTL -s $dir/sock"
ds=$dir/src/ds

mkdir -p "$ds/a/deep/er" "$ds/big" "$ds/b"
for i in 1 2 3 4 5; do echo "file $i" > "$ds/a/f$i"; done
echo deep > "$ds/a/deep/er/x"
echo stamp > "$dir/src/STAMP"
i=0
while [ $i -lt 5000 ]; do : > "$ds/big/e$i"; i=$((i + 1)); done
chmod 755 "$dir" "$dir/src"
write_conf "[daemon]
access_check = judge
socket_mode = 0666"
start_daemon

wait_ready() {   # wait_ready ID: until dataset ID is ready (10 s)
    for _ in $(seq 1 500); do
        $C dataset list | grep -q "^dataset $1 .*: ready," && return 0
        sleep 0.02
    done
    return 1
}

out=$($C dataset add "$ds" --stamp "$dir/src/STAMP" --recheck 1)
check "dataset add names the dataset" sh -c "echo '$out' | grep -q '^dataset 1 registered'"
check "its scan finishes" wait_ready 1
check "dataset list counts its 5006 files" sh -c "$C dataset list | grep -q ' 5006 files'"

# stat from the manifest against coreutils' stat of the same files
same_stat() {   # same_stat PATH: granaryctl stat and stat(1) agree
    g=$($C stat "$1" | awk '{print $2, $3, $4, $5, $7}')
    k=$(stat -c '%a %u %g %s %i' "$1" | awk '{printf "%06d %s %s %s %s\n", $1, $2, $3, $4, $5}')
    [ "$g" = "$k" ]
}
check "stat of a file agrees with stat(1)" same_stat "$ds/a/f3"
check "stat of a directory agrees with stat(1)" same_stat "$ds/a/deep"
check "stat of the top agrees with stat(1)" same_stat "$ds"
l0=$(stat_of dataset_lookups)
$C stat "$ds/a/f1" > /dev/null
check "the stat was the manifest's (dataset_lookups grew)" [ "$(stat_of dataset_lookups)" -gt "$l0" ]
check "a missing file is ENOENT from the manifest" \
      sh -c "$C stat '$ds/a/nope' 2>&1 | grep -q 'as of the dataset.s last scan'"

# readdir: 5000 entries in two pages, the same names as ls(1)
$C ls "$ds/big" | sort > "$dir/g.ls"
ls -1 "$ds/big" | sort > "$dir/k.ls"
check "ls of 5000 entries (two READDIR pages) = ls(1)" cmp -s "$dir/g.ls" "$dir/k.ls"
check "ls of a directory shows subdirectories with /" sh -c "$C ls '$ds/a' | grep -qx 'deep/'"
check "cat of a manifest file gives its bytes" sh -c "[ \"\$($C cat '$ds/a/f2')\" = 'file 2' ]"
check "opens were the manifest's (dataset_opens)" [ "$(stat_of dataset_opens)" -ge 1 ]

# staleness: within the window (stamp untouched) the manifest's view holds
echo "file 1, longer now" > "$ds/a/f1"
rm "$ds/a/f2"
echo new > "$ds/a/f6"
sleep 1.2       # past recheck, but the stamp did not change: still the old view
check "within the window: an added file is not there yet" sh -c "! $C stat '$ds/a/f6' 2>/dev/null"
check "within the window: a removed file is still listed" sh -c "$C ls '$ds/a' | grep -qx f2"
check "within the window: a changed file is never served mixed (old bytes or an error)" \
      sh -c "o=\$($C cat '$ds/a/f1' 2>&1); [ \"\$o\" = 'file 1' ] || echo \"\$o\" | grep -qi 'stale\\|changed\\|no such'"
# past it: the stamp changes, one recheck later the rescan shows the change
scans=$(stat_of dataset_scans)
sleep 0.1; echo again > "$dir/src/STAMP"
sleep 1.1
$C stat "$ds" > /dev/null          # a use triggers the due stamp check
for _ in $(seq 1 250); do [ "$(stat_of dataset_scans)" -gt "$scans" ] && break; sleep 0.02; done
check "past the window: the stamp's change rescanned" [ "$(stat_of dataset_scans)" -gt "$scans" ]
check "past the window: the added file is there" sh -c "$C stat '$ds/a/f6' > /dev/null"
check "past the window: the removed file is gone" sh -c "! $C ls '$ds/a' | grep -qx f2"
check "past the window: the changed file's new size" same_stat "$ds/a/f1"
check "past the window: the changed file's new bytes" \
      sh -c "[ \"\$($C cat '$ds/a/f1')\" = 'file 1, longer now' ]"

# hostile or wrong registrations: refused, and the daemon goes on serving
check "a path outside the roots is refused" sh -c "! $C dataset add /etc 2>/dev/null"
check "a dataset inside a registered one is refused" sh -c "! $C dataset add '$ds/a' 2>/dev/null"
check "a dataset around a registered one is refused" sh -c "! $C dataset add '$dir/src' 2>/dev/null"
check "a file is not a dataset" sh -c "$C dataset add '$dir/src/STAMP' >/dev/null 2>&1; \
      for i in \$(seq 1 100); do $C dataset list | grep -q 'STAMP.*failed' && exit 0; sleep 0.02; done; exit 1"
check "remove of an unknown id fails" sh -c "! $C dataset remove 99 2>/dev/null"
check "a non-admin cannot register" sh -c "! su nobody -s /bin/sh -c '$C dataset add $ds/b' 2>/dev/null"
check "a non-admin may list" su nobody -s /bin/sh -c "$C dataset list > /dev/null"
check "still serving" sh -c "$C stat '$ds/a/f3' > /dev/null"

# a restart loads the manifest: no scan
kill "$pid"; wait "$pid"; pid=
scans_before=$(ls "$dir/nvme/datasets")
start_daemon
check "after a restart the dataset is ready at once" wait_ready 1
check "after a restart no scan ran (dataset_scans 0)" [ "$(stat_of dataset_scans)" = 0 ]
check "after a restart stat is answered from it" same_stat "$ds/a/f3"

# SIGKILL during scans: the manifest on disk is always a whole one, old or new
i=0
while [ $i -lt 20000 ]; do : > "$ds/big/n$i"; i=$((i + 1)); done
kills=0 bad=0
for round in 1 2 3 4 5; do
    $C dataset rescan 1 > /dev/null 2>&1
    sleep "0.0$((round * 2))"
    kill -9 "$pid"; wait "$pid" 2>/dev/null; pid=
    kills=$((kills + 1))
    start_daemon > /dev/null
    wait_ready 1 || bad=$((bad + 1))
    n=$($C dataset list | sed -n 's/.* ready, \([0-9]*\) files.*/\1/p')
    [ "$n" = 5006 ] || [ "$n" = 25006 ] || bad=$((bad + 1))
    grep -q "manifest.*invalid\|checksum" "$dir/log" && bad=$((bad + 1))
done
check "$kills SIGKILLs during scans: every restart found the old manifest or the new, whole" [ "$bad" = 0 ]
check "no temporary manifest left behind" sh -c "! ls '$dir/nvme/datasets' | grep -q tmp"
check "dataset remove" sh -c "$C dataset remove 1 > /dev/null && ! $C dataset list | grep -q '^dataset 1 '"
check "after remove, stat asks the file system" sh -c "$C stat '$ds/a/f3' > /dev/null"
check "daemon alive" kill -0 "$pid"
[ $fails -eq 0 ]
