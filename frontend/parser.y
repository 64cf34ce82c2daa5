/* frontend/parser.y — the .net grammar (Bison, pure, with locations).
 *
 * Whitespace, newlines and `#` comments separate tokens and mean nothing
 * else. `;` may follow any declaration, statement or train item, and is
 * never required. Identifiers are [A-Za-z_][A-Za-z0-9_]*; integers are
 * decimal; numbers have a '.' or an exponent (0.9, 1e-5, 2.).
 *
 *   program   := { input | block | network | train | const | ';' }
 *   const     := 'const' ( IDENT | 'block' ) '=' expr       -- consts.c
 *   input     := 'input' IDENT '[' expr { ',' expr } ']'     -- 1 to 3 dims
 *              | 'input' IDENT 'class' '(' expr ')'          -- class labels
 *              | 'input' IDENT 'int' '[' expr { ',' expr } ']' -- integer ids
 *   block     := 'block' IDENT '(' [ IDENT { ',' IDENT } ] ')'
 *                '{' stmts [ 'return' expr { ';' } ] '}'
 *   network   := 'network' IDENT '{' stmts '}'
 *   stmts     := { assign | repeat | ';' }
 *   assign    := IDENT { ',' IDENT } '=' expr   (several names: split only)
 *   repeat    := 'repeat' expr '{' stmts '}'
 *   expr      := product { ( '+' | '-' ) product }           -- Python's precedence
 *   product   := unary { ( '*' | '/' | '//' ) unary }
 *   unary     := '-' unary | term                            -- `-3`: the literal -3
 *   term      := INT | NUMBER | 'true' | 'false' | IDENT | 'block'
 *              | IDENT '(' [ arg { ',' arg } ] ')' | '(' expr ')'
 *   arg       := expr | IDENT '=' expr                       -- keyword arg
 *
 *   train     := 'train' '{' { titem | ';' } '}'
 *   titem     := 'batch' expr [ 'per' 'device' ]             -- exprs: consts.c folds them
 *              | 'epochs' expr
 *              | 'init' IDENT [ kwargs ]                     -- xavier(magnitude=2.24)
 *              | 'optimizer' IDENT [ kwargs ]                -- sgd(momentum=0.9, wd=1e-4)
 *              | 'lr' '{' [ INT ':' num { ',' INT ':' num } [ ',' ] ] '}'
 *              | 'lr' IDENT [ kwargs ]                       -- cosine(base=0.1, final=0, steps=S), poly(base=0.1, power=2, final=0)
 *              | 'lr_scaling' IDENT [ kwargs ]               -- none | linear(reference_batch=128)
 *              | 'warmup' expr 'epochs'
 *              | 'warmup' expr IDENT                         -- the IDENT is 'steps'
 *              | 'data' IDENT [ '{' { ditem | ';' } '}' ]    -- cifar10, imagefolder, npy, tokens
 *              | 'eval' 'batch' expr
 *              | 'zero_init_residual'                        -- gamma 0 for batchnorm(..., residual_last=true)
 *              | 'clip_grad_norm' num                        -- PyTorch's clip_grad_norm_(max_norm)
 *   ditem     := 'pad' expr | 'random_crop' expr | 'random_mirror'
 *              | 'resize' expr                               -- imagefolder only
 *              | 'normalize' 'mean' '(' nums ')' 'std' '(' nums ')'
 *              | 'train' STRING | 'val' STRING | 'block' expr -- tokens only; STRING "..." (train only)
 *   kwargs    := '(' [ kw { ',' kw } ] ')'
 *   kw        := IDENT '=' ( num | 'true' | 'false' | '(' [ IDENT { ',' IDENT } ] ')' )
 *   num       := [ '-' ] ( INT | NUMBER ) | IDENT                -- a constant
 *
 * Train values are checked in check.c, each error pointing at the value:
 * batch, eval batch, epochs, reference_batch > 0; lr values in [0, 1e6];
 * lr epochs start at 0 and strictly increase (at most 32 steps); warmup
 * <= epochs; momentum in [0, 1); wd >= 0; magnitude > 0; pad 0..64;
 * random_crop and resize 1..4096; three means and three stds > 0. Each item at most
 * once per section; omitted items keep ir_train_defaults().
 *
 * Keywords: input class block network train return true false const
 * repeat. Inside the
 * braces of `train` also: batch per device epochs init optimizer lr
 * lr_scaling warmup data eval pad random_crop random_mirror normalize mean
 * std resize zero_init_residual clip_grad_norm — elsewhere these are ordinary names (a variable may be called
 * `data`). The lexer tracks that context itself (see lexer.l).
 *
 * Meaning (checked in check.c and elab.c, not here): names are assigned
 * before use and may be reassigned (`x = relu(x)`); a block sees its
 * parameters, its own locals and the inputs, nothing of the network;
 * inputs cannot be assigned (a block parameter may shadow one); blocks may
 * call blocks defined anywhere in the file but not themselves, directly or
 * not; arguments bind like Python's (positional, then keywords, each
 * parameter once, block parameters all required); values are tensors,
 * integers, numbers and booleans, with Python's arithmetic (elab.c's
 * binop: tensors become add, sub, mul, mul_const, add_const); a repeat runs
 * its body in the enclosing scope; constants are global and never
 * assigned; the network must assign `loss`, and its last value must come
 * from softmax_cross_entropy; a `data` item starts from no augmentation and
 * enables only what it lists. Type and shape errors inside a block that is
 * never called go unreported.
 *
 * Built-in operators (elab.c): conv(x, channels, k, s=1, p=0, bias=true,
 * groups=1) (groups divides both channel counts; the weight is
 * [channels, C/groups, k, k]),
 * batchnorm(x, eps=1e-5, momentum=0.9, gamma_init=1, residual_last=false,
 * sync=false, scale=true, center=true)
 * (gamma_init 0 or 1; residual_last marks the last BN of a residual branch:
 * its gamma starts at 0 under the train section's zero_init_residual, an
 * explicit gamma_init wins; scale=false fixes gamma at 1 and center=false
 * beta at 0, untrained, as Gluon's; neither gamma_init nor residual_last
 * goes with scale=false), relu(x), add(a, b),
 * maxpool(x, k, s=k, p=0), avgpool(x, k, s=k, p=0), global_avgpool(x),
 * flatten(x), dense(x, units, bias=true, tie=E) (E: an embedding's result, whose
 * table is the weight), softmax_cross_entropy(logits, label),
 * sigmoid(x), clip(x, lo, hi) (lo <= hi), relu6(x) (clip(x, 0, 6)), mul(a, b)
 * (the same shape, or [N,C,H,W] with [N,C,1,1] or [N,C] in either order),
 * concat(a, b, ..., axis=1) (2 to 8 tensors along the channels), dropout(x, p)
 * (0 <= p < 1; training only, the identity in eval), tanh(x), gelu(x,
 * approx=erf) (approx a bare word: erf or tanh), sub(a, b); the scalar
 * function sqrt(n).
 */
