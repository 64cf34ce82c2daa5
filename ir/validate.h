/* ir/validate.h — the one check of a graph and its training section,
 * whatever they came from: the frontend (frontend/check.c, and dpc's
 * build before the passes), the IR text (ir/text.c, `dpc --from-ir`) or a
 * plan (format/plan_check.c, on writing and on reading). Each caller only says where
 * a refused value came from: a .net position, an IR file's line and
 * column, a plan's section, program and node.
 *
 * What it checks (docs/DESIGN.md §3.6):
 *   - the schedule's ranges (ir_train_check_field; the limits below are
 *     the frontend's, which its own positioned messages use too), a
 *     dataset dprun reads;
 *   - each program: every input a node reads is one the dataset, the
 *     runtime or the optimizer feeds; the dataset's inputs have the
 *     schedule's batch (the eval program: its eval batch); a gradient
 *     flag only on PARAM.grad, one per parameter, of its shape;
 *     fusion groups that codegen can render (ir_node_fusible, one kind
 *     of reduction, one iteration space, at most IR_GROUP_MAX_NODES);
 *   - the eval program evaluates: it writes no parameter or state
 *     (assign, a training batchnorm), holds no gradient or dropout, and
 *     binds only the train program's parameters and state;
 *   - the train program's update is the schedule's optimizer, with its
 *     hyper-parameters (momentum, wd, nesterov, eta, eps, betas).
 *
 * Usage:
 *     ir_where w;
 *     if (ir_validate(&t, train, eval, &w, err, sizeof err))
 *         ... w.field (a schedule field), or w.program and w.node / w.group ...
 */
#ifndef DPC_IR_VALIDATE_H
#define DPC_IR_VALIDATE_H

#include "ir/ir.h"

/* The schedule's ranges (the frontend's: frontend/check.c names them at
 * the value's position, ir_train_check_field everywhere). */
#define IR_MAX_BATCH     (1 << 20)  /* batch and eval batch per device */
#define IR_MAX_EPOCHS    1000000    /* epochs, warmup, an lr step's epoch */
#define IR_MAX_STEPS     1000000000 /* warmup K steps, a curve's steps= */
#define IR_MAX_REF_BATCH (1 << 30)  /* lr_scaling's reference_batch */
#define IR_MAX_PAD       64
#define IR_MAX_CROP      4096
#define IR_MAX_BLOCK     (1 << 20) /* data tokens' window length T */
#define IR_MAX_WD        1.0       /* weight decay */
#define IR_MAX_REAL      1e6       /* normalize mean and std */
#define IR_MAX_LR_POWER  100.0     /* poly's exponent, in (0, 100] */

/* Where a refused value is: field, a schedule field as the text form
 * spells its key ("epochs", "eval_batch", "momentum"; NULL for none);
 * program, 0 train or 1 eval (-1: the schedule); node, a node of it (-1:
 * none); group, a fusion group id (0: none; node is its first member). */
typedef struct {
    const char *field;
    int program, node, group;
} ir_where;

/* ir_train_check, naming the field of the first failure in *field. */
int ir_train_check_field(const ir_train *t, const char **field, char *err, size_t errlen);
/* A dataset dprun reads ("cifar10"); names: the known ones, for messages. */
int ir_dataset_known(const char *name);
const char *ir_dataset_names(void);
/* A token file's name of a `data tokens` section: a plain name inside
 * dprun's --data folder (a plan is data: it must not name any path).
 * 0, or -1 + a message naming it. */
int ir_tokens_file_ok(const char *name, char *err, size_t errlen);
/* Whether t's dataset can fill an input image of c x h x w (after its
 * pad and random_crop): 0, or -1 + a message naming both shapes. */
int ir_dataset_fits(const ir_train *t, int c, int h, int w, char *err, size_t errlen);

/* The whole check; t, train and eval may each be NULL (what a caller does
 * not have is not checked). 0, or -1 with the message in err (no
 * location: w says where) and w filled. */
int ir_validate(const ir_train *t, const ir_graph *train, const ir_graph *eval, ir_where *w,
                char *err, size_t errlen);

#endif
