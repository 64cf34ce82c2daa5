/* frontend/check_train.c — the train section's checks (fe_check_train):
 * each item's ranges and words at its .net position, into P->train, then
 * the schedule's own rules (ir_train_check) and whether the data can fill
 * the inputs. check.c runs it after the network's checks.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "base/err.h"
#include "ir/validate.h"

typedef struct {
    fe_program *P;
    const fe_map *inputs; /* name -> fe_input */
} checker;

#define ERR(C, loc, ...) fe_error(&(C)->P->diag, (loc), __VA_ARGS__)

/* ---- train section ------------------------------------------------------- */

/* clang-format off */
static const char *item_names[FE_T_COUNT] = {
    [FE_T_BATCH] = "batch", [FE_T_EPOCHS] = "epochs", [FE_T_INIT] = "init",
    [FE_T_OPTIMIZER] = "optimizer", [FE_T_LR] = "lr", [FE_T_LR_SCALING] = "lr_scaling",
    [FE_T_WARMUP] = "warmup", [FE_T_DATA] = "data", [FE_T_EVAL_BATCH] = "eval batch",
    [FE_T_PAD] = "pad", [FE_T_RANDOM_CROP] = "random_crop", [FE_T_RANDOM_MIRROR] = "random_mirror",
    [FE_T_NORMALIZE] = "normalize", [FE_T_RESIZE] = "resize",
    [FE_T_TOKENS_TRAIN] = "train", [FE_T_TOKENS_VAL] = "val", [FE_T_BLOCK] = "block",
    [FE_T_ZERO_INIT_RESIDUAL] = "zero_init_residual",
    [FE_T_CLIP_GRAD_NORM] = "clip_grad_norm",
};
/* clang-format on */

static double num_value(const fe_num *n) { return n->is_float ? n->f : (double)n->i; }

/* An integer in lo..hi, with the message naming `what`. */
static int get_int(checker *C, const fe_num *n, const char *what, int64_t lo, int64_t hi,
                   int *out) {
    if (n->is_float) {
        char hint[96];
        fe_int_hint(1, n->f, hint, sizeof hint);
        ERR(C, n->loc, "%s must be an integer, got %s%s", what, n->text, hint);
        return -1;
    }
    if (n->i < lo) {
        if (lo == 1)
            ERR(C, n->loc, "%s must be positive, got %" PRId64, what, n->i);
        else
            ERR(C, n->loc, "%s must not be negative, got %" PRId64, what, n->i);
        return -1;
    }
    if (n->i > hi) {
        ERR(C, n->loc, "%s must be at most %" PRId64 ", got %" PRId64, what, hi, n->i);
        return -1;
    }
    *out = (int)n->i;
    return 0;
}

enum { POSITIVE, NONNEGATIVE, UNIT }; /* (0, inf), [0, inf), [0, 1) */

static int get_real(checker *C, const fe_num *n, const char *what, int range, double *out) {
    double v = num_value(n);
    if (range == POSITIVE && !(v > 0)) {
        ERR(C, n->loc, "%s must be positive, got %g", what, v);
        return -1;
    }
    if (range == NONNEGATIVE && !(v >= 0)) {
        ERR(C, n->loc, "%s must not be negative, got %g", what, v);
        return -1;
    }
    if (range == UNIT && !(v >= 0 && v < 1)) {
        ERR(C, n->loc, "%s must be in [0, 1), got %g", what, v);
        return -1;
    }
    *out = v;
    return 0;
}

/* Keyword arguments of init/optimizer/lr_scaling: each known, none twice,
 * each of its kind (nesterov a boolean, exclude a list of names, the rest
 * numbers). */
static int check_kws(checker *C, const fe_titem *it, const char *const *allowed) {
    static const char *const kind_name[] = {"a number", "true or false", "a list of names"};
    for (const fe_kw *k = it->kws; k; k = k->next) {
        int known = 0;
        for (const char *const *a = allowed; *a; a++) known |= !strcmp(*a, k->key);
        if (!known) {
            if (!allowed[0])
                ERR(C, k->loc, "'%s' takes no arguments", it->ident);
            else
                ERR(C, k->loc, "unknown keyword argument '%s' for '%s'", k->key, it->ident);
            return -1;
        }
        fe_kw_kind want = !strcmp(k->key, "nesterov")  ? FE_KW_BOOL
                          : !strcmp(k->key, "exclude") ? FE_KW_NAMES
                                                       : FE_KW_NUM;
        if (k->kind != want) {
            ERR(C, k->loc, "argument '%s' of '%s' must be %s", k->key, it->ident, kind_name[want]);
            return -1;
        }
        for (const fe_kw *j = it->kws; j != k; j = j->next)
            if (!strcmp(j->key, k->key)) {
                ERR(C, k->loc, "argument '%s' of '%s' given twice", k->key, it->ident);
                return -1;
            }
    }
    return 0;
}

