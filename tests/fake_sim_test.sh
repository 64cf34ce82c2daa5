#!/usr/bin/env bash
# run: tier=test
# The cuda backend on the fake driver, whose kernels run their exact CUDA
# source under the simulator (tests/fake, tests/sim): cnn_small, resnet18
# and tests/nets/shape_small.net (attention from reshape, split, permute,
# the causal mask, slice, concat; its permutes that move the last axis are
# tiled through shared memory) and tests/nets/vit_tiny.net (patches, the
# class token, learned positions) (resnet18 not in the sanitized tree: it
# is slow there) at batch 4
# train 3 steps on a tiny CIFAR-format folder with --device cuda and with
# --device cpu (resnet18 at --lr 0.0001: at batch 4 its BatchNorm over 1x1
# maps amplifies the rounding differences of the two sides' reduction orders
# past 1e-4 within 3 steps at its own lr; cnn_small at its own lr):
#  - every per-step loss (DPC_DEBUG=2) agrees within 1e-4 relative, or 4
#    times the floor measured in the same run where that is larger (the cpu
#    again with DPC_CPU_SUM_ORDER=split-k: the same arithmetic in another
#    order; the fake sums in an order of its own, as a GPU does, and by step
#    3 resnet18's two cpu orders are 1.2e-4 apart), and every saved
#    parameter within 1e-3 (of max(1, |cpu|));
#  - a second cuda run gives the same losses and parameter bytes;
#  - cnn_small with --nondeterministic runs the fake cuDNN's
#    non-deterministic algorithm, and trains as the cpu does;
#  - cnn_small with --gpus 2 on two fake devices (two replica threads
#    launching at once) trains like --gpus 2 on the cpu;
#  - a kernel cache whose .cu sources are gone makes the fake refuse the
#    image with one clear line and dprun exit 1, not crash.
# Prints `N passed, N failed`.
. tests/lib.sh
use_fake_driver
models="cnn_small resnet18 shape_small vit_tiny"
case "$build" in *asan*) models="cnn_small shape_small vit_tiny" ;; esac

# 4 images per training file, 4 test images: 5 steps of 4 per epoch.
random_cifar "$tmp/cifar" 4

