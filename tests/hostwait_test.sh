#!/usr/bin/env bash
# run: tier=test
# No host wait inside a step, and failures that name their cause, on the fake
# driver (tests/fake: libcuda, libcublas and libnccl on
# the host, kernels under the simulator), with mlp at batch 4:
#  - DPC_DEBUG=2 prints each step's host waits (a drain: a stream
#    synchronisation, a blocking copy, a wait for the latest work); they
#    are 0 in every step of two epochs, for 1 replica and for 4 (--gpus 4,
#    nccl on 4 fake devices), with CUDA graphs and without: the step's
#    losses and parameter check are read one step late, the epoch's last
#    at its end. DPC_INPUT_OVERLAP=0 (the step-by-step order) waits in
#    every step, so the count is real;
#  - the lagged reads change nothing: the same losses, --on-nan stop at the
#    same step as step by step and as the cpu, its checkpoint holding only
#    the steps before the bad one; --on-nan skip (read at once) as before;
#  - a kernel made to fail asynchronously (FAKE_CUDA_FAIL_KERNEL) is named
#    with DPC_SYNC=1 (or DPC_PROFILE=1): the call, its kernel, the step and
#    the replica; without it the message names the last step queued and
#    suggests DPC_SYNC=1; a failure of the launch itself names its kernel.
# Prints `N passed, N failed`.
. tests/lib.sh
use_fake_driver

random_cifar "$tmp/c4" 4   # batch 4: 5 steps per epoch
random_cifar "$tmp/c16" 16 # --gpus 4 of batch 4: 5 steps per epoch
"$bin/dpc" models/mlp.net --batch 4 -o "$tmp/mlp.plan" || bad "compile mlp"
sed -e 's/lr {[^}]*}/lr {0: 100000}/' models/mlp.net >"$tmp/div.net"
"$bin/dpc" "$tmp/div.net" --batch 4 -o "$tmp/div.plan" || bad "compile div"

run() { # TAG DPRUN-ARGS...: stdout TAG.out, stderr TAG.err; the exit status
    local tag=$1
    shift
    DPC_DEBUG=2 "$bin/dprun" "$@" --no-shuffle >"$tmp/$tag.out" 2>"$tmp/$tag.err"
}
waits() { sed -n 's/.*debug: host waits in step \([0-9]*\): \([0-9]*\) .*/\1 \2/p' "$tmp/$1.err"; }
losses() { grep 'debug: step [0-9]* loss ' "$tmp/$1.err"; }
# Every step 0..N-1 has a waits line, each 0.
no_waits() { # TAG N
    local w
    w=$(waits "$1")
    [ "$(printf '%s\n' "$w" | awk 'NF' | wc -l)" -eq "$2" ] && ! printf '%s\n' "$w" | awk '$2 != 0' | grep -q .
}

# ---- host waits per step --------------------------------------------------------------
M=("$tmp/mlp.plan" --device cuda --data "$tmp/c4" --epochs 2)
run g1 "${M[@]}" --save-params "$tmp/g1.st" || bad "1 replica: $(tail -n 2 "$tmp/g1.err")"
check "1 replica, CUDA graphs: 0 host waits in each of 10 steps: $(waits g1 | tr '\n' ' ')" no_waits g1 10
check "1 replica: the step results were read one step late (lagged waits)" \
    grep -q 'host waits in step 3: 0 (and [1-9][0-9]* for an earlier' "$tmp/g1.err"
DPC_CUDA_GRAPH=0 run e1 "${M[@]}" || bad "1 replica, eager: $(tail -n 2 "$tmp/e1.err")"
check "1 replica, eager: 0 host waits in each of 10 steps: $(waits e1 | tr '\n' ' ')" no_waits e1 10
DPC_INPUT_OVERLAP=0 run s1 "${M[@]}" --save-params "$tmp/s1.st" || bad "step by step: $(tail -n 2 "$tmp/s1.err")"
check "DPC_INPUT_OVERLAP=0 waits in every step: $(waits s1 | tr '\n' ' ')" \
    bash -c "[ \$(sed -n 's/.*host waits in step [0-9]*: \([1-9][0-9]*\) .*/\1/p' '$tmp/s1.err' | wc -l) -eq 10 ]"