%code requires {
#include "frontend/ast.h"
}

%code provides {
int yylex(YYSTYPE *lval, YYLTYPE *lloc, void *scanner);
}

%code {
#include <stdio.h>
#include <string.h>

static fe_loc L(YYLTYPE l) {
    fe_loc r = {l.first_line, l.first_column};
    return r;
}

/* O(1) append to a list whose nodes start with a `next` pointer. */
#define APPEND(T, list, node)                                        \
    do {                                                              \
        T *n_ = (node);                                               \
        if ((list).last) ((T *)(list).last)->next = n_;               \
        else (list).first = n_;                                       \
        (list).last = n_;                                             \
    } while (0)
static fe_list one(void *node) { /* a function: `node` is evaluated once */
    fe_list l = {node, node};
    return l;
}
#define ONE(node) one(node)
#define NONE ((fe_list){NULL, NULL})

static void yyerror(YYLTYPE *loc, void *scanner, fe_program *P, const char *msg);
}

%define api.pure full
%define api.token.prefix {TK_}
%define parse.error custom
%define parse.lac full
%locations
%param {void *scanner}
%parse-param {fe_program *P}

%union {
    int64_t i;
    double f;
    const char *s;
    fe_expr *expr;
    fe_arg *arg;
    fe_stmt *stmt;
    fe_num *num;
    fe_kw *kw;
    fe_pair *pair;
    fe_titem *titem;
    fe_list list;
    fe_float ff;
}

