#!/bin/sh
# The LD_PRELOAD shim (build/libgranary_preload.so) against a real granaryd:
# cat, cmp, Python's open().read() and tar under the shim write exactly what
# they write without it, and the daemon's bytes_served grows by what they
# read (the shim really served them): also dd, shell redirects, dup, stdio
# (sha256sum, md5sum < file, sed, numpy.load), mmap (np.memmap), PIL,
# torchvision.io.read_image and fio --verify; file-offset semantics (lseek, dup,
# fork, readv, mmap, sendfile, a descriptor closed behind the shim's back);
# then the daemon dies mid-read and is stopped, and everything still works
# from the files (fallthrough).
cd "$(dirname "$0")/.."
NAME=preload
. tests/lib.sh
PRE=${PRE:-$PWD/build/libgranary_preload.so}
PY=/usr/bin/python3
served() {  # the daemon's bytes_served
    $CTL -s "$dir/sock" stats --json | sed -n 's/.*"bytes_served": *\([0-9]*\).*/\1/p'
}
pre() {     # run a command under the shim
    env LD_PRELOAD="$PRE" GRANARY_SOCKET="$dir/sock" GRANARY_PRELOAD_ROOTS="$dir/src" "$@"
}
grew() {    # grew BEFORE AT_LEAST: bytes_served rose by at least AT_LEAST
    now=$(served)
    [ -n "$now" ] && [ $((now - $1)) -ge "$2" ]
}

check "shim built" test -f "$PRE"
mkdir -p "$dir/src/tree/sub" "$dir/out"
head -c 5000000 /dev/urandom > "$dir/src/big.bin"
cp "$dir/src/big.bin" "$dir/out/big.copy"               # outside the roots: the truth
cp "$dir/src/big.bin" "$dir/src/diff.bin"
# Change byte 3000000 (0-based) to a value it surely did not have.
b=$(od -An -tu1 -j3000000 -N1 "$dir/src/big.bin" | tr -d ' ')
printf "\\$(printf '%03o' $(( (b + 1) % 256 )))" | dd of="$dir/src/diff.bin" bs=1 seek=3000000 conv=notrunc 2>/dev/null
printf 'hello granary\n' > "$dir/src/small.txt"
printf 'outside\n' > "$dir/out/outside.txt"
: > "$dir/src/empty"
for i in 1 2 3 4 5 6; do head -c $((i * 37000)) /dev/urandom > "$dir/src/tree/f$i"; done
head -c 1500000 /dev/urandom > "$dir/src/tree/sub/g"
ln -s f1 "$dir/src/tree/link"
tree_bytes=$(cat "$dir"/src/tree/f* "$dir/src/tree/sub/g" | wc -c)
# THP, not hugetlb, whatever pool the machine has: the shim's zero-copy mmap
# places arena pages with mremap, which hugetlb allows only in whole 2 MiB
# pages (granary.conf(5), huge_pages), and mmap_served asserts zero-copy.
write_conf "[dram]
huge_pages = thp"
start_daemon

