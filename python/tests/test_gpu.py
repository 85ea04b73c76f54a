"""The GPU path from Python: Client.read_to_device / gpu_* and granary.torch's
read_tensor, DeviceCollate and DeviceLoader, against a running granaryd.

Run by tests/test_gpu.sh: GRANARY_SOCKET and GRANARY_TEST_ROOT as for
test_client.py, and GRANARY_LIBCUDA naming the CUDA stand-in
(build/tests/cuda/libcuda.so.1), whose "device memory" is host memory this
test allocates and reads back through the stand-in's own entry points.
What needs real CUDA tensors (torch.cuda) is skipped, with the reason, where
torch.cuda.is_available() is False; the DataLoader tests need torch.
"""
import ctypes
import errno
import os
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import granary                          # noqa: E402
from granary.torch import (GranaryDataset, DeviceCollate, DeviceLoader, SampleRef,  # noqa: E402
                           read_tensor, ref_collate, HAVE_TORCH)

ROOT = os.environ.get("GRANARY_TEST_ROOT", "")
SOCKET = os.environ.get("GRANARY_SOCKET", "")
STANDIN = os.environ.get("GRANARY_LIBCUDA", "")

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
except ImportError:
    HAVE_CUDA = False


def setUpModule():
    if not ROOT or not SOCKET:
        raise unittest.SkipTest("GRANARY_TEST_ROOT and GRANARY_SOCKET must be set "
                                "(run tests/test_gpu.sh)")


