"""granary - read files through the node's Granary cache daemon.

A thin, pure-Python binding (ctypes) of libgranary, the C client library
(``client/granary.h``)::

    import granary

    with granary.open("/mnt/lustre/ds/shard-0001.tar") as f:   # default client
        header = f.read(512)
        f.seek(-4096, os.SEEK_END)
        buf = bytearray(4096)
        f.readinto(buf)                                         # no extra copy

    c = granary.Client()                 # $GRANARY_SOCKET, else the config's socket
    blob = c.read_range("/mnt/lustre/ds/x.bin", 1 << 20, 4096)
    print(c.stats()["hits_dram"])
    c.hint(["/mnt/lustre/ds/a.jpg", ("/mnt/lustre/ds/b.tar", 0, 1 << 20)])
    c.close()                            # (the hint list dies with the connection)

Errors are :class:`OSError` with the errno the daemon gave and its one-line
reason, so they arrive as the usual subclasses: ``FileNotFoundError``
(ENOENT), ``PermissionError`` (EACCES, also for a path outside the daemon's
``[source] roots``), ``IsADirectoryError``, ``ConnectionRefusedError`` (no
daemon) ...  A file's identity and size are fixed when it is opened: reads
return those bytes or fail with ESTALE, never a mix.

Processes: a :class:`Client` (and the default one) notices that it runs in a
child after ``fork()`` and connects again there; the parent's connection is
never used by the child.  A :class:`GranaryFile` inherited by the child
reopens its path on the child's connection (and raises ESTALE if the file
changed meanwhile).  PyTorch DataLoader workers therefore just work; see
:mod:`granary.torch`.

Threads: a Client may be shared by threads (libgranary serialises its
calls; ctypes releases the GIL while they run); for parallel reads give each
thread its own Client.  A GranaryFile, like io.FileIO, is not meant to be
read by several threads at once (its position is shared).
"""
import ctypes
import errno as _errno
import io
import os
import platform
import threading
import weakref

from ._lib import lib as _lib, path as library_path, STATS_CB as _STATS_CB, Hint as _Hint
from ._lib import DevRange as _DevRange, GpuStats as _GpuStats

__all__ = ["Client", "GranaryFile", "GranaryBufferedFile", "DEFAULT_BUFFER_SIZE", "DeviceBatch", "open", "read_range", "stats",
           "default_client", "library_path"]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_int64)]


def _stat_struct():
    """struct stat of this platform's glibc, for gr_fstat (None if unknown)."""
    m = platform.machine()
    if m in ("x86_64", "AMD64"):
        fields = [("st_dev", ctypes.c_uint64), ("st_ino", ctypes.c_uint64),
                  ("st_nlink", ctypes.c_uint64), ("st_mode", ctypes.c_uint32),
                  ("st_uid", ctypes.c_uint32), ("st_gid", ctypes.c_uint32),
                  ("_pad0", ctypes.c_int32), ("st_rdev", ctypes.c_uint64),
                  ("st_size", ctypes.c_int64), ("st_blksize", ctypes.c_int64),
                  ("st_blocks", ctypes.c_int64), ("st_atim", _Timespec),
                  ("st_mtim", _Timespec), ("st_ctim", _Timespec),
                  ("_unused", ctypes.c_int64 * 3)]
    elif m in ("aarch64", "arm64", "riscv64", "loongarch64"):
        # The "generic" 64-bit layout (asm-generic/stat.h).
        fields = [("st_dev", ctypes.c_uint64), ("st_ino", ctypes.c_uint64),
                  ("st_mode", ctypes.c_uint32), ("st_nlink", ctypes.c_uint32),
                  ("st_uid", ctypes.c_uint32), ("st_gid", ctypes.c_uint32),
                  ("st_rdev", ctypes.c_uint64), ("_pad1", ctypes.c_uint64),
                  ("st_size", ctypes.c_int64), ("st_blksize", ctypes.c_int32),
                  ("_pad2", ctypes.c_int32), ("st_blocks", ctypes.c_int64),
                  ("st_atim", _Timespec), ("st_mtim", _Timespec), ("st_ctim", _Timespec),
                  ("_unused", ctypes.c_int32 * 2)]
    else:
        return None
    return type("_Stat", (ctypes.Structure,), {"_fields_": fields})


