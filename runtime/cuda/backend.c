/* runtime/cuda/backend.c — the cuda backend: NVRTC modules loaded through
 * the driver API, cuBLAS GEMMs, a compute and a communication stream, CUDA
 * graph capture, NCCL. See backend_cuda.h. libcuda, libcublas and libnccl
 * are dlopen'ed (cuda_loader.h), so none of this needs a driver to link. */
#include "runtime/cuda/cuda.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"

/* ---- the cuBLAS argument list (pure; every build) ------------------------------ */

int rt_cublas_sgemm_args(const cg_gemm *d, rt_sgemm_args *a, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    if ((d->transa != 0 && d->transa != 1) || (d->transb != 0 && d->transb != 1)) {
        snprintf(err, errlen, "gemm: trans flags must be 0 or 1 (got %d, %d)", d->transa, d->transb);
        return -1;
    }
    /* The descriptor's own rules (sizes >= 1 and within an int, leading
     * dimensions, non-overlapping batch entries of C) are cuBLAS's too;
     * buffer sizes are checked when a program is bound (cg_program_check),
     * so here every extent is allowed. */
    if (cg_gemm_validate(d, INT64_MAX, INT64_MAX, INT64_MAX, err, errlen)) return -1;
    a->transa = d->transa;
    a->transb = d->transb;
    a->m = (int)d->m;
    a->n = (int)d->n;
    a->k = (int)d->k;
    a->alpha = d->alpha;
    a->beta = d->beta;
    a->lda = (int)d->lda;
    a->ldb = (int)d->ldb;
    a->ldc = (int)d->ldc;
    /* cuBLAS ignores the strides of a batch of one; 0 says so plainly. */
    a->stride_a = d->batch > 1 ? (long long)d->stride_a : 0;
    a->stride_b = d->batch > 1 ? (long long)d->stride_b : 0;
    a->stride_c = d->batch > 1 ? (long long)d->stride_c : 0;
    a->batch = (int)d->batch;
    a->off_a = d->off_a;
    a->off_b = d->off_b;
    a->off_c = d->off_c;
    return 0;
}

#ifdef DPC_HAVE_CUDA

#include "runtime/cuda/nvrtc.h"
#include "runtime/cuda/loader.h"

_Static_assert(CUBLAS_OP_N == 0 && CUBLAS_OP_T == 1, "rt_sgemm_args stores cuBLAS's op values");
_Static_assert(sizeof(CUdeviceptr) == sizeof(void *), "device pointers travel as void *");

/* Pinned staging buffers for copy_in, each reused only once its last
 * copy has run (its event). A step copies four inputs (batch, labels, lr,
 * grad_scale); train.c stages the next batch behind a step and then reads
 * the step's loss, which waits for everything queued so far, so a slot's
 * previous copy has always run by the time it comes round again. */
#define STAGES 4
#define BLOCK 256           /* threads per block: a multiple of the warp, 8 blocks fill an SM */
#define BLOCKS_PER_SM 16    /* grid cap: two full waves, the rest grid-stride */

typedef struct {
    void *host;    /* pinned */
    size_t cap;
    CUevent done;  /* recorded after the copy that last read it */
    int pending;
} stage;

typedef struct {
    int ordinal, sm, nsm;
    size_t memory; /* the device's, in bytes */
    char name[192];
    CUdevice dev;
    CUcontext ctx; /* the device's primary context, shared with cuBLAS and NCCL */
    int ctx_retained;
    CUstream compute, comm;
    CUevent ev_compute, ev_comm; /* compute -> comm and comm -> compute ordering */
    cublasHandle_t blas;
    CUdeviceptr blas_ws;
    stage st[STAGES];
    int next_stage;
    int capturing;
    rt_cuda_stats stats;
} cuda_impl;

struct rt_kernel {
    CUfunction fn;
    int nargs;
    struct rt_kernel *next;
};

struct rt_module {
    CUmodule mod;
    char *path;
    struct rt_kernel *kernels;
};

struct rt_cuda_graph {
    CUgraph graph;
    CUgraphExec exec;
    size_t nodes;
};

static void cuda_destroy(rt_backend *be);
static rt_graph *graph_end(rt_backend *be, char *err, size_t errlen);
static int graph_launch(rt_backend *be, rt_graph *g, char *err, size_t errlen);
static void graph_free(rt_backend *be, rt_graph *g);

