#!/usr/bin/env bash
# run: tier=check
# CLI contract tests for dpc and dprun (docs/DESIGN.md §15): exit codes, messages,
# parameter counts of the models, plan round trip and refusal of bad plans.
. tests/lib.sh

# parameters: N of the models (Gluon's counts; resnet34/50/18_v2 and
# mobilenet_v2 those of the model zoo's resnet34_v1, resnet50_v1, resnet18_v2
# and mobilenet_v2_1_0 with classes=10)
for pair in resnet18:11181642 resnet18_cifar:11173962 resnet34:21289802 resnet50:23547402 \
    resnet18_v2:11179978 mobilenet_v2:2237760; do
    m=${pair%%:*} want=${pair##*:}
    got=$("$bin/dpc" "models/$m.net" --summary | tail -n 1)
    [ "$got" = "parameters: $want" ] && ok || bad "$m summary: '$got', want 'parameters: $want'"
done

# usage errors
expect_fail_line no-args "no model file" "$bin/dpc"
expect_fail_line nothing-to-do "nothing to do" "$bin/dpc" models/mlp.net
expect_fail_line unknown-option "unknown option: --frobnicate (see dpc --help)" "$bin/dpc" models/mlp.net --frobnicate
expect_fail_line near-option "unknown option: --batchh (see dpc --help); did you mean '--batch'?" "$bin/dpc" models/mlp.net --batchh 3
expect_fail_line bad-batch "--batch needs a positive integer" "$bin/dpc" models/mlp.net --batch 0 -o "$tmp/x.plan"
expect_fail_line missing-model "nope.net" "$bin/dpc" "$tmp/nope.net" -o "$tmp/x.plan"
expect_fail_line dump-unknown-pass "unknown pass" "$bin/dpc" models/mlp.net --dump-ir=frobnicate
# --layout alone has nothing to do; --layout-report is a report: cnn_small
# keeps every activation channel-major (no transpose), the dump marks them
expect_fail_line layout-nothing-to-do "nothing to do" "$bin/dpc" models/mlp.net --layout
"$bin/dpc" models/cnn_small.net --batch 2 --layout-report >"$tmp/lay.out" 2>&1
check layout-report grep -q '^layout train: [1-9][0-9]* channel-major tensors, 0 transposes$' "$tmp/lay.out"
check layout-report-eval grep -q '^layout eval: [1-9][0-9]* channel-major tensors, 0 transposes$' "$tmp/lay.out"
"$bin/dpc" models/cnn_small.net --batch 2 --layout --dump-ir >"$tmp/lay.ir" 2>&1
check layout-dump grep -q '^%[0-9]* = conv .* cnhw' "$tmp/lay.ir"
"$bin/dpc" models/cnn_small.net --batch 2 --dump-ir >"$tmp/nolay.ir" 2>&1
check layout-off-dump-plain bash -c "! grep -q 'cnhw' '$tmp/nolay.ir'"

# compile, inspect, dump, dot
if "$bin/dpc" models/resnet18.net -o "$tmp/r.plan" 2>"$tmp/err"; then ok; else bad "compile resnet18: $(cat "$tmp/err")"; fi
info=$("$bin/dprun" "$tmp/r.plan" --info 2>&1)
case "$info" in *resnet18_v1*) ok ;; *) bad "--info lacks the model name: $info" ;; esac
case "$info" in *11181642*) ok ;; *) bad "--info lacks the parameter count" ;; esac
"$bin/dpc" models/resnet18.net --dump-ir >"$tmp/a.ir" && "$bin/dpc" models/resnet18.net --dump-ir >"$tmp/b.ir"
cmp -s "$tmp/a.ir" "$tmp/b.ir" && [ -s "$tmp/a.ir" ] && ok || bad "--dump-ir is not stable"
grep -q '= conv ' "$tmp/a.ir" && ok || bad "--dump-ir shows no conv"
"$bin/dpc" models/mlp.net --dot "$tmp/g.dot" && head -c 7 "$tmp/g.dot" | grep -q digraph && ok || bad "--dot"
# Outputs that name the model, or cannot be written, are refused before any work.
cp models/mlp.net "$tmp/m.net" && cp models/mlp.net "$tmp/m.keep"
expect_fail_line out-is-model "-o $tmp/m.net is the model being compiled" "$bin/dpc" "$tmp/m.net" -o "$tmp/m.net"
ln -s "$tmp/m.net" "$tmp/m.alias"
expect_fail_line out-is-model-alias "-o $tmp/m.alias is the model being compiled" "$bin/dpc" "$tmp/m.net" -o "$tmp/m.alias"
expect_fail_line dot-is-model "--dot $tmp/m.net is the model being compiled" "$bin/dpc" "$tmp/m.net" --dot "$tmp/m.net"
cmp -s "$tmp/m.net" "$tmp/m.keep" && ok || bad "the model was changed"
expect_fail_line out-bad-dir "-o $tmp/no/dir/x.plan: cannot write in $tmp/no/dir" "$bin/dpc" "$tmp/m.net" -o "$tmp/no/dir/x.plan"
mkfifo "$tmp/p.fifo"
expect_fail_line out-fifo "not a regular file (a FIFO)" timeout 60 "$bin/dpc" "$tmp/m.net" -o "$tmp/p.fifo"
# A link planted at the old temporary's name is not followed.
printf 'precious' >"$tmp/victim" && ln -s "$tmp/victim" "$tmp/v.plan.tmp"
"$bin/dpc" "$tmp/m.net" -o "$tmp/v.plan" && [ "$(cat "$tmp/victim")" = precious ] && [ -f "$tmp/v.plan" ] && ok ||
    bad "dpc -o followed a planted link"