%token <s> IDENT "identifier"
%token <s> STRING "quoted string"
%token <i> INT "integer"
%token <ff> FLOAT "number"
%token INPUT "input" CLASS "class" BLOCK "block" NETWORK "network" TRAIN "train"
%token RETURN "return" TRUE "true" FALSE "false"
%token BATCH "batch" PER "per" DEVICE "device" EPOCHS "epochs" INIT "init"
%token OPTIMIZER "optimizer" LR "lr" LR_SCALING "lr_scaling" WARMUP "warmup"
%token DATA "data" EVAL "eval" PAD "pad" RANDOM_CROP "random_crop"
%token RANDOM_MIRROR "random_mirror" NORMALIZE "normalize" MEAN "mean" STD "std" RESIZE "resize"
%token ZERO_INIT_RESIDUAL "zero_init_residual"
%token CONST "const" REPEAT "repeat" FLOORDIV "//"
%token CLIP_GRAD_NORM "clip_grad_norm"

%type <expr> expr term ret unary product
%type <arg> arg
%type <list> sum args args_opt stmts params params_opt dims targets
%type <stmt> assign repeat
%type <num> sint num cnum
%type <s> cname
%type <list> nums kwargs kwlist lr_entries lr_list titems ditems data_block
%type <kw> kw
%type <list> names
%type <s> kwkey
%type <pair> lr_pair
%type <list> pterms
%type <titem> titem ditem

%%

program
    : %empty
    | program decl
    | program ';'
    ;

decl
    : input
    | block
    | network
    | train
    | constdecl
    ;

input
    : INPUT IDENT '[' dims ']'          { fe_add_input(P, $2, L(@2), $4.first, NULL); }
    | INPUT IDENT CLASS '(' cnum ')'    { fe_add_input(P, $2, L(@2), NULL, $5); }
    | INPUT IDENT IDENT '[' dims ']'    { fe_add_int_input(P, $2, L(@2), $3, L(@3), $5.first); }
    ;

dims
    : cnum                              { $$ = ONE($1); }
    | dims ',' cnum                     { $$ = $1; APPEND(fe_num, $$, $3); }
    ;

/* ---- constants and arithmetic ---- */

constdecl
    : CONST cname '=' expr              { fe_add_const(P, $2, L(@2), $4); }
    ;

/* `block` is a keyword only where a declaration starts: a size may be
 * called block (GPT-2's context length). */
cname
    : IDENT
    | BLOCK                             { $$ = "block"; }
    ;

/* A literal stays a plain number; anything else is evaluated by consts.c. */
cnum
    : expr
        { if ($1->kind == FE_INT) $$ = fe_new_num(P, $1->loc, 0, $1->i, 0);
          else if ($1->kind == FE_FLOAT) { $$ = fe_new_num(P, $1->loc, 1, 0, $1->f); $$->text = $1->text; }
          else $$ = fe_new_num_expr(P, $1); }
    ;

block
    : BLOCK IDENT '(' params_opt ')' '{' { fe_push_open(P, "block", $2, L(@6)); }
      stmts ret '}'
        { fe_pop_open(P); fe_add_block(P, $2, L(@2), $4.first, $8.first, $9); }
    ;

params_opt
    : %empty                            { $$ = NONE; }
    | params
    ;

params
    : IDENT                             { $$ = ONE(fe_new_ident(P, $1, L(@1))); }
    | params ',' IDENT                  { $$ = $1; APPEND(fe_ident, $$, fe_new_ident(P, $3, L(@3))); }
    ;

ret
    : %empty                            { $$ = NULL; }
    | RETURN expr semis                 { $$ = $2; }
    ;

semis
    : %empty
    | semis ';'
    ;

network
    : NETWORK IDENT '{' { fe_push_open(P, "network", $2, L(@3)); } stmts '}'
        { fe_pop_open(P); fe_add_network(P, $2, L(@2), $5.first); }
    ;

stmts
    : %empty                            { $$ = NONE; }
    | stmts assign                      { $$ = $1; APPEND(fe_stmt, $$, $2); }
    | stmts repeat                      { $$ = $1; APPEND(fe_stmt, $$, $2); }
    | stmts ';'                         { $$ = $1; }
    ;

repeat
    : REPEAT expr '{' { fe_push_open(P, "repeat", NULL, L(@3)); } stmts '}'
        { fe_pop_open(P); if (!($$ = fe_new_repeat(P, L(@1), $2, $5.first))) YYABORT; }
    ;

