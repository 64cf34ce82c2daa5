/* runtime/comm/comm.h — gradient all-reduce between data-parallel replicas.
 *
 * A communicator joins R replicas of one per-device program. Every replica
 * makes the same collective calls in the same order (they run the same
 * program), each from its own host thread; a call returns when every
 * replica's buffer holds the result. Kinds:
 *
 *   local  replicas that share a process (`dprun --gpus N`). Deterministic:
 *          element i of a sum is ((x_0 + x_1) + ...) + x_{N-1} over the
 *          replicas in index order, accumulated in double and rounded once,
 *          whichever thread adds and whenever the threads arrive. Every
 *          replica gets the same floats.
 *   mpi    the local sum, chained across the ranks of MPI_COMM_WORLD
 *          (`mpirun -np P dprun --gpus N`: P x N replicas; rank p holds
 *          global replicas p*N .. p*N+N-1): rank p receives the running
 *          double sum of ranks 0..p-1, adds its own replicas in replica
 *          order and passes it on; the last rank broadcasts it
 *          (rt_coll_ranks_ops' chain_in/chain_out). Every element is added
 *          in global replica order, as one process with P*N replicas adds
 *          it: bit for bit the same floats for any process count.
 *   nccl   distinct GPUs in this process, one NCCL rank per replica
 *          (rt_coll_nccl_new; `dprun --gpus N` picks it when the N replicas
 *          run on the cuda backend on N distinct devices). Its queue is the
 *          replica's communication stream instead of a thread: start
 *          records an event on the compute stream, makes the communication
 *          stream wait for it and sums the bucket's pieces out of place
 *          (src -> dst) in one NCCL group (ncclFloat, ncclSum, no packing
 *          copies), then records the bucket's "done" event; wait makes the
 *          compute stream wait for that event (the host does not block).
 *          All of it is stream work, so a CUDA graph captures it. NCCL's
 *          ring order is fixed for a given set of devices, so runs repeat
 *          exactly, but its float sums are not the local kind's
 *          double-rounded ones. A broadcast is an ncclBroadcast on each
 *          replica's compute stream (stream ordered, no host wait); the
 *          blocking calls (all-reduce, barrier) use the local protocol,
 *          staged through host memory.
 *          Replicas sharing GPUs (`--gpus 4` on 2): one NCCL rank per
 *          device; the bucket is summed on each device first (its first
 *          replica adds the others' packed buckets in replica order, one
 *          exact float add each), the devices' sums are all-reduced by
 *          NCCL and copied back to the device's other replicas. That runs
 *          on the host queue threads, like local (no whole-step graph).
 *          Under mpirun (rt_coll_nccl_ranks_new) the NCCL ranks span the
 *          processes: rank 0's unique id is broadcast over MPI.
 *
 * Buffers are device pointers of the backend the communicator was made
 * with. Host-memory backends (cpu) are reduced in place; others are staged
 * through host memory (copy_out, reduce, copy_in) by the local and mpi kinds.
 *
 * Buckets and the communication queue. The partition pass packs parameter
 * gradients into buckets (passes.h); a replica's executor registers each
 * bucket once as a list of pieces (local gradient -> reduced output) and,
 * while the backward pass continues, hands a bucket to the replica's
 * communication queue as soon as its last gradient is written. The queue
 * (one host thread per replica here; a CUDA stream for nccl) packs the
 * pieces contiguously, all-reduces the bucket and unpacks the sums into the
 * outputs. The executor waits for a bucket only before the first step that
 * reads one of its sums (the optimizer update).
 *
 * Usage:
 *     rt_coll *c = rt_coll_local_new(n, be);     // or rt_coll_mpi_new, rt_coll_nccl_new
 *     // in replica r's thread:
 *     rt_coll_allreduce_sum(c, r, buf, count, err, sizeof err);   // blocking
 *     rt_coll_broadcast(c, r, buf, bytes, err, sizeof err);       // from replica 0
 *     rt_coll_queue *q = rt_coll_queue_new(c, r);
 *     rt_coll_piece p[] = {{grad_a, sum_a, na}, {grad_b, sum_b, nb}};
 *     int b = rt_coll_queue_add_bucket(q, p, 2);          // once
 *     rt_coll_queue_start(q, b);                          // per step
 *     if (rt_coll_queue_wait(q, b, err, sizeof err)) ...;
 *     rt_coll_queue_free(q);
 *     rt_coll_free(c);                                    // after every queue
 *
 * Failure: a replica that fails calls rt_coll_abort(c); every blocked or
 * later call of every replica then returns -1 instead of waiting forever.
 * MPI failures abort the job (MPI_ERRORS_ARE_FATAL semantics, with the
 * file:line of the failing call printed by RT_MPI_CHECK).
 */
