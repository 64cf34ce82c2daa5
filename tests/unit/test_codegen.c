/* tests/unit/test_codegen.c — the renderer in both dialects, GEMM
 * descriptors and their validation, program (de)serialisation, and (with
 * the CUDA toolkit) every kernel of every op compiled by NVRTC. */
#include <stdlib.h>

#include "codegen/codegen.h"
#include "runtime/data/data.h"
#include "tests/graphs.h"
#include "tests/harness.h"

#ifdef DPC_HAVE_CUDA
#include "runtime/cuda/loader.h"
#endif

static char err[4096];

/* A graph holding every op of ir.h at least once (a small training step
 * plus the ops a lowered graph no longer has). */
static ir_graph *all_ops_graph(void) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(3, 3, 9, 9), 0);
    int lab = ir_add_input(g, "label", (ir_type){1, {3}, IR_I32}, 10);
    int lr = ir_add_input(g, "lr", ir_shape1(1), 0);
    int gs = ir_add_input(g, "grad_scale", ir_shape1(1), 0);
    int w1 = ir_add_param(g, "conv.weight", ir_shape4(4, 3, 3, 3), IR_INIT_XAVIER);
    int ga = ir_add_param(g, "bn.gamma", ir_shape1(4), IR_INIT_ONE);
    int bt = ir_add_param(g, "bn.beta", ir_shape1(4), IR_INIT_ZERO);
    int rm = ir_add_state(g, "bn.running_mean", ir_shape1(4), IR_INIT_ZERO);
    int rv = ir_add_state(g, "bn.running_var", ir_shape1(4), IR_INIT_ONE);
    int w2 = ir_add_param(g, "fc.weight", ir_shape2(10, 4), IR_INIT_XAVIER);
    int b2 = ir_add_param(g, "fc.bias", ir_shape1(10), IR_INIT_ZERO);
    int wp = ir_add_param(g, "pw.weight", ir_shape4(4, 4, 1, 1), IR_INIT_XAVIER);
    int v1 = ir_add_state(g, "conv.weight.momentum", ir_shape4(4, 3, 3, 3), IR_INIT_ZERO);
    int c = N(CONV, x, w1), IA(3, 2, 1, 1), NULL);
    int pw = N(CONV, c, wp), IA(1, 1, 0, 1), NULL);
    int bnf = N(BATCHNORM, pw, ga, bt, rm, rv), IA(1), FA(1e-5, 0.9));
    int mean = N(BN_MEAN, c), NULL, NULL);
    int var = N(BN_VAR, c, mean), NULL, NULL);
    int bn = N(BN_APPLY, c, mean, var, ga, bt), NULL, FA(1e-5));
    int sum = N(ADD, bn, bnf), NULL, NULL);
    int r = N(RELU, sum), NULL, NULL);
    int ap = N(AVGPOOL, r), IA(3, 1, 1), NULL);
    int mp = N(MAXPOOL, ap), IA(3, 2, 1), NULL);
    int gp = N(GLOBAL_AVGPOOL, mp), NULL, NULL);
    int fl = N(FLATTEN, mp), NULL, NULL);
    (void)fl;
    int fc = N(DENSE, gp, w2), NULL, NULL);
    int lo = N(BIAS_ADD, fc, b2), NULL, NULL);
    int loss = N(SOFTMAX_CE, lo, lab), NULL, NULL);
    int ema = N(EMA, rv, var), NULL, FA(0.9, 75.0 / 74.0));
    int one = N(ONES_LIKE, loss), NULL, NULL);
    int dlo = N(SOFTMAX_CE_GRAD, lo, lab, one), NULL, NULL);
    N(BIAS_GRAD, dlo), NULL, NULL);
    int dw2 = N(DENSE_GRAD_WEIGHT, dlo, gp), NULL, NULL);
    int dgp = N(DENSE_GRAD_DATA, dlo, w2), NULL, NULL);
    int dmp = N(GLOBAL_AVGPOOL_GRAD, dgp), IA(3, 3), NULL);
    int dap = N(MAXPOOL_GRAD, dmp, ap), IA(3, 2, 1), NULL);
    int dr = N(AVGPOOL_GRAD, dap), IA(3, 1, 1, 5, 5), NULL);
    int dbn = N(RELU_GRAD, dr, r), NULL, NULL);
    int dg = N(BN_GRAD_GAMMA, dbn, c, mean, var), NULL, FA(1e-5));
    int db = N(BIAS_GRAD, dbn), NULL, NULL);
    int dc = N(BN_GRAD_DATA, dbn, c, mean, var, ga, dg, db), NULL, FA(1e-5));
    int dc2 = N(RESHAPE_LIKE, dc, c), NULL, NULL);
    int dw1 = N(CONV_GRAD_WEIGHT, dc2, x), IA(3, 2, 1, 1), NULL);
    N(CONV_GRAD_DATA, dc2, w1), IA(3, 2, 1, 9, 9, 1), NULL);
    int sw1 = N(ALLREDUCE, dw1), IA(0, 0), NULL);
    int nv1 = N(SGD_MOMENTUM, w1, sw1, v1, lr, gs), NULL, FA(0.9, 1e-4));
    int nw1 = N(ADD, w1, nv1), NULL, NULL);
    N(ASSIGN, v1, nv1), NULL, NULL);
    N(ASSIGN, w1, nw1), NULL, NULL);
    N(ASSIGN, rv, ema), NULL, NULL);
    /* the other optimizers' ops: lars's lr as lamb's base lr, on fc.weight */
    int step = ir_add_input(g, "step", ir_shape1(1), 0);
    int m2 = ir_add_state(g, "fc.weight.adam_m", ir_shape2(10, 4), IR_INIT_ZERO);
    int v2 = ir_add_state(g, "fc.weight.adam_v", ir_shape2(10, 4), IR_INIT_ZERO);
    int wsq = N(SUMSQ, w2), NULL, NULL);
    int gsq = N(SUMSQ, dw2), NULL, NULL);
    N(CLIP_SCALE, gsq, gs), NULL, FA(1.0)); /* clip_grad_norm's grad_scale */
    int lt = N(LARS_LR, wsq, gsq, lr, gs), NULL, FA(0.001, 1e-4, 1e-9));
    int nm = N(ADAM_M, m2, dw2, gs), NULL, FA(0.9));
    int nv = N(ADAM_V, v2, dw2, gs), NULL, FA(0.999));
    int c1 = N(BIAS_CORRECTION, step), NULL, FA(0.9));
    int c2 = N(BIAS_CORRECTION, step), NULL, FA(0.999));
    int u = N(ADAM_DIR, w2, nm, nv, c1, c2), NULL, FA(1e-6, 0.01));
    int usq = N(SUMSQ, u), NULL, NULL);
    int ll = N(LAMB_LR, wsq, usq, lt), NULL, NULL);
    int nw2 = N(DESCEND, w2, u, ll), NULL, NULL);
    N(ASSIGN, m2, nm), NULL, NULL);
    N(ASSIGN, v2, nv), NULL, NULL);
    N(ASSIGN, w2, nw2), NULL, NULL);
    int tr = N(TRANSPOSE, r), IA(1), NULL); /* to channel-major (passes/layout.c) */
    g->nodes[tr].flags |= IR_FLAG_CNHW;
    /* synchronised BatchNorm's (passes/lower.c) */
    int rs = ir_add_input(g, "replica_scale", ir_shape1(1), 0);
    int sm = N(SCALE, mean, rs), NULL, NULL);
    N(BN_UNBIAS, sm, rs), NULL, FA(75.0));
    /* sigmoid, clip, mul (elementwise, and per channel with both factor
     * shapes) and their gradients; grouped and depthwise convolution */
    int sg = N(SIGMOID, r), NULL, NULL);
    N(SIGMOID_GRAD, dr, sg), NULL, NULL);
    int cl = N(CLIP, r), NULL, FA(0, 6));
    N(CLIP_GRAD, dr, r), NULL, FA(0, 6));
    N(MUL, sg, cl), NULL, NULL);
    N(MUL_CHANNEL, r, gp), NULL, NULL);
    int pl = N(AVGPOOL, mp), IA(3, 3, 0), NULL); /* [N,C,1,1] */
    N(MUL_CHANNEL, mp, pl), NULL, NULL);
    N(PLANE_DOT, dr, r), NULL, NULL);
    int wg = ir_add_param(g, "grouped.weight", ir_shape4(4, 2, 3, 3), IR_INIT_XAVIER);
    int wd = ir_add_param(g, "depthwise.weight", ir_shape4(4, 1, 3, 3), IR_INIT_XAVIER);
    int gc = N(CONV, r, wg), IA(3, 1, 1, 2), NULL);
    N(CONV_GRAD_DATA, gc, wg), IA(3, 1, 1, 5, 5, 2), NULL);
    N(CONV_GRAD_WEIGHT, gc, r), IA(3, 1, 1, 2), NULL);
    int dwc = N(CONV, r, wd), IA(3, 2, 1, 4), NULL);
    N(CONV_GRAD_DATA, dwc, wd), IA(3, 2, 1, 5, 5, 4), NULL);
    N(CONV_GRAD_WEIGHT, dwc, r), IA(3, 2, 1, 4), NULL);
    int cat = N(CONCAT, r, gc, dr), IA(1), NULL);
    N(CHANNEL_SLICE, cat), IA(4, 4), NULL);
    int key = ir_add_input(g, "dropout_key", ir_shape1(4), 0);
    N(DROPOUT, r, key), IA(3), FA(0.25));
    int drc = N(DROPOUT, tr, key), IA(4), FA(0.5)); /* channel-major: the NCHW index */
    g->nodes[drc].flags |= IR_FLAG_CNHW;
    /* tanh, gelu (erf and tanh forms) and their gradients */
    int th = N(TANH, r), NULL, NULL);
    N(TANH_GRAD, dr, th), NULL, NULL);
    N(GELU, r), NULL, NULL);
    N(GELU_GRAD, dr, r), NULL, NULL);
    N(GELU_TANH, r), NULL, NULL);
    N(GELU_TANH_GRAD, dr, r), NULL, NULL);
    /* layernorm over the last axis of [N, F] and its primitives; softmax */
    int lg = ir_add_param(g, "ln.gamma", ir_shape1(10), IR_INIT_ONE);
    int lb = ir_add_param(g, "ln.beta", ir_shape1(10), IR_INIT_ZERO);
    N(LAYERNORM, lo, lg, lb), NULL, FA(1e-5));
    int lst = N(LAYERNORM_STATS, lo), NULL, FA(1e-5));
    N(LAYERNORM_GRAD_DATA, dlo, lo, lst, lg), NULL, NULL);
    N(LAYERNORM_GRAD_GAMMA, dlo, lo, lst), NULL, NULL);
    N(SUM_LEADING, dlo), NULL, NULL);
    int smx = N(SOFTMAX, lo), NULL, NULL);
    N(SOFTMAX_GRAD, dlo, smx), NULL, NULL);
    int ids = ir_add_input(g, "tokens", (ir_type){2, {2, 3}, IR_I32}, 0);
    int emb = ir_add_param(g, "embedding0.weight", ir_shape2(11, 4), IR_INIT_XAVIER);
    int e = N(EMBEDDING, ids, emb), NULL, NULL);
    N(EMBEDDING_GRAD, e, ids), IA(11), NULL);
    int pos = ir_add_param(g, "positions0.weight", ir_shape2(5, 4), IR_INIT_NORMAL);
    int pe = N(POSITIONS, ids, pos), NULL, NULL);
    N(POSITIONS_GRAD, pe), IA(5), NULL);
    /* dense over the last axis of [2, 3, 4] (rows 6), its bias along it */
    int dw = ir_add_param(g, "seq.weight", ir_shape2(5, 4), IR_INIT_XAVIER);
    int sbias = ir_add_param(g, "seq.bias", ir_shape1(5), IR_INIT_ZERO);
    int sd = N(DENSE, e, dw), NULL, NULL);
    N(BIAS_ADD_LAST, sd, sbias), NULL, NULL);
    N(DENSE_GRAD_DATA, sd, dw), NULL, NULL);
    N(DENSE_GRAD_WEIGHT, sd, e), NULL, NULL);
    /* matmul batched over the leading axis: plain and with b transposed */
    int mm = N(MATMUL, e, e), IA(0, 1), NULL); /* [2, 3, 3] */
    N(MATMUL, mm, e), IA(0, 0), NULL);
    /* the sequence loss over the embedding's [2, 3, 4] as logits */
    int tgt = ir_add_input(g, "targets", (ir_type){2, {2, 3}, IR_I32}, 4);
    int sl = N(SEQ_CE, e, tgt), IA(-1), NULL);
    N(SEQ_CE_GRAD, e, tgt, sl), IA(-1), NULL);
    /* the language's arithmetic: t - u, t * c, t + c */
    N(SUB, dr, r), NULL, NULL);
    N(MUL_CONST, r), NULL, FA(-0.5));
    N(ADD_CONST, r), NULL, FA(1.5));
    /* shapes: reshape (a view), permute at ranks 3 and 4, slice and its
     * gradient, concat off the channel axis, the causal mask both ways */
    N(RESHAPE, e), IA(4, 3, 0), NULL);
    N(PERMUTE, e), IA(0, 2, 1, 0), NULL);
    N(PERMUTE, r), IA(0, 2, 3, 1), NULL);
    int sli = N(SLICE, e), IA(2, 1, 2), NULL);
    N(SLICE_GRAD, sli), IA(2, 1, 4), NULL);
    N(CONCAT, e, sli), IA(2), NULL);
    N(CONCAT, r, r), IA(3), NULL);
    N(CAUSAL_MASK, mm), IA(0), NULL);
    N(CAUSAL_MASK, mm), IA(1), NULL);
    N(PAD_MASK, mm, ids), IA(1, 0), NULL); /* [2, 3, 3] keys by the tokens [2, 3] */
    N(PAD_MASK, mm, ids), IA(1, 1), NULL);
    /* fused attention: 2 queries against the embedding's 3 keys, 2 heads,
     * causal, dropout on the weights; its log-sum-exp and gradients */
    int aq = ir_add_input(g, "attn_q", (ir_type){3, {2, 2, 4}, IR_F32}, 0);
    int at = N(ATTENTION, aq, e, e, key), IA(2, 1, 4), FA(0.7, 0.25));
    int al = N(ATTENTION_LSE, aq, e, e), IA(2, 1), FA(0.7));
    for (int w = 0; w < 3; w++) N(ATTENTION_GRAD, at, aq, e, e, at, al, key), IA(2, 1, 4, w), FA(0.7, 0.25));
    return g;
}

