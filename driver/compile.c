/* driver/compile.c — dpc_compile: frontend → passes → memory plans →
 * kernels → plan, in the order dpc has always done them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/codegen.h"
#include "codegen/cost.h"
#include "driver/compile.h"
#include "frontend/frontend.h"
#include "base/bytes.h"
#include "base/err.h"
#include "base/file.h"
#include "ir/ir.h"
#include "base/parse.h"
#include "format/plan.h"
#include "ir/text.h"
#include "ir/validate.h"
#include "passes/passes.h"

/* --target all, or the one dialect whose table names this target. */
static int target_wants(const char *target, cg_dialect d) {
    return !strcmp(target, "all") || !strcmp(target, cg_dialect_of(d)->target);
}

static int known_target(const char *target) {
    for (int d = 0; d < CG_DIALECT_COUNT; d++)
        if (target_wants(target, (cg_dialect)d)) return 1;
    return 0;
}

static pass_options pass_options_of(const dpc_options *o) {
    pass_options po = pass_default_options();
    po.fuse = !o->no_fuse;
    po.memplan = !o->no_memplan;
    po.layout = o->layout; /* --layout: the layout pass in the default pipeline */
    /* --conv library (the default), dense or auto: the conv pass in it;
     * im2col leaves it out (cli/dpc.c checked the word) */
    po.conv = o->conv && !strcmp(o->conv, "im2col")  ? PASS_CONV_IM2COL
              : o->conv && !strcmp(o->conv, "dense") ? PASS_CONV_DENSE
              : o->conv && !strcmp(o->conv, "auto")  ? PASS_CONV_AUTO
                                                     : PASS_CONV_LIBRARY;
    return po;
}

/* The passes a graph dumped after the pass named after has been through:
 * those of the registry up to and including it (the default order; a
 * pipeline cannot reorder them, only leave some out), but never memplan,
 * whose result is the plan's arena, not the graph: a dump holds none of it,
 * so memplan runs again. 0 for "elaborate". */
static unsigned done_mask(const char *after) {
    unsigned done = 0;
    if (!after || !strcmp(after, "elaborate")) return 0;
    for (int i = 0; pass_registry[i].name; i++) {
        if (strcmp(pass_registry[i].name, "memplan")) done |= 1u << i;
        if (!strcmp(pass_registry[i].name, after)) break;
    }
    return done;
}

/* dpc_pipeline for a graph after the pass named after (NULL: the
 * frontend's): the passes it has been through are done (done_mask), the
 * default pipeline leaves them out, and --passes may not name them. */
static int pipeline_after(const dpc_options *o, const char *after, pass_pipeline *out, char *err,
                          size_t errlen) {
    pass_options po = pass_options_of(o);
    pass_pipeline base;
    char why[512], from[400] = "";
    if (o->passes && (o->disable_passes || o->no_fuse || o->no_memplan))
        return base_fail(err, errlen,
                         "dpc: error: --passes names the whole pipeline: leave %s out of it "
                         "instead of %s",
                         o->disable_passes ? o->disable_passes
                         : o->no_fuse      ? "fuse"
                                           : "memplan",
                         o->disable_passes ? "--disable-pass"
                         : o->no_fuse      ? "--no-fuse"
                                           : "--no-memplan");
    if (o->passes) po.fuse = po.memplan = 1; /* base: the options of every pass */
    pass_pipeline_default(&po, &base);
    /* The flags are the options' defaults: --bucket-mb is partition's
     * bucket_mb, --precision precision's precision, --sync-bn lower's sync_bn. */
    if (o->bucket_mb > 0) pass_pipeline_set(&base, "partition", "bucket_mb", o->bucket_mb);
    if (o->sync_bn) pass_pipeline_set(&base, "lower", "sync_bn", 1);
    pass_precision_kind p;
    if (o->precision && !pass_precision_parse(o->precision, &p))
        pass_pipeline_set(&base, "precision", "precision", p);
    base.done = done_mask(after);
    if (after)
        snprintf(from, sizeof from, " (--from-ir %.200s is after %s: the passes up to it are done)",
                 o->from_ir, after);
    if (o->passes) {
        if (pass_pipeline_parse(o->passes, &base, out, why, sizeof why))
            return base_fail(err, errlen, "dpc: error: %s%s", why, from);
    } else {
        *out = base;
        for (const pass_info *q = pass_registry; q->name; q++)
            if ((out->done >> (q - pass_registry)) & 1) pass_pipeline_remove(out, q->name, NULL, 0);
        if (o->disable_passes && pass_pipeline_remove(out, o->disable_passes, why, sizeof why))
            return base_fail(err, errlen, "dpc: error: %s", why);
        if (pass_pipeline_check(out, why, sizeof why))
            return base_fail(err, errlen, "dpc: error: --disable-pass: %s%s", why, from);
    }
    return 0;
}

