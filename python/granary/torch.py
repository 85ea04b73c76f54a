"""PyTorch integration: a map-style Dataset whose samples are read through
Granary.

    from torch.utils.data import DataLoader
    from granary.torch import GranaryDataset

    ds = GranaryDataset("/mnt/lustre/imagenet/train", transform=decode_jpeg)
    for batch in DataLoader(ds, batch_size=256, num_workers=8, collate_fn=collate):
        ...

Each sample is one file: ``ds[i]`` is the bytes of the i-th file (in sorted
path order for a directory), or ``transform(bytes)``.  Every worker process
has its own connection: the Client is created on first use in the process
that reads (forked workers reconnect, since the process id is checked, and
for the "spawn" start method the client is not pickled at all).

To have each epoch's samples in DRAM before the workers ask for them, wrap
the sampler in a :class:`HintingSampler`: at the start of every epoch it
draws the epoch's whole index order from the wrapped sampler and sends the
samples' files to the daemon as job hints, in that order::

    sampler = HintingSampler(RandomSampler(ds), ds)
    loader = DataLoader(ds, batch_size=256, num_workers=8, sampler=sampler)

A labelled, torchvision-style image dataset: :class:`GranaryImageFolder`
is ``torchvision.datasets.ImageFolder`` (``classes``, ``class_to_idx``,
``samples``, ``targets``, ``loader``, ``transform``, ``target_transform``)
with the files read through Granary::

    ds = GranaryImageFolder("/mnt/lustre/imagenet/train", transform=train_tf)
    sampler = HintingSampler(RandomSampler(ds), ds)

HintingSampler also hints torchvision's own datasets (any dataset with
``samples``, ``imgs``, ``paths`` or ``files``); one it cannot hint runs
unhinted with a warning.

torch is optional: without it GranaryDataset is a plain class with the same
``__len__``/``__getitem__`` protocol (usable with any loader that takes a
map-style dataset) and HintingSampler a plain iterable; with it, they
subclass ``torch.utils.data.Dataset`` and ``Sampler``.

Batches straight onto the GPU (libgranary's ``gr_read_to_device``: cached
bytes go from the daemon's shared memory to device memory by DMA, no copy
in the loader)::

    ds = GranaryDataset("/mnt/lustre/ds", lazy=True)      # samples are SampleRefs
    loader = DataLoader(ds, batch_size=256, num_workers=8, collate_fn=ref_collate)
    for batch in DeviceLoader(loader, device="cuda"):     # DeviceSamples
        x = batch.data                                      # one uint8 CUDA tensor
        first = batch.sample(0)                             # a view of sample 0

Workers only name the samples (no bytes cross processes); DeviceLoader
copies each batch in the main process with one batched call, and queues
batch k+1 before it hands out batch k, so the copy of the next batch
overlaps the step on this one.  :func:`read_tensor` reads one range or file
into a CUDA tensor.  These need ``torch.cuda``; without a GPU they raise
RuntimeError (the allocator and stream can be given, which is how the tests
drive them against the stand-in driver).
"""
import errno
import os
import warnings

import granary
from . import fs as gfs

try:
    from torch.utils.data import Dataset as _Base, Sampler as _SamplerBase
    HAVE_TORCH = True
except ImportError:                     # torch is optional
    _Base = object
    _SamplerBase = object
    HAVE_TORCH = False

__all__ = ["GranaryDataset", "GranaryImageFolder", "IMG_EXTENSIONS", "find_classes",
           "HintingSampler", "HAVE_TORCH", "list_files", "SampleRef",
           "read_tensor", "ref_collate", "DeviceCollate", "DeviceSamples", "DeviceLoader"]


def _lister(socket):
    """A client for listing (granary.fs), or None when the daemon cannot be
    reached (then the os module lists)."""
    try:
        return granary.Client(socket)
    except OSError:
        return None


def list_files(root, socket=None):
    """Every regular file under ``root`` (recursively), as sorted absolute
    paths without ``.``/``..`` components (the form the daemon accepts).
    Listed through the daemon (granary.fs): a tree registered as a dataset
    (``granaryctl dataset add``) costs the file system nothing."""
    root = os.path.abspath(root)
    c = _lister(socket)
    if c is None:
        out = []
        for d, dirs, files in os.walk(root):
            dirs.sort()
            out.extend(os.path.join(d, n) for n in files if os.path.isfile(os.path.join(d, n)))
        return sorted(out)
    try:
        return sorted(os.path.join(d, n) for d, n in gfs.files_under(root, c))
    finally:
        c.close()


