#!/usr/bin/env bash
# tests/gpu/check.sh OUTDIR — the cuda backend on a real GPU (issue 7;
# docs/DESIGN.md §8, §13), in one go, in under 8 minutes on one H200:
#   1. environment (GPU, driver, toolkit) and dependencies;
#   2. build (make all gpu-tools);
#   3. cuda vs cpu parity on resnet18 at batch 128: one training step from
#      the same weights (loss, logits, gradients, updated weights, momentum,
#      BatchNorm statistics), the eval program after it, the same step
#      replayed as a CUDA graph; tolerances in tests/gpu/cuda_check.c;
#      then 50 steady-state steps eager and as a graph (ms/step, img/s,
#      launches per step);
#   3b. the same for dpc --precision bf16 (cuda vs the cpu's bit-exact bf16
#      emulation, tolerances x50) and its 50-step timings (bf16_* figures);
#   3c. every CUDA kernel call of resnet18 and cnn_small (batch 4, fp32 and
#      bf16, train and eval) on the GPU against its C-dialect kernel
#      (tests/sim/kernel_cmp.c --device: what tests/sim_models_test.sh runs
#      under the simulator);
#   4. dprun's training loop, 30 steady-state steps of synthetic data
#      (--benchmark): CUDA-graph replay (the default) vs DPC_CUDA_GRAPH=0,
#      img/s and kernel launches per step (DPC_DEBUG=1 prints them for a
#      replica's first three steps: eager, recorded, replayed); the same
#      for --gpus 4 (replicas sharing the GPU: local collective, the step
#      recorded as segments around the all-reduces);
#   4b. dpc --cost's modelled time per kernel beside DPC_PROFILE=1's
#      measurement (tests/gpu/cost_vs_profile.sh), fp32 and bf16;
#   5. resnet18 on CIFAR-10 for 2 epochs at batch 128 with dprun --device
#      cuda (epoch times, img/s, launches per step); then --gpus 16 (16
#      replicas sharing the GPU, local collective) for one epoch's 24
#      steps. A run dprun refuses or that no longer fits the time budget is
#      skipped with a message. (One GPU: the nccl collective, which needs a
#      device per replica, is tested on the fake driver only.)
# Writes OUTDIR/check.log (everything printed), OUTDIR/figures.txt (`name
# value` lines, the figures to report), OUTDIR/metrics*.jsonl (dprun's
# per-epoch metrics), OUTDIR/cuda_check.txt and OUTDIR/dprun-*.log: at most
# 7 files, within what the device tool brings back. Exit status 0 when every
# step that ran passed.
#
# How to run it with the device tool, from the development checkout:
#   mkdir -p data && cp ../shared/data/cifar10-jpeg.pack ../shared/data/cifar10.py data/
#   make        # leaves build/rel/gen: the lexer and parser, for a machine without flex/bison
#   run(command="bash tests/gpu/check.sh $OUT", carry=["data", "build/rel/gen"], timeout_s=560)
# data/ and build/ are ignored by git, hence `carry`; the pack is 56 MB of
# the 64 MiB a call may carry, so carry nothing else big. The GPU machine
# has no network: make's dependency check (scripts/deps.sh, which would
# apt-get) is skipped (DEPS=0), flex/bison are replaced by the carried generated
# sources when missing, and without OpenBLAS a small C cblas_sgemm
# (tests/gpu/cblas_shim) stands in for it (the cpu side of the parity check
# only). Each stage has a time limit; what is left of the 8 minutes is
# checked before the optional ones.
set -u
out=${1:?usage: tests/gpu/check.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
root=$(pwd)
exec > >(tee "$out/check.log") 2>&1
t_start=$(date +%s)
budget=${DPC_CHECK_BUDGET:-470} # seconds for everything, leaving the call's margin
work=$(mktemp -d /tmp/dpc-gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
export DPC_CACHE_DIR=$work/cache
figures=$out/figures.txt
: >"$figures"
status=0
elapsed() { echo $(($(date +%s) - t_start)); }
left() { echo $((budget - $(elapsed))); }
say() { echo "== [$(elapsed) s] $*"; }
fig() { echo "$1 ${*:2}" >>"$figures"; echo "figure: $1 ${*:2}"; }
fail() { echo "FAIL: $*"; status=1; }

# ---- 1. environment ---------------------------------------------------------------
say "environment"
uname -a
nproc
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 || true
fig gpu "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
if [ -z "${CUDA_HOME:-}" ] || [ ! -f "$CUDA_HOME/include/nvrtc.h" ]; then
    CUDA_HOME=/usr/local/cuda
    if [ ! -f "$CUDA_HOME/include/nvrtc.h" ] && command -v nvcc >/dev/null; then
        CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    fi
fi
export CUDA_HOME
echo "CUDA_HOME=$CUDA_HOME"
"$CUDA_HOME/bin/nvcc" --version 2>&1 | tail -n 2 || true
[ -f "$CUDA_HOME/include/nvrtc.h" ] || { fail "no CUDA toolkit (nvrtc.h) at $CUDA_HOME"; exit 1; }
# The driver library: the loader's search, else where driver mounts put it.
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 '; then
    for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
        if [ -e "$d/libcuda.so.1" ]; then
            export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
            echo "libcuda.so.1 found in $d"
            break
        fi
    done
fi
# cuBLAS: the toolkit's, else a Python wheel's.
if [ ! -e "$CUDA_HOME/lib64/libcublas.so.13" ] && [ -z "${DPC_LIBCUBLAS:-}" ]; then
    c=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13' 2>/dev/null | head -n 1)
    if [ -n "$c" ]; then
        export DPC_LIBCUBLAS=$c LD_LIBRARY_PATH=$(dirname "$c")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        echo "cuBLAS: $c"
    fi
fi

# ---- dependencies (no network there) ---------------------------------------------------
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
if [ $have_cblas = 0 ] || [ -n "${DPC_CHECK_FORCE_SHIM:-}" ]; then
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

# ---- 2. build ---------------------------------------------------------------------------
say "build"
if ! timeout 240 make -j"$(nproc)" all gpu-tools DEPS=0 CUDA_HOME="$CUDA_HOME" >"$work/make.log" 2>&1; then
    tail -n 40 "$work/make.log"
    fail "make failed"
    exit 1
fi
tail -n 3 "$work/make.log"
[ -x build/rel/gpu/cuda_check ] || { fail "build/rel/gpu/cuda_check was not built"; exit 1; }
fig build_s "$(elapsed)"

plan=$work/resnet18.plan
bin/dpc models/resnet18.net -o "$plan" || { fail "dpc models/resnet18.net"; exit 1; }
bin/dpc models/resnet18.net --stats 2>/dev/null | grep 'kernels per step' | sed 's/^/  /'
fig resnet18_train_kernels_per_step "$(bin/dpc models/resnet18.net --stats 2>/dev/null |
    sed -n 's/^train kernels per step: fused \([0-9]*\).*/\1/p')"

# ---- 3. parity and step timings -----------------------------------------------------------
say "cuda vs cpu parity, CUDA graph replay, 50-step timings (resnet18, batch 128)"
DPC_DEBUG=1 timeout 200 build/rel/gpu/cuda_check "$plan" --bench 50 --figures "$figures" \
    >"$out/cuda_check.txt" 2>&1
rc=$?
cat "$out/cuda_check.txt"
case $rc in
0) echo "parity: passed" ;;
2) fail "cuda_check found no CUDA device"; exit 1 ;;
124) fail "cuda_check ran past 200 s" ;;
*) fail "cuda_check: exit $rc" ;;
esac

