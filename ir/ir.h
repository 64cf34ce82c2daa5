/* ir/ir.h — the graph IR every other module speaks.
 *
 * A graph is an array of nodes in topological order (inputs before users).
 * Each node has one op from the op table, up to IR_MAX_INPUTS inputs (node
 * indices), integer and float attributes, and one output tensor type. Shapes
 * are static: the per-device batch is part of every activation's shape.
 *
 * Usage:
 *     ir_graph *g = ir_new();
 *     int x = ir_add_input(g, "image", ir_shape4(128, 3, 32, 32), IR_F32);
 *     int w = ir_add_param(g, "conv0.weight", ir_shape4(64, 3, 7, 7), IR_INIT_XAVIER);
 *     int y = ir_add_node(g, IR_OP_CONV, (int[]){x, w}, 2,
 *                         (int64_t[]){7, 2, 3, 1}, NULL, err, sizeof err);
 *     if (y < 0) fprintf(stderr, "%s\n", err);     // shape rule said no
 *     ir_verify(g, err, sizeof err);               // after every pass
 *     ir_dump(g, stdout);                          // stable text form
 *     ir_free(g);
 *
 * The op table (IR_OPS below) is the single source of truth for an op's
 * name, arity, attribute schema, fusion class and shape rule; passes and
 * codegen add their per-op rules in tables indexed by ir_op.
 *
 * One file per concern behind this header: ops.c (the op table), shape.c
 * (types, shape rules), expr.c (per-element expressions), graph.c
 * (building, copying, hashing), verify.c, dump.c (text, Graphviz, summary),
 * fusion.c (the fusion groups' kinds, roles and levels), schedule.c
 * (ir_train); internal.h is what they share.
 */
#ifndef DPC_IR_H
#define DPC_IR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define IR_MAX_DIMS   4
#define IR_MAX_INPUTS 8
#define IR_MAX_IATTRS 6
#define IR_MAX_FATTRS 3
#define IR_NAME_MAX   64

typedef enum { IR_F32, IR_BF16, IR_I32 } ir_dtype;

typedef struct {
    int ndim;
    int64_t dim[IR_MAX_DIMS];
    ir_dtype dtype;
} ir_type;

/* How codegen runs an op, and so whether the fusion pass may group it
 * (docs/DESIGN.md §3.1, §5.7): the one classification that passes/fuse.c
 * groups by, codegen/fused.c renders by and ir/validate.c checks plans by.
 * POINTWISE, CHANNEL and ROW ops are fusible (on float values:
 * ir_node_fusible); the others run as steps of their own. */
typedef enum {
    IR_FUSE_NONE,      /* no kernel body to share: sources, views, and ops
                          codegen renders alone (concat, dropout, plane_dot,
                          global_avgpool, channel_slice, batchnorm, the row
                          ops: layernorm, softmax and their gradients) */
    IR_FUSE_POINTWISE, /* out[i] from a per-element expression (ir_op_expr) */
    IR_FUSE_CHANNEL,   /* a per-channel reduction codegen runs as passes of one
                          kernel: [N, C, ...] over every axis but 1 */
    IR_FUSE_ROW,       /* a softmax row: [N, K] over K, one sample per iteration */
    IR_FUSE_WINDOW,    /* pooling: small windows, hand-written loops */
    IR_FUSE_OPAQUE,    /* a GEMM or library call (conv, dense, their gradients),
                          the all-reduce, transpose */
} ir_fuse_class;

