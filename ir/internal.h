/* ir/internal.h — what the files behind ir/ir.h share and nothing else
 * includes.
 *
 * Usage:
 *     return base_fail(err, errlen, "got %s", TYPE_STR(&n->type));
 */
#ifndef DPC_IR_INTERNAL_H
#define DPC_IR_INTERNAL_H

#include "ir/ir.h"

/* A type as text in a compound literal that lives as long as the enclosing
 * block: for error messages, several in one call. */
#define TYPE_STR(t) ir_type_str((t), (char[96]){0}, 96)

/* The IR text form's version (`# dpc-ir 1`) and its program names
 * ("train", "eval"), shared by text_write.c and text.c. */
#define IR_TEXT_VERSION 1
extern const char *const ir_text_program_names[2];
/* The `# train` line of the IR text form (text_write.c writes it, text.c
 * reads it): the field at position rank, NULL past the end. */
const ir_train_field *ir_train_field_at(int rank);
/* An ENUM field's words: its names, the first a value may be written as
 * (lr_curve is written only when not dict), what a missing word was
 * expected to be, and the list an unknown word is told. */
typedef struct {
    size_t offset;
    const char *const *names;
    int first, last;
    const char *what, *list;
} ir_enum_words;
const ir_enum_words *ir_enum_words_of(const ir_train_field *f);
/* The shape rules of embedding and embedding_grad (ir/shape_seq.c). */
int ir_infer_embedding(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen);
/* positions and positions_grad (ir/shape_seq.c). */
int ir_infer_positions(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen);
int ir_infer_seq_ce(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen);
int ir_infer_attention(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen);

/* The shape rules of the row ops (layernorm and its primitives, softmax), in
 * shape_rows.c; ir_infer_type's for everything else. */
int ir_infer_rows(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen);
/* dense and its gradients over the last axis of rank 2 or 3, bias_add_last */
int ir_infer_dense_rows(const ir_graph *g, const ir_node *n, ir_type *out, char *err,
                        size_t errlen);
/* matmul, batched over the leading axes */
int ir_infer_matmul(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen);
/* reshape, permute, slice, slice_grad, causal_mask (shape_view.c) */
int ir_infer_view(const ir_graph *g, const ir_node *n, ir_type *out, char *err, size_t errlen);

#endif
