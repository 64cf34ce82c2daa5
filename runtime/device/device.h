/* runtime/device/device.h — what a device backend provides, as a table of
 * functions, and the backends there are.
 *
 * Usage (every hook is called through its rt_backend_* wrapper below,
 * which fills in what an optional hook's absence means and keeps the
 * backend's first device failure):
 *     rt_backend *be = rt_backend_cpu();
 *     void *buf = rt_backend_alloc(be, bytes, err, sizeof err);   // NULL: failed
 *     if (rt_backend_copy_in(be, buf, host, bytes, err, sizeof err)) ...;
 *     rt_module *m = rt_backend_compile(be, source, err, sizeof err);
 *     rt_kernel *k = rt_backend_kernel(be, m, "k0_relu", nargs, err, sizeof err);
 *     void *args[] = {out, in};                                   // device pointers
 *     rt_backend_launch(be, k, args, 2, count, NULL, err, sizeof err);
 *     rt_backend_gemm(be, &desc, A, B, C, err, sizeof err);       // cg_gemm, column-major
 *     rt_backend_sync(be, err, sizeof err);
 *     rt_backend_copy_out(be, host, buf, bytes, err, sizeof err);
 *     rt_backend_module_free(be, m);
 *     rt_backend_dealloc(be, buf);
 *     rt_backend_free(be);
 *
 * Optional CUDA-graph hooks (NULL where the backend has none, as on cpu:
 * rt_backend_has_graphs says 0):
 *     rt_backend_graph_begin(be, err, sizeof err);     // this thread's calls record
 *     ... launch / gemm / copy ...                     // recorded, not run
 *     rt_graph *gr = rt_backend_graph_end(be, err, sizeof err);
 *     rt_backend_graph_launch(be, gr, err, sizeof err);  // replay, as often as asked
 *     rt_backend_graph_free(be, gr);
 *
 * Device pointers are opaque `void *` to the caller; adding a byte offset
 * to one ((char *)p + off) names a location inside the same buffer, on
 * every backend. Every call that can fail returns NULL or non-zero with a
 * message in err; none exits the process. A failure of the device itself
 * (an allocation, a copy, a launch, a GEMM, a wait) is sticky: the backend
 * keeps the first one's message (naming the device and the work queued
 * last), and every later device call through the wrappers fails at once
 * with it (rt_backend_failed asks), so the caller reports it once through
 * its own error path and ends the run; teardown still frees.
 *
 * Environment: DPC_DEBUG=1 prints kernel counts and compile-cache hits,
 * DPC_DEBUG=2 also the generated source; DPC_PROFILE=1 times every call
 * and prints where each program's time went when its executor is freed;
 * DPC_SYNC=1 synchronises after every kernel, GEMM and all-reduce (as
 * DPC_PROFILE does), so a device failure names its call. DPC_CACHE_DIR (default
 * ~/.cache/dpc) holds compiled modules; CC overrides the C compiler.
 * The cpu backend runs kernels and GEMMs on one thread pool of DPC_THREADS
 * threads (else OMP_NUM_THREADS, else the CPUs the process may use);
 * OpenBLAS itself is set to one thread.
 */
#ifndef DPC_RT_DEVICE_DEVICE_H
#define DPC_RT_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "format/program.h"

typedef struct rt_backend rt_backend;
typedef struct rt_module rt_module; /* a compiled kernel module */
typedef struct rt_kernel rt_kernel; /* one entry point of a module */
typedef struct rt_graph rt_graph;   /* a recorded sequence of calls (CUDA graph) */
typedef struct rt_coll rt_coll;     /* a communicator among replicas (comm.h) */
struct rt_coll_ranks_ops;           /* comm.h's rt_coll_ranks_ops */

struct rt_backend {
    const char *name;     /* "cpu", "cuda" */
    cg_dialect dialect;   /* what the backend compiles */
    void *impl;           /* the backend's own state */
    int64_t memory_bytes; /* the device's memory; 0: the host's (cpu) */
    /* copy_in is stream-ordered and returns once the host memory is free,
     * before the device has the bytes (cuda): a copy issued after a run
     * lands after that run's work and overlaps it. 0: copies are done
     * when copy_in returns (cpu). */
    int async_copy;

