#!/bin/sh
# tests/gpu/run.sh - the GPU path's device check (issue 16), for a machine
# with an NVIDIA GPU and its driver.  From the repository root:
#
#     tests/gpu/run.sh [SIZE_MIB]          # default 2048: the data set, in DRAM
#
# It builds what it needs from the sources (gcc and make; no nvcc needed:
# the checks drive the GPU through the driver API that libgranary loads),
# starts its own granaryd on a temporary socket and data directory
# (DRAM tier only, 4 MiB chunks), then
#   1. runs the Check suite build/tests/check_gpu against the real driver
#      (GR_TEST_REAL_CUDA=1: what needs the stand-in's knobs says SKIP),
#   2. runs build/tests/gpu_check: random ranges copied into device memory,
#      copied back and compared (registered arena, staging ring, GPU tier),
#      the daemon's leases back to 0 after every wait, and the throughput of
#      gr_read_to_device beside cuMemcpyHtoD of the same bytes from pinned
#      and from pageable memory, with the ratios against the issue's goals.
# It ends with "gpu check: PASS" or "gpu check: FAIL" and exits 0 or 1; a
# missed throughput goal fails it only with GPU_STRICT=1.  About a minute
# (under 5 with SIZE_MIB 8192).
#
# The daemon needs libevent, RocksDB and xxhash (Debian: libevent-dev
# librocksdb-dev libxxhash-dev) and check_gpu needs Check.  A machine that
# has no package manager can run binaries built elsewhere:
#     tests/gpu/run.sh --pack      # on the build machine: build/gpu-pack/
# then copy the tree with build/gpu-pack/ (about 20 MB: the programs and
# every shared library they need that is not libc's) and run
#     tests/gpu/run.sh              # uses build/gpu-pack/ when it cannot build
#
#   GPU_STANDIN=1   use the stand-in driver (build/tests/cuda/libcuda.so.1),
#                   to try the script without a GPU: the figures are memcpy's
#   GPU_PREBUILT=1  never build: use build/gpu-pack/ (or build/) as it is
#   GPU_STRICT=1    a missed throughput goal fails the check
#   GPU_NO_SUITE=1  skip step 1 (tests/test_gpu.sh: check_gpu runs in make test anyway)
#   GPU_TIMEOUT=S   the whole run's budget in seconds (default 280)
set -u
cd "$(dirname "$0")/../.." || exit 2
T0=$(date +%s)
BUDGET=${GPU_TIMEOUT:-280}
SIZE=2048
PACK=build/gpu-pack
fails=0

say() { printf '%s\n' "$*"; }
fail() { say "FAIL $*"; fails=$((fails + 1)); }
left() { echo $((BUDGET - ($(date +%s) - T0))); }

