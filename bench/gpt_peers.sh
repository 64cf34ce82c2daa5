#!/usr/bin/env bash
# CPU train-step time of the GPT models, dpc against its peers: PyTorch
# eager and torch.compile (bench/gpt_twin.py, the same model and optimizer)
# and llm.c's train_gpt2.c (random-init checkpoints of the same shapes), on
# the same threads, in interleaved rounds: each round times every model
# once on every side, so that the machine's drift falls on all of them.
# The figure of a side in a round is the median of its timed steps (after
# its warm-up); the table gives the median over the rounds and every
# side's time over the first side's (dpc where DPC_CMD is set, else eager).
# Figures only: nothing here asserts a speed.
#
# usage: bench/gpt_peers.sh [STEPS] [ROUNDS] [THREADS]     (defaults 3, 3, 2)
# Needs bench/peers_setup.sh done (PEERS, default /work/peers).
# The models, each as CONFIG:B:T (MODELS, default "gpt2:4:64 gpt_char:64:256").
# SIDES picks sides (default "eager compile llmc", then dpc when DPC_CMD
# is set); eager-sdpa and compile-sdpa are the twin with
# F.scaled_dot_product_attention in place of the explicit softmax.
# DPC_CMD is dpc's side, a shell command run with CONFIG (gpt2, gpt_char),
# B, T, STEPS and THREADS in its environment, say
#   DPC_CMD='bin/dprun build/$CONFIG.plan --data synthetic --benchmark $STEPS'
# and DPC_PREP a command run once per model before the rounds (dpc's
# compile, say 'bin/dpc models/$CONFIG.net --batch $B -o build/$CONFIG.plan').
# Its step time is read from dprun's `benchmark: N steps of batch B in X
# seconds` line (X/N, a mean, not a median) or a `step_s: X` line.
# OUT names the markdown table's file too (default $PEERS/gpt_peers.md).
# llm.c has no dropout: its gpt_char side runs without the twin's 0.2.
# Size: a gpt_char step at B=64, T=256 is about 1 TFLOP (a minute or more
# on 2 cores) and llm.c holds 8 GB for it, the twin 6.5 GB; the defaults'
# whole run is an hour or more on this project's 2-core machine.
set -eu
cd "$(dirname "$0")/.."
steps=${1:-3}
rounds=${2:-3}
threads=${3:-2}
peers=${PEERS:-/work/peers}
py=$peers/torch/bin/python
llmc=$peers/llm.c
models=${MODELS:-gpt2:4:64 gpt_char:64:256}
sides=${SIDES:-eager compile llmc}
if [ -n "${DPC_CMD:-}" ]; then sides="dpc $sides"; fi
out=${OUT:-$peers/gpt_peers.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "gpt_peers: error: $*" >&2; exit 1; }
case "$steps$rounds$threads" in *[!0-9]*) fail "STEPS, ROUNDS and THREADS are counts: $steps $rounds $threads" ;; esac
if [ "$steps" -lt 1 ] || [ "$rounds" -lt 1 ] || [ "$threads" -lt 1 ]; then fail "STEPS, ROUNDS, THREADS must be >= 1"; fi
for s in $sides; do
    case $s in
    eager | compile | eager-sdpa | compile-sdpa) [ -x "$py" ] || fail "$py: no PyTorch venv (bench/peers_setup.sh torch)" ;;
    llmc) [ -x "$llmc/train_gpt2" ] || fail "$llmc/train_gpt2: not built (bench/peers_setup.sh llmc)" ;;
    dpc) ;;
    *) fail "unknown side '$s' (eager compile eager-sdpa compile-sdpa llmc)" ;;
    esac
done
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads DPC_THREADS=$threads

median() { sort -g "$1" | awk '{ a[NR] = $1 } END { if (NR) print (a[int((NR + 1) / 2)] + a[int(NR / 2) + 1]) / 2 }'; }

