/* cli/dpc.c — the compiler's command line: arguments into a dpc_options,
 * then dpc_compile (driver/compile.h) does the work. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/args.h"
#include "driver/compile.h"
#include "driver/version.h"
#include "base/parse.h"

/* Everything the command line sets. */
typedef struct {
    dpc_options o;
    int list_passes, print_pipeline;
    const char *sets[DPC_MAX_SETS]; /* o.sets */
} dpc_args;

#define AT(field)  offsetof(dpc_args, field)
#define OPT(field) AT(o.field)

static int store_batch(const arg_parser *p, const arg_spec *s, const char *v, void *dst) {
    int64_t b;
    if (base_parse_i64(v, &b) || b <= 0 || b > 1 << 20)
        return arg_fail(p->prog, "%s needs a positive integer, got: %s", s->name, v);
    ((dpc_args *)dst)->o.batch = (int)b;
    return 0;
}

/* --set NAME=VALUE, repeatable: the frontend checks NAME and VALUE
 * against the model's constants. */
static int store_set(const arg_parser *p, const arg_spec *s, const char *v, void *dst) {
    dpc_args *a = dst;
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1])
        return arg_fail(p->prog, "%s takes NAME=VALUE, got: %s", s->name, v);
    if (a->o.nsets == DPC_MAX_SETS)
        return arg_fail(p->prog, "%s: at most %d of them", s->name, DPC_MAX_SETS);
    a->sets[a->o.nsets++] = v;
    a->o.sets = a->sets;
    return 0;
}

static int store_target(const arg_parser *p, const arg_spec *s, const char *v, void *dst) {
    if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "all"))
        return arg_fail(p->prog, "%s takes cpu, cuda or all, got: %s", s->name, v);
    ((dpc_args *)dst)->o.target = v;
    return 0;
}

/* partition's bucket_mb: its schema says what is allowed */
static int store_bucket_mb(const arg_parser *p, const arg_spec *s, const char *v, void *dst) {
    char why[256];
    if (dpc_parse_bucket_mb(v, &((dpc_args *)dst)->o.bucket_mb, why, sizeof why))
        return arg_fail(p->prog, "%s: %s", s->name, why);
    return 0;
}

static int store_precision(const arg_parser *p, const arg_spec *s, const char *v, void *dst) {
    if (!dpc_precision_known(v))
        return arg_fail(p->prog, "%s takes fp32, bf16 or tf32, got: %s", s->name, v);
    ((dpc_args *)dst)->o.precision = v;
    return 0;
}

static int store_conv(const arg_parser *p, const arg_spec *s, const char *v, void *dst) {
    if (strcmp(v, "im2col") && strcmp(v, "dense") && strcmp(v, "library") && strcmp(v, "auto"))
        return arg_fail(p->prog, "%s takes im2col, dense, library or auto, got: %s", s->name, v);
    ((dpc_args *)dst)->o.conv = v;
    return 0;
}

/* --dump-ir, or --dump-ir=PASS (never a separate PASS: that is the model) */
static int store_dump_ir(const arg_parser *p, const arg_spec *s, const char *v, void *dst) {
    dpc_options *o = &((dpc_args *)dst)->o;
    o->dump_ir = 1;
    if (v) o->dump_after = v;
    (void)p, (void)s;
    return 0;
}

/* A second positional: refused, and when --dump-ir came bare and one of
 * the two names a step (`--dump-ir autodiff`), the message says how to
 * dump after it. */
static int second_positional(void *dst, const char *arg) {
    const dpc_options *o = &((dpc_args *)dst)->o;
    const char *step = !o->dump_ir || o->dump_after    ? NULL
                       : dpc_dump_step_known(arg)      ? arg
                       : dpc_dump_step_known(o->model) ? o->model
                                                       : NULL;
    if (step)
        return arg_fail("dpc",
                        "more than one model file: %s ('%s' is a pass: --dump-ir=%s dumps the IR "
                        "after it)",
                        arg, step, step);
    return arg_fail("dpc", "more than one model file: %s", arg);
}

/* Values come as `--opt V`, the pipeline's as `--opt=V` too; a flag given
 * `=V` is an unknown option. */
