/* format/memplan.c — the memory-plan record: lifetimes, the in-place rule,
 * the check of a plan against its graph, the bytes, and the memory need.
 *
 * Lifetimes come from the execution order (format/memplan.h: one step per
 * fusion group or other non-source node, in graph order). A tensor is born
 * at the step that stores it and dies after the last step that reads it,
 * directly or through a view (flatten, reshape_like); outputs the runtime
 * reads after a step (loss, logits) live to the end; parameter gradients
 * are kept out of the arena altogether (they are read after the step, and
 * later by collectives), as are sources (inputs are written from the host
 * between steps; parameters and states live in the store).
 *
 * In place: an elementwise step (every member pointwise, one output shape)
 * reads each input at the element it writes, and its kernel loads before it
 * stores (codegen/fused.c), so an output may take over the bytes of an
 * input that dies at that step, when both have the same size and every
 * read of that input in the step is at the element index. (Channel-
 * reduction steps re-read their inputs in later passes, and GEMM steps read
 * whole panels: never in place.) The planner (passes/memplan.c) and the
 * check of a loaded plan apply the same rule.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/err.h"
#include "format/graph.h"
#include "format/memplan.h"

#define MEMP_MAGIC   "DPCM"
#define MEMP_VERSION 1u

static int64_t align_up(int64_t b) {
    return (b + FMT_MEMPLAN_ALIGN - 1) / FMT_MEMPLAN_ALIGN * FMT_MEMPLAN_ALIGN;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    BASE_CHECK_ALLOC(p);
    return p;
}

void fmt_memplan_free(fmt_memplan *m) {
    if (!m) return;
    free(m->offset), free(m->bytes), free(m->def), free(m->last), free(m->inplace), free(m->step);
    free(m);
}

static fmt_memplan *new_plan(int n) {
    fmt_memplan *m = xcalloc(1, sizeof *m);
    m->n = n;
    m->offset = xcalloc((size_t)n, sizeof *m->offset);
    m->bytes = xcalloc((size_t)n, sizeof *m->bytes);
    m->def = xcalloc((size_t)n, sizeof *m->def);
    m->last = xcalloc((size_t)n, sizeof *m->last);
    m->inplace = xcalloc((size_t)n, sizeof *m->inplace);
    m->step = xcalloc((size_t)n, sizeof *m->step);
    return m;
}

/* ---- lifetimes ------------------------------------------------------------------------- */

fmt_memplan *fmt_memplan_lifetimes(const ir_graph *g) {
    int n = g->n;
    fmt_memplan *m = new_plan(n);
    m->graph_hash = ir_graph_hash(g);
    unsigned char *stored = xcalloc((size_t)n, 1), *keep = xcalloc((size_t)n, 1);
    ir_stored(g, stored);
    int cur = -1;
    for (int i = 0; i < n; i++) {
        const ir_node *nd = &g->nodes[i];
        m->offset[i] = -1, m->inplace[i] = -1, m->def[i] = m->last[i] = -1;
        if (ir_is_source(nd->op)) {
            m->step[i] = -1;
            continue;
        }
        if (!(nd->group && i > 0 && g->nodes[i - 1].group == nd->group)) cur++;
        m->step[i] = cur;
    }
    m->nsteps = cur + 1;
    /* keep: 1 = the runtime reads it after the step (live to the end),
     * 2 = a parameter gradient (out of the arena). A view passes its flags
     * to the storage it reads. */
    for (int i = 0; i < n; i++) {
        int r = ir_storage_of(g, i);
        unsigned f = g->nodes[i].flags;
        /* A gradient's all-reduced sum is written by the communication
         * queue while later steps run (runtime/comm/comm.h): like the gradient it
         * gets a buffer of its own rather than arena bytes whose owner
         * changes under the transfer. */
        if ((f & IR_FLAG_GRAD) || g->nodes[i].op == IR_OP_ALLREDUCE)
            keep[r] = 2;
        else if ((f & (IR_FLAG_OUTPUT | IR_FLAG_LOSS)) && keep[r] != 2)
            keep[r] = 1;
    }
    for (int i = 0; i < n; i++) {
        const ir_node *nd = &g->nodes[i];
        if (ir_is_source(nd->op) || ir_is_view(nd->op) || nd->op == IR_OP_ASSIGN || !stored[i] ||
            keep[i] == 2)
            continue;
        m->bytes[i] = align_up(fmt_node_bytes(nd));
        m->def[i] = m->last[i] = m->step[i];
        if (keep[i] == 1) m->last[i] = m->nsteps - 1;
    }
    for (int c = 0; c < n; c++)
        for (int k = 0; k < g->nodes[c].ninputs; k++) {
            int r = ir_storage_of(g, g->nodes[c].input[k]);
            if (m->bytes[r] && m->step[c] > m->last[r]) m->last[r] = m->step[c];
        }
    free(stored);
    free(keep);
    return m;
}

