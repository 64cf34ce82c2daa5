/* runtime/train/train.h — the training loop `dprun` runs.
 *
 * Usage:
 *     rt_train_options o = rt_train_defaults();
 *     o.epochs = 1; o.data = "synthetic"; o.seed = 7;
 *     rt_log_set_prefix("dprun");       // once, in main: starts its lines on stderr
 *     char err[2048];
 *     int rc = rt_train(plan, &o, err, sizeof err);  // exit status: 0, or 1 with err
 *     if (rc && *err) fprintf(stderr, "dprun: error: %s\n", err);
 *
 * rt_train binds the plan's train and eval programs to one parameter store
 * per replica on the backend --device picks, initialises it from the seed (or loads a safetensors
 * file), runs the epochs with the schedule's lr, prints the reference
 * article's log lines on stdout, and finishes with train and test accuracy
 * measured by the eval program (BatchNorm in inference mode). Notices go to
 * stderr through runtime/log.h as `PREFIX: note: ...` (the prefix the
 * program set with rt_log_set_prefix), a progress bar too when
 * stderr is a terminal; an error ends the run and comes back in err (empty
 * on ranks other than 0 when rank 0 has the message). DPC_DEBUG=1 adds,
 * per epoch, how long the steps waited for input.
 *
 * Checkpoints (--checkpoint DIR, runtime/files/files.h): written at every
 * epoch end, every checkpoint_every steps, when --steps stops the run
 * mid-epoch, and when a signal stops it. A fresh run refuses a directory
 * that holds a checkpoint; --resume continues from it bit-identically (the
 * same per-step losses and final weights, log and metrics lines as a run
 * never stopped; a flag that changes the arithmetic is refused). The
 * metrics file of a resumed run is the one its --metrics names (none
 * without): it must start with the bytes the checkpoint recorded (length
 * and SHA-256), and the run goes on from there. DPC_DEBUG=2 prints every
 * step's mean loss (`PREFIX debug: step S loss X`, exact decimal).
 *
 * Signals (runtime/train/stop.c), from the first check to the end of
 * rt_train: SIGINT, SIGTERM and SIGHUP stop the run in order: set-up
 * finishes (nothing is written), a step finishes and the checkpoint is
 * written, a final evaluation stops at its next batch; the run says where
 * it stopped and how to resume, and returns 128 + signal. A second signal
 * ends the process at once. A closed stdout (EPIPE; SIGPIPE is ignored
 * meanwhile) stops it the same way, with 141. A run that caught a signal
 * never returns 0.
 *
 * Non-finite loss or parameters after a step (a non-finite gradient makes
 * the updated parameters non-finite): the run stops with the step, epoch
 * and lr, exit 1, leaving the last good checkpoint; with on_nan_skip the
 * step's update is undone instead (a host copy of every replica's
 * persistent tensors is taken before each step) and training continues.
 *
 * Metrics (--metrics FILE): one JSON object per epoch, keys epoch, lr,
 * train_loss (mean over the epoch), batch (global), steps, seconds (from
 * the first batch, as the EPOCH line), img_per_s, input_wait_s (time the
 * steps waited for the input pipeline), test_accuracy when --eval-every
 * asked for it; the last epoch's object also carries the final
 * train_accuracy and test_accuracy.
 */
#ifndef DPC_RT_TRAIN_TRAIN_H
#define DPC_RT_TRAIN_TRAIN_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#include "format/plan.h"
#include "ir/ir.h"

/* What a run reached: rt_train fills it when rt_train_options.result is
 * set (the sweep ranks runs by it). */
typedef struct {
    int status;            /* rt_train's exit status */
    int finished;          /* 1: trained to the end, the final accuracies asked for measured */
    int epochs;            /* epochs completed */
    double train_loss;     /* the last completed epoch's mean; NAN before the first */
    double train_accuracy; /* the final ones; -1 when not measured (--final-eval) */
    double test_accuracy;
    double seconds;      /* training time, as the `Training time` line */
    double wall_seconds; /* the whole run: set-up, training, evaluation */
    int diverged;        /* an epoch's loss was far above a uniform guess's */
    char note[128];      /* what the schedule did unasked (rt_schedule_notes), or empty */
    char error[256];     /* a failed run's message (rt_train's err, cut to fit) */
} rt_train_result;

