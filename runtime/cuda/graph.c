/* runtime/cuda/graph.c — CUDA graphs of the cuda backend: the compute
 * stream captured between begin and end, instantiated, replayed (cuda.h). */
#ifdef DPC_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>

#include "runtime/check.h"
#include "runtime/cuda/internal.h"

static int need_cuda(const rt_backend *be, char *err, size_t errlen) {
    if (rt_backend_is_cuda(be)) return 0;
    return base_fail(err, errlen, "CUDA graphs need the cuda backend (this is %s)",
                     be ? be->name : "none");
}

int rt_cuda_graph_begin(rt_backend *be, char *err, size_t errlen) {
    if (need_cuda(be, err, errlen)) return -1;
    cuda_impl *c = impl_of(be);
    if (c->capturing) {
        return base_fail(err, errlen, "a CUDA graph is already being captured");
    }
    if (use(c, err, errlen)) return -1;
    /* Thread-local: only this thread's unsafe calls (a synchronous copy,
     * say) would break the capture; replicas on other threads may go on. */
    if (cuTry(rt_cu.cuStreamBeginCapture(c->compute, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), err,
              errlen))
        return -1;
    c->capturing = 1;
    return 0;
}

rt_cuda_graph *rt_cuda_graph_end(rt_backend *be, char *err, size_t errlen) {
    if (need_cuda(be, err, errlen)) return NULL;
    cuda_impl *c = impl_of(be);
    if (!c->capturing) {
        base_fail(err, errlen, "no CUDA graph is being captured");
        return NULL;
    }
    use_anyway(c); /* the capture ends whatever happened */
    rt_cuda_graph *g = calloc(1, sizeof *g);
    RT_CHECK_ALLOC(g);
    CUresult r = rt_cu.cuStreamEndCapture(c->compute, &g->graph);
    c->capturing = 0;
    if (cuTry(r, err, errlen) ||
        cuTry(rt_cu.cuGraphGetNodes(g->graph, NULL, &g->nodes), err, errlen) ||
        cuTry(rt_cu.cuGraphInstantiate(&g->exec, g->graph, 0), err, errlen)) {
        rt_cuda_graph_free(be, g);
        return NULL;
    }
    return g;
}

int rt_cuda_graph_launch(rt_backend *be, rt_cuda_graph *g, char *err, size_t errlen) {
    if (need_cuda(be, err, errlen)) return -1;
    cuda_impl *c = impl_of(be);
    if (use(c, err, errlen)) return -1;
    CUresult r = rt_cu.cuGraphLaunch(g->exec, c->compute);
    if (r != CUDA_SUCCESS) return cuda_failure(c, r, "cuGraphLaunch", err, errlen);
    c->stats.graph_launches++;
    return 0;
}

void rt_cuda_graph_free(rt_backend *be, rt_cuda_graph *g) {
    if (!g) return;
    if (rt_backend_is_cuda(be)) {
        cuda_impl *c = impl_of(be);
        use_anyway(c);
        /* not while it runs; a failure now is marked (teardown goes on) */
        if (!c->failed && rt_cu.cuStreamSynchronize(c->compute) != CUDA_SUCCESS) c->failed = 1;
    }
    if (g->exec) rt_cu.cuGraphExecDestroy(g->exec);
    if (g->graph) rt_cu.cuGraphDestroy(g->graph);
    free(g);
}

int rt_cuda_graph_nodes(const rt_cuda_graph *g) { return g ? (int)g->nodes : 0; }

/* The backend table's graph hooks: the same graphs under device.h's names. */
rt_graph *cuda_graph_end(rt_backend *be, char *err, size_t errlen) {
    return (rt_graph *)rt_cuda_graph_end(be, err, errlen);
}
int cuda_graph_launch(rt_backend *be, rt_graph *g, char *err, size_t errlen) {
    return rt_cuda_graph_launch(be, (rt_cuda_graph *)g, err, errlen);
}
void cuda_graph_free(rt_backend *be, rt_graph *g) { rt_cuda_graph_free(be, (rt_cuda_graph *)g); }

#endif