# ---- 3b. mixed precision -----------------------------------------------------------------------
# The bf16 plan (dpc --precision bf16) on the GPU (cublasGemmEx on bf16
# operands, bf16 activations) against the same plan on the cpu, which
# emulates bf16 bit for bit: tolerances x50 (GEMM sums in another order
# round to neighbouring bf16 values; see tests/gpu/cuda_check.c); then its
# 50-step timings. Figures named bf16_*; output appended to cuda_check.txt.
# bf16 against fp32 is tests/bf16_test.sh's (cpu).
if [ "$(left)" -lt 200 ]; then
    echo "SKIP bf16: only $(left) s of the budget left"
    fig bf16 "skipped: out of time"
else
    say "bf16: cuda vs cpu on the bf16 plan, 50-step timings (resnet18, batch 128)"
    bfplan=$work/resnet18-bf16.plan
    if bin/dpc models/resnet18.net --precision bf16 -o "$bfplan"; then
        timeout 150 build/rel/gpu/cuda_check "$bfplan" --tol-scale 50 --tag bf16 \
            --bench 50 --figures "$figures" >"$work/bf16.txt" 2>&1
        rc=$?
        cat "$work/bf16.txt" | tee -a "$out/cuda_check.txt"
        case $rc in
        0) echo "bf16 parity: passed" ;;
        124) fail "cuda_check bf16 ran past 150 s" ;;
        *) fail "cuda_check bf16: exit $rc" ;;
        esac
    else
        fail "dpc models/resnet18.net --precision bf16"
    fi
