#!/usr/bin/env bash
# run: tier=full san=no
# The numeric programs under other CPUs' kernels (a tolerance that holds
# on one CPU's kernels may not on another's). OpenBLAS and
# oneDNN pick their kernels from the CPU, and both can be told to act as
# an older one: OPENBLAS_CORETYPE and ONEDNN_MAX_CPU_ISA. Under each
# setting below that this CPU supports (one above it is a skip with the
# flag it lacks, never a pass), after checking that the setting took
# effect (else a failure, and its programs do not run: they would test
# the default again):
#  - OpenBLAS: openblas_get_corename() of a probe linked as dpc links
#    (-lopenblas) names the core asked for; dprun keeps a user's
#    OPENBLAS_CORETYPE (runtime/device/blascore.c re-executes only when
#    it is unset);
#  - oneDNN: one step of cnn_small (library convolutions) under
#    ONEDNN_VERBOSE=1 prints the setting's ISA line, runs convolutions,
#    and no implementation named for an ISA above it;
# it runs, at DPC_TIER=test (their core cases): test_libconv and
# conv_test.sh (the library convolutions), test_cuda_fake and
# fake_sim_test.sh (the cuda backend on the fake driver, whose cuBLAS is
# OpenBLAS, against the cpu backend), tf32_test.sh, bf16_test.sh, and a
# few parity_test.sh cases (DPC_PARITY_CASES). sim_test.sh is not among
# them: no kernel it runs calls either library. The generated C kernels
# are built -march=native (runtime/device/device.h), so they follow the
# real CPU under every setting; only the libraries are imitated.
# Each program's counts are added to this one's; each setting says its
# programs' lines and its wall time. DPC_CPU_SETTINGS="avx2 ..." runs only
# the settings named. Prints `N passed, N failed[, N skipped]`.
. tests/lib.sh
export DPC_BIN=$bin DPC_BUILD=$build DPC_TIER=test

# NAME OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA CPU-FLAGS (what both need)
settings=(
    "avx2 Haswell AVX2 avx2,fma"
    "avx512 SkylakeX AVX512_CORE avx2,fma,avx512f,avx512cd,avx512bw,avx512dq,avx512vl"
    "avx512_bf16 Cooperlake AVX512_CORE_BF16 avx2,fma,avx512f,avx512cd,avx512bw,avx512dq,avx512vl,avx512_bf16"
)
# oneDNN 2.6's ISA line for each, and the implementations above it.
declare -A isa_line=(
    [AVX2]='Intel AVX2'
    [AVX512_CORE]='Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions'
    [AVX512_CORE_BF16]='Intel AVX-512 with Intel DL Boost and bfloat16 support'
)
declare -A above=(
    [AVX2]='avx512|amx'
    [AVX512_CORE]='avx512_core_(vnni|bf16|fp16|amx)'
    [AVX512_CORE_BF16]='fp16|amx'
)
parity_cases='test cnn_small 64 --steps 3
test cnn_small 64 --steps 3 --conv im2col
test cnn_small@lamb(wd=0.01,eps=1e-4) 64 --steps 3 --lr 0.01 --float32-floor
test cnn_small@adamw(wd=0.01,eps=1e-4) 64 --steps 3 --lr 0.01 --float32-floor
test resnet18 32 --replicas 4
test resnet18_v2 32 --steps 3
test resnet50 32
test mobilenet_v2 32 --float32-floor'
programs=(
    "$build/tests/test_libconv"
    "bash tests/conv_test.sh"
    "$build/tests/test_cuda_fake"
    "bash tests/fake_sim_test.sh"
    "bash tests/tf32_test.sh"
    "bash tests/bf16_test.sh"
    "bash tests/parity_test.sh"
)

cpu_flags=" $(grep -m 1 '^flags' /proc/cpuinfo | cut -d: -f2) "
dnnl=0
grep -q '^HAVE_DNNL := 1' build/config.mk 2>/dev/null && dnnl=1

printf '#include <stdio.h>\nchar *openblas_get_corename(void);\nint main(void) { puts(openblas_get_corename()); return 0; }\n' >"$tmp/core.c"
if ! ${CC:-cc} -o "$tmp/core" "$tmp/core.c" -lopenblas 2>"$tmp/core.err"; then
    bad "cannot build the OpenBLAS probe: $(cat "$tmp/core.err")"
    finish
    exit
fi
"$bin/dpc" models/cnn_small.net --batch 8 -o "$tmp/probe.plan" || bad "cannot compile the oneDNN probe's plan"
# For the log: what the test programs get unset (dprun may re-execute).
echo "unset: OpenBLAS runs $(env -u OPENBLAS_CORETYPE "$tmp/core")'s kernels here"

