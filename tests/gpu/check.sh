#!/usr/bin/env bash
# tests/gpu/check.sh OUTDIR — dpc on a real GPU in one call: builds, then
# measures what is worth most first, and stops each stage at its budget so
# the whole takes at most 8 minutes on the H200 machine, build included.
#
# How to call it with the device tool, from the development checkout:
#   make            # leaves build/rel/gen (lexer, parser): that machine has no flex/bison
#   mkdir -p data && cp ../shared/data/cifar10-jpeg.pack ../shared/data/cifar10.py data/
#   run(command="bash tests/gpu/check.sh $OUT", carry=["data", "build/rel/gen"], timeout_s=540)
# data/ and build/ are ignored by git, hence `carry`; the pack is 56 MB of
# the 64 MiB a call may carry, so carry nothing else. Without data/ the
# CIFAR-10 stage is skipped and everything else still runs.
#
# What the machine has, and what this script does about what it lacks (the
# rehearsal, tests/gpu_rehearsal_test.sh, arranges the same here):
#   - the driver and the CUDA toolkit; NCCL and cuDNN only as pip wheels
#     inside the PyTorch environment: dpc finds each library itself
#     (`dprun --device cuda --info`, stage 0, says where);
#   - no flex/bison: the carried build/rel/gen is used;
#   - no OpenBLAS: tests/gpu/cblas_shim stands in (the cpu side of the
#     parity check only); no MPI: the build leaves it out;
#   - no network: make's package check is skipped (DEPS=0).
#
# Stages, in order of value (the plan and each stage's budget for a
# 16-core machine are printed first; a stage that no longer fits what is
# left is skipped, and says so):
#   0 environment: GPU, driver, every library dpc loads and from where
#   1 build (make all gpu-tools; make and cc are checked for first; a
#     build that fails on warnings alone is built again with WERROR=0, and
#     summary.md says so)
#   2 fp32: cuda vs cpu parity of one training step and the eval after it,
#     in units of the cpu's own spread between two sum orders (gated: the
#     forward pass, BatchNorm's running statistics; reported: gradients,
#     momentum, weights), CUDA graph vs eager, ms per step
#     (build/rel/gpu/cuda_check)
#   3 bf16: the same on the --precision bf16 plan (against the cpu's bf16)
#   4 kernel_cmp --device: every kernel call of resnet18's train program
#     on the GPU against its C-dialect kernel
#   5 the cost model's time per kernel beside DPC_PROFILE=1's (fp32),
#     joined by name (rows cuDNN declined are counted, not fatal)
#   6 PyTorch on the same network, batch and GPU: eager fp32, channels_last
#     + bf16 autocast, torch.compile(mode="reduce-overhead"), each with its
#     own time limit (a timeout is a missing figure); dpc's fp32 and bf16
#     step times as ratios to them
#   7 compute-sanitizer memcheck of a batch-4 training run (where the tool
#     and a GPU are, and a probe finds the GPU supported): memory errors
#     only, kernels with line tables
#   8 one CIFAR-10 epoch with dprun (img/s, host waits per step)
#
# OUTDIR gets at most 8 files: summary.md (what to paste into a note: the
# libraries, each stage's result and time, every figure, the ratios),
# check.log (everything printed), cuda_check.txt, kernel_cmp.txt, cost.txt,
# torch.txt, dprun.log, metrics.jsonl. Exit 0 when every stage that ran
# passed.
#
# Scaled down for the rehearsal (never on a GPU): DPC_CHECK_MODEL (resnet18),
# DPC_CHECK_BATCH (128), DPC_CHECK_STEPS (50 timed steps), DPC_CHECK_BUDGET
# (480 s), DPC_CHECK_LIMIT_SCALE (1: each stage's time limit is
# multiplied by it), DPC_CHECK_DATA (a CIFAR-10 binary folder instead of
# the pack), DPC_CHECK_JOBS (nproc).
set -u
out=${1:?usage: tests/gpu/check.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
root=$(pwd)
exec > >(tee "$out/check.log") 2>&1
t_start=$(date +%s)
budget=${DPC_CHECK_BUDGET:-480}
model=${DPC_CHECK_MODEL:-resnet18}
batch=${DPC_CHECK_BATCH:-128}
steps=${DPC_CHECK_STEPS:-50}
jobs=${DPC_CHECK_JOBS:-$(nproc)}
work=$(mktemp -d /tmp/dpc-gpu-check.XXXXXX)
export DPC_CACHE_DIR=${DPC_CHECK_CACHE:-$work/cache}
figures=$work/figures.txt stages=$work/stages.txt
: >"$figures"
: >"$stages"
status=0
elapsed() { echo $(($(date +%s) - t_start)); }
left() { echo $((budget - $(elapsed))); }
say() { echo "== [$(elapsed) s] $*"; }
fig() { echo "$1 ${*:2}" >>"$figures"; echo "figure: $1 ${*:2}"; }
fail() { echo "FAIL: $*" | tee -a "$work/failures.txt"; status=1; stage_failed=1; }

# Stage bookkeeping: begin NAME BUDGET runs the stage only when BUDGET
# seconds are left (else records the skip and returns 1); end records its
# result and time for summary.md.
stage_name="" stage_t0=0 stage_failed=0
begin() {
    stage_name=$1 stage_failed=0 stage_t0=$(date +%s)
    if [ "$(left)" -lt "$2" ]; then
        echo "SKIP $1: $(left) s left, it needs $2"
        echo "$1|skipped: $(left) s left of the budget, it needs $2|0" >>"$stages"
        return 1
    fi
    say "$1 (budget $2 s)"
}
end() { # [NOTE]
    local r=passed
    [ "$stage_failed" = 1 ] && r=FAILED
    echo "$stage_name|$r${1:+ ($1)}|$(($(date +%s) - stage_t0))" >>"$stages"
}
skip_stage() { # NAME WHY
    echo "SKIP $1: $2"
    echo "$1|skipped: $2|0" >>"$stages"
}
# limit BUDGET: the stage's time limit: its budget (times
# DPC_CHECK_LIMIT_SCALE, for the rehearsal's simulator), less if less is left.
limit() {
    local l=$(($(left) - 10)) b=$(($1 * ${DPC_CHECK_LIMIT_SCALE:-1}))
    [ "$l" -gt "$b" ] && l=$b
    [ "$l" -lt 10 ] && l=10
    echo "$l"
}

# summary.md, written on every exit (a failed build too).
summary() {
    {
        echo "# tests/gpu/check.sh: $([ $status = 0 ] && echo passed || echo FAILED) in $(elapsed) s"
        echo
        echo "$(git log -1 --format='commit %h (%s)' 2>/dev/null), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
            "$model at batch $batch"
        echo
        echo "## Stages"
        echo
        echo "| stage | result | s |"
        echo "| --- | --- | --- |"
        while IFS='|' read -r n r s; do echo "| $n | $r | $s |"; done <"$stages"
        echo
        if [ -s "$work/parity.md" ]; then
            echo "## Parity: cuda vs cpu in units of the cpu's own spread"
            echo
            echo "Per tensor: rel L2 of cuda - cpu over the floor (rel L2 between the cpu's two sum"
            echo "orders, at least 4 roundings); per class the median floor, the median and largest"
            echo "ratio and how many tensors exceed 10. Gated (10 x): forward, bn_running."
            echo
            echo "| plan | class | gated | tensors | floor (median) | ratio (median) | ratio (max, tensor) | over 10 |"
            echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
            cat "$work/parity.md"
            echo
        fi
        if [ -s "$work/warnings.txt" ]; then
            echo "## Build: warnings -Werror failed on (built again with WERROR=0)"
            echo
            echo '```'
            cat "$work/warnings.txt"
            echo '```'
            echo
        fi
        echo "## Libraries (dprun --device cuda --info)"
        echo
        echo '```'
        cat "$work/info.txt" 2>/dev/null || echo "(not reached)"
        echo '```'
        echo
        echo "## Figures"
        echo
        echo '```'
        cat "$figures"
        echo '```'
        if [ -s "$work/failures.txt" ]; then
            echo
            echo "## Failures"
            echo
            echo '```'
            head -n 40 "$work/failures.txt"
            echo '```'
        fi
    } >"$out/summary.md"
    cat "$out/summary.md"
}
trap 'summary; rm -rf "$work"' EXIT

echo "stage plan (budgets for a 16-core machine with one H200; total $budget s):"
cat <<EOF
  0 environment, libraries            10 s
  1 build                             90 s
  2 fp32 parity, graph, step time    120 s
  3 bf16 parity, graph, step time     80 s
  4 kernel_cmp --device ($model train)  40 s
  5 cost model vs measured (fp32)     30 s
  6 PyTorch baseline                  60 s
  7 compute-sanitizer memcheck        30 s
  8 one CIFAR-10 epoch                what is left
EOF

# ---- 0. environment -----------------------------------------------------------------
begin environment 0
uname -srm
echo "cores: $(nproc)"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
    fig gpu "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
else
    echo "no nvidia-smi"
fi
if [ -z "${CUDA_HOME:-}" ] || [ ! -d "$CUDA_HOME/bin" ]; then
    CUDA_HOME=/usr/local/cuda
    if [ ! -d "$CUDA_HOME/bin" ] && command -v nvcc >/dev/null; then
        CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    fi
fi
export CUDA_HOME
echo "CUDA_HOME=$CUDA_HOME"
git log -1 --format='commit %h %s' 2>/dev/null || true
end

# ---- dependencies the machine lacks (no network there) ------------------------------------
# The tools the build cannot do without, said all at once: make and cc
# (everything), g++ (the simulator kernel_cmp links; without it that stage
# is skipped).
missing=""
for t in make cc; do command -v $t >/dev/null || missing="$missing $t"; done
if [ -n "$missing" ]; then
    fail "no$missing on PATH: nothing can be built"
    exit 1
fi
command -v g++ >/dev/null || echo "no g++: kernel_cmp (it links the simulator) will not be built"
if ! command -v bison >/dev/null || ! command -v flex >/dev/null; then
    if [ -f build/rel/gen/parser.c ] && [ -f build/rel/gen/parser.h ] && [ -f build/rel/gen/lexer.c ]; then
        echo "no flex/bison: using the carried build/rel/gen"
        touch build/rel/gen/parser.c build/rel/gen/parser.h
        sleep 1
        touch build/rel/gen/lexer.c
        rm -f build/rel/gen/*.o
    else
        fail "no flex/bison and no carried build/rel/gen (carry it: see the header)"
        exit 1
    fi
fi
have_cblas=0
for h in /usr/include/cblas.h /usr/include/x86_64-linux-gnu/cblas.h /usr/include/openblas/cblas.h; do
    [ -f "$h" ] && have_cblas=1
done
if [ $have_cblas = 1 ] && ! echo 'int main(void) { return 0; }' | cc -x c - -lopenblas -o "$work/blas-probe" 2>/dev/null; then
    have_cblas=0
fi
if [ $have_cblas = 0 ]; then
    echo "no OpenBLAS: building tests/gpu/cblas_shim as libopenblas.so"
    mkdir -p "$work/shim"
    cc -O3 -march=native -fPIC -shared -std=c11 -Wall -Wextra -Werror -o "$work/shim/libopenblas.so" \
        tests/gpu/cblas_shim/cblas_shim.c || { fail "cannot build the cblas shim"; exit 1; }
    export C_INCLUDE_PATH=$root/tests/gpu/cblas_shim${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}
    export LIBRARY_PATH=$work/shim${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$work/shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fig cpu_blas "cblas shim (no OpenBLAS on this machine)"
else
    fig cpu_blas OpenBLAS
fi

# ---- 1. build -------------------------------------------------------------------------------
begin build 0
build_note=""
if ! timeout 240 make -j"$jobs" all gpu-tools DEPS=0 CUDA_HOME="$CUDA_HOME" >"$work/make.log" 2>&1; then
    # A compiler newer than the tree's may warn where it did not: with
    # warnings as warnings (WERROR=0) the figures are still worth having.
    nwerr=$(grep -c -e '\[-Werror' -e 'warnings being treated as errors' "$work/make.log")
    if [ "$nwerr" -gt 0 ] && timeout 240 make -j"$jobs" all gpu-tools DEPS=0 WERROR=0 CUDA_HOME="$CUDA_HOME" \
        >"$work/make-nowerror.log" 2>&1; then
        build_note="built only with WERROR=0: -Werror failed it on $nwerr warnings"
        echo "$build_note; the first of them:"
        grep -m 5 '\[-Werror' "$work/make.log"
        grep -m 5 '\[-Werror' "$work/make.log" >"$work/warnings.txt"
        cat "$work/make-nowerror.log" >>"$work/make.log"
    else
        tail -n 40 "$work/make.log"
        fail "make failed"
        end
        exit 1
    fi
fi
grep '^dpc:' "$work/make.log" | head -n 1
[ -x build/rel/gpu/cuda_check ] || { fail "build/rel/gpu/cuda_check was not built"; end; exit 1; }
fig build_s "$(elapsed)"
end "$build_note"

# The libraries, as dpc finds them: every later stage loads the same ones.
say "dprun --device cuda --info"
bin/dprun --device cuda --info >"$work/info.txt" 2>&1
info_rc=$?
cat "$work/info.txt"
if [ $info_rc != 0 ]; then
    fail "dprun --device cuda --info: exit $info_rc (a library dpc needs is missing)"
    exit 1
fi

plan=$work/$model.plan
bin/dpc models/$model.net --batch "$batch" -o "$plan" || { fail "dpc models/$model.net"; exit 1; }
fig train_kernels_per_step "$(bin/dpc models/$model.net --batch "$batch" --stats 2>/dev/null |
    sed -n 's/^train kernels per step: fused \([0-9]*\).*/\1/p')"

# ---- 2. fp32 --------------------------------------------------------------------------------
if begin "fp32 parity, graph, step time" 40; then
    DPC_DEBUG=1 timeout "$(limit 200)" build/rel/gpu/cuda_check "$plan" --bench "$steps" \
        --figures "$figures" --table "$work/parity.md" >"$out/cuda_check.txt" 2>&1
    rc=$?
    grep -v '^ok ' "$out/cuda_check.txt" | tail -n 30
    case $rc in
    0) ;;
    2) fail "cuda_check found no CUDA device" ;;
    124) fail "cuda_check ran past its limit" ;;
    *) fail "cuda_check: exit $rc" ;;
    esac
    end
