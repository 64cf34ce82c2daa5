/* Tests for driver/compile.c: dpc_compile from source text writes a plan
 * that plan_read loads (both programs, kernels and memory plans); the
 * reports go to o.report; bad input and bad options come back as -1 with
 * one message naming the file and line, nothing written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/compile.h"
#include "format/plan.h"
#include "passes/passes.h"
#include "tests/harness.h"

static char err[4096];

/* conv + batchnorm + pooling + dense: every pass has work to do. */
static const char *NET = "input image[3, 8, 8]\n"
                         "input label class(10)\n"
                         "network cnn_tiny {\n"
                         "    x = relu(batchnorm(conv(image, 4, k=3, p=1, bias=false)))\n"
                         "    logits = dense(global_avgpool(maxpool(x, k=2)), 10)\n"
                         "    loss = softmax_cross_entropy(logits, label)\n"
                         "}\n"
                         "train {\n"
                         "    batch 3 per device\n"
                         "    epochs 1\n"
                         "    optimizer sgd(momentum=0.9, wd=0.0001)\n"
                         "    lr {0: 0.1}\n"
                         "    eval batch 5\n"
                         "}\n";

/* A directory of its own under /tmp for a test's outputs. */
static char dir[64];
static const char *tmp_file(char *buf, size_t n, const char *name) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/dpc_test_compile_XXXXXX");
        if (!mkdtemp(dir)) dir[0] = 0;
    }
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static dpc_options from_text(const char *src) {
    dpc_options o = {0};
    o.model = "tiny.net";
    o.source = src;
    o.source_len = strlen(src);
    return o;
}

TEST(compiles_source_text_to_a_plan_that_loads) {
    char out[128];
    dpc_options o = from_text(NET);
    o.out = tmp_file(out, sizeof out, "tiny.plan");
    o.batch = 4;
    CHECK_MSG(dpc_compile(&o, err, sizeof err) == 0, "%s", err);
    dpc_plan *p = plan_read(out, err, sizeof err);
    CHECK_MSG(p != NULL, "%s", err);
    if (p) {
        CHECK_STR(p->model, "cnn_tiny");
        CHECK_STR(p->source, "tiny.net");
        CHECK(p->schedule.batch == 4 && p->schedule.eval_batch == 5);
        CHECK(p->train && p->eval && ir_loss_node(p->train) >= 0);
        CHECK(p->train->n > p->eval->n); /* gradients and the update */
        CHECK(plan_find_section(p, FMT_MEMPLAN_SECTION) != NULL);
        CHECK(p->nextra == 3); /* kernels for both dialects, memory plans */
        plan_free(p);
    }
    unlink(out);
}

TEST(target_and_no_memplan_shape_the_sections) {
    char out[128];
    dpc_options o = from_text(NET);
    o.out = tmp_file(out, sizeof out, "cpu.plan");
    o.target = "cpu";
    o.no_memplan = 1;
    CHECK_MSG(dpc_compile(&o, err, sizeof err) == 0, "%s", err);
    dpc_plan *p = plan_read(out, err, sizeof err);
    CHECK_MSG(p != NULL, "%s", err);
    if (p) {
        CHECK(p->nextra == 1 && plan_find_section(p, FMT_MEMPLAN_SECTION) == NULL);
        plan_free(p);
    }
    unlink(out);
}

TEST(reports_go_to_the_report_stream) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    dpc_options o = from_text(NET);
    o.dump_ir = 1;
    o.dump_after = "autodiff";
    o.report = f;
    CHECK_MSG(dpc_compile(&o, err, sizeof err) == 0, "%s", err);
    fclose(f);
    CHECK(text && strstr(text, ".grad") && !strstr(text, "sgd_momentum"));
    free(text);
}

TEST(bad_source_names_the_file_and_line) {
    char out[128];
    const char *bad = "input image[3, 8, 8]\n"
                      "input label class(10)\n"
                      "network n {\n"
                      "    x = frobnicate(image)\n"
                      "    loss = softmax_cross_entropy(x, label)\n"
                      "}\n";
    dpc_options o = from_text(bad);
    o.out = tmp_file(out, sizeof out, "bad.plan");
    err[0] = 0;
    CHECK(dpc_compile(&o, err, sizeof err) == -1);
    CHECK_MSG(!strncmp(err, "tiny.net:4:", 11) && strstr(err, "error: ") &&
                  strstr(err, "frobnicate"),
              "%s", err);
    CHECK(access(out, F_OK) != 0); /* nothing written */

    o = from_text("");
    CHECK(dpc_compile(&o, err, sizeof err) == -1);
    CHECK_STR(err, "tiny.net:1:1: error: empty file");
}

TEST(missing_file_and_bad_options_are_refused) {
    dpc_options o = {0};
    o.model = "/nonexistent/dir/m.net";
    o.out = "/tmp/never.plan";
    CHECK(dpc_compile(&o, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "/nonexistent/dir/m.net: error: cannot open") == err, "%s", err);

    o = from_text(NET);
    o.dump_after = "fuse2";
    CHECK(dpc_compile(&o, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "unknown pass for --dump-ir") &&
                  strstr(err, "elaborate lower autodiff") && strstr(err, "fuse2"),
              "%s", err);
    o = from_text(NET);
    o.precision = "fp16";
    CHECK(dpc_compile(&o, err, sizeof err) == -1 && strstr(err, "fp16"));
    o = from_text(NET);
    o.max_memory = "1K";
    o.stats = 1;
    CHECK(dpc_compile(&o, err, sizeof err) == -1);
    CHECK_MSG(strstr(err, "tiny.net: error: the plan needs") == err, "%s", err);

    char out[128];
    o = from_text(NET);
    o.out = tmp_file(out, sizeof out, "same");
    o.dot = out;
    CHECK(dpc_compile(&o, err, sizeof err) == -1 && strstr(err, "name the same file"));
    o.model = out; /* -o is the model */
    o.dot = NULL;
    CHECK(dpc_compile(&o, err, sizeof err) == -1 && strstr(err, "is the model being compiled"));
}

int main(void) {
    RUN(compiles_source_text_to_a_plan_that_loads);
    RUN(target_and_no_memplan_shape_the_sections);
    RUN(reports_go_to_the_report_stream);
    RUN(bad_source_names_the_file_and_line);
    RUN(missing_file_and_bad_options_are_refused);
    rmdir(dir);
    return harness_done();
}
