/* format/plan.c — writing and reading plan files.
 *
 * The file (all integers little endian, written byte by byte; doubles as
 * their IEEE binary64 bit pattern in a u64; strings as u32 length + bytes,
 * no NUL):
 *
 *     header   "DPCPLAN\0"  u32 version  u32 flags (0)  u64 payload length
 *              u64 FNV-1a 64 of the payload
 *     payload  sections: 4-byte tag, u64 length, bytes
 *       META   str model, str source
 *       SCHD   every ir_train field in declaration order: i32 batch, epochs;
 *              f64 init_magnitude; u32 optimizer; f64 momentum, wd;
 *              i32 lr_steps, then lr_steps × (i32 epoch, f64 value);
 *              u32 lr_scaling; i32 reference_batch, warmup_epochs;
 *              u32 lr_kind; f64 lr_final, lr_power;
 *              str dataset; i32 pad, random_crop, random_mirror, normalize;
 *              f64 mean[3], std[3]; i32 eval_batch
 *       GTRN   the train program, GEVL the eval program: u32 node count,
 *              then per node: u32 op; u32 ninputs, ninputs × u32 input;
 *              u32 n, n × i64 iattr; u32 n, n × f64 fattr (n is the op's
 *              schema count); u32 ndim, ndim × i64 dim, u32 dtype;
 *              u32 flags; str name; i32 line, col
 *       GRPS   fusion groups (ir_node.group), only when a node has one:
 *              u32 n, n × u32 group for the train program, then the same
 *              for the eval program. A separate section rather than a node
 *              field, so GTRN/GEVL keep their layout and plans without
 *              fusion read exactly as before.
 *       OPTM   the optimizer's other hyper-parameters, only when one differs
 *              from ir_train_defaults (so SGD plans read as before):
 *              i32 nesterov, exclude; f64 eta, eps, beta1, beta2
 *       DATA   i32 resize, only when it is not 0 (an imagefolder plan's), so
 *              every other plan reads as before
 *       other  extra sections (kernel sources, memory plans), kept verbatim
 *
 * The writer emits META, SCHD, GTRN, GEVL, then the extras in order; the
 * reader accepts any order but each tag at most once. Reading trusts
 * nothing: every count is checked against the bytes left before anything is
 * allocated from it, every value against its range, and the decoded plan
 * passes the same check_plan() the writer applies, so whatever one writes
 * the other reads back, and nothing else gets through.
 */
#include "format/plan.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/err.h"
#include "base/file.h"
#include "base/hash.h"
#include "ir/validate.h"

#define HEADER_SIZE    PLAN_HEADER_SIZE
/* Bounds on dimensions and integer attributes: far below where the shape
 * rules' arithmetic (size + 2*pad, products of dims) could overflow. */
#define MAX_VALUE      ((int64_t)1 << 40)
#define MAX_NUMEL      IR_MAX_NUMEL       /* elements in one tensor */
#define MAX_TOTAL      ((int64_t)1 << 50) /* elements in all of a program's tensors */
/* Smallest encoded node: ten u32/i32 fields and an empty name. */
#define NODE_MIN_BYTES 40

static const char magic[8] = "DPCPLAN";
static const char *const required[4] = {"META", "SCHD", "GTRN", "GEVL"};
/* The sections an ir_train field can be in. */
enum { SEC_SCHD, SEC_OPTM, SEC_DATA };

uint64_t plan_checksum(const void *data, size_t len) {
    return base_fnv1a(BASE_FNV1A_INIT, data, len);
}

#define PRINTF(a, b) __attribute__((format(printf, a, b)))

