"""One process's ImageFolder epochs, for bench/imagefolder.sh.

    imagefolder.py MODE ROOT [EPOCHS] [WORKERS] [BATCH]

MODE ``torchvision``: torchvision.datasets.ImageFolder (plain, or through the
LD_PRELOAD shim when the caller sets LD_PRELOAD); ``granary``:
granary.torch.GranaryImageFolder (GRANARY_SOCKET names the daemon).  Each
epoch decodes every JPEG (PIL), resizes it to 64x64 and makes a uint8
tensor, through a DataLoader with WORKERS workers; prints one line per epoch:
``epoch N: S samples in T s: R samples/s``.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch                                    # noqa: E402
from torch.utils.data import DataLoader         # noqa: E402
import torchvision                              # noqa: E402
from torchvision import transforms              # noqa: E402


def main():
    mode, root = sys.argv[1], sys.argv[2]
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    workers = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 32
    tf = transforms.Compose([transforms.Resize((64, 64)), transforms.PILToTensor()])
    if mode == "torchvision":
        ds = torchvision.datasets.ImageFolder(root, transform=tf)
    elif mode == "granary":
        from granary.torch import GranaryImageFolder
        ds = GranaryImageFolder(root, transform=tf)
    else:
        raise SystemExit("mode is torchvision or granary")
    torch.set_num_threads(1)
    for e in range(1, epochs + 1):
        t0 = time.monotonic()
        n = 0
        for x, y in DataLoader(ds, batch_size=batch, num_workers=workers, shuffle=True):
            n += len(y)
        dt = time.monotonic() - t0
        print("epoch %d: %d samples in %.2f s: %.0f samples/s" % (e, n, dt, n / dt), flush=True)


if __name__ == "__main__":
    main()
