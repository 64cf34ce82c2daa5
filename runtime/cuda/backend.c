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

#include "base/hash.h"
#include "runtime/check.h"
#include "runtime/comm/comm.h"
#include "runtime/cuda/internal.h"
#include "runtime/env.h"
#include "runtime/log.h"

_Static_assert(sizeof(CUdeviceptr) == sizeof(void *), "device pointers travel as void *");

int rt_cuda_compiled(void) { return 1; }

/* The calls whose effect a graph cannot hold (see cuda.h): a caller's
 * mistake, refused (-1 + message). */
static int not_while_capturing(const cuda_impl *c, const char *what, char *err, size_t errlen) {
    if (!c->capturing) return 0;
    return base_fail(err, errlen, "cuda: %s on device %d while a CUDA graph is being captured",
                     what, c->ordinal);
}

/* ---- devices ------------------------------------------------------------------- */

/* Loads the driver (probe: as rt_cu_probe finds it) and initialises it;
 * -1 + why. */
static int driver_up(int probe, char *why, size_t whylen) {
    char e[512];
    if (probe ? rt_cu_probe(e, sizeof e) : rt_cu_load(e, sizeof e)) {
        snprintf(why, whylen, RT_NO_CUDA_DRIVER ": %s", e);
        return -1;
    }
    CUresult r = rt_cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        snprintf(why, whylen, "cuInit: %s: %s", rt_cu_error_name(r), rt_cu_error_string(r));
        return -1;
    }
    return 0;
}

