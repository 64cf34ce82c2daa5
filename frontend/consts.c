/* frontend/consts.c — `const NAME = value` and the language's scalar
 * arithmetic: the constants are evaluated once, in file order, before any
 * other check (a --set replaces one's value there), then every size written
 * as an expression (input dims, train items) is folded to its number. The
 * elaborator uses the same arithmetic (fe_scalar_op) for the scalars it
 * meets, so `2 * layers` means one thing everywhere.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "base/err.h"

static const char *kind_name(fe_expr_kind k) {
    return k == FE_INT ? "an integer" : k == FE_FLOAT ? "a number" : "a boolean";
}

static double as_double(const fe_scalar *a) { return a->kind == FE_INT ? (double)a->i : a->f; }

static const char *op_text(int op) {
    return op == '+' ? "+" : op == '-' ? "-" : op == '*' ? "*" : op == '/' ? "/" : "//";
}

/* Floor division as Python's: the quotient rounded toward -inf. */
static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static int int_op(int op, fe_scalar *a, int64_t b, char *err, size_t n) {
    int64_t x = a->i, r = 0;
    int over = 0;
    switch (op) {
    case '+': over = __builtin_add_overflow(x, b, &r); break;
    case '-': over = __builtin_sub_overflow(x, b, &r); break;
    case '*': over = __builtin_mul_overflow(x, b, &r); break;
    default: /* 'F' */
        if (b == 0) return base_fail(err, n, "integer division by zero in '//'");
        over = x == INT64_MIN && b == -1;
        if (!over) r = floor_div(x, b);
    }
    if (over)
        return base_fail(err, n, "integer overflow in '%s' (%" PRId64 " %s %" PRId64 ")",
                         op_text(op), x, op_text(op), b);
    a->i = r;
    return 0;
}

int fe_scalar_op(int op, fe_scalar *a, const fe_scalar *b, char *err, size_t n) {
    if (a->kind == FE_BOOL || b->kind == FE_BOOL)
        return base_fail(err, n, "cannot apply '%s' to %s and %s", op_text(op), kind_name(a->kind),
                         kind_name(b->kind));
    if (a->kind == FE_INT && b->kind == FE_INT && op != '/') return int_op(op, a, b->i, err, n);
    if (op == 'F')
        return base_fail(err, n, "'//' takes integers, not %s",
                         kind_name(a->kind == FE_INT ? b->kind : a->kind));
    double x = as_double(a), y = as_double(b), r;
    if (op == '/' && y == 0) return base_fail(err, n, "division by zero in '/'");
    r = op == '+' ? x + y : op == '-' ? x - y : op == '*' ? x * y : x / y;
    if (!isfinite(r)) return base_fail(err, n, "number overflow in '%s'", op_text(op));
    *a = (fe_scalar){FE_FLOAT, 0, r, NULL};
    return 0;
}

int fe_scalar_neg(fe_scalar *a, char *err, size_t n) {
    if (a->kind == FE_BOOL) return base_fail(err, n, "cannot negate a boolean");
    if (a->kind == FE_INT) {
        if (a->i == INT64_MIN) return base_fail(err, n, "integer overflow in '-'");
        a->i = -a->i;
        return 0;
    }
    *a = (fe_scalar){FE_FLOAT, 0, -a->f, NULL};
    return 0;
}

int fe_scalar_sqrt(fe_scalar *a, char *err, size_t n) {
    if (a->kind == FE_BOOL) return base_fail(err, n, "sqrt takes a number, not a boolean");
    double x = as_double(a);
    if (x < 0) return base_fail(err, n, "sqrt of a negative number (%g)", x);
    *a = (fe_scalar){FE_FLOAT, 0, sqrt(x), NULL};
    return 0;
}

const char *fe_float_text(double f, char *buf, size_t n) {
    snprintf(buf, n, "%g", f);
    if (strspn(buf, "-0123456789") == strlen(buf) && strlen(buf) + 2 < n) strcat(buf, ".0");
    return buf;
}

const fe_const *fe_find_const(const fe_program *P, const char *name) {
    return fe_map_get(&P->const_map, name);
}

/* ---- evaluation of a constant's expression ----------------------------------- */

#define ERR(P, loc, ...) fe_error(&(P)->diag, (loc), __VA_ARGS__)
static const fe_loc nowhere = {0, 0}; /* --set is on the command line: the message names the file */

static int eval(fe_program *P, const fe_expr *e, fe_scalar *out);

static int eval_chain(fe_program *P, const fe_expr *e, fe_scalar *out) {
    if (eval(P, e->args->value, out)) return -1;
    for (const fe_arg *t = e->args->next; t; t = t->next) {
        fe_scalar b;
        char err[160];
        if (eval(P, t->value, &b)) return -1;
        if (fe_scalar_op(t->op, out, &b, err, sizeof err)) {
            ERR(P, t->key_loc, "%s", err);
            return -1;
        }
    }
    return 0;
}

