/* runtime/cuda/decl_nccl.h — the part of NCCL's API dpc calls, declared
 * here so that building dpc needs no nccl.h: NCCL is not part of the CUDA
 * toolkit (many machines have it only as the pip wheel nvidia-nccl-cu13, or
 * not at all), and libnccl is dlopen'ed (loader.h).
 *
 * Values, types and prototypes are NCCL 2's nccl.h (2.28 when written),
 * and cudaStream_t the CUDA runtime's (driver_types.h). The enum types hold
 * the values dpc uses and keep the real ones' size. tests/cuda_decls_test.sh
 * compiles tests/cuda_decls/check.c against the real nccl.h wherever one is
 * found and fails on any value, size or prototype that differs.
 *
 * DPC_DECL_NCCL_REAL (the check only): the real nccl.h was included first;
 * then the value lists and the prototypes are read, so that a prototype
 * that differs from the real one fails to compile, and the types are left
 * to the real header.
 */
#ifndef DPC_RT_CUDA_DECL_NCCL_H
#define DPC_RT_CUDA_DECL_NCCL_H

#include <stddef.h>

/* The major version these declarations follow, and libnccl's soname. */
#define RT_NCCL_MAJOR           2
/* sizeof(ncclUniqueId): the id rank 0 sends the other processes. */
#define RT_NCCL_UNIQUE_ID_BYTES 128

/* ---- values: X(NAME, VALUE) ---------------------------------------------- */
/* clang-format off */
#define RT_NCCL_RESULT_VALUES(X)                                                                \
    X(ncclSuccess, 0) X(ncclUnhandledCudaError, 1) X(ncclSystemError, 2)                        \
    X(ncclInternalError, 3) X(ncclInvalidArgument, 4) X(ncclInvalidUsage, 5)                    \
    X(ncclRemoteError, 6) X(ncclInProgress, 7)
#define RT_NCCL_RED_OP_VALUES(X)                                                                \
    X(ncclSum, 0) X(ncclProd, 1) X(ncclMax, 2) X(ncclMin, 3) X(ncclAvg, 4)                     \
    X(ncclMaxRedOp, 0x7fffffff)
#define RT_NCCL_DATA_TYPE_VALUES(X)                                                             \
    X(ncclInt8, 0) X(ncclUint8, 1) X(ncclInt32, 2) X(ncclUint32, 3) X(ncclInt64, 4)             \
    X(ncclUint64, 5) X(ncclFloat16, 6) X(ncclFloat32, 7) X(ncclFloat64, 8) X(ncclBfloat16, 9)
/* Other names of the same values. */
#define RT_NCCL_DATA_TYPE_ALIASES(X)                                                            \
    X(ncclChar, 0) X(ncclInt, 2) X(ncclHalf, 6) X(ncclFloat, 7) X(ncclDouble, 8)
/* clang-format on */

/* ---- types ----------------------------------------------------------------- */
#ifndef DPC_DECL_NCCL_REAL
#ifndef RT_DECL_ENUMERATOR
#define RT_DECL_ENUMERATOR(name, value) name = value,
#endif

typedef enum { RT_NCCL_RESULT_VALUES(RT_DECL_ENUMERATOR) } ncclResult_t;
/* ncclMaxRedOp, nccl.h's largest value, keeps the type int-sized
 * (dynamic ops, from ncclRedOpCreate*, lie above ncclAvg). */
typedef enum { RT_NCCL_RED_OP_VALUES(RT_DECL_ENUMERATOR) } ncclRedOp_t;
typedef enum {
    RT_NCCL_DATA_TYPE_VALUES(RT_DECL_ENUMERATOR) RT_NCCL_DATA_TYPE_ALIASES(RT_DECL_ENUMERATOR)
} ncclDataType_t;

typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[RT_NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
#define NCCL_UNIQUE_ID_BYTES RT_NCCL_UNIQUE_ID_BYTES
/* The runtime API's stream is the driver's CUstream (driver_types.h). */
typedef struct CUstream_st *cudaStream_t;
#endif

/* ---- entry points ------------------------------------------------------------ */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
const char *ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#endif