# cmp.py CPU.loss CUDA.loss CPU.st CUDA.st [SPLIT.loss]: the losses within
# 1e-4 relative, or within 4 times the cpu's two orders' distance at that
# step (SPLIT.loss, the cpu in split-k order) where that is larger: 4, as
# test_cuda_fake's ORDER_MULT, because a third order (the fake's) lands
# about as far from the cpu as the cpu's second does (measured within 1.4x);
# every tensor's every value within 1e-3 of max(1, |cpu|).
cat >"$tmp/cmp.py" <<'PY'
import json, struct, sys
def tensors(p):
    d = open(p, 'rb').read()
    n = struct.unpack('<Q', d[:8])[0]
    h = json.loads(d[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == '__metadata__':
            continue
        if v['dtype'] != 'F32':
            sys.exit(f'{p}: {k} is {v["dtype"]}, not F32')
        a, b = v['data_offsets']
        raw = d[8 + n + a:8 + n + b]
        out[k] = struct.unpack(f'<{len(raw) // 4}f', raw)
    return out
ok = True
lc = [l.split() for l in open(sys.argv[1])]
lg = [l.split() for l in open(sys.argv[2])]
ls = [l.split() for l in open(sys.argv[5])] if len(sys.argv) > 5 else lc
if not lc or len(lc) != len(lg) or len(lc) != len(ls):
    print(f'{len(lc)} cpu losses, {len(lg)} cuda losses, {len(ls)} split-k'); ok = False
for (s, a), (_, b), (_, f) in zip(lc, lg, ls):
    a, b, f = float(a), float(b), float(f)
    if abs(a - b) > max(1e-4 * abs(a), 4 * abs(a - f)):
        print(f'step {s}: loss cpu {a!r} cuda {b!r} (cpu split-k {f!r})'); ok = False
tc, tg = tensors(sys.argv[3]), tensors(sys.argv[4])
if tc.keys() != tg.keys():
    print('different tensors:', sorted(tc.keys() ^ tg.keys())); ok = False
for k in tc.keys() & tg.keys():
    for i, (a, b) in enumerate(zip(tc[k], tg[k])):
        if abs(a - b) > 1e-3 * max(1.0, abs(a)):
            print(f'{k}[{i}]: cpu {a!r} cuda {b!r}'); ok = False; break
sys.exit(0 if ok else 1)
PY
lr_cnn_small=() lr_resnet18=(--lr 0.0001) lr_shape_small=() lr_vit_tiny=()
train() { # model device tag [dprun options...]
    local -n lr=lr_$1
    local m=$1 dev=$2 tag=$3
    shift 3
    DPC_DEBUG=2 "$bin/dprun" "$tmp/$m.plan" --device "$dev" "$@" --data "$tmp/cifar" --steps 3 --no-shuffle \
        --no-augment "${lr[@]}" --save-params "$tmp/$m-$tag.st" >/dev/null 2>"$tmp/$m-$tag.err" ||
        { bad "$m on $dev: $(tail -n 3 "$tmp/$m-$tag.err")"; return 1; }
    sed -n 's/.*debug: step \([0-9]*\) loss \(.*\)/\1 \2/p' "$tmp/$m-$tag.err" >"$tmp/$m-$tag.loss"
}
for m in $models; do
    net=tests/nets/$m.net # the test nets first: models/vit_tiny.net is the full ViT
    [ -f "$net" ] || net=models/$m.net
    if ! "$bin/dpc" "$net" --batch 4 -o "$tmp/$m.plan" >/dev/null 2>"$tmp/dpc.err"; then
        bad "dpc $m: $(cat "$tmp/dpc.err")"
        continue
    fi
    train "$m" cpu cpu && DPC_CPU_SUM_ORDER=split-k train "$m" cpu split &&
        train "$m" cuda cuda && train "$m" cuda cuda2 || continue
    check "$m: 3 losses on each side" [ "$(cat "$tmp/$m-cpu.loss" "$tmp/$m-cuda.loss" | wc -l)" = 6 ]
    check "$m: simulated cuda == cpu (losses 1e-4 or 4 floors, parameters 1e-3)" \
        $py "$tmp/cmp.py" "$tmp/$m-cpu.loss" "$tmp/$m-cuda.loss" "$tmp/$m-cpu.st" "$tmp/$m-cuda.st" \
        "$tmp/$m-split.loss"
    check "$m: two cuda runs: the same losses" cmp -s "$tmp/$m-cuda.loss" "$tmp/$m-cuda2.loss"
    check "$m: two cuda runs: the same parameter bytes" cmp -s "$tmp/$m-cuda.st" "$tmp/$m-cuda2.st"
done

# ---- dprun --nondeterministic: cuDNN may take the fake's non-deterministic
# algorithm (DPC_DEBUG names it), and the run still trains as the cpu does.
if [ -f "$tmp/cnn_small.plan" ] && train cnn_small cuda nd --nondeterministic; then
    check "cnn_small --nondeterministic: cuDNN runs a non-deterministic algorithm" \
        grep -q 'cuDNN forward .*(heuristics, non-deterministic)' "$tmp/cnn_small-nd.err"
    check "... the default never does" lacks 'non-deterministic' "$tmp/cnn_small-cuda.err"
    check "cnn_small --nondeterministic: simulated cuda == cpu" \
        $py "$tmp/cmp.py" "$tmp/cnn_small-cpu.loss" "$tmp/cnn_small-nd.loss" \
        "$tmp/cnn_small-cpu.st" "$tmp/cnn_small-nd.st"
fi

# ---- two replica threads launching at once (each its own simulator state
# and shared memory): --gpus 2 on two fake devices == --gpus 2 on the cpu.
if [ -f "$tmp/cnn_small.plan" ]; then
    if DPC_FAKE_CUDA_DEVICES=2 train cnn_small cuda g2 --gpus 2 && train cnn_small cpu g2cpu --gpus 2; then
        check "cnn_small --gpus 2: simulated cuda == cpu" \
            $py "$tmp/cmp.py" "$tmp/cnn_small-g2cpu.loss" "$tmp/cnn_small-g2.loss" \
            "$tmp/cnn_small-g2cpu.st" "$tmp/cnn_small-g2.st"
        # ZeRO-1 on the nccl collective (NCCL all-reduce, host-staged gather)
        DPC_FAKE_CUDA_DEVICES=2 train cnn_small cuda g2s --gpus 2 --shard-optimizer &&
            check "cnn_small --gpus 2 --shard-optimizer on nccl == unsharded (bit for bit)" \
                cmp -s "$tmp/cnn_small-g2.st" "$tmp/cnn_small-g2s.st"
    fi
fi

# ---- an image whose source is gone ----------------------------------------------
# The NVRTC cache of the runs above, without its .cu files: the cubins are
# found (compiled again is not needed), their sources are not.
cache=${DPC_CACHE_DIR:-$HOME/.cache/dpc}
mkdir -m 700 "$tmp/broken"
cp "$cache"/dpc2-cuda-* "$tmp/broken/" 2>/dev/null
rm -f "$tmp/broken"/*.cu
DPC_CACHE_DIR=$tmp/broken "$bin/dprun" "$tmp/cnn_small.plan" --device cuda --data "$tmp/cifar" --steps 1 \
    >/dev/null 2>"$tmp/broken.err"
rc=$?
check "a cubin without its source: exit 1 (got $rc)" [ $rc = 1 ]
check "a cubin without its source: one clear line" \
    grep -q "^fake cuda: cuModuleLoadDataEx: cannot read $tmp/broken/dpc2-cuda-[0-9a-f]*\.cu, the source of the image$" "$tmp/broken.err"
finish
