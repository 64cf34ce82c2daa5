/* tests/gpu/decls_check.c — the tree's driver, NVRTC, cuBLAS, NCCL and
 * cuDNN declarations (runtime/cuda/decl_cuda.h, decl_nvrtc.h,
 * decl_cublas.h, decl_nccl.h, decl_cudnn.h) against the real headers.
 * tests/cuda_decls_test.sh builds it twice with the same include path:
 *
 *   -DDPC_DECLS_REAL  the real cuda.h / nvrtc.h / cublas_v2.h / nccl.h /
 *                     cudnn.h first (each where __has_include finds it),
 *                     then the tree's headers in
 *                     their check mode: every value the tree lists must
 *                     equal the real one (_Static_assert) and every
 *                     prototype must agree with the real one (a conflicting
 *                     redeclaration does not compile);
 *   (neither)         the tree's headers alone.
 *
 * Both builds print, for each library whose real header is found, its
 * values, each type's size, alignment and signedness, and the symbol each
 * entry point the loader resolves is named by (cuda.h maps cuMemAlloc to
 * cuMemAlloc_v2: the tree must map it the same); the test wants the two
 * outputs equal. The real build adds the headers' own version on
 * stderr. Nothing is called: no library is linked. */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#if __has_include(<cuda.h>)
#define HAVE_CUDA_H 1
#endif
#if __has_include(<nvrtc.h>)
#define HAVE_NVRTC_H 1
#endif
#if __has_include(<cudnn.h>)
#define HAVE_CUDNN_H 1
#endif
#if __has_include(<cublas_v2.h>)
#define HAVE_CUBLAS_H 1
#endif
#if __has_include(<nccl.h>)
#define HAVE_NCCL_H 1
#endif

