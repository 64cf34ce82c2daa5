#!/usr/bin/env bash
# run: tier=test san=no
# The cpu backend's thread pool (runtime/device/cpu.c) under
# ThreadSanitizer: tests/unit/pool_tsan_main.c launches kernels from three
# threads at once with a pool of three, against the instrumented library
# (tests/tsan.sh). Fails on any race report.
. tests/tsan.sh pool_tsan_test
tsan_run pool_tsan_main DPC_THREADS=3
tsan_finish
