/* cli/dpc.c — the compiler's command line: arguments into a dpc_options,
 * then dpc_compile (driver/compile.h) does the work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "ir/parse.h"
#include "passes/passes.h"

static void usage(FILE *f) {
    fputs(
        "usage: dpc MODEL.net [-o PLAN] [--cost [--device h200]] [options]\n"
        "       dpc --from-ir FILE.ir [-o PLAN] [options]\n"
        "  -o PLAN            write the compiled plan\n"
        "  --summary          layer table and trainable parameter count\n"
        "  --dump-ir[=PASS]   IR text after all passes (or after PASS)\n"
        "  --from-ir FILE     continue from a --dump-ir text instead of a model: the pipeline\n"
        "                     less the passes up to its `# after:` pass (they are done)\n"
        "  --dot FILE         Graphviz of the final training graph\n"
        "  --batch N          override the per-device batch of the train section\n"
        "  --target cpu|cuda|all  kernel sources to emit (default all)\n"
        "  --no-fuse          one kernel per op (no fusion groups)\n"
        "  --layout           channel-major activations between convolutions (the layout pass\n"
        "                     in the default pipeline)\n"
        "  --layout-report    --layout, and print each program's transposes and their reasons\n"
        "  --no-memplan       every tensor in a buffer of its own (no arena)\n"
        "  --sync-bn          every BatchNorm takes its training statistics over all the\n"
        "                     replicas' batches (lower's sync_bn=1; else per device)\n"
        "  --bucket-mb X      gradients per all-reduce bucket, in MiB (default 25)\n"
        "  --precision fp32|bf16  bf16: activations and GEMM operands in bf16, f32 master\n"
        "                     weights, reductions and optimizer (default fp32)\n"
        "  --stats            kernels per step and activation memory, fused and planned vs not\n"
        "  --cost             per-kernel modelled GPU time of the CUDA kernels (threads, serial\n"
        "                     loop, bytes, flops, us) and the step's totals, train and eval\n"
        "  --device NAME      the GPU --cost models (default h200)\n"
        "  --emit-kernels DIR also write every kernel source to DIR, one file each\n"
        "  --max-memory SIZE  refuse a plan needing more per device (e.g. 16G; default 256G,\n"
        "                     or $DPC_MAX_MEMORY)\n"
        "  --list-passes      the passes: programs, prerequisites, options, defaults\n"
        "  --passes=SPEC      run exactly this pipeline, e.g.\n"
        "                     'lower,autodiff,optimizer,partition(bucket_mb=25),precision(bf16),\n"
        "                     fuse,memplan' (--bucket-mb/--precision: the options it omits)\n"
        "  --disable-pass=P[,P...]  drop passes from the default pipeline (--no-fuse is\n"
        "                     --disable-pass=fuse, --no-memplan --disable-pass=memplan)\n"
        "  --print-pipeline   print the pipeline the other flags give, in --passes syntax\n"
        "                     (with --from-ir: the passes left to run)\n"
        "  --print-ir-after=PASS|all|changed  write the IR after each such pass to\n"
        "                     --dump-dir DIR as NN-PASS.train.ir / .eval.ir (00: elaborate)\n"
        "  --dump-dir DIR     where --print-ir-after writes (created if missing)\n"
        "  --time-passes      a row per pass: ms, nodes before/after, kernels, arena bytes\n"
        "  -h, --help         this text\n"
        "passes of the default pipeline, in order (PASS of --dump-ir=PASS):\n"
        "  elaborate          the training graph as the frontend built it\n",
        f);
    for (const pass_info *p = pass_registry; p->name; p++)
        fprintf(f, "  %-18s %s%s\n", p->name, p->about,
                p->programs & PASS_EVAL ? "" : " (train only)");
}

/* "--flag=VALUE" or "--flag VALUE" into *v: 1 when s is flag (0 when it is
 * not, -1 when the value is missing: reported). */
static int flag_value(const char *flag, int argc, char **argv, int *i, const char **v) {
    const char *s = argv[*i];
    size_t n = strlen(flag);
    if (strncmp(s, flag, n)) return 0;
    if (s[n] == '=') return *v = s + n + 1, 1;
    if (s[n]) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "dpc: error: missing value after: %s\n", flag);
        return -1;
    }
    *v = argv[++*i];
    return 1;
}

