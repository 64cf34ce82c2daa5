/* cli/dpc.c — the compiler driver: parse arguments, wire frontend → IR →
 * plan. Logic worth testing lives in the modules, not here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "ir/bytes.h"
#include "ir/file.h"
#include "ir/ir.h"
#include "ir/parse.h"
#include "ir/plan.h"
#include "passes/passes.h"

typedef struct {
    const char *model, *out, *dot, *dump_after, *target, *emit_dir, *precision;
    int dump_ir, summary, batch, no_fuse, no_memplan, stats;
    double bucket_mb; /* partition's bucket size, 0: the default */
    const char *max_memory; /* --max-memory, else $DPC_MAX_MEMORY */
} dpc_args;

static void usage(FILE *f) {
    fputs("usage: dpc MODEL.net [-o PLAN] [options]\n"
          "  -o PLAN            write the compiled plan\n"
          "  --summary          layer table and trainable parameter count\n"
          "  --dump-ir[=PASS]   IR text after all passes (or after PASS)\n"
          "  --dot FILE         Graphviz of the final training graph\n"
          "  --batch N          override the per-device batch of the train section\n"
          "  --target cpu|cuda|all  kernel sources to emit (default all)\n"
          "  --no-fuse          one kernel per op (no fusion groups)\n"
          "  --no-memplan       every tensor in a buffer of its own (no arena)\n"
          "  --bucket-mb X      gradients per all-reduce bucket, in MiB (default 25)\n"
          "  --precision fp32|bf16  bf16: activations and GEMM operands in bf16, f32 master\n"
          "                     weights, reductions and optimizer (default fp32)\n"
          "  --stats            kernels per step and activation memory, fused and planned vs not\n"
          "  --emit-kernels DIR also write every kernel source to DIR, one file each\n"
          "  --max-memory SIZE  refuse a plan needing more per device (e.g. 16G; default 256G,\n"
          "                     or $DPC_MAX_MEMORY)\n"
          "  -h, --help         this text\n",
          f);
}

static int die(const char *msg, const char *arg) {
    fprintf(stderr, "dpc: error: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 1;
}

/* Returns 0 on success, 1 on a usage error (already reported), -1 for --help. */
static int parse_args(int argc, char **argv, dpc_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) return -1;
        if (!strcmp(s, "-o") || !strcmp(s, "--dot") || !strcmp(s, "--batch") ||
            !strcmp(s, "--target") || !strcmp(s, "--emit-kernels") || !strcmp(s, "--bucket-mb") ||
            !strcmp(s, "--max-memory") || !strcmp(s, "--precision")) {
            if (i + 1 >= argc) return die("missing value after", s);
            const char *v = argv[++i];
            if (!strcmp(s, "-o")) a->out = v;
            else if (!strcmp(s, "--dot")) a->dot = v;
            else if (!strcmp(s, "--emit-kernels")) a->emit_dir = v;
            else if (!strcmp(s, "--max-memory")) a->max_memory = v;
            else if (!strcmp(s, "--precision")) {
                pass_precision_kind p;
                if (pass_precision_parse(v, &p)) return die("--precision takes fp32 or bf16, got", v);
                a->precision = v;
            }
            else if (!strcmp(s, "--target")) {
                if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "all"))
                    return die("--target takes cpu, cuda or all, got", v);
                a->target = v;
            }
            else if (!strcmp(s, "--bucket-mb")) {
                double mb;
                if (ir_parse_f64(v, &mb) || !(mb > 0) || mb > 1 << 20)
                    return die("--bucket-mb needs a positive number of MiB, got", v);
                a->bucket_mb = mb;
            }
            else {
                int64_t b;
                if (ir_parse_i64(v, &b) || b <= 0 || b > 1 << 20) return die("--batch needs a positive integer, got", v);
                a->batch = (int)b;
            }
        } else if (!strcmp(s, "--summary")) {
            a->summary = 1;
        } else if (!strcmp(s, "--no-fuse")) {
            a->no_fuse = 1;
        } else if (!strcmp(s, "--no-memplan")) {
            a->no_memplan = 1;
        } else if (!strcmp(s, "--stats")) {
            a->stats = 1;
        } else if (!strcmp(s, "--dump-ir")) {
            a->dump_ir = 1;
        } else if (!strncmp(s, "--dump-ir=", 10)) {
            a->dump_ir = 1;
            a->dump_after = s + 10;
        } else if (s[0] == '-' && s[1]) {
            return die("unknown option", s);
        } else if (a->model) {
            return die("more than one model file", s);
        } else {
            a->model = s;
        }
    }
    if (!a->model) return die("no model file (usage: dpc MODEL.net -o PLAN)", NULL);
    if (!a->out && !a->summary && !a->dump_ir && !a->dot && !a->stats && !a->emit_dir)
        return die("nothing to do: give -o PLAN, --summary, --dump-ir, --dot, --stats or "
                   "--emit-kernels", NULL);
    if (a->dump_after && strcmp(a->dump_after, "elaborate") != 0) {
        int known = 0;
        for (int i = 0; pass_names[i]; i++) known |= !strcmp(pass_names[i], a->dump_after);
        if (!known)
            return die("unknown pass for --dump-ir (known: elaborate lower autodiff optimizer partition "
                       "precision fuse)",
                       a->dump_after);
    }
    if (!a->target) a->target = "all";
    if (!a->max_memory) a->max_memory = getenv("DPC_MAX_MEMORY");
    if (a->max_memory && ir_parse_size(a->max_memory) < 0)
        return die("--max-memory (or DPC_MAX_MEMORY) needs a size such as 16G or 512M, got", a->max_memory);
    return 0;
}

