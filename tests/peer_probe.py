#!/usr/bin/python3
"""peer_probe.py - a client of granaryd's peer protocol written from
proto/PROTOCOL.md ("Peer protocol") alone, hostile where it can be.

    peer_probe.py HOST PORT KEYFILE MYNAME SERVERNAME ROOTFILE

MYNAME must be a member of the daemon's [peer] nodes (the daemon refuses any
other); ROOTFILE a file under its roots.  Prints "ok ..." / "FAIL ..." lines
and exits 1 if any check failed.
"""
import ctypes
import errno
import hashlib
import hmac
import os
import socket
import struct
import sys
import time

host, port, keyfile, myname, srvname, rootfile = sys.argv[1:7]
port = int(port)
key = open(keyfile, 'rb').read().rstrip(b'\n\r ')
xxh = ctypes.CDLL('libxxhash.so.0')
xxh.XXH3_64bits.restype = ctypes.c_uint64
xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
fails = 0


def check(desc, cond):
    global fails
    print(('ok   ' if cond else 'FAIL ') + desc)
    if not cond:
        fails += 1


def frame(t, body):
    return struct.pack('<IB', len(body) + 1, t) + body


def str16(s):
    return struct.pack('<H', len(s)) + s


def recv_exact(s, n):
    b = b''
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise ConnectionError('closed')
        b += c
    return b


def recv_frame(s):
    ln, t = struct.unpack('<IB', recv_exact(s, 5))
    return t, recv_exact(s, ln - 1)


def mac(role, nc, ns, cname, sname, k=None):
    label = b'granary-peer server proof\0' if role == 0 else b'granary-peer client proof\0'
    msg = label + nc + ns + str16(cname) + str16(sname)
    return hmac.new(key if k is None else k, msg, hashlib.sha256).digest()


