#!/usr/bin/env bash
# run: tier=test
# ZeRO-1 (dprun --shard-optimizer): `--gpus 4 --shard-optimizer`
# against `--gpus 4` bit for bit (per-step losses of DPC_DEBUG=2, the
# parameters of --save-params) on cnn_small and ResNet-18; the optimizer
# state per replica it reports (about 1/4 of the whole); checkpoints (the
# same tensors sharded or not, resumed sharded<->unsharded); momentum
# correction and --on-nan skip, which touch the optimizer state from the
# host; one replica refused; and, with MPI, `mpirun -np 2 --gpus 2
# --shard-optimizer` against `--gpus 4`, its checkpoints (gathered to rank
# 0: the unsharded tensors) resumed under mpirun and by one process, and a
# one-process checkpoint resumed under mpirun. Synthetic data, a few steps; the
# ResNet-18 at 1/8 of its widths (the same 62 parameters), so its final
# evaluation on the cpu stays short.
# Runs from the repository root; binaries in $DPC_BIN. Prints
# `N passed, N failed`.
. tests/lib.sh
losses() { grep '^dprun: debug: step [0-9]* loss ' "$@"; }
dprun() { DPC_DEBUG=2 "$bin/dprun" "$@"; }
# The tensors of two safetensors files are the same bytes (the metadata,
# which holds timings, may differ).
same_tensors() {
    $py - "$1" "$2" <<'EOF'
import json, struct, sys
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return h, b[8 + n:]
sys.exit(0 if read(sys.argv[1]) == read(sys.argv[2]) else 1)
EOF
}
# The `optimizer state per replica A sharded ..., B unsharded` line of $1:
# A <= B / 4 * $2 (the greedy's imbalance at parameter granularity).
state_share() {
    $py - "$1" "$2" <<'EOF'
import re, sys
unit = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
m = re.search(r"optimizer state per replica ([\d.]+) (\w+) sharded \(the largest of 4 shards\), "
              r"([\d.]+) (\w+) unsharded", open(sys.argv[1]).read())
if not m: sys.exit("no optimizer state line")
most, total = float(m[1]) * unit[m[2]], float(m[3]) * unit[m[4]]
print("largest shard %.0f of %.0f bytes" % (most, total))
sys.exit(0 if 0 < most <= total / 4 * float(sys.argv[2]) else 1)
EOF
}

"$bin/dpc" models/cnn_small.net --batch 8 -o "$tmp/cnn.plan" || bad "compile cnn_small"
sed -e '/^    x = /s/\b64\b/8/g; /^    x = /s/\b128\b/16/g; /^    x = /s/\b256\b/32/g' \
    -e '/^    x = /s/\b512\b/64/g' models/resnet18_cifar.net >"$tmp/rn.net"
"$bin/dpc" "$tmp/rn.net" --batch 4 -o "$tmp/rn.plan" || bad "compile resnet18_cifar at 1/8 width"
C="$tmp/cnn.plan --data synthetic --gpus 4"

# ---- the same run, sharded or not ------------------------------------------------
dprun $C --steps 6 --save-params "$tmp/c.st" >/dev/null 2>"$tmp/c.err" || bad "cnn_small --gpus 4"
dprun $C --steps 6 --save-params "$tmp/cs.st" --shard-optimizer >/dev/null 2>"$tmp/cs.err" ||
    bad "cnn_small --gpus 4 --shard-optimizer: $(tail -n 1 "$tmp/cs.err")"
check "cnn_small: 6 step losses" [ "$(losses "$tmp/c.err" | wc -l)" -eq 6 ]
check "cnn_small: sharded losses == unsharded (exact)" [ "$(losses "$tmp/c.err")" = "$(losses "$tmp/cs.err")" ]
check "cnn_small: sharded weights == unsharded (bit for bit)" cmp -s "$tmp/c.st" "$tmp/cs.st"
# cnn_small's largest tensor is 2/3 of its parameters: that one shard holds it.
check "cnn_small: the largest shard is below the whole state" state_share "$tmp/cs.err" 3.9
check "no state line unsharded" bash -c "! grep -q 'optimizer state per replica' '$tmp/c.err'"

# With gradient accumulation (the buckets reduce-scatter K parts) and with
# LARS (per-layer norms inside one owner): sharding changes no bit.
A="$tmp/cnn.plan --data synthetic --gpus 2 --accumulate 2 --steps 4"
dprun $A --save-params "$tmp/a.st" >/dev/null 2>"$tmp/a.err" || bad "--accumulate 2: $(tail -n 1 "$tmp/a.err")"
dprun $A --save-params "$tmp/as.st" --shard-optimizer >/dev/null 2>"$tmp/as.err" ||
    bad "--accumulate 2 --shard-optimizer: $(tail -n 1 "$tmp/as.err")"