/* --from-ir's file, checked for what dpc needs of it: the header and both
 * programs. 0, or -1 + "FILE[:LINE:COL]: error: ..." (nothing left in *t). */
static int read_from_ir(const dpc_options *o, ir_text_file *t, char *err, size_t errlen) {
    const char *path = o->from_ir;
    if (o->source ? ir_text_parse(path, o->source, o->source_len, t, err, errlen)
                  : ir_text_read(path, t, err, errlen))
        return -1;
    const char *missing = !t->model[0]               ? "'# model' line"
                          : !t->after[0]             ? "'# after:' line"
                          : !t->has_train            ? "'# train' line"
                          : !t->graph[IR_TEXT_TRAIN] ? "train program"
                          : !t->graph[IR_TEXT_EVAL]  ? "eval program"
                                                     : NULL;
    char known[256];
    int rc = 0;
    if (missing)
        rc = base_fail(err, errlen,
                       "%s: error: no %s: --from-ir needs a whole dump of both programs (dpc "
                       "--dump-ir[=PASS]; a --print-ir-after file holds one program)",
                       path, missing);
    else if (strcmp(t->after, "elaborate") && !pass_find(t->after))
        rc = base_fail(err, errlen, "%s: error: '# after: %s' names no pass (known: elaborate %s)",
                       path, t->after, pass_names_str(known, sizeof known));
    if (rc) ir_text_free(t);
    return rc;
}

int dpc_pipeline(const dpc_options *o, pass_pipeline *out, char *err, size_t errlen) {
    if (!o->from_ir) return pipeline_after(o, NULL, out, err, errlen);
    ir_text_file t;
    if (read_from_ir(o, &t, err, errlen)) return -1;
    int rc = pipeline_after(o, t.after, out, err, errlen);
    ir_text_free(&t);
    return rc;
}

int dpc_parse_bucket_mb(const char *text, double *mb, char *why, size_t n) {
    const pass_info *pi = pass_find("partition");
    return pass_opt_parse(&pi->opts[pass_opt_find(pi, "bucket_mb")], text, mb, why, n);
}

int dpc_precision_known(const char *name) {
    pass_precision_kind k;
    return !pass_precision_parse(name, &k);
}

int dpc_dump_step_known(const char *name) {
    return !strcmp(name, "elaborate") || pass_find(name) != NULL;
}

void dpc_print_pass_help(FILE *f) {
    fputs("passes of the default pipeline, in order (PASS of --dump-ir=PASS):\n"
          "  elaborate          the training graph as the frontend built it\n",
          f);
    for (const pass_info *p = pass_registry; p->name; p++)
        fprintf(f, "  %-18s %s%s\n", p->name, p->about,
                p->programs & PASS_EVAL ? "" : " (train only)");
}

void dpc_list_passes(FILE *f) { pass_list(f); }

int dpc_print_pipeline(const dpc_options *o, FILE *f, char *err, size_t errlen) {
    pass_pipeline pl;
    if (dpc_pipeline(o, &pl, err, errlen)) return -1;
    pass_pipeline_print(&pl, f);
    return 0;
}

/* "elaborate" or a pass of pl; what names the flag; after: --from-ir's
 * pass (NULL without), before which nothing can be dumped. */
static int check_pass_name(const dpc_options *o, const char *name, const pass_pipeline *pl,
                           const char *what, const char *after, char *err, size_t errlen) {
    char known[256];
    const pass_info *p = pass_find(name);
    if (strcmp(name, "elaborate") && !p)
        return base_fail(err, errlen, "dpc: error: unknown pass for %s (known: elaborate %s): %s",
                         what, pass_names_str(known, sizeof known), name);
    if (after && (!p || ((pl->done >> (p - pass_registry)) & 1)))
        return base_fail(err, errlen, "dpc: error: %s=%s: %s is already after %s", what, name,
                         o->from_ir, after);
    if (p && pass_pipeline_find(pl, name) < 0)
        return base_fail(err, errlen, "dpc: error: %s=%s: '%s' is not in the pipeline", what, name,
                         name);
    return 0;
}

/* --dump-ir=PASS and --print-ir-after=PASS name passes of pl. */
static int check_dump_names(const dpc_options *o, const pass_pipeline *pl, const char *after,
                            char *err, size_t errlen) {
    if (o->dump_after && check_pass_name(o, o->dump_after, pl, "--dump-ir", after, err, errlen))
        return -1;
    if (o->print_ir_after && strcmp(o->print_ir_after, "all") &&
        strcmp(o->print_ir_after, "changed") &&
        check_pass_name(o, o->print_ir_after, pl, "--print-ir-after", after, err, errlen))
        return -1;
    return 0;
}

/* The pipeline of --from-ir depends on its file: dpc_compile checks it
 * once the file is read. */