void fmt_memplan_step_range(const fmt_memplan *m, int at, int *lo, int *hi) {
    int s = m->step[at];
    *lo = at, *hi = at + 1;
    while (*lo > 0 && m->step[*lo - 1] == s) --*lo;
    while (*hi < m->n && m->step[*hi] == s) ++*hi;
}

int fmt_memplan_inplace_ok(const ir_graph *g, const fmt_memplan *m, int o, int e) {
    if (o < 0 || e < 0 || o >= m->n || e >= m->n || o == e) return 0;
    if (!m->bytes[o] || !m->bytes[e] || m->bytes[o] != m->bytes[e]) return 0;
    const ir_node *on = &g->nodes[o], *en = &g->nodes[e];
    if (ir_numel(&on->type) != ir_numel(&en->type) || on->type.dtype != en->type.dtype) return 0;
    int s = m->step[o];
    if (m->def[e] >= s || m->last[e] != s || m->last[e] == m->nsteps - 1) return 0;
    /* keep-to-the-end inputs (last == nsteps - 1) are excluded above */
    int lo, hi, reads = 0;
    fmt_memplan_step_range(m, o, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        const ir_node *nd = &g->nodes[i];
        if (!ir_op_expr(nd->op) || !ir_type_equal(&nd->type, &on->type)) return 0;
        for (int k = 0; k < nd->ninputs; k++) {
            if (ir_storage_of(g, nd->input[k]) != e) continue;
            int acc = nd->op == IR_OP_ASSIGN ? (k == 1 ? 'i' : 'w') : ir_op_access(nd->op, k);
            if (acc == 'w' || (acc && acc != 'i')) return 0;
            reads += acc == 'i';
        }
    }
    return reads > 0;
}

/* ---- checking -------------------------------------------------------------------------- */

/* The check sweeps the steps in order with the live allocations' byte
 * ranges in a search tree (tsearch). Live ranges are pairwise disjoint
 * unless the plan is wrong, so ordering ranges by "entirely below" makes
 * every range that overlaps a new one compare equal to it: one lookup
 * finds a clash, and the check is O(n log n) even for a forged plan that
 * puts every tensor at offset 0. A range held by several live tensors (an
 * output taking over its dying input's bytes) is one span listing them. */
typedef struct {
    int64_t lo, hi;
    int first; /* its live tensors, linked through next[] */
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->hi <= y->lo ? -1 : y->hi <= x->lo ? 1 : 0;
}

/* Node numbers by key[node], then by number. */
static int cmp_by_key(const void *a, const void *b, void *key) {
    int i = *(const int *)a, j = *(const int *)b, x = ((int *)key)[i], y = ((int *)key)[j];
    return x != y ? (x > y) - (x < y) : (i > j) - (i < j);
}

static void span_free(void *p) { free(p); }

