/* runtime/train/train.c — the training loop: data, schedule, steps, log lines,
 * accuracy, metrics, parameter files.
 *
 * One step: take the next global batch from the input pipeline (worker
 * threads prepared it while the previous steps ran), hand each replica its
 * slice, set lr and grad_scale = 1/global batch, run the train program
 * (forward, backward, all-reduce of the gradients, update: one compiled
 * program per replica, runtime/train/replicas.h), read back the per-sample
 * losses. On cuda (rt_replicas_overlap) the next batch is taken and its
 * copy enqueued behind the step before the losses are read, so the device
 * does not wait for the host between steps (step()).
 *
 * Data parallelism. `--gpus N` runs N replicas, `mpirun -np P` P processes
 * of them: R = P x N replicas, global batch G = R x b (b: the plan's
 * per-device batch). Global replica g = rank x N + r takes samples
 * [g b, (g+1) b) of every global batch, so the global batch is the same
 * samples, in the same order, whatever R is split into; the gradients are
 * summed over all R replicas and scaled by 1/G. Every replica keeps its own
 * BatchNorm statistics (per-device BatchNorm, as Gluon); evaluation hands
 * the eval batches round-robin to the replicas, each using its own
 * statistics, as Gluon evaluates on a list of devices. Parameter files hold
 * replica 0's tensors. Under MPI only rank 0 prints and writes files. The article's log
 * lines go to `out`; a progress bar goes to stderr when it is a terminal.
 */
#include "runtime/train/train.h"
#include "ir/err.h"
#include "ir/file.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/device/device.h"
#include "runtime/check.h"
#include "runtime/clock.h"
#include "runtime/train/checkpoint.h"
#include "runtime/comm/comm.h"
#include "runtime/data/data.h"
#include "runtime/exec/exec.h"
#include "runtime/train/progress.h"
#include "runtime/train/replicas.h"
#include "runtime/train/safetensors.h"

rt_train_options rt_train_defaults(void) {
    rt_train_options o;
    memset(&o, 0, sizeof o);
    o.device = "auto";
    o.gpus = 1;
    o.ranks = 1;
    o.lr_scaling = -1;
    o.warmup_epochs = -1;
    o.steps = -1;
    o.data_workers = RT_PIPELINE_WORKERS;
    return o;
}

int rt_train_schedule(const dpc_plan *plan, const rt_train_options *o, ir_train *t, char *err,
                      size_t errlen) {
    *t = plan->schedule;
    if (o->lr_scaling >= 0) t->lr_scaling = (ir_lr_scaling)o->lr_scaling;
    if (o->warmup_epochs >= 0) t->warmup_epochs = o->warmup_epochs;
    if (o->lr < 0 || isnan(o->lr)) return ir_fail(err, errlen, "--lr must be positive, got %g", o->lr);
    if (o->lr > 0) {
        /* The dict keeps its shape: every entry scales with epoch 0's. */
        if (!(t->lr_value[0] > 0)) return ir_fail(err, errlen, "--lr: the plan's epoch-0 lr is %g", t->lr_value[0]);
        double k = o->lr / t->lr_value[0];
        for (int i = 0; i < t->lr_steps; i++) t->lr_value[i] *= k;
    }
    /* --epochs stops the run early or extends it with the dict's last
     * value; it does not squeeze the schedule, so a warmup is checked
     * against the longer of the two. */
    if (o->epochs > t->epochs) t->epochs = o->epochs;
    if (ir_train_check(t, err, errlen)) return -1;
    if (o->epochs > 0) t->epochs = o->epochs;
    if (o->gpus < 1) return ir_fail(err, errlen, "--gpus must be at least 1, got %d", o->gpus);
    return 0;
}

static int find_node(const ir_graph *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->nodes[i].name, name)) return i;
    return -1;
}

/* An input of the given name, rank and dtype; NULL + message otherwise. */
static const ir_node *need(const ir_graph *g, const char *prog, const char *name, int ndim,
                           ir_dtype dt, char *err, size_t errlen) {
    int i = find_node(g, name);
    if (i < 0) {
        ir_fail(err, errlen, "the plan's %s program has no tensor '%s'", prog, name);
        return NULL;
    }
    const ir_node *n = &g->nodes[i];
    if (n->type.ndim != ndim || n->type.dtype != dt) {
        char buf[64];
        ir_fail(err, errlen, "the plan's %s program has '%s' of type %s; expected rank %d %s", prog, name,
             ir_type_str(&n->type, buf, sizeof buf), ndim, dt == IR_I32 ? "i32" : "f32");
        return NULL;
    }
    return n;
}

/* ---- parameter files ---- */

/* What --save-params writes: every parameter and BatchNorm statistic in
 * definition order. The eval program holds exactly those (no optimizer
 * state), in the same order as the train program. */
static int saved_tensors(const dpc_plan *plan, const rt_store *st, int *idx) {
    int n = 0;
    for (int i = 0; i < plan->eval->n; i++) {
        const ir_node *nd = &plan->eval->nodes[i];
        if (!ir_is_persistent(nd->op)) continue;
        int k = rt_store_find(st, nd->name);
        if (k >= 0) idx[n++] = k;
    }
    return n;
}

static int save_params(const dpc_plan *plan, rt_store *st, const char *path, char *err, size_t errlen) {
    int *idx = malloc(sizeof(int) * (size_t)(rt_store_count(st) + 1));
    RT_CHECK_ALLOC(idx);
    int n = saved_tensors(plan, st, idx);
    rt_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    float **data = calloc((size_t)n + 1, sizeof *data);
    RT_CHECK_ALLOC(e);
    RT_CHECK_ALLOC(data);
    for (int i = 0; i < n; i++) {
        const ir_type *t = rt_store_type(st, idx[i]);
        data[i] = malloc(sizeof(float) * (size_t)ir_numel(t) + 1);
        RT_CHECK_ALLOC(data[i]);
        rt_store_read(st, idx[i], data[i]);
        e[i] = (rt_st_entry){rt_store_name(st, idx[i]), t->ndim, t->dim, data[i]};
    }
    const char *meta[] = {"producer", "dpc", "model", plan->model, NULL};
    int rc = rt_st_write(path, e, n, meta, err, errlen);
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    free(e);
    free(idx);
    return rc;
}

static int load_params(const dpc_plan *plan, rt_store *st, const char *path, char *err, size_t errlen) {
    rt_st_file *f = rt_st_read(path, err, errlen);
    if (!f) return -1;
    int rc = 0;
    /* Every tensor of the file must be one of ours, with our shape. */
    for (int i = 0; i < f->n && !rc; i++) {
        const rt_st_tensor *ft = &f->tensors[i];
        int k = rt_store_find(st, ft->name);
        if (k < 0) {
            rc = ir_fail(err, errlen, "%s: tensor '%s' is not a parameter of %s", path, ft->name, plan->model);
            break;
        }
        const ir_type *t = rt_store_type(st, k);
        int same = t->ndim == ft->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->dim[d] == ft->shape[d];
        if (!same) {
            char want[64], got[128] = "[";
            ir_type_str(t, want, sizeof want);
            for (int d = 0; d < ft->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "",
                         (long long)ft->shape[d]);
            strcat(got, "]");
            rc = ir_fail(err, errlen, "%s: tensor '%s' has shape %s; %s needs %s", path, ft->name, got,
                      plan->model, want);
            break;
        }
    }
    /* ... and every parameter and statistic must be there. */
    int *idx = malloc(sizeof(int) * (size_t)(rt_store_count(st) + 1));
    RT_CHECK_ALLOC(idx);
    int n = saved_tensors(plan, st, idx);
    for (int i = 0; i < n && !rc; i++)
        if (rt_st_find(f, rt_store_name(st, idx[i])) < 0)
            rc = ir_fail(err, errlen, "%s: no tensor '%s' (%s needs every parameter and BatchNorm statistic)",
                      path, rt_store_name(st, idx[i]), plan->model);
    free(idx);
    for (int i = 0; i < f->n && !rc; i++) {
        int k = rt_store_find(st, f->tensors[i].name);
        float *buf = malloc(sizeof(float) * (size_t)f->tensors[i].numel + 1);
        RT_CHECK_ALLOC(buf);
        rt_st_copy(f, i, buf);
        /* A NaN or Inf would poison the first step: refuse it here, by name. */
        for (int64_t j = 0; j < f->tensors[i].numel && !rc; j++)
            if (!isfinite(buf[j]))
                rc = ir_fail(err, errlen, "%s: tensor '%s' holds %s at element %lld; refusing to start from it",
                             path, f->tensors[i].name, isnan(buf[j]) ? "NaN" : "an infinity", (long long)j);
        if (!rc) rt_store_write(st, k, buf);
        free(buf);
    }
    rt_st_free(f);
    return rc;
}

