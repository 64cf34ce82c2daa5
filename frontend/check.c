/* frontend/check.c — static checks after parsing: declarations, names,
 * calls (resolution, argument binding, keywords), recursion, and the train
 * section, which is validated and folded into an ir_train here.
 *
 * Types and shapes are left to the elaborator: block parameters take
 * whatever they are called with, so those errors are found by the trial
 * elaboration fe_parse_string() runs after this.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "base/err.h"
#include "ir/validate.h"

typedef struct {
    fe_program *P;
    fe_map blocks;             /* name -> fe_block */
    fe_map inputs;             /* name -> fe_input */
    const fe_expr *tuple_call; /* the value of the `a, b = ...` statement being checked */
} checker;

#define ERR(C, loc, ...) fe_error(&(C)->P->diag, (loc), __VA_ARGS__)

/* ---- declarations ------------------------------------------------------- */

static int duplicate(checker *C, const char *what, const char *name, fe_loc at, fe_loc first) {
    ERR(C, at, "duplicate %s '%s' (first defined at %d:%d)", what, name, first.line, first.col);
    return -1;
}

static int check_inputs(checker *C) {
    for (fe_input *in = C->P->inputs; in; in = in->next) {
        fe_input *prev = fe_map_get(&C->inputs, in->name);
        if (prev) return duplicate(C, "input", in->name, in->loc, prev->loc);
        if (strlen(in->name) >= IR_NAME_MAX) {
            ERR(C, in->loc, "input name '%s' is too long (at most %d characters)", in->name,
                IR_NAME_MAX - 1);
            return -1;
        }
        fe_map_put(&C->P->arena, &C->inputs, in->name, in);
        int n = 0;
        for (fe_num *d = in->dims; d; d = d->next, n++) {
            if (n == IR_MAX_DIMS - 1) {
                ERR(C, d->loc, "an input has at most %d dimensions besides the batch",
                    IR_MAX_DIMS - 1);
                return -1;
            }
            if (d->i < 1) {
                ERR(C, d->loc, "dimension must be positive, got %" PRId64, d->i);
                return -1;
            }
            if (d->i > FE_MAX_SIZE) {
                ERR(C, d->loc, "dimension must be at most %" PRId64 ", got %" PRId64, FE_MAX_SIZE,
                    d->i);
                return -1;
            }
        }
        const fe_num *k = in->classes;
        if (k && k->i < 1) {
            ERR(C, k->loc, "number of classes must be positive, got %" PRId64, k->i);
            return -1;
        }
        if (k && k->i > FE_MAX_SIZE) {
            ERR(C, k->loc, "number of classes must be at most %" PRId64 ", got %" PRId64,
                FE_MAX_SIZE, k->i);
            return -1;
        }
    }
    return 0;
}

static int check_block_headers(checker *C) {
    for (fe_block *b = C->P->blocks; b; b = b->next) {
        fe_block *prev = fe_map_get(&C->blocks, b->name);
        if (prev) return duplicate(C, "block", b->name, b->loc, prev->loc);
        if (fe_find_op(b->name) || !strcmp(b->name, "sqrt")) {
            ERR(C, b->loc, "block '%s' has the name of a built-in operator", b->name);
            return -1;
        }
        fe_map_put(&C->P->arena, &C->blocks, b->name, b);
        for (fe_ident *p = b->params; p; p = p->next)
            for (fe_ident *q = b->params; q != p; q = q->next)
                if (!strcmp(p->name, q->name)) {
                    ERR(C, p->loc, "duplicate parameter '%s' in block '%s'", p->name, b->name);
                    return -1;
                }
    }
    return 0;
}

static int check_sections(checker *C) {
    fe_program *P = C->P;
    if (!P->networks) {
        fe_error(&P->diag, (fe_loc){1, 1}, "no network section");
        return -1;
    }
    if (P->networks->next) {
        fe_network *n = P->networks->next;
        ERR(C, n->loc, "duplicate network section (first at %d:%d)", P->networks->loc.line,
            P->networks->loc.col);
        return -1;
    }
    if (P->trains && P->trains->next) {
        ERR(C, P->trains->next->loc, "duplicate train section (first at %d:%d)",
            P->trains->loc.line, P->trains->loc.col);
        return -1;
    }
    return 0;
}

/* ---- expressions and calls ------------------------------------------------ */

typedef struct {
    fe_map names; /* variables defined so far in this block or network */
} scope;

static int check_expr(checker *C, scope *S, fe_expr *e);

/* Index of the parameter called `key`, or -1. */
static int param_index(const fe_expr *call, const char *key) {
    if (call->op) {
        for (int i = 0; i < call->op->nargs; i++)
            if (!strcmp(call->op->arg[i].name, key)) return i;
        return -1;
    }
    int i = 0;
    for (const fe_ident *p = call->block->params; p; p = p->next, i++)
        if (!strcmp(p->name, key)) return i;
    return -1;
}

static const char *param_name(const fe_expr *call, int slot) {
    if (call->op) return call->op->arg[slot].name;
    const fe_ident *p = call->block->params;
    while (slot-- > 0) p = p->next;
    return p->name;
}

