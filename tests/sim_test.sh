#!/usr/bin/env bash
# run: tier=test
# The CUDA simulator (tests/sim): builds it and its drivers with g++ into
# $DPC_BUILD/sim (under AddressSanitizer + UBSan when the build tree is the
# sanitized one; the fibers carry ASan's switch annotations), then
#  - runs the hand-written kernels of tests/sim/kernels: a block reduction
#    equals the serial sum, a butterfly and a ballot give every lane its
#    warp's values, a divergent __syncthreads() and a shuffle naming exited
#    lanes (or lanes past the end of the block) are reported as errors;
#    a shared-memory tree reduction runs without a race reported, while
#    write-write, write-read and read-write races and an index past the end
#    of a DPC_SHARED_ARRAY are reported; a SIGSEGV handler names the faulting
#    kernel, block and thread with sim_where() (lane 15 runs on first after
#    the shuffle that lane 15 completes);
#  - compiles every emitted CUDA kernel of every model and of
#    tests/nets/shape_small.net, gpt_tiny.net and vit_tiny.net (train and
#    eval, fp32 and bf16) as host C++
#    against cuda_sim.h, each with its SIM_KERNEL entry;
#  - runs emitted elementwise kernels of mlp under the simulator and compares
#    every buffer, bit for bit, with the C-dialect kernel of the same name.
# (Under ASan, gcc's libasan warns once per process that it does not fully
# support swapcontext, so the refusals are checked on the last line.)
# Prints `N passed, N failed`.
. tests/lib.sh
out=$build/sim
mkdir -p "$out"
cxx=${CXX:-g++}
flags=(-std=c++17 -O2 -g -Wall -Wextra -Werror -ffp-contract=off -Itests/sim)
cflags=(-std=c11 -O2 -g -Wall -Wextra -Werror -ffp-contract=off)
case "$build" in
*asan*)
    # -fno-sanitize=null: gcc's UBSan reports the address of a thread_local
    # (threadIdx) in an executable as null; the fake's -fPIC objects are fine.
    san=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -fno-sanitize=null)
    flags+=("${san[@]}") cflags+=("${san[@]}")
    ;;
esac

# A TU for the kernels of .cu file $1 (named as `extern "C" __global__ void
# [__launch_bounds__(N) ]NAME(`).
kernel_tu() {
    printf '#include "cuda_sim.h"\n#include "%s"\n' "$(realpath "$1")"
    sed -n 's/^extern "C" __global__ void \(__launch_bounds__([0-9]*) \)\{0,1\}\([A-Za-z_0-9]*\)(.*/SIM_KERNEL(\2)/p' "$1"
}
build_or_fail() { # what, command...
    local what=$1; shift
    if "$@" 2>"$tmp/cc.err"; then ok; return 0; fi
    bad "cannot build $what:"; sed 's/^/    /' "$tmp/cc.err" | head -20
    return 1
}

# ---- the runner and the hand-written kernels ---------------------------------
built=1
build_or_fail sim.o "$cxx" "${flags[@]}" -c tests/sim/sim.cpp -o "$out/sim.o" || built=0
objs=()
for k in block_sum warp_allsum divergent_barrier half_warp_shfl tree_sum shared_check; do
    kernel_tu "tests/sim/kernels/$k.cu" >"$out/$k.cpp"
    build_or_fail "$k" "$cxx" "${flags[@]}" -c "$out/$k.cpp" -o "$out/$k.o" || built=0
    objs+=("$out/$k.o")
done
if [ $built = 1 ] && build_or_fail sim_kernels "$cxx" "${flags[@]}" -o "$out/sim_kernels" \
    tests/sim/sim_kernels.cpp "${objs[@]}" "$out/sim.o"; then
    k=$out/sim_kernels
    check "block_sum one block" "$k" sum 1000 1 256
    check "block_sum, grid-stride, 1024 threads" "$k" sum 100000 3 1024
    check "block_sum, one warp per block" "$k" sum 77 4 32
    expect_fail "full-mask shuffle in a partial warp (block of 200)" \
        'block_sum: block (0,0,0): __shfl_down_sync with mask 0xffffffff in thread 192 (192,0,0) names lane 8, which does not exist (block of 200 threads)' \
        "$k" sum 5000 2 200
    check "tree_sum: shared tree, __syncwarp and shuffle tail (no race reported)" "$k" tree 100000 3 1024
    check "tree_sum, 64 threads" "$k" tree 999 2 64
    check "shared: __syncthreads orders a write and another thread's read" "$k" shared 3
    check "shared: __syncwarp orders lanes of one warp" "$k" shared 4
    sc='shared_check: block (0,0,0): shared array'
    expect_fail "shared: write-write race" \
        "$sc s: thread 1 (1,0,0) writes s[0], which thread 0 (0,0,0) wrote in the same barrier interval with no barrier or warp operation of both between them (a write-write race)" \
        "$k" shared 0
    expect_fail "shared: a write after another thread's read" \
        "$sc s: thread 1 (1,0,0) writes s[1], which thread 0 (0,0,0) read in the same barrier interval with no barrier or warp operation of both between them (a read-write race)" \
        "$k" shared 1
    expect_fail "shared: index past the end" \
        'shared_check: block (0,0,0): thread 32 (32,0,0): index 32 is outside shared array small[32]' \
        "$k" shared 2
    expect_fail "shared: __syncwarp does not order two warps" \
        "$sc s: thread 63 (63,0,0) writes s[63], which thread 31 (31,0,0) read in the same barrier interval with no barrier or warp operation of both between them (a read-write race)" \
        "$k" shared 5
    expect_fail "shared: a read of another thread's write" \
        "$sc s: thread 1 (1,0,0) reads s[0], which thread 0 (0,0,0) wrote in the same barrier interval with no barrier or warp operation of both between them (a write-read race)" \
        "$k" shared 6
    expect_fail "sim_where names the faulting kernel, block and thread" \
        'kernel half_warp_shfl block (0,0,0) thread (15,0,0)' "$k" where
    check "warp_allsum: xor butterfly and ballot" "$k" allsum 8
    check "half-warp shuffle with a half-warp mask" "$k" halfwarp 0x0000ffff
    expect_fail "divergent barrier" \
        'divergent_barrier: block (0,0,0): __syncthreads() in thread 0 (0,0,0) is not reached by every thread of the block: thread 16 (16,0,0) has exited' \
        "$k" divergent
    expect_fail "shuffle naming exited lanes" \
        'half_warp_shfl: block (0,0,0): __shfl_xor_sync with mask 0xffffffff in thread 0 (0,0,0) names inactive lane 16 (thread 16 (16,0,0) has exited)' \
        "$k" halfwarp 0xffffffff