# --- the same output with and without the shim, served by the daemon ----------
# run_both NAME MIN_SERVED COMMAND...: stdout+stderr+exit status compared
run_both() {
    name=$1 min=$2
    shift 2
    "$@" > "$dir/$name.plain" 2>&1
    echo "exit $?" >> "$dir/$name.plain"
    b=$(served)
    pre "$@" > "$dir/$name.pre" 2>&1
    echo "exit $?" >> "$dir/$name.pre"
    check "$name: identical under LD_PRELOAD" cmp -s "$dir/$name.plain" "$dir/$name.pre"
    check "$name: served by the daemon (bytes_served +$min)" grew "$b" "$min"
}
run_both cat 5000014 cat "$dir/src/big.bin" "$dir/src/small.txt" "$dir/src/empty"
run_both "cmp same" 5000000 cmp "$dir/src/big.bin" "$dir/out/big.copy"
run_both "cmp differ" 3000000 cmp "$dir/src/big.bin" "$dir/src/diff.bin"
check "cmp differ: says where" grep -q "differ: byte 3000001" "$dir/cmp differ.pre"
# md5sum over a directory of small files (the glob is in name order): the
# daemon sees the opens in order and reads the files after each ahead of
# it (read-ahead across files, granary.conf(5) dir_readahead), and the
# shim's libgranary opens the files after each ahead of md5sum (its
# directory scan, libgranary(3)); a second pass, warm, the same.
stat_of() { $CTL -s "$dir/sock" stats --json | sed -n "s/.*\"$1\": *\([0-9]*\).*/\1/p"; }
mkdir -p "$dir/src/ds"
for i in $(seq 0 47); do head -c $((20000 + 97 * i)) /dev/urandom > "$dir/src/ds/s$(printf %02d $i)"; done
pu=$(stat_of prefetch_used)
run_both "md5sum of a directory" 900000 md5sum "$dir"/src/ds/*
check "md5sum of a directory: the daemon read ahead across its files" \
    test "$(stat_of dir_readahead_streams)" -ge 1 -a "$(stat_of prefetch_used)" -ge $((pu + 30))
run_both "md5sum of a directory, warm" 900000 md5sum "$dir"/src/ds/*
# Python reads the directory (in name order, or in the order it lists its
# files: an unsorted os.listdir, as tar and find read, not name order on any
# file system here: ext4 lists in hash order, tmpfs newest first) and exits
# at once: the shim's counters reach the daemon as the process exits.
py_scan() {
    lu=$(stat_of lookahead_used)
    pre $PY -c 'import os, sys
d = sys.argv[1]
fs = [os.path.join(d, f) for f in os.listdir(d)]
if sys.argv[2] == "name":
    fs.sort()
else:
    assert fs != sorted(fs)
print(sum(len(open(f, "rb").read()) for f in fs))' "$dir/src/ds" "$1" > "$dir/scan-$1.out" 2>&1
    check "a scan of a directory in $1 order under the shim: its files were opened ahead" \
        test "$(stat_of lookahead_used)" -ge $((lu + 30))
}
py_scan name
py_scan listing
run_both python 5000000 $PY -c \
    'import sys; sys.stdout.buffer.write(open(sys.argv[1], "rb").read())' "$dir/src/big.bin"
run_both tar "$tree_bytes" tar cf - -C "$dir/src" tree
# Duplicated and inherited descriptors: dd opens its input and dup2()s it
# onto 0 (stdin is /dev/null here, so the open gets another number); a
# shell redirect opens in the shell and the program inherits the
# descriptor across exec; Python's os.dup is fcntl(F_DUPFD_CLOEXEC) and
# os.dup2(inheritable=False) is dup3.
run_both dd 5000000 sh -c 'dd if="$1" bs=1M status=none < /dev/null' sh "$dir/src/big.bin"
run_both "shell redirect" 5000000 sh -c 'cat < "$1"' sh "$dir/src/big.bin"
run_both "redirect to fd 3" 5000000 sh -c 'exec 3< "$1"; cat <&3' sh "$dir/src/big.bin"
# bash saves whatever holds the number it redirects onto and dup2()s over
# it: with the shim's socket at the lowest free number (4 here, after the
# open of the file itself) its forked child used to close the program's
# descriptor 4 when dropping the parent's connection.
run_both "bash exec 4<" 5000000 bash -c 'exec 4< "$1"; cat <&4 | cat' bash "$dir/src/big.bin"
# stdio: sha256sum fopen()s and fread()s; `md5sum < file` reads stdin;
# sed getline()s; numpy.load reads the header with Python and the array
# with fread on an fdopen()ed dup of the descriptor.
head -c 1000000 /dev/urandom | od -An -tx1 > "$dir/src/text.txt"
text_bytes=$(wc -c < "$dir/src/text.txt")
run_both sha256sum 5000000 sha256sum "$dir/src/big.bin" "$dir/src/small.txt" "$dir/src/empty"
run_both "md5sum redirect" 5000000 sh -c 'md5sum < "$1"' sh "$dir/src/big.bin"
run_both sed "$text_bytes" sed -n 's/ 0a / X /p' "$dir/src/text.txt"
$PY -c 'import numpy as np, sys; np.random.seed(1); np.save(sys.argv[1], np.random.rand(500000))' \
    "$dir/src/arr.npy"
run_both numpy.load 4000000 $PY -c '
import numpy as np, sys
a = np.load(sys.argv[1])
sys.stdout.buffer.write(a.tobytes())
' "$dir/src/arr.npy"
run_both np.memmap 5000000 $PY -c '
import numpy as np, sys
sys.stdout.buffer.write(np.memmap(sys.argv[1], dtype=np.uint8, mode="r").tobytes())
' "$dir/src/big.bin"
# Images (PIL, torchvision) and fio's verify, where installed (deps.sh
# installs python3-pil, python3-torchvision and fio).
if $PY -c 'import PIL' 2>/dev/null; then
    $PY -c '
import random, sys
from PIL import Image
r = random.Random(1)
Image.frombytes("RGB", (640, 480), r.randbytes(640 * 480 * 3)).save(sys.argv[1], quality=90)
' "$dir/src/img.jpg"
    img_bytes=$(wc -c < "$dir/src/img.jpg")
    run_both PIL "$img_bytes" $PY -c '
import sys
from PIL import Image
sys.stdout.buffer.write(Image.open(sys.argv[1]).tobytes())
' "$dir/src/img.jpg"
    if $PY -c 'import torchvision' 2>/dev/null; then
        run_both torchvision.io.read_image "$img_bytes" $PY -c '
import sys, torchvision.io
sys.stdout.buffer.write(torchvision.io.read_image(sys.argv[1]).numpy().tobytes())
' "$dir/src/img.jpg"
    else
        echo "SKIP: torchvision.io.read_image: torchvision not importable (Debian: python3-torchvision)"
    fi
else
    echo "SKIP: PIL, torchvision: PIL not importable (Debian: python3-pil)"
fi
if command -v fio > /dev/null; then
    fio --name=w --filename="$dir/src/fio.dat" --rw=write --bs=64k --size=4m --verify=md5 --verify_state_save=0 \
        --do_verify=0 --output=/dev/null > /dev/null 2>&1
    for rw in read randread; do
        run_both "fio $rw --verify=md5" 4194304 fio --name=r --filename="$dir/src/fio.dat" \
            --rw=$rw --bs=64k --size=4m --verify=md5 --ioengine=psync --randrepeat=1 \
            --output-format=terse --terse-version=3 --output="$dir/fio.$rw"
        check "fio $rw --verify=md5: no verify error" grep -q '^3;[^;]*;r;0;0;' "$dir/fio.$rw"
    done
else
    echo "SKIP: fio: not installed (Debian: fio)"
fi
run_both "python dup" 5000000 $PY -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
d = os.dup(fd)
os.close(fd)
e = os.dup2(d, 50, inheritable=False)
os.close(d)
while True:
    b = os.read(e, 1 << 20)
    if not b:
        break
    sys.stdout.buffer.write(b)
' "$dir/src/big.bin"
b=$(served)
env LD_PRELOAD="$PRE" GRANARY_CONFIG="$dir/g.conf" GRANARY_SOCKET= GRANARY_PRELOAD_ROOTS= \
    cat "$dir/src/big.bin" | cmp -s - "$dir/src/big.bin"
check "roots and socket from GRANARY_CONFIG" test $? -eq 0
check "GRANARY_CONFIG: served" grew "$b" 5000000
b=$(served)
pre cat /etc/passwd | cmp -s - /etc/passwd
check "outside the roots: the real file" test $? -eq 0
GRANARY_PRELOAD=0 pre cat "$dir/src/big.bin" | cmp -s - "$dir/src/big.bin"
check "GRANARY_PRELOAD=0: the real file" test $? -eq 0
now=$(served)
check "neither was served by the daemon" test "$now" -eq "$b"

# --- descriptor semantics under the shim -----------------------------------------
cat > "$dir/sem.py" <<'PY'
"""Checks run under the shim; argv: test name, src dir, out dir."""
import mmap, os, shutil, sys, threading
test, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
big = os.path.join(src, "big.bin")
data = open(os.path.join(out, "big.copy"), "rb").read()    # outside the roots


def offsets():
    fd = os.open(big, os.O_RDONLY)
    assert os.read(fd, 1000) == data[:1000]
    assert os.lseek(fd, 500, os.SEEK_CUR) == 1500
    assert os.read(fd, 100) == data[1500:1600]
    assert os.pread(fd, 50, 10) == data[10:60]
    assert os.lseek(fd, 0, os.SEEK_CUR) == 1600
    fd2 = os.dup(fd)                       # shares the offset
    assert os.read(fd2, 10) == data[1600:1610]
    assert os.read(fd, 10) == data[1610:1620]
    os.close(fd2)
    assert os.fstat(fd).st_size == len(data)
    os.lseek(fd, 0, os.SEEK_SET)
    buf = bytearray(100)
    assert os.readv(fd, [buf]) == 100 and bytes(buf) == data[:100]   # unserved, same offset
    assert os.read(fd, 100) == data[100:200]
    os.lseek(fd, -10, os.SEEK_END)
    assert os.read(fd, 100) == data[-10:] and os.read(fd, 100) == b""
    with open(big, "rb") as f:             # buffered Python file: readinto, seek
        f.seek(3_000_000)
        assert f.read(1 << 20) == data[3_000_000:3_000_000 + (1 << 20)]
        assert f.tell() == 3_000_000 + (1 << 20)
    os.close(fd)


def leases():
    """The daemon's leases_active, asked by granaryctl (not under the shim);
    None without a daemon."""
    import json, subprocess
    r = subprocess.run(["build/granaryctl", "-s", os.environ["GRANARY_SOCKET"], "stats",
                        "--json"], capture_output=True, env=dict(os.environ, LD_PRELOAD=""))
    return json.loads(r.stdout)["leases_active"] if r.returncode == 0 else None


def fork():
    fd = os.open(big, os.O_RDONLY)
    assert os.read(fd, 1000) == data[:1000]
    held = leases()                                          # the lease cache keeps its chunk
    pid = os.fork()
    if pid == 0:
        ok = os.read(fd, 1000) == data[1000:2000]          # inherited descriptor
        with open(os.path.join(src, "small.txt"), "rb") as f:   # the child's own connection
            ok = ok and f.read() == b"hello granary\n"
        os._exit(0 if ok else 1)
    _, st = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(st) == 0, "child failed"
    # The child let go of the connection it inherited without a word on it:
    # the leases the parent keeps are still the parent's.
    assert held is None or (held >= 1 and leases() >= held), (held, leases())
    assert os.read(fd, 1000) == data[2000:3000]            # the child moved the shared offset
    assert open(big, "rb").read() == data
    os.close(fd)


def threads():
    errs = []
    fd = os.open(big, os.O_RDONLY)

    def work(seed):
        import random
        r = random.Random(seed)
        try:
            own = os.open(big, os.O_RDONLY)
            for _ in range(40):
                off, n = r.randrange(len(data)), r.randrange(1, 400_000)
                use = fd if r.random() < 0.5 else own
                if os.pread(use, n, off) != data[off:off + n]:
                    errs.append((off, n))
            os.close(own)
        except Exception as e:
            errs.append(e)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    os.close(fd)
    assert not errs, errs[:3]


def mmap_sendfile():
    with open(big, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)   # falls through to the file
        assert m[:] == data
        m.close()
    fd = os.open(big, os.O_RDONLY)
    dst = os.path.join(out, "sendfile.out")
    o = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    while os.sendfile(o, fd, None, 1 << 20):
        pass
    assert os.sendfile(o, fd, 10, 5) == 5               # explicit offset: position unchanged
    assert os.lseek(fd, 0, os.SEEK_CUR) == len(data)
    os.close(o)
    os.close(fd)
    assert open(dst, "rb").read() == data + data[10:15]
    shutil.copyfile(big, dst)
    assert open(dst, "rb").read() == data


def reuse():
    outside = os.path.join(out, "outside.txt")
    a = os.open(os.path.join(src, "small.txt"), os.O_RDONLY)
    b = os.open(outside, os.O_RDONLY)
    os.dup2(b, a)                          # a is now the outside file
    assert os.read(a, 100) == b"outside\n"
    os.close(a)
    os.close(b)
    a = os.open(os.path.join(src, "small.txt"), os.O_RDONLY)
    os.closerange(a, a + 1)                # close_range(2): behind the shim's back
    r, w = os.pipe()                       # likely reuses a's number
    os.write(w, b"pipe!")
    assert os.read(r, 100) == b"pipe!"
    c = os.open(outside, os.O_RDONLY)
    assert os.read(c, 100) == b"outside\n"
    for x in (r, w, c):
        os.close(x)


def stdio():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    P, L, I = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    for name, res, args in [("fopen", P, [ctypes.c_char_p, ctypes.c_char_p]),
                            ("fdopen", P, [I, ctypes.c_char_p]),
                            ("fread", ctypes.c_size_t, [P, ctypes.c_size_t, ctypes.c_size_t, P]),
                            ("fseek", I, [P, L, I]), ("ftell", L, [P]), ("fgetc", I, [P]),
                            ("ungetc", I, [I, P]), ("fileno", I, [P]), ("fclose", I, [P]),
                            ("feof", I, [P]), ("fgets", P, [P, I, P])]:
        fn = getattr(libc, name)
        fn.restype, fn.argtypes = res, args

    def fread(fp, n):
        buf = ctypes.create_string_buffer(n)
        got = libc.fread(buf, 1, n, fp)
        return buf.raw[:got]

    fp = libc.fopen(big.encode(), b"rb")
    assert fp
    fd = libc.fileno(fp)
    assert fd >= 0 and os.fstat(fd).st_size == len(data), fd
    assert fread(fp, 1000) == data[:1000]
    assert libc.fgetc(fp) == data[1000]
    assert libc.ungetc(0x41, fp) == 0x41 and libc.fgetc(fp) == 0x41
    assert libc.ftell(fp) == 1001
    assert libc.fseek(fp, 3_000_000, os.SEEK_SET) == 0
    assert fread(fp, 300_000) == data[3_000_000:3_300_000]   # larger than the buffer
    assert libc.ftell(fp) == 3_300_000
    assert libc.fseek(fp, -10, os.SEEK_END) == 0
    assert fread(fp, 100) == data[-10:] and libc.feof(fp)
    assert libc.fclose(fp) == 0
    try:
        os.fstat(fd)                       # fclose closed the descriptor
        raise AssertionError("descriptor %d still open" % fd)
    except OSError:
        pass
    fp = libc.fopen(os.path.join(src, "small.txt").encode(), b"re")
    line = ctypes.create_string_buffer(100)
    assert libc.fgets(line, 100, fp) and line.value == b"hello granary\n"
    assert not libc.fgets(line, 100, fp) and libc.feof(fp)
    libc.fclose(fp)
    assert not libc.fopen(os.path.join(src, "nope").encode(), b"r")
    assert ctypes.get_errno() == 2         # ENOENT, as glibc's fopen
    fp = libc.fopen(os.path.join(out, "outside.txt").encode(), b"r")   # not served: glibc's
    assert fread(fp, 100) == b"outside\n" and libc.fileno(fp) >= 0
    libc.fclose(fp)
    fd = os.open(big, os.O_RDONLY)
    os.lseek(fd, 500, os.SEEK_SET)
    fp = libc.fdopen(os.dup(fd), b"rb")    # numpy's way: the shared offset
    assert fread(fp, 1000) == data[500:1500]
    assert libc.ftell(fp) == 1500
    libc.fclose(fp)
    assert os.read(fd, 10) and os.fstat(fd)   # the original is still open
    os.close(fd)


def clobber():
    """The program takes the shim's socket number over (dup2 onto it, as a
    shell's `exec N<` does): the shim forgets it, never closes it, and its
    files fall back; a child after fork keeps the program's descriptor;
    new opens connect again."""
    import resource
    f = open(big, "rb", buffering=0)
    assert f.read(1000) == data[:1000]
    socks = []
    for n in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + n).startswith("socket:"):
                socks.append(int(n))
        except OSError:                                    # listdir's own descriptor
            pass
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert len(socks) == 1 and socks[0] >= min(512, soft // 2), socks   # kept high
    s = socks[0]
    outside = os.open(os.path.join(out, "outside.txt"), os.O_RDONLY)
    os.dup2(outside, s)
    assert f.read(2000) == data[1000:3000]                # falls back, still right
    pid = os.fork()
    if pid == 0:
        ok = os.pread(s, 100, 0) == b"outside\n"          # not closed by the child's reset
        with open(os.path.join(src, "small.txt"), "rb") as g:
            ok = ok and g.read() == b"hello granary\n"
        ok = ok and os.pread(s, 100, 0) == b"outside\n"
        os._exit(0 if ok else 1)
    _, st = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(st) == 0, "child failed"
    with open(os.path.join(src, "small.txt"), "rb") as g:    # a new connection
        assert g.read() == b"hello granary\n"
    os.close(s)                                            # closing it is the program's business
    assert f.read() == data[3000:]
    assert os.pread(outside, 100, 0) == b"outside\n"
    f.close()


def mmap_served():
    """Read-only mmaps of a served file are the daemon's pages (the arena's
    memfd in /proc/self/maps, not a copy); the tail past the end of the file
    reads as zeros; munmap gives the leases back."""
    import ctypes, mmap
    import numpy as np
    def where(buf):
        addr = np.frombuffer(buf, dtype=np.uint8).ctypes.data
        for line in open("/proc/self/maps"):
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return line.split()[5:] and line.split()[5] or "anon"
        return "?"

    for flags in (mmap.MAP_SHARED, mmap.MAP_PRIVATE):
        with open(big, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)
        assert len(m) == len(data) and m[:] == data          # the descriptor is closed
        assert "granary-arena" in where(m), where(m)
        held = leases()
        m.close()
        assert held >= 5 and leases() <= held - 5, (held, leases())   # its 5 chunks given back
        with open(big, "rb") as f:                            # an offset, a length
            m = mmap.mmap(f.fileno(), 3 * 65536, flags=flags, prot=mmap.PROT_READ,
                          offset=16 * 65536)
            assert m[:] == data[16 * 65536:19 * 65536]
            m.close()
    tail = os.path.join(src, "tree", "f1")                    # 37000 bytes: a partial page
    tdata = open(tail, "rb").read()
    fd = os.open(tail, os.O_RDONLY)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    n = (len(tdata) + 4095) // 4096 * 4096
    p = libc.mmap(None, n, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert p and p != ctypes.c_void_p(-1).value
    got = ctypes.string_at(p, n)
    assert got[:len(tdata)] == tdata and got[len(tdata):] == bytes(n - len(tdata)), "tail"
    assert libc.munmap(p, n) == 0
    os.close(fd)
    arr = np.memmap(big, dtype=np.uint8, mode="r")
    assert arr.tobytes() == data
    del arr
    # Writable or executable mappings are the file's own.
    with open(big, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE,
                      prot=mmap.PROT_READ | mmap.PROT_WRITE)
        assert "granary-arena" not in where(m)
        m[0:3] = b"abc"                                       # copy on write, as ever
        assert m[3:100] == data[3:100]
        m.close()
    assert open(big, "rb").read(3) == data[:3]


globals()[test]()
PY
for t in offsets fork threads mmap_sendfile reuse clobber mmap_served stdio; do
    b=$(served)
    lc=                                 # mmap_served counts leases: none kept by the lease cache
    [ $t = mmap_served ] && lc=0
    GRANARY_LEASE_CACHE=$lc pre $PY "$dir/sem.py" $t "$dir/src" "$dir/out" > "$dir/sem.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/    /' "$dir/sem.log"
    check "semantics under the shim: $t" test $rc -eq 0
done
check "stdio streams were served (bytes_served +3000000)" grew "$b" 3000000

# --- the daemon goes away ---------------------------------------------------------
# stat from a registered dataset's manifest (issue 15): the same answers as
# the file system's, looked up in the manifest (dataset_lookups grows), a
# missing path ENOENT, a link's lstat the link's (the file system's).
mkdir -p "$dir/src/ds/a"
for k in 1 2 3; do echo "s$k" > "$dir/src/ds/a/f$k"; done
ln -s f1 "$dir/src/ds/a/l1"
$CTL -s "$dir/sock" dataset add "$dir/src/ds" > /dev/null
for _ in $(seq 1 250); do $CTL -s "$dir/sock" dataset list | grep -q ': ready,' && break; sleep 0.02; done
cat > "$dir/st.py" <<'PY'
import os, sys
t = sys.argv[1]
for p in ("a/f1", "a/f2", "a", "", "a/l1"):
    f = os.path.join(t, p) if p else t
    s, l = os.stat(f), os.lstat(f)
    print(p, s.st_ino, s.st_size, s.st_mode, s.st_uid, s.st_mtime_ns, l.st_ino, l.st_mode)
try:
    os.stat(os.path.join(t, "a", "nope"))
    print("nope exists")
except FileNotFoundError:
    print("nope ENOENT")
print(os.path.isfile(os.path.join(t, "a", "f3")), os.path.getsize(os.path.join(t, "a", "f3")))
PY
$PY "$dir/st.py" "$dir/src/ds" > "$dir/st.plain" 2>&1
l0=$($CTL -s "$dir/sock" stats --json | sed -n 's/.*"dataset_lookups": *\([0-9]*\).*/\1/p')
pre $PY "$dir/st.py" "$dir/src/ds" > "$dir/st.shim" 2>&1
l1=$($CTL -s "$dir/sock" stats --json | sed -n 's/.*"dataset_lookups": *\([0-9]*\).*/\1/p')
check "stat and lstat under the shim: the file system's answers" cmp -s "$dir/st.plain" "$dir/st.shim"
check "stat under the shim: from the manifest (dataset_lookups $l0 -> $l1)" test "$l1" -gt "$l0"
# Threads stat the dataset while the main thread forks children that stat
# it too (a DataLoader's shape): no child may hang on a lock a parent's
# thread held at the fork.
cat > "$dir/stfork.py" <<'PY'
import os, sys, threading, time
t = sys.argv[1]
stop = False
def spin():
    while not stop:
        os.stat(os.path.join(t, "a", "f1"))
