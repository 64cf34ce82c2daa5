#!/usr/bin/env bash
# run: tier=test
# docs/language.md stays true to the frontend: every ```net block compiles,
# every ```net-error block fails with exactly the ```text line after it
# (compiled as bad.net), every keyword of the lexer and parser and every
# name the train section accepts (check_train.c, ir/schedule.c) appears in a
# heading or `code` span, and every operator of elab.c's table has a
# heading `### \`op(args)\`` spelling its arguments and their defaults as
# the table holds them, with its gradient described. The lists are read
# from the sources, so a new operator or keyword fails here until the doc
# has it. Runs from the repository root.
. tests/lib.sh
doc=docs/language.md
dpc=$(cd "$bin" && pwd)/dpc

# ---- (a) the fenced blocks ----------------------------------------------------
# Each fence's body to $tmp/blocks/NNN.KIND; a ```text block right after a
# net-error block becomes NNN.expected. Other kinds (text, sh,
# net-fragment) are not run; an unknown net-* kind is an error.
mkdir -p "$tmp/blocks"
awk -v dir="$tmp/blocks" '
    function fail(msg) { print "language_doc_test: " FILENAME ":" NR ": " msg > "/dev/stderr"; bad = 1 }
    !inside && /^```/ {
        kind = substr($0, 4); inside = 1; n++
        if (kind == "text" && last == "net-error") { out = sprintf("%s/%03d.expected", dir, n - 1) }
        else if (kind == "net" || kind == "net-error") { out = sprintf("%s/%03d.%s", dir, n, kind) }
        else if (kind ~ /^net/ && kind != "net-fragment") { fail("unknown fence kind " kind); out = "" }
        else { out = "" }
        if (out != "") printf "" > out
        next
    }
    inside && /^```$/ { inside = 0; if (out != "") close(out); last = kind; next }
    inside && out != "" { print > out }
    END { if (inside) fail("unterminated fence"); exit bad }
' "$doc" || bad "fences of $doc"

nnet=0 nerr=0
for f in "$tmp"/blocks/*.net; do
    [ -e "$f" ] || continue
    nnet=$((nnet + 1))
    if "$dpc" "$f" -o "$tmp/ok.plan" >"$tmp/out" 2>&1 && [ -s "$tmp/ok.plan" ]; then
        ok
    else
        bad "net block $(basename "$f") does not compile: $(head -n 3 "$tmp/out")"
        sed 's/^/    /' "$f" | head -n 5
    fi
    rm -f "$tmp/ok.plan"
done
mkdir -p "$tmp/e"
for f in "$tmp"/blocks/*.net-error; do
    [ -e "$f" ] || continue
    nerr=$((nerr + 1))
    exp=${f%.net-error}.expected
    if [ ! -s "$exp" ]; then
        bad "net-error block $(basename "$f") has no \`\`\`text block with its message after it"
        continue
    fi
    cp "$f" "$tmp/e/bad.net"
    (cd "$tmp/e" && "$dpc" bad.net -o bad.plan) >/dev/null 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 1 ]; then
        bad "net-error block $(basename "$f"): exit $rc, want 1: $(cat "$tmp/err")"
    elif ! cmp -s "$exp" "$tmp/err"; then
        bad "net-error block $(basename "$f"): the doc shows '$(cat "$exp")', dpc says '$(cat "$tmp/err")'"
    elif [ -e "$tmp/e/bad.plan" ]; then
        bad "net-error block $(basename "$f"): a plan was written"
    else
        ok
    fi
    rm -f "$tmp/e/bad.plan"
done
# a broken extraction must not pass as "nothing to check"
[ "$nnet" -ge 2 ] && ok || bad "only $nnet \`\`\`net blocks found in $doc"
[ "$nerr" -ge 8 ] && ok || bad "only $nerr \`\`\`net-error blocks found in $doc"

# ---- (b) every keyword and train-section name is documented -----------------
# The doc's headings and `code` spans, outside fenced blocks, one per line.
awk '/^```/ { f = !f; next } !f' "$doc" >"$tmp/prose"
{
    grep '^#' "$tmp/prose"
    grep -o '`[^`]*`' "$tmp/prose"
} >"$tmp/spans"

# one_line FILE: the file as one line (clang-format may break a table entry
# anywhere), for the patterns below.
one_line() { tr '\n' ' ' <"$1"; }

# Keywords: the lexer's table ({"input", TK_INPUT, 0}) and the parser's
# token aliases (%token ... INPUT "input"); the two must agree.
one_line frontend/lexer.l | grep -o '{"[a-z_0-9]*", *TK_[A-Z_0-9]*' | sed 's/{"\([^"]*\)".*/\1/' |
    sort -u >"$tmp/kw_lexer"
grep '^%token' frontend/parser.y | grep -o '[A-Z_0-9]* "[a-z_0-9]*"' | grep -o '"[a-z_0-9]*"' |
    tr -d '"' | grep -v -x -e identifier -e integer -e number | sort -u >"$tmp/kw_parser"
