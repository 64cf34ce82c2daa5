#!/usr/bin/env bash
# run: tier=test san=no
# scripts/article.sh end to end on the synthetic set with a small model and
# a few steps: three runs, a table with three rows beside the article's
# figures and the right global batches and lr schedules, wall and modelled
# H200 times, an epoch-by-epoch table with the article's losses, an SVG that
# parses as XML with three curves per panel; a seed study with its mean and
# spread; a failed run is reported in the table; bad options give one
# `article: error:` line. Runs from the
# repository root; binaries in $DPC_BIN. Prints `N passed, N failed`.
. tests/lib.sh
fail_prefix='article: error: '
# article_fail NAME WANT ARGS...: scripts/article.sh ARGS refuses with `article: error: ...WANT`.
article_fail() { local name=$1 want=$2; shift 2; expect_fail "$name" "$want" env DPC_BIN="$bin" scripts/article.sh "$@"; }

out=$tmp/art
DPC_BIN=$bin scripts/article.sh --data synthetic --model models/cnn_small.net --epochs 1 --steps 2 \
    --replicas 4 --warmup 1 --out "$out" >"$tmp/log" 2>&1
rc=$?
check "article.sh exits 0 (exit $rc: $(tail -n 5 "$tmp/log"))" [ $rc = 0 ]
for f in run1.log run2.log run3.log run1.jsonl run2.jsonl run3.jsonl run1.time article.svg article.md cost.txt; do
    check "$f written" [ -s "$out/$f" ]
done
check "it says where the results went" grep -q "article: table $out/article.md" "$tmp/log"
check "the logs have no progress lines" [ "$(cat "$out"/run[123].log | grep -c 'progress:')" = 0 ]
check "run1.time: one part, START END EXIT 0" grep -qE '^[0-9]+ [0-9]+ 0$' "$out/run1.time"
check "run1.machine: where it ran, in the table" grep -q "^- run 1: 20[0-9-]*T.*cores.*load average" "$out/article.md"

# The table: three rows (batch 32 on one replica, 4 x 32 twice), the lr
# schedules from --schedule, the article's figures, the shortened note.
$py - "$out/article.md" <<'EOF' || bad "article.md content"
import sys
text = open(sys.argv[1]).read()
rows = [l for l in text.splitlines() if l.startswith("| ") and l.split("|")[1].strip() in "123"]
rows = [[c.strip() for c in l.strip("|").split("|")] for l in rows]
assert [r[0] for r in rows] == ["1", "2", "3"], rows
assert [r[1] for r in rows] == ["32", "128", "128"], [r[1] for r in rows]
assert rows[0][2].startswith("0.05"), rows[0][2]
assert rows[1][2].startswith("0.05;"), rows[1][2]        # no scaling, no warmup
assert rows[2][2].startswith("0.05 → 0.2 warmup"), rows[2][2]  # x4, 1-epoch warmup
for r in rows:
    assert len(r) == 14, r
    epoch_s, total_s, wall_s, img_s, train_acc, test_acc, h200_s = (float(r[k]) for k in (3, 4, 5, 6, 7, 8, 9))
    assert epoch_s > 0 and total_s > 0 and 0 <= train_acc <= 1 and 0 <= test_acc <= 1, r
    assert wall_s >= 0 and img_s > 0 and h200_s > 0, r
    assert r[10].startswith("batch ") and r[13] in ("0.8475", "0.7829", "0.8416"), r
# Runs 2 and 3 are 4 replicas taking turns on one modelled GPU, as many steps as run 1
# here (--steps 2), each of the same batch: more modelled time than run 1's.
assert float(rows[1][9]) > float(rows[0][9]), [r[9] for r in rows]
for fig in ("0.8475", "0.7829", "0.8416", "999.79", "977.40", "916.39", "0.9261"):
    assert fig in text, fig
