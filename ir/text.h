/* ir/text.h — the IR text form read back: what `dpc --dump-ir` prints,
 * parsed into graphs again, losslessly (`dpc --from-ir`).
 *
 * A file is an optional header, then one or two programs:
 *
 *     # dpc-ir 1
 *     # model "cnn_small" source "models/cnn_small.net"
 *     # after: optimizer
 *     # train batch=128 epochs=1 eval_batch=128 ... (every ir_train field)
 *     # program train
 *     # graph: 97 nodes
 *     %0 = input "image" : [128,3,32,32] loc(1:7)
 *     ...                                   (ir_dump's lines, ir/ir.h)
 *     # program eval
 *     # graph: 40 nodes
 *     ...
 *     # end
 *
 * `# after:` names the last pass that ran (a pass_registry name, or
 * "elaborate"): the eval program is the eval pipeline up to that point.
 * Other `#` lines (`# kernel g1: ...`) are comments. A graph without a
 * `# program` line before it is the train program, so a bare ir_dump reads
 * as one graph. Writing then reading gives the same graphs, field for field
 * (floats bit for bit), and the same text again.
 *
 * Reading trusts nothing: at most IR_TEXT_MAX_BYTES of text and
 * IR_TEXT_MAX_NODES nodes per graph; every number is range checked; each
 * node's type must be its shape rule's; a graph with fewer node lines than
 * its `# graph: N nodes`, or a file with a `# dpc-ir` line but no `# end`
 * as its last, is a truncated file; each graph must pass
 * ir_verify, and a file with a `# train` line ir_validate (the schedule
 * with both programs, ir/validate.h), refused at the value's line. Errors read as `FILE:LINE:COL: error: ...` (as the .net
 * frontend's), naming what was expected.
 *
 * Usage:
 *     ir_text_file t = {0};
 *     if (ir_text_read("g.ir", &t, err, sizeof err)) fprintf(stderr, "%s\n", err);
 *     ... t.graph[IR_TEXT_TRAIN], t.has_train ? &t.train : NULL, t.after ...
 *     ir_text_write(&t, stdout);       // the same text again
 *     ir_text_free(&t);
 */
#ifndef DPC_IR_TEXT_H
#define DPC_IR_TEXT_H

#include <stddef.h>
#include <stdio.h>

#include "ir/ir.h"

#define IR_TEXT_MAX_BYTES ((size_t)64 << 20)
#define IR_TEXT_MAX_NODES (1 << 18)

enum { IR_TEXT_TRAIN, IR_TEXT_EVAL };

typedef struct {
    char model[IR_NAME_MAX]; /* network name; "" without a `# model` line */
    char source[256];        /* the .net file it came from */
    char after[32];          /* the last pass run; "" without an `# after:` line */
    int has_train;           /* the `# train` line was there: train holds it */
    ir_train train;
    ir_graph *graph[2]; /* IR_TEXT_TRAIN, IR_TEXT_EVAL; NULL when absent */
} ir_text_file;

/* The header lines for what t holds (model, after, train: each only when
 * set). */
void ir_text_write_header(const ir_text_file *t, FILE *f);
/* `# program train|eval`, then ir_dump(g) unless g is NULL (a caller whose
 * graph is printed later, by the pass pipeline's dump). */
void ir_text_write_program(int which, const ir_graph *g, FILE *f);
/* `# end`: the last line of a file with a header (a cut file is refused). */
void ir_text_write_end(FILE *f);
/* Header, every program t holds, `# end`. */
void ir_text_write(const ir_text_file *t, FILE *f);

/* Parses len bytes of text named name (for messages) into *out (zeroed
 * first). 0, or -1 with the message in err and nothing left in *out. */
int ir_text_parse(const char *name, const char *text, size_t len, ir_text_file *out, char *err,
                  size_t errlen);
/* ir_text_parse of a file (a regular file of at most IR_TEXT_MAX_BYTES). */
int ir_text_read(const char *path, ir_text_file *out, char *err, size_t errlen);
void ir_text_free(ir_text_file *t);

#endif