/* The op table. X(ID, "name", min_arity, max_arity, fusion class,
 *                 "integer attributes", "float attributes")
 * Attribute strings name the slots of iattr[] / fattr[] in order, comma
 * separated; they fix how many slots ir_add_node copies, what the text dump
 * prints and how many values the plan file holds per node. The frontend's
 * keyword checks are its own operator table's (frontend/elab.c). Shape
 * rules are the switch of ir_infer_type in ir/shape.c.
 *
 * Forward ops (what the frontend emits):
 *   input, param, state   sources (state: BatchNorm running statistics,
 *                         optimizer momentum; persistent, not trained)
 *   conv(x[N,C,H,W], w[K,C/g,k,k]) k,s,p,g        -> [N,K,Ho,Wo]
 *                         g groups (g >= 1 divides C and K): output
 *                         channel o reads input channels of group
 *                         o / (K/g) only; g = C = K is depthwise
 *   bias_add(x, b[C])     adds b along axis 1     -> x
 *   batchnorm(x, gamma, beta, running_mean, running_var)  training=1 uses
 *                         batch statistics and updates the running ones
 *                         (momentum, eps as MXNet). Lowered away by the
 *                         `lower` pass into the bn_* primitives below.
 *   relu(x), add(a, b)    elementwise             -> x
 *   maxpool(x) k,s,p      floor ("valid") output   -> [N,C,Ho,Wo]
 *   avgpool(x) k,s,p      count includes padding   -> [N,C,Ho,Wo]
 *   global_avgpool(x)     mean over H,W            -> [N,C]
 *   flatten(x)                                     -> [N, C*H*W]
 *   dense(x[...,F], w[U,F]) x·wᵀ over the last axis, the leading axes
 *                         flattened into the GEMM's rows  -> [...,U]
 *   softmax_cross_entropy(logits[N,K], label[N] i32) smoothing
 *                         per-sample loss against the target
 *                         (1-smoothing)*onehot + smoothing/K (PyTorch's
 *                         label_smoothing): lse - (1-e)*x[y] - e*mean(x) -> [N]
 *
 * Primitives (lowering, autodiff, optimizer). "per channel" reduces every
 * axis but 1 (N,H,W for rank 4; N for rank 2); M is that element count.
 *   bn_mean(x)                        per-channel mean            -> [C]
 *   bn_var(x, mean)                   per-channel biased variance -> [C]
 *   bn_apply(x, mean, var, gamma, beta) eps
 *                         (x-mean)/sqrt(var+eps)*gamma+beta        -> x
 *   ema(running, value) momentum,value_scale
 *                         momentum*running + (1-momentum)*value*value_scale
 *                         (the running variance uses the unbiased batch
 *                         variance, value_scale = M/(M-1), as cuDNN — MXNet's
 *                         GPU path, which the article ran — and PyTorch do)
 *   assign(dst, value)    writes value into dst's buffer (dst a param or
 *                         state) after every other reader of dst; the
 *                         output aliases dst                       -> dst
 *   ones_like(x)          all ones (the seed of autodiff)          -> x
 *   conv_grad_data(dy, w) k,s,p,h,w,g   dL/dx of conv      -> [N,C,h,w]
 *   conv_grad_weight(dy, x) k,s,p,g     dL/dw of conv      -> [K,C/g,k,k]
 *   bias_grad(dy)                     per-channel sum of dy      -> [C]
 *   bn_grad_gamma(dy, x, mean, var) eps   per-channel sum(dy*xhat) -> [C]
 *   bn_grad_data(dy, x, mean, var, gamma, dgamma, dbeta) eps
 *                         gamma/sqrt(var+eps) * (dy - dbeta/M - xhat*dgamma/M)
 *                         (batch-statistics BatchNorm)             -> x
 *   relu_grad(dy, y)      dy where y > 0, else 0                   -> dy
 *   maxpool_grad(dy, x) k,s,p   dy routed to the first maximum of each
 *                         window in row-major scan order           -> x
 *   avgpool_grad(dy) k,s,p,h,w                            -> [N,C,h,w]
 *   global_avgpool_grad(dy) h,w       dy/(h*w) broadcast   -> [N,C,h,w]
 *   reshape_like(x, like)  x's data with like's shape (like is not read)
 *   dense_grad_data(dy, w)    dy·w                               -> [...,F]
 *   dense_grad_weight(dy, x)  dyᵀ·x, summed over the leading axes  -> [U,F]
 *   softmax_ce_grad(logits, label, dloss) smoothing
 *                         (softmax(logits) - (1-e)*onehot(label) - e/K)
 *                         * dloss[n]                               -> logits
 *   sgd_momentum(w, grad, v, lr[1], grad_scale[1]) momentum,wd
 *                         momentum*v - lr*(grad*grad_scale + wd*w)  -> w
 *                         (MXNet's SGD; the new w is add(w, new v))
 *   allreduce(grad) bucket,offset   the sum of grad over every data-parallel
 *                         replica (passes/partition.c). Out of place: the
 *                         local gradient keeps its value for its other
 *                         readers. No kernel: the executor hands the step to
 *                         the communication queue, or with one replica lets
 *                         the sum share the gradient's bytes. A bucket's
 *                         gradients travel packed, each at its element
 *                         offset. sync=1: a synchronised BatchNorm's
 *                         statistic (passes/lower.c, autodiff.c), a bucket
 *                         of its own that its next reader waits for; the
 *                         partition pass numbers those buckets after the
 *                         gradients'                            -> grad
 *   transpose(x) why      x's values in the other layout (IR_FLAG_CNHW
 *                         below): NCHW <-> CNHW. Made by the layout pass
 *                         (passes/layout.c) where a reader needs the layout
 *                         its producer does not give; why is the reason
 *                         (pass_layout_reason)                     -> x
 *   scale(x, s[1])        x * s[0]                                 -> x
 *   bn_unbias(v, s[1]) count   v * count / (count - s[0]): with
 *                         s = 1/R (R replicas, `replica_scale`) and count
 *                         the elements per channel on one replica, the
 *                         unbiased factor R*count / (R*count - 1) of a
 *                         variance over all R replicas' batches  -> v
 * The other optimizers' pieces (passes/optimizer.c; g = grad*grad_scale,
 * [1] operands are scalars):
 *   sumsq(x)              sum of x² over the whole tensor, a channel
 *                         reduction with one channel [1, 1, numel] -> [1]
 *   lars_lr(wsq, gsq, lr, grad_scale) eta,wd,eps   lr·trust, trust =
 *                         eta‖w‖/(‖g‖ + wd‖w‖ + eps), 1 when ‖w‖ or ‖g‖
 *                         is 0 (‖w‖ = sqrt(wsq), ‖g‖ = sqrt(gsq)·grad_scale)
 *                                                                  -> [1]
 *   adam_m(m, grad, grad_scale) beta   beta·m + (1-beta)·g         -> m
 *   adam_v(v, grad, grad_scale) beta   beta·v + (1-beta)·g²        -> v
 *   bias_correction(step) beta         1/(1 - beta^step)           -> [1]
 *   adam_dir(w, m, v, c1, c2) eps,wd   m·c1/(sqrt(v·c2) + eps) + wd·w -> w
 *   lamb_lr(wsq, usq, lr)  lr·sqrt(wsq)/sqrt(usq), lr when either is 0
 *                                                                  -> [1]
 *   descend(w, u, lr)      w - lr·u                                -> w
 *   clip_scale(gsq, grad_scale) max_norm   clip_grad_norm's grad_scale:
 *                         grad_scale·c, c = max_norm/(‖g‖ + 1e-6) when
 *                         that is below 1 (NaN stays NaN), else 1; ‖g‖ =
 *                         sqrt(gsq)·grad_scale, gsq the sum of every
 *                         gradient's sumsq (PyTorch's clip_grad_norm_) -> [1]
 * Activations and products (frontend: sigmoid, clip, relu6 = clip(x, 0, 6),
 * mul; the broadcast rule is mul_channel's):
 *   sigmoid(x)            1/(1 + exp(-x))                          -> x
 *   sigmoid_grad(dy, y)   dy·y·(1-y), y the sigmoid's output       -> dy
 *   clip(x) lo,hi         lo where x < lo, hi where x > hi, else x
 *                         (lo <= hi, both finite)                  -> x
 *   clip_grad(dy, x) lo,hi  dy where lo <= x <= hi, else 0 (MXNet's
 *                         clip: the bounds themselves pass dy)      -> dy
 *   mul(a, b)             a·b, a and b of one shape               -> a
 *   mul_channel(x[N,C,...], s[N,C,1,1] or [N,C])  x·s[n,c]: one
 *                         factor per (sample, channel) plane, the
 *                         squeeze-and-excitation scale; s at i / inner,
 *                         so both forms of s are the same bytes     -> x
 *   plane_dot(dy, x)      per (n, c) plane, the sum of dy·x over the
 *                         plane (mul_channel's gradient for s)    -> [N,C]
 *   concat(a, b, ...) axis   the inputs one after another along axis
 *                         (1..rank-1; rank-4 layouts only for axis 1);
 *                         every other dimension equal
 *                                                   -> [N, sum of C, ...]
 *   channel_slice(x) offset,channels   channels [offset, offset+channels)
 *                         of x (concat's gradient for each input)
 *                                                   -> [N, channels, ...]
 *   dropout(x, key[4]) salt,p   inverted dropout, training only: x/(1-p)
 *                         where the element is kept, else 0. Kept: the
 *                         top 24 bits of ir_dropout_hash(key, salt, e) are
 *                         at least round(p·2^24), e the element's NCHW
 *                         index, key the 64-bit key in four 16-bit
 *                         chunks (the input IR_DROPOUT_KEY, which the
 *                         runtime sets from --seed, the step and the
 *                         replica); salt numbers the dropouts of a
 *                         network. Its gradient is the same op on dy (the
 *                         same mask, recomputed)                  -> x
 * Activations of attention networks (frontend: tanh, gelu(x, approx)):
 *   tanh(x)               tanh(x)                                  -> x
 *   tanh_grad(dy, y)      dy·(1-y²), y the tanh's output           -> dy
 *   gelu(x)               x·Φ(x) = x/2·(1 + erf(x/√2)) (approx=erf,
 *                         PyTorch's default)                       -> x
 *   gelu_grad(dy, x)      dy·(Φ(x) + x·φ(x)), φ the normal density -> dy
 *   gelu_tanh(x)          x/2·(1 + tanh(√(2/π)·(x + 0.044715x³)))
 *                         (approx=tanh, GPT-2's)                   -> x
 *   gelu_tanh_grad(dy, x) dy·d/dx of gelu_tanh, t = tanh(u):
 *                         (1+t)/2 + x/2·(1-t²)·√(2/π)·(1 + 3·0.044715x²)
 *                                                                  -> dy
 * Row ops: x of rank 2 or 3, [R..., C], its rows the C values of the last
 * axis (R rows in all); one row per kernel iteration, loops over C.
 *   layernorm(x, gamma[C], beta[C]) eps   per row, xhat = (x - mean) *
 *                         rstd, rstd = 1/sqrt(biased var + eps) (eps > 0);
 *                         xhat·gamma + beta                        -> x
 *   layernorm_stats(x) eps   per row (mean, rstd)              -> [R, 2]
 *   layernorm_grad_data(dy, x, stats, gamma)   g = dy·gamma:
 *                         rstd·(g - mean(g) - xhat·mean(g·xhat)),
 *                         the means over the row                   -> x
 *   layernorm_grad_gamma(dy, x, stats)   sum over rows of dy·xhat  -> [C]
 *   sum_leading(dy)       sum over every axis but the last (layernorm's
 *                         beta gradient)                           -> [C]
 *   softmax(x)            per row, exp(x - max) / sum exp(x - max) -> x
 *   softmax_grad(dy, y)   per row, y·(dy - sum(dy·y)), y the softmax's
 *                         output                                   -> dy
 * Sequences (language models; ids are i32, [N, T] or any rank up to 3):
 *   embedding(ids, w[V,D])  row ids[...] of w for each id: a gather.
 *                         An id outside [0, V) reads row 0 or V-1
 *                         (clamped; the token data refuses such ids
 *                         before they get here)            -> [ids..., D]
 *   embedding_grad(dy[ids..., D], ids) vocab   dw[v] = the sum of the dy
 *                         rows whose id is v, in ids order, so the bits
 *                         do not depend on threads (each thread owns
 *                         rows of dw); clamped ids as the gather's
 *                                                         -> [vocab, D]
 *   positions(x[N,T,...], w[L,D])   rows 0..T-1 of w for every n: a
 *                         learned position table (T <= L; x only gives
 *                         the shape, ids or floats)           -> [N, T, D]
 *   positions_grad(dy[N,T,D]) length   dw[t] = the sum over n of dy[n, t]
 *                         in n order (one owner per element), rows >= T
 *                         zero                            -> [length, D]
 *   bias_add_last(x[..., C], b[C])  adds b along the last axis (dense's
 *                         bias above rank 2; its gradient is sum_leading)
 *                                                                  -> x
 *   matmul(a, b) ta,tb    op(a)·op(b) for each index of the leading axes,
 *                         op(t) t, or with ta (tb) = 1 t with its last two
 *                         axes swapped: [..., M, K]·[..., K, N], the
 *                         leading axes equal (no broadcasting); a strided
 *                         batched GEMM. Its gradients are matmuls too
 *                                                       -> [..., M, N]
 *   seq_cross_entropy(logits[N,T,V], targets[N,T] i32) ignore
 *                         per sequence, the mean over its positions whose
 *                         target is not `ignore` of lse(row) - row[y]; 0
 *                         where every target is ignored; NaN where a
 *                         target other than `ignore` is outside [0, V)
 *                                                                -> [N]
 *   seq_ce_grad(logits, targets, dloss[N]) ignore   (softmax - onehot)
 *                         * dloss[n] / count[n] per kept position, 0 at
 *                         ignored ones                      -> logits
 *   sub(a, b)             a - b, the same shape (`t - u`)   -> a
 *   mul_const(x) c        x * c (`t * 2`, `t / 4`, `-t`)    -> x
 *   add_const(x) c        x + c (`t + 1`, `t - 0.5`)        -> x
 * Shapes of attention networks (ir/shape_view.c; float x of rank 2..4,
 * NCHW only: the layout pass gives them row-major operands):
 *   reshape(x) d1,d2,d3   x's bytes as [N, d1, d2, d3], 0 ending the list
 *                         (the batch stays); a view, as flatten  -> [N, d...]
 *   permute(x) p0..p3     output axis k is input axis p[k] (p0 = 0: the
 *                         batch stays first; slots past the rank 0)
 *                                                 -> [x.dim[p0], x.dim[p1], ...]
 *   slice(x) axis,start,len  elements [start, start+len) along axis
 *                         (1 <= axis < rank)          -> x with dim[axis] = len
 *   slice_grad(dy) axis,start,size   dy placed at [start, start+len) along
 *                         axis of a zero tensor (slice's gradient)
 *                                                     -> dy with dim[axis] = size
 *   causal_mask(x[..., Tq, Tk]) grad   where key j > query i + (Tk - Tq):
 *                         -inf (grad = 0), 0 (grad = 1: its own gradient);
 *                         x elsewhere (Tq <= Tk: no row all masked)  -> x
 *   pad_mask(x[N, ..., Tk], ids[N, Tk] i32) id,grad   where ids[n, j] is id
 *                         (a padding token): key j of sample n -inf (grad
 *                         = 0) or 0 (grad = 1); x elsewhere          -> x
 * concat(a, b, ...) axis takes any axis 1..rank-1 of such tensors too.
 * Fused attention (flash-style: the [Tq, Tk] scores are never stored):
 *   attention(q[N,Tq,C], k[N,Tk,C], v[N,Tk,C] [, key[4]])
 *                         heads,causal,salt  scale,p   per head h (channels
 *                         h·D..h·D+D-1, D = C/heads) and query row i:
 *                         s_j = scale·q_i·k_j over the visible keys j
 *                         (all, or with causal j <= i + Tk - Tq; causal
 *                         needs Tq <= Tk), P = softmax(s), out_i = sum_j
 *                         P_j·m_j·v_j, m_j = 1/(1-p) where dropout's hash
 *                         (salt, e = ((n·H + h)·Tq + i)·Tk + j) keeps the
 *                         weight, else 0; 1 without dropout (p = 0: no
 *                         key input)                            -> [N,Tq,C]
 *   attention_lse(q, k, v) heads,causal scale   per (n, h, i) the
 *                         log-sum-exp of the row's scores s, kept for the
 *                         backward                            -> [N,H,Tq]
 *   attention_grad(dy, q, k, v, out, lse [, key]) heads,causal,salt,which
 *                         scale,p   FlashAttention-2's backward, scores
 *                         recomputed: P = exp(s - lse), dP = m·(dy_i·v_j),
 *                         D_i = dy_i·out_i, dS = P·(dP - D_i); which 0:
 *                         dq = scale·dS·k (-> q), 1: dk = scale·dSᵀ·q
 *                         (-> k), 2: dv = (P·m)ᵀ·dy (-> v)
 */
