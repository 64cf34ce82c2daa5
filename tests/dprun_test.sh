#!/usr/bin/env bash
# run: tier=test
# dprun's command line (docs/DESIGN.md §15): flags and their errors, the lr schedule
# of the reference article's three runs, training log lines, determinism
# (also across data worker counts), metrics, the progress bar, parameter
# files (also read back by a plain json + numpy reader), data errors,
# divergence, benchmark. Runs from the repository root; binaries
# in $DPC_BIN. Prints `N passed, N failed`.
. tests/lib.sh

"$bin/dpc" models/resnet18.net -o "$tmp/r.plan" || bad "compile resnet18"
"$bin/dpc" models/mlp.net -o "$tmp/mlp.plan" || bad "compile mlp"

# A tiny conv net with BatchNorm: fast, and its parameter file holds
# running statistics.
cifar_net "$tmp/tiny.net" tiny_bn 16 2 $'lr {0: 0.1, 1: 0.05}\nlr_scaling linear(reference_batch=16)\nwarmup 1 epochs' \
    'pad 4; random_crop 32; random_mirror; ' 50 <<<"$conv_bn_body"
"$bin/dpc" "$tmp/tiny.net" -o "$tmp/tiny.plan" || bad "compile tiny"
# An lr that must blow the loss up.
sed -e 's/lr {[^}]*}/lr {0: 100000}/' models/mlp.net >"$tmp/diverge.net"
"$bin/dpc" "$tmp/diverge.net" -o "$tmp/diverge.plan" || bad "compile diverge"

# ---- flags -------------------------------------------------------------------
expect_fail no-plan "no plan file" "$bin/dprun"
expect_fail missing-plan "cannot open" "$bin/dprun" "$tmp/none.plan"
expect_fail unknown-option "unknown option: --frobnicate" "$bin/dprun" "$tmp/mlp.plan" --frobnicate
expect_fail near-option "unknown option: --stpes (see dprun --help); did you mean '--steps'?" "$bin/dprun" "$tmp/mlp.plan" --stpes 3
expect_fail two-plans "more than one plan file" "$bin/dprun" "$tmp/mlp.plan" "$tmp/mlp.plan"
expect_fail epochs-zero "--epochs: '0' is not an integer" "$bin/dprun" "$tmp/mlp.plan" --epochs 0
expect_fail epochs-text "--epochs: 'abc'" "$bin/dprun" "$tmp/mlp.plan" --epochs abc
expect_fail steps-missing "--steps needs a value" "$bin/dprun" "$tmp/mlp.plan" --steps
# A flag missing its value never takes the next flag as one.
expect_fail epochs-then-flag "--epochs needs a value" "$bin/dprun" "$tmp/mlp.plan" --epochs --steps 1
expect_fail sweep-dir-then-flag "--sweep-dir needs a value" "$bin/dprun" "$tmp/mlp.plan" --sweep-dir --steps 1
expect_fail gpus-zero "--gpus: '0'" "$bin/dprun" "$tmp/mlp.plan" --gpus 0
expect_fail seed-negative "--seed: '-1'" "$bin/dprun" "$tmp/mlp.plan" --seed -1
expect_fail lr-scaling "--lr-scaling: 'cubic'" "$bin/dprun" "$tmp/mlp.plan" --lr-scaling cubic
expect_fail device-tpu "--device: 'tpu'" "$bin/dprun" "$tmp/mlp.plan" --device tpu
expect_fail device-cuda "--device cuda: " "$bin/dprun" "$tmp/mlp.plan" --device cuda
expect_fail flag-value "--no-shuffle takes no value" "$bin/dprun" "$tmp/mlp.plan" --no-shuffle=1
expect_fail flag-value-momentum "--momentum-correction takes no value" "$bin/dprun" "$tmp/mlp.plan" --momentum-correction=1
expect_fail warmup-too-long "warmup of 50 epochs" "$bin/dprun" "$tmp/r.plan" --warmup-epochs 50 --schedule
# Environment values: a malformed one is refused by name, not ignored.
for bad_env in DPC_THREADS=-1 DPC_THREADS=abc DPC_THREADS=1025 OMP_NUM_THREADS=0 OMP_NUM_THREADS=4,x \
    DPC_INPUT_OVERLAP=2 DPC_CUDA_GRAPH=yes DPC_DEBUG=x DPC_PROFILE=on DPC_CUDA_DEVICE=one; do
    expect_fail_line "env $bad_env" "dprun: error: ${bad_env%%=*}='${bad_env#*=}': must be" \
        env "$bad_env" "$bin/dprun" "$tmp/mlp.plan" --schedule
done
# DPC_TF32 chose cuBLAS's math mode; the plan's precision does now (--precision tf32).
expect_fail_line "env DPC_TF32 retired" "dprun: error: DPC_TF32='1': no longer read (TF32 is the plan's precision now: compile it with dpc --precision tf32)" \
    env DPC_TF32=1 "$bin/dprun" "$tmp/mlp.plan" --schedule
expect_fail_line "env escaped" "dprun: error: DPC_DEBUG='\\x1b[31m': must be" env "DPC_DEBUG=$(printf '\033[31m')" "$bin/dprun" "$tmp/mlp.plan" --schedule
check "env lists and empties are taken" env OMP_NUM_THREADS=2,1 DPC_THREADS= "$bin/dprun" "$tmp/mlp.plan" --schedule >/dev/null
# 128 x 4096 x 4096 is 2^31: it used to print global batch -2147483648 and a negative lr.
expect_fail_line global-batch-overflow "the global batch, 128 per device x 4096 replicas (--gpus) x 1 processes x 4096 micro-batches (--accumulate), is more than 2147483647" \
    "$bin/dprun" "$tmp/r.plan" --schedule --gpus 4096 --accumulate 4096 --lr-scaling linear