/* `lr cosine(base=, final=, steps=)`, `lr poly(base=, power=, final=,
 * steps=)`: base (the default lr when omitted) and final in [0, 1e6],
 * power in (0, 100], steps (where the curve ends) 1..IR_MAX_STEPS. */
static int check_lr_curve(checker *C, const fe_titem *it, ir_train *t) {
    static const char *const cosine_kws[] = {"base", "final", "steps", NULL};
    static const char *const poly_kws[] = {"base", "power", "final", "steps", NULL};
    int poly = !strcmp(it->ident, "poly");
    if (!poly && strcmp(it->ident, "cosine")) {
        ERR(C, it->ident_loc,
            "unknown lr schedule '%s' (expected cosine, poly or an {epoch: lr} dict)", it->ident);
        return -1;
    }
    if (check_kws(C, it, poly ? poly_kws : cosine_kws)) return -1;
    t->lr_kind = poly ? IR_LR_POLY : IR_LR_COSINE;
    for (const fe_kw *k = it->kws; k; k = k->next) {
        if (!strcmp(k->key, "steps")) { /* the step it ends at, nanoGPT's lr_decay_iters */
            if (get_int(C, k->value, "steps", 1, IR_MAX_STEPS, &t->lr_decay_steps)) return -1;
            continue;
        }
        double *dst = !strcmp(k->key, "base")    ? &t->lr_value[0]
                      : !strcmp(k->key, "final") ? &t->lr_final
                                                 : &t->lr_power;
        double v = num_value(k->value);
        int bad =
            dst == &t->lr_power ? !(v > 0 && v <= IR_MAX_LR_POWER) : !(v >= 0 && v <= IR_MAX_LR);
        if (bad) {
            ERR(C, k->value->loc, "argument '%s' of '%s' must be in %s, got %g", k->key, it->ident,
                dst == &t->lr_power ? "(0, 100]" : "[0, 1e6]", v);
            return -1;
        }
        *dst = v;
    }
    t->lr_steps = 1, t->lr_epoch[0] = 0;
    return 0;
}

static int check_lr(checker *C, const fe_titem *it, ir_train *t) {
    if (it->ident) return check_lr_curve(C, it, t);
    if (!it->pairs) {
        ERR(C, it->loc, "lr schedule is empty");
        return -1;
    }
    int n = 0;
    for (const fe_pair *p = it->pairs; p; p = p->next, n++) {
        if (n == IR_MAX_LR_STEPS) {
            ERR(C, p->key->loc, "too many lr steps (at most %d)", IR_MAX_LR_STEPS);
            return -1;
        }
        int64_t e = p->key->i;
        if (n == 0 && e != 0) {
            ERR(C, p->key->loc, "lr schedule must start at epoch 0, not %" PRId64, e);
            return -1;
        }
        if (n > 0 && e == t->lr_epoch[n - 1]) {
            ERR(C, p->key->loc, "duplicate lr epoch %" PRId64, e);
            return -1;
        }
        if (n > 0 && e < t->lr_epoch[n - 1]) {
            ERR(C, p->key->loc, "lr schedule epochs must increase: %" PRId64 " after %d", e,
                t->lr_epoch[n - 1]);
            return -1;
        }
        if (e > IR_MAX_EPOCHS) {
            ERR(C, p->key->loc, "lr epoch must be at most %d, got %" PRId64, IR_MAX_EPOCHS, e);
            return -1;
        }
        double v = num_value(p->value);
        if (!(v >= 0)) {
            ERR(C, p->value->loc, "lr must not be negative, got %g", v);
            return -1;
        }
        if (v > IR_MAX_LR) {
            ERR(C, p->value->loc, "lr must be at most 1e6, got %g", v);
            return -1;
        }
        t->lr_epoch[n] = (int)e;
        t->lr_value[n] = v;
    }
    t->lr_steps = n;
    return 0;
}

static int check_normalize(checker *C, const fe_titem *it, ir_train *t) {
    const fe_num *lists[2] = {it->mean, it->std};
    fe_loc locs[2] = {it->mean_loc, it->std_loc};
    for (int l = 0; l < 2; l++) {
        int n = 0;
        for (const fe_num *v = lists[l]; v; v = v->next) n++;
        if (n != 3) {
            ERR(C, locs[l], "%s needs 3 values (one per channel), got %d", l ? "std" : "mean", n);
            return -1;
        }
        int c = 0;
        for (const fe_num *v = lists[l]; v; v = v->next, c++)
            if (l == 0)
                t->mean[c] = num_value(v);
            else if (get_real(C, v, "std", POSITIVE, &t->std[c]))
                return -1;
    }
    t->normalize = 1;
    return 0;
}

