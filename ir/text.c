/* ir/text.c — reading the IR text form back (ir/text.h; writing it is
 * text_write.c). The reader works a line at a time with a cursor; every
 * failure goes through fail(), which prefixes FILE:LINE:COL. */
#include "ir/text.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "base/parse.h"
#include "ir/internal.h"
#include "ir/validate.h"

/* Bits of ir_text_parse's seen: the keyword lines met (comment_line's kws
 * order), programs named at 8 + slot. */
#define VERSION_SEEN (1u << 0)
#define END_SEEN     (1u << 4)
/* Integer attributes, dimensions: the plan reader's bound (PLAN_MAX_VALUE, format/plan_internal.h). */
#define MAX_VALUE    ((int64_t)1 << 40)

static const char *const init_names[5] = {"zero", "one", "xavier", "normal", "scaled"};

void ir_text_free(ir_text_file *t) {
    for (int k = 0; k < 2; k++) ir_free(t->graph[k]);
    t->graph[0] = t->graph[1] = NULL;
}

/* ---- reading: the cursor ----------------------------------------------- */

typedef struct {
    const char *name;
    const char *text, *end;
    const char *p, *line_start, *line_end; /* cursor, the current line */
    int line;
    char *err;
    size_t errlen;
    /* for ir_validate's messages: each program's node lines and `# graph`
     * line, the `# train` line */
    int *lines[2], graph_line[2], train_line;
    const char *train_at, *train_end;
} rd;

__attribute__((format(printf, 3, 4))) static int fail(rd *r, const char *at, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return base_fail(r->err, r->errlen, "%s:%d:%d: error: %s", r->name, r->line,
                     (int)(at - r->line_start) + 1, msg);
}

static void ws(rd *r) {
    while (r->p < r->line_end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r')) r->p++;
}

static int word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '+' || c == '-';
}

/* What is at the cursor, for "unexpected X": a word, one character, or the
 * end of the line (of the file, when the file ends without a newline). */
static const char *what_is_here(rd *r, char *buf, size_t n) {
    ws(r);
    if (r->p >= r->line_end) return r->line_end >= r->end ? "end of file" : "end of line";
    size_t len = 0;
    while (r->p + len < r->line_end && len < 24 && word_char(r->p[len])) len++;
    if (!len) len = 1;
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "'");
    for (size_t i = 0; i < len && k + 6 < n; i++) {
        unsigned char c = (unsigned char)r->p[i];
        k += (size_t)(c < 0x20 || c >= 0x7f ? snprintf(buf + k, n - k, "\\x%02x", c)
                                            : snprintf(buf + k, n - k, "%c", c));
    }
    snprintf(buf + k, n - k, "'");
    return buf;
}

static int expected(rd *r, const char *what) {
    char buf[64];
    const char *here = what_is_here(r, buf, sizeof buf);
    return fail(r, r->p, "unexpected %s, expected %s", here, what);
}

/* Consumes s (after blanks) when it is next. */
static int lit(rd *r, const char *s) {
    ws(r);
    size_t n = strlen(s);
    if ((size_t)(r->line_end - r->p) < n || memcmp(r->p, s, n) != 0) return 0;
    r->p += n;
    return 1;
}

static int need(rd *r, const char *s, const char *what) {
    return lit(r, s) ? 0 : expected(r, what);
}

/* A run of word characters into buf; 0 chars is "expected what". */
static int word(rd *r, char *buf, size_t n, const char *what) {
    ws(r);
    size_t len = 0;
    while (r->p + len < r->line_end && word_char(r->p[len])) len++;
    if (!len) return expected(r, what);
    if (len >= n) return fail(r, r->p, "%s too long", what);
    memcpy(buf, r->p, len);
    buf[len] = 0;
    r->p += len;
    return 0;
}

static int int_value(rd *r, int64_t lo, int64_t hi, const char *what, int64_t *out) {
    char buf[32];
    ws(r);
    const char *at = r->p;
    if (word(r, buf, sizeof buf, what)) return -1;
    int64_t v;
    if (base_parse_i64(buf, &v) || buf[0] == '+' || buf[0] == ' ')
        return fail(r, at, "expected %s, got '%s'", what, buf);
    if (v < lo || v > hi)
        return fail(r, at, "%s %" PRId64 " out of range %" PRId64 "..%" PRId64, what, v, lo, hi);
    *out = v;
    return 0;
}

