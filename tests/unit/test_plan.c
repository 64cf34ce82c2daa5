/* tests/unit/test_plan.c — plan files: round trips, and refusal of every kind
 * of damaged or hostile file with one clear line. Hostile payloads are built
 * here byte by byte (an independent encoder of the format in format/plan.c) and
 * given a valid checksum, so they reach the decoder. */
#include "format/plan.h"
#include "tests/harness.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char err[1024];

/* ---- fixtures ----------------------------------------------------------- */

/* input, conv, batchnorm with param/state nodes, relu, global_avgpool,
 * dense, bias_add and (training only) softmax_cross_entropy as the loss. */
static ir_graph *build_graph(int batch, int training) {
    char e[256] = "";
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(batch, 3, 8, 8), 0);
    ir_type lt = ir_shape1(batch);
    lt.dtype = IR_I32;
    int label = training ? ir_add_input(g, "label", lt, 10) : 0;
    int w = ir_add_param(g, "conv0.weight", ir_shape4(4, 3, 3, 3), IR_INIT_XAVIER);
    int c =
        ir_add_node(g, IR_OP_CONV, (int[]){x, w}, 2, (int64_t[]){3, 1, 1, 1}, NULL, e, sizeof e);
    int gamma = ir_add_param(g, "bn0.gamma", ir_shape1(4), IR_INIT_ONE);
    int beta = ir_add_param(g, "bn0.beta", ir_shape1(4), IR_INIT_ZERO);
    int mean = ir_add_state(g, "bn0.running_mean", ir_shape1(4), IR_INIT_ZERO);
    int var = ir_add_state(g, "bn0.running_var", ir_shape1(4), IR_INIT_ONE);
    int bn = ir_add_node(g, IR_OP_BATCHNORM, (int[]){c, gamma, beta, mean, var}, 5,
                         (int64_t[]){training, 0}, (double[]){1e-5, 0.9}, e, sizeof e);
    int r = ir_add_node(g, IR_OP_RELU, (int[]){bn}, 1, NULL, NULL, e, sizeof e);
    int p = ir_add_node(g, IR_OP_GLOBAL_AVGPOOL, (int[]){r}, 1, NULL, NULL, e, sizeof e);
    int dw = ir_add_param(g, "fc.weight", ir_shape2(10, 4), IR_INIT_XAVIER);
    int d = ir_add_node(g, IR_OP_DENSE, (int[]){p, dw}, 2, NULL, NULL, e, sizeof e);
    int db = ir_add_param(g, "fc.bias", ir_shape1(10), IR_INIT_ZERO);
    int logits = ir_add_node(g, IR_OP_BIAS_ADD, (int[]){d, db}, 2, NULL, NULL, e, sizeof e);
    CHECK_MSG(x >= 0 && label >= 0 && c >= 0 && bn >= 0 && r >= 0 && p >= 0 && d >= 0 &&
                  logits >= 0,
              "%s", e);
    g->nodes[logits].flags = IR_FLAG_OUTPUT;
    snprintf(g->nodes[logits].name, IR_NAME_MAX, "logits");
    g->nodes[c].line = 12, g->nodes[c].col = 9;
    snprintf(g->nodes[c].name, IR_NAME_MAX, "stem.conv");
    g->nodes[bn].line = 12, g->nodes[bn].col = 5;
    if (training) {
        int loss =
            ir_add_node(g, IR_OP_SOFTMAX_CE, (int[]){logits, label}, 2, NULL, NULL, e, sizeof e);
        CHECK_MSG(loss >= 0, "%s", e);
        g->nodes[loss].flags = IR_FLAG_LOSS | IR_FLAG_OUTPUT;
        g->nodes[loss].line = 20, g->nodes[loss].col = 12;
    }
    CHECK_MSG(ir_verify(g, e, sizeof e) == 0, "%s", e);
    return g;
}

static const unsigned char memp_bytes[] = {0, 1, 2, 0, 255, 128, 0, 7};

static void make_plan(dpc_plan *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->model, sizeof p->model, "tiny_net");
    snprintf(p->source, sizeof p->source, "models/tiny.net");
    ir_train *t = &p->schedule;
    ir_train_defaults(t);
    t->batch = 4;
    t->epochs = 10;
    t->init_magnitude = 2.24;
    t->momentum = 0.9;
    t->wd = 1e-4;
    t->lr_steps = 3;
    t->lr_epoch[0] = 0, t->lr_value[0] = 0.1;
    t->lr_epoch[1] = 5, t->lr_value[1] = 1.0 / 3.0;
    t->lr_epoch[2] = 8, t->lr_value[2] = 1e-300;
    t->lr_scaling = IR_LR_SCALING_LINEAR;
    t->reference_batch = 128;
    t->warmup_epochs = 2;
    t->lr_final = 1.0 / 7, t->lr_power = 1.0 / 3; /* stored whatever the curve */
    t->pad = 4;
    t->random_crop = 32;
    t->random_mirror = 1;
    t->normalize = 1;
    t->mean[0] = 0.4914, t->mean[1] = 0.4822, t->mean[2] = -0.4465;
    t->std[0] = 0.2023, t->std[1] = 0.1994, t->std[2] = 0.2010;
    t->eval_batch = 6;
    p->train = build_graph(4, 1);
    p->eval = build_graph(6, 0);
    const char *src = "extern \"C\" void k0(float *x) { x[0] = 1; }\n";
    CHECK(plan_add_section(p, "KCPU", src, strlen(src)) == 0);
    CHECK(plan_add_section(p, "MEMP", memp_bytes, sizeof memp_bytes) == 0);
    CHECK(plan_add_section(p, "EMPT", NULL, 0) == 0);
}

static void free_made(dpc_plan *p) {
    ir_free(p->train);
    ir_free(p->eval);
    plan_free_sections(p);
}

/* A fresh path under /tmp (the file exists, empty; callers unlink it). */
static char *tmp_path(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/dpc_test_plan_XXXXXX");
    int fd = mkstemp(buf);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    return buf;
}

static unsigned char *read_bytes(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    *len = 0;
    if (!f) return NULL;
    unsigned char *b = NULL;
    size_t cap = 0;
    for (;;) {
        if (*len == cap) {
            cap = cap ? 2 * cap : 4096;
            b = realloc(b, cap);
        }
        size_t got = fread(b + *len, 1, cap - *len, f);
        *len += got;
        if (!got) break;
    }
    fclose(f);
    return b;
}

static void write_bytes(const char *path, const void *b, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(b, 1, len, f) == len);
    fclose(f);
}

