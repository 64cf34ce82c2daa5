#!/usr/bin/env bash
# Runs every test program and script, adds up their `N passed, N failed`
# lines and prints the total last. Usage: tests/run.sh BUILD_DIR BIN_DIR
set -u
build=${1:?build dir}
bin=${2:?bin dir}
export DPC_BIN=$bin DPC_BUILD=$build
export DPC_CACHE_DIR=${DPC_CACHE_DIR:-$build/cache}
passed=0 failed=0 skipped=0
run_one() { # name, command...
    local name=$1; shift
    local log; log=$(mktemp)
    "$@" >"$log" 2>&1
    local rc=$?
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $name: exited $rc without a result line"; sed 's/^/    /' "$log" | tail -n 30
        failed=$((failed + 1))
    else
        local p f s=0; p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
        case "$line" in *skipped*) s=${line##*failed, }; s=${s%% skipped*} ;; esac
        passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
        if [ "$f" != 0 ] || [ $rc != 0 ]; then
            echo "FAIL $name ($line, exit $rc)"; grep -v -E '^[0-9]+ passed' "$log" | sed 's/^/    /' | tail -n 40
            [ "$f" = 0 ] && failed=$((failed + 1))
        else
            echo "ok   $name ($line)"
        fi
    fi
    rm -f "$log"
}
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for s in tests/*_test.sh; do
    [ -f "$s" ] || continue
    run_one "$(basename "$s")" bash "$s"
done
if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"; else echo "$passed passed, $failed failed"; fi
[ "$failed" = 0 ]
