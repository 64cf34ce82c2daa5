#!/usr/bin/env bash
# run: tier=test san=no
# tests/gpu/cost_vs_profile.sh on this machine: dpc --cost's train table
# beside a DPC_PROFILE=1 run of the same CUDA program on the fake driver
# (its kernels run under the simulator; the GPU check runs the same join on
# a GPU). The profile is of the cuda backend because the CUDA program has
# kernels the C one has not (a split channel's pass and merge kernels,
# codegen/fused.c), so every row of the model must find its profile row;
# the numbers themselves are not compared (no timed assertions). Skipped
# without the fake (no CUDA toolkit) and in the sanitized tree (the
# simulated step is slow there; fake_sim_test runs the fake under ASan).
. tests/lib.sh
join=tests/gpu/cost_vs_profile.sh
fake=$build/fake/libfakecuda.so
case "$build" in *asan*) fake= ;; esac
if [ -z "$fake" ] || [ ! -f "$fake" ]; then
    skip "no fake driver here (CUDA toolkit only; not under the sanitizers)"
    finish
    exit
fi
fake=$(realpath "$fake")

"$bin/dpc" models/cnn_small.net --batch 4 -o "$tmp/cs.plan"
"$bin/dpc" models/cnn_small.net --batch 4 --cost >"$tmp/cost.txt"
DPC_LIBCUDA=$fake DPC_LIBCUBLAS=$fake DPC_LIBNCCL=$fake DPC_LIBCUDNN=$fake DPC_PROFILE=1 \
    "$bin/dprun" "$tmp/cs.plan" --device cuda --data synthetic --steps 1 --data-workers 0 \
    >/dev/null 2>"$tmp/profile.txt"
check "the join runs" "$join" "$tmp/cost.txt" "$tmp/profile.txt" >"$tmp/side.txt"

calls=$(awk '/^train total: .* kernels and/ { n += $3 + $6 } /^train total: .* library convolutions/ { n += $3 }
    END { print n }' "$tmp/cost.txt")
check "the step line names the train program's $calls calls" \
    grep -Eq "^step +$calls +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$tmp/side.txt"
# One row per distinct kernel name or GEMM shape of the train table.
keys=$(awk '/^train program on /{t=1;next} /^train total/{t=0} t && $1 != "kernel" {
    k=$1; sub(/^gemm_/, "gemm ", k); sub(/_bf16$/, "", k); print k }' "$tmp/cost.txt" | sort -u | wc -l)
rows=$(($(wc -l <"$tmp/side.txt") - 3)) # less the header, step and unmatched lines
check "every kernel and GEMM shape has a row ($keys)" test "$rows" = "$keys"
# cnn_small has fewer than 60 of them, so the profile lists them all.
check "every row found its measurement" test "$(grep -c ' - ' "$tmp/side.txt")" = 0
check "nothing is unmatched" grep -q '^unmatched: 0 modelled rows not measured (0.0 us modelled), 0 measured' "$tmp/side.txt"
check "the slowest row comes first" awk 'NR > 1 && $1 != "step" && $1 != "unmatched:" {
    v = $(NF - 1); if (NR > 2 && v > prev) exit 1; prev = v }' "$tmp/side.txt"
check "a model row carries the cost table's time" grep -Eq '^k[0-9]+_[a-z_0-9]+ +[0-9]+ +[0-9]+\.[0-9]' "$tmp/side.txt"
check "a library convolution's row carries its time" grep -Eq '^conv_forward_[0-9x]+_k3_s1 +[0-9]+ +[0-9]+\.[0-9]' "$tmp/side.txt"

# cuDNN declining every convolution: the profile lacks their rows (their
# im2col kernels and GEMMs come under other names); the join still runs and
# counts them.
nconv=$(grep -c '^conv_' "$tmp/side.txt")
awk '$(NF - 5) != "conv"' "$tmp/profile.txt" >"$tmp/declined.txt"
check "the join runs without the convolutions' rows" "$join" "$tmp/cost.txt" "$tmp/declined.txt" >"$tmp/side2.txt"
check "it counts the $nconv convolution rows as unmatched" \
    grep -q "^unmatched: $nconv modelled rows not measured (.*: conv_" "$tmp/side2.txt"
check "and still has the step line" grep -Eq "^step +$calls " "$tmp/side2.txt"
# Refusals: no profile at all, and a cost report without tables.
grep -v '^[a-z]*: profile of' "$tmp/profile.txt" >"$tmp/other.txt"
expect_fail "a file without a profile" "no profile" "$join" "$tmp/cost.txt" "$tmp/other.txt"
: >"$tmp/empty.txt"
expect_fail "a cost report without the train table" "no train table" "$join" "$tmp/empty.txt" "$tmp/profile.txt"
finish