/* Binds arguments to parameters like Python: positional first, then
 * keywords, each parameter at most once, every required one present. */
static int check_call(checker *C, scope *S, fe_expr *e) {
    if (!strcmp(e->name, "sqrt")) { /* the one scalar function */
        if (e->nargs != 1 || e->args->key) {
            ERR(C, e->loc, "sqrt takes one positional argument, got %d", e->nargs);
            return -1;
        }
        e->sqrt = 1;
        return check_expr(C, S, e->args->value);
    }
    e->block = fe_map_get(&C->blocks, e->name);
    if (!e->block) e->op = fe_find_op(e->name);
    if (!e->block && !e->op) {
        const char *near = fe_nearest_op(e->name);
        if (near)
            ERR(C, e->loc, "unknown operator '%s'; did you mean '%s'?", e->name, near);
        else
            ERR(C, e->loc, "unknown operator '%s'", e->name);
        return -1;
    }
    const char *what = e->block ? "block " : "";
    int nparams = e->block ? e->block->nparams : e->op->nargs;
    char *filled = fe_alloc(&C->P->arena, (size_t)nparams + 1);
    int npos = 0, seen_key = 0;
    for (fe_arg *a = e->args; a; a = a->next) {
        if (!a->key) {
            if (seen_key) {
                ERR(C, a->value->loc, "positional argument after keyword argument");
                return -1;
            }
            if (npos >= nparams) {
                int optional = 0;
                for (int i = 0; e->op && i < nparams; i++) optional |= !e->op->arg[i].required;
                ERR(C, a->value->loc, "too many arguments to %s'%s' (it takes %s%d)", what, e->name,
                    optional ? "at most " : "", nparams);
                return -1;
            }
            a->slot = npos++;
        } else {
            seen_key = 1;
            a->slot = param_index(e, a->key);
            if (a->slot < 0) {
                /* the parameters it does take, and the nearest of them */
                char list[256] = "";
                base_near n = {0};
                for (int i = 0, at = 0; i < nparams && at < (int)sizeof list; i++) {
                    const char *pn = param_name(e, i);
                    base_near_try(&n, a->key, pn);
                    at += snprintf(list + at, sizeof list - (size_t)at, "%s%s", i ? ", " : "", pn);
                }
                char hint[96] = "";
                if (n.best) snprintf(hint, sizeof hint, "; did you mean '%s'?", n.best);
                ERR(C, a->key_loc, "unknown keyword argument '%s' for %s'%s'%s (it takes %s)",
                    a->key, what, e->name, hint, list);
                return -1;
            }
            if (filled[a->slot]) {
                ERR(C, a->key_loc, "argument '%s' of %s'%s' given twice", a->key, what, e->name);
                return -1;
            }
        }
        filled[a->slot] = 1;
        char msg[96];
        if (e->op && e->op->arg[a->slot].kind == FE_ARG_WORD) {
            if (fe_word_arg(e->op, a->slot, a->value, msg, sizeof msg) < 0) {
                ERR(C, a->value->loc, "%s", msg);
                return -1;
            }
        } else if (check_expr(C, S, a->value)) {
            return -1;
        }
    }
    for (int i = 0; i < nparams; i++)
        if (!filled[i] && (e->block || e->op->arg[i].required)) {
            ERR(C, e->loc, "missing argument '%s' in call to %s'%s'", param_name(e, i), what,
                e->name);
            return -1;
        }
    if (e->op && e->op->id == FE_OP_SPLIT && e != C->tuple_call) {
        ERR(C, e->loc,
            "split yields several values: assign them to names, as in "
            "'a, b = split(x, 2)'");
        return -1;
    }
    return 0;
}

static int check_expr(checker *C, scope *S, fe_expr *e) {
    switch (e->kind) {
    case FE_INT:
    case FE_FLOAT:
    case FE_BOOL: return 0;
    case FE_NAME:
        if (fe_map_get(&S->names, e->name) || fe_map_get(&C->inputs, e->name) ||
            fe_find_const(C->P, e->name))
            return 0;
        ERR(C, e->loc, "unknown name '%s'", e->name);
        return -1;
    case FE_ADD:
    case FE_MUL:
    case FE_NEG:
        for (fe_arg *a = e->args; a; a = a->next)
            if (check_expr(C, S, a->value)) return -1;
        return 0;
    case FE_CALL: return check_call(C, S, e);
    }
    return 0;
}

/* `a, b = value`: value must be a split call; each name once. */
static int check_targets(checker *C, const fe_stmt *s) {
    const fe_expr *v = s->value;
    if (v->kind != FE_CALL || !v->op || v->op->id != FE_OP_SPLIT) {
        ERR(C, v->loc, "only split yields several values; '%s' is assigned one",
            v->kind == FE_CALL ? v->name : "an expression");
        return -1;
    }
    for (const fe_ident *t = s->targets; t; t = t->next)
        for (const fe_ident *u = t->next; u; u = u->next)
            if (!strcmp(t->name, u->name)) {
                ERR(C, u->loc, "'%s' is assigned twice in one statement", u->name);
                return -1;
            }
    return 0;
}