fi

# ---- 3. bf16 --------------------------------------------------------------------------------
# cuda vs the cpu's bit-exact bf16 emulation, judged against the spread of
# that emulation in two sum orders (tests/gpu/cuda_check.c).
bfplan=$work/$model-bf16.plan
if begin "bf16 parity, graph, step time" 40; then
    if bin/dpc models/$model.net --batch "$batch" --precision bf16 -o "$bfplan"; then
        timeout "$(limit 150)" build/rel/gpu/cuda_check "$bfplan" --tag bf16 \
            --bench "$steps" --figures "$figures" --table "$work/parity.md" >"$work/bf16.txt" 2>&1
        rc=$?
        cat "$work/bf16.txt" >>"$out/cuda_check.txt"
        grep -v '^ok ' "$work/bf16.txt" | tail -n 20
        [ $rc = 0 ] || fail "cuda_check bf16: exit $rc$([ $rc = 124 ] && echo ' (time limit)')"
    else
        fail "dpc models/$model.net --precision bf16"
    fi
    end
fi

# ---- 4. kernel_cmp --device -------------------------------------------------------------------
# Every kernel call of the train program at batch 4, on the GPU (NVRTC for
# its architecture, buffers between poisoned margins, the recorded launch
# geometry) against the C dialect's kernel. Kernels calling a math function
# are held to a tolerance (the device's expf is not glibc's).
if [ ! -x build/rel/gpu/kernel_cmp ]; then
    skip_stage "kernel_cmp --device ($model train)" "not built (it links the simulator: needs g++)"
