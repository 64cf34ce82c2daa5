/* runtime/cuda/cudnn.c — library convolutions of the cuda backend: a
 * cg_conv descriptor (format/program.h) run by cuDNN's convolution API
 * on the compute stream, and the table's conv (device.h).
 *
 * Tensors are NCHW and weights KCRS (C/G channels each when grouped, with
 * the group count on the convolution descriptor), as the plan lays them out; the
 * arithmetic is the plan's: f32 on the FMA units, TF32 where the plan says
 * tf32 (--precision tf32), or bf16 with f32 accumulation on tensor cores.
 * The weight gradient of --precision bf16 (bf16 x and dy, f32 dw for the
 * f32 master weights) is not a cuDNN call: cuDNN computes dw in bf16 into
 * the workspace's tail and a kernel of this file widens it to f32, as
 * autocast's weight gradient is a bf16 one cast to f32
 * (cg_conv_compute_type). Any other mix runs its im2col alternative.
 *
 * The algorithm is chosen once per descriptor in the process and shared by
 * every device, so replicas run the same arithmetic:
 *   - by cuDNN's heuristics (no device work, the same on every run of the
 *     same device and library), or
 *   - for a tuned descriptor (dpc --conv auto), by measurement
 *     (cudnnFind*AlgorithmEx, as cudnn.benchmark does), kept in the
 *     machine's tuning record (runtime/device/tune.c: this GPU and this
 *     cuDNN), so later processes take it without measuring; a recorded
 *     algorithm is used only when the heuristics still list it as below,
 * always among the deterministic algorithms whose workspace fits under a
 * cap, so a plan and seed give the same bits run after run (unless dprun
 * --nondeterministic lets the non-deterministic ones in). The choice is
 * made in an eager step (the executor never captures a program's first
 * run); a descriptor first met while capturing runs its alternative. Each
 * device holds one workspace, grown in eager steps to the largest need;
 * a workspace a captured graph may still use is kept until teardown. */
#ifdef DPC_HAVE_CUDA

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"
#include "runtime/cuda/internal.h"
#include "runtime/env.h"
#include "runtime/log.h"

/* A descriptor's cuDNN objects and algorithm (algo < 0: none fits, the
 * alternative runs). Host objects, valid with any handle. */
typedef struct dnn_conv {
    cg_conv d;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int algo;
    size_t ws;
    int nondeterministic; /* chosen where rt_conv_nondeterministic() allowed them */
    int racy;             /* the algorithm is one of them */
    const char *how;      /* "measured", "recorded" (tuned), or "heuristics" */
    int failed;           /* cuDNN failed it once: declined from then on (atomic) */
    struct dnn_conv *next;
} dnn_conv;

static pthread_mutex_t dnn_mu = PTHREAD_MUTEX_INITIALIZER;
static dnn_conv *dnn_convs;

/* The cuDNN data type of a call; -1 when cuDNN has no such call. */
static int dnn_type(const cg_conv *d) {
    int t = cg_conv_compute_type(d);
    return t == IR_F32 ? CUDNN_DATA_FLOAT : t == IR_BF16 ? CUDNN_DATA_BFLOAT16 : -1;
}

/* The widening: a grid-stride loop over the gradient's elements (bf16 is
 * f32's upper half, so widening is exact). Compiled once per device, in an
 * eager step, and cached like the plan's kernels. */
static const char widen_source[] =
    "/* dpc runtime/cuda/cudnn.c: a bf16 weight gradient widened to f32 */\n"
    "typedef long long idx_t;\n"
    "extern \"C\" __global__ void dpc_widen_bf16(float *__restrict__ y,\n"
    "                                            const unsigned short *__restrict__ x,\n"
    "                                            idx_t count) {\n"
    "    for (idx_t i = (idx_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;\n"
    "         i += (idx_t)gridDim.x * blockDim.x)\n"
    "        y[i] = __uint_as_float((unsigned)x[i] << 16);\n"
    "}\n";

