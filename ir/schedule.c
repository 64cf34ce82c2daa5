/* ir/schedule.c — the train section's settings (ir_train): the field
 * table as data, defaults, checks, names and the printout. */
#include "ir/ir.h"

#include <string.h>

#include "base/err.h"
#include "ir/validate.h"

const ir_train_field ir_train_fields[IR_TRAIN_NFIELDS] = {
#define FIELD(type, name, dims, kind, key, lo, hi, when, rank) \
    {#name,                                                    \
     key,                                                      \
     IR_TK_##kind,                                             \
     IR_TW_##when,                                             \
     lo,                                                       \
     hi,                                                       \
     rank,                                                     \
     offsetof(ir_train, name),                                 \
     sizeof(((ir_train *)0)->name)},
    IR_TRAIN_FIELDS(FIELD)
#undef FIELD
};

/* An ENUM field is read and written as an int. */
_Static_assert(sizeof(ir_optimizer) == sizeof(int) && sizeof(ir_lr_scaling) == sizeof(int) &&
                   sizeof(ir_lr_kind) == sizeof(int),
               "ir_train's enums are int-sized");

void ir_train_defaults(ir_train *t) {
    memset(t, 0, sizeof *t);
    t->batch = 128;
    t->epochs = 1;
    t->init_magnitude = 2.24;
    t->optimizer = IR_OPT_SGD;
    t->momentum = 0.9;
    t->wd = 0.0001;
    t->eta = 0.001, t->eps = 1e-9, t->beta1 = 0.9, t->beta2 = 0.999;
    t->lr_steps = 1;
    t->lr_epoch[0] = 0;
    t->lr_value[0] = 0.1;
    t->lr_scaling = IR_LR_SCALING_NONE;
    t->reference_batch = 128;
    t->warmup_epochs = 0;
    t->lr_kind = IR_LR_DICT;
    t->lr_power = 2;
    snprintf(t->dataset, sizeof t->dataset, "cifar10");
    for (int c = 0; c < 3; c++) t->std[c] = 1.0;
    t->eval_batch = 128;
}

const char *ir_lr_kind_name(ir_lr_kind k) {
    return k == IR_LR_COSINE ? "cosine" : k == IR_LR_POLY ? "poly" : "dict";
}

const char *const ir_lr_scaling_names[IR_LR_SCALING_SQRT + 1] = {"none", "linear", "sqrt"};

int ir_lr_scaling_parse(const char *name) {
    for (int i = 0; i <= IR_LR_SCALING_SQRT; i++)
        if (!strcmp(name, ir_lr_scaling_names[i])) return i;
    return -1;
}

const char *const ir_optimizer_names[IR_OPT_ADAMW + 1] = {"sgd", "lars", "lamb", "adamw"};

void ir_train_optim_defaults(ir_train *t) {
    ir_train d;
    ir_train_defaults(&d);
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++) {
        const ir_train_field *f = &ir_train_fields[i];
        if (f->when == IR_TW_OPTIM) memcpy(ir_train_ptr(t, f), ir_train_cptr(&d, f), f->size);
    }
}

int ir_train_optim_is_default(const ir_train *t) {
    ir_train d = *t;
    ir_train_optim_defaults(&d);
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++) {
        const ir_train_field *f = &ir_train_fields[i];
        if (f->when != IR_TW_OPTIM) continue;
        const void *x = ir_train_cptr(t, f), *y = ir_train_cptr(&d, f);
        /* the OPTIM fields are I32 and F64: compared as numbers */
        if (f->kind == IR_TK_F64 ? *(const double *)x != *(const double *)y
                                 : *(const int *)x != *(const int *)y)
            return 0;
    }
    return 1;
}

/* The datasets dprun reads (runtime/data) and the inputs each fills. */
static const char *const datasets[] = {"cifar10", "imagefolder", "npy", "tokens"};

