/* runtime/train/replicas.h — the data-parallel replicas of a plan in this process.
 *
 * `dprun --gpus N` runs N replicas of the plan's per-device program, one
 * host thread each. Every replica has its own parameter store (its copy of
 * the weights, its own BatchNorm running statistics: per-device BatchNorm
 * as in Gluon), its own train and eval executors, and, when there is more
 * than one replica in the job, its own communication queue on a shared
 * communicator (runtime/comm/comm.h) through which the train program's allreduce
 * steps (the partition pass, docs/DESIGN.md §5.5) sum the gradients. Weights stay identical on
 * every replica because every replica starts from global replica 0's
 * (rt_replicas_sync) and applies the same summed gradient.
 *
 * Replicas are placed on the devices present: replica r of N on device
 * r*D/N (contiguous blocks); with fewer devices than replicas, replicas
 * share one, which gives the same results as N devices, only slower.
 *
 * On the cuda backend every replica gets a backend of its own (its own
 * compute and communication streams); replicas on distinct devices sum
 * their gradients with NCCL; replicas sharing devices sum on each device
 * first, then with NCCL across the devices (on one device only, through
 * host memory: the local kind); and each replica's train step runs as a CUDA graph
 * after one eager warm-up step (rt_exec_use_graphs; DPC_CUDA_GRAPH=0 keeps
 * it eager).
 *
 * Usage:
 *     rt_replicas_cpu_threads(n);                  // before the first cpu backend opens
 *     rt_backend *bes[n];  int devices;            // each replica's backend
 *     rt_replicas_open_backends(be, n, bes, &devices, err, sizeof err);
 *     rt_coll *c = rt_replicas_coll_new(bes, n, ranks, err, sizeof err); // NULL: one replica
 *     rt_replicas *R = rt_replicas_new(bes, plan, n, c, err, sizeof err);
 *     rt_store_init(rt_replicas_store(R, 0), plan->train, &t, seed);
 *     rt_replicas_sync(R, err, sizeof err);        // everyone gets replica 0's tensors
 *     // one step: replica r takes images [r*b, (r+1)*b) of this process's slice
 *     rt_replicas_step(R, images, labels, lr, 1.0f / global_batch, losses, err, sizeof err);
 *     // or, overlapping the next batch's copy (rt_replicas_overlap):
 *     rt_replicas_step_enqueue(R, images, labels, lr, 1.0f / global_batch, err, sizeof err);
 *     rt_replicas_step_finish(R, next_images, next_labels, losses, err, sizeof err);
 *     // or read step n's losses while step n+1 runs (losses NULL above):
 *     rt_replicas_step_losses(R, losses, err, sizeof err);  // step n-1's, queued before
 *     rt_replicas_step_reads(R, err, sizeof err);           // queue step n's
 *     // anything else, on every replica's thread at once:
 *     rt_replicas_run(R, fn, arg, err, sizeof err);
 *     rt_replicas_free(R);  rt_coll_free(c);  rt_replicas_close_backends(be, n, bes);
 */
#ifndef DPC_RT_TRAIN_REPLICAS_H
#define DPC_RT_TRAIN_REPLICAS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "format/plan.h"

/* Replicas one process runs (--gpus); more run as more MPI processes. */
#define RT_MAX_LOCAL_REPLICAS 256

typedef struct rt_backend rt_backend;
typedef struct rt_store rt_store;
typedef struct rt_exec rt_exec;
typedef struct rt_coll rt_coll;
typedef struct rt_replicas rt_replicas;

/* n replicas of plan's train and eval programs, replica r on backend be[r]
 * (not owned; replicas sharing a device may share one backend, as all do
 * on the cpu). coll joins them (and other processes' replicas, mpi); NULL
 * only when n is 1 and the job has no other process. Stores are
 * uninitialised. */
rt_replicas *rt_replicas_new(rt_backend *const *be, const dpc_plan *plan, int n, rt_coll *coll,
                             char *err, size_t errlen);
/* The same with gradient accumulation (`dprun --accumulate K`): each
 * replica runs K micro-batches of the plan's batch per step, forward and
 * backward (rt_exec_run_partial), keeping each one's gradients, and on
 * the last the all-reduce sums the n x K micro-batches' gradients (replica
 * r's micro-batch k as global replica r*K+k of a run without accumulation,
 * rt_coll_allreduce_parts) and the update runs once. coll: from
 * rt_replicas_coll_new_accum (never NULL when K > 1). K 1 is
 * rt_replicas_new. */
