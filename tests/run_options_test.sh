#!/usr/bin/env bash
# run: tier=check
# What a run does besides training, as dprun's flags ask: the
# final evaluation (--final-eval, its default when --steps cuts the
# schedule short, --eval-batches), per-step metrics rows (--log-every) that
# a resume continues exactly, progress lines when stderr is a file
# (--progress-every), the schedule's notes (a warmup that changes nothing
# or lowers the lr, a run that stops inside its warmup), refusals of
# contradictory schedules, the divergence warning, and the sweep table's
# wall time and notes. All on the synthetic set. Prints `N passed, N failed`.
. tests/lib.sh
fail_prefix='*dprun: error: '
dprun_fail() { local name=$1 want=$2; shift 2; expect_fail "$name" "$want" "$bin/dprun" "$@"; }

cnn=$tmp/cnn.plan mlp=$tmp/mlp.plan
"$bin/dpc" models/cnn_small.net -o "$cnn" && "$bin/dpc" models/mlp.net -o "$mlp" ||
    { echo "dpc failed"; echo "0 passed, 1 failed"; exit 1; }
run() { "$bin/dprun" "$@" --device cpu >"$tmp/out" 2>"$tmp/err"; }
last() { tail -n 1 "$tmp/out"; }

# --- the final evaluation
run "$cnn" --steps 20
check "--steps cuts the schedule: exit 0" [ $? = 0 ]
check "... no final evaluation by default ($(last))" [ "$(last | sed 's/[0-9.]* seconds/T/')" = "Training time T" ]
check "... and a note says how to ask for one" grep -q 'note: --steps 20 ends the run before its schedule does: no final evaluation (--final-eval' "$tmp/err"
run "$cnn" --steps 20 --final-eval test
check "--final-eval test: only the test accuracy" grep -qE '^Training time [0-9.]+ seconds \| test accuracy [0-9.]+$' "$tmp/out"
run "$cnn" --steps 20 --final-eval train
check "--final-eval train: only the train accuracy" grep -qE '^Training time [0-9.]+ seconds \| train accuracy [0-9.]+$' "$tmp/out"
run "$cnn" --steps 20 --final-eval both --eval-batches 2
check "--final-eval both: both" grep -qE '^Training time [0-9.]+ seconds \| train accuracy [0-9.]+ \| test accuracy [0-9.]+$' "$tmp/out"
check "--eval-batches 2 names what it reads" grep -q 'note: --eval-batches 2: an accuracy pass reads at most the first 200 of 1000 test images, or 200 of 5000 train images' "$tmp/err"
run "$cnn" --steps 0
check "--steps 0 (evaluate only) measures both, and names no training time" \
    grep -qE '^train accuracy [0-9.]+ \| test accuracy [0-9.]+$' "$tmp/out"
run "$mlp" --epochs 1
check "the whole schedule: both, as the article" grep -qE '\| train accuracy [0-9.]+ \| test accuracy [0-9.]+$' "$tmp/out"
dprun_fail "--final-eval takes a choice" "--final-eval: 'all' is not one of test, train, both, none" "$cnn" --final-eval all

# --- per-step rows, and a resume that continues them
run "$cnn" --epochs 1 --metrics "$tmp/a.jsonl" --log-every 50
check "--log-every 50: 3 rows in an epoch of 156 steps" [ "$(grep -c '"step"' "$tmp/a.jsonl")" = 3 ]
check "the rows come before their epoch's line, in order" \
    [ "$(sed -n 's/.*"step": \([0-9]*\).*/\1/p; s/.*"train_loss".*/E/p' "$tmp/a.jsonl" | tr '\n' ' ')" = "50 100 150 E " ]
check "every line is JSON with the row's keys" "$py" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "step" in r]
assert all(set(r) == {"epoch", "step", "loss", "lr", "img_per_s"} for r in steps), steps
assert all(r["img_per_s"] > 0 and r["loss"] > 0 for r in steps), steps' "$tmp/a.jsonl"
dprun_fail "--log-every needs --metrics" "--log-every writes its rows into the --metrics file" "$cnn" --log-every 5
strip() { sed -E 's/"(img_per_s|seconds|input_wait_s)": [0-9.e+-]+/T/g' "$1"; }
run "$cnn" --epochs 2 --metrics "$tmp/whole.jsonl" --log-every 40
run "$cnn" --epochs 2 --metrics "$tmp/part.jsonl" --log-every 40 --checkpoint "$tmp/ck" --steps 200
check "a run stopped by --steps mid-epoch (exit $?)" [ -s "$tmp/ck/checkpoint.safetensors" ]
run "$cnn" --epochs 2 --metrics "$tmp/part.jsonl" --log-every 40 --checkpoint "$tmp/ck" --resume
check "resumed (exit $?: $(tail -n 1 "$tmp/err"))" grep -q '^Training time' "$tmp/out"
check "the resumed metrics equal the whole run's, rows and epochs" \
    [ "$(strip "$tmp/part.jsonl")" = "$(strip "$tmp/whole.jsonl")" ]

# --- progress lines in a log
run "$cnn" --epochs 3 --progress-every 1
check "stderr a file, --progress-every 1: progress lines" grep -qE '^dprun: progress: epoch [0-9] +[0-9]+/156 \| +[0-9]+ img/s \| loss +[0-9.]+ \| eta' "$tmp/err"
run "$cnn" --epochs 3 --progress-every 0
check "--progress-every 0: none" lacks 'progress:' "$tmp/err"

