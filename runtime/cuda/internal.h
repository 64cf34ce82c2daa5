/* runtime/cuda/internal.h — what the cuda room's files share: the
 * backend's state, the module, kernel and graph objects, and the table
 * hooks each file contributes. Private to runtime/cuda/ (and unit tests).
 *
 * Files of the room:
 *   backend.c  devices, memory and copies, set-up and teardown, the table
 *   kernel.c   NVRTC modules, kernels, launches
 *   cublas.c   the cuBLAS argument mapping (every build) and GEMMs
 *   cudnn.c    convolutions by cuDNN
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

/* Marks: events recorded on the compute stream, numbered from 1; mark m
 * lives in mk[m % MARKS] until MARKS later marks reuse its event (a wait
 * for it then waits for the oldest one held, which is later: safe). Every
 * mark up to c->done is known done (a wait for it or a later one, or a
 * stream synchronisation, returned), so it is never waited for again. ops:
 * the work queued when it was recorded (wait_for counts a wait as lagged
 * when more was queued since). */
#define MARKS 64
typedef struct {
    CUevent ev;
    int64_t ops;
} mark_slot;

/* Pinned staging for copy_in: a ring of bytes, each copy taking the next
 * piece (wrapping to 0 when the end cannot hold it) and recording a mark;
 * a piece is reused once its mark is done, so a copy waits only when the
 * ring is a full lap ahead of the device. Its size: 4 x the largest copy
 * (the batch), at least 1 MiB, so two steps' inputs are in flight. */
#define PIECES 64
typedef struct {
    size_t off, len;
    uint64_t mark;
} piece;

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
    cudnnHandle_t dnn; /* NULL: no cuDNN (dnn_why), convolutions run im2col */
    char dnn_why[512];
    CUdeviceptr dnn_ws; /* the convolutions' workspace */
    size_t dnn_ws_size;
    CUdeviceptr *dnn_old; /* outgrown workspaces a graph may still use */
    int ndnn_old;
    rt_module *widen_mod; /* cudnn.c's widening of a bf16 weight gradient, once needed */
    rt_kernel *widen;
    mark_slot mk[MARKS];
    uint64_t marks, done; /* the latest mark; every mark <= done is done */
    unsigned char *ring;  /* pinned */
    size_t ring_cap, ring_head;
    piece pc[PIECES]; /* in flight, oldest first from pc_first */
    int pc_first, pc_n;
    int64_t d2d;     /* device-to-device copies queued (work, for the counts) */
    char label[160]; /* device.h's label: what the queued work is for */
    int sync_each;   /* DPC_SYNC=1 or DPC_PROFILE=1: the caller syncs per call */
    int failed;      /* a call failed: teardown neither waits nor checks (a lost device) */
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

/* backend.c: the message of a failed call that may report an earlier
 * call's failure (a kernel's fault surfaces at the next call or wait): the
 * device, the label of the last work queued and, unless the caller
 * synchronises after every call already, how to find the call that
 * failed. Marks the device failed (teardown then neither waits nor
 * checks). Returns -1. */
int cuda_failure(cuda_impl *c, CUresult r, const char *call, char *out, size_t n);

/* Every call may come from another host thread (replicas, data workers):
 * make the device's context current first. It is a thread-local store in
 * the driver, cheap beside a launch. 0, or -1 + message (the device failed). */
static inline int use(cuda_impl *c, char *err, size_t errlen) {
    CUresult r = rt_cu.cuCtxSetCurrent(c->ctx);
    return r == CUDA_SUCCESS ? 0 : cuda_failure(c, r, "cuCtxSetCurrent", err, errlen);
}
/* The same for teardown, which goes on regardless (a failure is marked). */
static inline void use_anyway(cuda_impl *c) {
    CUresult r = rt_cu.cuCtxSetCurrent(c->ctx);
    if (r != CUDA_SUCCESS) c->failed = 1;
}

static inline CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

/* backend.c: waits on the compute or communication stream, counted in the
 * stats (host_waits); -1 + a message naming the label and DPC_SYNC=1 on a
 * failure, which may be any earlier call's. */
int cuda_wait_stream(cuda_impl *c, CUstream s, char *err, size_t errlen);

/* kernel.c: the table's compile, module_free, kernel and launch. */
rt_module *cuda_compile(rt_backend *be, const char *source, char *err, size_t errlen);
void cuda_module_free(rt_backend *be, rt_module *m);
void cuda_module_release(cuda_impl *c, rt_module *m); /* the same, given the device */
rt_kernel *cuda_kernel(rt_backend *be, rt_module *m, const char *name, int nargs, char *err,
                       size_t errlen);
int cuda_launch(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                const cg_launch *geometry, char *err, size_t errlen);

/* cublas.c: the table's gemm, and the handle's set-up on the compute stream. */
int cuda_gemm(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C, char *err,
              size_t errlen);
int cuda_blas_up(cuda_impl *c, char *err, size_t errlen);

/* cudnn.c: the table's conv; the handle on the compute stream when cuDNN
 * loads (else c->dnn stays NULL and dnn_why says why), and its teardown. */
int cuda_conv(rt_backend *be, const cg_conv *d, void *out, const void *in, const void *in2,
              char *err, size_t errlen);
int cuda_dnn_up(cuda_impl *c, char *err, size_t errlen);
void cuda_dnn_down(cuda_impl *c);

/* graph.c: the table's graph hooks (rt_cuda_graph_* under device.h's names). */
rt_graph *cuda_graph_end(rt_backend *be, char *err, size_t errlen);
int cuda_graph_launch(rt_backend *be, rt_graph *g, char *err, size_t errlen);
void cuda_graph_free(rt_backend *be, rt_graph *g);

#endif
#endif
