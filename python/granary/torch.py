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

torch is optional: without it GranaryDataset is a plain class with the same
``__len__``/``__getitem__`` protocol (usable with any loader that takes a
map-style dataset); with it, it subclasses ``torch.utils.data.Dataset``.
"""
import os

import granary

try:
    from torch.utils.data import Dataset as _Base
    HAVE_TORCH = True
except ImportError:                     # torch is optional
    _Base = object
    HAVE_TORCH = False

__all__ = ["GranaryDataset", "HAVE_TORCH", "list_files"]


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
