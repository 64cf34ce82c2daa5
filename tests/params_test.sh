#!/usr/bin/env bash
# run: tier=check
# Parameter names: `dpc --params` lists exactly what dprun's
# --save-params writes (names, shapes, order) and the totals --summary
# counts; --summary labels the nodes inside blocks with their scoped names;
# --load-params of a partial file: refused naming the first missing tensor,
# or with --allow-missing PATTERN loaded with the rest at their seeded
# initial values and every loaded, initialised and skipped tensor reported;
# --name-map reads a file under other names; --allow-unused skips tensors
# no parameter takes; a shape mismatch is an error naming both shapes.
. tests/lib.sh
export DPC_CACHE_DIR=${DPC_CACHE_DIR:-$build/cache}
net=models/cnn_small.net
plan=$tmp/c.plan
"$bin/dpc" "$net" --batch 8 -o "$plan" || { bad "dpc $net"; finish; exit; }

# ---- dpc --params against a --save-params file ----
"$bin/dpc" "$net" --params >"$tmp/params.txt" || bad "dpc --params"
"$bin/dprun" "$plan" --steps 1 --seed 3 --save-params "$tmp/a.st" >/dev/null 2>&1 || bad "dprun --save-params"
# the file's header, in its order: NAME d0,d1,...
$py - "$tmp/a.st" >"$tmp/saved.txt" <<'PY'
import json, struct, sys
d = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', d[:8])[0]
for k, v in json.loads(d[8:8 + n]).items():
    if k != '__metadata__':
        print(k, ','.join(map(str, v['shape'])))
PY
awk 'NR > 1 && ($1 == "param" || $1 == "state") { s = $3; gsub(/[][]/, "", s); print $2, s }' \
    "$tmp/params.txt" >"$tmp/listed.txt"
check "--params lists what --save-params writes, in its order" cmp -s "$tmp/listed.txt" "$tmp/saved.txt"
[ "$(wc -l <"$tmp/listed.txt")" = 27 ] && ok || bad "cnn_small: $(wc -l <"$tmp/listed.txt") tensors, want 27"
grep -q '^state unit0.batchnorm0.running_mean ' "$tmp/params.txt" && grep -q '^param unit0.batchnorm0.gamma ' "$tmp/params.txt" &&
    ok || bad "--params tells parameters from BatchNorm statistics: $(head -5 "$tmp/params.txt")"
want=$("$bin/dpc" "$net" --summary | tail -n 1) # parameters: N
got=$(tail -n 1 "$tmp/params.txt")
case "$got" in "param: ${want#parameters: } trained in 17 tensors; state: 288 in 10 tensors"*"total 29306") ok ;;
*) bad "--params totals '$got' against --summary's '$want'" ;; esac
# a model whose BatchNorm has scale=false: its fixed gamma is state
"$bin/dpc" models/resnet18_v2.net --params | grep -q '^state batchnorm0.gamma ' && ok ||
    bad "resnet18_v2's fixed gamma is not listed as state"

# ---- --summary: nodes inside blocks have scoped names ----
"$bin/dpc" models/resnet18.net --summary >"$tmp/summary.txt"
for want in "conv  *basic0.conv0 " "batchnorm  *down0.batchnorm2 " "relu  *basic0.y " "add  *down1.add " \
    "dense  *dense0 " "bias_add  *logits " "softmax_cross_entropy  *loss "; do
    grep -Eq " $want" "$tmp/summary.txt" && ok || bad "--summary lacks '$want'"
done
# inside blocks nothing is '-' any more (the network's own pooling still is)
n=$(awk 'NR > 1 && $3 == "-"' "$tmp/summary.txt" | grep -cv -E ' (maxpool|global_avgpool) ')
[ "$n" = 0 ] && ok || bad "$n nodes of resnet18 unnamed in --summary"

# ---- partial loading ----
$py - "$tmp" <<'PY'
import json, struct, sys
d = sys.argv[1]
def rd(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: (v['shape'], b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]) for k, v in h.items()}
def wr(p, t):
    h, off, blobs = {}, 0, []
    for k, (s, b) in t.items():
        h[k] = {'dtype': 'F32', 'shape': s, 'data_offsets': [off, off + len(b)]}
        off += len(b); blobs.append(b)
    hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
    open(p, 'wb').write(struct.pack('<Q', len(hb)) + hb + b''.join(blobs))
t = rd(f'{d}/a.st')
wr(f'{d}/nohead.st', {k: v for k, v in t.items() if not k.startswith('dense0.')})
# torchvision-like names for the head, plus a tensor nothing takes
f = {('fc.' + k[7:] if k.startswith('dense0.') else k): v for k, v in t.items()}
f['fc.num_batches_tracked_f32'] = ([1], bytes(4))
wr(f'{d}/foreign.st', f)
wr(f'{d}/badshape.st', {**t, 'dense0.bias': ([11], bytes(44))})
open(f'{d}/map', 'w').write('# dpc name    file name\ndense0.weight fc.weight\n\ndense0.bias   fc.bias   # the head\n')
open(f'{d}/map2', 'w').write('dense0.weight fc.weight extra\n')
open(f'{d}/map3', 'w').write('dense0.weight fc.weight\ndense0.bias fc.weight\n')
open(f'{d}/map4', 'w').write('dense0.bias dense0.weight\n')
PY
fail_prefix='*dprun: error: '
run() { "$bin/dprun" "$plan" --steps 0 --seed 3 "$@"; }
expect_fail "a partial file without --allow-missing names the first missing tensor" \
    "nohead.st: no tensor 'dense0.weight' (cnn_small needs every parameter and BatchNorm statistic; 2 missing, 2 of them not matched by --allow-missing PATTERN" \
    run --load-params "$tmp/nohead.st"
