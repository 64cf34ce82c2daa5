#!/usr/bin/env python3
"""bench/gpt_twin.py — the PyTorch twins of dpc's GPT models, for the
benchmarks (time per train step) and for the training-parity check (val
loss at the same step count). A peer, never a dependency of dpc.

    gpt_twin.py --params [--config C]
    gpt_twin.py --bench-steps N [--config gpt2] [--batch 4] [--seq 64]
                [--compile] [--attn explicit|sdpa] [--threads 2]
    gpt_twin.py --train --data DIR [--config gpt_char] [--steps 5000]
                [--eval-every 250] [--eval-windows 200] [--out curve.csv]

The model is nanoGPT's GPT, written here anew: token and learned position
embeddings (+ dropout), L blocks of pre-LN causal self-attention and a
4C MLP with tanh-approximated GELU, each a residual branch with dropout, a
final layernorm, and a head tied to the token embedding; every linear and
layernorm has a bias. Attention is the explicit masked softmax (scores
(B, NH, T, T)) or, with --attn sdpa, F.scaled_dot_product_attention.
Initialisation is GPT-2's: N(0, 0.02), the residual projections
N(0, 0.02/sqrt(2L)), zero biases.

Training is nanoGPT's: AdamW (fused=False) with weight decay 0.1 on every
tensor of 2 or more dims (the matrices and the two embeddings), none on
biases and layernorms; global grad-norm clip 1.0; the lr warms up
linearly over WARMUP steps to LR, then falls on a cosine to MIN_LR at
DECAY steps. The configs' defaults are nanoGPT's (config/train_gpt2.py and
config/train_shakespeare_char.py).

--bench-steps: random tokens, the model in train mode (dropout on), one
warm-up step (three with --compile: the compile is in them, not timed),
then N timed steps, each from zero_grad to optimizer.step. Last line:
JSON with the median, min and max step seconds.

--train: DIR/train.bin and DIR/val.bin are uint16 tokens (nanoGPT's raw
layout, scripts/text_tokens.py's output). Each step takes BATCH windows
of SEQ+1 tokens at random offsets of train.bin (a seeded generator, each
of 0 .. len-SEQ-1 as likely); the
val loss (model in eval mode) is the mean over EVAL_WINDOWS fixed windows
whose offsets are evenly spaced over val.bin, window i at
i * (len - SEQ - 1) // (EVAL_WINDOWS - 1), taken BATCH at a time, so that
another implementation can take the same ones. It is measured at step 0,
every EVAL_EVERY steps and after the last. The curve is a CSV
(step,train_loss,val_loss,lr,seconds): after `step` steps, the val loss,
the last step's train loss and lr (nan at step 0), the seconds so far;
the last line printed is JSON.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# n_layer, n_head, n_embd, block, vocab, dropout, betas, lr, min_lr, warmup, decay, batch, seq
CONFIGS = {
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, block=1024, vocab=50257, dropout=0.0,
                 betas=(0.9, 0.95), lr=6e-4, min_lr=6e-5, warmup=2000, decay=600000,
                 batch=4, seq=64),
    "gpt_char": dict(n_layer=6, n_head=6, n_embd=384, block=256, vocab=256, dropout=0.2,
                     betas=(0.9, 0.99), lr=1e-3, min_lr=1e-4, warmup=100, decay=5000,
                     batch=64, seq=256),
}


def fail(msg):
    sys.stderr.write("gpt_twin: error: %s\n" % msg)
    sys.exit(1)


class Attention(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        self.nh, self.sdpa, self.p = c["n_head"], sdpa, c["dropout"]
        self.qkv = nn.Linear(c["n_embd"], 3 * c["n_embd"])
        self.proj = nn.Linear(c["n_embd"], c["n_embd"])
        self.attn_drop = nn.Dropout(c["dropout"])
        self.resid_drop = nn.Dropout(c["dropout"])
        t = c["block"]
        self.register_buffer("causal", torch.tril(torch.ones(t, t, dtype=torch.bool)), persistent=False)

    def forward(self, x):  # x (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, NH, T, hs)
        q, k, v = (u.view(B, T, self.nh, C // self.nh).transpose(1, 2) for u in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0,
                                               is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, NH, T, T)
            att = att.masked_fill(~self.causal[:T, :T], float("-inf"))
            y = self.attn_drop(F.softmax(att, dim=-1)) @ v  # (B, NH, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        C = c["n_embd"]
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.attn = Attention(c, sdpa)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.mlp_drop = nn.Dropout(c["dropout"])

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp_drop(self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, c, sdpa=False):
        super().__init__()
        self.block = c["block"]
        self.wte = nn.Embedding(c["vocab"], c["n_embd"])
        self.wpe = nn.Embedding(c["block"], c["n_embd"])
        self.drop = nn.Dropout(c["dropout"])
        self.blocks = nn.ModuleList(Block(c, sdpa) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"])
        self.head = nn.Linear(c["n_embd"], c["vocab"], bias=False)
        self.head.weight = self.wte.weight  # tied: one tensor, counted once
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("ln_f"):
                nn.init.ones_(p)
            elif name.endswith("proj.weight"):  # the two residual projections
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c["n_layer"]))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):  # idx, targets (B, T) int64 -> mean loss
        T = idx.size(1)
        if T > self.block:
            fail("sequence %d is longer than the block %d" % (T, self.block))
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def param_counts(model):
    total = sum(p.numel() for p in model.parameters())  # parameters() yields the tied tensor once
    emb = model.wte.weight.numel() + model.wpe.weight.numel()
    return total, total - emb


def optimizer(model, c, wd=0.1):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=c["lr"], betas=c["betas"], eps=1e-8, fused=False)


def lr_at(it, c):
    if it < c["warmup"]:
        return c["lr"] * (it + 1) / (c["warmup"] + 1)
    if it > c["decay"]:
        return c["min_lr"]
    ratio = (it - c["warmup"]) / (c["decay"] - c["warmup"])
    return c["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (c["lr"] - c["min_lr"])


def train_step(model, fwd, opt, x, y, lr):
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss = fwd(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def bench(a, c, model, fwd, opt):
    gen = torch.Generator().manual_seed(a.seed)
    x = torch.randint(0, c["vocab"], (a.batch, a.seq), generator=gen)
    y = torch.randint(0, c["vocab"], (a.batch, a.seq), generator=gen)
    for i in range(3 if a.compile else 1):  # warm-up (and, compiled, the compile)
        train_step(model, fwd, opt, x, y, lr_at(i, c))
    times = []
    for i in range(a.bench_steps):
        t0 = time.perf_counter()
        loss = train_step(model, fwd, opt, x, y, lr_at(i, c))
        times.append(time.perf_counter() - t0)
    if not math.isfinite(loss):
        fail("the loss is %r after %d steps" % (loss, a.bench_steps))
    return {"median_step_s": statistics.median(times), "min_step_s": min(times),
            "max_step_s": max(times), "steps": a.bench_steps, "last_loss": loss}


def read_tokens(path, c, need):
    try:
        toks = np.fromfile(path, dtype="<u2")
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    if toks.size < need:
        fail("%s: %d tokens; a window needs %d" % (path, toks.size, need))
    if int(toks.max()) >= c["vocab"]:
        fail("%s: token %d is not below the vocabulary %d" % (path, toks.max(), c["vocab"]))
    return torch.from_numpy(toks.astype(np.int64))


def windows(toks, offs, T):  # (n,) offsets -> x, y (n, T)
    idx = offs[:, None] + torch.arange(T + 1)[None, :]
    w = toks[idx]
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def val_loss(model, fwd, val, a):
    model.eval()
    n = a.eval_windows
    offs = torch.tensor([i * (val.numel() - a.seq - 1) // max(n - 1, 1) for i in range(n)])
    total = 0.0
    for s in range(0, n, a.batch):
        x, y = windows(val, offs[s:s + a.batch], a.seq)
        total += fwd(x, y).item() * x.size(0)
    model.train()
    return total / n


def train(a, c, model, fwd, opt):
    tr = read_tokens(os.path.join(a.data, "train.bin"), c, a.seq + 1)
    va = read_tokens(os.path.join(a.data, "val.bin"), c, a.seq + 1)
    gen = torch.Generator().manual_seed(a.seed)
    rows, t0, loss = [], time.perf_counter(), float("nan")
    out = open(a.out, "w") if a.out else None
    if out:
        out.write("step,train_loss,val_loss,lr,seconds\n")
    for it in range(a.steps + 1):
        if it % a.eval_every == 0 or it == a.steps:
            v = val_loss(model, fwd, va, a)
            # the train loss and lr of the last step taken (none at step 0)
            row = (it, loss, v, lr_at(it - 1, c) if it else float("nan"), time.perf_counter() - t0)
            rows.append(row)
            print("step %d: train loss %.4f val loss %.4f lr %.2e (%.1f s)" % row, flush=True)
            if out:
                out.write("%d,%.6f,%.6f,%.6e,%.3f\n" % row)
                out.flush()
        if it == a.steps:
            break
        offs = torch.randint(0, tr.numel() - a.seq, (a.batch,), generator=gen)  # nanoGPT's range
        x, y = windows(tr, offs, a.seq)
        loss = train_step(model, fwd, opt, x, y, lr_at(it, c))
        if not math.isfinite(loss):
            fail("the loss is %r at step %d" % (loss, it))
    if out:
        out.close()
    return {"steps": a.steps, "final_val_loss": rows[-1][2], "final_train_loss": rows[-1][1],
            "seconds": rows[-1][4], "curve": a.out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--params", action="store_true", help="print the parameter counts")
    mode.add_argument("--bench-steps", type=int, metavar="N", help="time N train steps")
    mode.add_argument("--train", action="store_true", help="train on --data, write the val curve")
    ap.add_argument("--config", choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--compile", action="store_true", help="the model under torch.compile")
    ap.add_argument("--attn", choices=("explicit", "sdpa"), default="explicit")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--dropout", type=float, help="override the config's")
    ap.add_argument("--lr", type=float)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--decay", type=int, help="the step the cosine reaches min_lr")
    ap.add_argument("--data", metavar="DIR")
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-windows", type=int, default=200)
    ap.add_argument("--out", metavar="CSV")
    a = ap.parse_args()
    a.config = a.config or ("gpt_char" if a.train else "gpt2")
    c = dict(CONFIGS[a.config])
    for k in ("dropout", "lr", "warmup", "decay"):
        if getattr(a, k) is not None:
            c[k] = getattr(a, k)
    a.batch, a.seq = a.batch or c["batch"], a.seq or c["seq"]
    if a.batch < 1 or not 1 <= a.seq <= c["block"]:
        fail("batch %d, seq %d: need batch >= 1 and 1 <= seq <= %d" % (a.batch, a.seq, c["block"]))
    if a.bench_steps is not None and a.bench_steps < 1:
        fail("--bench-steps %d: at least 1" % a.bench_steps)
    if a.train and (not a.data or a.steps < 0 or a.eval_every < 1 or a.eval_windows < 1):
        fail("--train needs --data DIR, --steps >= 0, --eval-every >= 1, --eval-windows >= 1")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(c, sdpa=a.attn == "sdpa").train()
    total, non_emb = param_counts(model)
    print("%s: %s parameters (tied head counted once), %s without the embeddings"
          % (a.config, f"{total:,}", f"{non_emb:,}"), flush=True)
    if a.params:
        return
    opt = optimizer(model, c)
    fwd = torch.compile(model) if a.compile else model
    res = bench(a, c, model, fwd, opt) if a.train is False else train(a, c, model, fwd, opt)
    res.update(config=a.config, mode="compile" if a.compile else "eager", attn=a.attn,
               batch=a.batch, seq=a.seq, threads=a.threads, params=total,
               torch=torch.__version__.split("+")[0])
    print(json.dumps(res))


if __name__ == "__main__":
    main()
