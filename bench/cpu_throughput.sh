#!/usr/bin/env bash
# CPU training throughput of the model-zoo nets (CIFAR-shaped synthetic
# data), dpc against PyTorch eager and torch.compile, measured in the same
# run with the same thread count, interleaved model by model, and their
# ratios; MXNet 1.9.1's Gluon (the article's system) too where MXNET_PY
# names a python that has it. Figures only: nothing here asserts a speed.
#
# usage: bench/cpu_throughput.sh [STEPS] [THREADS] [BATCH] [ROUNDS] [MODEL ...]
#        (defaults 5, 2, 128, 1, and resnet18 resnet34 resnet50 resnet18_v2 mobilenet_v2)
# DPC_CONVS lists dpc's sides by their --conv (default "library auto";
# library is dpc's default): the first is "dpc", whose ratios against every other
# side the table gives, the others dpc-CONV. BASE_BIN names another
# build's bin/ (an earlier tree, for a before and after): its dpc with the
# first --conv is the side "base". The machine's sgemm peak
# (bench/sgemm_peak.c: OpenBLAS and oneDNN, the better) is measured in
# each round too, and dpc's train step is given as GFLOP/s (dpc --cost's
# count) and a fraction of it.
# Each round times every model once on each side; with ROUNDS > 1 the
# figures are the medians. Needs `make` done (bin/dpc, bin/dprun).
# TORCH_PY names the peers' pythons, space-separated (default
# /usr/bin/python3, Debian's PyTorch 1.13, which has no torch.compile); for
# a current PyTorch, a venv outside the repository:
#     python3 -m venv V && V/bin/pip install torch torchvision
#     TORCH_PY="V/bin/python /usr/bin/python3" bench/cpu_throughput.sh
# and for MXNet, another: python3 -m venv M && M/bin/pip install mxnet==1.9.1 'numpy<1.24'
#     MXNET_PY=M/bin/python bench/cpu_throughput.sh
set -eu
cd "$(dirname "$0")/.."
steps=${1:-5}
threads=${2:-2}
batch=${3:-128}
rounds=${4:-1}
shift $(($# < 4 ? $# : 4))
models=${*:-resnet18 resnet34 resnet50 resnet18_v2 mobilenet_v2}
bin=${DPC_BIN:-bin}
pys=${TORCH_PY:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One thread count for every library either side uses.
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads DPC_THREADS=$threads

ips() { sed -n 's/^throughput: \([0-9.]*\) img\/s$/\1/p' "$1" | tail -n 1; }
median() { sort -n "$1" | awk '{ a[NR] = $1 } END { if (NR) print (a[int((NR + 1) / 2)] + a[int(NR / 2) + 1]) / 2 }'; }

# Sides: dpc's, then for each peer python its version's eager and (torch 2 on) torch.compile.
convs=${DPC_CONVS:-library auto}
sides="" first_conv=""
declare -A dpc_conv
for c in $convs; do
    if [ -z "$first_conv" ]; then first_conv=$c s=dpc; else s=dpc-$c; fi
    sides="$sides $s"; dpc_conv[$s]=$c
done
base_bin=${BASE_BIN:-}
[ -n "$base_bin" ] && sides="$sides base"
declare -A peer_py
for p in $pys; do
    if ! v=$("$p" -c 'import torch, torchvision; print(torch.__version__.split("+")[0])' 2>/dev/null); then
        echo "peer: no torch and torchvision for $p; skipped"; continue
    fi
    sides="$sides $v-eager"; peer_py[$v-eager]=$p
    if "$p" -c 'import sys, torch; sys.exit(not hasattr(torch, "compile"))'; then
        sides="$sides $v-compile"; peer_py[$v-compile]=$p
    fi
    echo "peer: pytorch $v ($p)"
done
mxpy=${MXNET_PY:-}
if [ -n "$mxpy" ]; then
    if mx_models=" $("$mxpy" bench/mxnet_train_cpu.py --models) " &&
        mxv=$("$mxpy" -c 'import mxnet; print(mxnet.__version__)' 2>/dev/null); then
        sides="$sides mxnet"; echo "peer: mxnet $mxv ($mxpy)"
    else
        echo "peer: no mxnet for $mxpy; skipped"
    fi
fi

for m in $models; do
    for c in $convs; do
        "$bin/dpc" "models/$m.net" --batch "$batch" --conv "$c" -o "$tmp/$m.$c.plan"
    done
    [ -z "$base_bin" ] || "$base_bin/dpc" "models/$m.net" --batch "$batch" --conv "$first_conv" \
        -o "$tmp/$m.base.plan"
    "$bin/dpc" "models/$m.net" --batch "$batch" --cost |
        sed -n 's/^train total: \([0-9.]*\) GFLOP per step$/\1/p' >"$tmp/$m.gflop"
done
# The sgemm peak, built as the Makefile built dpc (oneDNN where it has it).
dnnl=()
grep -q '^HAVE_DNNL := 1' build/config.mk 2>/dev/null && dnnl=(-DDPC_HAVE_DNNL -ldnnl -lgomp)
${CC:-cc} -O2 -o "$tmp/sgemm_peak" bench/sgemm_peak.c -lopenblas "${dnnl[@]}"
for r in $(seq "$rounds"); do
    "$tmp/sgemm_peak" "$threads" | tee -a "$tmp/peak.txt" | sed "s/^/round $r /"
    for m in $models; do
        for s in $sides; do
            case $s in
            dpc*) "$bin/dprun" "$tmp/$m.${dpc_conv[$s]}.plan" --data synthetic --benchmark "$steps" \
                >"$tmp/out" 2>/dev/null ;;
            base) "$base_bin/dprun" "$tmp/$m.base.plan" --data synthetic --benchmark "$steps" \
                >"$tmp/out" 2>/dev/null ;;
            *-eager) "${peer_py[$s]}" bench/torch_train_cpu.py "$m" "$steps" "$threads" "$batch" >"$tmp/out" 2>&1 ;;
            *-compile) "${peer_py[$s]}" bench/torch_train_cpu.py "$m" "$steps" "$threads" "$batch" --compile \
                >"$tmp/out" 2>&1 ;;
            mxnet) [[ $mx_models == *" $m "* ]] || continue # not a Gluon model-zoo net
                "$mxpy" bench/mxnet_train_cpu.py "$m" "$steps" "$threads" "$batch" >"$tmp/out" 2>&1 ;;
            esac || { echo "$m $s failed:"; tail -n 5 "$tmp/out"; exit 1; }
            v=$(ips "$tmp/out")
            echo "round $r $m $s: $v img/s"
            echo "$v" >>"$tmp/$m.$s"
        done
    done