int fmt_memplan_check(const fmt_memplan *m, const ir_graph *g, char *err, size_t errlen) {
    if (m->n != g->n || m->graph_hash != ir_graph_hash(g))
        return base_fail(err, errlen, "memory plan was made for another graph");
    if (m->arena_bytes < 0 || m->arena_bytes > ((int64_t)1 << 50))
        return base_fail(err, errlen, "memory plan: arena of %" PRId64 " bytes", m->arena_bytes);
    fmt_memplan *L = fmt_memplan_lifetimes(g);
    int *born = xcalloc((size_t)g->n + 1, sizeof *born),
        *dies = xcalloc((size_t)g->n + 1, sizeof *dies);
    int *next = xcalloc((size_t)g->n + 1, sizeof *next),
        *prev = xcalloc((size_t)g->n + 1, sizeof *prev);
    span **of = xcalloc((size_t)g->n + 1, sizeof *of);
    int np = 0, rc = 0;
    for (int i = 0; i < g->n && !rc; i++) {
        if (m->offset[i] < 0) continue;
        if (!L->bytes[i] || m->offset[i] % FMT_MEMPLAN_ALIGN ||
            m->offset[i] > m->arena_bytes - L->bytes[i])
            rc = base_fail(err, errlen,
                           "memory plan: node %d (%s) at offset %" PRId64 " does not fit", i,
                           ir_ops[g->nodes[i].op].name, m->offset[i]);
        born[np] = dies[np] = i, np++;
    }
    qsort_r(born, (size_t)np, sizeof *born, cmp_by_key, L->def);
    qsort_r(dies, (size_t)np, sizeof *dies, cmp_by_key, L->last);
    void *live = NULL;
    for (int b = 0, d = 0; b < np && !rc; b++) {
        int v = born[b];
        for (; d < np && L->last[dies[d]] < L->def[v]; d++) { /* those dead before v's step */
            int u = dies[d];
            span *sp = of[u];
            if (!sp) continue;
            if (prev[u] >= 0)
                next[prev[u]] = next[u];
            else
                sp->first = next[u];
            if (next[u] >= 0) prev[next[u]] = prev[u];
            of[u] = NULL;
            if (sp->first < 0) {
                tdelete(sp, &live, cmp_span);
                free(sp);
            }
        }
        span key = {m->offset[v], m->offset[v] + L->bytes[v], -1};
        void *found = tfind(&key, &live, cmp_span);
        span *sp = found ? *(span **)found : NULL;
        if (sp) {
            int same = sp->lo == key.lo && sp->hi == key.hi;
            for (int u = sp->first; u >= 0 && !rc; u = next[u])
                if (!same ||
                    !(fmt_memplan_inplace_ok(g, L, v, u) || fmt_memplan_inplace_ok(g, L, u, v)))
                    rc = base_fail(err, errlen,
                                   "memory plan: nodes %d and %d share bytes while both are live "
                                   "(steps %d-%d, %d-%d)",
                                   u, v, L->def[u], L->last[u], L->def[v], L->last[v]);
        } else {
            sp = xcalloc(1, sizeof *sp);
            *sp = key;
            if (!tsearch(sp, &live, cmp_span)) {
                free(sp);
                rc = base_fail(err, errlen, "memory plan: out of memory");
                break;
            }
        }
        if (rc) break;
        prev[v] = -1, next[v] = sp->first;
        if (sp->first >= 0) prev[sp->first] = v;
        sp->first = v, of[v] = sp;
    }
    tdestroy(live, span_free);
    free(born), free(dies), free(next), free(prev), free(of);
    fmt_memplan_free(L);
    return rc;
}

/* ---- bytes ----------------------------------------------------------------------------- */

int fmt_memplan_serialize(const fmt_memplan *m, unsigned char **out, size_t *len) {
    base_wbuf w = {0};
    base_put(&w, MEMP_MAGIC, 4);
    base_put_u32(&w, MEMP_VERSION);
    base_put_u64(&w, 0); /* total length, patched below */
    base_put_u64(&w, m->graph_hash);
    base_put_i64(&w, m->arena_bytes);
    base_put_i64(&w, m->naive_bytes);
    base_put_i64(&w, m->lower_bytes);
    base_put_u32(&w, (uint32_t)m->n);
    for (int i = 0; i < m->n; i++) base_put_i64(&w, m->offset[i]);
    base_patch_u64(&w, 8, w.len);
    if (w.oom) {
        free(w.p);
        return -1;
    }
    *out = w.p;
    *len = w.len;
    return 0;
}

#define HEAD_BYTES 52 /* magic, version, length, hash, 3 sizes, count */

