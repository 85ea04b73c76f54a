#!/bin/sh
# scripts/peernet.sh - N "nodes" on one machine for peer-cache tests and
# benchmarks: a network namespace per node, each with its own address, all
# on one bridge that lives in a small "switch" namespace of its own.
#
#   peernet.sh up N      namespaces $PEER_NET-sw (the bridge) and
#                        $PEER_NET-1 .. $PEER_NET-N; node I has 10.78.0.I/24
#                        on its veth; run a program on node I with
#                        nsenter --net=/run/netns/$PEER_NET-I PROGRAM
#                        (network only: it still sees every mount, e.g. the
#                        MooseFS of scripts/dfs.sh, and every Unix socket)
#   peernet.sh down N    delete them (each veth goes with its namespace)
#
# Nothing is added to the host's own network namespace, so the addresses
# exist only between the nodes.  PEER_NET (at most 9 characters, so that
# interface names fit in 15) names the set [grpeer]; two sets on one machine
# need different names (their addresses never meet).  Needs root.
set -eu
NET=${PEER_NET:-grpeer}
SW=$NET-sw

up() {
    n=${1:?usage: peernet.sh up N}
    ip netns add "$SW"
    ip -n "$SW" link add br0 type bridge
    ip -n "$SW" link set br0 up
    i=1
    while [ "$i" -le "$n" ]; do
        ip netns add "$NET-$i"
        ip link add "$NET-$i" netns "$NET-$i" type veth peer name "$NET-p$i" netns "$SW"
        ip -n "$SW" link set "$NET-p$i" master br0
        ip -n "$SW" link set "$NET-p$i" up
        ip -n "$NET-$i" link set lo up
        ip -n "$NET-$i" addr add "10.78.0.$i/24" dev "$NET-$i"
        ip -n "$NET-$i" link set "$NET-$i" up
        i=$((i + 1))
    done
    # With STP off (the default) a port forwards at once; make sure.
    i=0
    while [ "$(bridge -n "$SW" link show | grep -c 'state forwarding')" -lt "$n" ]; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "peernet: the bridge's ports do not forward" >&2; exit 1; }
        sleep 0.05
    done
}

down() {
    n=${1:?usage: peernet.sh down N}
    i=1
    while [ "$i" -le "$n" ]; do
        ip netns del "$NET-$i" 2> /dev/null || true
        i=$((i + 1))
    done
    ip netns del "$SW" 2> /dev/null || true
}

case ${1:-} in
up) shift; up "$@" ;;
down) shift; down "$@" ;;
*) echo "usage: peernet.sh up N | down N" >&2; exit 2 ;;
esac
