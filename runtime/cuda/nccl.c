/* runtime/cuda/nccl.c — the nccl collective (comm.h). Replicas on
 * distinct devices: one NCCL rank per replica, each on a cuda backend of
 * its own device, its queue the backend's communication stream
 * (cuda.h's rt_nccl_bucket_*). Replicas sharing devices: one NCCL
 * rank per device, the replicas of a device summed on it first
 * (rt_coll_device_new). Under mpirun the ranks span the processes.
 * Apart from collective.c so that the host collectives build and link
 * without the cuda backend (the ThreadSanitizer test compiles them alone).
 * First the NCCL calls on the backend's streams (cuda.h's rt_nccl_*; a
 * build with CUDA=0 has stubs.c's), then the collective. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"
#include "runtime/cuda/internal.h"
#include "runtime/check.h"
#include "runtime/comm/comm.h"

#ifdef DPC_HAVE_CUDA

/* ---- NCCL calls (cuda.h's rt_nccl_*) --------------------------------------- */

struct rt_nccl_comm {
    rt_backend *be;
    ncclComm_t comm;
    CUevent *bucket_done; /* by bucket id */
    int nbuckets;
};

int rt_nccl_version(int *version, char *err, size_t errlen) {
    char e[512];
    if (rt_nccl_load(e, sizeof e)) {
        return base_fail(err, errlen, "cannot load NCCL %s: %s", rt_nccl_library(), e);
    }
    return ncclTry(rt_nccl.ncclGetVersion(version), err, errlen);
}

/* Loads NCCL and checks that bes are n cuda backends on distinct devices
 * (devs[i]: bes[i]'s); -1 + message. */
static int nccl_ranks_ok(rt_backend *const *bes, int n, int *devs, char *err, size_t errlen) {
    int v = 0;
    if (n < 1) {
        return base_fail(err, errlen, "NCCL needs at least one rank (got %d)", n);
    }
    if (rt_nccl_version(&v, err, errlen)) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (!rt_backend_is_cuda(bes[i])) {
            base_fail(err, errlen, "NCCL rank %d is not on a cuda backend", i);
            rc = -1;
            break;
        }
        devs[i] = impl_of(bes[i])->ordinal;
        for (int j = 0; j < i; j++)
            if (devs[j] == devs[i]) {
                base_fail(err, errlen,
                          "NCCL ranks %d and %d share device %d: NCCL needs one rank per GPU "
                          "(reduce replicas of one device locally first)",
                          j, i, devs[i]);
                rc = -1;
            }
    }
    return rc;
}

static void wrap_comms(rt_backend *const *bes, int n, ncclComm_t *raw, rt_nccl_comm **comms) {
    for (int i = 0; i < n; i++) {
        comms[i] = calloc(1, sizeof **comms);
        RT_CHECK_ALLOC(comms[i]);
        comms[i]->be = bes[i];
        comms[i]->comm = raw[i];
    }
}

int rt_nccl_init_all(rt_backend *const *bes, int n, rt_nccl_comm **comms, char *err,
                     size_t errlen) {
    int *devs = calloc((size_t)(n > 0 ? n : 1), sizeof *devs);
    ncclComm_t *raw = calloc((size_t)(n > 0 ? n : 1), sizeof *raw);
    RT_CHECK_ALLOC(devs);
    RT_CHECK_ALLOC(raw);
    int rc = nccl_ranks_ok(bes, n, devs, err, errlen);
    if (!rc) rc = ncclTry(rt_nccl.ncclCommInitAll(raw, n, devs), err, errlen);
    if (!rc) wrap_comms(bes, n, raw, comms);
    free(devs);
    free(raw);
    return rc;
}

_Static_assert(sizeof(ncclUniqueId) == RT_NCCL_ID_BYTES, "RT_NCCL_ID_BYTES is NCCL's id size");

int rt_nccl_unique_id(void *id, char *err, size_t errlen) {
    int v = 0;
    if (rt_nccl_version(&v, err, errlen)) return -1;
    ncclUniqueId u;
    if (ncclTry(rt_nccl.ncclGetUniqueId(&u), err, errlen)) return -1;
    memcpy(id, &u, sizeof u);
    return 0;
}

