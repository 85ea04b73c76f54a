"""granary.ckpt: checkpoints staged on the node and published atomically
(libgranary's gr_ckpt_* calls, docs/ARCHITECTURE.md "Checkpoints").

    import granary.ckpt
    cid = granary.ckpt.save(model.state_dict(), "/lustre/run7/step1000.pt")
    ...                                     # training goes on while it drains
    granary.ckpt.wait(cid)                  # published (optional)

``save`` serialises into a memfd libgranary made (``torch.save`` when torch
is importable, else ``pickle.dump``; or any ``saver(obj, fileobj)``) and
returns once the daemon has the bytes fsynced on the node's NVMe; the daemon
publishes the destination in the background, written as the calling user,
through a temporary file and a rename, so that a reader never sees it
half-written.  ``status`` and ``wait`` follow a checkpoint's state:
"staged", "local", "replicated", "published" ("failed": lost;
"superseded": dropped unpublished, a newer checkpoint for the same
destination was published first).
"""
import ctypes
import errno as _errno
import os
import pickle

import granary
from granary._lib import lib as _lib

STATES = ("staged", "local", "replicated", "published", "failed", "superseded")


class _Info(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("state", ctypes.c_int), ("durable", ctypes.c_int),
                ("size", ctypes.c_uint64), ("drained", ctypes.c_uint64),
                ("attempts", ctypes.c_uint), ("uid", ctypes.c_uint),
                ("dest", ctypes.c_char * 4096), ("error", ctypes.c_char * 256)]


_vp, _cp = ctypes.c_void_p, ctypes.c_char_p
_sig = {
    "gr_ckpt_create": (_vp, [_vp, _cp]),
    "gr_ckpt_fd": (ctypes.c_int, [_vp]),
    "gr_ckpt_commit": (ctypes.c_int, [_vp]),
    "gr_ckpt_id": (ctypes.c_uint64, [_vp]),
    "gr_ckpt_free": (None, [ctypes.POINTER(_vp)]),
    "gr_ckpt_status": (ctypes.c_int, [_vp, ctypes.c_uint64, ctypes.POINTER(_Info)]),
    "gr_ckpt_wait": (ctypes.c_int, [_vp, ctypes.c_uint64, ctypes.c_int, ctypes.c_int]),
}
_set_sig = {
    "gr_ckpt_set_create": (_vp, [_vp, _cp]),
    "gr_ckpt_set_add_fd": (ctypes.c_int, [_vp, _cp, ctypes.c_int]),
    "gr_ckpt_set_commit": (ctypes.c_int, [_vp]),
    "gr_ckpt_set_id": (ctypes.c_uint64, [_vp]),
    "gr_ckpt_set_free": (None, [ctypes.POINTER(_vp)]),
}
for _n in ("gr_ckpt_commit_staged", "gr_ckpt_set_commit_staged"):
    if hasattr(_lib, _n):
        getattr(_lib, _n).restype = ctypes.c_int
        getattr(_lib, _n).argtypes = [_vp]
_have = all(hasattr(_lib, n) for n in _sig)
_have_set = _have and all(hasattr(_lib, n) for n in _set_sig)
for _table, _ok in ((_sig, _have), (_set_sig, _have_set)):
    if _ok:
        for _n, (_res, _args) in _table.items():
            _f = getattr(_lib, _n)
            _f.restype = _res
            _f.argtypes = _args

_default_client = None


def _client(client):
    global _default_client
    if client is not None:
        return client
    if _default_client is None:
        _default_client = granary.Client()
    return _default_client


def _need():
    if not _have:
        raise OSError(_errno.ENOSYS, "this libgranary has no checkpoint calls")


def _default_saver(obj, f):
    try:
        import torch
    except ImportError:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        return
    torch.save(obj, f)


def _commit(fn, fn_early, handle, early):
    if early:
        if not hasattr(_lib, fn_early):
            raise OSError(_errno.ENOSYS, "this libgranary cannot acknowledge early")
        return getattr(_lib, fn_early)(handle)
    return getattr(_lib, fn)(handle)


