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

#endif
