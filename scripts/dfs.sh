#!/bin/bash
# scripts/dfs.sh - a real distributed filesystem on this one machine, for
# benchmarks and integration tests: MooseFS (one master, two chunkservers)
# inside a pair of network namespaces, mounted with mfsmount over FUSE.
#
#   dfs.sh probe         exit 0 if a DFS can be started here, else print one
#                        line saying why not and exit 1 (nothing is changed)
#   dfs.sh up [RATE]     install MooseFS if missing (apt-get), create the
#                        namespaces, start the cluster, mount it twice, and
#                        optionally cap its bandwidth (RATE as tc says it:
#                        1600mbit is about 190 MB/s of file data)
#   dfs.sh shape RATE|off  change the bandwidth cap (both directions)
#   dfs.sh status        what runs, where it is mounted, the cap, bytes sent
#   dfs.sh netbytes      bytes the DFS side has sent so far (veth tx counter:
#                        every read of file data, by anyone, crosses it)
#   dfs.sh down          unmount, stop by the PIDs this script started,
#                        delete the namespaces; DFS_PURGE=1 also deletes data
#
# The two mounts of the same filesystem:
#   $DFS_DIR/mnt         -o mfscachemode=DIRECT: no client-side cache, every
#                        read crosses the (shaped) network.  Benchmarks of
#                        "the DFS" and granaryd's [source] roots use this one.
#   $DFS_DIR/mnt-cached  MooseFS's default cache mode: the kernel page cache
#                        keeps what was read, as a user's mount would.
#
# Why namespaces: the chunkserver refuses a master address in 127.0.0.0/8, so
# the cluster gets private addresses on a veth pair between two namespaces
# (server side: master and chunkservers; client side: mfsmount, entered with
# nsenter --net only, so that its mount is visible to every process on the
# machine).  Nothing is added to the host's own network namespace.  TBF on
# each veth end caps the bandwidth; this kernel has no netem, so latency
# cannot be added.
#
# Environment (defaults in brackets):
#   DFS_DIR    state: configs, chunks, metadata, logs, PID files, mount
#              points [/tmp/granary-dfs]
#   DFS_NAME   prefix of the namespace and interface names, at most 8
#              characters; two instances on one machine need different
#              names and directories [grdfs]
#   DFS_LEAVE  free space each chunkserver leaves on its filesystem [8GiB]
set -eu

DFS_DIR=${DFS_DIR:-/tmp/granary-dfs}
DFS_NAME=${DFS_NAME:-grdfs}
DFS_LEAVE=${DFS_LEAVE:-8GiB}
NS_SRV=$DFS_NAME-srv
NS_CLI=$DFS_NAME-cli
IF_SRV=$DFS_NAME-s
IF_CLI=$DFS_NAME-c
NET=10.77.0                         # exists only inside the two namespaces
CLI_IP=$NET.1
MASTER_IP=$NET.2
CS_IPS="$NET.3 $NET.4"
PORT_ML=9419                        # master: metaloggers and admin
PORT_CS=9420                        # master: chunkservers register here
PORT_CL=9421                        # master: clients (mfsmount, mfscli)
PORT_CSSERV=9422                    # each chunkserver, on its own address
PACKAGES="moosefs-master moosefs-chunkserver moosefs-client moosefs-cli fuse3"
MNT=$DFS_DIR/mnt
MNT_CACHED=$DFS_DIR/mnt-cached

die() { echo "dfs: $*" >&2; exit 1; }
in_srv() { ip netns exec "$NS_SRV" "$@"; }

missing_packages() {
    local p out=
    for p in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || out="$out $p"
    done
    echo "$out"
}

# One line on stdout and status 1 when something needed is not there.
probe() {
    local miss p
    [ "$(id -u)" -eq 0 ] || { echo "not root (network namespaces and mounts need it)"; return 1; }
    [ -c /dev/fuse ] || { echo "no /dev/fuse (FUSE unavailable)"; return 1; }
    for p in ip tc nsenter; do
        command -v "$p" > /dev/null || { echo "no $p command"; return 1; }
    done
    if ! ip netns add "$DFS_NAME-probe" 2> /dev/null; then
        echo "cannot create network namespaces"
        return 1
    fi
    ip netns del "$DFS_NAME-probe"
    miss=$(missing_packages)
    if [ -n "$miss" ] && ! command -v apt-get > /dev/null; then
        echo "packages missing ($miss) and no apt-get to install them"
        return 1
    fi
    if ip netns list | grep -q "^$NS_SRV\b"; then
        echo "namespace $NS_SRV exists already (another instance? set DFS_NAME, or dfs.sh down)"
        return 1
    fi
    return 0
}