assign
    : IDENT '=' expr                    { $$ = fe_new_stmt(P, $1, L(@1), $3); }
    | targets '=' expr                  { $$ = fe_new_tuple_stmt(P, $1.first, $3); }
    ;

/* `q, k, v = split(qkv, 3)`: only split yields several values (check.c) */
targets
    : IDENT ',' IDENT                   { $$ = ONE(fe_new_ident(P, $1, L(@1))); APPEND(fe_ident, $$, fe_new_ident(P, $3, L(@3))); }
    | targets ',' IDENT                 { $$ = $1; APPEND(fe_ident, $$, fe_new_ident(P, $3, L(@3))); }
    ;

/* A sum is one n-ary node, its terms in a list: as long as it likes, one
 * level deep (left recursion keeps the parser's stack flat too). */
expr
    : sum                               { if (!($$ = fe_new_sum(P, $1.first))) YYABORT; }
    ;

sum
    : product                           { $$ = ONE(fe_new_arg(P, NULL, L(@1), $1)); }
    | sum '+' product                   { $$ = $1; APPEND(fe_arg, $$, fe_new_arg(P, NULL, L(@2), $3)); ((fe_arg *)$$.last)->op = '+'; }
    | sum '-' product                   { $$ = $1; APPEND(fe_arg, $$, fe_new_arg(P, NULL, L(@2), $3)); ((fe_arg *)$$.last)->op = '-'; }
    ;

/* Python's precedence: * / // over + -, unary minus over both. */
product
    : pterms                            { if (!($$ = fe_new_product(P, $1.first))) YYABORT; }
    ;

pterms
    : unary                             { $$ = ONE(fe_new_arg(P, NULL, L(@1), $1)); }
    | pterms '*' unary                  { $$ = $1; APPEND(fe_arg, $$, fe_new_arg(P, NULL, L(@2), $3)); ((fe_arg *)$$.last)->op = '*'; }
    | pterms '/' unary                  { $$ = $1; APPEND(fe_arg, $$, fe_new_arg(P, NULL, L(@2), $3)); ((fe_arg *)$$.last)->op = '/'; }
    | pterms FLOORDIV unary             { $$ = $1; APPEND(fe_arg, $$, fe_new_arg(P, NULL, L(@2), $3)); ((fe_arg *)$$.last)->op = 'F'; }
    ;

unary
    : term
    | '-' unary                         { if (!($$ = fe_new_neg(P, L(@1), $2))) YYABORT; }
    ;

term
    : INT                               { $$ = fe_new_literal(P, FE_INT, L(@1), $1, 0); }
    | FLOAT                             { $$ = fe_new_literal(P, FE_FLOAT, L(@1), 0, $1.v); $$->text = $1.text; }
    | TRUE                              { $$ = fe_new_literal(P, FE_BOOL, L(@1), 1, 0); }
    | FALSE                             { $$ = fe_new_literal(P, FE_BOOL, L(@1), 0, 0); }
    | IDENT                             { $$ = fe_new_name(P, $1, L(@1)); }
    | BLOCK                             { $$ = fe_new_name(P, "block", L(@1)); }
    | IDENT '(' args_opt ')'            { if (!($$ = fe_new_call(P, $1, L(@1), $3.first))) YYABORT; }
    | '(' expr ')'                      { $$ = $2; }
    ;

args_opt
    : %empty                            { $$ = NONE; }
    | args
    ;

args
    : arg                               { $$ = ONE($1); }
    | args ',' arg                      { $$ = $1; APPEND(fe_arg, $$, $3); }
    ;

arg
    : expr                              { $$ = fe_new_arg(P, NULL, L(@1), $1); }
    | IDENT '=' expr                    { $$ = fe_new_arg(P, $1, L(@1), $3); }
    ;

/* ---- train section ---- */

train
    : TRAIN '{' { fe_push_open(P, "train section", NULL, L(@2)); } titems '}'
        { fe_pop_open(P); fe_add_train(P, L(@1), $4.first); }
    ;

titems
    : %empty                            { $$ = NONE; }
    | titems titem                      { $$ = $1; APPEND(fe_titem, $$, $2); }
    | titems ';'                        { $$ = $1; }
    ;

