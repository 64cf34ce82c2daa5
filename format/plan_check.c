/* format/plan_check.c — everything a plan must satisfy, checked alike
 * when it is written and when it is read (plan_check): names without
 * control bytes, each graph's nodes within the ranges the encoding and
 * the shape rules rely on, then ir_verify; the schedule finite and
 * through ir_train_check_field; the programs against their schedule
 * (ir_validate); the extra sections' tags. A refusal names the section. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/plan_internal.h"
#include "base/bytes.h"
#include "base/err.h"
#include "ir/validate.h"

/* Everything about one node the encoding needs, and every range the shape
 * rules' arithmetic relies on (ir/shape.c); ir_verify() then checks the
 * graph's meaning. */
static int check_node(const ir_node *n, int idx, char *why, size_t wn) {
    if ((unsigned)n->op >= IR_OP_COUNT)
        return base_fail(why, wn, "node %d: unknown op %u", idx, n->op);
    const ir_op_info *info = &ir_ops[n->op];
    int nia = ir_op_num_iattrs(n->op), nfa = ir_op_num_fattrs(n->op);
    if (n->ninputs < info->min_arity || n->ninputs > info->max_arity || n->ninputs > IR_MAX_INPUTS)
        return base_fail(why, wn, "node %d (%s): %d inputs, the op takes %d to %d", idx, info->name,
                         n->ninputs, info->min_arity, info->max_arity);
    for (int j = 0; j < n->ninputs; j++)
        if (n->input[j] < 0 || n->input[j] >= idx)
            return base_fail(why, wn, "node %d (%s): input %d is node %d, not an earlier one", idx,
                             info->name, j, n->input[j]);
    for (int j = 0; j < IR_MAX_IATTRS; j++) {
        int64_t v = n->iattr[j];
        if (j >= nia && v)
            return base_fail(why, wn, "node %d (%s): integer attribute slot %d is set but unused",
                             idx, info->name, j);
        if (v < -PLAN_MAX_VALUE || v > PLAN_MAX_VALUE)
            return base_fail(why, wn,
                             "node %d (%s): integer attribute %d is out of range (%" PRId64 ")",
                             idx, info->name, j, v);
    }
    for (int j = 0; j < IR_MAX_FATTRS; j++) {
        if (j >= nfa && n->fattr[j] != 0)
            return base_fail(why, wn, "node %d (%s): float attribute slot %d is set but unused",
                             idx, info->name, j);
        if (!isfinite(n->fattr[j]))
            return base_fail(why, wn, "node %d (%s): float attribute %d is not finite", idx,
                             info->name, j);
    }
    const ir_type *t = &n->type;
    if (t->ndim < 1 || t->ndim > IR_MAX_DIMS)
        return base_fail(why, wn, "node %d (%s): rank %d, must be 1 to %d", idx, info->name,
                         t->ndim, IR_MAX_DIMS);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->dim[d] <= 0 || t->dim[d] > PLAN_MAX_VALUE)
            return base_fail(why, wn, "node %d (%s): dimension %d is %" PRId64, idx, info->name, d,
                             t->dim[d]);
        if (numel > PLAN_MAX_NUMEL / t->dim[d])
            return base_fail(why, wn, "node %d (%s): tensor has more than 2^40 elements", idx,
                             info->name);
        numel *= t->dim[d];
    }
    if ((unsigned)t->dtype > IR_I32)
        return base_fail(why, wn, "node %d (%s): unknown dtype %u", idx, info->name, t->dtype);
    if (!memchr(n->name, 0, sizeof n->name))
        return base_fail(why, wn, "node %d (%s): name not terminated", idx, info->name);
    if (base_has_control(n->name, strlen(n->name)))
        return base_fail(why, wn, "node %d (%s): name contains a control character", idx,
                         info->name);
    if (n->line < 0 || n->col < 0)
        return base_fail(why, wn, "node %d (%s): bad source position %d:%d", idx, info->name,
                         n->line, n->col);
    return 0;
}

static int check_graph(const ir_graph *g, const char *what, char *why, size_t wn) {
    char sub[256];
    if (!g) return base_fail(why, wn, "no %s", what);
    if (g->n < 0 || (g->n && !g->nodes)) return base_fail(why, wn, "%s: bad node array", what);
    int64_t total = 0;
    for (int i = 0; i < g->n; i++) {
        if (check_node(&g->nodes[i], i, sub, sizeof sub))
            return base_fail(why, wn, "%s: %s", what, sub);
        int64_t numel = ir_numel(&g->nodes[i].type);
        if (total > PLAN_MAX_TOTAL - numel)
            return base_fail(why, wn, "%s: more than 2^50 elements in all", what);
        total += numel;
    }
    if (ir_verify(g, sub, sizeof sub)) return base_fail(why, wn, "%s: %s", what, sub);
    return 0;
}

