/* runtime/data/pipeline.c — batch preparation on worker threads, a ring of
 * slots ahead of the consumer.
 *
 * State, all under one mutex: `claimed` is the next sequence number a
 * worker may take, `consumed` how many the consumer has released. A worker
 * may claim k only while k < consumed + depth, which is exactly when slot
 * k % depth no longer holds a batch the consumer has not released. Filling
 * happens outside the lock; a slot carries the sequence number it holds,
 * so the consumer waits for "slot k % depth holds k", whatever order the
 * workers finish in.
 *
 * The shuffled order of an epoch is computed once, by the first thread
 * that needs it, into a small ring of order buffers; the ring is long
 * enough that an epoch's buffer is reused only after every batch of that
 * epoch has been released (see order_slots()).
 */
#include "runtime/data/data.h"
#include "base/err.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"
#include "runtime/clock.h"

typedef struct {
    float *images;
    int32_t *labels;
    int64_t seq; /* the batch it holds; -1: none */
    int ready;   /* filled, not yet released */
    rt_batch view;
} slot;

enum { ORDER_EMPTY, ORDER_COMPUTING, ORDER_READY };

typedef struct {
    int64_t epoch;
    int state;
    int64_t *order;
} order_buf;

struct rt_pipeline {
    const rt_batcher *b;
    rt_pipeline_config cfg;
    int depth;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* workers: a slot came free, or stop */
    pthread_cond_t ready_cv; /* consumer: a batch is ready */
    pthread_cond_t order_cv; /* an epoch's order is ready */
    int stop;
    int64_t claimed, consumed;
    int holding;      /* the consumer holds batch `consumed` */
    rt_batch current; /* the consumer's copy of what next() returned */
    slot *slots;
    order_buf *orders;
    int norders;
    pthread_t *threads;
    int nthreads;
    rt_pipeline_stats stats;
};

static void *default_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    /* Rounded up to the alignment, as aligned_alloc requires. */
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

static void default_free(void *ctx, void *ptr) {
    (void)ctx;
    free(ptr);
}

rt_pipeline_config rt_pipeline_defaults(void) {
    rt_pipeline_config c;
    memset(&c, 0, sizeof c);
    c.workers = RT_PIPELINE_WORKERS;
    return c;
}

/* Order buffers needed so that epoch e's buffer is reused (by epoch
 * e + n) only once all of epoch e is released: a claim of k in epoch E
 * means k < consumed + depth, and a worker still reading epoch e's order
 * holds some k' < (e + 1) * B with k' >= consumed; so k - k' < depth while
 * k - k' > (n - 1) * B, impossible when (n - 1) * B >= depth - 1. */
static int order_slots(int depth, int64_t batches) { return 2 + (int)((depth - 1) / batches); }

/* The order of `epoch` (NULL when the batcher keeps dataset order). Called
 * and returns with p->mu held; computes outside it. */
static const int64_t *epoch_order(rt_pipeline *p, int epoch) {
    if (!p->b->shuffle) return NULL;
    order_buf *o = &p->orders[epoch % p->norders];
    while (o->epoch == epoch && o->state == ORDER_COMPUTING)
        pthread_cond_wait(&p->order_cv, &p->mu);
    if (o->epoch == epoch && o->state == ORDER_READY) return o->order;
    o->epoch = epoch;
    o->state = ORDER_COMPUTING;
    pthread_mutex_unlock(&p->mu);
    rt_batcher_order(p->b, epoch, o->order);
    pthread_mutex_lock(&p->mu);
    o->state = ORDER_READY;
    pthread_cond_broadcast(&p->order_cv);
    return o->order;
}

/* Prepares batch k into its slot. Called and returns with p->mu held. */
static void fill(rt_pipeline *p, int64_t k) {
    const rt_batcher *b = p->b;
    int64_t pos = k + p->cfg.first_index; /* batches from the start of first_epoch */
    int epoch = p->cfg.first_epoch + (int)(pos / b->batches);
    int64_t index = pos % b->batches;
    const int64_t *order = epoch_order(p, epoch);
    slot *s = &p->slots[k % p->depth];
    pthread_mutex_unlock(&p->mu);
    int real = rt_batcher_fill(b, order, epoch, index * b->stride + b->offset, b->batch, s->images,
                               s->labels);
    pthread_mutex_lock(&p->mu);
    s->view = (rt_batch){s->images, s->labels, real, epoch, index, k};
    s->seq = k;
    s->ready = 1;
    pthread_cond_signal(&p->ready_cv);
}

static void *worker(void *arg) {
    rt_pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && (p->claimed >= p->cfg.count || p->claimed >= p->consumed + p->depth))
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stop) break;
        fill(p, p->claimed++);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

