#!/usr/bin/env bash
# scripts/configure.sh OUT — detects dpc's optional parts and writes OUT, the
# makefile fragment the Makefile includes (build/config.mk). make runs it on
# every invocation, after scripts/deps.sh has installed what the build needs,
# so a part installed since the last build is found; OUT is replaced only when
# its text changes, so make restarts (and rebuilds, through each build tree's
# flags stamp) only then. Prints one line: what is in, what is out, and why.
#
# Inputs (from make): CUDA (0 leaves the cuda backend out), CUDA_HOME, MPI
# (0 leaves MPI out), MPICC, CXX, DNNL and IMAGES (0 leaves each out).
set -eu
out=${1:?usage: scripts/configure.sh OUT}
CUDA=${CUDA:-1}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
MPI=${MPI:-1}
MPICC=${MPICC:-mpicc}
CXX=${CXX:-g++}
parts=()

# CUDA: the backend needs no header and links nothing (the driver, NVRTC,
# cuBLAS, NCCL and cuDNN are loaded at run time), so it is in unless CUDA=0.
# The toolkit (its cuda.h) is only for the tests' fake driver.
have_cuda=0 have_toolkit=0 cuda_version=
if [ -f "$CUDA_HOME/include/cuda.h" ]; then
    have_toolkit=1
    v=$(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$CUDA_HOME/include/cuda.h")
    cuda_version=${v:+$((v / 1000)).$((v % 1000 / 10))}
fi
if [ "$CUDA" = 0 ]; then
    parts+=("cuda no (CUDA=0)")
else
    have_cuda=1
    if [ $have_toolkit = 1 ]; then
        parts+=("cuda yes (libraries loaded at run time; toolkit $CUDA_HOME${cuda_version:+ $cuda_version})")
    else
        parts+=("cuda yes (libraries loaded at run time; no toolkit at $CUDA_HOME)")
    fi
fi

# MPI: mpicc's wrapper knows OpenMPI's flags; pkg-config's ompi-c is the fallback.
have_mpi=0 mpi_cflags= mpi_libs=
if [ "$MPI" = 0 ]; then
    parts+=("mpi no (MPI=0)")
else
    mpi_cflags=$("$MPICC" --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null || true)
    mpi_libs=$("$MPICC" --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null || true)
    if [ -n "$mpi_libs" ]; then
        have_mpi=1
        v=$(mpirun --version 2>/dev/null | sed -n '1s/.*(Open MPI) *//p')
        parts+=("mpi yes (${v:+OpenMPI }${v:-$MPICC})")
    else
        parts+=("mpi no (no $MPICC or pkg-config ompi-c: libopenmpi-dev)")
    fi
fi

# oneDNN: library convolutions on the cpu (dpc --conv library|auto): its
# header (libdnnl-dev); libdnnl.so.2 is loaded at run time. Without it those
# calls run their im2col alternative.
have_dnnl=0
if [ "${DNNL:-1}" = 0 ]; then
    parts+=("onednn no (DNNL=0)")
elif printf '#include <oneapi/dnnl/dnnl.h>\nint main(void){return dnnl_version()->major;}\n' |
    ${CC:-cc} -x c - -fsyntax-only >/dev/null 2>&1; then
    have_dnnl=1
    v=$(sed -n 's/^#define DNNL_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' \
        /usr/include/oneapi/dnnl/dnnl_version.h 2>/dev/null | paste -sd. -)
    parts+=("onednn yes${v:+ ($v)}")
else
    parts+=("onednn no (libdnnl-dev)")
fi

# libjpeg-turbo and libpng: the image-folder dataset and `dprun predict`
# (runtime/data/image.c). Without them those say the build lacks them.
have_image=0
if [ "${IMAGES:-1}" = 0 ]; then
    parts+=("images no (IMAGES=0)")
elif printf '#include <stdio.h>\n#include <jpeglib.h>\n#include <png.h>\nint main(void){struct jpeg_decompress_struct d; (void)d; return png_access_version_number() == 0;}\n' |
    ${CC:-cc} -x c - -o /dev/null -ljpeg -lpng >/dev/null 2>&1; then
    have_image=1
    parts+=("images yes (libjpeg, libpng)")
else
    parts+=("images no (libjpeg62-turbo-dev, libpng-dev)")
fi

# The fake driver (tests only): the simulator is C++ and needs CUDA's headers.
if [ $have_cuda = 0 ] || [ $have_toolkit = 0 ]; then
    parts+=("fake driver no (needs the cuda backend and the toolkit's cuda.h)")
elif command -v "$CXX" >/dev/null 2>&1; then
    parts+=("fake driver yes ($CXX)")
else
    parts+=("fake driver no (no $CXX: g++, a test dependency)")
fi

line="dpc:"
for p in "${parts[@]}"; do line="$line $p,"; done
line=${line%,}
tmp=$out.tmp.$$
mkdir -p "$(dirname "$out")"
{
    echo "# $out — written by scripts/configure.sh; make rewrites it when what it finds changes."
    echo "HAVE_CUDA := $([ $have_cuda = 1 ] && echo 1)"
    echo "HAVE_CUDA_TOOLKIT := $([ $have_cuda = 1 ] && [ $have_toolkit = 1 ] && echo 1)"
    echo "CUDA_VERSION := $cuda_version"
    echo "HAVE_CXX := $(command -v "$CXX" >/dev/null 2>&1 && echo 1)"
    echo "HAVE_MPI := $([ $have_mpi = 1 ] && echo 1)"
    echo "HAVE_DNNL := $([ $have_dnnl = 1 ] && echo 1)"
    echo "HAVE_IMAGE := $([ $have_image = 1 ] && echo 1)"
    echo "MPI_CFLAGS := $mpi_cflags"
    echo "MPI_LIBS := $mpi_libs"
    echo "CONFIG_LINE := $line"
} >"$tmp"
if cmp -s "$tmp" "$out"; then rm -f "$tmp"; else mv -f "$tmp" "$out"; fi
echo "$line"
