#!/usr/bin/env bash
# run: tier=test san=no alone
# tests/gpu/check.sh end to end, here, on a machine arranged like the GPU
# machine it is written for (tests/gpu/rehearse.sh: no flex, bison, MPI or
# OpenBLAS headers, no nccl.h or cudnn*.h, the CUDA libraries only at
# CUDA 13's pip-wheel paths) with the fake driver for the GPU, on a copy of the tree
# as the device tool carries it (tracked and untracked files, build/rel/gen
# carried, nothing else built). Scaled down: cnn_small at batch 8, 2 timed
# steps, a tiny CIFAR-10 folder. Checks that every stage ran and passed,
# that the build took the paths that machine needs (the carried parser, the
# CBLAS shim, no MPI), that dpc found each library where the rehearsal put
# it, and that OUT holds summary.md and at most 8 files. Needs root and a
# mount namespace (unshare); where either is missing it is a skip.
. tests/lib.sh
fake=$build/fake/libfakecuda.so
if [ ! -f "$fake" ]; then
    skip "no $fake (built with the CUDA toolkit only)"; finish; exit
fi
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null ||
    ! unshare --mount --propagation private true 2>/dev/null; then
    skip "cannot make a mount namespace here (needs root and unshare)"; finish; exit
fi
if [ ! -f "$build/gen/parser.c" ] || [ ! -f "$build/gen/lexer.c" ]; then
    skip "no $build/gen to carry"; finish; exit
fi
src=$tmp/src out=$tmp/out
mkdir -p "$src/build/rel" "$out"
# The tree as the device tool sends it: what git does not ignore.
if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$src" 2>/dev/null
else
    tar -C . --exclude=./build --exclude=./bin -cf - . | tar -C "$src" -xf -
fi
cp -a "$build/gen" "$src/build/rel/gen"
rm -f "$src/build/rel/gen"/*.o
# A tiny CIFAR-10 binary folder: 8 images per training file, 8 test images.
random_cifar "$tmp/cifar" 8
DPC_CHECK_MODEL=cnn_small DPC_CHECK_BATCH=8 DPC_CHECK_STEPS=2 DPC_CHECK_BUDGET=1500 DPC_CHECK_LIMIT_SCALE=10 \
    DPC_CHECK_JOBS=2 DPC_CHECK_DATA=$tmp/cifar DPC_CHECK_CACHE=${DPC_CACHE_DIR:-$tmp/cache} \
    TMPDIR=$tmp unshare --mount --propagation private bash tests/gpu/rehearse.sh "$src" "$out" "$fake" >"$tmp/log" 2>&1
rc=$?
log=$tmp/log
readelf -d "$src/bin/dprun" >"$tmp/needed" 2>&1
has() { grep -q -e "$1" "$2"; }
check "check.sh exits 0 (exit $rc; its failures: $(grep '^FAIL' "$log" | head -n 5 | tr '\n' ' '))" [ $rc = 0 ]
check "OUT has summary.md" [ -s "$out/summary.md" ]
nfiles=$(find "$out" -type f | wc -l)
check "OUT has at most 8 files (has $nfiles: $(ls "$out" | tr '\n' ' '))" [ "$nfiles" -le 8 ]
check "the stage plan is printed" has '^stage plan (budgets for a 16-core machine' "$log"
check "the build used the carried parser" has 'no flex/bison: using the carried build/rel/gen' "$log"
check "the build used the CBLAS shim" has 'no OpenBLAS: building tests/gpu/cblas_shim' "$log"
check "dprun was linked against the shim" grep -q 'NEEDED.*\[libopenblas.so\]' "$tmp/needed"
check "the build left MPI out" has '^dpc: .*mpi no' "$log"
for lib in cu13/lib/libcublas.so.13 cu13/lib/libnvrtc.so.13 nccl/lib/libnccl.so.2 cudnn/lib/libcudnn.so.9; do
    check "dpc found $lib at its wheel path" has "site-packages/nvidia/$lib" "$out/summary.md"
done
# Every stage: passed, or skipped only for what needs real hardware.
for stage in 'environment' 'build' 'fp32 parity, graph, step time' 'bf16 parity, graph, step time' \
    'kernel_cmp --device (cnn_small train)' 'cost model vs measured (fp32)' 'PyTorch baseline' \
    'one CIFAR-10 epoch'; do
    check "stage '$stage' passed: $(grep -F "| $stage |" "$out/summary.md")" \
        grep -q -F "| $stage | passed" "$out/summary.md"
done
# The epoch's host waits (DPC_DEBUG=2): none in any step but the last,
# whose end is the epoch's.
hw=$(sed -n 's/^epoch_host_waits \([0-9]*\) of \([0-9]*\) steps.*/\1 \2/p' "$out/summary.md")
check "no host wait in the epoch's steps but its last (none in: ${hw:-no figure})" \
    awk -v h="$hw" 'BEGIN { split(h, a, " "); exit !(a[2] >= 2 && a[1] >= a[2] - 1) }'
