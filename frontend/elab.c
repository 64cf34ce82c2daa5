/* frontend/elab.c — elaboration: runs the checked program like a tiny
 * interpreter whose tensor values are IR nodes. Block calls are expanded
 * inline; operator calls create their parameters and nodes.
 *
 * Parameter names are hierarchical and depend only on the program: a scope
 * is the path of block calls ("down0.basic1."), each block call is named
 * <block><n> and each parameter-creating operator <op><n>, numbered per name
 * within the enclosing scope in evaluation order (arguments left to right,
 * before the call). So every batch and mode yields the same names in the
 * same order.
 *
 * The operator table is here; build.c turns one call into nodes (elab.h
 * is what the two share).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/elab.h"
#include "base/err.h"

/* ---- the operator table ---------------------------------------------------- */

/* Argument specs: required tensor / integer, optional integer / float /
 * boolean with a default. */
#define TENSOR(name) \
    { name, FE_ARG_TENSOR, 1, 0, 0, NULL }
#define TENSOR_OPT(name) \
    { name, FE_ARG_TENSOR, 0, 0, 0, NULL }
#define INT(name, min) \
    { name, FE_ARG_INT, 1, 0, min, NULL }
#define INT_OPT(name, def, min) \
    { name, FE_ARG_INT, 0, def, min, NULL }
#define FLOAT(name) \
    { name, FE_ARG_FLOAT, 1, 0, 0, NULL }
#define FLOAT_OPT(name, def) \
    { name, FE_ARG_FLOAT, 0, def, 0, NULL }
#define BOOL_OPT(name, def) \
    { name, FE_ARG_BOOL, 0, def, 0, NULL }
#define WORD_OPT(name, words) \
    { name, FE_ARG_WORD, 0, 0, 0, words }
#define SAME_AS_K (-(1 << 30)) /* pool stride default: the window's k (no other default) */

static const fe_opdef ops[] = {
    {"conv",
     FE_OP_CONV,
     7,
     {TENSOR("x"), INT("channels", 1), INT("k", 1), INT_OPT("s", 1, 1), INT_OPT("p", 0, 0),
      BOOL_OPT("bias", 1), INT_OPT("groups", 1, 1)}},
    {"batchnorm",
     FE_OP_BATCHNORM,
     8,
     {TENSOR("x"), FLOAT_OPT("eps", 1e-5), FLOAT_OPT("momentum", 0.9), FLOAT_OPT("gamma_init", 1),
      BOOL_OPT("residual_last", 0), BOOL_OPT("sync", 0), BOOL_OPT("scale", 1),
      BOOL_OPT("center", 1)}},
    {"relu", FE_OP_RELU, 1, {TENSOR("x")}},
    {"add", FE_OP_ADD, 2, {TENSOR("a"), TENSOR("b")}},
    {"maxpool",
     FE_OP_MAXPOOL,
     4,
     {TENSOR("x"), INT("k", 1), INT_OPT("s", SAME_AS_K, 1), INT_OPT("p", 0, 0)}},
    {"avgpool",
     FE_OP_AVGPOOL,
     4,
     {TENSOR("x"), INT("k", 1), INT_OPT("s", SAME_AS_K, 1), INT_OPT("p", 0, 0)}},
    {"global_avgpool", FE_OP_GLOBAL_AVGPOOL, 1, {TENSOR("x")}},
    {"flatten", FE_OP_FLATTEN, 1, {TENSOR("x")}},
    {"dense",
     FE_OP_DENSE,
     4,
     {TENSOR("x"), INT("units", 1), BOOL_OPT("bias", 1), TENSOR_OPT("tie")}},
    {"softmax_cross_entropy",
     FE_OP_SOFTMAX_CE,
     4,
     {TENSOR("logits"), TENSOR("label"), FLOAT_OPT("smoothing", 0), INT_OPT("ignore", -1, -1)}},
    {"sigmoid", FE_OP_SIGMOID, 1, {TENSOR("x")}},
    {"clip", FE_OP_CLIP, 3, {TENSOR("x"), FLOAT("lo"), FLOAT("hi")}},
    {"relu6", FE_OP_RELU6, 1, {TENSOR("x")}},
    {"mul", FE_OP_MUL, 2, {TENSOR("a"), TENSOR("b")}},
    /* up to IR_MAX_INPUTS tensors; axis by keyword (or ninth) */
    {"concat",
     FE_OP_CONCAT,
     9,
     {TENSOR("a"), TENSOR("b"), TENSOR_OPT("c"), TENSOR_OPT("d"), TENSOR_OPT("e"), TENSOR_OPT("f"),
      TENSOR_OPT("g"), TENSOR_OPT("h"), INT_OPT("axis", 1, 0)}},
    {"dropout", FE_OP_DROPOUT, 2, {TENSOR("x"), FLOAT("p")}},
    {"tanh", FE_OP_TANH, 1, {TENSOR("x")}},
    {"gelu", FE_OP_GELU, 2, {TENSOR("x"), WORD_OPT("approx", "erf|tanh")}},
    {"layernorm", FE_OP_LAYERNORM, 2, {TENSOR("x"), FLOAT_OPT("eps", 1e-5)}},
    {"softmax", FE_OP_SOFTMAX, 2, {TENSOR("x"), INT_OPT("axis", -1, -FE_MAX_SIZE)}},
    {"embedding", FE_OP_EMBEDDING, 3, {TENSOR("ids"), INT("vocab", 1), INT("dim", 1)}},
    {"matmul", FE_OP_MATMUL, 2, {TENSOR("a"), TENSOR("b")}},
};

