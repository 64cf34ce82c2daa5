#!/usr/bin/env bash
# run: tier=test san=no
# scripts/scaling.sh on the synthetic set with a small model, three global
# batches and a few steps: one run per batch and method (plain, scaled,
# LARS, LAMB) with the right replica count, plan and lr flags, a table with
# one row per batch, an SVG (XML) of test accuracy against batch with four
# curves of three points, left to right in batch order; a diverged run is
# shown as diverged; --resume keeps finished runs and reruns a stopped
# one; bad options give one `scaling: error:` line.
# scripts/plot --vs-batch input errors too.
# Runs from the repository root; binaries in $DPC_BIN. Prints `N passed, N failed`.
. tests/lib.sh
fail_prefix='*error: '

out=$tmp/sc
DPC_BIN=$bin scripts/scaling.sh --model models/cnn_small.net --data synthetic --batches "32 64 128" \
    --epochs 2 --steps 3 --warmup 1 --out "$out" >"$tmp/log" 2>&1
rc=$?
check "scaling.sh exits 0 (exit $rc: $(tail -n 5 "$tmp/log"))" [ $rc = 0 ]
for b in 32 64 128; do
    for m in plain scaled lars lamb; do
        check "$m-$b.log has the final line" grep -q '^Training time .* test accuracy' "$out/$m-$b.log"
    done
    check "batch $b: global batch $b in the log" grep -q "| batch  *$b |" "$out/scaled-$b.log"
done
check "batch 128 runs 4 replicas" grep -q "4 replicas x batch 32" "$out/plain-128.log"
check "scaled runs scale the lr" grep -q -- "--gpus 4 --lr-scaling linear --warmup-epochs 1" "$tmp/log"
check "plain runs do not" grep -q -- "--gpus 4 --lr-scaling none --warmup-epochs 0" "$tmp/log"
check "LARS runs its own plan, scaled" grep -q -- "model_lars.plan --gpus 4 --lr-scaling linear --warmup-epochs 1" "$tmp/log"
check "LAMB runs its own plan, sqrt-scaled from its lr" grep -q -- "model_lamb.plan --gpus 4 --lr-scaling sqrt --warmup-epochs 1 --lr 0.01" "$tmp/log"
check "the LARS model has the LARS optimizer line" grep -q '^ *optimizer lars(momentum=0.9, wd=0.0001, eta=0.001)$' "$out/model_lars.net"

$py - "$out/scaling.md" <<'EOF' || bad "scaling.md content"
import sys
text = open(sys.argv[1]).read()
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in text.splitlines()
        if l.startswith("| ") and l.split("|")[1].strip().isdigit()]
assert [r[:2] for r in rows] == [["32", "1"], ["64", "2"], ["128", "4"]], rows
for r in rows:
    assert len(r) == 6 and all(0 <= float(r[k]) <= 1 for k in (2, 3, 4, 5)), r
assert "LARS: `optimizer lars(" in text and "LAMB: `optimizer lamb(" in text and "synthetic" in text, text
EOF

$py - "$out/scaling.svg" <<'EOF' || bad "scaling.svg content"
import sys, xml.dom.minidom
doc = xml.dom.minidom.parse(sys.argv[1])
paths = [p for p in doc.getElementsByTagName("path") if p.getAttribute("class") == "run"]
assert [p.getAttribute("data-run") for p in paths] == ["lr unscaled, no warmup", "linear scaling + 1-epoch warmup",
        "LARS, linear scaling + 1-epoch warmup", "LAMB (lr 0.01), sqrt scaling + 1-epoch warmup"], \
    [p.getAttribute("data-run") for p in paths]
for p in paths:
    xs = [float(t[1:].split(",")[0]) for t in p.getAttribute("d").split()]
    assert len(xs) == 3 and xs == sorted(xs), xs
    # log2 axis: 32 -> 64 and 64 -> 128 are the same distance
    assert abs((xs[1] - xs[0]) - (xs[2] - xs[1])) < 0.2, xs
ticks = [t.firstChild.data for t in doc.getElementsByTagName("text") if t.getAttribute("class") == "xtick"]
assert ticks == ["32", "64", "128"], ticks
notes = [t.firstChild.data for t in doc.getElementsByTagName("text") if t.getAttribute("class") == "note"]
assert len(notes) == 1 and "synthetic data" in notes[0], notes
EOF