/* "NAME: error: ..." into err; err may be NULL. */
PRINTF(4, 5) static void set_err(char *err, size_t errlen, const char *name, const char *fmt, ...) {
    if (!err || !errlen) return;
    int n = snprintf(err, errlen, "%s: error: ", name);
    if (n < 0 || (size_t)n >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Two's complement without implementation-defined conversions. */
static int32_t to_i32(uint32_t v) {
    return v <= INT32_MAX ? (int32_t)v : (int32_t)(v - 2147483648u) - INT32_MAX - 1;
}
static int64_t to_i64(uint64_t v) {
    return v <= INT64_MAX ? (int64_t)v : (int64_t)(v - 9223372036854775808u) - INT64_MAX - 1;
}

static int valid_tag(const char *t) {
    for (int i = 0; i < 4; i++)
        if (t[i] < 0x21 || t[i] > 0x7e) return 0;
    return t[4] == 0;
}

/* Strings end up in one-line messages and summaries: no control bytes
 * (other bytes >= 0x80 are fine, for UTF-8 paths). */
static int has_control(const char *s, size_t n) { return base_has_control(s, n); }

/* Tags the plan module writes itself: never extra sections. */
static int is_required(const char *tag) {
    for (int i = 0; i < 4; i++)
        if (strcmp(tag, required[i]) == 0) return 1;
    return strcmp(tag, "GRPS") == 0 || strcmp(tag, "OPTM") == 0 || strcmp(tag, "DATA") == 0;
}

static int has_groups(const ir_graph *g) {
    for (int i = 0; g && i < g->n; i++)
        if (g->nodes[i].group) return 1;
    return 0;
}

/* ---- checks shared by the writer and the reader ------------------------- */

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
        if (v < -MAX_VALUE || v > MAX_VALUE)
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
        if (t->dim[d] <= 0 || t->dim[d] > MAX_VALUE)
            return base_fail(why, wn, "node %d (%s): dimension %d is %" PRId64, idx, info->name, d,
                             t->dim[d]);
        if (numel > MAX_NUMEL / t->dim[d])
            return base_fail(why, wn, "node %d (%s): tensor has more than 2^40 elements", idx,
                             info->name);
        numel *= t->dim[d];
    }
    if ((unsigned)t->dtype > IR_I32)
        return base_fail(why, wn, "node %d (%s): unknown dtype %u", idx, info->name, t->dtype);
    if (!memchr(n->name, 0, sizeof n->name))
        return base_fail(why, wn, "node %d (%s): name not terminated", idx, info->name);
    if (has_control(n->name, strlen(n->name)))
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
        if (total > MAX_TOTAL - numel)
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
    if (!memchr(t->dataset, 0, sizeof t->dataset) || has_control(t->dataset, strlen(t->dataset)))
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
static int check_plan(const dpc_plan *p, char *why, size_t wn) {
    if (!memchr(p->model, 0, sizeof p->model) || has_control(p->model, strlen(p->model)))
        return base_fail(why, wn, "bad model name");
    if (!memchr(p->source, 0, sizeof p->source) || has_control(p->source, strlen(p->source)))
        return base_fail(why, wn, "bad source path");
    if (check_schedule(&p->schedule, why, wn) || check_graph(p->train, "train program", why, wn) ||
        check_graph(p->eval, "eval program", why, wn) || validate(p, why, wn))
        return -1;
    if (p->nextra < 0 || p->nextra > PLAN_MAX_SECTIONS)
        return base_fail(why, wn, "%d extra sections", p->nextra);
    for (int i = 0; i < p->nextra; i++) {
        const plan_section *s = &p->extra[i];
        if (!valid_tag(s->tag) || is_required(s->tag))
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

/* ---- encoding ----------------------------------------------------------- */

/* Starts a section; end_section() patches its length in. */
static size_t begin_section(base_wbuf *b, const char *tag) {
    base_put(b, tag, 4);
    base_put_u64(b, 0);
    return b->len;
}
static void end_section(base_wbuf *b, size_t start) {
    base_patch_u64(b, start - 8, b->len - start);
}

static void put_graph(base_wbuf *b, const ir_graph *g) {
    base_put_u32(b, (uint32_t)g->n);
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        int nia = ir_op_num_iattrs(n->op), nfa = ir_op_num_fattrs(n->op);
        base_put_u32(b, (uint32_t)n->op);
        base_put_u32(b, (uint32_t)n->ninputs);
        for (int j = 0; j < n->ninputs; j++) base_put_u32(b, (uint32_t)n->input[j]);
        base_put_u32(b, (uint32_t)nia);
        for (int j = 0; j < nia; j++) base_put_i64(b, n->iattr[j]);
        base_put_u32(b, (uint32_t)nfa);
        for (int j = 0; j < nfa; j++) base_put_f64(b, n->fattr[j]);
        base_put_u32(b, (uint32_t)n->type.ndim);
        for (int d = 0; d < n->type.ndim; d++) base_put_i64(b, n->type.dim[d]);
        base_put_u32(b, (uint32_t)n->type.dtype);
        base_put_u32(b, n->flags);
        base_put_str(b, n->name);
        base_put_i32(b, n->line);
        base_put_i32(b, n->col);
    }
}

/* The plan section an ir_train field is in (ir/ir.h's table): SCHD, or
 * OPTM and DATA, written only when they differ from the defaults. */
static int section_of(const ir_train_field *f) {
    return f->when == IR_TW_OPTIM ? SEC_OPTM : f->when == IR_TW_NONZERO ? SEC_DATA : SEC_SCHD;
}

/* One field's bytes: I32 an i32, ENUM a u32, F64 an f64, F64X3 three, STR
 * a string, LR the step count then (epoch i32, lr f64) per step. */
static void put_field(base_wbuf *b, const ir_train *t, const ir_train_field *f) {
    const void *v = ir_train_cptr(t, f);
    switch (f->kind) {
    case IR_TK_I32: base_put_i32(b, *(const int *)v); break;
    case IR_TK_ENUM: base_put_u32(b, (uint32_t) * (const int *)v); break;
    case IR_TK_F64: base_put_f64(b, *(const double *)v); break;
    case IR_TK_F64X3:
        for (int c = 0; c < 3; c++) base_put_f64(b, ((const double *)v)[c]);
        break;
    case IR_TK_STR: base_put_str(b, (const char *)v); break;
    case IR_TK_LR:
        base_put_i32(b, t->lr_steps);
        for (int i = 0; i < t->lr_steps; i++) {
            base_put_i32(b, t->lr_epoch[i]);
            base_put_f64(b, t->lr_value[i]);
        }
        break;
    case IR_TK_LR_PART: break; /* with its LR field */
    }
}

/* The fields of section sec, in the table's order. */
static void put_schedule(base_wbuf *b, const ir_train *t, int sec) {
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++)
        if (section_of(&ir_train_fields[i]) == sec) put_field(b, t, &ir_train_fields[i]);
}

/* DATA is written when one of its fields is not 0. */
static int has_data(const ir_train *t) {
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++) {
        const ir_train_field *f = &ir_train_fields[i];
        if (section_of(f) == SEC_DATA && *(const int *)ir_train_cptr(t, f)) return 1;
    }
    return 0;
}