/* The input every dropout reads its key from (runtime/train/replicas.c). */
#define IR_DROPOUT_KEY "dropout_key"
/* New ops go at the end: plans store an op as its index (the static_assert
 * in ir/ops.c and test_ir's op_order_is_pinned hold the order). */
#define IR_OPS(X)                                                                                 \
    X(INPUT, "input", 0, 0, IR_FUSE_NONE, "classes", "")                                          \
    X(PARAM, "param", 0, 0, IR_FUSE_NONE, "init", "")                                             \
    X(STATE, "state", 0, 0, IR_FUSE_NONE, "init", "")                                             \
    X(CONV, "conv", 2, 2, IR_FUSE_OPAQUE, "k,s,p,g", "")                                          \
    X(BIAS_ADD, "bias_add", 2, 2, IR_FUSE_POINTWISE, "", "")                                      \
    X(BATCHNORM, "batchnorm", 5, 5, IR_FUSE_NONE, "training,sync", "eps,momentum")                \
    X(RELU, "relu", 1, 1, IR_FUSE_POINTWISE, "", "")                                              \
    X(ADD, "add", 2, 2, IR_FUSE_POINTWISE, "", "")                                                \
    X(MAXPOOL, "maxpool", 1, 1, IR_FUSE_WINDOW, "k,s,p", "")                                      \
    X(AVGPOOL, "avgpool", 1, 1, IR_FUSE_WINDOW, "k,s,p", "")                                      \
    X(GLOBAL_AVGPOOL, "global_avgpool", 1, 1, IR_FUSE_NONE, "", "")                               \
    X(FLATTEN, "flatten", 1, 1, IR_FUSE_NONE, "", "")                                             \
    X(DENSE, "dense", 2, 2, IR_FUSE_OPAQUE, "", "")                                               \
    X(SOFTMAX_CE, "softmax_cross_entropy", 2, 2, IR_FUSE_ROW, "", "smoothing")                    \
    X(BN_MEAN, "bn_mean", 1, 1, IR_FUSE_CHANNEL, "", "")                                          \
    X(BN_VAR, "bn_var", 2, 2, IR_FUSE_CHANNEL, "", "")                                            \
    X(BN_APPLY, "bn_apply", 5, 5, IR_FUSE_POINTWISE, "", "eps")                                   \
    X(EMA, "ema", 2, 2, IR_FUSE_POINTWISE, "", "momentum,value_scale")                            \
    X(ASSIGN, "assign", 2, 2, IR_FUSE_POINTWISE, "", "")                                          \
    X(ONES_LIKE, "ones_like", 1, 1, IR_FUSE_POINTWISE, "", "")                                    \
    X(CONV_GRAD_DATA, "conv_grad_data", 2, 2, IR_FUSE_OPAQUE, "k,s,p,h,w,g", "")                  \
    X(CONV_GRAD_WEIGHT, "conv_grad_weight", 2, 2, IR_FUSE_OPAQUE, "k,s,p,g", "")                  \
    X(BIAS_GRAD, "bias_grad", 1, 1, IR_FUSE_CHANNEL, "", "")                                      \
    X(BN_GRAD_GAMMA, "bn_grad_gamma", 4, 4, IR_FUSE_CHANNEL, "", "eps")                           \
    X(BN_GRAD_DATA, "bn_grad_data", 7, 7, IR_FUSE_POINTWISE, "", "eps")                           \
    X(RELU_GRAD, "relu_grad", 2, 2, IR_FUSE_POINTWISE, "", "")                                    \
    X(MAXPOOL_GRAD, "maxpool_grad", 2, 2, IR_FUSE_WINDOW, "k,s,p", "")                            \
    X(AVGPOOL_GRAD, "avgpool_grad", 1, 1, IR_FUSE_WINDOW, "k,s,p,h,w", "")                        \
    X(GLOBAL_AVGPOOL_GRAD, "global_avgpool_grad", 1, 1, IR_FUSE_POINTWISE, "h,w", "")             \
    X(RESHAPE_LIKE, "reshape_like", 2, 2, IR_FUSE_NONE, "", "")                                   \
    X(DENSE_GRAD_DATA, "dense_grad_data", 2, 2, IR_FUSE_OPAQUE, "", "")                           \
    X(DENSE_GRAD_WEIGHT, "dense_grad_weight", 2, 2, IR_FUSE_OPAQUE, "", "")                       \
    X(SOFTMAX_CE_GRAD, "softmax_ce_grad", 3, 3, IR_FUSE_ROW, "", "smoothing")                     \
    X(SGD_MOMENTUM, "sgd_momentum", 5, 5, IR_FUSE_POINTWISE, "", "momentum,wd")                   \
    X(ALLREDUCE, "allreduce", 1, 1, IR_FUSE_OPAQUE, "bucket,offset,sync", "")                     \
    X(TRANSPOSE, "transpose", 1, 1, IR_FUSE_OPAQUE, "why", "")                                    \
    X(SCALE, "scale", 2, 2, IR_FUSE_POINTWISE, "", "")                                            \
    X(BN_UNBIAS, "bn_unbias", 2, 2, IR_FUSE_POINTWISE, "", "count")                               \
    X(SUMSQ, "sumsq", 1, 1, IR_FUSE_CHANNEL, "", "")                                              \
    X(LARS_LR, "lars_lr", 4, 4, IR_FUSE_POINTWISE, "", "eta,wd,eps")                              \
    X(ADAM_M, "adam_m", 3, 3, IR_FUSE_POINTWISE, "", "beta")                                      \
    X(ADAM_V, "adam_v", 3, 3, IR_FUSE_POINTWISE, "", "beta")                                      \
    X(BIAS_CORRECTION, "bias_correction", 1, 1, IR_FUSE_POINTWISE, "", "beta")                    \
    X(ADAM_DIR, "adam_dir", 5, 5, IR_FUSE_POINTWISE, "", "eps,wd")                                \
    X(LAMB_LR, "lamb_lr", 3, 3, IR_FUSE_POINTWISE, "", "")                                        \
    X(DESCEND, "descend", 3, 3, IR_FUSE_POINTWISE, "", "")                                        \
    X(SIGMOID, "sigmoid", 1, 1, IR_FUSE_POINTWISE, "", "")                                        \
    X(SIGMOID_GRAD, "sigmoid_grad", 2, 2, IR_FUSE_POINTWISE, "", "")                              \
    X(CLIP, "clip", 1, 1, IR_FUSE_POINTWISE, "", "lo,hi")                                         \
    X(CLIP_GRAD, "clip_grad", 2, 2, IR_FUSE_POINTWISE, "", "lo,hi")                               \
    X(MUL, "mul", 2, 2, IR_FUSE_POINTWISE, "", "")                                                \
    X(MUL_CHANNEL, "mul_channel", 2, 2, IR_FUSE_POINTWISE, "", "")                                \
    X(PLANE_DOT, "plane_dot", 2, 2, IR_FUSE_NONE, "", "")                                         \
    X(CONCAT, "concat", 2, IR_MAX_INPUTS, IR_FUSE_NONE, "axis", "")                               \
    X(CHANNEL_SLICE, "channel_slice", 1, 1, IR_FUSE_NONE, "offset,channels", "")                  \
    X(DROPOUT, "dropout", 2, 2, IR_FUSE_NONE, "salt", "p")                                        \
    X(TANH, "tanh", 1, 1, IR_FUSE_POINTWISE, "", "")                                              \
    X(TANH_GRAD, "tanh_grad", 2, 2, IR_FUSE_POINTWISE, "", "")                                    \
    X(GELU, "gelu", 1, 1, IR_FUSE_POINTWISE, "", "")                                              \
    X(GELU_GRAD, "gelu_grad", 2, 2, IR_FUSE_POINTWISE, "", "")                                    \
    X(GELU_TANH, "gelu_tanh", 1, 1, IR_FUSE_POINTWISE, "", "")                                    \
    X(GELU_TANH_GRAD, "gelu_tanh_grad", 2, 2, IR_FUSE_POINTWISE, "", "")                          \
    X(LAYERNORM, "layernorm", 3, 3, IR_FUSE_NONE, "", "eps")                                      \
    X(LAYERNORM_STATS, "layernorm_stats", 1, 1, IR_FUSE_NONE, "", "eps")                          \
    X(LAYERNORM_GRAD_DATA, "layernorm_grad_data", 4, 4, IR_FUSE_NONE, "", "")                     \
    X(LAYERNORM_GRAD_GAMMA, "layernorm_grad_gamma", 3, 3, IR_FUSE_NONE, "", "")                   \
    X(SUM_LEADING, "sum_leading", 1, 1, IR_FUSE_NONE, "", "")                                     \
    X(SOFTMAX, "softmax", 1, 1, IR_FUSE_NONE, "", "")                                             \
    X(SOFTMAX_GRAD, "softmax_grad", 2, 2, IR_FUSE_NONE, "", "")                                   \
    X(EMBEDDING, "embedding", 2, 2, IR_FUSE_NONE, "", "")                                         \
    X(EMBEDDING_GRAD, "embedding_grad", 2, 2, IR_FUSE_NONE, "vocab", "")                          \
    X(BIAS_ADD_LAST, "bias_add_last", 2, 2, IR_FUSE_POINTWISE, "", "")                            \
    X(MATMUL, "matmul", 2, 2, IR_FUSE_OPAQUE, "ta,tb", "")                                        \
    X(SEQ_CE, "seq_cross_entropy", 2, 2, IR_FUSE_NONE, "ignore", "")                              \
    X(SEQ_CE_GRAD, "seq_ce_grad", 3, 3, IR_FUSE_NONE, "ignore", "")                               \
    X(SUB, "sub", 2, 2, IR_FUSE_POINTWISE, "", "")                                                \
    X(MUL_CONST, "mul_const", 1, 1, IR_FUSE_POINTWISE, "", "c")                                   \
    X(ADD_CONST, "add_const", 1, 1, IR_FUSE_POINTWISE, "", "c")                                   \
    X(RESHAPE, "reshape", 1, 1, IR_FUSE_NONE, "d1,d2,d3", "")                                     \
    X(PERMUTE, "permute", 1, 1, IR_FUSE_NONE, "p0,p1,p2,p3", "")                                  \
    X(SLICE, "slice", 1, 1, IR_FUSE_NONE, "axis,start,len", "")                                   \
    X(SLICE_GRAD, "slice_grad", 1, 1, IR_FUSE_NONE, "axis,start,size", "")                        \
    X(CAUSAL_MASK, "causal_mask", 1, 1, IR_FUSE_NONE, "grad", "")                                 \
    X(PAD_MASK, "pad_mask", 2, 2, IR_FUSE_NONE, "id,grad", "")                                    \
    X(ATTENTION, "attention", 3, 4, IR_FUSE_NONE, "heads,causal,salt", "scale,p")                 \
    X(ATTENTION_LSE, "attention_lse", 3, 3, IR_FUSE_NONE, "heads,causal", "scale")                \
    X(ATTENTION_GRAD, "attention_grad", 6, 7, IR_FUSE_NONE, "heads,causal,salt,which", "scale,p") \
    X(CLIP_SCALE, "clip_scale", 2, 2, IR_FUSE_POINTWISE, "", "max_norm")                          \
    X(POSITIONS, "positions", 2, 2, IR_FUSE_NONE, "", "")                                         \
    X(POSITIONS_GRAD, "positions_grad", 1, 1, IR_FUSE_NONE, "length", "")

