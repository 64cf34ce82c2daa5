/* runtime/device/cpu.c — the reference backend: host memory, generated C
 * compiled by the system compiler and dlopen'd, OpenBLAS for GEMMs.
 *
 * Threads: one pool, ours, runs both the generated kernels (each kernel
 * computes a range of its iterations, so the pool splits [0, count)) and
 * the GEMMs (split into row or column blocks, each a single-threaded
 * cblas_sgemm). Two pools used to share the cores — libgomp's for kernels
 * and OpenBLAS's for GEMMs — and each one's idle workers spun (OpenBLAS's
 * with sched_yield for about 0.1 s after every GEMM) on the cores the other
 * needed, and on a machine with few cores a good part of a step's CPU time
 * went to sched_yield. Our workers spin only briefly after a job (the next kernel is
 * usually microseconds away), then sleep on a condition variable.
 * Thread count: DPC_THREADS, else OMP_NUM_THREADS, else the CPUs this
 * process may run on. */
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "runtime/env.h"
#include "format/bf16.h"
#include "format/tf32.h"
#include "runtime/device/device.h"
#include "runtime/device/onednn.h"
#include "runtime/check.h"
#include "runtime/log.h"

/* The generated C ABI (format/program.h): iterations [lo, hi) of count. */
typedef void (*cpu_kernel_fn)(void *const *args, long long count, long long lo, long long hi);

struct rt_kernel {
    cpu_kernel_fn fn;
    long long grain; /* fewer iterations than this run on one thread */
    int nargs;
    struct rt_kernel *next; /* the module's list, freed with it */
};

/* ---- the thread pool -------------------------------------------------------------- */

/* A job is `parts` independent parts; every thread of the pool (the caller
 * too) claims parts one at a time from a shared ticket until none is left.
 * Claiming, not a fixed part per thread, matters on a shared machine: a
 * worker the OS has descheduled holds up nothing it has not claimed (with
 * a fixed split the caller waited for it at every kernel, and on a loaded
 * machine one thread beat two). */
typedef void (*pool_task)(void *ctx, int part, int parts);

typedef struct {
    int n;              /* threads, the caller included */
    pthread_mutex_t mu; /* guards sleeping and waking */
    pthread_cond_t job_cv, done_cv;
    /* The current job: generation (32 bits) | parts (16) | next part (16).
     * One word, so a worker that wakes late can never claim a part of a
     * job that is not the one it read. */
    _Atomic uint64_t ticket;
    atomic_int done; /* parts finished */
    atomic_int busy; /* a caller owns the pool */
    uint32_t gen;    /* the caller's job counter */
    pool_task fn;
    void *ctx;
} cpu_pool;

static cpu_pool pool;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* Spin this many rounds for the next job before sleeping: a few tens of
 * microseconds, the usual gap between two kernels of a step. */
#define POOL_SPIN 4000
#define MAX_PARTS 4096

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint32_t ticket_gen(uint64_t t) { return (uint32_t)(t >> 32); }

/* The next part of job g, or -1 when g is over or fully claimed. */
static int claim(uint32_t g, int *parts) {
    uint64_t t = atomic_load_explicit(&pool.ticket, memory_order_acquire);
    for (;;) {
        int np = (int)((t >> 16) & 0xffff), next = (int)(t & 0xffff);
        if (ticket_gen(t) != g || next >= np) return -1;
        if (atomic_compare_exchange_weak_explicit(&pool.ticket, &t, t + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *parts = np;
            return next;
        }
    }
}

/* Flush-to-zero and denormals-are-zero (rt_cpu_flush_denormals): MXCSR is
 * per thread, so every thread that runs kernels (the caller of a launch,
 * the pool's workers before each job) sets its own from this; -1: leave
 * it as the thread has it. */
static atomic_int flush_mode = -1;

static void apply_flush(void) {
#if defined(__SSE2__)
    int want = atomic_load_explicit(&flush_mode, memory_order_relaxed);
    if (want < 0) return;
    unsigned m = _mm_getcsr(), bits = 0x8040u; /* FTZ bit 15, DAZ bit 6 */
    unsigned set = want ? m | bits : m & ~bits;
    if (set != m) _mm_setcsr(set);
#endif
}

int rt_cpu_flush_denormals(int on) {
    int was = atomic_exchange(&flush_mode, on ? 1 : 0);
    apply_flush();
    return was;
}

/* Runs the parts of job g this thread can claim. */
static void work(uint32_t g) {
    int part, parts;
    apply_flush();
    while ((part = claim(g, &parts)) >= 0) {
        /* a claimed, unfinished part keeps job g (and fn, ctx) alive */
        pool.fn(pool.ctx, part, parts);
        if (atomic_fetch_add_explicit(&pool.done, 1, memory_order_acq_rel) + 1 == parts) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.done_cv);
            pthread_mutex_unlock(&pool.mu);
        }
    }
}

