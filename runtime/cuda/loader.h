/* runtime/cuda/loader.h — the CUDA driver, NVRTC, cuBLAS, NCCL and cuDNN,
 * loaded at run time.
 *
 * dpc links none of them and needs none of their headers to build: a
 * binary with the cuda backend must start, and run on the cpu backend, on
 * a machine with no GPU, no driver and no CUDA libraries, and a machine
 * with only the driver and pip wheels must build and run it. Each library
 * is dlopen'ed the first time something asks for it; its entry points land
 * in a table whose members are typed from the prototypes (__typeof__ of
 * each), so every call is checked against the signature, and whose symbol
 * names are the versioned ones the headers map to (cuMemAlloc ->
 * cuMemAlloc_v2), so no call reaches an old ABI. The prototypes are
 * declared in the tree (decl_cuda.h, decl_nvrtc.h, decl_cublas.h,
 * decl_nccl.h, decl_cudnn.h); tests/cuda_decls_test.sh holds them equal to
 * the real headers wherever those exist.
 *
 * Usage:
 *     char err[512];
 *     if (rt_cu_load(err, sizeof err)) ...        // no driver: err says why
 *     if (cuTry(rt_cu.cuMemAlloc(&p, n), err, sizeof err)) return -1;
 *     if (rt_cublas_load(err, sizeof err)) ...
 *     if (cublasTry(rt_cublas.cublasCreate(&h), err, sizeof err)) return -1;
 *     if (rt_nvrtc_load(err, sizeof err)) ...     // rt_nvrtc.nvrtcCompileProgram, ...
 *     rt_lib_status st; rt_lib_status_get(RT_LIB_CUBLAS, &st);  // where it came from
 *
 * Finding them (libsearch.h has the order): DPC_LIBCUDA, DPC_LIBNVRTC,
 * DPC_LIBCUBLAS, DPC_LIBNCCL, DPC_LIBCUDNN name a file (tests point them
 * at the fake driver); otherwise the soname (libcuda.so.1, libnvrtc.so.13,
 * libcublas.so.13, libnccl.so.2, libcudnn.so.9) through the dynamic
 * loader, then $CUDA_HOME/lib64, the pip wheels of each python3 on PATH,
 * $CONDA_PREFIX/lib, and for the driver its usual directories. A file
 * found by a path (DPC_LIB* included) is opened under the ownership rule
 * (base/trust.h: no other user owns or may write it or a directory on its
 * path) and loaded through the checked directory's descriptor; a refused
 * one runs no code and is passed over, named with the reason. A file is
 * taken when it is a regular file (or a link to one) that dlopen accepts,
 * whose version is what dpc needs (the driver CUDA >= 13.0, NVRTC and
 * cuBLAS 13, NCCL 2, cuDNN 9), and that has every entry point; a wrong
 * version is passed over for a later place, and refused with both versions
 * named when no place has the right one. Loaded from a directory, the
 * libraries it loads itself come from the same directory (cuBLAS's
 * libcublasLt, NVRTC's libnvrtc-builtins, which NVRTC does not look for
 * beside itself). A failed load is not remembered, so a later call (after
 * the environment changed) tries again; a successful one is kept for the
 * life of the process (never dlclose'd: the driver keeps threads).
 *
 * Checks: cuTry / cublasTry / ncclTry / nvrtcTry / cudnnTry write
 * "file:line: CALL: NAME: description" into err/errlen and return -1 (0 on
 * success). Nothing here exits the process: a library that is missing or
 * broken, or a call that fails, is an error returned to the caller, whose
 * message names the library or the call.
 *
 * The whole header is empty unless the build has the cuda backend
 * (DPC_HAVE_CUDA, set by the Makefile unless CUDA=0).
 */
#ifndef DPC_RT_CUDA_LOADER_H
#define DPC_RT_CUDA_LOADER_H

#ifdef DPC_HAVE_CUDA

#include <stddef.h>
#include <stdio.h>

#include "runtime/cuda/decl_cuda.h"
#include "runtime/cuda/decl_nvrtc.h"
#include "runtime/cuda/decl_cublas.h"
#include "runtime/cuda/decl_nccl.h"
#include "runtime/cuda/decl_cudnn.h"
#include "runtime/cuda/libsearch.h"

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

#define RT_NVRTC_FUNCS(X)                                                                       \
    X(nvrtcGetErrorString) X(nvrtcVersion) X(nvrtcGetNumSupportedArchs)                         \
    X(nvrtcGetSupportedArchs) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)                      \
    X(nvrtcCompileProgram) X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetCUBINSize)               \
    X(nvrtcGetCUBIN) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)

