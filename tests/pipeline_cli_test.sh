#!/usr/bin/env bash
# run: tier=check
# The pass pipeline through dpc (docs/DESIGN.md §5, §15): --list-passes,
# --print-pipeline fed back through --passes gives byte-identical plans,
# --disable-pass and its aliases equal the matching --passes spec, the flags
# give the options a spec leaves out, every refusal names the offending part,
# --print-ir-after writes the numbered files (changed skips an unchanged
# pass, planted links and inputs are not written through), --time-passes has
# a row per pass whose figures agree with --stats.
. tests/lib.sh
dpc=$bin/dpc
default='lower(sync_bn=0),autodiff,optimizer,partition(bucket_mb=25),precision(precision=fp32),conv(impl=library),fuse,memplan'

# ---- the registry ---------------------------------------------------------------
"$dpc" --list-passes >"$tmp/list" 2>&1 && ok || bad "--list-passes: $(cat "$tmp/list")"
for p in lower:train,eval autodiff:train optimizer:train partition:train precision:train,eval \
    fuse:train,eval memplan:train,eval; do
    grep -q "^${p%%:*} *${p##*:}: " "$tmp/list" && ok || bad "--list-passes lacks '${p%%:*} ${p##*:}'"
done
grep -q 'option bucket_mb (float, (0, 1048576\], default 25)' "$tmp/list" && ok || bad "--list-passes: bucket_mb"
grep -q 'option precision (enum, fp32|bf16|tf32, default fp32)' "$tmp/list" && ok || bad "--list-passes: precision"
grep -A1 '^optimizer ' "$tmp/list" | grep -q 'requires (earlier in the pipeline): autodiff' && ok ||
    bad "--list-passes: optimizer's prerequisite"
"$dpc" --help >"$tmp/help"
for p in lower autodiff optimizer partition precision fuse memplan --passes --disable-pass \
    --print-pipeline --list-passes --print-ir-after --dump-dir --time-passes; do
    grep -q -- "^  $p" "$tmp/help" && ok || bad "--help lacks $p"
done

# ---- --print-pipeline, and feeding it back ---------------------------------------
[ "$("$dpc" --print-pipeline)" = "$default" ] && ok || bad "--print-pipeline: $("$dpc" --print-pipeline)"
[ "$("$dpc" --print-pipeline --no-fuse --precision bf16 --bucket-mb 0.5)" = \
    'lower(sync_bn=0),autodiff,optimizer,partition(bucket_mb=0.5),precision(precision=bf16),conv(impl=library),memplan' ] && ok ||
    bad "--print-pipeline with flags: $("$dpc" --print-pipeline --no-fuse --precision bf16 --bucket-mb 0.5)"
[ "$("$dpc" --print-pipeline --passes='lower,precision(bf16)')" = 'lower(sync_bn=0),precision(precision=bf16)' ] &&
    ok || bad "--print-pipeline --passes"
n=0
for m in mlp cnn_small resnet18_cifar; do
    for flags in "" "--precision bf16" "--no-fuse" "--precision bf16 --no-fuse" "--no-memplan" \
        "--bucket-mb 0.0001"; do
        [ "$m" = resnet18_cifar ] && [ -n "$flags" ] && [ "$flags" != "--precision bf16" ] && continue
        n=$((n + 1))
        # shellcheck disable=SC2086 # the flags are words
        spec=$("$dpc" --print-pipeline $flags)
        "$dpc" "models/$m.net" --batch 4 $flags -o "$tmp/a$n.plan" &&
            "$dpc" "models/$m.net" --batch 4 --passes="$spec" -o "$tmp/b$n.plan" &&
            cmp -s "$tmp/a$n.plan" "$tmp/b$n.plan" && ok || bad "$m $flags: --passes='$spec' gives another plan"
    done
done

