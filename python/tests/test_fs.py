"""granary.fs (stat, scandir, listdir, walk) against a real granaryd, checked
against the os module's own answers for the same tree.

Needs GRANARY_SOCKET (a running daemon) and GRANARY_TEST_ROOT (a directory
under its roots); runs as root (which the daemon judges itself even with
access_check = fd) and registers a dataset with build/granaryctl.
"""
import os
import subprocess
import tempfile
import time
import unittest

import granary
import granary.fs as gfs

SOCK = os.environ.get("GRANARY_SOCKET")
ROOT = os.environ.get("GRANARY_TEST_ROOT")
CTL = os.path.join(os.path.dirname(__file__), "..", "..", "build", "granaryctl")


def ctl(*args):
    return subprocess.run([CTL, "-s", SOCK] + list(args), check=True, capture_output=True,
                          text=True).stdout


@unittest.skipUnless(SOCK and ROOT, "needs GRANARY_SOCKET and GRANARY_TEST_ROOT")
class TestFs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.top = tempfile.mkdtemp(prefix="fsds-", dir=ROOT)
        for d in ("a", "a/b", "c", "big"):
            os.makedirs(os.path.join(cls.top, d))
        for i, p in enumerate(("a/x", "a/b/y", "c/z", "top")):
            with open(os.path.join(cls.top, p), "wb") as f:
                f.write(b"%d" % i * (i + 1))
        for i in range(5000):
            open(os.path.join(cls.top, "big", "e%05d" % i), "wb").close()
        os.symlink("x", os.path.join(cls.top, "a", "lx"))          # to a file
        os.symlink("../c", os.path.join(cls.top, "a", "lc"))       # to a directory
        os.symlink("nowhere", os.path.join(cls.top, "dangling"))
        out = ctl("dataset", "add", cls.top)
        cls.id = out.split()[1]
        for _ in range(500):
            if ": ready," in ctl("dataset", "list"):
                break
            time.sleep(0.02)
        else:
            raise RuntimeError("the dataset's scan did not finish")
        cls.c = granary.Client(SOCK)

    @classmethod
    def tearDownClass(cls):
        ctl("dataset", "remove", cls.id)
        cls.c.close()

    def lookups(self):
        return self.c.stats()["dataset_lookups"]

    def test_walk_is_os_walk(self):
        mine = sorted((d, sorted(ds), sorted(fs)) for d, ds, fs in gfs.walk(self.top, client=self.c))
        theirs = sorted((d, sorted(ds), sorted(fs)) for d, ds, fs in os.walk(self.top))
        self.assertEqual(mine, theirs)

    def test_links_are_the_file_systems(self):
        # The manifest names links but never follows them: stat through one
        # is the file system's answer, never "not there".
        for p in ("a/lx", "a/lc", "a/lc/z"):
            full = os.path.join(self.top, p)
            self.assertEqual(gfs.stat(full, self.c).st_ino, os.stat(full).st_ino, p)
        with self.assertRaises(FileNotFoundError):
            gfs.stat(os.path.join(self.top, "dangling"), self.c)
        names = {e.name: e for e in gfs.scandir(os.path.join(self.top, "a"), self.c)}
        self.assertTrue(names["lx"].is_symlink() and names["lx"].is_file())
        self.assertTrue(names["lc"].is_symlink() and names["lc"].is_dir())

    def test_stat_is_os_stat(self):
        for p in ("a/x", "a/b/y", "a", "", "big/e04999"):
            full = os.path.join(self.top, p) if p else self.top
            a, b = gfs.stat(full, self.c), os.stat(full)
            for f in ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
                      "st_mtime_ns"):
                self.assertEqual(getattr(a, f), getattr(b, f), "%s of %s" % (f, full))

    def test_from_the_manifest(self):
        n0 = self.lookups()
        gfs.stat(os.path.join(self.top, "c", "z"), self.c)
        self.assertGreater(self.lookups(), n0, "the stat was not the manifest's")

    def test_scandir_stats_come_with_the_listing(self):
        ents = gfs.scandir(os.path.join(self.top, "a"), self.c)
        self.assertEqual(sorted(e.name for e in ents), ["b", "lc", "lx", "x"])
        n0 = self.lookups()
        for e in ents:
            if not e.is_symlink():          # a link's stat() follows it: asked anew
                self.assertEqual(e.stat().st_ino, os.stat(e.path).st_ino)
            self.assertEqual(e.is_dir(), os.path.isdir(e.path))
        self.assertEqual(self.lookups(), n0, "DirEntry.stat() asked the daemon again")

    def test_listdir_pages(self):
        big = os.path.join(self.top, "big")
        self.assertEqual(gfs.listdir(big, self.c), sorted(os.listdir(big)))

    def test_errors(self):
        with self.assertRaises(FileNotFoundError):
            gfs.stat(os.path.join(self.top, "a", "nope"), self.c)
        with self.assertRaises(NotADirectoryError):
            gfs.scandir(os.path.join(self.top, "top"), self.c)
        with self.assertRaises(OSError):
            gfs.stat("/etc/passwd-not-under-the-roots", self.c)

    def test_dataset_listing_from_the_manifest(self):
        from granary.torch import GranaryDataset
        n0 = self.lookups()
        ds = GranaryDataset(self.top, socket=SOCK)
        want = sorted(os.path.join(d, n) for d, _, ns in os.walk(self.top) for n in ns
                      if os.path.isfile(os.path.join(d, n)))
        self.assertEqual(ds.files, want)
        # one READDIR per directory (5 of them), each a manifest lookup, and
        # no stat per file (those would be 5004 more)
        self.assertGreaterEqual(self.lookups() - n0, 5)
        self.assertLess(self.lookups() - n0, 50)

    def test_outside_a_dataset_asks_the_file_system(self):
        other = tempfile.mkdtemp(prefix="fsnods-", dir=ROOT)
        try:
            p = os.path.join(other, "f")
            with open(p, "wb") as f:
                f.write(b"abc")
            self.assertEqual(gfs.stat(p, self.c).st_ino, os.stat(p).st_ino)
            self.assertEqual(gfs.listdir(other, self.c), ["f"])
        finally:
            os.unlink(os.path.join(other, "f"))
            os.rmdir(other)


if __name__ == "__main__":
    unittest.main()