class GranaryDataset(_Base):
    """A map-style dataset of whole files read through Granary.

    ``files``: a directory (walked recursively, sorted) or an iterable of
    paths.  ``transform``: called with each sample's bytes; its result is
    the sample.  ``socket``: the daemon's socket (None: libgranary's
    default, ``$GRANARY_SOCKET`` first).  ``lazy``: ``ds[i]`` is a
    :class:`SampleRef` naming the sample (no read, no transform), for
    :class:`DeviceCollate`/:class:`DeviceLoader` to copy onto the GPU.
    """

    def __init__(self, files, transform=None, socket=None, lazy=False):
        if isinstance(files, (str, bytes, os.PathLike)) and os.path.isdir(files):
            self.files = list_files(os.fsdecode(files), socket)
        elif isinstance(files, (str, bytes, os.PathLike)):
            raise NotADirectoryError(f"not a directory: {os.fsdecode(files)!r} "
                                     "(pass a directory or a list of files)")
        else:
            self.files = [os.path.abspath(os.fsdecode(os.fspath(p))) for p in files]
        self.transform = transform
        self.socket = socket
        self.lazy = lazy
        self._client = None
        self._pid = None

    def _get_client(self):
        pid = os.getpid()
        if self._client is None or self._pid != pid:
            # A worker's own connection (the one inherited across fork, if
            # any, is the parent's and is left to it).
            self._client = granary.Client(self.socket)
            self._pid = pid
        return self._client

    def __len__(self):
        return len(self.files)

    @property
    def paths(self):
        """The sample files, index i -> path (what HintingSampler hints)."""
        return self.files

    def hint_ranges(self, index):
        """What reading sample ``index`` reads: its whole file."""
        return (self.files[index],)

    def sample_ref(self, index):
        """Sample ``index`` as a :class:`SampleRef` (its whole file; the
        size from stat)."""
        path = self.files[index]
        return SampleRef(path, 0, os.stat(path).st_size)

    def to_device(self, index, device=None, client=None, stream=None):
        """Sample ``index`` as a uint8 CUDA tensor (:func:`read_tensor`)."""
        return read_tensor(self.files[index], device=device,
                           client=client if client is not None else self._get_client(),
                           stream=stream)

    def __getitem__(self, index):
        if self.lazy:
            return self.sample_ref(index)
        path = self.files[index]
        with self._get_client().open(path, buffering=0) as f:
            data = f.readall()
        return self.transform(data) if self.transform is not None else data

    def __getitems__(self, indices):
        """Samples ``indices``, in order (a DataLoader with automatic
        batching calls this in its workers): their files are opened ahead
        first (:meth:`granary.Client.open_ahead`), so that the open of each
        finds its reply waiting instead of a round trip.  Nothing else
        changes: ``[self[i] for i in indices]``."""
        paths = self._ahead_paths(indices)
        if len(paths) > 1:
            try:
                self._get_client().open_ahead(paths)
            except OSError:
                pass                    # advice: the reads go on without it
        return [self[i] for i in indices]

    def _ahead_paths(self, indices):
        # The files reading these samples opens first, in order: the ranges
        # from offset 0 of hint_ranges (what a sample reads).
        if self.lazy:
            return []
        out = []
        for i in indices:
            for r in self.hint_ranges(i):
                if isinstance(r, (str, bytes, os.PathLike)):
                    out.append(r)
                elif r[1] == 0:
                    out.append(r[0])
        return out

    def __getstate__(self):
        # The connection is per process: never pickled (spawned workers).
        state = self.__dict__.copy()
        state["_client"] = None
        state["_pid"] = None
        return state

    def close(self):
        """Close this process's connection (it reopens on the next read)."""
        if self._client is not None and self._pid == os.getpid():
            self._client.close()
        self._client = None


