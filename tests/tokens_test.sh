#!/usr/bin/env bash
# run: tier=test
# A language model on token files end to end (data tokens, docs/language.md):
# a deterministic text through scripts/text_tokens.py, tests/nets/lm_small.net
# compiled and trained a few dozen steps by dprun; its val loss falls below
# the unigram baseline (and tests/nets/gpt_tiny.net's, in 200 steps), the
# log and the metrics rows carry val loss and bits per token; --gpus 2 trains bit for bit as --accumulate 2 (and as mpirun -np
# 2 where MPI is built); a checkpoint resumes as the uninterrupted run, across
# an epoch's end; models/gpt2, gpt_char and vit_tiny have their parameter
# counts and gpt_char trains; bad files and bad sections get one clear message. Runs from
# the repository root; binaries in $DPC_BIN. Prints `N passed, N failed`.
. tests/lib.sh
fail_prefix='*error: '

# A text of a small vocabulary of words: learnable, the same on every run.
$py - "$tmp/text.txt" <<'EOF'
import random, sys
r = random.Random(7)
words = ("the a model learns to predict next byte of text from data small network "
         "trains fast with windows tokens and bits per token loss falls").split()
out, n = [], 0
while n < 60000:
    s = " ".join(r.choice(words) for _ in range(r.randint(4, 12)))
    out.append(s[0].upper() + s[1:] + ".\n")
    n += len(out[-1])
open(sys.argv[1], "w").write("".join(out))
EOF
$py scripts/text_tokens.py "$tmp/text.txt" "$tmp/d" || bad "text_tokens.py"
"$bin/dpc" tests/nets/lm_small.net -o "$tmp/lm.plan" || bad "compile lm_small"

# The cross-entropy of the val tokens under the train file's byte
# frequencies: what a model that learnt no context scores (nats).
unigram=$($py - "$tmp/d/train.bin" "$tmp/d/val.bin" <<'EOF'
import collections, math, sys
tr, va = (open(p, "rb").read()[0::2] for p in sys.argv[1:3])
c = collections.Counter(tr)
print(sum(-math.log(c[b] / len(tr)) for b in va) / len(va))
EOF
)

# ---- training: val loss below the unigram baseline ---------------------------------
"$bin/dprun" "$tmp/lm.plan" --data "$tmp/d" --steps 60 --final-eval test --log-every 20 \
    --metrics "$tmp/m.jsonl" >"$tmp/train.log" 2>&1 || bad "train: $(tail -n 2 "$tmp/train.log")"
check "the final line has val loss and bits/token" \
    grep -Eq '^Training time .* \| val loss [0-9.]+ \| bits/token [0-9.]+$' "$tmp/train.log"
check "no test accuracy for a language model" lacks "accuracy" "$tmp/train.log"
val=$(sed -n 's/.*| val loss \([0-9.]*\) |.*/\1/p' "$tmp/train.log")
# 60 steps of batch 8 reach about 2.0 nats; a byte-frequency model scores
# about 2.9 and a uniform guess ln 256 = 5.55. Below the baseline means the
# model uses the context, which only working windows and targets allow.
check "val loss $val below the unigram baseline $unigram" \
    $py -c "import sys; sys.exit(0 if 0 < float('$val') < float('$unigram') else 1)"
# GPT-2 in miniature (tests/nets/gpt_tiny.net: learned positions, split,
# attention, scaled init, the tied head): 200 steps reach about 2.4 (0.5 s),
# below the baseline as lm_small's 60 do.
"$bin/dpc" tests/nets/gpt_tiny.net -o "$tmp/gpt.plan" || bad "compile gpt_tiny"
"$bin/dprun" "$tmp/gpt.plan" --data "$tmp/d" --steps 200 --final-eval test >"$tmp/gpt.log" 2>&1 ||
    bad "train gpt_tiny: $(tail -n 2 "$tmp/gpt.log")"
gval=$(sed -n 's/.*| val loss \([0-9.]*\) |.*/\1/p' "$tmp/gpt.log")
check "gpt_tiny's val loss $gval below the unigram baseline $unigram" \
    $py -c "import sys; sys.exit(0 if 0 < float('$gval') < float('$unigram') else 1)"
check "the --log-every rows and the epoch line carry val loss and bits per token" $py - "$tmp/m.jsonl" <<'EOF'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "step" in r]
ep = [r for r in rows if "step" not in r]
ok = [r["step"] for r in steps] == [20, 40, 60] and len(ep) == 1
for r in steps + ep:
    ok = ok and abs(r["val_bits_per_token"] - r["val_loss"] / math.log(2)) < 1e-6
ok = ok and steps[-1]["val_loss"] < steps[0]["val_loss"] and ep[0]["val_loss"] == steps[-1]["val_loss"]
ok = ok and "test_accuracy" not in ep[0]
sys.exit(0 if ok else 1)
EOF

