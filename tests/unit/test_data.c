/* Tests for runtime/data: synthetic set, CIFAR-10 reader and its
 * validation (every malformed-file case), batch preparation: shuffle,
 * where a known pixel lands after pad/crop/mirror, crop and mirror
 * statistics, normalisation values, determinism per seed. */
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/file.h"
#include "runtime/data/data.h"
#include "runtime/host.h"
#include "tests/harness.h"

static char err[1024];

static ir_train article_data(void) {
    ir_train t;
    ir_train_defaults(&t);
    t.pad = 4, t.random_crop = 32, t.random_mirror = 1, t.normalize = 1;
    double mean[3] = {0.4914, 0.4822, 0.4465}, std[3] = {0.2023, 0.1994, 0.2010};
    for (int c = 0; c < 3; c++) t.mean[c] = mean[c], t.std[c] = std[c];
    return t;
}

/* Dropout's keys: a pure function of (seed, step, replica), and each
 * changes them. */
TEST(keys_are_pure_and_distinct) {
    uint64_t k = rt_rng_key(7, 3, 1);
    CHECK(k == rt_rng_key(7, 3, 1));
    CHECK(k != rt_rng_key(8, 3, 1) && k != rt_rng_key(7, 4, 1) && k != rt_rng_key(7, 3, 2));
    CHECK(rt_rng_key(7, 1, 3) != k); /* step and replica are not interchangeable */
}

TEST(synthetic_is_deterministic_and_shaped) {
    rt_dataset *a = rt_data_synthetic(200, 3, 32, 32, 1, 7),
               *b = rt_data_synthetic(200, 3, 32, 32, 1, 7);
    rt_dataset *t = rt_data_synthetic(200, 3, 32, 32, 0, 7);
    CHECK(a->count == 200 && a->c == 3 && a->h == 32 && a->w == 32 && a->classes == 10);
    CHECK(memcmp(a->pixels, b->pixels, 200 * 3072) == 0 && memcmp(a->labels, b->labels, 200) == 0);
    CHECK(memcmp(a->pixels, t->pixels, 200 * 3072) != 0); /* test split: other images */
    int seen[10] = {0};
    for (int i = 0; i < 200; i++) {
        CHECK(a->labels[i] < 10);
        seen[a->labels[i] % 10]++;
    }
    for (int k = 0; k < 10; k++) CHECK(seen[k] > 5);
    rt_dataset_free(a);
    rt_dataset_free(b);
    rt_dataset_free(t);
    /* any shape the plan asks for */
    rt_dataset *g = rt_data_synthetic(10, 1, 28, 20, 1, 1);
    CHECK(g->c == 1 && g->h == 28 && g->w == 20);
    rt_dataset_free(g);
}

/* Nearest class mean (computed on train) classifies the test split well:
 * the set is learnable. */
TEST(synthetic_is_learnable) {
    rt_dataset *tr = rt_data_synthetic(1000, 3, 32, 32, 1, 3),
               *te = rt_data_synthetic(300, 3, 32, 32, 0, 3);
    static double mean[10][3072];
    int cnt[10] = {0};
    memset(mean, 0, sizeof mean);
    for (int i = 0; i < tr->count; i++) {
        int y;
        const uint8_t *p = rt_dataset_get(tr, i, &y);
        cnt[y]++;
        for (int j = 0; j < 3072; j++) mean[y][j] += p[j];
    }
    for (int k = 0; k < 10; k++)
        for (int j = 0; j < 3072; j++) mean[k][j] /= cnt[k] ? cnt[k] : 1;
    int right = 0;
    for (int i = 0; i < te->count; i++) {
        int y, best = -1;
        double bd = 1e300;
        const uint8_t *p = rt_dataset_get(te, i, &y);
        for (int k = 0; k < 10; k++) {
            double d = 0;
            for (int j = 0; j < 3072; j++) d += (p[j] - mean[k][j]) * (p[j] - mean[k][j]);
            if (d < bd) bd = d, best = k;
        }
        right += best == y;
    }
    CHECK_MSG(right > 0.9 * te->count, "%d of %lld right", right, (long long)te->count);
    rt_dataset_free(tr);
    rt_dataset_free(te);
}

/* ---- CIFAR-10 files ------------------------------------------------------ */

static char dir[256];

/* Writes `records` records with label (r + file) % 10 and pixels
 * (r * 7 + j) & 255 into dir/name; extra appends raw junk bytes. */
static void write_batch(const char *name, int file, int records, int extra, int bad_label_at) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    for (int r = 0; r < records; r++) {
        fputc(r == bad_label_at ? 12 : (r + file) % 10, f);
        for (int j = 0; j < 3072; j++) fputc((r * 7 + j + file) & 255, f);
    }
    for (int i = 0; i < extra; i++) fputc(0, f);
    fclose(f);
}

static void write_all(int records) {
    char name[64];
    for (int f = 1; f <= 5; f++) {
        snprintf(name, sizeof name, "data_batch_%d.bin", f);
        write_batch(name, f, records, 0, -1);
    }
    write_batch("test_batch.bin", 0, records, 0, -1);
}

