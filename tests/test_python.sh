#!/bin/sh
# The Python package (python/granary) against a real granaryd: the unittest
# suite python/tests/test_client.py (file-object semantics against Python's
# own files, read_range, stats, errors, fork safety, the Dataset; the
# DataLoader test only where torch is installed), then the example training
# loop for a few samples.  Python is Debian's, /usr/bin/python3.
cd "$(dirname "$0")/.."
NAME=py
. tests/lib.sh
PY=/usr/bin/python3

mkdir -p "$dir/src" "$dir/src/example"
write_conf
start_daemon

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
