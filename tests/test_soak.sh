#!/bin/sh
# test_soak.sh - the short form of `make soak` (scripts/soak.sh): hundreds
# of clients, killed and never-reading ones among them, for SOAK_SECONDS
# (40 here); no leak of connections, leases or fds, bounded memory.
cd "$(dirname "$0")/.." || exit 2
SOAK_SECONDS=${SOAK_SECONDS:-40} exec bash scripts/soak.sh
