/* runtime/comm/queue.c — the communication queue (comm.h): per replica a
 * thread that sums started buckets in order over the communicator (host
 * kinds), or, for stream kinds (nccl), each bucket enqueued on the
 * replica's communication stream. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/check.h"
#include "runtime/comm/internal.h"
#include "runtime/device/device.h"

/* ---- the communication queue ------------------------------------------------ */

enum { B_IDLE, B_QUEUED, B_DONE, B_FAILED };

typedef struct {
    rt_coll_piece *piece;
    int n;
    int64_t total; /* floats */
    void *parts;   /* accumulation: parts x total floats on the device, or NULL */
    int *owner;    /* ZeRO-1: piece i's sum goes to global replica owner[i]; NULL: to all */
    int64_t *end;  /* with owner: piece i ends at end[i] of the packed bucket */
} bucket;

struct rt_coll_queue {
    rt_coll *c;
    int replica;
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bucket *b;
    int nb, cap;
    int *state;
    int *fifo; /* ring of started bucket ids; a bucket is in it at most once */
    int head, count;
    int stop;
    void *pack;       /* device memory: the largest bucket, packed */
    int64_t pack_cap; /* floats */
    int parts;        /* micro-batches summed per step (rt_coll_queue_set_parts) */
    char why[320];
};

/* The bucket's pieces, contiguous at dst / from src: 0, or -1 + message. */
static int pack(rt_backend *be, const bucket *b, float *dst, char *err, size_t errlen) {
    for (int i = 0; i < b->n; dst += b->piece[i++].count)
        if (rt_backend_copy(be, dst, b->piece[i].src, sizeof(float) * (size_t)b->piece[i].count,
                            err, errlen))
            return -1;
    return 0;
}

static int unpack(rt_backend *be, const bucket *b, const float *src, char *err, size_t errlen) {
    for (int i = 0; i < b->n; src += b->piece[i++].count)
        if (rt_backend_copy(be, b->piece[i].dst, src, sizeof(float) * (size_t)b->piece[i].count,
                            err, errlen))
            return -1;
    return 0;
}

/* ZeRO-1: the bucket reduce-scattered; only this replica's pieces are
 * unpacked (the others' sums are not computed here). */
static int run_bucket_sharded(rt_coll_queue *q, const bucket *b, char *err, size_t errlen) {
    rt_backend *be = q->c->be[q->replica];
    int me = rt_coll_global_replica(q->c, q->replica);
    /* With accumulation the live gradients are the last part of the area. */
    int parts = b->parts ? q->parts : 1, direct = !b->parts && b->n == 1;
    float *buf = b->parts ? b->parts : direct ? b->piece[0].dst : q->pack;
    if (b->parts) {
        if (pack(be, b, buf + (parts - 1) * b->total, err, errlen)) return -1;
    } else {
        for (int i = 0; i < b->n; i++)
            if ((b->n > 1 || b->piece[0].dst != b->piece[0].src) &&
                rt_backend_copy(be, buf + (i ? b->end[i - 1] : 0), b->piece[i].src,
                                sizeof(float) * (size_t)b->piece[i].count, err, errlen))
                return -1;
    }
    if (rt_coll_reduce_scatter_parts(q->c, q->replica, buf, b->total, parts, b->end, b->owner, b->n,
                                     err, errlen))
        return -1;
    for (int i = 0; i < b->n && !direct; i++)
        if ((b->owner[i] < 0 || b->owner[i] == me) &&
            rt_backend_copy(be, b->piece[i].dst, buf + (i ? b->end[i - 1] : 0),
                            sizeof(float) * (size_t)b->piece[i].count, err, errlen))
            return -1;
    return 0;
}

/* Packs the bucket's gradients, sums them over the replicas, unpacks the
 * sums. A one-piece bucket is summed in its output directly. With parts,
 * the gradients are the last part of the bucket's area and part 0 gets
 * the sum of all of them. */
