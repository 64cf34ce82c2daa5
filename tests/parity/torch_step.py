"""tests/parity/torch_step.py — training steps of dpc against PyTorch.

Usage (tests/parity_test.sh runs it; Debian's /usr/bin/python3 with torch):
    /usr/bin/python3 tests/parity/torch_step.py --model MODEL \
        --plan PLAN --driver DPC_STEP --dir WORKDIR [--seed S] [--lr LR] \
        [--steps K] [--replicas R] [--init torch|xavier] [--cifar FILE] \
        [--gamma random|one] [--beta random|zero] \
        [--table FILE] [--verbose] [--torch32] [--weights F --dpc-init G]

MODEL: resnet18, resnet34 (torchvision's, which are Gluon's v1 nets),
resnet50, resnet18_v2, mobilenet_v2 (Gluon's model zoo nets, built here:
torchvision's differ), resnet18_cifar (resnet18 with a 3x3 stem and no
max-pool), cnn_small, mlp; each twin registers its modules in the
.net file's definition order.

1. Asks the driver (tests/parity/dpc_step.c) for the plan's parameters and
   BatchNorm statistics in definition order and maps them one to one onto
   the torch model's state_dict (same order; shapes and kinds must agree,
   or it stops with the list of mismatches).
2. Draws weights dpc did not make: conv/dense weights from the torch
   model's own initialisation (--init xavier: dpc's), BatchNorm gamma
   uniform in [0.5, 1.5], beta and biases in [-0.5, 0.5], random running
   statistics (--gamma one / --beta zero: the trivial values, to compare);
   and K*R*b photo-like images (smooth colour fields and discs, 8-bit,
   normalised as dprun does; --cifar FILE: the first records of a CIFAR-10
   binary file) with labels; writes init.safetensors, image.f32, label.i32
   to WORKDIR.
3. Runs K dpc steps of R replicas (the driver: runtime/train/replicas.h, the
   local all-reduce), and the same steps in torch: per replica, train-mode
   forward of its own b samples with its own BatchNorm batch statistics and
   running statistics (ghost BatchNorm, as per-device BatchNorm), per-sample
   softmax cross-entropy, backward of the SUM (MXNet's backward()); the
   replicas' gradients summed; then the plan's optimizer (class Optimizer:
   README's formulas; MXNet's SGD
       v = momentum*v - lr*(grad*rescale + wd*w);  w += v
   for sgd) with rescale = 1/(R*b), its state zero before the first step
   and t counted from 1, wd on every parameter but the excluded classes
   (hyper-parameters as the plan's schedule says, rounded to float32 as
   dpc's kernels hold them). BatchNorm: torch momentum 0.1 ==
   MXNet momentum 0.9, eps 1e-5, running variance from the unbiased batch
   variance (as dpc).
   The reference runs in float64 (from the same float32 weights and batch),
   so the errors are dpc's float32 error alone (--torch32 also shows a
   float32 torch step's error beside it, for scale; not checked).
   Kinks: where a ReLU input lies within rounding of zero, or two values of
   a max-pool window within rounding of each other, float32 and float64 may
   decide differently; that drops, keeps or moves one gradient element and
   can shift a weight's gradient by far more than rounding (seen: a ReLU
   input of 6.8e-7 against a max of 10 gave a 0.8% error in
   basic2.conv1.weight's gradient; a max-pool tie 1.3e-7 apart, 2.6% in
   conv0.weight's). So the reference follows dpc's decisions: its ReLUs use
   dpc's mask (dpc's output > 0), its relu6 clips dpc's side of 0 and 6,
   its max-pools take the window element dpc took (argmax of dpc's pool
   input). Every element where that differs from
   the reference's own decision must be within KINK (1e-4 of the tensor's
   max-abs value) of the kink, or the check fails, so a wrong ReLU or
   max-pool in dpc cannot hide behind this.
4. Compares, as max-abs-error / max-abs-value of the reference (every
   step and replica for the forward values; after the last step for the
   rest, and with K > 1 the updates and optimizer state after the first
   step too; gradients are replica 0's in the last step):
       loss, logits                          1e-4
       every parameter's update (new - old)  1e-3
       every parameter's gradient (of the summed loss)    1e-3
       every optimizer state after the step  1e-3 (momentum; lamb/adamw:
                                             adam_m, adam_v)
       every BatchNorm running statistic     1e-3, on its change (new - old),
                                             which is stricter than on its value
       every fixed gamma/beta (scale=false,  exactly 1 / 0 after the steps
       center=false)
   A conv bias that a training BatchNorm follows (Gluon's BottleneckV1), or
   a BatchNorm beta that reaches only convs and BatchNorms (MobileNetV2's
   linear bottlenecks), has the exact gradient 0; its gradient check is
   relative to the largest per-channel sum of |terms| of that gradient
   (torch_steps), the scale of the rounding of a sum that cancels; with
   sgd its update and momentum are checked against the larger of their own size and that rounding's share
   of them (lr / global batch x the terms, summed over the steps with the
   momentum's decay).
       every forward ReLU and clip output and max-pool input  1e-4, and
                                             flips as above
   One check per tensor. Prints the flips followed, the failing checks, the
   worst error of each group and `N passed, N failed`; exits 1 on any
   failure. --table writes every tensor's line to a file, --verbose prints it.
   Note on "update": new - old is taken from float32 weights, so it carries
   the rounding of the stored weight (half an ulp of w): for BN gamma near 1
   at lr 0.1 that floor is ~1e-4 relative, 10x under the tolerance; a much
   smaller lr would need the tolerance or the measure revisited.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

# The float32 error of a training step against float64, as max-abs-error /
# max-abs-value: a layer's sums round at random-signed 2^-24 each (tests/
# harness.h's F32_REORDER_TOL, 1.5e-5 of a tensor), growing with depth
# through some 20 layers: 1e-4 forward; the backward pass doubles the depth
# and BatchNorm's cancelling sums magnify it: 1e-3 for gradients, updates
# and state. Where an optimizer's conditioning puts float32 itself past it,
# --float32-floor measures the floor (a float32 torch step) and uses twice it.
TOL = {"loss": 1e-4, "logits": 1e-4, "relu": 1e-4, "clip": 1e-4, "maxpool": 1e-4, "update": 1e-3, "grad": 1e-3, "momentum": 1e-3,
       "adam_m": 1e-3, "adam_v": 1e-3, "running_mean": 1e-3, "running_var": 1e-3, "fixed": 0.0}
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
BN_EPS = 1e-5
# The forward results: --float32-floor never widens their tolerance.
FORWARD_GROUPS = ("loss", "logits", "relu", "clip", "maxpool", "running_mean", "running_var", "fixed")
KINK = 1e-4  # the largest |pre-activation| / max |pre-activation| dpc may round across zero


# ---- models ---------------------------------------------------------------

class Unit(nn.Module):
    """conv 3x3 (no bias) + batchnorm + relu, as cnn_small's `unit`."""

    def __init__(self, cin, c, stride):
        super().__init__()
        self.conv0 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.batchnorm0 = nn.BatchNorm2d(c, eps=BN_EPS, momentum=0.1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.batchnorm0(self.conv0(x)))


