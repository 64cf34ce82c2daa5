/* passes/pipeline.c — the registry of passes and the pass manager.
 *
 * A pipeline is a list of steps (a pass and its option values). It is made
 * from the flags (pass_pipeline_default), parsed from text (--passes) or
 * both: the text names the passes, the flags give the options it leaves
 * out. The manager runs the steps that apply to a program, times each,
 * checks the graph with ir_verify after each one (a pass that breaks an
 * invariant is caught at its own door, not three passes later) and hands
 * the graph to a hook (--dump-ir, --print-ir-after, --time-passes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/parse.h"
#include "passes/passes.h"

static int run_lower(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    return pass_lower_sync(g, (int)c->arg[0], err, errlen);
}

static int run_autodiff(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    (void)c;
    return pass_autodiff(g, err, errlen);
}

static int run_optimizer(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    return pass_optimizer(g, c->train, err, errlen);
}

/* bucket_mb in bytes as --bucket-mb has always made them: at least one float. */
static int run_partition(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    size_t bytes = (size_t)(c->arg[0] * (1 << 20));
    return pass_partition(g, bytes < 4 ? 4 : bytes, err, errlen);
}

static int run_precision(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    return pass_precision(g, (pass_precision_kind)c->arg[0], err, errlen);
}

/* report=1 (--layout-report): each program's transposes and their reasons
 * on stdout, the report stream. */
static int run_layout(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    if (pass_layout(g, err, errlen)) return -1;
    if (c->arg[0]) pass_layout_report(*g, c->train ? "train" : "eval", stdout);
    return 0;
}

static int run_conv(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    return pass_conv(g, (pass_conv_kind)c->arg[0], err, errlen);
}

static int run_fuse(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    (void)c;
    return pass_fuse(g, err, errlen);
}

static int run_dce(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    (void)c;
    return pass_dce(g, NULL, err, errlen);
}

static int run_remat(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    return pass_remat(g, (int64_t)(c->arg[0] * (1 << 20)), NULL, err, errlen);
}

/* Leaves the graph alone: the plan goes to *c->memplan. */
static int run_memplan(ir_graph **g, const pass_context *c, char *err, size_t errlen) {
    fmt_memplan *m = pass_memplan_run(*g, err, errlen);
    if (!m) return -1;
    if (c->memplan) {
        fmt_memplan_free(*c->memplan);
        *c->memplan = m;
    } else {
        fmt_memplan_free(m);
    }
    return 0;
}

#define BUCKET_MB_DEFAULT ((double)PASS_BUCKET_BYTES_DEFAULT / (1 << 20))

/* The all-reduces (partition) exist before fusion, so fuse sees them as the
 * opaque steps they are and never groups across them. The eval program is
 * the forward pass with running-statistics BatchNorm: no gradients, no
 * update. memplan plans the graph as codegen will run it: last. */
