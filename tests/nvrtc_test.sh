#!/usr/bin/env bash
# run: tier=test san=no
# CUDA without a GPU (docs/DESIGN.md §13): every kernel of every net of
# tests/lib.sh's kernel_nets, train and eval programs, fused and unfused
# (--no-fuse), and of its zoo_nets fused (fp32 and bf16), exactly as bin/dpc
# writes them into plans (section KCUD), compiles with NVRTC to a cubin for
# sm_80 and for sm_90, and each cubin holds every kernel the program names.
# Six variants in `make test-full` (fp32 and bf16, fused and unfused, two
# channel-major), three in `make test` (below). One check per program and
# architecture, plus one per plan written. The two architectures compile in
# parallel (NVRTC is single-threaded; this is most of the suite's NVRTC time).
# Resources: each compile asks ptxas for its report, and a program
# fails when a kernel could not launch at the block its calls record
# (registers x threads over 64K, shared memory over 48 KiB, over 1024
# threads) or lacks __launch_bounds__ of that block (test_cuda --plans). The
# kernels using most of their block's register file and the most shared
# memory are printed; the whole table is $DPC_RESOURCE_TABLE when set.
# A build without the CUDA toolkit has no NVRTC: the tool says so, 0 checks.
. tests/lib.sh
tool=$build/tests/test_cuda
export DPC_CACHE_DIR=$tmp/cache

[ -x "$tool" ] || { echo "FAIL: $tool not built"; echo "0 passed, 1 failed"; exit 1; }

# `make test` compiles three variants of kernel_nets that between them hold
# every kernel body (fused fp32; single ops unfused in fp32; unfused bf16
# channel-major); `make test-full` all six, and the zoo nets.
variants=("fused:" "unfused:--no-fuse" "bf16-unfused-layout:--precision bf16 --no-fuse --layout")
if tier_at_least full; then
    variants+=("bf16-fused:--precision bf16" "bf16-unfused:--precision bf16 --no-fuse" "layout:--layout")
fi
# The zoo nets: fused, fp32 and bf16 only (they are the large ones, and
# each variant is a whole NVRTC compile per architecture).
zoo_variants=("fused:" "bf16-fused:--precision bf16")
plans=()
# NET VARIANT...: dpc writes NET's plan for each variant (name:flags) into plans.
compile_plans() {
    local m=$1 v name flags out
    shift
    for v in "$@"; do
        name=${v%%:*} flags=${v#*:}
        out=$tmp/$(basename "$m" .net).$name.plan
        # shellcheck disable=SC2086 # flags are words
        if "$bin/dpc" "$m" --target cuda $flags -o "$out" 2>"$tmp/err"; then
            pass=$((pass + 1))
            plans+=("$out")
        else
            fail=$((fail + 1))
            echo "FAIL: dpc $m --target cuda $flags: $(head -n 3 "$tmp/err")"
        fi
    done
}
for m in $(kernel_nets); do compile_plans "$m" "${variants[@]}"; done
if tier_at_least full; then
    for m in $(zoo_nets); do compile_plans "$m" "${zoo_variants[@]}"; done
fi

for arch in sm_80 sm_90; do
    "$tool" --plans --arch "$arch" "${plans[@]}" >"$tmp/$arch.log" 2>&1 &
done
wait
for arch in sm_80 sm_90; do
    grep -v '^[0-9]* passed\|^res ' "$tmp/$arch.log" | sed "s|$tmp/||"
    # res ARCH BLOCK REGS SMEM SPILL USE% KERNEL PLAN PROGRAM
    grep '^res ' "$tmp/$arch.log" | sed "s|$tmp/||" >"$tmp/$arch.res"
    if [ -s "$tmp/$arch.res" ]; then
        echo "$arch: $(wc -l <"$tmp/$arch.res") kernels; most of the register file, then most shared memory:"
        printf '  %-5s %5s %4s %6s %5s %6s %s\n' arch block regs smem spill use kernel
        { sort -k7,7nr -k4,4nr "$tmp/$arch.res" | head -n 6
          sort -k5,5nr "$tmp/$arch.res" | head -n 2; } |
            awk '{ printf "  %-5s %5s %4s %6s %5s %6s %s (%s %s)\n", $2, $3, $4, $5, $6, $7, $8, $9, $10 }'
        [ -n "${DPC_RESOURCE_TABLE:-}" ] && cat "$tmp/$arch.res" >>"$DPC_RESOURCE_TABLE"
    fi
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/$arch.log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL: NVRTC for $arch gave no result"; fail=$((fail + 1))
        continue
    fi
    p=${line%% passed*} f=${line#*, }
    pass=$((pass + p)) fail=$((fail + ${f%% failed*}))
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
