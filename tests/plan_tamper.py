#!/usr/bin/env python3
"""tests/plan_tamper.py — edit a plan the way an attacker would: change a
field, fix every length and the header's FNV-1a checksum (which anyone can
recompute), so the loader gets past its integrity checks and only its
validation stands between the edit and the machine (tests/trust_test.sh).

    plan_tamper.py IN OUT source OLD NEW       # first KCPU program's source: OLD -> NEW
    plan_tamper.py IN OUT count CALL DELTA     # first KCPU program: call CALL's count += DELTA
    plan_tamper.py IN OUT stepbuf STEP VALUE   # first KCPU program: step STEP's buf[0] = VALUE
    plan_tamper.py IN OUT fattr PROG OLD NEW   # GTRN/GEVL: the first float attribute OLD becomes NEW
    plan_tamper.py IN OUT input PROG NODE VAL  # GTRN/GEVL: node NODE's first input = VAL
    plan_tamper.py IN OUT schd FIELD VALUE     # SCHD: an ir_train field (names below)
    plan_tamper.py IN OUT optm FIELD VALUE     # OPTM (made from the defaults if absent)
    plan_tamper.py IN OUT flags PROG NODE VAL  # GTRN/GEVL: node NODE's flags = VAL
    plan_tamper.py IN OUT group PROG NODE VAL  # GRPS: node NODE's fusion group = VAL
    plan_tamper.py IN OUT evaltrain            # GEVL (and its groups) := GTRN's

Layouts: format/plan.c (header, sections), plan_graph.c (nodes), plan_schedule.c (SCHD), format/program.c (programs).
"""
import struct
import sys

HDR = 32


def fnv1a(b):
    h = 0xCBF29CE484222325
    for c in b:
        h ^= c
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def sections(pay):
    out, off = [], 0
    while off < len(pay):
        tag = pay[off:off + 4].decode()
        n = struct.unpack_from("<Q", pay, off + 4)[0]
        out.append([tag, bytearray(pay[off + 12:off + 12 + n])])
        off += 12 + n
    return out


def write(path, head, secs):
    pay = b"".join(t.encode() + struct.pack("<Q", len(d)) + bytes(d) for t, d in secs)
    head = bytearray(head)
    struct.pack_into("<QQ", head, 16, len(pay), fnv1a(pay))
    open(path, "wb").write(bytes(head) + pay)


class Prog:
    """Offsets inside one serialised program (the first of its section)."""

    def __init__(self, b):
        self.b = b
        assert b[:4] == b"DPCK"
        p = 4 + 4 + 8 + 4 + 8 + 8
        self.srclen_at = p
        n = struct.unpack_from("<Q", b, p)[0]
        self.src_at = p + 8
        p = self.src_at + n
        nk = struct.unpack_from("<I", b, p)[0]
        p += 4
        for _ in range(nk):
            ln = struct.unpack_from("<I", b, p)[0]
            p += 4 + ln + 4
        ns = struct.unpack_from("<I", b, p)[0]
        p += 4
        self.steps = []
        for _ in range(ns):
            self.steps.append(p)
            nbuf = struct.unpack_from("<I", b, p + 4 + 4 + 4 + 8 + 4 + 4)[0]
            p += 4 + 4 + 4 + 8 + 4 + 4 + 4 + 4 * nbuf
        nc = struct.unpack_from("<I", b, p)[0]
        p += 4
        self.calls = []
        for _ in range(nc):
            self.calls.append(p)
            na = struct.unpack_from("<I", b, p + 4 + 4 + 8)[0]
            # kind kernel count nargs, (slot, off) x nargs, the GEMM (transa
            # transb, m n k, alpha beta, 10 x i64, 3 types, tf32), the launch
            # (3 x u32): format/program.c's version 5
            p += 4 + 4 + 8 + 4 + 12 * na + 4 + 4 + 24 + 8 + 80 + 16 + 12


def node_offsets(g):
    """Start offset and op of every node of a GTRN/GEVL section."""
    n = struct.unpack_from("<I", g, 0)[0]
    p, out = 4, []
    for _ in range(n):
        start = p
        op, nin = struct.unpack_from("<II", g, p)
        p += 8 + 4 * nin
        nia = struct.unpack_from("<I", g, p)[0]
        p += 4 + 8 * nia
        nfa = struct.unpack_from("<I", g, p)[0]
        fat = p + 4
        p += 4 + 8 * nfa
        nd = struct.unpack_from("<I", g, p)[0]
        p += 4 + 8 * nd + 4 + 4
        ln = struct.unpack_from("<I", g, p)[0]
        p += 4 + ln + 8
        out.append((start, op, fat))
    return out


# SCHD in format/plan_schedule.c's order (ir/ir.h's IR_TRAIN_FIELDS); lr is the step list, dataset a string.
SCHD = [("batch", "i"), ("epochs", "i"), ("init_magnitude", "d"), ("optimizer", "I"),
        ("momentum", "d"), ("wd", "d"), ("lr", None), ("lr_scaling", "I"),
        ("reference_batch", "i"), ("warmup_epochs", "i"), ("lr_curve", "I"), ("lr_final", "d"),
        ("lr_power", "d"), ("dataset", "s"), ("pad", "i"), ("random_crop", "i"),
        ("random_mirror", "i"), ("normalize", "i"), ("mean0", "d"), ("mean1", "d"),
        ("mean2", "d"), ("std0", "d"), ("std1", "d"), ("std2", "d"), ("eval_batch", "i")]