static const char *const prog_names[2] = {"train", "eval"};

/* Writes each kernel of p (prelude + function) to DIR/PROG-DIALECT/NAME.c|.cu
 * and the step list to DIR/PROG-DIALECT/steps.txt. */
static int emit_kernels(const char *dir, const char *prog, const cg_program *p, const ir_graph *g,
                        char *err, size_t errlen) {
    char sub[4096], path[4400];
    const char *dname = cg_dialect_name(p->dialect), *ext = p->dialect == CG_DIALECT_CUDA ? "cu" : "c";
    snprintf(sub, sizeof sub, "%s/%s-%s", dir, prog, dname);
    if ((mkdir(dir, 0755) && errno != EEXIST) || (mkdir(sub, 0755) && errno != EEXIST)) {
        snprintf(err, errlen, "cannot create %.300s: %s", sub, strerror(errno));
        return -1;
    }
    size_t prelude = 0, off, len;
    if (p->nkernels && !cg_kernel_source(p, 0, &off, &len)) prelude = off;
    for (int k = 0; k <= p->nkernels; k++) {
        if (k < p->nkernels && cg_kernel_source(p, k, &off, &len)) continue;
        if (k < p->nkernels) snprintf(path, sizeof path, "%s/%s.%s", sub, p->kernels[k].name, ext);
        else snprintf(path, sizeof path, "%s/steps.txt", sub);
        char *text = NULL;
        size_t tlen = 0;
        FILE *f = open_memstream(&text, &tlen);
        if (!f) {
            snprintf(err, errlen, "cannot write %.300s: %s", path, strerror(errno));
            return -1;
        }
        if (k < p->nkernels) {
            fwrite(p->source, 1, prelude, f);
            fwrite(p->source + off, 1, len, f);
        } else {
            cg_program_describe(p, g, f);
        }
        int bad = fclose(f) != 0;
        char why[1024];
        if (bad || ir_file_write_all(path, text, tlen, why, sizeof why)) {
            if (bad) snprintf(err, errlen, "cannot write %.300s: out of memory", path);
            else snprintf(err, errlen, "%.500s", why);
            free(text);
            return -1;
        }
        free(text);
    }
    return 0;
}

/* Appends a serialised record to a plan section being built; frees it. */
static void append_bytes(unsigned char **section, size_t *len, unsigned char *bytes, size_t n) {
    *section = realloc(*section, *len + n);
    if (!*section) abort();
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
    if (!rc && to_plan && plan_add_section(plan, cg_section_tag(d), section, len)) {
        snprintf(err, errlen, "cannot add plan section %s", cg_section_tag(d));
        rc = -1;
    }
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
    if (!rc && plan_add_section(plan, MEMPLAN_SECTION, section, len)) {
        snprintf(err, errlen, "cannot add plan section %s", MEMPLAN_SECTION);
        rc = -1;
    }
    free(section);
    return rc;
}

/* Refuses a plan whose memory per device exceeds the limit, before code is
 * generated for it; plans: the programs' memory plans, or NULLs without
 * memory planning. */
