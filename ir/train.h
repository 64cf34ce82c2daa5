/* ir/train.h — the training schedule, the .net `train` section as data:
 * ir_train and the table of its fields (IR_TRAIN_FIELDS) that every
 * encoding walks, with its defaults and checks (ir/schedule.c). Part of
 * the IR's public interface: ir/ir.h includes it, so users include ir.h.
 */
#ifndef DPC_IR_TRAIN_H
#define DPC_IR_TRAIN_H

#include <stddef.h>
#include <stdio.h>

/* ---- the training schedule (the .net `train` section) ------------------ */

#define IR_MAX_LR_STEPS 32
#define IR_MAX_LR       1e6 /* the largest lr a schedule may hold (ir_train_check) */

/* The lr times global batch / reference batch (linear, Goyal et al.) or its
 * square root (sqrt, as LAMB's authors scale it). */
typedef enum { IR_LR_SCALING_NONE, IR_LR_SCALING_LINEAR, IR_LR_SCALING_SQRT } ir_lr_scaling;
extern const char *const ir_lr_scaling_names[IR_LR_SCALING_SQRT + 1]; /* "none", "linear", "sqrt" */
int ir_lr_scaling_parse(const char *name);                            /* -1 when unknown */
typedef enum { IR_OPT_SGD, IR_OPT_LARS, IR_OPT_LAMB, IR_OPT_ADAMW } ir_optimizer;
/* Parameter classes an optimizer's exclude=(...) names (a bit mask). */
/* norm: layernorm gamma/beta (nanoGPT decays only matrices). */
enum { IR_EXCLUDE_BN = 1 << 0, IR_EXCLUDE_BIAS = 1 << 1, IR_EXCLUDE_NORM = 1 << 2 };
#define IR_EXCLUDE_ALL (IR_EXCLUDE_BN | IR_EXCLUDE_BIAS | IR_EXCLUDE_NORM)
/* The lr curve after warmup: the per-epoch dict, or a per-step decay from
 * the (scaled) base lr_value[0] to lr_final (README, DESIGN §10.4). */
typedef enum { IR_LR_DICT, IR_LR_COSINE, IR_LR_POLY } ir_lr_kind;

/* Every ir_train field, once, in declaration order:
 * X(type, name, dims, kind, key, lo, hi, when, rank). The struct below is
 * made from it, and so are the schedule's encodings: the plan's sections
 * (format/plan_schedule.c), the `# train` line of the IR text form
 * (ir/text_write.c, ir/text.c), the optimizer defaults (ir/schedule.c).
 * A new field is a line here, its default in ir_train_defaults and its
 * checks in ir_train_check_field.
 *   kind  I32 (int), F64 (double), F64X3 (double[3]), STR (char[]) are
 *         encoded from the table alone; ENUM (a u32 up to hi in a plan, a
 *         word in the text form) and LR (the lr dict: lr_steps, then its
 *         LR_PART rows lr_epoch and lr_value) have a case of their own in
 *         each encoding.
 *   key   the text form's key, and the field ir_train_check_field names
 *   lo,hi an I32's bounds in the text form (of a NONZERO one, when there);
 *         an ENUM's largest value in hi
 *   when  ALWAYS; OPTIM (the plan's OPTM section and the text form hold
 *         it only when an optimizer setting differs from ir_train_defaults);
 *         CURVE (the text form holds it only when lr_kind is not DICT);
 *         NONZERO (an I32 or F64; the plan's DATA section and the text
 *         form hold it only when it is not 0: the text form each by its
 *         key, the DATA section the fields up to the last that is not 0);
 *         TOKENS (the plan's TOKN section and the text form hold it only
 *         when the dataset is "tokens"). The plan's SCHD section holds ALWAYS and
 *         CURVE fields, in this order; the optional parts came later, so
 *         plans and text without them read as before.
 *   rank  its position on the `# train` line (-1: not there itself) */
