#!/bin/bash
# guest.sh - the checks of tests/test_systemd_vm.sh, run inside the VM by
# granary-vm-checks.service once multi-user.target is reached, with systemd
# 252 as PID 1.  Granary was installed into the root by `make install
# PREFIX=/usr DESTDIR=...`; this script does the rest of README.md's
# "Installing on a node" and then checks the service as an operator and
# users meet it.  Each check prints "@@RESULT NAME PASS|FAIL" on the
# console (the host collects them), details "@@INFO ..."; "@@DONE" at the
# end, then the VM powers off.  Every wait is bounded: emulation is slow,
# and conditions are polled, never assumed after a sleep.
#
# The source is /srv/data behind a FUSE mount (bindfs) at /mnt/dfs, as a
# DFS client would mount it.  Users: alice (group granary: reads), bob
# (granary and granary-admin: admin commands), carol (neither).
#
# VM_FAULT (negative controls, each must make the run FAIL):
#   watchdog  WatchdogSec=0: a stopped event loop goes unnoticed
#   syscall   memfd_create denied by the system call filter: SIGSYS at start
# Most functions run only through chk (indirectly).
# shellcheck disable=SC2317
set -u
set -o pipefail
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SYSTEMD_PAGER="" SYSTEMD_COLORS=0 LC_ALL=C.UTF-8
U=granaryd.service
SOCK=/run/granary/granary.sock
CONF=/etc/granary/granary.conf
D=/mnt/dfs
S=/srv/data
DROPIN=/etc/systemd/system/granaryd.service.d
T0=$EPOCHREALTIME
nfail=0

res() { echo "@@RESULT $1 $2${3:+ ($3)}"; }
info() { echo "@@INFO $*"; }
# chk NAME COMMAND...: PASS when COMMAND succeeds; its output only on failure.
chk() {
    local n=$1 out
    shift
    if out=$("$@" 2>&1); then
        res "$n" PASS
    else
        res "$n" FAIL
        nfail=$((nfail + 1))
        [ -n "$out" ] && printf '%s\n' "$out" | tail -n 8 | sed 's/^/@@INFO     /'
    fi
}
elapsed() { local d=$(( ${EPOCHREALTIME/./} - ${1/./} )); printf '%d.%02d' $((d / 1000000)) $((d % 1000000 / 10000)); }
prop() { systemctl show -p "$1" --value "$U"; }
# waitfor SECONDS COMMAND...: poll COMMAND every 0.2 s until it succeeds.
waitfor() {
    local end=$(( ${EPOCHREALTIME/./} + $1 * 1000000 ))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "${EPOCHREALTIME/./}" -ge "$end" ] && return 1
        sleep 0.2
    done
}
# Clients get a time limit: a stopped daemon's socket still accepts.
as() { local u=$1; shift; timeout 60 setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@"; }
ctl() { timeout 20 granaryctl "$@"; }
stat_of() { ctl stats --json | sed -n "s/.*\"$1\": *\([0-9]*\).*/\1/p"; }
# A point in the journal: the time now.  (Not a cursor: journalctl 252's
# --after-cursor with matches skips the first matching entry after it.)
mark() { echo "$EPOCHREALTIME"; }
# jafter MARK [journalctl args]: the unit's journal since MARK, messages only.
jafter() {
    local c=$1
    shift
    journalctl -b -u "$U" --no-pager -o cat ${c:+--since=@$c} "$@"
}
# jhas MARK STRING [journalctl args]: the unit logged STRING since MARK.
jhas() { local c=$1 s=$2; shift 2; jafter "$c" "$@" | grep -qF -- "$s"; }
# jprio MARK PRIORITY STRING: the daemon wrote STRING at PRIORITY since MARK.
jprio() {
    journalctl -b --no-pager -o cat ${1:+--since=@$1} _SYSTEMD_UNIT="$U" \
        SYSLOG_IDENTIFIER=granaryd PRIORITY="$2" | grep -qF -- "$3"
}
# Set KEY in [SECTION] of the config to VALUE (the key exists there).
setkey() { sed -i "/^\[$1\]/,/^\[/ s|^$2 *=.*|$2 = $3|" "$CONF"; grep -q "^$2 = $3\$" "$CONF"; }
# wait until nothing is queued for the NVMe tier and its chunk count holds
nvme_idle() {
    local a b
    a=$(stat_of nvme_chunks) && [ "$(stat_of writeback_queue_bytes)" = 0 ] &&
        [ "$(stat_of fetches_inflight)" = 0 ] && sleep 0.5 && b=$(stat_of nvme_chunks) && [ "$a" = "$b" ]
}
active_again() {   # active_again OLDPID OLDRESTARTS
    [ "$(prop NRestarts)" -gt "$2" ] && [ "$(prop ActiveState)" = active ] &&
        [ "$(prop MainPID)" != "$1" ] && [ "$(prop MainPID)" != 0 ]
}
# finish: the journal when something failed, then "@@DONE" and power off.
finish() {
    info "checks done in $(elapsed "$T0")s, $nfail failed"
    if [ "$nfail" -ne 0 ]; then
        journalctl -b -u "$U" --no-pager -o short-monotonic | grep -v 'unit-root\|mount_setattr\|duplicate\|redundant' |
            tail -n 60 | sed 's/^/@@INFO j: /'
    fi
    echo "@@DONE"
    systemctl poweroff --no-block
    exit 0
}
score_of() { sed -n 's/.*Overall exposure level for granaryd.service: \([0-9.]*\).*/\1/p'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 <= b + 0) }'; }

