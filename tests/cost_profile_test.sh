#!/usr/bin/env bash
# tests/gpu/cost_vs_profile.sh on this machine: dpc --cost's train table
# beside a DPC_PROFILE=1 run of the same model on the cpu backend (the GPU
# check runs the same join on a GPU). Kernel names and call counts are the
# same in both dialects, so every row of the model must find its profile
# row; the numbers themselves are not compared (no timed assertions).
. tests/lib.sh
join=tests/gpu/cost_vs_profile.sh

"$bin/dpc" models/cnn_small.net -o "$tmp/cs.plan"
"$bin/dpc" models/cnn_small.net --cost >"$tmp/cost.txt"
DPC_PROFILE=1 "$bin/dprun" "$tmp/cs.plan" --device cpu --data synthetic --steps 2 --data-workers 0 \
    >/dev/null 2>"$tmp/profile.txt"
check "the join runs" "$join" "$tmp/cost.txt" "$tmp/profile.txt" >"$tmp/side.txt"

calls=$(awk '/^train total: .* kernels and/ { print $3 + $6 }' "$tmp/cost.txt")
check "the step line names the train program's $calls calls" \
    grep -Eq "^step +$calls +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$tmp/side.txt"
# One row per distinct kernel name or GEMM shape of the train table.
keys=$(awk '/^train program on /{t=1;next} /^train total/{t=0} t && $1 != "kernel" {
    k=$1; sub(/^gemm_/, "gemm ", k); sub(/_bf16$/, "", k); print k }' "$tmp/cost.txt" | sort -u | wc -l)
rows=$(($(wc -l <"$tmp/side.txt") - 2))
check "every kernel and GEMM shape has a row ($keys)" test "$rows" = "$keys"
# cnn_small has fewer than 60 of them, so the profile lists them all.
check "every row found its measurement" test "$(grep -c ' - ' "$tmp/side.txt")" = 0
check "the slowest row comes first" awk 'NR > 1 && $1 != "step" {
    v = $(NF - 1); if (NR > 2 && v > prev + 1e-9) exit 1; prev = v }' "$tmp/side.txt"
check "a model row carries the cost table's time" grep -Eq '^k[0-9]+_im2col +[0-9]+ +[0-9]+\.[0-9]' "$tmp/side.txt"

# Refusals: a profile of another program, and a cost report without tables.
sed 's/^\(dpc: profile of .*\), [0-9]* calls$/\1, 3 calls/' "$tmp/profile.txt" >"$tmp/other.txt"
expect_fail "a profile without the train program" "no profile with $calls calls" \
    "$join" "$tmp/cost.txt" "$tmp/other.txt"
: >"$tmp/empty.txt"
expect_fail "a cost report without the train table" "no train table" "$join" "$tmp/empty.txt" "$tmp/profile.txt"
finish
