#!/usr/bin/env python3
"""bench/gpt_twin_llmc.py — checks that the PyTorch twin (gpt_twin.py) and
llm.c's train_gpt2.c are one model: loads an llm.c checkpoint into the twin
and prints the val loss llm.c prints at step 0, on the same tokens.

    gpt_twin_llmc.py LLMC_DIR [--config gpt_char|gpt2] [--batch 4] [--seq 64]
    (then, to compare:  cd LLMC_DIR && LLMC_CKPT=... LLMC_VAL=... LLMC_B=4
     LLMC_T=64 LLMC_STEPS=1 LLMC_GENEVERY=0 ./train_gpt2 | grep 'val loss')

llm.c's val loss at step 0 is the mean over 5 batches, batch i being the
B*T+1 tokens of the val file from token i*B*T on, as B rows of T inputs
and the next T targets (its dataloader unshuffled). The checkpoint's
tensors map one to one onto the twin's (llm.c's weights are (out, in),
as nn.Linear's; the padded vocabulary rows are dropped). The two agree to
float32 rounding (llm.c sums in other orders, with -Ofast): about 1e-5.
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_twin  # noqa: E402

CKPT = {"gpt2": "gpt2_124M.bin", "gpt_char": "gpt_char.bin"}
VAL = {"gpt2": "dev/data/tinyshakespeare/tiny_shakespeare_val.bin", "gpt_char": "dev/data/gpt_char/val.bin"}


def load(model, path, c):
    with open(path, "rb") as f:
        h = np.frombuffer(f.read(1024), dtype="<i4")
        p = np.frombuffer(f.read(), dtype="<f4")
    maxT, V, L, NH, C, Vp = (int(v) for v in h[2:8])
    if h[0] != 20240326 or (maxT, V, L, NH, C) != (c["block"], c["vocab"], c["n_layer"], c["n_head"],
                                                    c["n_embd"]):
        gpt_twin.fail("%s: not a %s checkpoint of llm.c's" % (path, c))
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        t = torch.from_numpy(p[off:off + n].copy()).view(*shape)
        off += n
        return t

    with torch.no_grad():
        model.wte.weight.copy_(take(Vp, C)[:V])
        model.wpe.weight.copy_(take(maxT, C))
        blocks = model.blocks
        names = [("ln1.weight", (C,)), ("ln1.bias", (C,)), ("attn.qkv.weight", (3 * C, C)),
                 ("attn.qkv.bias", (3 * C,)), ("attn.proj.weight", (C, C)), ("attn.proj.bias", (C,)),
                 ("ln2.weight", (C,)), ("ln2.bias", (C,)), ("fc.weight", (4 * C, C)), ("fc.bias", (4 * C,)),
                 ("fc_proj.weight", (C, 4 * C)), ("fc_proj.bias", (C,))]
        for name, shape in names:  # llm.c stores each as (L, ...)
            t = take(L, *shape)
            for i in range(L):
                blocks[i].get_parameter(name).copy_(t[i])
        model.ln_f.weight.copy_(take(C))
        model.ln_f.bias.copy_(take(C))
    if off != p.size:
        gpt_twin.fail("%s: %d floats, the model takes %d" % (path, p.size, off))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("llmc_dir")
    ap.add_argument("--config", choices=sorted(CKPT), default="gpt_char")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    a = ap.parse_args()
    c = dict(gpt_twin.CONFIGS[a.config], dropout=0.0)
    torch.set_num_threads(2)
    model = gpt_twin.GPT(c).eval()
    load(model, os.path.join(a.llmc_dir, CKPT[a.config]), c)
    toks = np.fromfile(os.path.join(a.llmc_dir, VAL[a.config]), dtype="<u2")[512:]  # past the header
    toks = torch.from_numpy(toks.astype(np.int64))
    B, T, total = a.batch, a.seq, 0.0
    with torch.no_grad():
        for i in range(5):
            w = toks[i * B * T:i * B * T + B * T + 1]
            total += model(w[:-1].view(B, T), w[1:].view(B, T)).item()
    print("val loss %f" % (total / 5))


if __name__ == "__main__":
    main()
