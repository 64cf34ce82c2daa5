/* runtime/train/setup.c — a run's set-up before its first step: the plan's
 * programs and the outputs checked, the data opened, the replicas built. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/file.h"
#include "runtime/check.h"
#include "runtime/train/internal.h"
#include "runtime/log.h"

int rt_run_find_node(const ir_graph *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    return -1;
}

const ir_node *rt_train_need(const ir_graph *g, const char *prog, const char *name, int ndim,
                             ir_dtype dt, char *err, size_t errlen) {
    int i = rt_run_find_node(g, name);
    if (i < 0) {
        base_fail(err, errlen, "the plan's %s program has no tensor '%s'", prog, name);
        return NULL;
    }
    const ir_node *n = &g->nodes[i];
    if (n->type.ndim != ndim || n->type.dtype != dt) {
        char buf[64];
        base_fail(err, errlen, "the plan's %s program has '%s' of type %s; expected rank %d %s",
                  prog, name, ir_type_str(&n->type, buf, sizeof buf), ndim,
                  dt == IR_I32 ? "i32" : "f32");
        return NULL;
    }
    return n;
}

int rt_train_files(const rt_train_options *o, base_file_set *s, char *err, size_t errlen) {
    /* .npy's names and data tokens' default ones */
    static const char *const npy_files[] = {"train_x.npy", "train_y.npy", "test_x.npy",
                                            "test_y.npy",  "train.bin",   "val.bin"};
    char ckpt[4200], files[RT_CIFAR10_FILES + 6][4200];
    const char *data = o->data ? o->data : getenv("DPC_DATA");
    int rc = 0, nfiles = 0;
    /* CIFAR-10's and .npy's names, whichever the plan reads (an image
     * folder's files are not listed: an output among them is not caught). */
    if (data && *data && strcmp(data, "synthetic")) {
        rt_data_cifar10_paths(data, files);
        for (int i = 0; i < 6; i++)
            snprintf(files[RT_CIFAR10_FILES + i], sizeof files[0], "%.4000s/%s", data,
                     npy_files[i]);
        nfiles = RT_CIFAR10_FILES + 6;
    }
    if (o->plan_path)
        rc = base_file_set_add(s, BASE_FILE_INPUT, "the plan", o->plan_path, err, errlen);
    if (!rc && o->load_params)
        rc = base_file_set_add(s, BASE_FILE_INPUT, "--load-params", o->load_params, err, errlen);
    if (!rc && o->name_map)
        rc = base_file_set_add(s, BASE_FILE_INPUT, "--name-map", o->name_map, err, errlen);
    for (int i = 0; i < nfiles && !rc; i++)
        rc = base_file_set_add(s, BASE_FILE_INPUT, "a --data file", files[i], err, errlen);
    /* The job's checkpoint is rank 0's to write (write_checkpoint); --resume
     * reads it too, and an output is checked against inputs and outputs. */
    if (!rc && o->checkpoint && o->rank == 0) {
        base_path_join(ckpt, sizeof ckpt, o->checkpoint, RT_CKPT_FILE);
        rc = base_file_set_add(s, BASE_FILE_OUTPUT, "--checkpoint", ckpt, err, errlen);
    }
    if (!rc && o->metrics)
        rc = base_file_set_add(s, BASE_FILE_OUTPUT, "--metrics", o->metrics, err, errlen);
    if (!rc && o->save_params)
        rc = base_file_set_add(s, BASE_FILE_OUTPUT, "--save-params", o->save_params, err, errlen);
    return rc;
}

/* Outputs that name an input of this run would destroy it, outputs that
 * name each other would lose one; outputs that cannot be written would
 * fail only after the training. All are refused before any work. Files
 * compare by where they land, existing or not (base_file_set). */
