/* runtime/pipeline.h — worker threads that prepare batches ahead of the
 * training step, so the step never waits on input in steady state.
 *
 * A pipeline delivers `count` batches of one batcher in sequence: with
 * p = first_index + k, batch k of the sequence is batch p % batches of
 * epoch first_epoch + p / batches (the epoch's own shuffled order,
 * reshuffled every epoch); first_index > 0 starts mid-epoch (a resumed run). `workers`
 * threads fill a ring of `depth` slots ahead of the consumer, across epoch
 * boundaries too, so the first batch of an epoch is ready while the last
 * one of the previous epoch (or an evaluation) runs.
 *
 * Every batch's content is a pure function of (seed, epoch, index) — see
 * runtime/data.h — so which thread prepares which batch, and when, never
 * changes what the consumer sees: 0, 1 or 8 workers give identical bytes.
 *
 * Usage:
 *     rt_pipeline_config cfg = rt_pipeline_defaults();  // 2 workers, 4 slots
 *     cfg.count = epochs * b.batches;
 *     rt_pipeline *p = rt_pipeline_new(&b, &cfg, err, sizeof err);
 *     const rt_batch *bt;
 *     while ((bt = rt_pipeline_next(p))) {           // blocks only if not ready yet
 *         copy bt->images / bt->labels to the device;
 *         rt_pipeline_release(p);                    // the slot goes back to the workers
 *         run the step;
 *     }
 *     rt_pipeline_stats st; rt_pipeline_get_stats(p, &st);  // how long next() waited
 *     rt_pipeline_free(p);                           // stops and joins the workers, any time
 *
 * One consumer thread only. The slots are host memory from cfg.host_alloc
 * (default: 64-byte aligned malloc), so a backend that wants page-locked
 * memory for its copies can supply its own allocator.
 */
#ifndef DPC_RT_PIPELINE_H
#define DPC_RT_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/data.h"

typedef struct rt_pipeline rt_pipeline;

/* One prepared batch. images and labels are valid from rt_pipeline_next
 * until rt_pipeline_release (then the workers refill that memory); the
 * other fields until the next rt_pipeline_next. */
typedef struct {
    const float *images;   /* batch x oc x oh x ow */
    const int32_t *labels; /* batch */
    int real;              /* samples that are real; the rest is padding (eval) */
    int epoch;
    int64_t index;         /* batch index within the epoch */
    int64_t seq;           /* position in the pipeline's sequence */
} rt_batch;

typedef struct {
    int workers;      /* threads; 0 prepares each batch inside rt_pipeline_next */
    int depth;        /* slots (batches in flight); at least 2, 0 for workers + 2 */
    int first_epoch;  /* epoch of the sequence's first batch */
    int64_t first_index; /* its index in that epoch (0 .. batches-1) */
    int64_t count;    /* batches to deliver */
    void *(*host_alloc)(void *ctx, size_t bytes); /* NULL: aligned malloc */
    void (*host_free)(void *ctx, void *ptr);
    void *alloc_ctx;
} rt_pipeline_config;

/* How long the consumer waited for input, over all next() calls so far. */
typedef struct {
    int64_t delivered;  /* batches handed out */
    int64_t stalls;     /* next() calls that had to wait */
    double wait_s;      /* total time next() waited */
    double max_wait_s;  /* longest single wait */
} rt_pipeline_stats;

#define RT_PIPELINE_WORKERS 2
#define RT_PIPELINE_MAX_WORKERS 64

rt_pipeline_config rt_pipeline_defaults(void);
/* Starts the workers. NULL + message when the configuration is invalid or
 * a thread cannot be started. */
rt_pipeline *rt_pipeline_new(const rt_batcher *b, const rt_pipeline_config *cfg, char *err,
                             size_t errlen);
/* The next batch of the sequence, waiting for it if needed; NULL after the
 * last. Releases the previous batch if the caller has not. */
const rt_batch *rt_pipeline_next(rt_pipeline *p);
/* Hands the current batch's slot back to the workers. */
void rt_pipeline_release(rt_pipeline *p);
void rt_pipeline_get_stats(rt_pipeline *p, rt_pipeline_stats *st);
/* Stops the workers (each finishes the batch in hand), joins them, frees
 * everything. NULL is fine. */
void rt_pipeline_free(rt_pipeline *p);

#endif
