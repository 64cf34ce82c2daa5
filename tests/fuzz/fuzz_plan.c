/* libFuzzer target: the plan loader, the kernel programs and memory plans a
 * plan holds, and the memory dprun would check it against (runtime/exec/exec.h).
 *
 * Three ways in: the input as it is; the input with its header's length
 * and checksum made right (nearly every byte mutation breaks the FNV-1a
 * checksum, which anyone can recompute, so an attacker always would); and
 * field mutations: when a plan is followed by trailing bytes, those are a
 * script of edits to decoded fields — a node's op, input, attribute,
 * dimension, dtype, flags; every schedule field, the optimizer section, the
 * fusion groups (what ir/validate.h checks); a kernel program's counts,
 * slots, offsets, buffers, GEMM sizes; a memory plan's offsets — applied in place,
 * then the checksum fixed up. Whatever gets through plan_read must then
 * pass what dprun does before it runs anything (runtime/exec/exec.c): render
 * the kernels from the graph, check them, compare them with the embedded
 * program. A rendered program that fails its own check aborts: the graph
 * validation let through a graph the renderer cannot handle. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "format/plan.h"
#include "passes/passes.h"

static void check_programs(const dpc_plan *p, const ir_graph *g) {
    char err[512], what[256];
    for (int d = 0; d < 2; d++) {
        cg_program *gen = cg_generate(g, (cg_dialect)d, NULL, err, sizeof err);
        if (!gen) continue;
        if (cg_program_check(gen, g, err, sizeof err)) {
            fprintf(stderr, "a program rendered from a verified graph fails its check: %s\n", err);
            abort();
        }
        const plan_section *s = plan_find_section(p, cg_section_tag((cg_dialect)d));
        cg_program *prog = NULL;
        if (s && cg_section_find(s->data, s->len, g, &prog, err, sizeof err) == 0 && prog) {
            cg_program_check(prog, g, err, sizeof err);
            cg_program_diff(prog, gen, what, sizeof what);
        }
        cg_program_free(prog);
        cg_program_free(gen);
    }
}

static void load(const uint8_t *data, size_t size) {
    char err[512];
    dpc_plan *p = plan_read_mem("fuzz.plan", data, size, err, sizeof err);
    if (!p) return;
    check_programs(p, p->train);
    check_programs(p, p->eval);
    /* What dprun adds up before allocating: saturating sums, never overflow. */
    const plan_section *mp = plan_find_section(p, FMT_MEMPLAN_SECTION);
    if (p->train && p->eval) {
        fmt_memplan *mt = NULL, *me = NULL;
        if (mp) {
            fmt_memplan_section_find(mp->data, mp->len, p->train, &mt, err, sizeof err);
            fmt_memplan_section_find(mp->data, mp->len, p->eval, &me, err, sizeof err);
        }
        fmt_memory need;
        fmt_memory_need(p->train, mt, p->eval, me, &need);
        if (fmt_memory_total(&need) < 0) abort();
        fmt_memplan_free(mt);
        fmt_memplan_free(me);
    }
    plan_free(p);
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- the decoded fields of a plan's payload -------------------------------- */

typedef struct {
    uint32_t off;  /* in the payload */
    uint8_t width; /* 4 or 8 bytes */
    uint8_t real;  /* an IEEE double (8) or float (4) */
} field;

#define MAX_FIELDS 200000
typedef struct {
    const uint8_t *b;
    size_t n, pos;
    field *f;
    int nf;
    int bad;
} walker;

static void add(walker *w, int width, int real) {
    if (w->pos + (size_t)width > w->n) {
        w->bad = 1;
        return;
    }
    if (w->nf < MAX_FIELDS)
        w->f[w->nf++] = (field){(uint32_t)w->pos, (uint8_t)width, (uint8_t)real};
    w->pos += (size_t)width;
}
static uint64_t take(walker *w, int width) { /* a field, recorded, and its value */
    size_t at = w->pos;
    add(w, width, 0);
    return w->bad ? 0 : le(w->b + at, width);
}
static uint64_t peek4(const walker *w) {
    return w->pos + 4 <= w->n ? le(w->b + w->pos, 4) : UINT64_MAX / 2;
}
static void skip(walker *w, uint64_t n) {
    if (w->pos > w->n || n > w->n - w->pos)
        w->bad = 1;
    else
        w->pos += (size_t)n;
}