check "--accumulate 2: sharded losses == unsharded (exact)" [ "$(losses "$tmp/a.err")" = "$(losses "$tmp/as.err")" ]
check "--accumulate 2: sharded weights == unsharded (bit for bit)" cmp -s "$tmp/a.st" "$tmp/as.st"
sed 's/^\( *\)optimizer .*/\1optimizer lars(wd=0.0005)/' models/cnn_small.net >"$tmp/lars.net"
"$bin/dpc" "$tmp/lars.net" --batch 8 -o "$tmp/lars.plan" || bad "compile cnn_small with lars"
dprun "$tmp/lars.plan" --data synthetic --gpus 4 --steps 4 --save-params "$tmp/l.st" >/dev/null 2>"$tmp/l.err" ||
    bad "lars --gpus 4: $(tail -n 1 "$tmp/l.err")"
dprun "$tmp/lars.plan" --data synthetic --gpus 4 --steps 4 --save-params "$tmp/ls.st" --shard-optimizer \
    >/dev/null 2>"$tmp/ls.err" || bad "lars --gpus 4 --shard-optimizer: $(tail -n 1 "$tmp/ls.err")"
check "lars: sharded weights == unsharded (bit for bit)" cmp -s "$tmp/l.st" "$tmp/ls.st"

R="$tmp/rn.plan --data synthetic --gpus 4 --steps 3"
dprun $R --save-params "$tmp/r.st" >/dev/null 2>"$tmp/r.err" || bad "resnet18 --gpus 4"
dprun $R --save-params "$tmp/rs.st" --shard-optimizer >/dev/null 2>"$tmp/rs.err" ||
    bad "resnet18 --gpus 4 --shard-optimizer: $(tail -n 1 "$tmp/rs.err")"
check "resnet18: sharded losses == unsharded (exact)" [ "$(losses "$tmp/r.err")" = "$(losses "$tmp/rs.err")" ]
check "resnet18: sharded weights == unsharded (bit for bit)" cmp -s "$tmp/r.st" "$tmp/rs.st"
check "resnet18: the largest of 4 shards is within 10% of a quarter" state_share "$tmp/rs.err" 1.1

# ---- the host's passes over the state: momentum correction, --on-nan skip ------------
# Batch 16 x 4 is twice the reference batch: the per-iteration warmup
# changes the lr every step, so the velocity is rescaled every step, once
# per state (not once per replica that can read it).
"$bin/dpc" models/cnn_small.net --batch 16 -o "$tmp/c16.plan" || bad "compile cnn_small at 16"
H="$tmp/c16.plan --data synthetic --gpus 4 --steps 4 --warmup-per-iteration"
dprun $H --save-params "$tmp/h0.st" >/dev/null 2>&1 || bad "warmup run"
dprun $H --momentum-correction --save-params "$tmp/h.st" >/dev/null 2>&1 || bad "momentum correction run"
dprun $H --momentum-correction --save-params "$tmp/hs.st" --shard-optimizer >/dev/null 2>&1 ||
    bad "momentum correction, sharded"
check "momentum correction changes the weights" bash -c "! cmp -s '$tmp/h0.st' '$tmp/h.st'"
check "momentum correction: sharded == unsharded (bit for bit)" cmp -s "$tmp/h.st" "$tmp/hs.st"
# lr 1e6 from epoch 1 (39 steps of 128): the later steps blow up and are undone.
sed -e 's/lr {[^}]*}/lr {0: 0.01, 1: 1000000}/' models/mlp.net >"$tmp/div.net"
"$bin/dpc" "$tmp/div.net" -o "$tmp/div.plan" || bad "compile div"
D="$tmp/div.plan --data synthetic --gpus 4 --steps 45 --on-nan skip"
"$bin/dprun" $D --save-params "$tmp/d.st" >/dev/null 2>"$tmp/d.err" || bad "--on-nan skip run"
"$bin/dprun" $D --save-params "$tmp/ds.st" --shard-optimizer >/dev/null 2>"$tmp/ds.err" ||
    bad "--on-nan skip, sharded"
check "--on-nan skip undid steps" grep -q 'skipped the step' "$tmp/ds.err"
check "--on-nan skip: sharded == unsharded (bit for bit)" cmp -s "$tmp/d.st" "$tmp/ds.st"

