/* runtime/runtime.h — the runtime in one include: backends, parameter
 * store and executor, the random generator. (The reference interpreter is
 * the tests' oracle: tests/oracle/interp.h.)
 *
 * Usage:
 *     #include "runtime/runtime.h"
 *     rt_backend *be = rt_backend_cpu();
 *     rt_store *st = rt_store_new(be, g);
 *     rt_store_init(st, g, &schedule, seed);
 *     rt_exec *ex = rt_exec_new(be, st, g, plan, err, sizeof err);
 *     ... rt_exec_set_input / rt_exec_run / rt_exec_get ...
 *     rt_exec_free(ex); rt_store_free(st); rt_backend_free(be);
 */
#ifndef DPC_RUNTIME_H
#define DPC_RUNTIME_H

#include "runtime/device/device.h"
#include "runtime/exec/exec.h"
#include "runtime/data/data.h"

#endif
