#!/usr/bin/env bash
# tests/gpu/rehearse.sh SRC OUT FAKE — runs SRC/tests/gpu/check.sh OUT on
# this machine arranged like the H200 machine it is written for, with the
# fake driver (FAKE: build/rel/fake/libfakecuda.so, whose kernels run their
# CUDA source under the simulator) standing in for the GPU:
#   - hidden: flex, bison, MPI (mpicc and friends, its headers and .pc
#     files), OpenBLAS's headers and link-time library, and nccl.h and
#     cudnn*.h in the toolkit;
#   - the CUDA libraries only at pip-wheel paths of a python3 on PATH
#     (site-packages/nvidia/cu13/lib: CUDA 13's wheels nvidia-cublas and
#     nvidia-cuda-nvrtc put their libraries together there; nvidia/nccl/lib
#     and nvidia/cudnn/lib: nvidia-nccl-cu13, nvidia-cudnn-cu13), the
#     driver only on the loader's path; none named by DPC_LIB*.
# A header or library is hidden by mounting, over its folder, a folder of
# links to everything else in it; a program by leaving it out of PATH. So
# it needs root in a mount namespace of its own:
#     unshare --mount --propagation private bash tests/gpu/rehearse.sh SRC OUT FAKE
# (tests/gpu_rehearsal_test.sh does that). The model, batch and budget are
# scaled down through check.sh's DPC_CHECK_* variables, set by the caller.
set -eu
src=$(realpath "${1:?usage: rehearse.sh SRC OUT FAKE}")
out=${2:?usage: rehearse.sh SRC OUT FAKE}
fake=$(realpath "${3:?usage: rehearse.sh SRC OUT FAKE}")
if [ "$(id -u)" != 0 ] || [ "$(readlink /proc/self/ns/mnt)" = "$(readlink /proc/1/ns/mnt)" ]; then
    echo "rehearse.sh: run it as root under unshare --mount (see the header)" >&2
    exit 2
fi
# Never unmounted: the shadows' links point into it, down to libc's, and
# the namespace's mounts end with it; only the empty folder is left, in
# TMPDIR (the test's own).
ns=$(mktemp -d "${TMPDIR:-/tmp}/dpc-rehearse.XXXXXX")
mount -t tmpfs dpc-rehearse "$ns"
n=0
hidden_from="" # the real folder of the last hide
# hide DIR PATTERN...: DIR without the entries PATTERN matches.
hide() {
    local dir e name pat keep
    dir=$(realpath "$1")
    shift
    [ -d "$dir" ] || return 0
    n=$((n + 1))
    mkdir -p "$ns/real$n" "$ns/shadow$n"
    mount --bind "$dir" "$ns/real$n"
    for e in "$ns/real$n"/* "$ns/real$n"/.[!.]*; do
        [ -e "$e" ] || [ -L "$e" ] || continue
        name=${e##*/} keep=1
        for pat in "$@"; do
            # shellcheck disable=SC2254 # a pattern, by design
            case $name in $pat) keep=0 ;; esac
        done
        [ $keep = 1 ] && ln -s "$e" "$ns/shadow$n/$name"
    done
    mount --bind "$ns/shadow$n" "$dir"
    hidden_from=$ns/real$n
}

# The programs: a PATH of links to every program of the usual PATH but
# these (not a shadow of /usr/bin: gcc finds cc1 relative to its own real
# path, which a link there would move).
cuda=$(realpath "${CUDA_HOME:-/usr/local/cuda}")
mkdir -p "$ns/bin"
for d in /usr/local/bin /usr/bin /bin /usr/sbin /sbin; do
    for e in "$d"/*; do
        name=${e##*/}
        case $name in flex | flex++ | bison | yacc | mpi* | orte* | ompi* | oshcc | nvidia-smi) continue ;; esac
        [ -e "$ns/bin/$name" ] || ln -s "$e" "$ns/bin/$name"
    done
done
# Parents before children: a shadow of /usr/include holds the real
# x86_64-linux-gnu, so that one is shadowed through it.
hide /usr/include 'cblas*' 'openblas*' 'nccl*' 'cudnn*' 'mpi*'
hide /usr/include/x86_64-linux-gnu 'cblas*' 'openblas*' 'f77blas.h'
# OpenBLAS's link-time names (its run-time libopenblas.so.0 stays: the
# oracle's torch loads it), so -lopenblas finds only check.sh's shim.
hide /usr/lib/x86_64-linux-gnu 'libopenblas.so' 'libopenblas.a' 'libblas.so' 'libblas.a' 'libcblas.so'
hide /usr/lib/x86_64-linux-gnu/pkgconfig 'ompi*' 'mpi*' 'orte*' 'openblas*' 'blas*' 'cblas*'
hide /usr/lib/x86_64-linux-gnu/openmpi 'include'
hide "$cuda/include" 'nccl*' 'cudnn*'
hide "$cuda/lib64" 'libcublas*' 'libnvrtc*' 'libnccl*' 'libcudnn*'
cudalib=$hidden_from

# A Python environment on PATH with the wheels' libraries (the real NVRTC
# and cuDNN, the fake's cuBLAS and NCCL), and the driver on the loader's
# path, as a driver installation puts it.
venv=$ns/venv
pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
wheels=$venv/lib/python$pyver/site-packages/nvidia
mkdir -p "$venv/bin" "$wheels"/{cu13,nccl,cudnn}/lib "$ns/driver"
ln -s /usr/bin/python3 "$venv/bin/python3"
ln -s "$fake" "$wheels/cu13/lib/libcublas.so.13"
ln -s "$fake" "$wheels/nccl/lib/libnccl.so.2"
for f in "$cudalib"/libnvrtc*.so.* ; do ln -s "$f" "$wheels/cu13/lib/${f##*/}"; done
for f in "$cudalib"/libcudnn*.so.* ; do ln -s "$f" "$wheels/cudnn/lib/${f##*/}"; done
ln -s "$fake" "$ns/driver/libcuda.so.1"
unset DPC_LIBCUDA DPC_LIBCUBLAS DPC_LIBNCCL DPC_LIBNVRTC DPC_LIBCUDNN CONDA_PREFIX
echo "rehearsal: hidden flex, bison, MPI, OpenBLAS headers, nccl.h, cudnn*.h;" \
    "CUDA libraries under $wheels; libcuda.so.1 = $fake"
rc=0
PATH=$venv/bin:$ns/bin:$cuda/bin LD_LIBRARY_PATH=$ns/driver bash "$src/tests/gpu/check.sh" "$out" || rc=$?
exit $rc