static int widen_ready(rt_backend *be, cuda_impl *c, char *err, size_t errlen) {
    if (c->widen) return 0;
    if (!c->widen_mod && !(c->widen_mod = cuda_compile(be, widen_source, err, errlen))) return -1;
    c->widen = cuda_kernel(be, c->widen_mod, "dpc_widen_bf16", 2, err, errlen);
    return c->widen ? 0 : -1;
}

/* The most workspace one convolution may take: an algorithm needing more
 * is passed over for a slower one. */
static size_t ws_cap(const cuda_impl *c) {
    size_t cap = c->memory / 16;
    return cap > ((size_t)1 << 30) ? (size_t)1 << 30 : cap;
}

static void dnn_conv_free(dnn_conv *e) {
    if (e->x) rt_cudnn.cudnnDestroyTensorDescriptor(e->x);
    if (e->y) rt_cudnn.cudnnDestroyTensorDescriptor(e->y);
    if (e->w) rt_cudnn.cudnnDestroyFilterDescriptor(e->w);
    if (e->conv) rt_cudnn.cudnnDestroyConvolutionDescriptor(e->conv);
    free(e);
}

static int set_descriptors(dnn_conv *e, char *err, size_t errlen) {
    const cg_conv *d = &e->d;
    cudnnDataType_t t = (cudnnDataType_t)dnn_type(d);
    /* f32 stays on the FMA units unless the plan says tf32: cuDNN's
     * default math lets Ampere and later round f32 inputs to TF32. */
    cudnnMathType_t math = t != CUDNN_DATA_FLOAT ? CUDNN_TENSOR_OP_MATH
                           : d->tf32             ? CUDNN_DEFAULT_MATH
                                                 : CUDNN_FMA_MATH;
    return cudnnTry(rt_cudnn.cudnnCreateTensorDescriptor(&e->x), err, errlen) ||
           cudnnTry(rt_cudnn.cudnnCreateTensorDescriptor(&e->y), err, errlen) ||
           cudnnTry(rt_cudnn.cudnnCreateFilterDescriptor(&e->w), err, errlen) ||
           cudnnTry(rt_cudnn.cudnnCreateConvolutionDescriptor(&e->conv), err, errlen) ||
           cudnnTry(rt_cudnn.cudnnSetTensor4dDescriptor(e->x, CUDNN_TENSOR_NCHW, t, (int)d->N,
                                                        (int)d->C, (int)d->H, (int)d->W),
                    err, errlen) ||
           cudnnTry(rt_cudnn.cudnnSetTensor4dDescriptor(e->y, CUDNN_TENSOR_NCHW, t, (int)d->N,
                                                        (int)d->K, (int)d->Ho, (int)d->Wo),
                    err, errlen) ||
           cudnnTry(rt_cudnn.cudnnSetFilter4dDescriptor(e->w, t, CUDNN_TENSOR_NCHW, (int)d->K,
                                                        (int)(d->C / d->G), (int)d->kh, (int)d->kw),
                    err, errlen) ||
           cudnnTry(rt_cudnn.cudnnSetConvolution2dDescriptor(
                        e->conv, (int)d->ph, (int)d->pw, (int)d->sh, (int)d->sw, 1, 1,
                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                    err, errlen) ||
           cudnnTry(rt_cudnn.cudnnSetConvolutionMathType(e->conv, math), err, errlen) ||
           cudnnTry(rt_cudnn.cudnnSetConvolutionGroupCount(e->conv, (int)d->G), err, errlen);
}

/* One candidate algorithm, whichever call it came from. */
typedef struct {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t determinism;
} candidate;
#define CANDIDATES(perf, n, out)                                                            \
    for (int i_ = 0; i_ < (n); i_++)                                                        \
        (out)[i_] = (candidate){(int)(perf)[i_].algo, (perf)[i_].status, (perf)[i_].memory, \
                                (perf)[i_].determinism};

/* What dpc runs: an algorithm that succeeded, is deterministic (unless
 * the run allows otherwise) and fits under cap. */
static int usable(const candidate *p, size_t cap, int nondeterministic) {
    return p->status == CUDNN_STATUS_SUCCESS &&
           (nondeterministic || p->determinism == CUDNN_DETERMINISTIC) && p->memory <= cap;
}

/* The first of n candidates (best first) that is usable: its index, or -1. */
static int pick(const candidate *p, int n, size_t cap, int nondeterministic) {
    for (int i = 0; i < n; i++)
        if (usable(&p[i], cap, nondeterministic)) return i;
    return -1;
}

#define MAX_CANDIDATES (CUDNN_CONVOLUTION_FWD_ALGO_COUNT + CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT)

/* e's candidates into cand (*n of them, best first): measured on the
 * call's own buffers with workspace ws (out is overwritten; the call runs
 * again after), or by the heuristics (no device work). */
static int candidates(cuda_impl *c, dnn_conv *e, int measure, void *out, const void *in,
                      const void *in2, void *ws, size_t ws_size, candidate *cand, int *count,
                      char *err, size_t errlen) {
    int n = 0, rc = 0;
    if (e->d.dir == CG_CONV_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        rc = measure ? cudnnTry(rt_cudnn.cudnnFindConvolutionForwardAlgorithmEx(
                                    c->dnn, e->x, in, e->w, in2, e->conv, e->y, out,
                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, p, ws, ws_size),
                                err, errlen)
                     : cudnnTry(rt_cudnn.cudnnGetConvolutionForwardAlgorithm_v7(
                                    c->dnn, e->x, e->w, e->conv, e->y,
                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, p),
                                err, errlen);
        CANDIDATES(p, rc ? 0 : n, cand)
    } else if (e->d.dir == CG_CONV_BACKWARD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        rc = measure ? cudnnTry(rt_cudnn.cudnnFindConvolutionBackwardDataAlgorithmEx(
                                    c->dnn, e->w, in2, e->y, in, e->conv, e->x, out,
                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, p, ws, ws_size),
                                err, errlen)
                     : cudnnTry(rt_cudnn.cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                    c->dnn, e->w, e->y, e->conv, e->x,
                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, p),
                                err, errlen);
        CANDIDATES(p, rc ? 0 : n, cand)
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        rc = measure ? cudnnTry(rt_cudnn.cudnnFindConvolutionBackwardFilterAlgorithmEx(
                                    c->dnn, e->x, in2, e->y, in, e->conv, e->w, out,
                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, p, ws, ws_size),
                                err, errlen)
                     : cudnnTry(rt_cudnn.cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                                    c->dnn, e->x, e->y, e->conv, e->w,
                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, p),
                                err, errlen);
        CANDIDATES(p, rc ? 0 : n, cand)
    }
    *count = rc ? 0 : n;
    return rc ? -1 : 0;
}

