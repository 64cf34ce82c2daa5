/* tests/fake/fake_cuda.c — a stand-in for libcuda, libcublas and libnccl
 * that runs on the host, so the cuda backend's own code (memory, staging
 * copies, launch arguments, GEMM pointers, CUDA-graph capture and replay,
 * NCCL bucket all-reduces) runs end to end on a machine without a GPU.
 * tests/unit/test_cuda_fake.c loads it through DPC_LIBCUDA, DPC_LIBCUBLAS
 * and DPC_LIBNCCL.
 *
 * What it is: DPC_FAKE_CUDA_DEVICES "devices" (default 1, at most 8; sm_90,
 * 132 SMs) whose memory is host memory, whose streams are asynchronous
 * (below), and whose kernels run the exact CUDA source under the
 * simulator (tests/sim): cuModuleLoadDataEx finds the cached cubin equal to
 * the image in the kernel cache ($DPC_CACHE_DIR, else ~/.cache/dpc, where
 * rt_cuda_compile_cached writes BASE.cu and then BASE.cubin), builds its
 * sibling BASE.cu as host C++ against tests/sim/cuda_sim.h with g++ into a
 * shared object (cached by a hash of the source in CACHE/fake-sim) and
 * dlopens it; cuLaunchKernel runs sim_launch with the grid, block and
 * parameter values it was given. Each OS thread has its own simulator state
 * and shared memory (cuda_sim.h), so replicas launch at the same time with
 * no lock. The simulator's directory is baked in (FAKE_SIM_DIR) and
 * DPC_FAKE_SIM_DIR overrides it. GEMMs (exactly as cuBLAS defines their
 * arguments) and cuDNN convolutions run fake_math.c's arithmetic: every
 * product summed in float in an order of its own, as a GPU's kernels do
 * (split-K slices, tensor-core k-steps; fake_math.h), never in the cpu
 * backend's order and never more exactly than hardware. While a stream captures, launches
 * and GEMMs are recorded with their argument values (as the driver does) and
 * a graph launch replays them; host copies, memsets and allocations during
 * a capture fail, as the real driver refuses the unsafe ones. Captures
 * spread over streams as the driver's do: an event recorded on a capturing
 * stream and waited for by another stream pulls that stream into the
 * capture (the communication stream of an NCCL bucket), until EndCapture.
 *
 * Streams (FAKE_CUDA_STREAMS): deferred by default, as strict as a GPU
 * about order. Stream work (kernels, GEMMs, convolutions, copies, memsets,
 * collectives, graph launches, waits on events) is queued per stream and
 * runs only when the host waits for it, as late as stream order allows:
 * cuStreamSynchronize runs that stream's queue; cuEventSynchronize runs the
 * recording stream up to the record and no further; a queued
 * cuStreamWaitEvent runs the other stream up to that record first (and
 * nothing else of it); cuMemFree, cuMemFreeHost, cuModuleUnload,
 * cublasDestroy and cudnnDestroy run every stream of the current device,
 * cuStreamDestroy its stream, and cudnnFind*Ex its own (they synchronise
 * on a GPU too). So a stream that reads what another writes without
 * waiting for its event reads stale memory, and an asynchronous host copy
 * reads or writes the host buffer when it runs, not when it was issued.
 * The thread that waits runs the work (one thread per stream at a time);
 * work nobody waits for never runs. =immediate runs each operation when
 * it is issued instead (every order trivially kept: the old behaviour).
 *
 * NCCL: ncclCommInitAll makes one communicator per rank; ncclAllReduce and
 * ncclReduce (float sum) and ncclBroadcast (bytes) block until every rank
 * of the communicator has made the same call, then each recv buffer
 * (ncclReduce: the root's alone) gets the sum in rank order, or the root's
 * send buffer. The block happens when the call runs: at issue in immediate
 * mode (so ranks must be driven from separate threads, as dpc's replicas
 * are); in deferred mode when its stream's queue runs, and the blocked
 * thread runs each missing rank's stream up to that rank's call where no
 * other thread runs it (a GPU runs every stream by itself; dprun's main
 * thread may wait for replica 0's stream alone). Captured, a call is
 * recorded and the barrier happens when the replay runs. fake_nccl_calls
 * lists what each rank reduced (all-reduces and reduces), in call order,
 * for tests of bucket order;
 * fake_nccl_kinds says which of the two each was ('a' or 'r', the root's
 * rank after an 'r') and fake_nccl_broadcasts counts the broadcasts;
 * fake_trace_start/fake_trace record the order copies and other stream
 * work ran in (tests of what overlaps what).
 * ncclGetUniqueId makes a recognisable id; ncclCommInitRank checks it and
 * its rank and nranks, logs them (fake_nccl_inits) and joins the ranks of
 * the same id in this process. Processes share nothing: an all-reduce of
 * a communicator whose ranks are not all in this process fails (no
 * cross-process sum is faked) instead of waiting forever.
 *
 * Faults (tests of dpc's failure messages): FAKE_CUDA_FAIL_KERNEL=N fails
 * the Nth kernel issued on device FAKE_CUDA_FAIL_DEVICE (default 0),
 * counting kernels issued eagerly and in graph launches (not recorded
 * ones). FAKE_CUDA_FAIL_MODE=async (the default) fails it as an illegal
 * address does on a GPU: the call that issued it returns success; when it
 * runs, the device runs nothing more, the next synchronisation on it
 * (cuStreamSynchronize, cuEventSynchronize) returns
 * CUDA_ERROR_ILLEGAL_ADDRESS, and so does every call on its streams after
 * that (the context is lost); =sync makes the call that issued it return
 * CUDA_ERROR_LAUNCH_FAILED instead. A simulator error in a deferred kernel
 * (its line on stderr) loses the device the same way.
 * FAKE_CUDNN_FAIL=N fails the Nth cuDNN convolution call (forward or
 * either backward, counted in the process, not those of the Find*Ex
 * searches) with CUDNN_STATUS_EXECUTION_FAILED, running nothing, as cuDNN
 * does with an algorithm it cannot run; N=-1 fails every one.
 * fake_cudnn_failures() counts them. FAKE_CUDA_FAIL_CAPTURE=N makes the
 * Nth cuStreamEndCapture return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (the
 * capture ends, no graph), as the driver does when a captured call was
 * illegal. FAKE_CUDA_FAIL_ALLOC=N makes the Nth cuMemAlloc of the process
 * return CUDA_ERROR_OUT_OF_MEMORY; FAKE_CUDA_FAIL_COPY=N makes the Nth copy
 * between host and device (cuMemcpyHtoDAsync or cuMemcpyDtoHAsync, counted
 * together in the process) return CUDA_ERROR_UNKNOWN, copying nothing;
 * every other call goes on as before (the caller is to stop).
 *
 * Every function is defined under the header's name, so it gets the
 * versioned symbol the loader asks for (cuMemAlloc -> cuMemAlloc_v2) and is
 * checked against the prototype dpc calls: the driver's from cuda.h,
 * cuBLAS's and NCCL's from the tree's declarations (runtime/cuda/decl_*.h,
 * held equal to the real headers by tests/cuda_decls_test.sh).
 */
#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "format/bf16.h"
#include "format/tf32.h"
#include "runtime/cuda/decl_cublas.h"
#include "runtime/cuda/decl_cudnn.h"
#include "runtime/cuda/decl_nccl.h"
#include "sim.h"
#include "tests/fake/fake_math.h"

#define MAX_ARGS        64
#define MAX_PARAM_BYTES (MAX_ARGS * 8)

#ifndef FAKE_SIM_DIR
#error "build with -DFAKE_SIM_DIR=\"/abs/path/to/tests/sim\""
#endif

#define MAX_DEVICES 8
#define MAX_JOINED  8

struct CUctx_st {
    int device;
};
struct qnode;
struct CUstream_st {
    struct CUgraph_st *rec; /* the capture it records into */
    int dev;                /* its context's device */
    /* Deferred mode, all under q_mu: the operations issued and not yet run
     * (oldest first), how many were issued and how many ran, the thread
     * running them (0: none), whether cuStreamDestroy gave it back (kept
     * for reuse: events and queued waits may still name it). */
    struct qnode *head, *tail;
    uint64_t issued, done;
    int runner, dead;
    struct CUstream_st *next; /* every stream cuStreamCreate made */
};
struct CUevent_st {
    struct CUgraph_st *rec; /* recorded inside that capture, */
    int dev;                /* on a stream of device dev */
    /* Deferred mode: its last record, the point where stream `on` had
     * `ticket` operations issued (NULL: never recorded outside a capture). */
    struct CUstream_st *on;
    uint64_t ticket;
};
struct CUmod_st {
    void *so;                /* the kernels built for the simulator */
    struct CUfunc_st *funcs; /* handed out by cuModuleGetFunction */
};
struct CUfunc_st {
    char name[128];
    sim_entry fn;
    int nargs;
    size_t size[MAX_ARGS]; /* each parameter's bytes */
    struct CUfunc_st *next;
};
struct cublasContext {
    CUstream stream;
    int tf32; /* math mode CUBLAS_TF32_TENSOR_OP_MATH: Sgemm rounds like FAST_TF32 */
};

enum {
    OP_KERNEL,
    OP_GEMM,
    OP_ALLREDUCE,
    OP_REDUCE,
    OP_BCAST,
    OP_COPY,
    OP_CONV,
    OP_MEMSET, /* dst, bytes, val */
    OP_H2D,    /* a copy (src, dst, bytes) that reads host memory when it runs */
    OP_D2H,    /* one that writes host memory when it runs */
    OP_WAIT    /* deferred mode: stream `on` runs its first `ticket` operations first */
};

/* A cuDNN convolution's shape and operands (OP_CONV). */
typedef fake_conv_op conv_op;