TEST(cifar_reader_reads_records) {
    write_all(3);
    rt_dataset *tr = rt_data_cifar10(dir, 1, err, sizeof err);
    CHECK_MSG(tr != NULL, "%s", err);
    rt_dataset *te = rt_data_cifar10(dir, 0, err, sizeof err);
    CHECK_MSG(te != NULL, "%s", err);
    if (!tr || !te) return;
    CHECK(tr->count == 15 && te->count == 3);
    CHECK(tr->c == 3 && tr->h == 32 && tr->w == 32);
    int y;
    const uint8_t *p = rt_dataset_get(tr, 4, &y); /* file 2, record 1 */
    CHECK(y == 3);
    CHECK(p[0] == ((7 + 2) & 255) && p[3071] == ((7 + 3071 + 2) & 255));
    p = rt_dataset_get(te, 2, &y);
    CHECK(y == 2 && p[5] == 19);
    rt_dataset_free(tr);
    rt_dataset_free(te);
    /* the parent of cifar-10-batches-bin works too */
    char parent[300], sub[400], cmd[2000];
    snprintf(parent, sizeof parent, "%s_parent", dir);
    snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin", parent);
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cp %s/*.bin %s/", parent, sub, dir, sub);
    CHECK(system(cmd) == 0);
    te = rt_data_cifar10(parent, 0, err, sizeof err);
    CHECK_MSG(te != NULL && te->count == 3, "%s", err);
    rt_dataset_free(te);
    snprintf(cmd, sizeof cmd, "rm -rf %s", parent);
    CHECK(system(cmd) == 0);
}

TEST(cifar_reader_refuses_bad_files) {
    char path[512];
    write_all(2);
    snprintf(path, sizeof path, "%s/data_batch_3.bin", dir);
    remove(path);
    CHECK(rt_data_cifar10(dir, 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "data_batch_3.bin: No such file") != NULL);
    rt_dataset *te = rt_data_cifar10(dir, 0, err, sizeof err); /* test set unaffected */
    CHECK(te != NULL);
    rt_dataset_free(te);

    write_all(2);
    write_batch("data_batch_4.bin", 4, 2, 100, -1); /* truncated / wrong size */
    CHECK(rt_data_cifar10(dir, 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "data_batch_4.bin: size 6246 is not a whole number of 3073-byte") != NULL);

    write_all(2);
    write_batch("test_batch.bin", 0, 0, 0, -1); /* empty */
    CHECK(rt_data_cifar10(dir, 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "test_batch.bin: size 0: the file is empty") != NULL);

    write_all(3);
    write_batch("data_batch_5.bin", 5, 3, 0, 2);
    CHECK(rt_data_cifar10(dir, 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "data_batch_5.bin: record 2 has label 12; CIFAR-10 labels are 0-9") != NULL);

    write_all(3);
    write_batch("data_batch_1.bin", 1, 3, 0, 0); /* first record */
    CHECK(rt_data_cifar10(dir, 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "data_batch_1.bin: record 0 has label 12") != NULL);
    write_all(3);
    snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    FILE *f = fopen(path, "r+b");
    fseek(f, 2 * 3073, SEEK_SET); /* the last record's label byte */
    fputc(255, f);
    fclose(f);
    CHECK(rt_data_cifar10(dir, 0, err, sizeof err) == NULL);
    CHECK(
        strstr(err, "test_batch.bin: record 2 has label 255; CIFAR-10 labels are 0-9 (byte 6146") !=
        NULL);

    /* extra bytes after whole records, and a record cut short */
    write_all(3);
    write_batch("data_batch_2.bin", 2, 3, 1, -1);
    CHECK(rt_data_cifar10(dir, 1, err, sizeof err) == NULL);
    CHECK(strstr(err,
                 "data_batch_2.bin: size 9220 is not a whole number of 3073-byte CIFAR-10 records: "
                 "record 3 has only 1 bytes") != NULL);
    write_all(3);
    snprintf(path, sizeof path, "%s/data_batch_2.bin", dir);
    CHECK(truncate(path, 3073 + 1000) == 0);
    CHECK(rt_data_cifar10(dir, 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "data_batch_2.bin: size 4073 is not a whole number") != NULL &&
          strstr(err, "record 1 has only 1000 bytes") != NULL);

    /* a folder where a file should be */
    write_all(2);
    snprintf(path, sizeof path, "%s/data_batch_3.bin", dir);
    remove(path);
    mkdir(path, 0755);
    CHECK(rt_data_cifar10(dir, 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "data_batch_3.bin: is a folder, not a CIFAR-10 batch file") != NULL);
    rmdir(path);

    /* unreadable: root reads anything, so then a child drops to nobody */
    write_all(2);
    snprintf(path, sizeof path, "%s/data_batch_5.bin", dir);
    chmod(path, 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) || setuid(65534))) _exit(3);
        rt_dataset *ds = rt_data_cifar10(dir, 1, err, sizeof err);
        int ok = !ds && strstr(err, "data_batch_5.bin: cannot open: Permission denied");
        if (!ok) fprintf(stderr, "unreadable: got '%s'\n", ds ? "a dataset" : err);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    chmod(path, 0644);

    /* and after all that, a good folder loads again */
    write_all(2);
    rt_dataset *ok = rt_data_cifar10(dir, 1, err, sizeof err);
    CHECK_MSG(ok && ok->count == 10, "%s", err);
    rt_dataset_free(ok);

    CHECK(rt_data_cifar10("/nonexistent/cifar", 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "/nonexistent/cifar: not a folder") != NULL);
    snprintf(path, sizeof path, "%s/data_batch_1.bin", dir);
    CHECK(rt_data_cifar10(path, 1, err, sizeof err) == NULL && strstr(err, "not a folder"));
}

/* ---- batches ---------------------------------------------------------------- */

TEST(eval_batches_normalise_and_pad) {
    ir_train t = article_data();
    rt_dataset *ds = rt_data_synthetic(10, 3, 32, 32, 0, 5);
    rt_batcher b;
    CHECK(rt_batcher_init(&b, ds, &t, 4, RT_BATCH_EVAL, 9, 3, 32, 32, err, sizeof err) == 0);
    CHECK(b.batches == 3 && !b.shuffle && !b.augment);
    float img[4 * 3072];
    int32_t lab[4];
    CHECK(rt_batcher_fill(&b, NULL, 0, 8, 4, img, lab) == 2); /* last batch: 2 real */
    int y;
    const uint8_t *p = rt_dataset_get(ds, 9, &y);
    CHECK(lab[1] == y && lab[2] == 0 && lab[3] == 0);
    for (int c = 0; c < 3; c++) {
        int j = c * 1024 + 77;
        float want = (float)((p[j] / 255.0f - t.mean[c]) / t.std[c]);
        CHECK_NEAR(img[3072 + j], want,
                   1e-6); /* f32 roundings of values under 2.8: 2^-24 * 2.8 each */
    }
    CHECK(img[2 * 3072] == 0 && img[4 * 3072 - 1] == 0);
    rt_dataset_free(ds);
}

