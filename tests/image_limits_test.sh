#!/usr/bin/env bash
# run: tier=check
# What image files, and the folders holding them, may cost (runtime/data/
# image.c, folder.c, runtime/train/predict.c), on JPEGs test_image writes
# (no PIL needed):
#   - a progressive JPEG of more than RT_JPEG_MAX_SCANS scans is refused
#     at once, naming the file, in dprun predict and in an image folder;
#     one over RT_IMAGE_MAX_PROGRESSIVE_PIXELS before its scans are read;
#   - dprun predict DIR walks each folder once: a folder holding links to
#     itself and its parent gives one line per image, quickly;
#   - a file name's bytes reach the terminal escaped, and --json output is
#     valid UTF-8 whatever the names hold (\u00XX for a stray byte);
#   - a --classes line holding a NUL byte is refused, naming the line;
#   - --classes DIR reads a CIFAR-10 folder's batches.meta.txt (blank last
#     line left out) under the same file rules;
#   - the first SIGTERM ends an image-folder load.
. tests/lib.sh
if ! grep -q '^HAVE_IMAGE := 1' build/config.mk 2>/dev/null; then
    skip "dpc built without libjpeg/libpng: the image checks"
    finish
    exit
fi
jpeg() { "$build/tests/test_image" --jpeg "$@"; } # jpeg OUT W H PROGRESSIVE
jpeg "$tmp/g.jpg" 40 36 0 && jpeg "$tmp/p.jpg" 64 48 1 || { bad "test_image --jpeg"; finish; exit; }
"$bin/dpc" models/cnn_small.net -o "$tmp/c.plan" || bad "compile cnn_small"
"$bin/dprun" "$tmp/c.plan" --device cpu --data synthetic --steps 1 --save-params "$tmp/w.st" >/dev/null 2>&1 ||
    bad "train the model predict uses"
predict() { timeout 20 "$bin/dprun" predict "$tmp/c.plan" --device cpu --load-params "$tmp/w.st" "$@"; }

# ---- scans -------------------------------------------------------------------
expect_fail_line "a JPEG of 190 scans is refused (predict)" \
    "$tmp/p.jpg: a progressive JPEG of more than 100 scans; at most 100 are decoded" predict "$tmp/p.jpg"
printf '%s\n' 'input image[3, 32, 32]' 'input label class(2)' 'network tiny {' \
    '    logits = dense(global_avgpool(conv(image, 4, k=3, s=2, p=1)), 2)' \
    '    loss = softmax_cross_entropy(logits, label)' '}' 'train {' '    batch 2 per device' \
    '    lr {0: 0.05}' '    data imagefolder { resize 32 }' '}' >"$tmp/if.net"
"$bin/dpc" "$tmp/if.net" -o "$tmp/if.plan" || bad "compile an image-folder plan"
mkdir -p "$tmp/f/train/a" "$tmp/f/train/b" "$tmp/f/val/a" "$tmp/f/val/b"
for c in a b; do cp "$tmp/g.jpg" "$tmp/f/train/$c/1.jpg" && cp "$tmp/g.jpg" "$tmp/f/val/$c/1.jpg"; done
check "an image folder of small JPEGs trains" \
    timeout 60 "$bin/dprun" "$tmp/if.plan" --device cpu --data "$tmp/f" --steps 1 --final-eval none >/dev/null
cp "$tmp/p.jpg" "$tmp/f/train/b/2.jpg"
expect_fail_line "a JPEG of 190 scans is refused (image folder)" \
    "$tmp/f/train/b/2.jpg: a progressive JPEG of more than 100 scans" \
    timeout 20 "$bin/dprun" "$tmp/if.plan" --device cpu --data "$tmp/f" --steps 1 --data-workers 2
rm "$tmp/f/train/b/2.jpg"

