#!/usr/bin/env bash
# run: tier=check
# One validator (ir/validate.h) for a graph and its training section,
# whatever they came from: the .net frontend,
# --from-ir's IR text and a plan refuse the same things. IR text is refused
# at the IR file's line and column the value is on; a plan (edited with its
# checksum fixed up, tests/plan_tamper.py) by section, program, node or
# fusion group, before anything is rendered or run.
. tests/lib.sh
tamper() { "$py" tests/plan_tamper.py "$@"; }
quiet() { "$@" >/dev/null 2>&1; }

"$bin/dpc" models/mlp.net --dump-ir=optimizer >"$tmp/opt.ir" || bad "dpc --dump-ir=optimizer"
"$bin/dpc" models/mlp.net -o "$tmp/mlp.plan" || bad "dpc models/mlp.net"
check "the dump continues" "$bin/dpc" --from-ir "$tmp/opt.ir" -o "$tmp/ok.plan"
check "the plan runs" quiet "$bin/dprun" "$tmp/mlp.plan" --steps 1

# ---- IR text: FILE:LINE:COL of the refused value ----------------------------
head_line=$(grep -n '^# train ' "$tmp/opt.ir" | cut -d: -f1)
ir() { # name sed-script: $tmp/name.ir from the dump
    sed "$2" "$tmp/opt.ir" >"$tmp/$1.ir"
}
col() { # name key: the column of "key=" on the train line
    sed -n "${head_line}p" "$tmp/$1.ir" | awk -v k=" $2=" '{ print index($0, k) + 1 }'
}
refuse_ir() { # test-name name want
    expect_fail_line "$1" "$3" "$bin/dpc" --from-ir "$tmp/$2.ir" -o "$tmp/x.plan"
}
ir mnist 's/dataset="cifar10"/dataset="mnist"/'
refuse_ir dataset mnist "$tmp/mnist.ir:$head_line:$(col mnist dataset): error: bad training settings: unknown dataset 'mnist' (expected cifar10, imagefolder, npy or tokens)"
ir adamw 's/optimizer=sgd/optimizer=adamw/'
refuse_ir adamw-over-sgd adamw "$tmp/adamw.ir:$head_line:$(col adamw optimizer): error: the schedule's optimizer is adamw, but the train program updates with sgd_momentum (node 24)"
ir batch 's/^# train batch=64 /# train batch=65 /'
refuse_ir header-batch batch "$tmp/batch.ir:$head_line:$(col batch batch): error: the schedule's batch is 65, but the train program's input 'image' (node 0) has batch 64"
ir mom 's/momentum=0.9 wd=0.0001 :/momentum=1e30 wd=1e38 :/'
line=$(grep -n 'momentum=1e30' "$tmp/mom.ir" | head -n 1 | cut -d: -f1)
refuse_ir momentum-attr mom "$tmp/mom.ir:$line:7: error: sgd_momentum: momentum must be in [0, 1), got 1e+30"
ir wd 's/momentum=0.9 wd=0.0001 :/momentum=0.9 wd=1e38 :/'
refuse_ir wd-attr wd "$tmp/wd.ir:$line:7: error: sgd_momentum: wd must be in [0, 1], got 1e+38"
ir hyper 's/^\(# train .*\) momentum=0.9 /\1 momentum=0.5 /'
refuse_ir schedule-vs-graph hyper "$tmp/hyper.ir:$line:1: error: node 24 (sgd_momentum) has momentum=0.90000000000000002, the schedule's momentum is 0.5"
ir epochs 's/ epochs=2 / epochs=2147483647 /'
refuse_ir epochs epochs "$tmp/epochs.ir:$head_line:$(($(col epochs epochs) + 7)): error: epochs 2147483647 out of range 1..1000000"
ir evalb 's/ eval_batch=100 / eval_batch=2147483647 /'
refuse_ir eval-batch evalb "error: eval_batch 2147483647 out of range 1..1048576"
ir power 's/ lr_scaling=/ lr_curve=poly lr_final=0 lr_power=-1 lr_scaling=/; s/ lr=0:0.01,1:0.002 / lr=0:0.01 /'
refuse_ir lr-power power "$tmp/power.ir:$head_line:$(col power lr_power): error: bad training settings: poly power must be in (0, 100], got -1"
ir std 's/ std=0.2023,/ std=1e300,/'
refuse_ir std std "$tmp/std.ir:$head_line:$(col std std): error: bad training settings: normalize std must be in (0, 1e6], got 1e+300"
ir beta 's/ wd=0.0001 lr=/ wd=0.0001 nesterov=0 exclude=0 eta=0.001 eps=1e-09 beta1=0.5 beta2=0.999 lr=/'
refuse_ir optimizer-fields beta "error: bad training settings: beta1=0.5, beta2=0.999, but sgd has neither (they stay 0.9, 0.999)"
# The train program as the eval program (at its batch): evaluation would
# write the parameters and the momenta.
{
    sed '/^# program eval/,$d; s/ eval_batch=100 / eval_batch=64 /' "$tmp/opt.ir"
    echo '# program eval'
    sed -n '/^# program train/,/^# program eval/p' "$tmp/opt.ir" | sed '1d;$d'
    echo '# end'
} >"$tmp/evaltrain.ir"
line=$(grep -n '^%35 = assign' "$tmp/evaltrain.ir" | tail -n 1 | cut -d: -f1)
refuse_ir eval-is-train evaltrain "$tmp/evaltrain.ir:$line:1: error: node 35 (assign): the eval program writes state 'dense0.weight.momentum' (an assign); evaluating must not change the model (is it the train program?)"
[ ! -e "$tmp/x.plan" ] && ok || bad "a plan was written from a refused IR file"

