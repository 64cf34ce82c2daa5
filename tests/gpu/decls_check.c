/* tests/gpu/decls_check.c — the tree's cuBLAS and NCCL declarations
 * (runtime/cuda/decl_cublas.h, decl_nccl.h) against the real headers.
 * tests/cuda_decls_test.sh builds it twice with the same include path:
 *
 *   -DDPC_DECLS_REAL  the real cublas_v2.h / nccl.h first (each where
 *                     __has_include finds it), then the tree's headers in
 *                     their check mode: every value the tree lists must
 *                     equal the real one (_Static_assert) and every
 *                     prototype must agree with the real one (a conflicting
 *                     redeclaration does not compile);
 *   (neither)         the tree's headers alone.
 *
 * Both builds print, for each library whose real header is found, its
 * values and each type's size, alignment and signedness; the test wants
 * the two outputs equal. The real build adds the headers' own version on
 * stderr. Nothing is called: no library is linked. */
#include <cuda.h>
#include <stdalign.h>
#include <stdio.h>

#if __has_include(<cublas_v2.h>)
#define HAVE_CUBLAS_H 1
#endif
#if __has_include(<nccl.h>)
#define HAVE_NCCL_H 1
#endif

#ifdef DPC_DECLS_REAL
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

#ifdef HAVE_CUBLAS_H
#include "runtime/cuda/decl_cublas.h"
#endif
#ifdef HAVE_NCCL_H
#include "runtime/cuda/decl_nccl.h"
#endif

#define PRINT_VALUE(name, value) printf("%s %lld\n", #name, (long long)(name));
#define PRINT_ENUM(T)                                                              \
    printf("%s size %zu align %zu signed %d\n", #T, sizeof(T), (size_t)alignof(T), \
           (long long)(T)-1 < 0LL)
#define PRINT_TYPE(T) printf("%s size %zu align %zu\n", #T, sizeof(T), (size_t)alignof(T))

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
_Static_assert(__builtin_types_compatible_p(cudaStream_t, CUstream), "cudaStream_t");
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
_Static_assert(__builtin_types_compatible_p(cudaStream_t, CUstream), "cudaStream_t");

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
#ifdef DPC_DECLS_REAL
    fprintf(stderr, "nccl.h: NCCL %d.%d.%d; dpc's declarations follow %d\n", NCCL_MAJOR, NCCL_MINOR,
            NCCL_PATCH, RT_NCCL_MAJOR);
#endif
}
#endif

int main(void) {
    int n = 0;
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
