"""Metadata through the daemon: ``stat``, ``scandir``, ``listdir`` and ``walk``
answered from a registered dataset's manifest (``granaryctl dataset add``)
with no operation on the file system, else from the file system itself
(libgranary's ``gr_stat`` and ``gr_opendir``/``gr_readdir``, which fall back
on their own).

They take a :class:`granary.Client` (or None for the default client) and
behave as their ``os`` namesakes for regular files and directories, which
is all a manifest holds: ``scandir`` yields entries whose ``stat()`` costs
nothing (the attributes came with the listing), and a ``walk`` of a
registered tree costs one round trip per 4096 entries.  Errors are OSErrors
with the errno of the failure (``FileNotFoundError``: not there as of the
dataset's last scan).
"""
import ctypes
import errno as _errno
import os
import stat as _st

from ._lib import lib as _lib, path as _libpath
from . import default_client, _Stat, _error, _fspath_bytes

__all__ = ["stat", "scandir", "listdir", "walk", "files_under", "DirEntry"]


class _Dirent(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_ubyte), ("has_stat", ctypes.c_int),
                ("st", _Stat if _Stat is not None else ctypes.c_char * 144)]


def _bind():
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    sig = {
        "gr_stat": (ctypes.c_int, [vp, cp, vp]),
        "gr_opendir": (vp, [vp, cp]),
        "gr_readdir": (ctypes.POINTER(_Dirent), [vp]),
        "gr_closedir": (ctypes.c_int, [vp]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(_lib, name, None)
        if fn is not None:
            fn.restype = res
            fn.argtypes = args


_bind()
_DT_DIR, _DT_REG, _DT_LNK = 4, 8, 10


def _need(name):
    if getattr(_lib, name, None) is None or _Stat is None:
        raise OSError(_errno.ENOSYS, "libgranary has no %s (%s)" % (name, _libpath))


def _result(s):
    """os.stat_result from a struct stat."""
    def t(ts):
        return ts.tv_sec + ts.tv_nsec / 1e9, ts.tv_sec * 1000000000 + ts.tv_nsec
    a, an = t(s.st_atim)
    m, mn = t(s.st_mtim)
    c, cn = t(s.st_ctim)
    return os.stat_result(
        (s.st_mode, s.st_ino, s.st_dev, s.st_nlink, s.st_uid, s.st_gid, s.st_size,
         int(a), int(m), int(c)),
        {"st_atime": a, "st_mtime": m, "st_ctime": c, "st_atime_ns": an, "st_mtime_ns": mn,
         "st_ctime_ns": cn, "st_blksize": s.st_blksize, "st_blocks": s.st_blocks})


def _client(client):
    return client if client is not None else default_client()


def stat(path, client=None):
    """``os.stat(path)`` through the daemon (a manifest, else the file system)."""
    _need("gr_stat")
    c = _client(client)
    st = _Stat()
    p = _fspath_bytes(path)
    h = c._handle()
    if _lib.gr_stat(h, p, ctypes.byref(st)) < 0:
        raise _error(h, os.fspath(path))
    return _result(st)


class DirEntry:
    """One entry of :func:`scandir` (as ``os.DirEntry``, for files and
    directories)."""
    __slots__ = ("name", "path", "_type", "_stat", "_client")

    def __init__(self, name, path, dtype, st, client):
        self.name, self.path, self._type, self._stat, self._client = name, path, dtype, st, client

    def is_dir(self, follow_symlinks=True):
        if self._stat is not None:
            return _st.S_ISDIR(self._stat.st_mode)
        if self._type in (_DT_DIR, _DT_REG):
            return self._type == _DT_DIR
        # The file system's listing (no manifest): a link or an unknown
        # type is looked at, following links as os.DirEntry does.
        return os.path.isdir(self.path) if follow_symlinks else False

    def is_file(self, follow_symlinks=True):
        if self._stat is not None:
            return _st.S_ISREG(self._stat.st_mode)
        if self._type in (_DT_DIR, _DT_REG):
            return self._type == _DT_REG
        return os.path.isfile(self.path) if follow_symlinks else False

    def is_symlink(self):
        return self._stat is None and self._type == _DT_LNK

    def stat(self, follow_symlinks=True):
        if self._stat is None:
            self._stat = stat(self.path, self._client)
        return self._stat

    def inode(self):
        return self.stat().st_ino

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return "<granary.fs.DirEntry %r>" % self.name


def scandir(path, client=None):
    """``os.scandir(path)`` through the daemon: a list of :class:`DirEntry`
    (read whole, so no connection is held across the caller's loop)."""
    _need("gr_opendir")
    c = _client(client)
    sp = os.fspath(path)
    p = _fspath_bytes(path)
    out = []
    h = c._handle()
    d = _lib.gr_opendir(h, p)
    if not d:
        raise _error(h, sp)
    try:
        while True:
            ctypes.set_errno(0)
            e = _lib.gr_readdir(d)
            if not e:
                err = ctypes.get_errno()
                if err:
                    raise _error(h, sp, err)
                break
            e = e.contents
            raw = e.name
            name = raw if isinstance(sp, bytes) else os.fsdecode(raw)
            full = os.path.join(sp, name)
            out.append(DirEntry(name, full, e.type, _result(e.st) if e.has_stat else None, c))
    finally:
        _lib.gr_closedir(d)
    return out


def listdir(path, client=None):
    """``os.listdir(path)`` through the daemon."""
    return [e.name for e in scandir(path, client)]


def files_under(root, client=None, followlinks=False):
    """Every regular file below ``root``, as (directory, name) pairs in
    sorted walk order, from :func:`scandir` (so a registered dataset's tree
    costs the file system nothing; elsewhere, one listing per directory and
    no stat per file where the listing says what an entry is)."""
    out = []
    stack = [os.fspath(root)]
    while stack:
        d = stack.pop()
        ents = sorted(scandir(d, client), key=lambda e: e.name)
        subdirs = []
        for e in ents:
            if e.is_dir(follow_symlinks=followlinks):
                if followlinks or not e.is_symlink():
                    subdirs.append(e.path)
            elif e.is_file():
                out.append((d, e.name))
        stack.extend(reversed(subdirs))
    return out


def walk(top, topdown=True, onerror=None, client=None):
    """``os.walk(top)`` through the daemon: (dirpath, dirnames, filenames)."""
    try:
        entries = scandir(top, client)
    except OSError as e:
        if onerror is not None:
            onerror(e)
        return
    dirs = [e.name for e in entries if e.is_dir()]
    files = [e.name for e in entries if not e.is_dir()]
    links = {e.name for e in entries if e.is_symlink()}
    if topdown:
        yield os.fspath(top), dirs, files
    for d in dirs:
        if d not in links:              # as os.walk: links to directories are listed, not walked
            yield from walk(os.path.join(os.fspath(top), d), topdown, onerror, client)
    if not topdown:
        yield os.fspath(top), dirs, files
