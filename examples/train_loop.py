#!/usr/bin/python3
"""A minimal training-style input loop over a synthetic image folder, read
without Granary, through Granary, and through the LD_PRELOAD shim, printing
samples/s.

    make && build/granaryd --config my.conf &        # roots must cover --data
    export GRANARY_SOCKET=/path/to/granary.sock
    PYTHONPATH=python /usr/bin/python3 examples/train_loop.py --data /mnt/dfs/synthetic

Modes (--mode, several separated by commas, or "all"):
  plain     a Dataset whose samples are read with Python's open(): the baseline
  granary   granary.torch.GranaryDataset with a HintingSampler: each epoch's
            shuffled order is sent to the daemon as hints before it starts
  nohints   GranaryDataset with the plain shuffled sampler (read-ahead only)
  preload   the "plain" loop, unmodified, in a child process started with
            LD_PRELOAD=build/libgranary_preload.so (GRANARY_PRELOAD_ROOTS: --data)

If --data is empty, it is filled with --samples files of --size random bytes
in ImageFolder layout (class_NN/img_NNNNN.jpg; not real JPEGs).  With torch
the loop is a DataLoader (--workers processes, --batch per batch, shuffled
with a per-epoch seed, the same order in every mode); without torch it is a
plain Python loop over the same order.  The "training step" is a CRC of each
sample plus --step-ms of sleep per batch, a stand-in for decode and the
GPU's forward and backward pass.

The modes share the daemon: the first mode that reads through it fills its
cache (epoch 1 is cold), later ones find it warm.  examples/compare.sh runs
each mode against a fresh daemon on a bandwidth-limited DFS.  Each epoch
prints one line, and one machine-readable line:
    RESULT mode epoch samples seconds samples_per_s MB_per_s
"""
import argparse
import os
import random
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except ImportError:
    torch = None
    Dataset = object

MODES = ("plain", "granary", "nohints", "preload")
LABELS = {"plain": "plain open()", "granary": "granary + hints", "nohints": "granary, no hints",
          "preload": "LD_PRELOAD shim"}


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


def train_step(batch, step_ms):
    """Stand-in for decode + forward + backward: touch every byte, then
    "compute" for step_ms (the GPU's time, during which workers read on)."""
    acc = 0
    for sample in batch:
        acc = zlib.crc32(sample, acc)
    if step_ms:
        time.sleep(step_ms / 1000.0)
    return acc


class EpochOrder:
    """A shuffled order that changes with each epoch but is the same for
    every mode (seeded by the epoch)."""

    def __init__(self, n):
        self.n = n
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        order = list(range(self.n))
        random.Random(1000 + self.epoch).shuffle(order)
        return iter(order)

    def __len__(self):
        return self.n


def run_epoch(ds, sampler, args):
    """One pass over ds in sampler's order; returns (samples, bytes, seconds)."""
    n = nbytes = 0
    t0 = time.perf_counter()
    if torch is not None:
        loader = DataLoader(ds, batch_size=args.batch, sampler=sampler,
                            num_workers=args.workers, collate_fn=list)
        batches = iter(loader)
    else:
        def plain_batches():
            order = list(sampler)
            for start in range(0, len(order), args.batch):
                yield [ds[i] for i in order[start:start + args.batch]]
        batches = plain_batches()
    for batch in batches:
        train_step(batch, args.step_ms)
        n += len(batch)
        nbytes += sum(len(s) for s in batch)
    return n, nbytes, time.perf_counter() - t0


def report(mode, epoch, n, nbytes, dt):
    print("%-20s epoch %d: %6d samples in %6.2f s: %9.0f samples/s, %7.1f MB/s" % (
        LABELS[mode], epoch, n, dt, n / dt, nbytes / dt / 1e6))
    print("RESULT %s %d %d %.3f %.1f %.2f" % (mode, epoch, n, dt, n / dt, nbytes / dt / 1e6))
    sys.stdout.flush()


def run_preload(args):
    """The plain loop again, in a child process with the shim preloaded."""
    shim = args.preload_lib or os.path.join(HERE, "..", "build", "libgranary_preload.so")
    if not os.path.exists(shim):
        print("%-20s unavailable: %s not built (make)" % (LABELS["preload"], shim))
        return
    env = dict(os.environ, LD_PRELOAD=os.path.abspath(shim),
               GRANARY_PRELOAD_ROOTS=os.path.abspath(args.data))
    cmd = [sys.executable, os.path.abspath(__file__), "--data", args.data, "--mode", "plain",
           "--as-preload", "--epochs", str(args.epochs), "--batch", str(args.batch),
           "--workers", str(args.workers), "--step-ms", str(args.step_ms)]
    sys.stdout.flush()
    subprocess.run(cmd, env=env, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/granary-example-data",
                    help="image folder (created if empty); must lie under the daemon's roots")
    ap.add_argument("--samples", type=int, default=2000, help="files to create if --data is empty")
    ap.add_argument("--size", type=int, default=110 * 1024, help="bytes per created file")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (with torch)")
    ap.add_argument("--step-ms", type=float, default=0.0,
                    help="simulated compute per batch, milliseconds")
    ap.add_argument("--mode", default="all",
                    help="comma-separated: plain, granary, nohints, preload; or all, "
                         "or both (plain,granary)")
    ap.add_argument("--preload-lib", help="the shim (default build/libgranary_preload.so)")
    ap.add_argument("--as-preload", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    modes = {"all": list(MODES), "both": ["plain", "granary"]}.get(args.mode,
                                                                    args.mode.split(","))
    for m in modes:
        if m not in MODES:
            ap.error("unknown mode %r" % m)

    make_folder(args.data, args.samples, args.size)
    from granary.torch import list_files
    files = list_files(args.data)
    if not args.as_preload:
        loop = ("torch %s DataLoader, %d workers" % (torch.__version__, args.workers)
                if torch is not None else "plain Python loop (torch not installed)")
        print("data: %s, %d files, %.1f MB; %s, batch %d, step %.0f ms" % (
            args.data, len(files), sum(os.path.getsize(p) for p in files) / 1e6, loop,
            args.batch, args.step_ms))

    for mode in modes:
        if mode == "preload":
            run_preload(args)
            continue
        sampler = EpochOrder(len(files))
        if mode == "plain":
            ds = PlainDataset(files)
        else:
            try:
                import granary
                from granary.torch import GranaryDataset, HintingSampler
                granary.Client().close()        # fail early and clearly without a daemon
            except (ImportError, OSError) as e:
                print("%-20s unavailable: %s" % (LABELS[mode], e))
                continue
            ds = GranaryDataset(files)
            if mode == "granary":
                sampler = HintingSampler(sampler, ds)
        for epoch in range(1, args.epochs + 1):
            sampler.set_epoch(epoch)
            n, nbytes, dt = run_epoch(ds, sampler, args)
            report("preload" if args.as_preload else mode, epoch, n, nbytes, dt)
        if mode != "plain":
            if isinstance(sampler, HintingSampler):
                sampler.close()
            ds.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