/* Grouped convolution never becomes GEMM calls: one direct kernel call per
 * op (codegen/conv_direct.c), where groups = 1 keeps its GEMM. */
static int gemm_calls(const ir_graph *g) {
    cg_program *p = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    if (!p) return -1;
    int n = 0;
    for (int k = 0; k < p->ncalls; k++) n += p->calls[k].kind == CG_CALL_GEMM;
    cg_program_free(p);
    return n;
}

TEST(grouped_conv_is_direct) {
    for (int groups = 1; groups <= 8; groups *= 8) {
        ir_graph *g = ir_new();
        int x = ir_add_input(g, "x", ir_shape4(2, 8, 6, 6), 0);
        int w = ir_add_param(g, "w", ir_shape4(8, 8 / groups, 3, 3), IR_INIT_XAVIER);
        int y = N(CONV, x, w), IA(3, 1, 1, groups), NULL);
        int dy = ir_add_input(g, "dy", g->nodes[y].type, 0);
        N(CONV_GRAD_DATA, dy, w), IA(3, 1, 1, 6, 6, groups), NULL);
        N(CONV_GRAD_WEIGHT, dy, x), IA(3, 1, 1, groups), NULL);
        int calls = gemm_calls(g);
        CHECK_MSG(groups == 1 ? calls >= 3 : calls == 0, "groups %d: %d GEMM calls", groups, calls);
        ir_free(g);
    }
}

