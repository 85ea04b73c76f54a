#!/bin/sh
# Run every test: the Check suites (unit and integration) built normally and
# under ASan+UBSan, the shell tests (tests/test_*.sh, among them
# test_systemd_vm.sh: the unit under a real systemd in QEMU), and the
# integration suite with the daemon under valgrind (skip that with
# VALGRIND=0).  A shell test that cannot run here passes and says SKIP.
# Prints one line per suite and a closing "N passed, N failed" line; exits
# non-zero if anything failed.
set -u
cd "$(dirname "$0")/.." || exit 2

passed=0
failed=0
failures=""
logdir=build/test-logs
mkdir -p "$logdir"

run() {   # run NAME COMMAND...
    name=$1
    shift
    log="$logdir/$(echo "$name" | tr ' /' '__').log"
    start=$(date +%s)
    if "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        printf '%-40s ok    (%ss)\n' "$name" $(($(date +%s) - start))
    else
        failed=$((failed + 1))
        failures="$failures $name"
        printf '%-40s FAIL  (%ss, log %s)\n' "$name" $(($(date +%s) - start)) "$log"
        tail -n 30 "$log" | sed 's/^/    /'
    fi
    grep -h '^[0-9]*%: Checks' "$log" 2>/dev/null | sed 's/^/    /'
    # A test that cannot run here passes with "SKIP..." lines: show them.
    grep -h '^SKIP' "$log" 2>/dev/null | sed 's/^/    /'
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

for t in build/tests/check_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    GRANARYD=build/granaryd run "$n" "$t"
done
for t in build/san/tests/check_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    GRANARYD=build/san/granaryd run "$n (asan+ubsan)" "$t"
done
for t in tests/test_*.sh; do
    [ -f "$t" ] || continue
    run "$(basename "$t" .sh)" sh "$t"
done
if [ "${VALGRIND:-1}" = 1 ]; then
    GRANARYD=scripts/valgrind_granaryd.sh run "check_daemon (valgrind)" build/tests/check_daemon
fi

echo
[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