expect_fail gpus-per-process "at most 256 replicas per process" "$bin/dprun" "$tmp/mlp.plan" --gpus 257
"$bin/dprun" "$tmp/mlp.plan" --info | grep -q '^model: mlp' && ok || bad "--info"
"$bin/dprun" --help | grep -q -- '--warmup-per-iteration' && ok || bad "--help"

# ---- the article's three schedules ------------------------------------------
# run 1: batch 128, one GPU; run 2: batch 2048, unscaled; run 3: batch 2048,
# lr x16 with a 5-epoch warmup.
unscaled() { local e=$1; [ $e -lt 35 ] && echo 0.100 || { [ $e -lt 40 ] && echo 0.050 || { [ $e -lt 44 ] && echo 0.020 || echo 0.010; }; }; }
scaled() {
    local e=$1 warm=(0.100 0.400 0.700 1.000 1.300)
    if [ $e -lt 5 ]; then echo ${warm[$e]}; elif [ $e -lt 35 ]; then echo 1.600
    elif [ $e -lt 40 ]; then echo 0.800; elif [ $e -lt 44 ]; then echo 0.320; else echo 0.160; fi
}
: >"$tmp/run1.want"; : >"$tmp/run3.want"
for e in $(seq 0 44); do
    echo "epoch $e lr $(unscaled $e)" >>"$tmp/run1.want"
    echo "epoch $e lr $(scaled $e)" >>"$tmp/run3.want"
done
"$bin/dprun" "$tmp/r.plan" --schedule >"$tmp/run1.got" && cmp -s "$tmp/run1.got" "$tmp/run1.want" && ok ||
    bad "schedule run 1: $(diff "$tmp/run1.got" "$tmp/run1.want" | head -5)"
"$bin/dprun" "$tmp/r.plan" --schedule --gpus 16 --lr-scaling none --warmup-epochs 0 >"$tmp/run2.got" &&
    cmp -s "$tmp/run2.got" "$tmp/run1.want" && ok || bad "schedule run 2: $(diff "$tmp/run2.got" "$tmp/run1.want" | head -5)"
"$bin/dprun" "$tmp/r.plan" --schedule --gpus 16 >"$tmp/run3.got" 2>"$tmp/run3.err" &&
    cmp -s "$tmp/run3.got" "$tmp/run3.want" && ok || bad "schedule run 3: $(diff "$tmp/run3.got" "$tmp/run3.want" | head -5)"
"$bin/dprun" "$tmp/r.plan" --schedule --gpus 16 --warmup-per-iteration | cmp -s - "$tmp/run3.want" && ok ||
    bad "per-iteration warmup changes the epoch-start lr"
"$bin/dprun" "$tmp/r.plan" --schedule --epochs 50 | tail -n 1 | grep -qx 'epoch 49 lr 0.010' && ok || bad "--epochs 50 schedule"
"$bin/dprun" "$tmp/r.plan" --schedule --gpus 4 --warmup-epochs 2 | head -n 3 | tr '\n' ' ' |
    grep -q 'epoch 0 lr 0.100 epoch 1 lr 0.250 epoch 2 lr 0.400' && ok || bad "--warmup-epochs 2 --gpus 4"
# --per-step: every step (synthetic data: 5000 / 2048 = 2 steps an epoch);
# each epoch's first step is the epoch's lr, Goyal's ramp moves in between.
"$bin/dprun" "$tmp/r.plan" --schedule --per-step --gpus 16 --data synthetic >"$tmp/run3.steps" 2>/dev/null &&
    [ "$(wc -l <"$tmp/run3.steps")" = 90 ] && grep 'step 0 ' "$tmp/run3.steps" | sed 's/ step 0//; s/lr \(.*\)/lr \1/' |
    awk '{printf "epoch %s lr %.3f\n", $2, $4}' | cmp -s - "$tmp/run3.want" && ok || bad "--per-step run 3"
"$bin/dprun" "$tmp/r.plan" --schedule --per-step --gpus 16 --warmup-per-iteration --data synthetic 2>/dev/null |
    grep -qx 'epoch 0 step 1 lr 0.25' && ok || bad "--per-step with --warmup-per-iteration"
expect_fail per-step-alone "--per-step needs --schedule" "$bin/dprun" "$tmp/r.plan" --per-step
# Cosine and poly reach `final` at the run's last step, after --gpus, --lr and --epochs.
sed 's/lr {[^}]*}/lr cosine(base=0.1, final=0)/' models/resnet18.net >"$tmp/cos.net"
sed 's/lr {[^}]*}/lr poly(base=0.1, power=2, final=0.0001)/' models/resnet18.net >"$tmp/poly.net"
"$bin/dpc" "$tmp/cos.net" -o "$tmp/cos.plan" && "$bin/dpc" "$tmp/poly.net" -o "$tmp/poly.plan" || bad "compile cosine/poly"
"$bin/dprun" "$tmp/cos.plan" --schedule --per-step --gpus 8 --lr 0.2 --epochs 7 --data synthetic >"$tmp/cos.steps" 2>/dev/null &&
    sed -n '1p;$p' "$tmp/cos.steps" | tr '\n' ' ' | grep -qx 'epoch 0 step 0 lr 0.2 epoch 6 step 3 lr 0 ' &&
    grep -qx 'epoch 5 step 0 lr 1.6' "$tmp/cos.steps" && ok || bad "cosine schedule: $(sed -n '1p;$p' "$tmp/cos.steps")"
