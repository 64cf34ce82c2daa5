#!/usr/bin/env bash
# run: tier=test
# Checkpoints, resume, signals and divergence (dprun --checkpoint DIR,
# --checkpoint-every N, --resume, --on-nan): a resumed run's per-step
# losses (DPC_DEBUG=2 `step S loss X` lines, exact) and final weights equal
# an uninterrupted run's, at --gpus 1 and --gpus 4 (per-replica BatchNorm),
# stopped by --steps and by a real SIGTERM; corrupt, truncated and foreign
# checkpoints are refused; a fresh run never overwrites a checkpoint; a
# diverging run stops and keeps its last good checkpoint; --on-nan skip
# undoes the bad steps. Synthetic data, small nets. Runs from the
# repository root; binaries in $DPC_BIN. Prints `N passed, N failed`.
. tests/lib.sh
# The per-step loss lines of stderr files, in order.
losses() { cat "$@" | grep '^dprun: debug: step [0-9]* loss '; }
dprun() { DPC_DEBUG=2 "$bin/dprun" "$@"; }

"$bin/dpc" models/mlp.net -o "$tmp/mlp.plan" || bad "compile mlp"
"$bin/dpc" models/cnn_small.net --batch 8 -o "$tmp/cnn.plan" || bad "compile cnn_small"
"$bin/dpc" models/mlp.net --batch 32 -o "$tmp/mlp32.plan" || bad "compile mlp --batch 32"
# lr 1e6 from epoch 1: epoch 0 trains, epoch 1 blows up a few steps in.
sed -e 's/lr {[^}]*}/lr {0: 0.01, 1: 1000000}/' models/mlp.net >"$tmp/div.net"
"$bin/dpc" "$tmp/div.net" -o "$tmp/div.plan" || bad "compile div"
M="$tmp/mlp.plan --data synthetic --seed 3"

# ---- --gpus 1: stop mid-epoch with --steps, resume, compare ----------------
dprun $M --metrics "$tmp/full.jsonl" --save-params "$tmp/full.st" >"$tmp/full.out" 2>"$tmp/full.err"
check "uninterrupted run: $(tail -n 2 "$tmp/full.err")" [ "$(losses "$tmp/full.err" | wc -l)" -eq 156 ]
dprun $M --metrics "$tmp/a.jsonl" --steps 40 --checkpoint "$tmp/ck" >"$tmp/a.out" 2>"$tmp/a.err"
check "--steps 40 writes a checkpoint" [ -f "$tmp/ck/checkpoint.safetensors" ]
cp "$tmp/ck/checkpoint.safetensors" "$tmp/step40.safetensors"
dprun $M --metrics "$tmp/a.jsonl" --checkpoint "$tmp/ck" --resume --save-params "$tmp/res.st" \
    >"$tmp/b.out" 2>"$tmp/b.err"
check "resume says what it restored: $(grep resumed "$tmp/b.err")" \
    grep -q "resumed from $tmp/ck/checkpoint.safetensors: 40 steps restored (epoch 0, step 40 of 78)" "$tmp/b.err"
check "gpus 1: resumed per-step losses equal the uninterrupted run's" \
    cmp -s <(losses "$tmp/full.err") <(losses "$tmp/a.err" "$tmp/b.err")
check "gpus 1: resumed final weights equal the uninterrupted run's" cmp -s "$tmp/full.st" "$tmp/res.st"
check "the resumed run prints the remaining EPOCH lines, losses as uninterrupted" \
    cmp -s <(grep '^EPOCH' "$tmp/full.out" | cut -d'|' -f1-3) <(grep '^EPOCH' "$tmp/b.out" | cut -d'|' -f1-3)
# The metrics file continues where the checkpoint left it: one line per
# epoch, as the uninterrupted run's (times aside).
strip() { sed -E 's/"(seconds|img_per_s|input_wait_s)": [0-9.]*(, )?//g' "$1"; }
check "metrics appended on resume, not truncated or duplicated" cmp -s <(strip "$tmp/full.jsonl") <(strip "$tmp/a.jsonl")
cp "$tmp/a.jsonl" "$tmp/a.keep" && head -c 10 "$tmp/a.keep" >"$tmp/a.jsonl"
expect_fail "a metrics file shorter than at the checkpoint" "shorter than the" \
    "$bin/dprun" $M --metrics "$tmp/a.jsonl" --checkpoint "$tmp/ck" --resume