OPTM = [("nesterov", "i"), ("exclude", "i"), ("eta", "d"), ("eps", "d"), ("beta1", "d"),
        ("beta2", "d")]


def decode(layout, b):
    vals, p = {}, 0
    for name, f in layout:
        if f is None:
            n = struct.unpack_from("<i", b, p)[0]
            vals[name] = [struct.unpack_from("<id", b, p + 4 + 12 * k) for k in range(n)]
            p += 4 + 12 * n
        elif f == "s":
            n = struct.unpack_from("<I", b, p)[0]
            vals[name] = bytes(b[p + 4:p + 4 + n])
            p += 4 + n
        else:
            vals[name] = struct.unpack_from("<" + f, b, p)[0]
            p += struct.calcsize(f)
    return vals


def encode(layout, vals):
    out = b""
    for name, f in layout:
        v = vals[name]
        if f is None:
            out += struct.pack("<i", len(v)) + b"".join(struct.pack("<id", *x) for x in v)
        elif f == "s":
            out += struct.pack("<I", len(v)) + v
        else:
            out += struct.pack("<" + f, v)
    return out


def set_field(layout, b, field, value):
    vals = decode(layout, b)
    f = dict(layout)[field]
    vals[field] = value.encode() if f == "s" else float(value) if f == "d" else int(value)
    return bytearray(encode(layout, vals))


def main():
    src, dst, what = sys.argv[1], sys.argv[2], sys.argv[3]
    args = sys.argv[4:]
    raw = open(src, "rb").read()
    head, secs = raw[:HDR], sections(raw[HDR:])
    sec = {t: d for t, d in secs}
    if what == "schd":
        sec["SCHD"][:] = set_field(SCHD, sec["SCHD"], args[0], args[1])
    elif what == "optm":
        if "OPTM" not in sec:
            sec["OPTM"] = bytearray(struct.pack("<iidddd", 0, 0, 0.001, 1e-9, 0.9, 0.999))
            secs.insert(4, ["OPTM", sec["OPTM"]])
        sec["OPTM"][:] = set_field(OPTM, sec["OPTM"], args[0], args[1])
    elif what == "evaltrain":
        sec["GEVL"][:] = sec["GTRN"]
        if "GRPS" in sec:
            g = sec["GRPS"]
            n = struct.unpack_from("<I", g, 0)[0]
            g[:] = g[:4 + 4 * n] * 2
    elif what == "group":
        n = [struct.unpack_from("<I", sec["GTRN"], 0)[0], struct.unpack_from("<I", sec["GEVL"], 0)[0]]
        if "GRPS" not in sec:
            sec["GRPS"] = bytearray(b"".join(struct.pack("<I", k) + bytes(4 * k) for k in n))
            secs.insert(4, ["GRPS", sec["GRPS"]])
        at = 4 + 4 * int(args[1]) + (4 + 4 * n[0] if args[0] == "GEVL" else 0)
        struct.pack_into("<I", sec["GRPS"], at, int(args[2]))
    elif what in ("source", "count", "stepbuf"):
        d = sec["KCPU"]
        pr = Prog(d)
        total = struct.unpack_from("<Q", d, 8)[0]
        if what == "source":
            old, new = args[0].encode(), args[1].encode().decode("unicode_escape").encode()
            n = struct.unpack_from("<Q", d, pr.srclen_at)[0]
            s = bytes(d[pr.src_at:pr.src_at + n])
            if old not in s:
                sys.exit("plan_tamper: %r not in the source" % old)
            s = s.replace(old, new, 1)
            d[pr.src_at:pr.src_at + n] = s
            struct.pack_into("<Q", d, pr.srclen_at, len(s))
            struct.pack_into("<Q", d, 8, total + len(s) - n)
        elif what == "count":
            at = pr.calls[int(args[0])] + 8
            struct.pack_into("<q", d, at, struct.unpack_from("<q", d, at)[0] + int(args[1]))
        else:
            at = pr.steps[int(args[0])]
            nbuf_at = at + 4 + 4 + 4 + 8 + 4 + 4
            struct.pack_into("<i", d, nbuf_at + 4, int(args[1]))
    else:
        g = sec[args[0]]
        nodes = node_offsets(g)
        if what == "fattr":
            old, new = float(args[1]), float(args[2])
            for s_, o, f in nodes:
                nfa = struct.unpack_from("<I", g, f - 4)[0]
                hit = [j for j in range(nfa) if struct.unpack_from("<d", g, f + 8 * j)[0] == old]
                if hit:
                    struct.pack_into("<d", g, f + 8 * hit[0], new)
                    break
            else:
                sys.exit("plan_tamper: no float attribute %r" % old)
        elif what == "flags":
            start, _, fat = nodes[int(args[1])]
            nfa = struct.unpack_from("<I", g, fat - 4)[0]
            p = fat + 8 * nfa
            nd = struct.unpack_from("<I", g, p)[0]
            struct.pack_into("<I", g, p + 4 + 8 * nd + 4, int(args[2]))
        else:
            start = nodes[int(args[1])][0]
            if struct.unpack_from("<I", g, start + 4)[0] == 0:
                sys.exit("plan_tamper: node %s has no inputs" % args[1])
            struct.pack_into("<I", g, start + 8, int(args[2]))
    write(dst, head, secs)


main()
