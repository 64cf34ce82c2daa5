#!/usr/bin/env bash
# run: tier=check
# Where dpc and dprun write, and what they read (base/file.h
# states the rules):
# - a link at an output name the user gave is followed only when the link
#   and its folder belong to the running user; another user's link in a
#   shared folder is refused, naming the link and its owner;
# - a name the tool chooses under a folder (--emit-kernels DIR/train-c and
#   its files, --sweep-dir's run-N.log/.jsonl, the default PLAN-sweep,
#   --dump-dir's files, the checkpoint's file) is never written through a
#   link;
# - no output is an input or another output, compared by resolved folder
#   and name, whether or not the file exists yet;
# - an input that is not a regular file (a FIFO, a link to /proc/kmsg) is
#   refused at once, by every reader.
. tests/lib.sh

printf 'precious' >"$tmp/victim"
intact() { [ "$(cat "$tmp/victim")" = precious ]; }
"$bin/dpc" models/mlp.net -o "$tmp/mlp.plan" || bad "compile mlp"
cp models/mlp.net "$tmp/m.net"
dprun() { "$bin/dprun" "$tmp/mlp.plan" --data synthetic "$@"; }
abs_bin=$(cd "$bin" && pwd)

# ---- item 3: a link another user planted at an output name --------------------
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    shared=$(mktemp -d /tmp/dpc-outputs-test.XXXXXX)
    trap 'rm -rf "$tmp" "$shared"' EXIT
    chmod 1777 "$shared"
    plant() { "${nobody[@]}" ln -s "$tmp/victim" "$shared/$1"; }
    refused="a symbolic link owned by uid 65534"
    plant out.plan
    expect_fail_line planted-o "-o $shared/out.plan: $refused" "$bin/dpc" models/mlp.net -o "$shared/out.plan"
    plant g.dot
    expect_fail_line planted-dot "--dot $shared/g.dot: $refused" "$bin/dpc" models/mlp.net --dot "$shared/g.dot"
    plant m.jsonl
    expect_fail planted-metrics "--metrics $shared/m.jsonl: $refused" dprun --steps 1 --metrics "$shared/m.jsonl"
    plant p.st
    expect_fail planted-save "--save-params $shared/p.st: $refused" dprun --steps 1 --save-params "$shared/p.st"
    plant t.md
    expect_fail planted-sweep-out "--sweep-out $shared/t.md: $refused" \
        dprun --steps 1 --sweep lr=0.1 --sweep-dir "$tmp/sw0" --sweep-out "$shared/t.md"
    check "the planted links' target is untouched" intact
    # Root's own link in a folder another user owns: that user could swap it.
    mkdir "$tmp/theirs" && chown 65534:65534 "$tmp/theirs" && ln -s "$tmp/victim" "$tmp/theirs/o.plan"
    expect_fail_line link-in-their-dir "in a directory owned by uid 65534" \
        "$bin/dpc" models/mlp.net -o "$tmp/theirs/o.plan"
    check "the link in their folder was not followed" intact
    # A user-named folder (--checkpoint) that is another user's link.
    mkdir "$tmp/elsewhere" && plant ck
    expect_fail planted-ckpt-dir "--checkpoint $shared/ck: $refused" dprun --steps 1 --checkpoint "$shared/ck"
    check "nothing was written where their link pointed" [ -z "$(ls -A "$tmp/elsewhere")" ]
else
    skip "another user's links: needs root and setpriv"
fi
# The running user's own link in their own folder is written through.
cp "$tmp/victim" "$tmp/named" && ln -s "$tmp/named" "$tmp/named.plan"
"$bin/dpc" models/mlp.net -o "$tmp/named.plan" 2>/dev/null && [ -L "$tmp/named.plan" ] &&
    cmp -s "$tmp/named" "$tmp/mlp.plan" && ok || bad "dpc -o through the user's own link"

# ---- item 4: links at names the tool chooses -----------------------------------
mkdir -p "$tmp/em/train-c" && ln -s "$tmp/victim" "$tmp/em/train-c/steps.txt"
expect_fail_line emit-file-link "$tmp/em/train-c/steps.txt: a symbolic link at a name dpc chose" \
    "$bin/dpc" models/mlp.net --emit-kernels "$tmp/em" --target cpu
mkdir -p "$tmp/em2" "$tmp/away" && ln -s "$tmp/away" "$tmp/em2/train-c"
expect_fail_line emit-dir-link "$tmp/em2/train-c: a symbolic link at a name dpc chose" \
    "$bin/dpc" models/mlp.net --emit-kernels "$tmp/em2" --target cpu
