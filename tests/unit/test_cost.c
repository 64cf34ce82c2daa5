/* tests/unit/test_cost.c — the per-kernel cost model (codegen/cost.h): the
 * device table, each call's threads, serial loop, bytes and flops on a
 * small graph known by hand, the roofline formula, ResNet-18's BatchNorm
 * statistics kernel through dpc_compile, and refusal of unknown devices. */
#include <stdlib.h>

#include "codegen/cost.h"
#include "driver/compile.h"
#include "tests/graphs.h"
#include "tests/harness.h"

static char err[4096];

TEST(device_table) {
    const cg_device *d = cg_device_find("h200");
    CHECK(d != NULL);
    if (!d) return;
    CHECK(d->sms == 132 && d->threads_per_sm == 2048);
    /* the table's literals, copied: exact */
    CHECK_NEAR(d->hbm_bytes_per_s, 4.8e12, 0);
    CHECK_NEAR(d->fp32_flops, 67e12, 0);
    CHECK_NEAR(d->tf32_flops, 495e12, 0);
    CHECK_NEAR(d->bf16_flops, 989e12, 0);
    CHECK_NEAR(d->launch_us, 2.0, 0);
    CHECK(cg_device_find("h100x") == NULL && cg_device_find(NULL) == NULL);
    const cg_device *h100 = cg_device_find("h100"), *a100 = cg_device_find("a100");
    CHECK(h100 && h100->sms == 132 && a100 && a100->sms == 108);
    char names[64];
    CHECK_STR(cg_device_names(names, sizeof names), "h200, h100, a100");
}

/* The kernel time of the formula, written out again here. */
static double formula_us(const cg_device *d, double threads, double blocks, double serial,
                         double bytes, double flops) {
    double t = bytes / d->hbm_bytes_per_s * 1e6, f = flops / d->fp32_flops * 1e6;
    double chain = threads < d->sms * d->threads_per_sm ? serial * d->iter_ns / 1e3 : 0;
    double m = (t > f ? t : f) * (blocks < d->sms ? d->sms / blocks : 1);
    return (m > chain ? m : chain) + d->launch_us;
}

/* x [4,3,5,5] -> relu (elementwise), bn_mean of x (one channel
 * reduction), and a dense layer on a [4,5] input. */
TEST(small_graph_by_hand) {
    const cg_device *d = cg_device_find("h200");
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "image", ir_shape4(4, 3, 5, 5), 0);
    int r = N(RELU, x), NULL, NULL);
    int m = N(BN_MEAN, x), NULL, NULL);
    int f = ir_add_input(g, "feat", ir_shape2(4, 5), 0);
    int w = ir_add_param(g, "fc.weight", ir_shape2(3, 5), IR_INIT_XAVIER);
    int y = N(DENSE, f, w), NULL, NULL);
    CHECK(r >= 0 && m >= 0 && y >= 0);
    cg_call_cost *c = NULL;
    cg_cost_totals t;
    int n = 0;
    CHECK_MSG(!cg_cost_estimate(g, d, &c, &n, &t, err, sizeof err), "%s", err);
    CHECK(n == 3);
    if (n != 3) goto done;
    /* relu: one thread per element, no loop, reads and writes 300 floats */
    CHECK(c[0].kind == CG_CALL_KERNEL && c[0].threads == 300 && c[0].serial == 1);
    CHECK(c[0].bytes == 2 * 300 * 4 && c[0].flops == 300);
    /* bn_mean: a block per channel, of 128 threads (three blocks are far
     * from filling the GPU, so the block grows to the first power of two
     * past the channel's N*H*W = 100 elements), one element per thread;
     * reads x (300 floats), writes 3 */
    CHECK(c[1].kind == CG_CALL_KERNEL && c[1].threads == 3 * 128 && c[1].serial == 1);
    CHECK(c[1].bytes == (300 + 3) * 4 && c[1].flops == 300);
    /* on 2 blocks of 256 threads and 3 of 128: each its SMs' share of HBM */
    /* microseconds, the formula again in another order: f64 roundings of
     * values under 1e3 (2^-53 * 1e3 = 1e-13 each); 1e-9 leaves room */
    const double blocks[2] = {2, 3};
    for (int i = 0; i < 2; i++)
        CHECK_NEAR(c[i].us,
                   formula_us(d, c[i].threads, blocks[i], c[i].serial, c[i].bytes, c[i].flops),
                   1e-9);
    /* the chain term is what makes bn_mean the slower one: 1 x 20 ns */
    CHECK_NEAR(c[1].us, 1 * d->iter_ns / 1e3 + d->launch_us, 1e-9);
    /* dense: y[4,3] = x[4,5] w^T: 2*4*3*5 flops, A+B+C = 15+20+12 floats,
     * FP32 at the small-GEMM fraction 0.1 */
    CHECK(c[2].kind == CG_CALL_GEMM && c[2].flops == 120 && c[2].bytes == 47 * 4);
    CHECK_NEAR(c[2].peak, d->fp32_flops, 1);
    double gf = 120 / (d->fp32_flops * 0.1) * 1e6, gb = 188 / d->hbm_bytes_per_s * 1e6;
    CHECK_NEAR(c[2].us, (gf > gb ? gf : gb) + d->launch_us, 1e-9);
    CHECK(t.kernels == 2 && t.gemms == 1 && t.bytes == 2400 + 1212 + 188 && t.flops == 720);
    CHECK_NEAR(t.step_us, c[0].us + c[1].us + c[2].us, 1e-9);
    double bb = t.bytes / d->hbm_bytes_per_s * 1e6, bf = 720 / d->fp32_flops * 1e6;
    CHECK_NEAR(t.bound_us, (bb > bf ? bb : bf) + 3 * d->launch_us, 1e-9);
    CHECK(t.bound_us <= t.step_us);