static void *pool_worker(void *arg) {
    (void)arg;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g = ticket_gen(atomic_load_explicit(&pool.ticket, memory_order_acquire));
        for (int spin = 0; g == seen && spin < POOL_SPIN; spin++) {
            cpu_relax();
            g = ticket_gen(atomic_load_explicit(&pool.ticket, memory_order_acquire));
        }
        if (g == seen) {
            pthread_mutex_lock(&pool.mu);
            while ((g = ticket_gen(atomic_load_explicit(&pool.ticket, memory_order_acquire))) ==
                   seen)
                pthread_cond_wait(&pool.job_cv, &pool.mu);
            pthread_mutex_unlock(&pool.mu);
        }
        seen = g;
        work(g);
    }
    return NULL;
}

static void pool_start(void) {
    int n = rt_env_int("DPC_THREADS", 0);
    if (!n) n = rt_env_int("OMP_NUM_THREADS", 0);
    if (!n) {
        cpu_set_t set;
        n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    }
    if (n < 1) n = 1;
    /* GEMMs are split here; OpenBLAS runs each block on the calling thread,
     * and its own workers go to sleep for good. */
    openblas_set_num_threads(1);
    pool.n = n;
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.job_cv, NULL);
    pthread_cond_init(&pool.done_cv, NULL);
    for (int i = 1; i < n; i++) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, (size_t)16 << 20); /* room for kernels' local arrays */
        if (pthread_create(&th, &attr, pool_worker, NULL)) RT_FAIL("pthread_create failed");
        pthread_attr_destroy(&attr);
        pthread_detach(th);
    }
}

/* Runs fn(ctx, part, parts) for every part in [0, parts) on the pool and
 * returns when all are done. A second caller while the pool is busy
 * (replicas on threads of their own) runs every part itself. */