fi

# ---- every emitted CUDA kernel compiles against cuda_sim.h --------------------
# One TU per kernel directory; each file inside its own namespace, since the
# files of one directory repeat their typedefs and static helpers.
ek=$tmp/ek
mkdir -p "$ek"
for m in mlp cnn_small resnet18_cifar resnet18 shape_small gpt_tiny vit_tiny; do
    # the test nets first (models/vit_tiny.net is the full ViT): shape_small:
    # the shape ops, the tiled permute; gpt/vit_tiny: positions
    net=tests/nets/$m.net
    [ -f "$net" ] || net=models/$m.net
    for p in fp32 bf16; do
        prec=()
        [ $p = bf16 ] && prec=(--precision bf16)
        if ! "$bin/dpc" "$net" "${prec[@]}" --emit-kernels "$ek/$m-$p" -o "$tmp/$m-$p.plan" >/dev/null 2>"$tmp/dpc.err"; then
            bad "dpc --emit-kernels $m $p: $(cat "$tmp/dpc.err")"
            continue
        fi
        for prog in train eval; do
            d=$ek/$m-$p/$prog-cuda
            n=$(ls "$d"/*.cu 2>/dev/null | wc -l)
            if [ "$n" -eq 0 ]; then bad "$m $p $prog: no CUDA kernels emitted"; continue; fi
            tu=$tmp/$m-$p-$prog.cpp
            {
                printf '#include "cuda_sim.h"\n'
                i=0
                for f in "$d"/*.cu; do
                    printf 'namespace f%d {\n' $i
                    kernel_tu "$f" | tail -n +2
                    printf '}\n'
                    i=$((i + 1))
                done
            } >"$tu"
            # (a pass kernel of a split channel leaves some arguments and values unused)
            build_or_fail "$m $p $prog ($n kernel files)" "$cxx" "${flags[@]}" -Wno-unused-parameter -Wno-unused-variable \
                -fsyntax-only "$tu"
        done
    done
done

# ---- emitted elementwise kernels: simulated CUDA == C, bit for bit ------------
# mlp train: name, then the buffer lengths (b0, b1, ...), then count.
cmp_case() { # name count grid block len...
    local name=$1 count=$2 grid=$3 block=$4; shift 4
    local cu=$ek/mlp-fp32/train-cuda/$name.cu c=$ek/mlp-fp32/train-c/$name.c
    if [ ! -f "$cu" ] || [ ! -f "$c" ]; then bad "$name: not emitted for mlp"; return; fi
    local exe=$out/cmp_$name
    kernel_tu "$cu" >"$out/$name.cpp"
    build_or_fail "$name (CUDA)" "$cxx" "${flags[@]}" -c "$out/$name.cpp" -o "$out/$name.o" || return
    build_or_fail "$name (C)" "${CC:-cc}" "${cflags[@]}" -D"$name=ref_$name" -c "$c" -o "$out/ref_$name.o" || return
    build_or_fail "cmp_$name" "$cxx" "${flags[@]}" -DSIM_ENTRY="sim_entry_$name" -DREF_KERNEL="ref_$name" \
        -DSIM_NAME="\"$name\"" -o "$exe" tests/sim/cmp_elementwise.cpp "$out/$name.o" "$out/ref_$name.o" "$out/sim.o" || return
    check "$name simulated == C (grid $grid, block $block)" "$exe" "$count" "$grid" "$block" "$@"
}
if [ $built = 1 ]; then
    cmp_case k0_bias_add_relu 8192 4 256 8192 8192 128
    cmp_case k1_bias_add 640 1 1024 640 640 10
    cmp_case k5_sgd_momentum_add_assign 393216 37 128 393216 393216 393216 1 1
fi
finish
