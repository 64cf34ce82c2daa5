#!/usr/bin/env bash
# run: tier=check
# The kernel cache's path (README "What to
# trust"): every directory on the way is root's or the user's and no one
# else may write it unless it is sticky, a link on the way is followed only
# when root or the user owns it, the cache itself is the user's; what is
# loaded is the bytes read and checked through the directory's descriptor,
# so swapping the directory after the check changes nothing; a truncated
# object whose record was rewritten to match is compiled again, not mapped.
. tests/lib.sh
quiet() { "$@" >/dev/null 2>&1; }
plan=$tmp/mlp.plan
"$bin/dpc" models/mlp.net -o "$plan" || { bad "dpc models/mlp.net"; finish; exit; }
run() { DPC_CACHE_DIR=$1 "$bin/dprun" "$plan" --steps 1; }
me=$(id -u)
refusal="refusing to load kernels through it (set DPC_CACHE_DIR to a directory of your own)"

# ---- directories on the way ------------------------------------------------------
mkdir -m 777 "$tmp/ww"
expect_fail "a world-writable parent (not sticky) is refused" \
    "kernel cache directory $tmp/ww/cache: $tmp/ww, on its path, is writable by everyone and not sticky (mode 0777, owner uid $me); $refusal" \
    run "$tmp/ww/cache"
mkdir -m 775 "$tmp/gw"
expect_fail "a group-writable parent (not sticky) is refused" \
    "$tmp/gw, on its path, is writable by its group and not sticky (mode 0775" run "$tmp/gw/cache"
mkdir -m 1777 "$tmp/sticky"
check "a sticky world-writable parent (like /tmp) is fine" quiet run "$tmp/sticky/cache"
check "... and the cache is created 0700 in it" test "$(stat -c %a "$tmp/sticky/cache")" = 700
check "a relative DPC_CACHE_DIR is walked from the working directory" \
    quiet env -C "$tmp" DPC_CACHE_DIR=rel/cache "$(cd "$bin" && pwd)/dprun" "$plan" --steps 1
check "... and used there" test -d "$tmp/rel/cache"

if [ "$me" = 0 ] && id nobody >/dev/null 2>&1; then
    nobody=$(id -u nobody)
    mkdir "$tmp/theirs" && chown nobody "$tmp/theirs"
    expect_fail "a parent another user owns is refused" \
        "kernel cache directory $tmp/theirs/cache: $tmp/theirs, on its path, belongs to uid $nobody (mode 0755), not to root or this user (uid 0); $refusal" \
        run "$tmp/theirs/cache"
    check "... and nothing is created in it" test ! -e "$tmp/theirs/cache"
    # sudo -E dprun with the user's HOME: the default cache is under a home
    # root does not own.
    mkdir -p "$tmp/home/.cache" && chown -R nobody "$tmp/home"
    expect_fail "a HOME another user owns is refused (DPC_CACHE_DIR unset)" \
        "kernel cache directory $tmp/home/.cache/dpc: $tmp/home, on its path, belongs to uid $nobody" \
        env -u DPC_CACHE_DIR HOME="$tmp/home" "$bin/dprun" "$plan" --steps 1
    # A link another user planted, at the end of the path or inside it.
    mkdir "$tmp/real"
    ln -s "$tmp/real" "$tmp/sticky/link" && chown -h nobody "$tmp/sticky/link"
    expect_fail "a link another user owns is not followed, named once" \
        "kernel cache directory $tmp/sticky/link is a symbolic link owned by uid $nobody, not by root or this user (uid 0); refusing to follow it" \
        run "$tmp/sticky/link"
    expect_fail "... nor inside the path" "$tmp/sticky/link, on its path, is a symbolic link owned by uid $nobody" \
        run "$tmp/sticky/link/cache"
    mkdir -m 700 "$tmp/mine"
    chown nobody "$tmp/mine"
    expect_fail "the cache directory itself must be this user's" \
        "kernel cache directory $tmp/mine belongs to uid $nobody (mode 0700), not to this user (uid 0); refusing to load kernels from it" \
        run "$tmp/mine"
else
    skip "another user's directories and links: needs root and a nobody user"
