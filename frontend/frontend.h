/* frontend/frontend.h — the .net language: parse, check, elaborate to IR.
 *
 * Usage:
 *     fe_program *p = fe_parse_file("models/resnet18.net");
 *     if (!p) return 1;                 // the error is already on stderr as
 *                                       // file:line:col: error: message
 *     ir_train t;
 *     ir_graph *train = fe_build_graph(p, t.batch, 1);   // training program
 *     ir_graph *eval  = fe_build_graph(p, t.eval_batch, 0);
 *     fe_free(p);
 *
 * Parsing checks syntax, names, blocks (unknown, duplicate, recursive,
 * argument counts, keywords) and the train section; fe_build_graph expands
 * blocks into IR nodes and reports shape errors at the offending expression.
 * fe_parse_* also elaborates once at the train batch, so a program it
 * returns builds at any sane batch, and checks that graph: an input the
 * network reads must be one the data fills (image, label), and every
 * parameter must reach the loss; both are reported at their source. The grammar is documented at the top of
 * frontend/parser.y. Every diagnostic is one line on stderr; functions then
 * return NULL / -1.
 */
#ifndef DPC_FRONTEND_H
#define DPC_FRONTEND_H

#include "ir/ir.h"

typedef struct fe_program fe_program;

fe_program *fe_parse_file(const char *path);
/* Parse from memory; `path` is only used in messages. */
fe_program *fe_parse_string(const char *path, const char *src, size_t len);
/* The same, with the diagnostic written to err (one line, no newline)
 * instead of stderr. */
fe_program *fe_parse_file_err(const char *path, char *err, size_t errlen);
fe_program *fe_parse_string_err(const char *path, const char *src, size_t len, char *err,
                                size_t errlen);
/* With --set NAME=VALUE overrides of the file's constants (n of them):
 * each must name a declared constant and be of its kind. */
typedef struct {
    const char *name, *value;
} fe_define;
fe_program *fe_parse_file_defs(const char *path, const fe_define *defs, int n, char *err,
                               size_t errlen);
fe_program *fe_parse_string_defs(const char *path, const char *src, size_t len,
                                 const fe_define *defs, int n, char *err, size_t errlen);
void fe_free(fe_program *p);

/* Name of the `network` (e.g. "resnet18_v1"). */
const char *fe_network_name(const fe_program *p);
/* The train section, defaults filled in, already validated by the parser. */
const ir_train *fe_train(const fe_program *p);
/* Whether the file had a train section (else fe_train is all defaults). */
int fe_has_train(const fe_program *p);

/* Elaborates the network at the given per-device batch. training=1 gives
 * BatchNorm batch statistics, 0 running statistics. Parameter and state
 * names and their order are the same for every batch and mode. */
ir_graph *fe_build_graph(const fe_program *p, int batch, int training);
/* The same, with the diagnostic in err instead of on stderr. */
ir_graph *fe_build_graph_err(const fe_program *p, int batch, int training, char *err,
                             size_t errlen);

#endif
