/* runtime/cuda/cuda.h — the cuda backend: what it adds to the rt_backend
 * table (CUDA graphs, counters, NCCL), and the cuBLAS argument mapping.
 *
 * Usage:
 *     rt_backend *be = rt_backend_cuda(0, err, sizeof err);  // NULL + why
 *     ... the rt_backend table, as device.h says ...
 *     // steady state as one CUDA graph (inputs are copied before each launch):
 *     rt_cuda_graph_begin(be, err, sizeof err);
 *     rt_exec_run(train, err, sizeof err);     // recorded, not run; sync is a no-op
 *     rt_cuda_graph *gr = rt_cuda_graph_end(be, err, sizeof err);
 *     for (...) { rt_exec_set_input(...); rt_cuda_graph_launch(be, gr, err, sizeof err); }
 *     rt_cuda_graph_free(be, gr);
 *     // the same through the backend table (device.h), as rt_exec does:
 *     be->graph_begin(be, ...); ...; rt_graph *g = be->graph_end(be, ...);
 *
 * What the backend does (docs/DESIGN.md §8.2):
 *   memory    cuMemAlloc, zero-filled by a memset on the compute stream;
 *   copy_in   through a ring of pinned staging memory and
 *             cuMemcpyHtoDAsync on the compute stream: the caller's buffer
 *             is free on return and the copy overlaps queued work; a
 *             piece of the ring is reused once its copy is known done;
 *   copy_out  cuMemcpyDtoHAsync on the compute stream, then waits for it;
 *   reads     copy_out_async into pinned memory, marks (events) and
 *             wait_mark: rt_readback, results read without draining;
 *   compile   NVRTC to a cubin for the device (nvrtc.h), loaded with
 *             cuModuleLoadDataEx;
 *   launch    cuLaunchKernel, 256-thread blocks, a grid covering count up to
 *             16 blocks per multiprocessor (the kernels loop grid-stride);
 *   gemm      cublasSgemmStridedBatched from the cg_gemm descriptor,
 *             plain fp32; bf16 operands: cublasGemmStridedBatchedEx, f32
 *             compute; a tf32 descriptor (--precision tf32): the same with
 *             CUBLAS_COMPUTE_32F_FAST_TF32;
 *   streams   one compute stream (everything above) and one communication
 *             stream (NCCL) per backend, ordered by events.
 * Device memory is a CUdeviceptr cast to void *, so (char *)p + off works
 * as device.h promises. Failures of calls that cannot fail on good input
 * (a lost device) exit with file:line (loader.h's checks); a failure that
 * can be an earlier kernel's (found by a copy or a wait) also names the
 * backend's label (the last step queued) and suggests DPC_SYNC=1.
 *
 * Environment: DPC_CUDA_DEVICE picks the device of rt_backend_open (default
 * 0); DPC_DEBUG=1 prints the device, module loads and, when the backend is
 * freed, its counters; DPC_SYNC=1 (or DPC_PROFILE=1): the executor
 * synchronises after every call, so a failure names its call (failure
 * messages then leave out the hint to set it).
 */
#ifndef DPC_RT_CUDA_CUDA_H
#define DPC_RT_CUDA_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "format/program.h"
#include "runtime/device/device.h"

/* 1 when this build has the cuda backend (every build but CUDA=0's). */
int rt_cuda_compiled(void);
/* `dprun --device cuda --info`: for each CUDA library the file loaded,
 * the rule that found it and its version, or every place looked in and
 * the packages that provide it; NVRTC's architectures; the driver's
 * version and each device (DPC_CUDA_DEVICE's alone when set): name,
 * compute capability, memory. 0 when the driver, NVRTC and cuBLAS (what
 * training needs) loaded and the device(s) answered; NCCL and cuDNN are
 * reported, not required. */
int rt_cuda_info(FILE *out);
/* rt_cuda_device_count and rt_backend_cuda (a backend on a device) are
 * declared in runtime/device/device.h, whose backend table opens them. */
/* 1 if be is a cuda backend. */
int rt_backend_is_cuda(const rt_backend *be);
/* The device ordinal of a cuda backend; -1 for another backend. */
int rt_cuda_device_ordinal(const rt_backend *be);

/* ---- CUDA graphs -------------------------------------------------------------
 * Between begin and end the compute stream records instead of running:
 * launch and gemm are captured, sync returns at once (nothing runs), and
 * alloc, free, copy_in and copy_out abort (their effects would be baked
 * into or missing from the graph). The graph replays with the buffers it
 * was recorded with; set inputs (copy_in) before each launch. */
typedef struct rt_cuda_graph rt_cuda_graph;
int rt_cuda_graph_begin(rt_backend *be, char *err, size_t errlen);
rt_cuda_graph *rt_cuda_graph_end(rt_backend *be, char *err, size_t errlen);
int rt_cuda_graph_launch(rt_backend *be, rt_cuda_graph *g, char *err, size_t errlen);
void rt_cuda_graph_free(rt_backend *be, rt_cuda_graph *g);
/* Nodes in the graph: kernels, GEMMs' own kernels, memsets. */
int rt_cuda_graph_nodes(const rt_cuda_graph *g);

