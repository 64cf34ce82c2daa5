"""tests/dp/ghost_bn.py — the PyTorch reference for data-parallel training
with per-device BatchNorm ("ghost" batch norm), for tests/dp_test.sh.

Usage:
    /usr/bin/python3 tests/dp/ghost_bn.py write-data DIR
        CIFAR-10 binary files of random images (data_batch_1..5.bin, 64
        records each; test_batch.bin, 40) for dprun --data DIR.
    /usr/bin/python3 tests/dp/ghost_bn.py check DIR INIT.st DPC.st REPLICAS BATCH STEPS
        Trains the net of tests/dp_test.sh (conv 3x3/2 -> BatchNorm -> ReLU ->
        global average pool -> dense 10) from INIT.st for STEPS steps of the
        global batch REPLICAS x BATCH, records in file order (dprun
        --no-shuffle --no-augment), in float64:
          - replica k normalises its own sub-batch k (batch statistics over
            BATCH samples, not the global batch) and updates its own running
            statistics (momentum 0.9, unbiased variance, as dpc);
          - the gradients of the replicas' summed losses are summed over the
            replicas (the all-reduce), then MXNet's SGD:
                v = momentum*v - lr*(grad/global + wd*w);  w += v
        and compares with DPC.st (dprun --save-params: the weights and
        replica 0's running statistics) as max|err| / max|ref| per tensor,
        tolerance 1e-4. A second reference with BatchNorm over the whole
        global batch must differ (in its worst tensor) by more than 100x
        that: the test can tell per-device BatchNorm from global BatchNorm.
Prints one line per tensor and `N passed, N failed`; exit 1 on failure.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2023, 0.1994, 0.2010)
LR, MOMENTUM, WD, EPS, BN_MOMENTUM = 0.1, 0.9, 0.0001, 1e-5, 0.9
TOL = 1e-4


def write_data(d):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(20170608)
    for name, n in [("data_batch_%d.bin" % i, 64) for i in range(1, 6)] + [("test_batch.bin", 40)]:
        rec = np.zeros((n, 3073), np.uint8)
        rec[:, 0] = rng.integers(0, 10, n)
        rec[:, 1:] = rng.integers(0, 256, (n, 3072))
        rec.tofile(os.path.join(d, name))


def read_train(d):
    recs = np.concatenate([np.fromfile(os.path.join(d, "data_batch_%d.bin" % i), np.uint8).reshape(-1, 3073)
                           for i in range(1, 6)])
    labels = recs[:, 0].astype(np.int64)
    px = recs[:, 1:].reshape(-1, 3, 32, 32)
    # dpc's lookup table: ((v / 255) - mean) / std in float32
    img = np.empty(px.shape, np.float32)
    for c in range(3):
        lut = ((np.arange(256, dtype=np.float32) / np.float32(255)) - np.float32(MEAN[c])) / np.float32(STD[c])
        img[:, c] = lut[px[:, c]]
    return img, labels


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], np.float32).reshape(v["shape"]).copy()
    return out


def f32(x):  # a value as dpc's kernels hold it
    return float(np.float32(x))


def train(init, img, labels, replicas, batch, steps, ghost):
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in init.items()}
    w = {k: t[k].clone().requires_grad_(True) for k in ("conv0.weight", "batchnorm0.gamma", "batchnorm0.beta",
                                                      "dense0.weight", "dense0.bias")}
    mom = {k: torch.zeros_like(v) for k, v in w.items()}
    # running statistics per replica (per device)
    rm = [t["batchnorm0.running_mean"].clone() for _ in range(replicas)]
    rv = [t["batchnorm0.running_var"].clone() for _ in range(replicas)]
    G = replicas * batch
    lr, m, wd, gs = f32(LR), f32(MOMENTUM), f32(WD), f32(1.0 / G)
    for s in range(steps):
        x_all = torch.tensor(img[s * G:(s + 1) * G], dtype=torch.float64)
        y_all = torch.tensor(labels[s * G:(s + 1) * G])
        grads = {k: torch.zeros_like(v) for k, v in w.items()}
        groups = [(k * batch, (k + 1) * batch) for k in range(replicas)] if ghost else [(0, G)]
        for k, (a, b) in enumerate(groups):
            x, y = x_all[a:b], y_all[a:b]
            c = torch.nn.functional.conv2d(x, w["conv0.weight"], stride=2, padding=1)
            mean = c.mean(dim=(0, 2, 3))
            var = c.var(dim=(0, 2, 3), unbiased=False)
            M = c.shape[0] * c.shape[2] * c.shape[3]
            h = (c - mean[None, :, None, None]) / torch.sqrt(var[None, :, None, None] + EPS)
            h = h * w["batchnorm0.gamma"][None, :, None, None] + w["batchnorm0.beta"][None, :, None, None]
            h = torch.relu(h)
            logits = h.mean(dim=(2, 3)) @ w["dense0.weight"].T + w["dense0.bias"]
            loss = torch.nn.functional.cross_entropy(logits, y, reduction="sum")
            g = torch.autograd.grad(loss, list(w.values()))
            for (name, _), gi in zip(w.items(), g):
                grads[name] += gi  # the all-reduce: a sum over the replicas
            with torch.no_grad():
                kk = k if ghost else 0
                rm[kk] = BN_MOMENTUM * rm[kk] + (1 - BN_MOMENTUM) * mean.detach()
                rv[kk] = BN_MOMENTUM * rv[kk] + (1 - BN_MOMENTUM) * var.detach() * M / (M - 1)
        with torch.no_grad():
            for name in w:
                mom[name] = m * mom[name] - lr * (grads[name] * gs + wd * w[name])
                w[name] += mom[name]
    out = {k: v.detach().numpy() for k, v in w.items()}
    out["batchnorm0.running_mean"] = rm[0].numpy()
    out["batchnorm0.running_var"] = rv[0].numpy()
    return out


def check(d, init_path, dpc_path, replicas, batch, steps):
    img, labels = read_train(d)
    init = read_st(init_path)
    got = read_st(dpc_path)
    ref = train(init, img, labels, replicas, batch, steps, ghost=True)
    glob = train(init, img, labels, replicas, batch, steps, ghost=False) if replicas > 1 else None
    passed = failed = 0
    gworst = 0.0
    for name, r in ref.items():
        err = float(np.max(np.abs(got[name] - r))) / max(float(np.max(np.abs(r))), 1e-30)
        ok = err <= TOL
        line = "%-26s ghost-BN rel err %.2e" % (name, err)
        if glob is not None:
            gerr = float(np.max(np.abs(got[name] - glob[name]))) / max(float(np.max(np.abs(glob[name]))), 1e-30)
            gworst = max(gworst, gerr)
            line += " | vs global-batch BN %.2e" % gerr
        print(("ok   " if ok else "FAIL ") + line)
        passed += ok
        failed += not ok
    if glob is not None:
        # the test must be able to tell per-device from global BatchNorm
        ok = gworst > 100 * TOL
        print(("ok   " if ok else "FAIL ") + "per-device BatchNorm differs from global-batch BatchNorm by %.2e" % gworst)
        passed += ok
        failed += not ok
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write-data":
        write_data(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) == 8 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])))
    sys.stderr.write(__doc__)
    sys.exit(2)