/* A field the OPTM section holds (when the plan has one: not the defaults). */
static int optim_field(const ir_train *t, const char *field) {
    for (int i = 0; field && i < IR_TRAIN_NFIELDS; i++)
        if (ir_train_fields[i].when == IR_TW_OPTIM && !strcmp(field, ir_train_fields[i].key))
            return !ir_train_optim_is_default(t);
    return 0;
}

/* Every double of the schedule finite: the values, then the lr dict, then
 * the curve (the message says which). */
static int check_finite(const ir_train *t, char *why, size_t wn) {
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++) {
        const ir_train_field *f = &ir_train_fields[i];
        const double *v = ir_train_cptr(t, f);
        int n = f->kind == IR_TK_F64 ? 1 : f->kind == IR_TK_F64X3 ? 3 : 0;
        for (int c = 0; f->when != IR_TW_CURVE && c < n; c++)
            if (!isfinite(v[c])) return base_fail(why, wn, "schedule: a value is not finite");
    }
    for (int i = 0; i < t->lr_steps; i++)
        if (!isfinite(t->lr_value[i])) return base_fail(why, wn, "schedule: an lr is not finite");
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++) {
        const ir_train_field *f = &ir_train_fields[i];
        if (f->when == IR_TW_CURVE && f->kind == IR_TK_F64 &&
            !isfinite(*(const double *)ir_train_cptr(t, f)))
            return base_fail(why, wn, "schedule: the lr curve is not finite");
    }
    return 0;
}

static int check_schedule(const ir_train *t, char *why, size_t wn) {
    char sub[256];
    if ((unsigned)t->optimizer > IR_OPT_ADAMW)
        return base_fail(why, wn, "schedule: unknown optimizer %u", t->optimizer);
    if ((unsigned)t->lr_scaling > IR_LR_SCALING_SQRT)
        return base_fail(why, wn, "schedule: unknown lr scaling %u", t->lr_scaling);
    if (t->lr_steps < 0 || t->lr_steps > IR_MAX_LR_STEPS)
        return base_fail(why, wn, "schedule: %d lr steps", t->lr_steps);
    if (check_finite(t, why, wn)) return -1;
    if (!memchr(t->dataset, 0, sizeof t->dataset) ||
        base_has_control(t->dataset, strlen(t->dataset)))
        return base_fail(why, wn, "schedule: bad dataset name");
    const char *field;
    if (ir_train_check_field(t, &field, sub, sizeof sub))
        return base_fail(why, wn, "%s: %s", optim_field(t, field) ? "optimizer (OPTM)" : "schedule",
                         sub);
    return 0;
}

/* ir_validate: the programs with their schedule (ir/validate.h), the
 * refusal named by section, program, node or fusion group. */
static int validate(const dpc_plan *p, char *why, size_t wn) {
    ir_where w;
    char sub[512];
    if (!ir_validate(&p->schedule, p->train, p->eval, &w, sub, sizeof sub)) return 0;
    if (w.program < 0)
        return base_fail(why, wn, "%s: %s",
                         optim_field(&p->schedule, w.field) ? "optimizer (OPTM)" : "schedule", sub);
    const char *prog = w.program ? "eval program (GEVL" : "train program (GTRN";
    if (w.node >= 0 && strncmp(sub, "node ", 5))
        return base_fail(why, wn, "%s%s), node %d: %s", prog, w.group ? ", GRPS" : "", w.node, sub);
    return base_fail(why, wn, "%s%s): %s", prog, w.group ? ", GRPS" : "", sub);
}

/* Everything a plan must satisfy to be written, or to be accepted on reading. */
int plan_check(const dpc_plan *p, char *why, size_t wn) {
    if (!memchr(p->model, 0, sizeof p->model) || base_has_control(p->model, strlen(p->model)))
        return base_fail(why, wn, "bad model name");
    if (!memchr(p->source, 0, sizeof p->source) || base_has_control(p->source, strlen(p->source)))
        return base_fail(why, wn, "bad source path");
    if (check_schedule(&p->schedule, why, wn) || check_graph(p->train, "train program", why, wn) ||
        check_graph(p->eval, "eval program", why, wn) || validate(p, why, wn))
        return -1;
    if (p->nextra < 0 || p->nextra > PLAN_MAX_SECTIONS)
        return base_fail(why, wn, "%d extra sections", p->nextra);
    for (int i = 0; i < p->nextra; i++) {
        const plan_section *s = &p->extra[i];
        if (!plan_valid_tag(s->tag) || plan_is_required(s->tag))
            return base_fail(why, wn,
                             "extra section %d: bad tag (4 printable characters, not "
                             "META, SCHD, GTRN or GEVL)",
                             i);
        if (s->len && !s->data) return base_fail(why, wn, "section %s has no data", s->tag);
        for (int j = 0; j < i; j++)
            if (strcmp(p->extra[j].tag, s->tag) == 0)
                return base_fail(why, wn, "duplicated section %s", s->tag);
    }
    return 0;
}
