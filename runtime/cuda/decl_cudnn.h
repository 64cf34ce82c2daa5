/* runtime/cuda/decl_cudnn.h — the part of cuDNN's API dpc calls, declared
 * here so that building dpc needs no cudnn.h (cuDNN is often only a pip
 * wheel, nvidia-cudnn-cu13): libcudnn is dlopen'ed (loader.h). For now
 * only its version and error names (dprun --device cuda --info).
 *
 * Values, types and prototypes are cuDNN 9's cudnn_graph.h.
 * tests/cuda_decls_test.sh holds them equal to the real header wherever
 * one is found. DPC_DECL_CUDNN_REAL (the check): the real cudnn.h was
 * included first; the types are left to it.
 */
#ifndef DPC_RT_CUDA_DECL_CUDNN_H
#define DPC_RT_CUDA_DECL_CUDNN_H

#include <stddef.h>

/* The major version these declarations follow, and libcudnn's soname. */
#define RT_CUDNN_MAJOR 9

/* ---- values: X(NAME, VALUE) ---------------------------------------------- */
/* clang-format off */
#define RT_CUDNN_STATUS_VALUES(X)                                                               \
    X(CUDNN_STATUS_SUCCESS, 0) X(CUDNN_STATUS_NOT_INITIALIZED, 1001)
/* clang-format on */

/* ---- types ----------------------------------------------------------------- */
#ifndef DPC_DECL_CUDNN_REAL
#ifndef RT_DECL_ENUMERATOR
#define RT_DECL_ENUMERATOR(name, value) name = value,
#endif
typedef enum { RT_CUDNN_STATUS_VALUES(RT_DECL_ENUMERATOR) } cudnnStatus_t;
#endif

#ifndef CUDNNWINAPI
#define CUDNNWINAPI
#endif

/* ---- entry points ------------------------------------------------------------ */
size_t CUDNNWINAPI cudnnGetVersion(void);
const char *CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t status);

#endif