fi

# ---- 3c. every CUDA kernel call against the C dialect, on the device --------------------------
# tests/sim/kernel_cmp.c --device: the comparison tests/sim_models_test.sh
# runs under the simulator, with the CUDA side on this GPU (NVRTC for its
# architecture, every call's buffers between poisoned margins, the recorded
# launch geometry): resnet18 and cnn_small at batch 4, fp32 and bf16,
# fused, train and eval, the eight programs in parallel; one line each
# (calls compared, bit-identical, within tolerance, the worst error).
# Kernels calling a math function are held to the tolerance here (the
# device's expf/logf/sqrtf are not glibc's).
kernel_cmp_device() {
    if [ "$(left)" -lt 150 ]; then
        echo "SKIP kernel_cmp --device: only $(left) s of the budget left"
        fig kernel_cmp_device "skipped: out of time"
        return 0
    fi
    say "kernel_cmp --device: every CUDA kernel call against the C dialect"
    if ! command -v g++ >/dev/null; then
        fail "kernel_cmp --device: no g++ (the harness links the simulator)"
        return 0
    fi
    local d=$work/kcmp f=(-O2 -g -Wall -Wextra -Werror -ffp-contract=off)
    mkdir -p "$d/mod"
    if ! { g++ -std=c++17 "${f[@]}" -Itests/sim -c tests/sim/sim.cpp -o "$d/sim.o" &&
        cc -std=c11 "${f[@]}" -D_GNU_SOURCE -I. -DDPC_HAVE_CUDA -isystem "$CUDA_HOME/include" \
            -c tests/sim/kernel_cmp.c -o "$d/kernel_cmp.o" &&
        g++ -rdynamic -o "$d/kernel_cmp" "$d/kernel_cmp.o" "$d/sim.o" build/rel/libdpc.a \
            -lopenblas -lm -ldl -lpthread -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lnvrtc; } \
        >"$d/build.log" 2>&1; then
        head -n 20 "$d/build.log"
        fail "kernel_cmp --device: cannot build the harness"
        return 0
    fi
    export KCMP_CC="cc -O3 -march=native -ffp-contract=off -fno-math-errno -fno-trapping-math -fopenmp-simd"
    local runs=() m p prog opts
    for m in resnet18 cnn_small; do
        for p in fp32 bf16; do
            opts=(--batch 4)
            [ $p = bf16 ] && opts+=(--precision bf16)
            bin/dpc models/$m.net "${opts[@]}" -o "$d/$m-$p.plan" >/dev/null ||
                { fail "dpc models/$m.net ${opts[*]}"; continue; }
            for prog in train eval; do
                (timeout 100 "$d/kernel_cmp" "$d/$m-$p.plan" $prog "$d/mod" --device \
                    >"$d/$m-$p-$prog.out" 2>"$d/$m-$p-$prog.err"
                    echo $? >"$d/$m-$p-$prog.rc") &
                runs+=("$m-$p-$prog")
            done
        done
    done
    wait
    local r passed=0
    for r in "${runs[@]}"; do
        if [ "$(cat "$d/$r.rc")" = 0 ]; then
            passed=$((passed + 1))
            echo "ok   $r: $(cat "$d/$r.out")"
        else
            echo "FAIL $r: exit $(cat "$d/$r.rc")$([ "$(cat "$d/$r.rc")" = 124 ] && echo ' (time limit)')"
            head -n 8 "$d/$r.err" | sed 's/^/    /'
            fail "kernel_cmp --device $r"
        fi
    done
    fig kernel_cmp_device "$passed of ${#runs[@]} programs passed"
}
kernel_cmp_device

