#!/usr/bin/env bash
# tests/run.sh — runs the test programs of one tier, JOBS at a time, and adds
# up their `N passed, N failed[, N skipped]` lines; prints each program's
# wall seconds, then the ten slowest, every skip with its reason, and the
# total last.
#
#     tests/run.sh [-jJOBS] [--tier check|test|full] [--sanitize] BUILD_DIR BIN_DIR
#
# What runs where is declared in each program, not here: a script's header
# holds a line `# run: tier=T [san=no] [alone]`; a unit test's source
# (tests/unit/test_X.c) the same line in a comment. T is the lowest tier
# that runs it (check < test < full; by default check for a unit test, whose
# slow cases say their own tier (harness.h's RUN_TIER), and test for a script). san=no leaves it out of
# the sanitizer suite (work whose result ASan/UBSan cannot change: NVRTC
# compiles, TSan builds, accuracy training, the Python references). alone:
# it needs the machine to itself (timing-sensitive, or it loads every core)
# and runs after the others. The tier is exported as DPC_TIER, so a program
# may also scale its own coverage (tests/lib.sh: `tier_at_least full`).
#
# Each program gets its own TMPDIR; the kernel cache (DPC_CACHE_DIR) is one
# for every build tree and every program, since its key is the kernel's
# source and the compiler's flags, never the build's sanitizers.
set -u
jobs=1 tier=test sanitize=0
while [ $# -gt 2 ]; do
    case $1 in
    -j*) jobs=${1#-j} ;;
    --tier) tier=$2; shift ;;
    --tier=*) tier=${1#--tier=} ;;
    --sanitize) sanitize=1 ;;
    *) echo "tests/run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
