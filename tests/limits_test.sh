#!/usr/bin/env bash
# run: tier=check
# Resource limits: an absurd model or batch is refused by dpc
# at compile time, and a plan that needs more than the limit by dprun at
# load time, each with one message naming the memory needed and the
# limit, before anything large is allocated. Synthetic models only.
# Prints `N passed, N failed`.
. tests/lib.sh
unset DPC_MAX_MEMORY
# expect_refused WHAT PATTERN CMD...: exit status 1, one line on stderr
# matching the extended regular expression PATTERN (a note that there is
# no CUDA device aside)
expect_refused() {
    local what=$1 pat=$2; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    local lines; lines=$(grep -v '^dp[a-z]*: no CUDA device' "$tmp/err" | grep -c .)
    if [ $rc = 1 ] && [ "$lines" = 1 ] && grep -qE "$pat" "$tmp/err"; then ok; else
        bad "$what: exit $rc, stderr: $(cat "$tmp/err")"; fi
}

# A billion-parameter dense layer (3072 x 325521 weights): 3.7 GiB of
# parameters, as much momentum, gradients and their sums.
cat >"$tmp/billion.net" <<'NET'
input image[3, 32, 32]
input label class(10)
network n {
    x = dense(flatten(image), 325521)
    logits = dense(x, 10)
    loss = softmax_cross_entropy(logits, label)
}
NET
expect_refused "billion-parameter layer, --max-memory 8G" \
    'billion.net: error: the plan needs 1[0-9]\.[0-9] GiB per device \(parameters 3\.7 GiB, optimizer and BatchNorm state 3\.7 GiB, train program [0-9.]+ GiB at batch 128, eval program [0-9.]+ MiB at batch 128\); the limit is 8\.0 GiB \(set --max-memory or DPC_MAX_MEMORY\)$' \
    "$bin/dpc" "$tmp/billion.net" -o "$tmp/b.plan" --max-memory 8G
[ ! -e "$tmp/b.plan" ] && ok || bad "a refused model still wrote a plan"
expect_refused "DPC_MAX_MEMORY for dpc" 'the limit is 4\.0 GiB' env DPC_MAX_MEMORY=4GiB "$bin/dpc" "$tmp/billion.net" -o "$tmp/b.plan"
# --max-memory wins over the environment; the default (256 GiB) lets it pass
DPC_MAX_MEMORY=1M "$bin/dpc" "$tmp/billion.net" --max-memory 64G --summary >/dev/null 2>"$tmp/err" && ok ||
    bad "--max-memory 64G did not override DPC_MAX_MEMORY: $(cat "$tmp/err")"
"$bin/dpc" "$tmp/billion.net" --summary >/dev/null 2>"$tmp/err" && ok || bad "default limit refused 15 GiB: $(cat "$tmp/err")"
# A 51-billion-parameter layer: every shape is fine, the default limit is not
sed 's/325521/16777216/' "$tmp/billion.net" >"$tmp/huge.net"
expect_refused "huge layer, default limit" \
    '^[^ ]*huge.net: error: the plan needs 794\.8 GiB per device \(parameters 192\.7 GiB, optimizer and BatchNorm state 192\.7 GiB, train program 401\.4 GiB at batch 128, eval program 8\.0 GiB at batch 128\); the limit is 256\.0 GiB \(set --max-memory or DPC_MAX_MEMORY\)$' \
    "$bin/dpc" "$tmp/huge.net" -o "$tmp/h.plan"
# An absurd batch: the largest the language takes, on a small CNN
expect_refused "absurd batch" 'cnn_small.net: error: the plan needs [0-9.]+ GiB per device \(.*train program [0-9.]+ GiB at batch 1048576, .*\); the limit is 256\.0 GiB' \
    "$bin/dpc" models/cnn_small.net --batch 1048576 -o "$tmp/c.plan"
expect_refused "absurd batch, --no-memplan" 'at batch 1048576.*the limit is 256\.0 GiB' \
    "$bin/dpc" models/cnn_small.net --batch 1048576 --no-memplan --stats
# sizes: malformed ones are refused by name
for s in 0 -5 8X 1e30 G abc; do
    expect_refused "--max-memory $s" "^dpc: error: --max-memory \(or DPC_MAX_MEMORY\) needs a size such as 16G or 512M, got: $s\$" \
        "$bin/dpc" models/mlp.net --summary --max-memory "$s"
done

# dprun: the limit from DPC_MAX_MEMORY, checked before data or buffers.
"$bin/dpc" models/mlp.net -o "$tmp/mlp.plan" --target cpu 2>"$tmp/err" && ok || bad "mlp: $(cat "$tmp/err")"
expect_refused "dprun over DPC_MAX_MEMORY" \
    '^dprun: error: the plan of models/mlp\.net needs [0-9.]+ MiB on the cpu backend: 1 replica x [0-9.]+ MiB \(parameters 1\.5 MiB, .*at batch 64, .*\) \+ input batches [0-9.]+ MiB; the limit is 1\.0 MiB \(DPC_MAX_MEMORY\)$' \
    env DPC_MAX_MEMORY=1M "$bin/dprun" "$tmp/mlp.plan" --device cpu --steps 1
# before the data is opened: a missing folder is not what it reports
expect_refused "dprun checks before data" '2 replicas x .*the limit is 1\.0 MiB' \
    env DPC_MAX_MEMORY=1M "$bin/dprun" "$tmp/mlp.plan" --device cpu --gpus 2 --data "$tmp/no-such-folder"
expect_refused "dprun malformed DPC_MAX_MEMORY" "^dprun: error: DPC_MAX_MEMORY needs a size such as 16G or 512M, got '12 apples'\$" \
    env DPC_MAX_MEMORY='12 apples' "$bin/dprun" "$tmp/mlp.plan" --device cpu --steps 1
# the same plan under a sufficient limit trains
DPC_MAX_MEMORY=1G "$bin/dprun" "$tmp/mlp.plan" --device cpu --steps 1 --eval-every 1000 >"$tmp/out" 2>"$tmp/err" &&
    grep -q '^Training time' "$tmp/out" && ok || bad "mlp under 1G did not train: $(tail -n 3 "$tmp/err")"

finish
