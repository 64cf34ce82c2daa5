/* runtime/cuda/decl_cublas.h — the part of cuBLAS's API dpc calls, declared
 * here so that building dpc needs no cuBLAS header: the library itself is
 * dlopen'ed (loader.h), and many machines (a driver plus pip wheels, a
 * toolkit without its math libraries) have no cublas_v2.h.
 *
 * Values, types and prototypes are those of cuBLAS 13's cublas_api.h and
 * cublas_v2.h, and of the CUDA runtime's library_types.h and driver_types.h
 * for cudaDataType, libraryPropertyType and cudaStream_t. The enum types
 * hold only the values dpc uses (their size and signedness are the real
 * ones'). tests/cuda_decls_test.sh compiles tests/cuda_decls/check.c
 * against the real headers wherever they are found and fails on any value,
 * size or prototype that differs.
 *
 * DPC_DECL_CUBLAS_REAL (the check only): the real headers were included
 * first; then the value lists and the prototypes are read, so that a
 * prototype that differs from the real one fails to compile, and the types
 * are left to the real headers.
 */
#ifndef DPC_RT_CUDA_DECL_CUBLAS_H
#define DPC_RT_CUDA_DECL_CUBLAS_H

#include <stddef.h>

/* The major version these declarations follow, and libcublas's soname. */
#define RT_CUBLAS_MAJOR 13

/* ---- values: X(NAME, VALUE) ---------------------------------------------- */
/* clang-format off */
#define RT_CUBLAS_STATUS_VALUES(X)                                                              \
    X(CUBLAS_STATUS_SUCCESS, 0) X(CUBLAS_STATUS_NOT_INITIALIZED, 1)                             \
    X(CUBLAS_STATUS_ALLOC_FAILED, 3) X(CUBLAS_STATUS_INVALID_VALUE, 7)                          \
    X(CUBLAS_STATUS_ARCH_MISMATCH, 8) X(CUBLAS_STATUS_MAPPING_ERROR, 11)                        \
    X(CUBLAS_STATUS_EXECUTION_FAILED, 13) X(CUBLAS_STATUS_INTERNAL_ERROR, 14)                   \
    X(CUBLAS_STATUS_NOT_SUPPORTED, 15) X(CUBLAS_STATUS_LICENSE_ERROR, 16)
#define RT_CUBLAS_OPERATION_VALUES(X) X(CUBLAS_OP_N, 0) X(CUBLAS_OP_T, 1) X(CUBLAS_OP_C, 2)
#define RT_CUBLAS_MATH_VALUES(X)                                                                \
    X(CUBLAS_DEFAULT_MATH, 0) X(CUBLAS_PEDANTIC_MATH, 2) X(CUBLAS_TF32_TENSOR_OP_MATH, 3)       \
    X(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, 16)
#define RT_CUBLAS_COMPUTE_VALUES(X)                                                             \
    X(CUBLAS_COMPUTE_32F, 68) X(CUBLAS_COMPUTE_32F_PEDANTIC, 69)                                \
    X(CUBLAS_COMPUTE_32F_FAST_16BF, 75) X(CUBLAS_COMPUTE_32F_FAST_TF32, 77)
#define RT_CUBLAS_GEMM_ALGO_VALUES(X) X(CUBLAS_GEMM_DEFAULT, -1) X(CUBLAS_GEMM_DEFAULT_TENSOR_OP, 99)
#define RT_CUDA_DATA_TYPE_VALUES(X) X(CUDA_R_32F, 0) X(CUDA_R_16F, 2) X(CUDA_R_16BF, 14)
#define RT_LIBRARY_PROPERTY_VALUES(X) X(MAJOR_VERSION, 0) X(MINOR_VERSION, 1) X(PATCH_LEVEL, 2)
/* clang-format on */

/* ---- types ----------------------------------------------------------------- */
#ifndef DPC_DECL_CUBLAS_REAL
#ifndef RT_DECL_ENUMERATOR
#define RT_DECL_ENUMERATOR(name, value) name = value,
#endif

typedef enum { RT_CUBLAS_STATUS_VALUES(RT_DECL_ENUMERATOR) } cublasStatus_t;
typedef enum { RT_CUBLAS_OPERATION_VALUES(RT_DECL_ENUMERATOR) } cublasOperation_t;
typedef enum { RT_CUBLAS_MATH_VALUES(RT_DECL_ENUMERATOR) } cublasMath_t;
typedef enum { RT_CUBLAS_COMPUTE_VALUES(RT_DECL_ENUMERATOR) } cublasComputeType_t;
typedef enum { RT_CUBLAS_GEMM_ALGO_VALUES(RT_DECL_ENUMERATOR) } cublasGemmAlgo_t;
typedef enum cudaDataType_t { RT_CUDA_DATA_TYPE_VALUES(RT_DECL_ENUMERATOR) } cudaDataType;
typedef enum cudaDataType_t cudaDataType_t;
typedef enum libraryPropertyType_t {
    RT_LIBRARY_PROPERTY_VALUES(RT_DECL_ENUMERATOR)
} libraryPropertyType;
typedef enum libraryPropertyType_t libraryPropertyType_t;

struct cublasContext;
typedef struct cublasContext *cublasHandle_t;
/* The runtime API's stream is the driver's CUstream (driver_types.h). */
typedef struct CUstream_st *cudaStream_t;
#endif

/* ---- entry points -----------------------------------------------------------
 * cublas_v2.h's names for the versioned symbols: the loader asks for the
 * symbol each name expands to. */
#ifndef CUBLASWINAPI
#define CUBLASWINAPI
#endif
#define cublasCreate       cublasCreate_v2
#define cublasDestroy      cublasDestroy_v2
#define cublasSetWorkspace cublasSetWorkspace_v2
#define cublasSetStream    cublasSetStream_v2

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId);
cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                                  size_t workspaceSizeInBytes);
cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t CUBLASWINAPI cublasGetProperty(libraryPropertyType type, int *value);
const char *CUBLASWINAPI cublasGetStatusName(cublasStatus_t status);
const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t status);
cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const float *alpha, const float *A, int lda, long long int strideA, const float *B, int ldb,
    long long int strideB, const float *beta, float *C, int ldc, long long int strideC,
    int batchCount);
cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA,
    const void *B, cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo);

#endif
