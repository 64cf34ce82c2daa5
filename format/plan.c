/* format/plan.c — writing and reading plan files: the header, the
 * sections, the summary. The sections' bytes are plan_graph.c's and
 * plan_schedule.c's, what a plan must satisfy plan_check.c's.
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
 * passes the same plan_check() the writer applies, so whatever one writes
 * the other reads back, and nothing else gets through.
 */
#include "format/plan_internal.h"

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

#define HEADER_SIZE PLAN_HEADER_SIZE
static const char magic[8] = "DPCPLAN";
static const char *const required[4] = {"META", "SCHD", "GTRN", "GEVL"};

uint64_t plan_checksum(const void *data, size_t len) {
    return base_fnv1a(BASE_FNV1A_INIT, data, len);
}

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

int plan_valid_tag(const char *t) {
    for (int i = 0; i < 4; i++)
        if (t[i] < 0x21 || t[i] > 0x7e) return 0;
    return t[4] == 0;
}

/* Tags the plan module writes itself: never extra sections. */
int plan_is_required(const char *tag) {
    for (int i = 0; i < 4; i++)
        if (strcmp(tag, required[i]) == 0) return 1;
    return strcmp(tag, "GRPS") == 0 || strcmp(tag, "OPTM") == 0 || strcmp(tag, "DATA") == 0 ||
           strcmp(tag, "TOKN") == 0;
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

/* The whole file: header and payload. The plan has passed plan_check(). */
static void encode(base_wbuf *b, const dpc_plan *p) {
    unsigned char header[HEADER_SIZE] = {0};
    base_put(b, header, sizeof header);
    size_t s = begin_section(b, "META");
    base_put_str(b, p->model);
    base_put_str(b, p->source);
    end_section(b, s);
    s = begin_section(b, "SCHD");
    plan_put_schedule(b, &p->schedule, PLAN_SEC_SCHD);
    end_section(b, s);
    s = begin_section(b, "GTRN");
    plan_put_graph(b, p->train);
    end_section(b, s);
    s = begin_section(b, "GEVL");
    plan_put_graph(b, p->eval);
    end_section(b, s);
    if (plan_has_groups(p->train) || plan_has_groups(p->eval)) {
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
        plan_put_schedule(b, &p->schedule, PLAN_SEC_OPTM);
        end_section(b, s);
    }
    if (plan_has_data(&p->schedule)) {
        s = begin_section(b, "DATA");
        plan_put_schedule(b, &p->schedule, PLAN_SEC_DATA);
        end_section(b, s);
    }
    if (plan_has_tokens(&p->schedule)) {
        s = begin_section(b, "TOKN");
        plan_put_schedule(b, &p->schedule, PLAN_SEC_TOKN);
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
    if (plan_check(p, why, sizeof why)) {
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

int plan_rd_fail(plan_rd *r, const char *f, ...) {
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

/* After a read: "ends early" recorded when it ran past the end. 0 once
 * the reader has failed, so reads after a failure yield 0. */
static int plan_read_ok(plan_rd *r) {
    if (!r->failed && r->b.bad) plan_rd_fail(r, "ends early");
    return !r->failed;
}

uint32_t plan_get_u32(plan_rd *r) {
    uint32_t v = r->failed ? 0 : base_get_u32(&r->b);
    return plan_read_ok(r) ? v : 0;
}
uint64_t plan_get_u64(plan_rd *r) {
    uint64_t v = r->failed ? 0 : base_get_u64(&r->b);
    return plan_read_ok(r) ? v : 0;
}
int plan_get_i32(plan_rd *r) { return to_i32(plan_get_u32(r)); }
int64_t plan_get_i64(plan_rd *r) { return to_i64(plan_get_u64(r)); }
double plan_get_f64(plan_rd *r) {
    uint64_t u = plan_get_u64(r);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* A string into dst[cap]: shorter than cap, no NUL or control bytes. */
void plan_get_str(plan_rd *r, char *dst, size_t cap, const char *field) {
    uint32_t n = plan_get_u32(r);
    if (r->failed) return;
    if (n >= cap) {
        plan_rd_fail(r, "%s is %" PRIu32 " bytes long, at most %zu allowed", field, n, cap - 1);
        return;
    }
    const unsigned char *q = base_take(&r->b, n);
    if (!plan_read_ok(r)) return;
    if (memchr(q, 0, n)) {
        plan_rd_fail(r, "%s contains a NUL byte", field);
        return;
    }
    if (base_has_control((const char *)q, n)) {
        plan_rd_fail(r, "%s contains a control character", field);
        return;
    }
    memcpy(dst, q, n);
    dst[n] = 0;
}

void plan_get_done(plan_rd *r) {
    if (!r->failed && base_left(&r->b))
        plan_rd_fail(r, "%zu unexpected bytes at the end", base_left(&r->b));
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
enum {
    SPAN_META,
    SPAN_SCHD,
    SPAN_GTRN,
    SPAN_GEVL,
    SPAN_GRPS,
    SPAN_OPTM,
    SPAN_DATA,
    SPAN_TOKN,
    NSPANS
};
static const char *const optional_tags[] = {"GRPS", "OPTM", "DATA", "TOKN"};
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
        if (!plan_valid_tag(tag))
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

static plan_rd reader(const spans *sp, int i, const char *what) {
    return (plan_rd){{sp->p[i], sp->len[i], 0, 0}, what, -1, "", 0};
}

/* The required sections' contents (and the fusion groups when there are
 * any) into p, in file order; the first failure stops it. */
static int read_sections(dpc_plan *p, const spans *sp, char *why, size_t wn) {
    plan_rd r = reader(sp, SPAN_META, "section META");
    plan_get_str(&r, p->model, sizeof p->model, "model name");
    plan_get_str(&r, p->source, sizeof p->source, "source path");
    plan_get_done(&r);
    if (!r.failed) {
        r = reader(sp, SPAN_SCHD, "schedule");
        memset(&p->schedule, 0, sizeof p->schedule);
        ir_train_optim_defaults(&p->schedule); /* OPTM, when there is one, replaces them */
        plan_get_schedule(&r, &p->schedule, PLAN_SEC_SCHD);
    }
    if (!r.failed) {
        r = reader(sp, SPAN_GTRN, "train program");
        p->train = plan_get_graph(&r);
    }
    if (!r.failed) {
        r = reader(sp, SPAN_GEVL, "eval program");
        p->eval = plan_get_graph(&r);
    }
    if (!r.failed && sp->p[SPAN_GRPS]) {
        r = reader(sp, SPAN_GRPS, "fusion groups");
        plan_get_groups(&r, p->train);
        plan_get_groups(&r, p->eval);
        plan_get_done(&r);
    }
    if (!r.failed && sp->p[SPAN_OPTM]) {
        r = reader(sp, SPAN_OPTM, "optimizer");
        plan_get_schedule(&r, &p->schedule, PLAN_SEC_OPTM);
    }
    if (!r.failed && sp->p[SPAN_DATA]) {
        r = reader(sp, SPAN_DATA, "data");
        plan_get_schedule(&r, &p->schedule, PLAN_SEC_DATA);
    }
    if (!r.failed && sp->p[SPAN_TOKN]) {
        r = reader(sp, SPAN_TOKN, "token data");
        plan_get_schedule(&r, &p->schedule, PLAN_SEC_TOKN);
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
    if (plan_check(p, sub, sizeof sub)) {
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
    if (!p || !tag || strlen(tag) != 4 || !plan_valid_tag(tag) || plan_is_required(tag)) return -1;
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
