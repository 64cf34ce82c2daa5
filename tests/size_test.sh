#!/usr/bin/env bash
# run: tier=check san=no
# Files and functions stay small enough to hold one concern: no source
# file of the compiler, the tools, bench/ or scripts/ over 800 lines, no
# file of runtime/ (whose rooms are split along their concerns) over 600,
# and no C function over 100 lines, unless the comment just above it says
# it is "one flat table" or "one flat switch" (a list of cases, one concern
# however long). A function is counted from the line holding its opening
# brace to the `}` in column 0 that closes it. A violation prints as
# FILE:LINE: what. The checker also runs on a small tree of deliberate
# violations, so its failure path runs every time.
# Runs from the repository root. Prints `N passed, N failed`.
. tests/lib.sh
file_max=800 runtime_max=600 func_max=100

# size_check ROOT: the violations under ROOT, one line each; exit 1 when
# there is any.
size_check() {
    local root=$1 out
    out=$(
        cd "$root" || exit
        find base frontend ir format passes codegen driver cli runtime bench scripts \
            -type f \( -name '*.[chly]' -o -name '*.py' -o -name '*.sh' \) 2>/dev/null | sort |
            while read -r f; do
                n=$(wc -l <"$f")
                max=$file_max
                case $f in runtime/*) max=$runtime_max ;; esac
                [ "$n" -le "$max" ] || echo "$f:1: $n lines, over $max"
            done
        find base frontend ir format passes codegen driver cli runtime bench -name '*.c' 2>/dev/null |
            sort | xargs -r awk -v max=$func_max '
            FNR == 1 { infn = 0; cand = ""; flat = 0 }
            # a comment saying the next function is exempt
            /\/\*|^ \*/ && /one flat (table|switch)/ { flat = FNR }
            # a signature: at column 0, a "(", no ";" at the end
            !infn && /^[A-Za-z_]/ && !/;[ ]*$/ && !/^(typedef|struct|enum|union|#)/ && /\(/ {
                cand = $0; candline = FNR
            }
            !infn && cand != "" && /\{[ ]*$/ && !/=[ ]*\{[ ]*$/ {
                infn = 1; start = FNR; name = cand; exempt = flat && candline - flat <= 3; cand = ""; next
            }
            !infn && /;[ ]*$/ { cand = "" }
            infn && /^\}/ {
                n = FNR - start
                if (n > max && !exempt) {
                    sub(/\(.*/, "", name); k = split(name, w, /[ *]+/)
                    printf "%s:%d: function %s is %d lines, over %d\n", FILENAME, start, w[k], n, max
                }
                infn = 0
            }'
    )
    [ -z "$out" ] && return 0
    echo "$out"
    return 1
}

# ---- the tree ------------------------------------------------------------------
check "files and functions within their sizes" size_check .

# ---- the checker finds what it should, and only that ------------------------------
fake=$tmp/tree
mkdir -p "$fake/runtime/exec" "$fake/codegen"
seq 601 | sed 's/^/\/\/ line /' >"$fake/runtime/exec/big.c"   # over runtime's 600
seq 600 | sed 's/^/\/\/ line /' >"$fake/codegen/fine.c"        # within 800
{
    echo 'static int long_one(int x) {'
    for i in $(seq 101); do echo "    x += $i;"; done
    echo '    return x;'
    echo '}'
    echo '/* Each op to its rule: one flat switch. */'
    echo 'static int table_like(int x) {'
    for i in $(seq 120); do echo "    x += $i;"; done
    echo '}'
    echo 'int short_one(void) {'
    echo '    return 0;'
    echo '}'
} >"$fake/codegen/funcs.c"
size_check "$fake" >"$tmp/out" && bad "the doctored tree passed"
check "a runtime file over 600 lines is caught" grep -q '^runtime/exec/big.c:1: 601 lines, over 600' "$tmp/out"
check "a function over 100 lines is caught" grep -q '^codegen/funcs.c:1: function long_one is 103 lines' "$tmp/out"
check "nothing else is reported (exempt, short, within limits)" \
    test "$(wc -l <"$tmp/out")" = 2
finish
