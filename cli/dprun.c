/* cli/dprun.c — the runtime driver: load a plan, then print its summary,
 * print its lr schedule, or train it (runtime/train/train.c does the work);
 * `dprun predict` classifies images with trained weights
 * (runtime/train/predict.c). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/env.h"
#include "driver/args.h"
#include "driver/version.h"
#include "format/plan.h"
#include "runtime/comm/comm.h"
#include "runtime/device/device.h"
#include "runtime/data/data.h"
#include "runtime/cuda/cuda.h"
#include "runtime/train/train.h"
#include "runtime/log.h"

/* Everything the command line sets. */
typedef struct {
    const char *path;
    int info, schedule, per_step, no_ftz;
    const char *sweep_spec, *sweep_dir, *sweep_out;
    rt_train_options o;
} dprun_args;

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    arg_vfail("dprun", fmt, ap);
    va_end(ap);
    return 1;
}

/* --device: one of check's values; cuda checked here, before anything else
 * runs, so scripts can probe for a CUDA build cheaply (`dprun P --device
 * cuda --schedule`). */
static int store_device(const arg_parser *p, const arg_spec *s, const char *val, void *dst) {
    char list[128];
    if (arg_choice(s->check, val, list, sizeof list) < 0)
        return arg_fail(p->prog, "%s: '%s' is not one of %s", s->name, val, list);
    if (!strcmp(val, "cuda") && !rt_cuda_compiled())
        return arg_fail(p->prog, "--device cuda: this build has no CUDA backend (built with "
                                 "CUDA=0)");
    *(const char **)((char *)dst + s->at) = val;
    return 0;
}

#define AT(field)  offsetof(dprun_args, field)
#define OPT(field) AT(o.field)

/* --allow-missing PATTERN, once per pattern. */
static int store_allow_missing(const arg_parser *p, const arg_spec *s, const char *val, void *dst) {
    rt_train_options *o = &((dprun_args *)dst)->o;
    if (!val || !*val) return arg_fail(p->prog, "%s needs a pattern", s->name);
    if (o->n_allow_missing == RT_MAX_ALLOW_MISSING)
        return arg_fail(p->prog, "%s: at most %d patterns", s->name, RT_MAX_ALLOW_MISSING);
    o->allow_missing[o->n_allow_missing++] = val;
    return 0;
}

