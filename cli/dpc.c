/* cli/dpc.c — the compiler's command line: arguments into a dpc_options,
 * then dpc_compile (driver/compile.h) does the work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "ir/parse.h"
#include "passes/passes.h"

static void usage(FILE *f) {
    fputs("usage: dpc MODEL.net [-o PLAN] [--cost [--device h200]] [options]\n"
          "  -o PLAN            write the compiled plan\n"
          "  --summary          layer table and trainable parameter count\n"
          "  --dump-ir[=PASS]   IR text after all passes (or after PASS)\n"
          "  --dot FILE         Graphviz of the final training graph\n"
          "  --batch N          override the per-device batch of the train section\n"
          "  --target cpu|cuda|all  kernel sources to emit (default all)\n"
          "  --no-fuse          one kernel per op (no fusion groups)\n"
          "  --layout           channel-major activations between convolutions (layout pass)\n"
          "  --layout-report    --layout, and print each program's transposes and their reasons\n"
          "  --no-memplan       every tensor in a buffer of its own (no arena)\n"
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
          "  -h, --help         this text\n"
          "passes, in order (PASS of --dump-ir=PASS):\n"
          "  elaborate          the training graph as the frontend built it\n",
          f);
    for (const pass_info *p = pass_registry; p->name; p++)
        fprintf(f, "  %-18s %s%s\n", p->name, p->about,
                p->programs & PASS_EVAL ? "" : " (train only)");
}

static int die(const char *msg, const char *arg) {
    fprintf(stderr, "dpc: error: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
    return 1;
}

/* Returns 0 on success, 1 on a usage error (already reported), -1 for --help. */
static int parse_args(int argc, char **argv, dpc_options *a) {
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) return -1;
        if (!strcmp(s, "-o") || !strcmp(s, "--dot") || !strcmp(s, "--batch") ||
            !strcmp(s, "--target") || !strcmp(s, "--emit-kernels") || !strcmp(s, "--bucket-mb") ||
            !strcmp(s, "--max-memory") || !strcmp(s, "--precision") || !strcmp(s, "--device")) {
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
                double mb;
                if (ir_parse_f64(v, &mb) || !(mb > 0) || mb > 1 << 20)
                    return die("--bucket-mb needs a positive number of MiB, got", v);
                a->bucket_mb = mb;
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
    if (!a->model) return die("no model file (usage: dpc MODEL.net -o PLAN)", NULL);
    if (!a->out && !a->summary && !a->dump_ir && !a->dot && !a->stats && !a->emit_dir && !a->cost &&
        a->layout < 2)
        return die("nothing to do: give -o PLAN, --summary, --dump-ir, --dot, --stats, --cost or "
                   "--emit-kernels",
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
    if (dpc_compile(&a, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    return 0;
}