static void pool_run(pool_task fn, void *ctx, int parts) {
    int expect = 0;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    if (pool.n == 1 || parts == 1 || !atomic_compare_exchange_strong(&pool.busy, &expect, 1)) {
        for (int p = 0; p < parts; p++) fn(ctx, p, parts);
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    uint32_t g = ++pool.gen;
    if (g == 0) g = ++pool.gen; /* 0 is what workers start out having seen */
    pthread_mutex_lock(&pool.mu);
    atomic_store_explicit(&pool.ticket, (uint64_t)g << 32 | (uint64_t)parts << 16,
                          memory_order_release);
    pthread_cond_broadcast(&pool.job_cv);
    pthread_mutex_unlock(&pool.mu);
    work(g);
    for (int spin = 0;
         atomic_load_explicit(&pool.done, memory_order_acquire) < parts && spin < POOL_SPIN; spin++)
        cpu_relax();
    if (atomic_load_explicit(&pool.done, memory_order_acquire) < parts) {
        pthread_mutex_lock(&pool.mu);
        while (atomic_load_explicit(&pool.done, memory_order_acquire) < parts)
            pthread_cond_wait(&pool.done_cv, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
    }
    atomic_store_explicit(&pool.busy, 0, memory_order_release);
}

/* [lo, hi) of part p of n equal parts of count, boundaries on multiples of
 * `align` (so parallel GEMM blocks start on whole micro-tiles). */
static void part_range(int64_t count, int p, int n, int64_t align, int64_t *lo, int64_t *hi) {
    int64_t units = (count + align - 1) / align;
    *lo = units * p / n * align;
    *hi = units * (p + 1) / n * align;
    if (*lo > count) *lo = count;
    if (*hi > count) *hi = count;
}

struct rt_module {
    void *handle;
    char *path;
    struct rt_kernel *kernels;
};

int rt_debug_level(void) { return rt_env_int("DPC_DEBUG", 0); }

/* 64-byte alignment: whole cache lines, and what AVX-512 loads like. */
static void *cpu_alloc(rt_backend *be, size_t bytes, char *err, size_t errlen) {
    (void)be;
    size_t n = (bytes + 63) / 64 * 64;
    if (n == 0) n = 64;
    void *p = aligned_alloc(64, n);
    if (!p) {
        base_fail(err, errlen, "cpu: out of host memory: %zu bytes asked", n);
        return NULL;
    }
    memset(p, 0, n);
    return p;
}

static void cpu_free(rt_backend *be, void *p) {
    (void)be;
    free(p);
}

static int cpu_copy(rt_backend *be, void *dst, const void *src, size_t bytes, char *err,
                    size_t errlen) {
    (void)be, (void)err, (void)errlen;
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

static rt_module *cpu_compile(rt_backend *be, const char *source, char *err, size_t errlen) {
    (void)be;
    int debug = rt_debug_level(), hit = 0;
    if (debug >= 2) rt_log(RT_LOG_INFO, "cpu: generated source:\n%s", source);
    /* RTLD_NODELETE: a module stays mapped for the process's lifetime, so
     * a kernel pointer can never outlive its code. */
    rt_cache c;
    char *path = NULL;
    void *h = rt_cache_open(&c, err, errlen)
                  ? NULL
                  : rt_cache_load_c(&c, source, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE, &hit, &path,
                                    err, errlen);
    rt_cache_close(&c);
    if (!h) return NULL; /* err says why; the caller reports it */
    if (debug >= 1)
        rt_log(RT_LOG_INFO, "cpu: module %s (%s)", path, hit ? "cache hit" : "compiled");
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
        base_fail(err, errlen, "kernel %s not in %s: %s", name, m->path, why ? why : "null symbol");
        return NULL;
    }
    char gname[256];
    snprintf(gname, sizeof gname, "%s_grain", name);
    const long long *grain = dlsym(m->handle, gname);
    if (!grain) {
        base_fail(err, errlen, "kernel %s in %s has no %s (a module from another dpc?)", name,
                  m->path, gname);
        return NULL;
    }
    rt_kernel *k = calloc(1, sizeof *k);
    RT_CHECK_ALLOC(k);
    k->fn = (cpu_kernel_fn)sym;
    k->grain = *grain > 0 ? *grain : 1;
    k->nargs = nargs;
    k->next = m->kernels;
    m->kernels = k;
    return k;
}

typedef struct {
    const rt_kernel *k;
    void *const *args;
    int64_t count;
} launch_job;

static void launch_part(void *ctx, int p, int n) {
    const launch_job *j = ctx;
    int64_t lo, hi;
    part_range(j->count, p, n, 1, &lo, &hi);
    if (lo < hi) j->k->fn(j->args, (long long)j->count, (long long)lo, (long long)hi);
}

static int cpu_launch(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                      const cg_launch *geometry, char *err, size_t errlen) {
    (void)be, (void)geometry; /* the thread pool splits count itself */
    if (nargs != k->nargs) {
        return base_fail(err, errlen, "kernel launched with %d buffers, takes %d", nargs, k->nargs);
    }
    if (count <= 0) return 0;
    apply_flush(); /* this caller may be a replica's thread */
    if (count < k->grain || pool.n == 1) {
        k->fn(args, (long long)count, 0, (long long)count);
        return 0;
    }
    /* a few parts per thread, so a thread held up elsewhere costs little */
    launch_job j = {k, args, count};
    int64_t parts = 4 * (int64_t)pool.n;
    if (parts > count / (k->grain > 1 ? k->grain / 2 : 1))
        parts = count / (k->grain > 1 ? k->grain / 2 : 1);
    if (parts < pool.n) parts = pool.n;
    pool_run(launch_part, &j, (int)(parts < count ? parts : count));
    return 0;
}

typedef struct {
    const cg_gemm *d;
    const float *A, *B;
    float *C;
    int split_m; /* 1: blocks of C's rows, 0: of its columns */
} gemm_job;

static _Atomic int sum_order = -1; /* rt_sum_order; -1: not yet read from the environment */

static rt_sum_order current_sum_order(void) {
    int o = sum_order;
    if (o < 0) {
        const char *e = getenv("DPC_CPU_SUM_ORDER");
        o = e && !strcmp(e, "split-k") ? RT_SUM_ORDER_SPLIT_K : RT_SUM_ORDER_DEFAULT;
        sum_order = o;
    }
    return (rt_sum_order)o;
}

rt_sum_order rt_cpu_set_sum_order(rt_sum_order order) {
    rt_sum_order was = current_sum_order();
    sum_order = order;
    return was;
}

static void sgemm(const cg_gemm *d, int64_t m, int64_t n, const float *A, const float *B,
                  float *C) {
    CBLAS_TRANSPOSE ta = d->transa ? CblasTrans : CblasNoTrans,
                    tb = d->transb ? CblasTrans : CblasNoTrans;
    int64_t k1 = d->k / 2;
    if (current_sum_order() != RT_SUM_ORDER_SPLIT_K || k1 == 0) {
        cblas_sgemm(CblasColMajor, ta, tb, (int)m, (int)n, (int)d->k, d->alpha, A, (int)d->lda, B,
                    (int)d->ldb, d->beta, C, (int)d->ldc);
        return;
    }
    /* C = alpha op(A)[:, :k1] op(B)[:k1, :] + beta C, then the rest added on. */
    int64_t a2 = d->transa ? k1 : k1 * d->lda, b2 = d->transb ? k1 * d->ldb : k1;
    cblas_sgemm(CblasColMajor, ta, tb, (int)m, (int)n, (int)k1, d->alpha, A, (int)d->lda, B,
                (int)d->ldb, d->beta, C, (int)d->ldc);
    cblas_sgemm(CblasColMajor, ta, tb, (int)m, (int)n, (int)(d->k - k1), d->alpha, A + a2,
                (int)d->lda, B + b2, (int)d->ldb, 1.0f, C, (int)d->ldc);
}

/* Part p of every batch entry: rows [lo, hi) of C take rows of op(A);
 * columns take columns of op(B). */
static void gemm_part(void *ctx, int p, int parts) {
    const gemm_job *j = ctx;
    const cg_gemm *d = j->d;
    int64_t lo, hi;
    part_range(j->split_m ? d->m : d->n, p, parts, 16, &lo, &hi);
    if (lo >= hi) return;
    for (int64_t b = 0; b < d->batch; b++) {
        const float *A = j->A + d->off_a + b * d->stride_a, *B = j->B + d->off_b + b * d->stride_b;
        float *C = j->C + d->off_c + b * d->stride_c;
        if (j->split_m)
            sgemm(d, hi - lo, d->n, A + (d->transa ? lo * d->lda : lo), B, C + lo);
        else
            sgemm(d, d->m, hi - lo, A, B + (d->transb ? lo : lo * d->ldb), C + lo * d->ldc);
    }
}

/* The elements [off, end) of a bf16 operand as floats (a new buffer). */
static float *widen(const void *base, int64_t off, int64_t end) {
    const bf16_t *h = (const bf16_t *)base + off;
    float *f = malloc(sizeof(float) * (size_t)(end - off + 1));
    RT_CHECK_ALLOC(f);
    for (int64_t i = 0; i < end - off; i++) f[i] = dpc_bf16_to_f32(h[i]);
    return f;
}

static int gemm_f32(const cg_gemm *d, const float *A, const float *B, float *C);

/* bf16 operands: widened to float (exact), an f32 GEMM, and a bf16 C
 * rounded to nearest even once at the end: correct, not fast (a GPU's
 * tensor cores are what bf16 is for). */
static int gemm_mixed(const cg_gemm *d, const void *A, const void *B, void *C, char *err,
                      size_t errlen) {
    int64_t ea = cg_gemm_extent(d, 'a'), eb = cg_gemm_extent(d, 'b'), ec = cg_gemm_extent(d, 'c');
    if (ea < 0 || eb < 0 || ec < 0) {
        return base_fail(err, errlen, "gemm: extents overflow");
    }
    cg_gemm w = *d;
    float *fa = NULL, *fb = NULL, *fc = NULL;
    if (d->type_a == IR_BF16) {
        fa = widen(A, d->off_a, ea);
        fb = widen(B, d->off_b, eb);
        w.off_a = w.off_b = 0;
    }
    if (d->type_c == IR_BF16) {
        fc = widen(C, d->off_c, ec); /* what lies between columns stays as it was */
        w.off_c = 0;
    }
    gemm_f32(&w, fa ? fa : A, fb ? fb : B, fc ? fc : C);
    if (fc) {
        bf16_t *h = (bf16_t *)C + d->off_c;
        for (int64_t i = 0; i < ec - d->off_c; i++) h[i] = dpc_f32_to_bf16(fc[i]);
    }
    free(fa);
    free(fb);
    free(fc);
    return 0;
}

/* The elements [off, end) of an f32 operand rounded to TF32 (a new buffer). */
static float *round_tf32(const float *base, int64_t off, int64_t end) {
    float *f = malloc(sizeof(float) * (size_t)(end - off + 1));
    RT_CHECK_ALLOC(f);
    for (int64_t i = 0; i < end - off; i++) f[i] = dpc_f32_round_tf32(base[off + i]);
    return f;
}

/* A TF32 GEMM (--precision tf32) as tensor cores compute it: A and B
 * rounded to TF32 (format/tf32.h), the products summed in f32. */
static int gemm_tf32(const cg_gemm *d, const float *A, const float *B, float *C, char *err,
                     size_t errlen) {
    int64_t ea = cg_gemm_extent(d, 'a'), eb = cg_gemm_extent(d, 'b');
    if (ea < 0 || eb < 0) {
        return base_fail(err, errlen, "gemm: extents overflow");
    }
    cg_gemm w = *d;
    float *fa = round_tf32(A, d->off_a, ea), *fb = round_tf32(B, d->off_b, eb);
    w.off_a = w.off_b = 0;
    gemm_f32(&w, fa, fb, C);
    free(fa);
    free(fb);
    return 0;
}

static int cpu_gemm(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C,
                    char *err, size_t errlen) {
    (void)be;
    apply_flush();
    if (d->type_a != IR_F32 || d->type_b != IR_F32 || d->type_c != IR_F32)
        return gemm_mixed(d, A, B, C, err, errlen);
    if (d->tf32) return gemm_tf32(d, A, B, C, err, errlen);
    return gemm_f32(d, A, B, C);
}

/* How many blocks a GEMM is split into: a function of its shape alone,
 * never of the thread count. OpenBLAS may round a block's elements
 * differently from the whole product's (other kernels and blocking at other
 * sizes), so a split that followed the threads made results depend on the
 * machine and on how many replicas share it (seen: --gpus 4 in one process
 * and mpirun -np 2 --gpus 2 differed from the second step on). One part
 * per 2^18 multiply-adds, blocks of at least 16 rows or columns, at most
 * GEMM_MAX_PARTS: enough to keep a few cores busy, few enough that
 * re-packing the unsplit operand per block stays cheap. */
enum { GEMM_MAX_PARTS = 8 };

static int gemm_parts(const cg_gemm *d, int64_t split) {
    if (split < 32) return 1;
    int64_t parts = d->m * d->n * d->k >> 18, blocks = (split + 15) / 16;
    if (parts > GEMM_MAX_PARTS) parts = GEMM_MAX_PARTS;
    if (parts > blocks) parts = blocks;
    return parts < 1 ? 1 : (int)parts;
}

static int gemm_f32(const cg_gemm *d, const float *A, const float *B, float *C) {
    /* Split the larger of m and n: every block then re-packs the smaller
     * operand (the weights, mostly) and its own share of the larger one. */
    gemm_job j = {d, A, B, C, d->m >= d->n};
    pool_run(gemm_part, &j, gemm_parts(d, j.split_m ? d->m : d->n));
    return 0;
}

static int cpu_conv(rt_backend *be, const cg_conv *d, void *out, const void *in, const void *in2,
                    char *err, size_t errlen) {
    (void)be;
    apply_flush();
    if (d->tf32) return 1; /* oneDNN has no TF32 here: the alternative's TF32 GEMMs */
    if (current_sum_order() == RT_SUM_ORDER_SPLIT_K) return 1; /* im2col's GEMMs: another order */
    /* A dense product (a window over the whole plane) multiplies no padding
     * and beat oneDNN on every CPU measured, so the library's plain call
     * runs it; --conv auto still times the two. */
    if (d->dense && !d->tune) return 1;
    return rt_onednn_conv(d, out, in, in2, pool_run, err, errlen);
}

static int cpu_sync(rt_backend *be, char *err, size_t errlen) {
    (void)be;
    (void)err;
    (void)errlen;
    return 0;
}

static void cpu_destroy(rt_backend *be) { free(be); }

/* The cpu backend: host memory, one device (the host), host collectives. */
static const rt_backend cpu_table = {
    .name = "cpu",
    .dialect = CG_DIALECT_C,
    .host_memory = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_in = cpu_copy,
    .copy_out = cpu_copy,
    .copy = cpu_copy,
    .compile = cpu_compile,
    .module_free = cpu_module_free,
    .kernel = cpu_kernel,
    .launch = cpu_launch,
    .gemm = cpu_gemm,
    .conv = cpu_conv,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
};

int rt_cpu_threads(void) {
    pthread_once(&pool_once, pool_start);
    return pool.n;
}

rt_backend *rt_backend_cpu(void) {
    pthread_once(&pool_once, pool_start);
    rt_backend *be = calloc(1, sizeof *be);
    RT_CHECK_ALLOC(be);
    *be = cpu_table;
    return be;
}

void rt_backend_free(rt_backend *be) {
    if (be) be->destroy(be);
}
