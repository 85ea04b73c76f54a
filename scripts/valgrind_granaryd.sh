#!/bin/sh
# granaryd under valgrind, for the integration suite (GRANARYD=this script):
# any memory error or definite leak makes the daemon exit non-zero, which
# the test's clean-stop assertion catches.  scripts/valgrind.supp names the
# leaks that belong to RocksDB itself.
dir=$(dirname "$0")
exec valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite --suppressions="$dir/valgrind.supp" build/granaryd "$@"