TEST(all_ops_graph_covers_every_op) {
    ir_graph *g = all_ops_graph();
    CHECK(ir_verify(g, err, sizeof err) == 0);
    int seen[IR_OP_COUNT] = {0};
    for (int i = 0; i < g->n; i++) seen[g->nodes[i].op] = 1;
    for (int op = 0; op < IR_OP_COUNT; op++) CHECK_MSG(seen[op], "op %s missing", ir_ops[op].name);
    ir_free(g);
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* The same graph in both dialects: same kernels, steps and calls; only the
 * wrapping differs. */
TEST(dialects_share_steps_and_bodies) {
    ir_graph *g = all_ops_graph();
    cg_program *c = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    cg_program *u = cg_generate(g, CG_DIALECT_CUDA, NULL, err, sizeof err);
    CHECK(c && u);
    if (c && u) {
        CHECK(c->nkernels == u->nkernels && c->nsteps == u->nsteps && c->ncalls == u->ncalls);
        for (int k = 0; k < c->nkernels && k < u->nkernels; k++)
            CHECK_STR(c->kernels[k].name, u->kernels[k].name);
        CHECK(memcmp(c->steps, u->steps, sizeof *c->steps * (size_t)c->nsteps) == 0);
        /* the calls differ only in the launch geometry CUDA records, and in
         * the count of max-pool's gradient, gathered per element on a GPU
         * (gather_pool_grad), and of attention's kernels, a block per tile
         * of rows there (codegen/attention.c) */
        for (int i = 0; i < c->ncalls && i < u->ncalls; i++) {
            cg_call a = c->calls[i], b = u->calls[i];
            const char *kn = a.kind == CG_CALL_KERNEL ? c->kernels[a.kernel].name : "";
            if (strstr(kn, "maxpool_grad") || strstr(kn, "_attention")) a.count = b.count;
            CHECK(a.launch.grid == 0 && a.launch.block == 0 && a.launch.shared == 0);
            if (b.kind == CG_CALL_KERNEL)
                CHECK((int64_t)b.launch.grid * b.launch.block >= b.count && b.launch.block > 0 &&
                      b.launch.block % 32 == 0 && b.launch.block <= 1024);
            memset(&b.launch, 0, sizeof b.launch);
            CHECK(memcmp(&a, &b, sizeof a) == 0);
        }
        CHECK(count_of(u->source, "extern \"C\" __global__ void ") == u->nkernels);
        CHECK(count_of(u->source, "gridDim.x") == u->nkernels);
        CHECK(strstr(u->source, "#include") == NULL); /* NVRTC has no libc headers */
        CHECK(strstr(u->source, "#pragma omp") == NULL);
        CHECK(count_of(c->source, "(void *const *arg, idx_t count, idx_t lo, idx_t hi)") ==
              c->nkernels);
        CHECK(count_of(c->source, "_grain = ") == c->nkernels);
        CHECK(strstr(c->source, "__global__") == NULL);
        /* the relu body, identical in both: loads first, then the select */
        const char *relu = "const float v0 = b1[i];\n        b0[i] = v0 > 0.0f ? v0 : 0.0f;";
        CHECK(strstr(c->source, relu) && strstr(u->source, relu));
        /* bias_add indexes its vector by channel, shape baked in: [3,10] */
        CHECK(strstr(c->source, "const idx_t c = (i / 1) % 10;") != NULL);
        CHECK(strstr(c->source, "const float v1 = b2[c];\n        b0[i] = v0 + v1;") != NULL);
        /* label arguments are ints */
        CHECK(strstr(u->source, "const int *__restrict__ b2") != NULL);
        CHECK(strstr(c->source, "const int *restrict b2 = (const int *)arg[2];") != NULL);
        CHECK(cg_program_check(c, g, err, sizeof err) == 0);
        CHECK(cg_program_check(u, g, err, sizeof err) == 0);
    }
    cg_program_free(c);
    cg_program_free(u);
    ir_free(g);
}

/* Every dialect's table is complete and its own (name, extension, plan
 * section), an unknown value names none, and a module is made of the
 * table's text: it opens with the prelude, each kernel with the head and
 * the loop header. */
TEST(dialect_tables_are_complete) {
    ir_graph *g = all_ops_graph();
    for (int d = 0; d < CG_DIALECT_COUNT; d++) {
        const cg_dialect_desc *t = cg_dialect_of((cg_dialect)d);
        CHECK(t != NULL);
        if (!t) continue;
        const char *field[] = {t->name,         t->ext,         t->section,     t->prelude,
                               t->bf16_prelude, t->kernel_head, t->restrict_kw, t->params_tail,
                               t->body_head,    t->loop_head,   t->lane_simd,   t->target};
        for (size_t f = 0; f < sizeof field / sizeof *field; f++) CHECK(field[f] != NULL);
        CHECK(t->name[0] && t->ext[0] && strlen(t->section) == 4 && t->loop_head[0] &&
              t->target[0]);
        CHECK_STR(cg_dialect_name((cg_dialect)d), t->name);
        CHECK_STR(cg_section_tag((cg_dialect)d), t->section);
        /* the format's facts about a dialect agree with its table */
        CHECK(cg_dialect_launches((cg_dialect)d) == t->gpu_launch);
        for (int e = 0; e < d; e++) {
            const cg_dialect_desc *o = cg_dialect_of((cg_dialect)e);
            CHECK(strcmp(o->name, t->name) && strcmp(o->ext, t->ext) &&
                  strcmp(o->section, t->section) && strcmp(o->target, t->target));
        }
        cg_program *p = cg_generate(g, (cg_dialect)d, NULL, err, sizeof err);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK(strncmp(p->source, t->prelude, strlen(t->prelude)) == 0);
        CHECK(count_of(p->source, t->kernel_head) >= p->nkernels);
        /* every kernel opens one loop: over threads, or (cooperative) over blocks */
        int heads = count_of(p->source, t->loop_head);
        if (strcmp(t->coop_loop_head, t->loop_head))
            heads += count_of(p->source, t->coop_loop_head);
        CHECK(heads == p->nkernels);
        cg_program_free(p);
    }
    CHECK(cg_dialect_of(CG_DIALECT_COUNT) == NULL);
    CHECK(cg_generate(g, CG_DIALECT_COUNT, NULL, err, sizeof err) == NULL);
    CHECK_STR(err, "codegen: no dialect 2");
    ir_free(g);
}

TEST(steps_layout) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape4(2, 3, 5, 5), 0);
    int w = ir_add_param(g, "w", ir_shape4(4, 3, 3, 3), IR_INIT_XAVIER);
    int r1 = N(RELU, x), NULL, NULL);
    int r2 = N(RELU, x), NULL, NULL);
    int y = N(CONV, r1, w), IA(3, 1, 1, 1), NULL);
    int f = N(FLATTEN, y), NULL, NULL);
    (void)r2;
    cg_program *p = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    CHECK(p != NULL);
    if (p) {
        CHECK(p->nsteps == 4);
        CHECK(p->nkernels == 3); /* the two relus share one kernel; im2col; from_cnhw */
        const cg_step *s = &p->steps[0];
        CHECK(s->node == r1 && s->op == IR_OP_RELU && s->alias == -1 && s->nbuf == 2);
        CHECK(s->buf[0] == r1 && s->buf[1] == x && s->ncalls == 1);
        const cg_call *c = &p->calls[s->first_call];
        CHECK(c->kind == CG_CALL_KERNEL && c->count == 150 && c->nargs == 2);
        CHECK(c->arg[0] == 0 && c->arg[1] == 1);
        CHECK(p->calls[p->steps[1].first_call].kernel == c->kernel);
        s = &p->steps[2]; /* conv: im2col, one GEMM for both images, back to NCHW */
        int64_t cols = 27 * 2 * 25;
        CHECK(s->node == y && s->ncalls == 3 && s->scratch == cols + 4 * 2 * 25);
        CHECK(s->buf[s->nbuf - 1] == CG_SCRATCH);
        const cg_call *im = &p->calls[s->first_call], *gm = im + 1, *back = im + 2;
        CHECK(im->kind == CG_CALL_KERNEL && im->count == 27 * 2); /* one per column row */
        CHECK(s->buf[im->arg[0]] == CG_SCRATCH && s->buf[im->arg[1]] == r1);
        CHECK(gm->kind == CG_CALL_GEMM && gm->gemm.batch == 1);
        CHECK(s->buf[gm->arg[0]] == CG_SCRATCH && s->buf[gm->arg[1]] == w);
        CHECK(s->buf[gm->arg[2]] == CG_SCRATCH && gm->gemm.off_c == cols);
        CHECK(gm->gemm.m == 50 && gm->gemm.n == 4 && gm->gemm.k == 27);
        CHECK(back->kind == CG_CALL_KERNEL &&
              back->count == 4 * 2); /* one row of 25 per (image, filter) */
        CHECK(s->buf[back->arg[0]] == y && back->off[1] == cols);
        s = &p->steps[3]; /* flatten aliases */
        CHECK(s->node == f && s->alias == y && s->ncalls == 0);
        CHECK(p->scratch == cols + 4 * 2 * 25);
    }
    cg_program_free(p);
    ir_free(g);
}

