/* Tests for runtime/schedule: the reference article's three runs, epoch by
 * epoch, plus per-iteration (Goyal) warmup. Tolerances: 0 where the lr is a
 * table's value copied; 1e-12 where the schedule computes it in f64 in
 * another order than the test (a few roundings of 2^-53 on values under
 * 16, 1e-14 at most) or through cos. */
#include <math.h>
#include <string.h>

#include "runtime/train/train.h"
#include "tests/harness.h"

/* The article's train section: lr {0: 0.1, 35: 0.05, 40: 0.02, 44: 0.01},
 * 45 epochs, linear scaling against batch 128, 5 warmup epochs. */
static ir_train article(void) {
    ir_train t;
    ir_train_defaults(&t);
    t.epochs = 45;
    t.lr_steps = 4;
    int e[] = {0, 35, 40, 44};
    double v[] = {0.1, 0.05, 0.02, 0.01};
    for (int i = 0; i < 4; i++) t.lr_epoch[i] = e[i], t.lr_value[i] = v[i];
    t.lr_scaling = IR_LR_SCALING_LINEAR;
    t.reference_batch = 128;
    t.warmup_epochs = 5;
    return t;
}

static double unscaled(int e) { return e < 35 ? 0.1 : e < 40 ? 0.05 : e < 44 ? 0.02 : 0.01; }

TEST(dict_takes_largest_key_at_or_below) {
    ir_train t = article();
    CHECK_NEAR(rt_schedule_dict_lr(&t, 0), 0.1, 0);
    CHECK_NEAR(rt_schedule_dict_lr(&t, 34), 0.1, 0);
    CHECK_NEAR(rt_schedule_dict_lr(&t, 35), 0.05, 0);
    CHECK_NEAR(rt_schedule_dict_lr(&t, 39), 0.05, 0);
    CHECK_NEAR(rt_schedule_dict_lr(&t, 40), 0.02, 0);
    CHECK_NEAR(rt_schedule_dict_lr(&t, 44), 0.01, 0);
    CHECK_NEAR(rt_schedule_dict_lr(&t, 1000), 0.01, 0);
}

/* Run 1: batch 128 on one GPU. Scaling by 128/128 and a warmup from 0.1 to
 * 0.1 change nothing. */
TEST(article_run1_batch128_one_gpu) {
    ir_train t = article();
    rt_schedule s = rt_schedule_make(&t, 128);
    CHECK_NEAR(rt_schedule_scale(&s), 1.0, 0);
    for (int e = 0; e < 45; e++) CHECK_NEAR(rt_schedule_epoch_lr(&s, e), unscaled(e), 1e-12);
}

/* Run 2: batch 2048 on 16 GPUs without scaling or warmup. */
TEST(article_run2_batch2048_unscaled) {
    ir_train t = article();
    t.lr_scaling = IR_LR_SCALING_NONE;
    t.warmup_epochs = 0;
    rt_schedule s = rt_schedule_make(&t, 16 * 128);
    for (int e = 0; e < 45; e++) CHECK_NEAR(rt_schedule_epoch_lr(&s, e), unscaled(e), 1e-12);
}

/* Run 3: batch 2048, lr x16, 5-epoch warmup: the printed values of docs/DESIGN.md §10.4. */
TEST(article_run3_scaled_with_warmup) {
    ir_train t = article();
    rt_schedule s = rt_schedule_make(&t, 16 * 128);
    CHECK_NEAR(rt_schedule_scale(&s), 16.0, 0);
    double expect[45];
    double warm[] = {0.100, 0.400, 0.700, 1.000, 1.300, 1.600};
    for (int e = 0; e < 45; e++)
        expect[e] = e <= 5 ? warm[e] : e < 35 ? 1.6 : e < 40 ? 0.8 : e < 44 ? 0.32 : 0.16;
    for (int e = 0; e < 45; e++) {
        double lr = rt_schedule_epoch_lr(&s, e);
        CHECK_MSG(fabs(lr - expect[e]) < 1e-12, "epoch %d: lr %.17g, expected %g", e, lr,
                  expect[e]);
        char got[32], want[32];
        snprintf(got, sizeof got, "%.3f", lr);
        snprintf(want, sizeof want, "%.3f", expect[e]);
        CHECK_STR(got, want);
    }
}