    /* ---- capabilities: what code outside a backend asks instead of its name.
     * 1: device pointers are host pointers (cpu): collectives read and
     * write buffers in place, and replicas share the host's cores. */
    int host_memory;
    /* Which of device_count's devices this backend runs on (0 on cpu). */
    int ordinal;
    /* Devices of this kind the process may use, 0 + why when none; NULL:
     * the host only. */
    int (*device_count)(char *why, size_t whylen);
    /* Another backend of this kind on device `ordinal` (one per replica);
     * NULL + message. NULL hook: replicas share this backend. */
    rt_backend *(*open_device)(int ordinal, char *err, size_t errlen);
    /* The backend's own collective (cuda: nccl, comm.h) among n replicas on
     * bes, all of this kind, and the same across `ranks` processes; NULL +
     * why when it cannot be made. Both or neither; NULL: the host
     * collectives (local, mpi) only. */
    rt_coll *(*coll_new)(int n, rt_backend *const *bes, char *err, size_t errlen);
    rt_coll *(*coll_ranks_new)(int n, rt_backend *const *bes, int rank, int ranks,
                               const struct rt_coll_ranks_ops *ops, char *err, size_t errlen);

    /* Zero-filled device memory; NULL + message. */
    void *(*alloc)(rt_backend *be, size_t bytes, char *err, size_t errlen);
    void (*free)(rt_backend *be, void *ptr); /* never fails (reports on stderr) */
    /* 0, or -1 + message. */
    int (*copy_in)(rt_backend *be, void *dst, const void *host, size_t bytes, char *err,
                   size_t errlen);
    int (*copy_out)(rt_backend *be, void *host, const void *src, size_t bytes, char *err,
                    size_t errlen);
    int (*copy)(rt_backend *be, void *dst, const void *src, size_t bytes, char *err,
                size_t errlen); /* device to device */

    rt_module *(*compile)(rt_backend *be, const char *source, char *err, size_t errlen);
    void (*module_free)(rt_backend *be, rt_module *m);
    /* The named entry point; nargs is the kernel's buffer count. */
    rt_kernel *(*kernel)(rt_backend *be, rt_module *m, const char *name, int nargs, char *err,
                         size_t errlen);
    /* Runs iterations [0, count) of a kernel over the given buffers, with
     * the call's recorded geometry (a GPU's; NULL or all zero: the
     * backend's own choice, one thread per iteration). */
    int (*launch)(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                  const cg_launch *geometry, char *err, size_t errlen);
    /* C = alpha op(A) op(B) + beta C per the descriptor; A, B, C are buffer
     * base pointers, the descriptor's off_* are applied here. */
    int (*gemm)(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C,
                char *err, size_t errlen);
    /* A library convolution (format/program.h cg_conv) on buffer base
     * pointers: 0 when done, 1 when the caller is to run the call's
     * alternative instead (no library, a shape it refuses, or measured
     * slower), -1 on failure. NULL: always the alternative. */
    int (*conv)(rt_backend *be, const cg_conv *d, void *out, const void *in, const void *in2,
                char *err, size_t errlen);
    /* What a measured choice between a convolution's library call and its
     * alternative holds for (the device and its library); NULL: this CPU's
     * model and the pool's size. */
    uint64_t (*tune_key)(const rt_backend *be);
    int (*sync)(rt_backend *be, char *err, size_t errlen);
    void (*destroy)(rt_backend *be);
    /* Graph capture and replay (see the usage above); NULL: not supported,
     * callers run eagerly. */
    int (*graph_begin)(rt_backend *be, char *err, size_t errlen);
    rt_graph *(*graph_end)(rt_backend *be, char *err, size_t errlen);
    int (*graph_launch)(rt_backend *be, rt_graph *g, char *err, size_t errlen);
    void (*graph_free)(rt_backend *be, rt_graph *g);

