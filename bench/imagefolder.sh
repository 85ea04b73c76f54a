#!/bin/bash
# bench/imagefolder.sh - samples/s of an ImageFolder epoch (JPEG decode
# included) on the MooseFS set-up (scripts/dfs.sh, the uncached
# mfscachemode=DIRECT mount), three ways, each in a fresh process with a
# fresh granaryd (so its first epoch is cold, its second warm):
#   plain       torchvision.datasets.ImageFolder on the mount
#   shim        the same program under LD_PRELOAD=libgranary_preload.so
#   granary     granary.torch.GranaryImageFolder
# Each epoch: every image decoded by PIL, resized to 64x64, a uint8 tensor,
# shuffled, through a DataLoader with WORKERS workers (bench/imagefolder.py).
#
#   bench/imagefolder.sh [IMAGES] [WORKERS]   default 1000 images, 2 workers
#
# Environment: DFS_DIR, DFS_NAME as for scripts/dfs.sh (brought up if down,
# left as found).  Prints a table; the last lines are KEY=VALUE.
set -eu
cd "$(dirname "$0")/.."
IMAGES=${1:-1000}
WORKERS=${2:-2}
PY=/usr/bin/python3
export DFS_DIR=${DFS_DIR:-/tmp/granary-dfs} DFS_NAME=${DFS_NAME:-grdfs}
mnt=$DFS_DIR/mnt
work=$(mktemp -d /tmp/granary-imgf-XXXXXX)
started_dfs=
gpid=
cleanup() {
    [ -n "$gpid" ] && kill "$gpid" 2>/dev/null && wait "$gpid" 2>/dev/null
    rm -rf "$work"
    [ -n "$started_dfs" ] && scripts/dfs.sh down > /dev/null 2>&1
    return 0
}
trap cleanup EXIT INT TERM
if ! scripts/dfs.sh status > /dev/null 2>&1 || [ ! -e "$mnt/.stats" ]; then
    scripts/dfs.sh up > /dev/null
    started_dfs=1
fi
tree=$mnt/imagefolder-$IMAGES
if [ ! -e "$tree/.done" ]; then
    echo "imagefolder: making $IMAGES JPEGs in 10 classes under $tree (once)"
    rm -rf "$tree"
    $PY - "$tree" "$IMAGES" <<'PY'
import os, random, sys
from PIL import Image
root, n = sys.argv[1], int(sys.argv[2])
r = random.Random(1)
for i in range(n):
    d = os.path.join(root, "class%02d" % (i % 10))
    os.makedirs(d, exist_ok=True)
    w, h = 160 + r.randrange(64), 120 + r.randrange(48)
    # Smooth noise: JPEGs of a few tens of KB, like small photos.
    small = Image.frombytes("RGB", (w // 8, h // 8), r.randbytes((w // 8) * (h // 8) * 3))
    small.resize((w, h), Image.BILINEAR).save(os.path.join(d, "img%05d.jpg" % i), quality=90)
PY
    : > "$tree/.done"
fi
bytes=$(find "$tree" -name '*.jpg' -printf '%s\n' | awk '{s += $1} END {print s}')

start() {
    cat > "$work/g.conf" <<CONF
[daemon]
socket = $work/sock
[source]
roots = $mnt
chunk_size = 1M
[dram]
capacity = 1G
[nvme]
path = $work/nvme
capacity = 4G
[metrics]
listen =
CONF
    build/granaryd --config "$work/g.conf" 2>> "$work/log" &
    gpid=$!
    for _ in $(seq 1 500); do [ -S "$work/sock" ] && return 0; sleep 0.02; done
    echo "imagefolder: granaryd did not start" >&2; cat "$work/log" >&2; exit 1
}
stop() { kill "$gpid"; wait "$gpid" 2>/dev/null || true; gpid=; rm -rf "$work/nvme"; }
served() { build/granaryctl -s "$work/sock" stats --json | sed -n 's/.*"bytes_served": *\([0-9]*\).*/\1/p'; }

declare -A COLD WARM
# run LABEL ENV... -- MODE: two epochs in one process
run() {
    label=$1; shift
    out=$(env "$@" $PY bench/imagefolder.py "${MODE}" "$tree" 2 "$WORKERS")
    COLD[$label]=$(echo "$out" | awk '/^epoch 1:/{print $(NF-1)}')
    WARM[$label]=$(echo "$out" | awk '/^epoch 2:/{print $(NF-1)}')
}
echo "imagefolder: $IMAGES JPEGs ($bytes bytes) on MooseFS ($mnt), $WORKERS workers, one run"
MODE=torchvision run plain GRANARY_PRELOAD=0
start
MODE=torchvision run shim LD_PRELOAD="$PWD/build/libgranary_preload.so" \
    GRANARY_SOCKET="$work/sock" GRANARY_PRELOAD_ROOTS="$mnt"
shim_served=$(served)
stop
start
MODE=granary run granary GRANARY_SOCKET="$work/sock" PYTHONPATH="$PWD/python"
granary_served=$(served)
stop
printf '| %-44s | %12s | %12s |\n' "ImageFolder epoch, samples/s" "cold (1st)" "warm (2nd)"
printf '|%s|%s|%s|\n' "----------------------------------------------" "--------------" "--------------"
printf '| %-44s | %12s | %12s |\n' "torchvision ImageFolder, direct mount" "${COLD[plain]}" "${WARM[plain]}"
printf '| %-44s | %12s | %12s |\n' "torchvision ImageFolder under the shim" "${COLD[shim]}" "${WARM[shim]}"
printf '| %-44s | %12s | %12s |\n' "granary.torch.GranaryImageFolder" "${COLD[granary]}" "${WARM[granary]}"
echo "bytes served by granaryd over both epochs: shim $shim_served, GranaryImageFolder $granary_served (the images: $bytes bytes)"
echo "IMGF_PLAIN=${COLD[plain]}/${WARM[plain]}"
echo "IMGF_SHIM=${COLD[shim]}/${WARM[shim]}"
echo "IMGF_GRANARY=${COLD[granary]}/${WARM[granary]}"
