#!/usr/bin/env bash
# run: tier=check
# dpc builds with no CUDA header at all, and where the CBLAS is not OpenBLAS
# (a machine may have only the driver and pip wheels; the GPU
# machine's image has NCCL and cuDNN only as wheels and no OpenBLAS):
#   1. no source includes a CUDA, NVRTC, cuBLAS, NCCL or cuDNN header:
#      runtime/cuda declares what it calls (decl_cuda.h, decl_nvrtc.h,
#      decl_cublas.h, decl_nccl.h, decl_cudnn.h); only the fake driver
#      (tests/fake/fake_cuda.c) and the check below include cuda.h;
#   2. every source of the CUDA build (the library's CUDA and CBLAS users,
#      the CLIs, the GPU tool, the CUDA unit tests) compiles,
#      -fsyntax-only with the build's warnings and -DDPC_HAVE_CUDA, with no
#      CUDA include directory and against tests/gpu/cblas_shim's cblas.h (no
#      openblas_get_corename); the fake driver against the toolkit's cuda.h
#      alone, where there is one;
#   3. wherever the real cuda.h, nvrtc.h, cudnn.h, cublas_v2.h or nccl.h is
#      found ($CUDA_HOME/include, the system's, the pip wheels'
#      site-packages/nvidia/*/include), the tree's values, type sizes,
#      prototypes and symbol names equal the real ones
#      (tests/gpu/decls_check.c, built against the tree and against the real
#      headers: both must compile and print the same). A library whose header
#      is nowhere is a skip.
. tests/lib.sh
cuda_home=${CUDA_HOME:-/usr/local/cuda}
cc=${CC:-cc}

# 1. No CUDA library's header in any source (the fake driver's cuda.h and
# the check's own aside).
hits=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](cuda|cuda_runtime[A-Za-z0-9_]*|nvrtc|nccl|cublas[A-Za-z0-9_]*|cudnn[A-Za-z0-9_]*)\.h[>"]' \
    frontend ir format passes codegen runtime driver cli bench tests --include='*.c' --include='*.h' \
    --include='*.cpp' | grep -v '^tests/gpu/decls_check\.c:' | grep -v '^tests/fake/fake_cuda\.c:[0-9]*:#include <cuda\.h>$')
[ -z "$hits" ] && ok || bad "sources include CUDA headers: $hits"

# 2. The CUDA build with no CUDA header, and the CBLAS shim. Where the
# system's include path has CUDA's headers (a toolkit linked into
# /usr/local/include), each is shadowed by one that fails the compile.
mkdir -p "$tmp/inc" "$tmp/fake"
for h in cuda.h cuda_runtime.h cuda_runtime_api.h driver_types.h nvrtc.h cublas.h cublas_v2.h \
    cublas_api.h nccl.h cudnn.h; do
    echo "#error \"$h: a CUDA header in a source the build must compile without them\"" >"$tmp/inc/$h"
done
gen=$build/gen
[ -f "$gen/parser.h" ] || { bad "$gen/parser.h missing: build first (make)"; finish; exit; }
flags=(-std=c11 -Wall -Wextra -Werror -fsyntax-only -Itests/gpu/cblas_shim -I. "-I$gen" -D_GNU_SOURCE
    -DDPC_HAVE_CUDA -I"$tmp/inc")
srcs=$(grep -lE 'cblas\.h|runtime/cuda/|DPC_HAVE_CUDA' \
    $(find frontend ir format passes codegen runtime driver cli -name '*.c') \
    tests/unit/test_*.c tests/gpu/*.c bench/*.c | grep -v '^tests/gpu/decls_check\.c$')
n=0
for f in $srcs runtime/device/blascore.c cli/dpc.c tests/unit/test_blascore.c; do
    n=$((n + 1))
    if "$cc" "${flags[@]}" "$f" 2>"$tmp/err"; then ok; else bad "$f without CUDA headers: $(head -n 5 "$tmp/err")"; fi
done
if [ ! -f "$cuda_home/include/cuda.h" ]; then
    skip "no $cuda_home/include/cuda.h: the fake driver is not built here"
elif ln -s "$cuda_home/include/cuda.h" "$tmp/fake/" &&
    "$cc" "${flags[@]/$tmp\/inc/$tmp/fake}" -Itests/sim -DFAKE_SIM_DIR='"tests/sim"' tests/fake/fake_cuda.c 2>"$tmp/err"; then
    ok
else
    bad "tests/fake/fake_cuda.c with cuda.h alone: $(head -n 5 "$tmp/err")"
fi
[ "$n" -ge 10 ] && ok || bad "only $n sources found to compile"

# 3. The tree's declarations against the real headers, where there are any.
incs=(-isystem "$cuda_home/include")
for p in $(command -v -a python3 2>/dev/null | awk '!seen[$0]++'); do
    for d in $("$p" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
        for i in "$d"/nvidia/*/include; do [ -d "$i" ] && incs+=(-idirafter "$i"); done
    done
done
dflags=(-std=c11 -Wall -Wextra -Werror -I. "${incs[@]}")
if ! "$cc" "${dflags[@]}" -o "$tmp/tree" tests/gpu/decls_check.c 2>"$tmp/err"; then
    bad "decls_check.c against the tree's declarations: $(head -n 5 "$tmp/err")"
elif ! "$cc" "${dflags[@]}" -DDPC_DECLS_REAL -o "$tmp/real" tests/gpu/decls_check.c 2>"$tmp/err"; then
    bad "the tree's declarations differ from the real headers: $(grep -m 5 'error' "$tmp/err")"
else
    "$tmp/tree" >"$tmp/tree.out"
    "$tmp/real" >"$tmp/real.out" 2>"$tmp/real.err"
    rc=$?
    if [ $rc = 3 ]; then
        skip "no cuda.h, nvrtc.h, cudnn.h, cublas_v2.h or nccl.h found: the declarations are not checked against real headers"
    elif [ $rc != 0 ]; then
        bad "decls_check (real headers) exited $rc"
    elif diff "$tmp/real.out" "$tmp/tree.out" >"$tmp/diff"; then
        ok
        sed 's/^/decls: /' "$tmp/real.err"
    else
        bad "the tree's declarations differ from the real headers (real < > tree): $(head -n 10 "$tmp/diff")"
    fi
    for h in cuda:cuda.h nvrtc:nvrtc.h cudnn:cudnn.h; do
        grep -q "^\[${h%%:*}\]" "$tmp/real.out" || skip "no ${h#*:} found: its declarations not checked"
    done
    grep -q '^\[cublas\]' "$tmp/real.out" || skip "no cublas_v2.h found: cuBLAS's declarations not checked"
    grep -q '^\[nccl\]' "$tmp/real.out" || skip "no nccl.h found: NCCL's declarations not checked"
fi
finish
