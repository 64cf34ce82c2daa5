#!/usr/bin/env bash
# run: tier=check san=no
# tests/run.sh reads each program's `run:` line, and refuses one it cannot
# read rather than running the program in a tier it did not ask for: a
# stray `#` inside a C comment, an unknown word. Runs a copy of the runner
# on a tree of its own. Prints `N passed, N failed`.
. tests/lib.sh
tree=$tmp/tree
mkdir -p "$tree/tests/unit" "$tree/b/tests"
cp tests/run.sh tests/lib.sh "$tree/tests/"
# runs TIER: the runner on the tree, its output in $tmp/out, its status
runs() { (cd "$tree" && DPC_CACHE_DIR=$tmp/cache bash tests/run.sh --tier "$1" b b) >"$tmp/out" 2>&1; }
printf '#!/usr/bin/env bash\n# run: tier=test\n. tests/lib.sh\ncheck one true\nfinish\n' >"$tree/tests/good_test.sh"
runs test
check "a readable line runs its program" grep -q '^1 passed, 0 failed' "$tmp/out"
runs check
check "in its own tier only" grep -q '^0 passed, 0 failed' "$tmp/out"
printf '/* a unit test\n * # run: tier=test\n */\n' >"$tree/tests/unit/test_x.c"
printf '#!/bin/sh\necho "1 passed, 0 failed"\n' >"$tree/b/tests/test_x" && chmod +x "$tree/b/tests/test_x"
runs check; rc=$?
check "a run: line inside a comment's # is refused (exit 2)" test "$rc" = 2
check "naming the file and line" grep -q 'tests/unit/test_x.c:2: ' "$tmp/out"
printf '/* a unit test\n * run: tier=tset\n */\n' >"$tree/tests/unit/test_x.c"
runs check; rc=$?
check "an unknown word is refused (exit 2)" test "$rc" = 2
check "naming the word" grep -q "unknown word 'tier=tset'" "$tmp/out"
printf '/* a unit test\n * run: tier=test\n */\n' >"$tree/tests/unit/test_x.c"
runs test
check "corrected, both run" grep -q '^2 passed, 0 failed' "$tmp/out"
finish
