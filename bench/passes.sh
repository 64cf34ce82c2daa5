#!/usr/bin/env bash
# What each pass does to a model's training step, with and without it, in
# one run: kernels per step (the cpu program), bytes and FLOPs per step
# (dpc --cost, the CUDA program), the planned train arena (--time-passes),
# and the CPU step time (bench/step_bench, the executor alone), the plans
# interleaved round by round so they see the same machine. Figures only:
# nothing here asserts a speed.
#
# usage: bench/passes.sh [MODEL] [BATCH] [STEPS] [ROUNDS] [THREADS]
#        (models/resnet18_cifar.net 128 2 3 2)
# PASSES (environment) lists the variants, each NAME=SPEC-CHANGE: the
# default pipeline without a pass (-fuse), with one added at its registry
# place (+remat, +remat(budget_mb=300)). Default: every optional pass added
# and every other removable pass dropped.
set -eu
cd "$(dirname "$0")/.."
model=${1:-models/resnet18_cifar.net}
batch=${2:-128}
steps=${3:-2}
rounds=${4:-3}
threads=${5:-2}
bin=${DPC_BIN:-bin}
build=${DPC_BUILD:-build/rel}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads DPC_THREADS=$threads

cc=${CC:-cc}
cudaflags=()
[ -f /usr/local/cuda/include/nvrtc.h ] && cudaflags=(-L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lnvrtc)
"$cc" -I. "-I$build/gen" -D_GNU_SOURCE -std=c11 -O2 -pthread -o "$tmp/step_bench" bench/step_bench.c \
    "$build/libdpc.a" -lopenblas -lm -ldl -lpthread "${cudaflags[@]}"

# The registry: name, optional or not (dpc --list-passes).
default=$("$bin/dpc" --print-pipeline)
if [ -z "${PASSES:-}" ]; then
    PASSES=$("$bin/dpc" --list-passes | awk '
        /^[a-z]/ { if (name != "") print (opt ? "+" : "-") name; name = $1; opt = 0 }
        /not in the default pipeline/ { opt = 1 }
        END { if (name != "") print (opt ? "+" : "-") name }' |
        grep -v -e '^-lower$' -e '^-autodiff$' -e '^-optimizer$' -e '^-precision$')
fi

# The spec of a variant: the default pipeline with a pass dropped, or with
# one added at its registry place (what the prerequisites want).
order=$("$bin/dpc" --list-passes | awk '/^[a-z]/ { print $1 }')
spec_of() {
    local change=$1 add="" drop="" r e out=""
    case "$change" in -*) drop=${change#-} ;; +*) add=${change#+} ;; esac
    for r in $order; do
        e=$(echo "$default" | tr , '\n' | grep -E "^$r(\(|\$)" || true)
        [ "$r" = "$drop" ] && continue
        [ "$r" = "${add%%(*}" ] && e=$add
        [ -n "$e" ] && out=${out:+$out,}$e
    done
    echo "$out"
}

figures() { # PLAN-FLAGS... -> "kernels bytes flops arena"
    local k b f a
    k=$("$bin/dpc" "$model" --batch "$batch" --target cpu "$@" --time-passes 2>&1 |
        awk '$1 == "train" { k = $6; a = $7 } END { print k, a }')
    read -r b f <<<"$("$bin/dpc" "$model" --batch "$batch" "$@" --cost |
        awk '/^train total: .* bytes per step/ { for (i = 1; i < NF; i++) if ($(i + 1) == "bytes") b = $i } /^train program/ { t = 1 }
             /^eval program/ { t = 0 } t && NF == 6 && $5 ~ /^[0-9]+$/ { f += $5 }
             END { print b, f }')"
    echo "${k% *} $b $f ${k#* }"
}

names=(default)
specs=("$default")
for change in $PASSES; do
    names+=("$change")
    specs+=("$(spec_of "$change")")
done
echo "== $model, batch $batch: each variant beside the default pipeline"
echo "   default: $default"
for i in "${!names[@]}"; do
    "$bin/dpc" "$model" --batch "$batch" --target cpu --passes="${specs[$i]}" -o "$tmp/$i.plan"
    "$tmp/step_bench" "$tmp/$i.plan" 1 1 >/dev/null # compile the kernels outside the timings
    figures --passes="${specs[$i]}" >"$tmp/$i.fig"
done
for r in $(seq "$rounds"); do
    for i in "${!names[@]}"; do
        "$tmp/step_bench" "$tmp/$i.plan" "$steps" 1 | sed -n 's/^repeat 0: \([0-9.]*\) ms.*/\1/p' >>"$tmp/$i.ms"
    done
done
median() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
read -r k0 b0 f0 a0 <"$tmp/0.fig"
m0=$(median "$tmp/0.ms")
printf '%-28s %8s %14s %16s %12s %10s %8s\n' variant kernels bytes/step flops/step arena_MiB ms/step vs_default
for i in "${!names[@]}"; do
    read -r k b f a <"$tmp/$i.fig"
    m=$(median "$tmp/$i.ms")
    printf '%-28s %8s %14s %16s %12.1f %10.1f %8.3f\n' "${names[$i]}" "$k" "$b" "$f" \
        "$(awk -v a="$a" 'BEGIN { print a / 1048576 }')" "$m" "$(awk -v m="$m" -v z="$m0" 'BEGIN { print z / m }')"
done
echo "(vs_default: the default's step time over the variant's, medians of $rounds rounds of $steps steps; kernels: cpu program; bytes, flops: dpc --cost's CUDA program)"