n=$(wc -l <"$tmp/kw_lexer")
[ "$n" -ge 20 ] && ok || bad "only $n keywords read from frontend/lexer.l: the extraction broke"
cmp -s "$tmp/kw_lexer" "$tmp/kw_parser" && ok ||
    bad "lexer.l and parser.y keywords differ: $(comm -3 "$tmp/kw_lexer" "$tmp/kw_parser" | tr -s ' \t\n' ' ')"

# Train-section names: the keyword arguments check_train.c accepts (its *_kws
# arrays and the optimizers' kws table), the names it compares an item's
# identifier or an exclude entry with, and the optimizer, lr scaling and
# dataset names of ir/schedule.c.
{
    one_line frontend/check_train.c | grep -o 'kws\[\]\(\[[0-9]*\]\)\? = {[^;]*;' | grep -o '"[a-z_0-9]*"'
    one_line frontend/check_train.c | grep -o 'strcmp(\(it->ident\|n->key\), "[a-z_0-9]*")' | grep -o '"[a-z_0-9]*"'
    one_line ir/schedule.c |
        grep -o '\(ir_optimizer_names\|ir_lr_scaling_names\)\[[^]]*\] = {[^}]*}\|datasets\[\] = {[^}]*}' |
        grep -o '"[a-z_0-9]*"'
} | tr -d '"' | sort -u >"$tmp/train_names"
n=$(wc -l <"$tmp/train_names")
[ "$n" -ge 20 ] && ok || bad "only $n train-section names read from check_train.c and schedule.c: the extraction broke"
for want in momentum nesterov exclude reference_batch xavier cosine sgd adamw sqrt cifar10 bn; do
    grep -q -x "$want" "$tmp/train_names" || bad "the train-section extraction lacks '$want'"
done

missing=''
while read -r w; do
    # a whole token: not part of a name, a flag (--warmup-per-iteration) or a path
    grep -q -E -- "(^|[^A-Za-z0-9_.-])$w([^A-Za-z0-9_.-]|\$)" "$tmp/spans" || missing="$missing $w"
done < <(sort -u "$tmp/kw_lexer" "$tmp/train_names")
[ -z "$missing" ] && ok || bad "$doc lacks (in a heading or \`code\` span):$missing"

# ---- operators: heading, signature with defaults, gradient ------------------
# elab.c's table: {"conv", FE_OP_CONV, 7, {TENSOR("x"), INT("channels", 1),
# INT_OPT("s", 1, 1), ...}}. The signature the doc must show: required
# arguments by name, optional ones name=default (booleans true/false,
# SAME_AS_K as k), a run of optional tensors as "...".
one_line frontend/elab.c | grep -o '{"[a-z_0-9]*", *FE_OP_[A-Z_0-9]*, *[0-9]*, *{[^}]*}}' >"$tmp/ops"
nops=$(wc -l <"$tmp/ops")
[ "$nops" -ge 12 ] && ok || bad "only $nops operators read from frontend/elab.c: the extraction broke"
while read -r entry; do
    op=$(printf '%s' "$entry" | sed 's/^{"\([^"]*\)".*/\1/')
    nargs=$(printf '%s' "$entry" | sed 's/^{"[^"]*", *FE_OP_[A-Z_0-9]*, *\([0-9]*\),.*/\1/')
    sig='' got=0 dots=0
    while read -r spec; do
        [ -n "$spec" ] || continue
        got=$((got + 1))
        macro=${spec%%(*}
        name=$(printf '%s' "$spec" | sed 's/^[A-Z_]*("\([^"]*\)".*/\1/')
        rest=$(printf '%s' "$spec" | sed 's/^[A-Z_]*("[^"]*"//; s/)$//; s/^, *//')
        def=${rest%%,*}
        case $macro in
        TENSOR | INT | FLOAT) arg=$name ;;
        TENSOR_OPT) [ "$dots" = 1 ] && continue; dots=1; arg='...' ;;
        INT_OPT | FLOAT_OPT) arg="$name=${def/SAME_AS_K/k}" ;;
        WORD_OPT) def=${def//\"/}; arg="$name=${def%%|*}" ;; # the set's first word is the default
        BOOL_OPT) case $def in 1) arg="$name=true" ;; 0) arg="$name=false" ;; *) arg="$name=?$def" ;; esac ;;
        *) bad "operator $op: unknown argument spec '$spec' in elab.c (teach this test)"; arg='?' ;;
        esac
        sig="$sig${sig:+, }$arg"
    done < <(printf '%s' "$entry" | grep -o '[A-Z_]*("[a-z_0-9]*"[^)]*)')
    if [ "$got" != "$nargs" ]; then
        bad "operator $op: read $got argument specs from elab.c, the table says $nargs"
        continue
    fi
    heading="### \`$op($sig)\`"
    if ! grep -q -x -F -- "$heading" "$doc"; then
        bad "$doc lacks the heading '$heading' (elab.c's signature and defaults)"
        continue
    fi
    # the section under it, up to the next heading, says what autodiff does
    awk -v h="$heading" '$0 == h { on = 1; next } on && /^#/ { exit } on' "$doc" | grep -q 'Gradient' &&
        ok || bad "$doc: the section of '$op' does not describe its gradient"
done <"$tmp/ops"

finish
