#!/bin/sh
# The Prometheus endpoint of a real granaryd: counters move when a file is
# read, the page passes `promtool check metrics`, a real Prometheus server
# scrapes it, other paths are 404, and a metrics port already taken stops
# a second daemon at start-up.  Loopback only.  Installs curl and the
# Debian `prometheus` package if missing (skips those checks, saying why,
# where it cannot).
cd "$(dirname "$0")/.."
NAME=metrics
. tests/lib.sh
pid2=
ppid_=
cleanup() {
    for p in $ppid_ $pid2 $pid; do
        kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
skip() { echo "skip $1"; }

updated=
need_pkg() {    # need_pkg COMMAND PACKAGE: 0 when COMMAND is (now) available
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "     ($1 missing; not root or no apt-get: cannot install $2)"
        return 1
    fi
    echo "     (installing $2)"
    if [ -z "$updated" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$dir/apt.log" 2>&1
        updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" \
        >>"$dir/apt.log" 2>&1 || { echo "     (apt-get install $2 failed:" \
        "$(tail -n 1 "$dir/apt.log"))"; return 1; }
    command -v "$1" >/dev/null 2>&1
}

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if ! need_pkg curl curl; then
    echo "FAIL curl is needed to talk to the endpoint"
    exit 1
fi

port=$(free_port)
head -c 5000000 /dev/urandom > "$dir/src/big.bin"
write_conf "[metrics]
listen = 127.0.0.1:$port"
start_daemon
url=http://127.0.0.1:$port/metrics
i=0
until curl -s -o /dev/null "$url" || [ $i -ge 100 ]; do sleep 0.05; i=$((i + 1)); done
grep -q "metrics on http://127.0.0.1:$port/metrics" "$dir/log"
check "daemon logs the metrics address" test $? -eq 0

value() {   # value FILE SERIES: the sample's value, or empty
    awk -v s="$2" '$1 == s { print $2; exit }' "$1"
}
positive() { [ -n "$1" ] && [ "$1" -gt 0 ] 2>/dev/null; }

curl -s -o "$dir/m0" "$url"
check "scrape before reading" test "$(value "$dir/m0" granary_source_bytes_read_total)" = 0

$CTL -s "$dir/sock" cat "$dir/src/big.bin" > "$dir/out"
check "granaryctl cat identical" cmp -s "$dir/out" "$dir/src/big.bin"

code=$(curl -s -D "$dir/hdr" -o "$dir/m1" -w '%{http_code}' "$url")
check "GET /metrics is 200" test "$code" = 200
grep -qi '^content-type: text/plain; version=0.0.4; charset=utf-8' "$dir/hdr"
check "Content-Type is the 0.0.4 text format" test $? -eq 0
check "granary_source_bytes_read_total moved to the file size" \
    test "$(value "$dir/m1" granary_source_bytes_read_total)" = 5000000
check "granary_misses_total moved" positive "$(value "$dir/m1" granary_misses_total)"
check "read latency histogram counted" \
    positive "$(value "$dir/m1" 'granary_request_duration_seconds_count{op="read"}')"
check "open latency histogram counted" \
    positive "$(value "$dir/m1" 'granary_request_duration_seconds_count{op="open"}')"
check "per-tier capacity" \
    test "$(value "$dir/m1" 'granary_tier_capacity_bytes{tier="nvme"}')" = 67108864
check "every HELP has a TYPE" \
    test "$(grep -c '^# HELP' "$dir/m1")" -eq "$(grep -c '^# TYPE' "$dir/m1")"
check "GET /other is 404" test "$(curl -s -o /dev/null -w '%{http_code}' \
    "http://127.0.0.1:$port/other")" = 404
check "POST /metrics is 405" test "$(curl -s -o /dev/null -w '%{http_code}' -X POST \
    "$url")" = 405

# promtool: the page is valid exposition format and passes its lint.
if need_pkg promtool prometheus; then
    promtool check metrics < "$dir/m1" > "$dir/promtool.out" 2>&1
    rc=$?
    sed 's/^/     promtool: /' "$dir/promtool.out"
    check "promtool check metrics (exit $rc, $(wc -l < "$dir/promtool.out") problems)" \
        test $rc -eq 0 -a ! -s "$dir/promtool.out"
else
    skip "promtool check metrics (promtool unavailable, see above)"
fi

# A real Prometheus server scrapes the daemon every second.
if need_pkg prometheus prometheus; then
    pport=$(free_port)
    cat > "$dir/prom.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: granary
    static_configs:
      - targets: ['127.0.0.1:$port']
YML
    prometheus --config.file="$dir/prom.yml" --storage.tsdb.path="$dir/tsdb" \
        --web.listen-address="127.0.0.1:$pport" > "$dir/prom.log" 2>&1 &
    ppid_=$!
    q="http://127.0.0.1:$pport/api/v1/query?query=granary_source_bytes_read_total"
    got=
    i=0
    while [ $i -lt 60 ]; do     # ~30 s
        got=$(curl -s "$q" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
try:
    r = json.load(sys.stdin)["data"]["result"]
    print(r[0]["value"][1] if r else "")
except Exception:
    print("")' 2>/dev/null)
        [ -n "$got" ] && [ "$got" != 0 ] && break
        kill -0 "$ppid_" 2>/dev/null || break
        sleep 0.5
        i=$((i + 1))
    done
    check "Prometheus scraped granary_source_bytes_read_total = ${got:-nothing}" \
        test "${got:-0}" = 5000000
    [ "${got:-0}" = 5000000 ] || tail -n 15 "$dir/prom.log" | sed 's/^/     prometheus: /'
    kill "$ppid_" 2>/dev/null
    wait "$ppid_" 2>/dev/null
    ppid_=
else
    skip "Prometheus scrape (prometheus unavailable, see above)"
fi

# Same metrics port, another socket: the second daemon must not start.
sed "s#^socket = .*#socket = $dir/sock2#; s#^path = .*#path = $dir/nvme2#" \
    "$dir/g.conf" > "$dir/g2.conf"
$GRANARYD --config "$dir/g2.conf" 2>"$dir/log2" &
pid2=$!
i=0
while kill -0 "$pid2" 2>/dev/null && [ $i -lt 250 ]; do sleep 0.04; i=$((i + 1)); done
wait "$pid2" 2>/dev/null
rc=$?
pid2=
check "metrics port in use: second daemon exits non-zero" test $rc -ne 0
grep -q "metrics.*Address already in use" "$dir/log2"
check "metrics port in use: says so ($(grep -m1 -o 'listen.*in use' "$dir/log2"))" \
    test $? -eq 0
check "metrics port in use: no socket left behind" test ! -e "$dir/sock2"
check "first daemon still serves metrics" \
    test "$(curl -s -o /dev/null -w '%{http_code}' "$url")" = 200

kill "$pid"
wait "$pid"
rc=$?
pid=
check "daemon exits 0 on SIGTERM" test $rc -eq 0
check "port released at exit" test "$(curl -s -o /dev/null -w '%{http_code}' "$url")" = 000

[ $fails -eq 0 ] || { echo "$fails failed; daemon log:"; tail -n 20 "$dir/log"; exit 1; }
echo "all passed"
