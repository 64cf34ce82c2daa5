#!/usr/bin/env bash
# run: tier=check
# dprun --sweep on the synthetic set, where the best lr is known: the mlp
# learns it at lr 0.01 (the plan's), barely at 0.0001, and diverges at 1000.
# The table must rank 0.01 first, 0.0001 second and list the diverged run
# last with its reason; --sweep-out gets the same table, every run has its
# log and metrics; sweep files work; bad specs give one clear error; --lr
# sets the base lr. Runs from the repository root; binaries in $DPC_BIN.
# Prints `N passed, N failed`.
. tests/lib.sh
fail_prefix='*dprun: error: '
# dprun_fail NAME WANT ARGS...: dprun ARGS refuses with `dprun: error: ...WANT`.
dprun_fail() { local name=$1 want=$2; shift 2; expect_fail "$name" "$want" "$bin/dprun" "$@"; }

plan=$tmp/mlp.plan
"$bin/dpc" models/mlp.net -o "$plan" || { echo "dpc failed"; echo "0 passed, 1 failed"; exit 1; }

# The spec lists the lrs out of order, so the ranking has to reorder them.
"$bin/dprun" "$plan" --data synthetic --epochs 1 --sweep 'lr=1000,0.0001,0.01' \
    --sweep-dir "$tmp/sw" --sweep-out "$tmp/table.md" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "the sweep exits 0 (exit $rc: $(tail -n 3 "$tmp/err"))" [ $rc = 0 ]
rows() { grep -E '^\| ([0-9]+|—) \|' "$1" | cut -d'|' -f2,3 | tr -d ' '; }
check "ranked: 0.01, then 0.0001, then the diverged 1000 ($(rows "$tmp/out" | tr '\n' ' '))" \
    [ "$(rows "$tmp/out" | tr '\n' ' ')" = "1|0.01 2|0.0001 —|1000 " ]
check "the diverged run names its reason" grep -qE '^\| — \| 1000 \|.*\| 1 \| (failed: the loss is nan|diverged)' "$tmp/out"
check "the header names the swept key and the results" \
    grep -q '^| rank | lr | train loss | train accuracy | test accuracy | training (s) | wall (s) | run | result |$' "$tmp/out"
check "--sweep-out holds the same table" cmp -s "$tmp/out" "$tmp/table.md"
for n in 1 2 3; do
    check "run-$n.log written" [ -s "$tmp/sw/run-$n.log" ]
done
check "run-2.log holds the run's log lines" grep -q '^Training time .* test accuracy' "$tmp/sw/run-2.log"
check "run-3.jsonl holds its metrics" grep -q '"train_accuracy"' "$tmp/sw/run-3.jsonl"
check "stderr reports each run" [ "$(grep -c '^dprun: sweep: run [0-9] of 3:' "$tmp/err")" = 3 ]

# Two keys from a file; the default folder is beside the plan.
printf '# lr and seed\nlr=0.01,0.0001\nseed=1,2  # two seeds\n' >"$tmp/spec"
"$bin/dprun" "$plan" --data synthetic --steps 20 --sweep "$tmp/spec" >"$tmp/out2" 2>"$tmp/err2"
check "a sweep file runs (exit $?)" [ -s "$tmp/out2" ]
check "it has 4 rows, the two lr 0.01 runs first" \
    [ "$(rows "$tmp/out2" | cut -d'|' -f2 | tr '\n' ' ')" = "0.01 0.01 0.0001 0.0001 " ]
check "the header names both keys" grep -q '^| rank | lr | seed | train loss' "$tmp/out2"
check "default --sweep-dir is PLAN-sweep" [ -s "$tmp/mlp-sweep/run-4.log" ]

# A sweep where every run fails exits 1 and still prints the table.
"$bin/dprun" "$plan" --data synthetic --epochs 1 --sweep 'lr=1000' --sweep-dir "$tmp/sw3" >"$tmp/out3" 2>"$tmp/err3"
check "all runs failed: exit 1" [ $? = 1 ]
check "all runs failed: the table is still printed" grep -q '^| — | 1000 |' "$tmp/out3"
check "all runs failed: one error line says so" grep -q 'dprun: error: the sweep has no successful run' "$tmp/err3"

dprun_fail "unknown key" "--sweep: 'rate' is not a sweep key" "$plan" --sweep 'rate=0.1'
dprun_fail "bad value" "--sweep: lr: 'abc' is not a positive number" "$plan" --sweep 'lr=0.1,abc'
dprun_fail "empty value" "--sweep: 'warmup=0,': an empty value" "$plan" --sweep 'warmup=0,'
dprun_fail "missing file" "--sweep: $tmp/none: cannot open" "$plan" --sweep "$tmp/none"
dprun_fail "--sweep-out alone" "--sweep-dir and --sweep-out need --sweep" "$plan" --sweep-out "$tmp/t.md"
dprun_fail "unwritable folder" "--sweep-dir $tmp/no/such: cannot create" "$plan" --sweep lr=0.1 \
    --sweep-dir "$tmp/no/such"
dprun_fail "--sweep with --metrics" "it takes no --metrics" "$plan" --sweep lr=0.1 --metrics "$tmp/m.jsonl"
dprun_fail "--lr not a number" "--lr: 'x' is not a positive number" "$plan" --lr x
dprun_fail "--lr zero" "--lr: '0' is not a positive number" "$plan" --lr 0
dprun_fail "--lr too large" "--lr: '1000001' is above the largest lr, 1e6" "$plan" --lr 1000001 --schedule
check "--lr 1e6 is allowed" [ "$("$bin/dprun" "$plan" --lr 1e6 --schedule 2>/dev/null | head -n 1)" = "epoch 0 lr 1000000.000" ]

# --lr scales the dict {0: 0.01, 1: 0.002} so that epoch 0 has 0.05.
check "--lr sets the base lr" [ "$("$bin/dprun" "$plan" --lr 0.05 --schedule 2>/dev/null | tr '\n' ' ')" = \
    "epoch 0 lr 0.050 epoch 1 lr 0.010 " ]

finish
