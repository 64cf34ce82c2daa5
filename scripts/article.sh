#!/usr/bin/env bash
# scripts/article.sh (`make article ARGS=...`): reproduce the reference
# article's experiment with one command. Compiles the model
# (models/resnet18.net) and trains it three times, as the article does:
#
#   run 1  batch 128 on 1 device, lr 0.1
#   run 2  batch 2048 on 16 replicas, lr 0.1 (no scaling, no warmup)
#   run 3  batch 2048 on 16 replicas, lr scaled x16 (linear) with a 5-epoch warmup
#   run 4  (with --runs 1,2,3,4 or --runs 4) run 3 with LARS instead of SGD: the
#          model's `optimizer` line replaced by --lars (beside the plan: model_lars.net)
#
# on whatever devices are present (GPU if any, else the CPU, where 16
# replicas share it). Writes into the output folder: run{1,2,3}.log (the
# article's log lines), run{1,2,3}.jsonl (dprun --metrics), article.svg
# (train loss and test accuracy per epoch, one curve per run) and
# article.md (the results table beside the article's own figures).
#
# Options:
#   --epochs N       train N epochs per run (default: the plan's, 45); shorter runs
#                    are marked "shortened" in the table
#   --steps N        stop each run after N optimizer steps (for tests)
#   --data DIR|synthetic   CIFAR-10 binary folder (default: $DPC_DATA, else
#                    /tmp/cifar10/cifar-10-batches-bin when present)
#   --out DIR        output folder (default results/article-<UTC date and time>)
#   --device auto|cpu|cuda (default auto)
#   --model FILE     the .net to compile (default models/resnet18.net)
#   --replicas N     replicas of runs 2 and 3 (default 16, as the article)
#   --warmup K       warmup epochs of run 3 (default 5, as the article)
#   --runs LIST      which runs, comma-separated (default 1,2,3)
#   --lars SPEC      run 4's optimizer (default 'lars(momentum=0.9, wd=0.0001, eta=0.001)')
#   --seed S         dprun's --seed for every run (default 0)
#   --seeds LIST     the seed study: every run of --runs once per seed of LIST
#                    (comma-separated), as run{K}-s{S}.*; the table then gives
#                    each run's mean and spread over the seeds
#   --resume         continue in --out: every run keeps a checkpoint (RUN.ckpt, written at
#                    each epoch end); a finished run is kept, a stopped one resumes
#                    from its checkpoint, appending to its log and metrics
#   --report-only    train nothing: redo the table and plot from the logs and
#                    metrics already in --out (e.g. after a run was stopped)
# It also writes cost.txt (`dpc --cost`), from which the table models each
# run's time on one H200.
# Exit status: 0 when every run asked for finished, 1 otherwise (the table then
# says which run failed and why).
set -u
# The whole script is one compound command, read before any of it runs: a
# run takes hours, and bash reads a script as it goes, so an edit to this
# file meanwhile would otherwise run as whatever lies at the old offsets.
{
cd "$(dirname "$0")/.."
bin=${DPC_BIN:-bin}
py=/usr/bin/python3

die() { echo "article: error: $*" >&2; exit 1; }
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }
positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: '$2' is not a positive integer"; }
machine() {
    local cpu isa
    cpu=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')
    isa=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_tile' | tr '\n' ' ')
    echo "${cpu:-unknown CPU}, $(nproc) cores, ${isa:-no AVX2}; load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
}

epochs= steps= data=${DPC_DATA:-} out= device=auto model=models/resnet18.net replicas=16 warmup=5
report_only=0 resume=0 runs=1,2,3 lars='lars(momentum=0.9, wd=0.0001, eta=0.001)' seed= seeds=
while [ $# -gt 0 ]; do
    case $1 in
    --epochs) need_value "$@"; positive "$1" "$2"; epochs=$2; shift 2 ;;
    --steps) need_value "$@"; positive "$1" "$2"; steps=$2; shift 2 ;;
    --data) need_value "$@"; data=$2; shift 2 ;;
    --out) need_value "$@"; out=$2; shift 2 ;;
    --device) need_value "$@"; device=$2; shift 2 ;;
    --model) need_value "$@"; model=$2; shift 2 ;;
    --replicas) need_value "$@"; positive "$1" "$2"; replicas=$2; shift 2 ;;
    --warmup) need_value "$@"; [[ $2 =~ ^[0-9]+$ ]] || die "--warmup: '$2' is not a non-negative integer"
        warmup=$2; shift 2 ;;
    --runs) need_value "$@"; [[ $2 =~ ^[1-4](,[1-4])*$ ]] || die "--runs: '$2' is not a list of runs 1-4 (e.g. 1,2,3,4)"
        runs=$2; shift 2 ;;
    --lars) need_value "$@"; lars=$2; shift 2 ;;
    --seed) need_value "$@"; [[ $2 =~ ^[0-9]+$ ]] || die "--seed: '$2' is not a non-negative integer"
        seed=$2; shift 2 ;;
    --seeds) need_value "$@"; [[ $2 =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--seeds: '$2' is not a list of seeds (e.g. 0,1,2)"
        seeds=$2; shift 2 ;;
    --resume) resume=1; shift ;;
    --report-only) report_only=1; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see scripts/article.sh --help)" ;;
    esac
