#!/usr/bin/python3
"""scripts/article_table.py — the Markdown results table of scripts/article.sh.

    scripts/article_table.py --out article.md [--device D] [--data DIR]
                             [--epochs N] [--steps N] [--model F] OUTDIR

Reads OUTDIR/run{1,2,3,4}.log (those present; run 4, LARS, is not the article's) (dprun's log: EPOCH lines, the final
`Training time ...` line, or a `dprun: error:` line) and
OUTDIR/run{1,2,3,4}.schedule (`dprun --schedule`), and writes one table row
per run beside the article's own figures. Epoch time is the mean of the
EPOCH lines' seconds, total time the `Training time` figure. Plain Python 3
standard library.
"""
import argparse
import os
import re
import sys

# The reference article (Gluon, ResNet-18 v1, CIFAR-10, 45 epochs on K80s).
ARTICLE_EPOCHS = 45
ARTICLE = [  # (what the run is, total seconds, test accuracy)
    ("batch 128, 1 GPU", 999.79, 0.8475),
    ("batch 2048, 16 GPUs, lr 0.1", 977.40, 0.7829),
    ("batch 2048, 16 GPUs, lr x16 + 5-epoch warmup", 916.39, 0.8416),
]

EPOCH_RE = re.compile(r"^EPOCH\s+(\d+): train loss\s+(\S+) \| batch\s+(\d+) \| lr (\S+) \| "
                      r"Time per epoch (\S+) seconds")
FINAL_RE = re.compile(r"^Training time (\S+) seconds \| train accuracy (\S+) \| test accuracy (\S+)")
SCHEDULE_RE = re.compile(r"^epoch (\d+) lr (\S+)")


def read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def describe_schedule(path):
    """'0.1 -> 1.6 warmup (epochs 0-4); x0.5 at 35, ...' from `dprun --schedule` output."""
    lrs = [float(m.group(2)) for m in map(SCHEDULE_RE.match, read_lines(path)) if m]
    if not lrs:
        return "?"
    peak = max(lrs)
    at_peak = lrs.index(peak)
    ramp = "epoch 0" if at_peak == 1 else f"epochs 0-{at_peak - 1}"
    text = f"{lrs[0]:g}" if at_peak == 0 else f"{lrs[0]:g} → {peak:g} warmup ({ramp})"
    drops = [f"{lrs[e]:g} at {e}" for e in range(at_peak + 1, len(lrs)) if lrs[e] < lrs[e - 1]]
    if drops:
        text += "; " + ", ".join(drops)
    return text


def read_run(outdir, name):
    """dict: batch, epochs, epoch_s, total_s, train_acc, test_acc, error, backend."""
    r = {"batch": None, "epochs": 0, "epoch_s": None, "total_s": None, "train_acc": None,
         "test_acc": None, "error": None, "backend": None}
    seconds = []
    for line in read_lines(os.path.join(outdir, name + ".log")):
        m = EPOCH_RE.match(line)
        if m:
            r["batch"] = int(m.group(3))
            seconds.append(float(m.group(5)))
            continue
        m = FINAL_RE.match(line)
        if m:
            r["total_s"], r["train_acc"], r["test_acc"] = (float(v) for v in m.groups())
            continue
        m = re.search(r", (\w+) backend, ", line)
        if m and line.startswith("dprun: "):
            r["backend"] = m.group(1)
        if "error:" in line and r["error"] is None:
            r["error"] = line.split("error:", 1)[1].strip()
    r["epochs"] = len(seconds)
    if seconds:
        r["epoch_s"] = sum(seconds) / len(seconds)
    if r["total_s"] is None and r["error"] is None:
        r["error"] = "no final `Training time` line in the log"
    return r


def cell(v, fmt):
    return "—" if v is None else format(v, fmt)


def table(outdir, args):
    present = [k for k in (1, 2, 3, 4) if os.path.exists(os.path.join(outdir, f"run{k}.log"))]
    present = present or [1, 2, 3]  # nothing ran: every row says why
    runs = [read_run(outdir, f"run{k}") for k in present]
    backends = sorted({r["backend"] for r in runs if r["backend"]})
    epochs = max(r["epochs"] for r in runs)
    shortened = epochs < ARTICLE_EPOCHS or bool(args.steps)
    out = ["# The article's runs, reproduced with dpc", ""]
    what = f"Model `{args.model}`, data `{args.data}`, device `{args.device}`"
    what += f" (backend: {', '.join(backends) or 'unknown'}), {epochs} epoch{'s' if epochs != 1 else ''} per run"
    if args.steps:
        what += f", at most {args.steps} steps per run"
    out.append(what + ".")
    if shortened:
        out.append(f"**Shortened**: the article trains {ARTICLE_EPOCHS} epochs on 1 and 16 K80 GPUs; these runs "
                   f"are {epochs} epoch{'s' if epochs != 1 else ''}"
                   + (" on a CPU" if backends == ["cpu"] else "")
                   + ", so their accuracies and times are not comparable with the article's.")
    out.append("")
    out.append("| run | global batch | lr schedule | epoch time (s) | total time (s) | train accuracy "
               "| test accuracy | article: run | article: total time (s) | article: test accuracy |")
    out.append("| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for k, r in zip(present, runs):
        sched = describe_schedule(os.path.join(outdir, f"run{k}.schedule"))
        if k == 4:
            sched = "LARS; " + sched
        test = cell(r["test_acc"], ".4f")
        if r["error"]:
            test = f"failed: {r['error']}".replace("|", "/")
        if k <= len(ARTICLE):
            a_name, a_time, a_acc = ARTICLE[k - 1]
            article = f"{a_name} | {a_time:.2f} | {a_acc:.4f}"
        else:
            article = "not in the article | — | —"
        out.append(f"| {k} | {cell(r['batch'], 'd')} | {sched} | {cell(r['epoch_s'], '.2f')} "
                   f"| {cell(r['total_s'], '.2f')} | {cell(r['train_acc'], '.4f')} | {test} "
                   f"| {article} |")
    out.append("")
    out.append("Epoch time: mean seconds per epoch (the EPOCH lines); total time: the `Training time` "
               "line (training only, without the accuracy passes). Logs and metrics: "
               "RUN.log and RUN.jsonl beside this file; plot: article.svg.")
    return "\n".join(out) + "\n", all(r["error"] is None for r in runs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--data", default="?")
    p.add_argument("--epochs", default="")
    p.add_argument("--steps", default="")
    p.add_argument("--model", default="models/resnet18.net")
    p.add_argument("outdir")
    args = p.parse_args()
    text, ok = table(args.outdir, args)
    try:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        print(f"article: error: {args.out}: cannot write: {e.strerror}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