/* clang-format off */
#define IR_TRAIN_FIELDS(X) \
    X(int,           batch,           ,                   I32,     "batch",           1, IR_MAX_BATCH,       ALWAYS,  0)  /* per device */ \
    X(int,           epochs,          ,                   I32,     "epochs",          1, IR_MAX_EPOCHS,      ALWAYS,  1) \
    X(double,        init_magnitude,  ,                   F64,     "init_magnitude",  0, 0,                  ALWAYS,  3)  /* xavier(magnitude=...), uniform, factor "avg" */ \
    X(ir_optimizer,  optimizer,       ,                   ENUM,    "optimizer",       0, IR_OPT_ADAMW,       ALWAYS,  4) \
    X(double,        momentum,        ,                   F64,     "momentum",        0, 0,                  ALWAYS,  5) \
    X(double,        wd,              ,                   F64,     "wd",              0, 0,                  ALWAYS,  6) \
    /* sgd: nesterov; lars: eta, eps; lamb/adamw: beta1, beta2, eps; \
     * lars/lamb/adamw: exclude (IR_EXCLUDE_*). README's train section. */ \
    X(int,           nesterov,        ,                   I32,     "nesterov",        0, 1,                  OPTIM,   7) \
    X(int,           exclude,         ,                   I32,     "exclude",         0, IR_EXCLUDE_ALL, OPTIM, 8) \
    X(double,        eta,             ,                   F64,     "eta",             0, 0,                  OPTIM,   9) \
    X(double,        eps,             ,                   F64,     "eps",             0, 0,                  OPTIM,   10) \
    X(double,        beta1,           ,                   F64,     "beta1",           0, 0,                  OPTIM,   11) \
    X(double,        beta2,           ,                   F64,     "beta2",           0, 0,                  OPTIM,   12) \
    X(int,           lr_steps,        ,                   LR,      "lr",              0, 0,                  ALWAYS,  13) /* entries in the lr dict */ \
    X(int,           lr_epoch,        [IR_MAX_LR_STEPS],  LR_PART, "lr",              0, 0,                  ALWAYS,  -1) /* sorted, first is 0 */ \
    X(double,        lr_value,        [IR_MAX_LR_STEPS],  LR_PART, "lr",              0, 0,                  ALWAYS,  -1) \
    X(ir_lr_scaling, lr_scaling,      ,                   ENUM,    "lr_scaling",      0, IR_LR_SCALING_SQRT, ALWAYS,  17) \
    X(int,           reference_batch, ,                   I32,     "reference_batch", 1, IR_MAX_REF_BATCH,   ALWAYS,  18) \
    X(int,           warmup_epochs,   ,                   I32,     "warmup_epochs",   0, IR_MAX_EPOCHS,      ALWAYS,  19) \
    X(ir_lr_kind,    lr_kind,         ,                   ENUM,    "lr_curve",        0, IR_LR_POLY,         CURVE,   14) /* COSINE, POLY: lr_steps is 1, lr_value[0] the base */ \
    X(double,        lr_final,        ,                   F64,     "lr_final",        0, 0,                  CURVE,   15) /* the lr of the last step (not scaled) */ \
    X(double,        lr_power,        ,                   F64,     "lr_power",        0, 0,                  CURVE,   16) /* POLY's exponent */ \
    X(char,          dataset,         [32],               STR,     "dataset",         0, 0,                  ALWAYS,  20) /* "cifar10", "imagefolder", "npy" */ \
    X(int,           pad,             ,                   I32,     "pad",             0, IR_MAX_PAD,         ALWAYS,  21) /* zero padding before the crop, 0 = none */ \
    X(int,           random_crop,     ,                   I32,     "random_crop",     0, IR_MAX_CROP,        ALWAYS,  22) /* crop size, 0 = none */ \
    X(int,           random_mirror,   ,                   I32,     "random_mirror",   0, 1,                  ALWAYS,  23) \
    X(int,           normalize,       ,                   I32,     "normalize",       0, 1,                  ALWAYS,  24) \
    X(double,        mean,            [3],                F64X3,   "mean",            0, 0,                  ALWAYS,  25) \
    X(double,        std,             [3],                F64X3,   "std",             0, 0,                  ALWAYS,  26) \
    X(int,           eval_batch,      ,                   I32,     "eval_batch",      1, IR_MAX_BATCH,       ALWAYS,  2) \
    X(int,           resize,          ,                   I32,     "resize",          1, IR_MAX_CROP,        NONZERO, 27) /* imagefolder: the shorter side before any crop, 0 = the input's */ \
    X(int,           warmup_steps,    ,                   I32,     "warmup_steps",    1, IR_MAX_STEPS,       NONZERO, 28) /* warmup K steps (nanoGPT's ramp), 0 = none */ \
    X(int,           lr_decay_steps,  ,                   I32,     "lr_decay_steps",  1, IR_MAX_STEPS,       NONZERO, 29) /* a curve's steps=: it ends at this step, 0 = at the run's end */ \
    X(double,        clip_norm,       ,                   F64,     "clip_norm",       0, 0,                  NONZERO, 30) /* clip_grad_norm C (max_norm), 0 = none */ \
    X(int,           init_kind,       ,                   I32,     "init_kind",       1, IR_TRAIN_INIT_KAIMING, NONZERO, 31) /* IR_TRAIN_INIT_*: what xavier-kind weights start as */ \
    X(double,        init_std,        ,                   F64,     "init_std",        0, 0,                  NONZERO, 32) /* init normal(std=S), 0 = IR_INIT_NORMAL_STD */ \
    /* data tokens: the files inside --data DIR (plain names), the window length T */ \
    X(char,          tokens_train,    [64],               STR,     "tokens_train",    0, 0,                  TOKENS,  33) \
    X(char,          tokens_val,      [64],               STR,     "tokens_val",      0, 0,                  TOKENS,  34) \
    X(int,           block,           ,                   I32,     "block",           1, IR_MAX_BLOCK,       TOKENS,  35)