class StandIn:
    """The stand-in driver's entry points, for the test's own allocations:
    the same library (same path) libgranary loaded, so the same memory."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        gpa = self.lib.cuGetProcAddress_v2
        gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                        ctypes.c_uint64, ctypes.c_void_p]

        def fn(name, *args):
            p = ctypes.c_void_p()
            gpa(name.encode(), ctypes.byref(p), 12000, 0, None)
            assert p.value, name
            return ctypes.CFUNCTYPE(ctypes.c_int, *args)(p.value)

        vp, sz, u64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64
        self._init = fn("cuInit", ctypes.c_uint)
        self._retain = fn("cuDevicePrimaryCtxRetain", ctypes.POINTER(vp), ctypes.c_int)
        self._setcur = fn("cuCtxSetCurrent", vp)
        self._alloc = fn("cuMemAlloc", ctypes.POINTER(u64), sz)
        self._free = fn("cuMemFree", u64)
        self._dtoh = fn("cuMemcpyDtoH", vp, u64, sz)
        self._memset = fn("cuMemsetD8", u64, ctypes.c_ubyte, sz)
        self.lib.standin_counter.restype = ctypes.c_uint64
        self.lib.standin_counter.argtypes = [ctypes.c_char_p]
        assert self._init(0) == 0
        ctx = vp()
        assert self._retain(ctypes.byref(ctx), 0) == 0
        assert self._setcur(ctx) == 0

    def alloc(self, n, fill=0xAA):
        p = ctypes.c_uint64()
        assert self._alloc(ctypes.byref(p), max(1, n)) == 0
        assert self._memset(p.value, fill, max(1, n)) == 0
        return p.value

    def free(self, p):
        assert self._free(p) == 0

    def read(self, p, n):
        buf = ctypes.create_string_buffer(max(1, n))
        assert self._dtoh(buf, p, n) == 0
        return buf.raw[:n]

    def counter(self, name):
        return self.lib.standin_counter(name.encode())

    def allocator(self, keep):
        """allocate(n) -> (buffer id, address) for DeviceCollate."""
        def allocate(n):
            p = self.alloc(n)
            keep.append(p)
            return p, p
        return allocate


def make_file(name, size, seed):
    p = os.path.join(ROOT, name)
    with open(p, "wb") as f:
        f.write(random.Random(seed).randbytes(size))
    with open(p, "rb") as f:
        return p, f.read()


class NoDriver(unittest.TestCase):
    def test_no_driver(self):
        """Without libcuda the GPU calls fail with ENODEV and say why; the
        rest of the client works (a child process: the driver is loaded
        once per process)."""
        p, data = make_file("nodrv.bin", 5000, 1)
        code = (
            "import errno, sys\n"
            "sys.path.insert(0, %r)\n"
            "import granary\n"
            "c = granary.Client(%r)\n"
            "try:\n"
            "    c.gpu_info()\n"
            "    sys.exit('gpu_info worked')\n"
            "except OSError as e:\n"
            "    assert e.errno == errno.ENODEV and 'no CUDA driver' in e.strerror, e\n"
            "try:\n"
            "    c.read_to_device([(%r, 0, 100, 4096)])\n"
            "    sys.exit('read_to_device worked')\n"
            "except OSError as e:\n"
            "    assert e.errno == errno.ENODEV, e\n"
            "assert c.read_range(%r, 0, 10) == %r\n"
            "print('no-driver ok')\n" % (os.path.join(os.path.dirname(__file__), ".."), SOCKET, p,
                                         p, data[:10]))
        env = dict(os.environ, GRANARY_LIBCUDA="/nonexistent/libcuda.so.1")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no-driver ok", r.stdout)


@unittest.skipUnless(STANDIN, "GRANARY_LIBCUDA does not name the stand-in driver")
class OnStandIn(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sa = StandIn(STANDIN)
        cls.c = granary.Client(SOCKET)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_ranges_exact(self):
        p, data = make_file("dev.bin", 3 * 1048576 + 77, 2)
        dbuf = self.sa.alloc(len(data) + 4096)
        try:
            rnd = random.Random(5)
            ranges = [(p, 0, len(data), dbuf)]
            for _ in range(30):
                off = rnd.randrange(len(data))
                n = rnd.randrange(1, 300000)
                ranges.append((p, off, n, dbuf + off))
            ranges.append((p, len(data) - 7, 100, dbuf + len(data) - 7))   # past the end
            b = self.c.read_to_device(ranges, wait=False)
            b.wait()
            self.assertTrue(b.poll())
            self.assertEqual(b.done[0], len(data))
            self.assertEqual(b.done[-1], 7)
            back = self.sa.read(dbuf, len(data) + 4096)
            self.assertEqual(back[:len(data)], data)
            self.assertEqual(back[len(data):], b"\xaa" * 4096)
            st = self.c.gpu_stats()
            self.assertGreater(st["direct_bytes"], 0)
            self.assertEqual(st["staged_bytes"], 0)
            self.assertGreater(st["registered_segments"], 0)
            self.assertIn("stand-in", self.c.gpu_info())
            # with an open file, and fire-and-forget (no handle)
            with self.c.open(p) as f:
                b = self.c.read_to_device([(f, 10, 20, dbuf)], wait=None)
                self.assertEqual(b.done, [20])
                self.assertTrue(b.poll())
        finally:
            self.sa.free(dbuf)

    def test_batch_across_fork(self):
        """A child of fork may not wait for its parent's batch (the handle
        is of the parent's gr_client, which the child's first call frees):
        a clear ECHILD, and the parent's wait is unharmed."""
        p, data = make_file("fork.bin", 1048576, 6)
        dbuf = self.sa.alloc(len(data))
        try:
            os.environ["GR_STANDIN_DELAY_US"] = "20000"
            try:
                b = self.c.read_to_device([(p, 0, len(data), dbuf)], wait=False)
            finally:
                del os.environ["GR_STANDIN_DELAY_US"]
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    self.c.stats()          # the child's own connection
                    try:
                        b.wait()
                    except OSError as e:
                        code = 0 if e.errno == errno.ECHILD else 2
                    del b                   # collected: nothing happens
                finally:
                    os._exit(code)
            _, st = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(st), 0)
            b.wait()
            self.assertEqual(self.sa.read(dbuf, len(data)), data)
        finally:
            self.sa.free(dbuf)

    def test_bad_destination(self):
        p, _ = make_file("bad.bin", 1000, 3)
        host = ctypes.create_string_buffer(1000)
        with self.assertRaises(OSError) as cm:
            self.c.read_to_device([(p, 0, 100, ctypes.addressof(host))])
        self.assertEqual(cm.exception.errno, errno.EFAULT)
        self.assertIn("not device memory", cm.exception.strerror)
        with self.assertRaises(ValueError):
            self.c.read_to_device([(p, -1, 100, 4096)])

    def test_gpu_tier(self):
        c = granary.Client(SOCKET)
        try:
            p, data = make_file("tier.bin", 2 * 1048576, 4)
            c.gpu_set(granary.Client.GPU_TIER_BYTES, 16 << 20)
            dbuf = self.sa.alloc(len(data))
            c.read_to_device([(p, 0, len(data), dbuf)])
            c.read_to_device([(p, 0, len(data), dbuf)])
            st = c.gpu_stats()
            self.assertEqual(st["tier_misses"], 2)          # 1 MiB chunks
            self.assertEqual(st["tier_hits"], 2)
            self.assertEqual(self.sa.read(dbuf, len(data)), data)
            self.sa.free(dbuf)
        finally:
            c.close()
        self.assertGreaterEqual(self.c.stats()["gpu_tier_hits"], 2)

    def test_device_collate(self):
        d = os.path.join(ROOT, "coll")
        os.makedirs(d, exist_ok=True)
        want = {}
        for i in range(10):
            p, data = make_file(os.path.join("coll", "s%02d" % i), 1000 + 97 * i, 10 + i)
            want[p] = data
        ds = GranaryDataset(d, lazy=True, socket=SOCKET)
        self.assertIsInstance(ds[0], SampleRef)
        keep = []
        coll = DeviceCollate(allocate=self.sa.allocator(keep), stream=0, socket=SOCKET)
        out = coll([ds[i] for i in range(len(ds))])
        out.wait()
        self.assertEqual(len(out), 10)
        for i, ref in enumerate(out.refs):
            self.assertEqual(out.offsets[i] % 256, 0)
            self.assertEqual(self.sa.read(out.data + out.offsets[i], out.lengths[i]), want[ref.path])
        # the files stay open: the next batch opens nothing
        opens = self.c.stats()["opens"]
        out = coll([ds[i] for i in range(3, 7)])
        out.wait()
        self.assertEqual(self.c.stats()["opens"], opens)
        self.assertEqual(self.sa.read(out.data + out.offsets[1], out.lengths[1]),
                         want[out.refs[1].path])
        coll.close()
        for p in keep:
            self.sa.free(p)

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable (Debian: python3-torch)")
    def test_device_loader_workers(self):
        from torch.utils.data import DataLoader
        d = os.path.join(ROOT, "loader")
        os.makedirs(d, exist_ok=True)
        want = {}
        for i in range(24):
            p, data = make_file(os.path.join("loader", "s%02d" % i), 3000 + 131 * i, 40 + i)
            want[p] = data
        ds = GranaryDataset(d, lazy=True, socket=SOCKET)
        loader = DataLoader(ds, batch_size=5, num_workers=2, collate_fn=ref_collate)
        keep = []
        seen = 0
        coll = DeviceCollate(allocate=self.sa.allocator(keep), stream=0, socket=SOCKET)
        for batch in DeviceLoader(loader, collate=coll):
            batch.wait()
            for i, ref in enumerate(batch.refs):
                self.assertEqual(self.sa.read(batch.data + batch.offsets[i], batch.lengths[i]),
                                 want[ref.path])
                seen += 1
        self.assertEqual(seen, 24)
        for p in keep:
            self.sa.free(p)


