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
#include <math.h>
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
     5,
     {TENSOR("x"), INT("units", 1), BOOL_OPT("bias", 1), TENSOR_OPT("tie"),
      BOOL_OPT("scaled_init", 0)}},
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
      TENSOR_OPT("g"), TENSOR_OPT("h"), INT_OPT("axis", 1, -FE_MAX_SIZE)}},
    {"dropout", FE_OP_DROPOUT, 2, {TENSOR("x"), FLOAT("p")}},
    {"tanh", FE_OP_TANH, 1, {TENSOR("x")}},
    {"gelu", FE_OP_GELU, 2, {TENSOR("x"), WORD_OPT("approx", "erf|tanh")}},
    {"layernorm", FE_OP_LAYERNORM, 2, {TENSOR("x"), FLOAT_OPT("eps", 1e-5)}},
    {"softmax", FE_OP_SOFTMAX, 2, {TENSOR("x"), INT_OPT("axis", -1, -FE_MAX_SIZE)}},
    {"embedding", FE_OP_EMBEDDING, 3, {TENSOR("ids"), INT("vocab", 1), INT("dim", 1)}},
    {"matmul", FE_OP_MATMUL, 2, {TENSOR("a"), TENSOR("b")}},
    {"sub", FE_OP_SUB, 2, {TENSOR("a"), TENSOR("b")}},
    /* shapes (build.c checks the negative values: -1 dimensions, axes from the end) */
    {"reshape",
     FE_OP_RESHAPE,
     4,
     {TENSOR("x"), INT("d1", -FE_MAX_SIZE), INT_OPT("d2", 0, -FE_MAX_SIZE),
      INT_OPT("d3", 0, -FE_MAX_SIZE)}},
    {"permute",
     FE_OP_PERMUTE,
     5,
     {TENSOR("x"), INT("a0", 0), INT("a1", 0), INT_OPT("a2", 0, 0), INT_OPT("a3", 0, 0)}},
    {"transpose", FE_OP_TRANSPOSE, 3, {TENSOR("x"), INT("a", -FE_MAX_SIZE), INT("b", -FE_MAX_SIZE)}},
    {"slice",
     FE_OP_SLICE,
     4,
     {TENSOR("x"), INT("start", -FE_MAX_SIZE), INT("end", -FE_MAX_SIZE),
      INT_OPT("axis", -1, -FE_MAX_SIZE)}},
    {"split", FE_OP_SPLIT, 3, {TENSOR("x"), INT("parts", 1), INT_OPT("axis", -1, -FE_MAX_SIZE)}},
    {"mask",
     FE_OP_MASK,
     4,
     {TENSOR("x"), BOOL_OPT("causal", 0), TENSOR_OPT("pad"), INT_OPT("id", 0, -FE_MAX_SIZE)}},
    {"attention",
     FE_OP_ATTENTION,
     6,
     {TENSOR("q"), TENSOR("k"), TENSOR("v"), INT("heads", 1), BOOL_OPT("causal", 1),
      FLOAT_OPT("dropout", 0)}},
    {"positions", FE_OP_POSITIONS, 3, {TENSOR("x"), INT("length", 1), INT("dim", 1)}},
    {"class_token", FE_OP_CLASS_TOKEN, 1, {TENSOR("x")}},
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
    case V_FLOAT: return v->text ? v->text : fe_float_text(v->f, buf, n);
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
    if (spec->kind == FE_ARG_FLOAT && !isfinite((float)v->f)) { /* computed: 1e30 * 1e30 */
        elab_error(E, S, loc, "argument '%s' of '%s' is too large for a 32-bit float, got %g",
                   spec->name, op->name, v->f);
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
        op->id == FE_OP_LAYERNORM || op->id == FE_OP_EMBEDDING || op->id == FE_OP_POSITIONS ||
        op->id == FE_OP_CLASS_TOKEN)
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
_Static_assert(FE_MAX_CALLS == 65536, "the repeat count's message");

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
    const fe_const *c = v ? NULL : fe_find_const(E->P, e->name);
    if (c) {
        static const vkind kinds[] = {[FE_INT] = V_INT, [FE_FLOAT] = V_FLOAT, [FE_BOOL] = V_BOOL};
        *out = (value){kinds[c->kind], -1, c->i, c->f, c->text};
        return 0;
    }
    if (!v) { /* the checker resolves every name; a repeat of 0 may skip one */
        elab_error(E, S, e->loc, "unknown name '%s'", e->name);
        return -1;
    }
    *out = *v;
    return 0;
}

/* ---- arithmetic ------------------------------------------------------------------ */

