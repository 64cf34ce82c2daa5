#!/usr/bin/env bash
# run: tier=test
# make install: PREFIX and DESTDIR honoured, and the installed copy runs
# from there: from another folder, with this tree's bin/ off PATH, the
# installed dpc compiles an installed model, the installed dprun trains it
# two steps on the synthetic set (reading no file of this tree, where strace
# can tell), dpc-plot draws its metrics, dpc-plot and dpc-convert name
# themselves in their help and errors (never scripts/...), the installed
# README names them, --version answers, the man pages
# are found under PREFIX and render; no installed file names this tree
# (the binaries less their debug information); make uninstall removes it.
# Runs from the repository root. Prints `N passed, N failed[, N skipped]`.
. tests/lib.sh
root=$(pwd -P)
prefix=$tmp/p

# make, as a program of its own (not a sub-make of the suite's), on the
# tree the suite tests: no package check, no new detection, and the
# binaries taken as they are (-o): never rebuilt under a running suite.
mk() {
    local san=()
    sanitized && san=(SANITIZE=1)
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -s DEPS=0 CONFIGURE=0 \
        "${san[@]}" -o "$bin/dpc" -o "$bin/dprun" "$@"
}

if ! mk install PREFIX="$prefix" >"$tmp/install.out" 2>&1; then
    bad "make install PREFIX=$prefix: $(tail -n 5 "$tmp/install.out")"
    finish
    exit
fi
ok
for f in bin/dpc bin/dprun bin/dpc-plot bin/dpc-convert; do
    check "$f is an executable" test -x "$prefix/$f"
done
for f in share/dpc/models/resnet18.net share/dpc/models/mlp.net share/doc/dpc/README.md \
    share/doc/dpc/docs/cli.md share/doc/dpc/docs/DESIGN.md share/doc/dpc/docs/article/README.md \
    share/doc/dpc/docs/article/10-epoch/run1.log share/man/man1/dpc.1 share/man/man1/dprun.1; do
    check "$f installed" test -s "$prefix/$f"
done
check "the installed dprun is the one tested" cmp -s "$bin/dprun" "$prefix/bin/dprun"
check "every model installed" test "$(ls models/*.net | wc -l)" -eq "$(ls "$prefix"/share/dpc/models/*.net | wc -l)"

# From elsewhere, with only the installed bin/ and the system's on PATH.
mkdir -p "$tmp/elsewhere"
(
    cd "$tmp/elsewhere" || exit 1
    export PATH=$prefix/bin:/usr/bin:/bin
    [ "$(command -v dprun)" = "$prefix/bin/dprun" ] || { echo "dprun on PATH is $(command -v dprun)"; exit 1; }
    dpc --version | head -n 1 | grep -q '^dpc [0-9]' || exit 1
    dprun --version | head -n 1 | grep -q '^dprun [0-9]' || exit 1
    dpc "$prefix/share/dpc/models/mlp.net" -o m.plan || exit 1
    run=(dprun m.plan --data synthetic --steps 2 --device cpu --metrics m.jsonl)
    if command -v strace >/dev/null && strace -o /dev/null true 2>/dev/null; then
        # LeakSanitizer cannot run under ptrace: the sanitizer build's leaks
        # are the other tests' to find
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
            strace -f -qq -e trace=%file,execve -o trace "${run[@]}" >run.out 2>&1 || { cat run.out; exit 1; }
        # the kernel cache may lie in the tree (tests/run.sh puts it in build/)
        cache=${DPC_CACHE_DIR:-$HOME/.cache/dpc}
        if grep -F "\"$root/" trace | grep -vF -e "\"${cache%/}" -e "\"$(realpath -m "$cache")" |
            head -n 3 | grep .; then
            echo "dprun read the source tree"
            exit 1
        fi
    else
        "${run[@]}" >run.out 2>&1 || { cat run.out; exit 1; }
    fi
    grep -q '^Training time' run.out || { cat run.out; exit 1; }
    dpc-plot -o m.svg m.jsonl && grep -q '<svg' m.svg
) >"$tmp/run.log" 2>&1 && ok || bad "the installed dpc and dprun, from another folder: $(tail -n 5 "$tmp/run.log")"

