# tests/tsan.sh — test programs under ThreadSanitizer, for the
# tests/*tsan_test.sh scripts. Source it from the repository root:
#
#     . tests/tsan.sh NAME                  # finds the TSan build, tmp
#     tsan_run PROG [VAR=VALUE...]          # runs build/tsan/tests/PROG; a race
#                                           # report or a failed CHECK counts
#     tsan_finish                           # prints `N passed, N failed`; the exit status
#
# The programs come from one instrumented build of the whole library
# (`make tsan-bins`, which `make test` runs: build/tsan), shared by every
# TSan script. Generated kernels run uninstrumented (compiled at run time by
# the host compiler). A missing program is a failure: our own sources
# failing to build under TSan is never a skip.
set -u
tsan_name=$1
tsan_dir=${DPC_TSAN_BUILD:-build/tsan}/tests
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tsan_passed=0 tsan_failed=0

tsan_run() {
    local prog=$1; shift
    if [ ! -x "$tsan_dir/$prog" ]; then
        echo "$tsan_name: no $tsan_dir/$prog (make tsan-bins builds it)"
        tsan_failed=$((tsan_failed + 1))
        return
    fi
    # exitcode: a race report fails the run even when every CHECK passed.
    env "$@" TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1" \
        "$tsan_dir/$prog" >"$tmp/out" 2>&1
    local rc=$? line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/out" | tail -n 1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        echo "$tsan_name: $prog under ThreadSanitizer exited $rc:"
        sed 's/^/    /' "$tmp/out" | head -60
        tsan_failed=$((tsan_failed + 1))
        return
    fi
    local f=${line#*, }
    tsan_passed=$((tsan_passed + ${line%% passed*})) tsan_failed=$((tsan_failed + ${f%% failed*}))
}

tsan_finish() {
    echo "$tsan_passed passed, $tsan_failed failed"
    [ "$tsan_failed" = 0 ]
}