titem
    : BATCH cnum per_device
        { $$ = fe_new_titem(P, FE_T_BATCH, L(@1)); $$->num = $2; }
    | EPOCHS cnum
        { $$ = fe_new_titem(P, FE_T_EPOCHS, L(@1)); $$->num = $2; }
    | INIT IDENT kwargs
        { $$ = fe_new_titem(P, FE_T_INIT, L(@1)); $$->ident = $2; $$->ident_loc = L(@2); $$->kws = $3.first; }
    | OPTIMIZER IDENT kwargs
        { $$ = fe_new_titem(P, FE_T_OPTIMIZER, L(@1)); $$->ident = $2; $$->ident_loc = L(@2); $$->kws = $3.first; }
    | LR '{' { fe_push_open(P, "lr schedule", NULL, L(@2)); } lr_entries '}'
        { fe_pop_open(P); $$ = fe_new_titem(P, FE_T_LR, L(@1)); $$->pairs = $4.first; }
    | LR IDENT kwargs
        { $$ = fe_new_titem(P, FE_T_LR, L(@1)); $$->ident = $2; $$->ident_loc = L(@2); $$->kws = $3.first; }
    | LR_SCALING IDENT kwargs
        { $$ = fe_new_titem(P, FE_T_LR_SCALING, L(@1)); $$->ident = $2; $$->ident_loc = L(@2); $$->kws = $3.first; }
    | WARMUP cnum EPOCHS
        { $$ = fe_new_titem(P, FE_T_WARMUP, L(@1)); $$->num = $2; }
    | WARMUP cnum IDENT
        { if (strcmp($3, "steps")) {
              fe_error(&P->diag, L(@3), "unexpected identifier '%s', expected 'epochs' or 'steps'", $3);
              YYABORT;
          }
          $$ = fe_new_titem(P, FE_T_WARMUP, L(@1)); $$->num = $2; $$->ident = $3; $$->ident_loc = L(@3); }
    | DATA IDENT data_block
        { $$ = fe_new_titem(P, FE_T_DATA, L(@1)); $$->ident = $2; $$->ident_loc = L(@2); $$->items = $3.first; }
    | EVAL BATCH cnum
        { $$ = fe_new_titem(P, FE_T_EVAL_BATCH, L(@1)); $$->num = $3; }
    | ZERO_INIT_RESIDUAL
        { $$ = fe_new_titem(P, FE_T_ZERO_INIT_RESIDUAL, L(@1)); }
    | CLIP_GRAD_NORM num
        { $$ = fe_new_titem(P, FE_T_CLIP_GRAD_NORM, L(@1)); $$->num = $2; }
    ;

per_device
    : %empty
    | PER DEVICE
    ;

kwargs
    : %empty                            { $$ = NONE; }
    | '(' ')'                           { $$ = NONE; }
    | '(' kwlist ')'                    { $$ = $2; }
    ;

kwlist
    : kw                                { $$ = ONE($1); }
    | kwlist ',' kw                     { $$ = $1; APPEND(fe_kw, $$, $3); }
    ;

kw
    : kwkey '=' num                     { $$ = fe_new_kw(P, $1, L(@1), $3); }
    | kwkey '=' TRUE                    { $$ = fe_new_kw(P, $1, L(@1), NULL); $$->kind = FE_KW_BOOL; $$->boolean = 1; }
    | kwkey '=' FALSE                   { $$ = fe_new_kw(P, $1, L(@1), NULL); $$->kind = FE_KW_BOOL; }
    | kwkey '=' '(' ')'                 { $$ = fe_new_kw(P, $1, L(@1), NULL); $$->kind = FE_KW_NAMES; }
    | kwkey '=' '(' names ')'           { $$ = fe_new_kw(P, $1, L(@1), NULL); $$->kind = FE_KW_NAMES; $$->names = $4.first; }
    ;

names
    : IDENT                             { $$ = ONE(fe_new_kw(P, $1, L(@1), NULL)); }
    | names ',' IDENT                   { $$ = $1; APPEND(fe_kw, $$, fe_new_kw(P, $3, L(@3), NULL)); }
    ;

/* Inside `train` the schedule words are keywords; as argument names they
 * are just names (so `adam(lr=...)` gets a proper "unknown optimizer"). */
