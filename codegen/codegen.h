/* codegen/codegen.h — from an IR graph to kernel source plus a step list
 * (the compiler's header; the runtime includes render.h).
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
 * The program's layout, the kernel ABI and the plan sections are the
 * format's (format/program.h); rendering alone, all the runtime calls, is
 * render.h's. This header is the compiler's: dialect tables, GEMM
 * lowering, listings.
 */
#ifndef DPC_CODEGEN_H
#define DPC_CODEGEN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "codegen/render.h"
#include "format/program.h"
#include "ir/ir.h"

/* ---- dialects ---------------------------------------------------------------
 * What a target's text differs in, as data (codegen/dialect.c holds one
 * table per dialect; the renderer reads fields, it never tests which
 * dialect it has). A kernel is emitted as
 *     [grain line]  kernel_head [launch_bounds] NAME( params ) {   C: params unpacked in
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
    /* Launch geometry: a dialect with gpu_launch records each call's grid
     * and block (format/program.h cg_launch); threads_per_block is what a kernel
     * of one iteration per thread gets. */
    int gpu_launch;
    uint32_t threads_per_block;
    /* printed after kernel_head with the kernel's block (%u), or NULL: the
     * most threads it is launched with, so ptxas never gives it more
     * registers than that block can hold (tests/nvrtc_test.sh checks) */
    const char *launch_bounds;
    /* The reduction skeleton. A cooperative kernel (cg_kdef.block > 0)
     * runs one iteration per block of `block` threads: coop_loop_head opens
     * its loop over i, a loop over an iteration's elements starts at
     * thread_first and steps by thread_step (times reduce_lanes, the
     * partial sums each thread keeps), block_sum / block_max ("%s" around
     * the thread's value) give every thread the block's result, and
     * first_thread prefixes a statement only one thread of the block runs.
     * max_block and warp bound the block size a kernel may choose, which
     * grows toward fill_threads per launch. In C an iteration is one
     * thread: block 1, 8 lanes, identity combines. */
    const char *coop_prelude; /* helpers the combines call */
    const char *coop_loop_head;
    const char *thread_first, *thread_step;
    int reduce_lanes;
    const char *block_sum, *block_max;
    const char *first_thread;
    int warp, max_block;
    int64_t fill_threads; /* threads a launch wants when it has the elements */
    int gather_pool_grad; /* max-pool's f32 gradient gathered per dx element, not
                             scattered per plane (fewer operations, far fewer threads) */
    /* Channel reductions split over blocks (codegen/fused.c) until a launch
     * has split_blocks blocks; 0: one block per channel. split_loop_head
     * (two %d: the split) opens such a kernel's loop over channels,
     * split_part (one %d) is the block's chunk of its channel. */
    int64_t split_blocks;
    const char *split_loop_head, *split_part;
    /* A cooperative kernel's float tile shared by its block (two args: the
     * name, the element count) and the barrier between its writers and
     * readers (codegen/shape.c's tiled permute; in C one thread, a local
     * array and no barrier). */
    const char *tile_decl, *barrier;
} cg_dialect_desc;

/* The SMs the CUDA dialect shapes kernels for (fill_threads, split_blocks):
 * an H100's or H200's. A constant, not the compiling machine's GPU: a plan
 * must not depend on where it was compiled, and dprun renders the kernels
 * again with the same defaults and refuses a plan whose section differs.
 * The device's own count (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) sizes
 * what the plan leaves to run time (runtime/cuda/kernel.c's grid_for), and
 * dpc --cost --device models each named GPU with its own (codegen/cost.c). */
#define CG_TARGET_SMS 132

/* The table of dialect d; NULL when d names none. */
const cg_dialect_desc *cg_dialect_of(cg_dialect d);

/* A float constant as C / CUDA source that reads back as the same float
 * ("0.899999976f", "1.0f"); writes into buf (>= 32 bytes), returns it.
 * NULL when v is not finite or is beyond a float's range (3.5e38). */
const char *cg_float_lit(double v, char *buf);
/* One line per step: its node(s), kernels and GEMMs (dpc --emit-kernels). */
void cg_program_describe(const cg_program *p, const ir_graph *g, FILE *f);

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
cg_gemm cg_gemm_conv_forward(const cg_conv_shape *c, int64_t nb, int64_t col_off, int64_t out_off);
/* Data gradient: col[CKK][nb*P] = Wᵀ · dy[K][nb*P]:
 * A = dy in CNHW (scratch), B = w, C = columns (scratch); col2im follows. */
cg_gemm cg_gemm_conv_grad_data(const cg_conv_shape *c, int64_t nb, int64_t dy_off, int64_t col_off);
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