/* The encoded bytes of a plan, through a real file. */
static unsigned char *plan_bytes(const dpc_plan *p, size_t *len) {
    char path[64];
    tmp_path(path, sizeof path);
    int rc = plan_write(p, path, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    unsigned char *b = read_bytes(path, len);
    unlink(path);
    return b;
}

static unsigned char *valid_bytes(size_t *len) {
    dpc_plan p;
    make_plan(&p);
    unsigned char *b = plan_bytes(&p, len);
    free_made(&p);
    return b;
}

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void wr64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void fix_checksum(unsigned char *b, size_t len) {
    wr64(b + 24, plan_checksum(b + PLAN_HEADER_SIZE, len - PLAN_HEADER_SIZE));
}

/* Data and length of a section of an encoded plan, or NULL. */
static const unsigned char *find_sec(const unsigned char *b, size_t len, const char *tag,
                                     size_t *slen) {
    size_t off = PLAN_HEADER_SIZE;
    while (off + 12 <= len) {
        uint64_t n = rd64(b + off + 4);
        if (memcmp(b + off, tag, 4) == 0) {
            *slen = (size_t)n;
            return b + off + 12;
        }
        off += 12 + (size_t)n;
    }
    return NULL;
}

/* Reads from a private exact-size copy, so ASan sees any over-read. */
static dpc_plan *read_copy(const char *name, const unsigned char *b, size_t len) {
    unsigned char *c = malloc(len ? len : 1);
    if (len) memcpy(c, b, len);
    dpc_plan *p = plan_read_mem(name, c, len, err, sizeof err);
    free(c);
    return p;
}

/* Refused, with one line "NAME: error: ..." containing `want`. */
static void expect_refused(const unsigned char *b, size_t len, const char *want) {
    err[0] = 0;
    dpc_plan *p = read_copy("h.plan", b, len);
    CHECK_MSG(p == NULL, "accepted, expected '%s'", want);
    plan_free(p);
    CHECK_MSG(strncmp(err, "h.plan: error: ", 15) == 0, "%s", err);
    CHECK_MSG(strstr(err, want) != NULL, "got '%s', expected '%s'", err, want);
    CHECK_MSG(strchr(err, '\n') == NULL, "%s", err);
}

/* ---- comparing ---------------------------------------------------------- */

static void check_same_graph(const ir_graph *a, const ir_graph *b) {
    CHECK(a && b);
    if (!a || !b) return;
    CHECK(a->n == b->n);
    for (int i = 0; i < a->n && i < b->n; i++) {
        const ir_node *x = &a->nodes[i], *y = &b->nodes[i];
        CHECK_MSG(x->op == y->op, "node %d", i);
        CHECK_MSG(x->ninputs == y->ninputs, "node %d", i);
        for (int j = 0; j < x->ninputs; j++) CHECK_MSG(x->input[j] == y->input[j], "node %d", i);
        for (int j = 0; j < IR_MAX_IATTRS; j++) CHECK_MSG(x->iattr[j] == y->iattr[j], "node %d", i);
        CHECK_MSG(memcmp(x->fattr, y->fattr, sizeof x->fattr) == 0, "node %d", i);
        CHECK_MSG(ir_type_equal(&x->type, &y->type), "node %d", i);
        CHECK_MSG(x->flags == y->flags, "node %d", i);
        CHECK_MSG(strcmp(x->name, y->name) == 0, "node %d", i);
        CHECK_MSG(x->line == y->line && x->col == y->col, "node %d", i);
    }
}

static void check_same_schedule(const ir_train *a, const ir_train *b) {
    CHECK(a->batch == b->batch);
    CHECK(a->epochs == b->epochs);
    CHECK(a->init_magnitude == b->init_magnitude);
    CHECK(a->optimizer == b->optimizer);
    CHECK(a->momentum == b->momentum);
    CHECK(a->wd == b->wd);
    CHECK(a->nesterov == b->nesterov && a->exclude == b->exclude && a->eta == b->eta &&
          a->eps == b->eps && a->beta1 == b->beta1 && a->beta2 == b->beta2);
    CHECK(a->lr_steps == b->lr_steps);
    for (int i = 0; i < a->lr_steps; i++) {
        CHECK(a->lr_epoch[i] == b->lr_epoch[i]);
        CHECK(a->lr_value[i] == b->lr_value[i]);
    }
    CHECK(a->lr_scaling == b->lr_scaling);
    CHECK(a->reference_batch == b->reference_batch);
    CHECK(a->warmup_epochs == b->warmup_epochs);
    CHECK(a->lr_kind == b->lr_kind && a->lr_final == b->lr_final && a->lr_power == b->lr_power);
    CHECK_STR(a->dataset, b->dataset);
    CHECK(a->pad == b->pad);
    CHECK(a->random_crop == b->random_crop);
    CHECK(a->random_mirror == b->random_mirror);
    CHECK(a->normalize == b->normalize);
    for (int c = 0; c < 3; c++) CHECK(a->mean[c] == b->mean[c] && a->std[c] == b->std[c]);
    CHECK(a->eval_batch == b->eval_batch);
}

static void check_same_plan(const dpc_plan *a, const dpc_plan *b) {
    CHECK_STR(a->model, b->model);
    CHECK_STR(a->source, b->source);
    check_same_schedule(&a->schedule, &b->schedule);
    check_same_graph(a->train, b->train);
    check_same_graph(a->eval, b->eval);
    CHECK(a->nextra == b->nextra);
    for (int i = 0; i < a->nextra && i < b->nextra; i++) {
        CHECK_STR(a->extra[i].tag, b->extra[i].tag);
        CHECK(a->extra[i].len == b->extra[i].len);
        CHECK(a->extra[i].len == 0 ||
              memcmp(a->extra[i].data, b->extra[i].data, a->extra[i].len) == 0);
    }
}

/* ---- round trips -------------------------------------------------------- */

TEST(roundtrip_every_field) {
    dpc_plan p;
    make_plan(&p);
    char path[64], path2[64];
    tmp_path(path, sizeof path);
    CHECK_MSG(plan_write(&p, path, err, sizeof err) == 0, "%s", err);
    dpc_plan *q = plan_read(path, err, sizeof err);
    CHECK_MSG(q != NULL, "%s", err);
    if (q) {
        check_same_plan(&p, q);
        const plan_section *s = plan_find_section(q, "MEMP");
        CHECK(s && s->len == sizeof memp_bytes && memcmp(s->data, memp_bytes, s->len) == 0);
        CHECK(plan_find_section(q, "EMPT") && plan_find_section(q, "EMPT")->len == 0);
        CHECK(plan_find_section(q, "NONE") == NULL);
        CHECK(ir_loss_node(q->train) == q->train->n - 1);
        /* Writing what was read gives the same bytes. */
        tmp_path(path2, sizeof path2);
        CHECK_MSG(plan_write(q, path2, err, sizeof err) == 0, "%s", err);
        size_t n1, n2;
        unsigned char *b1 = read_bytes(path, &n1), *b2 = read_bytes(path2, &n2);
        CHECK(b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0);
        /* And from memory too. */
        dpc_plan *m = read_copy("mem.plan", b1, n1);
        CHECK_MSG(m != NULL, "%s", err);
        if (m) check_same_plan(&p, m);
        plan_free(m);
        free(b1);
        free(b2);
        unlink(path2);
    }
    plan_free(q);
    unlink(path);
    free_made(&p);
}

/* The optimizer's other fields ride the OPTM section, written only when
 * one differs from the defaults (so SGD plans keep their bytes). */
TEST(optimizer_section) {
    dpc_plan p;
    make_plan(&p);
    char path[64];
    tmp_path(path, sizeof path);
    for (int k = 0; k < 2; k++) {
        if (k) {
            p.schedule.optimizer = IR_OPT_LARS, p.schedule.nesterov = 0;
            p.schedule.eta = 1.0 / 3, p.schedule.exclude = IR_EXCLUDE_BN | IR_EXCLUDE_BIAS;
        }
        CHECK_MSG(plan_write(&p, path, err, sizeof err) == 0, "%s", err);
        size_t n;
        unsigned char *b = read_bytes(path, &n);
        CHECK(b && (memmem(b, n, "OPTM", 4) != NULL) == k);
        free(b);
        dpc_plan *q = plan_read(path, err, sizeof err);
        CHECK_MSG(q != NULL, "%s", err);
        if (q) check_same_schedule(&p.schedule, &q->schedule);
        plan_free(q);
    }
    p.schedule.beta1 = 1; /* refused on writing, as a read would be */
    CHECK(plan_write(&p, path, err, sizeof err) != 0 && strstr(err, "beta1 must be in [0, 1)"));
    unlink(path);
    free_made(&p);
}

/* DATA holds the NONZERO fields up to the last that is not 0: none, no
 * section; resize alone, its one i32 as before warmup_steps and
 * lr_decay_steps came; warmup_steps, the i32s up to it; clip_norm, an f64
 * after them; each read back. */
TEST(data_section_is_a_prefix) {
    dpc_plan p;
    make_plan(&p);
    char path[64];
    tmp_path(path, sizeof path);
    static const uint64_t want[] = {0, 4, 8, 12, 20};
    for (int k = 0; k < 5; k++) {
        ir_train *t = &p.schedule;
        if (k == 1) snprintf(t->dataset, sizeof t->dataset, "imagefolder"), t->resize = 64;
        if (k == 2) t->resize = 0, t->warmup_steps = 5, t->warmup_epochs = 0;
        if (k == 3) t->lr_kind = IR_LR_COSINE, t->lr_steps = 1, t->lr_decay_steps = 9;
        if (k == 4) t->clip_norm = 0.25;
        CHECK_MSG(plan_write(&p, path, err, sizeof err) == 0, "%s", err);
        size_t n;
        unsigned char *b = read_bytes(path, &n);
        const unsigned char *d = b ? memmem(b, n, "DATA", 4) : NULL;
        CHECK((d != NULL) == (k > 0));
        if (d)
            CHECK_MSG(rd64(d + 4) == want[k], "k %d: DATA of %llu bytes", k,
                      (unsigned long long)rd64(d + 4));
        free(b);
        dpc_plan *q = plan_read(path, err, sizeof err);
        CHECK_MSG(q != NULL, "%s", err);
        if (q)
            CHECK(q->schedule.resize == t->resize && q->schedule.warmup_steps == t->warmup_steps &&
                  q->schedule.lr_decay_steps == t->lr_decay_steps &&
                  q->schedule.clip_norm == t->clip_norm);
        plan_free(q);
    }
    unlink(path);
    free_made(&p);
}

TEST(header_layout) {
    size_t len;
    unsigned char *b = valid_bytes(&len);
    CHECK(len > PLAN_HEADER_SIZE);
    CHECK(memcmp(b, "DPCPLAN\0", 8) == 0);
    CHECK(rd32(b + 8) == PLAN_VERSION);
    CHECK(rd32(b + 12) == 0);
    CHECK(rd64(b + 16) == len - PLAN_HEADER_SIZE);
    CHECK(rd64(b + 24) == plan_checksum(b + PLAN_HEADER_SIZE, len - PLAN_HEADER_SIZE));
    /* The four required sections first, in order, then the extras. */
    static const char *order[] = {"META", "SCHD", "GTRN", "GEVL", "KCPU", "MEMP", "EMPT"};
    size_t off = PLAN_HEADER_SIZE;
    for (int i = 0; i < 7; i++) {
        CHECK(off + 12 <= len && memcmp(b + off, order[i], 4) == 0);
        off += 12 + (size_t)rd64(b + off + 4);
    }
    CHECK(off == len);
    /* FNV-1a 64 reference values. */
    CHECK(plan_checksum("", 0) == 0xcbf29ce484222325u);
    CHECK(plan_checksum("a", 1) == 0xaf63dc4c8601ec8cu);
    free(b);
}

TEST(overwrite_is_atomic_and_clean) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/dpc_test_dir_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/a.plan", dir);
    write_bytes(path, "old contents", 12);
    dpc_plan p;
    make_plan(&p);
    CHECK_MSG(plan_write(&p, path, err, sizeof err) == 0, "%s", err);
    dpc_plan *q = plan_read(path, err, sizeof err);
    CHECK_MSG(q != NULL, "%s", err);
    plan_free(q);
    /* A directory is refused before any temporary is made (base_file): the
     * error names the path, and nothing is left behind. */
    char sub[160];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    CHECK(mkdir(sub, 0700) == 0);
    CHECK(plan_write(&p, sub, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, sub) && strstr(err, "not a regular file (a directory)") &&
                  !strchr(err, '\n'),
              "%s", err);
    DIR *d = opendir(dir);
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            entries++;
            CHECK_MSG(!strcmp(e->d_name, "a.plan") || !strcmp(e->d_name, "sub"), "left: %s",
                      e->d_name);
        }
    if (d) closedir(d);
    CHECK(entries == 2);
    rmdir(sub);
    unlink(path);
    rmdir(dir);
    free_made(&p);
}