install_packages() {
    local miss
    miss=$(missing_packages)
    [ -z "$miss" ] && return 0
    echo "dfs: installing$miss"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $miss > /dev/null
    # The master and chunkserver services the packages may have started or
    # enabled are not ours: this script runs its own, under $DFS_DIR.
}

net_up() {
    local ip
    ip netns add "$NS_SRV"
    ip netns add "$NS_CLI"
    ip link add "$IF_SRV" netns "$NS_SRV" type veth peer name "$IF_CLI" netns "$NS_CLI"
    ip -n "$NS_SRV" link set lo up
    ip -n "$NS_CLI" link set lo up
    for ip in $MASTER_IP $CS_IPS; do ip -n "$NS_SRV" addr add "$ip/24" dev "$IF_SRV"; done
    ip -n "$NS_CLI" addr add "$CLI_IP/24" dev "$IF_CLI"
    ip -n "$NS_SRV" link set "$IF_SRV" up
    ip -n "$NS_CLI" link set "$IF_CLI" up
}

net_down() {
    # Deleting a namespace deletes its veth end, and with it the peer.
    ip netns del "$NS_CLI" 2> /dev/null || true
    ip netns del "$NS_SRV" 2> /dev/null || true
}

write_configs() {
    local i=0 ip
    mkdir -p "$DFS_DIR"/etc "$DFS_DIR"/master "$DFS_DIR"/log "$MNT" "$MNT_CACHED"
    cat > "$DFS_DIR/etc/mfsmaster.cfg" <<EOF
WORKING_USER = root
WORKING_GROUP = root
DATA_PATH = $DFS_DIR/master
EXPORTS_FILENAME = $DFS_DIR/etc/mfsexports.cfg
TOPOLOGY_FILENAME = $DFS_DIR/etc/mfstopology.cfg
MATOML_LISTEN_HOST = $MASTER_IP
MATOML_LISTEN_PORT = $PORT_ML
MATOCS_LISTEN_HOST = $MASTER_IP
MATOCS_LISTEN_PORT = $PORT_CS
MATOCL_LISTEN_HOST = $MASTER_IP
MATOCL_LISTEN_PORT = $PORT_CL
REPLICATIONS_DELAY_INIT = 0
EOF
    printf '*\t/\trw,alldirs,admin,maproot=0:0\n*\t.\trw\n' > "$DFS_DIR/etc/mfsexports.cfg"
    : > "$DFS_DIR/etc/mfstopology.cfg"
    # The master will not start without metadata: seed the empty one.
    [ -e "$DFS_DIR/master/metadata.mfs" ] ||
        cp /var/lib/mfs/metadata.mfs.empty "$DFS_DIR/master/metadata.mfs"
    for ip in $CS_IPS; do
        i=$((i + 1))
        mkdir -p "$DFS_DIR/cs$i/chunks" "$DFS_DIR/cs$i/var"
        cat > "$DFS_DIR/etc/mfschunkserver$i.cfg" <<EOF
WORKING_USER = root
WORKING_GROUP = root
SYSLOG_IDENT = granary-mfscs$i
DATA_PATH = $DFS_DIR/cs$i/var
HDD_CONF_FILENAME = $DFS_DIR/etc/mfshdd$i.cfg
MASTER_HOST = $MASTER_IP
MASTER_PORT = $PORT_CS
BIND_HOST = $ip
CSSERV_LISTEN_HOST = $ip
CSSERV_LISTEN_PORT = $PORT_CSSERV
EOF
        # A negative limit is space to leave free; a positive one would count
        # everything else on the filesystem as used.
        echo "$DFS_DIR/cs$i/chunks -$DFS_LEAVE" > "$DFS_DIR/etc/mfshdd$i.cfg"
    done
}

# wait_for SECONDS COMMAND...: until COMMAND succeeds, polling every 0.05 s.
wait_for() {
    local n=$(($1 * 20))
    shift
    while ! "$@" > /dev/null 2>&1; do
        n=$((n - 1))
        [ $n -gt 0 ] || return 1
        sleep 0.05
    done
}

# The daemons run in the foreground of a background shell (so $! is their
# PID), in their own session, so that a Ctrl-C meant for a benchmark does not
# kill the master before it has saved its metadata.
spawn() {   # spawn NAME COMMAND...
    local name=$1
    shift
    setsid "$@" > "$DFS_DIR/log/$name.log" 2>&1 < /dev/null &
    echo $! > "$DFS_DIR/$name.pid"
}

chunkservers_registered() {
    local n
    n=$(in_srv mfscli -H "$MASTER_IP" -P "$PORT_CL" -SCS -s'|' 2>/dev/null |
        grep -cE "\|($(echo "$CS_IPS" | tr ' ' '|'))\|" || true)
    [ "$n" -ge 2 ]
}

