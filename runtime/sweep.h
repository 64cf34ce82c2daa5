/* runtime/sweep.h — local hyperparameter sweeps: `dprun PLAN --sweep SPEC`.
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
 *         rt_train(plan, &o);
 *     }
 *     rt_sweep_table(&s, res, n, stdout);   // ranked, failed runs last with their reason
 * or all of that, with a log and metrics file per run in a folder:
 *     int rc = rt_sweep_run(plan, &s, &base, "r-sweep", "table.md");
 */
#ifndef DPC_RT_SWEEP_H
#define DPC_RT_SWEEP_H

#include <stddef.h>
#include <stdio.h>

#include "ir/plan.h"
#include "runtime/train.h"

#define RT_SWEEP_MAX_KEYS 8
#define RT_SWEEP_MAX_VALUES 32
#define RT_SWEEP_MAX_RUNS 4096
#define RT_SWEEP_VALUE_LEN 32

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
 * is created; N counts from 1 in spec order); then the ranked table on
 * stdout and, when table_path is set, in that file. Progress goes to
 * stderr. Exit status: 0, or 1 on set-up errors or when no run succeeded
 * (failed runs are rows of the table, not errors of the sweep). */
int rt_sweep_run(const dpc_plan *plan, const rt_sweep *s, const rt_train_options *base, const char *dir,
                 const char *table_path);
/* The ranked Markdown table: rank, the swept values, train loss, train and
 * test accuracy, seconds, run number; failed runs last with their reason. */
void rt_sweep_table(const rt_sweep *s, const rt_train_result *res, long n, FILE *f);

#endif
