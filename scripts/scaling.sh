#!/usr/bin/env bash
# scripts/scaling.sh: the batch-size scaling study of Goyal et al., for
# CIFAR-10. Trains the same model at global batch 128, 256, ..., 8192
# (replicas = batch / the per-device batch, sharing the devices present)
# once per method and batch, then writes scaling.md (final test accuracy
# per batch and method) and scaling.svg (test accuracy against batch size,
# log2 axis), beside each run's log and metrics. Methods:
#
#   plain   the model's optimizer, its lr unscaled, no warmup
#   scaled  the model's optimizer, linear lr scaling + warmup (Goyal et al.)
#   lars    LARS (--lars), linear lr scaling + warmup (You et al. 2017)
#   lamb    LAMB (--lamb) at lr --lamb-lr for the plan's reference batch,
#           square-root lr scaling + warmup (You et al. 2019)
#
# lars and lamb train the model with its `optimizer` line replaced (the
# .net files are written beside the results: model_lars.net, model_lamb.net).
# A run that diverges is shown as diverged (its error line), never dropped.
#
# Options:
#   --batches "B1 B2 ..."  global batches (default "128 256 512 1024 2048 4096 8192");
#                    each a multiple of the per-device batch
#   --methods "M ..." (default "plain scaled lars lamb")
#   --per-device B   compile the model at per-device batch B (default: the model's)
#   --epochs N       epochs per run (default: the plan's); --steps N: at most N steps
#   --warmup K       warmup epochs of the scaled methods (default 5)
#   --lars SPEC      (default 'lars(momentum=0.9, wd=0.0001, eta=0.001)')
#   --lamb SPEC      (default 'lamb(beta1=0.9, beta2=0.999, eps=1e-6, wd=0.0001)')
#   --lamb-lr X      LAMB's lr at the reference batch (default 0.01)
#   --data DIR|synthetic   (default: $DPC_DATA, else /tmp/cifar10/cifar-10-batches-bin
#                    when present, else synthetic)
#   --model FILE     (default models/resnet18.net)
#   --out DIR        (default results/scaling-<UTC date and time>)
#   --device auto|cpu|cuda
#   --resume         continue in --out: a run whose log has its final line, or
#                    stopped on a diverging loss, is kept; any other run is trained
#                    again from the start. The settings (all but --batches and
#                    --methods) must be those of the first call (kept in settings.txt)
# 64 replicas of ResNet-18 on a CPU are slow: shorten with --batches, --epochs
# and --steps there.
set -u
cd "$(dirname "$0")/.."
bin=${DPC_BIN:-bin}

die() { echo "scaling: error: $*" >&2; exit 1; }
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: '$2' is not a positive integer"; }

batches="128 256 512 1024 2048 4096 8192" epochs= steps= warmup=5 data=${DPC_DATA:-}
model=models/resnet18.net out= device=auto methods="plain scaled lars lamb" per_device_opt= resume=0
lars='lars(momentum=0.9, wd=0.0001, eta=0.001)'
lamb='lamb(beta1=0.9, beta2=0.999, eps=1e-6, wd=0.0001)' lamb_lr=0.01
while [ $# -gt 0 ]; do
    case $1 in
    --batches) need_value "$@"; batches=$2; shift 2 ;;
    --methods) need_value "$@"; methods=$2; shift 2 ;;
    --per-device) need_value "$@"; positive "$1" "$2"; per_device_opt=$2; shift 2 ;;
    --epochs) need_value "$@"; positive "$1" "$2"; epochs=$2; shift 2 ;;
    --steps) need_value "$@"; positive "$1" "$2"; steps=$2; shift 2 ;;
    --warmup) need_value "$@"; [[ $2 =~ ^[0-9]+$ ]] || die "--warmup: '$2' is not a non-negative integer"
        warmup=$2; shift 2 ;;
    --lars) need_value "$@"; lars=$2; shift 2 ;;
    --lamb) need_value "$@"; lamb=$2; shift 2 ;;
    --lamb-lr) need_value "$@"; [[ $2 =~ ^[0-9]*\.?[0-9]+([eE]-?[0-9]+)?$ ]] || die "--lamb-lr: '$2' is not a number"
        lamb_lr=$2; shift 2 ;;
    --data) need_value "$@"; data=$2; shift 2 ;;
    --model) need_value "$@"; model=$2; shift 2 ;;
    --out) need_value "$@"; out=$2; shift 2 ;;
    --device) need_value "$@"; device=$2; shift 2 ;;
    --resume) resume=1; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see scripts/scaling.sh --help)" ;;
    esac