int dpc_options_check(const dpc_options *o, char *err, size_t errlen) {
    pass_pipeline pl;
    if (!o->from_ir &&
        (dpc_pipeline(o, &pl, err, errlen) || check_dump_names(o, &pl, NULL, err, errlen)))
        return -1;
    if (o->print_ir_after && !o->dump_dir)
        return base_fail(err, errlen, "dpc: error: --print-ir-after needs --dump-dir DIR");
    if (o->dump_dir && !o->print_ir_after)
        return base_fail(err, errlen,
                         "dpc: error: --dump-dir needs --print-ir-after=NAME|all|changed");
    if (o->max_memory && base_parse_size(o->max_memory) < 0)
        return base_fail(err, errlen,
                         "dpc: error: --max-memory (or DPC_MAX_MEMORY) needs a size such as 16G "
                         "or 512M, got: %s",
                         o->max_memory);
    if (o->target && !known_target(o->target))
        return base_fail(err, errlen, "dpc: error: --target takes cpu, cuda or all, got: %s",
                         o->target);
    pass_precision_kind p;
    if (o->precision && pass_precision_parse(o->precision, &p))
        return base_fail(err, errlen, "dpc: error: --precision takes fp32, bf16 or tf32, got: %s",
                         o->precision);
    char names[256];
    if (o->cost_device && !cg_device_find(o->cost_device))
        return base_fail(err, errlen, "dpc: error: --device: unknown device %s (known: %s)",
                         o->cost_device, cg_device_names(names, sizeof names));
    return 0;
}

static const char *const prog_names[2] = {"train", "eval"};

/* Writes each kernel of p (prelude + function) to DIR/PROG-DIALECT/NAME.c|.cu
 * and the step list to DIR/PROG-DIALECT/steps.txt: names dpc chose, never
 * written through a link (base_file_open_in); check_outputs has made DIR. */
static int emit_kernels(const char *dir, const char *prog, const cg_program *p, const ir_graph *g,
                        char *err, size_t errlen) {
    char path[4400];
    const char *dname = cg_dialect_name(p->dialect), *ext = cg_dialect_of(p->dialect)->ext;
    size_t prelude = 0, off, len;
    if (p->nkernels && !cg_kernel_source(p, 0, &off, &len)) prelude = off;
    for (int k = 0; k <= p->nkernels; k++) {
        if (k < p->nkernels && cg_kernel_source(p, k, &off, &len)) continue;
        if (k < p->nkernels)
            snprintf(path, sizeof path, "%s-%s/%s.%s", prog, dname, p->kernels[k].name, ext);
        else
            snprintf(path, sizeof path, "%s-%s/steps.txt", prog, dname);
        char *text = NULL;
        size_t tlen = 0;
        FILE *f = open_memstream(&text, &tlen);
        if (!f) return base_fail(err, errlen, "cannot write %.300s: %s", path, strerror(errno));
        if (k < p->nkernels) {
            fwrite(p->source, 1, prelude, f);
            fwrite(p->source + off, 1, len, f);
        } else {
            cg_program_describe(p, g, f);
        }
        int bad = fclose(f) != 0;
        char why[1024];
        if (bad || base_file_write_all_in(dir, path, text, tlen, why, sizeof why)) {
            free(text);
            if (bad) return base_fail(err, errlen, "cannot write %.300s: out of memory", path);
            return base_fail(err, errlen, "--emit-kernels %.500s", why);
        }
        free(text);
    }
    return 0;
}

/* Appends a serialised record to a plan section being built; frees it. */
static void append_bytes(unsigned char **section, size_t *len, unsigned char *bytes, size_t n) {
    *section = realloc(*section, *len + n);
    BASE_CHECK_ALLOC(*section);
    memcpy(*section + *len, bytes, n);
    *len += n;
    free(bytes);
}

/* Renders both programs in one dialect into one plan section (when plan is
 * to be written) and into DIR (--emit-kernels). cg_generate with the
 * default options (NULL) is what dprun renders too (runtime/exec/exec.c): it
 * refuses a plan whose section is not exactly this. -1: code generation
 * failed; 1: writing DIR failed (the message names the file). */
static int add_kernels(dpc_plan *plan, cg_dialect d, int to_plan, const char *emit_dir, char *err,
                       size_t errlen) {
    const ir_graph *progs[2] = {plan->train, plan->eval};
    unsigned char *section = NULL;
    size_t len = 0;
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        cg_program *p = cg_generate(progs[i], d, NULL, err, errlen);
        unsigned char *bytes;
        size_t n;
        if (p && emit_dir && emit_kernels(emit_dir, prog_names[i], p, progs[i], err, errlen))
            rc = 1;
        else if (!p || cg_program_serialize(p, &bytes, &n))
            rc = -1;
        else
            append_bytes(&section, &len, bytes, n);
        cg_program_free(p);
    }
    if (!rc && to_plan && plan_add_section(plan, cg_section_tag(d), section, len))
        rc = base_fail(err, errlen, "cannot add plan section %s", cg_section_tag(d));
    free(section);
    return rc;
}

