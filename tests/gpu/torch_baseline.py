#!/usr/bin/env python3
"""PyTorch's training step on the network dpc runs, on the same GPU in the
same call, so dpc's step time can be read as a ratio (tests/gpu/check.sh,
stage 6). The model is tests/parity/torch_step.py's twin of models/MODEL.net
(resnet18: torchvision's, which is Gluon's v1 net), batch BATCH of 3x32x32
synthetic images, softmax cross-entropy, SGD with momentum 0.9 and weight
decay 1e-4, as dpc's train sections say.

Modes, each timed over STEPS steps after its warm-up (a compile is in the
warm-up, never in the time):
  eager      float32, NCHW
  bf16_cl    channels_last with bf16 autocast (what a PyTorch user runs
             for speed on an Ampere or Hopper GPU)
  compile    torch.compile(mode="reduce-overhead"), float32 (inductor
             kernels replayed as CUDA graphs)

usage: torch_baseline.py [--device cuda] [--model resnet18] [--batch 128]
                         [--steps 30] [--modes eager,bf16_cl,compile]
                         [--budget SECONDS]
One line per mode: `torch MODE ms_per_step X img_per_s Y` or
`torch MODE skipped: WHY`; a mode that fails prints the reason and the
script goes on. Exit 0 unless torch itself is missing (exit 3).
"""
import argparse
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda")
ap.add_argument("--model", default="resnet18")
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--modes", default="eager,bf16_cl,compile")
ap.add_argument("--budget", type=float, default=240.0, help="seconds for every mode together")
args = ap.parse_args()
t_start = time.perf_counter()

try:
    import torch
except ImportError as e:
    print(f"torch skipped: no torch in {sys.executable} ({e})")
    sys.exit(3)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
try:
    from torch_step import build_model
except ImportError as e:  # torchvision or numpy missing in this environment
    print(f"torch skipped: cannot build the model: {e}")
    sys.exit(0)

dev = torch.device(args.device)
if dev.type == "cuda" and not torch.cuda.is_available():
    print("torch skipped: torch.cuda.is_available() is False")
    sys.exit(0)
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}, "
      f"{args.model} batch {args.batch}, {args.steps} steps per mode")
# fp32 means fp32: no TF32 behind the user's back (dpc's fp32 is fp32 too).
if dev.type == "cuda":
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def run(mode):
    torch.manual_seed(0)
    net = build_model(args.model).float().train().to(dev)
    cl = mode == "bf16_cl"
    if cl:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(args.batch, 3, 32, 32, device=dev)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    forward = net
    if mode == "compile":
        if not hasattr(torch, "compile"):
            return f"skipped: torch {torch.__version__} has no torch.compile"
        forward = torch.compile(net, mode="reduce-overhead")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=cl):
            loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()

    for _ in range(5 if mode == "compile" else 2):  # warm-up, and the compile
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    ms = (time.perf_counter() - t0) * 1000 / args.steps
    return f"ms_per_step {ms:.3f} img_per_s {args.batch * 1000 / ms:.0f}"


for mode in args.modes.split(","):
    if mode not in ("eager", "bf16_cl", "compile"):
        sys.exit(f"torch_baseline.py: unknown mode {mode}")
    left = args.budget - (time.perf_counter() - t_start)
    if left < 10:
        print(f"torch {mode} skipped: out of time ({left:.0f} s left)")
        continue
    try:
        print(f"torch {mode} {run(mode)}", flush=True)
    except Exception as e:  # one mode's failure is a figure, not the end
        print(f"torch {mode} skipped: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
              flush=True)