const fe_opdef *fe_find_op(const char *name) {
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(ops[i].name, name)) return &ops[i];
    return NULL;
}

const char *fe_nearest_op(const char *name) {
    base_near n = {0};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) base_near_try(&n, name, ops[i].name);
    return n.best;
}

const char *elab_kind_name(vkind k) {
    static const char *names[] = {"a tensor", "an integer", "a number", "a boolean"};
    return names[k];
}

/* "a tensor", or the scalar itself: "8.5", "true". */
static const char *describe(const value *v, char *buf, size_t n) {
    switch (v->kind) {
    case V_TENSOR: return "a tensor";
    case V_INT: snprintf(buf, n, "%" PRId64, v->i); return buf;
    case V_FLOAT:
        if (v->text) return v->text;
        snprintf(buf, n, "%g", v->f);
        return buf;
    case V_BOOL: return v->i ? "true" : "false";
    }
    return "?";
}

/* Errors inside a block also say which call got there: the same body
 * elaborates fine for one argument and fails for another. */
void elab_error(elab *E, const scope *S, fe_loc loc, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    size_t used = (size_t)vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (S && S->block && used < sizeof msg) {
        used += (size_t)snprintf(msg + used, sizeof msg - used, " (in block '%s' called at %d:%d",
                                 S->block->name, S->call_loc.line, S->call_loc.col);
        int shown = 0;
        for (const scope *p = S->parent; p && p->block && used < sizeof msg; p = p->parent) {
            if (++shown > 3) {
                used += (size_t)snprintf(msg + used, sizeof msg - used, ", ...");
                break;
            }
            used += (size_t)snprintf(msg + used, sizeof msg - used, ", from %d:%d",
                                     p->call_loc.line, p->call_loc.col);
        }
        if (used < sizeof msg) snprintf(msg + used, sizeof msg - used, ")");
    }
    fe_error(&E->diag, loc, "%s", msg);
}

static int next_count(elab *E, scope *S, const char *name) {
    int *n = fe_map_get(&S->counts, name);
    if (!n) {
        n = fe_alloc(&E->tmp, sizeof *n);
        fe_map_put(&E->tmp, &S->counts, name, n);
    }
    return (*n)++;
}

/* Labels of non-source nodes, for --summary, dumps and the runtime's
 * "loss" and "logits": a stronger kind replaces a weaker one, an equal one
 * keeps the first. Weakest first: the op inside a block ("basic0.add"), a
 * block's statement ("basic0.y"), the instance of a parameter-creating op
 * ("basic0.conv1", as its parameters) or a block's result ("basic0"), the
 * network's statement ("x", "logits"). */

enum { LABEL_NONE, LABEL_OP, LABEL_BLOCK_STMT, LABEL_INSTANCE, LABEL_TOP_STMT };

