/* format/program.h — the kernel-program format: what a plan section
 * "KCPU"/"KCUD" holds and the runtime reads: the GEMM descriptor, kernels, steps and
 * calls, their serialisation, the checked parser, the check against a
 * graph and the comparison of two programs. codegen builds programs
 * (codegen/render.h: cg_generate) and dprun reads them; both include this
 * header. The names keep codegen's prefix, cg_, which every renderer file
 * spells them with.
 *
 * Usage:
 *     cg_program *p = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
 *     unsigned char *bytes; size_t len;
 *     cg_program_serialize(p, &bytes, &len);        // plan section cg_section_tag(d)
 *     cg_program *q = NULL;
 *     cg_section_find(bytes, len, g, &q, err, sizeof err);
 *     if (cg_program_diff(q, p, what, sizeof what)) ...;  // dprun: not what g renders to
 *     cg_program_check(p, g, err, sizeof err);      // before running it
 *     cg_program_free(p), cg_program_free(q);
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
 * below which the backend runs it on one thread. CUDA: `extern "C" __global__ void
 * __launch_bounds__(B) NAME(T *b0, const T *b1, ..., long long count)` launched with
 * any grid of B-thread blocks (B: the calls' cg_launch block); the body loops
 * grid-stride. Element types are float, int for i32 labels, or bf16_t
 * (16-bit storage, format/bf16.h) for bf16 tensors, whose elements the
 * body converts to float on load and rounds back on store. A body may
 * read `count`.
 * Reductions accumulate in acc_t (double); per-channel ones in
 * CG_REDUCE_LANES partial sums combined as a fixed tree (codegen/fused_channel.c).
 *
 * Plan sections "KCPU" (C) and "KCUD" (CUDA) hold one or more serialised
 * programs back to back (train and eval); cg_section_find picks the one
 * whose graph hash matches a graph. They are for reading: dprun renders
 * the program from the graph again and refuses a plan whose section
 * differs (cg_program_diff); it never compiles a plan's source.
 */
#ifndef DPC_FORMAT_PROGRAM_H
#define DPC_FORMAT_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

#define CG_MAX_ARGS     IR_GROUP_MAX_BUFFERS /* a fused kernel's buffers */
#define CG_MAX_BUFS     (CG_MAX_ARGS + 2)    /* + the step's node + scratch */
#define CG_MAX_GROUP    IR_GROUP_MAX_NODES
#define CG_REDUCE_LANES 8 /* partial sums of a per-channel reduction */
#define CG_NAME_MAX     64
#define CG_SCRATCH      (-1)        /* a step buffer slot naming the scratch area */
#define CG_MAX_GRID     2147483647u /* CUDA's limit on gridDim.x */
#define CG_MAX_BLOCK    1024u       /* threads per block */
#define CG_MAX_SHARED   49152u      /* dynamic shared bytes without an opt-in */

typedef enum { CG_DIALECT_C, CG_DIALECT_CUDA, CG_DIALECT_COUNT } cg_dialect;
/* The plan section of each dialect's programs. */
#define CG_SECTION_C    "KCPU"
#define CG_SECTION_CUDA "KCUD"
/* A value that names no dialect reads as C. */
const char *cg_dialect_name(cg_dialect d); /* "c", "cuda" */
const char *cg_section_tag(cg_dialect d);  /* "KCPU", "KCUD" */
/* 1 when the dialect's kernel calls carry a launch geometry (cg_launch:
 * CUDA); 0 when they are all zero (C). */
int cg_dialect_launches(cg_dialect d);

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
 * CUBLAS_COMPUTE_32F). tf32 (f32 operands only, --precision tf32): the
 * product reads A and B rounded to TF32 (format/tf32.h), as tensor cores
 * do: cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F_FAST_TF32 on the
 * GPU, the operands rounded before cblas_sgemm on the cpu. */