int rt_nccl_init_ranks(rt_backend *const *bes, int n, const void *id, int first, int nranks,
                       rt_nccl_comm **comms, char *err, size_t errlen) {
    int *devs = calloc((size_t)(n > 0 ? n : 1), sizeof *devs);
    ncclComm_t *raw = calloc((size_t)(n > 0 ? n : 1), sizeof *raw);
    RT_CHECK_ALLOC(devs);
    RT_CHECK_ALLOC(raw);
    int rc = nccl_ranks_ok(bes, n, devs, err, errlen);
    if (!rc && (first < 0 || first + n > nranks)) {
        base_fail(err, errlen, "NCCL ranks %d..%d of %d", first, first + n - 1, nranks);
        rc = -1;
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    /* One thread inits several ranks: NCCL wants them in one group, each
     * with its device's context current. */
    int grouped = !rc && !ncclTry(rt_nccl.ncclGroupStart(), err, errlen);
    if (!rc && !grouped) rc = -1;
    for (int i = 0; i < n && !rc; i++) {
        rc = use(impl_of(bes[i]), err, errlen)
                 ? -1
                 : ncclTry(rt_nccl.ncclCommInitRank(&raw[i], nranks, u, first + i), err, errlen);
    }
    if (grouped && ncclTry(rt_nccl.ncclGroupEnd(), rc ? NULL : err, rc ? 0 : errlen)) rc = -1;
    if (!rc) wrap_comms(bes, n, raw, comms);
    free(devs);
    free(raw);
    return rc;
}

int rt_nccl_allreduce_sum(rt_nccl_comm *c, float *buf, size_t count, char *err, size_t errlen) {
    cuda_impl *ci = impl_of(c->be);
    if (use(ci, err, errlen)) return -1;
    /* The gradient is complete when the compute stream gets here: the
     * all-reduce waits for that point only, not for later backward work. */
    if (cuTry(rt_cu.cuEventRecord(ci->ev_compute, ci->compute), err, errlen) ||
        cuTry(rt_cu.cuStreamWaitEvent(ci->comm, ci->ev_compute, 0), err, errlen) ||
        ncclTry(rt_nccl.ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, c->comm, ci->comm), err,
                errlen) ||
        cuTry(rt_cu.cuEventRecord(ci->ev_comm, ci->comm), err, errlen))
        return -1;
    return 0;
}

int rt_nccl_join(rt_nccl_comm *c, char *err, size_t errlen) {
    cuda_impl *ci = impl_of(c->be);
    if (use(ci, err, errlen)) return -1;
    /* ev_comm was last recorded after the latest all-reduce; the comm stream
     * runs in order, so waiting for it waits for all of them. */
    return cuTry(rt_cu.cuStreamWaitEvent(ci->compute, ci->ev_comm, 0), err, errlen);
}

int rt_nccl_bucket_start(rt_nccl_comm *c, int id, const void *const *src, void *const *dst,
                         const int64_t *count, const int *owner, int n, char *err, size_t errlen) {
    cuda_impl *ci = impl_of(c->be);
    if (use(ci, err, errlen)) return -1;
    if (id < 0) {
        return base_fail(err, errlen, "NCCL bucket %d", id);
    }
    while (c->nbuckets <= id) {
        c->bucket_done =
            realloc(c->bucket_done, sizeof *c->bucket_done * (size_t)(c->nbuckets + 1));
        RT_CHECK_ALLOC(c->bucket_done);
        c->bucket_done[c->nbuckets] = NULL;
        if (cuTry(rt_cu.cuEventCreate(&c->bucket_done[c->nbuckets], CU_EVENT_DISABLE_TIMING), err,
                  errlen))
            return -1;
        c->nbuckets++;
    }
    /* The bucket's gradients are complete at this point of the compute
     * stream; the communication stream waits for it and nothing later. */
    if (cuTry(rt_cu.cuEventRecord(ci->ev_compute, ci->compute), err, errlen) ||
        cuTry(rt_cu.cuStreamWaitEvent(ci->comm, ci->ev_compute, 0), err, errlen) ||
        ncclTry(rt_nccl.ncclGroupStart(), err, errlen))
        return -1;
    /* One group: NCCL fuses the pieces into few kernels, no packing copies.
     * A piece with an owner is reduced to it alone: half an all-reduce's
     * traffic (ZeRO-1's reduce-scatter, at parameter granularity). */
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = owner && owner[i] >= 0
                 ? ncclTry(rt_nccl.ncclReduce(src[i], dst[i], (size_t)count[i], ncclFloat, ncclSum,
                                              owner[i], c->comm, ci->comm),
                           err, errlen)
                 : ncclTry(rt_nccl.ncclAllReduce(src[i], dst[i], (size_t)count[i], ncclFloat,
                                                 ncclSum, c->comm, ci->comm),
                           err, errlen);
    if (ncclTry(rt_nccl.ncclGroupEnd(), rc ? NULL : err, rc ? 0 : errlen)) rc = -1;
    if (rc || cuTry(rt_cu.cuEventRecord(c->bucket_done[id], ci->comm), err, errlen) ||
        cuTry(rt_cu.cuEventRecord(ci->ev_comm, ci->comm), err, errlen))
        return -1;
    return 0;
}