TEST(float_literals_round_trip) {
    char buf[40];
    CHECK_STR(cg_float_lit(1.0, buf), "1.0f");
    CHECK_STR(cg_float_lit(0.0, buf), "0.0f");
    CHECK_STR(cg_float_lit(-2.0, buf), "-2.0f");
    double vals[] = {0.9, 1e-5, 1.0 / 3, 75.0 / 74, 1e-4, 123456789.0, -0.1};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        cg_float_lit(vals[i], buf);
        CHECK(buf[strlen(buf) - 1] == 'f');
        CHECK(strtof(buf, NULL) == (float)vals[i]);
    }
    /* No text for what a float cannot hold: these used to render "inf.0f". */
    CHECK(cg_float_lit(3.5e38, buf) == NULL);
    CHECK(cg_float_lit(-1e39, buf) == NULL);
    CHECK(cg_float_lit(INFINITY, buf) == NULL);
    CHECK(cg_float_lit(NAN, buf) == NULL);
    CHECK(cg_float_lit(3.4e38, buf) != NULL);
}

/* A graph whose attribute is beyond a float (a plan edited, or a pass that
 * computed it) is refused by name, in both dialects, and renders nothing. */
TEST(unrepresentable_attribute_is_refused) {
    for (int d = 0; d < 2; d++) {
        ir_graph *g = ir_new();
        int x = ir_add_input(g, "x", ir_shape1(8), 0);
        int y = N(EMA, x, x), NULL, FA(0.5, 3.5e38));
        snprintf(g->nodes[y].name, sizeof g->nodes[y].name, "big");
        cg_program *p = cg_generate(g, (cg_dialect)d, NULL, err, sizeof err);
        CHECK(p == NULL);
        CHECK_MSG(strstr(err, "'big'") && strstr(err, "not a finite 32-bit float"), "%s", err);
        cg_program_free(p);
        ir_free(g);
    }
}