TEST(per_iteration_warmup_is_goyal) {
    ir_train t = article();
    rt_schedule s = rt_schedule_make(&t, 2048);
    s.per_iteration = 1;
    long spe = 24; /* 50000 / 2048, last partial batch dropped */
    /* Epoch starts agree with the per-epoch ramp. */
    for (int e = 0; e < 45; e++)
        CHECK_NEAR(rt_schedule_step_lr(&s, e, 0, spe), rt_schedule_epoch_lr(&s, e), 1e-12);
    /* A constant increment per iteration: 1.5 over 5 * 24 iterations. */
    double inc = 1.5 / (5.0 * spe);
    CHECK_NEAR(rt_schedule_step_lr(&s, 0, 1, spe), 0.1 + inc, 1e-12);
    CHECK_NEAR(rt_schedule_step_lr(&s, 2, 7, spe), 0.1 + inc * (2 * spe + 7), 1e-12);
    CHECK_NEAR(rt_schedule_step_lr(&s, 4, spe - 1, spe), 1.6 - inc, 1e-12);
    CHECK_NEAR(rt_schedule_step_lr(&s, 5, 3, spe), 1.6, 1e-12);
    CHECK_NEAR(rt_schedule_step_lr(&s, 36, 3, spe), 0.8, 1e-12);
    /* Per-epoch mode holds the lr for the whole epoch. */
    s.per_iteration = 0;
    CHECK_NEAR(rt_schedule_step_lr(&s, 2, 7, spe), 0.7, 1e-12);
}

TEST(warmup_without_scaling_is_flat) {
    ir_train t = article();
    t.lr_scaling = IR_LR_SCALING_NONE;
    rt_schedule s = rt_schedule_make(&t, 2048);
    for (int e = 0; e < 45; e++) CHECK_NEAR(rt_schedule_epoch_lr(&s, e), unscaled(e), 1e-12);
}

TEST(print_lists_every_epoch) {
    ir_train t = article();
    rt_schedule s = rt_schedule_make(&t, 2048);
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    rt_schedule_print(&s, 0, f);
    fclose(f);
    CHECK(strncmp(buf, "epoch 0 lr 0.100\nepoch 1 lr 0.400\n", 34) == 0);
    CHECK(strstr(buf, "epoch 34 lr 1.600\nepoch 35 lr 0.800\n") != NULL);
    CHECK(strstr(buf, "epoch 44 lr 0.160\n") != NULL);
    CHECK(strstr(buf, "epoch 45") == NULL);
}

/* A curve over 10 epochs of 20 steps after a 2-epoch warmup, x4 scaled:
 * base 0.1 -> 0.4; s/S runs over the 8 * 20 steps after warmup. */
static ir_train curve(ir_lr_kind kind) {
    ir_train t;
    ir_train_defaults(&t);
    t.epochs = 10;
    t.lr_kind = kind;
    t.lr_value[0] = 0.1;
    t.lr_final = 0.001;
    t.lr_power = 2;
    t.lr_scaling = IR_LR_SCALING_LINEAR;
    t.reference_batch = 128;
    t.warmup_epochs = 2;
    return t;
}