    /* ---- reads the host need not wait for (rt_readback below); all NULL
     * where copy_out returns with the bytes (cpu). host_alloc: host memory
     * a copy can land in while the host runs on (pinned); copy_out_async:
     * device to such memory, behind the work queued so far, no wait;
     * mark: a point in the queue, a number that grows; wait_mark: returns
     * once the work before that point is done (at once when known done):
     * 0, or -1 + a message naming the failure and, since the failing call
     * is past, label's last text and DPC_SYNC=1. */
    void *(*host_alloc)(rt_backend *be, size_t bytes, char *err, size_t errlen);
    void (*host_free)(rt_backend *be, void *host);
    int (*copy_out_async)(rt_backend *be, void *host, const void *src, size_t bytes, char *err,
                          size_t errlen);
    uint64_t (*mark)(rt_backend *be, char *err, size_t errlen); /* 0 + message: failed */
    int (*wait_mark)(rt_backend *be, uint64_t mark, char *err, size_t errlen);
    /* What the work queued from now on is for ("train step 12 of replica 0"):
     * the message of a failure found later names it. NULL: nothing kept. */
    void (*label)(rt_backend *be, const char *what);

    /* ---- kept by the wrappers (rt_backend_*), not by the backend's hooks:
     * 0 while the device works; 2 once a device call failed, with that
     * first failure's message (1 while it is being written). */
    int failed;
    char failure[1024];
    /* 1 between a graph_begin and its graph_end: a call failing then is
     * the capture's (the driver refused to record it; the caller runs the
     * step eagerly instead), returned but not kept. */
    int capturing;
};

/* ---- the hooks as callers use them: one function each, which gives an
 * optional hook's default and keeps the first device failure (above).
 * Every one that can fail returns NULL or non-zero + message; after a
 * device failure the device calls fail at once with its message. */
void *rt_backend_alloc(rt_backend *be, size_t bytes, char *err, size_t errlen);
void rt_backend_dealloc(rt_backend *be, void *ptr); /* NULL: nothing */
int rt_backend_copy_in(rt_backend *be, void *dst, const void *host, size_t bytes, char *err,
                       size_t errlen);
int rt_backend_copy_out(rt_backend *be, void *host, const void *src, size_t bytes, char *err,
                        size_t errlen);
int rt_backend_copy(rt_backend *be, void *dst, const void *src, size_t bytes, char *err,
                    size_t errlen);
rt_module *rt_backend_compile(rt_backend *be, const char *source, char *err, size_t errlen);
void rt_backend_module_free(rt_backend *be, rt_module *m); /* NULL: nothing */
rt_kernel *rt_backend_kernel(rt_backend *be, rt_module *m, const char *name, int nargs, char *err,
                             size_t errlen);
int rt_backend_launch(rt_backend *be, rt_kernel *k, void *const *args, int nargs, int64_t count,
                      const cg_launch *geometry, char *err, size_t errlen);
int rt_backend_gemm(rt_backend *be, const cg_gemm *d, const float *A, const float *B, float *C,
                    char *err, size_t errlen);
/* 0 done, 1 run the alternative (always, without the hook), -1 failed. */
int rt_backend_conv(rt_backend *be, const cg_conv *d, void *out, const void *in, const void *in2,
                    char *err, size_t errlen);
int rt_backend_sync(rt_backend *be, char *err, size_t errlen);
/* 1 when the backend records graphs (the graph hooks exist). A capture the
 * backend refuses (graph_begin, graph_end, or a call failing between them)
 * is not a device failure and is not kept: the caller runs eagerly instead. */
int rt_backend_has_graphs(const rt_backend *be);
int rt_backend_graph_begin(rt_backend *be, char *err, size_t errlen);
rt_graph *rt_backend_graph_end(rt_backend *be, char *err, size_t errlen);
int rt_backend_graph_launch(rt_backend *be, rt_graph *g, char *err, size_t errlen);
void rt_backend_graph_free(rt_backend *be, rt_graph *g); /* NULL: nothing */
/* Host memory a copy_out_async may land in (malloc'd without the hook). */
void *rt_backend_host_alloc(rt_backend *be, size_t bytes, char *err, size_t errlen);
void rt_backend_host_free(rt_backend *be, void *host);
/* Without the hooks: copy_out, and 0 (a wait for 0 returns at once). */
int rt_backend_copy_out_async(rt_backend *be, void *host, const void *src, size_t bytes, char *err,
                              size_t errlen);