elif begin "kernel_cmp --device ($model train)" 20; then
    export KCMP_CC="cc -O3 -march=native -ffp-contract=off -fno-math-errno -fno-trapping-math -fopenmp-simd"
    if bin/dpc models/$model.net --batch 4 -o "$work/kcmp.plan" >/dev/null; then
        mkdir -p "$work/kcmp"
        timeout "$(limit 90)" build/rel/gpu/kernel_cmp "$work/kcmp.plan" train "$work/kcmp" --device \
            >"$out/kernel_cmp.txt" 2>&1
        rc=$?
        tail -n 5 "$out/kernel_cmp.txt"
        [ $rc = 0 ] || fail "kernel_cmp --device: exit $rc$([ $rc = 124 ] && echo ' (time limit)')"
        fig kernel_cmp_device "$(tail -n 1 "$out/kernel_cmp.txt")"
    else
        fail "dpc models/$model.net --batch 4"
    fi
    end
fi

# ---- 5. the cost model beside the measurement -------------------------------------------------
# dpc --cost's modelled time per kernel and GEMM of the train program next to
# what DPC_PROFILE=1 measures (every call synchronised, eager).
# The model prices cuDNN's convolutions; where cuDNN did not run (no
# library, or one that cannot start), both sides are of --conv im2col.
conv_flag=()
if begin "cost model vs measured (fp32)" 20; then
    if DPC_PROFILE=1 timeout "$(limit 60)" bin/dprun "$plan" --device cuda --data synthetic --steps 5 \
        >/dev/null 2>"$work/profile.txt" && ! grep -q ' x  conv ' "$work/profile.txt"; then
        echo "cuDNN ran no convolution here: the cost model and the profile are of --conv im2col"
        conv_flag=(--conv im2col)
        bin/dpc models/$model.net --batch "$batch" "${conv_flag[@]}" -o "$work/cost-im2col.plan" &&
            DPC_PROFILE=1 timeout "$(limit 60)" bin/dprun "$work/cost-im2col.plan" --device cuda --data synthetic \
                --steps 5 >/dev/null 2>"$work/profile.txt"
    fi
    if bin/dpc models/$model.net --batch "$batch" "${conv_flag[@]}" --cost >"$work/cost-model.txt" &&
        tests/gpu/cost_vs_profile.sh "$work/cost-model.txt" "$work/profile.txt" >"$out/cost.txt"; then
        head -n 21 "$out/cost.txt"
        grep '^unmatched:' "$out/cost.txt"
        fig cost_fp32_step "$(grep '^step ' "$out/cost.txt" | awk '{ print "modelled_us", $3, "measured_us", $4, "ratio", $5 }')"
        fig cost_unmatched "$(sed -n 's/^unmatched: //p' "$out/cost.txt")"
    else
        tail -n 5 "$work/profile.txt" 2>/dev/null
        fail "the cost model vs DPC_PROFILE=1"
    fi
    end