done

sed -n 's/^sgemm peak: \([0-9.]*\) .*/\1/p' "$tmp/peak.txt" >"$tmp/peak.gf"
echo
echo "batch $batch, $threads CPU threads, $steps timed steps, median of $rounds round(s), img/s:"
printf '| %-13s |' model; for s in $sides; do printf ' %14s |' "$s"; done
for s in $sides; do [ "$s" = dpc ] || printf ' dpc/%-14s |' "$s"; done; printf ' %9s | %8s |\n' 'dpc GF/s' 'of peak' 
for m in $models; do
    printf '| %-13s |' "$m"
    for s in $sides; do
        if [ -s "$tmp/$m.$s" ]; then printf ' %14.1f |' "$(median "$tmp/$m.$s")"; else printf ' %14s |' -; fi
    done
    d=$(median "$tmp/$m.dpc")
    for s in $sides; do
        [ "$s" = dpc ] && continue
        if [ -s "$tmp/$m.$s" ]; then
            printf ' %17.2fx |' "$(awk -v a="$d" -v b="$(median "$tmp/$m.$s")" 'BEGIN { print a / b }')"
        else
            printf ' %18s |' -
        fi
    done
    # dpc's step rate: its GFLOP per step times steps per second
    awk -v g="$(cat "$tmp/$m.gflop")" -v ips="$d" -v b="$batch" -v p="$(median "$tmp/peak.gf")" \
        'BEGIN { f = g * ips / b; printf " %9.1f | %7.0f%% |\n", f, 100 * f / p }'
done
echo "sgemm peak (median): $(median "$tmp/peak.gf") GFLOP/s; dpc is --conv $first_conv"