typedef struct {
    int kind;
    struct CUfunc_st *f;
    unsigned grid, block;                 /* x only: y = z = 1 */
    unsigned char param[MAX_PARAM_BYTES]; /* the values, each 8-aligned */
    /* GEMM */
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc, batch;
    float alpha, beta;
    const float *A, *B;
    float *C;
    long long sa, sb, sc;
    /* all-reduce and copy */
    struct ncclComm *comm;
    const void *src;
    void *dst;
    size_t bytes;        /* copy and broadcast: bytes; all-reduce and reduce: floats */
    int root;            /* reduce and broadcast: the rank that gets / sends it */
    int bf16_ab, bf16_c; /* cublasGemmStridedBatchedEx with CUDA_R_16BF operands */
    int tf32;            /* A and B rounded to TF32 first (CUBLAS_COMPUTE_32F_FAST_TF32) */
    conv_op conv;
    unsigned char val;      /* memset */
    int fail;               /* the kernel FAKE_CUDA_FAIL_KERNEL picked: faults when it runs */
    struct CUstream_st *on; /* wait */
    uint64_t ticket;
} op;

struct CUgraph_st {
    op *ops;
    size_t n, cap;
    CUstream joined[MAX_JOINED]; /* streams the capture spread to */
    int njoined;
};
struct CUgraphExec_st {
    struct CUgraph_st g;
};

static struct CUctx_st ctxs[MAX_DEVICES];
static _Thread_local int capturing_here; /* this thread began a capture */
static _Thread_local int current_dev;    /* cuCtxSetCurrent's */

/* ---- faults (see the top) ---- */
/* Per device: 0, FAULTED (an asynchronous fault not yet reported: the
 * device runs nothing, a synchronisation reports it) or LOST (reported:
 * every call fails). */
enum { FAULTED = 1, LOST = 2 };
static int lost[MAX_DEVICES];
static int kernels_run[MAX_DEVICES]; /* for FAKE_CUDA_FAIL_KERNEL */

static int state_of(int dev) {
    return dev >= 0 && dev < MAX_DEVICES ? __atomic_load_n(&lost[dev], __ATOMIC_SEQ_CST) : 0;
}
/* What a call on dev returns: the error once it was reported. */
static CUresult lost_on(int dev) {
    return state_of(dev) == LOST ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}
/* What a synchronisation on dev returns: it reports a fault. */
static CUresult sync_on(int dev) {
    if (!state_of(dev)) return CUDA_SUCCESS;
    __atomic_store_n(&lost[dev], LOST, __ATOMIC_SEQ_CST);
    return CUDA_ERROR_ILLEGAL_ADDRESS;
}

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* A kernel is issued on dev (counted when issued, so a deferred stream
 * picks the same kernel): whether it is the one to fail, and how. */
static CUresult fault(int dev) {
    int n = env_int("FAKE_CUDA_FAIL_KERNEL", 0);
    if (n <= 0 || dev != env_int("FAKE_CUDA_FAIL_DEVICE", 0) || dev < 0 || dev >= MAX_DEVICES)
        return CUDA_SUCCESS;
    if (__atomic_add_fetch(&kernels_run[dev], 1, __ATOMIC_SEQ_CST) != n) return CUDA_SUCCESS;
    const char *mode = getenv("FAKE_CUDA_FAIL_MODE");
    if (mode && !strcmp(mode, "sync")) return CUDA_ERROR_LAUNCH_FAILED;
    return CUDA_ERROR_ILLEGAL_ADDRESS; /* when it runs */
}

