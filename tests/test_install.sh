#!/bin/sh
# make install into a scratch DESTDIR: every file lands where it should, a
# program builds against the installed header and library through
# pkg-config and runs, the man pages render without warnings, the shipped
# configuration validates, the installed unit verifies and names the
# installed granaryd, an edited configuration survives a reinstall, and
# PREFIX=/usr/local moves everything but /etc.
set -u
cd "$(dirname "$0")/.." || exit 2
dir=$(mktemp -d /tmp/granary-install-XXXXXX)
fails=0
trap 'rm -rf "$dir"' EXIT INT TERM
check() {   # check DESCRIPTION COMMAND...
    desc=$1
    shift
    if "$@"; then echo "ok   $desc"; else echo "FAIL $desc"; fails=$((fails + 1)); fi
}

r=$dir/root
make --no-print-directory install DESTDIR="$r" PREFIX=/usr > "$dir/make.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] && tail -n 20 "$dir/make.log"
check "make install DESTDIR PREFIX=/usr exit 0" test "$rc" -eq 0

for f in usr/sbin/granaryd usr/bin/granaryctl; do
    check "$f installed, executable" test -f "$r/$f" -a -x "$r/$f"
done
for f in usr/lib/libgranary.a usr/lib/libgranary.so.0 usr/include/granary.h \
         usr/lib/pkgconfig/granary.pc etc/granary/granary.conf \
         usr/share/doc/granary/granary.conf \
         usr/lib/systemd/system/granaryd.service usr/lib/sysusers.d/granary.conf \
         usr/share/man/man1/granaryctl.1 usr/share/man/man3/libgranary.3 \
         usr/share/man/man5/granary.conf.5 usr/share/man/man8/granaryd.8; do
    check "$f installed" test -f "$r/$f" -a -s "$r/$f"
done
check "libgranary.so -> libgranary.so.0" test "$(readlink "$r/usr/lib/libgranary.so")" = libgranary.so.0
readelf -d "$r/usr/lib/libgranary.so.0" | grep -q 'SONAME.*\[libgranary\.so\.0\]'
check "soname libgranary.so.0" test $? -eq 0
check "header is client/granary.h" cmp -s "$r/usr/include/granary.h" client/granary.h
check "config is config/granary.conf" cmp -s "$r/etc/granary/granary.conf" config/granary.conf
check "no file left group- or world-writable" \
    test -z "$(find "$r" -type f -perm /022)"

# ---- build and run a client against the installed files -----------------
export PKG_CONFIG_PATH="$r/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$r"
flags=$(pkg-config --cflags --libs granary)
echo "    pkg-config --cflags --libs granary: $flags"
# shellcheck disable=SC2016  # $1 and $2 expand in the inner shell
check "pkg-config gives -I of the installed header" \
    sh -c 'case " $1 " in *" -I$2/usr/include "*) ;; *) exit 1 ;; esac' - "$flags" "$r"
# shellcheck disable=SC2016
check "pkg-config gives -L and -lgranary -pthread" \
    sh -c 'case " $1 " in *" -L$2/usr/lib -lgranary -pthread "*) ;; *) exit 1 ;; esac' - "$flags" "$r"
check "pkg-config version is set" test -n "$(pkg-config --modversion granary)"
cat > "$dir/app.c" <<'C'
#include <errno.h>
#include <granary.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    char longp[300];
    gr_client *c = gr_connect("/nonexistent/granary.sock");

    if (c || errno != ENOENT) {
        printf("gr_connect on a missing socket: %p, %s\n", (void *)c, strerror(errno));
        return 1;
    }
    memset(longp, 'x', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = '\0';
    if (gr_connect(longp) || errno != ENAMETOOLONG) {
        printf("gr_connect on a long path: %s\n", strerror(errno));
        return 1;
    }
    gr_disconnect(NULL);
    printf("installed libgranary ok\n");
    return 0;
}
C
# shellcheck disable=SC2086  # $flags is a list of words
cc -std=gnu11 -Wall -Werror -o "$dir/app" "$dir/app.c" $flags 2> "$dir/cc.log"
rc=$?
sed 's/^/    /' "$dir/cc.log"
check "a client compiles and links against the installed files" test "$rc" -eq 0
LD_LIBRARY_PATH="$r/usr/lib" ldd "$dir/app" 2>/dev/null | grep -q "libgranary.so.0 => $r/usr/lib/libgranary.so.0"
check "it loads the installed libgranary.so.0" test $? -eq 0
check "it runs: gr_connect fails with ENOENT, ENAMETOOLONG" \
    env LD_LIBRARY_PATH="$r/usr/lib" "$dir/app"