static const arg_spec args[] = {
    {"--info", "--info", ARG_FLAG, AT(info), 0, 0, NULL,
     "print the plan summary and exit; with --device cuda (PLAN optional) also each CUDA "
     "library (path, how it was found, version) and device; exit 1 if training on cuda cannot "
     "start",
     ARG_EQ_OR_NEXT, NULL},
    {"--schedule", "--schedule", ARG_FLAG, AT(schedule), 0, 0, NULL,
     "print `epoch E lr X` for every epoch (after every override here) and exit", ARG_EQ_OR_NEXT,
     NULL},
    {"--per-step", "--per-step", ARG_FLAG, AT(per_step), 0, 0, NULL,
     "with --schedule: `epoch E step I lr X` for every step", ARG_EQ_OR_NEXT, NULL},
    {"--gpus", "--gpus N", ARG_INT, OPT(gpus), 1, 4096, NULL,
     "data-parallel replicas (default 1; sets the global batch);\n"
     "under `mpirun -np P`, N per process: P x N in all",
     ARG_EQ_OR_NEXT, NULL},
    {"--accumulate", "--accumulate K", ARG_INT, OPT(accumulate), 1, 4096, NULL,
     "K micro-batches per replica per optimizer step (default 1): global\n"
     "batch replicas x K x batch, exactly as K x the replicas would train",
     ARG_EQ_OR_NEXT, NULL},
    {"--shard-optimizer", "--shard-optimizer", ARG_FLAG, OPT(shard_optimizer), 0, 0, NULL,
     "ZeRO-1: each replica updates and holds the optimizer state of its\n"
     "share of the parameters (gradients reduce-scattered, parameters\n"
     "all-gathered); the same weights, bit for bit; needs 2+ replicas",
     ARG_EQ_OR_NEXT, NULL},
    {"--device", "--device auto|cpu|cuda", ARG_CALL, OPT(device), 0, 0, "auto|cpu|cuda",
     "where to run (auto: GPUs if any, else cpu)", ARG_EQ_OR_NEXT, store_device},
    {"--data", "--data DIR|synthetic", ARG_NONEMPTY, OPT(data), 0, 0,
     "--data needs a folder or 'synthetic'",
     "the data section's source: a CIFAR-10 binary folder (default:\n"
     "$DPC_DATA, else synthetic), an image folder (train/CLASS/*,\n"
     "val/CLASS/*) or a folder of .npy arrays",
     ARG_EQ_OR_NEXT, NULL},
    {"--epochs", "--epochs N", ARG_INT, OPT(epochs), 1, 100000, NULL, "stop after N epochs",
     ARG_EQ_OR_NEXT, NULL},
    {"--steps", "--steps N", ARG_LONG, OPT(steps), 0, LONG_MAX, NULL,
     "stop after N optimizer steps (0: only evaluate)", ARG_EQ_OR_NEXT, NULL},
    {"--schedule-steps", "--schedule-steps N", ARG_LONG, OPT(schedule_steps), 1, LONG_MAX, NULL,
     "a cosine or poly lr schedule ends at step N (its end lr from there on),\n"
     "not at the run's last step: with --steps N a short run decays fully",
     ARG_EQ_OR_NEXT, NULL},
    {"--eval-every", "--eval-every K", ARG_INT, OPT(eval_every), 1, 100000, NULL,
     "test accuracy every K epochs", ARG_EQ_OR_NEXT, NULL},
    {"--final-eval", "--final-eval " RT_FINAL_EVAL_CHOICES, ARG_CHOICE, OPT(final_eval), 0, 0,
     RT_FINAL_EVAL_CHOICES,
     "the accuracies the run ends with (default: both after the whole\n"
     "schedule, as the article; none when --steps cuts it short)",
     ARG_EQ_OR_NEXT, NULL},
    {"--eval-batches", "--eval-batches N", ARG_LONG, OPT(eval_batches), 1, LONG_MAX, NULL,
     "every accuracy pass reads only the first N eval batches", ARG_EQ_OR_NEXT, NULL},
    {"--eval-windows", "--eval-windows K", ARG_LONG, OPT(eval_windows), 1, LONG_MAX, NULL,
     "a language model's val loss reads the first K windows of the val file\n"
     "(default all, at most " RT_TOKENS_EVAL_WINDOWS_STR ")",
     ARG_EQ_OR_NEXT, NULL},
    {"--lr-scaling", "--lr-scaling none|linear|sqrt", ARG_CHOICE, OPT(lr_scaling), 0, 0,
     "none|linear|sqrt", /* IR_LR_SCALING_* */
     "override the schedule's lr scaling (by global / reference batch, or its square root)",
     ARG_EQ_OR_NEXT, NULL},
    {"--warmup-epochs", "--warmup-epochs K", ARG_INT, OPT(warmup_epochs), 0, 100000, NULL,
     "override the schedule's warmup", ARG_EQ_OR_NEXT, NULL},
    {"--lr", "--lr X", ARG_LR, OPT(lr), 0, 0, NULL,
     "base lr: the schedule's dict scaled so epoch 0 has X (before scaling);\n"
     "a cosine/poly curve's base (its final stays)",
     ARG_EQ_OR_NEXT, NULL},
    {"--warmup-per-iteration", "--warmup-per-iteration", ARG_FLAG, OPT(warmup_per_iteration), 0, 0,
     NULL, "ramp the warmup every step (Goyal et al.), not every epoch", ARG_EQ_OR_NEXT, NULL},
    {"--momentum-correction", "--momentum-correction", ARG_FLAG, OPT(momentum_correction), 0, 0,
     NULL, "rescale the momentum by lr_new/lr_old when the lr changes (Goyal et al.)",
     ARG_EQ_OR_NEXT, NULL},
    {"--seed", "--seed S", ARG_SEED, OPT(seed), 0, 0, NULL,
     "all randomness: init, shuffle, augmentation (default 0)", ARG_EQ_OR_NEXT, NULL},
    {"--no-augment", "--no-augment", ARG_FLAG, OPT(no_augment), 0, 0, NULL,
     "no padding, cropping or mirroring", ARG_EQ_OR_NEXT, NULL},
    {"--no-shuffle", "--no-shuffle", ARG_FLAG, OPT(no_shuffle), 0, 0, NULL,
     "keep the dataset's order", ARG_EQ_OR_NEXT, NULL},
    {"--no-ftz", "--no-ftz", ARG_FLAG, AT(no_ftz), 0, 0, NULL,
     "keep denormals on the cpu (default: flush-to-zero and denormals-are-zero)", ARG_EQ_OR_NEXT,
     NULL},
    {"--data-workers", "--data-workers N", ARG_INT, OPT(data_workers), 0, RT_PIPELINE_MAX_WORKERS,
     NULL, "threads preparing batches ahead (default 2; 0: none)", ARG_EQ_OR_NEXT, NULL},
    {"--load-params", "--load-params F", ARG_STRING, OPT(load_params), 0, 0, NULL,
     "start from a safetensors file", ARG_EQ_OR_NEXT, NULL},
    {"--name-map", "--name-map MAP", ARG_NONEMPTY, OPT(name_map), 0, 0,
     "--name-map needs a file name",
     "with --load-params: `DPC_NAME FILE_NAME` lines (# comments), the\n"
     "file's name for each parameter named (scripts/convert_weights.py)",
     ARG_EQ_OR_NEXT, NULL},
    {"--allow-missing", "--allow-missing PATTERN", ARG_CALL, 0, 0, 0, NULL,
     "with --load-params: parameters whose dpc name matches the glob\n"
     "(e.g. 'dense0.*', repeatable) may be absent from the file and keep\n"
     "their initial values",
     ARG_EQ_OR_NEXT, store_allow_missing},
    {"--allow-unused", "--allow-unused", ARG_FLAG, OPT(allow_unused), 0, 0, NULL,
     "with --load-params: skip the file's tensors no parameter takes\n"
     "(else an error); the report on stderr names each",
     ARG_EQ_OR_NEXT, NULL},
    {"--save-params", "--save-params F", ARG_STRING, OPT(save_params), 0, 0, NULL,
     "write parameters and BatchNorm statistics at the end", ARG_EQ_OR_NEXT, NULL},
    {"--metrics", "--metrics FILE", ARG_STRING, OPT(metrics), 0, 0, NULL,
     "one JSON object per epoch (scripts/plot draws them)", ARG_EQ_OR_NEXT, NULL},
    {"--log-every", "--log-every N", ARG_LONG, OPT(log_every), 1, LONG_MAX, NULL,
     "also a --metrics row every N steps: epoch, step, loss, lr, img_per_s", ARG_EQ_OR_NEXT, NULL},
    {"--progress-every", "--progress-every S", ARG_INT, OPT(progress_every), 0, 86400, NULL,
     "when stderr is not a terminal, a progress line every S seconds\n"
     "(default 60; 0: none)",
     ARG_EQ_OR_NEXT, NULL},
    {"--checkpoint", "--checkpoint DIR", ARG_NONEMPTY, OPT(checkpoint), 0, 0,
     "--checkpoint needs a directory",
     "write a checkpoint to DIR at every epoch end (and on SIGINT/SIGTERM)", ARG_EQ_OR_NEXT, NULL},
    {"--checkpoint-every", "--checkpoint-every N", ARG_LONG, OPT(checkpoint_every), 1, LONG_MAX,
     NULL, "also every N steps", ARG_EQ_OR_NEXT, NULL},
    {"--resume", "--resume", ARG_FLAG, OPT(resume), 0, 0, NULL,
     "continue from DIR's checkpoint (same flags otherwise)", ARG_EQ_OR_NEXT, NULL},
    {"--on-nan", "--on-nan stop|skip", ARG_CHOICE, OPT(on_nan_skip), 0, 0, "stop|skip",
     "a non-finite loss or gradient stops the run (default) or skips the step", ARG_EQ_OR_NEXT,
     NULL},
    {"--tune", "--tune", ARG_FLAG, OPT(tune), 0, 0, NULL,
     "measure every convolution of a `dpc --conv auto` plan again (library\n"
     "against im2col), print each choice and keep it for this machine",
     ARG_NEXT, NULL},
    {"--nondeterministic", "--nondeterministic", ARG_FLAG, OPT(nondeterministic), 0, 0, NULL,
     "let cuDNN run its best algorithm even where it sums in a varying\n"
     "order (atomics): faster on some layers, but the same plan and seed\n"
     "no longer give the same bits (no effect on the cpu backend)",
     ARG_NEXT, NULL},
    {"--benchmark", "--benchmark N", ARG_LONG, OPT(benchmark), 1, LONG_MAX, NULL,
     "time N steps after a warm-up; last line `throughput: X img/s`", ARG_EQ_OR_NEXT, NULL},
    {"--sweep", "--sweep SPEC|FILE", ARG_STRING, AT(sweep_spec), 0, 0, NULL,
     "train every combination of 'lr=0.05,0.1 warmup=0,5' (or a file with\n"
     "one key=values per line), print one table ranked by test accuracy;\n"
     "keys: lr warmup epochs gpus seed lr-scaling momentum-correction\n"
     "warmup-per-iteration",
     ARG_EQ_OR_NEXT, NULL},
    {"--sweep-dir", "--sweep-dir DIR", ARG_STRING, AT(sweep_dir), 0, 0, NULL,
     "the sweep's logs and metrics, run-N.{log,jsonl} (default: NAME-sweep\n"
     "beside NAME.plan)",
     ARG_EQ_OR_NEXT, NULL},
    {"--sweep-out", "--sweep-out FILE", ARG_STRING, AT(sweep_out), 0, 0, NULL,
     "also write the sweep's table to FILE", ARG_EQ_OR_NEXT, NULL},
    {"--help", "-h, --help", ARG_HELP, 0, 0, 0, NULL, "this text", ARG_EQ_OR_NEXT, NULL},
    {"--version", "--version", ARG_VERSION, 0, 0, 0, NULL,
     "the release, the plan formats and what this build has", ARG_EQ_OR_NEXT, NULL},
};