static int devices(void) {
    const char *s = getenv("DPC_FAKE_CUDA_DEVICES");
    int n = s && *s ? atoi(s) : 1;
    return n < 1 ? 1 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

static void collective_now(const op *o);
/* A GEMM, each batch entry by fake_math.c: A and B read as bf16, as TF32
 * (A and B rounded first, CUBLAS_COMPUTE_32F_FAST_TF32) or as f32; C bf16
 * (rounded once, after alpha and beta) or f32. */
static void run_gemm(const op *o) {
    int ab = o->bf16_ab ? FAKE_BF16 : o->tf32 ? FAKE_TF32 : FAKE_F32;
    size_t ea = o->bf16_ab ? sizeof(bf16_t) : sizeof(float),
           ec = o->bf16_c ? sizeof(bf16_t) : sizeof(float);
    for (int p = 0; p < o->batch; p++)
        fake_gemm(o->ta == CUBLAS_OP_T, o->tb == CUBLAS_OP_T, o->m, o->n, o->k, o->alpha,
                  (const char *)o->A + (size_t)(p * o->sa) * ea, o->lda,
                  (const char *)o->B + (size_t)(p * o->sb) * ea, o->ldb, ab, o->beta,
                  (char *)o->C + (size_t)(p * o->sc) * ec, o->ldc, o->bf16_c);
}

/* The stream work in the order it ran, one letter each, while tracing
 * (fake_trace_start .. fake_trace): h host to device, d device to host,
 * k anything else (kernel, GEMM, device copy, all-reduce). */
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static char trace_buf[1 << 16];
static int trace_n, tracing;

static void trace(char c) {
    if (!tracing) return;
    pthread_mutex_lock(&trace_mu);
    if (trace_n < (int)sizeof trace_buf - 1) trace_buf[trace_n++] = c;
    pthread_mutex_unlock(&trace_mu);
}

void fake_trace_start(void) {
    pthread_mutex_lock(&trace_mu);
    trace_n = 0, tracing = 1;
    pthread_mutex_unlock(&trace_mu);
}

/* Stops tracing; the trace so far, NUL-terminated, into buf. */
void fake_trace(char *buf, int max) {
    pthread_mutex_lock(&trace_mu);
    tracing = 0;
    int n = trace_n < max - 1 ? trace_n : max - 1;
    memcpy(buf, trace_buf, (size_t)n);
    buf[n] = 0;
    pthread_mutex_unlock(&trace_mu);
}

/* A kernel under the simulator: its one-line error on stderr. */
static CUresult run_kernel(const op *o) {
    void *args[MAX_ARGS];
    size_t off = 0;
    for (int j = 0; j < o->f->nargs; j++) {
        args[j] = (void *)(o->param + off);
        off += (o->f->size[j] + 7) / 8 * 8;
    }
    char err[1024];
    sim_dim3 grid = {o->grid, 1, 1}, block = {o->block, 1, 1};
    if (sim_launch(o->f->name, o->f->fn, grid, block, 0, args, err, sizeof err)) {
        fprintf(stderr, "fake cuda: %s\n", err);
        return CUDA_ERROR_LAUNCH_FAILED;
    }
    return CUDA_SUCCESS;
}

/* Runs o on device dev: CUDA_ERROR_ILLEGAL_ADDRESS when an asynchronous
 * fault stops it (the caller reports success: the fault shows later). */
static CUresult run(const op *o, int dev) {
    if (o->kind != OP_MEMSET) trace(o->kind == OP_H2D ? 'h' : o->kind == OP_D2H ? 'd' : 'k');
    if (state_of(dev)) return CUDA_ERROR_ILLEGAL_ADDRESS; /* a faulted device runs nothing */
    if (o->fail) {
        __atomic_store_n(&lost[dev], FAULTED, __ATOMIC_SEQ_CST);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    if (o->kind == OP_KERNEL) return run_kernel(o);
    if (o->kind == OP_ALLREDUCE || o->kind == OP_REDUCE || o->kind == OP_BCAST) {
        collective_now(o);
        return CUDA_SUCCESS;
    }
    if (o->kind == OP_COPY || o->kind == OP_H2D || o->kind == OP_D2H) {
        memmove(o->dst, o->src, o->bytes);
        return CUDA_SUCCESS;
    }
    if (o->kind == OP_MEMSET) {
        memset(o->dst, o->val, o->bytes);
        return CUDA_SUCCESS;
    }
    if (o->kind == OP_CONV) {
        fake_conv(&o->conv);
        return CUDA_SUCCESS;
    }
    run_gemm(o);
    return CUDA_SUCCESS;
}

/* ---- streams: immediate, or deferred (the default; see the top) ---- */

/* FAKE_CUDA_STREAMS, read once: a queue must not change modes half way. */
static int deferred(void) {
    static int mode = -1;
    int m = __atomic_load_n(&mode, __ATOMIC_ACQUIRE);
    if (m < 0) {
        const char *v = getenv("FAKE_CUDA_STREAMS");
        m = !(v && !strcmp(v, "immediate"));
        __atomic_store_n(&mode, m, __ATOMIC_RELEASE);
    }
    return m;
}

/* One lock for every queue, count and event record: held only to link and
 * unlink, never while an operation runs (a collective blocks in it). */
static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER; /* an operation ran, a runner left */
static struct CUstream_st null_streams[MAX_DEVICES];   /* stream 0 of each device */
static struct CUstream_st *streams;                    /* cuStreamCreate's, linked at the head */

typedef struct qnode {
    op o;
    struct qnode *next;
} qnode;

/* This thread's number (from 1): who runs a stream. */
static int thread_id(void) {
    static int last;
    static _Thread_local int id;
    if (!id) id = __atomic_add_fetch(&last, 1, __ATOMIC_SEQ_CST);
    return id;
}

static struct CUstream_st *stream_of(CUstream s) { return s ? s : &null_streams[current_dev]; }

static int is_collective(const op *o) {
    return o->kind == OP_ALLREDUCE || o->kind == OP_REDUCE || o->kind == OP_BCAST;
}
/* A rank's queued collectives (the NCCL section; under q_mu). */
static void pending_add(struct ncclComm *c, struct CUstream_st *s, uint64_t ticket);
static void pending_remove(struct ncclComm *c, struct CUstream_st *s, uint64_t ticket);

static void enqueue(struct CUstream_st *s, const op *o) {
    qnode *q = malloc(sizeof *q);
    if (!q) abort();
    q->o = *o;
    q->next = NULL;
    pthread_mutex_lock(&q_mu);
    if (s->tail)
        s->tail->next = q;
    else
        s->head = q;
    s->tail = q;
    s->issued++;
    if (is_collective(o)) pending_add(o->comm, s, s->issued);
    pthread_mutex_unlock(&q_mu);
}

static void drain(struct CUstream_st *s, uint64_t upto);

/* Operation number `ticket` of s. An error its issuing call can no longer
 * return (the simulator's, on stderr) loses the device as a fault does. */
static void exec_op(struct CUstream_st *s, const op *o, uint64_t ticket) {
    if (o->kind == OP_WAIT) {
        drain(o->on, o->ticket);
        return;
    }
    if (is_collective(o)) {
        pthread_mutex_lock(&q_mu);
        pending_remove(o->comm, s, ticket);
        pthread_mutex_unlock(&q_mu);
    }
    CUresult r = run(o, s->dev);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_ILLEGAL_ADDRESS)
        __atomic_store_n(&lost[s->dev], FAULTED, __ATOMIC_SEQ_CST);
}

/* Runs s's queue on this thread until its first `upto` operations ran
 * (a wait in it runs the other stream first). While another thread runs
 * s, this one waits for it to get there or to leave: waiting for the lock
 * alone could deadlock two threads that each run a stream the other's
 * stream waits for at an earlier point. */
static void drain(struct CUstream_st *s, uint64_t upto) {
    int me = thread_id();
    pthread_mutex_lock(&q_mu);
    if (s->done < upto && s->runner == me) {
        fprintf(stderr, "fake cuda: streams wait for each other in a cycle\n");
        abort(); /* a GPU would hang; events are recorded before they are waited for */
    }
    while (s->done < upto && s->runner) pthread_cond_wait(&q_cv, &q_mu);
    if (s->done < upto) {
        s->runner = me;
        while (s->done < upto) {
            qnode *q = s->head;
            uint64_t ticket = s->done + 1;
            s->head = q->next;
            if (!s->head) s->tail = NULL;
            pthread_mutex_unlock(&q_mu);
            exec_op(s, &q->o, ticket);
            free(q);
            pthread_mutex_lock(&q_mu);
            s->done++;
            pthread_cond_broadcast(&q_cv);
        }
        s->runner = 0;
        pthread_cond_broadcast(&q_cv);
    }
    pthread_mutex_unlock(&q_mu);
}

/* The host waits for everything issued on s so far. */
static void stream_wait(struct CUstream_st *s) {
    if (!deferred()) return;
    pthread_mutex_lock(&q_mu);
    uint64_t n = s->issued;
    pthread_mutex_unlock(&q_mu);
    drain(s, n);
}

/* The host waits for every stream of dev (what cuMemFree and the other
 * implicitly synchronising calls do). Streams are never freed and are
 * linked at the head, so the list can be walked from a snapshot. */
static void device_wait(int dev) {
    if (!deferred() || dev < 0 || dev >= MAX_DEVICES) return;
    stream_wait(&null_streams[dev]);
    pthread_mutex_lock(&q_mu);
    struct CUstream_st *first = streams;
    pthread_mutex_unlock(&q_mu);
    for (struct CUstream_st *s = first; s; s = s->next)
        if (s->dev == dev) stream_wait(s);
}

/* Picks the kernel FAKE_CUDA_FAIL_KERNEL asks for: the issuing call's
 * error (sync mode), or marks it to fault when it runs. */
static CUresult pick_fault(op *o, int dev) {
    if (o->kind != OP_KERNEL) return CUDA_SUCCESS;
    CUresult f = fault(dev);
    o->fail = f == CUDA_ERROR_ILLEGAL_ADDRESS;
    return f == CUDA_ERROR_LAUNCH_FAILED ? f : CUDA_SUCCESS;
}

/* Queues o on s (runs it now in immediate mode), or records it when the
 * stream captures. */
static CUresult issue(CUstream s, const op *o) {
    int dev = s ? s->dev : current_dev;
    if (lost_on(dev)) return lost_on(dev);
    if (s && s->rec) {
        struct CUgraph_st *g = s->rec;
        if (g->n == g->cap) {
            g->cap = g->cap ? 2 * g->cap : 64;
            g->ops = realloc(g->ops, g->cap * sizeof *g->ops);
            if (!g->ops) abort();
        }
        g->ops[g->n++] = *o;
        return CUDA_SUCCESS;
    }
    op x = *o;
    CUresult r = pick_fault(&x, dev);
    if (r != CUDA_SUCCESS) return r;
    if (deferred()) {
        enqueue(stream_of(s), &x);
        return CUDA_SUCCESS;
    }
    r = run(&x, dev);
    return r == CUDA_ERROR_ILLEGAL_ADDRESS ? CUDA_SUCCESS : r;
}

static CUresult not_captured(CUstream s) {
    return s && s->rec ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* ---- driver ------------------------------------------------------------------- */

CUresult CUDAAPI cuInit(unsigned int flags) {
    return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
/* NVRTC dlopens libcuda.so.1 itself and, when it loads, calls this: where
 * the fake is the libcuda.so.1 on the loader's path (the GPU rehearsal), a
 * missing symbol would be a call through NULL. No table: NVRTC then does
 * without the driver, as on a machine with none. */
CUresult CUDAAPI cuGetExportTable(const void **table, const CUuuid *id) {
    (void)id;
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuDriverGetVersion(int *v) {
    *v = 13000;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorName(CUresult r, const char **s) {
    *s = r == CUDA_SUCCESS                            ? "CUDA_SUCCESS"
         : r == CUDA_ERROR_ILLEGAL_ADDRESS            ? "CUDA_ERROR_ILLEGAL_ADDRESS"
         : r == CUDA_ERROR_LAUNCH_FAILED              ? "CUDA_ERROR_LAUNCH_FAILED"
         : r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ? "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
                                                      : "CUDA_ERROR_FAKE";
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult r, const char **s) {
    *s = r == CUDA_SUCCESS                 ? "no error"
         : r == CUDA_ERROR_ILLEGAL_ADDRESS ? "an illegal memory access was encountered"
         : r == CUDA_ERROR_LAUNCH_FAILED   ? "unspecified launch failure"
                                           : "an error of the fake driver";
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int *n) {
    *n = devices();
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice *d, int ordinal) {
    if (ordinal < 0 || ordinal >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice d) {
    (void)d;
    snprintf(name, (size_t)len, "dpc fake CUDA device");
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    (void)d;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceTotalMem(size_t *b, CUdevice d) {
    (void)d;
    *b = (size_t)1 << 30;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    if (d < 0 || d >= devices()) return CUDA_ERROR_INVALID_DEVICE;
    ctxs[d].device = d;
    null_streams[d].dev = d;
    *c = &ctxs[d];
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice d) {
    (void)d;
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext c) {
    if (c < ctxs || c >= ctxs + MAX_DEVICES) return CUDA_ERROR_INVALID_CONTEXT;
    current_dev = (int)(c - ctxs);
    return CUDA_SUCCESS;
}

static int allocs, host_copies; /* for FAKE_CUDA_FAIL_ALLOC and FAKE_CUDA_FAIL_COPY */

/* Whether this call is the Nth that variable name asks to fail. */
static int nth(const char *name, int *count) {
    int n = env_int(name, 0);
    return n > 0 && __atomic_add_fetch(count, 1, __ATOMIC_SEQ_CST) == n;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t n) {
    if (capturing_here) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (nth("FAKE_CUDA_FAIL_ALLOC", &allocs)) return CUDA_ERROR_OUT_OF_MEMORY;
    void *m = aligned_alloc(256, (n + 255) / 256 * 256);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(m, 0xA5, n); /* garbage, as fresh device memory is: the backend must zero it */
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
/* Both frees wait for the device first, as the driver's do. */
CUresult CUDAAPI cuMemFree(CUdeviceptr p) {
    device_wait(current_dev);
    free((void *)(uintptr_t)p);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAllocHost(void **p, size_t n) {
    *p = malloc(n);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult CUDAAPI cuMemFreeHost(void *p) {
    device_wait(current_dev);
    free(p);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemGetInfo(size_t *fr, size_t *total) {
    *fr = *total = (size_t)1 << 30;
    return CUDA_SUCCESS;
}
/* A copy or memset of n bytes (not recorded by a capture, as the driver
 * refuses the unsafe ones, unless kind is OP_COPY). Host memory is read or
 * written when the copy runs, as a DMA from pinned memory does. */
static CUresult copy(int kind, void *dst, const void *src, unsigned char v, size_t n, CUstream s) {
    if (kind != OP_COPY && not_captured(s)) return not_captured(s);
    op o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.dst = dst, o.src = src, o.val = v, o.bytes = n;
    return issue(s, &o);
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
    return copy(OP_MEMSET, (void *)(uintptr_t)p, NULL, v, n, s);
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    if (nth("FAKE_CUDA_FAIL_COPY", &host_copies)) return CUDA_ERROR_UNKNOWN;
    return copy(OP_H2D, (void *)(uintptr_t)dst, src, 0, n, s);
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    if (nth("FAKE_CUDA_FAIL_COPY", &host_copies)) return CUDA_ERROR_UNKNOWN;
    return copy(OP_D2H, dst, (const void *)(uintptr_t)src, 0, n, s);
}
/* Device to device is a graph node, as with the driver. */
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    return copy(OP_COPY, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, 0, n, s);
}

/* A destroyed stream is kept for reuse, never freed (see CUstream_st). */
CUresult CUDAAPI cuStreamCreate(CUstream *s, unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&q_mu);
    struct CUstream_st *r = streams;
    while (r && !r->dead) r = r->next;
    if (r) {
        r->dead = 0;
    } else if ((r = calloc(1, sizeof *r))) {
        r->next = streams;
        streams = r;
    }
    if (r) r->dev = current_dev, r->rec = NULL;
    pthread_mutex_unlock(&q_mu);
    *s = r;
    return r ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
/* Its queued work still runs, as the driver promises. */
CUresult CUDAAPI cuStreamDestroy(CUstream s) {
    stream_wait(s);
    pthread_mutex_lock(&q_mu);
    s->dead = 1;
    pthread_mutex_unlock(&q_mu);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream s) {
    /* Illegal on a capturing stream, as with the driver. */
    if (s && s->rec) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    stream_wait(stream_of(s));
    return sync_on(stream_of(s)->dev);
}
/* Waiting for an event of a capture joins that capture; a captured wait
 * is no node (a graph's operations run in the order recorded). */
CUresult CUDAAPI cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
    (void)flags;
    struct CUstream_st *q = stream_of(s);
    if (lost_on(q->dev)) return lost_on(q->dev);
    if (e->rec && !q->rec) {
        if (e->rec->njoined == MAX_JOINED) return CUDA_ERROR_NOT_SUPPORTED;
        e->rec->joined[e->rec->njoined++] = q;
        q->rec = e->rec;
    }
    if (!deferred() || q->rec || e->rec) return CUDA_SUCCESS;
    op o;
    memset(&o, 0, sizeof o);
    o.kind = OP_WAIT;
    pthread_mutex_lock(&q_mu);
    o.on = e->on, o.ticket = e->ticket;
    int needed = o.on && o.on != q && o.on->done < o.ticket; /* a stream keeps its own order */
    pthread_mutex_unlock(&q_mu);
    if (needed) enqueue(q, &o);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventCreate(CUevent *e, unsigned int flags) {
    (void)flags;
    *e = calloc(1, sizeof **e);
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult CUDAAPI cuEventDestroy(CUevent e) {
    free(e);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) {
    struct CUstream_st *q = stream_of(s);
    e->dev = q->dev;
    if (lost_on(e->dev)) return lost_on(e->dev);
    e->rec = q->rec;
    if (!q->rec) {
        pthread_mutex_lock(&q_mu);
        e->on = q, e->ticket = q->issued;
        pthread_mutex_unlock(&q_mu);
    }
    return CUDA_SUCCESS;
}
/* Runs the recording stream up to the record, and no further. */
CUresult CUDAAPI cuEventSynchronize(CUevent e) {
    pthread_mutex_lock(&q_mu);
    struct CUstream_st *on = e->on;
    uint64_t ticket = e->ticket;
    pthread_mutex_unlock(&q_mu);
    if (deferred() && on) drain(on, ticket);
    return sync_on(e->dev);
}
CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    (void)a, (void)b;
    *ms = 0;
    return CUDA_SUCCESS;
}

/* ---- modules: the cubin's CUDA source, built for the simulator -------------------- */

static pthread_mutex_t module_mu = PTHREAD_MUTEX_INITIALIZER;

/* The bytes an ELF64 image spans: the furthest end of its headers, its
 * sections' and its segments' contents (0 when it is not ELF64). */
static size_t elf_size(const unsigned char *d) {
    if (memcmp(d, "\177ELF", 4) || d[4] != 2) return 0;
    uint64_t phoff, shoff, v;
    uint16_t phentsize, phnum, shentsize, shnum;
    memcpy(&phoff, d + 0x20, 8), memcpy(&shoff, d + 0x28, 8);
    memcpy(&phentsize, d + 0x36, 2), memcpy(&phnum, d + 0x38, 2);
    memcpy(&shentsize, d + 0x3A, 2), memcpy(&shnum, d + 0x3C, 2);
    uint64_t end = 64;
    if (shoff + (uint64_t)shnum * shentsize > end) end = shoff + (uint64_t)shnum * shentsize;
    if (phoff + (uint64_t)phnum * phentsize > end) end = phoff + (uint64_t)phnum * phentsize;
    for (unsigned i = 0; i < shnum && shentsize >= 0x28; i++) {
        const unsigned char *h = d + shoff + (uint64_t)i * shentsize;
        uint32_t type;
        uint64_t off;
        memcpy(&type, h + 4, 4), memcpy(&off, h + 0x18, 8), memcpy(&v, h + 0x20, 8);
        if (type != 8 /* SHT_NOBITS */ && off + v > end) end = off + v;
    }
    for (unsigned i = 0; i < phnum && phentsize >= 0x28; i++) {
        const unsigned char *h = d + phoff + (uint64_t)i * phentsize;
        uint64_t off;
        memcpy(&off, h + 8, 8), memcpy(&v, h + 0x20, 8);
        if (off + v > end) end = off + v;
    }
    return end;
}

/* The whole file, NUL-terminated (*n its length), or NULL. */
static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (!fseek(f, 0, SEEK_END)) {
        long len = ftell(f);
        if (len >= 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)len + 1))) {
            if (fread(buf, 1, (size_t)len, f) == (size_t)len) {
                buf[len] = 0;
                *n = (size_t)len;
            } else {
                free(buf);
                buf = NULL;
            }
        }
    }
    fclose(f);
    return buf;
}

/* The kernel cache directory (runtime/device/cache.c), absolute (the kernel TU includes by path). */
static void cache_dir(char *dir, size_t n) {
    const char *env = getenv("DPC_CACHE_DIR"), *home = getenv("HOME");
    char given[4096], abs[PATH_MAX];
    if (env && *env)
        snprintf(given, sizeof given, "%s", env);
    else
        snprintf(given, sizeof given, "%s/.cache/dpc", home && *home ? home : "/tmp");
    snprintf(dir, n, "%s", realpath(given, abs) ? abs : given);
}

/* BASE.cu of the dpc2-cuda-BASE.cubin in the cache whose bytes are image's,
 * read into memory; NULL with why set when there is none. */
static char *find_source(const void *image, char *cu, size_t culen, char *why, size_t whylen) {
    char dir[4096];
    cache_dir(dir, sizeof dir);
    size_t want = elf_size(image);
    DIR *d = want ? opendir(dir) : NULL;
    if (!d) {
        snprintf(why, whylen, "%s",
                 want ? "cannot open the kernel cache" : "the image is not an ELF cubin");
        return NULL;
    }
    char *src = NULL;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "dpc2-cuda-", 10) || len < 6 ||
            strcmp(e->d_name + len - 6, ".cubin"))
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = 0;
        char *bin = read_file(path, &n);
        found = bin && n == want && !memcmp(bin, image, n);
        free(bin);
        if (found) snprintf(cu, culen, "%.*s.cu", (int)(strlen(path) - 6), path);
    }
    closedir(d);
    if (!found) {
        snprintf(why, whylen, "no dpc2-cuda-*.cubin in %s equals the image", dir);
        return NULL;
    }
    size_t n = 0;
    src = read_file(cu, &n);
    if (!src) snprintf(why, whylen, "cannot read %s, the source of the image", cu);
    return src;
}

static uint64_t fnv(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

/* s single-quoted for the shell, appended to buf. */
static void quote(char *buf, size_t n, const char *s) {
    size_t k = strlen(buf);
    if (k + 1 < n) buf[k++] = '\'';
    for (; *s && k + 5 < n; s++) {
        if (*s == '\'') {
            memcpy(buf + k, "'\\''", 4);
            k += 4;
        } else
            buf[k++] = *s;
    }
    if (k + 1 < n) buf[k++] = '\'';
    buf[k] = 0;
}

#if defined(__SANITIZE_ADDRESS__)
#define SIM_SAN \
    " -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
#else
#define SIM_SAN ""
#endif
#define SIM_CXXFLAGS "-std=c++17 -O1 -fPIC -shared -ffp-contract=off" SIM_SAN

/* The shared object of source (its kernels, SIM_KERNEL each), built into
 * CACHE/fake-sim/HASH.so unless it is there; its path into so. */
static int build_so(const char *source, char *so, size_t solen, char *why, size_t whylen) {
    const char *simdir = getenv("DPC_FAKE_SIM_DIR");
    if (!simdir || !*simdir) simdir = FAKE_SIM_DIR;
    char dir[4096], hdr[4200], self[4096];
    Dl_info info;
    if (!dladdr((void *)cuInit, &info) || !info.dli_fname || !realpath(info.dli_fname, self)) {
        snprintf(why, whylen, "cannot find the fake driver's own file");
        return -1;
    }
    /* The source, the flags and the simulator's headers name the object. */
    uint64_t h = fnv(0xcbf29ce484222325ull, SIM_CXXFLAGS, sizeof SIM_CXXFLAGS);
    h = fnv(h, self, strlen(self));
    const char *const hdrs[] = {"cuda_sim.h", "sim.h"};
    for (int i = 0; i < 2; i++) {
        snprintf(hdr, sizeof hdr, "%s/%s", simdir, hdrs[i]);
        size_t n = 0;
        char *t = read_file(hdr, &n);
        if (!t) {
            snprintf(why, whylen, "cannot read %s (set DPC_FAKE_SIM_DIR to tests/sim)", hdr);
            return -1;
        }
        h = fnv(h, t, n);
        free(t);
    }
    h = fnv(h, source, strlen(source));
    cache_dir(dir, sizeof dir);
    strncat(dir, "/fake-sim", sizeof dir - strlen(dir) - 1);
    if (mkdir(dir, 0700) && access(dir, W_OK)) {
        snprintf(why, whylen, "cannot create %s", dir);
        return -1;
    }
    snprintf(so, solen, "%s/%016llx.so", dir, (unsigned long long)h);
    if (!access(so, R_OK)) return 0;
    char cu[4300], tu[4300], tmp[4300], log[4300];
    snprintf(cu, sizeof cu, "%s/%016llx.cu", dir, (unsigned long long)h);
    snprintf(tu, sizeof tu, "%s/%016llx.cpp", dir, (unsigned long long)h);
    snprintf(tmp, sizeof tmp, "%s/tmp-%ld-%016llx.so", dir, (long)getpid(), (unsigned long long)h);
    snprintf(log, sizeof log, "%s/%016llx.log", dir, (unsigned long long)h);
    FILE *f = fopen(cu, "w"), *g = fopen(tu, "w");
    if (f) fputs(source, f);
    /* The TU of tests/sim_test.sh's kernel_tu: the simulator, the text, an
     * entry per `extern "C" __global__ void [__launch_bounds__(N) ]NAME(`. */
    if (g) {
        fprintf(g, "#include \"cuda_sim.h\"\n#include \"%s\"\n", cu);
        const char *key = "extern \"C\" __global__ void ", *lb = "__launch_bounds__(";
        for (const char *p = source; (p = strstr(p, key)); p++) {
            if (p != source && p[-1] != '\n') continue;
            const char *nm = p + strlen(key), *e;
            if (!strncmp(nm, lb, strlen(lb)) && (e = strstr(nm, ") "))) nm = e + 2;
            e = nm;
            while ((*e >= 'A' && *e <= 'Z') || (*e >= 'a' && *e <= 'z') ||
                   (*e >= '0' && *e <= '9') || *e == '_')
                e++;
            if (*e == '(') fprintf(g, "SIM_KERNEL(%.*s)\n", (int)(e - nm), nm);
        }
    }
    int bad = !f || !g;
    if (f) bad |= fclose(f) != 0;
    if (g) bad |= fclose(g) != 0;
    if (bad) {
        snprintf(why, whylen, "cannot write %s", tu);
        return -1;
    }
    char cmd[20000] = "g++ " SIM_CXXFLAGS " -I";
    quote(cmd, sizeof cmd, simdir);
    strncat(cmd, " -o ", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, tmp);
    strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, tu);
    strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, self); /* the simulator's symbols */
    strncat(cmd, " 2>", sizeof cmd - strlen(cmd) - 1);
    quote(cmd, sizeof cmd, log);
    if (system(cmd) != 0) {
        size_t n = 0;
        char *t = read_file(log, &n);
        char *nl = t ? strchr(t, '\n') : NULL;
        if (nl) *nl = 0;
        snprintf(why, whylen, "g++ cannot build %s for the simulator (%s): %s", cu, log,
                 t ? t : "no log");
        free(t);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, so)) {
        snprintf(why, whylen, "cannot rename %s to %s", tmp, so);
        unlink(tmp);
        return -1;
    }
    return 0;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n,
                                    CUjit_option *opt, void **val) {
    (void)n, (void)opt, (void)val;
    char cu[4400], so[4400], why[24576];
    if (!image) return CUDA_ERROR_INVALID_IMAGE;
    pthread_mutex_lock(&module_mu);
    char *src = find_source(image, cu, sizeof cu, why, sizeof why);
    int rc = src ? build_so(src, so, sizeof so, why, sizeof why) : -1;
    free(src);
    void *h = rc ? NULL : dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!rc && !h) snprintf(why, sizeof why, "cannot load %s: %s", so, dlerror());
    pthread_mutex_unlock(&module_mu);
    if (!h) {
        fprintf(stderr, "fake cuda: cuModuleLoadDataEx: %s\n", why);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *m = calloc(1, sizeof **m);
    if (!*m) return CUDA_ERROR_OUT_OF_MEMORY;
    (*m)->so = h;
    return CUDA_SUCCESS;
}
/* The object stays loaded: its thread_local shared memory may outlive this.
 * The device's queued launches run first: they name its functions. */
CUresult CUDAAPI cuModuleUnload(CUmodule m) {
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    device_wait(current_dev);
    while (m->funcs) {
        struct CUfunc_st *f = m->funcs;
        m->funcs = f->next;
        free(f);
    }
    free(m);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    char sym[200];
    if (!m || strlen(name) >= 128) return CUDA_ERROR_INVALID_VALUE;
    snprintf(sym, sizeof sym, "sim_entry_%s", name);
    void *entry = dlsym(m->so, sym);
    snprintf(sym, sizeof sym, "sim_sizes_%s", name);
    void *sizes = dlsym(m->so, sym);
    if (!entry || !sizes) return CUDA_ERROR_NOT_FOUND;
    struct CUfunc_st *r = calloc(1, sizeof *r);
    if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
    snprintf(r->name, sizeof r->name, "%s", name);
    memcpy(&r->fn, &entry, sizeof entry); /* POSIX: dlsym's void * is the function */
    const size_t *(*get)(void);
    memcpy(&get, &sizes, sizeof sizes);
    size_t total = 0;
    for (const size_t *z = get(); *z; z++) {
        total += (*z + 7) / 8 * 8;
        if (r->nargs == MAX_ARGS || total > MAX_PARAM_BYTES) {
            free(r);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        r->size[r->nargs++] = *z;
    }
    r->next = m->funcs;
    m->funcs = r;
    *f = r;
    return CUDA_SUCCESS;
}
/* What the simulator runs: a 1-D grid of 1-D blocks, no dynamic shared
 * memory (not simulated); each parameter's value is copied now (captures
 * record them by value, as the driver does). */
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
                                CUstream s, void **params, void **extra) {
    if (!f || !params || extra || gx == 0 || gx > 0x7fffffffu || gy != 1 || gz != 1 || bx == 0 ||
        bx > 1024 || by != 1 || bz != 1 || shm)
        return CUDA_ERROR_INVALID_VALUE;
    op o;
    memset(&o, 0, sizeof o);
    o.kind = OP_KERNEL;
    o.f = f;
    o.grid = gx, o.block = bx;
    size_t off = 0;
    for (int j = 0; j < f->nargs; j++) {
        memcpy(o.param + off, params[j], f->size[j]);
        off += (f->size[j] + 7) / 8 * 8;
    }
    return issue(s, &o);
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode) {
    (void)mode;
    if (s->rec || capturing_here) return CUDA_ERROR_ILLEGAL_STATE;
    s->rec = calloc(1, sizeof *s->rec);
    if (!s->rec) return CUDA_ERROR_OUT_OF_MEMORY;
    s->rec->joined[s->rec->njoined++] = s; /* the origin comes first */
    capturing_here = 1;
    return CUDA_SUCCESS;
}
static int end_captures; /* for FAKE_CUDA_FAIL_CAPTURE */

CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph *g) {
    if (!s->rec || s->rec->joined[0] != s) return CUDA_ERROR_ILLEGAL_STATE;
    struct CUgraph_st *rec = s->rec;
    *g = rec;
    for (int i = 0; i < rec->njoined; i++) rec->joined[i]->rec = NULL;
    capturing_here = 0;
    int n = env_int("FAKE_CUDA_FAIL_CAPTURE", 0);
    if (n > 0 && __atomic_add_fetch(&end_captures, 1, __ATOMIC_SEQ_CST) == n) {
        *g = NULL;
        free(rec->ops);
        free(rec);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    return CUDA_SUCCESS;
}

/* FAKE_CUDA_FAIL_CAPTURE's count starts again (a test's own Nth). */
void fake_capture_count_reset(void) { __atomic_store_n(&end_captures, 0, __ATOMIC_SEQ_CST); }
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *e, CUgraph g, unsigned long long flags) {
    (void)flags;
    *e = calloc(1, sizeof **e);
    if (!*e) return CUDA_ERROR_OUT_OF_MEMORY;
    (*e)->g.n = g->n;
    (*e)->g.ops = malloc(g->n * sizeof *g->ops + 1);
    if (!(*e)->g.ops) return CUDA_ERROR_OUT_OF_MEMORY;
    if (g->n) memcpy((*e)->g.ops, g->ops, g->n * sizeof *g->ops);
    return CUDA_SUCCESS;
}
/* Queues (or runs) the graph's operations, copies of them: the graph may
 * be destroyed before they run, as with the driver. */