# One side's run of one model; prints its step seconds (the run's median).
run_side() {
    local s=$1 cfg=$2 b=$3 t=$4 o=$tmp/out
    case $s in
    eager* | compile*)
        local flags=(--bench-steps "$steps" --config "$cfg" --batch "$b" --seq "$t" --threads "$threads")
        [[ $s == compile* ]] && flags+=(--compile)
        [[ $s == *-sdpa ]] && flags+=(--attn sdpa)
        "$py" bench/gpt_twin.py "${flags[@]}" >"$o" 2>&1 || return 1
        tail -n 1 "$o" | "$py" -c 'import json, sys; print(json.load(sys.stdin)["median_step_s"])'
        ;;
    llmc)
        local env=()
        [ "$cfg" = gpt_char ] && env=(LLMC_CKPT=gpt_char.bin LLMC_TRAIN=dev/data/gpt_char/train.bin
            LLMC_VAL=dev/data/gpt_char/val.bin)
        # step 0 is the warm-up; no val loss, no sampling
        (cd "$llmc" && env "${env[@]}" LLMC_B="$b" LLMC_T="$t" LLMC_STEPS=$((steps + 1)) LLMC_VALEVERY=0 \
            LLMC_GENEVERY=0 ./train_gpt2) >"$o" 2>&1 || return 1
        sed -n 's/^step \([0-9]*\): train loss .* (took \([0-9.]*\) ms)$/\1 \2/p' "$o" |
            awk '$1 > 0 { print $2 / 1000 }' >"$tmp/llmc.steps"
        [ "$(wc -l <"$tmp/llmc.steps")" -eq "$steps" ] || return 1
        median "$tmp/llmc.steps"
        ;;
    dpc)
        env CONFIG="$cfg" B="$b" T="$t" STEPS="$steps" THREADS="$threads" bash -c "$DPC_CMD" >"$o" 2>&1 || return 1
        local v
        v=$(sed -n 's/^benchmark: \([0-9]*\) steps of batch [0-9]* in \([0-9.]*\) seconds.*/\1 \2/p;
                    s/^step_s: \([0-9.eE+-]*\)$/1 \1/p' "$o" | tail -n 1)
        [ -n "$v" ] || return 1
        awk -v v="$v" 'BEGIN { split(v, a, " "); print a[2] / a[1] }'
        ;;
    esac
}

for m in $models; do
    IFS=: read -r cfg b t <<<"$m"
    case $cfg in gpt2 | gpt_char) ;; *) fail "model '$m': CONFIG is gpt2 or gpt_char" ;; esac
    if [ -n "${DPC_CMD:-}" ] && [ -n "${DPC_PREP:-}" ]; then
        env CONFIG="$cfg" B="$b" T="$t" STEPS="$steps" THREADS="$threads" bash -c "$DPC_PREP" ||
            fail "DPC_PREP failed for $m"
    fi
done
for r in $(seq "$rounds"); do
    for m in $models; do
        IFS=: read -r cfg b t <<<"$m"
        for s in $sides; do
            v=$(run_side "$s" "$cfg" "$b" "$t") || { echo "$m $s failed:"; tail -n 5 "$tmp/out"; exit 1; }
            echo "round $r $cfg B=$b T=$t $s: $v s/step"
            echo "$v" >>"$tmp/$cfg.$b.$t.$s"
        done
    done
done

ref=${sides%% *}
{
    echo "GPT train step on the CPU, $threads threads, $steps timed steps, median of $rounds round(s), seconds per step:"
    echo
    printf '| model | B | T |'
    for s in $sides; do printf ' %s |' "$s"; done
    for s in $sides; do [ "$s" = "$ref" ] || printf ' %s/%s |' "$s" "$ref"; done
    echo
    printf '|---|--:|--:|'
    for s in $sides; do printf -- '--:|'; done
    for s in $sides; do [ "$s" = "$ref" ] || printf -- '--:|'; done
    echo
    for m in $models; do
        IFS=: read -r cfg b t <<<"$m"
        printf '| %s | %s | %s |' "$cfg" "$b" "$t"
        for s in $sides; do printf ' %.3f |' "$(median "$tmp/$cfg.$b.$t.$s")"; done
        d=$(median "$tmp/$cfg.$b.$t.$ref")
        for s in $sides; do
            [ "$s" = "$ref" ] || printf ' %.2f |' "$(awk -v a="$(median "$tmp/$cfg.$b.$t.$s")" -v d="$d" 'BEGIN { print a / d }')"
        done
        echo
    done
    echo
    echo "X/$ref: X's step time over $ref's (above 1: $ref is the faster). The twin's gpt_char has" \
        "dropout 0.2, llm.c's none; dpc's figure is its mean step."
    echo "pytorch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo -)," \
        "llm.c $(git -C "$llmc" rev-parse --short HEAD 2>/dev/null || echo -) (gcc -Ofast -march=native -fopenmp)," \
        "$(nproc) cpus, $(date -u +%Y-%m-%dT%H:%MZ)"
} | tee "$out"