# ---- --disable-pass, its aliases, and the flags under --passes ------------------------
plan() { # NAME ARGS...: cnn_small at batch 4 into $tmp/NAME.plan
    local name=$1; shift
    "$dpc" models/cnn_small.net --batch 4 "$@" -o "$tmp/$name.plan" || bad "compile $name: $*"
}
same() { cmp -s "$tmp/$2.plan" "$tmp/$3.plan" && ok || bad "$1: plans $2 and $3 differ"; }
plan nofuse --no-fuse
plan dis-fuse --disable-pass=fuse
plan spec-nofuse --passes='lower,autodiff,optimizer,partition,precision,conv,memplan'
same "--no-fuse is --disable-pass=fuse" nofuse dis-fuse
same "--disable-pass=fuse is its --passes" dis-fuse spec-nofuse
plan nomem --no-memplan
plan dis-mem --disable-pass memplan
plan spec-nomem --passes 'lower,autodiff,optimizer,partition,precision,conv,fuse'
same "--no-memplan is --disable-pass=memplan" nomem dis-mem
same "--disable-pass=memplan is its --passes" dis-mem spec-nomem
plan both --no-fuse --no-memplan
plan dis-both --disable-pass=fuse,memplan
same "--disable-pass=fuse,memplan" both dis-both
plan fused
cmp -s "$tmp/fused.plan" "$tmp/nofuse.plan" && bad "--no-fuse changed nothing" || ok
plan dis-part --disable-pass=partition
plan spec-nopart --passes='lower,autodiff,optimizer,precision,conv,fuse,memplan'
same "--disable-pass=partition is its --passes" dis-part spec-nopart
# The flags give the options a spec leaves out; the spec's own values win.
plan tiny --bucket-mb 0.0001
plan tiny-flag --bucket-mb 0.0001 --passes='lower,autodiff,optimizer,partition,precision,conv,fuse,memplan'
plan tiny-spec --bucket-mb 5 --passes='lower,autodiff,optimizer,partition(bucket_mb=0.0001),precision,conv,fuse,memplan'
same "--bucket-mb under --passes" tiny tiny-flag
same "the spec's bucket_mb over --bucket-mb" tiny tiny-spec
cmp -s "$tmp/tiny.plan" "$tmp/fused.plan" && bad "--bucket-mb 0.0001 changed nothing" || ok
plan bf16 --precision bf16
plan bf16-spec --passes='lower,autodiff,optimizer,partition,precision(bf16),conv,fuse,memplan'
plan bf16-flag --precision bf16 --passes='lower,autodiff,optimizer,partition,precision,conv,fuse,memplan'
plan fp32-spec --precision bf16 --passes='lower,autodiff,optimizer,partition,precision(precision=fp32),conv,fuse,memplan'
same "precision(bf16) is --precision bf16" bf16 bf16-spec
same "--precision under --passes" bf16 bf16-flag
same "the spec's precision over --precision" fused fp32-spec

# ---- refusals: one line, exit 1, naming the part ------------------------------------
m=models/mlp.net
refuse() { expect_fail_line "$1" "$2" "$dpc" "$m" -o "$tmp/refused.plan" "${@:3}"; }
refuse unknown-pass "dpc: error: --passes: unknown pass 'frob'" --passes='lower,frob'
refuse unknown-option "unknown option 'size' in 'partition(size=3)'" --passes='lower,autodiff,optimizer,partition(size=3)'
refuse option-of-none "unknown option 'x' in 'autodiff(x=1)' (autodiff: no options)" --passes='lower,autodiff(x=1)'
refuse bad-range "'partition(bucket_mb=0)': bucket_mb takes float in (0, 1048576], got '0'" \
    --passes='lower,autodiff,optimizer,partition(bucket_mb=0)'
refuse bad-type "'partition(bucket_mb=big)': bucket_mb takes float" --passes='lower,autodiff,optimizer,partition(bucket_mb=big)'
refuse bad-enum "'precision(fp16)': precision takes fp32|bf16|tf32, got 'fp16'" --passes='lower,precision(fp16)'
refuse second-positional "'fp32' in 'precision(bf16,fp32)': only the first option may go without a name" \
    --passes='lower,precision(bf16,fp32)'
refuse option-twice "'precision(precision=bf16,precision=fp32)': option 'precision' given twice" \
    --passes='lower,precision(precision=bf16,precision=fp32)'