/* A repeat's body runs in the enclosing scope: its names are defined
 * after it (elaboration reports one read when the count was 0). */
static int check_stmts(checker *C, scope *S, fe_stmt *body) {
    for (fe_stmt *s = body; s; s = s->next) {
        if (s->count) {
            if (check_expr(C, S, s->count) || check_stmts(C, S, s->body)) return -1;
            continue;
        }
        C->tuple_call = s->targets ? s->value : NULL;
        int bad = check_expr(C, S, s->value) || (s->targets && check_targets(C, s));
        C->tuple_call = NULL;
        if (bad) return -1;
        fe_ident one = {NULL, s->name, s->loc};
        for (const fe_ident *t = s->targets ? s->targets : &one; t; t = t->next) {
            if (!fe_map_get(&S->names, t->name) && fe_find_const(C->P, t->name)) {
                ERR(C, t->loc, "cannot assign to constant '%s'", t->name);
                return -1;
            }
            if (!fe_map_get(&S->names, t->name) && fe_map_get(&C->inputs, t->name)) {
                ERR(C, t->loc, "cannot assign to input '%s'", t->name);
                return -1;
            }
            fe_map_put(&C->P->arena, &S->names, t->name, s);
        }
    }
    return 0;
}

static int check_bodies(checker *C) {
    for (fe_block *b = C->P->blocks; b; b = b->next) {
        scope S = {0};
        for (fe_ident *p = b->params; p; p = p->next)
            fe_map_put(&C->P->arena, &S.names, p->name, p);
        if (check_stmts(C, &S, b->body)) return -1;
        if (!b->ret) {
            ERR(C, b->loc, "block '%s' has no return statement", b->name);
            return -1;
        }
        if (check_expr(C, &S, b->ret)) return -1;
    }
    fe_network *n = C->P->networks;
    scope S = {0};
    if (check_stmts(C, &S, n->body)) return -1;
    if (!fe_map_get(&S.names, "loss")) {
        ERR(C, n->loc, "network '%s' does not assign 'loss'", n->name);
        return -1;
    }
    return 0;
}

/* ---- recursion ------------------------------------------------------------ */

typedef struct {
    checker *C;
    const fe_block **path;
    int depth;
} dfs_state;

static int visit_block(dfs_state *D, fe_block *b);

static int visit_expr(dfs_state *D, const fe_expr *e) {
    if (e->kind != FE_CALL && e->kind != FE_ADD && e->kind != FE_MUL && e->kind != FE_NEG) return 0;
    for (const fe_arg *a = e->args; a; a = a->next)
        if (visit_expr(D, a->value)) return -1;
    if (e->kind != FE_CALL || !e->block) return 0;
    fe_block *callee = (fe_block *)e->block;
    if (callee->mark == 1) {
        if (callee == D->path[D->depth - 1]) {
            ERR(D->C, e->loc, "block '%s' calls itself", callee->name);
            return -1;
        }
        /* Spell the cycle out: a -> b -> a. */
        char msg[256];
        size_t used = 0;
        int start = D->depth - 1;
        while (D->path[start] != callee) start--;
        for (int i = start; i < D->depth && used < sizeof msg; i++)
            used += (size_t)snprintf(msg + used, sizeof msg - used, "%s -> ", D->path[i]->name);
        if (used < sizeof msg) snprintf(msg + used, sizeof msg - used, "%s", callee->name);
        ERR(D->C, e->loc, "recursive blocks: %s", msg);
        return -1;
    }
    if (callee->mark == 0) {
        if (D->depth >= FE_MAX_CALL_DEPTH) {
            ERR(D->C, e->loc, "block calls nested too deeply (more than %d levels)",
                FE_MAX_CALL_DEPTH);
            return -1;
        }
        return visit_block(D, callee);
    }
    return 0;
}

static int visit_stmts(dfs_state *D, const fe_stmt *body) {
    for (const fe_stmt *s = body; s; s = s->next)
        if (s->count ? visit_expr(D, s->count) || visit_stmts(D, s->body) : visit_expr(D, s->value))
            return -1;
    return 0;
}

static int visit_block(dfs_state *D, fe_block *b) {
    b->mark = 1;
    D->path[D->depth++] = b;
    if (visit_stmts(D, b->body)) return -1;
    if (visit_expr(D, b->ret)) return -1;
    D->depth--;
    b->mark = 2;
    return 0;
}

static int check_recursion(checker *C) {
    const fe_block *path[FE_MAX_CALL_DEPTH + 1];
    dfs_state D = {C, path, 0};
    for (fe_block *b = C->P->blocks; b; b = b->next)
        if (b->mark == 0 && visit_block(&D, b)) return -1;
    return 0;
}

int fe_check(fe_program *P) {
    checker C = {P, {0}, {0}, NULL};
    if (fe_check_consts(P) || check_inputs(&C) || check_block_headers(&C) || check_sections(&C) ||
        check_bodies(&C) || check_recursion(&C) || fe_check_train(P, &C.inputs))
        return -1;
    return 0;
}