assert "**Shortened**" in text and "1 epoch" in text, text
# Epoch by epoch: epoch 0's losses beside the article's 2.3, 3.5 and 4.1.
head = next(l for l in text.splitlines() if l.startswith("| epoch |"))
assert head.split("|")[1:4] == [" epoch ", " run 1 loss ", " article run 1 loss "], head
row0 = next(l for l in text.splitlines() if l.startswith("| 0 |"))
cells = [c.strip() for c in row0.strip("|").split("|")]
assert len(cells) == 10 and cells[2] == "2.3" and cells[5] == "3.5" and cells[8] == "4.1", cells
assert float(cells[1]) > 0 and 0 <= float(cells[3]) <= 1, cells
EOF

# The plot: XML, three run curves in each of the two panels, named by run.
$py - "$out/article.svg" <<'EOF' || bad "article.svg content"
import sys, xml.dom.minidom
doc = xml.dom.minidom.parse(sys.argv[1])
panels = [g for g in doc.getElementsByTagName("g") if g.getAttribute("class") == "panel"]
assert len(panels) == 2, len(panels)
for p in panels:
    runs = [e.getAttribute("data-run") for e in p.getElementsByTagName("path") if e.getAttribute("class") == "run"]
    assert runs == ["run1: batch 32", "run2: batch 128, lr unscaled",
                    "run3: batch 128, linear scaling + 1-epoch warmup"], runs
EOF

# --report-only redoes the table and plot from the logs, training nothing.
cp "$out/article.md" "$tmp/first.md"
rm "$out/article.md" "$out/article.svg"
DPC_BIN=$bin scripts/article.sh --report-only --out "$out" --data synthetic --model models/cnn_small.net \
    --epochs 1 --steps 2 --warmup 1 --replicas 4 >"$tmp/log2" 2>&1
rc=$?
check "--report-only exits 0 (exit $rc: $(tail -n 3 "$tmp/log2"))" [ $rc = 0 ]
check "--report-only trains nothing" [ "$(grep -c 'dprun ' "$tmp/log2")" = 0 ]
check "--report-only gives the same table" cmp -s "$out/article.md" "$tmp/first.md"
check "--report-only redraws the plot" [ -s "$out/article.svg" ]

# A run that failed is named in the table, with its reason, and the table
# script exits 1; the other rows stay.
fake=$tmp/fake
mkdir -p "$fake"
cp "$out"/run1.* "$out"/run3.* "$fake"/
cp "$out/run2.schedule" "$fake"/
printf 'EPOCH  0: train loss  2.3 | batch  128 | lr 0.050 | Time per epoch 1.00 seconds\n%s\n' \
    "dprun: error: the loss is nan at step 3 (epoch 0, step 3 of the epoch, lr 10); stopping" >"$fake/run2.log"
$py scripts/article_table.py --out "$fake/article.md" "$fake" >/dev/null 2>&1
check "a failed run makes the table script exit 1" [ $? = 1 ]
check "the failed run's reason is in its row" grep -q "^| 2 | 128 | .*failed: the loss is nan at step 3" "$fake/article.md"
check "the other runs keep their rows" grep -q "^| 3 | 128 | .* | 0\.[0-9]* |" "$fake/article.md"

# Run 4 (LARS, from the model with its optimizer line replaced): its own
# plan, a row marked LARS with no article figures beside it.
out4=$tmp/art4
DPC_BIN=$bin scripts/article.sh --data synthetic --model models/cnn_small.net --epochs 1 --steps 2 \
    --replicas 4 --warmup 1 --runs 4 --out "$out4" >"$tmp/log4" 2>&1
rc=$?
check "article.sh --runs 4 exits 0 (exit $rc: $(tail -n 5 "$tmp/log4"))" [ $rc = 0 ]
check "run 4's model has the LARS optimizer line" grep -q '^ *optimizer lars(momentum=0.9, wd=0.0001, eta=0.001)$' "$out4/model_lars.net"
check "--runs 4 runs run 4 only" test -s "$out4/run4.log" -a ! -e "$out4/run1.log"
check "run 4's row: batch 128, LARS, not in the article" grep -q '^| 4 | 128 | LARS; 0.05 → 0.2 warmup.* | not in the article | — | — | — |$' "$out4/article.md"