/* Chooses e's algorithm on c's handle (be's): for a tuned descriptor, the
 * machine's recorded one if the heuristics still offer it usable, else by
 * measurement (then recorded); otherwise by the heuristics. */
static int choose(rt_backend *be, cuda_impl *c, dnn_conv *e, void *out, const void *in,
                  const void *in2, char *err, size_t errlen) {
    size_t cap = ws_cap(c);
    candidate cand[MAX_CANDIDATES];
    int n = 0, k = -1;
    uint64_t where = e->d.tune ? rt_conv_where(be) : 0;
    int recorded = e->d.tune ? rt_conv_algo_get(where, &e->d) : -1;
    if (!e->d.tune || recorded >= 0) {
        if (candidates(c, e, 0, out, in, in2, NULL, 0, cand, &n, err, errlen)) return -1;
        if (!e->d.tune) {
            k = pick(cand, n, cap, e->nondeterministic);
            e->how = "heuristics";
        } else { /* the record's, if it is still one dpc would run */
            for (int i = 0; i < n && k < 0; i++)
                if (cand[i].algo == recorded && usable(&cand[i], cap, e->nondeterministic)) k = i;
            e->how = "recorded";
        }
    }
    if (e->d.tune && k < 0) {
        CUdeviceptr tmp = 0; /* the search's own workspace, as large as any choice may use */
        size_t tmp_size = cap;
        for (; tmp_size && rt_cu.cuMemAlloc(&tmp, tmp_size) != CUDA_SUCCESS; tmp_size /= 2) tmp = 0;
        int rc = candidates(c, e, 1, out, in, in2, (void *)(uintptr_t)tmp, tmp_size, cand, &n, err,
                            errlen);
        if (tmp) rt_cu.cuMemFree(tmp); /* eager: nothing captured it */
        if (rc) return -1;
        k = pick(cand, n, tmp_size < cap ? tmp_size : cap, e->nondeterministic);
        e->how = "measured";
        if (k >= 0) rt_conv_algo_set(where, &e->d, cand[k].algo);
    }
    e->algo = k < 0 ? -1 : cand[k].algo; /* none: the alternative */
    e->ws = k < 0 ? 0 : cand[k].memory;
    e->racy = k >= 0 && cand[k].determinism != CUDNN_DETERMINISTIC;
    return 0;
}