# --resume keeps what finished and trains again what did not: a stopped
# run (its log cut short) is rerun, the other eleven are kept as they are.
head -n 3 "$out/plain-64.log" >"$tmp/cut" && mv "$tmp/cut" "$out/plain-64.log"
cp "$out/scaling.md" "$tmp/first.md"
DPC_BIN=$bin scripts/scaling.sh --model models/cnn_small.net --data synthetic --batches "32 64 128" \
    --epochs 2 --steps 3 --warmup 1 --out "$out" --resume >"$tmp/resume.log" 2>&1
rc=$?
check "scaling.sh --resume exits 0 (exit $rc: $(tail -n 3 "$tmp/resume.log"))" [ $rc = 0 ]
check "eleven runs kept" [ "$(grep -c ': kept: ' "$tmp/resume.log")" = 11 ]
check "the stopped run ran again" grep -q 'batch 64, lr unscaled, no warmup: .*dprun' "$tmp/resume.log"
check "the stopped run has its final line" grep -q '^Training time .* test accuracy' "$out/plain-64.log"
check "the resumed table is the first one" cmp -s "$out/scaling.md" "$tmp/first.md"
expect_fail "resume with other settings" "--resume: the settings differ" env DPC_BIN="$bin" scripts/scaling.sh \
    --model models/cnn_small.net --data synthetic --batches "32" --epochs 3 --out "$out" --resume
expect_fail "resume without a folder" "--resume needs --out DIR" env DPC_BIN="$bin" scripts/scaling.sh --resume

# plot --vs-batch on its own: same-name files form one curve; files without
# a batch or a test accuracy are refused with one line.
printf '{"epoch": 0, "train_loss": 1, "batch": 256, "test_accuracy": 0.5}\n' >"$tmp/a.jsonl"
printf '{"epoch": 0, "train_loss": 1, "batch": 1024, "test_accuracy": 0.4}\n' >"$tmp/b.jsonl"
printf '{"epoch": 0, "train_loss": 1, "test_accuracy": 0.4}\n' >"$tmp/nobatch.jsonl"
printf '{"epoch": 0, "train_loss": 1, "batch": 64}\n' >"$tmp/noacc.jsonl"
scripts/plot --vs-batch -o "$tmp/v.svg" "x=$tmp/a.jsonl" "x=$tmp/b.jsonl" "y=$tmp/b.jsonl" 2>"$tmp/v.err"
check "plot --vs-batch (exit $?: $(cat "$tmp/v.err"))" [ -s "$tmp/v.svg" ]
check "two curves" [ "$(grep -c 'class="run"' "$tmp/v.svg")" = 2 ]
expect_fail "no batch" "nobatch.jsonl: no positive 'batch'" scripts/plot --vs-batch "$tmp/nobatch.jsonl"
expect_fail "no accuracy" "noacc.jsonl: no 'test_accuracy'" scripts/plot --vs-batch "$tmp/noacc.jsonl"

# A run that diverges is in the table as diverged, with the place it stopped.
sed 's/^\( *\)lr {.*/\1lr {0: 1e5}/' models/cnn_small.net >"$tmp/hot.net"
DPC_BIN=$bin scripts/scaling.sh --model "$tmp/hot.net" --data synthetic --batches "32" --methods plain \
    --epochs 1 --steps 20 --out "$tmp/div" >"$tmp/div.log" 2>&1
check "a diverged run is shown as diverged" grep -q '^| 32 | 1 | diverged: the loss is .* at step' "$tmp/div/scaling.md"
expect_fail "unknown method" "--methods: unknown method 'adam'" env DPC_BIN="$bin" scripts/scaling.sh --methods "plain adam"
expect_fail "batch not a multiple" "--batches: 48 is not a multiple of the per-device batch 32" \
    env DPC_BIN="$bin" scripts/scaling.sh --model models/cnn_small.net --data synthetic --batches "32 48" --out "$tmp/x"
expect_fail "bad batch" "--batches: 'abc' is not a positive integer" \
    env DPC_BIN="$bin" scripts/scaling.sh --model models/cnn_small.net --data synthetic --batches "abc" --out "$tmp/x"
expect_fail "unknown option" "unknown option '--frob'" env DPC_BIN="$bin" scripts/scaling.sh --frob

finish