master_listens() { in_srv ss -ltn | grep -q "$MASTER_IP:$PORT_CL "; }

mount_one() {   # mount_one NAME DIR [OPTIONS]
    local name=$1 dir=$2 opts=${3:-}
    # nsenter enters only the network namespace: the mount lands in the
    # host's mount namespace, visible to every process.
    spawn "$name" nsenter --net="/run/netns/$NS_CLI" mfsmount -f "$dir" -H "$MASTER_IP" -P "$PORT_CL" \
        ${opts:+-o "$opts"}
    wait_for 10 findmnt -n "$dir" || { cat "$DFS_DIR/log/$name.log" >&2; die "mount of $dir failed"; }
}

up() {
    local why i
    if ! why=$(probe); then die "cannot start: $why"; fi
    install_packages
    rm -f "$DFS_DIR"/*.pid
    net_up
    write_configs
    # -a: recover from the changelogs if a previous master was killed.
    spawn master ip netns exec "$NS_SRV" mfsmaster -a -f -c "$DFS_DIR/etc/mfsmaster.cfg" start
    wait_for 10 master_listens || die "the master did not listen (log: $DFS_DIR/log/master.log)"
    for i in 1 2; do
        spawn "cs$i" ip netns exec "$NS_SRV" mfschunkserver -f -c "$DFS_DIR/etc/mfschunkserver$i.cfg" start
    done
    wait_for 60 chunkservers_registered || die "the chunkservers did not register (logs in $DFS_DIR/log)"
    mount_one mount "$MNT" mfscachemode=DIRECT
    mount_one mount-cached "$MNT_CACHED"
    if [ -n "${1:-}" ]; then shape "$1"; fi
    echo "dfs: up: $MNT (mfscachemode=DIRECT), $MNT_CACHED (page cache)${1:+, capped at $1}"
}

shape() {
    local rate=${1:?usage: dfs.sh shape RATE|off} pair ns dev
    for pair in "$NS_SRV:$IF_SRV" "$NS_CLI:$IF_CLI"; do
        ns=${pair%%:*}
        dev=${pair#*:}
        tc -n "$ns" qdisc del dev "$dev" root 2> /dev/null || true
        [ "$rate" = off ] && continue
        # 2 MB of burst and 20 ms of queue: enough for 1 MiB requests at
        # these rates without dropping packets.
        tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst 2mb latency 20ms
    done
}

netbytes() { in_srv cat "/sys/class/net/$IF_SRV/statistics/tx_bytes"; }

stop_pid() {   # stop_pid NAME: SIGTERM, up to 30 s (the master saves metadata), then SIGKILL
    local f=$DFS_DIR/$1.pid p i
    [ -f "$f" ] || return 0
    p=$(cat "$f")
    if kill -0 "$p" 2> /dev/null; then
        kill -TERM "$p" 2> /dev/null || true
        for i in $(seq 300); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
        kill -0 "$p" 2> /dev/null && kill -KILL "$p" 2> /dev/null
    fi
    rm -f "$f"
}

down() {
    local m
    for m in "$MNT" "$MNT_CACHED"; do
        if findmnt -n "$m" > /dev/null 2>&1; then umount "$m" 2> /dev/null || umount -l "$m"; fi
    done
    stop_pid mount
    stop_pid mount-cached
    stop_pid cs1
    stop_pid cs2
    stop_pid master
    net_down
    if [ "${DFS_PURGE:-0}" = 1 ]; then rm -rf "$DFS_DIR"; fi
    echo "dfs: down"
}

status() {
    local f
    for f in master cs1 cs2 mount mount-cached; do
        if [ -f "$DFS_DIR/$f.pid" ] && kill -0 "$(cat "$DFS_DIR/$f.pid")" 2> /dev/null; then
            echo "$f: running, pid $(cat "$DFS_DIR/$f.pid")"
        else
            echo "$f: not running"
        fi
    done
    findmnt -n -o TARGET,SOURCE,FSTYPE "$MNT" 2> /dev/null || echo "$MNT: not mounted"
    findmnt -n -o TARGET,SOURCE,FSTYPE "$MNT_CACHED" 2> /dev/null || echo "$MNT_CACHED: not mounted"
    if ip netns list | grep -q "^$NS_SRV\b"; then
        tc -n "$NS_SRV" qdisc show dev "$IF_SRV"
        echo "bytes sent by the DFS side: $(netbytes)"
    else
        echo "namespaces: none"
    fi
}

case ${1:-} in
probe) probe ;;
up) shift; up "$@" ;;
down) down ;;
shape) shift; shape "$@" ;;
status) status ;;
netbytes) netbytes ;;
*) echo "usage: dfs.sh probe | up [RATE] | shape RATE|off | status | netbytes | down" >&2; exit 2 ;;
esac