int fmt_memplan_section_find(const unsigned char *buf, size_t len, const ir_graph *g,
                             fmt_memplan **out, char *err, size_t errlen) {
    uint64_t h = ir_graph_hash(g);
    size_t pos = 0;
    *out = NULL;
    while (pos < len) {
        base_rbuf r = {buf + pos, len - pos, 0, 0};
        const unsigned char *magic = base_take(&r, 4);
        uint32_t version = base_get_u32(&r);
        uint64_t total = base_get_u64(&r), hash = base_get_u64(&r);
        int64_t arena = base_get_i64(&r), naive = base_get_i64(&r), lower = base_get_i64(&r);
        uint64_t n = base_get_u32(&r);
        if (r.bad || memcmp(magic, MEMP_MAGIC, 4))
            return base_fail(err, errlen, "memory plan: bad record at byte %zu", pos);
        if (version != MEMP_VERSION)
            return base_fail(err, errlen, "memory plan: version %u, this build reads %u", version,
                             MEMP_VERSION);
        if (total > r.len || total < HEAD_BYTES || n > (total - HEAD_BYTES) / 8 ||
            total != HEAD_BYTES + 8 * n) {
            return base_fail(err, errlen, "memory plan: truncated or malformed record");
        }
        if (hash == h && !*out && n == (uint64_t)g->n) {
            fmt_memplan *m = fmt_memplan_lifetimes(g);
            m->arena_bytes = arena;
            m->naive_bytes = naive;
            m->lower_bytes = lower;
            for (int i = 0; i < g->n; i++) {
                int64_t off = base_get_i64(&r);
                m->offset[i] = off < 0 ? -1 : off;
            }
            char why[256];
            if (fmt_memplan_check(m, g, why, sizeof why)) {
                base_fail(err, errlen, "%s", why);
                fmt_memplan_free(m);
                return -1;
            }
            *out = m;
        }
        pos += (size_t)total;
    }
    if (*out) return 0;
    base_fail(err, errlen, "no memory plan for this graph (hash %016" PRIx64 ")", h);
    return 1;
}

/* ---- memory needs and limits ------------------------------------------------------------ */

/* Mirrors runtime/exec/exec.c's binding: views and assigns share their storage,
 * values kept in a fused kernel's registers take none, planned tensors sit
 * in the arena, everything else stored gets its own buffer. An all-reduced
 * sum is counted as its own buffer, as it is with several replicas. */
int64_t fmt_program_bytes(const ir_graph *g, const fmt_memplan *m) {
    unsigned char *stored = xcalloc((size_t)g->n, 1);
    ir_stored(g, stored);
    int64_t total = m ? m->arena_bytes : 0;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (ir_is_persistent(n->op) || ir_storage_of(g, i) != i || !stored[i] ||
            (m && i < m->n && m->offset[i] >= 0))
            continue;
        total = base_bytes_add(total, fmt_node_bytes(n));
    }
    free(stored);
    return total;
}

static int64_t input_batch(const ir_graph *g) {
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_INPUT && g->nodes[i].type.ndim > 0)
            return g->nodes[i].type.dim[0];
    return 0;
}

void fmt_memory_need(const ir_graph *train, const fmt_memplan *train_plan, const ir_graph *eval,
                     const fmt_memplan *eval_plan, fmt_memory *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < train->n; i++) { /* the store holds the train program's sources */
        const ir_node *n = &train->nodes[i];
        if (n->op == IR_OP_PARAM) out->params = base_bytes_add(out->params, fmt_node_bytes(n));
        if (n->op == IR_OP_STATE) out->state = base_bytes_add(out->state, fmt_node_bytes(n));
    }
    out->train = fmt_program_bytes(train, train_plan);
    out->train_batch = input_batch(train);
    if (eval) {
        out->eval = fmt_program_bytes(eval, eval_plan);
        out->eval_batch = input_batch(eval);
    }
}

int64_t fmt_memory_total(const fmt_memory *m) {
    return base_bytes_add(base_bytes_add(m->params, m->state), base_bytes_add(m->train, m->eval));
}

void fmt_memory_describe(const fmt_memory *m, char *buf, size_t n) {
    char p[32], s[32], t[32], e[32];
    snprintf(buf, n,
             "parameters %s, optimizer and BatchNorm state %s, train program %s at batch %" PRId64
             ", eval program %s at batch %" PRId64,
             base_bytes_str(m->params, p, sizeof p), base_bytes_str(m->state, s, sizeof s),
             base_bytes_str(m->train, t, sizeof t), m->train_batch,
             base_bytes_str(m->eval, e, sizeof e), m->eval_batch);
}