rt_replicas *rt_replicas_new_accum(rt_backend *const *be, const dpc_plan *plan, int n, int accum,
                                   rt_coll *coll, char *err, size_t errlen);
int rt_replicas_accumulate(const rt_replicas *R); /* K */
/* Device bytes replica 0 holds for the accumulated gradients: K x the
 * gradients (0 with K 1). */
int64_t rt_replicas_parts_bytes(const rt_replicas *R);
void rt_replicas_free(rt_replicas *R);

int rt_replicas_count(const rt_replicas *R);
rt_store *rt_replicas_store(rt_replicas *R, int r);
rt_exec *rt_replicas_train(rt_replicas *R, int r);
rt_exec *rt_replicas_eval(rt_replicas *R, int r);
rt_coll *rt_replicas_coll(rt_replicas *R);
/* This process's replica r in the job: rank * n + r (r without MPI). */
int rt_replicas_global(const rt_replicas *R, int r);
/* Replicas in the job (every process). */
int rt_replicas_total(const rt_replicas *R);

/* Runs fn(R, r, arg) for every replica r at once, each on its replica's
 * thread (inline when n is 1), and returns when all are done: 0, or -1
 * with the first failure's message. A failing replica aborts the
 * communicator so the others return from their collectives too (the
 * replicas cannot be used after that). */
typedef int (*rt_replica_fn)(rt_replicas *R, int r, void *arg, char *err, size_t errlen);
int rt_replicas_run(rt_replicas *R, rt_replica_fn fn, void *arg, char *err, size_t errlen);

/* Every replica's persistent tensors (parameters, BatchNorm statistics,
 * optimizer state) become global replica 0's. */
int rt_replicas_sync(rt_replicas *R, char *err, size_t errlen);

/* ZeRO-1 (dprun --shard-optimizer; runtime/exec/shard.c): before the
 * stores are initialised, every parameter gets an owner among the job's
 * replicas; each replica's train program skips the updates it does not own
 * (their gradient sums reach only the owner: reduce-scatter), its store
 * drops the optimizer state of those parameters (reading a dropped one
 * through its owner's store when the owner is in this process), and after
 * each step every parameter is broadcast from its owner (all-gather). The
 * weights are bit for bit the unsharded run's. -1 + message (one replica,
 * an update mixing parameters, a fused kernel mixing owners). */
int rt_replicas_shard(rt_replicas *R, char *err, size_t errlen);
typedef struct rt_shard rt_shard;
const rt_shard *rt_replicas_shards(const rt_replicas *R); /* NULL: not sharded */

/* The step number t (from 1) the next steps' train programs read as their
 * scalar input "step" (lamb, adamw bias correction; held as a float, exact
 * to 2^24). Programs without that input ignore it. */
void rt_replicas_set_step(rt_replicas *R, int64_t t);
/* The run's --seed, from which dropout's per-step keys come (programs
 * without dropout ignore it). */
void rt_replicas_set_seed(rt_replicas *R, uint64_t seed);

/* One training step. images/labels hold this process's n*K*b samples
 * (b: the plan's per-device batch, K micro-batches per step, 1 without
 * accumulation), replica r's micro-batch k taking [(r*K+k)*b, (r*K+k+1)*b);
 * lr and grad_scale (1/global batch) go to every replica; losses receives
 * the n*K*b per-sample losses in the same order (may be NULL). */
int rt_replicas_step(rt_replicas *R, const float *images, const int32_t *labels, float lr,
                     float grad_scale, float *losses, char *err, size_t errlen);

/* The same step in two halves, so that the next batch's host work and
 * copy overlap this step's compute (train.c, when rt_replicas_overlap):
 * rt_replicas_step_enqueue sets lr and grad_scale, and the replicas'
 * slices of images/labels unless they are NULL (the previous
 * rt_replicas_step_finish staged them), and enqueues the step without
 * waiting for it; rt_replicas_step_finish copies the next step's
 * next_images/next_labels (NULL: none) into the train programs' inputs,
 * stream-ordered after this step's work (which has read its own), then
 * reads the losses as rt_replicas_step does (waiting for the step). The
 * host memory of both batches is free when each call returns. Results are
 * bit-identical to rt_replicas_step. */
int rt_replicas_step_enqueue(rt_replicas *R, const float *images, const int32_t *labels, float lr,
                             float grad_scale, char *err, size_t errlen);
int rt_replicas_step_finish(rt_replicas *R, const float *next_images, const int32_t *next_labels,
                            float *losses, char *err, size_t errlen);
