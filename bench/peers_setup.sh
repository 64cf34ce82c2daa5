#!/usr/bin/env bash
# The GPT benchmarks' peers, set up outside the repository (never a runtime
# or test dependency of dpc):
#   $PEERS/torch   a venv with a current PyTorch (CPU) and numpy
#   $PEERS/llm.c   karpathy/llm.c, train_gpt2.c built for the CPU
#                  (-Ofast -march=native -fopenmp), with a random-init
#                  GPT-2 small checkpoint and generated token files
# Idempotent: what is there already is kept (delete a part to redo it).
# Prints the versions at the end. Writes nothing inside the repository.
#
# usage: bench/peers_setup.sh [torch] [llmc]      (default: both)
# PEERS      where the peers live (default /work/peers)
# LLMC_SRC   llm.c's git source (default the local mirror
#            /work/.mirror/karpathy+llm.c/repo when present, else
#            https://github.com/karpathy/llm.c)
# LLMC_REV   the commit to check out (default f1e2ace, 2025-05-10, the one
#            llmc_steps.patch was made on and the benchmarks were set up with)
# TORCH_SPEC the pip requirement (default torch); the CPU wheel index is
#            tried first, then PyPI's default wheel
set -eu
here=$(cd "$(dirname "$0")" && pwd)
peers=${PEERS:-/work/peers}
parts=${*:-torch llmc}
mirror=/work/.mirror/karpathy+llm.c/repo
if [ -z "${LLMC_SRC:-}" ]; then
    if [ -d "$mirror" ]; then LLMC_SRC=$mirror; else LLMC_SRC=https://github.com/karpathy/llm.c; fi
fi
repo=$(cd "$here/.." && pwd)
case "$peers/" in "$repo/"*)
    echo "peers_setup: error: PEERS=$peers is inside the repository" >&2; exit 1 ;;
esac
mkdir -p "$peers"

# The venv with numpy: llmc_random_ckpt.py needs it too.
venv() {
    local v=$peers/torch
    [ -x "$v/bin/python" ] || python3 -m venv "$v"
    "$v/bin/python" -c 'import numpy' 2>/dev/null || "$v/bin/pip" install -q numpy
}

setup_torch() {
    local v=$peers/torch
    venv
    if ! "$v/bin/python" -c 'import torch' 2>/dev/null; then
        # The CPU-only wheel is a fraction of the default's size; where its
        # index is not reachable, PyPI's default wheel (CUDA libraries
        # included, unused here) does the same on the CPU.
        if ! "$v/bin/pip" install -q --timeout 15 --retries 1 \
            --index-url https://download.pytorch.org/whl/cpu "${TORCH_SPEC:-torch}"; then
            echo "peers_setup: the CPU wheel index is not reachable; PyPI's torch instead"
            "$v/bin/pip" install -q "${TORCH_SPEC:-torch}"
        fi
    fi
    "$v/bin/python" -c 'import torch, numpy, platform
print("torch", torch.__version__, "numpy", numpy.__version__, "python", platform.python_version(),
      "compile", hasattr(torch, "compile"))'
}

setup_llmc() {
    local d=$peers/llm.c
    if [ ! -d "$d/.git" ]; then
        git clone -q "$LLMC_SRC" "$d"
    fi
    local rev=${LLMC_REV:-f1e2ace651495b74ae22d45d1723443fd00ecd3a}
    if [ "$(git -C "$d" rev-parse HEAD)" != "$(git -C "$d" rev-parse "$rev^{commit}")" ]; then
        git -C "$d" checkout -q -- train_gpt2.c # the patch, re-applied below
        git -C "$d" checkout -q "$rev"
    fi
    # train_gpt2.c runs a fixed 40 steps and samples text every 20: the
    # patch lets LLMC_STEPS set the count and LLMC_GENEVERY the sampling.
    if ! grep -q LLMC_STEPS "$d/train_gpt2.c"; then
        git -C "$d" apply "$here/llmc_steps.patch"
    fi
    # -Ofast -march=native -fopenmp: llm.c's own Makefile flags for the CPU.
    if [ ! -x "$d/train_gpt2" ] || [ "$d/train_gpt2.c" -nt "$d/train_gpt2" ]; then
        (cd "$d" && gcc -Ofast -march=native -fopenmp -Wno-unused-result \
            train_gpt2.c -lm -o train_gpt2)
    fi
    venv
    # Random-init checkpoints and random token files, GPT-2 small's and
    # gpt_char's shapes (train_gpt2.c reads the first by default; LLMC_CKPT,
    # LLMC_TRAIN and LLMC_VAL pick the second).
    if [ ! -f "$d/dev/data/tinyshakespeare/tiny_shakespeare_val.bin" ]; then
        "$peers/torch/bin/python" "$here/llmc_random_ckpt.py" "$d" --config gpt2
    fi
    if [ ! -f "$d/dev/data/gpt_char/val.bin" ]; then
        "$peers/torch/bin/python" "$here/llmc_random_ckpt.py" "$d" --config gpt_char
    fi
    echo "llm.c $(git -C "$d" rev-parse --short HEAD) ($LLMC_SRC) gcc $(gcc -dumpfullversion)"
}

for p in $parts; do
    case $p in torch | llmc) ;; *) echo "peers_setup: error: unknown part '$p' (torch, llmc)" >&2; exit 2 ;; esac
done
for p in $parts; do
    if [ "$p" = torch ]; then setup_torch; else setup_llmc; fi
done