static void label_node(elab *E, int id, int rank, const char *prefix, const char *name) {
    ir_node *n = &E->g->nodes[id];
    if (ir_is_source(n->op)) return;
    if (id >= E->label_cap) {
        int cap = E->label_cap ? E->label_cap : 256;
        while (cap <= id) cap *= 2;
        unsigned char *p = realloc(E->label_rank, (size_t)cap);
        BASE_CHECK_ALLOC(p);
        memset(p + E->label_cap, 0, (size_t)(cap - E->label_cap));
        E->label_rank = p, E->label_cap = cap;
    }
    if (E->label_rank[id] >= rank && n->name[0]) return;
    /* A label too long for IR_NAME_MAX is cut: it names nothing. */
    snprintf(n->name, sizeof n->name, "%s%s", prefix, name);
    E->label_rank[id] = (unsigned char)rank;
}

/* Every node the elaborator adds passes here: size limits, position. */
static int added(elab *E, const scope *S, fe_loc loc, int id) {
    if (id < 0) return -1;
    ir_node *n = &E->g->nodes[id];
    n->line = loc.line;
    n->col = loc.col;
    char buf[96];
    if (ir_numel(&n->type) > FE_MAX_NUMEL) {
        elab_error(E, S, loc, "tensor %s is too large (more than 2^40 elements)",
                   ir_type_str(&n->type, buf, sizeof buf));
        return -1;
    }
    if (E->g->n > FE_MAX_NODES) {
        elab_error(E, S, loc, "network too large (more than %d nodes)", FE_MAX_NODES);
        return -1;
    }
    return id;
}

int elab_node(elab *E, const scope *S, fe_loc loc, ir_op op, const int *in, int nin,
              const int64_t *iattr, const double *fattr) {
    char err[256];
    int id = ir_add_node(E->g, op, in, nin, iattr, fattr, err, sizeof err);
    if (id < 0) {
        elab_error(E, S, loc, "%s", err);
        return -1;
    }
    if (S && S->prefix[0]) label_node(E, id, LABEL_OP, S->prefix, ir_ops[op].name);
    return added(E, S, loc, id);
}

/* A parameter (or BatchNorm state) of operator instance `inst`. */
int elab_param(elab *E, const scope *S, fe_loc loc, const char *inst, const char *leaf,
               ir_type type, ir_init init, int is_state) {
    char name[IR_NAME_MAX];
    char buf[96];
    if ((size_t)snprintf(name, sizeof name, "%s%s.%s", S->prefix, inst, leaf) >= sizeof name) {
        elab_error(E, S, loc, "parameter name '%s%s.%s' is too long (at most %d characters)",
                   S->prefix, inst, leaf, IR_NAME_MAX - 1);
        return -1;
    }
    if (ir_numel(&type) > FE_MAX_NUMEL) {
        elab_error(E, S, loc, "parameter %s %s is too large (more than 2^40 elements)", name,
                   ir_type_str(&type, buf, sizeof buf));
        return -1;
    }
    int id = is_state ? ir_add_state(E->g, name, type, init) : ir_add_param(E->g, name, type, init);
    return added(E, S, loc, id);
}

/* Converts and checks one argument against its spec. */
static int coerce(elab *E, scope *S, const fe_opdef *op, int slot, value *v, fe_loc loc) {
    const fe_argspec *spec = &op->arg[slot];
    static const vkind want[] = {V_TENSOR, V_INT, V_FLOAT, V_BOOL, V_INT};
    if (spec->kind == FE_ARG_FLOAT && v->kind == V_INT) {
        v->kind = V_FLOAT;
        v->f = (double)v->i;
    }
    char buf[48], hint[96] = "";
    if (v->kind != want[spec->kind]) {
        if (spec->kind == FE_ARG_INT) fe_int_hint(v->kind == V_FLOAT, v->f, hint, sizeof hint);
        elab_error(E, S, loc, "argument '%s' of '%s' must be %s, got %s%s", spec->name, op->name,
                   elab_kind_name(want[spec->kind]), describe(v, buf, sizeof buf), hint);
        return -1;
    }
    if (spec->kind == FE_ARG_INT && (v->i < spec->min || v->i > FE_MAX_SIZE)) {
        if (v->i < spec->min)
            elab_error(E, S, loc, "argument '%s' of '%s' must be %s, got %" PRId64, spec->name,
                       op->name, spec->min ? "positive" : "non-negative", v->i);
        else
            elab_error(E, S, loc, "argument '%s' of '%s' must be at most %" PRId64 ", got %" PRId64,
                       spec->name, op->name, FE_MAX_SIZE, v->i);
        return -1;
    }
    if (spec->kind == FE_ARG_FLOAT && !(v->f > 0) && !strcmp(spec->name, "eps")) {
        elab_error(E, S, loc, "argument 'eps' of '%s' must be positive, got %g", op->name, v->f);
        return -1;
    }
    return 0;
}

