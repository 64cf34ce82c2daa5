#!/usr/bin/python3
"""scripts/article_table.py — the Markdown results of scripts/article.sh.

    scripts/article_table.py --out article.md [--device D] [--data DIR]
                             [--epochs N] [--steps N] [--model F] OUTDIR

Reads, for every run in OUTDIR (runK, or runK-sS in a seed study; run 4,
LARS, is not the article's):
  RUN.log       dprun's log: the banner, EPOCH lines, the final `Training
                time ...` line, or a `dprun: error:` line
  RUN.jsonl     dprun --metrics: each epoch's loss, img/s and test accuracy
  RUN.schedule  dprun --schedule: the lr per epoch
  RUN.time      article.sh's `START END EXIT` per part of the run (wall time);
                `START - -`: a part stopped with no end recorded (its machine's
                session ended), whose wall time is estimated from its epochs
  RUN.machine   article.sh's line per part: the date, the CPU, the load average
and OUTDIR/cost.txt (`dpc --cost`: the modelled H200 step). Writes:
  - one row per run beside the article's own figures (with a seed study,
    one row per run and seed);
  - the train loss and test accuracy epoch by epoch, beside the losses the
    article prints;
  - with a seed study, each run's mean and spread over its seeds.
Plain Python 3 standard library.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

# The reference article (Gluon, ResNet-18 v1, CIFAR-10, 45 epochs on K80s).
ARTICLE_EPOCHS = 45
ARTICLE = {  # run: (what the run is, total seconds, train accuracy or None, test accuracy)
    1: ("batch 128, 1 GPU", 999.79, 0.9261, 0.8475),
    2: ("batch 2048, 16 GPUs, lr 0.1", 977.40, None, 0.7829),
    3: ("batch 2048, 16 GPUs, lr x16 + 5-epoch warmup", 916.39, None, 0.8416),
}
# The article's EPOCH-line losses that this project has on record (its
# issues quote them): run 1's first two epochs, runs 2 and 3's first.
ARTICLE_LOSS = {1: {0: 2.3, 1: 1.6}, 2: {0: 3.5}, 3: {0: 4.1}}

RUN_NAME_RE = re.compile(r"^run([1-4])(?:-s(\d+))?\.log$")
EPOCH_RE = re.compile(r"^EPOCH\s+(\d+): train loss\s+(\S+) \| batch\s+(\d+) \| lr (\S+) \| "
                      r"Time per epoch (\S+) seconds")
FINAL_RE = re.compile(r"^Training time (\S+) seconds \| train accuracy (\S+) \| test accuracy (\S+)")
BANNER_RE = re.compile(r"^dprun: .*, (\w+) backend, (\d+) replicas? x batch (\d+), (\d+) steps per epoch, "
                       r"(\d+) train / (\d+) test images")
SCHEDULE_RE = re.compile(r"^epoch (\d+) lr (\S+)")
COST_HEAD_RE = re.compile(r"^(train|eval) program on \S+, batch (\d+) ")
COST_STEP_RE = re.compile(r"^(train|eval) total: modelled step (\S+) us")


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


def read_cost(outdir):
    """{"train": (batch, step seconds), "eval": ...} from cost.txt, or {}."""
    batch, step = {}, {}
    for line in read_lines(os.path.join(outdir, "cost.txt")):
        m = COST_HEAD_RE.match(line)
        if m:
            batch[m.group(1)] = int(m.group(2))
        m = COST_STEP_RE.match(line)
        if m:
            step[m.group(1)] = float(m.group(2)) * 1e-6
    return {k: (batch[k], step[k]) for k in ("train", "eval") if k in batch and k in step}


def read_metrics(path):
    """The epoch rows of a metrics file (step rows have no train_loss), by epoch."""
    rows = {}
    for line in read_lines(path):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "train_loss" in row and isinstance(row.get("epoch"), int):
            rows[row["epoch"]] = row  # a resumed run may repeat an epoch: the last one counts
    return rows


def read_run(outdir, name):
    """dict: batch, epochs, epoch_s, total_s, wall_s, parts, estimated (parts whose wall
    time is estimated), img_s, train_acc, test_acc, error, backend, replicas, images,
    per_epoch (epoch -> metrics row)."""
    r = {"batch": None, "epochs": 0, "epoch_s": None, "total_s": None, "wall_s": None, "parts": 0,
         "estimated": 0, "img_s": None, "train_acc": None, "test_acc": None, "error": None,
         "backend": None, "replicas": None, "images": None}
    seconds = []
    part_seconds = []  # the epoch times of each part (dprun prints its banner as a part starts)
    for line in read_lines(os.path.join(outdir, name + ".log")):
        m = EPOCH_RE.match(line)
        if m:
            r["batch"] = int(m.group(3))
            seconds.append(float(m.group(5)))
            if part_seconds:
                part_seconds[-1].append(float(m.group(5)))
            continue
        m = FINAL_RE.match(line)
        if m:
            r["total_s"], r["train_acc"], r["test_acc"] = (float(v) for v in m.groups())
            continue
        m = BANNER_RE.match(line)
        if m:
            part_seconds.append([])
            r["backend"] = m.group(1)
            r["replicas"] = int(m.group(2))
            r["images"] = (int(m.group(5)), int(m.group(6)))
        if "error:" in line and r["error"] is None:
            r["error"] = line.split("error:", 1)[1].strip()
    r["epochs"] = len(seconds)
    if seconds:
        r["epoch_s"] = sum(seconds) / len(seconds)
    if r["total_s"] is None and r["error"] is None:
        r["error"] = "no final `Training time` line in the log"
    r["per_epoch"] = read_metrics(os.path.join(outdir, name + ".jsonl"))
    rates = [row["img_per_s"] for row in r["per_epoch"].values() if isinstance(row.get("img_per_s"), (int, float))]
    if rates:
        r["img_s"] = statistics.median(rates)
    parts = [line.split() for line in read_lines(os.path.join(outdir, name + ".time"))]
    parts = [p for p in parts if len(p) == 3 and p[0].isdigit() and (p[1].isdigit() or p[1] == "-")]
    if parts:
        r["wall_s"] = wall_seconds(parts, part_seconds)
        r["parts"] = len(parts)
        r["estimated"] = sum(p[1] == "-" for p in parts)
    return r


def wall_seconds(parts, part_seconds):
    """The run's wall time from its RUN.time parts; a part with no end (`START - -`) counts
    its epochs' times (part_seconds[k] for the k-th part) plus, for each epoch, the mean
    time beyond its epochs' times per epoch of the parts that did end (accuracy passes)."""
    done = [(int(p[1]) - int(p[0]), part_seconds[k] if k < len(part_seconds) else [])
            for k, p in enumerate(parts) if p[1] != "-"]
    done_epochs = sum(len(e) for _, e in done)
    beyond = sum(w - sum(e) for w, e in done) / done_epochs if done_epochs else 0.0
    wall = 0.0
    for k, p in enumerate(parts):
        if p[1] != "-":
            wall += int(p[1]) - int(p[0])
        else:
            epochs = part_seconds[k] if k < len(part_seconds) else []
            wall += sum(epochs) + len(epochs) * max(beyond, 0.0)
    return wall