_Stat = _stat_struct()


def _error(cptr, path=None, err=None):
    """An OSError (of the errno's subclass) for the last failed call on cptr."""
    if err is None:
        err = ctypes.get_errno() or _errno.EIO
    msg = ""
    if cptr:
        raw = _lib.gr_strerror_last(cptr)
        msg = raw.decode("utf-8", "replace") if raw else ""
    if not msg:
        msg = os.strerror(err)
    if path is not None:
        return OSError(err, msg, path)
    return OSError(err, msg)


def _fspath_bytes(path):
    p = os.fspath(path)
    p = p if isinstance(p, bytes) else os.fsencode(p)
    if b"\0" in p:
        raise ValueError("embedded null byte")
    return p


class Client:
    """One connection to the daemon (libgranary's ``gr_client``).

    ``socket`` is the daemon's socket path; None means ``$GRANARY_SOCKET``,
    else ``[daemon] socket`` of ``$GRANARY_CONFIG`` or
    ``/etc/granary/granary.conf``, else ``/run/granary/granary.sock``.
    Connecting fails with an OSError (``FileNotFoundError`` or
    ``ConnectionRefusedError`` when no daemon listens).

    Use as a context manager or call :meth:`close`; files still open on the
    client are closed with it.  After ``fork()`` the child connects again on
    its first call (the process id is checked on every call).
    """

    def __init__(self, socket=None):
        self._socket = None if socket is None else _fspath_bytes(socket)
        self._lock = threading.Lock()
        self._c = None
        self._pid = None
        self._gen = 0                   # bumped at each (re)connection
        self._closed = False
        self._files = weakref.WeakSet()
        self._connect()

    # -- connection ------------------------------------------------------------
    def _connect(self):
        c = _lib.gr_connect(self._socket)
        if not c:
            # libgranary's reason names the socket it tried and where that
            # came from (argument, $GRANARY_SOCKET, the configuration).
            err = ctypes.get_errno() or _errno.EIO
            raw = _lib.gr_strerror_last(None)
            msg = raw.decode("utf-8", "replace") if raw else os.strerror(err)
            raise OSError(err, msg)
        self._c = c
        self._pid = os.getpid()
        self._gen += 1

    def _handle(self):
        """The gr_client pointer for this process, reconnecting after fork."""
        if self._closed:
            raise ValueError("I/O operation on a closed granary.Client")
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    # The parent's connection: close our copy of it without a
                    # word on it (gr_disconnect only unmaps and closes), and
                    # drop the parent's open files (their handles belong to
                    # that connection; they reopen lazily).
                    old, self._c = self._c, None
                    if old:
                        _lib.gr_disconnect(old)
                    self._connect()
        return self._c

    @property
    def connected(self):
        """True while the client is open (in this process or reconnectable)."""
        return not self._closed

    def close(self):
        """Close open files of this client, then the connection.  Idempotent."""
        if self._closed:
            return
        # Files first (each knows whether its handle is this process's);
        # gr_disconnect sends nothing, so it is safe in a child too, where
        # it closes only the child's copy of the parent's connection.
        for f in list(self._files):
            f.close()
        if self._c:
            _lib.gr_disconnect(self._c)
        self._c = None
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- files -----------------------------------------------------------------
    def _open_raw(self, path):
        """(gr_file pointer, generation) for path, or raise."""
        c = self._handle()
        f = _lib.gr_open(c, _fspath_bytes(path))
        if not f:
            raise _error(c, os.fspath(path))
        return f, self._gen

    def open(self, path, mode="rb", buffering=-1, encoding=None, errors=None, newline=None):
        """Open ``path`` (under the daemon's roots; a relative path is taken
        from the current directory) for reading, like the built-in ``open``.

        ``mode`` is ``"rb"`` (the default) or ``"r"``/``"rt"`` (text, through
        ``io.TextIOWrapper`` with ``encoding``, ``errors``, ``newline``).
        ``buffering=-1`` (the default) or ``> 1`` gives a
        :class:`GranaryBufferedFile` (an ``io.BufferedReader`` of
        :data:`DEFAULT_BUFFER_SIZE` or ``buffering`` bytes: small reads cost
        no round trip each); ``buffering=0`` the raw :class:`GranaryFile`
        (binary only), where every ``read``/``readinto`` asks the daemon.
        """
        if mode not in ("rb", "br", "r", "rt", "tr"):
            raise ValueError("granary files are read-only: mode %r (use 'rb' or 'r')" % (mode,))
        text = "b" not in mode
        if not isinstance(buffering, int) or buffering < -1:
            raise ValueError("invalid buffering %r" % (buffering,))
        if buffering == 0 and text:
            raise ValueError("can't have unbuffered text I/O")
        if not text and (encoding is not None or errors is not None or newline is not None):
            raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
        f = GranaryFile(self, path)
        self._files.add(f)
        if buffering == 0:
            return f
        size = buffering if buffering > 1 else DEFAULT_BUFFER_SIZE
        b = GranaryBufferedFile(f, size)
        if text:
            return io.TextIOWrapper(b, encoding=encoding, errors=errors, newline=newline)
        return b

    def read_range(self, path, offset, length):
        """``length`` bytes of ``path`` from ``offset`` (fewer at the end of
        the file, ``b""`` at or past it), as bytes."""
        if offset < 0 or length < 0:
            raise ValueError("negative offset or length")
        with self.open(path) as f:
            return f.pread(length, offset)

    def stats(self):
        """The daemon's counters as a dict name -> int (``hits_dram``,
        ``misses``, ``bytes_served`` ...; the same as ``granaryctl stats``)."""
        out = {}

        def cb(_arg, name, value):
            out[name.decode("ascii", "replace")] = value
            return 0

        c = self._handle()
        fn = _STATS_CB(cb)
        if _lib.gr_stats(c, fn, None) != 0:
            raise _error(c)
        return out

    # -- job hints -------------------------------------------------------------
    HINT_BATCH = 4096

    def hint(self, items, batch=HINT_BATCH):
        """Tell the daemon what this job will read next, in this order
        (``gr_hint_append``), so that it is in DRAM when it is asked for.

        ``items``: an iterable (a generator is fine) of paths (the whole
        file) or ``(path, offset, length)`` tuples (``length`` 0: to the end
        of the file); paths absolute, under the daemon's roots.  They are
        appended to this connection's hint list, ``batch`` ranges per call
        into the library.  The daemon fetches ahead of consumption (reads
        of the hinted chunks by any connection, so DataLoader workers with
        their own clients count) within its ``[prefetch] hint_window``,
        keeps what it fetched until it is read, and drops the list when
        this client closes (or forks: the child's connection has no list)
        or on :meth:`hint_clear`.  Ranges it cannot resolve (missing,
        outside the roots) are skipped and counted (``hint_errors``), not
        reported here.

        Returns the number of ranges sent.  Raises OSError: E2BIG when the
        list would exceed ``[prefetch] hint_max_entries`` (earlier batches
        stay appended), EINVAL/ENAMETOOLONG for a malformed range, ENOSYS
        with a libgranary older than hints, and connection errors.
        """
        if batch < 1:
            raise ValueError("batch must be >= 1")
        fn = getattr(_lib, "gr_hint_append", None)
        if fn is None or fn.argtypes is None:
            raise OSError(_errno.ENOSYS, "libgranary has no gr_hint_append (%s)" % library_path)
        sent = 0
        paths, arr, n = [], (_Hint * batch)(), 0
        for item in items:
            if isinstance(item, (str, bytes, os.PathLike)):
                p, off, length = item, 0, 0
            else:
                p, off, length = item
                if off < 0 or length < 0:
                    raise ValueError("negative offset or length in hint %r" % (item,))
            b = _fspath_bytes(p)
            paths.append(b)             # keeps the bytes alive for the call
            arr[n].path, arr[n].off, arr[n].len = b, off, length
            n += 1
            if n == batch:
                self._hint_append(arr, n)
                sent += n
                paths, n = [], 0
        if n:
            self._hint_append(arr, n)
            sent += n
        return sent

    def _hint_append(self, arr, n):
        c = self._handle()
        if _lib.gr_hint_append(c, arr, n) != 0:
            raise _error(c)

    def open_ahead(self, paths):
        """Say which files this process opens next, in this order
        (``gr_open_ahead``): libgranary opens them ahead of the calls, so
        each :meth:`open` of them finds its reply, with the file's first
        chunk, waiting instead of a round trip.  Nothing goes to the
        daemon's hint list (no prefetch: :meth:`hint` is for that).  It
        replaces the previous list; files opened out of order or never are
        served and closed as usual.  For a DataLoader worker's batch
        (:class:`granary.torch.GranaryDataset` calls it).  Raises OSError:
        ENOSYS with a libgranary older than it, EINVAL for an empty path.
        """
        fn = getattr(_lib, "gr_open_ahead", None)
        if fn is None or fn.argtypes is None:
            raise OSError(_errno.ENOSYS, "libgranary has no gr_open_ahead (%s)" % library_path)
        bs = [_fspath_bytes(p) for p in paths]
        arr = (ctypes.c_char_p * max(len(bs), 1))(*bs)
        c = self._handle()
        if fn(c, arr, len(bs)) != 0:
            raise _error(c)

    def hint_clear(self):
        """Drop this connection's hint list (``gr_hint_clear``): the chunks
        it held become ordinary cache entries.  Before a new epoch's order,
        say."""
        fn = getattr(_lib, "gr_hint_clear", None)
        if fn is None or fn.argtypes is None:
            raise OSError(_errno.ENOSYS, "libgranary has no gr_hint_clear (%s)" % library_path)
        c = self._handle()
        if _lib.gr_hint_clear(c) != 0:
            raise _error(c)

    # -- the GPU path (gr_read_to_device; see client/granary.h, "GPU") ----------
    GPU_TIER_BYTES = 1                  # gr_gpu_set options
    GPU_REGISTER = 2
    GPU_RING_BYTES = 3
    GPU_MAX_LEASED = 4

    def _gpu_fn(self, name):
        fn = getattr(_lib, name, None)
        if fn is None or fn.argtypes is None:
            raise OSError(_errno.ENOSYS, "libgranary has no %s (%s)" % (name, library_path))
        return fn

    def read_to_device(self, ranges, stream=None, wait=True):
        """Copy ranges of files into CUDA device memory (one
        ``gr_read_to_device_batch``).

        ``ranges``: an iterable of ``(file, offset, length, dst)``: ``file``
        a path or a file :meth:`open` returned on this client, ``dst`` the device
        address of byte ``offset`` (an int: ``tensor.data_ptr()``,
        ``cudaMalloc``).  ``stream``: a CUDA stream handle as an int
        (``torch.cuda.current_stream().cuda_stream``), None or 0 for the
        legacy default stream.  The copies are ordered on that stream, so
        work queued there afterwards sees the bytes.  ``wait``: True, return
        once they completed; False, return a :class:`DeviceBatch` to wait
        on; None, queue them and keep no handle (nothing to wait for on the
        host; the leases come back when the copies complete).

        Returns a DeviceBatch whose ``done`` lists the bytes queued per range
        (fewer than asked only at the end of a file).  Raises OSError with
        the library's errno and reason: ENODEV (no CUDA driver or GPU),
        EFAULT (dst is not device memory), EIO, and the read's errors.
        """
        fn = self._gpu_fn("gr_read_to_device_batch")
        items = list(ranges)
        arr = (_DevRange * max(1, len(items)))()
        opened = []
        try:
            for i, (f, off, length, dst) in enumerate(items):
                if off < 0 or length < 0:
                    raise ValueError("negative offset or length in %r" % ((f, off, length),))
                if isinstance(f, GranaryBufferedFile):
                    f = f.raw
                if not isinstance(f, GranaryFile):
                    f = self.open(f, buffering=0)
                    opened.append(f)
                elif f._client is not self:
                    raise ValueError("%r belongs to another Client" % (f,))
                c, fp = f._handle()
                arr[i].f, arr[i].off, arr[i].len, arr[i].dst = fp, off, length, int(dst)
            c = self._handle()
            handle = ctypes.c_void_p()
            if fn(c, arr, len(items), int(stream) if stream else None,
                  ctypes.byref(handle) if wait is not None else None) != 0:
                raise _error(c)
        finally:
            # Closing a file does not end its copies: leases are per connection.
            for f in opened:
                f.close()
        batch = DeviceBatch(self, handle.value, [arr[i].done for i in range(len(items))])
        if wait:
            batch.wait()
        return batch

    def gpu_set(self, opt, value):
        """``gr_gpu_set``: GPU_TIER_BYTES (the GPU tier's cap, 0 off),
        GPU_REGISTER (0: the staging ring only), GPU_RING_BYTES,
        GPU_MAX_LEASED."""
        c = self._handle()
        if self._gpu_fn("gr_gpu_set")(c, int(opt), int(value)) != 0:
            raise _error(c)

    def gpu_stats(self):
        """This client's GPU counters (``gr_gpu_get_stats``) as a dict."""
        fn = self._gpu_fn("gr_gpu_get_stats")
        st = _GpuStats()
        c = self._handle()
        if fn(c, ctypes.byref(st)) != 0:
            raise _error(c)
        return {name: getattr(st, name) for name, _ in st._fields_}

    def gpu_info(self):
        """One line about this client's GPU path (device, driver,
        registration, ring, tier, GPUDirect Storage); OSError (ENODEV ...)
        with the reason when there is none."""
        fn = self._gpu_fn("gr_gpu_info")
        buf = ctypes.create_string_buffer(1024)
        c = self._handle()
        if fn(c, buf, len(buf)) != 0:
            err = ctypes.get_errno() or _errno.EIO
            raise OSError(err, buf.value.decode("utf-8", "replace"))
        return buf.value.decode("utf-8", "replace")

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return "<granary.Client %s socket=%r>" % (state, self._socket)