expect_fail_line dot-unwritable "dpc: error: --dot $tmp/no/such/g.dot: cannot write in $tmp/no/such: No such file or directory" \
    "$bin/dpc" models/mlp.net --dot "$tmp/no/such/g.dot" -o "$tmp/dotfail.plan"
[ ! -e "$tmp/dotfail.plan" ] && ok || bad "--dot failed but a plan was written"
"$bin/dpc" models/mlp.net --batch 3 -o "$tmp/m3.plan" && "$bin/dprun" "$tmp/m3.plan" --info | grep -q 'batch 3 per device' && ok || bad "--batch override"

# 20000 declared (unused) inputs compile: elaboration and verification stay
# linear in the number of sources (they were quadratic)
{
    echo 'input image[3, 32, 32]'; echo 'input label class(10)'
    seq 0 19999 | sed 's/.*/input u&[4]/'
    printf 'network n {\n    logits = dense(flatten(image), 10)\n    loss = softmax_cross_entropy(logits, label)\n}\n'
} >"$tmp/many.net"
if "$bin/dpc" "$tmp/many.net" -o "$tmp/many.plan" 2>"$tmp/err"; then ok; else bad "20000 inputs: $(cat "$tmp/err")"; fi
"$bin/dprun" "$tmp/many.plan" --info | grep -q 'u19999 \[128,4\]' && ok || bad "20000 inputs: the plan lacks input u19999"

# plans that must be refused
expect_fail_line plan-missing "cannot open" "$bin/dprun" "$tmp/none.plan" --info
printf 'hello\n' >"$tmp/text.plan"
expect_fail_line plan-text "not a dpc plan" "$bin/dprun" "$tmp/text.plan" --info
size=$(stat -c %s "$tmp/r.plan")
head -c $((size / 2)) "$tmp/r.plan" >"$tmp/trunc.plan"
expect_fail_line plan-truncated "truncated" "$bin/dprun" "$tmp/trunc.plan" --info
cp "$tmp/r.plan" "$tmp/flip.plan"
printf '\xff' | dd of="$tmp/flip.plan" bs=1 seek=$((size - 10)) conv=notrunc status=none
expect_fail_line plan-corrupt "checksum" "$bin/dprun" "$tmp/flip.plan" --info
cp "$tmp/r.plan" "$tmp/ver.plan"
printf '\x63' | dd of="$tmp/ver.plan" bs=1 seek=8 conv=notrunc status=none
expect_fail_line plan-version "version 99" "$bin/dprun" "$tmp/ver.plan" --info

# --cost: both programs' tables and totals; an unknown --device is refused naming the known ones
if "$bin/dpc" models/resnet18.net --cost >"$tmp/cost.txt" 2>"$tmp/err"; then ok; else bad "--cost: $(cat "$tmp/err")"; fi
for prog in train eval; do
    grep -q "^$prog program on h200" "$tmp/cost.txt" && ok || bad "--cost lacks the $prog table"
    grep -q "^$prog total: modelled step [0-9.]* us, lower bound [0-9.]* us$" "$tmp/cost.txt" && ok || bad "--cost lacks the $prog step time"
    grep -q "^$prog total: [0-9]* kernels and [0-9]* GEMMs per step, [0-9]* bytes per step" "$tmp/cost.txt" && ok || bad "--cost lacks the $prog counts"
    grep -q "^$prog total: [0-9.]* GFLOP per step$" "$tmp/cost.txt" && ok || bad "--cost lacks the $prog GFLOP"
