#!/usr/bin/env bash
# run: tier=test
# The image-folder dataset (train/CLASS/*, val/CLASS/*: JPEG and PNG through
# libjpeg-turbo and libpng) and .npy arrays, on data this test writes: a few
# steps train, deterministically whatever the data workers; the decoder's
# pixels are PIL's (the same libraries); damaged, bogus and huge-declared
# files, a class-count mismatch and bad .npy headers each get one line
# naming the file or the counts.
. tests/lib.sh
fail_prefix='*dprun: error: '
net() { # net FILE CLASSES DATA
    cat >"$1" <<EOF
input image[3, 32, 32]
input label class($2)
network tiny {
    x = relu(batchnorm(conv(image, 8, k=3, s=2, p=1, bias=false)))
    x = relu(batchnorm(conv(x, 16, k=3, s=2, p=1, bias=false)))
    logits = dense(global_avgpool(x), $2)
    loss = softmax_cross_entropy(logits, label)
}
train {
    batch 4 per device
    epochs 2
    lr {0: 0.05}
    data $3
    eval batch 4
}
EOF
}
folder='imagefolder { resize 36; random_crop 32; random_mirror; normalize mean(0.5, 0.5, 0.5) std(0.25, 0.25, 0.25) }'
if ! grep -q '^HAVE_IMAGE := 1' build/config.mk 2>/dev/null; then
    # A build without the libraries says so, naming the folder.
    mkdir -p "$tmp/x/train/a" "$tmp/x/val/a" && echo x >"$tmp/x/train/a/1.png" && cp "$tmp/x/train/a/1.png" "$tmp/x/val/a/"
    net "$tmp/t1.net" 1 "$folder" && "$bin/dpc" "$tmp/t1.net" -o "$tmp/t1.plan"
    expect_fail_line "a build without libjpeg/libpng says so" "$tmp/x: dpc was built without libjpeg/libpng" \
        "$bin/dprun" "$tmp/t1.plan" --device cpu --data "$tmp/x" --steps 1
    skip "dpc built without libjpeg/libpng: the image-folder checks"
    finish
    exit
fi
d=$tmp/imgs
$py - "$tmp" <<'PY'
import os, random, struct, sys, zlib
import numpy as np
from PIL import Image
root = sys.argv[1]
rnd = random.Random(7)
def picture(k, w, h):
    a = np.zeros((h, w, 3), np.uint8)
    base = [40, 40, 40]; base[k % 3] = 200
    for y in range(h):
        for x in range(w):
            for c in range(3):
                a[y, x, c] = max(0, min(255, base[c] + rnd.randint(-30, 30) + (2 * x if k == 0 else 2 * y if k == 1 else 0)))
    return Image.fromarray(a)
# 3 classes; 40x36 and 36x44 images; PNG as RGB, RGBA, grey, palette; JPEG as RGB, grey.
for split, n in (("train", 6), ("val", 2)):
    for k, cls in enumerate(["cat", "dog", "eel"]):
        os.makedirs(f"{root}/imgs/{split}/{cls}")
        for i in range(n):
            im = picture(k, *((40, 36) if i % 2 == 0 else (36, 44)))
            p = f"{root}/imgs/{split}/{cls}/{i:02d}"
            [lambda: im.save(p + ".png"), lambda: im.convert("L").save(p + ".jpg", quality=90),
             lambda: im.save(p + ".jpg", quality=90), lambda: im.convert("RGBA").save(p + ".png"),
             lambda: im.convert("P").save(p + ".png"), lambda: im.convert("L").save(p + ".png")][i % 6]()
