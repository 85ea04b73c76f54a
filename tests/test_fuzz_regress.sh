#!/bin/sh
# The libFuzzer targets (tests/fuzz/) run once over their seed corpus and
# every input that once crashed them (tests/fuzz/regress/): a fixed finding
# stays fixed.  Needs clang with its libFuzzer runtime; without it, says so
# and skips.  Fuzzing proper is `make fuzz`.
set -u
cd "$(dirname "$0")/.." || exit 2
if ! why=$(tests/fuzz/fuzz.sh probe); then
    echo "skip fuzz_regress: $why (apt-get install clang libclang-rt-14-dev, or make fuzz)"
    exit 0
fi
fails=0
out=$(make -s --no-print-directory fuzz-regress 2>&1) || fails=1
echo "$out"
if [ "$fails" -eq 0 ] && echo "$out" | grep -q '^FAIL'; then
    fails=1
fi
if [ "$fails" -ne 0 ]; then
    echo "FAIL fuzz_regress"
    exit 1
fi
echo "ok   fuzz_regress"