/* Finds the crop offset and mirror that explain an augmented image; pixels
 * from the padding hold the normalised zero. */
static int explains(const rt_batcher *b, const uint8_t *src, const float *out, int dy, int dx,
                    int flip) {
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                int sy = y + dy, sx = (flip ? 31 - x : x) + dx;
                int v = sy >= 0 && sy < 32 && sx >= 0 && sx < 32 ? src[c * 1024 + sy * 32 + sx] : 0;
                if (out[c * 1024 + y * 32 + x] != b->lut[c][v]) return 0;
            }
    return 1;
}

TEST(train_batches_shuffle_crop_and_mirror) {
    ir_train t = article_data();
    rt_dataset *ds = rt_data_synthetic(103, 3, 32, 32, 1, 5);
    rt_batcher b;
    CHECK(rt_batcher_init(&b, ds, &t, 10, RT_BATCH_TRAIN, 42, 3, 32, 32, err, sizeof err) == 0);
    CHECK(b.batches == 10 && b.shuffle && b.augment); /* last partial batch dropped */
    int64_t o0[103], o1[103], o0b[103];
    rt_batcher_order(&b, 0, o0);
    rt_batcher_order(&b, 1, o1);
    rt_batcher_order(&b, 0, o0b);
    CHECK(memcmp(o0, o0b, sizeof o0) == 0);
    CHECK(memcmp(o0, o1, sizeof o0) != 0); /* reshuffled every epoch */
    int seen[103] = {0}, moved = 0;
    for (int i = 0; i < 103; i++) seen[o0[i]]++, moved += o0[i] != i;
    for (int i = 0; i < 103; i++) CHECK(seen[i] == 1);
    CHECK(moved > 80);

    static float img[10 * 3072];
    int32_t lab[10];
    CHECK(rt_batcher_fill(&b, o0, 0, 20, 10, img, lab) == 10);
    int flips = 0, shifted = 0;
    for (int i = 0; i < 10; i++) {
        int y;
        const uint8_t *src = rt_dataset_get(ds, o0[20 + i], &y);
        CHECK(lab[i] == y);
        int found = 0;
        for (int dy = -4; dy <= 4 && !found; dy++)
            for (int dx = -4; dx <= 4 && !found; dx++)
                for (int f = 0; f < 2 && !found; f++)
                    if (explains(&b, src, img + i * 3072, dy, dx, f)) {
                        found = 1;
                        flips += f;
                        shifted += dy || dx;
                    }
        CHECK_MSG(found, "sample %d is not a padded crop of its record", i);
    }
    CHECK(flips > 0 && flips < 10);
    CHECK(shifted > 5);

    /* Order of preparation does not matter: batch 2 alone equals batch 2
     * prepared after others (what worker threads rely on). */
    static float again[10 * 3072];
    int32_t lab2[10];
    rt_batcher_fill(&b, o0, 0, 0, 10, again, lab2);
    rt_batcher_fill(&b, o0, 0, 20, 10, again, lab2);
    CHECK(memcmp(img, again, sizeof img) == 0 && memcmp(lab, lab2, sizeof lab) == 0);
    /* Another epoch draws other crops for the same record. */
    rt_batcher_fill(&b, o0, 1, 20, 10, again, lab2);
    CHECK(memcmp(img, again, sizeof img) != 0);

    /* --no-augment --no-shuffle: exactly the eval preparation. */
    rt_batcher plain, ev;
    rt_batcher_init(&plain, ds, &t, 10, RT_BATCH_TRAIN, 42, 3, 32, 32, err, sizeof err);
    plain.augment = plain.shuffle = 0;
    rt_batcher_init(&ev, ds, &t, 10, RT_BATCH_EVAL, 42, 3, 32, 32, err, sizeof err);
    int64_t id[103];
    rt_batcher_order(&plain, 3, id);
    for (int i = 0; i < 103; i++) CHECK(id[i] == i);
    rt_batcher_fill(&plain, id, 3, 30, 10, img, lab);
    rt_batcher_fill(&ev, NULL, 0, 30, 10, again, lab2);
    CHECK(memcmp(img, again, sizeof img) == 0);

    /* The train-accuracy pass augments with its own draws, in dataset order. */
    rt_batcher te;
    CHECK(rt_batcher_init(&te, ds, &t, 10, RT_BATCH_TRAIN_EVAL, 42, 3, 32, 32, err, sizeof err) ==
          0);
    CHECK(te.augment && !te.shuffle && te.batches == 11);
    rt_dataset_free(ds);
}

