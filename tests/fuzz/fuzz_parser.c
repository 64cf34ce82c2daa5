/* libFuzzer target: the .net frontend (lexer, parser, checks, elaboration).
 * Any input must either compile or be refused with one diagnostic. */
#include <stddef.h>
#include <stdint.h>

#include "frontend/frontend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fe_program *p = fe_parse_string("fuzz.net", (const char *)data, size);
    if (!p) return 0;
    const ir_train *t = fe_train(p);
    /* Elaborate at a small batch too: shapes must hold for every batch. */
    ir_graph *g = fe_build_graph(p, 2, 0);
    ir_free(g);
    (void)t;
    fe_free(p);
    return 0;
}
