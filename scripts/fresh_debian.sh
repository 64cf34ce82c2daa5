#!/usr/bin/env bash
# scripts/fresh_debian.sh ROOT [COMMANDS] — the honest test of set-up: a new
# Debian 12 root (mmdebstrap, minbase plus make and git), this repository's
# committed HEAD cloned into it, and COMMANDS (default `make run && make
# test`) run there as root, as a new user would on a fresh machine. The CUDA
# toolkit, when the host has one, is bound in read-only as NVIDIA's packages
# lay it out (the versioned folder, the /usr/local/cuda link, the loader's
# entry). Needs root and Debian's package mirror; ROOT must not exist. Not
# part of any test tier: it downloads and installs every package.
#
#     scripts/fresh_debian.sh /var/tmp/dpc-root
#     scripts/fresh_debian.sh /var/tmp/dpc-root 'make MPI=0 run'
set -eu
root=${1:?usage: scripts/fresh_debian.sh ROOT [COMMANDS]}
commands=${2:-make run && make test}
[ "$(id -u)" = 0 ] || { echo "fresh_debian.sh: needs root (mmdebstrap, chroot, mounts)" >&2; exit 1; }
[ ! -e "$root" ] || { echo "fresh_debian.sh: $root exists; give a new path" >&2; exit 1; }
command -v mmdebstrap >/dev/null || { echo "fresh_debian.sh: no mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
repo=$(cd "$(dirname "$0")/.." && pwd)

mmdebstrap --variant=minbase --include=make,ca-certificates,git bookworm "$root"
git clone -q "$repo" "$root/root/dpc"

cleanup() { umount -R "$root/proc" "$root/sys" "$root/dev" "$root/run" 2>/dev/null || true
            [ -n "${cuda:-}" ] && umount "$root$cuda" 2>/dev/null || true; }
trap cleanup EXIT
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run" # as a booted system has it: ip netns needs /run/netns
cp /etc/resolv.conf "$root/etc/resolv.conf"
cuda=
if [ -e /usr/local/cuda ]; then
    cuda=$(readlink -f /usr/local/cuda)
    mkdir -p "$root$cuda"
    mount --bind "$cuda" "$root$cuda" && mount -o remount,bind,ro "$root$cuda"
    [ "$cuda" = /usr/local/cuda ] || ln -s "$cuda" "$root/usr/local/cuda"
    for f in /etc/ld.so.conf.d/*cuda*; do [ -f "$f" ] && cp "$f" "$root/etc/ld.so.conf.d/"; done
    chroot "$root" ldconfig
fi
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /root/dpc && $commands"