/* bf16 storage (dpc --precision bf16; tests/unit/test_bf16.c checks the
 * numbers): a bf16 relu loads and stores through the conversions. */
TEST(bf16_dtype_is_rendered) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", (ir_type){2, {2, 3}, IR_BF16}, 0);
    g->nodes[N(RELU, x), NULL, NULL)].type.dtype = IR_BF16;
    cg_program *p = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    CHECK(p && strstr(p->source, "b0[i] = dpc_f32_to_bf16(") &&
          strstr(p->source, "dpc_bf16_to_f32(b1[i])"));
    cg_program_free(p);
    ir_free(g);
}

/* ---- GEMM descriptors ---------------------------------------------------------------- */

TEST(gemm_validation) {
    /* dense 3x17 · (10x17)ᵀ: A = w (170), B = x (51), C = y (30) */
    cg_gemm d = cg_gemm_dense(3, 17, 10);
    CHECK(d.transa == 1 && d.transb == 0 && d.m == 10 && d.n == 3 && d.k == 17);
    CHECK(cg_gemm_validate(&d, 170, 51, 30, err, sizeof err) == 0);
    CHECK(cg_gemm_validate(&d, 169, 51, 30, err, sizeof err) != 0);
    CHECK(strstr(err, "A's buffer") != NULL);
    CHECK(cg_gemm_validate(&d, 170, 50, 30, err, sizeof err) != 0);
    CHECK(cg_gemm_validate(&d, 170, 51, 29, err, sizeof err) != 0);
    cg_gemm e = d;
    e.lda = 16; /* A is stored k x m transposed: needs lda >= k = 17 */
    CHECK(cg_gemm_validate(&e, 1000, 1000, 1000, err, sizeof err) != 0);
    CHECK(strstr(err, "lda") != NULL);
    e = d;
    e.ldc = 9;
    CHECK(cg_gemm_validate(&e, 1000, 1000, 1000, err, sizeof err) != 0);
    e = d;
    e.off_c = 1;
    CHECK(cg_gemm_validate(&e, 170, 51, 30, err, sizeof err) != 0);
    CHECK(cg_gemm_validate(&e, 170, 51, 31, err, sizeof err) == 0);
    e = d;
    e.m = 0;
    CHECK(cg_gemm_validate(&e, 1000, 1000, 1000, err, sizeof err) != 0);
    e = d;
    e.off_a = -1;
    CHECK(cg_gemm_validate(&e, 1000, 1000, 1000, err, sizeof err) != 0);
    e = d;
    e.m = (int64_t)1 << 40;
    CHECK(cg_gemm_validate(&e, INT64_MAX, INT64_MAX, INT64_MAX, err, sizeof err) != 0);
    e = d;
    e.batch = 4; /* batched C entries must not overlap */
    e.stride_c = 29;
    CHECK(cg_gemm_validate(&e, 1000, 1000, 1000, err, sizeof err) != 0);
    e.stride_c = 30;
    CHECK(cg_gemm_validate(&e, 170, 51, 120, err, sizeof err) == 0); /* stride 0 shares A, B */
    e.stride_a = (int64_t)1 << 62;
    CHECK(cg_gemm_validate(&e, INT64_MAX, 51, 120, err, sizeof err) != 0); /* overflow */
}

