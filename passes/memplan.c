/* passes/memplan.c — where every activation lives: offsets in one arena.
 *
 * Lifetimes and the in-place rule are the record's (format/memplan.c:
 * fmt_memplan_lifetimes, fmt_memplan_inplace_ok), so a loaded plan is
 * checked by the same rules it was made with. In place, an output extends
 * the allocation of the input whose bytes it takes over.
 *
 * Placement is the offline greedy of TFLite's arena planner / ggml-allocr's
 * best fit: allocations by decreasing size, each into the smallest gap
 * between the already placed allocations whose lifetimes meet its own, or
 * at the top. Two orders (by size, and by size x lifetime) are tried and
 * the smaller arena kept. The lower bound is the largest sum of sizes live
 * at one step: no placement can beat it, and best fit usually lands within
 * a few percent of it.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/bytes.h"
#include "ir/err.h"
#include "passes/passes.h"

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    IR_CHECK_ALLOC(p);
    return p;
}

/* ---- placement ------------------------------------------------------------------------- */

typedef struct {
    int head; /* node owning the allocation */
    int def, last;
    int64_t bytes, off;
} alloc_t;

typedef struct {
    int64_t lo, hi;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static int64_t sort_key_mode;
static int cmp_alloc(const void *a, const void *b) {
    const alloc_t *x = *(const alloc_t *const *)a, *y = *(const alloc_t *const *)b;
    int64_t kx = x->bytes, ky = y->bytes;
    if (sort_key_mode) kx *= x->last - x->def + 1, ky *= y->last - y->def + 1;
    if (kx != ky) return kx < ky ? 1 : -1;
    if (x->def != y->def) return x->def - y->def;
    return x->head - y->head;
}

/* Places every allocation; returns the arena size. */
static int64_t place(alloc_t *al, int na, int mode) {
    alloc_t **order = xcalloc((size_t)na, sizeof *order);
    span *busy = xcalloc((size_t)na, sizeof *busy);
    for (int i = 0; i < na; i++) order[i] = &al[i], al[i].off = -1;
    sort_key_mode = mode;
    qsort(order, (size_t)na, sizeof *order, cmp_alloc);
    int64_t top = 0;
    for (int i = 0; i < na; i++) {
        alloc_t *a = order[i];
        int nb = 0;
        for (int j = 0; j < i; j++) {
            const alloc_t *b = order[j];
            if (b->def <= a->last && a->def <= b->last)
                busy[nb++] = (span){b->off, b->off + b->bytes};
        }
        qsort(busy, (size_t)nb, sizeof *busy, cmp_span);
        /* smallest gap between busy spans that fits, else above them all */
        int64_t best = -1, best_gap = INT64_MAX, at = 0;
        for (int j = 0; j < nb; j++) {
            int64_t gap = busy[j].lo - at;
            if (gap >= a->bytes && gap < best_gap) best = at, best_gap = gap;
            if (busy[j].hi > at) at = busy[j].hi;
        }
        a->off = best >= 0 ? best : at;
        if (a->off + a->bytes > top) top = a->off + a->bytes;
    }
    free(order);
    free(busy);
    return top;
}

fmt_memplan *pass_memplan_run(const ir_graph *g, char *err, size_t errlen) {
    char why[256];
    if (ir_verify(g, why, sizeof why)) {
        ir_fail(err, errlen, "memplan: %s", why);
        return NULL;
    }
    fmt_memplan *m = fmt_memplan_lifetimes(g);
    int n = g->n;
    int *owner = xcalloc((size_t)n, sizeof *owner); /* allocation head of each arena node */
    int *claimed = xcalloc((size_t)n, sizeof *claimed);
    for (int i = 0; i < n; i++) owner[i] = m->bytes[i] ? i : -1, claimed[i] = -1;
    /* In place, in execution order: an output takes over the allocation of
     * an input that dies here (at most one output per allocation). */
    for (int o = 0; o < n; o++) {
        if (!m->bytes[o]) continue;
        int s = m->step[o], lo, hi;
        fmt_memplan_step_range(m, o, &lo, &hi);
        for (int i = lo; i < hi && m->inplace[o] < 0; i++)
            for (int k = 0; k < g->nodes[i].ninputs && m->inplace[o] < 0; k++) {
                int e = ir_storage_of(g, g->nodes[i].input[k]);
                if (!m->bytes[e] || owner[e] < 0) continue;
                int head = owner[e];
                if (claimed[head] == s || !fmt_memplan_inplace_ok(g, m, o, e)) continue;
                /* the allocation must end with e: nothing of it lives on */
                if (m->last[head] > s) continue;
                claimed[head] = s;
                owner[o] = head;
                m->inplace[o] = e;
                if (m->last[o] > m->last[head]) m->last[head] = m->last[o];
            }
    }
    /* last[] of a head now spans its whole chain; keep the nodes' own for
     * reporting by recomputing them from a fresh lifetime pass. */
    fmt_memplan *own = fmt_memplan_lifetimes(g);
    int na = 0;
    alloc_t *al = xcalloc((size_t)n, sizeof *al);
    int *slot = xcalloc((size_t)n, sizeof *slot);
    for (int i = 0; i < n; i++)
        if (m->bytes[i] && owner[i] == i) {
            slot[i] = na;
            al[na++] = (alloc_t){i, m->def[i], m->last[i], m->bytes[i], -1};
        }
    int64_t best = place(al, na, 0);
    alloc_t *al2 = xcalloc((size_t)(na ? na : 1), sizeof *al2);
    memcpy(al2, al, sizeof *al * (size_t)na);
    int64_t other = place(al2, na, 1);
    if (other < best) {
        memcpy(al, al2, sizeof *al * (size_t)na);
        best = other;
    }
    m->arena_bytes = best;
    /* Lower bound: the most bytes live at one step (allocations as placed,
     * in-place chains counted once). */
    int64_t *live = xcalloc((size_t)(m->nsteps + 1), sizeof *live);
    for (int a = 0; a < na; a++)
        for (int s = al[a].def; s <= al[a].last; s++) live[s] += al[a].bytes;
    for (int s = 0; s < m->nsteps; s++)
        if (live[s] > m->lower_bytes) m->lower_bytes = live[s];
    for (int i = 0; i < n; i++) {
        if (!m->bytes[i]) continue;
        m->naive_bytes += m->bytes[i];
        m->offset[i] = al[slot[owner[i]]].off;
        m->last[i] = own->last[i];
    }
    free(live), free(al), free(al2), free(slot), free(owner), free(claimed);
    fmt_memplan_free(own);
    return m;
}
