/* libFuzzer target: the IR text reader (ir/text.c). Whatever it accepts
 * must write back to text that reads again into the same text (a graph the
 * reader lets through that its own writer cannot reproduce aborts); a
 * refusal must carry a message.
 *
 * Semantic edits: byte mutations rarely turn a whole dump into one that
 * is well formed but means something else, which is what the validator
 * (ir/validate.h) is for. So an accepted file is edited again, in its
 * decoded fields, by a script of 4 (what, value) byte pairs: the hex of a
 * `# fuzz HEX` comment line, else a hash of the input: a schedule field at the edges of its range, another
 * optimizer or dataset, a gradient flag or fusion group on a node, a
 * float attribute, the train program as the eval program; then written
 * and read back, with the same demands. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/text.h"

static char *write_text(const ir_text_file *t, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) abort();
    ir_text_write(t, f);
    fclose(f);
    return text;
}

/* One edit of t's decoded fields; enums stay in range (the writer prints
 * their names). */
static void semantic_edit(ir_text_file *t, uint8_t what, uint8_t v) {
    static const double reals[] = {-1, 0, 0.5, 0.9, 0.999, 1, 2, 100.5, 1e6, 1e30, 1e300, 1e-9};
    static const int ints[] = {-1, 0, 1, 2, 31, 33, 64, 65, 100, 4096, 1000001, 2147483647};
    double r = reals[v % (sizeof reals / sizeof *reals)];
    int n = ints[v % (sizeof ints / sizeof *ints)];
    ir_train *s = &t->train;
    ir_graph *g = t->graph[(what >> 7) & 1];
    ir_node *nd = g && g->n ? &g->nodes[v % g->n] : NULL;
    switch (what % 24) {
    case 0: s->batch = n; break;
    case 1: s->epochs = n; break;
    case 2: s->eval_batch = n; break;
    case 3: s->optimizer = (ir_optimizer)(v % 4); break;
    case 4: s->momentum = r; break;
    case 5: s->wd = r; break;
    case 6: s->lr_kind = (ir_lr_kind)(v % 3), s->lr_power = r; break;
    case 7: s->std[v % 3] = r; break;
    case 8: s->mean[v % 3] = r; break;
    case 9: snprintf(s->dataset, sizeof s->dataset, "%s", v % 2 ? "mnist" : "cifar10"); break;
    case 10: s->nesterov = v % 2; break;
    case 11: s->eta = r; break;
    case 12: s->beta1 = r; break;
    case 13: s->exclude = v % 4; break;
    case 14: s->pad = n; break;
    case 15: s->random_crop = n; break;
    case 16: s->warmup_epochs = n; break;
    case 17: s->lr_final = r; break;
    case 18:
        if (nd) nd->flags ^= IR_FLAG_GRAD;
        break;
    case 19:
        if (nd) nd->group = v % 4;
        break;
    case 20:
        if (nd) nd->fattr[0] = r;
        break;
    case 21:
        if (nd) nd->fattr[1] = r;
        break;
    case 22: /* the train program as the eval program */
        if (t->graph[0]) {
            ir_free(t->graph[1]);
            t->graph[1] = ir_clone(t->graph[0]);
        }
        break;
    default:
        if (nd && nd->op == IR_OP_BATCHNORM) nd->iattr[0] = !nd->iattr[0];
        break;
    }
}

/* The edit script: `# fuzz HEX` (16 hex digits; a comment to the reader),
 * else FNV-1a of the input. */
static void script(const uint8_t *data, size_t size, uint8_t out[8]) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 0x100000001b3ull;
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(h >> (8 * i));
    static const char key[] = "\n# fuzz ";
    const uint8_t *p = memmem(data, size, key, sizeof key - 1);
    if (!p) return;
    p += sizeof key - 1;
    for (int i = 0; i < 8 && p + 2 * i + 1 < data + size; i++) {
        unsigned v;
        char hex[3] = {(char)p[2 * i], (char)p[2 * i + 1], 0};
        if (sscanf(hex, "%2x", &v) != 1) break;
        out[i] = (uint8_t)v;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024];
    ir_text_file t;
    if (ir_text_parse("fuzz.ir", (const char *)data, size, &t, err, sizeof err)) {
        if (!err[0]) abort();
        return 0;
    }
    if (t.graph[0] || t.graph[1]) {
        uint8_t sc[8];
        script(data, size, sc);
        ir_text_file e = t;
        for (int k = 0; k < 2; k++) e.graph[k] = t.graph[k] ? ir_clone(t.graph[k]) : NULL;
        for (int i = 0; i < 4; i++) semantic_edit(&e, sc[2 * i], sc[2 * i + 1]);
        size_t elen;
        char *etext = write_text(&e, &elen);
        ir_text_free(&e);
        ir_text_file back;
        if (ir_text_parse("edited.ir", etext, elen, &back, err, sizeof err)) {
            if (!err[0]) abort();
        } else {
            size_t l2;
            char *again = write_text(&back, &l2);
            ir_text_file third;
            if (ir_text_parse("again.ir", again, l2, &third, err, sizeof err)) {
                fprintf(stderr, "accepted edited text does not read back: %s\n", err);
                abort();
            }
            ir_text_free(&third);
            ir_text_free(&back);
            free(again);
        }
        free(etext);
    }
    size_t len, len2;
    char *text = write_text(&t, &len);
    ir_text_file back;
    if (ir_text_parse("again.ir", text, len, &back, err, sizeof err)) {
        fprintf(stderr, "accepted text does not read back: %s\n", err);
        abort();
    }
    char *again = write_text(&back, &len2);
    if (len != len2 || memcmp(text, again, len)) abort();
    free(text);
    free(again);
    ir_text_free(&t);
    ir_text_free(&back);
    return 0;
}