/* *mark := a point in the queue (0 without the hook: a wait for it returns
 * at once); 0, or -1 + message. */
int rt_backend_mark(rt_backend *be, uint64_t *mark, char *err, size_t errlen);
int rt_backend_wait_mark(rt_backend *be, uint64_t mark, char *err, size_t errlen);
void rt_backend_label(rt_backend *be, const char *what);
/* 0 while the device works; -1 + the first failure's message after one. */
int rt_backend_failed(rt_backend *be, char *err, size_t errlen);
/* Devices of this kind the process may use (0 + why when none); 1 without
 * the hook (the host). */
int rt_backend_device_count(const rt_backend *be, char *why, size_t whylen);
/* A backend of this kind on device `ordinal` (NULL + message); be itself
 * without the hook (replicas share it: rt_backend_free only what differs
 * from be). */
rt_backend *rt_backend_open_device(rt_backend *be, int ordinal, char *err, size_t errlen);
/* The backend's own collective (device.h's coll_new, coll_ranks_new);
 * NULL + why, also without the hooks (the host collectives only). */
rt_coll *rt_backend_coll_new(rt_backend *const *bes, int n, char *why, size_t whylen);
rt_coll *rt_backend_coll_ranks_new(rt_backend *const *bes, int n, int rank, int ranks,
                                   const struct rt_coll_ranks_ops *ops, char *why, size_t whylen);

/* ---- reading device results without a host wait.
 *
 * Usage (the training loop: the loss of step n is read while step n+1 runs):
 *     rt_readback *rb = rt_readback_new(be);
 *     rt_readback_add(rb, 0, loss_buf, bytes);         // queued behind step n
 *     ... queue step n+1 ...
 *     const float *loss = rt_readback_wait(rb, err, sizeof err);  // NULL: failed
 *     rt_readback_free(rb);
 *
 * add copies bytes at device address src to offset off of the readback's
 * host memory, in queue order (several adds make one read); wait returns
 * that memory once every add has landed, valid until the next add. On a
 * backend without the hooks above, add copies at once. */
typedef struct rt_readback rt_readback;
rt_readback *rt_readback_new(rt_backend *be);
void rt_readback_add(rt_readback *rb, size_t off, const void *src,
                     size_t bytes); /* fails at wait */
const void *rt_readback_wait(rt_readback *rb, char *err, size_t errlen);
void rt_readback_free(rt_readback *rb);

/* The reference backend: generated C compiled with the host compiler,
 * OpenBLAS for GEMMs. A new handle each call; free with rt_backend_free. */
rt_backend *rt_backend_cpu(void);
/* The cpu backend's thread count (DPC_THREADS, else OMP_NUM_THREADS, else
 * the CPUs this process may use). */
int rt_cpu_threads(void);
/* The order the cpu backend sums products in, for measuring a noise floor:
 * the same arithmetic in two orders differs by what rounding alone makes,
 * which is the most any other correct backend (a GPU) may be asked to match.
 *   RT_SUM_ORDER_DEFAULT  OpenBLAS blocked as the backend splits it; oneDNN
 *                         for the library convolutions
 *   RT_SUM_ORDER_SPLIT_K  every GEMM's k summed as two halves, the second
 *                         added onto the first; convolutions by their im2col
 *                         GEMMs (oneDNN declined)
 * Process-wide; DPC_CPU_SUM_ORDER=split-k sets it at start. Returns the
 * order it replaced. */