int rt_cuda_compiled(void) { return 1; }

int rt_backend_is_cuda(const rt_backend *be) { return be && be->destroy == cuda_destroy; }

static cuda_impl *impl_of(const rt_backend *be) { return (cuda_impl *)be->impl; }

/* Every call may come from another host thread (replicas, data workers):
 * make the device's context current first. It is a thread-local store in
 * the driver, cheap beside a launch. */
static void use(cuda_impl *c) { cuCheck(rt_cu.cuCtxSetCurrent(c->ctx)); }

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

/* The calls whose effect a graph cannot hold (see backend_cuda.h). */
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
        snprintf(why, whylen, "cuDeviceGetCount: %s: %s", rt_cu_error_name(r), rt_cu_error_string(r));
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
    /* 256 bytes: what cuMemAlloc aligns to anyway; never 0 (backend.h). */
    size_t n = bytes ? (bytes + 255) / 256 * 256 : 256;
    CUdeviceptr p = 0;
    CUresult r = rt_cu.cuMemAlloc(&p, n);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        size_t fr = 0, total = 0;
        rt_cu.cuMemGetInfo(&fr, &total);
        fprintf(stderr, "%s:%d: cuda: out of device memory: %zu bytes asked, %zu of %zu free on %s\n",
                __FILE__, __LINE__, n, fr, total, c->name);
        exit(EXIT_FAILURE);
    }
    cuCheck(r);
    /* Zero-filled as backend.h promises; on the compute stream, so every
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

/* ---- modules and kernels ------------------------------------------------------------ */