def modelled_h200_s(r, cost):
    """The run as it ran (its replicas taking turns on one H200), modelled: every
    replica's train steps, a test pass per epoch and the final train pass."""
    steps = sum(row.get("steps", 0) for row in r["per_epoch"].values())
    if "train" not in cost or not steps or not r["replicas"]:
        return None
    t = steps * r["replicas"] * cost["train"][1]
    if "eval" in cost and r["images"]:
        eval_batch, eval_s = cost["eval"]
        n_train, n_test = r["images"]
        t += (r["epochs"] * math.ceil(n_test / eval_batch) + math.ceil(n_train / eval_batch)) * eval_s
    return t


def cell(v, fmt):
    return "—" if v is None else format(v, fmt)


def seconds(v):
    """A modelled time: three significant digits below 100 s (a smoke run's are milliseconds)."""
    return "—" if v is None else f"{v:.3g}" if v < 100 else f"{v:.0f}"


def find_runs(outdir):
    """[(run number, seed or None, name)] in run, then seed, order."""
    try:
        names = os.listdir(outdir)
    except OSError:
        names = []
    found = [(int(m.group(1)), None if m.group(2) is None else int(m.group(2)), n[:-4])
             for n in names for m in [RUN_NAME_RE.match(n)] if m]
    return sorted(found, key=lambda f: (f[0], -1 if f[1] is None else f[1]))


def label(k, seed):
    return f"{k}" if seed is None else f"{k} (seed {seed})"