static int die(const char *msg, const char *arg) {
    fprintf(stderr, "dpc: error: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 1;
}

static int list_passes, print_pipeline;

/* Returns 0 on success, 1 on a usage error (already reported), -1 for --help. */
static int parse_args(int argc, char **argv, dpc_options *a) {
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v;
        int got;
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) return -1;
        if ((got = flag_value("--passes", argc, argv, &i, &v))) {
            if (got < 0) return 1;
            a->passes = v;
            continue;
        }
        if ((got = flag_value("--disable-pass", argc, argv, &i, &v))) {
            if (got < 0) return 1;
            a->disable_passes = v;
            continue;
        }
        if ((got = flag_value("--print-ir-after", argc, argv, &i, &v))) {
            if (got < 0) return 1;
            a->print_ir_after = v;
            continue;
        }
        if ((got = flag_value("--dump-dir", argc, argv, &i, &v))) {
            if (got < 0) return 1;
            a->dump_dir = v;
            continue;
        }
        if (!strcmp(s, "-o") || !strcmp(s, "--dot") || !strcmp(s, "--batch") ||
            !strcmp(s, "--target") || !strcmp(s, "--emit-kernels") || !strcmp(s, "--bucket-mb") ||
            !strcmp(s, "--max-memory") || !strcmp(s, "--precision") || !strcmp(s, "--device") ||
            !strcmp(s, "--from-ir")) {
            if (i + 1 >= argc) return die("missing value after", s);
            const char *v = argv[++i];
            if (!strcmp(s, "-o"))
                a->out = v;
            else if (!strcmp(s, "--dot"))
                a->dot = v;
            else if (!strcmp(s, "--emit-kernels"))
                a->emit_dir = v;
            else if (!strcmp(s, "--max-memory"))
                a->max_memory = v;
            else if (!strcmp(s, "--device"))
                a->cost_device = v;
            else if (!strcmp(s, "--from-ir"))
                a->from_ir = v;
            else if (!strcmp(s, "--precision")) {
                pass_precision_kind p;
                if (pass_precision_parse(v, &p))
                    return die("--precision takes fp32 or bf16, got", v);
                a->precision = v;
            } else if (!strcmp(s, "--target")) {
                if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "all"))
                    return die("--target takes cpu, cuda or all, got", v);
                a->target = v;
            } else if (!strcmp(s, "--bucket-mb")) {
                /* partition's bucket_mb: its schema says what is allowed */
                const pass_info *p = pass_find("partition");
                char why[256];
                if (pass_opt_parse(&p->opts[pass_opt_find(p, "bucket_mb")], v, &a->bucket_mb, why,
                                   sizeof why))
                    return die("--bucket-mb", why);
            } else {
                int64_t b;
                if (ir_parse_i64(v, &b) || b <= 0 || b > 1 << 20)
                    return die("--batch needs a positive integer, got", v);
                a->batch = (int)b;
            }
        } else if (!strcmp(s, "--summary")) {
            a->summary = 1;
        } else if (!strcmp(s, "--no-fuse")) {
            a->no_fuse = 1;
        } else if (!strcmp(s, "--layout") || !strcmp(s, "--layout-report")) {
            a->layout = s[8] ? 2 : 1;
        } else if (!strcmp(s, "--no-memplan")) {
            a->no_memplan = 1;
        } else if (!strcmp(s, "--sync-bn")) {
            a->sync_bn = 1;
        } else if (!strcmp(s, "--list-passes")) {
            list_passes = 1;
        } else if (!strcmp(s, "--print-pipeline")) {
            print_pipeline = 1;
        } else if (!strcmp(s, "--time-passes")) {
            a->time_passes = 1;
        } else if (!strcmp(s, "--stats")) {
            a->stats = 1;
        } else if (!strcmp(s, "--cost")) {
            a->cost = 1;
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
    int print_only = list_passes || print_pipeline; /* no model needed */
    if (!a->model && !a->from_ir && !print_only)
        return die("no model file (usage: dpc MODEL.net -o PLAN)", NULL);
    if (!print_only && !a->out && !a->summary && !a->dump_ir && !a->dot && !a->stats &&
        !a->emit_dir && !a->cost && !a->print_ir_after && !a->time_passes && a->layout < 2)
        return die("nothing to do: give -o PLAN, --summary, --dump-ir, --dot, --stats, --cost, "
                   "--emit-kernels, --print-ir-after, --time-passes or --layout-report",
                   NULL);
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
    dpc_options a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc) return 1;
    char err[16384];
    if (list_passes) pass_list(stdout);
    if (print_pipeline) {
        pass_pipeline pl;
        if (dpc_pipeline(&a, &pl, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        pass_pipeline_print(&pl, stdout);
    }
    if (list_passes || print_pipeline) return 0;
    if (dpc_compile(&a, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}
