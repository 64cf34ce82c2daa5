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
 * the smaller arena kept. The placed allocations are kept in a segment
 * tree over the steps, as the byte ranges they cover, so finding the gaps
 * at a lifetime costs the number of gaps there, not the number of
 * allocations (a long chain of activations: one range, not thousands).
 * The lower bound is the largest sum of sizes live
 * at one step: no placement can beat it, and best fit usually lands within
 * a few percent of it.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/err.h"
#include "passes/passes.h"

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    BASE_CHECK_ALLOC(p);
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

/* Byte ranges as a sorted list of disjoint, non-touching spans: what a
 * set of allocations covers. Touching spans leave no gap between them, so
 * joining them changes no placement. */
typedef struct {
    span *v;
    int n, cap;
} spanset;

static void set_add(spanset *s, span x) {
    int i = 0, j = s->n;
    while (i < j) { /* the first span reaching x.lo */
        int m = i + (j - i) / 2;
        if (s->v[m].hi < x.lo)
            i = m + 1;
        else
            j = m;
    }
    for (j = i; j < s->n && s->v[j].lo <= x.hi; j++) {
        if (s->v[j].lo < x.lo) x.lo = s->v[j].lo;
        if (s->v[j].hi > x.hi) x.hi = s->v[j].hi;
    }
    if (i == j && s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4;
        s->v = realloc(s->v, sizeof *s->v * (size_t)s->cap);
        BASE_CHECK_ALLOC(s->v);
    }
    /* spans i..j-1 become x */
    memmove(s->v + i + 1, s->v + j, sizeof *s->v * (size_t)(s->n - j));
    s->n += i + 1 - j;
    s->v[i] = x;
}

/* out = a joined with b (out holds a.n + b.n). */
static void set_join(const spanset *a, const spanset *b, spanset *out) {
    int i = 0, j = 0;
    out->n = 0;
    while (i < a->n || j < b->n) {
        span x = j >= b->n || (i < a->n && a->v[i].lo <= b->v[j].lo) ? a->v[i++] : b->v[j++];
        if (out->n && out->v[out->n - 1].hi >= x.lo) {
            if (x.hi > out->v[out->n - 1].hi) out->v[out->n - 1].hi = x.hi;
        } else {
            out->v[out->n++] = x;
        }
    }
}

/* The bytes taken, step by step: a segment tree over the steps. An
 * allocation's span is in own[] of the O(log steps) nodes that make up its
 * lifetime and in sub[] of those and their ancestors, so the allocations
 * live at some step of [d, l] are those in sub[] of the nodes inside the
 * range and own[] of the nodes that overlap it. */
typedef struct {
    int steps;
    spanset *own, *sub;
    spanset acc, tmp; /* a query's union */
} occupancy;

static void occ_add(occupancy *o, int node, int nl, int nr, int d, int l, span x) {
    set_add(&o->sub[node], x);
    if (d <= nl && nr <= l) {
        set_add(&o->own[node], x);
        return;
    }
    int mid = nl + (nr - nl) / 2;
    if (d <= mid) occ_add(o, 2 * node, nl, mid, d, l, x);
    if (l > mid) occ_add(o, 2 * node + 1, mid + 1, nr, d, l, x);
}

static void occ_take(occupancy *o, const spanset *s) {
    if (!s->n) return;
    if (o->tmp.cap < o->acc.n + s->n) {
        o->tmp.cap = 2 * (o->acc.n + s->n);
        o->tmp.v = realloc(o->tmp.v, sizeof *o->tmp.v * (size_t)o->tmp.cap);
        BASE_CHECK_ALLOC(o->tmp.v);
    }
    set_join(&o->acc, s, &o->tmp);
    spanset t = o->acc;
    o->acc = o->tmp, o->tmp = t;
}

static void occ_query(occupancy *o, int node, int nl, int nr, int d, int l) {
    if (nr < d || nl > l) return;
    if (d <= nl && nr <= l) {
        occ_take(o, &o->sub[node]);
        return;
    }
    occ_take(o, &o->own[node]);
    int mid = nl + (nr - nl) / 2;
    occ_query(o, 2 * node, nl, mid, d, l);
    occ_query(o, 2 * node + 1, mid + 1, nr, d, l);
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

/* Places every allocation (lifetimes within steps 0..steps-1); returns the
 * arena size. */
static int64_t place(alloc_t *al, int na, int steps, int mode) {
    alloc_t **order = xcalloc((size_t)na, sizeof *order);
    for (int i = 0; i < na; i++) order[i] = &al[i], al[i].off = -1;
    sort_key_mode = mode;
    qsort(order, (size_t)na, sizeof *order, cmp_alloc);
    occupancy o = {.steps = steps > 0 ? steps : 1};
    o.own = xcalloc(4 * (size_t)o.steps, sizeof *o.own);
    o.sub = xcalloc(4 * (size_t)o.steps, sizeof *o.sub);
    int64_t top = 0;
    for (int i = 0; i < na; i++) {
        alloc_t *a = order[i];
        /* the bytes of the placed allocations live with it */
        o.acc.n = 0;
        occ_query(&o, 1, 0, o.steps - 1, a->def, a->last);
        /* smallest gap between them that fits (the lowest of equal ones),
         * else above them all */
        int64_t best = -1, best_gap = INT64_MAX, at = 0;
        for (int j = 0; j < o.acc.n; j++) {
            int64_t gap = o.acc.v[j].lo - at;
            if (gap >= a->bytes && gap < best_gap) best = at, best_gap = gap;
            at = o.acc.v[j].hi;
        }
        a->off = best >= 0 ? best : at;
        if (a->off + a->bytes > top) top = a->off + a->bytes;
        occ_add(&o, 1, 0, o.steps - 1, a->def, a->last, (span){a->off, a->off + a->bytes});
    }
    for (int k = 0; k < 4 * o.steps; k++) free(o.own[k].v), free(o.sub[k].v);
    free(o.own), free(o.sub), free(o.acc.v), free(o.tmp.v);
    free(order);
    return top;
}

fmt_memplan *pass_memplan_run(const ir_graph *g, char *err, size_t errlen) {
    char why[256];
    if (ir_verify(g, why, sizeof why)) {
        base_fail(err, errlen, "memplan: %s", why);
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
    int64_t best = place(al, na, m->nsteps, 0);
    alloc_t *al2 = xcalloc((size_t)(na ? na : 1), sizeof *al2);
    memcpy(al2, al, sizeof *al * (size_t)na);
    int64_t other = place(al2, na, m->nsteps, 1);
    if (other < best) {
        memcpy(al, al2, sizeof *al * (size_t)na);
        best = other;
    }
    m->arena_bytes = best;
    /* Lower bound: the most bytes live at one step (allocations as placed,
     * in-place chains counted once). */
    int64_t *live = xcalloc((size_t)(m->nsteps + 1), sizeof *live), sum = 0;
    for (int a = 0; a < na; a++)
        live[al[a].def] += al[a].bytes, live[al[a].last + 1] -= al[a].bytes;
    for (int s = 0; s < m->nsteps; s++)
        if ((sum += live[s]) > m->lower_bytes) m->lower_bytes = sum;
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