/* ---- counters ---------------------------------------------------------------- */
typedef struct {
    int64_t launches, gemms, convs;                            /* run eagerly */
    int64_t captured_launches, captured_gemms, captured_convs; /* recorded into graphs */
    int64_t graph_launches;
    int64_t copies_in, bytes_in, copies_out, bytes_out;
    /* The host blocked on the device: host_waits with nothing queued
     * behind what it waited for (the device idles until the host queues
     * more: a stream synchronisation, a blocking copy_out, a wait for the
     * latest mark); lagged_waits for an earlier point while later work
     * stays queued (the device keeps running: a step's results read while
     * the next step runs). Marks known done are not waited for. */
    int64_t host_waits, lagged_waits;
} rt_cuda_stats;
/* 0 and the counters so far; -1 if be is not a cuda backend. */
int rt_cuda_stats_get(const rt_backend *be, rt_cuda_stats *s);
/* "NVIDIA H200, sm_90, 132 SMs, 140 GiB" (empty for another backend). */
const char *rt_cuda_device_name(const rt_backend *be);

/* ---- cuBLAS arguments ---------------------------------------------------------
 * The cg_gemm descriptor is already column-major and cuBLAS-shaped (format/program.h);
 * this is the argument list of cublasSgemmStridedBatched it becomes, with
 * cuBLAS's own rules checked (sizes fit an int, batch >= 1,
 * lda >= max(1, transa ? k : m), ldb >= max(1, transb ? n : k),
 * ldc >= max(1, m)). Pure, so tests check it without a GPU. */
typedef struct {
    int transa, transb; /* CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 */
    int m, n, k;
    float alpha, beta;
    int lda, ldb, ldc;
    long long stride_a, stride_b, stride_c;
    int batch;
    int64_t off_a, off_b, off_c; /* element offsets added to the A, B, C pointers */
} rt_sgemm_args;
int rt_cublas_sgemm_args(const cg_gemm *d, rt_sgemm_args *a, char *err, size_t errlen);

/* ---- NCCL (the `nccl` collective, runtime/comm/comm.h, is built on this) ----
 * One communicator per cuda backend, all in this process, one device each
 * (NCCL refuses two ranks on one GPU: replicas sharing a device reduce
 * locally first). All-reduce runs on the backend's communication stream:
 * it starts once the work queued so far on the compute stream is done
 * (an event), and rt_nccl_join makes later compute work wait for every
 * all-reduce issued so far, so the two overlap in between. A bucket
 * (rt_nccl_bucket_start) does the same for a list of gradients, summed out
 * of place into their outputs in one NCCL group, with an event of its own
 * that rt_nccl_bucket_join makes the compute stream wait for. Both are
 * stream work only, so a CUDA graph captured on the compute stream holds
 * them (the communication stream joins the capture through the events). */
typedef struct rt_nccl_comm rt_nccl_comm;
/* NCCL's version code (e.g. 22809); loads libnccl. -1 + message. */
int rt_nccl_version(int *version, char *err, size_t errlen);
/* comms[i] for bes[i]; -1 + message (no NCCL, a shared device, ...). */
int rt_nccl_init_all(rt_backend *const *bes, int n, rt_nccl_comm **comms, char *err, size_t errlen);
/* Across processes: rank 0 makes the id (RT_NCCL_ID_BYTES bytes, NCCL's
 * ncclUniqueId) and every process gets it (MPI); then each inits its n
 * backends (distinct devices) as NCCL ranks first .. first+n-1 of nranks,
 * in one NCCL group. -1 + message. */
#define RT_NCCL_ID_BYTES 128
int rt_nccl_unique_id(void *id, char *err, size_t errlen);
int rt_nccl_init_ranks(rt_backend *const *bes, int n, const void *id, int first, int nranks,
                       rt_nccl_comm **comms, char *err, size_t errlen);
/* In place: buf (device floats of be) = sum over the ranks. Enqueued. */
int rt_nccl_allreduce_sum(rt_nccl_comm *c, float *buf, size_t count, char *err, size_t errlen);
int rt_nccl_join(rt_nccl_comm *c, char *err, size_t errlen);
/* Bucket `id` (0, 1, ...; events are made on first use): src[i] (count[i]
 * device floats) summed over the ranks into dst[i], for i < n; with owner
 * (ZeRO-1), into NCCL rank owner[i]'s dst[i] alone when owner[i] >= 0
 * (ncclReduce; the others' dst[i] is left as it was). Enqueued. */
int rt_nccl_bucket_start(rt_nccl_comm *c, int id, const void *const *src, void *const *dst,
                         const int64_t *count, const int *owner, int n, char *err, size_t errlen);
/* buf (bytes on the device) becomes NCCL rank root's, on the compute
 * stream: later work of every rank reads it. Enqueued. */
int rt_nccl_broadcast(rt_nccl_comm *c, void *buf, size_t bytes, int root, char *err, size_t errlen);
/* Later compute-stream work waits for bucket id (the host does not block). */
int rt_nccl_bucket_join(rt_nccl_comm *c, int id, char *err, size_t errlen);
void rt_nccl_free(rt_nccl_comm *c);

#endif
