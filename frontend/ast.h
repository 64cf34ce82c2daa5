/* frontend/ast.h — internal to frontend/: the syntax tree, the arena it lives
 * in, diagnostics, and the hand-offs between lexer, parser, checker and
 * elaborator. Nothing outside frontend/ includes this.
 *
 * Flow: fe_parse_string() checks the bytes are text, runs the Flex/Bison
 * parser (which builds the tree with the fe_new_* helpers below), then
 * fe_check() (names, blocks, calls, train section) and one trial
 * fe_build_graph() so that type and shape errors surface at parse time too.
 *
 * Memory: every tree node and string is carved from the program's arena and
 * released in one go by fe_free(), so no error path can leak a node.
 */
#ifndef DPC_FE_AST_H
#define DPC_FE_AST_H

#include <stddef.h>
#include <stdint.h>

#include "frontend/frontend.h"
#include "ir/ir.h"

/* Limits that keep hostile input from exhausting the stack or int64. */
enum {
    FE_MAX_EXPR_DEPTH = 100, /* nesting of calls in one expression (a sum of
                                  * any length is one level) */
    FE_MAX_CALL_DEPTH = 50,  /* nesting of block calls */
    FE_MAX_NODES = 100000,   /* IR nodes in one graph */
    FE_MAX_CALLS = 1 << 16,  /* block calls while elaborating one graph */
    FE_MAX_STEPS = 1 << 20,  /* expressions evaluated for one graph */
    FE_MAX_OPEN = 8,         /* tracked open braces, for "unterminated" */
    FE_MAX_OP_ARGS = 9,
};
#define FE_MAX_SIZE  ((int64_t)1 << 24) /* any dimension, channel count, ... */
#define FE_MAX_NUMEL IR_MAX_NUMEL       /* elements in one tensor */

typedef struct {
    int line, col;
} fe_loc;

/* ---- arena -------------------------------------------------------------- */

typedef struct fe_chunk fe_chunk;
typedef struct {
    fe_chunk *head;
} fe_arena;

void *fe_alloc(fe_arena *a, size_t n); /* zeroed; aborts when memory runs out */
char *fe_strndup(fe_arena *a, const char *s, size_t n);
void fe_arena_free(fe_arena *a);

/* String-keyed hash map in an arena (never shrinks, never freed alone). */
typedef struct {
    const char *key;
    void *val;
} fe_slot;
typedef struct {
    fe_slot *slot;
    size_t cap, n;
} fe_map;

void *fe_map_get(const fe_map *m, const char *key); /* NULL when absent */
void fe_map_put(fe_arena *a, fe_map *m, const char *key, void *val);

/* ---- diagnostics ---------------------------------------------------------- */

/* Only the first error is printed: one clear line, never a cascade. With
 * msg set (msglen > 0) it is written there, without the newline, instead of
 * to stderr. */
typedef struct {
    const char *path;
    int nerrors;
    char *msg;
    size_t msglen;
} fe_diag;

