/* runtime/cuda/loader.h — the CUDA driver, cuBLAS and NCCL, loaded at run time.
 *
 * dpc links NVRTC (a toolkit library that needs no driver) but never libcuda,
 * libcublas or libnccl: a binary built with the CUDA toolkit must start, and
 * run on the cpu backend, on a machine with no GPU, no driver and no cuBLAS.
 * These libraries are dlopen'ed the first time something asks for them; their
 * entry points land in tables whose members are typed from the prototypes
 * (__typeof__ of each), so every call is checked against the signature, and
 * whose symbol names are the versioned ones the headers map to (cuMemAlloc
 * -> cuMemAlloc_v2), so no call reaches an old ABI. The driver's prototypes
 * are the toolkit's cuda.h; cuBLAS's and NCCL's are declared in the tree
 * (decl_cublas.h, decl_nccl.h: a build needs neither library's headers,
 * and tests/cuda_decls_test.sh holds them equal to the real ones).
 *
 * Usage:
 *     char err[512];
 *     if (rt_cu_load(err, sizeof err)) ...        // no driver: err says why
 *     cuCheck(rt_cu.cuInit(0));                   // exit(1) with file:line
 *     if (cuTry(rt_cu.cuMemAlloc(&p, n), err, sizeof err)) return -1;
 *     if (rt_cublas_load(err, sizeof err)) ...
 *     cublasCheck(rt_cublas.cublasCreate(&h));
 *     if (rt_nccl_load(err, sizeof err)) ...
 *     ncclCheck(rt_nccl.ncclGetVersion(&v));
 *
 * Libraries: libcuda.so.1, libcublas.so.13, libnccl.so.2, found by the
 * dynamic loader's usual search (LD_LIBRARY_PATH, then the binary's RUNPATH,
 * which the Makefile sets to $(CUDA_HOME)/lib64). DPC_LIBCUDA, DPC_LIBCUBLAS
 * and DPC_LIBNCCL name another file (tests point DPC_LIBCUDA at the
 * toolkit's stub library). A failed load is not remembered, so a later call
 * (after the environment changed) tries again; a successful one is kept
 * for the life of the process (never dlclose'd: the driver keeps threads).
 *
 * Checks (llm.c style): cuCheck / cublasCheck / ncclCheck / nvrtcCheck print
 * "file:line: CALL: NAME: description" and exit(1); they are for calls that
 * cannot fail on good input (a failure there means the device is gone).
 * cuTry / cublasTry / ncclTry / nvrtcTry write the same message into
 * err/errlen and return -1 (0 on success), for paths a caller can act on.
 *
 * The whole header is empty unless the build has the CUDA toolkit
 * (DPC_HAVE_CUDA, set by the Makefile).
 */
#ifndef DPC_RT_CUDA_LOADER_H
#define DPC_RT_CUDA_LOADER_H

#ifdef DPC_HAVE_CUDA

#include <stddef.h>

#include <cuda.h>
#include <nvrtc.h>

#include "runtime/cuda/decl_cublas.h"
#include "runtime/cuda/decl_nccl.h"

/* ---- the entry points -------------------------------------------------------
 * X(name): name is the header's spelling; it may be a macro for a versioned
 * symbol, which both the member and the dlsym name follow. */
/* One entry point per X, grouped as in the header: kept as written. */
/* clang-format off */
#define RT_CU_FUNCS(X)                                                                          \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                       \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)               \
    X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)                \
    X(cuCtxSetCurrent) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost)            \
    X(cuMemGetInfo) X(cuMemsetD8Async) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)                \
    X(cuMemcpyDtoDAsync) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)            \
    X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                    \
    X(cuEventSynchronize) X(cuEventElapsedTime) X(cuModuleLoadDataEx) X(cuModuleUnload)         \
    X(cuModuleGetFunction) X(cuLaunchKernel) X(cuStreamBeginCapture) X(cuStreamEndCapture)      \
    X(cuGraphInstantiate) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)              \
    X(cuGraphGetNodes)

