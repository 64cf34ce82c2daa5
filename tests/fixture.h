/* tests/fixture.h — what several unit tests build the same way: tiny .net
 * sources, a plan from a source, a model's graph after the passes.
 *
 * Usage:
 *     #include "tests/fixture.h"
 *     static const char *NET = FX_NET("bn_tiny", FX_CONV_BN FX_GAP_LOGITS, 4, 5);
 *     dpc_plan *p = fx_plan(NET, 4, NULL, 1, err, sizeof err);   // NULL + message
 *     ...; fx_plan_free(p);
 *     ir_graph *g = fx_model_graph("models/resnet18.net", 4, 1, &o, err, sizeof err);
 *
 * Everything here is a macro or static inline, so a test takes only what it
 * uses; nothing in it asserts (the tests keep their own CHECKs).
 */
#ifndef DPC_TESTS_FIXTURE_H
#define DPC_TESTS_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "format/plan.h"
#include "passes/passes.h"

/* A tiny .net on 3x8x8 images of 10 classes: network NAME with BODY's lines
 * (ending in `logits`), the softmax loss, and one epoch of sgd(momentum=0.9,
 * wd=0.0001) at lr 0.1 with BATCH per device and eval batch EVAL (numbers,
 * not macros: they are pasted as written). One string literal. */
#define FX_NET(name, body, batch, eval)                                             \
    "input image[3, 8, 8]\n"                                                        \
    "input label class(10)\n"                                                       \
    "network " name " {\n" body "    loss = softmax_cross_entropy(logits, label)\n" \
    "}\n"                                                                           \
    "train {\n"                                                                     \
    "    batch " #batch " per device\n"                                             \
    "    epochs 1\n"                                                                \
    "    optimizer sgd(momentum=0.9, wd=0.0001)\n"                                  \
    "    lr {0: 0.1}\n"                                                             \
    "    eval batch " #eval "\n"                                                    \
    "}\n"

/* Bodies for FX_NET: a conv with BatchNorm, a second one on a residual
 * branch, the classifier over the global average. */
#define FX_CONV_BN "    x = relu(batchnorm(conv(image, 4, k=3, s=1, p=1, bias=false)))\n"
#define FX_BN_RESIDUAL                                           \
    FX_CONV_BN                                                   \
    "    y = batchnorm(conv(x, 4, k=3, s=1, p=1, bias=false))\n" \
    "    x = relu(x + y)\n"
#define FX_GAP_LOGITS "    logits = dense(global_avgpool(x), 10)\n"

static inline void fx_plan_free(dpc_plan *p) {
    if (!p) return;
    if (p->eval != p->train) ir_free(p->eval);
    ir_free(p->train);
    free(p);
}

/* The plan of the .net source SRC (read as "t.net") at BATCH per device,
 * through the passes with options O (NULL: the defaults); with_eval 0 leaves
 * the eval program NULL. NULL when the source or the passes are refused
 * (the passes' message in err, and printed). The checksum is 0. */
static inline dpc_plan *fx_plan(const char *src, int batch, const pass_options *o, int with_eval,
                                char *err, size_t errlen) {
    fe_program *fp = fe_parse_string("t.net", src, strlen(src));
    if (!fp) return NULL;
    dpc_plan *p = calloc(1, sizeof *p);
    if (!p) {
        fe_free(fp);
        return NULL;
    }
    pass_options defaults = pass_default_options();
    if (!o) o = &defaults;
    p->schedule = *fe_train(fp);
    snprintf(p->model, sizeof p->model, "%s", fe_network_name(fp));
    p->train = fe_build_graph(fp, batch, 1);
    if (with_eval) p->eval = fe_build_graph(fp, p->schedule.eval_batch, 0);
    int rc = pass_run_train(&p->train, &p->schedule, o, err, errlen);
    if (!rc && with_eval) rc = pass_run_eval(&p->eval, o, err, errlen);
    fe_free(fp);
    if (rc) {
        fprintf(stderr, "plan: %s\n", err);
        fx_plan_free(p);
        return NULL;
    }
    return p;
}

/* A model file's train (training = 1) or eval graph at BATCH after the
 * passes with options O (NULL: the defaults); NULL, the message printed and
 * in err, when it is refused. */
static inline ir_graph *fx_model_graph(const char *path, int batch, int training,
                                       const pass_options *o, char *err, size_t errlen) {
    fe_program *fp = fe_parse_file(path);
    if (!fp) return NULL;
    pass_options defaults = pass_default_options();
    if (!o) o = &defaults;
    ir_graph *g = fe_build_graph(fp, batch, training);
    int rc = !g         ? -1
             : training ? pass_run_train(&g, fe_train(fp), o, err, errlen)
                        : pass_run_eval(&g, o, err, errlen);
    fe_free(fp);
    if (rc) {
        fprintf(stderr, "  %s: %s\n", path, err);
        ir_free(g);
        return NULL;
    }
    return g;
}

#endif