/* Conv descriptors fit exactly the buffers they name. */
TEST(conv_descriptors_fit_their_buffers) {
    cg_conv_shape c = {
        .N = 3, .C = 5, .H = 11, .W = 9, .K = 7, .k = 3, .s = 2, .p = 1, .Ho = 6, .Wo = 5};
    int64_t P = 30, CKK = 45, w = 7 * CKK;
    CHECK(cg_conv_col_elems(&c, 2) == 2 * CKK * P);
    CHECK(cg_conv_scratch_elems(&c, 2) == 2 * (CKK + 7) * P);
    CHECK(cg_conv_chunk(&c, (size_t)(2 * (CKK + 7) * P * 4)) == 2);
    CHECK(cg_conv_chunk(&c, (size_t)(2 * (CKK + 7) * P * 4) - 1) == 1);
    CHECK(cg_conv_chunk(&c, 1) == 1);
    CHECK(cg_conv_chunk(&c, (size_t)1 << 30) == 3);
    int64_t cols = 2 * CKK * P, scratch = cg_conv_scratch_elems(&c, 2);
    cg_gemm f = cg_gemm_conv_forward(&c, 2, 0, cols);
    CHECK(f.m == 2 * P && f.n == 7 && f.k == CKK && f.batch == 1);
    CHECK(cg_gemm_validate(&f, scratch, w, scratch, err, sizeof err) == 0);
    CHECK(cg_gemm_validate(&f, scratch, w, scratch - 1, err, sizeof err) != 0);
    CHECK(cg_gemm_validate(&f, scratch, w - 1, scratch, err, sizeof err) != 0);
    cg_gemm d = cg_gemm_conv_grad_data(&c, 2, cols, 0);
    CHECK(d.transb == 1 && d.m == 2 * P && d.n == CKK && d.k == 7);
    CHECK(cg_gemm_validate(&d, scratch, w, cols, err, sizeof err) == 0);
    CHECK(cg_gemm_validate(&d, scratch - 1, w, cols, err, sizeof err) != 0);
    cg_gemm gw = cg_gemm_conv_grad_weight(&c, 2, 0, cols, 1);
    CHECK(gw.beta == 1 && gw.transa == 1 && gw.m == CKK && gw.n == 7 && gw.k == 2 * P);
    CHECK(cg_gemm_validate(&gw, cols, scratch, w, err, sizeof err) == 0);
    CHECK(cg_gemm_validate(&gw, cols - 1, scratch, w, err, sizeof err) != 0);
    CHECK(cg_gemm_conv_grad_weight(&c, 2, 0, cols, 0).beta == 0);
    cg_gemm dd = cg_gemm_dense_grad_data(3, 17, 10), dw = cg_gemm_dense_grad_weight(3, 17, 10);
    CHECK(cg_gemm_validate(&dd, 170, 30, 51, err, sizeof err) == 0);
    CHECK(cg_gemm_validate(&dw, 51, 30, 170, err, sizeof err) == 0);
}

/* ---- serialisation ------------------------------------------------------------------ */

TEST(serialise_round_trip) {
    ir_graph *g = all_ops_graph();
    for (int d = 0; d < 2; d++) {
        cg_program *p = cg_generate(g, (cg_dialect)d, NULL, err, sizeof err);
        CHECK(p != NULL);
        if (!p) continue;
        unsigned char *b1, *b2;
        size_t n1, n2;
        CHECK(cg_program_serialize(p, &b1, &n1) == 0);
        cg_program *q = cg_program_parse(b1, n1, err, sizeof err);
        CHECK_MSG(q != NULL, "%s", err);
        if (q) {
            CHECK(q->dialect == p->dialect && q->graph_hash == p->graph_hash);
            CHECK(q->scratch == p->scratch && q->source_len == p->source_len);
            CHECK_STR(q->source, p->source);
            CHECK(q->nkernels == p->nkernels && q->nsteps == p->nsteps && q->ncalls == p->ncalls);
            for (int k = 0; k < p->nkernels && k < q->nkernels; k++) {
                CHECK_STR(q->kernels[k].name, p->kernels[k].name);
                CHECK(q->kernels[k].nargs == p->kernels[k].nargs);
            }
            CHECK(memcmp(q->steps, p->steps, sizeof *p->steps * (size_t)p->nsteps) == 0);
            CHECK(memcmp(q->calls, p->calls, sizeof *p->calls * (size_t)p->ncalls) == 0);
            CHECK(cg_program_check(q, g, err, sizeof err) == 0);
            CHECK(cg_program_serialize(q, &b2, &n2) == 0);
            CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0);
            free(b2);
        }
        cg_program_free(q);
        free(b1);
        cg_program_free(p);
    }
    ir_free(g);
}

