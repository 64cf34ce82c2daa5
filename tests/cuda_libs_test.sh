#!/usr/bin/env bash
# run: tier=check
# Where dpc finds the CUDA libraries, and `dprun --device cuda --info`
# (runtime/cuda/libsearch.h, loader.h). The fake driver
# (build/rel/fake/libfakecuda.so: libcuda + libcublas + libnccl) and the
# toolkit's real NVRTC stand in for the libraries:
#   1. through DPC_LIB*, --info names each library's file, rule and version,
#      the driver and the device (all of them, or DPC_CUDA_DEVICE's);
#   2. a library of the wrong version (a tiny .so built here) is refused with
#      the file and both versions, by --info and when training starts;
#   3. in a mount namespace with ld.so.cache and the toolkit's library
#      directory hidden (a machine with only the driver and wheels): each
#      rule in order ($CUDA_HOME/lib64, a venv's site-packages/nvidia/*/lib
#      found from its bin/python3 on PATH, $CONDA_PREFIX/lib, DPC_LIBNVRTC),
#      a wrong version passed over for a later place, a missing library named
#      with every place looked in and its packages (exit 1; NCCL and cuDNN
#      missing: exit 0), and NVRTC loaded from a wheel directory compiles a
#      plan's kernels (its builtins come from beside it).
# No fake driver (no toolkit or g++): skipped. No namespace: part 3 skipped.
. tests/lib.sh
fake=$build/fake/libfakecuda.so
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$fake" ]; then
    skip "no $fake (the fake driver needs the CUDA toolkit and g++)"
    finish
    exit
fi
nvrtc=$cuda_home/lib64/libnvrtc.so.13
have_nvrtc=0
[ -f "$nvrtc" ] && have_nvrtc=1
unset DPC_LIBCUDA DPC_LIBNVRTC DPC_LIBCUBLAS DPC_LIBNCCL DPC_LIBCUDNN DPC_CUDA_DEVICE CONDA_PREFIX
export HOME=$tmp/home # no ~/.local wheels
mkdir -p "$HOME"
info() { "$bin/dprun" --device cuda --info >"$tmp/out" 2>&1; }
has() { grep -qF -- "$1" "$tmp/out"; }
want() { # want NAME TEXT...: every TEXT in the last output
    local name=$1
    shift
    for t in "$@"; do has "$t" || { bad "$name: no '$t' in: $(head -c 3000 "$tmp/out")"; return; }; done
    ok
}

# ---- 1. the fake driver through DPC_LIB* ------------------------------------------
export DPC_LIBCUDA=$fake DPC_LIBCUBLAS=$fake DPC_LIBNCCL=$fake
info
rc=$?
if [ $have_nvrtc = 1 ]; then
    [ $rc = 0 ] && ok || bad "--info with the fake driver exited $rc: $(cat "$tmp/out")"
else
    [ $rc = 1 ] && ok || bad "--info without NVRTC exited $rc, not 1"
fi
want "--info: the fake driver" "CUDA driver: 13.0 $fake [environment: \$DPC_LIBCUDA]" \
    "cuBLAS: 13.0.0 $fake [environment: \$DPC_LIBCUBLAS]" \
    "NCCL: 2.28.9 $fake [environment: \$DPC_LIBNCCL]" "driver: CUDA 13.0, 1 device"
grep -q '^device 0: .*compute capability 9\.0 (sm_90), 132 SMs, [0-9.]* GiB$' "$tmp/out" && ok ||
    bad "--info: no device line: $(cat "$tmp/out")"
[ $have_nvrtc = 1 ] && want "--info: NVRTC" "NVRTC architectures:" " sm_80 " " sm_90"
DPC_FAKE_CUDA_DEVICES=2 DPC_CUDA_DEVICE=1 info
grep -q '^device 1: ' "$tmp/out" && ! grep -q '^device 0: ' "$tmp/out" && ok ||
    bad "--info with DPC_CUDA_DEVICE=1: $(cat "$tmp/out")"
"$bin/dprun" --help | grep -q -- '--device cuda' && ok || bad "--help does not mention --device cuda --info"
"$bin/dprun" --info >"$tmp/out" 2>&1
[ $? = 1 ] && has "no plan file" && ok || bad "--info without --device cuda needs a plan: $(cat "$tmp/out")"

