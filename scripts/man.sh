#!/bin/sh
# scripts/man.sh PROG [CLI.md] — PROG's man page (dpc or dprun) in roff on
# stdout, made from docs/cli.md, the one text of the flags: `## PROG — what`
# gives NAME, its code block SYNOPSIS, its paragraphs DESCRIPTION, its
# `###` parts OPTIONS (`### Exit status`: EXIT STATUS); every `##` part not
# about a program (Environment, Files, Examples) goes into both pages.
# The other program's part and the page's opening are left out.
#
# The Markdown it reads is the subset cli.md keeps to: `##`/`###` headings,
# paragraphs, `- ` items (two-space continuation lines; an item opening
# with `CODE` — TEXT is a tagged paragraph), four-space code blocks and
# `code` spans. `make install` runs it (build/man/PROG.1); no pandoc.
set -eu
prog=${1:?usage: scripts/man.sh dpc|dprun [docs/cli.md]}
here=$(dirname "$0")
md=${2:-$here/../docs/cli.md}
case $prog in dpc | dprun) ;; *) echo "scripts/man.sh: $prog: want dpc or dprun" >&2; exit 1 ;; esac
[ -r "$md" ] || { echo "scripts/man.sh: cannot read $md" >&2; exit 1; }
version=$(sed -n 's/^#define DPC_VERSION "\(.*\)"$/\1/p' "$here/../driver/version.h" 2>/dev/null || true)
case $prog in dpc) other=dprun ;; *) other=dpc ;; esac

awk -v prog="$prog" -v other="$other" -v version="${version:-unknown}" '
# Inline Markdown to roff: backslashes escaped, `code` in bold with real
# minus signs (so a flag copied from the page works), em dashes named.
function inl(s,    n, parts, i, p, out) {
    gsub(/\\/, "\\e", s)
    n = split(s, parts, "`")
    out = ""
    for (i = 1; i <= n; i++) {
        p = parts[i]
        if (i % 2 == 0) {
            gsub(/-/, "\\-", p)
            out = out "\\fB\\%" p "\\fR"
        } else {
            gsub(/—/, "\\(em", p)
            out = out p
        }
    }
    if (out ~ /^[.\047]/) out = "\\&" out
    return out
}
function code_line(s) {
    gsub(/\\/, "\\e", s)
    gsub(/-/, "\\-", s)
    if (s ~ /^[.\047]/) s = "\\&" s
    return s
}
# The paragraph or item gathered so far, out.
function flush(    tag, body, at) {
    if (buf == "") return
    if (kind == "item") {
        at = index(buf, " — ")
        if (buf ~ /^`/ && at > 0) {
            tag = substr(buf, 1, at - 1)
            body = substr(buf, at + length(" — "))
            print ".TP"
            print inl(tag)
            print inl(body)
        } else {
            print ".IP \\(bu 2"
            print inl(buf)
        }
    } else {
        if (part == "prog" && !described) { print ".SH DESCRIPTION"; described = 1 }
        print ".PP"
        print inl(buf)
    }
    buf = ""
    kind = ""
}
function end_code() {
    if (!incode) return
    print ".fi"
    print ".RE"
    incode = 0
    blanks = 0
}
BEGIN {
    part = "skip"
    print ".\\\" " prog "(1), made by scripts/man.sh from docs/cli.md: edit that file, not this one."
    print ".TH " toupper(prog) " 1 \"\" \"dpc " version "\" \"User Commands\""
}
/^## / {
    flush(); end_code()
    head = substr($0, 4)
    at = index(head, " — ")
    if (at > 0 && head ~ /^[a-z]+ — /) {
        name = substr(head, 1, at - 1)
        if (name == prog) {
            part = "prog"
            print ".SH NAME"
            print prog " \\- " inl(substr(head, at + length(" — ")))
            print ".SH SYNOPSIS"
        } else {
            part = "skip"
        }
    } else {
        part = "shared"
        print ".SH " toupper(inl(head))
    }
    next
}
part == "skip" { next }
/^### / {
    flush(); end_code()
    head = substr($0, 5)
    if (part == "prog" && head == "Exit status") {
        print ".SH \"EXIT STATUS\""
    } else {
        if (part == "prog" && !options) { print ".SH OPTIONS"; options = 1 }
        print ".SS " inl(head)
    }
    next
}
/^    / && kind != "item" {
    flush()
    if (!incode) { print ".PP"; print ".RS 4"; print ".nf"; incode = 1 }
    for (; blanks > 0; blanks--) print ""
    print code_line(substr($0, 5))
    next
}
/^[ \t]*$/ {
    if (incode) blanks++
    else flush()
    next
}
{ end_code() }
/^- / {
    flush()
    kind = "item"
    buf = substr($0, 3)
    next
}
/^  / && kind == "item" {
    line = $0
    sub(/^ +/, "", line)
    buf = buf " " line
    next
}
{
    if (kind == "") kind = "para"
    buf = buf == "" ? $0 : buf " " $0
}
END {
    flush(); end_code()
    print ".SH \"SEE ALSO\""
    print "\\fB" other "\\fR(1); docs/cli.md, README.md and docs/DESIGN.md (installed in share/doc/dpc)"
}
' "$md"
