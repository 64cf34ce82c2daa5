#!/usr/bin/env bash
# run: tier=test
# Gradient accumulation (dprun --accumulate K): N replicas of K
# micro-batches train exactly as N*K replicas: the same per-step losses
# (DPC_DEBUG=2) and bit-identical weights, on cnn_small (fused and not) and
# a narrow ResNet of resnet18_cifar's blocks; one replica of K too; under
# mpirun (-np 2 --gpus 1 --accumulate 2 == --gpus 4); --accumulate 1 is the
# run without it; a checkpoint mid-run resumes bit for bit; --on-nan skip
# undoes a whole step; bad values are refused with one message. BatchNorm
# running statistics differ from the N*K run's by design (each replica's
# are updated by each of its micro-batches, docs/DESIGN.md §10.3), so the
# weight comparisons leave them out. Runs from the repository root;
# binaries in $DPC_BIN. Prints `N passed, N failed`.
. tests/lib.sh

# Every tensor of two safetensors files but the BatchNorm running
# statistics, bit for bit (the same names in both).
same_weights() {
    $py - "$1" "$2" <<'EOF'
import json, struct, sys
def read(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); d = f.read()
    return {k: d[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
a, b = read(sys.argv[1]), read(sys.argv[2])
keys = [k for k in a if ".running_" not in k]
sys.exit(0 if a.keys() == b.keys() and keys and all(a[k] == b[k] for k in keys) else 1)
EOF
}
losses() { grep 'debug: step' "$1"; }
same_losses() { [ "$(losses "$1" | wc -l)" -eq "$3" ] && [ "$(losses "$1")" = "$(losses "$2")" ]; }

# run NAME PLAN ARGS...: DPC_DEBUG=2 dprun, log in $tmp/NAME.log, params in $tmp/NAME.st.
run() {
    local name=$1 plan=$2; shift 2
    DPC_DEBUG=2 "$bin/dprun" "$tmp/$plan.plan" "${data[@]}" --save-params "$tmp/$name.st" "$@" \
        >"$tmp/$name.log" 2>&1 || bad "$name: dprun $* ($(tail -n 1 "$tmp/$name.log"))"
}

# A narrow ResNet: resnet18_cifar's stem, basic and down blocks at 4-16 channels.
cat >"$tmp/resnet.net" <<'EOF'
input image[3, 32, 32]
input label class(10)
block basic(x, c) {
    y = relu(batchnorm(conv(x, c, k=3, s=1, p=1, bias=false)))
    y = batchnorm(conv(y, c, k=3, s=1, p=1, bias=false))
    return relu(x + y)
}
block down(x, c) {
    y = relu(batchnorm(conv(x, c, k=3, s=2, p=1, bias=false)))
    y = batchnorm(conv(y, c, k=3, s=1, p=1, bias=false))
    s = batchnorm(conv(x, c, k=1, s=2, p=0, bias=false))
    return relu(s + y)
}
network resnet_narrow {
    x = relu(batchnorm(conv(image, 4, k=3, s=1, p=1, bias=false)))
    x = basic(x, 4)
    x = basic(down(x, 8), 8)
    x = down(x, 16)
    logits = dense(global_avgpool(x), 10)
    loss = softmax_cross_entropy(logits, label)
}
train {
    batch 2 per device
    epochs 1
    init xavier(magnitude=2.24)
    optimizer sgd(momentum=0.9, wd=0.0001)
    lr {0: 0.1}
    lr_scaling linear(reference_batch=4)
    data cifar10 { pad 4; random_crop 32; random_mirror;
                   normalize mean(0.4914, 0.4822, 0.4465) std(0.2023, 0.1994, 0.2010) }
    eval batch 20
}
EOF
"$bin/dpc" models/cnn_small.net --batch 4 -o "$tmp/cnn.plan" || bad "compile cnn_small"
"$bin/dpc" models/cnn_small.net --batch 4 --no-fuse -o "$tmp/cnn_nofuse.plan" || bad "compile cnn_small --no-fuse"
"$bin/dpc" "$tmp/resnet.net" -o "$tmp/resnet.plan" || bad "compile the narrow ResNet"
$py tests/dp/ghost_bn.py write-data "$tmp/cifar" || bad "write the test data"
data=(--data "$tmp/cifar")

# ---- --gpus 2 --accumulate 4 == --gpus 8 -------------------------------------------
for plan in cnn cnn_nofuse resnet; do
    run "${plan}_g8" $plan --gpus 8 --steps 3
    run "${plan}_g2k4" $plan --gpus 2 --accumulate 4 --steps 3
    check "$plan: --gpus 2 --accumulate 4 == --gpus 8: per-step losses" \
        same_losses "$tmp/${plan}_g8.log" "$tmp/${plan}_g2k4.log" 3
    check "$plan: --gpus 2 --accumulate 4 == --gpus 8: weights bit for bit" \
        same_weights "$tmp/${plan}_g8.st" "$tmp/${plan}_g2k4.st"
done
check "the banner says what accumulation does" \
    grep -q 'each replica accumulates 4 micro-batches of 4 per step: global batch 32, as 8 replicas' "$tmp/cnn_g2k4.log"
check "the log prints the global batch" grep -q 'batch   32' "$tmp/cnn_g2k4.log"
run cnn_g1k8 cnn --gpus 1 --accumulate 8 --steps 3
check "cnn: --gpus 1 --accumulate 8 == --gpus 8 (losses and weights)" \
    eval 'same_losses "$tmp/cnn_g8.log" "$tmp/cnn_g1k8.log" 3 && same_weights "$tmp/cnn_g8.st" "$tmp/cnn_g1k8.st"'

# ---- clip_grad_norm: the norm of the global gradient --------------------------------
# Each replica's sumsq reads the all-reduced sum, so the clip is the same
# under --gpus 8 as --gpus 2 --accumulate 4; ZeRO-1 is refused (its shards
# each see a part of the norm).
sed 's/^    optimizer sgd(momentum=0.9, wd=0.0001)$/&\n    clip_grad_norm 0.05/' models/cnn_small.net >"$tmp/clip.net"
"$bin/dpc" "$tmp/clip.net" --batch 4 -o "$tmp/clip.plan" || bad "compile cnn_small with clip_grad_norm"
run clip_g8 clip --gpus 8 --steps 3
run clip_g2k4 clip --gpus 2 --accumulate 4 --steps 3
check "clip_grad_norm: --gpus 2 --accumulate 4 == --gpus 8 (losses and weights)" \
    eval 'same_losses "$tmp/clip_g8.log" "$tmp/clip_g2k4.log" 3 && same_weights "$tmp/clip_g8.st" "$tmp/clip_g2k4.st"'
check "clip_grad_norm changes the update" eval '! same_weights "$tmp/clip_g8.st" "$tmp/cnn_g8.st"'
expect_fail "clip_grad_norm with --shard-optimizer" "clips gradients by their global norm (clip_grad_norm 0.05)" \
    "$bin/dprun" "$tmp/clip.plan" "${data[@]}" --gpus 2 --shard-optimizer --steps 1

# ---- --accumulate 1 is no accumulation -----------------------------------------------
run cnn_g2 cnn --gpus 2 --steps 3
run cnn_g2k1 cnn --gpus 2 --accumulate 1 --steps 3
check "--accumulate 1 == no --accumulate (the whole parameter file, bit for bit)" \
    cmp -s "$tmp/cnn_g2.st" "$tmp/cnn_g2k1.st"
check "--accumulate 1: the same per-step losses" same_losses "$tmp/cnn_g2.log" "$tmp/cnn_g2k1.log" 3
check "--accumulate 1: no accumulation banner" eval '! grep -q accumulates "$tmp/cnn_g2k1.log"'

# ---- checkpoint mid-run and resume -------------------------------------------------
# 10 steps per epoch at global batch 32: stop at 4 (mid-epoch), resume to 13.
run full cnn --gpus 2 --accumulate 4 --steps 13
run part cnn --gpus 2 --accumulate 4 --steps 4 --checkpoint "$tmp/ck"
run rest cnn --gpus 2 --accumulate 4 --steps 13 --checkpoint "$tmp/ck" --resume
check "resume with accumulation: the per-step losses of the uninterrupted run" \
    [ "$(losses "$tmp/full.log")" = "$(cat <(losses "$tmp/part.log") <(losses "$tmp/rest.log"))" ]
check "resume with accumulation: the parameter file bit for bit" cmp -s "$tmp/full.st" "$tmp/rest.st"
check "the checkpoint keeps --accumulate among the flags of the arithmetic" \
    grep -aq -- '--accumulate=4' "$tmp/ck/checkpoint.safetensors"
expect_fail "resume with another --accumulate (another global batch)" \
    "was written with global batch 32 (10 steps per epoch); this run has 16 (20)" \
    "$bin/dprun" "$tmp/cnn.plan" "${data[@]}" --gpus 2 --accumulate 2 --steps 13 --checkpoint "$tmp/ck" --resume
expect_fail "resume with the global batch split otherwise (4 x 2)" "replica" \
    "$bin/dprun" "$tmp/cnn.plan" "${data[@]}" --gpus 4 --accumulate 2 --steps 13 --checkpoint "$tmp/ck" --resume

# ---- --on-nan skip undoes the whole step (every micro-batch) ---------------------------
div=(--lr 1000000 --steps 6 --on-nan skip)
run skip cnn --gpus 2 --accumulate 4 "${div[@]}"
first=$(grep -m1 -o 'at step [0-9]*' "$tmp/skip.log" | grep -o '[0-9]*$')
run skip8 cnn --gpus 8 "${div[@]}"
check "--on-nan skip: the same steps skipped as --gpus 8 (first: ${first:-none})" \
    eval '[ -n "$first" ] && [ "$(grep -c "skipped the step" "$tmp/skip.log")" = "$(grep -c "skipped the step" "$tmp/skip8.log")" ]'
run before cnn --gpus 2 --accumulate 4 --lr 1000000 --steps "${first:-0}"
check "--on-nan skip: the skipped steps leave every tensor as before the first (running statistics too)" \
    cmp -s "$tmp/skip.st" "$tmp/before.st"

# ---- bad values ---------------------------------------------------------------------
for v in 0 -1 x 2.5 ''; do
    expect_fail_line "--accumulate '$v'" "--accumulate" "$bin/dprun" "$tmp/cnn.plan" --accumulate "$v"
done
# nccl accumulates on distinct GPUs only (test_cuda_fake runs it on the fake driver).
expect_fail "DPC_COLL=nccl with --accumulate on the cpu" "DPC_COLL=nccl needs the replicas on at least 2 CUDA devices" \
    env DPC_COLL=nccl "$bin/dprun" "$tmp/cnn.plan" "${data[@]}" --gpus 2 --accumulate 2 --steps 1
"$bin/dpc" models/cnn_small.net --batch 4 --sync-bn -o "$tmp/sync.plan" || bad "dpc --sync-bn"
expect_fail "--accumulate with synchronised BatchNorm" "the plan has synchronised BatchNorm" \
    "$bin/dprun" "$tmp/sync.plan" "${data[@]}" --gpus 2 --accumulate 2 --steps 1
check "--help lists --accumulate" sh -c "'$bin/dprun' --help | grep -q -- '--accumulate K'"
out=$("$bin/dprun" "$tmp/cnn.plan" --gpus 2 --accumulate 4 --schedule 2>&1)
case "$out" in *"the schedule of global batch 32"*) ok ;; *) bad "--accumulate --schedule: $out" ;; esac