TEST(batcher_refuses_mismatches) {
    ir_train t = article_data();
    rt_dataset *ds = rt_data_synthetic(20, 3, 32, 32, 1, 5);
    rt_batcher b;
    CHECK(rt_batcher_init(&b, ds, &t, 4, RT_BATCH_TRAIN, 1, 1, 32, 32, err, sizeof err) == -1);
    CHECK(strstr(err, "3 channels but the program's image input has 1") != NULL);
    CHECK(rt_batcher_init(&b, ds, &t, 4, RT_BATCH_TRAIN, 1, 3, 28, 28, err, sizeof err) == -1);
    CHECK(strstr(err, "random_crop 32 does not give the program's 28x28") != NULL);
    t.random_crop = 0;
    CHECK(rt_batcher_init(&b, ds, &t, 4, RT_BATCH_EVAL, 1, 3, 28, 28, err, sizeof err) == -1);
    CHECK(strstr(err, "images are 3x32x32 but the program's image input is 3x28x28") != NULL);
    t = article_data();
    CHECK(rt_batcher_init(&b, ds, &t, 64, RT_BATCH_TRAIN, 1, 3, 32, 32, err, sizeof err) == -1);
    CHECK(strstr(err, "do not fill one batch of 64") != NULL);
    /* a smaller crop from a larger image works */
    t.random_crop = 28;
    t.pad = 0;
    CHECK(rt_batcher_init(&b, ds, &t, 4, RT_BATCH_TRAIN, 1, 3, 28, 28, err, sizeof err) == 0);
    CHECK(rt_batcher_init(&b, ds, &t, 4, RT_BATCH_EVAL, 1, 3, 28, 28, err, sizeof err) == 0);
    static float img[4 * 3 * 28 * 28];
    int32_t lab[4];
    rt_batcher_fill(&b, NULL, 0, 0, 4, img, lab); /* eval: the centre crop */
    const uint8_t *p = rt_dataset_get(ds, 1, NULL);
    CHECK(img[3 * 784 + 784 + 0] == b.lut[1][p[1024 + 2 * 32 + 2]]);
    rt_dataset_free(ds);
}

/* A record of background 100 with one marker pixel of 255 in channel 1
 * at (5, 7): for every crop origin and mirror flag, the marker lands at
 * (5 + 4 - oy, x) with x = 7 + 4 - ox, mirrored to 31 - x, when inside;
 * and exactly the rows/columns outside the source read the padding. */
TEST(known_pixel_lands_where_it_should) {
    ir_train t = article_data();
    rt_dataset *ds = rt_data_synthetic(1, 3, 32, 32, 1, 5);
    memset(ds->pixels, 100, 3072);
    ds->pixels[1024 + 5 * 32 + 7] = 255;
    rt_batcher b;
    CHECK(rt_batcher_init(&b, ds, &t, 1, RT_BATCH_TRAIN, 1, 3, 32, 32, err, sizeof err) == 0);
    static float out[3072];
    int cases = 0;
    for (int oy = 0; oy <= 8; oy++)
        for (int ox = 0; ox <= 8; ox++)
            for (int flip = 0; flip < 2; flip++) {
                rt_augment a = {oy, ox, flip};
                rt_batcher_prepare(&b, 0, &a, out);
                int ty = 5 + 4 - oy, tx = 7 + 4 - ox;
                if (flip) tx = 31 - tx;
                int markers = 0, pads = 0, bad = 0;
                for (int c = 0; c < 3; c++)
                    for (int y = 0; y < 32; y++)
                        for (int x = 0; x < 32; x++) {
                            float v = out[c * 1024 + y * 32 + x];
                            int sy = y + oy - 4, sx = (flip ? 31 - x : x) + ox - 4;
                            int inside = sy >= 0 && sy < 32 && sx >= 0 && sx < 32;
                            if (v == b.lut[c][255]) {
                                markers++;
                                bad += c != 1 || y != ty || x != tx;
                            } else if (v == b.lut[c][0]) {
                                pads++;
                                bad += inside;
                            } else {
                                bad += !inside || v != b.lut[c][100];
                            }
                        }
                int overlap = (32 - abs(oy - 4)) * (32 - abs(ox - 4));
                CHECK_MSG(markers == 1 && !bad && pads == 3 * (1024 - overlap),
                          "oy %d ox %d flip %d: %d markers, %d pads, %d misplaced", oy, ox, flip,
                          markers, pads, bad);
                cases++;
            }
    CHECK(cases == 162);
    /* rt_batcher_fill uses the drawn crop and flip for that record. */
    rt_augment a;
    rt_batcher_draw(&b, 3, 0, &a);
    static float via_fill[3072];
    int64_t order[1] = {0};
    int32_t lab;
    rt_batcher_fill(&b, order, 3, 0, 1, via_fill, &lab);
    rt_batcher_prepare(&b, 0, &a, out);
    CHECK(memcmp(out, via_fill, sizeof out) == 0);
    /* without augmentation: the identity placement */
    b.augment = 0;
    rt_batcher_draw(&b, 3, 0, &a);
    CHECK(a.oy == 4 && a.ox == 4 && a.flip == 0);
    rt_dataset_free(ds);
}

/* Crop origins uniform over 0..8 on each axis (and jointly), mirror half
 * the time, independent of each other. The seed is fixed, so this is
 * deterministic; the bounds are ~6 standard deviations out regardless. */