fi

# ---- 6. PyTorch on the same network -----------------------------------------------------------
# The machine's own environment has PyTorch: the first python3 that imports
# torch, on PATH or in the usual places.
torch_py=""
for p in $(type -ap python3) /opt/conda/bin/python3 /usr/local/bin/python3 /usr/bin/python3; do
    if [ -x "$p" ] && timeout 60 "$p" -c 'import torch' 2>/dev/null; then
        torch_py=$p
        break
    fi
done
if [ -z "$torch_py" ]; then
    skip_stage "PyTorch baseline" "no python3 with torch"
elif begin "PyTorch baseline" 30; then
    torch_dev=cuda
    command -v nvidia-smi >/dev/null 2>&1 || torch_dev=cpu # the rehearsal
    echo "python: $torch_py"
    # One process per mode, each with its own limit: a mode that runs out
    # of time (torch.compile's first compile can) is a missing figure, not
    # a failure, and costs the others nothing.
    : >"$out/torch.txt"
    for ml in eager:40 bf16_cl:40 compile:90; do
        mode=${ml%%:*} l=$(limit "${ml#*:}")
        timeout "$l" "$torch_py" tests/gpu/torch_baseline.py --device $torch_dev --model "$model" \
            --batch "$batch" --steps 20 --modes "$mode" --budget "$((l - 5))" >"$work/torch-$mode.txt" 2>&1
        rc=$?
        case $rc in
        0) ;;
        124 | 137)
            echo "torch $mode skipped: its time limit ($l s) ran out" >>"$work/torch-$mode.txt"
            fig "torch_$mode" "missing: its time limit ($l s) ran out"
            ;;
        *) fail "torch_baseline.py --modes $mode: exit $rc" ;;
        esac
        # the version line once, then each mode's lines
        if [ -s "$out/torch.txt" ]; then grep -v '^torch [0-9]' "$work/torch-$mode.txt"; else cat "$work/torch-$mode.txt"; fi >>"$out/torch.txt"
    done
    cat "$out/torch.txt"
    # dpc's step time as a ratio to each of PyTorch's: > 1 means dpc is faster.
    for tag in "" bf16_; do
        dpc_ms=$(sed -n "s/^${tag}cuda_graph_ms_per_step \([0-9.]*\).*/\1/p" "$figures")
        [ -n "$dpc_ms" ] || continue
        while read -r _ mode _ ms _; do
            fig "torch_${mode}_over_dpc_${tag:-fp32_}graph" \
                "$(awk -v t="$ms" -v d="$dpc_ms" 'BEGIN { printf "%.2f (torch %.3f ms, dpc %.3f ms)", t / d, t, d }')"
        done < <(grep '^torch [a-z0-9_]* ms_per_step' "$out/torch.txt")
    done
    end
