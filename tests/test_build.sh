#!/bin/sh
# The build tree is usable as it is, and libgranary's ABI is what its
# header says: a program linked with -L build -lgranary starts; the shared
# library exports exactly the functions client/granary.h declares (no
# internal gr__ helper); granaryd names a stray argument.
NAME=build; . tests/lib.sh

cat > "$dir/prog.c" <<'C'
#include <errno.h>
#include <stdio.h>
#include <granary.h>
int main(int argc, char **argv)
{
    gr_client *c = gr_connect(argc > 1 ? argv[1] : "/nonexistent/granary.sock");
    if (c) { gr_disconnect(c); return 1; }
    printf("errno %d\n", errno);
    return 0;
}
C
check "a program links with -L build -lgranary" \
    cc -o "$dir/prog" "$dir/prog.c" -Iclient -Lbuild -lgranary -Wl,-rpath,"$PWD/build"
check "and starts from the build tree" sh -c "'$dir/prog' | grep -q 'errno 2'"

nm -D --defined-only build/libgranary.so | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' \
    | sort > "$dir/exported"
sed -n 's/^[^ ].*[ *]\(gr_[a-z0-9_]*\)(.*/\1/p' client/granary.h | sort -u > "$dir/declared"
check "exported symbols are the declared API" cmp "$dir/exported" "$dir/declared"
check "no gr__ internals exported" sh -c "! grep -q '^gr__' '$dir/exported'"
check "gr_open is exported" grep -qx gr_open "$dir/exported"

$GRANARYD config/granary.conf >"$dir/out" 2>&1
check "a stray argument: exit 2" test $? -eq 2
check "a stray argument: named" grep -q 'unexpected argument "config/granary.conf"' "$dir/out"

[ $fails -eq 0 ]
