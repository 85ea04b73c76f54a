#!/usr/bin/python3
"""A minimal training-style input loop, reading a synthetic image folder
with and without Granary, and printing samples/s.

    make && build/granaryd --config my.conf &        # roots must cover --data
    export GRANARY_SOCKET=/path/to/granary.sock
    PYTHONPATH=python /usr/bin/python3 examples/train_loop.py --data /mnt/dfs/synthetic

    # the same loop, unmodified, through the LD_PRELOAD shim:
    LD_PRELOAD=$PWD/build/libgranary_preload.so GRANARY_PRELOAD_ROOTS=/mnt/dfs \\
        /usr/bin/python3 examples/train_loop.py --data /mnt/dfs/synthetic --mode plain

If --data is empty, it is filled with --samples files of --size random bytes
in ImageFolder layout (class_NN/img_NNNNN.jpg; not real JPEGs).  With torch
the loop is a DataLoader (--workers processes, --batch per batch, shuffled);
without torch it is a plain shuffled Python loop.  The "training step" is a
CRC of each sample, a stand-in for decode + forward.  "plain" reads with
Python's open(); "granary" uses granary.torch.GranaryDataset.  Epoch 1 of
granary fills the daemon's cache from the source; later epochs are hits.
"""
import argparse
import os
import random
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except ImportError:
    torch = None
    Dataset = object


class PlainDataset(Dataset):
    """The baseline: each sample is a file read with open()."""

    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb") as f:
            return f.read()


def make_folder(root, samples, size, classes=10):
    """Fill root with random files unless it already holds some."""
    os.makedirs(root, exist_ok=True)
    if any(os.scandir(root)):
        return
    rnd = random.Random(0)
    for i in range(samples):
        d = os.path.join(root, "class_%02d" % (i % classes))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "img_%05d.jpg" % i), "wb") as f:
            f.write(rnd.randbytes(size))


def train_step(batch):
    """Stand-in for decode + forward + backward: touch every byte."""
    acc = 0
    for sample in batch:
        acc = zlib.crc32(sample, acc)
    return acc


def run_epoch(ds, args, seed):
    """One pass over ds; returns (samples, bytes, seconds)."""
    n = nbytes = 0
    t0 = time.perf_counter()
    if torch is not None:
        g = torch.Generator()
        g.manual_seed(seed)
        loader = DataLoader(ds, batch_size=args.batch, shuffle=True, generator=g,
                            num_workers=args.workers, collate_fn=list)
        for batch in loader:
            train_step(batch)
            n += len(batch)
            nbytes += sum(len(s) for s in batch)
    else:
        order = list(range(len(ds)))
        random.Random(seed).shuffle(order)
        for start in range(0, len(order), args.batch):
            batch = [ds[i] for i in order[start:start + args.batch]]
            train_step(batch)
            n += len(batch)
            nbytes += sum(len(s) for s in batch)
    return n, nbytes, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/granary-example-data",
                    help="image folder (created if empty); must lie under the daemon's roots")
    ap.add_argument("--samples", type=int, default=2000, help="files to create if --data is empty")
    ap.add_argument("--size", type=int, default=110 * 1024, help="bytes per created file")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (with torch)")
    ap.add_argument("--mode", choices=["plain", "granary", "both"], default="both")
    args = ap.parse_args()

    make_folder(args.data, args.samples, args.size)
    from granary.torch import list_files
    files = list_files(args.data)
    shim = "granary_preload" in os.environ.get("LD_PRELOAD", "")
    loop = ("torch %s DataLoader, %d workers" % (torch.__version__, args.workers)
            if torch is not None else "plain Python loop (torch not installed)")
    print("data: %s, %d files, %.1f MB; %s" % (
        args.data, len(files), sum(os.path.getsize(p) for p in files) / 1e6, loop))

    modes = ["plain", "granary"] if args.mode == "both" else [args.mode]
    for mode in modes:
        label = mode + (" (LD_PRELOAD shim)" if mode == "plain" and shim else "")
        if mode == "plain":
            ds = PlainDataset(files)
        else:
            try:
                import granary
                from granary.torch import GranaryDataset
                granary.Client().close()        # fail early and clearly without a daemon
            except (ImportError, OSError) as e:
                print("%-26s unavailable: %s" % (label, e))
                continue
            ds = GranaryDataset(files)
        for epoch in range(1, args.epochs + 1):
            n, nbytes, dt = run_epoch(ds, args, seed=epoch)
            print("%-26s epoch %d: %6d samples in %6.2f s: %9.0f samples/s, %7.1f MB/s" % (
                label, epoch, n, dt, n / dt, nbytes / dt / 1e6))
        if mode == "granary":
            ds.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
