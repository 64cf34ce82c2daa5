#!/usr/bin/env bash
# run: tier=check
# Hostile safetensors files given to --load-params: refused with
# a line that shows a name's control characters escaped, integers past
# what fits refused by value, and a header of many tensors refused at
# once, not after a pairwise name check of hours (timeout: a hang fails).
. tests/lib.sh
plan=$tmp/mlp.plan
"$bin/dpc" models/mlp.net -o "$plan" || { bad "dpc models/mlp.net"; finish; exit; }
fail_prefix='*dprun: error: '
not_esc() { case "$fail_err" in *$'\e'* | *$'\a'*) return 1 ;; esac; }
$py - "$tmp" <<'PY'
import json, struct, sys
d = sys.argv[1]
def write(name, header, data=b''):
    s = json.dumps(header).encode()
    open(f'{d}/{name}', 'wb').write(struct.pack('<Q', len(s)) + s + data)
f32 = lambda shape, b, e: {'dtype': 'F32', 'shape': shape, 'data_offsets': [b, e]}
write('esc.safetensors', {'dense0.bias\x1b[31m\nX': f32([2], 0, 8)}, bytes(8))
write('dtype.safetensors', {'dense0.bias': {'dtype': 'F16\x1b]0;owned\x07', 'shape': [2], 'data_offsets': [0, 4]}}, bytes(4))
write('wrap.safetensors', {'dense0.bias': f32([2**64 + 128], 0, 512)}, bytes(512))
n = 200000
write('many.safetensors', {f't{i}': f32([1], 4 * i, 4 * i + 4) for i in range(n)}, bytes(4 * n))
PY
expect_fail "a name's terminal escapes are escaped" \
    "esc.safetensors: tensor 'dense0.bias\\x1b[31m\\x0aX' is not a parameter of mlp" \
    "$bin/dprun" "$plan" --steps 0 --load-params "$tmp/esc.safetensors"
check "no raw ESC reaches the terminal" not_esc
expect_fail "a dtype's terminal escapes are escaped" \
    "tensor 'dense0.bias' has dtype F16\\x1b]0;owned\\x07; only F32 is supported" \
    "$bin/dprun" "$plan" --steps 0 --load-params "$tmp/dtype.safetensors"
check "no raw ESC or BEL reaches the terminal" not_esc
expect_fail "a shape past 2^64 is refused, not wrapped" "integer 18446744073709551744 is too large" \
    "$bin/dprun" "$plan" --steps 0 --load-params "$tmp/wrap.safetensors"
expect_fail "200,000 tensors are refused at once" "tensors, the most" \
    timeout 20 "$bin/dprun" "$plan" --steps 0 --load-params "$tmp/many.safetensors"
finish