static const arg_parser parser = {
    .prog = "dprun",
    .usage = "usage: dprun PLAN [options]\n"
             "       dprun predict PLAN --load-params F [--top K] [--json] IMAGE...|DIR  (see "
             "dprun predict --help)\n",
    .specs = args,
    .nspecs = sizeof args / sizeof *args,
    .positional = AT(path),
    .unknown = "unknown option: %s (see dprun --help)",
    .extra = "more than one plan file: %s",
    .width = 24,
    .wide_gap = 1,
};

static int run_main(int argc, char **argv, int rank, int ranks);

/* ---- dprun predict */

#define PREDICT_MAX_INPUTS 4096

typedef struct {
    const char *path;
    rt_predict_options po;
    const char *inputs[PREDICT_MAX_INPUTS];
} predict_args;

static int predict_input(void *dst, const char *arg) {
    predict_args *a = dst;
    if (a->po.ninputs == PREDICT_MAX_INPUTS)
        return bad("predict: more than %d images or folders (name a folder instead)",
                   PREDICT_MAX_INPUTS);
    a->inputs[a->po.ninputs++] = arg;
    return 0;
}

#define PAT(field) offsetof(predict_args, po.field)

static const arg_spec predict_specs[] = {
    {"--load-params", "--load-params F", ARG_STRING, PAT(load_params), 0, 0, NULL,
     "the trained weights (a --save-params file); required", ARG_EQ_OR_NEXT, NULL},
    {"--top", "--top K", ARG_INT, PAT(top), 1, RT_PREDICT_MAX_TOP, NULL,
     "the K most likely classes per image (default 5, at most the model's)", ARG_EQ_OR_NEXT, NULL},
    {"--json", "--json", ARG_FLAG, PAT(json), 0, 0, NULL,
     "one JSON object per image: {\"file\", \"top\": [{\"class\", \"name\", \"prob\"}]}",
     ARG_EQ_OR_NEXT, NULL},
    {"--classes", "--classes FILE|DIR", ARG_NONEMPTY, PAT(classes), 0, 0,
     "--classes needs a file or a folder",
     "class names: a file of one per line, or the image folder trained on\n"
     "(its train/ subfolders); default: class indices",
     ARG_EQ_OR_NEXT, NULL},
    {"--device", "--device auto|cpu|cuda", ARG_CALL, PAT(device), 0, 0, "auto|cpu|cuda",
     "where to run (auto: a GPU if any, else cpu)", ARG_EQ_OR_NEXT, store_device},
    {"--help", "-h, --help", ARG_HELP, 0, 0, 0, NULL, "this text", ARG_EQ_OR_NEXT, NULL},
};

