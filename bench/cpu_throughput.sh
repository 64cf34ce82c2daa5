#!/usr/bin/env bash
# CPU training throughput of ResNet-18 (batch 128, CIFAR-shaped synthetic
# data), dpc against PyTorch, measured in the same run with the same thread
# count, and their ratio. Figures only: nothing here asserts a speed.
#
# usage: bench/cpu_throughput.sh [STEPS] [THREADS]     (defaults 5 and 2)
# Needs `make` done (bin/dpc, bin/dprun) and Debian's python3-torch and
# python3-torchvision for the PyTorch side.
set -eu
cd "$(dirname "$0")/.."
steps=${1:-5}
threads=${2:-2}
bin=${DPC_BIN:-bin}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One thread count for every library either side uses.
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads

"$bin/dpc" models/resnet18.net --batch 128 -o "$tmp/r.plan"
echo "dpc: $bin/dprun resnet18 --benchmark $steps ($threads threads)"
"$bin/dprun" "$tmp/r.plan" --data synthetic --benchmark "$steps" 2>/dev/null | tee "$tmp/dpc.out"
dpc=$(tail -n 1 "$tmp/dpc.out" | sed -n 's/^throughput: \([0-9.]*\) img\/s$/\1/p')

echo "pytorch: torchvision resnet18(num_classes=10), $steps steps ($threads threads)"
if ! $py -c 'import torch, torchvision' 2>/dev/null; then
    echo "pytorch: not installed (apt-get install python3-torch python3-torchvision)"
    echo "dpc: $dpc img/s"
    exit 0
fi
$py bench/torch_resnet18_cpu.py "$steps" "$threads" 128 | tee "$tmp/torch.out"
torch=$(tail -n 1 "$tmp/torch.out" | sed -n 's/^throughput: \([0-9.]*\) img\/s$/\1/p')

[ -n "$dpc" ] && [ -n "$torch" ] || { echo "could not read both throughputs" >&2; exit 1; }
printf 'resnet18 batch 128, %s CPU threads: dpc %.1f img/s, pytorch %.1f img/s, dpc/pytorch %.2fx\n' \
    "$threads" "$dpc" "$torch" "$(awk -v a="$dpc" -v b="$torch" 'BEGIN { print a / b }')"
