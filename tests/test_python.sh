#!/bin/sh
# The Python package (python/granary) against a real granaryd: the unittest
# suite python/tests/test_client.py (file-object semantics against Python's
# own files, read_range, stats, errors, fork safety, the Dataset; the
# DataLoader test only where torch is installed), then the example training
# loop for a few samples.  Python is Debian's, /usr/bin/python3.
set -u
cd "$(dirname "$0")/.."
GRANARYD=${GRANARYD:-build/granaryd}
PY=/usr/bin/python3
dir=$(mktemp -d /tmp/granary-py-XXXXXX)
pid=
fails=0
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
check() {   # check DESCRIPTION COMMAND...
    d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}

mkdir -p "$dir/src" "$dir/src/example"
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
CONF
$GRANARYD --config "$dir/g.conf" 2>"$dir/log" &
pid=$!
i=0
while [ ! -S "$dir/sock" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
check "daemon started" test -S "$dir/sock"

GRANARY_SOCKET="$dir/sock" GRANARY_TEST_ROOT="$dir/src" PYTHONPATH=python \
    timeout 50 $PY python/tests/test_client.py -v > "$dir/unittest.log" 2>&1
rc=$?
sed 's/^/    /' "$dir/unittest.log"
check "python unittest suite (python/tests/test_client.py)" test $rc -eq 0
grep -q "^OK" "$dir/unittest.log"
check "python suite ran and passed" test $? -eq 0
if ! $PY -c 'import torch' 2>/dev/null; then
    echo "skip torch DataLoader test: torch not installed for $PY (Debian: python3-torch)"
fi

GRANARY_SOCKET="$dir/sock" timeout 30 $PY examples/train_loop.py --data "$dir/src/example" \
    --samples 64 --size 16384 --epochs 1 > "$dir/example.log" 2>&1
rc=$?
sed 's/^/    /' "$dir/example.log"
check "examples/train_loop.py runs" test $rc -eq 0
grep -q "granary.*samples/s" "$dir/example.log"
check "example read through granary" test $? -eq 0

kill -TERM "$pid"
wait "$pid"
check "daemon clean exit" test $? -eq 0
pid=
[ $fails -eq 0 ]