"$bin/dprun" "$tmp/poly.plan" --schedule --gpus 16 --lr-scaling none --warmup-epochs 0 --data synthetic 2>/dev/null |
    sed -n '1p;$p' | tr '\n' ' ' | grep -qx 'epoch 0 lr 0.100 epoch 44 lr 0.000 ' && ok || bad "poly schedule by epoch"
"$bin/dprun" "$tmp/poly.plan" --schedule --per-step --data synthetic 2>/dev/null | tail -n 1 |
    grep -qx 'epoch 44 step 38 lr 0.0001' && ok || bad "poly reaches final"
# A curve spans the run's epochs: a checkpoint resumes only with the same --epochs.
sed 's/lr {[^}]*}/lr cosine(base=0.01, final=0)/' models/mlp.net >"$tmp/mlpcos.net"
"$bin/dpc" "$tmp/mlpcos.net" -o "$tmp/mlpcos.plan" || bad "compile mlp cosine"
"$bin/dprun" "$tmp/mlpcos.plan" --data synthetic --epochs 2 --steps 3 --checkpoint "$tmp/cosck" >/dev/null 2>&1 || bad "mlp cosine: 3 steps"
# The loop steps the curve as --schedule prints it (epoch 1's first step).
"$bin/dprun" "$tmp/mlpcos.plan" --data synthetic --metrics "$tmp/cos.jsonl" >/dev/null 2>&1 || bad "mlp cosine: 2 epochs"
want=$("$bin/dprun" "$tmp/mlpcos.plan" --schedule --per-step --data synthetic 2>/dev/null | sed -n 's/^epoch 1 step 0 lr //p')
grep -q "^{\"epoch\": 1, \"lr\": $want, " "$tmp/cos.jsonl" && [ "$want" != 0.01 ] && [ -n "$want" ] && ok ||
    bad "cosine: the run's epoch-1 lr is not --schedule's $want: $(sed -n 2p "$tmp/cos.jsonl" | head -c 80)"
expect_fail cosine-resume-epochs "was written with --epochs 2; this run has --epochs 3" \
    "$bin/dprun" "$tmp/mlpcos.plan" --data synthetic --epochs 3 --checkpoint "$tmp/cosck" --resume
# --schedule without --data: a note says whose steps per epoch it counts.
env -u DPC_DATA "$bin/dprun" "$tmp/mlpcos.plan" --schedule --per-step >/dev/null 2>"$tmp/sd.err"
check "--schedule --per-step without --data names the synthetic set's count: $(cat "$tmp/sd.err")" grep -qF \
    "note: no --data: 78 steps per epoch, the built-in synthetic set's (5000 training images / global batch 64)" "$tmp/sd.err"
"$bin/dprun" "$tmp/mlpcos.plan" --schedule --per-step --data synthetic >/dev/null 2>"$tmp/sd.err"
check "... not with --data synthetic" lacks "no --data" "$tmp/sd.err"
# --steps short of a curve: a note gives its span and where --steps stops
# it; --schedule-steps N ends the curve at step N (0 from there on).
"$bin/dprun" "$tmp/mlpcos.plan" --schedule --per-step --steps 5 --data synthetic >/dev/null 2>"$tmp/ss.err"
check "--steps 5 of a 156-step cosine: one note: $(cat "$tmp/ss.err")" grep -qF \
    "note: the cosine lr schedule spans 156 steps (2 epochs of 78); --steps 5 stops it early at lr 0.009984, short of its end 0; --schedule-steps 5 makes it end there" "$tmp/ss.err"
"$bin/dprun" "$tmp/mlpcos.plan" --schedule --per-step --steps 5 --schedule-steps 5 --data synthetic >"$tmp/ss.out" 2>"$tmp/ss.err"
check "--schedule-steps 5: no note" lacks "spans" "$tmp/ss.err"
check "--schedule-steps 5: the cosine is at its midpoint at step 2 and reaches 0 at step 4: $(sed -n 3,6p "$tmp/ss.out" | tr '\n' ' ')" \
    bash -c "sed -n 3p '$tmp/ss.out' | grep -qx 'epoch 0 step 2 lr 0.005' && sed -n 5,6p '$tmp/ss.out' | tr '\n' ' ' | grep -qx 'epoch 0 step 4 lr 0 epoch 0 step 5 lr 0 '"
"$bin/dprun" "$tmp/mlpcos.plan" --data synthetic --steps 5 --schedule-steps 5 --log-every 1 --metrics "$tmp/ss.jsonl" \
    --checkpoint "$tmp/ssck" >/dev/null 2>"$tmp/ssr.err" || bad "--schedule-steps 5: the run: $(cat "$tmp/ssr.err")"
check "--schedule-steps 5: the run's last step (metrics lr column) is at the end value 0: $(grep -c '"step"' "$tmp/ss.jsonl") step rows" \
    "$py" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l]
assert len(rows) == 5 and rows[-1]["lr"] == 0 and rows[2]["lr"] == 0.005, rows' "$tmp/ss.jsonl"
expect_fail schedule-steps-resume "was written with --schedule-steps 5; this run has --schedule-steps unset" \
    "$bin/dprun" "$tmp/mlpcos.plan" --data synthetic --steps 6 --checkpoint "$tmp/ssck" --resume
expect_fail schedule-steps-dict "--schedule-steps 4: the plan's lr is a per-epoch dict" \
    "$bin/dprun" "$tmp/mlp.plan" --schedule --schedule-steps 4