/* The whole file: header and payload. The plan has passed check_plan(). */
static void encode(base_wbuf *b, const dpc_plan *p) {
    unsigned char header[HEADER_SIZE] = {0};
    base_put(b, header, sizeof header);
    size_t s = begin_section(b, "META");
    base_put_str(b, p->model);
    base_put_str(b, p->source);
    end_section(b, s);
    s = begin_section(b, "SCHD");
    put_schedule(b, &p->schedule, SEC_SCHD);
    end_section(b, s);
    s = begin_section(b, "GTRN");
    put_graph(b, p->train);
    end_section(b, s);
    s = begin_section(b, "GEVL");
    put_graph(b, p->eval);
    end_section(b, s);
    if (has_groups(p->train) || has_groups(p->eval)) {
        s = begin_section(b, "GRPS");
        const ir_graph *gs[2] = {p->train, p->eval};
        for (int k = 0; k < 2; k++) {
            base_put_u32(b, (uint32_t)gs[k]->n);
            for (int i = 0; i < gs[k]->n; i++) base_put_u32(b, (uint32_t)gs[k]->nodes[i].group);
        }
        end_section(b, s);
    }
    if (!ir_train_optim_is_default(&p->schedule)) {
        s = begin_section(b, "OPTM");
        put_schedule(b, &p->schedule, SEC_OPTM);
        end_section(b, s);
    }
    if (has_data(&p->schedule)) {
        s = begin_section(b, "DATA");
        put_schedule(b, &p->schedule, SEC_DATA);
        end_section(b, s);
    }
    for (int i = 0; i < p->nextra; i++) {
        s = begin_section(b, p->extra[i].tag);
        base_put(b, p->extra[i].data, p->extra[i].len);
        end_section(b, s);
    }
    if (b->oom) return;
    size_t plen = b->len - HEADER_SIZE;
    base_wbuf h = {header, 0, sizeof header, 0};
    base_put(&h, magic, 8);
    base_put_u32(&h, PLAN_VERSION);
    base_put_u32(&h, 0);
    base_put_u64(&h, plen);
    base_put_u64(&h, plan_checksum(b->p + HEADER_SIZE, plen));
    memcpy(b->p, header, sizeof header);
}

int plan_write(const dpc_plan *p, const char *path, char *err, size_t errlen) {
    char why[512];
    if (!p) {
        set_err(err, errlen, path, "cannot write plan: no plan");
        return -1;
    }
    if (check_plan(p, why, sizeof why)) {
        set_err(err, errlen, path, "cannot write plan: %s", why);
        return -1;
    }
    base_wbuf b = {0};
    encode(&b, p);
    if (b.oom) {
        free(b.p);
        set_err(err, errlen, path, "cannot write plan: out of memory");
        return -1;
    }
    /* base_file: a reader never sees half a plan, a failed write keeps the
     * old one, and no planted link is followed. */
    char msg[1024];
    int rc = base_file_write_all(path, b.p, b.len, msg, sizeof msg);
    free(b.p);
    size_t pl = strlen(path);
    const char *m = !strncmp(msg, path, pl) && !strncmp(msg + pl, ": ", 2) ? msg + pl + 2 : msg;
    if (rc) set_err(err, errlen, path, "cannot write plan: %s", m);
    return rc;
}