CUresult CUDAAPI cuGraphLaunch(CUgraphExec e, CUstream s) {
    if (s && s->rec) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    int dev = s ? s->dev : current_dev;
    if (lost_on(dev)) return lost_on(dev);
    for (size_t i = 0; i < e->g.n; i++) {
        op x = e->g.ops[i];
        CUresult r = pick_fault(&x, dev);
        if (r != CUDA_SUCCESS) return r;
        if (deferred()) {
            enqueue(stream_of(s), &x);
            continue;
        }
        r = run(&x, dev);
        if (r == CUDA_ERROR_ILLEGAL_ADDRESS) return CUDA_SUCCESS; /* shows later */
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec e) {
    free(e->g.ops);
    free(e);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
    free(g->ops);
    free(g);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n) {
    if (nodes) return CUDA_ERROR_NOT_SUPPORTED;
    *n = g->n;
    return CUDA_SUCCESS;
}

/* ---- cuBLAS ----------------------------------------------------------------------- */

cublasStatus_t CUBLASWINAPI cublasCreate(cublasHandle_t *h) {
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
/* Synchronises the device, as cuBLAS documents (and cudnnDestroy). */
cublasStatus_t CUBLASWINAPI cublasDestroy(cublasHandle_t h) {
    device_wait(current_dev);
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t CUBLASWINAPI cublasSetWorkspace(cublasHandle_t h, void *w, size_t n) {
    (void)h;
    return w && n ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    if (m != CUBLAS_DEFAULT_MATH && m != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->tf32 = m == CUBLAS_TF32_TENSOR_OP_MATH;
    return CUBLAS_STATUS_SUCCESS;
}
/* The argument rules cuBLAS documents for its strided-batched GEMMs. */
static int gemm_args_ok(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda,
                        int ldb, int ldc, int batch) {
    return m >= 0 && n >= 0 && k >= 0 && batch >= 0 && (ta == CUBLAS_OP_N || ta == CUBLAS_OP_T) &&
           (tb == CUBLAS_OP_N || tb == CUBLAS_OP_T) &&
           lda >= (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1)) &&
           ldb >= (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1)) && ldc >= (m > 1 ? m : 1);
}
/* The argument rules, then the product. */
cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                                      cublasOperation_t tb, int m, int n, int k,
                                                      const float *alpha, const float *A, int lda,
                                                      long long sa, const float *B, int ldb,
                                                      long long sb, const float *beta, float *C,
                                                      int ldc, long long sc, int batch) {
    if (!gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc, batch)) return CUBLAS_STATUS_INVALID_VALUE;
    op o;
    memset(&o, 0, sizeof o);
    o.kind = OP_GEMM;
    o.ta = ta, o.tb = tb, o.m = m, o.n = n, o.k = k, o.lda = lda, o.ldb = ldb, o.ldc = ldc;
    o.batch = batch, o.alpha = *alpha, o.beta = *beta; /* host pointer mode: by value */
    o.A = A, o.B = B, o.C = C, o.sa = sa, o.sb = sb, o.sc = sc;
    o.tf32 = h->tf32;
    return issue(h->stream, &o) == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS
                                                : CUBLAS_STATUS_EXECUTION_FAILED;
}
/* f32 or bf16 operands (A and B alike), f32 compute (TF32 for f32 operands
 * with CUBLAS_COMPUTE_32F_FAST_TF32, or in the handle's TF32 math mode),
 * the default algorithm: what codegen/gemm.c's descriptors ask for. */
cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType at, int lda, long long sa, const void *B,
    cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    int ok_ab = (at == CUDA_R_16BF || at == CUDA_R_32F) && bt == at;
    int fast_tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    if (!ok_ab || (ct != CUDA_R_16BF && ct != CUDA_R_32F) ||
        (compute != CUBLAS_COMPUTE_32F && !fast_tf32) || (fast_tf32 && at != CUDA_R_32F) ||
        algo != CUBLAS_GEMM_DEFAULT)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc, batch)) return CUBLAS_STATUS_INVALID_VALUE;
    op o;
    memset(&o, 0, sizeof o);
    o.kind = OP_GEMM;
    o.ta = ta, o.tb = tb, o.m = m, o.n = n, o.k = k, o.lda = lda, o.ldb = ldb, o.ldc = ldc;
    o.batch = batch, o.alpha = *(const float *)alpha, o.beta = *(const float *)beta;
    o.A = A, o.B = B, o.C = C, o.sa = sa, o.sb = sb, o.sc = sc;
    o.bf16_ab = at == CUDA_R_16BF, o.bf16_c = ct == CUDA_R_16BF;
    o.tf32 = at == CUDA_R_32F && ct == CUDA_R_32F && (fast_tf32 || h->tf32);
    return issue(h->stream, &o) == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS
                                                : CUBLAS_STATUS_EXECUTION_FAILED;
}
cublasStatus_t CUBLASWINAPI cublasGetProperty(libraryPropertyType t, int *v) {
    *v = t == MAJOR_VERSION ? RT_CUBLAS_MAJOR : 0;
    return CUBLAS_STATUS_SUCCESS;
}
const char *CUBLASWINAPI cublasGetStatusName(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_FAKE_ERROR";
}
const char *CUBLASWINAPI cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "an error of the fake cuBLAS";
}

