/* codegen/render.c — the program entry: cg_generate walks the graph in
 * order and hands each node to its rule, a fusion group (or a lone
 * pointwise or reduction node) to fused.c, and collects the kernels and
 * steps into one program of one dialect.
 *
 * A kernel is a body that computes iteration i of a loop over [0, count),
 * written once in the subset of C that is also CUDA C (idx_t, acc_t, the
 * float math functions, DPC_NAN, DPC_NEG_INF). The dialect only supplies the
 * prelude, the signature and the loop header: a `for` over the range of
 * iterations the cpu backend's thread pool hands it in C, a grid-stride
 * loop in CUDA (emit.c). Shapes and attributes are
 * baked into the body as constants, so identical layers share one kernel.
 *
 * Pointwise ops (templates in ir_op_expr), the per-channel reductions and
 * softmax cross-entropy are rendered by fused.c, one kernel per fusion
 * group (a lone node is a group of one); the other ops' rules are in a
 * file per family: pool.c, conv_direct.c, channel.c, batchnorm.c, rows.c,
 * im2col.c (with the GEMM lowering's kernels), gemm.c. Reductions run one
 * output element per iteration with a serial inner loop in a double
 * accumulator.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/internal.h"

/* ---- the rule table ------------------------------------------------------------ */

typedef int (*render_fn)(cg_ctx *cx, int node);

typedef struct {
    render_fn render; /* the node's step; pointwise and reductions go to fused.c */
} cg_rule;

const ir_type *cg_in_type(const cg_ctx *cx, const ir_node *n, int j) {
    return &cx->g->nodes[n->input[j]].type;
}

int cg_simple_step(cg_ctx *cx, int node, int kernel, int64_t count) {
    if (kernel < 0) return -1;
    const ir_node *n = &cx->g->nodes[node];
    cg_begin_step(cx, node);
    int slot[CG_MAX_ARGS] = {0};
    int64_t off[CG_MAX_ARGS] = {0};
    for (int j = 0; j < n->ninputs; j++) slot[j + 1] = cg_step_slot(cx, n->input[j]);
    cg_add_kernel_call(cx, kernel, count, n->ninputs + 1, slot, off);
    return 0;
}

static int r_alias(cg_ctx *cx, int node) {
    cg_step *s = cg_begin_step(cx, node);
    s->alias = cx->g->nodes[node].input[0];
    cg_step_slot(cx, s->alias);
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
    [IR_OP_BATCHNORM] = {cg_render_batchnorm},
    [IR_OP_MAXPOOL] = {cg_render_pool},
    [IR_OP_AVGPOOL] = {cg_render_pool},
    [IR_OP_GLOBAL_AVGPOOL] = {cg_render_global_avgpool},
    [IR_OP_FLATTEN] = {r_alias},
    [IR_OP_DENSE] = {cg_lower_gemm_op},
    [IR_OP_CONV_GRAD_DATA] = {cg_lower_gemm_op},
    [IR_OP_CONV_GRAD_WEIGHT] = {cg_lower_gemm_op},
    [IR_OP_MAXPOOL_GRAD] = {cg_render_pool},
    [IR_OP_AVGPOOL_GRAD] = {cg_render_pool},
    [IR_OP_RESHAPE_LIKE] = {r_alias},
    [IR_OP_DENSE_GRAD_DATA] = {cg_lower_gemm_op},
    [IR_OP_DENSE_GRAD_WEIGHT] = {cg_lower_gemm_op},
    [IR_OP_ALLREDUCE] = {r_allreduce},
    [IR_OP_TRANSPOSE] = {cg_render_transpose},
    [IR_OP_PLANE_DOT] = {cg_render_plane_dot},
    [IR_OP_CONCAT] = {cg_render_concat},
    [IR_OP_CHANNEL_SLICE] = {cg_render_channel_slice},
    [IR_OP_RESHAPE] = {r_alias},
    [IR_OP_PERMUTE] = {cg_render_shape},
    [IR_OP_SLICE] = {cg_render_shape},
    [IR_OP_SLICE_GRAD] = {cg_render_shape},
    [IR_OP_CAUSAL_MASK] = {cg_render_shape},
    [IR_OP_PAD_MASK] = {cg_render_shape},
    [IR_OP_DROPOUT] = {cg_render_dropout},
    [IR_OP_LAYERNORM] = {cg_render_rows},
    [IR_OP_LAYERNORM_STATS] = {cg_render_rows},
    [IR_OP_LAYERNORM_GRAD_DATA] = {cg_render_rows},
    [IR_OP_LAYERNORM_GRAD_GAMMA] = {cg_render_rows},
    [IR_OP_SUM_LEADING] = {cg_render_rows},
    [IR_OP_SOFTMAX] = {cg_render_rows},
    [IR_OP_SOFTMAX_GRAD] = {cg_render_rows},
    [IR_OP_EMBEDDING] = {cg_render_embedding},
    [IR_OP_EMBEDDING_GRAD] = {cg_render_embedding_grad},
    [IR_OP_POSITIONS] = {cg_render_positions},
    [IR_OP_POSITIONS_GRAD] = {cg_render_positions},
    [IR_OP_MATMUL] = {cg_lower_gemm_op},
    [IR_OP_SEQ_CE] = {cg_render_seq_ce},
    [IR_OP_SEQ_CE_GRAD] = {cg_render_seq_ce},
    [IR_OP_ATTENTION] = {cg_render_attention},
    [IR_OP_ATTENTION_LSE] = {cg_render_attention},
    [IR_OP_ATTENTION_GRAD] = {cg_render_attention},
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
