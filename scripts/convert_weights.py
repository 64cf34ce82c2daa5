#!/usr/bin/env python3
"""scripts/convert_weights.py — torchvision and Gluon model-zoo weights to
dpc's parameter names, and back.

Usage:
    scripts/convert_weights.py --from torchvision|gluon --model MODEL IN OUT.safetensors
                               [--exclude GLOB]...
    scripts/convert_weights.py --to torchvision|gluon --model MODEL IN.safetensors OUT.safetensors
    scripts/convert_weights.py --map torchvision|gluon --model MODEL     (the name map, on stdout)

MODEL is resnet18, resnet34, resnet50 or mobilenet_v2: the networks of
models/MODEL.net (dpc's names are `dpc --params models/MODEL.net`). IN is a
safetensors file (F32, F64, F16 or BF16; written as F32), a NumPy .npz, or,
when torch imports, a .pth/.pt state dict. OUT is safetensors (F32), written
through a fresh temporary and renamed, never through a planted link.

--from: every tensor the framework's model has must be in IN and nothing
else (torchvision's num_batches_tracked counters are dropped), each with the
shape the architecture gives it (the classifier's class count excepted:
ImageNet weights have 1000, the models here 10; --exclude 'dense0.*' leaves
the head out, and `dprun --load-params OUT --allow-missing 'dense0.*'`
starts it from its seeded initial values). --to: IN holds dpc's names (a
`dprun --save-params` file), OUT the framework's. --map prints the
`DPC_NAME FOREIGN_NAME` lines `dprun --name-map` reads, for loading a
foreign file without converting it (where no reshape is needed).

Names and layouts. Convolution weights are [out, in/groups, kh, kw] and
dense weights [out, in] in dpc, PyTorch and MXNet alike, so tensors are
copied bit for bit; only names change, and Gluon MobileNetV2's classifier, a
1x1 convolution [classes, 1280, 1, 1], becomes dpc's dense [classes, 1280].
BatchNorm: dpc's gamma/beta/running_mean/running_var are torchvision's
weight/bias/running_mean/running_var and Gluon's gamma/beta/running_mean/
running_var.
  torchvision: conv1.weight, bn1.*, layer1.0.conv1.weight,
      layer2.0.downsample.0.weight, fc.weight, fc.bias.
  Gluon (collect_params() names): resnetv10_conv0_weight,
      resnetv10_stage1_conv0_weight, resnetv10_dense0_weight,
      mobilenetv20_features_linearbottleneck0_conv0_weight,
      mobilenetv20_output_pred_weight. On input a leading "arg:"/"aux:"
      (symbol exports) and the model prefix (resnetv1N_, mobilenetv2N_;
      model-zoo files saved with it stripped) are optional; on output the
      names carry resnetv10_ / mobilenetv20_. MXNet's binary .params format is
      not read: save Gluon weights as .npz first (with mxnet:
      np.savez(F, **{k: v.data().asnumpy() for k, v in net.collect_params().items()})).

Refused, with the reason, where dpc's model is not the framework's:
  torchvision resnet50 is ResNet v1.5 (stride on the 3x3 convolution) with
      bias-free 1x1 convolutions; models/resnet50.net is Gluon's
      resnet50_v1 (stride on the first 1x1, 1x1 convolutions with biases).
  torchvision mobilenet_v2 has no expansion convolution in its first
      bottleneck and a classifier with a bias; models/mobilenet_v2.net is
      Gluon's mobilenet_v2_1_0.
  resnet18_cifar (models/resnet18_cifar.net): a 3x3 stride-1 stem without
      the max-pool; no ImageNet model zoo net has it.
Exits 0, or 1 with one line on stderr naming the file, tensor and shapes.
"""
import argparse
import fnmatch
import json
import os
import re
import struct
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("convert_weights: needs NumPy, which %s lacks (Debian: apt-get install python3-numpy; "
             "else pip install numpy); or run it with /usr/bin/python3" % sys.executable)

# ---- the architectures: (dpc prefix, kind, shape, torchvision prefix, gluon prefix) ----
# kind: conv, convb (with bias), bn, dense, denseb (with bias), pred (Gluon's
# 1x1 classifier convolution as dpc's bias-free dense). A shape's None is the
# class count, which the weights decide.