/* ---- the run ---- */

typedef struct {
    const dpc_plan *plan;
    const rt_train_options *o;
    ir_train t;
    rt_schedule sched;
    int batch, global, eval_batch, classes;
    int c, h, w;
    int eval_has_label;
    rt_dataset *train_ds, *test_ds;
    rt_batcher train_b, test_b, train_eval_b;
    rt_backend *be;
    rt_backend **bes;   /* each replica's backend (on the cpu: be, shared) */
    int devices;        /* devices the replicas are placed on */
    rt_coll *coll;      /* NULL with one replica in the job */
    rt_replicas *R;
    int local, total;   /* replicas in this process, in the job */
    size_t img;         /* floats per image */
    rt_store *st;       /* replica 0's: parameter files */
    rt_pipeline *input; /* training batches, prepared ahead */
    FILE *quiet;        /* ranks other than 0 write their log here (/dev/null) */
    float *logits, *loss;
    /* --metrics: the file's whole text in memory (open_memstream), written
     * through ir_file after every epoch. Rewriting a file of one line per
     * epoch costs nothing, and it gets what every other output gets: no
     * link planted at the name or a temporary is followed, a reader sees
     * whole lines, and truncating at a resume is keeping the first bytes.
     * Appending with O_APPEND|O_NOFOLLOW would refuse a link the user
     * named and leave half lines after a crash. */
    FILE *metrics;
    char *metrics_buf;
    size_t metrics_len;
    const char *metrics_path; /* o->metrics, or on --resume the checkpoint's */
    char metrics_abs[4096];   /* metrics_path made absolute, for the checkpoint */
    rt_progress bar;
    char err[1024];
    double prev_lr; /* the last step's lr, for --momentum-correction */
    rt_ckpt_state resumed; /* where the loop starts: zero, or --resume's checkpoint */
    int *params, nparams;  /* replica 0's parameters: the non-finite check */
    float *scratch;        /* one parameter, read back */
    float **snapshot;      /* --on-nan skip: every replica's persistent tensors before the step */
    double check_s, snapshot_s; /* time in nonfinite_param and snapshot (DPC_DEBUG) */
    int overlap;           /* the next batch's copy overlaps each step (rt_replicas_overlap) */
} run;

static void run_free(run *r) {
    /* The snapshot's size comes from replica 0's store: before the replicas go. */
    int count = r->st ? rt_store_count(r->st) : 0;
    for (int i = 0; r->snapshot && i < r->local * count; i++) free(r->snapshot[i]);
    free(r->snapshot);
    free(r->params);
    free(r->scratch);
    rt_pipeline_free(r->input);
    rt_replicas_free(r->R);
    rt_coll_free(r->coll);
    if (r->bes) rt_replicas_close_backends(r->be, r->local, r->bes);
    free(r->bes);
    if (r->be) rt_backend_free(r->be);
    if (r->quiet) fclose(r->quiet);
    rt_dataset_free(r->train_ds);
    rt_dataset_free(r->test_ds);
    free(r->logits), free(r->loss);
    if (r->metrics) fclose(r->metrics);
    free(r->metrics_buf);
}

/* The last error this thread printed (whole: run_error passes up to 1400
 * characters), for rt_train_result.error. */
static _Thread_local char last_error[2048];

/* Prints `dprun: error: ...` and gives the exit status. */
static int print_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int print_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dprun: error: %s\n", last_error);
    return 1;
}