jpeg "$tmp/wide.jpg" 16384 2049 2 && jpeg "$tmp/ok.jpg" 300 200 2 || bad "test_image --jpeg progressive"
expect_fail_line "a progressive JPEG over 32 Mi pixels is refused before decoding" \
    "$tmp/wide.jpg: a progressive JPEG of 16384x2049; at most 33554432 pixels" predict "$tmp/wide.jpg"
quiet() { "$@" >/dev/null 2>&1; }
check "a progressive JPEG of libjpeg's usual scans is read" quiet predict "$tmp/ok.jpg"
rm -f "$tmp/wide.jpg"

# ---- folder links --------------------------------------------------------------
mkdir -p "$tmp/loop/sub" && cp "$tmp/g.jpg" "$tmp/loop/a.jpg" && cp "$tmp/g.jpg" "$tmp/loop/sub/b.jpg"
for i in 1 2 3 4 5; do ln -s . "$tmp/loop/s$i" && ln -s .. "$tmp/loop/sub/up$i"; done
predict "$tmp/loop" >"$tmp/loop.out" 2>"$tmp/loop.err"
check "a folder of links to itself: each image once (2 lines)" [ "$(wc -l <"$tmp/loop.out")" = 2 ]
check "... a.jpg, then sub/b.jpg" grep -q "^$tmp/loop/sub/b.jpg:" "$tmp/loop.out"

# ---- names -------------------------------------------------------------------
mkdir "$tmp/n" && printf 'not an image' >"$tmp/n/"$'x\033[31m\xff.jpg'
expect_fail_line "a bad image's name is escaped in the message" \
    "$tmp/n/x\\x1b[31m\\xff.jpg: not a JPEG or PNG image" predict "$tmp/n"
predict "$tmp/n" >/dev/null 2>"$tmp/n.err"
check "... and no raw escape byte reaches stderr" lacks $'\033' "$tmp/n.err"
rm -rf "$tmp/n" && mkdir "$tmp/n" && cp "$tmp/g.jpg" "$tmp/n/"$'\xff\xfe.jpg'
printf '%s\n' $'cat\xff' 'dog' 'eel' 'fox' 'gnu' 'hen' 'ibis' 'jay' 'kiwi' 'lynx' >"$tmp/names.txt"
predict --json --top 2 --classes "$tmp/names.txt" "$tmp/n" >"$tmp/n.json" 2>"$tmp/n.err"
utf8_json() { "$py" -c 'import json, sys; r = json.loads(open(sys.argv[1], "rb").read().decode("utf-8")); assert r["file"].endswith("\u00ff\u00fe.jpg"), r' "$1"; }
check "--json with \\xff in file and class names is valid UTF-8 JSON (\\u00XX)" utf8_json "$tmp/n.json"
# --classes takes the CIFAR-10 folder --data takes (or its parent): its
# batches.meta.txt, whose blank last line names no class.
mkdir -p "$tmp/cp/cifar-10-batches-bin" && c10=$tmp/cp/cifar-10-batches-bin
printf '%s\n' airplane automobile bird cat deer dog frog horse ship truck '' >"$c10/batches.meta.txt"
head -c 3073 /dev/zero >"$c10/test_batch.bin"
c10_names() { # c10_names JSON: every top class is named, from the meta file
    "$py" -c 'import json, sys
n = "airplane automobile bird cat deer dog frog horse ship truck".split()
r = json.loads(open(sys.argv[1]).read())
assert len(r["top"]) == 10 and all(t["name"] == n[t["class"]] for t in r["top"]), r' "$1"
}
for c in "$c10" "$tmp/cp/"; do
    predict --json --top 10 --classes "$c" "$tmp/g.jpg" >"$tmp/c10.json" 2>"$tmp/c10.err"
    check "--classes $c: a CIFAR-10 folder's batches.meta.txt names the classes" c10_names "$tmp/c10.json"