# ---- training -----------------------------------------------------------------
epoch_re='^EPOCH  [0-9]: train loss [ 0-9.e+-]{4,} \| batch   64 \| lr 0\.[0-9]{3} \| Time per epoch [0-9]+\.[0-9]{2} seconds$'
final_re='^Training time [0-9]+\.[0-9]{2} seconds \| train accuracy [01]\.[0-9]{4} \| test accuracy [01]\.[0-9]{4}$'
"$bin/dprun" "$tmp/mlp.plan" --steps 20 --final-eval both --seed 5 --save-params "$tmp/a.safetensors" --metrics "$tmp/a.json" \
    >"$tmp/a.out" 2>"$tmp/a.err" || bad "train mlp: $(cat "$tmp/a.err")"
check "synthetic notice" grep -q 'note: no --data and \$DPC_DATA unset: using the built-in synthetic dataset' "$tmp/a.err"
check "EPOCH line format: $(head -n 1 "$tmp/a.out")" grep -Eq "$epoch_re" "$tmp/a.out"
check "final line format: $(tail -n 1 "$tmp/a.out")" bash -c "tail -n 1 '$tmp/a.out' | grep -Eq '$final_re'"
check "stdout holds only the log lines" test "$(wc -l <"$tmp/a.out")" -eq 2
check "learns the synthetic set" bash -c "tail -n 1 '$tmp/a.out' | grep -Eq 'test accuracy (0\.[5-9]|1\.0)'"
"$bin/dprun" "$tmp/mlp.plan" --steps 20 --final-eval both --seed 5 --save-params "$tmp/b.safetensors" --metrics "$tmp/b.json" \
    >"$tmp/b.out" 2>/dev/null || bad "train mlp again"
strip() { sed -E 's/(Time per epoch|Training time) [0-9.]+/\1 T/' "$1"; }
check "same seed, same log" cmp -s <(strip "$tmp/a.out") <(strip "$tmp/b.out")
check "same seed, byte-identical parameters" cmp -s "$tmp/a.safetensors" "$tmp/b.safetensors"
check "same seed, same losses (metrics)" cmp -s <(sed 's/"seconds": [0-9.]*, "img_per_s": [0-9.]*, "input_wait_s": [0-9.]*//' "$tmp/a.json") <(sed 's/"seconds": [0-9.]*, "img_per_s": [0-9.]*, "input_wait_s": [0-9.]*//' "$tmp/b.json")
"$bin/dprun" "$tmp/mlp.plan" --steps 20 --seed 6 --save-params "$tmp/c.safetensors" >/dev/null 2>&1 || bad "seed 6"
check "another seed, other parameters" bash -c "! cmp -s '$tmp/a.safetensors' '$tmp/c.safetensors'"
check "metrics: one JSON object per epoch" $py -c "
import json, sys
rows = [json.loads(l) for l in open('$tmp/a.json')]
assert len(rows) == 1 and rows[0]['epoch'] == 0 and rows[0]['steps'] == 20 and rows[0]['batch'] == 64, rows
"

check "metrics: the input pipeline's figures, final accuracies on the last epoch" $py -c "
import json
r = [json.loads(l) for l in open('$tmp/a.json')][-1]
for k in ('epoch', 'lr', 'train_loss', 'batch', 'steps', 'seconds', 'img_per_s', 'input_wait_s',
          'train_accuracy', 'test_accuracy'):
    assert k in r, (k, r)
# seconds is written to 1 ms: on a fast machine 20 steps take a few ms, so allow its rounding
assert r['seconds'] > 0 and abs(r['img_per_s'] - r['steps'] * r['batch'] / r['seconds']) < (0.01 + 0.0005 / r['seconds']) * r['img_per_s'] + 1, r
assert 0 <= r['input_wait_s'] <= r['seconds'], r
final = open('$tmp/a.out').read().splitlines()[-1]
assert final.endswith('train accuracy %.4f | test accuracy %.4f' % (r['train_accuracy'], r['test_accuracy'])), (final, r)
"
# Batches depend on (seed, epoch, index) only: no worker threads, one, or
# several give byte-identical parameters.
for w in 0 1 3; do
    "$bin/dprun" "$tmp/mlp.plan" --steps 20 --seed 5 --data-workers $w --save-params "$tmp/w$w.safetensors" \
        >"$tmp/w$w.out" 2>/dev/null || bad "--data-workers $w"
    check "--data-workers $w: same parameters as 2 workers" cmp -s "$tmp/a.safetensors" "$tmp/w$w.safetensors"
done
expect_fail data-workers-range "--data-workers: '65' is not an integer in 0..64" "$bin/dprun" "$tmp/mlp.plan" --data-workers 65
# DPC_DEBUG=1: how long the steps waited for input, per epoch.
DPC_DEBUG=1 "$bin/dprun" "$tmp/mlp.plan" --steps 10 --data-workers 1 >/dev/null 2>"$tmp/dbg.err" || bad "DPC_DEBUG=1 run"
check "DPC_DEBUG=1 reports the input wait: $(grep 'input:' "$tmp/dbg.err")" grep -Eq \
    '^dprun: debug: epoch 0 input: the steps waited [0-9.]+ s in [0-9]+ of 10 steps, [0-9.]+ s before the first batch; 1 data worker$' "$tmp/dbg.err"

# The progress bar: nothing at all when stderr is not a terminal; on a
# terminal, steps, img/s and the running loss, erased before the log lines.
check "no progress output off a terminal" bash -c "! grep -q \$'\r' '$tmp/a.err' && ! grep -q 'img/s' '$tmp/a.err'"
check "progress bar on a terminal" $py - "$bin/dprun" "$tmp/mlp.plan" <<'EOF'
import os, pty, subprocess, sys
master, slave = pty.openpty()
out = subprocess.run([sys.argv[1], sys.argv[2], '--steps', '40', '--eval-every', '1', '--final-eval', 'both'], stdin=subprocess.DEVNULL,
                     stdout=subprocess.PIPE, stderr=slave, timeout=300)