typedef enum {
#define X(id, name, amin, amax, fuse, iattrs, fattrs) IR_OP_##id,
    IR_OPS(X)
#undef X
        IR_OP_COUNT
} ir_op;

typedef struct {
    const char *name;
    int min_arity, max_arity;
    ir_fuse_class fuse;
    const char *iattrs; /* comma-separated attribute names, "" for none */
    const char *fattrs;
} ir_op_info;

extern const ir_op_info ir_ops[IR_OP_COUNT];
/* The op's fusion class; IR_FUSE_NONE for an op outside the table. */
static inline ir_fuse_class ir_op_fuse(ir_op op) {
    return (unsigned)op < IR_OP_COUNT ? ir_ops[op].fuse : IR_FUSE_NONE;
}
int ir_op_by_name(const char *name); /* -1 when unknown */
int ir_op_num_iattrs(ir_op op);
int ir_op_num_fattrs(ir_op op);
/* Name of attribute slot i ("k", "eps"); writes into buf, returns buf. */
const char *ir_op_attr_name(ir_op op, int is_float, int slot, char *buf, size_t n);
/* A source: a node with no inputs whose value comes from outside the graph
 * (the data, the parameters, the optimizer and BatchNorm state). */
static inline int ir_is_source(ir_op op) {
    return op == IR_OP_INPUT || op == IR_OP_PARAM || op == IR_OP_STATE;
}
/* Persistent: a source that lives across steps (parameters, optimizer and
 * BatchNorm state): what checkpoints save and executors keep resident. */
