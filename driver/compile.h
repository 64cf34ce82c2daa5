/* driver/compile.h — the whole compile as one call: .net source → frontend
 * → passes → memory plans → kernels → plan file (and the reports dpc
 * prints on the way). cli/dpc.c parses arguments into a dpc_options and
 * calls dpc_compile; tests call it with source text.
 *
 * Usage:
 *     dpc_options o = {0};
 *     o.model = "mlp.net";            // read, or only named when o.source is set
 *     o.out = "mlp.plan";
 *     char err[4096];
 *     if (dpc_compile(&o, err, sizeof err)) fprintf(stderr, "%s\n", err);
 *
 * A dump (--dump-ir, o.dump_after) is the whole IR text form (ir/text.h):
 * a header with the model, the pass it is after and the train section, then
 * the train and the eval program; o.from_ir continues from such a file.
 *
 * On failure err holds the one line dpc prints (no newline): the frontend's
 * "FILE:LINE:COL: error: ...", "FILE: error: ..." for the passes, memory
 * limit and code generation, "dpc: error: ..." for the outputs. Nothing is
 * written to stderr; the reports (summary, IR dumps, stats) go to o->report.
 */
#ifndef DPC_DRIVER_COMPILE_H
#define DPC_DRIVER_COMPILE_H

#include <stddef.h>
#include <stdio.h>

/* passes/passes.h's pipeline: dpc_pipeline's result. This header includes
 * nothing of passes/, so the command line (cli/dpc.c), which includes only
 * driver/ and base/, asks about the passes through the functions below. */
struct pass_pipeline;

enum { DPC_MAX_SETS = 64 }; /* --set options in one command */

typedef struct {
    const char *model;  /* the .net path: read, or named in messages */
    const char *source; /* its text (source_len bytes), or NULL to read model */
    size_t source_len;
    const char *out;         /* -o: the plan file, or NULL */
    const char *dot;         /* --dot: Graphviz of the final training graph, or NULL */
    const char *emit_dir;    /* --emit-kernels: a kernel source per file, or NULL */
    const char *target;      /* cpu | cuda | all (NULL: all): kernels emitted */
    const char *precision;   /* fp32 | bf16 | tf32 (NULL: fp32) */
    const char *conv;        /* im2col | library | auto (NULL: im2col): the conv pass's impl */
    const char *dump_after;  /* --dump-ir=PASS: "elaborate" or a pass_registry name */
    const char *max_memory;  /* a size (base_parse_size), NULL: FMT_MAX_MEMORY_DEFAULT */
    int dump_ir;             /* --dump-ir: the final training graph (or after dump_after) */
    int summary, stats;      /* --summary, --stats */
    int params;              /* --params: the parameter table (ir_params_table) */
    int batch;               /* > 0: overrides the train section's batch */
    const char *const *sets; /* --set NAME=VALUE: the model's constants (nsets of them) */
    int nsets;
    int no_fuse, no_memplan;
    int layout;       /* --layout: 1; --layout-report: 2 (pass_options.layout) */
    int sync_bn;      /* --sync-bn: lower's sync_bn=1, every BatchNorm synchronised */
    double bucket_mb; /* partition's bucket size in MiB, 0: the default */
    FILE *report;     /* summary, dumps, stats, cost; NULL: stdout */
    FILE *notes;      /* `dpc: note:` lines (the defaults a model without a train section
                       * takes); NULL: none */

    int cost;                /* --cost: per-kernel modelled times (codegen/cost.h) */
    const char *cost_device; /* --device for --cost, a cg_devices name (NULL: the first, h200) */

    /* The pipeline (dpc_pipeline): --passes SPEC, else the default less
     * --disable-pass NAMES (and no_fuse, no_memplan); not both. */
    const char *passes, *disable_passes;
    const char *print_ir_after; /* --print-ir-after: a pass, elaborate, all or changed */
    const char *dump_dir;       /* --dump-dir: where print_ir_after's files go */
    int time_passes;            /* --time-passes: a row per pass to the report */

    /* --from-ir: an IR text file (ir/text.h, what --dump-ir prints) to
     * continue from instead of a model: the registry's passes up to its
     * header's `# after:` pass are done (pass_pipeline.done; never
     * memplan), the pipeline (default or passes) runs the rest. Read, or
     * only named when source is set (its text); model stays NULL. */
    const char *from_ir;
} dpc_options;

/* Values a caller may get wrong, in the words of dpc's usage errors
 * ("dpc: error: ..."): the pipeline and dump_after (not with from_ir:
 * dpc_compile checks those once the file is read), max_memory, target,
 * precision, cost_device. 0 or -1. */
int dpc_options_check(const dpc_options *o, char *err, size_t errlen);

/* The pipeline o asks for: the default one (pass_pipeline_default) as
 * --no-fuse, --no-memplan, --disable-pass, --bucket-mb and --precision set
 * it, or --passes over it (those two flags give the options the spec
 * leaves out). With from_ir it reads the file: the passes done are out of
 * the default and refused in --passes. 0 or -1 + "dpc: error: ..." (or
 * the file's error) in err. */
int dpc_pipeline(const dpc_options *o, struct pass_pipeline *out, char *err, size_t errlen);

/* What dpc's command line checks and prints about the passes:
 * --bucket-mb's text by the partition pass's bucket_mb schema into *mb (0,
 * or -1 with the reason in why); whether the precision pass takes name
 * (fp32, bf16, tf32); whether --dump-ir=name names a step (elaborate or
 * a pass); --help's list of the default pipeline's passes;
 * --list-passes (a block per pass); --print-pipeline (the pipeline o asks
 * for, one line; 0, or -1 with dpc_pipeline's error in err). */
int dpc_parse_bucket_mb(const char *text, double *mb, char *why, size_t n);
int dpc_precision_known(const char *name);
int dpc_dump_step_known(const char *name);
void dpc_print_pass_help(FILE *f);
void dpc_list_passes(FILE *f);
int dpc_print_pipeline(const dpc_options *o, FILE *f, char *err, size_t errlen);

/* Checks the options and outputs, compiles, writes what o asks for. 0, or
 * -1 with the message in err. */
int dpc_compile(const dpc_options *o, char *err, size_t errlen);

#endif