class Tensors(unittest.TestCase):
    @unittest.skipUnless(HAVE_TORCH and not HAVE_CUDA, "only where torch has no CUDA")
    def test_needs_cuda(self):
        p, _ = make_file("t.bin", 100, 7)
        with self.assertRaises(RuntimeError) as cm:
            read_tensor(p)
        self.assertIn("needs CUDA", str(cm.exception))
        with self.assertRaises(RuntimeError):
            DeviceCollate()([(p, 0, 100)])

    @unittest.skipUnless(HAVE_CUDA, "torch.cuda.is_available() is False: CUDA tensors need a GPU "
                                    "(tests/gpu/run.sh checks the same path in C)")
    def test_cuda_tensor(self):
        p, data = make_file("cuda.bin", 5 * 1048576 + 3, 8)
        c = granary.Client(SOCKET)
        try:
            t = read_tensor(p, client=c)
            self.assertEqual(bytes(t.cpu().numpy()), data)
            t = read_tensor(p, 1000, 5000, client=c)
            self.assertEqual(bytes(t.cpu().numpy()), data[1000:6000])
            coll = DeviceCollate(client=c)
            out = coll([(p, 0, 10), (p, 100, 1000)])
            out.wait()
            self.assertEqual(bytes(out.sample(1).cpu().numpy()), data[100:1100])
        finally:
            c.close()


if __name__ == "__main__":
    unittest.main()
