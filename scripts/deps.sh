#!/usr/bin/env bash
# scripts/deps.sh build|test — installs the Debian packages one purpose
# needs, or, when they are missing and this is not root, names them and the
# one command that installs them, and fails.
#
#   build: what `make` and `make run` need to build and train: a C compiler,
#          flex, bison, OpenBLAS, oneDNN unless DNNL=0, libjpeg-turbo and
#          libpng unless IMAGES=0, and OpenMPI unless MPI=0 (make itself is
#          the one thing assumed).
#   test:  build's, and what `make test` adds: PyTorch (the float64 parity
#          oracle), g++ (the CUDA simulator), clang-format, iproute2
#          (network namespaces for the two-host checks), librsvg2-bin
#          (rsvg-convert: the plot test renders its SVGs to look at them),
#          time (/usr/bin/time: the attack test's seconds and largest
#          resident set per case),
#          clang-14 and clang-16 (make test-full builds the tree with each:
#          tests/clang_build_test.sh).
#
# Nothing is installed when nothing is missing, so a user without root whose
# machine has everything builds as usual.
set -eu
purpose=${1:-build}
MPI=${MPI:-1}
missing=""
want() { case " $missing " in *" $1 "*) ;; *) missing="$missing $1" ;; esac; }
have_cmd() { command -v "$1" >/dev/null 2>&1; }
include_dirs="/usr/include /usr/include/x86_64-linux-gnu /usr/include/openblas"
have_header() { for d in $include_dirs; do [ -f "$d/$1" ] && return 0; done; return 1; }
# Debian images often carry the reference BLAS's cblas.h (libblas-dev, pulled
# in by other packages): only OpenBLAS's declares openblas_set_num_threads.
# (Bash alone reads it: the script runs where grep may be missing too.)
have_openblas() {
    local d
    for d in $include_dirs; do
        [ -r "$d/cblas.h" ] && [[ $(<"$d/cblas.h") == *openblas_set_num_threads* ]] && return 0
    done
    return 1
}

need_build() {
    have_cmd cc || want gcc
    [ -f /usr/include/stdio.h ] || want libc6-dev
    have_cmd flex || want flex
    have_cmd bison || want bison
    have_openblas || want libopenblas-dev
    [ "${DNNL:-1}" = 0 ] || have_header oneapi/dnnl/dnnl.h || want libdnnl-dev
    if [ "${IMAGES:-1}" != 0 ]; then
        have_header jpeglib.h || want libjpeg62-turbo-dev
        have_header png.h || want libpng-dev
    fi
    if [ "$MPI" != 0 ]; then
        have_cmd mpirun || want openmpi-bin
        have_cmd mpicc || want libopenmpi-dev
    fi
}
need_test() {
    need_build
    have_cmd clang-format || want clang-format
    have_cmd g++ || want g++
    have_cmd ip || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || want iproute2
    have_cmd rsvg-convert || want librsvg2-bin
    [ -x /usr/bin/time ] || want time
    have_cmd clang-14 || want clang-14
    have_cmd clang-16 || want clang-16
    # One interpreter imports the four (torch is slow to import); without
    # Debian's python3 at all, all four are missing.
    local m mods
    mods=$(/usr/bin/python3 -c '
import importlib, sys
for m in sys.argv[1:]:
    try:
        importlib.import_module(m)
    except Exception:
        print(m)' torch torchvision numpy PIL 2>/dev/null) || mods="torch torchvision numpy PIL"
    for m in $mods; do
        case $m in
        torch) want python3-torch ;;
        torchvision) want python3-torchvision ;;
        numpy) want python3-numpy ;;
        PIL) want python3-pil ;;
        esac
    done
}
case $purpose in
build) need_build ;;
test) need_test ;;
*) echo "usage: scripts/deps.sh build|test" >&2; exit 2 ;;
esac
[ -z "$missing" ] && exit 0

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" != 0 ]; then
    echo "dpc: to $purpose, these Debian packages are missing:$missing" >&2
    echo "dpc: install them with:  sudo sh -c '$cmd'" >&2
    [ "$purpose" = build ] && [ "$MPI" != 0 ] &&
        echo "dpc: (or build without MPI: make MPI=0)" >&2
    exit 1
fi
echo "dpc: installing what the $purpose needs:$missing"
sh -c "$cmd"