os.close(slave)
tty = b''
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    tty += chunk
tty = tty.decode()
assert out.returncode == 0, out.returncode
assert '\r' in tty and ' img/s' in tty and '| loss ' in tty and '/40 ' in tty, repr(tty[-400:])
assert 'epoch 0 [' in tty and 'test accuracy' in tty, repr(tty[-400:])
assert tty.rstrip('\n').endswith('\r\x1b[K'), repr(tty[-80:])  # erased at the end
log = out.stdout.decode().splitlines()
assert len(log) == 3 and log[0].startswith('EPOCH  0: train loss') and log[2].startswith('Training time'), log
EOF

# --steps 0 with --load-params evaluates the loaded parameters: the same
# accuracies as the run that saved them, and it saves them back unchanged.
"$bin/dprun" "$tmp/mlp.plan" --steps 0 --seed 5 --load-params "$tmp/a.safetensors" --save-params "$tmp/a2.safetensors" \
    >"$tmp/a2.out" 2>"$tmp/a2.err" || bad "load params: $(cat "$tmp/a2.err")"
check "loaded parameters give the same accuracy" \
    test "$(tail -n 1 "$tmp/a.out" | sed 's/^Training time [0-9.]* seconds | //')" = "$(tail -n 1 "$tmp/a2.out")"
check "an evaluation alone prints no training time" \
    grep -qE '^train accuracy [01]\.[0-9]{4} \| test accuracy [01]\.[0-9]{4}$' "$tmp/a2.out"
check "... nowhere" test "$(grep -c 'Training time' "$tmp/a2.out")" = 0
check "load then save is byte-identical" cmp -s "$tmp/a.safetensors" "$tmp/a2.safetensors"

# A NaN or Inf in a parameter file is refused at load, naming the tensor
# and the element, before any step (and nothing is saved).
for bad in nan inf; do
    $py - "$tmp/a.safetensors" "$tmp/$bad.safetensors" $bad <<'EOF'
import json, struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
at = 8 + n + h['dense1.bias']['data_offsets'][0] + 4 * 3  # element 3
b[at:at + 4] = struct.pack('<f', float(sys.argv[3]))
open(sys.argv[2], 'wb').write(b)
EOF
done
expect_fail load-nan "dprun: error: $tmp/nan.safetensors: tensor 'dense1.bias' holds NaN at element 3; refusing to start from it" \
    "$bin/dprun" "$tmp/mlp.plan" --steps 1 --load-params "$tmp/nan.safetensors" --save-params "$tmp/nan_out.st"
[ ! -e "$tmp/nan_out.st" ] && ok || bad "a refused --load-params still saved parameters"
expect_fail load-inf "tensor 'dense1.bias' holds an infinity at element 3" \
    "$bin/dprun" "$tmp/mlp.plan" --steps 1 --load-params "$tmp/inf.safetensors"

# --on-nan skip where every step is skipped: exit 1, say so, save nothing
# (an init so large that the first loss, and every one after, is NaN).
sed -e 's/magnitude=2.24/magnitude=3e38/' models/mlp.net >"$tmp/allnan.net"
"$bin/dpc" "$tmp/allnan.net" -o "$tmp/allnan.plan" || bad "compile allnan"
"$bin/dprun" "$tmp/allnan.plan" --steps 5 --on-nan skip --save-params "$tmp/allnan.st" --checkpoint "$tmp/allnan.ck" \
    >/dev/null 2>"$tmp/allnan.err"; rc=$?
check "--on-nan skip, every step skipped: exit 1 (got $rc)" [ $rc -eq 1 ]
check "--on-nan skip, every step skipped: $(tail -n 1 "$tmp/allnan.err")" grep -q \
    '^dprun: error: all 5 steps were skipped (--on-nan skip): each had a non-finite loss or gradient, so the parameters never changed; nothing was saved' \
    "$tmp/allnan.err"
check "--on-nan skip, every step skipped: no parameter file, no checkpoint" \
    bash -c "[ ! -e '$tmp/allnan.st' ] && [ ! -e '$tmp/allnan.ck/checkpoint.safetensors' ]"

# A BatchNorm net: running statistics are saved, momentum is not; any
# json + numpy reader can load the file.
"$bin/dprun" "$tmp/tiny.plan" --steps 5 --seed 1 --save-params "$tmp/t.safetensors" >"$tmp/t.out" 2>"$tmp/t.err" ||
    bad "train tiny: $(cat "$tmp/t.err")"
check "json+numpy reader" $py -c "
import json, struct, numpy as np
b = open('$tmp/t.safetensors', 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop('__metadata__')
assert meta['model'] == 'tiny_bn', meta
names = list(h)  # json keeps the file's order
assert names == ['conv0.weight', 'batchnorm0.gamma', 'batchnorm0.beta', 'batchnorm0.running_mean',
                 'batchnorm0.running_var', 'dense0.weight', 'dense0.bias'], names  # definition order, no momentum
t = {k: np.frombuffer(b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]], '<f4').reshape(v['shape']) for k, v in h.items()}
assert t[names[0]].shape == (4, 3, 3, 3), (names[0], t[names[0]].shape)
assert sum(x.size for k, x in t.items()) > 4 * 27 + 10 * 4 + 10
assert all(np.isfinite(x).all() for x in t.values())
"
"$bin/dprun" "$tmp/tiny.plan" --epochs 2 --eval-every 1 --metrics "$tmp/t.json" >"$tmp/ev.out" 2>/dev/null || bad "--eval-every"
check "--eval-every 1: a test accuracy line per epoch" test "$(grep -Ec '^EPOCH  [01]: test accuracy [01]\.[0-9]{4}$' "$tmp/ev.out")" -eq 2
check "--eval-every 1: 2 epochs, lr 0.100 then 0.050" test "$(grep -Eo 'lr 0\.[0-9]+' "$tmp/ev.out" | tr '\n' ' ')" = "lr 0.100 lr 0.050 "
check "metrics carry the test accuracy" $py -c "
import json
rows = [json.loads(l) for l in open('$tmp/t.json')]
assert [r['epoch'] for r in rows] == [0, 1] and all(0 <= r['test_accuracy'] <= 1 for r in rows), rows
assert rows[0]['steps'] == 5000 // 16, rows
"
if $py -c 'import safetensors' 2>/dev/null; then
    check "python safetensors reads the file" $py -c "
