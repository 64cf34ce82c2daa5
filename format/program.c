/* format/program.c — the kernel-program record: dialect names and section
 * tags, (de)serialising cg_programs, finding one in a plan section, a
 * kernel's text in the source, launch counts. Its descriptors are
 * descriptor.c's, checking a program against its graph and comparing two
 * program_check.c's; building one is codegen's (codegen/build.c).
 *
 * Byte layout (little endian), version 8 (7 plus the dense alternative;
 * programs of other versions are skipped and regenerated):
 *   "DPCK" u32 version u64 total_length u32 dialect u64 graph_hash i64 scratch
 *   u64 source_len, source bytes (no NUL)
 *   u32 nkernels, each: u32 name_len, name, u32 nargs
 *   u32 nsteps,   each: i32 node, i32 op, i32 alias, i64 scratch, u32 first_call,
 *                       u32 ncalls, u32 nbuf, nbuf x i32 buf
 *   u32 ncalls,   each: u32 kind, i32 kernel, i64 count, u32 nargs,
 *                       nargs x (i32 slot, i64 off), then the GEMM: u32 transa,
 *                       u32 transb, i64 m n k, f32 alpha beta, i64 lda ldb ldc
 *                       batch stride_a stride_b stride_c off_a off_b off_c,
 *                       u32 type_a type_b type_c tf32, then the launch: u32 grid
 *                       block shared (all 0 in a C program and in GEMMs), then
 *                       for a CG_CALL_CONV only its descriptor: u32 dir,
 *                       i64 N C H W K kh kw sh sw ph pw Ho Wo G, u32 type_x type_w
 *                       type_y tf32 tune nalt dense
 * total_length covers the whole record, so programs can sit back to back.
 */
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/program.h"
#include "base/bytes.h"
#include "base/err.h"

#define CG_MAGIC   "DPCK"
/* 2: the C kernel ABI runs a range of iterations and exports NAME_grain.
 * 3: GEMM element types (bf16). 4: each call's launch geometry. 5: TF32 GEMMs.
 * 6: library convolutions (CG_CALL_CONV). 7: their groups. 8: a dense
 * alternative (cg_conv.dense). */
#define CG_VERSION 8u

unsigned cg_program_version(void) { return CG_VERSION; }

void cg_program_free(cg_program *p) {
    if (!p) return;
    free(p->source);
    free(p->kernels);
    free(p->steps);
    free(p->calls);
    free(p);
}

/* ---- dialects ------------------------------------------------------------------- */

static const struct {
    const char *name, *section;
    int launches;
} dialects[CG_DIALECT_COUNT] = {
    [CG_DIALECT_C] = {"c", CG_SECTION_C, 0},
    [CG_DIALECT_CUDA] = {"cuda", CG_SECTION_CUDA, 1},
};

/* A value that names no dialect reads as C, as it always did. */
static cg_dialect or_c(cg_dialect d) { return (unsigned)d < CG_DIALECT_COUNT ? d : CG_DIALECT_C; }
const char *cg_dialect_name(cg_dialect d) { return dialects[or_c(d)].name; }
const char *cg_section_tag(cg_dialect d) { return dialects[or_c(d)].section; }
int cg_dialect_launches(cg_dialect d) { return dialects[or_c(d)].launches; }

/* ---- hashing -------------------------------------------------------------------- */

uint64_t cg_graph_hash(const ir_graph *g) { return ir_graph_hash(g); }

/* ---- serialising ------------------------------------------------------------------ */

