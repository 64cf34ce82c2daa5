#!/usr/bin/env bash
# run: tier=check san=no
# The include graph keeps to the layering docs/DESIGN.md §2 draws: every
# `#include "..."` of the sources (base frontend ir format passes codegen
# runtime driver cli; not tests/) is an edge from its folder to the
# included file's folder (inside runtime/, its room: runtime/exec ->
# runtime/device), and each edge must be one the table in DESIGN.md (the
# fenced ```layering block, the only copy of the table) allows. Besides:
# a header named internal.h is included only from its own folder or room,
# and another room of runtime/ is included only through its public header
# runtime/ROOM/ROOM.h (or a header the table names). A violation prints as
# FILE:LINE: FROM -> TO (INCLUDE): why. The checker also runs on a small
# tree of deliberate violations, so its failure path runs every time.
# Runs from the repository root. Prints `N passed, N failed`.
. tests/lib.sh
doc=docs/DESIGN.md
src_dirs="base frontend ir format passes codegen runtime driver cli"

# layering_rules DOC: the table's rows, "FROM ALLOWED...", comments and
# blank lines left out.
layering_rules() {
    awk '/^```layering/ { on = 1; next } on && /^```/ { exit }
         on && !/^[[:space:]]*(#|$)/ { sub(/[[:space:]]*#.*/, ""); print }' "$1"
}

# layering_check ROOT DOC: the violations of ROOT's sources against DOC's
# table, one line each; exit 1 when there is any.
layering_check() {
    local root=$1 rules
    rules=$(layering_rules "$2")
    [ -n "$rules" ] || { echo "$2: no \`\`\`layering block"; return 1; }
    local d dirs=
    for d in $src_dirs; do [ -d "$root/$d" ] && dirs+=" $d"; done
    (cd "$root" && grep -rnHE --include='*.[chly]' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $dirs) |
        RULES=$rules awk '
        # the folder of a path, or inside runtime/ its room
        function module(path,    n, p) {
            n = split(path, p, "/")
            return p[1] == "runtime" && n >= 3 ? "runtime/" p[2] : p[1]
        }
        BEGIN {
            nr = split(ENVIRON["RULES"], row, "\n")
            for (r = 1; r <= nr; r++) {
                nf = split(row[r], w, /[[:space:]]+/)
                allow[w[1]] = " "
                for (i = 2; i <= nf; i++) if (w[i] != "-") allow[w[1]] = allow[w[1]] w[i] " "
            }
        }
        {
            file = $0; sub(/:.*/, "", file)
            line = substr($0, length(file) + 2); sub(/:.*/, "", line)
            inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
            from = module(file)
            where = file ":" line ": "
            if (!(from in allow)) { print where from " has no row in the table"; bad++; next }
            if (index(inc, "/") == 0) next # a file beside it (the generated parser.h)
            to = module(inc)
            edge = from " -> " to " (" inc "): "
            n = split(inc, part, "/")
            if (part[n] == "internal.h" && to != from) {
                print where edge "a private header, for its own folder or room only"; bad++; next
            }
            if (to == from || index(allow[from], " " inc " ")) next
            if (!index(allow[from], " " to " ")) { print where edge "an edge the table does not allow"; bad++; next }
            if (to ~ /^runtime\// && inc != to "/" substr(to, 9) ".h") {
                print where edge "not the room'"'"'s public header " to "/" substr(to, 9) ".h"; bad++
            }
        }
        END { exit bad > 0 }'
}

# The tree as it is.
if out=$(layering_check . "$doc"); then ok; else bad "the include graph breaks $doc's layering:"$'\n'"$out"; fi
rows=$(layering_rules "$doc")
[ "$(printf '%s\n' "$rows" | grep -c .)" -ge 14 ] && ok || bad "$doc's layering table: too few rows: $rows"
# Every row names a folder (or room) the tree has.
stale=
for m in $(printf '%s\n' "$rows" | awk '{ print $1 }'); do [ -d "$m" ] || stale+=" $m"; done
[ -z "$stale" ] && ok || bad "$doc's layering table has rows for folders the tree lacks:$stale"

# The failure path: a tree of deliberate violations, each caught at its line.
t=$tmp/tree
mkdir -p $t/passes $t/runtime/device $t/runtime/train $t/ir $t/newdir
printf '#include <stdio.h>\n#include "codegen/codegen.h"\n' >$t/passes/a.c
printf '#include "runtime/device/device.h"\n#include "runtime/exec/internal.h"\n' >$t/runtime/device/b.c
printf '/*\n *     #include "runtime/exec/internal.h"\n */\n#include "runtime/device/onednn.h"\n' >$t/runtime/train/c.c
printf '#include "base/err.h"\n' >$t/newdir/d.c
printf '#include "base/err.h"\n#include "ir/internal.h"\n#include "parser.h"\n' >$t/ir/e.c
src_dirs="$src_dirs newdir"
got=$(layering_check $t "$doc"); rc=$?
want="newdir/d.c:1: newdir has no row in the table
passes/a.c:2: passes -> codegen (codegen/codegen.h): an edge the table does not allow
runtime/device/b.c:2: runtime/device -> runtime/exec (runtime/exec/internal.h): a private header, for its own folder or room only
runtime/train/c.c:4: runtime/train -> runtime/device (runtime/device/onednn.h): not the room's public header runtime/device/device.h"
[ $rc -ne 0 ] && ok || bad "the checker passed a tree of violations"
[ "$(sort <<<"$got")" = "$want" ] && ok || bad "the checker's violations: got"$'\n'"$got"$'\n'"want"$'\n'"$want"
# A folder gets its edges by one row of the table.
sed '/^```layering/a newdir base' "$doc" >$tmp/design.md
got=$(layering_check $t $tmp/design.md)
[ "$(grep -c 'newdir' <<<"$got")" = 0 ] && ok || bad "a row added for newdir/ did not take: $got"
src_dirs=${src_dirs% newdir}

finish