class CnnSmall(nn.Module):
    """models/cnn_small.net, modules registered in its definition order."""

    def __init__(self, classes=10):
        super().__init__()
        self.unit0 = Unit(3, 16, 1)
        self.unit1 = Unit(16, 16, 1)
        self.conv0 = nn.Conv2d(16, 16, 3, 1, 1, bias=False)
        self.batchnorm0 = nn.BatchNorm2d(16, eps=BN_EPS, momentum=0.1)
        self.unit2 = Unit(16, 32, 2)
        self.unit3 = Unit(32, 64, 2)
        self.dense0 = nn.Linear(64, classes)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(2)

    def forward(self, image):
        x = self.unit0(image)
        x = self.maxpool(x)
        y = self.unit1(x)
        y = self.batchnorm0(self.conv0(y))
        x = self.relu(x + y)
        x = self.unit2(x)
        x = self.unit3(x)
        return self.dense0(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def bn2d(c):
    return nn.BatchNorm2d(c, eps=BN_EPS, momentum=0.1)


class FixedBN(nn.Module):
    """Gluon's BatchNorm(scale=False, center=False), as dpc's
    batchnorm(x, scale=false, center=false): gamma 1 and beta 0 are buffers
    (dpc: state), not trained; registered as gamma, beta, running mean,
    running variance, dpc's order."""

    def __init__(self, c):
        super().__init__()
        self.register_buffer("weight", torch.ones(c))
        self.register_buffer("bias", torch.zeros(c))
        self.register_buffer("running_mean", torch.zeros(c))
        self.register_buffer("running_var", torch.ones(c))

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training, 0.1, BN_EPS)


class BottleneckV1(nn.Module):
    """Gluon's BottleneckV1 as models/resnet50.net's bottleneck/project: the
    stride on the first 1x1 conv, both 1x1 convs with a bias (pre_bn: its
    exact gradient is 0, a training BatchNorm follows), the projection
    shortcut (conv, BN) where the channels change."""

    def __init__(self, cin, c, stride):
        super().__init__()
        m = c // 4
        self.conv0 = nn.Conv2d(cin, m, 1, stride, 0, bias=True)
        self.batchnorm0 = bn2d(m)
        self.conv1 = nn.Conv2d(m, m, 3, 1, 1, bias=False)
        self.batchnorm1 = bn2d(m)
        self.conv2 = nn.Conv2d(m, c, 1, 1, 0, bias=True)
        self.batchnorm2 = bn2d(c)
        self.conv0.pre_bn = self.conv2.pre_bn = True
        self.down = cin != c
        if self.down:
            self.conv3 = nn.Conv2d(cin, c, 1, stride, 0, bias=False)
            self.batchnorm3 = bn2d(c)
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.relu(self.batchnorm0(self.conv0(x)))
        y = self.relu(self.batchnorm1(self.conv1(y)))
        y = self.batchnorm2(self.conv2(y))
        return self.relu(y + (self.batchnorm3(self.conv3(x)) if self.down else x))


class BasicBlockV2(nn.Module):
    """Gluon's BasicBlockV2 as models/resnet18_v2.net's pre/pre_down: BN and
    ReLU before each conv, no ReLU after the sum, the shortcut conv (no BN)
    on the pre-activation."""

    def __init__(self, cin, c, stride):
        super().__init__()
        self.batchnorm0 = bn2d(cin)
        self.conv0 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.batchnorm1 = bn2d(c)
        self.conv1 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.down = cin != c
        if self.down:
            self.conv2 = nn.Conv2d(cin, c, 1, stride, 0, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x):
        a = self.relu(self.batchnorm0(x))
        y = self.conv1(self.relu(self.batchnorm1(self.conv0(a))))
        return y + (self.conv2(a) if self.down else x)


def stages(block, layers, channels):
    """Gluon's _make_layer for every stage: stride 2 from stage 2 on, the
    first block of a stage takes the previous stage's channels."""
    mods, cin = [], channels[0]
    for i, n in enumerate(layers):
        for j in range(n):
            mods.append(block(cin, channels[i + 1], 2 if i > 0 and j == 0 else 1))
            cin = channels[i + 1]
    return nn.Sequential(*mods)


