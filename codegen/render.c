/* codegen/render.c — the expression renderer: one table of per-op rules,
 * two dialects.
 *
 * A kernel is a body that computes iteration i of a loop over [0, count),
 * written once in the subset of C that is also CUDA C (idx_t, acc_t, the
 * float math functions, DPC_NAN, DPC_NEG_INF). The dialect only supplies the
 * prelude, the signature and the loop header: a `for` over the range of
 * iterations the cpu backend's thread pool hands it in C, a grid-stride
 * loop in CUDA. Shapes and attributes are
 * baked into the body as constants, so identical layers share one kernel.
 *
 * Pointwise ops (templates in ir_op_expr), the per-channel reductions and
 * softmax cross-entropy are rendered by fused.c, one kernel per fusion
 * group (a lone node is a group of one); pooling, im2col/col2im and layout
 * kernels have body functions here. Reductions run one output element per
 * iteration with a serial inner loop in a double accumulator.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/internal.h"

/* ---- strings ---------------------------------------------------------------- */

static void str_reserve(cg_str *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    BASE_CHECK_ALLOC(s);
    b->s = s;
    b->cap = cap;
}

void cg_str_append(cg_str *b, const char *s, size_t n) {
    str_reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void cg_str_printf(cg_str *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) abort();
    str_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void cg_str_free(cg_str *b) {
    free(b->s);
    *b = (cg_str){0};
}

/* A literal is checked before it is emitted: only the characters a decimal
 * constant has, and it reads back as the value meant. Anything else (an
 * infinity or NaN prints as "inf"/"nan", a double beyond FLT_MAX becomes an
 * infinite float) gives NULL, never text. */
static int lit_text_ok(const char *s) {
    if (!*s) return 0;
    for (const char *c = s; *c; c++)
        if (!strchr("0123456789.e+-", *c)) return 0;
    return 1;
}

const char *cg_float_lit(double v, char *buf) {
    float f = (float)v;
    if (!isfinite(v) || !isfinite(f)) return NULL;
    /* %.9g round-trips any float; the literal needs a '.' or an exponent
     * before its 'f' suffix to be a float constant at all. */
    snprintf(buf, 32, "%.9g", (double)f);
    if (!strpbrk(buf, ".e")) strcat(buf, ".0");
    if (!lit_text_ok(buf) || strtof(buf, NULL) != f) return NULL;
    strcat(buf, "f");
    return buf;
}

/* A double constant for acc_t arithmetic (eps inside double sqrt). */
const char *cg_double_lit(double v, char *buf) {
    if (!isfinite(v)) return NULL;
    snprintf(buf, 32, "%.17g", v);
    if (!strpbrk(buf, ".e")) strcat(buf, ".0");
    if (!lit_text_ok(buf) || strtod(buf, NULL) != v) return NULL;
    return buf;
}

const char *cg_lit(cg_ctx *cx, double v, int dbl, char *buf) {
    const char *s = dbl ? cg_double_lit(v, buf) : cg_float_lit(v, buf);
    if (s) return s;
    if (!cx->bad_literal)
        cg_fail(cx, "constant %.9g cannot be written as a finite %s literal", v,
                dbl ? "double" : "float");
    cx->bad_literal = 1;
    return "0";
}

/* ---- dialects --------------------------------------------------------------
 * Preludes, signatures and loop headers are the dialect's table
 * (codegen/dialect.c); only modules that hold bf16 tensors get the bf16
 * prelude, so f32 modules are as they always were. */

const char *cg_ctype(ir_dtype t) { return t == IR_I32 ? "int" : t == IR_BF16 ? "bf16_t" : "float"; }
#define ctype cg_ctype

/* Appends the body indented by `ind` spaces. */
static void append_body(cg_str *out, const cg_str *body, int ind) {
    const char *p = body->s;
    while (p && *p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n) cg_str_printf(out, "%*s%.*s\n", ind, "", (int)n, p);
        p = e ? e + 1 : p + n;
    }
}

static void wrap_kernel(cg_ctx *cx, const char *name, const cg_kdef *kd) {
    const cg_dialect_desc *dl = cx->dl;
    cg_str *o = &cx->src;
    if (dl->grain) {
        /* the iteration count below which splitting the loop over the
         * thread pool costs more than it saves */
        int64_t cost = kd->cost > 0 ? kd->cost : 1;
        int64_t min_iters = cx->opt.parallel_threshold / cost;
        if (min_iters < 1) min_iters = 1;
        cg_str_printf(o, "const idx_t %s_grain = %" PRId64 ";\n", name, min_iters);
    }
    cg_str_printf(o, "%s", dl->kernel_head);
    /* the block every call of it gets (cg_add_kernel_call) */
    if (dl->launch_bounds)
        cg_str_printf(o, dl->launch_bounds, cg_launch_for(dl, kd->block, kd->split, 1).block);
    cg_str_printf(o, "%s(", name);
    const char *rs = kd->no_restrict ? "" : dl->restrict_kw;
    if (!dl->unpack_args)
        for (int j = 0; j < kd->nargs; j++)
            cg_str_printf(o, "%s%s *%sb%d, ", kd->writes[j] ? "" : "const ", ctype(kd->type[j]), rs,
                          j);
    cg_str_printf(o, "%s", dl->params_tail);
    if (dl->unpack_args)
        for (int j = 0; j < kd->nargs; j++) {
            const char *c = kd->writes[j] ? "" : "const ";
            cg_str_printf(o, "    %s%s *%sb%d = (%s%s *)arg[%d];\n", c, ctype(kd->type[j]), rs, j,
                          c, ctype(kd->type[j]), j);
        }
    cg_str_printf(o, "%s", dl->body_head);
    if (kd->split > 1)
        cg_str_printf(o, dl->split_loop_head, kd->split, kd->split);
    else
        cg_str_printf(o, "%s", kd->block ? dl->coop_loop_head : dl->loop_head);
    append_body(o, &kd->body, 8);
    cg_str_printf(o, "    }\n}\n\n");
}

/* The identity of a kernel apart from its name: types, writes, body. */
static void kernel_key(const cg_kdef *kd, cg_str *key) {
    for (int j = 0; j < kd->nargs; j++)
        cg_str_printf(key, "%c%c",
                      kd->type[j] == IR_I32    ? 'i'
                      : kd->type[j] == IR_BF16 ? 'h'
                                               : 'f',
                      kd->writes[j] ? 'w' : 'r');
    cg_str_printf(key, "|%" PRId64 "|%d|%d|%d|", kd->cost, kd->no_restrict, kd->block, kd->split);
    cg_str_append(key, kd->body.s ? kd->body.s : "", kd->body.len);
}

int cg_emit_kernel(cg_ctx *cx, cg_kdef *kd) {
    cg_str key = {0};
    kernel_key(kd, &key);
    cg_program *p = cx->p;
    for (int k = 0; k < p->nkernels; k++)
        if (cx->bodies[k].len == key.len && memcmp(cx->bodies[k].s, key.s, key.len) == 0) {
            cg_str_free(&key);
            cg_str_free(&kd->body);
            return k;
        }
    if (p->nkernels == cx->kcap) {
        cx->kcap = cx->kcap ? 2 * cx->kcap : 64;
        p->kernels = realloc(p->kernels, sizeof *p->kernels * (size_t)cx->kcap);
        cx->bodies = realloc(cx->bodies, sizeof *cx->bodies * (size_t)cx->kcap);
        cx->info = realloc(cx->info, sizeof *cx->info * (size_t)cx->kcap);
        BASE_CHECK_ALLOC(p->kernels && cx->bodies && cx->info);
    }
    int k = p->nkernels++;
    cg_kernel *kr = &p->kernels[k];
    memset(kr, 0, sizeof *kr);
    snprintf(kr->name, sizeof kr->name, "k%d_%s", k, kd->op);
    kr->nargs = kd->nargs;
    cg_kernel_info *ki = &cx->info[k];
    memset(ki, 0, sizeof *ki);
    ki->work = kd->cost > 0 ? kd->cost : 1;
    ki->serial = kd->serial > 0 ? kd->serial : ki->work;
    ki->block = kd->block;
    ki->split = kd->split;
    for (int j = 0; j < kd->nargs; j++) ki->type[j] = kd->type[j];
    cx->bodies[k] = key;
    wrap_kernel(cx, kr->name, kd);
    cg_str_free(&kd->body);
    return k;
}

/* ---- the cooperative skeleton's sizes --------------------------------------- */

/* Threads of a cooperative kernel of `iters` iterations that each loop
 * over `elems` elements: a power of two near elems / 4 (each thread then
 * keeps a few loads in flight), raised until the launch has the dialect's
 * fill_threads (wide but shallow reductions, ResNet-18's 512 channels of
 * 128 values, still fill the GPU) but never past one thread per element,
 * within the dialect's warp and max_block. At 1024 a ResNet-18 channel of
 * 128 x 32 x 32 values is 128 loads per thread per pass. */
int cg_coop_block(const cg_dialect_desc *dl, int64_t iters, int64_t elems) {
    int64_t b = dl->warp;
    while (b < dl->max_block && b < elems && (b * 4 < elems || b * iters < dl->fill_threads))
        b *= 2;
    return (int)(b < dl->max_block ? b : dl->max_block);
}