static int int32_value(rd *r, int lo, int hi, const char *what, int *out) {
    int64_t v;
    if (int_value(r, lo, hi, what, &v)) return -1;
    *out = (int)v;
    return 0;
}

static int float_value(rd *r, const char *what, double *out) {
    char buf[48];
    ws(r);
    const char *at = r->p;
    if (word(r, buf, sizeof buf, what)) return -1;
    double v;
    if (base_parse_f64(buf, &v) || !isfinite(v))
        return fail(r, at, "expected %s (a finite number), got '%s'", what, buf);
    *out = v;
    return 0;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* "...", with \" \\ \xHH escapes (ir_print_name's), into buf. */
static int string(rd *r, char *buf, size_t n, const char *what) {
    ws(r);
    if (r->p >= r->line_end || *r->p != '"') return expected(r, what);
    const char *start = r->p++;
    size_t len = 0;
    for (;;) {
        if (r->p >= r->line_end)
            return fail(r, r->p, "unexpected end of %s, expected '\"' to end %s",
                        r->line_end >= r->end ? "file" : "line", what);
        unsigned char c = (unsigned char)*r->p;
        if (c == '"') break;
        if (c < 0x20 || c == 0x7f)
            return fail(r, r->p, "%s: control character in a string (write \\x%02x)", what, c);
        if (c == '\\') {
            const char *esc = r->p;
            if (r->p + 1 < r->line_end && (r->p[1] == '"' || r->p[1] == '\\')) {
                c = (unsigned char)r->p[1];
                r->p += 2;
            } else if (r->p + 3 < r->line_end && r->p[1] == 'x' && hex_digit(r->p[2]) >= 0 &&
                       hex_digit(r->p[3]) >= 0) {
                c = (unsigned char)(hex_digit(r->p[2]) * 16 + hex_digit(r->p[3]));
                r->p += 4;
                if (!c) return fail(r, esc, "%s: \\x00 in a string", what);
            } else {
                return fail(r, esc, "%s: bad escape (\\\", \\\\ or \\xHH)", what);
            }
        } else {
            r->p++;
        }
        if (len + 1 >= n) return fail(r, start, "%s longer than %zu bytes", what, n - 1);
        buf[len++] = (char)c;
    }
    r->p++;
    buf[len] = 0;
    /* Names end up in messages: what a plan refuses (a control character,
     * also as \xHH or a UTF-8 C1) is refused here, where it has a line. */
    if (base_has_control(buf, len))
        return fail(r, start,
                    "%s: control character in a string (\\xHH below \\x20, \\x7f or a UTF-8 C1)",
                    what);
    return 0;
}

static int end_of_line(rd *r) {
    ws(r);
    return r->p < r->line_end ? expected(r, "end of line") : 0;
}

/* ---- reading: nodes ------------------------------------------------------ */

typedef struct {
    ir_graph *g;
    int which;      /* program slot */
    int declared;   /* N of `# graph: N nodes` */
    int graph_line; /* the line of that header */
    int *lines;     /* each node's line, for ir_verify's messages */
} open_graph;

static int name_token(rd *r, char *buf, size_t n) {
    ws(r);
    if (r->p < r->line_end && *r->p == '"') return string(r, buf, n, "a name");
    size_t len = 0;
    while (r->p + len < r->line_end &&
           (word_char(r->p[len]) || r->p[len] == ':' || r->p[len] == '/'))
        len++;
    if (!len) return expected(r, "a name");
    if (len >= n) return fail(r, r->p, "a name longer than %zu bytes", n - 1);
    memcpy(buf, r->p, len);
    buf[len] = 0;
    r->p += len;
    return 0;
}

static int type_of(rd *r, ir_type *t) {
    ws(r);
    const char *start = r->p;
    if (need(r, "[", "'[' and the type's dimensions")) return -1;
    memset(t, 0, sizeof *t);
    do {
        if (t->ndim == IR_MAX_DIMS) return fail(r, r->p, "more than %d dimensions", IR_MAX_DIMS);
        if (int_value(r, 1, MAX_VALUE, "a dimension", &t->dim[t->ndim])) return -1;
        t->ndim++;
    } while (lit(r, ","));
    if (need(r, "]", "',' or ']'")) return -1;
    t->dtype = IR_F32;
    if (r->p < r->line_end && *r->p == ':') { /* no blank: "[4]:i32" */
        r->p++;
        char d[16];
        const char *at = r->p;
        if (word(r, d, sizeof d, "a dtype (f32, bf16, i32)")) return -1;
        if (!strcmp(d, "f32"))
            t->dtype = IR_F32;
        else if (!strcmp(d, "bf16"))
            t->dtype = IR_BF16;
        else if (!strcmp(d, "i32"))
            t->dtype = IR_I32;
        else
            return fail(r, at, "unknown dtype '%s' (f32, bf16, i32)", d);
    }
    if (ir_numel(t) > IR_MAX_NUMEL) return fail(r, start, "tensor has more than 2^40 elements");
    return 0;
}

static int attrs_of(rd *r, ir_node *n) {
    const ir_op_info *info = &ir_ops[n->op];
    char want[32], got[32], what[64];
    for (int i = 0; i < ir_op_num_iattrs(n->op); i++) {
        ir_op_attr_name(n->op, 0, i, want, sizeof want);
        if (n->op == IR_OP_INPUT && !lit(r, "classes=")) continue; /* classes=0 is not printed */
        if (n->op == IR_OP_INPUT) {
            if (int_value(r, 1, MAX_VALUE, "a class count", &n->iattr[0])) return -1;
            continue;
        }
        ws(r);
        const char *at = r->p;
        snprintf(what, sizeof what, "attribute '%s' of %s", want, info->name);
        if (word(r, got, sizeof got, what)) return -1;
        if (strcmp(got, want)) return fail(r, at, "expected %s, got '%s'", what, got);
        if (need(r, "=", "'='")) return -1;
        if (ir_is_persistent(n->op)) {
            at = r->p;
            if (word(r, got, sizeof got, "an initialiser (zero, one, xavier, normal, scaled)"))
                return -1;
            int k = 0;
            while (k < 5 && strcmp(got, init_names[k])) k++;
            if (k == 5)
                return fail(r, at, "unknown initialiser '%s' (zero, one, xavier, normal, scaled)",
                            got);
            n->iattr[0] = k;
        } else if (int_value(r, -MAX_VALUE, MAX_VALUE, "an integer", &n->iattr[i])) {
            return -1;
        }
    }
    for (int i = 0; i < ir_op_num_fattrs(n->op); i++) {
        ir_op_attr_name(n->op, 1, i, want, sizeof want);
        ws(r);
        const char *at = r->p;
        snprintf(what, sizeof what, "attribute '%s' of %s", want, info->name);
        if (word(r, got, sizeof got, what)) return -1;
        if (strcmp(got, want)) return fail(r, at, "expected %s, got '%s'", what, got);
        if (need(r, "=", "'='") || float_value(r, "a number", &n->fattr[i])) return -1;
    }
    return 0;
}

static int flags_of(rd *r, unsigned *flags) {
    do {
        char f[16];
        ws(r);
        const char *at = r->p;
        if (word(r, f, sizeof f, "a flag (" IR_FLAG_NAME_LIST ")")) return -1;
        int k = 0;
        while (k < 32 && (!ir_flag_name(k) || strcmp(f, ir_flag_name(k)))) k++;
        if (k < 32) {
            *flags |= 1u << k;
        } else {
            char *e;
            unsigned long v = strncmp(f, "0x", 2) ? 0 : strtoul(f + 2, &e, 16);
            if (!v || *e || v > 0xffffffffu || (v & IR_NAMED_FLAGS))
                return fail(r, at, "unknown flag '%s' (" IR_FLAG_NAME_LIST ")", f);
            *flags |= (unsigned)v;
        }
    } while (lit(r, ","));
    return need(r, "]", "',' or ']'");
}

/* One node line, r->p at its '%'. */
static int node_line(rd *r, open_graph *o) {
    ir_graph *g = o->g;
    ir_node n;
    memset(&n, 0, sizeof n);
    const char *at = r->p;
    int64_t idx;
    r->p++;
    if (int_value(r, 0, IR_TEXT_MAX_NODES, "a node number", &idx)) return -1;
    if (idx != g->n) return fail(r, at, "expected node %%%d, got %%%" PRId64, g->n, idx);
    if (g->n >= o->declared)
        return fail(r, at, "more nodes than the %d of '# graph: %d nodes'", o->declared,
                    o->declared);
    if (need(r, "=", "'='")) return -1;
    char op[40];
    ws(r);
    at = r->p;
    if (word(r, op, sizeof op, "an op")) return -1;
    int k = ir_op_by_name(op);
    if (k < 0) return fail(r, at, "unknown op '%s'", op);
    n.op = (ir_op)k;
    const ir_op_info *info = &ir_ops[k];
    if (ir_is_source(n.op) && string(r, n.name, sizeof n.name, "the source's quoted name"))
        return -1;
    for (;;) {
        ws(r);
        const char *in = r->p;
        if (!lit(r, "%")) break;
        int64_t ref;
        if (int_value(r, 0, IR_TEXT_MAX_NODES, "a node number", &ref)) return -1;
        if (n.ninputs == info->max_arity)
            return fail(r, in, "%s takes %d input%s, got more", info->name, info->max_arity,
                        info->max_arity == 1 ? "" : "s");
        if (ref >= g->n) return fail(r, in, "%%%" PRId64 " is not defined before %%%d", ref, g->n);
        n.input[n.ninputs++] = (int)ref;
    }
    if (n.ninputs < info->min_arity) {
        if (info->min_arity == info->max_arity)
            return fail(r, r->p, "%s takes %d input%s, got %d", info->name, info->min_arity,
                        info->min_arity == 1 ? "" : "s", n.ninputs);
        return fail(r, r->p, "%s takes %d to %d inputs, got %d", info->name, info->min_arity,
                    info->max_arity, n.ninputs);
    }
    if (attrs_of(r, &n) || need(r, ":", "':' and the type")) return -1;
    ws(r);
    const char *type_at = r->p;
    if (type_of(r, &n.type)) return -1;
    int cnhw = lit(r, "cnhw"); /* ir_dump's mark of IR_FLAG_CNHW */
    if (cnhw && r->p < r->line_end && *r->p != ' ') return expected(r, "a space after 'cnhw'");
    if (lit(r, "@g") && int32_value(r, 1, IR_TEXT_MAX_NODES, "a group number", &n.group)) return -1;
    if (lit(r, "loc(") && (int32_value(r, 0, 1 << 30, "a line", &n.line) || need(r, ":", "':'") ||
                           int32_value(r, 0, 1 << 30, "a column", &n.col) || need(r, ")", "')'")))
        return -1;
    if (lit(r, "[") && flags_of(r, &n.flags)) return -1;
    if (cnhw) n.flags |= IR_FLAG_CNHW;
    ws(r);
    if (lit(r, "#")) {
        if (ir_is_source(n.op))
            return fail(r, r->p - 1, "a source's name is the quoted one after its op");
        if (name_token(r, n.name, sizeof n.name)) return -1;
    }
    if (end_of_line(r)) return -1;
    if (!ir_is_source(n.op)) { /* the shape rule, at this line rather than at the end */
        ir_type t;
        char why[256], a[96], b[96];
        if (ir_infer_type(g, &n, &t, why, sizeof why)) return fail(r, at, "%s", why);
        if (!ir_type_same_shape(&t, &n.type))
            return fail(r, type_at, "type %s, but %s's shape rule says %s",
                        ir_type_str(&n.type, a, sizeof a), info->name,
                        ir_type_str(&t, b, sizeof b));
    }
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        if (cap > o->declared) cap = o->declared;
        g->nodes = realloc(g->nodes, (size_t)cap * sizeof *g->nodes);
        o->lines = realloc(o->lines, (size_t)cap * sizeof *o->lines);
        BASE_CHECK_ALLOC(g->nodes);
        BASE_CHECK_ALLOC(o->lines);
        g->cap = cap;
    }
    o->lines[g->n] = r->line;
    g->nodes[g->n++] = n;
    return 0;
}