TEST(cosine_decays_from_scaled_base_to_final) {
    ir_train t = curve(IR_LR_COSINE);
    rt_schedule s = rt_schedule_make(&t, 512);
    s.steps_per_epoch = 20;
    double S = 8 * 20 - 1, pi = acos(-1.0);
    CHECK_NEAR(rt_schedule_step_lr(&s, 2, 0, 20), 0.4, 1e-12);
    CHECK_NEAR(rt_schedule_step_lr(&s, 9, 19, 20), 0.001, 1e-12); /* the last step */
    double want = 0.001 + (0.4 - 0.001) * (1 + cos(pi * 37 / S)) / 2;
    CHECK_NEAR(rt_schedule_step_lr(&s, 3, 17, 20), want, 1e-12);
    CHECK_NEAR(rt_schedule_epoch_lr(&s, 6), 0.001 + (0.4 - 0.001) * (1 + cos(pi * 80 / S)) / 2,
               1e-12);
    /* Warmup is the dict's: per epoch from the unscaled base, then per step. */
    CHECK_NEAR(rt_schedule_step_lr(&s, 1, 5, 20), 0.25, 1e-12);
    s.per_iteration = 1;
    CHECK_NEAR(rt_schedule_step_lr(&s, 1, 5, 20), 0.1 + 0.3 * 25 / 40.0, 1e-12);
    /* Without warmup the curve runs over every step. */
    t.warmup_epochs = 0;
    CHECK_NEAR(rt_schedule_step_lr(&s, 0, 0, 20), 0.4, 1e-12);
    CHECK_NEAR(rt_schedule_step_lr(&s, 5, 0, 20),
               0.001 + (0.4 - 0.001) * (1 + cos(pi * 100 / 199.0)) / 2, 1e-12);
}

TEST(poly_decays_with_its_power) {
    ir_train t = curve(IR_LR_POLY);
    t.lr_scaling = IR_LR_SCALING_NONE;
    t.warmup_epochs = 0;
    rt_schedule s = rt_schedule_make(&t, 512);
    s.steps_per_epoch = 20;
    double x = 50 / 199.0;
    CHECK_NEAR(rt_schedule_step_lr(&s, 2, 10, 20), 0.001 + 0.099 * (1 - x) * (1 - x), 1e-12);
    CHECK_NEAR(rt_schedule_step_lr(&s, 9, 19, 20), 0.001, 1e-12);
    t.lr_power = 1; /* linear */
    CHECK_NEAR(rt_schedule_step_lr(&s, 2, 10, 20), 0.001 + 0.099 * (1 - x), 1e-12);
    /* One step in all: it runs at the base. */
    t.epochs = 1;
    s.steps_per_epoch = 1;
    CHECK_NEAR(rt_schedule_step_lr(&s, 0, 0, 1), 0.1, 1e-12);
}

TEST(print_per_step_lists_every_step) {
    ir_train t = curve(IR_LR_COSINE);
    t.lr_final = 0;
    rt_schedule s = rt_schedule_make(&t, 512);
    s.steps_per_epoch = 20;
    char buf[16384] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    rt_schedule_print(&s, 1, f);
    fclose(f);
    CHECK(strncmp(buf, "epoch 0 step 0 lr 0.1\nepoch 0 step 1 lr 0.1\n", 44) == 0);
    CHECK(strstr(buf, "epoch 2 step 0 lr 0.4\n") != NULL);
    size_t n = strlen(buf);
    CHECK(n > 22 && strcmp(buf + n - 22, "\nepoch 9 step 19 lr 0\n") == 0);
}

/* sqrt scaling (LAMB's rule): batch 2048 against 128 is x4, and the
 * warmup ramps from the unscaled 0.1 to 0.4. */
TEST(sqrt_scaling_is_the_square_root) {
    ir_train t = article();
    t.lr_scaling = IR_LR_SCALING_SQRT;
    rt_schedule s = rt_schedule_make(&t, 2048);
    CHECK_NEAR(rt_schedule_scale(&s), 4.0, 1e-15);
    CHECK_NEAR(rt_schedule_epoch_lr(&s, 0), 0.1, 1e-12);
    CHECK_NEAR(rt_schedule_epoch_lr(&s, 5), 0.4, 1e-12);
    CHECK_NEAR(rt_schedule_epoch_lr(&s, 36), 0.2, 1e-12);
    CHECK(ir_lr_scaling_parse("sqrt") == IR_LR_SCALING_SQRT && ir_lr_scaling_parse("cubic") < 0);
}

