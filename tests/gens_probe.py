#!/usr/bin/python3
"""gens_probe.py SOCKET PATH - the generation table (HELLO feature GENS) as a
client written from proto/PROTOCOL.md alone (not libgranary) sees it.
PATH is a file of at least 3 chunks under the daemon's root, the only file
read, with nothing else holding leases on it.

Checks: the daemon echoes GENS when asked and not when not; a segment's
memfd is its blocks (S bytes, the largest power of two below st_size) then
the table; the leased bytes are the file's; the table cannot be mapped
writable; a released chunk the tier still holds keeps its generation; once
the tier drops it (ADMIN INVALIDATE) every page of its extent is one up; a
chunk still leased when the tier drops it keeps its generation (the bytes
stay put) until its RELEASE, and is one up right after; a hostile READX, a
RELEASE of leases never given and a bogus table-sized read do not upset
any of that.  Prints one "ok"/"FAIL" line per check; exit status 1 if any
failed."""
import errno, mmap, os, socket, struct, sys

MAGIC, VERSION = 0x594e5247, 2
OP_HELLO, OP_OPEN, OP_READX, OP_RELEASE, OP_ADMIN = 1, 2, 6, 7, 8
F_REPLY, F_WHOLE = 1, 4
FEAT_NOKEEP, FEAT_GENS = 1, 2
EXT_FD = 1
ADMIN_INVALIDATE = 2
PAGE = 4096
sock_path, path = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
fails = 0
req = 0


def check(what, ok, detail=""):
    global fails
    print(("ok   %s" % what) if ok else ("FAIL %s: %r" % (what, detail)))
    if not ok:
        fails += 1


def send(s, op, body, flags=0):
    global req
    req += 1
    s.send(struct.pack("<IBBHIIiI", MAGIC, VERSION, op, flags, req, len(body), 0, 0) + body)
    return req


def call(s, op, body, flags=0):
    """(status, body, fds) of the reply to this request."""
    rid = send(s, op, body, flags)
    while True:
        msg, fds, _, _ = socket.recv_fds(s, 200000, 32)
        _, _, rop, rflags, got, blen, status, _ = struct.unpack("<IBBHIIiI", msg[:24])
        if got == rid:
            assert rflags & F_REPLY and rop == op
            return status, msg[24:24 + blen], fds
        for fd in fds:
            os.close(fd)


def hello(s, features):
    body = struct.pack("<IIIIQII", VERSION, 132120, 0, 0, 0, 0, features)
    status, rb, _ = call(s, OP_HELLO, body)
    assert status == 0 and len(rb) == 32, (status, rb)
    return struct.unpack("<IIIIQII", rb)


def rec_str(name, val):
    n, v = name.encode(), val.encode()
    return bytes([len(n)]) + n + b"\x02" + struct.pack("<I", len(v)) + v


def readx(s, handle, off, length):
    """[(seg, lease, off, len, flags)], the fds that came, by segment."""
    status, body, fds = call(s, OP_READX, struct.pack("<IIQ", handle, length, off), F_WHOLE)
    assert status == 0, (status, body)
    n, _, inline_len = struct.unpack("<HHI", body[:8])
    exts = [struct.unpack("<IIQII", body[8 + 24 * i:32 + 24 * i]) for i in range(n)]
    got = {}
    for e in exts:
        if e[4] & EXT_FD:
            got[e[0]] = fds.pop(0)
    return exts, got


# HELLO: GENS echoed when asked for, not otherwise.
s0 = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s0.connect(sock_path)
check("HELLO without GENS: not echoed", hello(s0, FEAT_NOKEEP)[6] & FEAT_GENS == 0)
s0.close()
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sock_path)
h = hello(s, FEAT_NOKEEP | FEAT_GENS | 0x80000000)
check("HELLO with GENS: echoed (and an unknown bit not)", h[6] == FEAT_NOKEEP | FEAT_GENS, h)

status, attr, _ = call(s, OP_OPEN, path.encode())
assert status == 0, (status, attr)
handle, chunk = struct.unpack("<II", attr[:8])
check("the file has at least 3 chunks", len(data) >= 3 * chunk, (len(data), chunk))

maps = {}