done
for m in $methods; do
    case $m in plain | scaled | lars | lamb) ;; *) die "--methods: unknown method '$m' (plain, scaled, lars, lamb)" ;; esac
done
[ -n "$methods" ] || die "--methods: none given"
if [ -z "$data" ]; then
    data=synthetic
    [ -f /tmp/cifar10/cifar-10-batches-bin/data_batch_1.bin ] && data=/tmp/cifar10/cifar-10-batches-bin
fi
[ "$data" = synthetic ] || [ -d "$data" ] || die "--data: '$data' is not a folder"
[ -f "$model" ] || die "--model: '$model' not found"
[ -x "$bin/dprun" ] || die "$bin/dprun not found: run make first"
[ $resume = 0 ] || [ -d "$out" ] || die "--resume needs --out DIR, the folder of the runs to continue"
out=${out:-results/scaling-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out" || die "cannot create $out"
# What a resumed study must share with the runs it keeps.
settings="model=$model per-device=${per_device_opt:-plan} epochs=${epochs:-plan} steps=${steps:-none} warmup=$warmup
data=$data device=$device
lars=$lars
lamb=$lamb lamb-lr=$lamb_lr"
if [ $resume = 1 ]; then
    [ -f "$out/settings.txt" ] || die "--resume: $out/settings.txt not found (not a scaling.sh folder?)"
    [ "$(cat "$out/settings.txt")" = "$settings" ] ||
        die "--resume: the settings differ from those in $out/settings.txt: $(diff <(printf '%s\n' "$settings") "$out/settings.txt" | grep '^[<>]' | tr '\n' ' ')"
else
    printf '%s\n' "$settings" >"$out/settings.txt"
fi

# One plan per optimizer: the model's own, and the model with its
# optimizer line replaced for lars and lamb.
dpc_opts=()
[ -n "$per_device_opt" ] && dpc_opts+=(--batch "$per_device_opt")
compile() { # NET PLAN
    "$bin/dpc" "$1" "${dpc_opts[@]}" -o "$2" >>"$out/dpc.log" 2>&1 || { cat "$out/dpc.log" >&2; die "dpc failed on $1"; }
}
: >"$out/dpc.log"
compile "$model" "$out/model.plan"
for m in lars lamb; do
    [[ " $methods " = *" $m "* ]] || continue
    spec=$lars
    [ $m = lamb ] && spec=$lamb
    grep -q '^ *optimizer ' "$model" || die "$m: $model has no 'optimizer' line to replace"
    sed "s|^\( *\)optimizer .*|\1optimizer $spec|" "$model" >"$out/model_$m.net"
    compile "$out/model_$m.net" "$out/model_$m.plan"
done
info=$("$bin/dprun" "$out/model.plan" --info)
per_device=$(printf '%s\n' "$info" | grep -m1 -o 'batch [0-9]* per device' | cut -d' ' -f2)
[ -n "$per_device" ] || die "cannot read the per-device batch of $out/model.plan"
for b in $batches; do
    positive "--batches" "$b"
    [ $((b % per_device)) = 0 ] || die "--batches: $b is not a multiple of the per-device batch $per_device"
done

common=(--data "$data" --device "$device" --final-eval both)
[ -n "$epochs" ] && common+=(--epochs "$epochs")
[ -n "$steps" ] && common+=(--steps "$steps")
method_plan() { case $1 in lars | lamb) echo "$out/model_$1.plan" ;; *) echo "$out/model.plan" ;; esac; }
method_args() {
    case $1 in
    plain) echo "--lr-scaling none --warmup-epochs 0" ;;
    scaled | lars) echo "--lr-scaling linear --warmup-epochs $warmup" ;;
    lamb) echo "--lr-scaling sqrt --warmup-epochs $warmup --lr $lamb_lr" ;;
    esac
}
method_name() {
    case $1 in
    plain) echo "lr unscaled, no warmup" ;;
    scaled) echo "linear scaling + ${warmup}-epoch warmup" ;;
    lars) echo "LARS, linear scaling + ${warmup}-epoch warmup" ;;
    lamb) echo "LAMB (lr $lamb_lr), sqrt scaling + ${warmup}-epoch warmup" ;;
    esac
}