refuse empty-value "'precision(precision=)': an empty option value" --passes='lower,precision(precision=)'
refuse takes-none "'fuse(1)': pass 'fuse' takes no options" --passes='lower,fuse(1)'
refuse duplicate "pass 'fuse' appears twice" --passes='lower,fuse,fuse'
refuse needs-before "pass 'optimizer' needs 'autodiff' before it" --passes='lower,optimizer'
refuse needs-lower "pass 'memplan' needs 'lower' before it" --passes='memplan'
refuse order "pass 'optimizer' must come before 'fuse'" --passes='lower,autodiff,fuse,optimizer'
refuse memplan-last "pass 'fuse' must come before 'memplan'" --passes='lower,memplan,fuse'
refuse unbalanced-open "'partition(bucket_mb=25': unbalanced parentheses" --passes='lower,autodiff,optimizer,partition(bucket_mb=25'
refuse unbalanced-close "'fuse)': unbalanced parentheses" --passes='lower,fuse)'
refuse nested "'partition((1))': unbalanced parentheses" --passes='lower,autodiff,optimizer,partition((1))'
refuse empty-element "an empty element at offset 6 of 'lower,,fuse'" --passes='lower,,fuse'
refuse trailing-comma "an empty element at offset 6 of 'lower,'" --passes='lower,'
refuse empty-spec "--passes: an empty pipeline" --passes=
refuse missing-name "'(bf16)': a pass name is missing" --passes='lower,(bf16)'
refuse passes-and-disable "--passes names the whole pipeline: leave fuse out of it instead of --disable-pass" \
    --passes=lower --disable-pass=fuse
refuse passes-and-no-fuse "instead of --no-fuse" --passes=lower --no-fuse
refuse passes-and-no-memplan "instead of --no-memplan" --passes=lower --no-memplan
refuse disable-unknown "--disable-pass: unknown pass 'frob'" --disable-pass=fuse,frob
refuse disable-prerequisite "--disable-pass: pass 'autodiff' needs 'lower' before it" --disable-pass=lower
refuse dump-not-run "--dump-ir=fuse: 'fuse' is not in the pipeline" --no-fuse --dump-ir=fuse
refuse bucket-flag "--bucket-mb: bucket_mb takes float in (0, 1048576], got '0'" --bucket-mb 0
[ ! -e "$tmp/refused.plan" ] && ok || bad "a refused pipeline wrote a plan"

# ---- --print-ir-after -------------------------------------------------------------
c=models/cnn_small.net
files() { (cd "$1" && ls | tr '\n' ' '); }
"$dpc" "$c" --batch 2 --print-ir-after=all --dump-dir "$tmp/all" && ok || bad "--print-ir-after=all"
want="00-elaborate.eval.ir 00-elaborate.train.ir 01-lower.eval.ir 01-lower.train.ir 02-autodiff.train.ir "
want+="03-optimizer.train.ir 04-partition.train.ir 05-precision.eval.ir 05-precision.train.ir "
want+="06-conv.eval.ir 06-conv.train.ir 07-fuse.eval.ir 07-fuse.train.ir 08-memplan.eval.ir 08-memplan.train.ir "
[ "$(files "$tmp/all")" = "$want" ] && ok || bad "--print-ir-after=all wrote: $(files "$tmp/all")"
# Each file is the text form of one program (header, `# after: PASS`, the
# program, `# end`): a train file less its `# end`, then the eval program of
# the eval file of the same point, is --dump-ir=PASS's text.
join() { sed '/^# end$/d' "$1"; sed -n '/^# program eval$/,$p' "$2"; }
"$dpc" "$c" --batch 2 --dump-ir=optimizer >"$tmp/opt.ir"
join "$tmp/all/03-optimizer.train.ir" "$tmp/all/01-lower.eval.ir" | cmp -s "$tmp/opt.ir" - && ok ||
    bad "03-optimizer.train.ir + 01-lower.eval.ir is not --dump-ir=optimizer"
"$dpc" "$c" --batch 2 --dump-ir=elaborate >"$tmp/elab.ir"
join "$tmp/all/00-elaborate.train.ir" "$tmp/all/00-elaborate.eval.ir" | cmp -s "$tmp/elab.ir" - && ok ||
    bad "00-elaborate.{train,eval}.ir are not --dump-ir=elaborate"