/* ---- reading: the header and the file ---------------------------------- */

static int key(rd *r, const char *k) {
    char want[40];
    snprintf(want, sizeof want, "%s=", k);
    if (lit(r, want)) return 0;
    snprintf(want, sizeof want, "'%s='", k);
    return expected(r, want);
}

static const char *key_at(const rd *r, const char *field, const char *at);

/* The value of field f after its key. */
static int train_value(rd *r, ir_train *t, const ir_train_field *f) {
    void *v = ir_train_ptr(t, f);
    switch (f->kind) {
    case IR_TK_I32: return int32_value(r, f->lo, f->hi, f->key, v);
    case IR_TK_F64: return float_value(r, f->key, v);
    case IR_TK_F64X3:
        for (int i = 0; i < 3; i++)
            if ((i && need(r, ",", "','")) || float_value(r, f->key, &((double *)v)[i])) return -1;
        return 0;
    case IR_TK_STR: {
        char what[48];
        snprintf(what, sizeof what, "a %s name", f->key); /* "a dataset name" */
        return string(r, v, f->size, what);
    }
    case IR_TK_ENUM: {
        const ir_enum_words *e = ir_enum_words_of(f);
        char w[32];
        const char *at = r->p;
        if (word(r, w, sizeof w, e->what)) return -1;
        for (int i = e->first; i <= e->last; i++)
            if (!strcmp(w, e->names[i])) {
                *(int *)v = i;
                return 0;
            }
        return fail(r, at, "unexpected '%s', expected %s", w, e->list);
    }
    case IR_TK_LR:
        t->lr_steps = 0;
        do {
            if (t->lr_steps == IR_MAX_LR_STEPS)
                return fail(r, r->p, "more than %d lr steps", IR_MAX_LR_STEPS);
            if (int32_value(r, 0, IR_MAX_EPOCHS, "an epoch", &t->lr_epoch[t->lr_steps]) ||
                need(r, ":", "':'") || float_value(r, "an lr", &t->lr_value[t->lr_steps]))
                return -1;
            t->lr_steps++;
        } while (lit(r, ","));
        return 0;
    case IR_TK_LR_PART: break; /* with its LR field */
    }
    return 0;
}

