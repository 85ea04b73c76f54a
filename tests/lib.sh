# tests/lib.sh - what the shell tests share: a scratch directory removed on
# exit, the ok/FAIL check helper, and a real granaryd on a temporary
# configuration.  Sourced from the repository root after setting NAME:
#     NAME=cli; . tests/lib.sh
# Defines: GRANARYD, CTL, dir, pid, fails, check, stat_of, write_conf, merge_conf,
# start_daemon.  Each test ends with `[ $fails -eq 0 ]`.
set -u
GRANARYD=${GRANARYD:-build/granaryd}
CTL=build/granaryctl
dir=$(mktemp -d "/tmp/granary-$NAME-XXXXXX")
pid=
fails=0
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
mkdir -p "$dir/src"

check() {   # check DESCRIPTION COMMAND...
    d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}

stat_of() {   # stat_of NAME: one counter of the daemon's, from stats --json
    $CTL -s "$dir/sock" stats --json | sed -n "s/.*\"$1\": *\([0-9]*\).*/\1/p"
}

# write_conf [EXTRA]: $dir/g.conf with the socket $dir/sock, the root
# $dir/src, 1M chunks, 64M of DRAM, 64M of NVMe at $dir/nvme, no metrics
# port (tests run side by side); then EXTRA, merged in: a key of EXTRA
# replaces the same key of the base (granaryd refuses a key set twice).
write_conf() {
    cat > "$dir/g.conf.base" <<CONF
[daemon]
socket = $dir/sock
[source]
roots = $dir/src
chunk_size = 1M
[dram]
capacity = 64M
[nvme]
path = $dir/nvme
capacity = 64M
[metrics]
listen =
CONF
    printf '%s\n' "${1:-}" > "$dir/g.conf.extra"
    merge_conf "$dir/g.conf.base" "$dir/g.conf.extra" > "$dir/g.conf"
    rm -f "$dir/g.conf.base" "$dir/g.conf.extra"
}

# merge_conf BASE EXTRA: BASE with EXTRA's keys put in (replacing a key
# of the same section and name, else added to the section).
merge_conf() {
    awk '
    function key(l) { sub(/^[ \t]*/, "", l); sub(/[ \t]*=.*/, "", l); return l }
    function sec(l) { sub(/^[ \t]*\[[ \t]*/, "", l); sub(/[ \t]*\].*/, "", l); return l }
    function flush(s,   i) {
        for (i = 1; i <= n; i++) if (osec[i] == s && !used[i]) { print oline[i]; used[i] = 1 }
    }
    FNR == 1 && NR != 1 { cur = "" }
    FNR == NR {
        if ($0 ~ /^[ \t]*\[/) { cur = sec($0); next }
        if ($0 ~ /=/ && cur != "") { n++; osec[n] = cur; okey[n] = key($0); oline[n] = $0 }
        next
    }
    {
        if ($0 ~ /^[ \t]*\[/) { if (cur != "") flush(cur); cur = sec($0); seen[cur] = 1; print; next }
        if ($0 ~ /=/) {
            k = key($0)
            for (i = 1; i <= n; i++) if (osec[i] == cur && okey[i] == k && !used[i]) { print oline[i]; used[i] = 1; next }
        }
        print
    }
    END {
        if (cur != "") flush(cur)
        for (i = 1; i <= n; i++) if (!used[i]) {
            if (!(osec[i] in printed)) { print "[" osec[i] "]"; printed[osec[i]] = 1 }
            print oline[i]; used[i] = 1
            for (j = i + 1; j <= n; j++) if (osec[j] == osec[i] && !used[j]) { print oline[j]; used[j] = 1 }
        }
    }' "$2" "$1"
}

# start_daemon: $GRANARYD on $dir/g.conf (stderr in $dir/log), its pid in
# $pid; waits up to 10 s for the socket and checks it appeared.
start_daemon() {
    $GRANARYD --config "$dir/g.conf" 2>>"$dir/log" &
    pid=$!
    i=0
    while [ ! -S "$dir/sock" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
    check "daemon started" test -S "$dir/sock"
}
