/* ir/text_write.c — writing the IR text form (ir/text.h): the header
 * lines, each program as ir_dump prints it, the end mark; and the layout
 * of the `# train` line that text.c reads back: each field of ir/ir.h's
 * table at its rank, the optional parts only when they say something,
 * the ENUM fields' words. */
#include "ir/text.h"

#include <stddef.h>
#include <string.h>

#include "ir/internal.h"

const char *const ir_text_program_names[2] = {"train", "eval"};

/* ---- writing ------------------------------------------------------------ */

static void print_list(const double *v, int n, FILE *f) {
    for (int i = 0; i < n; i++) {
        if (i) fputc(',', f);
        ir_print_double(v[i], f);
    }
}

/* The field at position rank of the `# train` line, or NULL past the end. */
const ir_train_field *ir_train_field_at(int rank) {
    for (int i = 0; i < IR_TRAIN_NFIELDS; i++)
        if (ir_train_fields[i].rank == rank) return &ir_train_fields[i];
    return NULL;
}

/* Whether the line holds f (ir/ir.h's `when`): the optional parts only
 * when they say something, so lines without them read as before. */
static int train_field_present(const ir_train *t, const ir_train_field *f) {
    switch (f->when) {
    case IR_TW_OPTIM: return !ir_train_optim_is_default(t);
    case IR_TW_CURVE: return t->lr_kind != IR_LR_DICT;
    case IR_TW_NONZERO: return IR_TRAIN_NONZERO(t, f);
    case IR_TW_TOKENS: return !strcmp(t->dataset, "tokens");
    case IR_TW_ALWAYS: break;
    }
    return 1;
}

static const char *const lr_kind_names[] = {"dict", "cosine", "poly"};
static const ir_enum_words enums[] = {
    {offsetof(ir_train, optimizer), ir_optimizer_names, 0, IR_OPT_ADAMW, "an optimizer",
     "sgd, lars, lamb or adamw"},
    {offsetof(ir_train, lr_scaling), ir_lr_scaling_names, 0, IR_LR_SCALING_SQRT,
     "none, linear or sqrt", "none, linear or sqrt"},
    {offsetof(ir_train, lr_kind), lr_kind_names, IR_LR_COSINE, IR_LR_POLY, "cosine or poly",
     "cosine or poly"},
};

const ir_enum_words *ir_enum_words_of(const ir_train_field *f) {
    for (size_t i = 0; i < sizeof enums / sizeof *enums; i++)
        if (enums[i].offset == f->offset) return &enums[i];
    return NULL;
}

/* " key=value" of field f. */
static void print_train_field(const ir_train *t, const ir_train_field *fd, FILE *f) {
    const void *v = ir_train_cptr(t, fd);
    fprintf(f, " %s=", fd->key);
    switch (fd->kind) {
    case IR_TK_I32: fprintf(f, "%d", *(const int *)v); break;
    case IR_TK_F64: ir_print_double(*(const double *)v, f); break;
    case IR_TK_F64X3: print_list(v, 3, f); break;
    case IR_TK_STR: ir_print_name(v, 1, f); break;
    case IR_TK_ENUM: fputs(ir_enum_words_of(fd)->names[*(const int *)v], f); break;
    case IR_TK_LR:
        for (int i = 0; i < t->lr_steps; i++) {
            fprintf(f, "%s%d:", i ? "," : "", t->lr_epoch[i]);
            ir_print_double(t->lr_value[i], f);
        }
        break;
    case IR_TK_LR_PART: break; /* with its LR field */
    }
}

/* `# train` and every field present, in rank order. */
static void print_train(const ir_train *t, FILE *f) {
    fprintf(f, "# train");
    const ir_train_field *fd;
    for (int rank = 0; (fd = ir_train_field_at(rank)); rank++)
        if (train_field_present(t, fd)) print_train_field(t, fd, f);
    fputc('\n', f);
}

void ir_text_write_header(const ir_text_file *t, FILE *f) {
    fprintf(f, "# dpc-ir %d\n", IR_TEXT_VERSION);
    if (t->model[0] || t->source[0]) {
        fprintf(f, "# model ");
        ir_print_name(t->model, 1, f);
        fprintf(f, " source ");
        ir_print_name(t->source, 1, f);
        fputc('\n', f);
    }
    if (t->after[0]) fprintf(f, "# after: %s\n", t->after);
    if (t->has_train) print_train(&t->train, f);
}

void ir_text_write_program(int which, const ir_graph *g, FILE *f) {
    fprintf(f, "# program %s\n", ir_text_program_names[which == IR_TEXT_EVAL]);
    if (g) ir_dump(g, f);
}

void ir_text_write_end(FILE *f) { fputs("# end\n", f); }

void ir_text_write(const ir_text_file *t, FILE *f) {
    ir_text_write_header(t, f);
    for (int k = 0; k < 2; k++)
        if (t->graph[k]) ir_text_write_program(k, t->graph[k], f);
    ir_text_write_end(f);
}