int cg_program_serialize(const cg_program *p, unsigned char **out, size_t *len) {
    base_wbuf w = {0};
    base_put(&w, CG_MAGIC, 4);
    base_put_u32(&w, CG_VERSION);
    base_put_u64(&w, 0); /* total length, patched below */
    base_put_u32(&w, (uint32_t)p->dialect);
    base_put_u64(&w, p->graph_hash);
    base_put_i64(&w, p->scratch);
    base_put_u64(&w, p->source_len);
    base_put(&w, p->source, p->source_len);
    base_put_u32(&w, (uint32_t)p->nkernels);
    for (int k = 0; k < p->nkernels; k++) {
        size_t n = strlen(p->kernels[k].name);
        base_put_u32(&w, (uint32_t)n);
        base_put(&w, p->kernels[k].name, n);
        base_put_u32(&w, (uint32_t)p->kernels[k].nargs);
    }
    base_put_u32(&w, (uint32_t)p->nsteps);
    for (int i = 0; i < p->nsteps; i++) {
        const cg_step *s = &p->steps[i];
        base_put_i32(&w, s->node);
        base_put_i32(&w, s->op);
        base_put_i32(&w, s->alias);
        base_put_i64(&w, s->scratch);
        base_put_u32(&w, (uint32_t)s->first_call);
        base_put_u32(&w, (uint32_t)s->ncalls);
        base_put_u32(&w, (uint32_t)s->nbuf);
        for (int j = 0; j < s->nbuf; j++) base_put_i32(&w, s->buf[j]);
    }
    base_put_u32(&w, (uint32_t)p->ncalls);
    for (int i = 0; i < p->ncalls; i++) {
        const cg_call *c = &p->calls[i];
        const cg_gemm *d = &c->gemm;
        base_put_u32(&w, (uint32_t)c->kind);
        base_put_i32(&w, c->kernel);
        base_put_i64(&w, c->count);
        base_put_u32(&w, (uint32_t)c->nargs);
        for (int j = 0; j < c->nargs; j++) {
            base_put_i32(&w, c->arg[j]);
            base_put_i64(&w, c->off[j]);
        }
        base_put_u32(&w, (uint32_t)d->transa);
        base_put_u32(&w, (uint32_t)d->transb);
        int64_t v[] = {d->m, d->n, d->k};
        for (int j = 0; j < 3; j++) base_put_i64(&w, v[j]);
        base_put_f32(&w, d->alpha);
        base_put_f32(&w, d->beta);
        int64_t u[] = {d->lda,      d->ldb,      d->ldc,   d->batch, d->stride_a,
                       d->stride_b, d->stride_c, d->off_a, d->off_b, d->off_c};
        for (int j = 0; j < 10; j++) base_put_i64(&w, u[j]);
        base_put_u32(&w, (uint32_t)d->type_a);
        base_put_u32(&w, (uint32_t)d->type_b);
        base_put_u32(&w, (uint32_t)d->type_c);
        base_put_u32(&w, (uint32_t)d->tf32);
        base_put_u32(&w, c->launch.grid);
        base_put_u32(&w, c->launch.block);
        base_put_u32(&w, c->launch.shared);
        if (c->kind == CG_CALL_CONV) {
            const int64_t *dims[CG_CONV_NDIMS] = CG_CONV_DIMS((cg_conv *)&c->conv);
            base_put_u32(&w, (uint32_t)c->conv.dir);
            for (int j = 0; j < CG_CONV_NDIMS; j++) base_put_i64(&w, *dims[j]);
            base_put_u32(&w, (uint32_t)c->conv.type_x);
            base_put_u32(&w, (uint32_t)c->conv.type_w);
            base_put_u32(&w, (uint32_t)c->conv.type_y);
            base_put_u32(&w, (uint32_t)c->conv.tf32);
            base_put_u32(&w, (uint32_t)c->conv.tune);
            base_put_u32(&w, (uint32_t)c->conv.nalt);
            base_put_u32(&w, (uint32_t)c->conv.dense);
        }
    }
    base_patch_u64(&w, 8, w.len); /* the total length */
    if (w.oom) {
        free(w.p);
        return -1;
    }
    *out = w.p;
    *len = w.len;
    return 0;
}

/* ---- parsing ------------------------------------------------------------------------ */

static cg_program *parse_fail(cg_program *p, char *err, size_t errlen, const char *why) {
    base_fail(err, errlen, "kernel program: %s", why);
    cg_program_free(p);
    return NULL;
}

/* A count read from the bytes, refused when it could not possibly fit in
 * what is left (each record takes at least min_size bytes). */
static int get_count(base_rbuf *r, size_t min_size, int *out) {
    uint32_t n = base_get_u32(r);
    if (r->bad || n > (r->len - r->pos) / min_size || n > (1u << 30)) return -1;
    *out = (int)n;
    return 0;
}

/* The phases of a record after its header read into p; each returns NULL
 * or why the bytes are refused. Dialect, graph hash, scratch, source: */
