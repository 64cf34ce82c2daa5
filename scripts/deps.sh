#!/usr/bin/env bash
# Installs the Debian packages dpc's build and tests need, or prints the
# command to do so when not root. `make` runs this once (build/.deps-ok).
set -eu
pkgs="flex bison clang-format libopenblas-dev openmpi-bin libopenmpi-dev iproute2 python3-torch python3-torchvision python3-numpy python3-pil"
missing=""
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_cmd flex || missing="$missing flex"
have_cmd bison || missing="$missing bison"
have_cmd clang-format || missing="$missing clang-format"
[ -f /usr/include/x86_64-linux-gnu/cblas.h ] || [ -f /usr/include/cblas.h ] ||
    [ -f /usr/include/openblas/cblas.h ] || missing="$missing libopenblas-dev"
have_cmd mpirun || missing="$missing openmpi-bin libopenmpi-dev"
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing="$missing iproute2"
/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1 ||
    missing="$missing python3-torch python3-torchvision"
/usr/bin/python3 -c 'import numpy, PIL' >/dev/null 2>&1 || missing="$missing python3-numpy python3-pil"
[ -z "$missing" ] && exit 0
echo "dpc: installing missing packages:$missing"
cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $pkgs"
if [ "$(id -u)" != 0 ]; then
    echo "dpc: not root; run:  sudo sh -c '$cmd'" >&2
    exit 1
fi
sh -c "$cmd"