static int eval(fe_program *P, const fe_expr *e, fe_scalar *out) {
    char err[160];
    switch (e->kind) {
    case FE_INT:
    case FE_BOOL: *out = (fe_scalar){e->kind, e->i, 0, NULL}; return 0;
    case FE_FLOAT: *out = (fe_scalar){FE_FLOAT, 0, e->f, e->text}; return 0;
    case FE_NAME: {
        const fe_const *c = fe_find_const(P, e->name);
        if (!c) {
            const fe_const *later = P->consts;
            while (later && strcmp(later->name, e->name)) later = later->next;
            if (later)
                ERR(P, e->loc, "constant '%s' is used before its declaration at %d:%d", e->name,
                    later->loc.line, later->loc.col);
            else
                ERR(P, e->loc, "unknown constant '%s'", e->name);
            return -1;
        }
        *out = (fe_scalar){c->kind, c->i, c->f, c->text};
        return 0;
    }
    case FE_ADD:
    case FE_MUL: return eval_chain(P, e, out);
    case FE_NEG:
        if (eval(P, e->args->value, out)) return -1;
        if (fe_scalar_neg(out, err, sizeof err)) {
            ERR(P, e->loc, "%s", err);
            return -1;
        }
        return 0;
    case FE_CALL:
        if (strcmp(e->name, "sqrt") || e->nargs != 1 || e->args->key) {
            ERR(P, e->loc, "a constant's value cannot call '%s' (only sqrt(n))", e->name);
            return -1;
        }
        if (eval(P, e->args->value, out)) return -1;
        if (fe_scalar_sqrt(out, err, sizeof err)) {
            ERR(P, e->loc, "%s", err);
            return -1;
        }
        return 0;
    }
    return -1;
}

/* ---- --set NAME=VALUE ---------------------------------------------------------------- */

/* VALUE as the literal it would be in the file: true, false, an integer
 * or a number. */
static int parse_value(const char *v, fe_scalar *out) {
    if (!strcmp(v, "true") || !strcmp(v, "false")) {
        *out = (fe_scalar){FE_BOOL, v[0] == 't', 0, NULL};
        return 0;
    }
    char *end;
    errno = 0;
    if (v[0] && strspn(v + (v[0] == '-'), "0123456789") == strlen(v + (v[0] == '-')) &&
        v[v[0] == '-']) {
        long long i = strtoll(v, &end, 10);
        if (errno == ERANGE) return -1;
        *out = (fe_scalar){FE_INT, i, 0, NULL};
        return 0;
    }
    double f = strtod(v, &end);
    if (!v[0] || *end || !isfinite(f) || strspn(v, "0123456789.eE+-") != strlen(v)) return -1;
    *out = (fe_scalar){FE_FLOAT, 0, f, v};
    return 0;
}

static int apply_set(fe_program *P, fe_const *c, const fe_define *d) {
    fe_scalar v;
    if (parse_value(d->value, &v)) {
        ERR(P, nowhere, "--set %s=%s: '%s' is not an integer, a number, true or false", d->name,
            d->value, d->value);
        return -1;
    }
    if (v.kind == FE_INT && c->kind == FE_FLOAT) /* 2 for 2.0: the same number */
        v = (fe_scalar){FE_FLOAT, 0, (double)v.i, d->value};
    if (v.kind != c->kind) {
        ERR(P, nowhere, "--set %s=%s: constant '%s' (declared at %d:%d) is %s, not %s", d->name,
            d->value, c->name, c->loc.line, c->loc.col, kind_name(c->kind), d->value);
        return -1;
    }
    c->kind = v.kind, c->i = v.i, c->f = v.f, c->text = v.text;
    return 0;
}

/* Every --set names a declared constant. */
static int check_sets(fe_program *P) {
    for (int k = 0; k < P->ndefs; k++) {
        const fe_define *d = &P->defs[k];
        if (fe_find_const(P, d->name)) continue;
        base_near n = {0};
        for (const fe_const *c = P->consts; c; c = c->next) base_near_try(&n, d->name, c->name);
        if (n.best)
            ERR(P, nowhere, "--set %s=%s: no constant '%s'; did you mean '%s'?", d->name, d->value,
                d->name, n.best);
        else
            ERR(P, nowhere, "--set %s=%s: no constant '%s' (the file declares %s)", d->name,
                d->value, d->name, P->consts ? "other constants" : "none");
        return -1;
    }
    return 0;
}

/* ---- the pass -------------------------------------------------------------------------- */