# ---- mpirun -np 2 --gpus 1 --accumulate 2 == --gpus 4 ------------------------------
if mpi_ready; then
    run g4 cnn --gpus 4 --steps 3
    run g2k2 cnn --gpus 2 --accumulate 2 --steps 3
    DPC_DEBUG=2 "${mpi[@]}" "$bin/dprun" "$tmp/cnn.plan" "${data[@]}" --gpus 1 --accumulate 2 --steps 3 \
        --save-params "$tmp/mpi.st" >"$tmp/mpi.log" 2>&1 || bad "mpirun -np 2 --accumulate 2: $(tail -n 3 "$tmp/mpi.log")"
    check "mpirun -np 2 --gpus 1 --accumulate 2 == --gpus 4 (losses and weights)" \
        eval 'same_losses "$tmp/g4.log" "$tmp/mpi.log" 3 && same_weights "$tmp/g4.st" "$tmp/mpi.st"'
    check "mpirun -np 2 --gpus 1 --accumulate 2 == --gpus 2 --accumulate 2 (the whole file)" \
        cmp -s "$tmp/g2k2.st" "$tmp/mpi.st"
    check "under mpirun accumulation sums with the mpi collective" \
        grep -q 'gradients summed by the mpi collective' "$tmp/mpi.log"
    # The job's checkpoint, written under mpirun, resumes in one process.
    "${mpi[@]}" "$bin/dprun" "$tmp/cnn.plan" "${data[@]}" --gpus 1 --accumulate 2 --steps 2 \
        --checkpoint "$tmp/mck" >"$tmp/mck.log" 2>&1 || bad "mpirun --checkpoint: $(tail -n 3 "$tmp/mck.log")"
    run mres cnn --gpus 2 --accumulate 2 --steps 3 --checkpoint "$tmp/mck" --resume
    check "a checkpoint of mpirun -np 2 --accumulate 2 resumes as --gpus 2 --accumulate 2, bit for bit" \
        cmp -s "$tmp/g2k2.st" "$tmp/mres.st"
fi

finish
