/* runtime/train/predict.c — `dprun predict`: a trained model's top classes
 * for image files.
 *
 * The run is a training run's set-up without the data: the same checks of
 * the device and the plan's programs (rt_run_check), the same replica with
 * --load-params' weights (rt_run_build). Each image is decoded and fitted
 * as the eval set is (shorter side to the data section's resize, centre
 * crop to the program's input), normalised by the same batcher, and the
 * eval program (BatchNorm in inference mode) runs on eval-batch-sized
 * batches; softmax over its logits gives the probabilities.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "runtime/check.h"
#include "runtime/host.h"
#include "runtime/train/internal.h"

/* Every input as image paths: a file itself, a folder its files. */
static char **expand(const rt_predict_options *po, int *n, char *err, size_t errlen) {
    char **all = NULL;
    int count = 0;
    for (int i = 0; i < po->ninputs; i++) {
        struct stat sb;
        int m = 1;
        char **got = NULL;
        if (stat(po->inputs[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
            got = rt_data_image_files(po->inputs[i], &m, err, errlen);
            if (!got) {
                rt_names_free(all, count);
                return NULL;
            }
        }
        if (m > RT_PREDICT_MAX_IMAGES - count) {
            for (int k = 0; k < m && got; k++) free(got[k]);
            free(got);
            rt_names_free(all, count);
            base_fail(err, errlen,
                      "more than %d images named; dprun predict reads at most %d at once",
                      RT_PREDICT_MAX_IMAGES, RT_PREDICT_MAX_IMAGES);
            return NULL;
        }
        all = realloc(all, sizeof *all * (size_t)(count + m));
        RT_CHECK_ALLOC(all);
        for (int k = 0; k < m; k++) {
            all[count + k] = got ? got[k] : strdup(po->inputs[i]);
            RT_CHECK_ALLOC(all[count + k]);
        }
        free(got);
        count += m;
    }
    *n = count;
    return all;
}

/* The images fitted to the program's input: a dataset of labels 0. */
static rt_dataset *load_images(char **paths, int n, int side, int h, int w, char *err,
                               size_t errlen) {
    rt_dataset *ds = calloc(1, sizeof *ds);
    RT_CHECK_ALLOC(ds);
    snprintf(ds->name, sizeof ds->name, "the images");
    ds->c = 3, ds->h = h, ds->w = w;
    size_t rec = (size_t)3 * (size_t)h * (size_t)w;
    /* Held decoded at once: refused up front when that cannot fit. */
    int64_t bytes = base_bytes_mul((int64_t)rec, n), host = rt_host_memory();
    if (host > 0 && bytes > host / 2) {
        char need[32], have[32];
        base_fail(err, errlen,
                  "%d images of 3x%dx%d take %s decoded (they are held in memory), more than half "
                  "of this machine's %s: name fewer images at once",
                  n, h, w, base_bytes_str(bytes, need, sizeof need),
                  base_bytes_str(host, have, sizeof have));
        free(ds);
        return NULL;
    }
    ds->pixels = malloc(rec * (size_t)n + 1);
    ds->labels = calloc((size_t)n + 1, 1);
    RT_CHECK_ALLOC(ds->pixels && ds->labels);
    if (rt_images_fit_all((const char *const *)paths, n, side, h, w, RT_PIPELINE_WORKERS, NULL,
                          ds->pixels, err, errlen)) {
        rt_dataset_free(ds);
        return NULL;
    }
    ds->count = n;
    return ds;
}

/* p as a JSON number in the fewest digits that read back as p (a tiny
 * probability keeps its digits, 1e-19 not 0.000000); null when not finite
 * (a NaN logit), which JSON has no number for. */
static void put_prob(FILE *out, double p) {
    if (!isfinite(p)) {
        fputs("null", out);
        return;
    }
    char s[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(s, sizeof s, "%.*g", digits, p);
        if (strtod(s, NULL) == p) break;
    }
    fputs(s, out);
}

/* One image's line: the top k of its logits as probabilities. */
static void print_top(FILE *out, const char *path, const float *logits, int classes, int k,
                      char **names, int nnames, int json) {
    double most = logits[0], sum = 0;
    for (int c = 1; c < classes; c++)
        if (logits[c] > most) most = logits[c];
    for (int c = 0; c < classes; c++) sum += exp((double)logits[c] - most);
    int taken[RT_PREDICT_MAX_TOP];
    if (json) {
        fputs("{\"file\": ", out);
        rt_json_string(out, path);
        fputs(", \"top\": [", out);
    } else {
        char shown[1024];
        fprintf(out, "%s:", base_esc(shown, sizeof shown, path));
    }
    for (int i = 0; i < k; i++) { /* the i-th largest; ties: the lower class */
        int best = -1;
        for (int c = 0; c < classes; c++) {
            int used = 0;
            for (int j = 0; j < i; j++) used |= taken[j] == c;
            if (!used && (best < 0 || logits[c] > logits[best])) best = c;
        }
        taken[i] = best;
        double p = exp((double)logits[best] - most) / sum;
        const char *name = best < nnames ? names[best] : NULL;
        if (json) {
            fprintf(out, "%s{\"class\": %d, \"name\": ", i ? ", " : "", best);
            if (name)
                rt_json_string(out, name);
            else
                fputs("null", out);
            fputs(", \"prob\": ", out);
            put_prob(out, p);
            fputc('}', out);
        } else if (name) {
            fprintf(out, "%s %s %.4f", i ? "," : "", BASE_ESC(name), p);
        } else {
            fprintf(out, "%s %d %.4f", i ? "," : "", best, p);
        }
    }
    fputs(json ? "]}\n" : "\n", out);
}

/* The batches through the eval program, each image's line printed. */
static int classify(rt_run *r, const rt_batcher *b, char **paths, const rt_predict_options *po,
                    char **names, int nnames) {
    rt_exec *eval = rt_replicas_eval(r->R, 0);
    size_t n = (size_t)r->eval_batch;
    float *img = malloc(sizeof(float) * r->img * n);
    int32_t *lab = malloc(sizeof(int32_t) * n);
    RT_CHECK_ALLOC(img && lab);
    int k = po->top < r->classes ? po->top : r->classes, rc = 0;
    for (int64_t bi = 0; bi < b->batches && !rc; bi++) {
        int real = rt_batcher_fill(b, NULL, 0, bi * (int64_t)n, (int)n, img, lab);
        if (rt_exec_set_input(eval, "image", img, sizeof(float) * r->img * n) ||
            (r->eval_has_label && rt_exec_set_input(eval, "label", lab, sizeof(int32_t) * n)))
            rc = rt_run_fail(r, "the eval program refused its inputs");
        else if (rt_exec_run(eval, r->err, sizeof r->err))
            rc = rt_run_fail(r, "predict failed: %s", r->err);
        else if (rt_exec_get(eval, "logits", r->logits, sizeof(float) * n * (size_t)r->classes))
            rc = rt_run_fail(r, "cannot read the eval program's logits");
        for (int i = 0; i < real && !rc; i++)
            print_top(r->o->out, paths[bi * (int64_t)n + i],
                      r->logits + (size_t)i * (size_t)r->classes, r->classes, k, names, nnames,
                      po->json);
    }
    free(img);
    free(lab);
    return rc;
}

int rt_predict(const dpc_plan *plan, const rt_predict_options *po, char *err, size_t errlen) {
    rt_train_options o = rt_train_defaults();
    o.device = po->device ? po->device : "auto";
    o.load_params = po->load_params;
    o.plan_path = po->plan_path;
    o.data_workers = 0;
    o.out = po->out ? po->out : stdout;
    rt_run *r = calloc(1, sizeof *r);
    RT_CHECK_ALLOC(r);
    r->plan = plan, r->o = &o;
    rt_progress_init(&r->bar, stderr);
    char **paths = NULL, **names = NULL;
    int npaths = 0, nnames = 0, rc = 0;
    rt_dataset *ds = NULL;
    if (!po->load_params)
        rc = rt_run_fail(r, "predict needs the trained weights: --load-params FILE");
    else if (po->top < 1 || po->top > RT_PREDICT_MAX_TOP)
        rc = rt_run_fail(r, "--top must be in 1..%d, got %d", RT_PREDICT_MAX_TOP, po->top);
    if (!rc && !rt_image_available()) rc = rt_run_fail(r, "predict: %s", RT_IMAGE_MISSING);
    if (!rc) rc = rt_run_check(r, plan, &o);
    if (!rc && r->tokens)
        rc = rt_run_fail(r, "predict classifies images; %s is a language model (data tokens)",
                         plan->model);
    if (!rc && r->c != 3)
        rc = rt_run_fail(r, "predict reads RGB images; the program's image input has %d channels",
                         r->c);
    if (!rc && po->classes) {
        names = rt_data_class_names(po->classes, &nnames, r->err, sizeof r->err);
        if (!names)
            rc = rt_run_fail(r, "--classes %s", r->err);
        else if (nnames != r->classes)
            rc = rt_run_fail(r, "--classes %s: %d names, but the model has %d classes", po->classes,
                             nnames, r->classes);
    }
    if (!rc && !(paths = expand(po, &npaths, r->err, sizeof r->err)))
        rc = rt_run_fail(r, "%s", r->err);
    int side = plan->schedule.resize ? plan->schedule.resize : r->h > r->w ? r->h : r->w;
    if (!rc && (side < r->h || side < r->w))
        rc = rt_run_fail(r, "resize %d is smaller than the program's %dx%d images", side, r->h,
                         r->w);
    if (!rc && !(ds = load_images(paths, npaths, side, r->h, r->w, r->err, sizeof r->err)))
        rc = rt_run_fail(r, "%s", r->err);
    if (!rc) {
        r->local = r->total = r->accum = 1;
        r->global = r->batch;
        r->img = (size_t)r->c * (size_t)r->h * (size_t)r->w;
        rc = rt_run_build(r);
    }
    /* The eval set's treatment: no padding or crop (the images already
     * have the program's size), the data section's normalisation. */
    rt_batcher b;
    ir_train t = r->t;
    t.pad = t.random_crop = t.random_mirror = 0;
    if (!rc && rt_batcher_init(&b, ds, &t, r->eval_batch, RT_BATCH_EVAL, 0, r->c, r->h, r->w,
                               r->err, sizeof r->err))
        rc = rt_run_fail(r, "%s", r->err);
    if (!rc) rc = classify(r, &b, paths, po, names, nnames);
    rt_dataset_free(ds);
    rt_names_free(paths, npaths);
    rt_names_free(names, nnames);
    rt_run_free(r);
    if (errlen) err[0] = 0;
    if (rc && r->error[0]) base_fail(err, errlen, "%s", r->error);
    free(r);
    return rc;
}