class DeviceBatch:
    """Copies queued by :meth:`Client.read_to_device`.  ``done``: bytes
    queued per range.  :meth:`wait` blocks until they completed on the
    device (and frees the handle); :meth:`poll` says whether they have.
    A batch dropped unwaited is waited for when it is collected.  (With
    ``wait=None`` there is no handle: wait and poll return at once.)"""

    def __init__(self, client, handle, done):
        self._client = client
        self._h = handle
        self._pid = os.getpid()
        self._gen = client._gen         # the gr_client the handle belongs to
        self.done = done

    def _live(self):
        """Whether the handle is still to be waited for: False once the
        client closed (its close waited for the copies and freed the
        handle); OSError in a child of fork (the handle is the parent's,
        whose gr_client the child freed)."""
        c = self._client
        if self._pid != os.getpid() or self._gen != c._gen:
            self._h = None
            raise OSError(_errno.ECHILD, "granary: this batch belongs to the parent process "
                          "(copies queued before fork)")
        if c._closed:
            self._h = None
        return self._h is not None

    def wait(self):
        """Block until the copies have completed; OSError (EIO) if one failed."""
        if not self._h or not self._live():
            return
        h, self._h = self._h, None
        if _lib.gr_dev_wait(h) != 0:
            raise _error(self._client._c)

    def poll(self):
        """True once the copies have completed (then wait() returns at once)."""
        if not self._h or not self._live():
            return True
        r = _lib.gr_dev_poll(self._h)
        if r < 0:
            raise _error(self._client._c)
        return r == 1

    def __del__(self):
        # The handle is freed by a wait (the copies are short; their leases
        # come back on completion whatever happens here).
        try:
            self.wait()
        except Exception:
            pass


