#!/bin/sh
# test_torture.sh - the short form of `make torture` (scripts/torture.sh):
# readers checking every byte while granaryd is SIGKILLed and restarted,
# for TORTURE_SECONDS (45 here).
cd "$(dirname "$0")/.." || exit 2
TORTURE_SECONDS=${TORTURE_SECONDS:-45} exec bash scripts/torture.sh
