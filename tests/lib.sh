# tests/lib.sh - what the shell tests share: a scratch directory removed on
# exit, the ok/FAIL check helper, and a real granaryd on a temporary
# configuration.  Sourced from the repository root after setting NAME:
#     NAME=cli; . tests/lib.sh
# Defines: GRANARYD, CTL, dir, pid, fails, check, stat_of, write_conf,
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
# port (tests run side by side); then EXTRA (later keys win).
write_conf() {
    cat > "$dir/g.conf" <<CONF
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
${1:-}
CONF
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
