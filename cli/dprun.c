/* cli/dprun.c — the runtime driver: load a plan, then print its summary,
 * print its lr schedule, or train it (runtime/train/train.c does the work). */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/parse.h"
#include "ir/plan.h"
#include "runtime/comm/comm.h"
#include "runtime/data/data.h"
#include "runtime/cuda/cuda.h"
#include "runtime/train/train.h"

static void usage(FILE *f) {
    fputs("usage: dprun PLAN [options]\n"
          "  --info                   print the plan summary and exit\n"
          "  --schedule               print `epoch E lr X` for every epoch and exit\n"
          "  --gpus N                 data-parallel replicas (default 1; sets the global batch);\n"
          "                           under `mpirun -np P`, N per process: P x N in all\n"
          "  --device auto|cpu|cuda   where to run (auto: GPUs if any, else cpu)\n"
          "  --data DIR|synthetic     CIFAR-10 binary folder (default: $DPC_DATA, else synthetic)\n"
          "  --epochs N               stop after N epochs\n"
          "  --steps N                stop after N optimizer steps (0: only evaluate)\n"
          "  --eval-every K           test accuracy every K epochs\n"
          "  --lr-scaling none|linear override the schedule's lr scaling\n"
          "  --warmup-epochs K        override the schedule's warmup\n"
          "  --lr X                   base lr: the schedule's dict scaled so epoch 0 has X (before scaling)\n"
          "  --warmup-per-iteration   ramp the warmup every step (Goyal et al.), not every epoch\n"
          "  --momentum-correction    rescale the momentum by lr_new/lr_old when the lr changes (Goyal et al.)\n"
          "  --seed S                 all randomness: init, shuffle, augmentation (default 0)\n"
          "  --no-augment             no padding, cropping or mirroring\n"
          "  --no-shuffle             keep the dataset's order\n"
          "  --data-workers N         threads preparing batches ahead (default 2; 0: none)\n"
          "  --load-params F          start from a safetensors file\n"
          "  --save-params F          write parameters and BatchNorm statistics at the end\n"
          "  --metrics FILE           one JSON object per epoch (scripts/plot draws them)\n"
          "  --checkpoint DIR         write a checkpoint to DIR at every epoch end (and on SIGINT/SIGTERM)\n"
          "  --checkpoint-every N     also every N steps\n"
          "  --resume                 continue from DIR's checkpoint (same flags otherwise)\n"
          "  --on-nan stop|skip       a non-finite loss or gradient stops the run (default) or skips the step\n"
          "  --benchmark N            time N steps after a warm-up; last line `throughput: X img/s`\n"
          "  --sweep SPEC|FILE        train every combination of 'lr=0.05,0.1 warmup=0,5' (or a file with\n"
          "                           one key=values per line), print one table ranked by test accuracy;\n"
          "                           keys: lr warmup epochs gpus seed lr-scaling momentum-correction\n"
          "                           warmup-per-iteration\n"
          "  --sweep-dir DIR          the sweep's logs and metrics, run-N.{log,jsonl} (default PLAN-sweep)\n"
          "  --sweep-out FILE         also write the sweep's table to FILE\n"
          "  -h, --help               this text\n",
          f);
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dprun: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* A whole-string integer in [lo, hi]. */
static int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
    int64_t v;
    if (ir_parse_i64(s, &v) || v < lo || v > hi) {
        char range[64];
        snprintf(range, sizeof range, "an integer in %ld..%ld", lo, hi);
        fprintf(stderr, "dprun: error: %s: '%s' is not %s\n", opt, s, range);
        return -1;
    }
    *out = (long)v;
    return 0;
}

static int run_main(int argc, char **argv, int rank, int ranks);

/* Appends s to buf quoted for sh: bare when only safe characters, else in
 * single quotes with each ' written '\''. 0, or -1 when it does not fit. */
static int append_quoted(char *buf, size_t len, const char *s) {
    size_t n = strlen(buf);
    int plain = *s != 0;
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *p)) plain = 0;
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
        if (piece) memcpy(buf + n, piece, k);
        else buf[n] = *p;
        n += k;
    }
    buf[n++] = '\'';
    buf[n] = 0;
    return 0;
}

/* This command line with --resume added (once), shell-quoted so it can be
 * pasted, for the message of a run stopped by a signal; NULL when it does
 * not fit. */