typedef enum { RT_SUM_ORDER_DEFAULT, RT_SUM_ORDER_SPLIT_K } rt_sum_order;
rt_sum_order rt_cpu_set_sum_order(rt_sum_order order);
/* Flush-to-zero and denormals-are-zero (x86's MXCSR FTZ and DAZ; nothing
 * elsewhere) in every thread that runs this backend's kernels, GEMMs and
 * convolutions, from the next launch on: a denormal result or operand is
 * 0. dprun turns it on for training (--no-ftz keeps IEEE denormals):
 * AdamW's moments of rarely seen tokens decay into denormals, which x86
 * computes many times slower. Process-wide; returns the previous setting
 * (-1: never set, each thread as it started). */
int rt_cpu_flush_denormals(int on);
void rt_backend_free(rt_backend *be);

/* Value of DPC_DEBUG (0 when unset). */
int rt_debug_level(void);

/* OpenBLAS on a CPU newer than it (blascore.c). First thing in main, before
 * any thread or MPI:
 *     rt_blas_core_reexec(argv);   // returns, or runs the program again
 * When OpenBLAS fell back to kernels without AVX2 on a CPU that has it and
 * OPENBLAS_CORETYPE is unset, execs the running binary (its path, so its
 * process name stays) with argv and
 * OPENBLAS_CORETYPE=SkylakeX (AVX-512) or Haswell (AVX2 + FMA); returns
 * otherwise. rt_blas_better_core is its choice: the core to ask for, or
 * NULL to keep OpenBLAS's. rt_blas_corename is the core OpenBLAS chose
 * (openblas_get_corename, found at run time), or NULL when the BLAS linked
 * in is not OpenBLAS (then nothing is re-executed). */
void rt_blas_core_reexec(char **argv);
const char *rt_blas_corename(void);
const char *rt_blas_better_core(const char *chosen, int has_avx2_fma, int has_avx512);

/* ---- which backend `--device auto|cpu|cuda` gets.
 *
 * Usage (dprun, the training loop):
 *     int fallback = 0;
 *     rt_backend *be = rt_backend_open(o->device, &fallback, err, sizeof err);
 *     if (!be) { fprintf(stderr, "dprun: error: %s\n", err); return 1; }
 *     ...
 *     rt_backend_free(be);
 *
 *   "cpu"   the cpu backend.
 *   "cuda"  the cuda backend on device $DPC_CUDA_DEVICE (default 0), or NULL
 *           and a message saying why not: "--device cuda: no CUDA device
 *           (cannot load the CUDA driver libcuda.so.1: ...)".
 *   "auto"  (or NULL) the cuda backend when it can be opened (probed with
 *           rt_cuda_device_probe first: the driver alone, found by the
 *           dynamic loader's own search or DPC_LIBCUDA), else the cpu
 *           backend with *is_fallback = 1 and, once per process (replicas
 *           open one backend each), one line on stderr:
 *           "dprun: no CUDA device (REASON): using the cpu backend" (log.h) — unless
 *           the machine has no CUDA driver at all (RT_NO_CUDA_DRIVER), a
 *           CPU machine, where only DPC_DEBUG=1 says it.
 * Anything else is refused with a message naming the three choices.
 * is_fallback may be NULL.
 */

/* How a reason for no CUDA device begins when there is no driver at all. */
#define RT_NO_CUDA_DRIVER "no CUDA driver"

rt_backend *rt_backend_open(const char *device, int *is_fallback, char *err, size_t errlen);
/* Same on a given CUDA device (replica placement); ordinal is ignored by
 * the cpu backend. */
rt_backend *rt_backend_open_on(const char *device, int ordinal, int *is_fallback, char *err,
                               size_t errlen);
/* The cuda backend's two entries the table above opens it by, defined in
 * runtime/cuda/ (backend.c; stubs.c in a CUDA=0 build, where they open
 * nothing); the rest of the cuda backend is runtime/cuda/cuda.h's.
 * rt_cuda_device_count: the devices the driver sees; 0 with the reason in
 * why (no toolkit in the build, no driver, no device, a driver error).
 * Loads the driver. rt_backend_cuda: a backend on device `ordinal`; NULL +
 * message. Several may share a device (replicas), each with its own
 * streams. */
