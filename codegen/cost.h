/* codegen/cost.h — a per-kernel cost model of a kernel program on a named
 * GPU (dpc --cost): one estimate per kernel launch or GEMM, a roofline
 * with a serial-chain term, and the step's totals. It reads the program
 * cg_generate makes (calls, counts, GEMM descriptors) plus what each
 * kernel's definition knew (cg_kernel_info); nothing of it is in a plan.
 *
 * Usage:
 *     const cg_device *dev = cg_device_find("h200");   // NULL: unknown
 *     cg_cost_report(stdout, "train", 128, g, dev, &totals, err, sizeof err);
 *
 * The model (docs/DESIGN.md, "Cost report"), times in microseconds:
 *   kernel  max(bytes / hbm, flops / fp32) * max(1, sms / blocks), chain)
 *           + launch, where chain = serial * iter_ns when threads < sms *
 *           threads_per_sm (a kernel that does not fill the GPU cannot
 *           hide its per-thread loop), else 0, and a grid of fewer blocks
 *           than SMs gets only its SMs' share of bandwidth and peak;
 *   GEMM    max(bytes / hbm, flops / (peak * cg_gemm_fraction)) + launch,
 *           peak = bf16 for bf16 operands, fp32 for f32 ones;
 *   conv    a library convolution cuDNN runs (one type throughout): the
 *           GEMM's rule with x, w, y read or written once and
 *           cg_conv_fraction; its im2col alternative is not counted;
 *   bound   max(sum bytes / hbm, sum flops / each call's peak) + launches.
 */
#ifndef DPC_CODEGEN_COST_H
#define DPC_CODEGEN_COST_H

#include <stdint.h>
#include <stdio.h>

#include "format/program.h"
#include "ir/ir.h"

/* What a kernel's definition knew that its program entry does not. */
typedef struct {
    int64_t work;               /* estimated operations of one iteration (>= 1) */
    int64_t serial;             /* the longest loop one iteration runs, in iterations (>= 1) */
    ir_dtype type[CG_MAX_ARGS]; /* each argument's element type (its bytes) */
    int block;                  /* threads cooperating on one iteration; 0: one each */
    int split;                  /* > 1: blocks per iteration */
} cg_kernel_info;

/* A GPU's constants; one const row per device (cg_devices, codegen/cost.c). */
typedef struct {
    const char *name;
    int sms, threads_per_sm; /* resident threads = sms * threads_per_sm */
    double hbm_bytes_per_s;  /* memory bandwidth */
    double fp32_flops;       /* CUDA-core FP32 peak, flop/s */
    double tf32_flops;       /* dense tensor-core peaks, flop/s */
    double bf16_flops;
    double launch_us; /* per kernel or GEMM inside a CUDA graph */
    double iter_ns;   /* one iteration of a thread's serial loop */
} cg_device;

/* The devices: the first is the default, a row whose name is NULL ends them. */
extern const cg_device cg_devices[];

/* The device called name, or NULL. */
const cg_device *cg_device_find(const char *name);
/* "h200" or "a, b" for messages: the known names into buf; returns buf. */
const char *cg_device_names(char *buf, size_t n);

typedef struct {
    char name[CG_NAME_MAX]; /* kernel name, gemm_MxNxK[_bf16], conv_DIR_CxHxK_kR_sS[_g][_bf16] */
    int kind;               /* cg_call_kind */
    int64_t threads;        /* kernel: iterations (one thread each); GEMM: m*n*batch */
    int64_t serial;         /* kernel: longest loop one thread runs; GEMM: k */
    int64_t bytes;          /* read + written */
    int64_t flops;
    double peak; /* flop/s the call is modelled against */
    double us;   /* modelled time, launch included */
} cg_call_cost;

typedef struct {
    int kernels, gemms, convs;
    int64_t bytes, flops;
    double step_us, bound_us;
} cg_cost_totals;

/* The fraction of peak a GEMM of m*n*k*batch multiply-adds reaches, and a
 * library convolution of as many. */
double cg_gemm_fraction(const cg_gemm *d);
double cg_conv_fraction(const cg_conv *d);
/* Modelled time of a kernel of these figures on dev (launch included);
 * blocks: the launch's grid (0: unknown, taken as filling every SM). */
double cg_kernel_us(const cg_device *dev, int64_t threads, int64_t blocks, int64_t serial,
                    int64_t bytes, int64_t flops);

/* One estimate per call of the CUDA program of g, in program order, and
 * the totals. *out is malloc'd (*n entries). 0, or -1 with a message. */
int cg_cost_estimate(const ir_graph *g, const cg_device *dev, cg_call_cost **out, int *n,
                     cg_cost_totals *t, char *err, size_t errlen);
/* The table (one row per call) and the totals of program `prog` ("train",
 * "eval"), whose step takes `batch` samples, to f; t may be NULL. 0, or -1
 * with a message. */
int cg_cost_report(FILE *f, const char *prog, int batch, const ir_graph *g, const cg_device *dev,
                   cg_cost_totals *t, char *err, size_t errlen);

#endif
