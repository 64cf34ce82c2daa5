#!/usr/bin/env bash
# run: tier=test san=no
# dpc --precision tf32 end to end on the cpu backend, which rounds each TF32
# GEMM's operands as tensor cores do (format/tf32.h; the cuda backend on the
# fake driver against the cpu is tests/unit/test_cuda_fake.c's): the plan
# says its precision; every conv and dense GEMM of the IR carries the tf32
# mark, which the IR text keeps and refuses on any other op; an fp32 plan
# has none; one training step of cnn_small in tf32 against the same step in
# fp32 differs, by less than TF32's error: the loss within 1e-3 relative
# (measured 2.8e-5), each parameter update within 10% relative L2 (measured
# at most 4.5%, the BatchNorm parameters and the convolutions below them: at
# initialisation BatchNorm's backward pass cancels most of dy, which
# amplifies the GEMMs' relative error, as tests/bf16_test.sh explains for
# bf16's 8 bits). Prints `N passed, N failed`.
. tests/lib.sh

for p in fp32 tf32; do
    if "$bin/dpc" models/cnn_small.net --batch 8 --target cpu --precision $p -o "$tmp/c_$p.plan" 2>"$tmp/err"; then
        ok
        check "--info says precision $p" grep -q "^precision: $p" <("$bin/dprun" "$tmp/c_$p.plan" --info)
    else
        bad "compile cnn_small $p: $(cat "$tmp/err")"
    fi
done

# ---- the mark: on every GEMM op, kept by the IR text, refused elsewhere -----------------
"$bin/dpc" models/cnn_small.net --batch 2 --precision tf32 --dump-ir=precision >"$tmp/t.ir"
"$bin/dpc" models/cnn_small.net --batch 2 --dump-ir=precision >"$tmp/f.ir"
gemm='= (conv|conv_grad_data|conv_grad_weight|dense|dense_grad_data|dense_grad_weight) '
n=$(grep -cE "$gemm" "$tmp/t.ir")
check "every one of $n GEMM ops is tf32" test "$n" -gt 0 -a "$(grep -E "$gemm" "$tmp/t.ir" | grep -c 'tf32')" = "$n"
check "only GEMM ops are" test "$(grep -c 'tf32' "$tmp/t.ir")" = "$n"
check "no op of the fp32 IR is" test "$(grep -c 'tf32' "$tmp/f.ir")" = 0
check "the dumped IR compiles to a tf32 plan" "$bin/dpc" --from-ir "$tmp/t.ir" -o "$tmp/r.plan"
check "... that says so" grep -q "^precision: tf32" <("$bin/dprun" "$tmp/r.plan" --info)
sed '0,/\(= relu .*loc([0-9:]*)\)  #/s//\1 [tf32]  #/' "$tmp/t.ir" >"$tmp/bad.ir"
expect_fail_line "tf32 on a relu" "node 13 (relu): tf32 on an op that is no f32 GEMM" \
    "$bin/dpc" --from-ir "$tmp/bad.ir" -o "$tmp/bad.plan"

# ---- one step, tf32 against fp32 -----------------------------------------------------------
one_step_each fp32 tf32
check "one step: tf32 differs from fp32, within TF32's error" \
    $py - "$tmp/init.st" "$tmp/fp32.st" "$tmp/tf32.st" "$tmp/fp32.jsonl" "$tmp/tf32.jsonl" <<'EOF'
import json, struct, sys
import numpy as np
def read(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); d = f.read()
    return {k: np.frombuffer(d[v["data_offsets"][0]:v["data_offsets"][1]], np.float32).astype(np.float64)
            for k, v in h.items() if k != "__metadata__"}
w0, wf, wt = read(sys.argv[1]), read(sys.argv[2]), read(sys.argv[3])
lf = json.loads(open(sys.argv[4]).readline())["train_loss"]
lt = json.loads(open(sys.argv[5]).readline())["train_loss"]
rel = abs(lt - lf) / abs(lf)
print("loss fp32 %.8f tf32 %.8f: relative %.2e" % (lf, lt, rel))
good, worst = rel <= 1e-3 and lt != lf, 0.0
for k in w0:
    uf, ut = wf[k] - w0[k], wt[k] - w0[k]
    nf = np.linalg.norm(uf)
    if nf == 0: continue
    e = float(np.linalg.norm(ut - uf) / nf); worst = max(worst, e)
    if e > 3e-2: print("  %s: %.2e" % (k, e))
print("worst update relative L2 %.2e" % worst)
sys.exit(0 if good and 0 < worst <= 0.1 else 1)
EOF
finish