/* Both programs' memory plans (train, eval) in one section, records back to back. */
static int add_memplans(dpc_plan *plan, fmt_memplan *const plans[2], char *err, size_t errlen) {
    unsigned char *section = NULL;
    size_t len = 0;
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        unsigned char *bytes;
        size_t n;
        if (fmt_memplan_serialize(plans[i], &bytes, &n))
            rc = -1;
        else
            append_bytes(&section, &len, bytes, n);
    }
    if (!rc && plan_add_section(plan, FMT_MEMPLAN_SECTION, section, len))
        rc = base_fail(err, errlen, "cannot add plan section %s", FMT_MEMPLAN_SECTION);
    free(section);
    return rc;
}

/* Refuses a plan whose memory per device exceeds the limit, before code is
 * generated for it; plans: the programs' memory plans, or NULLs without
 * memory planning. */
static int check_memory(const dpc_plan *plan, const dpc_options *o, fmt_memplan *const plans[2],
                        char *err, size_t errlen) {
    fmt_memory need;
    fmt_memory_need(plan->train, plans[0], plan->eval, plans[1], &need);
    int64_t limit = o->max_memory ? base_parse_size(o->max_memory) : FMT_MAX_MEMORY_DEFAULT;
    if (fmt_memory_total(&need) <= limit) return 0;
    char what[400], total[32], lim[32];
    fmt_memory_describe(&need, what, sizeof what);
    return base_fail(err, errlen,
                     "the plan needs %s per device (%s); the limit is %s (set --max-memory or "
                     "DPC_MAX_MEMORY)",
                     base_bytes_str(fmt_memory_total(&need), total, sizeof total), what,
                     base_bytes_str(limit, lim, sizeof lim));
}

static double mib(int64_t b) { return (double)b / (1 << 20); }

/* --stats: what fusion and planning buy, for one program. The unfused
 * figures come from the same graph with its groups dropped (one kernel per
 * node, every stored tensor its own buffer). */
static int print_stats(FILE *out, const char *prog, const ir_graph *g, char *err, size_t errlen) {
    ir_graph *flat = ir_clone(g);
    pass_unfuse(flat);
    cg_program *pf = cg_generate(g, CG_DIALECT_C, NULL, err, errlen);
    cg_program *pu = pf ? cg_generate(flat, CG_DIALECT_C, NULL, err, errlen) : NULL;
    fmt_memplan *m = pu ? pass_memplan_run(g, err, errlen) : NULL;
    fmt_memplan *mu = m ? fmt_memplan_lifetimes(flat) : NULL;
    int rc = m ? 0 : -1;
    if (!rc) {
        int gf, gu, lf = cg_program_launches(pf, &gf), lu = cg_program_launches(pu, &gu);
        int64_t flat_naive = 0, grads = 0, batch = 0;
        for (int i = 0; i < flat->n; i++) flat_naive += mu->bytes[i];
        for (int i = 0; i < g->n; i++) {
            const ir_node *n = &g->nodes[i];
            if ((n->flags & IR_FLAG_GRAD) || n->op == IR_OP_ALLREDUCE) grads += fmt_node_bytes(n);
            if (n->op == IR_OP_INPUT && !batch) batch = n->type.dim[0];
        }
        fprintf(out, "%s program (batch %lld, %s): %d nodes, %d fusion groups\n", prog,
                (long long)batch, pass_precision_name(pass_precision_of(g)), g->n,
                ir_num_groups(g));
        fprintf(out, "%s kernels per step: fused %d, unfused %d (%.2fx fewer; %d of them GEMMs)\n",
                prog, lf, lu, lf ? (double)lu / lf : 0.0, gf);
        fprintf(out, "%s steps: fused %d, unfused %d\n", prog, pf->nsteps, pu->nsteps);
        fprintf(out, "%s arena bytes: planned %lld, naive %lld, lower bound %lld\n", prog,
                (long long)m->arena_bytes, (long long)m->naive_bytes, (long long)m->lower_bytes);
        fprintf(out,
                "%s activation memory: planned %.1f MiB = %.1f%% of naive %.1f MiB (a buffer per "
                "tensor), %.3fx the lower bound %.1f MiB (most bytes live at one step); "
                "unfused and unplanned %.1f MiB\n",
                prog, mib(m->arena_bytes),
                m->naive_bytes ? 100.0 * (double)m->arena_bytes / (double)m->naive_bytes : 0.0,
                mib(m->naive_bytes),
                m->lower_bytes ? (double)m->arena_bytes / (double)m->lower_bytes : 0.0,
                mib(m->lower_bytes), mib(flat_naive));
        fprintf(out,
                "%s outside the arena: gradients and their all-reduced sums %.1f MiB, conv scratch "
                "%.1f MiB\n",
                prog, mib(grads), mib(pf->scratch * 4));
        if (pass_partition_buckets(g, NULL, 0) > 0) {
            fprintf(out, "%s ", prog);
            pass_partition_describe(g, out);
        }
    }
    fmt_memplan_free(m);
    fmt_memplan_free(mu);
    cg_program_free(pf);
    cg_program_free(pu);
    ir_free(flat);
    return rc;
}

