/* format/program_check.c — a kernel program against its graph, and two
 * programs against each other. cg_program_check is what makes a program
 * read from a plan safe to run: every step names nodes of the graph, and
 * every call stays inside the buffers it is given (a GEMM's or a library
 * convolution's descriptor validated against the sizes, a kernel's count
 * and offsets against its output). cg_program_diff names the first
 * difference between the program a plan holds and the one rendered again. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/program.h"
#include "base/err.h"

int64_t cg_slot_size(const cg_program *p, const ir_graph *g, const cg_step *s, int slot) {
    if (slot < 0 || slot >= s->nbuf) return -1;
    int id = s->buf[slot];
    if (id == CG_SCRATCH) return p->scratch;
    if (id < 0 || id >= g->n) return -1;
    return ir_numel(&g->nodes[id].type);
}

/* Call c (a GEMM) of step i, its buffers size[] elements long. */
static int check_gemm_call(const ir_graph *g, const cg_step *s, int i, int c, const cg_call *call,
                           int64_t *size, char *err, size_t errlen) {
    char why[160];
    /* A GEMM reads a node in the node's own element type, and
     * the scratch area (floats) holds twice as many bf16. */
    const int type[3] = {call->gemm.type_a, call->gemm.type_b, call->gemm.type_c};
    for (int j = 0; j < call->nargs && j < 3; j++) {
        int id = s->buf[call->arg[j]];
        if (id == CG_SCRATCH) {
            if (type[j] == IR_BF16) size[j] *= 2;
        } else if ((int)g->nodes[id].type.dtype != type[j]) {
            return base_fail(
                err, errlen,
                "kernel program: step %d call %d: gemm operand %c is %s, node %d is not", i, c,
                "ABC"[j], type[j] == IR_BF16 ? "bf16" : "f32", id);
        }
    }
    if (call->nargs != 3 ||
        cg_gemm_validate(&call->gemm, size[0], size[1], size[2], why, sizeof why)) {
        return base_fail(err, errlen, "kernel program: step %d (%s) call %d: %s", i,
                         ir_ops[s->op].name, c, call->nargs != 3 ? "gemm arity" : why);
    }
    return 0;
}

/* Call c (a library convolution) of step i, its buffers size[] elements long. */
static int check_conv_call(const ir_graph *g, const cg_step *s, int i, int c, const cg_call *call,
                           int64_t *size, char *err, size_t errlen) {
    char why[160] = "";
    int type[3];
    cg_conv_types(&call->conv, type);
    int64_t want[3];
    cg_conv_sizes(&call->conv, want);
    for (int j = 0; j < 3 && j < call->nargs; j++) {
        int id = s->buf[call->arg[j]];
        /* the weights' bf16 copy in the scratch (codegen/gemm.c) */
        int copy = id == CG_SCRATCH && j == 2 && type[j] == IR_BF16 &&
                   call->conv.dir != CG_CONV_BACKWARD_WEIGHTS;
        if (copy && call->off[2] >= 0 && call->off[2] <= size[2] &&
            (want[2] + 1) / 2 <= size[2] - call->off[2]) {
            size[2] = want[2];
            continue;
        }
        if (id == CG_SCRATCH || (int)g->nodes[id].type.dtype != type[j])
            return base_fail(err, errlen,
                             "kernel program: step %d call %d: conv operand %d is not "
                             "a node of the descriptor's type, nor the weights' copy "
                             "within the scratch",
                             i, c, j);
    }
    if (call->nargs != 3 || call->off[0] || call->off[1] ||
        (call->off[2] && s->buf[call->arg[2]] != CG_SCRATCH) ||
        cg_conv_validate(&call->conv, size, why, sizeof why))
        return base_fail(err, errlen, "kernel program: step %d (%s) call %d: %s", i,
                         ir_ops[s->op].name, c,
                         call->nargs != 3 ? "conv arity"
                         : why[0]         ? why
                                          : "conv offsets");
    return 0;
}