TEST(parse_rejects_truncated_and_corrupted_bytes) {
    ir_graph *g = all_ops_graph();
    cg_program *p = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    unsigned char *b;
    size_t n;
    CHECK(p && cg_program_serialize(p, &b, &n) == 0);
    if (!p) return;
    /* every short prefix, then a sweep, then the last bytes */
    int accepted = 0;
    for (size_t len = 0; len < n; len += len < 256 ? 1 : len > n - 300 ? 1 : 61) {
        unsigned char *copy = malloc(len + 1); /* exact size: ASan sees any overread */
        memcpy(copy, b, len);
        cg_program *q = cg_program_parse(copy, len, err, sizeof err);
        accepted += q != NULL;
        cg_program_free(q);
        free(copy);
    }
    CHECK(accepted == 0);
    /* trailing garbage */
    unsigned char *longer = malloc(n + 3);
    memcpy(longer, b, n);
    memset(longer + n, 0, 3);
    CHECK(cg_program_parse(longer, n + 3, err, sizeof err) == NULL);
    free(longer);
    /* random byte flips: parse may accept (a flipped offset or source byte),
     * but then the graph check must still hold the line or the program must
     * be sound; nothing may crash either way. */
    rt_rng rng;
    rt_rng_seed(&rng, 99);
    for (int t = 0; t < 300; t++) {
        unsigned char *copy = malloc(n);
        memcpy(copy, b, n);
        size_t at = (size_t)rt_rng_below(&rng, n - p->source_len);
        if (at >= 44) at += p->source_len; /* skip most of the source text */
        copy[at] ^= (unsigned char)(1u << rt_rng_below(&rng, 8));
        cg_program *q = cg_program_parse(copy, n, err, sizeof err);
        if (q) (void)cg_program_check(q, g, err, sizeof err);
        cg_program_free(q);
        free(copy);
    }
    /* a different version is named as such */
    unsigned char *copy = malloc(n);
    memcpy(copy, b, n);
    copy[4] = 9;
    CHECK(cg_program_parse(copy, n, err, sizeof err) == NULL);
    CHECK(strstr(err, "version") != NULL);
    free(copy);
    free(b);
    cg_program_free(p);
    ir_free(g);
}

TEST(check_refuses_a_program_for_another_graph) {
    ir_graph *g = all_ops_graph();
    cg_program *p = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    CHECK(p != NULL);
    if (!p) return;
    ir_graph *h = ir_clone(g);
    h->nodes[0].type.dim[0] = 4; /* another batch: no longer the same graph */
    CHECK(cg_program_check(p, h, err, sizeof err) != 0);
    ir_free(h);
    /* a descriptor that reads past its buffer is caught */
    for (int c = 0; c < p->ncalls; c++)
        if (p->calls[c].kind == CG_CALL_GEMM) {
            p->calls[c].gemm.off_b += 1000000;
            break;
        }
    CHECK(cg_program_check(p, g, err, sizeof err) != 0);
    CHECK(strstr(err, "gemm") != NULL);
    cg_program_free(p);
    ir_free(g);
}

/* A kernel call whose count runs past its output is refused by the check;
 * and the comparison dprun makes with what the graph renders names what
 * differs: a call's count, a kernel's text. */
TEST(kernel_counts_are_bounded_and_differences_named) {
    ir_graph *g = all_ops_graph();
    for (int d = 0; d < 2; d++) {
        cg_program *p = cg_generate(g, (cg_dialect)d, NULL, err, sizeof err);
        cg_program *q = cg_generate(g, (cg_dialect)d, NULL, err, sizeof err);
        CHECK(p && q);
        if (!p || !q) break;
        char what[256];
        CHECK(cg_program_diff(p, q, what, sizeof what) == 0);
        int c = 0;
        while (c < p->ncalls && p->calls[c].kind != CG_CALL_KERNEL) c++;
        CHECK(c < p->ncalls);
        if (c == p->ncalls) break;
        p->calls[c].count += 1000000;
        CHECK(cg_program_check(p, g, err, sizeof err) != 0);
        CHECK_MSG(strstr(err, "is beyond its output"), "%s", err);
        CHECK(cg_program_diff(p, q, what, sizeof what) == 1);
        CHECK_MSG(strstr(what, "differs (count") &&
                      strstr(what, p->kernels[p->calls[c].kernel].name),
                  "%s", what);
        p->calls[c].count -= 1000000;
        CHECK(cg_program_check(p, g, err, sizeof err) == 0);
        /* one byte of one kernel's body */
        size_t off, len;
        int k = p->nkernels - 1;
        CHECK(cg_kernel_source(p, k, &off, &len) == 0);
        char *b = strstr(p->source + off, "b0[");
        CHECK(b && b < p->source + off + len);
        if (b) b[1] = 'X';
        CHECK(cg_program_diff(p, q, what, sizeof what) == 1);
        char want[96];
        snprintf(want, sizeof want, "kernel %s differs", p->kernels[k].name);
        CHECK_STR(what, want);
        cg_program_free(p);
        cg_program_free(q);
    }
    ir_free(g);
}

