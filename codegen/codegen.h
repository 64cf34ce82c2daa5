/* codegen/codegen.h — from an IR graph to kernel source plus a step list.
 *
 * One expression renderer, two dialects: C (compiled at run time by the host
 * compiler; the cpu backend's own thread pool runs ranges of a kernel's
 * iterations) and CUDA C (for NVRTC, grid-stride loops). Every kernel is a loop over an index i in [0, count) whose body is
 * the same text in both dialects; only the prelude, the signature and the
 * loop header differ. Shapes are baked in as constants.
 *
 * Usage:
 *     cg_options o = cg_default_options();
 *     cg_program *p = cg_generate(g, CG_DIALECT_C, &o, err, sizeof err);
 *     puts(p->source);                              // the whole module
 *     for (int s = 0; s < p->nsteps; s++)           // run in order
 *         for (int c = 0; c < p->steps[s].ncalls; c++) {
 *             const cg_call *call = &p->calls[p->steps[s].first_call + c];
 *             ...  // CG_CALL_KERNEL: launch p->kernels[call->kernel]
 *         }     // CG_CALL_GEMM: sgemm(call->gemm) on the operand slots
 *     unsigned char *bytes; size_t len;
 *     cg_program_serialize(p, &bytes, &len);        // plan section "KCPU"/"KCUD"
 *     cg_program *q = cg_program_parse(bytes, len, err, sizeof err);
 *     cg_program_free(p);
 *
 * Layout of a program:
 *   kernels  name + argument count; the symbol in the compiled module.
 *   steps    one per non-source node that needs work or aliases, in graph
 *            order. buf[] lists the node ids the step touches, buf[0] its
 *            output; CG_SCRATCH in buf[] means the program's scratch area
 *            (conv columns and CNHW blocks, BatchNorm statistics; one area
 *            of `scratch` floats, reused by every step). alias >= 0 says the
 *            step's output shares that node's buffer (reshape_like, flatten:
 *            no calls; assign: a copy kernel into its target).
 *   calls    each step's calls, contiguous (first_call, ncalls). A call's
 *            arg[j] is a slot index into its step's buf[], off[j] an element
 *            offset into that buffer. A kernel call runs `count` iterations
 *            with args (arg 0 written, the rest read; batchnorm's running-
 *            statistics update reads and writes arg 0). A GEMM call's slots
 *            are A = arg[0], B = arg[1], C = arg[2] (A and C may be disjoint
 *            regions of the scratch area); its offsets live in the
 *            descriptor. Calls of a step run in order; steps run in order.
 * A fusion group (ir_node.group) is one step with one kernel call; the
 * step's node is the group's last node (always stored, see ir_stored), its
 * other stored values and assign targets are further slots. Group members
 * nothing outside the group reads have no buffer at all. The executor only
 * ever walks calls.
 *
 * Kernel ABI. C: `void NAME(void *const *arg, long long count, long long
 * lo, long long hi)` runs iterations [lo, hi) of [0, count), arg[j] the
 * (offset) buffer pointers, and `const long long NAME_grain` is the count
 * below which the backend runs it on one thread. CUDA: `extern "C" __global__ void NAME(T *b0,
 * const T *b1, ..., long long count)` launched with any grid; the body loops
 * grid-stride. Element types are float, int for i32 labels, or bf16_t
 * (16-bit storage, codegen/bf16.h) for bf16 tensors, whose elements the
 * body converts to float on load and rounds back on store. A body may
 * read `count`.
 * Reductions accumulate in acc_t (double); per-channel ones in
 * CG_REDUCE_LANES partial sums combined as a fixed tree (fused.c).
 *
 * Plan sections "KCPU" (C) and "KCUD" (CUDA) hold one or more serialised
 * programs back to back (train and eval); cg_section_find picks the one
 * whose graph hash matches a graph. They are for reading: dprun renders
 * the program from the graph again and refuses a plan whose section
 * differs (cg_program_diff); it never compiles a plan's source.
 */
#ifndef DPC_CODEGEN_H
#define DPC_CODEGEN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

#define CG_MAX_ARGS IR_GROUP_MAX_BUFFERS /* a fused kernel's buffers */
#define CG_MAX_BUFS (CG_MAX_ARGS + 2)     /* + the step's node + scratch */
#define CG_MAX_GROUP IR_GROUP_MAX_NODES
#define CG_REDUCE_LANES 8 /* partial sums of a per-channel reduction */
#define CG_NAME_MAX 64
#define CG_SCRATCH (-1) /* a step buffer slot naming the scratch area */