const pass_info pass_registry[] = {
    {.name = "lower",
     .run = run_lower,
     .programs = PASS_TRAIN | PASS_EVAL,
     .about = "batchnorm into its statistics and their use",
     .opts = {{.name = "sync_bn",
               .type = PASS_OPT_INT,
               .def = 0,
               .min = 0,
               .max = 1,
               .help = "every training batchnorm synchronised over the replicas (--sync-bn)"}}},
    {.name = "autodiff",
     .run = run_autodiff,
     .programs = PASS_TRAIN,
     .about = "reverse-mode gradients from the loss",
     .requires = {"lower"}},
    {.name = "optimizer",
     .run = run_optimizer,
     .programs = PASS_TRAIN,
     .about = "the update as graph ops: sgd, lars, lamb or adamw",
     .requires = {"autodiff"}},
    {.name = "partition",
     .run = run_partition,
     .programs = PASS_TRAIN,
     .about = "all-reduce of the gradients, in buckets",
     .requires = {"optimizer"},
     .opts = {{.name = "bucket_mb",
               .type = PASS_OPT_FLOAT,
               .def = BUCKET_MB_DEFAULT,
               .min = 0,
               .max = 1 << 20,
               .min_open = 1,
               .help = "gradients per all-reduce bucket, in MiB (--bucket-mb)"}}},
    {.name = "precision",
     .run = run_precision,
     .programs = PASS_TRAIN | PASS_EVAL,
     .about = "bf16 storage of activations, or TF32 GEMMs (--precision)",
     .requires = {"lower"},
     .after = {"autodiff", "optimizer", "partition"},
     .opts = {{.name = "precision",
               .type = PASS_OPT_ENUM,
               .def = PASS_PRECISION_FP32,
               .values = {"fp32", "bf16", "tf32"},
               .help = "storage of activations and their gradients, or TF32 GEMMs "
                       "(--precision)"}}},
    {.name = "layout",
     .run = run_layout,
     .programs = PASS_TRAIN | PASS_EVAL,
     .about = "channel-major activations between convolutions (--layout; off by default)",
     .requires = {"lower"},
     .after = {"autodiff", "optimizer", "partition", "precision"},
     .opts = {{.name = "report",
               .type = PASS_OPT_INT,
               .def = 0,
               .min = 0,
               .max = 1,
               .help = "1: print each remaining transpose and its reason (--layout-report)"}},
     .optional = 1},
    {.name = "conv",
     .run = run_conv,
     .programs = PASS_TRAIN | PASS_EVAL,
     .about = "convolutions as library calls, dpc's own lowering beside them; dense products "
              "over unrolled weights on the smallest planes (--conv; --conv im2col: none)",
     .requires = {"lower"},
     .after = {"autodiff", "optimizer", "partition", "precision", "layout"},
     .opts = {{.name = "impl",
               .type = PASS_OPT_ENUM,
               .def = PASS_CONV_IM2COL,
               .values = {"im2col", "library", "auto", "dense"},
               .help = "im2col: none; library: the library where it takes the shape; auto: "
                       "whichever is measured faster; dense: no library, dense products "
                       "where exact (--conv)"}},
     .optional = 1},
    {.name = "dce",
     .run = run_dce,
     .programs = PASS_TRAIN | PASS_EVAL,
     .about = "drop nodes nothing the runtime reads depends on (docs/passes.md's example)",
     .requires = {"lower"},
     .after = {"autodiff", "optimizer", "partition"},
     .optional = 1},
    {.name = "fuse",
     .run = run_fuse,
     .programs = PASS_TRAIN | PASS_EVAL,
     .about = "fusion groups, one kernel each (--no-fuse: none)",
     .requires = {"lower"},
     .after = {"autodiff", "optimizer", "partition", "precision", "layout", "conv", "dce"}},
    {.name = "remat",
     .run = run_remat,
     .programs = PASS_TRAIN,
     .about = "recompute cheap forward activations in backward to fit a memory budget",
     .requires = {"autodiff"},
     .after = {"optimizer", "partition", "precision", "fuse"},
     .opts = {{.name = "budget_mb",
               .type = PASS_OPT_FLOAT,
               .def = 0,
               .min = 0,
               .max = 1 << 30,
               .help = "planned arena to fit, in MiB (0: as small as it goes)"}},
     .optional = 1},
    {.name = "memplan",
     .run = run_memplan,
     .programs = PASS_TRAIN | PASS_EVAL,
     .about = "arena offsets of the activations (--no-memplan: a buffer each)",
     .requires = {"lower"},
     .after = {"*"}},
    {.name = NULL},
};

pass_options pass_default_options(void) {
    pass_options o = {1, 1, NULL, NULL, 0, PASS_PRECISION_FP32, 0, PASS_CONV_IM2COL};
    return o;
}

