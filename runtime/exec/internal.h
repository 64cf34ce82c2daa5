/* runtime/exec/internal.h — the executor's state, shared by exec.c (binding
 * a program), run.c (running it) and buckets.c (the data-parallel
 * collective and ZeRO-1 sharding attached to it). Not a public header:
 * exec.h is. */
#ifndef DPC_RT_EXEC_INTERNAL_H
#define DPC_RT_EXEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "format/graph.h"
#include "ir/ir.h"
#include "runtime/device/device.h"
#include "runtime/exec/exec.h"

struct rt_exec {
    rt_backend *be;
    rt_store *st;
    ir_graph *g; /* our copy: the caller's graph may go away */
    cg_program *prog;
    rt_module *mod;
    rt_kernel **kern; /* by kernel index */
    void **buf;       /* device buffer of every node, NULL when it has none */
    unsigned char *owned;
    void *scratch;
    void *arena; /* every planned activation, at its offset */
    int64_t arena_bytes;
    double *prof;     /* DPC_PROFILE: seconds per call, summed over runs */
    double *prof_cpu; /* the calling thread's CPU seconds per call */
    int runs;
    int sync_each; /* DPC_SYNC=1 or DPC_PROFILE=1: synchronise after every call */
    /* Data parallelism: with a communication queue attached, bucket b
     * starts after step start_at[b] (its last allreduce node) and is waited
     * for before step wait_at[b] (the first reader of one of its sums), or
     * at the end of the run. */
    rt_coll_queue *coll;
    int nbuckets;
    int *start_at, *wait_at;
    /* Gradient accumulation (rt_exec_run_partial): after_sum[s] is 1 when
     * step s reads an all-reduced sum, directly or through earlier steps
     * (the update); a partial run skips those and the all-reduces. */
    unsigned char *after_sum;
    int partial;
    unsigned char *skip; /* ZeRO-1: per step, another replica's update (shard.c) */
    /* CUDA graphs (rt_exec_use_graphs): the segments of the step between
     * host actions, recorded by the second run and replayed after. */
    int graphs;
    rt_graph **seg;
    int nseg, seg_cap;
    int captured;                            /* seg holds every segment of the step */
    int seg_is_open;                         /* a segment is being recorded or was launched */
    int64_t last_calls, last_graph_launches; /* of the latest run */
};

/* DPC_PROFILE=1's table, on stderr (run.c; rt_exec_free calls it). */
void rt_exec_print_profile(const rt_exec *ex);

#endif
