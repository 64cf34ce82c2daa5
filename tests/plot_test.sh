#!/usr/bin/env bash
# run: tier=check san=no
# scripts/plot: metrics files in, one well-formed SVG out (checked with
# Python's XML parser): one curve per run in each panel, the legend names
# the runs, axes carry ticks and labels; metrics written by dprun itself
# plot too; bad input gives one `plot: error:` line and exit 1, never a
# traceback; only regular files of at most 256 MiB are read (/dev/zero, a
# FIFO, /proc, a larger file refused, never waited on). Every text element lies inside the canvas (many long names, a
# long title, diverged runs, per-step rows), legend entries never overlap,
# a diverged run (huge loss, dprun's bare nan) is clipped with a mark and
# named in the legend, per-step rows plot per step; rsvg-convert (when
# there) renders each picture at the SVG's size with the runs' colours in
# it. Runs from the repository root. Prints `N passed, N failed`.
. tests/lib.sh
plot=scripts/plot

# expect_plot_fail NAME WANT ARGS...: scripts/plot ARGS exits 1 with one line
# `plot: error: ...WANT`.
expect_plot_fail() {
    local name=$1 want=$2; shift 2
    local err rc
    err=$("$plot" "$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 1 ]; then bad "$name: exit $rc, want 1 ($err)"; return; fi
    if [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ]; then bad "$name: more than one line: $err"; return; fi
    case "$err" in "plot: error: "*"$want"*) ok ;; *) bad "$name: '$err' lacks '$want'" ;; esac
}

# Three runs like the article's: 45 epochs with test accuracy every 5, one
# with accuracy only at the end, a short one.
$py - "$tmp" <<'EOF'
import json, sys
d = sys.argv[1]
def write(name, rows):
    with open(f'{d}/{name}', 'w') as f:
        for r in rows:
            f.write(json.dumps(r) + '\n')
write('run1.jsonl', [dict(epoch=e, lr=0.1, train_loss=2.3 / (1 + e), batch=128, steps=390, seconds=24.1,
                          img_per_s=2075.0, input_wait_s=0.0, **({'test_accuracy': 0.4 + e / 100} if e % 5 == 4 else {}))
                     for e in range(45)])
write('run2.jsonl', [dict(epoch=e, lr=0.1, train_loss=2.3 / (1 + 0.5 * e)) for e in range(44)]
                    + [dict(epoch=44, lr=0.01, train_loss=0.2, test_accuracy=0.77, train_accuracy=0.8)])
write('short.jsonl', [dict(epoch=0, lr=0.1, train_loss=2.3, test_accuracy=0.1)])
EOF

# checksvg FILE RUNS...: parses, 2 panels with one run path per run each,
# legend names, ticks and axis labels.
checksvg() {
    $py - "$@" <<'EOF'
import sys, xml.etree.ElementTree as ET
path, names = sys.argv[1], sys.argv[2:]
ns = {'s': 'http://www.w3.org/2000/svg'}
root = ET.parse(path).getroot()
assert root.tag == '{http://www.w3.org/2000/svg}svg', root.tag
panels = root.findall('s:g[@class="panel"]', ns)
assert [p.get('id') for p in panels] == ['loss', 'accuracy'], [p.get('id') for p in panels]
for p in panels:
    runs = [e.get('data-run') for e in p.findall('s:path[@class="run"]', ns)]
    assert runs == names, (p.get('id'), runs, names)
    for e in p.findall('s:path[@class="run"]', ns):
        assert e.get('d').startswith('M'), e.get('d')
    assert len(p.findall('s:text[@class="xtick"]', ns)) >= 2, 'x ticks'
    assert len(p.findall('s:text[@class="ytick"]', ns)) >= 3, 'y ticks'
    assert p.find('s:text[@class="xlabel"]', ns).text == 'epoch'
    assert p.find('s:text[@class="ylabel"]', ns).text
legend = [t.text for t in root.findall('s:g[@id="legend"]/s:text', ns)]
assert legend == names, (legend, names)
EOF
}