int rt_run_check_outputs(rt_run *r) {
    const rt_train_options *o = r->o;
    char *err = r->err;
    size_t el = sizeof r->err;
    base_file_set *s = base_file_set_new();
    int rc = rt_train_files(o, s, err, el);
    base_file_set_free(s);
    if (rc) return rt_run_fail(r, "%s", err);
    if (!o->benchmark) { /* --benchmark writes neither */
        /* With --resume rt_run_resume checks the checkpoint's metrics file. */
        if (o->metrics && !o->resume &&
            (o->metrics_dir
                 ? base_file_check_in(o->metrics_dir, o->metrics_name, "--metrics", err, el)
                 : base_file_check_writable(o->metrics, "--metrics", err, el)))
            return rt_run_fail(r, "%s", err);
        if (o->save_params && base_file_check_writable(o->save_params, "--save-params", err, el))
            return rt_run_fail(r, "%s", err);
    }
    /* checkpoint.safetensors is a name of dprun's own in the user's folder. */
    if (o->checkpoint && o->rank == 0 &&
        (base_file_check_dir(o->checkpoint, NULL, "--checkpoint", err, el) ||
         base_file_check_in(o->checkpoint, RT_CKPT_FILE, "--checkpoint", err, el)))
        return rt_run_fail(r, "%s", err);
    return 0;
}

int rt_run_check_programs(rt_run *r) {
    const ir_graph *tg = r->plan->train, *eg = r->plan->eval;
    if (!tg || !eg) return rt_run_fail(r, "the plan lacks its train or eval program");
    ir_optimizer opt = r->plan->schedule.optimizer;
    if (r->o->momentum_correction && (opt == IR_OPT_LAMB || opt == IR_OPT_ADAMW))
        return rt_run_fail(r,
                           "--momentum-correction rescales a velocity that carries the lr (sgd, "
                           "lars); %s's moments carry none: drop the flag",
                           ir_optimizer_names[opt]);
    char *err = r->err;
    size_t el = sizeof r->err;
    r->tokens = !strcmp(r->t.dataset, "tokens");
    r->xname = r->tokens ? "tokens" : "image", r->yname = r->tokens ? "targets" : "label";
    if (r->tokens) return rt_run_check_token_programs(r);
    const ir_node *img = rt_train_need(tg, "train", "image", 4, IR_F32, err, el);
    const ir_node *lab = img ? rt_train_need(tg, "train", "label", 1, IR_I32, err, el) : NULL;
    const ir_node *lr = lab ? rt_train_need(tg, "train", "lr", 1, IR_F32, err, el) : NULL;
    const ir_node *gs = lr ? rt_train_need(tg, "train", "grad_scale", 1, IR_F32, err, el) : NULL;
    const ir_node *loss = gs ? rt_train_need(tg, "train", "loss", 1, IR_F32, err, el) : NULL;
    const ir_node *eimg = loss ? rt_train_need(eg, "eval", "image", 4, IR_F32, err, el) : NULL;
    const ir_node *lg = eimg ? rt_train_need(eg, "eval", "logits", 2, IR_F32, err, el) : NULL;
    if (!lg) {
        if (lab && !lr)
            strncat(err, " (was the plan compiled without the optimizer pass?)",
                    el - strlen(err) - 1);
        return rt_run_fail(r, "%s", err);
    }
    r->batch = (int)img->type.dim[0];
    r->c = (int)img->type.dim[1], r->h = (int)img->type.dim[2], r->w = (int)img->type.dim[3];
    r->eval_batch = (int)eimg->type.dim[0];
    r->classes = (int)lg->type.dim[1];
    if (lab->type.dim[0] != r->batch || loss->type.dim[0] != r->batch)
        return rt_run_fail(
            r, "the plan's train program has label/loss batches unlike its image batch %d",
            r->batch);
    if (eimg->type.dim[1] != r->c || eimg->type.dim[2] != r->h || eimg->type.dim[3] != r->w ||
        lg->type.dim[0] != r->eval_batch)
        return rt_run_fail(r, "the plan's eval program takes other images than its train program");
    if (r->classes < 10 && !strcmp(r->t.dataset, "cifar10"))
        return rt_run_fail(r, "the model has %d classes; the datasets have 10", r->classes);
    int el_i = rt_run_find_node(eg, "label");
    r->eval_has_label = el_i >= 0 && eg->nodes[el_i].op == IR_OP_INPUT;
    r->lab = 1, r->logit_elems = (size_t)r->classes;
    return 0;
}

