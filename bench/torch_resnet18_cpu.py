#!/usr/bin/python3
"""PyTorch's CPU training throughput on the job dpc runs: torchvision
resnet18(num_classes=10) (the same ResNet-18 v1 as models/resnet18.net),
batch 128 of 3x32x32 synthetic images, softmax cross-entropy, SGD with
momentum 0.9 and weight decay 1e-4. One warm-up step, then STEPS timed steps.

usage: torch_resnet18_cpu.py [STEPS] [THREADS] [BATCH]
Last line: `throughput: X img/s`.
"""
import sys, time
import torch, torchvision

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 128
torch.set_num_threads(threads)
torch.manual_seed(0)
net = torchvision.models.resnet18(num_classes=10)
net.train()
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x = torch.randn(batch, 3, 32, 32)
y = torch.randint(0, 10, (batch,))

def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()

step()  # warm-up
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = time.perf_counter() - t0
print(f"pytorch {torch.__version__}: {steps} steps of batch {batch} in {dt:.3f} seconds, {threads} threads")
print(f"throughput: {steps * batch / dt:.1f} img/s")