#define RT_CUDNN_FUNCS(X)                                                                       \
    X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)  \
    X(cudnnCreateTensorDescriptor) X(cudnnSetTensor4dDescriptor)                                \
    X(cudnnDestroyTensorDescriptor) X(cudnnCreateFilterDescriptor)                              \
    X(cudnnSetFilter4dDescriptor) X(cudnnDestroyFilterDescriptor)                               \
    X(cudnnCreateConvolutionDescriptor) X(cudnnDestroyConvolutionDescriptor)                    \
    X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionMathType)                           \
    X(cudnnSetConvolutionGroupCount)                                                            \
    X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)    \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) X(cudnnFindConvolutionForwardAlgorithmEx)  \
    X(cudnnFindConvolutionBackwardDataAlgorithmEx)                                              \
    X(cudnnFindConvolutionBackwardFilterAlgorithmEx) X(cudnnConvolutionForward)                 \
    X(cudnnConvolutionBackwardData) X(cudnnConvolutionBackwardFilter)
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
typedef struct {
    RT_NVRTC_FUNCS(RT_LOADER_MEMBER)
} rt_nvrtc_api;
typedef struct {
    RT_CUDNN_FUNCS(RT_LOADER_MEMBER)
} rt_cudnn_api;

/* Filled by the loaders below; read only after one returned 0. */
extern rt_cu_api rt_cu;
extern rt_cublas_api rt_cublas;
extern rt_nccl_api rt_nccl;
extern rt_nvrtc_api rt_nvrtc;
extern rt_cudnn_api rt_cudnn;

/* 0 once the library is found, of the right version, and every entry point
 * resolved; else -1 and why in one line (the file and both versions, or
 * that it was nowhere, how many places were looked in and the packages
 * that provide it). Thread-safe. */
int rt_lib_load(rt_lib_id lib, char *err, size_t errlen);
int rt_cu_load(char *err, size_t errlen);
/* The driver as a probe for a device (--device auto): DPC_LIBCUDA when set
 * (under the ownership rule), else libcuda.so.1 through the dynamic
 * loader's own search only, never from a directory dpc chose. */
int rt_cu_probe(char *err, size_t errlen);
int rt_nvrtc_load(char *err, size_t errlen);
int rt_cublas_load(char *err, size_t errlen);
int rt_nccl_load(char *err, size_t errlen);
int rt_cudnn_load(char *err, size_t errlen);
/* The file a loader took, or before it succeeded what it looks for
 * first (the environment override, or the soname). */
const char *rt_cu_library(void);
const char *rt_cublas_library(void);
const char *rt_nccl_library(void);

/* Where a library came from (after its loader succeeded: loaded = 1), or
 * the places its last failed load looked in (report). */
typedef struct {
    int loaded;
    char path[RT_LIB_PATH_MAX]; /* where it was found; the real file for the loader's search */
    rt_lib_rule rule;
    char via[RT_LIB_PATH_MAX]; /* the rule's detail (libsearch.h) */
    char version[32];          /* "13.1.0"; "unknown" when it cannot say (the stub driver) */
} rt_lib_status;
void rt_lib_status_get(rt_lib_id lib, rt_lib_status *st);
/* 1 once lib is loaded (its error names usable), else 0. */
int rt_lib_loaded(rt_lib_id lib);
/* Loads lib (if not yet) and prints what dprun --device cuda --info shows
 * for it: the path, the rule, the version; or "not found", each place
 * looked in with what was there, and the packages. 0 when loaded. */
int rt_lib_report(rt_lib_id lib, FILE *out);

/* "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected" and the like;
 * works before the driver is loaded (then just the number). */
const char *rt_cu_error_name(CUresult r);
const char *rt_cu_error_string(CUresult r);
const char *rt_cublas_status_name(cublasStatus_t s);
const char *rt_nccl_result_string(ncclResult_t r);
const char *rt_nvrtc_result_string(nvrtcResult r);
const char *rt_cudnn_status_string(cudnnStatus_t r);

/* ---- checks ---------------------------------------------------------------- */

int rt_cu_try_(CUresult r, const char *call, const char *file, int line, char *err, size_t errlen);
int rt_cublas_try_(cublasStatus_t s, const char *call, const char *file, int line, char *err,
                   size_t errlen);
int rt_nccl_try_(ncclResult_t r, const char *call, const char *file, int line, char *err,
                 size_t errlen);
int rt_nvrtc_try_(nvrtcResult r, const char *call, const char *file, int line, char *err,
                  size_t errlen);
int rt_cudnn_try_(cudnnStatus_t r, const char *call, const char *file, int line, char *err,
                  size_t errlen);

#define cuTry(call, err, errlen)     rt_cu_try_((call), #call, __FILE__, __LINE__, err, errlen)
#define cublasTry(call, err, errlen) rt_cublas_try_((call), #call, __FILE__, __LINE__, err, errlen)
#define ncclTry(call, err, errlen)   rt_nccl_try_((call), #call, __FILE__, __LINE__, err, errlen)
#define nvrtcTry(call, err, errlen)  rt_nvrtc_try_((call), #call, __FILE__, __LINE__, err, errlen)
#define cudnnTry(call, err, errlen)  rt_cudnn_try_((call), #call, __FILE__, __LINE__, err, errlen)

#endif /* DPC_HAVE_CUDA */
#endif
