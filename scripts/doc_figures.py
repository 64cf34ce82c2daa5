#!/usr/bin/env python3
"""scripts/doc_figures.py — the figures in the docs, from the tools.

    scripts/doc_figures.py [--check] [--bin DIR] FILE.md...

A figure in a Markdown file sits between two HTML comments (which Markdown
does not show) that name where it comes from:

    <!--fig params:resnet18-->11,181,642<!--/fig-->

and a block of lines likewise, between comment lines of their own:

    <!--fig-block cost-totals:resnet18-->
        ...lines...
    <!--/fig-block-->

Without --check each figure is computed again and the file rewritten;
with --check nothing is written, and every figure that differs from what
the tools say now is named: exit 1. tests/doc_figures_test.sh runs it so.

Figures (MODEL: a file in models/, without .net):
  params:MODEL       trainable parameters, 11,181,642   (dpc --summary)
  kernels:MODEL      train kernels per step, fused / unfused   (dpc --stats)
  arena:MODEL        train activations, planned / naive MiB    (dpc --stats)
  cost-ms:MODEL      modelled H200 train step at batch 128, x.xx ms  (dpc --cost)
  cost-us:MODEL:V    the same in us, one decimal; V: fp32, bf16, tf32, and
                     each with +im2col (--conv im2col)
  golden             the golden error cases (tests/golden/errors/*.net)
  cost-totals:MODEL  block: the `train total` lines of --cost, fp32 and bf16
  article:RUN:WHAT   a run of scripts/article.sh kept in docs/article/ (RUN:
                     its folder and name there, e.g. 45-epoch/run1), from
                     its log and metrics (scripts/article_table.py reads
                     them): WHAT is test or train (the final accuracy),
                     loss@E (epoch E's mean train loss), wall (the run's
                     wall time, h:mm) or seeds (RUN names runK of a seed
                     study: the final test accuracy's mean ± sd over every
                     runK-sS there), or diff@runJ (the seed study's
                     difference of runK's and runJ's mean test accuracies,
                     in points and standard errors); "—" where the run has
                     no such figure
"""
import importlib.util
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INLINE = re.compile(r"<!--fig ([a-z0-9_:+@/-]+)-->(.*?)<!--/fig-->")
BLOCK = re.compile(r"^<!--fig-block ([a-z0-9_:+-]+)-->\n(.*?)^<!--/fig-block-->$", re.M | re.S)