TEST(crop_offsets_uniform_and_mirror_half) {
    ir_train t = article_data();
    rt_dataset *ds = rt_data_synthetic(1000, 3, 32, 32, 1, 5);
    for (int mode = 0; mode < 2; mode++) {
        rt_batcher b;
        CHECK(rt_batcher_init(&b, ds, &t, 10, mode ? RT_BATCH_TRAIN_EVAL : RT_BATCH_TRAIN, 2024, 3,
                              32, 32, err, sizeof err) == 0);
        static int ny[9], nx[9], nxy[9][9], flips[9];
        memset(ny, 0, sizeof ny), memset(nx, 0, sizeof nx), memset(nxy, 0, sizeof nxy);
        memset(flips, 0, sizeof flips);
        int n = 0, nflip = 0;
        for (int epoch = 0; epoch < 9; epoch++)
            for (int64_t rec = 0; rec < ds->count; rec++) {
                rt_augment a;
                rt_batcher_draw(&b, epoch, rec, &a);
                CHECK(a.oy >= 0 && a.oy <= 8 && a.ox >= 0 && a.ox <= 8 &&
                      (a.flip == 0 || a.flip == 1));
                ny[a.oy]++, nx[a.ox]++, nxy[a.oy][a.ox]++;
                flips[a.oy] += a.flip;
                nflip += a.flip;
                n++;
            }
        double ey = n / 9.0, exy = n / 81.0, chi_y = 0, chi_x = 0, chi_xy = 0;
        for (int i = 0; i < 9; i++) {
            chi_y += (ny[i] - ey) * (ny[i] - ey) / ey;
            chi_x += (nx[i] - ey) * (nx[i] - ey) / ey;
            for (int j = 0; j < 9; j++) chi_xy += (nxy[i][j] - exy) * (nxy[i][j] - exy) / exy;
            /* mirror independent of the crop row */
            CHECK_MSG(fabs((double)flips[i] / ny[i] - 0.5) < 0.1, "row %d: %d of %d mirrored", i,
                      flips[i], ny[i]);
        }
        /* 8 and 80 degrees of freedom: means 8 and 80, sd 4 and 12.6 */
        CHECK_MSG(chi_y < 40 && chi_x < 40 && chi_xy < 160,
                  "mode %d: chi2 y %.1f x %.1f joint %.1f", mode, chi_y, chi_x, chi_xy);
        CHECK_MSG(fabs((double)nflip / n - 0.5) < 0.03, "mode %d: %d of %d mirrored", mode, nflip,
                  n);
    }
    rt_dataset_free(ds);
}

/* Pixel v becomes (v / 255 - mean[c]) / std[c]; without normalize, v / 255. */
TEST(normalisation_values) {
    ir_train t = article_data();
    rt_dataset *ds = rt_data_synthetic(4, 3, 32, 32, 0, 5);
    for (int i = 0; i < 4 * 3072; i++) ds->pixels[i] = (uint8_t)(i * 37 % 256);
    rt_batcher b;
    CHECK(rt_batcher_init(&b, ds, &t, 4, RT_BATCH_EVAL, 1, 3, 32, 32, err, sizeof err) == 0);
    double mean[3] = {0.4914, 0.4822, 0.4465}, std[3] = {0.2023, 0.1994, 0.2010};
    /* the table is f32, values under 2.8: a few roundings of 2^-24 * 2.8;
     * the image against f64 mean and std, 1e-5 for their f32 copies (2^-24
     * relative) amplified by 1 / std < 5 */
    CHECK_NEAR(b.lut[0][0], -0.4914 / 0.2023, 1e-6);
    CHECK_NEAR(b.lut[1][255], (1 - 0.4822) / 0.1994, 1e-6);
    CHECK_NEAR(b.lut[2][128], (128 / 255.0 - 0.4465) / 0.2010, 1e-6);
    static float img[4 * 3072];
    int32_t lab[4];
    CHECK(rt_batcher_fill(&b, NULL, 0, 0, 4, img, lab) == 4);
    int bad = 0;
    for (int i = 0; i < 4 * 3072; i++) {
        int c = i % 3072 / 1024;
        bad += fabs(img[i] - (ds->pixels[i] / 255.0 - mean[c]) / std[c]) > 1e-5;
    }
    CHECK_MSG(bad == 0, "%d values off", bad);
    /* the test-set pass augments nothing, whatever the train section says */
    CHECK(!b.augment && !b.shuffle);
    t.normalize = 0;
    CHECK(rt_batcher_init(&b, ds, &t, 4, RT_BATCH_EVAL, 1, 3, 32, 32, err, sizeof err) == 0);
    rt_batcher_fill(&b, NULL, 0, 0, 4, img, lab);
    CHECK(img[5] == ds->pixels[5] / 255.0f && img[3071] == ds->pixels[3071] / 255.0f);
    rt_dataset_free(ds);
}

/* Same seed: the same orders and batches from two batchers; another seed:
 * other orders and crops. */
TEST(determinism_per_seed) {
    ir_train t = article_data();
    write_all(20);
    rt_dataset *ds = rt_data_cifar10(dir, 1, err, sizeof err);
    CHECK_MSG(ds && ds->count == 100, "%s", err);
    if (!ds) return;
    rt_batcher a, b, c;
    rt_batcher_init(&a, ds, &t, 25, RT_BATCH_TRAIN, 7, 3, 32, 32, err, sizeof err);
    rt_batcher_init(&b, ds, &t, 25, RT_BATCH_TRAIN, 7, 3, 32, 32, err, sizeof err);
    rt_batcher_init(&c, ds, &t, 25, RT_BATCH_TRAIN, 8, 3, 32, 32, err, sizeof err);
    static float ia[25 * 3072], ib[25 * 3072];
    int32_t la[25], lb[25];
    int64_t oa[100], ob[100], oc[100];
    for (int epoch = 0; epoch < 3; epoch++) {
        rt_batcher_order(&a, epoch, oa);
        rt_batcher_order(&b, epoch, ob);
        rt_batcher_order(&c, epoch, oc);
        CHECK(memcmp(oa, ob, sizeof oa) == 0 && memcmp(oa, oc, sizeof oa) != 0);
        for (int64_t s = 3; s >= 0; s--) { /* any batch order */
            rt_batcher_fill(&a, oa, epoch, s * 25, 25, ia, la);
            rt_batcher_fill(&b, ob, epoch, s * 25, 25, ib, lb);
            CHECK(memcmp(ia, ib, sizeof ia) == 0 && memcmp(la, lb, sizeof la) == 0);
            rt_batcher_fill(&c, oa, epoch, s * 25, 25, ib, lb); /* same records, seed 8's crops */
            CHECK(memcmp(la, lb, sizeof la) == 0 && memcmp(ia, ib, sizeof ia) != 0);
        }
    }
    rt_dataset_free(ds);
}