"$plot" -o "$tmp/a.svg" --title 'ResNet-18 <CIFAR-10> & friends' "batch 128=$tmp/run1.jsonl" "b2048 <x&y>=$tmp/run2.jsonl" \
    "$tmp/short.jsonl" 2>"$tmp/a.err" || bad "plot three runs: $(cat "$tmp/a.err")"
check "three runs: SVG structure" checksvg "$tmp/a.svg" "batch 128" "b2048 <x&y>" "short"
check "nothing on stderr" test ! -s "$tmp/a.err"
"$plot" "$tmp/run1.jsonl" >"$tmp/stdout.svg" 2>/dev/null || bad "plot to stdout"
check "one run to stdout" checksvg "$tmp/stdout.svg" run1
check "accuracy points: one per measured epoch" $py -c "
import xml.etree.ElementTree as ET
ns = {'s': 'http://www.w3.org/2000/svg'}
root = ET.parse('$tmp/stdout.svg').getroot()
acc = root.find('s:g[@id=\"accuracy\"]', ns)
loss = root.find('s:g[@id=\"loss\"]', ns)
assert len(acc.findall('s:circle', ns)) == 9 and len(loss.findall('s:circle', ns)) == 45
"
check "loss curve goes down the page as the loss falls" $py -c "
import xml.etree.ElementTree as ET
ns = {'s': 'http://www.w3.org/2000/svg'}
root = ET.parse('$tmp/stdout.svg').getroot()
d = root.find('s:g[@id=\"loss\"]/s:path', ns).get('d').split()
ys = [float(p[1:].split(',')[1]) for p in d]
xs = [float(p[1:].split(',')[0]) for p in d]
assert ys == sorted(ys) and xs == sorted(xs) and ys[0] < ys[-1], (ys[:3], ys[-3:])
"

# What dprun writes plots as it is.
if [ -x "$bin/dprun" ] && [ -x "$bin/dpc" ]; then
    "$bin/dpc" models/mlp.net -o "$tmp/mlp.plan" || bad "compile mlp"
    "$bin/dprun" "$tmp/mlp.plan" --epochs 2 --eval-every 1 --metrics "$tmp/m.jsonl" >/dev/null 2>&1 || bad "dprun metrics"
    "$bin/dprun" "$tmp/mlp.plan" --steps 30 --final-eval both --metrics "$tmp/s.jsonl" >/dev/null 2>&1 || bad "dprun --steps metrics"
    "$plot" -o "$tmp/d.svg" "two epochs=$tmp/m.jsonl" "$tmp/s.jsonl" 2>"$tmp/d.err" || bad "plot dprun metrics: $(cat "$tmp/d.err")"
    check "dprun's metrics plot" checksvg "$tmp/d.svg" "two epochs" s
    # dprun's own step rows (--log-every), when this dprun has them.
    if "$bin/dprun" --help 2>&1 | grep -q -e '--log-every'; then
        "$bin/dprun" "$tmp/mlp.plan" --epochs 2 --log-every 5 --metrics "$tmp/l.jsonl" >/dev/null 2>&1 ||
            bad "dprun --log-every"
        "$plot" -o "$tmp/l.svg" "$tmp/l.jsonl" "$tmp/m.jsonl" 2>"$tmp/l.err" || bad "plot --log-every: $(cat "$tmp/l.err")"
        check "dprun's step rows plot per step" grep -q 'data-run="l" d="M[^"]* L' "$tmp/l.svg"
    fi
else
    bad "no $bin/dprun (run make first)"
fi