/* nanoGPT's get_lr (train.py), as written there, in double:
 *     if it < warmup_iters: return learning_rate * (it + 1) / (warmup_iters + 1)
 *     if it > lr_decay_iters: return min_lr
 *     decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
 *     coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
 *     return min_lr + coeff * (learning_rate - min_lr) */
static double nanogpt_lr(long it, long warmup, long decay, double lr, double min_lr) {
    if (it < warmup) return lr * (double)(it + 1) / (double)(warmup + 1);
    if (it > decay) return min_lr;
    double ratio = (double)(it - warmup) / (double)(decay - warmup);
    double coeff = 0.5 * (1.0 + cos(acos(-1.0) * ratio));
    return min_lr + coeff * (lr - min_lr);
}

/* shakespeare_char's recipe: `warmup 100 steps`, `lr cosine(base=1e-3,
 * final=1e-4, steps=5000)`, run past its end: every step's lr is
 * nanoGPT's to the bit (0 tolerance: the same double operations), across
 * epoch boundaries (37 steps per epoch, not a divisor of either). */
TEST(warmup_steps_and_cosine_steps_are_nanogpt) {
    ir_train t;
    ir_train_defaults(&t);
    t.epochs = 150, t.warmup_steps = 100, t.lr_decay_steps = 5000;
    t.lr_kind = IR_LR_COSINE, t.lr_value[0] = 1e-3, t.lr_final = 1e-4;
    char err[256];
    CHECK_MSG(ir_train_check(&t, err, sizeof err) == 0, "%s", err);
    rt_schedule s = rt_schedule_make(&t, 64);
    s.steps_per_epoch = 37;
    int same = 0;
    for (long it = 0; it < 150 * 37; it++) {
        double want = nanogpt_lr(it, 100, 5000, 1e-3, 1e-4);
        double got = rt_schedule_step_lr(&s, (int)(it / 37), it % 37, 37);
        same += got == want;
        if (got != want) CHECK_MSG(0, "step %ld: %.17g, nanoGPT %.17g", it, got, want);
    }
    CHECK(same == 150 * 37);
    CHECK(rt_schedule_step_lr(&s, 0, 0, 37) == 1e-3 / 101);
    CHECK(rt_schedule_epoch_lr(&s, 2) == nanogpt_lr(74, 100, 5000, 1e-3, 1e-4));
    /* warmup in steps to a dict's lr, then the dict */
    ir_train d;
    ir_train_defaults(&d);
    d.epochs = 4, d.warmup_steps = 10, d.lr_value[0] = 0.5;
    rt_schedule ds = rt_schedule_make(&d, 64);
    CHECK(rt_schedule_step_lr(&ds, 0, 4, 8) == 0.5 * 5 / 11);
    CHECK(rt_schedule_step_lr(&ds, 1, 2, 8) == 0.5);
    /* the rules: one warmup, steps= past it, steps= only on a curve */
    t.warmup_epochs = 1;
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    CHECK_STR(err, "warmup of 100 steps and of 1 epochs: give one");
    t.warmup_epochs = 0, t.lr_decay_steps = 100;
    CHECK(ir_train_check(&t, err, sizeof err) != 0);
    CHECK_STR(err, "the curve's steps=100 must be past its warmup of 100 steps");
    d.lr_decay_steps = 50;
    CHECK(ir_train_check(&d, err, sizeof err) != 0);
    CHECK_STR(err, "steps=50 is a cosine or poly curve's, not the dict's");
}

int main(void) {
    RUN(dict_takes_largest_key_at_or_below);
    RUN(article_run1_batch128_one_gpu);
    RUN(article_run2_batch2048_unscaled);
    RUN(article_run3_scaled_with_warmup);
    RUN(per_iteration_warmup_is_goyal);
    RUN(warmup_without_scaling_is_flat);
    RUN(print_lists_every_epoch);
    RUN(cosine_decays_from_scaled_base_to_final);
    RUN(poly_decays_with_its_power);
    RUN(print_per_step_lists_every_step);
    RUN(sqrt_scaling_is_the_square_root);
    RUN(warmup_steps_and_cosine_steps_are_nanogpt);
    return harness_done();
}
