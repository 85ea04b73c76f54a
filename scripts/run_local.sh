#!/bin/sh
# `make run`: granaryd in the foreground on the shipped config/granary.conf,
# with its paths moved to local directories under build/run/ so that it
# runs without root:
#   build/run/granary.sock   the socket        (export GRANARY_SOCKET=... for clients)
#   build/run/data           the source root   (or GRANARY_ROOTS=/mnt/dfs:/other)
#   build/run/nvme           the NVMe tier     (1 GiB)
# Ctrl-C stops it cleanly.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
run="$top/build/run"
roots=${GRANARY_ROOTS:-$run/data}
mkdir -p "$run/data" "$run/nvme"
if [ ! -e "$run/data/hello.txt" ]; then
    echo "Hello from Granary: this file was read through the cache." > "$run/data/hello.txt"
fi
cp config/granary.conf "$run/granary.conf"
# Later keys win: the overrides below replace the shipped paths and sizes.
cat >> "$run/granary.conf" <<CONF

# --- local overrides written by make run ---
[daemon]
socket = $run/granary.sock
[source]
roots = $roots
[dram]
capacity = 256M
[nvme]
path = $run/nvme
capacity = 1G
CONF
echo "granaryd: socket $run/granary.sock, roots $roots"
echo "try:  build/granaryctl -s $run/granary.sock cat $run/data/hello.txt"
echo "      build/granaryctl -s $run/granary.sock stats"
exec build/granaryd --config "$run/granary.conf"
