#!/usr/bin/env bash
# run: tier=test san=no
# Foreign weights, scripts/convert_weights.py:
#  - its name tables give, in order and shape, the tensors `dpc --params`
#    lists for models/{resnet18,resnet34,resnet50,mobilenet_v2}.net, and
#    torchvision's state_dict names and shapes for resnet18 and resnet34;
#  - one training step of models/resnet18.net from torchvision weights
#    converted to dpc's names matches PyTorch's step of torchvision's
#    resnet18 from the unconverted file (tests/parity/torch_step.py
#    --weights/--dpc-init: the float64 reference and the parity tests'
#    tolerances), so a name mapped to the wrong tensor fails;
#  - dpc -> torchvision -> dpc and dpc -> gluon -> dpc are bit-identical, and
#    Gluon names with and without their model prefix or arg:/aux: are read;
#  - hostile input is refused with one line before it is read: a device, a
#    FIFO, /proc, a file over 1 GiB, float or overlapping data_offsets,
#    negative or fractional shapes, deep JSON, a name twice, object (pickled)
#    arrays, a .npy shape larger than its member, a zip bomb, declared sizes
#    over the limit; OUT named .pth is refused but for --to torchvision,
#    whose .pth torch.load(weights_only=True) reads into torchvision's
#    resnet18 (and back, bit-identical); OUT takes the umask's mode, and
#    --to torchvision safetensors load into torchvision's resnet18;
#  - the refusals: torchvision's resnet50 and mobilenet_v2 (other nets than
#    dpc's), resnet18_cifar, a missing tensor, an unknown name, a shape
#    mismatch each give one line naming it;
#  - converted weights load in dprun, and with --exclude 'dense0.*' they
#    load under --allow-missing 'dense0.*' only.
# Needs Debian's python3-torch and python3-torchvision (scripts/deps.sh).
. tests/lib.sh
export DPC_CACHE_DIR=${DPC_CACHE_DIR:-$build/cache}
conv=scripts/convert_weights.py
driver=$build/parity/dpc_step
if ! "$py" -c 'import torch, torchvision, numpy' >/dev/null 2>&1; then
    bad "$py cannot import torch, torchvision and numpy; run scripts/deps.sh"
    finish
    exit
fi
[ -x "$driver" ] || { bad "no $driver; run make test-bins"; finish; exit; }

# ---- the name tables against dpc --params ----
for m in resnet18 resnet34 resnet50 mobilenet_v2; do
    "$bin/dpc" "models/$m.net" --params |
        awk 'NR > 1 && ($1 == "param" || $1 == "state") { s = $3; gsub(/[][]/, "", s); print $2, s }' \
            >"$tmp/$m.dpc" || bad "dpc --params models/$m.net"
    "$py" - "$conv" "$m" >"$tmp/$m.table" <<'PY' || bad "$m: the converter's table"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("cw", sys.argv[1])
cw = importlib.util.module_from_spec(spec); spec.loader.exec_module(cw)
for dpc, foreign, shape, fshape in cw.name_table("gluon", sys.argv[2]):
    print(dpc, ",".join("10" if d is None else str(d) for d in shape))
PY
    check "$m: the converter's dpc names and shapes are dpc --params'" cmp -s "$tmp/$m.dpc" "$tmp/$m.table"
done

# ---- torchvision's names and shapes; random weights and statistics ----
"$py" - "$conv" "$tmp" <<'PY' || bad "torchvision's state_dicts against the converter's tables"
import importlib.util, sys
import numpy as np, torch, torchvision
spec = importlib.util.spec_from_file_location("cw", sys.argv[1])
cw = importlib.util.module_from_spec(spec); spec.loader.exec_module(cw)
d = sys.argv[2]
torch.manual_seed(7)
rng = np.random.default_rng(7)
for m in ("resnet18", "resnet34"):
    sd = getattr(torchvision.models, m)(num_classes=10).state_dict()
    want = [(k, tuple(v.shape)) for k, v in sd.items() if not k.endswith("num_batches_tracked")]
    got = [(f, tuple(10 if x is None else x for x in fs)) for _, f, _, fs in cw.name_table("torchvision", m)]
    if want != got:
        sys.exit("%s: torchvision %s, the converter %s" % (m, [w for w in want if w not in got][:3],
                                                          [g for g in got if g not in want][:3]))
    if m != "resnet18":
        continue
    # non-trivial BatchNorm parameters and statistics, as the parity tests
    out = []
    for k, v in sd.items():
        a = v.numpy().astype(np.float32) if v.is_floating_point() else None
        if k.endswith("num_batches_tracked"):
            continue
        if ".bn" in k or "downsample.1" in k or k.startswith("bn1"):
            lo, hi = {"weight": (0.5, 1.5), "bias": (-0.5, 0.5), "running_mean": (-0.5, 0.5),
                      "running_var": (0.5, 2.0)}[k.rsplit(".", 1)[1]]
            a = rng.uniform(lo, hi, a.shape).astype(np.float32)
        out.append((k, a))
    cw.st_write(f"{d}/tv.safetensors", out, {"producer": "convert_weights_test"})
    # the same as a .pth state dict, num_batches_tracked included
    pth = {k: torch.from_numpy(a) for k, a in out}
    pth.update({k: v for k, v in sd.items() if k.endswith("num_batches_tracked")})
    torch.save(pth,
               f"{d}/tv.pth")