/* print_error, after erasing the progress bar so the message starts a line. */
static int run_error(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_error(run *r, const char *fmt, ...) {
    rt_progress_clear(&r->bar);
    char msg[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return print_error("%s", msg);
}

/* path made absolute without requiring that it exist: its directory
 * resolved, its last part kept (a checkpoint names its metrics file so a
 * resume from another directory finds the same one). */
static void absolute_path(const char *path, char *out, size_t len) {
    char *full = realpath(path, NULL);
    if (full) {
        snprintf(out, len, "%s", full);
        free(full);
        return;
    }
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    char *d = realpath(dir, NULL);
    const char *base = slash ? slash + 1 : path, *dd = d ? d : dir;
    size_t dl = strlen(dd), bl = strlen(base);
    if (dl + 1 + bl < len) {
        memcpy(out, dd, dl);
        out[dl] = '/';
        memcpy(out + dl + 1, base, bl + 1);
    } else {
        snprintf(out, len, "%s", path);
    }
    free(d);
}

static int open_metrics(run *r) {
    r->metrics = open_memstream(&r->metrics_buf, &r->metrics_len);
    if (!r->metrics) return print_error("--metrics %s: %s", r->metrics_path, strerror(errno));
    absolute_path(r->metrics_path, r->metrics_abs, sizeof r->metrics_abs);
    return 0;
}

/* The metrics text so far, replacing the file atomically (see run). */
static int flush_metrics(run *r) {
    if (fflush(r->metrics) != 0 || ferror(r->metrics))
        return run_error(r, "--metrics %s: out of memory", r->metrics_path);
    if (ir_file_write_all(r->metrics_path, r->metrics_buf, r->metrics_len, r->err, sizeof r->err))
        return run_error(r, "--metrics %s", r->err);
    return 0;
}

/* The flags that change the arithmetic of a step, as the checkpoint keeps
 * them: "--flag=value;..." with the effective values (the plan's when the
 * flag was not given, so `--lr 0.1` equals a plan whose lr is 0.1). Seed,
 * data, batch, shuffling and augmentation have their own keys. */
static void run_flags(const run *r, char *out, size_t len) {
    const rt_train_options *o = r->o;
    /* The shortest decimal that reads back as the same double: exact, and
     * "0.01" rather than 0.010000000000000000208 in a message. */
    double lr = r->t.lr_steps > 0 ? r->t.lr_value[0] : 0.0;
    char lrs[40];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(lrs, sizeof lrs, "%.*g", digits, lr);
        if (strtod(lrs, NULL) == lr) break;
    }
    snprintf(out, len, "--lr=%s;--lr-scaling=%s;--warmup-epochs=%d;--warmup-per-iteration=%s;"
             "--momentum-correction=%s;--on-nan=%s", lrs,
             r->t.lr_scaling == IR_LR_SCALING_LINEAR ? "linear" : "none", r->t.warmup_epochs,
             o->warmup_per_iteration ? "on" : "off", o->momentum_correction ? "on" : "off",
             o->on_nan_skip ? "skip" : "stop");
}

/* Each flag of the checkpoint's list against this run's; the first that
 * differs is named with both values. */
static int check_flags(const char *dir, const char *saved, const run *r) {
    char mine[1024], theirs[1024], *sp, *mp;
    run_flags(r, mine, sizeof mine);
    snprintf(theirs, sizeof theirs, "%s", saved);
    for (char *t = strtok_r(theirs, ";", &sp); t; t = strtok_r(NULL, ";", &sp)) {
        char *eq = strchr(t, '=');
        if (!eq) continue;
        *eq = 0;
        char copy[1024];
        const char *now = "none";
        snprintf(copy, sizeof copy, "%s", mine);
        for (char *m = strtok_r(copy, ";", &mp); m; m = strtok_r(NULL, ";", &mp)) {
            char *e = strchr(m, '=');
            if (e && (size_t)(e - m) == strlen(t) && !strncmp(m, t, strlen(t))) now = e + 1;
        }
        if (strcmp(now, eq + 1))
            return print_error("checkpoint refused: %s was written with %s %s; this run has %s %s (a resume "
                               "continues bit for bit only with the same flags)", dir, t, eq + 1, t, now);
    }
    return 0;
}

/* Outputs that name an input of this run would destroy it; outputs that
 * cannot be written would fail only after the training. Both are refused
 * before any work. Inputs compare by (st_dev, st_ino), not by name. */
static int check_outputs(run *r) {
    const rt_train_options *o = r->o;
    const char *outs[2][2] = {{"--metrics", o->metrics}, {"--save-params", o->save_params}};
    const char *inputs[3 + RT_CIFAR10_FILES], *what[3 + RT_CIFAR10_FILES];
    char ckpt[4200], files[RT_CIFAR10_FILES][4200];
    int n = 0;
    if (o->plan_path) inputs[n] = o->plan_path, what[n++] = "the plan";
    if (o->load_params) inputs[n] = o->load_params, what[n++] = "--load-params";
    if (o->checkpoint) {
        snprintf(ckpt, sizeof ckpt, "%s/%s", o->checkpoint, RT_CKPT_FILE);
        inputs[n] = ckpt, what[n++] = "the checkpoint";
    }
    const char *data = o->data ? o->data : getenv("DPC_DATA");
    if (data && *data && strcmp(data, "synthetic")) {
        rt_data_cifar10_paths(data, files);
        for (int i = 0; i < RT_CIFAR10_FILES; i++) inputs[n] = files[i], what[n++] = "a --data file";
    }
    for (int k = 0; k < 2; k++) {
        if (!outs[k][1]) continue;
        for (int i = 0; i < n; i++)
            if (ir_file_same(outs[k][1], inputs[i]))
                return print_error("%s %s is %s (%s) of this run; writing it would destroy it", outs[k][0],
                                   outs[k][1], what[i], inputs[i]);
        if (o->benchmark) continue; /* --benchmark writes neither */
        if (k == 0 && o->resume) continue; /* resume_run checks the checkpoint's file */
        if (ir_file_check_writable(outs[k][1], outs[k][0], r->err, sizeof r->err)) return print_error("%s", r->err);
    }
    if (o->metrics && o->save_params && ir_file_same(o->metrics, o->save_params))
        return print_error("--metrics and --save-params name the same file %s", o->metrics);
    /* The job's checkpoint is rank 0's to write (write_checkpoint). */
    if (o->checkpoint && o->rank == 0 && ir_file_check_dir(o->checkpoint, "--checkpoint", r->err, sizeof r->err))
        return print_error("%s", r->err);
    return 0;
}

static int check_programs(run *r) {
    const ir_graph *tg = r->plan->train, *eg = r->plan->eval;
    if (!tg || !eg) return print_error("the plan lacks its train or eval program");
    char *err = r->err;
    size_t el = sizeof r->err;
    const ir_node *img = need(tg, "train", "image", 4, IR_F32, err, el);
    const ir_node *lab = img ? need(tg, "train", "label", 1, IR_I32, err, el) : NULL;
    const ir_node *lr = lab ? need(tg, "train", "lr", 1, IR_F32, err, el) : NULL;
    const ir_node *gs = lr ? need(tg, "train", "grad_scale", 1, IR_F32, err, el) : NULL;
    const ir_node *loss = gs ? need(tg, "train", "loss", 1, IR_F32, err, el) : NULL;
    const ir_node *eimg = loss ? need(eg, "eval", "image", 4, IR_F32, err, el) : NULL;
    const ir_node *lg = eimg ? need(eg, "eval", "logits", 2, IR_F32, err, el) : NULL;
    if (!lg) {
        if (lab && !lr)
            strncat(err, " (was the plan compiled without the optimizer pass?)", el - strlen(err) - 1);
        return print_error("%s", err);
    }
    r->batch = (int)img->type.dim[0];
    r->c = (int)img->type.dim[1], r->h = (int)img->type.dim[2], r->w = (int)img->type.dim[3];
    r->eval_batch = (int)eimg->type.dim[0];
    r->classes = (int)lg->type.dim[1];
    if (lab->type.dim[0] != r->batch || loss->type.dim[0] != r->batch)
        return print_error("the plan's train program has label/loss batches unlike its image batch %d",
                           r->batch);
    if (eimg->type.dim[1] != r->c || eimg->type.dim[2] != r->h || eimg->type.dim[3] != r->w ||
        lg->type.dim[0] != r->eval_batch)
        return print_error("the plan's eval program takes other images than its train program");
    if (r->classes < 10) return print_error("the model has %d classes; the datasets have 10", r->classes);
    int el_i = find_node(eg, "label");
    r->eval_has_label = el_i >= 0 && eg->nodes[el_i].op == IR_OP_INPUT;
    return 0;
}

static int open_data(run *r) {
    const rt_train_options *o = r->o;
    const char *spec = o->data;
    const char *env = getenv("DPC_DATA");
    if (!spec && env && *env) spec = env;
    if (!spec || !strcmp(spec, "synthetic")) {
        if (o->rank == 0)
        fprintf(stderr, "dprun: note: %s: using the built-in synthetic dataset (%d train / %d test "
                "images, 10 classes); --data DIR trains on CIFAR-10\n",
                spec ? "--data synthetic" : "no --data and $DPC_DATA unset", RT_SYNTHETIC_TRAIN,
                RT_SYNTHETIC_TEST);
        r->train_ds = rt_data_synthetic(RT_SYNTHETIC_TRAIN, r->c, r->h, r->w, 1, RT_SYNTHETIC_SEED);
        r->test_ds = rt_data_synthetic(RT_SYNTHETIC_TEST, r->c, r->h, r->w, 0, RT_SYNTHETIC_SEED);
    } else {
        r->train_ds = rt_data_cifar10(spec, 1, r->err, sizeof r->err);
        if (r->train_ds) r->test_ds = rt_data_cifar10(spec, 0, r->err, sizeof r->err);
        if (!r->test_ds) return print_error("%s", r->err);
    }
    /* This process's replicas' slice of each global batch (all of it
     * without MPI). */
    int slice = r->batch * r->local;
    if (rt_batcher_init(&r->train_b, r->train_ds, &r->t, slice, RT_BATCH_TRAIN, o->seed, r->c, r->h,
                        r->w, r->err, sizeof r->err) ||
        (o->ranks > 1 && rt_batcher_shard(&r->train_b, r->global, o->rank * slice, r->err, sizeof r->err)) ||
        rt_batcher_init(&r->test_b, r->test_ds, &r->t, r->eval_batch, RT_BATCH_EVAL, o->seed, r->c, r->h,
                        r->w, r->err, sizeof r->err) ||
        rt_batcher_init(&r->train_eval_b, r->train_ds, &r->t, r->eval_batch, RT_BATCH_TRAIN_EVAL, o->seed,
                        r->c, r->h, r->w, r->err, sizeof r->err))
        return print_error("%s", r->err);
    if (o->no_shuffle) r->train_b.shuffle = 0;
    if (o->no_augment) r->train_b.augment = r->train_eval_b.augment = 0;
    return 0;
}

/* The replicas of this process (a cuda backend each on the GPU), joined by
 * their communicator (rt_replicas_coll_new), with identical weights:
 * global replica 0's, from the seed or --load-params (read by rank 0 only,
 * so the file need only exist there). */
static int build(run *r) {
    const rt_train_options *o = r->o;
    /* Before the first kernel module loads: replicas share the cores. */
    if (!strcmp(r->be->name, "cpu")) rt_replicas_cpu_threads(r->local);
    r->bes = calloc((size_t)r->local, sizeof *r->bes);
    RT_CHECK_ALLOC(r->bes);
    if (rt_replicas_open_backends(r->be, r->local, r->bes, &r->devices, r->err, sizeof r->err))
        return print_error("%s", r->err);
    r->coll = rt_replicas_coll_new(r->bes, r->local, o->ranks, r->err, sizeof r->err);
    if (!r->coll && r->err[0]) return print_error("%s", r->err);
    r->R = rt_replicas_new(r->bes, r->plan, r->local, r->coll, r->err, sizeof r->err);
    if (!r->R) return print_error("%s", r->err);
    r->st = rt_replicas_store(r->R, 0);
    r->overlap = rt_replicas_overlap(r->R);
    if (r->overlap && rt_debug_level() >= 1 && o->rank == 0)
        fprintf(stderr, "dprun: debug: the next batch's copy to the device overlaps each step "
                "(DPC_INPUT_OVERLAP=0 turns it off)\n");
    int bad = 0;
    if (o->load_params && o->rank == 0) {
        if (load_params(r->plan, r->st, o->load_params, r->err, sizeof r->err)) bad = print_error("%s", r->err);
    } else {
        rt_store_init(r->st, r->plan->train, &r->t, o->seed);
    }
    /* Every process learns whether rank 0 could read the file before any
     * waits for its weights. */
    if (rt_mpi_any(bad)) return 1;
    if (rt_replicas_sync(r->R, r->err, sizeof r->err)) return print_error("%s", r->err);
    r->loss = malloc(sizeof(float) * (size_t)r->batch * (size_t)r->local);
    r->logits = malloc(sizeof(float) * (size_t)r->eval_batch * (size_t)r->classes * (size_t)r->local);
    RT_CHECK_ALLOC(r->loss && r->logits);
    return 0;
}

/* A pipeline over `count` batches of b from batch `index` of `epoch`, as
 * the options say. */
static rt_pipeline *start_input_at(run *r, const rt_batcher *b, int64_t count, int epoch, int64_t index) {
    rt_pipeline_config cfg = rt_pipeline_defaults();
    cfg.workers = r->o->data_workers;
    cfg.depth = r->o->data_depth;
    cfg.count = count;
    cfg.first_epoch = epoch;
    cfg.first_index = index;
    rt_pipeline *p = rt_pipeline_new(b, &cfg, r->err, sizeof r->err);
    if (!p) print_error("%s", r->err);
    return p;
}

static rt_pipeline *start_input(run *r, const rt_batcher *b, int64_t count) {
    return start_input_at(r, b, count, 0, 0);
}

/* Goyal et al.'s momentum correction: MXNet's velocity carries the lr
 * (v = m*v - lr*g), so when the lr changes from a to b the stored velocity
 * is rescaled by b/a to keep the effective momentum. A host pass over the
 * optimizer state, only on the steps where the lr changes. */
static void correct_momentum(run *r, double lr) {
    if (!r->o->momentum_correction || r->prev_lr <= 0 || lr == r->prev_lr) return;
    float scale = (float)(lr / r->prev_lr);
    for (int k = 0; k < r->local; k++) { /* every replica's state, alike */
        rt_store *st = rt_replicas_store(r->R, k);
        for (int i = 0; i < rt_store_count(st); i++) {
            const char *name = rt_store_name(st, i);
            size_t len = strlen(name);
            if (len < 9 || strcmp(name + len - 9, ".momentum") != 0) continue;
            int64_t n = ir_numel(rt_store_type(st, i));
            float *v = malloc(sizeof *v * (size_t)n);
            if (!v) abort();
            rt_store_read(st, i, v);
            for (int64_t j = 0; j < n; j++) v[j] *= scale;
            rt_store_write(st, i, v);
            free(v);
        }
    }
}

/* One optimizer step on the global batch bt; adds the per-sample losses to
 * *loss_sum. The input slot goes back to the workers as soon as the
 * program has copied it, so they prepare ahead while the step runs: bt
 * must not be read after this returns.
 *
 * With r->overlap (cuda) and next non-NULL, the step is enqueued, then the
 * next batch is taken from the pipeline and its copy enqueued behind the
 * step, and only then are the losses read: the device does not idle while
 * the host takes and stages it. *next is that batch, already in the
 * device's inputs and handed back to the workers: pass it as bt with
 * staged = 1. NULL next (the run's last step), or no overlap: the next
 * batch is the caller's to take, as before. */
static int step(run *r, rt_pipeline *in, const rt_batch *bt, int staged, double lr, double *loss_sum,
                const rt_batch **next) {
    correct_momentum(r, lr);
    r->prev_lr = lr;
    /* bt holds this process's slice of the global batch (the batcher is
     * sharded); replica r takes samples [r b, (r + 1) b) of it. */
    const rt_batch *nb = NULL;
    if (!r->overlap) {
        if (rt_replicas_step(r->R, bt->images, bt->labels, (float)lr, 1.0f / (float)r->global, r->loss,
                             r->err, sizeof r->err))
            return run_error(r, "train step failed: %s", r->err);
        rt_pipeline_release(in);
    } else {
        if (rt_replicas_step_enqueue(r->R, staged ? NULL : bt->images, staged ? NULL : bt->labels, (float)lr,
                                     1.0f / (float)r->global, r->err, sizeof r->err))
            return run_error(r, "train step failed: %s", r->err);
        if (!staged) rt_pipeline_release(in);
        if (next && !(nb = rt_pipeline_next(in)))
            return run_error(r, "the input pipeline ended before the run's last step");
        if (rt_replicas_step_finish(r->R, nb ? nb->images : NULL, nb ? nb->labels : NULL, r->loss, r->err,
                                    sizeof r->err))
            return run_error(r, "train step failed: %s", r->err);
        if (nb) rt_pipeline_release(in);
    }
    if (next) *next = nb;
    double s = 0;
    for (int i = 0; i < r->batch * r->local; i++) s += r->loss[i];
    /* The loss of the whole global batch: every process sees the same sum
     * (so all stop together on a non-finite one). */
    rt_mpi_allreduce_sum_f64(&s, 1);
    *loss_sum += s;
    return 0;
}

/* Accuracy with several replicas: eval batch i goes to global replica
 * i mod R, which prepares it itself (batch preparation is a pure function
 * of the batch index) and classifies it with its own parameters and
 * BatchNorm statistics. */
typedef struct {
    run *r;
    const rt_batcher *b;
    int64_t right[RT_MAX_LOCAL_REPLICAS], seen[RT_MAX_LOCAL_REPLICAS];
} eval_job;

static int eval_replica(rt_replicas *R, int k, void *arg, char *err, size_t errlen) {
    eval_job *j = arg;
    run *r = j->r;
    const rt_batcher *b = j->b;
    rt_exec *ex = rt_replicas_eval(R, k);
    size_t n = (size_t)r->eval_batch;
    float *img = malloc(sizeof(float) * r->img * n);
    int32_t *lab = malloc(sizeof(int32_t) * n);
    float *logits = r->logits + (size_t)k * n * (size_t)r->classes;
    RT_CHECK_ALLOC(img && lab);
    int rc = 0;
    for (int64_t bi = rt_replicas_global(R, k); bi < b->batches && !rc; bi += r->total) {
        int real = rt_batcher_fill(b, NULL, 0, bi * (int64_t)n, (int)n, img, lab);
        if (rt_exec_set_input(ex, "image", img, sizeof(float) * r->img * n) ||
            (r->eval_has_label && rt_exec_set_input(ex, "label", lab, sizeof(int32_t) * n))) {
            snprintf(err, errlen, "the eval program refused its inputs");
            rc = -1;
        } else if (rt_exec_run(ex, err, errlen)) {
            rc = -1;
        } else if (rt_exec_get(ex, "logits", logits, sizeof(float) * n * (size_t)r->classes)) {
            snprintf(err, errlen, "cannot read the eval program's logits");
            rc = -1;
        }
        for (int i = 0; i < real && !rc; i++) {
            const float *l = logits + (size_t)i * (size_t)r->classes;
            int best = 0;
            for (int c = 1; c < r->classes; c++)
                if (l[c] > l[best]) best = c;
            j->right[k] += best == lab[i];
        }
        j->seen[k] += real;
    }
    free(img);
    free(lab);
    return rc;
}

static int accuracy_replicas(run *r, const rt_batcher *b, double *acc) {
    eval_job j;
    memset(&j, 0, sizeof j);
    j.r = r, j.b = b;
    if (rt_replicas_run(r->R, eval_replica, &j, r->err, sizeof r->err))
        return run_error(r, "eval failed: %s", r->err);
    double count[2] = {0, 0};
    for (int k = 0; k < r->local; k++) count[0] += (double)j.right[k], count[1] += (double)j.seen[k];
    rt_mpi_allreduce_sum_f64(count, 2);
    *acc = count[1] > 0 ? count[0] / count[1] : 0;
    return 0;
}

/* Fraction of the batcher's images whose largest logit is the label (ties:
 * the first class), with the eval program (BatchNorm inference mode). */
static int accuracy(run *r, const rt_batcher *b, const char *what, double *acc) {
    if (r->total > 1) return accuracy_replicas(r, b, acc);
    rt_exec *eval = rt_replicas_eval(r->R, 0);
    size_t img = (size_t)r->c * (size_t)r->h * (size_t)r->w;
    rt_pipeline *in = start_input(r, b, b->batches);
    if (!in) return 1;
    int64_t right = 0, total = 0;
    int rc = 0;
    double t0 = rt_now();
    rt_progress_begin(&r->bar, what, (long)b->batches);
    const rt_batch *bt;
    while (!rc && (bt = rt_pipeline_next(in))) {
        if (rt_exec_set_input(eval, "image", bt->images, sizeof(float) * img * (size_t)r->eval_batch) ||
            (r->eval_has_label &&
             rt_exec_set_input(eval, "label", bt->labels, sizeof(int32_t) * (size_t)r->eval_batch))) {
            rc = run_error(r, "the eval program refused its inputs");
            break;
        }
        /* Labels are needed after the run: keep the slot until then. */
        if (rt_exec_run(eval, r->err, sizeof r->err)) {
            rc = run_error(r, "eval failed: %s", r->err);
            break;
        }
        size_t lbytes = sizeof(float) * (size_t)r->eval_batch * (size_t)r->classes;
        if (rt_exec_get(eval, "logits", r->logits, lbytes)) {
            rc = run_error(r, "cannot read the eval program's logits");
            break;
        }
        for (int i = 0; i < bt->real; i++) {
            const float *l = r->logits + (size_t)i * (size_t)r->classes;
            int best = 0;
            for (int k = 1; k < r->classes; k++)
                if (l[k] > l[best]) best = k;
            right += best == bt->labels[i];
        }
        total += bt->real;
        rt_progress_update(&r->bar, (long)(bt->index + 1), (double)total / (rt_now() - t0), NAN);
    }
    rt_progress_clear(&r->bar);
    rt_pipeline_free(in);
    *acc = total ? (double)right / (double)total : 0;
    return rc;
}

static int benchmark(run *r) {
    double lr = rt_schedule_epoch_lr(&r->sched, 0), sum = 0, t0 = 0;
    r->input = start_input(r, &r->train_b, r->o->benchmark + 1);
    if (!r->input) return 1;
    rt_pipeline_stats st0 = {0}, st1;
    const rt_batch *bt, *next = NULL; /* next: staged by the last step (r->overlap) */
    while ((bt = next ? next : rt_pipeline_next(r->input))) {
        int64_t seq = bt->seq; /* step() hands bt back to the workers */
        int staged = next != NULL;
        next = NULL;
        if (step(r, r->input, bt, staged, lr, &sum, seq < r->o->benchmark ? &next : NULL)) return 1;
        /* Step 0 is the warm-up; the clock runs from its end, and input
         * waits after it count (the workers overlap preparation with the
         * steps). */
        if (seq == 0) t0 = rt_now(), rt_pipeline_get_stats(r->input, &st0);
    }
    double t = rt_now() - t0;
    rt_pipeline_get_stats(r->input, &st1);
    fprintf(r->o->out, "benchmark: %ld steps of batch %d in %.3f seconds (after 1 warm-up step); "
            "input from %d data worker%s, waited %.3f seconds\n", r->o->benchmark, r->global, t,
            r->o->data_workers, r->o->data_workers == 1 ? "" : "s", st1.wait_s - st0.wait_s);
    fprintf(r->o->out, "throughput: %.1f img/s\n", (double)r->o->benchmark * r->global / t);
    return 0;
}

/* ---- checkpoints, signals, non-finite steps ---- */

/* The first SIGINT/SIGTERM asks the loop to stop after the current step; a
 * second one while it finishes ends the process at once (default action).
 * The count is atomic: two signals may reach two threads at once. */
static volatile sig_atomic_t stop_signal;
static atomic_int stop_signals_seen;

static void on_stop_signal(int sig) {
    if (atomic_fetch_add(&stop_signals_seen, 1) > 0) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
}

static void catch_stop_signals(struct sigaction old[2]) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and waits elsewhere carry on */
    stop_signal = 0;
    atomic_store(&stop_signals_seen, 0);
    sigaction(SIGINT, &sa, &old[0]);
    sigaction(SIGTERM, &sa, &old[1]);
}

