#!/usr/bin/env bash
# Parity with PyTorch (DESIGN §8, issues 3 and 13): from identical weights and
# the same batches, training steps of dpc (cpu backend) and of PyTorch
# (MXNet-form SGD) agree — loss and logits to 1e-4, every parameter update
# and BatchNorm running statistic to 1e-3 (max-abs-error / max-abs-value),
# for ResNet-18 v1 and the small CNN. tests/parity/torch_step.py holds the
# reference and the tolerances; tests/parity/dpc_step.c is the dpc side.
#
# Usage: tests/parity_test.sh   (make test runs it; DPC_BUILD/DPC_BIN pick the
# build tree, e.g. build/asan + build/asan/bin under SANITIZE=1). Never skips:
# without Debian's python3-torch it fails and says how to install it.
set -u
build=${DPC_BUILD:-build/rel}
bin=${DPC_BIN:-bin}
export DPC_CACHE_DIR=${DPC_CACHE_DIR:-$build/cache}
py=/usr/bin/python3 # Debian's python with python3-torch, not whatever is on PATH
CC=${CC:-cc}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

fail_setup() {
    echo "FAIL parity: $*"
    echo "0 passed, 1 failed"
    exit 1
}

if ! "$py" -c 'import torch, torchvision, numpy' >/dev/null 2>&1; then
    fail_setup "$py cannot import torch, torchvision and numpy; run scripts/deps.sh" \
        "(installs python3-torch python3-torchvision python3-numpy)"
fi
[ -f "$build/libdpc.a" ] && [ -x "$bin/dpc" ] || fail_setup "no $build/libdpc.a or $bin/dpc; run make first"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The driver, built as the Makefile builds its test programs.
cppflags=(-I. "-I$build/gen" -D_GNU_SOURCE)
cflags=(-std=c11 -Wall -Wextra -Werror -g -pthread)
ldlibs=(-lopenblas -lm -ldl -lpthread)
if [ -f "$CUDA_HOME/include/nvrtc.h" ]; then
    cppflags+=(-DDPC_HAVE_CUDA -isystem "$CUDA_HOME/include")
    ldlibs+=("-L$CUDA_HOME/lib64" "-Wl,-rpath,$CUDA_HOME/lib64" -lnvrtc)
fi
if [ "${SANITIZE:-}" = 1 ] || nm "$build/libdpc.a" 2>/dev/null | grep -q __asan_report; then
    cflags+=(-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
else
    cflags+=(-O2)
fi
mkdir -p "$build/parity"
driver=$build/parity/dpc_step
for tool in dpc_step dpc_bisect; do # dpc_bisect: a diagnostic, built so it keeps compiling
    if ! "$CC" "${cppflags[@]}" "${cflags[@]}" -o "$build/parity/$tool" "tests/parity/$tool.c" \
        "$build/libdpc.a" "${ldlibs[@]}" 2>"$tmp/cc.log"; then
        cat "$tmp/cc.log"
        fail_setup "cannot build tests/parity/$tool.c"
    fi
done

# Each case: model, per-replica batch, then torch_step.py's options. The
# weights are the torch model's own initialisation (not dpc's), BatchNorm
# gamma/beta and running statistics random (tests/parity/torch_step.py),
# on photo-like images: a backward pass that reads a wrong gamma, or a
# value equal to it only at gamma = 1, fails here. After 3 steps the
# momentum is non-zero and gamma has moved; 4 replicas are checked against
# a ghost-BatchNorm reference (per-replica statistics, summed gradients).
cases=(
    "resnet18 128"
    "resnet18 128 --steps 3"
    "resnet18 32 --replicas 4"
    "cnn_small 128"
    "cnn_small 128 --steps 3"
    "cnn_small 32 --replicas 4 --steps 3"
)
passed=0 failed=0
for case in "${cases[@]}"; do
    read -r model batch opts <<<"$case"
    # shellcheck disable=SC2086
    set -- $opts
    name="$model b$batch${opts:+ $opts}"
    tag=$(echo "$model-$batch$opts" | tr -c 'a-z0-9_\n-' '_')
    start=$(date +%s)
    # --no-memplan: the driver reads the forward ReLU outputs and max-pool
    # inputs after the step, which the arena reuses once they are dead.
    # Fusion stays on (the default), so the fused kernels are what is checked;
    # tests/unit/test_fuse.c shows planning changes no bit of the results.
    if ! "$bin/dpc" "models/$model.net" --batch "$batch" --no-memplan -o "$tmp/$tag.plan" 2>"$tmp/dpc.log"; then
        echo "FAIL $name: dpc cannot compile models/$model.net: $(cat "$tmp/dpc.log")"
        failed=$((failed + 1))
        continue
    fi
    "$py" tests/parity/torch_step.py --model "$model" --plan "$tmp/$tag.plan" \
        --driver "$driver" --dir "$tmp/$tag" --table "$build/parity/$tag.table" "$@" \
        >"$tmp/$tag.log" 2>&1
    rc=$?
    sed 's/^/    /' "$tmp/$tag.log" | grep -v -E '^    [0-9]+ passed, [0-9]+ failed$'
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/$tag.log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $name: torch_step.py exited $rc without a result line"
        failed=$((failed + 1))
        continue
    fi
    p=${line%% passed*} f=${line#*, }
    f=${f%% failed*}
    [ "$rc" != 0 ] && [ "$f" = 0 ] && f=1
    passed=$((passed + p)) failed=$((failed + f))
    echo "$name: $line ($(($(date +%s) - start))s)"
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
