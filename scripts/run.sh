#!/usr/bin/env bash
# `make run`: compile ResNet-18 (models/resnet18.net) into build/resnet18.plan
# and train it, on CIFAR-10 from $DPC_DATA when set, else on the built-in
# synthetic dataset.
#
# With a CUDA backend and a GPU it runs the plan's full schedule (45 epochs).
# Without one the full schedule takes many hours on a CPU, so it does a
# short run: three epochs of the synthetic set (enough to learn it, about
# two minutes on two cores), or 50 steps on CIFAR-10 (its
# final accuracy pass over 60,000 images costs a few minutes by itself);
# DPC_RUN_STEPS=N sets the step count. DPC_FULL=1 asks for the full schedule
# anyway; extra arguments go to dprun.
set -eu
cd "$(dirname "$0")/.."
bin=${DPC_BIN:-bin}
plan=build/resnet18.plan
mkdir -p build
"$bin/dpc" models/resnet18.net -o "$plan"
echo "make run: compiled models/resnet18.net -> $plan"

data_args=()
if [ -n "${DPC_DATA:-}" ]; then
    data_args=(--data "$DPC_DATA")
else
    echo "make run: DPC_DATA is unset: training on the synthetic dataset" \
        "(DPC_DATA=DIR make run trains on CIFAR-10 binary files)"
fi

# dprun refuses --device cuda up front when the build has no CUDA backend,
# so this probe is cheap; nvidia-smi tells whether a GPU is present.
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
    "$bin/dprun" "$plan" --device cuda --schedule >/dev/null 2>&1; then
    gpu=1
fi

if [ "$gpu" = 1 ] || [ "${DPC_FULL:-0}" = 1 ]; then
    echo "make run: full schedule: $bin/dprun $plan ${data_args[*]} $*"
    exec "$bin/dprun" "$plan" "${data_args[@]}" "$@"
fi

if [ -n "${DPC_RUN_STEPS:-}" ]; then
    short=(--steps "$DPC_RUN_STEPS")
elif [ -n "${DPC_DATA:-}" ]; then
    short=(--steps 50)
else
    short=(--epochs 3)
fi
echo "make run: no GPU backend: a short CPU run (${short[*]}; DPC_RUN_STEPS=N to change)."
echo "make run: the full 45-epoch schedule: DPC_FULL=1 make run, or $bin/dprun $plan --data DIR"
exec "$bin/dprun" "$plan" "${data_args[@]}" "${short[@]}" "$@"