PY

# ---- convert, compile, one step against PyTorch ----
"$py" "$conv" --from torchvision --model resnet18 "$tmp/tv.safetensors" "$tmp/dpc.safetensors" \
    >"$tmp/out" 2>"$tmp/err" || bad "--from torchvision: $(cat "$tmp/err")"
check "a conversion says what it wrote: $(cat "$tmp/out")" \
    grep -qx "convert_weights: $tmp/dpc.safetensors: 102 tensors, dpc names (torchvision resnet18)" "$tmp/out"
"$py" "$conv" --from torchvision --model resnet18 "$tmp/tv.pth" "$tmp/dpc_pth.safetensors" 2>"$tmp/err" ||
    bad "--from torchvision a .pth: $(cat "$tmp/err")"
check "a .pth converts as its safetensors" cmp -s "$tmp/dpc.safetensors" "$tmp/dpc_pth.safetensors"
# the batch and flags of parity_test.sh's resnet18 case: its kernels are cached
if "$bin/dpc" models/resnet18.net --batch 32 --no-memplan -o "$tmp/r18.plan" 2>"$tmp/err"; then
    "$py" tests/parity/torch_step.py --model resnet18 --plan "$tmp/r18.plan" --driver "$driver" \
        --dir "$tmp/step" --weights "$tmp/tv.safetensors" --dpc-init "$tmp/dpc.safetensors" \
        >"$tmp/step.log" 2>&1
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$tmp/step.log" | tail -n 1)
    case "$line" in
    *" 0 failed") ok ;;
    *) bad "one step from converted torchvision weights against PyTorch: $(tail -n 20 "$tmp/step.log")" ;;
    esac
    # and dprun reads the converted file as it is
    "$bin/dprun" "$tmp/r18.plan" --steps 0 --eval-every 1 --data synthetic \
        --load-params "$tmp/dpc.safetensors" >/dev/null 2>"$tmp/err" &&
        grep -q "102 loaded, 0 missing (initialised), 0 skipped" "$tmp/err" && ok ||
        bad "dprun --load-params of converted weights: $(cat "$tmp/err")"
else
    bad "dpc models/resnet18.net: $(cat "$tmp/err")"
fi

# ---- round trips ----
"$py" "$conv" --to torchvision --model resnet18 "$tmp/dpc.safetensors" "$tmp/tv2.safetensors" &&
    "$py" "$conv" --from torchvision --model resnet18 "$tmp/tv2.safetensors" "$tmp/dpc2.safetensors" ||
    bad "dpc -> torchvision -> dpc"
check "dpc -> torchvision -> dpc is bit-identical" cmp -s "$tmp/dpc.safetensors" "$tmp/dpc2.safetensors"
"$py" - "$conv" "$tmp" <<'PY' || bad "gluon round trips"
import importlib.util, os, subprocess, sys
import numpy as np
conv, d = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("cw", conv)
cw = importlib.util.module_from_spec(spec); spec.loader.exec_module(cw)
rng = np.random.default_rng(3)
def run(*a):
    subprocess.run([sys.executable, conv, *a], check=True)