def results_table(found, runs, outdir, cost):
    out = ["| run | global batch | lr schedule | epoch time (s) | training time (s) | wall time (s) "
           "| img/s | train accuracy | test accuracy | one H200, modelled (s) | article: run "
           "| article: time (s) | article: train accuracy | article: test accuracy |",
           "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for (k, seed, name), r in zip(found, runs):
        sched = describe_schedule(os.path.join(outdir, name + ".schedule"))
        if k == 4:
            sched = "LARS; " + sched
        test = cell(r["test_acc"], ".4f")
        if r["error"]:
            test = f"failed: {r['error']}".replace("|", "/")
        if k in ARTICLE:
            a_name, a_time, a_train, a_test = ARTICLE[k]
            article = f"{a_name} | {a_time:.2f} | {cell(a_train, '.4f')} | {a_test:.4f}"
        else:
            article = "not in the article | — | — | —"
        wall = cell(r["wall_s"], ".0f")
        if r["parts"] > 1 or r["estimated"]:
            wall += f" ({r['parts']} part{'s' if r['parts'] > 1 else ''}"
            wall += f", {r['estimated']} estimated)" if r["estimated"] else ")"
        out.append(f"| {label(k, seed)} | {cell(r['batch'], 'd')} | {sched} | {cell(r['epoch_s'], '.2f')} "
                   f"| {cell(r['total_s'], '.2f')} | {wall} | {cell(r['img_s'], '.0f')} "
                   f"| {cell(r['train_acc'], '.4f')} | {test} | {seconds(modelled_h200_s(r, cost))} "
                   f"| {article} |")
    return out


def epoch_table(found, runs):
    """Loss and test accuracy per epoch and run (over a run's seeds, their mean, and the
    test accuracy's sd), the article's loss beside dpc's where on record."""
    epochs = max((max(r["per_epoch"], default=-1) for r in runs), default=-1) + 1
    if epochs == 0:
        return []
    by_run = {}
    for (k, seed, _), r in zip(found, runs):
        by_run.setdefault(k, []).append(r)
    seeds = any(seed is not None for _, seed, _ in found)
    mean = " (mean)" if seeds else ""
    head = ["epoch"]
    for k in by_run:
        head += [f"run {k} loss{mean}"] + ([f"article run {k} loss"] if k in ARTICLE_LOSS else [])
        head += [f"run {k} test accuracy" + (" (mean ± sd)" if seeds else "")]
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join(["---"] + ["---:"] * (len(head) - 1)) + " |"]

    def values(rs, e, key):
        return [v for v in (r["per_epoch"].get(e, {}).get(key) for r in rs) if isinstance(v, (int, float))]
    for e in range(epochs):
        row = [str(e)]
        for k, rs in by_run.items():
            losses, accs = values(rs, e, "train_loss"), values(rs, e, "test_accuracy")
            row.append(f"{statistics.mean(losses):.3f}" if losses else "—")
            if k in ARTICLE_LOSS:
                row.append(cell(ARTICLE_LOSS[k].get(e), ".1f"))
            acc = f"{statistics.mean(accs):.4f}" if accs else "—"
            if len(accs) > 1:
                acc += f" ± {statistics.stdev(accs):.4f}"
            row.append(acc)
        out.append("| " + " | ".join(row) + " |")
    return out


def spread(values):
    """'mean ± sd (min–max)' of the values; the sd is the sample's (n - 1)."""
    if not values:
        return "—"
    text = f"{statistics.mean(values):.4f}"
    if len(values) > 1:
        text += f" ± {statistics.stdev(values):.4f} ({min(values):.4f}–{max(values):.4f})"
    return text


def difference(a, b):
    """'+16.8 points (8.1 standard errors)': mean(a) - mean(b) in points of
    accuracy, over its standard error (Welch's: sqrt(var a/n a + var b/n b));
    "—" under two values on either side."""
    if len(a) < 2 or len(b) < 2:
        return "—"
    d = statistics.mean(a) - statistics.mean(b)
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    ratio = f"{abs(d) / se:.1f} standard errors" if se > 0 else "no spread"
    return f"{100 * d:+.1f} points ({ratio})"


def seed_accuracies(found, runs):
    """{run: [final test accuracy of each of its seeds]}."""
    accs = {}
    for (k, _, _), r in zip(found, runs):
        if r["error"] is None and r["test_acc"] is not None:
            accs.setdefault(k, []).append(r["test_acc"])
    return accs