class ResNet50V1(nn.Module):
    """Gluon's resnet50_v1 (classes=10), parameters in models/resnet50.net's order."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv0 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.batchnorm0 = bn2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.blocks = stages(BottleneckV1, [3, 4, 6, 3], [64, 256, 512, 1024, 2048])
        self.dense0 = nn.Linear(2048, classes)

    def forward(self, image):
        x = self.maxpool(self.relu(self.batchnorm0(self.conv0(image))))
        return self.dense0(torch.flatten(F.adaptive_avg_pool2d(self.blocks(x), 1), 1))


class ResNet18V2(nn.Module):
    """Gluon's resnet18_v2 (classes=10): the data BatchNorm without gamma and
    beta, the v1 stem, pre-activation blocks, BN + ReLU before the pooling."""

    def __init__(self, classes=10):
        super().__init__()
        self.batchnorm0 = FixedBN(3)
        self.conv0 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.batchnorm1 = bn2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.blocks = stages(BasicBlockV2, [2, 2, 2, 2], [64, 64, 128, 256, 512])
        self.batchnorm2 = bn2d(512)
        self.dense0 = nn.Linear(512, classes)

    def forward(self, image):
        x = self.relu(self.batchnorm1(self.conv0(self.batchnorm0(image))))
        x = self.relu(self.batchnorm2(self.blocks(self.maxpool(x))))
        return self.dense0(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class LinearBottleneck(nn.Module):
    """Gluon's LinearBottleneck as models/mobilenet_v2.net's linear/inverted:
    the 1x1 expansion even at t = 1, the depthwise 3x3, the linear 1x1, the
    shortcut at stride 1 with equal channels."""

    def __init__(self, cin, c, t, stride):
        super().__init__()
        e = cin * t
        self.conv0 = nn.Conv2d(cin, e, 1, bias=False)
        self.batchnorm0 = bn2d(e)
        self.conv1 = nn.Conv2d(e, e, 3, stride, 1, groups=e, bias=False)
        self.batchnorm1 = bn2d(e)
        self.conv2 = nn.Conv2d(e, c, 1, bias=False)
        self.batchnorm2 = bn2d(c)
        self.shortcut = stride == 1 and cin == c
        self.relu6 = nn.ReLU6()  # a module, so that the clip tap replaces it
        # Every path from the linear bottleneck's output (shortcut sums
        # included) reaches a conv and a training BatchNorm with no
        # nonlinearity between: batchnorm2's beta has the exact gradient 0.
        self.batchnorm2.pre_bn = True

    def forward(self, x):
        y = self.relu6(self.batchnorm0(self.conv0(x)))
        y = self.relu6(self.batchnorm1(self.conv1(y)))
        y = self.batchnorm2(self.conv2(y))
        return y + x if self.shortcut else y


class MobileNetV2(nn.Module):
    """Gluon's mobilenet_v2_1_0 (classes=10); its bias-free 1x1 conv head on
    the pooled features is a bias-free Linear."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv0 = nn.Conv2d(3, 32, 3, 2, 1, bias=False)
        self.batchnorm0 = bn2d(32)
        ins = [32, 16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160]
        outs = ins[1:] + [320]  # Gluon's channels_group
        strides = [1, 2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1]
        self.blocks = nn.Sequential(*[LinearBottleneck(i, c, 1 if k == 0 else 6, s)
                                      for k, (i, c, s) in enumerate(zip(ins, outs, strides))])
        self.conv1 = nn.Conv2d(320, 1280, 1, bias=False)
        self.batchnorm1 = bn2d(1280)
        self.dense0 = nn.Linear(1280, classes, bias=False)
        self.relu6 = nn.ReLU6()

    def forward(self, image):
        x = self.blocks(self.relu6(self.batchnorm0(self.conv0(image))))
        x = self.relu6(self.batchnorm1(self.conv1(x)))
        return self.dense0(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Mlp(nn.Module):
    """models/mlp.net: flatten, dense 128 + relu, dense 10."""

    def __init__(self, classes=10):
        super().__init__()
        self.dense0 = nn.Linear(3 * 32 * 32, 128)
        self.dense1 = nn.Linear(128, classes)
        self.relu = nn.ReLU()

    def forward(self, image):
        return self.dense1(self.relu(self.dense0(torch.flatten(image, 1))))


class ShapeSmall(nn.Module):
    """tests/nets/shape_small.net: attention from primitives (reshape,
    split, permute and transpose, the causal mask, slice, concat)."""

    def __init__(self, classes=10):
        super().__init__()
        self.dense0 = nn.Linear(3 * 32 * 32, 64)
        self.dense1 = nn.Linear(16, 48)
        self.dense2 = nn.Linear(4 * 24, classes)

    def forward(self, image):
        n = image.shape[0]
        t = self.dense0(torch.flatten(image, 1)).reshape(n, 4, 16)
        q, k, v = self.dense1(t).split(16, dim=-1)
        q = q.reshape(n, 4, 2, 8).permute(0, 2, 1, 3)
        k = k.reshape(n, 4, 2, 8).permute(0, 2, 3, 1)
        v = v.reshape(n, 4, 2, 8).transpose(1, 2)
        later = torch.ones(4, 4, dtype=torch.bool).triu(1)  # key j > query i
        s = torch.matmul(q, k).masked_fill(later, float("-inf"))
        p = torch.softmax(s.reshape(n, 8, 4), -1).reshape(n, 2, 4, 4)
        o = torch.matmul(p, v).transpose(1, 2).reshape(n, 4, 16)
        o = torch.cat([o, t[..., 8:16]], -1)
        return self.dense2(torch.flatten(o, 1))


def resnet18_cifar(classes=10):
    """models/resnet18_cifar.net: ResNet-18 v1 with a 3x3 stride-1 stem and
    no max-pool (the modules keep their places, so the order of the
    parameters is resnet18's)."""
    m = torchvision.models.resnet18(num_classes=classes)
    m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


MODELS = {
    # torchvision's BasicBlock ResNets are Gluon's v1 ones (stride on the
    # first 3x3, 1x1 projection + BN where the shape changes)
    "resnet18": lambda: torchvision.models.resnet18(num_classes=10),
    "resnet18_cifar": resnet18_cifar,
    "mlp": Mlp,
    "resnet34": lambda: torchvision.models.resnet34(num_classes=10),
    "resnet50": ResNet50V1,
    "resnet18_v2": ResNet18V2,
    "mobilenet_v2": MobileNetV2,
    "cnn_small": CnnSmall,
    "shape_small": ShapeSmall,  # tests/nets/
}


def build_model(name):
    if name not in MODELS:
        raise SystemExit("unknown model " + name)
    m = MODELS[name]()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            assert mod.eps == BN_EPS and mod.momentum == 0.1
    return m


# ---- safetensors (no dependency on the `safetensors` package) -------------

def _convert_weights():
    """scripts/convert_weights.py, loaded by its path (scripts/ is no package):
    its safetensors writer is the one copy the tree keeps."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                        "convert_weights.py")
    spec = importlib.util.spec_from_file_location("convert_weights", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


st_write = _convert_weights().st_write  # st_write(path, [(name, ndarray)], meta=None): F32


def st_read(path):
    """Returns ({name: float32 ndarray} in file order, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + end], dtype="<f4").reshape(e["shape"]).copy()
    return out, meta


# ---- name mapping -----------------------------------------------------------