grep -qx '# after: optimizer' "$tmp/all/03-optimizer.train.ir" && ok || bad "03-optimizer.train.ir has no '# after: optimizer'"
# --from-ir needs both programs: a per-pass file is refused, saying so.
expect_fail_line from-one-program "no eval program: --from-ir needs a whole dump of both programs" \
    "$dpc" --from-ir "$tmp/all/03-optimizer.train.ir" -o "$tmp/x.plan"
body() { sed -n '/^# program /,$p' "$1"; } # the program, without the header
cmp -s <(body "$tmp/all/04-partition.train.ir") <(body "$tmp/all/05-precision.train.ir") && ok ||
    bad "precision at fp32 changed the graph"
# changed: precision at fp32 and memplan leave the graph as it was
"$dpc" "$c" --batch 2 --print-ir-after=changed --dump-dir "$tmp/ch" && ok || bad "--print-ir-after=changed"
want="00-elaborate.eval.ir 00-elaborate.train.ir 01-lower.eval.ir 01-lower.train.ir 02-autodiff.train.ir "
want+="03-optimizer.train.ir 04-partition.train.ir 06-conv.eval.ir 06-conv.train.ir 07-fuse.eval.ir 07-fuse.train.ir "
[ "$(files "$tmp/ch")" = "$want" ] && ok || bad "--print-ir-after=changed wrote: $(files "$tmp/ch")"
"$dpc" "$c" --batch 2 --precision bf16 --print-ir-after=changed --dump-dir "$tmp/chbf" && ok || bad "changed, bf16"
[ -f "$tmp/chbf/05-precision.train.ir" ] && [ -f "$tmp/chbf/05-precision.eval.ir" ] && ok ||
    bad "changed: bf16 precision skipped: $(files "$tmp/chbf")"
"$dpc" "$c" --batch 2 --print-ir-after=optimizer --dump-dir "$tmp/one" && ok || bad "--print-ir-after=optimizer"
[ "$(files "$tmp/one")" = "03-optimizer.train.ir " ] && ok || bad "--print-ir-after=optimizer wrote: $(files "$tmp/one")"
"$dpc" "$c" --batch 2 --passes='lower,autodiff,optimizer,fuse' --print-ir-after=fuse --dump-dir "$tmp/f" && ok ||
    bad "--print-ir-after=fuse of a --passes pipeline"
[ "$(files "$tmp/f")" = "04-fuse.eval.ir 04-fuse.train.ir " ] && ok || bad "numbering follows --passes: $(files "$tmp/f")"
# A planted link is refused, not written through; the model is never overwritten.
mkdir "$tmp/trap" && printf 'precious' >"$tmp/victim" && ln -s "$tmp/victim" "$tmp/trap/03-optimizer.train.ir"
expect_fail_line planted-link "--dump-dir $tmp/trap/03-optimizer.train.ir: a symbolic link at a name dpc chose" \
    "$dpc" "$c" --print-ir-after=optimizer --dump-dir "$tmp/trap"
[ "$(cat "$tmp/victim")" = precious ] && ok || bad "--dump-dir wrote through a planted link"
mkdir "$tmp/in" && cp "$c" "$tmp/in/01-lower.train.ir" && cp "$c" "$tmp/keep.net"
expect_fail_line dump-is-model "--dump-dir $tmp/in/01-lower.train.ir is the model being compiled ($tmp/in/01-lower.train.ir); writing it would destroy it" \
    "$dpc" "$tmp/in/01-lower.train.ir" --print-ir-after=lower --dump-dir "$tmp/in"
cmp -s "$tmp/in/01-lower.train.ir" "$tmp/keep.net" && ok || bad "--dump-dir overwrote the model"
refuse after-needs-dir "--print-ir-after needs --dump-dir DIR" --print-ir-after=all
refuse dir-needs-after "--dump-dir needs --print-ir-after" --dump-dir "$tmp/x"
refuse after-unknown "unknown pass for --print-ir-after (known: elaborate lower" --print-ir-after=frob --dump-dir "$tmp/x"
refuse after-not-run "--print-ir-after=fuse: 'fuse' is not in the pipeline" --disable-pass=fuse --print-ir-after=fuse --dump-dir "$tmp/x"
: >"$tmp/afile"
refuse dir-parent-missing "--dump-dir $tmp/no/such: cannot create the directory" --print-ir-after=all --dump-dir "$tmp/no/such"
refuse dir-is-file "--dump-dir $tmp/afile: not a directory" --print-ir-after=all --dump-dir "$tmp/afile"

