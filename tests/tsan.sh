# tests/tsan.sh — test programs under ThreadSanitizer, for the
# tests/*tsan_test.sh scripts. Source it from the repository root:
#
#     . tests/tsan.sh NAME                  # picks tsan_cc (clang, else gcc) and tmp,
#                                           # or says TSan is unavailable and exits 0
#     tsan_build PROG SOURCES... [FLAGS]    # -Werror build into $tmp/PROG; a build
#                                           # failure fails the test (exit 1)
#     tsan_run PROG [VAR=VALUE...]          # runs it; a race report or a failed CHECK counts
#     tsan_finish                           # prints `N passed, N failed`; the exit status
#
# Only a compiler that cannot build and run a trivial TSan program makes the
# test skip; our own sources failing to build is a failure, never a skip.
set -u
tsan_name=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tsan_cc=
printf 'int main(void) { return 0; }\n' >"$tmp/probe.c"
for cc in clang gcc; do
    command -v "$cc" >/dev/null 2>&1 || continue
    if "$cc" -fsanitize=thread -o "$tmp/probe" "$tmp/probe.c" 2>/dev/null && "$tmp/probe" 2>/dev/null; then
        tsan_cc=$cc
        break
    fi
done
if [ -z "$tsan_cc" ]; then
    echo "$tsan_name: no compiler here builds and runs ThreadSanitizer binaries; skipped"
    echo "0 passed, 0 failed"
    exit 0
fi
tsan_passed=0 tsan_failed=0

tsan_build() {
    local prog=$1; shift
    if ! "$tsan_cc" -std=c11 -Wall -Wextra -Werror -O1 -g -fsanitize=thread -I. -D_GNU_SOURCE -pthread \
        -o "$tmp/$prog" "$@" 2>"$tmp/cc.err"; then
        echo "$tsan_name: cannot build $prog with ThreadSanitizer ($tsan_cc):"
        sed 's/^/    /' "$tmp/cc.err" | head -20
        echo "0 passed, 1 failed"
        exit 1
    fi
}

tsan_run() {
    local prog=$1; shift
    # exitcode: a race report fails the run even when every CHECK passed.
    env "$@" TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1" "$tmp/$prog" >"$tmp/out" 2>&1
    local rc=$? line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/out" | tail -n 1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        echo "$tsan_name: $prog under ThreadSanitizer ($tsan_cc) exited $rc:"
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
