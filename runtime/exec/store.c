/* runtime/exec/store.c — persistent tensors by name: parameters, BatchNorm
 * running statistics, optimizer state. The train and eval programs bind the
 * same store, so both see one copy of every weight. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/graph.h"
#include "ir/names.h"
#include "runtime/device/device.h"
#include "runtime/check.h"
#include "runtime/exec/exec.h"
#include "runtime/data/data.h"

typedef struct {
    char name[IR_NAME_MAX];
    ir_type type;
    ir_init init;
    void *buf;
    size_t bytes;
    int owner;    /* ZeRO-1: the global replica holding it; -1: every one */
    int resident; /* buf is this store's own (else the owner's, or NULL) */
    int held;     /* another process's shard given bytes here (rt_store_hold) */
} store_entry;

struct rt_store {
    rt_backend *be;
    int n;
    store_entry *t;
    ir_names names; /* rt_store_find's index */
};

static const char *entry_name(const void *st, int i) { return ((const rt_store *)st)->t[i].name; }

/* Optimizer state is a STATE named "PARAM.something" for a PARAM of the
 * graph ("conv0.weight.momentum"); BatchNorm statistics are not. params:
 * the graph's PARAM names. */
static int is_optimizer_state(const ir_graph *g, const ir_names *params, const ir_node *n) {
    if (n->op != IR_OP_STATE) return 0;
    const char *dot = strrchr(n->name, '.');
    if (!dot) return 0;
    char prefix[IR_NAME_MAX];
    snprintf(prefix, sizeof prefix, "%.*s", (int)(dot - n->name), n->name);
    int p = ir_names_find(params, prefix);
    return p >= 0 && g->nodes[p].op == IR_OP_PARAM;
}

rt_store *rt_store_new(rt_backend *be, const ir_graph *g) {
    rt_store *st = calloc(1, sizeof *st);
    RT_CHECK_ALLOC(st);
    st->be = be;
    st->t = calloc((size_t)g->n + 1, sizeof *st->t);
    RT_CHECK_ALLOC(st->t);
    st->names = ir_names_new(entry_name, st, 64);
    ir_names params = ir_names_nodes(g, 64);
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == IR_OP_PARAM) ir_names_add(&params, i);
    /* Definition order, optimizer state last (exec.h). */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g->n; i++) {
            const ir_node *n = &g->nodes[i];
            if (!ir_is_persistent(n->op) || is_optimizer_state(g, &params, n) != pass) continue;
            if (rt_store_find(st, n->name) >= 0) continue; /* ir_verify rules this out */
            store_entry *e = &st->t[st->n];
            snprintf(e->name, sizeof e->name, "%s", n->name);
            ir_names_add(&st->names, st->n++);
            e->type = n->type;
            e->init = (ir_init)n->iattr[0];
            e->bytes = (size_t)fmt_node_bytes(n);
            e->buf =
                rt_backend_alloc(be, e->bytes, NULL, 0); /* NULL: be failed, rt_exec_new says */
            e->owner = -1;
            e->resident = 1;
        }
    ir_names_free(&params);
    return st;
}

void rt_store_free(rt_store *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++)
        if (st->t[i].resident) rt_backend_dealloc(st->be, st->t[i].buf);
    free(st->t);
    ir_names_free(&st->names);
    free(st);
}

/* MXNet's Xavier(rnd_type="uniform", factor_type="avg", magnitude):
 * scale = sqrt(magnitude / ((fan_in + fan_out) / 2)), w ~ U(-scale, scale),
 * fan_in = shape[1] * receptive field, fan_out = shape[0] * receptive field. */
static void xavier(float *w, const ir_type *t, double magnitude, rt_rng *rng) {
    double field = 1;
    for (int d = 2; d < t->ndim; d++) field *= (double)t->dim[d];
    double fan_in = t->ndim >= 2 ? (double)t->dim[1] * field : (double)t->dim[0];
    double fan_out = (double)t->dim[0] * field;
    float scale = (float)sqrt(magnitude / ((fan_in + fan_out) / 2));
    int64_t n = ir_numel(t);
    for (int64_t i = 0; i < n; i++) w[i] = rt_rng_uniform_range(rng, -scale, scale);
}

/* N(0, std²) by Box-Muller, one pair of uniforms per value (the cosine
 * only), so the stream is the same whatever the tensor's size. */
