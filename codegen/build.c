/* codegen/build.c — building a cg_program step by step (render.c's rules,
 * fused.c and gemm.c call these while rendering a graph), and the listings dpc
 * prints of one. The record itself is format/program.c's.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/internal.h"

/* ---- building ------------------------------------------------------------------ */

/* Array a of *cap elements of `size` bytes, n in use, with room for one
 * more: full, it doubles (starting at `first`). */
static void *grow(void *a, int n, int *cap, int first, size_t size) {
    if (n < *cap) return a;
    *cap = *cap ? 2 * *cap : first;
    a = realloc(a, size * (size_t)*cap);
    BASE_CHECK_ALLOC(a);
    return a;
}

cg_step *cg_begin_step(cg_ctx *cx, int node) {
    cg_program *p = cx->p;
    p->steps = grow(p->steps, p->nsteps, &cx->scap, 64, sizeof *p->steps);
    cg_step *s = &p->steps[p->nsteps++];
    memset(s, 0, sizeof *s);
    s->node = node;
    s->op = cx->g->nodes[node].op;
    s->alias = -1;
    s->nbuf = 1;
    s->buf[0] = node;
    s->first_call = p->ncalls;
    return s;
}

int cg_step_slot(cg_ctx *cx, int id) {
    cg_step *s = &cx->p->steps[cx->p->nsteps - 1];
    for (int j = 0; j < s->nbuf; j++)
        if (s->buf[j] == id) return j;
    if (s->nbuf == CG_MAX_BUFS) abort(); /* IR_MAX_INPUTS + output + scratch fit */
    s->buf[s->nbuf] = id;
    return s->nbuf++;
}

static cg_call *new_call(cg_ctx *cx) {
    cg_program *p = cx->p;
    p->calls = grow(p->calls, p->ncalls, &cx->ccap, 128, sizeof *p->calls);
    cg_call *c = &p->calls[p->ncalls++];
    memset(c, 0, sizeof *c);
    p->steps[p->nsteps - 1].ncalls++;
    return c;
}

void cg_add_kernel_call(cg_ctx *cx, int kernel, int64_t count, int nargs, const int *slot,
                        const int64_t *off) {
    cg_call *c = new_call(cx);
    c->kind = CG_CALL_KERNEL;
    c->kernel = kernel;
    c->count = count;
    c->launch = cg_launch_for(cx->dl, cx->info[kernel].block, cx->info[kernel].split, count);
    c->nargs = nargs;
    for (int j = 0; j < nargs; j++) {
        c->arg[j] = slot[j];
        c->off[j] = off[j];
    }
}

cg_launch cg_launch_for(const cg_dialect_desc *dl, int block, int split, int64_t count) {
    cg_launch l = {0};
    if (!dl->gpu_launch) return l;
    int64_t grid = count * (split > 1 ? split : 1);
    l.block = block > 0 ? (uint32_t)block : dl->threads_per_block;
    if (block <= 0) grid = (count + l.block - 1) / l.block;
    /* the loops are grid-stride: a capped grid still covers count */
    l.grid = (uint32_t)(grid < 1 ? 1 : grid > CG_MAX_GRID ? CG_MAX_GRID : grid);
    return l;
}

/* A library call (GEMM, convolution) on three slots. */
static cg_call *library_call(cg_ctx *cx, cg_call_kind kind, int slot0, int slot1, int slot2) {
    cg_call *c = new_call(cx);
    c->kind = kind;
    c->kernel = -1;
    c->nargs = 3;
    c->arg[0] = slot0;
    c->arg[1] = slot1;
    c->arg[2] = slot2;
    return c;
}

void cg_add_gemm_call(cg_ctx *cx, const cg_gemm *d, int slot_a, int slot_b, int slot_c) {
    cg_call *c = library_call(cx, CG_CALL_GEMM, slot_a, slot_b, slot_c);
    /* the fields only: the struct's trailing padding stays zero, so calls
     * compare bytewise equal to parsed ones */
    memcpy(&c->gemm, d, offsetof(cg_gemm, tf32) + sizeof d->tf32);
    /* --precision tf32 marked the op (passes/precision.c) */
    const ir_node *n = &cx->g->nodes[cx->p->steps[cx->p->nsteps - 1].node];
    c->gemm.tf32 = (n->flags & IR_FLAG_TF32) && d->type_a == IR_F32;
}

int cg_add_conv_call(cg_ctx *cx, const cg_conv *d, int slot_out, int slot_in, int slot_in2) {
    cg_call *c = library_call(cx, CG_CALL_CONV, slot_out, slot_in, slot_in2);
    c->conv = *d;
    return (int)(c - cx->p->calls);
}

/* ---- listings ----------------------------------------------------------------------- */

void cg_program_describe(const cg_program *p, const ir_graph *g, FILE *f) {
    for (int si = 0; si < p->nsteps; si++) {
        const cg_step *s = &p->steps[si];
        const ir_node *n = &g->nodes[s->node];
        int lo = s->node;
        while (n->group && lo > 0 && g->nodes[lo - 1].group == n->group) lo--;
        if (n->group)
            fprintf(f, "step %d: g%d (nodes %d-%d)", si, n->group, lo, s->node);
        else
            fprintf(f, "step %d: %%%d %s", si, s->node, ir_ops[s->op].name);
        if (s->alias >= 0 && !s->ncalls) fprintf(f, " (view of %%%d)", s->alias);
        for (int c = s->first_call; c < s->first_call + s->ncalls; c++) {
            const cg_call *call = &p->calls[c];
            if (call->kind == CG_CALL_CONV)
                fprintf(f,
                        "%s conv %s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " k=%" PRId64
                        " s=%" PRId64 " p=%" PRId64 " K=%" PRId64 " G=%" PRId64
                        " (else the next %d)",
                        c > s->first_call ? "," : ":", cg_conv_dir_name(call->conv.dir),
                        call->conv.N, call->conv.C, call->conv.H, call->conv.W, call->conv.kh,
                        call->conv.sh, call->conv.ph, call->conv.K, call->conv.G, call->conv.nalt);
            else if (call->kind == CG_CALL_GEMM)
                fprintf(f, "%s gemm %c%c m=%" PRId64 " n=%" PRId64 " k=%" PRId64,
                        c > s->first_call ? "," : ":", call->gemm.transa ? 'T' : 'N',
                        call->gemm.transb ? 'T' : 'N', call->gemm.m, call->gemm.n, call->gemm.k);
            else
                fprintf(f, "%s %s x%" PRId64, c > s->first_call ? "," : ":",
                        p->kernels[call->kernel].name, call->count);
        }
        fputc('\n', f);
    }
}