typedef enum { CG_DIALECT_C, CG_DIALECT_CUDA, CG_DIALECT_COUNT } cg_dialect;

/* ---- dialects ---------------------------------------------------------------
 * What a target's text differs in, as data (codegen/dialect.c holds one
 * table per dialect; the renderer reads fields, it never tests which
 * dialect it has). A kernel is emitted as
 *     [grain line]  kernel_head NAME( params ) {      C: params unpacked in
 *     body_head  loop_head  <body, indented 8>  "    }\n}\n\n"
 * where params are `const T *RESTRICTbJ, ` for each argument followed by
 * params_tail, or, with unpack_args, params_tail alone and each argument
 * unpacked from `void *const *arg` as the body's first lines. */
typedef struct {
    const char *name;         /* "c", "cuda": messages, kernel directories */
    const char *target;       /* dpc --target that selects it: "cpu", "cuda" */
    const char *ext;          /* file extension of an emitted module: "c", "cu" */
    const char *section;      /* plan section of its programs: "KCPU", "KCUD" */
    const char *prelude;      /* idx_t, acc_t, DPC_NAN, DPC_NEG_INF */
    const char *bf16_prelude; /* bf16_t, the bit casts, DPC_FN, then the conversions */
    const char *kernel_head;  /* before the kernel's name */
    const char *restrict_kw;  /* spelling of restrict on a pointer, with its space */
    int unpack_args;          /* arguments come as void *const *arg (see above) */
    const char *params_tail;  /* the signature after the argument parameters */
    const char *body_head;    /* first line(s) of the function after the arguments */
    const char *loop_head;    /* opens the loop over the kernel's iterations i */
    int grain;                /* exports `const idx_t NAME_grain` (the cpu thread pool) */
    const char *lane_simd;    /* line before a loop over independent reduction lanes */
} cg_dialect_desc;

/* The table of dialect d; NULL when d names none. */
const cg_dialect_desc *cg_dialect_of(cg_dialect d);

/* ---- GEMM descriptor -------------------------------------------------------
 * Column-major and cuBLAS-shaped, described once for every backend:
 *   for b in [0, batch):
 *     C_b = alpha * op(A_b) * op(B_b) + beta * C_b
 *   X_b = X + off_x + b * stride_x;  op(A) is m x k, op(B) k x n, C m x n.
 * A stride of 0 reuses the same operand (a weight shared by every image).
 * Element types: A and B both f32 or both bf16 (type_a == type_b), C f32 or
 * bf16; the product always accumulates in f32 and offsets and strides count
 * elements of the operand's own type. The cpu backend loops
 * cblas_sgemm(CblasColMajor, ...) over the batch (bf16 operands converted
 * to float first); the cuda backend hands it to cublasSgemmStridedBatched,
 * or with bf16 to cublasGemmStridedBatchedEx (CUDA_R_16BF operands,
 * CUBLAS_COMPUTE_32F). */
typedef struct {
    int transa, transb; /* 0: N, 1: T */
    int64_t m, n, k;
    float alpha, beta;
    int64_t lda, ldb, ldc;
    int64_t batch;
    int64_t stride_a, stride_b, stride_c; /* elements between batch entries */
    int64_t off_a, off_b, off_c;          /* element offsets of entry 0 */
    int type_a, type_b, type_c;           /* ir_dtype: IR_F32 (0) or IR_BF16 */
} cg_gemm;

/* One past the last element of operand 'a', 'b' or 'c' the GEMM touches
 * (offsets included), in elements of that operand; -1 on overflow. */
int64_t cg_gemm_extent(const cg_gemm *d, int operand);
/* Checks sizes, leading dimensions (lda >= rows of A as stored, >= 1) and
 * that every element the GEMM touches lies inside buffers of size_a/b/c
 * elements; sizes must fit a BLAS int. 0 when valid, else -1 + message. */
int cg_gemm_validate(const cg_gemm *d, int64_t size_a, int64_t size_b, int64_t size_c,
                     char *err, size_t errlen);

/* ---- programs ------------------------------------------------------------- */

typedef enum { CG_CALL_KERNEL = 1, CG_CALL_GEMM = 2 } cg_call_kind;

