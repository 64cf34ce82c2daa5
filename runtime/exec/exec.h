/* runtime/exec/exec.h — run a compiled program (train or eval) on a backend.
 *
 * Usage:
 *     rt_backend *be = rt_backend_cpu();                  // or rt_backend_open("auto", &fb, err, n)
 *     rt_store *st = rt_store_new(be, plan->train);       // params, states, momentum
 *     rt_store_init(st, plan->train, &plan->schedule, seed); // xavier / zero / one
 *     rt_exec *train = rt_exec_new(be, st, plan->train, plan, err, sizeof err);
 *     rt_exec *eval  = rt_exec_new(be, st, plan->eval,  plan, err, sizeof err);
 *     rt_exec_set_input(train, "image", images, n_bytes);   // host memory
 *     rt_exec_set_input(train, "label", labels, n_bytes);   // int32
 *     rt_exec_set_scalar(train, "lr", 0.1f);
 *     rt_exec_set_scalar(train, "grad_scale", 1.0f / global_batch);
 *     if (rt_exec_run(train, err, sizeof err)) ...;         // one training step
 *     rt_exec_get(train, "loss", host_losses, n_bytes);     // per-sample losses
 *
 * A store holds every persistent tensor (params, BatchNorm running stats,
 * optimizer state) by name; the train and eval programs bound to the same
 * store share them. Everything else lives in the exec's own memory:
 * activations in one arena laid out by the plan's memory plan (or a buffer
 * each without one), parameter gradients in buffers of their own. Tensors are addressed by their node's name: sources by
 * their unique name, others by the label the frontend or a pass gave them
 * ("loss", "logits", "conv0.weight.grad").
 */
#ifndef DPC_RT_EXEC_EXEC_H
#define DPC_RT_EXEC_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/render.h"
#include "format/memplan.h"
#include "format/program.h"
#include "ir/ir.h"
#include "format/plan.h"
#include "runtime/device/device.h"

typedef struct rt_backend rt_backend;
typedef struct rt_store rt_store;
typedef struct rt_exec rt_exec;
typedef struct rt_coll_queue rt_coll_queue;

/* ---- persistent tensors ---- */
rt_store *rt_store_new(rt_backend *be, const ir_graph *g);
void rt_store_free(rt_store *st);
/* Every tensor's device bytes; a failed allocation leaves the backend
 * failed (device.h), which rt_store_init, rt_store_failed and rt_exec_new
 * report. */
/* Initialises params and states as their init says; xavier draws from a
 * generator seeded with `seed`, in definition order. 0, or -1 when the
 * device failed (rt_store_failed has the message). */
int rt_store_init(rt_store *st, const ir_graph *g, const ir_train *t, uint64_t seed);
int rt_store_count(const rt_store *st);
/* i-th persistent tensor in definition order (params and states as they
 * appear in the graph, then optimizer state). */
const char *rt_store_name(const rt_store *st, int i);
const ir_type *rt_store_type(const rt_store *st, int i);
int rt_store_find(const rt_store *st, const char *name); /* -1 if absent */
/* numel floats in or out: 0, or -1 when the device failed (the message:
 * rt_store_failed; host's bytes are then not the tensor's). */
int rt_store_read(rt_store *st, int i, float *host);
int rt_store_write(rt_store *st, int i, const float *host);
/* 0 while the store's device works, else -1 + its first failure's message. */
int rt_store_failed(const rt_store *st, char *err, size_t errlen);
/* The i-th tensor's device buffer (executors, collectives). */
void *rt_store_buffer(rt_store *st, int i);
/* ZeRO-1: tensor i belongs to global replica owner; this store is replica
 * me's. The owner's copy is (re)set to its initialiser; any other store
 * frees its bytes and reads and writes through home's copy instead (the
 * owner's store in this process), or, when home is NULL (the owner is
 * another process), reads zeros and ignores writes. */
void rt_store_shard(rt_store *st, int i, int owner, int me, rt_store *home);
/* A shard of another process (no bytes here) gets bytes of this store's
 * own for a while, to be written and read like any other tensor (rank 0
 * gathers the job's state into them for a checkpoint); release frees them
 * again. hold returns 1 when it gave i bytes, 0 when i had some. */
int rt_store_hold(rt_store *st, int i);
void rt_store_release(rt_store *st, int i);
int rt_store_owner(const rt_store *st, int i);    /* -1: every replica holds it */
int rt_store_resident(const rt_store *st, int i); /* its bytes are this store's own */