# ---- --time-passes -----------------------------------------------------------------
"$dpc" "$c" --time-passes --stats >"$tmp/time" 2>&1 && ok || bad "--time-passes: $(cat "$tmp/time")"
grep -q '^program pass  *ms  *nodes_before  *nodes_after  *kernels  *arena_bytes$' "$tmp/time" && ok ||
    bad "--time-passes has no header"
for p in train:lower train:autodiff train:optimizer train:partition train:precision train:conv train:fuse \
    train:memplan eval:lower eval:precision eval:conv eval:fuse eval:memplan; do
    [ "$(grep -c "^${p%%:*} *${p##*:} *[0-9.]* *[0-9]* *[0-9]* *[0-9-]* *[0-9-]*$" "$tmp/time")" = 1 ] && ok ||
        bad "--time-passes: no single row for $p"
done
[ "$(grep -c '^\(train\|eval\)  *[a-z]*  *[0-9.]* ' "$tmp/time")" = 13 ] && ok || bad "--time-passes: not 13 rows"
row() { grep "^$1 *$2 " "$tmp/time" | awk "{print \$$3}"; }
fused=$(grep '^train kernels per step' "$tmp/time" | sed 's/.*: fused \([0-9]*\).*/\1/')
unfused=$(grep '^train kernels per step' "$tmp/time" | sed 's/.*unfused \([0-9]*\).*/\1/')
arena=$(grep '^train arena bytes' "$tmp/time" | sed 's/.*planned \([0-9]*\).*/\1/')
[ "$(row train fuse 6)" = "$fused" ] && [ "$(row train memplan 6)" = "$fused" ] && ok ||
    bad "kernels after fuse $(row train fuse 6), --stats fused $fused"
[ "$(row train conv 6)" = "$unfused" ] && ok || bad "kernels before fuse $(row train conv 6), --stats unfused $unfused"
[ "$(row train memplan 7)" = "$arena" ] && ok || bad "arena after memplan $(row train memplan 7), --stats $arena"
[ "$(row train fuse 4)" = "$(row train fuse 5)" ] && [ "$(row train lower 4)" -lt "$(row train lower 5)" ] && ok ||
    bad "node counts before/after: fuse $(row train fuse 4)/$(row train fuse 5), lower $(row train lower 4)/$(row train lower 5)"

# ---- remat after layout ----------------------------------------------
# A recomputed chain keeps the channel-major layout its backward readers
# expect: the pipeline compiles, the copies are there, and two steps train
# the parameters bit for bit as without remat.
lay='lower,autodiff,optimizer,partition,precision,layout,fuse'
if "$dpc" models/cnn_small.net --passes="$lay,remat,memplan" -o "$tmp/remat.plan" 2>"$tmp/remat.err" &&
    "$dpc" models/cnn_small.net --passes="$lay,memplan" -o "$tmp/noremat.plan"; then ok; else
    bad "layout then remat: $(cat "$tmp/remat.err")"
fi
n_remat=$("$dpc" models/cnn_small.net --passes="$lay,remat,memplan" --dump-ir | grep -m1 '^# graph' | tr -dc 0-9)
n_plain=$("$dpc" models/cnn_small.net --passes="$lay,memplan" --dump-ir | grep -m1 '^# graph' | tr -dc 0-9)
[ "${n_remat:-0}" -gt "${n_plain:-0}" ] && ok || bad "remat after layout copied nothing ($n_remat vs $n_plain nodes)"
for p in remat noremat; do
    "$bin/dprun" "$tmp/$p.plan" --steps 2 --save-params "$tmp/$p.st" >/dev/null 2>&1 || bad "dprun $p.plan"
done
cmp -s "$tmp/remat.st" "$tmp/noremat.st" && ok || bad "remat after layout changes the trained parameters"
finish
