#!/usr/bin/env bash
# run: tier=full san=no
# The tree builds warning-free with clang as with gcc: with Debian 12's
# clang-14 and clang-16 (scripts/deps.sh test installs them; a missing one
# is a failure that names its package), each into its own tree beside the
# suite's (build/clang-14, never build/rel: make's BUILD and BIN), the
# Makefile's goals that the suite compiles with $(CC) — the library, dpc
# and dprun, the unit tests, the GPU tools, the fake driver (its C++
# simulator with clang++ too) and the parity drivers — with the Makefile's
# flags, -Werror among them; any `warning:` in the log fails as well
# (bison's, the linker's). The tree reuses the suite's configuration
# (build/config.mk; CONFIGURE=0), so it has the same optional parts and
# leaves that file alone. Then the clang-built dpc and dprun compile and
# train one step of cnn_small, so the objects are not only warning-free.
# Prints each compiler's build time and `N passed, N failed`.
. tests/lib.sh
root=$(dirname "$build")
for cc in clang-14 clang-16; do
    if ! command -v "$cc" >/dev/null; then
        bad "no $cc: install it (scripts/deps.sh test installs the $cc package)"
        continue
    fi
    out=$root/$cc
    start=$(date +%s)
    # The suite runs under make: its MAKEFLAGS (the jobserver, the caller's
    # variables) are not this build's.
    if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -j"${JOBS:-2}" \
        CC="$cc" CXX="${cc/clang/clang++}" BUILD="$out" BIN="$out/bin" CONFIGURE=0 DEPS=0 \
        check-bins "$out/parity/dpc_step" "$out/parity/dpc_bisect" >"$tmp/$cc.log" 2>&1; then
        ok
        echo "$cc: built $out in $(($(date +%s) - start))s"
    else
        bad "$cc: the build failed after $(($(date +%s) - start))s:
$(grep -E 'error:|Error [0-9]' "$tmp/$cc.log" | head -n 20)"
        continue # its binaries, if any, are an earlier build's
    fi
    check "$cc: no warning in the build log" lacks 'warning:' "$tmp/$cc.log"
    grep 'warning:' "$tmp/$cc.log" | head -n 20 | sed 's/^/    /'
    if "$out/bin/dpc" models/cnn_small.net --batch 8 -o "$tmp/$cc.plan" 2>"$tmp/$cc.err"; then
        if "$out/bin/dprun" "$tmp/$cc.plan" --steps 1 >"$tmp/$cc.run" 2>&1; then
            ok
        else
            bad "$cc: its dprun cannot train a step: $(tail -n 5 "$tmp/$cc.run")"
        fi
    else
        bad "$cc: its dpc cannot compile cnn_small: $(cat "$tmp/$cc.err")"
    fi
done
finish