/* ---- decoding ----------------------------------------------------------- */

/* base/bytes.h's bounded reader plus what a message needs: the first failure,
 * and where it happened. */
typedef struct {
    base_rbuf b;
    const char *what; /* "train program", "section META", ... for messages */
    int node;         /* node being decoded, or -1 */
    char why[512];    /* first failure */
    int failed;
} rd;

PRINTF(2, 3) static int rd_fail(rd *r, const char *f, ...) {
    if (r->failed) return -1;
    r->failed = 1;
    int n = r->node >= 0 ? snprintf(r->why, sizeof r->why, "%s, node %d: ", r->what, r->node)
                         : snprintf(r->why, sizeof r->why, "%s: ", r->what);
    va_list ap;
    va_start(ap, f);
    vsnprintf(r->why + n, sizeof r->why - (size_t)n, f, ap);
    va_end(ap);
    return -1;
}

/* The next n bytes, or NULL with "ends early" recorded. */
static const unsigned char *take(rd *r, size_t n) {
    if (r->failed) return NULL;
    const unsigned char *q = base_take(&r->b, n);
    if (!q) rd_fail(r, "ends early");
    return q;
}

static uint32_t get_u32(rd *r) {
    const unsigned char *q = take(r, 4);
    return q ? base_le32(q) : 0;
}
static uint64_t get_u64(rd *r) {
    const unsigned char *q = take(r, 8);
    return q ? base_le64(q) : 0;
}
static int get_i32(rd *r) { return to_i32(get_u32(r)); }
static int64_t get_i64(rd *r) { return to_i64(get_u64(r)); }
static double get_f64(rd *r) {
    uint64_t u = get_u64(r);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* A string into dst[cap]: shorter than cap, no NUL or control bytes. */
static void get_str(rd *r, char *dst, size_t cap, const char *field) {
    uint32_t n = get_u32(r);
    if (r->failed) return;
    if (n >= cap) {
        rd_fail(r, "%s is %" PRIu32 " bytes long, at most %zu allowed", field, n, cap - 1);
        return;
    }
    const unsigned char *q = take(r, n);
    if (!q) return;
    if (memchr(q, 0, n)) {
        rd_fail(r, "%s contains a NUL byte", field);
        return;
    }
    if (has_control((const char *)q, n)) {
        rd_fail(r, "%s contains a control character", field);
        return;
    }
    memcpy(dst, q, n);
    dst[n] = 0;
}

static void get_done(rd *r) {
    if (!r->failed && base_left(&r->b))
        rd_fail(r, "%zu unexpected bytes at the end", base_left(&r->b));
}

/* An attribute count, which must be the op's. */
static int get_count(rd *r, const char *op, const char *kind, int expected) {
    uint32_t n = get_u32(r);
    if (r->failed) return -1;
    if (n != (uint32_t)expected)
        return rd_fail(r, "%s with %" PRIu32 " %s attributes, expected %d", op, n, kind, expected);
    return 0;
}

/* Decodes the fields; ranges that need no decoding are left to check_node(). */
static int get_node(rd *r, ir_node *n, int idx) {
    r->node = idx;
    uint32_t op = get_u32(r);
    if (r->failed) return -1;
    if (op >= IR_OP_COUNT) return rd_fail(r, "unknown op %" PRIu32, op);
    n->op = (ir_op)op;
    const char *name = ir_ops[op].name;
    uint32_t nin = get_u32(r);
    if (r->failed) return -1;
    if (nin > IR_MAX_INPUTS) return rd_fail(r, "%s with %" PRIu32 " inputs", name, nin);
    n->ninputs = (int)nin;
    for (uint32_t j = 0; j < nin; j++) {
        uint32_t in = get_u32(r);
        if (r->failed) return -1;
        if (in >= (uint32_t)idx)
            return rd_fail(r, "%s: input %" PRIu32 " is node %" PRIu32 ", not an earlier one", name,
                           j, in);
        n->input[j] = (int)in;
    }
    int nia = ir_op_num_iattrs(n->op), nfa = ir_op_num_fattrs(n->op);
    if (get_count(r, name, "integer", nia)) return -1;
    for (int j = 0; j < nia; j++) n->iattr[j] = get_i64(r);
    if (get_count(r, name, "float", nfa)) return -1;
    for (int j = 0; j < nfa; j++) n->fattr[j] = get_f64(r);
    uint32_t ndim = get_u32(r);
    if (r->failed) return -1;
    if (ndim < 1 || ndim > IR_MAX_DIMS)
        return rd_fail(r, "%s: rank %" PRIu32 ", must be 1 to %d", name, ndim, IR_MAX_DIMS);
    n->type.ndim = (int)ndim;
    for (uint32_t d = 0; d < ndim; d++) n->type.dim[d] = get_i64(r);
    uint32_t dtype = get_u32(r);
    if (r->failed) return -1;
    if (dtype > IR_I32) return rd_fail(r, "%s: unknown dtype %" PRIu32, name, dtype);
    n->type.dtype = (ir_dtype)dtype;
    n->flags = get_u32(r);
    get_str(r, n->name, sizeof n->name, "name");
    n->line = get_i32(r);
    n->col = get_i32(r);
    return r->failed ? -1 : 0;
}

static ir_graph *get_graph(rd *r) {
    uint32_t n = get_u32(r);
    if (r->failed) return NULL;
    /* Never allocate from a count the bytes can't back. */
    if (n > base_left(&r->b) / NODE_MIN_BYTES || n > INT32_MAX / 2) {
        rd_fail(r, "%" PRIu32 " nodes cannot fit in %zu bytes", n, base_left(&r->b));
        return NULL;
    }
    ir_graph *g = ir_new();
    if (n) {
        g->nodes = calloc(n, sizeof *g->nodes);
        if (!g->nodes) {
            rd_fail(r, "out of memory");
            ir_free(g);
            return NULL;
        }
        g->cap = (int)n;
    }
    for (uint32_t i = 0; i < n && !r->failed; i++) {
        get_node(r, &g->nodes[i], (int)i);
        g->n = (int)i + 1;
    }
    r->node = -1;
    get_done(r);
    if (r->failed) {
        ir_free(g);
        return NULL;
    }
    return g;
}

/* One program's fusion groups; ir_verify (in check_plan) checks them. */
static void get_groups(rd *r, ir_graph *g) {
    uint32_t n = get_u32(r);
    if (r->failed) return;
    if (n != (uint32_t)g->n) {
        rd_fail(r, "%" PRIu32 " entries for %d nodes", n, g->n);
        return;
    }
    for (int i = 0; i < g->n && !r->failed; i++) {
        uint32_t grp = get_u32(r);
        if (grp > (uint32_t)g->n) rd_fail(r, "node %d: group %" PRIu32, i, grp);
        g->nodes[i].group = (int)grp;
    }
}

/* An enum's value, at most max. */
static int get_enum(rd *r, uint32_t max, const char *what, uint32_t *out) {
    *out = get_u32(r);
    if (r->failed) return -1;
    if (*out > max) return rd_fail(r, "unknown %s %" PRIu32, what, *out);
    return 0;
}

/* One field, as put_field wrote it; an ENUM up to the table's hi, the
 * message naming it by its key ("lr_scaling" as "lr scaling"). */
static void get_field(rd *r, ir_train *t, const ir_train_field *f) {
    void *v = ir_train_ptr(t, f);
    switch (f->kind) {
    case IR_TK_I32: *(int *)v = get_i32(r); break;
    case IR_TK_ENUM: {
        char what[32];
        snprintf(what, sizeof what, "%s", f->key);
        for (char *c = what; *c; c++)
            if (*c == '_') *c = ' ';
        uint32_t e;
        if (!get_enum(r, (uint32_t)f->hi, what, &e)) *(int *)v = (int)e;
        break;
    }
    case IR_TK_F64: *(double *)v = get_f64(r); break;
    case IR_TK_F64X3:
        for (int c = 0; c < 3; c++) ((double *)v)[c] = get_f64(r);
        break;
    case IR_TK_STR: {
        char what[48];
        snprintf(what, sizeof what, "%s name", f->key); /* "dataset name" */
        get_str(r, (char *)v, f->size, what);
        break;
    }
    case IR_TK_LR: {
        int steps = get_i32(r);
        if (r->failed) break;
        if (steps < 0 || steps > IR_MAX_LR_STEPS) {
            rd_fail(r, "%d lr steps, at most %d allowed", steps, IR_MAX_LR_STEPS);
            break;
        }
        t->lr_steps = steps;
        for (int i = 0; i < steps; i++) {
            t->lr_epoch[i] = get_i32(r);
            t->lr_value[i] = get_f64(r);
        }
        break;
    }
    case IR_TK_LR_PART: break; /* with its LR field */
    }
}

/* The fields of section sec, the whole section. The first failure is
 * kept (rd_fail), and reads after it yield 0. */
static int get_schedule(rd *r, ir_train *t, int sec) {
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++)
        if (section_of(&ir_train_fields[i]) == sec) get_field(r, t, &ir_train_fields[i]);
    get_done(r);
    return r->failed ? -1 : 0;
}