static int check_items(checker *C, const fe_titem *items, ir_train *t, const char *section,
                       const fe_titem **warmup);

/* exclude=(bn, bias, norm): the parameter classes, each once. */
static int check_exclude(checker *C, const fe_kw *k, const char *opt, int *out) {
    *out = 0;
    for (const fe_kw *n = k->names; n; n = n->next) {
        int bit = !strcmp(n->key, "bn")     ? IR_EXCLUDE_BN
                  : !strcmp(n->key, "bias") ? IR_EXCLUDE_BIAS
                  : !strcmp(n->key, "norm") ? IR_EXCLUDE_NORM
                                            : 0;
        if (!bit) {
            ERR(C, n->loc,
                "unknown parameter class '%s' in exclude of '%s' (expected bn, bias or norm)",
                n->key, opt);
            return -1;
        }
        if (*out & bit) {
            ERR(C, n->loc, "parameter class '%s' listed twice in exclude of '%s'", n->key, opt);
            return -1;
        }
        *out |= bit;
    }
    return 0;
}

/* optimizer sgd | lars | lamb | adamw (README's train section): the
 * optimizer's own defaults, then its arguments. */
static int check_optimizer(checker *C, const fe_titem *it, ir_train *t) {
    static const char *const kws[][7] = {
        {"momentum", "wd", "nesterov", NULL},
        {"momentum", "wd", "eta", "eps", "exclude", NULL},
        {"beta1", "beta2", "eps", "wd", "exclude", NULL},
        {"beta1", "beta2", "eps", "wd", "exclude", NULL},
    };
    static const double eps[] = {1e-9, 1e-9, 1e-6, 1e-8};
    int opt = 0;
    while (opt <= IR_OPT_ADAMW && strcmp(it->ident, ir_optimizer_names[opt])) opt++;
    if (opt > IR_OPT_ADAMW) {
        ERR(C, it->ident_loc, "unknown optimizer '%s' (expected sgd, lars, lamb or adamw)",
            it->ident);
        return -1;
    }
    if (check_kws(C, it, kws[opt])) return -1;
    t->optimizer = (ir_optimizer)opt;
    ir_train_optim_defaults(t);
    t->eps = eps[opt];
    t->exclude = opt == IR_OPT_LARS || opt == IR_OPT_LAMB ? IR_EXCLUDE_BN | IR_EXCLUDE_BIAS : 0;
    for (const fe_kw *k = it->kws; k; k = k->next) {
        const char *key = k->key;
        int rc = 0;
        if (!strcmp(key, "nesterov"))
            t->nesterov = k->boolean;
        else if (!strcmp(key, "exclude"))
            rc = check_exclude(C, k, it->ident, &t->exclude);
        else if (!strcmp(key, "wd"))
            rc = get_real(C, k->value, "wd", NONNEGATIVE, &t->wd);
        else if (!strcmp(key, "eta") || !strcmp(key, "eps")) {
            rc = get_real(C, k->value, key, POSITIVE, key[1] == 't' ? &t->eta : &t->eps);
            if (!rc && !(num_value(k->value) <= 1)) {
                ERR(C, k->value->loc, "%s must be at most 1, got %g", key, num_value(k->value));
                rc = -1;
            }
        } else
            rc = get_real(C, k->value, key, UNIT,
                          !strcmp(key, "momentum") ? &t->momentum
                          : !strcmp(key, "beta1")  ? &t->beta1
                                                   : &t->beta2);
        if (rc) return -1;
    }
    return 0;
}

/* train "FILE", val "FILE", block T: items of a tokens data section. */
static int check_tokens_item(checker *C, const fe_titem *it, ir_train *t) {
    if (strcmp(t->dataset, "tokens")) {
        ERR(C, it->loc, "%s is for a tokens dataset, not %s", item_names[it->kind], t->dataset);
        return -1;
    }
    if (it->kind == FE_T_BLOCK) return get_int(C, it->num, "block", 1, IR_MAX_BLOCK, &t->block);
    char *dst = it->kind == FE_T_TOKENS_TRAIN ? t->tokens_train : t->tokens_val;
    char why[256];
    if (ir_tokens_file_ok(it->ident, why, sizeof why)) {
        ERR(C, it->ident_loc, "%s", why);
        return -1;
    }
    if (strlen(it->ident) >= sizeof t->tokens_train) {
        ERR(C, it->ident_loc, "token file name '%s' is too long (at most %zu characters)",
            it->ident, sizeof t->tokens_train - 1);
        return -1;
    }
    snprintf(dst, sizeof t->tokens_train, "%s", it->ident);
    return 0;
}

