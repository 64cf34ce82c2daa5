#!/usr/bin/env bash
# run: tier=test
# Attacks on every reader of untrusted bytes, each input made here (nothing
# committed), each run under `timeout` and `/usr/bin/time -f '%e %M'`: the
# image decoders (dprun --data on an image folder, dprun predict on files and
# a folder), .npy arrays, --classes, the --conv auto tuning record in the
# kernel cache, scripts/convert_weights.py (dpc-convert) and scripts/plot.
# For every case: the exit status (1 for a refusal, 0 where the input is
# valid), exactly one line naming the file (for a refusal, stderr is that
# one line), no sanitizer report or Python traceback, the wall seconds and
# the largest resident set under the case's limits, whose reasons the
# comments give. Each case prints a row `| reader | attack | exit | s | MiB |
# verdict |`, and the table goes to $DPC_ATTACK_TABLE too when it is set.
# Run it on the ASan build (DPC_BUILD=build/asan DPC_BIN=build/asan/bin),
# as the sanitizer suite does; the limits hold on the release build too.
# `make test` runs two or three attacks on each reader; test-full all of
# them (about 75 cases, 16 s under ASan on a 2-core machine).
#
# Limits. Time: a refusal costs dprun its start and the file's header,
# never the decoding of what the header declares (measured under ASan:
# 0.01-0.1 s); 20 s is that a hundred times over, for a machine busy with
# other builds, and still far under what a decoded bomb or a quadratic
# walk costs (16 s for the 16 GiB PNG, 120 s for the 10^5-line record
# before they were fixed). A valid input that trains a step, and the Python
# tools (their interpreter's start), get their own limits below. Memory:
# dprun's own resident set under ASan is 18-70 MiB (its shadow, the cpu
# pool, the plan's buffers); 512 MiB bounds it where nothing the input
# declares may be allocated; a case that may allocate what the documented
# caps allow says so.
. tests/lib.sh
export DPC_CACHE_DIR=${DPC_CACHE_DIR:-$tmp/cache}
mkdir -p "$DPC_CACHE_DIR"
full=0
tier_at_least full && full=1
timer=/usr/bin/time
if [ ! -x $timer ]; then
    bad "no $timer (Debian's time: scripts/deps.sh test installs it)"
    finish
    exit
fi
have_image=0
grep -q '^HAVE_IMAGE := 1' build/config.mk 2>/dev/null && have_image=1
table=$tmp/table.md
printf '| reader | attack | exit | seconds | max RSS MiB | verdict |\n|---|---|---|---|---|---|\n' >"$table"

# attack READER ATTACK RC SECONDS MIB WANT CMD...: runs CMD (killed at
# 3 x SECONDS + 10) and checks it: exit RC; WANT (a literal) on exactly one
# stderr line, and for RC 1 stderr that line alone (WANT empty: no line
# saying error); no sanitizer report nor traceback; at most SECONDS wall
# seconds and MIB MiB resident. Its output stays in $tmp/out, $tmp/err.
attack() {
    local reader=$1 what=$2 want_rc=$3 sec=$4 mib=$5 want=$6
    shift 6
    local rc t m why=''
    # CMD may be one of the functions below (exported): bash runs it.
    $timer -o "$tmp/time" -f '%e %M' timeout -s KILL $((3 * sec + 10)) bash -c '"$@"' attack "$@" \
        >"$tmp/out" 2>"$tmp/err" </dev/null
    rc=$?
    # time's last line (before it: "Command exited with non-zero status N")
    read -r t m < <(tail -n 1 "$tmp/time")
    case "$t $m" in *[!0-9.\ ]* | ' ') t=0 m=0 ;; esac
    m=$((m / 1024))
    [ "$rc" = "$want_rc" ] || why="exit $rc, want $want_rc;"
    if grep -qE 'Sanitizer|runtime error:|^Traceback' "$tmp/err"; then why="$why a sanitizer report or traceback;"; fi
    if [ -n "$want" ]; then
        local n
        n=$(grep -cF -- "$want" "$tmp/err")
        [ "$n" = 1 ] || why="$why $n lines naming '$want', want 1;"
        if [ "$want_rc" = 1 ] && [ "$(wc -l <"$tmp/err")" != 1 ]; then why="$why stderr of $(wc -l <"$tmp/err") lines;"; fi
    elif grep -qi 'error' "$tmp/err"; then
        why="$why an error line;"
    fi
    awk -v t="$t" -v s="$sec" 'BEGIN { exit !(t <= s) }' || why="$why ${t}s over ${sec}s;"
    [ "$m" -le "$mib" ] || why="$why ${m} MiB over ${mib} MiB;"
    local verdict=ok
    if [ -n "$why" ]; then
        verdict="FAIL:${why%;}"
        bad "$reader: $what: ${why%;} (stderr: $(head -c 600 "$tmp/err"))"
    else
        ok
    fi
    # The attack's text as a table cell: no | or control bytes.
    local cell=${what//|//}
    printf '| %s | %s | %s | %s | %s | %s |\n' "$reader" "${cell//[$'\001'-$'\037']/?}" "$rc" "$t" "$m" "$verdict" |
        tee -a "$table"
}

