/* codegen/program.h — the kernel-program format: what a plan section
 * "KCPU"/"KCUD" holds and the runtime reads (codegen.h describes the
 * layout and the kernel ABI): the GEMM descriptor, kernels, steps and
 * calls, their serialisation and the checked parser, and cg_generate,
 * which dprun calls to render a graph's program again and compare it
 * with the plan's. Owned by codegen; codegen.h includes it. The runtime
 * includes this header, never codegen.h.
 */
#ifndef DPC_CODEGEN_PROGRAM_H
#define DPC_CODEGEN_PROGRAM_H

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
int cg_gemm_validate(const cg_gemm *d, int64_t size_a, int64_t size_b, int64_t size_c, char *err,
                     size_t errlen);

/* ---- programs ------------------------------------------------------------- */

typedef enum { CG_CALL_KERNEL = 1, CG_CALL_GEMM = 2 } cg_call_kind;

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

/* Elements of the buffer a step slot names (node numel or p->scratch). */
int64_t cg_slot_size(const cg_program *p, const ir_graph *g, const cg_step *s, int slot);

#endif
