/* runtime/cuda/decl_cuda.h — the part of the CUDA driver API dpc calls,
 * declared here so that building dpc needs no CUDA header at all: libcuda
 * is dlopen'ed (loader.h), and a machine with only the driver and pip
 * wheels has no cuda.h.
 *
 * Values, types and prototypes are CUDA 13's cuda.h. The enum types hold
 * only the values dpc uses (their size and signedness are the real ones');
 * the function names are cuda.h's, mapped to the versioned symbols cuda.h
 * maps them to (cuMemAlloc -> cuMemAlloc_v2), so the loader asks for the
 * current ABI. tests/cuda_decls_test.sh compiles tests/gpu/decls_check.c
 * against the real cuda.h wherever it is found and fails on any value,
 * size, prototype or symbol name that differs. An entry point added to
 * loader.h's RT_CU_FUNCS is declared here, with the mapping cuda.h gives it.
 *
 * DPC_DECL_CUDA_REAL (the check; also whenever cuda.h came first): the real
 * cuda.h was included first; then the value lists and the prototypes are
 * read, so that a prototype that differs from the real one fails to
 * compile, and the types and name mappings are left to the real header.
 */
#ifndef DPC_RT_CUDA_DECL_CUDA_H
#define DPC_RT_CUDA_DECL_CUDA_H

#include <stddef.h>

#if defined(__cuda_cuda_h__) && !defined(DPC_DECL_CUDA_REAL)
#define DPC_DECL_CUDA_REAL 1
#endif

/* The CUDA version the declarations follow (cuda.h's CUDA_VERSION), and
 * the oldest driver dpc accepts (cuDriverGetVersion): NVRTC 13's cubins and
 * PTX need a CUDA 13 driver. */
#define RT_CUDA_DECL_VERSION 13000
#define RT_CUDA_DRIVER_MIN   13000

/* ---- values: X(NAME, VALUE) ---------------------------------------------- */
/* clang-format off */
#define RT_CU_RESULT_VALUES(X)                                                                  \
    X(CUDA_SUCCESS, 0) X(CUDA_ERROR_INVALID_VALUE, 1) X(CUDA_ERROR_OUT_OF_MEMORY, 2)            \
    X(CUDA_ERROR_NOT_INITIALIZED, 3) X(CUDA_ERROR_STUB_LIBRARY, 34)                             \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE, 46) X(CUDA_ERROR_NO_DEVICE, 100)                           \
    X(CUDA_ERROR_INVALID_DEVICE, 101) X(CUDA_ERROR_INVALID_IMAGE, 200)                          \
    X(CUDA_ERROR_INVALID_CONTEXT, 201) X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209)                     \
    X(CUDA_ERROR_INVALID_PTX, 218) X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222)                   \
    X(CUDA_ERROR_OPERATING_SYSTEM, 304) X(CUDA_ERROR_INVALID_HANDLE, 400)                       \
    X(CUDA_ERROR_ILLEGAL_STATE, 401) X(CUDA_ERROR_NOT_FOUND, 500) X(CUDA_ERROR_NOT_READY, 600)  \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, 700) X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701)               \
    X(CUDA_ERROR_LAUNCH_FAILED, 719) X(CUDA_ERROR_NOT_SUPPORTED, 801)                           \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803) X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804) \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900) X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901) \
    X(CUDA_ERROR_UNKNOWN, 999)
#define RT_CU_DEVICE_ATTRIBUTE_VALUES(X)                                                        \
    X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)                                             \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)                                         \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)
#define RT_CU_JIT_OPTION_VALUES(X)                                                              \
    X(CU_JIT_ERROR_LOG_BUFFER, 5) X(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, 6)
#define RT_CU_STREAM_CAPTURE_MODE_VALUES(X)                                                     \
    X(CU_STREAM_CAPTURE_MODE_GLOBAL, 0) X(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 1)
#define RT_CU_STREAM_FLAG_VALUES(X) X(CU_STREAM_DEFAULT, 0) X(CU_STREAM_NON_BLOCKING, 1)
#define RT_CU_EVENT_FLAG_VALUES(X) X(CU_EVENT_DEFAULT, 0) X(CU_EVENT_DISABLE_TIMING, 2)