# ---- 4. the training loop's steady state: graphs vs eager ---------------------------------------
# launches TAG LOG: replica 0's kernel and graph launches in its third step.
launches() {
    fig "$1_launches_per_step" "$(grep -m 1 'run 3 (' "$2" | sed 's/^dpc: [a-z]*: //')"
}
bench() { # TAG GRAPHS GPUS
    local tag=$1 graphs=$2 gpus=$3 log=$work/bench-$1.log
    if [ "$(left)" -lt 90 ]; then
        fig "$tag" "skipped: out of time"
        return 0
    fi
    local limit=$(($(left) - 30))
    [ "$limit" -gt 120 ] && limit=120
    say "dprun --benchmark 30 --gpus $gpus, DPC_CUDA_GRAPH=$graphs (limit $limit s)"
    DPC_CUDA_GRAPH=$graphs DPC_DEBUG=1 timeout "$limit" bin/dprun "$plan" --device cuda --gpus "$gpus" \
        --data synthetic --benchmark 30 >"$log" 2>&1
    local rc=$?
    grep -e '^benchmark:' -e '^throughput:' -e 'run 3 (' -e 'error' -e 'collective' "$log" | head -n 12
    if [ $rc != 0 ]; then
        fail "dprun --benchmark ($tag): exit $rc"
        tail -n 20 "$log"
        return 0
    fi
    fig "${tag}_img_per_s" "$(sed -n 's/^throughput: \([0-9.]*\) img\/s/\1/p' "$log")"
    launches "$tag" "$log"
}
bench graph_b128 1 1
bench eager_b128 0 1
bench graph_gpus4 1 4

# ---- 4b. the cost model beside the measurement ----------------------------------------------
# dpc --cost's modelled time per kernel and GEMM of the train program next
# to what DPC_PROFILE=1 measures (each call synchronised, eager), by
# tests/gpu/cost_vs_profile.sh: the first GPU run calibrates the model.
cost_vs_measured() { # TAG PLAN [dpc flags]
    local tag=$1 p=$2
    shift 2
    if [ "$(left)" -lt 90 ]; then
        echo "SKIP cost_$tag: only $(left) s of the budget left"
        fig "cost_$tag" "skipped: out of time"
        return 0
    fi
    say "cost model vs DPC_PROFILE=1 ($tag)"
    bin/dpc models/resnet18.net --cost "$@" >"$work/cost-$tag.txt" || { fail "dpc --cost $tag"; return 0; }
    DPC_PROFILE=1 timeout 60 bin/dprun "$p" --device cuda --data synthetic --steps 5 \
        >/dev/null 2>"$work/profile-$tag.txt" || { fail "dprun DPC_PROFILE=1 ($tag)"; return 0; }
    if tests/gpu/cost_vs_profile.sh "$work/cost-$tag.txt" "$work/profile-$tag.txt" >"$work/side-$tag.txt"; then
        head -n 21 "$work/side-$tag.txt"
        fig "cost_${tag}_step" "$(tail -n 1 "$work/side-$tag.txt" | awk '{ print "modelled_us", $3, "measured_us", $4, "ratio", $5 }')"
    else
        fail "cost_vs_profile $tag"
    fi
}
cost_vs_measured fp32 "$plan"
[ -n "${bfplan:-}" ] && [ -f "$bfplan" ] && cost_vs_measured bf16 "$bfplan" --precision bf16