done

[ $resume = 0 ] || [ -n "$out" ] || die "--resume needs --out DIR, the folder of the runs to continue"
[ -z "$seed" ] || [ -z "$seeds" ] || die "give --seed S (one seed) or --seeds LIST (the seed study), not both"
if [ $report_only = 1 ]; then
    [ -n "$out" ] && [ -d "$out" ] || die "--report-only needs --out DIR, the folder of an earlier run"
    [ -n "$data" ] || data=/tmp/cifar10/cifar-10-batches-bin
elif [ -z "$data" ]; then
    if [ -f /tmp/cifar10/cifar-10-batches-bin/data_batch_1.bin ]; then
        data=/tmp/cifar10/cifar-10-batches-bin
    else
        die "no CIFAR-10: set DPC_DATA or pass --data DIR (the binary version, cifar-10-binary.tar.gz, \
from the dataset authors' page, unpacked: DIR holds data_batch_1.bin ... test_batch.bin; see README.md), \
or --data synthetic for a smoke run"
    fi
fi
[ $report_only = 1 ] || [ "$data" = synthetic ] || [ -d "$data" ] || die "--data: '$data' is not a folder"
[ -f "$model" ] || die "--model: '$model' not found"
[ -x "$bin/dprun" ] || die "$bin/dprun not found: run make first"
out=${out:-results/article-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out" || die "cannot create $out"

plan=$out/model.plan
[ $report_only = 1 ] || "$bin/dpc" "$model" -o "$plan" >"$out/dpc.log" 2>&1 || { cat "$out/dpc.log" >&2; die "dpc failed on $model"; }
# The modelled GPU step, for the table's H200 column (run 4's optimizer costs about the same).
if [ $report_only = 0 ] || [ ! -s "$out/cost.txt" ]; then
    "$bin/dpc" "$model" --cost >"$out/cost.txt" 2>/dev/null || rm -f "$out/cost.txt"
fi
if [ $report_only = 0 ] && [[ ,$runs, = *,4,* ]]; then
    grep -q '^ *optimizer ' "$model" || die "--runs 4: $model has no 'optimizer' line to replace"
    sed "s|^\( *\)optimizer .*|\1optimizer $lars|" "$model" >"$out/model_lars.net"
    "$bin/dpc" "$out/model_lars.net" -o "$out/model_lars.plan" >>"$out/dpc.log" 2>&1 ||
        { cat "$out/dpc.log" >&2; die "dpc failed on $out/model_lars.net (--lars '$lars')"; }
fi

# No progress lines: the log keeps the article's format (an EPOCH line per epoch says as much).
common=(--data "$data" --device "$device" --eval-every 1 --final-eval both --progress-every 0)
[ -n "$seed" ] && common+=(--seed "$seed")
[ -n "$epochs" ] && common+=(--epochs "$epochs")
[ -n "$steps" ] && common+=(--steps "$steps")
run_args=(
    "--gpus 1"
    "--gpus $replicas --lr-scaling none --warmup-epochs 0"
    "--gpus $replicas --lr-scaling linear --warmup-epochs $warmup"
    "--gpus $replicas --lr-scaling linear --warmup-epochs $warmup"
)
names=("run1" "run2" "run3" "run4")
plans=("$plan" "$plan" "$plan" "$out/model_lars.plan")
# Every (run, seed) to train: runK, or runK-sS in the seed study (seed outermost, so an
# interrupted study has whole seeds).
jobs=()
for s in ${seeds//,/ }; do
    for i in 0 1 2 3; do [[ ,$runs, = *,$((i + 1)),* ]] && jobs+=("$i ${names[$i]}-s$s $s"); done
done
if [ -z "$seeds" ]; then
    for i in 0 1 2 3; do [[ ,$runs, = *,$((i + 1)),* ]] && jobs+=("$i ${names[$i]} ${seed:-0}"); done
fi
status=0
for job in "${jobs[@]}"; do
    [ $report_only = 1 ] && break
    read -r i n job_seed <<<"$job"
    # shellcheck disable=SC2206 # the run's options split into words on purpose
    args=(${run_args[$i]})
    [ -n "$seeds" ] && args+=(--seed "$job_seed")
    ckpt=() resuming=0
    if [ $resume = 1 ]; then
        if grep -q '^Training time' "$out/$n.log" 2>/dev/null; then
            echo "article: $n: finished already ($out/$n.log)"
            continue
        fi
        ckpt=(--checkpoint "$out/$n.ckpt")
        # dprun appends to the metrics; the log is appended to here
        [ -e "$out/$n.ckpt" ] && ckpt+=(--resume) resuming=1
    fi
    if [ $resuming = 0 ]; then
        : >"$out/$n.log"
        rm -f "$out/$n.time" "$out/$n.machine"
    fi
    echo "article: $n: $bin/dprun ${plans[$i]} ${args[*]} ${common[*]} ${ckpt[*]} (log: $out/$n.log)"
    # The whole planned schedule, for the table (--epochs would cut it short).
    "$bin/dprun" "${plans[$i]}" "${args[@]}" --schedule >"$out/$n.schedule" 2>/dev/null
    # Each part of a run (one, or more when resumed) adds a line `START END EXIT` to RUN.time
    # (the wall time, accuracy passes included, that the table sums) and one to RUN.machine:
    # where it ran and how busy the machine was as it started.
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ): $(machine)" >>"$out/$n.machine"
    t0=$(date +%s)
    # `START - -` until the part ends: one stopped with its machine keeps it (the table
    # then estimates the part's wall time from its epochs)
    echo "$t0 - -" >>"$out/$n.time"
    "$bin/dprun" "${plans[$i]}" "${args[@]}" "${common[@]}" "${ckpt[@]}" --metrics "$out/$n.jsonl" \
        >>"$out/$n.log" 2>&1
    rc=$?
    sed -i "\$s/^$t0 - -\$/$t0 $(date +%s) $rc/" "$out/$n.time"
    if [ $rc = 0 ]; then
        tail -n 1 "$out/$n.log" | sed "s/^/article: $n: /"
    else
        echo "article: $n failed: $(grep -m1 'error:' "$out/$n.log")" >&2
        status=1
    fi
done

# Every run that wrote at least one epoch is plotted.
curves=()
labels=("" ", lr unscaled" ", linear scaling + ${warmup}-epoch warmup" ", LARS, linear scaling + ${warmup}-epoch warmup")
for i in 0 1 2 3; do
    for f in "$out/${names[$i]}.jsonl" "$out/${names[$i]}"-s*.jsonl; do # one run, or each seed's
        [ -s "$f" ] || continue
        n=$(basename "$f" .jsonl)
        batch=$(grep -m1 '^EPOCH' "$out/$n.log" | grep -o 'batch *[0-9]*' | tr -s ' ' | cut -d' ' -f2)
        curves+=("$n: batch $batch${labels[$i]}=$f")
    done
done
note=() plan_epochs="the plan's"
if [ -n "$steps" ] || { [ -n "$epochs" ] && [ "$epochs" -lt 45 ]; }; then
    note=(--note "shortened: ${epochs:-$plan_epochs} epoch(s) per run${steps:+, at most $steps steps}, of the article's 45")
fi
if [ ${#curves[@]} -gt 0 ]; then
    scripts/plot -o "$out/article.svg" --title "$(basename "$model" .net): the article's runs" \
        "${note[@]}" "${curves[@]}" || status=1
fi
$py scripts/article_table.py --out "$out/article.md" --device "$device" --data "$data" \
    --epochs "${epochs:-}" --steps "${steps:-}" --model "$model" "$out" || status=1

files="run{$runs}"
[ -n "$seeds" ] && files+="-s{$seeds}"
echo "article: table $out/article.md, plot $out/article.svg, logs and metrics $out/$files.{log,jsonl}"
[ -f "$out/article.md" ] && cat "$out/article.md"
exit $status
}