static void walk_graph(walker *w, size_t end) {
    uint32_t n = (uint32_t)take(w, 4);
    for (uint32_t i = 0; i < n && !w->bad && w->pos < end; i++) {
        take(w, 4); /* op */
        uint64_t nin = take(w, 4);
        for (uint64_t j = 0; j < nin && j < 16 && !w->bad; j++) take(w, 4);
        uint64_t nia = take(w, 4);
        for (uint64_t j = 0; j < nia && j < 16 && !w->bad; j++) take(w, 8);
        uint64_t nfa = take(w, 4);
        for (uint64_t j = 0; j < nfa && j < 16 && !w->bad; j++) add(w, 8, 1);
        uint64_t nd = take(w, 4);
        for (uint64_t j = 0; j < nd && j < 16 && !w->bad; j++) take(w, 8);
        take(w, 4);            /* dtype */
        take(w, 4);            /* flags */
        skip(w, peek4(w) + 4); /* name */
        take(w, 4);
        take(w, 4); /* line, col */
        if (nin > 16 || nia > 16 || nfa > 16 || nd > 16) w->bad = 1;
    }
}

/* Every SCHD field (format/plan_schedule.c's order: ir/ir.h's field table): what ir/validate.h checks. */
static void walk_schedule(walker *w) {
    take(w, 4), take(w, 4), add(w, 8, 1), take(w, 4), add(w, 8, 1), add(w, 8, 1);
    uint64_t steps = take(w, 4);
    for (uint64_t i = 0; i < steps && i < 64 && !w->bad; i++) take(w, 4), add(w, 8, 1);
    take(w, 4), take(w, 4), take(w, 4), take(w, 4); /* scaling, reference, warmup, curve */
    add(w, 8, 1), add(w, 8, 1);                     /* lr_final, lr_power */
    uint64_t n = peek4(w);
    take(w, 4); /* the dataset's length, then its first bytes as one field */
    if (n >= 4 && !w->bad)
        take(w, 4), skip(w, n - 4);
    else
        skip(w, n);
    for (int i = 0; i < 4; i++) take(w, 4);   /* pad, crop, mirror, normalize */
    for (int i = 0; i < 6; i++) add(w, 8, 1); /* mean, std */
    take(w, 4);                               /* eval batch */
}

/* OPTM: nesterov, exclude, eta, eps, beta1, beta2. */
static void walk_optimizer(walker *w) {
    take(w, 4), take(w, 4);
    for (int i = 0; i < 4; i++) add(w, 8, 1);
}

/* GRPS: each program's node count, then a group per node. */
static void walk_groups(walker *w, size_t end) {
    for (int k = 0; k < 2 && !w->bad; k++) {
        uint64_t n = take(w, 4);
        for (uint64_t i = 0; i < n && !w->bad && w->pos < end; i++) take(w, 4);
    }
}

/* Programs back to back (format/program.c's layout). */
static void walk_programs(walker *w, size_t end) {
    while (!w->bad && w->pos + 16 <= end) {
        size_t start = w->pos;
        uint64_t total = le(w->b + start + 8, 8);
        if (total < 16 || total > end - start) return;
        w->pos += 28; /* magic, version, length, dialect, graph hash */
        take(w, 8);   /* scratch */
        skip(w, take(w, 8));
        uint64_t nk = take(w, 4);
        for (uint64_t k = 0; k < nk && !w->bad && w->pos < end; k++) {
            skip(w, peek4(w) + 4);
            take(w, 4);
        }
        uint64_t ns = take(w, 4);
        for (uint64_t s = 0; s < ns && !w->bad && w->pos < end; s++) {
            take(w, 4), take(w, 4), take(w, 4), take(w, 8), take(w, 4), take(w, 4);
            uint64_t nb = take(w, 4);
            for (uint64_t j = 0; j < nb && j < 64 && !w->bad; j++) take(w, 4);
        }
        uint64_t nc = take(w, 4);
        for (uint64_t c = 0; c < nc && !w->bad && w->pos < end; c++) {
            take(w, 4), take(w, 4), take(w, 8);
            uint64_t na = take(w, 4);
            for (uint64_t j = 0; j < na && j < 64 && !w->bad; j++) take(w, 4), take(w, 8);
            take(w, 4), take(w, 4);
            for (int j = 0; j < 3; j++) take(w, 8);
            add(w, 4, 1), add(w, 4, 1);
            for (int j = 0; j < 10; j++) take(w, 8);
            for (int j = 0; j < 3; j++) take(w, 4);
        }
        w->pos = start + (size_t)total;
    }
}

static void walk_memplans(walker *w, size_t end) {
    while (!w->bad && w->pos + 52 <= end) {
        size_t start = w->pos;
        uint64_t total = le(w->b + start + 8, 8);
        if (total < 52 || total > end - start) return;
        w->pos += 24;
        take(w, 8), take(w, 8), take(w, 8);
        uint64_t n = take(w, 4);
        for (uint64_t i = 0; i < n && !w->bad && w->pos < start + total; i++) take(w, 8);
        w->pos = start + (size_t)total;
    }
}