/* `# train ...`, r->p after "train": every field print_train writes, in
 * its order; an optional part (ir/ir.h's `when`) is there when its first
 * key is, else it keeps the defaults; a NONZERO field is a part alone. */
static int train_line(rd *r, ir_train *t) {
    const char *start = r->p;
    ir_train_defaults(t);
    const ir_train_field *f, *prev = NULL;
    int absent = -1; /* the `when` of an optional part that is not there */
    for (int rank = 0; (f = ir_train_field_at(rank)); prev = f, rank++) {
        int alone = f->when == IR_TW_NONZERO;
        if ((int)f->when == absent && !alone) continue;
        absent = -1;
        if (f->when != IR_TW_ALWAYS && (!prev || prev->when != f->when || alone)) {
            char first[40];
            snprintf(first, sizeof first, "%s=", f->key);
            if (!lit(r, first)) {
                absent = (int)f->when;
                continue;
            }
        } else if (key(r, f->key)) {
            return -1;
        }
        if (train_value(r, t, f)) return -1;
    }
    if (end_of_line(r)) return -1;
    r->train_line = r->line, r->train_at = r->line_start, r->train_end = r->line_end;
    char why[256];
    const char *field;
    if (ir_train_check_field(t, &field, why, sizeof why))
        return fail(r, key_at(r, field, start), "bad training settings: %s", why);
    return 0;
}