# Hostile files, each put in a copy of the folder by the checks below.
good_jpg = open(f"{root}/imgs/train/cat/02.jpg", "rb").read()
good_png = open(f"{root}/imgs/train/cat/00.png", "rb").read()
os.makedirs(f"{root}/bad")
open(f"{root}/bad/trunc.jpg", "wb").write(good_jpg[:len(good_jpg) // 2])
open(f"{root}/bad/trunc.png", "wb").write(good_png[:len(good_png) // 2])
open(f"{root}/bad/text.jpg", "wb").write(b"this is not a picture\n")
open(f"{root}/bad/empty.png", "wb").write(b"")
open(f"{root}/bad/garbage.jpg", "wb").write(good_jpg[:200] + bytes(rnd.randrange(256) for _ in range(2000)))
def chunk(t, b): return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
bomb = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")
open(f"{root}/bad/bomb.png", "wb").write(bomb)
# The pixels PIL decodes, for the decoder's check.
for name in ("train/cat/02.jpg", "train/cat/01.jpg", "train/cat/03.png", "train/cat/04.png", "train/cat/05.png"):
    Image.open(f"{root}/imgs/{name}").convert("RGB").save(f"{root}/{name.replace('/', '_')}.ppm")
# .npy: the same kind of data, N x H x W x C uint8 and N x C x H x W float32.
os.makedirs(f"{root}/npy")
x = np.stack([np.asarray(picture(i % 3, 32, 32)) for i in range(24)])
y = np.array([i % 3 for i in range(24)], np.int64)
np.save(f"{root}/npy/train_x.npy", x); np.save(f"{root}/npy/train_y.npy", y)
np.save(f"{root}/npy/test_x.npy", (x[:6].transpose(0, 3, 1, 2) / 255).astype(np.float32))
np.save(f"{root}/npy/test_y.npy", y[:6].astype(np.uint8))
PY
[ -d "$d/train/cat" ] || { bad "the test's python could not write the folder"; finish; exit; }

net "$tmp/t.net" 3 "$folder"
net "$tmp/t4.net" 4 "$folder"
net "$tmp/n.net" 3 'npy { pad 2; random_crop 32; random_mirror }'
plan=$tmp/t.plan
for n in t t4 n; do
    "$bin/dpc" "$tmp/$n.net" -o "$tmp/$n.plan" || { bad "dpc $n.net"; finish; exit; }
done

# Training: the same losses with 0 and 2 data workers and in a second run.
losses() { sed 's/"seconds.*"test_accuracy/"test_accuracy/; s/"seconds.*//' "$1"; }
train() { # train METRICS WORKERS
    "$bin/dprun" "$plan" --device cpu --data "$d" --seed 5 --data-workers "$2" --metrics "$1" >"$1.log" 2>&1
}
check "training on an image folder runs" train "$tmp/m0.jsonl" 0
check "it reads 18 train / 6 val images in 3 classes" grep -q '18 train / 6 test images' "$tmp/m0.jsonl.log"
train "$tmp/m2.jsonl" 2
train "$tmp/m0b.jsonl" 0
check "0 and 2 data workers give the same losses" cmp -s <(losses "$tmp/m0.jsonl") <(losses "$tmp/m2.jsonl")
check "two runs give the same losses" cmp -s <(losses "$tmp/m0.jsonl") <(losses "$tmp/m0b.jsonl")
check "the losses are there" grep -q '"train_loss": [0-9]' "$tmp/m0.jsonl"
"$bin/dprun" "$plan" --device cpu --data "$d" --seed 6 --data-workers 0 --metrics "$tmp/m6.jsonl" >/dev/null 2>&1
check "another seed gives other losses" bash -c "! cmp -s <(sed 's/\"seconds.*//' '$tmp/m0.jsonl') <(sed 's/\"seconds.*//' '$tmp/m6.jsonl')"

# The decoder's pixels against PIL's (the same libjpeg-turbo and libpng).
# PNG is lossless; a JPEG's pixels depend on the IDCT and upsampling each
# caller picks (integer IDCTs round differently, by one level at most).
same_pixels() { # same_pixels NAME: exact for PNG, within 1 for JPEG
    $py - "$tmp/${1//\//_}.ppm" "$tmp/dec.rgb" "$2" <<'PY'
import sys
from PIL import Image
im = Image.open(sys.argv[1]); w, h = im.size
want, got = im.tobytes(), open(sys.argv[2], "rb").read()
ok = len(got) == len(want) and max(abs(a - b) for a, b in zip(want, got)) <= int(sys.argv[3])
sys.exit(0 if ok and sys.argv[3] is not None else 1)
PY
}
for f in train/cat/02.jpg:1 train/cat/01.jpg:1 train/cat/03.png:0 train/cat/04.png:0 train/cat/05.png:0; do
    name=${f%:*} tol=${f#*:}
    if "$build/tests/test_image" "$d/$name" "$tmp/dec.rgb" >/dev/null; then
        check "$name decodes to PIL's pixels (within $tol)" same_pixels "$name" "$tol"
    else
        bad "test_image could not decode $name"
    fi
done

# Hostile files: one line naming the file, exit 1, never a crash.
hostile() { # hostile FILE WANT
    rm -rf "$tmp/h" && cp -r "$d" "$tmp/h" && cp "$tmp/bad/$1" "$tmp/h/train/dog/$1"
    expect_fail_line "$1 is refused" "$tmp/h/train/dog/$1: $2" \
        "$bin/dprun" "$plan" --device cpu --data "$tmp/h" --steps 1
}
hostile trunc.jpg "not a valid JPEG image"
hostile trunc.png "not a valid PNG image"
hostile text.jpg "not a JPEG or PNG image"
hostile empty.png "not a JPEG or PNG image"
hostile garbage.jpg "not a valid JPEG image"
hostile bomb.png "the image declares size 100000x100000"
expect_fail_line "--data DIR/: the file is named DIR/train/..., one slash" "$tmp/h/train/dog/bomb.png: the image" \
    "$bin/dprun" "$plan" --device cpu --data "$tmp/h/" --steps 1
rm -rf "$tmp/h" && cp -r "$d" "$tmp/h" && cp "$tmp/bad/text.jpg" "$tmp/h/train/cat/zz.jpg" && cp "$tmp/bad/trunc.png" "$tmp/h/train/eel/00.png"
expect_fail_line "of two bad files, decoded on 4 threads, the first is named" "$tmp/h/train/cat/zz.jpg: not a JPEG or PNG image" \
    "$bin/dprun" "$plan" --device cpu --data "$tmp/h" --steps 1 --data-workers 4
rm -rf "$tmp/h" && cp -r "$d" "$tmp/h" && mkfifo "$tmp/h/train/eel/fifo.png"
expect_fail_line "a FIFO among the images is refused, not read" "$tmp/h/train/eel/fifo.png" \
    timeout 20 "$bin/dprun" "$plan" --device cpu --data "$tmp/h" --steps 1

# Classes: the model's count and val's set must be train's.
expect_fail_line "a model of 4 classes on a folder of 3 is refused" \
    "the model has 4 classes but $d has 3 (its train/ class folders)" \
    "$bin/dprun" "$tmp/t4.plan" --device cpu --data "$d" --steps 1
rm -rf "$tmp/h" && cp -r "$d" "$tmp/h" && mv "$tmp/h/val/eel" "$tmp/h/val/fox"
expect_fail_line "val with other classes is refused" "the class sets differ" \
    "$bin/dprun" "$plan" --device cpu --data "$tmp/h" --steps 1
expect_fail_line "an image-folder plan without --data is refused" "--data DIR names the image folder" \
    "$bin/dprun" "$plan" --device cpu --steps 1
"$bin/dpc" models/cnn_small.net -o "$tmp/cifar.plan"
expect_fail_line "a cifar10 plan on an image folder says which data section it needs" \
    "$d looks like an image folder, but the plan's data section reads cifar10" \
    "$bin/dprun" "$tmp/cifar.plan" --device cpu --data "$d" --steps 1
expect_fail_line "a folder without train/ is refused" "an image folder holds train/CLASS/*" \
    "$bin/dprun" "$plan" --device cpu --data "$tmp/bad" --steps 1

# dprun predict: the trained weights' top classes for the val images.
w=$tmp/w.safetensors
"$bin/dprun" "$plan" --device cpu --data "$d" --seed 5 --data-workers 0 --save-params "$w" >"$tmp/acc.log" 2>&1
predict() { "$bin/dprun" predict "$plan" --device cpu --load-params "$w" "$@"; }
check "predict prints a line per val image" \
    bash -c "[ \$('$bin/dprun' predict '$plan' --device cpu --load-params '$w' '$d/val' | wc -l) = 6 ]"
predict --top 2 --json --classes "$d" "$d/val" >"$tmp/p.jsonl" 2>"$tmp/p.err"
predict --top 3 "$d/val/cat/00.png" "$d/val/dog/01.jpg" >"$tmp/p.txt" 2>>"$tmp/p.err"
printf 'cat\ndog\neel\n' >"$tmp/names.txt"
predict --top 1 --classes "$tmp/names.txt" "$d/val/eel" >"$tmp/p1.txt" 2>>"$tmp/p.err"
json_ok() {
    $py - "$tmp/p.jsonl" "$d" "$tmp/acc.log" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 6, rows
for r in rows:
    top = r["top"]
    assert len(top) == 2 and all(0 <= t["prob"] <= 1 for t in top), r
    assert sum(t["prob"] for t in top) <= 1 + 1e-6, r  # f32 softmax: a few roundings of 2^-24
    assert top[0]["prob"] >= top[1]["prob"], r
    assert top[0]["name"] == ["cat", "dog", "eel"][top[0]["class"]], r
    assert r["file"].startswith(sys.argv[2] + "/val/"), r
# The top class is right as often as the run's test accuracy says.
right = sum(r["top"][0]["name"] == r["file"].split("/")[-2] for r in rows)
acc = float(re.search(r"test accuracy ([0-9.]+)", open(sys.argv[3]).read()).group(1))
assert abs(right / 6 - acc) < 1e-3, (right, acc)  # the log's accuracy has 3 decimals: 5e-4
PY
}
check "predict --json parses: top-2 with probabilities summing to at most 1, names, the run's accuracy" json_ok
text_ok() {
    $py - "$tmp/p.txt" "$tmp/p1.txt" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 2 and lines[0].split(":")[0].endswith("val/cat/00.png"), lines
for l in lines:
    pairs = [p.split() for p in l.split(": ", 1)[1].split(", ")]
    assert len(pairs) == 3 and sorted(int(c) for c, _ in pairs) == [0, 1, 2], l
    probs = [float(p) for _, p in pairs]
    # three probabilities printed to 3 decimals: 3 x 5e-4 off their sum
    assert abs(sum(probs) - 1) < 2e-3 and probs == sorted(probs, reverse=True), l
names = [l.split(": ")[1].split()[0] for l in open(sys.argv[2])]
assert len(names) == 2 and set(names) <= {"cat", "dog", "eel"}, names
PY
}
check "predict's text lines: classes and probabilities summing to 1 (top 3 of 3)" text_ok
quiet() { ! grep -v -e '^dprun: note' -e '^dprun: --load-params .*: [0-9]* loaded' "$1" | grep -q .; }
check "predict says nothing on stderr but its notes and load report: $(cat "$tmp/p.err")" quiet "$tmp/p.err"
expect_fail_line "predict without weights is refused" "predict needs the trained weights: --load-params FILE" \
    "$bin/dprun" predict "$plan" --device cpu "$d/val"
expect_fail_line "predict names a bogus image" "$tmp/bad/text.jpg: not a JPEG or PNG image" \
    "$bin/dprun" predict "$plan" --device cpu --load-params "$w" "$d/val/cat/00.png" "$tmp/bad/text.jpg"
printf 'a\nb\n' >"$tmp/two.txt"
expect_fail_line "predict refuses a class list of the wrong length" "two.txt: 2 names, but the model has 3 classes" \
    "$bin/dprun" predict "$plan" --device cpu --load-params "$w" --classes "$tmp/two.txt" "$d/val"
$py -c "from PIL import Image; Image.open('$d/train/dog/02.jpg').resize((640, 480)).save('$tmp/big.jpg')"
check "predict takes a large JPEG (decoded at a DCT scale)" \
    bash -c "'$bin/dprun' predict '$plan' --device cpu --load-params '$w' --top 1 '$tmp/big.jpg' | grep -q 'big.jpg: [0-2] '"

# .npy: uint8 NHWC train, float32 NCHW test; strict headers.
npy_train() {
    "$bin/dprun" "$tmp/n.plan" --device cpu --data "$tmp/npy" --seed 1 --data-workers "$2" --metrics "$1" >"$1.log" 2>&1
}
cp -r "$tmp/npy" "$tmp/nb0"
check "training on .npy arrays runs" npy_train "$tmp/n0.jsonl" 0
npy_train "$tmp/n2.jsonl" 2
check ".npy: 0 and 2 data workers give the same losses" cmp -s <(losses "$tmp/n0.jsonl") <(losses "$tmp/n2.jsonl")
check ".npy: 24 train / 6 test images" grep -q '24 train / 6 test images' "$tmp/n0.jsonl.log"
expect_fail_line ".npy: --save-params over the labels is refused" "test_y.npy" \
    "$bin/dprun" "$tmp/n.plan" --device cpu --data "$tmp/npy" --steps 1 --save-params "$tmp/npy/test_y.npy"
check ".npy: ... and the labels are still there" cmp -s "$tmp/npy/test_y.npy" "$tmp/nb0/test_y.npy"
npy_bad() { # npy_bad NAME WANT PYTHON-EDIT-OF-HEADER
    rm -rf "$tmp/nb" && cp -r "$tmp/npy" "$tmp/nb"
    $py - "$tmp/nb/train_x.npy" "$3" <<'PY'
import sys
p, (old, new) = sys.argv[1], sys.argv[2].split("=>")
b = open(p, "rb").read()
assert old.encode() in b[:128], old
open(p, "wb").write(b.replace(old.encode(), new.encode().ljust(len(old)), 1))
PY
    expect_fail_line "$1" "$tmp/nb/train_x.npy: $2" "$bin/dprun" "$tmp/n.plan" --device cpu --data "$tmp/nb" --steps 1
}
npy_bad ".npy: a big-endian dtype is refused" "dtype '>u1' is not read" "'|u1'=>'>u1'"
npy_bad ".npy: fortran_order True is refused" "fortran_order True" "False=>True"
npy_bad ".npy: an unknown key is refused" "unexpected .npy header key 'shapes'" "'shape'=>'shapes'"
npy_bad ".npy: a shape larger than the data is refused" "the shape and dtype say" "(24,=>(25,"
npy_bad ".npy: a bad magic is refused" "not a .npy file" "NUMPY=>NUMPZ"
finish
