#!/bin/sh
# scripts/client_table.sh - the client table (issue 20): programs training
# jobs use, each run on files under a real granaryd's root without and with
# the LD_PRELOAD shim; prints, per program, whether output and exit status
# are identical and how many bytes the daemon served during the shim run
# (bytes_served counts whole chunks handed out, so a program that opens a
# file and reads little of it still shows a chunk, and random reads of
# 64 KiB show more than the file).  PRE=path/to/shim.so to try another shim.
#
#   scripts/client_table.sh        (needs fio, sqlite3, rsync, python3-pil,
#                                   python3-torchvision, python3-numpy)
cd "$(dirname "$0")/.." || exit 2
NAME=table
. tests/lib.sh
PRE=${PRE:-$PWD/build/libgranary_preload.so}
PY=/usr/bin/python3
served() { $CTL -s "$dir/sock" stats --json | sed -n 's/.*"bytes_served": *\([0-9]*\).*/\1/p'; }
pre() { env LD_PRELOAD="$PRE" GRANARY_SOCKET="$dir/sock" GRANARY_PRELOAD_ROOTS="$dir/src" "$@"; }
S=$dir/src
head -c 8000000 /dev/urandom > $S/big.bin
$PY -c 'import numpy as np, sys; np.random.seed(1); np.save(sys.argv[1], np.random.rand(1000000))' $S/arr.npy
$PY -c '
import sys, random
from PIL import Image
r = random.Random(1)
im = Image.frombytes("RGB", (640, 480), r.randbytes(640*480*3)); im.save(sys.argv[1], quality=90)' $S/img.jpg
mkdir -p $S/tree; for i in 1 2 3 4 5; do head -c $((i*100000)) /dev/urandom > $S/tree/f$i; done
tar cf $S/shard.tar -C $S tree
sqlite3 $S/db.sqlite 'create table t(x blob); insert into t select randomblob(10000) from generate_series(1,300);' 2>/dev/null || \
  $PY -c 'import sqlite3,os,sys; c=sqlite3.connect(sys.argv[1]); c.execute("create table t(x blob)"); c.executemany("insert into t values(?)", [(os.urandom(10000),) for _ in range(300)]); c.commit()' $S/db.sqlite
mkdir -p $S/if/a $S/if/b; cp $S/img.jpg $S/if/a/1.jpg; cp $S/img.jpg $S/if/b/2.jpg
fio --verify_state_save=0 --name=w --filename=$S/fio.dat --rw=write --bs=64k --size=8m --verify=md5 --do_verify=0 --output=/dev/null >/dev/null 2>&1
write_conf
start_daemon >/dev/null
row() {  # row NAME COMMAND...: output with and without the shim, served bytes
    name=$1; shift
    "$@" > "$dir/plain" 2>/dev/null; a=$?
    b=$(served)
    pre "$@" > "$dir/pre" 2>/dev/null; p=$?
    d=$(( $(served) - b ))
    if [ $a -eq $p ] && cmp -s "$dir/plain" "$dir/pre"; then same=yes; else same="NO (exit $a/$p)"; fi
    printf '| %s | %s | %s |\n' "$name" "$same" "$d"
}
echo "| program | identical to a run without the shim | bytes_served during the run |"
echo "|---|---|---|"
row "cat FILE" cat $S/big.bin
row "cat < FILE" sh -c 'cat < "$1"' sh $S/big.bin
row "dd if=FILE" sh -c 'dd if="$1" bs=1M status=none </dev/null' sh $S/big.bin
row "sha256sum FILE" sha256sum $S/big.bin
row "md5sum < FILE" sh -c 'md5sum < "$1"' sh $S/big.bin
row "cmp FILE COPY" cmp $S/big.bin $S/big.bin
row "tar tvf" tar tvf $S/shard.tar
row "tar xOf" tar xOf $S/shard.tar
row "python open().read()" $PY -c 'import sys; sys.stdout.buffer.write(open(sys.argv[1],"rb").read())' $S/big.bin
row "python tarfile" $PY -c 'import sys,tarfile,hashlib; t=tarfile.open(sys.argv[1]); print([hashlib.md5(t.extractfile(m).read()).hexdigest() for m in t if m.isfile()])' $S/shard.tar
row "numpy.load" $PY -c 'import sys,numpy as np; sys.stdout.buffer.write(np.load(sys.argv[1]).tobytes())' $S/arr.npy
row "numpy.load(mmap_mode=r)" $PY -c 'import sys,numpy as np; sys.stdout.buffer.write(np.load(sys.argv[1], mmap_mode="r").tobytes())' $S/arr.npy
row "np.memmap" $PY -c 'import sys,numpy as np; sys.stdout.buffer.write(np.memmap(sys.argv[1], dtype=np.uint8, mode="r").tobytes())' $S/big.bin
row "PIL Image.open(path)" $PY -c 'import sys; from PIL import Image; sys.stdout.buffer.write(Image.open(sys.argv[1]).tobytes())' $S/img.jpg
row "torchvision.io.read_image" $PY -c 'import sys, torchvision.io as io; sys.stdout.buffer.write(io.read_image(sys.argv[1]).numpy().tobytes())' $S/img.jpg
row "torchvision ImageFolder+PIL" $PY -c '
import sys, torchvision
ds = torchvision.datasets.ImageFolder(sys.argv[1])
for i in range(len(ds)): sys.stdout.buffer.write(ds[i][0].tobytes())' $S/if
row "sqlite3 -readonly" sqlite3 -readonly $S/db.sqlite 'select sum(length(x)), hex(substr(x,1,8)) from t;'
row "python sqlite3 (ro uri)" $PY -c 'import sqlite3,sys; c=sqlite3.connect("file:"+sys.argv[1]+"?mode=ro", uri=True); print(c.execute("select sum(length(x)), hex(substr(x,1,8)) from t").fetchall())' $S/db.sqlite
row "rsync FILE OUT" sh -c 'rsync "$1" "$2" && cat "$2"' sh $S/big.bin $dir/rs.out
row "fio read --verify=md5" fio --verify_state_save=0 --name=r --filename=$S/fio.dat --rw=read --bs=64k --size=8m --verify=md5 --output-format=terse --output=/dev/null
row "fio randread --verify=md5 (psync)" fio --verify_state_save=0 --name=r --filename=$S/fio.dat --rw=randread --bs=64k --size=8m --verify=md5 --ioengine=psync --output=/dev/null
row "sed -n p" sed -n p $S/tree/f1
row "grep -c" grep -c . $S/tree/f2
row "head -c" head -c 3000000 $S/big.bin
row "cp FILE OUT" sh -c 'cp "$1" "$2" && cat "$2"' sh $S/big.bin $dir/cp.out
row "wc -c < FILE" sh -c 'wc -c < "$1"' sh $S/big.bin