static int write_dot(const ir_graph *g, const char *name, const char *path, char *err,
                     size_t errlen) {
    char *text = NULL, why[1024];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return base_fail(err, errlen, "dpc: error: --dot: cannot write %s: %s", path,
                         strerror(errno));
    ir_dot(g, name, f);
    int rc = 0;
    if (fclose(f) != 0)
        rc = base_fail(err, errlen, "dpc: error: --dot %s: %s", path, strerror(errno));
    if (!rc && base_file_write_all(path, text, len, why, sizeof why))
        rc = base_fail(err, errlen, "dpc: error: --dot %s", why);
    free(text);
    return rc;
}

/* The run's files into files (base/file.h): the model, -o, --dot and the
 * folders --emit-kernels fills (DIR/PROG-DIALECT); an output that is the
 * model or another output, or anything in those folders, is refused
 * before any work, and so is an output that cannot be written. --dump-dir's
 * files are checked against the set as they are written. */
static int check_outputs(const dpc_options *o, base_file_set *files, char *err, size_t errlen) {
    const char *outs[2][2] = {{"-o", o->out}, {"--dot", o->dot}};
    const char *input = o->from_ir ? o->from_ir : o->model, *target = o->target ? o->target : "all";
    char why[1024];
    if (base_file_set_add(files, BASE_FILE_INPUT, "the model being compiled", input, why,
                          sizeof why))
        return base_fail(err, errlen, "dpc: error: %s", why);
    for (int k = 0; k < 2; k++)
        if (outs[k][1] &&
            base_file_set_add(files, BASE_FILE_OUTPUT, outs[k][0], outs[k][1], why, sizeof why))
            return base_fail(err, errlen, "dpc: error: %s", why);
    for (int d = 0; d < CG_DIALECT_COUNT && o->emit_dir; d++)
        for (int i = 0; i < 2 && target_wants(target, (cg_dialect)d); i++) {
            char sub[4400], name[128];
            snprintf(name, sizeof name, "%s-%s", prog_names[i], cg_dialect_name((cg_dialect)d));
            base_path_join(sub, sizeof sub, o->emit_dir, name);
            if (base_file_set_add(files, BASE_FILE_FOLDER, "--emit-kernels", sub, why, sizeof why))
                return base_fail(err, errlen, "dpc: error: %s", why);
        }
    for (int k = 0; k < 2; k++)
        if (outs[k][1] && base_file_check_writable(outs[k][1], outs[k][0], why, sizeof why))
            return base_fail(err, errlen, "dpc: error: %s", why);
    if ((o->dump_dir && base_file_check_dir(o->dump_dir, NULL, "--dump-dir", why, sizeof why)) ||
        (o->emit_dir && base_file_check_dir(o->emit_dir, NULL, "--emit-kernels", why, sizeof why)))
        return base_fail(err, errlen, "dpc: error: %s", why);
    return 0;
}

/* The header of a dump of both programs after the pass named after. */
static void dump_header(const dpc_plan *plan, const char *after, FILE *f) {
    ir_text_file t;
    memset(&t, 0, sizeof t);
    snprintf(t.model, sizeof t.model, "%s", plan->model);
    snprintf(t.source, sizeof t.source, "%s", plan->source);
    snprintf(t.after, sizeof t.after, "%s", after);
    t.has_train = 1;
    t.train = plan->schedule;
    ir_text_write_header(&t, f);
}

/* ---- --dump-ir=PASS, --print-ir-after, --time-passes: the pass hook -------- */

typedef struct {
    const dpc_options *o;
    const base_file_set *files; /* the run's files: no dump may be one of them */
    const dpc_plan *plan;       /* model, source, schedule: the dumps' header */
    FILE *report;
    /* --dump-ir=PASS: the step of the pipeline after which each program is
     * printed (the eval program's: the last of its steps up to PASS), -1
     * for the graph as the program starts. */
    int dump_step[2];
    char *last; /* --print-ir-after=changed: the dump of the graph before the pass */
    size_t last_len;
    int rows;   /* --time-passes rows printed */
    int failed; /* the hook refused: its message is msg, whole */
    char msg[1024];
} inspect;

static char *dump_text(const ir_graph *g, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    BASE_CHECK_ALLOC(f);
    ir_dump(g, f);
    BASE_CHECK_ALLOC(fclose(f) == 0 ? text : NULL);
    return text;
}

