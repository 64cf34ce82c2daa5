/* Tests for runtime/pipeline: batches from worker threads equal batches
 * prepared directly, whatever the worker count, ring depth and epoch
 * boundaries; early shutdown; the allocator hook; bad configurations.
 *
 * Depends only on runtime/{pipeline,data,rng}.c, so tests/tsan_test.sh can
 * build it alone under ThreadSanitizer. */
#include <stdlib.h>

#include "runtime/data/data.h"
#include "tests/harness.h"

static char err[1024];

/* The article's data section, without ir_train_defaults (keeps the
 * dependencies down to data.c). */
static ir_train article_data(void) {
    ir_train t;
    memset(&t, 0, sizeof t);
    t.pad = 4, t.random_crop = 32, t.random_mirror = 1, t.normalize = 1;
    double mean[3] = {0.4914, 0.4822, 0.4465}, std[3] = {0.2023, 0.1994, 0.2010};
    for (int c = 0; c < 3; c++) t.mean[c] = mean[c], t.std[c] = std[c];
    return t;
}

/* Every batch of the pipeline, started at batch first_index of
 * first_epoch, equals rt_batcher_fill with the epoch's order; returns the
 * number of batches compared. */
static int64_t compare_from(const rt_batcher *b, int workers, int depth, int first_epoch,
                            int64_t first_index, int64_t count) {
    rt_pipeline_config cfg = rt_pipeline_defaults();
    cfg.workers = workers, cfg.depth = depth, cfg.first_epoch = first_epoch, cfg.count = count;
    cfg.first_index = first_index;
    rt_pipeline *p = rt_pipeline_new(b, &cfg, err, sizeof err);
    CHECK_MSG(p != NULL, "%s", err);
    if (!p) return -1;
    size_t img = (size_t)b->oc * (size_t)b->oh * (size_t)b->ow * (size_t)b->batch;
    float *want = malloc(img * sizeof *want);
    int32_t *wlab = malloc((size_t)b->batch * sizeof *wlab);
    int64_t *order = malloc((size_t)b->ds->count * sizeof *order);
    int64_t n = 0;
    int order_epoch = -1;
    const rt_batch *bt;
    while ((bt = rt_pipeline_next(p))) {
        int epoch = first_epoch + (int)((first_index + n) / b->batches);
        int64_t index = (first_index + n) % b->batches;
        CHECK(bt->seq == n && bt->epoch == epoch && bt->index == index);
        if (epoch != order_epoch) rt_batcher_order(b, epoch, order), order_epoch = epoch;
        int real = rt_batcher_fill(b, order, epoch, index * b->batch, b->batch, want, wlab);
        CHECK(bt->real == real);
        CHECK_MSG(memcmp(bt->images, want, img * sizeof *want) == 0 &&
                      memcmp(bt->labels, wlab, (size_t)b->batch * sizeof *wlab) == 0,
                  "workers %d depth %d: batch %lld differs", workers, depth, (long long)n);
        /* Alternate explicit and implicit release; after a release the
         * descriptor stays the consumer's. */
        if (n % 2) {
            rt_pipeline_release(p);
            CHECK(bt->seq == n && bt->epoch == epoch && bt->index == index && bt->real == real);
        }
        n++;
    }
    CHECK(rt_pipeline_next(p) == NULL); /* stays at the end */
    rt_pipeline_stats st;
    rt_pipeline_get_stats(p, &st);
    CHECK(st.delivered == count && st.stalls <= count && st.wait_s >= 0);
    rt_pipeline_free(p);
    free(want), free(wlab), free(order);
    return n;
}

static int64_t compare(const rt_batcher *b, int workers, int depth, int first_epoch,
                       int64_t count) {
    return compare_from(b, workers, depth, first_epoch, 0, count);
}

TEST(training_batches_match_direct_preparation) {
    ir_train t = article_data();
    /* 6 batches of 8 per epoch (50 records, last 2 dropped): small, so the
     * deeper rings span several epochs and reuse order buffers. */
    rt_dataset *ds = rt_data_synthetic(50, 3, 32, 32, 1, 11);
    rt_batcher b;
    CHECK(rt_batcher_init(&b, ds, &t, 8, RT_BATCH_TRAIN, 99, 3, 32, 32, err, sizeof err) == 0);
    CHECK(b.batches == 6);
    int workers[] = {0, 1, 2, 4, 8}, depths[] = {2, 3, 7, 0, 16};
    for (int w = 0; w < 5; w++)
        for (int d = 0; d < 5; d++) CHECK(compare(&b, workers[w], depths[d], 0, 6 * 4 + 3) == 27);
    /* Starting mid-schedule (a resumed run) and a single batch. */
    CHECK(compare(&b, 2, 4, 5, 13) == 13);
    /* ... and mid-epoch, across epoch ends, with any worker count. */
    for (int w = 0; w < 5; w++) CHECK(compare_from(&b, workers[w], depths[w], 2, 4, 9) == 9);
    CHECK(compare_from(&b, 2, 3, 0, 5, 1) == 1);
    CHECK(compare(&b, 3, 2, 0, 1) == 1);
    CHECK(compare(&b, 3, 2, 0, 0) == 0);
    rt_dataset_free(ds);
}