/* The in-memory parser (what the fuzzer drives): the file reader's checks
 * and messages, for a buffer. */
TEST(cifar_parse_from_memory) {
    enum { REC = 3073 };
    uint8_t buf[3 * REC + 1];
    for (int r = 0; r < 3; r++) {
        buf[r * REC] = (uint8_t)(r + 7);
        for (int i = 0; i < REC - 1; i++) buf[r * REC + 1 + i] = (uint8_t)(i + r);
    }
    rt_dataset *ds = rt_data_cifar10_parse("mem.bin", buf, 3 * REC, err, sizeof err);
    CHECK_MSG(ds != NULL, "%s", err);
    if (ds) {
        int y;
        const uint8_t *p = rt_dataset_get(ds, 2, &y);
        CHECK(ds->count == 3 && ds->c == 3 && ds->h == 32 && ds->w == 32);
        CHECK(y == 9 && p[0] == 2 && p[3071] == ((3071 + 2) & 255));
        rt_dataset_free(ds);
    }
    CHECK(rt_data_cifar10_parse("mem.bin", buf, 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "mem.bin: size 0: the file is empty") != NULL);
    CHECK(rt_data_cifar10_parse("mem.bin", buf, 3 * REC + 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "mem.bin: size 9220 is not a whole number of 3073-byte CIFAR-10 records: "
                      "record 3 has only 1 bytes") != NULL);
    CHECK(rt_data_cifar10_parse("mem.bin", buf, REC - 1, err, sizeof err) == NULL);
    CHECK(strstr(err, "record 0 has only 3072 bytes") != NULL);
    buf[2 * REC] = 10;
    CHECK(rt_data_cifar10_parse("mem.bin", buf, 3 * REC, err, sizeof err) == NULL);
    CHECK(strstr(err, "mem.bin: record 2 has label 10; CIFAR-10 labels are 0-9 (byte 6146") !=
          NULL);
}

/* A .npy file's bytes: version 1.0, the header dict padded to 64. */
static size_t npy_bytes(uint8_t *out, const char *descr, const char *shape, const void *data,
                        size_t n) {
    char dict[256];
    int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                       descr, shape);
    int hlen = (10 + len + 1 + 63) / 64 * 64 - 10;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)hlen, out[9] = (uint8_t)(hlen >> 8);
    memset(out + 10, ' ', (size_t)hlen);
    memcpy(out + 10, dict, (size_t)len);
    out[10 + hlen - 1] = '\n';
    if (n) memcpy(out + 10 + hlen, data, n);
    return 10 + (size_t)hlen + n;
}

static void put(const char *name, const uint8_t *b, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n);
    if (f) fclose(f);
}

/* rt_data_npy streams the file into its records: the same pixels as
 * rt_data_npy_parse of the same bytes in memory, and the layout's CHW
 * bytes, for NHWC uint8 and NCHW float32. */
TEST(npy_streams_the_same_pixels) {
    enum { N = 3, H = 4, W = 5, C = 3, REC = H * W * C };
    static uint8_t u8[N * REC], xb[N * REC * 4 + 128], yb[256];
    static float f32[N * REC];
    for (int i = 0; i < N * REC; i++) u8[i] = (uint8_t)(i * 7), f32[i] = (float)(i % 256) / 255.0f;
    int64_t labels[N] = {2, 0, 1};
    size_t yn = npy_bytes(yb, "<i8", "(3,)", labels, sizeof labels);
    put("train_y.npy", yb, yn);
    for (int pass = 0; pass < 2; pass++) {
        size_t xn = pass == 0 ? npy_bytes(xb, "|u1", "(3, 4, 5, 3)", u8, sizeof u8)
                              : npy_bytes(xb, "<f4", "(3, 3, 4, 5)", f32, sizeof f32);
        put("train_x.npy", xb, xn);
        rt_dataset *a = rt_data_npy(dir, 1, C, err, sizeof err);
        rt_dataset *b = rt_data_npy_parse("x", xb, xn, "y", yb, yn, C, err, sizeof err);
        CHECK(a && b);
        if (!a || !b) {
            fprintf(stderr, "%s\n", err);
            return;
        }
        CHECK(a->count == N && a->h == H && a->w == W && a->classes == 3);
        CHECK(memcmp(a->pixels, b->pixels, N * REC) == 0 && memcmp(a->labels, b->labels, N) == 0);
        /* image 1, channel 2, row 3, column 4 */
        size_t at = (size_t)1 * REC + 2 * H * W + 3 * W + 4;
        size_t src = pass == 0 ? (size_t)1 * REC + (3 * W + 4) * C + 2 : at;
        CHECK(a->pixels[at] == (pass == 0 ? u8[src] : (uint8_t)(src % 256)));
        rt_dataset_free(a);
        rt_dataset_free(b);
    }
}

/* A header claiming more images than half the host's memory holds is
 * refused before anything of that size is allocated (the file is sparse). */
TEST(npy_refuses_more_than_memory) {
    int64_t host = rt_host_memory();
    if (host <= 0) return;
    long long n = (long long)(host / 3072) + 1;
    char shape[64];
    snprintf(shape, sizeof shape, "(%lld, 32, 32, 3)", n);
    static uint8_t xb[256];
    size_t head = npy_bytes(xb, "|u1", shape, NULL, 0);
    put("train_x.npy", xb, head);
    char path[600];
    snprintf(path, sizeof path, "%s/train_x.npy", dir);
    CHECK(truncate(path, (off_t)head + (off_t)n * 3072) == 0);
    CHECK(rt_data_npy(dir, 1, 3, err, sizeof err) == NULL);
    CHECK(strstr(err, "train_x.npy") && strstr(err, "more than half of this machine's"));
    if (!strstr(err, "more than half")) fprintf(stderr, "%s\n", err);
    unlink(path);
}

