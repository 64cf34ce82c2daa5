/* libFuzzer target: the IR text reader (ir/text.c). Whatever it accepts
 * must write back to text that reads again into the same text (a graph the
 * reader lets through that its own writer cannot reproduce aborts); a
 * refusal must carry a message. */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024];
    ir_text_file t;
    if (ir_text_parse("fuzz.ir", (const char *)data, size, &t, err, sizeof err)) {
        if (!err[0]) abort();
        return 0;
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