# The installed scripts name themselves as installed, and what the installed
# README tells you to run is there.
(
    cd "$tmp/elsewhere" || exit 1
    export PATH=$prefix/bin:/usr/bin:/bin
    dpc-plot --help >plot.help || exit 1
    head -n 1 plot.help | grep -q '^dpc-plot — ' || { head -n 1 plot.help; exit 1; }
    if grep -n 'scripts/plot' plot.help; then exit 1; fi
    dpc-plot 2>plot.err; grep -q '^dpc-plot: error: no metrics files (usage: dpc-plot ' plot.err || { cat plot.err; exit 1; }
    if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
        dpc-convert --help >conv.help || exit 1
        head -n 1 conv.help | grep -q '^usage: dpc-convert --from ' || { head -n 1 conv.help; exit 1; }
        if grep -n 'scripts/convert_weights' conv.help; then exit 1; fi
        dpc-convert --map torchvision --model resnet18 | grep -qx 'conv0.weight conv1.weight' || exit 1
        dpc-convert --map gluon --model nope 2>conv.err
        grep -qx "dpc-convert: error: unknown model 'nope' (resnet18, resnet34, resnet50, mobilenet_v2)" conv.err ||
            { cat conv.err; exit 1; }
    fi
) >"$tmp/tools.log" 2>&1 && ok || bad "the installed dpc-plot and dpc-convert name themselves: $(tail -n 5 "$tmp/tools.log")"
for tool in dpc-plot dpc-convert; do
    check "the installed README names $tool" grep -q "\`$tool\`" "$prefix/share/doc/dpc/README.md"
done

if command -v man >/dev/null && command -v groff >/dev/null; then
    for prog in dpc dprun; do
        MANWIDTH=80 man -M "$prefix/share/man" "$prog" >"$tmp/$prog.txt" 2>"$tmp/$prog.err"
        check "man -M PREFIX/share/man $prog: $(head -c 200 "$tmp/$prog.err")" grep -q "^ *$prog - " "$tmp/$prog.txt"
    done
else
    skip "man pages rendered: no man or groff here"
fi

# Nothing installed names this tree: the text files, and the binaries'
# loaded bytes (their debug information holds the build folder, as any
# unstripped binary's does).
named=$(grep -rlF "$root/" "$prefix/share" "$prefix/bin/dpc-plot" "$prefix/bin/dpc-convert")
[ -z "$named" ] && ok || bad "installed files naming $root: $named"
if command -v objcopy >/dev/null; then
    for b in dpc dprun; do
        objcopy --strip-debug "$prefix/bin/$b" "$tmp/$b.stripped"
        grep -qF "$root/" "$tmp/$b.stripped" && bad "bin/$b names $root outside its debug information" || ok
    done
else
    skip "the binaries' loaded bytes: no objcopy here"
fi

# DESTDIR stages the same tree under itself; uninstall removes every file.
if mk install DESTDIR="$tmp/stage" PREFIX=/opt/dpc >"$tmp/stage.out" 2>&1; then
    check "DESTDIR: bin/dprun staged" test -x "$tmp/stage/opt/dpc/bin/dprun"
    check "DESTDIR: the man page staged" test -s "$tmp/stage/opt/dpc/share/man/man1/dprun.1"
    check "DESTDIR: nothing outside PREFIX" test "$(ls -A "$tmp/stage")" = opt
else
    bad "make install DESTDIR: $(tail -n 5 "$tmp/stage.out")"
fi
# A DESTDIR with a space and a quote is one folder: nothing is made in this
# tree, nothing beside it is touched ("$tmp/st", where an unquoted
# "$tmp/st age's" would split), and uninstall removes what install put
# there and nothing else (a file of its own in bin/ stays).
sp="$tmp/st age's"
mkdir -p "$sp/opt/dpc/bin"
echo keep >"$sp/opt/dpc/bin/other"
echo keep >"$tmp/st"
if mk install DESTDIR="$sp" PREFIX=/opt/dpc >"$tmp/space.out" 2>&1; then
    check "DESTDIR with a space: bin/dpc-convert staged" test -x "$sp/opt/dpc/bin/dpc-convert"
    check "DESTDIR with a space: the docs' article staged" test -s "$sp/opt/dpc/share/doc/dpc/docs/article/README.md"
    mk uninstall DESTDIR="$sp" PREFIX=/opt/dpc >>"$tmp/space.out" 2>&1 || bad "make uninstall DESTDIR with a space: $(tail -n 5 "$tmp/space.out")"
    left=$(find "$sp" -type f)
    check "uninstall DESTDIR with a space removes what install put there, only: $left" \
        test "$left" = "$sp/opt/dpc/bin/other"
else
    bad "make install DESTDIR with a space: $(tail -n 5 "$tmp/space.out")"
fi
check "install and uninstall left \$tmp/st beside DESTDIR alone" grep -qx keep "$tmp/st"
made=$(find "$root" -path "$root/.git" -prune -o -name "age's*" -print | head -n 3)
[ -z "$made" ] && ok || bad "install with a space in DESTDIR made in the source tree: $made"

mk uninstall PREFIX="$prefix" >"$tmp/uninstall.out" 2>&1 || bad "make uninstall: $(tail -n 5 "$tmp/uninstall.out")"
left=$(find "$prefix" -type f)
[ -z "$left" ] && ok || bad "make uninstall left: $left"

finish
