#!/usr/bin/env bash
# The collectives and the data-parallel replicas under ThreadSanitizer:
# tests/unit/test_collective.c (barriers, the communication queues' threads)
# with its few dependencies, and tests/unit/test_replicas.c (replica
# threads, communication threads and executors together) with the whole
# library; fails on any race report. Uses clang, else gcc; when neither
# builds a TSan binary it says so and counts nothing. Generated kernels run
# uninstrumented (compiled at run time by the host compiler).
# Prints `N passed, N failed`.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DPC_CACHE_DIR=${DPC_CACHE_DIR:-$tmp/cache}
lib=(runtime/collective.c runtime/mpi.c runtime/backend_cpu.c runtime/compile_cache.c)
gen=${DPC_BUILD:-build/rel}/gen
built=
for cc in clang gcc; do
    command -v "$cc" >/dev/null 2>&1 || continue
    if "$cc" -std=c11 -Wall -Wextra -Werror -O1 -g -fsanitize=thread -I. -D_GNU_SOURCE -pthread \
        -o "$tmp/test_collective" tests/unit/test_collective.c "${lib[@]}" -lopenblas -lm -ldl 2>"$tmp/cc.err"; then
        built=$cc
        break
    fi
done
if [ -z "$built" ]; then
    echo "coll_tsan_test: no compiler here builds ThreadSanitizer binaries; skipped"
    sed 's/^/    /' "$tmp/cc.err" 2>/dev/null | head -5
    echo "0 passed, 0 failed"
    exit 0
fi
progs=(test_collective)
# The replicas need the whole library (and the generated parser).
if [ -f tests/unit/test_replicas.c ] && [ -f "$gen/parser.c" ]; then
    srcs=$(ls frontend/*.c ir/*.c passes/*.c codegen/*.c runtime/*.c)
    if "$built" -std=c11 -O1 -g -fsanitize=thread -I. -I"$gen" -D_GNU_SOURCE -pthread -w \
        -o "$tmp/test_replicas" tests/unit/test_replicas.c $srcs "$gen/lexer.c" "$gen/parser.c" \
        -lopenblas -lm -ldl 2>"$tmp/cc2.err"; then
        progs+=(test_replicas)
    else
        echo "coll_tsan_test: cannot build test_replicas with TSan:"; sed 's/^/    /' "$tmp/cc2.err" | head -10
        echo "0 passed, 1 failed"
        exit 1
    fi
fi
passed=0 failed=0
for p in "${progs[@]}"; do
    # exitcode: a race report fails the run even when every CHECK passed.
    TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1" "$tmp/$p" >"$tmp/out" 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/out" | tail -n 1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        echo "coll_tsan_test: $p under ThreadSanitizer ($built) exited $rc:"
        sed 's/^/    /' "$tmp/out" | head -60
        failed=$((failed + 1))
    else
        passed=$((passed + ${line%% passed*}))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
