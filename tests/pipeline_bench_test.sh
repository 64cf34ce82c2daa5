#!/usr/bin/env bash
# run: tier=test san=no
# bench/pipeline.sh builds (-Werror) and prints its figures, on a short
# run; no timing is asserted. Prints `N passed, N failed`.
. tests/lib.sh
out=$(bash bench/pipeline.sh synthetic 20 64 1 2>&1); rc=$?
[ $rc -eq 0 ] && ok || bad "bench/pipeline.sh exited $rc: $out"
for w in 0 1 2 4; do
    printf '%s\n' "$out" | grep -Eq "^workers $w: +[0-9]+ img/s" && ok ||
        bad "no img/s figure for $w workers in: $out"
done
printf '%s\n' "$out" | grep -Eq '^workers 2: the steps waited [0-9.]+ s in [0-9]+ of 19 steps after the first$' &&
    ok || bad "no input-wait line in: $out"
finish