static int run_bucket(rt_coll_queue *q, const bucket *b, char *err, size_t errlen) {
    rt_backend *be = q->c->be[q->replica];
    if (b->owner) return run_bucket_sharded(q, b, err, errlen);
    if (b->parts) {
        float *area = b->parts;
        if (pack(be, b, area + (q->parts - 1) * b->total, err, errlen) ||
            rt_coll_allreduce_parts(q->c, q->replica, area, b->total, q->parts, err, errlen))
            return -1;
        return unpack(be, b, area, err, errlen);
    }
    if (b->n == 1) {
        const rt_coll_piece *p = &b->piece[0];
        if (p->dst != p->src &&
            rt_backend_copy(be, p->dst, p->src, sizeof(float) * (size_t)p->count, err, errlen))
            return -1;
        return rt_coll_allreduce_sum(q->c, q->replica, p->dst, p->count, err, errlen);
    }
    if (pack(be, b, q->pack, err, errlen) ||
        rt_coll_allreduce_sum(q->c, q->replica, q->pack, b->total, err, errlen))
        return -1;
    return unpack(be, b, q->pack, err, errlen);
}

static void *queue_main(void *arg) {
    rt_coll_queue *q = arg;
    for (;;) {
        pthread_mutex_lock(&q->mu);
        while (!q->stop && q->count == 0) pthread_cond_wait(&q->cv, &q->mu);
        if (q->count == 0) { /* stopping, nothing left */
            pthread_mutex_unlock(&q->mu);
            return NULL;
        }
        int id = q->fifo[q->head];
        q->head = (q->head + 1) % q->nb;
        q->count--;
        pthread_mutex_unlock(&q->mu);
        char why[256];
        int rc = run_bucket(q, &q->b[id], why, sizeof why);
        pthread_mutex_lock(&q->mu);
        if (rc) snprintf(q->why, sizeof q->why, "bucket %d: %s", id, why);
        q->state[id] = rc ? B_FAILED : B_DONE;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
}

rt_coll_queue *rt_coll_queue_new(rt_coll *c, int replica) {
    rt_coll_queue *q = calloc(1, sizeof *q);
    RT_CHECK_ALLOC(q);
    q->c = c;
    q->replica = replica;
    q->parts = 1;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    return q;
}

int rt_coll_queue_add_bucket(rt_coll_queue *q, const rt_coll_piece *pieces, int n) {
    /* Registration happens before the first start: the thread is idle. */
    if (q->nb == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 8;
        q->b = realloc(q->b, sizeof *q->b * (size_t)q->cap);
        q->state = realloc(q->state, sizeof *q->state * (size_t)q->cap);
        q->fifo = realloc(q->fifo, sizeof *q->fifo * (size_t)q->cap);
        RT_CHECK_ALLOC(q->b && q->state && q->fifo);
    }
    bucket *b = &q->b[q->nb];
    b->n = n;
    b->owner = NULL;
    b->end = NULL;
    b->total = 0;
    b->piece = malloc(sizeof *b->piece * (size_t)(n > 0 ? n : 1));
    RT_CHECK_ALLOC(b->piece);
    for (int i = 0; i < n; i++) {
        b->piece[i] = pieces[i];
        b->total += pieces[i].count;
    }
    b->parts = NULL;
    if (q->parts > 1) {
        rt_backend *be = q->c->be[q->replica];
        /* NULL: be failed (kept), and its executor reports it */
        b->parts =
            rt_backend_alloc(be, sizeof(float) * (size_t)b->total * (size_t)q->parts, NULL, 0);
    } else if (n > 1 && b->total > q->pack_cap &&
               !q->c->sctx) { /* a stream kind needs no packing */
        rt_backend *be = q->c->be[q->replica];
        rt_backend_dealloc(be, q->pack);
        q->pack = rt_backend_alloc(be, sizeof(float) * (size_t)b->total, NULL, 0);
        q->pack_cap = b->total;
    }
    q->state[q->nb] = B_IDLE;
    /* The ring's ids stay valid as it grows: nothing is queued yet. */
    q->head = q->count = 0;
    return q->nb++;
}

void rt_coll_queue_set_owners(rt_coll_queue *q, int id, const int *owner) {
    if (id < 0 || id >= q->nb) return;
    bucket *b = &q->b[id];
    free(b->owner), free(b->end);
    b->owner = malloc(sizeof *b->owner * (size_t)b->n);
    b->end = malloc(sizeof *b->end * (size_t)b->n);
    RT_CHECK_ALLOC(b->owner && b->end);
    for (int i = 0; i < b->n; i++) {
        b->owner[i] = owner[i];
        b->end[i] = (i ? b->end[i - 1] : 0) + b->piece[i].count;
    }
}

int rt_coll_queue_buckets(const rt_coll_queue *q) { return q->nb; }
int rt_coll_queue_replicas(const rt_coll_queue *q) { return rt_coll_size(q->c); }

int rt_coll_queue_set_parts(rt_coll_queue *q, int parts, char *err, size_t errlen) {
    if (parts < 1) return base_fail(err, errlen, "%d micro-batches per step", parts);
    if (q->nb) return base_fail(err, errlen, "the queue's buckets are registered already");
    if (parts > 1 && q->c->dctx)
        return base_fail(err, errlen,
                         "the %s collective of replicas sharing GPUs cannot accumulate gradients "
                         "(the local and mpi ones can, and nccl on distinct GPUs)",
                         rt_coll_name(q->c));
    q->parts = parts;
    return 0;
}

void rt_coll_queue_keep(rt_coll_queue *q, int part) {
    if (q->parts < 2 || part < 0 || part >= q->parts - 1) {
        RT_FAIL("rt_coll_queue_keep: part %d of %d", part, q->parts);
        abort();
    }
    rt_backend *be = q->c->be[q->replica];
    char why[512]; /* a failure is kept by the backend: the step's next call reports it */
    for (int i = 0; i < q->nb; i++)
        if (pack(be, &q->b[i], (float *)q->b[i].parts + part * q->b[i].total, why, sizeof why))
            break;
}

int64_t rt_coll_queue_parts_bytes(const rt_coll_queue *q) {
    int64_t floats = 0;
    for (int i = 0; i < q->nb; i++) floats += q->b[i].parts ? q->b[i].total * q->parts : 0;
    return floats * (int64_t)sizeof(float);
}

/* Accumulation on a stream kind: the live gradients packed as the last
 * part of the bucket's area, then parts 1.. added into part 0 in part
 * order, on the device (compute stream, behind the backward). */
static int sum_parts_on_device(rt_coll_queue *q, const bucket *b, char *err, size_t errlen) {
    float *area = b->parts;
    if (pack(q->c->be[q->replica], b, area + (q->parts - 1) * b->total, err, errlen)) return -1;
    const float **others = malloc(sizeof *others * (size_t)q->parts);
    RT_CHECK_ALLOC(others);
    for (int k = 1; k < q->parts; k++) others[k - 1] = area + k * b->total;
    int rc =
        q->c->sops.add(q->c->sctx[q->replica], area, others, q->parts - 1, b->total, err, errlen);
    free(others);
    return rc;
}

/* A stream kind (nccl): the replica's communication stream is its queue.
 * The pieces are summed out of place (src -> dst; with accumulation, from
 * part 0 of the area) after the compute stream's current point (nccl: one
 * NCCL group); a failure shows at the wait. */
static void start_on_stream(rt_coll_queue *q, int id) {
    const bucket *b = &q->b[id];
    const void **src = malloc(sizeof *src * (size_t)b->n);
    void **dst = malloc(sizeof *dst * (size_t)b->n);
    int64_t *count = malloc(sizeof *count * (size_t)b->n);
    RT_CHECK_ALLOC(src && dst && count);
    const float *summed = b->parts; /* part 0: the pieces packed in order */
    for (int i = 0; i < b->n; i++) {
        src[i] = b->parts ? (const void *)summed : b->piece[i].src;
        dst[i] = b->piece[i].dst;
        count[i] = b->piece[i].count;
        if (summed) summed += count[i];
    }
    char why[256];
    int rc = b->parts ? sum_parts_on_device(q, b, why, sizeof why) : 0;
    if (!rc)
        rc = q->c->sops.start(q->c->sctx[q->replica], id, src, dst, count, b->owner, b->n, why,
                              sizeof why);
    if (rc) snprintf(q->why, sizeof q->why, "bucket %d: %s", id, why);
    q->state[id] = rc ? B_FAILED : B_QUEUED;
    free(src), free(dst), free(count);
}

int rt_coll_queue_stream_ordered(const rt_coll_queue *q) { return q->c->sctx != NULL; }

void rt_coll_queue_start(rt_coll_queue *q, int id) {
    if (id < 0 || id >= q->nb) {
        RT_FAIL("rt_coll_queue_start: no bucket %d (%d registered)", id, q->nb);
        abort();
    }
    if (q->c->sctx) {
        start_on_stream(q, id);
        return;
    }
    char why[64];
    /* What the replica computed must be in memory before the thread reads
     * it (a no-op on the cpu backend, whose calls are synchronous). */
    rt_backend *be = q->c->be[q->replica];
    rt_backend_sync(be, why, sizeof why); /* a failure is kept: the step's next call reports it */
    pthread_mutex_lock(&q->mu);
    if (!q->running) {
        if (pthread_create(&q->thread, NULL, queue_main, q)) {
            RT_SYS_FAIL("pthread_create (communication queue)");
            abort();
        }
        q->running = 1;
    }
    if (q->state[id] == B_QUEUED) {
        pthread_mutex_unlock(&q->mu);
        RT_FAIL("rt_coll_queue_start: bucket %d started twice without a wait", id);
        abort();
    }
    q->state[id] = B_QUEUED;
    q->fifo[(q->head + q->count) % q->nb] = id;
    q->count++;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

int rt_coll_queue_wait(rt_coll_queue *q, int id, char *err, size_t errlen) {
    if (id < 0 || id >= q->nb) {
        return base_fail(err, errlen, "no bucket %d (%d registered)", id, q->nb);
    }
    if (q->c->sctx) { /* the compute stream waits, the host does not */
        int st = q->state[id];
        q->state[id] = B_IDLE;
        if (st == B_FAILED) {
            return base_fail(err, errlen, "%s", q->why);
        }
        return st == B_QUEUED ? q->c->sops.join(q->c->sctx[q->replica], id, err, errlen) : 0;
    }
    pthread_mutex_lock(&q->mu);
    while (q->state[id] == B_QUEUED) pthread_cond_wait(&q->cv, &q->mu);
    int st = q->state[id];
    q->state[id] = B_IDLE;
    if (st == B_FAILED) base_fail(err, errlen, "%s", q->why);
    pthread_mutex_unlock(&q->mu);
    return st == B_FAILED ? -1 : 0;
}

int rt_coll_queue_wait_all(rt_coll_queue *q, char *err, size_t errlen) {
    int rc = 0;
    for (int b = 0; b < q->nb; b++)
        if (rt_coll_queue_wait(q, b, err, errlen)) rc = -1; /* keep waiting for the rest */
    return rc;
}

void rt_coll_queue_free(rt_coll_queue *q) {
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (q->running) pthread_join(q->thread, NULL);
    for (int i = 0; i < q->nb; i++) {
        free(q->b[i].piece), free(q->b[i].owner), free(q->b[i].end);
        rt_backend_dealloc(q->c->be[q->replica], q->b[i].parts);
    }
    free(q->b);
    free(q->state);
    free(q->fifo);
    rt_backend_dealloc(q->c->be[q->replica], q->pack);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}