/* Where the `# train` line says field=, else at (the line's settings). */
static const char *key_at(const rd *r, const char *field, const char *at) {
    char want[40];
    snprintf(want, sizeof want, " %s=", field ? field : "");
    size_t n = strlen(want);
    for (const char *q = r->train_at; field && q + n <= r->train_end; q++)
        if (!memcmp(q, want, n)) return q + 1;
    return at;
}

/* A finished graph: all its declared nodes there, and ir_verify content;
 * its messages start "node N" when they can name one. */
static int close_graph(rd *r, open_graph *o, ir_text_file *out, const char *at) {
    if (!o->g) return 0;
    if (o->g->n < o->declared)
        return fail(r, at, "program %s ends after %d of its %d nodes (truncated file?)",
                    ir_text_program_names[o->which], o->g->n, o->declared);
    char why[512];
    if (ir_verify(o->g, why, sizeof why)) {
        int node, line = o->graph_line;
        if (sscanf(why, "node %d", &node) == 1 && node >= 0 && node < o->g->n)
            line = o->lines[node];
        return base_fail(r->err, r->errlen, "%s:%d:1: error: invalid graph: %s", r->name, line,
                         why);
    }
    out->graph[o->which] = o->g;
    o->g = NULL;
    free(r->lines[o->which]);
    r->lines[o->which] = o->lines, r->graph_line[o->which] = o->graph_line;
    o->lines = NULL;
    return 0;
}