typedef struct {
    int epochs;          /* 0: the plan's */
    long steps;          /* stop after this many optimizer steps; -1: no limit,
                                * 0: only evaluate (e.g. parameters from --load-params) */
    long schedule_steps; /* --schedule-steps: a cosine/poly curve ends at this step; 0: the run's end */
    uint64_t seed;       /* init, shuffle, augmentation */
    const char *data;   /* CIFAR-10 folder, "synthetic", or NULL ($DPC_DATA, else synthetic) */
    const char *device; /* "auto", "cpu" or "cuda" */
    int gpus;           /* data-parallel replicas in this process */
    int accumulate;     /* micro-batches per replica per optimizer step (--accumulate); 1: none */
    int rank, ranks;    /* MPI (rt_mpi_init): this process and how many; 0 and 1
                                * without mpirun. The job runs ranks x gpus replicas;
                                * only rank 0 prints the log and writes files. */
    int lr_scaling;     /* -1: the plan's; else IR_LR_SCALING_* */
    int warmup_epochs;  /* -1: the plan's */
    double lr;          /* >0: base lr; the dict is scaled so epoch 0 has it (before
                                * any linear scaling); 0: the plan's */
    int warmup_per_iteration; /* Goyal's per-step ramp instead of per epoch */
    int momentum_correction;  /* rescale the velocity by lr_new/lr_old (Goyal et al.) */
    int no_augment, no_shuffle;
    const char *load_params; /* safetensors to start from, or NULL */
    /* With load_params (rt_params_load, runtime/files/files.h): name_map, a file of
     * `DPC_NAME FILE_NAME` lines (`#` comments) saying under which name
     * the file holds a parameter; allow_missing, fnmatch globs over dpc
     * names whose parameters the file may lack (they keep their seeded
     * initial values); allow_unused: the file's tensors no parameter takes
     * are skipped (else refused). Every one is reported on stderr. */
    const char *name_map;
#define RT_MAX_ALLOW_MISSING       64
/* A language model's val loss reads at most this many windows unless
 * --eval-windows says otherwise: enough for a stable mean (64k tokens at
 * T 64), few enough to evaluate at every --log-every row. */
#define RT_TOKENS_EVAL_WINDOWS     1024
#define RT_TOKENS_EVAL_WINDOWS_STR "1024"
    const char *allow_missing[RT_MAX_ALLOW_MISSING];
    int n_allow_missing;
    int allow_unused;
    const char *save_params; /* safetensors to write at the end, or NULL */
    long benchmark;          /* >0: time this many steps after a warm-up, then stop */
    int tune;                /* --tune: measure every tuned convolution again (rt_conv_retune) */
    int nondeterministic;    /* --nondeterministic (rt_conv_set_nondeterministic) */
    int eval_every;          /* >0: test accuracy every K epochs */
    int final_eval;          /* RT_FINAL_EVAL_*; -1: both after the whole schedule, none
                              * when --steps cut it short (test in a sweep) */
    long eval_batches;       /* >0: every accuracy pass reads at most this many batches */
    long eval_windows;       /* >0: a tokens model's val loss reads this many windows
                              * (else all, at most RT_TOKENS_EVAL_WINDOWS) */
    long log_every;          /* >0: a metrics row every N steps (step, loss, lr, img/s) */
    int progress_every;      /* seconds between progress lines when stderr is not a
                              * terminal; 0: none */
    const char *metrics;     /* JSON lines, one per epoch, or NULL */
    const char *metrics_dir, *metrics_name; /* set by a sweep: metrics is metrics_dir/
                                             * metrics_name, a name of dprun's own in the
                                             * user's folder (base_file_open_in: never
                                             * written through a link) */
    int data_workers;       /* batch-preparation threads; 0: on the training thread */
    int data_depth;         /* batches prepared ahead (slots); 0: data_workers + 2 */
    const char *checkpoint; /* directory: a checkpoint at every epoch end, or NULL */
    long checkpoint_every;  /* >0: also every N steps */
    int resume;             /* continue from the checkpoint in `checkpoint` */
    int on_nan_skip;        /* a non-finite loss or gradient skips the step (else stops the run) */
    int shard_optimizer;    /* ZeRO-1 (rt_replicas_shard) */
    const char *plan_path;  /* the plan's file, or NULL: no output may name it */
    const char
        *resume_command; /* the command line that resumes this run (printed on a signal), or NULL */
    FILE *out;           /* the log (stdout) */
    rt_train_result *result; /* filled at the end when not NULL */
} rt_train_options;