static int eval(elab *E, scope *S, const fe_expr *e, value *out);

/* Arguments are evaluated left to right as written, then slotted. */
static int eval_args(elab *E, scope *S, const fe_expr *call, value *v, fe_loc *loc) {
    for (const fe_arg *a = call->args; a; a = a->next) {
        if (call->op && call->op->arg[a->slot].kind == FE_ARG_WORD) { /* checked by fe_check */
            char msg[96];
            v[a->slot] = (value){
                V_INT, 0, fe_word_arg(call->op, a->slot, a->value, msg, sizeof msg), 0, NULL};
        } else if (eval(E, S, a->value, &v[a->slot])) {
            return -1;
        }
        loc[a->slot] = a->value->loc;
    }
    return 0;
}

static int call_op(elab *E, scope *S, const fe_expr *e, value *out) {
    const fe_opdef *op = e->op;
    op_args a = {e, {{0}}, {{0}}, {0}};
    char *present = a.given;
    for (const fe_arg *x = e->args; x; x = x->next) present[x->slot] = 1;
    if (eval_args(E, S, e, a.v, a.loc)) return -1;
    for (int i = 0; i < op->nargs; i++) {
        if (!present[i]) { /* the checker made sure required ones are there */
            const fe_argspec *spec = &op->arg[i];
            a.v[i].kind = spec->kind == FE_ARG_FLOAT  ? V_FLOAT
                          : spec->kind == FE_ARG_BOOL ? V_BOOL
                                                      : V_INT;
            a.v[i].i = (int64_t)spec->def;
            a.v[i].f = spec->def;
            if (spec->def == SAME_AS_K) a.v[i].i = a.v[1].i;
            a.loc[i] = e->loc;
        } else if (coerce(E, S, op, i, &a.v[i], a.loc[i])) {
            return -1;
        }
    }
    char inst[96] = "";
    if (op->id == FE_OP_CONV || op->id == FE_OP_BATCHNORM || op->id == FE_OP_DENSE ||
        op->id == FE_OP_LAYERNORM || op->id == FE_OP_EMBEDDING)
        snprintf(inst, sizeof inst, "%s%d", op->name, next_count(E, S, op->name));
    int first = E->g->n;
    int id = elab_op(E, S, &a, inst, e->loc);
    if (id < 0) return -1;
    /* conv, bias_add and so on take their parameters' prefix: basic0.conv1 */
    for (int i = first; inst[0] && i < E->g->n; i++)
        label_node(E, i, LABEL_INSTANCE, S->prefix, inst);
    *out = (value){V_TENSOR, id, 0, 0, NULL};
    return 0;
}

/* ---- blocks, statements, expressions ---------------------------------------------- */

static int exec_stmts(elab *E, scope *S, const fe_stmt *body, int top);

static int call_block(elab *E, scope *S, const fe_expr *e, value *out) {
    const fe_block *b = e->block;
    if (++E->calls > FE_MAX_CALLS) {
        elab_error(E, S, e->loc, "network too large (more than %d block calls)", FE_MAX_CALLS);
        return -1;
    }
    if (S->depth >= FE_MAX_CALL_DEPTH) { /* the checker's limit, kept here too */
        elab_error(E, S, e->loc, "block calls nested too deeply (more than %d levels)",
                   FE_MAX_CALL_DEPTH);
        return -1;
    }
    value *args = fe_alloc(&E->tmp, sizeof *args * (size_t)(b->nparams + 1));
    fe_loc *locs = fe_alloc(&E->tmp, sizeof *locs * (size_t)(b->nparams + 1));
    if (eval_args(E, S, e, args, locs)) return -1;

    scope *inner = fe_alloc(&E->tmp, sizeof *inner);
    int n = next_count(E, S, b->name);
    size_t len = strlen(S->prefix) + strlen(b->name) + 16;
    char *prefix = fe_alloc(&E->tmp, len);
    snprintf(prefix, len, "%s%s%d.", S->prefix, b->name, n);
    inner->parent = S;
    inner->prefix = prefix;
    inner->block = b;
    inner->call_loc = e->loc;
    inner->depth = S->depth + 1;
    int i = 0;
    for (const fe_ident *p = b->params; p; p = p->next, i++)
        fe_map_put(&E->tmp, &inner->vars, p->name, &args[i]);
    if (exec_stmts(E, inner, b->body, 0) || eval(E, inner, b->ret, out)) return -1;
    if (out->kind == V_TENSOR) { /* the block's result: "basic0" */
        char self[IR_NAME_MAX];
        snprintf(self, sizeof self, "%.*s", (int)(strlen(prefix) - 1), prefix);
        label_node(E, out->node, LABEL_INSTANCE, "", self);
    }
    return 0;
}