done:
    free(c);
    ir_free(g);
}

TEST(gemm_fraction_by_size) {
    cg_gemm a = {.m = 1024, .n = 1024, .k = 1024, .batch = 1};
    cg_gemm b = {.m = 256, .n = 256, .k = 256, .batch = 1};
    cg_gemm c = {.m = 16, .n = 16, .k = 16, .batch = 1};
    CHECK_NEAR(cg_gemm_fraction(&a), 0.7, 0);
    CHECK_NEAR(cg_gemm_fraction(&b), 0.4, 0);
    CHECK_NEAR(cg_gemm_fraction(&c), 0.1, 0);
}

/* The report of a model through dpc_compile, into a string. */
static int report_of(const char *model, char **text, size_t *len) {
    FILE *f = open_memstream(text, len);
    if (!f) return -1;
    dpc_options o = {.model = model, .cost = 1, .report = f};
    int rc = dpc_compile(&o, err, sizeof err);
    fclose(f);
    return rc;
}

/* The first BatchNorm (64 channels of 128 x 16 x 16 values after the
 * stride-2 7x7 stem): each channel split over 9 blocks of 1024 threads
 * (576 blocks: 4 per SM of an H200), 4 elements per thread, one kernel per
 * pass and a merge. The bar for the train step: every per-channel
 * reduction starts >= 4 x 132 blocks or >= 65,536 threads (the merges add
 * up 9 partials a channel) and no kernel loops more than 4,096 times in
 * one thread. */
TEST(resnet18_bn_statistics_kernel) {
    char *text = NULL;
    size_t len = 0;
    int rc = report_of("models/resnet18.net", &text, &len);
    CHECK_MSG(rc == 0, "%s", err);
    const char *row =
        text ? strstr(text, "k2_bn_mean_bn_var_bn_apply_ema_relu_assign_pass1 ") : NULL;
    CHECK(row != NULL);
    if (row) {
        long long threads = 0, serial = 0;
        CHECK(sscanf(row, "%*s %lld %lld", &threads, &serial) == 2);
        CHECK(threads == 576 * 1024);
        CHECK(serial == 4);
    }
    const char *train = text ? strstr(text, "train program on h200") : NULL;
    const char *eval = text ? strstr(text, "eval program on h200") : NULL;
    CHECK(train && eval && strstr(text, "train total: modelled step "));
    int batch = 0; /* the header names the step's batch, which schedule totals multiply by */
    CHECK(train && sscanf(train, "train program on h200, batch %d ", &batch) == 1 && batch > 0);
    int rows = 0;
    for (const char *l = train; l && l < eval; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        char name[128];
        long long threads, serial;
        if (sscanf(l, " %127s %lld %lld", name, &threads, &serial) != 3 || name[0] != 'k') continue;
        rows++;
        CHECK_MSG(serial <= 4096, "%s loops %lld times", name, serial);
        if ((strstr(name, "bn_mean") || strstr(name, "bn_grad_gamma")) && !strstr(name, "_merge"))
            CHECK_MSG(threads >= 65536, "%s starts %lld threads", name, threads);
    }
    CHECK(rows > 100);
    free(text);
}

TEST(unknown_device_is_refused) {
    dpc_options o = {.model = "models/mlp.net", .cost = 1, .cost_device = "tpu9"};
    CHECK(dpc_options_check(&o, err, sizeof err) == -1);
    CHECK(strstr(err, "tpu9") && strstr(err, "known: h200"));
    CHECK(dpc_compile(&o, err, sizeof err) == -1);
    o.cost_device = "h200";
    CHECK_MSG(dpc_options_check(&o, err, sizeof err) == 0, "%s", err);
}

int main(void) {
    RUN(device_table);
    RUN(small_graph_by_hand);
    RUN(gemm_fraction_by_size);
    RUN(resnet18_bn_statistics_kernel);
    RUN(unknown_device_is_refused);
    return harness_done();
}