# --resume: a run stopped by a signal (its checkpoint written) continues
# from it when the command is given again, appending to its log and metrics.
outr=$tmp/artr
DPC_DEBUG=2 DPC_BIN=$bin scripts/article.sh --data synthetic --model models/cnn_small.net --epochs 1 \
    --runs 1 --resume --out "$outr" >"$tmp/logr1" 2>&1 &
script=$!
for _ in $(seq 600); do grep -q 'debug: step 2 loss' "$outr/run1.log" 2>/dev/null && break; sleep 0.05; done
for p in /proc/[0-9]*; do # the dprun of that run (no procps needed)
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q "^$bin/dprun $outr/model.plan " && kill -INT "${p#/proc/}"
done
wait $script
check "--resume, first part: stopped with a checkpoint and no final line" \
    test -e "$outr/run1.ckpt" -a "$(grep -c '^Training time' "$outr/run1.log")" = 0
DPC_BIN=$bin scripts/article.sh --data synthetic --model models/cnn_small.net --epochs 1 \
    --runs 1 --resume --out "$outr" >"$tmp/logr2" 2>&1
rc=$?
check "--resume, second part exits 0 (exit $rc: $(tail -n 3 "$tmp/logr2"))" [ $rc = 0 ]
check "--resume, second part resumed" grep -q -- '--resume' "$tmp/logr2"
check "--resume: one finished log" [ "$(grep -c '^Training time' "$outr/run1.log")" = 1 ]
check "--resume: the table has run 1's accuracy" grep -q '^| 1 | 32 | .* | 0\.[0-9]* | [0-9.]* | batch 128, 1 GPU' "$outr/article.md"
check "--resume: the wall time is two parts" grep -q '^| 1 | 32 | [^|]* | [^|]* | [^|]* | [0-9]* (2 parts) |' "$outr/article.md"
DPC_BIN=$bin scripts/article.sh --data synthetic --model models/cnn_small.net --epochs 1 \
    --runs 1 --resume --out "$outr" >"$tmp/logr3" 2>&1
check "--resume on a finished run trains nothing" grep -q 'run1: finished already' "$tmp/logr3"
# The seed study: run 1 under seeds 1 and 2, their mean and spread; seed 1 is the same
# run as --seed 1 (identical per-step losses), and the seeds differ from each other.
outs=$tmp/arts
DPC_DEBUG=2 DPC_BIN=$bin scripts/article.sh --data synthetic --model models/cnn_small.net --epochs 1 \
    --steps 3 --runs 1 --seeds 1,2 --out "$outs" >"$tmp/logs" 2>&1
rc=$?
check "article.sh --seeds exits 0 (exit $rc: $(tail -n 3 "$tmp/logs"))" [ $rc = 0 ]
check "--seeds: one log per seed" test -s "$outs/run1-s1.log" -a -s "$outs/run1-s2.log" -a ! -e "$outs/run1.log"
check "--seeds: the seed passes to dprun" grep -q -- '--seed 2' "$tmp/logs"
DPC_DEBUG=2 DPC_BIN=$bin scripts/article.sh --data synthetic --model models/cnn_small.net --epochs 1 \
    --steps 3 --runs 1 --seed 1 --out "$tmp/arts1" >/dev/null 2>&1
