#!/bin/sh
# bench/isolation.sh - what multi-user isolation costs on hot reads, side by
# side in one run (DRAM tier, local file, bytes cached before each case):
#   1. 4 MiB sequential gr_pread and 64 KiB random gr_pread (hotbench, one
#      process): root reading what root cached (its own segments: zero-copy),
#      another uid reading what root cached (other segments: copied inline),
#      and that uid reading what it cached itself (its own segments);
#   2. opens per second (gr_open + 4 KiB gr_pread + gr_close, one process)
#      for a non-root client with [daemon] access_check = fd (its own open(2)
#      as proof) and = none (no proof), and for root.
# Writes $OUT/isolation.md.  Needs root (a second user, setpriv).
set -eu
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)}
SECS=${ISO_SECS:-2}
work=build/bench-isolation
user=granary-test
mkdir -p "$OUT" "$work/src"
chmod 755 "$work" "$work/src"
id "$user" > /dev/null 2>&1 || useradd -M -N -s /usr/sbin/nologin "$user"
as() { setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups "$@"; }
make -s build/granaryd build/bench/hotbench build/libgranary.so
file1=$(pwd)/$work/src/hot1.bin         # cached by root
file2=$(pwd)/$work/src/hot2.bin         # cached by the other uid
for f in "$file1" "$file2"; do
    [ -f "$f" ] || head -c $((128 << 20)) /dev/urandom > "$f"
    chmod 644 "$f"
done
i=0
while [ $i -lt 200 ]; do
    head -c 4096 /dev/urandom > "$work/src/s$i"
    i=$((i + 1))
done
chmod 644 "$work"/src/s*

gpid=
stop() { [ -n "$gpid" ] && { kill "$gpid"; wait "$gpid" || true; }; gpid=; }
trap stop EXIT
start() {   # start ACCESS_CHECK
    stop
    rm -f "$work/gr.sock"
    cat > "$work/g.conf" << EOF
[daemon]
socket = $(pwd)/$work/gr.sock
socket_mode = 0666
log_level = warn
access_check = $1
[source]
roots = $(pwd)/$work/src
chunk_size = 4M
attr_ttl = 600
[dram]
capacity = 640M
[nvme]
path =
[prefetch]
readahead_max = 0
[metrics]
listen =
EOF
    build/granaryd --config "$work/g.conf" 2>> "$work/granaryd.log" &
    gpid=$!
    i=0
    while [ ! -S "$work/gr.sock" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
}
hb() {   # hb [as] FILE SIZE PATTERN: prints GB/s
    pre=
    if [ "$1" = as ]; then pre="as"; shift; fi
    $pre build/bench/hotbench run --sys gr -s "$work/gr.sock" --file "$1" --size "$2" \
        --pattern "$3" --secs "$SECS" --scenario iso |
        sed -n 's/.*"GBps": \([0-9.]*\).*/\1/p'
}
median() { tr ' ' '\n' | sort -g | sed -n 2p; }   # of three
opens() {   # opens [as]: opens per second
    pre=
    if [ "$1" = as ]; then pre="as"; fi
    $pre /usr/bin/python3 - "$work/gr.sock" "$(pwd)/$work/src" << 'EOF'
import ctypes, sys, time
L = ctypes.CDLL("build/libgranary.so")
L.gr_connect.restype = ctypes.c_void_p
L.gr_open.restype = ctypes.c_void_p
L.gr_open.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
L.gr_pread.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
L.gr_close.argtypes = [ctypes.c_void_p]
c = L.gr_connect(sys.argv[1].encode())
buf = ctypes.create_string_buffer(4096)
paths = [("%s/s%d" % (sys.argv[2], i)).encode() for i in range(200)]
for p in paths:                       # warm: attrs and bytes cached
    f = L.gr_open(c, p); L.gr_pread(f, buf, 4096, 0); L.gr_close(f)
n, t0 = 0, time.monotonic()
while time.monotonic() - t0 < 2:
    for p in paths:
        f = L.gr_open(c, p)
        assert f, p
        L.gr_pread(f, buf, 4096, 0)
        L.gr_close(f)
        n += 1
print("%.0f" % (n / (time.monotonic() - t0)))
EOF
}
start fd
build/granaryctl -s "$work/gr.sock" cat "$file1" > /dev/null
as build/granaryctl -s "$work/gr.sock" cat "$file2" > /dev/null
# Three rounds, the cases interleaved; medians.
a= b= c= d= e= f= g= h= k=
for round in 1 2 3; do
    a="$a $(hb "$file1" 4M seq)"; b="$b $(hb "$file1" 64K rand)"
    c="$c $(hb as "$file1" 4M seq)"; d="$d $(hb as "$file1" 64K rand)"
    e="$e $(hb as "$file2" 4M seq)"; f="$f $(hb as "$file2" 64K rand)"
    g="$g $(opens as)"; h="$h $(opens root)"
done
start none
for round in 1 2 3; do k="$k $(opens as)"; done
stop
r_root4=$(echo $a | median); r_root64=$(echo $b | median)
u_other4=$(echo $c | median); u_other64=$(echo $d | median)
u_own4=$(echo $e | median); u_own64=$(echo $f | median)
o_fd=$(echo $g | median); o_root=$(echo $h | median); o_none=$(echo $k | median)
ratio() { echo "$1 / $2" | bc -l; }
{
    echo "## What isolation costs on hot reads"
    echo
    echo "DRAM tier, two 128 MiB files cached (one by root, one by another uid), one reading process, $SECS s per case, medians of 3 interleaved rounds, chunk 4 MiB. Command: \`bench/isolation.sh\`."
    echo
    echo "| case | 4 MiB seq GB/s | 64 KiB random GB/s | / root's own |"
    echo "|---|---|---|---|"
    printf '| root reads what root cached (its segments, zero-copy) | %s | %s | 1.00x / 1.00x |\n' "$r_root4" "$r_root64"
    printf '| another uid reads what root cached (copied inline) | %s | %s | %.2fx / %.2fx |\n' "$u_other4" "$u_other64" "$(ratio "$u_other4" "$r_root4")" "$(ratio "$u_other64" "$r_root64")"
    printf '| that uid reads what it cached (its segments) | %s | %s | %.2fx / %.2fx |\n' "$u_own4" "$u_own64" "$(ratio "$u_own4" "$r_root4")" "$(ratio "$u_own64" "$r_root64")"
    echo
    echo "| opens (gr_open + 4 KiB read + gr_close, Python ctypes loop, local files) | per second | / access_check = none |"
    echo "|---|---|---|"
    printf '| non-root, access_check = none (no proof) | %s | 1.00x |\n' "$o_none"
    printf '| non-root, access_check = fd (its own open(2) as proof) | %s | %.2fx |\n' "$o_fd" "$(ratio "$o_fd" "$o_none")"
    printf '| root (never needs a proof) | %s | %.2fx |\n' "$o_root" "$(ratio "$o_root" "$o_none")"
} > "$OUT/isolation.md"
cat "$OUT/isolation.md"
