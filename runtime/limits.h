/* runtime/limits.h — refuse a plan that cannot fit, before allocating it.
 *
 * dprun adds up what a run will allocate (passes.h's pass_memory: the
 * store, each program's arena and buffers, from the plan's memory plans)
 * for every replica of this process, plus the input pipeline's batches,
 * and refuses a plan that needs more than the limit with one message
 * naming both, instead of failing an allocation deep in the run. The
 * limit is $DPC_MAX_MEMORY when set, else the device's memory (cuda) or
 * the host's physical memory (cpu).
 *
 * Usage:
 *     if (rt_memory_check(plan, be, replicas, input_bytes, err, sizeof err))
 *         fprintf(stderr, "dprun: error: %s\n", err);
 */
#ifndef DPC_RT_LIMITS_H
#define DPC_RT_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "ir/plan.h"
#include "runtime/backend.h"

/* The host's physical memory in bytes (0 when the system does not say). */
int64_t rt_host_memory(void);

/* 0 when `replicas` copies of the plan's programs and store, plus
 * input_bytes of host batches, fit the limit; -1 with a message otherwise
 * (also for a malformed DPC_MAX_MEMORY or memory plan). */
int rt_memory_check(const dpc_plan *plan, const rt_backend *be, int replicas, int64_t input_bytes,
                    char *err, size_t errlen);

#endif