fi

# ---- 7. compute-sanitizer memcheck ------------------------------------------------------------
sanitizer=$CUDA_HOME/bin/compute-sanitizer
if [ ! -x "$sanitizer" ]; then
    skip_stage "compute-sanitizer memcheck" "no $sanitizer"
elif ! command -v nvidia-smi >/dev/null 2>&1; then
    skip_stage "compute-sanitizer memcheck" "no GPU driver (nvidia-smi) here"
elif ! timeout 60 "$sanitizer" --tool memcheck --report-api-errors no bin/dprun --device cuda --info \
    >"$work/sanitizer-probe.txt" 2>&1 ||
    grep -qi 'not supported' "$work/sanitizer-probe.txt"; then
    # Some VMs' GPUs are not the tool's ("Device not supported"): a probe
    # that creates a context says so before the run is paid for.
    skip_stage "compute-sanitizer memcheck" "the probe failed: $(grep -m 1 -i -e 'not supported' -e error \
        "$work/sanitizer-probe.txt" | sed 's/^=* *//' | cut -c 1-120)"
elif begin "compute-sanitizer memcheck" 30; then
    # Only memory errors count (--report-api-errors no: a call dpc expects
    # to fail, a cuDNN algorithm probe, is no finding); line tables in the
    # kernels (DPC_NVRTC_LINEINFO=1, its own cache entries) name the line.
    bin/dpc models/$model.net --batch 4 -o "$work/b4.plan" >/dev/null &&
        DPC_CUDA_GRAPH=0 DPC_NVRTC_LINEINFO=1 timeout "$(limit 90)" "$sanitizer" --tool memcheck \
            --report-api-errors no --error-exitcode 9 \
            bin/dprun "$work/b4.plan" --device cuda --data synthetic --steps 2 >"$work/memcheck.txt" 2>&1
    rc=$?
    grep -e 'ERROR SUMMARY' -e '=========' "$work/memcheck.txt" | head -n 20
    [ $rc = 0 ] || fail "compute-sanitizer memcheck: exit $rc"
    fig memcheck "$(grep -m 1 'ERROR SUMMARY' "$work/memcheck.txt" | sed 's/^=* *//')"
    end