# One table row per batch: the final test accuracy of each method, or why none.
result() { # FILE.log: the test accuracy, or a short reason
    local acc
    acc=$(grep -o 'test accuracy [0-9.]*$' "$1" | tail -n 1 | cut -d' ' -f3)
    if [ -n "$acc" ]; then echo "$acc"; return; fi
    local why; why=$(grep -m1 -o 'error: .*' "$1" | cut -c8- | tr '|' '/')
    case $why in "the loss is "* | "a gradient is not finite"*) echo "diverged: ${why%%;*}"; return ;; esac
    echo "failed: ${why:-no final line}"
}
curves=()
table="| global batch | replicas |" sep="| ---: | ---: |"
for m in $methods; do table+=" $(method_name $m): test accuracy |"; sep+=" ---: |"; done
table+=$'\n'"$sep"
for b in $batches; do
    gpus=$((b / per_device))
    row="| $b | $gpus |"
    for m in $methods; do
        name=$m-$b plan=$(method_plan $m)
        # shellcheck disable=SC2207 # the method's options split into words on purpose
        args=(--gpus "$gpus" $(method_args $m))
        r=
        if [ $resume = 1 ] && [ -f "$out/$name.log" ]; then
            r=$(result "$out/$name.log")
            case $r in failed*) r= ;; *) echo "scaling: batch $b, $(method_name $m): kept: $r" ;; esac
        fi
        if [ -z "$r" ]; then
            echo "scaling: batch $b, $(method_name $m): $bin/dprun $plan ${args[*]} ${common[*]}"
            "$bin/dprun" "$plan" "${args[@]}" "${common[@]}" --metrics "$out/$name.jsonl" >"$out/$name.log" 2>&1
            r=$(result "$out/$name.log")
            echo "scaling: batch $b, $(method_name $m): $r"
        fi
        row+=" $r |"
        case $r in failed* | diverged*) ;; *) curves+=("$(method_name $m)=$out/$name.jsonl") ;; esac
    done
    table+=$'\n'"$row"
done

plan_epochs="the plan's"
runs_desc="$(basename "$model" .net), data $data, device $device, ${epochs:-$plan_epochs} epoch(s) per run"
[ -n "$steps" ] && runs_desc+=", at most $steps steps per run"
{
    echo "# Batch-size scaling study ($(basename "$model" .net))"
    echo
    echo "$runs_desc. Per-device batch $per_device; replicas share the devices present."
    [[ " $methods " = *" lars "* ]] && echo "LARS: \`optimizer $lars\`."
    [[ " $methods " = *" lamb "* ]] && echo "LAMB: \`optimizer $lamb\`, lr $lamb_lr at the reference batch."
    echo
    echo "$table"
} >"$out/scaling.md"
status=0
if [ ${#curves[@]} -gt 0 ]; then
    short_data=CIFAR-10
    [ "$data" = synthetic ] && short_data="synthetic data"
    scripts/plot --vs-batch -o "$out/scaling.svg" --title "$(basename "$model" .net): test accuracy vs global batch" \
        --note "$short_data, ${epochs:-$plan_epochs} epoch(s) per run${steps:+ (at most $steps steps)}" \
        "${curves[@]}" || status=1
else
    echo "scaling: no run finished: no plot" >&2
    status=1
fi
cat "$out/scaling.md"
echo "scaling: table $out/scaling.md, plot $out/scaling.svg, logs and metrics in $out"
exit $status
