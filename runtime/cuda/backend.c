/* runtime/cuda/backend.c — the cuda backend's devices, memory and copies,
 * set-up and teardown, and its rt_backend table (cuda.h); kernels, GEMMs,
 * graphs and NCCL are the room's other files (internal.h). libcuda,
 * libcublas and libnccl are dlopen'ed (loader.h), so none of this needs a
 * driver to link. */
#ifdef DPC_HAVE_CUDA

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"
#include "runtime/comm/comm.h"
#include "runtime/cuda/internal.h"

_Static_assert(sizeof(CUdeviceptr) == sizeof(void *), "device pointers travel as void *");

int rt_cuda_compiled(void) { return 1; }

/* The calls whose effect a graph cannot hold (see cuda.h). */
static void not_while_capturing(const cuda_impl *c, const char *what, const char *file, int line) {
    if (!c->capturing) return;
    fprintf(stderr, "%s:%d: cuda: %s while a CUDA graph is being captured\n", file, line, what);
    exit(EXIT_FAILURE);
}
#define NOT_CAPTURING(c, what) not_while_capturing(c, what, __FILE__, __LINE__)

/* ---- devices ------------------------------------------------------------------- */

/* Loads the driver and initialises it; -1 + why. */
static int driver_up(char *why, size_t whylen) {
    char e[512];
    if (rt_cu_load(e, sizeof e)) {
        snprintf(why, whylen, "no CUDA driver: %s", e);
        return -1;
    }
    CUresult r = rt_cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        snprintf(why, whylen, "cuInit: %s: %s", rt_cu_error_name(r), rt_cu_error_string(r));
        return -1;
    }
    return 0;
}

int rt_cuda_device_count(char *why, size_t whylen) {
    if (driver_up(why, whylen)) return 0;
    int n = 0;
    CUresult r = rt_cu.cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS) {
        snprintf(why, whylen, "cuDeviceGetCount: %s: %s", rt_cu_error_name(r),
                 rt_cu_error_string(r));
        return 0;
    }
    if (n == 0) snprintf(why, whylen, "the CUDA driver sees no device");
    return n;
}

/* ---- memory ---------------------------------------------------------------------- */

static void *cuda_alloc(rt_backend *be, size_t bytes) {
    cuda_impl *c = impl_of(be);
    NOT_CAPTURING(c, "alloc");
    use(c);
    /* 256 bytes: what cuMemAlloc aligns to anyway; never 0 (device.h). */
    size_t n = bytes ? (bytes + 255) / 256 * 256 : 256;
    CUdeviceptr p = 0;
    CUresult r = rt_cu.cuMemAlloc(&p, n);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        size_t fr = 0, total = 0;
        rt_cu.cuMemGetInfo(&fr, &total);
        fprintf(stderr,
                "%s:%d: cuda: out of device memory: %zu bytes asked, %zu of %zu free on %s\n",
                __FILE__, __LINE__, n, fr, total, c->name);
        exit(EXIT_FAILURE);
    }
    cuCheck(r);
    /* Zero-filled as device.h promises; on the compute stream, so every
     * later use (all on that stream, or ordered after it) sees zeros. */
    cuCheck(rt_cu.cuMemsetD8Async(p, 0, n, c->compute));
    return (void *)(uintptr_t)p;
}

static void cuda_free(rt_backend *be, void *ptr) {
    if (!ptr) return;
    cuda_impl *c = impl_of(be);
    NOT_CAPTURING(c, "free");
    use(c);
    /* Queued work may still use the buffer; cuMemFree does not promise to
     * wait for other streams. Frees happen at teardown, so this costs nothing. */
    cuCheck(rt_cu.cuStreamSynchronize(c->compute));
    cuCheck(rt_cu.cuStreamSynchronize(c->comm));
    cuCheck(rt_cu.cuMemFree(dptr(ptr)));
}

/* Host to device through the next pinned staging buffer: the caller's
 * memory is free when this returns, the transfer is a true asynchronous
 * DMA that overlaps queued kernels (a copy from pageable memory is
 * staged synchronously by the driver instead). */