cc -std=gnu11 -Wall -Werror -o "$dir/app-static" "$dir/app.c" -I"$r/usr/include" \
    "$r/usr/lib/libgranary.a" -pthread 2> "$dir/cc.log"
check "it links statically against libgranary.a and runs" "$dir/app-static"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# ---- man pages, configuration, unit, user -------------------------------
for m in "$r"/usr/share/man/man*/*; do
    MANWIDTH=80 man -l --warnings "$m" > "$dir/man.out" 2> "$dir/man.err"
    rc=$?
    sed 's/^/    /' "$dir/man.err"
    check "man -l --warnings $(basename "$m"): renders, no warnings" \
        test "$rc" -eq 0 -a ! -s "$dir/man.err" -a -s "$dir/man.out"
done
# granary.conf(5) is written by hand: every key of the table, in its
# section, with the table's default.
"$r/usr/sbin/granaryd" --describe-config > "$dir/keys"
/usr/bin/python3 - "$dir/keys" "$r/usr/share/man/man5/granary.conf.5" > "$dir/keys.out" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
# Columns are padded to the header's positions; TYPE may contain blanks.
c_def, c_rel = lines[0].index("DEFAULT"), lines[0].index("RELOAD")
keys = [(l.split()[0], l[c_def:c_rel].strip(), l[c_rel:].split()[0]) for l in lines[1:]]
man, sec, key, found, live, prev = open(sys.argv[2]).read().splitlines(), None, None, {}, set(), ""
for l in man:
    m = re.match(r'\.SH "\[(\w+)\] SECTION"', l)
    if l.startswith(".SH"):
        sec, key = (m.group(1) if m else None), None
    m = re.match(r'\.BR (\w+) "(.*)', l)
    if sec and m and prev == ".TP":
        key = "%s.%s" % (sec, m.group(1))
        found[key] = m.group(2)
    if key and l.strip() == "Applied on reload.":
        live.add(key)
    prev = l.split()[0] if l.split() else ""
bad = 0
for k, d, rel in keys:
    # describe prints "" for an empty default; the page says "default empty".
    want = "default empty" if d == '""' else "default \" " + d
    if k not in found or want not in found[k]:
        print("%s (default %s): %s" % (k, d, found.get(k, "not in the page")))
        bad += 1
    # The key table says which keys apply on SIGHUP; the page must agree.
    if (rel == "live") != (k in live):
        print("%s: --describe-config says %s, the page %s" %
              (k, rel, "says \"Applied on reload.\"" if k in live else "does not say it applies on reload"))
        bad += 1
print("%d keys, %d missing or with another default" % (len(keys), bad))
sys.exit(1 if bad or not keys else 0)
PY
rc=$?
sed 's/^/    /' "$dir/keys.out"
check "granary.conf.5 documents every key of --describe-config with its default and reload" test "$rc" -eq 0
"$r/usr/sbin/granaryd" --check-config --config "$r/etc/granary/granary.conf" > "$dir/cc.out" 2>&1
rc=$?
sed 's/^/    /' "$dir/cc.out"
check "the installed granary.conf validates" test "$rc" -eq 0
check "the unit runs /usr/sbin/granaryd" \
    grep -qx 'ExecStart=/usr/sbin/granaryd --config /etc/granary/granary.conf' \
    "$r/usr/lib/systemd/system/granaryd.service"
if command -v systemd-analyze >/dev/null 2>&1; then
    # The binary must exist for verify: point at the installed one.  Its
    # Documentation= man pages are looked up among the installed ones.
    mkdir "$dir/unit"
    sed "s|^ExecStart=/usr/sbin/granaryd |ExecStart=$r/usr/sbin/granaryd |" \
        "$r/usr/lib/systemd/system/granaryd.service" > "$dir/unit/granaryd.service"
    MANPATH="$r/usr/share/man" systemd-analyze verify "$dir/unit/granaryd.service" > "$dir/verify" 2>&1
    rc=$?
    sed 's/^/    /' "$dir/verify"
    check "systemd-analyze verify of the installed unit: clean" test "$rc" -eq 0 -a ! -s "$dir/verify"
else
    echo "SKIP systemd-analyze verify: systemd-analyze is not installed"
fi
if command -v systemd-sysusers >/dev/null 2>&1; then
    s=$dir/sysroot
    mkdir -p "$s/etc" "$s/usr/lib/sysusers.d"
    : > "$s/etc/passwd"; : > "$s/etc/group"; : > "$s/etc/shadow"; : > "$s/etc/gshadow"
    cp "$r/usr/lib/sysusers.d/granary.conf" "$s/usr/lib/sysusers.d/"
    systemd-sysusers --root="$s" > /dev/null 2>&1
    check "systemd-sysusers creates user granary" grep -q '^granary:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' "$s/etc/passwd"
    check "systemd-sysusers creates group granary" grep -q '^granary:x:' "$s/etc/group"
    check "systemd-sysusers creates group granary-admin (the default admin_group)" \
        grep -q '^granary-admin:x:' "$s/etc/group"
else
    echo "SKIP systemd-sysusers: not installed"
fi

# ---- reinstall keeps an edited configuration ----------------------------
echo "# edited by the admin" >> "$r/etc/granary/granary.conf"
make --no-print-directory install DESTDIR="$r" PREFIX=/usr > "$dir/make.log" 2>&1
check "reinstall exit 0" test $? -eq 0
check "reinstall keeps the edited /etc/granary/granary.conf" \
    grep -q '^# edited by the admin$' "$r/etc/granary/granary.conf"

# ---- the LD_PRELOAD shim and the Python package -----------------------------
check "usr/lib/libgranary_preload.so installed (where its header says)" \
    test -f "$r/usr/lib/libgranary_preload.so"
for f in __init__.py _lib.py torch.py; do
    check "usr/lib/python3/dist-packages/granary/$f installed" \
        cmp -s "$r/usr/lib/python3/dist-packages/granary/$f" "python/granary/$f"
done
# The installed package, from outside the checkout, finds the installed
# library (not build/) and reports a missing daemon by its socket.
(cd / && env -u GRANARY_LIB PYTHONPATH="$r/usr/lib/python3/dist-packages" \
    LD_LIBRARY_PATH="$r/usr/lib" /usr/bin/python3 -c '
import sys, granary
from granary.torch import GranaryImageFolder, HintingSampler
assert granary.__file__.startswith(sys.argv[1]), granary.__file__
try:
    granary.Client(sys.argv[2])
except OSError as e:
    assert sys.argv[2] in str(e), e
    print("installed package ok:", granary.library_path)
' "$r" "$dir/no.sock") > "$dir/py.out" 2>&1
rc=$?
sed 's/^/    /' "$dir/py.out"
check "installed python package imports and uses the installed library" test $rc -eq 0
grep -q "ok: .*libgranary.so.0" "$dir/py.out"
check "... libgranary.so.0, not the checkout's build/" test $? -eq 0
echo 'int main(void) { return 0; }' > "$dir/nop.c" && cc -o "$dir/nop" "$dir/nop.c"
LD_PRELOAD="$r/usr/lib/libgranary_preload.so" "$dir/nop" 2> "$dir/pre.err"
check "installed shim loads" test $? -eq 0 -a ! -s "$dir/pre.err"

# ---- PREFIX=/usr/local ---------------------------------------------------
l=$dir/local
make --no-print-directory install DESTDIR="$l" > "$dir/make.log" 2>&1
check "make install with the default PREFIX exit 0" test $? -eq 0
check "default PREFIX is /usr/local" test -x "$l/usr/local/sbin/granaryd" -a -x "$l/usr/local/bin/granaryctl"
check "config still in /etc/granary" test -f "$l/etc/granary/granary.conf"
check "unit in /usr/local/lib/systemd/system runs /usr/local/sbin/granaryd" \
    grep -qx 'ExecStart=/usr/local/sbin/granaryd --config /etc/granary/granary.conf' \
    "$l/usr/local/lib/systemd/system/granaryd.service"
check "granary.pc in /usr/local/lib/pkgconfig with prefix /usr/local" \
    grep -qx 'prefix=/usr/local' "$l/usr/local/lib/pkgconfig/granary.pc"
check "man pages in /usr/local/share/man" test -f "$l/usr/local/share/man/man8/granaryd.8"
pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
check "python package in /usr/local/lib/python$pyver/dist-packages (on Debian's sys.path)" \
    test -f "$l/usr/local/lib/python$pyver/dist-packages/granary/__init__.py"
check "shim in /usr/local/lib" test -f "$l/usr/local/lib/libgranary_preload.so"

[ "$fails" -eq 0 ]
