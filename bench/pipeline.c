/* bench/pipeline.c — the input pipeline's own throughput: how many
 * training images per second runtime/data/pipeline.c prepares (shuffle, pad 4,
 * random 32x32 crop, random mirror, normalise, as the article), with 0
 * (on the consumer's thread), 1, 2 and 4 worker threads, and whether a
 * step of a given length ever waits for input. Figures only; nothing here
 * asserts a speed. bench/pipeline.sh builds and runs it.
 *
 * usage: pipeline [DATA] [BATCHES] [BATCH] [STEP_MS]
 *   DATA     a CIFAR-10 binary folder, or "synthetic" (default)
 *   BATCHES  batches per measurement (default 400)
 *   BATCH    images per batch (default 128, the article's)
 *   STEP_MS  simulated step length for the wait measurement (default 20)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/clock.h"
#include "runtime/data/data.h"

/* Stands in for a device step: the time passes, the CPU stays free for
 * the workers (as it is while a GPU computes). */
static void step_for(double seconds) {
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Runs `count` batches through a pipeline; returns seconds, fills stats. */
static double measure(const rt_batcher *b, int workers, int64_t count, double step_s,
                      rt_pipeline_stats *st) {
    rt_pipeline_config cfg = rt_pipeline_defaults();
    cfg.workers = workers, cfg.count = count;
    char err[256];
    rt_pipeline *p = rt_pipeline_new(b, &cfg, err, sizeof err);
    if (!p) {
        fprintf(stderr, "pipeline: %s\n", err);
        exit(1);
    }
    double sink = 0;
    double t0 = rt_now();
    const rt_batch *bt;
    rt_pipeline_stats first = {0};
    while ((bt = rt_pipeline_next(p))) {
        int64_t seq = bt->seq;          /* bt belongs to the workers again after release */
        sink += bt->images[seq % 1000]; /* touch the batch, as a copy would */
        rt_pipeline_release(p);
        if (step_s > 0) step_for(step_s);
        if (seq == 0) rt_pipeline_get_stats(p, &first);
    }
    double t = rt_now() - t0;
    rt_pipeline_get_stats(p, st);
    /* Waits after the first batch: the steady state. */
    st->stalls -= first.stalls;
    st->wait_s -= first.wait_s;
    rt_pipeline_free(p);
    if (sink == 12345.678) printf(" "); /* keep the reads */
    return t;
}

int main(int argc, char **argv) {
    const char *data = argc > 1 ? argv[1] : "synthetic";
    int64_t count = argc > 2 ? atoll(argv[2]) : 400;
    int batch = argc > 3 ? atoi(argv[3]) : 128;
    double step_ms = argc > 4 ? atof(argv[4]) : 20;
    if (count < 1 || batch < 1 || step_ms < 0) {
        fprintf(stderr, "usage: pipeline [DATA] [BATCHES] [BATCH] [STEP_MS]\n");
        return 1;
    }
    char err[1024];
    double t0 = rt_now();
    rt_dataset *ds = strcmp(data, "synthetic")
                         ? rt_data_cifar10(data, 1, err, sizeof err)
                         : rt_data_synthetic(RT_SYNTHETIC_TRAIN, 3, 32, 32, 1, RT_SYNTHETIC_SEED);
    if (!ds) {
        fprintf(stderr, "pipeline: %s\n", err);
        return 1;
    }
    printf("data: %s, %lld training images, loaded in %.2f s\n", ds->name, (long long)ds->count,
           rt_now() - t0);
    ir_train t;
    memset(&t, 0, sizeof t);
    t.pad = 4, t.random_crop = 32, t.random_mirror = 1, t.normalize = 1;
    double mean[3] = {0.4914, 0.4822, 0.4465}, std[3] = {0.2023, 0.1994, 0.2010};
    for (int c = 0; c < 3; c++) t.mean[c] = mean[c], t.std[c] = std[c];
    rt_batcher b;
    if (rt_batcher_init(&b, ds, &t, batch, RT_BATCH_TRAIN, 1, 3, 32, 32, err, sizeof err)) {
        fprintf(stderr, "pipeline: %s\n", err);
        return 1;
    }
    printf(
        "pipeline: %lld batches of %d (shuffle, pad 4, crop 32, mirror, normalise), consumer does nothing\n",
        (long long)count, batch);
    int workers[] = {0, 1, 2, 4};
    double rate1 = 0;
    for (int i = 0; i < 4; i++) {
        rt_pipeline_stats st;
        double s = measure(&b, workers[i], count, 0, &st);
        double rate = (double)count * batch / s;
        if (workers[i] == 1) rate1 = rate;
        printf("workers %d: %10.0f img/s  (%.3f ms per batch)\n", workers[i], rate,
               1e3 * s / (double)count);
    }
    /* A step longer than one worker needs per batch: the steps should never
     * wait after the first batch. */
    double step_s = step_ms / 1e3;
    int64_t n = count < 100 ? count : 100;
    printf("with a %.1f ms step (%lld steps; one worker prepares a batch in %.3f ms):\n", step_ms,
           (long long)n, rate1 > 0 ? 1e3 * batch / rate1 : 0.0);
    for (int w = 1; w <= 2; w++) {
        rt_pipeline_stats st;
        measure(&b, w, n, step_s, &st);
        printf("workers %d: the steps waited %.4f s in %lld of %lld steps after the first\n", w,
               st.wait_s, (long long)st.stalls, (long long)(n - 1));
    }
    rt_dataset_free(ds);
    return 0;
}