void plan_free_sections(dpc_plan *p) {
    if (!p) return;
    for (int i = 0; i < p->nextra && i < PLAN_MAX_SECTIONS; i++) {
        free(p->extra[i].data);
        p->extra[i].data = NULL;
        p->extra[i].len = 0;
    }
    p->nextra = 0;
}

void plan_free(dpc_plan *p) {
    if (!p) return;
    ir_free(p->train);
    ir_free(p->eval);
    plan_free_sections(p);
    free(p);
}

/* The payload's section table: the required sections' (and GRPS's) bytes
 * into span[], every other section copied into p->extra. 0, or -1 with the
 * reason in why. */
enum { SPAN_META, SPAN_SCHD, SPAN_GTRN, SPAN_GEVL, SPAN_GRPS, SPAN_OPTM, SPAN_DATA, NSPANS };
static const char *const optional_tags[] = {"GRPS", "OPTM", "DATA"};
typedef struct {
    const unsigned char *p[NSPANS];
    size_t len[NSPANS];
} spans;

static int split_sections(dpc_plan *p, const unsigned char *pay, size_t plen, spans *sp, char *why,
                          size_t wn) {
    size_t off = 0;
    while (off < plen) {
        if (plen - off < 12)
            return base_fail(why, wn,
                             "corrupt plan: section header at offset %zu runs past the end", off);
        char tag[5];
        memcpy(tag, pay + off, 4);
        tag[4] = 0;
        if (!valid_tag(tag))
            return base_fail(why, wn, "corrupt plan: bad section tag at offset %zu", off);
        uint64_t slen = base_le64(pay + off + 4);
        off += 12;
        if (slen > plen - off)
            return base_fail(why, wn,
                             "corrupt plan: section %s (%" PRIu64 " bytes) runs past the end", tag,
                             slen);
        int dup = 0, req = -1;
        for (int i = 0; i < NSPANS; i++)
            if (strcmp(tag, i < 4 ? required[i] : optional_tags[i - 4]) == 0)
                req = i, dup = sp->p[i] != NULL;
        for (int i = 0; i < p->nextra; i++) dup |= strcmp(tag, p->extra[i].tag) == 0;
        if (dup) return base_fail(why, wn, "corrupt plan: duplicated section %s", tag);
        if (req >= 0) {
            sp->p[req] = pay + off;
            sp->len[req] = (size_t)slen;
        } else if (p->nextra == PLAN_MAX_SECTIONS) {
            return base_fail(why, wn, "corrupt plan: more than %d extra sections",
                             PLAN_MAX_SECTIONS);
        } else if (plan_add_section(p, tag, pay + off, (size_t)slen)) {
            return base_fail(why, wn, "out of memory");
        }
        off += (size_t)slen;
    }
    for (int i = 0; i < 4; i++)
        if (!sp->p[i]) return base_fail(why, wn, "corrupt plan: missing section %s", required[i]);
    return 0;
}