static const arg_parser predict_parser = {
    .prog = "dprun",
    .usage = "usage: dprun predict PLAN --load-params F [options] IMAGE...|DIR\n"
             "Prints each image's most likely classes and their probabilities (the eval\n"
             "program; each image's shorter side resized to the data section's resize, or\n"
             "the input's size, then centre-cropped). A DIR is every file under it.\n",
    .specs = predict_specs,
    .nspecs = sizeof predict_specs / sizeof *predict_specs,
    .positional = offsetof(predict_args, path),
    .unknown = "unknown option: %s (see dprun predict --help)",
    .extra = "",
    .more = predict_input,
    .width = 24,
    .wide_gap = 1,
};

static int predict_main(int argc, char **argv, int rank) {
    predict_args *a = calloc(1, sizeof *a);
    if (!a) return bad("out of memory");
    a->po.top = 5;
    a->po.inputs = a->inputs;
    int rc = arg_parse(&predict_parser, argc, argv, a);
    if (rc == 2) arg_usage(&predict_parser, stdout);
    char err[2048];
    if (rc) {
        rc = rc == 2 ? 0 : 1;
    } else if (!a->path) {
        rc = bad("predict: no plan file (usage: dprun predict PLAN --load-params F IMAGE...)");
    } else if (!a->po.ninputs) {
        rc = bad("predict: no images (name image files or a folder after the plan)");
    } else if (rank != 0) {
        rc = 0; /* one answer per job */
    } else if (rt_env_check(err, sizeof err)) {
        rc = bad("%s", err);
    } else {
        dpc_plan *plan = plan_read(a->path, err, sizeof err);
        if (!plan) {
            fprintf(stderr, "%s\n", err);
            rc = 1;
        } else {
            a->po.plan_path = a->path;
            rc = rt_predict(plan, &a->po, err, sizeof err);
            if (rc && *err) bad("%s", err);
            plan_free(plan);
        }
    }
    free(a);
    return rc;
}

