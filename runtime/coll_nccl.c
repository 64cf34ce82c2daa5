/* runtime/coll_nccl.c — the nccl collective (collective.h): one NCCL rank
 * per replica, each on a cuda backend of its own device, its queue the
 * backend's communication stream (backend_cuda.h's rt_nccl_bucket_*).
 * Apart from collective.c so that the host collectives build and link
 * without the cuda backend (the ThreadSanitizer test compiles them alone). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/backend_cuda.h"
#include "runtime/check.h"
#include "runtime/collective.h"

static int nccl_start(void *ctx, int bucket, const void *const *src, void *const *dst,
                      const int64_t *count, int n, char *err, size_t errlen) {
    return rt_nccl_bucket_start(ctx, bucket, src, dst, count, n, err, errlen);
}

static int nccl_join(void *ctx, int bucket, char *err, size_t errlen) {
    return rt_nccl_bucket_join(ctx, bucket, err, errlen);
}

static void nccl_free(void *ctx) { rt_nccl_free(ctx); }

rt_coll *rt_coll_nccl_new(int n, rt_backend *const *bes, char *err, size_t errlen) {
    if (n < 2) {
        snprintf(err, errlen, "the nccl collective joins at least 2 replicas (got %d)", n);
        return NULL;
    }
    rt_nccl_comm **comms = calloc((size_t)n, sizeof *comms);
    RT_CHECK_ALLOC(comms);
    if (rt_nccl_init_all(bes, n, comms, err, errlen)) {
        free(comms);
        return NULL;
    }
    static const rt_coll_stream_ops ops = {nccl_start, nccl_join, nccl_free};
    rt_coll *c = rt_coll_stream_new(RT_COLL_NCCL, n, bes, &ops, (void *const *)comms);
    free(comms);
    return c;
}