static rd reader(const spans *sp, int i, const char *what) {
    return (rd){{sp->p[i], sp->len[i], 0, 0}, what, -1, "", 0};
}

/* The required sections' contents (and the fusion groups when there are
 * any) into p, in file order; the first failure stops it. */
static int read_sections(dpc_plan *p, const spans *sp, char *why, size_t wn) {
    rd r = reader(sp, SPAN_META, "section META");
    get_str(&r, p->model, sizeof p->model, "model name");
    get_str(&r, p->source, sizeof p->source, "source path");
    get_done(&r);
    if (!r.failed) {
        r = reader(sp, SPAN_SCHD, "schedule");
        memset(&p->schedule, 0, sizeof p->schedule);
        ir_train_optim_defaults(&p->schedule); /* OPTM, when there is one, replaces them */
        get_schedule(&r, &p->schedule, SEC_SCHD);
    }
    if (!r.failed) {
        r = reader(sp, SPAN_GTRN, "train program");
        p->train = get_graph(&r);
    }
    if (!r.failed) {
        r = reader(sp, SPAN_GEVL, "eval program");
        p->eval = get_graph(&r);
    }
    if (!r.failed && sp->p[SPAN_GRPS]) {
        r = reader(sp, SPAN_GRPS, "fusion groups");
        get_groups(&r, p->train);
        get_groups(&r, p->eval);
        get_done(&r);
    }
    if (!r.failed && sp->p[SPAN_OPTM]) {
        r = reader(sp, SPAN_OPTM, "optimizer");
        get_schedule(&r, &p->schedule, SEC_OPTM);
    }
    if (!r.failed && sp->p[SPAN_DATA]) {
        r = reader(sp, SPAN_DATA, "data");
        get_schedule(&r, &p->schedule, SEC_DATA);
    }
    return r.failed ? base_fail(why, wn, "corrupt plan: %s", r.why) : 0;
}

