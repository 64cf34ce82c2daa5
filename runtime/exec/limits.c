/* runtime/exec/limits.c — the load-time memory check (declared in exec.h). */
#include "runtime/exec/exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/bytes.h"
#include "base/parse.h"
#include "format/memplan.h"
#include "runtime/host.h"

/* g's memory plan from the plan file, NULL when it has none. */
static int find_memplan(const dpc_plan *plan, const ir_graph *g, fmt_memplan **out, char *err,
                        size_t errlen) {
    *out = NULL;
    const plan_section *sec = plan_find_section(plan, FMT_MEMPLAN_SECTION);
    if (!sec) return 0;
    char why[400];
    if (fmt_memplan_section_find(sec->data, sec->len, g, out, why, sizeof why) < 0) {
        return base_fail(err, errlen, "the plan's memory plan is unusable: %s", why);
    }
    return 0;
}

int rt_memory_need(const dpc_plan *plan, fmt_memory *need, char *err, size_t errlen) {
    fmt_memplan *mt = NULL, *me = NULL;
    if (find_memplan(plan, plan->train, &mt, err, errlen) ||
        find_memplan(plan, plan->eval, &me, err, errlen)) {
        fmt_memplan_free(mt);
        return -1;
    }
    fmt_memory_need(plan->train, mt, plan->eval, me, need);
    fmt_memplan_free(mt);
    fmt_memplan_free(me);
    return 0;
}

int64_t rt_memory_accumulate(const dpc_plan *plan, int accum) {
    int64_t floats = 0;
    for (int i = 0; accum > 1 && plan->train && i < plan->train->n; i++)
        if (plan->train->nodes[i].op == IR_OP_ALLREDUCE)
            floats = base_bytes_add(floats, ir_numel(&plan->train->nodes[i].type));
    return base_bytes_mul(base_bytes_mul(floats, accum), (int64_t)sizeof(float));
}

int rt_memory_check(const dpc_plan *plan, const rt_backend *be, int replicas, int accum,
                    int64_t input_bytes, char *err, size_t errlen) {
    const char *env = getenv("DPC_MAX_MEMORY");
    int64_t limit;
    const char *whose;
    if (env && *env) {
        limit = base_parse_size(env);
        whose = "DPC_MAX_MEMORY";
        if (limit < 0) {
            return base_fail(err, errlen,
                             "DPC_MAX_MEMORY needs a size such as 16G or 512M, got '%.100s'", env);
        }
    } else if (be->memory_bytes > 0) {
        limit = be->memory_bytes, whose = "the device's memory; set DPC_MAX_MEMORY to change it";
    } else {
        limit = rt_host_memory(), whose = "the host's memory; set DPC_MAX_MEMORY to change it";
        if (limit <= 0) return 0; /* nothing to compare with */
    }
    fmt_memory need;
    if (rt_memory_need(plan, &need, err, errlen)) return -1;
    int64_t each = base_bytes_add(fmt_memory_total(&need), rt_memory_accumulate(plan, accum));
    int64_t total = base_bytes_add(base_bytes_mul(each, replicas), input_bytes);
    if (total <= limit) return 0;
    char what[460], t[32], e[32], in[32], lim[32], acc[32];
    fmt_memory_describe(&need, what, sizeof what);
    if (accum > 1) {
        size_t used = strlen(what);
        snprintf(what + used, sizeof what - used, ", --accumulate %d gradients %s", accum,
                 base_bytes_str(rt_memory_accumulate(plan, accum), acc, sizeof acc));
    }
    return base_fail(
        err, errlen,
        "the plan of %s needs %s on the %s backend: %d replica%s x %s (%s) + input "
        "batches %s; the limit is %s (%s)",
        plan->source[0] ? plan->source : plan->model, base_bytes_str(total, t, sizeof t), be->name,
        replicas, replicas == 1 ? "" : "s", base_bytes_str(each, e, sizeof e), what,
        base_bytes_str(input_bytes, in, sizeof in), base_bytes_str(limit, lim, sizeof lim), whose);
}
