#!/usr/bin/env bash
# The cpu backend's thread pool (runtime/backend_cpu.c) under
# ThreadSanitizer: tests/unit/pool_tsan_main.c launches kernels from three
# threads at once with a pool of three. Fails on any race report. Skips (and
# says so) when no compiler here builds ThreadSanitizer binaries.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
srcs=(tests/unit/pool_tsan_main.c runtime/backend_cpu.c runtime/compile_cache.c)
built=
for cc in gcc clang; do
    command -v "$cc" >/dev/null 2>&1 || continue
    if "$cc" -std=c11 -Wall -Wextra -Werror -O1 -g -fsanitize=thread -I. -D_GNU_SOURCE -pthread \
        -o "$tmp/pool_tsan" "${srcs[@]}" -lopenblas -ldl -lm 2>"$tmp/cc.err"; then
        built=$cc
        break
    fi
done
if [ -z "$built" ]; then
    echo "pool_tsan_test: no compiler here builds ThreadSanitizer binaries; skipped"
    sed 's/^/    /' "$tmp/cc.err" 2>/dev/null | head -5
    echo "0 passed, 0 failed"
    exit 0
fi
DPC_THREADS=3 DPC_CACHE_DIR="$tmp/cache" TSAN_OPTIONS="halt_on_error=1 exitcode=66" "$tmp/pool_tsan" >"$tmp/out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    echo "pool_tsan_test: pool under ThreadSanitizer ($built) exited $rc:"
    sed 's/^/    /' "$tmp/out" | head -60
    echo "0 passed, 1 failed"
    exit 1
fi
grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/out" | tail -n 1