/* Appends s to buf quoted for sh: bare when only safe characters, else in
 * single quotes with each ' written '\''. 0, or -1 when it does not fit. */
static int append_quoted(char *buf, size_t len, const char *s) {
    size_t n = strlen(buf);
    int plain = *s != 0;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *p))
            plain = 0;
    if (plain) {
        if (n + strlen(s) + 1 >= len) return -1;
        strcpy(buf + n, s);
        return 0;
    }
    if (n + 1 >= len) return -1;
    buf[n++] = '\'';
    for (const char *p = s; *p; p++) {
        const char *piece = *p == '\'' ? "'\\''" : NULL;
        size_t k = piece ? 4 : 1;
        if (n + k + 2 >= len) return -1;
        if (piece)
            memcpy(buf + n, piece, k);
        else
            buf[n] = *p;
        n += k;
    }
    buf[n++] = '\'';
    buf[n] = 0;
    return 0;
}

/* This command line with --resume added (once), shell-quoted so it can be
 * pasted, for the message of a run stopped by a signal; NULL when it does
 * not fit. The program is named as invoked (argv[0]): a bare "dprun" would
 * not run where bin/ is not on PATH. */
static const char *resume_command_line(int argc, char **argv, char *buf, size_t len) {
    int has_resume = 0;
    buf[0] = 0;
    if (append_quoted(buf, len, argc > 0 && argv[0] && *argv[0] ? argv[0] : "dprun")) return NULL;
    for (int i = 1; i < argc; i++) {
        has_resume |= !strcmp(argv[i], "--resume");
        if (strlen(buf) + 2 >= len) return NULL;
        strcat(buf, " ");
        if (append_quoted(buf, len, argv[i])) return NULL;
    }
    if (!has_resume) {
        if (strlen(buf) + 10 >= len) return NULL;
        strcat(buf, " --resume");
    }
    return buf;
}