check "--emit-kernels wrote nothing through a link" bash -c "[ -z \"\$(ls -A '$tmp/away')\" ]"
"$bin/dpc" models/mlp.net --emit-kernels "$tmp/em3" --target cpu && [ -s "$tmp/em3/train-c/steps.txt" ] &&
    [ -s "$tmp/em3/eval-c/steps.txt" ] && ok || bad "--emit-kernels into a new folder"
mkdir "$tmp/sd" && ln -s "$tmp/victim" "$tmp/sd/run-1.log"
expect_fail sweep-log-link "$tmp/sd/run-1.log: a symbolic link at a name dpc chose" \
    dprun --steps 1 --sweep lr=0.1 --sweep-dir "$tmp/sd"
mkdir "$tmp/sd2" && ln -s "$tmp/victim" "$tmp/sd2/run-2.jsonl"
expect_fail sweep-metrics-link "$tmp/sd2/run-2.jsonl: a symbolic link at a name dpc chose" \
    dprun --steps 1 --sweep lr=0.1,0.2 --sweep-dir "$tmp/sd2"
cp "$tmp/mlp.plan" "$tmp/d.plan" && ln -s "$tmp/away" "$tmp/d-sweep"
expect_fail sweep-default-dir-link "$tmp/d-sweep: a symbolic link at a name dpc chose" \
    "$bin/dprun" "$tmp/d.plan" --data synthetic --steps 1 --sweep lr=0.1
check "no sweep file was written through a link" intact
# A resumed run would write its checkpoint through a link at its name.
dprun --steps 1 --checkpoint "$tmp/realck" >/dev/null 2>&1 || bad "a checkpoint to link to"
cp "$tmp/realck/checkpoint.safetensors" "$tmp/realck.keep"
mkdir "$tmp/ck0" && ln -s "$tmp/realck/checkpoint.safetensors" "$tmp/ck0/checkpoint.safetensors"
expect_fail ckpt-file-link "--checkpoint $tmp/ck0/checkpoint.safetensors: a symbolic link at a name dpc chose" \
    dprun --steps 2 --checkpoint "$tmp/ck0" --resume
check "the linked checkpoint is untouched" cmp -s "$tmp/realck/checkpoint.safetensors" "$tmp/realck.keep"
check "nothing in the folder a link pointed to" bash -c "[ -z \"\$(ls -A '$tmp/away')\" ]"

# ---- item 5: an output that is an input or another output ----------------------
mkdir "$tmp/r"
expect_fail save-is-ckpt "--checkpoint $tmp/ck/checkpoint.safetensors and --save-params $tmp/ck/checkpoint.safetensors name the same file" \
    dprun --steps 2 --checkpoint "$tmp/ck" --save-params "$tmp/ck/checkpoint.safetensors"
expect_fail metrics-is-ckpt "--checkpoint $tmp/ck/checkpoint.safetensors and --metrics $tmp/ck/checkpoint.safetensors name the same file" \
    dprun --steps 2 --checkpoint "$tmp/ck" --metrics "$tmp/ck/checkpoint.safetensors"
expect_fail save-is-ckpt-relative "--checkpoint ck/checkpoint.safetensors and --save-params ck/../ck/checkpoint.safetensors name the same file" \
    bash -c "cd '$tmp' && '$abs_bin/dprun' mlp.plan --data synthetic --steps 2 --checkpoint ck --save-params ck/../ck/checkpoint.safetensors"
dprun --steps 2 --checkpoint "$tmp/ck" >/dev/null 2>&1 && dprun --steps 2 --checkpoint "$tmp/ck" --resume >/dev/null 2>&1 &&
    ok || bad "the checkpoint survives the refused runs"
expect_fail metrics-is-save "--metrics $tmp/r/../r/x and --save-params $tmp/r/x name the same file" \
    dprun --steps 1 --metrics "$tmp/r/../r/x" --save-params "$tmp/r/x"
check "the refused run wrote nothing" [ ! -e "$tmp/r/x" ]
printf 'lr=0.1\n' >"$tmp/spec"
expect_fail sweep-out-is-spec "--sweep-out $tmp/spec is the sweep file ($tmp/spec); writing it would destroy it" \
    dprun --steps 1 --sweep "$tmp/spec" --sweep-out "$tmp/spec" --sweep-dir "$tmp/sw1"
check "the sweep file is intact" [ "$(cat "$tmp/spec")" = lr=0.1 ]
expect_fail sweep-out-is-log "--sweep-out $tmp/sw2/run-1.log and --sweep-dir $tmp/sw2/run-1.log name the same file" \
    dprun --steps 1 --sweep lr=0.1 --sweep-dir "$tmp/sw2" --sweep-out "$tmp/sw2/run-1.log"