int rt_nccl_broadcast(rt_nccl_comm *c, void *buf, size_t bytes, int root, char *err,
                      size_t errlen) {
    cuda_impl *ci = impl_of(c->be);
    if (use(ci, err, errlen)) return -1;
    /* On the compute stream: behind the update that wrote buf on the root,
     * ahead of the next step that reads it everywhere. */
    return ncclTry(rt_nccl.ncclBroadcast(buf, buf, bytes, ncclInt8, root, c->comm, ci->compute),
                   err, errlen);
}

int rt_nccl_bucket_join(rt_nccl_comm *c, int id, char *err, size_t errlen) {
    cuda_impl *ci = impl_of(c->be);
    if (id < 0 || id >= c->nbuckets) {
        return base_fail(err, errlen, "NCCL bucket %d was never started", id);
    }
    if (use(ci, err, errlen)) return -1;
    /* Test only (test_cuda_fake's deferred_streams_catch_a_missing_event_wait):
     * the ordering bug the fake's deferred streams must show. */
    if (getenv("DPC_TEST_DROP_BUCKET_WAIT")) return 0;
    return cuTry(rt_cu.cuStreamWaitEvent(ci->compute, c->bucket_done[id], 0), err, errlen);
}

void rt_nccl_free(rt_nccl_comm *c) {
    if (!c) return;
    cuda_impl *ci = impl_of(c->be);
    use_anyway(ci);
    rt_cu.cuStreamSynchronize(ci->comm); /* no all-reduce of ours still queued */
    rt_nccl.ncclCommDestroy(c->comm);
    for (int i = 0; i < c->nbuckets; i++) rt_cu.cuEventDestroy(c->bucket_done[i]);
    free(c->bucket_done);
    free(c);
}

#endif

/* ---- the nccl collective ------------------------------------------------------ */

/* A context per NCCL rank: its communicator, on backend be, and 1.0f on
 * the device (y += x is the GEMM y = x * [1] + y). The stream kind (a rank
 * per replica) and the device kind (a rank per device, its first replica)
 * share it. */
typedef struct {
    rt_nccl_comm *comm;
    rt_backend *be;
    float *one;
} nccl_rank;

#define ADD_CHUNK ((int64_t)1 << 30) /* rows of one GEMM: within a BLAS int */

/* buf += others[k] for k in order: a GEMM with k = 1 on the compute stream
 * (cuBLAS; no kernel to compile), one exact float add per element, so the
 * order fixes the result. The device kind adds a device's replicas' buckets
 * with it, the stream kind a replica's accumulated micro-batches. */
static int rank_add(void *ctx, float *buf, const float *const *others, int nothers, int64_t count,
                    char *err, size_t errlen) {
    nccl_rank *d = ctx;
    for (int k = 0; k < nothers; k++)
        for (int64_t at = 0; at < count; at += ADD_CHUNK) {
            int64_t m = count - at < ADD_CHUNK ? count - at : ADD_CHUNK;
            cg_gemm g;
            memset(&g, 0, sizeof g);
            g.m = m, g.n = 1, g.k = 1;
            g.alpha = 1, g.beta = 1;
            g.lda = m, g.ldb = 1, g.ldc = m;
            g.batch = 1;
            if (rt_backend_gemm(d->be, &g, others[k] + at, d->one, buf + at, err, errlen))
                return -1;
        }
    return 0;
}

