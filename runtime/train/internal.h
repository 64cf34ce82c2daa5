/* runtime/train/internal.h — private to runtime/train: the state of one
 * training run (rt_train) and the functions its files share.
 *
 *     train.c   rt_train: the phases of a run, defaults, the schedule overrides
 *     setup.c   checks of the plan's programs and the outputs, the data, the replicas
 *     loop.c    the epochs and steps, --benchmark
 *     eval.c    accuracy (a language model's val loss) with the eval program
 *     tokens.c  a language model's programs and token files
 *     guard.c   non-finite steps: the check, --on-nan skip's snapshot
 *     resume.c  checkpoints of the run, --resume
 *     stop.c    SIGINT/SIGTERM/SIGHUP, a closed stdout
 *     report.c  errors, the metrics file, the log
 *
 * Errors: a function that fails records its message with rt_run_fail and
 * returns nonzero; rt_train hands the message to its caller. Lines on
 * stderr go through runtime/log.h's rt_log, under the program's prefix.
 */
#ifndef DPC_RT_TRAIN_INTERNAL_H
#define DPC_RT_TRAIN_INTERNAL_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/comm/comm.h"
#include "runtime/data/data.h"
#include "runtime/device/device.h"
#include "runtime/exec/exec.h"
#include "runtime/files/files.h"
#include "runtime/train/progress.h"
#include "runtime/train/replicas.h"
#include "runtime/train/train.h"

/* --log-every: the metrics file is rewritten at most this often between
 * epoch ends (the whole text each time: see rt_run.metrics). */
#define RT_METRICS_WRITE_SECONDS 5.0
/* An epoch whose mean loss passes this many times ln(classes), a uniform
 * guess's loss, has diverged (warn_diverged). */
#define RT_DIVERGED_FACTOR       100

typedef struct {
    const dpc_plan *plan;
    const rt_train_options *o;
    ir_train t;
    rt_schedule sched;
    int batch, global, eval_batch, classes;
    int c, h, w;
    int eval_has_label;
    /* A language model (data tokens): the inputs "tokens" and "targets"
     * [N, T] i32 instead of "image" and "label", its files, and what the
     * accuracy pass measures instead: the val loss (eval.c). */
    int tokens;
    rt_tokens *tok_train, *tok_val;
    const char *xname, *yname; /* "image" "label", or "tokens" "targets" */
    size_t lab;                /* labels per sample: 1, or T */
    size_t logit_elems;        /* logits per eval sample: classes, or T x vocab */
    rt_dataset *train_ds, *test_ds;
    rt_batcher train_b, test_b, train_eval_b;
    rt_backend *be;
    rt_backend **bes; /* each replica's backend (on the cpu: be, shared) */
    int devices;      /* devices the replicas are placed on */
    rt_coll *coll;    /* NULL with one replica in the job */
    rt_replicas *R;
    int local, total;   /* replicas in this process, in the job */
    int accum;          /* micro-batches per replica per step (--accumulate) */
    size_t img;         /* floats per image */
    rt_store *st;       /* replica 0's: parameter files */
    rt_pipeline *input; /* training batches, prepared ahead */
    FILE *quiet;        /* ranks other than 0 write their log here (/dev/null) */
    float *logits, *loss;
    /* --metrics: the file's whole text in memory (open_memstream), written
     * through base_file after every epoch. Rewriting a file of one line per
     * epoch costs nothing, and it gets what every other output gets: no
     * link planted at the name or a temporary is followed, a reader sees
     * whole lines, and truncating at a resume is keeping the first bytes.
     * Appending with O_APPEND|O_NOFOLLOW would refuse a link the user
     * named and leave half lines after a crash. The file is first written
     * when the loop starts (rt_run_train), so a run stopped before then
     * leaves the user's file as it was. */
    FILE *metrics;
    char *metrics_buf;
    size_t metrics_len;
    const char *metrics_path; /* o->metrics: never a name from a checkpoint */
    rt_progress bar;
    char err[1024];        /* scratch for the callees' messages */
    char error[2048];      /* the run's error (rt_run_fail): what rt_train returns */
    double prev_lr;        /* the last step's lr, for --momentum-correction */
    rt_ckpt_state resumed; /* where the loop starts: zero, or --resume's checkpoint */
    int *params, nparams;  /* replica 0's parameters: the non-finite check */
    rt_readback *param_rb; /* ... read back behind each step */
    int params_queued;     /* rt_run_params_read queued a read not yet checked */
    float **snapshot;      /* --on-nan skip: every replica's persistent tensors before the step */
    double check_s, snapshot_s; /* time in nonfinite_param and snapshot (DPC_DEBUG) */
    int overlap;                /* the next batch's copy overlaps each step (rt_replicas_overlap) */
    /* A step's results (losses, the parameters' check) are read while the
     * next step runs: overlap without --on-nan skip, on every process. */
    int lag;
    /* --log-every: where the last metrics row left off (time, steps), and
     * when the metrics file was last written. */
    double row_t;
    long row_done;
    double metrics_written_t;
    int diverged; /* the divergence warning was given */
} rt_run;