mkdir -p "$tmp/sw3" && printf 'lr=0.1\n' >"$tmp/sw3/run-1.jsonl"
expect_fail sweep-spec-in-dir "--sweep-dir $tmp/sw3/run-1.jsonl is the sweep file ($tmp/sw3/run-1.jsonl)" \
    dprun --steps 1 --sweep "$tmp/sw3/run-1.jsonl" --sweep-dir "$tmp/sw3"
mkdir -p "$tmp/ek/train-c" && cp models/mlp.net "$tmp/ek/train-c/steps.txt"
expect_fail_line model-in-emit "the model being compiled $tmp/ek/train-c/steps.txt is in $tmp/ek/train-c, a folder --emit-kernels writes files of its own naming in" \
    "$bin/dpc" "$tmp/ek/train-c/steps.txt" --emit-kernels "$tmp/ek" --target cpu
check "the model in the kernels' folder is intact" cmp -s models/mlp.net "$tmp/ek/train-c/steps.txt"
expect_fail_line out-in-emit "-o $tmp/ek2/eval-c/x.plan is in $tmp/ek2/eval-c, a folder --emit-kernels writes" \
    "$bin/dpc" models/mlp.net --emit-kernels "$tmp/ek2" -o "$tmp/ek2/eval-c/x.plan"
ln -s "$tmp" "$tmp/self"
expect_fail_line out-is-dot "-o $tmp/new.out and --dot $tmp/self/new.out name the same file" \
    "$bin/dpc" models/mlp.net -o "$tmp/new.out" --dot "$tmp/self/new.out"
expect_fail_line out-is-model "-o $tmp/self/m.net is the model being compiled ($tmp/m.net)" \
    "$bin/dpc" "$tmp/m.net" -o "$tmp/self/m.net"
mkdir "$tmp/dd"
expect_fail_line dump-is-out "-o $tmp/dd/01-lower.train.ir and --dump-dir $tmp/dd/01-lower.train.ir name the same file" \
    "$bin/dpc" models/mlp.net --print-ir-after=lower --dump-dir "$tmp/dd" -o "$tmp/dd/01-lower.train.ir"
check "the model is intact" cmp -s models/mlp.net "$tmp/m.net"

# ---- item 6: a FIFO as an input is refused at once -----------------------------
mkfifo "$tmp/fifo" "$tmp/fifo.plan" "$tmp/fifo.st"
fifo="not a regular file (a FIFO)"
expect_fail_line fifo-model "$tmp/fifo: error: $fifo" timeout 10 "$bin/dpc" "$tmp/fifo" -o "$tmp/x.plan"
expect_fail_line fifo-from-ir "$fifo" timeout 10 "$bin/dpc" --from-ir "$tmp/fifo" -o "$tmp/x.plan"
expect_fail fifo-sweep "--sweep: $tmp/fifo: $fifo" timeout 10 "$bin/dprun" "$tmp/mlp.plan" --steps 1 --sweep "$tmp/fifo"
expect_fail fifo-plan "$fifo" timeout 10 "$bin/dprun" "$tmp/fifo.plan" --steps 1
expect_fail fifo-load "$fifo" timeout 10 "$bin/dprun" "$tmp/mlp.plan" --steps 1 --load-params "$tmp/fifo.st"
mkdir "$tmp/ckf" && mkfifo "$tmp/ckf/checkpoint.safetensors"
expect_fail fifo-resume "$fifo" timeout 10 "$bin/dprun" "$tmp/mlp.plan" --steps 1 --checkpoint "$tmp/ckf" --resume
mkdir "$tmp/cifar" && for f in data_batch_1 data_batch_2 data_batch_3 data_batch_4 data_batch_5 test_batch; do
    mkfifo "$tmp/cifar/$f.bin"
done
expect_fail fifo-data "data_batch_1.bin: not a regular file" timeout 10 "$bin/dprun" "$tmp/mlp.plan" --steps 1 --data "$tmp/cifar"

