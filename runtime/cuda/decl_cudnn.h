/* runtime/cuda/decl_cudnn.h — the part of cuDNN's API dpc calls, declared
 * here so that building dpc needs no cudnn.h (cuDNN is often only a pip
 * wheel, nvidia-cudnn-cu13): libcudnn is dlopen'ed (loader.h). dpc calls
 * its version and error names (dprun --device cuda --info) and the legacy
 * convolution API (cudnn.c): 4-d tensor, filter and convolution
 * descriptors, the algorithm by heuristics or by measurement, and the three
 * convolutions. libcudnn.so.9 forwards those to libcudnn_cnn, which it
 * finds beside itself (its RUNPATH is $ORIGIN).
 *
 * Values, types and prototypes are cuDNN 9's cudnn_graph.h, cudnn_ops.h
 * and cudnn_cnn.h; the enum types hold only the values dpc uses (their size
 * and signedness are the real ones'). tests/cuda_decls_test.sh holds them
 * equal to the real header wherever one is found. DPC_DECL_CUDNN_REAL (the
 * check): the real cudnn.h was included first; the types are left to it.
 */
#ifndef DPC_RT_CUDA_DECL_CUDNN_H
#define DPC_RT_CUDA_DECL_CUDNN_H

#include <stddef.h>

/* The major version these declarations follow, and libcudnn's soname. */
#define RT_CUDNN_MAJOR 9

/* ---- values: X(NAME, VALUE) ---------------------------------------------- */
/* clang-format off */
#define RT_CUDNN_STATUS_VALUES(X)                                                               \
    X(CUDNN_STATUS_SUCCESS, 0) X(CUDNN_STATUS_NOT_INITIALIZED, 1001)                            \
    X(CUDNN_STATUS_BAD_PARAM, 2000) X(CUDNN_STATUS_NOT_SUPPORTED, 3000)                         \
    X(CUDNN_STATUS_INTERNAL_ERROR, 4000) X(CUDNN_STATUS_EXECUTION_FAILED, 5000)
#define RT_CUDNN_DATA_TYPE_VALUES(X) X(CUDNN_DATA_FLOAT, 0) X(CUDNN_DATA_BFLOAT16, 9)
#define RT_CUDNN_MATH_VALUES(X)                                                                 \
    X(CUDNN_DEFAULT_MATH, 0) X(CUDNN_TENSOR_OP_MATH, 1)                                         \
    X(CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, 2) X(CUDNN_FMA_MATH, 3)
#define RT_CUDNN_TENSOR_FORMAT_VALUES(X) X(CUDNN_TENSOR_NCHW, 0) X(CUDNN_TENSOR_NHWC, 1)
#define RT_CUDNN_CONV_MODE_VALUES(X) X(CUDNN_CONVOLUTION, 0) X(CUDNN_CROSS_CORRELATION, 1)
#define RT_CUDNN_DETERMINISM_VALUES(X) X(CUDNN_NON_DETERMINISTIC, 0) X(CUDNN_DETERMINISTIC, 1)
#define RT_CUDNN_FWD_ALGO_VALUES(X)                                                             \
    X(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 0) X(CUDNN_CONVOLUTION_FWD_ALGO_COUNT, 8)
#define RT_CUDNN_BWD_DATA_ALGO_VALUES(X)                                                        \
    X(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, 1) X(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, 6)
#define RT_CUDNN_BWD_FILTER_ALGO_VALUES(X)                                                      \
    X(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, 1) X(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, 7)
/* clang-format on */

