/* runtime/cuda/errors.c — the names of the CUDA libraries' errors and the
 * check macros' reporting (loader.h's cuTry and kin). */
#include "runtime/cuda/loader.h"

#ifdef DPC_HAVE_CUDA

#include <stdio.h>

/* ---- names of errors -------------------------------------------------------
 * The driver's own names when it is loaded; a number before that (the
 * loader may be what failed). Strings returned are static. */

static _Thread_local char unknown_buf[48];

/* The results a machine without a working driver gives, named here because
 * then the driver cannot name them (the stub library fails cuGetErrorName
 * too). */
static const struct {
    CUresult r;
    const char *name, *what;
} known[] = {
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY",
     "the CUDA driver library is the toolkit's stub, not a driver"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "the driver is not initialised"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "the device is busy or unavailable"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "an operating system call failed"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "the driver library and the kernel module differ in version"},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "forward compatibility is not supported on this device"},
};

const char *rt_cu_error_name(CUresult r) {
    const char *s = NULL;
    if (rt_lib_loaded(RT_LIB_CUDA) && rt_cu.cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (known[i].r == r) return known[i].name;
    snprintf(unknown_buf, sizeof unknown_buf, "CUresult %d", (int)r);
    return unknown_buf;
}

const char *rt_cu_error_string(CUresult r) {
    const char *s = NULL;
    if (rt_lib_loaded(RT_LIB_CUDA) && rt_cu.cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (known[i].r == r) return known[i].what;
    return "unknown error";
}

const char *rt_cublas_status_name(cublasStatus_t st) {
    if (rt_lib_loaded(RT_LIB_CUBLAS)) return rt_cublas.cublasGetStatusName(st);
    snprintf(unknown_buf, sizeof unknown_buf, "cublasStatus_t %d", (int)st);
    return unknown_buf;
}

const char *rt_nccl_result_string(ncclResult_t r) {
    if (rt_lib_loaded(RT_LIB_NCCL)) return rt_nccl.ncclGetErrorString(r);
    snprintf(unknown_buf, sizeof unknown_buf, "ncclResult_t %d", (int)r);
    return unknown_buf;
}

const char *rt_cudnn_status_string(cudnnStatus_t r) {
    if (rt_lib_loaded(RT_LIB_CUDNN)) return rt_cudnn.cudnnGetErrorString(r);
    snprintf(unknown_buf, sizeof unknown_buf, "cudnnStatus_t %d", (int)r);
    return unknown_buf;
}

const char *rt_nvrtc_result_string(nvrtcResult r) {
    if (rt_lib_loaded(RT_LIB_NVRTC)) return rt_nvrtc.nvrtcGetErrorString(r);
    snprintf(unknown_buf, sizeof unknown_buf, "nvrtcResult %d", (int)r);
    return unknown_buf;
}

/* ---- checks ---------------------------------------------------------------- */

static void cu_message(CUresult r, const char *call, const char *file, int line, char *out,
                       size_t n) {
    snprintf(out, n, "%s:%d: %s: %s: %s", file, line, call, rt_cu_error_name(r),
             rt_cu_error_string(r));
}

static void cublas_message(cublasStatus_t s, const char *call, const char *file, int line,
                           char *out, size_t n) {
    const char *what = rt_lib_loaded(RT_LIB_CUBLAS) ? rt_cublas.cublasGetStatusString(s) : "";
    snprintf(out, n, "%s:%d: %s: %s%s%s", file, line, call, rt_cublas_status_name(s),
             *what ? ": " : "", what);
}

static void nccl_message(ncclResult_t r, const char *call, const char *file, int line, char *out,
                         size_t n) {
    snprintf(out, n, "%s:%d: %s: NCCL error %d: %s", file, line, call, (int)r,
             rt_nccl_result_string(r));
}

static void cudnn_message(cudnnStatus_t r, const char *call, const char *file, int line, char *out,
                          size_t n) {
    snprintf(out, n, "%s:%d: %s: cuDNN status %d: %s", file, line, call, (int)r,
             rt_cudnn_status_string(r));
}

static void nvrtc_message(nvrtcResult r, const char *call, const char *file, int line, char *out,
                          size_t n) {
    snprintf(out, n, "%s:%d: %s: %s", file, line, call, rt_nvrtc_result_string(r));
}

#define RT_CHECK_FNS(kind, type, ok)                                                      \
    int rt_##kind##_try_(type r, const char *call, const char *file, int line, char *err, \
                         size_t errlen) {                                                 \
        if (r == ok) return 0;                                                            \
        if (errlen) kind##_message(r, call, file, line, err, errlen);                     \
        return -1;                                                                        \
    }

RT_CHECK_FNS(cu, CUresult, CUDA_SUCCESS)
RT_CHECK_FNS(cublas, cublasStatus_t, CUBLAS_STATUS_SUCCESS)
RT_CHECK_FNS(nccl, ncclResult_t, ncclSuccess)
RT_CHECK_FNS(nvrtc, nvrtcResult, NVRTC_SUCCESS)
RT_CHECK_FNS(cudnn, cudnnStatus_t, CUDNN_STATUS_SUCCESS)

#else
/* Without the toolkit there is nothing to name (C forbids an empty file). */
typedef int rt_cuda_errors_unused;
#endif /* DPC_HAVE_CUDA */