static int lookup(elab *E, const scope *S, const fe_expr *e, value *out) {
    const value *v = fe_map_get(&S->vars, e->name);
    if (!v) v = fe_map_get(&E->inputs, e->name);
    if (!v) { /* the checker resolves every name */
        elab_error(E, S, e->loc, "unknown name '%s'", e->name);
        return -1;
    }
    *out = *v;
    return 0;
}

/* a + b at the '+' written at loc, into *a. */
static int add2(elab *E, scope *S, fe_loc loc, value *a, const value *b) {
    if (a->kind == V_TENSOR && b->kind == V_TENSOR) {
        int id = elab_node(E, S, loc, IR_OP_ADD, (int[]){a->node, b->node}, 2, NULL, NULL);
        if (id < 0) return -1;
        *a = (value){V_TENSOR, id, 0, 0, NULL};
        return 0;
    }
    if (a->kind == V_INT && b->kind == V_INT) {
        if ((b->i > 0 && a->i > INT64_MAX - b->i) || (b->i < 0 && a->i < INT64_MIN - b->i)) {
            elab_error(E, S, loc, "integer overflow in '+'");
            return -1;
        }
        a->i += b->i;
        return 0;
    }
    if ((a->kind == V_INT || a->kind == V_FLOAT) && (b->kind == V_INT || b->kind == V_FLOAT)) {
        double x = a->kind == V_INT ? (double)a->i : a->f,
               y = b->kind == V_INT ? (double)b->i : b->f;
        *a = (value){V_FLOAT, -1, 0, x + y, NULL};
        return 0;
    }
    elab_error(E, S, loc, "cannot add %s and %s", elab_kind_name(a->kind), elab_kind_name(b->kind));
    return -1;
}

/* Terms left to right, folded as they come: ((a + b) + c) + ... */
static int eval_add(elab *E, scope *S, const fe_expr *e, value *out) {
    const fe_arg *t = e->args;
    if (eval(E, S, t->value, out)) return -1;
    for (t = t->next; t; t = t->next) {
        value b;
        if (eval(E, S, t->value, &b) || add2(E, S, t->key_loc, out, &b)) return -1;
    }
    return 0;
}

static int eval(elab *E, scope *S, const fe_expr *e, value *out) {
    if (++E->steps > FE_MAX_STEPS) {
        elab_error(E, S, e->loc, "network too large (more than %d expressions to evaluate)",
                   FE_MAX_STEPS);
        return -1;
    }
    switch (e->kind) {
    case FE_INT: *out = (value){V_INT, -1, e->i, 0, NULL}; return 0;
    case FE_FLOAT: *out = (value){V_FLOAT, -1, 0, e->f, e->text}; return 0;
    case FE_BOOL: *out = (value){V_BOOL, -1, e->i, 0, NULL}; return 0;
    case FE_NAME: return lookup(E, S, e, out);
    case FE_ADD: return eval_add(E, S, e, out);
    case FE_CALL: return e->block ? call_block(E, S, e, out) : call_op(E, S, e, out);
    }
    return -1;
}

static int exec_stmts(elab *E, scope *S, const fe_stmt *body, int top) {
    for (const fe_stmt *s = body; s; s = s->next) {
        value *v = fe_alloc(&E->tmp, sizeof *v);
        if (eval(E, S, s->value, v)) return -1;
        fe_map_put(&E->tmp, &S->vars, s->name, v);
        if (v->kind == V_TENSOR) /* label nodes with the program's names */
            label_node(E, v->node, top ? LABEL_TOP_STMT : LABEL_BLOCK_STMT, S->prefix, s->name);
    }
    return 0;
}

/* ---- the network ------------------------------------------------------------------- */