check "read one step late: the same 10 losses as step by step" \
    bash -c "cmp -s <(grep 'debug: step' '$tmp/g1.err' | grep loss) <(grep 'debug: step' '$tmp/s1.err' | grep loss) && [ \$(grep -c 'debug: step [0-9]* loss' '$tmp/g1.err') -eq 10 ]"
check "read one step late: the same log lines and parameters as step by step" \
    bash -c "cmp -s <(sed 's/Time per epoch .*//; s/Training time [0-9.]*//' '$tmp/g1.out') <(sed 's/Time per epoch .*//; s/Training time [0-9.]*//' '$tmp/s1.out') && cmp -s '$tmp/g1.st' '$tmp/s1.st'"

G4=("$tmp/mlp.plan" --device cuda --gpus 4 --data "$tmp/c16" --epochs 2)
DPC_FAKE_CUDA_DEVICES=4 run g4 "${G4[@]}" || bad "4 replicas: $(tail -n 2 "$tmp/g4.err")"
check "4 replicas on nccl: $(grep -c 'nccl' "$tmp/g4.err") nccl line(s)" grep -q 'summed by the nccl collective' "$tmp/g4.err"
check "4 replicas, CUDA graphs: 0 host waits in each of 10 steps: $(waits g4 | tr '\n' ' ')" no_waits g4 10
DPC_FAKE_CUDA_DEVICES=4 DPC_CUDA_GRAPH=0 run e4 "${G4[@]}" || bad "4 replicas, eager: $(tail -n 2 "$tmp/e4.err")"
check "4 replicas, eager: 0 host waits in each of 10 steps: $(waits e4 | tr '\n' ' ')" no_waits e4 10
DPC_FAKE_CUDA_DEVICES=4 DPC_INPUT_OVERLAP=0 run s4 "${G4[@]}" || bad "4 replicas step by step"
check "4 replicas: the same losses read one step late as step by step" \
    bash -c "cmp -s <(grep 'debug: step [0-9]* loss' '$tmp/g4.err') <(grep 'debug: step [0-9]* loss' '$tmp/s4.err')"
run b1 "$tmp/mlp.plan" --device cuda --data "$tmp/c4" --benchmark 3 || bad "--benchmark: $(tail -n 2 "$tmp/b1.err")"
check "--benchmark one step late: $(tail -n 1 "$tmp/b1.out")" grep -Eq '^throughput: [0-9.]+ img/s$' "$tmp/b1.out"

# ---- --on-nan stop: the same step as step by step and the cpu; the checkpoint
# holds the steps before it
D=("$tmp/div.plan" --data "$tmp/c16" --epochs 2) # 20 steps per epoch: it stops mid-epoch
run dg "${D[@]}" --device cuda --checkpoint "$tmp/dck" --checkpoint-every 1
rc=$?
DPC_INPUT_OVERLAP=0 run ds "${D[@]}" --device cuda
run dc "${D[@]}" --device cpu
nan_line() { tail -n 1 "$tmp/$1.err" | grep -o 'at step [0-9]* (epoch [0-9]*, step [0-9]* of the epoch'; }
first=$(nan_line dg | grep -o '^at step [0-9]*' | grep -o '[0-9]*$')
check "--on-nan stop: exit 1 (got $rc): $(tail -n 1 "$tmp/dg.err")" \
    bash -c "[ $rc -eq 1 ] && [ -n '$first' ] && tail -n 1 '$tmp/dg.err' | grep -Eq 'error: (the loss is|a gradient is not finite).* stopping; the last good checkpoint stays in'"
check "--on-nan stop: the same step one step late, step by step and on the cpu ($(nan_line dg))" \
    bash -c "[ '$(nan_line dg)' = '$(nan_line ds)' ] && [ '$(nan_line dg)' = '$(nan_line dc)' ]"
run dr "${D[@]}" --device cuda --checkpoint "$tmp/dck" --resume --steps "${first:-0}"
check "--on-nan stop: the checkpoint holds the ${first:-?} steps before the bad one" \
    grep -q "${first:-x} steps restored" "$tmp/dr.err"