/* Under mpirun every process joins MPI first (it may take its own
 * arguments out of argv); an error on one rank ends the whole job, since
 * the others would wait for it in their next collective.
 *
 * Signals (runtime/train/stop.c): SIGPIPE is ignored, so a closed stdout
 * (`dprun ... | head -1`) is a failed write, never a kill mid-step: the
 * training stops in order, and any mode then exits 141 without a message.
 * A run stopped by SIGINT, SIGTERM or SIGHUP ends by that signal once
 * everything is written and said (status 128 + signal as before), so a
 * shell script running dprun stops too, as it does for a killed child. */
int main(int argc, char **argv) {
    int rank = 0, ranks = 1;
    char err[512];
    signal(SIGPIPE, SIG_IGN);
    rt_log_set_prefix("dprun"); /* every line the runtime prints starts "dprun: " */
    rt_blas_core_reexec(argv);
    if (rt_mpi_init(&argc, &argv, &rank, &ranks, err, sizeof err)) {
        fprintf(stderr, "dprun: error: %s\n", err);
        rt_mpi_abort(1);
        return 1;
    }
    int rc = run_main(argc, argv, rank, ranks);
    errno = 0;
    if ((fflush(stdout) != 0 || ferror(stdout)) && !rc) {
        if (errno == EPIPE) {
            rc = 128 + SIGPIPE; /* the reader went away: nothing to say to it */
        } else {
            fprintf(stderr, "dprun: error: stdout: %s\n", strerror(errno ? errno : EIO));
            rc = 1;
        }
    }
    if (rc && ranks > 1) rt_mpi_abort(rc);
    rt_mpi_finalize();
    if (ranks == 1 && (rc == 128 + SIGINT || rc == 128 + SIGTERM || rc == 128 + SIGHUP)) {
        fflush(stderr);
        signal(rc - 128, SIG_DFL);
        raise(rc - 128);
    }
    return rc;
}

/* `--device cuda --info`: the CUDA libraries and devices (a plan optional). */
static int cuda_info(const dprun_args *a) {
    return a->info && a->o.device && !strcmp(a->o.device, "cuda");
}

/* The combinations of options and the sweep spec read: 0, or 1 after an
 * error. */
static int check_args(dprun_args *a, rt_sweep *sweep) {
    if (!a->path && !cuda_info(a))
        return bad("no plan file (usage: dprun PLAN [options], see --help)");
    const rt_train_options *o = &a->o;
    if (a->per_step && !a->schedule) return bad("--per-step needs --schedule");
    if (!o->load_params && (o->name_map || o->n_allow_missing || o->allow_unused))
        return bad("%s needs --load-params F (a checkpoint's --resume is always complete)",
                   o->name_map          ? "--name-map"
                   : o->n_allow_missing ? "--allow-missing"
                                        : "--allow-unused");
    if ((a->sweep_dir || a->sweep_out) && !a->sweep_spec)
        return bad("--sweep-dir and --sweep-out need --sweep");
    /* Each sweep run writes its own metrics; one parameter file or benchmark would be ambiguous. */
    if (a->sweep_spec && (o->metrics || o->save_params || o->benchmark || o->checkpoint))
        return bad(
            "--sweep writes each run's metrics to --sweep-dir; it takes no --metrics, --save-params, "
            "--benchmark or --checkpoint");
    if (o->log_every && !o->metrics && !a->sweep_spec)
        return bad("--log-every writes its rows into the --metrics file: give --metrics FILE");
    if (a->sweep_spec &&
        (o->final_eval == RT_FINAL_EVAL_TRAIN || o->final_eval == RT_FINAL_EVAL_NONE))
        return bad("--sweep ranks its runs by test accuracy: --final-eval %s measures none",
                   o->final_eval == RT_FINAL_EVAL_TRAIN ? "train" : "none");
    if (!a->sweep_spec) return 0;
    char err[512];
    /* A spec has key=values; anything else names a sweep file. */
    if (strchr(a->sweep_spec, '=') ? rt_sweep_parse(sweep, a->sweep_spec, err, sizeof err)
                                   : rt_sweep_read(sweep, a->sweep_spec, err, sizeof err))
        return bad("--sweep: %s", err);
    return 0; /* no --sweep-dir: rt_sweep_run's PLAN-sweep beside the plan */
}