/* DIR/NN-PASS.PROG.ir: the text form with its header (`# after: PASS`)
 * and the one program, graph the ir_dump text of it; a name dpc chose, so
 * written by base_file_open_in (a link there refused), and refused when it
 * is the model or another output. */
static int write_dump(const inspect *in, int index, const char *pass, const char *prog,
                      const char *graph, size_t graph_len, char *err, size_t errlen) {
    const dpc_options *o = in->o;
    char name[400], path[4400], why[1024];
    snprintf(name, sizeof name, "%02d-%s.%s.ir", index, pass, prog);
    base_path_join(path, sizeof path, o->dump_dir, name);
    if (base_file_set_check(in->files, "--dump-dir", path, why, sizeof why))
        return base_fail(err, errlen, "dpc: error: %s", why);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    BASE_CHECK_ALLOC(f);
    dump_header(in->plan, pass, f);
    ir_text_write_program(strcmp(prog, "eval") ? IR_TEXT_TRAIN : IR_TEXT_EVAL, NULL, f);
    fwrite(graph, 1, graph_len, f);
    ir_text_write_end(f);
    BASE_CHECK_ALLOC(fclose(f) == 0 ? text : NULL);
    int rc = 0;
    if (base_file_write_all_in(o->dump_dir, name, text, len, why, sizeof why))
        rc = base_fail(err, errlen, "dpc: error: --dump-dir %s", why);
    free(text);
    return rc;
}

/* The graph as the program starts (00-elaborate.PROG.ir, or 00-AFTER for
 * --from-ir's graph after AFTER); prints it for --dump-ir=PASS when no
 * step of the program comes at or before PASS. */
static int inspect_start(inspect *in, unsigned program, const char *start, const ir_graph *g,
                         char *err, size_t errlen) {
    const char *what = in->o->print_ir_after, *prog = program == PASS_TRAIN ? "train" : "eval";
    if (in->o->dump_after) {
        ir_text_write_program(program == PASS_TRAIN ? IR_TEXT_TRAIN : IR_TEXT_EVAL,
                              in->dump_step[program == PASS_EVAL] < 0 ? g : NULL, in->report);
    }
    free(in->last);
    in->last = NULL;
    if (!what) return 0;
    in->last = dump_text(g, &in->last_len);
    if (strcmp(what, "all") && strcmp(what, "changed") && strcmp(what, "elaborate")) return 0;
    return write_dump(in, 0, start, prog, in->last, in->last_len, err, errlen);
}

/* --time-passes' figures after a pass: kernels per step as the C dialect
 * renders the graph (cg_program_launches, as --stats counts them) and the
 * arena pass_memplan_run plans for it; '-' where the graph cannot be
 * rendered or planned yet. */
static void time_row(inspect *in, const char *prog, const pass_info *p, const ir_graph *g,
                     int nodes_before, double ms) {
    char why[512], kernels[32] = "-", arena[32] = "-";
    int gemms;
    cg_program *cp = cg_generate(g, CG_DIALECT_C, NULL, why, sizeof why);
    if (cp) snprintf(kernels, sizeof kernels, "%d", cg_program_launches(cp, &gemms));
    cg_program_free(cp);
    fmt_memplan *m = pass_memplan_run(g, why, sizeof why);
    if (m) snprintf(arena, sizeof arena, "%lld", (long long)m->arena_bytes);
    fmt_memplan_free(m);
    if (!in->rows++)
        fprintf(in->report, "%-7s %-10s %10s %12s %11s %8s %14s\n", "program", "pass", "ms",
                "nodes_before", "nodes_after", "kernels", "arena_bytes");
    fprintf(in->report, "%-7s %-10s %10.3f %12d %11d %8s %14s\n", prog, p->name, ms, nodes_before,
            g->n, kernels, arena);
}

static int inspect_pass(void *user, unsigned program, int index, const pass_info *p,
                        const ir_graph *g, int nodes_before, double ms, char *err, size_t errlen) {
    inspect *in = user;
    const dpc_options *o = in->o;
    const char *prog = program == PASS_TRAIN ? "train" : "eval", *what = o->print_ir_after;
    if (o->dump_after && index == in->dump_step[program == PASS_EVAL]) ir_dump(g, in->report);
    if (what && (!strcmp(what, "all") || !strcmp(what, "changed") || !strcmp(what, p->name))) {
        size_t len;
        char *text = dump_text(g, &len);
        int same = in->last && len == in->last_len && !memcmp(text, in->last, len);
        free(in->last);
        in->last = text, in->last_len = len;
        if (!(same && !strcmp(what, "changed")) &&
            write_dump(in, index + 1, p->name, prog, text, len, in->msg, sizeof in->msg)) {
            in->failed = 1;
            return base_fail(err, errlen, "%s", in->msg);
        }
    }
    if (o->time_passes) time_row(in, prog, p, g, nodes_before, ms);
    return 0;
}