kwkey
    : IDENT
    | BATCH { $$ = "batch"; } | PER { $$ = "per"; } | DEVICE { $$ = "device"; }
    | EPOCHS { $$ = "epochs"; } | INIT { $$ = "init"; } | OPTIMIZER { $$ = "optimizer"; }
    | LR { $$ = "lr"; } | LR_SCALING { $$ = "lr_scaling"; } | WARMUP { $$ = "warmup"; }
    | DATA { $$ = "data"; } | EVAL { $$ = "eval"; } | PAD { $$ = "pad"; }
    | RANDOM_CROP { $$ = "random_crop"; } | RANDOM_MIRROR { $$ = "random_mirror"; }
    | NORMALIZE { $$ = "normalize"; } | MEAN { $$ = "mean"; } | STD { $$ = "std"; }
    | RESIZE { $$ = "resize"; }
    | ZERO_INIT_RESIDUAL { $$ = "zero_init_residual"; }
    | CLIP_GRAD_NORM { $$ = "clip_grad_norm"; }
    ;

lr_entries
    : %empty                            { $$ = NONE; }
    | lr_list
    | lr_list ','
    ;

lr_list
    : lr_pair                           { $$ = ONE($1); }
    | lr_list ',' lr_pair               { $$ = $1; APPEND(fe_pair, $$, $3); }
    ;

lr_pair
    : sint ':' num                      { $$ = fe_new_pair(P, $1, $3); }
    ;

data_block
    : %empty                            { $$ = NONE; }
    | '{' { fe_push_open(P, "data section", NULL, L(@1)); } ditems '}'
        { fe_pop_open(P); $$ = $3; }
    ;

ditems
    : %empty                            { $$ = NONE; }
    | ditems ditem                      { $$ = $1; APPEND(fe_titem, $$, $2); }
    | ditems ';'                        { $$ = $1; }
    ;

ditem
    : PAD cnum
        { $$ = fe_new_titem(P, FE_T_PAD, L(@1)); $$->num = $2; }
    | RANDOM_CROP cnum
        { $$ = fe_new_titem(P, FE_T_RANDOM_CROP, L(@1)); $$->num = $2; }
    | RANDOM_MIRROR
        { $$ = fe_new_titem(P, FE_T_RANDOM_MIRROR, L(@1)); }
    | RESIZE cnum
        { $$ = fe_new_titem(P, FE_T_RESIZE, L(@1)); $$->num = $2; }
    | TRAIN STRING
        { $$ = fe_new_titem(P, FE_T_TOKENS_TRAIN, L(@1)); $$->ident = $2; $$->ident_loc = L(@2); }
    | IDENT STRING
        { $$ = fe_new_titem(P, FE_T_TOKENS_VAL, L(@1)); $$->ident = $2; $$->ident_loc = L(@2);
          if (strcmp($1, "val")) { fe_error(&P->diag, L(@1), "unknown data item '%s' (expected train, val or block)", $1); YYERROR; } }
    | BLOCK cnum
        { $$ = fe_new_titem(P, FE_T_BLOCK, L(@1)); $$->num = $2; }
    | NORMALIZE MEAN '(' nums ')' STD '(' nums ')'
        { $$ = fe_new_titem(P, FE_T_NORMALIZE, L(@1));
          $$->mean = $4.first; $$->mean_loc = L(@2); $$->std = $8.first; $$->std_loc = L(@6); }
    ;

nums
    : num                               { $$ = ONE($1); }
    | nums ',' num                      { $$ = $1; APPEND(fe_num, $$, $3); }
    ;

sint
    : INT                               { $$ = fe_new_num(P, L(@1), 0, $1, 0); }
    | '-' INT                           { $$ = fe_new_num(P, L(@1), 0, -$2, 0); }
    ;

num
    : sint
    | FLOAT                             { $$ = fe_new_num(P, L(@1), 1, 0, $1.v); $$->text = $1.text; }
    | '-' FLOAT                         { $$ = fe_new_num(P, L(@1), 1, 0, -$2.v); $$->text = fe_negated(P, $2.text); }
    | IDENT                             { $$ = fe_new_num_expr(P, fe_new_name(P, $1, L(@1))); } /* a constant */
    ;

%%

/* Only reached when the parser stack overflows (absurd nesting). */
static void yyerror(YYLTYPE *loc, void *scanner, fe_program *P, const char *msg) {
    (void)scanner;
    fe_error(&P->diag, L(*loc), "%s", strcmp(msg, "memory exhausted") == 0
                                          ? "input nested too deeply"
                                          : msg);
}