static void normal(float *w, int64_t n, double std, rt_rng *rng) {
    for (int64_t i = 0; i < n; i++) {
        double u1 = 1.0 - rt_rng_uniform(rng), u2 = rt_rng_uniform(rng); /* u1 in (0, 1] */
        w[i] = (float)(std * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

/* He's normal (PyTorch's kaiming_normal_, fan_in, relu's gain √2):
 * N(0, 2/fan_in), fan_in = shape[1] × receptive field. */
static void kaiming(float *w, const ir_type *t, rt_rng *rng) {
    double fan_in = t->ndim >= 2 ? (double)t->dim[1] : 1;
    for (int d = 2; d < t->ndim; d++) fan_in *= (double)t->dim[d];
    normal(w, ir_numel(t), sqrt(2 / fan_in), rng);
}

int rt_store_init(rt_store *st, const ir_graph *g, const ir_train *t, uint64_t seed) {
    (void)g;                 /* the store recorded each tensor's initialiser when it was made */
    double magnitude = 2.24; /* ir_train_defaults's, for a store without a schedule */
    int kind = t ? t->init_kind : IR_TRAIN_INIT_XAVIER;
    double std = t && t->init_std ? t->init_std : IR_INIT_NORMAL_STD;
    if (t) magnitude = t->init_magnitude;
    int scaled = 0; /* M of IR_INIT_SCALED: every shard's entries count */
    for (int i = 0; i < st->n; i++) scaled += st->t[i].init == IR_INIT_SCALED;
    rt_rng rng;
    rt_rng_seed(&rng, seed);
    for (int i = 0; i < st->n; i++) {
        store_entry *e = &st->t[i];
        int64_t n = ir_numel(&e->type);
        if (!e->buf) continue; /* another process's shard (rt_store_shard) */
        float *host = malloc(sizeof(float) * (size_t)(n ? n : 1));
        RT_CHECK_ALLOC(host);
        if (e->init == IR_INIT_XAVIER && kind == IR_TRAIN_INIT_KAIMING)
            kaiming(host, &e->type, &rng);
        else if (e->init == IR_INIT_XAVIER && kind == IR_TRAIN_INIT_XAVIER)
            xavier(host, &e->type, magnitude, &rng);
        else if (e->init == IR_INIT_XAVIER || e->init == IR_INIT_NORMAL)
            normal(host, n, kind == IR_TRAIN_INIT_NORMAL ? std : IR_INIT_NORMAL_STD, &rng);
        else if (e->init == IR_INIT_SCALED)
            normal(host, n, std / sqrt((double)scaled), &rng);
        else
            for (int64_t j = 0; j < n; j++) host[j] = e->init == IR_INIT_ONE ? 1.0f : 0.0f;
        int rc = rt_backend_copy_in(st->be, e->buf, host, e->bytes, NULL, 0);
        free(host);
        if (rc) return -1;
    }
    return rt_backend_failed(st->be, NULL, 0); /* a tensor that could not be allocated */
}

int rt_store_count(const rt_store *st) { return st->n; }

const char *rt_store_name(const rt_store *st, int i) {
    return i >= 0 && i < st->n ? st->t[i].name : NULL;
}

const ir_type *rt_store_type(const rt_store *st, int i) {
    return i >= 0 && i < st->n ? &st->t[i].type : NULL;
}

int rt_store_find(const rt_store *st, const char *name) { return ir_names_find(&st->names, name); }

int rt_store_read(rt_store *st, int i, float *host) {
    if (i < 0 || i >= st->n) return 0;
    if (st->t[i].buf)
        return rt_backend_copy_out(st->be, host, st->t[i].buf, st->t[i].bytes, NULL, 0);
    memset(host, 0, st->t[i].bytes);
    return 0;
}

int rt_store_write(rt_store *st, int i, const float *host) {
    if (i < 0 || i >= st->n || !st->t[i].buf) return 0;
    return rt_backend_copy_in(st->be, st->t[i].buf, host, st->t[i].bytes, NULL, 0);
}

int rt_store_failed(const rt_store *st, char *err, size_t errlen) {
    return rt_backend_failed(st->be, err, errlen);
}

void rt_store_shard(rt_store *st, int i, int owner, int me, rt_store *home) {
    if (i < 0 || i >= st->n) return;
    store_entry *e = &st->t[i];
    e->owner = owner;
    if (owner != me) {
        if (e->resident) rt_backend_dealloc(st->be, e->buf);
        e->resident = 0;
        e->buf = home && home != st ? home->t[i].buf : NULL;
        return;
    }
    /* The owner's copy starts at its initialiser: a store of another
     * process may never be initialised (rt_store_init runs on replica 0). */
    int64_t n = ir_numel(&e->type);
    float *host = malloc(sizeof(float) * (size_t)(n ? n : 1));
    RT_CHECK_ALLOC(host);
    for (int64_t j = 0; j < n; j++) host[j] = e->init == IR_INIT_ONE ? 1.0f : 0.0f;
    rt_backend_copy_in(st->be, e->buf, host, e->bytes, NULL, 0); /* a failure is be's, kept */
    free(host);
}

int rt_store_hold(rt_store *st, int i) {
    if (i < 0 || i >= st->n || st->t[i].buf) return 0;
    store_entry *e = &st->t[i];
    e->buf = rt_backend_alloc(st->be, e->bytes, NULL, 0); /* NULL: be failed (kept) */
    e->resident = e->held = 1;
    return 1;
}

void rt_store_release(rt_store *st, int i) {
    if (i < 0 || i >= st->n || !st->t[i].held) return;
    store_entry *e = &st->t[i];
    rt_backend_dealloc(st->be, e->buf);
    e->buf = NULL;
    e->resident = e->held = 0;
}

int rt_store_owner(const rt_store *st, int i) { return i >= 0 && i < st->n ? st->t[i].owner : -1; }

int rt_store_resident(const rt_store *st, int i) {
    return i >= 0 && i < st->n && st->t[i].resident;
}

void *rt_store_buffer(rt_store *st, int i) { return i >= 0 && i < st->n ? st->t[i].buf : NULL; }