TEST(section_holds_several_programs) {
    ir_graph *g = all_ops_graph(), *h = ir_new(), *k = ir_new();
    int x = ir_add_input(h, "x", ir_shape2(2, 3), 0);
    ir_add_node(h, IR_OP_RELU, &x, 1, NULL, NULL, err, sizeof err);
    x = ir_add_input(k, "x", ir_shape2(2, 4), 0);
    ir_add_node(k, IR_OP_RELU, &x, 1, NULL, NULL, err, sizeof err);
    cg_program *pg = cg_generate(g, CG_DIALECT_C, NULL, err, sizeof err);
    cg_program *ph = cg_generate(h, CG_DIALECT_C, NULL, err, sizeof err);
    unsigned char *bg, *bh;
    size_t ng, nh;
    cg_program_serialize(pg, &bg, &ng);
    cg_program_serialize(ph, &bh, &nh);
    unsigned char *sec = malloc(ng + nh);
    memcpy(sec, bg, ng);
    memcpy(sec + ng, bh, nh);
    cg_program *found = NULL;
    CHECK(cg_section_find(sec, ng + nh, h, &found, err, sizeof err) == 0);
    CHECK(found && found->nsteps == 1 && found->graph_hash == cg_graph_hash(h));
    cg_program_free(found);
    CHECK(cg_section_find(sec, ng + nh, g, &found, err, sizeof err) == 0);
    CHECK(found && found->nsteps == pg->nsteps);
    cg_program_free(found);
    CHECK(cg_section_find(sec, ng + nh, k, &found, err, sizeof err) == 1);
    CHECK(found == NULL);
    CHECK(cg_section_find(sec, ng + nh - 1, g, &found, err, sizeof err) == -1);
    CHECK(found == NULL);
    free(sec);
    free(bg);
    free(bh);
    cg_program_free(pg);
    cg_program_free(ph);
    ir_free(g);
    ir_free(h);
    ir_free(k);
}

/* ---- NVRTC ---------------------------------------------------------------------------- */

#ifdef DPC_HAVE_CUDA
/* Compiles src for one architecture; returns 0 and, for compute_XX, the PTX. */
static int nvrtc_compile(const char *src, const char *arch, char **ptx) {
    nvrtcProgram prog;
    if (rt_nvrtc.nvrtcCreateProgram(&prog, src, "dpc_kernels.cu", 0, NULL, NULL) != NVRTC_SUCCESS)
        return -1;
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {opt, "--std=c++17"};
    nvrtcResult rc = rt_nvrtc.nvrtcCompileProgram(prog, 2, opts);
    if (rc != NVRTC_SUCCESS) {
        size_t n = 0;
        rt_nvrtc.nvrtcGetProgramLogSize(prog, &n);
        char *log = malloc(n + 1);
        rt_nvrtc.nvrtcGetProgramLog(prog, log);
        log[n] = 0;
        fprintf(stderr, "  nvrtc %s: %s\n%s\n", arch, rt_nvrtc.nvrtcGetErrorString(rc), log);
        free(log);
        rt_nvrtc.nvrtcDestroyProgram(&prog);
        return -1;
    }
    if (ptx) {
        size_t n = 0;
        rt_nvrtc.nvrtcGetPTXSize(prog, &n);
        *ptx = malloc(n + 1);
        rt_nvrtc.nvrtcGetPTX(prog, *ptx);
        (*ptx)[n] = 0;
    } else {
        size_t n = 0;
        rt_nvrtc.nvrtcGetCUBINSize(prog, &n);
        if (n == 0) rc = NVRTC_ERROR_COMPILATION;
    }
    rt_nvrtc.nvrtcDestroyProgram(&prog);
    return rc == NVRTC_SUCCESS ? 0 : -1;
}

TEST(nvrtc_compiles_every_kernel) {
    if (rt_nvrtc_load(err, sizeof err)) { /* no libnvrtc on this machine */
        fprintf(stderr, "  (skipped: %s)\n", err);
        return;
    }
    ir_graph *g = all_ops_graph();
    cg_program *p = cg_generate(g, CG_DIALECT_CUDA, NULL, err, sizeof err);
    CHECK(p != NULL);
    if (p) {
        CHECK(nvrtc_compile(p->source, "sm_80", NULL) == 0);
        CHECK(nvrtc_compile(p->source, "sm_90", NULL) == 0);
        char *ptx = NULL;
        CHECK(nvrtc_compile(p->source, "compute_80", &ptx) == 0);
        for (int k = 0; ptx && k < p->nkernels; k++) {
            char entry[96];
            snprintf(entry, sizeof entry, ".entry %s(", p->kernels[k].name);
            CHECK_MSG(strstr(ptx, entry) != NULL, "%s missing from the PTX", p->kernels[k].name);
        }
        free(ptx);
    }
    cg_program_free(p);
    ir_free(g);
}
#endif

int main(void) {
    RUN(all_ops_graph_covers_every_op);
    RUN(dialects_share_steps_and_bodies);
    RUN(dialect_tables_are_complete);
    RUN(steps_layout);
    RUN(float_literals_round_trip);
    RUN(unrepresentable_attribute_is_refused);
    RUN(bf16_dtype_is_rendered);
    RUN(gemm_validation);
    RUN(conv_descriptors_fit_their_buffers);
    RUN(grouped_conv_is_direct);
    RUN(serialise_round_trip);
    RUN(parse_rejects_truncated_and_corrupted_bytes);
    RUN(check_refuses_a_program_for_another_graph);
    RUN(kernel_counts_are_bounded_and_differences_named);
    RUN(section_holds_several_programs);
#ifdef DPC_HAVE_CUDA
    RUN(nvrtc_compiles_every_kernel);
#endif
    return harness_done();
}