/* Call c (a kernel) of step i, its buffers size[] elements long. */
static int check_kernel_call(const cg_program *p, const cg_step *s, int i, int c,
                             const cg_call *call, const int64_t *size, char *err, size_t errlen) {
    if (call->kernel < 0 || call->kernel >= p->nkernels ||
        call->nargs != p->kernels[call->kernel].nargs) {
        return base_fail(err, errlen, "kernel program: step %d call %d: bad kernel", i, c);
    }
    /* Every kernel writes at least one element of arg 0 per
     * iteration (a bf16 kernel's scratch holds two per float):
     * the count never runs past its output. The rest of a
     * kernel's bounds is its body's, rendered from the graph. */
    int64_t room = call->nargs < 1 ? -1 : size[0] - call->off[0];
    if (call->nargs >= 1 && s->buf[call->arg[0]] == CG_SCRATCH) room += size[0];
    if (call->count < 0 || call->count > room) {
        return base_fail(err, errlen,
                         "kernel program: step %d call %d (%s): count %" PRId64
                         " is beyond its output (%" PRId64 " elements)",
                         i, c, p->kernels[call->kernel].name, call->count, room);
    }
    for (int j = 0; j < call->nargs; j++)
        if (call->off[j] < 0 || call->off[j] >= size[j]) {
            return base_fail(err, errlen,
                             "kernel program: step %d call %d: offset %" PRId64
                             " outside its buffer",
                             i, c, call->off[j]);
        }
    return 0;
}

/* Step i: its node and buffers in the graph, then each of its calls. */
static int check_step(const cg_program *p, const ir_graph *g, int i, char *err, size_t errlen) {
    const cg_step *s = &p->steps[i];
    if (s->node < 0 || s->node >= g->n || s->op != (int)g->nodes[s->node].op ||
        s->buf[0] != s->node || s->alias >= s->node || s->alias < -1 ||
        (int64_t)s->first_call + s->ncalls > p->ncalls || s->scratch > p->scratch) {
        return base_fail(err, errlen, "kernel program: step %d does not fit the graph", i);
    }
    for (int j = 0; j < s->nbuf; j++)
        if (s->buf[j] != CG_SCRATCH && (s->buf[j] < 0 || s->buf[j] >= g->n)) {
            return base_fail(err, errlen, "kernel program: step %d names node %d", i, s->buf[j]);
        }
    for (int c = s->first_call; c < s->first_call + s->ncalls; c++) {
        const cg_call *call = &p->calls[c];
        int64_t size[CG_MAX_ARGS];
        for (int j = 0; j < call->nargs; j++) {
            size[j] = cg_slot_size(p, g, s, call->arg[j]);
            if (size[j] < 0) {
                return base_fail(err, errlen, "kernel program: step %d call %d: bad slot", i, c);
            }
        }
        int rc = call->kind == CG_CALL_GEMM ? check_gemm_call(g, s, i, c, call, size, err, errlen)
                 : call->kind == CG_CALL_CONV
                     ? check_conv_call(g, s, i, c, call, size, err, errlen)
                     : check_kernel_call(p, s, i, c, call, size, err, errlen);
        if (rc) return -1;
    }
    return 0;
}

int cg_program_check(const cg_program *p, const ir_graph *g, char *err, size_t errlen) {
    if (p->graph_hash != cg_graph_hash(g)) {
        return base_fail(err, errlen, "kernel program was made for another graph");
    }
    for (int i = 0; i < p->nsteps; i++)
        if (check_step(p, g, i, err, errlen)) return -1;
    return 0;
}

/* Kernel k's text (prelude for k < 0: everything before the first kernel). */
static int kernel_text(const cg_program *p, int k, const char **at, size_t *len) {
    size_t off = 0, n = 0;
    if (k < 0) {
        *at = p->source ? p->source : "";
        *len = p->nkernels && !cg_kernel_source(p, 0, &off, &n) ? off : p->source_len;
        return 0;
    }
    if (cg_kernel_source(p, k, &off, &n)) return -1;
    *at = p->source + off;
    *len = n;
    return 0;
}