int rt_cuda_device_count(char *why, size_t whylen);
/* The same for --device auto, which must load no GPU library unless it
 * is about to use one: the driver only, and only DPC_LIBCUDA's file or
 * libcuda.so.1 through the dynamic loader's own search (loader.h
 * rt_cu_probe), never a directory dpc chose. */
int rt_cuda_device_probe(char *why, size_t whylen);
rt_backend *rt_backend_cuda(int ordinal, char *err, size_t errlen);

/* ---- generated C to a shared object, once per source.
 *
 * Modules live in $DPC_CACHE_DIR (default ~/.cache/dpc, HOME or else the
 * password database's home) as NAME.so beside NAME.c and NAME.so.sha256,
 * where NAME hashes the compiler command, its flags, the CPU model
 * (-march=native code is machine specific) and the source. Every file is
 * written to a temporary name and renamed into place, so processes that
 * compile the same module at once never see a partial file.
 *
 * Trust: what is in the directory gets loaded, so rt_cache_open walks its
 * path from "/" one name at a time (openat, O_NOFOLLOW) and refuses, naming
 * the directory, its owner and mode:
 *   - a directory on the way that neither root nor this user owns, or that
 *     others may write and is not sticky (/tmp, sticky, is fine);
 *   - a symbolic link on the way that neither root nor this user owns
 *     (others are followed, and their targets walked the same way);
 *   - a cache directory this user does not own or others may write.
 * Missing directories are created 0700. Everything after is done relative
 * to the descriptor the walk ended with (openat, renameat, the compiler
 * runs in it by fchdir), never by path, so no later rename or link changes
 * which directory is used. An object is read once through it (a regular
 * file this user owns, its whole fstat size), checked against the SHA-256
 * beside it and its ELF segments against its length, then those bytes are
 * copied into a sealed memfd and dlopen'ed from /proc/self/fd/N: exactly
 * what was checked runs. A truncated, corrupted or unrecorded object is
 * compiled again (with a notice); the record is no defence against someone
 * who can write the directory, the walk is.
 *
 * Usage:
 *     rt_cache c;
 *     if (rt_cache_open(&c, err, sizeof err)) ...;          // the checked directory
 *     int hit; char *path;                                   // path: for messages
 *     void *h = rt_cache_load_c(&c, source, RTLD_NOW, &hit, &path, err, sizeof err);
 *     rt_cache_close(&c);
 */

/* Flags every module is compiled with (after $CC, default "cc").
 * -ffp-contract=off: no multiply-add contracted across what were separate
 * ops, so a fused kernel rounds exactly as the unfused ones (bit-identical
 * results with and without fusion). -fno-math-errno: sqrtf is a pure
 * function, so a per-channel sqrtf(var + eps) is hoisted out of the loop
 * over the channel's elements (the value is the same either way).
 * -fno-trapping-math: no one traps floating-point exceptions, so a select
 * feeding a reduction (relu_grad's mask, then a sum) may be if-converted
 * and vectorised; values are unchanged. -fopenmp-simd: `#pragma omp simd`
 * only; threads are the backend's own pool, not OpenMP's. */
#define RT_CC_FLAGS \
    "-O3 -march=native -ffp-contract=off -fno-math-errno -fno-trapping-math -fopenmp-simd -fPIC -shared"

typedef struct rt_cache {
    int fd;          /* the checked directory; every access is relative to it */
    char path[4096]; /* its name as given, for messages only */
} rt_cache;

/* Opens the cache directory (created if missing) after checking its path
 * as above: 0, or -1 + message. */
int rt_cache_open(rt_cache *c, char *err, size_t errlen);
void rt_cache_close(rt_cache *c);
/* "DIR/name" (malloc'd), for messages. */
char *rt_cache_path(const rt_cache *c, const char *name);
/* dpc2-KINDHASH, the name (without extension) of source's cached files: h
 * covers the compiler, its options and target, and the source is hashed
 * into it here, then again with another seed (a collision is then
 * astronomically unlikely without a cryptographic hash). Both compilers
 * (C here, NVRTC in runtime/cuda/nvrtc.c) name their files this way. */
