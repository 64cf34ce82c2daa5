#!/usr/bin/env bash
# run: tier=test
# Signals and a closed stdout (runtime/train/stop.c, cli/dprun.c): each stops
# a run in order, says so, and never exits 0 —
#   - stdout closed (`dprun ... | head -1`): no death by SIGPIPE; the run
#     stops after the step (its checkpoint written), exit 141; --info 141
#     quietly;
#   - SIGHUP: as SIGINT/SIGTERM (checkpoint_test.sh), exit 129;
#   - SIGINT during set-up: exit 130 after a message, no file written;
#   - SIGINT or a closed stdout during the final evaluation: stopped there,
#     the resume evaluates and writes the owed metrics line (test_stop too);
#   - a sweep stops with its interrupted run;
# and dprun ends by the signal itself (so a calling script stops too).
# The signals land at known points: after a given stderr line, from a
# compiler wrapper during set-up, or at the first write to a pipe whose
# reader is gone. Runs from the repository root; binaries in $DPC_BIN.
. tests/lib.sh

# run_sig OUT ERR WHEN SIG CMD...: runs CMD (stdout to OUT, or to a pipe
# whose reader is closed when OUT is "closed"; stderr to ERR), writes its pid
# to $tmp/pid, sends SIG (SIGHUP, ...) once a line of ERR holds WHEN (none when WHEN is
# empty) and prints how it ended: "exit N" or "signal NAME" (120 s at most).
run_sig() {
    "$py" - "$@" <<'EOF'
import os, signal, subprocess, sys, time
out, err, when, sig, cmd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
if out == "closed":
    r, w = os.pipe()
    os.close(r)
    stdout = w
else:
    stdout = open(out, "w")
p = subprocess.Popen(cmd, stdout=stdout, stderr=open(err, "w"))
open(os.environ["tmp"] + "/pid", "w").write(str(p.pid))
deadline = time.time() + 120
sent = not when
while p.poll() is None and time.time() < deadline:
    if not sent and when in open(err).read():
        p.send_signal(getattr(signal, sig))
        sent = True
    time.sleep(0.02)
if p.poll() is None:
    p.kill()
    print("timeout")
else:
    rc = p.returncode
    print("exit %d" % rc if rc >= 0 else "signal " + signal.Signals(-rc).name)
EOF
}
export tmp
dprun() { DPC_DEBUG=2 "$bin/dprun" "$@"; }

"$bin/dpc" models/mlp.net -o "$tmp/mlp.plan" 2>/dev/null || bad "compile mlp"
M="$tmp/mlp.plan --data synthetic --seed 3"
last() { tail -n 1 "$1"; }

# ---- stdout closed ----------------------------------------------------------
# The first EPOCH line meets a pipe without a reader: the run stops after
# epoch 0's checkpoint instead of dying by SIGPIPE, and resumes from it.
got=$(run_sig closed "$tmp/p.err" "" "" "$bin/dprun" $M --checkpoint "$tmp/pck")
check "stdout closed: exit 141, not killed by SIGPIPE (got $got)" [ "$got" = "exit 141" ]
check "stdout closed: says so and how to resume: $(last "$tmp/p.err")" grep -q \
    "^dprun: interrupted (stdout closed) at epoch 1 step 0 (78 steps done); checkpoint written to $tmp/pck; resume with: $bin/dprun .*--resume$" \
    "$tmp/p.err"
"$bin/dprun" $M --checkpoint "$tmp/pck" --resume >"$tmp/p2.out" 2>"$tmp/p2.err"
check "stdout closed: the checkpoint resumes: $(grep resumed "$tmp/p2.err")" grep -q "78 steps restored" "$tmp/p2.err"
got=$(run_sig closed "$tmp/i.err" "" "" "$bin/dprun" "$tmp/mlp.plan" --info)
check "--info to a closed stdout: exit 141 quietly (got $got: $(cat "$tmp/i.err"))" \
    [ "$got" = "exit 141" -a ! -s "$tmp/i.err" ]
# During the final evaluation (--steps stops mid-epoch: the EPOCH line comes
# after the checkpoint, then the evaluation): stopped there, 141; the resume
# evaluates and writes the metrics line the run owed.
got=$(run_sig closed "$tmp/f.err" "" "" "$bin/dprun" $M --steps 40 --final-eval both --checkpoint "$tmp/fck" --metrics "$tmp/f.jsonl")
check "stdout closed before the final evaluation: exit 141 (got $got)" [ "$got" = "exit 141" ]
check "stdout closed: stopped during the final evaluation: $(last "$tmp/f.err")" grep -q \
    "^dprun: interrupted (stdout closed) during the final evaluation (40 steps done); checkpoint written to $tmp/fck" \
    "$tmp/f.err"
