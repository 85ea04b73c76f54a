"""Tests of the granary Python package against a running granaryd.

Run by tests/test_python.sh, which starts the daemon and sets
GRANARY_SOCKET (the daemon's socket) and GRANARY_TEST_ROOT (a directory
under the daemon's [source] roots, empty, for these tests' files).  The
daemon's chunk size is 1 MiB there, so the 5 MB file spans several chunks.
"""
import array
import errno
import io
import os
import pickle
import random
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import granary                          # noqa: E402
from granary.torch import GranaryDataset, HAVE_TORCH   # noqa: E402

ROOT = os.environ.get("GRANARY_TEST_ROOT", "")
SOCKET = os.environ.get("GRANARY_SOCKET", "")


def setUpModule():
    if not ROOT or not SOCKET:
        raise unittest.SkipTest("GRANARY_TEST_ROOT and GRANARY_SOCKET must be set "
                                "(run tests/test_python.sh)")
    rnd = random.Random(42)
    files = {
        "big.bin": rnd.randbytes(5_000_000),
        "small.txt": b"hello granary\nsecond line\n",
        "empty": b"",
        "one": b"x",
    }
    for name, data in files.items():
        with open(os.path.join(ROOT, name), "wb") as f:
            f.write(data)
    os.makedirs(os.path.join(ROOT, "ds", "b"), exist_ok=True)
    for i in range(12):
        sub = "a" if i % 2 else "b"
        os.makedirs(os.path.join(ROOT, "ds", sub), exist_ok=True)
        with open(os.path.join(ROOT, "ds", sub, "s%02d.bin" % i), "wb") as f:
            f.write(rnd.randbytes(1000 + 997 * i))


def path(name):
    return os.path.join(ROOT, name)


def read_file(p):
    with open(p, "rb") as f:
        return f.read()


def plain(name):
    return read_file(path(name))