# ---- the frontend: the same rules, at the .net position ---------------------
sed 's/data cifar10 {/data mnist {/' models/mlp.net >"$tmp/mnist.net"
expect_fail_line net-dataset "mnist.net:21:10: error: unknown dataset 'mnist' (expected cifar10, imagefolder, npy or tokens)" \
    "$bin/dpc" "$tmp/mnist.net" -o "$tmp/x.plan"
sed 's/wd=0.0001/wd=1e38/' models/mlp.net >"$tmp/wd.net"
expect_fail_line net-wd "error: weight decay must be at most 1, got 1e+38" "$bin/dpc" "$tmp/wd.net" -o "$tmp/x.plan"
sed 's/epochs 2/epochs 2147483647/' models/mlp.net >"$tmp/epochs.net"
expect_fail_line net-epochs "error: epochs must be at most 1000000, got 2147483647" "$bin/dpc" "$tmp/epochs.net" -o "$tmp/x.plan"

# ---- plans: section, program, node ------------------------------------------
refuse_plan() { # test-name plan want
    expect_fail_line "$1" "$2: error: corrupt plan: $3" "$bin/dprun" "$2" --steps 1
}
p=$tmp/mlp.plan
tamper "$p" "$tmp/mnist.plan" schd dataset mnist
refuse_plan dataset "$tmp/mnist.plan" "schedule: unknown dataset 'mnist' (expected cifar10, imagefolder, npy or tokens)"
tamper "$p" "$tmp/adamw.plan" schd optimizer 3
refuse_plan adamw-over-sgd "$tmp/adamw.plan" "schedule: the schedule's optimizer is adamw, but the train program updates with sgd_momentum"
tamper "$p" "$tmp/b33.plan" schd batch 63
refuse_plan header-batch "$tmp/b33.plan" "schedule: the schedule's batch is 63, but the train program's input 'image' (node 0) has batch 64"
tamper "$p" "$tmp/mom.plan" fattr GTRN 0.9 1e30
refuse_plan momentum-attr "$tmp/mom.plan" "train program: node 28 (sgd_momentum): sgd_momentum: momentum must be in [0, 1), got 1e+30"
tamper "$p" "$tmp/wd.plan" fattr GTRN 0.0001 1e38
refuse_plan wd-attr "$tmp/wd.plan" "train program: node 28 (sgd_momentum): sgd_momentum: wd must be in [0, 1], got 1e+38"
tamper "$p" "$tmp/hyper.plan" schd momentum 0.5
refuse_plan schedule-vs-graph "$tmp/hyper.plan" "train program (GTRN): node 28 (sgd_momentum) has momentum=0.90000000000000002, the schedule's momentum is 0.5"
for f in "epochs 2147483647:epochs must be at most 1000000, got 2147483647" \
    "eval_batch 2147483647:eval batch must be at most 1048576, got 2147483647" \
    "lr_power -1:poly power must be in (0, 100], got -1" \
    "std0 1e300:normalize std must be in (0, 1e6], got 1e+300" \
    "normalize 7:normalize must be 0 or 1, got 7"; do
    set -- ${f%%:*}
    tamper "$p" "$tmp/f.plan" schd "$1" "$2"
    refuse_plan "schedule field $1" "$tmp/f.plan" "schedule: ${f#*:}"
done
tamper "$p" "$tmp/optm.plan" optm beta1 0.5
refuse_plan optimizer-section "$tmp/optm.plan" "optimizer (OPTM): beta1=0.5, beta2=0.999, but sgd has neither"
tamper "$p" "$tmp/nest.plan" optm nesterov 1
refuse_plan optimizer-nesterov "$tmp/nest.plan" "optimizer (OPTM): the schedule says nesterov=1, but the train program's update is not nesterov's"
tamper "$p" "$tmp/et.plan" evaltrain
tamper "$tmp/et.plan" "$tmp/evaltrain.plan" schd eval_batch 64
refuse_plan eval-is-train "$tmp/evaltrain.plan" "eval program (GEVL): node 30 (assign): the eval program writes state 'dense0.weight.momentum' (an assign)"
check "an untouched rewrite still runs" bash -c "'$py' tests/plan_tamper.py '$p' '$tmp/same.plan' schd batch 64 &&
    '$bin/dprun' '$tmp/same.plan' --steps 1 >/dev/null 2>&1"

# ---- plans: what would reach codegen or the memory plan (item 15) -------------
"$bin/dpc" models/mlp.net --dump-ir >"$tmp/final.ir"
dense=$(grep -m1 '= dense ' "$tmp/final.ir" | sed 's/^%\([0-9]*\) = dense .*/\1/')
groups=$(awk '/^# program eval/ { exit } match($0, /@g[0-9]+/) { g = substr($0, RSTART + 2, RLENGTH - 2) + 0; if (g > n) n = g } END { print n + 1 }' "$tmp/final.ir")
tamper "$p" "$tmp/gemm.plan" group GTRN "$dense" "$groups"
refuse_plan gemm-in-group "$tmp/gemm.plan" "train program (GTRN, GRPS), node $dense: fusion group $groups holds node $dense (dense), which codegen cannot fuse: a GEMM runs as a library call of its own"
tamper "$p" "$tmp/grad.plan" flags GTRN 7 4
refuse_plan grad-on-activation "$tmp/grad.plan" "train program (GTRN): node 7 (relu 'x') is flagged a gradient, but it is not PARAM.grad of a parameter"
finish
