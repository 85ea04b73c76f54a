#!/bin/sh
# IO-pattern analysis (issue 19).
#  1. Offline, over bench/tracegen's traces (bench/analyze: the daemon's
#     classifier compiled in): each class within its first 10,000 requests,
#     and the recommended policy is bench/simulate's best on the same trace
#     at the same capacity (or within 0.01 of it: a tie).
#  2. A real granaryd and real reads (tests/an_workload, each in a process
#     group of its own, so each is a job): `granaryctl analyze --json` names
#     each job's class; the epoch job's recommended DRAM policy is what
#     bench/simulate finds best on the daemon's own trace_file of that job;
#     --job, bad arguments, an unknown job; the metrics page has the
#     verdicts; another user sees only their own jobs; --plot writes a
#     chart per job; --tree DIR (offline) counts files, sizes and the
#     metadata load of an epoch, and advises packing only for small files.
#  3. policy = auto: simulated over the traces (bench/analyze --auto, the
#     daemon's rule and policy_switch) within 0.02 of the best fixed policy
#     at D/C 1.1, 2 and 10; in a real daemon on a shuffled-epoch job, the
#     switch is logged with its reason and counted, and the last epoch's
#     DRAM hit ratio is within 0.02 of the best of fixed epoch and lru.
cd "$(dirname "$0")/.."
NAME=analyze
. tests/lib.sh
B=build/bench
W=build/tests/an_workload
PY=/usr/bin/python3