cp "$tmp/a.keep" "$tmp/a.jsonl"
# --resume writes the metrics file its own --metrics names, after checking
# it starts with what the checkpoint recorded; another file, or a flag that
# changes the arithmetic, is refused.
dprun $M --metrics "$tmp/r.jsonl" --steps 40 --checkpoint "$tmp/rck" >/dev/null 2>&1
printf 'unrelated\n' >"$tmp/other.jsonl"
expect_fail "resume with another --metrics" \
    "checkpoint refused: --metrics $tmp/other.jsonl: line 1 is not a metrics line dprun writes; a resume from $tmp/rck/checkpoint.safetensors would drop it" \
    "$bin/dprun" $M --metrics "$tmp/other.jsonl" --checkpoint "$tmp/rck" --resume
check "the other metrics file is untouched" [ "$(cat "$tmp/other.jsonl")" = unrelated ]
expect_fail "resume with another --lr" "was written with --lr 0.01; this run has --lr 0.5 (a resume" \
    "$bin/dprun" $M --lr 0.5 --checkpoint "$tmp/rck" --resume
expect_fail "resume with --on-nan skip" "was written with --on-nan stop; this run has --on-nan skip" \
    "$bin/dprun" $M --on-nan skip --checkpoint "$tmp/rck" --resume
expect_fail "resume with --warmup-per-iteration" "with --warmup-per-iteration off; this run has --warmup-per-iteration on" \
    "$bin/dprun" $M --warmup-per-iteration --checkpoint "$tmp/rck" --resume
abs_bin=$(cd "$bin" && pwd)
cp "$tmp/r.jsonl" "$tmp/r.before"
(cd "$tmp" && "$abs_bin/dprun" mlp.plan --data synthetic --seed 3 --checkpoint rck --resume >/dev/null 2>"$tmp/nometrics.err") ||
    bad "resume without --metrics, from another directory"
check "resume without --metrics writes no metrics file" cmp -s "$tmp/r.before" "$tmp/r.jsonl"
check "resume without --metrics says so: $(grep note: "$tmp/nometrics.err" | tail -n 1)" \
    grep -q "the checkpoint's run kept a metrics file; this run writes none (add --metrics FILE" "$tmp/nometrics.err"
# A metrics file with a prefix other than the recorded one (length and
# SHA-256): at step 200 of 3 epochs the file holds epoch 0's line.
dprun $M --epochs 3 --metrics "$tmp/p.jsonl" --steps 200 --checkpoint "$tmp/pck" >/dev/null 2>&1
sed 's/"epoch": 0/"epoch": 9/' "$tmp/p.jsonl" >"$tmp/p2.jsonl"
expect_fail "a metrics file whose first bytes differ" \
    "checkpoint refused: --metrics $tmp/p2.jsonl: its first " \
    "$bin/dprun" $M --epochs 3 --metrics "$tmp/p2.jsonl" --checkpoint "$tmp/pck" --resume

# ---- a checkpoint names no file that dprun writes ------------------
# A forged checkpoint (checksum recomputed, as anyone can) naming a victim
# file, asking to keep none of it and to append its own lines: the victim
# stays as it was, with or without --metrics.
forge() { "$py" tests/ckpt_forge.py "$@"; }
dprun $M --steps 40 --checkpoint "$tmp/nm" >/dev/null 2>&1
printf 'echo safe\n' >"$tmp/victim"
forge "$tmp/nm/checkpoint.safetensors" "$tmp/forged" set metrics_path "$tmp/victim" \
    set metrics_bytes 0 set metrics_pending $'{"epoch": 0\necho pwned'
mkdir -p "$tmp/fk" && cp "$tmp/forged" "$tmp/fk/checkpoint.safetensors"
"$bin/dprun" $M --steps 40 --checkpoint "$tmp/fk" --resume >/dev/null 2>"$tmp/fk.err"
check "a forged metrics_path: the victim file is unchanged" [ "$(cat "$tmp/victim")" = "echo safe" ]
check "a forged metrics_path is refused: $(tail -n 1 "$tmp/fk.err")" \
    grep -q "corrupt checkpoint: unknown key 'metrics_path' in its metadata" "$tmp/fk.err"
# The same with this format's own keys: an empty prefix (whose SHA-256
# anyone knows) and the victim named as --metrics: its text is no metrics
# line, so nothing is dropped or written.
forge "$tmp/nm/checkpoint.safetensors" "$tmp/fk/checkpoint.safetensors" set metrics_bytes 0 \
    set metrics_sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