static int check_memory(const dpc_plan *plan, const dpc_args *a, pass_memplan *const plans[2], char *err,
                        size_t errlen) {
    pass_memory need;
    pass_memory_need(plan->train, plans[0], plan->eval, plans[1], &need);
    int64_t limit = a->max_memory ? ir_parse_size(a->max_memory) : PASS_MAX_MEMORY_DEFAULT;
    if (pass_memory_total(&need) <= limit) return 0;
    char what[400], total[32], lim[32];
    pass_memory_describe(&need, what, sizeof what);
    snprintf(err, errlen, "the plan needs %s per device (%s); the limit is %s (set --max-memory or "
             "DPC_MAX_MEMORY)", ir_bytes_str(pass_memory_total(&need), total, sizeof total), what,
             ir_bytes_str(limit, lim, sizeof lim));
    return -1;
}

static double mib(int64_t b) { return (double)b / (1 << 20); }

/* --stats: what fusion and planning buy, for one program. The unfused
 * figures come from the same graph with its groups dropped (one kernel per
 * node, every stored tensor its own buffer). */
static int print_stats(const char *prog, const ir_graph *g, char *err, size_t errlen) {
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
        printf("%s program (batch %lld, %s): %d nodes, %d fusion groups\n", prog, (long long)batch,
               pass_precision_name(pass_precision_of(g)), g->n, ir_num_groups(g));
        printf("%s kernels per step: fused %d, unfused %d (%.2fx fewer; %d of them GEMMs)\n", prog, lf,
               lu, lf ? (double)lu / lf : 0.0, gf);
        printf("%s steps: fused %d, unfused %d\n", prog, pf->nsteps, pu->nsteps);
        printf("%s arena bytes: planned %lld, naive %lld, lower bound %lld\n", prog,
               (long long)m->arena_bytes, (long long)m->naive_bytes, (long long)m->lower_bytes);
        printf("%s activation memory: planned %.1f MiB = %.1f%% of naive %.1f MiB (a buffer per "
               "tensor), %.3fx the lower bound %.1f MiB (most bytes live at one step); "
               "unfused and unplanned %.1f MiB\n",
               prog, mib(m->arena_bytes), m->naive_bytes ? 100.0 * (double)m->arena_bytes / (double)m->naive_bytes : 0.0,
               mib(m->naive_bytes), m->lower_bytes ? (double)m->arena_bytes / (double)m->lower_bytes : 0.0,
               mib(m->lower_bytes), mib(flat_naive));
        printf("%s outside the arena: gradients and their all-reduced sums %.1f MiB, conv scratch %.1f MiB\n",
               prog, mib(grads), mib(pf->scratch * 4));
        if (pass_partition_buckets(g, NULL, 0) > 0) {
            printf("%s ", prog);
            pass_partition_describe(g, stdout);
        }
    }
    pass_memplan_free(m);
    pass_memplan_free(mu);
    cg_program_free(pf);
    cg_program_free(pu);
    ir_free(flat);
    return rc;
}

