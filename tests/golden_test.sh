#!/usr/bin/env bash
# run: tier=check
# Golden error tests: every tests/golden/errors/NAME.expected holds the one
# line `dpc` must print on stderr for NAME.net (exit status 1, no plan
# written). NAME.net may be missing or a directory on purpose.
# Run from the repository root; binaries come from $DPC_BIN (default bin).
# Prints `N passed, N failed`.
. tests/lib.sh
unset DPC_MAX_MEMORY # the memory-limit cases expect the default limit
dir=tests/golden/errors
for exp in "$dir"/*.expected; do
    name=$(basename "$exp" .expected)
    src=$dir/$name.net
    plan=$tmp/$name.plan
    "$bin/dpc" "$src" -o "$plan" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    why=""
    if [ "$rc" != 1 ]; then
        why="exit status $rc, expected 1"
    elif ! cmp -s "$exp" "$tmp/err"; then
        why="stderr differs"
    elif [ -e "$plan" ]; then
        why="a plan was written"
    fi
    if [ -z "$why" ]; then
        ok
    else
        bad "$name: $why"
        echo "  expected: $(cat "$exp")"
        sed 's/^/  got:      /' "$tmp/err" | head -n 5
    fi
done
finish
