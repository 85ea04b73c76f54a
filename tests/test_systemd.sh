#!/bin/sh
# systemd integration: `systemd-analyze verify` finds nothing to say about
# systemd/granaryd.service (ExecStart pointed at the built granaryd, man
# pages from man/), and granaryd speaks the notify protocol to a socket this
# script listens on: READY=1 only once its socket exists, WATCHDOG=1 at half
# of WATCHDOG_USEC, STOPPING=1 on SIGTERM; also on an abstract socket.
set -u
cd "$(dirname "$0")/.." || exit 2
top=$(pwd)
GRANARYD=${GRANARYD:-build/granaryd}
case $GRANARYD in /*) ;; *) GRANARYD=$top/$GRANARYD ;; esac
dir=$(mktemp -d /tmp/granary-systemd-XXXXXX)
fails=0
trap 'rm -rf "$dir"' EXIT INT TERM
check() {   # check DESCRIPTION COMMAND...
    d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}

# ---- the unit -------------------------------------------------------------
if command -v systemd-analyze >/dev/null 2>&1; then
    for s in 1 3 5 8; do
        mkdir -p "$dir/man/man$s"
        for p in man/*."$s"; do ln -s "$top/$p" "$dir/man/man$s/"; done
    done
    mkdir "$dir/unit"
    sed "s|^ExecStart=/usr/sbin/granaryd |ExecStart=$GRANARYD |" systemd/granaryd.service \
        > "$dir/unit/granaryd.service"
    check "unit names /usr/sbin/granaryd (rewritten by make install)" \
        grep -q '^ExecStart=/usr/sbin/granaryd --config /etc/granary/granary.conf$' \
        systemd/granaryd.service
    MANPATH="$dir/man" systemd-analyze verify "$dir/unit/granaryd.service" > "$dir/verify" 2>&1
    rc=$?
    sed 's/^/    /' "$dir/verify"
    check "systemd-analyze verify exit 0" test "$rc" -eq 0
    check "systemd-analyze verify prints nothing" test ! -s "$dir/verify"
    # The same score tests/test_systemd_vm.sh reads from a running systemd.
    score=$(systemd-analyze security --offline=true "$dir/unit/granaryd.service" 2>/dev/null |
            sed -n 's/.*Overall exposure level for granaryd.service: \([0-9.]*\).*/\1/p')
    echo "    systemd-analyze security --offline: exposure ${score:-?}"
    check "exposure score at most 2.0 (got ${score:-none})" \
        awk -v s="$score" 'BEGIN { exit !(s != "" && s + 0 <= 2.0) }'
    for k in Type=notify NotifyAccess=main WatchdogSec=30s User=granary Group=granary \
             RuntimeDirectory=granary CacheDirectory=granary StateDirectory=granary \
             ProtectSystem=strict 'CapabilityBoundingSet=' NoNewPrivileges=yes \
             ProtectProc=invisible ProcSubset=pid SystemCallFilter=@system-service \
             IPAddressDeny=any IPAddressAllow=localhost 'ReadOnlyPaths=/run -/dev/shm -/dev/mqueue -/dev/hugepages'; do
        check "unit has $k" grep -qx "$k" systemd/granaryd.service
    done
    # Its seccomp filter turns openat2() into ENOSYS (tests/test_systemd_vm.sh
    # caught the daemon falling back to realpath).
    check "unit does not set RestrictSUIDSGID=" sh -c '! grep -q "^RestrictSUIDSGID=" systemd/granaryd.service'
else
    echo "SKIP systemd-analyze verify: systemd-analyze is not installed (Debian package systemd)"
fi

# ---- the notify protocol, end to end --------------------------------------
mkdir -p "$dir/src" "$dir/nvme"
cat > "$dir/g.conf" <<CONF
[daemon]
socket = $dir/sock
[source]
roots = $dir/src
chunk_size = 1M
[dram]
capacity = 16M
[nvme]
path = $dir/nvme
capacity = 64M
CONF
# No Prometheus port: another daemon on this machine may hold the default.
if "$GRANARYD" --describe-config | grep -q '^metrics\.listen '; then
    printf '[metrics]\nlisten =\n' >> "$dir/g.conf"
