#!/usr/bin/env bash
# run: tier=check
# --device on a machine without a GPU: `dprun --device cuda` exits
# 1 with one clear message, `--device auto` trains on the cpu backend after
# at most one notice line, and the GPU check tool (tests/gpu/cuda_check)
# reports that it has nothing to check (exit 2). On a machine with a CUDA
# device and driver the first two become: cuda opens it, auto picks it.
. tests/lib.sh

"$bin/dpc" models/mlp.net -o "$tmp/m.plan" || { echo "0 passed, 1 failed"; exit 1; }
have_gpu=0
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && have_gpu=1
# Whether dprun opens its backend with rt_backend_open (runtime/train/train.c,
# cli/dprun.c): a build without that wiring refuses cuda and prints no notice.
wired=0
grep -q rt_backend_open runtime/train/train.c cli/dprun.c 2>/dev/null && wired=1

"$bin/dprun" "$tmp/m.plan" --device cuda --steps 1 --data synthetic >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $have_gpu = 0 ]; then
    [ $rc = 1 ] && ok || bad "--device cuda without a GPU exited $rc, not 1"
    [ "$(grep -c 'error' "$tmp/err")" = 1 ] && grep -q -- '--device cuda' "$tmp/err" && grep -q 'CUDA' "$tmp/err" &&
        ok || bad "--device cuda without a GPU: $(cat "$tmp/err")"
elif [ $wired = 1 ]; then
    [ $rc = 0 ] && ok || bad "--device cuda with a GPU: exit $rc: $(tail -n 3 "$tmp/err")"
fi

"$bin/dprun" "$tmp/m.plan" --device auto --steps 1 --data synthetic >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 0 ] && grep -q '^Training time' "$tmp/out" && ok || bad "--device auto: exit $rc: $(tail -n 3 "$tmp/err")"
n=$(grep -c '^dprun: no CUDA device (.*): using the cpu backend$' "$tmp/err")
DPC_DEBUG=1 "$bin/dprun" "$tmp/m.plan" --device auto --steps 1 --data synthetic >/dev/null 2>"$tmp/err.debug"
n_debug=$(grep -c '^dprun: no CUDA device (.*): using the cpu backend$' "$tmp/err.debug")
if [ $have_gpu = 0 ]; then
    [ "$n" -le 1 ] && ok || bad "--device auto printed $n notices"
    if [ $wired = 1 ]; then
        # A machine with no driver at all is a CPU machine: quiet unless asked.
        [ "$n_debug" = 1 ] && ok || bad "--device auto without a GPU, DPC_DEBUG=1: no notice line: $(cat "$tmp/err.debug")"
        if grep -q '^dprun: no CUDA device (no CUDA driver' "$tmp/err.debug"; then
            [ "$n" = 0 ] && ok || bad "--device auto on a machine without a driver spoke: $(cat "$tmp/err")"
        else
            [ "$n" = 1 ] && ok || bad "--device auto with a driver but no GPU: no notice line: $(cat "$tmp/err")"
        fi
    fi
fi

if [ $have_gpu = 0 ] && [ ! -x "$build/gpu/cuda_check" ]; then
    bad "no $build/gpu/cuda_check: the suite's make goals build it"
elif [ $have_gpu = 0 ]; then
    "$build/gpu/cuda_check" "$tmp/m.plan" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc = 2 ] && grep -q 'no CUDA device' "$tmp/err" && ok ||
        bad "cuda_check without a GPU: exit $rc: $(cat "$tmp/err")"
fi
finish