from safetensors.numpy import load_file
t = load_file('$tmp/t.safetensors'); assert len(t) > 4"
fi

# parameter files that must be refused
expect_fail load-missing "nope.safetensors: cannot open" "$bin/dprun" "$tmp/mlp.plan" --steps 0 --load-params "$tmp/nope.safetensors"
expect_fail load-other-model "tensor 'conv0.weight' is not a parameter of mlp" "$bin/dprun" "$tmp/mlp.plan" --steps 0 --load-params "$tmp/t.safetensors"
expect_fail load-other-shape "tensor 'dense0.weight' has shape [128,3072]; tiny_bn needs [10,4]" "$bin/dprun" "$tmp/tiny.plan" --steps 0 --load-params "$tmp/a.safetensors"
size=$(stat -c %s "$tmp/a.safetensors")
head -c $((size - 100)) "$tmp/a.safetensors" >"$tmp/trunc.safetensors"
expect_fail load-truncated "truncated file?" "$bin/dprun" "$tmp/mlp.plan" --steps 0 --load-params "$tmp/trunc.safetensors"
printf 'hello' >"$tmp/text.safetensors"
expect_fail load-text "not a safetensors file" "$bin/dprun" "$tmp/mlp.plan" --steps 0 --load-params "$tmp/text.safetensors"
$py - "$tmp/a.safetensors" "$tmp/drop.safetensors" "$tmp/shape.safetensors" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
def write(path, h, data):
    s = json.dumps(h).encode()
    open(path, 'wb').write(struct.pack('<Q', len(s)) + s + data)
names = [k for k in h if k != '__metadata__']
# drop the last tensor (and its bytes)
last = h[names[-1]]; d = dict(h); del d[names[-1]]
write(sys.argv[2], d, data[:last['data_offsets'][0]])
# transpose the first tensor's shape
s = dict(h); s[names[0]] = dict(h[names[0]], shape=list(reversed(h[names[0]]['shape'])))
write(sys.argv[3], s, data)
EOF
expect_fail load-missing-tensor "no tensor '" "$bin/dprun" "$tmp/mlp.plan" --steps 0 --load-params "$tmp/drop.safetensors"
expect_fail load-wrong-shape "has shape [3072,128]; mlp needs [128,3072]" "$bin/dprun" "$tmp/mlp.plan" --steps 0 --load-params "$tmp/shape.safetensors"
expect_fail save-bad-dir "cannot write" "$bin/dprun" "$tmp/mlp.plan" --steps 1 --save-params "$tmp/no/such/dir/p.safetensors"
# Trailing bytes, or a file larger than its header declares, are refused.
cp "$tmp/a.safetensors" "$tmp/tail.safetensors" && printf 'garbage' >>"$tmp/tail.safetensors"
expect_fail load-trailing "data bytes but the tensors cover" "$bin/dprun" "$tmp/mlp.plan" --steps 0 --load-params "$tmp/tail.safetensors"
# Devices and FIFOs are refused at once (timeout: a hang fails, not hangs).
expect_fail load-dev-zero "/dev/zero: not a regular file (a character device)" \
    timeout 60 "$bin/dprun" "$tmp/mlp.plan" --steps 0 --load-params /dev/zero
mkfifo "$tmp/fifo.safetensors"
expect_fail load-fifo "not a regular file (a FIFO)" \
    timeout 60 "$bin/dprun" "$tmp/mlp.plan" --steps 0 --load-params "$tmp/fifo.safetensors"
expect_fail plan-fifo "not a regular file (a FIFO)" timeout 60 "$bin/dprun" "$tmp/fifo.safetensors" --info

# ---- outputs: never clobber, never follow a planted link ------------------------
# A link planted at the old temporary's name (PATH.tmp) is not followed.
printf 'precious' >"$tmp/victim"
ln -s "$tmp/victim" "$tmp/out.st.tmp"
"$bin/dprun" "$tmp/mlp.plan" --steps 1 --save-params "$tmp/out.st" >/dev/null 2>&1 || bad "save beside a planted link"
check "a link planted at out.st.tmp: the victim is untouched" [ "$(cat "$tmp/victim")" = precious ]
check "a link planted at out.st.tmp: out.st is a new regular file" bash -c "[ -f '$tmp/out.st' ] && [ ! -L '$tmp/out.st' ]"
# A link the user names is written through, to the file it names.
cp "$tmp/victim" "$tmp/named" && ln -s "$tmp/named" "$tmp/named.link"
"$bin/dprun" "$tmp/mlp.plan" --steps 1 --save-params "$tmp/named.link" >/dev/null 2>&1 || bad "save through a named link"
check "a named link stays a link to the replaced file" bash -c "[ -L '$tmp/named.link' ] && cmp -s '$tmp/named' '$tmp/out.st'"
# An output that is not a regular file is refused before any step.
mkfifo "$tmp/m.fifo"
expect_fail metrics-fifo "--metrics $tmp/m.fifo: not a regular file (a FIFO); refusing to replace it" \
    timeout 60 "$bin/dprun" "$tmp/mlp.plan" --steps 1 --metrics "$tmp/m.fifo"