const pass_info *pass_find(const char *name) {
    for (const pass_info *p = pass_registry; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

const char *pass_names_str(char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    for (const pass_info *p = pass_registry; p->name && len < n; p++) {
        int w = snprintf(buf + len, n - len, "%s%s", len ? " " : "", p->name);
        if (w < 0) break;
        len += (size_t)w;
    }
    return buf;
}

int pass_opt_find(const pass_info *p, const char *name) {
    for (int i = 0; i < PASS_OPTS_MAX && p->opts[i].name; i++)
        if (!strcmp(p->opts[i].name, name)) return i;
    return -1;
}

static const char *const type_names[] = {"int", "float", "enum", "size"};

/* "fp32|bf16" or "(0, 1048576]" into buf. */
static const char *allowed_str(const pass_opt *o, char *buf, size_t n) {
    if (o->type == PASS_OPT_ENUM) {
        size_t len = 0;
        buf[0] = 0;
        for (int i = 0; i < 4 && o->values[i] && len < n; i++)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? "|" : "", o->values[i]);
        return buf;
    }
    snprintf(buf, n, "%s%.17g, %.17g]", o->min_open ? "(" : "[", o->min, o->max);
    return buf;
}

int pass_opt_parse(const pass_opt *o, const char *text, double *out, char *err, size_t errlen) {
    char allowed[128];
    allowed_str(o, allowed, sizeof allowed);
    if (o->type == PASS_OPT_ENUM) {
        for (int i = 0; i < 4 && o->values[i]; i++)
            if (!strcmp(o->values[i], text)) return *out = i, 0;
        return base_fail(err, errlen, "%s takes %s, got '%s'", o->name, allowed, text);
    }
    double v = 0;
    int64_t i = 0;
    int bad = o->type == PASS_OPT_INT     ? base_parse_i64(text, &i)
              : o->type == PASS_OPT_FLOAT ? base_parse_f64(text, &v)
                                          : (i = base_parse_size(text)) < 0;
    if (o->type != PASS_OPT_FLOAT) v = (double)i;
    if (bad || !(v >= o->min) || (o->min_open && v == o->min) || v > o->max)
        return base_fail(err, errlen, "%s takes %s in %s, got '%s'", o->name,
                         o->type == PASS_OPT_SIZE ? "a size (bytes, K, M, G)" : type_names[o->type],
                         allowed, text);
    *out = v;
    return 0;
}

/* The shortest %g that reads back to v: the printed pipeline round-trips. */
const char *pass_opt_str(const pass_opt *o, double v, char *buf, size_t n) {
    if (o->type == PASS_OPT_ENUM) {
        int i = (int)v;
        snprintf(buf, n, "%s", i >= 0 && i < 4 && o->values[i] ? o->values[i] : "?");
        return buf;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

static void list_names(FILE *f, const char *label, const char *const *names) {
    fprintf(f, "    %s:", label);
    if (!names[0]) fputs(" -", f);
    for (int i = 0; i < PASS_DEPS_MAX && names[i]; i++)
        fprintf(f, " %s", strcmp(names[i], "*") ? names[i] : "(every other pass)");
    fputc('\n', f);
}

void pass_list(FILE *f) {
    for (const pass_info *p = pass_registry; p->name; p++) {
        fprintf(f, "%-10s %s: %s\n", p->name,
                p->programs == (PASS_TRAIN | PASS_EVAL) ? "train,eval"
                : p->programs == PASS_TRAIN             ? "train"
                                                        : "eval",
                p->about);
        if (p->optional) fprintf(f, "    not in the default pipeline (name it in --passes)\n");
        list_names(f, "requires (earlier in the pipeline)", p->requires);
        list_names(f, "after (when in the pipeline)", p->after);
        for (int i = 0; i < PASS_OPTS_MAX && p->opts[i].name; i++) {
            const pass_opt *o = &p->opts[i];
            char def[64], allowed[128];
            fprintf(f, "    option %s (%s, %s, default %s): %s\n", o->name, type_names[o->type],
                    allowed_str(o, allowed, sizeof allowed),
                    pass_opt_str(o, o->def, def, sizeof def), o->help);
        }
    }
}

/* ---- pipelines -------------------------------------------------------------- */

int pass_pipeline_find(const pass_pipeline *pl, const char *name) {
    for (int i = 0; i < pl->n; i++)
        if (!strcmp(pl->step[i].pass->name, name)) return i;
    return -1;
}

static void step_defaults(pass_step *s, const pass_info *p, const pass_pipeline *base) {
    int b = base ? pass_pipeline_find(base, p->name) : -1;
    s->pass = p;
    for (int i = 0; i < PASS_OPTS_MAX; i++)
        s->arg[i] = b >= 0 ? base->step[b].arg[i] : p->opts[i].name ? p->opts[i].def : 0;
}

void pass_pipeline_default(const pass_options *o, pass_pipeline *out) {
    out->n = 0, out->done = 0;
    for (const pass_info *p = pass_registry; p->name; p++) {
        int layout = !strcmp(p->name, "layout"), conv = !strcmp(p->name, "conv");
        if ((p->optional && !(layout && o->layout) && !(conv && o->conv)) ||
            (!o->fuse && !strcmp(p->name, "fuse")) || (!o->memplan && !strcmp(p->name, "memplan")))
            continue;
        pass_step *s = &out->step[out->n++];
        step_defaults(s, p, NULL);
    }
    if (o->bucket_bytes)
        pass_pipeline_set(out, "partition", "bucket_mb", (double)o->bucket_bytes / (1 << 20));
    pass_pipeline_set(out, "precision", "precision", o->precision);
    if (o->layout > 1) pass_pipeline_set(out, "layout", "report", 1);
    if (o->conv) pass_pipeline_set(out, "conv", "impl", o->conv);
}

/* One element "name" or "name(v, k=v, ...)" of elem_len bytes at elem. */
static int parse_step(const char *elem, size_t elem_len, const pass_pipeline *base, pass_step *s,
                      char *err, size_t errlen) {
    char text[256];
    if (elem_len >= sizeof text)
        return base_fail(err, errlen, "--passes: element too long: '%.60s...'", elem);
    memcpy(text, elem, elem_len);
    text[elem_len] = 0;
    char orig[256]; /* text, before the options are cut up */
    memcpy(orig, text, elem_len + 1);
    char *open = strchr(text, '(');
    size_t name_len = open ? (size_t)(open - text) : elem_len;
    char name[64];
    if (name_len == 0)
        return base_fail(err, errlen, "--passes: '%s': a pass name is missing", text);
    if (name_len >= sizeof name)
        return base_fail(err, errlen, "--passes: unknown pass '%.60s...'", text);
    memcpy(name, text, name_len);
    name[name_len] = 0;
    const pass_info *p = pass_find(name);
    char known[256];
    if (!p)
        return base_fail(err, errlen, "--passes: unknown pass '%s' (known: %s)", name,
                         pass_names_str(known, sizeof known));
    step_defaults(s, p, base);
    if (!open) return 0;
    if (text[elem_len - 1] != ')' || strchr(open + 1, '(') ||
        strchr(open + 1, ')') != &text[elem_len - 1])
        return base_fail(err, errlen, "--passes: '%s': unbalanced parentheses", text);
    text[elem_len - 1] = 0;
    int given[PASS_OPTS_MAX] = {0}, k = 0;
    for (char *item = open + 1, *next; item; item = next, k++) {
        next = strchr(item, ',');
        if (next) *next++ = 0;
        char *eq = strchr(item, '=');
        const char *value = eq ? eq + 1 : item;
        int i = 0;
        if (!*item && !next && k == 0) break; /* "name()": no options */
        if (eq) {
            *eq = 0;
            i = pass_opt_find(p, item);
            if (i < 0) {
                char names[128] = "";
                for (int k = 0, len = 0;
                     k < PASS_OPTS_MAX && p->opts[k].name && len < (int)sizeof names; k++)
                    len += snprintf(names + len, sizeof names - (size_t)len, "%s%s", k ? " " : "",
                                    p->opts[k].name);
                return base_fail(err, errlen, "--passes: unknown option '%s' in '%s' (%s: %s)",
                                 item, orig, name, names[0] ? names : "no options");
            }
        } else if (k) {
            return base_fail(err, errlen,
                             "--passes: '%s' in '%s': only the first option may go without a name",
                             item, orig);
        } else if (!p->opts[0].name) {
            return base_fail(err, errlen, "--passes: '%s': pass '%s' takes no options", orig, name);
        }
        if (!*value) return base_fail(err, errlen, "--passes: '%s': an empty option value", orig);
        if (given[i]++)
            return base_fail(err, errlen, "--passes: '%s': option '%s' given twice", orig,
                             p->opts[i].name);
        char why[256];
        if (pass_opt_parse(&p->opts[i], value, &s->arg[i], why, sizeof why))
            return base_fail(err, errlen, "--passes: '%s': %s", orig, why);
    }
    return 0;
}

int pass_pipeline_parse(const char *spec, const pass_pipeline *base, pass_pipeline *out, char *err,
                        size_t errlen) {
    out->n = 0, out->done = base ? base->done : 0;
    if (!*spec) return base_fail(err, errlen, "--passes: an empty pipeline");
    for (const char *at = spec;;) {
        /* An element ends at the first comma outside parentheses. */
        const char *end = at;
        int depth = 0;
        for (; *end && (depth || *end != ','); end++) {
            if (*end == '(') depth++;
            if (*end == ')' && --depth < 0) break;
        }
        if (depth || *end == ')')
            return base_fail(err, errlen, "--passes: '%.*s': unbalanced parentheses",
                             (int)(strchr(end, ',') ? strchr(end, ',') - at : (long)strlen(at)),
                             at);
        if (end == at)
            return base_fail(err, errlen, "--passes: an empty element at offset %d of '%s'",
                             (int)(at - spec), spec);
        if (out->n == PASS_PIPELINE_MAX)
            return base_fail(err, errlen, "--passes: more than %d passes", PASS_PIPELINE_MAX);
        pass_step *s = &out->step[out->n];
        if (parse_step(at, (size_t)(end - at), base, s, err, errlen)) return -1;
        if (pass_pipeline_find(out, s->pass->name) >= 0)
            return base_fail(err, errlen, "--passes: pass '%s' appears twice", s->pass->name);
        out->n++;
        if (!*end) break;
        at = end + 1;
    }
    char why[256];
    if (pass_pipeline_check(out, why, sizeof why))
        return base_fail(err, errlen, "--passes: %s", why);
    return 0;
}

int pass_pipeline_remove(pass_pipeline *pl, const char *names, char *err, size_t errlen) {
    char buf[256], known[256];
    if (snprintf(buf, sizeof buf, "%s", names) >= (int)sizeof buf)
        return base_fail(err, errlen, "--disable-pass: too long: '%.60s...'", names);
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        if (!pass_find(name))
            return base_fail(err, errlen, "--disable-pass: unknown pass '%s' (known: %s)", name,
                             pass_names_str(known, sizeof known));
        int i = pass_pipeline_find(pl, name);
        if (i < 0) continue;
        memmove(&pl->step[i], &pl->step[i + 1], (size_t)(pl->n - i - 1) * sizeof pl->step[0]);
        pl->n--;
    }
    return 0;
}

static int done(const pass_pipeline *pl, const pass_info *p) {
    return (pl->done >> (p - pass_registry)) & 1;
}

static int check_program(const pass_pipeline *pl, unsigned program, char *err, size_t errlen) {
    const char *prog = program == PASS_TRAIN ? "train" : "eval";
    for (int i = 0; i < pl->n; i++) {
        const pass_info *p = pl->step[i].pass;
        if (!(p->programs & program)) continue;
        if (done(pl, p))
            return base_fail(err, errlen, "pass '%s' already ran on the graph", p->name);
        for (int r = 0; r < PASS_DEPS_MAX && p->requires[r]; r++) {
            const pass_info *q = pass_find(p->requires[r]);
            int at = pass_pipeline_find(pl, p->requires[r]);
            if (q && (q->programs & program) && !done(pl, q) && (at < 0 || at > i))
                return base_fail(err, errlen, "pass '%s' needs '%s' before it (%s program)",
                                 p->name, q->name, prog);
        }
        for (int j = i + 1; j < pl->n; j++) {
            const pass_info *q = pl->step[j].pass;
            if (!(q->programs & program)) continue;
            for (int r = 0; r < PASS_DEPS_MAX && p->after[r]; r++)
                if (!strcmp(p->after[r], "*") || !strcmp(p->after[r], q->name))
                    return base_fail(err, errlen, "pass '%s' must come before '%s' (%s program)",
                                     q->name, p->name, prog);
        }
    }
    return 0;
}

int pass_pipeline_check(const pass_pipeline *pl, char *err, size_t errlen) {
    char why[256];
    if (check_program(pl, PASS_TRAIN, why, sizeof why) ||
        check_program(pl, PASS_EVAL, why, sizeof why))
        return base_fail(err, errlen, "%s", why);
    return 0;
}

int pass_pipeline_set(pass_pipeline *pl, const char *pass, const char *opt, double v) {
    int i = pass_pipeline_find(pl, pass), k = i < 0 ? -1 : pass_opt_find(pl->step[i].pass, opt);
    if (k < 0) return -1;
    pl->step[i].arg[k] = v;
    return 0;
}

void pass_pipeline_print(const pass_pipeline *pl, FILE *f) {
    for (int i = 0; i < pl->n; i++) {
        const pass_step *s = &pl->step[i];
        fprintf(f, "%s%s", i ? "," : "", s->pass->name);
        for (int k = 0; k < PASS_OPTS_MAX && s->pass->opts[k].name; k++) {
            char v[64];
            fprintf(f, "%s%s=%s", k ? "," : "(", s->pass->opts[k].name,
                    pass_opt_str(&s->pass->opts[k], s->arg[k], v, sizeof v));
        }
        if (s->pass->opts[0].name) fputc(')', f);
    }
    fputc('\n', f);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int pass_pipeline_run(const pass_pipeline *pl, unsigned program, ir_graph **g, const pass_env *e,
                      char *err, size_t errlen) {
    for (int i = 0; i < pl->n; i++) {
        const pass_step *s = &pl->step[i];
        if (!(s->pass->programs & program)) continue;
        pass_context c = {e ? e->train : NULL, s->arg, e ? e->memplan : NULL};
        int before = (*g)->n;
        double t0 = now_ms();
        if (s->pass->run(g, &c, err, errlen)) return -1;
        double ms = now_ms() - t0;
        char why[256];
        if (ir_verify(*g, why, sizeof why))
            return base_fail(err, errlen, "internal error: graph invalid after %s: %s",
                             s->pass->name, why);
        if (e && e->hook && e->hook(e->user, program, i, s->pass, *g, before, ms, err, errlen))
            return -1;
    }
    return 0;
}

/* ---- the defaults, as the unit tests and tools call them -------------------- */

typedef struct {
    const char *dump_after;
    FILE *dump;
} dump_hook;

static int dump_after(void *user, unsigned program, int index, const pass_info *p,
                      const ir_graph *g, int nodes_before, double ms, char *err, size_t errlen) {
    const dump_hook *d = user;
    (void)program, (void)index, (void)nodes_before, (void)ms, (void)err, (void)errlen;
    if (d->dump_after && !strcmp(d->dump_after, p->name)) ir_dump(g, d->dump ? d->dump : stdout);
    return 0;
}

static int run_program(ir_graph **g, unsigned program, const ir_train *t, const pass_options *o,
                       char *err, size_t errlen) {
    pass_options defaults = pass_default_options();
    if (!o) o = &defaults;
    char known[256];
    if (o->dump_after && !pass_find(o->dump_after))
        return base_fail(err, errlen, "unknown pass '%s' (known: %s)", o->dump_after,
                         pass_names_str(known, sizeof known));
    pass_options no_memplan = *o;
    no_memplan.memplan = 0;
    pass_pipeline pl;
    pass_pipeline_default(&no_memplan, &pl);
    dump_hook d = {o->dump_after, o->dump};
    pass_env e = {t, NULL, dump_after, &d};
    return pass_pipeline_run(&pl, program, g, &e, err, errlen);
}

int pass_run_train(ir_graph **g, const ir_train *t, const pass_options *o, char *err,
                   size_t errlen) {
    return run_program(g, PASS_TRAIN, t, o, err, errlen);
}

int pass_run_eval(ir_graph **g, const pass_options *o, char *err, size_t errlen) {
    return run_program(g, PASS_EVAL, NULL, o, err, errlen);
}