/* One `#` line, r->p after the '#'; pending: the program a `# program`
 * line named (-1 none). */
static int comment_line(rd *r, ir_text_file *out, open_graph *o, int *pending, unsigned *seen) {
    ws(r);
    char kw[16];
    size_t len = 0;
    while (r->p + len < r->line_end && len < sizeof kw - 1 &&
           ((r->p[len] >= 'a' && r->p[len] <= 'z') || r->p[len] == '-'))
        kw[len] = r->p[len], len++;
    kw[len] = 0;
    static const char *const kws[] = {"dpc-ir", "model",   "after", "train",
                                      "end",    "program", "graph"};
    int k = 0;
    while (k < 7 && strcmp(kw, kws[k])) k++;
    if (k == 7 || (r->p + len < r->line_end && word_char(r->p[len]))) return 0; /* a comment */
    const char *at = r->p;
    r->p += len;
    if (k < 5 && (*seen & (1u << k))) return fail(r, at, "a second '# %s' line", kws[k]);
    *seen |= 1u << k;
    switch (k) {
    case 4: return end_of_line(r) || close_graph(r, o, out, r->line_start);
    case 0: {
        int64_t v;
        if (int_value(r, 0, INT32_MAX, "a version", &v)) return -1;
        if (v != IR_TEXT_VERSION)
            return fail(r, at, "IR text version %" PRId64 ", this dpc reads version %d", v,
                        IR_TEXT_VERSION);
        return end_of_line(r);
    }
    case 1:
        return string(r, out->model, sizeof out->model, "the model's quoted name") ||
               need(r, "source", "'source'") ||
               string(r, out->source, sizeof out->source, "the quoted source path") ||
               end_of_line(r);
    case 2:
        return need(r, ":", "':'") ||
               word(r, out->after, sizeof out->after, "the name of the last pass run") ||
               end_of_line(r);
    case 3: out->has_train = 1; return train_line(r, &out->train);
    case 5: {
        char p[16];
        const char *pat = (ws(r), r->p);
        if (word(r, p, sizeof p, "train or eval")) return -1;
        int w = !strcmp(p, "train") ? IR_TEXT_TRAIN : !strcmp(p, "eval") ? IR_TEXT_EVAL : -1;
        if (w < 0) return fail(r, pat, "unexpected '%s', expected train or eval", p);
        if (end_of_line(r) || close_graph(r, o, out, r->line_start)) return -1;
        if (out->graph[w] || *pending == w || (*seen & (1u << (8 + w))))
            return fail(r, pat, "a second program %s", p);
        *seen |= 1u << (8 + w);
        *pending = w;
        return 0;
    }
    default: {
        int64_t nodes;
        if (need(r, ":", "':'") || int_value(r, 0, IR_TEXT_MAX_NODES, "a node count", &nodes) ||
            need(r, "nodes", "'nodes'") || end_of_line(r) || close_graph(r, o, out, r->line_start))
            return -1;
        int w = *pending;
        if (w < 0) {
            if (out->graph[IR_TEXT_TRAIN] || (*seen & (1u << 8)))
                return fail(r, at, "a second graph needs a '# program eval' line before it");
            w = IR_TEXT_TRAIN;
            *seen |= 1u << 8;
        }
        *pending = -1;
        o->g = ir_new();
        o->which = w;
        o->declared = (int)nodes;
        o->graph_line = r->line;
        return 0;
    }
    }
}

