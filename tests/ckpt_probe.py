#!/usr/bin/python3
"""ckpt_probe.py SOCKET ROOT - hostile CKPT_PUT and CKPT_LIST requests, written
from proto/PROTOCOL.md (not libgranary): each must get the documented error
and the daemon must keep serving.  Prints one "ok"/"FAIL" line per case; exit
status 1 if any failed."""
import errno, mmap, os, socket, struct, sys

MAGIC, VERSION = 0x594e5247, 2
OP_ADMIN, OP_CKPT_PUT = 8, 14
sock_path, root = sys.argv[1], sys.argv[2]
fails = 0
req = 0


def rec_str(name, val):
    n, v = name.encode(), val.encode() if isinstance(val, str) else val
    return bytes([len(n)]) + n + b"\x02" + struct.pack("<I", len(v)) + v


def rec_u64(name, val):
    n = name.encode()
    return bytes([len(n)]) + n + b"\x01" + struct.pack("<Q", val)


def call(s, op, body, fds=()):
    global req
    req += 1
    hdr = struct.pack("<IBBHIIiI", MAGIC, VERSION, op, 0, req, len(body), 0, 0)
    if fds:
        socket.send_fds(s, [hdr + body], list(fds))
    else:
        s.send(hdr + body)
    while True:
        msg = s.recv(200000)
        _, _, rop, flags, rid, blen, status, _ = struct.unpack("<IBBHIIiI", msg[:24])
        if rid == req:
            return status, msg[24:24 + blen]


def expect(what, got, want):
    global fails
    status, body = got
    if status == -want:
        print("ok   %s (%s: %s)" % (what, errno.errorcode[want], body.decode(errors="replace")))
    else:
        print("FAIL %s: status %d, wanted -%s; %r" % (what, status, errno.errorcode[want], body))
        fails += 1


s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sock_path)
dest = rec_str("dest", root + "/probe.ckpt")
memfd = os.memfd_create("probe", os.MFD_ALLOW_SEALING)
os.write(memfd, b"x" * 8192)
expect("CKPT_PUT without an fd", call(s, OP_CKPT_PUT, dest), errno.EINVAL)
expect("CKPT_PUT without a dest", call(s, OP_CKPT_PUT, rec_u64("size", 1), [memfd]), errno.EINVAL)
expect("CKPT_PUT with dest twice", call(s, OP_CKPT_PUT, dest + dest, [memfd]), errno.EINVAL)
expect("CKPT_PUT with a dest of the wrong kind", call(s, OP_CKPT_PUT, rec_u64("dest", 7), [memfd]),
       errno.EINVAL)
