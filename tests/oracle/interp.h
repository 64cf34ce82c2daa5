/* tests/oracle/interp.h — the reference interpreter: every op, naive loops,
 * double precision. It is the oracle the generated kernels, the passes and
 * finite-difference gradient checks are tested against; never fast, and
 * never shipped: it is built into $(BUILD)/liboracle.a, which only the
 * unit tests and the parity tools link.
 *
 * Usage:
 *     #include "tests/oracle/interp.h"
 *     oracle_interp *it = oracle_interp_new(g);            // a buffer per node
 *     double *x = oracle_interp_buffer(it, image_node);    // fill inputs, params, states
 *     ...                                                  // labels: class index as double
 *     oracle_interp_run(it);                               // every non-source node in order
 *     double *loss = oracle_interp_buffer(it, loss_node);
 *     oracle_interp_free(it);
 *
 * `assign` copies its value into the target's buffer, so after a run the
 * buffers of params and states hold their updated values, as on a device.
 */
#ifndef DPC_TESTS_ORACLE_INTERP_H
#define DPC_TESTS_ORACLE_INTERP_H

#include "ir/ir.h"

typedef struct oracle_interp oracle_interp;

oracle_interp *oracle_interp_new(const ir_graph *g);
void oracle_interp_free(oracle_interp *it);
double *oracle_interp_buffer(oracle_interp *it, int node); /* ir_numel(type) doubles */
void oracle_interp_run(oracle_interp *it);

#endif