#ifdef DPC_DECLS_REAL
#ifdef HAVE_CUDA_H
#include <cuda.h>
#define DPC_DECL_CUDA_REAL 1
#endif
#ifdef HAVE_NVRTC_H
#include <nvrtc.h>
#define DPC_DECL_NVRTC_REAL 1
#endif
#ifdef HAVE_CUDNN_H
#include <cudnn.h>
#define DPC_DECL_CUDNN_REAL 1
#endif
#ifdef HAVE_CUBLAS_H
#include <cublas_v2.h>
#define DPC_DECL_CUBLAS_REAL 1
#endif
#ifdef HAVE_NCCL_H
#include <nccl.h>
#define DPC_DECL_NCCL_REAL 1
#endif
/* A value the tree lists must be the header's. */
#define SAME_VALUE(name, value) \
    _Static_assert((long long)(name) == (long long)(value), #name ": the tree says " #value);
#else
#define SAME_VALUE(name, value)
#endif

/* Every declaration, and the loader's lists of the entry points. */
#define DPC_HAVE_CUDA 1
#include "runtime/cuda/loader.h"

#define STR_(x)            #x
#define STR(x)             STR_(x)
/* The symbol the loader asks for: the name after every mapping. */
#define PRINT_SYMBOL(name) printf("symbol %s %s\n", #name, STR(name));

#define PRINT_VALUE(name, value) printf("%s %lld\n", #name, (long long)(name));
#define PRINT_ENUM(T)                                                              \
    printf("%s size %zu align %zu signed %d\n", #T, sizeof(T), (size_t)alignof(T), \
           (long long)(T)-1 < 0LL)
#define PRINT_TYPE(T) printf("%s size %zu align %zu\n", #T, sizeof(T), (size_t)alignof(T))

#ifdef HAVE_CUDA_H
RT_CU_RESULT_VALUES(SAME_VALUE)
RT_CU_DEVICE_ATTRIBUTE_VALUES(SAME_VALUE)
RT_CU_JIT_OPTION_VALUES(SAME_VALUE)
RT_CU_STREAM_CAPTURE_MODE_VALUES(SAME_VALUE)
RT_CU_STREAM_FLAG_VALUES(SAME_VALUE)
RT_CU_EVENT_FLAG_VALUES(SAME_VALUE)
_Static_assert(__builtin_types_compatible_p(CUstream, struct CUstream_st *), "CUstream");
_Static_assert(__builtin_types_compatible_p(CUevent, struct CUevent_st *), "CUevent");
_Static_assert(__builtin_types_compatible_p(CUcontext, struct CUctx_st *), "CUcontext");
_Static_assert(__builtin_types_compatible_p(CUmodule, struct CUmod_st *), "CUmodule");
_Static_assert(__builtin_types_compatible_p(CUfunction, struct CUfunc_st *), "CUfunction");
_Static_assert(__builtin_types_compatible_p(CUgraph, struct CUgraph_st *), "CUgraph");
_Static_assert(__builtin_types_compatible_p(CUgraphExec, struct CUgraphExec_st *), "CUgraphExec");
_Static_assert(__builtin_types_compatible_p(CUgraphNode, struct CUgraphNode_st *), "CUgraphNode");

static void print_cuda(void) {
    RT_CU_RESULT_VALUES(PRINT_VALUE)
    RT_CU_DEVICE_ATTRIBUTE_VALUES(PRINT_VALUE)
    RT_CU_JIT_OPTION_VALUES(PRINT_VALUE)
    RT_CU_STREAM_CAPTURE_MODE_VALUES(PRINT_VALUE)
    RT_CU_STREAM_FLAG_VALUES(PRINT_VALUE)
    RT_CU_EVENT_FLAG_VALUES(PRINT_VALUE)
    PRINT_ENUM(CUresult);
    PRINT_ENUM(CUdevice_attribute);
    PRINT_ENUM(CUjit_option);
    PRINT_ENUM(CUstreamCaptureMode);
    PRINT_ENUM(CUstream_flags);
    PRINT_ENUM(CUevent_flags);
    PRINT_ENUM(CUdeviceptr);
    PRINT_ENUM(CUdevice);
    PRINT_TYPE(CUcontext);
    PRINT_TYPE(CUstream);
    PRINT_TYPE(CUgraphExec);
    RT_CU_FUNCS(PRINT_SYMBOL)
#ifdef DPC_DECLS_REAL
    fprintf(stderr, "cuda.h: CUDA %d.%d; dpc's declarations follow %d.%d\n", CUDA_VERSION / 1000,
            CUDA_VERSION % 1000 / 10, RT_CUDA_DECL_VERSION / 1000,
            RT_CUDA_DECL_VERSION % 1000 / 10);
#endif
}
#endif

#ifdef HAVE_NVRTC_H
RT_NVRTC_RESULT_VALUES(SAME_VALUE)
_Static_assert(__builtin_types_compatible_p(nvrtcProgram, struct _nvrtcProgram *), "nvrtcProgram");

static void print_nvrtc(void) {
    RT_NVRTC_RESULT_VALUES(PRINT_VALUE)
    PRINT_ENUM(nvrtcResult);
    PRINT_TYPE(nvrtcProgram);
    RT_NVRTC_FUNCS(PRINT_SYMBOL)
}
#endif

#ifdef HAVE_CUDNN_H
/* clang-format off */
#define RT_CUDNN_ALL_VALUES(X)                                                                  \
    RT_CUDNN_STATUS_VALUES(X) RT_CUDNN_DATA_TYPE_VALUES(X) RT_CUDNN_MATH_VALUES(X)              \
    RT_CUDNN_TENSOR_FORMAT_VALUES(X) RT_CUDNN_CONV_MODE_VALUES(X)                               \
    RT_CUDNN_DETERMINISM_VALUES(X) RT_CUDNN_FWD_ALGO_VALUES(X)                                  \
    RT_CUDNN_BWD_DATA_ALGO_VALUES(X) RT_CUDNN_BWD_FILTER_ALGO_VALUES(X)
/* clang-format on */
RT_CUDNN_ALL_VALUES(SAME_VALUE)
_Static_assert(__builtin_types_compatible_p(cudnnHandle_t, struct cudnnContext *), "cudnnHandle_t");
_Static_assert(__builtin_types_compatible_p(cudnnTensorDescriptor_t, struct cudnnTensorStruct *),
               "cudnnTensorDescriptor_t");
_Static_assert(__builtin_types_compatible_p(cudnnFilterDescriptor_t, struct cudnnFilterStruct *),
               "cudnnFilterDescriptor_t");
_Static_assert(__builtin_types_compatible_p(cudnnConvolutionDescriptor_t,
                                            struct cudnnConvolutionStruct *),
               "cudnnConvolutionDescriptor_t");

/* Where each field of a perf result lies (dpc reads them). */
#define PRINT_PERF(T)                                                                            \
    printf("%s size %zu algo %zu status %zu time %zu memory %zu determinism %zu math %zu\n", #T, \
           sizeof(T), offsetof(T, algo), offsetof(T, status), offsetof(T, time),                 \
           offsetof(T, memory), offsetof(T, determinism), offsetof(T, mathType))

static void print_cudnn(void) {
    RT_CUDNN_ALL_VALUES(PRINT_VALUE)
    PRINT_ENUM(cudnnStatus_t);
    PRINT_ENUM(cudnnDataType_t);
    PRINT_ENUM(cudnnMathType_t);
    PRINT_ENUM(cudnnTensorFormat_t);
    PRINT_ENUM(cudnnConvolutionMode_t);
    PRINT_ENUM(cudnnDeterminism_t);
    PRINT_ENUM(cudnnConvolutionFwdAlgo_t);
    PRINT_ENUM(cudnnConvolutionBwdDataAlgo_t);
    PRINT_ENUM(cudnnConvolutionBwdFilterAlgo_t);
    PRINT_PERF(cudnnConvolutionFwdAlgoPerf_t);
    PRINT_PERF(cudnnConvolutionBwdDataAlgoPerf_t);
    PRINT_PERF(cudnnConvolutionBwdFilterAlgoPerf_t);
    RT_CUDNN_FUNCS(PRINT_SYMBOL)
#ifdef DPC_DECLS_REAL
    fprintf(stderr, "cudnn.h: cuDNN %d.%d.%d; dpc's declarations follow %d\n", CUDNN_MAJOR,
            CUDNN_MINOR, CUDNN_PATCHLEVEL, RT_CUDNN_MAJOR);
#endif
}
#endif

#ifdef HAVE_CUBLAS_H
RT_CUBLAS_STATUS_VALUES(SAME_VALUE)
RT_CUBLAS_OPERATION_VALUES(SAME_VALUE)
RT_CUBLAS_MATH_VALUES(SAME_VALUE)
RT_CUBLAS_COMPUTE_VALUES(SAME_VALUE)
RT_CUBLAS_GEMM_ALGO_VALUES(SAME_VALUE)
RT_CUDA_DATA_TYPE_VALUES(SAME_VALUE)
RT_LIBRARY_PROPERTY_VALUES(SAME_VALUE)
_Static_assert(__builtin_types_compatible_p(cublasHandle_t, struct cublasContext *),
               "cublasHandle_t");
_Static_assert(__builtin_types_compatible_p(cudaStream_t, struct CUstream_st *), "cudaStream_t");
_Static_assert(__builtin_types_compatible_p(cudaDataType, enum cudaDataType_t), "cudaDataType");

static void print_cublas(void) {
    RT_CUBLAS_STATUS_VALUES(PRINT_VALUE)
    RT_CUBLAS_OPERATION_VALUES(PRINT_VALUE)
    RT_CUBLAS_MATH_VALUES(PRINT_VALUE)
    RT_CUBLAS_COMPUTE_VALUES(PRINT_VALUE)
    RT_CUBLAS_GEMM_ALGO_VALUES(PRINT_VALUE)
    RT_CUDA_DATA_TYPE_VALUES(PRINT_VALUE)
    RT_LIBRARY_PROPERTY_VALUES(PRINT_VALUE)
    PRINT_ENUM(cublasStatus_t);
    PRINT_ENUM(cublasOperation_t);
    PRINT_ENUM(cublasMath_t);
    PRINT_ENUM(cublasComputeType_t);
    PRINT_ENUM(cublasGemmAlgo_t);
    PRINT_ENUM(cudaDataType);
    PRINT_ENUM(libraryPropertyType);
    PRINT_TYPE(cublasHandle_t);
    PRINT_TYPE(cudaStream_t);
    RT_CUBLAS_FUNCS(PRINT_SYMBOL)
#ifdef DPC_DECLS_REAL
    fprintf(stderr, "cublas_v2.h: cuBLAS %d.%d.%d; dpc's declarations follow %d\n",
            CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH, RT_CUBLAS_MAJOR);
#endif
}
#endif

#ifdef HAVE_NCCL_H
RT_NCCL_RESULT_VALUES(SAME_VALUE)
RT_NCCL_RED_OP_VALUES(SAME_VALUE)
RT_NCCL_DATA_TYPE_VALUES(SAME_VALUE)
RT_NCCL_DATA_TYPE_ALIASES(SAME_VALUE)
SAME_VALUE(NCCL_UNIQUE_ID_BYTES, RT_NCCL_UNIQUE_ID_BYTES)
_Static_assert(sizeof(ncclUniqueId) == RT_NCCL_UNIQUE_ID_BYTES, "ncclUniqueId");
_Static_assert(__builtin_types_compatible_p(ncclComm_t, struct ncclComm *), "ncclComm_t");
_Static_assert(__builtin_types_compatible_p(cudaStream_t, struct CUstream_st *), "cudaStream_t");

static void print_nccl(void) {
    RT_NCCL_RESULT_VALUES(PRINT_VALUE)
    RT_NCCL_RED_OP_VALUES(PRINT_VALUE)
    RT_NCCL_DATA_TYPE_VALUES(PRINT_VALUE)
    RT_NCCL_DATA_TYPE_ALIASES(PRINT_VALUE)
    PRINT_VALUE(NCCL_UNIQUE_ID_BYTES, 0)
    PRINT_ENUM(ncclResult_t);
    PRINT_ENUM(ncclRedOp_t);
    PRINT_ENUM(ncclDataType_t);
    PRINT_TYPE(ncclComm_t);
    PRINT_TYPE(ncclUniqueId);
    PRINT_TYPE(cudaStream_t);
    RT_NCCL_FUNCS(PRINT_SYMBOL)
#ifdef DPC_DECLS_REAL
    fprintf(stderr, "nccl.h: NCCL %d.%d.%d; dpc's declarations follow %d\n", NCCL_MAJOR, NCCL_MINOR,
            NCCL_PATCH, RT_NCCL_MAJOR);
#endif
}
#endif

int main(void) {
    int n = 0;
#ifdef HAVE_CUDA_H
    printf("[cuda]\n");
    print_cuda();
    n++;
#endif
#ifdef HAVE_NVRTC_H
    printf("[nvrtc]\n");
    print_nvrtc();
    n++;
#endif
#ifdef HAVE_CUDNN_H
    printf("[cudnn]\n");
    print_cudnn();
    n++;
#endif
#ifdef HAVE_CUBLAS_H
    printf("[cublas]\n");
    print_cublas();
    n++;
#endif
#ifdef HAVE_NCCL_H
    printf("[nccl]\n");
    print_nccl();
    n++;
#endif
    return n ? 0 : 3; /* 3: no real header to check against */
}
