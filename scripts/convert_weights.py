#!/usr/bin/env python3
"""scripts/convert_weights.py (installed as dpc-convert) — torchvision and
Gluon model-zoo weights to dpc's parameter names, and back.

MODEL is resnet18, resnet34, resnet50 or mobilenet_v2: the networks of
models/MODEL.net (dpc's names are `dpc --params models/MODEL.net`). IN is a
safetensors file (F32, F64, F16 or BF16; written as F32), a NumPy .npz, or,
when torch imports, a .pth/.pt state dict (torch's zip format, read with
weights_only). IN is a regular file of at most 1 GiB (an archive: at most
1 GiB uncompressed, and at most 64 times its size), never a FIFO or device;
each array's shape is checked against its size before it is read. OUT is
safetensors (F32), or with --to torchvision and a .pth/.pt name a state dict
in torch's zip format, which torch.load(OUT, weights_only=True) reads
(written without torch); another format's name (.npz, .pth for dpc's
names, ...) is refused. Either is written through a fresh temporary (with
the umask's mode) and renamed, never through a planted link.

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
import io
import json
import os
import re
import stat
import struct
import sys
import tempfile
import zipfile
import zlib

USAGE = """usage: PROG --from torchvision|gluon --model MODEL IN OUT.safetensors [--exclude GLOB]...
       PROG --to torchvision|gluon --model MODEL IN.safetensors OUT.safetensors|OUT.pth
       PROG --map torchvision|gluon --model MODEL     (the name map, on stdout)
"""

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


PROG = os.path.basename(sys.argv[0]) or "convert_weights.py"  # the name it was run by


def one_line(msg):
    """msg with each unprintable character (a newline in a name read from IN) escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(msg))


def fail(msg):
    sys.stderr.write("%s: error: %s\n" % (PROG, one_line(msg)))
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

ST_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "BF16": "<u2"}

# What IN may be: a regular file (not a FIFO, device or directory; nothing
# under /proc or /sys) of at most MAX_INPUT bytes. An archive (.npz, .pth)
# may declare at most MAX_INPUT bytes uncompressed in all, and at most
# MAX_EXPAND times its own size (EXPAND_FLOOR for small ones), in at most
# MAX_MEMBERS members; every .npy member's shape is checked against its
# declared size before it is decompressed. A safetensors header is at most
# MAX_HEADER bytes of JSON nested at most MAX_DEPTH deep.
MAX_INPUT = 1 << 30
MAX_EXPAND = 64
EXPAND_FLOOR = 16 << 20
MAX_MEMBERS = 4096
MAX_HEADER = 16 << 20
MAX_DEPTH = 8


def read_input(path):
    """IN's bytes, read within the limits above; a FIFO is refused, never waited on."""
    real = os.path.realpath(path)
    if real.split(os.sep)[1:2] in (["proc"], ["sys"]):
        fail("%s: under /%s, not a weights file" % (path, real.split(os.sep)[1]))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        fail("%s: %s" % (path, e.strerror or e))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket")
            fail("%s: not a regular file (%s)" % (path, kind))
        for special in ("/proc", "/sys"):
            if os.path.ismount(special) and os.stat(special).st_dev == st.st_dev:  # (a bind mount's file)
                fail("%s: on %s, not a weights file" % (path, special))
        if st.st_size > MAX_INPUT:
            fail("%s: %d bytes; at most %d are read" % (path, st.st_size, MAX_INPUT))
        chunks, n = [], 0
        while n <= MAX_INPUT:
            b = os.read(fd, min(1 << 24, MAX_INPUT + 1 - n))
            if not b:
                break
            chunks.append(b)
            n += len(b)
        if n > MAX_INPUT:
            fail("%s: grew past %d bytes while read" % (path, MAX_INPUT))
        return b"".join(chunks)
    except OSError as e:
        fail("%s: %s" % (path, e.strerror or e))
    finally:
        os.close(fd)


