/* codegen/render.h — rendering a graph's kernel program: all of codegen
 * the runtime calls. dprun never runs source it did not render: it renders
 * each program from the plan's graph again and compares it with the plan's
 * (format/program.h: cg_program_diff). The compiler side (dialect tables,
 * GEMM lowering, listings) is codegen.h's.
 *
 * Usage:
 *     cg_options o = cg_default_options();
 *     cg_program *p = cg_generate(g, CG_DIALECT_C, &o, err, sizeof err);
 *     ...  // format/program.h: steps, calls, kernels
 *     cg_program_free(p);
 */
#ifndef DPC_CODEGEN_RENDER_H
#define DPC_CODEGEN_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include "format/program.h"
#include "ir/ir.h"

typedef struct {
    /* Upper bound of the scratch area used for im2col columns; convolutions
     * are chunked over images to stay under it (at least one image). */
    size_t scratch_max_bytes;
    /* Iterations times estimated work per iteration below which the C
     * dialect leaves a loop serial (waking the thread pool costs more). */
    int64_t parallel_threshold;
} cg_options;

cg_options cg_default_options(void);
/* Kernels and steps for every node of g. NULL + message on failure (an op
 * or dtype the dialect cannot render). o may be NULL for the defaults. */
cg_program *cg_generate(const ir_graph *g, cg_dialect d, const cg_options *o, char *err,
                        size_t errlen);

#endif
