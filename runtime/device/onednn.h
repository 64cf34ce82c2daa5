/* runtime/device/onednn.h — library convolutions on the cpu backend:
 * oneDNN primitives, each run single-threaded on a part of the batch by
 * the caller's thread pool, so DPC_THREADS governs them and the results
 * do not depend on the thread count.
 *
 * Usage (runtime/device/cpu.c):
 *     int rc = rt_onednn_conv(&call->conv, out, in, in2, pool_run, err, sizeof err);
 *     // 0: done; 1: run the call's alternative (no oneDNN in this build, or
 *     // a shape it refuses); -1: failed, err says why
 *
 * Builds without oneDNN's header (libdnnl-dev at configure time) answer 1
 * always; so does a process that cannot load libdnnl.so.2 (with a note). */
#ifndef DPC_RUNTIME_DEVICE_ONEDNN_H
#define DPC_RUNTIME_DEVICE_ONEDNN_H

#include <stddef.h>
#include <stdint.h>

#include "format/program.h"

/* Runs task(ctx, part, parts) for every part, on as many threads as the
 * pool has, and returns when all are done. */
typedef void (*rt_parts_task)(void *ctx, int part, int parts);
typedef void (*rt_parts_run)(rt_parts_task task, void *ctx, int parts);

int rt_onednn_conv(const cg_conv *d, void *out, const void *in, const void *in2, rt_parts_run run,
                   char *err, size_t errlen);

/* oneDNN's name for the implementation it picks for d ("jit:avx2",
 * "x64:gemm:jit", ...; "" when it refuses the shape), NULL without oneDNN. */
const char *rt_onednn_conv_impl(const cg_conv *d);
/* Whether dpc runs a primitive of that implementation: not one that is
 * im2col + GEMM or reference code (dpc's alternative does that better). */
int rt_onednn_impl_runs(const char *impl);

/* ---- how a call splits into parts (onednn_split.c): arithmetic only, the
 * same with or without oneDNN. */
#define RT_CONV_MAX_PARTS 8
#define RT_CONV_MAX_DIMS  12 /* a dims array: oneDNN's dnnl_dims_t (DNNL_MAX_NDIMS) */

/* A convolution as the library runs it: the filter taps kept, the parts it
 * is split in and one part's dims and strides. */
typedef struct {
    int fwd, bwd_w, by_ch, parts;
    int64_t r0, q0, kh, kw; /* the first kept taps, the kept kernel */
    int64_t G, Cg, Kg, kk, HW, PQ;
    int64_t nb, kp, gp, cp; /* a part's images, outputs, groups, inputs */
    int wn;                 /* the weights' rank: 5 when grouped, else 4 */
    /* a part's dims, the strides and padding */
    int64_t xd[RT_CONV_MAX_DIMS], yd[RT_CONV_MAX_DIMS], wd[RT_CONV_MAX_DIMS];
    int64_t st[RT_CONV_MAX_DIMS], pl[RT_CONV_MAX_DIMS], pr[RT_CONV_MAX_DIMS];
    /* dpc's tensors' strides */
    int64_t xs[RT_CONV_MAX_DIMS], ys[RT_CONV_MAX_DIMS], ws[RT_CONV_MAX_DIMS];
} rt_conv_split;

/* d's split; -1 when no tap reads the input (not the library's). Taps
 * that only ever read padding are left out: a smaller kernel, less
 * padding. */
int rt_conv_split_plan(const cg_conv *d, rt_conv_split *g);
/* The largest divisor of n that is at most m and leaves parts of a
 * multiple of `unit` (1 when none does). */
int rt_conv_divisor_upto(int64_t n, int m, int64_t unit);

#endif
