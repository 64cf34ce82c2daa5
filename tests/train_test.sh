#!/usr/bin/env bash
# The small nets learn: mlp and cnn_small reach >= 95% test accuracy on the
# built-in synthetic set (issue 3's end-to-end check of autodiff, optimizer,
# codegen and the training loop together).
set -u
bin=${DPC_BIN:-bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
for m in mlp cnn_small; do
    if ! "$bin/dpc" "models/$m.net" -o "$tmp/$m.plan" 2>"$tmp/err"; then
        echo "FAIL: compile $m: $(cat "$tmp/err")"; fail=$((fail + 1)); continue
    fi
    # 3 epochs: after 2, cnn_small's eval-mode accuracy (running BatchNorm
    # statistics) sat near the threshold and depended on the CPU's kernels
    # (0.877 with seed 3 on an AVX-512 machine, >= 0.95 on AVX2; 1.000 on
    # both after 3).
    "$bin/dprun" "$tmp/$m.plan" --data synthetic --epochs 3 --seed 3 >"$tmp/$m.out" 2>&1
    acc=$(tail -n 1 "$tmp/$m.out" | sed -n 's/.*test accuracy \([0-9.]*\)$/\1/p')
    if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.95) }'; then
        pass=$((pass + 1))
    else
        echo "FAIL: $m test accuracy '${acc}' < 0.95"; tail -n 5 "$tmp/$m.out"; fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