check "stdout closed: the owed metrics line is not written" [ ! -s "$tmp/f.jsonl" ]
"$bin/dprun" $M --steps 40 --final-eval both --checkpoint "$tmp/fck" --metrics "$tmp/f.jsonl" --resume >/dev/null 2>&1
check "the resume writes the owed metrics line" grep -q '^{"epoch": 0, .*"steps": 40, .*"train_accuracy"' "$tmp/f.jsonl"

# ---- SIGHUP -------------------------------------------------------------------
got=$(run_sig "$tmp/h.out" "$tmp/h.err" "debug: step 2 loss" SIGHUP env DPC_DEBUG=2 "$bin/dprun" $M --epochs 4 --checkpoint "$tmp/hck")
check "SIGHUP: ends by SIGHUP after its cleanup (got $got)" [ "$got" = "signal SIGHUP" ]
check "SIGHUP: a checkpoint and a message: $(last "$tmp/h.err")" grep -q \
    "^dprun: interrupted (SIGHUP) at epoch [0-9]* step [0-9]* ([0-9]* steps done); checkpoint written to $tmp/hck" \
    "$tmp/h.err"
check "SIGHUP: the checkpoint exists" [ -f "$tmp/hck/checkpoint.safetensors" ]

# ---- SIGINT during set-up ------------------------------------------------------
# A compiler wrapper sends SIGINT to dprun while the kernels compile (a fresh
# cache, so they do), then compiles: the set-up finishes, nothing is written.
cat >"$tmp/cc" <<EOF
#!/bin/sh
while [ ! -s "$tmp/pid" ]; do sleep 0.01; done
[ -e "$tmp/sent" ] || { : >"$tmp/sent"; kill -INT \$(cat "$tmp/pid"); }
exec ${CC:-cc} "\$@"
EOF
chmod +x "$tmp/cc"
fresh_cache() { rm -rf "$tmp/cache" "$tmp/sent" "$tmp/pid"; mkdir -m 700 "$tmp/cache"; }
fresh_cache
got=$(CC="$tmp/cc" DPC_CACHE_DIR="$tmp/cache" run_sig "$tmp/s.out" "$tmp/s.err" "" "" \
    "$bin/dprun" $M --checkpoint "$tmp/sck" --metrics "$tmp/s.jsonl")
check "SIGINT during set-up: the wrapper sent it" [ -e "$tmp/sent" ]
check "SIGINT during set-up: ends by SIGINT (got $got)" [ "$got" = "signal SIGINT" ]
check "SIGINT during set-up: a message: $(last "$tmp/s.err")" grep -q \
    "^dprun: interrupted (SIGINT) before training started; no file was written$" "$tmp/s.err"
check "SIGINT during set-up: no metrics file, no checkpoint" \
    [ ! -e "$tmp/s.jsonl" -a ! -e "$tmp/sck/checkpoint.safetensors" -a ! -s "$tmp/s.out" ]
# The same during a resume: the checkpoint and the metrics file stay as they were.
"$bin/dprun" $M --steps 40 --checkpoint "$tmp/rck" --metrics "$tmp/r.jsonl" >/dev/null 2>&1
cp "$tmp/rck/checkpoint.safetensors" "$tmp/r.ck" && cp "$tmp/r.jsonl" "$tmp/r.keep"
fresh_cache
got=$(CC="$tmp/cc" DPC_CACHE_DIR="$tmp/cache" run_sig "$tmp/r.out" "$tmp/r.err" "" "" \
    "$bin/dprun" $M --checkpoint "$tmp/rck" --metrics "$tmp/r.jsonl" --resume)
check "SIGINT during a resume's set-up: ends by SIGINT (got $got)" [ "$got" = "signal SIGINT" ]
check "SIGINT during a resume's set-up: the checkpoint unchanged" cmp -s "$tmp/r.ck" "$tmp/rck/checkpoint.safetensors"
check "SIGINT during a resume's set-up: the metrics file unchanged" cmp -s "$tmp/r.keep" "$tmp/r.jsonl"
# A sweep stops with its interrupted run, without a table.
fresh_cache
got=$(CC="$tmp/cc" DPC_CACHE_DIR="$tmp/cache" run_sig "$tmp/w.out" "$tmp/w.err" "" "" \
    "$bin/dprun" $M --sweep "seed=1,2" --sweep-dir "$tmp/sw")
check "a sweep: ends by SIGINT (got $got)" [ "$got" = "signal SIGINT" ]
check "a sweep stops with its run: $(last "$tmp/w.err")" grep -q \
    "^dprun: sweep: stopped during run 1 of 2; its logs so far are in $tmp/sw$" "$tmp/w.err"
check "a sweep: no table" [ ! -s "$tmp/w.out" ]

finish