#: The file name endings GranaryImageFolder takes by default
#: (torchvision.datasets.folder.IMG_EXTENSIONS).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def find_classes(root, client=None):
    """(classes, class_to_idx) of an ImageFolder tree: the sorted names of
    root's subdirectories, each numbered by its place.  FileNotFoundError
    when there is none (torchvision's ``find_classes``).  Listed through
    the daemon when ``client`` is given (granary.fs)."""
    ents = gfs.scandir(root, client) if client is not None else os.scandir(root)
    classes = sorted(e.name for e in ents if e.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {root}.")
    return classes, {c: i for i, c in enumerate(classes)}


class GranaryImageFolder(GranaryDataset):
    """``torchvision.datasets.ImageFolder``, read through Granary.

    ``root/<class>/**/<file>``: each class is a subdirectory of ``root``
    (sorted names, numbered 0, 1, ...), each sample a file under it (walked
    recursively, following links, sorted) whose name ends with one of
    ``extensions`` (case-insensitive; default :data:`IMG_EXTENSIONS`) or for
    which ``is_valid_file(path)`` is true (give one of the two).  The same
    attributes as torchvision's: ``classes``, ``class_to_idx``, ``samples``
    (``(path, class_index)``, paths absolute), ``imgs`` (the same list),
    ``targets``, ``loader``, ``transform``, ``target_transform``, ``root``;
    ``ds[i]`` is ``(transform(loader(path)), target_transform(class))``.

    The default ``loader`` reads the whole file through Granary (one
    request for a file of one chunk, on this process's own connection, as
    GranaryDataset) and decodes it with PIL, converted to RGB, as
    torchvision's default loader does.  A ``loader`` given is called with
    the path, as torchvision calls it (``granary.open(path)`` inside it
    reads through Granary).  ``HintingSampler(sampler, ds)`` hints its
    files.  A class with no valid file raises FileNotFoundError, as in
    torchvision.
    """

    def __init__(self, root, transform=None, target_transform=None, loader=None,
                 is_valid_file=None, extensions=None, socket=None):
        if extensions is not None and is_valid_file is not None:
            raise ValueError("Both extensions and is_valid_file cannot be not None at the same time")
        if extensions is None and is_valid_file is None:
            extensions = IMG_EXTENSIONS
        self.root = os.path.abspath(os.path.expanduser(os.fsdecode(os.fspath(root))))
        lister = _lister(socket)
        try:
            self._init_samples(lister, is_valid_file, extensions)
        finally:
            if lister is not None:
                lister.close()
        super().__init__([p for p, _ in self.samples], socket=socket)
        self.imgs = self.samples
        self.targets = [t for _, t in self.samples]
        self.transform = transform
        self.target_transform = target_transform
        self.loader = loader if loader is not None else self.granary_loader

    def _init_samples(self, lister, is_valid_file, extensions):
        self.classes, self.class_to_idx = find_classes(self.root, lister)
        self.extensions = tuple(extensions) if extensions is not None else None
        if is_valid_file is None:
            exts = tuple(x.lower() for x in self.extensions)
            is_valid_file = lambda p: p.lower().endswith(exts)   # noqa: E731
        samples, empty = [], []
        for cls in self.classes:
            idx = self.class_to_idx[cls]
            n = len(samples)
            top = os.path.join(self.root, cls)
            if lister is not None:
                # torchvision's order: sorted(os.walk(...)), names sorted in each
                pairs = sorted(gfs.files_under(top, lister, followlinks=True))
            else:
                pairs = [(d, name) for d, _dirs, names in sorted(os.walk(top, followlinks=True))
                         for name in sorted(names)]
            for d, name in pairs:
                p = os.path.join(d, name)
                if is_valid_file(p):
                    samples.append((p, idx))
            if len(samples) == n:
                empty.append(cls)
        if empty:
            msg = "Found no valid file for the classes %s. " % ", ".join(sorted(empty))
            if self.extensions is not None:
                msg += "Supported extensions are: %s" % ", ".join(self.extensions)
            raise FileNotFoundError(msg)
        self.samples = samples

    def read_bytes(self, path):
        """The whole file at ``path``, read through this process's client."""
        with self._get_client().open(path, buffering=0) as f:
            return f.readall()

    def granary_loader(self, path):
        """The default loader: the file through Granary, decoded by PIL,
        as an RGB ``PIL.Image``."""
        import io
        from PIL import Image
        img = Image.open(io.BytesIO(self.read_bytes(path)))
        return img.convert("RGB")

    def _ahead_paths(self, indices):
        # A loader of the caller's own may not read through Granary at all.
        if self.loader != self.granary_loader:
            return []
        return super()._ahead_paths(indices)

    def __getitem__(self, index):
        path, target = self.samples[index]
        sample = self.loader(path)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target


def _flat(order):
    """Indices of an epoch's order, with batches (lists from a BatchSampler)
    flattened."""
    for x in order:
        if isinstance(x, (list, tuple)):
            yield from x
        else:
            yield x


#: Where HintingSampler looks for a dataset's file paths, in this order.
_PATH_ATTRS = ("paths", "files", "samples", "imgs")


class _NoHints(TypeError):
    """The dataset names no files HintingSampler could hint."""


def _entry_path(e, attr, i):
    """The file path of a dataset's entry (a path, or a tuple/list whose
    first item is one), absolute."""
    if isinstance(e, (tuple, list)) and e:
        e = e[0]
    if isinstance(e, (str, bytes, os.PathLike)):
        return os.path.abspath(os.fsdecode(os.fspath(e)))
    raise _NoHints("%s[%d] is %s, not a path or a (path, ...) tuple"
                   % (attr, i, type(e).__name__))


class HintingSampler(_SamplerBase):
    """Wraps a sampler and sends each epoch's order to the daemon as hints.

    ``sampler``: any sampler (``RandomSampler``, ``DistributedSampler``, a
    ``BatchSampler`` used as ``batch_sampler`` ...) or iterable of indices.
    ``dataset``: what the indices index; the ranges hinted for index i are
    ``dataset.hint_ranges(i)`` (an iterable of paths or ``(path, offset,
    length)`` tuples) if it has that method, else the path of entry i of
    the first of ``dataset.paths``, ``files``, ``samples``, ``imgs`` it has
    (an entry is a path, or a tuple or list whose first item is one, as in
    torchvision's ``ImageFolder``/``DatasetFolder`` ``samples``; relative
    paths are taken from the current directory).  A dataset with none of
    these, or entries that are not paths, is not hinted: the epoch runs
    with a RuntimeWarning.  ``client``: the :class:`granary.Client` to hint
    on (None: one of its own, on ``socket``).

    ``iter(sampler)`` (the DataLoader calls it when an epoch starts)
    materialises the wrapped sampler's order, clears the previous epoch's
    hint list, appends this epoch's ranges in order, then yields the same
    indices.  The hints live on this object's connection, which stays open
    between epochs (the daemon drops a list when its connection closes); the
    sampler is iterated in the main process, while DataLoader workers read
    over their own connections (GranaryDataset), and the daemon matches
    their reads to the list whatever connection they come on.  The list is
    not cleared when an epoch ends (the loader's last samples may still be
    in flight); :meth:`close` or the next epoch drops it.

    Hints are advice: if sending them fails (no daemon, E2BIG ...), the
    epoch goes on without them, with a RuntimeWarning, unless ``strict``.
    ``last_order`` is the order of the last epoch (a list), ``hinted`` the
    number of ranges sent for it.
    """

    def __init__(self, sampler, dataset, client=None, socket=None, strict=False,
                 batch=granary.Client.HINT_BATCH):
        self.sampler = sampler
        self.dataset = dataset
        self.socket = socket
        self.strict = strict
        self.batch = batch
        self._own = client is None
        self._client = client
        self._pid = os.getpid() if client is not None else None
        self.last_order = None
        self.hinted = 0

    def _get_client(self):
        if self._client is None or self._pid != os.getpid():
            if not self._own and self._client is not None:
                # A Client given to us reconnects by itself after fork.
                return self._client
            self._client = granary.Client(self.socket)
            self._pid = os.getpid()
        return self._client

    def _ranges(self, order):
        ds = self.dataset
        fn = getattr(ds, "hint_ranges", None)
        if fn is not None:
            for i in _flat(order):
                yield from fn(i)
            return
        for name in _PATH_ATTRS:
            entries = getattr(ds, name, None)
            if entries is not None:
                break
        else:
            raise _NoHints("the dataset (%s) has none of hint_ranges(i), %s"
                           % (type(ds).__name__, ", ".join(_PATH_ATTRS)))
        for i in _flat(order):
            yield _entry_path(entries[i], name, i)

    def send_hints(self, order):
        """Replace the hint list with the ranges of ``order``; returns the
        number sent (what ``__iter__`` does before yielding)."""
        c = self._get_client()
        c.hint_clear()
        return c.hint(self._ranges(order), batch=self.batch)

    def __iter__(self):
        order = list(self.sampler)
        self.last_order = order
        self.hinted = 0
        try:
            self.hinted = self.send_hints(order)
        except Exception as e:          # hints are advice: never end the epoch
            if self.strict:
                raise
            warnings.warn("granary: epoch not hinted: %s" % (e,), RuntimeWarning, stacklevel=2)
        return iter(order)

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch):
        """Passed on to the wrapped sampler (DistributedSampler needs it)."""
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __getstate__(self):
        # A connection is per process and is never pickled.
        state = self.__dict__.copy()
        if self._own:
            state["_client"] = None
            state["_pid"] = None
        return state

    def close(self):
        """Drop the hint list: close our own connection (a client given to
        us is only cleared).  The next epoch opens a new one."""
        c, self._client = self._client, None
        if c is None or self._pid != os.getpid():
            return
        if self._own:
            c.close()
        else:
            try:
                c.hint_clear()
            except (OSError, ValueError):
                pass
            self._client = c