#ifndef DPC_RT_COMM_COMM_H
#define DPC_RT_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct rt_backend rt_backend;
typedef struct rt_coll rt_coll;
typedef struct rt_coll_queue rt_coll_queue;

typedef enum { RT_COLL_LOCAL, RT_COLL_MPI, RT_COLL_NCCL } rt_coll_kind;

/* n replicas in this process, buffers of backend be (not owned). */
rt_coll *rt_coll_local_new(int n, rt_backend *be);
/* Replica r's buffers belong to be (replicas on different devices each
 * open a backend of their own); the queue of replica r packs with it. */
void rt_coll_set_backend(rt_coll *c, int replica, rt_backend *be);
rt_backend *rt_coll_backend(const rt_coll *c, int replica);
/* n replicas in this process and the same on every MPI rank; rt_mpi_init
 * first. NULL + message when this build has no MPI or MPI is not running. */
rt_coll *rt_coll_mpi_new(int n, rt_backend *be, char *err, size_t errlen);
/* n replicas, replica r on the cuda backend bes[r]. Every one on a device
 * of its own: one NCCL rank each, buckets on the communication streams.
 * Replicas sharing devices (at least 2 devices): one NCCL rank per device,
 * the replicas of a device summed on it first (rt_coll_device_new). NULL +
 * message (no NCCL, one device only, n < 2). */
rt_coll *rt_coll_nccl_new(int n, rt_backend *const *bes, char *err, size_t errlen);
void rt_coll_free(rt_coll *c);

/* For the kinds that span processes (runtime/comm/mpi.c; nccl's bootstrap): the
 * cross-rank half of each collective, called by one thread of the process
 * while its other replicas wait. 0, or non-zero on failure. */
typedef struct rt_coll_ranks_ops {
    int (*sum_f64)(double *buf, int64_t n); /* in place, sum over ranks */
    int (*bcast)(void *buf, int64_t bytes); /* from rank 0 */
    int (*barrier)(void);
    /* The all-reduce's ordered sum (NULL: sum_f64): rank p > 0 receives
     * into buf the running sum of ranks 0..p-1 (chain_in; rank 0 keeps
     * buf), adds its own replicas, and chain_out passes buf on to p+1;
     * then every rank receives the last rank's, the whole sum. Each
     * element is thus added in global replica order, as one process with
     * all the replicas adds it: bit-identical whatever the process count. */
    int (*chain_in)(double *buf, int64_t n);
    int (*chain_out)(double *buf, int64_t n);
    int (*bcast_from)(void *buf, int64_t bytes, int root); /* from rank root (all-gather) */
} rt_coll_ranks_ops;
rt_coll *rt_coll_ranks_new(rt_coll_kind kind, int n, rt_backend *be, int rank, int ranks,
                           const rt_coll_ranks_ops *ops);
/* rt_coll_nccl_new across `ranks` MPI processes with n replicas each, this one
 * `rank`: rank 0 makes the NCCL unique id, ops->bcast hands it to every
 * rank, and device d of this process becomes NCCL rank rank * D + d of
 * ranks * D (D: this process's devices, the same on every rank). ops also
 * carries the blocking calls across ranks (rt_mpi_ranks_ops). */