# ---- 5. training ------------------------------------------------------------------------------
say "CIFAR-10"
py=/usr/bin/python3
"$py" -c 'import numpy, PIL' 2>/dev/null || py=python3
data=""
if [ -f data/cifar10-jpeg.pack ] && [ -f data/cifar10.py ]; then
    if timeout 150 "$py" data/cifar10.py "$work/cifar" >"$work/unpack.log" 2>&1; then
        data=$work/cifar/cifar-10-batches-bin
        ls -la "$data" | tail -n +2
    else
        cat "$work/unpack.log"
        fail "cannot unpack the CIFAR-10 pack"
    fi
else
    fail "no data/cifar10-jpeg.pack + data/cifar10.py (copy them from ../shared/data: see the header)"
fi

# train TAG GPUS: 2 epochs of resnet18 at batch 128 per replica. A dprun
# that refuses the flags (--device cuda before it is wired to
# rt_backend_open, --gpus 16 before the data-parallel issue) is a skip.
train() { # TAG GPUS [more dprun flags]
    local tag=$1 gpus=$2
    shift 2
    local limit=$(($(left) - 20))
    if [ "$limit" -lt 60 ]; then
        echo "SKIP $tag: only $(left) s of the budget left"
        fig "$tag" "skipped: out of time"
        return 0
    fi
    say "dprun --device cuda --gpus $gpus: 2 epochs (limit $limit s)"
    local log=$out/dprun-$tag.log
    DPC_DEBUG=1 timeout "$limit" bin/dprun "$plan" --device cuda --gpus "$gpus" --data "$data" \
        --epochs 2 "$@" --metrics "$out/metrics-$tag.jsonl" >"$log" 2>&1
    local rc=$?
    grep -v '^dpc: cuda: module' "$log" | tail -n 30
    if [ $rc != 0 ]; then
        local why
        why=$(grep -m 1 'error:' "$log")
        if echo "$why" | grep -q -e 'not implemented' -e 'no CUDA device/backend in this build'; then
            echo "SKIP $tag: dprun refuses it: $why"
            fig "$tag" "skipped: $why"
        else
            fail "dprun $tag: exit $rc$([ $rc = 124 ] && echo ' (time limit)')"
        fi
        return 0
    fi
    local imgs
    imgs=$(sed -n 's/.* \([0-9]*\) train \/ .*/\1/p' "$log" | head -n 1)
    imgs=${imgs:-50000}
    local e=0
    while read -r sec; do
        fig "${tag}_epoch${e}_s" "$sec"
        fig "${tag}_epoch${e}_img_per_s" "$(awk -v n="$imgs" -v s="$sec" 'BEGIN { printf "%.0f", n / s }')"
        e=$((e + 1))
    done < <(sed -n 's/^EPOCH *[0-9]*:.*Time per epoch *\([0-9.]*\) seconds.*/\1/p' "$log")
    fig "${tag}_final" "$(grep '^Training time' "$log" | tail -n 1)"
    # The backend's counters (DPC_DEBUG=1, printed when it is freed), over
    # every launch of the run, training and evaluation alike; per training
    # step see cuda_eager_launches_per_step.
    fig "${tag}_backend_counters" "$(grep '^dpc: cuda: .* launches' "$log" | tail -n 1)"
    launches "$tag" "$log"
}
if [ -n "$data" ]; then
    train b128 1
    train gpus16 16 --steps 24
fi

# ---- summary ----------------------------------------------------------------------------------
say "done in $(elapsed) s (status $status)"
fig total_s "$(elapsed)"
echo "---- figures ($figures)"
cat "$figures"
exit $status