# dpc name suffix -> torch state_dict suffix
KIND = {"weight": "weight", "gamma": "weight", "beta": "bias", "bias": "bias",
        "running_mean": "running_mean", "running_var": "running_var"}


def dpc_tensors(driver, plan):
    out = subprocess.run([driver, plan, "--names"], check=True, capture_output=True, text=True).stdout
    names, batch = [], None
    for line in out.splitlines():
        name, dims = line.split()
        if name == "batch":
            batch = int(dims)
        else:
            names.append((name, tuple(int(d) for d in dims.split(","))))
    return names, batch


def map_names(dpc, model):
    """dpc (name, shape) list -> list of (dpc name, torch name), by order."""
    sd = [(k, tuple(v.shape)) for k, v in model.state_dict().items()
          if not k.endswith("num_batches_tracked")]
    errors = []
    if len(sd) != len(dpc):
        errors.append("dpc has %d parameters and statistics, torch %d" % (len(dpc), len(sd)))
    pairs = []
    for (dn, ds), (tn, ts) in zip(dpc, sd):
        kind = dn.rsplit(".", 1)[-1]
        if KIND.get(kind) != tn.rsplit(".", 1)[-1] or ds != ts:
            errors.append("%s %s <-> %s %s" % (dn, list(ds), tn, list(ts)))
        pairs.append((dn, tn))
    if errors:
        raise SystemExit("parameter mapping failed:\n  " + "\n  ".join(errors))
    return pairs


# ---- data -------------------------------------------------------------------

def init_values(dpc, rng, magnitude=2.24):
    """Non-trivial float32 values for every dpc parameter and statistic."""
    vals = {}
    for name, shape in dpc:
        kind = name.rsplit(".", 1)[-1]
        if kind == "weight":  # Xavier uniform, factor "avg", as dpc's store
            field = int(np.prod(shape[2:])) if len(shape) > 2 else 1
            fan_in, fan_out = shape[1] * field, shape[0] * field
            scale = np.sqrt(magnitude / ((fan_in + fan_out) / 2))
            v = rng.uniform(-scale, scale, shape)
        elif kind == "gamma":
            v = rng.uniform(0.5, 1.5, shape)
        elif kind in ("beta", "bias"):
            v = rng.uniform(-0.5, 0.5, shape)
        elif kind == "running_mean":
            v = rng.uniform(-0.5, 0.5, shape)
        elif kind == "running_var":
            v = rng.uniform(0.5, 2.0, shape)
        else:
            raise SystemExit("no initialiser for " + name)
        vals[name] = v.astype(np.float32)
    return vals


def normalise(px):
    """uint8 NCHW pixels -> float32 as dprun's input pipeline makes them
    (float32 v/255, then (x - mean) / std in double, rounded once)."""
    x = (px.astype(np.float32) / np.float32(255)).astype(np.float64)
    mean = np.array(CIFAR_MEAN, np.float64).reshape(1, 3, 1, 1)
    std = np.array(CIFAR_STD, np.float64).reshape(1, 3, 1, 1)
    return ((x - mean) / std).astype(np.float32)


def batch_values(rng, batch, classes=10):
    """Photo-like 8-bit images: smooth colour fields (a random 4x4 grid per
    channel, bilinearly upsampled), a few bright or dark discs, and a little
    pixel noise, so neighbouring pixels correlate and channel statistics
    are far from uniform noise's; then normalised as dprun does."""
    grid = rng.uniform(0, 255, (batch, 3, 4, 4))
    t = np.linspace(0, 3, 32)
    i0 = np.minimum(t.astype(int), 2)
    f = (t - i0)[None, None, :, None]
    rows = grid[:, :, i0, :] * (1 - f) + grid[:, :, i0 + 1, :] * f
    g = (t - i0)[None, None, None, :]
    img = rows[:, :, :, i0] * (1 - g) + rows[:, :, :, i0 + 1] * g
    yy, xx = np.mgrid[0:32, 0:32]
    for n in range(batch):
        for _ in range(rng.integers(1, 4)):
            cy, cx, rad = rng.uniform(0, 32), rng.uniform(0, 32), rng.uniform(3, 10)
            disc = ((yy - cy) ** 2 + (xx - cx) ** 2) < rad ** 2
            img[n][:, disc] = rng.uniform(0, 255, (3, 1))
    img += rng.normal(0, 6, img.shape)
    px = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return normalise(px), rng.integers(0, classes, batch).astype(np.int32)


def cifar_values(path, batch):
    """The first `batch` records of a CIFAR-10 binary file, normalised as
    dprun does."""
    raw = np.fromfile(path, np.uint8)
    if raw.size < batch * 3073:
        raise SystemExit("%s holds fewer than %d records" % (path, batch))
    raw = raw[:batch * 3073].reshape(batch, 3073)
    return normalise(raw[:, 1:].reshape(batch, 3, 32, 32)), raw[:, 0].astype(np.int32)


# ---- the optimizers (README's train section) -----------------------------------

class Optimizer:
    """The update of README's train section, exactly as its formulas say, on
    float64 tensors: g = summed gradient * rescale (1/global batch), ||.||
    the L2 norm of the whole tensor; a parameter of an excluded class (dpc
    name kind gamma/beta: bn, bias: bias) gets wd 0 and no adaptation
    (lars trust 1, lamb r 1). hp: the plan's hyper-parameters as dpc's
    kernels hold them (float32), from dpc_step's metadata."""

    def __init__(self, hp, params, kinds):
        self.hp, self.kinds, self.t = hp, kinds, 0
        names = ["momentum"] if hp["optimizer"] in ("sgd", "lars") else ["adam_m", "adam_v"]
        self.state = {tn: {k: torch.zeros_like(w) for k in names} for tn, w in params.items()}

    def excluded(self, tn):
        cls = {"gamma": "bn", "beta": "bn", "bias": "bias"}.get(self.kinds[tn])
        return cls in self.hp["exclude"]

    def step(self, params, lr, rescale):
        hp, self.t = self.hp, self.t + 1
        for tn, w in params.items():
            g, st, ex = w.grad * rescale, self.state[tn], self.excluded(tn)
            wd = 0.0 if ex else hp["wd"]
            if hp["optimizer"] in ("sgd", "lars"):
                trust = 1.0
                if hp["optimizer"] == "lars" and not ex:
                    wn, gn = float(w.norm()), float(g.norm())
                    if wn > 0 and gn > 0:
                        trust = hp["eta"] * wn / (gn + wd * wn + hp["eps"])
                v = st["momentum"]
                v.mul_(hp["momentum"]).sub_(lr * trust * (g + wd * w))
                if hp["nesterov"]:
                    w += hp["momentum"] * v - lr * trust * (g + wd * w)
                else:
                    w += v
                continue
            m, v = st["adam_m"], st["adam_v"]
            m.mul_(hp["beta1"]).add_((1 - hp["beta1"]) * g)
            v.mul_(hp["beta2"]).add_((1 - hp["beta2"]) * g * g)
            mh, vh = m / (1 - hp["beta1"] ** self.t), v / (1 - hp["beta2"] ** self.t)
            u = mh / (vh.sqrt() + hp["eps"]) + wd * w
            r = 1.0
            if hp["optimizer"] == "lamb" and not ex:
                wn, un = float(w.norm()), float(u.norm())
                if wn > 0 and un > 0:
                    r = wn / un
            w -= lr * r * u