/* --final-eval: which accuracies the run ends with. */
enum { RT_FINAL_EVAL_TEST, RT_FINAL_EVAL_TRAIN, RT_FINAL_EVAL_BOTH, RT_FINAL_EVAL_NONE };
#define RT_FINAL_EVAL_CHOICES "test|train|both|none" /* in that order */

rt_train_options rt_train_defaults(void);
/* The files of a run with o into s (base/file.h): the plan, --load-params and
 * the CIFAR-10 files it reads; the checkpoint's file, --metrics and
 * --save-params it writes. 0, or -1 + a message naming the two that clash. */
typedef struct base_file_set base_file_set;
int rt_train_files(const rt_train_options *o, base_file_set *s, char *err, size_t errlen);
/* Applies the schedule overrides of o to a copy of the plan's train section
 * and checks it; global batch = ranks x gpus x accumulate x per-device batch.
 * 0 or -1 + err. */
int rt_train_schedule(const dpc_plan *plan, const rt_train_options *o, ir_train *t, char *err,
                      size_t errlen);
/* ranks x gpus x accumulate x batch, the one place it is formed: -1 + err
 * when a count is below 1 or the product does not fit an int. */
int rt_train_global_batch(const rt_train_options *o, int batch, char *err, size_t errlen);
/* Optimizer steps per epoch for a global batch on the run's data (--data,
 * $DPC_DATA or the synthetic set; a CIFAR-10 folder, image folder or .npy
 * set is read, as the plan's data section says): what `dprun --schedule`
 * needs for a curve or --per-step (the synthetic set's count said in a
 * note, since the run's data may differ). -1 + err. */
long rt_train_steps_per_epoch(const dpc_plan *plan, const rt_train_options *o, int global_batch,
                              char *err, size_t errlen);
/* Runs training; returns the process exit status: 0, 1 with the message in
 * err (empty when another rank has it), or 128 + signal. */
int rt_train(const dpc_plan *plan, const rt_train_options *o, char *err, size_t errlen);

/* `dprun predict`: for each image (a file, or every file under a folder
 * given), one line on out with the model's top classes and their softmax
 * probabilities, or one JSON object {"file", "top": [{"class", "name",
 * "prob"}]}; names from `classes` (a file of one name per line, or an
 * image folder: its train/ subfolders), else indices (JSON name null).
 * Returns the exit status: 0, or 1 with the message in err. */
#define RT_PREDICT_MAX_TOP 1000
typedef struct {
    const char *device, *load_params, *plan_path;
    const char *classes;
    int top, json;
    const char *const *inputs;
    int ninputs;
    FILE *out; /* NULL: stdout */
} rt_predict_options;
int rt_predict(const dpc_plan *plan, const rt_predict_options *po, char *err, size_t errlen);

