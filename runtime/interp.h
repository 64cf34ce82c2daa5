/* runtime/interp.h — the reference interpreter: every op, naive loops,
 * double precision. It is the oracle the generated kernels, the passes and
 * finite-difference gradient checks are tested against; never fast.
 *
 * Usage:
 *     rt_interp *it = rt_interp_new(g);            // a buffer per node
 *     double *x = rt_interp_buffer(it, image_node); // fill inputs, params, states
 *     ...                                           // labels: class index as double
 *     rt_interp_run(it);                            // every non-source node in order
 *     double *loss = rt_interp_buffer(it, loss_node);
 *     rt_interp_free(it);
 *
 * `assign` copies its value into the target's buffer, so after a run the
 * buffers of params and states hold their updated values, as on a device.
 */
#ifndef DPC_RT_INTERP_H
#define DPC_RT_INTERP_H

#include "ir/ir.h"

typedef struct rt_interp rt_interp;

rt_interp *rt_interp_new(const ir_graph *g);
void rt_interp_free(rt_interp *it);
double *rt_interp_buffer(rt_interp *it, int node); /* ir_numel(type) doubles */
void rt_interp_run(rt_interp *it);

#endif