/* ir_validate on a whole dump (one with its `# train` line), the message
 * at the line and column the refused value is on. */
static int validate(rd *r, const ir_text_file *out) {
    ir_where w;
    char why[512];
    if (!ir_validate(&out->train, out->graph[0], out->graph[1], &w, why, sizeof why)) return 0;
    int line = r->train_line, col = 1;
    if (w.program < 0)
        col = (int)(key_at(r, w.field, r->train_at) - r->train_at) + 1;
    else if (w.node >= 0 && r->lines[w.program])
        line = r->lines[w.program][w.node];
    else
        line = r->graph_line[w.program];
    return base_fail(r->err, r->errlen, "%s:%d:%d: error: %s", r->name, line, col, why);
}

int ir_text_parse(const char *name, const char *text, size_t len, ir_text_file *out, char *err,
                  size_t errlen) {
    memset(out, 0, sizeof *out);
    rd r;
    memset(&r, 0, sizeof r);
    r.name = name, r.text = text, r.end = text + len, r.p = r.line_start = r.line_end = text;
    r.line = 1, r.err = err, r.errlen = errlen;
    if (len > IR_TEXT_MAX_BYTES)
        return base_fail(err, errlen, "%s: error: %zu bytes, more than the %zu an IR file may have",
                         name, len, IR_TEXT_MAX_BYTES);
    open_graph o = {NULL, 0, 0, 0, NULL};
    int pending = -1, rc = 0;
    unsigned seen = 0;
    const char *nul = memchr(text, 0, len);
    const char *last = text; /* the last line's start */
    for (; !rc && r.line_start < r.end; r.line++) {
        r.p = last = r.line_start;
        const char *nl = memchr(r.line_start, '\n', (size_t)(r.end - r.line_start));
        r.line_end = nl ? nl : r.end;
        if (nul && nul < r.line_end) {
            rc = fail(&r, nul, "not a text file (a NUL byte)");
            break;
        }
        ws(&r);
        if (r.p == r.line_end) {
            /* blank */
        } else if (seen & END_SEEN) {
            rc = fail(&r, r.p, "text after '# end'");
        } else if (*r.p == '#') {
            r.p++;
            rc = comment_line(&r, out, &o, &pending, &seen);
        } else if (*r.p == '%') {
            rc = o.g ? node_line(&r, &o)
                     : fail(&r, r.p, "a node before any '# graph: N nodes' line");
        } else {
            rc = expected(&r, "a node ('%N = op ...') or a '#' line");
        }
        r.line_start = nl ? nl + 1 : r.end;
    }
    if (!rc) { /* the position after the last character */
        if (len && text[len - 1] != '\n') r.line--, r.line_start = last;
        r.p = r.line_end = r.end;
        if ((seen & VERSION_SEEN) && !(seen & END_SEEN))
            rc = fail(&r, r.p, "unexpected end of file, expected '# end' (truncated file?)");
        else if (pending >= 0)
            rc = fail(&r, r.p, "program %s has no '# graph: N nodes' line (truncated file?)",
                      ir_text_program_names[pending]);
        else
            rc = close_graph(&r, &o, out, r.p);
        if (!rc && !out->graph[0] && !out->graph[1])
            rc = base_fail(err, errlen, "%s:1:1: error: no graph (expected '# graph: N nodes')",
                           name);
    }
    if (!rc && out->has_train) rc = validate(&r, out);
    ir_free(o.g);
    free(o.lines);
    free(r.lines[0]);
    free(r.lines[1]);
    if (rc) ir_text_free(out);
    return rc;
}

int ir_text_read(const char *path, ir_text_file *out, char *err, size_t errlen) {
    char why[1024];
    size_t len;
    memset(out, 0, sizeof *out);
    unsigned char *text = base_file_read(path, IR_TEXT_MAX_BYTES, &len, why, sizeof why);
    if (!text) {
        size_t n = strlen(path);
        const char *msg = !strncmp(why, path, n) && !strncmp(why + n, ": ", 2) ? why + n + 2 : why;
        return base_fail(err, errlen, "%s: error: %s", path, msg);
    }
    int rc = ir_text_parse(path, (const char *)text, len, out, err, errlen);
    free(text);
    return rc;
}