/* ---- token files ---- */

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

/* tokens 0..n-1 (mod 1000) little-endian at dir/name; its path in out. */
static void token_file(const char *name, int64_t n, char *out, size_t len) {
    snprintf(out, len, "%s/%s", dir, name);
    uint8_t *b = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        b[2 * i] = (uint8_t)(i % 1000), b[2 * i + 1] = (uint8_t)(i % 1000 >> 8);
    write_bytes(out, b, (size_t)n * 2);
    free(b);
}

/* Windows: targets are tokens shifted by one; the offsets a pure function
 * of (seed, step, sample), so filling a replica's share in any chunks
 * (workers) gives the same bytes, and replica r's share is samples
 * r*local.. of the global batch: R replicas of `local` together are one
 * replica of R*local, and no two replicas draw the same sample. */
TEST(token_windows_by_seed_step_and_replica) {
    char path[512];
    token_file("train.bin", 5000, path, sizeof path);
    const int64_t T = 16, local = 8, R = 4;
    rt_tokens *t = rt_tokens_load(path, T, 1000, err, sizeof err);
    CHECK_MSG(t != NULL, "%s", err);
    if (!t) return;
    CHECK(t->count == 5000 && t->tok[1234] == 234);
    int32_t *all = malloc(sizeof(int32_t) * R * local * T),
            *allt = malloc(sizeof(int32_t) * R * local * T);
    int32_t *tok = malloc(sizeof(int32_t) * local * T), *tgt = malloc(sizeof(int32_t) * local * T);
    rt_tokens_fill_train(t, T, 42, 3, 0, R * local, 0, R * local, all, allt);
    for (int64_t k = 0; k < R * local * T; k++) CHECK(allt[k] == (all[k] + 1) % 1000);
    int same_offset = 0;
    for (int r = 0; r < R; r++) {
        /* one worker, then two chunks in the other order */
        rt_tokens_fill_train(t, T, 42, 3, r, local, 0, local, tok, tgt);
        CHECK(memcmp(tok, all + r * local * T, sizeof(int32_t) * local * T) == 0);
        CHECK(memcmp(tgt, allt + r * local * T, sizeof(int32_t) * local * T) == 0);
        memset(tok, 0xff, sizeof(int32_t) * local * T);
        rt_tokens_fill_train(t, T, 42, 3, r, local, 5, local - 5, tok, tgt);
        rt_tokens_fill_train(t, T, 42, 3, r, local, 0, 5, tok, tgt);
        CHECK(memcmp(tok, all + r * local * T, sizeof(int32_t) * local * T) == 0);
        for (int64_t j = 0; j < local; j++) {
            int64_t o = rt_tokens_offset(t, T, 42, 3, r * local + j);
            CHECK(o >= 0 && o <= 5000 - T - 1);
            for (int q = 0; q < R; q++)
                for (int64_t k = 0; k < local; k++)
                    if (q != r || k != j)
                        same_offset += o == rt_tokens_offset(t, T, 42, 3, q * local + k);
        }
    }
    CHECK_MSG(same_offset <= 2, "%d samples share an offset", same_offset); /* 32 of ~5000: rare */
    CHECK(rt_tokens_offset(t, T, 42, 3, 0) == rt_tokens_offset(t, T, 42, 3, 0));
    CHECK(rt_tokens_offset(t, T, 43, 3, 0) != rt_tokens_offset(t, T, 42, 3, 0) ||
          rt_tokens_offset(t, T, 43, 3, 1) != rt_tokens_offset(t, T, 42, 3, 1));
    CHECK(rt_tokens_offset(t, T, 42, 4, 0) != rt_tokens_offset(t, T, 42, 3, 0) ||
          rt_tokens_offset(t, T, 42, 4, 1) != rt_tokens_offset(t, T, 42, 3, 1));
    /* validation: consecutive windows from 0 */
    CHECK(rt_tokens_val_windows(t, T) == 4999 / 16);
    rt_tokens_fill_val(t, T, 2, 3, tok, tgt);
    for (int64_t k = 0; k < 3 * T; k++) CHECK(tok[k] == 2 * T + k && tgt[k] == 2 * T + k + 1);
    free(all), free(allt), free(tok), free(tgt);
    rt_tokens_free(t);
}

/* A token batcher (what the pipeline and dprun use): batch k of epoch e
 * is step e*batches + k; a shard's half of a global batch is that half of
 * the global batcher's; the val windows are consecutive, capped, the last
 * batch padded with zeros and not counted. */
TEST(token_batcher_steps_shards_and_val) {
    char path[512];
    token_file("batcher.bin", 5000, path, sizeof path);
    const int64_t T = 16;
    rt_tokens *t = rt_tokens_load(path, T, 0, err, sizeof err);
    CHECK_MSG(t != NULL, "%s", err);
    if (!t) return;
    rt_batcher g, h[2], v;
    CHECK(rt_batcher_tokens(&g, t, T, 8, RT_BATCH_TRAIN, 7, 0, err, sizeof err) == 0);
    CHECK(g.batches == 5000 / 17 / 8 && g.label_elems == T && g.ow == T);
    int32_t all[8 * 16], allt[8 * 16], half[4 * 16], halft[4 * 16];
    CHECK(rt_batcher_fill(&g, NULL, 1, 3 * 8, 8, (float *)(void *)all, allt) == 8);
    for (int j = 0; j < 8; j++) {
        int64_t o = rt_tokens_offset(t, T, 7, g.batches + 3, j); /* epoch 1, batch 3 */
        CHECK(all[j * T] == o % 1000 && allt[j * T + T - 1] == (o + T) % 1000);
    }
    for (int k = 0; k < 2; k++) {
        CHECK(rt_batcher_tokens(&h[k], t, T, 4, RT_BATCH_TRAIN, 7, 0, err, sizeof err) == 0);
        CHECK(rt_batcher_shard(&h[k], 8, 4 * k, err, sizeof err) == 0);
        CHECK(h[k].batches == g.batches);
        rt_batcher_fill(&h[k], NULL, 1, 3 * h[k].stride + h[k].offset, 4, (float *)(void *)half,
                        halft);
        CHECK(memcmp(half, all + 4 * k * T, sizeof half) == 0);
        CHECK(memcmp(halft, allt + 4 * k * T, sizeof halft) == 0);
    }
    CHECK(rt_batcher_tokens(&v, t, T, 4, RT_BATCH_EVAL, 7, 10, err, sizeof err) == 0);
    CHECK(v.windows == 10 && v.batches == 3);
    CHECK(rt_batcher_fill(&v, NULL, 0, 8, 4, (float *)(void *)half, halft) == 2);
    CHECK(half[0] == 8 * T && halft[T - 1] == 9 * T && half[2 * T] == 0 && halft[4 * T - 1] == 0);
    CHECK(rt_batcher_tokens(&g, t, T, 300, RT_BATCH_TRAIN, 7, 0, err, sizeof err) != 0 &&
          strstr(err, "do not fill one batch of 300"));
    rt_tokens_free(t);
}