# ---- layout: every label in the canvas, diverged runs, per-step rows --------
# (a) twelve runs with long names and a long title, (b) diverged runs: one
# with a loss of 3.8e+29 and more, one whose loss turns to dprun's bare
# `-nan` (printf's, not JSON), (c) per-step rows (`dprun --log-every`) mixed
# with epoch rows in any order, alone and beside an epoch-only run.
$py - "$tmp" <<'EOF'
import json, math, sys
d = sys.argv[1]
def write(name, rows):
    with open(f'{d}/{name}', 'w') as f:
        f.writelines(r if isinstance(r, str) else json.dumps(r) + '\n' for r in rows)
for k in range(12):
    write(f'long{k}.jsonl', [dict(epoch=e, train_loss=2.3 / (1 + e * (k + 1) / 10), batch=128,
                                  **({'test_accuracy': min(1, 0.1 + e * (k + 1) / 100)} if e % 2 else {}))
                             for e in range(20)])
write('fine.jsonl', [dict(epoch=e, train_loss=2.3 / (1 + e), test_accuracy=0.3 + e / 20) for e in range(8)])
write('huge.jsonl', [dict(epoch=e, train_loss=v, test_accuracy=0.1)
                     for e, v in enumerate([2.3, 1.9, 40.0, 3.8e29, 2e30, 1e31, 5e30, 3e30])])
write('nan.jsonl', ['{"epoch": 0, "lr": 0.1, "train_loss": 2.4, "batch": 128, "test_accuracy": 0.200000}\n']
      + [f'{{"epoch": {e}, "lr": 0.1, "train_loss": {"-nan" if e > 3 else 1.5}, "batch": 128}}\n' for e in range(1, 8)])
rows = []
for s in range(1, 301):
    e = (s - 1) // 100
    rows.append(dict(step=s, epoch=e, loss=2.3 * math.exp(-s / 150) + 0.05 * math.sin(s), lr=0.1, img_per_s=900.0))
    if s % 100 == 0:
        rows.append(dict(epoch=e, lr=0.1, train_loss=2.3 * math.exp(-s / 200), batch=128, steps=100,
                         test_accuracy=0.3 + e / 10))
