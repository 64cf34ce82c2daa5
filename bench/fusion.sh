#!/usr/bin/env bash
# What fusion and memory planning buy, and where dpc stands against
# PyTorch, on one machine in one run. Figures only: nothing here asserts a
# speed (the machine may be shared; every timing is repeated and reported as
# min / median / max).
#
#   1. `dpc --stats`: kernels per training step with and without fusion,
#      planned activation arena vs naive vs the lower bound.
#   2. Training-step time of four plans of the same model (fused or not,
#      planned or not), interleaved round by round so they see the same
#      machine, by bench/step_bench (the executor alone: fixed inputs, no
#      data pipeline).
#   3. PyTorch on the same job (bench/torch_train_cpu.py resnet18: torchvision
#      resnet18(num_classes=10), one SGD step per iteration), same threads.
#
# usage: bench/fusion.sh [BATCH] [STEPS] [ROUNDS] [THREADS]   (128 3 3 2)
# Needs `make`; PyTorch (Debian python3-torch, python3-torchvision) for 3.
set -eu
cd "$(dirname "$0")/.."
batch=${1:-128}
steps=${2:-3}
rounds=${3:-3}
threads=${4:-2}
bin=${DPC_BIN:-bin}
build=${DPC_BUILD:-build/rel}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads DPC_THREADS=$threads

cc=${CC:-cc}
cudaflags=()
[ -f /usr/local/cuda/include/nvrtc.h ] && cudaflags=(-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lnvrtc)
"$cc" -I. "-I$build/gen" -D_GNU_SOURCE -std=c11 -O2 -pthread -o "$tmp/step_bench" bench/step_bench.c \
    "$build/libdpc.a" -lopenblas -lm -ldl -lpthread "${cudaflags[@]}"

model=models/resnet18.net
echo "== dpc --stats ($model, batch $batch)"
"$bin/dpc" "$model" --batch "$batch" --stats

variants="fused+planned:  fused+unplanned:--no-memplan unfused+planned:--no-fuse unfused+unplanned:--no-fuse,--no-memplan"
for v in $variants; do
    name=${v%%:*} flags=${v#*:}
    # shellcheck disable=SC2086
    "$bin/dpc" "$model" --batch "$batch" --target cpu ${flags//,/ } -o "$tmp/$name.plan"
    "$tmp/step_bench" "$tmp/$name.plan" 1 1 >/dev/null # compile the kernels outside the timings
done

echo "== training step, $threads threads, $rounds rounds of $steps steps (ms per step)"
for r in $(seq "$rounds"); do
    for v in $variants; do
        name=${v%%:*}
        "$tmp/step_bench" "$tmp/$name.plan" "$steps" 1 | sed -n 's/^repeat 0: \([0-9.]*\) ms.*/\1/p' >>"$tmp/$name.ms"
    done
done
summary() { sort -n "$1" | awk '{a[NR]=$1} END {printf "%.1f %.1f %.1f", a[1], a[int((NR+1)/2)], a[NR]}'; }
for v in $variants; do
    name=${v%%:*}
    read -r lo med hi <<<"$(summary "$tmp/$name.ms")"
    printf '  %-20s min %7.1f  median %7.1f  max %7.1f ms   %6.1f img/s (median)\n' "$name" "$lo" "$med" "$hi" \
        "$(awk -v b="$batch" -v t="$med" 'BEGIN { print b * 1000 / t }')"
done
read -r _ dpc_med _ <<<"$(summary "$tmp/fused+planned.ms")"

if /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null && [ "$batch" = 128 ]; then
    echo "== pytorch, $threads threads, $rounds runs of $steps steps"
    for r in $(seq "$rounds"); do
        /usr/bin/python3 bench/torch_train_cpu.py resnet18 "$steps" "$threads" "$batch" | tail -n 1 |
            sed -n 's/^throughput: \([0-9.]*\) img\/s$/\1/p' >>"$tmp/torch.ips"
    done
    read -r tlo tmed thi <<<"$(summary "$tmp/torch.ips")"
    printf '  pytorch img/s: min %.1f  median %.1f  max %.1f\n' "$tlo" "$tmed" "$thi"
    printf 'dpc (fused+planned) / pytorch, medians: %.2fx\n' \
        "$(awk -v t="$dpc_med" -v p="$tmed" -v b="$batch" 'BEGIN { print (b * 1000 / t) / p }')"
else
    echo "== pytorch: skipped (needs python3-torch, python3-torchvision, batch 128)"
fi
