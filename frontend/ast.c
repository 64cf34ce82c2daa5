/* frontend/ast.c — arena, diagnostics and the tree builders the parser's
 * actions call; the word arguments of operators (fe_word_arg). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "base/err.h"

/* ---- arena -------------------------------------------------------------- */

struct fe_chunk {
    fe_chunk *next;
    size_t used, cap;
    _Alignas(max_align_t) unsigned char data[];
};

enum { CHUNK_SIZE = 64 * 1024 };

void *fe_alloc(fe_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    fe_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_SIZE ? n : CHUNK_SIZE;
        c = malloc(sizeof *c + cap);
        BASE_CHECK_ALLOC(c);
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *fe_strndup(fe_arena *a, const char *s, size_t n) {
    char *p = fe_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void fe_arena_free(fe_arena *a) {
    for (fe_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
}

/* ---- map ------------------------------------------------------------------ */

static size_t hash(const char *s) {
    size_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

void *fe_map_get(const fe_map *m, const char *key) {
    if (!m->cap) return NULL;
    for (size_t i = hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->slot[i].key) return NULL;
        if (!strcmp(m->slot[i].key, key)) return m->slot[i].val;
    }
}

static void put(fe_map *m, const char *key, void *val) {
    size_t i = hash(key) & (m->cap - 1);
    while (m->slot[i].key && strcmp(m->slot[i].key, key)) i = (i + 1) & (m->cap - 1);
    if (!m->slot[i].key) m->n++;
    m->slot[i].key = key;
    m->slot[i].val = val;
}

void fe_map_put(fe_arena *a, fe_map *m, const char *key, void *val) {
    if (2 * (m->n + 1) > m->cap) { /* keep the load under one half */
        fe_map old = *m;
        m->cap = old.cap ? 2 * old.cap : 16;
        m->slot = fe_alloc(a, m->cap * sizeof *m->slot);
        m->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.slot[i].key) put(m, old.slot[i].key, old.slot[i].val);
    }
    put(m, key, val);
}

/* ---- diagnostics -------------------------------------------------------- */

void fe_error(fe_diag *d, fe_loc loc, const char *fmt, ...) {
    if (d->nerrors++) return;
    va_list ap;
    va_start(ap, fmt);
    if (d->msg && d->msglen) {
        int used = loc.line > 0 ? snprintf(d->msg, d->msglen, "%s:%d:%d: error: ", d->path,
                                           loc.line, loc.col)
                                : snprintf(d->msg, d->msglen, "%s: error: ", d->path);
        if (used >= 0 && (size_t)used < d->msglen)
            vsnprintf(d->msg + used, d->msglen - (size_t)used, fmt, ap);
    } else {
        if (loc.line > 0)
            fprintf(stderr, "%s:%d:%d: error: ", d->path, loc.line, loc.col);
        else
            fprintf(stderr, "%s: error: ", d->path);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

/* ---- tree builders ------------------------------------------------------ */

fe_expr *fe_new_literal(fe_program *P, fe_expr_kind kind, fe_loc loc, int64_t i, double f) {
    fe_expr *e = fe_alloc(&P->arena, sizeof *e);
    e->kind = kind;
    e->loc = loc;
    e->depth = 1;
    e->i = i;
    e->f = f;
    return e;
}

fe_expr *fe_new_name(fe_program *P, const char *name, fe_loc loc) {
    fe_expr *e = fe_new_literal(P, FE_NAME, loc, 0, 0);
    e->name = name;
    return e;
}

/* Depth is bounded here so that the recursive checker and elaborator can
 * never run out of stack, whatever the input. */
static int deep(fe_program *P, fe_expr *e, int depth) {
    e->depth = depth;
    if (depth <= FE_MAX_EXPR_DEPTH) return 0;
    fe_error(&P->diag, e->loc, "expression nested too deeply (more than %d levels)",
             FE_MAX_EXPR_DEPTH);
    return 1;
}

/* e takes args: their count, and a depth one more than the deepest. */
static fe_expr *with_args(fe_program *P, fe_expr *e, fe_arg *args) {
    e->args = args;
    int depth = 0;
    for (fe_arg *a = args; a; a = a->next) {
        e->nargs++;
        if (a->value->depth > depth) depth = a->value->depth;
    }
    return deep(P, e, depth + 1) ? NULL : e;
}

fe_expr *fe_new_call(fe_program *P, const char *name, fe_loc loc, fe_arg *args) {
    fe_expr *e = fe_new_literal(P, FE_CALL, loc, 0, 0);
    e->name = name;
    return with_args(P, e, args);
}

fe_expr *fe_new_sum(fe_program *P, fe_arg *terms) {
    if (!terms->next) return terms->value;
    return with_args(P, fe_new_literal(P, FE_ADD, terms->next->key_loc, 0, 0), terms);
}

fe_expr *fe_new_product(fe_program *P, fe_arg *terms) {
    if (!terms->next) return terms->value;
    return with_args(P, fe_new_literal(P, FE_MUL, terms->next->key_loc, 0, 0), terms);
}

fe_expr *fe_new_neg(fe_program *P, fe_loc loc, fe_expr *e) {
    if (e->kind == FE_INT || e->kind == FE_FLOAT) { /* `-3` stays the literal -3 */
        e->i = -e->i;
        e->f = -e->f;
        if (e->text) e->text = e->text[0] == '-' ? e->text + 1 : fe_negated(P, e->text);
        e->loc = loc;
        return e;
    }
    fe_expr *n = fe_new_literal(P, FE_NEG, loc, 0, 0);
    return with_args(P, n, fe_new_arg(P, NULL, loc, e));
}

fe_stmt *fe_new_repeat(fe_program *P, fe_loc loc, fe_expr *count, fe_stmt *body) {
    fe_stmt *s = fe_new_stmt(P, NULL, loc, NULL);
    s->count = count;
    s->body = body;
    s->depth = 1;
    for (const fe_stmt *b = body; b; b = b->next)
        if (b->depth + 1 > s->depth) s->depth = b->depth + 1;
    if (s->depth <= FE_MAX_EXPR_DEPTH) return s;
    fe_error(&P->diag, loc, "repeat nested too deeply (more than %d levels)", FE_MAX_EXPR_DEPTH);
    return NULL;
}

fe_num *fe_new_num_expr(fe_program *P, fe_expr *e) {
    fe_num *n = fe_new_num(P, e->loc, 0, 0, 0);
    n->expr = e;
    return n;
}

fe_arg *fe_new_arg(fe_program *P, const char *key, fe_loc key_loc, fe_expr *value) {
    fe_arg *a = fe_alloc(&P->arena, sizeof *a);
    a->key = key;
    a->key_loc = key_loc;
    a->value = value;
    a->slot = -1;
    return a;
}

fe_stmt *fe_new_stmt(fe_program *P, const char *name, fe_loc loc, fe_expr *value) {
    fe_stmt *s = fe_alloc(&P->arena, sizeof *s);
    s->name = name;
    s->loc = loc;
    s->value = value;
    return s;
}

fe_stmt *fe_new_tuple_stmt(fe_program *P, fe_ident *targets, fe_expr *value) {
    fe_stmt *s = fe_new_stmt(P, targets->name, targets->loc, value);
    s->targets = targets;
    return s;
}

fe_ident *fe_new_ident(fe_program *P, const char *name, fe_loc loc) {
    fe_ident *id = fe_alloc(&P->arena, sizeof *id);
    id->name = name;
    id->loc = loc;
    return id;
}

fe_num *fe_new_num(fe_program *P, fe_loc loc, int is_float, int64_t i, double f) {
    fe_num *n = fe_alloc(&P->arena, sizeof *n);
    n->loc = loc;
    n->is_float = is_float;
    n->i = i;
    n->f = f;
    return n;
}

const char *fe_negated(fe_program *P, const char *text) {
    size_t n = strlen(text);
    char *s = fe_alloc(&P->arena, n + 2);
    s[0] = '-';
    memcpy(s + 1, text, n + 1);
    return s;
}

void fe_int_hint(int is_float, double f, char *buf, size_t n) {
    buf[0] = 0;
    if (is_float && f == floor(f) && fabs(f) < 1e15)
        snprintf(buf, n, " (write %.0f: an integer has no '.' or exponent)", f);
}

fe_kw *fe_new_kw(fe_program *P, const char *key, fe_loc loc, fe_num *value) {
    fe_kw *k = fe_alloc(&P->arena, sizeof *k);
    memset(k, 0, sizeof *k); /* FE_KW_NUM; the parser sets the other kinds */
    k->key = key;
    k->loc = loc;
    k->value = value;
    return k;
}

fe_pair *fe_new_pair(fe_program *P, fe_num *key, fe_num *value) {
    fe_pair *p = fe_alloc(&P->arena, sizeof *p);
    p->key = key;
    p->value = value;
    return p;
}

fe_titem *fe_new_titem(fe_program *P, fe_titem_kind kind, fe_loc loc) {
    fe_titem *t = fe_alloc(&P->arena, sizeof *t);
    t->kind = kind;
    t->loc = loc;
    return t;
}

/* Declarations are appended to per-kind lists in source order (tail
 * pointers keep that linear); duplicates are the checker's business, so
 * that it can report them in order. */
#define APPEND_TAIL(P, list, node)           \
    do {                                     \
        if ((P)->list##_last)                \
            (P)->list##_last->next = (node); \
        else                                 \
            (P)->list = (node);              \
        (P)->list##_last = (node);           \
    } while (0)

void fe_add_input(fe_program *P, const char *name, fe_loc loc, fe_num *dims, fe_num *classes) {
    fe_input *in = fe_alloc(&P->arena, sizeof *in);
    in->name = name;
    in->loc = loc;
    in->dims = dims;
    in->classes = classes;
    APPEND_TAIL(P, inputs, in);
}

/* `input NAME int[dims]`: `int` is a plain word, not a keyword, so that
 * it stays free as a name everywhere else. */
void fe_add_int_input(fe_program *P, const char *name, fe_loc loc, const char *type, fe_loc tloc,
                      fe_num *dims) {
    if (strcmp(type, "int")) {
        fe_error(&P->diag, tloc, "unknown input type '%s' (int[...], class(K) or [...])", type);
        return;
    }
    fe_add_input(P, name, loc, dims, NULL);
    P->inputs_last->integer = 1;
}

void fe_add_block(fe_program *P, const char *name, fe_loc loc, fe_ident *params, fe_stmt *body,
                  fe_expr *ret) {
    fe_block *b = fe_alloc(&P->arena, sizeof *b);
    b->name = name;
    b->loc = loc;
    b->params = params;
    for (fe_ident *p = params; p; p = p->next) b->nparams++;
    b->body = body;
    b->ret = ret;
    APPEND_TAIL(P, blocks, b);
}

void fe_add_const(fe_program *P, const char *name, fe_loc loc, fe_expr *value) {
    fe_const *c = fe_alloc(&P->arena, sizeof *c);
    c->name = name;
    c->loc = loc;
    c->value = value;
    APPEND_TAIL(P, consts, c);
}

void fe_add_network(fe_program *P, const char *name, fe_loc loc, fe_stmt *body) {
    fe_network *n = fe_alloc(&P->arena, sizeof *n);
    n->name = name;
    n->loc = loc;
    n->body = body;
    APPEND_TAIL(P, networks, n);
}

void fe_add_train(fe_program *P, fe_loc loc, fe_titem *items) {
    fe_train_sec *t = fe_alloc(&P->arena, sizeof *t);
    t->loc = loc;
    t->items = items;
    APPEND_TAIL(P, trains, t);
}

void fe_push_open(fe_program *P, const char *what, const char *name, fe_loc loc) {
    if (P->nopen < FE_MAX_OPEN) P->open[P->nopen] = (fe_open){what, name, loc};
    P->nopen++;
}

void fe_pop_open(fe_program *P) {
    if (P->nopen > 0) P->nopen--;
}

/* ---- word arguments (FE_ARG_WORD) ---------------------------------------- */

int fe_word_arg(const fe_opdef *op, int slot, const fe_expr *arg, char *msg, size_t n) {
    const char *set = op->arg[slot].words;
    int index = 0;
    for (const char *w = set; arg->kind == FE_NAME; index++) {
        size_t len = strcspn(w, "|");
        if (strlen(arg->name) == len && !strncmp(w, arg->name, len)) return index;
        if (!w[len]) break;
        w += len + 1;
    }
    char list[96];
    size_t at = 0;
    for (const char *c = set; *c && at + 3 < sizeof list; c++) {
        if (*c == '|') list[at++] = ',';
        list[at++] = *c == '|' ? ' ' : *c;
    }
    list[at] = 0;
    snprintf(msg, n, "argument '%s' of '%s' must be one of %s", op->arg[slot].name, op->name, list);
    return -1;
}