info "guest $(uname -r), $(systemctl --version | head -n 1), PID 1 $(cat /proc/1/comm), $(nproc) vCPU, up $(cut -d' ' -f1 /proc/uptime)s"
chk pid1_is_systemd test "$(cat /proc/1/comm)" = systemd

# ---- the source: a FUSE mount --------------------------------------------------
modprobe fuse
bindfs -o allow_other,default_permissions "$S" "$D"
chk source_is_fuse_mount test "$(findmnt -n -o FSTYPE "$D")" = fuse

# ---- install, the README's steps after make install -----------------------------
systemd-sysusers granary.conf
chk sysusers_user_granary getent passwd granary
chk sysusers_group_granary_admin getent group granary-admin
for u in alice bob carol; do useradd -M -s /bin/sh "$u"; done
usermod -aG granary alice
usermod -aG granary,granary-admin bob
# The operator's edit: the source roots, and capacities that fit the VM.
setkey source roots "$D" && setkey source chunk_size 1M && setkey dram capacity 64M &&
    setkey nvme capacity 256M
chk config_edited_and_valid granaryd --check-config --config "$CONF"
# The test's own drop-in, not an operator's step: a short watchdog (the
# shipped 30 s would cost the test half a minute), SIGSYS instead of EPERM
# for a call the filter misses (so that one cannot pass unnoticed), probes
# run inside the sandbox before each start (tests/vm/sandbox_probe.c), and
# a post-stop probe of the socket before systemd removes /run/granary.
mkdir -p "$DROPIN"
cat > "$DROPIN/50-vm-test.conf" <<'EOF'
[Service]
WatchdogSec=6s
SystemCallErrorNumber=kill
ExecStartPre=/usr/local/bin/granary-sandbox-probe
ExecStopPost=/bin/sh -c 'if [ -e /run/granary/granary.sock ]; then echo "stop-check: socket left behind"; else echo "stop-check: socket removed"; fi; echo "stop-check: result=$${SERVICE_RESULT} code=$${EXIT_CODE} status=$${EXIT_STATUS}"'
EOF
case ${VM_FAULT:-} in
watchdog) printf '[Service]\nWatchdogSec=0\n' > "$DROPIN/90-fault.conf" ;;
syscall) printf '[Service]\nExecStartPre=\nSystemCallFilter=~memfd_create\n' > "$DROPIN/90-fault.conf" ;;
esac
[ -n "${VM_FAULT:-}" ] && info "NEGATIVE CONTROL VM_FAULT=$VM_FAULT: this run must fail"
systemctl daemon-reload
# A few huge pages, for the probe's MFD_HUGETLB memfd.
echo 4 > /proc/sys/vm/nr_hugepages
# PID 1 logs each notification it gets (READY=1, STOPPING=1) at debug level.
systemd-analyze log-level debug