/* ---- programs ---- */
/* The kernels are always rendered here from g (cg_generate with dpc's
 * default options); a program for g in the plan's section must be exactly
 * that one, else the plan is refused (it is there to be read, not run). */
rt_exec *rt_exec_new(rt_backend *be, rt_store *st, const ir_graph *g, const dpc_plan *plan,
                     char *err, size_t errlen);
/* The same, rendering with options o (tests: a small scratch bound to take
 * the chunked convolution path); NULL is rt_exec_new. */
rt_exec *rt_exec_new_opts(rt_backend *be, rt_store *st, const ir_graph *g, const dpc_plan *plan,
                          const cg_options *o, char *err, size_t errlen);
void rt_exec_free(rt_exec *ex);
/* Copies host data into an input. Returns -1 if there is no such input or
 * the size differs. */
/* -1: no such input, another size, or the device failed (rt_exec_failed
 * then has the device's message). */
int rt_exec_set_input(rt_exec *ex, const char *name, const void *host, size_t bytes);
int rt_exec_set_scalar(rt_exec *ex, const char *name, float value);
/* 0 while the executor's device works, else -1 + its first failure's
 * message (device.h): what a caller reports when a call without a message
 * of its own (set_input, get) failed. */
int rt_exec_failed(const rt_exec *ex, char *err, size_t errlen);
/* Runs the program and returns when the device is done (a host wait). */
int rt_exec_run(rt_exec *ex, char *err, size_t errlen);
/* The same without the wait: the run is queued behind the inputs' copies
 * and returns (cuda); results are read later (rt_exec_get waits for them,
 * an rt_readback of rt_exec_buffer does not). With DPC_SYNC=1 (or
 * DPC_PROFILE=1) every kernel, GEMM and all-reduce is synchronised as it
 * is queued (the runs stay eager), so a failure names its call: "kernel
 * k3_relu (call 7, step 5: node 12, relu): ...". */
int rt_exec_enqueue(rt_exec *ex, char *err, size_t errlen);
/* Data parallelism: hands the program's allreduce steps (partition pass)
 * to a replica's communication queue (runtime/comm/comm.h), registering
 * one bucket per bucket of the graph, before the first run; each sum gets a
 * buffer of its own. Each run then starts a bucket right after its last
 * gradient and waits for it before the first update that reads its sums.
 * Without a queue (one replica) a sum shares its gradient's bytes and the
 * step does nothing. Free the queue before the exec. 0, or -1 with a
 * message when the program's order cannot overlap (a sum read before its
 * bucket is complete). The input replica_scale (FMT_REPLICA_SCALE, read
 * by synchronised BatchNorm) is the executor's: 1 from rt_exec_new, 1/R
 * for the queue's R replicas from here on. */
int rt_exec_set_collective(rt_exec *ex, rt_coll_queue *q, char *err, size_t errlen);
/* Gradient accumulation (the queue's parts, rt_coll_queue_set_parts):
 * micro-batch `part` of an optimizer step that is not its last. Runs,
 * eagerly, every step that does not read an all-reduced sum (forward,
 * backward, BatchNorm's running statistics: whatever does not depend on
 * the update), then keeps the gradients in the queue's part `part`; the
 * last micro-batch is an rt_exec_run, which sums every part and updates
 * once. Needs the collective attached. */
int rt_exec_run_partial(rt_exec *ex, int part, char *err, size_t errlen);
/* ZeRO-1 (dprun --shard-optimizer; runtime/exec/shard.c): every
 * parameter's update belongs to one global replica of the job, which alone
 * holds the parameter's optimizer state. owner: per node of the train
 * graph, the replica that computes it (a parameter, its gradient sums, its
 * update and its states), -1 for what every replica computes. NULL + message for
 * fewer than 2 replicas or an update that mixes parameters (a global norm)
 * or a state read outside its parameter's update. */
typedef struct rt_shard {
    int n;                /* nodes of the graph */
    int replicas;         /* in the job */
    int *owner;           /* per node */
    int64_t *state_bytes; /* per replica: the optimizer state it holds */
    int64_t state_total;  /* all of it (what each replica holds unsharded) */
} rt_shard;
rt_shard *rt_shard_new(const ir_graph *g, int replicas, char *err, size_t errlen);
void rt_shard_free(rt_shard *s);
int64_t rt_shard_state_most(const rt_shard *s); /* the largest replica's state_bytes */
/* The exec of global replica `me` skips the steps of updates it does not
 * own (their sums are reduce-scattered to the owner: rt_coll_queue_set_owners
 * with each bucket's owners, registered here) and forgets the states they
 * assign (the store drops them: rt_store_shard). Call after
 * rt_exec_set_collective. -1 + message when a fused kernel mixes owned and
 * foreign work. */