static void release_stop_signals(const struct sigaction old[2]) {
    sigaction(SIGINT, &old[0], NULL);
    sigaction(SIGTERM, &old[1], NULL);
}

/* Every process stops at the same step. */
static int stop_requested(void) { return rt_mpi_any(stop_signal != 0); }

/* Every replica's BatchNorm statistics in the job, in global replica order
 * (rt_ckpt_stats_count floats each), on every process: each process fills
 * its own replicas' rows, then broadcasts them in turn (bit-exact, unlike
 * a sum). A collective: every process calls it at the same step. */
static float *gather_stats(run *r) {
    int64_t S = rt_ckpt_stats_count(r->plan, r->st);
    float *stats = malloc(sizeof(float) * (size_t)(S * r->total) + 1);
    RT_CHECK_ALLOC(stats);
    int first = r->o->rank * r->local;
    for (int k = 0; k < r->local; k++)
        rt_ckpt_stats_read(r->plan, rt_replicas_store(r->R, k), stats + (first + k) * S);
    for (int p = 0; p < r->o->ranks && r->o->ranks > 1; p++)
        if (rt_mpi_bcast_bytes(stats + (int64_t)p * r->local * S, sizeof(float) * (size_t)(S * r->local), p)) {
            free(stats);
            return NULL;
        }
    return stats;
}