/* ---- the learning-rate schedule of a training run.
 *
 * The train section gives a per-epoch dict ({0: 0.1, 35: 0.05, ...}) or a
 * per-step curve (`lr cosine(base, final)`, `lr poly(base, power, final)`),
 * an optional linear scaling by global batch / reference batch (Goyal et
 * al.) and an optional warmup of K epochs. Warmup ramps linearly from the
 * unscaled epoch-0 value (a curve's base) at epoch 0 to the scaled value of
 * epoch K, either once per epoch (the reference article: 0.1, 0.4, ...,
 * 1.6 for a x16 scale and K = 5) or once per iteration (Goyal et al.). A
 * curve then runs over the steps after warmup, from the scaled base at the
 * first to `final` (never scaled) at the run's last step:
 *     cosine: final + (base - final) * (1 + cos(pi * s / S)) / 2
 *     poly:   final + (base - final) * (1 - s / S)^power
 * s: the step counted from the end of warmup, S: the steps after warmup
 * minus 1 (x = s/S is 0 when S is 0). span_steps (--schedule-steps N) ends
 * the curve at step N - 1 instead, the lr `final` from there on.
 *
 * Usage:
 *     rt_schedule s = rt_schedule_make(&plan->schedule, global_batch);
 *     s.per_iteration = 1;                           // optional
 *     s.steps_per_epoch = spe;                       // what a curve needs
 *     double lr = rt_schedule_epoch_lr(&s, epoch);   // what the log prints
 *     double lr = rt_schedule_step_lr(&s, epoch, step, steps_per_epoch);
 */

typedef struct {
    const ir_train *t;    /* the dict or curve, scaling and warmup (not owned) */
    int global_batch;     /* per-device batch x replicas */
    int per_iteration;    /* 1: warmup ramps every step, 0: every epoch */
    long steps_per_epoch; /* for a curve's epoch_lr; 0 (unknown) counts one step per epoch */
    int warmup_asked;     /* 1: the warmup is the user's (--warmup-epochs, a sweep's warmup=) */
    long span_steps;      /* a curve's last step is step span_steps - 1 (--schedule-steps);
                           * 0: the last of t->epochs; past it the lr stays `final` */
    long stop_steps;      /* --steps (for the note when it cuts a curve short); <= 0: none */
} rt_schedule;

rt_schedule rt_schedule_make(const ir_train *t, int global_batch);
/* The dict's value at epoch e: the entry with the largest key <= e. */
double rt_schedule_dict_lr(const ir_train *t, int epoch);
/* global_batch / reference_batch under linear scaling, else 1. */
double rt_schedule_scale(const rt_schedule *s);
/* lr in effect at the start of epoch e (per-iteration warmup agrees with
 * per-epoch warmup there, so this is also the printed value). */
double rt_schedule_epoch_lr(const rt_schedule *s, int epoch);
/* lr of step `step` (0-based within the epoch) of epoch e. */
double rt_schedule_step_lr(const rt_schedule *s, int epoch, long step, long steps_per_epoch);
/* What `dprun --schedule` prints for every epoch of t->epochs: `epoch E lr
 * X` (%.3f, the lr at the epoch's first step), or with per_step every step
 * of steps_per_epoch, `epoch E step I lr X` (%.9g). */
void rt_schedule_print(const rt_schedule *s, int per_step, FILE *f);
/* What the schedule does that nobody may have meant, one line each in buf
 * (empty when nothing): a run that stops inside its warmup, a warmup that
 * changes nothing (the lr scale is 1) or that lowers the lr (a scale below
 * 1), a curve that --steps stops before its end. Returns the count. */
int rt_schedule_notes(const rt_schedule *s, char *buf, size_t len);
/* Each of them as `PREFIX: note: ...` on stderr (rt_log), and the first (or "") into
 * first[first_len] when first is not NULL (a sweep's table shows it). */
void rt_schedule_say_notes(const rt_schedule *s, char *first, size_t first_len);

/* ---- local hyperparameter sweeps: `dprun PLAN --sweep SPEC`.
 *
 * A spec names keys and their values, `lr=0.05,0.1,0.2 warmup=0,5`; a
 * sweep file holds the same, one `key=v1,v2,...` per line (blank lines and
 * `#` comments ignored). Every combination (the cartesian product, the last
 * key varying fastest) is one training run with those overrides; the runs
 * are ranked by test accuracy and printed as one Markdown table.
 *
 * Keys: lr (base lr: the schedule's dict scaled so that epoch 0 has this
 * value, before any linear scaling), warmup (epochs), epochs, gpus, seed,
 * lr-scaling (none|linear), momentum-correction (0|1),
 * warmup-per-iteration (0|1).
 *
 * Usage:
 *     rt_sweep s;
 *     if (rt_sweep_parse(&s, "lr=0.1,0.2 warmup=0,5", err, sizeof err)) ...  // or rt_sweep_read
 *     long n = rt_sweep_count(&s);
 *     rt_train_result *res = calloc(n, sizeof *res);
 *     for (long i = 0; i < n; i++) {
 *         rt_train_options o = base;
 *         rt_sweep_apply(&s, i, &o);
 *         o.result = &res[i];
 *         rt_train(plan, &o, err, sizeof err);
 *     }
 *     rt_sweep_table(&s, res, n, stdout);   // ranked, failed runs last with their reason
 * or all of that, with a log and metrics file per run in a folder:
 *     int rc = rt_sweep_run(plan, &s, &base, "r-sweep", "table.md", err, sizeof err);
 */