# ---- the hostile files: one Python program writes them all ---------------------------------
# Bytes only (struct, zlib, zipfile, json): no PIL, no NumPy.
mkdir -p "$tmp/in"
$py - "$tmp/in" "$full" <<'PY' || bad "writing the hostile inputs"
import json, os, struct, sys, zipfile, zlib
d, full = sys.argv[1], sys.argv[2] == "1"
def w(name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
def chunk(t, b):
    return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
def zeros_deflated(n):
    """A zlib stream of n zero bytes (n a multiple of 1 MiB), made in
    milliseconds: after a full flush the compressor forgets its history, so
    every further MiB deflates to the same bytes."""
    co = zlib.compressobj(9)
    mib = bytes(1 << 20)
    first = co.compress(mib) + co.flush(zlib.Z_FULL_FLUSH)
    again = co.compress(mib) + co.flush(zlib.Z_FULL_FLUSH)
    tail = co.flush()[:-4]
    return first + again * (n // len(mib) - 1) + tail + struct.pack(">I", (n % 65521) << 16 | 1)
def png(w_, h_, idat, depth=8, ctype=0):
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w_, h_, depth, ctype, 0, 0, 0))
            + b"".join(chunk(b"IDAT", idat[i:i + (1 << 20)]) for i in range(0, len(idat), 1 << 20))
            + chunk(b"IEND", b""))