static int same_text(const cg_program *a, int ka, const cg_program *b, int kb) {
    const char *x, *y;
    size_t nx, ny;
    if (kernel_text(a, ka, &x, &nx) || kernel_text(b, kb, &y, &ny)) return 0;
    return nx == ny && !memcmp(x, y, nx);
}

int cg_program_diff(const cg_program *have, const cg_program *want, char *what, size_t n) {
    unsigned char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    if (cg_program_serialize(have, &x, &nx) || cg_program_serialize(want, &y, &ny)) {
        free(x);
        free(y);
        snprintf(what, n, "cannot serialise the kernel program");
        return 1;
    }
    int same = nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    if (same) return 0;
    /* Name the first kernel (by the embedded program's name) that differs:
     * its text, its argument count, then a call's geometry. */
    for (int k = 0; k < have->nkernels; k++) {
        const char *name = have->kernels[k].name;
        if (k >= want->nkernels || strcmp(name, want->kernels[k].name))
            return snprintf(what, n, "kernel %s is not one the graph renders", name), 1;
        if (have->kernels[k].nargs != want->kernels[k].nargs || !same_text(have, k, want, k))
            return snprintf(what, n, "kernel %s differs", name), 1;
    }
    if (want->nkernels > have->nkernels)
        return snprintf(what, n, "kernel %s is missing", want->kernels[have->nkernels].name), 1;
    if (!same_text(have, -1, want, -1)) return snprintf(what, n, "the kernel prelude differs"), 1;
    for (int c = 0; c < have->ncalls && c < want->ncalls; c++) {
        const cg_call *a = &have->calls[c], *b = &want->calls[c];
        if (a->kind == b->kind && a->kernel == b->kernel && a->count == b->count &&
            a->nargs == b->nargs && a->nargs >= 0 && a->nargs <= CG_MAX_ARGS &&
            !memcmp(a->arg, b->arg, sizeof *a->arg * (size_t)a->nargs) &&
            !memcmp(a->off, b->off, sizeof *a->off * (size_t)a->nargs) &&
            !memcmp(&a->launch, &b->launch, sizeof a->launch) &&
            (a->kind != CG_CALL_GEMM || cg_gemm_equal(&a->gemm, &b->gemm)) &&
            (a->kind != CG_CALL_CONV || cg_conv_equal(&a->conv, &b->conv)))
            continue;
        if (a->kind == CG_CALL_KERNEL && a->kernel >= 0 && a->kernel < have->nkernels)
            return snprintf(what, n,
                            "call %d of kernel %s differs (count %" PRId64 ", the graph's %" PRId64
                            ")",
                            c, have->kernels[a->kernel].name, a->count, b->count),
                   1;
        return snprintf(what, n, "call %d (%s) differs", c,
                        a->kind == CG_CALL_GEMM   ? "a GEMM"
                        : a->kind == CG_CALL_CONV ? "a convolution"
                                                  : "a kernel"),
               1;
    }
    for (int i = 0; i < have->nsteps && i < want->nsteps; i++) {
        const cg_step *a = &have->steps[i], *b = &want->steps[i];
        if (a->node != b->node || a->op != b->op || a->alias != b->alias || a->nbuf != b->nbuf ||
            a->scratch != b->scratch || a->first_call != b->first_call || a->ncalls != b->ncalls ||
            a->nbuf < 0 || a->nbuf > CG_MAX_BUFS ||
            memcmp(a->buf, b->buf, sizeof *a->buf * (size_t)a->nbuf))
            return snprintf(what, n, "step %d (node %d) differs", i, a->node), 1;
    }
    return snprintf(what, n, "its steps or calls differ (%d steps, %d calls; the graph's %d, %d)",
                    have->nsteps, have->ncalls, want->nsteps, want->ncalls),
           1;
}