static rt_module *cuda_compile(rt_backend *be, const char *source, char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    int debug = rt_debug_level();
    if (debug >= 2) fprintf(stderr, "dpc: cuda: generated source:\n%s\n", source);
    rt_cuda_image img;
    if (rt_cuda_compile_cached(source, c->sm, &img, err, errlen)) {
        fprintf(stderr, "dpc: error: %s\n", err);
        return NULL;
    }
    use(c);
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
        snprintf(err, errlen, "cannot load %s (%s) on %s: %s: %s%s%s%s", img.path, img.target,
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
        fprintf(stderr, "dpc: cuda: module %s (%s, %s)\n", img.path, img.target,
                img.cache_hit ? "cache hit" : "compiled");
    rt_module *m = calloc(1, sizeof *m);
    RT_CHECK_ALLOC(m);
    m->mod = mod;
    m->path = img.path;
    img.path = NULL;
    rt_cuda_image_free(&img);
    return m;
}

static void cuda_module_free(rt_backend *be, rt_module *m) {
    if (!m) return;
    cuda_impl *c = impl_of(be);
    use(c);
    while (m->kernels) {
        struct rt_kernel *k = m->kernels;
        m->kernels = k->next;
        free(k);
    }
    cuCheck(rt_cu.cuStreamSynchronize(c->compute)); /* no queued launch of its code */
    cuCheck(rt_cu.cuModuleUnload(m->mod));
    free(m->path);
    free(m);
}

static rt_kernel *cuda_kernel(rt_backend *be, rt_module *m, const char *name, int nargs, char *err,
                              size_t errlen) {
    use(impl_of(be));
    if (nargs < 0 || nargs > CG_MAX_ARGS) {
        snprintf(err, errlen, "kernel %s: %d buffers (at most %d)", name, nargs, CG_MAX_ARGS);
        return NULL;
    }
    CUfunction fn = NULL;
    CUresult r = rt_cu.cuModuleGetFunction(&fn, m->mod, name);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "kernel %s not in %s: %s", name, m->path ? m->path : "the module",
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

static int cuda_launch(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                       char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    if (nargs != k->nargs) {
        snprintf(err, errlen, "kernel launched with %d buffers, takes %d", nargs, k->nargs);
        return -1;
    }
    if (count <= 0) return 0;
    use(c);
    /* The ABI (codegen.h): one device pointer per buffer, then the count;
     * cuLaunchKernel takes the address of each argument's value. */
    CUdeviceptr ptr[CG_MAX_ARGS];
    void *params[CG_MAX_ARGS + 1];
    long long n = (long long)count;
    for (int j = 0; j < nargs; j++) {
        ptr[j] = dptr(args[j]);
        params[j] = &ptr[j];
    }
    params[nargs] = &n;
    if (cuTry(rt_cu.cuLaunchKernel(k->fn, grid_for(c, count), 1, 1, BLOCK, 1, 1, 0, c->compute,
                                   params, NULL),
              err, errlen))
        return -1;
    if (c->capturing)
        c->stats.captured_launches++;
    else
        c->stats.launches++;
    return 0;
}

static int cuda_gemm(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C,
                     char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    rt_sgemm_args a;
    if (rt_cublas_sgemm_args(d, &a, err, errlen)) return -1;
    use(c);
    if (d->type_a == IR_BF16 || d->type_c == IR_BF16) {
        /* Mixed precision (codegen/gemm.c): bf16 A and B, f32 or bf16 C, f32
         * accumulation; offsets count elements of each operand's type. */
        cudaDataType ta = d->type_a == IR_BF16 ? CUDA_R_16BF : CUDA_R_32F;
        cudaDataType tc = d->type_c == IR_BF16 ? CUDA_R_16BF : CUDA_R_32F;
        size_t ea = ir_dtype_size((ir_dtype)d->type_a), ec = ir_dtype_size((ir_dtype)d->type_c);
        if (cublasTry(rt_cublas.cublasGemmStridedBatchedEx(
                          c->blas, a.transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                          a.transb ? CUBLAS_OP_T : CUBLAS_OP_N, a.m, a.n, a.k, &a.alpha,
                          (const char *)A + a.off_a * ea, ta, a.lda, a.stride_a,
                          (const char *)B + a.off_b * ea, ta, a.ldb, a.stride_b, &a.beta,
                          (char *)C + a.off_c * ec, tc, a.ldc, a.stride_c, a.batch, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT),
                      err, errlen))
            return -1;
    } else if (cublasTry(rt_cublas.cublasSgemmStridedBatched(
                      c->blas, a.transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                      a.transb ? CUBLAS_OP_T : CUBLAS_OP_N, a.m, a.n, a.k, &a.alpha, A + a.off_a,
                      a.lda, a.stride_a, B + a.off_b, a.ldb, a.stride_b, &a.beta, C + a.off_c, a.ldc,
                      a.stride_c, a.batch),
                  err, errlen))
        return -1;
    if (c->capturing)
        c->stats.captured_gemms++;
    else
        c->stats.gemms++;
    return 0;
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

/* cuBLAS on the compute stream with a workspace of its own: set
 * explicitly, cuBLAS never allocates while a graph is captured (its docs:
 * 32 MiB on Hopper and newer, 4 MiB before). */
static int blas_up(cuda_impl *c, char *err, size_t errlen) {
    char e[512];
    if (rt_cublas_load(e, sizeof e)) {
        snprintf(err, errlen, "cannot load cuBLAS %s: %s", rt_cublas_library(), e);
        return -1;
    }
    if (cublasTry(rt_cublas.cublasCreate(&c->blas), err, errlen) ||
        cublasTry(rt_cublas.cublasSetStream(c->blas, c->compute), err, errlen))
        return -1;
    size_t ws = c->sm >= 90 ? (size_t)32 << 20 : (size_t)4 << 20;
    if (cuTry(rt_cu.cuMemAlloc(&c->blas_ws, ws), err, errlen) ||
        cublasTry(rt_cublas.cublasSetWorkspace(c->blas, (void *)(uintptr_t)c->blas_ws, ws), err,
                  errlen))
        return -1;
    /* Plain fp32 unless asked: TF32 would change results by ~1e-3 and the
     * cpu backend is the reference. */
    const char *tf32 = getenv("DPC_TF32");
    cublasMath_t mode = tf32 && *tf32 && strcmp(tf32, "0") ? CUBLAS_TF32_TENSOR_OP_MATH
                                                           : CUBLAS_DEFAULT_MATH;
    return cublasTry(rt_cublas.cublasSetMathMode(c->blas, mode), err, errlen);
}

static int impl_up(cuda_impl *c, int ordinal, char *err, size_t errlen) {
    int n = rt_cuda_device_count(err, errlen);
    if (n == 0) return -1;
    if (ordinal < 0 || ordinal >= n) {
        snprintf(err, errlen, "no CUDA device %d (the driver sees %d)", ordinal, n);
        return -1;
    }
    c->ordinal = ordinal;
    int major = 0, minor = 0;
    size_t mem = 0;
    char dname[128] = "";
    if (cuTry(rt_cu.cuDeviceGet(&c->dev, ordinal), err, errlen) ||
        cuTry(rt_cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, c->dev),
              err, errlen) ||
        cuTry(rt_cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, c->dev),
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
    return blas_up(c, err, errlen);
}

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
        fprintf(stderr, "dpc: cuda: device %d: %s (driver CUDA %d.%d, NVRTC %s)\n", ordinal, c->name,
                drv / 1000, drv % 1000 / 10, rt_nvrtc_version());
    }
    rt_backend *be = calloc(1, sizeof *be);
    RT_CHECK_ALLOC(be);
    be->name = "cuda";
    be->memory_bytes = (int64_t)c->memory;
    be->dialect = CG_DIALECT_CUDA;
    be->impl = c;
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->copy_in = cuda_copy_in;
    be->async_copy = 1;
    be->copy_out = cuda_copy_out;
    be->copy = cuda_copy;
    be->compile = cuda_compile;
    be->module_free = cuda_module_free;
    be->kernel = cuda_kernel;
    be->launch = cuda_launch;
    be->gemm = cuda_gemm;
    be->sync = cuda_sync;
    be->destroy = cuda_destroy;
    be->graph_begin = rt_cuda_graph_begin;
    be->graph_end = graph_end;
    be->graph_launch = graph_launch;
    be->graph_free = graph_free;
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

/* ---- CUDA graphs ------------------------------------------------------------------ */

static int need_cuda(const rt_backend *be, char *err, size_t errlen) {
    if (rt_backend_is_cuda(be)) return 0;
    snprintf(err, errlen, "CUDA graphs need the cuda backend (this is %s)", be ? be->name : "none");
    return -1;
}

int rt_cuda_graph_begin(rt_backend *be, char *err, size_t errlen) {
    if (need_cuda(be, err, errlen)) return -1;
    cuda_impl *c = impl_of(be);
    if (c->capturing) {
        snprintf(err, errlen, "a CUDA graph is already being captured");
        return -1;
    }
    use(c);
    /* Thread-local: only this thread's unsafe calls (a synchronous copy,
     * say) would break the capture; replicas on other threads may go on. */
    if (cuTry(rt_cu.cuStreamBeginCapture(c->compute, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), err,
              errlen))
        return -1;
    c->capturing = 1;
    return 0;
}

rt_cuda_graph *rt_cuda_graph_end(rt_backend *be, char *err, size_t errlen) {
    if (need_cuda(be, err, errlen)) return NULL;
    cuda_impl *c = impl_of(be);
    if (!c->capturing) {
        snprintf(err, errlen, "no CUDA graph is being captured");
        return NULL;
    }
    use(c);
    rt_cuda_graph *g = calloc(1, sizeof *g);
    RT_CHECK_ALLOC(g);
    CUresult r = rt_cu.cuStreamEndCapture(c->compute, &g->graph);
    c->capturing = 0;
    if (cuTry(r, err, errlen) ||
        cuTry(rt_cu.cuGraphGetNodes(g->graph, NULL, &g->nodes), err, errlen) ||
        cuTry(rt_cu.cuGraphInstantiate(&g->exec, g->graph, 0), err, errlen)) {
        rt_cuda_graph_free(be, g);
        return NULL;
    }
    return g;
}

int rt_cuda_graph_launch(rt_backend *be, rt_cuda_graph *g, char *err, size_t errlen) {
    if (need_cuda(be, err, errlen)) return -1;
    cuda_impl *c = impl_of(be);
    use(c);
    if (cuTry(rt_cu.cuGraphLaunch(g->exec, c->compute), err, errlen)) return -1;
    c->stats.graph_launches++;
    return 0;
}

void rt_cuda_graph_free(rt_backend *be, rt_cuda_graph *g) {
    if (!g) return;
    if (rt_backend_is_cuda(be)) {
        cuda_impl *c = impl_of(be);
        use(c);
        cuCheck(rt_cu.cuStreamSynchronize(c->compute)); /* not while it runs */
    }
    if (g->exec) rt_cu.cuGraphExecDestroy(g->exec);
    if (g->graph) rt_cu.cuGraphDestroy(g->graph);
    free(g);
}

int rt_cuda_graph_nodes(const rt_cuda_graph *g) { return g ? (int)g->nodes : 0; }

/* The backend table's graph hooks: the same graphs under backend.h's name. */
static rt_graph *graph_end(rt_backend *be, char *err, size_t errlen) {
    return (rt_graph *)rt_cuda_graph_end(be, err, errlen);
}
static int graph_launch(rt_backend *be, rt_graph *g, char *err, size_t errlen) {
    return rt_cuda_graph_launch(be, (rt_cuda_graph *)g, err, errlen);
}
static void graph_free(rt_backend *be, rt_graph *g) { rt_cuda_graph_free(be, (rt_cuda_graph *)g); }

/* ---- NCCL ------------------------------------------------------------------------- */

struct rt_nccl_comm {
    rt_backend *be;
    ncclComm_t comm;
    CUevent *bucket_done; /* by bucket id */
    int nbuckets;
};

int rt_nccl_version(int *version, char *err, size_t errlen) {
    char e[512];
    if (rt_nccl_load(e, sizeof e)) {
        snprintf(err, errlen, "cannot load NCCL %s: %s", rt_nccl_library(), e);
        return -1;
    }
    return ncclTry(rt_nccl.ncclGetVersion(version), err, errlen);
}

/* Loads NCCL and checks that bes are n cuda backends on distinct devices
 * (devs[i]: bes[i]'s); -1 + message. */
static int nccl_ranks_ok(rt_backend *const *bes, int n, int *devs, char *err, size_t errlen) {
    int v = 0;
    if (n < 1) {
        snprintf(err, errlen, "NCCL needs at least one rank (got %d)", n);
        return -1;
    }
    if (rt_nccl_version(&v, err, errlen)) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (!rt_backend_is_cuda(bes[i])) {
            snprintf(err, errlen, "NCCL rank %d is not on a cuda backend", i);
            rc = -1;
            break;
        }
        devs[i] = impl_of(bes[i])->ordinal;
        for (int j = 0; j < i; j++)
            if (devs[j] == devs[i]) {
                snprintf(err, errlen,
                         "NCCL ranks %d and %d share device %d: NCCL needs one rank per GPU "
                         "(reduce replicas of one device locally first)",
                         j, i, devs[i]);
                rc = -1;
            }
    }
    return rc;
}

static void wrap_comms(rt_backend *const *bes, int n, ncclComm_t *raw, rt_nccl_comm **comms) {
    for (int i = 0; i < n; i++) {
        comms[i] = calloc(1, sizeof **comms);
        RT_CHECK_ALLOC(comms[i]);
        comms[i]->be = bes[i];
        comms[i]->comm = raw[i];
    }
}

int rt_nccl_init_all(rt_backend *const *bes, int n, rt_nccl_comm **comms, char *err, size_t errlen) {
    int *devs = calloc((size_t)(n > 0 ? n : 1), sizeof *devs);
    ncclComm_t *raw = calloc((size_t)(n > 0 ? n : 1), sizeof *raw);
    RT_CHECK_ALLOC(devs);
    RT_CHECK_ALLOC(raw);
    int rc = nccl_ranks_ok(bes, n, devs, err, errlen);
    if (!rc) rc = ncclTry(rt_nccl.ncclCommInitAll(raw, n, devs), err, errlen);
    if (!rc) wrap_comms(bes, n, raw, comms);
    free(devs);
    free(raw);
    return rc;
}

_Static_assert(sizeof(ncclUniqueId) == RT_NCCL_ID_BYTES, "RT_NCCL_ID_BYTES is NCCL's id size");

int rt_nccl_unique_id(void *id, char *err, size_t errlen) {
    int v = 0;
    if (rt_nccl_version(&v, err, errlen)) return -1;
    ncclUniqueId u;
    if (ncclTry(rt_nccl.ncclGetUniqueId(&u), err, errlen)) return -1;
    memcpy(id, &u, sizeof u);
    return 0;
}

int rt_nccl_init_ranks(rt_backend *const *bes, int n, const void *id, int first, int nranks,
                       rt_nccl_comm **comms, char *err, size_t errlen) {
    int *devs = calloc((size_t)(n > 0 ? n : 1), sizeof *devs);
    ncclComm_t *raw = calloc((size_t)(n > 0 ? n : 1), sizeof *raw);
    RT_CHECK_ALLOC(devs);
    RT_CHECK_ALLOC(raw);
    int rc = nccl_ranks_ok(bes, n, devs, err, errlen);
    if (!rc && (first < 0 || first + n > nranks)) {
        snprintf(err, errlen, "NCCL ranks %d..%d of %d", first, first + n - 1, nranks);
        rc = -1;
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    /* One thread inits several ranks: NCCL wants them in one group, each
     * with its device's context current. */
    int grouped = !rc && !ncclTry(rt_nccl.ncclGroupStart(), err, errlen);
    if (!rc && !grouped) rc = -1;
    for (int i = 0; i < n && !rc; i++) {
        use(impl_of(bes[i]));
        rc = ncclTry(rt_nccl.ncclCommInitRank(&raw[i], nranks, u, first + i), err, errlen);
    }
    if (grouped && ncclTry(rt_nccl.ncclGroupEnd(), rc ? NULL : err, rc ? 0 : errlen)) rc = -1;
    if (!rc) wrap_comms(bes, n, raw, comms);
    free(devs);
    free(raw);
    return rc;
}

int rt_nccl_allreduce_sum(rt_nccl_comm *c, float *buf, size_t count, char *err, size_t errlen) {
    cuda_impl *ci = impl_of(c->be);
    use(ci);
    /* The gradient is complete when the compute stream gets here: the
     * all-reduce waits for that point only, not for later backward work. */
    if (cuTry(rt_cu.cuEventRecord(ci->ev_compute, ci->compute), err, errlen) ||
        cuTry(rt_cu.cuStreamWaitEvent(ci->comm, ci->ev_compute, 0), err, errlen) ||
        ncclTry(rt_nccl.ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c->comm, ci->comm), err,
                errlen) ||
        cuTry(rt_cu.cuEventRecord(ci->ev_comm, ci->comm), err, errlen))
        return -1;
    return 0;
}

int rt_nccl_join(rt_nccl_comm *c, char *err, size_t errlen) {
    cuda_impl *ci = impl_of(c->be);
    use(ci);
    /* ev_comm was last recorded after the latest all-reduce; the comm stream
     * runs in order, so waiting for it waits for all of them. */
    return cuTry(rt_cu.cuStreamWaitEvent(ci->compute, ci->ev_comm, 0), err, errlen);
}

int rt_nccl_bucket_start(rt_nccl_comm *c, int id, const void *const *src, void *const *dst,
                         const int64_t *count, int n, char *err, size_t errlen) {
    cuda_impl *ci = impl_of(c->be);
    use(ci);
    if (id < 0) {
        snprintf(err, errlen, "NCCL bucket %d", id);
        return -1;
    }
    while (c->nbuckets <= id) {
        c->bucket_done = realloc(c->bucket_done, sizeof *c->bucket_done * (size_t)(c->nbuckets + 1));
        RT_CHECK_ALLOC(c->bucket_done);
        c->bucket_done[c->nbuckets] = NULL;
        if (cuTry(rt_cu.cuEventCreate(&c->bucket_done[c->nbuckets], CU_EVENT_DISABLE_TIMING), err,
                  errlen))
            return -1;
        c->nbuckets++;
    }
    /* The bucket's gradients are complete at this point of the compute
     * stream; the communication stream waits for it and nothing later. */
    if (cuTry(rt_cu.cuEventRecord(ci->ev_compute, ci->compute), err, errlen) ||
        cuTry(rt_cu.cuStreamWaitEvent(ci->comm, ci->ev_compute, 0), err, errlen) ||
        ncclTry(rt_nccl.ncclGroupStart(), err, errlen))
        return -1;
    /* One group: NCCL fuses the pieces into few kernels, no packing copies. */
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = ncclTry(rt_nccl.ncclAllReduce(src[i], dst[i], (size_t)count[i], ncclFloat, ncclSum,
                                           c->comm, ci->comm),
                     err, errlen);
    if (ncclTry(rt_nccl.ncclGroupEnd(), rc ? NULL : err, rc ? 0 : errlen)) rc = -1;
    if (rc || cuTry(rt_cu.cuEventRecord(c->bucket_done[id], ci->comm), err, errlen) ||
        cuTry(rt_cu.cuEventRecord(ci->ev_comm, ci->comm), err, errlen))
        return -1;
    return 0;
}

int rt_nccl_bucket_join(rt_nccl_comm *c, int id, char *err, size_t errlen) {
    cuda_impl *ci = impl_of(c->be);
    if (id < 0 || id >= c->nbuckets) {
        snprintf(err, errlen, "NCCL bucket %d was never started", id);
        return -1;
    }
    use(ci);
    return cuTry(rt_cu.cuStreamWaitEvent(ci->compute, c->bucket_done[id], 0), err, errlen);
}

void rt_nccl_free(rt_nccl_comm *c) {
    if (!c) return;
    cuda_impl *ci = impl_of(c->be);
    use(ci);
    rt_cu.cuStreamSynchronize(ci->comm); /* no all-reduce of ours still queued */
    rt_nccl.ncclCommDestroy(c->comm);
    for (int i = 0; i < c->nbuckets; i++) rt_cu.cuEventDestroy(c->bucket_done[i]);
    free(c->bucket_done);
    free(c);
}

#else /* built without the CUDA toolkit */

#define NO_CUDA "this build has no CUDA backend (compiled without the CUDA toolkit)"

int rt_cuda_compiled(void) { return 0; }

int rt_cuda_device_count(char *why, size_t whylen) {
    snprintf(why, whylen, NO_CUDA);
    return 0;
}

rt_backend *rt_backend_cuda(int ordinal, char *err, size_t errlen) {
    (void)ordinal;
    snprintf(err, errlen, NO_CUDA);
    return NULL;
}

int rt_backend_is_cuda(const rt_backend *be) {
    (void)be;
    return 0;
}

int rt_cuda_graph_begin(rt_backend *be, char *err, size_t errlen) {
    (void)be;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

rt_cuda_graph *rt_cuda_graph_end(rt_backend *be, char *err, size_t errlen) {
    (void)be;
    snprintf(err, errlen, NO_CUDA);
    return NULL;
}

int rt_cuda_graph_launch(rt_backend *be, rt_cuda_graph *g, char *err, size_t errlen) {
    (void)be;
    (void)g;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

void rt_cuda_graph_free(rt_backend *be, rt_cuda_graph *g) {
    (void)be;
    (void)g;
}

int rt_cuda_graph_nodes(const rt_cuda_graph *g) {
    (void)g;
    return 0;
}

int rt_cuda_stats_get(const rt_backend *be, rt_cuda_stats *s) {
    (void)be;
    (void)s;
    return -1;
}

const char *rt_cuda_device_name(const rt_backend *be) {
    (void)be;
    return "";
}

int rt_cuda_device_ordinal(const rt_backend *be) {
    (void)be;
    return -1;
}

int rt_nccl_version(int *version, char *err, size_t errlen) {
    *version = 0;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

int rt_nccl_init_all(rt_backend *const *bes, int n, rt_nccl_comm **comms, char *err, size_t errlen) {
    (void)bes;
    (void)n;
    (void)comms;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

int rt_nccl_unique_id(void *id, char *err, size_t errlen) {
    (void)id;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

int rt_nccl_init_ranks(rt_backend *const *bes, int n, const void *id, int first, int nranks,
                       rt_nccl_comm **comms, char *err, size_t errlen) {
    (void)bes, (void)n, (void)id, (void)first, (void)nranks, (void)comms;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

int rt_nccl_allreduce_sum(rt_nccl_comm *c, float *buf, size_t count, char *err, size_t errlen) {
    (void)c;
    (void)buf;
    (void)count;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

int rt_nccl_join(rt_nccl_comm *c, char *err, size_t errlen) {
    (void)c;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

int rt_nccl_bucket_start(rt_nccl_comm *c, int id, const void *const *src, void *const *dst,
                         const int64_t *count, int n, char *err, size_t errlen) {
    (void)c, (void)id, (void)src, (void)dst, (void)count, (void)n;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

int rt_nccl_bucket_join(rt_nccl_comm *c, int id, char *err, size_t errlen) {
    (void)c, (void)id;
    snprintf(err, errlen, NO_CUDA);
    return -1;
}

void rt_nccl_free(rt_nccl_comm *c) { (void)c; }

#endif
