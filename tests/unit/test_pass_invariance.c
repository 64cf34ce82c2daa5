/* tests/unit/test_pass_invariance.c — every registered pass leaves results
 * unchanged (docs/DESIGN.md §5), bit for bit: each model's two training
 * steps and eval batch with the pass in the default pipeline and without it
 * (an optional pass: added to it), at fp32 and at bf16, through the shared
 * harness tests/passcheck.h. A pass added to the registry is tested here
 * without a line of this file changing.
 *
 * Not on/off: passes the others require (lower, autodiff, optimizer: a
 * pipeline without them is refused, which this test checks), and at bf16
 * the two passes that decide where a value is rounded to bf16: precision
 * (its whole point is other numbers) and fuse (a group keeps its members
 * in f32 registers where the ungrouped graph stores each as bf16: fewer
 * roundings, so other bits; tests/bf16_test.sh holds bf16 training to fp32
 * within its tolerance, tests/sim_models_test.sh every kernel fused and
 * unfused). Under the sanitizers the small models only; ResNet-18 in
 * `make test-full` (resnet18_cifar holds the same kernel classes).
 */
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/passcheck.h"

/* model, batch, the lowest suite tier that runs it (harness.h) */
static const char *const models[][3] = {
    {"models/mlp.net", "8", "check"},
    {"models/cnn_small.net", "4", "check"},
    {"tests/nets/se_small.net", "4", "check"},
    {"tests/nets/attn_small.net", "4", "check"},
    {"tests/nets/arith_small.net", "4", "check"},
    {"tests/nets/shape_small.net", "4", "check"},
    {"tests/nets/attn_fused.net", "4", "check"},
    {"tests/nets/gpt_tiny.net", "4", "check"},
    {"tests/nets/vit_tiny.net", "4", "check"},
#ifndef __SANITIZE_ADDRESS__
    {"models/resnet18_cifar.net", "2", "test"},
    {"models/resnet18.net", "2", "full"},
#endif
};

/* The default pipeline's passes (with pass `with` added when optional,
 * `without` dropped), precision at prec, as --passes text. */
static void spec_of(char *buf, size_t n, const char *with, const char *without, const char *prec) {
    size_t len = 0;
    buf[0] = 0;
    for (const pass_info *p = pass_registry; p->name; p++) {
        if (without && !strcmp(p->name, without)) continue;
        if (p->optional && !(with && !strcmp(p->name, with))) continue;
        int w = !strcmp(p->name, "precision")
                    ? snprintf(buf + len, n - len, "%s%s(%s)", len ? "," : "", p->name, prec)
                    : snprintf(buf + len, n - len, "%s%s", len ? "," : "", p->name);
        if (w > 0) len += (size_t)w;
    }
}

static int refused(const char *spec) {
    pass_options o = pass_default_options();
    pass_pipeline base, pl;
    pass_pipeline_default(&o, &base);
    return pass_pipeline_parse(spec, &base, &pl, pc_err, sizeof pc_err) != 0;
}

/* Per model and precision, the default pipeline runs once: it is every
 * pass's baseline (the "on" side of a default pass, the "off" side of an
 * optional one), and each pass adds one run. */
TEST(every_pass_leaves_results_unchanged) {
    int compared = 0, required = 0;
    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        const char *model = models[m][0];
        int batch = atoi(models[m][1]);
        if (!harness_tier_at_least(models[m][2])) continue;
        fe_program *fp = fe_parse_file(model);
        CHECK_MSG(fp != NULL, "%s", model);
        if (!fp) continue;
        for (int b = 0; b < 2; b++) {
            const char *prec = b ? "bf16" : "fp32";
            char base[512];
            spec_of(base, sizeof base, NULL, NULL, prec);
            pc_snapshot ref = {0};
            int have_ref = pc_snapshot_program(fp, batch, base, &ref) == 0;
            CHECK_MSG(have_ref, "%s, %s: the default pipeline", model, prec);
            for (const pass_info *p = pass_registry; have_ref && p->name; p++) {
                if (b && (!strcmp(p->name, "precision") || !strcmp(p->name, "fuse"))) continue;
                char other[512];
                if (p->optional) {
                    spec_of(other, sizeof other, p->name, NULL, prec);
                } else {
                    spec_of(other, sizeof other, NULL, p->name, prec);
                    if (refused(other)) { /* others need it: no off state */
                        required += !b && !m;
                        continue;
                    }
                }
                pc_snapshot got = {0};
                const char *on = p->optional ? other : base, *off = p->optional ? base : other;
                int same = pc_snapshot_program(fp, batch, other, &got) == 0 &&
                           (p->optional ? pc_same_snapshot(&got, &ref, model, batch, on, off)
                                        : pc_same_snapshot(&ref, &got, model, batch, on, off));
                CHECK_MSG(same, "%s: %s, %s", p->name, model, prec);
                pc_snap_free(&got);
                compared++;
            }
            pc_snap_free(&ref);
        }
        fe_free(fp);
    }
    /* lower, autodiff and optimizer are the required ones */
    CHECK(required == 3);
    CHECK(compared > 0);
}

int main(void) {
    pc_backend = rt_backend_cpu();
    RUN(every_pass_leaves_results_unchanged);
    rt_backend_free(pc_backend);
    return harness_done();
}