# ---- onto the GPU -------------------------------------------------------------

class SampleRef(tuple):
    """A sample named, not read: ``(path, offset, length)``."""
    __slots__ = ()

    def __new__(cls, path, offset, length):
        return tuple.__new__(cls, (os.fspath(path), int(offset), int(length)))

    def __getnewargs__(self):           # pickled to and from DataLoader workers
        return tuple(self)

    path = property(lambda self: self[0])
    offset = property(lambda self: self[1])
    length = property(lambda self: self[2])


def _cuda_or_raise(what):
    try:
        import torch
    except ImportError:
        raise RuntimeError("granary.torch.%s needs torch" % what) from None
    if not torch.cuda.is_available():
        raise RuntimeError("granary.torch.%s needs CUDA: torch.cuda.is_available() is False "
                           "(DeviceCollate takes allocate= and stream= for another allocator)"
                           % what)
    return torch


def _torch_alloc(device):
    """allocate(nbytes) -> (uint8 CUDA tensor, its device address)."""
    def allocate(n):
        torch = _cuda_or_raise("DeviceCollate")
        t = torch.empty(max(1, n), dtype=torch.uint8, device=device or "cuda")
        return t, t.data_ptr()
    return allocate


def _torch_stream(device):
    torch = _cuda_or_raise("DeviceCollate")
    return torch.cuda.current_stream(device).cuda_stream