# ---- start ----------------------------------------------------------------------------
t=$EPOCHREALTIME
timeout 180 systemctl enable --now granaryd
rc=$?
sock_at_start=no
[ -S "$SOCK" ] && sock_at_start=yes
info "systemctl enable --now granaryd: exit $rc in $(elapsed "$t")s"
chk start_exit_0 test "$rc" -eq 0
chk socket_exists_once_started test "$sock_at_start" = yes
chk is_active test "$(systemctl is-active granaryd)" = active
chk is_enabled test "$(systemctl is-enabled granaryd)" = enabled
PID=$(prop MainPID)
info "MainPID $PID, StatusText: $(prop StatusText)"
if [ "$(systemctl is-active granaryd)" != active ]; then
    info "granaryd is not running: the other checks cannot run"
    finish
fi
chk status_text_cold test "$(prop StatusText)" = "serving 1 roots; NVMe index loaded: 0 chunks"
status_shows() { systemctl status granaryd --no-pager | grep -F "Status: \"$1\""; }
chk systemctl_status_shows_status status_shows "serving 1 roots; NVMe index loaded: 0 chunks"
chk ready_notification_after_start waitfor 20 jhas "" "Got notification message from PID $PID (READY=1, STATUS=serving 1 roots"
chk runs_as_granary test "$(stat -c %U "/proc/$PID")" = granary
chk no_new_privs grep -q '^NoNewPrivs:[[:space:]]*1$' "/proc/$PID/status"
chk seccomp_filter_on grep -q '^Seccomp:[[:space:]]*2$' "/proc/$PID/status"
no_caps() { ! grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' "/proc/$1/status" | grep -v '0000000000000000$'; }
chk no_capabilities no_caps "$PID"
# What the probe found inside the sandbox, at this first start.
probe_ok() {
    journalctl -b -u "$U" -o cat --no-pager | grep '^sandbox-probe: ' > /tmp/probe.txt
    grep ' FAIL ' /tmp/probe.txt
    grep -q '^sandbox-probe: hugetlb_memfd ok$' /tmp/probe.txt &&
        grep -q '^sandbox-probe: done 0 failed$' /tmp/probe.txt && ! grep -q ' FAIL ' /tmp/probe.txt
}
chk sandbox_probe_inside_unit probe_ok

# ---- clients ----------------------------------------------------------------------------
cat_as() { as "$1" granaryctl cat "$D/$2" | cmp - "$S/$2"; }
chk alice_cat_fuse_source cat_as alice big.bin
chk alice_libgranary_read as alice gr_read "$D/sample.bin"
chk alice_libgranary_read_again as alice gr_read "$D/big.bin"
refused() { local out; ! out=$(as alice granaryctl cat "$D/secret") && ! grep -q 'root only' <<<"$out"; }
chk alice_refused_file_she_cannot_open refused
as carol granaryctl stats >/dev/null 2>&1
rc=$?
chk carol_not_in_group_cannot_connect test "$rc" -eq 3
as alice granaryctl cat "$D/evictme.bin" >/dev/null
as alice granaryctl evict "$D/evictme.bin" >/dev/null 2>&1
rc=$?
chk alice_evict_refused_exit_4 test "$rc" -eq 4
chk bob_admin_group_evict_allowed as bob granaryctl evict "$D/evictme.bin"
chk bob_pin as bob granaryctl pin "$D/sample.bin"
chk bob_unpin as bob granaryctl unpin "$D/sample.bin"
chk bob_warmup_wait as bob granaryctl warmup "$D/warm" --wait
chk warmup_cached_8_files test "$(stat_of warmup_files)" -ge 8
chk health_ok ctl health
# The metrics endpoint on loopback TCP, through IPAddressAllow=localhost.
scrape() {
    exec 3<>/dev/tcp/127.0.0.1/9464 || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    timeout 20 cat <&3 > /tmp/metrics.txt
    exec 3<&-
    head -n 1 /tmp/metrics.txt | grep -q ' 200 ' && grep -q '^granary_hits_nvme_total ' /tmp/metrics.txt &&
        grep -q '^granary_bytes_served_total [1-9]' /tmp/metrics.txt
}
chk metrics_scrape_loopback scrape
# The code paths the system call filter must allow ran, not their fallbacks:
# the DRAM tier's sealed memfds, openat2 for source paths, O_DIRECT for the
# NVMe tier's data files (each fallback is logged).
chk dram_tier_memfds sh -c "ls -l /proc/$PID/fd | grep -q 'memfd:granary-arena'"
chk openat2_in_use sh -c "! journalctl -b -u $U -o cat --no-pager | grep -F 'openat2 unavailable'"
chk o_direct_in_use sh -c "! journalctl -b -u $U -o cat --no-pager | grep -F 'refuses O_DIRECT'"

# ---- reload, and journald priorities ---------------------------------------------------------
cp "$CONF" /tmp/granary.conf.orig
c=$(mark)
setkey daemon log_level debug && setkey source chunk_size 2M
systemctl reload granaryd
rc=$?
waitfor 30 jhas "$c" "reload: done"
chk reload_exit_0 test "$rc" -eq 0
chk reload_live_key_applied_info jprio "$c" 6 "reload: [daemon] log_level = debug"
chk reload_restart_key_logged_as_warning jprio "$c" 4 "reload: [source] chunk_size = 2M: takes effect after a restart"
# log_level is live: a client's connection is now logged at debug level.
ctl stats >/dev/null
chk debug_lines_after_reload waitfor 20 jprio "$c" 7 "connected: pid"
running_chunk() { ctl config | grep -Eq "^chunk_size = (1M|1048576)"; }
chk running_chunk_size_unchanged running_chunk
c=$(mark)
printf '[daemon]\nno_such_key = 1\n' >> "$CONF"
systemctl reload granaryd
waitfor 30 jhas "$c" "keeping the running configuration"
chk bad_reload_logged_as_error jprio "$c" 3 "keeping the running configuration"
cp /tmp/granary.conf.orig "$CONF"
c=$(mark)
systemctl reload granaryd
chk reload_back_to_info waitfor 30 jhas "$c" "reload: [daemon] log_level = info"
waitfor 30 jhas "$c" "reload: done"
# Every line the daemon wrote went in at the priority its level names, and
# no "<N>" prefix is left in a message.
prio_ok() {
    local p tag n all=0
    for p in 3:error 4:warn 6:info 7:debug; do
        tag=${p#*:}
        n=$(journalctl -b _SYSTEMD_UNIT="$U" SYSLOG_IDENTIFIER=granaryd PRIORITY="${p%%:*}" -o cat --no-pager | grep -c .)
        echo "PRIORITY=${p%%:*}: $n lines"
        [ "$n" -gt 0 ] || return 1
        journalctl -b _SYSTEMD_UNIT="$U" SYSLOG_IDENTIFIER=granaryd PRIORITY="${p%%:*}" -o cat --no-pager |
            grep -v "^granaryd $tag: " && return 1
        all=$((all + n))
    done
    journalctl -b _SYSTEMD_UNIT="$U" SYSLOG_IDENTIFIER=granaryd -o cat --no-pager | grep -E '^<[0-9]>' && return 1
    [ "$all" -eq "$(journalctl -b _SYSTEMD_UNIT="$U" SYSLOG_IDENTIFIER=granaryd -o cat --no-pager | grep -c .)" ]
}
chk journal_priorities_match_levels prio_ok
warnings_only() {
    journalctl -b -u "$U" -p warning -o cat --no-pager > /tmp/warnings.txt
    grep -q 'takes effect after a restart' /tmp/warnings.txt && ! grep -q 'granaryd info: ' /tmp/warnings.txt
}
chk journalctl_p_warning_shows_warnings_only warnings_only

# ---- the sandbox ----------------------------------------------------------------------------
PID=$(prop MainPID)
# As root inside the daemon's mount namespace: the read-only view holds
# even for a user the permissions would let write.
bad=
for p in /etc /usr /var/lib /var/log /var/cache /srv/data /mnt/dfs /root /home /opt /dev/shm /dev/mqueue /dev/hugepages /run /run/lock /run/user; do
    if out=$(nsenter -t "$PID" -m -- /bin/sh -c "echo x > $p/.granary-probe" 2>&1) ||
        ! printf '%s' "$out" | grep -q 'Read-only file system' || [ -e "$p/.granary-probe" ]; then
        bad="$bad $p($out)"
        rm -f "$p/.granary-probe"
    fi
done
chk sandbox_read_only_elsewhere test -z "$bad"
[ -n "$bad" ] && info "not refused:$bad"
# As the daemon's user: its three directories are writable.
bad=
for p in /run/granary /var/cache/granary /var/lib/granary; do
    nsenter -t "$PID" -m -S "$(id -u granary)" -G "$(id -g granary)" -- \
        /bin/sh -c "echo x > $p/.granary-probe && rm $p/.granary-probe" || bad="$bad $p"
done
chk sandbox_own_dirs_writable test -z "$bad"
# Every writable mount in its namespace is one of those, the private /tmp
# and /var/tmp, or /proc (hidepid) and /dev/pts (nothing to create there).
rwmounts=$(awk '{ split($0, a, " - "); split(a[1], f, " "); split(a[2], g, " ");
                  if (f[6] ~ /^rw/) print f[5] ":" g[1] }' "/proc/$PID/mountinfo" | tr '\n' ' ')
info "writable mounts in the daemon's namespace: $rwmounts"
mounts_ok() {
    local m
    [ -n "$rwmounts" ] || { echo "no daemon, no mounts to judge"; return 1; }
    for m in $rwmounts; do
        case $m in
        /run/granary:* | /var/cache/granary:* | /var/lib/granary:* | /tmp:* | /var/tmp:*) ;;
        /proc:proc | /dev/pts:devpts) ;;
        *) echo "unexpected writable mount $m"; return 1 ;;
        esac
    done
}
chk sandbox_writable_mounts_expected mounts_ok
# Without RestrictSUIDSGID= (it breaks openat2): a setuid file the daemon's
# user makes is out of other users' reach in its 0700 directories, and
# inert in /run/granary (/run is nosuid).
suid_inert() {
    nsenter -t "$PID" -m -S "$(id -u granary)" -G "$(id -g granary)" -- /bin/sh -c 'cp /usr/bin/id /var/cache/granary/.suid-id &&
        chmod 4755 /var/cache/granary/.suid-id && cp /usr/bin/id /run/granary/.suid-id &&
        chmod 4755 /run/granary/.suid-id' || return 1
    ! as alice test -e /var/cache/granary/.suid-id &&
        test "$(as alice /run/granary/.suid-id -u)" = "$(id -u alice)"
    local rc=$?
    rm -f /var/cache/granary/.suid-id /run/granary/.suid-id
    return "$rc"
}
chk setuid_files_out_of_reach_or_inert suid_inert
private_tmp() {
    nsenter -t "$PID" -m -S "$(id -u granary)" -G "$(id -g granary)" -- \
        /bin/sh -c 'echo x > /tmp/granary-tmp-probe' && test ! -e /tmp/granary-tmp-probe
}
chk private_tmp_not_the_hosts private_tmp
# The daemon itself, told to write elsewhere: a trace_file in a directory
# its user owns outside its three, which only the sandbox keeps it from.
install -d -o granary -g granary /srv/granary-probe
chk nvme_idle_before_restart waitfor 60 nvme_idle
N0=$(stat_of nvme_chunks)
info "NVMe tier before restarting: $N0 chunks"
setkey daemon trace_file /srv/granary-probe/trace.log
c=$(mark)
timeout 120 systemctl restart granaryd >/dev/null 2>&1
rc=$?
systemctl stop granaryd
cp /tmp/granary.conf.orig "$CONF"
systemctl reset-failed granaryd
chk restart_with_outside_trace_file_fails test "$rc" -ne 0
chk daemon_cannot_write_outside_its_dirs jhas "$c" "trace_file /srv/granary-probe/trace.log: Read-only file system"
chk nothing_written_outside test ! -e /srv/granary-probe/trace.log
t=$EPOCHREALTIME
timeout 180 systemctl start granaryd
rc=$?
info "warm start: exit $rc in $(elapsed "$t")s, StatusText: $(prop StatusText)"
chk warm_start_exit_0 test "$rc" -eq 0
chk warm_start_ready_after_index test "$(prop StatusText)" = "serving 1 roots; NVMe index loaded: $N0 chunks"
chk warm_start_index_not_empty test "${N0:-0}" -ge 12