/* --schedule: `epoch E lr X` lines for the job's global batch (every step's
 * with --per-step); the steps per epoch come from the data when a curve or
 * --per-step needs them. */
static int print_schedule(const dpc_plan *plan, const rt_train_options *o, int per_step) {
    ir_train t;
    char err[512];
    if (rt_train_schedule(plan, o, &t, err, sizeof err)) return bad("%s", err);
    int global = rt_train_global_batch(o, t.batch, err, sizeof err); /* checked above */
    if (global > t.batch) /* a micro-batch trains as a replica */
        fprintf(stderr, "dprun: note: the schedule of global batch %d (%d replicas x %d)\n", global,
                global / t.batch, t.batch);
    rt_schedule s = rt_schedule_make(&t, global);
    s.per_iteration = o->warmup_per_iteration;
    s.warmup_asked = o->warmup_epochs >= 0;
    s.span_steps = o->schedule_steps;
    s.stop_steps = o->steps;
    if (per_step || t.lr_kind != IR_LR_DICT) {
        s.steps_per_epoch = rt_train_steps_per_epoch(plan, o, global, err, sizeof err);
        if (s.steps_per_epoch < 0) return bad("%s", err);
    }
    rt_schedule_say_notes(&s, NULL, 0);
    rt_schedule_print(&s, per_step, stdout);
    return 0;
}

static int run_main(int argc, char **argv, int rank, int ranks) {
    if (argc > 1 && !strcmp(argv[1], "predict")) return predict_main(argc - 1, argv + 1, rank);
    dprun_args a = {.o = rt_train_defaults()};
    a.o.rank = rank, a.o.ranks = ranks;
    int rc = arg_parse(&parser, argc, argv, &a);
    if (rc == 2) arg_usage(&parser, stdout);
    if (rc == 3) dpc_print_version(stdout, "dprun");
    if (rc) return rc == 2 || rc == 3 ? 0 : 1;
    char err[2048];
    if (rt_env_check(err, sizeof err)) return bad("%s", err);
    rt_sweep sweep;
    char resume_command[4096];
    if (check_args(&a, &sweep)) return 1;
    a.o.resume_command = resume_command_line(argc, argv, resume_command, sizeof resume_command);
    if (!a.o.resume_command)
        a.o.resume_command = "dprun PLAN --checkpoint DIR --resume (same flags)";
    a.o.plan_path = a.path;
    if (cuda_info(&a) && !a.path) return rank == 0 && rt_cuda_info(stdout) ? 1 : 0;

    dpc_plan *plan = plan_read(a.path, err, sizeof err);
    if (!plan) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if ((a.info || a.schedule) && rank != 0) {
        /* one answer per job */
    } else if (a.info) {
        plan_info(plan, stdout);
        if (cuda_info(&a) && rt_cuda_info(stdout)) rc = 1;
    } else if (a.schedule) {
        rc = print_schedule(plan, &a.o, a.per_step);
    } else {
        if (!a.no_ftz) rt_cpu_flush_denormals(1);
        rc = a.sweep_spec
                 ? rt_sweep_run(plan, &sweep, &a.o, a.sweep_dir, a.sweep_out, err, sizeof err)
                 : rt_train(plan, &a.o, err, sizeof err);
        if (rc && *err) bad("%s", err);
    }
    plan_free(plan);
    return rc;
}