# took_effect NAME CORE ISA: 0 when OpenBLAS and oneDNN run as set (the
# variables exported), else counts a failure saying what ran instead.
took_effect() {
    local name=$1 core=$2 isa=$3 got
    got=$("$tmp/core")
    if [ "${got,,}" != "${core,,}" ]; then
        bad "$name: OPENBLAS_CORETYPE=$core, but OpenBLAS runs $got's kernels"
        return 1
    fi
    [ $dnnl = 1 ] || return 0
    ONEDNN_VERBOSE=1 "$bin/dprun" "$tmp/probe.plan" --steps 1 >"$tmp/v.log" 2>&1
    got=$(sed -n 's/^onednn_verbose,info,cpu,isa://p' "$tmp/v.log")
    if [ "$got" != "${isa_line[$isa]}" ]; then
        bad "$name: ONEDNN_MAX_CPU_ISA=$isa, but oneDNN says isa '$got', not '${isa_line[$isa]}'"
        return 1
    fi
    local impls
    impls=$(awk -F, '$2 == "exec" && $4 == "convolution" { print $5 }' "$tmp/v.log" | sort -u)
    if [ -z "$impls" ]; then
        bad "$name: no oneDNN convolution ran in the probe"
        return 1
    fi
    if grep -qE "${above[$isa]}" <<<"$impls"; then
        bad "$name: ONEDNN_MAX_CPU_ISA=$isa ran $(grep -E "${above[$isa]}" <<<"$impls" | paste -sd' ')"
        return 1
    fi
    echo "$name: OpenBLAS $core, oneDNN '${isa_line[$isa]}', convolutions $(paste -sd' ' <<<"$impls")"
}

# run_program NAME CMD...: CMD's `N passed, N failed[, N skipped]` added to
# this program's counts; no such line, or a non-zero exit with none
# failed, is one failure.
run_program() {
    local name=$1; shift
    local start rc line p f s=0
    start=$(date +%s)
    "$@" >"$tmp/prog.log" 2>&1 </dev/null
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/prog.log" | tail -n 1)
    if [ -z "$line" ]; then
        bad "$name: exited $rc without a result line"
        tail -n 20 "$tmp/prog.log" | sed 's/^/    /'
        return
    fi
    p=${line%% passed*} f=${line#*, } f=${f%% failed*}
    case "$line" in *skipped*) s=${line##*failed, } s=${s%% skipped*} ;; esac
    [ "$rc" != 0 ] && [ "$f" = 0 ] && f=1
    pass=$((pass + p)) fail=$((fail + f)) skipped=$((skipped + s))
    echo "$name: $line ($(($(date +%s) - start))s)"
    if [ "$f" != 0 ]; then
        grep -E 'FAIL|check failed' "$tmp/prog.log" | grep -v -E '^[0-9]+ passed' | tail -n 20 | sed 's/^/    /'
    fi
    grep -h '^SKIP: ' "$tmp/prog.log" | sed "s/^SKIP: /    skipped: /"
}

names=" ${settings[*]%% *} "
for want in ${DPC_CPU_SETTINGS:-}; do
    [[ $names == *" $want "* ]] || bad "DPC_CPU_SETTINGS: no setting $want (the settings:${names% })"
done
for setting in "${settings[@]}"; do
    read -r name core isa flags <<<"$setting"
    [[ " ${DPC_CPU_SETTINGS:-$name} " == *" $name "* ]] || continue
    lacks_flag=
    for fl in ${flags//,/ }; do
        [[ $cpu_flags == *" $fl "* ]] || lacks_flag="$lacks_flag $fl"
    done
    if [ -n "$lacks_flag" ]; then
        skip "$name (OPENBLAS_CORETYPE=$core ONEDNN_MAX_CPU_ISA=$isa): this CPU lacks$lacks_flag"
        continue
    fi
    export OPENBLAS_CORETYPE=$core ONEDNN_MAX_CPU_ISA=$isa
    t0=$(date +%s) p0=$pass f0=$fail
    if took_effect "$name" "$core" "$isa"; then
        ok
        for prog in "${programs[@]}"; do
            # shellcheck disable=SC2086
            DPC_PARITY_CASES=$parity_cases run_program "$name $(basename "${prog##* }")" $prog
        done
    fi
    echo "$name: $((pass - p0)) passed, $((fail - f0)) failed in $(($(date +%s) - t0))s"
    unset OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA
done
finish