/* The process's entry for d, made and chosen on c's handle when it is new;
 * NULL + err on failure, or (*later = 1) when it is new while c captures. */
static dnn_conv *entry(rt_backend *be, cuda_impl *c, const cg_conv *d, void *out, const void *in,
                       const void *in2, int *later, char *err, size_t errlen) {
    pthread_mutex_lock(&dnn_mu);
    int nondeterministic = rt_conv_nondeterministic();
    dnn_conv *e = dnn_convs;
    while (e && !(cg_conv_equal(&e->d, d) && e->nondeterministic == nondeterministic)) e = e->next;
    if (e || c->capturing) {
        pthread_mutex_unlock(&dnn_mu);
        *later = !e;
        return e;
    }
    e = calloc(1, sizeof *e);
    RT_CHECK_ALLOC(e);
    e->d = *d;
    e->nondeterministic = nondeterministic;
    if (set_descriptors(e, err, errlen) || choose(be, c, e, out, in, in2, err, errlen)) {
        pthread_mutex_unlock(&dnn_mu);
        dnn_conv_free(e);
        return NULL;
    }
    e->next = dnn_convs;
    dnn_convs = e;
    pthread_mutex_unlock(&dnn_mu);
    if (rt_debug_level() >= 1)
        rt_log(RT_LOG_INFO,
               "cuda: cuDNN %s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " k%" PRId64
               "x%" PRId64 " s%" PRId64 " g%" PRId64 ": %s %d (%s%s), %zu bytes of workspace",
               cg_conv_dir_name(d->dir), d->N, d->C, d->H, d->W, d->kh, d->kw, d->sh, d->G,
               e->algo >= 0       ? "algorithm"
               : nondeterministic ? "no algorithm fits, its alternative"
                                  : "no deterministic algorithm fits, its alternative",
               e->algo, e->how, e->racy ? ", non-deterministic" : "", e->ws);
    return e;
}

/* c's workspace holds at least n bytes: grown (eagerly only), the old one
 * kept while a captured graph may still use it. 1: it cannot grow now. */
static int workspace(cuda_impl *c, size_t n, char *err, size_t errlen) {
    if (n <= c->dnn_ws_size) return 0;
    if (c->capturing) return 1;
    if (c->dnn_ws) {
        c->dnn_old = realloc(c->dnn_old, sizeof *c->dnn_old * (size_t)(c->ndnn_old + 1));
        RT_CHECK_ALLOC(c->dnn_old);
        c->dnn_old[c->ndnn_old++] = c->dnn_ws;
        c->dnn_ws = 0, c->dnn_ws_size = 0;
    }
    if (cuTry(rt_cu.cuMemAlloc(&c->dnn_ws, n), err, errlen)) return -1;
    c->dnn_ws_size = n;
    return 0;
}

