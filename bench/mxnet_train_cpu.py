#!/usr/bin/env python3
"""MXNet Gluon's CPU training throughput on the job dpc runs for one model:
the model zoo net models/MODEL.net is written from
(gluon.model_zoo.vision, classes=10), hybridized with static allocation,
batch BATCH of 3x32x32 synthetic images, softmax cross-entropy, SGD with
momentum 0.9 and weight decay 1e-4 (the models' train sections), the
article's own system. One warm-up step, then STEPS timed steps; also
prints the net's trainable parameter count (dpc --summary's figure).

usage: mxnet_train_cpu.py MODEL [STEPS] [THREADS] [BATCH]   (--models: the MODELs)
Needs MXNet 1.9.1 (pip install mxnet==1.9.1 'numpy<1.24' into a venv
outside the repository); OMP_NUM_THREADS sets its threads, before import.
Last line: `throughput: X img/s`.
"""
import os
import sys
import time

GLUON_NAMES = {"resnet18": "resnet18_v1", "resnet34": "resnet34_v1", "resnet50": "resnet50_v1",
               "resnet18_v2": "resnet18_v2", "mobilenet_v2": "mobilenetv2_1.0"}

if sys.argv[1:] == ["--models"]:  # the MODELs it knows
    print(" ".join(GLUON_NAMES))
    sys.exit(0)
if len(sys.argv) < 2 or sys.argv[1] not in GLUON_NAMES:
    raise SystemExit(__doc__ + "MODEL: one of " + " ".join(GLUON_NAMES))
model = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
threads = sys.argv[3] if len(sys.argv) > 3 else "2"
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 128
os.environ["OMP_NUM_THREADS"] = threads  # read when MXNet loads
import mxnet as mx  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

mx.random.seed(0)
net = gluon.model_zoo.vision.get_model(GLUON_NAMES[model], classes=10)
net.initialize(mx.init.Xavier(magnitude=2.24))
net.hybridize(static_alloc=True, static_shape=True)
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4})
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
x = mx.nd.random.normal(shape=(batch, 3, 32, 32))
y = mx.nd.random.randint(0, 10, shape=(batch,)).astype("float32")


def step():
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(batch)
    loss.wait_to_read()


step()  # warm-up: shapes inferred, parameters allocated
trainable = sum(p.data().size for p in net.collect_params().values() if p.grad_req != "null")
mx.nd.waitall()
t0 = time.perf_counter()
for _ in range(steps):
    step()
mx.nd.waitall()
dt = time.perf_counter() - t0
print(f"mxnet {mx.__version__} gluon {GLUON_NAMES[model]}: {trainable} trainable parameters, {steps} steps of batch "
      f"{batch} in {dt:.3f} seconds, {threads} threads")
print(f"throughput: {steps * batch / dt:.1f} img/s")