expect_fail "a forged empty prefix over a file that is not dprun's" \
    "--metrics $tmp/victim: line 1 is not a metrics line dprun writes" \
    "$bin/dprun" $M --steps 40 --metrics "$tmp/victim" --checkpoint "$tmp/fk" --resume
check "a forged empty prefix: the victim file is unchanged" [ "$(cat "$tmp/victim")" = "echo safe" ]

# Metadata values out of range, duplicated or unknown keys, old formats:
# refused, naming the checkpoint, the key and the value.
forged() { # name, want, edits...: the nm checkpoint forged, then resumed
    local name=$1 want=$2; shift 2
    mkdir -p "$tmp/fg" && forge "$tmp/nm/checkpoint.safetensors" "$tmp/fg/checkpoint.safetensors" "$@"
    expect_fail "$name" "$want" "$bin/dprun" $M --checkpoint "$tmp/fg" --resume
}
F="$tmp/fg/checkpoint.safetensors"
forged "step INT64_MAX" "$F: corrupt checkpoint: 'step' is '9223372036854775807' (not between 0 and" \
    set step 9223372036854775807
forged "a step past the run's last" "$F: 'step' is 300, past this run's last step 156 (2 epochs of 78 steps)" \
    set step 300
expect_fail "a step past --steps" "'step' is 40, past this run's last step 30 (--steps 30)" \
    "$bin/dprun" $M --checkpoint "$tmp/nm" --resume --steps 30
forged "empty flags" "$F: corrupt checkpoint: 'flags' is '' (empty)" set flags ""
forged "flags without one" "$F: corrupt checkpoint: 'flags' lacks --on-nan (this run has --on-nan stop)" \
    set flags "--lr=0.01;--lr-scaling=none;--warmup-epochs=0;--warmup-per-iteration=off;--momentum-correction=off;--accumulate=1"
forged "a NaN loss sum" "$F: corrupt checkpoint: 'epoch_loss_sum' is 'nan' (not finite)" set epoch_loss_sum nan
forged "an infinite lr" "$F: corrupt checkpoint: 'prev_lr' is 'inf' (not finite)" set prev_lr inf
forged "a duplicated key" "$F: corrupt checkpoint: key 'step' appears twice in its metadata" dup step 10
forged "an unknown key" "$F: corrupt checkpoint: unknown key 'evil' in its metadata" set evil 1
# Strings from the file reach the terminal escaped.
esc=$(printf '\033]0;x\a\033[31m')
forged "an escape in a key is shown escaped" "$F: corrupt checkpoint: unknown key '\\x1b]0;x\\x07\\x1b[31m' in its metadata" set "$esc" 1
forged "an escape in a value is shown escaped" "\\x1b]0;x\\x07\\x1b[31m" set data "$esc"
no_raw_escape() { case "$fail_err" in *$'\033'* | *$'\a'*) return 1 ;; esac; }
check "no raw escape byte reached stderr" no_raw_escape
forged "an old format" "$F: checkpoint format version 2, written by an older dprun; this dprun reads version 3" \
    set dpc_checkpoint 2

# ---- --steps stopped mid-epoch, the process died before the end ---
# The checkpoint at the last step is written before that epoch's end (its
# EPOCH line, metrics line, final evaluation). A resume with the same
# command owes all of it: the same metrics file and EPOCH line as the run
# that was not stopped. The death is simulated by putting the metrics file
# back as it was at the checkpoint (or after the epoch's end).
dprun $M --steps 40 --checkpoint "$tmp/d8" --metrics "$tmp/d8.jsonl" >"$tmp/d8.out" 2>/dev/null
cp "$tmp/d8.jsonl" "$tmp/d8.full"
check "--steps 40 writes the partial epoch's metrics line" [ "$(wc -l <"$tmp/d8.full")" -eq 1 ]
: >"$tmp/d8.jsonl"
dprun $M --steps 40 --checkpoint "$tmp/d8" --metrics "$tmp/d8.jsonl" --resume >"$tmp/d8r.out" 2>/dev/null
check "died after the --steps checkpoint: the resumed metrics equal the uninterrupted run's" \
    cmp -s <(strip "$tmp/d8.full") <(strip "$tmp/d8.jsonl")