# The programs the check runs, laid out as in build/, and the shared
# libraries outside libc that they load (lib/), into build/gpu-pack/.
pack() {
    make -j"$(nproc)" build/granaryd build/libgranary.so build/tests/check_gpu \
        build/tests/gpu_check build/tests/cuda/libcuda.so.1 || exit 1
    rm -rf "$PACK"
    mkdir -p "$PACK/lib" "$PACK/tests/cuda"         # the layout of build/
    cp build/granaryd build/libgranary.so "$PACK/"
    cp build/tests/check_gpu build/tests/gpu_check "$PACK/tests/"
    cp build/tests/cuda/libcuda.so.1 "$PACK/tests/cuda/"
    strip --strip-debug "$PACK/granaryd" "$PACK/libgranary.so" "$PACK"/tests/* 2>/dev/null
    for b in "$PACK/granaryd" "$PACK/tests/check_gpu" "$PACK/tests/gpu_check"; do
        ldd "$b" | awk '$3 ~ /^\// { print $3 }'
    done | sort -u | while read -r lib; do
        case $(basename "$lib") in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) ;;
        *) cp -L "$lib" "$PACK/lib/" ;;
        esac
    done
    du -sh "$PACK"
    say "packed: carry $PACK/ with the tree, then run tests/gpu/run.sh there"
}

if [ "${1:-}" = "--pack" ]; then
    pack
    exit 0
fi
[ -n "${1:-}" ] && SIZE=$1

say "== gpu check: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, $(uname -r)"
if [ "${GPU_STANDIN:-0}" = 1 ]; then
    say "driver: the STAND-IN (build/tests/cuda/libcuda.so.1): no GPU is used, figures are memcpy's"
else
    command -v nvidia-smi >/dev/null 2>&1 &&
        nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
            --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
    ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 ' || say "warning: ldconfig knows no libcuda.so.1"
fi
command -v nvcc >/dev/null 2>&1 && say "nvcc: $(nvcc --version | tail -1) (not needed)"
ldconfig -p 2>/dev/null | grep -q libcufile || say "GPUDirect Storage: no libcufile on this machine"

# ---- build, or use what was carried ----
BIN=build
TESTS=build/tests
CUDA_STANDIN=build/tests/cuda/libcuda.so.1
can_build=0
if [ "${GPU_PREBUILT:-0}" != 1 ] && command -v make >/dev/null 2>&1 && command -v cc >/dev/null 2>&1 &&
   pkg-config --exists libevent libevent_pthreads rocksdb libxxhash check 2>/dev/null; then
    can_build=1
fi
if [ $can_build = 1 ]; then
    say "build: from the sources (make)"
    make -j"$(nproc)" build/granaryd build/libgranary.so build/tests/check_gpu build/tests/gpu_check \
        build/tests/cuda/libcuda.so.1 >"${TMPDIR:-/tmp}/gpu-build.log" 2>&1 ||
        { tail -30 "${TMPDIR:-/tmp}/gpu-build.log"; fail "build"; exit 1; }
elif [ -x "$PACK/granaryd" ]; then
    say "build: not possible here (no libevent/RocksDB/Check development files or no compiler): using $PACK/"
    BIN=$PACK
    TESTS=$PACK/tests
    CUDA_STANDIN=$PACK/tests/cuda/libcuda.so.1
    LD_LIBRARY_PATH=$PWD/$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
elif [ -x build/granaryd ] && [ -x build/tests/gpu_check ]; then
    say "build: not possible here: using the binaries in build/ as they are"
else
    fail "cannot build (need gcc, make, and libevent, RocksDB, xxhash and Check development files)" \
         "and no $PACK/: run 'tests/gpu/run.sh --pack' where they exist and carry $PACK/"
    exit 1
fi
for b in "$BIN/granaryd" "$TESTS/check_gpu" "$TESTS/gpu_check"; do
    if ldd "$b" 2>&1 | grep -q "not found"; then
        ldd "$b" | grep "not found"
        fail "$b lacks shared libraries (carry $PACK/, see the header)"
        exit 1
    fi
done
if ldd "$BIN/libgranary.so" | grep -Eq 'libcuda|libcudart|libcufile'; then
    fail "libgranary.so links CUDA"
else
    say "ok   ldd libgranary.so lists no CUDA library"
fi
if [ "${GPU_STANDIN:-0}" = 1 ]; then
    GRANARY_LIBCUDA=$PWD/$CUDA_STANDIN
    export GRANARY_LIBCUDA
    unset GR_TEST_REAL_CUDA
else
    unset GRANARY_LIBCUDA
    GR_TEST_REAL_CUDA=1
    export GR_TEST_REAL_CUDA
fi

# ---- 1. the Check suite against this driver ----
if [ "${GPU_NO_SUITE:-0}" != 1 ]; then
    say "== check_gpu ($([ "${GPU_STANDIN:-0}" = 1 ] && echo stand-in || echo real driver))"
    GRANARYD=$BIN/granaryd CK_DEFAULT_TIMEOUT=60 timeout "$(left)" "$TESTS/check_gpu" \
        >"${TMPDIR:-/tmp}/check_gpu.log" 2>&1
    rc=$?
    grep -E '^SKIP|^[0-9]+%|:[FE]:' "${TMPDIR:-/tmp}/check_gpu.log" | sed 's/^/    /'
    [ $rc -eq 0 ] && say "ok   check_gpu" || fail "check_gpu (log ${TMPDIR:-/tmp}/check_gpu.log)"
fi

# ---- 2. our own daemon, then gpu_check ----
dir=$(mktemp -d "${TMPDIR:-/tmp}/granary-gpu-XXXXXX")
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
mkdir -p "$dir/src"
cat >"$dir/g.conf" <<CONF
[daemon]
socket = $dir/sock
log_level = info
io_threads = 16
[source]
roots = $dir/src
chunk_size = 4M
[dram]
capacity = $((SIZE * 2 + 1024))M
max_leased_per_client = 1G
[nvme]
path = ""
[metrics]
listen =
CONF
"$BIN/granaryd" --config "$dir/g.conf" 2>>"$dir/log" &
pid=$!
i=0
while [ ! -S "$dir/sock" ] && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
if [ ! -S "$dir/sock" ]; then
    tail -20 "$dir/log"
    fail "granaryd did not start"
    exit 1
fi
say "== gpu_check: $SIZE MiB, daemon on $dir/sock"
GRANARY_SOCKET=$dir/sock timeout "$(left)" "$TESTS/gpu_check" "$dir/sock" "$dir/src" "$SIZE"
rc=$?
if [ $rc -eq 0 ]; then
    say "ok   gpu_check"
elif [ $rc -eq 2 ]; then
    fail "gpu_check: a throughput goal was missed (GPU_STRICT=1)"
else
    fail "gpu_check (rc $rc)"
fi
grep -i "gpu\|GPUDirect" "$dir/log" | tail -3 | sed 's/^/daemon log: /'
kill -TERM "$pid"
wait "$pid"
[ $? -eq 0 ] || fail "granaryd did not exit cleanly"
pid=
say "== $(($(date +%s) - T0)) s"
if [ $fails -eq 0 ]; then
    say "gpu check: PASS"
    exit 0
fi
say "gpu check: FAIL ($fails)"
exit 1