static int device_count(int probe, char *why, size_t whylen) {
    if (driver_up(probe, why, whylen)) return 0;
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
int rt_cuda_device_count(char *why, size_t whylen) { return device_count(0, why, whylen); }
int rt_cuda_device_probe(char *why, size_t whylen) { return device_count(1, why, whylen); }

/* ---- waits: counted, and their failures named --------------------------------- */

/* Work queued so far (what a wait's kind is judged by). */
static int64_t ops_of(const cuda_impl *c) {
    const rt_cuda_stats *s = &c->stats;
    return s->launches + s->gemms + s->graph_launches + s->copies_in + s->copies_out + c->d2d;
}

/* The message of a failed call that may report an earlier call's failure
 * (a kernel's fault surfaces at the next call or wait): the device, the
 * label of the last work queued and, unless the caller synchronises after
 * every call already, how to find the call that failed. */
int cuda_failure(cuda_impl *c, CUresult r, const char *call, char *out, size_t n) {
    c->failed = 1;
    if (!n) return -1;
    snprintf(out, n, "cuda: %s on device %d: %s: %s%s%s%s", call, c->ordinal, rt_cu_error_name(r),
             rt_cu_error_string(r), c->label[0] ? "; the last work queued was " : "", c->label,
             c->sync_each ? ""
                          : " (kernels run asynchronously, so any call queued before may have "
                            "failed: rerun with DPC_SYNC=1 to stop at the one that did)");
    return -1;
}

/* A call that can report an earlier kernel's failure: 0, or -1 + its
 * message (cuda_failure). */
static int must(cuda_impl *c, CUresult r, const char *call, char *err, size_t errlen) {
    return r == CUDA_SUCCESS ? 0 : cuda_failure(c, r, call, err, errlen);
}

int cuda_wait_stream(cuda_impl *c, CUstream s, char *err, size_t errlen) {
    c->stats.host_waits++;
    CUresult r = rt_cu.cuStreamSynchronize(s);
    if (r != CUDA_SUCCESS) {
        cuda_failure(c, r, "cuStreamSynchronize", err, errlen);
        return -1;
    }
    if (s == c->compute) c->done = c->marks;
    return 0;
}

/* The next mark, or 0 + message. */
static uint64_t mark_now(cuda_impl *c, char *err, size_t errlen) {
    uint64_t m = c->marks + 1;
    mark_slot *s = &c->mk[m % MARKS];
    if (must(c, rt_cu.cuEventRecord(s->ev, c->compute), "cuEventRecord", err, errlen)) return 0;
    s->ops = ops_of(c);
    c->marks = m;
    return m;
}

/* Returns once mark m is done; waits only when it is not known done. */
static int wait_for(cuda_impl *c, uint64_t m, char *err, size_t errlen) {
    if (m <= c->done) return 0;
    if (m > c->marks) m = c->marks;
    if (c->marks - m >= MARKS) m = c->marks - MARKS + 1; /* its event was reused: a later one */
    const mark_slot *s = &c->mk[m % MARKS];
    if (ops_of(c) > s->ops)
        c->stats.lagged_waits++;
    else
        c->stats.host_waits++;
    CUresult r = rt_cu.cuEventSynchronize(s->ev);
    if (r != CUDA_SUCCESS) {
        cuda_failure(c, r, "cuEventSynchronize", err, errlen);
        return -1;
    }
    c->done = m;
    return 0;
}

/* ---- memory ---------------------------------------------------------------------- */

static void *cuda_alloc(rt_backend *be, size_t bytes, char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    if (not_while_capturing(c, "alloc", err, errlen) || use(c, err, errlen)) return NULL;
    /* 256 bytes: what cuMemAlloc aligns to anyway; never 0 (device.h). */
    size_t n = bytes ? (bytes + 255) / 256 * 256 : 256;
    CUdeviceptr p = 0;
    CUresult r = rt_cu.cuMemAlloc(&p, n);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        size_t fr = 0, total = 0;
        rt_cu.cuMemGetInfo(&fr, &total);
        c->failed = 1;
        base_fail(err, errlen,
                  "cuda: out of memory on device %d (%s): %zu bytes asked, %zu of %zu free%s%s",
                  c->ordinal, c->name, n, fr, total,
                  c->label[0] ? "; the last work queued was " : "", c->label);
        return NULL;
    }
    if (must(c, r, "cuMemAlloc", err, errlen)) return NULL;
    /* Zero-filled as device.h promises; on the compute stream, so every
     * later use (all on that stream, or ordered after it) sees zeros. */
    if (must(c, rt_cu.cuMemsetD8Async(p, 0, n, c->compute), "cuMemsetD8Async", err, errlen)) {
        rt_cu.cuMemFree(p);
        return NULL;
    }
    return (void *)(uintptr_t)p;
}

static void cuda_free(rt_backend *be, void *ptr) {
    if (!ptr) return;
    cuda_impl *c = impl_of(be);
    if (c->capturing) { /* a caller's mistake: kept rather than freed under a graph */
        rt_log(RT_LOG_ERROR, "cuda: free on device %d while a CUDA graph is being captured: kept",
               c->ordinal);
        return;
    }
    use_anyway(c);
    /* Queued work may still use the buffer; cuMemFree does not promise to
     * wait for other streams. Frees happen at teardown, so this costs nothing.
     * Teardown has no caller to tell: a failure is said here, once (the
     * device is failed from then on, and after a failure nothing waits or
     * checks: the device may be lost). */
    char err[1024];
    if (!c->failed && (cuda_wait_stream(c, c->compute, err, sizeof err) ||
                       cuda_wait_stream(c, c->comm, err, sizeof err)))
        rt_log(RT_LOG_ERROR, "%s", err);
    CUresult r = rt_cu.cuMemFree(dptr(ptr));
    if (!c->failed && r != CUDA_SUCCESS) {
        cuda_failure(c, r, "cuMemFree", err, sizeof err);
        rt_log(RT_LOG_ERROR, "%s", err);
    }
}

/* Retires the n oldest staging pieces: their copies are done (waited for
 * when not known done). 0, or -1 + message. */