def closed(s, timeout=3.0):
    """True if the daemon closes s (reads EOF or a reset) within timeout."""
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def connect():
    s = socket.create_connection((host, port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def handshake(k=None, name=myname.encode()):
    """A full handshake; returns (socket, welcome body) or (socket, None)."""
    s = connect()
    nc = os.urandom(32)
    s.sendall(frame(1, b'GRPEER02' + struct.pack('<I', 0) + nc + str16(name)))
    t, body = recv_frame(s)
    assert t == 2, t
    ns, mac_s = body[:32], body[32:64]
    (nl,) = struct.unpack('<H', body[64:66])
    sname = body[66:66 + nl]
    # Check the server's proof exactly as the spec says.
    if mac_s != mac(0, nc, ns, name, sname):
        return s, 'bad-server-proof'
    s.sendall(frame(3, mac(1, nc, ns, name, sname, k)))
    try:
        t, body = recv_frame(s)
    except (ConnectionError, socket.timeout, ConnectionResetError):
        return s, None
    return s, body if t == 4 else None


def get(s, path, ino, size, mtime_ns, chunk, idx, req=7, ctime_ns=None):
    p = path.encode()
    if ctime_ns is None:
        ctime_ns = ct
    s.sendall(frame(5, struct.pack('<QQQQqqIIH', req, idx, ino, size, mtime_ns, ctime_ns, chunk, 0,
                                   len(p)) + p))
    t, body = recv_frame(s)
    assert t == 6, t
    rq, status, ln, h, flags, _, _, _ = struct.unpack('<QiIQIQIQ', body[:48])
    return rq, status, ln, h, body[48:]


st = os.stat(rootfile)
mt = st.st_mtime_ns
ct = st.st_ctime_ns
CHUNK = int(os.environ.get('CHUNK', 1 << 20))

# 1. The handshake as specified, then a chunk, verified both ways.
s, w = handshake()
check('handshake from the spec: the server proves the key, WELCOME follows',
      w is not None and w != 'bad-server-proof')
rq, status, ln, h, data = get(s, rootfile, st.st_ino, st.st_size, mt, CHUNK, 0)
want = open(rootfile, 'rb').read(CHUNK)
check('GET chunk 0: status 0, the file\'s bytes', rq == 7 and status == 0 and data == want)
check('DATA carries the bytes\' XXH3-64', h == xxh.XXH3_64bits(data, len(data)))
# Refusals, on the same connection, which stays usable after each.
_, status, ln, _, data = get(s, '/etc/shadow', 1, 1, 1, CHUNK, 0)
check('a path under no root: -EACCES, no bytes', status == -errno.EACCES and data == b'')
_, status, _, _, _ = get(s, os.path.dirname(rootfile) + '/../' + os.path.basename(rootfile),
                         st.st_ino, st.st_size, mt, CHUNK, 0)
check('a path with "..": -EACCES', status == -errno.EACCES)
_, status, _, _, data = get(s, rootfile, st.st_ino, st.st_size + 1, mt, CHUNK, 0)
check('attributes of another version: -ESTALE, no bytes', status == -errno.ESTALE and data == b'')
_, status, _, _, data = get(s, rootfile, st.st_ino, st.st_size, mt, CHUNK, 0, ctime_ns=ct - 1)
check('another ctime (an inode number come round again): -ESTALE', status == -errno.ESTALE)
_, status, _, _, _ = get(s, rootfile, st.st_ino, st.st_size, mt, CHUNK, 1 << 40)
check('a chunk past the end: -EINVAL', status == -errno.EINVAL)
_, status, _, _, _ = get(s, rootfile, st.st_ino, st.st_size, mt, 0, 0)
check('chunk size 0: -EINVAL', status == -errno.EINVAL)
_, status, _, _, _ = get(s, os.path.dirname(rootfile) + '/no-such-file', 1, 1, 1, CHUNK, 0)
check('a vanished file: an error status, no bytes', status < 0)
rq, status, _, _, data = get(s, rootfile, st.st_ino, st.st_size, mt, CHUNK, 0, req=99)
check('the connection still serves after the refusals', rq == 99 and status == 0 and data == want)
# An unknown frame type after authentication closes the connection.
s.sendall(frame(42, b'x'))
check('an unknown frame type: connection closed', closed(s))
s.close()

# 2. A client without the key: its proof is refused, nothing is served.
s, w = handshake(k=b'not the key, but sixteen bytes or more')
check('a wrong key: no WELCOME', w is None)
check('... and the connection is closed', closed(s))
s.close()

# 3. GET before authenticating.
s = connect()
p = rootfile.encode()
s.sendall(frame(5, struct.pack('<QQQQqqIIH', 1, 0, st.st_ino, st.st_size, mt, ct, CHUNK, 0, len(p)) + p))
check('GET before HELLO: closed, no DATA', closed(s))
s.close()

# 4. HELLO naming no member, and naming the daemon itself.
for who, desc in ((b'10.255.255.1:1', 'a name not in nodes'), (srvname.encode(), 'the daemon\'s own name')):
    s = connect()
    s.sendall(frame(1, b'GRPEER02' + struct.pack('<I', 0) + os.urandom(32) + str16(who)))
    check('HELLO with %s: closed without a CHALLENGE' % desc, closed(s))
    s.close()

# 5. Replaying a recorded AUTH on a new connection (a fresh nonce each time).
s1 = connect()
nc = os.urandom(32)
s1.sendall(frame(1, b'GRPEER02' + struct.pack('<I', 0) + nc + str16(myname.encode())))
t, body = recv_frame(s1)
old_auth = mac(1, nc, body[:32], myname.encode(), srvname.encode())
s1.close()
s2 = connect()
s2.sendall(frame(1, b'GRPEER02' + struct.pack('<I', 0) + nc + str16(myname.encode())))
recv_frame(s2)
s2.sendall(frame(3, old_auth))
check('a replayed AUTH (same client nonce, new server nonce): refused', closed(s2))
s2.close()

# 6. Hostile lengths and garbage: closed; the daemon keeps serving.
for blob, desc in ((struct.pack('<I', 0xffffffff) + b'\1', 'a 4 GiB frame length'),
                   (struct.pack('<I', 0) + b'\1', 'a zero frame length'),
                   (os.urandom(5000), '5000 random bytes'),
                   (frame(1, b'GRPEER02' + b'\0' * 10), 'a truncated HELLO'),
                   (frame(1, b'GRPEER02' + struct.pack('<I', 0) + os.urandom(32) + struct.pack('<H', 60000)),
                    'a HELLO whose name runs past the frame')):
    s = connect()
    try:
        s.sendall(blob)
    except (BrokenPipeError, ConnectionResetError):
        pass
    check('%s: closed' % desc, closed(s))
    s.close()

# 7. A slow client holds no slot forever, and does not stall others.
idle = connect()
t0 = time.time()
s, w = handshake()
_, status, _, _, data = get(s, rootfile, st.st_ino, st.st_size, mt, CHUNK, 0)
check('served while another connection sits silent', status == 0 and data == want and time.time() - t0 < 5)
s.close()
idle.close()

sys.exit(1 if fails else 0)