#define RT_SWEEP_MAX_KEYS   8
#define RT_SWEEP_MAX_VALUES 32
#define RT_SWEEP_MAX_RUNS   4096
#define RT_SWEEP_VALUE_LEN  32

typedef enum {
    RT_SWEEP_LR,
    RT_SWEEP_WARMUP,
    RT_SWEEP_EPOCHS,
    RT_SWEEP_GPUS,
    RT_SWEEP_SEED,
    RT_SWEEP_LR_SCALING,
    RT_SWEEP_MOMENTUM_CORRECTION,
    RT_SWEEP_WARMUP_PER_ITERATION,
} rt_sweep_key;

typedef struct {
    rt_sweep_key key;
    int count;
    char text[RT_SWEEP_MAX_VALUES][RT_SWEEP_VALUE_LEN]; /* as written, for the table */
    double value[RT_SWEEP_MAX_VALUES];                  /* parsed (lr-scaling: IR_LR_SCALING_*) */
} rt_sweep_axis;

typedef struct {
    int axes;
    rt_sweep_axis axis[RT_SWEEP_MAX_KEYS];
    const char *path; /* the file rt_sweep_read read (no output may be it), or NULL */
} rt_sweep;

/* Parses `key=v1,v2 key=v1 ...` (keys separated by blanks or newlines) into
 * s; 0, or -1 with a message naming the bad token. */
int rt_sweep_parse(rt_sweep *s, const char *spec, char *err, size_t errlen);
/* The same from a file (one key per line, `#` comments). */
int rt_sweep_read(rt_sweep *s, const char *path, char *err, size_t errlen);
/* Number of combinations. */
long rt_sweep_count(const rt_sweep *s);
/* Sets combination i's values in o. */
void rt_sweep_apply(const rt_sweep *s, long i, rt_train_options *o);
/* `lr=0.1 warmup=5`: combination i as written in the spec. */
void rt_sweep_label(const rt_sweep *s, long i, char *buf, size_t len);
/* order[0..n) = combination indices best first: finished runs with a finite
 * train loss and test accuracy by test accuracy (higher first), then train
 * loss (lower first), then index; failed or diverged runs last, by index. */
void rt_sweep_rank(const rt_train_result *res, long n, long *order);
/* Whether a run counts in the ranking (finished, finite loss and accuracy);
 * else why not, in why. */
int rt_sweep_ok(const rt_train_result *r, char *why, size_t len);
/* The whole sweep: every combination in turn with base's other options,
 * each with its log in DIR/run-N.log and metrics in DIR/run-N.jsonl (DIR
 * is created; NULL: PLAN-sweep beside base->plan_path, a name of dprun's
 * own; N counts from 1 in spec order); then the ranked table on
 * stdout and, when table_path is set, in that file. Progress goes to
 * stderr through runtime/log.h (rt_log, under the program's prefix). Exit status: 0, or 1
 * with err on set-up errors or when no run succeeded (failed runs are rows
 * of the table, not errors of the sweep), or 128 + signal when a signal
 * stopped a run (the sweep stops with it, without a table). */
int rt_sweep_run(const dpc_plan *plan, const rt_sweep *s, const rt_train_options *base,
                 const char *dir, const char *table_path, char *err, size_t errlen);
/* The ranked Markdown table: rank, the swept values, train loss, train and
 * test accuracy, seconds, run number; failed runs last with their reason. */
void rt_sweep_table(const rt_sweep *s, const rt_train_result *res, long n, FILE *f);

#endif
