#!/usr/bin/env bash
# CPU training throughput of the model-zoo nets (CIFAR-shaped synthetic
# data), dpc against PyTorch eager and torch.compile, measured in the same
# run with the same thread count, interleaved model by model, and their
# ratios. Figures only: nothing here asserts a speed.
#
# usage: bench/cpu_throughput.sh [STEPS] [THREADS] [BATCH] [ROUNDS] [MODEL ...]
#        (defaults 5, 2, 128, 1, and resnet18 resnet34 resnet50 resnet18_v2 mobilenet_v2)
# Each round times every model once on each side; with ROUNDS > 1 the
# figures are the medians. Needs `make` done (bin/dpc, bin/dprun).
# TORCH_PY names the peer's python (default /usr/bin/python3, Debian's
# PyTorch 1.13, which has no torch.compile); for a current PyTorch, a venv
# outside the repository: python3 -m venv V && V/bin/pip install torch torchvision
set -eu
cd "$(dirname "$0")/.."
steps=${1:-5}
threads=${2:-2}
batch=${3:-128}
rounds=${4:-1}
shift $(($# < 4 ? $# : 4))
models=${*:-resnet18 resnet34 resnet50 resnet18_v2 mobilenet_v2}
bin=${DPC_BIN:-bin}
py=${TORCH_PY:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One thread count for every library either side uses.
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads DPC_THREADS=$threads

ips() { sed -n 's/^throughput: \([0-9.]*\) img\/s$/\1/p' "$1" | tail -n 1; }
median() { sort -n "$1" | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }

sides="dpc"
if "$py" -c 'import torch, torchvision' 2>/dev/null; then
    sides="$sides eager"
    "$py" -c 'import sys, torch; sys.exit(not hasattr(torch, "compile"))' && sides="$sides compile"
    echo "peer: $("$py" -c 'import torch; print("pytorch", torch.__version__)') ($py): $sides"
else
    echo "peer: no torch and torchvision for $py (set TORCH_PY); dpc only"
fi

for m in $models; do
    "$bin/dpc" "models/$m.net" --batch "$batch" -o "$tmp/$m.plan"
done
for r in $(seq "$rounds"); do
    for m in $models; do
        for s in $sides; do
            case $s in
            dpc) "$bin/dprun" "$tmp/$m.plan" --data synthetic --benchmark "$steps" >"$tmp/out" 2>/dev/null ;;
            eager) "$py" bench/torch_train_cpu.py "$m" "$steps" "$threads" "$batch" >"$tmp/out" 2>&1 ;;
            compile) "$py" bench/torch_train_cpu.py "$m" "$steps" "$threads" "$batch" --compile >"$tmp/out" 2>&1 ;;
            esac || { echo "$m $s failed:"; tail -n 5 "$tmp/out"; exit 1; }
            v=$(ips "$tmp/out")
            echo "round $r $m $s: $v img/s"
            echo "$v" >>"$tmp/$m.$s"
        done
    done
done

echo
echo "batch $batch, $threads CPU threads, $steps timed steps, median of $rounds round(s), img/s:"
printf '| %-13s |' model; for s in $sides; do printf ' %9s |' "$s"; done
for s in $sides; do [ "$s" = dpc ] || printf ' dpc/%-7s |' "$s"; done; echo
for m in $models; do
    printf '| %-13s |' "$m"
    for s in $sides; do printf ' %9.1f |' "$(median "$tmp/$m.$s")"; done
    d=$(median "$tmp/$m.dpc")
    for s in $sides; do
        [ "$s" = dpc ] || printf ' %10.2fx |' "$(awk -v a="$d" -v b="$(median "$tmp/$m.$s")" 'BEGIN { print a / b }')"
    done
    echo
done