# ---- a link to a file of the kernel's (/proc, /sys) is refused at once ---------
# /proc/kmsg blocks a read until the kernel logs (for root); /proc/self/status
# does not block, but is no regular file either. Each reader, given a link to
# one or a FIFO: one line, exit 1, well within the timeout (124 would fail).
kfile=/proc/kmsg
[ -r "$kfile" ] || kfile=/proc/self/status
kern="a file of the kernel's (on proc)"
mkdir "$tmp/k" && cd "$tmp/k" || exit 1
for n in k.net k.plan k.st k.txt k.sweep k.jpg; do ln -s "$kfile" "$n"; done
cd - >/dev/null || exit 1
expect_fail_line kern-model "$tmp/k/k.net: error: $kern" timeout 10 "$bin/dpc" "$tmp/k/k.net" -o "$tmp/x.plan"
expect_fail_line kern-from-ir "$kern" timeout 10 "$bin/dpc" --from-ir "$tmp/k/k.net" -o "$tmp/x.plan"
expect_fail kern-plan "$kern" timeout 10 "$bin/dprun" "$tmp/k/k.plan" --steps 1
expect_fail kern-load "$kern" timeout 10 "$bin/dprun" "$tmp/mlp.plan" --steps 1 --load-params "$tmp/k/k.st"
expect_fail kern-sweep "--sweep: $tmp/k/k.sweep: $kern" timeout 10 "$bin/dprun" "$tmp/mlp.plan" --steps 1 --sweep "$tmp/k/k.sweep"
mkdir "$tmp/kc" && ln -s "$kfile" "$tmp/kc/data_batch_1.bin"
expect_fail kern-data "data_batch_1.bin: $kern" timeout 10 "$bin/dprun" "$tmp/mlp.plan" --steps 1 --data "$tmp/kc"
# .npy arrays, an image folder, and dprun predict's images and --classes.
"$bin/dpc" models/cnn_small.net -o "$tmp/rgb.plan" || bad "compile cnn_small"
small_net() { # small_net FILE DATA: a 3x32x32 classifier reading DATA
    printf '%s\n' 'input image[3, 32, 32]' 'input label class(2)' 'network tiny {' \
        '    logits = dense(global_avgpool(conv(image, 4, k=3, s=2, p=1)), 2)' \
        '    loss = softmax_cross_entropy(logits, label)' '}' 'train {' '    batch 2 per device' \
        '    lr {0: 0.05}' "    data $2" '}' >"$1"
}
small_net "$tmp/npy.net" 'npy'
small_net "$tmp/if.net" 'imagefolder { resize 32 }'
"$bin/dpc" "$tmp/npy.net" -o "$tmp/npy.plan" || bad "compile an npy plan"
"$bin/dpc" "$tmp/if.net" -o "$tmp/if.plan" || bad "compile an image-folder plan"
mkdir "$tmp/kn" "$tmp/fn" && ln -s "$kfile" "$tmp/kn/train_x.npy" && mkfifo "$tmp/fn/train_x.npy"
expect_fail kern-npy "train_x.npy: $kern" timeout 10 "$bin/dprun" "$tmp/npy.plan" --device cpu --steps 1 --data "$tmp/kn"
expect_fail fifo-npy "train_x.npy: $fifo" timeout 10 "$bin/dprun" "$tmp/npy.plan" --device cpu --steps 1 --data "$tmp/fn"
if grep -q '^HAVE_IMAGE := 1' build/config.mk 2>/dev/null; then
    mkdir -p "$tmp/ki/train/a" "$tmp/ki/val/a" "$tmp/fi/train/a" "$tmp/fi/val/a"
    ln -s "$kfile" "$tmp/ki/train/a/x.jpg" && mkfifo "$tmp/fi/train/a/x.jpg"
    expect_fail_line kern-folder "$tmp/ki/train/a/x.jpg: $kern" \
        timeout 10 "$bin/dprun" "$tmp/if.plan" --device cpu --steps 1 --data "$tmp/ki" --data-workers 2
    expect_fail_line fifo-folder "$tmp/fi/train/a/x.jpg: $fifo" \
        timeout 10 "$bin/dprun" "$tmp/if.plan" --device cpu --steps 1 --data "$tmp/fi" --data-workers 2
    "$bin/dprun" "$tmp/rgb.plan" --device cpu --data synthetic --steps 1 --save-params "$tmp/rgb.st" >/dev/null 2>&1 ||
        bad "train the predict model"
    mkfifo "$tmp/k/f.jpg"
    predict() { timeout 10 "$bin/dprun" predict "$tmp/rgb.plan" --device cpu --load-params "$tmp/rgb.st" "$@"; }
    expect_fail_line kern-predict "$tmp/k/k.jpg: $kern" predict "$tmp/k/k.jpg"
    expect_fail_line fifo-predict "$tmp/k/f.jpg: $fifo" predict "$tmp/k/f.jpg"
    mkdir "$tmp/kd" && ln -s "$kfile" "$tmp/kd/k.jpg"
    expect_fail_line kern-predict-dir "$tmp/kd/k.jpg: $kern" predict "$tmp/kd"
    expect_fail_line kern-classes "--classes $tmp/k/k.txt: $kern" predict --classes "$tmp/k/k.txt" "$tmp/k/k.jpg"
    expect_fail_line fifo-classes "--classes $tmp/k/f.jpg: $fifo" predict --classes "$tmp/k/f.jpg" "$tmp/k/k.jpg"
else
    skip "dpc built without libjpeg/libpng: the image readers"
fi
finish