/* ---- cuDNN -------------------------------------------------------------------------
 * The calls runtime/cuda/cudnn.c makes. Every direction offers the same
 * three algorithms, best first: 0 non-deterministic with no workspace, 2
 * deterministic with a workspace no device has, 1 deterministic with
 * FAKE_CUDNN_WS bytes: dpc must take 1. Each convolution runs on the
 * host as fake_math.c's implicit GEMM (fake_conv); an f32 one whose math type is not
 * CUDNN_FMA_MATH reads TF32, as Ampere and later do. fake_cudnn_uses
 * counts the convolutions run with each algorithm, fake_cudnn_grouped_uses
 * those of more than one group. */

#define FAKE_CUDNN_WS    4096
#define FAKE_CUDNN_ALGOS 3

struct cudnnContext {
    CUstream stream;
};
struct cudnnTensorStruct {
    cudnnDataType_t t;
    int n, c, h, w;
};
struct cudnnFilterStruct {
    cudnnDataType_t t;
    int k, c, h, w;
};
struct cudnnConvolutionStruct {
    int ph, pw, sh, sw;
    cudnnMathType_t math;
    int groups; /* 0 until set: 1 */
};

static long long cudnn_uses[FAKE_CUDNN_ALGOS], cudnn_grouped;

long long fake_cudnn_grouped_uses(void) {
    return __atomic_load_n(&cudnn_grouped, __ATOMIC_SEQ_CST);
}

long long fake_cudnn_uses(int algo) {
    return algo >= 0 && algo < FAKE_CUDNN_ALGOS
               ? __atomic_load_n(&cudnn_uses[algo], __ATOMIC_SEQ_CST)
               : -1;
}

size_t CUDNNWINAPI cudnnGetVersion(void) { return 90100; }
const char *CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t s) {
    return s == CUDNN_STATUS_SUCCESS            ? "CUDNN_STATUS_SUCCESS"
           : s == CUDNN_STATUS_EXECUTION_FAILED ? "CUDNN_STATUS_EXECUTION_FAILED"
                                                : "CUDNN_STATUS_FAKE_ERROR";
}
cudnnStatus_t CUDNNWINAPI cudnnCreate(cudnnHandle_t *h) {
    *h = calloc(1, sizeof **h);
    return *h ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR;
}
cudnnStatus_t CUDNNWINAPI cudnnDestroy(cudnnHandle_t h) {
    device_wait(current_dev);
    free(h);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

#define FAKE_DESCRIPTOR(T, create, destroy)                             \
    cudnnStatus_t CUDNNWINAPI create(T *d) {                            \
        *d = calloc(1, sizeof **d);                                     \
        return *d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR; \
    }                                                                   \
    cudnnStatus_t CUDNNWINAPI destroy(T d) {                            \
        free(d);                                                        \
        return CUDNN_STATUS_SUCCESS;                                    \
    }
FAKE_DESCRIPTOR(cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor)
FAKE_DESCRIPTOR(cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor)
FAKE_DESCRIPTOR(cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                cudnnDestroyConvolutionDescriptor)

static int cudnn_type_ok(cudnnDataType_t t) {
    return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_BFLOAT16;
}

cudnnStatus_t CUDNNWINAPI cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d,
                                                     cudnnTensorFormat_t f, cudnnDataType_t t,
                                                     int n, int c, int h, int w) {
    if (f != CUDNN_TENSOR_NCHW || !cudnn_type_ok(t) || n < 1 || c < 1 || h < 1 || w < 1)
        return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnTensorStruct){t, n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t,
                                                     cudnnTensorFormat_t f, int k, int c, int h,
                                                     int w) {
    if (f != CUDNN_TENSOR_NCHW || !cudnn_type_ok(t) || k < 1 || c < 1 || h < 1 || w < 1)
        return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnFilterStruct){t, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph,
                                                          int pw, int u, int v, int dh, int dw,
                                                          cudnnConvolutionMode_t mode,
                                                          cudnnDataType_t compute) {
    if (ph < 0 || pw < 0 || u < 1 || v < 1 || dh != 1 || dw != 1 ||
        mode != CUDNN_CROSS_CORRELATION || compute != CUDNN_DATA_FLOAT)
        return CUDNN_STATUS_NOT_SUPPORTED;
    d->ph = ph, d->pw = pw, d->sh = u, d->sw = v;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                                      cudnnMathType_t m) {
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int g) {
    if (g < 1) return CUDNN_STATUS_BAD_PARAM;
    d->groups = g;
    return CUDNN_STATUS_SUCCESS;
}

/* The convolution the descriptors describe (0 when they disagree, as
 * cuDNN's CUDNN_STATUS_BAD_PARAM). */
static int conv_shape(conv_op *o, int dir, cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                      cudnnConvolutionDescriptor_t cv, cudnnTensorDescriptor_t y) {
    memset(o, 0, sizeof *o);
    o->dir = dir;
    o->N = x->n, o->C = x->c, o->H = x->h, o->W = x->w, o->K = w->k, o->R = w->h, o->S = w->w;
    o->sh = cv->sh, o->sw = cv->sw, o->ph = cv->ph, o->pw = cv->pw, o->Ho = y->h, o->Wo = y->w;
    o->G = cv->groups ? cv->groups : 1;
    o->bf16 = x->t == CUDNN_DATA_BFLOAT16;
    o->tf32 = !o->bf16 && cv->math != CUDNN_FMA_MATH;
    return x->t == w->t && x->t == y->t && x->c % o->G == 0 && w->k % o->G == 0 &&
           w->c * o->G == x->c && y->c == w->k && y->n == x->n &&
           y->h == (x->h + 2 * cv->ph - w->h) / cv->sh + 1 &&
           y->w == (x->w + 2 * cv->pw - w->w) / cv->sw + 1 && x->h + 2 * cv->ph >= w->h &&
           x->w + 2 * cv->pw >= w->w;
}

static size_t algo_ws(int algo) {
    return algo == 1 ? FAKE_CUDNN_WS : algo == 2 ? (size_t)1 << 50 : 0;
}

/* The three candidates, best first, into any of the perf structs. */
#define FAKE_PERF(perf, requested, returned)                                                    \
    do {                                                                                        \
        static const int order[FAKE_CUDNN_ALGOS] = {0, 2, 1};                                   \
        int n_ = (requested) < FAKE_CUDNN_ALGOS ? (requested) : FAKE_CUDNN_ALGOS;               \
        for (int i_ = 0; i_ < n_; i_++) {                                                       \
            memset(&(perf)[i_], 0, sizeof(perf)[i_]);                                           \
            (perf)[i_].algo = order[i_];                                                        \
            (perf)[i_].status = CUDNN_STATUS_SUCCESS;                                           \
            (perf)[i_].time = (float)(i_ + 1);                                                  \
            (perf)[i_].memory = algo_ws(order[i_]);                                             \
            (perf)[i_].determinism = order[i_] ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC; \
        }                                                                                       \
        *(returned) = n_;                                                                       \
    } while (0)

/* Runs (or records) the convolution after the argument rules. */
static _Thread_local int finding;           /* inside a Find*Ex search: its calls are not counted */
static long long cudnn_calls, cudnn_failed; /* for FAKE_CUDNN_FAIL */

long long fake_cudnn_failures(void) { return __atomic_load_n(&cudnn_failed, __ATOMIC_SEQ_CST); }
/* FAKE_CUDNN_FAIL's count starts again (a test's own Nth). */
void fake_cudnn_count_reset(void) { __atomic_store_n(&cudnn_calls, 0, __ATOMIC_SEQ_CST); }