/* A constant's name is not an input's, a block's, an operator's or sqrt. */
static int check_name(fe_program *P, const fe_const *c) {
    const fe_const *prev = fe_find_const(P, c->name);
    if (prev) {
        ERR(P, c->loc, "duplicate constant '%s' (first defined at %d:%d)", c->name, prev->loc.line,
            prev->loc.col);
        return -1;
    }
    for (const fe_input *in = P->inputs; in; in = in->next)
        if (!strcmp(in->name, c->name)) {
            ERR(P, c->loc, "constant '%s' has the name of the input at %d:%d", c->name,
                in->loc.line, in->loc.col);
            return -1;
        }
    for (const fe_block *b = P->blocks; b; b = b->next)
        if (!strcmp(b->name, c->name)) {
            ERR(P, c->loc, "constant '%s' has the name of the block at %d:%d", c->name, b->loc.line,
                b->loc.col);
            return -1;
        }
    if (fe_find_op(c->name) || !strcmp(c->name, "sqrt")) {
        ERR(P, c->loc, "constant '%s' has the name of a built-in operator", c->name);
        return -1;
    }
    return 0;
}

/* A size written as an expression: its value, which must be an integer
 * (train values are checked as numbers by check.c). */
static int fold_num(fe_program *P, fe_num *n) {
    if (!n->expr) return 0;
    fe_scalar v;
    if (eval(P, n->expr, &v)) return -1;
    if (v.kind == FE_BOOL) {
        ERR(P, n->loc, "expected a number, got %s", v.i ? "true" : "false");
        return -1;
    }
    n->is_float = v.kind == FE_FLOAT;
    n->i = v.i;
    n->f = v.f;
    if (n->is_float) {
        char buf[40];
        fe_float_text(v.f, buf, sizeof buf);
        n->text = v.text ? v.text : fe_strndup(&P->arena, buf, strlen(buf));
    }
    return 0;
}

/* A keyword argument given as a constant: a boolean one becomes
 * key=true|false (sgd(nesterov=flag)). */
static int fold_kw(fe_program *P, fe_kw *k) {
    if (k->kind != FE_KW_NUM || !k->value->expr) return 0;
    const fe_expr *e = k->value->expr;
    if (!strcmp(k->key, "exclude") && !fe_find_const(P, e->name)) { /* exclude=bn */
        ERR(P, e->loc, "argument 'exclude' takes a list of names in parentheses: exclude=(%s)",
            e->name);
        return -1;
    }
    fe_scalar v;
    if (eval(P, k->value->expr, &v)) return -1;
    if (v.kind == FE_BOOL) {
        k->kind = FE_KW_BOOL;
        k->boolean = (int)v.i;
        return 0;
    }
    return fold_num(P, k->value);
}

static int fold_items(fe_program *P, fe_titem *items) {
    for (fe_titem *it = items; it; it = it->next) {
        if (it->num && fold_num(P, it->num)) return -1;
        for (fe_kw *k = it->kws; k; k = k->next)
            if (fold_kw(P, k)) return -1;
        for (fe_pair *p = it->pairs; p; p = p->next)
            if (fold_num(P, p->value)) return -1;
        for (fe_num *n = it->mean; n; n = n->next)
            if (fold_num(P, n)) return -1;
        for (fe_num *n = it->std; n; n = n->next)
            if (fold_num(P, n)) return -1;
        if (fold_items(P, it->items)) return -1;
    }
    return 0;
}

/* Input sizes must be integers: an expression that gives a number is
 * refused here, as a literal number is by the grammar. */
static int fold_inputs(fe_program *P) {
    for (fe_input *in = P->inputs; in; in = in->next)
        for (fe_num *d = in->classes ? in->classes : in->dims; d; d = d->next) {
            if (fold_num(P, d)) return -1;
            if (d->is_float) {
                ERR(P, d->loc, "%s must be an integer, got %s",
                    in->classes ? "number of classes" : "dimension", d->text);
                return -1;
            }
        }
    return 0;
}

int fe_check_consts(fe_program *P) {
    for (fe_const *c = P->consts; c; c = c->next) {
        if (check_name(P, c)) return -1;
        const fe_define *set = NULL;
        for (int k = 0; k < P->ndefs; k++)
            if (!strcmp(P->defs[k].name, c->name)) set = &P->defs[k];
        /* A constant being set need only give its kind: its expression may
         * fail for the values it replaces (1 / layers with layers=0). */
        fe_diag saved = P->diag;
        char quiet[8];
        if (set) P->diag = (fe_diag){P->diag.path, 0, quiet, sizeof quiet};
        fe_scalar v = {FE_INT, 0, 0, NULL};
        int bad = eval(P, c->value, &v);
        P->diag = saved;
        if (bad && !set) return -1;
        c->kind = v.kind, c->i = v.i, c->f = v.f, c->text = v.text;
        if (set && bad) { /* its kind unknown: the value's own */
            fe_scalar s;
            if (!parse_value(set->value, &s)) c->kind = s.kind;
        }
        if (set && apply_set(P, c, set)) return -1;
        fe_map_put(&P->arena, &P->const_map, c->name, c);
    }
    if (check_sets(P) || fold_inputs(P)) return -1;
    for (fe_train_sec *t = P->trains; t; t = t->next)
        if (fold_items(P, t->items)) return -1;
    return 0;
}