class FileSemantics(unittest.TestCase):
    """The raw GranaryFile (buffering=0) against Python's own file object on
    the same bytes."""

    def setUp(self):
        self.client = granary.Client(SOCKET)

    def tearDown(self):
        self.client.close()

    def test_read_all(self):
        for name in ("big.bin", "small.txt", "empty", "one"):
            with self.client.open(path(name), buffering=0) as f:
                self.assertEqual(f.read(), plain(name), name)
            with self.client.open(path(name), buffering=0) as f:
                self.assertEqual(f.readall(), plain(name), name)

    def test_read_n_at_random_offsets(self):
        rnd = random.Random(7)
        size = os.path.getsize(path("big.bin"))
        with self.client.open(path("big.bin"), buffering=0) as g, open(path("big.bin"), "rb", buffering=0) as p:
            for _ in range(300):
                off = rnd.randrange(0, size + 100)
                n = rnd.choice([0, 1, 4095, 4096, 65536, 1 << 20, 3 << 20, rnd.randrange(1, 2 << 20)])
                self.assertEqual(g.seek(off), p.seek(off))
                self.assertEqual(g.read(n), p.read(n), (off, n))
                self.assertEqual(g.tell(), p.tell())

    def test_sequential_reads_cover_the_file(self):
        with self.client.open(path("big.bin"), buffering=0) as g, open(path("big.bin"), "rb", buffering=0) as p:
            while True:
                a, b = g.read(777_777), p.read(777_777)
                self.assertEqual(a, b)
                if not a:
                    break

    def test_seek_tell(self):
        size = os.path.getsize(path("big.bin"))
        with self.client.open(path("big.bin"), buffering=0) as g, open(path("big.bin"), "rb", buffering=0) as p:
            for off, whence in [(10, os.SEEK_SET), (100, os.SEEK_CUR), (-50, os.SEEK_CUR),
                                (0, os.SEEK_END), (-4096, os.SEEK_END), (5, os.SEEK_END),
                                (0, os.SEEK_SET), (size - 1, os.SEEK_SET)]:
                self.assertEqual(g.seek(off, whence), p.seek(off, whence), (off, whence))
                self.assertEqual(g.tell(), p.tell())
                self.assertEqual(g.read(10), p.read(10))
            with self.assertRaises(OSError) as cm:
                g.seek(-1, os.SEEK_SET)
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            with self.assertRaises(ValueError):
                g.seek(0, 7)

    def test_readinto_memoryview_without_touching_neighbours(self):
        data = plain("big.bin")
        with self.client.open(path("big.bin"), buffering=0) as g:
            buf = bytearray(b"\xAA" * (3 << 20))
            mv = memoryview(buf)
            g.seek(123_456)
            n = g.readinto(mv[1000:1000 + (2 << 20)])
            self.assertEqual(n, 2 << 20)
            self.assertEqual(bytes(buf[1000:1000 + n]), data[123_456:123_456 + n])
            self.assertEqual(buf[:1000], b"\xAA" * 1000)
            self.assertEqual(buf[1000 + n:], b"\xAA" * (len(buf) - 1000 - n))
            self.assertEqual(g.tell(), 123_456 + n)
            # bytearray, array of ints (cast to bytes), and the end of file
            ba = bytearray(10)
            self.assertEqual(g.readinto(ba), 10)
            self.assertEqual(bytes(ba), data[123_456 + n:123_456 + n + 10])
            arr = array.array("i", [0] * 4)
            g.seek(len(data) - 8)
            self.assertEqual(g.readinto(arr), 8)
            self.assertEqual(arr.tobytes()[:8], data[-8:])
            with self.assertRaises(TypeError):
                g.readinto(b"immutable")
            mv.release()
            buf.append(1)               # readinto released its export of the buffer

    def test_read_past_eof(self):
        size = os.path.getsize(path("big.bin"))
        with self.client.open(path("big.bin"), buffering=0) as g:
            g.seek(size + 10)
            self.assertEqual(g.read(5), b"")
            self.assertEqual(g.read(), b"")
            self.assertEqual(g.readinto(bytearray(5)), 0)
            g.seek(size - 3)
            self.assertEqual(g.read(100), plain("big.bin")[-3:])
            self.assertEqual(g.read(100), b"")
        with self.client.open(path("empty"), buffering=0) as g:
            self.assertEqual(g.size, 0)
            self.assertEqual(g.read(10), b"")

    def test_pread_does_not_move(self):
        data = plain("big.bin")
        with self.client.open(path("big.bin"), buffering=0) as g:
            g.seek(5)
            self.assertEqual(g.pread(100, 2_000_000), data[2_000_000:2_000_100])
            buf = bytearray(64)
            self.assertEqual(g.preadinto(buf, 4_999_990), 10)
            self.assertEqual(bytes(buf[:10]), data[-10:])
            self.assertEqual(g.tell(), 5)

    def test_flags_and_attributes(self):
        with self.client.open(path("big.bin"), buffering=0) as g:
            self.assertTrue(g.readable())
            self.assertTrue(g.seekable())
            self.assertFalse(g.writable())
            self.assertIsInstance(g, io.RawIOBase)
            self.assertEqual(g.size, os.path.getsize(path("big.bin")))
            st, real = g.stat(), os.stat(path("big.bin"))
            self.assertEqual((st.st_size, st.st_ino, st.st_dev, st.st_mode),
                             (real.st_size, real.st_ino, real.st_dev, real.st_mode))
            self.assertEqual(st.st_mtime_ns, real.st_mtime_ns)
            self.assertEqual(g.name, path("big.bin"))
            with self.assertRaises(io.UnsupportedOperation):
                g.fileno()
            with self.assertRaises((io.UnsupportedOperation, OSError)):
                g.write(b"x")
        self.assertTrue(g.closed)
        with self.assertRaises(ValueError):
            g.read(1)
        g.close()                       # idempotent

    def test_buffered_and_text_wrappers(self):
        with io.BufferedReader(self.client.open(path("small.txt"), buffering=0)) as b:
            self.assertEqual(b.readline(), b"hello granary\n")
            self.assertEqual(b.read(), b"second line\n")
        with io.TextIOWrapper(io.BufferedReader(self.client.open(path("small.txt"), buffering=0))) as t:
            self.assertEqual(t.readlines(), ["hello granary\n", "second line\n"])

    def test_read_range(self):
        data = plain("big.bin")
        for off, n in [(0, 10), (1 << 20, 1 << 20), (len(data) - 5, 100), (len(data), 10),
                       (len(data) + 10, 10), (3, 0)]:
            self.assertEqual(self.client.read_range(path("big.bin"), off, n), data[off:off + n])
        self.assertEqual(granary.read_range(path("small.txt"), 6, 7), b"granary")
        with self.assertRaises(ValueError):
            self.client.read_range(path("big.bin"), -1, 10)

    def test_stats(self):
        s = self.client.stats()
        for k in ("hits_dram", "hits_nvme", "misses", "bytes_served", "source_bytes_read",
                  "dram_used_bytes", "dram_capacity_bytes"):
            self.assertIn(k, s)
            self.assertIsInstance(s[k], int)
        before = s["bytes_served"]
        self.client.read_range(path("big.bin"), 0, 100_000)
        self.assertGreaterEqual(self.client.stats()["bytes_served"], before + 100_000)
        self.assertIn("misses", granary.stats())

    def test_threads_share_a_client(self):
        data = plain("big.bin")
        errors = []

        def work(seed):
            rnd = random.Random(seed)
            try:
                with self.client.open(path("big.bin"), buffering=0) as g:
                    for _ in range(30):
                        off, n = rnd.randrange(len(data)), rnd.randrange(1, 300_000)
                        if g.pread(n, off) != data[off:off + n]:
                            errors.append((off, n))
            except Exception as e:      # noqa: BLE001 - reported below
                errors.append(e)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])


