/* codegen/internal.h — what the files of codegen/ share: a growable
 * string (str.c), a kernel definition and its emission (emit.c), the
 * program under construction (build.c), and each op family's step
 * (render.c's rule table calls them). Not for other modules (they use
 * codegen.h). */
#ifndef DPC_CODEGEN_INTERNAL_H
#define DPC_CODEGEN_INTERNAL_H

#include <stdarg.h>

#include "codegen/codegen.h"
#include "codegen/cost.h"
#include "base/err.h"

typedef struct {
    char *s;
    size_t len, cap;
} cg_str;

void cg_str_printf(cg_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cg_str_append(cg_str *b, const char *s, size_t n);
void cg_str_free(cg_str *b);

/* A kernel as the renderer sees it before a dialect wraps it: argument
 * element types (b0 is written, the others read) and a body that computes
 * iteration i. `cost` is the estimated work of one iteration. */
typedef struct {
    const char *op; /* for the kernel's name: "relu", "im2col" */
    int nargs;
    ir_dtype type[CG_MAX_ARGS];
    int writes[CG_MAX_ARGS]; /* arguments the body stores to */
    int64_t cost;
    int64_t serial;  /* longest loop one iteration runs (the cost report); 0: cost */
    int no_restrict; /* arguments may alias (in-place elementwise kernels) */
    /* > 0: a cooperative kernel, one iteration per block of `block`
     * threads (the dialect's reduction skeleton; 1 in C); 0: one per thread */
    int block;
    int split; /* > 1: each iteration runs on `split` blocks (launch grid count * split) */
    cg_str body;
} cg_kdef;

/* The program being built plus the module source for both dialect parts. */
typedef struct {
    cg_program *p;
    const cg_dialect_desc *dl; /* the dialect's table (codegen/dialect.c) */
    cg_options opt;
    const ir_graph *g;
    cg_str src;
    cg_str *bodies;        /* rendered bodies by kernel index, to share identical kernels */
    unsigned char *stored; /* ir_stored() of g */
    cg_kernel_info *info;  /* by kernel index, for the cost report (codegen/cost.h) */
    int kcap, scap, ccap;
    int bf16;        /* the graph stores some tensor in bf16: the prelude converts */
    int bad_literal; /* a constant had no checked literal: cg_generate fails */
    char *err;
    size_t errlen;
} cg_ctx;

/* cg_generate, also handing back what each kernel's definition knew
 * (*info: nkernels entries, malloc'd; the caller frees it). */
cg_program *cg_generate_info(const ir_graph *g, cg_dialect d, const cg_options *o,
                             cg_kernel_info **info, char *err, size_t errlen);

/* Renders (or finds an identical) kernel; returns its index. Frees kd->body. */
int cg_emit_kernel(cg_ctx *cx, cg_kdef *kd);
/* Starts a step for node (buf[0] = node) and returns it; add buffers with
 * cg_step_slot, calls with cg_add_kernel_call / cg_add_gemm_call. */
cg_step *cg_begin_step(cg_ctx *cx, int node);
int cg_step_slot(cg_ctx *cx, int node_or_scratch); /* slot in the current step */
void cg_add_kernel_call(cg_ctx *cx, int kernel, int64_t count, int nargs, const int *slot,
                        const int64_t *off);
/* The launch of `count` iterations of a kernel whose definition had
 * cg_kdef.block = block and .split = split, in dialect dl (all zero where
 * it records none). */
cg_launch cg_launch_for(const cg_dialect_desc *dl, int block, int split, int64_t count);
void cg_add_gemm_call(cg_ctx *cx, const cg_gemm *d, int slot_a, int slot_b, int slot_c);
/* A library convolution (slots: output, inputs); returns its call index,
 * so the caller can count the alternative calls it adds after it (nalt). */
int cg_add_conv_call(cg_ctx *cx, const cg_conv *d, int slot_out, int slot_in, int slot_in2);
/* The library call of conv-family node `node` (IR_FLAG_CONV_LIB) into the
 * current step, its descriptor from the graph (codegen/gemm.c). */
int cg_library_conv(cg_ctx *cx, int node, int out, int in0, int in1, int64_t w_bf16);

/* Kernels the GEMM lowering needs (rendered in im2col.c), for chunks of nb
 * images. im2col: one iteration per (column row, image), count = CKK*nb;
 * col2im: one per element of dx, count = nb*C*H*W. */
int cg_kernel_im2col(cg_ctx *cx, const cg_conv_shape *c, int64_t nb, ir_dtype col, ir_dtype x,
                     int x_cnhw);
int cg_kernel_col2im(cg_ctx *cx, const cg_conv_shape *c, int64_t nb, ir_dtype dx, ir_dtype col,
                     int dx_cnhw);
/* The dense lowering (IR_FLAG_CONV_DENSE): unroll writes the weights
 * w[K][C][k][k] as the matrix T[K*P][C*H*W] of the linear map from an
 * image to its output, one row of C*H*W per iteration (count = K*P);
 * fold is its adjoint, dw from dT, one filter per iteration (count =
 * K*C). Both assume every output pixel's window covers the input
 * (ir_conv_dense_ok), so T has no zero entries. */
int cg_kernel_conv_unroll(cg_ctx *cx, const cg_conv_shape *c);
int cg_kernel_conv_fold(cg_ctx *cx, const cg_conv_shape *c);
/* [nb][K][P] (NCHW) to [K][nb*P] (CNHW) and back, one row of P per
 * iteration: count = K*nb. */
int cg_kernel_to_cnhw(cg_ctx *cx, int64_t K, int64_t P, int64_t nb, ir_dtype dst, ir_dtype src);
int cg_kernel_from_cnhw(cg_ctx *cx, int64_t K, int64_t P, int64_t nb, ir_dtype dst, ir_dtype src);
/* Rows of a channel-major chunk: b0[k*ds + img*P + q] = b1[k*ss + img*P +
 * q], count = K*nb (the conv lowering's copies between a CNHW tensor and
 * the scratch block, where a type conversion is due). */
int cg_kernel_cnhw_rows(cg_ctx *cx, int64_t P, int64_t nb, int64_t ds, int64_t ss, int64_t K,
                        ir_dtype dst, ir_dtype src);
/* Steps of the GEMM-backed ops (gemm.c). 0, or -1 with cx->err set. */
int cg_lower_gemm_op(cg_ctx *cx, int node);
/* conv and its gradients with groups > 1: direct kernels (conv_direct.c). */
int cg_lower_conv_direct(cg_ctx *cx, int node);

/* Threads per block of a cooperative kernel (cg_kdef.block) of `iters`
 * iterations, each looping over `elems` elements (1 in C). */
int cg_coop_block(const cg_dialect_desc *dl, int64_t iters, int64_t elems);

/* Reading an element of type t as float, and storing a float as t: wrap
 * the access in cg_ld(t) ... cg_end(t), the value in cg_st(t) ... cg_end(t)
 * (bf16 converts, format/bf16.h; f32 and i32 are used as they are). */
static inline const char *cg_ld(ir_dtype t) { return t == IR_BF16 ? "dpc_bf16_to_f32(" : ""; }
static inline const char *cg_st(ir_dtype t) { return t == IR_BF16 ? "dpc_f32_to_bf16(" : ""; }
static inline const char *cg_end(ir_dtype t) { return t == IR_BF16 ? ")" : ""; }
/* The element type's name in kernels: "float", "bf16_t", "int". */
const char *cg_ctype(ir_dtype t);
/* b0[i] = b1[i] converted (f32 <-> bf16), count = elements. */
int cg_kernel_cast(cg_ctx *cx, ir_dtype to, ir_dtype from);

/* The message into cx->err (base_fail); returns -1. */
#define cg_fail(cx, ...) base_fail((cx)->err, (cx)->errlen, __VA_ARGS__)
/* A double constant for acc_t arithmetic, into buf (>= 32 bytes). */
const char *cg_double_lit(double v, char *buf); /* NULL: not a finite double */
/* The float (dbl 0) or double literal of v; when there is none, sets
 * cx->bad_literal and cx->err and returns "0", so the kernel is never used. */
const char *cg_lit(cg_ctx *cx, double v, int dbl, char *buf);

/* Elements per (n, c) plane of an [N, C, inner...] type (1 below rank 3). */
static inline int64_t cg_inner_of(const ir_type *t) {
    int64_t inner = 1;
    for (int d = 2; d < t->ndim; d++) inner *= t->dim[d];
    return inner;
}
/* The type of input j of node n. */
const ir_type *cg_in_type(const cg_ctx *cx, const ir_node *n, int j);
/* One step for node with one kernel over the node's inputs, count
 * iterations, slots in input order (render.c); kernel < 0 passes -1 on. */
int cg_simple_step(cg_ctx *cx, int node, int kernel, int64_t count);

/* The steps of the op families outside fusion groups (render.c's rule
 * table), each 0 or -1 with cx->err set: pooling (pool.c), concat,
 * channel_slice, plane_dot and dropout (channel.c), unlowered batchnorm
 * (batchnorm.c), transpose (im2col.c). */
int cg_render_pool(cg_ctx *cx, int node);
int cg_render_global_avgpool(cg_ctx *cx, int node);
int cg_render_concat(cg_ctx *cx, int node);
int cg_render_channel_slice(cg_ctx *cx, int node);
int cg_render_plane_dot(cg_ctx *cx, int node);
int cg_render_dropout(cg_ctx *cx, int node);
int cg_render_embedding(cg_ctx *cx, int node);
int cg_render_embedding_grad(cg_ctx *cx, int node);
int cg_render_positions(cg_ctx *cx, int node); /* and positions_grad */
int cg_render_seq_ce(cg_ctx *cx, int node);
int cg_render_attention(cg_ctx *cx, int node); /* attention.c */
int cg_render_batchnorm(cg_ctx *cx, int node);
int cg_render_transpose(cg_ctx *cx, int node);
int cg_render_rows(cg_ctx *cx, int node); /* layernorm, softmax and kin (rows.c) */
/* permute, slice, slice_grad, the masks, concat off axis 1 (shape.c) */
int cg_render_shape(cg_ctx *cx, int node);

/* Fusion groups and lone pointwise / reduction nodes (fused.c; which
 * nodes are fusible is ir/ir.h's ir_node_fuse_class): one step, one
 * kernel for nodes lo..hi-1 (a group, or one node). */
int cg_render_group(cg_ctx *cx, int lo, int hi);

#endif
