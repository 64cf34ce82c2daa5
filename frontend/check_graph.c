/* frontend/check_graph.c — checks of the elaborated training graph,
 * reported at .net positions: ir/validate.h's rules with the train section
 * (an input no data fills), and every parameter reaching the loss. */
#include <stdlib.h>
#include <string.h>

#include "frontend/ast.h"
#include "base/err.h"
#include "ir/validate.h"

/* The graph with its train section, as every graph is checked
 * (ir/validate.h): an input no data fills, say, at the input's position. */
static int check_valid(fe_program *P, const ir_graph *g) {
    ir_where w;
    char why[512];
    if (!ir_validate(&P->train, g, NULL, &w, why, sizeof why)) return 0;
    fe_loc at = {0, 0};
    if (w.node >= 0)
        at = (fe_loc){g->nodes[w.node].line, g->nodes[w.node].col};
    else if (P->trains)
        at = P->trains->loc;
    fe_error(&P->diag, at, "%s", why);
    return -1;
}

/* A parameter that does not reach the loss gets no gradient (autodiff
 * refuses it); say where it was made and which of the user's names it
 * feeds, the first named statement computed from it. */
static int check_reach(fe_program *P, const ir_graph *g, unsigned char *mark) {
    int loss = ir_loss_node(g);
    if (loss < 0) return 0; /* mark_loss reported it */
    memset(mark, 0, (size_t)g->n);
    mark[loss] = 1;
    for (int i = loss; i >= 0; i--)
        if (mark[i])
            for (int k = 0; k < g->nodes[i].ninputs; k++) mark[g->nodes[i].input[k]] = 1;
    for (int p = 0; p < g->n; p++) {
        const ir_node *n = &g->nodes[p];
        if (n->op != IR_OP_PARAM || mark[p]) continue;
        /* mark[] now: computed from p */
        memset(mark, 0, (size_t)g->n);
        mark[p] = 1;
        /* The user's names: the network's statements (elaboration labels
         * other nodes too, "dense0", "side0.add", for --summary). */
        fe_arena tmp = {0};
        fe_map stmts = {0};
        for (const fe_stmt *s = P->networks->body; s; s = s->next)
            fe_map_put(&tmp, &stmts, s->name, (void *)s);
        const char *feeds = NULL;
        for (int i = p + 1; i < g->n && !feeds; i++) {
            for (int k = 0; k < g->nodes[i].ninputs; k++) mark[i] |= mark[g->nodes[i].input[k]];
            if (mark[i] && fe_map_get(&stmts, g->nodes[i].name)) feeds = g->nodes[i].name;
        }
        if (feeds)
            fe_error(&P->diag, (fe_loc){n->line, n->col},
                     "parameter '%s' does not reach the loss: it feeds '%s', which 'loss' does "
                     "not use",
                     n->name, feeds);
        else
            fe_error(&P->diag, (fe_loc){n->line, n->col},
                     "parameter '%s' does not reach the loss: the result of this call is never "
                     "used",
                     n->name);
        fe_arena_free(&tmp);
        return -1;
    }
    return 0;
}

int fe_check_graph(fe_program *P, const ir_graph *g) {
    unsigned char *mark = calloc((size_t)g->n + 1, 1);
    BASE_CHECK_ALLOC(mark);
    int rc = check_valid(P, g);
    if (!rc) rc = check_reach(P, g, mark);
    free(mark);
    return rc;
}