/* The frontend's two programs at the schedule's batches. */
static int build(const dpc_options *o, dpc_plan *plan, int *defaults, char *err, size_t errlen) {
    fe_define defs[DPC_MAX_SETS];
    for (int i = 0; i < o->nsets && i < DPC_MAX_SETS; i++) { /* NAME=VALUE, checked by dpc */
        const char *eq = strchr(o->sets[i], '=');
        size_t n = eq ? (size_t)(eq - o->sets[i]) : strlen(o->sets[i]);
        char *name = malloc(n + 1);
        BASE_CHECK_ALLOC(name);
        memcpy(name, o->sets[i], n);
        name[n] = 0;
        defs[i] = (fe_define){name, eq ? eq + 1 : ""};
    }
    int nsets = o->nsets < DPC_MAX_SETS ? o->nsets : DPC_MAX_SETS;
    fe_program *prog = o->source ? fe_parse_string_defs(o->model, o->source, o->source_len, defs,
                                                        nsets, err, errlen)
                                 : fe_parse_file_defs(o->model, defs, nsets, err, errlen);
    for (int i = 0; i < nsets; i++) free((char *)defs[i].name);
    if (!prog) return -1;
    plan->schedule = *fe_train(prog);
    *defaults = !fe_has_train(prog);
    if (o->batch) plan->schedule.batch = o->batch;
    snprintf(plan->model, sizeof plan->model, "%s", fe_network_name(prog));
    snprintf(plan->source, sizeof plan->source, "%s", o->model);
    plan->train = fe_build_graph_err(prog, plan->schedule.batch, 1, err, errlen);
    plan->eval =
        plan->train ? fe_build_graph_err(prog, plan->schedule.eval_batch, 0, err, errlen) : NULL;
    fe_free(prog);
    if (!plan->train || !plan->eval) return -1;
    /* both programs at --batch, as every plan's are checked (ir/validate.h) */
    ir_where w;
    char why[512];
    if (!ir_validate(&plan->schedule, plan->train, plan->eval, &w, why, sizeof why)) return 0;
    const ir_graph *g = w.program == 1 ? plan->eval : plan->train;
    if (w.node >= 0 && g->nodes[w.node].line > 0)
        return base_fail(err, errlen, "%s:%d:%d: error: %s", o->model, g->nodes[w.node].line,
                         g->nodes[w.node].col, why);
    return base_fail(err, errlen, "%s: error: %s", o->model, why);
}

/* The graphs dpc --from-ir continues from, and the pass they are after
 * (into after, at least 32 bytes). */
static int build_from_ir(const dpc_options *o, dpc_plan *plan, char *after, char *err,
                         size_t errlen) {
    ir_text_file t;
    if (read_from_ir(o, &t, err, errlen)) return -1;
    plan->schedule = t.train;
    snprintf(plan->model, sizeof plan->model, "%s", t.model);
    snprintf(plan->source, sizeof plan->source, "%s", t.source);
    snprintf(after, 32, "%s", t.after);
    plan->train = t.graph[IR_TEXT_TRAIN];
    plan->eval = t.graph[IR_TEXT_EVAL];
    return 0;
}

/* Everything after the frontend (or --from-ir's reading; after: the pass
 * its graphs are after, "elaborate" for the frontend's); why: a stage's own
 * message (the buffer sizes dpc has always used), prefixed with the input's
 * path into err. A dump after PASS is the train program after PASS and the
 * eval program after the last of its steps up to PASS (ir/text.h). */