#define RT_CUBLAS_FUNCS(X)                                                                      \
    X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetWorkspace)                   \
    X(cublasSetMathMode) X(cublasSgemmStridedBatched) X(cublasGemmStridedBatchedEx)           \
    X(cublasGetProperty)                                                                        \
    X(cublasGetStatusName) X(cublasGetStatusString)

#define RT_NCCL_FUNCS(X)                                                                        \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommInitAll)                 \
    X(ncclCommDestroy) X(ncclCommGetAsyncError) X(ncclAllReduce) X(ncclReduce)                 \
    X(ncclBroadcast) X(ncclGroupStart) X(ncclGroupEnd) X(ncclGetErrorString)
/* clang-format on */

#define RT_LOADER_MEMBER(name) __typeof__(&name) name;
typedef struct {
    RT_CU_FUNCS(RT_LOADER_MEMBER)
} rt_cu_api;
typedef struct {
    RT_CUBLAS_FUNCS(RT_LOADER_MEMBER)
} rt_cublas_api;
typedef struct {
    RT_NCCL_FUNCS(RT_LOADER_MEMBER)
} rt_nccl_api;

/* Filled by the loaders below; read only after one returned 0. */
extern rt_cu_api rt_cu;
extern rt_cublas_api rt_cublas;
extern rt_nccl_api rt_nccl;

/* 0 once the library is loaded and every entry point resolved; else -1 and
 * why (which file, dlopen's message or the missing symbol). Thread-safe. */
int rt_cu_load(char *err, size_t errlen);
int rt_cublas_load(char *err, size_t errlen);
int rt_nccl_load(char *err, size_t errlen);
/* The file each loader opens (the environment override, or the soname). */
const char *rt_cu_library(void);
const char *rt_cublas_library(void);
const char *rt_nccl_library(void);

/* "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected" and the like;
 * works before the driver is loaded (then just the number). */
const char *rt_cu_error_name(CUresult r);
const char *rt_cu_error_string(CUresult r);
const char *rt_cublas_status_name(cublasStatus_t s);
const char *rt_nccl_result_string(ncclResult_t r);

/* ---- checks ---------------------------------------------------------------- */

void rt_cu_check_(CUresult r, const char *call, const char *file, int line);
void rt_cublas_check_(cublasStatus_t s, const char *call, const char *file, int line);
void rt_nccl_check_(ncclResult_t r, const char *call, const char *file, int line);
void rt_nvrtc_check_(nvrtcResult r, const char *call, const char *file, int line);
int rt_cu_try_(CUresult r, const char *call, const char *file, int line, char *err, size_t errlen);
int rt_cublas_try_(cublasStatus_t s, const char *call, const char *file, int line, char *err,
                   size_t errlen);
int rt_nccl_try_(ncclResult_t r, const char *call, const char *file, int line, char *err,
                 size_t errlen);
int rt_nvrtc_try_(nvrtcResult r, const char *call, const char *file, int line, char *err,
                  size_t errlen);

#define cuCheck(call)                rt_cu_check_((call), #call, __FILE__, __LINE__)
#define cublasCheck(call)            rt_cublas_check_((call), #call, __FILE__, __LINE__)
#define ncclCheck(call)              rt_nccl_check_((call), #call, __FILE__, __LINE__)
#define nvrtcCheck(call)             rt_nvrtc_check_((call), #call, __FILE__, __LINE__)
#define cuTry(call, err, errlen)     rt_cu_try_((call), #call, __FILE__, __LINE__, err, errlen)
#define cublasTry(call, err, errlen) rt_cublas_try_((call), #call, __FILE__, __LINE__, err, errlen)
#define ncclTry(call, err, errlen)   rt_nccl_try_((call), #call, __FILE__, __LINE__, err, errlen)
#define nvrtcTry(call, err, errlen)  rt_nvrtc_try_((call), #call, __FILE__, __LINE__, err, errlen)

#endif /* DPC_HAVE_CUDA */
#endif
