#!/usr/bin/python3
"""scripts/text_tokens.py — a text file as byte-level token files.

    scripts/text_tokens.py TEXT OUTDIR

The vocabulary is the 256 byte values (no merges, no unknowns), so any
file works and the ids need no table. Writes, creating OUTDIR if needed:
  OUTDIR/train.bin  the first 90% of TEXT's bytes, one little-endian
                    uint16 per byte (nanoGPT's train.bin layout)
  OUTDIR/val.bin    the last 10%
  OUTDIR/meta.txt   one line: vocab 256 train N val M (token counts)
dprun's token reader (runtime/data/tokens.c) reads the .bin files. TEXT
must be a regular file of 2 bytes to 1 GiB. Errors are one line on
stderr and exit status 1. Plain Python 3 standard library.
"""
import os
import stat
import sys

MAX_BYTES = 1 << 30  # 2 GiB of tokens out; nanoGPT's character sets are a few MB
VOCAB = 256


def fail(msg):
    sys.stderr.write("text_tokens: error: %s\n" % msg)
    sys.exit(1)


def read_text(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        fail("%s: not a regular file" % path)
    with os.fdopen(fd, "rb") as f:
        if st.st_size > MAX_BYTES:
            fail("%s: %d bytes; at most %d are read" % (path, st.st_size, MAX_BYTES))
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        fail("%s: more than %d bytes" % (path, MAX_BYTES))
    if len(data) < 2:
        fail("%s: %d bytes; a train and a val part need at least 2" % (path, len(data)))
    return data


def tokens(data):
    out = bytearray(2 * len(data))
    out[0::2] = data  # little-endian uint16: the byte, then 0
    return bytes(out)


def write(path, data):
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))


def main(argv):
    if len(argv) != 3:
        fail("usage: text_tokens.py TEXT OUTDIR")
    data = read_text(argv[1])
    out = argv[2]
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        fail("%s: %s" % (out, e.strerror))
    if not os.path.isdir(out):
        fail("%s: not a folder" % out)
    n = len(data) * 9 // 10
    n = min(max(n, 1), len(data) - 1)  # each part at least one byte
    write(os.path.join(out, "train.bin"), tokens(data[:n]))
    write(os.path.join(out, "val.bin"), tokens(data[n:]))
    write(os.path.join(out, "meta.txt"),
          ("vocab %d train %d val %d\n" % (VOCAB, n, len(data) - n)).encode())


if __name__ == "__main__":
    main(sys.argv)