static void cuda_copy_in(rt_backend *be, void *dst, const void *host, size_t bytes) {
    if (!bytes) return;
    cuda_impl *c = impl_of(be);
    NOT_CAPTURING(c, "copy_in");
    use(c);
    stage *s = &c->st[c->next_stage];
    c->next_stage = (c->next_stage + 1) % STAGES;
    if (s->pending) cuCheck(rt_cu.cuEventSynchronize(s->done)); /* its last copy has read it */
    s->pending = 0;
    if (s->cap < bytes) {
        if (s->host) cuCheck(rt_cu.cuMemFreeHost(s->host));
        size_t cap = 1 << 16;
        while (cap < bytes) cap *= 2;
        s->host = NULL;
        cuCheck(rt_cu.cuMemAllocHost(&s->host, cap));
        s->cap = cap;
    }
    memcpy(s->host, host, bytes);
    cuCheck(rt_cu.cuMemcpyHtoDAsync(dptr(dst), s->host, bytes, c->compute));
    cuCheck(rt_cu.cuEventRecord(s->done, c->compute));
    s->pending = 1;
    c->stats.copies_in++;
    c->stats.bytes_in += (int64_t)bytes;
}

static void cuda_copy_out(rt_backend *be, void *host, const void *src, size_t bytes) {
    if (!bytes) return;
    cuda_impl *c = impl_of(be);
    NOT_CAPTURING(c, "copy_out");
    use(c);
    /* On the compute stream, so it reads what the queued work writes. */
    cuCheck(rt_cu.cuMemcpyDtoHAsync(host, dptr(src), bytes, c->compute));
    cuCheck(rt_cu.cuStreamSynchronize(c->compute));
    c->stats.copies_out++;
    c->stats.bytes_out += (int64_t)bytes;
}

static void cuda_copy(rt_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cuda_impl *c = impl_of(be);
    use(c);
    cuCheck(rt_cu.cuMemcpyDtoDAsync(dptr(dst), dptr(src), bytes, c->compute));
}

static int cuda_sync(rt_backend *be, char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    if (c->capturing) return 0; /* nothing runs while recording */
    use(c);
    if (cuTry(rt_cu.cuStreamSynchronize(c->compute), err, errlen)) return -1;
    return cuTry(rt_cu.cuStreamSynchronize(c->comm), err, errlen);
}

/* ---- set-up and teardown ------------------------------------------------------------ */

static void print_stats(const cuda_impl *c) {
    const rt_cuda_stats *s = &c->stats;
    fprintf(stderr,
            "dpc: cuda: %s: %" PRId64 " launches, %" PRId64 " gemms, %" PRId64
            " graph launches (%" PRId64 " launches, %" PRId64 " gemms captured), %" PRId64
            " copies in (%.1f MiB), %" PRId64 " out (%.1f MiB)\n",
            c->name, s->launches, s->gemms, s->graph_launches, s->captured_launches,
            s->captured_gemms, s->copies_in, (double)s->bytes_in / (1 << 20), s->copies_out,
            (double)s->bytes_out / (1 << 20));
}

/* Frees whatever part of c exists (also after a failed set-up). Teardown
 * errors are reported, not fatal: the process is usually ending. */
static void impl_free(cuda_impl *c) {
    if (!c) return;
    if (c->ctx) {
        CUresult r = rt_cu.cuCtxSetCurrent(c->ctx);
        if (r == CUDA_SUCCESS && c->capturing) {
            CUgraph g = NULL;
            rt_cu.cuStreamEndCapture(c->compute, &g);
            if (g) rt_cu.cuGraphDestroy(g);
            c->capturing = 0;
        }
        if (c->compute) rt_cu.cuStreamSynchronize(c->compute);
        if (c->comm) rt_cu.cuStreamSynchronize(c->comm);
        if (c->blas) rt_cublas.cublasDestroy(c->blas);
        if (c->blas_ws) rt_cu.cuMemFree(c->blas_ws);
        for (int i = 0; i < STAGES; i++) {
            if (c->st[i].host) rt_cu.cuMemFreeHost(c->st[i].host);
            if (c->st[i].done) rt_cu.cuEventDestroy(c->st[i].done);
        }
        if (c->ev_compute) rt_cu.cuEventDestroy(c->ev_compute);
        if (c->ev_comm) rt_cu.cuEventDestroy(c->ev_comm);
        if (c->compute) rt_cu.cuStreamDestroy(c->compute);
        if (c->comm) rt_cu.cuStreamDestroy(c->comm);
        if (c->ctx_retained) rt_cu.cuDevicePrimaryCtxRelease(c->dev);
    }
    free(c);
}

static void cuda_destroy(rt_backend *be) {
    cuda_impl *c = impl_of(be);
    if (rt_debug_level() >= 1) print_stats(c);
    impl_free(c);
    free(be);
}