check "died after the --steps checkpoint: the resumed run prints the epoch's line" \
    cmp -s <(grep '^EPOCH' "$tmp/d8.out" | cut -d'|' -f1-3) <(grep '^EPOCH' "$tmp/d8r.out" | cut -d'|' -f1-3)
# Three epochs, stopped at step 200 (epoch 2): the file holds the lines of
# epochs 0 and 1 at the checkpoint, epoch 2's too after its (partial) end;
# a file shorter than the checkpoint's is refused.
dprun $M --epochs 3 --steps 200 --checkpoint "$tmp/d9" --metrics "$tmp/d9.jsonl" >/dev/null 2>&1
cp "$tmp/d9.jsonl" "$tmp/d9.full"
check "--steps 200 of 3 epochs: three metrics lines" [ "$(wc -l <"$tmp/d9.full")" -eq 3 ]
head -n 2 "$tmp/d9.full" >"$tmp/d9.jsonl"
dprun $M --epochs 3 --steps 200 --checkpoint "$tmp/d9" --metrics "$tmp/d9.jsonl" --resume >/dev/null 2>&1
check "died with 2 metrics lines written: the resumed metrics equal the uninterrupted run's" \
    cmp -s <(strip "$tmp/d9.full") <(strip "$tmp/d9.jsonl")
head -n 1 "$tmp/d9.full" >"$tmp/d9.jsonl"
dprun $M --epochs 3 --steps 200 --checkpoint "$tmp/d9" --metrics "$tmp/d9.jsonl" --resume >/dev/null 2>"$tmp/d9.err"
check "a metrics file shorter than the checkpoint's is refused: $(tail -n 1 "$tmp/d9.err")" \
    grep -q 'checkpoint refused: .*d9.jsonl' "$tmp/d9.err"

# --checkpoint-every, and resuming a resumed run across an epoch boundary.
dprun $M --steps 30 --checkpoint "$tmp/ev" --checkpoint-every 7 >/dev/null 2>"$tmp/e1.err"
dprun $M --steps 100 --checkpoint "$tmp/ev" --checkpoint-every 7 --resume >/dev/null 2>"$tmp/e2.err"
dprun $M --checkpoint "$tmp/ev" --checkpoint-every 7 --resume --save-params "$tmp/ev.st" >/dev/null 2>"$tmp/e3.err"
check "--checkpoint-every 7: three runs give the uninterrupted losses" \
    cmp -s <(losses "$tmp/full.err") <(losses "$tmp/e1.err" "$tmp/e2.err" "$tmp/e3.err")
check "--checkpoint-every 7: three runs give the uninterrupted weights" cmp -s "$tmp/full.st" "$tmp/ev.st"
check "--checkpoint-every writes every 7 steps" grep -q "checkpoint at step 28 written" \
    <(DPC_DEBUG=1 "$bin/dprun" $M --steps 30 --checkpoint "$tmp/ev28" --checkpoint-every 7 2>&1)

# ---- --gpus 4, BatchNorm statistics per replica -------------------------------
C="$tmp/cnn.plan --data synthetic --seed 5 --gpus 4"
dprun $C --steps 24 --save-params "$tmp/c_full.st" >/dev/null 2>"$tmp/c_full.err"
dprun $C --steps 11 --checkpoint "$tmp/cck" >/dev/null 2>"$tmp/c_a.err"
dprun $C --steps 24 --checkpoint "$tmp/cck" --resume --save-params "$tmp/c_res.st" >/dev/null 2>"$tmp/c_b.err"
check "gpus 4: uninterrupted run trains 24 steps: $(tail -n 1 "$tmp/c_full.err")" \
    [ "$(losses "$tmp/c_full.err" | wc -l)" -eq 24 ]
check "gpus 4: resumed per-step losses equal the uninterrupted run's" \
    cmp -s <(losses "$tmp/c_full.err") <(losses "$tmp/c_a.err" "$tmp/c_b.err")
check "gpus 4: resumed final weights and BatchNorm statistics equal the uninterrupted run's" \
    cmp -s "$tmp/c_full.st" "$tmp/c_res.st"
expect_fail "other replica count refused" "written by a run of 4 replicas (--gpus); this run has 2" \
    "$bin/dprun" "$tmp/cnn.plan" --data synthetic --seed 5 --gpus 2 --checkpoint "$tmp/cck" --resume