void fe_error(fe_diag *d, fe_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A number token (it has a '.' or an exponent): its value and its text. */
typedef struct {
    double v;
    const char *text;
} fe_float;

/* "-" and text, in the arena: the text of a negated number. */
const char *fe_negated(fe_program *P, const char *text);

/* Where an integer is wanted and a number f came: " (write 3: ...)" when f
 * is integral, so `k=3.0` says how to fix it; "" otherwise. */
void fe_int_hint(int is_float, double f, char *buf, size_t n);

/* ---- expressions -------------------------------------------------------- */

/* FE_ADD and FE_MUL are chains, their terms in args, each arg's op the
 * operator before it ('+' '-', or '*' '/' and 'F' for `//`; the first's 0):
 * a long sum is one level deep. FE_NEG is unary minus on anything but a
 * literal (`-3` is the literal -3). */
typedef enum { FE_INT, FE_FLOAT, FE_BOOL, FE_NAME, FE_CALL, FE_ADD, FE_MUL, FE_NEG } fe_expr_kind;

typedef struct fe_expr fe_expr;
typedef struct fe_block fe_block;
typedef struct fe_opdef fe_opdef;

typedef struct fe_arg {
    struct fe_arg *next;
    const char *key; /* NULL when positional */
    fe_loc key_loc;
    fe_expr *value;
    int slot; /* parameter index, set by the checker */
    int op;   /* FE_ADD / FE_MUL terms: the operator before this one */
} fe_arg;

struct fe_expr {
    fe_expr_kind kind;
    fe_loc loc; /* literal, name, callee, or the first '+' */
    int depth;
    int64_t i;        /* FE_INT, FE_BOOL */
    double f;         /* FE_FLOAT */
    const char *text; /* FE_FLOAT: as written ("3.0", "-1e-5"), for messages */
    const char *name;
    fe_arg *args; /* FE_CALL, in source order; FE_ADD: the terms, each
                   * arg's key_loc the '+' before it (the first: the term) */
    int nargs;
    /* resolved by the checker: exactly one is set for a call */
    const fe_opdef *op;
    const fe_block *block;
    int sqrt; /* the scalar function sqrt(n) */
};

/* `name = value`, or with count set `repeat count { body }` (name NULL). */
typedef struct fe_stmt {
    struct fe_stmt *next;
    const char *name;
    fe_loc loc;
    fe_expr *value;
    fe_expr *count;
    struct fe_stmt *body;
    int depth;                /* repeats nested in it, itself included */
    struct fe_ident *targets; /* `a, b = split(...)`: every name (name is the first); else NULL */
} fe_stmt;

typedef struct fe_ident {
    struct fe_ident *next;
    const char *name;
    fe_loc loc;
} fe_ident;

struct fe_block {
    fe_block *next;
    const char *name;
    fe_loc loc;
    fe_ident *params;
    int nparams;
    fe_stmt *body;
    fe_expr *ret; /* NULL: reported by the checker */
    int mark;     /* recursion check: 0 new, 1 on the path, 2 done */
};

/* ---- numbers in declarations and the train section ------------------------ */

typedef struct fe_num {
    struct fe_num *next;
    fe_loc loc;
    int is_float;
    int64_t i;
    double f;
    const char *text; /* a float as written, for messages */
    fe_expr *expr;    /* written as an expression: consts.c sets the rest */
} fe_num;

typedef struct fe_input {
    struct fe_input *next;
    const char *name;
    fe_loc loc;
    fe_num *dims;    /* image[3, 32, 32] */
    fe_num *classes; /* label class(10); NULL for a tensor input */
    int integer;     /* tokens int[T]: i32 ids with dims */
} fe_input;

/* `const NAME = value`: its value once evaluated (consts.c), a --set
 * applied. kind is FE_INT, FE_FLOAT or FE_BOOL. */
typedef struct fe_const {
    struct fe_const *next;
    const char *name;
    fe_loc loc;
    fe_expr *value;
    fe_expr_kind kind;
    int64_t i;
    double f;
    const char *text; /* FE_FLOAT as written (a literal or the --set), else NULL */
} fe_const;

typedef struct fe_network {
    struct fe_network *next;
    const char *name;
    fe_loc loc;
    fe_stmt *body;
} fe_network;

typedef enum {
    FE_T_BATCH,
    FE_T_EPOCHS,
    FE_T_INIT,
    FE_T_OPTIMIZER,
    FE_T_LR,
    FE_T_LR_SCALING,
    FE_T_WARMUP,
    FE_T_DATA,
    FE_T_EVAL_BATCH,
    FE_T_PAD,
    FE_T_RANDOM_CROP,
    FE_T_RANDOM_MIRROR,
    FE_T_NORMALIZE,
    FE_T_RESIZE,
    FE_T_ZERO_INIT_RESIDUAL,
    FE_T_CLIP_GRAD_NORM,
    FE_T_TOKENS_TRAIN, /* data tokens { train "FILE"; val "FILE"; block T } */
    FE_T_TOKENS_VAL,
    FE_T_BLOCK,
    FE_T_COUNT
} fe_titem_kind;

/* key=num, key=true|false, or key=(name, ...) (optimizer exclude lists). */
typedef enum { FE_KW_NUM, FE_KW_BOOL, FE_KW_NAMES } fe_kw_kind;
typedef struct fe_kw {
    struct fe_kw *next;
    const char *key;
    fe_loc loc;
    fe_kw_kind kind;
    fe_num *value;       /* FE_KW_NUM */
    int boolean;         /* FE_KW_BOOL */
    struct fe_kw *names; /* FE_KW_NAMES: one entry per name, as its key */
} fe_kw;

typedef struct fe_pair {
    struct fe_pair *next;
    fe_num *key, *value;
} fe_pair;

typedef struct fe_titem {
    struct fe_titem *next;
    fe_titem_kind kind;
    fe_loc loc;
    fe_num *num;       /* batch, epochs, warmup, eval batch, pad, random_crop */
    const char *ident; /* init xavier, optimizer sgd, lr_scaling linear, data cifar10;
                        * a token file's name (train "train.bin") */
    fe_loc ident_loc;
    fe_kw *kws;         /* (magnitude=2.24) */
    fe_pair *pairs;     /* lr {0: 0.1, ...} */
    fe_num *mean, *std; /* normalize */
    fe_loc mean_loc, std_loc;
    struct fe_titem *items; /* data cifar10 { ... } */
} fe_titem;

typedef struct fe_train_sec {
    struct fe_train_sec *next;
    fe_loc loc;
    fe_titem *items;
} fe_train_sec;

/* ---- the program -------------------------------------------------------- */

typedef struct {
    const char *what, *name;
    fe_loc loc;
} fe_open;

struct fe_program {
    fe_arena arena;
    fe_diag diag;
    char *path;
    /* declarations, each list in source order */
    fe_input *inputs, *inputs_last;
    fe_block *blocks, *blocks_last;
    fe_network *networks, *networks_last; /* exactly one after checking */
    fe_train_sec *trains, *trains_last;   /* at most one after checking */
    fe_const *consts, *consts_last;
    fe_map const_map;      /* name -> fe_const, after fe_check_consts */
    const fe_define *defs; /* --set NAME=VALUE, applied by fe_check_consts */
    int ndefs;
    ir_train train;         /* defaults + the train section, validated */
    int zero_init_residual; /* the train section's switch (elab.c's batchnorm) */
    /* lexer state */
    int line, col;  /* position of the next character */
    fe_loc end;     /* just past the last token: where EOF is reported */
    int train_mode; /* 0 outside, 1 after `train`, 2 inside its braces */
    int train_depth;
    char tok[48];              /* text of the last token, for syntax errors */
    fe_open open[FE_MAX_OPEN]; /* innermost braces not yet closed */
    int nopen;
};

/* List under construction in the parser: O(1) append. */
typedef struct {
    void *first, *last;
} fe_list;

/* Tree builders, used by parser actions. NULL means an error was reported. */
fe_expr *fe_new_literal(fe_program *P, fe_expr_kind kind, fe_loc loc, int64_t i, double f);
fe_expr *fe_new_name(fe_program *P, const char *name, fe_loc loc);
fe_expr *fe_new_call(fe_program *P, const char *name, fe_loc loc, fe_arg *args);
/* `a + b + c` from its terms (args with no key); a lone term is returned
 * as it is. */
fe_expr *fe_new_sum(fe_program *P, fe_arg *terms);
/* The same for a product `a * b / c`. */
fe_expr *fe_new_product(fe_program *P, fe_arg *terms);
/* -e: a negated literal when e is one, else FE_NEG. */
fe_expr *fe_new_neg(fe_program *P, fe_loc loc, fe_expr *e);
/* `repeat count { body }`; NULL after an error (nested too deeply). */
fe_stmt *fe_new_repeat(fe_program *P, fe_loc loc, fe_expr *count, fe_stmt *body);
/* A number written as an expression (input dims, train items). */
fe_num *fe_new_num_expr(fe_program *P, fe_expr *e);
void fe_add_const(fe_program *P, const char *name, fe_loc loc, fe_expr *value);
fe_arg *fe_new_arg(fe_program *P, const char *key, fe_loc key_loc, fe_expr *value);
fe_stmt *fe_new_stmt(fe_program *P, const char *name, fe_loc loc, fe_expr *value);
/* `a, b, c = value`: targets has two names or more. */
fe_stmt *fe_new_tuple_stmt(fe_program *P, struct fe_ident *targets, fe_expr *value);
fe_ident *fe_new_ident(fe_program *P, const char *name, fe_loc loc);
fe_num *fe_new_num(fe_program *P, fe_loc loc, int is_float, int64_t i, double f);
fe_kw *fe_new_kw(fe_program *P, const char *key, fe_loc loc, fe_num *value);
fe_pair *fe_new_pair(fe_program *P, fe_num *key, fe_num *value);
fe_titem *fe_new_titem(fe_program *P, fe_titem_kind kind, fe_loc loc);
void fe_add_input(fe_program *P, const char *name, fe_loc loc, fe_num *dims, fe_num *classes);
void fe_add_int_input(fe_program *P, const char *name, fe_loc loc, const char *type, fe_loc tloc,
                      fe_num *dims);
void fe_add_block(fe_program *P, const char *name, fe_loc loc, fe_ident *params, fe_stmt *body,
                  fe_expr *ret);
void fe_add_network(fe_program *P, const char *name, fe_loc loc, fe_stmt *body);
void fe_add_train(fe_program *P, fe_loc loc, fe_titem *items);
void fe_push_open(fe_program *P, const char *what, const char *name, fe_loc loc);
void fe_pop_open(fe_program *P);

/* Runs the parser over src[0..len); 0 on success. */
int fe_run_parser(fe_program *P, const char *src, size_t len);

/* ---- operators ---------------------------------------------------------- */

/* FE_ARG_WORD: one of a fixed set of bare words (gelu's approx=tanh), not
 * evaluated; elaboration sees its index in the set as an integer. */
typedef enum { FE_ARG_TENSOR, FE_ARG_INT, FE_ARG_FLOAT, FE_ARG_BOOL, FE_ARG_WORD } fe_argkind;

typedef struct {
    const char *name;
    fe_argkind kind;
    int required;
    double def;        /* default when not required */
    int64_t min;       /* smallest accepted integer */
    const char *words; /* FE_ARG_WORD: the set, '|' separated, the default first */
} fe_argspec;

typedef enum {
    FE_OP_CONV,
    FE_OP_BATCHNORM,
    FE_OP_RELU,
    FE_OP_ADD,
    FE_OP_MAXPOOL,
    FE_OP_AVGPOOL,
    FE_OP_GLOBAL_AVGPOOL,
    FE_OP_FLATTEN,
    FE_OP_DENSE,
    FE_OP_SOFTMAX_CE,
    FE_OP_SIGMOID,
    FE_OP_CLIP,
    FE_OP_RELU6,
    FE_OP_MUL,
    FE_OP_CONCAT,
    FE_OP_DROPOUT,
    FE_OP_TANH,
    FE_OP_GELU,
    FE_OP_LAYERNORM,
    FE_OP_SOFTMAX,
    FE_OP_EMBEDDING,
    FE_OP_MATMUL,
    FE_OP_SUB,
    FE_OP_RESHAPE,
    FE_OP_PERMUTE,
    FE_OP_TRANSPOSE,
    FE_OP_SLICE,
    FE_OP_SPLIT,
    FE_OP_MASK,
    FE_OP_ATTENTION,
    FE_OP_POSITIONS,
    FE_OP_CLASS_TOKEN,
} fe_op_id;

struct fe_opdef {
    const char *name;
    fe_op_id id;
    int nargs;
    fe_argspec arg[FE_MAX_OP_ARGS];
};

const fe_opdef *fe_find_op(const char *name); /* NULL when not built in */
/* The index of word arg (a bare name) in the set of op's FE_ARG_WORD
 * parameter slot; -1 with a message naming the set when it is not one. */
int fe_word_arg(const fe_opdef *op, int slot, const fe_expr *arg, char *msg, size_t n);
/* The built-in operator nearest a misspelled name (base_near_try), or NULL. */
const char *fe_nearest_op(const char *name);

/* ---- constants and scalar arithmetic (consts.c) ------------------------------- */

/* A scalar: kind FE_INT, FE_FLOAT or FE_BOOL; text as fe_const's. */
typedef struct {
    fe_expr_kind kind;
    int64_t i;
    double f;
    const char *text;
} fe_scalar;

/* a op b into *a, op '+' '-' '*' '/' or 'F' (`//`): integers exactly
 * (overflow and division by zero refused), `/` and a number on either
 * side give a number; booleans take no arithmetic. -1 with the message in
 * err. */
int fe_scalar_op(int op, fe_scalar *a, const fe_scalar *b, char *err, size_t n);
/* -a, sqrt(a): the same. */
int fe_scalar_neg(fe_scalar *a, char *err, size_t n);
int fe_scalar_sqrt(fe_scalar *a, char *err, size_t n);
/* The constants in order, each --set applied, then every fe_num written
 * as an expression; names checked against inputs, blocks and operators.
 * Runs first in fe_check. 0 when fine. */
int fe_check_consts(fe_program *P);
/* A computed number as text that reads as one: 2.0, not 2. */
const char *fe_float_text(double f, char *buf, size_t n);
/* The constant called name, or NULL. */
const fe_const *fe_find_const(const fe_program *P, const char *name);

/* Semantic checks after a successful parse; 0 when the program is fine. */
int fe_check(fe_program *P);
/* Checks on the trial training graph g (its inputs first, in declaration
 * order): every input the network reads is one the data feeds, every
 * parameter reaches the loss. 0 when fine. */
int fe_check_graph(fe_program *P, const ir_graph *g);
/* The train section into P->train, each error at its position; inputs:
 * name -> fe_input (frontend/check_train.c). */
int fe_check_train(fe_program *P, const fe_map *inputs);

#endif