expect("CKPT_PUT with an empty body", call(s, OP_CKPT_PUT, b"", [memfd]), errno.EPROTO)
expect("CKPT_PUT with two fds", call(s, OP_CKPT_PUT, dest, [memfd, memfd]), errno.EPROTO)
opath = os.open("/etc/hostname", os.O_PATH)
expect("CKPT_PUT of an O_PATH fd", call(s, OP_CKPT_PUT, dest, [opath]), errno.EINVAL)
wr = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
expect("CKPT_PUT of a directory fd", call(s, OP_CKPT_PUT, dest, [wr]), errno.EINVAL)
mapped = os.memfd_create("probe2", os.MFD_ALLOW_SEALING)
os.ftruncate(mapped, 8192)
m = mmap.mmap(mapped, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
expect("CKPT_PUT of a memfd still mapped writable", call(s, OP_CKPT_PUT, dest, [mapped]), errno.EBUSY)
expect("CKPT_PUT for a path under no root", call(s, OP_CKPT_PUT, rec_str("dest", "/etc/passwd"), [memfd]),
       errno.EACCES)
expect("CKPT_PUT for a relative path", call(s, OP_CKPT_PUT, rec_str("dest", "a/b"), [memfd]),
       errno.EINVAL)
expect("CKPT_PUT with a .. component", call(s, OP_CKPT_PUT, rec_str("dest", root + "/../x"), [memfd]),
       errno.EACCES)
expect("CKPT_PUT for the root itself", call(s, OP_CKPT_PUT, rec_str("dest", root), [memfd]), errno.EISDIR)
expect("CKPT_PUT with a newline in the path",
       call(s, OP_CKPT_PUT, rec_str("dest", root + "/a\nb"), [memfd]), errno.EINVAL)
expect("CKPT_LIST of id 0", call(s, OP_ADMIN, b"\x0f" + rec_u64("id", 0)), errno.EINVAL)
expect("CKPT_LIST of an unknown id", call(s, OP_ADMIN, b"\x0f" + rec_u64("id", 999999)), errno.ENOENT)
expect("CKPT_LIST with an unknown field", call(s, OP_ADMIN, b"\x0f" + rec_u64("bogus", 1)), errno.EINVAL)
# Checkpoint sets ("set" 1): the container's header (PROTOCOL.md, "Checkpoint sets").
def container(files, magic=b"GRSET001", nfiles=None, reserved=0, extra=b""):
    hdr = magic + struct.pack("<II", len(files) if nfiles is None else nfiles, reserved)
    for name, data in files:
        n = name.encode() if isinstance(name, str) else name
        hdr += struct.pack("<QH", len(data), len(n)) + n
    fd = os.memfd_create("probe-set", os.MFD_ALLOW_SEALING)
    os.write(fd, hdr + b"".join(d for _, d in files) + extra)
    return fd


sdest = rec_str("dest", root + "/probe.set") + rec_u64("set", 1)
for what, fd in [("bad magic", container([("a", b"1")], magic=b"GRSET002")),
                 ("no files", container([], nfiles=0)),
                 ("a reserved word not 0", container([("a", b"1")], reserved=1)),
                 ("sizes that do not add up (a byte more)", container([("a", b"1")], extra=b"!")),
                 ("a header past the end", container([("a", b"1")], nfiles=2)),
                 ("a name with a slash", container([("a/b", b"1")])),
                 ("a name \"..\"", container([("..", b"1")])),
                 ("the name MANIFEST", container([("MANIFEST", b"1")])),
                 ("an empty name", container([("", b"1")])),
                 ("a name with a newline", container([("a\nb", b"1")])),
                 ("a name twice", container([("a", b"1"), ("a", b"2")])),
                 ("an empty memfd", container([], nfiles=0, magic=b""))]:
    expect("CKPT_PUT set: %s" % what, call(s, OP_CKPT_PUT, sdest, [fd]), errno.EINVAL)
expect("CKPT_PUT with \"set\" 2", call(s, OP_CKPT_PUT, rec_str("dest", root + "/probe.set") +
       rec_u64("set", 2), [container([("a", b"1")])]), errno.EINVAL)
expect("CKPT_PUT with \"set\" twice", call(s, OP_CKPT_PUT, sdest + rec_u64("set", 1),
       [container([("a", b"1")])]), errno.EINVAL)
expect("ADMIN 254 (no such command)", call(s, OP_ADMIN, b"\xfe"), errno.EPROTO)
st, body = call(s, 5, b"")   # STATS: still serving
if st == 0:
    print("ok   the daemon still serves after the hostile requests")
else:
    print("FAIL STATS after the hostile requests: %d" % st)
    fails += 1
# "ack" (PROTOCOL.md, CKPT_PUT): "staged" or "local", once, a string.
expect("CKPT_PUT with ack of an unknown value", call(s, OP_CKPT_PUT, dest + rec_str("ack", "now"),
       [memfd]), errno.EINVAL)
expect("CKPT_PUT with ack twice", call(s, OP_CKPT_PUT, dest + rec_str("ack", "staged") * 2,
       [memfd]), errno.EINVAL)
expect("CKPT_PUT with ack of the wrong kind", call(s, OP_CKPT_PUT, dest + rec_u64("ack", 1),
       [memfd]), errno.EINVAL)
expect("CKPT_PUT with ack as a prefix of staged", call(s, OP_CKPT_PUT, dest + rec_str("ack", "stage"),
       [memfd]), errno.EINVAL)
# An early put of a fresh memfd: acknowledged "staged", without an xxh3
# (not computed yet); a plain file asking for it is acknowledged "local".
early = os.memfd_create("probe-early", os.MFD_ALLOW_SEALING)
os.write(early, b"e" * 100000)
st, body = call(s, OP_CKPT_PUT, rec_str("dest", root + "/probe-early.ckpt") + rec_str("ack", "staged"),
                [early])
if st == 0 and b"staged" in body and b"xxh3" not in body:
    print("ok   CKPT_PUT ack staged of a sealed memfd is acknowledged staged, no xxh3 yet")
else:
    print("FAIL CKPT_PUT ack staged: %d %r" % (st, body))
    fails += 1
plain = os.open(root + "/probe-plain.src", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
os.write(plain, b"p" * 5000)
st, body = call(s, OP_CKPT_PUT, rec_str("dest", root + "/probe-plain.ckpt") + rec_str("ack", "staged"),
                [plain])
if st == 0 and b"local" in body and b"xxh3" in body:
    print("ok   CKPT_PUT ack staged of a plain file is acknowledged local (its bytes could change)")
else:
    print("FAIL CKPT_PUT ack staged of a plain file: %d %r" % (st, body))
    fails += 1
os.close(plain)
os.unlink(root + "/probe-plain.src")
# A sealed memfd staged through the raw protocol is accepted.
st, body = call(s, OP_CKPT_PUT, dest, [memfd])
if st == 0 and b"id" in body:
    print("ok   a well-formed CKPT_PUT from the spec is staged")
else:
    print("FAIL a well-formed CKPT_PUT: %d %r" % (st, body))
    fails += 1
try:
    os.write(memfd, b"y")
    print("FAIL the staged memfd can still be written")
    fails += 1
except PermissionError:
    print("ok   the staged memfd is sealed against writes")
sys.exit(1 if fails else 0)