static void rank_free(void *ctx) {
    nccl_rank *d = ctx;
    if (!d) return;
    rt_backend_dealloc(d->be, d->one);
    rt_nccl_free(d->comm);
    free(d);
}

/* The stream kind: buckets on the rank's communication stream. */
static int nccl_start(void *ctx, int bucket, const void *const *src, void *const *dst,
                      const int64_t *count, const int *owner, int n, char *err, size_t errlen) {
    nccl_rank *d = ctx;
    return rt_nccl_bucket_start(d->comm, bucket, src, dst, count, owner, n, err, errlen);
}

static int nccl_join(void *ctx, int bucket, char *err, size_t errlen) {
    nccl_rank *d = ctx;
    return rt_nccl_bucket_join(d->comm, bucket, err, errlen);
}

static int nccl_bcast(void *ctx, void *buf, size_t bytes, int root, char *err, size_t errlen) {
    nccl_rank *d = ctx;
    return rt_nccl_broadcast(d->comm, buf, bytes, root, err, errlen);
}

/* The device kind: the devices' sums by NCCL on the communication stream,
 * then wait for it. */
static int device_nccl(void *ctx, float *buf, int64_t count, char *err, size_t errlen) {
    nccl_rank *d = ctx;
    if (rt_nccl_allreduce_sum(d->comm, buf, (size_t)count, err, errlen) ||
        rt_nccl_join(d->comm, err, errlen))
        return -1;
    return rt_backend_sync(d->be, err, errlen);
}

/* leader[r]: the first replica on r's device; the number of devices, or
 * -1 + message when a replica is not on the cuda backend. */
static int group_by_device(rt_backend *const *bes, int n, int *leader, char *err, size_t errlen) {
    int devices = 0;
    for (int r = 0; r < n; r++) {
        if (!rt_backend_is_cuda(bes[r])) {
            return base_fail(err, errlen,
                             "the nccl collective needs the cuda backend (replica %d is on %s)", r,
                             bes[r] ? bes[r]->name : "none");
        }
        leader[r] = r;
        for (int q = 0; q < r; q++)
            if (rt_cuda_device_ordinal(bes[q]) == rt_cuda_device_ordinal(bes[r])) {
                leader[r] = q;
                break;
            }
        devices += leader[r] == r;
    }
    return devices;
}

/* Across processes every step either succeeds on every rank or fails on
 * all (a rank left alone in ncclCommInitRank would wait forever): the
 * number of ranks that failed, summed over the ranks. */
static int ranks_failed(const rt_coll_ranks_ops *ops, int ranks, int failed) {
    if (ranks < 2) return failed;
    double f = failed ? 1 : 0;
    if (ops->sum_f64(&f, 1)) return 1;
    return f > 0;
}

/* The NCCL ranks of this process's devices (lb[0..d)): one process, or
 * rank * d .. rank * d + d - 1 of ranks * d with rank 0's id. */
static int init_comms(rt_backend *const *lb, int d, int rank, int ranks,
                      const rt_coll_ranks_ops *ops, rt_nccl_comm **comms, char *err,
                      size_t errlen) {
    if (ranks < 2) return rt_nccl_init_all(lb, d, comms, err, errlen);
    int v = 0;
    int bad = rt_nccl_version(&v, err, errlen) != 0;
    if (ranks_failed(ops, ranks, bad)) {
        if (!bad) base_fail(err, errlen, "NCCL cannot start on another process");
        return -1;
    }
    /* Byte 0: whether rank 0 made the id; then the id. */
    unsigned char msg[1 + RT_NCCL_ID_BYTES];
    memset(msg, 0, sizeof msg);
    if (rank == 0) msg[0] = rt_nccl_unique_id(msg + 1, err, errlen) == 0;
    if (ops->bcast(msg, (int64_t)sizeof msg)) {
        return base_fail(err, errlen, "broadcasting the NCCL id failed");
    }
    if (!msg[0]) {
        if (rank != 0) base_fail(err, errlen, "process 0 could not make the NCCL id");
        return -1;
    }
    bad = rt_nccl_init_ranks(lb, d, msg + 1, rank * d, ranks * d, comms, err, errlen) != 0;
    if (ranks_failed(ops, ranks, bad)) {
        if (!bad) {
            for (int i = 0; i < d; i++) rt_nccl_free(comms[i]);
            base_fail(err, errlen, "NCCL could not start on another process");
        }
        return -1;
    }
    return 0;
}