losses() { grep -o 'debug: step [0-9]* loss [^ ]*' "$1"; }
check "--seed 1: per-step losses printed" [ "$(losses "$tmp/arts1/run1.log" | wc -l)" = 3 ]
check "--seed 1 runs what --seeds 1 ran" [ "$(losses "$tmp/arts1/run1.log")" = "$(losses "$outs/run1-s1.log")" ]
check "seeds 1 and 2 train differently" [ "$(losses "$outs/run1-s1.log")" != "$(losses "$outs/run1-s2.log")" ]
$py - "$outs/article.md" <<'EOF' || bad "the seed study's table"
import sys, statistics
text = open(sys.argv[1]).read()
assert "the seed study" in text.splitlines()[0], text
spread = [l for l in text.splitlines() if l.startswith("| 1 | 1, 2 |")]
assert len(spread) == 1, text
cells = [c.strip() for c in spread[0].strip("|").split("|")]
accs = [float(v) for v in cells[2].split(", ")]
assert len(accs) == 2, cells
mean, rest = cells[3].split(" ± ")
# the table prints 4 decimals: 5e-5 of rounding each
assert abs(float(mean) - statistics.mean(accs)) < 1e-4, cells
assert abs(float(rest.split()[0]) - statistics.stdev(accs)) < 1e-4, cells
assert any(l.startswith("| 1 (seed 2) | 32 |") for l in text.splitlines()), text
assert "run 1 test accuracy (mean ± sd)" in text, text
EOF
check "--seeds: one run has no differences between runs" lacks "Differences between runs" "$outs/article.md"
$py - <<'EOF' && ok || bad "article_table.difference: points and standard errors"
import sys
sys.path.insert(0, "scripts")
from article_table import difference
assert difference([0.5, 0.6], [0.4, 0.5]) == "+10.0 points (1.4 standard errors)", difference([0.5, 0.6], [0.4, 0.5])
assert difference([0.4, 0.5], [0.5, 0.6, 0.7]).startswith("-15.0 points ("), difference([0.4, 0.5], [0.5, 0.6, 0.7])
assert difference([0.5], [0.4, 0.5]) == "—"
assert difference([0.5, 0.5], [0.4, 0.4]) == "+10.0 points (no spread)"
EOF
check "--seeds: the plot has a curve per seed" [ "$(grep -o 'data-run="run1-s[12]' "$outs/article.svg" | sort -u | wc -l)" = 2 ]
# A part stopped with no end on record (`START - -`: its session ended) counts its
# epochs and, per epoch, the accuracy passes' time of the parts that ended: here
# two parts of one epoch each, the ended one 50 s long, so 100 s in all.
est=$tmp/est
mkdir -p "$est"
cp "$out/run1.jsonl" "$out/run1.schedule" "$out/cost.txt" "$est/"
cat "$out/run1.log" "$out/run1.log" >"$est/run1.log"
printf '100 - -\n200 250 0\n' >"$est/run1.time"
$py scripts/article_table.py --out "$est/article.md" "$est" >"$tmp/est.log" 2>&1
check "a part with no end: estimated from its epochs ($(grep '^| 1 |' "$est/article.md"))" \
    grep -q '^| 1 | .* | 100 (2 parts, 1 estimated) |' "$est/article.md"
article_fail "--seed and --seeds" "give --seed S (one seed) or --seeds LIST" --seed 1 --seeds 1,2 --data synthetic
article_fail "bad --seeds" "--seeds: '1,x' is not a list of seeds" --seeds 1,x
article_fail "bad --seed" "--seed: '-1' is not a non-negative integer" --seed -1

article_fail "bad --runs" "--runs: '5' is not a list of runs 1-4" --runs 5
article_fail "--resume without --out" "--resume needs --out DIR" --resume --data synthetic

article_fail "bad --epochs" "--epochs: 'x' is not a positive integer" --epochs x
article_fail "missing --data folder" "--data: '$tmp/none' is not a folder" --data "$tmp/none"
article_fail "missing model" "--model: 'nope.net' not found" --data synthetic --model nope.net
article_fail "--report-only without a folder" "--report-only needs --out DIR" --report-only --out "$tmp/none"
article_fail "unknown option" "unknown option '--frobnicate'" --frobnicate

finish