ths = [threading.Thread(target=spin) for _ in range(3)]
for th in ths:
    th.start()
for i in range(40):
    pid = os.fork()
    if pid == 0:
        os.stat(os.path.join(t, "a", "f2"))
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    assert st == 0, st
stop = True
for th in ths:
    th.join()
print("ok")
PY
pre timeout 60 $PY "$dir/stfork.py" "$dir/src/ds" > "$dir/stfork.log" 2>&1
check "stat under the shim: 40 forks beside stat'ing threads, none hangs" grep -qx ok "$dir/stfork.log"
$CTL -s "$dir/sock" dataset remove 1 > /dev/null

cat > "$dir/die.py" <<PY
import os, signal, time
data = open("$dir/out/big.copy", "rb").read()
fd = os.open("$dir/src/big.bin", os.O_RDONLY)
first = os.read(fd, 1 << 20)
os.kill($pid, signal.SIGTERM)
for _ in range(500):
    if not os.path.exists("$dir/sock"):
        break
    time.sleep(0.01)
rest = b""
while True:
    b = os.read(fd, 300000)
    if not b:
        break
    rest += b
assert first + rest == data, "mixed or short"
assert open("$dir/src/small.txt", "rb").read() == b"hello granary\n"
PY
pre $PY "$dir/die.py" > "$dir/die.log" 2>&1
rc=$?
[ $rc -ne 0 ] && sed 's/^/    /' "$dir/die.log"
check "daemon dies mid-read: the rest comes from the file" test $rc -eq 0
wait "$pid"
check "daemon stopped cleanly" test $? -eq 0
pid=
check "daemon gone" test ! -e "$dir/sock"