LEAVES = {  # kind -> [(dpc leaf, torchvision leaf, gluon leaf)]
    "conv": [("weight", "weight", "weight")],
    "convb": [("weight", "weight", "weight"), ("bias", "bias", "bias")],
    "bn": [("gamma", "weight", "gamma"), ("beta", "bias", "beta"),
           ("running_mean", "running_mean", "running_mean"),
           ("running_var", "running_var", "running_var")],
    "dense": [("weight", "weight", "weight")],
    "denseb": [("weight", "weight", "weight"), ("bias", "bias", "bias")],
    "pred": [("weight", None, "weight")],
}

REFUSED = {
    ("torchvision", "resnet50"):
        "torchvision's resnet50 is ResNet v1.5 (stride on the 3x3 convolution, bias-free 1x1 "
        "convolutions); models/resnet50.net is Gluon's resnet50_v1 (stride on the first 1x1, "
        "1x1 convolutions with biases): use --from gluon, or write a v1.5 .net",
    ("torchvision", "mobilenet_v2"):
        "torchvision's mobilenet_v2 has no 1x1 expansion in its first bottleneck and a "
        "classifier with a bias; models/mobilenet_v2.net is Gluon's mobilenet_v2_1_0: use "
        "--from gluon",
}


class Counter:
    """dpc's instance names: <kind><n>, numbered per kind in call order."""

    def __init__(self):
        self.n = {}

    def __call__(self, kind):
        k = self.n.get(kind, 0)
        self.n[kind] = k + 1
        return "%s%d" % (kind, k)


def resnet(layers, bottleneck):
    """Gluon's ResNetV1 as models/resnet{18,34,50}.net elaborate it."""
    L = [("conv0", "conv", (64, 3, 7, 7), "conv1", "conv0"),
         ("batchnorm0", "bn", (64,), "bn1", "batchnorm0")]
    blocks = Counter()
    cin = 64
    for s, n in enumerate(layers):
        c = (256 << s) if bottleneck else (64 << s)
        g = Counter()  # Gluon numbers convolutions and BatchNorms per stage
        for j in range(n):
            down = cin != c
            if bottleneck:
                name = blocks("project" if j == 0 else "bottleneck")
            else:
                name = blocks("down" if down else "basic")
            tv, gl = "layer%d.%d." % (s + 1, j), "stage%d_" % (s + 1)
            m = c // 4
            if bottleneck:
                body = [("convb", (m, cin, 1, 1)), ("conv", (m, m, 3, 3)), ("convb", (c, m, 1, 1))]
            else:
                body = [("conv", (c, cin, 3, 3)), ("conv", (c, c, 3, 3))]
            for i, (kind, shape) in enumerate(body):
                L.append(("%s.conv%d" % (name, i), kind, shape, tv + "conv%d" % (i + 1),
                          gl + g("conv")))
                L.append(("%s.batchnorm%d" % (name, i), "bn", (shape[0],), tv + "bn%d" % (i + 1),
                          gl + g("batchnorm")))
            if down:
                i = len(body)
                L.append(("%s.conv%d" % (name, i), "conv", (c, cin, 1, 1), tv + "downsample.0",
                          gl + g("conv")))
                L.append(("%s.batchnorm%d" % (name, i), "bn", (c,), tv + "downsample.1",
                          gl + g("batchnorm")))
            cin = c
    L.append(("dense0", "denseb", (None, cin), "fc", "dense0"))
    return L


def mobilenet_v2():
    """Gluon's mobilenet_v2_1_0 as models/mobilenet_v2.net elaborates it."""
    L = [("conv0", "conv", (32, 3, 3, 3), None, "features_conv0"),
         ("batchnorm0", "bn", (32,), None, "features_batchnorm0")]
    ins = [32, 16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160]
    outs = ins[1:] + [320]
    strides = [1, 2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1]
    blocks = Counter()
    for k, (cin, c, s) in enumerate(zip(ins, outs, strides)):
        e = cin * (1 if k == 0 else 6)
        name = blocks("inverted" if s == 1 and cin == c else "linear")
        gl = "features_linearbottleneck%d_" % k
        for i, shape in enumerate([(e, cin, 1, 1), (e, 1, 3, 3), (c, e, 1, 1)]):
            L.append(("%s.conv%d" % (name, i), "conv", shape, None, gl + "conv%d" % i))
            L.append(("%s.batchnorm%d" % (name, i), "bn", (shape[0],), None, gl + "batchnorm%d" % i))
    L += [("conv1", "conv", (1280, 320, 1, 1), None, "features_conv1"),
          ("batchnorm1", "bn", (1280,), None, "features_batchnorm1"),
          ("dense0", "pred", (None, 1280), None, "output_pred")]
    return L