static int check_item(checker *C, const fe_titem *it, ir_train *t, const fe_titem **warmup) {
    static const char *const linear_kws[] = {"reference_batch", NULL};
    static const char *const no_kws[] = {NULL};
    switch (it->kind) {
    case FE_T_BATCH: return get_int(C, it->num, "batch", 1, IR_MAX_BATCH, &t->batch);
    case FE_T_EPOCHS: return get_int(C, it->num, "epochs", 1, IR_MAX_EPOCHS, &t->epochs);
    case FE_T_EVAL_BATCH: return get_int(C, it->num, "eval batch", 1, IR_MAX_BATCH, &t->eval_batch);
    case FE_T_WARMUP: /* K epochs, or K steps (ident "steps") */
        *warmup = it;
        return it->ident ? get_int(C, it->num, "warmup", 1, IR_MAX_STEPS, &t->warmup_steps)
                         : get_int(C, it->num, "warmup", 0, IR_MAX_EPOCHS, &t->warmup_epochs);
    case FE_T_INIT: { /* xavier(magnitude=), normal(std=), kaiming: IR_TRAIN_INIT_* */
        static const char *const kws[][2] = {{"magnitude", NULL}, {"std", NULL}, {NULL}};
        int k = t->init_kind = !strcmp(it->ident, "normal") ? 1 : !strcmp(it->ident, "kaiming") * 2;
        if (!k && strcmp(it->ident, "xavier"))
            ERR(C, it->ident_loc, "unknown initializer '%s' (expected xavier, normal or kaiming)",
                it->ident);
        int rc = (!k && strcmp(it->ident, "xavier")) || check_kws(C, it, kws[k]) ? -1 : 0;
        for (const fe_kw *w = it->kws; w && !rc; w = w->next)
            rc = get_real(C, w->value, w->key, POSITIVE, k ? &t->init_std : &t->init_magnitude);
        return rc;
    }
    case FE_T_OPTIMIZER: return check_optimizer(C, it, t);
    case FE_T_LR: return check_lr(C, it, t);
    case FE_T_LR_SCALING:
        if (!strcmp(it->ident, "none")) {
            t->lr_scaling = IR_LR_SCALING_NONE;
            return check_kws(C, it, no_kws);
        }
        if (ir_lr_scaling_parse(it->ident) < 0) {
            ERR(C, it->ident_loc, "unknown lr scaling '%s' (expected none, linear or sqrt)",
                it->ident);
            return -1;
        }
        t->lr_scaling = (ir_lr_scaling)ir_lr_scaling_parse(it->ident);
        if (check_kws(C, it, linear_kws)) return -1;
        for (const fe_kw *k = it->kws; k; k = k->next)
            if (get_int(C, k->value, "reference_batch", 1, IR_MAX_REF_BATCH, &t->reference_batch))
                return -1;
        return 0;
    case FE_T_DATA:
        if (!ir_dataset_known(it->ident)) {
            ERR(C, it->ident_loc, "unknown dataset '%s' (expected %s)", it->ident,
                ir_dataset_names());
            return -1;
        }
        snprintf(t->dataset, sizeof t->dataset, "%s", it->ident);
        /* A data section lists all the augmentation there is. */
        t->pad = t->random_crop = t->random_mirror = t->normalize = t->resize = 0;
        for (int c = 0; c < 3; c++) t->mean[c] = 0, t->std[c] = 1;
        if (!strcmp(t->dataset, "tokens")) /* dprun --data DIR's nanoGPT names */
            snprintf(t->tokens_train, sizeof t->tokens_train, "train.bin"),
                snprintf(t->tokens_val, sizeof t->tokens_val, "val.bin");
        if (check_items(C, it->items, t, "data section", warmup)) return -1;
        if (!strcmp(t->dataset, "tokens") && !t->block) {
            ERR(C, it->loc, "data tokens needs `block T`, the window length of its inputs");
            return -1;
        }
        return 0;
    case FE_T_PAD: return get_int(C, it->num, "pad", 0, IR_MAX_PAD, &t->pad);
    case FE_T_RANDOM_CROP:
        return get_int(C, it->num, "random_crop", 1, IR_MAX_CROP, &t->random_crop);
    case FE_T_RANDOM_MIRROR: t->random_mirror = 1; return 0;
    case FE_T_NORMALIZE: return check_normalize(C, it, t);
    case FE_T_RESIZE:
        if (strcmp(t->dataset, "imagefolder")) {
            ERR(C, it->loc, "resize is for an imagefolder dataset, not %s", t->dataset);
            return -1;
        }
        return get_int(C, it->num, "resize", 1, IR_MAX_CROP, &t->resize);
    case FE_T_ZERO_INIT_RESIDUAL: C->P->zero_init_residual = 1; return 0;
    case FE_T_CLIP_GRAD_NORM: /* PyTorch's clip_grad_norm_(max_norm), passes/optimizer.c */
        return get_real(C, it->num, "clip_grad_norm", POSITIVE, &t->clip_norm);
    case FE_T_TOKENS_TRAIN:
    case FE_T_TOKENS_VAL:
    case FE_T_BLOCK: return check_tokens_item(C, it, t);
    case FE_T_COUNT: break;
    }
    return 0;
}