fi
# Each refusal is one line naming the directory once (its path a second
# time only when the refused name is another one on the way).
touch "$tmp/file"
run "$tmp/file" >/dev/null 2>"$tmp/file.err"
check "a file as the cache: one line, the path named once" \
    test "$(grep -c 'kernel cache directory' "$tmp/file.err")" = 1 -a \
    "$(grep -o "$tmp/file" "$tmp/file.err" | wc -l)" = 1 -a \
    "$(grep -c "kernel cache directory $tmp/file: Not a directory" "$tmp/file.err")" = 1
run "$tmp/ww/cache" >/dev/null 2>"$tmp/ww.err"
check "a refused parent: one line, each path named once" \
    test "$(grep -c 'kernel cache directory' "$tmp/ww.err")" = 1 -a \
    "$(grep -o "$tmp/ww/cache" "$tmp/ww.err" | wc -l)" = 1 -a "$(grep -o "$tmp/ww," "$tmp/ww.err" | wc -l)" = 1
ln -s "$tmp/real" "$tmp/ours"
check "a link this user owns is followed" quiet run "$tmp/ours/cache"
check "... to its target" test -d "$tmp/real/cache"

# ---- the directory swapped between check and use -----------------------------------
# What an attacker who could rename the cache's parent would do between
# dprun's check and its dlopen: CC (run on a miss) is the hook that puts the
# swap exactly there. After the first compile it moves the cache aside,
# links an evil folder in its place (a link another user owns, when root
# runs this) and puts an object there under the compiler's output name; its
# constructor writes a marker. The old code read and loaded by path,
# through the link: the marker appeared.
cat >"$tmp/evil.c" <<EOF
#include <stdio.h>
__attribute__((constructor)) static void evil(void) { FILE *f = fopen("$tmp/pwned", "w"); if (f) { fputs("evil ran", f); fclose(f); } }
EOF
cc -shared -fPIC -o "$tmp/evil.so" "$tmp/evil.c" || bad "building the evil object"
mkdir -m 700 "$tmp/evil" "$tmp/victim"
owner=$([ "$me" = 0 ] && id -u nobody 2>/dev/null || echo "$me")
cat >"$tmp/swap-cc" <<EOF
#!/bin/sh
cc "\$@" || exit
[ -e "$tmp/victim/cache.old" ] && exit
out= prev=
for a; do [ "\$prev" = -o ] && out=\$a; prev=\$a; done
mv "$tmp/victim/cache" "$tmp/victim/cache.old" && ln -s "$tmp/evil" "$tmp/victim/cache" &&
    chown -h "$owner" "$tmp/victim/cache" && cp "$tmp/evil.so" "$tmp/evil/\$(basename "\$out")"
EOF
chmod +x "$tmp/swap-cc"
CC=$tmp/swap-cc DPC_CACHE_DIR=$tmp/victim/cache "$bin/dprun" "$plan" --steps 1 >/dev/null 2>"$tmp/swap.err"
check "the directory swapped after the check: the evil object never ran" test ! -e "$tmp/pwned"
check "... the module was published in the directory checked" \
    test "$(ls "$tmp/victim/cache.old"/*.so 2>/dev/null | wc -l)" = 1
if [ "$owner" != "$me" ]; then
    check "... and the next program's walk refuses the planted link, in one line naming it once" \
        test "$(grep -c "kernel cache directory $tmp/victim/cache is a symbolic link owned by uid $owner" "$tmp/swap.err")" = 1 -a \
        "$(grep -c 'kernel cache directory' "$tmp/swap.err")" = 1
fi

# ---- a truncated object whose record matches it --------------------------------------
# It passes the checksum; mapping it faulted (SIGBUS) inside dlopen.
cache=$tmp/sticky/cache
so=$(ls "$cache"/*.so | head -n 1)
size=$(stat -c %s "$so")
for keep in 1000 $((size / 2)); do
    head -c "$keep" "$so" >"$tmp/prefix" && cat "$tmp/prefix" >"$so"
    printf '%s\n' "$(sha256sum "$so" | cut -d' ' -f1)" >"$so.sha256"
    run "$cache" >/dev/null 2>"$tmp/err"
    rc=$?
    check "a $keep-byte prefix with a matching record: compiled again, exit 0 (got $rc)" test $rc = 0
    check "... with a notice naming it" grep -q "kernel cache: $so is not a whole shared object" "$tmp/err"
    check "... and it is whole again" test "$(stat -c %s "$so")" = "$size"
done
finish
