#!/bin/sh
# Install the Debian packages Granary needs to build and test, if any is
# missing.  Runs apt-get update once, only when something must be installed.
set -eu
need="build-essential pkg-config libevent-dev librocksdb-dev libxxhash-dev libssl-dev check valgrind bc man-db python3-torch python3-numpy acl curl gnuplot-nox python3-torchvision python3-pil fio sqlite3 rsync libibverbs-dev librdmacm-dev rdma-core ibverbs-providers"
missing=""
for p in $need; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