class CountRaw:
    """Counts GranaryFile.readinto calls (each one a request to the daemon)
    while in effect."""

    def __enter__(self):
        self.n = 0
        self.orig = granary.GranaryFile.readinto

        def counted(f, b):
            self.n += 1
            return self.orig(f, b)
        granary.GranaryFile.readinto = counted
        return self

    def __exit__(self, *exc):
        granary.GranaryFile.readinto = self.orig


class Buffered(unittest.TestCase):
    """granary.open() is buffered by default, like open(); buffering=0 is
    the raw file.  Real readers (PIL, tarfile) make few requests through it."""

    def setUp(self):
        self.client = granary.Client(SOCKET)

    def tearDown(self):
        self.client.close()

    def test_default_is_buffered_like_open(self):
        data = plain("big.bin")
        rnd = random.Random(7)
        with granary.open(path("big.bin")) as g, open(path("big.bin"), "rb") as p:
            self.assertIsInstance(g, io.BufferedReader)
            self.assertIsInstance(g.raw, granary.GranaryFile)
            self.assertEqual(g.size, len(data))
            self.assertEqual(g.stat().st_size, len(data))
            for _ in range(300):
                op = rnd.randrange(5)
                if op == 0:
                    n = rnd.choice([1, 7, 512, 4096, 200_000])
                    self.assertEqual(g.read(n), p.read(n))
                elif op == 1:
                    off = rnd.randrange(len(data) + 10)
                    self.assertEqual(g.seek(off), p.seek(off))
                elif op == 2:
                    self.assertEqual(g.readline(), p.readline())
                elif op == 3:
                    self.assertEqual(g.pread(100, 1234), data[1234:1334])
                else:
                    self.assertEqual(g.tell(), p.tell())
            self.assertEqual(g.tell(), p.tell())
        self.assertTrue(g.closed and g.raw.closed)
        with self.client.open(path("big.bin"), buffering=4096) as g:
            self.assertEqual(g.read(10), data[:10])
        with self.client.open(path("big.bin"), buffering=0) as g:
            self.assertIsInstance(g, granary.GranaryFile)

    def test_text_mode_and_bad_arguments(self):
        with self.client.open(path("small.txt"), "r", encoding="ascii") as t:
            self.assertEqual(t.readlines(), ["hello granary\n", "second line\n"])
        for kw in ({"mode": "wb"}, {"mode": "r+b"}, {"mode": "ab"}, {"mode": "r", "buffering": 0},
                   {"buffering": -2}, {"mode": "rb", "encoding": "utf-8"}):
            with self.assertRaises(ValueError, msg=repr(kw)):
                self.client.open(path("small.txt"), **kw)

    def _pil_reads(self, buffering):
        from PIL import Image
        with CountRaw() as cnt, self.client.open(path("img.jpg"), buffering=buffering) as f:
            im = Image.open(f)
            im.load()
            return cnt.n, im.tobytes()

    def test_pil_few_requests(self):
        try:
            from PIL import Image
        except ImportError:
            self.skipTest("PIL not installed (Debian: python3-pil)")
        rnd = random.Random(3)
        im = Image.frombytes("RGB", (160, 120), rnd.randbytes(160 * 120 * 3))
        im.save(path("img.jpg"), quality=90)
        want = Image.open(path("img.jpg"))
        want.load()
        raw_n, raw_px = self._pil_reads(0)
        buf_n, buf_px = self._pil_reads(-1)
        self.assertEqual(raw_px, want.tobytes())
        self.assertEqual(buf_px, want.tobytes())
        # The whole file (~30 KB) fits the buffer: one read, one at EOF at most.
        self.assertLessEqual(buf_n, 3, "buffered PIL decode made %d requests" % buf_n)
        self.assertGreater(raw_n, 3 * buf_n, "raw %d, buffered %d" % (raw_n, buf_n))
        print("\n    PIL requests per image: raw %d, buffered %d" % (raw_n, buf_n), file=sys.stderr)

    def test_tarfile_few_requests(self):
        import tarfile
        rnd = random.Random(5)
        members = {"m%03d" % i: rnd.randbytes(rnd.randrange(100, 5000)) for i in range(60)}
        with tarfile.open(path("shard.tar"), "w") as t:
            for name, body in members.items():
                ti = tarfile.TarInfo(name)
                ti.size = len(body)
                t.addfile(ti, io.BytesIO(body))
        counts = {}
        for buffering in (0, -1):
            with CountRaw() as cnt, self.client.open(path("shard.tar"), buffering=buffering) as f:
                got = {}
                with tarfile.open(fileobj=f, mode="r:") as t:
                    for m in t:
                        got[m.name] = t.extractfile(m).read()
                self.assertEqual(got, members)
                counts[buffering] = cnt.n
        size = os.path.getsize(path("shard.tar"))
        self.assertLessEqual(counts[-1], size // granary.DEFAULT_BUFFER_SIZE + 4, counts)
        self.assertGreater(counts[0], 10 * counts[-1], counts)
        print("\n    tarfile requests per %d-member shard: raw %d, buffered %d"
              % (len(members), counts[0], counts[-1]), file=sys.stderr)


class Errors(unittest.TestCase):
    def test_missing_file(self):
        with self.assertRaises(FileNotFoundError) as cm:
            granary.open(path("no-such-file"))
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertEqual(cm.exception.filename, path("no-such-file"))
        self.assertTrue(cm.exception.strerror)

    def test_outside_roots(self):
        with self.assertRaises(PermissionError) as cm:
            granary.open("/etc/passwd")
        self.assertEqual(cm.exception.errno, errno.EACCES)
        self.assertIn("outside the source roots", cm.exception.strerror)

    def test_directory_and_relative_path(self):
        with self.assertRaises(OSError):
            granary.open(ROOT)
        with self.assertRaises(PermissionError) as cm:      # from the cwd: outside the roots
            granary.open("relative/path")
        self.assertIn(os.path.join(os.getcwd(), "relative/path"), str(cm.exception))
        cwd = os.getcwd()
        try:                            # relative: from the working directory
            os.chdir(os.path.join(ROOT, "ds", "a"))
            with granary.open("../../small.txt") as f:
                self.assertEqual(f.read(), plain("small.txt"))
            with granary.open("./s01.bin", buffering=0) as f:
                self.assertEqual(f.read(), read_file(path("ds/a/s01.bin")))
        finally:
            os.chdir(cwd)

    def test_no_daemon(self):
        sock = os.path.join(ROOT, "no-such-socket")
        with self.assertRaises(OSError) as cm:
            granary.Client(sock)
        self.assertIn(cm.exception.errno, (errno.ENOENT, errno.ECONNREFUSED))
        self.assertIn(sock, str(cm.exception))          # which socket was tried
        self.assertIn("granaryd", str(cm.exception))

    def test_closed_client(self):
        c = granary.Client(SOCKET)
        f = c.open(path("small.txt"))
        with c:
            pass
        self.assertTrue(f.closed)       # closed with its client
        with self.assertRaises(ValueError):
            c.stats()
        c.close()


class ForkSafety(unittest.TestCase):
    def _in_child(self, fn):
        """Run fn() in a forked child; its exit status says whether it passed."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if fn() else 3
            except BaseException:       # noqa: BLE001 - the child must not return
                import traceback
                traceback.print_exc()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    def test_default_client_across_fork(self):
        data = plain("big.bin")
        with granary.open(path("big.bin")) as f:            # parent connects first
            self.assertEqual(f.read(1000), data[:1000])
            inherited = f

            def child():
                with granary.open(path("big.bin")) as g:    # default client, reconnected
                    ok = g.read() == data
                # the inherited file object reopens on the child's connection
                ok = ok and inherited.read(1000) == data[1000:2000]
                return ok and granary.stats()["bytes_served"] > 0

            self.assertEqual(self._in_child(child), 0)
            # the parent's connection and file are untouched
            self.assertEqual(f.read(1000), data[1000:2000])
        self.assertEqual(granary.read_range(path("big.bin"), 10, 5), data[10:15])

    def test_client_object_across_fork(self):
        c = granary.Client(SOCKET)
        c.stats()
        self.assertEqual(self._in_child(lambda: c.read_range(path("one"), 0, 1) == b"x"), 0)
        self.assertEqual(c.read_range(path("small.txt"), 0, 5), b"hello")
        c.close()


class Dataset(unittest.TestCase):
    def test_dataset_without_loader(self):
        ds = GranaryDataset(path("ds"))
        names = sorted(os.path.join(d, n) for d, _, ns in os.walk(path("ds")) for n in ns)
        self.assertEqual(ds.files, names)
        self.assertEqual(len(ds), 12)
        for i in range(len(ds)):
            self.assertEqual(ds[i], read_file(ds.files[i]))
        tds = GranaryDataset(ds.files[:3], transform=len)
        self.assertEqual([tds[i] for i in range(3)], [os.path.getsize(p) for p in ds.files[:3]])
        clone = pickle.loads(pickle.dumps(ds))   # the connection is not pickled
        self.assertEqual(clone[0], ds[0])
        with self.assertRaises(NotADirectoryError):
            GranaryDataset(path("one"))
        ds.close()

    def test_dataset_in_forked_worker(self):
        ds = GranaryDataset(path("ds"))
        first = ds[0]
        pid = os.fork()
        if pid == 0:
            os._exit(0 if ds[1] == read_file(ds.files[1]) and ds[0] == first else 1)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(ds[2], read_file(ds.files[2]))

    @unittest.skipUnless(HAVE_TORCH, "torch not installed")
    def test_torch_dataloader_workers(self):
        from torch.utils.data import DataLoader
        ds = GranaryDataset(path("ds"))
        got = []
        for batch in DataLoader(ds, batch_size=3, num_workers=2, collate_fn=list):
            got.extend(batch)
        want = [read_file(p) for p in ds.files]
        self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main(verbosity=2)