static inline int ir_is_persistent(ir_op op) { return op == IR_OP_PARAM || op == IR_OP_STATE; }

/* ---- per-element rules -------------------------------------------------
 * A pointwise op computes output element i from a C expression over its
 * inputs; the fusion pass chains such expressions inside one kernel and
 * codegen renders them (codegen/fused.c). The template language:
 *   $k    input k at i            $kc  input k at the channel of i
 *   $ks   input k's element 0     $ko  input k at i / inner (outer index)
 *   @k    float attribute k       #M   1/M (elements per channel)
 *   #I    1/inner (elements per (n, c) plane)
 *   $kl   input k at i's position along the last axis (i % last)
 * where the output is [N, C, inner...]. assign's expression is the value it
 * writes into input 0's buffer (which it does not read).
 * ir_op_expr() is NULL for ops that are not pointwise. */
const char *ir_op_expr(ir_op op);
/* How a pointwise op reads input k: 'i', 'c', 's', 'o', 'l' as above, or 0 when
 * the expression does not read it. */
int ir_op_access(ir_op op, int k);

/* Parameter / state initialisers (PARAM and STATE iattr[0]). */
/* The train section's `init`: the weights made IR_INIT_XAVIER (conv and
 * dense) start as MXNet's Xavier, N(0, std²) (init normal(std=S), the
 * embeddings' tables too) or He's normal over fan_in, N(0, 2/fan_in). */
