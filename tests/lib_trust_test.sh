#!/usr/bin/env bash
# run: tier=check
# The CUDA libraries found by a path dpc chose are loaded only under the
# ownership rule (README "What to trust"; base/trust.h): another user's
# library, or one in another user's folder, is never loaded, so its
# constructor never runs. Libraries whose constructor writes a marker file
# are planted as uid 65534 in every place the search looks ($CONDA_PREFIX,
# a PATH entry holding a python3 and a wheel layout, ~/.local, the working
# directory through "." on PATH); then
#   1. `dprun PLAN --steps 0 --data synthetic` and `dprun predict`
#      (--device auto) load none of them: a probe for a device loads only
#      the driver, found by the dynamic loader's own search;
#   2. `dprun --device cuda --info` loads none of them and names each
#      refusal and its reason (with ld.so.cache and the toolkit's folder
#      hidden in a mount namespace where one can be made, so the search
#      reaches the planted places for every library, not only the driver);
#   3. DPC_LIBCUBLAS naming another user's file, or a file in another
#      user's folder, is refused;
#   4. the same layout owned by root is loaded (the markers appear: the
#      test sees what it looks for), except by --device auto, which never
#      loads a driver from a folder dpc chose.
# Needs root and setpriv's user (65534) to own the planted files: skipped
# otherwise.
. tests/lib.sh
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
    skip "planting another user's libraries needs root (and setpriv)"
    finish
    exit
fi
unset DPC_LIBCUDA DPC_LIBNVRTC DPC_LIBCUBLAS DPC_LIBNCCL DPC_LIBCUDNN DPC_CUDA_DEVICE CONDA_PREFIX CUDA_HOME
export DPC_CACHE_DIR=$tmp/cache
bin=$(cd "$bin" && pwd) # the runs below change directory
chmod 755 "$tmp"
"$bin/dpc" models/mlp.net -o "$tmp/m.plan" || { bad "dpc models/mlp.net"; finish; exit; }
marks=$tmp/marks
mkdir -p "$marks"
cat >"$tmp/planted.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
/* Runs inside dlopen, before any version check: leaves a mark. */
__attribute__((constructor)) static void planted(void) {
    Dl_info info;
    const char *dir = getenv("LIB_TRUST_MARKS");
    char path[4096];
    if (!dir) return;
    snprintf(path, sizeof path, "%s/ran-%ld-%p", dir, (long)getpid(), (void *)&info);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%s\n", dladdr((void *)planted, &info) && info.dli_fname ? info.dli_fname : "?");
    fclose(f);
}
C
cc -shared -fPIC -o "$tmp/planted.so" "$tmp/planted.c" || { bad "cc planted.c"; finish; exit; }
export LIB_TRUST_MARKS=$marks
libs="libcuda.so.1 libnvrtc.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9"
plant() { # plant DIR SONAME...: copies of planted.so
    local d=$1
    shift
    mkdir -p "$d"
    for s in "$@"; do cp "$tmp/planted.so" "$d/$s"; done
}
wheels() { # wheels SITE-PACKAGES: the wheel layout
    plant "$1/nvidia/cu13/lib" libnvrtc.so.13 libcublas.so.13 libcublasLt.so.13
    plant "$1/nvidia/nccl/lib" libnccl.so.2
    plant "$1/nvidia/cudnn/lib" libcudnn.so.9
}
python() { # python DIR: a python3 found on PATH, never run
    mkdir -p "$1"
    printf '#!/bin/sh\nexit 1\n' >"$1/python3"
    chmod 755 "$1/python3"
}
layout() { # layout ROOT: every searched place under ROOT
    local r=$1
    plant "$r/conda/lib" $libs
    python "$r/pyenv/bin"
    wheels "$r/pyenv/lib/python3.12/site-packages"
    mkdir -p "$r/home"
    wheels "$r/home/.local/lib/python3.12/site-packages"
    python "$r/dot/work"
    wheels "$r/dot/lib/python3.12/site-packages"
}
theirs=$tmp/theirs
layout "$theirs"
chown -R 65534:65534 "$theirs"