# ---- watchdog: a stuck event loop --------------------------------------------------------------
PID=$(prop MainPID)
R0=$(prop NRestarts)
t=$EPOCHREALTIME
# Never "kill -STOP 0" (an empty PID): it would stop this script's group.
if [ "${PID:-0}" -gt 1 ]; then kill -STOP "$PID"; fi
waitfor 60 active_again "$PID" "$R0"
rc=$?
info "SIGSTOP $PID: restarted as $(prop MainPID) after $(elapsed "$t")s (NRestarts $(prop NRestarts), WatchdogUSec $(prop WatchdogUSec))"
chk watchdog_restarts_stopped_daemon test "$rc" -eq 0
if [ "$rc" -ne 0 ] && [ "${PID:-0}" -gt 1 ]; then
    # Not caught: kill it, so that the checks after this one still run.
    kill -KILL "$PID"
    waitfor 60 active_again "$PID" "$R0"
fi
chk watchdog_timeout_logged jhas "" "Watchdog timeout"
chk stopped_process_gone test ! -d "/proc/$PID"
chk restart_status_counts_index test "$(prop StatusText)" = "serving 1 roots; NVMe index loaded: $N0 chunks"
warm_reads() { cat_as alice big.bin && as alice gr_read "$D/sample.bin" && as alice gr_read "$D/warm/f1"; }
chk warm_reads_byte_exact warm_reads
h=$(stat_of hits_nvme) m=$(stat_of misses) sb=$(stat_of source_bytes_read)
info "after the watchdog restart: hits_nvme $h, misses $m, source_bytes_read $sb"
chk warm_restart_nvme_hits test "${h:-0}" -ge 3
chk warm_restart_no_source_reads test "$m" = 0 -a "$sb" = 0

