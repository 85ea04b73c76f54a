"""Job hints from Python: Client.hint/hint_clear and granary.torch's
HintingSampler, against a running granaryd.

Run by tests/test_python.sh (GRANARY_SOCKET, GRANARY_TEST_ROOT as for
test_client.py; chunks of 1 MiB, so each small file here is one chunk and
one hint entry).  The DataLoader tests need torch (Debian: python3-torch);
without it they are skipped, and test_python.sh says so.
"""
import errno
import os
import random
import sys
import time
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import granary                          # noqa: E402
from granary.torch import GranaryDataset, HintingSampler, HAVE_TORCH   # noqa: E402

ROOT = os.environ.get("GRANARY_TEST_ROOT", "")
SOCKET = os.environ.get("GRANARY_SOCKET", "")


def setUpModule():
    if not ROOT or not SOCKET:
        raise unittest.SkipTest("GRANARY_TEST_ROOT and GRANARY_SOCKET must be set "
                                "(run tests/test_python.sh)")


def make_files(sub, n, seed, base=3000):
    """n files of different sizes (all under one chunk) in ROOT/sub; their
    sorted paths."""
    rnd = random.Random(seed)
    d = os.path.join(ROOT, sub)
    os.makedirs(d, exist_ok=True)
    out = []
    for i in range(n):
        p = os.path.join(d, "f%04d.bin" % i)
        with open(p, "wb") as f:
            f.write(rnd.randbytes(base + 131 * i))
        out.append(p)
    return sorted(out)


def read_plain(p):
    with open(p, "rb") as f:
        return f.read()


def wait_prefetch_idle(c, issued_at_least, timeout=10.0):
    """Wait until the daemon has issued that many prefetches and none is in
    flight or queued; returns the stats then."""
    deadline = time.monotonic() + timeout
    while True:
        st = c.stats()
        if (st["prefetch_issued"] >= issued_at_least and st["fetches_inflight"] == 0
                and st["source_queued"] == 0):
            return st
        if time.monotonic() > deadline:
            raise AssertionError("prefetch not idle after %.0f s: %r" % (timeout, st))
        time.sleep(0.02)


def wait_stat(c, name, at_least, timeout=10.0):
    """Wait until counter name reaches at_least (hints are resolved on the
    daemon's I/O threads, after gr_hint_append has returned)."""
    deadline = time.monotonic() + timeout
    while c.stats()[name] < at_least:
        if time.monotonic() > deadline:
            raise AssertionError("%s below %d after %.0f s" % (name, at_least, timeout))
        time.sleep(0.02)


class ClientHints(unittest.TestCase):
    def test_hints_fetch_ahead_and_reads_hit(self):
        files = make_files("hint-basic", 24, seed=1)
        hinter = granary.Client(SOCKET)
        reader = granary.Client(SOCKET)
        try:
            before = hinter.stats()
            # Paths and (path, off, len) tuples, in three batches of 10.
            items = files[:12] + [(p, 0, 0) for p in files[12:20]] + \
                [(p, 0, os.path.getsize(p)) for p in files[20:]]
            self.assertEqual(hinter.hint(items, batch=10), 24)
            st = wait_prefetch_idle(hinter, before["prefetch_issued"] + 24)
            self.assertEqual(st["hint_entries_added"] - before["hint_entries_added"], 24)
            self.assertEqual(st["hint_errors"], before["hint_errors"])
            mid = reader.stats()
            for p in files:     # another connection, as a DataLoader worker
                with reader.open(p) as f:
                    self.assertEqual(f.read(), read_plain(p), p)
            after = reader.stats()
            self.assertEqual(after["misses"] - mid["misses"], 0, "hinted files missed")
            self.assertEqual(after["prefetch_used"] - mid["prefetch_used"], 24)
            self.assertEqual(after["hits_dram"] - mid["hits_dram"], 24)
            self.assertEqual(after["hint_entries"], 0, "read entries left in the list")
        finally:
            reader.close()
            hinter.close()

    def test_clear_and_disconnect_drop_the_list(self):
        files = make_files("hint-clear", 8, seed=2)
        c = granary.Client(SOCKET)
        try:
            added = c.stats()["hint_entries_added"]
            c.hint(files)
            wait_stat(c, "hint_entries_added", added + 8)
            self.assertGreaterEqual(c.stats()["hint_entries"], 8)
            c.hint_clear()
            self.assertEqual(c.stats()["hint_entries"], 0)
            c.hint(iter(files))             # a generator is fine
            wait_stat(c, "hint_entries_added", added + 16)
            self.assertGreaterEqual(c.stats()["hint_entries"], 8)
        finally:
            c.close()
        probe = granary.Client(SOCKET)
        try:
            deadline = time.monotonic() + 5
            while probe.stats()["hint_entries"] and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual(probe.stats()["hint_entries"], 0, "list outlived its connection")
        finally:
            probe.close()

    def test_errors(self):
        with granary.Client(SOCKET) as c:
            with self.assertRaises(OSError) as cm:
                c.hint([""])
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            with self.assertRaises(ValueError):
                c.hint([(os.path.join(ROOT, "x"), -1, 0)])
            with self.assertRaises(ValueError):
                c.hint([os.path.join(ROOT, "x")], batch=0)
            # Unresolvable ranges are advice: skipped and counted, no error.
            before = c.stats()["hint_errors"]
            self.assertEqual(c.hint([os.path.join(ROOT, "no-such-file"), "/etc/passwd",
                                     "relative/outside/the/roots"]), 3)
            deadline = time.monotonic() + 5
            while c.stats()["hint_errors"] < before + 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual(c.stats()["hint_errors"], before + 3)
            # A relative path is taken from the working directory.
            cwd = os.getcwd()
            try:
                os.makedirs(os.path.join(ROOT, "relhint"), exist_ok=True)
                with open(os.path.join(ROOT, "relhint", "r.bin"), "wb") as f:
                    f.write(b"r" * 5000)
                os.chdir(ROOT)
                added = c.stats()["hint_entries_added"]
                self.assertEqual(c.hint(["relhint/r.bin", "./relhint/../relhint/r.bin"]), 2)
                deadline = time.monotonic() + 5
                while (c.stats()["hint_entries_added"] < added + 2
                       and time.monotonic() < deadline):
                    time.sleep(0.02)
                self.assertEqual(c.stats()["hint_entries_added"], added + 2)
                self.assertEqual(c.stats()["hint_errors"], before + 3)
            finally:
                os.chdir(cwd)
                c.hint_clear()
            self.assertEqual(c.hint([]), 0)
        c = granary.Client(SOCKET)
        c.close()
        with self.assertRaises(ValueError):
            c.hint([os.path.join(ROOT, "x")])


