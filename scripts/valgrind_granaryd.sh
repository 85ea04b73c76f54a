#!/bin/sh
# granaryd under valgrind, for the integration suite (GRANARYD=this script):
# any memory error or definite leak makes the daemon exit non-zero, which
# the test's clean-stop assertion catches.
exec valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite build/granaryd "$@"