enum { IR_TRAIN_INIT_XAVIER, IR_TRAIN_INIT_NORMAL, IR_TRAIN_INIT_KAIMING };
/* normal: N(0, IR_INIT_NORMAL_STD²), GPT-2's embedding tables. scaled:
 * GPT-2's residual projections, N(0, (S/√M)²), S the train section's
 * normal std (IR_INIT_NORMAL_STD unless init normal(std=S)), M the number
 * of parameters so marked in the graph (nanoGPT's 0.02/√(2·n_layer)).
 * Appended: plans store the value. */
typedef enum { IR_INIT_ZERO, IR_INIT_ONE, IR_INIT_XAVIER, IR_INIT_NORMAL, IR_INIT_SCALED } ir_init;
#define IR_INIT_NORMAL_STD 0.02

/* Node flags. */
enum {
    IR_FLAG_OUTPUT = 1 << 0, /* read by the runtime after a step (loss, logits) */
    IR_FLAG_LOSS = 1 << 1,   /* the node autodiff starts from */
    IR_FLAG_GRAD = 1 << 2,   /* the gradient of a parameter (name: PARAM.grad) */
    /* The layout of a rank-4 activation [N,C,H,W]: stored channel-major,
     * as [C][N][H][W] (the GEMMs' natural output), instead of NCHW. Set
     * only by the layout pass (passes/layout.c); never on a source or on
     * what the runtime reads (output, loss, gradient). */
    IR_FLAG_CNHW = 1 << 3,
    /* A GEMM op (ir_op_gemm) whose product runs in TF32, as tensor cores
     * do: its f32 operands rounded to TF32 (format/tf32.h), the products
     * summed in f32. Set only by the precision pass (--precision tf32). */
    IR_FLAG_TF32 = 1 << 4,
    /* An f32/bf16 conv, conv_grad_data or conv_grad_weight that runs as a
     * library call (oneDNN, cuDNN), its im2col + GEMM lowering (direct
     * kernel, grouped) kept beside it as the alternative (format/program.h
     * cg_conv). Set by the conv pass (--conv library|auto); with
     * IR_FLAG_CONV_TUNE (auto) the runtime times both and runs the faster. */
    IR_FLAG_CONV_LIB = 1 << 5,
    IR_FLAG_CONV_TUNE = 1 << 6,
    /* A convolution on planes so small that every input pixel meets every
     * output pixel (ir_conv_dense_ok), lowered as a dense layer over its
     * unrolled weights instead of im2col + GEMM (codegen/gemm.c). Set by
     * the conv pass (--conv dense|library|auto); a library call keeps it
     * as its alternative. */
    IR_FLAG_CONV_DENSE = 1 << 7,
};
/* The IR text's name of flag bit b ("output", ..., "dense"), read and
 * written by ir_dump and ir/text.c; NULL for bit 3 (IR_FLAG_CNHW, the
 * type's word "cnhw") and every bit past 7. IR_NAMED_FLAGS: the bits
 * named; IR_FLAG_NAME_LIST: the names, for messages. */