static int to_scalar(const value *v, fe_scalar *s) {
    static const fe_expr_kind kinds[] = {
        [V_INT] = FE_INT, [V_FLOAT] = FE_FLOAT, [V_BOOL] = FE_BOOL};
    *s = (fe_scalar){kinds[v->kind], v->i, v->f, v->text};
    return 0;
}

static void from_scalar(const fe_scalar *s, value *v) {
    *v = (value){s->kind == FE_INT     ? V_INT
                 : s->kind == FE_FLOAT ? V_FLOAT
                                       : V_BOOL,
                 -1, s->i, s->f, s->text};
}

/* A tensor op with a scalar (mul_const, add_const c) into *out. */
static int with_const(elab *E, scope *S, fe_loc loc, ir_op op, int x, double c, value *out) {
    if (!isfinite((float)c)) { /* the kernels compute in float */
        elab_error(E, S, loc, "%g is too large for a 32-bit float", c);
        return -1;
    }
    int id = elab_node(E, S, loc, op, &x, 1, NULL, &c);
    if (id < 0) return -1;
    *out = (value){V_TENSOR, id, 0, 0, NULL};
    return 0;
}

/* A tensor with a tensor: t + u, t - u, t * u (as mul(t, u)). */
static int tensors(elab *E, scope *S, fe_loc loc, int op, value *a, const value *b) {
    int in[2] = {a->node, b->node}, id = -1;
    if (op == '+' || op == '-')
        id = elab_node(E, S, loc, op == '+' ? IR_OP_ADD : IR_OP_SUB, in, 2, NULL, NULL);
    else if (op == '*')
        id = elab_mul(E, S, loc, in[0], in[1]);
    else
        elab_error(E, S, loc,
                   "cannot divide a tensor by a tensor ('%s' takes a number on the right)",
                   op == '/' ? "/" : "//");
    if (id < 0) return -1;
    *a = (value){V_TENSOR, id, 0, 0, NULL};
    return 0;
}

/* a op b at the operator written at loc, into *a: scalars by fe_scalar_op,
 * a tensor with a number as mul_const / add_const. */
static int binop(elab *E, scope *S, fe_loc loc, int op, value *a, const value *b) {
    static const char *const verb[128] = {
        ['+'] = "add", ['-'] = "subtract", ['*'] = "multiply", ['/'] = "divide", ['F'] = "floor-divide"};
    char err[160];
    if (a->kind != V_TENSOR && b->kind != V_TENSOR) {
        fe_scalar x, y;
        to_scalar(a, &x), to_scalar(b, &y);
        if (fe_scalar_op(op, &x, &y, err, sizeof err)) {
            elab_error(E, S, loc, "%s", err);
            return -1;
        }
        from_scalar(&x, a);
        return 0;
    }
    if (a->kind == V_BOOL || b->kind == V_BOOL || op == 'F') {
        elab_error(E, S, loc, "cannot %s %s and %s", verb[op], elab_kind_name(a->kind),
                   elab_kind_name(b->kind));
        return -1;
    }
    if (a->kind == V_TENSOR && b->kind == V_TENSOR) return tensors(E, S, loc, op, a, b);
    int t = a->kind == V_TENSOR ? a->node : b->node;
    const value *n = a->kind == V_TENSOR ? b : a;
    double c = n->kind == V_INT ? (double)n->i : n->f;
    if (op == '/' && a->kind != V_TENSOR) {
        elab_error(E, S, loc, "cannot divide a number by a tensor");
        return -1;
    }
    if (op == '/' && c == 0) {
        elab_error(E, S, loc, "division by zero in '/'");
        return -1;
    }
    if (op == '-' && a->kind != V_TENSOR) /* c - t = (-t) + c */
        return with_const(E, S, loc, IR_OP_MUL_CONST, t, -1, a) ||
               with_const(E, S, loc, IR_OP_ADD_CONST, a->node, c, a);
    if (op == '+' || op == '-')
        return with_const(E, S, loc, IR_OP_ADD_CONST, t, op == '-' ? -c : c, a);
    return with_const(E, S, loc, IR_OP_MUL_CONST, t, op == '/' ? 1 / c : c, a);
}

/* Terms left to right, folded as they come: ((a + b) - c) + ... */
static int eval_chain(elab *E, scope *S, const fe_expr *e, value *out) {
    const fe_arg *t = e->args;
    if (eval(E, S, t->value, out)) return -1;
    for (t = t->next; t; t = t->next) {
        value b;
        if (eval(E, S, t->value, &b) || binop(E, S, t->key_loc, t->op, out, &b)) return -1;
    }
    return 0;
}

