#!/usr/bin/env bash
# run: tier=check
# dpc builds where the CUDA toolkit is but cuBLAS's, NCCL's and cuDNN's
# headers are not, and where the CBLAS is not OpenBLAS (issue 31: the GPU
# machine's image has NCCL and cuDNN only as pip wheels and no OpenBLAS):
#   1. no source includes a cuBLAS, NCCL or cuDNN header: runtime/cuda
#      declares what it calls (decl_cublas.h, decl_nccl.h);
#   2. every source of the CUDA build (the library's CUDA and CBLAS users,
#      the CLIs, the GPU tool, the fake driver, the CUDA unit tests)
#      compiles, -fsyntax-only with the build's warnings, against an include
#      directory holding only the toolkit's cuda.h and nvrtc.h, and against
#      tests/gpu/cblas_shim's cblas.h (no openblas_get_corename);
#   3. wherever the real cublas_v2.h or nccl.h is found ($CUDA_HOME/include,
#      the system's, the pip wheels' site-packages/nvidia/*/include), the
#      tree's values, type sizes and prototypes equal the real ones
#      (tests/gpu/decls_check.c, built against the tree and against the real
#      headers: both must compile and print the same). A library whose header
#      is nowhere is a skip.
# A machine without the toolkit (no cuda.h) skips all three.
. tests/lib.sh
cuda_home=${CUDA_HOME:-/usr/local/cuda}
cc=${CC:-cc}
if [ ! -f "$cuda_home/include/cuda.h" ] || [ ! -f "$cuda_home/include/nvrtc.h" ]; then
    skip "no CUDA toolkit at $cuda_home (cuda.h, nvrtc.h): nothing of the CUDA build to check"
    finish
    exit
fi

# 1. No cuBLAS, NCCL or cuDNN header in any source (the check's own aside).
hits=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](nccl|cublas[A-Za-z0-9_]*|cudnn[A-Za-z0-9_]*)\.h[>"]' \
    frontend ir format passes codegen runtime driver cli bench tests --include='*.c' --include='*.h' \
    --include='*.cpp' | grep -v '^tests/gpu/decls_check\.c:')
[ -z "$hits" ] && ok || bad "sources include cuBLAS/NCCL/cuDNN headers: $hits"

# 2. The CUDA build against cuda.h + nvrtc.h alone and the CBLAS shim.
mkdir -p "$tmp/inc"
ln -s "$cuda_home/include/cuda.h" "$cuda_home/include/nvrtc.h" "$tmp/inc/"
gen=$build/gen
[ -f "$gen/parser.h" ] || { bad "$gen/parser.h missing: build first (make)"; finish; exit; }
flags=(-std=c11 -Wall -Wextra -Werror -fsyntax-only -Itests/gpu/cblas_shim -I. "-I$gen" -D_GNU_SOURCE
    -DDPC_HAVE_CUDA -isystem "$tmp/inc")
srcs=$(grep -lE 'cblas\.h|runtime/cuda/|DPC_HAVE_CUDA' \
    $(find frontend ir format passes codegen runtime driver cli -name '*.c') \
    tests/unit/test_*.c tests/gpu/*.c bench/*.c | grep -v '^tests/gpu/decls_check\.c$')
n=0
for f in $srcs runtime/device/blascore.c cli/dpc.c tests/unit/test_blascore.c; do
    n=$((n + 1))
    if "$cc" "${flags[@]}" "$f" 2>"$tmp/err"; then ok; else bad "$f without cuBLAS/NCCL headers: $(head -n 5 "$tmp/err")"; fi
done
if "$cc" "${flags[@]}" -Itests/sim -DFAKE_SIM_DIR='"tests/sim"' tests/fake/fake_cuda.c 2>"$tmp/err"; then
    ok
else
    bad "tests/fake/fake_cuda.c without cuBLAS/NCCL headers: $(head -n 5 "$tmp/err")"
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
        skip "no cublas_v2.h or nccl.h found: the declarations are not checked against real headers"
    elif [ $rc != 0 ]; then
        bad "decls_check (real headers) exited $rc"
    elif diff "$tmp/real.out" "$tmp/tree.out" >"$tmp/diff"; then
        ok
        sed 's/^/decls: /' "$tmp/real.err"
    else
        bad "the tree's declarations differ from the real headers (real < > tree): $(head -n 10 "$tmp/diff")"
    fi
    grep -q '^\[cublas\]' "$tmp/real.out" || skip "no cublas_v2.h found: cuBLAS's declarations not checked"
    grep -q '^\[nccl\]' "$tmp/real.out" || skip "no nccl.h found: NCCL's declarations not checked"
fi
finish