const char *ir_flag_name(unsigned b);
#define IR_NAMED_FLAGS    0xf7u
#define IR_FLAG_NAME_LIST "output, loss, grad, tf32, libconv, tune, dense"
/* conv, dense and their gradients: the ops codegen lowers to GEMMs (a
 * grouped conv runs as direct kernels instead, ir_conv_groups > 1). */
int ir_op_gemm(ir_op op);

typedef struct {
    ir_op op;
    int ninputs;
    int input[IR_MAX_INPUTS];
    int64_t iattr[IR_MAX_IATTRS];
    double fattr[IR_MAX_FATTRS];
    ir_type type;
    unsigned flags;
    char name[IR_NAME_MAX]; /* unique for sources; optional label otherwise */
    int line, col;          /* source position in the .net file, 0 if none */
    /* Fusion group (passes/fuse.c): nodes sharing a non-zero group run as
     * one generated kernel; 0 means a kernel (or library call) of its own.
     * A group's nodes are contiguous in graph order (ir_verify checks). */
    int group;
} ir_node;

typedef struct {
    ir_node *nodes;
    int n, cap;
} ir_graph;

/* The layout of node i's rank-4 tensors: 1 (CNHW) or 0 (NCHW) for its own
 * output when it is rank 4, else that of its first rank-4 input; -1 when
 * it has none. ir_verify checks that an op's rank-4 inputs and output
 * share one layout, except for the ops that convert (ir_op_mixes_layout). */
int ir_node_layout(const ir_graph *g, int i);
/* conv, its gradients, global_avgpool(_grad), transpose: codegen reads and
 * writes either layout on each side. */
int ir_op_mixes_layout(ir_op op);
/* Whether codegen can render node n inside a fusion group: a POINTWISE,
 * CHANNEL or ROW op on float values (f32 or bf16: codegen converts; never
 * i32). The plan validator's rule and the fusion pass's. */
int ir_node_fusible(const ir_node *n);
/* Node n's class for grouping: its op's class when ir_node_fusible,
 * else IR_FUSE_NONE. */
ir_fuse_class ir_node_fuse_class(const ir_node *n);

ir_graph *ir_new(void);
void ir_free(ir_graph *g);
ir_graph *ir_clone(const ir_graph *g);
/* A pass's last step: when failed, frees ng and returns -1 (the caller's
 * graph stays as it was); else frees *g, puts ng in its place, returns 0. */
int ir_replace(ir_graph **g, ir_graph *ng, int failed);

ir_type ir_shape1(int64_t a);
ir_type ir_shape2(int64_t a, int64_t b);
ir_type ir_shape4(int64_t a, int64_t b, int64_t c, int64_t d);
/* Elements in one tensor at most: every product of dimensions, and the
 * shape rules' sums of a few, stay far from int64 overflow. ir_add_node
 * refuses larger results; the frontend and the plan loader refuse larger
 * sources. */
#define IR_MAX_NUMEL ((int64_t)1 << 40)
/* Elements of t; INT64_MAX when the product would overflow, 0 with a
 * dimension that is not positive. */
int64_t ir_numel(const ir_type *t);
size_t ir_dtype_size(ir_dtype d);
int ir_type_equal(const ir_type *a, const ir_type *b);
/* Same shape, and both float (f32 or bf16) or both i32: what shape rules
 * compare, since a float tensor's storage type is the precision pass's. */
int ir_type_same_shape(const ir_type *a, const ir_type *b);
/* Whether s is one factor per (sample, channel) plane of x [N,C,H,W]:
 * [N,C,1,1] or [N,C], the same bytes (mul_channel's broadcast rule). */
int ir_is_channel_factor(const ir_type *x, const ir_type *s);
/* dropout's mask hash (a splitmix64 finaliser): the element is kept when
 * ir_dropout_hash(...) >> 40 >= ir_dropout_threshold(p). The kernels spell
 * the same arithmetic out (codegen/channel.c). */
