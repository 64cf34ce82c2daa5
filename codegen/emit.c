/* codegen/emit.c — a kernel definition (cg_kdef) made into module source:
 * the dialect's signature and loop header around the body (the prelude,
 * signature and loop header are the dialect's table, codegen/dialect.c),
 * one kernel for identical definitions (types, writes, cost, body), and
 * the thread count of the cooperative skeleton. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/internal.h"

/* ---- dialects --------------------------------------------------------------
 * Preludes, signatures and loop headers are the dialect's table
 * (codegen/dialect.c); only modules that hold bf16 tensors get the bf16
 * prelude, so f32 modules are as they always were. */

const char *cg_ctype(ir_dtype t) { return t == IR_I32 ? "int" : t == IR_BF16 ? "bf16_t" : "float"; }

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
            cg_str_printf(o, "%s%s *%sb%d, ", kd->writes[j] ? "" : "const ", cg_ctype(kd->type[j]),
                          rs, j);
    cg_str_printf(o, "%s", dl->params_tail);
    if (dl->unpack_args)
        for (int j = 0; j < kd->nargs; j++) {
            const char *c = kd->writes[j] ? "" : "const ";
            cg_str_printf(o, "    %s%s *%sb%d = (%s%s *)arg[%d];\n", c, cg_ctype(kd->type[j]), rs,
                          j, c, cg_ctype(kd->type[j]), j);
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