class GranaryFile(io.RawIOBase):
    """A file read through the daemon: ``io.RawIOBase``, binary, read-only,
    seekable (``SEEK_SET``, ``SEEK_CUR``, ``SEEK_END``; past the end reads
    return ``b""``).  Made by :meth:`Client.open`.

    ``readinto`` writes straight into the caller's buffer (bytearray,
    memoryview, array, numpy array ...): libgranary copies the bytes once,
    from the daemon's shared memory.  ``read`` returns bytes (one more copy).
    ``pread``/``preadinto`` read at an offset without moving the position.
    ``size`` is the size fixed at open; ``stat()`` gives the attributes.
    There is no file descriptor: ``fileno()`` raises UnsupportedOperation.
    """

    def __init__(self, client, path):
        super().__init__()
        self._client = client
        self.name = os.fspath(path)
        self._f = None
        self._gen = 0
        self._pos = 0
        self._size = 0
        self._f, self._gen = client._open_raw(path)
        self._stat = self._fstat(self._f)
        self._size = self._stat.st_size

    mode = "rb"

    # -- handle and attributes -------------------------------------------------
    def _fstat(self, f):
        if _Stat is None:               # unknown struct stat layout: ask the kernel
            return os.stat(self.name)
        st = _Stat()
        if _lib.gr_fstat(f, ctypes.byref(st)) != 0:
            raise _error(self._client._c, self.name)
        ns = lambda ts: ts.tv_sec * 1000000000 + ts.tv_nsec
        r = os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid,
                            st.st_gid, st.st_size, 0, st.st_mtim.tv_sec, 0,
                            0.0, st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9, 0.0,
                            0, ns(st.st_mtim), 0, st.st_blksize, st.st_blocks, 0))
        return r

    def _handle(self):
        """The gr_file pointer, reopened on the client's new connection in a
        child process (ESTALE if the file is not the one opened)."""
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        c = self._client._handle()
        if self._gen != self._client._gen:
            # self._f belongs to the parent's connection: leave it alone.
            f, gen = self._client._open_raw(self.name)
            st = self._fstat(f)
            if (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) != (
                    self._stat.st_ino, self._stat.st_dev, self._size, self._stat.st_mtime_ns):
                _lib.gr_close(f)
                raise OSError(_errno.ESTALE, "file changed since it was opened", self.name)
            self._f, self._gen = f, gen
            self._client._files.add(self)
        return c, self._f

    @property
    def size(self):
        """The file's size, as fixed when it was opened."""
        return self._size

    def stat(self):
        """The file's attributes as of the open (``os.stat_result``; mode,
        ino, dev, nlink, uid, gid, size, mtime; atime and ctime are 0)."""
        return self._stat

    # -- io.RawIOBase ----------------------------------------------------------
    def readable(self):
        return True

    def seekable(self):
        return True

    def writable(self):
        return False

    def write(self, b):
        raise io.UnsupportedOperation("write: granary files are read-only")

    def _pread_into(self, b, offset):
        mv = memoryview(b)
        if mv.readonly:
            raise TypeError("readinto() argument must be a writable buffer")
        if not mv.contiguous:
            raise BufferError("readinto() argument must be contiguous")
        mv = mv.cast("B")
        n = len(mv)
        if n == 0:
            return 0
        c, f = self._handle()
        # The buffer's own address: libgranary copies into it directly.
        cbuf = (ctypes.c_char * n).from_buffer(mv)
        try:
            got = _lib.gr_pread(f, ctypes.addressof(cbuf), n, offset)
        finally:
            del cbuf
            mv.release()
        if got < 0:
            raise _error(c, self.name)
        return got

    def readinto(self, b):
        """Read up to len(b) bytes into b at the current position; returns
        the number read (0 at or past the end)."""
        got = self._pread_into(b, self._pos)
        self._pos += got
        return got

    def read(self, size=-1):
        """Up to ``size`` bytes (all the rest if negative or None) as bytes."""
        if size is None or size < 0:
            return self.readall()
        n = max(0, min(size, self._size - self._pos))
        if n == 0:
            self._handle()              # closed-file check
            return b""
        buf = bytearray(n)
        got = self.readinto(buf)
        del buf[got:]
        return bytes(buf)

    def readall(self):
        """Everything from the current position to the end, as bytes."""
        chunks = []
        while True:
            n = self._size - self._pos
            if n <= 0:
                self._handle()
                break
            buf = bytearray(n)
            got = self.readinto(buf)
            if got == 0:
                break
            del buf[got:]
            chunks.append(buf)
        if len(chunks) == 1:
            return bytes(chunks[0])
        return b"".join(chunks)

    def pread(self, size, offset):
        """Up to ``size`` bytes at ``offset``, as bytes; the position does
        not move."""
        if offset < 0:
            raise OSError(_errno.EINVAL, os.strerror(_errno.EINVAL), self.name)
        n = max(0, min(size, self._size - offset))
        if n == 0:
            self._handle()
            return b""
        buf = bytearray(n)
        got = self._pread_into(buf, offset)
        del buf[got:]
        return bytes(buf)

    def preadinto(self, b, offset):
        """Read up to len(b) bytes at ``offset`` into b; the position does
        not move.  Returns the number read."""
        if offset < 0:
            raise OSError(_errno.EINVAL, os.strerror(_errno.EINVAL), self.name)
        return self._pread_into(b, offset)

    def seek(self, offset, whence=os.SEEK_SET):
        """Move the position like ``os.lseek``; returns the new position."""
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if whence == os.SEEK_SET:
            pos = offset
        elif whence == os.SEEK_CUR:
            pos = self._pos + offset
        elif whence == os.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError("invalid whence (%r)" % (whence,))
        if pos < 0:
            raise OSError(_errno.EINVAL, os.strerror(_errno.EINVAL), self.name)
        self._pos = pos
        return pos

    def tell(self):
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        return self._pos

    def close(self):
        """Release the daemon's handle.  Idempotent."""
        if self.closed:
            return
        f, self._f = self._f, None
        try:
            # Only on the connection it was opened on, in the process that
            # owns it (after fork the handle is the parent's).
            if (f and self._gen == self._client._gen and self._client._pid == os.getpid()
                    and not self._client._closed):
                _lib.gr_close(f)
        finally:
            super().close()

    def __repr__(self):
        return "<granary.GranaryFile name=%r size=%d%s>" % (
            self.name, self._size, " closed" if self.closed else "")


