#!/usr/bin/env bash
# Depthwise 3x3 convolution on MobileNetV2's CIFAR shapes: dpc's direct
# kernels (conv groups=C) against one small GEMM per group (bench/depthwise.c
# says what is timed). Needs libdpc.a (`make`).
# usage: bench/depthwise.sh [BATCH] [REPEATS] [THREADS]   (32, 5, 2)
set -eu
batch=${1:-32}
reps=${2:-5}
threads=${3:-2}
build=${DPC_BUILD:-build/rel}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads DPC_THREADS=$threads
export DPC_CACHE_DIR=$tmp/cache
cc=${CC:-cc}
cudaflags=()
[ -f /usr/local/cuda/include/nvrtc.h ] && cudaflags=(-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lnvrtc)
"$cc" -I. "-I$build/gen" -D_GNU_SOURCE -std=c11 -O2 -Wall -Wextra -Werror -pthread \
    -o "$tmp/depthwise" bench/depthwise.c "$build/libdpc.a" -lopenblas -lm -ldl -lpthread "${cudaflags[@]}"
"$tmp/depthwise" "$batch" "$reps"
