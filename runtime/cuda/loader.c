/* runtime/cuda/loader.c — dlopen the CUDA driver, cuBLAS and NCCL; the
 * check macros' reporting. See loader.h. */
#include "runtime/cuda/loader.h"
#include "ir/err.h"

#ifdef DPC_HAVE_CUDA

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rt_cu_api rt_cu;
rt_cublas_api rt_cublas;
rt_nccl_api rt_nccl;

#define RT_STR_(x) #x
#define RT_STR(x)  RT_STR_(x)

/* One library: its handle once every symbol resolved. */
typedef struct {
    pthread_mutex_t mu;
    void *handle;
} lib_state;

static lib_state cu_lib = {PTHREAD_MUTEX_INITIALIZER, NULL};
static lib_state cublas_lib = {PTHREAD_MUTEX_INITIALIZER, NULL};
static lib_state nccl_lib = {PTHREAD_MUTEX_INITIALIZER, NULL};

static const char *lib_name(const char *env, const char *soname) {
    const char *v = getenv(env);
    return v && *v ? v : soname;
}

const char *rt_cu_library(void) { return lib_name("DPC_LIBCUDA", "libcuda.so.1"); }
/* The sonames of the major versions runtime/cuda/decl_*.h declare. */
const char *rt_cublas_library(void) {
    return lib_name("DPC_LIBCUBLAS", "libcublas.so." RT_STR(RT_CUBLAS_MAJOR));
}
const char *rt_nccl_library(void) {
    return lib_name("DPC_LIBNCCL", "libnccl.so." RT_STR(RT_NCCL_MAJOR));
}

/* Resolves one symbol into *slot; on failure names it in err. dlsym returns
 * void *, and POSIX guarantees it converts to a function pointer: the
 * memcpy says so without a cast between object and function pointers. */
static int resolve(void *h, const char *lib, const char *sym, void *slot, size_t size, char *err,
                   size_t errlen) {
    dlerror();
    void *p = dlsym(h, sym);
    if (!p) {
        const char *why = dlerror();
        return ir_fail(err, errlen, "%s has no %s (%s): a library older than this build's toolkit?",
                       lib, sym, why ? why : "null symbol");
    }
    memcpy(slot, &p, size);
    return 0;
}

#define RT_RESOLVE(name) \
    if (!rc) rc = resolve(h, path, RT_STR(name), &tmp.name, sizeof tmp.name, err, errlen);

/* Each loader: under its mutex, dlopen once, resolve every entry point into
 * a local table and publish it only when all resolved (a half-filled table
 * is never visible). RTLD_NODELETE + never dlclose: the driver and NCCL
 * start threads that must not lose their code. */
#define RT_DEFINE_LOADER(fn, state, api_t, table, list, library)           \
    int fn(char *err, size_t errlen) {                                     \
        pthread_mutex_lock(&state.mu);                                     \
        int rc = 0;                                                        \
        if (!state.handle) {                                               \
            const char *path = library();                                  \
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE); \
            if (!h) {                                                      \
                const char *why = dlerror();                               \
                ir_fail(err, errlen, "%s", why ? why : path);              \
                rc = -1;                                                   \
            } else {                                                       \
                api_t tmp;                                                 \
                memset(&tmp, 0, sizeof tmp);                               \
                list(RT_RESOLVE) if (!rc) {                                \
                    table = tmp;                                           \
                    state.handle = h;                                      \
                }                                                          \
                else {                                                     \
                    dlclose(h);                                            \
                }                                                          \
            }                                                              \
        }                                                                  \
        pthread_mutex_unlock(&state.mu);                                   \
        return rc;                                                         \
    }

RT_DEFINE_LOADER(rt_cu_load, cu_lib, rt_cu_api, rt_cu, RT_CU_FUNCS, rt_cu_library)
RT_DEFINE_LOADER(rt_cublas_load, cublas_lib, rt_cublas_api, rt_cublas, RT_CUBLAS_FUNCS,
                 rt_cublas_library)
RT_DEFINE_LOADER(rt_nccl_load, nccl_lib, rt_nccl_api, rt_nccl, RT_NCCL_FUNCS, rt_nccl_library)

/* ---- names of errors -------------------------------------------------------
 * The driver's own names when it is loaded; a number before that (the
 * loader may be what failed). Strings returned are static. */

static int loaded(lib_state *s) {
    pthread_mutex_lock(&s->mu);
    int ok = s->handle != NULL;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

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
    if (loaded(&cu_lib) && rt_cu.cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (known[i].r == r) return known[i].name;
    snprintf(unknown_buf, sizeof unknown_buf, "CUresult %d", (int)r);
    return unknown_buf;
}

const char *rt_cu_error_string(CUresult r) {
    const char *s = NULL;
    if (loaded(&cu_lib) && rt_cu.cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (known[i].r == r) return known[i].what;
    return "unknown error";
}

const char *rt_cublas_status_name(cublasStatus_t st) {
    if (loaded(&cublas_lib)) return rt_cublas.cublasGetStatusName(st);
    snprintf(unknown_buf, sizeof unknown_buf, "cublasStatus_t %d", (int)st);
    return unknown_buf;
}

const char *rt_nccl_result_string(ncclResult_t r) {
    if (loaded(&nccl_lib)) return rt_nccl.ncclGetErrorString(r);
    snprintf(unknown_buf, sizeof unknown_buf, "ncclResult_t %d", (int)r);
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
    const char *what = loaded(&cublas_lib) ? rt_cublas.cublasGetStatusString(s) : "";
    snprintf(out, n, "%s:%d: %s: %s%s%s", file, line, call, rt_cublas_status_name(s),
             *what ? ": " : "", what);
}

static void nccl_message(ncclResult_t r, const char *call, const char *file, int line, char *out,
                         size_t n) {
    snprintf(out, n, "%s:%d: %s: NCCL error %d: %s", file, line, call, (int)r,
             rt_nccl_result_string(r));
}

static void nvrtc_message(nvrtcResult r, const char *call, const char *file, int line, char *out,
                          size_t n) {
    snprintf(out, n, "%s:%d: %s: %s", file, line, call, nvrtcGetErrorString(r));
}

/* Exit, not abort: a device error is the environment's, not a bug to core
 * dump; the message already names the place. */
static void die(const char *msg) {
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
    exit(EXIT_FAILURE);
}

#define RT_CHECK_FNS(kind, type, ok)                                                      \
    void rt_##kind##_check_(type r, const char *call, const char *file, int line) {       \
        if (r == ok) return;                                                              \
        char msg[1024];                                                                   \
        kind##_message(r, call, file, line, msg, sizeof msg);                             \
        die(msg);                                                                         \
    }                                                                                     \
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

#else
/* Without the toolkit there is nothing to load (C forbids an empty file). */
typedef int rt_cuda_loader_unused;
#endif /* DPC_HAVE_CUDA */
