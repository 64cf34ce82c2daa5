# tests/lib.sh — what the shell tests share. Source it from the repository
# root (tests/run.sh runs every tests/*_test.sh from there):
#
#     . tests/lib.sh              # bin, build, py, tmp (removed at exit), counters
#     check NAME CMD...           # a pass when CMD succeeds
#     expect_fail NAME WANT CMD...       # exit 1, WANT on the last line of stderr
#                                        # (after $fail_prefix, a pattern, if set)
#     expect_fail_line NAME WANT CMD...  # exit 1, stderr one line holding WANT
#     skip NAME                   # a check that could not run here (never a pass)
#     finish                      # prints `N passed, N failed[, N skipped]`; the exit status
#     kernel_nets                 # the nets whose every kernel the CUDA checks compile
#     zoo_nets                    # the model-zoo nets (not in kernel_nets)
#     tier_at_least full          # the suite's tier includes full (DPC_TIER)
#     sanitized                   # running in the sanitizer suite (DPC_SANITIZE)
#     cifar_net FILE NAME BATCH EPOCHS SCHEDULE AUGMENT EVAL <<<"$conv_bn_body"
#                                 # a small .net on CIFAR-shaped data (below)
#
# DPC_BIN and DPC_BUILD (set by tests/run.sh) name the binaries and the build
# tree; DPC_DATA is unset so dprun never picks up real data by accident.
set -u
bin=${DPC_BIN:-bin}
build=${DPC_BUILD:-build/rel}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset DPC_DATA
pass=0 fail=0 skipped=0
fail_prefix='' # e.g. '*dprun: error: ': what must come before WANT on the line
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
skip() { skipped=$((skipped + 1)); echo "SKIP: $*"; }
check() { local name=$1; shift; if "$@"; then ok; else bad "$name"; fi; }
# lacks PATTERN FILE: FILE has no line matching PATTERN (a check's command).
lacks() { ! grep -q -- "$1" "$2"; }

# The model-zoo nets (ResNet-34/50, ResNet-18 v2, MobileNetV2) and the
# attention models (GPT-2 small, gpt_char, ViT-tiny: their kernel classes
# are tests/nets/gpt_tiny.net's and vit_tiny.net's, at sizes the
# simulator could not run in the suite's time).
zoo_nets() {
    echo models/resnet34.net models/resnet50.net models/resnet18_v2.net models/mobilenet_v2.net \
        models/gpt2.net models/gpt_char.net models/vit_tiny.net
}