/* The data a run reads: --data, else $DPC_DATA; NULL: the synthetic set. */
static const char *data_spec(const rt_train_options *o) {
    const char *spec = o->data;
    const char *env = getenv("DPC_DATA");
    if (!spec && env && *env) spec = env;
    return spec && strcmp(spec, "synthetic") ? spec : NULL;
}

/* One split of the data section's dataset at spec, records shaped for the
 * program's c x h x w image input; images decoded on `threads` threads.
 * NULL + message. */
static rt_dataset *open_dataset(const ir_train *t, const char *spec, int train, int c, int h, int w,
                                int threads, char *err, size_t errlen) {
    if (!strcmp(t->dataset, "imagefolder")) {
        /* Records are side x side when cropped at random, else already the
         * centre crop the program takes. */
        int side = t->resize ? t->resize : h > w ? h : w;
        if (!rt_image_available()) {
            base_fail(err, errlen, "%s: %s", spec, RT_IMAGE_MISSING);
            return NULL;
        }
        if (c != 3) {
            base_fail(
                err, errlen,
                "%s: an image folder gives 3-channel images; the program's image input has %d",
                spec, c);
            return NULL;
        }
        if (side < h || side < w) {
            base_fail(err, errlen, "resize %d is smaller than the program's %dx%d images", side, h,
                      w);
            return NULL;
        }
        return rt_data_imagefolder(spec, train, side, t->random_crop ? side : h,
                                   t->random_crop ? side : w, threads, rt_run_stop_pending, err,
                                   errlen);
    }
    if (!strcmp(t->dataset, "npy")) return rt_data_npy(spec, train, c, err, errlen);
    rt_dataset *ds = rt_data_cifar10(spec, train, err, errlen);
    char other[4200];
    base_path_join(other, sizeof other, spec, "train");
    struct stat sb;
    if (!ds && stat(other, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* the wrong kind of folder */
        size_t n = strlen(err);
        snprintf(err + n, errlen - n,
                 "; %s looks like an image folder, but the plan's data section reads cifar10 "
                 "(an image folder needs `data imagefolder { ... }`)",
                 spec);
    }
    return ds;
}

/* The run's data section names a source that needs --data. */
static int need_spec(const ir_train *t, char *err, size_t errlen) {
    return base_fail(err, errlen,
                     "the plan's data section reads %s: --data DIR names the %s (or set $DPC_DATA)",
                     t->dataset, strcmp(t->dataset, "npy") ? "image folder" : ".npy folder");
}

long rt_train_steps_per_epoch(const dpc_plan *plan, const rt_train_options *o, int global_batch,
                              char *err, size_t errlen) {
    const char *spec = data_spec(o);
    const ir_train *t = &plan->schedule;
    int64_t count = RT_SYNTHETIC_TRAIN;
    if (!strcmp(t->dataset, "tokens"))
        return rt_run_token_steps(plan, spec, global_batch, err, errlen);
    if (!spec && strcmp(t->dataset, "cifar10")) return need_spec(t, err, errlen);
    const char *env = getenv("DPC_DATA");
    int named = o->data || (env && *env); /* --data synthetic: asked for, nothing to say */
    if (!spec && !named && count / global_batch > 0) /* a CIFAR-10 folder counts its own */
        rt_log(RT_LOG_NOTE,
               "no --data: %lld steps per epoch, the built-in synthetic set's (%lld training "
               "images / global batch %d); --data DIR counts the folder's",
               (long long)(count / global_batch), (long long)count, global_batch);
    if (spec) { /* the folder's records, as the run would count them */
        int i = rt_run_find_node(plan->train, "image");
        const int64_t *d = i >= 0 ? plan->train->nodes[i].type.dim : NULL;
        if (!d || plan->train->nodes[i].type.ndim != 4)
            return base_fail(err, errlen, "the plan's train program has no rank-4 'image' input");
        rt_dataset *ds = open_dataset(t, spec, 1, (int)d[1], (int)d[2], (int)d[3],
                                      o->data_workers > 1 ? o->data_workers : 1, err, errlen);
        if (!ds) return -1;
        count = ds->count;
        rt_dataset_free(ds);
    }
    if (count / global_batch == 0)
        return base_fail(err, errlen, "%lld training images do not fill one global batch of %d",
                         (long long)count, global_batch);
    return (long)(count / global_batch);
}

int rt_run_open_data(rt_run *r) {
    const rt_train_options *o = r->o;
    const char *spec = data_spec(o), *env = getenv("DPC_DATA");
    if (r->tokens) return rt_run_open_tokens(r, spec);
    if (!spec && strcmp(r->t.dataset, "cifar10")) {
        need_spec(&r->t, r->err, sizeof r->err);
        return rt_run_fail(r, "%s", r->err);
    }
    if (!spec) {
        int named = o->data || (env && *env); /* "synthetic" asked for */
        if (o->rank == 0)
            rt_log(RT_LOG_NOTE,
                   "%s: using the built-in synthetic dataset (%d train / %d test "
                   "images, 10 classes); --data DIR trains on CIFAR-10",
                   named ? "--data synthetic" : "no --data and $DPC_DATA unset", RT_SYNTHETIC_TRAIN,
                   RT_SYNTHETIC_TEST);
        r->train_ds = rt_data_synthetic(RT_SYNTHETIC_TRAIN, r->c, r->h, r->w, 1, RT_SYNTHETIC_SEED);
        r->test_ds = rt_data_synthetic(RT_SYNTHETIC_TEST, r->c, r->h, r->w, 0, RT_SYNTHETIC_SEED);
    } else {
        /* The decoding threads: those that prepare batches later. */
        int threads = o->data_workers > 1 ? o->data_workers : 1;
        r->train_ds =
            open_dataset(&r->t, spec, 1, r->c, r->h, r->w, threads, r->err, sizeof r->err);
        if (r->train_ds)
            r->test_ds =
                open_dataset(&r->t, spec, 0, r->c, r->h, r->w, threads, r->err, sizeof r->err);
        if (!r->test_ds) return rt_run_fail(r, "%s", r->err);
        /* An image folder's classes are its folders; .npy labels need only fit. */
        if (!strcmp(r->t.dataset, "imagefolder") && r->classes != r->train_ds->classes)
            return rt_run_fail(r,
                               "the model has %d classes but %s has %d (its train/ class folders)",
                               r->classes, spec, r->train_ds->classes);
        const rt_dataset *most =
            r->train_ds->classes >= r->test_ds->classes ? r->train_ds : r->test_ds;
        if (!strcmp(r->t.dataset, "npy") && most->classes > r->classes)
            return rt_run_fail(r, "the model has %d classes but %s has label %d (%s)", r->classes,
                               spec, most->classes - 1,
                               most == r->train_ds ? "train_y.npy" : "test_y.npy");
    }
    /* This process's replicas' slice of each global batch (all of it
     * without MPI). */
    int slice = r->batch * r->local * r->accum;
    if (rt_batcher_init(&r->train_b, r->train_ds, &r->t, slice, RT_BATCH_TRAIN, o->seed, r->c, r->h,
                        r->w, r->err, sizeof r->err) ||
        (o->ranks > 1 &&
         rt_batcher_shard(&r->train_b, r->global, o->rank * slice, r->err, sizeof r->err)) ||
        rt_batcher_init(&r->test_b, r->test_ds, &r->t, r->eval_batch, RT_BATCH_EVAL, o->seed, r->c,
                        r->h, r->w, r->err, sizeof r->err) ||
        rt_batcher_init(&r->train_eval_b, r->train_ds, &r->t, r->eval_batch, RT_BATCH_TRAIN_EVAL,
                        o->seed, r->c, r->h, r->w, r->err, sizeof r->err))
        return rt_run_fail(r, "%s", r->err);
    /* --eval-batches: every accuracy pass reads the first batches only. */
    for (int k = 0; k < 2 && o->eval_batches > 0; k++) {
        rt_batcher *b = k ? &r->train_eval_b : &r->test_b;
        if (b->batches > o->eval_batches) b->batches = o->eval_batches;
    }
    if (o->no_shuffle) r->train_b.shuffle = 0;
    if (o->no_augment) r->train_b.augment = r->train_eval_b.augment = 0;
    return 0;
}

/* The replicas of this process (a cuda backend each on the GPU), joined by
 * their communicator (rt_replicas_coll_new), with identical weights:
 * global replica 0's, from the seed or --load-params (read by rank 0 only,
 * so the file need only exist there). */
/* --load-params into replica 0's store (runtime/files/files.h). */
static int load_params(rt_run *r) {
    const rt_train_options *o = r->o;
    rt_params_load_options lo = {.path = o->load_params,
                                 .name_map = o->name_map,
                                 .allow_missing = o->allow_missing,
                                 .n_allow_missing = o->n_allow_missing,
                                 .allow_unused = o->allow_unused};
    return rt_params_load(r->plan, r->st, &lo, r->err, sizeof r->err);
}

int rt_run_build(rt_run *r) {
    const rt_train_options *o = r->o;
    if (o->tune) rt_conv_retune(); /* before any executor looks a choice up */
    rt_conv_set_nondeterministic(o->nondeterministic);
    if (o->nondeterministic && r->be->host_memory && o->rank == 0)
        rt_log(RT_LOG_NOTE,
               "--nondeterministic changes nothing on the cpu backend: its kernels and "
               "oneDNN's sum in a fixed order");
    /* Before the first kernel module loads: replicas share the cores. */
    if (r->be->host_memory) rt_replicas_cpu_threads(r->local);
    r->bes = calloc((size_t)r->local, sizeof *r->bes);
    RT_CHECK_ALLOC(r->bes);
    if (rt_replicas_open_backends(r->be, r->local, r->bes, &r->devices, r->err, sizeof r->err))
        return rt_run_fail(r, "%s", r->err);
    r->coll =
        rt_replicas_coll_new_accum(r->bes, r->local, o->ranks, r->accum, r->err, sizeof r->err);
    if (!r->coll && r->err[0]) return rt_run_fail(r, "%s", r->err);
    r->R =
        rt_replicas_new_accum(r->bes, r->plan, r->local, r->accum, r->coll, r->err, sizeof r->err);
    if (!r->R) return rt_run_fail(r, "%s", r->err);
    rt_replicas_set_seed(r->R, o->seed);
    r->st = rt_replicas_store(r->R, 0);
    if (o->shard_optimizer && rt_replicas_shard(r->R, r->err, sizeof r->err))
        return rt_run_fail(r, "%s", r->err);
    r->overlap = rt_replicas_overlap(r->R);
    if (r->overlap && rt_debug_level() >= 1 && o->rank == 0)
        rt_log(RT_LOG_DEBUG, "the next batch's copy to the device overlaps each step "
                             "(DPC_INPUT_OVERLAP=0 turns it off)");
    int bad = 0;
    /* Seeded values first: what a partial --load-params lacks keeps them. */
    if (rt_store_init(r->st, r->plan->train, &r->t, o->seed)) {
        rt_store_failed(r->st, r->err, sizeof r->err);
        bad = rt_run_fail(r, "%s", r->err);
    } else if (o->load_params && o->rank == 0 && load_params(r))
        bad = rt_run_fail(r, "%s", r->err);
    /* Every process learns whether rank 0 could read the file before any
     * waits for its weights. */
    if (rt_mpi_any(bad)) return 1;
    /* Every process reads its results at the same steps (the loss sum and
     * the stop check are collectives): one step late only when all can. */
    r->lag = r->overlap && !o->on_nan_skip;
    /* A language model's --log-every rows evaluate the val loss after
     * their step: on the parameters that step left, not while the next runs. */
    if (r->tokens && o->log_every > 0) r->lag = 0;
    if (o->ranks > 1 && rt_mpi_any(!r->lag)) r->lag = 0;
    if (rt_replicas_sync(r->R, r->err, sizeof r->err)) return rt_run_fail(r, "%s", r->err);
    r->loss = malloc(sizeof(float) * (size_t)r->batch * (size_t)r->local * (size_t)r->accum);
    r->logits = malloc(sizeof(float) * (size_t)r->eval_batch * r->logit_elems * (size_t)r->local);
    RT_CHECK_ALLOC(r->loss && r->logits);
    return 0;
}
