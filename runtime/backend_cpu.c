/* runtime/backend_cpu.c — the reference backend: host memory, generated C
 * compiled by the system compiler and dlopen'd, OpenBLAS for GEMMs. */
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/compile_cache.h"

typedef void (*cpu_kernel_fn)(void *const *args, long long count);

struct rt_kernel {
    cpu_kernel_fn fn;
    int nargs;
    struct rt_kernel *next; /* the module's list, freed with it */
};

struct rt_module {
    void *handle;
    char *path;
    struct rt_kernel *kernels;
};

int rt_debug_level(void) {
    const char *s = getenv("DPC_DEBUG");
    return s ? atoi(s) : 0;
}

/* 64-byte alignment: whole cache lines, and what AVX-512 loads like. */
static void *cpu_alloc(rt_backend *be, size_t bytes) {
    (void)be;
    size_t n = (bytes + 63) / 64 * 64;
    if (n == 0) n = 64;
    void *p = aligned_alloc(64, n);
    RT_CHECK_ALLOC(p);
    memset(p, 0, n);
    return p;
}

static void cpu_free(rt_backend *be, void *p) {
    (void)be;
    free(p);
}

static void cpu_copy(rt_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
}

static rt_module *cpu_compile(rt_backend *be, const char *source, char *err, size_t errlen) {
    (void)be;
    int debug = rt_debug_level(), hit = 0;
    if (debug >= 2) fprintf(stderr, "dpc: cpu: generated source:\n%s\n", source);
    char *path = rt_cache_compile_c(source, &hit, err, errlen);
    if (!path) {
        fprintf(stderr, "dpc: error: %s\n", err);
        return NULL;
    }
    /* RTLD_NODELETE: the module's OpenMP threads (libgomp, pulled in by the
     * module) must never be unloaded under them. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        snprintf(err, errlen, "dlopen %s: %s", path, dlerror());
        free(path);
        return NULL;
    }
    if (debug >= 1) fprintf(stderr, "dpc: cpu: module %s (%s)\n", path, hit ? "cache hit" : "compiled");
    rt_module *m = calloc(1, sizeof *m);
    RT_CHECK_ALLOC(m);
    m->handle = h;
    m->path = path;
    return m;
}

static void cpu_module_free(rt_backend *be, rt_module *m) {
    (void)be;
    if (!m) return;
    while (m->kernels) {
        struct rt_kernel *k = m->kernels;
        m->kernels = k->next;
        free(k);
    }
    if (dlclose(m->handle)) RT_FAIL("dlclose %s: %s", m->path, dlerror());
    free(m->path);
    free(m);
}

static rt_kernel *cpu_kernel(rt_backend *be, rt_module *m, const char *name, int nargs, char *err,
                             size_t errlen) {
    (void)be;
    dlerror();
    void *sym = dlsym(m->handle, name);
    if (!sym) {
        const char *why = dlerror();
        snprintf(err, errlen, "kernel %s not in %s: %s", name, m->path, why ? why : "null symbol");
        return NULL;
    }
    rt_kernel *k = calloc(1, sizeof *k);
    RT_CHECK_ALLOC(k);
    k->fn = (cpu_kernel_fn)sym;
    k->nargs = nargs;
    k->next = m->kernels;
    m->kernels = k;
    return k;
}

static int cpu_launch(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                      char *err, size_t errlen) {
    (void)be;
    if (nargs != k->nargs) {
        snprintf(err, errlen, "kernel launched with %d buffers, takes %d", nargs, k->nargs);
        return -1;
    }
    if (count > 0) k->fn(args, (long long)count);
    return 0;
}

static int cpu_gemm(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C,
                    char *err, size_t errlen) {
    (void)be;
    (void)err;
    (void)errlen;
    for (int64_t b = 0; b < d->batch; b++)
        cblas_sgemm(CblasColMajor, d->transa ? CblasTrans : CblasNoTrans,
                    d->transb ? CblasTrans : CblasNoTrans, (int)d->m, (int)d->n, (int)d->k,
                    d->alpha, A + d->off_a + b * d->stride_a, (int)d->lda,
                    B + d->off_b + b * d->stride_b, (int)d->ldb, d->beta,
                    C + d->off_c + b * d->stride_c, (int)d->ldc);
    return 0;
}

static int cpu_sync(rt_backend *be, char *err, size_t errlen) {
    (void)be;
    (void)err;
    (void)errlen;
    return 0;
}

static void cpu_destroy(rt_backend *be) { free(be); }

/* Generated kernels use OpenMP, GEMMs use OpenBLAS's own thread pool. With
 * libgomp's default spin-waiting, idle OpenMP workers burn the cores the
 * next GEMM needs (measured: 8x slower ResNet-18 steps on 2 cores). So,
 * unless the user chose a policy, OpenMP workers sleep when idle. This must
 * happen before the first module pulls libgomp in, which reads it once. */
static void default_omp_policy(void) {
    if (!getenv("OMP_WAIT_POLICY")) setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
}

rt_backend *rt_backend_cpu(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, default_omp_policy);
    rt_backend *be = calloc(1, sizeof *be);
    RT_CHECK_ALLOC(be);
    be->name = "cpu";
    be->dialect = CG_DIALECT_C;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->copy_in = cpu_copy;
    be->copy_out = cpu_copy;
    be->copy = cpu_copy;
    be->compile = cpu_compile;
    be->module_free = cpu_module_free;
    be->kernel = cpu_kernel;
    be->launch = cpu_launch;
    be->gemm = cpu_gemm;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    return be;
}

void rt_backend_free(rt_backend *be) {
    if (be) be->destroy(be);
}