fi

# ---- 8. one CIFAR-10 epoch --------------------------------------------------------------------
data=${DPC_CHECK_DATA:-}
if [ -z "$data" ] && [ -f data/cifar10-jpeg.pack ] && [ -f data/cifar10.py ]; then
    py=/usr/bin/python3
    "$py" -c 'import numpy, PIL' 2>/dev/null || py=${torch_py:-python3}
    if [ "$(left)" -gt 60 ] && timeout 100 "$py" data/cifar10.py "$work/cifar" >"$work/unpack.log" 2>&1; then
        data=$work/cifar/cifar-10-batches-bin
    else
        tail -n 5 "$work/unpack.log" 2>/dev/null
        echo "cannot unpack the CIFAR-10 pack in time"
    fi
fi
if [ -z "$data" ]; then
    skip_stage "one CIFAR-10 epoch" "no data (carry data/: see the header)"
elif begin "one CIFAR-10 epoch" 40; then
    # DPC_DEBUG=2: every step's loss and host waits (dprun.log keeps them).
    DPC_DEBUG=2 timeout "$(limit 600)" bin/dprun "$plan" --device cuda --data "$data" --epochs 1 \
        --metrics "$out/metrics.jsonl" >"$out/dprun.log" 2>&1
    rc=$?
    grep -v -e '^dprun: cuda: module' -e 'debug: ' "$out/dprun.log" | tail -n 12
    if [ $rc = 0 ]; then
        fig epoch "$(grep -m 1 '^EPOCH' "$out/dprun.log")"
        fig epoch_host_waits "$(sed -n 's/.*debug: host waits in step [0-9]*: \([0-9]*\) .*/\1/p' "$out/dprun.log" |
            awk '{ n++; if ($1 == 0) z++; if ($1 > m) m = $1 } END { printf "%d of %d steps with none (most in a step: %d)", z, n, m }')"
        fig epoch_backend_counters "$(grep '^dprun: cuda: .* launches' "$out/dprun.log" | tail -n 1)"
    else
        fail "dprun one epoch: exit $rc$([ $rc = 124 ] && echo ' (time limit: the epoch did not fit)')"
    fi
    end
fi

say "done in $(elapsed) s (status $status)"
exit $status