# A valid 40x36 grey PNG; truncated; declaring 100000x100000; declaring
# 16384x4096 (64 Mi px, the cap) with one row of data; a bomb: 40x36
# declared, 16 GiB of zeros deflated (16 MB) in its IDAT.
good = png(40, 36, zlib.compress(bytes(41 * 36)))
w("good.png", good)
w("trunc.png", good[:len(good) // 2])
w("huge.png", png(100000, 100000, zlib.compress(bytes(100))))
w("cap.png", png(16384, 4096, zlib.compress(bytes(16385))))
w("bomb.png", png(40, 36, zeros_deflated((16 if full else 1) << 30)))
w("empty.jpg", b"")
# Adam7-interlaced 37x29 RGB, valid (the last row is pass 7's), and as a
# bomb: the same with 1 GiB of zeros deflated after its rows.
def adam7(tail=0):
    raw = b""
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)):
        n = len(range(x0, 37, dx))
        raw += b"".join(b"\0" + bytes((3 * (x + y) + c) % 251 for x in range(n) for c in range(3)) for y in range(y0, 29, dy))
    co = zlib.compressobj(9)
    z = co.compress(raw) + co.flush(zlib.Z_FULL_FLUSH)
    if tail:  # its trailer's checksum is the first MiB's: the bomb is refused before it
        z += (co.compress(bytes(1 << 20)) + co.flush(zlib.Z_FULL_FLUSH)) * tail
    z += co.flush()
    ihdr = struct.pack(">IIBBBBB", 37, 29, 8, 2, 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", z) + chunk(b"IEND", b"")
w("adam7.png", adam7())
w("adam7bomb.png", adam7(1024))
# .npy: a valid uint8 N x 32 x 32 x 3 set of 4 images, and forged train_x.
def npy(descr, shape, body, fortran="False", version=1, header=None):
    h = header if header is not None else "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, fortran, "(" + "".join("%s, " % s for s in shape) + ")")
    fmt = "<H" if version == 1 else "<I"
    pre = 6 + 2 + struct.calcsize(fmt)
    if header is None:
        h = h + " " * ((64 - (pre + len(h) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack(fmt, len(h)) + h.encode("latin1") + body
os.makedirs(f"{d}/npy")
x, y = npy("|u1", (4, 32, 32, 3), bytes(4 * 3072)), npy("|u1", (4,), bytes([0, 1, 0, 1]))
for s in ("train", "test"):
    w(f"npy/{s}_x.npy", x); w(f"npy/{s}_y.npy", y)
body = bytes(4 * 3072)
forged = {
    "magic": b"\x93NUMPZ" + x[6:],
    "hlen": b"\x93NUMPY\x01\x00" + struct.pack("<H", 65535) + x[10:200],
    "overflow": npy("|u1", (2147483647, 2147483647, 2147483647, 3), body),
    "negative": npy("|u1", (-4, 32, 32, 3), body),
    "fortran": npy("|u1", (4, 32, 32, 3), body, fortran="True"),
    "dtype": npy("<f8", (4, 32, 32, 3), body),
    "object": npy("|O", (4, 32, 32, 3), body),
    "unterminated": npy("|u1", (), body, header="{'descr': '|u1', 'fortran_order': False, 'shape': (4, 32, 32, 3), " + " " * 50),
    "hugeheader": npy("|u1", (), body, version=2, header="{'descr': '|u1', " + " " * (2 << 20) + "}\n"),
    "hlen4g": b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xffffffff) + x[10:200],
}
for k, v in forged.items():
    os.makedirs(f"{d}/npy_{k}")
    for s in ("train", "test"):
        w(f"npy_{k}/{s}_x.npy", v if s == "train" else x); w(f"npy_{k}/{s}_y.npy", y)
# --classes: 10^6 names; 300; a NUL; a line of 1 MiB; invalid UTF-8 (valid).
w("names_1e6.txt", "".join(f"c{i}\n" for i in range(10 ** 6)).encode())
w("names_300.txt", "".join(f"c{i}\n" for i in range(300)).encode())
w("names_nul.txt", b"cat\nd\0g\n" + b"x\n" * 8)
w("names_long.txt", b"a" * (1 << 20) + b"\n" + b"x\n" * 9)
w("names_utf8.txt", b"\xff\xfe\n\xc3\x28\n\xed\xa0\x80\n" + b"x\n" * 7)
# dpc-convert: safetensors and .npz.
def st(header, data=b""):
    h = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(h)) + h + data
w("deep.safetensors", st(b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}"))
w("overlap.safetensors", st({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                               "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, bytes(24)))
w("frac.safetensors", st({"a": {"dtype": "F32", "shape": [64.5], "data_offsets": [0, 258]}}, bytes(258)))
w("neg.safetensors", st({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, bytes(16)))
w("hlen.safetensors", struct.pack("<Q", 2 ** 64 - 1) + b"{}")
def npz(name, members, method=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(os.path.join(d, name), "w", method) as z:
        for k, v in members.items():
            z.writestr(k, v)
npz("object.npz", {"a.npy": npy("|O", (2,), bytes(16))})
npz("frac.npz", {"a.npy": npy("<f4", (), bytes(16), header="{'descr': '<f4', 'fortran_order': False, 'shape': (64.5,), }")})
npz("neg.npz", {"a.npy": npy("<f4", (), bytes(16), header="{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }")})
# A zip bomb: 256 MiB of zeros in about 256 KB, declared honestly.
npz("bomb.npz", {"a.npy": npy("|u1", (256 << 20,), bytes(256 << 20))})
# A lying one: its headers declare 1 KiB, the data inflates to 256 MiB.
with open(f"{d}/bomb.npz", "rb") as f:
    b = f.read()
size = zipfile.ZipFile(f"{d}/bomb.npz").infolist()[0].file_size
w("liar.npz", b.replace(struct.pack("<I", size), struct.pack("<I", 1024)))
# scripts/plot metrics.
w("m_invalid.jsonl", b'{"epoch": 0, "train_loss": 1.0}\n{"epoch": 1, "train_loss": \n')
w("m_nan.jsonl", b'{"epoch": 0, "train_loss": 2.0}\n{"epoch": 1, "train_loss": nan}\n{"epoch": 2, "train_loss": NaN}\n')
w("m_nan_acc.jsonl", b'{"epoch": 0, "train_loss": 2.0, "test_accuracy": NaN}\n')
w("m_deep.jsonl", b"[" * 200000 + b"\n")
w("m_digits.jsonl", b'{"epoch": 0, "train_loss": ' + b"9" * 4000 + b"}\n")
w("m_span.jsonl", b'{"epoch": 0, "train_loss": 1e308}\n{"epoch": 1, "train_loss": -1e308}\n')
w("m_subnormal.jsonl", b'{"epoch": 0, "train_loss": 5e-324}\n{"epoch": 1, "train_loss": 1e-320}\n')
if full:
    w("m_line.jsonl", b'{"epoch": 0, "train_loss": 1.0, "note": "' + b"a" * (100 << 20) + b'"}\n')
    w("m_badline.jsonl", b'{"epoch": 0, "train_loss": 1.0, "note": "' + b"a" * (100 << 20) + b"\n")
PY
in=$tmp/in
# The commands attack() runs through bash -c, and what they read.
predict() { "$bin/dprun" predict "$tmp/c.plan" --device cpu --load-params "$tmp/w.st" "$@"; }
auto() { DPC_CACHE_DIR=$tc "$bin/dprun" "$tmp/auto.plan" --device cpu --data synthetic --steps 1 --final-eval none; }
conv() { "$py" scripts/convert_weights.py --from torchvision --model resnet18 "$1" "$tmp/out.safetensors"; }
plot() { "$py" scripts/plot -o "$tmp/p.svg" "$@"; }
tc=$tmp/tunecache
export -f predict auto conv plot
export bin tmp tc py

# ---- images: dprun predict on files and folders, dprun --data on an image folder ------------
if [ $have_image = 1 ]; then
    jpeg() { "$build/tests/test_image" --jpeg "$@"; } # OUT W H SCANS (0 baseline, 1: 190 scans)
    jpeg "$in/good.jpg" 40 36 0 && jpeg "$in/scans.jpg" 64 48 1 || bad "test_image --jpeg"
    head -c "$(($(stat -c %s "$in/good.jpg") / 2))" "$in/good.jpg" >"$in/trunc.jpg"
    # The baseline frame header (FF C0, length, precision, then height and
    # width) rewritten to 65000 x 65000.
    $py - "$in/good.jpg" "$in/huge.jpg" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); i = b.index(b"\xff\xc0")
b[i + 5:i + 9] = (65000).to_bytes(2, "big") * 2
open(sys.argv[2], "wb").write(b)
PY
    "$bin/dpc" models/cnn_small.net -o "$tmp/c.plan" || bad "compile cnn_small"
    "$bin/dprun" "$tmp/c.plan" --device cpu --data synthetic --steps 1 --save-params "$tmp/w.st" >/dev/null 2>&1 ||
        bad "train the model predict uses"
    ln -s /proc/self/mem "$in/mem.jpg" && ln -s /dev/zero "$in/zero.png"
    odd=$in/$'x\033[31m\xff\xfe.jpg' && cp "$in/good.jpg" "$odd"
    oddbad=$in/$'bad\001\xc3\x28.png' && cp "$in/trunc.png" "$oddbad"
    # Each file refused before any pixel of what it declares is allocated:
    # 20 s and 512 MiB (above).
    for c in "trunc.jpg:truncated JPEG:not a valid JPEG image" "trunc.png:truncated PNG:not a valid PNG image" \
        "huge.jpg:JPEG declaring 65000x65000:the image declares size 65000x65000" \
        "huge.png:PNG declaring 100000x100000:the image declares size 100000x100000" \
        "scans.jpg:progressive JPEG of 190 scans:more than 100 scans" \
        "bomb.png:PNG bomb ($([ $full = 1 ] && echo 16 || echo 1) GiB of zeros in its IDAT):past the image's last row" \
        "adam7bomb.png:interlaced PNG bomb (1 GiB of zeros after pass 7):past the image's last row" \
        "empty.jpg:zero-size file:the file is empty" "mem.jpg:link to /proc/self/mem:a file of the kernel's" \
        "zero.png:link to /dev/zero:not a regular file"; do
        IFS=: read -r f what want <<<"$c"
        [ $full = 1 ] || case $f in trunc.jpg | bomb.png | mem.jpg | zero.png) ;; *) continue ;; esac
        attack "predict FILE" "$what" 1 20 512 "$in/$f: " predict "$in/$f"
        grep -qF -- "$want" "$tmp/err" || bad "predict $what: '$(cat "$tmp/err")' lacks '$want'"
    done
    # 16384x4096 declared (the 64 Mi px cap) with one row of data: its
    # 192 MiB of RGB is allocated before the data runs out. 1 GiB: that,
    # ASan's shadow of it (an eighth) and dprun's own, with room.
    [ $full = 1 ] && attack "predict FILE" "PNG declaring 16384x4096 (the pixel cap), one row of data" 1 20 1024 \
        "$in/cap.png: not a valid PNG image" predict "$in/cap.png"
    attack "predict FILE" "valid Adam7-interlaced PNG (the control)" 0 20 512 "" predict "$in/adam7.png"
    # A name of control bytes and invalid UTF-8: a valid image is read
    # (exit 0; the name escaped on stdout), a bad one refused, escaped.
    attack "predict FILE" "valid JPEG named ESC [31m \\xff\\xfe" 0 20 512 "" predict "$odd"
    check "... its name escaped on stdout" grep -qF 'x\x1b[31m\xff\xfe.jpg:' "$tmp/out"
    attack "predict FILE" "truncated PNG named \\001 \\xc3(" 1 20 512 "$in/bad\\x01\\xc3(.png: not a valid PNG" predict "$oddbad"
    rm -f "$odd" "$oddbad"
    # dprun predict DIR: a loop of links walks each folder once (2 images).
    mkdir -p "$tmp/loop/sub" && cp "$in/good.jpg" "$tmp/loop/a.jpg" && cp "$in/good.png" "$tmp/loop/sub/b.png"
    for i in 1 2 3 4 5 6 7 8; do ln -s . "$tmp/loop/s$i" && ln -s .. "$tmp/loop/sub/up$i" && ln -s ../sub "$tmp/loop/sub/x$i"; done
    attack "predict DIR" "link loop of folders (24 links to . .. ../sub)" 0 20 512 "" predict "$tmp/loop"
    check "... each image once" [ "$(wc -l <"$tmp/out")" = 2 ]
    mkdir "$tmp/zd" && cp "$in/good.jpg" "$tmp/zd/a.jpg" && ln -s /dev/zero "$tmp/zd/b.jpg"
    attack "predict DIR" "a link to /dev/zero among the images" 1 20 512 "$tmp/zd/b.jpg: " predict "$tmp/zd"
    if [ $full = 1 ]; then
        # 30000 empty folders and an image: each folder is stat'ed and
        # listed once (a hash set of the folders walked); 20 s, 512 MiB
        # (the 30000 paths are a few MiB).
        mkdir -p "$tmp/wide" && (cd "$tmp/wide" && seq 1 30000 | xargs mkdir) && cp "$in/good.png" "$tmp/wide/a.png"
        attack "predict DIR" "30000 empty subfolders and one image" 0 20 512 "" predict "$tmp/wide"
        rm -rf "$tmp/wide"
    fi

    # dprun --data DIR on an image folder: the hostile file among valid ones.
    printf '%s\n' 'input image[3, 32, 32]' 'input label class(2)' 'network tiny {' \
        '    logits = dense(global_avgpool(conv(image, 4, k=3, s=2, p=1)), 2)' \
        '    loss = softmax_cross_entropy(logits, label)' '}' 'train {' '    batch 2 per device' \
        '    lr {0: 0.05}' '    data imagefolder { resize 32 }' '}' >"$tmp/if.net"
    "$bin/dpc" "$tmp/if.net" -o "$tmp/if.plan" || bad "compile an image-folder plan"
    folder() { # folder FILE: a fresh image folder with FILE as train/b/x.EXT
        rm -rf "$tmp/f" && mkdir -p "$tmp/f/train/a" "$tmp/f/train/b" "$tmp/f/val/a" "$tmp/f/val/b"
        local c; for c in a b; do cp "$in/good.jpg" "$tmp/f/train/$c/1.jpg" && cp "$in/good.png" "$tmp/f/val/$c/1.png"; done
        cp -P "$1" "$tmp/f/train/b/x.${1##*.}"
    }
    for c in "trunc.jpg:truncated JPEG" "trunc.png:truncated PNG" "huge.png:PNG declaring 100000x100000" \
        "scans.jpg:progressive JPEG of 190 scans" "bomb.png:PNG bomb" "empty.jpg:zero-size file" \
        "mem.jpg:link to /proc/self/mem" "zero.png:link to /dev/zero"; do
        IFS=: read -r f what <<<"$c"
        [ $full = 1 ] || case $f in bomb.png | zero.png) ;; *) continue ;; esac
        folder "$in/$f"
        # As predict's, on two data workers: 20 s, 512 MiB.
        attack "--data imagefolder" "$what" 1 20 512 "$tmp/f/train/b/x.${f##*.}: " \
            "$bin/dprun" "$tmp/if.plan" --device cpu --data "$tmp/f" --steps 1 --data-workers 2
    done
else
    skip "dpc built without libjpeg/libpng: the image attacks"
fi

# ---- .npy: dprun --data DIR with a data npy plan ----------------------------------------------
printf '%s\n' 'input image[3, 32, 32]' 'input label class(2)' 'network tiny {' \
    '    logits = dense(global_avgpool(conv(image, 4, k=3, s=2, p=1)), 2)' \
    '    loss = softmax_cross_entropy(logits, label)' '}' 'train {' '    batch 2 per device' \
    '    lr {0: 0.05}' '    data npy' '}' >"$tmp/npy.net"
"$bin/dpc" "$tmp/npy.net" -o "$tmp/npy.plan" || bad "compile an npy plan"
# The header is parsed (at most 1 MiB) and checked against the file's size
# before the records are allocated: 20 s, 512 MiB.
for c in "magic:bad magic" "hlen:header length 65535 in a 200-byte file" \
    "overflow:shape (2^31-1, 2^31-1, 2^31-1, 3): its product overflows size_t" \
    "negative:negative shape (-4, 32, 32, 3)" "fortran:fortran_order True" "dtype:dtype <f8" \
    "object:dtype |O (pickled objects)" "unterminated:header without } or newline" \
    "hugeheader:a header of 2 MiB" "hlen4g:v2 header length 2^32-1"; do
    IFS=: read -r k what <<<"$c"
    [ $full = 1 ] || case $k in overflow | hugeheader) ;; *) continue ;; esac
    attack ".npy" "$what" 1 20 512 "$in/npy_$k/train_x.npy: " \
        "$bin/dprun" "$tmp/npy.plan" --device cpu --data "$in/npy_$k" --steps 1
done
# The valid set trains a step: 30 s (a step of the tiny net), 512 MiB.
attack ".npy" "valid uint8 set (the control)" 0 30 512 "" "$bin/dprun" "$tmp/npy.plan" --device cpu --data "$in/npy" --steps 1

# ---- --classes: dprun predict --classes FILE ------------------------------------------------------
if [ $have_image = 1 ]; then
    # A names file is read whole, at most 1 MiB: 20 s, 512 MiB.
    for c in "names_1e6.txt:10^6 names (6.9 MB):more than the 1048576" "names_300.txt:300 names:more than 256 class names" \
        "names_nul.txt:a NUL byte:line 2 holds a NUL byte" "names_long.txt:a line of 1 MiB:more than the 1048576"; do
        IFS=: read -r f what want <<<"$c"
        [ $full = 1 ] || case $f in names_1e6.txt | names_nul.txt) ;; *) continue ;; esac
        attack "--classes" "$what" 1 20 512 "--classes $in/$f: " predict --classes "$in/$f" "$in/good.jpg"
        grep -qF -- "$want" "$tmp/err" || bad "--classes $what: '$(cat "$tmp/err")' lacks '$want'"
    done
    attack "--classes" "invalid UTF-8 names (valid: 10 names)" 0 20 512 "" predict --classes "$in/names_utf8.txt" "$in/good.jpg"
    check "... printed escaped" grep -qE '\\xff\\xfe|\\xc3\(|\\xed' "$tmp/out"