def read_tensor(path, offset=0, length=None, device=None, client=None, stream=None, out=None):
    """Bytes ``[offset, offset+length)`` of ``path`` (to the end of the
    file when length is None) as a uint8 CUDA tensor, copied on the current
    stream of ``device`` (or on ``stream``, an int handle): work queued on
    it afterwards sees them, no host wait.  ``out``: a uint8 CUDA tensor to
    fill instead of a new one (at least the length).  Raises RuntimeError
    without CUDA, OSError from the library (ENODEV, EFAULT ...)."""
    torch = _cuda_or_raise("read_tensor")
    c = client if client is not None else granary.default_client()
    if length is None:
        with c.open(path, buffering=0) as f:
            length = max(0, f.size - offset)
    t = out if out is not None else torch.empty(max(1, length), dtype=torch.uint8,
                                                device=device or "cuda")
    if t.dtype != torch.uint8 or not t.is_cuda or t.numel() < length:
        raise ValueError("out must be a uint8 CUDA tensor of at least %d elements" % length)
    s = stream if stream is not None else torch.cuda.current_stream(t.device).cuda_stream
    b = c.read_to_device([(path, offset, length, t.data_ptr())], stream=s, wait=None)
    return t[:b.done[0]]


def ref_collate(batch):
    """collate_fn for a lazy GranaryDataset in DataLoader workers: the list
    of SampleRefs as it is (DeviceLoader copies them in the main process)."""
    return list(batch)


class DeviceSamples:
    """A batch on the GPU: ``data`` holds the samples back to back,
    sample i at ``offsets[i]`` for ``lengths[i]`` bytes; ``sample(i)`` is
    that view; ``refs`` what was read.  ``batch`` is the DeviceBatch when
    the copy was not waited for (ordered on the stream either way)."""

    def __init__(self, data, offsets, lengths, refs, batch=None):
        self.data = data
        self.offsets = offsets
        self.lengths = lengths
        self.refs = refs
        self.batch = batch

    def __len__(self):
        return len(self.offsets)

    def sample(self, i):
        return self.data[self.offsets[i]:self.offsets[i] + self.lengths[i]]

    def wait(self):
        """Block until the batch's bytes are in device memory."""
        if self.batch is not None:
            self.batch.wait()


