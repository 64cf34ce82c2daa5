#!/usr/bin/env python3
"""bench/llmc_random_ckpt.py — a random-init checkpoint and token files for
llm.c's train_gpt2.c, made here instead of downloaded (numpy only).

    llmc_random_ckpt.py LLMC_DIR [--config gpt2|gpt_char] [--seed S]
                        [--tokens DIR] [--ntrain N] [--nval N]

Writes, under LLMC_DIR:
  gpt2_124M.bin (gpt2) or gpt_char.bin (gpt_char): train_gpt2.c's checkpoint
      (gpt2_build_from_checkpoint): 256 int32 of header — magic 20240326,
      version 3, maxT, V, L, NH, C, Vp — then float32 parameters in its
      order: wte (Vp, C), wpe (maxT, C), ln1w ln1b (L, C), qkvw (L, 3C, C),
      qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w ln2b (L, C),
      fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C), fcprojb (L, C),
      lnfw lnfb (C).
  dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin (gpt2) or
  dev/data/gpt_char/{train,val}.bin (gpt_char): llmc/dataloader.h's token
      files: 256 int32 of header — magic 20240520, version 1, token count —
      then uint16 tokens. Seeded uniform random ids below V, or with
      --tokens, DIR/train.bin and DIR/val.bin (nanoGPT's raw uint16 layout,
      as scripts/text_tokens.py writes) with the header put in front.
Initialisation is GPT-2's: N(0, 0.02) matrices and embeddings, the two
residual projections N(0, 0.02/sqrt(2L)), zero biases, layernorm 1 and 0,
the padded vocabulary rows (V..Vp) zero. Only timings are taken from it:
the values matter only in that they are finite and GPT-2-like.
"""
import argparse
import os
import sys

import numpy as np

# name: (maxT, V, Vp, L, NH, C); Vp is V rounded up to 128 (llm.c's padding)
CONFIGS = {
    "gpt2": (1024, 50257, 50304, 12, 12, 768),
    "gpt_char": (256, 256, 256, 6, 6, 384),
}
CKPT = {"gpt2": "gpt2_124M.bin", "gpt_char": "gpt_char.bin"}
DATA = {"gpt2": ("dev/data/tinyshakespeare", "tiny_shakespeare_"),
        "gpt_char": ("dev/data/gpt_char", "")}


def fail(msg):
    sys.stderr.write("llmc_random_ckpt: error: %s\n" % msg)
    sys.exit(1)


def header(*vals):
    h = np.zeros(256, dtype=np.int32)
    h[:len(vals)] = vals
    return h.tobytes()


def tensors(cfg, rng):
    """Yields train_gpt2.c's 16 parameter tensors, in its order, as float32."""
    maxT, V, Vp, L, NH, C = cfg
    std, rstd = 0.02, 0.02 / np.sqrt(2 * L)

    def normal(shape, s):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(s))

    wte = normal((Vp, C), std)
    wte[V:] = 0  # padding rows: never a target, never an input
    yield wte
    yield normal((maxT, C), std)  # wpe
    yield np.ones((L, C), np.float32)  # ln1w
    yield np.zeros((L, C), np.float32)  # ln1b
    yield normal((L, 3 * C, C), std)  # qkvw
    yield np.zeros((L, 3 * C), np.float32)  # qkvb
    yield normal((L, C, C), rstd)  # attprojw
    yield np.zeros((L, C), np.float32)  # attprojb
    yield np.ones((L, C), np.float32)  # ln2w
    yield np.zeros((L, C), np.float32)  # ln2b
    yield normal((L, 4 * C, C), std)  # fcw
    yield np.zeros((L, 4 * C), np.float32)  # fcb
    yield normal((L, C, 4 * C), rstd)  # fcprojw
    yield np.zeros((L, C), np.float32)  # fcprojb
    yield np.ones(C, np.float32)  # lnfw
    yield np.zeros(C, np.float32)  # lnfb


def write_ckpt(path, cfg, seed):
    maxT, V, Vp, L, NH, C = cfg
    rng = np.random.default_rng(seed)
    n = 0
    with open(path + ".tmp", "wb") as f:
        f.write(header(20240326, 3, maxT, V, L, NH, C, Vp))
        for t in tensors(cfg, rng):
            f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())
            n += t.size
    os.replace(path + ".tmp", path)
    return n


def write_tokens(path, toks):
    if toks.size < 2 or toks.size >= 2**31:
        fail("%s: %d tokens; llm.c's header holds 2 to 2^31-1" % (path, toks.size))
    with open(path + ".tmp", "wb") as f:
        f.write(header(20240520, 1, toks.size))
        f.write(toks.astype("<u2").tobytes())
    os.replace(path + ".tmp", path)


def read_raw(path, V):
    try:
        toks = np.fromfile(path, dtype="<u2")
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    if toks.size and int(toks.max()) >= V:
        fail("%s: token %d is not below the vocabulary %d" % (path, toks.max(), V))
    return toks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("llmc_dir")
    ap.add_argument("--config", choices=sorted(CONFIGS), default="gpt2")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--tokens", metavar="DIR", help="DIR/train.bin and DIR/val.bin, raw uint16")
    ap.add_argument("--ntrain", type=int, default=1 << 20, help="random train tokens")
    ap.add_argument("--nval", type=int, default=1 << 17, help="random val tokens")
    a = ap.parse_args()
    if not os.path.isdir(a.llmc_dir):
        fail("%s: not a folder" % a.llmc_dir)
    cfg = CONFIGS[a.config]
    ckpt = os.path.join(a.llmc_dir, CKPT[a.config])
    n = write_ckpt(ckpt, cfg, a.seed)
    print("%s: %s, %d parameters (Vp=%d padding included), seed %d" % (ckpt, a.config, n, cfg[2], a.seed))
    sub, prefix = DATA[a.config]
    ddir = os.path.join(a.llmc_dir, sub)
    os.makedirs(ddir, exist_ok=True)
    rng = np.random.default_rng(a.seed + 1)
    for split, count in (("train", a.ntrain), ("val", a.nval)):
        if a.tokens:
            toks = read_raw(os.path.join(a.tokens, split + ".bin"), cfg[1])
        else:
            toks = rng.integers(0, cfg[1], size=count, dtype=np.uint16)
        out = os.path.join(ddir, prefix + split + ".bin")
        write_tokens(out, toks)
        print("%s: %d tokens" % (out, toks.size))


if __name__ == "__main__":
    main()