static int write_dot(const ir_graph *g, const char *name, const char *path) {
    char *text = NULL, err[1024];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        fprintf(stderr, "dpc: error: --dot: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    ir_dot(g, name, f);
    int rc = 0;
    if (fclose(f) != 0) {
        fprintf(stderr, "dpc: error: --dot %s: %s\n", path, strerror(errno));
        rc = 1;
    }
    if (!rc && ir_file_write_all(path, text, len, err, sizeof err)) {
        fprintf(stderr, "dpc: error: --dot %s\n", err);
        rc = 1;
    }
    free(text);
    return rc;
}

/* Outputs are refused before any work when they name the model (or each
 * other), or cannot be written. */
static int check_outputs(const dpc_args *a) {
    const char *outs[2][2] = {{"-o", a->out}, {"--dot", a->dot}};
    char err[1024];
    for (int k = 0; k < 2; k++) {
        const char *o = outs[k][1];
        if (!o) continue;
        if (ir_file_same(o, a->model) || !strcmp(o, a->model)) {
            fprintf(stderr, "dpc: error: %s %s is the model being compiled; writing it would destroy it\n",
                    outs[k][0], o);
            return 1;
        }
        if (ir_file_check_writable(o, outs[k][0], err, sizeof err)) {
            fprintf(stderr, "dpc: error: %s\n", err);
            return 1;
        }
    }
    if (a->out && a->dot && (!strcmp(a->out, a->dot) || ir_file_same(a->out, a->dot))) {
        fprintf(stderr, "dpc: error: -o and --dot name the same file %s\n", a->out);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    dpc_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc) return 1;
    if (check_outputs(&a)) return 1;

    fe_program *prog = fe_parse_file(a.model);
    if (!prog) return 1;
    dpc_plan plan = {0};
    plan.schedule = *fe_train(prog);
    if (a.batch) plan.schedule.batch = a.batch;
    snprintf(plan.model, sizeof plan.model, "%s", fe_network_name(prog));
    snprintf(plan.source, sizeof plan.source, "%s", a.model);
    plan.train = fe_build_graph(prog, plan.schedule.batch, 1);
    plan.eval = plan.train ? fe_build_graph(prog, plan.schedule.eval_batch, 0) : NULL;
    fe_free(prog);
    rc = plan.train && plan.eval ? 0 : 1;

    char err[512];
    if (!rc && a.summary) ir_summary(plan.train, stdout);
    if (!rc && a.dump_after && !strcmp(a.dump_after, "elaborate")) ir_dump(plan.train, stdout);

    pass_options po = pass_default_options();
    po.fuse = !a.no_fuse;
    po.memplan = !a.no_memplan;
    po.bucket_bytes = a.bucket_mb > 0 ? (size_t)(a.bucket_mb * (1 << 20)) : 0;
    if (a.bucket_mb > 0 && po.bucket_bytes < 4) po.bucket_bytes = 4; /* at least one float */
    po.dump_after = a.dump_after && strcmp(a.dump_after, "elaborate") ? a.dump_after : NULL;
    po.dump = stdout;
    if (a.precision) pass_precision_parse(a.precision, &po.precision);
    pass_options eval_po = po;
    eval_po.dump_after = NULL; /* one dump: the training program's */
    if (!rc && (pass_run_train(&plan.train, &plan.schedule, &po, err, sizeof err) ||
                pass_run_eval(&plan.eval, &eval_po, err, sizeof err))) {
        fprintf(stderr, "%s: error: %s\n", a.model, err);
        rc = 1;
    }
    /* The memory plans, made once: the limit checks them, the plan file stores them. */
    pass_memplan *memplans[2] = {NULL, NULL};
    if (!rc && po.memplan &&
        (!(memplans[0] = pass_memplan_run(plan.train, err, sizeof err)) ||
         !(memplans[1] = pass_memplan_run(plan.eval, err, sizeof err)))) {
        fprintf(stderr, "%s: error: %s\n", a.model, err);
        rc = 1;
    }
    if (!rc && check_memory(&plan, &a, memplans, err, sizeof err)) {
        fprintf(stderr, "%s: error: %s\n", a.model, err);
        rc = 1;
    }
    if (!rc && a.dump_ir && !a.dump_after) ir_dump(plan.train, stdout);
    int want_c = strcmp(a.target, "cuda") != 0, want_cuda = strcmp(a.target, "cpu") != 0;
    if (!rc && (a.out || a.emit_dir) &&
        ((want_c && add_kernels(&plan, CG_DIALECT_C, a.out != NULL, a.emit_dir, err, sizeof err)) ||
         (want_cuda && add_kernels(&plan, CG_DIALECT_CUDA, a.out != NULL, a.emit_dir, err, sizeof err)))) {
        fprintf(stderr, "%s: error: code generation: %s\n", a.model, err);
        rc = 1;
    }
    if (!rc && a.out && po.memplan && add_memplans(&plan, memplans, err, sizeof err)) {
        fprintf(stderr, "%s: error: memory planning: %s\n", a.model, err);
        rc = 1;
    }
    if (!rc && a.stats &&
        (print_stats("train", plan.train, err, sizeof err) || print_stats("eval", plan.eval, err, sizeof err))) {
        fprintf(stderr, "%s: error: %s\n", a.model, err);
        rc = 1;
    }
    if (!rc && a.dot) rc = write_dot(plan.train, plan.model, a.dot);
    if (!rc && a.out && plan_write(&plan, a.out, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        rc = 1;
    }
    pass_memplan_free(memplans[0]);
    pass_memplan_free(memplans[1]);
    ir_free(plan.train);
    ir_free(plan.eval);
    plan_free_sections(&plan);
    return rc;
}