check "the FIFO is still a FIFO" [ -p "$tmp/m.fifo" ]
mkdir "$tmp/adir"
expect_fail save-dir "--save-params $tmp/adir: not a regular file (a directory)" \
    "$bin/dprun" "$tmp/mlp.plan" --steps 1 --save-params "$tmp/adir"
# Unwritable outputs fail before training, not after it: no step runs.
for opt in --save-params --metrics; do
    DPC_DEBUG=2 "$bin/dprun" "$tmp/mlp.plan" --epochs 1 $opt "$tmp/no/such/dir/x" >"$tmp/early.out" 2>"$tmp/early.err"
    check "$opt in a missing folder: exit 1 before any step: $(tail -n 1 "$tmp/early.err")" bash -c \
        "grep -q 'dprun: error: $opt $tmp/no/such/dir/x: cannot write in' '$tmp/early.err' && ! grep -q 'debug: step' '$tmp/early.err' && ! grep -q EPOCH '$tmp/early.out'"
done
# An output that names an input of the run is refused, the input untouched.
cp "$tmp/mlp.plan" "$tmp/keep.plan"
expect_fail metrics-is-plan "--metrics $tmp/mlp.plan is the plan" \
    "$bin/dprun" "$tmp/mlp.plan" --steps 1 --metrics "$tmp/mlp.plan"
expect_fail save-is-plan "--save-params $tmp/mlp.plan is the plan" \
    "$bin/dprun" "$tmp/mlp.plan" --steps 1 --save-params "$tmp/mlp.plan"
check "the plan is untouched" cmp -s "$tmp/mlp.plan" "$tmp/keep.plan"
cp "$tmp/a.safetensors" "$tmp/keep.safetensors"
expect_fail save-is-load "is --load-params" \
    "$bin/dprun" "$tmp/mlp.plan" --steps 1 --load-params "$tmp/a.safetensors" --save-params "$tmp/a.safetensors"
check "the loaded parameters are untouched" cmp -s "$tmp/a.safetensors" "$tmp/keep.safetensors"

