/* codegen/fused.h — what the files rendering one fusion group share
 * (fused.c: the group, its operands and the elementwise shape;
 * fused_channel.c: the channel shape, in one block or split over
 * several; fused_row.c: the softmax row shape): the group under rendering
 * and the steps every loop shape uses. Private to those three files. */
#ifndef DPC_CODEGEN_FUSED_H
#define DPC_CODEGEN_FUSED_H

#include "codegen/internal.h"

typedef struct {
    cg_ctx *cx;
    const ir_graph *g;
    int lo, hi, kind; /* ir_group_kind */
    int nargs;
    int arg_node[CG_MAX_ARGS];
    ir_dtype arg_type[CG_MAX_ARGS];
    int writes[CG_MAX_ARGS];
    const char *idx; /* index expression of an 'i' access */
    int used_c;      /* an operand read a per-channel vector */
    /* While rendering one expression: its loads, hoisted into locals
     * v<k> before it (see cg_grp_operand()), deduplicated. */
    cg_str *pre;
    int nload, first_load;
    char loads[32][72];
    /* Channel groups: per-channel loads (b[c]) made once per channel, at
     * the top of the iteration, as c<k>: the passes' loops then hold no load
     * that could alias their stores, and vectorise. */
    cg_str chan_pre;
    int nchan;
    char chan[64][72];
    /* channel groups */
    const ir_type *X;
    int64_t N, C, inner;
    int xcnhw; /* X is channel-major: channel c is the row [c*N*inner, (c+1)*N*inner) */
    int level[CG_MAX_GROUP];
    /* A channel split over `split` blocks (> 1: dialect split_blocks): each
     * block's share of a pass is q in [qlo, qhi); partial sums go to the
     * scratch argument b<nargs>, one per (reduction, channel, block). */
    int split;
    int64_t chunk;
} cg_grp;

static inline const ir_node *nd(const cg_grp *G, int i) { return &G->g->nodes[i]; }
static inline int member(const cg_grp *G, int i) { return i >= G->lo && i < G->hi; }

/* The kernel argument of node id (added on first use); -1 when the
 * kernel has no argument left. */
int cg_grp_arg(cg_grp *G, int id, int writes);
/* Input k of member m in the current context, into o: a member's local,
 * or a load hoisted before the expression; acc is the access ('i', 'c',
 * ..., ir_op_access). */
void cg_grp_operand(cg_grp *G, int m, int k, int acc, cg_str *o);
/* "const float tK = EXPR;" for a pointwise member, indented by ind (an
 * assign computes nothing). */
void cg_grp_compute(cg_grp *G, int m, cg_str *b, const char *ind);
/* Stores at the end of an iteration at index `at`: stored values, then
 * assigns; `which` filters members (NULL: all), each statement gets
 * prefix `one` (a cooperative kernel's first_thread). */
void cg_grp_stores(cg_grp *G, cg_str *b, const char *at, int (*which)(const cg_grp *, int),
                   const char *one);
/* The channel shape (fused_channel.c): blocks per channel (1: one block,
 * its body by cg_grp_body_channel; > 1: cg_grp_channel_split renders the
 * kernels and the step itself). */
int cg_grp_split_of(const cg_grp *G, int64_t *chunk);
int cg_grp_body_channel(cg_grp *G, cg_kdef *kd);
int cg_grp_channel_split(cg_grp *G, const char *name);
/* The softmax row shape (fused_row.c). */
int cg_grp_body_row(cg_grp *G, cg_kdef *kd);

#endif