void rt_cache_name(char *name, size_t n, const char *kind, uint64_t h, const char *source);
/* h extended by this CPU's model name and flags (what a -march=native
 * object, or a measured choice, belongs to). */
uint64_t rt_cache_cpu_hash(uint64_t h);

/* Measured choices for tuned library convolutions (dpc --conv auto,
 * runtime/device/tune.c), kept per process and in the kernel cache per
 * machine: which way the executor runs one (the library or its im2col
 * alternative), and which algorithm the library uses (cuDNN's). */
enum { RT_CONV_UNKNOWN, RT_CONV_LIBRARY, RT_CONV_ALTERNATIVE };
/* The machine a measurement holds for: the backend's tune_key, or this
 * CPU's model and thread count. */
uint64_t rt_conv_where(const rt_backend *be);
/* RT_CONV_UNKNOWN until measured here or read from the record. */
int rt_conv_choice_get(uint64_t where, const cg_conv *d);
/* Records the first measurement of d on where (later ones are ignored):
 * the way and both times, which --tune, DPC_DEBUG=1 or DPC_PROFILE print;
 * the kernel cache keeps them. */
void rt_conv_choice_set(uint64_t where, const cg_conv *d, int way, double lib_s, double alt_s);
/* The library algorithm measured for d on where, or -1 (none yet). The
 * caller checks that the library still offers it as it requires (a
 * record is data). */
int rt_conv_algo_get(uint64_t where, const cg_conv *d);
/* Records the algorithm measured best for d on where (algo >= 0). */
void rt_conv_algo_set(uint64_t where, const cg_conv *d, int algo);
/* dprun --tune: from now on (call it before the first step) no record is
 * read, so this process measures every tuned convolution again, and
 * records what it measures. */
void rt_conv_retune(void);
/* dprun --nondeterministic: from now on (call it before the first step) a
 * library may run algorithms whose sums come in a varying order (cuDNN's
 * atomics) where they are the best; such a run's bits may differ from run
 * to run. Off by default. The cuda backend's choices under it are kept
 * apart from the deterministic ones (its tune_key). */
void rt_conv_set_nondeterministic(int on);
int rt_conv_nondeterministic(void);
/* source compiled (on a miss) and loaded with dlopen flags from the bytes
 * checked (above): the handle, or NULL + message. On a compile error the
 * source stays at DIR/NAME.c and err names it with the compiler's message.
 * *hit (may be NULL) says whether the module was already there; *path
 * (malloc'd) names the object. */
void *rt_cache_load_c(const rt_cache *c, const char *source, int flags, int *hit, char **path,
                      char *err, size_t errlen);
/* The file name in the cache (malloc'd, NUL-terminated, *len without the
 * NUL): a regular file this user owns, at most 1 GiB, read to its fstat
 * size; NULL otherwise (a cache miss). */
unsigned char *rt_cache_read(const rt_cache *c, const char *name, size_t *len);
/* The same, at most max bytes, and why not (a missing file included). */
unsigned char *rt_cache_read_max(const rt_cache *c, const char *name, size_t max, size_t *len,
                                 char *why, size_t whylen);
/* name := data, through a temporary and renameat: 0, or -1 + message. */
int rt_cache_write(const rt_cache *c, const char *name, const void *p, size_t n, char *err,
                   size_t errlen);
/* OBJ.sha256 := SHA-256 of data (0, or -1 with errno). */
int rt_cache_record(const rt_cache *c, const char *obj, const void *data, size_t n);
/* 1 when data is what OBJ.sha256 records, 0 when there is no record, -1
 * when it differs. */
int rt_cache_matches(const rt_cache *c, const char *obj, const void *data, size_t n);
/* "dprun: kernel cache: DIR/OBJ does not match ...; compiling it again" (log.h) on
 * stderr; match as rt_cache_matches gives it, or -2: not a whole object. */
void rt_cache_rebuild_notice(const rt_cache *c, const char *obj, int match);

#endif
