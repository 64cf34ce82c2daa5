#!/usr/bin/env bash
# The input pipeline under ThreadSanitizer: builds tests/unit/test_pipeline.c
# with its only dependencies (runtime/{pipeline,data,rng}.c) and
# -fsanitize=thread, runs it, and fails on any race report. Uses clang, else
# gcc; when neither can build a TSan binary it says so and counts nothing.
# Prints `N passed, N failed` (the unit test's own line).
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
srcs=(tests/unit/test_pipeline.c runtime/pipeline.c runtime/data.c runtime/rng.c)
built=
for cc in clang gcc; do
    command -v "$cc" >/dev/null 2>&1 || continue
    if "$cc" -std=c11 -Wall -Wextra -Werror -O1 -g -fsanitize=thread -I. -D_GNU_SOURCE -pthread \
        -o "$tmp/test_pipeline_tsan" "${srcs[@]}" -lm 2>"$tmp/cc.err"; then
        built=$cc
        break
    fi
done
if [ -z "$built" ]; then
    echo "tsan_test: no compiler here builds ThreadSanitizer binaries; skipped"
    sed 's/^/    /' "$tmp/cc.err" 2>/dev/null | head -5
    echo "0 passed, 0 failed"
    exit 0
fi
# exitcode: a race report fails the run even when every CHECK passed.
TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1" "$tmp/test_pipeline_tsan" >"$tmp/out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    echo "tsan_test: test_pipeline under ThreadSanitizer ($built) exited $rc:"
    sed 's/^/    /' "$tmp/out" | head -60
    echo "0 passed, 1 failed"
    exit 1
fi
grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/out" | tail -n 1
