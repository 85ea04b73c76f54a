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

torch is optional: without it GranaryDataset is a plain class with the same
``__len__``/``__getitem__`` protocol (usable with any loader that takes a
map-style dataset) and HintingSampler a plain iterable; with it, they
subclass ``torch.utils.data.Dataset`` and ``Sampler``.
"""
import os
import warnings

import granary

try:
    from torch.utils.data import Dataset as _Base, Sampler as _SamplerBase
    HAVE_TORCH = True
except ImportError:                     # torch is optional
    _Base = object
    _SamplerBase = object
    HAVE_TORCH = False

__all__ = ["GranaryDataset", "HintingSampler", "HAVE_TORCH", "list_files"]


def list_files(root):
    """Every regular file under ``root`` (recursively), as sorted absolute
    paths without ``.``/``..`` components (the form the daemon accepts)."""
    out = []
    for d, dirs, files in os.walk(os.path.abspath(root)):
        dirs.sort()
        for name in files:
            p = os.path.join(d, name)
            if os.path.isfile(p):
                out.append(p)
    out.sort()
    return out


class GranaryDataset(_Base):
    """A map-style dataset of whole files read through Granary.

    ``files``: a directory (walked recursively, sorted) or an iterable of
    paths.  ``transform``: called with each sample's bytes; its result is
    the sample.  ``socket``: the daemon's socket (None: libgranary's
    default, ``$GRANARY_SOCKET`` first).
    """

    def __init__(self, files, transform=None, socket=None):
        if isinstance(files, (str, bytes, os.PathLike)) and os.path.isdir(files):
            self.files = list_files(os.fsdecode(files))
        elif isinstance(files, (str, bytes, os.PathLike)):
            raise NotADirectoryError(f"not a directory: {os.fsdecode(files)!r} "
                                     "(pass a directory or a list of files)")
        else:
            self.files = [os.path.abspath(os.fsdecode(os.fspath(p))) for p in files]
        self.transform = transform
        self.socket = socket
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

    def __getitem__(self, index):
        path = self.files[index]
        with self._get_client().open(path) as f:
            data = f.readall()
        return self.transform(data) if self.transform is not None else data

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


def _flat(order):
    """Indices of an epoch's order, with batches (lists from a BatchSampler)
    flattened."""
    for x in order:
        if isinstance(x, (list, tuple)):
            yield from x
        else:
            yield x


class HintingSampler(_SamplerBase):
    """Wraps a sampler and sends each epoch's order to the daemon as hints.

    ``sampler``: any sampler (``RandomSampler``, ``DistributedSampler``, a
    ``BatchSampler`` used as ``batch_sampler`` ...) or iterable of indices.
    ``dataset``: what the indices index; the ranges hinted for index i are
    ``dataset.hint_ranges(i)`` (an iterable of paths or ``(path, offset,
    length)`` tuples) if it has that method, else ``dataset.paths[i]``, else
    ``dataset.files[i]``.  ``client``: the :class:`granary.Client` to hint
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
        paths = getattr(ds, "paths", None)
        if paths is None:
            paths = getattr(ds, "files", None)
        if paths is None:
            raise TypeError("HintingSampler: the dataset has neither hint_ranges(i) nor "
                            "paths nor files")
        for i in _flat(order):
            yield paths[i]

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
        except (OSError, ValueError) as e:
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