class DeviceCollate:
    """Lands a batch of SampleRefs (or ``(path, offset, length)`` tuples)
    in device memory with one batched ``gr_read_to_device``: one buffer
    (``allocate(nbytes) -> (buffer, device address)``, default a uint8
    tensor on ``device``) holding the samples back to back, each at an
    offset aligned to ``align`` bytes.  Ordered on ``stream`` (an int
    handle; default the device's current stream).  Use it as the
    DataLoader's collate_fn with ``num_workers=0``, or through
    :class:`DeviceLoader` with workers (CUDA does not work in forked
    workers).  ``wait``: block until the copy is done (default: the
    copies are only ordered on the stream, and DeviceSamples.wait waits).
    Files stay open between batches (up to ``max_open``, least recently
    used closed first), so a batch costs no OPEN round trips once its files
    were seen; like any open file, one kept open reads the version it was
    opened at (or fails with ESTALE, and is then opened again once): a
    sample rewritten during the job is seen once its file is closed
    (``close()``, or evicted)."""

    def __init__(self, device=None, client=None, socket=None, allocate=None, stream=None,
                 align=256, wait=False, max_open=1024):
        self.device = device
        self.socket = socket
        self.max_open = max(1, max_open)
        self._files = {}                # path -> GranaryFile, least recently used first
        self._client = client
        self._pid = os.getpid() if client is not None else None
        self.allocate = allocate if allocate is not None else _torch_alloc(device)
        self.stream = stream
        self.align = align
        self.wait = wait

    def _get_client(self):
        if self._client is None or self._pid != os.getpid():
            self._client = granary.Client(self.socket)
            self._pid = os.getpid()
            self._files = {}
        return self._client

    def _file(self, c, path):
        f = self._files.pop(path, None)
        if f is None or f.closed:
            f = c.open(path, buffering=0)
        self._files[path] = f           # now the most recently used
        if len(self._files) > self.max_open:
            self._files.pop(next(iter(self._files))).close()
        return f

    def close(self):
        """Close the files kept open."""
        files, self._files = self._files, {}
        for f in files.values():
            f.close()

    def __call__(self, refs):
        refs = [r if isinstance(r, SampleRef) else SampleRef(*r) for r in refs]
        offsets, at = [], 0
        for r in refs:
            offsets.append(at)
            at += (r.length + self.align - 1) // self.align * self.align
        buf, base = self.allocate(at)
        stream = self.stream if self.stream is not None else _torch_stream(self.device)
        c = self._get_client()
        for attempt in (0, 1):
            try:
                b = c.read_to_device(
                    [(self._file(c, r.path), r.offset, r.length, base + o)
                     for r, o in zip(refs, offsets)],
                    stream=stream, wait=bool(self.wait))
                break
            except OSError as e:
                if e.errno != errno.ESTALE or attempt:
                    raise
                self.close()            # a file changed: open them afresh
        return DeviceSamples(buf, offsets, b.done, refs, None if self.wait else b)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_client"] = None         # a connection is per process
        state["_pid"] = None
        state["_files"] = {}
        return state


class DeviceLoader:
    """Iterates a DataLoader whose batches are lists of SampleRefs
    (``collate_fn=ref_collate`` over a lazy GranaryDataset) and yields
    :class:`DeviceSamples`: each batch copied onto the GPU by a
    :class:`DeviceCollate` in this process, the next one queued before the
    current one is handed out (``prefetch`` batches ahead), so its copy
    overlaps the work on the current one."""

    def __init__(self, loader, device=None, collate=None, prefetch=1, **collate_kw):
        self.loader = loader
        self.collate = collate if collate is not None else DeviceCollate(device=device,
                                                                         **collate_kw)
        self.prefetch = max(0, prefetch)

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        pending = []
        for refs in self.loader:
            pending.append(self.collate(refs))
            if len(pending) > self.prefetch:
                yield pending.pop(0)
        while pending:
            yield pending.pop(0)
