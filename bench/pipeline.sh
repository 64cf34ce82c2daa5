#!/usr/bin/env bash
# The input pipeline's own throughput (img/s) with 0, 1, 2 and 4 worker
# threads, and the input wait of a simulated step. Figures only.
#
# usage: bench/pipeline.sh [DATA] [BATCHES] [BATCH] [STEP_MS]
#   DATA: a CIFAR-10 binary folder (default: $DPC_DATA, else synthetic)
# Builds bench/pipeline.c from its sources (runtime/data/{pipeline,cifar,rng,tokens}.c, base/err.c)
# with the project's flags; needs only a C compiler.
set -eu
cd "$(dirname "$0")/.."
data=${1:-${DPC_DATA:-synthetic}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 -I. -D_GNU_SOURCE -pthread -o "$tmp/pipeline" \
    bench/pipeline.c runtime/data/pipeline.c runtime/data/cifar.c runtime/data/rng.c runtime/data/tokens.c base/err.c base/file.c -lm
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/pipeline" "$data" "${2:-400}" "${3:-128}" "${4:-20}"
