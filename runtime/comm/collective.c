/* runtime/comm/collective.c — the local and mpi communicators (comm.h);
 * the communication queue that drives them is queue.c.
 *
 * The local all-reduce is a three-phase protocol over one barrier:
 *   1. every replica posts its buffer (host memory) and arrives; the last
 *      to arrive checks the counts and sizes the shared double accumulator;
 *   2. replica r sums its 1/N slice of the elements over ALL replicas'
 *      buffers, in replica order 0..N-1, into the accumulator: the work is
 *      spread over the threads, the order of the additions is not;
 *      the last to arrive at the second barrier all-reduces the accumulator
 *      across MPI ranks (mpi kind);
 *   3. every replica rounds the accumulator into its own buffer.
 * Nobody writes the accumulator of the next call before every replica has
 * finished phase 3, because phase 2 of the next call starts behind its
 * phase-1 barrier, which every replica reaches only after its phase 3.
 *
 * Stream kinds (nccl, runtime/cuda/nccl.c) plug in through
 * rt_coll_stream_ops: their queue enqueues each bucket on the replica's
 * communication stream instead of handing it to a thread.
 *
 * Device kinds (nccl with replicas sharing GPUs) plug in through
 * rt_coll_device_ops: their all-reduce (device_allreduce) runs on the host
 * queue threads like local's, but adds and sums device memory.
 *
 * Ranks (mpi, nccl across processes) plug in through rt_coll_ranks_ops,
 * called only from inside the barrier's serial section (one thread, the
 * others blocked); runtime/comm/mpi.c holds the MPI calls, so programs that never
 * join MPI link without it.
 */
#include "runtime/comm/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"
#include "runtime/check.h"
#include "runtime/comm/internal.h"

static rt_coll *coll_new(rt_coll_kind kind, int n, rt_backend *be) {
    rt_coll *c = calloc(1, sizeof *c);
    RT_CHECK_ALLOC(c);
    c->kind = kind;
    c->n = n < 1 ? 1 : n;
    c->ranks = 1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->ptr = calloc((size_t)c->n, sizeof *c->ptr);
    c->cnt = calloc((size_t)c->n, sizeof *c->cnt);
    c->parts = calloc((size_t)c->n, sizeof *c->parts);
    c->stage = calloc((size_t)c->n, sizeof *c->stage);
    c->stage_cap = calloc((size_t)c->n, sizeof *c->stage_cap);
    c->be = calloc((size_t)c->n, sizeof *c->be);
    c->host = calloc((size_t)c->n, 1);
    RT_CHECK_ALLOC(c->ptr && c->cnt && c->parts && c->stage && c->stage_cap && c->be && c->host);
    for (int r = 0; r < c->n; r++) rt_coll_set_backend(c, r, be);
    return c;
}

void rt_coll_set_backend(rt_coll *c, int replica, rt_backend *be) {
    if (replica < 0 || replica >= c->n) return;
    c->be[replica] = be;
    c->host[replica] = be && be->host_memory;
}

rt_backend *rt_coll_backend(const rt_coll *c, int replica) {
    return replica >= 0 && replica < c->n ? c->be[replica] : NULL;
}

rt_coll *rt_coll_local_new(int n, rt_backend *be) { return coll_new(RT_COLL_LOCAL, n, be); }

rt_coll *rt_coll_ranks_new(rt_coll_kind kind, int n, rt_backend *be, int rank, int ranks,
                           const rt_coll_ranks_ops *ops) {
    rt_coll *c = coll_new(kind, n, be);
    c->rank = rank;
    c->ranks = ranks < 1 ? 1 : ranks;
    if (ops) c->ops = *ops;
    return c;
}

rt_coll *rt_coll_stream_new(rt_coll_kind kind, int n, rt_backend *const *bes,
                            const rt_coll_stream_ops *ops, void *const *ctx) {
    rt_coll *c = coll_new(kind, n, bes[0]);
    c->sops = *ops;
    c->sctx = calloc((size_t)c->n, sizeof *c->sctx);
    RT_CHECK_ALLOC(c->sctx);
    for (int r = 0; r < c->n; r++) {
        rt_coll_set_backend(c, r, bes[r]);
        c->sctx[r] = ctx[r];
    }
    return c;
}

