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
#include "ir/bytes.h"
#include "ir/err.h"
#include "ir/file.h"
#include "ir/ir.h"
#include "ir/parse.h"
#include "ir/plan.h"
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

int dpc_options_check(const dpc_options *o, char *err, size_t errlen) {
    if (o->dump_after && strcmp(o->dump_after, "elaborate") != 0 && !pass_find(o->dump_after)) {
        char known[256];
        return ir_fail(err, errlen,
                       "dpc: error: unknown pass for --dump-ir (known: elaborate %s): %s",
                       pass_names_str(known, sizeof known), o->dump_after);
    }
    if (o->max_memory && ir_parse_size(o->max_memory) < 0)
        return ir_fail(err, errlen,
                       "dpc: error: --max-memory (or DPC_MAX_MEMORY) needs a size such as 16G "
                       "or 512M, got: %s",
                       o->max_memory);
    if (o->target && !known_target(o->target))
        return ir_fail(err, errlen, "dpc: error: --target takes cpu, cuda or all, got: %s",
                       o->target);
    pass_precision_kind p;
    if (o->precision && pass_precision_parse(o->precision, &p))
        return ir_fail(err, errlen, "dpc: error: --precision takes fp32 or bf16, got: %s",
                       o->precision);
    char names[256];
    if (o->cost_device && !cg_device_find(o->cost_device))
        return ir_fail(err, errlen, "dpc: error: --device: unknown device %s (known: %s)",
                       o->cost_device, cg_device_names(names, sizeof names));
    return 0;
}

static const char *const prog_names[2] = {"train", "eval"};

/* Writes each kernel of p (prelude + function) to DIR/PROG-DIALECT/NAME.c|.cu
 * and the step list to DIR/PROG-DIALECT/steps.txt. */
static int emit_kernels(const char *dir, const char *prog, const cg_program *p, const ir_graph *g,
                        char *err, size_t errlen) {
    char sub[4096], path[4400];
    const char *dname = cg_dialect_name(p->dialect), *ext = cg_dialect_of(p->dialect)->ext;
    snprintf(sub, sizeof sub, "%s/%s-%s", dir, prog, dname);
    if ((mkdir(dir, 0755) && errno != EEXIST) || (mkdir(sub, 0755) && errno != EEXIST))
        return ir_fail(err, errlen, "cannot create %.300s: %s", sub, strerror(errno));
    size_t prelude = 0, off, len;
    if (p->nkernels && !cg_kernel_source(p, 0, &off, &len)) prelude = off;
    for (int k = 0; k <= p->nkernels; k++) {
        if (k < p->nkernels && cg_kernel_source(p, k, &off, &len)) continue;
        if (k < p->nkernels)
            snprintf(path, sizeof path, "%s/%s.%s", sub, p->kernels[k].name, ext);
        else
            snprintf(path, sizeof path, "%s/steps.txt", sub);
        char *text = NULL;
        size_t tlen = 0;
        FILE *f = open_memstream(&text, &tlen);
        if (!f) return ir_fail(err, errlen, "cannot write %.300s: %s", path, strerror(errno));
        if (k < p->nkernels) {
            fwrite(p->source, 1, prelude, f);
            fwrite(p->source + off, 1, len, f);
        } else {
            cg_program_describe(p, g, f);
        }
        int bad = fclose(f) != 0;
        char why[1024];
        if (bad || ir_file_write_all(path, text, tlen, why, sizeof why)) {
            free(text);
            if (bad) return ir_fail(err, errlen, "cannot write %.300s: out of memory", path);
            return ir_fail(err, errlen, "%.500s", why);
        }
        free(text);
    }
    return 0;
}

/* Appends a serialised record to a plan section being built; frees it. */
static void append_bytes(unsigned char **section, size_t *len, unsigned char *bytes, size_t n) {
    *section = realloc(*section, *len + n);
    IR_CHECK_ALLOC(*section);
    memcpy(*section + *len, bytes, n);
    *len += n;
    free(bytes);
}

/* Renders both programs in one dialect into one plan section (when plan is
 * to be written) and into DIR (--emit-kernels). cg_generate with the
 * default options (NULL) is what dprun renders too (runtime/exec/exec.c): it
 * refuses a plan whose section is not exactly this. */
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
        if (!p || (emit_dir && emit_kernels(emit_dir, prog_names[i], p, progs[i], err, errlen)) ||
            cg_program_serialize(p, &bytes, &n))
            rc = -1;
        else
            append_bytes(&section, &len, bytes, n);
        cg_program_free(p);
    }
    if (!rc && to_plan && plan_add_section(plan, cg_section_tag(d), section, len))
        rc = ir_fail(err, errlen, "cannot add plan section %s", cg_section_tag(d));
    free(section);
    return rc;
}