rows[5], rows[50] = rows[50], rows[5]
write('steps.jsonl', rows)
write('steps2.jsonl', [dict(step=s, epoch=(s - 1) // 100, loss=2.0 * math.exp(-s / 100)) for s in range(1, 301, 10)])
EOF

# inside_canvas SVG: every <text> element's box (0.6 font sizes a character,
# font size inherited, text-anchor and a rotate(-90) considered; from a font
# size above the baseline to 0.3 below) lies in the canvas, and no two
# legend entries or diverged-run labels overlap.
inside_canvas() {
    $py - "$1" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
S = '{http://www.w3.org/2000/svg}'
root = ET.parse(sys.argv[1]).getroot()
W, H = float(root.get('width')), float(root.get('height'))
assert root.get('viewBox') == f"0 0 {root.get('width')} {root.get('height')}", root.get('viewBox')
boxes, bad = [], []
def walk(e, size):
    size = float(e.get('font-size', size))
    if e.tag == S + 'text':
        text = ''.join(e.itertext())
        x, y, w = float(e.get('x')), float(e.get('y')), 0.6 * size * len(text)
        start = {'start': 0, 'middle': -w / 2, 'end': -w}[e.get('text-anchor', 'start')]
        if e.get('transform'):  # rotate(-90 x y): the text runs up from (x, y)
            m = re.fullmatch(r'rotate\(-90 ([-\d.]+) ([-\d.]+)\)', e.get('transform'))
            assert m and float(m[1]) == x and float(m[2]) == y, e.get('transform')
            box = (x - size, y - start - w, x + 0.3 * size, y - start)
        else:
            box = (x + start, y - size, x + start + w, y + 0.3 * size)
        if not (0 <= box[0] and box[2] <= W and 0 <= box[1] and box[3] <= H):
            bad.append(f'{text!r} at {tuple(round(b) for b in box)} leaves the {W:g}x{H:g} canvas')
        if e.get('class') in ('run-name', 'clip-label'):
            boxes.append((text, box))
    for c in e:
        walk(c, size)
walk(root, 12)
for i, (t1, a) in enumerate(boxes):
    for t2, b in boxes[i + 1:]:
        if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]:
            bad.append(f'{t1!r} overlaps {t2!r}')
if bad:
    sys.exit('\n'.join(bad[:5]))
EOF
}

# renders NAME: rsvg-convert draws $tmp/NAME.svg as a PNG of the SVG's size
# (read from the PNG header) that shows each run's colour.
renders() {
    rsvg-convert -o "$tmp/$1.png" "$tmp/$1.svg" || return 1
    $py - "$tmp/$1.svg" "$tmp/$1.png" <<'EOF'
import re, struct, sys
svg, png = open(sys.argv[1]).read(), open(sys.argv[2], 'rb').read()
assert png[:8] == b'\x89PNG\r\n\x1a\n' and png[12:16] == b'IHDR', 'not a PNG'
w, h = struct.unpack('>II', png[16:24])
want = tuple(int(float(v)) for v in re.search(r'<svg [^>]*width="([\d.]+)" height="([\d.]+)"', svg).groups())
assert (w, h) == want, ((w, h), want)
try:
    from PIL import Image
except ImportError:
    sys.exit(0)
img = Image.open(sys.argv[2]).convert('RGB')
seen = set(c for _, c in img.getcolors(w * h))
colours = re.findall(r'class="run" [^>]*stroke="#(\w{6})"', svg)
assert colours, 'no run curves'
for c in colours:
    assert tuple(int(c[i:i + 2], 16) for i in (0, 2, 4)) in seen, f'#{c} not in the picture'
EOF
}

long="a very long run name: batch 8192, LARS, linear scaling + 5-epoch warmup, label smoothing 0.1, run"
many=() names=()
for k in $(seq 0 11); do many+=("$long $k=$tmp/long$k.jsonl"); names+=("$long $k"); done
title="ResNet-18 on CIFAR-10, a title that is longer than the canvas is wide, so that the canvas has to grow with it"
"$plot" -o "$tmp/many.svg" --title "$title" --note "$long" "${many[@]}" 2>"$tmp/many.err" ||
    bad "plot many runs: $(cat "$tmp/many.err")"
check "many long names: structure" checksvg "$tmp/many.svg" "${names[@]}"
"$plot" --vs-batch -o "$tmp/vs.svg" --title "$title" "${many[@]}" 2>"$tmp/vs.err" ||
    bad "plot --vs-batch many runs: $(cat "$tmp/vs.err")"
"$plot" -o "$tmp/div.svg" --title diverged "fine run=$tmp/fine.jsonl" "exploded=$tmp/huge.jsonl" \
    "went NaN=$tmp/nan.jsonl" 2>"$tmp/div.err" || bad "plot diverged runs: $(cat "$tmp/div.err")"
"$plot" -o "$tmp/steps.svg" "$tmp/steps.jsonl" "$tmp/steps2.jsonl" 2>"$tmp/steps.err" ||
    bad "plot step rows: $(cat "$tmp/steps.err")"
"$plot" -o "$tmp/mixed.svg" "$tmp/steps.jsonl" "$tmp/fine.jsonl" 2>"$tmp/mixed.err" ||
    bad "plot step rows beside epoch rows: $(cat "$tmp/mixed.err")"
for f in many vs div steps mixed; do
    check "$f: every label inside the canvas: $(inside_canvas "$tmp/$f.svg" 2>&1)" inside_canvas "$tmp/$f.svg"
done
check "diverged runs: named in the legend, clipped with a mark, the axis scaled to the rest" $py - "$tmp/div.svg" <<'EOF'
import sys, xml.etree.ElementTree as ET
ns = {'s': 'http://www.w3.org/2000/svg'}
root = ET.parse(sys.argv[1]).getroot()
legend = [t.text for t in root.findall('s:g[@id="legend"]/s:text', ns)]
assert legend == ['fine run', 'exploded (diverged: loss 3.8e+29 at epoch 3)',
                  'went NaN (diverged: loss NaN at epoch 4)'], legend
loss = root.find('s:g[@id="loss"]', ns)
labels = sorted(t.text for t in loss.findall('s:text[@class="clip-label"]', ns))
assert labels == ['\u25b2 1e+31', '\u25b2 NaN'], labels
assert len(loss.findall('s:path[@class="clip"]', ns)) == 5 + 4, 'a mark per off-axis point'
top = max(float(t.text) for t in loss.findall('s:text[@class="ytick"]', ns))
assert 40 <= top < 100, top
EOF
check "step rows: the loss per optimizer step, accuracy per epoch" $py - "$tmp/steps.svg" <<'EOF'
import sys, xml.etree.ElementTree as ET
ns = {'s': 'http://www.w3.org/2000/svg'}
root = ET.parse(sys.argv[1]).getroot()
loss, acc = root.find('s:g[@id="loss"]', ns), root.find('s:g[@id="accuracy"]', ns)
assert loss.find('s:text[@class="xlabel"]', ns).text == 'optimizer step'
assert acc.find('s:text[@class="xlabel"]', ns).text == 'epoch'
paths = loss.findall('s:path[@class="run"]', ns)
assert [len(p.get('d').split()) for p in paths] == [300, 30], [len(p.get('d').split()) for p in paths]
xs = [float(q[1:].split(',')[0]) for q in paths[0].get('d').split()]
assert xs == sorted(xs), 'steps in order'
assert max(int(t.text) for t in loss.findall('s:text[@class="xtick"]', ns)) >= 300
assert len(acc.findall('s:circle', ns)) == 3
legend = [t.text for t in root.findall('s:g[@id="legend"]/s:text', ns)]
assert legend == ['steps', 'steps2 (no test accuracy)'], legend
EOF
check "step rows beside an epoch-only run: both on the epoch axis" $py - "$tmp/mixed.svg" <<'EOF'
import sys, xml.etree.ElementTree as ET
ns = {'s': 'http://www.w3.org/2000/svg'}
root = ET.parse(sys.argv[1]).getroot()
loss = root.find('s:g[@id="loss"]', ns)
assert loss.find('s:text[@class="xlabel"]', ns).text == 'epoch'
steps, fine = [[float(q[1:].split(',')[0]) for q in p.get('d').split()] for p in loss.findall('s:path[@class="run"]', ns)]
assert len(steps) == 300 and len(fine) == 8
assert abs(steps[-1] - fine[3]) < 1, (steps[-1], fine[3])  # step 300 ends epoch 2: at x = 3
EOF
for f in docs/scaling.svg docs/article/*/article.svg; do
    check "shipped $f: every label inside the canvas: $(inside_canvas "$f" 2>&1)" inside_canvas "$f"
done
if command -v rsvg-convert >/dev/null; then
    for f in many vs div steps mixed; do
        check "$f: renders as a PNG of its size with its runs' colours" renders "$f"
    done
else
    skip "no rsvg-convert (Debian's librsvg2-bin; scripts/deps.sh test installs it): the pictures are not rendered"
fi

# ---- bad input --------------------------------------------------------------
printf '{"epoch": 0, "train_loss": 2.3}\n{"epoch": 1, "train_loss": \n' >"$tmp/badjson.jsonl"
printf '{"epoch": 0, "lr": 0.1}\n' >"$tmp/noloss.jsonl"
printf '{"epoch": -1, "train_loss": 1}\n' >"$tmp/negepoch.jsonl"
printf '{"epoch": 0, "train_loss": 1, "test_accuracy": 7}\n' >"$tmp/acc.jsonl"
printf '[1, 2]\n' >"$tmp/list.jsonl"
printf '\n\n' >"$tmp/blank.jsonl"
: >"$tmp/empty.jsonl"
printf '\xff\xfe\x00garbage' >"$tmp/binary.jsonl"
mkdir "$tmp/folder.jsonl"
expect_plot_fail no-args "no metrics files" 
expect_plot_fail missing-file "nope.jsonl: cannot read: No such file or directory" "$tmp/nope.jsonl"
expect_plot_fail bad-json "badjson.jsonl:2: not JSON" "$tmp/run1.jsonl" "$tmp/badjson.jsonl"
expect_plot_fail no-loss "noloss.jsonl:1: no 'train_loss'" "$tmp/noloss.jsonl"
expect_plot_fail negative-epoch "negepoch.jsonl:1: no non-negative integer 'epoch'" "$tmp/negepoch.jsonl"
printf '{"epoch": 0, "train_loss": [1]}\n' >"$tmp/listloss.jsonl"
printf '{"step": 0, "epoch": 0, "loss": 1}\n' >"$tmp/step0.jsonl"
printf '{"step": 3, "epoch": 0, "lr": 0.1}\n' >"$tmp/steploss.jsonl"
expect_plot_fail loss-not-number "listloss.jsonl:1: 'train_loss' is [1], not a number" "$tmp/listloss.jsonl"
expect_plot_fail step-zero "step0.jsonl:1: 'step' is 0, not a positive integer" "$tmp/step0.jsonl"
expect_plot_fail step-without-loss "steploss.jsonl:1: a step row (it has 'step') without 'loss'" "$tmp/steploss.jsonl"
expect_plot_fail accuracy-range "acc.jsonl:1: 'test_accuracy' 7.0 is outside 0..1" "$tmp/acc.jsonl"
expect_plot_fail not-object "list.jsonl:1: a JSON object per line expected" "$tmp/list.jsonl"
expect_plot_fail empty "empty.jsonl: no epochs (empty file?)" "$tmp/empty.jsonl"
expect_plot_fail blank "blank.jsonl: no epochs" "$tmp/blank.jsonl"
expect_plot_fail binary "binary.jsonl: cannot read" "$tmp/binary.jsonl"
expect_plot_fail folder "folder.jsonl: not a regular file (a directory)" "$tmp/folder.jsonl"
# regular files only, within 256 MiB: refused before anything is read or waited on
expect_plot_fail dev-zero "/dev/zero: not a regular file (a device)" /dev/zero
mkfifo "$tmp/fifo.jsonl"
err=$(timeout 20 "$plot" "$tmp/fifo.jsonl" 2>&1 >/dev/null)
check "a FIFO is refused, not waited on: $err" test "$err" = "plot: error: $tmp/fifo.jsonl: not a regular file (a FIFO)"
expect_plot_fail proc "/proc/self/status: under /proc, not a metrics file" /proc/self/status
truncate -s $(((256 << 20) + 1)) "$tmp/huge.jsonl"
expect_plot_fail too-big "huge.jsonl: 268435457 bytes; at most 268435456 are read" "$tmp/huge.jsonl"
rm -f "$tmp/huge.jsonl"
printf '{]\n' >"$tmp/new
line.jsonl"
expect_plot_fail newline-in-name 'new\nline.jsonl:1: not JSON' "$tmp/new
line.jsonl"
expect_plot_fail empty-name "empty run name" "=$tmp/run1.jsonl"
expect_plot_fail unknown-option "unknown option --frobnicate" --frobnicate "$tmp/run1.jsonl"
expect_plot_fail o-without-value "-o needs a value" "$tmp/run1.jsonl" -o
expect_plot_fail unwritable "cannot write" -o "$tmp/no/such/dir/x.svg" "$tmp/run1.jsonl"
check "no output file after an error" test ! -e "$tmp/no/such/dir/x.svg"

finish