rt_coll *rt_coll_nccl_ranks_new(int n, rt_backend *const *bes, int rank, int ranks,
                                const rt_coll_ranks_ops *ops, char *err, size_t errlen);
/* For the kinds whose queue is a device stream (runtime/cuda/nccl.c): per
 * replica a context; start enqueues bucket `bucket`'s sums (src[i] ->
 * dst[i], count[i] floats, i < n; with owner, only into global replica
 * owner[i]'s dst[i] where owner[i] >= 0) behind the replica's queued work,
 * join makes the replica's later work wait for them, bcast enqueues
 * rt_coll_broadcast_from's copy of global replica root's buf (stream
 * ordered: later work of every replica reads it), free ends a context
 * (from rt_coll_free). The collective owns the contexts. */
typedef struct {
    int (*start)(void *ctx, int bucket, const void *const *src, void *const *dst,
                 const int64_t *count, const int *owner, int n, char *err, size_t errlen);
    int (*join)(void *ctx, int bucket, char *err, size_t errlen);
    int (*bcast)(void *ctx, void *buf, size_t bytes, int root, char *err, size_t errlen);
    /* buf += others[k] for k < nothers in order, enqueued behind the
     * replica's work (gradient accumulation: the parts summed on device). */
    int (*add)(void *ctx, float *buf, const float *const *others, int nothers, int64_t count,
               char *err, size_t errlen);
    void (*free)(void *ctx);
} rt_coll_stream_ops;
rt_coll *rt_coll_stream_new(rt_coll_kind kind, int n, rt_backend *const *bes,
                            const rt_coll_stream_ops *ops, void *const *ctx);
/* For the kinds that sum device by device (nccl with replicas sharing a
 * GPU, runtime/cuda/nccl.c): replica leader[r] (the first replica on r's
 * device) holds a context; add makes its buf the sum of itself and the
 * other replicas' bufs on its device (nothers, in replica order), sum then
 * sums the leaders' bufs across devices; both are done when they return.
 * The all-reduce runs on the host queue threads (like local): every replica
 * syncs its device, the leaders add and sum, the others copy the leader's
 * result back. free ends a context (from rt_coll_free). */
typedef struct {
    int (*add)(void *ctx, float *buf, const float *const *others, int nothers, int64_t count,
               char *err, size_t errlen);
    int (*sum)(void *ctx, float *buf, int64_t count, char *err, size_t errlen);
    void (*free)(void *ctx);
} rt_coll_device_ops;
rt_coll *rt_coll_device_new(rt_coll_kind kind, int n, rt_backend *const *bes, const int *leader,
                            const rt_coll_device_ops *ops, void *const *ctx);
/* Makes c span MPI ranks (nccl across processes): rank, ranks and the
 * cross-rank half of the blocking calls, as rt_coll_ranks_new's. */
void rt_coll_set_ranks(rt_coll *c, int rank, int ranks, const rt_coll_ranks_ops *ops);
/* Devices whose replicas c sums device by device (rt_coll_device_new); 0
 * for every other communicator. */
int rt_coll_device_groups(const rt_coll *c);

rt_coll_kind rt_coll_kind_of(const rt_coll *c);
const char *rt_coll_name(const rt_coll *c); /* "local", "mpi", "nccl" */
int rt_coll_local_size(const rt_coll *c);   /* replicas in this process */
int rt_coll_size(const rt_coll *c);         /* replicas in the job */
int rt_coll_rank(const rt_coll *c);         /* this process's MPI rank (0 for local) */
/* Index in the job of this process's replica r: rank * local_size + r. */
int rt_coll_global_replica(const rt_coll *c, int r);

/* buf (count floats on the device) becomes the sum over every replica's
 * buf. Collective: every replica calls it with the same count. */
int rt_coll_allreduce_sum(rt_coll *c, int replica, float *buf, int64_t count, char *err,
                          size_t errlen);