# ---- 2. the wrong version ----------------------------------------------------------
mkdir -p "$tmp/bad/lib64"
cat >"$tmp/bad.c" <<'EOF'
int cublasGetProperty(int type, int *value) { *value = type == 0 ? 12 : 0; return 0; }
int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
EOF
for lib in libcublas.so.13 libcuda.so.1; do
    ${CC:-cc} -shared -fPIC -o "$tmp/bad/lib64/$lib" "$tmp/bad.c" || bad "cannot build $lib"
done
bad_blas=$(realpath "$tmp/bad/lib64/libcublas.so.13")
bad_cuda=$(realpath "$tmp/bad/lib64/libcuda.so.1")
DPC_LIBCUBLAS=$bad_blas info
rc=$?; [ $rc = 1 ] && ok || bad "--info with cuBLAS 12 exited $rc, not 1"
want "--info: cuBLAS 12 refused" "cuBLAS: not loaded: DPC_LIBCUBLAS=$bad_blas: $bad_blas is cuBLAS 12.0.0; dpc needs cuBLAS 13"
DPC_LIBCUDA=$bad_cuda info
want "--info: a CUDA 12.4 driver refused" "$bad_cuda is CUDA 12.4; dpc needs a driver for CUDA 13.0 or newer"
"$bin/dpc" models/mlp.net -o "$tmp/m.plan" || bad "dpc models/mlp.net"
DPC_LIBCUDA=$bad_cuda "$bin/dprun" "$tmp/m.plan" --device cuda --steps 1 --data synthetic >"$tmp/out" 2>&1
[ $? = 1 ] && [ "$(grep -c error "$tmp/out")" = 1 ] && ok || bad "training on a CUDA 12.4 driver: $(cat "$tmp/out")"
want "training on a CUDA 12.4 driver names the file and both versions" "$bad_cuda is CUDA 12.4; dpc needs a driver for CUDA 13.0"

# ---- 3. each rule, on a machine with only the driver and wheels --------------------
# The toolkit's lib directory and ld.so.cache hidden; the libraries are hard
# links (copies across file systems) in directories laid out as each rule.
toolkit_lib=$(dirname "$(realpath "$nvrtc" 2>/dev/null || echo /nonexistent/x)")
ns() {
    unshare -m bash -c 'mount --bind /dev/null /etc/ld.so.cache && mount -t tmpfs none "$0" && exec "$@"' \
        "$toolkit_lib" "$@"
}
if [ $have_nvrtc = 0 ]; then
    skip "no $nvrtc: the rules are not checked"
elif ! ns true 2>/dev/null; then
    skip "no mount namespace here (unshare -m): the rules are not checked"