MODELS = {
    "resnet18": (lambda: resnet([2, 2, 2, 2], False), "resnetv10_"),
    "resnet34": (lambda: resnet([3, 4, 6, 3], False), "resnetv10_"),
    "resnet50": (lambda: resnet([3, 4, 6, 3], True), "resnetv10_"),
    "mobilenet_v2": (mobilenet_v2, "mobilenetv20_"),
}
GLUON_PREFIX = re.compile(r"^(?:arg:|aux:)?(?:resnetv1\d+_|mobilenetv2\d+_)?")


def fail(msg):
    sys.stderr.write("convert_weights.py: error: %s\n" % msg)
    sys.exit(1)


def name_table(framework, model):
    """[(dpc name, foreign name, dpc shape, foreign shape)] in dpc's order."""
    if model == "resnet18_cifar":
        fail("models/resnet18_cifar.net has a 3x3 stride-1 stem and no max-pool; no ImageNet "
             "model zoo ResNet has it (convert for models/resnet18.net)")
    if model not in MODELS:
        fail("unknown model '%s' (resnet18, resnet34, resnet50, mobilenet_v2)" % model)
    if (framework, model) in REFUSED:
        fail(REFUSED[(framework, model)])
    layers, prefix = MODELS[model]
    out = []
    for dpc, kind, shape, tv, gl in layers():
        for dleaf, tleaf, gleaf in LEAVES[kind]:
            shp = shape if dleaf == "weight" else shape[:1]
            if framework == "torchvision":
                foreign, fshape = "%s.%s" % (tv, tleaf), shp
            else:
                foreign, fshape = "%s%s_%s" % (prefix, gl, gleaf), shp
                if kind == "pred":
                    fshape = shp + (1, 1)
            out.append(("%s.%s" % (dpc, dleaf), foreign, shp, fshape))
    return out


# ---- files -------------------------------------------------------------------

ST_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4"}