static inline uint64_t ir_dropout_hash(uint64_t key, int64_t salt, int64_t e) {
    uint64_t z = key ^ ((uint64_t)salt * 0xd1b54a32d192ed03ull);
    z += (uint64_t)e * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline uint64_t ir_dropout_threshold(double p) { return (uint64_t)(p * 16777216.0 + 0.5); }
/* Whether node i may run as a library convolution (IR_FLAG_CONV_LIB): a
 * conv, conv_grad_data or conv_grad_weight, of any groups, whose tensors
 * are all f32 or bf16 and NCHW. */
int ir_conv_library_ok(const ir_graph *g, int i);
/* Whether node i may run as a dense product over unrolled weights
 * (IR_FLAG_CONV_DENSE): a conv, conv_grad_data or conv_grad_weight of one
 * group, f32 and NCHW throughout, whose window covers the whole input
 * from every output pixel (so the product multiplies no padding), with
 * unrolled weights of at most IR_CONV_DENSE_MAX elements. */
#define IR_CONV_DENSE_MAX ((int64_t)1 << 22)
int ir_conv_dense_ok(const ir_graph *g, int i);
/* A conv, conv_grad_data or conv_grad_weight node's groups (its "g"). */
int64_t ir_conv_groups(const ir_node *n);
/* Its activations' types, x [N,C,H,W] and y [N,K,Ho,Wo]: whichever of the
 * node and its inputs hold them (y is dy for a gradient). */
void ir_conv_xy(const ir_graph *g, const ir_node *n, const ir_type **x, const ir_type **y);
/* "[128,3,32,32]" (with ":i32" suffix for non-f32) into buf. */
const char *ir_type_str(const ir_type *t, char *buf, size_t n);

/* Adding nodes. All return the new node's index, or -1 with a message in err
 * (no "error:" prefix; callers add their own location). */
int ir_add_input(ir_graph *g, const char *name, ir_type type, int64_t classes);
int ir_add_param(ir_graph *g, const char *name, ir_type type, ir_init init);
int ir_add_state(ir_graph *g, const char *name, ir_type type, ir_init init);
/* iattr/fattr may be NULL (all zero); missing trailing slots are zero. */
int ir_add_node(ir_graph *g, ir_op op, const int *inputs, int ninputs, const int64_t *iattr,
                const double *fattr, char *err, size_t errlen);

/* Shape inference for an op given its inputs and attributes. */
int ir_infer_type(const ir_graph *g, const ir_node *node, ir_type *out, char *err, size_t errlen);

/* Structural checks: topological order, arity, input indices, types agree
 * with the shape rules, unique source names, exactly one loss node at most.
 * Returns 0 when the graph is well formed. */
int ir_verify(const ir_graph *g, char *err, size_t errlen);

/* Index of the node flagged IR_FLAG_LOSS, or -1. */
int ir_loss_node(const ir_graph *g);
/* Count of trainable parameter elements. */
int64_t ir_num_params(const ir_graph *g);

/* Limits of a fusion group, the contract between passes/fuse.c and
 * codegen: nodes, distinct buffers (kernel arguments), passes over a
 * channel's data in a channel-reduction group. */
#define IR_GROUP_MAX_NODES   64
#define IR_GROUP_MAX_BUFFERS 16
#define IR_GROUP_MAX_PASSES  4

/* ---- fusion groups: what passes/fuse.c groups and codegen/fused.c renders
 * agree on, written once here so the two cannot drift (docs/DESIGN.md §5.7).
 *   kind   a group's one iteration space, from the reductions it holds:
 *          elementwise (none), channel, row; never channel and row.
 *   role   a member of a channel group over X: the reduction, a prologue
 *          or epilogue value of X's shape, or a per-channel [C] value.
 *   level  the pass over a channel a member needs: a reduction runs in
 *          the pass after those of its inputs (level = max input level,
 *          + 1 for a reduction); a stored X-shaped value is written in
 *          the pass after the statistics it uses (its level + 1); [C]
 *          values are computed between passes. The group's pass count
 *          is the largest of these (at most IR_GROUP_MAX_PASSES).
 * Usage:
 *     if (ir_node_fuse_class(n) == IR_FUSE_NONE) ...   // not fusible
 *     int kind = ir_group_kind_of(nchannel, nrow);     // -1: no one loop
 *     int passes = ir_channel_levels(g, member, n, stored, X, level);
 */
typedef enum { IR_GROUP_ELEMENTWISE, IR_GROUP_CHANNEL, IR_GROUP_ROW } ir_group_kind;
/* roles in a channel group: X-shaped (prologue/epilogue), reduction, [C] */
typedef enum { IR_ROLE_ELEMENTS, IR_ROLE_REDUCTION, IR_ROLE_PER_CHANNEL } ir_group_role;
/* The kind of a group holding nchannel channel and nrow row reductions;
 * -1 when it holds both. */
int ir_group_kind_of(int nchannel, int nrow);
/* Role of member n in a channel group reducing tensors of shape X. */
ir_group_role ir_channel_role(const ir_node *n, const ir_type *X);
/* The pass in which a stored prologue/epilogue value of level lv is written. */
static inline int ir_store_pass(int lv) { return lv + 1; }
/* Levels of the n members (node ids member[], in topological order) of a
 * channel group over X into level[] (by position), stored[] saying which
 * members' values are stored; returns the passes the group makes. */
int ir_channel_levels(const ir_graph *g, const int *member, int n, const unsigned char *stored,
                      const ir_type *X, int *level);

/* ---- storage: what fusion and memory planning agree on ------------------
 * A view (flatten, reshape_like) reads its input's bytes as another shape
 * and an assign writes into its target's buffer: neither has storage of its
 * own. ir_storage_of() follows such chains to the node that owns the bytes
 * (a source, or a node that computes into a buffer of its own). */
int ir_is_view(ir_op op);
int ir_storage_of(const ir_graph *g, int node);
/* stored[i] = 1 when node i's value is written to memory: every node outside
 * a fusion group, and a group member that a node outside its group reads,
 * that nobody reads, that the runtime reads (output, loss, gradient), or
 * that is an assign. Other group members live in registers only. */
void ir_stored(const ir_graph *g, unsigned char *stored);
/* Number of fusion groups: the largest group id (ids are 1..N). */
int ir_num_groups(const ir_graph *g);

/* Hash of everything generated kernels and memory plans depend on: ops,
 * inputs, attributes, types, fusion groups (names and flags are not part
 * of it). Programs and memory plans in a plan file are keyed by it. */
uint64_t ir_graph_hash(const ir_graph *g);

/* Stable, diff-able and complete text form (ir/text.h reads it back): a
 * `# graph: N nodes` line, then one line per node
 *     %3 = conv %0 %2 k=3 s=1 p=1 : [4,8,8,8]:bf16 @g1 loc(4:9) [output]  # conv0
 * (op, a source's quoted name, inputs, every attribute of the op's schema,
 * type, fusion group, .net position, flags, the name of a non-source);
 * floats in the shortest form strtod reads back bit for bit. A fusion group
 * is introduced by a `# kernel gN: op op ...` comment. */
void ir_dump(const ir_graph *g, FILE *f);
/* The pieces of that form, for ir/text.c's header: v in the shortest %g
 * that reads back exactly; a name as a plain word (unless quote) or a
 * quoted, escaped string. */
void ir_print_double(double v, FILE *f);
void ir_print_name(const char *s, int quote, FILE *f);
/* Graphviz; title is the graph label; each fusion group is a cluster. */
void ir_dot(const ir_graph *g, const char *title, FILE *f);
/* The layer table of `dpc --summary`, ending with `parameters: N`. */
void ir_summary(const ir_graph *g, FILE *f);
/* The table of `dpc --params`: one line per parameter ("param") and per
 * BatchNorm running statistic or fixed gamma/beta ("state") of the eval
 * program, with shape and element count, then the totals. The names are
 * those dprun's --save-params writes and --load-params reads. */
void ir_params_table(const ir_graph *eval, FILE *f);

#include "ir/train.h" /* the training schedule */

#endif