# ---- lars and lamb: velocity, moments and the step number t in the checkpoint --
# A resume that lost the moments, or restarted t at 1 (lamb's bias
# correction), would train on differently from step 12.
for o in "lars(wd=0.0005)" "lamb(wd=0.01)"; do
    n=${o%%(*}
    sed "s/^\( *\)optimizer .*/\1optimizer $o/" models/cnn_small.net >"$tmp/$n.net"
    "$bin/dpc" "$tmp/$n.net" --batch 8 -o "$tmp/$n.plan" || bad "compile cnn_small with $o"
    O="$tmp/$n.plan --data synthetic --seed 5 --gpus 2"
    dprun $O --steps 24 --save-params "$tmp/${n}_full.st" >/dev/null 2>"$tmp/${n}_full.err"
    dprun $O --steps 11 --checkpoint "$tmp/${n}ck" >/dev/null 2>"$tmp/${n}_a.err"
    dprun $O --steps 24 --checkpoint "$tmp/${n}ck" --resume --save-params "$tmp/${n}_res.st" >/dev/null 2>"$tmp/${n}_b.err"
    check "$n: uninterrupted run trains 24 steps: $(tail -n 1 "$tmp/${n}_full.err")" \
        [ "$(losses "$tmp/${n}_full.err" | wc -l)" -eq 24 ]
    check "$n: the checkpoint holds the optimizer state" \
        grep -aq "\"unit0.conv0.weight.$([ "$n" = lars ] && echo momentum || echo adam_v)\"" "$tmp/${n}ck/checkpoint.safetensors"
    check "$n: resumed per-step losses equal the uninterrupted run's" \
        cmp -s <(losses "$tmp/${n}_full.err") <(losses "$tmp/${n}_a.err" "$tmp/${n}_b.err")
    check "$n: resumed final weights equal the uninterrupted run's" cmp -s "$tmp/${n}_full.st" "$tmp/${n}_res.st"
done
expect_fail "--momentum-correction with lamb refused" "lamb's moments carry none" \
    "$bin/dprun" "$tmp/lamb.plan" --data synthetic --steps 1 --momentum-correction
"$bin/dprun" "$tmp/lars.plan" --data synthetic --steps 2 --momentum-correction >/dev/null 2>&1 ||
    bad "--momentum-correction with lars (its velocity carries the lr) is accepted"

# ---- a real SIGTERM to a running dprun ------------------------------------------
# The run is long (4 epochs); the test waits for its third step, then
# sends SIGTERM: the step finishes, the checkpoint is written, exit 143.
# The checkpoint folder's name has a space and a quote: the printed resume
# command is pasted to sh as it is.
S="$M --epochs 4"
sck="$tmp/s ck'q"
dprun $S --save-params "$tmp/s_full.st" >/dev/null 2>"$tmp/s_full.err"
DPC_DEBUG=2 "$bin/dprun" $S --checkpoint "$sck" >/dev/null 2>"$tmp/s_a.err" &
pid=$!
for _ in $(seq 600); do grep -q 'debug: step 2 loss' "$tmp/s_a.err" && break; sleep 0.05; done
kill -TERM $pid
wait $pid; rc=$?
check "SIGTERM: exit 143 (got $rc)" [ $rc -eq 143 ]
check "SIGTERM: says where it stopped and how to resume: $(tail -n 1 "$tmp/s_a.err")" grep -Eq \
    "^dprun: interrupted \(SIGTERM\) at epoch [0-9]+ step [0-9]+ \([0-9]+ steps done\); checkpoint written to .*; resume with: $bin/dprun $tmp/mlp.plan .*--resume$" \
    "$tmp/s_a.err"
check "SIGTERM: the resume command quotes the folder" \
    grep -qF -- "--checkpoint '$tmp/s ck'\\''q' --resume" "$tmp/s_a.err"
cmd=$(tail -n 1 "$tmp/s_a.err" | sed 's/.*; resume with: //')
check "SIGTERM: the resume command names dprun as invoked ($bin/dprun): $cmd" \
    [ "${cmd%% *}" = "$bin/dprun" ]
# Pasted as printed, with no dprun on PATH: the path it names runs.
PATH=/usr/bin:/bin DPC_DEBUG=2 sh -c "$cmd --save-params '$tmp/s_res.st'" >/dev/null 2>"$tmp/s_b.err"
check "SIGTERM: the pasted resume command resumes: $(tail -n 1 "$tmp/s_b.err")" grep -q "steps restored" "$tmp/s_b.err"
check "SIGTERM + resume: per-step losses equal the uninterrupted run's" \
    cmp -s <(losses "$tmp/s_full.err") <(losses "$tmp/s_a.err" "$tmp/s_b.err")
check "SIGTERM + resume: final weights equal the uninterrupted run's" cmp -s "$tmp/s_full.st" "$tmp/s_res.st"
# SIGINT without --checkpoint: a clean stop that says nothing was saved.
DPC_DEBUG=2 "$bin/dprun" $S >/dev/null 2>"$tmp/i.err" &
pid=$!
for _ in $(seq 600); do grep -q 'debug: step 2 loss' "$tmp/i.err" && break; sleep 0.05; done
kill -INT $pid
wait $pid; rc=$?
check "SIGINT: exit 130 (got $rc)" [ $rc -eq 130 ]
check "SIGINT without --checkpoint: $(tail -n 1 "$tmp/i.err")" \
    grep -q "interrupted (SIGINT) at epoch .*; no checkpoint was written" "$tmp/i.err"
# Two signals at once (both pending while the process is stopped): the
# second ends the process at once, without the orderly stop.
DPC_DEBUG=2 "$bin/dprun" $S --checkpoint "$tmp/twice" >/dev/null 2>"$tmp/t.err" &
pid=$!
for _ in $(seq 600); do grep -q 'debug: step 2 loss' "$tmp/t.err" && break; sleep 0.05; done
kill -STOP $pid; kill -INT $pid; kill -TERM $pid; kill -CONT $pid
wait $pid; rc=$?
check "second signal: killed at once (exit $rc)" [ $rc -eq 130 -o $rc -eq 143 ]
check "second signal: no orderly stop" bash -c "! grep -q interrupted '$tmp/t.err'"

# ---- refusals ---------------------------------------------------------------------
cp "$tmp/step40.safetensors" "$tmp/good.safetensors"
mkdir -p "$tmp/bad"
refuse() { # name, want, file
    cp "$3" "$tmp/bad/checkpoint.safetensors"
    expect_fail "$1" "$2" "$bin/dprun" $M --checkpoint "$tmp/bad" --resume
}
size=$(stat -c %s "$tmp/good.safetensors")
flip() { # offset: a copy with that byte inverted
    cp "$tmp/good.safetensors" "$tmp/flipped"
    local b; b=$(od -An -tu1 -j "$1" -N1 "$tmp/flipped" | tr -d ' ')
    printf "$(printf '\\%03o' $((255 - b)))" | dd of="$tmp/flipped" bs=1 seek="$1" conv=notrunc status=none
}
flip $((size - 1000))
refuse "a flipped data byte" "corrupt checkpoint: checksum mismatch" "$tmp/flipped"
# A metadata value (the step count) changed in the header.
sed 's/"step":"40"/"step":"41"/' "$tmp/good.safetensors" >"$tmp/edited"
check "the header edit applies" bash -c "! cmp -s '$tmp/good.safetensors' '$tmp/edited'"
refuse "an edited step count" "corrupt checkpoint: checksum mismatch" "$tmp/edited"
flip 30
refuse "a flipped header byte" "checkpoint refused: $tmp/bad/checkpoint.safetensors" "$tmp/flipped"
head -c $((size / 2)) "$tmp/good.safetensors" >"$tmp/trunc"
refuse "a truncated checkpoint" "checkpoint refused: $tmp/bad/checkpoint.safetensors" "$tmp/trunc"
: >"$tmp/empty"
refuse "an empty checkpoint" "checkpoint refused: $tmp/bad/checkpoint.safetensors: not a safetensors file" "$tmp/empty"
refuse "a checkpoint of another model" "belongs to another plan (model cnn_small" "$tmp/cck/checkpoint.safetensors"
cp "$tmp/good.safetensors" "$tmp/bad/checkpoint.safetensors"
expect_fail "a checkpoint of another plan of the same model" "belongs to another plan (model mlp" \
    "$bin/dprun" "$tmp/mlp32.plan" --data synthetic --seed 3 --checkpoint "$tmp/bad" --resume
expect_fail "another seed" "was written with --seed 3; this run has --seed 4" \
    "$bin/dprun" "$tmp/mlp.plan" --data synthetic --seed 4 --checkpoint "$tmp/bad" --resume
# A parameter file is not a checkpoint.
"$bin/dprun" $M --steps 1 --save-params "$tmp/p.st" >/dev/null 2>&1
refuse "a parameter file" "not a dpc checkpoint: no 'dpc_checkpoint' in its metadata" "$tmp/p.st"
# Never silently start over an existing checkpoint.
cp "$tmp/good.safetensors" "$tmp/bad/checkpoint.safetensors"
expect_fail "fresh run over a checkpoint" "already holds a checkpoint; add --resume to continue it" \
    "$bin/dprun" $M --checkpoint "$tmp/bad"
check "the existing checkpoint is untouched" cmp -s "$tmp/good.safetensors" "$tmp/bad/checkpoint.safetensors"
expect_fail "--resume without a checkpoint" "--resume: no checkpoint in $tmp/none" \
    "$bin/dprun" $M --checkpoint "$tmp/none" --resume
expect_fail "--checkpoint DIR/: the file is named with one slash" \
    "--resume: no checkpoint in $tmp/none/ ($tmp/none/checkpoint.safetensors does not exist)" \
    "$bin/dprun" $M --checkpoint "$tmp/none/" --resume
expect_fail "--resume without --checkpoint" "--resume needs --checkpoint DIR" "$bin/dprun" $M --resume
expect_fail "--on-nan value" "--on-nan: 'maybe' is not one of stop, skip" "$bin/dprun" $M --on-nan maybe
expect_fail "--checkpoint-every 0" "--checkpoint-every: '0' is not an integer" \
    "$bin/dprun" $M --checkpoint "$tmp/x" --checkpoint-every 0
# A crash between the temporary file and the rename leaves checkpoint.safetensors.tmp:
# the checkpoint itself still loads.
cp "$tmp/good.safetensors" "$tmp/bad/checkpoint.safetensors"
head -c 100 "$tmp/good.safetensors" >"$tmp/bad/checkpoint.safetensors.tmp"
"$bin/dprun" $M --checkpoint "$tmp/bad" --resume --steps 40 >/dev/null 2>"$tmp/tmpfile.err"
check "a stale .tmp beside a good checkpoint: $(tail -n 1 "$tmp/tmpfile.err")" grep -q "40 steps restored" "$tmp/tmpfile.err"

# ---- divergence ---------------------------------------------------------------------
D="$tmp/div.plan --data synthetic --seed 3"
"$bin/dprun" $D --checkpoint "$tmp/dck" >/dev/null 2>"$tmp/d.err"; rc=$?
check "divergence: exit 1 (got $rc)" [ $rc -eq 1 ]
check "divergence: step, epoch and lr in the message: $(tail -n 1 "$tmp/d.err")" grep -Eq \
    "^dprun: error: (the loss is (nan|infinite)|a gradient is not finite .*) at step [0-9]+ \(epoch 1, step [0-9]+ of the epoch, lr 1e\+06\); stopping; the last good checkpoint stays in $tmp/dck" \
    "$tmp/d.err"
"$bin/dprun" $D --checkpoint "$tmp/dck" --resume --epochs 1 >"$tmp/d2.out" 2>"$tmp/d2.err"; rc=$?
check "divergence: the last good checkpoint (epoch 0's end) loads: $(tail -n 1 "$tmp/d2.err")" \
    [ $rc -eq 0 ] && grep -q "78 steps restored" "$tmp/d2.err" && grep -q '^Training time' "$tmp/d2.out"
# --on-nan skip: the bad steps are undone, so after the first one every
# later step sees the same state and is skipped too: the final weights are
# those before the first bad step.
"$bin/dprun" $D --on-nan skip --save-params "$tmp/skip.st" >"$tmp/skip.out" 2>"$tmp/skip.err"; rc=$?
check "--on-nan skip: exit 0 (got $rc)" [ $rc -eq 0 ]
first=$(grep -m1 -o 'at step [0-9]*' "$tmp/skip.err" | grep -o '[0-9]*$')
check "--on-nan skip: warns per skipped step: $(grep -m1 warning "$tmp/skip.err")" \
    [ -n "$first" ] && [ "$(grep -c 'skipped the step (--on-nan skip)' "$tmp/skip.err")" -eq $((156 - first)) ]
"$bin/dprun" $D --steps "${first:-0}" --save-params "$tmp/before.st" >/dev/null 2>&1
check "--on-nan skip: skipped steps leave the weights as before the first bad one" \
    cmp -s "$tmp/skip.st" "$tmp/before.st"

finish