# ---- the torch step -----------------------------------------------------------

class ClampTap(nn.Module):
    """Replaces every nn.ReLU (lo 0, no hi) or every nn.ReLU6 (lo 0, hi 6:
    Gluon's relu6 is clip(x, 0, 6), whose gradient passes at the bounds, as
    torch's clamp's does) of a model. With dpc's outputs, the K-th call takes
    dpc's side of every kink: where dpc's output is strictly inside (lo, hi)
    it is x (and the gradient flows), elsewhere dpc's clamped value; it
    records the kink flips that took: (count, largest distance of x to the
    nearest bound / max|x| among them). Records every output."""

    def __init__(self, lo, hi, outputs):
        super().__init__()
        self.lo, self.hi = lo, hi
        self.reset(outputs)

    def reset(self, outputs):
        self.dpc, self.outputs, self.flips = outputs, [], []

    def region(self, v):  # 0 at or under lo, 1 inside, 2 at or over hi
        r = (v > self.lo).to(torch.int8)
        return r + (v >= self.hi).to(torch.int8) if self.hi is not None else r

    def forward(self, x):
        k = len(self.outputs)
        if self.dpc is None:
            y = F.relu(x) if self.hi is None else x.clamp(self.lo, self.hi)
        else:
            if k >= len(self.dpc):
                raise SystemExit("torch runs more %s than dpc's %d" % (self.what(), len(self.dpc)))
            if tuple(self.dpc[k].shape) != tuple(x.shape):
                raise SystemExit("%s %d: dpc shape %s, torch %s" % (
                    self.what(), k, list(self.dpc[k].shape), list(x.shape)))
            d = torch.from_numpy(self.dpc[k]).to(x.dtype)
            side = self.region(d)
            y = torch.where(side == 1, x, d)
            xd = x.detach()
            flip = side != self.region(xd)
            dist = xd - self.lo if self.hi is None else torch.minimum((xd - self.lo).abs(), (xd - self.hi).abs())
            scale = float(xd.abs().max())
            margin = float(dist[flip].abs().max()) / scale if bool(flip.any()) else 0.0
            self.flips.append((int(flip.sum()), margin))
        self.outputs.append(y.detach())
        return y

    def what(self):
        return "ReLUs" if self.hi is None else "clips"


class MaxPoolTap(nn.Module):
    """Replaces every nn.MaxPool2d (all with the same k, s, p). With dpc's
    pool inputs, the K-th call takes each window's value where dpc's maximum
    is (the first maximum in row-major order, as dpc and torch both pick), so
    the gradient is routed where dpc routes it, and records the near-ties
    that took: (count, largest (true max - taken) / max|x|). Records every
    input."""

    def __init__(self, k, s, p, inputs):
        super().__init__()
        self.k, self.s, self.p = k, s, p
        self.reset(inputs)

    def reset(self, inputs):
        self.inputs, self.seen, self.flips = inputs, [], []

    def forward(self, x):
        i = len(self.seen)
        self.seen.append(x.detach())
        if self.inputs is None:
            return F.max_pool2d(x, self.k, self.s, self.p)
        if i >= len(self.inputs):
            raise SystemExit("torch runs more max-pools than dpc's %d" % len(self.inputs))
        xin = torch.from_numpy(self.inputs[i])
        if tuple(xin.shape) != tuple(x.shape):
            raise SystemExit("max-pool %d: dpc input %s, torch %s" % (i, list(xin.shape), list(x.shape)))
        _, idx = F.max_pool2d(xin, self.k, self.s, self.p, return_indices=True)
        _, own = F.max_pool2d(x.detach(), self.k, self.s, self.p, return_indices=True)
        flat = x.flatten(2)
        y = flat.gather(2, idx.flatten(2)).view(idx.shape)
        flip = idx != own
        if bool(flip.any()):
            xd = x.detach().flatten(2)
            gap = xd.gather(2, own.flatten(2)) - xd.gather(2, idx.flatten(2))
            self.flips.append((int(flip.sum()), float(gap.max()) / float(xd.abs().max())))
        else:
            self.flips.append((0, 0.0))
        return y


def tap_modules(model, relu, clip, pool_inputs):
    """Puts ClampTaps (relu, clip) and a MaxPoolTap in place of the model's
    ReLUs, ReLU6s and max-pools; returns the MaxPoolTap (None when the model
    has no pool)."""
    pool = None
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.ReLU):
                setattr(parent, name, relu)
            elif isinstance(child, nn.ReLU6):
                setattr(parent, name, clip)
            elif isinstance(child, nn.MaxPool2d):
                kind = (child.kernel_size, child.stride, child.padding, child.dilation, child.ceil_mode)
                if pool is None:
                    pool = MaxPoolTap(child.kernel_size, child.stride, child.padding, pool_inputs)
                    pool.kind = kind
                if kind != pool.kind or child.dilation != 1 or child.ceil_mode:
                    raise SystemExit("max-pools of different kinds: not supported here")
                setattr(parent, name, pool)
    return pool