static int compile_plan(const dpc_options *o, const base_file_set *files, const char *after,
                        dpc_plan *plan, fmt_memplan *memplans[2], FILE *report, char *err,
                        size_t errlen) {
    const char *model = o->from_ir ? o->from_ir : o->model, *target = o->target ? o->target : "all";
    const char *from = o->from_ir ? after : NULL;
    char why[512];
    pass_pipeline pl;
    if (pipeline_after(o, from, &pl, err, errlen) || check_dump_names(o, &pl, from, err, errlen))
        return -1;
    inspect in = {.o = o, .files = files, .plan = plan, .report = report, .dump_step = {-1, -1}};
    if (o->dump_after && strcmp(o->dump_after, "elaborate")) {
        in.dump_step[0] = pass_pipeline_find(&pl, o->dump_after);
        for (int i = 0; i <= in.dump_step[0]; i++)
            if (pl.step[i].pass->programs & PASS_EVAL) in.dump_step[1] = i;
    }
    if (o->summary) ir_summary(plan->train, report);
    if (o->dump_after) dump_header(plan, o->dump_after, report);

    pass_env train_env = {&plan->schedule, &memplans[0], inspect_pass, &in};
    pass_env eval_env = {NULL, &memplans[1], inspect_pass, &in};
    int rc = inspect_start(&in, PASS_TRAIN, after, plan->train, err, errlen);
    if (!rc && pass_pipeline_run(&pl, PASS_TRAIN, &plan->train, &train_env, why, sizeof why))
        rc = 1;
    if (!rc) rc = inspect_start(&in, PASS_EVAL, after, plan->eval, err, errlen);
    if (!rc && pass_pipeline_run(&pl, PASS_EVAL, &plan->eval, &eval_env, why, sizeof why)) rc = 1;
    free(in.last);
    if (rc > 0 && in.failed) return base_fail(err, errlen, "%s", in.msg);
    if (rc > 0) return base_fail(err, errlen, "%s: error: %s", model, why);
    if (rc) return -1;
    if (o->dump_after) ir_text_write_end(report);
    /* After the passes: what dprun's store holds and --save-params writes. */
    if (o->params) ir_params_table(plan->eval, report);
    /* The memory plans are memplan's: the limit checks them, the plan file stores them. */
    if (check_memory(plan, o, memplans, why, sizeof why))
        return base_fail(err, errlen, "%s: error: %s", model, why);
    if (o->dump_ir && !o->dump_after) { /* after the pipeline's last step */
        dump_header(plan, pl.n ? pl.step[pl.n - 1].pass->name : after, report);
        ir_text_write_program(IR_TEXT_TRAIN, plan->train, report);
        ir_text_write_program(IR_TEXT_EVAL, plan->eval, report);
        ir_text_write_end(report);
    }
    for (int d = 0; d < CG_DIALECT_COUNT && (o->out || o->emit_dir); d++) {
        int k = target_wants(target, (cg_dialect)d)
                    ? add_kernels(plan, (cg_dialect)d, o->out != NULL, o->emit_dir, why, sizeof why)
                    : 0;
        if (k > 0) return base_fail(err, errlen, "dpc: error: %s", why);
        if (k < 0) return base_fail(err, errlen, "%s: error: code generation: %s", model, why);
    }
    if (o->out && memplans[0] && add_memplans(plan, memplans, why, sizeof why))
        return base_fail(err, errlen, "%s: error: memory planning: %s", model, why);
    if (o->stats && (print_stats(report, "train", plan->train, why, sizeof why) ||
                     print_stats(report, "eval", plan->eval, why, sizeof why)))
        return base_fail(err, errlen, "%s: error: %s", model, why);
    const cg_device *dev = o->cost_device ? cg_device_find(o->cost_device) : &cg_devices[0];
    const ir_train *s = &plan->schedule;
    if (o->cost &&
        (cg_cost_report(report, "train", s->batch, plan->train, dev, NULL, why, sizeof why) ||
         cg_cost_report(report, "eval", s->eval_batch, plan->eval, dev, NULL, why, sizeof why)))
        return base_fail(err, errlen, "%s: error: cost report: %s", model, why);
    if (o->dot && write_dot(plan->train, plan->model, o->dot, err, errlen)) return -1;
    if (o->out && plan_write(plan, o->out, why, sizeof why))
        return base_fail(err, errlen, "%s", why);
    return 0;
}

int dpc_compile(const dpc_options *o, char *err, size_t errlen) {
    if (!o->model && !o->from_ir) return base_fail(err, errlen, "dpc: error: no model file");
    if (o->model && o->from_ir)
        return base_fail(err, errlen, "dpc: error: give a model or --from-ir FILE, not both");
    if (o->from_ir && o->nsets)
        return base_fail(err, errlen,
                         "dpc: error: --set: the graph of --from-ir %s has its constants already",
                         o->from_ir);
    if (o->from_ir && o->batch)
        return base_fail(err, errlen,
                         "dpc: error: --batch: the graph of --from-ir %s has its batch already",
                         o->from_ir);
    if (dpc_options_check(o, err, errlen)) return -1;
    base_file_set *files = base_file_set_new();
    if (check_outputs(o, files, err, errlen)) {
        base_file_set_free(files);
        return -1;
    }
    FILE *report = o->report ? o->report : stdout;
    dpc_plan plan = {0};
    fmt_memplan *memplans[2] = {NULL, NULL};
    char after[32] = "elaborate";
    int defaults = 0; /* the model has no train section */
    int rc = o->from_ir ? build_from_ir(o, &plan, after, err, errlen)
                        : build(o, &plan, &defaults, err, errlen);
    if (!rc) rc = compile_plan(o, files, after, &plan, memplans, report, err, errlen);
    if (!rc && defaults && o->notes) {
        fprintf(o->notes, "dpc: note: %s has no train section; it trains with the defaults:\n",
                o->model);
        ir_train_print(&plan.schedule, o->notes);
    }
    base_file_set_free(files);
    fmt_memplan_free(memplans[0]);
    fmt_memplan_free(memplans[1]);
    ir_free(plan.train);
    ir_free(plan.eval);
    plan_free_sections(&plan);
    return rc;
}