static int retire(cuda_impl *c, int n, char *err, size_t errlen) {
    if (n <= 0) return 0;
    if (wait_for(c, c->pc[(c->pc_first + n - 1) % PIECES].mark, err, errlen)) return -1;
    c->pc_first = (c->pc_first + n) % PIECES;
    c->pc_n -= n;
    return 0;
}

/* The staging ring's next piece for `bytes`, once no copy in flight reads
 * it (see internal.h); NULL + message. */
static unsigned char *stage_for(cuda_impl *c, size_t bytes, char *err, size_t errlen) {
    size_t len = (bytes + 255) / 256 * 256;
    if (4 * len > c->ring_cap) { /* the first copies of a size only */
        if (retire(c, c->pc_n, err, errlen)) return NULL;
        if (c->ring && must(c, rt_cu.cuMemFreeHost(c->ring), "cuMemFreeHost", err, errlen))
            return NULL;
        c->ring = NULL;
        c->ring_cap = 0;
        size_t cap = (size_t)1 << 20;
        while (cap < 4 * len) cap *= 2;
        void *h = NULL;
        if (must(c, rt_cu.cuMemAllocHost(&h, cap), "cuMemAllocHost", err, errlen)) return NULL;
        c->ring = h;
        c->ring_cap = cap;
        c->ring_head = 0;
    }
    size_t off = c->ring_head + len > c->ring_cap ? 0 : c->ring_head;
    for (;;) { /* retire up to the newest piece that overlaps [off, off + len) */
        int last = -1;
        for (int i = 0; i < c->pc_n; i++) {
            const piece *q = &c->pc[(c->pc_first + i) % PIECES];
            if (q->off < off + len && off < q->off + q->len) last = i;
        }
        if (last < 0) break;
        if (retire(c, last + 1, err, errlen)) return NULL;
    }
    if (c->pc_n == PIECES && retire(c, 1, err, errlen)) return NULL;
    piece *q = &c->pc[(c->pc_first + c->pc_n++) % PIECES];
    q->off = off, q->len = len, q->mark = UINT64_MAX; /* recorded after its copy */
    c->ring_head = off + len;
    return c->ring + off;
}

/* Host to device through the staging ring: the caller's memory is free
 * when this returns, the transfer is a true asynchronous DMA that overlaps
 * queued kernels (a copy from pageable memory is staged synchronously by
 * the driver instead). */
static int cuda_copy_in(rt_backend *be, void *dst, const void *host, size_t bytes, char *err,
                        size_t errlen) {
    if (!bytes) return 0;
    cuda_impl *c = impl_of(be);
    if (not_while_capturing(c, "copy_in", err, errlen) || use(c, err, errlen)) return -1;
    unsigned char *p = stage_for(c, bytes, err, errlen);
    if (!p) return -1;
    memcpy(p, host, bytes);
    piece *q = &c->pc[(c->pc_first + c->pc_n - 1) % PIECES];
    if (must(c, rt_cu.cuMemcpyHtoDAsync(dptr(dst), p, bytes, c->compute), "cuMemcpyHtoDAsync", err,
             errlen)) {
        q->mark = 0; /* nothing of it in flight */
        return -1;
    }
    c->stats.copies_in++;
    c->stats.bytes_in += (int64_t)bytes;
    q->mark = mark_now(c, err, errlen);
    return q->mark ? 0 : -1;
}

static int cuda_copy(rt_backend *be, void *dst, const void *src, size_t bytes, char *err,
                     size_t errlen) {
    if (!bytes) return 0;
    cuda_impl *c = impl_of(be);
    if (use(c, err, errlen) ||
        must(c, rt_cu.cuMemcpyDtoDAsync(dptr(dst), dptr(src), bytes, c->compute),
             "cuMemcpyDtoDAsync", err, errlen))
        return -1;
    c->d2d++;
    return 0;
}

static int cuda_sync(rt_backend *be, char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    if (c->capturing) return 0; /* nothing runs while recording */
    if (use(c, err, errlen)) return -1;
    if (cuda_wait_stream(c, c->compute, err, errlen)) return -1;
    return cuda_wait_stream(c, c->comm, err, errlen);
}