/* Returns a plan or NULL with the reason in why (no file name, no prefix). */
static dpc_plan *decode(const unsigned char *pay, size_t plen, char *why, size_t wn) {
    dpc_plan *p = calloc(1, sizeof *p);
    if (!p) {
        base_fail(why, wn, "out of memory");
        return NULL;
    }
    spans sp = {{0}, {0}};
    char sub[512];
    if (split_sections(p, pay, plen, &sp, why, wn) || read_sections(p, &sp, why, wn)) {
        plan_free(p);
        return NULL;
    }
    if (check_plan(p, sub, sizeof sub)) {
        base_fail(why, wn, "corrupt plan: %s", sub);
        plan_free(p);
        return NULL;
    }
    return p;
}

dpc_plan *plan_read_mem(const char *name, const unsigned char *buf, size_t len, char *err,
                        size_t errlen) {
    if (!name) name = "plan";
    if (len < 8 || memcmp(buf, magic, 8) != 0) {
        set_err(err, errlen, name, "not a dpc plan file");
        return NULL;
    }
    if (len >= 12 && base_le32(buf + 8) != PLAN_VERSION) {
        set_err(err, errlen, name,
                "plan format version %" PRIu32 ", this dprun reads version %u; recompile the "
                "model with this dpc",
                base_le32(buf + 8), PLAN_VERSION);
        return NULL;
    }
    if (len < HEADER_SIZE) {
        set_err(err, errlen, name, "truncated plan (%zu of %d bytes)", len, HEADER_SIZE);
        return NULL;
    }
    uint32_t flags = base_le32(buf + 12);
    if (flags) {
        set_err(err, errlen, name,
                "plan uses features this dprun lacks (flags 0x%" PRIx32
                "); recompile the model with this dpc",
                flags);
        return NULL;
    }
    uint64_t plen = base_le64(buf + 16);
    if (plen > UINT64_MAX - HEADER_SIZE) {
        set_err(err, errlen, name, "corrupt plan: payload length %" PRIu64, plen);
        return NULL;
    }
    if (plen > len - HEADER_SIZE) {
        set_err(err, errlen, name, "truncated plan (%zu of %" PRIu64 " bytes)", len,
                plen + HEADER_SIZE);
        return NULL;
    }
    if (plen < len - HEADER_SIZE) {
        set_err(err, errlen, name, "corrupt plan: data after the end of the payload");
        return NULL;
    }
    if (plan_checksum(buf + HEADER_SIZE, (size_t)plen) != base_le64(buf + 24)) {
        set_err(err, errlen, name, "corrupt plan: checksum mismatch");
        return NULL;
    }
    char why[600];
    dpc_plan *p = decode(buf + HEADER_SIZE, (size_t)plen, why, sizeof why);
    if (!p)
        set_err(err, errlen, name, "%s", why);
    else {
        p->checksum = base_le64(buf + 24);
        snprintf(p->name, sizeof p->name, "%s", name);
    }
    return p;
}

/* A header that plan_read_mem() will get past, so the payload is worth reading. */
static int header_ok(const unsigned char *h) {
    return memcmp(h, magic, 8) == 0 && base_le32(h + 8) == PLAN_VERSION && base_le32(h + 12) == 0;
}