# ---- SIGKILL -------------------------------------------------------------------------------------
PID=$(prop MainPID)
R0=$(prop NRestarts)
if [ "${PID:-0}" -gt 1 ]; then kill -KILL "$PID"; fi
waitfor 60 active_again "$PID" "$R0"
chk sigkill_restarts test $? -eq 0
chk sigkill_logged jhas "" "Main process exited, code=killed, status=9/KILL"
chk reads_after_sigkill as alice gr_read "$D/big.bin"
chk no_source_reads_after_sigkill test "$(stat_of source_bytes_read)" = 0

# ---- exposure score, system call filter -----------------------------------------------------------
systemd-analyze security --no-pager granaryd > /tmp/security.txt 2>&1
online=$(score_of < /tmp/security.txt)
systemd-analyze security --no-pager --offline=true /usr/lib/systemd/system/granaryd.service > /tmp/security-offline.txt 2>&1
offline=$(score_of < /tmp/security-offline.txt)
info "$(grep -F 'Overall exposure level' /tmp/security.txt)"
info "offline, the installed unit alone: $(grep -F 'Overall exposure level' /tmp/security-offline.txt)"
grep -F '✗' /tmp/security.txt | sed 's/^/@@INFO   /'
chk exposure_at_most_2_0 le "$online" 2.0
chk exposure_offline_at_most_2_0 le "$offline" 2.0
no_sigsys() { ! journalctl -b --no-pager -o cat | grep -F 'status=31/SYS' && ! dmesg | grep -F 'type=1326'; }
chk no_sigsys no_sigsys
R1=$(prop NRestarts)

# ---- stop ----------------------------------------------------------------------------------------------
PID=$(prop MainPID)
c=$(mark)
t=$EPOCHREALTIME
timeout 60 systemctl stop granaryd
rc=$?
dt=$(elapsed "$t")
info "systemctl stop: exit $rc in ${dt}s (TimeoutStopUSec $(prop TimeoutStopUSec)), Result $(prop Result), ExecMainCode $(prop ExecMainCode), ExecMainStatus $(prop ExecMainStatus)"
chk stop_exit_0 test "$rc" -eq 0
chk stop_within_timeout le "$dt" 30
chk stop_result_success test "$(prop Result)" = success
chk stop_daemon_exit_status_0 test "$(prop ExecMainCode):$(prop ExecMainStatus)" = 1:0
chk stopping_notified jhas "$c" "Got notification message from PID $PID (STOPPING=1)"
chk daemon_removed_socket jhas "$c" "stop-check: socket removed"
chk daemon_logged_stopped jhas "$c" "granaryd info: stopped"
chk inactive test "$(systemctl is-active granaryd)" = inactive
chk socket_gone test ! -e "$SOCK"
chk restarts_only_the_induced_ones test "$R1" -eq "$((R0 + 1))"

finish