/* ---- types ----------------------------------------------------------------- */
#ifndef DPC_DECL_CUDNN_REAL
#ifndef RT_DECL_ENUMERATOR
#define RT_DECL_ENUMERATOR(name, value) name = value,
#endif
typedef enum { RT_CUDNN_STATUS_VALUES(RT_DECL_ENUMERATOR) } cudnnStatus_t;
typedef enum { RT_CUDNN_DATA_TYPE_VALUES(RT_DECL_ENUMERATOR) } cudnnDataType_t;
typedef enum { RT_CUDNN_MATH_VALUES(RT_DECL_ENUMERATOR) } cudnnMathType_t;
typedef enum { RT_CUDNN_TENSOR_FORMAT_VALUES(RT_DECL_ENUMERATOR) } cudnnTensorFormat_t;
typedef enum { RT_CUDNN_CONV_MODE_VALUES(RT_DECL_ENUMERATOR) } cudnnConvolutionMode_t;
typedef enum { RT_CUDNN_DETERMINISM_VALUES(RT_DECL_ENUMERATOR) } cudnnDeterminism_t;
typedef enum { RT_CUDNN_FWD_ALGO_VALUES(RT_DECL_ENUMERATOR) } cudnnConvolutionFwdAlgo_t;
typedef enum { RT_CUDNN_BWD_DATA_ALGO_VALUES(RT_DECL_ENUMERATOR) } cudnnConvolutionBwdDataAlgo_t;
typedef enum {
    RT_CUDNN_BWD_FILTER_ALGO_VALUES(RT_DECL_ENUMERATOR)
} cudnnConvolutionBwdFilterAlgo_t;

struct cudnnContext;
typedef struct cudnnContext *cudnnHandle_t;
typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct *cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct *cudnnConvolutionDescriptor_t;
/* The runtime API's stream is the driver's CUstream (driver_types.h). */
typedef struct CUstream_st *cudaStream_t;

/* One candidate algorithm: what Find measured or Get ranked. */
#define RT_CUDNN_PERF_STRUCT(name, algo_t) \
    typedef struct name {                  \
        algo_t algo;                       \
        cudnnStatus_t status;              \
        float time;                        \
        size_t memory;                     \
        cudnnDeterminism_t determinism;    \
        cudnnMathType_t mathType;          \
        int reserved[3];                   \
    }
RT_CUDNN_PERF_STRUCT(cudnnConvolutionFwdAlgoPerfStruct, cudnnConvolutionFwdAlgo_t)
cudnnConvolutionFwdAlgoPerf_t;
RT_CUDNN_PERF_STRUCT(cudnnConvolutionBwdDataAlgoPerfStruct, cudnnConvolutionBwdDataAlgo_t)
cudnnConvolutionBwdDataAlgoPerf_t;
RT_CUDNN_PERF_STRUCT(cudnnConvolutionBwdFilterAlgoPerfStruct, cudnnConvolutionBwdFilterAlgo_t)
cudnnConvolutionBwdFilterAlgoPerf_t;
#endif

#ifndef CUDNNWINAPI
#define CUDNNWINAPI
#endif

/* ---- entry points ------------------------------------------------------------ */
size_t CUDNNWINAPI cudnnGetVersion(void);
const char *CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t status);
cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t *handle);
cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t CUDNNWINAPI cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId);

cudnnStatus_t CUDNNWINAPI cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc);
cudnnStatus_t CUDNNWINAPI cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                                     cudnnTensorFormat_t format,
                                                     cudnnDataType_t dataType, int n, int c, int h,
                                                     int w);
cudnnStatus_t CUDNNWINAPI cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc);
cudnnStatus_t CUDNNWINAPI cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc);
cudnnStatus_t CUDNNWINAPI cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
                                                     cudnnDataType_t dataType,
                                                     cudnnTensorFormat_t format, int k, int c,
                                                     int h, int w);
cudnnStatus_t CUDNNWINAPI cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc);
cudnnStatus_t CUDNNWINAPI cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc);
cudnnStatus_t CUDNNWINAPI cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc);
cudnnStatus_t CUDNNWINAPI cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc,
                                                          int pad_h, int pad_w, int u, int v,
                                                          int dilation_h, int dilation_w,
                                                          cudnnConvolutionMode_t mode,
                                                          cudnnDataType_t computeType);
cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                                      cudnnMathType_t mathType);
cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
                                                        int groupCount);

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t *perfResults);
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults);
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults);
cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void *y, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace,
    size_t workSpaceSizeInBytes);
cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void *dx,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes);
cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *y,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void *dw,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes);

cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionFwdAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y);
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx);
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnFilterDescriptor_t dwDesc, void *dw);

#endif