# models/*.net and tests/nets/*.net less the zoo nets: they hold no kernel
# class that resnet18 and se_small (grouped and depthwise conv, clip,
# mul_channel) do not, and all variants of their hundreds of kernels more
# would not fit the suite's time. nvrtc_test.sh compiles theirs in two
# variants (fused fp32 and bf16); parity and train tests run their plans.
kernel_nets() {
    local m zoo=" $(zoo_nets) "
    for m in models/*.net tests/nets/*.net; do
        [[ $zoo == *" $m "* ]] || echo "$m"
    done
}

# Runs CMD, keeping its stderr in $fail_err; 0 when it exited 1 (the
# status of every clear refusal), else counts a failure.
run_expect_exit1() {
    local name=$1; shift
    local rc
    fail_err=$("$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 1 ]; then bad "$name: exit $rc, want 1 ($fail_err)"; return 1; fi
}
expect_fail() {
    local name=$1 want=$2; shift 2
    run_expect_exit1 "$name" "$@" || return
    local last; last=$(printf '%s\n' "$fail_err" | tail -n 1)
    case "$last" in $fail_prefix*"$want"*) ok ;; *) bad "$name: stderr '$fail_err' lacks $fail_prefix'$want'" ;; esac
}
expect_fail_line() {
    local name=$1 want=$2; shift 2
    run_expect_exit1 "$name" "$@" || return
    if [ "$(printf '%s\n' "$fail_err" | wc -l)" -ne 1 ]; then bad "$name: more than one line: $fail_err"; return; fi
    case "$fail_err" in *"$want"*) ok ;; *) bad "$name: stderr '$fail_err' lacks '$want'" ;; esac
}
# mpi_ready: 0 when dprun was built with MPI and mpirun is there, with the
# environment mpirun needs here (CI runs as root; containers have no
# shared-memory single-copy support; OpenMPI's own allocations are not ours
# to account for) and `mpi` set to the 2-process launcher; else 1, after
# saying why the multi-process checks are left out.
mpi_ready() {
    if ! nm "$build/libdpc.a" 2>/dev/null | grep -q ' U MPI_Init_thread'; then
        # The build detects MPI after installing it: only MPI=0 leaves it out.
        if grep -q 'mpi no (MPI=0)' build/config.mk 2>/dev/null; then
            skip "dprun built with MPI=0: the multi-process checks"
        else
            bad "dprun built without MPI: install it (scripts/deps.sh build) and rebuild"
        fi
        return 1
    fi
    if ! command -v mpirun >/dev/null; then
        bad "no mpirun: install openmpi-bin (scripts/deps.sh build)"
        return 1
    fi
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
    mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
}

# tier_at_least check|test|full: 0 when the suite's tier (DPC_TIER, set by
# tests/run.sh; test when run by hand) includes it. sanitized: 0 under the
# sanitizer suite, which leaves out what ASan/UBSan cannot judge.
tier_at_least() {
    local r; for r in check test full; do
        [ "$r" = "$1" ] && return 0
        [ "$r" = "${DPC_TIER:-test}" ] && return 1
    done
    return 1
}
sanitized() { [ "${DPC_SANITIZE:-0}" = 1 ]; }

finish() {
    if [ "$skipped" -gt 0 ]; then echo "$pass passed, $fail failed, $skipped skipped"; else echo "$pass passed, $fail failed"; fi
    [ "$fail" -eq 0 ]
}

# one_step_each PREC...: from the same initial weights ($tmp/init.st, saved
# by $tmp/c_fp32.plan), one step of $tmp/c_PREC.plan for each PREC, with
# its metrics in $tmp/PREC.jsonl and its weights in $tmp/PREC.st.
one_step_each() {
    "$bin/dprun" "$tmp/c_fp32.plan" --steps 0 --seed 1 --save-params "$tmp/init.st" >/dev/null 2>&1
    local p
    for p in "$@"; do
        "$bin/dprun" "$tmp/c_$p.plan" --steps 1 --seed 1 --load-params "$tmp/init.st" --no-augment \
            --metrics "$tmp/$p.jsonl" --save-params "$tmp/$p.st" >"$tmp/$p.out" 2>&1 ||
            bad "one step $p: $(tail -n 3 "$tmp/$p.out")"
    done
}

# use_fake_driver: the fake driver (tests/fake) for libcuda, cuBLAS and
# NCCL, its path in $fake; a skip, and the end of the program, where it was
# not built (it needs the CUDA toolkit and g++).
use_fake_driver() {
    fake=$build/fake/libfakecuda.so
    if [ ! -f "$fake" ]; then
        skip "no $fake (built with the CUDA toolkit only)"
        finish
        exit
    fi
    fake=$(realpath "$fake")
    export DPC_LIBCUDA=$fake DPC_LIBCUBLAS=$fake DPC_LIBNCCL=$fake DPC_LIBCUDNN=$fake
}

# random_cifar DIR N: a CIFAR-10 binary folder of N random images (label
# i % 10) in each of the five training files and the test file; seed 0.
random_cifar() {
    mkdir -p "$1"
    $py - "$1" "$2" <<'PY'
import random, sys
d, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(0)
for name in [f'data_batch_{i}.bin' for i in range(1, 6)] + ['test_batch.bin']:
    rec = bytearray()
    for r in range(n):
        rec.append(r % 10)
        rec += bytes(rng.randrange(256) for _ in range(3072))
    open(f'{d}/{name}', 'wb').write(rec)
PY
}

# cifar_net FILE NAME BATCH EPOCHS SCHEDULE AUGMENT EVAL: writes FILE, a .net
# on 3x32x32 images of 10 classes: network NAME of the lines on stdin (ending
# in `logits`) and the softmax loss; trained BATCH per device for EPOCHS
# with xavier(magnitude=2.24) and sgd(momentum=0.9, wd=0.0001), then the
# train lines SCHEDULE (lr, lr_scaling, warmup: one or more lines), on
# cifar10 with the AUGMENT items (may be empty) before the CIFAR
# normalisation, and eval batch EVAL.
cifar_net() {
    local file=$1 name=$2 batch=$3 epochs=$4 schedule=$5 augment=$6 eval=$7
    {
        printf 'input image[3, 32, 32]\ninput label class(10)\nnetwork %s {\n' "$name"
        cat
        printf '    loss = softmax_cross_entropy(logits, label)\n}\ntrain {\n'
        printf '    batch %s per device\n    epochs %s\n' "$batch" "$epochs"
        printf '    init xavier(magnitude=2.24)\n    optimizer sgd(momentum=0.9, wd=0.0001)\n'
        printf '%s\n' "$schedule" | sed 's/^/    /'
        printf '    data cifar10 { %snormalize mean(0.4914, 0.4822, 0.4465) std(0.2023, 0.1994, 0.2010) }\n' "$augment"
        printf '    eval batch %s\n}\n' "$eval"
    } >"$file"
}
# A conv with BatchNorm and the classifier over the global average: fast, and
# its parameter files hold running statistics.
conv_bn_body='    x = relu(batchnorm(conv(image, 4, k=3, s=2, p=1, bias=false)))
    logits = dense(global_avgpool(x), 10)'
