"""granary.ckpt against a real granaryd: save (pickle, or torch.save where
torch is importable) publishes byte-for-byte what the saver wrote, status
follows it, a destination under no root is refused.

Needs GRANARY_SOCKET (a running daemon with [checkpoint] on) and
GRANARY_TEST_ROOT (a directory under its roots).
"""
import io
import os
import pickle
import unittest

import granary
import granary.ckpt as gck

SOCK = os.environ.get("GRANARY_SOCKET")
ROOT = os.environ.get("GRANARY_TEST_ROOT")


@unittest.skipUnless(SOCK and ROOT, "needs GRANARY_SOCKET and GRANARY_TEST_ROOT")
class TestCkpt(unittest.TestCase):
    def setUp(self):
        self.c = granary.Client(SOCK)

    def tearDown(self):
        self.c.close()

    def test_save_publishes_what_the_saver_wrote(self):
        obj = {"step": 1000, "weights": list(range(100000)), "blob": os.urandom(300000)}
        dest = os.path.join(ROOT, "py-ckpt.pkl")
        cid = gck.save(obj, dest, client=self.c, wait=True, timeout=60)
        with open(dest, "rb") as f:
            data = f.read()
        want = io.BytesIO()
        pickle.dump(obj, want, protocol=pickle.HIGHEST_PROTOCOL)
        saved = data if not self._torch() else None
        if saved is not None:
            self.assertEqual(saved, want.getvalue())
            self.assertEqual(pickle.loads(data), obj)
        st = gck.status(cid, client=self.c)
        self.assertEqual(st["state"], "published")
        self.assertEqual(st["size"], len(data))
        self.assertEqual(st["dest"], dest)

    def test_custom_saver_and_wait_local(self):
        dest = os.path.join(ROOT, "py-raw.bin")
        payload = os.urandom(1 << 20)
        cid = gck.save(None, dest, client=self.c, saver=lambda o, f: f.write(payload))
        gck.wait(cid, "local", client=self.c, timeout=10)
        gck.wait(cid, client=self.c, timeout=60)
        with open(dest, "rb") as f:
            self.assertEqual(f.read(), payload)

    def test_early_save_reads_back_before_local(self):
        # Acknowledged while the daemon holds only the memfd; granary.open
        # of dest (through the daemon) sees the new bytes at once, whatever
        # the state by then, and it publishes.
        dest = os.path.join(ROOT, "py-early.bin")
        payload = os.urandom(3 << 20)
        cid = gck.save(None, dest, client=self.c, saver=lambda o, f: f.write(payload), early=True)
        self.assertIn(gck.status(cid, client=self.c)["state"], gck.STATES[:4])
        with self.c.open(dest) as f:
            self.assertEqual(f.read(), payload)
        gck.wait(cid, "local", client=self.c, timeout=30)
        gck.wait(cid, client=self.c, timeout=60)
        with open(dest, "rb") as f:
            self.assertEqual(f.read(), payload)
        shards = {"s0": {"a": 1}, "s1": {"b": 2}}
        sid = gck.save_set(shards, os.path.join(ROOT, "py-early-set"), client=self.c,
                           early=True, wait=True, timeout=60)
        self.assertEqual(gck.status(sid, client=self.c)["state"], "published")

    def test_save_set_publishes_every_shard_together(self):
        shards = {"rank%d.pkl" % r: {"rank": r, "w": os.urandom(50000 + r)} for r in range(4)}
        dest = os.path.join(ROOT, "py-set")
        cid = gck.save_set(shards, dest, client=self.c, wait=True, timeout=60)
        self.assertTrue(os.path.islink(dest))
        self.assertEqual(os.readlink(dest), "py-set.granary-gen-%d" % cid)
        d = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)    # resolved once
        try:
            names = sorted(os.listdir(d))
            self.assertEqual(names, sorted(list(shards) + ["MANIFEST"]))
            if not self._torch():
                for name, obj in shards.items():
                    with open(os.open(name, os.O_RDONLY, dir_fd=d), "rb") as f:
                        self.assertEqual(pickle.load(f), obj)
        finally:
            os.close(d)
        self.assertEqual(gck.status(cid, client=self.c)["state"], "published")
        with self.assertRaises(OSError):
            gck.save_set({"a/b": 1}, dest, client=self.c)

    def test_refused_outside_the_roots(self):
        with self.assertRaises(PermissionError):
            gck.save({"x": 1}, "/granary-no-root/ckpt.pkl", client=self.c)

    def test_unknown_id(self):
        with self.assertRaises(FileNotFoundError):
            gck.status(987654321, client=self.c)

    @staticmethod
    def _torch():
        try:
            import torch  # noqa: F401
            return True
        except ImportError:
            return False


if __name__ == "__main__":
    unittest.main()
