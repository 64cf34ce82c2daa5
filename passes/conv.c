/* passes/conv.c — which convolutions run as library calls (--conv).
 *
 *   im2col   none: every convolution is im2col + GEMM (codegen/gemm.c), or
 *            direct kernels when grouped (codegen/conv_direct.c);
 *   dense    no library; a convolution on planes so small that every input
 *            pixel meets every output pixel (ir_conv_dense_ok: the last
 *            stages of a CIFAR ResNet, at 2x2 and 1x1) is marked
 *            IR_FLAG_CONV_DENSE: one GEMM over its unrolled weights, which
 *            multiplies no padding and copies no columns (codegen/gemm.c);
 *   library  every one the library takes (ir_conv_library_ok: f32 or
 *            bf16, NCHW, any groups; TF32 too, which cuDNN runs on tensor
 *            cores and the cpu as its alternative) is marked
 *            IR_FLAG_CONV_LIB: codegen emits the library call with dpc's
 *            own lowering (as dense would make it) after it as its
 *            alternative, and the backend runs the library;
 *   auto     the same marks plus IR_FLAG_CONV_TUNE: the backend times both
 *            on first use and runs the faster (runtime/device/onednn.c).
 *
 * Runs after precision and layout, whose choices (bf16, TF32, CNHW) decide
 * what a library may take; the ops themselves are unchanged, so autodiff,
 * memory planning and fusion see the same nodes either way.
 */
#include "passes/passes.h"

int pass_conv(ir_graph **gp, pass_conv_kind k, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    ir_graph *g = *gp;
    if (k == PASS_CONV_IM2COL) return 0;
    for (int i = 0; i < g->n; i++) {
        if (ir_conv_dense_ok(g, i)) g->nodes[i].flags |= IR_FLAG_CONV_DENSE;
        if (k != PASS_CONV_DENSE && ir_conv_library_ok(g, i))
            g->nodes[i].flags |= IR_FLAG_CONV_LIB | (k == PASS_CONV_AUTO ? IR_FLAG_CONV_TUNE : 0);
    }
    return 0;
}