static int add_inputs(elab *E) {
    for (const fe_input *in = E->P->inputs; in; in = in->next) {
        ir_type t = {0};
        t.dim[t.ndim++] = E->batch;
        t.dtype = in->classes || in->integer ? IR_I32 : IR_F32;
        for (const fe_num *d = in->dims; d; d = d->next) t.dim[t.ndim++] = d->i;
        fe_loc loc = in->loc;
        if (ir_numel(&t) > FE_MAX_NUMEL) {
            char buf[96];
            fe_error(&E->diag, loc, "input %s %s is too large (more than 2^40 elements)", in->name,
                     ir_type_str(&t, buf, sizeof buf));
            return -1;
        }
        int id = ir_add_input(E->g, in->name, t, in->classes ? in->classes->i : 0);
        if (added(E, NULL, loc, id) < 0) return -1;
        value *v = fe_alloc(&E->tmp, sizeof *v);
        *v = (value){V_TENSOR, id, 0, 0, NULL};
        fe_map_put(&E->tmp, &E->inputs, in->name, v);
    }
    return 0;
}

/* `loss` must come from softmax_cross_entropy: autodiff starts there and
 * the runtime reads its logits, as the eval program's tensor named
 * "logits" (runtime/train/setup.c), so its first argument must be the
 * statement `logits`. */
static int mark_loss(elab *E, scope *top) {
    const fe_network *net = E->P->networks;
    const fe_stmt *last = NULL;
    for (const fe_stmt *s = net->body; s; s = s->next)
        if (!strcmp(s->name, "loss")) last = s;
    const value *v = fe_map_get(&top->vars, "loss");
    if (!v || !last) {
        fe_error(&E->diag, net->loc, "network '%s' does not assign 'loss'", net->name);
        return -1;
    }
    ir_op lop = v->kind == V_TENSOR ? E->g->nodes[v->node].op : IR_OP_COUNT;
    if (lop != IR_OP_SOFTMAX_CE && lop != IR_OP_SEQ_CE) {
        fe_error(
            &E->diag, last->value->loc, "loss must be the result of softmax_cross_entropy, not %s",
            v->kind == V_TENSOR ? ir_ops[E->g->nodes[v->node].op].name : elab_kind_name(v->kind));
        return -1;
    }
    const ir_node *lg = &E->g->nodes[E->g->nodes[v->node].input[0]];
    if (strcmp(lg->name, "logits")) {
        fe_error(&E->diag, (fe_loc){lg->line, lg->col},
                 "the loss's logits (softmax_cross_entropy's first argument) are named '%s': "
                 "dprun reads the eval program's tensor 'logits'; assign them to logits "
                 "(logits = ...; loss = softmax_cross_entropy(logits, label))",
                 lg->name[0] ? lg->name : "(unnamed)");
        return -1;
    }
    ir_node *loss = &E->g->nodes[v->node];
    loss->flags |= IR_FLAG_LOSS | IR_FLAG_OUTPUT;
    E->g->nodes[loss->input[0]].flags |= IR_FLAG_OUTPUT;
    return 0;
}

ir_graph *fe_build_graph(const fe_program *p, int batch, int training) {
    return fe_build_graph_err(p, batch, training, NULL, 0);
}

ir_graph *fe_build_graph_err(const fe_program *p, int batch, int training, char *err,
                             size_t errlen) {
    if (!p) return NULL;
    elab E = {.P = p, .batch = batch, .training = training ? 1 : 0, .dropout_key = -1};
    E.diag = (fe_diag){.path = p->path, .msg = err, .msglen = errlen};
    if (batch < 1 || batch > FE_MAX_SIZE) {
        fe_error(&E.diag, (fe_loc){0, 0}, "batch size %d is out of range (1..%" PRId64 ")", batch,
                 FE_MAX_SIZE);
        return NULL;
    }
    E.g = ir_new();
    scope *top = fe_alloc(&E.tmp, sizeof *top);
    top->prefix = "";
    int rc = add_inputs(&E);
    if (!rc) rc = exec_stmts(&E, top, p->networks->body, 1);
    if (!rc) rc = mark_loss(&E, top);
    char why[256];
    if (!rc && ir_verify(E.g, why, sizeof why)) {
        fe_error(&E.diag, p->networks->loc, "internal error: %s", why);
        rc = -1;
    }
    fe_arena_free(&E.tmp);
    free(E.label_rank);
    if (rc) ir_free(E.g);
    return rc ? NULL : E.g;
}
