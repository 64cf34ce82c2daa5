#!/usr/bin/env bash
# What the layout pass (dpc --layout, passes/layout.c) buys, on one machine
# in one run. Figures only: nothing here asserts a speed (the machine may be
# shared; runs alternate off/on round by round so both see the same machine,
# and are reported as min / median / max).
#
#   1. kernels per training step: the C program (`dpc --stats`, fused) and
#      the CUDA program (`dpc --cost`, with its GEMMs);
#   2. bytes moved per training step (`dpc --cost`, the CUDA kernels' and
#      GEMMs' modelled traffic) and the planned arena;
#   3. CPU throughput: `dprun PLAN --benchmark STEPS`, img/s.
#
# usage: bench/layout.sh [BATCH] [ROUNDS] [MODEL...]
#        (128 3 models/resnet18_cifar.net models/resnet18.net)
# STEPS per run: $LAYOUT_STEPS, else 3 for resnet18_cifar and 10 for others.
# BENCH_LOCK=FILE runs each dprun under `flock FILE` (a shared machine).
set -eu
cd "$(dirname "$0")/.."
batch=${1:-128}
rounds=${2:-3}
shift $(($# > 2 ? 2 : $#))
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(models/resnet18_cifar.net models/resnet18.net)
bin=${DPC_BIN:-bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DPC_CACHE_DIR=${DPC_CACHE_DIR:-$tmp/cache}
lock=()
[ -n "${BENCH_LOCK:-}" ] && lock=(flock "$BENCH_LOCK")

summary() { sort -n "$1" | awk '{a[NR]=$1} END {printf "%.1f %.1f %.1f", a[1], a[int((NR+1)/2)], a[NR]}'; }
for model in "${models[@]}"; do
    mn=$(basename "$model" .net)
    steps=${LAYOUT_STEPS:-10}
    [ -z "${LAYOUT_STEPS:-}" ] && [ "$mn" = resnet18_cifar ] && steps=3
    echo "== $model, batch $batch, train step: layout off vs on"
    for v in off on; do
        flags=()
        [ "$v" = on ] && flags=(--layout)
        "$bin/dpc" "$model" --batch "$batch" "${flags[@]}" --stats >"$tmp/stats"
        "$bin/dpc" "$model" --batch "$batch" "${flags[@]}" --cost >"$tmp/cost"
        "$bin/dpc" "$model" --batch "$batch" "${flags[@]}" --target cpu -o "$tmp/$mn.$v.plan"
        kc=$(sed -n 's/^train kernels per step: fused \([0-9]*\),.*/\1/p' "$tmp/stats")
        arena=$(sed -n 's/^train arena bytes: planned \([0-9]*\),.*/\1/p' "$tmp/stats")
        cuda=$(sed -n 's/^train total: \([0-9]*\) kernels and \([0-9]*\) GEMMs per step, \([0-9]*\) bytes.*/\1 \2 \3/p' "$tmp/cost")
        read -r ck cg bytes <<<"$cuda"
        printf '  layout %-3s  C kernels %4s   CUDA kernels %4s + %3s GEMMs   bytes %6.2f GB   arena %7.1f MiB\n' \
            "$v" "$kc" "$ck" "$cg" "$(awk -v b="$bytes" 'BEGIN { print b / 1e9 }')" \
            "$(awk -v b="$arena" 'BEGIN { print b / 1048576 }')"
        # compile the kernels outside the timings
        "${lock[@]}" "$bin/dprun" "$tmp/$mn.$v.plan" --benchmark 1 >/dev/null 2>&1
    done
    for r in $(seq "$rounds"); do
        for v in off on; do
            "${lock[@]}" "$bin/dprun" "$tmp/$mn.$v.plan" --benchmark "$steps" 2>/dev/null |
                sed -n 's/^throughput: \([0-9.]*\) img\/s/\1/p' >>"$tmp/$mn.$v.ips"
        done
    done
    # each round's on/off ratio: the two runs of a round saw the same machine
    paste "$tmp/$mn.off.ips" "$tmp/$mn.on.ips" | awk '{print $2 / $1}' >"$tmp/$mn.ratio"
    read -r lo med hi <<<"$(sort -n "$tmp/$mn.ratio" | awk '{a[NR]=$1} END {printf "%.3f %.3f %.3f", a[1], a[int((NR+1)/2)], a[NR]}')"
    printf '  on / off    %.3f median of the rounds (min %.3f, max %.3f)\n' "$med" "$lo" "$hi"
    for v in off on; do
        read -r lo med hi <<<"$(summary "$tmp/$mn.$v.ips")"
        printf '  layout %-3s  CPU %6.1f img/s median (min %6.1f, max %6.1f; %d runs of %d steps)\n' \
            "$v" "$med" "$lo" "$hi" "$rounds" "$steps"
    done
done