/* Every bad file: one message naming it. */
TEST(token_files_refused) {
    char path[512];
    struct {
        const char *bytes;
        size_t n;
        int64_t block, vocab;
        const char *want;
    } bad[] = {
        {"\x01\x00\x02", 3, 1, 0, "3 bytes, an odd size: not uint16 tokens"},
        {"\x01\x00\x02\x00", 4, 2, 0, "2 tokens; a window of block 2 needs at least 3"},
        {"\x01\x00\x02\x01\x03\x00", 6, 2, 256,
         "token 258 at position 1 is outside the vocabulary of 256"},
        {"", 0, 1, 0, "0 tokens; a window of block 1 needs at least 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.bin", dir, i);
        write_bytes(path, bad[i].bytes, bad[i].n);
        err[0] = 0;
        rt_tokens *t = rt_tokens_load(path, bad[i].block, bad[i].vocab, err, sizeof err);
        CHECK_MSG(t == NULL, "case %zu loaded", i);
        rt_tokens_free(t);
        CHECK_MSG(strstr(err, path) && strstr(err, bad[i].want), "case %zu: %s", i, err);
    }
    CHECK(rt_tokens_load(dir, 4, 0, err, sizeof err) == NULL); /* a folder */
    CHECK_MSG(strstr(err, dir) != NULL, "%s", err);
    snprintf(path, sizeof path, "%s/none.bin", dir);
    CHECK(rt_tokens_load(path, 4, 0, err, sizeof err) == NULL && strstr(err, path));
}

/* scripts/text_tokens.py's files read back here as the bytes of the
 * text: the first 90% in train.bin, the rest in val.bin, every id a byte. */
TEST(text_tokens_script_reads_back) {
    char text[512], out[512], cmd[1400], path[600];
    snprintf(text, sizeof text, "%s/input.txt", dir);
    snprintf(out, sizeof out, "%s/tok", dir);
    uint8_t bytes[1000];
    for (int i = 0; i < 1000; i++) bytes[i] = (uint8_t)(i * 37 + 11); /* every byte value */
    write_bytes(text, bytes, sizeof bytes);
    snprintf(cmd, sizeof cmd, "python3 scripts/text_tokens.py %s %s", text, out);
    int rc = system(cmd);
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 127) {
        fprintf(stderr, "  (skipped: no python3)\n");
        return;
    }
    CHECK_MSG(rc == 0, "%s: status %d", cmd, rc);
    snprintf(path, sizeof path, "%s/train.bin", out);
    rt_tokens *tr = rt_tokens_load(path, 8, 256, err, sizeof err);
    snprintf(path, sizeof path, "%s/val.bin", out);
    rt_tokens *va = rt_tokens_load(path, 8, 256, err, sizeof err);
    CHECK_MSG(tr && va, "%s", err);
    if (tr && va) {
        CHECK(tr->count == 900 && va->count == 100);
        for (int i = 0; i < 900; i++) CHECK(tr->tok[i] == bytes[i]);
        for (int i = 0; i < 100; i++) CHECK(va->tok[i] == bytes[900 + i]);
    }
    rt_tokens_free(tr), rt_tokens_free(va);
    snprintf(path, sizeof path, "%s/meta.txt", out);
    size_t len = 0;
    char *meta = (char *)base_file_read(path, 4096, &len, err, sizeof err);
    CHECK_MSG(meta && !strcmp(meta, "vocab 256 train 900 val 100\n"), "%s", meta ? meta : err);
    free(meta);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/dpc_test_data_%d", (int)getpid());
    mkdir(dir, 0755);
    RUN(keys_are_pure_and_distinct);
    RUN(synthetic_is_deterministic_and_shaped);
    RUN(synthetic_is_learnable);
    RUN(cifar_reader_reads_records);
    RUN(cifar_reader_refuses_bad_files);
    RUN(cifar_parse_from_memory);
    RUN(eval_batches_normalise_and_pad);
    RUN(train_batches_shuffle_crop_and_mirror);
    RUN(batcher_refuses_mismatches);
    RUN(known_pixel_lands_where_it_should);
    RUN(crop_offsets_uniform_and_mirror_half);
    RUN(normalisation_values);
    RUN(determinism_per_seed);
    RUN(npy_streams_the_same_pixels);
    RUN(npy_refuses_more_than_memory);
    RUN(token_windows_by_seed_step_and_replica);
    RUN(token_batcher_steps_shards_and_val);
    RUN(token_files_refused);
    RUN(text_tokens_script_reads_back);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return harness_done();
}