def difference_table(found, runs):
    """Each pair of runs: the difference of their mean test accuracies and
    how many standard errors it is."""
    accs = seed_accuracies(found, runs)
    ks = sorted(accs)
    if len(ks) < 2:
        return []
    out = ["| runs | test accuracy, difference of the means |", "| --- | ---: |"]
    out += [f"| {a} − {b} | {difference(accs[a], accs[b])} |" for i, a in enumerate(ks) for b in ks[i + 1:]]
    return out


def seed_table(found, runs):
    """Each run's final accuracies and first and last losses over its seeds."""
    out = ["| run | seeds | test accuracy per seed | test accuracy, mean ± sd (range) "
           "| train accuracy, mean ± sd (range) | epoch-0 loss, mean ± sd (range) "
           "| last-epoch loss, mean ± sd (range) | article: test accuracy (45 epochs) |",
           "| --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for k in sorted({f[0] for f in found}):
        mine = [(seed, r) for (kk, seed, _), r in zip(found, runs) if kk == k and r["error"] is None]
        if not mine:
            continue
        tests = [r["test_acc"] for _, r in mine]
        trains = [r["train_acc"] for _, r in mine]

        def losses(r, which):
            rows = r["per_epoch"]
            row = rows.get(min(rows) if which == "first" else max(rows), {}) if rows else {}
            return row.get("train_loss")
        first = [v for v in (losses(r, "first") for _, r in mine) if isinstance(v, (int, float))]
        last = [v for v in (losses(r, "last") for _, r in mine) if isinstance(v, (int, float))]
        per_seed = ", ".join(f"{r['test_acc']:.4f}" for _, r in mine)
        seeds = ", ".join(str(s) for s, _ in mine)
        article = cell(ARTICLE[k][3], ".4f") if k in ARTICLE else "—"
        out.append(f"| {k} | {seeds} | {per_seed} | {spread(tests)} | {spread(trains)} "
                   f"| {spread(first)} | {spread(last)} | {article} |")
    return out


def report(outdir, args):
    found = find_runs(outdir) or [(k, None, f"run{k}") for k in (1, 2, 3)]  # nothing ran: every row says why
    runs = [read_run(outdir, name) for _, _, name in found]
    cost = read_cost(outdir)
    seeds = any(seed is not None for _, seed, _ in found)
    backends = sorted({r["backend"] for r in runs if r["backend"]})
    epochs = max(r["epochs"] for r in runs)
    shortened = epochs < ARTICLE_EPOCHS or bool(args.steps)
    title = "The article's runs, reproduced with dpc" + (": the seed study" if seeds else "")
    out = [f"# {title}", ""]
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
    if seeds:
        out += ["## Mean and spread over the seeds", ""] + seed_table(found, runs) + [
            "", "sd: the sample standard deviation (n − 1); range: the lowest and highest seed.", ""]
        differences = difference_table(found, runs)
        if differences:
            out += ["## Differences between runs", ""] + differences + [
                "", "A difference in points of test accuracy, and how many of its standard errors it is "
                "(Welch's: the root of each run's variance over its seed count, summed); one under about "
                "two standard errors cannot be told from the seeds' spread.", ""]
        out += ["## Each run and seed", ""]
    out += results_table(found, runs, outdir, cost)
    out.append("")
    machines = [(label(k, seed), line) for k, seed, name in found
                for line in read_lines(os.path.join(outdir, name + ".machine")) if line.strip()]
    if machines:
        out += ["Where each run (or each part of a resumed run) ran, and the load average as it started:", ""]
        out += [f"- run {who}: {line}" for who, line in machines] + [""]
    out.append("Epoch time: mean seconds per epoch (the EPOCH lines); training time: the `Training time` "
               "line (training only, without the accuracy passes); wall time: the whole run, accuracy "
               "passes included (RUN.time; a resumed run has more than one part; an estimated part is "
               "one stopped with no end on record, counted as its epochs and their accuracy passes); "
               "img/s: the median of "
               "the epochs' training rates; one H200, modelled: the same schedule, its replicas taking "
               "turns on one H200, priced by `dpc --cost` (cost.txt). Logs and metrics: RUN.log and "
               "RUN.jsonl beside this file; plot: article.svg.")
    table = epoch_table(found, runs)
    if table:
        out += ["", "## Epoch by epoch", "",
                "Each epoch's mean train loss and the test accuracy after it; the article's loss where "
                "this project has it on record (the article prints one per epoch; its issues quote "
                "run 1's first two and runs 2 and 3's first).", ""] + table
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
    text, ok = report(args.outdir, args)
    try:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        print(f"article: error: {args.out}: cannot write: {e.strerror}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