done
grep -Eq '^ +kernel +threads +serial +bytes +flops +us$' "$tmp/cost.txt" && ok || bad "--cost lacks the column header"
grep -Eq '^ +k2_bn_mean_bn_var_bn_apply_ema_relu_assign_pass1 +589824 +4 ' "$tmp/cost.txt" && ok || bad "--cost: BatchNorm statistics row (576 blocks of 1024 threads, 4 elements each)"
"$bin/dpc" models/resnet18.net --cost --device h200 | cmp -s - "$tmp/cost.txt" && ok || bad "--device h200 is not the default"
expect_fail_line cost-unknown-device "unknown device tpu9 (known: h200, h100, a100)" "$bin/dpc" models/mlp.net --cost --device tpu9
expect_fail_line cost-device-value "--device needs a value" "$bin/dpc" models/mlp.net --cost --device
expect_fail_line batch-then-flag "--batch needs a value" "$bin/dpc" models/mlp.net --batch --cost
# `--dump-ir PASS` (a space, not '='): PASS is taken as a model file; the refusal says so.
hint="'autodiff' is a pass"
expect_fail_line dump-ir-space-after "more than one model file: autodiff ($hint: --dump-ir=autodiff dumps the IR after it)" \
    "$bin/dpc" models/mlp.net --dump-ir autodiff
expect_fail_line dump-ir-space-before "more than one model file: models/mlp.net ($hint: --dump-ir=autodiff dumps the IR after it)" \
    "$bin/dpc" --dump-ir autodiff models/mlp.net
expect_fail_line dump-ir-space-alone "no model file: $hint, not a file (--dump-ir=autodiff dumps the IR after it)" \
    "$bin/dpc" --dump-ir autodiff
expect_fail_line two-models "dpc: error: more than one model file: models/cnn_small.net" \
    "$bin/dpc" models/mlp.net models/cnn_small.net --summary
# An integer or a size is the number alone: no white space or '+' before it.
expect_fail_line batch-plus "--batch needs a positive integer, got: +8" "$bin/dpc" models/mlp.net --batch +8 --summary
expect_fail_line batch-space "--batch needs a positive integer, got:  8" "$bin/dpc" models/mlp.net --batch " 8" --summary
expect_fail_line max-memory-plus "needs a size such as 16G or 512M, got: +8G" "$bin/dpc" models/mlp.net --max-memory +8G --summary
expect_fail_line steps-plus "--steps: '+1' is not an integer in 0.." "$bin/dprun" "$tmp/r.plan" --steps +1
expect_fail_line seed-space "--seed: ' 1' is not a non-negative integer" "$bin/dprun" "$tmp/r.plan" --seed " 1"
# --version: the release, the formats a plan holds and the build's parts, on
# stdout, exit 0, for both tools.
for tool in dpc dprun; do
    out=$("$bin/$tool" --version 2>&1) && printf '%s\n' "$out" |
        grep -Eq "^$tool [0-9]+\.[0-9]+\.[0-9]+ \(plan format [0-9]+, kernel program format [0-9]+\)$" &&
        printf '%s\n' "$out" | grep -q '^build: cuda backend .*, MPI .*, oneDNN convolutions .*, sanitizers ' &&
        ok || bad "$tool --version: $out"
done
# An unknown option is refused whatever comes before it, --version and --help
# included: exit 1, one line, nothing on stdout.
for cmd in "dpc --version --bogus" "dpc --help --bogus" "dprun --version --bogus" \
    "dprun --help --bogus" "dprun predict --help --bogus" "dpc --bogus --version"; do
    tool=${cmd%% *}
    what=${cmd#dprun predict }
    [ "$what" = "$cmd" ] || tool="dprun predict"
    expect_fail_line "$cmd" "unknown option: --bogus (see $tool --help)" "$bin/"$cmd
    check "$cmd: nothing on stdout" test -z "$("$bin/"$cmd 2>/dev/null)"
done

finish
