/* runtime/backend_select.h — which backend `--device auto|cpu|cuda` gets.
 *
 * Usage (dprun, the training loop):
 *     int fallback = 0;
 *     rt_backend *be = rt_backend_open(o->device, &fallback, err, sizeof err);
 *     if (!be) { fprintf(stderr, "dprun: error: %s\n", err); return 1; }
 *     ...
 *     rt_backend_free(be);
 *
 *   "cpu"   the cpu backend.
 *   "cuda"  the cuda backend on device $DPC_CUDA_DEVICE (default 0), or NULL
 *           and a message saying why not: "--device cuda: no CUDA device
 *           (cannot load the CUDA driver libcuda.so.1: ...)".
 *   "auto"  (or NULL) the cuda backend when it can be opened, else the cpu
 *           backend with *is_fallback = 1 and, once per process (replicas
 *           open one backend each), one line on stderr:
 *           "dpc: no CUDA device (REASON): using the cpu backend".
 * Anything else is refused with a message naming the three choices.
 * is_fallback may be NULL.
 */
#ifndef DPC_RT_BACKEND_SELECT_H
#define DPC_RT_BACKEND_SELECT_H

#include <stddef.h>

#include "runtime/backend.h"

rt_backend *rt_backend_open(const char *device, int *is_fallback, char *err, size_t errlen);
/* Same on a given CUDA device (replica placement); ordinal is ignored by
 * the cpu backend. */
rt_backend *rt_backend_open_on(const char *device, int ordinal, int *is_fallback, char *err,
                               size_t errlen);

#endif
