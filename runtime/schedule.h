/* runtime/schedule.h — the learning-rate schedule of a training run.
 *
 * The train section gives a per-epoch dict ({0: 0.1, 35: 0.05, ...}), an
 * optional linear scaling by global batch / reference batch (Goyal et al.)
 * and an optional warmup of K epochs. Warmup ramps linearly from the
 * unscaled epoch-0 value at epoch 0 to the scaled value of epoch K, either
 * once per epoch (the reference article: 0.1, 0.4, ..., 1.6 for a x16 scale
 * and K = 5) or once per iteration (Goyal et al.).
 *
 * Usage:
 *     rt_schedule s = rt_schedule_make(&plan->schedule, global_batch);
 *     s.per_iteration = 1;                           // optional
 *     double lr = rt_schedule_epoch_lr(&s, epoch);   // what the log prints
 *     double lr = rt_schedule_step_lr(&s, epoch, step, steps_per_epoch);
 */
#ifndef DPC_RT_SCHEDULE_H
#define DPC_RT_SCHEDULE_H

#include <stdio.h>

#include "ir/ir.h"

typedef struct {
    const ir_train *t; /* the dict, scaling and warmup (not owned) */
    int global_batch;  /* per-device batch x replicas */
    int per_iteration; /* 1: warmup ramps every step, 0: every epoch */
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
/* `epoch E lr X` for every epoch of t->epochs: what `dprun --schedule` prints. */
void rt_schedule_print(const rt_schedule *s, FILE *f);

#endif