# ---- checkpoints: the gathered state, interchangeable ------------------------------
mkdir -p "$tmp/ck" "$tmp/cks"
dprun $C --steps 3 --checkpoint "$tmp/ck" >/dev/null 2>&1 || bad "checkpoint at step 3"
dprun $C --steps 3 --checkpoint "$tmp/cks" --shard-optimizer >/dev/null 2>&1 || bad "sharded checkpoint at step 3"
check "a sharded checkpoint holds the unsharded one's tensors (bytes)" \
    same_tensors "$tmp/ck/checkpoint.safetensors" "$tmp/cks/checkpoint.safetensors"
cp -r "$tmp/cks" "$tmp/cks2" && cp -r "$tmp/ck" "$tmp/ck2" && cp -r "$tmp/cks" "$tmp/cks3"
for run in "cks --shard-optimizer:sharded -> sharded" "cks2:sharded -> unsharded" \
    "ck2 --shard-optimizer:unsharded -> sharded"; do
    dir=${run%%:*}
    dprun $C --steps 6 --checkpoint "$tmp/"$dir --resume --save-params "$tmp/res.st" >/dev/null \
        2>"$tmp/res.err" || bad "resume ${run#*:}: $(tail -n 1 "$tmp/res.err")"
    check "resume ${run#*:}: the weights of the uninterrupted run (bit for bit)" cmp -s "$tmp/c.st" "$tmp/res.st"
    check "resume ${run#*:}: its losses are the uninterrupted run's" \
        [ "$(losses "$tmp/res.err")" = "$(losses "$tmp/c.err" | tail -n 3)" ]
done

# ---- refused ---------------------------------------------------------------------
fail_prefix='*dprun: error: '
expect_fail "one replica" "--shard-optimizer needs at least 2 replicas (the job has 1)" \
    "$bin/dprun" "$tmp/cnn.plan" --data synthetic --steps 1 --shard-optimizer

# ---- mpirun -np 2 --gpus 2 --shard-optimizer == --gpus 4 ----------------------------
if mpi_ready; then
    timeout 300 "${mpi[@]}" "$bin/dprun" "$tmp/cnn.plan" --data synthetic --gpus 2 --steps 6 \
        --shard-optimizer --save-params "$tmp/m.st" >/dev/null 2>"$tmp/m.err" ||
        bad "mpirun --shard-optimizer: $(tail -n 3 "$tmp/m.err")"
    check "mpirun -np 2 --gpus 2 --shard-optimizer == --gpus 4 (bit for bit)" cmp -s "$tmp/c.st" "$tmp/m.st"
    # Checkpoints gather the shards of the other process to rank 0, and a
    # resume sends them back: interchangeable with one process's.
    M="$tmp/cnn.plan --data synthetic --gpus 2 --shard-optimizer"
    timeout 300 "${mpi[@]}" "$bin/dprun" $M --steps 3 --checkpoint "$tmp/mck" >/dev/null 2>"$tmp/mck.err" ||
        bad "mpirun --shard-optimizer --checkpoint: $(tail -n 3 "$tmp/mck.err")"
    check "mpirun sharded checkpoint holds the unsharded one's tensors (bytes)" \
        same_tensors "$tmp/ck/checkpoint.safetensors" "$tmp/mck/checkpoint.safetensors"
    cp -r "$tmp/mck" "$tmp/mck2"
    timeout 300 "${mpi[@]}" "$bin/dprun" $M --steps 6 --checkpoint "$tmp/mck" --resume \
        --save-params "$tmp/mres.st" >/dev/null 2>"$tmp/mres.err" ||
        bad "mpirun --shard-optimizer --resume: $(tail -n 3 "$tmp/mres.err")"
    check "mpirun sharded resume: the weights of the uninterrupted run (bit for bit)" cmp -s "$tmp/c.st" "$tmp/mres.st"
    timeout 300 "${mpi[@]}" "$bin/dprun" $M --steps 6 --checkpoint "$tmp/cks3" --resume \
        --save-params "$tmp/mres2.st" >/dev/null 2>"$tmp/mres2.err" ||
        bad "mpirun resumes a one-process sharded checkpoint: $(tail -n 3 "$tmp/mres2.err")"
    check "mpirun resumes a one-process sharded checkpoint (bit for bit)" cmp -s "$tmp/c.st" "$tmp/mres2.st"
    dprun $C --steps 6 --checkpoint "$tmp/mck2" --resume --save-params "$tmp/res2.st" >/dev/null \
        2>"$tmp/res2.err" || bad "one process resumes the mpirun checkpoint: $(tail -n 1 "$tmp/res2.err")"
    check "one process, unsharded, resumes the mpirun sharded checkpoint (bit for bit)" cmp -s "$tmp/c.st" "$tmp/res2.st"
fi

finish