/* clang-format on */

typedef struct {
#define IR_TRAIN_MEMBER(type, name, dims, ...) type name dims;
    IR_TRAIN_FIELDS(IR_TRAIN_MEMBER)
#undef IR_TRAIN_MEMBER
} ir_train;

/* The table as data, for the encodings that walk it. */
typedef enum {
    IR_TK_I32,
    IR_TK_F64,
    IR_TK_F64X3,
    IR_TK_STR,
    IR_TK_ENUM,
    IR_TK_LR,
    IR_TK_LR_PART
} ir_train_kind;
typedef enum { IR_TW_ALWAYS, IR_TW_OPTIM, IR_TW_CURVE, IR_TW_NONZERO, IR_TW_TOKENS } ir_train_when;
/* Whether field f of t is not 0 (an I32 or F64: the NONZERO fields). */
#define IR_TRAIN_NONZERO(t, f)                                              \
    ((f)->kind == IR_TK_F64 ? *(const double *)ir_train_cptr((t), (f)) != 0 \
                            : *(const int *)ir_train_cptr((t), (f)) != 0)
typedef struct {
    const char *name, *key;
    ir_train_kind kind;
    ir_train_when when;
    int lo, hi, rank;
    size_t offset, size; /* of the member in ir_train */
} ir_train_field;
#define IR_TRAIN_COUNT_ONE(...) +1
enum { IR_TRAIN_NFIELDS = 0 IR_TRAIN_FIELDS(IR_TRAIN_COUNT_ONE) };
#undef IR_TRAIN_COUNT_ONE
extern const ir_train_field ir_train_fields[IR_TRAIN_NFIELDS]; /* in the table's order */
/* The member a field describes, in t. */
static inline void *ir_train_ptr(ir_train *t, const ir_train_field *f) {
    return (char *)t + f->offset;
}
static inline const void *ir_train_cptr(const ir_train *t, const ir_train_field *f) {
    return (const char *)t + f->offset;
}

/* The defaults a train section starts from (the article's). */
void ir_train_defaults(ir_train *t);
extern const char *const ir_optimizer_names[IR_OPT_ADAMW + 1]; /* "sgd", "lars", ... */
/* Sets nesterov, exclude, eta, eps, beta1, beta2 to ir_train_defaults's
 * (the plan file and the text form leave them out when they are). */
void ir_train_optim_defaults(ir_train *t);
int ir_train_optim_is_default(const ir_train *t);
/* Validates ranges; 0 when fine, else a message naming the value. */
int ir_train_check(const ir_train *t, char *err, size_t errlen);
void ir_train_print(const ir_train *t, FILE *f);
/* "dict", "cosine", "poly": the text form's and the messages' word. */
const char *ir_lr_kind_name(ir_lr_kind k);

#endif