def st_read(path):
    """A safetensors file: {name: ndarray} in header order (BF16 widened)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail("%s: not a safetensors file (%d bytes)" % (path, len(data)))
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8 or n > 100_000_000:
        fail("%s: not a safetensors file (a header of %d bytes in %d)" % (path, n, len(data)))
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        fail("%s: bad safetensors header: %s" % (path, e))
    if not isinstance(header, dict):
        fail("%s: bad safetensors header: not an object" % path)
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + n:]
    out = {}
    for name, e in header.items():
        try:
            dt, shape, (b, end) = e["dtype"], [int(d) for d in e["shape"]], e["data_offsets"]
        except (KeyError, TypeError, ValueError):
            fail("%s: tensor '%s': bad header entry" % (path, name))
        if not (0 <= b <= end <= len(body)):
            fail("%s: tensor '%s': data_offsets [%d, %d] outside the %d data bytes"
                 % (path, name, b, end, len(body)))
        count = int(np.prod(shape)) if shape else 1
        if dt == "BF16":
            if end - b != 2 * count:
                fail("%s: tensor '%s': shape and data_offsets disagree" % (path, name))
            bits = np.frombuffer(body[b:end], dtype="<u2").astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(shape)
            continue
        if dt not in ST_DTYPES:
            fail("%s: tensor '%s' has dtype %s (F32, F64, F16, BF16, I64 are read)" % (path, name, dt))
        a = np.frombuffer(body[b:end], dtype=ST_DTYPES[dt])
        if a.size != count:
            fail("%s: tensor '%s': shape %s holds %d values, data_offsets %d"
                 % (path, name, shape, count, a.size))
        out[name] = a.reshape(shape)
    return out


def read_any(path):
    if path.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    if path.endswith((".pth", ".pt")):
        try:
            import torch
        except ImportError:
            fail("%s: reading a .pth needs torch; save the state dict as safetensors or .npz" % path)
        # weights_only: a .pth is a pickle, which may run code; this reads tensors only
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:
            fail("%s: this torch cannot load a .pth without running its pickle (weights_only, "
                 "torch >= 1.13); save the state dict as safetensors or .npz" % path)
        except Exception as e:  # a pickle with more than tensors, a damaged zip
            fail("%s: not a plain state dict of tensors (%s)" % (path, str(e).splitlines()[0]))
        if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
            sd = sd["state_dict"]
        if not isinstance(sd, dict):
            fail("%s: not a state dict" % path)
        return {k: v.detach().cpu().numpy() for k, v in sd.items()}
    return st_read(path)


def st_write(path, tensors, meta):
    """tensors: [(name, ndarray)] as F32 in that order; atomically, no link followed."""
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".convert_weights.")  # O_EXCL, fresh name
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            for b in blobs:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        if os.path.lexists(path) and not os.path.isfile(path):
            fail("%s exists and is not a regular file" % path)
        os.replace(tmp, path)  # replaces a link itself, never writes through it
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def shape_ok(want, got):
    return len(want) == len(got) and all(w is None or w == g for w, g in zip(want, got))


def shape_str(s):
    return "[" + ",".join("N" if d is None else str(d) for d in s) + "]"


def convert(table, src, path, to_dpc, what, excludes):
    """src {name: array} -> [(name, float32 array)] in dpc's order."""
    if to_dpc:  # foreign names in, optional arg:/aux:/model prefix on Gluon's
        if what.startswith("gluon"):
            src = {GLUON_PREFIX.sub("", k): v for k, v in src.items()}
            key = lambda row: GLUON_PREFIX.sub("", row[1])
        else:
            src = {k: v for k, v in src.items() if not k.endswith("num_batches_tracked")}
            key = lambda row: row[1]
    else:
        key = lambda row: row[0]
    known = {key(r) for r in table}
    for name in src:
        if name not in known:
            fail("%s: tensor '%s' is not a %s name (the model's first: '%s')"
                 % (path, name, what, key(table[0])))
    missing = [key(r) for r in table if key(r) not in src]
    if missing:
        fail("%s: no tensor '%s' (%s needs %d tensors; %d missing)"
             % (path, missing[0], what, len(table), len(missing)))
    out = []
    for row in table:
        dpc, foreign, dshape, fshape = row
        a = np.asarray(src[key(row)])
        want = dshape if not to_dpc else fshape
        if not shape_ok(want, a.shape):
            fail("%s: tensor '%s' has shape %s; %s needs %s"
                 % (path, key(row), shape_str(a.shape), what, shape_str(want)))
        if not np.issubdtype(a.dtype, np.floating):
            fail("%s: tensor '%s' has dtype %s, not floating point" % (path, key(row), a.dtype))
        if to_dpc and any(fnmatch.fnmatchcase(dpc, g) for g in excludes):
            continue
        a = a.astype(np.float32)
        if len(fshape) != len(dshape):  # Gluon's 1x1 classifier convolution, dpc's dense
            a = a.reshape(a.shape[:2]) if to_dpc else a.reshape(a.shape + (1, 1))
        out.append((dpc if to_dpc else foreign, a))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    way = ap.add_mutually_exclusive_group(required=True)
    way.add_argument("--from", dest="src", choices=["torchvision", "gluon"],
                     help="IN holds the framework's names; OUT gets dpc's")
    way.add_argument("--to", dest="dst", choices=["torchvision", "gluon"],
                     help="IN holds dpc's names (dprun --save-params); OUT gets the framework's")
    way.add_argument("--map", choices=["torchvision", "gluon"],
                     help="print the `DPC_NAME FOREIGN_NAME` lines of dprun --name-map")
    ap.add_argument("--model", required=True,
                    help="resnet18, resnet34, resnet50 or mobilenet_v2 (models/MODEL.net)")
    ap.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                    help="with --from: leave out the dpc names matching GLOB (e.g. 'dense0.*')")
    ap.add_argument("files", nargs="*", metavar="IN OUT")
    a = ap.parse_args()
    framework = a.src or a.dst or a.map
    table = name_table(framework, a.model)
    if a.map:
        if a.files:
            fail("--map takes no files")
        for dpc, foreign, dshape, fshape in table:
            print("%s %s" % (dpc, foreign))
        return 0
    if len(a.files) != 2:
        fail("give IN and OUT (see --help)")
    if a.exclude and not a.src:
        fail("--exclude goes with --from")
    src_path, out_path = a.files
    if os.path.abspath(src_path) == os.path.abspath(out_path):
        fail("IN and OUT are the same file: %s" % src_path)
    try:
        src = read_any(src_path)
    except OSError as e:
        fail("%s: %s" % (src_path, e.strerror or e))
    what = "%s %s" % (framework, a.model) if a.src else "dpc %s" % a.model
    out = convert(table, src, src_path, bool(a.src), what, a.exclude)
    meta = {"producer": "dpc scripts/convert_weights.py", "model": a.model,
            "from": a.src or "dpc", "to": a.dst or "dpc"}
    try:
        st_write(out_path, out, meta)
    except OSError as e:
        fail("%s: %s" % (out_path, e.strerror or e))
    print("convert_weights: %s: %d tensors, %s names (%s)" % (out_path, len(out), a.dst or "dpc", what))
    return 0


if __name__ == "__main__":
    sys.exit(main())