class _Recorder:
    """A stand-in Client that records what a HintingSampler sends."""

    def __init__(self):
        self.calls = []

    def hint_clear(self):
        self.calls.append(("clear",))

    def hint(self, items, batch=4096):
        items = list(items)
        self.calls.append(("hint", items))
        return len(items)


def shuffled_sampler(n, seed):
    """torch's RandomSampler with a seeded generator, else a plain reshuffling
    iterable (HintingSampler works without torch too)."""
    if HAVE_TORCH:
        import torch
        from torch.utils.data import RandomSampler
        g = torch.Generator()
        g.manual_seed(seed)
        return RandomSampler(range(n), generator=g)

    class Shuffled:
        def __init__(self):
            self.rnd = random.Random(seed)

        def __iter__(self):
            order = list(range(n))
            self.rnd.shuffle(order)
            return iter(order)

        def __len__(self):
            return n
    return Shuffled()


class Sampler(unittest.TestCase):
    def test_sends_exactly_each_epochs_order(self):
        files = make_files("sampler-order", 50, seed=3)
        ds = GranaryDataset(files, socket=SOCKET)
        rec = _Recorder()
        s = HintingSampler(shuffled_sampler(len(ds), seed=5), ds, client=rec)
        self.assertEqual(len(s), 50)
        orders = []
        for epoch in range(3):
            rec.calls.clear()
            got = list(s)
            orders.append(got)
            self.assertEqual(sorted(got), list(range(50)))
            self.assertEqual(got, s.last_order)
            self.assertEqual(rec.calls, [("clear",), ("hint", [files[i] for i in got])],
                             "epoch %d" % epoch)
            self.assertEqual(s.hinted, 50)
        self.assertNotEqual(orders[0], orders[1], "the wrapped sampler did not reshuffle")

    def test_hint_ranges_hook_and_batches(self):
        class Ranged:
            paths = ["/unused"] * 4

            def hint_ranges(self, i):
                return [("/data/shard", i * 100, 100), "/data/label%d" % i]

            def __len__(self):
                return 4
        rec = _Recorder()
        # A batch sampler's lists are flattened for the hints, yielded as they are.
        s = HintingSampler([[2, 0], [3, 1]], Ranged(), client=rec)
        self.assertEqual(list(s), [[2, 0], [3, 1]])
        self.assertEqual(rec.calls[1][1], [("/data/shard", 200, 100), "/data/label2",
                                           ("/data/shard", 0, 100), "/data/label0",
                                           ("/data/shard", 300, 100), "/data/label3",
                                           ("/data/shard", 100, 100), "/data/label1"])

    def test_hints_reach_the_daemon_per_epoch(self):
        files = make_files("sampler-daemon", 30, seed=4)
        ds = GranaryDataset(files, socket=SOCKET)
        s = HintingSampler(shuffled_sampler(len(ds), seed=6), ds, socket=SOCKET)
        probe = granary.Client(SOCKET)
        try:
            for epoch in range(2):
                before = probe.stats()
                order = list(iter(s))
                wait_stat(probe, "hint_entries_added", before["hint_entries_added"] + 30)
                st = wait_prefetch_idle(probe, 0)
                self.assertEqual(st["hint_entries_added"] - before["hint_entries_added"], 30)
                mid = probe.stats()
                for i in order:
                    self.assertEqual(ds[i], read_plain(files[i]))
                after = probe.stats()
                self.assertEqual(after["misses"] - mid["misses"], 0, "epoch %d" % epoch)
                if epoch == 0:
                    self.assertEqual(after["prefetch_used"] - mid["prefetch_used"], 30)
            s.close()
            self.assertEqual(probe.stats()["hint_entries"], 0)
        finally:
            ds.close()
            probe.close()

    def test_no_daemon_warns_and_goes_on(self):
        s = HintingSampler([1, 0], GranaryDataset(["/a", "/b"]),
                           socket=os.path.join(ROOT, "no-daemon.sock"))
        with self.assertWarns(RuntimeWarning):
            self.assertEqual(list(s), [1, 0])
        strict = HintingSampler([1, 0], GranaryDataset(["/a", "/b"]), strict=True,
                                socket=os.path.join(ROOT, "no-daemon.sock"))
        with self.assertRaises(OSError):
            list(strict)