static const char *parse_head(base_rbuf *r, cg_program *p) {
    uint32_t dialect = base_get_u32(r);
    if (dialect >= CG_DIALECT_COUNT) return "bad dialect";
    p->dialect = (cg_dialect)dialect;
    p->graph_hash = base_get_u64(r);
    p->scratch = base_get_i64(r);
    uint64_t slen = base_get_u64(r);
    if (r->bad || slen > r->len - r->pos) return "truncated source";
    const unsigned char *src = base_take(r, (size_t)slen);
    if (memchr(src, 0, (size_t)slen)) return "NUL in source";
    p->source = malloc((size_t)slen + 1);
    BASE_CHECK_ALLOC(p->source);
    memcpy(p->source, src, (size_t)slen);
    p->source[slen] = 0;
    p->source_len = (size_t)slen;
    if (p->scratch < 0) return "negative scratch size";
    return NULL;
}

/* Kernels: names (C identifiers) and argument counts. */
static const char *parse_kernels(base_rbuf *r, cg_program *p) {
    if (get_count(r, 8, &p->nkernels)) return "bad kernel count";
    p->kernels = calloc((size_t)p->nkernels + 1, sizeof *p->kernels);
    BASE_CHECK_ALLOC(p->kernels);
    for (int k = 0; k < p->nkernels; k++) {
        uint32_t n = base_get_u32(r);
        if (r->bad || n == 0 || n >= CG_NAME_MAX) return "bad kernel name";
        const unsigned char *name = base_take(r, n);
        if (!name) return "truncated kernel name";
        for (uint32_t i = 0; i < n; i++)
            if (!(name[i] == '_' || (name[i] >= '0' && name[i] <= '9') ||
                  (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z')))
                return "bad kernel name";
        memcpy(p->kernels[k].name, name, n);
        uint32_t nargs = base_get_u32(r);
        if (nargs < 1 || nargs > CG_MAX_ARGS) return "bad kernel arity";
        p->kernels[k].nargs = (int)nargs;
    }
    return NULL;
}

static const char *parse_steps(base_rbuf *r, cg_program *p) {
    if (get_count(r, 36, &p->nsteps)) return "bad step count";
    p->steps = calloc((size_t)p->nsteps + 1, sizeof *p->steps);
    BASE_CHECK_ALLOC(p->steps);
    for (int i = 0; i < p->nsteps; i++) {
        cg_step *s = &p->steps[i];
        s->node = base_get_i32(r);
        s->op = base_get_i32(r);
        s->alias = base_get_i32(r);
        s->scratch = base_get_i64(r);
        uint32_t first = base_get_u32(r), n = base_get_u32(r), nbuf = base_get_u32(r);
        if (r->bad) return "truncated step";
        if (nbuf < 1 || nbuf > CG_MAX_BUFS || first > (1u << 30) || n > (1u << 30))
            return "bad step";
        s->first_call = (int)first;
        s->ncalls = (int)n;
        s->nbuf = (int)nbuf;
        for (int j = 0; j < s->nbuf; j++) s->buf[j] = base_get_i32(r);
        if (r->bad) return "truncated step";
        if (s->op < 0 || s->op >= IR_OP_COUNT || s->scratch < 0 || s->scratch > p->scratch)
            return "bad step";
    }
    return NULL;
}

/* One call: its slots and offsets, then the GEMM descriptor every call carries. */
static const char *parse_call(base_rbuf *r, const cg_program *p, cg_call *c) {
    cg_gemm *d = &c->gemm;
    c->kind = (int)base_get_u32(r);
    c->kernel = base_get_i32(r);
    c->count = base_get_i64(r);
    uint32_t nargs = base_get_u32(r);
    if (r->bad || nargs > CG_MAX_ARGS) return "bad call";
    c->nargs = (int)nargs;
    for (int j = 0; j < c->nargs; j++) {
        c->arg[j] = base_get_i32(r);
        c->off[j] = base_get_i64(r);
    }
    d->transa = (int)base_get_u32(r);
    d->transb = (int)base_get_u32(r);
    d->m = base_get_i64(r);
    d->n = base_get_i64(r);
    d->k = base_get_i64(r);
    d->alpha = base_get_f32(r);
    d->beta = base_get_f32(r);
    int64_t *u[] = {&d->lda,      &d->ldb,      &d->ldc,   &d->batch, &d->stride_a,
                    &d->stride_b, &d->stride_c, &d->off_a, &d->off_b, &d->off_c};
    for (int j = 0; j < 10; j++) *u[j] = base_get_i64(r);
    d->type_a = (int)base_get_u32(r);
    d->type_b = (int)base_get_u32(r);
    d->type_c = (int)base_get_u32(r);
    d->tf32 = (int)base_get_u32(r);
    c->launch.grid = base_get_u32(r);
    c->launch.block = base_get_u32(r);
    c->launch.shared = base_get_u32(r);
    if (c->kind == CG_CALL_CONV) {
        int64_t *dims[CG_CONV_NDIMS] = CG_CONV_DIMS(&c->conv);
        c->conv.dir = (int)base_get_u32(r);
        for (int j = 0; j < CG_CONV_NDIMS; j++) *dims[j] = base_get_i64(r);
        c->conv.type_x = (int)base_get_u32(r);
        c->conv.type_w = (int)base_get_u32(r);
        c->conv.type_y = (int)base_get_u32(r);
        c->conv.tf32 = (int)base_get_u32(r);
        c->conv.tune = (int)base_get_u32(r);
        uint32_t nalt = base_get_u32(r);
        if (nalt > (1u << 20)) return "bad conv call";
        c->conv.nalt = (int)nalt;
        c->conv.dense = (int)base_get_u32(r);
    }
    if (r->bad) return "truncated call";
    if ((d->type_a != IR_F32 && d->type_a != IR_BF16) || d->type_b != d->type_a ||
        (d->type_c != IR_F32 && d->type_c != IR_BF16))
        return "bad gemm element type";
    if (d->tf32 != 0 && (d->tf32 != 1 || d->type_a != IR_F32)) return "bad gemm tf32";
    if (d->transa < 0 || d->transa > 1 || d->transb < 0 || d->transb > 1)
        return "bad gemm transpose flag";
    if (c->kind == CG_CALL_KERNEL) {
        if (c->kernel < 0 || c->kernel >= p->nkernels || c->nargs != p->kernels[c->kernel].nargs ||
            c->count < 0)
            return "bad kernel call";
        const cg_launch *l = &c->launch;
        if (cg_dialect_launches(p->dialect)
                ? l->grid < 1 || l->grid > CG_MAX_GRID || l->block < 1 || l->block > CG_MAX_BLOCK ||
                      l->shared > CG_MAX_SHARED
                : l->grid || l->block || l->shared)
            return "bad launch geometry";
    } else if (c->launch.grid || c->launch.block || c->launch.shared) {
        return "bad launch geometry";
    } else if (c->kind == CG_CALL_GEMM || c->kind == CG_CALL_CONV) {
        if (c->nargs != 3) return "bad gemm call";
    } else {
        return "bad call kind";
    }
    for (int j = 0; j < c->nargs; j++)
        if (c->off[j] < 0) return "negative offset";
    return NULL;
}

static const char *parse_calls(base_rbuf *r, cg_program *p) {
    if (get_count(r, 164, &p->ncalls)) return "bad call count";
    p->calls = calloc((size_t)p->ncalls + 1, sizeof *p->calls);
    BASE_CHECK_ALLOC(p->calls);
    for (int i = 0; i < p->ncalls; i++) {
        const char *why = parse_call(r, p, &p->calls[i]);
        if (why) return why;
    }
    return NULL;
}

/* Steps own contiguous, in-range call ranges whose slots they hold. */
static const char *check_call_ranges(const cg_program *p) {
    for (int i = 0; i < p->nsteps; i++) {
        const cg_step *s = &p->steps[i];
        if ((int64_t)s->first_call + s->ncalls > p->ncalls) return "step calls out of range";
        for (int c = s->first_call; c < s->first_call + s->ncalls; c++) {
            for (int j = 0; j < p->calls[c].nargs; j++)
                if (p->calls[c].arg[j] < 0 || p->calls[c].arg[j] >= s->nbuf)
                    return "call slot out of range";
            /* a conv's alternative is calls of its own step, none a conv */
            const cg_call *cc = &p->calls[c];
            if (cc->kind == CG_CALL_CONV) {
                if ((int64_t)c + cc->conv.nalt >= (int64_t)s->first_call + s->ncalls)
                    return "conv alternative out of its step";
                for (int a = c + 1; a <= c + cc->conv.nalt; a++)
                    if (p->calls[a].kind == CG_CALL_CONV) return "conv alternative holds a conv";
            }
        }
    }
    return NULL;
}

cg_program *cg_program_parse_prefix(const unsigned char *buf, size_t len, size_t *used, char *err,
                                    size_t errlen) {
    base_rbuf r = {buf, len, 0, 0};
    const unsigned char *magic = base_take(&r, 4);
    if (!magic || memcmp(magic, CG_MAGIC, 4) != 0)
        return parse_fail(NULL, err, errlen, "bad magic");
    uint32_t version = base_get_u32(&r);
    uint64_t total = base_get_u64(&r);
    if (r.bad) return parse_fail(NULL, err, errlen, "truncated header");
    if (version != CG_VERSION) {
        base_fail(err, errlen, "kernel program: version %u, this build reads %u", version,
                  CG_VERSION);
        return NULL;
    }
    if (total > len || total < 20) return parse_fail(NULL, err, errlen, "truncated");
    r.len = (size_t)total; /* never read past this record */
    cg_program *p = calloc(1, sizeof *p);
    BASE_CHECK_ALLOC(p);
    const char *why = parse_head(&r, p);
    if (!why) why = parse_kernels(&r, p);
    if (!why) why = parse_steps(&r, p);
    if (!why) why = parse_calls(&r, p);
    if (!why) why = check_call_ranges(p);
    if (!why && r.pos != r.len) why = "trailing bytes in record";
    if (why) return parse_fail(p, err, errlen, why);
    if (used) *used = r.pos;
    return p;
}

cg_program *cg_program_parse(const unsigned char *buf, size_t len, char *err, size_t errlen) {
    size_t used = 0;
    cg_program *p = cg_program_parse_prefix(buf, len, &used, err, errlen);
    if (p && used != len) return parse_fail(p, err, errlen, "trailing bytes");
    return p;
}

int cg_section_find(const unsigned char *buf, size_t len, const ir_graph *g, cg_program **out,
                    char *err, size_t errlen) {
    uint64_t h = cg_graph_hash(g);
    size_t pos = 0;
    *out = NULL;
    while (pos < len) {
        size_t used = 0;
        /* A program of another version (an older dpc's plan) is skipped: the
         * graph is in the plan, so the runtime makes its kernels anew. */
        if (len - pos >= 16 && !memcmp(buf + pos, CG_MAGIC, 4)) {
            uint32_t v = 0;
            uint64_t total = 0;
            for (int i = 0; i < 4; i++) v |= (uint32_t)buf[pos + 4 + i] << (8 * i);
            for (int i = 0; i < 8; i++) total |= (uint64_t)buf[pos + 8 + i] << (8 * i);
            if (v != CG_VERSION && total >= 16 && total <= len - pos) {
                pos += (size_t)total;
                continue;
            }
        }
        cg_program *p = cg_program_parse_prefix(buf + pos, len - pos, &used, err, errlen);
        if (!p) {
            cg_program_free(*out);
            *out = NULL;
            return -1;
        }
        if (p->graph_hash == h && !*out)
            *out = p; /* keep parsing: a malformed tail is still an error */
        else
            cg_program_free(p);
        pos += used;
    }
    if (*out) return 0;
    base_fail(err, errlen, "kernel section holds no program for this graph (hash %016" PRIx64 ")",
              h);
    return 1;
}

int cg_kernel_source(const cg_program *p, int k, size_t *off, size_t *len) {
    if (k < 0 || k >= p->nkernels || !p->source) return -1;
    /* `void NAME(`, or in CUDA `void __launch_bounds__(B) NAME(` */
    char sig[CG_NAME_MAX + 8];
    snprintf(sig, sizeof sig, " %s(", p->kernels[k].name);
    const char *at = strstr(p->source, sig);
    if (!at) return -1;
    /* back to the start of the line (CUDA: extern "C" __global__ ...), and
     * over a `const idx_t NAME_grain` line just before it (C) */
    while (at > p->source && at[-1] != '\n') at--;
    char grain[CG_NAME_MAX + 24];
    snprintf(grain, sizeof grain, "const idx_t %s_grain", p->kernels[k].name);
    const char *g = strstr(p->source, grain);
    if (g && g < at) at = g;
    const char *end = strstr(at, "\n}\n");
    if (!end) return -1;
    *off = (size_t)(at - p->source);
    *len = (size_t)(end + 3 - at);
    return 0;
}

/* ---- statistics -------------------------------------------------------- */

int cg_program_launches(const cg_program *p, int *gemms) {
    int g = 0, convs = 0;
    for (int c = 0; c < p->ncalls; c++) {
        g += p->calls[c].kind == CG_CALL_GEMM;
        convs += p->calls[c].kind == CG_CALL_CONV;
    }
    if (gemms) *gemms = g;
    return p->ncalls - convs;
}