fi

# ---- the --conv auto tuning record (runtime/device/tune.c) ------------------------------------------
# A record is found by name in the kernel cache after one run; each attack
# rewrites it, and the next run reads it: a malformed line is one notice
# naming the record (exit 0, those convolutions measured again), never a
# failure. The runs train one step of cnn_small at batch 2: 60 s (the
# step, its kernels compiled once into the cache, and the record's lines:
# 10^5 of them read in linear time), 512 MiB (dprun's own; a record is
# read only up to 32 MiB).
mkdir -p "$tc"
"$bin/dpc" models/cnn_small.net --batch 2 --target cpu --conv auto -o "$tmp/auto.plan" || bad "compile --conv auto"
auto >/dev/null 2>&1 || bad "a --conv auto run"
rec=$(ls "$tc" | grep tune | head -n 1)
if [ -z "$rec" ]; then
    bad "no tuning record in $tc"
else
    good=$(grep '^conv ' "$tc/$rec" | head -n 1)
    desc=${good% * * *} # "conv DESC", its way and times dropped
    forge() { # forge ATTACK WANT PYTHON: the record := PYTHON's stdout (given the good line)
        local what=$1 want=$2
        $py -c "$3" "$good" >"$tc/$rec"
        attack "tune record" "$what" 0 60 "${mib:-512}" "$want" auto
    }
    note="$tc/$rec: "
    for c in "long:a line of 1 MiB:print(sys.argv[1][:-1] + '0' * (1 << 20))" \
        "e308:times of 1e308:print(sys.argv[1].rsplit(' ', 2)[0] + ' 1e308 1e308')" \
        "nan:times of nan:print(sys.argv[1].rsplit(' ', 2)[0] + ' nan nan')" \
        "neg:times of -1:print(sys.argv[1].rsplit(' ', 2)[0] + ' -1 -1')" \
        "garbage:binary garbage (bytes 1-255, no NUL):sys.stdout.buffer.write(bytes(range(1, 256)) * 64)"; do
        IFS=: read -r k what prog <<<"$c"
        [ $full = 1 ] || case $k in long | garbage) ;; *) continue ;; esac
        forge "$what" "$note" "import sys; $prog"
        grep -q 'malformed line' "$tmp/err" || bad "tune record $what: no notice ($(cat "$tmp/err"))"
    done
    # Valid records: no notice at all.
    forge "the same descriptor 10^4 times" "" "import sys; print('\n'.join([sys.argv[1]] * 10000))"
    check "... no notice" lacks "$rec" "$tmp/err"
    # 10^5 distinct valid descriptors (batch 3 .. 100002): read in linear
    # time, and written back with the run's own (100 MiB of text at most,
    # 1 KiB a line): 1 GiB, for that and ASan's quarantine of what was freed
    # (256 MiB by default).
    mib=1024 forge "10^5 distinct valid lines" "" "import sys; f = sys.argv[1].split(' '); print('\n'.join(' '.join(f[:2] + [str(n)] + f[3:]) for n in range(3, 100003)))"
    check "... no notice" lacks "$rec" "$tmp/err"
    if [ $full = 1 ]; then
        truncate -s 40M "$tc/$rec"
        attack "tune record" "a record of 40 MiB (over its 32 MiB)" 0 60 512 "$note" auto
    fi
