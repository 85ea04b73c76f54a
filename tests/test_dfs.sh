#!/bin/sh
# granaryd in front of a real distributed filesystem: MooseFS started by
# scripts/dfs.sh (its own namespaces, state under the scratch directory),
# granaryd's [source] roots on the mfscachemode=DIRECT mount.  Reads through
# granaryctl cat are byte-exact, and a second read is served from the cache:
# source_bytes_read does not move and hardly any bytes cross the DFS's
# network.  Prints "SKIP: reason" and passes where FUSE, network namespaces
# or root are missing (scripts/dfs.sh probe says which).
cd "$(dirname "$0")/.."
NAME=dfs
. tests/lib.sh

DFS="scripts/dfs.sh"
export DFS_DIR="$dir/dfs" DFS_NAME=grdfst
if ! why=$($DFS probe); then
    echo "SKIP: $why"
    exit 0
fi
dfs_started=0
# Tear the DFS down before lib.sh's cleanup removes $dir (the mounts are in it).
dfs_cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    pid=
    [ $dfs_started -eq 1 ] && $DFS down > /dev/null 2>&1
    cleanup
}
trap dfs_cleanup EXIT
trap 'exit 1' INT TERM

dfs_started=1
check "dfs.sh up" $DFS up
mnt=$DFS_DIR/mnt
mkdir -p "$mnt/ds"
head -c 3000000 /dev/urandom > "$dir/big.bin"
head -c 100000 /dev/urandom > "$dir/sample.bin"
cp "$dir/big.bin" "$dir/sample.bin" "$mnt/ds/"
printf 'x' > "$mnt/ds/one"
check "files on the DFS" cmp -s "$dir/big.bin" "$mnt/ds/big.bin"

# 1M chunks: big.bin is three chunks, the others one short chunk each.
write_conf "[daemon]
socket_mode = 0666
[source]
roots = $mnt
attr_ttl = 60"
start_daemon

$CTL -s "$dir/sock" cat "$mnt/ds/big.bin" "$mnt/ds/sample.bin" "$mnt/ds/one" > "$dir/out1"
check "first cat exit 0" test $? -eq 0
cat "$dir/big.bin" "$dir/sample.bin" "$mnt/ds/one" | cmp -s - "$dir/out1"
check "first cat byte-exact" test $? -eq 0
src1=$(stat_of source_bytes_read)
check "first cat read the DFS (source_bytes_read $src1)" test "$src1" -eq 3100001
net1=$($DFS netbytes)

$CTL -s "$dir/sock" cat "$mnt/ds/big.bin" "$mnt/ds/sample.bin" "$mnt/ds/one" > "$dir/out2"
check "second cat exit 0" test $? -eq 0
check "second cat byte-exact" cmp -s "$dir/out1" "$dir/out2"
src2=$(stat_of source_bytes_read)
check "second cat did not read the source (source_bytes_read $src1 -> $src2)" test "$src2" -eq "$src1"
net2=$($DFS netbytes)
# Metadata traffic and keep-alives may cross the network, file data may not.
check "second cat: under 64 KiB from the DFS's network ($((net2 - net1)) bytes)" \
    test $((net2 - net1)) -lt 65536
hits=$(stat_of hits_dram)
check "second cat: DRAM hits ($hits)" test "$hits" -ge 5

# A name this node's kernel keeps for an open file is not the DFS's word: a
# user opens pub/x, another node (here the second mount) makes x name
# someone else's file, and she sends OPEN x with her old descriptor.  She
# may be served her file (she holds it open), but nobody else may be served
# it as x: root's cat of x must give what x is now.  (A review found the
# daemon had cached x as her file for attr_ttl.)
mkdir -p "$mnt/ds/pub" && chmod 1777 "$mnt/ds/pub"
printf 'EEEEEEEEEEEEEEEE' > "$mnt/ds/pub/x" && chown nobody "$mnt/ds/pub/x"
printf 'GGGGGGGGGGGGGGGG' > "$mnt/ds/pub/b" && chmod 644 "$mnt/ds/pub/b"
chmod 755 "$dir" 2> /dev/null
if runuser -u nobody -- test -x build/tests/isolation_probe; then
    runuser -u nobody -- build/tests/isolation_probe stale-name "$dir/sock" "$mnt/ds/pub/x" 1500 \
        > "$dir/stale.out" 2>&1 &
    probe=$!
    sleep 0.5
    mntb=$DFS_DIR/mnt-cached
    mv "$mntb/ds/pub/x" "$mntb/ds/pub/y" && mv "$mntb/ds/pub/b" "$mntb/ds/pub/x"
    wait $probe
    check "her OPEN of x with her old descriptor answered ($(cat "$dir/stale.out"))" \
        grep -qx 0 "$dir/stale.out"
    $CTL -s "$dir/sock" cat "$mnt/ds/pub/x" > "$dir/xnow"
    check "root's cat of x afterwards: what x is now ($(cat "$dir/xnow"))" \
        grep -qx 'GGGGGGGGGGGGGGGG' "$dir/xnow"
else
    echo "SKIP: nobody cannot run build/tests/isolation_probe (the stale-name check)"
fi

kill "$pid" && wait "$pid"
pid=
check "dfs.sh down" $DFS down
dfs_started=0
check "no mount left" sh -c "! findmnt -n '$mnt' > /dev/null"
[ $fails -eq 0 ]
