#!/usr/bin/env bash
# dpc --from-ir (docs/DESIGN.md §3.3, §15): a graph dumped after any pass,
# fed back through the passes after it, gives the full run's plan byte for
# byte; a bad IR file is refused at file:line:col with exit status 1.
. tests/lib.sh

passes="elaborate $("$bin/dpc" --help | sed -n '/^passes, in order/,$p' | awk 'NR > 2 { print $1 }' | tr '\n' ' ')"
case "$passes" in *" fuse "*) ok ;; *) bad "pass list from dpc --help: '$passes'" ;; esac
for m in cnn_small resnet18; do
    for flags in "" "--precision bf16 --no-fuse"; do
        # shellcheck disable=SC2086 # flags is a word list
        "$bin/dpc" "models/$m.net" $flags -o "$tmp/full.plan" || bad "$m $flags: full run"
        for p in $passes; do
            # shellcheck disable=SC2086
            if "$bin/dpc" "models/$m.net" $flags --dump-ir="$p" >"$tmp/$p.ir" &&
                "$bin/dpc" --from-ir "$tmp/$p.ir" $flags -o "$tmp/cont.plan" &&
                cmp -s "$tmp/full.plan" "$tmp/cont.plan"; then ok; else bad "$m $flags after $p: plan differs"; fi
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
finish
