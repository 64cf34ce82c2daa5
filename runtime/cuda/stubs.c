/* runtime/cuda/stubs.c — cuda.h in a build without the cuda backend (CUDA=0):
 * nothing opens, every call that could fail says why, the queries answer
 * "not cuda". (rt_cublas_sgemm_args is real in every build: cublas.c.) */
#ifndef DPC_HAVE_CUDA

#include <stdio.h>

#include "runtime/cuda/cuda.h"
#include "base/err.h"

#define NO_CUDA "this build has no CUDA backend (built with CUDA=0)"

/* Every failing stub: the message, -1. */
static int no_cuda(char *err, size_t errlen) { return base_fail(err, errlen, NO_CUDA); }

int rt_cuda_compiled(void) { return 0; }

int rt_cuda_info(FILE *out) {
    fprintf(out, "%s\n", NO_CUDA);
    return 1;
}

int rt_cuda_device_count(char *why, size_t whylen) {
    no_cuda(why, whylen);
    return 0;
}

int rt_cuda_device_probe(char *why, size_t whylen) {
    no_cuda(why, whylen);
    return 0;
}

rt_backend *rt_backend_cuda(int ordinal, char *err, size_t errlen) {
    (void)ordinal;
    no_cuda(err, errlen);
    return NULL;
}

int rt_backend_is_cuda(const rt_backend *be) {
    (void)be;
    return 0;
}

int rt_cuda_graph_begin(rt_backend *be, char *err, size_t errlen) {
    (void)be;
    return no_cuda(err, errlen);
}

rt_cuda_graph *rt_cuda_graph_end(rt_backend *be, char *err, size_t errlen) {
    (void)be;
    no_cuda(err, errlen);
    return NULL;
}

int rt_cuda_graph_launch(rt_backend *be, rt_cuda_graph *g, char *err, size_t errlen) {
    (void)be, (void)g;
    return no_cuda(err, errlen);
}

void rt_cuda_graph_free(rt_backend *be, rt_cuda_graph *g) { (void)be, (void)g; }

int rt_cuda_graph_nodes(const rt_cuda_graph *g) {
    (void)g;
    return 0;
}

int rt_cuda_stats_get(const rt_backend *be, rt_cuda_stats *s) {
    (void)be, (void)s;
    return -1;
}

const char *rt_cuda_device_name(const rt_backend *be) {
    (void)be;
    return "";
}

int rt_cuda_device_ordinal(const rt_backend *be) {
    (void)be;
    return -1;
}

int rt_nccl_version(int *version, char *err, size_t errlen) {
    *version = 0;
    return no_cuda(err, errlen);
}

int rt_nccl_init_all(rt_backend *const *bes, int n, rt_nccl_comm **comms, char *err,
                     size_t errlen) {
    (void)bes, (void)n, (void)comms;
    return no_cuda(err, errlen);
}

int rt_nccl_unique_id(void *id, char *err, size_t errlen) {
    (void)id;
    return no_cuda(err, errlen);
}

int rt_nccl_init_ranks(rt_backend *const *bes, int n, const void *id, int first, int nranks,
                       rt_nccl_comm **comms, char *err, size_t errlen) {
    (void)bes, (void)n, (void)id, (void)first, (void)nranks, (void)comms;
    return no_cuda(err, errlen);
}

int rt_nccl_allreduce_sum(rt_nccl_comm *c, float *buf, size_t count, char *err, size_t errlen) {
    (void)c, (void)buf, (void)count;
    return no_cuda(err, errlen);
}

int rt_nccl_join(rt_nccl_comm *c, char *err, size_t errlen) {
    (void)c;
    return no_cuda(err, errlen);
}

int rt_nccl_bucket_start(rt_nccl_comm *c, int id, const void *const *src, void *const *dst,
                         const int64_t *count, const int *owner, int n, char *err, size_t errlen) {
    (void)c, (void)id, (void)src, (void)dst, (void)count, (void)owner, (void)n;
    return no_cuda(err, errlen);
}

int rt_nccl_broadcast(rt_nccl_comm *c, void *buf, size_t bytes, int root, char *err,
                      size_t errlen) {
    (void)c, (void)buf, (void)bytes, (void)root;
    return no_cuda(err, errlen);
}

int rt_nccl_bucket_join(rt_nccl_comm *c, int id, char *err, size_t errlen) {
    (void)c, (void)id;
    return no_cuda(err, errlen);
}

void rt_nccl_free(rt_nccl_comm *c) { (void)c; }

#endif