TEST(eval_batches_keep_order_and_pad) {
    ir_train t = article_data();
    rt_dataset *ds = rt_data_synthetic(45, 3, 32, 32, 0, 11);
    rt_batcher ev, te;
    CHECK(rt_batcher_init(&ev, ds, &t, 10, RT_BATCH_EVAL, 1, 3, 32, 32, err, sizeof err) == 0);
    CHECK(rt_batcher_init(&te, ds, &t, 10, RT_BATCH_TRAIN_EVAL, 1, 3, 32, 32, err, sizeof err) ==
          0);
    CHECK(compare(&ev, 2, 3, 0, ev.batches) == 5);
    CHECK(compare(&te, 3, 0, 0, te.batches) == 5);
    rt_pipeline_config cfg = rt_pipeline_defaults();
    cfg.count = ev.batches;
    rt_pipeline *p = rt_pipeline_new(&ev, &cfg, err, sizeof err);
    const rt_batch *bt;
    int64_t seen = 0;
    while ((bt = rt_pipeline_next(p))) {
        CHECK(bt->real == (bt->index == 4 ? 5 : 10));
        for (int i = 0; i < bt->real; i++) CHECK(bt->labels[i] == ds->labels[bt->index * 10 + i]);
        seen += bt->real;
    }
    CHECK(seen == 45);
    rt_pipeline_free(p);
    rt_dataset_free(ds);
}

/* Freeing while workers are busy, while they wait on a full ring, or
 * before anything was consumed: no hang, no leak (ASan/TSan runs). */
TEST(early_shutdown) {
    ir_train t = article_data();
    rt_dataset *ds = rt_data_synthetic(300, 3, 32, 32, 1, 2);
    rt_batcher b;
    CHECK(rt_batcher_init(&b, ds, &t, 16, RT_BATCH_TRAIN, 5, 3, 32, 32, err, sizeof err) == 0);
    for (int w = 1; w <= 4; w++) {
        rt_pipeline_config cfg = rt_pipeline_defaults();
        cfg.workers = w, cfg.count = 1000;
        rt_pipeline *p = rt_pipeline_new(&b, &cfg, err, sizeof err);
        CHECK(p != NULL);
        rt_pipeline_free(p); /* immediately */
        p = rt_pipeline_new(&b, &cfg, err, sizeof err);
        for (int i = 0; i < 3 * w; i++) CHECK(rt_pipeline_next(p) != NULL);
        rt_pipeline_free(p); /* holding a batch, others in flight */
    }
    rt_pipeline_free(NULL);
    rt_dataset_free(ds);
}

static int allocs, frees;
static void *count_alloc(void *ctx, size_t bytes) {
    CHECK(ctx == (void *)&allocs);
    allocs++;
    return malloc(bytes);
}
static void count_free(void *ctx, void *ptr) {
    (void)ctx;
    frees++;
    free(ptr);
}

TEST(allocator_hook_and_bad_configs) {
    ir_train t = article_data();
    rt_dataset *ds = rt_data_synthetic(40, 3, 32, 32, 1, 2);
    rt_batcher b;
    CHECK(rt_batcher_init(&b, ds, &t, 8, RT_BATCH_TRAIN, 5, 3, 32, 32, err, sizeof err) == 0);
    rt_pipeline_config cfg = rt_pipeline_defaults();
    cfg.count = 12, cfg.depth = 5;
    cfg.host_alloc = count_alloc, cfg.host_free = count_free, cfg.alloc_ctx = &allocs;
    rt_pipeline *p = rt_pipeline_new(&b, &cfg, err, sizeof err);
    CHECK(allocs == 10); /* images + labels per slot */
    int n = 0;
    while (rt_pipeline_next(p)) n++;
    CHECK(n == 12);
    rt_pipeline_free(p);
    CHECK(frees == 10);

    cfg = rt_pipeline_defaults();
    cfg.count = 1;
    cfg.depth = 1;
    CHECK(rt_pipeline_new(&b, &cfg, err, sizeof err) == NULL);
    CHECK(strstr(err, "at least 2 slots (double buffering), got 1") != NULL);
    cfg.depth = 0, cfg.workers = -1;
    CHECK(rt_pipeline_new(&b, &cfg, err, sizeof err) == NULL);
    CHECK(strstr(err, "data workers must be 0..64, got -1") != NULL);
    cfg.workers = 1, cfg.count = -5;
    CHECK(rt_pipeline_new(&b, &cfg, err, sizeof err) == NULL);
    CHECK(strstr(err, "asked for -5 batches") != NULL);
    rt_dataset_free(ds);
}

int main(void) {
    RUN(training_batches_match_direct_preparation);
    RUN(eval_batches_keep_order_and_pad);
    RUN(early_shutdown);
    RUN(allocator_hook_and_bad_configs);
    return harness_done();
}