static int impl_up(cuda_impl *c, int ordinal, char *err, size_t errlen) {
    int n = rt_cuda_device_count(err, errlen);
    if (n == 0) return -1;
    if (ordinal < 0 || ordinal >= n) {
        return ir_fail(err, errlen, "no CUDA device %d (the driver sees %d)", ordinal, n);
    }
    c->ordinal = ordinal;
    int major = 0, minor = 0;
    size_t mem = 0;
    char dname[128] = "";
    if (cuTry(rt_cu.cuDeviceGet(&c->dev, ordinal), err, errlen) ||
        cuTry(rt_cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                         c->dev),
              err, errlen) ||
        cuTry(rt_cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                         c->dev),
              err, errlen) ||
        cuTry(rt_cu.cuDeviceGetAttribute(&c->nsm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c->dev),
              err, errlen) ||
        cuTry(rt_cu.cuDeviceGetName(dname, (int)sizeof dname, c->dev), err, errlen) ||
        cuTry(rt_cu.cuDeviceTotalMem(&mem, c->dev), err, errlen))
        return -1;
    c->sm = 10 * major + minor;
    c->memory = mem;
    if (c->nsm < 1) c->nsm = 1;
    snprintf(c->name, sizeof c->name, "%s, sm_%d, %d SMs, %.0f GiB", dname, c->sm, c->nsm,
             (double)mem / (1 << 30));
    if (cuTry(rt_cu.cuDevicePrimaryCtxRetain(&c->ctx, c->dev), err, errlen)) return -1;
    c->ctx_retained = 1;
    if (cuTry(rt_cu.cuCtxSetCurrent(c->ctx), err, errlen)) return -1;
    /* Non-blocking: never serialised against the legacy default stream
     * that other code in the process might use. */
    if (cuTry(rt_cu.cuStreamCreate(&c->compute, CU_STREAM_NON_BLOCKING), err, errlen) ||
        cuTry(rt_cu.cuStreamCreate(&c->comm, CU_STREAM_NON_BLOCKING), err, errlen) ||
        cuTry(rt_cu.cuEventCreate(&c->ev_compute, CU_EVENT_DISABLE_TIMING), err, errlen) ||
        cuTry(rt_cu.cuEventCreate(&c->ev_comm, CU_EVENT_DISABLE_TIMING), err, errlen))
        return -1;
    for (int i = 0; i < STAGES; i++)
        if (cuTry(rt_cu.cuEventCreate(&c->st[i].done, CU_EVENT_DISABLE_TIMING), err, errlen))
            return -1;
    return cuda_blas_up(c, err, errlen);
}

/* What every cuda backend is; rt_backend_cuda adds the device. */
static const rt_backend cuda_table = {
    .name = "cuda",
    .dialect = CG_DIALECT_CUDA,
    .async_copy = 1,
    .device_count = rt_cuda_device_count,
    .open_device = rt_backend_cuda,
    .coll_new = rt_coll_nccl_new,
    .coll_ranks_new = rt_coll_nccl_ranks_new,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_in = cuda_copy_in,
    .copy_out = cuda_copy_out,
    .copy = cuda_copy,
    .compile = cuda_compile,
    .module_free = cuda_module_free,
    .kernel = cuda_kernel,
    .launch = cuda_launch,
    .gemm = cuda_gemm,
    .sync = cuda_sync,
    .destroy = cuda_destroy,
    .graph_begin = rt_cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
};

int rt_backend_is_cuda(const rt_backend *be) { return be && be->destroy == cuda_table.destroy; }

rt_backend *rt_backend_cuda(int ordinal, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    cuda_impl *c = calloc(1, sizeof *c);
    RT_CHECK_ALLOC(c);
    if (impl_up(c, ordinal, err, errlen)) {
        impl_free(c);
        return NULL;
    }
    if (rt_debug_level() >= 1) {
        int drv = 0;
        rt_cu.cuDriverGetVersion(&drv);
        fprintf(stderr, "dpc: cuda: device %d: %s (driver CUDA %d.%d, NVRTC %s)\n", ordinal,
                c->name, drv / 1000, drv % 1000 / 10, rt_nvrtc_version());
    }
    rt_backend *be = calloc(1, sizeof *be);
    RT_CHECK_ALLOC(be);
    *be = cuda_table;
    be->memory_bytes = (int64_t)c->memory;
    be->ordinal = ordinal;
    be->impl = c;
    return be;
}

int rt_cuda_stats_get(const rt_backend *be, rt_cuda_stats *s) {
    if (!rt_backend_is_cuda(be)) return -1;
    *s = impl_of(be)->stats;
    return 0;
}

const char *rt_cuda_device_name(const rt_backend *be) {
    return rt_backend_is_cuda(be) ? impl_of(be)->name : "";
}

int rt_cuda_device_ordinal(const rt_backend *be) {
    return rt_backend_is_cuda(be) ? impl_of(be)->ordinal : -1;
}

#endif