class OpenAhead(unittest.TestCase):
    """Client.open_ahead and GranaryDataset.__getitems__ (what a DataLoader
    worker calls per batch): the files are opened ahead, every byte is
    the file's, nothing is left open, no hint reaches the daemon."""

    def test_batch_opened_ahead(self):
        files = make_files("ahead", 12, seed=5, base=9000)
        want = [read_plain(p) for p in files]
        probe = granary.Client(SOCKET)
        ds = GranaryDataset(files, socket=SOCKET)
        try:
            ds.__getitems__(list(range(12)))          # warm: replies then come in order
            ds.close()
            before = probe.stats()
            order = [7, 2, 9, 0, 11, 4]
            self.assertEqual(ds.__getitems__(order), [want[i] for i in order])
            c = ds._get_client()
            c.open_ahead([files[1], files[3], files[5]])
            with c.open(files[3], buffering=0) as f:  # files[1] skipped
                self.assertEqual(f.readall(), want[3])
            self.assertEqual(ds.__getitems__([5]), [want[5]])  # one: not ahead
            with self.assertRaises(OSError) as cm:
                c.open_ahead([files[0], ""])
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            ds.close()
            after = probe.stats()
            d = {k: after[k] - before[k] for k in ("lookahead_used", "lookahead_opens",
                                                    "hint_entries_added", "opens")}
            # The batch's 6, files[3] and files[5] (opened ahead after
            # files[3]) from look-aheads; files[1]'s passed over and closed.
            self.assertEqual(d["lookahead_used"], 8, d)
            self.assertEqual(d["lookahead_opens"], 9, d)
            self.assertEqual(d["hint_entries_added"], 0, d)
            self.assertEqual(after["handles_open"], 0)
        finally:
            ds.close()
            probe.close()


class IndexedDataset(GranaryDataset):
    """Samples as (index, bytes), so that the test sees which index came."""

    def __getitem__(self, index):
        return index, super().__getitem__(index)


@unittest.skipUnless(HAVE_TORCH, "torch not installed (Debian: python3-torch)")
class DataLoaderOverTheCache(unittest.TestCase):
    def test_four_workers_yield_exactly_the_dataset(self):
        import torch
        from torch.utils.data import DataLoader, RandomSampler
        files = make_files("loader", 160, seed=7, base=20000)
        want = [read_plain(p) for p in files]
        ds = IndexedDataset(files, socket=SOCKET)
        g = torch.Generator()
        g.manual_seed(11)
        sampler = HintingSampler(RandomSampler(ds, generator=g), ds, socket=SOCKET)
        # "4 workers on a 2-core machine" is the point of this test.
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        loader = DataLoader(ds, batch_size=8, num_workers=4, sampler=sampler, collate_fn=list)
        probe = granary.Client(SOCKET)
        try:
            for epoch in range(2):
                before = probe.stats()
                seen = []
                for batch in loader:
                    for i, data in batch:
                        self.assertEqual(data, want[i], "sample %d, epoch %d" % (i, epoch))
                        seen.append(i)
                self.assertEqual(sorted(seen), list(range(len(files))), "epoch %d" % epoch)
                self.assertEqual(seen, sampler.last_order, "epoch %d" % epoch)
                after = probe.stats()
                self.assertEqual(after["hint_entries_added"] - before["hint_entries_added"],
                                 len(files))
                # Epoch 1 read the source (hints and demand race); epoch 2 is
                # all cache.
                if epoch == 1:
                    self.assertEqual(after["misses"] - before["misses"], 0)
        finally:
            sampler.close()
            probe.close()


if __name__ == "__main__":
    unittest.main()