static cudnnStatus_t conv_issue(cudnnHandle_t h, conv_op *o, int algo, void *ws, size_t wsn) {
    if (algo < 0 || algo >= FAKE_CUDNN_ALGOS) return CUDNN_STATUS_BAD_PARAM;
    if (algo_ws(algo) > wsn || (algo_ws(algo) && !ws)) return CUDNN_STATUS_BAD_PARAM;
    int fail = env_int("FAKE_CUDNN_FAIL", 0);
    if (fail && !finding &&
        (fail < 0 || __atomic_add_fetch(&cudnn_calls, 1, __ATOMIC_SEQ_CST) == fail)) {
        __atomic_add_fetch(&cudnn_failed, 1, __ATOMIC_SEQ_CST);
        return CUDNN_STATUS_EXECUTION_FAILED;
    }
    __atomic_fetch_add(&cudnn_uses[algo], 1, __ATOMIC_SEQ_CST);
    if (o->G > 1) __atomic_fetch_add(&cudnn_grouped, 1, __ATOMIC_SEQ_CST);
    op x;
    memset(&x, 0, sizeof x);
    x.kind = OP_CONV;
    x.conv = *o;
    return issue(h->stream, &x) == CUDA_SUCCESS ? CUDNN_STATUS_SUCCESS
                                                : CUDNN_STATUS_EXECUTION_FAILED;
}

static int scalars_ok(const void *alpha, const void *beta) {
    return *(const float *)alpha == 1 && *(const float *)beta == 0; /* what dpc asks for */
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t y, const int req, int *ret,
    cudnnConvolutionFwdAlgoPerf_t *perf) {
    conv_op o;
    (void)h;
    if (!conv_shape(&o, 0, x, w, cv, y)) return CUDNN_STATUS_BAD_PARAM;
    FAKE_PERF(perf, req, ret);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cv, const cudnnTensorDescriptor_t dx, const int req,
    int *ret, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    conv_op o;
    (void)h;
    if (!conv_shape(&o, 1, dx, w, cv, dy)) return CUDNN_STATUS_BAD_PARAM;
    FAKE_PERF(perf, req, ret);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t cv, const cudnnFilterDescriptor_t dw, const int req,
    int *ret, cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    conv_op o;
    (void)h;
    if (!conv_shape(&o, 2, x, dw, cv, dy)) return CUDNN_STATUS_BAD_PARAM;
    FAKE_PERF(perf, req, ret);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(cudnnHandle_t h, const void *alpha,
                                                  const cudnnTensorDescriptor_t xd, const void *x,
                                                  const cudnnFilterDescriptor_t wd, const void *w,
                                                  const cudnnConvolutionDescriptor_t cv,
                                                  cudnnConvolutionFwdAlgo_t algo, void *ws,
                                                  size_t wsn, const void *beta,
                                                  const cudnnTensorDescriptor_t yd, void *y) {
    conv_op o;
    if (!conv_shape(&o, 0, xd, wd, cv, yd) || !scalars_ok(alpha, beta))
        return CUDNN_STATUS_BAD_PARAM;
    o.x = x, o.w = w, o.out = y;
    return conv_issue(h, &o, (int)algo, ws, wsn);
}
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(
    cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd, const void *w,
    const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cv,
    cudnnConvolutionBwdDataAlgo_t algo, void *ws, size_t wsn, const void *beta,
    const cudnnTensorDescriptor_t dxd, void *dx) {
    conv_op o;
    if (!conv_shape(&o, 1, dxd, wd, cv, dyd) || !scalars_ok(alpha, beta))
        return CUDNN_STATUS_BAD_PARAM;
    o.w = w, o.y = dy, o.out = dx;
    return conv_issue(h, &o, (int)algo, ws, wsn);
}
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(
    cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cv,
    cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t wsn, const void *beta,
    const cudnnFilterDescriptor_t dwd, void *dw) {
    conv_op o;
    if (!conv_shape(&o, 2, xd, dwd, cv, dyd) || !scalars_ok(alpha, beta))
        return CUDNN_STATUS_BAD_PARAM;
    o.x = x, o.y = dy, o.out = dw;
    return conv_issue(h, &o, (int)algo, ws, wsn);
}

/* Find: the candidates measured by running each on the caller's buffers
 * (the output is written, as cuDNN's search writes it); never while the
 * stream captures. It blocks the host until they ran, as cuDNN's does. */
#define FAKE_FIND(call, perf, req, ret, ws, wsn)                                           \
    do {                                                                                   \
        if (not_captured(h->stream) != CUDA_SUCCESS) return CUDNN_STATUS_NOT_SUPPORTED;    \
        FAKE_PERF(perf, req, ret);                                                         \
        for (int i_ = 0; i_ < *(ret); i_++)                                                \
            if ((perf)[i_].memory > (wsn)) (perf)[i_].status = CUDNN_STATUS_NOT_SUPPORTED; \
        finding = 1;                                                                       \
        cudnnStatus_t st_ = call;                                                          \
        finding = 0;                                                                       \
        stream_wait(stream_of(h->stream));                                                 \
        return st_;                                                                        \
    } while (0)

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cv,
    const cudnnTensorDescriptor_t yd, void *y, const int req, int *ret,
    cudnnConvolutionFwdAlgoPerf_t *perf, void *ws, size_t wsn) {
    static const float one = 1, zero = 0;
    FAKE_FIND(cudnnConvolutionForward(h, &one, xd, x, wd, w, cv, (cudnnConvolutionFwdAlgo_t)1, ws,
                                      wsn, &zero, yd, y),
              perf, req, ret, ws, wsn);
}
cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w,
    const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cv,
    const cudnnTensorDescriptor_t dxd, void *dx, const int req, int *ret,
    cudnnConvolutionBwdDataAlgoPerf_t *perf, void *ws, size_t wsn) {
    static const float one = 1, zero = 0;
    FAKE_FIND(cudnnConvolutionBackwardData(h, &one, wd, w, dyd, dy, cv,
                                           CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, ws, wsn, &zero, dxd,
                                           dx),
              perf, req, ret, ws, wsn);
}
cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cv,
    const cudnnFilterDescriptor_t dwd, void *dw, const int req, int *ret,
    cudnnConvolutionBwdFilterAlgoPerf_t *perf, void *ws, size_t wsn) {
    static const float one = 1, zero = 0;
    FAKE_FIND(cudnnConvolutionBackwardFilter(h, &one, xd, x, dyd, dy, cv,
                                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws, wsn, &zero,
                                             dwd, dw),
              perf, req, ret, ws, wsn);
}

/* ---- NCCL -------------------------------------------------------------------------- */

#define MAX_CALLS 4096

#define MAX_RANKS 64
#define FAKE_ID   "dpc-fake-nccl-id"

typedef struct world {
    int n, refs;
    int local;                     /* ranks made in this process */
    char id[NCCL_UNIQUE_ID_BYTES]; /* ncclCommInitRank's; empty for InitAll */
    struct world *next;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned long gen;
    const op *call[MAX_RANKS];           /* each rank's call in progress */
    unsigned long here[MAX_RANKS];       /* gen + 1 once the rank arrived in gen */
    struct ncclComm *comm_of[MAX_RANKS]; /* each rank's communicator in this process */
} world;

/* A queued collective: its stream, its place there, and its number among
 * the rank's collectives (the generation of the world it joins). */
typedef struct {
    struct CUstream_st *s;
    uint64_t ticket;
    unsigned long seq;
} pending;

struct ncclComm {
    world *w;
    int rank;
    /* Deferred mode, under q_mu: the collectives queued and not yet run,
     * oldest first, and how many were ever queued. */
    pending *pend;
    int npend, cap;
    unsigned long queued;
};

static void pending_add(struct ncclComm *c, struct CUstream_st *s, uint64_t ticket) {
    if (c->npend == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->pend = realloc(c->pend, sizeof *c->pend * (size_t)c->cap);
        if (!c->pend) abort();
    }
    c->pend[c->npend++] = (pending){s, ticket, c->queued++};
}
static void pending_remove(struct ncclComm *c, struct CUstream_st *s, uint64_t ticket) {
    for (int i = 0; i < c->npend; i++)
        if (c->pend[i].s == s && c->pend[i].ticket == ticket) {
            memmove(c->pend + i, c->pend + i + 1, sizeof *c->pend * (size_t)(c->npend - i - 1));
            c->npend--;
            return;
        }
}

/* A GPU runs every rank's stream by itself; here a stream runs when a
 * host thread waits for it, and the thread that waits for rank 0's stream
 * (dprun's main thread reading a loss) may be the only one: so a rank
 * blocked in a collective runs, for each rank missing from generation gen,
 * its stream up to that rank's collective of gen, where no other thread
 * runs that stream. */
static void help_missing(struct ncclComm *const *missing, int n, unsigned long gen) {
    for (int i = 0; i < n; i++) {
        struct ncclComm *c = missing[i];
        pthread_mutex_lock(&q_mu);
        pending p = c && c->npend ? c->pend[0] : (pending){NULL, 0, 0};
        int mine = p.s && p.seq == gen && !p.s->runner && p.s->done < p.ticket;
        pthread_mutex_unlock(&q_mu);
        if (mine) drain(p.s, p.ticket);
    }
}

/* What each rank reduced, in call order (at run time, so a replayed graph
 * logs again). */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static const void *log_src[MAX_DEVICES][MAX_CALLS];
static long long log_count[MAX_DEVICES][MAX_CALLS];
static char log_kind[MAX_DEVICES][2 * MAX_CALLS + 1];
static int log_n[MAX_DEVICES], log_kinds[MAX_DEVICES], log_bcasts[MAX_DEVICES];

/* For the test: rank's all-reduces and reduces so far (up to max of them);
 * returns how many. */
int fake_nccl_calls(int rank, const void **src, long long *count, int max) {
    pthread_mutex_lock(&log_mu);
    int n = rank >= 0 && rank < MAX_DEVICES ? log_n[rank] : 0;
    for (int i = 0; i < n && i < max; i++) src[i] = log_src[rank][i], count[i] = log_count[rank][i];
    pthread_mutex_unlock(&log_mu);
    return n;
}

/* For the test: the same calls' kinds, "a" for an all-reduce and "rK" for
 * a reduce to rank K (K < 10), into buf (NUL-terminated); broadcasts are
 * counted apart (fake_nccl_broadcasts). */
