#!/usr/bin/env bash
# run: tier=check
# What dprun trusts (docs/guide.md "What to trust"): a plan is data, never code.
# Plans edited with their checksum fixed up (tests/plan_tamper.py) are
# refused before anything runs, naming the plan and the kernel; the kernel
# cache is private, refused when others may write it, and rebuilds an
# object that is not what was compiled for it.
. tests/lib.sh
export DPC_CACHE_DIR=$tmp/cache
tamper() { "$py" tests/plan_tamper.py "$@"; }
quiet() { "$@" >/dev/null 2>&1; }
not_grep() { ! grep -q "$@"; }
plan=$tmp/mlp.plan
"$bin/dpc" models/mlp.net -o "$plan" || { bad "dpc models/mlp.net"; finish; exit; }
check "the plan as dpc wrote it runs" quiet "$bin/dprun" "$plan" --steps 1

# ---- plans ----------------------------------------------------------------
# The attack that used to work: constructor code in the embedded source ran
# as the user of dprun (then training finished normally).
evil='#include <math.h>\n#include <stdio.h>\n__attribute__((constructor)) static void evil(void) { FILE *f = fopen("'$tmp'/pwned", "w"); if (f) { fputs("uid", f); fclose(f); } }'
tamper "$plan" "$tmp/evil.plan" source '#include <math.h>' "$evil"
expect_fail "constructor code in the prelude is refused" "evil.plan: plan section KCPU is not what its graph renders (the kernel prelude differs)" \
    "$bin/dprun" "$tmp/evil.plan" --steps 1
check "the injected code never ran" test ! -e "$tmp/pwned"
check "the embedded sources stay readable (--info)" quiet "$bin/dprun" "$tmp/evil.plan" --info

tamper "$plan" "$tmp/kernel.plan" source 'b0[i] = ' 'b0[i] = 1+'
expect_fail "an edited kernel is refused by name" "kernel.plan: plan section KCPU is not what its graph renders (kernel k0_bias_add_relu differs)" \
    "$bin/dprun" "$tmp/kernel.plan" --steps 1
tamper "$plan" "$tmp/count.plan" count 3 1000
expect_fail "a larger kernel call count is refused" "(call 3 of kernel k1_bias_add differs (count 1640, the graph's 640))" \
    "$bin/dprun" "$tmp/count.plan" --steps 1
tamper "$plan" "$tmp/buf.plan" stepbuf 2 99999
expect_fail "a step's buffer out of range is refused" "(step 2 (node 7) differs)" "$bin/dprun" "$tmp/buf.plan" --steps 1
tamper "$plan" "$tmp/input.plan" input GTRN -1 5000
expect_fail "a graph input out of range is refused" "input.plan: error: corrupt plan: train program, node 46: assign: input 0 is node 5000, not an earlier one" \
    "$bin/dprun" "$tmp/input.plan" --steps 1
tamper "$plan" "$tmp/wd.plan" fattr GTRN 0.0001 3.5e38
expect_fail "an attribute beyond a float is refused, not rendered as inf" "wd.plan: error: corrupt plan: train program: node 28 (sgd_momentum): sgd_momentum: wd must be in [0, 1], got 3.5e+38" \
    "$bin/dprun" "$tmp/wd.plan" --steps 1
# The helper itself: an edit that changes nothing is accepted, so the
# refusals above are the edits' doing.
tamper "$plan" "$tmp/same.plan" source '#include <math.h>' '#include <math.h>'
check "a plan rewritten without a change still runs" quiet "$bin/dprun" "$tmp/same.plan" --steps 1

# ---- the kernel cache -----------------------------------------------------
rm -rf "$DPC_CACHE_DIR"
quiet "$bin/dprun" "$plan" --steps 1
check "the cache directory is created 0700" test "$(stat -c %a "$DPC_CACHE_DIR")" = 700
chmod 770 "$DPC_CACHE_DIR"
expect_fail "a group-writable cache is refused" "is writable by its group (mode 0770); refusing to load kernels from it" \
    "$bin/dprun" "$plan" --steps 1
chmod 707 "$DPC_CACHE_DIR"
expect_fail "a world-writable cache is refused" "is writable by everyone (mode 0707)" "$bin/dprun" "$plan" --steps 1
chmod 700 "$DPC_CACHE_DIR"
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    chown nobody "$DPC_CACHE_DIR"
    expect_fail "a cache another user owns is refused" "belongs to uid $(id -u nobody) (mode 0700), not to this user (uid 0)" \
        "$bin/dprun" "$plan" --steps 1
    chown root "$DPC_CACHE_DIR"
fi
so=$(ls "$DPC_CACHE_DIR"/*.so | head -n 1)
head -c 1000 "$so" >"$tmp/prefix" && cat "$tmp/prefix" >"$so"
"$bin/dprun" "$plan" --steps 1 >/dev/null 2>"$tmp/err"
check "a truncated object is rebuilt (dprun exits 0)" test $? = 0
check "... with a notice naming it" grep -q "kernel cache: $so does not match the checksum recorded when it was compiled" "$tmp/err"
check "... and it is whole again" test "$(stat -c %s "$so")" -gt 1000
rm -f "$so.sha256"
"$bin/dprun" "$plan" --steps 1 >/dev/null 2>"$tmp/err"
check "an object without its checksum (planted) is rebuilt with a notice" grep -q "kernel cache: $so has no recorded checksum" "$tmp/err"
"$bin/dprun" "$plan" --steps 1 >/dev/null 2>"$tmp/err"
check "a good object is used without a notice" not_grep "kernel cache" "$tmp/err"

# HOME unset: the password database's home, never a shared /tmp/.cache.
home=$(getent passwd "$(id -u)" | cut -d: -f6)
mod=$(env -u HOME -u DPC_CACHE_DIR DPC_DEBUG=1 "$bin/dprun" "$plan" --steps 1 2>&1 >/dev/null | sed -n 's/^dprun: cpu: module \(.*\) (.*/\1/p' | head -n 1)
case "$mod" in
"$home"/.cache/dpc/*) ok ;;
*) bad "HOME unset: module at '$mod', expected under $home/.cache/dpc" ;;
esac
finish
