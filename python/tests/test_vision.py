"""granary.torch against torchvision, with a running granaryd.

Run by tests/test_python.sh (GRANARY_SOCKET, GRANARY_TEST_ROOT as for
test_client.py).  GranaryImageFolder must give what
torchvision.datasets.ImageFolder gives (classes, class_to_idx, targets,
the same tensors and labels through a DataLoader with workers), reading
through the daemon; HintingSampler must hint a torchvision ImageFolder
every epoch, and go on with a warning over datasets it cannot hint.
Needs torch, torchvision and PIL (Debian: python3-torch,
python3-torchvision, python3-pil); skipped without them.
"""
import os
import random
import sys
import time
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import granary                          # noqa: E402
from granary.torch import GranaryImageFolder, HintingSampler, HAVE_TORCH   # noqa: E402

ROOT = os.environ.get("GRANARY_TEST_ROOT", "")
SOCKET = os.environ.get("GRANARY_SOCKET", "")
try:
    import torch
    from torch.utils.data import DataLoader, RandomSampler, SequentialSampler
    import torchvision
    from torchvision import transforms
    from PIL import Image
    HAVE_VISION = HAVE_TORCH
except ImportError:
    HAVE_VISION = False

TREE = os.path.join(ROOT, "imgfolder")
CLASSES = ["cat", "dog", "zebra"]


def setUpModule():
    if not ROOT or not SOCKET:
        raise unittest.SkipTest("GRANARY_TEST_ROOT and GRANARY_SOCKET must be set "
                                "(run tests/test_python.sh)")
    if not HAVE_VISION:
        raise unittest.SkipTest("torch, torchvision or PIL missing (Debian: python3-torch "
                                "python3-torchvision python3-pil)")
    rnd = random.Random(11)
    n = 0
    for ci, cls in enumerate(CLASSES):
        for j in range(5 + ci):
            sub = os.path.join(TREE, cls, "nested") if j % 3 == 2 else os.path.join(TREE, cls)
            os.makedirs(sub, exist_ok=True)
            w, h = rnd.randrange(20, 90), rnd.randrange(20, 90)
            mode = "RGB" if j % 2 else "L"
            im = Image.frombytes(mode, (w, h), rnd.randbytes(w * h * len(mode)))
            ext = [".jpg", ".png", ".JPEG"][j % 3]
            im.save(os.path.join(sub, "img%02d%s" % (j, ext)),
                    format="JPEG" if ext.lower() != ".png" else "PNG")
            n += 1
        with open(os.path.join(TREE, cls, "notes.txt"), "w") as f:   # not an image
            f.write("skip me\n")


def tree_bytes():
    return sum(os.path.getsize(p) for p, _ in torchvision.datasets.ImageFolder(TREE).samples)


def tf():
    return transforms.Compose([transforms.Resize((24, 24)), transforms.PILToTensor()])