/* Both programs' memory plans (train, eval) in one section, records back to back. */
static int add_memplans(dpc_plan *plan, pass_memplan *const plans[2], char *err, size_t errlen) {
    unsigned char *section = NULL;
    size_t len = 0;
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++) {
        unsigned char *bytes;
        size_t n;
        if (pass_memplan_serialize(plans[i], &bytes, &n))
            rc = -1;
        else
            append_bytes(&section, &len, bytes, n);
    }
    if (!rc && plan_add_section(plan, MEMPLAN_SECTION, section, len))
        rc = ir_fail(err, errlen, "cannot add plan section %s", MEMPLAN_SECTION);
    free(section);
    return rc;
}

/* Refuses a plan whose memory per device exceeds the limit, before code is
 * generated for it; plans: the programs' memory plans, or NULLs without
 * memory planning. */
static int check_memory(const dpc_plan *plan, const dpc_options *o, pass_memplan *const plans[2],
                        char *err, size_t errlen) {
    pass_memory need;
    pass_memory_need(plan->train, plans[0], plan->eval, plans[1], &need);
    int64_t limit = o->max_memory ? ir_parse_size(o->max_memory) : PASS_MAX_MEMORY_DEFAULT;
    if (pass_memory_total(&need) <= limit) return 0;
    char what[400], total[32], lim[32];
    pass_memory_describe(&need, what, sizeof what);
    return ir_fail(err, errlen,
                   "the plan needs %s per device (%s); the limit is %s (set --max-memory or "
                   "DPC_MAX_MEMORY)",
                   ir_bytes_str(pass_memory_total(&need), total, sizeof total), what,
                   ir_bytes_str(limit, lim, sizeof lim));
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
    pass_memplan *m = pu ? pass_memplan_run(g, err, errlen) : NULL;
    pass_memplan *mu = m ? pass_memplan_lifetimes(flat) : NULL;
    int rc = m ? 0 : -1;
    if (!rc) {
        int gf, gu, lf = cg_program_launches(pf, &gf), lu = cg_program_launches(pu, &gu);
        int64_t flat_naive = 0, grads = 0, batch = 0;
        for (int i = 0; i < flat->n; i++) flat_naive += mu->bytes[i];
        for (int i = 0; i < g->n; i++) {
            const ir_node *n = &g->nodes[i];
            if ((n->flags & IR_FLAG_GRAD) || n->op == IR_OP_ALLREDUCE)
                grads += ir_numel(&n->type) * (int64_t)ir_dtype_size(n->type.dtype);
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
    pass_memplan_free(m);
    pass_memplan_free(mu);
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
        return ir_fail(err, errlen, "dpc: error: --dot: cannot write %s: %s", path,
                       strerror(errno));
    ir_dot(g, name, f);
    int rc = 0;
    if (fclose(f) != 0)
        rc = ir_fail(err, errlen, "dpc: error: --dot %s: %s", path, strerror(errno));
    if (!rc && ir_file_write_all(path, text, len, why, sizeof why))
        rc = ir_fail(err, errlen, "dpc: error: --dot %s", why);
    free(text);
    return rc;
}

/* Outputs are refused before any work when they name the model (or each
 * other), or cannot be written. */
static int check_outputs(const dpc_options *o, char *err, size_t errlen) {
    const char *outs[2][2] = {{"-o", o->out}, {"--dot", o->dot}};
    char why[1024];
    for (int k = 0; k < 2; k++) {
        const char *out = outs[k][1];
        if (!out) continue;
        if (ir_file_same(out, o->model) || !strcmp(out, o->model))
            return ir_fail(err, errlen,
                           "dpc: error: %s %s is the model being compiled; writing it would "
                           "destroy it",
                           outs[k][0], out);
        if (ir_file_check_writable(out, outs[k][0], why, sizeof why))
            return ir_fail(err, errlen, "dpc: error: %s", why);
    }
    if (o->out && o->dot && (!strcmp(o->out, o->dot) || ir_file_same(o->out, o->dot)))
        return ir_fail(err, errlen, "dpc: error: -o and --dot name the same file %s", o->out);
    return 0;
}

/* The frontend's two programs at the schedule's batches. */
static int build(const dpc_options *o, dpc_plan *plan, char *err, size_t errlen) {
    fe_program *prog = o->source
                           ? fe_parse_string_err(o->model, o->source, o->source_len, err, errlen)
                           : fe_parse_file_err(o->model, err, errlen);
    if (!prog) return -1;
    plan->schedule = *fe_train(prog);
    if (o->batch) plan->schedule.batch = o->batch;
    snprintf(plan->model, sizeof plan->model, "%s", fe_network_name(prog));
    snprintf(plan->source, sizeof plan->source, "%s", o->model);
    plan->train = fe_build_graph_err(prog, plan->schedule.batch, 1, err, errlen);
    plan->eval =
        plan->train ? fe_build_graph_err(prog, plan->schedule.eval_batch, 0, err, errlen) : NULL;
    fe_free(prog);
    return plan->train && plan->eval ? 0 : -1;
}

static pass_options pass_options_of(const dpc_options *o, FILE *report) {
    pass_options po = pass_default_options();
    po.fuse = !o->no_fuse;
    po.memplan = !o->no_memplan;
    po.layout = o->layout;
    po.bucket_bytes = o->bucket_mb > 0 ? (size_t)(o->bucket_mb * (1 << 20)) : 0;
    if (o->bucket_mb > 0 && po.bucket_bytes < 4) po.bucket_bytes = 4; /* at least one float */
    po.dump_after = o->dump_after && strcmp(o->dump_after, "elaborate") ? o->dump_after : NULL;
    po.dump = report;
    if (o->precision) pass_precision_parse(o->precision, &po.precision);
    return po;
}

/* Everything after the frontend; why: a stage's own message (the buffer
 * sizes dpc has always used), prefixed with the model's path into err. */
static int compile_plan(const dpc_options *o, dpc_plan *plan, pass_memplan *memplans[2],
                        FILE *report, char *err, size_t errlen) {
    const char *model = o->model, *target = o->target ? o->target : "all";
    char why[512];
    if (o->summary) ir_summary(plan->train, report);
    if (o->dump_after && !strcmp(o->dump_after, "elaborate")) ir_dump(plan->train, report);

    pass_options po = pass_options_of(o, report);
    pass_options eval_po = po;
    eval_po.dump_after = NULL; /* one dump: the training program's */
    if (pass_run_train(&plan->train, &plan->schedule, &po, why, sizeof why) ||
        pass_run_eval(&plan->eval, &eval_po, why, sizeof why))
        return ir_fail(err, errlen, "%s: error: %s", model, why);
    /* The memory plans, made once: the limit checks them, the plan file stores them. */
    if (po.memplan && (!(memplans[0] = pass_memplan_run(plan->train, why, sizeof why)) ||
                       !(memplans[1] = pass_memplan_run(plan->eval, why, sizeof why))))
        return ir_fail(err, errlen, "%s: error: %s", model, why);
    if (check_memory(plan, o, memplans, why, sizeof why))
        return ir_fail(err, errlen, "%s: error: %s", model, why);
    if (o->dump_ir && !o->dump_after) ir_dump(plan->train, report);
    for (int d = 0; d < CG_DIALECT_COUNT && (o->out || o->emit_dir); d++)
        if (target_wants(target, (cg_dialect)d) &&
            add_kernels(plan, (cg_dialect)d, o->out != NULL, o->emit_dir, why, sizeof why))
            return ir_fail(err, errlen, "%s: error: code generation: %s", model, why);
    if (o->out && po.memplan && add_memplans(plan, memplans, why, sizeof why))
        return ir_fail(err, errlen, "%s: error: memory planning: %s", model, why);
    if (o->stats && (print_stats(report, "train", plan->train, why, sizeof why) ||
                     print_stats(report, "eval", plan->eval, why, sizeof why)))
        return ir_fail(err, errlen, "%s: error: %s", model, why);
    const cg_device *dev = o->cost_device ? cg_device_find(o->cost_device) : &cg_devices[0];
    if (o->cost && (cg_cost_report(report, "train", plan->train, dev, NULL, why, sizeof why) ||
                    cg_cost_report(report, "eval", plan->eval, dev, NULL, why, sizeof why)))
        return ir_fail(err, errlen, "%s: error: cost report: %s", model, why);
    if (o->dot && write_dot(plan->train, plan->model, o->dot, err, errlen)) return -1;
    if (o->out && plan_write(plan, o->out, why, sizeof why)) return ir_fail(err, errlen, "%s", why);
    return 0;
}

int dpc_compile(const dpc_options *o, char *err, size_t errlen) {
    if (!o->model) return ir_fail(err, errlen, "dpc: error: no model file");
    if (dpc_options_check(o, err, errlen) || check_outputs(o, err, errlen)) return -1;
    FILE *report = o->report ? o->report : stdout;
    dpc_plan plan = {0};
    pass_memplan *memplans[2] = {NULL, NULL};
    int rc = build(o, &plan, err, errlen);
    if (!rc) rc = compile_plan(o, &plan, memplans, report, err, errlen);
    pass_memplan_free(memplans[0]);
    pass_memplan_free(memplans[1]);
    ir_free(plan.train);
    ir_free(plan.eval);
    plan_free_sections(&plan);
    return rc;
}
