#!/bin/sh
# The peer protocol from the outside: tests/peer_probe.py, written from
# proto/PROTOCOL.md alone, against a real granaryd's [peer] listener: the
# handshake as specified (it checks the daemon's proof itself), a chunk and
# its checksum, every refusal (no root, "..", another version, past the end,
# a vanished file), a wrong key, GET before authenticating, names that are no
# member, a replayed proof, hostile lengths and garbage; the daemon's own
# clients are served byte-exact throughout.
cd "$(dirname "$0")/.."
NAME=peerproto
. tests/lib.sh

port=$((30000 + $$ % 20000))
head -c 48 /dev/urandom | base64 > "$dir/key"
chmod 600 "$dir/key"
head -c 3000000 /dev/urandom > "$dir/src/data.bin"
write_conf "[peer]
listen = 127.0.0.1:$port
nodes = 127.0.0.1:$port,127.0.0.3:$port
key_file = $dir/key
timeout = 1
[nvme]
path ="
start_daemon

/usr/bin/python3 tests/peer_probe.py 127.0.0.1 "$port" "$dir/key" "127.0.0.3:$port" \
    "127.0.0.1:$port" "$dir/src/data.bin"
check "peer_probe.py: every check" test $? -eq 0
check "auth failures counted" test "$(stat_of peer_auth_failures)" -ge 8
check "refusals counted" test "$(stat_of peer_refused)" -ge 6
check "served counted" test "$(stat_of peer_served)" -ge 3
$CTL -s "$dir/sock" cat "$dir/src/data.bin" | cmp -s - "$dir/src/data.bin"
check "the daemon's own client still served byte-exact" test $? -eq 0
check "daemon still running" kill -0 "$pid"
grep -q "peer connection from 127.0.0.1 refused" "$dir/log"
check "refusals logged" test $? -eq 0
[ $fails -eq 0 ]
