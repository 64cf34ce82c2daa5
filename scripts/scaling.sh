#!/usr/bin/env bash
# scripts/scaling.sh: the batch-size scaling study of Goyal et al., for
# CIFAR-10. Trains the same model at global batch 128, 256, ..., 8192
# (replicas = batch / the plan's per-device batch, sharing the devices
# present) twice per batch: with the plan's lr unscaled and no warmup, and
# with linear lr scaling plus a warmup; then writes scaling.md (final test
# accuracy per batch) and scaling.svg (test accuracy against batch size,
# log2 axis), beside each run's log and metrics.
#
# LARS is not implemented in dpc: the study says so in its output, table
# and plot instead of showing a curve for it.
#
# Options:
#   --batches "B1 B2 ..."  global batches (default "128 256 512 1024 2048 4096 8192");
#                    each a multiple of the plan's per-device batch
#   --epochs N       epochs per run (default: the plan's); --steps N: at most N steps
#   --warmup K       warmup epochs of the scaled runs (default 5)
#   --data DIR|synthetic   (default: $DPC_DATA, else /tmp/cifar10/cifar-10-batches-bin
#                    when present, else synthetic)
#   --model FILE     (default models/resnet18.net)
#   --out DIR        (default results/scaling-<UTC date and time>)
#   --device auto|cpu|cuda
# 64 replicas of ResNet-18 on a CPU are slow: shorten with --batches, --epochs
# and --steps there.
set -u
cd "$(dirname "$0")/.."
bin=${DPC_BIN:-bin}

die() { echo "scaling: error: $*" >&2; exit 1; }
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: '$2' is not a positive integer"; }

batches="128 256 512 1024 2048 4096 8192" epochs= steps= warmup=5 data=${DPC_DATA:-}
model=models/resnet18.net out= device=auto
while [ $# -gt 0 ]; do
    case $1 in
    --batches) need_value "$@"; batches=$2; shift 2 ;;
    --epochs) need_value "$@"; positive "$1" "$2"; epochs=$2; shift 2 ;;
    --steps) need_value "$@"; positive "$1" "$2"; steps=$2; shift 2 ;;
    --warmup) need_value "$@"; [[ $2 =~ ^[0-9]+$ ]] || die "--warmup: '$2' is not a non-negative integer"
        warmup=$2; shift 2 ;;
    --data) need_value "$@"; data=$2; shift 2 ;;
    --model) need_value "$@"; model=$2; shift 2 ;;
    --out) need_value "$@"; out=$2; shift 2 ;;
    --device) need_value "$@"; device=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see scripts/scaling.sh --help)" ;;
    esac
done
if [ -z "$data" ]; then
    data=synthetic
    [ -f /tmp/cifar10/cifar-10-batches-bin/data_batch_1.bin ] && data=/tmp/cifar10/cifar-10-batches-bin
fi
[ "$data" = synthetic ] || [ -d "$data" ] || die "--data: '$data' is not a folder"
[ -f "$model" ] || die "--model: '$model' not found"
[ -x "$bin/dprun" ] || die "$bin/dprun not found: run make first"
out=${out:-results/scaling-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out" || die "cannot create $out"

plan=$out/model.plan
"$bin/dpc" "$model" -o "$plan" >"$out/dpc.log" 2>&1 || { cat "$out/dpc.log" >&2; die "dpc failed on $model"; }
per_device=$("$bin/dprun" "$plan" --info | grep -m1 -o 'batch [0-9]* per device' | cut -d' ' -f2)
[ -n "$per_device" ] || die "cannot read the per-device batch of $plan"
for b in $batches; do
    positive "--batches" "$b"
    [ $((b % per_device)) = 0 ] || die "--batches: $b is not a multiple of the plan's per-device batch $per_device"
done

common=(--data "$data" --device "$device")
[ -n "$epochs" ] && common+=(--epochs "$epochs")
[ -n "$steps" ] && common+=(--steps "$steps")
lars_note="LARS: not implemented in dpc, so not run"
echo "scaling: $lars_note"
modes=(plain scaled)
mode_args=("--lr-scaling none --warmup-epochs 0" "--lr-scaling linear --warmup-epochs $warmup")
mode_names=("lr unscaled, no warmup" "linear scaling + ${warmup}-epoch warmup")

# One table row per batch: the final test accuracy of each mode, or why none.
result() { # FILE.log: the test accuracy, or a short reason
    local acc
    acc=$(grep -o 'test accuracy [0-9.]*$' "$1" | tail -n 1 | cut -d' ' -f3)
    if [ -n "$acc" ]; then echo "$acc"; return; fi
    local why; why=$(grep -m1 -o 'error: .*' "$1" | cut -c8- | tr '|' '/')
    echo "failed: ${why:-no final line}"
}
curves=()
table="| global batch | replicas | ${mode_names[0]}: test accuracy | ${mode_names[1]}: test accuracy | LARS |"
table+=$'\n'"| ---: | ---: | ---: | ---: | --- |"
for b in $batches; do
    gpus=$((b / per_device))
    row="| $b | $gpus |"
    for m in 0 1; do
        name=${modes[$m]}-$b
        # shellcheck disable=SC2206 # the mode's options split into words on purpose
        args=(--gpus "$gpus" ${mode_args[$m]})
        echo "scaling: batch $b, ${mode_names[$m]}: $bin/dprun $plan ${args[*]} ${common[*]}"
        "$bin/dprun" "$plan" "${args[@]}" "${common[@]}" --metrics "$out/$name.jsonl" >"$out/$name.log" 2>&1
        r=$(result "$out/$name.log")
        echo "scaling: batch $b, ${mode_names[$m]}: $r"
        row+=" $r |"
        case $r in failed*) ;; *) curves+=("${mode_names[$m]}=$out/$name.jsonl") ;; esac
    done
    table+=$'\n'"$row not implemented |"
done

plan_epochs="the plan's"
runs_desc="$(basename "$model" .net), data $data, device $device, ${epochs:-$plan_epochs} epoch(s) per run"
[ -n "$steps" ] && runs_desc+=", at most $steps steps per run"
{
    echo "# Batch-size scaling study ($(basename "$model" .net))"
    echo
    echo "$runs_desc. Per-device batch $per_device; replicas share the devices present."
    echo "$lars_note."
    echo
    echo "$table"
} >"$out/scaling.md"
status=0
if [ ${#curves[@]} -gt 0 ]; then
    short_data=CIFAR-10
    [ "$data" = synthetic ] && short_data="synthetic data"
    scripts/plot --vs-batch -o "$out/scaling.svg" --title "$(basename "$model" .net): test accuracy vs global batch" \
        --note "$short_data, ${epochs:-$plan_epochs} epoch(s) per run${steps:+ (at most $steps steps)}; LARS not implemented in dpc" \
        "${curves[@]}" || status=1
else
    echo "scaling: no run finished: no plot" >&2
    status=1
fi
cat "$out/scaling.md"
echo "scaling: table $out/scaling.md, plot $out/scaling.svg, logs and metrics in $out"
exit $status