# --- --nondeterministic is a cuDNN matter: the cpu says it changes nothing
run "$cnn" --steps 1 --nondeterministic
check "--nondeterministic on the cpu: a note" grep -q '^dprun: note: --nondeterministic changes nothing on the cpu backend' "$tmp/err"

# --- the schedule says what nobody may have meant
"$bin/dprun" "$cnn" --schedule --gpus 4 --warmup-epochs 2 >"$tmp/out" 2>"$tmp/err"
check "a warmup that lowers the lr is named" grep -q "note: warmup lowers the lr from 0.05 to 0.04 over 2 epochs: its target is epoch 2's lr 0.01 times 4" "$tmp/err"
"$bin/dprun" "$cnn" --schedule --lr-scaling none >"$tmp/out" 2>"$tmp/err"
check "a warmup that changes nothing is named" grep -q 'note: warmup changes nothing: the lr stays 0.05 for its 1 epoch (the schedule does not scale the lr)' "$tmp/err"
"$bin/dpc" models/resnet18_cifar.net -o "$tmp/r.plan" 2>/dev/null
"$bin/dprun" "$tmp/r.plan" --schedule --gpus 16 --epochs 2 >"$tmp/out" 2>"$tmp/err"
check "a run that stops inside its warmup is named" grep -q 'note: the run stops after 2 epochs, inside the 5-epoch warmup: the lr reaches 0.7, not its target 1.6' "$tmp/err"
"$bin/dprun" "$tmp/r.plan" --schedule --epochs 2 >"$tmp/out" 2>"$tmp/err"
check "... but not when the warmup changes nothing (one batch of 128)" lacks 'inside the 5-epoch warmup' "$tmp/err"
# The schedule's own warmup under linear scaling is flat only at its reference batch (it ramps at
# any larger one, as written): nothing is said of it. One the user asks for is named when flat.
check "... nor is the schedule's warmup, flat at the reference batch only" lacks 'warmup changes nothing' "$tmp/err"
"$bin/dprun" "$tmp/r.plan" --schedule --epochs 6 --warmup-epochs 5 >"$tmp/out" 2>"$tmp/err"
check "a --warmup-epochs that changes nothing is named" \
    grep -q 'note: warmup changes nothing: the lr stays 0.1 for its 5 epochs (linear scaling at global batch 128, reference batch 128)' "$tmp/err"
run "$cnn" --steps 1
check "a bundled model's run: no warmup note" lacks 'warmup changes nothing' "$tmp/err"
run "$cnn" --steps 0 --warmup-epochs 1
check "an evaluation alone: no schedule note" lacks 'warmup' "$tmp/err"
dprun_fail "--warmup-epochs longer than --epochs" "--warmup-epochs 2 does not fit the 1 epoch of --epochs 1" "$cnn" --epochs 1 --warmup-epochs 2
dprun_fail "... naming the epochs asked for" "--warmup-epochs 5 does not fit the 2 epochs of --epochs 2" "$cnn" --epochs 2 --warmup-epochs 5

# --- a diverged run is said to be one
run "$mlp" --epochs 2 --lr 0.5
check "a loss of 1e11 warns at its first epoch" grep -qE '^dprun: warning: epoch 0: train loss [0-9.e+]+ is over 100 times a uniform guess.s \(2.3 for 10 classes\): the run has diverged; try a lower lr' "$tmp/err"
check "... once" [ "$(grep -c 'has diverged' "$tmp/err")" = 1 ]
run "$mlp" --epochs 1
check "a healthy run has no such warning" lacks 'diverged' "$tmp/err"

# --- the sweep: wall time beside training time, and the schedule's notes
run "$cnn" --sweep 'warmup=0,1' --steps 20 --sweep-dir "$tmp/sw"
check "the sweep's table has both times" grep -q '| training (s) | wall (s) | run | result |' "$tmp/out"
check "a row whose warmup changed nothing says so" grep -qE '^\| [0-9] \| 1 \|.*\| ok; note: warmup changes nothing' "$tmp/out"
check "--steps in a sweep still measures the test accuracy" [ "$(grep -cE '^\| [0-9] \| [01] \| [0-9.]+ \| — \| [0-9.]+ \|' "$tmp/out")" = 2 ]
dprun_fail "--sweep with --final-eval none" "--sweep ranks its runs by test accuracy: --final-eval none measures none" "$cnn" --sweep 'lr=0.1' --final-eval none
# --- dpc says which defaults a model without a train section takes
sed '/^train {/,$d' models/cnn_small.net >"$tmp/nt.net"
"$bin/dpc" "$tmp/nt.net" -o "$tmp/nt.plan" 2>"$tmp/err"
check "no train section: compiled (exit $?)" [ -s "$tmp/nt.plan" ]
check "... and a note names the defaults it took" grep -q "^dpc: note: $tmp/nt.net has no train section; it trains with the defaults:" "$tmp/err"
check "... the batch, epochs and optimizer among them" grep -q '^  optimizer sgd(momentum=0.9, wd=0.0001)$' "$tmp/err"
"$bin/dpc" models/cnn_small.net -o "$tmp/c.plan" 2>"$tmp/err"
check "a train section: no such note" lacks 'note:' "$tmp/err"
finish