static const arg_spec args[] = {
    {"-o", "-o PLAN", ARG_STRING, OPT(out), 0, 0, NULL, "write the compiled plan", ARG_NEXT, NULL},
    {"--summary", "--summary", ARG_FLAG, OPT(summary), 0, 0, NULL,
     "layer table and trainable parameter count", ARG_NEXT, NULL},
    {"--params", "--params", ARG_FLAG, OPT(params), 0, 0, NULL,
     "parameters and BatchNorm statistics: name, shape, elements (the\n"
     "names dprun --save-params writes and --load-params reads)",
     ARG_NEXT, NULL},
    {"--dump-ir", "--dump-ir[=PASS]", ARG_CALL, 0, 0, 0, NULL,
     "IR text after all passes (or after PASS)", ARG_EQ, store_dump_ir},
    {"--from-ir", "--from-ir FILE", ARG_STRING, OPT(from_ir), 0, 0, NULL,
     "continue from a --dump-ir text instead of a model: the pipeline\n"
     "less the passes up to its `# after:` pass (they are done)",
     ARG_NEXT, NULL},
    {"--dot", "--dot FILE", ARG_STRING, OPT(dot), 0, 0, NULL,
     "Graphviz of the final training graph", ARG_NEXT, NULL},
    {"--batch", "--batch N", ARG_CALL, 0, 0, 0, NULL,
     "override the per-device batch of the train section", ARG_NEXT, store_batch},
    {"--set", "--set NAME=VALUE", ARG_CALL, 0, 0, 0, NULL,
     "give the model's constant NAME this value (repeatable)", ARG_NEXT, store_set},
    {"--target", "--target cpu|cuda|all", ARG_CALL, 0, 0, 0, NULL,
     "kernel sources to emit (default all)", ARG_NEXT, store_target},
    {"--no-fuse", "--no-fuse", ARG_FLAG, OPT(no_fuse), 0, 0, NULL,
     "one kernel per op (no fusion groups)", ARG_NEXT, NULL},
    {"--layout", "--layout", ARG_FLAG, OPT(layout), 1, 0, NULL,
     "channel-major activations between convolutions (the layout pass\n"
     "in the default pipeline)",
     ARG_NEXT, NULL},
    {"--layout-report", "--layout-report", ARG_FLAG, OPT(layout), 2, 0, NULL,
     "--layout, and print each program's transposes and their reasons", ARG_NEXT, NULL},
    {"--no-memplan", "--no-memplan", ARG_FLAG, OPT(no_memplan), 0, 0, NULL,
     "every tensor in a buffer of its own (no arena)", ARG_NEXT, NULL},
    {"--sync-bn", "--sync-bn", ARG_FLAG, OPT(sync_bn), 0, 0, NULL,
     "every BatchNorm takes its training statistics over all the\n"
     "replicas' batches (lower's sync_bn=1; else per device)",
     ARG_NEXT, NULL},
    {"--bucket-mb", "--bucket-mb X", ARG_CALL, 0, 0, 0, NULL,
     "gradients per all-reduce bucket, in MiB (default 25)", ARG_NEXT, store_bucket_mb},
    {"--precision", "--precision fp32|bf16|tf32", ARG_CALL, 0, 0, 0, NULL,
     "bf16: activations and GEMM operands in bf16, f32 master\n"
     "weights, reductions and optimizer; tf32: f32 GEMMs on TF32\n"
     "tensor cores (operands rounded to 10-bit mantissas; the cpu\n"
     "backend rounds alike) (default fp32)",
     ARG_NEXT, store_precision},
    {"--conv", "--conv im2col|dense|library|auto", ARG_CALL, 0, 0, 0, NULL,
     "convolutions: library: oneDNN (cpu) or cuDNN calls, dpc's own\n"
     "lowering kept as their fallback; im2col: im2col + GEMM only;\n"
     "dense: dpc's own lowering, im2col + GEMM except on planes so small\n"
     "that every input pixel meets every output pixel, which run as one\n"
     "GEMM over the unrolled weights; auto: the library or dpc's own,\n"
     "whichever the runtime measures faster per layer (default library)",
     ARG_NEXT, store_conv},
    {"--stats", "--stats", ARG_FLAG, OPT(stats), 0, 0, NULL,
     "kernels per step and activation memory, fused and planned vs not", ARG_NEXT, NULL},
    {"--cost", "--cost", ARG_FLAG, OPT(cost), 0, 0, NULL,
     "per-kernel modelled GPU time of the CUDA kernels (threads, serial\n"
     "loop, bytes, flops, us) and the step's totals, train and eval",
     ARG_NEXT, NULL},
    {"--device", "--device NAME", ARG_STRING, OPT(cost_device), 0, 0, NULL,
     "the GPU --cost models (default h200)", ARG_NEXT, NULL},
    {"--emit-kernels", "--emit-kernels DIR", ARG_STRING, OPT(emit_dir), 0, 0, NULL,
     "also write every kernel source to DIR, one file each", ARG_NEXT, NULL},
    {"--max-memory", "--max-memory SIZE", ARG_STRING, OPT(max_memory), 0, 0, NULL,
     "refuse a plan needing more per device (e.g. 16G; default 256G,\n"
     "or $DPC_MAX_MEMORY)",
     ARG_NEXT, NULL},
    {"--list-passes", "--list-passes", ARG_FLAG, AT(list_passes), 0, 0, NULL,
     "the passes: programs, prerequisites, options, defaults", ARG_NEXT, NULL},
    {"--passes", "--passes=SPEC", ARG_STRING, OPT(passes), 0, 0, NULL,
     "run exactly this pipeline, e.g.\n"
     "'lower,autodiff,optimizer,partition(bucket_mb=25),precision(bf16),\n"
     "fuse,memplan' (--bucket-mb/--precision: the options it omits)",
     ARG_EQ_OR_NEXT, NULL},
    {"--disable-pass", "--disable-pass=P[,P...]", ARG_STRING, OPT(disable_passes), 0, 0, NULL,
     "drop passes from the default pipeline (--no-fuse is\n"
     "--disable-pass=fuse, --no-memplan --disable-pass=memplan)",
     ARG_EQ_OR_NEXT, NULL},
    {"--print-pipeline", "--print-pipeline", ARG_FLAG, AT(print_pipeline), 0, 0, NULL,
     "print the pipeline the other flags give, in --passes syntax\n"
     "(with --from-ir: the passes left to run)",
     ARG_NEXT, NULL},
    {"--print-ir-after", "--print-ir-after=PASS|all|changed", ARG_STRING, OPT(print_ir_after), 0, 0,
     NULL,
     "write the IR after each such pass to\n"
     "--dump-dir DIR as NN-PASS.train.ir / .eval.ir (00: elaborate)",
     ARG_EQ_OR_NEXT, NULL},
    {"--dump-dir", "--dump-dir DIR", ARG_STRING, OPT(dump_dir), 0, 0, NULL,
     "where --print-ir-after writes (created if missing)", ARG_EQ_OR_NEXT, NULL},
    {"--time-passes", "--time-passes", ARG_FLAG, OPT(time_passes), 0, 0, NULL,
     "a row per pass: ms, nodes before/after, kernels, arena bytes", ARG_NEXT, NULL},
    {"--help", "-h, --help", ARG_HELP, 0, 0, 0, NULL, "this text", ARG_NEXT, NULL},
    {"--version", "--version", ARG_VERSION, 0, 0, 0, NULL,
     "the release, the plan formats and what this build has", ARG_NEXT, NULL},
};