/* Readable token names: 'input' for keywords and punctuation, plain words
 * for token classes. */
static const char *describe(yysymbol_kind_t sym, char *buf, size_t n) {
    switch (sym) {
    case YYSYMBOL_YYEOF: return "end of file";
    case YYSYMBOL_IDENT: return "identifier";
    case YYSYMBOL_INT: return "integer";
    case YYSYMBOL_FLOAT: return "number";
    default: break;
    }
    const char *name = yysymbol_name(sym);
    size_t len = strlen(name);
    if (len >= 2 && name[0] == '"' && name[len - 1] == '"') { /* "input" alias */
        snprintf(buf, n, "'%.*s'", (int)(len - 2), name + 1);
        return buf;
    }
    if (name[0] == '\'') return name; /* ')' and friends are already quoted */
    snprintf(buf, n, "'%s'", name);     /* keywords */
    return buf;
}

/* Tokens that could only continue what came before (`;`, `+`, a '(' after a
 * name, ...) are left out of "expected" lists: listing them would drown the
 * token the user actually forgot. */
static int noise(yysymbol_kind_t sym) {
    static const char *const names[] = {"';'", "'+'", "'-'", "'('", "'='", "'*'", "'/'", "//"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(yysymbol_name(sym), names[i])) return 1;
    return 0;
}

/* A declaration keyword or the end of the file where a '}' would do: the
 * innermost open brace was never closed. */
static int starts_decl(yysymbol_kind_t sym) {
    return sym == YYSYMBOL_YYEOF || sym == YYSYMBOL_INPUT || sym == YYSYMBOL_BLOCK ||
           sym == YYSYMBOL_NETWORK || sym == YYSYMBOL_TRAIN || sym == YYSYMBOL_CONST;
}

static int yyreport_syntax_error(const yypcontext_t *ctx, void *scanner, fe_program *P) {
    (void)scanner;
    yysymbol_kind_t got = yypcontext_token(ctx);
    fe_loc loc = L(*yypcontext_location(ctx));
    if (got == YYSYMBOL_YYEMPTY) {
        fe_error(&P->diag, loc, "syntax error");
        return 0;
    }
    yysymbol_kind_t exp[YYNTOKENS];
    int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS), kept = 0;
    int closes = 0, assigns = -1; /* after a statement's first name: '=' (',' starts a tuple) */
    for (int i = 0; i < n && n == 2; i++) /* exactly '=' and ',' */
        if (!strcmp(yysymbol_name(exp[i]), "'='")) assigns = i;
    for (int i = 0; i < n; i++) {
        if (!strcmp(yysymbol_name(exp[i]), "'}'")) closes = 1;
        if (!noise(exp[i]) && !(assigns >= 0 && !strcmp(yysymbol_name(exp[i]), "','")))
            exp[kept++] = exp[i];
    }
    if (kept == 0 && assigns >= 0) exp[kept++] = exp[assigns]; /* (kept <= assigns) */
    if (kept == 0) kept = n; /* only noise: show it after all */

    if (closes && starts_decl(got) && P->nopen > 0 && P->nopen <= FE_MAX_OPEN) {
        const fe_open *o = &P->open[P->nopen - 1];
        fe_error(&P->diag, loc, "missing '}' to close %s%s%s%s (opened at %d:%d)", o->what,
                 o->name ? " '" : "", o->name ? o->name : "", o->name ? "'" : "", o->loc.line,
                 o->loc.col);
        return 0;
    }
    char msg[512], b1[48], b2[48];
    size_t used = 0;
    if (got == YYSYMBOL_IDENT || got == YYSYMBOL_INT || got == YYSYMBOL_FLOAT)
        used = (size_t)snprintf(msg, sizeof msg, "unexpected %s '%s'", describe(got, b1, sizeof b1),
                                P->tok);
    else
        used = (size_t)snprintf(msg, sizeof msg, "unexpected %s", describe(got, b1, sizeof b1));
    if (kept > 0 && kept <= 6) {
        for (int i = 0; i < kept && used < sizeof msg; i++) {
            const char *sep = i == 0 ? ", expected " : i == kept - 1 ? " or " : ", ";
            used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s", sep,
                                     describe(exp[i], b2, sizeof b2));
        }
    }
    fe_error(&P->diag, loc, "%s", msg);
    return 0;
}