build=${1:?build dir}
bin=${2:?bin dir}
case $tier in check | test | full) ;; *) echo "tests/run.sh: tier $tier: want check, test or full" >&2; exit 2 ;; esac
case $jobs in '' | *[!0-9]* | 0) echo "tests/run.sh: -j$jobs: want a count" >&2; exit 2 ;; esac
rank() { case $1 in check) echo 0 ;; test) echo 1 ;; full) echo 2 ;; *) echo 9 ;; esac; }
export DPC_BIN=$bin DPC_BUILD=$build DPC_TIER=$tier DPC_SANITIZE=$sanitize
export DPC_CACHE_DIR=${DPC_CACHE_DIR:-$(cd "$(dirname "$build")" && pwd)/cache}
mkdir -p "$DPC_CACHE_DIR"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# header SOURCE: the `run:` line's words, or empty
header() { sed -n 's/^\(#\|\/\/\| \*\|\/\*\) *run: *//p' "$1" | head -n 1; }
# A comment line that means to be a `run:` line but is not read as one (a
# stray `#` inside a C comment, a second line) would leave its program in
# the wrong tier unnoticed: refuse the suite instead, naming the line.
malformed() { # source: its bad run: lines as FILE:LINE: TEXT, or nothing
    local src=$1 first
    first=$(grep -n '^\(#\|//\| \*\|/\*\) *run: ' "$src" | head -n 1 | cut -d: -f1)
    grep -n '^[[:space:]]*\(#\|//\|\*\|/\*\).*run: *\(tier=\|san=\|alone\)' "$src" |
        while IFS=: read -r line text; do
            [ "$line" = "$first" ] || echo "$src:$line: $text"
        done
    local w
    for w in $(header "$src"); do
        case $w in tier=check | tier=test | tier=full | san=no | alone) ;;
        *) echo "$src:$first: unknown word '$w' (want tier=check|test|full, san=no, alone)" ;;
        esac
    done
}
parallel=() solo=() left_out=()
add() { # name, source, default tier, command...
    local name=$1 src=$2 want=$3; shift 3
    local bad; bad=$(malformed "$src")
    if [ -n "$bad" ]; then
        printf 'tests/run.sh: a run: line it cannot read:\n%s\n' "$bad" >&2
        exit 2
    fi
    local words; words=$(header "$src")
    local w alone=0 san=yes
    for w in $words; do
        case $w in tier=*) want=${w#tier=} ;; san=no) san=no ;; alone) alone=1 ;; esac
    done
    [ "$(rank "$want")" -le "$(rank "$tier")" ] || return 0
    if [ $sanitize = 1 ] && [ $san = no ]; then left_out+=("$name"); return 0; fi
    printf '%s\n' "$@" >"$work/$name.cmd"
    if [ $alone = 1 ]; then solo+=("$name"); else parallel+=("$name"); fi
}
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    add "$n" "tests/unit/$n.c" check "$t"
done
for s in tests/*_test.sh; do
    [ -f "$s" ] || continue
    add "$(basename "$s")" "$s" test bash "$s"
done

launch() { # name: runs it in the background, its log, status and seconds in $work
    local name=$1
    mkdir -p "$work/tmp.$name"
    (
        mapfile -t cmd <"$work/$name.cmd"
        start=$(date +%s.%N)
        TMPDIR=$work/tmp.$name "${cmd[@]}" >"$work/$name.log" 2>&1 </dev/null
        echo $? >"$work/$name.rc"
        echo "$start $(date +%s.%N)" | awk '{ printf "%.1f\n", $2 - $1 }' >"$work/$name.sec"
    ) &
    pids[$!]=$name
}
passed=0 failed=0 skipped=0
declare -A pids=()
report() { # name
    local name=$1 log=$work/$1.log rc sec line
    rc=$(cat "$work/$name.rc") sec=$(cat "$work/$name.sec")
    echo "$sec $name" >>"$work/times"
    grep -h '^SKIP: ' "$log" | sed "s/^SKIP: /$name: /" >>"$work/skips"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $name: exited $rc without a result line (${sec}s)"
        sed 's/^/    /' "$log" | tail -n 30
        failed=$((failed + 1))
        return
    fi
    local p f s=0
    p=${line%% passed*} f=${line#*, } f=${f%% failed*}
    case "$line" in *skipped*) s=${line##*failed, } s=${s%% skipped*} ;; esac
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    if [ "$f" != 0 ] || [ "$rc" != 0 ]; then
        echo "FAIL $name ($line, exit $rc, ${sec}s)"
        grep -v -E '^[0-9]+ passed' "$log" | sed 's/^/    /' | tail -n 40
        [ "$f" = 0 ] && failed=$((failed + 1))
    else
        printf 'ok   %-28s %7ss  (%s)\n' "$name" "$sec" "$line"
    fi
    rm -rf "$work/tmp.$name"
}
reap_one() { # waits for one running program and reports it
    local done_pid
    wait -n -p done_pid
    report "${pids[$done_pid]}"
    unset "pids[$done_pid]"
}
run_all() { # max jobs, names...
    local max=$1 name; shift
    for name in "$@"; do
        [ ${#pids[@]} -lt "$max" ] || reap_one
        launch "$name"
    done
    while [ ${#pids[@]} -gt 0 ]; do reap_one; done
}
t0=$(date +%s)
echo "tests/run.sh: tier $tier, $((${#parallel[@]} + ${#solo[@]})) programs, $jobs at a time$([ $sanitize = 1 ] && echo ', under the sanitizers')"
for n in "${left_out[@]}"; do echo "not under the sanitizers: $n"; done
: >"$work/times"
: >"$work/skips"
run_all "$jobs" "${parallel[@]}"
[ ${#solo[@]} -gt 0 ] && run_all 1 "${solo[@]}"
echo "ten slowest (wall seconds):"
sort -rn "$work/times" | head -n 10 | awk '{ printf "  %7.1f  %s\n", $1, $2 }'
if [ -s "$work/skips" ]; then
    echo "skipped, with the reason:"
    sed 's/^/  /' "$work/skips"
fi
echo "tests/run.sh: tier $tier took $(($(date +%s) - t0)) s"
if [ "$skipped" -gt 0 ]; then echo "$passed passed, $failed failed, $skipped skipped"; else echo "$passed passed, $failed failed"; fi
[ "$failed" = 0 ]
