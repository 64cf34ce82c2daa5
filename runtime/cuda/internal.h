/* runtime/cuda/internal.h — what the cuda room's files share: the
 * backend's state, the module, kernel and graph objects, and the table
 * hooks each file contributes. Private to runtime/cuda/ (and unit tests).
 *
 * Files of the room:
 *   backend.c  devices, memory and copies, set-up and teardown, the table
 *   kernel.c   NVRTC modules, kernels, launches
 *   cublas.c   the cuBLAS argument mapping (every build) and GEMMs
 *   graph.c    CUDA graph capture and replay
 *   nccl.c     NCCL calls and the nccl collective
 *   stubs.c    the public functions of a build without the backend (CUDA=0)
 *   loader.c   the driver, NVRTC, cuBLAS, NCCL, cuDNN found and loaded (loader.h)
 *   libsearch.c  where the loader looks (libsearch.h)
 *   info.c     dprun --device cuda --info
 *   nvrtc.c    CUDA C to a cubin or PTX, cached on disk (nvrtc.h)
 */
#ifndef DPC_RT_CUDA_INTERNAL_H
#define DPC_RT_CUDA_INTERNAL_H

#include <stdint.h>

#include "runtime/cuda/cuda.h"
#include "runtime/cuda/loader.h"
#include "runtime/cuda/nvrtc.h"

#ifdef DPC_HAVE_CUDA

/* Pinned staging buffers for copy_in, each reused only once its last
 * copy has run (its event). A step copies four inputs (batch, labels, lr,
 * grad_scale); train.c stages the next batch behind a step and then reads
 * the step's loss, which waits for everything queued so far, so a slot's
 * previous copy has always run by the time it comes round again. */
#define STAGES 4

typedef struct {
    void *host; /* pinned */
    size_t cap;
    CUevent done; /* recorded after the copy that last read it */
    int pending;
} stage;

typedef struct {
    int ordinal, sm, nsm;
    size_t memory; /* the device's, in bytes */
    char name[192];
    CUdevice dev;
    CUcontext ctx; /* the device's primary context, shared with cuBLAS and NCCL */
    int ctx_retained;
    CUstream compute, comm;
    CUevent ev_compute, ev_comm; /* compute -> comm and comm -> compute ordering */
    cublasHandle_t blas;
    CUdeviceptr blas_ws;
    stage st[STAGES];
    int next_stage;
    int capturing;
    rt_cuda_stats stats;
} cuda_impl;

struct rt_kernel {
    CUfunction fn;
    int nargs;
    struct rt_kernel *next;
};

struct rt_module {
    CUmodule mod;
    char *path;
    struct rt_kernel *kernels;
};

struct rt_cuda_graph {
    CUgraph graph;
    CUgraphExec exec;
    size_t nodes;
};

static inline cuda_impl *impl_of(const rt_backend *be) { return (cuda_impl *)be->impl; }

/* Every call may come from another host thread (replicas, data workers):
 * make the device's context current first. It is a thread-local store in
 * the driver, cheap beside a launch. */
static inline void use(cuda_impl *c) { cuCheck(rt_cu.cuCtxSetCurrent(c->ctx)); }

static inline CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

/* kernel.c: the table's compile, module_free, kernel and launch. */
rt_module *cuda_compile(rt_backend *be, const char *source, char *err, size_t errlen);
void cuda_module_free(rt_backend *be, rt_module *m);
rt_kernel *cuda_kernel(rt_backend *be, rt_module *m, const char *name, int nargs, char *err,
                       size_t errlen);
int cuda_launch(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                const cg_launch *geometry, char *err, size_t errlen);

/* cublas.c: the table's gemm, and the handle's set-up on the compute stream. */
int cuda_gemm(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C, char *err,
              size_t errlen);
int cuda_blas_up(cuda_impl *c, char *err, size_t errlen);

/* graph.c: the table's graph hooks (rt_cuda_graph_* under device.h's names). */
rt_graph *cuda_graph_end(rt_backend *be, char *err, size_t errlen);
int cuda_graph_launch(rt_backend *be, rt_graph *g, char *err, size_t errlen);
void cuda_graph_free(rt_backend *be, rt_graph *g);

#endif
#endif