#: What ``open()`` buffers by default: a read of up to this much costs one
#: request.  Larger than ``io.DEFAULT_BUFFER_SIZE`` (8 KiB) because a request
#: is a round trip to the daemon, not a system call; most image files fit.
DEFAULT_BUFFER_SIZE = 128 << 10


class GranaryBufferedFile(io.BufferedReader):
    """What :func:`open` returns by default: an ``io.BufferedReader`` over a
    :class:`GranaryFile` (``.raw``), with its ``size``, ``stat()``,
    ``pread`` and ``preadinto`` (which neither use nor move the buffered
    position)."""

    @property
    def size(self):
        """The file's size, as fixed when it was opened."""
        return self.raw.size

    def stat(self):
        """The file's attributes as of the open (see GranaryFile.stat)."""
        return self.raw.stat()

    def pread(self, size, offset):
        """Up to ``size`` bytes at ``offset`` (GranaryFile.pread)."""
        return self.raw.pread(size, offset)

    def preadinto(self, b, offset):
        """Read into b at ``offset`` (GranaryFile.preadinto)."""
        return self.raw.preadinto(b, offset)

    def __repr__(self):
        return "<granary.GranaryBufferedFile name=%r size=%d%s>" % (
            self.raw.name, self.raw.size, " closed" if self.closed else "")


_default = None
_default_lock = threading.Lock()


def default_client():
    """The module's shared Client (created on first use, fork-safe)."""
    global _default
    c = _default
    if c is None or c._closed:
        with _default_lock:
            if _default is None or _default._closed:
                _default = Client()
            c = _default
    return c


def open(path, mode="rb", buffering=-1, encoding=None, errors=None, newline=None):
    """:meth:`Client.open` on the default client: buffered by default,
    ``buffering=0`` for the raw :class:`GranaryFile`."""
    return default_client().open(path, mode, buffering, encoding, errors, newline)


def read_range(path, offset, length):
    """:meth:`Client.read_range` on the default client."""
    return default_client().read_range(path, offset, length)


def stats():
    """:meth:`Client.stats` on the default client."""
    return default_client().stats()