dpc_plan *plan_read(const char *path, char *err, size_t errlen) {
    /* A regular file only: a FIFO or a device would block or never end. */
    char why[1024];
    long long size;
    int fd = base_file_open_read(path, &size, why, sizeof why);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        size_t pl = strlen(path);
        const char *m = !strncmp(why, path, pl) && !strncmp(why + pl, ": ", 2) ? why + pl + 2 : why;
        set_err(err, errlen, path, "%s", fd >= 0 ? strerror(errno) : m);
        return NULL;
    }
    /* Read the header, then as much as it announces plus one byte (to see
     * trailing data); memory grows with the bytes actually there, never with
     * the length the header claims. */
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0, limit = HEADER_SIZE;
    int header_done = 0;
    while (len < limit) {
        if (len == cap) {
            size_t nc = cap ? (cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2) : 65536;
            if (nc > limit) nc = limit;
            unsigned char *q = realloc(buf, nc);
            if (!q) {
                set_err(err, errlen, path, "cannot read: out of memory");
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = q;
            cap = nc;
        }
        size_t want = cap - len;
        size_t got = fread(buf + len, 1, want, f);
        len += got;
        if (got < want) {
            if (ferror(f)) {
                set_err(err, errlen, path, "cannot read: %s", strerror(errno));
                free(buf);
                fclose(f);
                return NULL;
            }
            break;
        }
        if (!header_done && len == HEADER_SIZE) {
            header_done = 1;
            uint64_t plen = base_le64(buf + 16);
            if (header_ok(buf))
                limit =
                    plen >= SIZE_MAX - HEADER_SIZE - 1 ? SIZE_MAX : HEADER_SIZE + (size_t)plen + 1;
        }
    }
    fclose(f);
    dpc_plan *p = plan_read_mem(path, buf, len, err, errlen);
    free(buf);
    return p;
}

/* ---- sections and the summary ------------------------------------------- */

int plan_add_section(dpc_plan *p, const char *tag, const void *data, size_t len) {
    if (!p || !tag || strlen(tag) != 4 || !valid_tag(tag) || is_required(tag)) return -1;
    if (p->nextra < 0 || p->nextra >= PLAN_MAX_SECTIONS || plan_find_section(p, tag)) return -1;
    if (len && !data) return -1;
    unsigned char *copy = malloc(len ? len : 1);
    if (!copy) return -1;
    if (len) memcpy(copy, data, len);
    plan_section *s = &p->extra[p->nextra++];
    memcpy(s->tag, tag, 5);
    s->len = len;
    s->data = copy;
    return 0;
}

const plan_section *plan_find_section(const dpc_plan *p, const char *tag) {
    if (!p || !tag) return NULL;
    for (int i = 0; i < p->nextra && i < PLAN_MAX_SECTIONS; i++)
        if (strcmp(p->extra[i].tag, tag) == 0) return &p->extra[i];
    return NULL;
}

static void info_program(const char *what, const ir_graph *g, FILE *f) {
    int params = 0, states = 0;
    int64_t batch = 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        params += n->op == IR_OP_PARAM;
        states += n->op == IR_OP_STATE;
        if (n->op == IR_OP_INPUT && !batch) batch = n->type.dim[0];
    }
    int groups = ir_num_groups(g);
    fprintf(f, "%s program: %d nodes, batch %" PRId64, what, g->n, batch);
    if (groups) fprintf(f, ", %d fusion groups", groups);
    fputc('\n', f);
    fprintf(f, "  inputs:");
    char buf[96];
    int any = 0;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_INPUT) {
            fprintf(f, "%s %s %s", any ? "," : "", g->nodes[i].name,
                    ir_type_str(&g->nodes[i].type, buf, sizeof buf));
            any = 1;
        }
    fprintf(f, "%s\n", any ? "" : " none");
    fprintf(f, "  parameters: %" PRId64 " in %d tensors, %d state tensors\n", ir_num_params(g),
            params, states);
}

void plan_info(const dpc_plan *p, FILE *f) {
    fprintf(f, "model: %s\n", p->model[0] ? p->model : "(unnamed)");
    fprintf(f, "source: %s\n", p->source[0] ? p->source : "(unknown)");
    fprintf(f, "format: dpc plan version %u\n", PLAN_VERSION);
    /* The graphs' node types are the record: dpc --precision bf16 stores
     * activations as bf16, --precision tf32 marks the GEMMs IR_FLAG_TF32
     * (passes/precision.c). */
    int bf16 = 0, tf32 = 0;
    for (int i = 0; p->train && i < p->train->n; i++) {
        bf16 |= p->train->nodes[i].type.dtype == IR_BF16;
        tf32 |= (p->train->nodes[i].flags & IR_FLAG_TF32) != 0;
    }
    fprintf(f, "precision: %s\n",
            bf16   ? "bf16 (activations and GEMM operands; f32 master weights, "
                     "statistics, gradients and optimizer)"
            : tf32 ? "tf32 (f32 GEMMs on TF32 tensor cores: operands rounded to 10-bit "
                     "mantissas; everything else fp32)"
                   : "fp32");
    if (p->train) info_program("train", p->train, f);
    if (p->eval) info_program("eval", p->eval, f);
    fprintf(f, "schedule:\n");
    ir_train_print(&p->schedule, f);
    fprintf(f, "sections: %d extra\n", p->nextra);
    for (int i = 0; i < p->nextra; i++)
        fprintf(f, "  %s %zu bytes\n", p->extra[i].tag, p->extra[i].len);
}