static int walk(const uint8_t *pay, size_t n, field *f) {
    walker w = {pay, n, 0, f, 0, 0};
    while (w.pos + 12 <= n) {
        char tag[5] = {0};
        memcpy(tag, pay + w.pos, 4);
        uint64_t len = le(pay + w.pos + 4, 8);
        size_t body = w.pos + 12;
        if (len > n - body) break;
        size_t end = body + (size_t)len;
        w.pos = body;
        w.bad = 0;
        walker sub = w;
        sub.n = end;
        if (!strcmp(tag, "GTRN") || !strcmp(tag, "GEVL"))
            walk_graph(&sub, end);
        else if (!strcmp(tag, "SCHD"))
            walk_schedule(&sub);
        else if (!strcmp(tag, "OPTM"))
            walk_optimizer(&sub);
        else if (!strcmp(tag, "GRPS"))
            walk_groups(&sub, end);
        else if (!strcmp(tag, "KCPU") || !strcmp(tag, "KCUD"))
            walk_programs(&sub, end);
        else if (!strcmp(tag, "MEMP"))
            walk_memplans(&sub, end);
        w.nf = sub.nf;
        w.pos = end;
    }
    return w.nf;
}

/* One edit: 5 bytes of script, u16 field, u8 how, u16 amount. */
static void edit(uint8_t *pay, const field *f, const uint8_t *op) {
    uint8_t *at = pay + f->off;
    unsigned how = op[2] % 12;
    uint64_t amount = le(op + 3, 2);
    if (f->real) {
        /* the edges of a float, and of the validator's ranges (momentum,
         * betas in [0, 1), wd, eta, eps at most 1, lr power 100, 1e6) */
        static const double vals[] = {0.0,    -0.0,    1.0,   -1.0,  NAN,    INFINITY, -INFINITY,
                                      3.5e38, -3.5e38, 1e-45, 1e300, 5e-324, 0.5,      0.9,
                                      0.999,  2.0,     100.5, 1e6,   1e30,   1e-9};
        double v = vals[op[2] % (sizeof vals / sizeof *vals)];
        if (f->width == 8) {
            uint64_t bits;
            memcpy(&bits, &v, 8);
            put_le(at, bits, 8);
        } else {
            float x = (float)v;
            uint32_t bits;
            memcpy(&bits, &x, 4);
            put_le(at, bits, 4);
        }
        return;
    }
    uint64_t v = le(at, f->width);
    const uint64_t top = f->width == 8 ? UINT64_MAX : UINT32_MAX;
    switch (how) {
    case 0: v += amount; break;
    case 1: v -= amount; break;
    case 2: v = 0; break;
    case 3: v = top; break; /* -1 */
    case 4: v = amount; break;
    case 5: v = top >> 1; break;       /* INT_MAX */
    case 6: v = (top >> 1) + 1; break; /* INT_MIN */
    case 7: v = (uint64_t)1 << (f->width == 8 ? 40 : 30); break;
    case 8: v += 1; break;
    case 9: v -= 1; break;
    case 10: v *= 2; break;
    default: v ^= (uint64_t)1 << (amount % (unsigned)(8 * f->width)); break;
    }
    put_le(at, v, f->width);
}

static field fields[MAX_FIELDS];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load(data, size);
    if (size < PLAN_HEADER_SIZE) return 0;
    /* The checksum (and length) made right over the whole input. */
    uint8_t *fixed = malloc(size);
    if (!fixed) abort();
    memcpy(fixed, data, size);
    put_le(fixed + 16, size - PLAN_HEADER_SIZE, 8);
    put_le(fixed + 24, plan_checksum(fixed + PLAN_HEADER_SIZE, size - PLAN_HEADER_SIZE), 8);
    load(fixed, size);
    /* Field edits: the header's payload length says where the plan ends;
     * up to 8 edits of 5 bytes follow it. */
    uint64_t plen = le(data + 16, 8);
    if (plen <= size - PLAN_HEADER_SIZE && size - PLAN_HEADER_SIZE - plen >= 5) {
        size_t psize = PLAN_HEADER_SIZE + (size_t)plen;
        memcpy(fixed, data, psize);
        uint8_t *pay = fixed + PLAN_HEADER_SIZE;
        int nf = walk(pay, (size_t)plen, fields);
        const uint8_t *script = data + psize;
        size_t ns = (size - psize) / 5;
        for (size_t i = 0; i < ns && i < 8 && nf > 0; i++)
            edit(pay, &fields[le(script + 5 * i, 2) % (unsigned)nf], script + 5 * i);
        put_le(fixed + 24, plan_checksum(pay, (size_t)plen), 8);
        load(fixed, psize);
    }
    free(fixed);
    return 0;
}
