#!/bin/sh
# The GPU path where there is no GPU (as in CI): libgranary.so links no
# CUDA library and exports gr_read_to_device; the GPU files build with the
# fallback declarations as well as against cuda.h; the Python GPU suite
# (python/tests/test_gpu.py: Client.read_to_device, the GPU tier,
# DeviceCollate, DeviceLoader over a 2-worker DataLoader; CUDA tensors are
# skipped without torch.cuda) against a real daemon and the CUDA stand-in;
# and the device check tests/gpu/run.sh end to end on the stand-in (32 MiB),
# so the script a GPU machine runs does not rot.  The Check suite
# (check_gpu) runs with the other suites.
cd "$(dirname "$0")/.."
NAME=gpu
. tests/lib.sh
PY=/usr/bin/python3
STANDIN=$PWD/build/tests/cuda/libcuda.so.1

ldd build/libgranary.so > "$dir/ldd" 2>&1
check "ldd libgranary.so lists no CUDA library" sh -c "! grep -Eq 'libcuda|libcudart|libcufile' '$dir/ldd'"
check "libgranary.so needs no CUDA library (readelf NEEDED)" \
    sh -c "! readelf -d build/libgranary.so | grep NEEDED | grep -qi cu"
check "libgranary.so exports gr_read_to_device" sh -c "nm -D --defined-only build/libgranary.so | grep -q ' gr_read_to_device@'"

ok=1
for f in client/gpu.c client/gpu_drv.c client/gpu_ring.c client/gpu_tier.c tests/cuda_standin.c; do
    cc -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wundef \
        -Wno-unused-parameter -D_GNU_SOURCE -DGR_NO_CUDA_H -iquote common -iquote proto -iquote client -fsyntax-only "$f" \
        2>>"$dir/nocuda.log" || ok=0
done
[ $ok = 1 ] || sed 's/^/    /' "$dir/nocuda.log"
check "the GPU files build without cuda.h (GR_NO_CUDA_H)" test $ok = 1

write_conf
start_daemon
GRANARY_SOCKET="$dir/sock" GRANARY_TEST_ROOT="$dir/src" GRANARY_LIBCUDA="$STANDIN" \
    PYTHONPATH=python timeout 120 $PY python/tests/test_gpu.py -v > "$dir/py.log" 2>&1
rc=$?
sed 's/^/    /' "$dir/py.log"
check "python GPU suite (python/tests/test_gpu.py) on the stand-in" test $rc -eq 0
grep -q "^OK" "$dir/py.log"
check "python/tests/test_gpu.py ran and passed" test $? -eq 0
grep -o "skipped '[^']*'" "$dir/py.log" | sort -u | sed 's/^skipped /SKIP: /'
kill -TERM "$pid"
wait "$pid"
check "daemon clean exit" test $? -eq 0
pid=

GPU_STANDIN=1 GPU_NO_SUITE=1 GPU_TIMEOUT=200 sh tests/gpu/run.sh 32 > "$dir/run.log" 2>&1
rc=$?
grep -E "^(ok|FAIL|gpu check|GOAL|==)" "$dir/run.log" | sed 's/^/    /'
check "tests/gpu/run.sh on the stand-in (GPU_STANDIN=1)" test $rc -eq 0
grep -q "gpu check: PASS" "$dir/run.log"
check "the device check passed end to end" test $? -eq 0
[ $fails -eq 0 ]