rt_coll *rt_coll_device_new(rt_coll_kind kind, int n, rt_backend *const *bes, const int *leader,
                            const rt_coll_device_ops *ops, void *const *ctx) {
    rt_coll *c = coll_new(kind, n, bes[0]);
    c->dops = *ops;
    c->dctx = calloc((size_t)c->n, sizeof *c->dctx);
    c->leader = calloc((size_t)c->n, sizeof *c->leader);
    RT_CHECK_ALLOC(c->dctx && c->leader);
    for (int r = 0; r < c->n; r++) {
        rt_coll_set_backend(c, r, bes[r]);
        c->leader[r] = leader[r];
        c->dctx[r] = leader[r] == r ? ctx[r] : NULL;
        c->ngroups += leader[r] == r;
    }
    return c;
}

void rt_coll_set_ranks(rt_coll *c, int rank, int ranks, const rt_coll_ranks_ops *ops) {
    c->rank = rank;
    c->ranks = ranks < 1 ? 1 : ranks;
    if (ops) c->ops = *ops;
}

int rt_coll_device_groups(const rt_coll *c) { return c->dctx ? c->ngroups : 0; }

void rt_coll_free(rt_coll *c) {
    if (!c) return;
    for (int r = 0; c->sctx && r < c->n; r++) c->sops.free(c->sctx[r]);
    free(c->sctx);
    for (int r = 0; c->dctx && r < c->n; r++)
        if (c->dctx[r]) c->dops.free(c->dctx[r]);
    free(c->dctx);
    free(c->leader);
    for (int r = 0; r < c->n; r++) free(c->stage[r]);
    free(c->stage);
    free(c->stage_cap);
    free(c->ptr);
    free(c->cnt);
    free(c->parts);
    free(c->acc);
    free(c->be);
    free(c->host);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

rt_coll_kind rt_coll_kind_of(const rt_coll *c) { return c->kind; }
const char *rt_coll_name(const rt_coll *c) {
    return c->kind == RT_COLL_MPI ? "mpi" : c->kind == RT_COLL_NCCL ? "nccl" : "local";
}
int rt_coll_local_size(const rt_coll *c) { return c->n; }
int rt_coll_size(const rt_coll *c) { return c->n * c->ranks; }
int rt_coll_rank(const rt_coll *c) { return c->rank; }
int rt_coll_global_replica(const rt_coll *c, int r) { return c->rank * c->n + r; }

void rt_coll_abort(rt_coll *c) {
    pthread_mutex_lock(&c->mu);
    c->aborted = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

int rt_coll_aborted(rt_coll *c) {
    pthread_mutex_lock(&c->mu);
    int a = c->aborted;
    pthread_mutex_unlock(&c->mu);
    return a;
}

static int failed(rt_coll *c, char *err, size_t errlen) {
    return base_fail(err, errlen, "collective aborted%s%s", c->why[0] ? ": " : "", c->why);
}

/* Waits for every local replica. The last to arrive runs `serial` (if any)
 * while the others are still blocked, so it may touch shared state and
 * call MPI; a non-zero return aborts the communicator with c->why set. */
typedef int (*serial_fn)(rt_coll *c, void *arg);

static int barrier(rt_coll *c, serial_fn serial, void *arg) {
    pthread_mutex_lock(&c->mu);
    if (c->aborted) {
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    unsigned long gen = c->gen;
    if (++c->arrived == c->n) {
        if (serial && serial(c, arg)) c->aborted = 1;
        c->arrived = 0;
        c->gen++;
        pthread_cond_broadcast(&c->cv);
    } else {
        while (gen == c->gen && !c->aborted) pthread_cond_wait(&c->cv, &c->mu);
    }
    int rc = c->aborted ? -1 : 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Host memory of replica r holding `bytes`: the buffer itself on host
 * backends, else the replica's staging area filled from the device. */
static void abort_with(rt_coll *c, const char *why);

/* A failed read aborts the communicator: the barrier after it fails. */
static void *host_view(rt_coll *c, int r, void *buf, size_t bytes, int fill) {
    if (c->host[r]) return buf;
    if (c->stage_cap[r] < bytes) {
        free(c->stage[r]);
        c->stage[r] = malloc(bytes ? bytes : 1);
        RT_CHECK_ALLOC(c->stage[r]);
        c->stage_cap[r] = bytes;
    }
    char why[512];
    if (fill && bytes && rt_backend_copy_out(c->be[r], c->stage[r], buf, bytes, why, sizeof why))
        abort_with(c, why);
    return c->stage[r];
}

static int same_counts(rt_coll *c, const char *what) {
    for (int r = 1; r < c->n; r++)
        if (c->cnt[r] != c->cnt[0] || c->parts[r] != c->parts[0]) {
            snprintf(c->why, sizeof c->why, "%s: replica %d passed %lld x %d, replica 0 %lld x %d",
                     what, r, (long long)c->cnt[r], c->parts[r], (long long)c->cnt[0], c->parts[0]);
            return -1;
        }
    return 0;
}

static int ordered(const rt_coll *c) { return c->ranks > 1 && c->ops.chain_in && c->ops.chain_out; }

/* acc starts at zero, or, in the ordered sum across processes, at the
 * running sum of the processes before this one. */
static int serial_begin_sum(rt_coll *c, void *arg) {
    (void)arg;
    if (same_counts(c, "all-reduce sizes differ")) return -1;
    if (c->acc_cap < c->cnt[0]) {
        free(c->acc);
        c->acc = malloc(sizeof *c->acc * (size_t)c->cnt[0]);
        RT_CHECK_ALLOC(c->acc);
        c->acc_cap = c->cnt[0];
    }
    if (c->cnt[0])
        memset(c->acc, 0,
               sizeof *c->acc * (size_t)c->cnt[0]); /* acc is NULL when nothing was ever summed */
    if (ordered(c) && c->ops.chain_in(c->acc, c->cnt[0])) {
        snprintf(c->why, sizeof c->why, "receiving the sum of the processes before failed");
        return -1;
    }
    return 0;
}

static int serial_sum_ranks(rt_coll *c, void *arg) {
    (void)arg;
    int bad = 0;
    if (ordered(c))
        bad = c->ops.chain_out(c->acc, c->cnt[0]);
    else if (c->ranks > 1 && c->ops.sum_f64)
        bad = c->ops.sum_f64(c->acc, c->cnt[0]);
    if (bad) {
        snprintf(c->why, sizeof c->why, "summing across %d processes failed", c->ranks);
        return -1;
    }
    return 0;
}

/* Aborts the communicator from a replica's thread with the reason. */
static void abort_with(rt_coll *c, const char *why) {
    pthread_mutex_lock(&c->mu);
    if (!c->why[0]) snprintf(c->why, sizeof c->why, "%s", why);
    c->aborted = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static int serial_same_sizes(rt_coll *c, void *arg) {
    (void)arg;
    return same_counts(c, "all-reduce sizes differ");
}

/* Device by device (rt_coll_device_new): every replica's buf is complete
 * on its device (sync), the first replica of each device adds the others'
 * in replica order, the devices' sums are summed (NCCL), and the other
 * replicas copy their leader's result. Nobody enters the cross-device sum
 * unless every device's adds succeeded, and a leader's buf is not reused
 * before every copy of it is made. */
static int device_allreduce(rt_coll *c, int replica, float *buf, int64_t count, char *err,
                            size_t errlen) {
    rt_backend *be = c->be[replica];
    int lead = c->leader[replica];
    size_t bytes = sizeof(float) * (size_t)count;
    char why[1024];
    if (rt_backend_sync(be, why, sizeof why)) abort_with(c, why);
    c->ptr[replica] = buf;
    c->cnt[replica] = count;
    c->parts[replica] = 1;
    if (barrier(c, serial_same_sizes, NULL)) return failed(c, err, errlen);
    if (lead == replica) {
        const float **others = malloc(sizeof *others * (size_t)c->n);
        RT_CHECK_ALLOC(others);
        int k = 0;
        for (int q = 0; q < c->n; q++)
            if (q != replica && c->leader[q] == replica) others[k++] = c->ptr[q];
        if (c->dops.add(c->dctx[replica], buf, others, k, count, why, sizeof why))
            abort_with(c, why);
        free(others);
    }
    if (barrier(c, NULL, NULL)) return failed(c, err, errlen);
    if (lead == replica && c->dops.sum(c->dctx[replica], buf, count, why, sizeof why))
        abort_with(c, why);
    if (barrier(c, NULL, NULL)) return failed(c, err, errlen);
    if (lead != replica && bytes) {
        if (rt_backend_copy(be, buf, c->ptr[lead], bytes, why, sizeof why) ||
            rt_backend_sync(be, why, sizeof why))
            abort_with(c, why);
    }
    if (barrier(c, NULL, NULL)) return failed(c, err, errlen);
    return 0;
}

/* Which pieces the sum is written into on this replica: every element
 * (n == 0), or the pieces global replica `me` owns (reduce-scatter). */
typedef struct {
    const int64_t *end;
    const int *owner;
    int n, me;
} sum_keep;

/* The all-reduce's ordered sum of `parts` parts per replica (gradient
 * accumulation; 1 otherwise); phase 3 rounds only what keep asks for. */
static int ordered_sum(rt_coll *c, int replica, float *buf, int64_t count, int parts,
                       const sum_keep *keep, char *err, size_t errlen) {
    size_t bytes = sizeof(float) * (size_t)count;
    float *h = host_view(c, replica, buf, bytes * (size_t)parts, 1);
    c->ptr[replica] = h;
    c->cnt[replica] = count;
    c->parts[replica] = parts;
    if (barrier(c, serial_begin_sum, NULL)) return failed(c, err, errlen);
    /* Phase 2: this replica's slice of the elements, every replica's value
     * of each element added in replica order, each replica's parts in
     * part order: replica q's part k is contributor q*parts+k, as if it
     * were a replica of its own. */
    int64_t lo = count * replica / c->n, hi = count * (replica + 1) / c->n;
    const float *const *src = (const float *const *)c->ptr;
    double *acc = c->acc;
    for (int64_t i = lo; i < hi; i++) {
        double s = acc[i];
        for (int q = 0; q < c->n; q++)
            for (int k = 0; k < parts; k++) s += (double)src[q][k * count + i];
        acc[i] = s;
    }
    if (barrier(c, serial_sum_ranks, NULL)) return failed(c, err, errlen);
    /* Phase 3: round this replica's pieces (pieces tile buf in order). */
    for (int k = 0; k < (keep->n ? keep->n : 1); k++) {
        int64_t a = keep->n && k ? keep->end[k - 1] : 0, z = keep->n ? keep->end[k] : count;
        if (keep->n && keep->owner[k] >= 0 && keep->owner[k] != keep->me) continue;
        for (int64_t i = a; i < z; i++) h[i] = (float)acc[i];
        if (!c->host[replica] && z > a &&
            rt_backend_copy_in(c->be[replica], buf + a, h + a, sizeof(float) * (size_t)(z - a), err,
                               errlen))
            return -1;
    }
    return 0;
}

int rt_coll_allreduce_sum(rt_coll *c, int replica, float *buf, int64_t count, char *err,
                          size_t errlen) {
    return rt_coll_allreduce_parts(c, replica, buf, count, 1, err, errlen);
}

int rt_coll_allreduce_parts(rt_coll *c, int replica, float *buf, int64_t count, int parts,
                            char *err, size_t errlen) {
    if (replica < 0 || replica >= c->n) {
        return base_fail(err, errlen, "all-reduce: replica %d of %d", replica, c->n);
    }
    if (parts < 1) return base_fail(err, errlen, "all-reduce: %d parts", parts);
    if (c->n == 1 && c->ranks == 1 && parts == 1) return 0; /* the sum over one replica */
    if (c->dctx && parts > 1)
        return base_fail(err, errlen, "the %s collective sums no parts (gradient accumulation)",
                         rt_coll_name(c));
    if (c->dctx) return device_allreduce(c, replica, buf, count, err, errlen);
    sum_keep all = {NULL, NULL, 0, 0};
    return ordered_sum(c, replica, buf, count, parts, &all, err, errlen);
}

int rt_coll_reduce_scatter(rt_coll *c, int replica, float *buf, int64_t count, const int64_t *end,
                           const int *owner, int npieces, char *err, size_t errlen) {
    return rt_coll_reduce_scatter_parts(c, replica, buf, count, 1, end, owner, npieces, err,
                                        errlen);
}

int rt_coll_reduce_scatter_parts(rt_coll *c, int replica, float *buf, int64_t count, int parts,
                                 const int64_t *end, const int *owner, int npieces, char *err,
                                 size_t errlen) {
    if (replica < 0 || replica >= c->n) {
        return base_fail(err, errlen, "reduce-scatter: replica %d of %d", replica, c->n);
    }
    if (npieces < 1 || end[npieces - 1] != count) {
        return base_fail(err, errlen, "reduce-scatter: %d pieces do not tile %lld floats", npieces,
                         (long long)count);
    }
    if (parts < 1) return base_fail(err, errlen, "reduce-scatter: %d parts", parts);
    if (c->n == 1 && c->ranks == 1 && parts == 1) return 0;
    if (c->dctx && parts > 1)
        return base_fail(err, errlen, "the %s collective sums no parts (gradient accumulation)",
                         rt_coll_name(c));
    if (c->dctx) return device_allreduce(c, replica, buf, count, err, errlen);
    sum_keep mine = {end, owner, npieces, rt_coll_global_replica(c, replica)};
    return ordered_sum(c, replica, buf, count, parts, &mine, err, errlen);
}

/* The root of a broadcast: its rank, and the local replica whose host
 * buffer every replica of this process copies (the root itself on its
 * rank, replica 0, which receives it across ranks, elsewhere). */
typedef struct {
    int rank, src;
} bcast_root;

static int serial_bcast(rt_coll *c, void *arg) {
    const bcast_root *root = arg;
    if (same_counts(c, "broadcast sizes differ")) return -1;
    if (c->ranks < 2) return 0;
    void *p = c->ptr[root->src];
    int bad = root->rank == 0 ? c->ops.bcast && c->ops.bcast(p, c->cnt[0])
                              : !c->ops.bcast_from || c->ops.bcast_from(p, c->cnt[0], root->rank);
    if (bad) {
        snprintf(c->why, sizeof c->why, "broadcast across %d processes failed", c->ranks);
        return -1;
    }
    return 0;
}

int rt_coll_broadcast_from(rt_coll *c, int replica, int root, void *buf, size_t bytes, char *err,
                           size_t errlen) {
    if (replica < 0 || replica >= c->n || root < 0 || root >= rt_coll_size(c)) {
        return base_fail(err, errlen, "broadcast: replica %d (root %d) of %d", replica, root,
                         rt_coll_size(c));
    }
    if (c->n == 1 && c->ranks == 1) return 0;
    if (c->sctx) return c->sops.bcast(c->sctx[replica], buf, bytes, root, err, errlen);
    bcast_root rt = {root / c->n, c->rank == root / c->n ? root % c->n : 0};
    int is_root = c->rank == rt.rank && replica == rt.src;
    void *h = host_view(c, replica, buf, bytes, is_root);
    c->ptr[replica] = h;
    c->cnt[replica] = (int64_t)bytes;
    c->parts[replica] = 1;
    if (barrier(c, serial_bcast, &rt)) return failed(c, err, errlen);
    if (replica != rt.src && bytes) memcpy(h, c->ptr[rt.src], bytes);
    /* The source's buffer must stay as it is until every copy is made. */
    if (barrier(c, NULL, NULL)) return failed(c, err, errlen);
    if (!c->host[replica] && !is_root && bytes)
        return rt_backend_copy_in(c->be[replica], buf, h, bytes, err, errlen);
    return 0;
}

int rt_coll_broadcast(rt_coll *c, int replica, void *buf, size_t bytes, char *err, size_t errlen) {
    return rt_coll_broadcast_from(c, replica, 0, buf, bytes, err, errlen);
}

static int serial_ranks_barrier(rt_coll *c, void *arg) {
    (void)arg;
    if (c->ranks > 1 && c->ops.barrier && c->ops.barrier()) {
        snprintf(c->why, sizeof c->why, "barrier across %d processes failed", c->ranks);
        return -1;
    }
    return 0;
}

int rt_coll_barrier(rt_coll *c, int replica, char *err, size_t errlen) {
    (void)replica;
    if (barrier(c, serial_ranks_barrier, NULL)) return failed(c, err, errlen);
    return 0;
}