/* cuda.h's names for versioned symbols: X(NAME, SYMBOL). */
#define RT_CU_VERSIONED(X)                                                                      \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2)                                                    \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2)                                  \
    X(cuMemAlloc, cuMemAlloc_v2) X(cuMemFree, cuMemFree_v2)                                     \
    X(cuMemAllocHost, cuMemAllocHost_v2) X(cuMemGetInfo, cuMemGetInfo_v2)                       \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2)       \
    X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2) X(cuStreamDestroy, cuStreamDestroy_v2)           \
    X(cuEventDestroy, cuEventDestroy_v2) X(cuEventElapsedTime, cuEventElapsedTime_v2)           \
    X(cuStreamBeginCapture, cuStreamBeginCapture_v2)                                            \
    X(cuGraphInstantiate, cuGraphInstantiateWithFlags)
/* clang-format on */

/* ---- types ----------------------------------------------------------------- */
#ifndef DPC_DECL_CUDA_REAL
#ifndef RT_DECL_ENUMERATOR
#define RT_DECL_ENUMERATOR(name, value) name = value,
#endif

typedef enum cudaError_enum { RT_CU_RESULT_VALUES(RT_DECL_ENUMERATOR) } CUresult;
typedef enum CUdevice_attribute_enum {
    RT_CU_DEVICE_ATTRIBUTE_VALUES(RT_DECL_ENUMERATOR)
} CUdevice_attribute;
typedef enum CUjit_option_enum { RT_CU_JIT_OPTION_VALUES(RT_DECL_ENUMERATOR) } CUjit_option;
typedef enum CUstreamCaptureMode_enum {
    RT_CU_STREAM_CAPTURE_MODE_VALUES(RT_DECL_ENUMERATOR)
} CUstreamCaptureMode;
typedef enum CUstream_flags_enum { RT_CU_STREAM_FLAG_VALUES(RT_DECL_ENUMERATOR) } CUstream_flags;
typedef enum CUevent_flags_enum { RT_CU_EVENT_FLAG_VALUES(RT_DECL_ENUMERATOR) } CUevent_flags;

/* 64-bit hosts only (cuda.h's CUdeviceptr_v2 is 32 bits elsewhere). */
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;

#define cuDeviceTotalMem          cuDeviceTotalMem_v2
#define cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
#define cuMemAlloc                cuMemAlloc_v2
#define cuMemFree                 cuMemFree_v2
#define cuMemAllocHost            cuMemAllocHost_v2
#define cuMemGetInfo              cuMemGetInfo_v2
#define cuMemcpyHtoDAsync         cuMemcpyHtoDAsync_v2
#define cuMemcpyDtoHAsync         cuMemcpyDtoHAsync_v2
#define cuMemcpyDtoDAsync         cuMemcpyDtoDAsync_v2
#define cuStreamDestroy           cuStreamDestroy_v2
#define cuEventDestroy            cuEventDestroy_v2
#define cuEventElapsedTime        cuEventElapsedTime_v2
#define cuStreamBeginCapture      cuStreamBeginCapture_v2
#define cuGraphInstantiate        cuGraphInstantiateWithFlags
#endif

#ifndef CUDAAPI
#define CUDAAPI
#endif

/* ---- entry points ------------------------------------------------------------ */
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion);
CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr);
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr);
CUresult CUDAAPI cuDeviceGetCount(int *count);
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal);
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx);
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);
CUresult CUDAAPI cuMemFree(CUdeviceptr dptr);
CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize);
CUresult CUDAAPI cuMemFreeHost(void *p);
CUresult CUDAAPI cuMemGetInfo(size_t *free, size_t *total);
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream);
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream);
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream);
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream);
CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult CUDAAPI cuStreamDestroy(CUstream hStream);
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream);
CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult CUDAAPI cuEventDestroy(CUevent hEvent);
CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult CUDAAPI cuEventSynchronize(CUevent hEvent);
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues);
CUresult CUDAAPI cuModuleUnload(CUmodule hmod);
CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                void **extra);
CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                    unsigned long long flags);
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph);
CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes);

#endif