else
    builtins=$(ls "$toolkit_lib"/libnvrtc-builtins.so.13.* | grep -v alt | head -n 1)
    put() { # put DIR SRC NAME
        mkdir -p "$1"
        ln "$2" "$1/$3" 2>/dev/null || cp "$2" "$1/$3"
    }
    L=$tmp/lay
    site=$L/venv/lib/python3.11/site-packages/nvidia
    for d in "$L/home/lib64" "$site/cuda_nvrtc/lib" "$L/conda/lib"; do
        put "$d" "$(realpath "$nvrtc")" libnvrtc.so.13
        put "$d" "$builtins" "$(basename "$builtins")"
    done
    put "$L/home/lib64" "$fake" libcublas.so.13
    put "$site/cublas/lib" "$fake" libcublas.so.13
    put "$site/nccl/lib" "$fake" libnccl.so.2
    put "$L/conda/lib" "$fake" libcublas.so.13
    put "$L/conda/lib" "$fake" libnccl.so.2
    mkdir -p "$L/venv/bin"
    printf '#!/bin/sh\nexit 1\n' >"$L/venv/bin/python3" # found, never run
    chmod +x "$L/venv/bin/python3"
    venv_path=$L/venv/bin:$PATH
    unset DPC_LIBCUBLAS DPC_LIBNCCL
    run() { ns env "$@" "$bin/dprun" --device cuda --info >"$tmp/out" 2>&1; }

    run CUDA_HOME="$L/home" PATH="$venv_path" CONDA_PREFIX="$L/conda"
    [ $? = 0 ] && ok || bad "--info with every rule's directory exited non-zero: $(cat "$tmp/out")"
    want "rule 3 before 4 and 5" "NVRTC: 13.0 $L/home/lib64/libnvrtc.so.13 [CUDA_HOME: \$CUDA_HOME=$L/home]" \
        "cuBLAS: 13.0.0 $L/home/lib64/libcublas.so.13 [CUDA_HOME" \
        "NCCL: 2.28.9 $site/nccl/lib/libnccl.so.2 [pip wheel: python3 $L/venv/bin/python3]" \
        "cuDNN: not loaded"
    run CUDA_HOME="$L/none" PATH="$venv_path" CONDA_PREFIX="$L/conda"
    want "rule 4 (a venv's wheels) before 5" \
        "NVRTC: 13.0 $site/cuda_nvrtc/lib/libnvrtc.so.13 [pip wheel: python3 $L/venv/bin/python3]" \
        "cuBLAS: 13.0.0 $site/cublas/lib/libcublas.so.13 [pip wheel"
    run CUDA_HOME="$L/none" CONDA_PREFIX="$L/conda"
    want "rule 5 (CONDA_PREFIX)" "NVRTC: 13.0 $L/conda/lib/libnvrtc.so.13 [CONDA_PREFIX: \$CONDA_PREFIX=$L/conda]" \
        "cuBLAS: 13.0.0 $L/conda/lib/libcublas.so.13 [CONDA_PREFIX" "NCCL: 2.28.9 $L/conda/lib/libnccl.so.2 [CONDA_PREFIX"
    run CUDA_HOME="$L/home" DPC_LIBNVRTC="$L/conda/lib/libnvrtc.so.13"
    want "rule 1 (DPC_LIBNVRTC) before all" "NVRTC: 13.0 $L/conda/lib/libnvrtc.so.13 [environment: \$DPC_LIBNVRTC]"
    run CUDA_HOME="$tmp/bad" PATH="$venv_path"
    want "a wrong version passed over for a later place" "cuBLAS: 13.0.0 $site/cublas/lib/libcublas.so.13 [pip wheel"
    run CUDA_HOME="$tmp/bad"
    rc=$?; [ $rc = 1 ] && ok || bad "--info with only cuBLAS 12 exited $rc, not 1"
    want "only a wrong version: refused" "cuBLAS: not loaded: cuBLAS: $bad_blas is cuBLAS 12.0.0; dpc needs cuBLAS 13 (no other place"

    run CUDA_HOME="$L/none"
    rc=$?; [ $rc = 1 ] && ok || bad "--info with no cuBLAS and no NVRTC exited $rc, not 1"
    want "a missing library names the places and the packages" \
        "cuBLAS: not loaded: cuBLAS (libcublas.so.13) not found in" \
        "libcublas.so.13 [the loader's search" "$L/none/lib64/libcublas.so.13 [CUDA_HOME: \$CUDA_HOME=$L/none]: no such file" \
        "\$DPC_LIBCUBLAS: unset" "apt libcublas-13-0; pip nvidia-cublas" "apt cuda-nvrtc-13-0; pip nvidia-cuda-nvrtc" \
        "apt libnccl2; pip nvidia-nccl-cu13" "apt libcudnn9-cuda-13; pip nvidia-cudnn-cu13"
    run CUDA_HOME="$L/home"
    [ $? = 0 ] && has "NCCL: not loaded" && ok || bad "NCCL missing must not fail --info: $(cat "$tmp/out")"

    # NVRTC from a wheel directory compiles (its builtins loaded from beside it).
    tool=$build/tests/test_cuda
    if [ -x "$tool" ]; then
        ns env CUDA_HOME="$L/none" PATH="$venv_path" DPC_CACHE_DIR="$tmp/cache" "$tool" --plans --arch sm_90 \
            "$tmp/m.plan" >"$tmp/out" 2>&1
        grep -q '^[1-9][0-9]* passed, 0 failed$' "$tmp/out" && ok ||
            bad "NVRTC from a wheel directory: $(tail -n 5 "$tmp/out")"
    else
        skip "no $tool: NVRTC from a wheel directory not compiled with"
    fi
fi
finish
