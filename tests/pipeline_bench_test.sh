#!/usr/bin/env bash
# run: tier=test san=no
# bench/pipeline.sh builds (-Werror) and prints its figures, on a short
# run; no timing is asserted. Prints `N passed, N failed`.
set -u
pass=0 fail=0
out=$(bash bench/pipeline.sh synthetic 20 64 1 2>&1); rc=$?
if [ $rc -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: bench/pipeline.sh exited $rc: $out"; fi
for w in 0 1 2 4; do
    if printf '%s\n' "$out" | grep -Eq "^workers $w: +[0-9]+ img/s"; then pass=$((pass + 1));
    else fail=$((fail + 1)); echo "FAIL: no img/s figure for $w workers in: $out"; fi
done
if printf '%s\n' "$out" | grep -Eq '^workers 2: the steps waited [0-9.]+ s in [0-9]+ of 19 steps after the first$'; then
    pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: no input-wait line in: $out"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