def torch_steps(model_name, pairs, init, image, label, lr, hp, dtype, replicas=1, steps=1,
                taps=None, smoothing=0.0):
    """`steps` MXNet-form training steps of `replicas` data-parallel
    replicas with per-replica ("ghost") BatchNorm, as dpc_step runs them:
    step s takes the global batch image[s*R*b : (s+1)*R*b], replica r its
    r-th slice of b; replica r normalises its slice with its own batch
    statistics and updates its own running statistics; the gradients of the
    replicas' summed losses are summed, then one step of the plan's
    optimizer (class Optimizer; hp its hyper-parameters) with
    rescale = 1/(R*b) and its state carried across steps.
    taps: None, or {"sS.rR.": (relu outputs, max-pool inputs, clip
    outputs)} of dpc's steps
    in call order, which the reference then follows at kinks and near-ties.
    smoothing: PyTorch's label_smoothing of the loss.
    A conv bias (or BatchNorm beta) that a training BatchNorm follows with
    only linear maps between (the module's pre_bn) has the exact gradient
    0: the sum over N, H, W of the module output's gradient, whose terms
    cancel. Its "PARAM.grad.terms" is that sum's per-channel
    sum of |term| (replica 0, last step), the scale of its rounding.
    Returns ({dpc-style name: float64 ndarray}, {tap name: (flips, largest
    margin)})."""
    torch.manual_seed(0)
    model = build_model(model_name).to(dtype)
    relu, clip = ClampTap(0.0, None, None), ClampTap(0.0, 6.0, None)
    pool = tap_modules(model, relu, clip, None)
    capture, terms = [False], {}

    def keep_terms(name):
        def hook(mod, inputs, y):
            if capture[0]:
                y.register_hook(lambda g: terms.__setitem__(name, g.detach().abs().sum((0, 2, 3))))
        return hook
    for mname, mod in model.named_modules():
        if getattr(mod, "pre_bn", False):
            mod.register_forward_hook(keep_terms(mname + ".bias"))
    sd = model.state_dict()
    with torch.no_grad():
        for dn, tn in pairs:
            sd[tn].copy_(torch.from_numpy(init[dn]).to(dtype))
    model.train()
    params = dict(model.named_parameters())
    stat_names = [tn for _, tn in pairs if tn not in params]
    stats = [{tn: sd[tn].clone() for tn in stat_names} for _ in range(replicas)]
    kinds = {tn: dn.rsplit(".", 1)[-1] for dn, tn in pairs}
    opt = Optimizer(hp, params, kinds)
    batch = image.shape[0] // (replicas * steps)
    out, flips, grad0 = {}, {}, {}
    for s in range(steps):
        for w in params.values():
            w.grad = None
        for r in range(replicas):
            key = "s%d.r%d." % (s, r)
            with torch.no_grad():
                for tn in stat_names:
                    sd[tn].copy_(stats[r][tn])
            t = taps.get(key) if taps else None
            relu.reset(t[0] if t else None)
            clip.reset(t[2] if t else None)
            if pool:
                pool.reset(t[1] if t else None)
            capture[0] = s == steps - 1 and r == 0
            lo = (s * replicas + r) * batch
            x = torch.from_numpy(image[lo:lo + batch]).to(dtype)
            y = torch.from_numpy(label[lo:lo + batch]).long()
            logits = model(x)
            loss = F.cross_entropy(logits, y, reduction="none", label_smoothing=smoothing)
            loss.sum().backward()  # gradient of the summed loss (MXNet backward())
            out[key + "loss"], out[key + "logits"] = loss.detach(), logits.detach()
            pools = pool.seen if pool else []
            if t and (len(relu.outputs), len(pools), len(clip.outputs)) != tuple(len(v) for v in t):
                raise SystemExit("torch ran %d ReLUs, %d max-pools and %d clips, dpc %d, %d and %d" % (
                    len(relu.outputs), len(pools), len(clip.outputs), len(t[0]), len(t[1]), len(t[2])))
            for tap, tag in ((relu, "relu"), (clip, "clip")):
                for k, v in enumerate(tap.outputs):
                    out[key + "%s.%d" % (tag, k)] = v
                    flips[key + "%s.%d" % (tag, k)] = tap.flips[k] if t else (0, 0.0)
            for k, v in enumerate(pools):
                out[key + "maxpool.%d.in" % k] = v
                flips[key + "maxpool.%d.in" % k] = pool.flips[k] if t else (0, 0.0)
            with torch.no_grad():
                for tn in stat_names:
                    stats[r][tn] = sd[tn].clone()
            if s == steps - 1 and r == 0:
                grad0 = {tn: w.grad.clone() for tn, w in params.items()}
        rescale = 1.0 / (replicas * batch)
        with torch.no_grad():
            opt.step(params, lr, rescale)
        if s == 0 and steps > 1:  # the first step's result too (dpc_step's "s0.")
            for dn, tn in pairs:
                if tn in params:
                    out["s0." + dn] = params[tn].detach().clone()
                    for k, v in opt.state[tn].items():
                        out["s0.%s.%s" % (dn, k)] = v.clone()
    with torch.no_grad():
        for dn, tn in pairs:
            if tn in params:
                out[dn] = params[tn].detach().clone()
                out[dn + ".grad"] = grad0[tn]
                if tn in terms:
                    out[dn + ".grad.terms"] = terms[tn]
                for k, v in opt.state[tn].items():
                    out[dn + "." + k] = v.clone()
            else:
                out[dn] = stats[0][tn]
                for r in range(1, replicas):
                    out["r%d.%s" % (r, dn)] = stats[r][tn]
    return {k: v.detach().double().numpy() for k, v in out.items()}, flips


# ---- comparison ----------------------------------------------------------------

def optimizer_str(hp):
    o = hp["optimizer"]
    keys = {"sgd": ["momentum", "wd", "nesterov"], "lars": ["momentum", "wd", "eta", "eps"],
            "lamb": ["beta1", "beta2", "eps", "wd"], "adamw": ["beta1", "beta2", "eps", "wd"]}[o]
    ex = ", exclude=(%s)" % ", ".join(hp["exclude"]) if o != "sgd" else ""
    return "%s(%s%s)" % (o, ", ".join("%s=%g" % (k, hp[k]) for k in keys), ex)


