/* libFuzzer target: the safetensors reader (--load-params). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/train/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    rt_st_file *f = rt_st_parse("fuzz.safetensors", data, size, err, sizeof err);
    if (!f) return 0;
    for (int i = 0; i < f->n; i++) { /* every accepted tensor must be readable */
        if (f->tensors[i].numel > (1 << 20)) continue;
        float *host =
            malloc(sizeof *host * (size_t)(f->tensors[i].numel ? f->tensors[i].numel : 1));
        if (!host) abort();
        rt_st_copy(f, i, host);
        free(host);
    }
    rt_st_free(f);
    return 0;
}