def json_depth(raw):
    """The deepest nesting of [ and { in JSON text raw (bytes), strings skipped."""
    depth = top = 0
    for m in re.finditer(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', raw, re.S):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            top = max(top, depth)
        elif c in (b"]", b"}"):
            depth -= 1
    return top


def no_twice(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError("'%s' twice" % k)
        d[k] = v
    return d


def st_read(path, data=None):
    """A safetensors file: {name: ndarray} in header order (BF16 widened)."""
    if data is None:
        data = read_input(path)
    if len(data) < 8:
        fail("%s: not a safetensors file (%d bytes)" % (path, len(data)))
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8 or n > MAX_HEADER:
        fail("%s: not a safetensors file (a header of %d bytes in %d)" % (path, n, len(data)))
    raw = data[8:8 + n]
    if json_depth(raw) > MAX_DEPTH:
        fail("%s: bad safetensors header: nested deeper than %d" % (path, MAX_DEPTH))
    try:
        header = json.loads(raw, object_pairs_hook=no_twice)
    except (ValueError, RecursionError) as e:
        fail("%s: bad safetensors header: %s" % (path, e))
    if not isinstance(header, dict):
        fail("%s: bad safetensors header: not an object" % path)
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + n:]
    spans = []
    for name, e in header.items():
        if not isinstance(e, dict) or not isinstance(e.get("dtype"), str):
            fail("%s: tensor '%s': bad header entry" % (path, name))
        dt, shape, offs = e["dtype"], e.get("shape"), e.get("data_offsets")
        if dt not in ST_DTYPES:
            fail("%s: tensor '%s' has dtype %s (F32, F64, F16, BF16, I64, I32 are read)" % (path, name, dt))
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            fail("%s: tensor '%s': shape %s is not a list of non-negative integers"
                 % (path, name, json.dumps(shape)))
        if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int and o >= 0 for o in offs)):
            fail("%s: tensor '%s': data_offsets %s are not two non-negative integers"
                 % (path, name, json.dumps(offs)))
        b, end = offs
        if not (b <= end <= len(body)):
            fail("%s: tensor '%s': data_offsets [%d, %d] outside the %d data bytes"
                 % (path, name, b, end, len(body)))
        count = 1
        for d in shape:
            count *= d
        if count * np.dtype(ST_DTYPES[dt]).itemsize != end - b:
            fail("%s: tensor '%s': shape %s holds %d values, data_offsets %d bytes of %s"
                 % (path, name, shape, count, end - b, dt))
        if end > b:
            spans.append((b, end, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            fail("%s: tensors '%s' [%d, %d] and '%s' [%d, %d] overlap" % (path, n0, b0, e0, n1, b1, e1))
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        a = np.frombuffer(body[b:end], dtype=ST_DTYPES[e["dtype"]])
        if e["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.reshape(e["shape"])
    return out


def zip_open(path, data):
    """data as a zip archive within the limits above, before anything is decompressed."""
    at = len(data) - 22 if data[-22:-18] == b"PK\x05\x06" else data.rfind(b"PK\x05\x06", max(0, len(data) - 65557))
    if at < 0 or len(data) < at + 22:
        fail("%s: not a zip archive" % path)
    count, cd_size = struct.unpack("<HI", data[at + 10:at + 16])
    if count > MAX_MEMBERS or cd_size > MAX_MEMBERS * 1024:
        fail("%s: an archive directory of %d members in %d bytes; at most %d members are read"
             % (path, count, cd_size, MAX_MEMBERS))
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError, NotImplementedError) as e:
        fail("%s: not a zip archive (%s)" % (path, e))
    infos = z.infolist()
    total = sum(i.file_size for i in infos)
    if len(infos) > MAX_MEMBERS:
        fail("%s: %d members; at most %d are read" % (path, len(infos), MAX_MEMBERS))
    if total > MAX_INPUT:
        fail("%s: its members declare %d bytes uncompressed; at most %d are read" % (path, total, MAX_INPUT))
    if total > max(EXPAND_FLOOR, MAX_EXPAND * len(data)):
        fail("%s: its members declare %d bytes uncompressed in %d (over %d times; not read)"
             % (path, total, len(data), MAX_EXPAND))
    if len({i.filename for i in infos}) != len(infos):
        fail("%s: a member name twice" % path)
    for i in infos:
        if i.flag_bits & 1 or i.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            fail("%s: member '%s' is encrypted or compressed other than by deflate" % (path, i.filename))
    return z


NPY_HEADER = re.compile(r"\{'descr': '([^']*)', 'fortran_order': (True|False), 'shape': \(([^()]*)\), \}\s*\Z")


def npz_read(path, data):
    """A NumPy .npz: {name: ndarray}; no pickled (object) arrays, every shape checked first."""
    z = zip_open(path, data)
    out = {}
    for info in z.infolist():
        if not info.filename.endswith(".npy"):
            fail("%s: member '%s' is not a .npy array" % (path, info.filename))
        key = info.filename[:-4]
        where = "%s: array '%s'" % (path, key)
        try:
            with z.open(info) as f:
                magic = f.read(8)
                if len(magic) < 8 or magic[:6] != b"\x93NUMPY" or magic[6] not in (1, 2, 3):
                    fail("%s: not a .npy array" % where)
                size_fmt = "<H" if magic[6] == 1 else "<I"
                (hl,) = struct.unpack(size_fmt, f.read(struct.calcsize(size_fmt)))
                if hl > 65536:
                    fail("%s: a .npy header of %d bytes" % (where, hl))
                text = f.read(hl).decode("latin1")
                m = NPY_HEADER.match(text)
                if not m:
                    fail("%s: a .npy header numpy does not write: %.80r" % (where, text))
                descr, fortran, dims = m.groups()
                try:
                    dt = np.dtype(descr)
                except TypeError:
                    fail("%s: dtype '%s'" % (where, descr))
                if dt.hasobject:
                    fail("%s: an object array, whose values are pickled; not read (allow_pickle=False)" % where)
                if dt.kind not in "fiub":
                    fail("%s: dtype %s, not a number" % (where, dt))
                parts = [p.strip() for p in dims.split(",")]
                parts = parts[:-1] if parts and parts[-1] == "" else parts
                if not all(re.fullmatch(r"\d+", p) for p in parts):
                    fail("%s: shape (%s) is not non-negative integers" % (where, dims))
                shape = tuple(int(p) for p in parts)
                count = 1
                for d in shape:
                    count *= d
                nbytes = count * dt.itemsize
                if 8 + struct.calcsize(size_fmt) + hl + nbytes != info.file_size:
                    fail("%s: shape %s of %s is %d bytes; the member declares %d in all"
                         % (where, list(shape), dt, nbytes, info.file_size))
                buf = f.read(nbytes)
                f.read(1)  # to the end: the CRC is checked there
        except (zipfile.BadZipFile, zlib.error, EOFError, struct.error, OSError) as e:
            fail("%s: %s" % (where, e))
        if len(buf) != nbytes:
            fail("%s: %d of its %d bytes" % (where, len(buf), nbytes))
        a = np.frombuffer(buf, dtype=dt)
        out[key] = a.reshape(shape[::-1]).T if fortran == "True" else a.reshape(shape)
    return out


def read_any(path):
    data = read_input(path)
    if path.endswith(".npz"):
        return npz_read(path, data)
    if path.endswith((".pth", ".pt")):
        try:
            import torch
        except ImportError:
            fail("%s: reading a .pth needs torch; save the state dict as safetensors or .npz" % path)
        if not data.startswith(b"PK"):
            fail("%s: not torch's zip format (torch >= 1.6); re-save it with torch.save" % path)
        zip_open(path, data)
        # weights_only: a .pth is a pickle, which may run code; this reads tensors only
        try:
            sd = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except TypeError:
            fail("%s: this torch cannot load a .pth without running its pickle (weights_only, "
                 "torch >= 1.13); save the state dict as safetensors or .npz" % path)
        except Exception as e:  # a pickle with more than tensors, a damaged zip
            fail("%s: not a plain state dict of tensors (%s)" % (path, (str(e).splitlines() or [""])[0]))
        if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
            sd = sd["state_dict"]
        if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
            fail("%s: not a state dict of tensors" % path)
        return {k: v.detach().cpu().numpy() for k, v in sd.items()}
    return st_read(path, data)


def write_atomic(path, write):
    """write(f) into a fresh temporary beside path, renamed over it: atomically, no
    link followed, with the mode open() would give a new file (not mkstemp's 0600)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".convert_weights.")  # O_EXCL, fresh name
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if os.path.lexists(path) and not os.path.isfile(path):
            fail("%s exists and is not a regular file" % path)
        os.replace(tmp, path)  # replaces a link itself, never writes through it
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def st_write(path, tensors, meta=None):
    """tensors: [(name, ndarray)] as F32 in that order; atomically, no link followed.
    meta None: no __metadata__ (tests/parity/torch_step.py writes its weights so)."""
    header, blobs, off = {} if meta is None else {"__metadata__": meta}, [], 0
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)

    def write(f):
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    write_atomic(path, write)


def pickle_str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b  # BINUNICODE


def pickle_int(n):
    return b"J" + struct.pack("<i", n) if n < 1 << 31 else b"\x8a\x08" + struct.pack("<q", n)  # BININT, LONG1


def pth_write(path, tensors):
    """tensors: [(name, ndarray)] as F32, as torch.save writes a state dict (torch's
    zip format: archive/data.pkl, a protocol 2 pickle of an OrderedDict of
    torch._utils._rebuild_tensor_v2 calls on storages archive/data/N, and
    archive/version). Only the globals torch.load(weights_only=True) allows
    are named; torch is not imported."""
    GLOBAL = lambda mod, name: b"c" + mod.encode() + b"\n" + name.encode() + b"\n"
    pk = bytearray(b"\x80\x02" + GLOBAL("collections", "OrderedDict") + b")R(")
    for i, (name, a) in enumerate(tensors):
        n = int(a.size)
        strides, acc = [], 1
        for d in reversed(a.shape):
            strides.insert(0, acc)
            acc *= d
        pk += pickle_str(name) + GLOBAL("torch._utils", "_rebuild_tensor_v2") + b"("
        pk += (b"(" + pickle_str("storage") + GLOBAL("torch", "FloatStorage") + pickle_str(str(i))
               + pickle_str("cpu") + pickle_int(n) + b"tQ")  # the storage, by persistent id
        pk += pickle_int(0) + b"(" + b"".join(pickle_int(d) for d in a.shape) + b"t"
        pk += b"(" + b"".join(pickle_int(d) for d in strides) + b"t"
        pk += b"\x89" + GLOBAL("collections", "OrderedDict") + b")R" + b"tR"  # requires_grad, hooks
    pk += b"u."

    def write(f):
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            z.writestr("archive/data.pkl", bytes(pk))
            for i, (name, a) in enumerate(tensors):
                z.writestr("archive/data/%d" % i, np.ascontiguousarray(a, dtype="<f4").tobytes())
            z.writestr("archive/version", "3\n")
    write_atomic(path, write)


# OUT names that say another format, refused: OUT is safetensors (or, with
# --to torchvision, a .pth/.pt), and torch.load or np.load would fail on it.
FOREIGN_OUT = (".pth", ".pt", ".pkl", ".ckpt", ".bin", ".npz", ".npy", ".params")


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
    ap = argparse.ArgumentParser(prog=PROG, usage=USAGE.replace("PROG", PROG).strip()[7:],
                                 description=" ".join(__doc__.split("\n\n")[0].replace(
                                     "scripts/convert_weights.py (installed as dpc-convert)", PROG).split()),
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
    as_pth = a.dst == "torchvision" and out_path.lower().endswith((".pth", ".pt"))
    if out_path.lower().endswith(FOREIGN_OUT) and not as_pth:
        fail("%s: OUT is written as safetensors, whatever its name, and a .pth only by --to torchvision; "
             "name it .safetensors (in PyTorch: from safetensors.torch import load_file; "
             "model.load_state_dict(load_file(OUT)))" % out_path)
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
        if as_pth:
            pth_write(out_path, out)
        else:
            st_write(out_path, out, meta)
    except OSError as e:
        fail("%s: %s" % (out_path, e.strerror or e))
    print("convert_weights: %s: %d tensors, %s names (%s)" % (out_path, len(out), a.dst or "dpc", what))
    return 0


if __name__ == "__main__":
    sys.exit(main())