fi
/usr/bin/python3 - "$GRANARYD" "$dir" <<'PY'
import os, signal, socket, stat, subprocess, sys, time

granaryd, d = sys.argv[1], sys.argv[2]
fails = 0

def check(desc, ok):
    global fails
    print(("ok   " if ok else "FAIL ") + desc)
    fails += 0 if ok else 1

def is_sock(p):
    try:
        return stat.S_ISSOCK(os.stat(p).st_mode)
    except OSError:
        return False

def run(addr, watchdog):
    """Start granaryd with NOTIFY_SOCKET=addr; return (messages, socket seen
    at READY, exit status)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + addr[1:] if addr.startswith("@") else addr)
    s.settimeout(10)
    env = dict(os.environ, NOTIFY_SOCKET=addr)
    env.pop("WATCHDOG_PID", None)
    if watchdog:
        env["WATCHDOG_USEC"] = str(watchdog)
    else:
        env.pop("WATCHDOG_USEC", None)
    log = open(os.path.join(d, "granaryd.log"), "ab")
    p = subprocess.Popen([granaryd, "--config", os.path.join(d, "g.conf")], env=env,
                         stderr=log)
    msgs, sock_at_ready, status, termed = [], None, None, False
    try:
        m = s.recv(4096).decode()
        msgs.append(m)
        sock_at_ready = is_sock(os.path.join(d, "sock"))
        if watchdog:
            end = time.monotonic() + 0.65
            while time.monotonic() < end:
                s.settimeout(max(0.01, end - time.monotonic()))
                try:
                    msgs.append(s.recv(4096).decode())
                except socket.timeout:
                    break
        p.send_signal(signal.SIGTERM)
        termed = True
        s.settimeout(10)
        while not msgs[-1].startswith("STOPPING=1"):
            msgs.append(s.recv(4096).decode())
    except socket.timeout:
        msgs.append("(timeout)")
    finally:
        # Once: a second SIGTERM during tear-down (its handler is gone by
        # then) would kill the daemon and hide how the first one ended.
        if not termed and p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            status = p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            status = p.wait()
        s.close()
    return msgs, sock_at_ready, status

# READY=1 and STATUS= in one datagram: the status names what start-up
# loaded (the scratch NVMe tier starts empty).
READY = "READY=1\nSTATUS=serving 1 roots; NVMe index loaded: 0 chunks"
msgs, at_ready, status = run(os.path.join(d, "notify.sock"), 200000)
check("first message is READY=1 with STATUS (got %r)" % msgs[0],
      msgs[0] == READY)
check("the daemon's socket exists when READY=1 arrives", at_ready is True)
pings = sum(1 for m in msgs if m == "WATCHDOG=1")
check("WATCHDOG=1 every 0.1 s with WATCHDOG_USEC=200000 (%d in 0.65 s)" % pings,
      2 <= pings <= 8)
check("STOPPING=1 after SIGTERM", msgs[-1] == "STOPPING=1")
check("nothing else sent (%r)" % [m for m in msgs if m not in
      ("WATCHDOG=1", "STOPPING=1", READY)],
      all(m in ("WATCHDOG=1", "STOPPING=1", READY) for m in msgs))
check("clean exit after SIGTERM (status %r)" % status, status == 0)

msgs, at_ready, status = run("@granary-test-notify-%d" % os.getpid(), 0)
check("abstract NOTIFY_SOCKET: READY=1 then STOPPING=1 (%r)" % msgs,
      msgs[0].startswith("READY=1\n") and msgs[-1] == "STOPPING=1")
check("no WATCHDOG=1 without WATCHDOG_USEC", "WATCHDOG=1" not in msgs)
check("clean exit (status %r)" % status, status == 0)
sys.exit(min(fails, 100))
PY
rc=$?
[ "$rc" -ne 0 ] && { fails=$((fails + rc)); sed 's/^/    granaryd: /' "$dir/granaryd.log"; }
[ "$fails" -eq 0 ]