rt_pipeline *rt_pipeline_new(const rt_batcher *b, const rt_pipeline_config *cfg, char *err,
                             size_t errlen) {
    if (cfg->workers < 0 || cfg->workers > RT_PIPELINE_MAX_WORKERS) {
        base_fail(err, errlen, "data workers must be 0..%d, got %d", RT_PIPELINE_MAX_WORKERS,
                  cfg->workers);
        return NULL;
    }
    if (cfg->depth != 0 && cfg->depth < 2) {
        base_fail(err, errlen,
                  "the input pipeline needs at least 2 slots (double buffering), got %d",
                  cfg->depth);
        return NULL;
    }
    if (cfg->count < 0 || b->batches <= 0 || cfg->first_epoch < 0 || cfg->first_index < 0 ||
        cfg->first_index >= b->batches) {
        base_fail(err, errlen,
                  "the input pipeline was asked for %lld batches of a batcher with %lld per "
                  "epoch",
                  (long long)cfg->count, (long long)b->batches);
        return NULL;
    }
    rt_pipeline *p = calloc(1, sizeof *p);
    RT_CHECK_ALLOC(p);
    p->b = b;
    p->cfg = *cfg;
    if (!p->cfg.host_alloc || !p->cfg.host_free)
        p->cfg.host_alloc = default_alloc, p->cfg.host_free = default_free;
    p->depth = cfg->depth ? cfg->depth : cfg->workers + 2;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->ready_cv, NULL);
    pthread_cond_init(&p->order_cv, NULL);
    size_t img = (size_t)b->oc * (size_t)b->oh * (size_t)b->ow * (size_t)b->batch;
    p->slots = calloc((size_t)p->depth, sizeof *p->slots);
    RT_CHECK_ALLOC(p->slots);
    for (int i = 0; i < p->depth; i++) {
        p->slots[i].images = p->cfg.host_alloc(p->cfg.alloc_ctx, img * sizeof(float));
        p->slots[i].labels = p->cfg.host_alloc(
            p->cfg.alloc_ctx,
            (size_t)b->batch * (size_t)(b->label_elems > 1 ? b->label_elems : 1) * sizeof(int32_t));
        RT_CHECK_ALLOC(p->slots[i].images && p->slots[i].labels);
        p->slots[i].seq = -1;
    }
    p->norders = b->shuffle ? order_slots(p->depth, b->batches) : 0;
    p->orders = calloc((size_t)p->norders + 1, sizeof *p->orders);
    RT_CHECK_ALLOC(p->orders);
    for (int i = 0; i < p->norders; i++) {
        p->orders[i].epoch = -1;
        p->orders[i].order = malloc(sizeof(int64_t) * (size_t)b->ds->count);
        RT_CHECK_ALLOC(p->orders[i].order);
    }
    p->threads = calloc((size_t)cfg->workers + 1, sizeof *p->threads);
    RT_CHECK_ALLOC(p->threads);
    for (int i = 0; i < cfg->workers; i++) {
        int e = pthread_create(&p->threads[i], NULL, worker, p);
        if (e) {
            base_fail(err, errlen, "cannot start data worker thread %d of %d: %s", i + 1,
                      cfg->workers, strerror(e));
            rt_pipeline_free(p);
            return NULL;
        }
        p->nthreads++;
    }
    return p;
}

const rt_batch *rt_pipeline_next(rt_pipeline *p) {
    if (p->holding) rt_pipeline_release(p);
    pthread_mutex_lock(&p->mu);
    int64_t k = p->consumed;
    if (k >= p->cfg.count) {
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    slot *s = &p->slots[k % p->depth];
    if (p->nthreads == 0) {
        /* No workers: prepare it here, timed as waiting (it is). */
        double t0 = rt_now();
        p->claimed = k + 1;
        fill(p, k);
        double w = rt_now() - t0;
        p->stats.stalls++, p->stats.wait_s += w;
        if (w > p->stats.max_wait_s) p->stats.max_wait_s = w;
    } else if (!(s->ready && s->seq == k)) {
        double t0 = rt_now();
        while (!(s->ready && s->seq == k)) pthread_cond_wait(&p->ready_cv, &p->mu);
        double w = rt_now() - t0;
        p->stats.stalls++, p->stats.wait_s += w;
        if (w > p->stats.max_wait_s) p->stats.max_wait_s = w;
    }
    p->stats.delivered++;
    p->holding = 1;
    p->current = s->view;
    pthread_mutex_unlock(&p->mu);
    return &p->current;
}

void rt_pipeline_release(rt_pipeline *p) {
    pthread_mutex_lock(&p->mu);
    if (p->holding) {
        p->slots[p->consumed % p->depth].ready = 0;
        p->consumed++;
        p->holding = 0;
        pthread_cond_signal(&p->work_cv);
    }
    pthread_mutex_unlock(&p->mu);
}

void rt_pipeline_get_stats(rt_pipeline *p, rt_pipeline_stats *st) {
    pthread_mutex_lock(&p->mu);
    *st = p->stats;
    pthread_mutex_unlock(&p->mu);
}

void rt_pipeline_free(rt_pipeline *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    for (int i = 0; i < p->depth; i++) {
        p->cfg.host_free(p->cfg.alloc_ctx, p->slots[i].images);
        p->cfg.host_free(p->cfg.alloc_ctx, p->slots[i].labels);
    }
    for (int i = 0; i < p->norders; i++) free(p->orders[i].order);
    free(p->orders);
    free(p->slots);
    free(p->threads);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->ready_cv);
    pthread_cond_destroy(&p->order_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