int ir_dataset_known(const char *name) {
    for (size_t i = 0; i < sizeof datasets / sizeof *datasets; i++)
        if (!strcmp(name, datasets[i])) return 1;
    return 0;
}

const char *ir_dataset_names(void) { return "cifar10, imagefolder, npy or tokens"; }

int ir_tokens_file_ok(const char *name, char *err, size_t errlen) {
    if (!*name) return base_fail(err, errlen, "a token file's name is empty");
    if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return base_fail(err, errlen,
                         "token file '%s' is not a plain file name (no '/', '.' or '..': "
                         "the file is looked up inside dprun's --data folder)",
                         name);
    for (const char *c = name; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return base_fail(err, errlen, "token file name has a control character");
    return 0;
}

int ir_dataset_fits(const ir_train *t, int c, int h, int w, char *err, size_t errlen) {
    if (strcmp(t->dataset, "cifar10")) return 0; /* its images take any size */
    const int C = 3, H = 32, W = 32;             /* runtime/data/cifar.c's records */
    if (c != C)
        return base_fail(err, errlen, "data cifar10 has %d channels; the input 'image' has %d", C,
                         c);
    if (t->random_crop > 0 && (t->random_crop != h || t->random_crop != w))
        return base_fail(err, errlen,
                         "random_crop %d gives %dx%d images; the input 'image' is %dx%d",
                         t->random_crop, t->random_crop, t->random_crop, h, w);
    if (t->random_crop > H + 2 * t->pad || t->random_crop > W + 2 * t->pad)
        return base_fail(err, errlen, "random_crop %d is larger than cifar10's %dx%d padded by %d",
                         t->random_crop, H, W, t->pad);
    if (t->random_crop == 0 && (h != H || w != W)) {
        char hint[96] = "";
        if (h == w && h <= H + 2 * t->pad)
            snprintf(hint, sizeof hint, " (random_crop %d would cut them from the padded images)",
                     h);
        return base_fail(err, errlen,
                         "data cifar10 gives %dx%d images; the input 'image' is %dx%d%s", H, W, h,
                         w, hint);
    }
    return 0;
}

int ir_train_check(const ir_train *t, char *err, size_t errlen) {
    return ir_train_check_field(t, NULL, err, errlen);
}

/* Fails naming field f (the text form's key). */
#define BAD(f, ...) (field ? *field = (f) : 0, base_fail(err, errlen, __VA_ARGS__))

/* Batch sizes, epochs and the initialisation. */
static int check_sizes(const ir_train *t, const char **field, char *err, size_t errlen) {
    if (t->batch <= 0) return BAD("batch", "batch must be positive, got %d", t->batch);
    if (t->batch > IR_MAX_BATCH)
        return BAD("batch", "batch must be at most %d, got %d", IR_MAX_BATCH, t->batch);
    if (t->epochs <= 0) return BAD("epochs", "epochs must be positive, got %d", t->epochs);
    if (t->epochs > IR_MAX_EPOCHS)
        return BAD("epochs", "epochs must be at most %d, got %d", IR_MAX_EPOCHS, t->epochs);
    if (t->eval_batch <= 0)
        return BAD("eval_batch", "eval batch must be positive, got %d", t->eval_batch);
    if (t->eval_batch > IR_MAX_BATCH)
        return BAD("eval_batch", "eval batch must be at most %d, got %d", IR_MAX_BATCH,
                   t->eval_batch);
    if (!(t->init_magnitude > 0))
        return BAD("init_magnitude", "init magnitude must be positive, got %g", t->init_magnitude);
    return 0;
}

/* The optimizer and the ranges of its settings. */
static int check_optimizer(const ir_train *t, const char **field, char *err, size_t errlen) {
    if ((unsigned)t->optimizer > IR_OPT_ADAMW)
        return BAD("optimizer", "unknown optimizer %d", t->optimizer);
    if (!(t->momentum >= 0 && t->momentum < 1))
        return BAD("momentum", "momentum must be in [0, 1), got %g", t->momentum);
    if (!(t->wd >= 0)) return BAD("wd", "weight decay must be >= 0, got %g", t->wd);
    if (!(t->wd <= IR_MAX_WD)) return BAD("wd", "weight decay must be at most 1, got %g", t->wd);
    if (t->nesterov != 0 && t->nesterov != 1)
        return BAD("nesterov", "nesterov must be 0 or 1, got %d", t->nesterov);
    if (t->exclude & ~IR_EXCLUDE_ALL)
        return BAD("exclude", "unknown exclude classes %#x", (unsigned)t->exclude);
    if (!(t->eta > 0 && t->eta <= 1)) return BAD("eta", "eta must be in (0, 1], got %g", t->eta);
    if (!(t->eps > 0 && t->eps <= 1)) return BAD("eps", "eps must be in (0, 1], got %g", t->eps);
    if (!(t->beta1 >= 0 && t->beta1 < 1))
        return BAD("beta1", "beta1 must be in [0, 1), got %g", t->beta1);
    if (!(t->beta2 >= 0 && t->beta2 < 1))
        return BAD("beta2", "beta2 must be in [0, 1), got %g", t->beta2);
    return 0;
}

/* What the optimizer does not use stays at its default (nothing reads
 * it; a value there says something about training that is not so). */
static int check_unused(const ir_train *t, const char **field, char *err, size_t errlen) {
    ir_train d;
    ir_train_defaults(&d);
    int sgd = t->optimizer == IR_OPT_SGD, lars = t->optimizer == IR_OPT_LARS;
    const char *opt = ir_optimizer_names[t->optimizer];
    if (!sgd && t->nesterov) return BAD("nesterov", "nesterov=1, but %s has no nesterov", opt);
    if (sgd && t->exclude) return BAD("exclude", "exclude=%d, but sgd has no exclude", t->exclude);
    if (!lars && t->eta != d.eta)
        return BAD("eta", "eta=%g, but %s has no eta (it stays %g)", t->eta, opt, d.eta);
    if (sgd && t->eps != d.eps)
        return BAD("eps", "eps=%g, but sgd has no eps (it stays %g)", t->eps, d.eps);
    if ((sgd || lars) && (t->beta1 != d.beta1 || t->beta2 != d.beta2))
        return BAD(t->beta1 != d.beta1 ? "beta1" : "beta2",
                   "beta1=%g, beta2=%g, but %s has neither (they stay %g, %g)", t->beta1, t->beta2,
                   opt, d.beta1, d.beta2);
    if (!sgd && !lars && t->momentum != d.momentum)
        return BAD("momentum", "momentum=%g, but %s has none (it stays %g)", t->momentum, opt,
                   d.momentum);
    return 0;
}

/* The lr dict or curve, its scaling and warmup. */
static int check_lr(const ir_train *t, const char **field, char *err, size_t errlen) {
    if (t->lr_steps < 1 || t->lr_steps > IR_MAX_LR_STEPS)
        return BAD("lr", "lr schedule needs 1 to %d entries, got %d", IR_MAX_LR_STEPS, t->lr_steps);
    if (t->lr_epoch[0] != 0)
        return BAD("lr", "lr schedule must start at epoch 0, starts at %d", t->lr_epoch[0]);
    for (int i = 0; i < t->lr_steps; i++) {
        if (!(t->lr_value[i] >= 0))
            return BAD("lr", "lr at epoch %d must not be negative, got %.10g", t->lr_epoch[i],
                       t->lr_value[i]);
        if (t->lr_value[i] > IR_MAX_LR)
            return BAD("lr", "lr at epoch %d must be at most 1e6, got %.10g", t->lr_epoch[i],
                       t->lr_value[i]);
        if (i && t->lr_epoch[i] <= t->lr_epoch[i - 1])
            return BAD("lr", "lr schedule epochs must increase: %d after %d", t->lr_epoch[i],
                       t->lr_epoch[i - 1]);
        if (t->lr_epoch[i] > IR_MAX_EPOCHS)
            return BAD("lr", "lr epoch must be at most %d, got %d", IR_MAX_EPOCHS, t->lr_epoch[i]);
    }
    if (t->lr_kind != IR_LR_DICT && t->lr_kind != IR_LR_COSINE && t->lr_kind != IR_LR_POLY)
        return BAD("lr_curve", "unknown lr curve %d", t->lr_kind);
    if (t->lr_kind != IR_LR_DICT && t->lr_steps != 1)
        return BAD("lr", "a %s lr has one base value, got %d", ir_lr_kind_name(t->lr_kind),
                   t->lr_steps);
    if (!(t->lr_final >= 0 && t->lr_final <= IR_MAX_LR))
        return BAD("lr_final", "final lr must be in [0, 1e6], got %.10g", t->lr_final);
    /* every curve: a dict's power is unused, but the defaults' 2 */
    if (!(t->lr_power > 0 && t->lr_power <= IR_MAX_LR_POWER))
        return BAD("lr_power", "poly power must be in (0, 100], got %.10g", t->lr_power);
    if ((unsigned)t->lr_scaling > IR_LR_SCALING_SQRT)
        return BAD("lr_scaling", "unknown lr scaling %d", t->lr_scaling);
    if (t->reference_batch <= 0)
        return BAD("reference_batch", "reference batch must be positive, got %d",
                   t->reference_batch);
    if (t->reference_batch > IR_MAX_REF_BATCH)
        return BAD("reference_batch", "reference batch must be at most %d, got %d",
                   IR_MAX_REF_BATCH, t->reference_batch);
    if (t->warmup_epochs < 0 || t->warmup_epochs > t->epochs)
        return BAD("warmup_epochs", "warmup of %d epochs does not fit %d epochs of training",
                   t->warmup_epochs, t->epochs);
    if (t->warmup_steps < 0 || t->warmup_steps > IR_MAX_STEPS)
        return BAD("warmup_steps", "warmup steps must be in 0..%d, got %d", IR_MAX_STEPS,
                   t->warmup_steps);
    if (t->warmup_steps && t->warmup_epochs)
        return BAD("warmup_steps", "warmup of %d steps and of %d epochs: give one", t->warmup_steps,
                   t->warmup_epochs);
    if (t->lr_decay_steps < 0 || t->lr_decay_steps > IR_MAX_STEPS)
        return BAD("lr_decay_steps", "a curve's steps must be in 0..%d, got %d", IR_MAX_STEPS,
                   t->lr_decay_steps);
    if (t->lr_decay_steps && t->lr_kind == IR_LR_DICT)
        return BAD("lr_decay_steps", "steps=%d is a cosine or poly curve's, not the dict's",
                   t->lr_decay_steps);
    if (t->init_kind < IR_TRAIN_INIT_XAVIER || t->init_kind > IR_TRAIN_INIT_KAIMING)
        return BAD("init_kind", "unknown initializer %d", t->init_kind);
    if (!(t->init_std >= 0 && t->init_std <= IR_MAX_REAL))
        return BAD("init_std", "init normal's std must be in (0, 1e6], got %g", t->init_std);
    if (t->init_std && t->init_kind != IR_TRAIN_INIT_NORMAL)
        return BAD("init_std", "std=%g is init normal's", t->init_std);
    if (!(t->clip_norm >= 0 && t->clip_norm <= IR_MAX_REAL))
        return BAD("clip_norm", "clip_grad_norm must be in (0, 1e6], got %g", t->clip_norm);
    if (t->lr_decay_steps && t->lr_decay_steps <= t->warmup_steps)
        return BAD("lr_decay_steps", "the curve's steps=%d must be past its warmup of %d steps",
                   t->lr_decay_steps, t->warmup_steps);
    return 0;
}

/* data tokens: its files and window; the other datasets have none. */
static int check_tokens(const ir_train *t, const char **field, char *err, size_t errlen) {
    int tokens = !strcmp(t->dataset, "tokens");
    const char *names[2] = {t->tokens_train, t->tokens_val},
               *keys[2] = {"tokens_train", "tokens_val"};
    for (int k = 0; k < 2; k++) {
        if (memchr(names[k], 0, sizeof t->tokens_train) == NULL)
            return BAD(keys[k], "token file name not terminated");
        if (!tokens && *names[k]) return BAD(keys[k], "token files are for a tokens dataset");
        char why[200];
        if (tokens && ir_tokens_file_ok(names[k], why, sizeof why)) return BAD(keys[k], "%s", why);
    }
    if (!tokens && t->block)
        return BAD("block", "block is for a tokens dataset, not %s", t->dataset);
    if (tokens && (t->block < 1 || t->block > IR_MAX_BLOCK))
        return BAD("block", "block must be in 1..%d, got %d", IR_MAX_BLOCK, t->block);
    if (tokens && (t->pad || t->random_crop || t->random_mirror || t->normalize))
        return BAD("dataset", "a tokens dataset has no image augmentation");
    return 0;
}

/* The dataset and its augmentation. */
static int check_data(const ir_train *t, const char **field, char *err, size_t errlen) {
    if (memchr(t->dataset, 0, sizeof t->dataset) == NULL)
        return BAD("dataset", "dataset name not terminated");
    if (!ir_dataset_known(t->dataset))
        return BAD("dataset", "unknown dataset '%s' (expected %s)", t->dataset, ir_dataset_names());
    if (t->pad < 0 || t->pad > IR_MAX_PAD)
        return BAD("pad", "pad must be in 0..%d, got %d", IR_MAX_PAD, t->pad);
    if (t->random_crop < 0 || t->random_crop > IR_MAX_CROP)
        return BAD("random_crop", "random_crop must be in 0..%d, got %d", IR_MAX_CROP,
                   t->random_crop);
    if (t->resize < 0 || t->resize > IR_MAX_CROP)
        return BAD("resize", "resize must be in 0..%d, got %d", IR_MAX_CROP, t->resize);
    if (t->resize && strcmp(t->dataset, "imagefolder"))
        return BAD("resize", "resize is for an imagefolder dataset, not %s", t->dataset);
    if (check_tokens(t, field, err, errlen)) return -1;
    if (t->random_mirror != 0 && t->random_mirror != 1)
        return BAD("random_mirror", "random_mirror must be 0 or 1, got %d", t->random_mirror);
    if (t->normalize != 0 && t->normalize != 1)
        return BAD("normalize", "normalize must be 0 or 1, got %d", t->normalize);
    for (int c = 0; c < 3; c++) {
        if (!(t->std[c] > 0) || !(t->std[c] <= IR_MAX_REAL))
            return BAD("std", "normalize std must be in (0, 1e6], got %g", t->std[c]);
        if (!(t->mean[c] >= -IR_MAX_REAL && t->mean[c] <= IR_MAX_REAL))
            return BAD("mean", "normalize mean must be in [-1e6, 1e6], got %g", t->mean[c]);
    }
    return 0;
}

int ir_train_check_field(const ir_train *t, const char **field, char *err, size_t errlen) {
    if (field) *field = NULL;
    if (check_sizes(t, field, err, errlen) || check_optimizer(t, field, err, errlen) ||
        check_unused(t, field, err, errlen) || check_lr(t, field, err, errlen) ||
        check_data(t, field, err, errlen))
        return -1;
    return 0;
}
#undef BAD

void ir_train_print(const ir_train *t, FILE *f) {
    fprintf(f, "  batch %d per device, %d epochs, eval batch %d\n", t->batch, t->epochs,
            t->eval_batch);
    if (t->init_kind == IR_TRAIN_INIT_NORMAL)
        fprintf(f, "  init normal(std=%g)\n", t->init_std ? t->init_std : IR_INIT_NORMAL_STD);
    else if (t->init_kind == IR_TRAIN_INIT_KAIMING)
        fprintf(f, "  init kaiming\n");
    else
        fprintf(f, "  init xavier(magnitude=%g)\n", t->init_magnitude);
    char exclude[32];
    snprintf(exclude, sizeof exclude, "%s%s%s%s%s", t->exclude & IR_EXCLUDE_BN ? "bn" : "",
             (t->exclude & IR_EXCLUDE_BN) && (t->exclude & ~IR_EXCLUDE_BN) ? ", " : "",
             t->exclude & IR_EXCLUDE_BIAS ? "bias" : "",
             (t->exclude & IR_EXCLUDE_BIAS) && (t->exclude & IR_EXCLUDE_NORM) ? ", " : "",
             t->exclude & IR_EXCLUDE_NORM ? "norm" : "");
    switch (t->optimizer) {
    case IR_OPT_SGD:
        fprintf(f, "  optimizer sgd(momentum=%g, wd=%g%s)\n", t->momentum, t->wd,
                t->nesterov ? ", nesterov=true" : "");
        break;
    case IR_OPT_LARS:
        fprintf(f, "  optimizer lars(momentum=%g, wd=%g, eta=%g, eps=%g, exclude=(%s))\n",
                t->momentum, t->wd, t->eta, t->eps, exclude);
        break;
    default:
        fprintf(f, "  optimizer %s(beta1=%g, beta2=%g, eps=%g, wd=%g, exclude=(%s))\n",
                ir_optimizer_names[t->optimizer], t->beta1, t->beta2, t->eps, t->wd, exclude);
    }
    char steps[32] = "";
    if (t->lr_decay_steps) snprintf(steps, sizeof steps, ", steps=%d", t->lr_decay_steps);
    if (t->lr_kind == IR_LR_COSINE)
        fprintf(f, "  lr cosine(base=%g, final=%g%s)\n", t->lr_value[0], t->lr_final, steps);
    else if (t->lr_kind == IR_LR_POLY)
        fprintf(f, "  lr poly(base=%g, power=%g, final=%g%s)\n", t->lr_value[0], t->lr_power,
                t->lr_final, steps);
    else {
        fprintf(f, "  lr {");
        for (int i = 0; i < t->lr_steps; i++)
            fprintf(f, "%s%d: %g", i ? ", " : "", t->lr_epoch[i], t->lr_value[i]);
        fprintf(f, "}\n");
    }
    if (t->clip_norm) fprintf(f, "  clip_grad_norm %g\n", t->clip_norm);
    if (t->lr_scaling != IR_LR_SCALING_NONE)
        fprintf(f, "  lr_scaling %s(reference_batch=%d)\n", ir_lr_scaling_names[t->lr_scaling],
                t->reference_batch);
    else
        fprintf(f, "  lr_scaling none\n");
    if (t->warmup_steps)
        fprintf(f, "  warmup %d steps\n", t->warmup_steps);
    else
        fprintf(f, "  warmup %d epochs\n", t->warmup_epochs);
    fprintf(f, "  data %s {", t->dataset);
    if (t->resize) fprintf(f, " resize %d;", t->resize);
    if (!strcmp(t->dataset, "tokens"))
        fprintf(f, " train \"%s\"; val \"%s\"; block %d;", t->tokens_train, t->tokens_val,
                t->block);
    if (t->pad) fprintf(f, " pad %d;", t->pad);
    if (t->random_crop) fprintf(f, " random_crop %d;", t->random_crop);
    if (t->random_mirror) fprintf(f, " random_mirror;");
    if (t->normalize)
        fprintf(f, " normalize mean(%g, %g, %g) std(%g, %g, %g)", t->mean[0], t->mean[1],
                t->mean[2], t->std[0], t->std[1], t->std[2]);
    fprintf(f, " }\n");
}