TEST(write_errors) {
    dpc_plan p;
    make_plan(&p);
    const char *path = "/nonexistent_dpc_dir/x.plan";
    CHECK(plan_write(&p, path, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, path) && strstr(err, "No such file or directory"), "%s", err);
    /* The writer refuses what the reader would refuse. */
    char tp[64];
    tmp_path(tp, sizeof tp);
    ir_graph *keep = p.eval;
    p.eval = NULL;
    CHECK(plan_write(&p, tp, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "no eval program"), "%s", err);
    p.eval = keep;
    p.train->nodes[9].type.dim[1] = 5; /* relu's type no longer fits its rule */
    CHECK(plan_write(&p, tp, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "train program") && strstr(err, "shape rule"), "%s", err);
    p.train->nodes[9].type.dim[1] = 4;
    p.train->nodes[9].iattr[2] = 7; /* a slot relu's schema lacks */
    CHECK(plan_write(&p, tp, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "slot 2 is set but unused"), "%s", err);
    p.train->nodes[9].iattr[2] = 0;
    p.schedule.batch = 0;
    CHECK(plan_write(&p, tp, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "schedule: batch must be positive"), "%s", err);
    p.schedule.batch = 4;
    snprintf(p.eval->nodes[5].name, IR_NAME_MAX, "bn0\r");
    CHECK(plan_write(&p, tp, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "eval program: node 5 (state): name contains a control character"), "%s",
              err);
    snprintf(p.eval->nodes[5].name, IR_NAME_MAX, "bn0.running_mean");
    p.extra[0].tag[1] = '\n';
    CHECK(plan_write(&p, tp, err, sizeof err) != 0);
    CHECK_MSG(strstr(err, "extra section 0: bad tag") && !strchr(err, '\n'), "%s", err);
    p.extra[0].tag[1] = 'C';
    CHECK_MSG(plan_write(&p, tp, err, sizeof err) == 0, "%s", err);
    unlink(tp);
    free_made(&p);
}

TEST(sections_api) {
    dpc_plan p;
    memset(&p, 0, sizeof p);
    CHECK(plan_add_section(&p, "ABC", "x", 1) == -1);
    CHECK(plan_add_section(&p, "ABCDE", "x", 1) == -1);
    CHECK(plan_add_section(&p, "GTRN", "x", 1) == -1);
    CHECK(plan_add_section(&p, "META", "x", 1) == -1);
    CHECK(plan_add_section(&p, "A BC", "x", 1) == -1);
    CHECK(plan_add_section(&p, "ABCD", NULL, 3) == -1);
    CHECK(plan_add_section(&p, "ABCD", "xyz", 3) == 0);
    CHECK(plan_add_section(&p, "ABCD", "xyz", 3) == -1); /* taken */
    for (int i = 1; i < PLAN_MAX_SECTIONS; i++) {
        char tag[5];
        snprintf(tag, sizeof tag, "S%03u", (unsigned)i % 1000u);
        CHECK(plan_add_section(&p, tag, tag, 4) == 0);
    }
    CHECK(p.nextra == PLAN_MAX_SECTIONS);
    CHECK(plan_add_section(&p, "FULL", "x", 1) == -1);
    const plan_section *s = plan_find_section(&p, "S017");
    CHECK(s && s->len == 4 && memcmp(s->data, "S017", 4) == 0);
    plan_free_sections(&p);
    CHECK(p.nextra == 0);
}