# ---- the models: their parameter counts, and gpt_char trains -----------------------
# GPT-2 small's 124,439,808 (OpenAI's and nanoGPT's count: the tied head
# once, wpe's 1024 rows included), gpt_char's 10,844,160 (the PyTorch twin
# bench/gpt_twin.py's), ViT-tiny's 5,362,762 (DeiT-tiny's blocks at 65
# tokens, a 10-way head).
for mc in gpt2:124439808 gpt_char:10844160 vit_tiny:5362762; do
    m=${mc%%:*} want=${mc#*:}
    got=$("$bin/dpc" "models/$m.net" --summary 2>&1 | sed -n 's/^parameters: //p')
    check "models/$m.net has $want parameters (got '$got')" test "$got" = "$want"
done
# models/gpt_char.net as written (its data section, dropout, clipping, the
# step warmup and cosine), made small by --set: 40 steps (inside the
# 100-step warmup) take the val loss below a uniform guess.
"$bin/dpc" models/gpt_char.net --set layers=1 --set width=32 --set heads=2 --set block=16 \
    --batch 8 -o "$tmp/gc.plan" || bad "compile gpt_char --set"
"$bin/dprun" "$tmp/gc.plan" --data "$tmp/d" --steps 40 --final-eval test --eval-windows 64 \
    >"$tmp/gc.log" 2>&1 || bad "train gpt_char: $(tail -n 2 "$tmp/gc.log")"
cval=$(sed -n 's/.*| val loss \([0-9.]*\) |.*/\1/p' "$tmp/gc.log")
check "gpt_char's val loss $cval below ln 256 = 5.545 (a uniform guess)" \
    $py -c "import sys; sys.exit(0 if 0 < float('$cval') < 5.545 else 1)"

# ---- replicas: --gpus 2 == --accumulate 2 bit for bit -------------------------------
run() {
    local name=$1; shift
    DPC_DEBUG=2 "$bin/dprun" "$tmp/lm.plan" --data "$tmp/d" --final-eval none \
        --save-params "$tmp/$name.st" "$@" >"$tmp/$name.log" 2>&1 ||
        bad "$name: dprun $* ($(tail -n 1 "$tmp/$name.log"))"
}
losses() { grep 'debug: step' "$1"; }
run g2 --gpus 2 --steps 12
run k2 --accumulate 2 --steps 12
run z2 --gpus 2 --shard-optimizer --steps 12
check "--gpus 2 == --accumulate 2: the weights bit for bit" cmp -s "$tmp/g2.st" "$tmp/k2.st"
check "--gpus 2 == --accumulate 2: the per-step losses" \
    eval '[ "$(losses "$tmp/g2.log" | wc -l)" -eq 12 ] && [ "$(losses "$tmp/g2.log")" = "$(losses "$tmp/k2.log")" ]'
check "--shard-optimizer (ZeRO-1) == --gpus 2 bit for bit" cmp -s "$tmp/g2.st" "$tmp/z2.st"
if mpi_ready; then
    DPC_DEBUG=2 "${mpi[@]}" "$bin/dprun" "$tmp/lm.plan" --data "$tmp/d" --final-eval none --gpus 1 \
        --steps 12 --save-params "$tmp/mpi.st" >"$tmp/mpi.log" 2>&1 ||
        bad "mpirun -np 2: $(tail -n 3 "$tmp/mpi.log")"
    check "mpirun -np 2 == --gpus 2 bit for bit (each process fills its share)" \
        cmp -s "$tmp/g2.st" "$tmp/mpi.st"
fi

# ---- checkpoint and resume across an epoch's end ------------------------------------
# 1700 tokens: 100 windows of 17, 12 steps of 8 an epoch; stop at 7, resume to 20.
mkdir "$tmp/s"
head -c 3400 "$tmp/d/train.bin" >"$tmp/s/train.bin"
cp "$tmp/d/val.bin" "$tmp/s/val.bin"
srun() { DPC_DEBUG=2 "$bin/dprun" "$tmp/lm.plan" --data "$tmp/s" --epochs 2 --final-eval none "$@"; }
srun --steps 20 --save-params "$tmp/full.st" >"$tmp/full.log" 2>&1 || bad "uninterrupted run"
srun --steps 7 --checkpoint "$tmp/ck" --checkpoint-every 7 >"$tmp/part.log" 2>&1 || bad "first part"
srun --steps 20 --checkpoint "$tmp/ck" --resume --save-params "$tmp/rest.st" >"$tmp/rest.log" 2>&1 ||
    bad "resume: $(tail -n 2 "$tmp/rest.log")"
check "12 steps an epoch (floor(100 windows / 8))" grep -q '12 steps per epoch' "$tmp/full.log"
check "resume: the weights of the uninterrupted run bit for bit" cmp -s "$tmp/full.st" "$tmp/rest.st"
check "resume: the same windows (the per-step losses)" \
    eval '[ "$(losses "$tmp/full.log" | tail -n 13)" = "$(losses "$tmp/rest.log")" ]'

# ---- bad files: one message naming the file, exit 1 -------------------------------
mkdir "$tmp/nv" && cp "$tmp/d/train.bin" "$tmp/nv/"
expect_fail "missing val.bin" "val.bin" "$bin/dprun" "$tmp/lm.plan" --data "$tmp/nv" --steps 1
mkdir "$tmp/odd" && cp "$tmp/d/val.bin" "$tmp/odd/" && head -c 3401 "$tmp/d/train.bin" >"$tmp/odd/train.bin"
expect_fail "an odd-sized file" "train.bin: 3401 bytes, an odd size" \
    "$bin/dprun" "$tmp/lm.plan" --data "$tmp/odd" --steps 1
mkdir "$tmp/big" && cp "$tmp/d/train.bin" "$tmp/big/"
$py -c "import sys; sys.stdout.buffer.write(bytes([65, 0]) * 40 + bytes([44, 1]) + bytes([65, 0]) * 40)" >"$tmp/big/val.bin"
expect_fail "a token outside the vocabulary" "val.bin: token 300 at position 40 is outside the vocabulary of 256" \
    "$bin/dprun" "$tmp/lm.plan" --data "$tmp/big" --steps 1
expect_fail "no --data" "--data DIR names the folder of train.bin and val.bin" \
    "$bin/dprun" "$tmp/lm.plan" --steps 1

"$bin/dprun" "$tmp/lm.plan" --data "$tmp/d" --steps 1 --final-eval none --save-params "$tmp/p.st" >/dev/null 2>&1
expect_fail "predict on a language model" "lm_small is a language model (data tokens)" \
    "$bin/dprun" predict "$tmp/lm.plan" --load-params "$tmp/p.st" "$tmp/text.txt"

expect_fail "--sweep on a language model" "lm_small is a language model (data tokens)" \
    "$bin/dprun" "$tmp/lm.plan" --data "$tmp/d" --sweep "lr=0.1,0.2" --sweep-dir "$tmp/sw"

# ---- bad sections: one message at the .net position, exit 1 -----------------------
net() { sed "$1" tests/nets/lm_small.net >"$tmp/bad.net"; }
net 's|train "train.bin"|train "../train.bin"|'
expect_fail "a file name with '/'" "token file '../train.bin' is not a plain file name" \
    "$bin/dpc" "$tmp/bad.net" -o "$tmp/bad.plan"
net 's|block 16|block 8|'
expect_fail "block unlike the inputs" "data tokens (block 8) fills 'tokens' as int[8]" \
    "$bin/dpc" "$tmp/bad.net" -o "$tmp/bad.plan"
net 's|block 16 }| }|'
expect_fail "no block" "data tokens needs \`block T\`" "$bin/dpc" "$tmp/bad.net" -o "$tmp/bad.plan"
net 's|input targets int\[16\]|input targets int[16, 2]|'
expect_fail "targets of another shape" "fills 'targets' as int[16]" "$bin/dpc" "$tmp/bad.net" -o "$tmp/bad.plan"
net 's|^input targets int\[16\]|&\ninput image[3, 32, 32]|'
expect_fail "an image input the data cannot fill" "data tokens fills only 'tokens' and 'targets', not the input 'image'" \
    "$bin/dpc" "$tmp/bad.net" -o "$tmp/bad.plan"
net 's|block 16 }|block 16; pad 4 }|'
expect_fail "image augmentation in a tokens section" "a tokens dataset has no image augmentation" \
    "$bin/dpc" "$tmp/bad.net" -o "$tmp/bad.plan"
net 's|data tokens {.*|data cifar10 { train "x.bin" }|'
expect_fail "train FILE in an image section" "train is for a tokens dataset, not cifar10" \
    "$bin/dpc" "$tmp/bad.net" -o "$tmp/bad.plan"

# ---- the IR text form carries the section; the plan reads back the same -------------
"$bin/dpc" tests/nets/lm_small.net --dump-ir >"$tmp/lm.ir" 2>&1 || bad "--dump-ir"
check "the # train line holds the token files and block" \
    grep -q 'tokens_train="train.bin" tokens_val="val.bin" block=16' "$tmp/lm.ir"
"$bin/dpc" --from-ir "$tmp/lm.ir" -o "$tmp/lm2.plan" >/dev/null 2>&1 || bad "--from-ir"
check "a plan from the IR text is the same plan" cmp -s "$tmp/lm.plan" "$tmp/lm2.plan"

finish
