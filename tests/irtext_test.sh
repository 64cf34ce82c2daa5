#!/usr/bin/env bash
# run: tier=check
# dpc --from-ir (docs/DESIGN.md §3.5, §5, §15): a graph dumped after any
# pass, fed back through the passes after it (the default pipeline less the
# passes done, or --passes naming them), gives the full run's plan byte for
# byte; a bad IR file is refused at file:line:col with exit status 1.
. tests/lib.sh

# The pipeline's passes, from dpc itself: --print-pipeline's names.
names() { sed 's/([^)]*)//g; s/,/ /g'; }
# The steps of the pipeline spec $1 after the one named $2 (elaborate: all),
# in --passes syntax; memplan's plan is not in a dump, so after memplan it
# is memplan again.
rest() { # spec pass
    if [ "$2" = memplan ]; then echo memplan; return; fi
    echo "$1" | awk -v after="$2" 'BEGIN { RS = ","; go = after == "elaborate" }
        { sub(/\n$/, ""); name = $0; sub(/\(.*/, "", name)
          if (go) out = out (out ? "," : "") $0; if (name == after) go = 1 }
        END { print out }'
}
[ "$(rest 'lower,autodiff,partition(bucket_mb=25),fuse' autodiff)" = 'partition(bucket_mb=25),fuse' ] && ok ||
    bad "rest: $(rest 'lower,autodiff,partition(bucket_mb=25),fuse' autodiff)"
for m in cnn_small resnet18; do
    for flags in "" "--precision bf16" "--precision bf16 --no-fuse"; do
        # shellcheck disable=SC2086 # flags is a word list
        spec=$("$bin/dpc" --print-pipeline $flags)
        passes="elaborate $(echo "$spec" | names)"
        case "$passes" in *" memplan"*) ok ;; *) bad "pass list from --print-pipeline: '$passes'" ;; esac
        # shellcheck disable=SC2086
        "$bin/dpc" "models/$m.net" $flags -o "$tmp/full.plan" || bad "$m $flags: full run"
        for p in $passes; do
            # Dumped after p, continued with the default pipeline (less the
            # passes done) and with --passes naming the passes after p: the
            # full run's plan byte for byte.
            # shellcheck disable=SC2086
            if "$bin/dpc" "models/$m.net" $flags --dump-ir="$p" >"$tmp/$p.ir" &&
                "$bin/dpc" --from-ir "$tmp/$p.ir" $flags -o "$tmp/cont.plan" &&
                cmp -s "$tmp/full.plan" "$tmp/cont.plan"; then ok; else bad "$m $flags after $p: plan differs"; fi
            rm -f "$tmp/cont.plan"
            if "$bin/dpc" --from-ir "$tmp/$p.ir" --passes="$(rest "$spec" "$p")" -o "$tmp/cont.plan" &&
                cmp -s "$tmp/full.plan" "$tmp/cont.plan"; then ok; else
                bad "$m $flags after $p, --passes=$(rest "$spec" "$p"): plan differs"
            fi
        done
    done
done
grep -qx '# after: optimizer' "$tmp/optimizer.ir" && ok || bad "the dump does not say which pass it is after"
# A final dump continues to itself: --from-ir of --dump-ir's text dumps the same text.
"$bin/dpc" models/cnn_small.net --dump-ir >"$tmp/final.ir"
"$bin/dpc" --from-ir "$tmp/final.ir" --dump-ir >"$tmp/again.ir"
cmp -s "$tmp/final.ir" "$tmp/again.ir" && ok || bad "--from-ir of the final dump dumps other text"
"$bin/dpc" --from-ir "$tmp/lower.ir" --dump-ir=partition | grep -q '= allreduce ' && ok ||
    bad "--from-ir then --dump-ir=PASS shows no all-reduce after partition"

