#!/usr/bin/env bash
# The cpu backend's thread pool (runtime/device/cpu.c) under
# ThreadSanitizer: tests/unit/pool_tsan_main.c launches kernels from three
# threads at once with a pool of three. Fails on any race report. Skips (and
# says so) when no compiler here builds ThreadSanitizer binaries.
. tests/tsan.sh pool_tsan_test
# The backend reaches into codegen (GEMM descriptors) and ir: the whole
# library is built instrumented (without warnings: that is the plain build's job).
gen=${DPC_BUILD:-build/rel}/gen
[ -f "$gen/parser.c" ] || { echo "pool_tsan_test: no $gen/parser.c (run make first)"; echo "0 passed, 1 failed"; exit 1; }
tsan_build pool_tsan -w -I"$gen" tests/unit/pool_tsan_main.c $(find frontend ir format passes codegen runtime -name "*.c" | sort) \
    "$gen/lexer.c" "$gen/parser.c" -lopenblas -ldl -lm
tsan_run pool_tsan DPC_THREADS=3 DPC_CACHE_DIR="$tmp/cache"
tsan_finish