static const char *resume_command_line(int argc, char **argv, char *buf, size_t len) {
    int has_resume = 0;
    snprintf(buf, len, "dprun");
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
 * the others would wait for it in their next collective. */
int main(int argc, char **argv) {
    int rank = 0, ranks = 1;
    char err[512];
    if (rt_mpi_init(&argc, &argv, &rank, &ranks, err, sizeof err)) {
        fprintf(stderr, "dprun: error: %s\n", err);
        rt_mpi_abort(1);
        return 1;
    }
    int rc = run_main(argc, argv, rank, ranks);
    fflush(stdout);
    if (rc && ranks > 1) rt_mpi_abort(rc);
    rt_mpi_finalize();
    return rc;
}

static int run_main(int argc, char **argv, int rank, int ranks) {
    const char *path = NULL;
    int info = 0, schedule = 0;
    const char *sweep_spec = NULL, *sweep_dir = NULL, *sweep_out = NULL;
    rt_train_options o = rt_train_defaults();
    o.rank = rank, o.ranks = ranks;
    o.log_prefix = "dprun: ";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* `--opt=value` and `--opt value` both work. */
        char opt[64];
        const char *val = NULL;
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof opt) {
            memcpy(opt, a, (size_t)(eq - a));
            opt[eq - a] = 0;
            val = eq + 1;
        } else {
            snprintf(opt, sizeof opt, "%s", a);
        }
#define VALUE()                                                                          \
    do {                                                                                 \
        if (!val) {                                                                      \
            if (i + 1 >= argc) return bad("%s needs a value", opt);                \
            val = argv[++i];                                                             \
        }                                                                                \
    } while (0)
#define FLAG()                                                                           \
    do {                                                                                 \
        if (val) return bad("%s takes no value", opt);                             \
    } while (0)
        long n;
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(opt, "--info")) {
            FLAG();
            info = 1;
        } else if (!strcmp(opt, "--schedule")) {
            FLAG();
            schedule = 1;
        } else if (!strcmp(opt, "--gpus")) {
            VALUE();
            if (parse_long(opt, val, 1, 4096, &n)) return 1;
            o.gpus = (int)n;
        } else if (!strcmp(opt, "--device")) {
            VALUE();
            if (strcmp(val, "auto") && strcmp(val, "cpu") && strcmp(val, "cuda"))
                return bad("--device: '%s' is not one of auto, cpu, cuda", val);
            /* Checked here, before anything else runs, so scripts can probe
             * for a CUDA build cheaply (`dprun P --device cuda --schedule`). */
            if (!strcmp(val, "cuda") && !rt_cuda_compiled())
                return bad("--device cuda: this build has no CUDA backend (built without the CUDA toolkit)");
            o.device = val;
        } else if (!strcmp(opt, "--data")) {
            VALUE();
            if (!*val) return bad("--data needs a folder or 'synthetic'");
            o.data = val;
        } else if (!strcmp(opt, "--epochs")) {
            VALUE();
            if (parse_long(opt, val, 1, 100000, &n)) return 1;
            o.epochs = (int)n;
        } else if (!strcmp(opt, "--steps")) {
            VALUE();
            if (parse_long(opt, val, 0, LONG_MAX, &n)) return 1;
            o.steps = n;
        } else if (!strcmp(opt, "--eval-every")) {
            VALUE();
            if (parse_long(opt, val, 1, 100000, &n)) return 1;
            o.eval_every = (int)n;
        } else if (!strcmp(opt, "--lr-scaling")) {
            VALUE();
            if (!strcmp(val, "none"))
                o.lr_scaling = IR_LR_SCALING_NONE;
            else if (!strcmp(val, "linear"))
                o.lr_scaling = IR_LR_SCALING_LINEAR;
            else
                return bad("--lr-scaling: '%s' is not one of none, linear", val);
        } else if (!strcmp(opt, "--warmup-epochs")) {
            VALUE();
            if (parse_long(opt, val, 0, 100000, &n)) return 1;
            o.warmup_epochs = (int)n;
        } else if (!strcmp(opt, "--lr")) {
            VALUE();
            double x;
            if (ir_parse_f64(val, &x) || !(x > 0) || isinf(x))
                return bad("--lr: '%s' is not a positive number", val);
            if (x > IR_MAX_LR) return bad("--lr: '%s' is above the largest lr, 1e6", val);
            o.lr = x;
        } else if (!strcmp(opt, "--sweep")) {
            VALUE();
            sweep_spec = val;
        } else if (!strcmp(opt, "--sweep-dir")) {
            VALUE();
            sweep_dir = val;
        } else if (!strcmp(opt, "--sweep-out")) {
            VALUE();
            sweep_out = val;
        } else if (!strcmp(opt, "--momentum-correction")) {
            o.momentum_correction = 1;
        } else if (!strcmp(opt, "--warmup-per-iteration")) {
            FLAG();
            o.warmup_per_iteration = 1;
        } else if (!strcmp(opt, "--seed")) {
            VALUE();
            uint64_t s;
            if (ir_parse_u64(val, &s)) return bad("--seed: '%s' is not a non-negative integer", val);
            o.seed = s;
        } else if (!strcmp(opt, "--no-augment")) {
            FLAG();
            o.no_augment = 1;
        } else if (!strcmp(opt, "--no-shuffle")) {
            FLAG();
            o.no_shuffle = 1;
        } else if (!strcmp(opt, "--data-workers")) {
            VALUE();
            if (parse_long(opt, val, 0, RT_PIPELINE_MAX_WORKERS, &n)) return 1;
            o.data_workers = (int)n;
        } else if (!strcmp(opt, "--load-params")) {
            VALUE();
            o.load_params = val;
        } else if (!strcmp(opt, "--save-params")) {
            VALUE();
            o.save_params = val;
        } else if (!strcmp(opt, "--metrics")) {
            VALUE();
            o.metrics = val;
        } else if (!strcmp(opt, "--benchmark")) {
            VALUE();
            if (parse_long(opt, val, 1, LONG_MAX, &n)) return 1;
            o.benchmark = n;
        } else if (!strcmp(opt, "--checkpoint")) {
            VALUE();
            if (!*val) return bad("--checkpoint needs a directory");
            o.checkpoint = val;
        } else if (!strcmp(opt, "--checkpoint-every")) {
            VALUE();
            if (parse_long(opt, val, 1, LONG_MAX, &n)) return 1;
            o.checkpoint_every = n;
        } else if (!strcmp(opt, "--resume")) {
            FLAG();
            o.resume = 1;
        } else if (!strcmp(opt, "--on-nan")) {
            VALUE();
            if (strcmp(val, "stop") && strcmp(val, "skip")) return bad("--on-nan: '%s' is not one of stop, skip", val);
            o.on_nan_skip = !strcmp(val, "skip");
        } else if (a[0] == '-' && a[1]) {
            return bad("unknown option: %s (see dprun --help)", a);
        } else if (path) {
            return bad("more than one plan file: %s", a);
        } else {
            path = a;
        }