for name in cat "cmp same" "cmp differ" tar sha256sum "md5sum redirect" dd; do
    case $name in
    sha256sum) set -- sha256sum "$dir/src/big.bin" "$dir/src/small.txt" "$dir/src/empty" ;;
    "md5sum redirect") set -- sh -c 'md5sum < "$1"' sh "$dir/src/big.bin" ;;
    dd) set -- sh -c 'dd if="$1" bs=1M status=none < /dev/null' sh "$dir/src/big.bin" ;;
    cat) set -- cat "$dir/src/big.bin" "$dir/src/small.txt" "$dir/src/empty" ;;
    "cmp same") set -- cmp "$dir/src/big.bin" "$dir/out/big.copy" ;;
    "cmp differ") set -- cmp "$dir/src/big.bin" "$dir/src/diff.bin" ;;
    tar) set -- tar cf - -C "$dir/src" tree ;;
    esac
    pre "$@" > "$dir/down.out" 2>&1
    echo "exit $?" >> "$dir/down.out"
    check "no daemon: $name still identical" cmp -s "$dir/$name.plain" "$dir/down.out"
done
pre $PY -c 'import sys; sys.stdout.buffer.write(open(sys.argv[1], "rb").read())' \
    "$dir/src/big.bin" > "$dir/down.out" 2>&1
echo "exit $?" >> "$dir/down.out"
check "no daemon: python still identical" cmp -s "$dir/python.plain" "$dir/down.out"
for t in offsets fork threads mmap_sendfile reuse stdio; do
    pre $PY "$dir/sem.py" $t "$dir/src" "$dir/out" > "$dir/sem.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && sed 's/^/    /' "$dir/sem.log"
    check "no daemon: semantics $t" test $rc -eq 0
done
[ $fails -eq 0 ]