/* Writes the checkpoint at s's position (counters filled by the loop; the
 * run's shape filled here). Every process gathers its replicas' statistics
 * to rank 0, which writes one checkpoint for the job; a failure stops every
 * process. */
static int write_checkpoint(run *r, rt_ckpt_state *s) {
    const rt_train_options *o = r->o;
    if (!o->checkpoint) return 0;
    double t0 = rt_now();
    float *stats = gather_stats(r);
    int bad = !stats ? run_error(r, "checkpoint: cannot gather the BatchNorm statistics over MPI") : 0;
    if (!bad && o->rank == 0) {
        s->steps_per_epoch = (int64_t)r->train_b.batches;
        s->global_batch = r->global;
        s->seed = o->seed;
        snprintf(s->data, sizeof s->data, "%s", r->train_ds->name);
        s->shuffle = r->train_b.shuffle, s->augment = r->train_b.augment;
        s->prev_lr = r->prev_lr;
        s->metrics_bytes = -1;
        if (r->metrics) {
            fflush(r->metrics);
            s->metrics_bytes = (int64_t)r->metrics_len;
            snprintf(s->metrics_path, sizeof s->metrics_path, "%s", r->metrics_abs);
        }
        run_flags(r, s->flags, sizeof s->flags);
        if (rt_ckpt_write(o->checkpoint, r->plan, r->st, r->total, stats, s, r->err, sizeof r->err))
            bad = run_error(r, "%s", r->err);
        else if (rt_debug_level() >= 1)
            fprintf(stderr, "dprun: debug: checkpoint at step %lld written to %s in %.3f s\n", (long long)s->step,
                    o->checkpoint, rt_now() - t0);
    }
    free(stats);
    return rt_mpi_any(bad);
}