/* Gradient accumulation (`dprun --accumulate K`): buf holds `parts` arrays
 * of count floats, one per micro-batch; buf's first count floats become
 * the sum over every replica's parts, replica q's part k added as if it
 * were replica q*parts+k of its own (local and mpi: in that global order,
 * in double, rounded once, so R replicas of K parts give the very floats
 * R*K replicas of one part give). parts 1 is rt_coll_allreduce_sum. The
 * device kind (nccl on shared GPUs) refuses parts > 1; the stream kind
 * (nccl on distinct GPUs) sums the parts through its queue only: on each
 * device in part order (float adds), then NCCL across them. */
int rt_coll_allreduce_parts(rt_coll *c, int replica, float *buf, int64_t count, int parts,
                            char *err, size_t errlen);
/* Every replica's buf (bytes on the device) becomes global replica 0's. */
int rt_coll_broadcast(rt_coll *c, int replica, void *buf, size_t bytes, char *err, size_t errlen);
/* ZeRO-1 (dprun --shard-optimizer): a bucket of pieces, piece i ending at
 * element end[i] of buf and owned by global replica owner[i] (-1: every
 * replica). reduce_scatter sums like the all-reduce (the same order, the
 * same bits) but writes each piece's sum only into its owners' buf; the
 * others' pieces are left as they were. Across processes the sum still
 * travels the whole chain (every rank receives it, as the all-reduce);
 * the device kind (nccl, replicas sharing GPUs) all-reduces. The stream
 * kind (nccl on distinct GPUs) reduces through its queue only
 * (rt_coll_queue_set_owners: ncclReduce to each owner). */
int rt_coll_reduce_scatter(rt_coll *c, int replica, float *buf, int64_t count, const int64_t *end,
                           const int *owner, int npieces, char *err, size_t errlen);
/* The same over `parts` parts per replica (gradient accumulation, as
 * rt_coll_allreduce_parts): buf holds parts x count floats, the sums land
 * in its first count. */
int rt_coll_reduce_scatter_parts(rt_coll *c, int replica, float *buf, int64_t count, int parts,
                                 const int64_t *end, const int *owner, int npieces, char *err,
                                 size_t errlen);
/* Every replica's buf becomes global replica root's (staged through host
 * memory like rt_coll_broadcast; across ranks by ops->bcast_from). One
 * call per piece makes the all-gather of pieces with uneven owners. The
 * stream kind (nccl on distinct GPUs) enqueues an ncclBroadcast on each
 * replica's compute stream instead and returns without waiting: the
 * replica's later work (and copies out) see the root's bytes. */
int rt_coll_broadcast_from(rt_coll *c, int replica, int root, void *buf, size_t bytes, char *err,
                           size_t errlen);
/* Waits until every replica of the job got here. */
int rt_coll_barrier(rt_coll *c, int replica, char *err, size_t errlen);
/* Wakes every waiting replica with an error; later calls fail at once. */
void rt_coll_abort(rt_coll *c);
int rt_coll_aborted(rt_coll *c);

/* ---- buckets on a communication queue ---- */

/* One gradient of a bucket: count floats at src (the local gradient, read)
 * whose sum over replicas goes to dst (written). Device pointers. */
typedef struct {
    const void *src;
    void *dst;
    int64_t count;
} rt_coll_piece;

#define RT_COLL_BUCKET_BYTES_DEFAULT ((size_t)25 << 20) /* PyTorch DDP's default */

/* Replica r's queue; a communication thread of its own (host backends). */
rt_coll_queue *rt_coll_queue_new(rt_coll *c, int replica);
/* Registers a bucket (the pieces are copied); returns its id (0, 1, ...).
 * Every replica must register the same buckets with the same counts. */
