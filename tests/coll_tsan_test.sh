#!/usr/bin/env bash
# The collectives and the data-parallel replicas under ThreadSanitizer:
# tests/unit/test_collective.c (barriers, the communication queues' threads)
# and tests/unit/test_replicas.c (replica threads, communication threads and
# executors together), each with the whole library instrumented; fails on
# any race report. Uses clang, else gcc (tests/tsan.sh: skips only when
# neither builds a TSan binary at all). Generated kernels run
# uninstrumented (compiled at run time by the host compiler).
# Prints `N passed, N failed`.
. tests/tsan.sh coll_tsan_test
export DPC_CACHE_DIR=${DPC_CACHE_DIR:-$tmp/cache}
# The whole library, instrumented (without warnings: the plain build checks them).
gen=${DPC_BUILD:-build/rel}/gen
[ -f "$gen/parser.c" ] || { echo "coll_tsan_test: no $gen/parser.c (run make first)"; echo "0 passed, 1 failed"; exit 1; }
lib=($(find frontend ir format passes codegen runtime -name "*.c" | sort) "$gen/lexer.c" "$gen/parser.c")
tsan_build test_collective -w -I"$gen" tests/unit/test_collective.c "${lib[@]}" -lopenblas -lm -ldl
tsan_build test_replicas -w -I"$gen" tests/unit/test_replicas.c "${lib[@]}" -lopenblas -lm -ldl
tsan_run test_collective
tsan_run test_replicas
tsan_finish