/* Option combinations, and a fresh run never overwrites a checkpoint. */
static int check_checkpoint_options(const rt_train_options *o) {
    if (!o->checkpoint) {
        if (o->resume) return print_error("--resume needs --checkpoint DIR (the directory to resume from)");
        if (o->checkpoint_every) return print_error("--checkpoint-every needs --checkpoint DIR");
        return 0;
    }
    if (o->benchmark) return print_error("--checkpoint and --benchmark do not go together");
    if (o->resume && o->load_params)
        return print_error("--resume and --load-params both set the parameters; use one");
    /* Only rank 0 reads and writes the job's checkpoint: the directory need
     * exist on its machine alone (a rank that exits ends the job). */
    if (o->rank != 0) return 0;
    if (o->resume && !rt_ckpt_exists(o->checkpoint))
        return print_error("--resume: no checkpoint in %s (%s/%s does not exist)", o->checkpoint, o->checkpoint,
                           RT_CKPT_FILE);
    if (!o->resume && rt_ckpt_exists(o->checkpoint))
        return print_error("%s already holds a checkpoint; add --resume to continue it, or remove it or choose "
                           "another directory to start afresh", o->checkpoint);
    return 0;
}

/* --resume: the stores, the position and the metrics file from the
 * checkpoint, after checking it was made by a run of this shape. */
static int resume_checked(run *r, float *stats) {
    const rt_train_options *o = r->o;
    rt_ckpt_state *s = &r->resumed;
    if (rt_ckpt_read(o->checkpoint, r->plan, r->st, r->total, stats, s, r->err, sizeof r->err))
        return print_error("%s", r->err);
    const char *d = o->checkpoint;
    if (s->seed != o->seed)
        return print_error("checkpoint refused: %s was written with --seed %llu; this run has --seed %llu "
                           "(resume with the same flags)", d, (unsigned long long)s->seed,
                           (unsigned long long)o->seed);
    if (strcmp(s->data, r->train_ds->name))
        return print_error("checkpoint refused: %s was written training on %s; this run has %s", d, s->data,
                           r->train_ds->name);
    if (s->global_batch != r->global || s->steps_per_epoch != (int64_t)r->train_b.batches)
        return print_error("checkpoint refused: %s was written with global batch %d (%lld steps per epoch); "
                           "this run has %d (%lld)", d, s->global_batch, (long long)s->steps_per_epoch,
                           r->global, (long long)r->train_b.batches);
    if (s->shuffle != r->train_b.shuffle || s->augment != r->train_b.augment)
        return print_error("checkpoint refused: %s was written %s shuffling and %s augmentation; resume with the "
                           "same --no-shuffle / --no-augment", d, s->shuffle ? "with" : "without",
                           s->augment ? "with" : "without");
    if (check_flags(d, s->flags, r)) return 1;
    /* The metrics file is the checkpoint's: appended to, never another. */
    char mine[4096] = "";
    if (o->metrics) absolute_path(o->metrics, mine, sizeof mine);
    if (o->metrics && !*s->metrics_path)
        return print_error("checkpoint refused: %s was written without --metrics; this run has --metrics %s "
                           "(its file would lack the epochs before the checkpoint)", d, o->metrics);
    if (o->metrics && strcmp(mine, s->metrics_path) && !ir_file_same(o->metrics, s->metrics_path))
        return print_error("checkpoint refused: %s was written with --metrics %s; this run has --metrics %s "
                           "(resume with the same file, or without --metrics to append to it)", d,
                           s->metrics_path, o->metrics);
    if (*s->metrics_path && s->metrics_bytes >= 0) {
        r->metrics_path = o->metrics ? o->metrics : s->metrics_path;
        size_t len = 0;
        struct stat sb;
        unsigned char *old = NULL;
        if (stat(r->metrics_path, &sb) == 0 || s->metrics_bytes > 0) {
            old = ir_file_read(r->metrics_path, (size_t)1 << 30, &len, r->err, sizeof r->err);
            if (!old) return print_error("--metrics %s", r->err);
        }
        if (len < (size_t)s->metrics_bytes) {
            free(old);
            return print_error("%s: %zu bytes, shorter than the %lld it had at the checkpoint; it is not the "
                               "file the checkpoint was written with", r->metrics_path, len,
                               (long long)s->metrics_bytes);
        }
        /* Lines written after the checkpoint are dropped: the resumed run
         * writes them again. */
        int rc = open_metrics(r);
        if (!rc && s->metrics_bytes > 0) fwrite(old, 1, (size_t)s->metrics_bytes, r->metrics);
        free(old);
        if (!rc) rc = flush_metrics(r);
        if (rc) return 1;
    }
    long spe = (long)r->train_b.batches;
    fprintf(stderr, "dprun: resumed from %s/%s: %lld steps restored (epoch %lld, step %lld of %ld)\n", d,
            RT_CKPT_FILE, (long long)s->step, (long long)(s->step / spe), (long long)(s->step % spe), spe);
    return 0;
}

/* --resume: rank 0 reads and checks the job's checkpoint (only its machine
 * needs the directory); the position, replica 0's tensors and every
 * replica's statistics then reach every process and replica. */
static int resume_run(run *r) {
    const rt_train_options *o = r->o;
    int64_t S = rt_ckpt_stats_count(r->plan, r->st);
    float *stats = malloc(sizeof(float) * (size_t)(S * r->total) + 1);
    RT_CHECK_ALLOC(stats);
    int bad = o->rank == 0 ? resume_checked(r, stats) : 0;
    if (rt_mpi_any(bad)) {
        free(stats);
        return 1;
    }
    if (o->ranks > 1 && (rt_mpi_bcast_bytes(&r->resumed, sizeof r->resumed, 0) ||
                         rt_mpi_bcast_bytes(stats, sizeof(float) * (size_t)(S * r->total), 0))) {
        free(stats);
        return print_error("--resume: cannot send the checkpoint to the other processes over MPI");
    }
    r->prev_lr = r->resumed.prev_lr;
    bad = rt_replicas_sync(r->R, r->err, sizeof r->err) ? print_error("%s", r->err) : 0;
    for (int k = 0; k < r->local && !bad; k++)
        rt_ckpt_stats_write(r->plan, rt_replicas_store(r->R, k), stats + (o->rank * r->local + k) * S);
    free(stats);
    return bad;
}

/* Index of a replica-0 parameter that is not finite after the step, or -1.
 * The update reads every gradient element (w += m v - lr (g s + wd w)), so
 * a non-finite gradient shows here. One host read of the parameters. */
static int nonfinite_param(run *r) {
    double t0 = rt_now();
    if (!r->params) {
        int count = rt_store_count(r->st);
        int64_t most = 1;
        r->params = malloc(sizeof(int) * (size_t)(count + 1));
        RT_CHECK_ALLOC(r->params);
        for (int i = 0; i < count; i++) {
            int n = find_node(r->plan->train, rt_store_name(r->st, i));
            if (n < 0 || r->plan->train->nodes[n].op != IR_OP_PARAM) continue;
            r->params[r->nparams++] = i;
            if (ir_numel(rt_store_type(r->st, i)) > most) most = ir_numel(rt_store_type(r->st, i));
        }
        r->scratch = malloc(sizeof(float) * (size_t)most);
        RT_CHECK_ALLOC(r->scratch);
    }
    for (int p = 0; p < r->nparams; p++) {
        int i = r->params[p];
        int64_t n = ir_numel(rt_store_type(r->st, i));
        rt_store_read(r->st, i, r->scratch);
        /* All exponent bits set: inf or nan. An or-reduction vectorises. */
        const uint32_t *bits = (const uint32_t *)r->scratch;
        uint32_t bad = 0;
        for (int64_t j = 0; j < n; j++) bad |= (bits[j] & 0x7f800000u) == 0x7f800000u;
        if (bad) return i;
    }
    r->check_s += rt_now() - t0;
    return -1;
}

/* --on-nan skip: copies every replica's persistent tensors to the host
 * (take) or back (restore), so a bad step can be undone. */