typedef struct {
    char name[CG_NAME_MAX];
    int nargs;
} cg_kernel;

typedef struct {
    int kind;      /* cg_call_kind */
    int kernel;    /* CG_CALL_KERNEL: index into kernels[] */
    int64_t count; /* CG_CALL_KERNEL: loop iterations */
    int nargs;
    int arg[CG_MAX_ARGS];     /* slots into the step's buf[] */
    int64_t off[CG_MAX_ARGS]; /* element offsets (kernel calls) */
    cg_gemm gemm;             /* CG_CALL_GEMM; slots A, B, C = arg[0..2] */
} cg_call;

typedef struct {
    int node;  /* the node whose value the step produces */
    int op;    /* its ir_op, for messages and statistics */
    int alias; /* node whose buffer the output shares, or -1 */
    int nbuf;
    int buf[CG_MAX_BUFS]; /* node ids, or CG_SCRATCH */
    int64_t scratch;      /* scratch elements (floats) the step uses */
    int first_call, ncalls;
} cg_step;

typedef struct {
    cg_dialect dialect;
    uint64_t graph_hash; /* cg_graph_hash of the graph it was made for */
    char *source;        /* the module, NUL-terminated */
    size_t source_len;
    int nkernels, nsteps, ncalls;
    cg_kernel *kernels;
    cg_step *steps;
    cg_call *calls;
    int64_t scratch; /* max over steps, in floats */
} cg_program;

typedef struct {
    /* Upper bound of the scratch area used for im2col columns; convolutions
     * are chunked over images to stay under it (at least one image). */
    size_t scratch_max_bytes;
    /* Iterations times estimated work per iteration below which the C
     * dialect leaves a loop serial (waking the thread pool costs more). */
    int64_t parallel_threshold;
} cg_options;

cg_options cg_default_options(void);
/* Kernels and steps for every node of g. NULL + message on failure (an op
 * or dtype the dialect cannot render). o may be NULL for the defaults. */
cg_program *cg_generate(const ir_graph *g, cg_dialect d, const cg_options *o, char *err,
                        size_t errlen);
void cg_program_free(cg_program *p);
const char *cg_dialect_name(cg_dialect d); /* "c", "cuda" */
/* A float constant as C / CUDA source that reads back as the same float
 * ("0.899999976f", "1.0f"); writes into buf (>= 32 bytes), returns it.
 * NULL when v is not finite or is beyond a float's range (3.5e38). */
const char *cg_float_lit(double v, char *buf);
const char *cg_section_tag(cg_dialect d);  /* "KCPU", "KCUD" */

/* Hash of everything the kernels depend on: ops, inputs, attributes, types
 * (names and flags are not part of it). */
uint64_t cg_graph_hash(const ir_graph *g);

/* Bytes (little endian, self-delimiting: magic "DPCK", version, total
 * length) of a program; *out is malloc'd. Returns 0, -1 on overflow. */
int cg_program_serialize(const cg_program *p, unsigned char **out, size_t *len);
/* Parses one program that fills buf exactly; every length and index is
 * bounds-checked, so truncated or corrupted bytes give NULL + message.
 * The _prefix form parses the first program of buf and sets *used. */
cg_program *cg_program_parse(const unsigned char *buf, size_t len, char *err, size_t errlen);
cg_program *cg_program_parse_prefix(const unsigned char *buf, size_t len, size_t *used, char *err,
                                    size_t errlen);
/* The program in a section (programs back to back) made for graph g:
 * returns 0 and sets *out, 1 when the section holds none for g, -1 with a
 * message when the bytes are malformed. */
int cg_section_find(const unsigned char *buf, size_t len, const ir_graph *g, cg_program **out,
                    char *err, size_t errlen);
/* Checks a (parsed) program against the graph it will run: hash, node ids,
 * slots, kernel indices and argument counts, GEMM descriptors against
 * buffer sizes, kernel offsets inside their buffers, kernel counts within
 * their output buffer. */
int cg_program_check(const cg_program *p, const ir_graph *g, char *err, size_t errlen);

/* 0 when two programs are the same in every byte they serialise to
 * (source, kernels, steps, calls with their counts, offsets and GEMM
 * descriptors); else 1 and what names the first difference: "kernel
 * k5_sgd_momentum differs", "call 12 of kernel k3_relu differs ...". */
int cg_program_diff(const cg_program *have, const cg_program *want, char *what, size_t n);

