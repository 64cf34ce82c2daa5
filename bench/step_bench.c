/* bench/step_bench.c — time training steps of a plan on the cpu backend,
 * nothing else: no data pipeline, no logging, fixed random inputs. Used by
 * bench/fusion.sh to compare plans (fused or not, planned or not) with the
 * same input cost (none).
 *
 * usage: step_bench PLAN [STEPS] [REPEATS]
 * One warm-up step, then REPEATS timings of STEPS steps each; prints each
 * timing (wall, and CPU time of all threads) and, last, `step_ms: MIN MEDIAN MAX` and `throughput: X img/s`
 * (from the median). With DPC_PROFILE=1 the executor's profile follows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/plan.h"
#include "runtime/clock.h"
#include "runtime/device/device.h"
#include "runtime/runtime.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    rt_blas_core_reexec(argv);
    if (argc < 2) {
        fprintf(stderr, "usage: step_bench PLAN [STEPS] [REPEATS]\n");
        return 2;
    }
    int steps = argc > 2 ? atoi(argv[2]) : 5, reps = argc > 3 ? atoi(argv[3]) : 3;
    if (steps < 1) steps = 1;
    if (reps < 1 || reps > 64) reps = 3;
    char err[1024];
    dpc_plan *plan = plan_read(argv[1], err, sizeof err);
    if (!plan) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const ir_graph *g = plan->train;
    rt_backend *be = rt_backend_cpu();
    rt_store *st = rt_store_new(be, g);
    rt_store_init(st, g, &plan->schedule, 1);
    rt_exec *ex = rt_exec_new(be, st, g, plan, err, sizeof err);
    if (!ex) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    rt_rng rng;
    rt_rng_seed(&rng, 2);
    int64_t batch = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_INPUT || ir_numel(&n->type) == 1) continue;
        int64_t cnt = ir_numel(&n->type);
        if (!batch) batch = n->type.dim[0];
        float *buf = malloc(sizeof(float) * (size_t)cnt);
        for (int64_t j = 0; j < cnt; j++) {
            if (n->type.dtype == IR_I32)
                ((int32_t *)buf)[j] =
                    (int32_t)rt_rng_below(&rng, (uint64_t)(n->iattr[0] ? n->iattr[0] : 10));
            else
                buf[j] = rt_rng_uniform_range(&rng, -1.0f, 1.0f);
        }
        rt_exec_set_input(ex, n->name, buf, sizeof(float) * (size_t)cnt);
        free(buf);
    }
    rt_exec_set_scalar(ex, "lr", 0.01f);
    rt_exec_set_scalar(ex, "grad_scale", 1.0f / (float)(batch ? batch : 1));
    if (rt_exec_run(ex, err, sizeof err)) { /* warm-up: page in the arena, caches */
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double t[64];
    for (int r = 0; r < reps; r++) {
        double t0 = rt_now(), c0 = rt_clock_s(CLOCK_PROCESS_CPUTIME_ID);
        for (int s = 0; s < steps; s++)
            if (rt_exec_run(ex, err, sizeof err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
        t[r] = (rt_now() - t0) / steps;
        /* CPU time of all threads: with one thread, the work itself, which
         * other processes on a shared machine inflate far less than wall time */
        printf("repeat %d: %.1f ms per step, %.1f ms cpu\n", r, 1e3 * t[r],
               1e3 * (rt_clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / steps);
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    printf("step_ms: %.1f %.1f %.1f\n", 1e3 * t[0], 1e3 * t[reps / 2], 1e3 * t[reps - 1]);
    printf("throughput: %.1f img/s\n", (double)batch / t[reps / 2]);
    fflush(stdout);
    rt_exec_free(ex);
    rt_store_free(st);
    rt_backend_free(be);
    plan_free(plan);
    return 0;
}