static void snapshot(run *r, int restore) {
    double t0 = rt_now();
    int count = rt_store_count(r->st);
    if (!r->snapshot) {
        r->snapshot = calloc((size_t)(r->local * count) + 1, sizeof *r->snapshot);
        RT_CHECK_ALLOC(r->snapshot);
        for (int k = 0; k < r->local; k++)
            for (int i = 0; i < count; i++) {
                r->snapshot[k * count + i] = malloc(sizeof(float) * (size_t)ir_numel(rt_store_type(r->st, i)) + 1);
                RT_CHECK_ALLOC(r->snapshot[k * count + i]);
            }
    }
    for (int k = 0; k < r->local; k++) {
        rt_store *st = rt_replicas_store(r->R, k);
        for (int i = 0; i < count; i++) {
            if (restore) rt_store_write(st, i, r->snapshot[k * count + i]);
            else rt_store_read(st, i, r->snapshot[k * count + i]);
        }
    }
    r->snapshot_s += rt_now() - t0;
}

/* After a step whose loss or parameters are not finite: stop (1, with the
 * place) or, with --on-nan skip, undo the step (0). */
static int nonfinite_step(run *r, double step_loss, int bad_param, double prev_lr, long done, int e, long s,
                          double lr) {
    char what[IR_NAME_MAX + 96];
    if (!isfinite(step_loss))
        snprintf(what, sizeof what, "the loss is %s", isnan(step_loss) ? "nan" : "infinite");
    else
        snprintf(what, sizeof what, "a gradient is not finite (parameter '%s' is after the update)",
                 rt_store_name(r->st, bad_param));
    if (r->o->on_nan_skip) {
        snapshot(r, 1);
        r->prev_lr = prev_lr;
        rt_progress_clear(&r->bar);
        fprintf(stderr, "dprun: warning: %s at step %ld (epoch %d, step %ld of the epoch, lr %.6g); skipped "
                "the step (--on-nan skip)\n", what, done, e, s, lr);
        return 0;
    }
    char kept[4200];
    if (r->o->checkpoint && rt_ckpt_exists(r->o->checkpoint))
        snprintf(kept, sizeof kept, "the last good checkpoint stays in %s", r->o->checkpoint);
    else
        snprintf(kept, sizeof kept, "no checkpoint was written (--checkpoint DIR keeps one)");
    return run_error(r, "%s at step %ld (epoch %d, step %ld of the epoch, lr %.6g); stopping; %s (a lower lr or "
                     "a warmup may help; --on-nan skip skips such steps)", what, done, e, s, lr, kept);
}

/* The message for a run stopped by a signal; returns the exit status. */
static int stopped_by_signal(run *r, long done, int e, long s) {
    const rt_train_options *o = r->o;
    int sig = stop_signal;
    rt_progress_clear(&r->bar);
    if (o->rank != 0) return 128 + sig;
    if (o->checkpoint)
        fprintf(stderr, "dprun: interrupted (%s) at epoch %d step %ld (%ld steps done); checkpoint written to "
                "%s; resume with: %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM", e, s, done, o->checkpoint,
                o->resume_command ? o->resume_command : "dprun PLAN --checkpoint DIR --resume (same flags)");
    else
        fprintf(stderr, "dprun: interrupted (%s) at epoch %d step %ld (%ld steps done); no checkpoint was written "
                "(--checkpoint DIR keeps one)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", e, s, done);
    return 128 + sig;
}

/* The epoch's metrics object, without its closing brace (the last epoch's
 * gets the final accuracies appended). */
static void metrics_line(char *buf, size_t len, int epoch, double lr, double loss, int batch, long steps,
                         double seconds, double wait, double test_acc) {
    snprintf(buf, len, "{\"epoch\": %d, \"lr\": %.9g, \"train_loss\": %.9g, \"batch\": %d, \"steps\": %ld, "
             "\"seconds\": %.3f, \"img_per_s\": %.1f, \"input_wait_s\": %.4f", epoch, lr, loss, batch, steps,
             seconds, seconds > 0 ? (double)steps * batch / seconds : 0.0, wait);
    if (test_acc >= 0)
        snprintf(buf + strlen(buf), len - strlen(buf), ", \"test_accuracy\": %.6f", test_acc);
}

static int train_loop(run *r) {
    const rt_train_options *o = r->o;
    FILE *out = o->out;
    /* A resumed run starts at the checkpoint's step, mid-epoch perhaps,
     * with that epoch's loss sum and time so far. */
    long spe = (long)r->train_b.batches, done = (long)r->resumed.step;
    int64_t total = (int64_t)r->t.epochs * spe;
    if (o->steps >= 0 && o->steps < total) total = o->steps;
    double total_time = r->resumed.total_seconds, test_acc = -1;
    long test_acc_done = -1; /* the step count test_acc was measured at */
    rt_train_result *res = o->result;
    char pending[512] = "";  /* the last epoch's metrics, completed at the end */
    snprintf(pending, sizeof pending, "%s", r->resumed.metrics_pending);
    const rt_batch *next = NULL; /* staged by the last step (r->overlap) */
    /* Whether a step has changed the parameters (a resumed run's had): with
     * --on-nan skip every step may be undone, and such a run saves nothing. */
    int progress = done > 0;
    if (total > done) {
        r->input = start_input_at(r, &r->train_b, total - done, (int)(done / spe), done % spe);
        if (!r->input) return 1;
    }
    for (int e = (int)(done / spe); e < r->t.epochs && done < total; e++) {
        int resumed = done % spe != 0; /* this epoch began before the checkpoint */
        double t0 = 0, loss_sum = resumed ? r->resumed.epoch_loss_sum : 0;
        double t_before = resumed ? r->resumed.epoch_seconds : 0;
        long steps = done % spe, skipped = resumed ? (long)r->resumed.epoch_skipped : 0;
        rt_pipeline_stats st0, st1, st2;
        rt_pipeline_get_stats(r->input, &st0);
        char label[48];
        snprintf(label, sizeof label, "epoch %d", e);
        rt_progress_begin(&r->bar, label, (long)(total - done < spe - steps ? total - done : spe - steps));
        for (long s = steps; s < spe && done < total; s++) {
            /* With r->overlap the previous step took this batch and staged
             * it on the device (it may have been the previous epoch's last
             * step: the pipeline runs on across epochs). */
            int staged = next != NULL;
            const rt_batch *bt = staged ? next : rt_pipeline_next(r->input);
            next = NULL;
            if (!bt) return run_error(r, "the input pipeline ended after %ld steps of %lld", done, (long long)total);
            /* The epoch's clock starts at its first batch, as the article's. */
            if (!t0) t0 = rt_now() - t_before, rt_pipeline_get_stats(r->input, &st1);
            double lr = rt_schedule_step_lr(&r->sched, e, s, spe), prev_lr = r->prev_lr, step_loss = 0;
            if (o->on_nan_skip) snapshot(r, 0);
            if (step(r, r->input, bt, staged, lr, &step_loss, done + 1 < total ? &next : NULL)) return 1;
            int bad_param = isfinite(step_loss) ? nonfinite_param(r) : -1;
            if (!isfinite(step_loss) || bad_param >= 0) {
                if (nonfinite_step(r, step_loss, bad_param, prev_lr, done, e, s, lr)) return 1;
                skipped++;
            } else {
                loss_sum += step_loss;
                progress = 1;
            }
            if (rt_debug_level() >= 2 && o->rank == 0)
                fprintf(stderr, "dprun: debug: step %ld loss %.17g\n", done, step_loss / r->global);
            steps++, done++;
            double el = rt_now() - t0;
            long counted = steps - skipped;
            rt_progress_update(&r->bar, steps, el > 0 ? (double)steps * r->global / el : 0,
                               counted ? loss_sum / ((double)counted * r->global) : NAN);
            /* Mid-epoch checkpoints; the epoch's last step gets the epoch's. */
            int stop = stop_requested();
            if (s + 1 < spe && (stop || (progress && done == total) ||
                                (progress && o->checkpoint_every > 0 && done % o->checkpoint_every == 0))) {
                rt_ckpt_state cs = {.step = done, .epoch_loss_sum = loss_sum, .epoch_skipped = skipped,
                                    .epoch_seconds = rt_now() - t0, .total_seconds = total_time};
                snprintf(cs.metrics_pending, sizeof cs.metrics_pending, "%s", pending);
                if (write_checkpoint(r, &cs)) return 1;
            }
            if (stop && s + 1 < spe) return stopped_by_signal(r, done, e, s + 1);
        }
        long counted = steps - skipped;
        double dt = rt_now() - t0, mean = counted ? loss_sum / ((double)counted * r->global) : NAN;
        rt_pipeline_get_stats(r->input, &st2);
        rt_progress_clear(&r->bar);
        total_time += dt;
        if (res) res->epochs = e + 1, res->train_loss = mean, res->seconds = total_time;
        double lr = rt_schedule_epoch_lr(&r->sched, e);
        fprintf(out, "EPOCH %2d: train loss %4.2g | batch %4d | lr %.3f | Time per epoch %.2f seconds\n", e,
                mean, r->global, lr, dt);
        fflush(out);
        double wait = st2.wait_s - st1.wait_s;
        if (rt_debug_level() >= 1)
            fprintf(stderr, "dprun: debug: epoch %d input: the steps waited %.4f s in %lld of %ld steps, "
                    "%.4f s before the first batch; %d data worker%s\n", e, wait,
                    (long long)(st2.stalls - st1.stalls), steps, st1.wait_s - st0.wait_s, o->data_workers,
                    o->data_workers == 1 ? "" : "s");
        if (rt_debug_level() >= 1)
            fprintf(stderr, "dprun: debug: epoch %d: non-finite check %.4f s, --on-nan skip copies %.4f s, in %.4f s "
                    "of steps\n", e, r->check_s, r->snapshot_s, dt);
        r->check_s = r->snapshot_s = 0;
        double acc = -1;
        if (o->eval_every > 0 && (e + 1) % o->eval_every == 0) {
            if (accuracy(r, &r->test_b, "test accuracy", &acc)) return 1;
            fprintf(out, "EPOCH %2d: test accuracy %.4f\n", e, acc);
            fflush(out);
            test_acc = acc, test_acc_done = done;
        }
        if (r->metrics) {
            if (*pending) fprintf(r->metrics, "%s}\n", pending);
            metrics_line(pending, sizeof pending, e, lr, mean, r->global, steps, dt, wait, acc);
            if (flush_metrics(r)) return 1;
        }
        if (steps == spe && progress) { /* a whole epoch: its checkpoint */
            rt_ckpt_state cs = {.step = done, .total_seconds = total_time};
            snprintf(cs.metrics_pending, sizeof cs.metrics_pending, "%s", pending);
            if (write_checkpoint(r, &cs)) return 1;
            if (stop_requested()) return stopped_by_signal(r, done, e + 1, 0);
        }
    }
    if (!progress && done > 0)
        return run_error(r, "all %ld steps were skipped (--on-nan skip): each had a non-finite loss or gradient, "
                         "so the parameters never changed; nothing was saved (a lower lr or a warmup may help)",
                         done);
    rt_pipeline_free(r->input);
    r->input = NULL;
    double train_acc;
    if (accuracy(r, &r->train_eval_b, "train accuracy", &train_acc)) return 1;
    /* The last --eval-every pass measured these very parameters. */
    if (test_acc_done != done && accuracy(r, &r->test_b, "test accuracy", &test_acc)) return 1;
    fprintf(out, "Training time %.2f seconds | train accuracy %.4f | test accuracy %.4f\n", total_time,
            train_acc, test_acc);
    fflush(out);
    if (res) res->finished = 1, res->train_accuracy = train_acc, res->test_accuracy = test_acc;
    if (r->metrics && *pending) {
        if (!strstr(pending, "\"test_accuracy\""))
            snprintf(pending + strlen(pending), sizeof pending - strlen(pending), ", \"test_accuracy\": %.6f",
                     test_acc);
        fprintf(r->metrics, "%s, \"train_accuracy\": %.6f}\n", pending, train_acc);
        if (flush_metrics(r)) return 1;
    }
    return 0;
}

