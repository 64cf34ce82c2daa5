#!/usr/bin/env bash
# run: tier=test
# A device that fails mid-run ends dprun cleanly, on the fake driver
# (tests/fake) with mlp at batch 4, 10 steps, a checkpoint after each:
#  - a copy between host and device made to fail (FAKE_CUDA_FAIL_COPY=N, N
#    two thirds of a clean run's copies, so inside the training) ends the
#    run with exit status 1 and ONE error line, naming the device and the
#    step; nothing is printed after it;
#  - the checkpoint written before the failure stays loadable: --resume
#    from it restores fewer steps than the run had, and trains to the end;
#  - a failing copy while a checkpoint is being read out writes no
#    checkpoint (the last one stays): every N from the first checkpoint on
#    leaves a checkpoint that resumes;
#  - an allocation made to fail (FAKE_CUDA_FAIL_ALLOC=N) is one error line
#    naming the device and how much was asked, exit status 1.
# Prints `N passed, N failed`.
. tests/lib.sh
use_fake_driver

random_cifar "$tmp/c4" 4 # batch 4: 5 steps per epoch
"$bin/dpc" models/mlp.net --batch 4 -o "$tmp/mlp.plan" || bad "compile mlp"
R=("$tmp/mlp.plan" --device cuda --data "$tmp/c4" --epochs 2 --no-shuffle)

# A clean run's copies (DPC_DEBUG=1 prints the backend's counts at the end).
DPC_DEBUG=1 "$bin/dprun" "${R[@]}" >/dev/null 2>"$tmp/clean.err" || bad "clean run: $(tail -n 2 "$tmp/clean.err")"
copies=$(sed -n 's/.* \([0-9]*\) copies in (.*), \([0-9]*\) out (.*/\1 \2/p' "$tmp/clean.err" | awk '{ print $1 + $2 }')
check "a clean run counts its copies ($copies)" bash -c "[ '${copies:-0}' -gt 30 ]"

# run TAG ENV...: dprun with a checkpoint after every step; stderr TAG.err, exit TAG.rc
run() {
    local tag=$1
    shift
    rm -rf "$tmp/$tag.ck"
    env "$@" "$bin/dprun" "${R[@]}" --checkpoint "$tmp/$tag.ck" --checkpoint-every 1 \
        >"$tmp/$tag.out" 2>"$tmp/$tag.err"
    echo $? >"$tmp/$tag.rc"
}
errors() { grep -c 'error:' "$tmp/$1.err"; }
restored() { sed -n 's/.*: \([0-9]*\) steps restored.*/\1/p' "$tmp/$1.err"; }
# resume TAG: --resume from TAG's checkpoint, with no fault, to the end
resume() {
    "$bin/dprun" "${R[@]}" --checkpoint "$tmp/$1.ck" --checkpoint-every 1 --resume \
        >"$tmp/$1.r.out" 2>"$tmp/$1.r.err"
}

n=$((${copies:-90} * 2 / 3))
run mid FAKE_CUDA_FAIL_COPY=$n
msg=$(tail -n 1 "$tmp/mid.err")
check "copy $n fails: exit 1 (got $(cat "$tmp/mid.rc"))" bash -c "[ $(cat "$tmp/mid.rc") -eq 1 ]"
check "copy $n fails: one error line, the last: $msg" bash -c \
    "[ $(errors mid) -eq 1 ] && tail -n 1 '$tmp/mid.err' | grep -q '^dprun: error: '"
check "copy $n fails: the message names the device and the step" bash -c \
    "tail -n 1 '$tmp/mid.err' | grep -Eq 'cuMemcpy(HtoD|DtoH)Async on device 0: .*step [0-9]+ of replica 0'"
check "copy $n fails: no 'dpc:' line and no file:line (the runtime logs under dprun's prefix)" bash -c \
    "! grep -q '^dpc: ' '$tmp/mid.err' && ! grep -Eq '^[a-z/_]+\.c:[0-9]+:' '$tmp/mid.err'"
check "copy $n fails: the checkpoint before it is there" test -f "$tmp/mid.ck/checkpoint.safetensors"
resume mid
rc=$?
k=$(restored mid.r)
check "--resume from it: exit 0 (got $rc), ${k:-no} steps restored, fewer than 10" bash -c \
    "[ $rc -eq 0 ] && [ -n '$k' ] && [ '$k' -ge 1 ] && [ '$k' -lt 10 ]"
check "--resume from it: trains to the end (epoch 1's line, the test accuracy)" bash -c "grep -q '^EPOCH  1:' '$tmp/mid.r.out' && grep -q 'test accuracy' '$tmp/mid.r.out'"

# Every failure from the first checkpoint on leaves one that resumes; some
# of these fail while a checkpoint is read out (--checkpoint not written).
bad_resume=""
not_written=0
for m in $(seq $((n - 12)) 3 $((n + 12))); do
    run f$m FAKE_CUDA_FAIL_COPY=$m
    [ "$(cat "$tmp/f$m.rc")" -eq 1 ] && [ "$(errors f$m)" -eq 1 ] || bad_resume+=" $m(exit $(cat "$tmp/f$m.rc"), $(errors f$m) errors)"
    grep -q 'checkpoint not written' "$tmp/f$m.err" && not_written=$((not_written + 1))
    if [ -f "$tmp/f$m.ck/checkpoint.safetensors" ]; then
        resume f$m || bad_resume+=" $m(resume: $(tail -n 1 "$tmp/f$m.r.err"))"
    fi
done
check "copies $((n - 12))..$((n + 12)) fail: each exit 1 with one error, each checkpoint resumes (${not_written} failed while one was read out):${bad_resume:- all}" \
    test -z "$bad_resume"

# An allocation: at set-up, one line naming the device.
env FAKE_CUDA_FAIL_ALLOC=3 "$bin/dprun" "${R[@]}" >/dev/null 2>"$tmp/alloc.err"
rc=$?
check "alloc 3 fails: exit 1 (got $rc), one error line: $(tail -n 1 "$tmp/alloc.err")" bash -c \
    "[ $rc -eq 1 ] && [ $(errors alloc) -eq 1 ] && tail -n 1 '$tmp/alloc.err' | grep -q '^dprun: error: .*cuda: out of memory on device 0 (.*): [0-9]* bytes asked'"
finish