int rt_coll_queue_add_bucket(rt_coll_queue *q, const rt_coll_piece *pieces, int n);
int rt_coll_queue_buckets(const rt_coll_queue *q);
int rt_coll_queue_replicas(const rt_coll_queue *q); /* replicas in the job (rt_coll_size) */
/* Gradient accumulation: each bucket is the sum of `parts` micro-batches'
 * gradients per replica (rt_coll_allreduce_parts). Call before the first
 * rt_coll_queue_add_bucket; each bucket then gets an area of parts x its
 * floats on the device. rt_coll_queue_keep(q, k) copies every bucket's
 * pieces (micro-batch k's gradients, k < parts - 1) into part k of its
 * area, on the caller's thread, with no bucket in flight; a started bucket
 * packs its pieces as the last part, sums the parts and unpacks part 0
 * (a stream kind: adds the parts into part 0 on the device, ops->add, and
 * NCCL sums part 0's pieces into their outputs). -1 + message for the
 * device kind (nccl on GPUs shared by replicas). */
int rt_coll_queue_set_parts(rt_coll_queue *q, int parts, char *err, size_t errlen);
void rt_coll_queue_keep(rt_coll_queue *q, int part);
/* Device bytes the parts' areas hold (0 without accumulation). */
int64_t rt_coll_queue_parts_bytes(const rt_coll_queue *q);
/* Everything the replica computed so far is in the pieces' sources:
 * reduce the bucket asynchronously. Buckets are reduced in the order they
 * are started, which must be the same on every replica. */
void rt_coll_queue_start(rt_coll_queue *q, int bucket);
/* ZeRO-1: piece i of the bucket goes to global replica owner[i] only
 * (rt_coll_reduce_scatter; -1: every replica); before the first start.
 * Stream kinds (nccl on distinct GPUs) reduce each owned piece to its
 * owner alone (ncclReduce). */
void rt_coll_queue_set_owners(rt_coll_queue *q, int bucket, const int *owner);
/* Blocks until the bucket's sums are in its outputs; 0 at once when the
 * bucket was not started. -1 + message when its reduction failed. */
int rt_coll_queue_wait(rt_coll_queue *q, int bucket, char *err, size_t errlen);
int rt_coll_queue_wait_all(rt_coll_queue *q, char *err, size_t errlen);
/* 1 when start and wait only enqueue stream work (nccl): a CUDA graph can
 * capture them; 0 when a host thread reduces (local, mpi). */
int rt_coll_queue_stream_ordered(const rt_coll_queue *q);
void rt_coll_queue_free(rt_coll_queue *q);

/* ---- MPI (one process per node or per device, under mpirun) ----
 * runtime/comm/mpi.c: only programs that call these link against MPI. */

/* Joins MPI when this process was started by an MPI launcher (OpenMPI's
 * OMPI_COMM_WORLD_SIZE, PMI/PMIx variables), asking for thread support
 * (the communication threads reduce while the main thread waits). Sets
 * *rank and *size (0 and 1 when not under a launcher). -1 + message when
 * launched by mpirun but this build has no MPI, or MPI fails to start. */
int rt_mpi_init(int *argc, char ***argv, int *rank, int *size, char *err, size_t errlen);
int rt_mpi_active(void); /* rt_mpi_init joined MPI */
void rt_mpi_finalize(void);
/* Ends every rank of the job (an error on one rank must not leave the
 * others blocked in a collective). */
void rt_mpi_abort(int code);
/* Main-thread helpers over the ranks (no-ops, returning 0, without MPI):
 * sum of doubles in place, broadcast of bytes from rank root (the NCCL
 * unique id), and the logical or of a flag (one rank failing fails all). */
int rt_mpi_allreduce_sum_f64(double *buf, int n);
int rt_mpi_bcast_bytes(void *buf, size_t bytes, int root);
int rt_mpi_any(int flag);
int rt_mpi_barrier(void);
/* The mpi collective's cross-rank operations, this rank and the number of
 * ranks (for rt_coll_nccl_ranks_new); NULL + message without MPI running. */
const rt_coll_ranks_ops *rt_mpi_ranks_ops(int *rank, int *ranks, char *err, size_t errlen);

#endif