/* ---- reads without a host wait (device.h's rt_readback) ----------------------------- */

static void *cuda_host_alloc(rt_backend *be, size_t bytes, char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    void *p = NULL;
    if (use(c, err, errlen) ||
        must(c, rt_cu.cuMemAllocHost(&p, bytes ? bytes : 1), "cuMemAllocHost", err, errlen))
        return NULL;
    return p;
}

static void cuda_host_free(rt_backend *be, void *host) {
    if (!host) return;
    cuda_impl *c = impl_of(be);
    use_anyway(c);
    CUresult r = rt_cu.cuMemFreeHost(host);
    if (!c->failed && r != CUDA_SUCCESS) { /* teardown: said here, once */
        char err[1024];
        cuda_failure(c, r, "cuMemFreeHost", err, sizeof err);
        rt_log(RT_LOG_ERROR, "%s", err);
    }
}

/* Into pinned memory (host_alloc): a true DMA, the host does not wait. On
 * the compute stream, so it reads what the queued work writes. */
static int cuda_copy_out_async(rt_backend *be, void *host, const void *src, size_t bytes, char *err,
                               size_t errlen) {
    if (!bytes) return 0;
    cuda_impl *c = impl_of(be);
    if (not_while_capturing(c, "copy_out_async", err, errlen) || use(c, err, errlen) ||
        must(c, rt_cu.cuMemcpyDtoHAsync(host, dptr(src), bytes, c->compute), "cuMemcpyDtoHAsync",
             err, errlen))
        return -1;
    c->stats.copies_out++;
    c->stats.bytes_out += (int64_t)bytes;
    return 0;
}

/* The asynchronous copy, then waited for (any host memory). */
static int cuda_copy_out(rt_backend *be, void *host, const void *src, size_t bytes, char *err,
                         size_t errlen) {
    if (!bytes) return 0;
    cuda_impl *c = impl_of(be);
    if (not_while_capturing(c, "copy_out", err, errlen) ||
        cuda_copy_out_async(be, host, src, bytes, err, errlen))
        return -1;
    return cuda_wait_stream(c, c->compute, err, errlen);
}

static uint64_t cuda_mark(rt_backend *be, char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    if (not_while_capturing(c, "mark", err, errlen) || use(c, err, errlen)) return 0;
    return mark_now(c, err, errlen);
}

static int cuda_wait_mark(rt_backend *be, uint64_t m, char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    if (use(c, err, errlen)) return -1;
    return wait_for(c, m, err, errlen);
}

static void cuda_label(rt_backend *be, const char *what) {
    cuda_impl *c = impl_of(be);
    snprintf(c->label, sizeof c->label, "%s", what);
}

/* ---- the calls of the other files, marking a failure (teardown then
 * neither waits nor checks: the device may be lost, and the failure is
 * the caller's to report) ---- */

static int launch_marked(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                         const cg_launch *geometry, char *err, size_t errlen) {
    int rc = cuda_launch(be, k, args, nargs, count, geometry, err, errlen);
    if (rc) impl_of(be)->failed = 1;
    return rc;
}

static int gemm_marked(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C,
                       char *err, size_t errlen) {
    int rc = cuda_gemm(be, d, A, B, C, err, errlen);
    if (rc) impl_of(be)->failed = 1;
    return rc;
}

static int conv_marked(rt_backend *be, const cg_conv *d, void *out, const void *in, const void *in2,
                       char *err, size_t errlen) {
    int rc = cuda_conv(be, d, out, in, in2, err, errlen);
    if (rc < 0) impl_of(be)->failed = 1;
    return rc;
}

/* A measured choice holds for this kind of device with this cuDNN, and
 * for runs that allow non-deterministic algorithms or runs that do not. */
