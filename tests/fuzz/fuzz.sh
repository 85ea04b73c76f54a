#!/bin/sh
# The fuzzing steps behind `make fuzz` and `make fuzz-regress` (Makefile);
# the targets themselves are tests/fuzz/fuzz_*.c, built into build/fuzz/.
#
#   fuzz.sh probe            exit 0 if clang can build a libFuzzer target, else
#                            print why on stdout and exit 1
#   fuzz.sh deps             install clang and its fuzzer runtime if missing
#   fuzz.sh run SECONDS      fuzz each target for SECONDS (-max_total_time) on a
#                            copy of its corpus in build/fuzz/corpus/<target>/
#                            (grown across runs; tests/fuzz/corpus stays as
#                            committed); crash inputs land in
#                            build/fuzz/artifacts/<target>/
#   fuzz.sh regress          run each target once over every file in
#                            tests/fuzz/corpus/<target>/ and tests/fuzz/regress/<target>/
#
# Targets: proto (fuzz_proto: proto/proto.c), config (fuzz_config: daemon/core/config.c).
# A finding: fix the code, then copy the crash input into
# tests/fuzz/regress/<target>/ under a name that says what it was.
set -u
cd "$(dirname "$0")/../.." || exit 2

FUZZ_CC=${FUZZ_CC:-clang}
OUT=build/fuzz
TARGETS="proto config"

# Largest input per target: a whole message (PROTO_MAX_MSG + 8), and a config
# with CONFIG_MAX_ROOTS roots of PATH_MAX bytes.
max_len() {
    case $1 in
    proto) echo 132128 ;;
    config) echo 70000 ;;
    esac
}

probe() {
    if ! command -v "$FUZZ_CC" >/dev/null 2>&1; then
        echo "$FUZZ_CC not found"
        return 1
    fi
    d=$(mktemp -d /tmp/granary-fuzzprobe-XXXXXX) || return 1
    printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$d/p.c"
    if ! "$FUZZ_CC" -fsanitize=fuzzer,address,undefined -o "$d/p" "$d/p.c" >"$d/log" 2>&1; then
        echo "$FUZZ_CC cannot link -fsanitize=fuzzer (libFuzzer runtime missing?): $(head -n 1 "$d/log")"
        rm -rf "$d"
        return 1
    fi
    rm -rf "$d"
    return 0
}

deps() {
    probe >/dev/null && return 0
    # clang-14 is Debian 12's clang; libclang-rt-14-dev holds libFuzzer.
    pkgs="clang libclang-rt-14-dev"
    echo "fuzz: installing $pkgs"
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq || return 1
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $pkgs || return 1
    why=$(probe) || { echo "fuzz: still cannot build fuzz targets: $why"; return 1; }
}

run() {
    secs=$1
    status=0
    for t in $TARGETS; do
        bin=$OUT/fuzz_$t
        corpus=$OUT/corpus/$t
        art=$OUT/artifacts/$t
        log=$OUT/fuzz_$t.log
        mkdir -p "$corpus" "$art"
        cp tests/fuzz/corpus/$t/* "$corpus/"
        set -- "$corpus"
        [ -d tests/fuzz/regress/$t ] && set -- "$@" tests/fuzz/regress/$t
        echo "fuzz_$t: ${secs}s, corpus $corpus, log $log"
        "$bin" -max_total_time="$secs" -max_len="$(max_len $t)" -dict=tests/fuzz/$t.dict \
            -print_final_stats=1 -artifact_prefix="$art/" "$@" >"$log" 2>&1
        rc=$?
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | grep -o 'cov: [0-9]*')
        units=$(ls "$corpus" | wc -l)
        if [ "$rc" -eq 0 ]; then
            echo "fuzz_$t: ok, ${execs:-?} executions, $cov, corpus $units inputs"
        else
            status=1
            echo "fuzz_$t: FAIL (exit $rc) after ${execs:-?} executions; input in $art/, log $log"
            grep -E 'check failed|ERROR: |runtime error|SUMMARY' "$log" | head -n 5 | sed 's/^/    /'
        fi
    done
    return $status
}

regress() {
    status=0
    for t in $TARGETS; do
        files=$(find tests/fuzz/corpus/$t tests/fuzz/regress/$t -type f 2>/dev/null | sort)
        n=$(echo "$files" | grep -c .)
        log=$OUT/regress_$t.log
        mkdir -p "$OUT"
        # Files as arguments: each runs once; no corpus is written.
        # shellcheck disable=SC2086
        if "$OUT/fuzz_$t" -runs=1 $files >"$log" 2>&1; then
            echo "ok   fuzz_$t: $n inputs"
        else
            status=1
            echo "FAIL fuzz_$t: log $log"
            grep -E 'Running: |check failed|ERROR: |runtime error|SUMMARY' "$log" | tail -n 6 | sed 's/^/    /'
        fi
    done
    return $status
}

case ${1:-} in
probe) probe ;;
deps) deps ;;
run) run "${2:-60}" ;;
regress) regress ;;
*) echo "usage: $0 probe|deps|run SECONDS|regress" >&2; exit 2 ;;
esac