fi

# ---- scripts/convert_weights.py (dpc-convert) ---------------------------------------------------------
# Each refusal comes before the tensors are decoded: 30 s (Python and
# NumPy start in about 0.3 s; the 2 MiB-deep header's scan), 512 MiB
# (the input, at most 1 GiB, is read whole: these are a few MB).
if "$py" -c 'import numpy' 2>/dev/null; then
    for c in "deep.safetensors:JSON header nested 100000 deep" "overlap.safetensors:overlapping data_offsets" \
        "frac.safetensors:shape [64.5]" "neg.safetensors:shape [-4]" "hlen.safetensors:header length 2^64-1" \
        "object.npz:.npz of an object (pickled) array" "frac.npz:.npz shape (64.5,)" "neg.npz:.npz shape (-4,)" \
        "bomb.npz:.npz zip bomb (256 MiB of zeros in 256 KB)" "liar.npz:.npz member declaring 1 KiB, inflating to 256 MiB"; do
        IFS=: read -r f what <<<"$c"
        [ $full = 1 ] || case $f in deep.safetensors | bomb.npz) ;; *) continue ;; esac
        attack "dpc-convert" "$what" 1 30 512 "$in/$f: " conv "$in/$f"
    done
else
    skip "no NumPy for $py (python3-numpy): the dpc-convert attacks"