def segment(seg, fd):
    """The table of segment seg (from its fd the first time): (data size, table)."""
    if seg not in maps:
        size = os.fstat(fd).st_size
        S = 1
        while S * 2 < size:
            S *= 2
        m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        maps[seg] = (S, size, m, fd)
    return maps[seg]


def gens(seg, off, length):
    S, _, m, _ = maps[seg]
    return [struct.unpack_from("=I", m, S + 4 * p)[0]
            for p in range(off // PAGE, (off + length + PAGE - 1) // PAGE)]


# Chunk 0 leased: its bytes, the layout, the table read-only.
exts, fds = readx(s, handle, 0, 100)
check("READX WHOLE of chunk 0: one extent of the whole chunk",
      len(exts) == 1 and exts[0][3] == chunk, exts)
seg0, lease0, off0, len0, _ = exts[0]
S, size, m, fd = segment(seg0, fds[seg0])
check("memfd: blocks of a power of two, then a table of >= 4 bytes per page",
      S < size <= 2 * S and (size - S) >= S // PAGE * 4 and (size - S) % PAGE == 0, (S, size))
check("the extent lies in the blocks", off0 + len0 <= S, (off0, len0, S))
check("the leased bytes are the file's", m[off0:off0 + len0] == data[:len0])
try:
    mmap.mmap(fd, size - S, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=S)
    check("the table cannot be mapped writable", False, "mapped")
except OSError as e:
    check("the table cannot be mapped writable", e.errno in (errno.EPERM, errno.EACCES), e)
try:
    os.pwrite(fd, b"\xff\xff\xff\xff", S)
    check("the table cannot be written through the fd", False, "written")
except OSError as e:
    check("the table cannot be written through the fd", True)
g0 = gens(seg0, off0, len0)

# Released, still in the tier: unchanged.  Hostile neighbours first.
send(s, OP_RELEASE, struct.pack("<III", 0xdeadbeef, lease0 + 100000, 7))
send(s, OP_RELEASE, struct.pack("<I", lease0))
status, _, _ = call(s, OP_READX, struct.pack("<IIQ", handle, 1 << 30, size), F_WHOLE)
check("a READX over the limit is refused (-EMSGSIZE)", status == -errno.EMSGSIZE, status)
check("released, still cached: generation unchanged", gens(seg0, off0, len0) == g0)

# Chunk 1 leased and held while the tier drops the file.
exts, fds = readx(s, handle, chunk, 100)
seg1, lease1, off1, len1, _ = exts[0]
segment(seg1, fds.get(seg1, maps.get(seg1, (0, 0, 0, -1))[3]))
g1 = gens(seg1, off1, len1)
status, body, _ = call(s, OP_ADMIN, bytes([ADMIN_INVALIDATE]) + rec_str("path", path))
check("ADMIN INVALIDATE", status == 0, (status, body))
check("dropped by the tier after its release: every page one up",
      gens(seg0, off0, len0) == [g + 1 for g in g0], (g0, gens(seg0, off0, len0)))
check("dropped while leased: unchanged, the bytes the file's",
      gens(seg1, off1, len1) == g1 and maps[seg1][2][off1:off1 + len1] == data[chunk:chunk + len1])
send(s, OP_RELEASE, struct.pack("<I", lease1))
status, _, _ = call(s, OP_HELLO, struct.pack("<IIIIQII", VERSION, 132120, 0, 0, 0, 0, 3))
check("... and one up once released", gens(seg1, off1, len1) == [g + 1 for g in g1],
      (g1, gens(seg1, off1, len1)))

# Read again: the bytes are the file's wherever they landed, and the
# block's generation is what the table says now.
exts, fds = readx(s, handle, 2 * chunk, 100)
seg2, lease2, off2, len2, _ = exts[0]
S2, _, m2, _ = segment(seg2, fds.get(seg2, maps.get(seg2, (0, 0, 0, -1))[3]))
check("a fresh lease after the drop: the file's bytes",
      m2[off2:off2 + len2] == data[2 * chunk:2 * chunk + len2])
send(s, OP_RELEASE, struct.pack("<I", lease2))
s.close()
sys.exit(1 if fails else 0)