TEST(info_summary) {
    size_t len;
    unsigned char *b = valid_bytes(&len);
    dpc_plan *p = read_copy("i.plan", b, len);
    CHECK_MSG(p != NULL, "%s", err);
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (p && f) plan_info(p, f);
    if (f) fclose(f);
    static const char *want[] = {
        "model: tiny_net",
        "source: models/tiny.net",
        "format: dpc plan version 3",
        "train program: 16 nodes, batch 4",
        "image [4,3,8,8], label [4]:i32",
        "parameters: 166 in 5 tensors, 2 state tensors",
        "eval program: 14 nodes, batch 6",
        "image [6,3,8,8]\n",
        "schedule:",
        "lr {0: 0.1, 5: 0.333333, 8: 1e-300}",
        "sections: 3 extra",
        "KCPU 43 bytes",
        "MEMP 8 bytes",
        "EMPT 0 bytes",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK_MSG(text && strstr(text, want[i]), "missing '%s' in:\n%s", want[i], text);
    free(text);
    plan_free(p);
    free(b);
}

/* ---- damaged files ------------------------------------------------------ */

TEST(truncated_at_every_length) {
    size_t len;
    unsigned char *b = valid_bytes(&len);
    char want[128];
    for (size_t k = 0; k < len; k++) {
        if (k < 8)
            snprintf(want, sizeof want, "t.plan: error: not a dpc plan file");
        else if (k < PLAN_HEADER_SIZE)
            snprintf(want, sizeof want, "t.plan: error: truncated plan (%zu of 32 bytes)", k);
        else
            snprintf(want, sizeof want, "t.plan: error: truncated plan (%zu of %zu bytes)", k, len);
        dpc_plan *p = read_copy("t.plan", b, k);
        CHECK_MSG(p == NULL && strcmp(err, want) == 0, "prefix %zu: '%s'", k, err);
        plan_free(p);
    }
    /* The same through files. */
    char path[64];
    tmp_path(path, sizeof path);
    size_t cuts[] = {0, 5, 8, 20, 32, 100, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        size_t k = cuts[i];
        write_bytes(path, b, k);
        dpc_plan *p = plan_read(path, err, sizeof err);
        CHECK(p == NULL);
        plan_free(p);
        if (k < 8)
            snprintf(want, sizeof want, "%s: error: not a dpc plan file", path);
        else if (k < PLAN_HEADER_SIZE)
            snprintf(want, sizeof want, "%s: error: truncated plan (%zu of 32 bytes)", path, k);
        else
            snprintf(want, sizeof want, "%s: error: truncated plan (%zu of %zu bytes)", path, k,
                     len);
        CHECK_MSG(strcmp(err, want) == 0, "'%s' vs '%s'", err, want);
    }
    unlink(path);
    free(b);
}

TEST(any_flipped_byte_fails_the_checksum) {
    size_t len;
    unsigned char *b = valid_bytes(&len);
    unsigned char *c = malloc(len);
    static const unsigned char masks[] = {0x01, 0x80, 0xff};
    for (size_t i = PLAN_HEADER_SIZE; i < len; i++)
        for (int m = 0; m < 3; m++) {
            memcpy(c, b, len);
            c[i] ^= masks[m];
            dpc_plan *p = plan_read_mem("c.plan", c, len, err, sizeof err);
            CHECK_MSG(p == NULL &&
                          strcmp(err, "c.plan: error: corrupt plan: checksum mismatch") == 0,
                      "byte %zu: '%s'", i, err);
            plan_free(p);
        }
    for (size_t i = 24; i < 32; i++) { /* the stored checksum itself */
        memcpy(c, b, len);
        c[i] ^= 0x10;
        expect_refused(c, len, "checksum mismatch");
    }
    free(c);
    free(b);
}

TEST(header_problems) {
    size_t len;
    unsigned char *b = valid_bytes(&len);
    unsigned char *c = malloc(len + 1);
    memcpy(c, b, len);
    wr32(c + 8, 4);
    expect_refused(c, len,
                   "plan format version 4, this dprun reads version 3; recompile the "
                   "model with this dpc");
    CHECK_STR(err, "h.plan: error: plan format version 4, this dprun reads version 3; recompile "
                   "the model with this dpc");
    expect_refused(c, 12, "plan format version 4"); /* even when cut short */
    wr32(c + 8, 2); /* before conv's groups: refused, never misread */
    expect_refused(c, len, "plan format version 2, this dprun reads version 3;");
    wr32(c + 8, 0);
    expect_refused(c, len, "plan format version 0,");
    wr32(c + 8, 0xffffffffu);
    expect_refused(c, len, "plan format version 4294967295,");
    memcpy(c, b, len);
    wr32(c + 12, 4);
    expect_refused(c, len, "flags 0x4");
    memcpy(c, b, len);
    c[len] = 0; /* one byte too many */
    expect_refused(c, len + 1, "data after the end of the payload");
    wr64(c + 16, len - PLAN_HEADER_SIZE - 1);
    expect_refused(c, len, "data after the end of the payload");
    wr64(c + 16, UINT64_MAX);
    expect_refused(c, len, "corrupt plan: payload length");
    wr64(c + 16, UINT64_MAX - 40);
    expect_refused(c, len, "truncated plan");
    memcpy(c, b, len);
    c[3] = 'X';
    expect_refused(c, len, "not a dpc plan file");
    free(c);
    free(b);
}

TEST(not_plan_files) {
    char path[64];
    tmp_path(path, sizeof path);
    char want[128];
    snprintf(want, sizeof want, "%s: error: not a dpc plan file", path);
    const char *text = "network tiny {\n  x = relu(image)\n}\n";
    write_bytes(path, text, strlen(text));
    dpc_plan *p = plan_read(path, err, sizeof err);
    CHECK(p == NULL);
    CHECK_STR(err, want);
    write_bytes(path, "", 0);
    p = plan_read(path, err, sizeof err);
    CHECK(p == NULL);
    CHECK_STR(err, want);
    unlink(path);
    p = plan_read(path, err, sizeof err);
    CHECK(p == NULL);
    snprintf(want, sizeof want, "%s: error: cannot open: No such file or directory", path);
    CHECK_STR(err, want);
    p = plan_read("/tmp", err, sizeof err);
    CHECK(p == NULL);
    CHECK_STR(err, "/tmp: error: not a regular file (a directory); refusing to read it");
    p = plan_read("/dev/zero", err, sizeof err); /* endless: refused unread */
    CHECK(p == NULL);
    CHECK_STR(err,
              "/dev/zero: error: not a regular file (a character device); refusing to read it");
    p = plan_read_mem("n.plan", NULL, 0, err, sizeof err);
    CHECK(p == NULL);
    CHECK_STR(err, "n.plan: error: not a dpc plan file");
    /* A small error buffer gets a cut message, never an overflow. */
    char small[8];
    p = plan_read_mem("n.plan", NULL, 0, small, sizeof small);
    CHECK(p == NULL && strlen(small) == 7);
    CHECK(plan_read_mem("n.plan", NULL, 0, NULL, 0) == NULL);
}

/* ---- hostile payloads with valid checksums ------------------------------ */

typedef struct {
    unsigned char *p;
    size_t len, cap;
} buf;

static void b_put(buf *b, const void *d, size_t n) {
    if (b->len + n > b->cap) {
        while (b->len + n > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
        b->p = realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->len, d, n);
    b->len += n;
}
static void b_u32(buf *b, uint32_t v) {
    unsigned char c[4];
    wr32(c, v);
    b_put(b, c, 4);
}
static void b_u64(buf *b, uint64_t v) {
    unsigned char c[8];
    wr64(c, v);
    b_put(b, c, 8);
}
static void b_f64(buf *b, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    b_u64(b, u);
}
static void b_str(buf *b, const char *s) {
    b_u32(b, (uint32_t)strlen(s));
    b_put(b, s, strlen(s));
}
static void b_sec(buf *b, const char *tag, const buf *data) {
    b_put(b, tag, 4);
    b_u64(b, data->len);
    b_put(b, data->p, data->len);
}

/* One node as the format spells it; fields are raw so they can lie. */
typedef struct {
    uint32_t op, nin, in[16], nia;
    int64_t ia[16];
    uint32_t nfa;
    double fa[16];
    uint32_t ndim;
    int64_t dim[8];
    uint32_t dtype, flags;
    int namelen; /* -1: strlen(name); 0..64: that many bytes of name; else a lie */
    const char *name;
    int32_t line, col;
} nspec;

static void b_node(buf *b, const nspec *n) {
    b_u32(b, n->op);
    b_u32(b, n->nin);
    for (uint32_t j = 0; j < n->nin && j < 16; j++) b_u32(b, n->in[j]);
    b_u32(b, n->nia);
    for (uint32_t j = 0; j < n->nia && j < 16; j++) b_u64(b, (uint64_t)n->ia[j]);
    b_u32(b, n->nfa);
    for (uint32_t j = 0; j < n->nfa && j < 16; j++) b_f64(b, n->fa[j]);
    b_u32(b, n->ndim);
    for (uint32_t d = 0; d < n->ndim && d < 8; d++) b_u64(b, (uint64_t)n->dim[d]);
    b_u32(b, n->dtype);
    b_u32(b, n->flags);
    size_t sl = strlen(n->name);
    int honest = n->namelen >= 0 && n->namelen <= 64;
    b_u32(b, n->namelen == -1 ? (uint32_t)sl : (uint32_t)n->namelen);
    b_put(b, n->name, honest ? (size_t)n->namelen : sl);
    b_u32(b, (uint32_t)n->line);
    b_u32(b, (uint32_t)n->col);
}

static buf b_graph(const nspec *nodes, int n, uint32_t count) {
    buf b = {0};
    b_u32(&b, count);
    for (int i = 0; i < n; i++) b_node(&b, &nodes[i]);
    return b;
}

/* A small valid program: x = input [2,3]; w = param [3]; y = relu(w)
 * (x unread: no data fills it, ir/validate.h). */
static void base_nodes(nspec n[3]) {
    memset(n, 0, 3 * sizeof *n);
    n[0] = (nspec){.op = IR_OP_INPUT,
                   .nia = 1,
                   .ndim = 2,
                   .dim = {2, 3},
                   .namelen = -1,
                   .name = "x",
                   .line = 1,
                   .col = 1};
    n[1] = (nspec){.op = IR_OP_PARAM,
                   .nia = 1,
                   .ia = {IR_INIT_ONE},
                   .ndim = 1,
                   .dim = {3},
                   .namelen = -1,
                   .name = "w"};
    n[2] = (nspec){.op = IR_OP_RELU,
                   .nin = 1,
                   .in = {1},
                   .ndim = 1,
                   .dim = {3},
                   .flags = IR_FLAG_OUTPUT,
                   .namelen = -1,
                   .name = "y",
                   .line = 3,
                   .col = 7};
}

/* The SCHD bytes of a real plan (written by plan_write). */
static buf real_schedule(void) {
    size_t len, slen = 0;
    unsigned char *b = valid_bytes(&len);
    const unsigned char *s = find_sec(b, len, "SCHD", &slen);
    buf out = {0};
    CHECK(s != NULL);
    if (s) b_put(&out, s, slen);
    free(b);
    return out;
}

static buf meta(const char *model, const char *source) {
    buf m = {0};
    b_str(&m, model);
    b_str(&m, source);
    return m;
}

/* Header plus payload, with the right length and checksum. */
static unsigned char *as_file(const buf *payload, size_t *len) {
    *len = PLAN_HEADER_SIZE + payload->len;
    unsigned char *f = malloc(*len);
    memcpy(f, "DPCPLAN\0", 8);
    wr32(f + 8, PLAN_VERSION);
    wr32(f + 12, 0);
    wr64(f + 16, payload->len);
    if (payload->len) memcpy(f + PLAN_HEADER_SIZE, payload->p, payload->len);
    fix_checksum(f, *len);
    return f;
}

/* A plan from parts: train and eval programs given as node lists. */
static void expect_graphs(const nspec *tr, int ntr, uint32_t trcount, const nspec *ev, int nev,
                          const char *want) {
    buf sch = real_schedule(), m = meta("m", "m.net");
    buf gt = b_graph(tr, ntr, trcount), ge = b_graph(ev, nev, (uint32_t)nev);
    buf pl = {0};
    b_sec(&pl, "META", &m);
    b_sec(&pl, "SCHD", &sch);
    b_sec(&pl, "GTRN", &gt);
    b_sec(&pl, "GEVL", &ge);
    size_t len;
    unsigned char *f = as_file(&pl, &len);
    if (want) {
        expect_refused(f, len, want);
    } else {
        dpc_plan *p = read_copy("ok.plan", f, len);
        CHECK_MSG(p != NULL, "%s", err);
        if (p) {
            CHECK(p->train->n == ntr && p->eval->n == nev);
            for (int i = 0; i < ntr && i < p->train->n; i++) {
                const ir_node *x = &p->train->nodes[i];
                CHECK(x->op == (ir_op)tr[i].op && x->ninputs == (int)tr[i].nin);
                CHECK(x->type.ndim == (int)tr[i].ndim && x->type.dim[0] == tr[i].dim[0]);
                CHECK(x->line == tr[i].line && x->col == tr[i].col && x->flags == tr[i].flags);
                CHECK_STR(x->name, tr[i].name);
            }
        }
        plan_free(p);
    }
    free(f);
    free(pl.p), free(sch.p), free(m.p), free(gt.p), free(ge.p);
}

/* Train program = base with one node changed; eval = base. */
static void expect_node(const nspec *changed, int at, const char *want) {
    nspec n[3], e[3];
    base_nodes(n);
    base_nodes(e);
    n[at] = *changed;
    expect_graphs(n, 3, 3, e, 3, want);
}

TEST(hand_built_baseline_is_accepted) {
    nspec n[3];
    base_nodes(n);
    expect_graphs(n, 3, 3, n, 3, NULL);
    expect_graphs(n, 3, 3, n, 2, NULL); /* eval may use fewer parameters */
    n[0].name = "caf\xc3\xa9";          /* UTF-8 names are fine */
    expect_graphs(n, 3, 3, n, 3, NULL);
}

#define LONG64 "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl"

TEST(hostile_nodes) {
    nspec b[3], n;
    base_nodes(b);
#define CASE(at, edit, want)       \
    do {                           \
        n = b[at];                 \
        edit;                      \
        expect_node(&n, at, want); \
    } while (0)
    char want[128];
    snprintf(want, sizeof want, "train program, node 2: unknown op %d", IR_OP_COUNT);
    CASE(2, n.op = IR_OP_COUNT, want);
    CASE(2, n.op = 0xffffffffu, "unknown op 4294967295");
    CASE(2, n.in[0] = 2, "node 2: relu: input 0 is node 2, not an earlier one");
    CASE(2, n.in[0] = 0xffffffffu, "not an earlier one");
    CASE(0, (n.nin = 1, n.in[0] = 0), "input 0 is node 0, not an earlier one");
    snprintf(want, sizeof want, "relu with %d inputs", IR_MAX_INPUTS + 1);
    CASE(2, n.nin = IR_MAX_INPUTS + 1, want);
    CASE(2, n.nin = 0xffffffffu, "relu with 4294967295 inputs");
    CASE(2, (n.nin = 2, n.in[1] = 1), "relu): 2 inputs, the op takes 1 to 1");
    CASE(2, n.nin = 0, "relu): 0 inputs");
    CASE(0, n.nia = 2, "input with 2 integer attributes, expected 1");
    CASE(0, n.nia = 0xffffffffu, "input with 4294967295 integer attributes");
    CASE(2, n.nfa = 1, "relu with 1 float attributes, expected 0");
    CASE(0, n.ia[0] = (int64_t)1 << 50, "integer attribute 0 is out of range");
    CASE(0, n.ia[0] = INT64_MIN, "integer attribute 0 is out of range");
    CASE(1, n.ia[0] = 7, "bad initialiser 7");
    CASE(0, n.ndim = 5, "rank 5, must be 1 to 4");
    CASE(0, n.ndim = 0, "rank 0");
    CASE(0, n.ndim = 0xffffffffu, "rank 4294967295");
    CASE(0, n.dim[0] = 0, "dimension 0 is 0");
    CASE(0, n.dim[1] = -3, "dimension 1 is -3");
    CASE(0, n.dim[0] = INT64_MIN, "dimension 0 is -9223372036854775808");
    CASE(0, n.dim[0] = (int64_t)1 << 41, "dimension 0 is 2199023255552");
    CASE(0, (n.ndim = 4, n.dim[0] = n.dim[1] = n.dim[2] = n.dim[3] = (int64_t)1 << 40),
         "more than 2^40 elements");
    CASE(0, (n.dim[0] = (int64_t)1 << 30, n.dim[1] = (int64_t)1 << 30), "more than 2^40 elements");
    CASE(0, n.dtype = 3, "unknown dtype 3");
    CASE(0, n.dtype = 0xffffffffu, "unknown dtype 4294967295");
    CASE(0, (n.name = LONG64, n.namelen = 64), "name is 64 bytes long, at most 63 allowed");
    CASE(0, n.namelen = -2, "name is 4294967294 bytes long");
    CASE(0, (n.name = "a\0bc", n.namelen = 4), "name contains a NUL byte");
    CASE(0, n.name = "", "source without a name");
    CASE(0, n.name = "a\nb", "name contains a control character");
    CASE(2, n.name = "tab\there", "name contains a control character");
    CASE(2,
         n.name = "csi\xc2\x9b"
                  "2J",
         "name contains a control character"); /* UTF-8 C1 */
    CASE(1, n.name = "x", "duplicate name 'x'");
    CASE(0, n.line = -1, "bad source position -1:1");
    CASE(2, n.col = INT32_MIN, "bad source position");
    CASE(2, n.dim[0] = 4, "shape rule says");
    CASE(2, n.dtype = IR_I32, "shape rule says"); /* bf16 is a float storage type (--precision) */
    CASE(1, n.dtype = IR_I32, "relu: input must be a float tensor");
#undef CASE
    /* Two losses. */
    nspec t[4];
    base_nodes(t);
    t[2].flags = IR_FLAG_LOSS;
    t[3] = t[2];
    t[3].name = "z";
    expect_graphs(t, 4, 4, b, 3, "2 loss nodes");
}

TEST(hostile_counts_and_floats) {
    nspec b[3];
    base_nodes(b);
    expect_graphs(b, 3, 0xffffffffu, b, 3, "train program: 4294967295 nodes cannot fit in");
    expect_graphs(b, 3, 1000000, b, 3, "1000000 nodes cannot fit");
    expect_graphs(b, 3, 4, b, 3, "train program, node 3: ends early");
    expect_graphs(b, 3, 2, b, 3, "train program: 53 unexpected bytes at the end");
    expect_graphs(b, 0, 0, b, 3,
                  "eval program (GEVL), node 1: param 'w' is not in the train program");
    nspec o[3];
    base_nodes(o);
    o[1].dim[0] = o[2].dim[0] = 4;
    expect_graphs(b, 3, 3, o, 3,
                  "eval program (GEVL), node 1: param 'w' [4] differs from the train program's "
                  "param [3]");
    o[1].dim[0] = o[2].dim[0] = 3, o[1].dtype = IR_BF16;
    expect_graphs(b, 3, 3, o, 3, "eval program (GEVL), node 1: param 'w' [3]:bf16 differs");
    /* A batchnorm, to reach float attributes. */
    nspec n[7];
    memset(n, 0, sizeof n);
    n[0] = (nspec){
        .op = IR_OP_INPUT, .nia = 1, .ndim = 2, .dim = {4, 3}, .namelen = -1, .name = "image"};
    for (int i = 1; i <= 4; i++) {
        static const char *names[] = {"", "g", "b", "m", "v"};
        n[i] = (nspec){.op = i <= 2 ? IR_OP_PARAM : IR_OP_STATE,
                       .nia = 1,
                       .ndim = 1,
                       .dim = {3},
                       .namelen = -1,
                       .name = names[i]};
    }
    n[5] = (nspec){.op = IR_OP_BATCHNORM,
                   .nin = 5,
                   .in = {0, 1, 2, 3, 4},
                   .nia = 2,
                   .ia = {1, 0},
                   .nfa = 2,
                   .fa = {1e-5, 0.9},
                   .ndim = 2,
                   .dim = {4, 3},
                   .namelen = -1,
                   .name = ""};
    n[6] = (nspec){.op = IR_OP_RELU,
                   .nin = 1,
                   .in = {5},
                   .ndim = 2,
                   .dim = {4, 3},
                   .namelen = -1,
                   .name = "y",
                   .line = 3,
                   .col = 7};
    nspec e[7]; /* at the eval batch (6), batchnorm in inference mode */
    memcpy(e, n, sizeof n);
    e[0].dim[0] = e[5].dim[0] = e[6].dim[0] = 6, e[5].ia[0] = 0;
    expect_graphs(n, 7, 7, e, 7, NULL);
    n[5].fa[0] = NAN;
    expect_graphs(n, 7, 7, e, 7, "node 5 (batchnorm): float attribute 0 is not finite");
    n[5].fa[0] = INFINITY;
    expect_graphs(n, 7, 7, e, 7, "float attribute 0 is not finite");
    n[5].fa[0] = -1;
    expect_graphs(n, 7, 7, e, 7, "eps must be positive");
    n[5].fa[0] = 1e-5;
    n[5].nin = 4;
    expect_graphs(n, 7, 7, e, 7, "4 inputs, the op takes 5 to 5");
    n[5].nin = 5;
    e[4].op = IR_OP_PARAM; /* a state in train, a param in eval */
    e[4].ia[0] = 1;
    expect_graphs(n, 7, 7, e, 7,
                  "eval program (GEVL), node 4: param 'v' [3] differs from the train program's "
                  "state [3]");
    /* Conv padding at the attribute bound, far past any overflow. */
    nspec c[3];
    memset(c, 0, sizeof c);
    c[0] = (nspec){
        .op = IR_OP_INPUT, .nia = 1, .ndim = 4, .dim = {4, 1, 4, 4}, .namelen = -1, .name = "image"};
    c[1] = (nspec){
        .op = IR_OP_PARAM, .nia = 1, .ndim = 4, .dim = {1, 1, 3, 3}, .namelen = -1, .name = "w"};
    c[2] = (nspec){.op = IR_OP_CONV,
                   .nin = 2,
                   .in = {0, 1},
                   .nia = 4,
                   .ia = {3, 1, (int64_t)1 << 40, 1},
                   .ndim = 4,
                   .dim = {4, 1, 4, 4},
                   .namelen = -1,
                   .name = "y",
                   .line = 3,
                   .col = 7};
    nspec ce[2] = {c[0], c[1]}; /* eval: the image at the eval batch */
    ce[0].dim[0] = 6;
    expect_graphs(c, 3, 3, ce, 2, "shape rule says");
    c[2].ia[2] = INT64_MAX;
    expect_graphs(c, 3, 3, ce, 2, "integer attribute 2 is out of range");
    c[2].ia[2] = 1;
    expect_graphs(c, 3, 3, ce, 2, NULL);
}

/* Payload from sections given as (tag, bytes); tags may repeat or be odd. */
typedef struct {
    const char *tag;
    buf data;
} sec;

static unsigned char *plan_of(const sec *s, int n, size_t *len) {
    buf pl = {0};
    for (int i = 0; i < n; i++) b_sec(&pl, s[i].tag, &s[i].data);
    unsigned char *f = as_file(&pl, len);
    free(pl.p);
    return f;
}

TEST(hostile_sections) {
    nspec nodes[3];
    base_nodes(nodes);
    buf m = meta("m", "m.net"), sch = real_schedule(), g = b_graph(nodes, 3, 3);
    buf futr = {0};
    b_put(&futr, "future\0bytes", 12);
    size_t len;
    unsigned char *f;
#define EXPECT(want, ...)                                     \
    do {                                                      \
        sec s_[] = {__VA_ARGS__};                             \
        f = plan_of(s_, (int)(sizeof s_ / sizeof *s_), &len); \
        expect_refused(f, len, want);                         \
        free(f);                                              \
    } while (0)
    EXPECT("missing section GEVL", {"META", m}, {"SCHD", sch}, {"GTRN", g});
    EXPECT("missing section META", {"SCHD", sch}, {"GTRN", g}, {"GEVL", g});
    EXPECT("duplicated section META", {"META", m}, {"META", m}, {"SCHD", sch}, {"GTRN", g},
           {"GEVL", g});
    EXPECT("duplicated section GTRN", {"META", m}, {"SCHD", sch}, {"GTRN", g}, {"GEVL", g},
           {"GTRN", g});
    EXPECT("duplicated section FUTR", {"META", m}, {"SCHD", sch}, {"GTRN", g}, {"GEVL", g},
           {"FUTR", futr}, {"FUTR", futr});
    EXPECT("bad section tag at offset 0", {"\x01XYZ", m});
    EXPECT("bad section tag", {"META", m}, {"AB C", m});
    buf empty = {0};
    f = as_file(&empty, &len); /* an empty payload */
    expect_refused(f, len, "missing section META");
    free(f);
    /* Model name too long; source path with a NUL; trailing bytes. */
    buf bad = {0};
    b_u32(&bad, 64);
    for (int i = 0; i < 64; i++) b_put(&bad, "a", 1);
    b_str(&bad, "s");
    EXPECT("section META: model name is 64 bytes long", {"META", bad}, {"SCHD", sch}, {"GTRN", g},
           {"GEVL", g});
    bad.len = 0;
    b_str(&bad, "m");
    b_u32(&bad, 2);
    b_put(&bad, "\0x", 2);
    EXPECT("source path contains a NUL byte", {"META", bad}, {"SCHD", sch}, {"GTRN", g},
           {"GEVL", g});
    bad.len = 0;
    b_str(&bad, "m");
    b_str(&bad, "s");
    b_put(&bad, "zz", 2);
    EXPECT("section META: 2 unexpected bytes at the end", {"META", bad}, {"SCHD", sch}, {"GTRN", g},
           {"GEVL", g});
    bad.len = 0;
    b_str(&bad, "m");
    EXPECT("section META: ends early", {"META", bad}, {"SCHD", sch}, {"GTRN", g}, {"GEVL", g});
    /* Too many extra sections. */
    sec many[4 + PLAN_MAX_SECTIONS + 1] = {{"META", m}, {"SCHD", sch}, {"GTRN", g}, {"GEVL", g}};
    char tags[PLAN_MAX_SECTIONS + 1][5];
    for (int i = 0; i <= PLAN_MAX_SECTIONS; i++) {
        snprintf(tags[i], 5, "X%03u", (unsigned)i % 1000u);
        many[4 + i] = (sec){tags[i], futr};
    }
    f = plan_of(many, 4 + PLAN_MAX_SECTIONS, &len);
    dpc_plan *p = read_copy("ok.plan", f, len);
    CHECK_MSG(p && p->nextra == PLAN_MAX_SECTIONS, "%s", err);
    plan_free(p);
    free(f);
    f = plan_of(many, 4 + PLAN_MAX_SECTIONS + 1, &len);
    expect_refused(f, len, "more than 32 extra sections");
    free(f);
    /* Section lengths that run past the end, and a cut section header. */
    sec ok[] = {{"META", m}, {"SCHD", sch}, {"GTRN", g}, {"GEVL", g}};
    f = plan_of(ok, 4, &len);
    size_t mlen = 12 + m.len;
    wr64(f + PLAN_HEADER_SIZE + 4, UINT64_MAX);
    fix_checksum(f, len);
    expect_refused(f, len, "section META (18446744073709551615 bytes) runs past the end");
    wr64(f + PLAN_HEADER_SIZE + 4, len - PLAN_HEADER_SIZE - 12 + 1);
    fix_checksum(f, len);
    expect_refused(f, len, "runs past the end");
    wr64(f + PLAN_HEADER_SIZE + 4, m.len);
    wr64(f + PLAN_HEADER_SIZE + mlen + 4, (uint64_t)1 << 63);
    fix_checksum(f, len);
    expect_refused(f, len, "section SCHD (9223372036854775808 bytes) runs past the end");
    free(f);
    buf pl = {0};
    for (int i = 0; i < 4; i++) b_sec(&pl, ok[i].tag, &ok[i].data);
    b_put(&pl, "KCPU\1\0\0", 7);
    f = as_file(&pl, &len);
    expect_refused(f, len, "section header at offset");
    free(f);
    free(pl.p);
    free(bad.p);
#undef EXPECT
    free(m.p), free(sch.p), free(g.p), free(futr.p);
}

TEST(hostile_schedule) {
    nspec nodes[3];
    base_nodes(nodes);
    buf m = meta("m", "m.net"), g = b_graph(nodes, 3, 3);
    struct {
        size_t off;
        int width; /* 4 or 8 */
        uint64_t value;
        const char *want;
    } cases[] = {
        {0, 4, 0, "schedule: batch must be positive, got 0"},
        {0, 4, 0x80000000u, "batch must be positive, got -2147483648"},
        {4, 4, 0xffffffffu, "epochs must be positive, got -1"},
        {8, 8, 0x7ff0000000000000u, "schedule: a value is not finite"}, /* init_magnitude inf */
        {8, 8, 0x7ff8000000000001u, "schedule: a value is not finite"}, /* NaN */
        {16, 4, 9, "schedule: unknown optimizer 9"},
        {20, 8, 0x3ff0000000000000u, "momentum must be in [0, 1), got 1"},
        {36, 4, 33, "schedule: 33 lr steps, at most 32 allowed"},
        {36, 4, 0xffffffffu, "schedule: -1 lr steps"},
        {40, 4, 3, "lr schedule must start at epoch 0"},
        {44, 8, 0xfff0000000000000u, "an lr is not finite"},
        {52, 4, 0, "lr schedule epochs must increase: 0 after 0"},
        {76, 4, 3, "schedule: unknown lr scaling 3"},
        {80, 4, 0, "reference batch must be positive"},
        {84, 4, 99, "warmup of 99 epochs does not fit 10 epochs"},
        {88, 4, 3, "schedule: unknown lr curve 3"},
        {92, 8, 0x7ff8000000000001u, "schedule: the lr curve is not finite"}, /* final NaN */
        {92, 8, 0xbff0000000000000u, "final lr must be in [0, 1e6], got -1"},
        {108, 4, 40, "schedule: dataset name is 40 bytes long, at most 31 allowed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        buf sch = real_schedule();
        CHECK(sch.len > 100);
        /* Check the offsets this table assumes. */
        CHECK(rd32(sch.p + 0) == 4 && rd32(sch.p + 4) == 10 && rd32(sch.p + 36) == 3 &&
              rd32(sch.p + 76) == IR_LR_SCALING_LINEAR && rd32(sch.p + 108) == 7);
        if (cases[i].width == 4)
            wr32(sch.p + cases[i].off, (uint32_t)cases[i].value);
        else
            wr64(sch.p + cases[i].off, cases[i].value);
        sec s[] = {{"META", m}, {"SCHD", sch}, {"GTRN", g}, {"GEVL", g}};
        size_t len;
        unsigned char *f = plan_of(s, 4, &len);
        expect_refused(f, len, cases[i].want);
        free(f);
        free(sch.p);
    }
    /* Cut short by one byte, and one byte too long. */
    buf sch = real_schedule();
    sch.len--;
    sec s1[] = {{"META", m}, {"SCHD", sch}, {"GTRN", g}, {"GEVL", g}};
    size_t len;
    unsigned char *f = plan_of(s1, 4, &len);
    expect_refused(f, len, "schedule: ends early");
    free(f);
    b_put(&sch, "\0\0", 2);
    sec s2[] = {{"META", m}, {"SCHD", sch}, {"GTRN", g}, {"GEVL", g}};
    f = plan_of(s2, 4, &len);
    expect_refused(f, len, "schedule: 1 unexpected bytes at the end");
    free(f);
    free(sch.p);
    free(m.p), free(g.p);
}

TEST(unknown_sections_are_preserved) {
    nspec nodes[3];
    base_nodes(nodes);
    buf m = meta("m", "m.net"), sch = real_schedule(), g = b_graph(nodes, 3, 3);
    buf futr = {0}, none = {0};
    b_put(&futr, "future\0bytes\xff", 13);
    /* Any order; an unknown tag before the required ones. */
    sec s[] = {{"FUTR", futr}, {"GEVL", g},   {"META", m},
               {"zz~!", none}, {"SCHD", sch}, {"GTRN", g}};
    size_t len;
    unsigned char *f = plan_of(s, 6, &len);
    dpc_plan *p = read_copy("u.plan", f, len);
    CHECK_MSG(p != NULL, "%s", err);
    if (p) {
        CHECK(p->nextra == 2);
        const plan_section *x = plan_find_section(p, "FUTR");
        CHECK(x && x->len == 13 && memcmp(x->data, futr.p, 13) == 0);
        CHECK(plan_find_section(p, "zz~!") && plan_find_section(p, "zz~!")->len == 0);
        /* Written back in canonical order, read again: still there. */
        size_t n2;
        unsigned char *b2 = plan_bytes(p, &n2);
        size_t sl = 0;
        const unsigned char *d = b2 ? find_sec(b2, n2, "FUTR", &sl) : NULL;
        CHECK(d && sl == 13 && memcmp(d, futr.p, 13) == 0);
        dpc_plan *q = b2 ? read_copy("u2.plan", b2, n2) : NULL;
        CHECK_MSG(q != NULL, "%s", err);
        if (q) check_same_plan(p, q);
        plan_free(q);
        free(b2);
    }
    plan_free(p);
    free(f);
    free(m.p), free(sch.p), free(g.p), free(futr.p);
}

/* Random damage with the checksum repaired: whatever comes out is either a
 * plan or one line of error, never a crash or a leak (run under ASan). */
TEST(random_damage_never_crashes) {
    size_t len;
    unsigned char *b = valid_bytes(&len);
    unsigned char *c = malloc(len);
    uint64_t s = 0x9e3779b97f4a7c15u;
    int refused = 0, accepted = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(c, b, len);
        int edits = 1 + (int)((s >> 60) & 3);
        for (int e = 0; e < edits; e++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            size_t at = PLAN_HEADER_SIZE + (size_t)((s >> 33) % (len - PLAN_HEADER_SIZE));
            static const unsigned char v[] = {0, 1, 0x7f, 0x80, 0xff, 0x40};
            c[at] = (s & 1) ? (unsigned char)(s >> 20) : v[(s >> 8) % 6];
        }
        size_t n = len;
        if ((s >> 12) % 8 == 0)
            n = PLAN_HEADER_SIZE + (size_t)((s >> 16) % (len - PLAN_HEADER_SIZE));
        if (n != len) wr64(c + 16, n - PLAN_HEADER_SIZE);
        fix_checksum(c, n);
        dpc_plan *p = read_copy("r.plan", c, n);
        if (p)
            accepted++;
        else {
            refused++;
            CHECK_MSG(strncmp(err, "r.plan: error: ", 15) == 0 && !strchr(err, '\n'), "%s", err);
        }
        plan_free(p);
    }
    CHECK(refused > 0);
    CHECK(accepted + refused == 20000);
    free(c);
    free(b);
}

int main(void) {
    RUN(roundtrip_every_field);
    RUN(optimizer_section);
    RUN(data_section_is_a_prefix);
    RUN(header_layout);
    RUN(overwrite_is_atomic_and_clean);
    RUN(write_errors);
    RUN(sections_api);
    RUN(info_summary);
    RUN(truncated_at_every_length);
    RUN(any_flipped_byte_fails_the_checksum);
    RUN(header_problems);
    RUN(not_plan_files);
    RUN(hand_built_baseline_is_accepted);
    RUN(hostile_nodes);
    RUN(hostile_counts_and_floats);
    RUN(hostile_sections);
    RUN(hostile_schedule);
    RUN(unknown_sections_are_preserved);
    RUN(random_damage_never_crashes);
    return harness_done();
}
