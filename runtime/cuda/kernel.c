/* runtime/cuda/kernel.c — kernels of the cuda backend: NVRTC images
 * (nvrtc.h) loaded with cuModuleLoadDataEx, their entry points, and
 * launches on the compute stream (cuda.h). */
#ifdef DPC_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"
#include "runtime/cuda/internal.h"
#include "runtime/log.h"

#define BLOCK         256 /* threads per block: a multiple of the warp, 8 blocks fill an SM */
#define BLOCKS_PER_SM 16  /* grid cap: two full waves, the rest grid-stride */

rt_module *cuda_compile(rt_backend *be, const char *source, char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    int debug = rt_debug_level();
    if (debug >= 2) rt_log(RT_LOG_INFO, "cuda: generated source:\n%s", source);
    rt_cuda_image img;
    if (rt_cuda_compile_cached(source, c->sm, &img, err, errlen)) return NULL; /* the caller says */
    if (use(c, err, errlen)) {
        rt_cuda_image_free(&img);
        return NULL;
    }
    /* The JIT's own log says why PTX did not load (a driver older than
     * NVRTC, say); a cubin needs none. */
    char log[4096] = "";
    CUjit_option opt[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *val[] = {log, (void *)(uintptr_t)sizeof log};
    CUmodule mod = NULL;
    CUresult r = rt_cu.cuModuleLoadDataEx(&mod, img.data, 2, opt, val);
    if (r != CUDA_SUCCESS) {
        int drv = 0;
        rt_cu.cuDriverGetVersion(&drv);
        base_fail(err, errlen, "cannot load %s (%s) on %s: %s: %s%s%s%s", img.path, img.target,
                  c->name, rt_cu_error_name(r), rt_cu_error_string(r),
                  r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || r == CUDA_ERROR_NO_BINARY_FOR_GPU
                      ? " (is the driver older than NVRTC? driver CUDA "
                      : "",
                  r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || r == CUDA_ERROR_NO_BINARY_FOR_GPU
                      ? (drv >= 13000 ? "13+)" : "<13)")
                      : "",
                  *log ? log : "");
        rt_cuda_image_free(&img);
        return NULL;
    }
    if (debug >= 1)
        rt_log(RT_LOG_INFO, "cuda: module %s (%s, %s)", img.path, img.target,
               img.cache_hit ? "cache hit" : "compiled");
    rt_module *m = calloc(1, sizeof *m);
    RT_CHECK_ALLOC(m);
    m->mod = mod;
    m->path = img.path;
    img.path = NULL;
    rt_cuda_image_free(&img);
    return m;
}

void cuda_module_free(rt_backend *be, rt_module *m) { cuda_module_release(impl_of(be), m); }

void cuda_module_release(cuda_impl *c, rt_module *m) {
    if (!m) return;
    use_anyway(c);
    while (m->kernels) {
        struct rt_kernel *k = m->kernels;
        m->kernels = k->next;
        free(k);
    }
    if (!c->failed) {
        char err[1024];
        CUresult r = rt_cu.cuStreamSynchronize(c->compute); /* no queued launch of its code */
        if (r == CUDA_SUCCESS) r = rt_cu.cuModuleUnload(m->mod);
        /* Teardown: no caller to tell, so said here, once (the device is
         * failed from now on). */
        if (r != CUDA_SUCCESS && cuda_failure(c, r, "cuModuleUnload", err, sizeof err))
            rt_log(RT_LOG_ERROR, "%s", err);
    } else {
        /* After a failure (reported) the device may be lost: no wait, and
         * the unload's error is no news; it still frees the host side. */
        rt_cu.cuModuleUnload(m->mod);
    }
    free(m->path);
    free(m);
}

rt_kernel *cuda_kernel(rt_backend *be, rt_module *m, const char *name, int nargs, char *err,
                       size_t errlen) {
    if (use(impl_of(be), err, errlen)) return NULL;
    if (nargs < 0 || nargs > CG_MAX_ARGS) {
        base_fail(err, errlen, "kernel %s: %d buffers (at most %d)", name, nargs, CG_MAX_ARGS);
        return NULL;
    }
    CUfunction fn = NULL;
    CUresult r = rt_cu.cuModuleGetFunction(&fn, m->mod, name);
    if (r != CUDA_SUCCESS) {
        base_fail(err, errlen, "kernel %s not in %s: %s", name, m->path ? m->path : "the module",
                  rt_cu_error_name(r));
        return NULL;
    }
    rt_kernel *k = calloc(1, sizeof *k);
    RT_CHECK_ALLOC(k);
    k->fn = fn;
    k->nargs = nargs;
    k->next = m->kernels;
    m->kernels = k;
    return k;
}

/* Blocks for count iterations: enough to cover them, at most
 * BLOCKS_PER_SM per multiprocessor (the body loops grid-stride, so a
 * smaller grid is correct and saves block start-up on huge counts). */
static unsigned grid_for(const cuda_impl *c, int64_t count) {
    int64_t blocks = (count + BLOCK - 1) / BLOCK;
    int64_t cap = (int64_t)c->nsm * BLOCKS_PER_SM;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

int cuda_launch(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                const cg_launch *geometry, char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    if (nargs != k->nargs) {
        return base_fail(err, errlen, "kernel launched with %d buffers, takes %d", nargs, k->nargs);
    }
    if (count <= 0) return 0;
    if (use(c, err, errlen)) return -1;
    /* The ABI (format/program.h): one device pointer per buffer, then the count;
     * cuLaunchKernel takes the address of each argument's value. */
    CUdeviceptr ptr[CG_MAX_ARGS];
    void *params[CG_MAX_ARGS + 1];
    long long n = (long long)count;
    for (int j = 0; j < nargs; j++) {
        ptr[j] = dptr(args[j]);
        params[j] = &ptr[j];
    }
    params[nargs] = &n;
    /* The program's geometry (codegen decided it from the kernel's shape);
     * without one, one thread per iteration. */
    int recorded = geometry && geometry->grid && geometry->block;
    unsigned grid = recorded ? geometry->grid : grid_for(c, count);
    unsigned block = recorded ? geometry->block : BLOCK;
    unsigned shared = recorded ? geometry->shared : 0;
    if (cuTry(
            rt_cu.cuLaunchKernel(k->fn, grid, 1, 1, block, 1, 1, shared, c->compute, params, NULL),
            err, errlen))
        return -1;
    if (c->capturing)
        c->stats.captured_launches++;
    else
        c->stats.launches++;
    return 0;
}

#endif