for m in ("resnet18", "resnet50", "mobilenet_v2"):
    t = cw.name_table("gluon", m)
    src = [(n, rng.standard_normal([10 if x is None else x for x in s]).astype(np.float32)) for n, _, s, _ in t]
    cw.st_write(f"{d}/{m}.dpc.st", src, {"producer": "convert_weights_test"})
    run("--to", "gluon", "--model", m, f"{d}/{m}.dpc.st", f"{d}/{m}.gluon.st")
    g = cw.st_read(f"{d}/{m}.gluon.st")
    assert list(g) == [f for _, f, _, _ in t], m
    assert all(g[f].shape == tuple(10 if x is None else x for x in fs) for _, f, _, fs in t), m
    run("--from", "gluon", "--model", m, f"{d}/{m}.gluon.st", f"{d}/{m}.back.st")
    back = cw.st_read(f"{d}/{m}.back.st")
    assert list(back) == [n for n, _ in src], m
    assert all(back[n].tobytes() == a.tobytes() for n, a in src), m + ": not bit-identical"
    # model-zoo files: the model prefix stripped, or arg:/aux: of an export; .npz
    strip = {f.split("_", 1)[1]: a for f, a in g.items()}
    np.savez(f"{d}/{m}.zoo.npz", **strip)
    run("--from", "gluon", "--model", m, f"{d}/{m}.zoo.npz", f"{d}/{m}.zoo.st")
    assert cw.st_read(f"{d}/{m}.zoo.st").keys() == back.keys()
    assert all(cw.st_read(f"{d}/{m}.zoo.st")[n].tobytes() == back[n].tobytes() for n in back)
    exp = {("aux:" if "running" in f else "arg:") + f: a for f, a in g.items()}
    cw.st_write(f"{d}/{m}.exp.st", list(exp.items()), {})
    run("--from", "gluon", "--model", m, f"{d}/{m}.exp.st", f"{d}/{m}.exp2.st")
    # the classifier of mobilenet_v2: Gluon's 1x1 convolution
    if m == "mobilenet_v2":
        assert g["mobilenetv20_output_pred_weight"].shape == (10, 1280, 1, 1)
        assert back["dense0.weight"].shape == (10, 1280)
PY

# ---- refusals: one line each ----
fail_prefix='convert_weights.py: error: '
cv() { "$py" "$conv" "$@"; }
expect_fail_line "torchvision resnet50 is v1.5" "torchvision's resnet50 is ResNet v1.5" \
    cv --from torchvision --model resnet50 "$tmp/tv.safetensors" "$tmp/x.st"
expect_fail_line "torchvision mobilenet_v2 is not Gluon's" "has no 1x1 expansion in its first bottleneck" \
    cv --to torchvision --model mobilenet_v2 "$tmp/dpc.safetensors" "$tmp/x.st"
expect_fail_line "resnet18_cifar's stem" "3x3 stride-1 stem and no max-pool" \
    cv --from torchvision --model resnet18_cifar "$tmp/tv.safetensors" "$tmp/x.st"
"$py" - "$conv" "$tmp" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("cw", sys.argv[1])
cw = importlib.util.module_from_spec(spec); spec.loader.exec_module(cw)
d = sys.argv[2]
t = cw.st_read(f"{d}/tv.safetensors")
cw.st_write(f"{d}/missing.st", [(k, v) for k, v in t.items() if k != "layer3.1.bn2.running_var"], {})
cw.st_write(f"{d}/unknown.st", list(t.items()) + [("layer5.0.conv1.weight", t["fc.bias"])], {})
cw.st_write(f"{d}/shape.st", [(k, v[:32] if k == "layer1.0.conv1.weight" else v) for k, v in t.items()], {})
PY
expect_fail_line "a missing tensor" \
    "missing.st: no tensor 'layer3.1.bn2.running_var' (torchvision resnet18 needs 102 tensors; 1 missing)" \
    cv --from torchvision --model resnet18 "$tmp/missing.st" "$tmp/x.st"
expect_fail_line "an unknown name" "unknown.st: tensor 'layer5.0.conv1.weight' is not a torchvision resnet18 name" \
    cv --from torchvision --model resnet18 "$tmp/unknown.st" "$tmp/x.st"
expect_fail_line "a shape mismatch" \
    "shape.st: tensor 'layer1.0.conv1.weight' has shape [32,64,3,3]; torchvision resnet18 needs [64,64,3,3]" \
    cv --from torchvision --model resnet18 "$tmp/shape.st" "$tmp/x.st"