# --on-nan skip reads each step at once (it undoes a bad step before the next).
run kg "${D[@]}" --device cuda --on-nan skip --save-params "$tmp/kg.st"
DPC_INPUT_OVERLAP=0 run ks "${D[@]}" --device cuda --on-nan skip --save-params "$tmp/ks.st"
check "--on-nan skip: the same steps skipped and parameters as step by step" bash -c \
    "grep -q skipped '$tmp/kg.err' && cmp -s <(grep -E 'debug: step [0-9]* loss|skipped' '$tmp/kg.err') <(grep -E 'debug: step [0-9]* loss|skipped' '$tmp/ks.err') && cmp -s '$tmp/kg.st' '$tmp/ks.st'"

# ---- failures named ----------------------------------------------------------------
# Kernel 40 of device 0 is in step 4 (8 launches per step), replayed from a graph.
F=("$tmp/mlp.plan" --device cuda --data "$tmp/c4" --epochs 2)
fail_run() { # TAG ENV... : runs dprun with the env, wants exit 1
    local tag=$1
    shift
    env "$@" "$bin/dprun" "${F[@]}" --no-shuffle >/dev/null 2>"$tmp/$tag.err"
    local rc=$?
    [ $rc -eq 1 ] || bad "$tag: exit $rc, want 1: $(tail -n 2 "$tmp/$tag.err")"
}
last() { tail -n 1 "$tmp/$1.err"; }
# The read that reports it is step 3's (a GPU that faulted before the host
# waited) or step 4's (one that had not yet: the fake's deferred streams).
fail_run fa FAKE_CUDA_FAIL_KERNEL=40
check "asynchronous failure: the last step queued and DPC_SYNC=1: $(last fa)" bash -c \
    "tail -n 1 '$tmp/fa.err' | grep -q '^dprun: error: reading the losses of step [34]: replica 0: cuda: cuEventSynchronize on device 0: CUDA_ERROR_ILLEGAL_ADDRESS: .*; the last work queued was step 4 of replica 0 (.*rerun with DPC_SYNC=1'"
fail_run fs FAKE_CUDA_FAIL_KERNEL=40 DPC_SYNC=1
check "DPC_SYNC=1: the call, its kernel, the step and the replica: $(last fs)" bash -c \
    "tail -n 1 '$tmp/fs.err' | grep -q '^dprun: error: train step failed: step 4 of replica 0: kernel k[0-9]*_[a-z_]* (call [0-9]*: node [0-9]*, [a-z_]*): cuda: cuStreamSynchronize on device 0: CUDA_ERROR_ILLEGAL_ADDRESS' && ! grep -q 'DPC_SYNC=1 to' '$tmp/fs.err'"
fail_run fp FAKE_CUDA_FAIL_KERNEL=40 DPC_PROFILE=1
check "DPC_PROFILE=1 synchronises each call too: $(last fp)" bash -c \
    "tail -n 1 '$tmp/fp.err' | grep -q 'step 4 of replica 0: kernel k[0-9]*_[a-z_]* (call '"
check "DPC_SYNC=1 and the default name the same kernel" \
    bash -c "[ \"\$(grep -o 'kernel k[0-9a-z_]*' '$tmp/fs.err')\" = \"\$(grep -o 'kernel k[0-9a-z_]*' '$tmp/fp.err')\" ]"
fail_run fl FAKE_CUDA_FAIL_KERNEL=40 FAKE_CUDA_FAIL_MODE=sync
check "a failed launch names its kernel and step: $(last fl)" bash -c \
    "tail -n 1 '$tmp/fl.err' | grep -q 'step 4 of replica 0: .*CUDA_ERROR_LAUNCH_FAILED'"
# Replica 1 of 2 (local collective: a failing replica aborts it for the others).
F=("$tmp/mlp.plan" --device cuda --gpus 2 --data "$tmp/c16" --epochs 2)
fail_run f2 DPC_COLL=local DPC_FAKE_CUDA_DEVICES=2 FAKE_CUDA_FAIL_DEVICE=1 FAKE_CUDA_FAIL_KERNEL=30 DPC_SYNC=1
check "DPC_SYNC=1, --gpus 2: the replica: $(last f2)" bash -c \
    "tail -n 1 '$tmp/f2.err' | grep -q 'step 3 of replica 1: kernel k[0-9]*_[a-z_]* (call [0-9]*: .*on device 1: CUDA_ERROR_ILLEGAL_ADDRESS'"
finish