/* A row of `len` elements in each iteration of a kernel whose iterations
 * hold `elems` elements: shared by a block of threads (kd->block) when it
 * is at least a warp long, all of it in C; else one thread's. Sets the
 * start and step of a thread's loop over the row. */
static void share_row(const cg_ctx *cx, cg_kdef *kd, int64_t iters, int64_t len, int64_t elems,
                      const char **first, const char **step) {
    *first = "0", *step = "1";
    if (len < cx->dl->warp) return;
    kd->block = cg_coop_block(cx->dl, iters, elems);
    *first = cx->dl->thread_first, *step = cx->dl->thread_step;
}

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

static int64_t inner_of(const ir_type *t) {
    int64_t inner = 1;
    for (int d = 2; d < t->ndim; d++) inner *= t->dim[d];
    return inner;
}

static int expand(cg_ctx *cx, const char *op, const char *tmpl, const tmpl_env *e) {
    cg_kdef kd = {.op = op, .cost = 1};
    kd.nargs = e->nin + 1;
    kd.type[0] = e->out->dtype;
    kd.writes[0] = 1;
    for (int j = 0; j < e->nin; j++) kd.type[j + 1] = e->in_type[j];
    int64_t C = e->out->ndim > 1 ? e->out->dim[1] : 1, inner = inner_of(e->out);
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

/* ---- reduction, pooling and layout kernels ------------------------------------- */

typedef enum { RED_MEAN, RED_VAR, RED_SUM, RED_DOT_XHAT } chan_reduce;

/* Per-channel reduction over N and inner of an [N, C, inner] tensor; one
 * channel per iteration. Inputs: RED_MEAN/RED_SUM (x); RED_VAR (x, mean);
 * RED_DOT_XHAT (dy, x, mean, var) with eps. */
static int k_chan_reduce(cg_ctx *cx, chan_reduce kind, const ir_type *x, double eps) {
    static const char *names[] = {"bn_mean", "bn_var", "bias_grad", "bn_grad_gamma"};
    static const int nin[] = {1, 2, 1, 4};
    int64_t N = x->dim[0], C = x->dim[1], inner = inner_of(x);
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

/* y[n][c] = the mean of plane (n, c) of x; a channel-major x holds that
 * plane as plane c*N + n. */
static int k_global_avgpool(cg_ctx *cx, const ir_type *x, const ir_type *y, int cnhw) {
    int64_t inner = inner_of(x);
    ir_dtype tx = x->dtype, ty = y->dtype;
    cg_kdef kd = {
        .op = "global_avgpool", .nargs = 2, .cost = inner, .writes = {1}, .type = {ty, tx}};
    if (cnhw)
        cg_str_printf(&kd.body,
                      "const idx_t plane = i %% %" PRId64 " * %" PRId64 " + i / %" PRId64 ";\n",
                      x->dim[1], x->dim[0], x->dim[1]);
    cg_str_printf(&kd.body,
                  "const %s *row = b1 + %s * %" PRId64 ";\n"
                  "acc_t s = 0;\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) s += %srow[j]%s;\n"
                  "b0[i] = %s(float)(s / %" PRId64 ".0)%s;\n",
                  ctype(tx), cnhw ? "plane" : "i", inner, inner, cg_ld(tx), cg_end(tx), cg_st(ty),
                  inner, cg_end(ty));
    return cg_emit_kernel(cx, &kd);
}

/* y[n][c] = the sum over plane (n, c) of dy * x (mul_channel's gradient
 * for its factor); both inputs in one layout (ir_verify), a channel-major
 * pair holding the plane as plane c*N + n. */
static int k_plane_dot(cg_ctx *cx, const ir_type *x, const ir_type *dy, const ir_type *y,
                       int cnhw) {
    int64_t inner = inner_of(x);
    ir_dtype tx = x->dtype, td = dy->dtype, ty = y->dtype;
    cg_kdef kd = {
        .op = "plane_dot", .nargs = 3, .cost = 2 * inner, .writes = {1}, .type = {ty, td, tx}};
    if (cnhw)
        cg_str_printf(&kd.body,
                      "const idx_t plane = i %% %" PRId64 " * %" PRId64 " + i / %" PRId64 ";\n",
                      x->dim[1], x->dim[0], x->dim[1]);
    const char *at = cnhw ? "plane" : "i";
    cg_str_printf(&kd.body,
                  "const %s *dr = b1 + %s * %" PRId64 ";\n"
                  "const %s *xr = b2 + %s * %" PRId64 ";\n"
                  "acc_t s = 0;\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) s += (acc_t)%sdr[j]%s * %sxr[j]%s;\n"
                  "b0[i] = %s(float)s%s;\n",
                  ctype(td), at, inner, ctype(tx), at, inner, inner, cg_ld(td), cg_end(td),
                  cg_ld(tx), cg_end(tx), cg_st(ty), cg_end(ty));
    return cg_emit_kernel(cx, &kd);
}

/* ---- concat and its gradient's slices ------------------------------------------
 * Element i of an [N, C, inner] tensor is (n, c, j): NCHW i = (n*C + c)*inner
 * + j, channel-major (CNHW) i = (c*N + n)*inner + j; every input of a concat
 * and its output share one layout (ir_verify). */

/* "const idx_t n, c, j" of element i of an [N, C, inner] tensor. */
static void decode_nc(cg_str *b, int cnhw, int64_t N, int64_t C, int64_t inner) {
    cg_str_printf(b, "const idx_t j = i %% %" PRId64 ", q = i / %" PRId64 ";\n", inner, inner);
    if (cnhw)
        cg_str_printf(b, "const idx_t c = q / %" PRId64 ", n = q %% %" PRId64 ";\n", N, N);
    else
        cg_str_printf(b, "const idx_t n = q / %" PRId64 ", c = q %% %" PRId64 ";\n", C, C);
}

/* The index of (n, c + shift, j) in an [N, C, inner] tensor. */
static void index_nc(char *buf, size_t len, int cnhw, int64_t N, int64_t C, int64_t inner,
                     int64_t shift) {
    char ch[48];
    snprintf(ch, sizeof ch, "c %c %" PRId64, shift < 0 ? '-' : '+', shift < 0 ? -shift : shift);
    if (cnhw)
        snprintf(buf, len, "((%s) * %" PRId64 " + n) * %" PRId64 " + j", ch, N, inner);
    else
        snprintf(buf, len, "(n * %" PRId64 " + %s) * %" PRId64 " + j", C, ch, inner);
}

/* y = concat(b1, ..., bK) along the channels: each element from the input
 * whose channel range holds it. */
static int k_concat(cg_ctx *cx, const ir_graph *g, const ir_node *n) {
    const ir_type *y = &n->type;
    int cnhw = (n->flags & IR_FLAG_CNHW) != 0;
    int64_t N = y->dim[0], inner = inner_of(y);
    cg_kdef kd = {.op = "concat", .nargs = n->ninputs + 1, .cost = 1, .writes = {1}};
    kd.type[0] = y->dtype;
    cg_str *b = &kd.body;
    decode_nc(b, cnhw, N, y->dim[1], inner);
    cg_str_printf(b, "float v;\n");
    int64_t off = 0;
    char at[160];
    for (int k = 0; k < n->ninputs; k++) {
        const ir_type *t = &g->nodes[n->input[k]].type;
        kd.type[k + 1] = t->dtype;
        index_nc(at, sizeof at, cnhw, N, t->dim[1], inner, -off);
        off += t->dim[1];
        if (k < n->ninputs - 1)
            cg_str_printf(b, "%sif (c < %" PRId64 ") v = %sb%d[%s]%s;\n", k ? "else " : "", off,
                          cg_ld(t->dtype), k + 1, at, cg_end(t->dtype));
        else
            cg_str_printf(b, "else v = %sb%d[%s]%s;\n", cg_ld(t->dtype), k + 1, at,
                          cg_end(t->dtype));
    }
    cg_str_printf(b, "b0[i] = %sv%s;\n", cg_st(y->dtype), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* y = channels [off, off + C_y) of x. */
static int k_channel_slice(cg_ctx *cx, const ir_type *x, const ir_node *n) {
    const ir_type *y = &n->type;
    int cnhw = (n->flags & IR_FLAG_CNHW) != 0;
    int64_t N = y->dim[0], inner = inner_of(y);
    cg_kdef kd = {
        .op = "channel_slice", .nargs = 2, .cost = 1, .writes = {1}, .type = {y->dtype, x->dtype}};
    decode_nc(&kd.body, cnhw, N, y->dim[1], inner);
    char at[160];
    index_nc(at, sizeof at, cnhw, N, x->dim[1], inner, n->iattr[0]);
    cg_str_printf(&kd.body, "b0[i] = %s%sb1[%s]%s%s;\n", cg_st(y->dtype), cg_ld(x->dtype), at,
                  cg_end(x->dtype), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* dropout (ir.h): x/(1-p) where ir_dropout_hash(key, salt, e) keeps element
 * e, its NCHW index (a channel-major tensor's element is mapped back, so
 * the mask does not depend on the layout), else 0. b1 = x, b2 = the key's
 * four 16-bit chunks. The hash is ir.h's, spelled out in unsigned 64-bit
 * arithmetic that C and CUDA compute alike. */
static int k_dropout(cg_ctx *cx, const ir_type *x, const ir_node *n) {
    const ir_type *y = &n->type;
    int cnhw = (n->flags & IR_FLAG_CNHW) != 0;
    cg_kdef kd = {
        .op = "dropout", .nargs = 3, .cost = 4, .writes = {1}, .type = {y->dtype, x->dtype, IR_F32}};
    cg_str *b = &kd.body;
    if (cnhw && y->ndim > 1) {
        int64_t C = y->dim[1], inner = inner_of(y);
        decode_nc(b, 1, y->dim[0], C, inner);
        cg_str_printf(b, "const idx_t e = (n * %" PRId64 " + c) * %" PRId64 " + j;\n", C, inner);
    } else {
        cg_str_printf(b, "const idx_t e = i;\n");
    }
    char lit[40];
    double p = n->fattr[0];
    cg_str_printf(
        b,
        "unsigned long long z = 0;\n"
        "for (int t = 0; t < 4; t++) z |= ((unsigned long long)(long long)b2[t] & 0xffffull) << "
        "(16 * t);\n"
        "z ^= %lluull;\n"
        "z += (unsigned long long)e * 0x9e3779b97f4a7c15ull;\n"
        "z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;\n"
        "z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;\n"
        "z ^= z >> 31;\n"
        "b0[i] = %s(z >> 40) >= %lluull ? %sb1[i]%s * %s : 0.0f%s;\n",
        (unsigned long long)((uint64_t)n->iattr[0] * 0xd1b54a32d192ed03ull), cg_st(y->dtype),
        (unsigned long long)ir_dropout_threshold(p), cg_ld(x->dtype), cg_end(x->dtype),
        cg_lit(cx, 1.0 / (1.0 - p), 0, lit), cg_end(y->dtype));
    return cg_emit_kernel(cx, &kd);
}

/* ---- grouped convolution: direct kernels ---------------------------------------
 * conv with groups > 1 (depthwise at groups = channels): a group's GEMM
 * is C/G x k*k deep and K/G wide, G of them per image, each too small
 * for a BLAS call to pay for its setup and the im2col copy. One output
 * element per iteration instead, its window read in place: forward and
 * data gradient sum C/G (or K/G) channels x k*k taps, the weight gradient
 * sums a tap over N x Ho x Wo. Sums in acc_t, in a fixed order, so every
 * dialect and every thread count gives the same bits. Either layout on
 * either side (conv mixes layouts, ir_op_mixes_layout): plane (n, c) of a
 * channel-major [N,C,...] tensor is plane c*N + n. bench/depthwise.c
 * measures this against the G small GEMMs. */
typedef struct {
    int64_t N, C, H, W, K, Ho, Wo, k, s, p, G;
} conv_dims;

/* "n * C + c" or "c * N + n": the plane of (n, c) in a tensor of C channels. */
static const char *plane_of(char *buf, size_t len, int cnhw, const char *n, const char *c,
                            int64_t N, int64_t C) {
    if (cnhw)
        snprintf(buf, len, "(%s * %" PRId64 " + %s)", c, N, n);
    else
        snprintf(buf, len, "(%s * %" PRId64 " + %s)", n, C, c);
    return buf;
}

/* The (n, c) of iteration i's plane r in a tensor of C channels. */
static void split_plane(cg_str *b, int cnhw, const char *c, int64_t N, int64_t C) {
    if (cnhw)
        cg_str_printf(b, "const idx_t n = r %% %" PRId64 ", %s = r / %" PRId64 ";\n", N, c, N);
    else
        cg_str_printf(b, "const idx_t n = r / %" PRId64 ", %s = r %% %" PRId64 ";\n", C, c, C);
}

/* Column w, row h and plane r of iteration i over [planes, H, W]. */
static void split_position(cg_str *b, const char *w, const char *h, int64_t W, int64_t H) {
    cg_str_printf(b,
                  "const idx_t %s = i %% %" PRId64 ", %s = (i / %" PRId64 ") %% %" PRId64
                  ", r = i / %" PRId64 ";\n",
                  w, W, h, W, H, H * W);
}

/* y = conv(x, w): b1 = x, b2 = w. */
static int k_conv_direct(cg_ctx *cx, const conv_dims *d, ir_dtype ty, ir_dtype tx, ir_dtype tw,
                         int yc, int xc) {
    int64_t Cg = d->C / d->G, Kg = d->K / d->G, kk = d->k * d->k;
    cg_kdef kd = {
        .op = "conv_direct", .nargs = 3, .cost = Cg * kk, .writes = {1}, .type = {ty, tx, tw}};
    cg_str *b = &kd.body;
    char xp[96];
    split_position(b, "ow", "oh", d->Wo, d->Ho);
    split_plane(b, yc, "o", d->N, d->K);
    cg_str_printf(b,
                  "const idx_t c0 = o / %" PRId64 " * %" PRId64 ";\n"
                  "const %s *wr = b2 + o * %" PRId64 ";\n"
                  "acc_t acc = 0;\n"
                  "for (idx_t cl = 0; cl < %" PRId64 "; cl++) {\n"
                  "    const %s *xp = b1 + %s * %" PRId64 ";\n"
                  "    for (idx_t kh = 0; kh < %" PRId64 "; kh++) {\n"
                  "        const idx_t ih = oh * %" PRId64 " - %" PRId64 " + kh;\n"
                  "        if (ih < 0 || ih >= %" PRId64 ") continue;\n"
                  "        for (idx_t kw = 0; kw < %" PRId64 "; kw++) {\n"
                  "            const idx_t iw = ow * %" PRId64 " - %" PRId64 " + kw;\n"
                  "            if (iw >= 0 && iw < %" PRId64 ")\n"
                  "                acc += (acc_t)%sxp[ih * %" PRId64
                  " + iw]%s * %swr[(cl * %" PRId64 " + kh) * %" PRId64 " + kw]%s;\n"
                  "        }\n"
                  "    }\n"
                  "}\n"
                  "b0[i] = %s(float)acc%s;\n",
                  Kg, Cg, ctype(tw), Cg * kk, Cg, ctype(tx),
                  plane_of(xp, sizeof xp, xc, "n", "(c0 + cl)", d->N, d->C), d->H * d->W, d->k,
                  d->s, d->p, d->H, d->k, d->s, d->p, d->W, cg_ld(tx), d->W, cg_end(tx), cg_ld(tw),
                  d->k, d->k, cg_end(tw), cg_st(ty), cg_end(ty));
    return cg_emit_kernel(cx, &kd);
}

/* dx = conv_grad_data(dy, w): b1 = dy, b2 = w; the taps of output
 * channels o of x's group whose windows hold (ih, iw). */
static int k_conv_direct_grad_data(cg_ctx *cx, const conv_dims *d, ir_dtype tdx, ir_dtype tdy,
                                   ir_dtype tw, int dxc, int dyc) {
    int64_t Cg = d->C / d->G, Kg = d->K / d->G, kk = d->k * d->k;
    cg_kdef kd = {.op = "conv_direct_grad_data",
                  .nargs = 3,
                  .cost = Kg * kk,
                  .writes = {1},
                  .type = {tdx, tdy, tw}};
    cg_str *b = &kd.body;
    char dp[96];
    split_position(b, "iw", "ih", d->W, d->H);
    split_plane(b, dxc, "c", d->N, d->C);
    cg_str_printf(b,
                  "const idx_t o0 = c / %" PRId64 " * %" PRId64 ", cl = c %% %" PRId64 ";\n"
                  "acc_t acc = 0;\n"
                  "for (idx_t ol = 0; ol < %" PRId64 "; ol++) {\n"
                  "    const idx_t o = o0 + ol;\n"
                  "    const %s *dp = b1 + %s * %" PRId64 ";\n"
                  "    const %s *wr = b2 + (o * %" PRId64 " + cl) * %" PRId64 ";\n"
                  "    for (idx_t kh = 0; kh < %" PRId64 "; kh++) {\n"
                  "        const idx_t th = ih + %" PRId64 " - kh;\n"
                  "        if (th < 0 || th %% %" PRId64 " != 0 || th / %" PRId64 " >= %" PRId64
                  ") continue;\n"
                  "        for (idx_t kw = 0; kw < %" PRId64 "; kw++) {\n"
                  "            const idx_t tw = iw + %" PRId64 " - kw;\n"
                  "            if (tw < 0 || tw %% %" PRId64 " != 0 || tw / %" PRId64 " >= %" PRId64
                  ") continue;\n"
                  "            acc += (acc_t)%sdp[th / %" PRId64 " * %" PRId64 " + tw / %" PRId64
                  "]%s * %swr[kh * %" PRId64 " + kw]%s;\n"
                  "        }\n"
                  "    }\n"
                  "}\n"
                  "b0[i] = %s(float)acc%s;\n",
                  Cg, Kg, Cg, Kg, ctype(tdy), plane_of(dp, sizeof dp, dyc, "n", "o", d->N, d->K),
                  d->Ho * d->Wo, ctype(tw), Cg, kk, d->k, d->p, d->s, d->s, d->Ho, d->k, d->p, d->s,
                  d->s, d->Wo, cg_ld(tdy), d->s, d->Wo, d->s, cg_end(tdy), cg_ld(tw), d->k,
                  cg_end(tw), cg_st(tdx), cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

/* dw = conv_grad_weight(dy, x): b1 = dy, b2 = x; one tap (o, cl, kh, kw)
 * per iteration, summed over every image and output position. */
static int k_conv_direct_grad_weight(cg_ctx *cx, const conv_dims *d, ir_dtype tdw, ir_dtype tdy,
                                     ir_dtype tx, int dyc, int xc) {
    int64_t Cg = d->C / d->G, Kg = d->K / d->G;
    cg_kdef kd = {.op = "conv_direct_grad_weight",
                  .nargs = 3,
                  .cost = d->N * d->Ho * d->Wo,
                  .writes = {1},
                  .type = {tdw, tdy, tx}};
    cg_str *b = &kd.body;
    char dp[96], xp[96];
    cg_str_printf(b,
                  "const idx_t kw = i %% %" PRId64 ", kh = (i / %" PRId64 ") %% %" PRId64 ";\n"
                  "const idx_t cl = (i / %" PRId64 ") %% %" PRId64 ", o = i / %" PRId64 ";\n"
                  "const idx_t c = o / %" PRId64 " * %" PRId64 " + cl;\n"
                  "acc_t acc = 0;\n"
                  "for (idx_t n = 0; n < %" PRId64 "; n++) {\n"
                  "    const %s *dp = b1 + %s * %" PRId64 ";\n"
                  "    const %s *xp = b2 + %s * %" PRId64 ";\n"
                  "    for (idx_t oh = 0; oh < %" PRId64 "; oh++) {\n"
                  "        const idx_t ih = oh * %" PRId64 " - %" PRId64 " + kh;\n"
                  "        if (ih < 0 || ih >= %" PRId64 ") continue;\n"
                  "        for (idx_t ow = 0; ow < %" PRId64 "; ow++) {\n"
                  "            const idx_t iw = ow * %" PRId64 " - %" PRId64 " + kw;\n"
                  "            if (iw >= 0 && iw < %" PRId64 ")\n"
                  "                acc += (acc_t)%sdp[oh * %" PRId64 " + ow]%s * %sxp[ih * %" PRId64
                  " + iw]%s;\n"
                  "        }\n"
                  "    }\n"
                  "}\n"
                  "b0[i] = %s(float)acc%s;\n",
                  d->k, d->k, d->k, d->k * d->k, Cg, d->k * d->k * Cg, Kg, Cg, d->N, ctype(tdy),
                  plane_of(dp, sizeof dp, dyc, "n", "o", d->N, d->K), d->Ho * d->Wo, ctype(tx),
                  plane_of(xp, sizeof xp, xc, "n", "c", d->N, d->C), d->H * d->W, d->Ho, d->s, d->p,
                  d->H, d->Wo, d->s, d->p, d->W, cg_ld(tdy), d->Wo, cg_end(tdy), cg_ld(tx), d->W,
                  cg_end(tx), cg_st(tdw), cg_end(tdw));
    return cg_emit_kernel(cx, &kd);
}

/* The first maximum of window (oh, ow) of plane xp, padding never winning:
 * sets `best` to its index in the plane or -1. */
static void window_argmax(cg_str *b, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p,
                          const char *ind, ir_dtype tx) {
    /* The window clipped to the plane once, then a scan without per-tap
     * bounds checks: same taps in the same row-major order as testing each
     * one, so the same (first) maximum wins. The best value rides along in
     * a register (bv == xp[best]) instead of being reloaded per tap. The
     * first tap seeds the scan, so the test per tap is one comparison:
     * `best < 0 || v > bv` made the C compiler branch and ran several
     * times slower; the first maximum, and a leading NaN, win as before. */
    cg_str_printf(
        b,
        "%sidx_t best = -1;\n"
        "%sfloat bv = 0.0f;\n"
        "%s{\n"
        "%s    const idx_t h0 = oh * %" PRId64 " - %" PRId64 ", w0 = ow * %" PRId64 " - %" PRId64
        ";\n"
        "%s    const idx_t kh0 = h0 < 0 ? -h0 : 0, kw0 = w0 < 0 ? -w0 : 0;\n"
        "%s    const idx_t kh1 = h0 + %" PRId64 " > %" PRId64 " ? %" PRId64 " - h0 : %" PRId64 ";\n"
        "%s    const idx_t kw1 = w0 + %" PRId64 " > %" PRId64 " ? %" PRId64 " - w0 : %" PRId64 ";\n"
        "%s    if (kh0 < kh1 && kw0 < kw1) {\n"
        "%s        best = (h0 + kh0) * %" PRId64 " + w0 + kw0;\n"
        "%s        bv = %sxp[best]%s;\n"
        "%s        for (idx_t kh = kh0; kh < kh1; kh++)\n"
        "%s            for (idx_t kw = kw0; kw < kw1; kw++) {\n"
        "%s                const idx_t at = (h0 + kh) * %" PRId64 " + w0 + kw;\n"
        "%s                const float v = %sxp[at]%s;\n"
        "%s                if (v > bv) best = at, bv = v;\n"
        "%s            }\n"
        "%s    }\n"
        "%s}\n",
        ind, ind, ind, ind, s, p, s, p, ind, ind, k, H, H, k, ind, k, W, W, k, ind, ind, W, ind,
        cg_ld(tx), cg_end(tx), ind, ind, ind, W, ind, cg_ld(tx), cg_end(tx), ind, ind, ind, ind);
}

static int k_pool(cg_ctx *cx, int is_max, const ir_type *x, const ir_type *y, int64_t k, int64_t s,
                  int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = y->dim[2], Wo = y->dim[3];
    ir_dtype tx = x->dtype, ty = y->dtype;
    cg_kdef kd = {.op = is_max ? "maxpool" : "avgpool",
                  .nargs = 2,
                  .cost = k * k,
                  .writes = {1},
                  .type = {ty, tx}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const idx_t ow = i %% %" PRId64 ", oh = (i / %" PRId64 ") %% %" PRId64 ";\n"
                  "const %s *xp = b1 + (i / %" PRId64 ") * %" PRId64 ";\n",
                  Wo, Wo, Ho, ctype(tx), Wo * Ho, H * W);
    if (is_max) {
        window_argmax(b, H, W, k, s, p, "", tx);
        cg_str_printf(b, "b0[i] = %sbest < 0 ? DPC_NEG_INF : bv%s;\n", cg_st(ty), cg_end(ty));
    } else {
        cg_str_printf(
            b,
            "acc_t sum = 0;\n"
            "for (idx_t kh = 0; kh < %" PRId64 "; kh++) {\n"
            "    const idx_t ih = oh * %" PRId64 " - %" PRId64 " + kh;\n"
            "    if (ih < 0 || ih >= %" PRId64 ") continue;\n"
            "    for (idx_t kw = 0; kw < %" PRId64 "; kw++) {\n"
            "        const idx_t iw = ow * %" PRId64 " - %" PRId64 " + kw;\n"
            "        if (iw >= 0 && iw < %" PRId64 ") sum += %sxp[ih * %" PRId64 " + iw]%s;\n"
            "    }\n"
            "}\n"
            "b0[i] = %s(float)(sum / %" PRId64 ".0)%s;\n",
            k, s, p, H, k, s, p, W, cg_ld(tx), W, cg_end(tx), cg_st(ty), k * k, cg_end(ty));
    }
    return cg_emit_kernel(cx, &kd);
}

/* max-pool's gradient, one (n, c) plane per iteration: zero the plane of
 * dx, then route each window's dy to the window's first maximum (the
 * forward pass's choice), windows in row-major order. A plane belongs to
 * one iteration, so overlapping windows need no atomics; the work is one
 * window scan per output instead of one per (input, window) pair.
 * b1 = dy, b2 = x, all f32 (with bf16 tensors: the gathered form below). */
static int k_maxpool_grad(cg_ctx *cx, const ir_type *x, const ir_type *dy, int64_t k, int64_t s,
                          int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = dy->dim[2], Wo = dy->dim[3];
    cg_kdef kd = {.op = "maxpool_grad", .nargs = 3, .cost = H * W + Ho * Wo * k * k, .writes = {1}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const float *xp = b2 + i * %" PRId64 ", *dyp = b1 + i * %" PRId64 ";\n"
                  "float *d = b0 + i * %" PRId64 ";\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) d[j] = 0.0f;\n"
                  "for (idx_t oh = 0; oh < %" PRId64 "; oh++)\n"
                  "    for (idx_t ow = 0; ow < %" PRId64 "; ow++) {\n",
                  H * W, Ho * Wo, H * W, H * W, Ho, Wo);
    window_argmax(b, H, W, k, s, p, "        ", IR_F32);
    cg_str_printf(b, "        if (best >= 0) d[best] += dyp[oh * %" PRId64 " + ow];\n    }\n", Wo);
    return cg_emit_kernel(cx, &kd);
}

/* Elements of a plane a kernel may sum in a local array (on the stack of a
 * pool thread: 16 MiB). */
enum { MAX_LOCAL_PLANE = 1 << 16 };

/* The scatter with a bf16 tensor among dx, dy, x (C dialect): a plane's
 * sums in a local acc_t array, windows in row-major order — the gathered
 * form's additions in its order, so the same bits — then rounded once.
 * One window scan per output, where the gathered form scans every window
 * of every input element (about four times as many on 3x3, stride 2). */
static int k_maxpool_grad_bf16(cg_ctx *cx, const ir_type *x, const ir_type *dy, ir_dtype tdx,
                               int64_t k, int64_t s, int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = dy->dim[2], Wo = dy->dim[3];
    ir_dtype tx = x->dtype, tdy = dy->dtype;
    cg_kdef kd = {.op = "maxpool_grad",
                  .nargs = 3,
                  .cost = H * W + Ho * Wo * k * k,
                  .writes = {1},
                  .type = {tdx, tdy, tx}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const %s *xp = b2 + i * %" PRId64 ";\n"
                  "const %s *dyp = b1 + i * %" PRId64 ";\n"
                  "acc_t d[%" PRId64 "];\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) d[j] = 0;\n"
                  "for (idx_t oh = 0; oh < %" PRId64 "; oh++)\n"
                  "    for (idx_t ow = 0; ow < %" PRId64 "; ow++) {\n",
                  ctype(tx), H * W, ctype(tdy), Ho * Wo, H * W, H * W, Ho, Wo);
    window_argmax(b, H, W, k, s, p, "        ", tx);
    cg_str_printf(b,
                  "        if (best >= 0) d[best] += %sdyp[oh * %" PRId64 " + ow]%s;\n"
                  "    }\n"
                  "for (idx_t j = 0; j < %" PRId64 "; j++) b0[i * %" PRId64
                  " + j] = %s(float)d[j]%s;\n",
                  cg_ld(tdy), Wo, cg_end(tdy), H * W, H * W, cg_st(tdx), cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

/* The windows (rows oh0..oh1, columns ow0..ow1 of dy) that contain input
 * element (h, w): oh*s - p <= h <= oh*s - p + k - 1, clipped to the output.
 * Shared by the gathered pool gradients. */
static void pool_windows_of(cg_str *b, int64_t k, int64_t s, int64_t p, int64_t Ho, int64_t Wo) {
    cg_str_printf(
        b,
        "const idx_t lh = h + %" PRId64 ", lw = w + %" PRId64 ";\n"
        "const idx_t oh0 = lh < %" PRId64 " ? 0 : (lh - %" PRId64 " + %" PRId64 ") / %" PRId64 ";\n"
        "const idx_t ow0 = lw < %" PRId64 " ? 0 : (lw - %" PRId64 " + %" PRId64 ") / %" PRId64 ";\n"
        "idx_t oh1 = lh / %" PRId64 ", ow1 = lw / %" PRId64 ";\n"
        "if (oh1 > %" PRId64 ") oh1 = %" PRId64 ";\n"
        "if (ow1 > %" PRId64 ") ow1 = %" PRId64 ";\n",
        p, p, k, k - 1, s - 1, s, k, k - 1, s - 1, s, s, s, Ho - 1, Ho - 1, Wo - 1, Wo - 1);
}

/* max-pool's gradient into bf16, gathered: each dx element sums, in acc_t,
 * the dy of the windows whose first maximum it is (windows in row-major
 * order, the scatter's order), and is rounded once. The scatter above
 * would round after every addition where windows overlap. b1 = dy, b2 = x. */
static int k_maxpool_grad_gather(cg_ctx *cx, const ir_type *x, const ir_type *dy, ir_dtype tdx,
                                 int64_t k, int64_t s, int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = dy->dim[2], Wo = dy->dim[3];
    int64_t span = (k + s - 1) / s;
    ir_dtype tx = x->dtype, tdy = dy->dtype;
    cg_kdef kd = {.op = "maxpool_grad",
                  .nargs = 3,
                  .cost = span * span * k * k,
                  .writes = {1},
                  .type = {tdx, tdy, tx}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const idx_t w = i %% %" PRId64 ", h = (i / %" PRId64 ") %% %" PRId64 ";\n"
                  "const idx_t plane = i / %" PRId64 ";\n"
                  "const %s *xp = b2 + plane * %" PRId64 ";\n"
                  "const %s *dyp = b1 + plane * %" PRId64 ";\n",
                  W, W, H, W * H, ctype(tx), H * W, ctype(tdy), Ho * Wo);
    pool_windows_of(b, k, s, p, Ho, Wo);
    cg_str_printf(b, "acc_t sum = 0;\n"
                     "for (idx_t oh = oh0; oh <= oh1; oh++)\n"
                     "    for (idx_t ow = ow0; ow <= ow1; ow++) {\n");
    window_argmax(b, H, W, k, s, p, "        ", tx);
    cg_str_printf(b,
                  "        if (best == h * %" PRId64 " + w) sum += %sdyp[oh * %" PRId64
                  " + ow]%s;\n"
                  "    }\n"
                  "b0[i] = %s(float)sum%s;\n",
                  W, cg_ld(tdy), Wo, cg_end(tdy), cg_st(tdx), cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

/* avg-pool's gradient, gathered: each input element visits the windows
 * that contain it (rows oh with oh*s - p <= h <= oh*s - p + k - 1), so no
 * two iterations write the same element and no atomics are needed.
 * b1 = dy. */
static int k_avgpool_grad(cg_ctx *cx, const ir_type *x, const ir_type *dy, int64_t k, int64_t s,
                          int64_t p) {
    int64_t H = x->dim[2], W = x->dim[3], Ho = dy->dim[2], Wo = dy->dim[3];
    int64_t span = (k + s - 1) / s;
    ir_dtype tdx = x->dtype, tdy = dy->dtype;
    cg_kdef kd = {
        .op = "avgpool_grad", .nargs = 2, .cost = span * span, .writes = {1}, .type = {tdx, tdy}};
    cg_str *b = &kd.body;
    cg_str_printf(b,
                  "const idx_t w = i %% %" PRId64 ", h = (i / %" PRId64 ") %% %" PRId64 ";\n"
                  "const idx_t plane = i / %" PRId64 ";\n"
                  "const %s *dyp = b1 + plane * %" PRId64 ";\n",
                  W, W, H, W * H, ctype(tdy), Ho * Wo);
    pool_windows_of(b, k, s, p, Ho, Wo);
    cg_str_printf(b,
                  "acc_t sum = 0;\n"
                  "for (idx_t oh = oh0; oh <= oh1; oh++)\n"
                  "    for (idx_t ow = ow0; ow <= ow1; ow++) sum += %sdyp[oh * %" PRId64
                  " + ow]%s;\n"
                  "b0[i] = %s(float)(sum / %" PRId64 ".0)%s;\n",
                  cg_ld(tdy), Wo, cg_end(tdy), cg_st(tdx), k * k, cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

/* Columns of a chunk of nb images in CNHW order: b0[r][img*P + oh*Wo + ow]
 * = x[img][c][oh*s - p + kh][ow*s - p + kw] with r = (c*k + kh)*k + kw, 0
 * in the padding. One iteration fills the P entries of one (r, img) pair,
 * so the index arithmetic is paid per row, not per element. nb is baked in
 * (a kernel per chunk size) so no division is by a run-time value. The
 * inner loop keeps a constant trip count with a select per element: at the
 * 8x8 to 1x1 planes of a CIFAR network that unrolls and vectorises, where
 * splitting each row into padding and interior runs measured slower. */
int cg_kernel_im2col(cg_ctx *cx, const cg_conv_shape *c, int64_t nb, ir_dtype tc, ir_dtype tx,
                     int cnhw) {
    int64_t P = c->Ho * c->Wo;
    /* plane (img, c) of x: img*C + c, or c*N + img in a channel-major x */
    char plane[64];
    if (cnhw)
        snprintf(plane, sizeof plane, "c * %" PRId64 " + img", c->N);
    else
        snprintf(plane, sizeof plane, "img * %" PRId64 " + c", c->C);
    cg_kdef kd = {.op = "im2col", .nargs = 2, .cost = P, .writes = {1}, .type = {tc, tx}};
    /* the same type is copied as it is (0.0f converts to bf16's +0 bits) */
    const char *ld = tc == tx ? "" : cg_ld(tx), *le = tc == tx ? "" : cg_end(tx);
    const char *st = tc == tx ? "" : cg_st(tc), *se = tc == tx ? "" : cg_end(tc);
    /* an output row at least a warp wide is shared by the block's threads
     * (all of it in C): ow = first, first + step, ... */
    char ow[160];
    const char *first, *step;
    share_row(cx, &kd, c->C * c->k * c->k * nb, c->Wo, P, &first, &step);
    kd.serial = kd.block ? c->Ho * ((c->Wo + kd.block - 1) / kd.block) : P;
    snprintf(ow, sizeof ow, "for (idx_t ow = %s; ow < %" PRId64 "; ow += %s)", first, c->Wo, step);
    cg_str_printf(&kd.body,
                  "const idx_t r = i / %" PRId64 ", img = i - r * %" PRId64 ";\n"
                  "const idx_t kw = r %% %" PRId64 ", kh = (r / %" PRId64 ") %% %" PRId64
                  ", c = r / %" PRId64 ";\n"
                  "const %s *xp = b1 + (%s) * %" PRId64 ";\n"
                  "%s *out = b0 + r * %" PRId64 " + img * %" PRId64 ";\n"
                  "for (idx_t oh = 0; oh < %" PRId64 "; oh++) {\n"
                  "    const idx_t ih = oh * %" PRId64 " - %" PRId64 " + kh;\n"
                  "    %s *o = out + oh * %" PRId64 ";\n"
                  "    if (ih < 0 || ih >= %" PRId64 ") {\n"
                  "        %s o[ow] = 0.0f;\n"
                  "        continue;\n"
                  "    }\n"
                  "    const %s *row = xp + ih * %" PRId64 ";\n"
                  "    %s {\n"
                  "        const idx_t iw = ow * %" PRId64 " - %" PRId64 " + kw;\n"
                  "        o[ow] = %siw >= 0 && iw < %" PRId64 " ? %srow[iw]%s : 0.0f%s;\n"
                  "    }\n"
                  "}\n",
                  nb, nb, c->k, c->k, c->k, c->k * c->k, ctype(tx), plane, c->H * c->W, ctype(tc),
                  nb * P, P, c->Ho, c->s, c->p, ctype(tc), c->Wo, c->H, ow, ctype(tx), c->W, ow,
                  c->s, c->p, st, c->W, ld, le, se);
    return cg_emit_kernel(cx, &kd);
}

/* T[(k, oh, ow)][(c, h, w)] = w[k][c][h - oh*s + p][w - ow*s + p]: the
 * row (k, oh, ow), C*H*W entries, per iteration (shared by a block of
 * threads on a GPU), each from the one k x k filter of its c, shifted
 * (every tap index is in range: ir_conv_dense_ok). */
int cg_kernel_conv_unroll(cg_ctx *cx, const cg_conv_shape *c) {
    int64_t P = c->Ho * c->Wo, HW = c->H * c->W, CHW = c->C * HW, kk = c->k * c->k;
    cg_kdef kd = {
        .op = "conv_unroll", .nargs = 2, .cost = CHW, .writes = {1}, .type = {IR_F32, IR_F32}};
    const char *first, *step;
    share_row(cx, &kd, c->K * P, CHW, CHW, &first, &step);
    kd.serial = kd.block ? (CHW + kd.block - 1) / kd.block : CHW;
    cg_str_printf(&kd.body,
                  "const idx_t q = i %% %" PRId64 ", k = i / %" PRId64 ";\n"
                  "const idx_t oh = q / %" PRId64 ", ow = q %% %" PRId64 ";\n"
                  "const float *f = b1 + k * %" PRId64 " + (%" PRId64 " - oh * %" PRId64
                  ") * %" PRId64 " + %" PRId64 " - ow * %" PRId64 ";\n"
                  "float *t = b0 + i * %" PRId64 ";\n"
                  "for (idx_t j = %s; j < %" PRId64 "; j += %s) {\n"
                  "    const idx_t ch = j / %" PRId64 ", hw = j %% %" PRId64 ";\n"
                  "    t[j] = f[ch * %" PRId64 " + hw / %" PRId64 " * %" PRId64 " + hw %% %" PRId64
                  "];\n"
                  "}\n",
                  P, P, c->Wo, c->Wo, c->C * kk, c->p, c->s, c->k, c->p, c->s, CHW, first, CHW,
                  step, HW, HW, kk, c->W, c->k, c->W);
    return cg_emit_kernel(cx, &kd);
}

/* dw[k][c] from dT, one filter per iteration: each output pixel's H*W
 * entries go to distinct taps, summed in double in the order of the
 * output pixels (a tap no pixel reaches stays 0). */
int cg_kernel_conv_fold(cg_ctx *cx, const cg_conv_shape *c) {
    int64_t P = c->Ho * c->Wo, HW = c->H * c->W, kk = c->k * c->k;
    cg_kdef kd = {
        .op = "conv_fold", .nargs = 2, .cost = P * HW + kk, .writes = {1}, .type = {IR_F32, IR_F32}};
    cg_str_printf(
        &kd.body,
        "const idx_t ch = i %% %" PRId64 ", k = i / %" PRId64 ";\n"
        "acc_t acc[%" PRId64 "];\n"
        "for (idx_t t = 0; t < %" PRId64 "; t++) acc[t] = 0;\n"
        "for (idx_t q = 0; q < %" PRId64 "; q++) {\n"
        "    const idx_t oh = q / %" PRId64 ", ow = q %% %" PRId64 ";\n"
        "    const float *d = b1 + ((k * %" PRId64 " + q) * %" PRId64 " + ch) * %" PRId64 ";\n"
        "    for (idx_t h = 0; h < %" PRId64 "; h++)\n"
        "        for (idx_t w = 0; w < %" PRId64 "; w++)\n"
        "            acc[(h - oh * %" PRId64 " + %" PRId64 ") * %" PRId64 " + w - ow * %" PRId64
        " + %" PRId64 "] += d[h * %" PRId64 " + w];\n"
        "}\n"
        "for (idx_t t = 0; t < %" PRId64 "; t++) b0[i * %" PRId64 " + t] = (float)acc[t];\n",
        c->C, c->C, kk, kk, P, c->Wo, c->Wo, P, c->C, HW, c->H, c->W, c->s, c->p, c->k, c->s, c->p,
        c->W, kk, kk);
    return cg_emit_kernel(cx, &kd);
}

/* The adjoint of im2col, gathered: b0 = dx of a chunk of nb images (NCHW),
 * b1 = its CNHW columns. Each dx element sums, in double, the column
 * entries im2col copied it to, so no two iterations write one element.
 * (Scattering each column row into a plane of dx measured slower at these
 * plane sizes.) */
int cg_kernel_col2im(cg_ctx *cx, const cg_conv_shape *c, int64_t nb, ir_dtype tdx, ir_dtype tc,
                     int cnhw) {
    int64_t P = c->Ho * c->Wo, CHW = c->C * c->H * c->W, np = nb * P, HW = c->H * c->W;
    int64_t span = (c->k + c->s - 1) / c->s;
    cg_kdef kd = {
        .op = "col2im", .nargs = 2, .cost = 2 * span * span, .writes = {1}, .type = {tdx, tc}};
    /* i runs over the chunk's dx elements in dx's layout: (img, c, h, w),
     * or (c, img, h, w) for a channel-major dx, whose rows are N*H*W long */
    if (cnhw)
        cg_str_printf(&kd.body,
                      "const idx_t w = i %% %" PRId64 ", h = (i / %" PRId64 ") %% %" PRId64 ";\n"
                      "const idx_t img = (i / %" PRId64 ") %% %" PRId64 ", c = i / %" PRId64 ";\n"
                      "const idx_t at = c * %" PRId64 " + i %% %" PRId64 ";\n",
                      c->W, c->W, c->H, HW, nb, nb * HW, c->N * HW, nb * HW);
    else
        cg_str_printf(&kd.body,
                      "const idx_t w = i %% %" PRId64 ", h = (i / %" PRId64 ") %% %" PRId64 ";\n"
                      "const idx_t c = (i / %" PRId64 ") %% %" PRId64 ", img = i / %" PRId64 ";\n",
                      c->W, c->W, c->H, c->W * c->H, c->C, CHW);
    cg_str_printf(&kd.body,
                  "const %s *col = b1 + c * %" PRId64 " + img * %" PRId64 ";\n"
                  "acc_t sum = 0;\n"
                  "for (idx_t kh = 0; kh < %" PRId64 "; kh++) {\n"
                  "    const idx_t th = h + %" PRId64 " - kh;\n"
                  "    if (th < 0 || th %% %" PRId64 " != 0 || th / %" PRId64 " >= %" PRId64
                  ") continue;\n"
                  "    for (idx_t kw = 0; kw < %" PRId64 "; kw++) {\n"
                  "        const idx_t tw = w + %" PRId64 " - kw;\n"
                  "        if (tw < 0 || tw %% %" PRId64 " != 0 || tw / %" PRId64 " >= %" PRId64
                  ") continue;\n"
                  "        sum += %scol[(kh * %" PRId64 " + kw) * %" PRId64 " + (th / %" PRId64
                  ") * %" PRId64 " + tw / %" PRId64 "]%s;\n"
                  "    }\n"
                  "}\n"
                  "b0[%s] = %s(float)sum%s;\n",
                  ctype(tc), c->k * c->k * np, P, c->k, c->p, c->s, c->s, c->Ho, c->k, c->p, c->s,
                  c->s, c->Wo, cg_ld(tc), c->k, np, c->s, c->Wo, c->s, cg_end(tc),
                  cnhw ? "at" : "i", cg_st(tdx), cg_end(tdx));
    return cg_emit_kernel(cx, &kd);
}

/* dst[q] = src[q] for q in [0, P), converted when the element types
 * differ. A row at least a warp long is shared by a block of threads
 * (the cooperative skeleton: all of it in C, a coalesced slice each on a
 * GPU); a shorter one is one thread's. Sets kd's block and serial. */
static void copy_line(cg_ctx *cx, cg_kdef *kd, ir_dtype dst, ir_dtype src, int64_t rows,
                      int64_t P) {
    const char *first, *step;
    share_row(cx, kd, rows, P, P, &first, &step);
    kd->serial = kd->block ? (P + kd->block - 1) / kd->block : P;
    cg_str_printf(&kd->body,
                  "for (idx_t q = %s; q < %" PRId64 "; q += %s) dst[q] = %s%ssrc[q]%s%s;\n", first,
                  P, step, dst == src ? "" : cg_st(dst), dst == src ? "" : cg_ld(src),
                  dst == src ? "" : cg_end(src), dst == src ? "" : cg_end(dst));
}

/* b0[k][img*P + q] = b1[img][k][q] for a chunk of nb images: one (k, img)
 * row of P contiguous floats per iteration. */
int cg_kernel_to_cnhw(cg_ctx *cx, int64_t K, int64_t P, int64_t nb, ir_dtype td, ir_dtype ts) {
    cg_kdef kd = {.op = "to_cnhw", .nargs = 2, .cost = P, .writes = {1}, .type = {td, ts}};
    cg_str_printf(&kd.body,
                  "const idx_t k = i / %" PRId64 ", img = i - k * %" PRId64 ";\n"
                  "const %s *src = b1 + (img * %" PRId64 " + k) * %" PRId64 ";\n"
                  "%s *dst = b0 + k * %" PRId64 " + img * %" PRId64 ";\n",
                  nb, nb, ctype(ts), K, P, ctype(td), nb * P, P);
    copy_line(cx, &kd, td, ts, K * nb, P);
    return cg_emit_kernel(cx, &kd);
}

/* b0[img][k][q] = b1[k][img*P + q]: back to NCHW, one (img, k) row per
 * iteration. */
int cg_kernel_from_cnhw(cg_ctx *cx, int64_t K, int64_t P, int64_t nb, ir_dtype td, ir_dtype ts) {
    cg_kdef kd = {.op = "from_cnhw", .nargs = 2, .cost = P, .writes = {1}, .type = {td, ts}};
    cg_str_printf(&kd.body,
                  "const idx_t img = i / %" PRId64 ", k = i - img * %" PRId64 ";\n"
                  "const %s *src = b1 + k * %" PRId64 " + img * %" PRId64 ";\n"
                  "%s *dst = b0 + i * %" PRId64 ";\n",
                  K, K, ctype(ts), nb * P, P, ctype(td), P);
    copy_line(cx, &kd, td, ts, K * nb, P);
    return cg_emit_kernel(cx, &kd);
}

/* b0[k*ds + img*P + q] = b1[k*ss + img*P + q]: a chunk of nb images of a
 * channel-major tensor between the scratch area's CNHW block (rows nb*P
 * apart) and the tensor (rows N*P apart), converted when the types
 * differ. One (k, img) row of P per iteration: count = K*nb. */
int cg_kernel_cnhw_rows(cg_ctx *cx, int64_t P, int64_t nb, int64_t ds, int64_t ss, int64_t K,
                        ir_dtype td, ir_dtype ts) {
    cg_kdef kd = {.op = "cnhw_rows", .nargs = 2, .cost = P, .writes = {1}, .type = {td, ts}};
    cg_str_printf(&kd.body,
                  "const idx_t k = i / %" PRId64 ", img = i - k * %" PRId64 ";\n"
                  "const %s *src = b1 + k * %" PRId64 " + img * %" PRId64 ";\n"
                  "%s *dst = b0 + k * %" PRId64 " + img * %" PRId64 ";\n",
                  nb, nb, ctype(ts), ss, P, ctype(td), ds, P);
    copy_line(cx, &kd, td, ts, K * nb, P);
    return cg_emit_kernel(cx, &kd);
}

int cg_kernel_cast(cg_ctx *cx, ir_dtype to, ir_dtype from) {
    cg_kdef kd = {.op = "cast", .nargs = 2, .cost = 1, .writes = {1}, .type = {to, from}};
    cg_str_printf(&kd.body, "b0[i] = %s%sb1[i]%s%s;\n", cg_st(to), cg_ld(from), cg_end(from),
                  cg_end(to));
    return cg_emit_kernel(cx, &kd);
}

/* ---- the rule table ------------------------------------------------------------ */

typedef int (*render_fn)(cg_ctx *cx, int node);

typedef struct {
    render_fn render; /* the node's step; pointwise and reductions go to fused.c */
} cg_rule;

static const ir_type *in_type(const cg_ctx *cx, const ir_node *n, int j) {
    return &cx->g->nodes[n->input[j]].type;
}

/* One kernel over the node's inputs, count iterations, slots in input order. */
static int simple_step(cg_ctx *cx, int node, int kernel, int64_t count) {
    if (kernel < 0) return -1;
    const ir_node *n = &cx->g->nodes[node];
    cg_begin_step(cx, node);
    int slot[CG_MAX_ARGS] = {0};
    int64_t off[CG_MAX_ARGS] = {0};
    for (int j = 0; j < n->ninputs; j++) slot[j + 1] = cg_step_slot(cx, n->input[j]);
    cg_add_kernel_call(cx, kernel, count, n->ninputs + 1, slot, off);
    return 0;
}

static int r_global_avgpool(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    int cnhw = (cx->g->nodes[n->input[0]].flags & IR_FLAG_CNHW) != 0;
    return simple_step(cx, node, k_global_avgpool(cx, in_type(cx, n, 0), &n->type, cnhw),
                       ir_numel(&n->type));
}

/* A grouped convolution's step: its direct kernel, after the library call
 * it is the alternative of when the conv pass marked the node. */
int cg_lower_conv_direct(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_node *a = &cx->g->nodes[n->input[0]], *b = &cx->g->nodes[n->input[1]];
    /* x, y (dy) and w of the convolution, whichever node holds them */
    const ir_node *x = n->op == IR_OP_CONV ? a : n->op == IR_OP_CONV_GRAD_DATA ? n : b;
    const ir_node *y = n->op == IR_OP_CONV ? n : a;
    const ir_type *xt = &x->type, *yt = &y->type;
    conv_dims d = {xt->dim[0], xt->dim[1],  xt->dim[2],  xt->dim[3],  yt->dim[1],       yt->dim[2],
                   yt->dim[3], n->iattr[0], n->iattr[1], n->iattr[2], ir_conv_groups(n)};
    int xc = (x->flags & IR_FLAG_CNHW) != 0, yc = (y->flags & IR_FLAG_CNHW) != 0;
    ir_dtype t0 = a->type.dtype, t1 = b->type.dtype, tn = n->type.dtype;
    int kernel;
    int64_t count;
    switch (n->op) {
    case IR_OP_CONV:
        kernel = k_conv_direct(cx, &d, tn, t0, t1, yc, xc), count = ir_numel(yt);
        break;
    case IR_OP_CONV_GRAD_DATA:
        kernel = k_conv_direct_grad_data(cx, &d, tn, t0, t1, xc, yc), count = ir_numel(xt);
        break;
    default:
        kernel = k_conv_direct_grad_weight(cx, &d, tn, t0, t1, yc, xc);
        count = ir_numel(&n->type);
        break;
    }
    if (kernel < 0) return -1;
    cg_begin_step(cx, node);
    int in0 = cg_step_slot(cx, n->input[0]), in1 = cg_step_slot(cx, n->input[1]);
    int lib = (n->flags & IR_FLAG_CONV_LIB) ? cg_library_conv(cx, node, 0, in0, in1, -1) : -1;
    cg_add_kernel_call(cx, kernel, count, 3, (int[]){0, in0, in1}, (int64_t[]){0, 0, 0});
    if (lib >= 0) cx->p->calls[lib].conv.nalt = 1;
    return 0;
}

static int r_concat(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    return simple_step(cx, node, k_concat(cx, cx->g, n), ir_numel(&n->type));
}

static int r_channel_slice(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    return simple_step(cx, node, k_channel_slice(cx, in_type(cx, n, 0), n), ir_numel(&n->type));
}

static int r_dropout(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    return simple_step(cx, node, k_dropout(cx, in_type(cx, n, 0), n), ir_numel(&n->type));
}

static int r_plane_dot(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    int cnhw = (cx->g->nodes[n->input[0]].flags & IR_FLAG_CNHW) != 0;
    return simple_step(cx, node,
                       k_plane_dot(cx, in_type(cx, n, 1), in_type(cx, n, 0), &n->type, cnhw),
                       ir_numel(&n->type));
}

static int r_pool(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const int64_t *a = n->iattr;
    int k;
    switch (n->op) {
    case IR_OP_MAXPOOL:
    case IR_OP_AVGPOOL:
        k = k_pool(cx, n->op == IR_OP_MAXPOOL, in_type(cx, n, 0), &n->type, a[0], a[1], a[2]);
        break;
    case IR_OP_MAXPOOL_GRAD: {
        const ir_type *x = in_type(cx, n, 1);
        const ir_type *dy = in_type(cx, n, 0);
        /* a GPU (one thread per plane would leave it idle), or bf16 on a
         * plane too large to sum locally: the gathered form, one thread per
         * dx element */
        int bf = n->type.dtype == IR_BF16 || x->dtype == IR_BF16 || dy->dtype == IR_BF16;
        if (bf && !cx->dl->gather_pool_grad && x->dim[2] * x->dim[3] <= MAX_LOCAL_PLANE)
            return simple_step(cx, node,
                               k_maxpool_grad_bf16(cx, x, dy, n->type.dtype, a[0], a[1], a[2]),
                               x->dim[0] * x->dim[1]);
        if (bf || cx->dl->gather_pool_grad)
            return simple_step(cx, node,
                               k_maxpool_grad_gather(cx, x, dy, n->type.dtype, a[0], a[1], a[2]),
                               ir_numel(x));
        k = k_maxpool_grad(cx, x, in_type(cx, n, 0), a[0], a[1], a[2]);
        return simple_step(cx, node, k, x->dim[0] * x->dim[1]);
    }
    default: k = k_avgpool_grad(cx, &n->type, in_type(cx, n, 0), a[0], a[1], a[2]); break;
    }
    return simple_step(cx, node, k, ir_numel(&n->type));
}

/* transpose (passes/layout.c): the whole tensor as one chunk of the
 * layout kernels the conv lowering uses, NCHW <-> CNHW. */
static int r_transpose(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_type *x = in_type(cx, n, 0);
    int64_t N = x->dim[0], C = x->dim[1], P = x->dim[2] * x->dim[3];
    int k = n->flags & IR_FLAG_CNHW ? cg_kernel_to_cnhw(cx, C, P, N, n->type.dtype, x->dtype)
                                    : cg_kernel_from_cnhw(cx, C, P, N, n->type.dtype, x->dtype);
    return simple_step(cx, node, k, N * C);
}

static int r_alias(cg_ctx *cx, int node) {
    cg_step *s = cg_begin_step(cx, node);
    s->alias = cx->g->nodes[node].input[0];
    cg_step_slot(cx, s->alias);
    return 0;
}

/* batchnorm as one step of several kernels: statistics into the scratch
 * area (mean at 0, variance at C), normalise, and in training update the
 * running statistics in place (ema with the unbiased variance). */
static int r_batchnorm(cg_ctx *cx, int node) {
    const ir_node *n = &cx->g->nodes[node];
    const ir_type *x = &cx->g->nodes[n->input[0]].type;
    if (x->dtype != IR_F32 || n->type.dtype != IR_F32)
        return cg_fail(
            cx, "node %d: batchnorm on bf16 tensors must be lowered first (passes/lower.c)", node);
    int64_t C = x->dim[1], M = x->dim[0] * inner_of(x), count = ir_numel(x);
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

/* allreduce: a step without a kernel. Its buffers are the sum (buf[0]) and
 * the local gradient (buf[1]); the executor hands them to the
 * communication queue, or, with one replica, makes the sum share the
 * gradient's bytes (runtime/exec/exec.c). */
static int r_allreduce(cg_ctx *cx, int node) {
    cg_begin_step(cx, node);
    cg_step_slot(cx, cx->g->nodes[node].input[0]);
    return 0;
}

static const cg_rule rules[IR_OP_COUNT] = {
    [IR_OP_CONV] = {cg_lower_gemm_op},
    [IR_OP_BATCHNORM] = {r_batchnorm},
    [IR_OP_MAXPOOL] = {r_pool},
    [IR_OP_AVGPOOL] = {r_pool},
    [IR_OP_GLOBAL_AVGPOOL] = {r_global_avgpool},
    [IR_OP_FLATTEN] = {r_alias},
    [IR_OP_DENSE] = {cg_lower_gemm_op},
    [IR_OP_CONV_GRAD_DATA] = {cg_lower_gemm_op},
    [IR_OP_CONV_GRAD_WEIGHT] = {cg_lower_gemm_op},
    [IR_OP_MAXPOOL_GRAD] = {r_pool},
    [IR_OP_AVGPOOL_GRAD] = {r_pool},
    [IR_OP_RESHAPE_LIKE] = {r_alias},
    [IR_OP_DENSE_GRAD_DATA] = {cg_lower_gemm_op},
    [IR_OP_DENSE_GRAD_WEIGHT] = {cg_lower_gemm_op},
    [IR_OP_ALLREDUCE] = {r_allreduce},
    [IR_OP_TRANSPOSE] = {r_transpose},
    [IR_OP_PLANE_DOT] = {r_plane_dot},
    [IR_OP_CONCAT] = {r_concat},
    [IR_OP_CHANNEL_SLICE] = {r_channel_slice},
    [IR_OP_DROPOUT] = {r_dropout},
};

/* ---- programs ------------------------------------------------------------------ */

cg_options cg_default_options(void) {
    return (cg_options){.scratch_max_bytes = (size_t)64 << 20, .parallel_threshold = 32768};
}

cg_program *cg_generate(const ir_graph *g, cg_dialect d, const cg_options *o, char *err,
                        size_t errlen) {
    return cg_generate_info(g, d, o, NULL, err, errlen);
}

cg_program *cg_generate_info(const ir_graph *g, cg_dialect d, const cg_options *o,
                             cg_kernel_info **info, char *err, size_t errlen) {
    if (info) *info = NULL;
    cg_ctx cx = {.dl = cg_dialect_of(d),
                 .opt = o ? *o : cg_default_options(),
                 .g = g,
                 .err = err,
                 .errlen = errlen};
    if (errlen) err[0] = 0;
    if (!cx.dl) {
        base_fail(err, errlen, "codegen: no dialect %d", (int)d);
        return NULL;
    }
    cx.p = calloc(1, sizeof *cx.p);
    BASE_CHECK_ALLOC(cx.p);
    cx.p->dialect = d;
    cx.p->graph_hash = cg_graph_hash(g);
    cg_str_printf(&cx.src, "%s", cx.dl->prelude);
    for (int i = 0; i < g->n && !cx.bf16; i++) cx.bf16 = g->nodes[i].type.dtype == IR_BF16;
    if (cx.bf16) cg_str_printf(&cx.src, "%s", cx.dl->bf16_prelude);
    cg_str_printf(&cx.src, "%s", cx.dl->coop_prelude);
    cx.stored = malloc((size_t)(g->n ? g->n : 1));
    BASE_CHECK_ALLOC(cx.stored);
    ir_stored(g, cx.stored);
    int rc = 0;
    /* Every attribute becomes a float literal somewhere: refuse the graph,
     * naming the node, rather than render one that is not a finite float. */
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        int nfa = (unsigned)n->op < IR_OP_COUNT ? ir_op_num_fattrs(n->op) : 0;
        for (int j = 0; j < nfa && !rc; j++)
            if (!isfinite(n->fattr[j]) || !isfinite((float)n->fattr[j]))
                rc = cg_fail(&cx,
                             "node %d (%s '%s' at %d:%d): attribute %d is %g, not a finite "
                             "32-bit float",
                             i, ir_ops[n->op].name, n->name, n->line, n->col, j, n->fattr[j]);
    }
    for (int i = 0; i < g->n && !rc; i++) {
        const ir_node *n = &g->nodes[i];
        if (ir_is_source(n->op)) continue;
        if ((unsigned)n->op >= IR_OP_COUNT) {
            rc = cg_fail(&cx, "node %d: bad op %d", i, (int)n->op);
            break;
        }
        const cg_rule *r = &rules[n->op];
        if (n->group || ir_node_fuse_class(n) != IR_FUSE_NONE) {
            /* a fusion group (contiguous, ir_verify), or a lone node rendered as one */
            int hi = i + 1;
            while (n->group && hi < g->n && g->nodes[hi].group == n->group) hi++;
            rc = cg_render_group(&cx, i, hi);
            i = hi - 1;
        } else if (r->render) {
            rc = r->render(&cx, i);
        } else {
            rc = cg_fail(&cx, "node %d: no codegen rule for op %s", i, ir_ops[n->op].name);
        }
    }
    for (int k = 0; k < cx.p->nkernels; k++) cg_str_free(&cx.bodies[k]);
    free(cx.bodies);
    free(cx.stored);
    if (!rc && cx.bad_literal) rc = -1;
    if (rc || !info) free(cx.info);
    if (rc) {
        cg_str_free(&cx.src);
        cg_program_free(cx.p);
        return NULL;
    }
    for (int s = 0; s < cx.p->nsteps; s++)
        if (cx.p->steps[s].scratch > cx.p->scratch) cx.p->scratch = cx.p->steps[s].scratch;
    cx.p->source = cx.src.s;
    cx.p->source_len = cx.src.len;
    if (info) *info = cx.info;
    return cx.p;
}