typedef struct {
    int transa, transb; /* 0: N, 1: T */
    int64_t m, n, k;
    float alpha, beta;
    int64_t lda, ldb, ldc;
    int64_t batch;
    int64_t stride_a, stride_b, stride_c; /* elements between batch entries */
    int64_t off_a, off_b, off_c;          /* element offsets of entry 0 */
    int type_a, type_b, type_c;           /* ir_dtype: IR_F32 (0) or IR_BF16 */
    int tf32;                             /* 1: A and B rounded to TF32 (f32 only) */
} cg_gemm;

/* One past the last element of operand 'a', 'b' or 'c' the GEMM touches
 * (offsets included), in elements of that operand; -1 on overflow. */
int64_t cg_gemm_extent(const cg_gemm *d, int operand);
/* Checks sizes, leading dimensions (lda >= rows of A as stored, >= 1) and
 * that every element the GEMM touches lies inside buffers of size_a/b/c
 * elements; sizes must fit a BLAS int. 0 when valid, else -1 + message. */
int cg_gemm_validate(const cg_gemm *d, int64_t size_a, int64_t size_b, int64_t size_c, char *err,
                     size_t errlen);
/* 1 when two descriptors are equal field by field (a descriptor returned by
 * value may carry any padding, so never memcmp). */
int cg_gemm_equal(const cg_gemm *a, const cg_gemm *b);

/* ---- programs ------------------------------------------------------------- */

/* ---- convolution descriptor ------------------------------------------------
 * A convolution as a library runs it (oneDNN on the cpu, cuDNN): NCHW
 * tensors, [K, C/G, kh, kw] weights (G groups: output channel k reads the
 * C/G input channels of its group k / (K/G); depthwise at G = C), symmetric
 * padding, no dilation yet; each
 * tensor f32 or bf16 (bf16 products accumulate in f32, as the GEMMs'); a
 * tf32 one (all f32) reads its inputs as TF32, as the GEMMs of --precision
 * tf32 do: cuDNN's tensor cores, the im2col alternative elsewhere.
 * Slots: arg[0] the output, arg[1] and arg[2] the inputs:
 *   CG_CONV_FORWARD           y[N,K,Ho,Wo]  = conv(x[N,C,H,W], w)
 *   CG_CONV_BACKWARD_DATA     dx[N,C,H,W]   = conv_grad_data(dy, w)
 *   CG_CONV_BACKWARD_WEIGHTS  dw[K,C/G,kh,kw] = conv_grad_weight(dy, x)
 * The nalt calls after a conv call are the same convolution lowered to
 * im2col + GEMM, to direct kernels when grouped, or (dense) to one GEMM
 * over the unrolled weights (codegen/gemm.c, im2col.c, conv_direct.c): a backend without
 * the library, or whose
 * library refuses the shape, or whose tuner measured them faster (tune),
 * runs those instead, so every program runs everywhere. */
typedef enum { CG_CONV_FORWARD, CG_CONV_BACKWARD_DATA, CG_CONV_BACKWARD_WEIGHTS } cg_conv_dir;

typedef struct {
    int dir;                    /* cg_conv_dir */
    int64_t N, C, H, W;         /* x, or dx */
    int64_t K, kh, kw;          /* filters */
    int64_t sh, sw, ph, pw;     /* stride, padding (each side) */
    int64_t Ho, Wo;             /* y, or dy */
    int64_t G;                  /* groups: divides C and K */
    int type_x, type_w, type_y; /* ir_dtype of x (dx), w (dw), y (dy): f32 or bf16 */
    int tf32;                   /* f32 products on TF32 tensor cores (--precision tf32) */
    int tune;                   /* 1: the runtime times the library against the alternative */
    int nalt;                   /* calls after this one that compute the same (im2col + GEMM) */
    int dense;                  /* 1: those calls are the dense product (IR_FLAG_CONV_DENSE) */
} cg_conv;

/* The descriptor's fields in serialised order (i64s): the record
 * (program.c) and the descriptor's checks (descriptor.c) walk them alike. */
