#!/bin/sh
# granaryd.service under a real systemd (252, PID 1), as GPU nodes run it.
#
# systemd is not PID 1 on the machines that run `make test`, so this test
# boots one: a minimal Debian root filesystem (debootstrap --variant=minbase
# plus systemd, udev, bindfs for a FUSE source and granaryd's libraries,
# cached in build/vm/base so that debootstrap runs once per machine), Debian's
# own kernel (downloaded and unpacked, never installed), QEMU with TCG (no
# /dev/kvm needed), and a busybox initramfs that switches root to systemd.
# Granary goes in with `make install PREFIX=/usr DESTDIR=<root>`; inside the
# VM tests/vm/guest.sh does the rest of README.md's "Installing on a node"
# (systemd-sysusers, the config, systemctl enable --now) and checks start,
# status, reload, watchdog, SIGKILL, stop, unprivileged and admin clients,
# the sandbox, the exposure score and journald priorities, printing
# "@@RESULT NAME PASS|FAIL" lines on the serial console, which this script
# collects.
#
# Prints "SKIP: reason" and passes only when QEMU cannot run here at all
# (not installable, or it does not start); everything else is a failure.
# Needs root (apt-get, debootstrap, a root-owned file tree for the image).
#
# Env: VM_DIR=build/vm (cache and logs), VM_FRESH=1 (redo debootstrap),
#      VM_TIMEOUT=480 (seconds QEMU may run), VM_MEM=1536, VM_SMP=2,
#      VM_FAULT=watchdog|syscall (negative controls, see tests/vm/guest.sh:
#      the run must then FAIL), MIRROR=URL (default: this host's apt source),
#      VM_GUEST=script (run that in the VM instead of tests/vm/guest.sh),
#      VM_EXTRA_BIN="prog..." (host programs copied to /usr/local/bin in the VM).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/.." || exit 2
top=$(pwd)
W=${VM_DIR:-$top/build/vm}
case $W in /*) ;; *) W=$top/$W ;; esac
VM_TIMEOUT=${VM_TIMEOUT:-480}
VM_MEM=${VM_MEM:-1536}
VM_SMP=${VM_SMP:-2}
SUITE=bookworm
T0=$EPOCHREALTIME
secs() { local d=$(( ${EPOCHREALTIME/./} - ${1/./} )); printf '%d.%d' $((d / 1000000)) $((d % 1000000 / 100000)); }
say() { printf '[vm %6ss] %s\n' "$(secs "$T0")" "$*"; }
die() { say "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "needs root (apt-get, debootstrap, mkfs.ext4 -d of a root-owned tree); run make test as root"
mkdir -p "$W" || die "mkdir $W"
exec 9>"$W/lock"
flock -w 900 9 || die "another run holds $W/lock"

# ---- host packages ---------------------------------------------------------
# qemu-system-x86 (the VM), debootstrap (its root), busybox-static + cpio +
# kmod (the initramfs and its modules), e2fsprogs (mkfs.ext4 -d).
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
for p in qemu-system-x86 debootstrap busybox-static cpio kmod e2fsprogs; do
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
# Can QEMU start a TCG machine at all (no accelerator needed)?  A paused
# machine that is still running when timeout(1) stops it (124) can.
timeout 3 qemu-system-x86_64 -accel tcg -machine q35 -display none -nodefaults -monitor none -S \
    </dev/null >/dev/null 2>"$W/qemu-probe.log"
rc=$?
[ "$rc" -eq 124 ] ||
    skip "qemu-system-x86_64 -accel tcg does not run here (exit $rc: $(head -c 300 "$W/qemu-probe.log"))"
{ mkfs.ext4 2>&1 || true; } | grep -q -- '\[-d ' || die "mkfs.ext4 lacks -d (e2fsprogs >= 1.43)"

MIRROR=${MIRROR:-$( { cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } |
                     awk '/^URIs:/{print $2} /^deb /{print $2}' | grep -v security | head -1)}
[ -n "$MIRROR" ] || die "no Debian mirror in this host's apt sources; set MIRROR="

# ---- Debian's kernel, unpacked only ------------------------------------------
kpkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
KPKG=$(kpkg)
if [ -z "$KPKG" ]; then
    apt-get update -q >>"$W/apt.log" 2>&1
    KPKG=$(kpkg)
fi
[ -n "$KPKG" ] || die "cannot resolve linux-image-amd64 (apt-cache depends)"
KVER=${KPKG#linux-image-}
# Modules the root file system needs before systemd (virtio disk, ext4),
# and FUSE for the bindfs source; Debian builds all of them as modules.
# Only they and the kernel image are kept (the package is 400 MiB unpacked).
MODS="virtio_pci virtio_blk crc32c_generic ext4 fuse"
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
    depmod -b "$K.tmp" "$KVER" || die "depmod"
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
KOS=$(kos "$K")
[ -n "$KOS" ] || die "no kernel modules found for: $MODS"

# ---- the root file system, built once -----------------------------------------
# granaryd's and libgranary's shared libraries, as Debian packages, so that
# a new dependency rebuilds the cached root.
libpkgs=$(ldd build/granaryd build/granaryctl build/libgranary.so 2>/dev/null |
          awk '/=> \// { print $3 }' | sort -u | while read -r f; do
              dpkg -S "$f" 2>/dev/null || dpkg -S "$(readlink -f "$f")" 2>/dev/null ||
                  dpkg -S "/usr$f" 2>/dev/null
          done | cut -d: -f1 | sort -u | tr '\n' ',')
[ -n "$libpkgs" ] || die "cannot map granaryd's libraries to packages (is it built?)"
INCLUDE="systemd,systemd-sysv,udev,dbus,libnss-systemd,kmod,bindfs,${libpkgs%,}"
B=$W/base
key="$SUITE $INCLUDE"
if [ -n "${VM_FRESH:-}" ] || [ "$(cat "$B/.granary-base" 2>/dev/null)" != "$key" ]; then
    say "debootstrap --variant=minbase $SUITE (+ $INCLUDE)"
    t=$EPOCHREALTIME
    rm -rf "$B" "$B.tmp"
    debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$B.tmp" "$MIRROR" \
        >"$W/debootstrap.log" 2>&1 || { tail -n 20 "$W/debootstrap.log"; die "debootstrap ($W/debootstrap.log)"; }
    rm -f "$B.tmp"/var/cache/apt/archives/*.deb
    # A quiet serial console: no login prompts, no first-boot questions.
    for u in serial-getty@ttyS0.service getty@tty1.service systemd-firstboot.service; do
        ln -sf /dev/null "$B.tmp/etc/systemd/system/$u"
    done
    echo granary-vm > "$B.tmp/etc/hostname"
    printf '/dev/vda / ext4 rw 0 1\n' > "$B.tmp/etc/fstab"
    mkdir -p "$B.tmp/etc/systemd/journald.conf.d"
    printf '[Journal]\nStorage=volatile\nRateLimitBurst=0\n' > "$B.tmp/etc/systemd/journald.conf.d/vm.conf"
    rm -f "$B.tmp/etc/machine-id"
    systemd-machine-id-setup --root="$B.tmp" >/dev/null 2>&1 ||
        od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$B.tmp/etc/machine-id"
    echo "$key" > "$B.tmp/.granary-base"
    mv "$B.tmp" "$B"
    say "debootstrap done in $(secs "$t")s"
fi

# ---- this run's tree: the cached root + Granary, installed as an operator would
R=$W/root
rm -rf "$R"
cp -a "$B" "$R" || die "cp -a $B $R"
make --no-print-directory install PREFIX=/usr DESTDIR="$R" >"$W/install.log" 2>&1 ||
    { tail -n 20 "$W/install.log"; die "make install PREFIX=/usr DESTDIR=$R"; }
# A training job's reader, built the way README.md says: against the
# installed header and library through pkg-config.
# shellcheck disable=SC2046  # pkg-config prints a list of flags
cc -std=gnu11 -O2 -Wall -Wextra -Werror -o "$R/usr/local/bin/gr_read" tests/vm/gr_read.c \
    $(PKG_CONFIG_PATH="$R/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$R" pkg-config --cflags --libs granary) \
    2>"$W/cc.log" || { cat "$W/cc.log"; die "cc tests/vm/gr_read.c"; }
cc -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$R/usr/local/bin/granary-sandbox-probe" \
    tests/vm/sandbox_probe.c 2>"$W/cc.log" || { cat "$W/cc.log"; die "cc tests/vm/sandbox_probe.c"; }
install -m 0755 "${VM_GUEST:-tests/vm/guest.sh}" "$R/usr/local/bin/granary-vm-checks"
# shellcheck disable=SC2086  # a list of programs
[ -n "${VM_EXTRA_BIN:-}" ] && install -m 0755 $VM_EXTRA_BIN "$R/usr/local/bin/"
cat > "$R/etc/systemd/system/granary-vm-checks.service" <<EOF
[Unit]
Description=Granary VM checks (tests/vm/guest.sh)
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/usr/local/bin/granary-vm-checks
Environment=VM_FAULT=${VM_FAULT:-}
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=$((VM_TIMEOUT - 60))
FailureAction=poweroff-force
[Install]
WantedBy=multi-user.target
EOF
ln -sf ../granary-vm-checks.service "$R/etc/systemd/system/multi-user.target.wants/granary-vm-checks.service"
# The source: files on the root's ext4, served to granaryd through a FUSE
# mount (bindfs) as a DFS client would mount them.
mkdir -p "$R/srv/data/warm" "$R/mnt/dfs"
head -c 3000000 /dev/urandom > "$R/srv/data/big.bin"
head -c 100000 /dev/urandom > "$R/srv/data/sample.bin"
head -c 200000 /dev/urandom > "$R/srv/data/evictme.bin"
for i in 1 2 3 4 5 6 7 8; do head -c $((20000 + i * 1000)) /dev/urandom > "$R/srv/data/warm/f$i"; done
echo "root only" > "$R/srv/data/secret"
chmod 0600 "$R/srv/data/secret"
chmod -R a+rX "$R/srv/data"
chmod 0600 "$R/srv/data/secret"
# Modules, for the initramfs (virtio, ext4) and for modprobe fuse in the VM.
rm -rf "$R/lib/modules"
mkdir -p "$R/lib/modules/$KVER"
for ko in $KOS; do
    rel=${ko#"$K"}
    mkdir -p "$R$(dirname "$rel")"
    cp "$ko" "$R$rel"
done
cp "$K/lib/modules/$KVER"/modules.order "$K/lib/modules/$KVER"/modules.builtin* "$R/lib/modules/$KVER/" 2>/dev/null
depmod -b "$R" "$KVER" || die "depmod in the VM root"

t=$EPOCHREALTIME
rm -f "$W/root.img"
mkfs.ext4 -q -F -L granary-vm -d "$R" "$W/root.img" 2G >"$W/mkfs.log" 2>&1 || { cat "$W/mkfs.log"; die "mkfs.ext4 -d"; }
say "root.img from $(du -sh "$R" | cut -f1) in $(secs "$t")s"

# ---- initramfs: busybox, the modules, switch_root to systemd ----------------
I=$W/initramfs
rm -rf "$I"
mkdir -p "$I"/bin "$I"/dev "$I"/proc "$I"/sys "$I"/newroot "$I"/mods
cp /bin/busybox "$I/bin/busybox"
ln -s busybox "$I/bin/sh"
n=0
for ko in $KOS; do
    n=$((n + 1))
    cp "$ko" "$I/mods/$(printf %02d $n)-$(basename "$ko")"
done
cat > "$I/init" <<'EOF'
#!/bin/busybox sh
B=/bin/busybox
$B mount -t devtmpfs devtmpfs /dev
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
for ko in /mods/*.ko; do $B insmod "$ko" 2>/dev/null; done
i=0; while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do $B sleep 0.1; i=$((i + 1)); done
$B mount -t ext4 -o rw /dev/vda /newroot || { echo "initramfs: cannot mount /dev/vda"; $B poweroff -f; }
$B umount /proc /sys
$B mount --move /dev /newroot/dev
echo "initramfs: switch_root to systemd"
exec $B switch_root /newroot /sbin/init
EOF
chmod 0755 "$I/init"
(cd "$I" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) > "$W/initrd.cpio" ||
    die "cpio"

# ---- boot ----------------------------------------------------------------------
say "booting $KVER under qemu-system-x86_64 -accel tcg (-smp $VM_SMP -m $VM_MEM, at most ${VM_TIMEOUT}s)"
t=$EPOCHREALTIME
timeout "$VM_TIMEOUT" qemu-system-x86_64 -nographic -no-reboot -accel tcg \
    -m "$VM_MEM" -smp "$VM_SMP" -nic none \
    -drive file="$W/root.img",if=virtio,format=raw,cache=unsafe \
    -kernel "$K/boot/vmlinuz-$KVER" -initrd "$W/initrd.cpio" \
    -append "root=/dev/vda rw console=ttyS0 panic=-1 quiet mitigations=off" \
    </dev/null 2>&1 | sed -u 's/\r$//' > "$W/console.log"
qrc=${PIPESTATUS[0]}
say "qemu exited ($qrc) after $(secs "$t")s; console: $W/console.log"

# ---- verdict ---------------------------------------------------------------------
sed -n 's/^.*@@INFO /    /p' "$W/console.log"
fails=0
while read -r name verdict rest; do
    if [ "$verdict" = PASS ]; then echo "ok   $name${rest:+ $rest}"; else echo "FAIL $name${rest:+ $rest}"; fails=$((fails + 1)); fi
done < <(sed -n 's/^.*@@RESULT //p' "$W/console.log")
n=$(grep -c '@@RESULT ' "$W/console.log")
grep -q '@@DONE' "$W/console.log" || { echo "FAIL the checks did not run to the end (qemu $qrc)"; fails=$((fails + 1)); }
[ "$qrc" -eq 0 ] || { echo "FAIL qemu exit status $qrc (124: timed out)"; fails=$((fails + 1)); }
# guest.sh makes 78 checks; far fewer means it stopped early.
[ "$n" -ge 70 ] || { echo "FAIL only $n checks reported"; fails=$((fails + 1)); }
if [ "$fails" -ne 0 ]; then
    echo "---- console (last 80 lines)"
    tail -n 80 "$W/console.log"
fi
say "$n checks, $fails failed; total $(secs "$T0")s"
[ "$fails" -eq 0 ]
