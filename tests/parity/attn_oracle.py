#!/usr/bin/python3
"""Fused attention against PyTorch in float64 (tests/attn_oracle_test.sh).

torch.nn.functional.scaled_dot_product_attention is the oracle the issue
names, but Debian's torch is 1.13, which lacks it: the reference here is
its definition written out, softmax(Q Kᵀ / √D + mask) · V per head in
float64 (mask −inf where key j > query i + Tk − Tq), which is what SDPA
computes. The net (written by the shell test) is

    a = attention(dense(x, C), dense(x, C), dense(x, C), heads=H, causal=...)
    logits = dense(flatten(a), K); loss = softmax_cross_entropy(logits, y)

with no biases; dpc_step runs one training step of its plan on the cpu
backend (the generated C kernels: forward, log-sum-exp, dq, dk, dv) from
the weights and batch written here, and its logits and weight gradients
must match torch's autograd through the float64 reference.

Usage: attn_oracle.py DPC_STEP PLAN DIR HEADS CAUSAL
Prints one line per check and exits 1 if any fails.
"""
import importlib.util
import json
import os
import struct
import subprocess
import sys

import numpy as np
import torch


def st_write(path, tensors):
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "convert_weights", os.path.join(here, "..", "..", "scripts", "convert_weights.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.st_write(path, tensors)


def st_read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + end], dtype="<f4").reshape(e["shape"])
    return out


def reference(x, wq, wk, wv, wo, heads, causal):
    """logits of the net in float64: explicit masked softmax per head."""
    n, t, c = x.shape
    d = c // heads
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T
    split = lambda z: z.reshape(n, t, heads, d).permute(0, 2, 1, 3)  # head h: channels h*d..
    s = split(q) @ split(k).transpose(-1, -2) / d ** 0.5
    if causal:  # Tq = Tk here: key j visible to query i when j <= i
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    a = (torch.softmax(s, dim=-1) @ split(v)).permute(0, 2, 1, 3).reshape(n, t * c)
    return a @ wo.T


def main():
    dpc_step, plan, tmp, heads, causal = sys.argv[1], sys.argv[2], sys.argv[3], int(
        sys.argv[4]), int(sys.argv[5])
    names = subprocess.run([dpc_step, plan, "--names"], check=True, capture_output=True,
                           text=True).stdout.split("\n")
    shapes = {}
    for line in names:
        if line and not line.startswith("batch"):
            nm, dims = line.split()
            shapes[nm] = tuple(int(s) for s in dims.split(","))
    batch = int([l for l in names if l.startswith("batch")][0].split()[1])
    rng = np.random.default_rng(7)
    init = {nm: (rng.standard_normal(sh) * 0.4).astype(np.float32) for nm, sh in shapes.items()}
    c = shapes["dense0.weight"][1]
    t = shapes["dense3.weight"][1] // c
    x = rng.standard_normal((batch, t, c)).astype(np.float32) * 2  # peaked weights
    y = rng.integers(0, shapes["dense3.weight"][0], batch).astype(np.int32)
    st_write(os.path.join(tmp, "init.safetensors"), list(init.items()))
    x.tofile(os.path.join(tmp, "image.f32"))
    y.tofile(os.path.join(tmp, "label.i32"))
    out_path = os.path.join(tmp, "out.safetensors")
    subprocess.run([dpc_step, plan, os.path.join(tmp, "init.safetensors"),
                    os.path.join(tmp, "image.f32"), os.path.join(tmp, "label.i32"), "0",
                    out_path], check=True)
    got = st_read(out_path)

    w = {nm: torch.tensor(v, dtype=torch.float64, requires_grad=True) for nm, v in init.items()}
    logits = reference(torch.tensor(x, dtype=torch.float64), w["dense0.weight"],
                       w["dense1.weight"], w["dense2.weight"], w["dense3.weight"], heads, causal)
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y, dtype=torch.long),
                                             reduction="sum")
    loss.backward()
    # f32 kernels against float64: sums of at most t*c = 84 products round
    # to ~1e-6 of the largest value; 1e-4 leaves room, while a wrong mask,
    # scale, head layout or gradient is off by O(1).
    checks = [("logits", got["s0.r0.logits"], logits.detach().numpy())]
    for i, what in enumerate(["q", "k", "v", "out"]):
        nm = "dense%d.weight" % i
        checks.append((nm + ".grad (%s)" % what, got[nm + ".grad"], w[nm].grad.numpy()))
    bad = 0
    for what, a, b in checks:
        err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
        ok = err < 1e-4
        bad += not ok
        print("%s: %s heads %d causal %d: max error %.3g of the largest" %
              ("ok" if ok else "FAIL", what, heads, causal, err))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