run --load-params "$tmp/nohead.st" --allow-missing 'dense0.*' --save-params "$tmp/part.st" \
    >/dev/null 2>"$tmp/part.err" || bad "--allow-missing 'dense0.*': $(cat "$tmp/part.err")"
grep -q -- "--load-params $tmp/nohead.st: 25 loaded, 2 missing (initialised), 0 skipped" "$tmp/part.err" &&
    grep -q "initialised dense0.weight \[10,64\]" "$tmp/part.err" && grep -q "initialised dense0.bias \[10\]" "$tmp/part.err" &&
    ok || bad "the report of a partial load: $(cat "$tmp/part.err")"
# the loaded tensors are the file's, the missing ones a fresh run's seeded values
run --save-params "$tmp/fresh.st" >/dev/null 2>&1 || bad "dprun --steps 0 --save-params"
$py - "$tmp" <<'PY' && ok || bad "partial load: wrong values"
import json, struct, sys
d = sys.argv[1]
def rd(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items()}
a, part, fresh = rd(f'{d}/a.st'), rd(f'{d}/part.st'), rd(f'{d}/fresh.st')
bad = [k for k in part if part[k] != (fresh[k] if k.startswith('dense0.') else a[k])]
bad += [k for k in part if k.startswith('dense0.') and part[k] == a[k]]
sys.exit(1 if bad or len(part) != 27 else 0)
PY
expect_fail "--allow-missing that matches nothing missing" "no tensor 'dense0.weight'" \
    run --load-params "$tmp/nohead.st" --allow-missing 'unit*'
expect_fail "--allow-missing that matches one of two" \
    "no tensor 'dense0.weight' (cnn_small needs every parameter and BatchNorm statistic; 2 missing, 1 of them not" \
    run --load-params "$tmp/nohead.st" --allow-missing 'dense0.b*'
# --name-map and --allow-unused
expect_fail "a tensor nothing takes" \
    "foreign.st: tensor 'fc.weight' is not a parameter of cnn_small (--allow-unused skips it)" \
    run --load-params "$tmp/foreign.st"
expect_fail "--name-map: a tensor no name maps" \
    "tensor 'fc.num_batches_tracked_f32' is not a parameter of cnn_small nor mapped to one by $tmp/map" \
    run --load-params "$tmp/foreign.st" --name-map "$tmp/map"
run --load-params "$tmp/foreign.st" --name-map "$tmp/map" --allow-unused --save-params "$tmp/mapped.st" \
    >/dev/null 2>"$tmp/map.err" || bad "--name-map --allow-unused: $(cat "$tmp/map.err")"
grep -q "27 loaded, 0 missing (initialised), 1 skipped" "$tmp/map.err" &&
    grep -q "skipped 'fc.num_batches_tracked_f32' \[1\]" "$tmp/map.err" && ok || bad "the report: $(cat "$tmp/map.err")"
$py - "$tmp/a.st" "$tmp/mapped.st" <<'PY' && ok || bad "--name-map loaded other values"
import json, struct, sys
def rd(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items()}
sys.exit(0 if rd(sys.argv[1]) == rd(sys.argv[2]) else 1)
PY
expect_fail "a file read under its own names where the map says otherwise" \
    "tensor 'dense0.weight' is not read: $tmp/map reads that parameter from 'fc.weight'" \
    run --load-params "$tmp/a.st" --name-map "$tmp/map"
expect_fail "a map line of three words" "map2:1: expected \`DPC_NAME FILE_NAME\`, got 3 words or more" \
    run --load-params "$tmp/a.st" --name-map "$tmp/map2"
expect_fail "a file name mapped twice" "map3:2: file name 'fc.weight' is mapped twice" \
    run --load-params "$tmp/a.st" --name-map "$tmp/map3"
expect_fail "a map naming another parameter's own name" \
    "a.st: tensor 'dense0.weight' would be read for both dense0.weight and dense0.bias ($tmp/map4)" \
    run --load-params "$tmp/a.st" --name-map "$tmp/map4"
printf 'dense0.weight fc\033[31m\n' >"$tmp/map5"
expect_fail "a map's control characters are refused, escaped" "map5:1: the name 'fc\\x1b[31m' has control characters" \
    run --load-params "$tmp/a.st" --name-map "$tmp/map5"
expect_fail "a map that is a device" "/dev/zero: not a regular file" \
    run --load-params "$tmp/a.st" --name-map /dev/zero
expect_fail "--save-params over the --name-map" "--save-params $tmp/map is --name-map" \
    run --load-params "$tmp/foreign.st" --name-map "$tmp/map" --allow-unused --save-params "$tmp/map"
expect_fail "a shape mismatch names both shapes" \
    "badshape.st: tensor 'dense0.bias' has shape [11]; cnn_small needs [10]" \
    run --load-params "$tmp/badshape.st" --allow-missing '*' --allow-unused
expect_fail "--allow-missing needs --load-params" "--allow-missing needs --load-params" \
    run --allow-missing 'dense0.*'
finish