int rt_exec_set_shard(rt_exec *ex, const rt_shard *s, int me, char *err, size_t errlen);
/* For rt_exec_set_shard (step_of: each node's step, -1 for sources):
 * skip[si] = 1 when step si computes only another replica's updates, the
 * queue's buckets get their pieces' owners, and the foreign states' buf
 * entries become NULL. -1 + message when a step mixes both. */
int rt_shard_bind(const ir_graph *g, const cg_program *p, const int *step_of, const rt_shard *s,
                  int me, rt_coll_queue *q, int nbuckets, unsigned char *skip, void **buf,
                  char *err, size_t errlen);
/* CUDA graphs: on a backend with graph hooks (runtime/device/device.h; cuda), run 1 is
 * eager (the warm-up), run 2 records the step and runs it, later runs
 * replay the recording: one graph launch instead of a launch per kernel.
 * Set inputs (rt_exec_set_input/_scalar) before each run as usual: they are
 * copied into the same buffers the graph reads. A stream-ordered
 * communication queue (nccl) is recorded with the step; a host one (local,
 * mpi) splits it into segments around its bucket starts and waits.
 * DPC_PROFILE and DPC_SYNC keep the runs eager. Returns 1 when graphs will be used, 0
 * when the backend has none (the runs stay eager). Call before run 2. */
int rt_exec_use_graphs(rt_exec *ex, int on);
/* Kernel launches + GEMMs issued one by one, and graph launches, by the
 * latest run (DPC_DEBUG=1 prints them for the first three runs). */
void rt_exec_launches(const rt_exec *ex, int64_t *calls, int64_t *graph_launches);
/* Copies a named tensor's current value to host; -1 if unknown or size differs. */
int rt_exec_get(rt_exec *ex, const char *name, void *host, size_t bytes);
/* Same, by node index (any node, named or not; aliases read their target).
 * A fused value that is never stored cannot be read (-1). With a memory
 * plan, a tensor shares arena bytes with others once it is dead: after a
 * step only outputs (loss, logits), gradients, sources and what lives to
 * the end hold their values; compile with --no-memplan to read the rest. */
int rt_exec_get_node(rt_exec *ex, int node, void *host, size_t bytes);
/* The device buffer rt_exec_get reads for name, and its bytes; NULL when
 * there is none. For reads that do not wait (device.h's rt_readback). */
const void *rt_exec_buffer(const rt_exec *ex, const char *name, size_t *bytes);

/* ---- refuse a plan that cannot fit, before allocating it.
 *
 * dprun adds up what a run will allocate (format/memplan.h's fmt_memory: the
 * store, each program's arena and buffers, from the plan's memory plans)
 * for every replica of this process, plus the input pipeline's batches,
 * and refuses a plan that needs more than the limit with one message
 * naming both, instead of failing an allocation deep in the run. The
 * limit is $DPC_MAX_MEMORY when set, else the device's memory (cuda) or
 * the host's physical memory (cpu).
 *
 * Usage:
 *     if (rt_memory_check(plan, be, replicas, input_bytes, err, sizeof err))
 *         fprintf(stderr, "dprun: error: %s\n", err);
 */

/* What one replica of the plan holds (its store and both programs, as the
 * plan's memory plans lay them out): 0, or -1 with a message for a
 * malformed memory plan. */
int rt_memory_need(const dpc_plan *plan, fmt_memory *need, char *err, size_t errlen);

/* What gradient accumulation of `accum` micro-batches adds to one replica:
 * the communication queue's areas, accum x every all-reduced gradient
 * (rt_coll_queue_set_parts); 0 for accum 1. */
int64_t rt_memory_accumulate(const dpc_plan *plan, int accum);

/* 0 when `replicas` copies of the plan's programs and store, accumulating
 * `accum` micro-batches each, plus input_bytes of host batches, fit the
 * limit; -1 with a message otherwise (also for a malformed DPC_MAX_MEMORY
 * or memory plan). */
int rt_memory_check(const dpc_plan *plan, const rt_backend *be, int replicas, int accum,
                    int64_t input_bytes, char *err, size_t errlen);

#endif
