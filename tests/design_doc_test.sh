#!/usr/bin/env bash
# run: tier=check san=no
# docs/DESIGN.md keeps up with the tree, as cli_doc_test.sh keeps
# docs/cli.md up with the command lines: §2's inventories (the layout
# table's row for each source folder, the runtime's row for the files at
# its top, the rooms table's public header and files for each room) list
# every .c, .h, .l and .y file of their folder and no file it lacks
# (`names.[ch]` is both, `decl_*.h` a pattern that must match); §6's
# table of plan sections holds every section tag format/ defines (the tags
# format/plan.c writes, the *_SECTION* macros of format/*.h) and no other.
# The checker also runs on a doctored copy of DESIGN.md, which must fail
# with each doctoring named, so its failure path runs every time.
# Runs from the repository root. Prints `N passed, N failed`.
. tests/lib.sh
doc=docs/DESIGN.md
folders="base frontend ir format passes codegen driver cli runtime"

# layout_files DOC FOLDER: the file names (backquoted, no slash) of the
# FOLDER/ row of §2's layout table, one per line, `.[ch]` as .c and .h.
layout_files() {
    awk -v row="| \`$2/\` |" '/^## §2 / { on = 1; next } /^## / { on = 0 }
        on && index($0, row) == 1 { split($0, col, "|"); print col[3] }' "$1" | file_tokens
}
# room_files DOC ROOM: the public header and files of runtime/ROOM in
# §2's rooms table (its second and third columns).
room_files() {
    awk -v row="| \`$2/\` |" '/^## §2 / { on = 1; next } /^## / { on = 0 }
        on && index($0, row) == 1 { split($0, col, "|"); print col[3] col[4] }' "$1" | file_tokens
}
file_tokens() {
    grep -oE '`[A-Za-z0-9_*]+\.(\[ch\]|[chly])`' | tr -d '`' |
        sed -E 's/^(.*)\.\[ch\]$/\1.c\n\1.h/' | sort -u
}
# tree_files DIR: the sources directly in DIR.
tree_files() {
    find "$1" -maxdepth 1 -type f \( -name '*.[ch]' -o -name '*.l' -o -name '*.y' \) -printf '%f\n' | sort
}

# inventory_check DOC WHERE LISTED: each file of WHERE/ is LISTED, each
# LISTED name (or pattern) is a file of WHERE/; a line per difference.
inventory_check() {
    local doc=$1 where=$2 listed=$3 f n=0 have
    have=$(tree_files "$where")
    if [ -z "$listed" ]; then echo "$doc: no inventory of $where/"; return 1; fi
    for f in $have; do
        local hit=0 l
        for l in $listed; do [[ $f == $l ]] && { hit=1; break; }; done
        [ $hit = 1 ] || { echo "$doc: $where/$f is not in its inventory"; n=$((n + 1)); }
    done
    for l in $listed; do
        local hit=0
        for f in $have; do [[ $f == $l ]] && { hit=1; break; }; done
        [ $hit = 1 ] || { echo "$doc: the inventory of $where/ lists $l, which the tree lacks"; n=$((n + 1)); }
    done
    [ $n = 0 ]
}

# doc_sections DOC: the tags of §6's first table (first column).
doc_sections() {
    awk '/^## §6 / { on = 1; next } /^## / { on = 0 } on && /^\| `/ { split($0, col, "|"); print col[2] }
         on && seen && !/^\|/ { exit } on && /^\|/ { seen = 1 }' "$1" | grep -oE '`[A-Z0-9]{4}`' | tr -d '`' | sort -u
}
# code_sections: the section tags format/ defines.
code_sections() {
    { grep -ohE 'begin_section\([^,]*, *"[A-Z0-9]{4}"' format/*.c
      grep -ohE '#define +[A-Z0-9_]*SECTION[A-Z0-9_]* +"[A-Z0-9]{4}"' format/*.h; } |
        grep -oE '"[A-Z0-9]{4}"' | tr -d '"' | sort -u
}

# design_check DOC: every difference between DOC and the tree, a line each.
design_check() {
    local doc=$1 d n=0 rooms
    for d in $folders; do inventory_check "$doc" $d "$(layout_files "$doc" $d)" || n=$((n + 1)); done
    rooms=$(find runtime -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)
    for d in $rooms; do inventory_check "$doc" runtime/$d "$(room_files "$doc" $d)" || n=$((n + 1)); done
    local code listed t
    code=$(code_sections)
    listed=$(doc_sections "$doc")
    for t in $code; do grep -qx "$t" <<<"$listed" || { echo "$doc: plan section $t (format/) is not in §6's table"; n=$((n + 1)); }; done
    for t in $listed; do grep -qx "$t" <<<"$code" || { echo "$doc: §6's table lists section $t, which format/ does not define"; n=$((n + 1)); }; done
    [ $n = 0 ]
}

# The extractions find something (a broken one would pass vacuously).
[ "$(code_sections | wc -l)" -ge 9 ] && ok || bad "format/'s section tags: found only $(code_sections | tr '\n' ' ')"
[ "$(layout_files $doc passes | wc -l)" -ge 10 ] && ok || bad "the passes/ inventory: found only $(layout_files $doc passes | tr '\n' ' ')"
[ "$(room_files $doc device | wc -l)" -ge 5 ] && ok || bad "the runtime/device/ inventory: found only $(room_files $doc device | tr '\n' ' ')"
# The document as it is.
if out=$(design_check $doc); then ok; else bad "$doc disagrees with the tree:"$'\n'"$out"; fi

# The failure path: a copy with passes/'s conv.c dropped, a file that is
# not there added to device/'s row, and §6's DATA row removed.
sed -e '/^| `passes\/` |/s/`conv\.c`//' -e '/^| `device\/` |/s/`cpu\.c`/`cpu.c`, `ghost.c`/' \
    -e '/^| `DATA` |/d' $doc >$tmp/design.md
out=$(design_check $tmp/design.md); rc=$?
[ $rc -ne 0 ] && ok || bad "the checker passed a doctored DESIGN.md"
for want in "passes/conv.c is not in its inventory" "runtime/device/ lists ghost.c, which the tree lacks" \
    "plan section DATA (format/) is not in §6's table"; do
    grep -qF "$want" <<<"$out" && ok || bad "the doctored DESIGN.md: no '$want' in: $out"
done
[ "$(grep -c . <<<"$out")" = 3 ] && ok || bad "the doctored DESIGN.md: not three differences: $out"

finish
