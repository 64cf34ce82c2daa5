/* Tests for the data sharding of runtime/data/cifar.c (rt_batcher_shard), which
 * `mpirun -np P dprun --gpus N` relies on: the P processes' slices of
 * every global batch, side by side, are exactly the global batch one
 * process would prepare (same samples, same augmentation draws), through
 * the input pipeline too; bad slices are refused. */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/data.h"
#include "tests/harness.h"

static char err[512];

static ir_train schedule(void) {
    ir_train t;
    ir_train_defaults(&t);
    t.pad = 4, t.random_crop = 32, t.random_mirror = 1;
    return t;
}

TEST(slices_side_by_side_are_the_global_batch) {
    rt_dataset *ds = rt_data_synthetic(500, 3, 32, 32, 1, 7);
    ir_train t = schedule();
    const int P = 3, L = 8, G = P * L; /* 3 processes x 8 samples */
    rt_batcher whole, part[3];
    CHECK(rt_batcher_init(&whole, ds, &t, G, RT_BATCH_TRAIN, 11, 3, 32, 32, err, sizeof err) == 0);
    for (int p = 0; p < P; p++) {
        CHECK(rt_batcher_init(&part[p], ds, &t, L, RT_BATCH_TRAIN, 11, 3, 32, 32, err,
                              sizeof err) == 0);
        CHECK(rt_batcher_shard(&part[p], G, p * L, err, sizeof err) == 0);
        CHECK(part[p].batches == whole.batches); /* 500 / 24 = 20 */
    }
    CHECK(whole.batches == 20);
    size_t img = 3 * 32 * 32;
    float *a = malloc(sizeof(float) * img * G), *b = malloc(sizeof(float) * img * G);
    int32_t la[24], lb[24];
    int bad = 0;
    /* through the pipeline, two epochs (reshuffled), as dprun reads them */
    rt_pipeline_config cfg = rt_pipeline_defaults();
    cfg.count = 2 * whole.batches;
    rt_pipeline *pw = rt_pipeline_new(&whole, &cfg, err, sizeof err), *pp[3];
    for (int p = 0; p < P; p++) pp[p] = rt_pipeline_new(&part[p], &cfg, err, sizeof err);
    for (int64_t k = 0; k < cfg.count; k++) {
        const rt_batch *w = rt_pipeline_next(pw);
        memcpy(a, w->images, sizeof(float) * img * G);
        memcpy(la, w->labels, sizeof la);
        for (int p = 0; p < P; p++) {
            const rt_batch *s = rt_pipeline_next(pp[p]);
            memcpy(b + (size_t)p * L * img, s->images, sizeof(float) * img * L);
            memcpy(lb + p * L, s->labels, sizeof(int32_t) * L);
            rt_pipeline_release(pp[p]);
        }
        rt_pipeline_release(pw);
        bad += memcmp(a, b, sizeof(float) * img * G) != 0 || memcmp(la, lb, sizeof la) != 0;
    }
    CHECK(bad == 0);
    CHECK(rt_pipeline_next(pw) == NULL);
    rt_pipeline_free(pw);
    for (int p = 0; p < P; p++) rt_pipeline_free(pp[p]);
    free(a), free(b);
    rt_dataset_free(ds);
}

TEST(bad_slices_are_refused) {
    rt_dataset *ds = rt_data_synthetic(50, 3, 32, 32, 1, 7);
    ir_train t = schedule();
    rt_batcher b;
    CHECK(rt_batcher_init(&b, ds, &t, 8, RT_BATCH_TRAIN, 1, 3, 32, 32, err, sizeof err) == 0);
    CHECK(b.stride == 8 && b.offset == 0);                     /* unsharded */
    CHECK(rt_batcher_shard(&b, 16, 9, err, sizeof err) == -1); /* past the global batch */
    CHECK(rt_batcher_shard(&b, 4, 0, err, sizeof err) == -1);  /* global smaller than the slice */
    CHECK(rt_batcher_shard(&b, 64, 8, err, sizeof err) ==
          -1); /* 50 images, no global batch of 64 */
    CHECK(strstr(err, "global batch of 64") != NULL);
    CHECK(rt_batcher_shard(&b, 48, 40, err, sizeof err) == 0 && b.batches == 1);
    rt_dataset_free(ds);
}

int main(void) {
    RUN(slices_side_by_side_are_the_global_batch);
    RUN(bad_slices_are_refused);
    return harness_done();
}
