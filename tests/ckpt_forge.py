#!/usr/bin/env python3
"""tests/ckpt_forge.py — edit a dprun checkpoint the way an attacker would:
change its "__metadata__" strings, then recompute the FNV-1a checksum (which
anyone can), so only dprun's own checks stand between the edit and the run
(tests/checkpoint_test.sh).

    ckpt_forge.py IN OUT EDIT...
        set KEY VALUE    KEY's value becomes VALUE (added at the end if absent)
        del KEY          KEY removed
        dup KEY VALUE    a second KEY with VALUE after the first
    ckpt_forge.py IN get KEY   prints KEY's (first) value

Layout: runtime/files/checkpoint.c (the checksum: metadata pairs in file
order less "checksum", each string with its NUL; then each tensor's name,
rank as int32 and shape as int64; then every tensor's bytes).
"""
import json
import struct
import sys


def fnv1a(h, b):
    for c in b:
        h ^= c
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def fnv_str(h, s):
    return fnv1a(h, s.encode() + b"\0")


def main():
    src = open(sys.argv[1], "rb").read()
    n = struct.unpack_from("<Q", src, 0)[0]
    header = json.loads(src[8:8 + n], object_pairs_hook=list)
    data = src[8 + n:]
    meta = [list(kv) for kv in dict(header)["__metadata__"]]
    tensors = [kv for kv in header if kv[0] != "__metadata__"]
    if sys.argv[2] == "get":
        print(next(v for k, v in meta if k == sys.argv[3]))
        return
    args, i = sys.argv[3:], 0
    while i < len(args):
        op, key = args[i], args[i + 1]
        if op == "set":
            hit = [kv for kv in meta if kv[0] == key]
            if hit:
                hit[0][1] = args[i + 2]
            else:
                meta.insert(len(meta) - 1, [key, args[i + 2]])  # before "checksum"
            i += 3
        elif op == "del":
            meta = [kv for kv in meta if kv[0] != key]
            i += 2
        elif op == "dup":
            at = next(j for j, kv in enumerate(meta) if kv[0] == key)
            meta.insert(at + 1, [key, args[i + 2]])
            i += 3
        else:
            sys.exit("ckpt_forge.py: unknown edit " + op)
    h = 0xCBF29CE484222325
    for k, v in meta:
        if k != "checksum":
            h = fnv_str(fnv_str(h, k), v)
    for name, t in tensors:
        t = dict(t)
        h = fnv_str(h, name)
        h = fnv1a(h, struct.pack("<i", len(t["shape"])))
        h = fnv1a(h, b"".join(struct.pack("<q", d) for d in t["shape"]))
    for name, t in tensors:
        b, e = dict(t)["data_offsets"]
        h = fnv1a(h, data[b:e])
    for kv in meta:
        if kv[0] == "checksum":
            kv[1] = "%016x" % h
    # Duplicate keys survive: the object is written pair by pair.
    obj = lambda pairs: "{" + ",".join(json.dumps(k) + ":" + v for k, v in pairs) + "}"
    md = obj([(k, json.dumps(v)) for k, v in meta])
    ts = [(name, json.dumps(dict(t), separators=(",", ":"))) for name, t in tensors]
    head = obj([("__metadata__", md)] + ts).encode()
    head += b" " * (-len(head) % 8)
    open(sys.argv[2], "wb").write(struct.pack("<Q", len(head)) + head + data)


main()
