#!/bin/sh
# The Python package (python/granary) against a real granaryd: the unittest
# suites python/tests/test_client.py (file-object semantics against Python's
# own files, read_range, stats, errors, fork safety, the Dataset) and
# python/tests/test_hints.py (Client.hint reaching the daemon, HintingSampler
# sending each epoch's order, a 4-worker DataLoader over the cache yielding
# exactly the dataset), python/tests/test_vision.py (GranaryImageFolder
# against torchvision's ImageFolder: attributes, the same tensors and labels
# through a 2-worker DataLoader, read through the daemon; HintingSampler
# hinting a torchvision ImageFolder every epoch and warning, never raising,
# over datasets it cannot hint) and python/tests/test_fs.py (granary.fs:
# walk, stat, scandir, listdir from a registered dataset's manifest, against
# os's answers for the same tree), python/tests/test_ckpt.py (granary.ckpt.save
# publishing what its saver wrote, status, wait, refusals); the DataLoader tests only where torch is
# installed (make test's deps.sh installs python3-torch), with a SKIP line
# otherwise.
# Then the example training loop for a few samples.  Python is Debian's,
# /usr/bin/python3.
cd "$(dirname "$0")/.."
NAME=py
. tests/lib.sh
PY=/usr/bin/python3

mkdir -p "$dir/src" "$dir/src/example"
write_conf
start_daemon

for suite in test_client test_hints test_vision test_fs test_ckpt; do
    GRANARY_SOCKET="$dir/sock" GRANARY_TEST_ROOT="$dir/src" PYTHONPATH=python \
        timeout 60 $PY python/tests/$suite.py -v > "$dir/$suite.log" 2>&1
    rc=$?
    sed 's/^/    /' "$dir/$suite.log"
    check "python unittest suite (python/tests/$suite.py)" test $rc -eq 0
    grep -q "^OK" "$dir/$suite.log"
    check "python/tests/$suite.py ran and passed" test $? -eq 0
done
if ! $PY -c 'import torch' 2>/dev/null; then
    echo "SKIP: torch DataLoader tests: torch not importable by $PY (Debian: python3-torch; scripts/deps.sh installs it)"
fi

GRANARY_SOCKET="$dir/sock" timeout 30 $PY examples/train_loop.py --data "$dir/src/example" \
    --samples 64 --size 16384 --epochs 1 > "$dir/example.log" 2>&1
rc=$?
sed 's/^/    /' "$dir/example.log"
check "examples/train_loop.py runs" test $rc -eq 0
grep -q "granary + hints.*samples/s" "$dir/example.log"
check "example read through granary with hints" test $? -eq 0
grep -q "LD_PRELOAD shim.*samples/s" "$dir/example.log"
check "example read through the LD_PRELOAD shim" test $? -eq 0

kill -TERM "$pid"
wait "$pid"
check "daemon clean exit" test $? -eq 0
pid=
[ $fails -eq 0 ]