class Tools:
    def __init__(self, bindir):
        self.dpc = os.path.join(bindir, "dpc")
        self.memo = {}

    def dpc_out(self, model, *flags):
        key = (model,) + flags
        if key not in self.memo:
            path = os.path.join(ROOT, "models", model + ".net")
            if not os.path.isfile(path):
                raise ValueError("no model %s" % path)
            run = subprocess.run([self.dpc, path] + list(flags), capture_output=True, text=True)
            if run.returncode != 0:
                raise ValueError("dpc %s %s: %s" % (path, " ".join(flags), run.stderr.strip()))
            self.memo[key] = run.stdout
        return self.memo[key]

    def grab(self, pattern, text, what):
        m = re.search(pattern, text, re.M)
        if not m:
            raise ValueError("%s: no line matching %r" % (what, pattern))
        return m

    def cost_flags(self, variant):
        prec, _, conv = variant.partition("+")
        if prec not in ("fp32", "bf16", "tf32") or conv not in ("", "im2col"):
            raise ValueError("cost variant %r: want fp32|bf16|tf32[+im2col]" % variant)
        flags = ["--cost", "--batch", "128", "--precision", prec]
        return flags + (["--conv", "im2col"] if conv else [])

    def step_us(self, model, variant):
        out = self.dpc_out(model, *self.cost_flags(variant))
        return float(self.grab(r"^train total: modelled step ([0-9.]+) us", out, "--cost").group(1))

    def figure(self, name):
        kind, _, arg = name.partition(":")
        if kind == "golden":
            return str(len([f for f in os.listdir(os.path.join(ROOT, "tests/golden/errors")) if f.endswith(".net")]))
        if kind == "params":
            out = self.dpc_out(arg, "--summary")
            return "{:,}".format(int(self.grab(r"^parameters: (\d+)", out, "--summary").group(1)))
        if kind == "kernels":
            m = self.grab(r"^train kernels per step: fused (\d+), unfused (\d+)", self.dpc_out(arg, "--stats"), "--stats")
            return "%s / %s" % m.groups()
        if kind == "arena":
            m = self.grab(r"^train activation memory: planned ([0-9.]+) MiB = .* of naive ([0-9.]+) MiB",
                          self.dpc_out(arg, "--stats"), "--stats")
            return "%s / %s MiB" % m.groups()
        if kind == "cost-ms":
            return "%.2f ms" % (self.step_us(arg, "fp32") / 1000)
        if kind == "cost-us":
            model, _, variant = arg.partition(":")
            return "%.1f" % self.step_us(model, variant)
        if kind == "article":
            return self.article(arg)
        raise ValueError("unknown figure %r" % name)

    def article(self, arg):
        run, _, what = arg.partition(":")
        folder, _, name = run.rpartition("/")
        outdir = os.path.join(ROOT, "docs", "article", folder)
        if not folder or not re.fullmatch(r"run[1-4](-s\d+)?", name) or ".." in folder.split("/"):
            raise ValueError("article figure %r: want FOLDER/runK[-sS]:WHAT" % arg)
        table = self.article_table()

        def seed_accs(run):  # as the folder's article.md counts them
            found = [f for f in table.find_runs(outdir) if f[2].startswith(run + "-s")]
            runs = [table.read_run(outdir, n) for _, _, n in found]
            return [a for accs in table.seed_accuracies(found, runs).values() for a in accs]
        if what.startswith("diff@run") and re.fullmatch(r"[1-4]", what[8:]):
            return table.difference(seed_accs(name), seed_accs("run" + what[8:]))
        if what == "seeds":
            accs = seed_accs(name)
            if not accs:
                return "—"
            if len(accs) == 1:
                return "%.4f (1 seed)" % accs[0]
            return "%.4f ± %.4f (%d seeds)" % (statistics.mean(accs), statistics.stdev(accs), len(accs))
        r = table.read_run(outdir, name)
        if what in ("test", "train"):
            v = r[what + "_acc"]
            return "—" if v is None else "%.4f" % v
        if what.startswith("loss@") and what[5:].isdigit():
            v = r["per_epoch"].get(int(what[5:]), {}).get("train_loss")
            return "—" if not isinstance(v, (int, float)) else "%.3f" % v
        if what == "wall":
            if r["wall_s"] is None:
                return "—"
            minutes = int(round(r["wall_s"] / 60))
            return "%d:%02d" % (minutes // 60, minutes % 60)
        raise ValueError("article figure %r: WHAT is test, train, loss@E, wall, seeds or diff@runK" % arg)

    def article_table(self):
        if "article_table" not in self.memo:
            spec = importlib.util.spec_from_file_location("article_table", os.path.join(ROOT, "scripts", "article_table.py"))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.memo["article_table"] = module
        return self.memo["article_table"]

    def block(self, name):
        kind, _, model = name.partition(":")
        if kind != "cost-totals":
            raise ValueError("unknown figure block %r" % name)
        lines = []
        for variant, title in (("fp32", "fp32"), ("bf16", "--precision bf16")):
            out = self.dpc_out(model, *self.cost_flags(variant))
            lines.append("    # " + title)
            lines += ["    " + l for l in out.splitlines() if re.match(r"train total: (modelled|\d+ kernels|\d+ library)", l)]
        return "\n".join(lines) + "\n"


def main(argv):
    check, bindir, files = False, os.path.join(ROOT, "bin"), []
    args = iter(argv)
    for a in args:
        if a == "--check":
            check = True
        elif a == "--bin":
            bindir = next(args, None) or sys.exit("doc_figures: --bin needs a folder")
        elif a.startswith("-"):
            sys.exit("doc_figures: unknown option %s (see the header of %s)" % (a, __file__))
        else:
            files.append(a)
    if not files:
        sys.exit("usage: scripts/doc_figures.py [--check] [--bin DIR] FILE.md...")
    tools, stale, count = Tools(bindir), [], 0
    for path in files:
        text = open(path, encoding="utf-8").read()

        def inline(m):
            nonlocal count
            count += 1
            want = tools.figure(m.group(1))
            if want != m.group(2):
                stale.append("%s: %s is %r in the file, %r from the tools" % (path, m.group(1), m.group(2), want))
            return "<!--fig %s-->%s<!--/fig-->" % (m.group(1), want)

        def block(m):
            nonlocal count
            count += 1
            want = tools.block(m.group(1))
            if want != m.group(2):
                stale.append("%s: block %s differs from the tools:\n%s" % (path, m.group(1), want))
            return "<!--fig-block %s-->\n%s<!--/fig-block-->" % (m.group(1), want)

        try:
            new = INLINE.sub(inline, BLOCK.sub(block, text))
        except ValueError as e:
            sys.exit("doc_figures: %s: %s" % (path, e))
        if not check and new != text:
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.write(new)
            os.replace(path + ".tmp", path)
    print("doc_figures: %d figures in %d files, %d %s" % (count, len(files), len(stale), "stale" if check else "updated"))
    for s in stale:
        print("  " + s)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