static const arg_parser parser = {
    .prog = "dpc",
    .usage = "usage: dpc MODEL.net [-o PLAN] [--cost [--device h200]] [options]\n"
             "       dpc --from-ir FILE.ir [-o PLAN] [options]\n",
    .specs = args,
    .nspecs = sizeof args / sizeof *args,
    .positional = OPT(model),
    .unknown = "unknown option: %s (see dpc --help)",
    .extra = "more than one model file: %s",
    .more = second_positional,
    .width = 18,
    .wide_gap = 2,
};

static void usage(FILE *f) {
    arg_usage(&parser, f);
    dpc_print_pass_help(f);
}

/* The command line into a, and the combinations checked: 0, 1 after an
 * error (reported), 2 after --help. */
static int parse_args(int argc, char **argv, dpc_args *args) {
    int rc = arg_parse(&parser, argc, argv, args);
    if (rc) return rc;
    dpc_options *a = &args->o;
    int print_only = args->list_passes || args->print_pipeline; /* no model needed */
    if (!a->model && !a->from_ir && !print_only)
        return arg_fail(parser.prog, "no model file (usage: dpc MODEL.net -o PLAN)");
    if (a->model && a->dump_ir && !a->dump_after && dpc_dump_step_known(a->model) &&
        access(a->model, F_OK))
        return arg_fail(parser.prog,
                        "no model file: '%s' is a pass, not a file (--dump-ir=%s dumps the IR "
                        "after it)",
                        a->model, a->model);
    if (!print_only && !a->out && !a->summary && !a->params && !a->dump_ir && !a->dot &&
        !a->stats && !a->emit_dir && !a->cost && !a->print_ir_after && !a->time_passes &&
        a->layout < 2)
        return arg_fail(
            parser.prog,
            "nothing to do: give -o PLAN, --summary, --params, --dump-ir, --dot, --stats, "
            "--cost, --emit-kernels, --print-ir-after, --time-passes or "
            "--layout-report");
    if (!a->target) a->target = "all";
    if (!a->max_memory) a->max_memory = getenv("DPC_MAX_MEMORY");
    char err[16384];
    if (dpc_options_check(a, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    dpc_args args = {0};
    dpc_options *a = &args.o;
    int rc = parse_args(argc, argv, &args);
    if (rc == 2) {
        usage(stdout);
        return 0;
    }
    if (rc == 3) {
        dpc_print_version(stdout, "dpc");
        return 0;
    }
    if (rc) return 1;
    a->notes = stderr;
    char err[16384];
    if (args.list_passes) dpc_list_passes(stdout);
    if (args.print_pipeline && dpc_print_pipeline(a, stdout, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (args.list_passes || args.print_pipeline) return 0;
    if (dpc_compile(a, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}