static rt_coll *nccl_new(int n, rt_backend *const *bes, int rank, int ranks,
                         const rt_coll_ranks_ops *ops, char *err, size_t errlen) {
    int *leader = calloc((size_t)n, sizeof *leader);
    RT_CHECK_ALLOC(leader);
    int d = group_by_device(bes, n, leader, err, errlen);
    if (ranks > 1 && ranks_failed(ops, ranks, d < 0)) {
        if (d >= 0) base_fail(err, errlen, "the nccl collective cannot start on another process");
        d = -1;
    }
    if (d < 0) {
        free(leader);
        return NULL;
    }
    if (ranks < 2 && d < 2) {
        snprintf(
            err, errlen,
            "the nccl collective needs replicas on at least 2 devices (all %d share device %d)", n,
            rt_cuda_device_ordinal(bes[0]));
        free(leader);
        return NULL;
    }
    rt_backend **lb = calloc((size_t)d, sizeof *lb);
    rt_nccl_comm **comms = calloc((size_t)d, sizeof *comms);
    RT_CHECK_ALLOC(lb && comms);
    for (int r = 0, i = 0; r < n; r++)
        if (leader[r] == r) lb[i++] = bes[r];
    rt_coll *c = NULL;
    if (!init_comms(lb, d, rank, ranks, ops, comms, err, errlen)) {
        void **ctx = calloc((size_t)n, sizeof *ctx);
        RT_CHECK_ALLOC(ctx);
        static const float one = 1.0f;
        for (int r = 0, i = 0; r < n; r++) {
            if (leader[r] != r) continue;
            nccl_rank *s = calloc(1, sizeof *s);
            RT_CHECK_ALLOC(s);
            s->comm = comms[i++];
            s->be = bes[r];
            /* A failure here is kept by the backend (device.h): the
             * first sum reports it. */
            s->one = rt_backend_alloc(s->be, sizeof one, NULL, 0);
            if (s->one) rt_backend_copy_in(s->be, s->one, &one, sizeof one, NULL, 0);
            ctx[r] = s;
        }
        if (d == n) {
            static const rt_coll_stream_ops sops = {nccl_start, nccl_join, nccl_bcast, rank_add,
                                                    rank_free};
            c = rt_coll_stream_new(RT_COLL_NCCL, n, bes, &sops, ctx);
        } else {
            static const rt_coll_device_ops dops = {rank_add, device_nccl, rank_free};
            c = rt_coll_device_new(RT_COLL_NCCL, n, bes, leader, &dops, ctx);
        }
        free(ctx);
        if (ranks > 1) rt_coll_set_ranks(c, rank, ranks, ops);
    }
    free(comms);
    free(lb);
    free(leader);
    return c;
}

rt_coll *rt_coll_nccl_new(int n, rt_backend *const *bes, char *err, size_t errlen) {
    if (n < 2) {
        base_fail(err, errlen, "the nccl collective joins at least 2 replicas (got %d)", n);
        return NULL;
    }
    return nccl_new(n, bes, 0, 1, NULL, err, errlen);
}

rt_coll *rt_coll_nccl_ranks_new(int n, rt_backend *const *bes, int rank, int ranks,
                                const rt_coll_ranks_ops *ops, char *err, size_t errlen) {
    if (n < 1 || ranks < 1 || rank < 0 || rank >= ranks || (ranks > 1 && !ops)) {
        base_fail(err, errlen, "the nccl collective: %d replicas on rank %d of %d", n, rank, ranks);
        return NULL;
    }
    if (ranks == 1) return rt_coll_nccl_new(n, bes, err, errlen);
    return nccl_new(n, bes, rank, ranks, ops, err, errlen);
}