#define CG_CONV_DIMS(c)                                                                      \
    {                                                                                        \
        &(c)->N, &(c)->C, &(c)->H, &(c)->W, &(c)->K, &(c)->kh, &(c)->kw, &(c)->sh, &(c)->sw, \
            &(c)->ph, &(c)->pw, &(c)->Ho, &(c)->Wo, &(c)->G                                  \
    }
enum { CG_CONV_NDIMS = 14 };

/* Elements of the call's output, first and second input. */
void cg_conv_sizes(const cg_conv *c, int64_t size[3]);
/* Element types of the call's output, first and second input. */
void cg_conv_types(const cg_conv *c, int type[3]);
/* The one type of all three tensors, or -1 when they mix f32 and bf16. */
int cg_conv_one_type(const cg_conv *c);
/* 1 for a weight gradient of bf16 x and dy into f32 dw (--precision
 * bf16's f32 master weights), which cuDNN computes in bf16 and the cuda
 * backend widens to f32. */
int cg_conv_widened(const cg_conv *c);
/* The one type a library computes the call in: cg_conv_one_type, or bf16
 * when cg_conv_widened; -1 for any other mix (cuDNN has no such call: the
 * cuda backend runs its alternative). */
int cg_conv_compute_type(const cg_conv *c);
/* Checks the shape arithmetic (Ho, Wo from H, W, kernel, stride and
 * padding), the types and that each buffer has exactly the elements its
 * tensor needs. 0 when valid, else -1 + message. */
int cg_conv_validate(const cg_conv *c, const int64_t size[3], char *err, size_t errlen);
int cg_conv_equal(const cg_conv *a, const cg_conv *b);
/* "forward", "backward_data", "backward_weights". */
const char *cg_conv_dir_name(int dir);
/* The descriptor as messages name it: "DIR NxCxHxW -> K kKH sSH gG", and
 * " bf16" when its activations are. */
void cg_conv_describe(const cg_conv *c, char *buf, size_t n);
/* Multiply-adds times two. */
double cg_conv_flops(const cg_conv *c);

typedef enum { CG_CALL_KERNEL = 1, CG_CALL_GEMM = 2, CG_CALL_CONV = 3 } cg_call_kind;

typedef struct {
    char name[CG_NAME_MAX];
    int nargs;
} cg_kernel;

/* How a CUDA kernel call is launched, fixed at compile time so the
 * runtime, the cost report and the simulator all use the same geometry:
 * grid blocks of block threads (x only) and shared bytes of dynamic
 * shared memory. All zero in C programs (the thread pool splits count). */
typedef struct {
    uint32_t grid, block, shared;
} cg_launch;

typedef struct {
    int kind;      /* cg_call_kind */
    int kernel;    /* CG_CALL_KERNEL: index into kernels[] */
    int64_t count; /* CG_CALL_KERNEL: loop iterations */
    int nargs;
    int arg[CG_MAX_ARGS];     /* slots into the step's buf[] */
    int64_t off[CG_MAX_ARGS]; /* element offsets (kernel calls) */
    cg_gemm gemm;             /* CG_CALL_GEMM; slots A, B, C = arg[0..2] */
    cg_conv conv;             /* CG_CALL_CONV; slots out, in, in = arg[0..2] */
    cg_launch launch;         /* CG_CALL_KERNEL in a CUDA program */
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

void cg_program_free(cg_program *p);
/* The record's format version (a plan's KCPU/KCUD sections carry it). */
unsigned cg_program_version(void);

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

/* Where kernel k's function is in p->source: 0 and *off, *len; -1 if not
 * found. The text before the first kernel is the prelude every kernel needs. */
int cg_kernel_source(const cg_program *p, int k, size_t *off, size_t *len);

/* Kernel launches and GEMM calls one run of the program makes (what an
 * eager framework would dispatch one by one), and how many are GEMMs. A
 * library convolution counts as its alternative (what runs everywhere). */
int cg_program_launches(const cg_program *p, int *gemms);

/* Elements of the buffer a step slot names (node numel or p->scratch). */
int64_t cg_slot_size(const cg_program *p, const ir_graph *g, const cg_step *s, int slot);

#endif