# ld.so.cache and the toolkit's folder hidden, where a namespace can be made.
toolkit_lib=$(dirname "$(realpath "${CUDA_HOME:-/usr/local/cuda}/lib64/libnvrtc.so.13" 2>/dev/null || echo /nonexistent/x)")
ns() {
    if [ -d "$toolkit_lib" ]; then
        unshare -m bash -c 'mount --bind /dev/null /etc/ld.so.cache && mount -t tmpfs none "$0" && exec "$@"' \
            "$toolkit_lib" "$@"
    else
        "$@"
    fi
}
hidden=1
ns true 2>/dev/null || { hidden=0; ns() { "$@"; }; }
# in ROOT's layout: every place at once, working directory ROOT/dot/work
in_layout() {
    local r=$1
    shift
    (cd "$r/dot/work" && HOME=$r/home CONDA_PREFIX=$r/conda PATH=".:$r/pyenv/bin:$PATH" ns "$@")
}
marked() { [ -n "$(ls -A "$marks")" ]; }
clear_marks() { rm -f "$marks"/*; }
out=$tmp/out
has() { grep -qF -- "$1" "$out"; }

# ---- 1. --device auto ------------------------------------------------------------
in_layout "$theirs" "$bin/dprun" "$tmp/m.plan" --steps 0 --data synthetic --save-params "$tmp/p.st" >"$out" 2>&1
rc=$?
[ $rc = 0 ] && ok || bad "dprun --steps 0 in another user's layout exited $rc: $(cat "$out")"
marked && bad "--device auto ran another user's library: $(cat "$marks"/*)" || ok
clear_marks
# dprun predict opens its device the same way: a 32x32 black PNG
python3 - "$tmp/x.png" <<'PY'
import struct, sys, zlib
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))
raw = b''.join(b'\0' + bytes(96) for _ in range(32))
open(sys.argv[1], 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 32, 32, 8, 2, 0, 0, 0))
                              + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
PY
in_layout "$theirs" "$bin/dprun" predict "$tmp/m.plan" --load-params "$tmp/p.st" "$tmp/x.png" >"$out" 2>&1
rc=$?
if has "without libjpeg/libpng"; then
    skip "dprun built without libjpeg/libpng: predict is not checked"
else
    [ $rc = 0 ] && has "$tmp/x.png: " && ok || bad "dprun predict in another user's layout exited $rc: $(cat "$out")"
fi
marked && bad "dprun predict ran another user's library: $(cat "$marks"/*)" || ok
clear_marks

# ---- 2. --device cuda --info -----------------------------------------------------
in_layout "$theirs" "$bin/dprun" --device cuda --info >"$out" 2>&1
marked && bad "--info ran another user's library: $(cat "$marks"/*)" || ok
clear_marks
want_refused() { # want_refused PATH: --info names it, refused, and its owner
    grep -F -- "$1 [" "$out" | grep -qF "refused: " && has "belongs to uid 65534" && ok ||
        bad "--info does not name the refusal of $1: $(head -c 3000 "$out")"
}
want_refused "$theirs/conda/lib/libcuda.so.1"
if [ $hidden = 1 ]; then
    want_refused "$theirs/conda/lib/libcublas.so.13"
    want_refused "$theirs/conda/lib/libcudnn.so.9"
    want_refused "$theirs/pyenv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13"
    want_refused "$theirs/home/.local/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
    want_refused "$theirs/dot/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
    has "it comes with: apt libcublas-13-0; pip nvidia-cublas" && ok || bad "--info names no package: $(cat "$out")"
else
    skip "no mount namespace (unshare -m): only the driver's refusals are checked"
fi

# ---- 3. DPC_LIB* naming another user's file --------------------------------------
mkdir -p "$tmp/mine"
cp "$tmp/planted.so" "$tmp/mine/libcublas.so.13"
chown 65534 "$tmp/mine/libcublas.so.13"
DPC_LIBCUBLAS=$tmp/mine/libcublas.so.13 "$bin/dprun" --device cuda --info >"$out" 2>&1
has "cuBLAS: not loaded: DPC_LIBCUBLAS=$tmp/mine/libcublas.so.13: $tmp/mine/libcublas.so.13 belongs to uid 65534 (mode 0755), not to root or this user (uid 0); refusing to load it" &&
    ok || bad "DPC_LIBCUBLAS naming another user's file: $(cat "$out")"
DPC_LIBCUBLAS=$theirs/conda/lib/libcublas.so.13 "$bin/dprun" --device cuda --info >"$out" 2>&1
has "$theirs, on its path, belongs to uid 65534 (mode 0755), not to root or this user (uid 0); refusing to load it" &&
    ok || bad "DPC_LIBCUBLAS in another user's folder: $(cat "$out")"
# A link at the name itself, another user's: refused, the path named once
# in the refusal (after the DPC_LIBCUBLAS= that says where it came from).
cp "$tmp/planted.so" "$tmp/mine/real.so" && ln -s real.so "$tmp/mine/link.so" && chown -h 65534 "$tmp/mine/link.so"
DPC_LIBCUBLAS=$tmp/mine/link.so "$bin/dprun" --device cuda --info >"$out" 2>&1
has "DPC_LIBCUBLAS=$tmp/mine/link.so: $tmp/mine/link.so is a symbolic link owned by uid 65534, not by root or this user (uid 0); refusing to follow it" &&
    [ "$(grep -F "DPC_LIBCUBLAS=$tmp/mine/link.so" "$out" | grep -oF "$tmp/mine/link.so" | wc -l)" = 2 ] &&
    ok || bad "DPC_LIBCUBLAS naming another user's link: the path once in the refusal: $(cat "$out")"
marked && bad "DPC_LIBCUBLAS ran another user's library: $(cat "$marks"/*)" || ok
clear_marks

# ---- 4. the same layout, root's: loaded (the markers are seen) -------------------
mine=$tmp/root
layout "$mine"
in_layout "$mine" "$bin/dprun" "$tmp/m.plan" --steps 0 --data synthetic >"$out" 2>&1
marked && bad "--device auto loaded a driver from a folder dpc chose: $(cat "$marks"/*)" || ok
clear_marks
in_layout "$mine" "$bin/dprun" --device cuda --info >"$out" 2>&1
has "$mine/conda/lib/libcuda.so.1 is no cuDriverGetVersion" && marked && ok ||
    bad "root's own planted driver was not loaded (the test would not see one): $(cat "$out")"
clear_marks
finish