#undef VALUE
#undef FLAG
    }
    if (!path) return bad("no plan file (usage: dprun PLAN [options], see --help)");
    char resume_command[4096];
    o.resume_command = resume_command_line(argc, argv, resume_command, sizeof resume_command);
    if (!o.resume_command) o.resume_command = "dprun PLAN --checkpoint DIR --resume (same flags)";
    o.plan_path = path;
    if ((sweep_dir || sweep_out) && !sweep_spec) return bad("--sweep-dir and --sweep-out need --sweep");
    /* Each sweep run writes its own metrics; one parameter file or benchmark would be ambiguous. */
    if (sweep_spec && (o.metrics || o.save_params || o.benchmark || o.checkpoint))
        return bad("--sweep writes each run's metrics to --sweep-dir; it takes no --metrics, --save-params, "
                   "--benchmark or --checkpoint");

    char err[2048];
    /* A spec has key=values; anything else names a sweep file. */
    rt_sweep sweep;
    if (sweep_spec && (strchr(sweep_spec, '=') ? rt_sweep_parse(&sweep, sweep_spec, err, sizeof err)
                                               : rt_sweep_read(&sweep, sweep_spec, err, sizeof err)))
        return bad("--sweep: %s", err);
    char default_dir[4096];
    if (sweep_spec && !sweep_dir) {
        /* r.plan -> r-sweep, beside the plan. */
        size_t len = strlen(path);
        if (len > 5 && !strcmp(path + len - 5, ".plan")) len -= 5;
        snprintf(default_dir, sizeof default_dir, "%.*s-sweep", (int)len, path);
        sweep_dir = default_dir;
    }
    dpc_plan *plan = plan_read(path, err, sizeof err);
    if (!plan) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int rc = 0;
    if ((info || schedule) && rank != 0) {
        /* one answer per job */
    } else if (info) {
        plan_info(plan, stdout);
    } else if (schedule) {
        ir_train t;
        if (rt_train_schedule(plan, &o, &t, err, sizeof err)) {
            fprintf(stderr, "dprun: error: %s\n", err);
            rc = 1;
        } else {
            int replicas = o.gpus * ranks;
            if (replicas > 1)
                fprintf(stderr, "dprun: note: the schedule of global batch %d (%d replicas x %d)\n",
                        replicas * t.batch, replicas, t.batch);
            rt_schedule s = rt_schedule_make(&t, replicas * t.batch);
            s.per_iteration = o.warmup_per_iteration;
            rt_schedule_print(&s, stdout);
        }
    } else if (sweep_spec) {
        rc = rt_sweep_run(plan, &sweep, &o, sweep_dir, sweep_out, err, sizeof err);
    } else {
        rc = rt_train(plan, &o, err, sizeof err);
    }
    if (rc && *err) bad("%s", err);
    plan_free(plan);
    return rc;
}