static uint64_t cuda_tune_key(const rt_backend *be) {
    const cuda_impl *c = impl_of(be);
    size_t version = c->dnn ? rt_cudnn.cudnnGetVersion() : 0;
    uint64_t h = base_fnv1a_str(BASE_FNV1A_INIT, c->name);
    h = base_fnv1a(h, &version, sizeof version);
    return rt_conv_nondeterministic() ? base_fnv1a_str(h, "nondeterministic") : h;
}

static int graph_launch_marked(rt_backend *be, rt_graph *g, char *err, size_t errlen) {
    int rc = cuda_graph_launch(be, g, err, errlen);
    if (rc) impl_of(be)->failed = 1;
    return rc;
}

/* ---- set-up and teardown ------------------------------------------------------------ */

static void print_stats(const cuda_impl *c) {
    const rt_cuda_stats *s = &c->stats;
    rt_log(RT_LOG_INFO,
           "cuda: %s: %" PRId64 " launches, %" PRId64 " gemms, %" PRId64 " convs, %" PRId64
           " graph launches (%" PRId64 " launches, %" PRId64 " gemms, %" PRId64
           " convs captured), %" PRId64 " copies in (%.1f MiB), %" PRId64
           " out (%.1f MiB), %" PRId64 " host waits (%" PRId64 " more while later work ran)",
           c->name, s->launches, s->gemms, s->convs, s->graph_launches, s->captured_launches,
           s->captured_gemms, s->captured_convs, s->copies_in, (double)s->bytes_in / (1 << 20),
           s->copies_out, (double)s->bytes_out / (1 << 20), s->host_waits, s->lagged_waits);
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
        cuda_dnn_down(c);
        if (c->blas) rt_cublas.cublasDestroy(c->blas);
        if (c->blas_ws) rt_cu.cuMemFree(c->blas_ws);
        if (c->ring) rt_cu.cuMemFreeHost(c->ring);
        for (int i = 0; i < MARKS; i++)
            if (c->mk[i].ev) rt_cu.cuEventDestroy(c->mk[i].ev);
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
        return base_fail(err, errlen, "no CUDA device %d (the driver sees %d)", ordinal, n);
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
    for (int i = 0; i < MARKS; i++)
        if (cuTry(rt_cu.cuEventCreate(&c->mk[i].ev, CU_EVENT_DISABLE_TIMING), err, errlen))
            return -1;
    c->sync_each = rt_env_flag("DPC_SYNC", 0) || rt_env_flag("DPC_PROFILE", 0);
    return cuda_blas_up(c, err, errlen) || cuda_dnn_up(c, err, errlen) ? -1 : 0;
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
    .launch = launch_marked,
    .gemm = gemm_marked,
    .conv = conv_marked,
    .tune_key = cuda_tune_key,
    .sync = cuda_sync,
    .destroy = cuda_destroy,
    .graph_begin = rt_cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = graph_launch_marked,
    .graph_free = cuda_graph_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy_out_async = cuda_copy_out_async,
    .mark = cuda_mark,
    .wait_mark = cuda_wait_mark,
    .label = cuda_label,
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
        rt_log(RT_LOG_INFO, "cuda: device %d: %s (driver CUDA %d.%d, NVRTC %s)", ordinal, c->name,
               drv / 1000, drv % 1000 / 10, rt_nvrtc_version());
    }
    rt_backend *be = calloc(1, sizeof *be);
    RT_CHECK_ALLOC(be);
    *be = cuda_table;
    be->memory_bytes = (int64_t)c->memory;
    be->ordinal = ordinal;
    be->impl = c;
    if (!c->dnn) {
        be->conv = NULL; /* every convolution runs its im2col alternative */
        if (rt_debug_level() >= 1)
            rt_log(RT_LOG_INFO, "cuda: no cuDNN, convolutions run as im2col + GEMM: %s",
                   c->dnn_why);
    }
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