expect_fail_line "resnet18 weights are not resnet34's" "tv.safetensors: no tensor 'layer1.2.conv1.weight' (torchvision resnet34 needs 182 tensors; 80 missing)" \
    cv --from torchvision --model resnet34 "$tmp/tv.safetensors" "$tmp/x.st"
# a .pth is a pickle: one holding more than tensors is refused, never run
"$py" -c "import datetime, torch; torch.save({'fc.bias': torch.zeros(2), 'x': datetime.date(2020, 1, 1)}, '$tmp/obj.pth')"
expect_fail_line "a .pth with an object in it" "obj.pth: not a plain state dict of tensors" \
    cv --from torchvision --model resnet18 "$tmp/obj.pth" "$tmp/x.st"
[ ! -e "$tmp/x.st" ] && ok || bad "a refused conversion wrote its output"

# ---- hostile input: regular files only, within the stated limits; one line each ----
expect_fail_line "/dev/zero is refused, not read" "/dev/zero: not a regular file (a device)" \
    cv --from torchvision --model resnet18 /dev/zero "$tmp/x.st"
ln -s /dev/zero "$tmp/zero.safetensors"
expect_fail_line "a link to /dev/zero is refused" "zero.safetensors: not a regular file (a device)" \
    cv --from torchvision --model resnet18 "$tmp/zero.safetensors" "$tmp/x.st"
mkfifo "$tmp/fifo.safetensors"
expect_fail_line "a FIFO is refused, not waited on" "fifo.safetensors: not a regular file (a FIFO)" \
    timeout 20 "$py" "$conv" --from torchvision --model resnet18 "$tmp/fifo.safetensors" "$tmp/x.st"
expect_fail_line "/proc is refused" "/proc/self/status: under /proc" \
    cv --from torchvision --model resnet18 /proc/self/status "$tmp/x.st"
truncate -s $(((1 << 30) + 1)) "$tmp/big.safetensors"
expect_fail_line "over the input limit" "big.safetensors: 1073741825 bytes; at most 1073741824 are read" \
    cv --from torchvision --model resnet18 "$tmp/big.safetensors" "$tmp/x.st"
rm -f "$tmp/big.safetensors"
"$py" - "$tmp" <<'PY' || bad "writing the hostile files"
import io, json, struct, sys, zipfile
import numpy as np
d = sys.argv[1]
def st(name, header, body=b""):
    h = json.dumps(header).encode() if not isinstance(header, bytes) else header
    open(f"{d}/{name}", "wb").write(struct.pack("<Q", len(h)) + h + body)
e = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
st("floatoff.st", {"fc.bias": {"dtype": "F32", "shape": [2], "data_offsets": [0.0, 8]}}, bytes(8))
st("negshape.st", {"fc.bias": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(8))
st("halfshape.st", {"fc.bias": {"dtype": "F32", "shape": [64.5], "data_offsets": [0, 258]}}, bytes(258))
st("overlap.st", {"fc.bias": e, "fc.weight": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12))
st("deep.st", b"[" * 100000 + b"]" * 100000)
st("nltwice.st", b'{"a\\nb": %s, "a\\nb": %s}' % (json.dumps(e).encode(), json.dumps(e).encode()), bytes(8))
st("twice.st", b'{"fc.bias": %s, "fc.bias": %s}' % (json.dumps(e).encode(), json.dumps(e).encode()), bytes(8))
def npy(header, data=b""):
    h = header.encode("latin1")
    h += b" " * (-(10 + len(h) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data
def npz(name, members, comp=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(f"{d}/{name}", "w", comp) as z:
        for k, v in members.items():
            z.writestr(k + ".npy", v)
np.savez(f"{d}/obj.npz", a=np.array([{"x": 1}, None], dtype=object))
npz("negshape.npz", {"fc.bias": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", bytes(8))})
npz("halfshape.npz", {"fc.bias": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (64.5,), }", bytes(258))})
# a shape much larger than the member: refused before any decompression
npz("bigshape.npz", {"fc.bias": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", bytes(8))})
# a bomb: 256 MB of zeros deflated to about 250 KB
with zipfile.ZipFile(f"{d}/bomb.npz", "w", zipfile.ZIP_DEFLATED) as z:
    n = 64 << 20
    with z.open("fc.bias.npy", "w", force_zip64=True) as f:
        f.write(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n))
        chunk = bytes(1 << 22)
        for _ in range(4 * n // len(chunk)):
            f.write(chunk)
# a central directory that declares 2 GB for a member of 8 bytes
npz("declared.npz", {"fc.bias": npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", bytes(8))},
    zipfile.ZIP_STORED)
b = bytearray(open(f"{d}/declared.npz", "rb").read())
at = b.rfind(b"PK\x01\x02")
b[at + 24:at + 28] = struct.pack("<I", 0x7FFFFFFF)
open(f"{d}/declared.npz", "wb").write(b)
PY
cvf() { cv --from torchvision --model resnet18 "$tmp/$1" "$tmp/x.st"; }
expect_fail_line "float data_offsets" "floatoff.st: tensor 'fc.bias': data_offsets [0.0, 8] are not two non-negative integers" cvf floatoff.st
expect_fail_line "a negative shape" "negshape.st: tensor 'fc.bias': shape [-2] is not a list of non-negative integers" cvf negshape.st
expect_fail_line "a shape of 64.5" "halfshape.st: tensor 'fc.bias': shape [64.5] is not a list of non-negative integers" cvf halfshape.st
expect_fail_line "overlapping data_offsets" "overlap.st: tensors 'fc.bias' [0, 8] and 'fc.weight' [4, 12] overlap" cvf overlap.st
expect_fail_line "deeply nested JSON" "deep.st: bad safetensors header: nested deeper than 8" cvf deep.st
expect_fail_line "a tensor name twice" "twice.st: bad safetensors header: 'fc.bias' twice" cvf twice.st
expect_fail_line "a name with a newline, twice: still one line" "nltwice.st: bad safetensors header: 'a\\nb' twice" cvf nltwice.st
expect_fail_line "an object array" "obj.npz: array 'a': an object array, whose values are pickled; not read (allow_pickle=False)" cvf obj.npz
expect_fail_line "a negative .npy shape" "negshape.npz: array 'fc.bias': shape (-2,) is not non-negative integers" cvf negshape.npz
expect_fail_line "a .npy shape of 64.5" "halfshape.npz: array 'fc.bias': shape (64.5,) is not non-negative integers" cvf halfshape.npz
expect_fail_line "a .npy shape larger than its member" \
    "bigshape.npz: array 'fc.bias': shape [1000000000000] of float32 is 4000000000000 bytes; the member declares 136 in all" cvf bigshape.npz
expect_fail_line "a zip bomb" "bomb.npz: its members declare 268435584 bytes uncompressed in" cvf bomb.npz
expect_fail_line "declared sizes over the limit" \
    "declared.npz: its members declare 2147483647 bytes uncompressed; at most 1073741824 are read" cvf declared.npz
[ ! -e "$tmp/x.st" ] && ok || bad "a refused input wrote its output"

# ---- OUT: safetensors under its own name; the umask's mode, not mkstemp's 0600 ----
expect_fail_line "--from torchvision to x.pth is refused (dpc's names are safetensors), saying how to load it in PyTorch" \
    "x.pth: OUT is written as safetensors, whatever its name, and a .pth only by --to torchvision; name it .safetensors (in PyTorch: from safetensors.torch import load_file" \
    cv --from torchvision --model resnet18 "$tmp/tv.safetensors" "$tmp/x.pth"
expect_fail_line "--to gluon x.npz is refused" "x.npz: OUT is written as safetensors, whatever its name" \
    cv --to gluon --model resnet18 "$tmp/dpc.safetensors" "$tmp/x.npz"
[ ! -e "$tmp/x.pth" ] && [ ! -e "$tmp/x.npz" ] && ok || bad "a refused OUT was written"
# --to torchvision OUT.pth: torch's own format, loaded with weights_only into
# torchvision's resnet18, the safetensors output's values; read back, bit-identical
(umask 022 && "$py" "$conv" --to torchvision --model resnet18 "$tmp/dpc.safetensors" "$tmp/tv3.pth" &&
    "$py" "$conv" --to torchvision --model resnet18 "$tmp/dpc.safetensors" "$tmp/tv3.safetensors") >/dev/null ||
    bad "--to torchvision OUT.pth"
check "a .pth OUT takes the umask's mode (644)" test "$(stat -c %a "$tmp/tv3.pth")" = 644
"$py" - "$conv" "$tmp" <<'PY' >"$tmp/pth.out" 2>&1 && ok || bad "torch.load of --to torchvision OUT.pth: $(tail -n 3 "$tmp/pth.out")"
import importlib.util, sys
import torch, torchvision
spec = importlib.util.spec_from_file_location("cw", sys.argv[1])
cw = importlib.util.module_from_spec(spec); spec.loader.exec_module(cw)
d = sys.argv[2]
sd = torch.load(f"{d}/tv3.pth", map_location="cpu", weights_only=True)
r = torchvision.models.resnet18(num_classes=10).load_state_dict(sd, strict=False)
assert not r.unexpected_keys and all(k.endswith("num_batches_tracked") for k in r.missing_keys), r
want = cw.st_read(f"{d}/tv3.safetensors")
assert list(sd) == list(want)
assert all(sd[k].dtype == torch.float32 and sd[k].numpy().tobytes() == want[k].tobytes() for k in want)
PY
"$py" "$conv" --from torchvision --model resnet18 "$tmp/tv3.pth" "$tmp/dpc3.safetensors" >/dev/null ||
    bad "--from torchvision of the written .pth"
check "dpc -> torchvision .pth -> dpc is bit-identical" cmp -s "$tmp/dpc.safetensors" "$tmp/dpc3.safetensors"
(umask 022 && "$py" "$conv" --to torchvision --model resnet18 "$tmp/dpc.safetensors" "$tmp/mode.safetensors") ||
    bad "--to torchvision under umask 022"
check "OUT takes the umask's mode (644)" test "$(stat -c %a "$tmp/mode.safetensors")" = 644
(umask 027 && "$py" "$conv" --to torchvision --model resnet18 "$tmp/dpc.safetensors" "$tmp/mode.safetensors") ||
    bad "--to torchvision under umask 027"
check "OUT takes the umask's mode (640)" test "$(stat -c %a "$tmp/mode.safetensors")" = 640
# what --to torchvision wrote loads in PyTorch as guide.md says
"$py" - "$tmp/mode.safetensors" <<'PY' >"$tmp/load.out" 2>&1 && ok || bad "loading --to torchvision output into torchvision's resnet18: $(tail -n 3 "$tmp/load.out")"
import json, struct, sys
import numpy as np, torch, torchvision
try:
    from safetensors.torch import load_file
    sd = load_file(sys.argv[1])
except ImportError:  # the same by hand where python3-safetensors is not installed
    data = open(sys.argv[1], "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    h = json.loads(data[8:8 + n]); h.pop("__metadata__", None)
    sd = {k: torch.from_numpy(np.frombuffer(data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]],
                                            "<f4").reshape(e["shape"]).copy()) for k, e in h.items()}
torchvision.models.resnet18(num_classes=10).load_state_dict(sd, strict=False)
missing = set(torchvision.models.resnet18(num_classes=10).state_dict()) - set(sd)
assert all(k.endswith("num_batches_tracked") for k in missing), missing
PY

# ---- a new head: --exclude, then --allow-missing ----
"$py" "$conv" --from torchvision --model resnet18 --exclude 'dense0.*' "$tmp/tv.safetensors" \
    "$tmp/nohead.safetensors" || bad "--exclude 'dense0.*'"
if [ -e "$tmp/r18.plan" ]; then
    fail_prefix='*dprun: error: '
    expect_fail "without --allow-missing the head is missing" "no tensor 'dense0.weight'" \
        "$bin/dprun" "$tmp/r18.plan" --steps 0 --load-params "$tmp/nohead.safetensors"
    "$bin/dprun" "$tmp/r18.plan" --steps 0 --data synthetic --load-params "$tmp/nohead.safetensors" \
        --allow-missing 'dense0.*' >/dev/null 2>"$tmp/err" &&
        grep -q "100 loaded, 2 missing (initialised), 0 skipped" "$tmp/err" && ok ||
        bad "--allow-missing 'dense0.*': $(cat "$tmp/err")"
    # the name map loads the torchvision file as it is
    "$py" "$conv" --map torchvision --model resnet18 >"$tmp/tv.map" || bad "--map torchvision"
    "$bin/dprun" "$tmp/r18.plan" --steps 0 --data synthetic --load-params "$tmp/tv.safetensors" \
        --name-map "$tmp/tv.map" >/dev/null 2>"$tmp/err" &&
        grep -q "102 loaded, 0 missing (initialised), 0 skipped" "$tmp/err" && ok ||
        bad "--name-map of --map torchvision: $(cat "$tmp/err")"
fi
finish