int cuda_conv(rt_backend *be, const cg_conv *d, void *out, const void *in, const void *in2,
              char *err, size_t errlen) {
    cuda_impl *c = impl_of(be);
    if (!c->dnn || dnn_type(d) < 0) return 1;
    if (use(c, err, errlen)) return -1;
    int later = 0;
    dnn_conv *e = entry(be, c, d, out, in, in2, &later, err, errlen);
    if (!e) return later ? 1 : -1;
    if (e->algo < 0 || __atomic_load_n(&e->failed, __ATOMIC_ACQUIRE)) return 1;
    /* a widened dw lies past the algorithm's workspace until widened */
    int widen = cg_conv_widened(d);
    int64_t size[3];
    cg_conv_sizes(d, size);
    size_t tail = (e->ws + 255) / 256 * 256, need = e->ws;
    if (widen) {
        need = tail + (size_t)size[0] * 2;
        /* the kernel is made eagerly: a capture runs the alternative */
        if (c->capturing && !c->widen) return 1;
        if (widen_ready(be, c, err, errlen)) return -1;
    }
    int rc = workspace(c, need, err, errlen);
    if (rc) return rc;
    void *ws = (void *)(uintptr_t)c->dnn_ws;
    void *dw = widen ? (char *)ws + tail : out;
    const float one = 1, zero = 0;
    if (d->dir == CG_CONV_FORWARD)
        rc = cudnnTry(rt_cudnn.cudnnConvolutionForward(c->dnn, &one, e->x, in, e->w, in2, e->conv,
                                                       (cudnnConvolutionFwdAlgo_t)e->algo, ws,
                                                       e->ws, &zero, e->y, out),
                      err, errlen);
    else if (d->dir == CG_CONV_BACKWARD_DATA)
        rc = cudnnTry(rt_cudnn.cudnnConvolutionBackwardData(
                          c->dnn, &one, e->w, in2, e->y, in, e->conv,
                          (cudnnConvolutionBwdDataAlgo_t)e->algo, ws, e->ws, &zero, e->x, out),
                      err, errlen);
    else
        rc = cudnnTry(rt_cudnn.cudnnConvolutionBackwardFilter(
                          c->dnn, &one, e->x, in2, e->y, in, e->conv,
                          (cudnnConvolutionBwdFilterAlgo_t)e->algo, ws, e->ws, &zero, e->w, dw),
                      err, errlen);
    if (rc) {
        /* A call cuDNN fails at execution (an algorithm it chose but cannot
         * run on this device, a status it did not predict) costs that
         * convolution, not the run: declined from now on, its im2col
         * alternative runs, now too. A lost context fails the alternative
         * as well, and that is reported. */
        if (!__atomic_exchange_n(&e->failed, 1, __ATOMIC_ACQ_REL))
            rt_log(RT_LOG_INFO,
                   "cuda: cuDNN failed %s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " k%" PRId64
                   " (%s): its im2col alternative runs instead",
                   cg_conv_dir_name(d->dir), d->N, d->C, d->H, d->W, d->kh, err);
        return 1;
    }
    if (widen) {
        if (cuda_launch(be, c->widen, (void *[]){out, dw}, 2, size[0], NULL, err, errlen))
            return -1;
    }
    if (c->capturing)
        c->stats.captured_convs++;
    else
        c->stats.convs++;
    return 0;
}

int cuda_dnn_up(cuda_impl *c, char *err, size_t errlen) {
    (void)err, (void)errlen;
    if (rt_cudnn_load(c->dnn_why, sizeof c->dnn_why)) return 0; /* convolutions run im2col */
    if (!cudnnTry(rt_cudnn.cudnnCreate(&c->dnn), c->dnn_why, sizeof c->dnn_why) &&
        !cudnnTry(rt_cudnn.cudnnSetStream(c->dnn, c->compute), c->dnn_why, sizeof c->dnn_why))
        return 0;
    /* A library that loads but cannot start (no cudart of its own, a
     * device it does not know) is no library: im2col, and dnn_why says why. */
    if (c->dnn) rt_cudnn.cudnnDestroy(c->dnn);
    c->dnn = NULL;
    return 0;
}

void cuda_dnn_down(cuda_impl *c) {
    cuda_module_release(c, c->widen_mod);
    c->widen_mod = NULL, c->widen = NULL;
    if (c->dnn) rt_cudnn.cudnnDestroy(c->dnn);
    if (c->dnn_ws) rt_cu.cuMemFree(c->dnn_ws);
    for (int i = 0; i < c->ndnn_old; i++) rt_cu.cuMemFree(c->dnn_old[i]);
    free(c->dnn_old);
    c->dnn = NULL, c->dnn_ws = 0, c->dnn_old = NULL, c->ndnn_old = 0;
}

#endif