# ---- data ----------------------------------------------------------------------
# A small CIFAR-10-format folder: 100 records per training file, 50 test.
mkcifar() { # DIR RECORDS_PER_TRAIN_FILE
    mkdir -p "$1"
    $py - "$1" "$2" <<'EOF'
import sys, numpy as np
d, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
for name, count in [(f'data_batch_{i}.bin', n) for i in range(1, 6)] + [('test_batch.bin', n // 2)]:
    lab = np.arange(count) % 10
    img = (lab[:, None] * 25 + rng.integers(0, 20, (count, 3072))).astype(np.uint8)
    rec = np.concatenate([lab[:, None].astype(np.uint8), img], axis=1)
    open(f'{d}/{name}', 'wb').write(rec.tobytes())
EOF
}
mkcifar "$tmp/cifar" 100
"$bin/dprun" "$tmp/mlp.plan" --data "$tmp/cifar" --epochs 1 >"$tmp/d.out" 2>"$tmp/d.err" || bad "train on CIFAR folder: $(cat "$tmp/d.err")"
check "CIFAR folder: 500 images, 7 steps of 64" grep -q '7 steps per epoch, 500 train / 50 test images' "$tmp/d.err"
check "CIFAR folder: no synthetic notice" bash -c "! grep -q synthetic '$tmp/d.err'"
DPC_DATA="$tmp/cifar" "$bin/dprun" "$tmp/mlp.plan" --steps 1 >/dev/null 2>"$tmp/e.err" || bad "\$DPC_DATA: $(cat "$tmp/e.err")"
check "\$DPC_DATA is the default" grep -q "500 train / 50 test images ($tmp/cifar)" "$tmp/e.err"
DPC_DATA="$tmp/cifar" "$bin/dprun" "$tmp/mlp.plan" --steps 1 --data synthetic >/dev/null 2>"$tmp/f.err" || bad "--data synthetic"
check "--data synthetic wins over \$DPC_DATA" grep -q 'using the built-in synthetic dataset' "$tmp/f.err"
"$bin/dprun" "$tmp/mlp.plan" --steps 3 --no-augment --no-shuffle >/dev/null 2>&1 && ok || bad "--no-augment --no-shuffle"
expect_fail data-missing-dir "not a folder" "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/nodir"
expect_fail data-env-missing "$tmp/nodir: not a folder" env DPC_DATA="$tmp/nodir" "$bin/dprun" "$tmp/mlp.plan"
rm "$tmp/cifar/data_batch_4.bin"
expect_fail data-missing-file "data_batch_4.bin: No such file or directory" "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/cifar"
# A folder written with a slash: joined without doubling it.
expect_fail data-slash "$tmp/cifar/data_batch_4.bin: No such file" "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/cifar/"
mkcifar "$tmp/cifar" 100
head -c 5000 "$tmp/cifar/test_batch.bin" >"$tmp/cut" && mv "$tmp/cut" "$tmp/cifar/test_batch.bin"
expect_fail data-truncated "test_batch.bin: size 5000 is not a whole number of 3073-byte" "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/cifar"
mkcifar "$tmp/cifar" 100
printf '\x0b' | dd of="$tmp/cifar/data_batch_2.bin" bs=1 seek=$((3073 * 7)) conv=notrunc status=none
expect_fail data-bad-label "data_batch_2.bin: record 7 has label 11" "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/cifar"
mkcifar "$tmp/cifar" 100
: >"$tmp/cifar/data_batch_3.bin"
expect_fail data-empty "data_batch_3.bin: size 0: the file is empty" "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/cifar"
rm "$tmp/cifar/data_batch_3.bin" && mkdir "$tmp/cifar/data_batch_3.bin"
expect_fail data-folder "data_batch_3.bin: is a folder, not a CIFAR-10 batch file" "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/cifar"
rmdir "$tmp/cifar/data_batch_3.bin"
mkcifar "$tmp/cifar" 100
printf 'x' >>"$tmp/cifar/data_batch_5.bin"
expect_fail data-extra-byte "data_batch_5.bin: size 307301 is not a whole number of 3073-byte CIFAR-10 records: record 100 has only 1 bytes" \
    "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/cifar"
mkcifar "$tmp/small" 5
cp "$tmp/small/data_batch_1.bin" "$tmp/keep.bin"
ln -s "$tmp/small/data_batch_1.bin" "$tmp/alias.bin"
expect_fail save-is-data "--save-params $tmp/alias.bin is a --data file ($tmp/small/data_batch_1.bin)" \
    "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/small" --save-params "$tmp/alias.bin"
check "the data file is untouched" cmp -s "$tmp/small/data_batch_1.bin" "$tmp/keep.bin"
expect_fail data-too-small "do not fill one batch of 64" "$bin/dprun" "$tmp/mlp.plan" --data "$tmp/small"

# ---- divergence, benchmark -------------------------------------------------------
"$bin/dprun" "$tmp/diverge.plan" --steps 200 >/dev/null 2>"$tmp/nan.err"; rc=$?
check "non-finite loss stops the run (exit $rc)" test $rc -ne 0
check "non-finite loss message: $(tail -n 1 "$tmp/nan.err")" grep -Eq 'loss is (nan|infinite) at step [0-9]+ \(epoch 0, step [0-9]+ of the epoch, lr 100000\)' "$tmp/nan.err"
"$bin/dprun" "$tmp/mlp.plan" --benchmark 3 >"$tmp/bench.out" 2>/dev/null || bad "--benchmark"
check "benchmark: last line $(tail -n 1 "$tmp/bench.out")" bash -c "tail -n 1 '$tmp/bench.out' | grep -Eq '^throughput: [0-9]+(\.[0-9]+)? img/s$'"

# Goyal momentum correction: no effect while the lr is constant (epoch 0 of
# mlp), an effect once it changes (epoch 1: 0.01 -> 0.002).
for mc in plain corr; do
    flag=; [ $mc = corr ] && flag=--momentum-correction
    "$bin/dprun" "$tmp/mlp.plan" --data synthetic --steps 20 $flag --save-params "$tmp/mc1_$mc.st" >/dev/null 2>&1
    "$bin/dprun" "$tmp/mlp.plan" --data synthetic --epochs 2 $flag --save-params "$tmp/mc2_$mc.st" >/dev/null 2>&1
done
check "momentum correction: same params while the lr is constant" cmp -s "$tmp/mc1_plain.st" "$tmp/mc1_corr.st"
check "momentum correction: changes the run once the lr changes" bash -c "! cmp -s '$tmp/mc2_plain.st' '$tmp/mc2_corr.st'"

# The next batch's copy overlapping the step (on by itself on cuda only;
# DPC_INPUT_OVERLAP=1 takes its order on the cpu too, where it changes
# nothing): the same losses and parameters across an epoch boundary, up to
# a --steps limit, with two replicas, and with skipped non-finite steps.
for ov in 0 1; do
    DPC_INPUT_OVERLAP=$ov DPC_DEBUG=2 "$bin/dprun" "$tmp/mlp.plan" --data synthetic --epochs 2 --steps 50 --gpus 2 \
        --save-params "$tmp/ov$ov.st" >/dev/null 2>"$tmp/ov$ov.err" || bad "DPC_INPUT_OVERLAP=$ov"
    DPC_INPUT_OVERLAP=$ov DPC_DEBUG=2 "$bin/dprun" "$tmp/diverge.plan" --steps 30 --on-nan skip \
        --save-params "$tmp/ovn$ov.st" >/dev/null 2>"$tmp/ovn$ov.err" || bad "DPC_INPUT_OVERLAP=$ov --on-nan skip"
done
check "input overlap: same parameters" cmp -s "$tmp/ov0.st" "$tmp/ov1.st"
check "input overlap: same 50 step losses" bash -c "cmp -s <(grep 'debug: step' '$tmp/ov0.err') <(grep 'debug: step' '$tmp/ov1.err') && test \$(grep -c 'debug: step' '$tmp/ov1.err') -eq 50"
check "input overlap, --on-nan skip: same parameters" cmp -s "$tmp/ovn0.st" "$tmp/ovn1.st"
check "input overlap, --on-nan skip: same steps skipped" bash -c "cmp -s <(grep -E 'debug: step|skipped' '$tmp/ovn0.err') <(grep -E 'debug: step|skipped' '$tmp/ovn1.err') && grep -q skipped '$tmp/ovn1.err'"
check "DPC_DEBUG notes the overlap once" test "$(grep -c 'overlaps each step' "$tmp/ov1.err")" -eq 1
check "DPC_INPUT_OVERLAP=0: no overlap on the cpu" bash -c "! grep -q 'overlaps each step' '$tmp/ov0.err'"
DPC_INPUT_OVERLAP=1 "$bin/dprun" "$tmp/mlp.plan" --benchmark 3 --gpus 2 >"$tmp/ovb.out" 2>/dev/null || bad "overlap --benchmark"
check "input overlap: --benchmark $(tail -n 1 "$tmp/ovb.out")" grep -Eq '^benchmark: 3 steps of batch 128 .*' "$tmp/ovb.out"

finish