done
head -n 9 "$c10/batches.meta.txt" >"$tmp/nine" && mv "$tmp/nine" "$c10/batches.meta.txt"
expect_fail_line "--classes a CIFAR-10 folder of 9 names is refused" \
    "--classes $c10: 9 names, but the model has 10 classes" predict --classes "$c10" "$tmp/g.jpg"
rm "$c10/batches.meta.txt" && mkfifo "$c10/batches.meta.txt"
expect_fail_line "--classes: a FIFO at batches.meta.txt is refused, named" \
    "$c10/batches.meta.txt" predict --classes "$c10" "$tmp/g.jpg"
mkdir "$tmp/neither"
expect_fail_line "--classes a folder of neither kind says what it takes" \
    "a CIFAR-10 folder holds batches.meta.txt" predict --classes "$tmp/neither" "$tmp/g.jpg"
# --json's probabilities in full precision: weights whose logits are 0 for
# nine classes and -40 for the last give it exp(-40) / (9 + exp(-40)),
# about 4.7e-19, which 6 fixed decimals printed as 0.000000.
"$py" - "$tmp/w.st" "$tmp/tiny.st" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, data = json.loads(b[8:8 + n]), bytearray(b[8 + n:])
def put(name, values):
    lo, hi = h[name]["data_offsets"]
    data[lo:hi] = struct.pack("<%df" % len(values), *values)
put("dense0.weight", [0.0] * 640)
put("dense0.bias", [0.0] * 9 + [-40.0])
open(sys.argv[2], "wb").write(b[:8 + n] + bytes(data))
EOF
"$bin/dprun" predict "$tmp/c.plan" --device cpu --load-params "$tmp/tiny.st" --json --top 10 "$tmp/g.jpg" \
    >"$tmp/tiny.json" 2>"$tmp/tiny.err"
tiny_prob() {
    "$py" -c 'import json, math, sys
t = json.loads(open(sys.argv[1]).read())["top"]
want = math.exp(-40) / (9 + math.exp(-40))
assert t[9]["class"] == 9 and abs(t[9]["prob"] - want) <= 1e-12 * want, t[9]
assert all(abs(e["prob"] - 1 / (9 + math.exp(-40))) <= 1e-15 for e in t[:9]), t' "$1"
}
check "--json: a probability of 4.7e-19 keeps its digits: $(tail -c 60 "$tmp/tiny.json")" tiny_prob "$tmp/tiny.json"
check "--json: no probability is printed as 0.000000" lacks "0.000000" "$tmp/tiny.json"
printf 'cat\nd\0g\n' >"$tmp/nul.txt"
expect_fail_line "a NUL byte in --classes is refused, naming the line" \
    "--classes $tmp/nul.txt: line 2 holds a NUL byte" predict --classes "$tmp/nul.txt" "$tmp/g.jpg"

# ---- SIGTERM during an image-folder load -----------------------------------------
jpeg "$tmp/big.jpg" 2048 2048 0 || bad "test_image --jpeg big"
for i in $(seq 1 400); do ln "$tmp/big.jpg" "$tmp/f/train/a/big$i.jpg"; done
"$bin/dprun" "$tmp/if.plan" --device cpu --data "$tmp/f" --steps 1 --data-workers 2 >/dev/null 2>"$tmp/term.err" &
pid=$!
# The signal goes once dprun catches SIGTERM (bit 14 of SigCgt), which it
# does just before the load: sooner, it would die of the default action
# without a word (a slow machine, the sanitizer suite).
for _ in $(seq 300); do
    cgt=$(awk '/^SigCgt:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    [ -n "$cgt" ] && (((16#$cgt >> 14) & 1)) && break
    sleep 0.05
done
kill -TERM "$pid"
t0=$(date +%s)
wait "$pid"
rc=$?
check "one SIGTERM during the load ends the run (exit 143)" [ "$rc" = 143 ]
check "... within 10 s" [ $(($(date +%s) - t0)) -le 10 ]
check "... during the set-up, saying so" grep -q "interrupted (SIGTERM) before training started" "$tmp/term.err"
finish