static int check_items(checker *C, const fe_titem *items, ir_train *t, const char *section,
                       const fe_titem **warmup) {
    const fe_titem *seen[FE_T_COUNT] = {0};
    for (const fe_titem *it = items; it; it = it->next) {
        if (seen[it->kind]) {
            ERR(C, it->loc, "duplicate '%s' in %s (first at %d:%d)", item_names[it->kind], section,
                seen[it->kind]->loc.line, seen[it->kind]->loc.col);
            return -1;
        }
        seen[it->kind] = it;
        if (check_item(C, it, t, warmup)) return -1;
    }
    return 0;
}

/* data tokens fills `tokens int[T]` with window[0:T] and `targets int[T]`
 * with window[1:T+1]; nothing else (an image it has not). */
static int check_tokens_fit(checker *C, const ir_train *t, const fe_titem *data) {
    static const char *const names[] = {"tokens", "targets"};
    for (int k = 0; k < 2; k++) {
        fe_input *in = fe_map_get(C->inputs, names[k]);
        if (!in) {
            ERR(C, data->loc,
                "data tokens fills the inputs 'tokens' and 'targets'; the network has no "
                "'%s' (declare `input %s int[%d]`)",
                names[k], names[k], t->block);
            return -1;
        }
        if (!in->integer || !in->dims || in->dims->next || in->dims->i != t->block) {
            ERR(C, in->loc,
                "data tokens (block %d) fills '%s' as int[%d]; declare `input %s int[%d]`",
                t->block, names[k], t->block, names[k], t->block);
            return -1;
        }
    }
    for (fe_input *in = C->P->inputs; in; in = in->next)
        if (strcmp(in->name, "tokens") && strcmp(in->name, "targets")) {
            ERR(C, in->loc, "data tokens fills only 'tokens' and 'targets', not the input '%s'",
                in->name);
            return -1;
        }
    return 0;
}

/* A data section that names its dataset must be able to fill the input
 * image (dprun would refuse it only later); without one, the program may
 * be meant for --data synthetic, which takes any shape. */
static int check_data_fits(checker *C, const ir_train *t) {
    const fe_titem *data = NULL;
    for (const fe_titem *it = C->P->trains->items; it; it = it->next)
        if (it->kind == FE_T_DATA) data = it;
    if (data && !strcmp(t->dataset, "tokens")) return check_tokens_fit(C, t, data);
    fe_input *image = fe_map_get(C->inputs, "image");
    if (!data || !image || image->classes) return 0;
    int64_t d[3], n = 0;
    for (fe_num *k = image->dims; k; k = k->next, n++)
        if (n < 3) d[n] = k->i;
    char err[256];
    if (n == 3 && ir_dataset_fits(t, (int)d[0], (int)d[1], (int)d[2], err, sizeof err)) {
        ERR(C, data->loc, "%s (input at %d:%d)", err, image->loc.line, image->loc.col);
        return -1;
    }
    return 0;
}

int fe_check_train(fe_program *P, const fe_map *inputs) {
    checker c = {P, inputs}, *C = &c;
    ir_train *t = &P->train;
    ir_train_defaults(t);
    if (!P->trains) return 0;
    const fe_titem *warmup = NULL;
    if (check_items(C, P->trains->items, t, "train section", &warmup)) return -1;
    if (warmup && t->warmup_epochs > t->epochs) {
        ERR(C, warmup->num->loc, "warmup of %d epochs is longer than training (%d epochs)",
            t->warmup_epochs, t->epochs);
        return -1;
    }
    char err[256];
    if (ir_train_check(t, err, sizeof err)) { /* a rule the checks above missed */
        ERR(C, P->trains->loc, "%s", err);
        return -1;
    }
    return check_data_fits(C, t);
}
