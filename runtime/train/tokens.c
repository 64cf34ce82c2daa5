/* runtime/train/tokens.c — a language model's run (`data tokens`): its
 * programs take "tokens" and "targets" [N, T] i32 and the eval program
 * gives "logits" [N, T, V]; the token files are --data DIR's train and val
 * files the plan names; an epoch is the train file's windows of T+1 over
 * the global batch (runtime/data/tokens.c draws them). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/file.h"
#include "ir/validate.h"
#include "runtime/train/internal.h"

/* Every token must index the embedding's table and the logits' classes. */
static int64_t vocab_of(const ir_graph *g, int64_t logits_vocab) {
    int64_t v = logits_vocab;
    for (int i = 0; i < g->n; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->op != IR_OP_EMBEDDING) continue;
        for (int k = 0; k < n->ninputs; k++) {
            const ir_node *in = &g->nodes[n->input[k]];
            if (in->op == IR_OP_PARAM && in->type.ndim == 2 && in->type.dim[0] < v)
                v = in->type.dim[0];
        }
    }
    return v;
}

int rt_run_check_token_programs(rt_run *r) {
    const ir_graph *tg = r->plan->train, *eg = r->plan->eval;
    char *err = r->err;
    size_t el = sizeof r->err;
    const ir_node *x = rt_train_need(tg, "train", "tokens", 2, IR_I32, err, el);
    const ir_node *y = x ? rt_train_need(tg, "train", "targets", 2, IR_I32, err, el) : NULL;
    const ir_node *lr = y ? rt_train_need(tg, "train", "lr", 1, IR_F32, err, el) : NULL;
    const ir_node *gs = lr ? rt_train_need(tg, "train", "grad_scale", 1, IR_F32, err, el) : NULL;
    const ir_node *loss = gs ? rt_train_need(tg, "train", "loss", 1, IR_F32, err, el) : NULL;
    const ir_node *ex = loss ? rt_train_need(eg, "eval", "tokens", 2, IR_I32, err, el) : NULL;
    const ir_node *lg = ex ? rt_train_need(eg, "eval", "logits", 3, IR_F32, err, el) : NULL;
    if (!lg) return rt_run_fail(r, "%s", err);
    int64_t T = r->t.block;
    r->batch = (int)x->type.dim[0];
    r->c = r->h = 1, r->w = (int)T;
    r->eval_batch = (int)ex->type.dim[0];
    r->classes = (int)lg->type.dim[2];
    if (x->type.dim[1] != T || y->type.dim[0] != r->batch || y->type.dim[1] != T ||
        loss->type.dim[0] != r->batch || ex->type.dim[1] != T || lg->type.dim[0] != r->eval_batch ||
        lg->type.dim[1] != T)
        return rt_run_fail(r,
                           "the plan's programs do not take windows of its block %" PRId64
                           " (tokens and targets [N, %" PRId64 "], logits [N, %" PRId64 ", V])",
                           T, T, T);
    int yi = rt_run_find_node(eg, "targets");
    r->eval_has_label = yi >= 0 && eg->nodes[yi].op == IR_OP_INPUT;
    r->lab = (size_t)T;
    r->logit_elems = (size_t)T * (size_t)r->classes;
    return 0;
}

/* spec/name: the file a plan names inside --data DIR (a plain name:
 * ir_tokens_file_ok, checked again here as the plan is data). */
static int token_path(char *out, size_t n, const char *spec, const char *name, char *err,
                      size_t errlen) {
    if (ir_tokens_file_ok(name, err, errlen)) return -1;
    if (base_path_join(out, n, spec, name) >= (int)n)
        return base_fail(err, errlen, "%s/%s: the path is too long", spec, name);
    return 0;
}

int rt_run_open_tokens(rt_run *r, const char *spec) {
    const rt_train_options *o = r->o;
    char path[4200];
    int64_t T = r->t.block, vocab = vocab_of(r->plan->train, r->classes);
    if (!spec)
        return rt_run_fail(r,
                           "the plan's data section reads tokens: --data DIR names the folder of "
                           "%s and %s (or set $DPC_DATA)",
                           r->t.tokens_train, r->t.tokens_val);
    if (token_path(path, sizeof path, spec, r->t.tokens_train, r->err, sizeof r->err) ||
        !(r->tok_train = rt_tokens_load(path, T, vocab, r->err, sizeof r->err)) ||
        token_path(path, sizeof path, spec, r->t.tokens_val, r->err, sizeof r->err) ||
        !(r->tok_val = rt_tokens_load(path, T, vocab, r->err, sizeof r->err)))
        return rt_run_fail(r, "%s", r->err);
    int slice = r->batch * r->local * r->accum;
    long windows = o->eval_windows > 0 ? o->eval_windows : RT_TOKENS_EVAL_WINDOWS;
    if (rt_batcher_tokens(&r->train_b, r->tok_train, T, slice, RT_BATCH_TRAIN, o->seed, 0, r->err,
                          sizeof r->err) ||
        (o->ranks > 1 &&
         rt_batcher_shard(&r->train_b, r->global, o->rank * slice, r->err, sizeof r->err)) ||
        rt_batcher_tokens(&r->test_b, r->tok_val, T, r->eval_batch, RT_BATCH_EVAL, o->seed, windows,
                          r->err, sizeof r->err) ||
        rt_batcher_tokens(&r->train_eval_b, r->tok_train, T, r->eval_batch, RT_BATCH_EVAL, o->seed,
                          windows, r->err, sizeof r->err))
        return rt_run_fail(r, "%s", r->err);
    if (o->eval_batches > 0 && r->test_b.batches > o->eval_batches)
        r->test_b.batches = o->eval_batches;
    return 0;
}

long rt_run_token_steps(const dpc_plan *plan, const char *spec, int global_batch, char *err,
                        size_t errlen) {
    const ir_train *t = &plan->schedule;
    char path[4200];
    struct stat sb;
    if (!spec)
        return base_fail(err, errlen,
                         "the plan's data section reads tokens: --data DIR names the folder of "
                         "%s and %s (or set $DPC_DATA)",
                         t->tokens_train, t->tokens_val);
    if (token_path(path, sizeof path, spec, t->tokens_train, err, errlen)) return -1;
    if (stat(path, &sb)) return base_fail(err, errlen, "%s: cannot read it", path);
    long long windows = (long long)sb.st_size / 2 / (t->block + 1);
    if (windows / global_batch == 0)
        return base_fail(err, errlen,
                         "%s: %lld windows of %d tokens do not fill one global batch of %d", path,
                         windows, t->block + 1, global_batch);
    return (long)(windows / global_batch);
}