void fake_nccl_kinds(int rank, char *buf, int max) {
    pthread_mutex_lock(&log_mu);
    int n = rank >= 0 && rank < MAX_DEVICES ? log_kinds[rank] : 0;
    if (n > max - 1) n = max - 1;
    if (n > 0) memcpy(buf, log_kind[rank], (size_t)n);
    buf[n > 0 ? n : 0] = 0;
    pthread_mutex_unlock(&log_mu);
}

int fake_nccl_broadcasts(int rank) {
    pthread_mutex_lock(&log_mu);
    int n = rank >= 0 && rank < MAX_DEVICES ? log_bcasts[rank] : 0;
    pthread_mutex_unlock(&log_mu);
    return n;
}

void fake_nccl_clear(void) {
    pthread_mutex_lock(&log_mu);
    memset(log_n, 0, sizeof log_n);
    memset(log_kinds, 0, sizeof log_kinds);
    memset(log_bcasts, 0, sizeof log_bcasts);
    pthread_mutex_unlock(&log_mu);
}

static void log_call(const op *o) {
    int r = o->comm->rank;
    pthread_mutex_lock(&log_mu);
    if (r < MAX_DEVICES && o->kind == OP_BCAST) log_bcasts[r]++;
    if (r < MAX_DEVICES && o->kind != OP_BCAST && log_n[r] < MAX_CALLS) {
        log_src[r][log_n[r]] = o->src;
        log_count[r][log_n[r]++] = (long long)o->bytes;
        log_kind[r][log_kinds[r]++] = o->kind == OP_REDUCE ? 'r' : 'a';
        if (o->kind == OP_REDUCE) log_kind[r][log_kinds[r]++] = (char)('0' + o->root % 10);
    }
    pthread_mutex_unlock(&log_mu);
}

/* The last rank to arrive does every rank's part of the call: the sum in
 * rank order (float, as NCCL does) into every recv buffer, or the root's
 * (reduce); the root's bytes into every recv buffer (broadcast). Ranks
 * that made different calls get NaN (floats) or 0xff bytes, and a line on
 * stderr: a bug of the caller, which real NCCL would hang on. */
static void complete(world *w) {
    const op *o0 = w->call[0];
    int same = 1;
    for (int r = 1; r < w->n; r++)
        same &= w->call[r]->kind == o0->kind && w->call[r]->bytes == o0->bytes &&
                w->call[r]->root == o0->root;
    if (!same) {
        fprintf(stderr, "fake nccl: the ranks made different calls\n");
        for (int r = 0; r < w->n; r++)
            if (w->call[r]->dst)
                memset(w->call[r]->dst, 0xff,
                       w->call[r]->bytes * (w->call[r]->kind == OP_BCAST ? 1 : sizeof(float)));
        return;
    }
    size_t count = o0->bytes;
    if (o0->kind == OP_BCAST) {
        const void *from = w->call[o0->root]->src;
        for (int r = 0; r < w->n; r++)
            if (w->call[r]->dst != from) memcpy(w->call[r]->dst, from, count);
        return;
    }
    float *sum = malloc(sizeof *sum * (count ? count : 1));
    if (!sum) abort();
    for (size_t i = 0; i < count; i++) {
        float s = 0;
        for (int r = 0; r < w->n; r++) s += ((const float *)w->call[r]->src)[i];
        sum[i] = s;
    }
    for (int r = 0; r < w->n; r++)
        if (o0->kind == OP_ALLREDUCE || r == o0->root)
            memcpy(w->call[r]->dst, sum, sizeof *sum * count);
    free(sum);
}

/* Blocks until every rank of the communicator arrived with its call (in
 * deferred mode running the missing ranks' streams where it can). */
static void collective_now(const op *o) {
    world *w = o->comm->w;
    log_call(o);
    pthread_mutex_lock(&w->mu);
    unsigned long gen = w->gen;
    w->call[o->comm->rank] = o;
    w->here[o->comm->rank] = gen + 1;
    if (++w->arrived == w->n) {
        complete(w);
        w->arrived = 0;
        w->gen++;
        pthread_cond_broadcast(&w->cv);
    }
    while (gen == w->gen) {
        if (!deferred()) {
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        struct ncclComm *missing[MAX_RANKS];
        int n = 0;
        for (int r = 0; r < w->n; r++)
            if (w->here[r] != gen + 1 && w->comm_of[r]) missing[n++] = w->comm_of[r];
        pthread_mutex_unlock(&w->mu);
        help_missing(missing, n, gen);
        pthread_mutex_lock(&w->mu);
        if (gen != w->gen) break;
        /* A rank's stream run by another thread: look again shortly. */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 2000000;
        if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&w->cv, &w->mu, &t);
    }
    pthread_mutex_unlock(&w->mu);
}

ncclResult_t ncclGetVersion(int *version) {
    *version = RT_NCCL_MAJOR * 10000 + 28 * 100 + 9; /* 2.28.9 */
    return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static int made;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, FAKE_ID " %ld %d", (long)getpid(), ++made);
    return ncclSuccess;
}

#define MAX_INITS 64
static struct {
    char id[NCCL_UNIQUE_ID_BYTES];
    int rank, nranks;
} inits[MAX_INITS];
static int ninits;
static world *worlds; /* ncclCommInitRank's, by id */

/* For the test: ncclCommInitRank call i's id, rank and nranks; returns how
 * many calls there were. */
int fake_nccl_inits(int i, char *id, int *rank, int *nranks) {
    pthread_mutex_lock(&log_mu);
    int n = ninits < MAX_INITS ? ninits : MAX_INITS;
    if (i >= 0 && i < n) {
        memcpy(id, inits[i].id, NCCL_UNIQUE_ID_BYTES);
        *rank = inits[i].rank, *nranks = inits[i].nranks;
    }
    pthread_mutex_unlock(&log_mu);
    return n;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks ||
        strncmp(id.internal, FAKE_ID " ", strlen(FAKE_ID) + 1))
        return ncclInvalidArgument;
    pthread_mutex_lock(&log_mu);
    if (ninits < MAX_INITS) {
        memcpy(inits[ninits].id, id.internal, NCCL_UNIQUE_ID_BYTES);
        inits[ninits].rank = rank, inits[ninits].nranks = nranks;
    }
    ninits++;
    world *w = worlds;
    while (w && memcmp(w->id, id.internal, NCCL_UNIQUE_ID_BYTES)) w = w->next;
    if (w && w->n != nranks) {
        pthread_mutex_unlock(&log_mu);
        return ncclInvalidUsage;
    }
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w) abort();
        w->n = nranks;
        memcpy(w->id, id.internal, NCCL_UNIQUE_ID_BYTES);
        pthread_mutex_init(&w->mu, NULL);
        pthread_cond_init(&w->cv, NULL);
        w->next = worlds;
        worlds = w;
    }
    w->refs++;
    w->local++;
    pthread_mutex_unlock(&log_mu);
    *comm = calloc(1, sizeof **comm);
    if (!*comm) return ncclSystemError;
    (*comm)->w = w;
    (*comm)->rank = rank;
    pthread_mutex_lock(&w->mu);
    w->comm_of[rank] = *comm;
    pthread_mutex_unlock(&w->mu);
    return ncclSuccess;
}
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
    if (ndev < 1 || ndev > MAX_DEVICES) return ncclInvalidArgument;
    for (int i = 0; i < ndev; i++) {
        if (devlist[i] < 0 || devlist[i] >= devices()) return ncclInvalidArgument;
        for (int j = 0; j < i; j++)
            if (devlist[j] == devlist[i]) return ncclInvalidUsage; /* one rank per GPU */
    }
    world *w = calloc(1, sizeof *w);
    if (!w) return ncclSystemError;
    w->n = w->refs = w->local = ndev;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (int i = 0; i < ndev; i++) {
        comm[i] = calloc(1, sizeof **comm);
        if (!comm[i]) return ncclSystemError;
        comm[i]->w = w;
        comm[i]->rank = i;
        w->comm_of[i] = comm[i];
    }
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    world *w = comm->w;
    pthread_mutex_lock(&log_mu); /* guards worlds */
    pthread_mutex_lock(&w->mu);
    int last = --w->refs == 0;
    if (w->comm_of[comm->rank] == comm) w->comm_of[comm->rank] = NULL;
    pthread_mutex_unlock(&w->mu);
    if (last)
        for (world **p = &worlds; *p; p = &(*p)->next)
            if (*p == w) {
                *p = w->next;
                break;
            }
    pthread_mutex_unlock(&log_mu);
    if (last) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w);
    }
    free(comm->pend);
    free(comm);
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e) {
    (void)comm;
    *e = ncclSuccess;
    return ncclSuccess;
}
/* Runs (or records) a collective of comm: count elements (floats; bytes
 * for a broadcast). */
static ncclResult_t collective(int kind, const void *send, void *recv, size_t count, int root,
                               ncclComm_t comm, cudaStream_t s) {
    if (!comm || !send || (!recv && (kind != OP_REDUCE || root == comm->rank)) || root < 0 ||
        root >= comm->w->n)
        return ncclInvalidArgument;
    if (comm->w->local != comm->w->n) return ncclInvalidUsage; /* ranks in other processes */
    op o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.comm = comm;
    o.src = send;
    o.dst = recv;
    o.bytes = count;
    o.root = root;
    return issue(s, &o) == CUDA_SUCCESS ? ncclSuccess : ncclInvalidUsage;
}
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t red, ncclComm_t comm, cudaStream_t s) {
    if (type != ncclFloat || red != ncclSum) return ncclInvalidArgument;
    return collective(OP_ALLREDUCE, send, recv, count, 0, comm, s);
}
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t red, int root, ncclComm_t comm, cudaStream_t s) {
    if (type != ncclFloat || red != ncclSum) return ncclInvalidArgument;
    return collective(OP_REDUCE, send, recv, count, root, comm, s);
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t s) {
    if (type != ncclInt8) return ncclInvalidArgument;
    return collective(OP_BCAST, send, recv, count, root, comm, s);
}
/* Calls between these are queued as any others (one thread per rank). */
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
const char *ncclGetErrorString(ncclResult_t r) {
    return r == ncclSuccess ? "no error" : "an error of the fake NCCL";
}