/* Kernel launches and GEMM calls one run of the program makes (what an
 * eager framework would dispatch one by one), and how many are GEMMs. */
int cg_program_launches(const cg_program *p, int *gemms);
/* Where kernel k's function is in p->source: 0 and *off, *len; -1 if not
 * found. The text before the first kernel is the prelude every kernel needs. */
int cg_kernel_source(const cg_program *p, int k, size_t *off, size_t *len);
/* One line per step: its node(s), kernels and GEMMs (dpc --emit-kernels). */
void cg_program_describe(const cg_program *p, const ir_graph *g, FILE *f);

/* Elements of the buffer a step slot names (node numel or p->scratch). */
int64_t cg_slot_size(const cg_program *p, const ir_graph *g, const cg_step *s, int slot);

/* ---- GEMM lowering ----------------------------------------------------------
 * Shapes of the GEMM-backed ops in NCHW / row-major terms and the column-
 * major descriptors they become (cg_generate uses these; exposed for tests
 * and the cuda backend).
 *
 * Convolutions run over chunks of nb images through a scratch area laid out
 * "CNHW": columns [C*k*k][nb*P] at col_off, then an output-shaped block
 * [K][nb*P] at out_off (P = Ho*Wo). Putting the images side by side makes
 * each chunk ONE GEMM with nb*P rows, instead of nb GEMMs of P rows: P is
 * 64 down to 1 in a CIFAR ResNet-18, where per-image GEMMs would be all
 * overhead. Small kernels move data between NCHW and CNHW. A
 * conv_grad_weight step right after the conv_grad_data of the same dy
 * (single chunk each, as autodiff emits them) finds dy already in CNHW in
 * the scratch area, where that step left it, and skips its own layout pass:
 * the one place scratch contents outlive a step. With bf16 activations the
 * columns, dy's CNHW block and a bf16 copy of the weight (after the block,
 * 256-byte aligned) are bf16 at the same float offsets, GEMM results stay
 * f32 (codegen/gemm.c). */
typedef struct {
    int64_t N, C, H, W; /* input */
    int64_t K, k, s, p; /* filters, kernel, stride, padding */
    int64_t Ho, Wo;     /* output */
} cg_conv_shape;

/* Scratch floats for a chunk of nb images: columns, then the CNHW block. */
int64_t cg_conv_col_elems(const cg_conv_shape *c, int64_t nb);
int64_t cg_conv_scratch_elems(const cg_conv_shape *c, int64_t nb);
/* Images per chunk so the scratch stays under max_bytes (at least 1). */
int64_t cg_conv_chunk(const cg_conv_shape *c, size_t max_bytes);
/* Forward: out[K][nb*P] = W[K][CKK] · col[CKK][nb*P]:
 * A = columns (scratch), B = w, C = the CNHW block (scratch). */
cg_gemm cg_gemm_conv_forward(const cg_conv_shape *c, int64_t nb, int64_t col_off,
                             int64_t out_off);
/* Data gradient: col[CKK][nb*P] = Wᵀ · dy[K][nb*P]:
 * A = dy in CNHW (scratch), B = w, C = columns (scratch); col2im follows. */
cg_gemm cg_gemm_conv_grad_data(const cg_conv_shape *c, int64_t nb, int64_t dy_off,
                               int64_t col_off);
/* Weight gradient: dW[K][CKK] (+)= dy[K][nb*P] · col[CKK][nb*P]ᵀ:
 * A = columns, B = dy in CNHW (both scratch), C = dw; beta = accumulate
 * (0 for the first chunk, 1 after), so chunks sum in order. */
cg_gemm cg_gemm_conv_grad_weight(const cg_conv_shape *c, int64_t nb, int64_t col_off,
                                 int64_t dy_off, int accumulate);
/* dense: y[N,U] = x[N,F] · wᵀ: A = w, B = x, C = y. */
cg_gemm cg_gemm_dense(int64_t N, int64_t F, int64_t U);
/* dx[N,F] = dy[N,U] · w[U,F]: A = w, B = dy, C = dx. */
cg_gemm cg_gemm_dense_grad_data(int64_t N, int64_t F, int64_t U);
/* dw[U,F] = dyᵀ · x: A = x, B = dy, C = dw. */
cg_gemm cg_gemm_dense_grad_weight(int64_t N, int64_t F, int64_t U);

#endif
