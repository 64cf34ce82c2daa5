/* runtime/cuda/decl_nvrtc.h — the part of NVRTC's API dpc calls, declared
 * here so that building dpc needs no nvrtc.h: libnvrtc is dlopen'ed like
 * the driver (loader.h), so a build with the cuda backend starts on a
 * machine with only the driver and the pip wheel nvidia-cuda-nvrtc.
 *
 * Values, types and prototypes are NVRTC 13's nvrtc.h; the enum holds the
 * values dpc uses (its size and signedness are the real one's).
 * tests/cuda_decls_test.sh compiles tests/gpu/decls_check.c against the
 * real nvrtc.h wherever it is found and fails on any value, size or
 * prototype that differs.
 *
 * DPC_DECL_NVRTC_REAL (the check; also whenever nvrtc.h came first): the
 * real nvrtc.h was included first; the value list and the prototypes are
 * read, the types are left to the real header.
 */
#ifndef DPC_RT_CUDA_DECL_NVRTC_H
#define DPC_RT_CUDA_DECL_NVRTC_H

#include <stddef.h>

#if defined(__NVRTC_H__) && !defined(DPC_DECL_NVRTC_REAL)
#define DPC_DECL_NVRTC_REAL 1
#endif

/* The major version these declarations follow, and libnvrtc's soname. */
#define RT_NVRTC_MAJOR 13

/* ---- values: X(NAME, VALUE) ---------------------------------------------- */
/* clang-format off */
#define RT_NVRTC_RESULT_VALUES(X)                                                               \
    X(NVRTC_SUCCESS, 0) X(NVRTC_ERROR_OUT_OF_MEMORY, 1)                                         \
    X(NVRTC_ERROR_PROGRAM_CREATION_FAILURE, 2) X(NVRTC_ERROR_INVALID_INPUT, 3)                  \
    X(NVRTC_ERROR_INVALID_PROGRAM, 4) X(NVRTC_ERROR_INVALID_OPTION, 5)                          \
    X(NVRTC_ERROR_COMPILATION, 6) X(NVRTC_ERROR_BUILTIN_OPERATION_FAILURE, 7)                   \
    X(NVRTC_ERROR_INTERNAL_ERROR, 11)
/* clang-format on */

/* ---- types ----------------------------------------------------------------- */
#ifndef DPC_DECL_NVRTC_REAL
#ifndef RT_DECL_ENUMERATOR
#define RT_DECL_ENUMERATOR(name, value) name = value,
#endif
typedef enum { RT_NVRTC_RESULT_VALUES(RT_DECL_ENUMERATOR) } nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
#endif

/* ---- entry points ------------------------------------------------------------ */
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int *major, int *minor);
nvrtcResult nvrtcGetNumSupportedArchs(int *numArchs);
nvrtcResult nvrtcGetSupportedArchs(int *supportedArchs);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char *const *headers,
                               const char *const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);

#endif