/* Reading the losses one step late (rt_replicas_step_finish with losses
 * NULL reads none): rt_replicas_step_reads queues the copy of the latest
 * step's losses behind the work queued so far and returns;
 * rt_replicas_step_losses waits for it and fills losses as
 * rt_replicas_step does. Both on the calling thread. Order for step n:
 * enqueue and finish step n, wait for step n-1's losses (the device runs
 * step n meanwhile), then queue step n's read (one read in flight per
 * replica). Without DPC_SYNC=1 a device failure found by the wait may be
 * any queued call's: the message names the last step queued (the
 * backend's label) and suggests DPC_SYNC=1. */
int rt_replicas_step_reads(rt_replicas *R, char *err, size_t errlen);
int rt_replicas_step_losses(rt_replicas *R, float *losses, char *err, size_t errlen);
/* 1 when every replica's backend copies asynchronously (async_copy, cuda),
 * there is no accumulation and DPC_INPUT_OVERLAP is not 0: the two halves above overlap the next
 * batch's copy with the step; 0 on the cpu, where rt_replicas_step keeps
 * its order. DPC_INPUT_OVERLAP=1: 1 on any backend (tests of the order on
 * the cpu, where it changes nothing). */
int rt_replicas_overlap(const rt_replicas *R);

/* CUDA graphs for every replica's train program (rt_exec_use_graphs), on
 * by default unless DPC_CUDA_GRAPH=0; 1 when every replica will use them. */
int rt_replicas_use_graphs(rt_replicas *R, int on);

/* Each replica's backend in bes[0..n): `first` for every replica on the
 * cpu or with one replica; on cuda with several, a new cuda backend per
 * replica (replica threads never share streams or staging buffers),
 * replica r on device r*D/n of the D = min(devices present, n) used
 * (*devices). -1 + message when a device cannot be opened. */
int rt_replicas_open_backends(rt_backend *first, int n, rt_backend **bes, int *devices, char *err,
                              size_t errlen);
/* Frees the backends rt_replicas_open_backends opened (not `first`). */
void rt_replicas_close_backends(rt_backend *first, int n, rt_backend **bes);
/* The communicator of n replicas on bes: nccl when they run on the cuda
 * backend on at least 2 devices (a rank per device when replicas share
 * them), else local; across processes (ranks > 1) nccl when every process
 * runs the cuda backend on as many devices as rank 0 (decided together
 * over MPI), else mpi. NULL for one replica in one process (err empty) or
 * on failure (err says why). DPC_COLL=local|nccl forces a kind; when NCCL
 * cannot start and was not forced, a note on stderr (rt_log, runtime/log.h:
 * `PREFIX: note: ...`) says so and the local (mpi) kind runs. */
rt_coll *rt_replicas_coll_new(rt_backend *const *bes, int n, int ranks, char *err, size_t errlen);
/* The same for replicas accumulating accum micro-batches per step: with
 * accum > 1 always a communicator (one replica too: it sums the parts),
 * of the local (mpi) kind, whose global-order sum makes the run bit for
 * bit --gpus n*accum; DPC_COLL=nccl asks for nccl instead, on distinct
 * GPUs only (replicas sharing one are refused). */
rt_coll *rt_replicas_coll_new_accum(rt_backend *const *bes, int n, int ranks, int accum, char *err,
                                    size_t errlen);

/* Threads for the cpu backend when n replicas share the host's cores:
 * unless OMP_NUM_THREADS is set, sets it to cores/n (at least 1), and
 * unless OPENBLAS_NUM_THREADS is set, makes OpenBLAS single-threaded. The
 * cpu backend's thread pool (one per process, shared by the replicas: a
 * call that finds it busy runs on its caller's thread) reads
 * OMP_NUM_THREADS only when the first cpu backend opens (after DPC_THREADS),
 * so this sizes the pool only if called before that; the pool itself
 * already runs OpenBLAS single-threaded. No effect when n is 1. */
void rt_replicas_cpu_threads(int n);

/* Which device each replica runs on: device_of[r] = r*devices/n. */
void rt_replicas_place(int n, int devices, int *device_of);
/* The start-up banner: replicas (and the micro-batches each accumulates,
 * accum > 1), global batch, and how the replicas were
 * placed on the devices (`4 replicas share cpu`): one or more lines on
 * stderr through rt_log (runtime/log.h), each under the program's prefix. */
void rt_replicas_banner(const char *device_name, int devices, int local, int ranks, int accum,
                        int batch);
/* The same lines, without a prefix, each ending in '\n', on f (for tests). */
void rt_replicas_banner_text(FILE *f, const char *device_name, int devices, int local, int ranks,
                             int accum, int batch);

#endif
