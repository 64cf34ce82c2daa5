#!/usr/bin/python3
"""PyTorch's CPU training throughput on the job dpc runs for one model:
the float32 twin of models/MODEL.net that the parity test builds
(tests/parity/torch_step.py: torchvision's resnet18/34, which are Gluon's v1
nets, and our own Gluon twins of resnet50_v1, resnet18_v2, mobilenet_v2 and
cnn_small), batch BATCH of 3x32x32 synthetic images, softmax
cross-entropy, SGD with momentum 0.9 and weight decay 1e-4 (the models'
train sections). Eager, or with --compile the whole step's model under
torch.compile (inductor; its compile is in the warm-up steps, not timed).

usage: torch_train_cpu.py MODEL [STEPS] [THREADS] [BATCH] [--compile]
Last line: `throughput: X img/s`.
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "parity"))
from torch_step import build_model  # noqa: E402

args = [a for a in sys.argv[1:] if a != "--compile"]
compiled = "--compile" in sys.argv[1:]
if not args:
    raise SystemExit(__doc__)
model = args[0]
steps = int(args[1]) if len(args) > 1 else 10
threads = int(args[2]) if len(args) > 2 else 2
batch = int(args[3]) if len(args) > 3 else 128
torch.set_num_threads(threads)
torch.manual_seed(0)
net = build_model(model).float().train()
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
forward = torch.compile(net) if compiled else net
x = torch.randn(batch, 3, 32, 32)
y = torch.randint(0, 10, (batch,))


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(forward(x), y)
    loss.backward()
    opt.step()


for _ in range(3 if compiled else 1):  # warm-up (and, compiled, the compile)
    step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = time.perf_counter() - t0
mode = "torch.compile" if compiled else "eager"
print(f"pytorch {torch.__version__} {mode}: {model}, {steps} steps of batch {batch} in {dt:.3f} seconds, "
      f"{threads} threads")
print(f"throughput: {steps * batch / dt:.1f} img/s")