/* Records the run's error (after erasing the progress bar, so the caller's
 * message starts a line) and returns 1, the exit status. */
int rt_run_fail(rt_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* --metrics: the text in memory, and the file replaced by it. */
int rt_run_open_metrics(rt_run *r);
int rt_run_flush_metrics(rt_run *r);
/* An epoch's metrics object, without its closing brace; tokens: its
 * accuracy is a language model's val loss. */
void rt_run_metrics_line(char *buf, size_t len, const rt_ckpt_metrics *m, int tokens);
/* fflush of the log (o->out); a closed stdout (EPIPE) stops the run as a
 * signal does (stop.c). */
void rt_run_flush_log(rt_run *r);

/* train.c: the device, options, programs and memory checked (before any
 * data or allocation); everything a run holds freed (not r itself). */
int rt_run_check(rt_run *r, const dpc_plan *plan, const rt_train_options *o);
void rt_run_free(rt_run *r);

/* setup.c */
int rt_run_find_node(const ir_graph *g, const char *name);
int rt_run_check_programs(rt_run *r);
int rt_run_check_outputs(rt_run *r);
int rt_run_open_data(rt_run *r);
int rt_run_build(rt_run *r);

/* tokens.c: a language model's programs checked, its token files opened,
 * and the windows of an epoch counted from the file's size. */
int rt_run_check_token_programs(rt_run *r);
int rt_run_open_tokens(rt_run *r, const char *spec);
long rt_run_token_steps(const dpc_plan *plan, const char *spec, int global_batch, char *err,
                        size_t errlen);

/* loop.c */
/* A pipeline over `count` batches of b from batch `index` of `epoch`. */
rt_pipeline *rt_run_input_at(rt_run *r, const rt_batcher *b, int64_t count, int epoch,
                             int64_t index);
int rt_run_benchmark(rt_run *r);
/* The steps the run makes: its epochs', or --steps when fewer. */
int64_t rt_run_total_steps(const rt_run *r);
/* The epochs from r->resumed's position, then the final accuracies. */
int rt_run_train(rt_run *r);

/* eval.c: the fraction of b's images classified right. stoppable: a stop
 * request (stop.c) ends the pass early; the caller then stops the run. */
int rt_run_accuracy(rt_run *r, const rt_batcher *b, const char *what, double *acc, int stoppable);

/* guard.c */
/* Queues the copy of replica 0's parameters behind the step just queued. */
void rt_run_params_read(rt_run *r);
/* The parameter that is not finite (its store index), -1 if none, -2 +
 * r->err if the read failed; waits for the queued read or makes one. */
int rt_run_nonfinite_param(rt_run *r);
void rt_run_snapshot(rt_run *r, int restore);
int rt_run_nonfinite_step(rt_run *r, double step_loss, int bad_param, double prev_lr, long done,
                          int e, long s, double lr);

/* resume.c */
int rt_run_check_checkpoint_options(rt_run *r);
int rt_run_write_checkpoint(rt_run *r, rt_ckpt_state *s);
int rt_run_resume(rt_run *r);

/* stop.c: SIGINT, SIGTERM and SIGHUP stop the run in order; SIGPIPE is
 * ignored while it runs (a closed stdout stops it through rt_run_flush_log). */
enum { RT_STOP_SIGNALS = 4 };
void rt_run_catch_signals(struct sigaction old[RT_STOP_SIGNALS]);
void rt_run_release_signals(const struct sigaction old[RT_STOP_SIGNALS]);
/* Asks the run to stop as signal sig would (the first request wins). */
void rt_run_request_stop(int sig);
/* Whether a stop was asked for in this process (no collective). */
int rt_run_stop_pending(void);
/* The same agreed by every process: a collective. */
int rt_run_stop_requested(void);
/* The message for a run stopped `where` ("at epoch 2 step 5", "during the
 * final evaluation") after `done` steps; saved 1: the checkpoint holds
 * them, 0: none does, -1: nothing to add (the run completed). Returns the
 * exit status, 128 + the signal (SIGPIPE: stdout closed). */
int rt_run_stopped(rt_run *r, const char *where, long done, int saved);
/* After set-up (rc: its status): a stop asked for meanwhile ends the run
 * before its first step, with its message and 128 + signal, whatever rc
 * (a compiler killed by the same Ctrl-C fails the set-up); else rc. Every
 * process with rc 0 takes part (a collective). */
int rt_run_setup_stopped(rt_run *r, int rc);

/* A tensor of prog named name, of rank ndim and dtype dt: the node, or
 * NULL and a message naming what differs (setup.c). */
const ir_node *rt_train_need(const ir_graph *g, const char *prog, const char *name, int ndim,
                             ir_dtype dt, char *err, size_t errlen);

#endif
