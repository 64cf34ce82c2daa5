/* codegen/batchnorm.c — batchnorm as one step of several kernels, for a
 * graph the lowering left it in (f32 only; passes/lower.c splits it into
 * bn_mean, bn_var and bn_apply otherwise): the per-channel statistics, a
 * template expanded into the normalising kernel, and the running
 * statistics' update in place. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "codegen/internal.h"

/* ---- templates for elementwise and injective ops ------------------------------
 * A template is an expression for the output element i:
 *   $k    input k at i            $kc  input k at the channel of i
 *   $ks   input k's element 0     $ko  input k at i / inner (outer index)
 *   $y    the output at i (read-modify-write)
 *   @k    float attribute k       #M   1/M (elements per channel)
 *   #I    1/inner (elements per (n, c) plane)
 * Channel and inner follow the output shape: [N, C, inner...]. */
typedef struct {
    const ir_type *out;
    int nin;
    ir_dtype in_type[IR_MAX_INPUTS];
    double fattr[IR_MAX_FATTRS];
} tmpl_env;

static int expand(cg_ctx *cx, const char *op, const char *tmpl, const tmpl_env *e) {
    cg_kdef kd = {.op = op, .cost = 1};
    kd.nargs = e->nin + 1;
    kd.type[0] = e->out->dtype;
    kd.writes[0] = 1;
    for (int j = 0; j < e->nin; j++) kd.type[j + 1] = e->in_type[j];
    int64_t C = e->out->ndim > 1 ? e->out->dim[1] : 1, inner = cg_inner_of(e->out);
    int64_t M = e->out->dim[0] * inner;
    cg_str ex = {0};
    int need_c = 0;
    char lit[40];
    for (const char *t = tmpl; *t; t++) {
        if (*t == '$' && t[1] == 'y') {
            cg_str_printf(&ex, "b0[i]");
            t++;
        } else if (*t == '$' && t[1] >= '0' && t[1] <= '9') {
            int k = t[1] - '0', arg = k + 1;
            if (k >= e->nin) {
                cg_str_free(&ex);
                return cg_fail(cx, "%s: template names input %d of %d", op, k, e->nin);
            }
            char suf = t[2];
            if (suf == 'c') {
                cg_str_printf(&ex, "b%d[c]", arg);
                need_c = 1;
                t += 2;
            } else if (suf == 's') {
                cg_str_printf(&ex, "b%d[0]", arg);
                t += 2;
            } else if (suf == 'o') {
                cg_str_printf(&ex, "b%d[i / %" PRId64 "]", arg, inner);
                t += 2;
            } else {
                cg_str_printf(&ex, "b%d[i]", arg);
                t++;
            }
        } else if (*t == '@' && t[1] >= '0' && t[1] < '0' + IR_MAX_FATTRS) {
            cg_str_printf(&ex, "%s", cg_lit(cx, e->fattr[t[1] - '0'], 0, lit));
            t++;
        } else if (*t == '#' && (t[1] == 'M' || t[1] == 'I')) {
            cg_str_printf(&ex, "%s", cg_lit(cx, 1.0 / (double)(t[1] == 'M' ? M : inner), 0, lit));
            t++;
        } else {
            cg_str_append(&ex, t, 1);
        }
    }
    if (need_c)
        cg_str_printf(&kd.body, "const idx_t c = (i / %" PRId64 ") %% %" PRId64 ";\n", inner, C);
    cg_str_printf(&kd.body, "b0[i] = %s;\n", ex.s);
    cg_str_free(&ex);
    return cg_emit_kernel(cx, &kd);
}

/* ---- per-channel statistics ------------------------------------------------------ */

typedef enum { RED_MEAN, RED_VAR, RED_SUM, RED_DOT_XHAT } chan_reduce;

/* Per-channel reduction over N and inner of an [N, C, inner] tensor; one
 * channel per iteration. Inputs: RED_MEAN/RED_SUM (x); RED_VAR (x, mean);
 * RED_DOT_XHAT (dy, x, mean, var) with eps. */