check "memcheck is skipped only for want of a GPU" \
    grep -q -F '| compute-sanitizer memcheck | skipped: no' "$out/summary.md"
# Parity in units of the cpu's own spread: summary.md has the table, both
# plans' gated rows, none over the limit.
check "summary.md has the parity table" grep -q '^## Parity: cuda vs cpu in units of the cpu' "$out/summary.md"
for row in 'fp32 | forward | yes' 'fp32 | bn_running | yes' 'bf16 | forward | yes' 'fp32 | gradients | no'; do
    check "the parity table has a '$row' row" grep -q -F "| $row |" "$out/summary.md"
done
check "no gated parity row is over the limit" \
    awk -F'|' '$4 ~ /yes/ && $9 + 0 > 0 { bad = 1 } END { exit bad }' "$out/summary.md"
sed -n '/^## Parity/,/^## Libraries/p' "$out/summary.md" | grep '^|'
# The other direction: the same check on a GPU that starts one weight off
# by 1e-3 relative (DPC_CHECK_BREAK) fails its gates, while the graph
# still equals the eager step (both start from the same wrong weight).
cc=$build/gpu/cuda_check
if [ -x "$cc" ]; then
    "$bin/dpc" models/cnn_small.net --batch 8 -o "$tmp/break.plan" >/dev/null
    f=$(realpath "$fake")
    DPC_LIBCUDA=$f DPC_LIBCUBLAS=$f DPC_LIBNCCL=$f DPC_LIBCUDNN=$f DPC_CHECK_BREAK=1e-3 \
        "$cc" "$tmp/break.plan" >"$tmp/break.txt" 2>&1
    brc=$?
    check "a GPU one weight off fails cuda_check (exit $brc, want 1)" [ $brc = 1 ]
    check "it fails the forward pass's gate" grep -q -e '^FAIL cuda vs cpu: loss' -e '^FAIL cuda vs cpu: train logits' "$tmp/break.txt"
    check "its CUDA graph still equals its eager step" lacks '^FAIL graph' "$tmp/break.txt"
    grep -e '^FAIL' -e '^  forward' -e '^  bn_running' "$tmp/break.txt"
    # bf16: its convolutions read the weight rounded to bf16, whose half
    # step (2^-9, 2e-3 relative) hides 1e-3; 1e-2 is past it.
    "$bin/dpc" models/cnn_small.net --batch 8 --precision bf16 -o "$tmp/break-bf16.plan" >/dev/null
    DPC_LIBCUDA=$f DPC_LIBCUBLAS=$f DPC_LIBNCCL=$f DPC_LIBCUDNN=$f DPC_CHECK_BREAK=1e-2 \
        "$cc" "$tmp/break-bf16.plan" --tag bf16 >"$tmp/break-bf16.txt" 2>&1
    brc=$?
    check "a bf16 GPU one weight off by 1e-2 fails cuda_check (exit $brc, want 1)" [ $brc = 1 ]
    check "it fails the forward pass's gate" grep -q -e '^FAIL cuda vs cpu: loss' "$tmp/break-bf16.txt"
    grep -e '^  forward' -e '^  bn_running' "$tmp/break-bf16.txt"
fi
if [ "$fail" != 0 ]; then
    echo "---- the rehearsal: its last lines, then check.log around each failure"
    tail -n 15 "$log"
    grep -B 12 '^FAIL' "$out/check.log" 2>/dev/null | head -n 120
fi
finish
