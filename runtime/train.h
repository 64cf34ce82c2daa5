/* runtime/train.h — the training loop `dprun` runs.
 *
 * Usage:
 *     rt_train_options o = rt_train_defaults();
 *     o.epochs = 1; o.data = "synthetic"; o.seed = 7;
 *     int rc = rt_train(plan, &o);      // exit status: 0, or 1 with a message
 *
 * rt_train binds the plan's train and eval programs to one parameter store
 * per replica on the backend --device picks, initialises it from the seed (or loads a safetensors
 * file), runs the epochs with the schedule's lr, prints the reference
 * article's log lines on stdout, and finishes with train and test accuracy
 * measured by the eval program (BatchNorm in inference mode). Notices go to
 * stderr as `dprun: note: ...`, errors as `dprun: error: ...`; a progress
 * bar too when stderr is a terminal. DPC_DEBUG=1 adds, per epoch, how long
 * the steps waited for input.
 *
 * Checkpoints (--checkpoint DIR, runtime/checkpoint.h): written at every
 * epoch end, every checkpoint_every steps, when --steps stops the run
 * mid-epoch, and when SIGINT/SIGTERM stops it (the current step finishes,
 * the checkpoint is written, exit status 128 + signal; a second signal
 * ends the process at once). A fresh run refuses a directory that holds a
 * checkpoint; --resume continues from it bit-identically (the same
 * per-step losses and final weights as a run never stopped), appending to
 * the metrics file the checkpoint was written with from where it left it
 * (another --metrics, or a flag that changes the arithmetic, is refused). DPC_DEBUG=2 prints
 * every step's mean loss (`dprun: debug: step S loss X`, exact decimal).
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
#ifndef DPC_RT_TRAIN_H
#define DPC_RT_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "ir/plan.h"

/* What a run reached: rt_train fills it when rt_train_options.result is
 * set (the sweep ranks runs by it). */
typedef struct {
    int status;            /* rt_train's exit status */
    int finished;          /* 1: trained and measured the final accuracies */
    int epochs;            /* epochs completed */
    double train_loss;     /* the last completed epoch's mean; NAN before the first */
    double train_accuracy; /* the final ones; -1 when not measured */
    double test_accuracy;
    double seconds;        /* training time, as the `Training time` line */
    char error[256];       /* a failed run's message (without `dprun: error: `) */
} rt_train_result;

typedef struct {
    int epochs;                /* 0: the plan's */
    long steps;                /* stop after this many optimizer steps; -1: no limit,
                                * 0: only evaluate (e.g. parameters from --load-params) */
    uint64_t seed;             /* init, shuffle, augmentation */
    const char *data;          /* CIFAR-10 folder, "synthetic", or NULL ($DPC_DATA, else synthetic) */
    const char *device;        /* "auto", "cpu" or "cuda" */
    int gpus;                  /* data-parallel replicas in this process */
    int rank, ranks;           /* MPI (rt_mpi_init): this process and how many; 0 and 1
                                * without mpirun. The job runs ranks x gpus replicas;
                                * only rank 0 prints the log and writes files. */
    int lr_scaling;            /* -1: the plan's; else IR_LR_SCALING_* */
    int warmup_epochs;         /* -1: the plan's */
    double lr;                 /* >0: base lr; the dict is scaled so epoch 0 has it (before
                                * any linear scaling); 0: the plan's */
    int warmup_per_iteration;  /* Goyal's per-step ramp instead of per epoch */
    int momentum_correction;   /* rescale the velocity by lr_new/lr_old (Goyal et al.) */
    int no_augment, no_shuffle;
    const char *load_params;   /* safetensors to start from, or NULL */
    const char *save_params;   /* safetensors to write at the end, or NULL */
    long benchmark;            /* >0: time this many steps after a warm-up, then stop */
    int eval_every;            /* >0: test accuracy every K epochs */
    const char *metrics;       /* JSON lines, one per epoch, or NULL */
    int data_workers;          /* batch-preparation threads; 0: on the training thread */
    int data_depth;            /* batches prepared ahead (slots); 0: data_workers + 2 */
    const char *checkpoint;    /* directory: a checkpoint at every epoch end, or NULL */
    long checkpoint_every;     /* >0: also every N steps */
    int resume;                /* continue from the checkpoint in `checkpoint` */
    int on_nan_skip;           /* a non-finite loss or gradient skips the step (else stops the run) */
    const char *plan_path;     /* the plan's file, or NULL: no output may name it */
    const char *resume_command; /* the command line that resumes this run (printed on a signal), or NULL */
    FILE *out;                 /* the log (stdout) */
    rt_train_result *result;   /* filled at the end when not NULL */
} rt_train_options;

rt_train_options rt_train_defaults(void);
/* Applies the schedule overrides of o to a copy of the plan's train section
 * and checks it; global batch = ranks x gpus x per-device batch. 0 or -1 + err. */
int rt_train_schedule(const dpc_plan *plan, const rt_train_options *o, ir_train *t, char *err,
                      size_t errlen);
/* Runs training; returns the process exit status. */
int rt_train(const dpc_plan *plan, const rt_train_options *o);

#endif
