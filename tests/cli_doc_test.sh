#!/usr/bin/env bash
# run: tier=check san=no
# docs/cli.md keeps up with the code: every flag `dpc --help` and `dprun
# --help` print is an item of that program's part, every DPC_* variable
# the C sources and the scripts read is an item of its Environment part,
# and every flag and variable it lists still exists. The man pages made
# from it (scripts/man.sh) carry them all, and render where man is here.
# Runs from the repository root. Prints `N passed, N failed`.
. tests/lib.sh
doc=docs/cli.md

# help_flags PROG: the flags of PROG --help's option column: the first word
# of each "  -..." line, less its value ("--dump-ir[=PASS]", "-o PLAN"),
# and the word after a comma ("-h, --help").
help_flags() {
    "$bin/$1" --help | awk '/^  -/ {
        for (i = 1; i <= 2; i++) {
            w = $i; sub(/[[=].*/, "", w); more = sub(/,$/, "", w)
            if (w ~ /^-/) print w
            if (!more) break
        } }' | sort -u
}

# doc_tags HEADING: the tag of each "- " item (continuation lines joined),
# the text before its " — ", in the `## ` part of docs/cli.md whose
# heading starts with HEADING.
doc_tags() {
    awk -v head="## $1" '
        function out() { if (item != "") { at = index(item, " — "); if (at) print substr(item, 1, at) } item = "" }
        /^## / { out(); inside = index($0, head) == 1; next }
        !inside { next }
        /^- / { out(); item = $0; next }
        /^  / && item != "" { item = item " " $0; next }
        { out() }
        END { out() }' "$doc"
}
# doc_flags PROG: the flags docs/cli.md lists for PROG (`--flag ...` tags).
doc_flags() { doc_tags "$1 — " | grep -oE '`-{1,2}[a-z0-9][-a-z0-9]*' | tr -d '`' | sort -u; }

# at_least NAME MIN WORDS: fails loudly when an extraction found too few.
at_least() {
    local n; n=$(printf '%s\n' "$3" | grep -c .)
    if [ "$n" -ge "$2" ]; then ok; else bad "$1: found only $n (want at least $2): is the extraction broken? ($3)"; fi
}

# each_in NAME WANT HAVE: every line of WANT is a line of HAVE.
each_in() {
    local w missing=
    for w in $2; do grep -qxF -- "$w" <<<"$3" || missing+=" $w"; done
    if [ -z "$missing" ]; then ok; else bad "$1:$missing"; fi
}

for prog in dpc dprun; do
    help=$(help_flags $prog)
    listed=$(doc_flags $prog)
    at_least "$prog --help flags" 25 "$help"
    at_least "$doc's $prog flags" 25 "$listed"
    each_in "flags of $prog --help not listed in $doc's '## $prog —' part" "$help" "$listed"
    each_in "flags $doc lists for $prog that $prog --help does not know" "$listed" "$help"
done

# The variables: string literals "DPC_X" in the C sources (getenv, the
# runtime/env.c table, the CUDA library table); $DPC_X, ${DPC_X} and
# environ...DPC_X in the scripts users run (scripts/); $(DPC_X) in the
# Makefile.
c_vars=$(grep -rhoE '"DPC_[A-Z0-9_]+"' frontend ir format passes codegen runtime driver cli \
    --include='*.[chly]' | tr -d '"' | sort -u)
script_vars=$( (grep -rhoE '\$\{?DPC_[A-Z0-9_]+|environ[^A-Z]*DPC_[A-Z0-9_]+' scripts
    grep -hoE '\$[({]DPC_[A-Z0-9_]+' Makefile) | grep -oE 'DPC_[A-Z0-9_]+' | sort -u)
at_least "DPC_* variables in the C sources" 15 "$c_vars"
at_least "DPC_* variables in scripts/" 3 "$script_vars"
env_listed=$(doc_tags "Environment" | grep -oE '`DPC_[A-Z0-9_]+' | tr -d '`' | sort -u)
each_in "DPC_* variables the C sources read, not listed in $doc's Environment" "$c_vars" "$env_listed"
each_in "DPC_* variables scripts/ read, not listed in $doc's Environment" "$script_vars" "$env_listed"
stale=
for v in $env_listed; do
    grep -rqw --exclude=cli_doc_test.sh -- "$v" frontend ir format passes codegen runtime driver cli scripts tests Makefile || stale+=" $v"
done
[ -z "$stale" ] && ok || bad "variables $doc lists that nothing reads:$stale"

# The man pages: every flag of the program and every variable is a tag
# (the line after .TP) in the roff scripts/man.sh writes, a flag in bold
# with each '-' as '\-'; no other program's flag is.
for prog in dpc dprun; do
    if ! scripts/man.sh $prog "$doc" >"$tmp/$prog.1" 2>"$tmp/$prog.err" || [ -s "$tmp/$prog.err" ]; then
        bad "scripts/man.sh $prog: $(cat "$tmp/$prog.err")"
        continue
    fi
    awk 'prev == ".TP" { print } { prev = $0 }' "$tmp/$prog.1" >"$tmp/$prog.tags"
    missing=
    for w in $(help_flags $prog) $env_listed; do
        grep -qF -- "\\fB\\%${w//-/\\-}" "$tmp/$prog.tags" || missing+=" $w"
    done
    [ -z "$missing" ] && ok || bad "$prog.1 has no item for:$missing"
    check "$prog.1 NAME line" grep -q "^$prog \\\\- " "$tmp/$prog.1"
    if command -v man >/dev/null && command -v groff >/dev/null; then
        MANWIDTH=80 man -l "$tmp/$prog.1" >"$tmp/$prog.txt" 2>"$tmp/$prog.man.err"
        for want in "^NAME" "^ *$prog - " "^SYNOPSIS" "^OPTIONS" "^EXIT STATUS" "^ENVIRONMENT" "^EXAMPLES" "DPC_CACHE_DIR"; do
            grep -q -- "$want" "$tmp/$prog.txt" && ok || bad "man -l $prog.1: no '$want' ($(head -c 300 "$tmp/$prog.man.err"))"
        done
        [ -s "$tmp/$prog.man.err" ] && bad "man -l $prog.1: $(head -c 300 "$tmp/$prog.man.err")" || ok
    else
        skip "man -l $prog.1: no man or groff here"
    fi
done
grep -qxF '\fB\%\-\-shard\-optimizer\fR' "$tmp/dpc.tags" && bad "dpc.1 has dprun's --shard-optimizer" || ok
grep -qxF '\fB\%\-\-print\-pipeline\fR' "$tmp/dprun.tags" && bad "dprun.1 has dpc's --print-pipeline" || ok
expect_fail_line man-bad-prog "want dpc or dprun" scripts/man.sh dpcc

finish
