#!/usr/bin/env bash
# run: tier=check san=no
# scripts/plot: metrics files in, one well-formed SVG out (checked with
# Python's XML parser): one curve per run in each panel, the legend names
# the runs, axes carry ticks and labels; metrics written by dprun itself
# plot too; bad input gives one `plot: error:` line and exit 1, never a
# traceback. Runs from the repository root. Prints `N passed, N failed`.
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
else
    bad "no $bin/dprun (run make first)"
fi

# ---- bad input --------------------------------------------------------------
printf '{"epoch": 0, "train_loss": 2.3}\n{"epoch": 1, "train_loss": \n' >"$tmp/badjson.jsonl"
printf '{"epoch": 0, "lr": 0.1}\n' >"$tmp/noloss.jsonl"
printf '{"epoch": -1, "train_loss": 1}\n' >"$tmp/negepoch.jsonl"
printf '{"epoch": 0, "train_loss": NaN}\n' >"$tmp/nan.jsonl"
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
expect_plot_fail nan-loss "nan.jsonl:1: 'train_loss' is NaN, not a finite number" "$tmp/nan.jsonl"
expect_plot_fail accuracy-range "acc.jsonl:1: 'test_accuracy' 7.0 is outside 0..1" "$tmp/acc.jsonl"
expect_plot_fail not-object "list.jsonl:1: a JSON object per line expected" "$tmp/list.jsonl"
expect_plot_fail empty "empty.jsonl: no epochs (empty file?)" "$tmp/empty.jsonl"
expect_plot_fail blank "blank.jsonl: no epochs" "$tmp/blank.jsonl"
expect_plot_fail binary "binary.jsonl: cannot read" "$tmp/binary.jsonl"
expect_plot_fail folder "folder.jsonl: cannot read: Is a directory" "$tmp/folder.jsonl"
expect_plot_fail empty-name "empty run name" "=$tmp/run1.jsonl"
expect_plot_fail unknown-option "unknown option --frobnicate" --frobnicate "$tmp/run1.jsonl"
expect_plot_fail o-without-value "-o needs a value" "$tmp/run1.jsonl" -o
expect_plot_fail unwritable "cannot write" -o "$tmp/no/such/dir/x.svg" "$tmp/run1.jsonl"
check "no output file after an error" test ! -e "$tmp/no/such/dir/x.svg"

finish