class ImageFolderCompat(unittest.TestCase):
    def test_same_attributes_as_torchvision(self):
        tv = torchvision.datasets.ImageFolder(TREE)
        gr = GranaryImageFolder(TREE, socket=SOCKET)
        self.assertEqual(gr.classes, tv.classes)
        self.assertEqual(gr.classes, CLASSES)
        self.assertEqual(gr.class_to_idx, tv.class_to_idx)
        self.assertEqual(gr.targets, tv.targets)
        self.assertEqual(gr.samples, [(os.path.abspath(p), t) for p, t in tv.samples])
        self.assertEqual(gr.imgs, gr.samples)
        self.assertEqual(len(gr), len(tv))
        self.assertTrue(callable(gr.loader))
        self.assertFalse(any(p.endswith(".txt") for p, _ in gr.samples))
        img, label = gr[0]
        want, wlabel = tv[0]
        self.assertEqual(label, wlabel)
        self.assertEqual(img.mode, "RGB")
        self.assertEqual(img.tobytes(), want.tobytes())

    def test_same_tensors_through_dataloader_with_workers(self):
        c = granary.Client(SOCKET)
        before = c.stats()["bytes_served"]
        tv = torchvision.datasets.ImageFolder(TREE, transform=tf())
        gr = GranaryImageFolder(TREE, transform=tf(), socket=SOCKET)
        got = {}
        for name, ds in (("tv", tv), ("gr", gr)):
            xs, ys = [], []
            for x, y in DataLoader(ds, batch_size=4, num_workers=2, shuffle=False):
                xs.append(x)
                ys.append(y)
            got[name] = (torch.cat(xs), torch.cat(ys))
        self.assertEqual(got["gr"][0].shape, got["tv"][0].shape)
        self.assertTrue(torch.equal(got["gr"][0], got["tv"][0]))
        self.assertTrue(torch.equal(got["gr"][1], got["tv"][1]))
        served = c.stats()["bytes_served"] - before
        self.assertGreaterEqual(served, tree_bytes(), "the images were not read through granary")
        c.close()

    def test_transforms_loader_and_errors(self):
        gr = GranaryImageFolder(TREE, target_transform=lambda t: CLASSES[t], socket=SOCKET)
        self.assertEqual(gr[len(gr) - 1][1], "zebra")
        seen = []
        own = GranaryImageFolder(TREE, loader=lambda p: seen.append(p) or p, socket=SOCKET)
        self.assertEqual(own[1][0], own.samples[1][0])
        self.assertEqual(seen, [own.samples[1][0]])
        only_png = GranaryImageFolder(TREE, extensions=(".png",), socket=SOCKET)
        self.assertTrue(all(p.endswith(".png") for p, _ in only_png.samples))
        txt = GranaryImageFolder(TREE, is_valid_file=lambda p: p.endswith(".txt"), socket=SOCKET)
        self.assertEqual(len(txt), 3)
        with self.assertRaises(ValueError):
            GranaryImageFolder(TREE, extensions=(".png",), is_valid_file=bool)
        with self.assertRaises(FileNotFoundError):
            GranaryImageFolder(os.path.join(TREE, "cat", "nested"))      # no class folders
        with self.assertRaises(FileNotFoundError):
            GranaryImageFolder(TREE, extensions=(".gif",))                # classes, no files


def wait_stat(c, name, at_least, timeout=10.0):
    deadline = time.monotonic() + timeout
    while c.stats()[name] < at_least and time.monotonic() < deadline:
        time.sleep(0.02)
    return c.stats()[name]


class HintingAnyDataset(unittest.TestCase):
    def test_hints_torchvision_imagefolder_every_epoch(self):
        tv = torchvision.datasets.ImageFolder(TREE, transform=tf())
        probe = granary.Client(SOCKET)
        s = HintingSampler(RandomSampler(tv), tv, socket=SOCKET, strict=True)
        loader = DataLoader(tv, batch_size=4, num_workers=2, sampler=s)
        for epoch in range(2):
            before = probe.stats()["hint_entries_added"]
            n = sum(len(y) for _, y in loader)
            self.assertEqual(n, len(tv))
            self.assertEqual(s.hinted, len(tv), "epoch %d" % epoch)
            self.assertEqual(sorted(s.last_order), list(range(len(tv))))
            self.assertGreaterEqual(wait_stat(probe, "hint_entries_added", before + len(tv)),
                                    before + len(tv), "epoch %d's hints never reached the daemon"
                                    % epoch)
        s.close()
        probe.close()

    def test_each_path_attribute(self):
        paths = [p for p, _ in torchvision.datasets.ImageFolder(TREE).samples]

        class Of:
            def __init__(self, **kw):
                self.__dict__.update(kw)

            def __len__(self):
                return len(paths)

        for ds in (Of(imgs=[(p, 0) for p in paths]), Of(paths=paths), Of(files=paths),
                   Of(samples=[[p, 1, "extra"] for p in paths])):
            s = HintingSampler(SequentialSampler(range(len(paths))), ds, socket=SOCKET, strict=True)
            self.assertEqual(list(s), list(range(len(paths))))
            self.assertEqual(s.hinted, len(paths), list(ds.__dict__))
            s.close()

    def test_unhintable_datasets_warn_and_go_on(self):
        class NoPaths:
            def __len__(self):
                return 4

        class Odd:
            samples = [(1, 2), (3, 4)]

        for ds in (NoPaths(), Odd(), list(range(4))):
            s = HintingSampler(SequentialSampler(range(2)), ds, socket=SOCKET)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                self.assertEqual(list(s), [0, 1])
            self.assertTrue(any(issubclass(x.category, RuntimeWarning) for x in w), repr(ds))
            self.assertEqual(s.hinted, 0)
            s.close()


if __name__ == "__main__":
    unittest.main()