# refusals: one line, exit 1
sed 's/= conv /= konv /' "$tmp/optimizer.ir" >"$tmp/bad.ir"
line=$(grep -n '= konv ' "$tmp/bad.ir" | head -n 1 | cut -d: -f1)
expect_fail_line bad-op "$tmp/bad.ir:$line:" "$bin/dpc" --from-ir "$tmp/bad.ir" -o "$tmp/x.plan"
expect_fail_line bad-op-says "error: unknown op 'konv'" "$bin/dpc" --from-ir "$tmp/bad.ir" -o "$tmp/x.plan"
[ ! -e "$tmp/x.plan" ] && ok || bad "a plan was written from a bad IR file"
head -c 3000 "$tmp/optimizer.ir" >"$tmp/cut.ir"
expect_fail_line truncated "error: unexpected end of file, expected" "$bin/dpc" --from-ir "$tmp/cut.ir" -o "$tmp/x.plan"
# Every prefix of a dump is refused (exit 1, one positioned line), never a crash.
size=$(wc -c <"$tmp/optimizer.ir")
cuts=0
for n in 0 1 2 5 20 60 100 200 300 400 500 1000 2000 5000 9000 $((size / 2)) $((size - 200)) $((size - 2)); do
    head -c "$n" "$tmp/optimizer.ir" >"$tmp/cut.ir"
    "$bin/dpc" --from-ir "$tmp/cut.ir" -o "$tmp/x.plan" 2>"$tmp/cut.err"
    rc=$?
    if [ $rc = 1 ] && [ "$(wc -l <"$tmp/cut.err")" = 1 ] &&
        grep -Eq "^$tmp/cut.ir(:[0-9]+:[0-9]+)?: error: " "$tmp/cut.err"; then
        cuts=$((cuts + 1))
    else
        bad "the first $n bytes: exit $rc, $(cat "$tmp/cut.err")"
    fi
done
[ $cuts = 18 ] && ok || bad "$cuts of 18 prefixes refused"
line=$(grep -n '^input' models/mlp.net | head -n 1 | cut -d: -f1)
expect_fail_line a-net-file "models/mlp.net:$line:1: error: unexpected 'input'" "$bin/dpc" --from-ir models/mlp.net -o "$tmp/x.plan"
awk '/^# program eval/ { exit } go; /^# program train/ { go = 1 }' "$tmp/optimizer.ir" >"$tmp/bare.ir"
expect_fail_line bare-graph "no '# model' line: --from-ir needs a whole dump" "$bin/dpc" --from-ir "$tmp/bare.ir" -o "$tmp/x.plan"
sed 's/^# after: optimizer$/# after: optimiser/' "$tmp/optimizer.ir" >"$tmp/badpass.ir"
expect_fail_line unknown-after "'# after: optimiser' names no pass" "$bin/dpc" --from-ir "$tmp/badpass.ir" -o "$tmp/x.plan"
expect_fail_line missing "$tmp/nope.ir: error:" "$bin/dpc" --from-ir "$tmp/nope.ir" -o "$tmp/x.plan"
expect_fail_line with-batch "--batch" "$bin/dpc" --from-ir "$tmp/lower.ir" --batch 4 -o "$tmp/x.plan"
expect_fail_line with-model "not both" "$bin/dpc" models/mlp.net --from-ir "$tmp/lower.ir" -o "$tmp/x.plan"
expect_fail_line dump-before "already after optimizer" "$bin/dpc" --from-ir "$tmp/optimizer.ir" --dump-ir=lower
expect_fail_line dump-elaborate "already after optimizer" "$bin/dpc" --from-ir "$tmp/optimizer.ir" --dump-ir=elaborate
# The pipeline of --from-ir: the default less the passes done; --passes may
# not name one of them.
[ "$("$bin/dpc" --from-ir "$tmp/optimizer.ir" --print-pipeline)" = \
    "partition(bucket_mb=25),precision(precision=fp32),conv(impl=library),fuse,memplan" ] && ok ||
    bad "--from-ir --print-pipeline: $("$bin/dpc" --from-ir "$tmp/optimizer.ir" --print-pipeline)"
[ "$("$bin/dpc" --from-ir "$tmp/memplan.ir" --print-pipeline)" = memplan ] && ok ||
    bad "after memplan, memplan is not left to run (the arena is not in a dump)"
expect_fail_line passes-done "--passes: pass 'optimizer' already ran on the graph (--from-ir $tmp/optimizer.ir is after optimizer" \
    "$bin/dpc" --from-ir "$tmp/optimizer.ir" --passes=optimizer,partition,memplan -o "$tmp/x.plan"
expect_fail_line passes-needs "--passes: pass 'fuse' needs 'lower'" \
    "$bin/dpc" --from-ir "$tmp/elaborate.ir" --passes=fuse -o "$tmp/x.plan"
[ ! -e "$tmp/x.plan" ] && ok || bad "a refused --from-ir pipeline wrote a plan"
# --print-ir-after from a dump: 00 is the graph as read (after optimizer).
"$bin/dpc" --from-ir "$tmp/optimizer.ir" --passes=fuse,memplan --print-ir-after=all --dump-dir "$tmp/pa" &&
    [ "$(cd "$tmp/pa" && ls | tr '\n' ' ')" = "00-optimizer.eval.ir 00-optimizer.train.ir 01-fuse.eval.ir 01-fuse.train.ir 02-memplan.eval.ir 02-memplan.train.ir " ] &&
    ok || bad "--from-ir --print-ir-after=all wrote: $(ls "$tmp/pa")"
finish
