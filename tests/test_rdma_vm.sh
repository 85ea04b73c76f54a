#!/bin/sh
# The RDMA transport (daemon/peer/rdma.c) over real verbs: soft-RoCE in a VM.
#
# The machines that run `make test` have no RDMA device, and their kernel no
# InfiniBand support, so this test boots Debian's own kernel (downloaded and
# unpacked, never installed) under QEMU with TCG (no /dev/kvm needed) and a
# busybox initramfs, loads rdma_rxe, makes rxe0 on a dummy interface
# (192.0.2.1, exists only inside the VM, which has no network device) and
# runs build/tests/rdma_pair (tests/vm/rdma_pair.c) there as two processes,
# server and client, on different vCPUs: RC connections through rdma_cm,
# tokens in the private data, memfd segments registered for remote read and
# re-registered on a new generation, one-sided READs checked byte for byte,
# a wrong token refused, a wrong rkey a completion error.  Then, in the
# same boot, tests/vm/rdma_peers.sh runs three real granaryd processes on
# three addresses of rxe0's interface with [peer] transport = rdma: two
# share their caches by RDMA READ (byte-exact, one copy read from the
# source, `granaryctl peers` and the logs saying rdma), the third holds a
# different key_file (and transport = auto) and gets nothing from them;
# then one is killed and the other's reads go on.  Their
# "@@RESULT NAME PASS|FAIL" lines on the serial console are the verdict.
#
# Prints "SKIP: reason" and passes only when QEMU cannot run here at all
# (not root, not installable, or it does not start); everything else is a
# failure.
#
# Env: VM_DIR=build/vm-rdma (cache and logs), VM_TIMEOUT=300 (seconds QEMU
#      may run), VM_SMP=2, VM_MEM=1024, RDMA_FAULT (negative controls, each
#      must make the run FAIL): token (rdma_pair's client presents the
#      server a token it never accepts), tcp (granaryd B's transport is tcp:
#      it gets A's chunks inline, not by RDMA READ), key (granaryd C holds
#      the right key: it gets chunks from A and B).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/.." || exit 2
top=$(pwd)
W=${VM_DIR:-$top/build/vm-rdma}
case $W in /*) ;; *) W=$top/$W ;; esac
VM_TIMEOUT=${VM_TIMEOUT:-300}
VM_MEM=${VM_MEM:-1024}
VM_SMP=${VM_SMP:-2}
T0=$EPOCHREALTIME
secs() { local d=$(( ${EPOCHREALTIME/./} - ${1/./} )); printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000)); }
say() { printf '[rdma-vm %6ss] %s\n' "$(secs "$T0")" "$*"; }
die() { say "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

PAIR=$top/build/tests/rdma_pair
[ -x "$PAIR" ] || die "$PAIR is not built (make)"
for b in granaryd granaryctl; do [ -x "$top/build/$b" ] || die "build/$b is not built (make)"; done
[ "$(id -u)" -eq 0 ] || skip "needs root (apt-get, a root-owned initramfs); run make test as root"
mkdir -p "$W" || die "mkdir $W"
exec 9>"$W/lock"
flock -w 600 9 || die "another run holds $W/lock"

# ---- host packages ---------------------------------------------------------
# qemu-system-x86 (the VM); busybox-static, cpio, kmod (the initramfs and its
# modules); iproute2 (ip and rdma, copied into the VM); ibverbs-providers
# (the rxe provider).  libibverbs and librdmacm come with make deps.
updated=
apt_install() {   # apt_install PKG...: apt-get update at most once
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
        >>"$W/apt.log" 2>&1 && return 0
    [ -n "$updated" ] && return 1
    updated=1
    apt-get update -q >>"$W/apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
        >>"$W/apt.log" 2>&1
}
missing=
for p in qemu-system-x86 busybox-static cpio kmod iproute2 ibverbs-providers; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
    say "apt-get install$missing"
    # shellcheck disable=SC2086  # a list of package names
    if ! apt_install $missing; then
        command -v qemu-system-x86_64 >/dev/null 2>&1 ||
            skip "qemu-system-x86 is not installable here (apt-get failed, $W/apt.log)"
        die "apt-get install$missing failed ($W/apt.log)"
    fi
fi
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 not found after installing qemu-system-x86"
timeout 3 qemu-system-x86_64 -accel tcg -machine q35 -display none -nodefaults -monitor none -S \
    </dev/null >/dev/null 2>"$W/qemu-probe.log"
rc=$?
[ "$rc" -eq 124 ] ||
    skip "qemu-system-x86_64 -accel tcg does not run here (exit $rc: $(head -c 300 "$W/qemu-probe.log"))"
PROV=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so 2>/dev/null | head -1)
[ -n "$PROV" ] || die "no rxe provider (ibverbs-providers)"
RDMA_TOOL=$(command -v rdma) || die "no rdma tool (iproute2)"

# ---- Debian's kernel, unpacked only ------------------------------------------
kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
KPKG=$(kpkg)
if [ -z "$KPKG" ]; then
    apt-get update -q >>"$W/apt.log" 2>&1
    KPKG=$(kpkg)
fi
[ -n "$KPKG" ] || die "cannot resolve linux-image-amd64 (apt-cache depends)"
KVER=${KPKG#linux-image-}
# rxe needs crc32_generic loaded explicitly (its ICRC); dummy for its netdev.
MODS="rdma_rxe ib_uverbs rdma_ucm dummy crc32_generic"
K=$W/kernel-$KVER
kos() {   # kos TREE: the module files of $MODS and their dependencies, in load order
    for m in $MODS; do modprobe -d "$1" -S "$KVER" --show-depends "$m"; done |
        awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++'
}
if [ "$(cat "$K/.done" 2>/dev/null)" != "$MODS" ]; then
    say "downloading and unpacking $KPKG (not installing it)"
    rm -rf "$K" "$K.tmp" "$W/debs"
    mkdir -p "$K.tmp" "$W/debs"
    (cd "$W/debs" && apt-get download "$KPKG" >>"$W/apt.log" 2>&1) || die "apt-get download $KPKG"
    dpkg-deb -x "$W"/debs/"$KPKG"_*.deb "$K.tmp" || die "dpkg-deb -x $KPKG"
    grep -q '^CONFIG_RDMA_RXE=m' "$K.tmp/boot/config-$KVER" || die "$KPKG has no rdma_rxe"
    depmod -b "$K.tmp" "$KVER" || die "depmod"    # the .deb ships no modules.dep
    mkdir -p "$K/boot" "$K/lib/modules/$KVER"
    cp "$K.tmp/boot/vmlinuz-$KVER" "$K/boot/" || die "no vmlinuz-$KVER in $KPKG"
    cp "$K.tmp/lib/modules/$KVER"/modules.order "$K.tmp/lib/modules/$KVER"/modules.builtin* \
        "$K/lib/modules/$KVER/" 2>/dev/null
    for ko in $(kos "$K.tmp"); do
        rel=${ko#"$K.tmp"}
        mkdir -p "$K$(dirname "$rel")"
        cp "$ko" "$K$rel"
    done
    depmod -b "$K" "$KVER" || die "depmod"
    rm -rf "$K.tmp" "$W/debs"
    echo "$MODS" > "$K/.done"
fi
[ -n "$(kos "$K")" ] || die "no kernel modules found for: $MODS"

# ---- initramfs: busybox, the modules, verbs, rdma_pair ------------------------
R=$W/initramfs
rm -rf "$R"
mkdir -p "$R"/usr/bin "$R"/usr/sbin "$R"/usr/lib/x86_64-linux-gnu "$R"/usr/lib64 "$R"/etc \
    "$R"/proc "$R"/sys "$R"/dev "$R"/tmp "$R"/bb || die "mkdir $R"
ln -s usr/bin "$R/bin"; ln -s usr/sbin "$R/sbin"; ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"
cp /bin/busybox "$R/usr/bin/busybox" || die "no /bin/busybox (busybox-static)"
for a in $(/bin/busybox --list); do ln -sf /usr/bin/busybox "$R/bb/$a"; done
ln -sf busybox "$R/usr/bin/sh"
ln -sf ../bin/busybox "$R/usr/sbin/modprobe"
copy_libs() {   # the shared-library closure (ldd) of each file, at the same paths
    local f lib
    for f in "$@"; do
        for lib in $(ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}'); do
            [ -e "$R$lib" ] && continue
            mkdir -p "$R$(dirname "$lib")"
            cp -L "$lib" "$R$lib"
        done
    done
}
for f in /usr/sbin/ip "$RDMA_TOOL" "$PROV"; do
    mkdir -p "$R$(dirname "$f")"
    cp -L "$f" "$R$f" || die "cp $f"
done
cp "$PAIR" "$R/usr/bin/rdma_pair"
cp "$top/build/granaryd" "$top/build/granaryctl" "$R/usr/bin/"
cp "$top/tests/vm/rdma_peers.sh" "$R/usr/bin/rdma_peers"
chmod 0755 "$R/usr/bin/rdma_peers"
copy_libs /usr/sbin/ip "$RDMA_TOOL" "$PROV" "$PAIR" "$top/build/granaryd" "$top/build/granaryctl"
mkdir -p "$R/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/" || die "no rxe.driver"
printf '127.0.0.1 localhost\n' > "$R/etc/hosts"
mkdir -p "$R/lib/modules/$KVER"
for ko in $(kos "$K"); do
    rel=${ko#"$K"}
    mkdir -p "$R$(dirname "$rel")"
    cp "$ko" "$R$rel"
done
cp "$K/lib/modules/$KVER"/modules.* "$R/lib/modules/$KVER/"
TOKEN=granary-vm-token-7f3a9c
CLIENT_TOKEN=$TOKEN
PEERS_FAULT=
case ${RDMA_FAULT:-} in
    '') ;;
    token) CLIENT_TOKEN=not-the-token ;;
    tcp | key) PEERS_FAULT=$RDMA_FAULT ;;
    *) die "RDMA_FAULT=$RDMA_FAULT: one of token, tcp, key" ;;
esac
cat > "$R/init" <<EOF
#!/usr/bin/busybox sh
export PATH=/usr/sbin:/usr/bin:/bb
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /tmp
up() { cut -d' ' -f1 /proc/uptime; }
echo "@@INFO guest \$(uname -r), \$(nproc) vCPU, up \$(up) s"
for m in crc32_generic dummy rdma_rxe rdma_ucm; do modprobe \$m || echo "modprobe \$m failed"; done
IP=/usr/sbin/ip
\$IP link set lo up
\$IP link add rxenet0 type dummy
\$IP link set rxenet0 up
\$IP addr add 192.0.2.1/24 dev rxenet0
rdma link add rxe0 type rxe netdev rxenet0 && echo "@@RESULT rxe0_up PASS" || echo "@@RESULT rxe0_up FAIL"
G=/sys/class/infiniband/rxe0/ports/1/gids/1
i=0; while [ \$i -lt 50 ]; do
    [ -r \$G ] && [ "\$(cat \$G)" != "0000:0000:0000:0000:0000:0000:0000:0000" ] && break
    sleep 0.2; i=\$((i + 1))
done
echo "@@INFO rxe0 gid[1]=\$(cat \$G 2>/dev/null) ready at up \$(up) s"
mkdir -p /tmp/sync
t0=\$(up)
taskset -c 0 rdma_pair server 192.0.2.1 7471 $TOKEN /tmp/sync >/tmp/server.log 2>&1 &
sp=\$!
taskset -c $((VM_SMP > 1 ? 1 : 0)) timeout 200 rdma_pair client 192.0.2.1 7471 $CLIENT_TOKEN /tmp/sync >/tmp/client.log 2>&1
crc=\$?
i=0; while kill -0 \$sp 2>/dev/null && [ \$i -lt 75 ]; do sleep 0.2; i=\$((i + 1)); done
kill \$sp 2>/dev/null
wait \$sp; src=\$?
echo "--- server"; cat /tmp/server.log
echo "--- client"; cat /tmp/client.log
echo "@@INFO pair: server rc \$src, client rc \$crc, \$(awk "BEGIN{print \$(up)-\$t0}") s"
[ \$src = 0 ] && echo "@@RESULT server_exit PASS" || echo "@@RESULT server_exit FAIL"
[ \$crc = 0 ] && echo "@@RESULT client_exit PASS" || echo "@@RESULT client_exit FAIL"
t0=\$(up)
rdma_peers $PEERS_FAULT
echo "@@INFO peers: \$(awk "BEGIN{print \$(up)-\$t0}") s"
echo "@@DONE"
sync
poweroff -f
EOF
chmod 0755 "$R/init"
(cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) > "$W/initrd.cpio" ||
    die "cpio"

# ---- boot --------------------------------------------------------------------
say "booting $KVER under qemu-system-x86_64 -accel tcg (-smp $VM_SMP -m $VM_MEM, at most ${VM_TIMEOUT}s)"
t=$EPOCHREALTIME
timeout "$VM_TIMEOUT" qemu-system-x86_64 -nographic -no-reboot -accel tcg \
    -m "$VM_MEM" -smp "$VM_SMP" -nic none \
    -kernel "$K/boot/vmlinuz-$KVER" -initrd "$W/initrd.cpio" \
    -append "console=ttyS0 panic=-1 quiet mitigations=off" \
    </dev/null 2>&1 | sed -u 's/\r$//' > "$W/console.log"
qrc=${PIPESTATUS[0]}
say "qemu exited ($qrc) after $(secs "$t")s; console: $W/console.log"

# ---- verdict ---------------------------------------------------------------------
sed -n 's/^.*@@INFO /    /p' "$W/console.log"
grep -E 'granaryd (info|warn|error): rdma' "$W/console.log" | sed 's/^/    /' | head -n 20
fails=0
while read -r name verdict rest; do
    if [ "$verdict" = PASS ]; then echo "ok   $name${rest:+ $rest}"; else echo "FAIL $name${rest:+ $rest}"; fails=$((fails + 1)); fi
done < <(sed -n 's/^.*@@RESULT //p' "$W/console.log")
for want in rxe0_up rdma_pair_srv_new rdma_pair_wrong_token_refused rdma_pair_random_reads \
    rdma_pair_wrong_rkey_eio rdma_pair_past_end_eio rdma_pair_old_region_pins_old_pages \
    rdma_pair_reexpose_new_gen rdma_pair_old_gen_rkey_fails rdma_pair_reads_after_reexpose \
    rdma_pair_server_gone server_exit client_exit \
    peers_gids peers_a_start peers_b_start peers_a_reads_exact peers_b_reads_exact peers_one_copy \
    peers_bytes peers_b_peer_reads peers_a_peer_reads peers_served peers_b_sees_a_rdma peers_a_sees_b_rdma \
    peers_b_log_rdma peers_b_never_tcp peers_a_served_rdma peers_no_inline_fallback \
    peers_c_start peers_c_auto_rdma peers_c_reads_exact peers_c_no_peer_reads peers_c_from_source \
    peers_a_refused_c peers_b_refused_c peers_c_log_key \
    peers_b_evict peers_b_reads_after_kill peers_b_saw_a_fail peers_b_refetched peers_b_exit peers_c_exit; do
    grep -q "@@RESULT $want PASS" "$W/console.log" || { echo "FAIL $want did not pass"; fails=$((fails + 1)); }
done
grep -q '@@DONE' "$W/console.log" || { echo "FAIL the checks did not run to the end (qemu $qrc)"; fails=$((fails + 1)); }
[ "$qrc" -eq 0 ] || { echo "FAIL qemu exit status $qrc (124: timed out)"; fails=$((fails + 1)); }
if [ "$fails" -ne 0 ]; then
    echo "---- console (last 60 lines)"
    tail -n 60 "$W/console.log"
fi
say "$fails failed; total $(secs "$T0")s"
[ "$fails" -eq 0 ]