/* -x: a tensor times -1, a scalar negated. */
static int eval_neg(elab *E, scope *S, const fe_expr *e, value *out) {
    if (eval(E, S, e->args->value, out)) return -1;
    if (out->kind == V_TENSOR) return with_const(E, S, e->loc, IR_OP_MUL_CONST, out->node, -1, out);
    fe_scalar x;
    char err[160];
    to_scalar(out, &x);
    if (fe_scalar_neg(&x, err, sizeof err)) {
        elab_error(E, S, e->loc, "%s", err);
        return -1;
    }
    from_scalar(&x, out);
    return 0;
}

static int eval_sqrt(elab *E, scope *S, const fe_expr *e, value *out) {
    if (eval(E, S, e->args->value, out)) return -1;
    fe_scalar x;
    char err[160];
    if (out->kind == V_TENSOR) {
        elab_error(E, S, e->loc, "sqrt takes a number, not a tensor");
        return -1;
    }
    to_scalar(out, &x);
    if (fe_scalar_sqrt(&x, err, sizeof err)) {
        elab_error(E, S, e->loc, "%s", err);
        return -1;
    }
    from_scalar(&x, out);
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
    case FE_ADD:
    case FE_MUL: return eval_chain(E, S, e, out);
    case FE_NEG: return eval_neg(E, S, e, out);
    case FE_CALL:
        if (e->sqrt) return eval_sqrt(E, S, e, out);
        return e->block ? call_block(E, S, e, out) : call_op(E, S, e, out);
    }
    return -1;
}

static int exec_stmts(elab *E, scope *S, const fe_stmt *body, int top);
_Static_assert(FE_MAX_CALLS == 65536, "the repeat count's message");

/* `repeat n { body }`: the body n times in this scope, as if written out
 * n times (so its calls number on: block0, block1, ...). */
static int exec_repeat(elab *E, scope *S, const fe_stmt *s, int top) {
    value n;
    char buf[48];
    if (eval(E, S, s->count, &n)) return -1;
    if (n.kind != V_INT) {
        elab_error(E, S, s->count->loc, "repeat count must be an integer, got %s",
                   describe(&n, buf, sizeof buf));
        return -1;
    }
    if (n.i < 0 || n.i > FE_MAX_CALLS) {
        elab_error(E, S, s->count->loc, "repeat count must %s, got %" PRId64,
                   n.i < 0 ? "not be negative" : "be at most 65536", n.i);
        return -1;
    }
    for (int64_t k = 0; k < n.i; k++) {
        if (++E->steps > FE_MAX_STEPS) {
            elab_error(E, S, s->loc, "network too large (more than %d expressions to evaluate)",
                       FE_MAX_STEPS);
            return -1;
        }
        if (exec_stmts(E, S, s->body, top)) return -1;
    }
    return 0;
}

static int exec_stmts(elab *E, scope *S, const fe_stmt *body, int top) {
    for (const fe_stmt *s = body; s; s = s->next) {
        if (s->count) {
            if (exec_repeat(E, S, s, top)) return -1;
            continue;
        }
        value *v = fe_alloc(&E->tmp, sizeof *v);
        E->split_call = s->targets ? s->value : NULL; /* split's parts into split_node[] */
        E->split_want = 0;
        for (const fe_ident *t = s->targets; t; t = t->next) E->split_want++;
        int rc = eval(E, S, s->value, v);
        E->split_call = NULL;
        if (rc) return -1;
        fe_ident one = {NULL, s->name, s->loc};
        int k = 0;
        for (const fe_ident *t = s->targets ? s->targets : &one; t; t = t->next, k++) {
            if (s->targets) {
                v = fe_alloc(&E->tmp, sizeof *v);
                *v = (value){V_TENSOR, E->split_node[k], 0, 0, NULL};
            }
            fe_map_put(&E->tmp, &S->vars, t->name, v);
            if (v->kind == V_TENSOR) /* label nodes with the program's names */
                label_node(E, v->node, top ? LABEL_TOP_STMT : LABEL_BLOCK_STMT, S->prefix, t->name);
        }
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

/* The last statement assigning `loss`, in repeats too. */
static const fe_stmt *last_loss(const fe_stmt *body) {
    const fe_stmt *last = NULL;
    for (const fe_stmt *s = body; s; s = s->next) {
        const fe_stmt *in = s->count ? last_loss(s->body) : NULL;
        if (in || (!s->count && !strcmp(s->name, "loss"))) last = in ? in : s;
    }
    return last;
}

/* `loss` must come from softmax_cross_entropy: autodiff starts there and
 * the runtime reads its logits, as the eval program's tensor named
 * "logits" (runtime/train/setup.c), so its first argument must be the
 * statement `logits`. */
static int mark_loss(elab *E, scope *top) {
    const fe_network *net = E->P->networks;
    const fe_stmt *last = last_loss(net->body);
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