# ---- 1. offline ----
$B/tracegen epochs --items 20000 --epochs 3 --shuffle --size 100000 --seed 1 > "$dir/shuf.txt"
$B/tracegen epochs --items 2000 --epochs 6 --size 100000 --seed 2 > "$dir/same.txt"
$B/tracegen zipf --items 50000 --accesses 200000 --alpha 1.0 --size 100000 --seed 3 > "$dir/zipf.txt"
$B/tracegen scanmix --hot 2000 --scan 18000 --accesses 200000 --size 100000 --seed 4 > "$dir/scan.txt"
for t in shuf:shuffled-epoch same:shuffled-epoch zipf:random-small scan:mixed; do
    f=${t%%:*}
    want=${t#*:}
    got=$($B/analyze --requests 10000 --json "$dir/$f.txt" | sed -n 's/.*"class": "\([a-z-]*\)".*/\1/p')
    check "offline $f: $want within 10,000 requests (got $got)" test "$got" = "$want"
done
# recommended policy against the simulator, at D/C = 10 and 2 on the whole trace
for f in shuf zipf scan same; do
    for r in 10 2; do
        $B/analyze --ratio $r --json "$dir/$f.txt" > "$dir/a.json"
        cap=$(sed -n 's/.*"capacity": \([0-9]*\).*/\1/p' "$dir/a.json")
        $B/simulate --capacity "$cap" --json "$dir/$f.txt" > "$dir/s.json"
        res=$($PY - "$dir/a.json" "$dir/s.json" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
hr = {x['policy']: x['hit_ratio'] for x in s['results'] if x['policy'] not in ('static', 'belady')}
best = max(hr, key=hr.get)
rec = a['best_policy']
ok = rec == best or hr[best] - hr[rec] < 0.01
print("%s %s rec=%s(%.3f) sim_best=%s(%.3f)" % ("ok" if ok else "bad", sys.argv[1], rec, hr[rec], best, hr[best]))
EOF
)
        echo "    $res"
        check "offline $f at D/C $r: recommended policy is the simulator's best" \
            test "${res%% *}" = ok
    done
done

for f in shuf same zipf scan; do
    for r in 1.1 2 10; do
        $B/analyze --ratio $r --auto --json "$dir/$f.txt" | tail -1 > "$dir/auto.json"
        res=$($PY -c '
import json, sys
a = json.load(open(sys.argv[1]))
ok = a["auto_hit"] >= a["best_fixed_hit"] - 0.02
print("%s auto=%.3f(%d switches, %s) best=%s(%.3f)" % ("ok" if ok else "bad", a["auto_hit"],
      a["auto_switches"], a["auto_final"], a["best_fixed"], a["best_fixed_hit"]))' "$dir/auto.json")
        check "offline auto on $f at D/C $r within 0.02 of the best fixed: ${res#* }" \
            test "${res%% *}" = ok
    done
done

# ---- 2. a real daemon ----
chmod 755 "$dir"
mkdir -p "$dir/src/small" "$dir/src/big"
i=0
while [ $i -lt 3000 ]; do
    head -c $((20000 + (i * 7919) % 60000)) /dev/zero > "$dir/src/small/f$i"
    i=$((i + 1))
done
for k in 1 2 3 4; do head -c 32000000 /dev/urandom > "$dir/src/big/b$k"; done
chmod -R a+rX "$dir/src"
# (No read-ahead across files: its opens would be the daemon's, not the job's.)
write_conf "[daemon]
socket_mode = 0666
trace_file = $dir/trace
[prefetch]
dir_readahead = 0
[metrics]
listen = unix:$dir/metrics.sock"
start_daemon
S="-s $dir/sock"

# job: process group -> expected class, in $dir/jobs
run_job() {   # run_job CLASS ARGS...: an_workload in a process group of its own
    want=$1
    shift
    setsid $W "$dir/sock" "$@" > "$dir/w.out" 2>&1 &
    p=$!
    wait $p
    check "workload for $want ran ($(cat "$dir/w.out"))" test $? -eq 0
    echo "$p $want" >> "$dir/jobs"
}
: > "$dir/jobs"
run_job shuffled-epoch epoch 3 "$dir"/src/small/f*
$CTL $S analyze --json > "$dir/an1.json"
check "analyze --json after the epoch job: exit 0" test $? -eq 0
ep=$(cut -d' ' -f1 "$dir/jobs")
epjob=$($PY -c '
import json, sys
d = json.load(open(sys.argv[1])); print([j for j in d["jobs"] if j["pgid"] == int(sys.argv[2])][0]["job"])' \
    "$dir/an1.json" "$ep")
# metrics: the verdicts by job
curl -s --unix-socket "$dir/metrics.sock" http://localhost/metrics > "$dir/metrics"
grep -q "^granary_job_class{job=\"$epjob\",uid=\"0\",pgid=\"$ep\",class=\"shuffled-epoch\"} 1$" "$dir/metrics"
check "metrics: granary_job_class of the epoch job" test $? -eq 0
grep -q '^# TYPE granary_job_requests_total counter$' "$dir/metrics" &&
    grep -q "^granary_job_verdict_stable{job=\"$epjob\"," "$dir/metrics"
check "metrics: job requests and stability" test $? -eq 0
$CTL $S analyze --job "$epjob" --json > "$dir/one.json"
check "analyze --job: exit 0" test $? -eq 0
check "analyze --job: that one job" test "$($PY -c '
import json, sys; d = json.load(open(sys.argv[1])); print(len(d["jobs"]), d["jobs"][0]["job"])' "$dir/one.json")" = "1 $epjob"
# a clean stop writes the trace out: only the epoch job has read so far
kill "$pid" && wait "$pid"
pid=
mv "$dir/trace" "$dir/epoch.trace"
start_daemon
B4="$dir/src/big/b1 $dir/src/big/b2 $dir/src/big/b3 $dir/src/big/b4"
# shellcheck disable=SC2086
run_job sequential-large seq $B4 $B4 $B4
# Small reads inside chunks the client keeps (or kept: soft entries) never
# reach the daemon, so these two jobs read with the lease cache off.
GRANARY_LEASE_CACHE=0 run_job random-small random "$dir/src/big/b3" 3000
GRANARY_LEASE_CACHE=0 run_job strided strided "$dir/src/big/b4" 65536 4096
# shellcheck disable=SC2086
run_job checkpoint-burst ckpt 3 1500 $B4
run_job mixed mixed "$dir/src/big/b1" "$dir/src/big/b2" 3000

$CTL $S analyze --json > "$dir/an.json"
check "analyze --json: exit 0" test $? -eq 0
$PY - "$dir/an.json" "$dir/jobs" "$dir/an1.json" > "$dir/cmp" <<'EOF'
import json, sys
by_pgid = {}
for f in (sys.argv[3], sys.argv[1]):
    by_pgid.update({j['pgid']: j for j in json.load(open(f))['jobs']})
for line in open(sys.argv[2]):
    pg, want = line.split()
    j = by_pgid.get(int(pg))
    got = j['class'] if j else 'missing'
    print("%s %s %s requests=%s" % ("ok" if got == want else "bad", want, got, j and j['requests']))
EOF
while read -r res want got reqs; do
    check "daemon: the $want job is $got ($reqs)" test "$res" = ok
done < "$dir/cmp"

# The epoch job's recommended DRAM policy against the simulator on its trace.
$PY - "$dir/an1.json" "$ep" > "$dir/ep" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
j = [j for j in d['jobs'] if j['pgid'] == int(sys.argv[2])][0]
t = [t for t in j['tiers'] if t['tier'] == 'dram'][0]
print(t['best'], t['capacity'], j['job'])
EOF
read -r best cap epjob < "$dir/ep"
$B/simulate --capacity "$cap" --json "$dir/epoch.trace" > "$dir/s.json"
simbest=$($PY -c '
import json, sys
s = json.load(open(sys.argv[1]))
hr = {x["policy"]: x["hit_ratio"] for x in s["results"] if x["policy"] not in ("static", "belady")}
print(max(hr, key=hr.get))' "$dir/s.json")
check "daemon: epoch job's recommended dram policy ($best) is the simulator's best on its trace ($simbest)" \
    test "$best" = "$simbest"

$CTL $S analyze > "$dir/an.txt"
check "analyze (text): exit 0" test $? -eq 0
grep -q "sequential-large" "$dir/an.txt" && grep -q "recommendations:" "$dir/an.txt" &&
    grep -q "expected hit ratio, dram at 64.0 MiB: lru" "$dir/an.txt"
check "analyze (text): classes, hit ratios, recommendations" test $? -eq 0
$CTL $S analyze --job 999999 > /dev/null 2> "$dir/err"
check "analyze --job of no job: exit 1" test $? -eq 1
grep -q "no such job" "$dir/err"
check "analyze --job of no job: says so" test $? -eq 0
$CTL $S analyze --job abc > /dev/null 2>&1
check "analyze --job abc: exit 2" test $? -eq 2
$CTL $S analyze --frobnicate > /dev/null 2>&1
check "analyze --frobnicate: exit 2" test $? -eq 2
$CTL analyze --help | grep -q "usage: granaryctl analyze"
check "analyze --help" test $? -eq 0

# --plot: a chart per job (gnuplot)
mkdir -p "$dir/plots"
$CTL $S analyze --plot "$dir/plots" > /dev/null 2> "$dir/plot.err"
check "analyze --plot: exit 0" test $? -eq 0
n=$(ls "$dir/plots"/job*_hit_ratio.png 2>/dev/null | wc -l)
check "analyze --plot: a PNG per job ($n)" test "$n" -ge 5
head -c 8 "$(ls "$dir/plots"/job*_hit_ratio.png | head -1)" | od -An -c | grep -q "P   N   G"
check "analyze --plot: they are PNG files" test $? -eq 0
$CTL $S analyze --plot "$dir/nope" > /dev/null 2>&1
check "analyze --plot of no directory: exit 2" test $? -eq 2

# --tree: offline, no daemon needed
$CTL -s "$dir/none.sock" analyze --tree "$dir/src/small" --chunk 1M --json > "$dir/tree.json"
check "analyze --tree --json: exit 0 (no daemon asked)" test $? -eq 0
check "analyze --tree: 3000 files, all below a chunk, 6001 metadata operations an epoch" \
    test "$($PY -c '
import json, sys; t = json.load(open(sys.argv[1]))
print(t["files"], t["below_chunk"], t["epoch_metadata_ops"], sum(s["files"] for s in t["sizes"]))' "$dir/tree.json")" = "3000 3000 6001 3000"
$CTL analyze --tree "$dir/src/small" --chunk 1M --plot "$dir/plots" > "$dir/tree.txt" 2>&1
check "analyze --tree --plot: exit 0" test $? -eq 0
grep -q "packing: 100% of the files are smaller than a chunk" "$dir/tree.txt" &&
    grep -q "granaryctl dataset add $dir/src/small" "$dir/tree.txt"
check "analyze --tree: packing and dataset recommendations" test $? -eq 0
check "analyze --tree --plot: tree_sizes.png" test -s "$dir/plots/tree_sizes.png"
$CTL analyze --tree "$dir/src/big" > "$dir/tree2.txt"
grep -q "nothing to change for the layout" "$dir/tree2.txt" && ! grep -q packing "$dir/tree2.txt"
check "analyze --tree of 4 large files: no packing advice" test $? -eq 0
$CTL analyze --tree "$dir/nope" > /dev/null 2>&1
check "analyze --tree of no directory: exit 1" test $? -eq 1
$CTL analyze --tree "$dir/src" --job 1 > /dev/null 2>&1
check "analyze --tree with --job: exit 2" test $? -eq 2
$CTL analyze --tree "$dir/src" --chunk zz > /dev/null 2>&1
check "analyze --chunk zz: exit 2" test $? -eq 2

# another user sees only their own jobs
user=granary-test
id "$user" > /dev/null 2>&1 || useradd -M -N -s /usr/sbin/nologin "$user"
as_user() { setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups "$@"; }
as_user setsid $W "$dir/sock" random "$dir/src/big/b2" 500 > /dev/null
as_user $CTL $S analyze --json > "$dir/user.json"
check "non-admin: analyze allowed" test $? -eq 0
check "non-admin: only their own job" test "$($PY -c '
import json, sys; d = json.load(open(sys.argv[1])); print(sorted(set(j["uid"] for j in d["jobs"])), len(d["jobs"]))' "$dir/user.json")" = "[$(id -u "$user")] 1"
rootjob=$($PY -c '
import json, sys; print(json.load(open(sys.argv[1]))["jobs"][0]["job"])' "$dir/an.json")
as_user $CTL $S analyze --job "$rootjob" > /dev/null 2>&1
check "non-admin: root's job by id: refused (exit 1)" test $? -eq 1

kill "$pid" && wait "$pid"
pid=

# ---- 3. policy = auto in a real daemon ----
for pol in auto epoch lru; do
    rm -rf "$dir/nvme" "$dir/log"
    write_conf "[dram]
policy = $pol"
    start_daemon
    # 2000 files (~100 MB, DRAM 64M): three epochs, then the measured one
    setsid sh -c "$W $dir/sock epoch 3 $dir/src/small/f?    $dir/src/small/f??   $dir/src/small/f???  $dir/src/small/f1??? > /dev/null &&
        $CTL $S stats --json > $dir/s1 &&
        $W $dir/sock epoch 1 $dir/src/small/f?    $dir/src/small/f??   $dir/src/small/f???  $dir/src/small/f1??? > /dev/null &&
        $CTL $S stats --json > $dir/s2"
    check "policy = $pol: epochs ran" test $? -eq 0
    $PY -c '
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
d = lambda k: b[k] - a[k]
print("%.4f %d" % (d("hits_dram") / max(1, d("hits_dram") + d("hits_nvme") + d("misses")),
                   b["policy_switches"]))' "$dir/s1" "$dir/s2" > "$dir/hr.$pol"
    echo "    policy = $pol: last epoch's dram hit ratio, switches: $(cat "$dir/hr.$pol")"
    if [ $pol = auto ]; then
        grep -q "auto policy: \[dram\] lru -> epoch: job [0-9]* (uid 0, process group [0-9]*) reads shuffled-epoch" "$dir/log"
        check "policy = auto: the switch logged with its reason" test $? -eq 0
        check "policy = auto: one switch counted" test "$(cut -d' ' -f2 "$dir/hr.auto")" -eq 1
    fi
    kill "$pid" && wait "$pid"
    pid=
done
check "policy = auto within 0.02 of the best fixed policy (epoch, lru)" $PY -c '
import sys
a, e, l = (float(open(sys.argv[i]).read().split()[0]) for i in (1, 2, 3))
sys.exit(0 if a >= max(e, l) - 0.02 else 1)' "$dir/hr.auto" "$dir/hr.epoch" "$dir/hr.lru"
[ $fails -eq 0 ]