def save(obj, dest, client=None, saver=None, wait=False, timeout=None, early=False):
    """Serialise obj with saver(obj, fileobj) for dest (an absolute path, or
    relative to the working directory, under one of the daemon's roots) and
    return the checkpoint's id once it is on the node's NVMe (with wait=True:
    once dest is published).  early=True: return as soon as the daemon holds
    the bytes (gr_ckpt_commit_staged: in its memory, state "staged", the copy
    to NVMe behind; a daemon killed before "local" loses it, which status
    then says; wait(cid, "local") waits for it to survive the daemon).
    OSError on refusal: EACCES (under no root, or you may not create dest),
    ENOSPC (the staging area is full), ..."""
    _need()
    c = _client(client)
    h = c._handle()
    path = os.path.abspath(os.fspath(dest))
    k = _lib.gr_ckpt_create(h, os.fsencode(path))
    if not k:
        raise granary._error(h, path)
    kp = _vp(k)
    try:
        fd = _lib.gr_ckpt_fd(k)
        with os.fdopen(os.dup(fd), "wb") as f:     # the memfd's own offset, shared
            (saver or _default_saver)(obj, f)
        if _commit("gr_ckpt_commit", "gr_ckpt_commit_staged", k, early) < 0:
            raise granary._error(h, path)
        cid = _lib.gr_ckpt_id(k)
    finally:
        _lib.gr_ckpt_free(ctypes.byref(kp))
    if wait:
        globals()["wait"](cid, client=c, timeout=timeout)
    return cid


def save_set(objs, dest, client=None, saver=None, wait=False, timeout=None, early=False):
    """Serialise each value of objs (a dict: file name -> object, e.g. one
    shard per rank) with saver(obj, fileobj) into a file of that name, and
    stage them as one checkpoint set for dest: once published, dest is a
    symbolic link to a directory holding all of them (and a MANIFEST), and
    a reader that opens dest once sees one whole set, never files of two.
    Returns the set's id once it is on the node's NVMe (wait=True: once
    published; early=True as for save).  Names: no '/', not "MANIFEST".  OSError on refusal as for
    save (EISDIR: dest is a directory, not a set's link)."""
    _need()
    if not _have_set:
        raise OSError(_errno.ENOSYS, "this libgranary has no checkpoint set calls")
    if not objs:
        raise ValueError("a checkpoint set needs at least one file")
    c = _client(client)
    h = c._handle()
    path = os.path.abspath(os.fspath(dest))
    s = _lib.gr_ckpt_set_create(h, os.fsencode(path))
    if not s:
        raise granary._error(h, path)
    sp = _vp(s)
    try:
        for name, obj in objs.items():
            fd = os.memfd_create("granary-shard", os.MFD_CLOEXEC)
            try:
                with os.fdopen(os.dup(fd), "wb") as f:
                    (saver or _default_saver)(obj, f)
                if _lib.gr_ckpt_set_add_fd(s, os.fsencode(name), fd) < 0:
                    e = ctypes.get_errno() or _errno.EINVAL
                    raise OSError(e, "%s: not added to the set (%s)" % (name, os.strerror(e)))
            finally:
                os.close(fd)
        if _commit("gr_ckpt_set_commit", "gr_ckpt_set_commit_staged", s, early) < 0:
            raise granary._error(h, path)
        cid = _lib.gr_ckpt_set_id(s)
    finally:
        _lib.gr_ckpt_set_free(ctypes.byref(sp))
    if wait:
        globals()["wait"](cid, client=c, timeout=timeout)
    return cid


def status(cid, client=None):
    """The checkpoint's state as a dict: id, state, durable, size, drained,
    attempts, uid, dest, error.  FileNotFoundError for an unknown id."""
    _need()
    c = _client(client)
    h = c._handle()
    info = _Info()
    if _lib.gr_ckpt_status(h, cid, ctypes.byref(info)) < 0:
        raise granary._error(h)
    return {"id": info.id, "state": STATES[info.state] if 0 <= info.state < len(STATES) else "?",
            "durable": bool(info.durable), "size": info.size, "drained": info.drained,
            "attempts": info.attempts, "uid": info.uid,
            "dest": os.fsdecode(info.dest), "error": info.error.decode("utf-8", "replace")}


def wait(cid, state="published", client=None, timeout=None):
    """Wait until the checkpoint reaches state ("local", "replicated",
    "published"); TimeoutError after timeout seconds (None: forever), OSError
    EIO if it failed, ESTALE if it was superseded (a newer checkpoint for the
    same destination was published instead)."""
    _need()
    c = _client(client)
    h = c._handle()
    ms = -1 if timeout is None else int(timeout * 1000)
    if _lib.gr_ckpt_wait(h, cid, STATES.index(state), ms) < 0:
        raise granary._error(h)