int rt_train(const dpc_plan *plan, const rt_train_options *opt) {
    rt_train_options o = *opt;
    if (!o.out) o.out = stdout;
    run r;
    memset(&r, 0, sizeof r);
    r.plan = plan, r.o = &o;
    rt_progress_init(&r.bar, stderr);
    int rc = 0;
    last_error[0] = 0;
    if (o.result) {
        memset(o.result, 0, sizeof *o.result);
        o.result->train_loss = NAN;
        o.result->train_accuracy = o.result->test_accuracy = -1;
    }
    if (!(r.be = rt_backend_open(o.device, NULL, r.err, sizeof r.err))) {
        rc = print_error("%s", r.err);
    } else if (o.gpus > RT_MAX_LOCAL_REPLICAS) {
        rc = print_error("--gpus %d: at most %d replicas per process (run more processes under mpirun)",
                         o.gpus, RT_MAX_LOCAL_REPLICAS);
    } else if (rt_train_schedule(plan, &o, &r.t, r.err, sizeof r.err)) {
        rc = print_error("%s", r.err);
    }
    if (!rc) rc = check_programs(&r);
    if (!rc) rc = check_checkpoint_options(&o);
    /* Refuse what cannot fit before loading data or allocating anything:
     * per replica store + programs, and the training and eval batches in flight. */
    int64_t slots = o.data_depth ? o.data_depth : o.data_workers + 2;
    int64_t inputs = slots * ((int64_t)r.batch * o.gpus + r.eval_batch) * ((int64_t)r.c * r.h * r.w + 1) * 4;
    if (!rc && rt_memory_check(plan, r.be, o.gpus, inputs, r.err, sizeof r.err)) rc = print_error("%s", r.err);
    if (!rc) {
        if (o.ranks < 1) o.ranks = 1;
        r.local = o.gpus;
        r.total = o.gpus * o.ranks;
        r.global = r.batch * r.total;
        r.img = (size_t)r.c * (size_t)r.h * (size_t)r.w;
        if (o.rank != 0) {
            /* Only rank 0 speaks: the others' log and progress go nowhere. */
            r.quiet = fopen("/dev/null", "w");
            if (!r.quiet) rc = print_error("/dev/null: %s", strerror(errno));
            o.out = r.quiet;
            o.metrics = NULL, o.save_params = NULL;
            rt_progress_init(&r.bar, r.quiet);
        }
        r.sched = rt_schedule_make(&r.t, r.global);
        r.sched.per_iteration = o.warmup_per_iteration;
        rc = check_outputs(&r);
        if (!rc) rc = open_data(&r);
    }
    if (!rc && o.metrics && !o.benchmark && !o.resume) {
        /* Empty at the start, as a fresh run's file is. */
        r.metrics_path = o.metrics;
        rc = open_metrics(&r);
        if (!rc) rc = flush_metrics(&r);
    }
    if (!rc) rc = build(&r);
    if (!rc && o.resume) rc = resume_run(&r);
    if (!rc && o.rank == 0) {
        fprintf(stderr, "dprun: %s: %lld parameters, %s backend, %d replica%s x batch %d, %ld steps per "
                "epoch, %lld train / %lld test images (%s)\n", plan->model,
                (long long)ir_num_params(plan->train), r.be->name, r.total, r.total > 1 ? "s" : "", r.batch,
                (long)r.train_b.batches, (long long)r.train_ds->count, (long long)r.test_ds->count,
                r.train_ds->name);
        if (r.total > 1) {
            rt_replicas_banner(stderr, r.be->name, r.devices, r.local, o.ranks, r.batch);
            fprintf(stderr, "dprun: gradients summed by the %s collective\n", rt_coll_name(r.coll));
        }
    }
    if (!rc && o.benchmark) {
        rc = benchmark(&r);
    } else if (!rc) {
        struct sigaction old[2];
        catch_stop_signals(old);
        rc = train_loop(&r);
        release_stop_signals(old);
    }
    if (!rc && o.save_params && save_params(plan, r.st, o.save_params, r.err, sizeof r.err))
        rc = print_error("%s", r.err);
    run_free(&r);
    if (o.result) {
        o.result->status = rc;
        if (rc) { /* cut to fit; snprintf here draws a truncation warning */
            size_t n = strnlen(last_error, sizeof o.result->error - 1);
            memcpy(o.result->error, last_error, n);
            o.result->error[n] = 0;
        }
    }
    return rc;
}
