#!/usr/bin/env bash
# run: tier=test san=no
# Fused attention against PyTorch in float64 (tests/parity/attn_oracle.py:
# Debian's torch 1.13 has no scaled_dot_product_attention, so the
# reference is its definition written out). One training step of a net of
# attention between dense projections, causal and not, 3 heads, on the cpu
# backend (tests/parity/dpc_step): logits and every weight gradient
# (through q, k, v and the output) within 1e-4 of the largest value. About
# a second; never skips (without Debian's python3-torch it fails).
. tests/lib.sh
py=/usr/bin/python3
driver=$build/parity/dpc_step
if ! "$py" -c 'import torch, numpy' >/dev/null 2>&1; then
    bad "$py cannot import torch and numpy; run scripts/deps.sh"
    finish
fi
[ -x "$driver" ] || { bad "no $driver; run make test (it builds the drivers)"; finish; }

for causal in true false; do
    cat >"$tmp/attn_$causal.net" <<NET
input image[7, 12]
input label class(5)
network attn_oracle {
    a = attention(dense(image, 12, bias=false), dense(image, 12, bias=false),
                  dense(image, 12, bias=false), heads=3, causal=$causal)
    logits = dense(flatten(a), 5, bias=false)
    loss = softmax_cross_entropy(logits, label)
}
train {
    batch 3 per device
    optimizer sgd(momentum=0.9)
    lr {0: 0.1}
}
NET
    mkdir -p "$tmp/$causal"
    if "$bin/dpc" "$tmp/attn_$causal.net" -o "$tmp/$causal.plan" 2>"$tmp/err"; then
        c=0
        [ $causal = true ] && c=1
        "$py" tests/parity/attn_oracle.py "$driver" "$tmp/$causal.plan" "$tmp/$causal" 3 $c \
            >"$tmp/out" 2>&1
        while read -r line; do
            case $line in ok:*) ok ;; *) bad "$line" ;; esac
        done <"$tmp/out"
    else
        bad "dpc attn_$causal.net: $(cat "$tmp/err")"
    fi
done
finish