def rel_err(got, ref):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return float("inf"), float("inf"), 0.0
    err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return (err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))), err, scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--plan", required=True)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--verbose", action="store_true",
                    help="print the whole per-tensor table (else: failures and flips only)")
    ap.add_argument("--table", help="also write the whole per-tensor table to this file")
    ap.add_argument("--init", choices=["torch", "xavier"], default="torch",
                    help="conv/dense weights: the torch model's own initialisation (default: not "
                    "what dpc would draw), or dpc's Xavier")
    ap.add_argument("--cifar", help="a CIFAR-10 binary batch file: its first records are the "
                    "batches (normalised as dprun does), else synthetic images")
    ap.add_argument("--gamma", choices=["random", "one"], default="random",
                    help="BatchNorm gamma: uniform in [0.5, 1.5], or 1")
    ap.add_argument("--beta", choices=["random", "zero"], default="random",
                    help="BatchNorm beta: uniform in [-0.5, 0.5], or 0")
    ap.add_argument("--steps", type=int, default=1, help="training steps (momentum carried)")
    ap.add_argument("--replicas", type=int, default=1,
                    help="data-parallel replicas with per-replica (ghost) BatchNorm")
    ap.add_argument("--no-follow", action="store_true",
                    help="diagnostic: the reference takes its own side of ReLU kinks and max-pool "
                    "near-ties instead of dpc's (what a plain float64 reference shows)")
    ap.add_argument("--smoothing", type=float, default=0.0,
                    help="label_smoothing of the reference's loss (the plan's "
                         "softmax_cross_entropy must have the same smoothing)")
    ap.add_argument("--torch32", action="store_true",
                    help="also run the step in float32 torch and show its error (not checked)")
    ap.add_argument("--float32-floor", action="store_true",
                    help="--torch32, and a gradient, update or optimizer state (and a forward "
                    "result of a step after the first) passes when dpc's "
                    "error is within twice the float32 torch step's own error there: for cases "
                    "whose conditioning puts float32 itself past the tolerance on some CPUs' "
                    "GEMM summation orders")
    ap.add_argument("--weights", help="a safetensors file of the torch model's state_dict "
                    "(torchvision's names): the reference starts from it instead of drawn values")
    ap.add_argument("--dpc-init", help="the file dpc starts from instead of the reference's "
                    "values under dpc's names (scripts/convert_weights.py's output of --weights: "
                    "the steps agree only where the conversion maps every tensor right)")
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    os.makedirs(a.dir, exist_ok=True)

    dpc, batch = dpc_tensors(a.driver, a.plan)
    model = build_model(a.model)
    pairs = map_names(dpc, model)
    trained = set(dict(model.named_parameters()))
    # gamma/beta that are torch buffers: batchnorm(scale=false, center=false),
    # fixed at 1 and 0 (dpc: state), checked unchanged after the steps
    fixed = {dn for dn, tn in pairs
             if tn not in trained and dn.rsplit(".", 1)[-1] in ("gamma", "beta")}
    rng = np.random.default_rng(a.seed)
    init = init_values(dpc, rng)
    for dn in fixed:
        init[dn][:] = 1 if dn.endswith(".gamma") else 0
    if a.init == "torch":
        torch.manual_seed(a.seed)
        sd = build_model(a.model).state_dict()
        for dn, tn in pairs:
            if dn.endswith(".weight"):
                init[dn] = sd[tn].numpy().astype(np.float32)
    for dn in init:
        if dn in fixed:
            continue
        if dn.endswith(".gamma") and a.gamma == "one":
            init[dn][:] = 1
        if dn.endswith(".beta") and a.beta == "zero":
            init[dn][:] = 0
    if a.weights:
        tw, _ = st_read(a.weights)
        for dn, tn in pairs:
            if tn not in tw:
                raise SystemExit("%s: no tensor '%s' (for dpc's %s)" % (a.weights, tn, dn))
            init[dn] = tw[tn].astype(np.float32)
    count = batch * a.replicas * a.steps
    image, label = cifar_values(a.cifar, count) if a.cifar else batch_values(rng, count)
    init_path = os.path.join(a.dir, "init.safetensors")
    image_path, label_path = os.path.join(a.dir, "image.f32"), os.path.join(a.dir, "label.i32")
    out_path = os.path.join(a.dir, "out.safetensors")
    if a.dpc_init:
        init_path = a.dpc_init
    else:
        st_write(init_path, [(n, init[n]) for n, _ in dpc])
    image.tofile(image_path)
    label.tofile(label_path)

    t0 = time.time()
    r = subprocess.run([a.driver, a.plan, init_path, image_path, label_path, repr(a.lr), out_path,
                        "--replicas", str(a.replicas), "--steps", str(a.steps)],
                       capture_output=True, text=True)
    t_dpc = time.time() - t0
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        print("FAIL %s: dpc_step exited %d" % (a.model, r.returncode))
        print("0 passed, 1 failed")
        return 1
    got, meta = st_read(out_path)
    # The step as dpc ran it: float32 lr and hyper-parameters (baked into kernels).
    lr = float(np.float32(float(meta["lr"])))
    hp = {k: float(np.float32(float(meta[k]))) for k in ("momentum", "wd", "eta", "eps", "beta1", "beta2")}
    hp.update(optimizer=meta["optimizer"], nesterov=int(meta["nesterov"]), exclude=meta["exclude"].split())
    assert int(meta["batch"]) == batch
    assert int(meta["replicas"]) == a.replicas and int(meta["steps"]) == a.steps
    keys = ["s%d.r%d." % (s, r) for s in range(a.steps) for r in range(a.replicas)]
    nrelu = sum(1 for n in got if n.startswith(keys[0] + "relu."))
    npool = sum(1 for n in got if n.startswith(keys[0] + "maxpool."))
    nclip = sum(1 for n in got if n.startswith(keys[0] + "clip."))
    taps = {k: ([got[k + "relu.%d" % j] for j in range(nrelu)],
                [got[k + "maxpool.%d.in" % j] for j in range(npool)],
                [got[k + "clip.%d" % j] for j in range(nclip)]) for k in keys}

    t0 = time.time()
    ref, flips = torch_steps(a.model, pairs, init, image, label, lr, hp, torch.float64,
                             a.replicas, a.steps, None if a.no_follow else taps, a.smoothing)
    t_ref = time.time() - t0
    t32 = None
    if a.torch32 or a.float32_floor:
        t32, _ = torch_steps(a.model, pairs, init, image, label, lr, hp, torch.float32,
                             a.replicas, a.steps, smoothing=a.smoothing)

    # What to check: every tensor dpc returned, and every one we expect.
    checks = []
    for k in keys:
        checks += [("loss", k + "loss", None), ("logits", k + "logits", None)]
        checks += [("relu", k + "relu.%d" % j, None) for j in range(nrelu)]
        checks += [("maxpool", k + "maxpool.%d.in" % j, None) for j in range(npool)]
        checks += [("clip", k + "clip.%d" % j, None) for j in range(nclip)]
    for dn, tn in pairs:
        kind = dn.rsplit(".", 1)[-1]
        if kind in ("running_mean", "running_var"):
            checks.append((kind, dn, init[dn]))
            checks += [(kind, "r%d.%s" % (r, dn), init[dn]) for r in range(1, a.replicas)]
        elif dn in fixed:
            checks.append(("fixed", dn, None))
            checks += [("fixed", "r%d.%s" % (r, dn), None) for r in range(1, a.replicas)]
        else:
            checks.append(("grad", dn + ".grad", None))
            states = ["momentum"] if hp["optimizer"] in ("sgd", "lars") else ["adam_m", "adam_v"]
            for pre in (["s0.", ""] if a.steps > 1 else [""]):
                checks.append(("update", pre + dn, init[dn]))
                checks += [(k, "%s%s.%s" % (pre, dn, k), None) for k in states]
    expected = {c[1] for c in checks}
    passed = failed = 0
    for n in sorted(set(got) - expected):
        print("FAIL %s: dpc returned '%s', which this test does not compare" % (a.model, n))
        failed += 1
    for n in sorted(expected - set(got)):
        print("FAIL %s: dpc did not return '%s'" % (a.model, n))
        failed += 1

    def flip_sum(prefix):
        fl = [f for n, f in flips.items() if prefix in n]
        return sum(f[0] for f in fl), max([f[1] for f in fl] + [0.0])
    print("%s: %d step(s) of %d replica(s) x batch %d, lr %g, %s, %s weights; "
          "dpc %.2fs (with kernel compile), torch float64 %.2fs" % (
              a.model, a.steps, a.replicas, batch, lr, optimizer_str(hp), a.init, t_dpc, t_ref))
    print("  rounding flips the reference followed (allowed within %g of max|x|): "
          "%d ReLU kink(s), largest %.2e; %d clip kink(s), largest %.2e; "
          "%d max-pool near-tie(s), largest %.2e" % (
              (KINK,) + flip_sum(".relu.") + flip_sum(".clip.") + flip_sum(".maxpool.")))
    head = "  %-12s %-44s %10s %10s %10s%s" % ("group", "tensor", "rel err", "abs err", "max |ref|",
                                               "    torch32" if t32 else "")
    table, shown, worst = [head], [], {}
    for group, name, old in checks:
        if name not in got:
            continue
        g, rf = got[name].astype(np.float64), ref[name]
        f32 = t32[name] if t32 else None
        if old is not None:  # compare the change of the step
            g, rf = g - old, rf - old
            f32 = f32 - old if t32 else None
        rel, err, scale = rel_err(g, rf)
        rel32 = rel_err(f32, rf)[0] if t32 else None
        # An exact zero gradient (its ".grad.terms" exist): its error is
        # relative to its terms' magnitude, which bounds the gradient itself;
        # with sgd that rounding, as it reaches the update and momentum
        # (lr * rescale per step, the momentum carrying earlier steps' share),
        # is the scale of their error too: the rest of the update (wd * w) is
        # far smaller than the gradient's terms.
        base = name[3:] if name.startswith("s0.") else name
        base = base[:-len(".momentum")] if group == "momentum" else base
        floor = 0.0
        if group == "grad" and name + ".terms" in ref:
            floor = float(np.max(ref[name + ".terms"]))
        elif group in ("update", "momentum") and base + ".grad.terms" in ref and hp["optimizer"] == "sgd":
            k = 1 if name.startswith("s0.") else a.steps
            carry = sum(hp["momentum"] ** j for j in range(k))
            floor = lr * carry * float(np.max(ref[base + ".grad.terms"])) / (a.replicas * batch)
        if floor > scale:
            scale = floor
            rel = err / scale
            rel32 = rel_err(f32, rf)[1] / scale if t32 else None
        tol = TOL[group]
        # A later step's forward runs on weights that already carry the
        # earlier updates' float32 rounding: the floor holds for it too.
        later_step = re.match(r"s[1-9][0-9]*\.", name) is not None
        if a.float32_floor and rel32 is not None and (group not in FORWARD_GROUPS or later_step):
            tol = max(tol, 2 * rel32)
        ok = rel <= tol and (scale > 0 or group == "fixed")
        why = "tol %g%s" % (tol, ", all zero" if scale == 0 else "")
        extra = ""
        if name in flips:
            nf, margin = flips[name]
            what = "near-tie" if group == "maxpool" else "kink"
            extra = "  %d %s flip(s), largest %.2e" % (nf, what, margin) if nf else ""
            if margin > KINK:
                ok, why = False, "dpc's %s differs from the reference by %.2e of max|x| > %g" % (
                    {"relu": "ReLU mask", "clip": "clip side"}.get(group, "max-pool choice"), margin, KINK)
        passed += ok
        failed += not ok
        w = worst.get(group)
        if w is None or rel > w[0]:
            worst[group] = (rel, name, rel32)
        line = "%s %-12s %-44s %10.3e %10.3e %10.3e%s%s%s" % (
            "  " if ok else "! ", group, name, rel, err, scale,
            " %10.3e" % rel32 if t32 else "", extra, "" if ok else "  FAIL (%s)" % why)
        table.append(line)
        if not ok or extra:
            shown.append(line)
    if a.table:
        with open(a.table, "w") as f:
            f.write("\n".join(table) + "\n")
        print("  per-tensor table: %s" % a.table)
    if a.verbose:
        print("\n".join(table))
    elif shown:
        print("\n".join([head] + shown))
    print("  worst per group (tolerance):")
    for group in TOL:
        if group in worst:
            rel, name, rel32 = worst[group]
            print("    %-12s %.3e (%g) at %s%s" % (
                group, rel, TOL[group], name,
                "; torch float32 there: %.3e" % rel32 if t32 else ""))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