fi

# ---- scripts/plot (dpc-plot) --------------------------------------------------------------------------
# Python's start and one file's parse: 30 s, 512 MiB for a small file (a
# 100 MiB line gets its own limits).
mkfifo "$tmp/fifo.jsonl"
truncate -s 300M "$tmp/big.jsonl"
for c in "/dev/zero:/dev/zero" "$tmp/fifo.jsonl:a FIFO" "$tmp/big.jsonl:a 300 MiB file" \
    "$in/m_invalid.jsonl:invalid JSON" "$in/m_nan_acc.jsonl:test_accuracy NaN" \
    "$in/m_deep.jsonl:a row of 200000 nested [" "$in/m_digits.jsonl:a loss of 4000 digits"; do
    f=${c%:*} what=${c##*:}
    [ $full = 1 ] || case $what in 'a FIFO' | 'a row of'*) ;; *) continue ;; esac
    attack "plot" "$what" 1 30 512 "$f" plot "$f"
done
for c in "$in/m_nan.jsonl:losses nan and NaN (a diverged run)" "$in/m_span.jsonl:losses 1e308 and -1e308" \
    "$in/m_subnormal.jsonl:losses 5e-324 and 1e-320"; do
    f=${c%:*} what=${c##*:}
    [ $full = 1 ] || case $what in *1e308*) ;; *) continue ;; esac
    attack "plot" "$what" 0 30 512 "" plot "$f"
done
if [ $full = 1 ]; then
    # A 100 MiB line: read (100 MiB), decoded to a str (100 MiB), split
    # and parsed (its 100 MiB string once more): 1 GiB, 60 s.
    attack "plot" "a valid row of 100 MiB" 0 60 1024 "" plot "$in/m_line.jsonl"
    attack "plot" "an unterminated row of 100 MiB" 1 60 1024 "$in/m_badline.jsonl" plot "$in/m_badline.jsonl"
fi

[ -n "${DPC_ATTACK_TABLE:-}" ] && cp "$table" "$DPC_ATTACK_TABLE"
finish
