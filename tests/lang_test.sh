#!/usr/bin/env bash
# run: tier=check
# The .net language's constants, `dpc --set` and `repeat`, end to end:
# a plan compiled with --set is byte-identical to the plan of the file
# edited to that value (the plan records nothing of the constants), and a
# `repeat N { ... }` gives the plan of its body written out N times (the
# same parameter names, mlp0, mlp1, ...). --set's errors: an unknown name
# (with the nearest constant), a value of the wrong kind, a value that is
# none, a negative repeat count, and --set with --from-ir.
# Run from the repository root. Prints `N passed, N failed`.
. tests/lib.sh
dpc=$(cd "$(dirname "$bin/dpc")" && pwd)/dpc

cat >"$tmp/rep.net" <<'NET'
const width = 16
const layers = 3
const std = 0.02 / sqrt(2 * layers)
const wd = 0.0001
input image[3, 8, 8]
input label class(10)
block mlp(x) {
    return x + tanh(dense(x, width)) * std
}
network rep {
    x = dense(flatten(image), width)
    repeat layers { x = mlp(x) }
    logits = dense(x, 10)
    loss = softmax_cross_entropy(logits, label)
}
train {
    batch 2 * 4
    epochs 1
    optimizer sgd(momentum=0.9, wd=wd)
}
NET
# Plans record the source's path and each node's line:col, so the
# variants sit at the same path in directories of their own and keep the
# line layout: the edited constants have as many characters, the unrolled
# calls are on the repeat's line (the block's nodes carry the block's
# positions either way).
mkdir -p "$tmp/edited" "$tmp/unrolled"
sed 's/^const width = 16/const width = 24/; s/^const layers = 3/const layers = 2/; s/^const wd = 0.0001/const wd = 0.0003/' \
    "$tmp/rep.net" >"$tmp/edited/rep.net"
sed 's/^    repeat layers { x = mlp(x) }/    x = mlp(x); x = mlp(x); x = mlp(x)/' \
    "$tmp/rep.net" >"$tmp/unrolled/rep.net"
check "the unrolled file has no repeat" lacks repeat "$tmp/unrolled/rep.net"
plan() { # DIR PLAN [ARGS...]: dpc rep.net -o PLAN ARGS in DIR
    local dir=$1 out=$2
    shift 2
    (cd "$dir" && "$dpc" rep.net -o "$out" "$@") 2>"$tmp/err" || bad "$dir $*: $(cat "$tmp/err")"
}
plan "$tmp" "$tmp/rep.plan"
plan "$tmp/unrolled" "$tmp/unrolled.plan"
check "repeat: the plan of the unrolled file" cmp -s "$tmp/rep.plan" "$tmp/unrolled.plan"
plan "$tmp" "$tmp/set.plan" --set width=24 --set layers=2 --set wd=0.0003
plan "$tmp/edited" "$tmp/edited.plan"
check "--set: the plan of the edited file" cmp -s "$tmp/set.plan" "$tmp/edited.plan"
differ() { ! cmp -s "$1" "$2"; }
"$dpc" "$tmp/rep.net" --set wd=0.0003 --set batch=1 --summary >/dev/null 2>"$tmp/err"
check "--set of a name the train section cannot use" grep -q "no constant 'batch'" "$tmp/err"
check "--set changes the plan" differ "$tmp/set.plan" "$tmp/rep.plan"

"$dpc" "$tmp/rep.net" --set layers=2 --params >"$tmp/params" 2>&1
check "--set with --params" grep -q '^param mlp1.dense0.weight' "$tmp/params"
check "--set layers=2: two blocks" lacks 'mlp2' "$tmp/params"
"$dpc" "$tmp/rep.net" --set layers=0 --set std=0.1 --summary >"$tmp/summary" 2>&1
check "--set layers=0 with --summary" lacks 'mlp0' "$tmp/summary"

expect_fail_line "--set unknown name" \
    "rep.net: error: --set widht=8: no constant 'widht'; did you mean 'width'?" \
    "$dpc" "$tmp/rep.net" --set widht=8 --summary
expect_fail_line "--set a number for an integer" \
    "--set layers=2.5: constant 'layers' (declared at 2:7) is an integer, not 2.5" \
    "$dpc" "$tmp/rep.net" --set layers=2.5 --summary
expect_fail_line "--set true for an integer" \
    "--set width=true: constant 'width' (declared at 1:7) is an integer, not true" \
    "$dpc" "$tmp/rep.net" --set width=true --summary
expect_fail_line "--set a value that is none" \
    "--set std=0.0.1: '0.0.1' is not an integer, a number, true or false" \
    "$dpc" "$tmp/rep.net" --set std=0.0.1 --summary
expect_fail_line "--set without a value" "--set takes NAME=VALUE, got: width" \
    "$dpc" "$tmp/rep.net" --set width --summary
expect_fail_line "--set a negative repeat count" "repeat count must not be negative, got -1" \
    "$dpc" "$tmp/rep.net" --set layers=-1 --set std=0.1 --summary
expect_fail_line "--set in a file without constants" \
    "--set width=8: no constant 'width' (the file declares none)" \
    "$dpc" models/mlp.net --set width=8 --summary
"$dpc" "$tmp/rep.net" --dump-ir >"$tmp/rep.ir" 2>"$tmp/err" || bad "dump-ir: $(cat "$tmp/err")"
expect_fail_line "--set with --from-ir" "--set: the graph of --from-ir" \
    "$dpc" --from-ir "$tmp/rep.ir" --set width=8 --summary
finish