static int k_chan_reduce(cg_ctx *cx, chan_reduce kind, const ir_type *x, double eps) {
    static const char *names[] = {"bn_mean", "bn_var", "bias_grad", "bn_grad_gamma"};
    static const int nin[] = {1, 2, 1, 4};
    int64_t N = x->dim[0], C = x->dim[1], inner = cg_inner_of(x);
    cg_kdef kd = {.op = names[kind], .nargs = nin[kind] + 1, .cost = N * inner};
    kd.writes[0] = 1;
    cg_str *b = &kd.body;
    char lit[40];
    cg_str_printf(b, "const idx_t c = i;\n");
    if (kind == RED_VAR) cg_str_printf(b, "const acc_t m = b2[c];\n");
    if (kind == RED_DOT_XHAT)
        cg_str_printf(b,
                      "const acc_t m = b3[c];\nconst acc_t inv = 1.0 / sqrt((acc_t)b4[c] + %s);\n",
                      cg_lit(cx, eps, 1, lit));
    cg_str_printf(b,
                  "acc_t s = 0;\n"
                  "for (idx_t n = 0; n < %" PRId64 "; n++) {\n"
                  "    const float *row = b1 + (n * %" PRId64 " + c) * %" PRId64 ";\n",
                  N, C, inner);
    if (kind == RED_DOT_XHAT)
        cg_str_printf(b, "    const float *xr = b2 + (n * %" PRId64 " + c) * %" PRId64 ";\n", C,
                      inner);
    cg_str_printf(b, "    for (idx_t j = 0; j < %" PRId64 "; j++) ", inner);
    switch (kind) {
    case RED_MEAN:
    case RED_SUM: cg_str_printf(b, "s += row[j];\n"); break;
    case RED_VAR: cg_str_printf(b, "{ const acc_t d = row[j] - m; s += d * d; }\n"); break;
    case RED_DOT_XHAT: cg_str_printf(b, "s += row[j] * ((xr[j] - m) * inv);\n"); break;
    }
    cg_str_printf(b, "}\n");
    if (kind == RED_MEAN || kind == RED_VAR)
        cg_str_printf(b, "b0[i] = (float)(s / %" PRId64 ".0);\n", N * inner);
    else
        cg_str_printf(b, "b0[i] = (float)s;\n");
    return cg_emit_kernel(cx, &kd);
}

/* batchnorm as one step of several kernels: statistics into the scratch
 * area (mean at 0, variance at C), normalise, and in training update the
 * running statistics in place (ema with the unbiased variance). */
int cg_render_batchnorm(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_type *x = &cx->g->nodes[n->input[0]].type;
    if (x->dtype != IR_F32 || n->type.dtype != IR_F32)
        return cg_fail(
            cx, "node %d: batchnorm on bf16 tensors must be lowered first (passes/lower.c)", node);
    int64_t C = x->dim[1], M = x->dim[0] * cg_inner_of(x), count = ir_numel(x);
    int training = n->iattr[0] != 0;
    double eps = n->fattr[0], momentum = n->fattr[1];
    tmpl_env e = {.out = x, .nin = 5, .fattr = {eps}};
    int apply = expand(cx, "bn_apply", "($0 - $1c) / sqrtf($2c + @0) * $3c + $4c", &e);
    if (apply < 0) return -1;
    cg_step *s = cg_begin_step(cx, node);
    int y = 0, xs = cg_step_slot(cx, n->input[0]), gamma = cg_step_slot(cx, n->input[1]);
    int beta = cg_step_slot(cx, n->input[2]), rm = cg_step_slot(cx, n->input[3]);
    int rv = cg_step_slot(cx, n->input[4]);
    if (!training) {
        cg_add_kernel_call(cx, apply, count, 6, (int[]){y, xs, rm, rv, gamma, beta},
                           (int64_t[]){0, 0, 0, 0, 0, 0});
        return 0;
    }
    int kmean = k_chan_reduce(cx, RED_MEAN, x, 0), kvar = k_chan_reduce(cx, RED_VAR, x, 0);
    tmpl_env em = {.out = &cx->g->nodes[n->input[3]].type, .nin = 1, .fattr = {momentum, 1.0}};
    int kema = expand(cx, "ema_inplace", "@0 * $y + (1.0f - @0) * $0 * @1", &em);
    em.fattr[1] = M > 1 ? (double)M / (double)(M - 1) : 1.0;
    int kema_var = expand(cx, "ema_inplace", "@0 * $y + (1.0f - @0) * $0 * @1", &em);
    if (kmean < 0 || kvar < 0 || kema < 0 || kema_var < 0) return -1;
    s = &cx->p->steps[cx->p->nsteps - 1];
    int sc = cg_step_slot(cx, CG_SCRATCH);
    s->scratch = 2 * C;
    cg_add_kernel_call(cx, kmean, C, 2, (int[]){sc, xs}, (int64_t[]){0, 0});
    cg_add_kernel_call(cx, kvar, C, 3, (int[]){sc, xs, sc}, (int64_t[]){C, 0, 0});
    cg_add_kernel_call(cx, apply, count, 6, (int[]){y, xs, sc, sc, gamma, beta},
                       (int64_t[]){0, 0, 0, C, 0, 0});
    cg_add_kernel_call(cx, kema, C, 2, (int[]){rm, sc}, (int64_t[]){0, 0});
    cg_add_kernel_call(cx, kema_var, C, 2, (int[]){rv, sc}, (int64_t[]){0, C});
    return 0;
}
